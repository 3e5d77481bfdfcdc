/* ops/ops_registry.c - the op registry (include/internal/nprobe/ops.h): one
 * table says which APIs nprobe recomputes in float64, with their inputs,
 * scalar arguments and defaults, and the generic driver that allocates a
 * call's buffers and runs a pass with its magnitudes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops_ref_internal.h"

#define NAMES(...) ((const char *const[]){__VA_ARGS__, NULL})
#define SCALARS(...) ((const np_op_scalar[]){__VA_ARGS__}), \
    (int)(sizeof((const np_op_scalar[]){__VA_ARGS__}) / sizeof(np_op_scalar))
#define NO_SCALARS NULL, 0
#define ARGS(...) NAMES(__VA_ARGS__)
#define REQ NAN, 1

#define ML NP_OPF_MULTILINEAR
#define ADAPT(a) rt_ref_##a##_fwd, rt_ref_##a##_bwd

/* One entry per np_op, in enum order (no designators: an entry left out
 * shifts the rest, which the count check below and the id check of
 * tests/runtime/test_ops_ref.c catch). */
static const np_op_info op_table[] = {
    {NP_OP_LINEAR, "linear", "Functional.linear", NAMES("Torch.nn.functional.linear"),
                      NAMES("input", "weight", "bias"), 2, 6u, 0u, NO_SCALARS, ML,
                      rt_ref_linear_shape, ADAPT(linear), NULL,
     ARGS("input", "weight", "bias")},
    {NP_OP_MATMUL, "matmul", "Torch.matmul",
                      NAMES("Tensor.matmul", "Tensor.__matmul__", "Torch.bmm", "Tensor.bmm",
                            "Torch.mm", "Tensor.mm"),
                      NAMES("input", "other"), 2, 0u, 0u, NO_SCALARS, ML, rt_ref_matmul_shape,
                      ADAPT(matmul), NULL,
     ARGS("input", "other")},
    {NP_OP_CONV2D, "conv2d", "Functional.conv2d", NAMES("Torch.conv2d"),
                      NAMES("input", "weight", "bias"), 2, 6u, 0u,
                      SCALARS({"stride", 1, 0}, {"padding", 0, 0}, {"dilation", 1, 0},
                              {"groups", 1, 0}),
                      ML, rt_ref_conv2d_shape, ADAPT(conv2d), rt_ref_conv2d_unsupported,
     ARGS("input", "weight", "bias", "stride", "padding", "dilation", "groups")},
    {NP_OP_MAX_POOL2D, "max_pool2d", "Functional.max_pool2d",
                          NAMES("Torch.max_pool2d"), NAMES("input"), 1, 0u, 0u,
                          SCALARS({"kernel_size", REQ}, {"stride", 0, 0}, {"padding", 0, 0},
                                  {"dilation", 1, 0}),
                          0, rt_ref_max_pool2d_shape, ADAPT(max_pool2d),
                          rt_ref_max_pool2d_unsupported,
     ARGS("input", "kernel_size", "stride", "padding", "dilation", "~ceil_mode",
          "~return_indices")},
    {NP_OP_EMBEDDING, "embedding", "Functional.embedding", NAMES("Torch.embedding"),
                         NAMES("input", "weight"), 2, 2u, 1u,
                         SCALARS({"padding_idx", NAN, 0}, {"max_norm", NAN, 0},
                                 {"scale_grad_by_freq", 0, 0}),
                         ML, rt_ref_embedding_shape, ADAPT(embedding), rt_ref_embedding_unsupported,
     ARGS("input", "weight", "padding_idx", "max_norm", "~norm_type", "~scale_grad_by_freq",
          "~sparse")},
    {NP_OP_RELU, "relu", "Functional.relu", NAMES("Torch.relu", "Tensor.relu"),
                    NAMES("input"), 1, 0u, 0u, NO_SCALARS, 0, rt_ref_same_shape, ADAPT(pointwise),
                    NULL,
     ARGS("input", "~inplace")},
    {NP_OP_GELU, "gelu", "Functional.gelu", NAMES("Torch.gelu"), NAMES("input"), 1,
                    0u, 0u, SCALARS({"approximate", 0, 0}), 0, rt_ref_same_shape,
                    ADAPT(pointwise), NULL,
     ARGS("input", "approximate")},
    {NP_OP_SILU, "silu", "Functional.silu", NAMES("Torch.silu"), NAMES("input"), 1,
                    0u, 0u, NO_SCALARS, 0, rt_ref_same_shape, ADAPT(pointwise), NULL,
     ARGS("input", "~inplace")},
    {NP_OP_DROPOUT, "dropout", "Functional.dropout", NAMES("Torch.dropout"),
                       NAMES("input"), 1, 0u, 0u, SCALARS({"p", 0.5, 0}, {"training", 1, 0}),
                       NP_OPF_RANDOM, rt_ref_same_shape, ADAPT(pointwise),
                       rt_ref_dropout_random,
     ARGS("input", "p", "training", "~inplace")},
    {NP_OP_LAYER_NORM, "layer_norm", "Functional.layer_norm",
                          NAMES("Torch.layer_norm"), NAMES("input", "weight", "bias"), 1, 6u, 0u,
                          SCALARS({"eps", 1e-5, 0}), 0, rt_ref_norm_shape, ADAPT(layernorm),
                          NULL,
     ARGS("input", "~normalized_shape", "weight", "bias", "eps")},
    {NP_OP_RMS_NORM, "rms_norm", "Functional.rms_norm", NAMES("Torch.rms_norm"),
                        NAMES("input", "weight"), 1, 2u, 0u, SCALARS({"eps", -1, 0}), 0,
                        rt_ref_norm_shape, ADAPT(rmsnorm), NULL,
     ARGS("input", "~normalized_shape", "weight", "eps")},
    {NP_OP_SOFTMAX, "softmax", "Functional.softmax",
                       NAMES("Torch.softmax", "Tensor.softmax"), NAMES("input"), 1, 0u, 0u,
                       SCALARS({"dim", REQ}), 0, rt_ref_softmax_shape, ADAPT(softmax), NULL,
     ARGS("input", "dim", "~_stacklevel", "~dtype")},
    {NP_OP_LOG_SOFTMAX, "log_softmax", "Functional.log_softmax",
                           NAMES("Torch.log_softmax", "Tensor.log_softmax"), NAMES("input"), 1,
                           0u, 0u, SCALARS({"dim", REQ}), 0, rt_ref_softmax_shape,
                           ADAPT(softmax), NULL,
     ARGS("input", "dim", "~_stacklevel", "~dtype")},
    {NP_OP_SDPA, "scaled_dot_product_attention",
                    "Functional.scaled_dot_product_attention", NULL,
                    NAMES("query", "key", "value"), 3, 0u, 0u,
                    SCALARS({"is_causal", 0, 0}, {"scale", 0, 0}, {"dropout_p", 0, 0}), 0,
                    rt_ref_sdpa_shape, ADAPT(sdpa), NULL,
     ARGS("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale")},
    {NP_OP_CROSS_ENTROPY, "cross_entropy", "Functional.cross_entropy",
                             NULL, NAMES("input", "target"), 2, 0u, 2u,
                             SCALARS({"ignore_index", -100, 0}, {"label_smoothing", 0, 0},
                                     {"reduction", 1, 0}),
                             0, rt_ref_cross_entropy_shape, ADAPT(cross_entropy),
                             rt_ref_cross_entropy_unsupported,
     ARGS("input", "target", "weight", "size_average", "ignore_index", "reduce", "reduction",
          "label_smoothing")},
    {NP_OP_ADD, "add", "Tensor.add",
                   NAMES("Torch.add", "Tensor.__add__", "Tensor.__radd__"),
                   NAMES("input", "other"), 1, 0u, 0u, SCALARS({"other", REQ}, {"alpha", 1, 0}),
                   ML, rt_ref_binary_shape, ADAPT(binary), NULL,
     ARGS("input", "other")},
    {NP_OP_SUB, "sub", "Tensor.sub", NAMES("Torch.sub", "Tensor.__sub__"),
                   NAMES("input", "other"), 1, 0u, 0u, SCALARS({"other", REQ}, {"alpha", 1, 0}),
                   ML, rt_ref_binary_shape, ADAPT(binary), NULL,
     ARGS("input", "other")},
    {NP_OP_MUL, "mul", "Tensor.mul",
                   NAMES("Torch.mul", "Tensor.__mul__", "Tensor.__rmul__"),
                   NAMES("input", "other"), 1, 0u, 0u, SCALARS({"other", REQ}), ML,
                   rt_ref_binary_shape, ADAPT(binary), NULL,
     ARGS("input", "other")},
    {NP_OP_DIV, "div", "Tensor.div",
                   NAMES("Torch.div", "Tensor.__truediv__", "Tensor.__div__"),
                   NAMES("input", "other"), 1, 0u, 0u, SCALARS({"other", REQ}), ML,
                   rt_ref_binary_shape, ADAPT(binary), NULL,
     ARGS("input", "other")},
    {NP_OP_SUM, "sum", "Torch.sum", NAMES("Tensor.sum"), NAMES("input"), 1, 0u, 0u,
                   SCALARS({"dim", NAN, 0}), ML, rt_ref_reduce_shape, ADAPT(reduce), NULL,
     ARGS("input", "dim", "~keepdim", "~dtype")},
    {NP_OP_MEAN, "mean", "Torch.mean", NAMES("Tensor.mean"), NAMES("input"), 1, 0u,
                    0u, SCALARS({"dim", NAN, 0}), ML, rt_ref_reduce_shape, ADAPT(reduce), NULL,
     ARGS("input", "dim", "~keepdim", "~dtype")},
    {NP_OP_VIEW, "view", "Tensor.view",
                    NAMES("Tensor.contiguous"),
                    NAMES("input"), 1, 0u, 0u, NO_SCALARS, ML | NP_OPF_EXACT, rt_ref_view_shape,
                    ADAPT(copy), NULL,
     ARGS("input", "~*")},
    {NP_OP_TRANSPOSE, "transpose", "Tensor.transpose",
                         NAMES("Torch.transpose"), NAMES("input"), 1, 0u, 0u,
                         SCALARS({"dim0", REQ}, {"dim1", REQ}), ML | NP_OPF_EXACT,
                         rt_ref_transpose_shape, ADAPT(transpose), NULL,
     ARGS("input", "dim0", "dim1")},
    {NP_OP_SPLIT, "split", "Tensor.split", NAMES("Torch.split"), NAMES("input"), 1,
                     0u, 0u, SCALARS({"split_size", REQ}, {"dim", 0, 0}), ML | NP_OPF_EXACT,
                     rt_ref_split_shape, ADAPT(split), NULL,
     ARGS("input", "split_size", "dim")},
    {NP_OP_RESHAPE, "reshape", "Tensor.reshape", NAMES("Torch.reshape"), NAMES("input"), 1, 0u,
     0u, NO_SCALARS, ML | NP_OPF_EXACT | NP_OPF_AS_VIEW, rt_ref_view_shape, ADAPT(copy), NULL,
     NULL},
    {NP_OP_FLATTEN, "flatten", "Torch.flatten", NAMES("Tensor.flatten"), NAMES("input"), 1, 0u,
     0u, NO_SCALARS, ML | NP_OPF_EXACT | NP_OPF_AS_VIEW, rt_ref_view_shape, ADAPT(copy), NULL,
     NULL},
    {NP_OP_TANH, "tanh", "Torch.tanh", NAMES("Tensor.tanh", "Functional.tanh"), NAMES("input"), 1,
     0u, 0u, NO_SCALARS, 0, rt_ref_same_shape, ADAPT(pointwise), NULL,
     ARGS("input")},
};

