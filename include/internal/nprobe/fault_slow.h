/* nprobe/fault_slow.h - performance faults: one op made slower on one rank
 * (`nprobe train --fault slow_gelu [--fault-rank R]`), the regressions a
 * profile compare must find (docs/PROFILE.md, "Slow faults"). Each runs
 * one op through a slow path that computes the same function: its results
 * equal the reference's to float32 rounding, only its time changes. They
 * act on any device and model that has the op. */
#ifndef NPROBE_FAULT_SLOW_H
#define NPROBE_FAULT_SLOW_H

#include "nprobe/common.h"
#include "nprobe/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum np_slow_fault_kind {
    NP_SLOW_FAULT_NONE = 0,
    NP_SLOW_FAULT_GELU,   /* Functional.gelu fwd+bwd: one element at a time in long double
                             (erfl, expl), no vector clone, no OpenMP */
    NP_SLOW_FAULT_LINEAR, /* Functional.linear fwd: the GEMM as a naive triple loop in
                             double, no BLAS, no OpenMP */
    NP_SLOW_FAULT_COUNT
} np_slow_fault_kind;

typedef struct np_slow_fault_info {
    const char *name;        /* "slow_gelu", as --fault takes it */
    const char *op;          /* the API it slows */
    const char *description;
} np_slow_fault_info;

/* Entry k (1 .. NP_SLOW_FAULT_COUNT-1), NULL outside. */
const np_slow_fault_info *np_slow_fault_get(int k);
/* Kind by name; -1 if unknown. */
int np_slow_fault_from_name(const char *name);
/* Run ctx's op through the slow path from now on (NP_ERR_ARG: bad kind). */
np_status np_slow_fault_apply(np_ctx *ctx, np_slow_fault_kind kind, np_error *err);

#ifdef __cplusplus
}
#endif
#endif
