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

/* The size of the block at i of blocks of b over [0, n): b but at the edge. */
static inline int64_t edge(int64_t n, int64_t i, int64_t b)
{
    return n - i < b ? n - i : b;
}

/* A panel of op(A) or op(B) into strips: element (u, k) is X[u * su + k *
 * sk], u running over op(A)'s rows (w = MR) or op(B)'s columns (w = NR), k
 * over the shared dimension; [u0, u0 + nu) x [k0, k0 + kc) goes into strips
 * of w values of u, strip s holding, for each k, its w values (zero past
 * the edge). */
static void pack(double *p, const double *X, int64_t su, int64_t sk, int64_t u0, int64_t nu,
                 int64_t k0, int64_t kc, int w)
{
    for (int64_t s = 0; s < nu; s += w) {
        int64_t n = edge(nu, s, w);
        for (int64_t k = 0; k < kc; k++, p += w) {
            const double *x = X + (u0 + s) * su + (k0 + k) * sk;
            if (su == 1 && n == w) {
                memcpy(p, x, (size_t)w * sizeof *p);
                continue;
            }
            for (int64_t u = 0; u < n; u++)
                p[u] = x[u * su];
            for (int64_t u = n; u < w; u++)
                p[u] = 0.0;
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
        int64_t nc = edge(N, j0, NC);
        for (int64_t k0 = 0; k0 < K; k0 += KC) {
            int64_t kc = edge(K, k0, KC);
            pack(bp, B, tb ? ldb : 1, tb ? 1 : ldb, j0, nc, k0, kc, NR);
            for (int64_t i0 = 0; i0 < M; i0 += MC) {
                int64_t mc = edge(M, i0, MC);
                pack(ap, A, ta ? 1 : lda, ta ? lda : 1, i0, mc, k0, kc, MR);
                for (int64_t s = 0; s < nc; s += NR) {
                    int64_t nr = edge(nc, s, NR);
                    for (int64_t q = 0; q < mc; q += MR) {
                        int64_t mr = edge(mc, q, MR);
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
