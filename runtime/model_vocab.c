/* runtime/model_vocab.c - the vocabulary-parallel word embedding and loss
 * of a tensor-parallel GPT (np_dist.vp, `--tp T --vocab-parallel`,
 * docs/RUNTIME.md "Vocabulary parallel"), Megatron's VocabParallelEmbedding
 * and vocab_parallel_cross_entropy. TP rank r of T holds rows [v0, v1) =
 * [r*V/T, (r+1)*V/T) of the word embedding (uneven when T does not divide
 * V), the weight the lm head shares:
 *
 *   Functional.embedding: the rows of this rank's tokens (zeros for the
 *     others'), a partial sum; g (a quiet all-reduce) makes it whole, inside
 *     Module.wte; backward: each rank scatters the gradient into its rows;
 *   lm head: its input whole on every rank (f, or the sequence-parallel
 *     gather, sums its gradient over the group backward), Functional.linear
 *     with the weight's rows gives this rank's slice of the logits;
 *   Functional.cross_entropy on the slices: the row maxima combined over
 *   the group, each rank's sum of exp(x - max) (float64, its slice in
 *   order) summed in rank order, the target's logit from the rank that
 *   holds it; loss = mean over rows of max + log(sum) - target logit, as
 *   one process computes it; backward: each rank's slice of
 *   softmax - onehot, from the same float log-sum-exp per row.
 *
 * Every call keeps its one-process name and API (the dump records the
 * slices: Shard(0) for the weight and its gradient, Shard(-1) for the
 * logits and their gradient, Partial(sum) for the embedding's output and
 * for the gradient of the lm head's input). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"
#include "model_train_internal.h"
#include "nprobe/format.h"
#include "nprobe/hook.h"
#include "rt_internal.h"

struct np_vocab {
    np_tp *tp;
    int64_t V, v0, v1;    /* the vocabulary, this rank's rows */
};

np_status np_vocab_setup(np_trainer *tr, np_error *err)
{
    np_model *m = tr->model;
    np_tp *tp = tr->tp;
    if (!tp || m->cfg.kind != NP_MODEL_GPT)
        return np_error_set(err, NP_ERR_ARG, NULL, "vocab_parallel",
                            "vocabulary parallel: the gpt model under --tp only");
    int r, T;
    np_tp_group(tp, &r, &T);
    int64_t V = m->cfg.vocab_size;
    if (V < T)
        return np_error_set(err, NP_ERR_ARG, NULL, "vocab_parallel",
                            "vocabulary parallel: a vocabulary of %lld over --tp %d ranks",
                            (long long)V, T);
    np_vocab *v = calloc(1, sizeof *v);
    if (!v)
        return np_error_set(err, NP_ERR_NOMEM, NULL, "vocab_parallel", "out of memory");
    m->vocab = v;
    v->tp = tp;
    v->V = V;
    v->v0 = (int64_t)r * V / T;
    v->v1 = (int64_t)(r + 1) * V / T;
    np_tensor *w = m->wte.weight; /* whole, as one process initialises it: keep this rank's rows */
    int64_t C = w->shape[1], n = v->v1 - v->v0;
    float *d = np_tensor_f32(w);
    memmove(d, d + v->v0 * C, (size_t)(n * C) * sizeof *d);
    w->shape[0] = n;
    w->numel = n * C;
    if (np_tp_add_sharded(tp, w, 0) != 0)
        return np_error_set(err, NP_ERR_NOMEM, NULL, "vocab_parallel", "out of memory");
    return NP_OK;
}

void np_vocab_free(np_vocab *v)
{
    free(v);
}

/* ---- the embedding ---------------------------------------------------------------- */

static int64_t token(const np_tensor *idx, int64_t i)
{
    return idx->dtype == NP_INT64 ? ((const int64_t *)idx->data)[i]
                                  : ((const int32_t *)idx->data)[i];
}

/* gin[1]: this rank's rows of the weight's gradient, the tokens' output
 * gradients added in order (rt_embedding_backward's order per row) */
static void vemb_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    (void)ctx;
    const np_vocab *v = nd->st;
    const np_tensor *idx = nd->in[0];
    int64_t C = nd->in[1]->shape[1];
    if (!gin[1])
        return;
    for (int64_t r = 0; r < idx->numel; r++) {
        int64_t t = token(idx, r);
        if (t < v->v0 || t >= v->v1)
            continue;
        for (int64_t c = 0; c < C; c++)
            gin[1][(t - v->v0) * C + c] += gout[0][r * C + c];
    }
}

