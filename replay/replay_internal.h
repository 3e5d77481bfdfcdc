/* replay/replay_internal.h - shared inside np_replay. */
#ifndef NP_REPLAY_INTERNAL_H
#define NP_REPLAY_INTERNAL_H

#include <stddef.h>

#include "nprobe/ops.h"

/* Known-defect signatures (signature.c): 1 when the dumped output of the
 * call `oc` (inputs loaded as the kernel saw them; backward: gout too, and
 * `dumped` the first input gradient) departs from the exact result the way
 * a known defect does; `why` then says which, with the evidence. `dtype` is
 * the output's logical dtype, `what` the leaf's name. */
int rp_signature(char *why, size_t n, const np_op_call *oc, const double *dumped,
                 const char *dtype, int backward, const char *what);

/* The operands of a linear or matmul call quantized in place as a run of
 * low-precision format `lowp` (np_lowp: mxfp8, hif8) quantized them; other
 * ops and NP_LOWP_NONE: unchanged. -1: out of memory (lowp_inputs.c). */
int rp_lowp_inputs(np_op_call *oc, int lowp);
/* The backward of a linear whose backward GEMMs the runtime quantized
 * (kwargs lowp_backward; docs/RUNTIME.md): oc's inputs and gradient as
 * dumped (not quantized); dX from Q_O(dY) Q_O(W), dW from Q_R(dY)^T Q_R(X),
 * the bias gradient from dY as it arrived; dY quantized to grad_lowp (lowp,
 * or NP_LOWP_MXFP8_E5M2: kwargs lowp_backward 2). np_op_run's status. */
np_status rp_lowp_linear_backward(np_op_call *oc, int lowp, int grad_lowp, np_error *err);
/* The same for a matmul a (..., M, K) @ b (..., K, N) or (K, N):
 * dA from Q_N(dY) Q_N(B)^T, dB from Q_M(A)^T Q_M(dY) (a 2-D b: along the
 * batches' M together). */
np_status rp_lowp_matmul_backward(np_op_call *oc, int lowp, int grad_lowp, np_error *err);

#endif
