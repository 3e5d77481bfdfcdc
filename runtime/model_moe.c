/* runtime/model_moe.c - the GPT's mixture of experts (np_model_config.n_expert
 * = E > 0, `nprobe train --moe E`): each block's MLP "h.N.mlp" (class MoE)
 * becomes a router "h.N.mlp.router" (Linear C -> E, no bias) and E experts
 * "h.N.mlp.experts.K" (class MLP: c_fc C -> 4C, erf gelu, c_proj 4C -> C;
 * the dense MLP itself, np_gpt_mlp). Top-1 routing written as a mask, so it
 * is deterministic and differentiable for the chosen expert:
 *
 *   p = softmax(router(x))           (B,T,E), the router in float32 (below)
 *   m = one-hot(argmax p)            a constant (lowest index on ties)
 *   g = p * m                        the chosen expert's probability
 *   y = sum_K g[..., K] * expert_K(x)
 *
 * Every expert runs on every token (dense, E times the MLP's cost: a model
 * for probing, not for speed); the tokens an expert did not win get gate 0,
 * so their gradient to that expert is 0, and the router's gradient is the
 * softmax's backward of dp = m * sum_c(dy * expert(x)). The per-token gate
 * multiplies the expert's output through a transpose ((N,C) -> (C,N), then
 * a suffix broadcast of the (N) gate: the runtime's add/mul broadcast
 * suffixes only), summed over experts and transposed back once.
 *
 * The router runs with autocast disabled (rt_ac float32: float32 inputs,
 * GEMM and logits), as MoE implementations keep the gate ("router GEMM
 * output in fp32"); the precision fault moe_router_bf16 ignores that (the
 * router under autocast like every other linear), and promoting the router
 * module cures it (nprobe promote --granularity module). docs/RUNTIME.md,
 * "MoE". */
#include <stdio.h>
#include <stdlib.h>

#include "model_internal.h"
#include "nprobe/precision.h"
#include "rt_internal.h"

struct np_moe {
    np_module *mod;            /* "h.N.mlp" MoE */
    np_nn_linear router;       /* "h.N.mlp.router" (E, C), no bias */
    int E, C;
    np_gpt_mlp ex[];           /* "h.N.mlp.experts.K" */
};

np_status np_moe_build(np_gpt_block *b, np_ctx *ctx, int i, const np_model_config *c, np_error *err)
{
    int E = c->n_expert, C = c->n_embd;
    char p[64], q[128];
    np_status st;
    np_moe *moe = calloc(1, sizeof *moe + (size_t)E * sizeof moe->ex[0]);
    if (!moe)
        return np_error_set(err, NP_ERR_NOMEM, NULL, "moe", "out of memory");
    b->moe = moe;
    moe->E = E;
    moe->C = C;
    snprintf(p, sizeof p, "h.%d.mlp", i);
    if (!(moe->mod = np_module_new(ctx, p, "MoE")))
        return np_error_set(err, NP_ERR_NOMEM, NULL, p, "cannot register the module");
    snprintf(q, sizeof q, "%s.router", p);
    if ((st = np_nn_linear_init(&moe->router, ctx, q, C, E, 0, err)))
        return st;
    for (int k = 0; k < E; k++) {
        snprintf(q, sizeof q, "%s.experts.%d", p, k);
        if ((st = np_gpt_mlp_build(&moe->ex[k], ctx, q, C, err)))
            return st;
    }
    return NP_OK;
}

void np_moe_free(np_moe *moe) { free(moe); }

/* The router's logits (N..., E): autocast off unless moe_router_bf16 acts. */
static np_tensor *router_forward(np_ctx *ctx, np_moe *moe, np_tensor *x)
{
    int fault = ctx->o.device == NP_DEVICE_NPU_SIM && ctx->o.prec_fault == NP_PREC_FAULT_MOE_ROUTER_BF16;
    int prev = ctx->ac_off;
    ctx->ac_off = !fault;
    np_tensor *logits = NP_AT(ctx, np_nn_linear_forward(ctx, &moe->router, x));
    ctx->ac_off = prev;
    return logits;
}

/* one-hot of each row's largest probability (the first on ties; a NaN row
 * picks expert 0): a step-scoped constant, no gradient */
static np_tensor *top1_mask(np_ctx *ctx, np_tensor *p)
{
    if (!p)
        return NULL;
    np_tensor *m = np_tensor_tmp(ctx, NP_FLOAT32, p->ndim, p->shape);
    const float *pv = np_tensor_f32(p);
    float *mv = m ? np_tensor_f32(m) : NULL;
    if (!mv || !pv)
        return NULL;
    int64_t E = p->shape[p->ndim - 1], rows = p->numel / E;
    for (int64_t r = 0; r < rows; r++) {
        const float *pr = pv + r * E;
        int64_t best = 0;
        for (int64_t k = 1; k < E; k++)
            if (pr[k] > pr[best])
                best = k;
        mv[r * E + best] = 1.0f;
    }
    return m;
}

np_tensor *np_moe_forward(np_ctx *ctx, np_moe *moe, np_tensor *x)
{
    if (!x || np_module_begin(ctx, moe->mod) != NP_OK)
        return NULL;
    int64_t C = moe->C, N = x->numel / C, sNC[2] = {N, C};
    np_tensor *gates[64] = {NULL};
    np_tensor *y = NULL, *acc = NULL; /* acc (C, N): the gated experts' sum */
    np_tensor *logits = NP_AT(ctx, router_forward(ctx, moe, x));
    np_tensor *p = NP_AT(ctx, np_softmax(ctx, logits, -1));
    np_tensor *g = NP_AT(ctx, np_mul(ctx, p, top1_mask(ctx, p)));
    int ng = g ? NP_AT(ctx, np_split(ctx, g, 1, -1, gates, moe->E)) : 0;
    for (int k = 0; k < ng; k++) {
        np_tensor *h = NP_AT(ctx, np_gpt_mlp_forward(ctx, &moe->ex[k], x));
        h = NP_AT(ctx, np_view(ctx, h, 2, sNC));
        h = NP_AT(ctx, np_transpose(ctx, h, 0, 1));               /* (C, N) */
        np_tensor *gk = NP_AT(ctx, np_view(ctx, gates[k], 1, &N)); /* (N) */
        h = NP_AT(ctx, np_mul(ctx, h, gk));
        acc = k ? NP_AT(ctx, np_add(ctx, acc, h)) : h;
    }
    if (ng == moe->E) {
        y = NP_AT(ctx, np_transpose(ctx, acc, 0, 1));             /* (N, C) */
        y = NP_AT(ctx, np_view(ctx, y, x->ndim, x->shape));
    }
    np_module_end(ctx, moe->mod, &x, 1, &y, 1);
    return y;
}
