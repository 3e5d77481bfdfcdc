/* tests/runtime/test_rt_vmath.c - the vectorisable math of runtime/vmath.h
 * against glibc (an independent implementation): rt_exp_d within 3 ulp,
 * rt_norm_cdf within 5e-13 relative in both tails; and Functional.gelu,
 * whose kernels run the AVX-512/AVX2/baseline clone this CPU selects, gives
 * the same bits as the scalar formula compiled here, agrees with libm's
 * correctly rounded GELU on (almost) every float, and handles NaN and
 * infinities as PyTorch does (gelu(-inf) = NaN, as -inf * 0). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "nprobe/runtime.h"
#include "vmath.h"

static double rel(double got, double want)
{
    return want == 0.0 ? fabs(got) : fabs(got / want - 1.0);
}

static void check_exp(void)
{
    double worst = 0.0, at = 0.0;
    for (int i = 0; i <= 400000; i++) {
        double x = -700.0 + 1400.0 * i / 400000.0; /* wide range */
        double e = rel(rt_exp_d(x), exp(x));
        if (e > worst)
            worst = e, at = x;
        x = -1.0 + 2.0 * i / 400000.0; /* the reduction's own interval */
        e = rel(rt_exp_d(x), exp(x));
        if (e > worst)
            worst = e, at = x;
    }
    CHECK_MSG(worst <= 6.7e-16, "rt_exp_d: worst relative error %.3g at x = %.17g", worst, at);
    CHECK_EQ_FLOAT(rt_exp_d(0.0), 1.0);
    CHECK_EQ_FLOAT(rt_exp_d(-1000.0), rt_exp_d(-708.0)); /* documented clamp */
    CHECK(isnan(rt_exp_d(NAN)));
}

static void check_cdf(void)
{
    double worst = 0.0, at = 0.0;
    for (int i = 0; i <= 480000; i++) {
        double x = -15.0 + 24.0 * i / 480000.0;
        double want = 0.5 * erfc(-x * 0.70710678118654752440);
        double e = rel(rt_norm_cdf(x), want);
        if (e > worst)
            worst = e, at = x;
    }
    CHECK_MSG(worst <= 5e-13, "rt_norm_cdf: worst relative error %.3g at x = %.17g", worst, at);
    CHECK_CLOSE(rt_norm_cdf(0.0), 0.5, 0.0, 5e-13);
    CHECK_CLOSE(rt_norm_cdf(-1.0), 0.15865525393145705, 0.0, 5e-13); /* Phi(-1), tables */
    CHECK_CLOSE(rt_norm_cdf(-10.0), 7.6198530241604696e-24, 0.0, 5e-13);
}

static void check_gelu(void)
{
    np_ctx *ctx = NULL;
    CHECK(np_ctx_new(&ctx, NULL, NULL) == NP_OK);
    if (!ctx)
        return;
    const int64_t n = 200003; /* odd: exercises every vector tail */
    np_tensor *x = np_tensor_new_param(ctx, NP_FLOAT32, 1, &n, "x");
    CHECK(x != NULL);
    if (!x) {
        np_ctx_free(ctx);
        return;
    }
    float *xd = np_tensor_f32(x);
    srand(7);
    for (int64_t i = 0; i < n; i++)
        xd[i] = i < 120000 ? (float)(-12.0 + 18.0 * (double)i / 120000.0)
                           : (float)(8.0 * (rand() / (double)RAND_MAX - 0.5));
    xd[5] = NAN;
    xd[6] = INFINITY;
    xd[7] = -INFINITY;
    xd[8] = 0.0f;
    xd[9] = -0.0f;
    np_ctx_step_begin(ctx);
    np_tensor *y = np_gelu(ctx, x, 0);
    np_tensor *s = np_sum(ctx, y);
    CHECK(y && s);
    if (!y || !s) {
        np_ctx_free(ctx);
        return;
    }
    CHECK(np_backward(ctx, s) == NP_OK);
    const float *yd = np_tensor_f32(y), *gd = x->grad;
    CHECK(gd != NULL);
    int64_t same_bits = 0, same_libm = 0, finite = 0;
    for (int64_t i = 0; i < n && gd; i++) {
        double xi = xd[i];
        if (!isfinite(xi))
            continue;
        finite++;
        double c = rt_norm_cdf(xi); /* scalar here, vector clones in the library */
        float want = (float)(xi * c);
        float dwant = (float)(c + xi * 0.39894228040143267794 * rt_exp_d(-0.5 * xi * xi));
        if (memcmp(&yd[i], &want, sizeof want) == 0 && memcmp(&gd[i], &dwant, sizeof dwant) == 0)
            same_bits++;
        else if (same_bits + 20 > finite)
            CHECK_MSG(0, "gelu(%.9g): y %.9g grad %.9g, scalar formula %.9g %.9g", xi, yd[i], gd[i], want, dwant);
        float lib = (float)(xi * 0.5 * erfc(-xi * 0.70710678118654752440));
        if (lib == yd[i])
            same_libm++;
    }
    CHECK_EQ_INT(same_bits, finite);
    CHECK_MSG(same_libm >= finite - finite / 100000, "gelu equals libm's rounded value on %lld of %lld floats",
              (long long)same_libm, (long long)finite);
    CHECK(isnan(yd[5]));
    CHECK(yd[6] == INFINITY);
    CHECK(isnan(yd[7]));
    CHECK(yd[8] == 0.0f && yd[9] == 0.0f);
    np_ctx_free(ctx);
}

int main(void)
{
    check_exp();
    check_cdf();
    check_gelu();
    return check_report();
}
