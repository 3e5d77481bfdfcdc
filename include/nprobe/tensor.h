/* nprobe/tensor.h - the tensor as every part of nprobe sees it.
 *
 * Logical dtypes follow PyTorch. Storage: bfloat16, float16 and float32 are
 * all stored as float32 holding values already rounded to the logical dtype
 * (round to nearest even, overflow to inf, subnormals kept), so low precision
 * is emulated bit-exactly; float64 is stored as double, int64 as int64_t,
 * int32 as int32_t, bool as uint8_t (0/1). Row-major, contiguous. */
#ifndef NPROBE_TENSOR_H
#define NPROBE_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "nprobe/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NP_MAX_DIMS 8

typedef enum np_dtype {
    NP_FLOAT32 = 0,
    NP_BFLOAT16,
    NP_FLOAT16,
    NP_FLOAT64,
    NP_INT64,
    NP_INT32,
    NP_BOOL,
    NP_FLOAT8_E4M3FN,          /* float8 (nprobe/lowp.h), stored as float32 holding the */
    NP_FLOAT8_E5M2,            /* decoded values, like bf16/fp16; a tensor view passes */
    NP_HIFLOAT8,               /* the 8-bit codes (one byte an element) */
    NP_DTYPE_COUNT
} np_dtype;

/* "float32", "bfloat16", "float16", "float64", "int64", "int32", "bool",
 * "float8_e4m3fn", "float8_e5m2", "hifloat8". */
const char *np_dtype_name(np_dtype dt);
/* Parse a dtype name (also accepts "fp32", "bf16", "fp16", "fp64"); -1 if unknown. */
int np_dtype_from_name(const char *name);
/* Bytes per element of the *storage* type (4 for bf16/fp16/fp32). */
size_t np_dtype_storage_size(np_dtype dt);
/* 1 for float32/bfloat16/float16/float64 and the float8 dtypes. */
int np_dtype_is_floating(np_dtype dt);

/* Round a float32 to the nearest bfloat16 / float16 value (ties to even,
 * overflow to +-inf, NaN stays NaN, float16 subnormals kept). */
float np_round_bf16(float x);
float np_round_f16(float x);
/* Round to a logical floating dtype (identity for float32/float64; float8:
 * np_fp8_round, E4M3 saturating as torch's cast, E5M2/HiF8 to infinity). */
float np_round_to(np_dtype dt, float x);
/* Bit conversions, for tests and file formats. */
uint16_t np_f32_to_bf16_bits(float x);
float np_bf16_bits_to_f32(uint16_t b);
uint16_t np_f32_to_f16_bits(float x);
float np_f16_bits_to_f32(uint16_t h);

typedef struct np_tensor {
    np_dtype dtype;            /* logical dtype */
    int ndim;                  /* 0 for a scalar */
    int64_t shape[NP_MAX_DIMS];
    int64_t numel;             /* product of shape (1 for ndim 0) */
    void *data;                /* storage, numel * np_dtype_storage_size(dtype) bytes */
    float *grad;               /* float32 gradient of numel elements, or NULL */
    int requires_grad;
    const char *name;          /* parameter name (GPT-2 style) or NULL; borrowed */
    void *rt;                  /* runtime-private bookkeeping; others must not touch */
} np_tensor;

/* Bytes of storage: numel * storage size. */
size_t np_tensor_nbytes(const np_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
