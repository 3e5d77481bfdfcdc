/* tests/runtime/test_rt_lowp.c - the float8 formats (E4M3, E5M2, HiF8) and
 * their scaled quantization (MxFP8, HiF8 per tensor) against this file's own
 * float64 computations:
 *  - all 256 codes of each format decoded here from the bit fields (HiF8
 *    from the bit string and the paper's prefix table) equal the library's
 *    decode, re-encode to themselves and round to themselves;
 *  - every midpoint between neighbouring values rounds by the format's tie
 *    rule (E4M3/E5M2: to the even code; HiF8: away from zero), and a hair
 *    below/above it to the nearer neighbour;
 *  - HiF8's shape (7 binades with a 3-bit mantissa, 8 with 2, 16 with 1, 7
 *    denormal binades, 126 positive finite values), extremes and overflow;
 *  - np_lowp_quantize against a nearest-value search over the decoded
 *    table with the OCP MX shared exponent (blocks of 32 along a strided K,
 *    a partial last block), and its statistics (underflow, saturation,
 *    squared error, scale range) recomputed in float64; the same for MX
 *    blocks of E5M2 elements (the gradients' format, emax 15);
 *  - a linear op of a context with lowp on equals the float64 product of
 *    the quantized operands, and its fault shifts act; a conv2d equals the
 *    float64 convolution of x and w quantized in blocks along C;
 *  - linear's quantized backward (lowp_backward) by hand and against the
 *    float64 GEMMs of operands quantized along each GEMM's reduction dim,
 *    with E4M3, HiF8 and E5M2 gradients (lowp_backward 2). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "nprobe/lowp.h"
#include "nprobe/precision.h"
#include "nprobe/runtime.h"

/* ---- independent decoders ---------------------------------------------- */
static double ieee8(uint8_t c, int mb, int bias, int has_inf)
{
    int s = c >> 7, e = (c >> mb) & ((1 << (7 - mb)) - 1), m = c & ((1 << mb) - 1);
    int emax_field = (1 << (7 - mb)) - 1;
    double v;
    if (has_inf && e == emax_field)
        v = m ? NAN : INFINITY;
    else if (!has_inf && e == emax_field && m == (1 << mb) - 1)
        v = NAN;
    else if (e == 0)
        v = m * pow(2.0, 1 - bias - mb);
    else
        v = (1.0 + m / pow(2.0, mb)) * pow(2.0, e - bias);
    return s ? -v : v;
}

/* HiF8 from the bit string: the dot prefixes 11, 10, 01, 001, 0001 give
 * D = 4, 3, 2, 1, 0 exponent bits; 0000 the denormal mode. */
static double hif8_ref(uint8_t c)
{
    char b[9];
    for (int i = 0; i < 8; i++)
        b[i] = (char)('0' + ((c >> (7 - i)) & 1));
    b[8] = 0;
    double sign = b[0] == '1' ? -1 : 1;
    static const char *dots[] = {"11", "10", "01", "001", "0001"};
    static const int Ds[] = {4, 3, 2, 1, 0};
    for (int k = 0; k < 5; k++) {
        size_t L = strlen(dots[k]);
        if (strncmp(b + 1, dots[k], L))
            continue;
        int D = Ds[k];
        const char *p = b + 1 + L;
        int E = 0;
        if (D > 0) {
            int mag = 1;
            for (int i = 1; i < D; i++)
                mag = mag * 2 + (p[i] - '0');
            E = p[0] == '1' ? -mag : mag;
        }
        p += D;
        double frac = 1.0, w = 0.5;
        int mbits = 0, mval = 0;
        for (; *p; p++, w /= 2, mbits++) {
            frac += (*p - '0') * w;
            mval = mval * 2 + (*p - '0');
        }
        if (E == 15 && mval == 1 && mbits == 1)
            return sign * INFINITY;
        return sign * frac * pow(2.0, E);
    }
    int M = (b[5] - '0') * 4 + (b[6] - '0') * 2 + (b[7] - '0');
    if (M == 0)
        return sign < 0 ? NAN : 0.0;
    return sign * pow(2.0, M - 23);
}

static double ref_decode(np_fp8_kind k, uint8_t c)
{
    if (k == NP_FP8_E4M3)
        return ieee8(c, 3, 7, 0);
    if (k == NP_FP8_E5M2)
        return ieee8(c, 2, 15, 1);
    return hif8_ref(c);
}

/* the finite values >= 0 of a format, sorted, distinct; codes alongside */
typedef struct table {
    double v[256];
    uint8_t code[256];
    int n;
} table;

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void build(table *t, np_fp8_kind k)
{
    double tmp[256];
    int n = 0;
    for (int c = 0; c < 256; c++) {
        double v = ref_decode(k, (uint8_t)c);
        if (isfinite(v) && v >= 0 && !(v == 0 && signbit(v)))
            tmp[n++] = v;
    }
    qsort(tmp, (size_t)n, sizeof tmp[0], cmp_d);
    t->n = 0;
    for (int i = 0; i < n; i++)
        if (i == 0 || tmp[i] != tmp[i - 1])
            t->v[t->n++] = tmp[i];
    for (int i = 0; i < t->n; i++)
        for (int c = 0; c < 128; c++)
            if (ref_decode(k, (uint8_t)c) == t->v[i] && !signbit(ref_decode(k, (uint8_t)c)))
                t->code[i] = (uint8_t)c;
}

