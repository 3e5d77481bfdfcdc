/* ops/gemm64.c - the float64 GEMM of the reference kernels (ref_dense.c):
 * OpenBLAS's cblas_dgemm by default, or nprobe's own blocked kernel
 * (NPROBE_GEMM=own). OpenBLAS 0.3.21 does not know newer CPUs and falls back
 * to its SSE3 "Prescott" kernel there (docs/PERFORMANCE.md): the own kernel
 * packs A and B into panels (Goto's blocking: KC x NC of B, MC x KC of A)
 * and runs a 6 x 8 register tile, with AVX2 and FMA where the CPU has them
 * (chosen at run time; a portable C tile otherwise). Its sums run in
 * another order than OpenBLAS's (and fused), so the two agree to float64
 * rounding, not bit for bit: |own - blas| <= 2 (K + 1) u (|A| |B| +
 * |beta C|) per element (tests/replay/test_gemm64.c). Single-threaded, as
 * the callers pin OpenBLAS: the bits do not depend on a thread count. */
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "ops_ref_internal.h"

#define MR 6
#define NR 8
#define KC 256
#define MC 120 /* a multiple of MR */
#define NC 2048

/* 0 OpenBLAS, 1 own; read once from NPROBE_GEMM. */
static int gemm_mode = -1;

int np_ref_gemm_own(void)
{
    int m = __atomic_load_n(&gemm_mode, __ATOMIC_RELAXED);
    if (m < 0) {
        const char *e = getenv("NPROBE_GEMM");
        m = e && !strcmp(e, "own");
        __atomic_store_n(&gemm_mode, m, __ATOMIC_RELAXED);
    }
    return m;
}

void np_ref_gemm_select(int own)
{
    __atomic_store_n(&gemm_mode, own ? 1 : 0, __ATOMIC_RELAXED);
}

/* ---- packing ------------------------------------------------------------- */

/* A(i, k) of op(A), row-major storage with leading dimension lda. */
static inline double at(const double *A, int ta, int64_t lda, int64_t i, int64_t k)
{
    return ta ? A[k * lda + i] : A[i * lda + k];
}

/* Rows [i0, i0 + mc) x cols [k0, k0 + kc) of op(A) into strips of MR rows:
 * strip s holds, for each k, its MR values (zero past the edge). */
static void pack_a(double *ap, const double *A, int ta, int64_t lda, int64_t i0, int64_t mc,
                   int64_t k0, int64_t kc)
{
    for (int64_t s = 0; s < mc; s += MR) {
        int64_t mr = mc - s < MR ? mc - s : MR;
        for (int64_t k = 0; k < kc; k++) {
            for (int64_t r = 0; r < mr; r++)
                ap[r] = at(A, ta, lda, i0 + s + r, k0 + k);
            for (int64_t r = mr; r < MR; r++)
                ap[r] = 0.0;
            ap += MR;
        }
    }
}

/* Rows [k0, k0 + kc) x cols [j0, j0 + nc) of op(B) into strips of NR
 * columns: strip s holds, for each k, its NR values (zero past the edge). */
static void pack_b(double *bp, const double *B, int tb, int64_t ldb, int64_t k0, int64_t kc,
                   int64_t j0, int64_t nc)
{
    for (int64_t s = 0; s < nc; s += NR) {
        int64_t nr = nc - s < NR ? nc - s : NR;
        for (int64_t k = 0; k < kc; k++) {
            if (!tb && nr == NR) {
                memcpy(bp, B + (k0 + k) * ldb + j0 + s, NR * sizeof *bp);
            } else {
                for (int64_t c = 0; c < nr; c++)
                    bp[c] = tb ? B[(j0 + s + c) * ldb + k0 + k] : B[(k0 + k) * ldb + j0 + s + c];
                for (int64_t c = nr; c < NR; c++)
                    bp[c] = 0.0;
            }
            bp += NR;
        }
    }
}

/* ---- the register tile: t[MR][NR] = sum over k of a[k] b[k] ----------------- */

