/* ops/ref_elem.c - float64 reference kernels of the pointwise ops (relu,
 * gelu in both forms, silu, dropout), the broadcasting binary ops (add, sub,
 * mul, div), the reductions (sum, mean) and the shape ops (view/reshape/
 * flatten, transpose, split), with their registry entries
 * (include/internal/nprobe/ops.h). Binary ops broadcast as PyTorch does (shapes
 * aligned on the right, size-1 dimensions stretched); their backward sums
 * the gradient over the stretched dimensions, serially, in element order. */
#include <math.h>
#include <string.h>

#include "ops_ref_internal.h"

#define SQRT_2_PI 0.7978845608028654 /* sqrt(2 / pi) */

/* ---- pointwise ---------------------------------------------------------------- */

void np_ref_relu_forward(double *out, const double *inp, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = inp[i] > 0.0 ? inp[i] : (isnan(inp[i]) ? inp[i] : 0.0);
}

void np_ref_relu_backward(double *dinp, const double *dout, const double *inp, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dinp[i] = inp[i] > 0.0 ? dout[i] : 0.0;
}

void np_ref_gelu_forward(double *out, const double *inp, int64_t n, int approximate)
{
    for (int64_t i = 0; i < n; i++) {
        double x = inp[i];
        out[i] = approximate ? 0.5 * x * (1.0 + tanh(SQRT_2_PI * (x + 0.044715 * x * x * x)))
                             : 0.5 * x * erfc(-x / sqrt(2.0));
    }
}

void np_ref_gelu_backward(double *dinp, const double *dout, const double *inp, int64_t n,
                          int approximate)
{
    for (int64_t i = 0; i < n; i++) {
        double x = inp[i], d;
        if (approximate) {
            double u = SQRT_2_PI * (x + 0.044715 * x * x * x), t = tanh(u);
            d = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * SQRT_2_PI * (1.0 + 3 * 0.044715 * x * x);
        } else {
            d = 0.5 * erfc(-x / sqrt(2.0)) + x * exp(-0.5 * x * x) * 0.3989422804014327 /* 1/sqrt(2 pi) */;
        }
        dinp[i] = dout[i] * d;
    }
}

void np_ref_silu_forward(double *out, const double *inp, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = inp[i] / (1.0 + exp(-inp[i]));
}

void np_ref_silu_backward(double *dinp, const double *dout, const double *inp, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        double s = 1.0 / (1.0 + exp(-inp[i]));
        dinp[i] = dout[i] * s * (1.0 + inp[i] * (1.0 - s));
    }
}

void np_ref_tanh_forward(double *out, const double *inp, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = tanh(inp[i]);
}

void np_ref_tanh_backward(double *dinp, const double *dout, const double *inp, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        double t = tanh(inp[i]);
        dinp[i] = dout[i] * (1.0 - t * t);
    }
}

np_status rt_ref_same_shape(np_op_call *c, np_error *err)
{
    (void)err;
    c->n_out = 1;
    rt_ref_set_shape(&c->out[0], c->in[0].ndim, c->in[0].shape);
    return NP_OK;
}

void rt_ref_pointwise_fwd(np_op_call *c)
{
    double *y = c->out[0].data;
    const double *x = c->in[0].data;
    int64_t n = c->in[0].numel;
    switch (c->info->op) {
    case NP_OP_RELU: np_ref_relu_forward(y, x, n); break;
    case NP_OP_GELU: np_ref_gelu_forward(y, x, n, c->sc[0] != 0.0); break;
    case NP_OP_SILU: np_ref_silu_forward(y, x, n); break;
    case NP_OP_TANH: np_ref_tanh_forward(y, x, n); break;
    default: memcpy(y, x, (size_t)n * sizeof(double)); break; /* dropout in eval */
    }
    if (c->out[0].mag)
        rt_ref_abs_copy(c->out[0].mag, y, n);
    /* GELU = x/2 (1 + erf(x/sqrt 2)) (or tanh): the sum cancels for negative
     * x, a float32 kernel's error is relative to x/2 (1 + |erf|) */
    for (int64_t i = 0; c->out[0].mag && c->info->op == NP_OP_GELU && i < n; i++) {
        double t = c->sc[0] != 0.0
                       ? tanh(0.7978845608028654 * (x[i] + 0.044715 * x[i] * x[i] * x[i]))
                       : erf(x[i] * 0.7071067811865476);
        c->out[0].mag[i] = 0.5 * fabs(x[i]) * (1.0 + fabs(t));
    }
}

