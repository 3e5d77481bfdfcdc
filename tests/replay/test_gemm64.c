/* tests/replay/test_gemm64.c - the replay's own float64 GEMM (ops/gemm64.c,
 * NPROBE_GEMM=own) against OpenBLAS's cblas_dgemm (the default path), every
 * transpose combination, edge sizes around its 6 x 8 tile and its 256-deep
 * K blocks, leading dimensions larger than the rows, beta 0 (C's NaN
 * ignored, as BLAS does) and 1: each element within float64 rounding of
 * the other, |own - blas| <= 2 K u (|A| |B|)_ij, u = 2^-53, checked against
 * the bound computed here in long double from the absolute values. The
 * linear kernel through both paths: its forward equal to that bound. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "nprobe/ops.h"

static double rnd(unsigned *s)
{
    *s = *s * 1664525u + 1013904223u;
    return ((double)(*s >> 8) / (double)(1u << 24) - 0.5) * 2.0;
}

static void one(int ta, int tb, int64_t M, int64_t N, int64_t K, double beta, unsigned seed)
{
    int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
    int64_t ra = ta ? K : M, rb = tb ? N : K;
    double *A = malloc(sizeof(double) * (size_t)(ra * lda + 1));
    double *B = malloc(sizeof(double) * (size_t)(rb * ldb + 1));
    double *C0 = malloc(sizeof(double) * (size_t)(M * ldc + 1));
    double *C1 = malloc(sizeof(double) * (size_t)(M * ldc + 1));
    CHECK(A && B && C0 && C1);
    if (!A || !B || !C0 || !C1)
        goto out;
    for (int64_t i = 0; i < ra * lda; i++)
        A[i] = rnd(&seed) * (i % 7 == 0 ? 1e3 : 1.0); /* some large terms: cancellation */
    for (int64_t i = 0; i < rb * ldb; i++)
        B[i] = rnd(&seed);
    for (int64_t i = 0; i < M * ldc; i++)
        C0[i] = C1[i] = beta == 0.0 ? NAN : rnd(&seed);
    np_ref_gemm_select(0);
    np_ref_dgemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C0, ldc);
    np_ref_gemm_select(1);
    np_ref_dgemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C1, ldc);
    np_ref_gemm_select(0);
    int bad = 0;
    double worst = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            long double mag = 0;
            for (int64_t k = 0; k < K; k++)
                mag += fabsl((long double)(ta ? A[k * lda + i] : A[i * lda + k]) *
                             (long double)(tb ? B[j * ldb + k] : B[k * ldb + j]));
            double c = beta == 0.0 ? 0.0 : fabs(beta * C0[i * ldc + j]);
            double bound = 2.0 * (double)(K + 1) * ldexp(1.0, -53) * ((double)mag + c);
            double d = fabs(C1[i * ldc + j] - C0[i * ldc + j]);
            if (!(d <= bound) && !bad++)
                CHECK_MSG(0, "ta %d tb %d M %lld N %lld K %lld beta %g: C[%lld][%lld] own %.17g "
                          "blas %.17g, bound %.3g", ta, tb, (long long)M, (long long)N,
                          (long long)K, beta, (long long)i, (long long)j, C1[i * ldc + j],
                          C0[i * ldc + j], bound);
            if (bound > 0 && d / bound > worst)
                worst = d / bound;
        }
    /* the padding past N in each row is not written */
    for (int64_t i = 0; i < M && beta != 0.0; i++)
        CHECK(C1[i * ldc + N] == C0[i * ldc + N]);
    CHECK(worst <= 1.0);
out:
    free(A);
    free(B);
    free(C0);
    free(C1);
}

int main(void)
{
    const int64_t sz[][3] = {{1, 1, 1},    {5, 7, 3},     {6, 8, 256},  {7, 9, 257},
                             {13, 17, 31}, {121, 30, 513}, {64, 2050, 5}, {200, 96, 300}};
    unsigned seed = 12345;
    for (size_t s = 0; s < sizeof sz / sizeof sz[0]; s++)
        for (int t = 0; t < 4; t++)
            for (int b = 0; b < 2; b++)
                one(t & 1, t >> 1, sz[s][0], sz[s][1], sz[s][2], b ? 1.0 : 0.0, seed += 17);
    /* a linear through both paths */
    enum { M = 33, K = 70, N = 19 };
    static double x[M * K], w[N * K], bias[N], y0[M * N], y1[M * N];
    for (int i = 0; i < M * K; i++)
        x[i] = rnd(&seed);
    for (int i = 0; i < N * K; i++)
        w[i] = rnd(&seed);
    for (int i = 0; i < N; i++)
        bias[i] = rnd(&seed);
    np_ref_gemm_select(0);
    np_ref_linear_forward(y0, x, w, bias, M, K, N);
    np_ref_gemm_select(1);
    CHECK(np_ref_gemm_own() == 1);
    np_ref_linear_forward(y1, x, w, bias, M, K, N);
    np_ref_gemm_select(0);
    for (int i = 0; i < M * N; i++)
        CHECK(fabs(y0[i] - y1[i]) <= 2.0 * (K + 1) * ldexp(1.0, -53) * (K + 1));
    return check_report();
}
