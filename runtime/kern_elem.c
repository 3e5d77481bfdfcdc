/* runtime/kern_elem.c - float32 kernels of the elementwise ops and
 * reductions (kernels.h): relu, gelu (erf and tanh), silu, dropout, add and
 * mul with suffix broadcasting, scale, sum and mean. Math in double, rounded
 * once to float32 and then to the logical dtype `dt` of the output (float32:
 * no further rounding). No context and no fault here. */
#include <math.h>
#include <string.h>

#include "kernels.h"
#include "rt_internal.h"
#include "vmath.h"

#define SQRT1_2 0.70710678118654752440
#define INV_SQRT_2PI 0.39894228040143267794
#define SQRT_2_PI 0.79788456080286535588

/* ---- relu ---------------------------------------------------------------- */
void rt_relu_forward(float *out, const float *inp, int64_t n)
{
#pragma omp parallel for if (n > RT_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        out[i] = inp[i] > 0.0f ? inp[i] : (isnan(inp[i]) ? inp[i] : 0.0f);
}

void rt_relu_backward(float *dinp, const float *dout, const float *inp, int64_t n)
{
#pragma omp parallel for if (n > RT_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        dinp[i] = inp[i] > 0.0f ? dout[i] : 0.0f;
}

/* ---- gelu (erf) ---------------------------------------------------------- */
/* In blocks of RT_VBLOCK elements: a vectorised pass with rt_norm_cdf /
 * rt_exp_d (vmath.h), then libm for the rare non-finite inputs (which the
 * vector formulas do not handle), then the rounding to the logical dtype.
 * Blocks are independent, so OpenMP splits them freely. */
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

void rt_gelu_forward(float *out, double *cdf, const float *inp, int64_t n, np_dtype dt)
{
    int64_t nblk = (n + RT_VBLOCK - 1) / RT_VBLOCK;
#pragma omp parallel for if (n > RT_PAR_MIN)
    for (int64_t b = 0; b < nblk; b++) {
        int64_t o = b * RT_VBLOCK, len = n - o < RT_VBLOCK ? n - o : RT_VBLOCK;
        gelu_fwd_block(inp + o, out + o, cdf ? cdf + o : NULL, len, dt);
    }
}

void rt_gelu_backward(float *dinp, const float *dout, const float *inp, const double *cdf, int64_t n)
{
    if (!cdf) {
#pragma omp parallel for if (n > RT_PAR_MIN / 8)
        for (int64_t i = 0; i < n; i++) {
            double x = inp[i];
            dinp[i] = (float)((double)dout[i] *
                              (0.5 * (1.0 + erf(x * SQRT1_2)) + x * INV_SQRT_2PI * exp(-0.5 * x * x)));
        }
        return;
    }
    int64_t nblk = (n + RT_VBLOCK - 1) / RT_VBLOCK;
#pragma omp parallel for if (n > RT_PAR_MIN)
    for (int64_t b = 0; b < nblk; b++) {
        int64_t o = b * RT_VBLOCK, len = n - o < RT_VBLOCK ? n - o : RT_VBLOCK;
        gelu_bwd_block(inp + o, cdf + o, dout + o, dinp + o, len);
    }
}

/* ---- gelu (tanh) and silu: scalar formulas in double --------------------- */
static double gelu_tanh_f(double x)
{
    return 0.5 * x * (1.0 + tanh(SQRT_2_PI * (x + 0.044715 * x * x * x)));
}

static double gelu_tanh_dfdx(double x)
{
    double u = SQRT_2_PI * (x + 0.044715 * x * x * x);
    double t = tanh(u);
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * SQRT_2_PI * (1.0 + 3.0 * 0.044715 * x * x);
}

void rt_gelu_tanh_forward(float *out, const float *inp, int64_t n, np_dtype dt)
{
#pragma omp parallel for if (n > RT_PAR_MIN / 8)
    for (int64_t i = 0; i < n; i++)
        out[i] = np_round_to(dt, (float)gelu_tanh_f(inp[i]));
}

void rt_gelu_tanh_backward(float *dinp, const float *dout, const float *inp, int64_t n)
{
#pragma omp parallel for if (n > RT_PAR_MIN / 8)
    for (int64_t i = 0; i < n; i++)
        dinp[i] = (float)((double)dout[i] * gelu_tanh_dfdx(inp[i]));
}

void rt_silu_forward(float *out, const float *inp, int64_t n, np_dtype dt)
{
#pragma omp parallel for if (n > RT_PAR_MIN / 8)
    for (int64_t i = 0; i < n; i++) {
        double x = inp[i];
        out[i] = np_round_to(dt, (float)(x / (1.0 + exp(-x))));
    }
}

void rt_silu_backward(float *dinp, const float *dout, const float *inp, int64_t n)
{
#pragma omp parallel for if (n > RT_PAR_MIN / 8)
    for (int64_t i = 0; i < n; i++) {
        double x = inp[i], s = 1.0 / (1.0 + exp(-x));
        dinp[i] = (float)((double)dout[i] * (s * (1.0 + x * (1.0 - s))));
    }
}

void rt_tanh_forward(float *out, const float *inp, int64_t n, np_dtype dt)
{
#pragma omp parallel for if (n > RT_PAR_MIN / 8)
    for (int64_t i = 0; i < n; i++)
        out[i] = np_round_to(dt, (float)tanh((double)inp[i]));
}