void rt_ref_pointwise_bwd(np_op_call *c)
{
    double *d = c->gin[0].data;
    const double *x = c->in[0].data, *g = c->gout[0].data;
    int64_t n = c->in[0].numel;
    switch (c->info->op) {
    case NP_OP_RELU: np_ref_relu_backward(d, g, x, n); break;
    case NP_OP_GELU: np_ref_gelu_backward(d, g, x, n, c->sc[0] != 0.0); break;
    case NP_OP_SILU: np_ref_silu_backward(d, g, x, n); break;
    case NP_OP_TANH: np_ref_tanh_backward(d, g, x, n); break;
    default: memcpy(d, g, (size_t)n * sizeof(double)); break;
    }
    if (c->gin[0].mag)
        rt_ref_abs_copy(c->gin[0].mag, d, n);
    /* the derivative is a sum of terms that cancel where it crosses zero
     * (GELU near x = -0.75, SiLU near -1.28): the magnitude is |dout| times
     * the sum of their absolute values (docs/COMPARE.md, isolated error) */
    for (int64_t i = 0; c->gin[0].mag && i < n; i++) {
        double xi = x[i], m;
        if (c->info->op == NP_OP_GELU && c->sc[0] != 0.0) {
            double u = 0.7978845608028654 * (xi + 0.044715 * xi * xi * xi), t = tanh(u);
            m = 0.5 * (1.0 + fabs(t)) + fabs(0.5 * xi * (1.0 - t * t) * 0.7978845608028654 *
                                             (1.0 + 3 * 0.044715 * xi * xi));
        } else if (c->info->op == NP_OP_GELU)
            m = 0.5 * (1.0 + fabs(erf(xi * 0.7071067811865476))) +
                fabs(xi) * exp(-0.5 * xi * xi) * 0.3989422804014327;
        else if (c->info->op == NP_OP_SILU) {
            double sg = 1.0 / (1.0 + exp(-xi));
            m = sg + fabs(xi) * sg * (1.0 - sg);
        } else
            continue;
        c->gin[0].mag[i] = fabs(g[i]) * m;
    }
}

const char *rt_ref_dropout_random(const np_op_call *c)
{
    return c->sc[1] != 0.0 && c->sc[0] != 0.0 ? "dropout in training: its mask is random" : NULL;
}

/* ---- broadcasting binary ops --------------------------------------------------- */

/* Strides of `t` seen from an output of ndim dims (0 along stretched dims). */
static void bcast_strides(int64_t *st, const np_op_tensor *t, int ndim, const int64_t *oshape)
{
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        int ti = i - (ndim - t->ndim);
        int64_t d = ti >= 0 ? t->shape[ti] : 1;
        st[i] = (d == 1 && oshape[i] != 1) ? 0 : s;
        s *= d;
    }
}

typedef struct bcast {
    int ndim;
    int64_t shape[NP_OP_MAX_DIM], sa[NP_OP_MAX_DIM], sb[NP_OP_MAX_DIM];
} bcast;

static void bcast_init(bcast *bc, const np_op_call *c)
{
    bc->ndim = c->out[0].ndim;
    memcpy(bc->shape, c->out[0].shape, sizeof bc->shape);
    bcast_strides(bc->sa, &c->in[0], bc->ndim, bc->shape);
    if (c->in[1].data)
        bcast_strides(bc->sb, &c->in[1], bc->ndim, bc->shape);
    else
        memset(bc->sb, 0, sizeof bc->sb);
}

/* Offsets into a and b of output element i. */
static void bcast_at(const bcast *bc, int64_t i, int64_t *ia, int64_t *ib)
{
    *ia = *ib = 0;
    for (int d = bc->ndim - 1; d >= 0; d--) {
        int64_t k = i % bc->shape[d];
        i /= bc->shape[d];
        *ia += k * bc->sa[d];
        *ib += k * bc->sb[d];
    }
}

np_status rt_ref_binary_shape(np_op_call *c, np_error *err)
{
    const np_op_tensor *a = &c->in[0], *b = &c->in[1];
    int nb = b->data ? b->ndim : 0, n = a->ndim > nb ? a->ndim : nb;
    int64_t s[NP_OP_MAX_DIM];
    for (int i = 0; i < n; i++) {
        int ia = i - (n - a->ndim), ib = i - (n - nb);
        int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return np_error_set(err, NP_ERR_SHAPE, NULL, c->info->name,
                                "%s: shapes do not broadcast (dimension %d: %lld against %lld)",
                                c->info->name, i, (long long)da, (long long)db);
        s[i] = da == 1 ? db : da;
    }
    c->n_out = 1;
    rt_ref_set_shape(&c->out[0], n, s);
    return NP_OK;
}

/* b, or the scalar `other` when the second operand is not a tensor. */
static double operand_b(const np_op_call *c, int64_t ib)
{
    return c->in[1].data ? c->in[1].data[ib] : c->sc[0];
}

