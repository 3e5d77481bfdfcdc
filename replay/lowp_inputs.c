/* replay/lowp_inputs.c - the GEMM operands of a run of precision mxfp8 or
 * hif8 quantized as the runtime quantized them (runtime/lowp.c): the dump
 * holds the operands as the program passed them, the kernel multiplied
 * their 8-bit images, so the float64 recompute starts from the same images
 * (docs/RUNTIME.md, "Low-precision GEMM formats"). */
#include <stdlib.h>

#include "nprobe/lowp.h"
#include "replay_internal.h"

static int quant(np_op_tensor *t, int64_t K, int64_t inner, np_lowp f)
{
    if (!t->data || K <= 0 || inner <= 0 || t->numel % (K * inner))
        return 0;
    float *b = malloc((size_t)t->numel * sizeof *b);
    if (!b)
        return -1;
    for (int64_t i = 0; i < t->numel; i++)
        b[i] = (float)t->data[i];
    np_lowp_quantize(b, b, t->numel / (K * inner), K, inner, f, 0, 0, NULL);
    for (int64_t i = 0; i < t->numel; i++)
        t->data[i] = b[i];
    free(b);
    return 0;
}

int rp_lowp_inputs(np_op_call *oc, int lowp)
{
    if (lowp <= NP_LOWP_NONE || lowp >= NP_LOWP_COUNT || oc->n_in < 2)
        return 0;
    np_op_tensor *a = &oc->in[0], *b = &oc->in[1];
    if (a->ndim < 1 || b->ndim < 2)
        return 0;
    int64_t K = a->shape[a->ndim - 1];
    if (oc->info->op == NP_OP_LINEAR) /* x (..., I), w (O, I): both along I */
        return quant(a, K, 1, (np_lowp)lowp) || quant(b, K, 1, (np_lowp)lowp) ? -1 : 0;
    if (oc->info->op == NP_OP_MATMUL) /* a (..., M, K), b (..., K, N) */
        return quant(a, K, 1, (np_lowp)lowp) || quant(b, K, b->shape[b->ndim - 1], (np_lowp)lowp) ? -1 : 0;
    return 0;
}
