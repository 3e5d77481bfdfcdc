/* nprobe/precision.h - the runtime's low-precision GEMM formats (MxFP8,
 * HiF8: np_ctx_opts.lowp) and the precision faults: faults of the npu-sim
 * device that a change of precision, not of arithmetic, exposes or cures
 * (a wrong block scale, a saturating layer). A third catalog beside the op
 * faults (runtime.h) and the collective ones (dist.h): `nprobe train
 * --fault NAME` takes a name of any. docs/RUNTIME.md, "Low-precision GEMM
 * formats". */
#ifndef NPROBE_PRECISION_H
#define NPROBE_PRECISION_H

#include "nprobe/lowp.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum np_prec_fault {
    NP_PREC_FAULT_NONE = 0,
    NP_PREC_FAULT_LOWP_BLOCK_SCALE, /* linear: weight blocks dequantized with twice their scale */
    NP_PREC_FAULT_LOWP_SATURATE,    /* linear: the input's scale 2^4 (MxFP8) / 2^14 (HiF8) too small */
    /* promotion faults: the op's low-precision path is too imprecise, its
     * float32 path (a per-op override, np_ctx_opts.fp32_ops) is right */
    NP_PREC_FAULT_LN_STATS_BF16,    /* layer_norm: mean and variance accumulated in bf16 */
    NP_PREC_FAULT_SOFTMAX_BF16_ACC, /* softmax and sdpa's softmax: exp and sum kept in bf16 */
    NP_PREC_FAULT_LOSS_BF16,        /* cross_entropy: log-sum-exp and the mean in bf16 */
    NP_PREC_FAULT_LOWP_BWD_UNDERFLOW, /* linear, lowp_backward: the gradient's scales 2^16 (MX) /
                                       * 2^24 (HiF8) too large: most of it flushes to zero */
    NP_PREC_FAULT_MOE_ROUTER_BF16,  /* gpt --moe: the router's linear under autocast (bf16), not float32 */
    NP_PREC_FAULT_COUNT
} np_prec_fault;

typedef struct np_prec_fault_info {
    np_prec_fault id;
    const char *name;        /* "lowp_block_scale", used by --fault */
    const char *op;          /* API names it acts on */
    const char *needs;       /* the precision it needs: "mxfp8|hif8", "bf16" */
    const char *description;
} np_prec_fault_info;

/* Entries 0 ("none") .. np_prec_fault_count()-1; NULL when out of range. */
int np_prec_fault_count(void);
const np_prec_fault_info *np_prec_fault_get(int i);
/* Id by name; -1 if unknown. */
int np_prec_fault_from_name(const char *name);

#ifdef __cplusplus
}
#endif
#endif
