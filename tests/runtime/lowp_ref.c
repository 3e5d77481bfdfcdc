/* tests/runtime/lowp_ref.c - the scalar quantizer that common/lowp.c used
 * before its block kernels (double arithmetic per element through frexp,
 * ldexp and np_fp8_round), kept as the reference the vectorized
 * np_lowp_quantize must equal bit for bit (test_lowp_quant) and as the
 * "before" of scripts/bench/bench_lowp.sh. */
#include <math.h>
#include <string.h>

#include "lowp_ref.h"

static int flog2(double a)
{
    int e;
    frexp(a, &e);
    return e - 1;
}

static int clamp_e8m0(int e)
{
    return e < -127 ? -127 : e > 127 ? 127 : e;
}

/* Elements idx(j) = base + j * stride, j < n, scaled by 2^-se, rounded to
 * fmt (saturating), scaled back by 2^(se + dq). nan_all: the block holds a
 * non-finite value (MX: the whole block becomes NaN). */
static void quant_run(float *dst, const float *src, int64_t base, int64_t stride, int64_t n, np_fp8_kind k,
                      int se, int dq, int nan_all, np_lowp_stats *st)
{
    double mx = np_fp8_max(k);
    for (int64_t j = 0; j < n; j++) {
        int64_t i = base + j * stride;
        double x = src[i];
        double q;
        if (nan_all) {
            q = NAN;
        } else {
            double v = ldexp(x, -se);
            if (st && isfinite(v) && fabs(v) > mx)
                st->saturated++;
            q = ldexp(np_fp8_round(k, v, 1), se + dq);
        }
        float qf = (float)q;
        if (st) {
            st->n++;
            if (x != 0 && qf == 0)
                st->underflow++;
            if (isfinite(x) && isfinite(qf)) {
                double d = (double)qf - x;
                st->sq_err += d * d;
                st->sq_ref += x * x;
            }
        }
        dst[i] = qf;
    }
}

static void note_scale(np_lowp_stats *st, int se)
{
    if (!st)
        return;
    if (se < st->scale_lo)
        st->scale_lo = se;
    if (se > st->scale_hi)
        st->scale_hi = se;
}

void ref_lowp_quantize(float *dst, const float *src, int64_t outer, int64_t K, int64_t inner, np_lowp f,
                       int scale_shift, int dequant_shift, np_lowp_stats *st)
{
    if (f == NP_LOWP_HIF8) {
        int64_t n = outer * K * inner;
        double amax = 0;
        for (int64_t i = 0; i < n; i++)
            if (isfinite(src[i]) && fabs(src[i]) > amax)
                amax = fabs(src[i]);
        /* the largest magnitude lands in [2^3, 2^4), the top binade with a 3-bit mantissa */
        int se = amax > 0 ? clamp_e8m0(flog2(amax) - 3 + scale_shift) : 0;
        if (amax > 0)
            note_scale(st, se);
        quant_run(dst, src, 0, 1, n, NP_FP8_HIF8, se, dequant_shift, 0, st);
        return;
    }
    if (f != NP_LOWP_MXFP8 && f != NP_LOWP_MXFP8_E5M2) {
        if (dst != src)
            memcpy(dst, src, (size_t)(outer * K * inner) * sizeof *dst);
        return;
    }
    np_fp8_kind kind = f == NP_LOWP_MXFP8_E5M2 ? NP_FP8_E5M2 : NP_FP8_E4M3;
    int emax = f == NP_LOWP_MXFP8_E5M2 ? 15 : 8;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t in = 0; in < inner; in++)
            for (int64_t k0 = 0; k0 < K; k0 += NP_MX_BLOCK) {
                int64_t n = K - k0 < NP_MX_BLOCK ? K - k0 : NP_MX_BLOCK;
                int64_t base = (o * K + k0) * inner + in;
                double amax = 0;
                int bad = 0;
                for (int64_t j = 0; j < n; j++) {
                    double a = fabs(src[base + j * inner]);
                    bad |= !isfinite(a);
                    if (a > amax)
                        amax = a;
                }
                /* OCP MX: shared exponent floor(log2(amax)) - emax of the elements (E4M3 8, E5M2 15) */
                int se = amax > 0 && !bad ? clamp_e8m0(flog2(amax) - emax + scale_shift) : -127;
                if (amax > 0 && !bad)
                    note_scale(st, se);
                quant_run(dst, src, base, inner, n, kind, se, dequant_shift, bad, st);
            }
}
