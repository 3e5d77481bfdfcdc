/* runtime/gemm.c - the GEMM behind linear, matmul and conv2d. cpu: OpenBLAS
 * cblas_sgemm. npu-sim: its own kernel accumulating in float32 over K in
 * blocks of 64, the block partial sums combined pairwise (the order an
 * accelerator's tiled matrix unit would use), OpenMP over output rows. */
#include <string.h>

#include <cblas.h>

#include "rt_internal.h"

#define NPU_KB 64   /* K block */
#define NPU_JB 64   /* output columns per pass */
#define NPU_MAXB 128 /* max K blocks kept for the pairwise combine */

/* C (M,N) = beta*C + A (M,K) B (K,N), all row-major contiguous. */
static void npu_gemm_nn(int M, int N, int K, const float *A, const float *B, float beta, float *C, int ldc)
{
    int kb = NPU_KB;
    while ((K + kb - 1) / kb > NPU_MAXB)
        kb *= 2;
    int nb = K > 0 ? (K + kb - 1) / kb : 0;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < M; i++) {
        float acc[NPU_MAXB][NPU_JB];
        for (int j0 = 0; j0 < N; j0 += NPU_JB) {
            int jn = N - j0 < NPU_JB ? N - j0 : NPU_JB;
            for (int b = 0; b < nb; b++) {
                float *a = acc[b];
                for (int jj = 0; jj < jn; jj++)
                    a[jj] = 0.0f;
                int k1 = (b + 1) * kb < K ? (b + 1) * kb : K;
                for (int k = b * kb; k < k1; k++) {
                    float av = A[(size_t)i * K + k];
                    const float *brow = B + (size_t)k * N + j0;
                    for (int jj = 0; jj < jn; jj++)
                        a[jj] += av * brow[jj];
                }
            }
            for (int w = 1; w < nb; w *= 2)
                for (int b = 0; b + w < nb; b += 2 * w)
                    for (int jj = 0; jj < jn; jj++)
                        acc[b][jj] += acc[b + w][jj];
            float *c = C + (size_t)i * ldc + j0;
            for (int jj = 0; jj < jn; jj++) {
                float v = nb ? acc[0][jj] : 0.0f;
                c[jj] = beta == 0.0f ? v : beta * c[jj] + v;
            }
        }
    }
}

/* Contiguous copy of op(X) (R,Cc) where X is stored with leading dim ld. */
static float *materialise(np_ctx *ctx, int trans, int R, int Cc, const float *X, int ld)
{
    float *d = rt_alloc(ctx, (size_t)R * (size_t)Cc * sizeof(float) + 1);
    if (!d)
        return NULL;
#pragma omp parallel for if ((long)R * Cc > RT_PAR_MIN)
    for (int r = 0; r < R; r++)
        for (int c = 0; c < Cc; c++)
            d[(size_t)r * Cc + c] = trans ? X[(size_t)c * ld + r] : X[(size_t)r * ld + c];
    return d;
}

void rt_gemm(np_ctx *ctx, int transA, int transB, int M, int N, int K,
             const float *A, int lda, const float *B, int ldb, float beta,
             float *C, int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    if (ctx->o.device == NP_DEVICE_CPU) {
        if (K <= 0) {
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++)
                    C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
            return;
        }
        cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
                    transB ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, A, lda, B, ldb,
                    beta, C, ldc);
        return;
    }
    const float *a = A, *b = B;
    if (transA || lda != K)
        a = materialise(ctx, transA, M, K, A, lda);
    if (transB || ldb != N)
        b = materialise(ctx, transB, K, N, B, ldb);
    if (!a || !b)
        return;
    npu_gemm_nn(M, N, K, a, b, beta, C, ldc);
}