static void tile_c(double *t, const double *a, const double *b, int64_t kc)
{
    double acc[MR * NR] = {0};
    for (int64_t k = 0; k < kc; k++, a += MR, b += NR)
        for (int r = 0; r < MR; r++)
            for (int c = 0; c < NR; c++)
                acc[r * NR + c] += a[r] * b[c];
    memcpy(t, acc, sizeof acc);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

__attribute__((target("avx2,fma"))) static void tile_avx2(double *t, const double *a,
                                                          const double *b, int64_t kc)
{
    __m256d c00 = _mm256_setzero_pd(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
            c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    for (int64_t k = 0; k < kc; k++, a += MR, b += NR) {
        __m256d b0 = _mm256_loadu_pd(b), b1 = _mm256_loadu_pd(b + 4), x;
        x = _mm256_broadcast_sd(a + 0);
        c00 = _mm256_fmadd_pd(x, b0, c00);
        c01 = _mm256_fmadd_pd(x, b1, c01);
        x = _mm256_broadcast_sd(a + 1);
        c10 = _mm256_fmadd_pd(x, b0, c10);
        c11 = _mm256_fmadd_pd(x, b1, c11);
        x = _mm256_broadcast_sd(a + 2);
        c20 = _mm256_fmadd_pd(x, b0, c20);
        c21 = _mm256_fmadd_pd(x, b1, c21);
        x = _mm256_broadcast_sd(a + 3);
        c30 = _mm256_fmadd_pd(x, b0, c30);
        c31 = _mm256_fmadd_pd(x, b1, c31);
        x = _mm256_broadcast_sd(a + 4);
        c40 = _mm256_fmadd_pd(x, b0, c40);
        c41 = _mm256_fmadd_pd(x, b1, c41);
        x = _mm256_broadcast_sd(a + 5);
        c50 = _mm256_fmadd_pd(x, b0, c50);
        c51 = _mm256_fmadd_pd(x, b1, c51);
    }
    _mm256_storeu_pd(t + 0, c00);
    _mm256_storeu_pd(t + 4, c01);
    _mm256_storeu_pd(t + 8, c10);
    _mm256_storeu_pd(t + 12, c11);
    _mm256_storeu_pd(t + 16, c20);
    _mm256_storeu_pd(t + 20, c21);
    _mm256_storeu_pd(t + 24, c30);
    _mm256_storeu_pd(t + 28, c31);
    _mm256_storeu_pd(t + 32, c40);
    _mm256_storeu_pd(t + 36, c41);
    _mm256_storeu_pd(t + 40, c50);
    _mm256_storeu_pd(t + 44, c51);
}

static int have_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#endif

typedef void (*tile_fn)(double *, const double *, const double *, int64_t);

static tile_fn pick_tile(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (have_avx2())
        return tile_avx2;
#endif
    return tile_c;
}

/* C (M x N, row-major, ldc) = op(A) op(B) + beta C; op(A) is M x K, op(B)
 * K x N. 0 ok, -1 out of memory (C untouched). */
static int own_gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const double *A,
                    int64_t lda, const double *B, int64_t ldb, double beta, double *C,
                    int64_t ldc)
{
    double *ap = malloc((size_t)MC * KC * sizeof *ap);
    double *bp = malloc((size_t)KC * (NC + NR) * sizeof *bp);
    if (!ap || !bp) {
        free(ap);
        free(bp);
        return -1;
    }
    tile_fn tile = pick_tile();
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++)
            C[i * ldc + j] = beta == 0.0 ? 0.0 : beta * C[i * ldc + j];
    double t[MR * NR];
    for (int64_t j0 = 0; j0 < N; j0 += NC) {
        int64_t nc = N - j0 < NC ? N - j0 : NC;
        for (int64_t k0 = 0; k0 < K; k0 += KC) {
            int64_t kc = K - k0 < KC ? K - k0 : KC;
            pack_b(bp, B, tb, ldb, k0, kc, j0, nc);
            for (int64_t i0 = 0; i0 < M; i0 += MC) {
                int64_t mc = M - i0 < MC ? M - i0 : MC;
                pack_a(ap, A, ta, lda, i0, mc, k0, kc);
                for (int64_t s = 0; s < nc; s += NR) {
                    int64_t nr = nc - s < NR ? nc - s : NR;
                    for (int64_t q = 0; q < mc; q += MR) {
                        int64_t mr = mc - q < MR ? mc - q : MR;
                        tile(t, ap + q * kc, bp + s * kc, kc);
                        for (int64_t r = 0; r < mr; r++) {
                            double *c = C + (i0 + q + r) * ldc + j0 + s;
                            for (int64_t x = 0; x < nr; x++)
                                c[x] += t[r * NR + x];
                        }
                    }
                }
            }
        }
    }
    free(ap);
    free(bp);
    return 0;
}

void np_ref_dgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const double *A, int64_t lda,
                  const double *B, int64_t ldb, double beta, double *C, int64_t ldc)
{
    if (M <= 0 || N <= 0)
        return;
    if (np_ref_gemm_own() && own_gemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc) == 0)
        return;
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)K, 1.0, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}
