/* runtime/model_gpt.c - a GPT-2-style decoder with GPT-2's module and
 * parameter names: wte, wpe, h.N (ln_1, attn.c_attn, attn.c_proj, ln_2,
 * mlp.c_fc, mlp.c_proj), ln_f, and an lm head tied to wte. Pre-norm blocks,
 * causal attention through Functional.scaled_dot_product_attention, erf gelu,
 * no dropout. Every API and module call is wrapped in NP_AT, one call per
 * statement, so its events carry "model_gpt.c:LINE function". */
#include <stdio.h>
#include <stdlib.h>

#include "model_internal.h"

static np_status block_build(np_gpt_block *b, np_ctx *ctx, int i, const np_model_config *c,
                             np_error *err)
{
    char p[64], q[96];
    int C = c->n_embd;
    np_status st;
    snprintf(p, sizeof p, "h.%d", i);
    if (!(b->mod = np_module_new(ctx, p, "Block")))
        return np_error_set(err, NP_ERR_NOMEM, NULL, p, "cannot register the module");
    snprintf(q, sizeof q, "%s.ln_1", p);
    if ((st = np_nn_layer_norm_init(&b->ln_1, ctx, q, C, c->ln_eps, err)))
        return st;
    snprintf(q, sizeof q, "%s.attn", p);
    if (!(b->attn = np_module_new(ctx, q, "CausalSelfAttention")))
        return np_error_set(err, NP_ERR_NOMEM, NULL, q, "cannot register the module");
    snprintf(q, sizeof q, "%s.attn.c_attn", p);
    if ((st = np_nn_linear_init(&b->c_attn, ctx, q, C, 3 * C, 1, err)))
        return st;
    snprintf(q, sizeof q, "%s.attn.c_proj", p);
    if ((st = np_nn_linear_init(&b->attn_proj, ctx, q, C, C, 1, err)))
        return st;
    snprintf(q, sizeof q, "%s.ln_2", p);
    if ((st = np_nn_layer_norm_init(&b->ln_2, ctx, q, C, c->ln_eps, err)))
        return st;
    if (c->n_expert > 0)
        return np_moe_build(b, ctx, i, c, err);
    snprintf(q, sizeof q, "%s.mlp", p);
    return np_gpt_mlp_build(&b->mlp, ctx, q, C, err);
}

np_status np_model_gpt_build(np_model *m, np_error *err)
{
    const np_model_config *c = &m->cfg;
    np_status st;
    if ((st = np_nn_embedding_init(&m->wte, m->ctx, "wte", c->vocab_size, c->n_embd, err)) ||
        (st = np_nn_embedding_init(&m->wpe, m->ctx, "wpe", c->block_size, c->n_embd, err)))
        return st;
    m->h = calloc((size_t)c->n_layer, sizeof *m->h);
    if (!m->h)
        return np_error_set(err, NP_ERR_NOMEM, NULL, "h", "out of memory");
    for (int i = 0; i < c->n_layer; i++)
        if ((st = block_build(&m->h[i], m->ctx, i, c, err)))
            return st;
    if ((st = np_nn_layer_norm_init(&m->ln_f, m->ctx, "ln_f", c->n_embd, c->ln_eps, err)))
        return st;
    if (!(m->lm_head = np_module_new(m->ctx, "lm_head", "Linear")))
        return np_error_set(err, NP_ERR_NOMEM, NULL, "lm_head", "cannot register the module");
    return NP_OK;
}

/* x (B,T,C) -> (B,T,C): causal self-attention with H heads. */
static np_tensor *attn_forward(np_ctx *ctx, np_gpt_block *b, const np_model_config *c,
                               np_tensor *x)
{
    if (!x || np_module_begin(ctx, b->attn) != NP_OK)
        return NULL;
    int64_t B = x->shape[0], T = x->shape[1], C = c->n_embd, H = c->n_head, D = C / H;
    np_tensor *qkv = NP_AT(ctx, np_nn_linear_forward(ctx, &b->c_attn, x));      /* (B,T,3C) */
    np_tensor *parts[3] = {NULL, NULL, NULL};
    np_tensor *y = NULL;
    int nparts = 0;
    if (qkv) {
        nparts = NP_AT(ctx, np_split(ctx, qkv, C, -1, parts, 3));
    }
    if (nparts == 3) {
        int64_t s4[4] = {B, T, H, D};
        np_tensor *heads[3];
        for (int k = 0; k < 3; k++) {
            heads[k] = NP_AT(ctx, np_view(ctx, parts[k], 4, s4)); /* (B,T,H,D) */
            heads[k] = NP_AT(ctx, np_transpose(ctx, heads[k], 1, 2)); /* (B,H,T,D) */
        }
        y = NP_AT(ctx, np_sdpa(ctx, heads[0], heads[1], heads[2], 1, 0.0)); /* (B,H,T,D) */
        y = NP_AT(ctx, np_transpose(ctx, y, 1, 2)); /* (B,T,H,D) */
        int64_t s3[3] = {B, T, C};
        y = NP_AT(ctx, np_view(ctx, y, 3, s3));
        y = NP_AT(ctx, np_nn_linear_forward(ctx, &b->attn_proj, y));
    }
    np_module_end(ctx, b->attn, &x, 1, &y, 1);
    return y;
}

