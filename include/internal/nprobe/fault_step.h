/* nprobe/fault_step.h - one-time training faults at a chosen step and rank
 * (`nprobe train --fault NAME --fault-step S [--fault-rank R]`), the events
 * a monitor must find in a long run (docs/MONITOR.md "Faults"). They act on
 * the GPT on any device, through an observer that runs before every other
 * (order -100) and changes the output of one API call in place: a
 * corrupted result, as the hardware or the data would give it. */
#ifndef NPROBE_FAULT_STEP_H
#define NPROBE_FAULT_STEP_H

#include <stdint.h>

#include "nprobe/common.h"
#include "nprobe/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum np_step_fault_kind {
    NP_STEP_FAULT_NONE = 0,
    NP_STEP_FAULT_GEMM_BITFLIP,  /* h.0.mlp.c_fc's linear: bit 30 of one output element flipped;
                                    one-time: not in a run resumed at or after the step */
    NP_STEP_FAULT_OUTLIER_BATCH, /* wte's embedding output x 256: an extreme batch */
    NP_STEP_FAULT_LOGIT_GROWTH,  /* lm_head's output x 256^(k+1) at step S+k, until bf16 overflows;
                                    only where that output is bf16 or fp16 (fp32: untouched) */
    NP_STEP_FAULT_NAN_INPUT,     /* wte's embedding output: one element NaN */
    NP_STEP_FAULT_RARE_PATTERN,  /* h.0.attn.c_attn's GEMM is defective on a rare input (its
                                    first two elements both -3.96875: first output row x1024),
                                    on every step and rank; step S, rank R: h.0.ln_1's output
                                    carries that pattern */
    NP_STEP_FAULT_COUNT
} np_step_fault_kind;

typedef struct np_step_fault_info {
    const char *name;        /* "gemm_bitflip", as --fault takes it */
    const char *module;      /* the module whose output it corrupts */
    const char *description;
} np_step_fault_info;

/* Entry k of the catalog (1 .. NP_STEP_FAULT_COUNT-1), NULL outside. */
const np_step_fault_info *np_step_fault_get(int k);
/* Kind by name; -1 if unknown ("none" is not a step fault). */
int np_step_fault_from_name(const char *name);

typedef struct np_step_fault np_step_fault;
/* Observe ctx: the fault fires at `step` (and after, for logit_growth) on
 * `rank` (-1: every rank). */
np_status np_step_fault_attach(np_step_fault **out, np_ctx *ctx, np_step_fault_kind kind,
                               int64_t step, int rank, np_error *err);
/* Detach and free; NULL ok. Returns the number of times it fired. */
int np_step_fault_detach(np_step_fault *f);

#ifdef __cplusplus
}
#endif
#endif
