/* nprobe/lowp.h - 8-bit floating-point formats and their scaled
 * quantization (docs/RUNTIME.md, "Low-precision GEMM formats"):
 *
 *   float8 E4M3 (OCP "FN": bias 7, subnormals, no infinity, S.1111.111 is
 *     NaN, largest finite 448), float8 E5M2 (OCP/IEEE-like: bias 15,
 *     subnormals, infinities, largest finite 57344): round to nearest, ties
 *     to even; an overflow saturates to the largest finite value when asked,
 *     otherwise gives NaN (E4M3) or infinity (E5M2), as torch's casts do;
 *   HiF8 (Huawei's HiFloat8, Luo et al., "Ascend HiFloat8 Format for Deep
 *     Learning", arXiv 2409.16626): sign, a prefix-coded dot field giving
 *     the exponent width D (11: 4, 10: 3, 01: 2, 001: 1, 0001: 0, 0000:
 *     denormal), a sign-magnitude exponent of D bits with an implicit
 *     leading magnitude bit, the rest mantissa; round to nearest, ties away
 *     from zero (the paper's TA rounding);
 *   MxFP8 (OCP Microscaling v1.0): blocks of 32 elements along the
 *     reduction dimension share one power-of-two scale (E8M0, exponent in
 *     [-127, 127]) = 2^(floor(log2(amax)) - 8), the elements E4M3 after
 *     division by it, saturating; its E5M2 variant (the gradients of MX
 *     training): scale 2^(floor(log2(amax)) - 15), elements E5M2, saturating.
 *
 * Values are emulated as float32 (or double) holding exactly representable
 * values, as bf16/fp16 are elsewhere in nprobe. */
#ifndef NPROBE_LOWP_H
#define NPROBE_LOWP_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum np_fp8_kind {
    NP_FP8_E4M3 = 0,
    NP_FP8_E5M2,
    NP_FP8_HIF8,
    NP_FP8_KIND_COUNT
} np_fp8_kind;

/* "e4m3", "e5m2", "hif8". */
const char *np_fp8_name(np_fp8_kind k);
/* Largest finite magnitude: 448, 57344, 32768. */
double np_fp8_max(np_fp8_kind k);
/* Smallest positive magnitude: 2^-9, 2^-16, 2^-22. */
double np_fp8_min(np_fp8_kind k);

/* Round x to the format (saturate: overflow gives the largest finite value
 * of x's sign; otherwise NaN for E4M3, infinity for E5M2 and HiF8). NaN
 * stays NaN; a zero keeps its sign for E4M3/E5M2 (HiF8 has one zero). */
double np_fp8_round(np_fp8_kind k, double x, int saturate);
/* The 8-bit code of np_fp8_round(k, x, saturate), and back. */
uint8_t np_fp8_encode(np_fp8_kind k, double x, int saturate);
double np_fp8_decode(np_fp8_kind k, uint8_t code);

/* Scaled quantization of GEMM operands. */
typedef enum np_lowp {
    NP_LOWP_NONE = 0,
    NP_LOWP_MXFP8,     /* E4M3 elements, one E8M0 scale per 32 along the reduction dim */
    NP_LOWP_HIF8,      /* HiF8 elements, one power-of-two scale per tensor */
    NP_LOWP_MXFP8_E5M2, /* E5M2 elements, one E8M0 scale 2^(floor(log2(amax)) - 15) per 32: the
                         * gradients' format of MX training (np_ctx_opts.lowp_grad_e5m2), not a
                         * run's format */
    NP_LOWP_COUNT
} np_lowp;

/* "none", "mxfp8", "hif8", "mxfp8_e5m2"; np_lowp_from_name returns -1 for others. */
const char *np_lowp_name(np_lowp f);
int np_lowp_from_name(const char *name);

#define NP_MX_BLOCK 32

/* What quantizing one tensor did, accumulated over calls of
 * np_lowp_quantize (zero it first): element counts, the squared error
 * against the input and the input's squared sum (float64), and the range
 * of the power-of-two scale exponents used (scale_lo > scale_hi: none). */
typedef struct np_lowp_stats {
    int64_t n;           /* elements */
    int64_t underflow;   /* non-zero inputs quantized to zero */
    int64_t saturated;   /* finite inputs whose scaled magnitude exceeded the largest finite value */
    double sq_err;       /* sum (q - x)^2 */
    double sq_ref;       /* sum x^2 */
    int scale_lo, scale_hi;
} np_lowp_stats;

void np_lowp_stats_init(np_lowp_stats *s);

/* Quantize src, viewed as (outer, K, inner) with K the reduction dimension,
 * into dst (dst == src allowed): MxFP8 blocks of NP_MX_BLOCK consecutive
 * elements along K (the last block of a row may be shorter), HiF8 one scale
 * for the whole tensor. The scale exponent is the format's (above), plus
 * scale_shift at encoding and plus dequant_shift at decoding (both 0 for
 * the format itself; the runtime's faults set them). st may be NULL. */
void np_lowp_quantize(float *dst, const float *src, int64_t outer, int64_t K, int64_t inner, np_lowp f,
                      int scale_shift, int dequant_shift, np_lowp_stats *st);

#ifdef __cplusplus
}
#endif
#endif
