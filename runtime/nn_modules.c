/* runtime/nn_modules.c - Linear, Conv2d, LayerNorm and Embedding modules:
 * each registers a runtime module (for "Module.{path}.{Class}" events) and
 * its parameters ("{path}.weight", "{path}.bias"), and runs its forward
 * inside np_module_begin/np_module_end. The module's callsite is where the
 * model calls np_nn_*_forward (set by the caller); the op inside gets its own
 * line here (NP_AT). */
#include <stdio.h>
#include <string.h>

#include "nprobe/model.h"

static np_tensor *new_param(np_ctx *ctx, np_module *m, const char *path, const char *key,
                            int ndim, const int64_t *shape, np_error *err)
{
    char name[256];
    snprintf(name, sizeof name, "%s.%s", path, key);
    np_tensor *t = np_tensor_new_param(ctx, NP_FLOAT32, ndim, shape, name);
    if (!t) {
        np_error_set(err, np_ctx_status(ctx) ? np_ctx_status(ctx) : NP_ERR_NOMEM, NULL, name,
                     "cannot create the parameter");
        return NULL;
    }
    if (np_module_add_param(m, key, t) != NP_OK) {
        np_error_set(err, NP_ERR_INTERNAL, NULL, name, "cannot attach the parameter to its module");
        return NULL;
    }
    return t;
}

static np_module *new_module(np_ctx *ctx, const char *path, const char *cls, np_error *err)
{
    np_module *m = np_module_new(ctx, path, cls);
    if (!m)
        np_error_set(err, np_ctx_status(ctx) ? np_ctx_status(ctx) : NP_ERR_NOMEM, NULL, path,
                     "cannot register the %s module", cls);
    return m;
}

np_status np_nn_linear_init(np_nn_linear *l, np_ctx *ctx, const char *path, int in, int out,
                            int bias, np_error *err)
{
    memset(l, 0, sizeof *l);
    if (!(l->mod = new_module(ctx, path, "Linear", err)))
        return NP_ERR_NOMEM;
    int64_t ws[2] = {out, in}, bs[1] = {out};
    if (!(l->weight = new_param(ctx, l->mod, path, "weight", 2, ws, err)))
        return NP_ERR_NOMEM;
    if (bias && !(l->bias = new_param(ctx, l->mod, path, "bias", 1, bs, err)))
        return NP_ERR_NOMEM;
    return NP_OK;
}

np_status np_nn_conv2d_init(np_nn_conv2d *c, np_ctx *ctx, const char *path, int in_ch,
                            int out_ch, int kernel, int stride, int padding, np_error *err)
{
    memset(c, 0, sizeof *c);
    c->stride = stride;
    c->padding = padding;
    if (!(c->mod = new_module(ctx, path, "Conv2d", err)))
        return NP_ERR_NOMEM;
    int64_t ws[4] = {out_ch, in_ch, kernel, kernel}, bs[1] = {out_ch};
    if (!(c->weight = new_param(ctx, c->mod, path, "weight", 4, ws, err)))
        return NP_ERR_NOMEM;
    if (!(c->bias = new_param(ctx, c->mod, path, "bias", 1, bs, err)))
        return NP_ERR_NOMEM;
    return NP_OK;
}

np_status np_nn_layer_norm_init(np_nn_layer_norm *ln, np_ctx *ctx, const char *path, int dim,
                                double eps, np_error *err)
{
    memset(ln, 0, sizeof *ln);
    ln->eps = eps;
    if (!(ln->mod = new_module(ctx, path, "LayerNorm", err)))
        return NP_ERR_NOMEM;
    int64_t s[1] = {dim};
    if (!(ln->weight = new_param(ctx, ln->mod, path, "weight", 1, s, err)))
        return NP_ERR_NOMEM;
    if (!(ln->bias = new_param(ctx, ln->mod, path, "bias", 1, s, err)))
        return NP_ERR_NOMEM;
    np_tensor_fill(ln->weight, 1.0);
    return NP_OK;
}

np_status np_nn_embedding_init(np_nn_embedding *e, np_ctx *ctx, const char *path, int num,
                               int dim, np_error *err)
{
    memset(e, 0, sizeof *e);
    if (!(e->mod = new_module(ctx, path, "Embedding", err)))
        return NP_ERR_NOMEM;
    int64_t s[2] = {num, dim};
    if (!(e->weight = new_param(ctx, e->mod, path, "weight", 2, s, err)))
        return NP_ERR_NOMEM;
    return NP_OK;
}

np_tensor *np_nn_linear_forward(np_ctx *ctx, np_nn_linear *l, np_tensor *x)
{
    if (!x || np_module_begin(ctx, l->mod) != NP_OK)
        return NULL;
    np_tensor *y = NP_AT(ctx, np_linear(ctx, x, l->weight, l->bias));
    np_module_end(ctx, l->mod, &x, 1, &y, 1);
    return y;
}

np_tensor *np_nn_conv2d_forward(np_ctx *ctx, np_nn_conv2d *c, np_tensor *x)
{
    if (!x || np_module_begin(ctx, c->mod) != NP_OK)
        return NULL;
    np_tensor *y = NP_AT(ctx, np_conv2d(ctx, x, c->weight, c->bias, c->stride, c->padding));
    np_module_end(ctx, c->mod, &x, 1, &y, 1);
    return y;
}

np_tensor *np_nn_layer_norm_forward(np_ctx *ctx, np_nn_layer_norm *ln, np_tensor *x)
{
    if (!x || np_module_begin(ctx, ln->mod) != NP_OK)
        return NULL;
    np_tensor *y = NP_AT(ctx, np_layer_norm(ctx, x, ln->weight, ln->bias, ln->eps));
    np_module_end(ctx, ln->mod, &x, 1, &y, 1);
    return y;
}

np_tensor *np_nn_embedding_forward(np_ctx *ctx, np_nn_embedding *e, np_tensor *idx)
{
    if (!idx || np_module_begin(ctx, e->mod) != NP_OK)
        return NULL;
    np_tensor *y = NP_AT(ctx, np_embedding(ctx, idx, e->weight));
    np_module_end(ctx, e->mod, &idx, 1, &y, 1);
    return y;
}