/* Functional.embedding of idx over this rank's rows: a partial sum. */
static np_tensor *vembedding(np_ctx *ctx, np_vocab *v, np_tensor *idx, np_tensor *w)
{
    const char *api = np_op_api(NP_OP_EMBEDDING);
    if (!idx || !w || np_ctx_status(ctx))
        return NULL;
    if ((idx->dtype != NP_INT64 && idx->dtype != NP_INT32) || !np_tensor_f32(w) ||
        idx->ndim >= NP_MAX_DIMS)
        return rt_fail(ctx, NP_ERR_DTYPE, api, "%s: integer tokens and a floating weight", api);
    int64_t C = w->shape[1];
    for (int64_t i = 0; i < idx->numel; i++)
        if (token(idx, i) < 0 || token(idx, i) >= v->V)
            return rt_fail(ctx, NP_ERR_ARG, api, "%s: index %lld at position %lld outside [0, %lld)",
                           api, (long long)token(idx, i), (long long)i, (long long)v->V);
    int64_t shape[NP_MAX_DIMS];
    memcpy(shape, idx->shape, sizeof shape);
    shape[idx->ndim] = C;
    np_tensor *y = rt_new(ctx, w->dtype, idx->ndim + 1, shape);
    if (!y)
        return NULL;
    np_tensor *in[2] = {idx, w};
    rt_node nd;
    rt_node_init(ctx, &nd, NP_OP_EMBEDDING, in, 2);
    float *o = np_tensor_f32(y);
    const float *wd = np_tensor_f32(w);
    for (int64_t i = 0; i < idx->numel; i++) {
        int64_t t = token(idx, i);
        if (t >= v->v0 && t < v->v1)
            memcpy(o + i * C, wd + (t - v->v0) * C, (size_t)C * sizeof *o);
        else
            memset(o + i * C, 0, (size_t)C * sizeof *o);
    }
    nd.st = v;
    return rt_finish(ctx, &nd, y, vemb_bwd);
}

np_tensor *np_vocab_embedding(np_ctx *ctx, np_vocab *v, np_nn_embedding *e, np_tensor *idx)
{
    if (!idx || np_module_begin(ctx, e->mod) != NP_OK)
        return NULL;
    np_tensor *y = NP_AT(ctx, vembedding(ctx, v, idx, e->weight));
    y = np_tp_reduce_quiet(ctx, v->tp, y); /* the rows of every rank's tokens */
    np_module_end(ctx, e->mod, &idx, 1, &y, 1);
    return y;
}

/* ---- the loss ----------------------------------------------------------------------- */

typedef struct vce_state {
    const np_vocab *v;
    const float *lse;      /* (R) the rows' log-sum-exp over the whole vocabulary */
    int64_t R, ignore_index, nvalid;
} vce_state;

static void vce_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    (void)ctx;
    const vce_state *s = nd->st;
    const float *x = np_tensor_f32(nd->in[0]);
    const int64_t *t = nd->in[1]->data;
    int64_t Cr = s->v->v1 - s->v->v0;
    if (!gin[0] || s->nvalid == 0)
        return;
    double gs = (double)gout[0][0] / (double)s->nvalid;
    for (int64_t r = 0; r < s->R; r++) {
        if (t[r] == s->ignore_index)
            continue;
        for (int64_t c = 0; c < Cr; c++) {
            double p = exp((double)x[r * Cr + c] - s->lse[r]);
            gin[0][r * Cr + c] = (float)(gs * (p - (c + s->v->v0 == t[r] ? 1.0 : 0.0)));
        }
    }
}

/* Per row of this rank's slice x (R, Cr): the maximum over the group's
 * slices into mx, then this slice's sum of exp(x - mx) (float64) summed
 * over the group in rank order into sum, and the target's logit (from the
 * rank holding it) into xt. -1 when a gather failed. */
