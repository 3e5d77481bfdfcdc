/* common/lowp.c - float8 E4M3/E5M2, HiF8 and their scaled quantization
 * (MxFP8 blocks, HiF8 per tensor); definitions in nprobe/lowp.h and
 * docs/RUNTIME.md. Rounding is done in double on exact values (a float32
 * times a power of two), so no step rounds twice. */
#include <math.h>
#include <string.h>

#include "nprobe/lowp.h"

static const char *const fp8_names[] = {"e4m3", "e5m2", "hif8"};
_Static_assert(sizeof fp8_names / sizeof fp8_names[0] == NP_FP8_KIND_COUNT, "fp8_names");
static const char *const lowp_names[] = {"none", "mxfp8", "hif8"};
_Static_assert(sizeof lowp_names / sizeof lowp_names[0] == NP_LOWP_COUNT, "lowp_names");

const char *np_fp8_name(np_fp8_kind k)
{
    return (unsigned)k < NP_FP8_KIND_COUNT ? fp8_names[k] : "?";
}

const char *np_lowp_name(np_lowp f)
{
    return (unsigned)f < NP_LOWP_COUNT ? lowp_names[f] : "?";
}

int np_lowp_from_name(const char *name)
{
    for (int i = 0; name && i < NP_LOWP_COUNT; i++)
        if (!strcmp(name, lowp_names[i]))
            return i;
    return -1;
}

/* IEEE-like minifloats: mantissa bits, exponent bias, largest finite. */
typedef struct mini {
    int mbits, bias;
    double max;
    int has_inf;
} mini;

static const mini E4M3 = {3, 7, 448.0, 0};
static const mini E5M2 = {2, 15, 57344.0, 1};

#define HIF8_MAX 32768.0 /* 2^15: E = +15 with mantissa 1 encodes infinity */
#define HIF8_MIN 0x1p-22 /* the smallest denormal */

double np_fp8_max(np_fp8_kind k)
{
    return k == NP_FP8_E4M3 ? E4M3.max : k == NP_FP8_E5M2 ? E5M2.max : HIF8_MAX;
}

double np_fp8_min(np_fp8_kind k)
{
    return k == NP_FP8_E4M3 ? 0x1p-9 : k == NP_FP8_E5M2 ? 0x1p-16 : HIF8_MIN;
}

/* floor(log2(a)) for a finite a > 0. */
static int flog2(double a)
{
    int e;
    frexp(a, &e);
    return e - 1;
}

/* |x| rounded to nearest even on the minifloat's grid (no overflow check). */
static double mini_round_mag(const mini *m, double a)
{
    int emin = 1 - m->bias;
    int E = flog2(a);
    if (E < emin)
        E = emin; /* subnormal: the quantum of the smallest binade */
    double q = ldexp(1.0, E - m->mbits);
    return nearbyint(a / q) * q; /* a / q is exact; the default mode is to nearest even */
}

static double overflow(np_fp8_kind k, double x, int saturate)
{
    if (saturate)
        return copysign(np_fp8_max(k), x);
    return copysign(k == NP_FP8_E4M3 ? NAN : INFINITY, x);
}

/* HiF8: mantissa bits of the binade 2^E (|E| <= 15). */
static int hif8_mbits(int E)
{
    int a = E < 0 ? -E : E;
    return a <= 3 ? 3 : a <= 7 ? 2 : 1;
}

/* |x| rounded to nearest, ties away from zero, on HiF8's grid (a finite,
 * no overflow check: a result above HIF8_MAX means overflow). */
static double hif8_round_mag(double a)
{
    if (a == 0)
        return 0;
    int E = flog2(a);
    if (E >= -15) {
        if (E > 15)
            return INFINITY;
        double q = ldexp(1.0, E - hif8_mbits(E));
        return round(a / q) * q; /* round(): half away from zero */
    }
    /* denormals 2^-22 .. 2^-16 and the smallest normal 2^-15 are powers of two */
    if (E < -23)
        return 0;
    if (E == -23) /* between 0 and 2^-22: the midpoint is 2^-23 */
        return HIF8_MIN;
    return a >= 1.5 * ldexp(1.0, E) ? ldexp(1.0, E + 1) : ldexp(1.0, E);
}

double np_fp8_round(np_fp8_kind k, double x, int saturate)
{
    if (isnan(x))
        return x;
    double a = fabs(x);
    if (isinf(a))
        return overflow(k, x, saturate);
    if (a == 0)
        return k == NP_FP8_HIF8 ? 0.0 : x;
    double r = k == NP_FP8_HIF8 ? hif8_round_mag(a) : mini_round_mag(k == NP_FP8_E4M3 ? &E4M3 : &E5M2, a);
    if (r > np_fp8_max(k))
        return overflow(k, x, saturate);
    if (k == NP_FP8_HIF8 && r == 0)
        return 0.0;
    return copysign(r, x);
}

static uint8_t mini_encode(const mini *m, double r)
{
    uint8_t s = signbit(r) ? 0x80 : 0;
    int ebits = 7 - m->mbits;
    uint8_t all_e = (uint8_t)(((1 << ebits) - 1) << m->mbits);
    if (isnan(r))
        return (uint8_t)(s | 0x7F);
    if (isinf(r))
        return (uint8_t)(s | all_e);
    double a = fabs(r);
    int emin = 1 - m->bias;
    if (a < ldexp(1.0, emin))
        return (uint8_t)(s | (uint8_t)(a / ldexp(1.0, emin - m->mbits)));
    int E = flog2(a);
    int mant = (int)(ldexp(a, m->mbits - E)) - (1 << m->mbits);
    return (uint8_t)(s | (uint8_t)((E + m->bias) << m->mbits) | (uint8_t)mant);
}

