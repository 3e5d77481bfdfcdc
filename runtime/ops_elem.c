/* runtime/ops_elem.c - elementwise ops and reductions: Functional.relu,
 * Functional.gelu (erf and tanh), Functional.silu, Functional.dropout,
 * Tensor.add, Tensor.mul (tensor and scalar), Torch.sum, Torch.mean. Outputs
 * keep the (promoted) input dtype, so under autocast a low-precision input
 * gives a rounded low-precision output. Math in double, rounded once. */
#include <math.h>
#include <string.h>

#include "rt_internal.h"
#include "vmath.h"

#define SQRT1_2 0.70710678118654752440
#define INV_SQRT_2PI 0.39894228040143267794
#define SQRT_2_PI 0.79788456080286535588

enum { EW_RELU, EW_GELU, EW_GELU_TANH, EW_SILU };

static double ew_fwd(int kind, double x)
{
    switch (kind) {
    case EW_RELU:
        return x > 0.0 ? x : (isnan(x) ? x : 0.0);
    case EW_GELU:
        return 0.5 * x * (1.0 + erf(x * SQRT1_2));
    case EW_GELU_TANH:
        return 0.5 * x * (1.0 + tanh(SQRT_2_PI * (x + 0.044715 * x * x * x)));
    default:
        return x / (1.0 + exp(-x));
    }
}

static double ew_dfdx(int kind, double x)
{
    switch (kind) {
    case EW_RELU:
        return x > 0.0 ? 1.0 : 0.0;
    case EW_GELU:
        return 0.5 * (1.0 + erf(x * SQRT1_2)) + x * INV_SQRT_2PI * exp(-0.5 * x * x);
    case EW_GELU_TANH: {
        double u = SQRT_2_PI * (x + 0.044715 * x * x * x);
        double t = tanh(u);
        return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * SQRT_2_PI * (1.0 + 3.0 * 0.044715 * x * x);
    }
    default: {
        double s = 1.0 / (1.0 + exp(-x));
        return s * (1.0 + x * (1.0 - s));
    }
    }
}

/* The erf GELU in blocks of RT_VBLOCK elements: a vectorised pass with
 * rt_norm_cdf/rt_exp_d (vmath.h), then libm for the rare non-finite
 * inputs (which the vector formulas do not handle), then the rounding to
 * the logical dtype. Blocks are independent, so OpenMP splits them freely. */
#define RT_VBLOCK 2048

/* 1 if any of x[0..n) is NaN or infinite (an all-ones exponent), in a
 * branch-free pass that vectorises */
static inline int any_nonfinite(const float *x, int64_t n)
{
    uint32_t acc = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        acc |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
    }
    return acc != 0;
}

RT_VCLONES static void gelu_fwd_block(const float *x, float *y, double *cdf, int64_t n, np_dtype dt)
{
    if (cdf) {
        for (int64_t i = 0; i < n; i++) {
            double xi = x[i], c = rt_norm_cdf(xi);
            cdf[i] = c;
            y[i] = (float)(xi * c);
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            double xi = x[i];
            y[i] = (float)(xi * rt_norm_cdf(xi));
        }
    }
    if (any_nonfinite(x, n))
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(x[i])) {
                double xi = x[i], c = 0.5 * (1.0 + erf(xi * SQRT1_2));
                if (cdf)
                    cdf[i] = c;
                y[i] = (float)(xi * c);
            }
    if (dt != NP_FLOAT32)
        for (int64_t i = 0; i < n; i++)
            y[i] = np_round_to(dt, y[i]);
}

RT_VCLONES static void gelu_bwd_block(const float *x, const double *cdf, const float *g, float *d, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        double xi = x[i];
        d[i] = (float)((double)g[i] * (cdf[i] + xi * INV_SQRT_2PI * rt_exp_d(-0.5 * xi * xi)));
    }
    if (any_nonfinite(x, n))
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(x[i])) {
                double xi = x[i];
                d[i] = (float)((double)g[i] * (cdf[i] + xi * INV_SQRT_2PI * exp(-0.5 * xi * xi)));
            }
}

