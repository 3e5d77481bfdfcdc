/* runtime/fault.c - the fault catalog of the npu-sim device: the bugs people
 * meet when they port a model to a new backend, each one a wrapper or a
 * replacement of one op's context-free kernel (runtime/fault_kernels.c; the
 * reference kernels carry no fault branch); see docs/RUNTIME.md for the
 * detectability table and "Kernels, saved state and how faults act". */
#include <string.h>

#include "nprobe/runtime.h"

static const np_fault_info faults[NP_FAULT_COUNT] = {
    {NP_FAULT_NONE, "none", "", "", 0, "no fault: npu-sim differs from cpu only in GEMM accumulation order"},
    {NP_FAULT_LAYERNORM_EPS, "layernorm_eps", "Functional.layer_norm", "forward", 1,
     "epsilon read in the wrong unit: the kernel uses eps * 1e5 (1e-5 becomes 1.0), shrinking every normalised output"},
    {NP_FAULT_SOFTMAX_FP16_NOMAX, "softmax_fp16_nomax", "Functional.softmax, Functional.scaled_dot_product_attention", "forward", 0,
     "softmax without max subtraction, exp and sum in float16: ~1e-3 relative error on small logits, inf/NaN once a logit exceeds ~11"},
    {NP_FAULT_GELU_TANH, "gelu_tanh", "Functional.gelu", "forward+backward", 0,
     "tanh approximation used where the erf form was asked (abs error up to ~5e-4, relative error > 5e-2 only for x < -2.5)"},
    {NP_FAULT_ATTN_MASK_OFF_BY_ONE, "attn_mask_off_by_one", "Functional.scaled_dot_product_attention", "forward+backward", 1,
     "causal mask off by one: position t also attends to t+1 (future leak)"},
    {NP_FAULT_LINEAR_DROP_BIAS, "linear_drop_bias", "Functional.linear", "forward+backward", 1,
     "bias ignored by the fused GEMM epilogue (and so it receives no gradient)"},
    {NP_FAULT_ATTN_SCALE, "attn_scale", "Functional.scaled_dot_product_attention", "forward+backward", 1,
     "attention scores scaled by 1/D instead of 1/sqrt(D)"},
    {NP_FAULT_LAYERNORM_BWD_NO_MEAN, "layernorm_bwd_no_mean", "Functional.layer_norm", "backward", 1,
     "layer-norm input gradient misses the two mean terms (dx = rstd * w * dy)"},
    {NP_FAULT_EMBEDDING_BWD_OVERWRITE, "embedding_bwd_overwrite", "Functional.embedding", "backward", 1,
     "embedding weight gradient written instead of accumulated: a repeated index keeps only its last row"},
    {NP_FAULT_CONV2D_FLIP_KERNEL, "conv2d_flip_kernel", "Functional.conv2d", "forward+backward", 1,
     "kernel applied flipped (true convolution instead of PyTorch's cross-correlation)"},
};

int np_fault_count(void)
{
    return NP_FAULT_COUNT;
}

const np_fault_info *np_fault_get(int i)
{
    return i >= 0 && i < NP_FAULT_COUNT ? &faults[i] : NULL;
}

int np_fault_from_name(const char *name)
{
    if (!name)
        return -1;
    for (int i = 0; i < NP_FAULT_COUNT; i++)
        if (strcmp(name, faults[i].name) == 0)
            return i;
    return -1;
}