static int combine_rows(const np_vocab *v, const float *x, const int64_t *t, int64_t R,
                        int64_t ignore, float *mx, double *sum, float *xt)
{
    int g, T;
    np_tp_group(v->tp, &g, &T);
    int64_t Cr = v->v1 - v->v0;
    for (int64_t r = 0; r < R; r++) {
        float m = -INFINITY;
        for (int64_t c = 0; c < Cr; c++)
            if (x[r * Cr + c] > m || isnan(x[r * Cr + c]))
                m = x[r * Cr + c];
        mx[r] = m;
    }
    const float *all = np_tp_gather_group(v->tp, mx, (size_t)R * sizeof *mx, NP_FLOAT32);
    if (!all)
        return -1;
    for (int64_t r = 0; r < R; r++) {
        float m = -INFINITY;
        for (int k = 0; k < T; k++)
            if (all[(size_t)k * (size_t)R + (size_t)r] > m || isnan(all[(size_t)k * (size_t)R + (size_t)r]))
                m = all[(size_t)k * (size_t)R + (size_t)r];
        mx[r] = m;
        double s = 0.0;
        for (int64_t c = 0; c < Cr; c++)
            s += exp((double)x[r * Cr + c] - m);
        sum[r] = s;
        xt[r] = t[r] != ignore && t[r] >= v->v0 && t[r] < v->v1 ? x[r * Cr + t[r] - v->v0] : 0.0f;
    }
    const double *sums = np_tp_gather_group(v->tp, sum, (size_t)R * sizeof *sum, NP_FLOAT64);
    if (!sums)
        return -1;
    for (int64_t r = 0; r < R; r++) {
        double s = 0.0;
        for (int k = 0; k < T; k++)
            s += sums[(size_t)k * (size_t)R + (size_t)r];
        sum[r] = s;
    }
    const float *xts = np_tp_gather_group(v->tp, xt, (size_t)R * sizeof *xt, NP_FLOAT32);
    if (!xts)
        return -1;
    for (int64_t r = 0; r < R; r++) {
        int owner = 0; /* the group rank whose rows hold the target */
        while (owner + 1 < T && t[r] >= (int64_t)(owner + 1) * v->V / T)
            owner++;
        xt[r] = xts[(size_t)owner * (size_t)R + (size_t)r];
    }
    return 0;
}

np_tensor *np_vocab_cross_entropy(np_ctx *ctx, np_vocab *v, np_tensor *logits, np_tensor *y,
                                  int64_t ignore_index)
{
    const char *api = np_op_api(NP_OP_CROSS_ENTROPY);
    if (!logits || !y || np_ctx_status(ctx))
        return NULL;
    int64_t Cr = v->v1 - v->v0;
    if (!np_tensor_f32(logits) || y->dtype != NP_INT64 || logits->ndim < 2 ||
        logits->shape[logits->ndim - 1] != Cr || y->numel != logits->numel / Cr)
        return rt_fail(ctx, NP_ERR_SHAPE, api, "%s: this rank's (N, %lld) logits and N int64 "
                       "targets expected", api, (long long)Cr);
    int64_t R = y->numel, nvalid = 0;
    const int64_t *t = y->data;
    for (int64_t r = 0; r < R; r++) {
        if (t[r] == ignore_index)
            continue;
        if (t[r] < 0 || t[r] >= v->V)
            return rt_fail(ctx, NP_ERR_ARG, api, "%s: target %lld at row %lld outside [0, %lld)",
                           api, (long long)t[r], (long long)r, (long long)v->V);
        nvalid++;
    }
    np_tensor *out = rt_new(ctx, NP_FLOAT32, 0, NULL);
    vce_state *s = rt_alloc(ctx, sizeof *s);
    float *lse = rt_alloc(ctx, (size_t)R * sizeof(float) + 1);
    float *mx = rt_alloc(ctx, (size_t)R * sizeof(float) + 1);
    float *xt = rt_alloc(ctx, (size_t)R * sizeof(float) + 1);
    double *sum = rt_alloc(ctx, (size_t)R * sizeof(double) + 1);
    if (!out || !s || !lse || !mx || !xt || !sum)
        return NULL;
    np_tensor *in[2] = {logits, y};
    rt_node nd;
    rt_node_init(ctx, &nd, NP_OP_CROSS_ENTROPY, in, 2);
    if (combine_rows(v, np_tensor_f32(logits), t, R, ignore_index, mx, sum, xt) != 0)
        return rt_fail(ctx, NP_ERR_IO, api, "vocabulary parallel: a gather of the loss failed");
    double tot = 0.0;
    for (int64_t r = 0; r < R; r++) {
        double l = mx[r] + log(sum[r]);
        lse[r] = (float)l;
        tot += t[r] == ignore_index ? 0.0 : l - xt[r];
    }
    np_tensor_f32(out)[0] = nvalid ? (float)(tot / (double)nvalid) : NAN;
    *s = (vce_state){v, lse, R, ignore_index, nvalid};
    rt_node_scalar(&nd, "ignore_index", (double)ignore_index);
    nd.st = s;
    return rt_finish(ctx, &nd, out, vce_bwd);
}

/* ---- placements ---------------------------------------------------------------------- */

enum { VK_NONE = 0, VK_ROWS, VK_LAST, VK_PARTIAL };

