/* runtime/ops_attn.c - Functional.scaled_dot_product_attention: q, k, v
 * (B, H, T, D), softmax(q k^T * scale [+ causal mask]) v in one fused kernel
 * (kern_attn.c; its inner matmuls and softmax are not events). The same
 * kernel serves cpu and npu-sim (the npu-sim blocked GEMM is for linear,
 * matmul and conv2d); the attention faults wrap it through ctx->k. Under
 * autocast: q, k, v rounded, scores and probabilities rounded to the low
 * dtype, softmax in float32, output rounded. */
#include <math.h>
#include <string.h>

#include "rt_internal.h"

typedef struct sdpa_state {
    const float *q, *k, *v; /* (BH,T,D) the inputs as the kernel saw them (rounded under autocast) */
    const float *P;         /* (BH,T,T) probabilities */
    rt_attn_geom g;
} sdpa_state;

static void sdpa_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    const sdpa_state *s = nd->st;
    float *dsb = rt_alloc(ctx, (size_t)(s->g.BH * s->g.T * s->g.T) * sizeof(float) + 1);
    if (!dsb)
        return;
    ctx->k.sdpa_backward(gin[0], gin[1], gin[2], dsb, gout[0], s->q, s->k, s->v, s->P, &s->g);
}

np_tensor *np_sdpa(np_ctx *ctx, np_tensor *q, np_tensor *k, np_tensor *v, int is_causal, double scale)
{
    const char *api = np_op_api(NP_OP_SDPA);
    if (!q || !k || !v || ctx->err.status)
        return NULL;
    if (!rt_need_float(ctx, q, api, "query") || !rt_need_float(ctx, k, api, "key") ||
        !rt_need_float(ctx, v, api, "value"))
        return NULL;
    if (q->ndim != 4 || !np_tensor_same_shape(q, k) || !np_tensor_same_shape(q, v))
        return rt_fail(ctx, NP_ERR_SHAPE, api, "%s: query, key and value must all be (B, H, T, D) of one shape", api);
    sdpa_state *s = rt_alloc(ctx, sizeof *s);
    if (!s)
        return NULL;
    rt_attn_geom *g = &s->g;
    *g = (rt_attn_geom){q->shape[0] * q->shape[1], q->shape[2], q->shape[3], is_causal != 0, 0, 0.0};
    g->scale = scale > 0.0 ? scale : 1.0 / sqrt((double)g->D);
    np_dtype ac = rt_ac(ctx);
    np_dtype odt = ac != NP_FLOAT32 ? ac : rt_promote(rt_promote(q->dtype, k->dtype), v->dtype);
    int promoted = rt_promoted(ctx, NP_OP_SDPA);
    if (promoted) /* a per-op override: float32 inside, the output cast back (inside a module: kept) */
        ac = NP_FLOAT32;
    if (promoted == 2)
        odt = NP_FLOAT32;
    np_tensor *y = rt_new(ctx, odt, 4, q->shape);
    s->q = rt_rounded(ctx, q, ac);
    s->k = rt_rounded(ctx, k, ac);
    s->v = rt_rounded(ctx, v, ac);
    float *P = rt_alloc(ctx, (size_t)(g->BH * g->T * g->T) * sizeof(float) + 1);
    if (!y || !s->q || !s->k || !s->v || !P)
        return NULL;
    s->P = P;
    np_tensor *in[3] = {q, k, v};
    rt_node nd;
    rt_node_init(ctx, &nd, NP_OP_SDPA, in, 3);
    nd.k->sdpa_forward(y->data, P, s->q, s->k, s->v, g, ac, odt, nd.k->softmax_row);
    if (ac != NP_FLOAT32)
        nd.gdt[0] = nd.gdt[1] = nd.gdt[2] = ac;
    rt_node_scalar(&nd, "is_causal", g->causal);
    rt_node_scalar(&nd, "scale", g->scale);
    nd.st = s;
    nd.gin_full = 7;
    return rt_finish(ctx, &nd, y, sdpa_bwd);
}
