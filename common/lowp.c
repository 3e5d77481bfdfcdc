/* common/lowp.c - float8 E4M3/E5M2, HiF8 and their scaled quantization
 * (MxFP8 blocks, HiF8 per tensor); definitions in nprobe/lowp.h and
 * docs/RUNTIME.md. Rounding is done in double on exact values (a float32
 * times a power of two), so no step rounds twice. */
#include <math.h>
#include <string.h>

#include "nprobe/lowp.h"

static const char *const fp8_names[] = {"e4m3", "e5m2", "hif8"};
_Static_assert(sizeof fp8_names / sizeof fp8_names[0] == NP_FP8_KIND_COUNT, "fp8_names");
static const char *const lowp_names[] = {"none", "mxfp8", "hif8", "mxfp8_e5m2"};
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

/* The quantizer works a block of QB float32 values at a time, copied into
 * local arrays (a short MX block, the tail of a HiF8 tensor and a strided K
 * padded with zeros, which add nothing to the statistics), in loops of a
 * fixed trip count with no libm call and no branch, which gcc vectorizes at
 * -O2 (below: for AVX2 and AVX-512). Each element is the scalar np_fp8_round's result, bit for bit
 * (test_rt_lowp keeps the scalar code as its reference), by exact double
 * arithmetic: v = x * 2^-se is exact; b = 2^floor(log2|v|) is |v|'s
 * exponent bits; the quantum q of v's binade is a power of two derived from
 * b by comparisons; C = q * 2^52 makes (|v| + C) - C the nearest multiple
 * of q, ties to even (the default rounding mode, as nearbyint), since
 * |v| < C; HiF8 turns the ties it rounded down into ties away from zero
 * (|v| - r == q/2 exactly); magnitudes above the format's largest value
 * saturate to it. The squared-error sums are kept in QLANES fixed lanes
 * (element j in lane j % QLANES) added in one fixed order at the end, so
 * they do not depend on the vector width. */
#define QB NP_MX_BLOCK
#define QLANES 8
/* gcc 12 vectorizes the block loop for AVX2 and AVX-512 but not for
 * baseline x86-64 (SSE2 lacks the 64-bit masks its comparisons need): the
 * block kernels are compiled three times and chosen at load time (ifunc),
 * the same bits in each (no contraction, no reassociation). */
#ifndef LOWP_CLONES /* -DLOWP_CLONES= builds one version (tests/runtime/test_lowp_quant.c's check) */
#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define LOWP_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#endif
#ifndef LOWP_CLONES
#define LOWP_CLONES
#endif
_Static_assert(QB % QLANES == 0, "QB");

typedef struct qacc {
    int64_t n, under, sat;
    double err[QLANES], ref[QLANES];
} qacc;

/* the kernel's helpers inlined in each clone, or the loop has a call */
#define QINLINE static inline __attribute__((always_inline))
#define EXP_BITS 0x7ff0000000000000ull
#define SIGN_BIT 0x8000000000000000ull