/* How tensor ht of event ev lies over the vocabulary: VK_ROWS (the
 * weight's rows, Shard(0)), VK_LAST (the logits' last dimension), VK_PARTIAL
 * (a sum over the TP group) or VK_NONE (whole). */
static int vocab_kind(const np_hook_event *ev, const np_hook_tensor *ht)
{
    int bwd = ev->kind == NP_EV_API_BACKWARD || ev->kind == NP_EV_MODULE_BACKWARD;
    int in = ht->role == NP_ROLE_INPUT, out = ht->role == NP_ROLE_OUTPUT, idx = ht->index;
    int param = ht->role == NP_ROLE_PARAMETERS || ht->role == NP_ROLE_PARAMETERS_GRAD;
    const char *nm = ev->name ? ev->name : "", *par = ev->parent ? ev->parent : "";
    if (ev->is_module) {
        if (!strncmp(nm, "Module.wte.Embedding", 20))
            return param && ht->key && !strcmp(ht->key, "weight") ? VK_ROWS : VK_NONE;
        if (!strncmp(nm, "Module.lm_head.Linear.", 22))
            return (!bwd && out && idx == 0) || (bwd && in && idx == 0) ? VK_LAST
                   : bwd && out && idx == 0                             ? VK_PARTIAL
                                                                        : VK_NONE;
        return VK_NONE;
    }
    if (!strncmp(nm, "Functional.embedding.", 21) && !strncmp(par, "Module.wte.Embedding.", 21))
        return (in || out) && idx == 1 ? VK_ROWS : !bwd && out && idx == 0 ? VK_PARTIAL : VK_NONE;
    if (!strncmp(nm, "Functional.linear.", 18) && !strncmp(par, "Module.lm_head.Linear.", 22)) {
        if ((in || out) && idx == 1)
            return VK_ROWS; /* the weight; backward: its gradient */
        if (idx == 0 && ((!bwd && out) || (bwd && in)))
            return VK_LAST;
        return bwd && out && idx == 0 ? VK_PARTIAL : VK_NONE;
    }
    if (!strncmp(nm, "Functional.cross_entropy.", 25))
        return idx == 0 && ((!bwd && in) || (bwd && out)) ? VK_LAST : VK_NONE;
    return VK_NONE;
}

int np_mesh_placement_vp(int tp, int dp, int sp, int mb, int m, int rank, int64_t vocab,
                         const np_hook_event *ev, int i, np_place_rec *rec)
{
    int has = np_mesh_placement_mb(tp, dp, sp, mb, m, rank, ev, i, rec);
    if (tp <= 1 || vocab < tp || !ev || i < 0 || i >= ev->n_tensors || !ev->tensors[i].t)
        return has;
    const np_hook_tensor *ht = &ev->tensors[i];
    int k = vocab_kind(ev, ht), nd = ht->t->ndim;
    if (!k || nd < 1 || nd > NP_FMT_MAX_DIMS)
        return has;
    /* the mesh's items: (dp,) tp (, mb); tp's is Replicate() where the TP rule saw a whole leaf */
    char items[3][NP_FMT_PLACE_LEN];
    int n = 0, at = dp > 1 ? 1 : 0;
    if (has) {
        const char *p = rec->placements;
        while (n < 3 && *p) {
            size_t len = strcspn(p, ",");
            snprintf(items[n++], sizeof items[0], "%.*s", (int)len, p);
            p += len + (p[len] == ',');
        }
    } else {
        memset(rec, 0, sizeof *rec);
        rec->global_ndim = nd;
        for (int d = 0; d < nd; d++)
            rec->global_shape[d] = ht->t->shape[d];
        rec->stage = -1;
        rec->micro_batch = ev->kind == NP_EV_PARAM_GRAD ? -1 : m;
        for (n = 0; n < (dp > 1) + 1 + (mb > 1); n++)
            snprintf(items[n], sizeof items[0], "Replicate()");
    }
    int r = rank % tp, dim = k == VK_ROWS ? 0 : nd - 1;
    if (k == VK_PARTIAL) {
        snprintf(items[at], sizeof items[0], "Partial(sum)");
    } else {
        snprintf(items[at], sizeof items[0], "Shard(%d)", dim);
        rec->global_shape[dim] = vocab;
        rec->offset[dim] = (int64_t)r * vocab / tp;
    }
    size_t len = 0;
    for (int j = 0; j < n; j++)
        len += (size_t)snprintf(rec->placements + len, sizeof rec->placements - len, "%s%s",
                                j ? "," : "", items[j]);
    return 1;
}
