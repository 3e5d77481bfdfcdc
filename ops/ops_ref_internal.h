/* ops/ops_ref_internal.h - the registry adapters of the float64
 * reference kernels (ref_*.c), gathered into the table of
 * ops/ops_registry.c. Private to np_ops. */
#ifndef NPROBE_OPS_REF_INTERNAL_H
#define NPROBE_OPS_REF_INTERNAL_H

#include "nprobe/ops.h"

/* t gets ndim dims of shape (NULL for a 0-d tensor) and its numel. */
void rt_ref_set_shape(np_op_tensor *t, int ndim, const int64_t *shape);
/* dst[i] = |src[i]| (dst may be src). */
void rt_ref_abs_copy(double *dst, const double *src, int64_t n);
/* rms_norm's eps: the given one, or float32's machine epsilon when < 0 (PyTorch's None). */
double rt_ref_rms_eps(double eps);

#define RT_REF_ADAPTERS(op)                                 \
    void rt_ref_##op##_fwd(np_op_call *c);                  \
    void rt_ref_##op##_bwd(np_op_call *c)

np_status rt_ref_linear_shape(np_op_call *c, np_error *err);
np_status rt_ref_matmul_shape(np_op_call *c, np_error *err);
np_status rt_ref_conv2d_shape(np_op_call *c, np_error *err);
np_status rt_ref_max_pool2d_shape(np_op_call *c, np_error *err);
np_status rt_ref_embedding_shape(np_op_call *c, np_error *err);
np_status rt_ref_same_shape(np_op_call *c, np_error *err);
np_status rt_ref_norm_shape(np_op_call *c, np_error *err);
np_status rt_ref_softmax_shape(np_op_call *c, np_error *err);
np_status rt_ref_sdpa_shape(np_op_call *c, np_error *err);
np_status rt_ref_cross_entropy_shape(np_op_call *c, np_error *err);
np_status rt_ref_binary_shape(np_op_call *c, np_error *err);
np_status rt_ref_reduce_shape(np_op_call *c, np_error *err);
np_status rt_ref_view_shape(np_op_call *c, np_error *err);
np_status rt_ref_transpose_shape(np_op_call *c, np_error *err);
np_status rt_ref_split_shape(np_op_call *c, np_error *err);

RT_REF_ADAPTERS(linear);
RT_REF_ADAPTERS(matmul);
RT_REF_ADAPTERS(conv2d);
RT_REF_ADAPTERS(max_pool2d);
RT_REF_ADAPTERS(embedding);
RT_REF_ADAPTERS(pointwise);
RT_REF_ADAPTERS(layernorm);
RT_REF_ADAPTERS(rmsnorm);
RT_REF_ADAPTERS(softmax);
RT_REF_ADAPTERS(sdpa);
RT_REF_ADAPTERS(cross_entropy);
RT_REF_ADAPTERS(binary);
RT_REF_ADAPTERS(reduce);
RT_REF_ADAPTERS(copy);
RT_REF_ADAPTERS(transpose);
RT_REF_ADAPTERS(split);

const char *rt_ref_dropout_random(const np_op_call *c);
/* The arguments the float64 references do not take (NULL: none given). */
const char *rt_ref_conv2d_unsupported(const np_op_call *c);
const char *rt_ref_max_pool2d_unsupported(const np_op_call *c);
const char *rt_ref_embedding_unsupported(const np_op_call *c);
const char *rt_ref_cross_entropy_unsupported(const np_op_call *c);

#endif