QINLINE double bits_d(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

QINLINE uint64_t d_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

/* c ? x : y by masks: a ?: here lets gcc move the arithmetic of an arm
 * into a branch, which it then neither if-converts nor vectorizes (a
 * floating-point operation may trap). */
QINLINE double sel(int c, double x, double y)
{
    uint64_t m = (uint64_t)0 - (uint64_t)(c != 0);
    return bits_d((d_bits(x) & m) | (d_bits(y) & ~m));
}

/* |v| rounded to nearest even on a float8 grid whose smallest binade is
 * min_b (its subnormals share that binade's quantum), with the quantum
 * q_of_b of a binade b (2^-mantissa bits), saturating at max. */
QINLINE double fp8_mag(double a, double min_b, double q_of_b, double max)
{
    double b = bits_d(d_bits(a) & EXP_BITS);
    b = sel(b > min_b, b, min_b);
    double q = b * q_of_b;
    double C = q * 0x1p52;
    double r = (a + C) - C;
    return sel(a > max, max, r);
}

/* |v| on E4M3's grid (3 mantissa bits, normals from 2^-6), saturating at 448. */
QINLINE double e4m3_mag(double a)
{
    return fp8_mag(a, 0x1p-6, 0x1p-3, 448.0);
}

/* |v| on E5M2's grid (2 mantissa bits, normals from 2^-14), saturating at 57344. */
QINLINE double e5m2_mag(double a)
{
    return fp8_mag(a, 0x1p-14, 0x1p-2, 57344.0);
}

/* |v| rounded to nearest, ties away, on HiF8's grid, saturating at 2^15. */
QINLINE double hif8_mag(double a)
{
    double b = bits_d(d_bits(a) & EXP_BITS);
    b = sel(b > 0x1p-22, b, 0x1p-22); /* denormals' quantum is their binade; below 2^-22 only 0 and 2^-22 */
    double m = sel(b >= 0x1p-15, 0x1p-1, 1.0); /* 2^-(mantissa bits) of b's binade */
    m = sel((b >= 0x1p-7) & (b <= 0x1p7), 0x1p-2, m);
    m = sel((b >= 0x1p-3) & (b <= 0x1p3), 0x1p-3, m);
    double q = b * m;
    double C = q * 0x1p52;
    double r = (a + C) - C;
    r = r + sel(a - r == 0.5 * q, q, 0.0); /* a tie rounded down goes up: ties away */
    return sel(a > HIF8_MAX, HIF8_MAX, r);
}

/* out = fmt(in * 2^-se) * 2^(se+dq) as float32 (down = 2^-se, up =
 * 2^(se+dq)), its statistics into acc. mx: 1 E4M3, 2 E5M2 (both keep the
 * zero's sign), 0 HiF8 (one zero, +0). */
QINLINE void quant_block(float *restrict out, const float *restrict in, double down,
                                                               double up, int mx, qacc *acc)
{
    double e2[QB], x2[QB];
    int under = 0, sat = 0;
    double mxv = mx == 1 ? 448.0 : mx == 2 ? 57344.0 : HIF8_MAX;
    for (int j = 0; j < QB; j++) {
        double x = in[j];
        double v = x * down;
        uint64_t vb = d_bits(v);
        double a = bits_d(vb & ~SIGN_BIT);
        double r = mx == 1 ? e4m3_mag(a) : mx == 2 ? e5m2_mag(a) : hif8_mag(a);
        double qs = bits_d(d_bits(r) | (vb & SIGN_BIT));
        if (!mx)
            qs = qs + 0.0; /* HiF8's zero is +0 */
        float qf = (float)(qs * up);
        out[j] = qf;
        double qd = qf; /* every comparison on doubles: one mask width */
        sat += (a > mxv) & (a <= 0x1p1023);
        under += (x != 0) & (qd == 0);
        int ok = (fabs(x) <= 0x1.fffffep127) & (fabs(qd) <= 0x1.fffffep127);
        uint64_t keep = (uint64_t)0 - (uint64_t)ok; /* all ones or zero */
        double d = qd - x;
        e2[j] = bits_d(d_bits(d * d) & keep);
        x2[j] = bits_d(d_bits(x * x) & keep);
    }
    for (int j0 = 0; j0 < QB; j0 += QLANES)
        for (int l = 0; l < QLANES; l++) {
            acc->err[l] += e2[j0 + l];
            acc->ref[l] += x2[j0 + l];
        }
    acc->under += under;
    acc->sat += sat;
}

/* The largest |x| of n floats as float32 bits (non-finite values are the
 * largest: 0x7f800000 and above). */
static uint32_t amax_bits(const float *x, int64_t n)
{
    uint32_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        u &= 0x7fffffffu;
        m = u > m ? u : m;
    }
    return m;
}