static double mini_decode(const mini *m, uint8_t c)
{
    double sign = c & 0x80 ? -1.0 : 1.0;
    int ebits = 7 - m->mbits;
    int e = (c >> m->mbits) & ((1 << ebits) - 1);
    int mant = c & ((1 << m->mbits) - 1);
    if (e == (1 << ebits) - 1) {
        if (m->has_inf)
            return mant ? NAN : sign * INFINITY;
        if (mant == (1 << m->mbits) - 1)
            return NAN;
    }
    if (e == 0)
        return sign * ldexp(mant, 1 - m->bias - m->mbits);
    return sign * ldexp((1 << m->mbits) + mant, e - m->bias - m->mbits);
}

/* HiF8 bits: S | dot | exponent (D bits: sign, then |E| below its implicit
 * leading 1) | mantissa. Dot codes by D: 4 "11", 3 "10", 2 "01", 1 "001",
 * 0 "0001"; "0000" is the denormal mode with a 3-bit M: 2^(M-23), M = 0 is
 * zero (S = 0) or NaN (S = 1). */
static uint8_t hif8_encode(double r)
{
    if (isnan(r))
        return 0x80;
    uint8_t s = signbit(r) ? 0x80 : 0;
    if (isinf(r))
        return (uint8_t)(s | 0x6F); /* 11 0111 1: E = +15, mantissa 1 */
    double a = fabs(r);
    if (a == 0)
        return 0;
    int E = flog2(a);
    if (E < -15)
        return (uint8_t)(s | (E + 23)); /* denormal */
    int ae = E < 0 ? -E : E;
    int D = ae == 0 ? 0 : ae == 1 ? 1 : ae <= 3 ? 2 : ae <= 7 ? 3 : 4;
    static const uint8_t dot_code[5] = {0x1, 0x1, 0x1, 0x2, 0x3};
    static const int dot_len[5] = {4, 3, 2, 2, 2};
    int mb = 7 - dot_len[D] - D;
    int mant = (int)ldexp(a, mb - E) - (1 << mb);
    int ex = D ? ((E < 0) << (D - 1)) | (ae - (1 << (D - 1))) : 0;
    return (uint8_t)(s | (dot_code[D] << (7 - dot_len[D])) | (ex << mb) | mant);
}

static double hif8_decode(uint8_t c)
{
    double sign = c & 0x80 ? -1.0 : 1.0;
    int r = c & 0x7F;
    int D, len;
    if ((r >> 5) == 3)
        D = 4, len = 2;
    else if ((r >> 5) == 2)
        D = 3, len = 2;
    else if ((r >> 5) == 1)
        D = 2, len = 2;
    else if ((r >> 4) == 1)
        D = 1, len = 3;
    else if ((r >> 3) == 1)
        D = 0, len = 4;
    else { /* denormal */
        int M = r & 7;
        if (M == 0)
            return c & 0x80 ? NAN : 0.0;
        return sign * ldexp(1.0, M - 23);
    }
    int mb = 7 - len - D;
    int mant = r & ((1 << mb) - 1);
    int ex = (r >> mb) & ((1 << D) - 1);
    int E = 0;
    if (D) {
        int mag = (1 << (D - 1)) | (ex & ((1 << (D - 1)) - 1));
        E = ex >> (D - 1) ? -mag : mag;
    }
    if (E == 15 && mant == 1)
        return sign * INFINITY;
    return sign * ldexp((1 << mb) + mant, E - mb);
}

uint8_t np_fp8_encode(np_fp8_kind k, double x, int saturate)
{
    double r = np_fp8_round(k, x, saturate);
    if (k == NP_FP8_HIF8)
        return hif8_encode(r);
    return mini_encode(k == NP_FP8_E4M3 ? &E4M3 : &E5M2, r);
}

double np_fp8_decode(np_fp8_kind k, uint8_t code)
{
    if (k == NP_FP8_HIF8)
        return hif8_decode(code);
    return mini_decode(k == NP_FP8_E4M3 ? &E4M3 : &E5M2, code);
}

/* ---- scaled quantization ----------------------------------------------- */
void np_lowp_stats_init(np_lowp_stats *s)
{
    memset(s, 0, sizeof *s);
    s->scale_lo = 1 << 30;
    s->scale_hi = -(1 << 30);
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

void np_lowp_quantize(float *dst, const float *src, int64_t outer, int64_t K, int64_t inner, np_lowp f,
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
    if (f != NP_LOWP_MXFP8) {
        if (dst != src)
            memcpy(dst, src, (size_t)(outer * K * inner) * sizeof *dst);
        return;
    }
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
                /* OCP MX: shared exponent floor(log2(amax)) - emax of E4M3 (8) */
                int se = amax > 0 && !bad ? clamp_e8m0(flog2(amax) - 8 + scale_shift) : -127;
                if (amax > 0 && !bad)
                    note_scale(st, se);
                quant_run(dst, src, base, inner, n, NP_FP8_E4M3, se, dequant_shift, bad, st);
            }
}
