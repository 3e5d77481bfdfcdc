/* runtime/gemm.c - the GEMM behind linear, matmul and conv2d. cpu: OpenBLAS
 * cblas_sgemm, single-threaded, called on fixed row or column panels that
 * OpenMP spreads over the threads (one thread pool, and the panels do not
 * depend on the thread count, so neither do the bits). npu-sim: its own
 * kernel accumulating in float32 over K in blocks of 64, the block partial
 * sums combined pairwise (the order an accelerator's tiled matrix unit would
 * use), OpenMP over output rows.
 *
 * rt_blas_setup also corrects OpenBLAS 0.3.21's kernel choice on CPUs newer
 * than it knows (it falls back to the SSE3 "Prescott" kernels, 5x slower):
 * when OPENBLAS_CORETYPE is unset and the CPU has AVX2/AVX-512, the dynamic
 * core is re-selected once, before any GEMM runs. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <omp.h>

#include "rt_internal.h"

#define NPU_KB 64   /* K block */
#define NPU_JB 64   /* output columns per pass */
#define NPU_MAXB 128 /* max K blocks kept for the pairwise combine */

#define NPU_RB 4     /* rows of A sharing each B row load */

/* Rows [i0, i0 + rn) of C; acc holds rn * nb * NPU_JB floats. */
static void npu_rows(int i0, int rn, int N, int K, int kb, int nb, const float *A, const float *B,
                     float beta, float *C, int ldc, float *acc)
{
    for (int j0 = 0; j0 < N; j0 += NPU_JB) {
        int jn = N - j0 < NPU_JB ? N - j0 : NPU_JB;
        for (int b = 0; b < nb; b++) {
            float *ab[NPU_RB];
            for (int r = 0; r < rn; r++) {
                ab[r] = acc + ((size_t)r * nb + b) * NPU_JB;
                for (int jj = 0; jj < jn; jj++)
                    ab[r][jj] = 0.0f;
            }
            int k1 = (b + 1) * kb < K ? (b + 1) * kb : K;
            for (int k = b * kb; k < k1; k++) {
                const float *brow = B + (size_t)k * N + j0;
                for (int r = 0; r < rn; r++) {
                    float av = A[(size_t)(i0 + r) * K + k];
                    float *a = ab[r];
                    for (int jj = 0; jj < jn; jj++)
                        a[jj] += av * brow[jj];
                }
            }
        }
        for (int r = 0; r < rn; r++) {
            float *ar = acc + (size_t)r * nb * NPU_JB;
            for (int w = 1; w < nb; w *= 2)
                for (int b = 0; b + w < nb; b += 2 * w)
                    for (int jj = 0; jj < jn; jj++)
                        ar[(size_t)b * NPU_JB + jj] += ar[(size_t)(b + w) * NPU_JB + jj];
            float *c = C + (size_t)(i0 + r) * ldc + j0;
            for (int jj = 0; jj < jn; jj++) {
                float v = nb ? ar[jj] : 0.0f;
                c[jj] = beta == 0.0f ? v : beta * c[jj] + v;
            }
        }
    }
}

/* C (M,N) = beta*C + A (M,K) B (K,N), all row-major contiguous. Rows are
 * processed NPU_RB at a time (each B row loaded once for the group); every
 * output element still sums its K block in k order, then the block partial
 * sums pairwise, whatever the grouping. */
static void npu_gemm_nn(int M, int N, int K, const float *A, const float *B, float beta, float *C, int ldc)
{
    int kb = NPU_KB;
    while ((K + kb - 1) / kb > NPU_MAXB)
        kb *= 2;
    int nb = K > 0 ? (K + kb - 1) / kb : 0;
    int ngroups = (M + NPU_RB - 1) / NPU_RB;
#pragma omp parallel if (rt_par_all || (double)M * N * K > 1 << 16)
    {
        /* acc[r][b][jj]: partial sum of K block b for row r, column j0 + jj;
         * without memory for a group, one row at a time in a stack buffer */
        float *heap = malloc(sizeof(float) * NPU_RB * (size_t)(nb ? nb : 1) * NPU_JB);
        float one[NPU_MAXB * NPU_JB];
#pragma omp for schedule(static)
        for (int gi = 0; gi < ngroups; gi++) {
            int i0 = gi * NPU_RB, rn = M - i0 < NPU_RB ? M - i0 : NPU_RB;
            if (heap)
                npu_rows(i0, rn, N, K, kb, nb, A, B, beta, C, ldc, heap);
            else
                for (int r = 0; r < rn; r++)
                    npu_rows(i0 + r, 1, N, K, kb, nb, A, B, beta, C, ldc, one);
        }
        free(heap);
    }
}

/* Contiguous copy of op(X) (R,Cc) where X is stored with leading dim ld
 * (malloc'd, the caller frees; NULL when out of memory). */