/* nearest table value to |x| by search, the format's tie rule, saturating */
static double ref_round_sat(const table *t, np_fp8_kind k, double x)
{
    double a = fabs(x);
    if (a >= t->v[t->n - 1])
        return copysign(t->v[t->n - 1], x);
    int i = 0;
    while (t->v[i + 1] <= a)
        i++;
    double lo = t->v[i], hi = t->v[i + 1], r;
    if (a - lo < hi - a)
        r = lo;
    else if (a - lo > hi - a)
        r = hi;
    else if (k == NP_FP8_HIF8)
        r = hi; /* ties away */
    else
        r = (t->code[i] & 1) ? hi : lo; /* ties to even */
    if (k == NP_FP8_HIF8 && r == 0)
        return 0.0;
    return copysign(r, x);
}

static void check_codes(np_fp8_kind k)
{
    int bad = 0;
    for (int c = 0; c < 256; c++) {
        double want = ref_decode(k, (uint8_t)c), got = np_fp8_decode(k, (uint8_t)c);
        int same = (isnan(want) && isnan(got)) || (want == got && signbit(want) == signbit(got));
        if (!same) {
            if (bad++ < 5)
                fprintf(stderr, "%s code 0x%02x: decode %.17g, want %.17g\n", np_fp8_name(k), c, got, want);
            continue;
        }
        if (isnan(want))
            continue;
        if (np_fp8_encode(k, want, 0) != c && bad++ < 5)
            fprintf(stderr, "%s code 0x%02x: re-encoded 0x%02x\n", np_fp8_name(k), c,
                    np_fp8_encode(k, want, 0));
        if (np_fp8_round(k, want, 0) != want && bad++ < 5)
            fprintf(stderr, "%s code 0x%02x: %.17g does not round to itself\n", np_fp8_name(k), c, want);
    }
    CHECK_MSG(bad == 0, "%s: %d codes wrong", np_fp8_name(k), bad);
}

static void check_midpoints(np_fp8_kind k, const table *t)
{
    int bad = 0;
    for (int i = 0; i + 1 < t->n; i++) {
        double lo = t->v[i], hi = t->v[i + 1], m = (lo + hi) / 2;
        double tie = k == NP_FP8_HIF8 ? hi : (t->code[i] & 1) ? hi : lo;
        double eps = (hi - lo) * 0x1p-20;
        double got[3] = {np_fp8_round(k, m, 0), np_fp8_round(k, m - eps, 0), np_fp8_round(k, m + eps, 0)};
        double want[3] = {tie, lo, hi};
        for (int j = 0; j < 3; j++) {
            if (got[j] != want[j] && bad++ < 5)
                fprintf(stderr, "%s: round(%.17g) = %.17g, want %.17g\n", np_fp8_name(k),
                        j == 0 ? m : j == 1 ? m - eps : m + eps, got[j], want[j]);
            /* the negative side mirrors it */
            double gn = np_fp8_round(k, -(j == 0 ? m : j == 1 ? m - eps : m + eps), 0);
            if (want[j] != 0 && gn != -want[j] && bad++ < 5)
                fprintf(stderr, "%s: negative mirror of %.17g gives %.17g\n", np_fp8_name(k), want[j], gn);
        }
    }
    CHECK_MSG(bad == 0, "%s: %d midpoint roundings wrong", np_fp8_name(k), bad);
}

static void check_hif8_shape(const table *t)
{
    /* count mantissa widths per binade: values in [2^E, 2^(E+1)) */
    int by_bits[4] = {0}, denormal_binades = 0;
    for (int E = -22; E <= 15; E++) {
        int cnt = 0;
        for (int i = 0; i < t->n; i++)
            if (t->v[i] >= ldexp(1, E) && t->v[i] < ldexp(1, E + 1))
                cnt++;
        if (E < -15)
            denormal_binades += cnt == 1;
        else if (E == 15)
            CHECK_EQ_INT(cnt, 1); /* 2^15; 1.5 * 2^15 encodes infinity */
        else if (cnt == 8)
            by_bits[3]++;
        else if (cnt == 4)
            by_bits[2]++;
        else if (cnt == 2)
            by_bits[1]++;
    }
    CHECK_EQ_INT(by_bits[3], 7);
    CHECK_EQ_INT(by_bits[2], 8);
    CHECK_EQ_INT(by_bits[1] + 1, 16); /* + the binade 2^15 counted above */
    CHECK_EQ_INT(denormal_binades, 7);
    CHECK_EQ_INT(t->n, 127); /* 126 positive values and zero */
    CHECK_CLOSE(np_fp8_max(NP_FP8_HIF8), 32768.0, 0, 0);
    CHECK_CLOSE(np_fp8_min(NP_FP8_HIF8), ldexp(1, -22), 0, 0);
    CHECK_CLOSE(t->v[t->n - 1], 32768.0, 0, 0);
    CHECK_CLOSE(t->v[1], ldexp(1, -22), 0, 0);
    /* one zero, one NaN */
    int zeros = 0, nans = 0;
    for (int c = 0; c < 256; c++) {
        double v = ref_decode(NP_FP8_HIF8, (uint8_t)c);
        zeros += v == 0;
        nans += isnan(v) != 0;
    }
    CHECK_EQ_INT(zeros, 1);
    CHECK_EQ_INT(nans, 1);
    /* overflow: TA midpoint between 2^15 and the infinity code 1.5 * 2^15 */
    CHECK(isinf(np_fp8_round(NP_FP8_HIF8, 40960.0, 0)));
    CHECK_CLOSE(np_fp8_round(NP_FP8_HIF8, 40959.0, 0), 32768.0, 0, 0);
    CHECK_CLOSE(np_fp8_round(NP_FP8_HIF8, 1e30, 1), 32768.0, 0, 0);
    CHECK_CLOSE(np_fp8_round(NP_FP8_HIF8, -1e30, 1), -32768.0, 0, 0);
    /* underflow: half the smallest denormal rounds up (ties away), below it to 0 */
    CHECK_CLOSE(np_fp8_round(NP_FP8_HIF8, ldexp(1, -23), 0), ldexp(1, -22), 0, 0);
    CHECK_CLOSE(np_fp8_round(NP_FP8_HIF8, ldexp(0.99, -23), 0), 0.0, 0, 0);
    CHECK(!signbit(np_fp8_round(NP_FP8_HIF8, -1e-30, 0)));
}