void rt_tanh_backward(float *dinp, const float *dout, const float *inp, int64_t n)
{
#pragma omp parallel for if (n > RT_PAR_MIN / 8)
    for (int64_t i = 0; i < n; i++) {
        double t = tanh((double)inp[i]);
        dinp[i] = (float)((double)dout[i] * (1.0 - t * t));
    }
}

/* ---- dropout -------------------------------------------------------------- */
void rt_dropout_forward(float *out, const float *inp, int64_t n, uint64_t key, float p, float scale,
                        np_dtype dt)
{
#pragma omp parallel for if (n > RT_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        out[i] = np_rng_uniform(key, (uint64_t)i) >= p ? np_round_to(dt, inp[i] * scale) : 0.0f;
}

void rt_dropout_backward(float *dinp, const float *dout, int64_t n, uint64_t key, float p, float scale)
{
#pragma omp parallel for if (n > RT_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        dinp[i] = np_rng_uniform(key, (uint64_t)i) >= p ? dout[i] * scale : 0.0f;
}

/* ---- add / mul with suffix broadcasting ----------------------------------- */
void rt_binary_forward(float *out, const float *big, const float *small, int64_t nb, int64_t ns, int mul,
                       np_dtype dt)
{
    int64_t R = ns ? nb / ns : 0; /* big is R repeats of small's shape */
#pragma omp parallel for if (nb > RT_PAR_EW)
    for (int64_t r = 0; r < R; r++) {
        const float *br = big + r * ns;
        float *yr = out + r * ns;
        if (!mul)
            for (int64_t j = 0; j < ns; j++)
                yr[j] = br[j] + small[j];
        else
            for (int64_t j = 0; j < ns; j++)
                yr[j] = br[j] * small[j];
        if (dt != NP_FLOAT32)
            for (int64_t j = 0; j < ns; j++)
                yr[j] = np_round_to(dt, yr[j]);
    }
}

/* dsmall (ns) = sum over the R repeats of dout (times big for mul) */
static void binary_small_grad(float *dsmall, const float *dout, const float *big, int64_t nb, int64_t ns,
                              int mul)
{
    int64_t R = ns ? nb / ns : 0;
    if (R == 1) {
#pragma omp parallel for if (ns > RT_PAR_MIN)
        for (int64_t j = 0; j < ns; j++)
            dsmall[j] = mul ? dout[j] * big[j] : dout[j];
    } else {
#pragma omp parallel for if (nb > RT_PAR_MIN)
        for (int64_t j = 0; j < ns; j++) {
            double acc = 0.0;
            for (int64_t r = 0; r < R; r++)
                acc += mul ? (double)dout[r * ns + j] * big[r * ns + j] : (double)dout[r * ns + j];
            dsmall[j] = (float)acc;
        }
    }
}

void rt_binary_backward(float *dbig, float *dsmall, const float *dout, const float *big, const float *small,
                        int64_t nb, int64_t ns, int mul)
{
    if (dbig) {
        if (!mul) {
            memcpy(dbig, dout, (size_t)nb * sizeof(float));
        } else {
            int64_t R = ns ? nb / ns : 0;
#pragma omp parallel for if (nb > RT_PAR_EW)
            for (int64_t r = 0; r < R; r++)
                for (int64_t j = 0; j < ns; j++)
                    dbig[r * ns + j] = dout[r * ns + j] * small[j];
        }
    }
    if (dsmall)
        binary_small_grad(dsmall, dout, big, nb, ns, mul);
}

/* ---- scale, sum, mean ------------------------------------------------------ */
void rt_scale_forward(float *out, const float *inp, int64_t n, float s, np_dtype dt)
{
#pragma omp parallel for if (n > RT_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        out[i] = np_round_to(dt, inp[i] * s);
}

void rt_scale_backward(float *dinp, const float *dout, int64_t n, float s)
{
#pragma omp parallel for if (n > RT_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        dinp[i] = dout[i] * s;
}

void rt_reduce_forward(float *out, const float *inp, int64_t n, int mean, np_dtype dt)
{
    double acc = 0.0;
    for (int64_t i = 0; i < n; i++)
        acc += inp[i];
    if (mean)
        acc = n ? acc / (double)n : NAN;
    out[0] = np_round_to(dt, (float)acc);
}

void rt_reduce_backward(float *dinp, const float *dout, int64_t n, int mean)
{
    float g = dout[0];
    if (mean)
        g = (float)((double)g / (double)(n ? n : 1));
#pragma omp parallel for if (n > RT_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        dinp[i] = g;
}

/* ---- gradient accumulation (the tape's, ctx.c) ----------------------------- */
void rt_grad_accumulate(float *grad, const float *g, int64_t n, np_dtype dt)
{
    if (dt == NP_FLOAT32) {
#pragma omp parallel for if (n > RT_PAR_EW)
        for (int64_t i = 0; i < n; i++)
            grad[i] += g[i];
        return;
    }
#pragma omp parallel for if (n > RT_PAR_EW)
    for (int64_t i = 0; i < n; i++)
        grad[i] = np_round_to(dt, grad[i] + g[i]);
}