_Static_assert(sizeof op_table / sizeof op_table[0] == NP_OP_COUNT,
               "op_table must hold one entry per np_op, in enum order");
/* As ggml's GGML_OP_COUNT check: a new op must be added here on purpose,
 * with its entry above, its kernels and its tests. */
_Static_assert(NP_OP_COUNT == 27, "a new op: add its op_table entry, kernels and tests, then this count");

const np_op_info *np_op_get(int op)
{
    return op >= 0 && op < NP_OP_COUNT ? &op_table[op] : NULL;
}

const char *np_op_name(int op)
{
    return op >= 0 && op < NP_OP_COUNT ? op_table[op].name : "unknown";
}

const char *np_op_api(int op)
{
    return op >= 0 && op < NP_OP_COUNT ? op_table[op].api : "Unknown.op";
}

int np_op_from_api(const char *api)
{
    if (!api)
        return -1;
    for (int i = 0; i < NP_OP_COUNT; i++) {
        int hit = strcmp(api, op_table[i].api) == 0;
        for (const char *const *a = op_table[i].aliases; !hit && a && *a; a++)
            hit = strcmp(api, *a) == 0;
        if (hit)
            return op_table[i].flags & NP_OPF_AS_VIEW ? NP_OP_VIEW : i;
    }
    return -1;
}