static float *materialise(int trans, int R, int Cc, const float *X, int ld)
{
    float *d = malloc((size_t)R * (size_t)Cc * sizeof(float) + 1);
    if (!d)
        return NULL;
#pragma omp parallel for if ((long)R * Cc > RT_PAR_MIN)
    for (int r = 0; r < R; r++)
        for (int c = 0; c < Cc; c++)
            d[(size_t)r * Cc + c] = trans ? X[(size_t)c * ld + r] : X[(size_t)r * ld + c];
    return d;
}

/* ---- OpenBLAS setup -------------------------------------------------------- */
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

/* Core name OpenBLAS should use on this CPU, NULL to keep its choice. */
static const char *blas_wanted_core(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
#endif
    return NULL;
}

static void blas_fix_core(void)
{
    const char *cur = openblas_get_corename();
    const char *want = blas_wanted_core();
    if (getenv("OPENBLAS_CORETYPE") || !want || !cur || strcmp(cur, "Prescott") != 0)
        return;
    /* DYNAMIC_ARCH builds export the (re)initialisation; others keep theirs */
    void *self = dlopen(NULL, RTLD_NOW);
    if (!self)
        return;
    void *pq = dlsym(self, "gotoblas_dynamic_quit"), *pi = dlsym(self, "gotoblas_dynamic_init");
    if (pq && pi) {
        void (*quit)(void), (*init)(void);
        memcpy(&quit, &pq, sizeof quit);
        memcpy(&init, &pi, sizeof init);
        if (setenv("OPENBLAS_CORETYPE", want, 1) == 0) {
            quit();
            init();
            unsetenv("OPENBLAS_CORETYPE");
        }
    }
    dlclose(self);
}

void rt_blas_setup(void)
{
    pthread_once(&blas_once, blas_fix_core);
    openblas_set_num_threads(1);
}

/* ---- cpu --------------------------------------------------------------------- */
#define CPU_PAR_FLOPS (1 << 18) /* below this M*N*K one sgemm call on one thread */
#define CPU_MAX_PANELS 8
#define CPU_MIN_PANEL 32
#define CPU_PANEL 256

static void cpu_gemm(int transA, int transB, int M, int N, int K, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc)
{
    enum CBLAS_TRANSPOSE ta = transA ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = transB ? CblasTrans : CblasNoTrans;
    double work = (double)M * N * K;
    int split_rows = M >= N;
    int D = split_rows ? M : N;
    /* panels fixed by the shape alone: a power of two in [2, 8] of about
     * CPU_PANEL rows/columns (each panel packs the whole other operand, so
     * fewer is cheaper; even counts keep two threads balanced), a multiple
     * of 16 and at least CPU_MIN_PANEL wide */
    int np = 2;
    while (np < CPU_MAX_PANELS && D / (2 * np) >= CPU_PANEL)
        np *= 2;
    int ps = (D + np - 1) / np;
    ps = (ps + 15) / 16 * 16;
    if (ps < CPU_MIN_PANEL)
        ps = CPU_MIN_PANEL;
    np = (D + ps - 1) / ps;
    if ((work < CPU_PAR_FLOPS && !rt_par_all) || np < 2 || omp_in_parallel()) {
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#pragma omp parallel for schedule(static, 1)
    for (int p = 0; p < np; p++) {
        int d0 = p * ps, dn = D - d0 < ps ? D - d0 : ps;
        if (split_rows) {
            const float *a = transA ? A + d0 : A + (size_t)d0 * lda;
            cblas_sgemm(CblasRowMajor, ta, tb, dn, N, K, 1.0f, a, lda, B, ldb, beta,
                        C + (size_t)d0 * ldc, ldc);
        } else {
            const float *b = transB ? B + (size_t)d0 * ldb : B + d0;
            cblas_sgemm(CblasRowMajor, ta, tb, M, dn, K, 1.0f, A, lda, b, ldb, beta, C + d0, ldc);
        }
    }
}

int rt_gemm_dev(np_device dev, int transA, int transB, int M, int N, int K, const float *A, int lda,
                const float *B, int ldb, float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0)
        return 0;
    if (dev == NP_DEVICE_CPU) {
        if (K <= 0) {
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++)
                    C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
            return 0;
        }
        cpu_gemm(transA, transB, M, N, K, A, lda, B, ldb, beta, C, ldc);
        return 0;
    }
    float *ca = NULL, *cb = NULL;
    if (transA || lda != K)
        ca = materialise(transA, M, K, A, lda);
    if (transB || ldb != N)
        cb = materialise(transB, K, N, B, ldb);
    int fail = ((transA || lda != K) && !ca) || ((transB || ldb != N) && !cb);
    if (!fail)
        npu_gemm_nn(M, N, K, ca ? ca : A, cb ? cb : B, beta, C, ldc);
    free(ca);
    free(cb);
    return fail ? -1 : 0;
}
