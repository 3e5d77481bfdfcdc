/* tests/runtime/lowp_ref.h - the scalar reference of np_lowp_quantize
 * (lowp_ref.c): same arguments, same results. */
#ifndef NPROBE_TESTS_LOWP_REF_H
#define NPROBE_TESTS_LOWP_REF_H

#include "nprobe/lowp.h"

void ref_lowp_quantize(float *dst, const float *src, int64_t outer, int64_t K, int64_t inner, np_lowp f,
                       int scale_shift, int dequant_shift, np_lowp_stats *st);

#endif