const char *np_op_call_of(const char *name, int op)
{
    if (!name || op < 0 || op >= NP_OP_COUNT)
        return NULL;
    size_t n = strlen(op_table[op].api);
    return !strncmp(name, op_table[op].api, n) && name[n] == '.' ? name + n + 1 : NULL;
}

int np_op_scalar_index(const np_op_info *info, const char *key)
{
    for (int i = 0; info && key && i < info->n_scalars; i++)
        if (strcmp(info->scalars[i].name, key) == 0)
            return i;
    return -1;
}

int64_t np_op_numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    return n;
}

void rt_ref_set_shape(np_op_tensor *t, int ndim, const int64_t *shape)
{
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        t->shape[i] = shape[i];
    t->numel = np_op_numel(ndim, t->shape);
}

void rt_ref_abs_copy(double *dst, const double *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = fabs(src[i]);
}

double rt_ref_rms_eps(double eps)
{
    return eps < 0.0 ? 1.1920928955078125e-07 : eps;
}

void np_op_call_init(np_op_call *c, const np_op_info *info)
{
    memset(c, 0, sizeof *c);
    c->info = info;
    for (int i = 0; info && i < info->n_scalars; i++)
        c->sc[i] = info->scalars[i].def;
}

/* ---- the driver ------------------------------------------------------------------ */