static void check_ieee_extremes(void)
{
    CHECK_CLOSE(np_fp8_max(NP_FP8_E4M3), 448.0, 0, 0);
    CHECK_CLOSE(np_fp8_max(NP_FP8_E5M2), 57344.0, 0, 0);
    CHECK_CLOSE(np_fp8_round(NP_FP8_E4M3, 463.99, 0), 448.0, 0, 0);
    CHECK_CLOSE(np_fp8_round(NP_FP8_E4M3, 464.0, 0), 448.0, 0, 0); /* the tie goes to the even 1.110 */
    CHECK(isnan(np_fp8_round(NP_FP8_E4M3, 464.01, 0)));  /* nearer 480, the NaN code */
    CHECK(isnan(np_fp8_round(NP_FP8_E4M3, INFINITY, 0)));
    CHECK_CLOSE(np_fp8_round(NP_FP8_E4M3, 1e9, 1), 448.0, 0, 0);
    CHECK_CLOSE(np_fp8_round(NP_FP8_E4M3, -INFINITY, 1), -448.0, 0, 0);
    CHECK_CLOSE(np_fp8_round(NP_FP8_E5M2, 61439.0, 0), 57344.0, 0, 0);
    CHECK(isinf(np_fp8_round(NP_FP8_E5M2, 61440.0, 0)));
    CHECK_CLOSE(np_fp8_round(NP_FP8_E5M2, 1e9, 1), 57344.0, 0, 0);
    CHECK_CLOSE(np_fp8_round(NP_FP8_E4M3, ldexp(1, -10), 0), 0.0, 0, 0);  /* tie to the even 0 */
    CHECK(signbit(np_fp8_round(NP_FP8_E4M3, -ldexp(1, -11), 0)));          /* -0 kept */
    CHECK_EQ_INT(np_fp8_encode(NP_FP8_E4M3, 448.0, 0), 0x7E);
    CHECK_EQ_INT(np_fp8_encode(NP_FP8_E5M2, INFINITY, 0), 0x7C);
    CHECK_EQ_INT(np_fp8_encode(NP_FP8_HIF8, INFINITY, 0), 0x6F);
    CHECK_EQ_INT(np_fp8_encode(NP_FP8_HIF8, 1.0, 0), 0x08);
}

/* ---- scaled quantization ------------------------------------------------ */
static uint64_t rng = 88172645463325252ull;
static double urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) * 0x1p-53;
}

typedef struct ref_stats {
    int64_t n, under, sat;
    double sq_err, sq_ref;
    int lo, hi;
} ref_stats;

/* element j of (outer, K, inner) quantized with scale exponent se */
static void ref_elem(const table *t, np_fp8_kind k, const float *src, float *dst, int64_t i, int se,
                     ref_stats *rs)
{
    double x = src[i], v = x / pow(2.0, se);
    if (fabs(v) > t->v[t->n - 1])
        rs->sat++;
    float q = (float)(ref_round_sat(t, k, v) * pow(2.0, se));
    rs->n++;
    rs->under += x != 0 && q == 0;
    rs->sq_err += ((double)q - x) * ((double)q - x);
    rs->sq_ref += x * x;
    dst[i] = q;
}

static void note(ref_stats *rs, int se)
{
    if (se < rs->lo)
        rs->lo = se;
    if (se > rs->hi)
        rs->hi = se;
}

/* the test's own quantizer: src (OUTER, K, INNER) into want, MX blocks of
 * 32 along K with the OCP scale (E4M3 elements, or E5M2 for
 * NP_LOWP_MXFP8_E5M2: emax 15), HiF8 one scale per tensor; t is the
 * elements' table */
static void ref_quantize(const table *t, np_lowp f, const float *src, float *want, int OUTER, int K, int INNER,
                         int shift, ref_stats *rs)
{
    int e5 = f == NP_LOWP_MXFP8_E5M2;
    np_fp8_kind k = f == NP_LOWP_MXFP8 ? NP_FP8_E4M3 : e5 ? NP_FP8_E5M2 : NP_FP8_HIF8;
    if (f != NP_LOWP_HIF8) {
        for (int o = 0; o < OUTER; o++)
            for (int in = 0; in < INNER; in++)
                for (int k0 = 0; k0 < K; k0 += 32) {
                    double amax = 0;
                    int n = K - k0 < 32 ? K - k0 : 32;
                    for (int j = 0; j < n; j++)
                        amax = fmax(amax, fabs(src[(o * K + k0 + j) * INNER + in]));
                    int se = amax > 0 ? (int)floor(log2(amax)) - (e5 ? 15 : 8) + shift : -127;
                    if (amax > 0)
                        note(rs, se);
                    for (int j = 0; j < n; j++)
                        ref_elem(t, k, src, want, (o * K + k0 + j) * INNER + in, se, rs);
                }
    } else {
        int N = OUTER * K * INNER;
        double amax = 0;
        for (int i = 0; i < N; i++)
            amax = fmax(amax, fabs(src[i]));
        int se = (int)floor(log2(amax)) - 3 + shift;
        note(rs, se);
        for (int i = 0; i < N; i++)
            ref_elem(t, k, src, want, i, se, rs);
    }
}