static void ew_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    const float *x = nd->in[0]->data, *g = gout[0];
    int kind = (int)nd->iv[0];
    int64_t n = nd->in[0]->numel;
    if (!gin[0])
        return;
    float *d = gin[0];
    if (kind == EW_RELU) {
#pragma omp parallel for if (n > RT_PAR_MIN)
        for (int64_t i = 0; i < n; i++)
            d[i] = x[i] > 0.0f ? g[i] : 0.0f;
        return;
    }
    const double *cdf = nd->saved[0];
    if (kind == EW_GELU && cdf) {
        int64_t nblk = (n + RT_VBLOCK - 1) / RT_VBLOCK;
#pragma omp parallel for if (n > RT_PAR_MIN)
        for (int64_t b = 0; b < nblk; b++) {
            int64_t o = b * RT_VBLOCK, len = n - o < RT_VBLOCK ? n - o : RT_VBLOCK;
            gelu_bwd_block(x + o, cdf + o, g + o, d + o, len);
        }
        return;
    }
#pragma omp parallel for if (n > RT_PAR_MIN / 8)
    for (int64_t i = 0; i < n; i++)
        d[i] = (float)((double)g[i] * ew_dfdx(kind, x[i]));
}

static np_tensor *ew_op(np_ctx *ctx, rt_op op, const char *api, np_tensor *x, int kind, const char *sk, double sv)
{
    if (!x || ctx->err.status)
        return NULL;
    if (!rt_need_float(ctx, x, api, "input"))
        return NULL;
    np_tensor *y = rt_new(ctx, x->dtype, x->ndim, x->shape);
    if (!y)
        return NULL;
    const float *xd = x->data;
    float *yd = y->data;
    int64_t n = x->numel;
    np_dtype dt = x->dtype;
    rt_node nd;
    rt_node_init(ctx, &nd, op, &x, 1);
    /* erf gelu keeps its cdf term 0.5 (1 + erf(x/sqrt 2)) (in double, the
     * exact value the backward formula would recompute) for the backward */
    double *cdf = kind == EW_GELU && nd.record ? rt_alloc(ctx, (size_t)n * sizeof(double) + 1) : NULL;
    if (kind == EW_GELU && nd.record && !cdf)
        return NULL;
    if (kind == EW_RELU) {
#pragma omp parallel for if (n > RT_PAR_MIN)
        for (int64_t i = 0; i < n; i++)
            yd[i] = xd[i] > 0.0f ? xd[i] : (isnan(xd[i]) ? xd[i] : 0.0f);
    } else if (kind == EW_GELU) {
        int64_t nblk = (n + RT_VBLOCK - 1) / RT_VBLOCK;
#pragma omp parallel for if (n > RT_PAR_MIN)
        for (int64_t b = 0; b < nblk; b++) {
            int64_t o = b * RT_VBLOCK, len = n - o < RT_VBLOCK ? n - o : RT_VBLOCK;
            gelu_fwd_block(xd + o, yd + o, cdf ? cdf + o : NULL, len, dt);
        }
    } else {
#pragma omp parallel for if (n > RT_PAR_MIN / 8)
        for (int64_t i = 0; i < n; i++)
            yd[i] = np_round_to(dt, (float)ew_fwd(kind, xd[i]));
    }
    nd.saved[0] = cdf;
    if (sk)
        rt_node_scalar(&nd, sk, sv);
    nd.iv[0] = kind;
    nd.gin_full = 1;
    return rt_finish(ctx, &nd, y, ew_bwd);
}

np_tensor *np_relu(np_ctx *ctx, np_tensor *x)
{
    return ew_op(ctx, RT_OP_RELU, "Functional.relu", x, EW_RELU, NULL, 0);
}

np_tensor *np_gelu(np_ctx *ctx, np_tensor *x, int approximate_tanh)
{
    int kind = approximate_tanh || ctx->fault == NP_FAULT_GELU_TANH ? EW_GELU_TANH : EW_GELU;
    return ew_op(ctx, RT_OP_GELU, "Functional.gelu", x, kind, "approximate", approximate_tanh ? 1 : 0);
}

np_tensor *np_silu(np_ctx *ctx, np_tensor *x)
{
    return ew_op(ctx, RT_OP_SILU, "Functional.silu", x, EW_SILU, NULL, 0);
}

/* ---- dropout ------------------------------------------------------------ */
static uint64_t dropout_key(const np_ctx *ctx, int n)
{
    return np_rng_u64(np_rng_u64(ctx->o.seed ^ 0xD80F0017ull, (uint64_t)ctx->step), (uint64_t)n);
}

static void dropout_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    int64_t n = nd->in[0]->numel;
    if (!gin[0])
        return;
    if (!nd->iv[1]) {
        memcpy(gin[0], gout[0], (size_t)n * sizeof(float));
        return;
    }
    uint64_t key = (uint64_t)nd->iv[0];
    float p = (float)nd->dv[0], scale = (float)nd->dv[1];
    const float *g = gout[0];
    float *d = gin[0];
