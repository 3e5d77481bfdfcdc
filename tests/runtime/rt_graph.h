/* tests/runtime/rt_graph.h - a tiny graph using every op (a one-block GPT
 * with tied embeddings, a conv branch, softmax+dropout), run for one step
 * with a hook that records each event's name and output values, for the
 * determinism and fault tests. Header-only, test use. */
#ifndef NPROBE_TESTS_RT_GRAPH_H
#define NPROBE_TESTS_RT_GRAPH_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nprobe/runtime.h"

typedef struct rec_event {
    char name[128];
    int kind;
    float *vals;   /* concatenated output tensors (or parameter grads) */
    int64_t n;
} rec_event;

typedef struct recorder {
    rec_event *ev;
    int n, cap;
    float loss;
} recorder;

static inline int rec_hook(const np_hook_event *e, void *user)
{
    recorder *r = user;
    if (!e->name)
        return 0;
    if (r->n == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 64;
        r->ev = realloc(r->ev, sizeof *r->ev * (size_t)r->cap);
    }
    rec_event *x = &r->ev[r->n++];
    snprintf(x->name, sizeof x->name, "%s", e->name);
    x->kind = e->kind;
    int64_t tot = 0;
    for (int i = 0; i < e->n_tensors; i++) {
        const np_hook_tensor *t = &e->tensors[i];
        if ((t->role == NP_ROLE_OUTPUT || t->role == NP_ROLE_PARAMETERS_GRAD) && t->t && np_tensor_f32(t->t))
            tot += t->t->numel;
    }
    x->vals = malloc(sizeof(float) * (size_t)(tot + 1));
    x->n = 0;
    for (int i = 0; i < e->n_tensors; i++) {
        const np_hook_tensor *t = &e->tensors[i];
        if ((t->role == NP_ROLE_OUTPUT || t->role == NP_ROLE_PARAMETERS_GRAD) && t->t && np_tensor_f32(t->t)) {
            memcpy(x->vals + x->n, t->t->data, sizeof(float) * (size_t)t->t->numel);
            x->n += t->t->numel;
        }
    }
    return 0;
}

static inline void rec_free(recorder *r)
{
    for (int i = 0; i < r->n; i++)
        free(r->ev[i].vals);
    free(r->ev);
    memset(r, 0, sizeof *r);
}

enum { G_B = 2, G_T = 8, G_C = 16, G_V = 16 };

/* Sizes of the graph: batch B, sequence T, width C (a perfect square: the
 * residual is viewed as a (B, T, sqrt C, sqrt C) image), vocabulary V. */
typedef struct graph_dims { int B, T, C, V; } graph_dims;

static inline np_status graph_run_dims(np_device dev, np_dtype prec, np_fault fault, uint64_t seed,
                                       recorder *rec, graph_dims gd);

/* One step of the tiny graph (B 2, T 8, C 16, V 16) on a fresh context; fills rec. Returns status. */
static inline np_status graph_run(np_device dev, np_dtype prec, np_fault fault, uint64_t seed, recorder *rec)
{
    return graph_run_dims(dev, prec, fault, seed, rec, (graph_dims){G_B, G_T, G_C, G_V});
}