static void check_quantize(np_lowp f, const table *t, int shift)
{
    enum { OUTER = 3, K = 70, INNER = 5, N = OUTER * K * INNER };
    float src[N], got[N], want[N];
    for (int i = 0; i < N; i++) /* magnitudes over 2^-30 .. 2^10, some zeros */
        src[i] = i % 17 == 0 ? 0.0f : (float)((urand() - 0.5) * pow(2.0, -30 + 40 * urand()));
    src[7] = 3.0e4f; /* a block whose others underflow */
    ref_stats rs = {0, 0, 0, 0, 0, 1000, -1000};
    ref_quantize(t, f, src, want, OUTER, K, INNER, shift, &rs);
    np_lowp_stats st;
    np_lowp_stats_init(&st);
    np_lowp_quantize(got, src, OUTER, K, INNER, f, shift, 0, &st);
    int bad = 0;
    for (int i = 0; i < N; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) && bad++ < 5)
            fprintf(stderr, "%s shift %d: element %d of %.9g: %.9g, want %.9g\n", np_lowp_name(f), shift, i,
                    src[i], got[i], want[i]);
    CHECK_MSG(bad == 0, "%s shift %d: %d elements differ", np_lowp_name(f), shift, bad);
    CHECK_EQ_INT(st.n, rs.n);
    CHECK_EQ_INT(st.underflow, rs.under);
    CHECK_EQ_INT(st.saturated, rs.sat);
    CHECK_CLOSE(st.sq_err, rs.sq_err, 0, 1e-12);
    CHECK_CLOSE(st.sq_ref, rs.sq_ref, 0, 1e-12);
    CHECK_EQ_INT(st.scale_lo, rs.lo);
    CHECK_EQ_INT(st.scale_hi, rs.hi);
    CHECK(rs.under > 0); /* the data reach both ends */
    if (shift < 0)
        CHECK(rs.sat > 0);
    else if (f == NP_LOWP_HIF8)
        CHECK_EQ_INT(rs.sat, 0); /* amax / scale < 2^4; MX's amax / scale < 2^9 may pass 448 (OCP's floor rule) */
    /* dequantizing with twice the scale doubles every element */
    float dbl[N];
    np_lowp_quantize(dbl, src, OUTER, K, INNER, f, shift, 1, NULL);
    bad = 0;
    for (int i = 0; i < N; i++)
        bad += dbl[i] != 2.0f * got[i];
    CHECK_EQ_INT(bad, 0);
}

/* linear under lowp = float64 product of the quantized operands */
static void check_linear(np_lowp f, int fault)
{
    np_ctx_opts o;
    np_ctx_opts_default(&o);
    o.lowp = f;
    o.threads = 1;
    o.device = NP_DEVICE_NPU_SIM;
    o.prec_fault = fault;
    np_ctx *ctx = NULL;
    np_error err;
    np_error_clear(&err);
    CHECK(np_ctx_new(&ctx, &o, &err) == NP_OK);
    if (!ctx)
        return;
    enum { R = 4, I = 40, O = 3 };
    int64_t xs[2] = {R, I}, ws[2] = {O, I};
    np_tensor *x = np_tensor_new(ctx, NP_FLOAT32, 2, xs);
    np_tensor *w = np_tensor_new(ctx, NP_FLOAT32, 2, ws);
    float *xd = x->data, *wd = w->data;
    for (int i = 0; i < R * I; i++)
        xd[i] = (float)(urand() * 4 - 2);
    for (int i = 0; i < O * I; i++)
        wd[i] = (float)(urand() * 0.1 - 0.05);
    np_tensor *y = np_linear(ctx, x, w, NULL);
    CHECK(y != NULL);
    float xq[R * I], wq[O * I];
    np_lowp_quantize(xq, xd, R, I, 1, f, fault == NP_PREC_FAULT_LOWP_SATURATE ? (f == NP_LOWP_MXFP8 ? -4 : -14) : 0,
                     0, NULL);
    np_lowp_quantize(wq, wd, O, I, 1, f, 0, fault == NP_PREC_FAULT_LOWP_BLOCK_SCALE, NULL);
    double worst = 0;
    for (int r = 0; y && r < R; r++)
        for (int c = 0; c < O; c++) {
            double s = 0, sa = 0;
            for (int i = 0; i < I; i++) {
                s += (double)xq[r * I + i] * wq[c * I + i];
                sa += fabs((double)xq[r * I + i] * wq[c * I + i]);
            }
            worst = fmax(worst, fabs(((float *)y->data)[r * O + c] - s) / sa);
        }
    CHECK_MSG(worst < 1e-6, "%s fault %d: linear differs from the quantized product by %g", np_lowp_name(f), fault,
              worst);
    np_ctx_free(ctx);
}

/* conv2d under lowp = the float64 convolution of x quantized in blocks
 * along C per pixel (N, C, H*W) and w along C per tap (O, C, KH*KW) */
