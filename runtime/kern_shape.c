/* runtime/kern_shape.c - float32 kernels of the copying shape ops
 * (kernels.h): transpose and split, forward and backward. Plain copies, no
 * arithmetic; no context. */
#include <string.h>

#include "kernels.h"
#include "rt_internal.h"

void rt_transpose_forward(float *out, const float *inp, int64_t pre, int64_t A, int64_t mid, int64_t B,
                          int64_t post)
{
    int64_t outer = pre * B * mid * A;
#pragma omp parallel for if (outer * post > RT_PAR_EW)
    for (int64_t o = 0; o < outer; o++) {
        int64_t a = o % A, m = (o / A) % mid, b = (o / (A * mid)) % B, p = o / (A * mid * B);
        const float *src = inp + (((p * A + a) * mid + m) * B + b) * post;
        memcpy(out + o * post, src, (size_t)post * sizeof(float));
    }
}

void rt_transpose_backward(float *dinp, const float *dout, int64_t pre, int64_t A, int64_t mid, int64_t B,
                           int64_t post)
{
    rt_transpose_forward(dinp, dout, pre, B, mid, A, post);
}

void rt_split_forward(float *out, const float *inp, int64_t pre, int64_t S, int64_t post, int64_t off,
                      int64_t len)
{
#pragma omp parallel for if (pre * len * post > RT_PAR_EW)
    for (int64_t p = 0; p < pre; p++)
        memcpy(out + p * len * post, inp + (p * S + off) * post, (size_t)(len * post) * sizeof(float));
}

void rt_split_backward(float *dinp, const float *dout, int64_t pre, int64_t S, int64_t post, int64_t off,
                       int64_t len)
{
#pragma omp parallel for if (pre * len * post > RT_PAR_EW)
    for (int64_t p = 0; p < pre; p++)
        memcpy(dinp + (p * S + off) * post, dout + p * len * post, (size_t)(len * post) * sizeof(float));
}
