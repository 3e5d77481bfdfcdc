/* runtime/lowp.c - low-precision GEMM operands (np_ctx_opts.lowp: MxFP8,
 * HiF8) and the precision-fault catalog. The ops of ops_dense.c hand their
 * GEMM operands here after autocast; the quantized copy (arena) is what the
 * float32 GEMM and the saved state for backward see, so gradients are
 * computed from the quantized operands, as in MX training. The formats are
 * common/lowp.c's. docs/RUNTIME.md, "Low-precision GEMM formats". */
#include <string.h>

#include "nprobe/ops.h"
#include "nprobe/precision.h"
#include "rt_internal.h"

typedef struct prec_fault_def {
    const char *name;
    np_op op;
    const char *needs;
    const char *description;
} prec_fault_def;

static const prec_fault_def prec_defs[] = {
    {"none", NP_OP_COUNT, "", "no precision fault"},
    {"lowp_block_scale", NP_OP_LINEAR, "mxfp8|hif8",
     "the weight's blocks (HiF8: the weight) dequantized with twice the scale they were quantized "
     "with (a shared exponent off by one): every linear output doubles"},
    {"lowp_saturate", NP_OP_LINEAR, "mxfp8|hif8",
     "the input's scale 2^4 (MxFP8) or 2^14 (HiF8) too small (a stale or mis-read amax): the "
     "largest elements of each block saturate at the format's maximum"},
    {"ln_stats_bf16", NP_OP_LAYER_NORM, "bf16|fp16",
     "the layer norm's mean and variance accumulated in bf16 under autocast (a running bf16 sum): "
     "its float32 version (promotion) is right"},
    {"softmax_bf16_acc", NP_OP_SOFTMAX, "bf16|fp16",
     "softmax (and the attention's) without a float32 accumulator under autocast: exp and the "
     "running sum kept in bf16"},
    {"loss_bf16", NP_OP_CROSS_ENTROPY, "bf16|fp16",
     "the loss computed in bf16 under autocast: logits read as bf16, log-sum-exp and the mean over "
     "rows accumulated in bf16"},
    {"lowp_bwd_underflow", NP_OP_LINEAR, "mxfp8|hif8",
     "with --lowp-backward: the gradient arriving at each linear quantized for the backward GEMMs "
     "with scales 2^16 (MxFP8) or 2^24 (HiF8) too large (an amax taken from the wrong tensor): all "
     "but the largest elements of each block flush to zero; the linear in float32 (promotion) is right"},
    {"moe_router_bf16", NP_OP_LINEAR, "bf16|fp16",
     "with --moe: the MoE router's GEMM run under autocast (bf16 inputs and logits) where the model "
     "disables autocast for it: near-tied tokens go to another expert; the router module in float32 "
     "(promotion) is right"},
};
_Static_assert(sizeof prec_defs / sizeof prec_defs[0] == NP_PREC_FAULT_COUNT, "prec_defs");

static np_prec_fault_info prec_infos[NP_PREC_FAULT_COUNT];

int np_prec_fault_count(void) { return NP_PREC_FAULT_COUNT; }

const np_prec_fault_info *np_prec_fault_get(int i)
{
    if (i < 0 || i >= NP_PREC_FAULT_COUNT)
        return NULL;
    const prec_fault_def *d = &prec_defs[i];
    /* filled on every call: constant data, so concurrent callers write the same bytes */
    prec_infos[i] = (np_prec_fault_info){(np_prec_fault)i, d->name,
                                         d->op < NP_OP_COUNT ? np_op_api(d->op) : "", d->needs,
                                         d->description};
    return &prec_infos[i];
}

int np_prec_fault_from_name(const char *name)
{
    for (int i = 0; name && i < NP_PREC_FAULT_COUNT; i++)
        if (!strcmp(name, prec_defs[i].name))
            return i;
    return -1;
}

/* src quantized to the context's format into a buffer of the context (NULL
 * when out of memory): scales moved by 2^shift, block scales dequantized
 * when dq, the quantization's statistics into st when not NULL. */