static void check_conv(np_lowp f)
{
    np_ctx_opts o;
    np_ctx_opts_default(&o);
    o.lowp = f;
    o.threads = 1;
    np_ctx *ctx = NULL;
    np_error err;
    np_error_clear(&err);
    CHECK(np_ctx_new(&ctx, &o, &err) == NP_OK);
    if (!ctx)
        return;
    enum { NB = 2, C = 40, H = 5, W = 4, O = 3, KH = 3, KW = 2, S = 1, P = 1 };
    enum { OH = (H + 2 * P - KH) / S + 1, OW = (W + 2 * P - KW) / S + 1 };
    int64_t xs[4] = {NB, C, H, W}, ws[4] = {O, C, KH, KW};
    np_tensor *x = np_tensor_new(ctx, NP_FLOAT32, 4, xs);
    np_tensor *w = np_tensor_new(ctx, NP_FLOAT32, 4, ws);
    float *xd = x->data, *wd = w->data;
    for (int i = 0; i < NB * C * H * W; i++)
        xd[i] = (float)((urand() * 4 - 2) * pow(2.0, (int)(urand() * 8) - 4));
    for (int i = 0; i < O * C * KH * KW; i++)
        wd[i] = (float)(urand() * 0.1 - 0.05);
    np_tensor *y = np_conv2d(ctx, x, w, NULL, S, P);
    CHECK(y != NULL);
    static float xq[NB * C * H * W], wq[O * C * KH * KW];
    np_lowp_quantize(xq, xd, NB, C, H * W, f, 0, 0, NULL);
    np_lowp_quantize(wq, wd, O, C, KH * KW, f, 0, 0, NULL);
    double worst = 0;
    int differ = 0; /* the quantized operands do change x */
    for (int i = 0; i < NB * C * H * W; i++)
        differ += xq[i] != xd[i];
    for (int n = 0; y && n < NB; n++)
        for (int oc = 0; oc < O; oc++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    double s = 0, sa = 0;
                    for (int c = 0; c < C; c++)
                        for (int kh = 0; kh < KH; kh++)
                            for (int kw = 0; kw < KW; kw++) {
                                int ih = oh * S - P + kh, iw = ow * S - P + kw;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W)
                                    continue;
                                double t = (double)xq[((n * C + c) * H + ih) * W + iw] *
                                           wq[((oc * C + c) * KH + kh) * KW + kw];
                                s += t;
                                sa += fabs(t);
                            }
                    float got = ((float *)y->data)[((n * O + oc) * OH + oh) * OW + ow];
                    worst = fmax(worst, fabs(got - s) / (sa > 0 ? sa : 1));
                }
    CHECK_MSG(worst < 1e-6, "%s: conv2d differs from the quantized convolution by %g", np_lowp_name(f), worst);
    CHECK(differ > 0);
    np_ctx_free(ctx);
}

/* ---- the quantized backward (lowp_backward) ------------------------------ */
static np_ctx *bwd_ctx(np_lowp f, int fault, int fp32, int e5m2)
{
    np_ctx_opts o;
    np_ctx_opts_default(&o);
    o.lowp = f;
    o.lowp_backward = e5m2 ? 2 : 1;
    o.threads = 1;
    o.device = NP_DEVICE_NPU_SIM;
    o.prec_fault = fault;
    o.fp32_ops = fp32 ? "Functional.linear" : NULL;
    np_ctx *ctx = NULL;
    np_error err;
    np_error_clear(&err);
    CHECK(np_ctx_new(&ctx, &o, &err) == NP_OK);
    return ctx;
}

/* y = linear(x, w, b); loss = sum(y * g), so the gradient arriving at y is
 * g exactly; returns 0 when the backward ran */
static int bwd_run(np_ctx *ctx, int R, int I, int O, const float *xv, const float *wv, const float *gv, int bias,
                   np_tensor **x, np_tensor **w, np_tensor **b)
{
    int64_t xs[2] = {R, I}, ws[2] = {O, I}, gs[2] = {R, O}, bs[1] = {O};
    *x = np_tensor_new(ctx, NP_FLOAT32, 2, xs);
    *w = np_tensor_new_param(ctx, NP_FLOAT32, 2, ws, "w");
    *b = bias ? np_tensor_new_param(ctx, NP_FLOAT32, 1, bs, "b") : NULL;
    np_tensor *g = np_tensor_new(ctx, NP_FLOAT32, 2, gs);
    if (!*x || !*w || !g || (bias && !*b) || np_tensor_set_requires_grad(ctx, *x, 1) != NP_OK)
        return -1;
    memcpy((*x)->data, xv, (size_t)(R * I) * sizeof(float));
    memcpy((*w)->data, wv, (size_t)(O * I) * sizeof(float));
    memcpy(g->data, gv, (size_t)(R * O) * sizeof(float));
    np_tensor *loss = np_sum(ctx, np_mul(ctx, np_linear(ctx, *x, *w, *b), g));
    return loss && np_backward(ctx, loss) == NP_OK ? 0 : -1;
}

/* Hand-checked: blocks of the backward GEMMs run along their reduction dims.
 * (1) x = [1; 1] (R 2, I 1), w = [1], dY = [1; 2^-18]: dX needs blocks
 * along O (one element each: exact), so dX = [1; 2^-18]; dW = dY^T x has its
 * block along R: amax 1, scale 2^-8, 2^-18 / 2^-8 = 2^-10, half E4M3's least
 * subnormal 2^-9, rounds (to even) to 0: dW = 1, not 1 + 2^-18.
 * (2) x = [1] (R 1, I 1), w = [1; 2^-18] (O 2), dY = [1, 1]: dX = dY W
 * sums along O, W's block (its column) quantizes 2^-18 to 0: dX = 1; dW =
 * dY^T x along R (one element each): [1; 1]. The forward's blocks (along I,
 * one element) would have kept every 2^-18. */
