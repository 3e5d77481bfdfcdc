/* runtime/model_mlp.c - the GPT's MLP (class MLP: c_fc C -> 4C, erf gelu,
 * c_proj 4C -> C), one piece for the dense block's "h.N.mlp" (model_gpt.c)
 * and each MoE expert "h.N.mlp.experts.K" (model_moe.c). Its own file so
 * that neither model calls into the other. */
#include <stdio.h>

#include "model_internal.h"

np_status np_gpt_mlp_build(np_gpt_mlp *m, np_ctx *ctx, const char *path, int C, np_error *err)
{
    char q[160];
    np_status st;
    if (!(m->mod = np_module_new(ctx, path, "MLP")))
        return np_error_set(err, NP_ERR_NOMEM, NULL, path, "cannot register the module");
    snprintf(q, sizeof q, "%s.c_fc", path);
    if ((st = np_nn_linear_init(&m->c_fc, ctx, q, C, 4 * C, 1, err)))
        return st;
    snprintf(q, sizeof q, "%s.c_proj", path);
    return np_nn_linear_init(&m->c_proj, ctx, q, 4 * C, C, 1, err);
}

np_tensor *np_gpt_mlp_forward(np_ctx *ctx, np_gpt_mlp *m, np_tensor *x)
{
    if (!x || np_module_begin(ctx, m->mod) != NP_OK)
        return NULL;
    np_tensor *h = NP_AT(ctx, np_nn_linear_forward(ctx, &m->c_fc, x));
    h = NP_AT(ctx, np_gelu(ctx, h, 0));
    h = NP_AT(ctx, np_nn_linear_forward(ctx, &m->c_proj, h));
    np_module_end(ctx, m->mod, &x, 1, &h, 1);
    return h;
}
