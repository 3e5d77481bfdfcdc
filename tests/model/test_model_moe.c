/* tests/model/test_model_moe.c - the GPT's mixture of experts (runtime/
 * model_moe.c, --moe E): one MoE layer's forward and every gradient (the
 * input, the router, each expert's weights and biases) against the test's
 * own float64 forward and its central finite differences (top-1 routing
 * taken in float64 too; no token near a tie, so the differences do not cross
 * a switch); the events carry the module names a dump shows; the router
 * stays float32 under bf16 autocast and follows autocast under the fault
 * moe_router_bf16 on npu-sim. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model_internal.h"
#include "nprobe/precision.h"
#include "nprobe/runtime.h"

enum { E = 3, C = 4, H = 4 * C, B = 2, T = 3, N = B * T };

/* float64 copies of the parameters, in creation order */
typedef struct ref {
    double wr[E][C];
    double w1[E][H][C], b1[E][H], w2[E][C][H], b2[E][C];
} ref;

static double gelu(double v) { return 0.5 * v * (1.0 + erf(v / sqrt(2.0))); }

/* sum over tokens and channels of r * y, y the MoE output of x; gaps[n]
 * the two largest probabilities' difference of token n */
static double ref_loss(const ref *p, const double *x, const double *r, double *yout, double *gaps)
{
    double L = 0;
    for (int n = 0; n < N; n++) {
        const double *xn = x + n * C;
        double lg[E], mx = -INFINITY, s = 0;
        for (int e = 0; e < E; e++) {
            lg[e] = 0;
            for (int c = 0; c < C; c++)
                lg[e] += p->wr[e][c] * xn[c];
            mx = fmax(mx, lg[e]);
        }
        for (int e = 0; e < E; e++)
            s += exp(lg[e] - mx);
        int best = 0;
        for (int e = 1; e < E; e++)
            if (lg[e] > lg[best])
                best = e;
        double pb = exp(lg[best] - mx) / s, second = 0;
        for (int e = 0; e < E; e++)
            if (e != best)
                second = fmax(second, exp(lg[e] - mx) / s);
        if (gaps)
            gaps[n] = pb - second;
        double h[H];
        for (int j = 0; j < H; j++) {
            h[j] = p->b1[best][j];
            for (int c = 0; c < C; c++)
                h[j] += p->w1[best][j][c] * xn[c];
            h[j] = gelu(h[j]);
        }
        for (int c = 0; c < C; c++) {
            double y = p->b2[best][c];
            for (int j = 0; j < H; j++)
                y += p->w2[best][c][j] * h[j];
            y *= pb;
            if (yout)
                yout[n * C + c] = y;
            L += r[n * C + c] * y;
        }
    }
    return L;
}

typedef struct seen {
    char names[256][96];
    int n;
    int router_dt, expert_dt; /* output dtypes of the router's and expert 0's c_fc linear */
} seen;

static int hook(const np_hook_event *e, void *user)
{
    seen *s = user;
    if (!e->name || e->kind != NP_EV_API_FORWARD)
        goto mod;
    for (int i = 0; i < e->n_tensors; i++) {
        const np_hook_tensor *t = &e->tensors[i];
        if (t->role != NP_ROLE_OUTPUT || !t->t || !e->parent)
            continue;
        if (!strcmp(e->parent, "Module.h.0.mlp.router.Linear.forward.0"))
            s->router_dt = t->t->dtype;
        if (!strcmp(e->parent, "Module.h.0.mlp.experts.0.c_fc.Linear.forward.0"))
            s->expert_dt = t->t->dtype;
    }
mod:
    if (e->name && s->n < 256)
        snprintf(s->names[s->n++], 96, "%s", e->name);
    return 0;
}

static int has(const seen *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->names[i], name))
            return 1;
    return 0;
}

/* one forward (+ backward) of an MoE layer on a fresh context */
static np_tensor *run(np_ctx **pctx, np_gpt_block *b, np_dtype prec, int device, int fault, seen *s,
                      const float *xv, const float *rv, float *yv)
{
    np_ctx_opts o;
    np_ctx_opts_default(&o);
    o.precision = prec;
    o.device = device;
    o.prec_fault = fault;
    o.threads = 1;
    np_error err = {0};
    CHECK(np_ctx_new(pctx, &o, &err) == NP_OK);
    np_ctx *ctx = *pctx;
    np_ctx_set_hook(ctx, hook, s);
    np_model_config c;
    np_model_config_default(&c, NP_MODEL_GPT);
    c.n_embd = C;
    c.n_expert = E;
    memset(b, 0, sizeof *b);
    CHECK(np_moe_build(b, ctx, 0, &c, &err) == NP_OK);
    int np = 0;
    np_tensor *const *ps = np_ctx_params(ctx, &np);
    CHECK_EQ_INT(np, 1 + 4 * E);
    for (int i = 0; i < np; i++) /* larger than GPT-2's 0.02: gelu bends, experts differ */
        np_tensor_fill_normal(ps[i], 11, (uint64_t)i, 0.0, i == 0 ? 1.0 : 0.5);
    int64_t sx[3] = {B, T, C};
    np_tensor *x = np_tensor_new(ctx, NP_FLOAT32, 3, sx), *r = np_tensor_new(ctx, NP_FLOAT32, 3, sx);
    CHECK(np_tensor_copy_f32(x, xv, N * C, &err) == NP_OK && np_tensor_copy_f32(r, rv, N * C, &err) == NP_OK);
    CHECK(np_tensor_set_requires_grad(ctx, x, 1) == NP_OK);
    np_ctx_step_begin(ctx);
    np_tensor *y = np_moe_forward(ctx, b->moe, x);
    CHECK(y && y->ndim == 3 && y->shape[2] == C);
    if (y)
        for (int i = 0; i < N * C; i++)
            yv[i] = np_tensor_f32(y)[i];
    np_tensor *loss = np_sum(ctx, np_mul(ctx, y, r));
    CHECK(loss && np_backward(ctx, loss) == NP_OK);
    np_ctx_step_end(ctx);
    return x;
}

