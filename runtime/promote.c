/* runtime/promote.c - per-op precision overrides (np_ctx_opts.fp32_ops: the
 * ops, calls or modules that run in float32 inside autocast) and the
 * kernels of the promotion faults (the precision faults whose cure is such
 * an override: statistics, accumulators or a loss kept in bf16 where a
 * backend should have used float32). docs/RUNTIME.md, "Per-op precision
 * overrides". */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nprobe/precision.h"
#include "rt_internal.h"

int rt_fp32_setup(np_ctx *ctx)
{
    ctx->fp32_buf = NULL;
    ctx->fp32_ent = NULL;
    ctx->n_fp32 = 0;
    const char *s = ctx->o.fp32_ops;
    if (!s || !*s)
        return 0;
    size_t len = strlen(s);
    ctx->fp32_buf = malloc(len + 1);
    ctx->fp32_ent = malloc((len / 2 + 2) * sizeof *ctx->fp32_ent);
    if (!ctx->fp32_buf || !ctx->fp32_ent)
        return -1;
    memcpy(ctx->fp32_buf, s, len + 1);
    for (char *p = strtok(ctx->fp32_buf, ", "); p; p = strtok(NULL, ", "))
        ctx->fp32_ent[ctx->n_fp32++] = p;
    ctx->o.fp32_ops = NULL; /* the caller's string is not kept */
    return 0;
}

void rt_fp32_free(np_ctx *ctx)
{
    free(ctx->fp32_buf);
    free(ctx->fp32_ent);
}

/* e names API `api` ("Functional.softmax"), its call n ("Functional.softmax.2"),
 * or a call of a module whose path is e ("h.0.ln_1" or "Module.h.0.ln_1...")? */
static int entry_matches_api(const char *e, const char *api, int n)
{
    size_t la = strlen(api);
    if (strncmp(e, api, la))
        return 0;
    if (!e[la])
        return 1;
    if (e[la] != '.')
        return 0;
    char *end;
    long k = strtol(e + la + 1, &end, 10);
    return end != e + la + 1 && (!*end || !strcmp(end, ".forward")) && k == n;
}

static int entry_matches_module(const char *e, const char *path)
{
    if (!strncmp(e, "Module.", 7)) { /* "Module.h.0.ln_1.LayerNorm..." */
        size_t lp = strlen(path);
        return !strncmp(e + 7, path, lp) && (!e[7 + lp] || e[7 + lp] == '.') && !entry_matches_api(e, "x", -1);
    }
    return !strcmp(e, path);
}

int rt_promoted(const np_ctx *ctx, int op)
{
    if (!ctx->n_fp32)
        return 0;
    const char *api = np_op_api((np_op)op);
    int n = ctx->counters[op];
    int how = 0;
    for (int i = 0; i < ctx->n_fp32; i++) {
        const char *e = ctx->fp32_ent[i];
        if (entry_matches_api(e, api, n))
            how = 1;
        for (int mc = ctx->cur_mc, d = 0; mc >= 0 && d < 64; mc = ctx->mc[mc].parent, d++)
            if (entry_matches_module(e, ctx->mc[mc].m->path))
                return 2;
    }
    return how;
}

/* ---- promotion faults ----------------------------------------------------- */
static float bf(double x) { return np_round_bf16((float)x); }

/* ln_stats_bf16: the row's mean and variance accumulated in bf16 (each
 * running sum rounded after every add, as a bf16 reduction does), then the
 * float32 normalisation with those statistics. */
static void ln_stats_bf16_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                                  const float *bias, int64_t N, int64_t C, double eps)
{
#pragma omp parallel for if (N * C > RT_PAR_MIN)
    for (int64_t r = 0; r < N; r++) {
        const float *x = inp + r * C;
        float s = 0, q = 0;
        for (int64_t c = 0; c < C; c++)
            s = bf((double)s + bf(x[c]));
        float m = bf((double)s / (double)C);
        for (int64_t c = 0; c < C; c++) {
            float d = bf((double)x[c] - m);
            q = bf((double)q + bf((double)d * d));
        }
        double var = bf((double)q / (double)C);
        double rs = 1.0 / sqrt(var + eps);
        mean[r] = m;
        rstd[r] = (float)rs;
        for (int64_t c = 0; c < C; c++) {
            double y = ((double)x[c] - m) * rs;
            out[r * C + c] = (float)(y * (weight ? weight[c] : 1.0) + (bias ? bias[c] : 0.0));
        }
    }
}

/* softmax_bf16_acc: max subtracted, but each exp and the running sum kept in
 * bf16 (no float32 accumulator), the quotient rounded to bf16. */
static void softmax_bf16_acc_row(const float *x, float *y, int64_t n)
{
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (x[i] > mx || isnan(x[i]))
            mx = x[i];
    float s = 0;
    for (int64_t i = 0; i < n; i++) {
        y[i] = bf(exp((double)bf(x[i]) - mx));
        s = bf((double)s + y[i]);
    }
    for (int64_t i = 0; i < n; i++)
        y[i] = bf((double)y[i] / s);
}

/* loss_bf16: logits read as bf16, each row's log-sum-exp and the mean over
 * rows accumulated in bf16. */
static void loss_bf16_forward(float *loss, float *lse, double *rowloss, const float *logits,
                              const int64_t *targets, int64_t N, int64_t C, int64_t ignore_index, int64_t nvalid)
{
    for (int64_t r = 0; r < N; r++) {
        const float *xr = logits + r * C;
        float mx = -INFINITY, s = 0;
        for (int64_t c = 0; c < C; c++)
            if (bf(xr[c]) > mx || isnan(xr[c]))
                mx = bf(xr[c]);
        for (int64_t c = 0; c < C; c++)
            s = bf((double)s + bf(exp((double)bf(xr[c]) - mx)));
        float l = bf((double)mx + log((double)s));
        lse[r] = l;
        rowloss[r] = targets[r] == ignore_index ? 0.0 : bf((double)l - bf(xr[targets[r]]));
    }
    float tot = 0;
    for (int64_t r = 0; r < N; r++)
        tot = bf((double)tot + rowloss[r]);
    loss[0] = nvalid ? bf((double)tot / (double)nvalid) : NAN;
}

void rt_prec_kernels(rt_kernels *kp, const rt_kernels *k, int f)
{
    *kp = *k;
    if (f == NP_PREC_FAULT_LN_STATS_BF16)
        kp->layernorm_forward = ln_stats_bf16_forward;
    else if (f == NP_PREC_FAULT_SOFTMAX_BF16_ACC)
        kp->softmax_row = softmax_bf16_acc_row;
    else if (f == NP_PREC_FAULT_LOSS_BF16)
        kp->cross_entropy_forward = loss_bf16_forward;
}

const rt_kernels *rt_kern(const np_ctx *ctx, int op)
{
    int f = ctx->o.device == NP_DEVICE_NPU_SIM ? ctx->o.prec_fault : 0;
    if (f < NP_PREC_FAULT_LN_STATS_BF16 || ctx->o.precision == NP_FLOAT32 || rt_promoted(ctx, op))
        return &ctx->k;
    int acts = (f == NP_PREC_FAULT_LN_STATS_BF16 && op == NP_OP_LAYER_NORM) ||
               (f == NP_PREC_FAULT_SOFTMAX_BF16_ACC && (op == NP_OP_SOFTMAX || op == NP_OP_SDPA)) ||
               (f == NP_PREC_FAULT_LOSS_BF16 && op == NP_OP_CROSS_ENTROPY);
    return acts ? &ctx->kp : &ctx->k;
}