#define OWN_MAX (2 * (NP_OP_MAX_OUT + NP_OP_MAX_IN))

typedef struct owned {
    int n;
    double *p[OWN_MAX];
} owned;

static double *own_new(np_op_call *c, int64_t n, double fill)
{
    owned *o = c->owned;
    if (!o && !(o = c->owned = calloc(1, sizeof *o)))
        return NULL;
    if (o->n == OWN_MAX)
        return NULL;
    double *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    if (!p)
        return NULL;
    for (int64_t i = 0; i < n; i++)
        p[i] = fill;
    o->p[o->n++] = p;
    return p;
}

np_status np_op_call_alloc(np_op_call *c, np_op_pass pass, int mag, np_error *err)
{
    int n = pass == NP_OP_FORWARD ? c->n_out : c->n_in;
    np_op_tensor *t = pass == NP_OP_FORWARD ? c->out : c->gin;
    for (int i = 0; i < n; i++) {
        if (pass == NP_OP_BACKWARD) {
            if (!c->want_gin[i] || !c->in[i].data) {
                c->want_gin[i] = 0;
                continue;
            }
            rt_ref_set_shape(&t[i], c->in[i].ndim, c->in[i].shape);
        }
        if (!(t[i].data = own_new(c, t[i].numel, 0.0)) ||
            (mag && !(t[i].mag = own_new(c, t[i].numel, NAN))))
            return np_error_set(err, NP_ERR_NOMEM, NULL, c->info ? c->info->name : NULL,
                                "out of memory for %lld float64 values", (long long)t[i].numel);
    }
    return NP_OK;
}

void np_op_call_free(np_op_call *c)
{
    owned *o = c->owned;
    for (int i = 0; o && i < o->n; i++)
        free(o->p[i]);
    free(o);
    c->owned = NULL;
}

/* A copy of t's values, made absolute (or zeros when t has none, n elements). */
static double *abs_dup(const np_op_tensor *t, int64_t n)
{
    double *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    for (int64_t i = 0; p && i < n; i++)
        p[i] = t->data ? fabs(t->data[i]) : 0.0;
    return p;
}

/* A multilinear op's magnitudes: the same pass on |inputs| (and |gradients|). */
static np_status run_abs(np_op_call *c, np_op_pass pass, np_error *err)
{
    np_op_call a = *c;
    double *tmp[NP_OP_MAX_IN + NP_OP_MAX_OUT] = {0};
    int nt = 0, ok = 1;
    a.absmode = 1;
    a.owned = NULL;
    for (int i = 0; i < c->n_in; i++)
        if (c->in[i].data && ok)
            ok = (a.in[i].data = tmp[nt++] = abs_dup(&c->in[i], c->in[i].numel)) != NULL;
    np_op_tensor *t = pass == NP_OP_FORWARD ? a.out : a.gin;
    int n = pass == NP_OP_FORWARD ? c->n_out : c->n_in;
    for (int i = 0; pass == NP_OP_BACKWARD && ok && i < c->n_out; i++)
        ok = (a.gout[i].data = tmp[nt++] = abs_dup(&c->gout[i], c->gout[i].numel)) != NULL;
    for (int i = 0; i < n; i++) {
        t[i].data = t[i].mag;
        t[i].mag = NULL;
    }
    if (ok) {
        if (pass == NP_OP_FORWARD)
            c->info->forward(&a);
        else
            c->info->backward(&a);
        for (int i = 0; i < n; i++)
            if (t[i].data)
                rt_ref_abs_copy(t[i].data, t[i].data, t[i].numel);
    }
    for (int i = 0; i < nt; i++)
        free(tmp[i]);
    return ok ? NP_OK : np_error_set(err, NP_ERR_NOMEM, NULL, c->info->name, "out of memory");
}