int main(void)
{
    float xv[N * C], rv[N * C], yv[N * C];
    double x[N * C], r[N * C], yref[N * C], gaps[N];
    for (int i = 0; i < N * C; i++) {
        xv[i] = np_rng_uniform(5, (uint64_t)i) * 2.0f - 1.0f;
        rv[i] = np_rng_uniform(6, (uint64_t)i) * 2.0f - 1.0f;
        x[i] = xv[i];
        r[i] = rv[i];
    }
    np_ctx *ctx = NULL;
    np_gpt_block b;
    seen s = {0};
    np_tensor *xt = run(&ctx, &b, NP_FLOAT32, NP_DEVICE_CPU, 0, &s, xv, rv, yv);
    int np = 0;
    np_tensor *const *ps = np_ctx_params(ctx, &np);
    /* the parameters as float64, and pointers to each for the differences */
    ref p;
    double *slot[1 + 4 * E];
    slot[0] = &p.wr[0][0];
    for (int e = 0; e < E; e++) {
        slot[1 + 4 * e] = &p.w1[e][0][0];
        slot[2 + 4 * e] = &p.b1[e][0];
        slot[3 + 4 * e] = &p.w2[e][0][0];
        slot[4 + 4 * e] = &p.b2[e][0];
    }
    for (int i = 0; i < np; i++)
        for (int64_t j = 0; j < ps[i]->numel; j++)
            slot[i][j] = np_tensor_f32(ps[i])[j];
    ref_loss(&p, x, r, yref, gaps);
    int won[E] = {0};
    for (int n = 0; n < N; n++)
        CHECK_MSG(gaps[n] > 1e-3, "token %d is near a tie (gap %g): choose another seed", n, gaps[n]);
    double ymax = 0;
    for (int i = 0; i < N * C; i++)
        ymax = fmax(ymax, fabs(yref[i]));
    for (int i = 0; i < N * C; i++)
        CHECK_CLOSE(yv[i], yref[i], 1e-5 * ymax, 0);
    /* gradients: central differences of the float64 loss */
    const double h = 1e-6;
    for (int i = 0; i <= np; i++) {
        double *v = i < np ? slot[i] : x;
        const float *g = i < np ? ps[i]->grad : xt->grad;
        int64_t n = i < np ? ps[i]->numel : N * C;
        double fd[H * C], gmax = 0;
        for (int64_t j = 0; j < n; j++) {
            double keep = v[j];
            v[j] = keep + h;
            double lp = ref_loss(&p, x, r, NULL, NULL);
            v[j] = keep - h;
            double lm = ref_loss(&p, x, r, NULL, NULL);
            v[j] = keep;
            fd[j] = (lp - lm) / (2 * h);
            gmax = fmax(gmax, fabs(fd[j]));
        }
        CHECK(g != NULL);
        for (int64_t j = 0; g && j < n; j++)
            CHECK_CLOSE(g[j], fd[j], 1e-4 * gmax + 1e-7, 0);
        if (i >= 1 && i < np && (i - 1) % 4 == 0 && gmax > 0)
            won[(i - 1) / 4] = 1;
    }
    /* the data route tokens to at least two experts, so the mask is tested */
    CHECK(won[0] + won[1] + won[2] >= 2);
    /* the names a dump shows */
    const char *want[] = {"Module.h.0.mlp.MoE.forward.0", "Module.h.0.mlp.router.Linear.forward.0",
                          "Module.h.0.mlp.experts.2.MLP.forward.0",
                          "Module.h.0.mlp.experts.1.c_fc.Linear.forward.0",
                          "Module.h.0.mlp.experts.0.c_proj.Linear.backward.0",
                          "Functional.linear.0.forward", "Functional.softmax.0.forward",
                          "Tensor.split.0.forward", "Module.h.0.mlp.MoE.backward.0"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK_MSG(has(&s, want[i]), "no event %s", want[i]);
    np_moe_free(b.moe);
    np_ctx_free(ctx);
    /* bf16 autocast: the router float32, an expert's linear bf16; the fault
     * (npu-sim) puts the router under autocast */
    for (int fault = 0; fault < 2; fault++) {
        seen s2 = {0};
        s2.router_dt = s2.expert_dt = -1;
        run(&ctx, &b, NP_BFLOAT16, NP_DEVICE_NPU_SIM, fault ? NP_PREC_FAULT_MOE_ROUTER_BF16 : 0, &s2, xv, rv,
            yv);
        CHECK_EQ_INT(s2.router_dt, fault ? NP_BFLOAT16 : NP_FLOAT32);
        CHECK_EQ_INT(s2.expert_dt, NP_BFLOAT16);
        np_moe_free(b.moe);
        np_ctx_free(ctx);
    }
    return check_report();
}
