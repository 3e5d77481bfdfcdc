/* runtime/ops_shape.c - the shape ops: Tensor.view,
 * Tensor.reshape, Torch.flatten (aliasing the input's data), Tensor.transpose
 * and Tensor.split (contiguous copies). Their backward moves gradients back
 * without arithmetic. */
#include <string.h>

#include "rt_internal.h"

/* ---- view / reshape / flatten ----------------------------------------------- */
static void copy_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    if (gin[0])
        memcpy(gin[0], gout[0], (size_t)nd->in[0]->numel * sizeof(float));
}

static np_tensor *alias_op(np_ctx *ctx, np_op op, np_tensor *x, int ndim, const int64_t *shape_in)
{
    const char *api = np_op_api(op);
    if (!x || ctx->err.status)
        return NULL;
    if (ndim < 0 || ndim > NP_MAX_DIMS || (ndim > 0 && !shape_in))
        return rt_fail(ctx, NP_ERR_SHAPE, api, "%s: rank %d outside [0, %d]", api, ndim, NP_MAX_DIMS);
    int64_t shape[NP_MAX_DIMS];
    int infer = -1;
    int64_t known = 1;
    for (int i = 0; i < ndim; i++) {
        shape[i] = shape_in[i];
        if (shape[i] == -1) {
            if (infer >= 0)
                return rt_fail(ctx, NP_ERR_SHAPE, api, "%s: only one dimension can be -1", api);
            infer = i;
        } else if (shape[i] < 0) {
            return rt_fail(ctx, NP_ERR_SHAPE, api, "%s: invalid size %lld", api, (long long)shape[i]);
        } else {
            known *= shape[i];
        }
    }
    if (infer >= 0) {
        if (known == 0 || x->numel % known != 0)
            return rt_fail(ctx, NP_ERR_SHAPE, api, "%s: cannot infer -1 for %lld elements", api, (long long)x->numel);
        shape[infer] = x->numel / known;
        known *= shape[infer];
    }
    if (known != x->numel)
        return rt_fail(ctx, NP_ERR_SHAPE, api, "%s: shape with %lld elements is invalid for input of size %lld", api,
                       (long long)known, (long long)x->numel);
    np_tensor *y = rt_wrap(ctx, x, x->data, x->dtype);
    if (!y)
        return NULL;
    y->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        y->shape[i] = shape[i];
    for (int i = ndim; i < NP_MAX_DIMS; i++)
        y->shape[i] = 0;
    y->numel = known;
    rt_node nd;
    rt_node_init(ctx, &nd, op, &x, 1);
    nd.gin_full = 1;
    return rt_finish(ctx, &nd, y, copy_bwd);
}

np_tensor *np_view(np_ctx *ctx, np_tensor *x, int ndim, const int64_t *shape)
{
    return alias_op(ctx, NP_OP_VIEW, x, ndim, shape);
}

np_tensor *np_reshape(np_ctx *ctx, np_tensor *x, int ndim, const int64_t *shape)
{
    return alias_op(ctx, NP_OP_RESHAPE, x, ndim, shape);
}

np_tensor *np_flatten(np_ctx *ctx, np_tensor *x, int start_dim)
{
    if (!x || ctx->err.status)
        return NULL;
    if (start_dim < 0)
        start_dim += x->ndim;
    if (start_dim < 0 || (x->ndim > 0 && start_dim >= x->ndim) || (x->ndim == 0 && start_dim != 0))
        return rt_fail(ctx, NP_ERR_ARG, np_op_api(NP_OP_FLATTEN), "%s: start_dim %d out of range for rank %d", np_op_api(NP_OP_FLATTEN), start_dim, x->ndim);
    int64_t shape[NP_MAX_DIMS];
    for (int i = 0; i < start_dim; i++)
        shape[i] = x->shape[i];
    shape[start_dim] = np_shape_numel(x->ndim - start_dim, x->shape + start_dim);
    return alias_op(ctx, NP_OP_FLATTEN, x, start_dim + 1, shape);
}

/* ---- transpose ----------------------------------------------------------- */
typedef struct transpose_state {
    int64_t pre, A, mid, B, post; /* the input seen as (pre, A, mid, B, post) */
} transpose_state;

static void transpose_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    const transpose_state *s = nd->st;
    (void)ctx;
    if (gin[0])
        rt_transpose_backward(gin[0], gout[0], s->pre, s->A, s->mid, s->B, s->post);
}