static np_tensor *block_forward(np_ctx *ctx, np_gpt_block *b, const np_model_config *c,
                                np_tensor *x)
{
    if (!x || np_module_begin(ctx, b->mod) != NP_OK)
        return NULL;
    np_tensor *h = NP_AT(ctx, np_nn_layer_norm_forward(ctx, &b->ln_1, x));
    np_tensor *a = b->tp ? NP_AT(ctx, np_tp_attn_forward(ctx, b, c, h))
                         : NP_AT(ctx, attn_forward(ctx, b, c, h));
    np_tensor *r = NP_AT(ctx, np_add(ctx, x, a));
    h = NP_AT(ctx, np_nn_layer_norm_forward(ctx, &b->ln_2, r));
    np_tensor *f = b->tp    ? NP_AT(ctx, np_tp_mlp_forward(ctx, b, b->tp_layer, h))
                   : b->moe ? NP_AT(ctx, np_moe_forward(ctx, b->moe, h))
                            : NP_AT(ctx, np_gpt_mlp_forward(ctx, &b->mlp, h));
    np_tensor *y = NP_AT(ctx, np_add(ctx, r, f));
    np_module_end(ctx, b->mod, &x, 1, &y, 1);
    return y;
}

np_tensor *np_model_gpt_embed(np_model *m, np_tensor *idx)
{
    np_ctx *ctx = m->ctx;
    const np_model_config *c = &m->cfg;
    if (!idx)
        return NULL;
    if (idx->ndim != 2 || idx->shape[1] > c->block_size)
        return NULL;   /* the trainer checks shapes before; see np_trainer_step */
    int64_t T = idx->shape[1];
    np_tensor *pos = np_tensor_tmp(ctx, NP_INT64, 1, &T);
    if (!pos)
        return NULL;
    int64_t *pp = np_tensor_i64(pos);
    for (int64_t t = 0; t < T; t++)
        pp[t] = t;
    np_tensor *tok = m->vocab ? NP_AT(ctx, np_vocab_embedding(ctx, m->vocab, &m->wte, idx))
                              : NP_AT(ctx, np_nn_embedding_forward(ctx, &m->wte, idx)); /* (B,T,C) */
    np_tensor *pe = NP_AT(ctx, np_nn_embedding_forward(ctx, &m->wpe, pos));    /* (T,C) */
    np_tensor *x = NP_AT(ctx, np_add(ctx, tok, pe));
    np_tp *tp = c->n_layer > 0 ? m->h[0].tp : NULL;
    return NP_AT(ctx, np_sp_enter(ctx, tp, x));
}

np_tensor *np_model_gpt_blocks(np_model *m, np_tensor *x, int l0, int l1)
{
    np_ctx *ctx = m->ctx;
    for (int i = l0; i < l1; i++) {
        x = NP_AT(ctx, block_forward(ctx, &m->h[i], &m->cfg, x));
        m->h[i].out = x;
    }
    return x;
}

np_tensor *np_model_gpt_head(np_model *m, np_tensor *x)
{
    np_ctx *ctx = m->ctx;
    const np_model_config *c = &m->cfg;
    np_tp *tp = c->n_layer > 0 ? m->h[0].tp : NULL;
    x = NP_AT(ctx, np_nn_layer_norm_forward(ctx, &m->ln_f, x));
    /* the vocabulary-parallel head: its input's gradient summed over the group */
    x = m->vocab ? NP_AT(ctx, np_tp_head_input(ctx, tp, x)) : NP_AT(ctx, np_sp_leave(ctx, tp, x));
    if (!x)
        return NULL;
    if (NP_AT(ctx, np_module_begin(ctx, m->lm_head)) != NP_OK)
        return NULL;
    np_tensor *logits = NP_AT(ctx, np_linear(ctx, x, m->wte.weight, NULL)); /* (B,T,V[/T]) */
    np_module_end(ctx, m->lm_head, &x, 1, &logits, 1);
    return logits;
}

np_tensor *np_model_gpt_forward(np_model *m, np_tensor *idx)
{
    for (int i = 0; i < m->cfg.n_layer; i++)
        m->h[i].out = NULL;
    np_tensor *x = np_model_gpt_embed(m, idx);
    x = np_model_gpt_blocks(m, x, 0, m->cfg.n_layer);
    return x ? np_model_gpt_head(m, x) : NULL;
}