#pragma omp parallel for if (n > RT_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        d[i] = np_rng_uniform(key, (uint64_t)i) >= p ? g[i] * scale : 0.0f;
}

np_tensor *np_dropout(np_ctx *ctx, np_tensor *x, double p, int training)
{
    static const char *api = "Functional.dropout";
    if (!x || ctx->err.status)
        return NULL;
    if (!rt_need_float(ctx, x, api, "input"))
        return NULL;
    if (!(p >= 0.0 && p <= 1.0))
        return rt_fail(ctx, NP_ERR_ARG, api, "%s: p must be in [0, 1], got %g", api, p);
    np_tensor *y = rt_new(ctx, x->dtype, x->ndim, x->shape);
    if (!y)
        return NULL;
    rt_node nd;
    rt_node_init(ctx, &nd, RT_OP_DROPOUT, &x, 1);
    rt_node_scalar(&nd, "p", p);
    rt_node_scalar(&nd, "training", training ? 1 : 0);
    int active = training && p > 0.0;
    uint64_t key = dropout_key(ctx, nd.n);
    float pf = (float)p, scale = p < 1.0 ? (float)(1.0 / (1.0 - p)) : 0.0f;
    const float *xd = x->data;
    float *yd = y->data;
    int64_t n = x->numel;
    np_dtype dt = x->dtype;
    if (!active) {
        memcpy(yd, xd, (size_t)n * sizeof(float));
    } else {
#pragma omp parallel for if (n > RT_PAR_MIN)
        for (int64_t i = 0; i < n; i++)
            yd[i] = np_rng_uniform(key, (uint64_t)i) >= pf ? np_round_to(dt, xd[i] * scale) : 0.0f;
    }
    nd.iv[0] = (int64_t)key;
    nd.iv[1] = active;
    nd.dv[0] = pf;
    nd.dv[1] = scale;
    nd.gin_full = 1;
    return rt_finish(ctx, &nd, y, dropout_bwd);
}

/* ---- add / mul with suffix broadcasting ----------------------------------- */
/* big has nb elements, small ns (ns divides nb, small repeats). */
static void bin_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    int mul = nd->op != RT_OP_ADD;
    int bi = (int)nd->iv[0]; /* index of the big operand */
    int si = 1 - bi;
    int64_t nb = nd->in[bi]->numel, ns = nd->in[si]->numel;
    const float *g = gout[0];
    const float *big = nd->in[bi]->data, *small = nd->in[si]->data;
    if (gin[bi]) {
        float *d = gin[bi];
        if (!mul) {
            memcpy(d, g, (size_t)nb * sizeof(float));
        } else {
            int64_t R = ns ? nb / ns : 0;
#pragma omp parallel for if (nb > RT_PAR_EW)
            for (int64_t r = 0; r < R; r++)
                for (int64_t j = 0; j < ns; j++)
                    d[r * ns + j] = g[r * ns + j] * small[j];
        }
    }
    if (gin[si]) {
        float *d = gin[si];
        int64_t R = ns ? nb / ns : 0;
        if (R == 1) {
#pragma omp parallel for if (ns > RT_PAR_MIN)
            for (int64_t j = 0; j < ns; j++)
                d[j] = mul ? g[j] * big[j] : g[j];
        } else {
#pragma omp parallel for if (nb > RT_PAR_MIN)
            for (int64_t j = 0; j < ns; j++) {
                double acc = 0.0;
                for (int64_t r = 0; r < R; r++)
                    acc += mul ? (double)g[r * ns + j] * big[r * ns + j] : (double)g[r * ns + j];
                d[j] = (float)acc;
            }
        }
    }
}

/* 1 if small's shape is a suffix of big's (or small has one element). */
static int suffix_of(const np_tensor *small, const np_tensor *big)
{
    if (small->numel == 1)
        return 1;
    if (small->ndim > big->ndim)
        return 0;
    for (int i = 1; i <= small->ndim; i++)
        if (small->shape[small->ndim - i] != big->shape[big->ndim - i])
            return 0;
    return 1;
}