/* floor(log2) of a positive finite float32 given by its bits. */
static int flog2_bits(uint32_t u)
{
    int e = (int)(u >> 23);
    return e ? e - 127 : 31 - __builtin_clz(u) - 149;
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

/* 2^e */
static double pow2i(int e)
{
    return e >= -1022 && e <= 1023 ? bits_d((uint64_t)(e + 1023) << 52) : ldexp(1.0, e);
}

/* blk = src[base + j * stride] for j < n <= QB, zeros after. */
static void gather(float *blk, const float *src, int64_t base, int64_t stride, int64_t n)
{
    if (n == QB && stride == 1) {
        memcpy(blk, src + base, sizeof(float) * QB);
        return;
    }
    for (int64_t j = 0; j < QB; j++)
        blk[j] = j < n ? src[base + j * stride] : 0.0f;
}

/* blk (gathered from dst's positions base + j * stride, j < n) quantized
 * with scale exponent se into dst. */
LOWP_CLONES static void quant_block_mx(float *restrict out, const float *restrict in, double down, double up, qacc *acc)
{
    quant_block(out, in, down, up, 1, acc);
}

LOWP_CLONES static void quant_block_mx5(float *restrict out, const float *restrict in, double down, double up, qacc *acc)
{
    quant_block(out, in, down, up, 2, acc);
}

LOWP_CLONES static void quant_block_hif8(float *restrict out, const float *restrict in, double down, double up, qacc *acc)
{
    quant_block(out, in, down, up, 0, acc);
}

static void quant_run(float *dst, const float *blk, int64_t base, int64_t stride, int64_t n, int se, int dq,
                      int mx, qacc *acc)
{
    float out[QB];
    double down = pow2i(-se), up = pow2i(se + dq);
    if (mx == 2)
        quant_block_mx5(out, blk, down, up, acc);
    else if (mx)
        quant_block_mx(out, blk, down, up, acc);
    else
        quant_block_hif8(out, blk, down, up, acc);
    if (n == QB && stride == 1)
        memcpy(dst + base, out, sizeof out);
    else
        for (int64_t j = 0; j < n; j++)
            dst[base + j * stride] = out[j];
    acc->n += n;
}

static void add_stats(np_lowp_stats *st, qacc *acc)
{
    if (!st)
        return;
    st->n += acc->n;
    st->underflow += acc->under;
    st->saturated += acc->sat;
    for (int s = 1; s < QLANES; s *= 2) /* pairwise: ((0+1)+(2+3))+((4+5)+(6+7)) */
        for (int l = 0; l + s < QLANES; l += 2 * s) {
            acc->err[l] += acc->err[l + s];
            acc->ref[l] += acc->ref[l + s];
        }
    st->sq_err += acc->err[0];
    st->sq_ref += acc->ref[0];
}

void np_lowp_quantize(float *dst, const float *src, int64_t outer, int64_t K, int64_t inner, np_lowp f,
                      int scale_shift, int dequant_shift, np_lowp_stats *st)
{
    int64_t total = outer * K * inner;
    if (f != NP_LOWP_MXFP8 && f != NP_LOWP_HIF8 && f != NP_LOWP_MXFP8_E5M2) {
        if (dst != src)
            memcpy(dst, src, (size_t)total * sizeof *dst);
        return;
    }
    qacc acc;
    memset(&acc, 0, sizeof acc);
    if (f == NP_LOWP_HIF8) {
        uint32_t m = 0;
        float blk[QB];
        for (int64_t i = 0; i < total; i += QB) { /* the largest finite magnitude */
            gather(blk, src, i, 1, total - i < QB ? total - i : QB);
            for (int j = 0; j < QB; j++) {
                uint32_t u;
                memcpy(&u, &blk[j], sizeof u);
                u &= 0x7fffffffu;
                u = u < 0x7f800000u ? u : 0;
                m = u > m ? u : m;
            }
        }
        /* the largest magnitude lands in [2^3, 2^4), the top binade with a 3-bit mantissa */
        int se = m ? clamp_e8m0(flog2_bits(m) - 3 + scale_shift) : 0;
        if (m)
            note_scale(st, se);
        for (int64_t i = 0; i < total; i += QB) {
            int64_t n = total - i < QB ? total - i : QB;
            gather(blk, src, i, 1, n);
            quant_run(dst, blk, i, 1, n, se, dequant_shift, 0, &acc);
        }
        add_stats(st, &acc);
        return;
    }
    int e5 = f == NP_LOWP_MXFP8_E5M2, emax = e5 ? 15 : 8, kind = e5 ? 2 : 1;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t in = 0; in < inner; in++)
            for (int64_t k0 = 0; k0 < K; k0 += QB) {
                int64_t n = K - k0 < QB ? K - k0 : QB;
                int64_t base = (o * K + k0) * inner + in;
                float blk[QB];
                gather(blk, src, base, inner, n);
                uint32_t m = amax_bits(blk, QB);
                if (m >= 0x7f800000u) { /* an infinity or NaN: the block's scale is NaN */
                    for (int64_t j = 0; j < n; j++)
                        dst[base + j * inner] = NAN;
                    acc.n += n;
                    continue;
                }
                /* OCP MX: shared exponent floor(log2(amax)) - emax of the elements (E4M3 8, E5M2 15) */
                int se = m ? clamp_e8m0(flog2_bits(m) - emax + scale_shift) : -127;
                if (m)
                    note_scale(st, se);
                quant_run(dst, blk, base, inner, n, se, dequant_shift, kind, &acc);
            }
    add_stats(st, &acc);
}