static void check_bwd_hand(void)
{
    const float e = 0x1p-18f, one[2] = {1, 1}, w1[1] = {1}, g1[2] = {1, e}, w2[2] = {1, e};
    np_ctx *ctx = bwd_ctx(NP_LOWP_MXFP8, 0, 0, 0);
    np_tensor *x, *w, *b;
    if (ctx && bwd_run(ctx, 2, 1, 1, one, w1, g1, 0, &x, &w, &b) == 0) {
        CHECK(x->grad[0] == 1.0f && x->grad[1] == e);
        CHECK_MSG(w->grad[0] == 1.0f, "hand case 1: dW %.9g, want 1", w->grad[0]);
    } else
        CHECK_MSG(0, "hand case 1 did not run");
    np_ctx_free(ctx);
    ctx = bwd_ctx(NP_LOWP_MXFP8, 0, 0, 0);
    if (ctx && bwd_run(ctx, 1, 1, 2, one, w2, one, 0, &x, &w, &b) == 0) {
        CHECK_MSG(x->grad[0] == 1.0f, "hand case 2: dX %.9g, want 1", x->grad[0]);
        CHECK(w->grad[0] == 1.0f && w->grad[1] == 1.0f);
    } else
        CHECK_MSG(0, "hand case 2 did not run");
    np_ctx_free(ctx);
    /* promoted: nothing quantized, the exact float32 gradients */
    ctx = bwd_ctx(NP_LOWP_MXFP8, 0, 1, 0);
    if (ctx && bwd_run(ctx, 2, 1, 1, one, w1, g1, 0, &x, &w, &b) == 0)
        CHECK_MSG(w->grad[0] == 1.0f + e, "promoted: dW %.9g, want 1 + 2^-18", w->grad[0]);
    np_ctx_free(ctx);
}

/* Random operands (blocks crossing R, I, O with short last ones): the
 * gradients equal the float64 GEMMs of operands quantized by the test's own
 * quantizer (ref_quantize) along each GEMM's reduction dim; the bias
 * gradient the float64 column sums of dY as it arrived. fault: the
 * gradient's scale shift of lowp_bwd_underflow. tg: the gradient's table,
 * E5M2's for MX training's E5M2 gradients (lowp_backward 2), else t. */
static void check_bwd_random(np_lowp f, const table *t, int fault, const table *tg)
{
    enum { R = 40, I = 36, O = 34 };
    static float xv[R * I], wv[O * I], gv[R * O], gq_o[R * O], wq_o[O * I], gq_r[R * O], xq_r[R * I];
    for (int i = 0; i < R * I; i++)
        xv[i] = (float)((urand() * 4 - 2) * pow(2.0, (int)(urand() * 8) - 4));
    for (int i = 0; i < O * I; i++)
        wv[i] = (float)(urand() * 0.1 - 0.05);
    for (int i = 0; i < R * O; i++)
        gv[i] = (float)((urand() - 0.5) * pow(2.0, -20 + 12 * urand()));
    int e5 = tg != t;
    np_lowp gf = e5 ? NP_LOWP_MXFP8_E5M2 : f;
    int gs = fault ? (e5 ? 30 : f == NP_LOWP_MXFP8 ? 16 : 24) : 0;
    ref_stats rs = {0, 0, 0, 0, 0, 1000, -1000};
    ref_quantize(tg, gf, gv, gq_o, R, O, 1, gs, &rs); /* dY along O */
    ref_quantize(t, f, wv, wq_o, 1, O, I, 0, &rs);    /* W along O */
    ref_quantize(tg, gf, gv, gq_r, 1, R, O, gs, &rs); /* dY along R */
    ref_quantize(t, f, xv, xq_r, 1, R, I, 0, &rs);    /* X along R */
    if (e5 && !fault) { /* the E4M3 recipe gives other operands: the check below tells the two apart */
        static float q4[R * O];
        ref_quantize(t, f, gv, q4, 1, R, O, gs, &rs);
        int differ = 0;
        for (int i = 0; i < R * O; i++)
            differ += q4[i] != gq_r[i];
        CHECK_MSG(differ > R * O / 4, "E5M2 and E4M3 gradients differ in %d of %d elements", differ, R * O);
    }
    np_ctx *ctx = bwd_ctx(f, fault ? NP_PREC_FAULT_LOWP_BWD_UNDERFLOW : 0, 0, e5);
    np_tensor *x, *w, *b;
    if (!ctx || bwd_run(ctx, R, I, O, xv, wv, gv, 1, &x, &w, &b)) {
        CHECK_MSG(0, "%s: the backward did not run", np_lowp_name(f));
        np_ctx_free(ctx);
        return;
    }
    double wdx = 0, wdw = 0, wdb = 0;
    int zeros = 0; /* the fault flushes gradient elements the format keeps */
    for (int i = 0; i < R * O; i++)
        zeros += gq_r[i] == 0 && gv[i] != 0;
    for (int r = 0; r < R; r++)
        for (int i = 0; i < I; i++) {
            double s = 0, sa = 0;
            for (int o = 0; o < O; o++) {
                s += (double)gq_o[r * O + o] * wq_o[o * I + i];
                sa += fabs((double)gq_o[r * O + o] * wq_o[o * I + i]);
            }
            wdx = fmax(wdx, fabs(x->grad[r * I + i] - s) / (sa > 0 ? sa : 1e-300));
        }
    for (int o = 0; o < O; o++)
        for (int i = 0; i < I; i++) {
            double s = 0, sa = 0;
            for (int r = 0; r < R; r++) {
                s += (double)gq_r[r * O + o] * xq_r[r * I + i];
                sa += fabs((double)gq_r[r * O + o] * xq_r[r * I + i]);
            }
            wdw = fmax(wdw, fabs(w->grad[o * I + i] - s) / (sa > 0 ? sa : 1e-300));
        }
    for (int o = 0; o < O; o++) {
        double s = 0, sa = 0;
        for (int r = 0; r < R; r++) {
            s += gv[r * O + o];
            sa += fabs(gv[r * O + o]);
        }
        wdb = fmax(wdb, fabs(b->grad[o] - s) / sa);
    }
    CHECK_MSG(wdx < 1e-6 && wdw < 1e-6 && wdb < 1e-6,
              "%s fault %d: dX, dW, db differ from the float64 reference by %g, %g, %g", np_lowp_name(f), fault,
              wdx, wdw, wdb);
    if (fault)
        CHECK_MSG(zeros > R * O / 2, "%s: the fault flushed %d of %d gradient elements", np_lowp_name(f), zeros,
                  R * O);
    np_ctx_free(ctx);
}