static np_tensor *bin_op(np_ctx *ctx, rt_op op, const char *api, np_tensor *a, np_tensor *b)
{
    if (!a || !b || ctx->err.status)
        return NULL;
    if (!rt_need_float(ctx, a, api, "input") || !rt_need_float(ctx, b, api, "other"))
        return NULL;
    int bi;
    if (suffix_of(b, a) && (b->numel != 1 || a->numel >= 1) && a->numel >= b->numel)
        bi = 0;
    else if (suffix_of(a, b))
        bi = 1;
    else
        return rt_fail(ctx, NP_ERR_SHAPE, api, "%s: shapes do not broadcast (one shape must be a suffix of the other, or have one element)", api);
    np_tensor *big = bi ? b : a, *small = bi ? a : b;
    np_dtype odt = rt_promote(a->dtype, b->dtype);
    np_tensor *y = rt_new(ctx, odt, big->ndim, big->shape);
    if (!y)
        return NULL;
    const float *bd = big->data, *sd = small->data;
    float *yd = y->data;
    int64_t nb = big->numel, ns = small->numel;
    int64_t R = ns ? nb / ns : 0; /* big is R repeats of small's shape */
    int add = op == RT_OP_ADD;
#pragma omp parallel for if (nb > RT_PAR_EW)
    for (int64_t r = 0; r < R; r++) {
        const float *br = bd + r * ns;
        float *yr = yd + r * ns;
        if (add)
            for (int64_t j = 0; j < ns; j++)
                yr[j] = br[j] + sd[j];
        else
            for (int64_t j = 0; j < ns; j++)
                yr[j] = br[j] * sd[j];
        if (odt != NP_FLOAT32)
            for (int64_t j = 0; j < ns; j++)
                yr[j] = np_round_to(odt, yr[j]);
    }
    np_tensor *in[2] = {a, b};
    rt_node nd;
    rt_node_init(ctx, &nd, op, in, 2);
    nd.iv[0] = bi;
    nd.gin_full = 3;
    return rt_finish(ctx, &nd, y, bin_bwd);
}

np_tensor *np_add(np_ctx *ctx, np_tensor *a, np_tensor *b)
{
    return bin_op(ctx, RT_OP_ADD, "Tensor.add", a, b);
}

np_tensor *np_mul(np_ctx *ctx, np_tensor *a, np_tensor *b)
{
    return bin_op(ctx, RT_OP_MUL, "Tensor.mul", a, b);
}

static void scale_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    int64_t n = nd->in[0]->numel;
    float s = (float)nd->dv[0];
    if (!gin[0])
        return;
#pragma omp parallel for if (n > RT_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        gin[0][i] = gout[0][i] * s;
}

np_tensor *np_scale(np_ctx *ctx, np_tensor *x, double s)
{
    static const char *api = "Tensor.mul";
    if (!x || ctx->err.status)
        return NULL;
    if (!rt_need_float(ctx, x, api, "input"))
        return NULL;
    np_tensor *y = rt_new(ctx, x->dtype, x->ndim, x->shape);
    if (!y)
        return NULL;
    float sf = (float)s;
    const float *xd = x->data;
    float *yd = y->data;
    int64_t n = x->numel;
    np_dtype dt = x->dtype;
#pragma omp parallel for if (n > RT_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        yd[i] = np_round_to(dt, xd[i] * sf);
    rt_node nd;
    rt_node_init(ctx, &nd, RT_OP_SCALE, &x, 1);
    rt_node_scalar(&nd, "other", s);
    nd.dv[0] = sf;
    return rt_finish(ctx, &nd, y, scale_bwd);
}

/* ---- sum / mean ---------------------------------------------------------- */
static void reduce_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    int64_t n = nd->in[0]->numel;
    if (!gin[0])
        return;
    float g = gout[0][0];
    if (nd->op == RT_OP_MEAN)
        g = (float)((double)g / (double)(n ? n : 1));
#pragma omp parallel for if (n > RT_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        gin[0][i] = g;
}

static np_tensor *reduce_op(np_ctx *ctx, rt_op op, const char *api, np_tensor *x)
{
    if (!x || ctx->err.status)
        return NULL;
    if (!rt_need_float(ctx, x, api, "input"))
        return NULL;
    np_tensor *y = rt_new(ctx, x->dtype, 0, NULL);
    if (!y)
        return NULL;
    const float *xd = x->data;
    double acc = 0.0;
    for (int64_t i = 0; i < x->numel; i++)
        acc += xd[i];
    if (op == RT_OP_MEAN)
        acc = x->numel ? acc / (double)x->numel : NAN;
    ((float *)y->data)[0] = np_round_to(x->dtype, (float)acc);
    rt_node nd;
    rt_node_init(ctx, &nd, op, &x, 1);
    return rt_finish(ctx, &nd, y, reduce_bwd);
}

np_tensor *np_sum(np_ctx *ctx, np_tensor *x)
{
    return reduce_op(ctx, RT_OP_SUM, "Torch.sum", x);
}

np_tensor *np_mean(np_ctx *ctx, np_tensor *x)
{
    return reduce_op(ctx, RT_OP_MEAN, "Torch.mean", x);
}