static inline np_status graph_run_dims(np_device dev, np_dtype prec, np_fault fault, uint64_t seed,
                                       recorder *rec, graph_dims gd)
{
    const int GB = gd.B, GT = gd.T, GC = gd.C, GV = gd.V;
    int GS = 1;
    while ((GS + 1) * (GS + 1) <= GC)
        GS++;
    np_ctx_opts o;
    np_ctx_opts_default(&o);
    o.device = dev;
    o.precision = prec;
    o.fault = fault;
    o.seed = seed;
    np_ctx *ctx = NULL;
    np_status st = np_ctx_new(&ctx, &o, NULL);
    if (st)
        return st;
    np_ctx_set_hook(ctx, rec_hook, rec);
#define P2(nm, a, b, sd, std) np_tensor *nm = np_tensor_new_param(ctx, NP_FLOAT32, 2, (const int64_t[]){a, b}, #nm); np_tensor_fill_normal(nm, seed, sd, 0.0, std)
#define P1(nm, a, sd, mean, std) np_tensor *nm = np_tensor_new_param(ctx, NP_FLOAT32, 1, (const int64_t[]){a}, #nm); np_tensor_fill_normal(nm, seed, sd, mean, std)
    P2(wte, GV, GC, 1, 1.0);
    P2(wpe, GT, GC, 2, 1.0);
    P1(ln_w, GC, 3, 1.0, 0.1);
    P1(ln_b, GC, 4, 0.0, 0.1);
    P2(w_attn, 3 * GC, GC, 5, 0.3);
    P1(b_attn, 3 * GC, 6, 0.0, 0.1);
    P2(w_proj, GC, GC, 7, 0.3);
    P1(b_proj, GC, 8, 0.0, 0.1);
    P2(w_fc, 2 * GC, GC, 9, 0.3);
    P1(b_fc, 2 * GC, 10, 0.0, 0.1);
    P2(w_fc2, GC, 2 * GC, 11, 0.3);
    P2(w_mm, GC, GC, 12, 0.3);
    np_tensor *w_conv = np_tensor_new_param(ctx, NP_FLOAT32, 4, (const int64_t[]){4, GT, 3, 3}, "w_conv");
    np_tensor_fill_normal(w_conv, seed, 13, 0.0, 0.2);
    P1(b_conv, 4, 14, 0.0, 0.1);
    np_tensor *idx = np_tensor_new(ctx, NP_INT64, 2, (const int64_t[]){GB, GT});
    np_tensor *pos = np_tensor_new(ctx, NP_INT64, 1, (const int64_t[]){GT});
    np_tensor *tgt = np_tensor_new(ctx, NP_INT64, 1, (const int64_t[]){GB * GT});
    for (int i = 0; i < GB * GT; i++) {
        np_tensor_i64(idx)[i] = (i * 5 + 3) % (GV - 5);   /* repeats */
        np_tensor_i64(tgt)[i] = (i * 3 + 1) % GV;
    }
    for (int i = 0; i < GT; i++)
        np_tensor_i64(pos)[i] = i;
    np_module *attn = np_module_new(ctx, "h.0.attn", "CausalSelfAttention");
    np_module_add_param(attn, "c_attn.weight", w_attn);

    np_ctx_step_begin(ctx);
    np_tensor *x = np_add(ctx, np_embedding(ctx, idx, wte), np_embedding(ctx, pos, wpe));
    np_tensor *h = np_layer_norm(ctx, x, ln_w, ln_b, 1e-5);
    np_module_begin(ctx, attn);
    np_tensor *qkv = np_linear(ctx, h, w_attn, b_attn);
    np_tensor *p[3] = {0};
    np_split(ctx, qkv, GC, -1, p, 3);
    const int64_t hs[4] = {GB, GT, 2, GC / 2};
    for (int i = 0; i < 3; i++)
        p[i] = np_transpose(ctx, np_view(ctx, p[i], 4, hs), 1, 2);
    np_tensor *y = np_sdpa(ctx, p[0], p[1], p[2], 1, 0.0);
    y = np_view(ctx, np_transpose(ctx, y, 1, 2), 3, (const int64_t[]){GB, GT, GC});
    y = np_linear(ctx, y, w_proj, b_proj);
    np_module_end(ctx, attn, &h, 1, &y, 1);
    x = np_add(ctx, x, y);
    x = np_add(ctx, x, np_scale(ctx, np_matmul(ctx, h, w_mm), 0.5));
    np_tensor *m = np_gelu(ctx, np_linear(ctx, x, w_fc, b_fc), 0);
    x = np_add(ctx, x, np_linear(ctx, m, w_fc2, NULL));
    np_tensor *img = np_view(ctx, x, 4, (const int64_t[]){GB, GT, GS, GS});
    np_tensor *c = np_max_pool2d(ctx, np_relu(ctx, np_conv2d(ctx, img, w_conv, b_conv, 1, 1)), 2, 2);
    np_tensor *cm = np_mean(ctx, np_silu(ctx, np_flatten(ctx, c, 1)));
    np_tensor *logits = np_linear(ctx, x, wte, NULL);
    np_tensor *l2 = np_reshape(ctx, logits, 2, (const int64_t[]){GB * GT, GV});
    np_tensor *ce = np_cross_entropy(ctx, l2, tgt, -100);
    np_tensor *sm = np_scale(ctx, np_sum(ctx, np_dropout(ctx, np_softmax(ctx, l2, -1), 0.1, 1)), 0.01);
    np_tensor *loss = np_add(ctx, np_add(ctx, ce, sm), np_mul(ctx, cm, cm));
    if (loss)
        rec->loss = np_tensor_f32(loss)[0];
    np_backward(ctx, loss);
    np_ctx_emit_param_grads(ctx);
    np_ctx_step_end(ctx);
    st = np_ctx_status(ctx);
    np_ctx_free(ctx);
#undef P1
#undef P2
    return st;
}

/* ||a-b|| / ||b|| over finite elements; 1e30 when the non-finite masks differ. */
static inline double rel_err(const float *a, const float *b, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        int fa = isfinite(a[i]), fb = isfinite(b[i]);
        if (fa != fb)
            return 1e30;
        if (!fa)
            continue;
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

#endif