/* Matmul's quantized backward (lowp_backward): a (2, 40, 36) @ b (2, 36, 34)
 * or a shared b (36, 34); dA and dB equal the float64 GEMMs of operands
 * quantized by the test's own quantizer along each GEMM's reduction dim:
 * dA = Q_N(dY) Q_N(B)^T, dB = Q_M(A)^T Q_M(dY), a shared b along both
 * batches' M together (80 rows: blocks crossing the batch). tg as in
 * check_bwd_random. */
static void check_matmul_bwd(np_lowp f, const table *t, const table *tg, int shared)
{
    enum { NB = 2, M = 40, K = 36, N = 34 };
    static float av[NB * M * K], bv[NB * K * N], gv[NB * M * N], gq_n[NB * M * N], bq_n[NB * K * N],
        gq_m[NB * M * N], aq_m[NB * M * K];
    int e5 = tg != t, nbb = shared ? 1 : NB;
    np_lowp gf = e5 ? NP_LOWP_MXFP8_E5M2 : f;
    for (int i = 0; i < NB * M * K; i++)
        av[i] = (float)((urand() * 4 - 2) * pow(2.0, (int)(urand() * 8) - 4));
    for (int i = 0; i < nbb * K * N; i++)
        bv[i] = (float)(urand() * 0.1 - 0.05);
    for (int i = 0; i < NB * M * N; i++)
        gv[i] = (float)((urand() - 0.5) * pow(2.0, -20 + 12 * urand()));
    ref_stats rs = {0, 0, 0, 0, 0, 1000, -1000};
    ref_quantize(tg, gf, gv, gq_n, NB * M, N, 1, 0, &rs);   /* dY along N */
    ref_quantize(t, f, bv, bq_n, nbb * K, N, 1, 0, &rs);    /* B along N */
    if (shared) {
        ref_quantize(tg, gf, gv, gq_m, 1, NB * M, N, 0, &rs); /* dY along the batches' M */
        ref_quantize(t, f, av, aq_m, 1, NB * M, K, 0, &rs);   /* A likewise */
    } else {
        ref_quantize(tg, gf, gv, gq_m, NB, M, N, 0, &rs);     /* dY along M */
        ref_quantize(t, f, av, aq_m, NB, M, K, 0, &rs);       /* A along M */
    }
    np_ctx *ctx = bwd_ctx(f, 0, 0, e5);
    int64_t as[3] = {NB, M, K}, bs3[3] = {NB, K, N}, bs2[2] = {K, N}, gs[3] = {NB, M, N};
    np_tensor *a = ctx ? np_tensor_new(ctx, NP_FLOAT32, 3, as) : NULL;
    np_tensor *b = ctx ? np_tensor_new_param(ctx, NP_FLOAT32, shared ? 2 : 3, shared ? bs2 : bs3, "b") : NULL;
    np_tensor *g = ctx ? np_tensor_new(ctx, NP_FLOAT32, 3, gs) : NULL;
    if (!a || !b || !g || np_tensor_set_requires_grad(ctx, a, 1) != NP_OK) {
        CHECK_MSG(0, "matmul backward: no tensors");
        np_ctx_free(ctx);
        return;
    }
    memcpy(a->data, av, sizeof av);
    memcpy(b->data, bv, (size_t)(nbb * K * N) * sizeof(float));
    memcpy(g->data, gv, sizeof gv);
    np_tensor *loss = np_sum(ctx, np_mul(ctx, np_matmul(ctx, a, b), g));
    if (!loss || np_backward(ctx, loss) != NP_OK) {
        CHECK_MSG(0, "matmul backward did not run");
        np_ctx_free(ctx);
        return;
    }
    double wda = 0, wdb = 0;
    for (int i = 0; i < NB; i++)
        for (int m = 0; m < M; m++)
            for (int k = 0; k < K; k++) {
                double s = 0, sa = 0;
                for (int n = 0; n < N; n++) {
                    double p = (double)gq_n[(i * M + m) * N + n] * bq_n[((shared ? 0 : i) * K + k) * N + n];
                    s += p;
                    sa += fabs(p);
                }
                wda = fmax(wda, fabs(a->grad[(i * M + m) * K + k] - s) / (sa > 0 ? sa : 1e-300));
            }
    for (int ib = 0; ib < nbb; ib++)
        for (int k = 0; k < K; k++)
            for (int n = 0; n < N; n++) {
                double s = 0, sa = 0;
                for (int i = shared ? 0 : ib; i < (shared ? NB : ib + 1); i++)
                    for (int m = 0; m < M; m++) {
                        double p = (double)aq_m[(i * M + m) * K + k] * gq_m[(i * M + m) * N + n];
                        s += p;
                        sa += fabs(p);
                    }
                wdb = fmax(wdb, fabs(b->grad[(ib * K + k) * N + n] - s) / (sa > 0 ? sa : 1e-300));
            }
    CHECK_MSG(wda < 1e-6 && wdb < 1e-6, "%s%s matmul%s: dA, dB differ from the float64 reference by %g, %g",
              np_lowp_name(f), e5 ? " e5m2 gradients" : "", shared ? " (shared b)" : "", wda, wdb);
    np_ctx_free(ctx);
}