/* Zero gradients for the outputs that received none (data NULL). */
static np_status zero_gouts(np_op_call *c, np_error *err)
{
    for (int i = 0; i < c->n_out; i++)
        if (!c->gout[i].data) {
            c->gout[i].ndim = c->out[i].ndim;
            memcpy(c->gout[i].shape, c->out[i].shape, sizeof c->gout[i].shape);
            c->gout[i].numel = c->out[i].numel;
            if (!(c->gout[i].data = own_new(c, c->out[i].numel, 0.0)))
                return np_error_set(err, NP_ERR_NOMEM, NULL, c->info->name, "out of memory");
        }
    return NP_OK;
}

np_status np_op_run(np_op_call *c, np_op_pass pass, np_error *err)
{
    const np_op_info *info = c->info;
    if (!info)
        return np_error_set(err, NP_ERR_ARG, NULL, NULL, "np_op_run: the call has no op");
    if (pass == NP_OP_BACKWARD && !info->backward)
        return np_error_set(err, NP_ERR_UNSUPPORTED, NULL, info->name,
                            "%s: no backward kernel", info->name);
    if (pass == NP_OP_BACKWARD) {
        /* no input takes a gradient (integer inputs, a view of a no-grad
         * tensor): nothing to compute, and the single-input kernels write
         * gin[0] unguarded */
        int any = 0;
        for (int i = 0; i < c->n_in; i++)
            any |= c->gin[i].data != NULL;
        if (!any)
            return NP_OK;
    }
    if (pass == NP_OP_BACKWARD && zero_gouts(c, err))
        return err ? err->status : NP_ERR_NOMEM;
    np_op_tensor *t = pass == NP_OP_FORWARD ? c->out : c->gin;
    int n = pass == NP_OP_FORWARD ? c->n_out : c->n_in, any_mag = 0;
    /* a kernel writes every output, and may write the gradient of every
     * input it was given: it writes only into buffers the call owns */
    int scratch[NP_OP_MAX_IN] = {0};
    for (int i = 0; i < n; i++) {
        if (pass == NP_OP_FORWARD && !t[i].data)
            return np_error_set(err, NP_ERR_ARG, NULL, info->name,
                                "%s: output %d has no buffer (np_op_call_alloc first)",
                                info->name, i);
        if (pass == NP_OP_BACKWARD && c->want_gin[i] && !t[i].data)
            return np_error_set(err, NP_ERR_ARG, NULL, info->name,
                                "%s: the gradient of input %d has no buffer "
                                "(np_op_call_alloc first)", info->name, i);
        if (pass == NP_OP_BACKWARD && !t[i].data && c->in[i].data) {
            rt_ref_set_shape(&t[i], c->in[i].ndim, c->in[i].shape);
            if (!(t[i].data = own_new(c, t[i].numel, 0.0)) ||
                !(t[i].mag = own_new(c, t[i].numel, 0.0)))
                return np_error_set(err, NP_ERR_NOMEM, NULL, info->name, "out of memory");
            scratch[i] = 1;
        }
    }
    if (pass == NP_OP_FORWARD)
        info->forward(c);
    else
        info->backward(c);
    for (int i = 0; i < n; i++)
        any_mag |= t[i].data && t[i].mag && !scratch[i];
    if (any_mag && (info->flags & NP_OPF_MULTILINEAR)) {
        np_status st = run_abs(c, pass, err);
        if (st)
            return st;
    }
    for (int i = 0; i < n; i++) /* scratch gradients nobody asked for: dropped */
        if (scratch[i])
            t[i].data = t[i].mag = NULL;
    /* a magnitude a kernel left unset is the value's own size */
    for (int i = 0; i < n; i++)
        for (int64_t j = 0; t[i].data && t[i].mag && j < t[i].numel; j++)
            if (isnan(t[i].mag[j]))
                t[i].mag[j] = fabs(t[i].data[j]);
    return NP_OK;
}