void rt_ref_binary_fwd(np_op_call *c)
{
    bcast bc;
    bcast_init(&bc, c);
    double alpha = c->info->op == NP_OP_ADD || c->info->op == NP_OP_SUB ? c->sc[1] : 1.0;
    if (c->info->op == NP_OP_SUB && !c->absmode)
        alpha = -alpha;
    if (c->absmode)
        alpha = fabs(alpha);
    for (int64_t i = 0; i < c->out[0].numel; i++) {
        int64_t ia, ib;
        bcast_at(&bc, i, &ia, &ib);
        double a = c->in[0].data[ia], b = operand_b(c, ib), y;
        switch (c->info->op) {
        case NP_OP_MUL: y = a * b; break;
        case NP_OP_DIV: y = a / b; break;
        default: y = a + alpha * b; break;
        }
        c->out[0].data[i] = y;
    }
}

void rt_ref_binary_bwd(np_op_call *c)
{
    bcast bc;
    bcast_init(&bc, c);
    int op = c->info->op;
    double alpha = op == NP_OP_ADD || op == NP_OP_SUB ? c->sc[1] : 1.0;
    if (op == NP_OP_SUB && !c->absmode)
        alpha = -alpha;
    double *ga = c->want_gin[0] ? c->gin[0].data : NULL;
    double *gb = c->want_gin[1] && c->in[1].data ? c->gin[1].data : NULL;
    if (ga)
        memset(ga, 0, (size_t)c->in[0].numel * sizeof(double));
    if (gb)
        memset(gb, 0, (size_t)c->in[1].numel * sizeof(double));
    for (int64_t i = 0; i < c->out[0].numel; i++) {
        int64_t ia, ib;
        bcast_at(&bc, i, &ia, &ib);
        double g = c->gout[0].data[i], a = c->in[0].data[ia], b = operand_b(c, ib);
        switch (op) {
        case NP_OP_MUL:
            if (ga) ga[ia] += g * b;
            if (gb) gb[ib] += g * a;
            break;
        case NP_OP_DIV:
            if (ga) ga[ia] += g / b;
            if (gb) gb[ib] += -g * a / (b * b);
            break;
        default:
            if (ga) ga[ia] += g;
            if (gb) gb[ib] += alpha * g;
            break;
        }
    }
}

/* ---- reductions: sum, mean over every element -------------------------------------- */

np_status rt_ref_reduce_shape(np_op_call *c, np_error *err)
{
    (void)err;
    c->n_out = 1;
    rt_ref_set_shape(&c->out[0], 0, NULL);
    return NP_OK;
}

void rt_ref_reduce_fwd(np_op_call *c)
{
    double s = 0.0;
    for (int64_t i = 0; i < c->in[0].numel; i++)
        s += c->in[0].data[i];
    if (c->info->op == NP_OP_MEAN)
        s /= (double)c->in[0].numel;
    c->out[0].data[0] = s;
}

void rt_ref_reduce_bwd(np_op_call *c)
{
    double g = c->gout[0].data[0];
    if (c->info->op == NP_OP_MEAN)
        g /= (double)c->in[0].numel;
    for (int64_t i = 0; i < c->in[0].numel; i++)
        c->gin[0].data[i] = g;
}

/* ---- shape ops ------------------------------------------------------------------- */

/* view/reshape/flatten: the output shape is the dumped one (out[0] is preset by the
 * caller through c->out[0].shape when known); without it, the input's. */
np_status rt_ref_view_shape(np_op_call *c, np_error *err)
{
    c->n_out = 1;
    if (c->out[0].ndim == 0 && c->out[0].numel == 0)
        rt_ref_set_shape(&c->out[0], c->in[0].ndim, c->in[0].shape);
    c->out[0].numel = np_op_numel(c->out[0].ndim, c->out[0].shape);
    if (c->out[0].numel != c->in[0].numel)
        return np_error_set(err, NP_ERR_SHAPE, NULL, "view",
                            "view: the output's %lld elements differ from the input's %lld",
                            (long long)c->out[0].numel, (long long)c->in[0].numel);
    return NP_OK;
}

void rt_ref_copy_fwd(np_op_call *c)
{
    memcpy(c->out[0].data, c->in[0].data, (size_t)c->in[0].numel * sizeof(double));
}

void rt_ref_copy_bwd(np_op_call *c)
{
    if (!c->want_gin[0] || !c->gin[0].data)
        return; /* the input takes no gradient (an integer or a no-grad view) */
    memcpy(c->gin[0].data, c->gout[0].data, (size_t)c->in[0].numel * sizeof(double));
}

static int norm_dim(double d, int ndim)
{
    int k = (int)d;
    return k < 0 ? k + ndim : k;
}