int main(void)
{
    table t[NP_FP8_KIND_COUNT];
    for (int k = 0; k < NP_FP8_KIND_COUNT; k++) {
        build(&t[k], (np_fp8_kind)k);
        check_codes((np_fp8_kind)k);
        check_midpoints((np_fp8_kind)k, &t[k]);
    }
    CHECK_EQ_INT(t[NP_FP8_E4M3].n, 127); /* 0, 7 subnormals, 15 x 8 normals less the NaN code */
    CHECK_EQ_INT(t[NP_FP8_E5M2].n, 124); /* 0, 3 subnormals, 30 x 4 normals */
    check_hif8_shape(&t[NP_FP8_HIF8]);
    check_ieee_extremes();
    CHECK_EQ_INT(np_lowp_from_name("mxfp8"), NP_LOWP_MXFP8);
    CHECK_EQ_INT(np_lowp_from_name("hif8"), NP_LOWP_HIF8);
    CHECK_EQ_INT(np_lowp_from_name("fp8"), -1);
    for (int shift = -4; shift <= 0; shift += 4) {
        check_quantize(NP_LOWP_MXFP8, &t[NP_FP8_E4M3], shift);
        check_quantize(NP_LOWP_HIF8, &t[NP_FP8_HIF8], shift ? -14 : 0);
    }
    for (int fault = 0; fault < NP_PREC_FAULT_COUNT; fault++) {
        check_linear(NP_LOWP_MXFP8, fault);
        check_linear(NP_LOWP_HIF8, fault);
    }
    check_conv(NP_LOWP_MXFP8);
    check_conv(NP_LOWP_HIF8);
    check_bwd_hand();
    for (int fault = 0; fault <= 1; fault++) {
        check_bwd_random(NP_LOWP_MXFP8, &t[NP_FP8_E4M3], fault, &t[NP_FP8_E4M3]);
        check_bwd_random(NP_LOWP_HIF8, &t[NP_FP8_HIF8], fault, &t[NP_FP8_HIF8]);
        check_bwd_random(NP_LOWP_MXFP8, &t[NP_FP8_E4M3], fault, &t[NP_FP8_E5M2]); /* E5M2 gradients */
    }
    for (int shift = -4; shift <= 0; shift += 4)
        check_quantize(NP_LOWP_MXFP8_E5M2, &t[NP_FP8_E5M2], shift);
    for (int shared = 0; shared <= 1; shared++) {
        check_matmul_bwd(NP_LOWP_MXFP8, &t[NP_FP8_E4M3], &t[NP_FP8_E4M3], shared);
        check_matmul_bwd(NP_LOWP_HIF8, &t[NP_FP8_HIF8], &t[NP_FP8_HIF8], shared);
        check_matmul_bwd(NP_LOWP_MXFP8, &t[NP_FP8_E4M3], &t[NP_FP8_E5M2], shared);
    }
    /* lowp needs a float32 run */
    np_ctx_opts o;
    np_ctx_opts_default(&o);
    o.lowp = NP_LOWP_MXFP8;
    o.precision = NP_BFLOAT16;
    np_ctx *ctx = NULL;
    np_error err;
    np_error_clear(&err);
    CHECK(np_ctx_new(&ctx, &o, &err) == NP_ERR_ARG);
    CHECK_CONTAINS(err.text, "mxfp8");
    np_ctx_free(ctx);
    /* a quantized backward needs a format */
    np_ctx_opts_default(&o);
    o.lowp_backward = 1;
    ctx = NULL;
    np_error_clear(&err);
    CHECK(np_ctx_new(&ctx, &o, &err) == NP_ERR_ARG);
    CHECK_CONTAINS(err.text, "lowp_backward");
    np_ctx_free(ctx);
    /* E5M2 gradients are MxFP8's; mxfp8_e5m2 is no run format */
    np_ctx_opts_default(&o);
    o.lowp = NP_LOWP_HIF8;
    o.lowp_backward = 2;
    ctx = NULL;
    np_error_clear(&err);
    CHECK(np_ctx_new(&ctx, &o, &err) == NP_ERR_ARG);
    CHECK_CONTAINS(err.text, "E5M2");
    np_ctx_free(ctx);
    np_ctx_opts_default(&o);
    o.lowp = NP_LOWP_MXFP8_E5M2;
    ctx = NULL;
    np_error_clear(&err);
    CHECK(np_ctx_new(&ctx, &o, &err) == NP_ERR_ARG);
    CHECK_CONTAINS(err.text, "mxfp8_e5m2");
    np_ctx_free(ctx);
    return check_report();
}
