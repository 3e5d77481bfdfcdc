/* runtime/fault.c - the fault catalog of the npu-sim device: the bugs people
 * meet when they port a model to a new backend, each one a wrapper or a
 * replacement of one op's context-free kernel (runtime/fault_kernels.c; the
 * reference kernels carry no fault branch); see docs/RUNTIME.md for the
 * detectability table and "Kernels, saved state and how faults act". */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "nprobe/ops.h"
#include "nprobe/runtime.h"

/* The catalog; the ops a fault acts on are np_op ids (at most two, the
 * second NP_OP_COUNT when there is one), their API names joined into
 * np_fault_info.op once. */
typedef struct fault_def {
    np_fault id;
    const char *name;
    np_op ops[2];
    const char *pass;
    int beats_bf16_noise;
    const char *description;
} fault_def;

#define ONE(op) {op, NP_OP_COUNT}
static const fault_def defs[] = {
    {NP_FAULT_NONE, "none", {NP_OP_COUNT, NP_OP_COUNT}, "", 0, "no fault: npu-sim differs from cpu only in GEMM accumulation order"},
    {NP_FAULT_LAYERNORM_EPS, "layernorm_eps", ONE(NP_OP_LAYER_NORM), "forward", 1,
     "epsilon read in the wrong unit: the kernel uses eps * 1e5 (1e-5 becomes 1.0), shrinking every normalised output"},
    {NP_FAULT_SOFTMAX_FP16_NOMAX, "softmax_fp16_nomax", {NP_OP_SOFTMAX, NP_OP_SDPA}, "forward", 0,
     "softmax without max subtraction, exp and sum in float16: ~1e-3 relative error on small logits, inf/NaN once a logit exceeds ~11"},
    {NP_FAULT_GELU_TANH, "gelu_tanh", ONE(NP_OP_GELU), "forward+backward", 0,
     "tanh approximation used where the erf form was asked (abs error up to ~5e-4, relative error > 5e-2 only for x < -2.5)"},
    {NP_FAULT_ATTN_MASK_OFF_BY_ONE, "attn_mask_off_by_one", ONE(NP_OP_SDPA), "forward+backward", 1,
     "causal mask off by one: position t also attends to t+1 (future leak)"},
    {NP_FAULT_LINEAR_DROP_BIAS, "linear_drop_bias", ONE(NP_OP_LINEAR), "forward+backward", 1,
     "bias ignored by the fused GEMM epilogue (and so it receives no gradient)"},
    {NP_FAULT_ATTN_SCALE, "attn_scale", ONE(NP_OP_SDPA), "forward+backward", 1,
     "attention scores scaled by 1/D instead of 1/sqrt(D)"},
    {NP_FAULT_LAYERNORM_BWD_NO_MEAN, "layernorm_bwd_no_mean", ONE(NP_OP_LAYER_NORM), "backward", 1,
     "layer-norm input gradient misses the two mean terms (dx = rstd * w * dy)"},
    {NP_FAULT_EMBEDDING_BWD_OVERWRITE, "embedding_bwd_overwrite", ONE(NP_OP_EMBEDDING), "backward", 1,
     "embedding weight gradient written instead of accumulated: a repeated index keeps only its last row"},
    {NP_FAULT_CONV2D_FLIP_KERNEL, "conv2d_flip_kernel", ONE(NP_OP_CONV2D), "forward+backward", 1,
     "kernel applied flipped (true convolution instead of PyTorch's cross-correlation)"},
};

#undef ONE
_Static_assert(sizeof defs / sizeof defs[0] == NP_FAULT_COUNT, "defs must hold every np_fault");

static np_fault_info faults[NP_FAULT_COUNT];
static char fault_ops[NP_FAULT_COUNT][128];
static pthread_once_t faults_once = PTHREAD_ONCE_INIT;

static void faults_init(void)
{
    for (int i = 0; i < NP_FAULT_COUNT; i++) {
        const fault_def *d = &defs[i];
        char *b = fault_ops[i];
        b[0] = 0;
        for (int k = 0; k < 2 && d->ops[k] < NP_OP_COUNT; k++)
            snprintf(b + strlen(b), sizeof fault_ops[i] - strlen(b), "%s%s", k ? ", " : "",
                     np_op_api(d->ops[k]));
        faults[i] = (np_fault_info){d->id, d->name, b, d->pass, d->beats_bf16_noise,
                                    d->description};
    }
}

int np_fault_count(void)
{
    return NP_FAULT_COUNT;
}

const np_fault_info *np_fault_get(int i)
{
    if (i < 0 || i >= NP_FAULT_COUNT)
        return NULL;
    pthread_once(&faults_once, faults_init);
    return &faults[i];
}

int np_fault_from_name(const char *name)
{
    if (!name)
        return -1;
    for (int i = 0; i < NP_FAULT_COUNT; i++)
        if (strcmp(name, defs[i].name) == 0)
            return i;
    return -1;
}