np_status rt_ref_transpose_shape(np_op_call *c, np_error *err)
{
    const np_op_tensor *x = &c->in[0];
    int d0 = norm_dim(c->sc[0], x->ndim), d1 = norm_dim(c->sc[1], x->ndim);
    if (d0 < 0 || d1 < 0 || d0 >= x->ndim || d1 >= x->ndim)
        return np_error_set(err, NP_ERR_SHAPE, NULL, "transpose",
                            "transpose: dims %g, %g outside the input's %d dimensions", c->sc[0],
                            c->sc[1], x->ndim);
    c->sc[0] = d0;
    c->sc[1] = d1;
    c->n_out = 1;
    rt_ref_set_shape(&c->out[0], x->ndim, x->shape);
    c->out[0].shape[d0] = x->shape[d1];
    c->out[0].shape[d1] = x->shape[d0];
    return NP_OK;
}

/* dst[perm(i)] = src[i], swapping dims d0 and d1 of src's shape; back: the reverse. */
static void transpose_copy(double *dst, const double *src, const np_op_tensor *x, int d0, int d1,
                           int back)
{
    int n = x->ndim;
    int64_t st[NP_OP_MAX_DIM], ost[NP_OP_MAX_DIM], os[NP_OP_MAX_DIM], s = 1;
    memcpy(os, x->shape, sizeof os);
    os[d0] = x->shape[d1];
    os[d1] = x->shape[d0];
    for (int i = n - 1; i >= 0; i--) {
        ost[i] = s;
        s *= os[i];
    }
    for (int i = 0; i < n; i++)
        st[i] = ost[i == d0 ? d1 : i == d1 ? d0 : i];
    for (int64_t i = 0; i < x->numel; i++) {
        int64_t r = i, o = 0;
        for (int d = n - 1; d >= 0; d--) {
            o += (r % x->shape[d]) * st[d];
            r /= x->shape[d];
        }
        if (back)
            dst[i] = src[o];
        else
            dst[o] = src[i];
    }
}

void rt_ref_transpose_fwd(np_op_call *c)
{
    transpose_copy(c->out[0].data, c->in[0].data, &c->in[0], (int)c->sc[0], (int)c->sc[1], 0);
}

void rt_ref_transpose_bwd(np_op_call *c)
{
    transpose_copy(c->gin[0].data, c->gout[0].data, &c->in[0], (int)c->sc[0], (int)c->sc[1], 1);
}

np_status rt_ref_split_shape(np_op_call *c, np_error *err)
{
    const np_op_tensor *x = &c->in[0];
    int d = norm_dim(c->sc[1], x->ndim);
    int64_t size = (int64_t)c->sc[0];
    if (d < 0 || d >= x->ndim || size < 1 ||
        (x->shape[d] + size - 1) / size > NP_OP_MAX_OUT)
        return np_error_set(err, NP_ERR_UNSUPPORTED, NULL, "split",
                            "split: supported is an int split_size >= 1 along an existing dim "
                            "giving at most %d pieces", NP_OP_MAX_OUT);
    c->sc[1] = d;
    c->n_out = (int)((x->shape[d] + size - 1) / size);
    for (int i = 0; i < c->n_out; i++) {
        rt_ref_set_shape(&c->out[i], x->ndim, x->shape);
        int64_t rest = x->shape[d] - i * size;
        c->out[i].shape[d] = rest < size ? rest : size;
        c->out[i].numel = np_op_numel(x->ndim, c->out[i].shape);
    }
    return NP_OK;
}

/* Move piece i of the split between x (O, N, I) and its (O, n_i, I) part. */
static void split_move(np_op_call *c, int back)
{
    const np_op_tensor *x = &c->in[0];
    int d = (int)c->sc[1];
    int64_t O = np_op_numel(d, x->shape), N = x->shape[d];
    int64_t I = np_op_numel(x->ndim - d - 1, x->shape + d + 1), size = (int64_t)c->sc[0];
    if (back)
        memset(c->gin[0].data, 0, (size_t)x->numel * sizeof(double));
    for (int p = 0; p < c->n_out; p++) {
        int64_t np_ = c->out[p].shape[d];
        double *piece = back ? c->gout[p].data : c->out[p].data;
        if (!piece)
            continue;
        for (int64_t o = 0; o < O; o++) {
            double *whole = (back ? c->gin[0].data : NULL);
            const double *src = back ? piece + o * np_ * I : x->data + (o * N + p * size) * I;
            double *dst = back ? whole + (o * N + p * size) * I : piece + o * np_ * I;
            memcpy(dst, src, (size_t)(np_ * I) * sizeof(double));
        }
    }
}

void rt_ref_split_fwd(np_op_call *c)
{
    split_move(c, 0);
}

void rt_ref_split_bwd(np_op_call *c)
{
    split_move(c, 1);
}