np_tensor *np_transpose(np_ctx *ctx, np_tensor *x, int dim0, int dim1)
{
    const char *api = np_op_api(NP_OP_TRANSPOSE);
    if (!x || ctx->err.status)
        return NULL;
    if (!rt_need_float(ctx, x, api, "input"))
        return NULL;
    int d0 = dim0 < 0 ? dim0 + x->ndim : dim0, d1 = dim1 < 0 ? dim1 + x->ndim : dim1;
    if (d0 < 0 || d0 >= x->ndim || d1 < 0 || d1 >= x->ndim)
        return rt_fail(ctx, NP_ERR_ARG, api, "%s: dims %d, %d out of range for rank %d", api, dim0, dim1, x->ndim);
    if (d0 > d1) {
        int t = d0;
        d0 = d1;
        d1 = t;
    }
    int64_t shape[NP_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[d0] = x->shape[d1];
    shape[d1] = x->shape[d0];
    np_tensor *y = rt_new(ctx, x->dtype, x->ndim, shape);
    transpose_state *s = rt_alloc(ctx, sizeof *s);
    if (!y || !s)
        return NULL;
    *s = (transpose_state){np_shape_numel(d0, x->shape), x->shape[d0],
                           np_shape_numel(d1 - d0 - 1, x->shape + d0 + 1), x->shape[d1],
                           np_shape_numel(x->ndim - d1 - 1, x->shape + d1 + 1)};
    rt_node nd;
    rt_node_init(ctx, &nd, NP_OP_TRANSPOSE, &x, 1);
    if (d0 == d1)
        memcpy(y->data, x->data, np_tensor_nbytes(x));
    else
        rt_transpose_forward(y->data, x->data, s->pre, s->A, s->mid, s->B, s->post);
    rt_node_scalar(&nd, "dim0", dim0);
    rt_node_scalar(&nd, "dim1", dim1);
    nd.gin_full = 1;
    if (d0 == d1)
        return rt_finish(ctx, &nd, y, copy_bwd);
    nd.st = s;
    return rt_finish(ctx, &nd, y, transpose_bwd);
}

/* ---- split --------------------------------------------------------------- */
typedef struct split_state {
    int64_t pre, S, post; /* the input seen as (pre, S, post), S the split dim */
    int64_t split_size;   /* chunk length (the last may be shorter) */
} split_state;

static void split_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    const split_state *s = nd->st;
    (void)ctx;
    if (!gin[0])
        return;
    for (int j = 0; j < nd->n_out; j++) {
        if (!gout[j])
            continue;
        int64_t off = j * s->split_size, len = s->S - off < s->split_size ? s->S - off : s->split_size;
        rt_split_backward(gin[0], gout[j], s->pre, s->S, s->post, off, len);
    }
}

int np_split(np_ctx *ctx, np_tensor *x, int64_t split_size, int dim, np_tensor **out, int max_out)
{
    const char *api = np_op_api(NP_OP_SPLIT);
    if (!x || ctx->err.status)
        return -1;
    if (!rt_need_float(ctx, x, api, "input"))
        return -1;
    int d = dim < 0 ? dim + x->ndim : dim;
    if (d < 0 || d >= x->ndim || split_size <= 0) {
        rt_fail(ctx, NP_ERR_ARG, api, "%s: dim %d (rank %d) or split_size %lld invalid", api, dim, x->ndim, (long long)split_size);
        return -1;
    }
    int64_t S = x->shape[d];
    int64_t n = S == 0 ? 1 : (S + split_size - 1) / split_size;
    if (n > max_out) {
        rt_fail(ctx, NP_ERR_ARG, api, "%s: %lld chunks but room for %d", api, (long long)n, max_out);
        return -1;
    }
    np_tensor **outs = rt_alloc(ctx, sizeof *outs * (size_t)n);
    split_state *s = rt_alloc(ctx, sizeof *s);
    if (!outs || !s)
        return -1;
    *s = (split_state){np_shape_numel(d, x->shape), S, np_shape_numel(x->ndim - d - 1, x->shape + d + 1),
                       split_size};
    rt_node nd;
    rt_node_init(ctx, &nd, NP_OP_SPLIT, &x, 1);
    for (int64_t j = 0; j < n; j++) {
        int64_t off = j * split_size, len = S - off < split_size ? S - off : split_size;
        int64_t shape[NP_MAX_DIMS];
        memcpy(shape, x->shape, sizeof shape);
        shape[d] = len;
        outs[j] = rt_new(ctx, x->dtype, x->ndim, shape);
        if (!outs[j])
            return -1;
        rt_split_forward(outs[j]->data, x->data, s->pre, S, s->post, off, len);
        out[j] = outs[j];
    }
    rt_node_scalar(&nd, "split_size", (double)split_size);
    rt_node_scalar(&nd, "dim", dim);
    nd.st = s;
    rt_finish_multi(ctx, &nd, outs, (int)n, split_bwd);
    return ctx->err.status ? -1 : (int)n;
}