static const float *quantized(np_ctx *ctx, const float *src, int64_t outer, int64_t K,
                              int64_t inner, int shift, int dq, np_lowp_stats *st)
{
    float *dst = rt_alloc(ctx, (size_t)(outer * K * inner) * sizeof *dst);
    if (!dst)
        return NULL;
    if (st)
        np_lowp_stats_init(st);
    np_lowp_quantize(dst, src, outer, K, inner, (np_lowp)ctx->o.lowp, shift, dq, st);
    return dst;
}

const float *rt_lowp_operand(np_ctx *ctx, int is_weight, const float *src, int64_t outer, int64_t K,
                             int64_t inner)
{
    np_lowp f = (np_lowp)ctx->o.lowp;
    if (f == NP_LOWP_NONE || !src || ctx->ac_off) /* autocast off: the MoE router */
        return src;
    np_prec_fault pf = ctx->o.device == NP_DEVICE_NPU_SIM ? (np_prec_fault)ctx->o.prec_fault
                                                          : NP_PREC_FAULT_NONE;
    int dq = pf == NP_PREC_FAULT_LOWP_BLOCK_SCALE && is_weight;
    int shift = pf == NP_PREC_FAULT_LOWP_SATURATE && !is_weight ? (f == NP_LOWP_MXFP8 ? -4 : -14) : 0;
    return quantized(ctx, src, outer, K, inner, shift, dq, &ctx->lowp_st[is_weight != 0]);
}

const float *rt_lowp_bwd_operand(np_ctx *ctx, int is_grad, const float *src, int64_t outer, int64_t K,
                                 int64_t inner)
{
    np_lowp f = (np_lowp)ctx->o.lowp;
    if (f == NP_LOWP_NONE || !src)
        return src;
    if (is_grad && ctx->o.lowp_backward == 2) /* MX training's gradients: E5M2 elements */
        f = NP_LOWP_MXFP8_E5M2;
    int shift = 0;
    /* the fault: the largest element lands 2^-16 (MX) / 2^-24 (HiF8) / 2^-30 (E5M2) below the format's
     * largest binade, in its smallest normal or subnormal binades */
    if (is_grad && ctx->o.device == NP_DEVICE_NPU_SIM && ctx->o.prec_fault == NP_PREC_FAULT_LOWP_BWD_UNDERFLOW)
        shift = f == NP_LOWP_MXFP8 ? 16 : f == NP_LOWP_MXFP8_E5M2 ? 30 : 24;
    int64_t n = outer * K * inner;
    float *dst = rt_alloc(ctx, (size_t)n * sizeof *dst);
    if (dst)
        np_lowp_quantize(dst, src, outer, K, inner, f, shift, 0, NULL);
    return dst;
}

/* keys by operand: static strings, the event keeps the pointers */
static const char *const stat_keys[2][5] = {
    {"lowp_x_underflow", "lowp_x_saturation", "lowp_x_mse", "lowp_x_scale_min", "lowp_x_scale_max"},
    {"lowp_w_underflow", "lowp_w_saturation", "lowp_w_mse", "lowp_w_scale_min", "lowp_w_scale_max"},
};

void rt_lowp_scalars(np_ctx *ctx, rt_node *nd)
{
    if (ctx->o.lowp == NP_LOWP_NONE || ctx->ac_off)
        return;
    for (int i = 0; i < 2; i++) {
        const np_lowp_stats *st = &ctx->lowp_st[i];
        double n = st->n > 0 ? (double)st->n : 1.0;
        int has = st->scale_lo <= st->scale_hi;
        rt_node_scalar(nd, stat_keys[i][0], 100.0 * (double)st->underflow / n);
        rt_node_scalar(nd, stat_keys[i][1], 100.0 * (double)st->saturated / n);
        rt_node_scalar(nd, stat_keys[i][2], st->sq_err / n);
        rt_node_scalar(nd, stat_keys[i][3], has ? st->scale_lo : 0);
        rt_node_scalar(nd, stat_keys[i][4], has ? st->scale_hi : 0);
    }
}
