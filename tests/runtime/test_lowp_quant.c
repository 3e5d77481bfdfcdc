/* tests/runtime/test_lowp_quant.c - np_lowp_quantize (common/lowp.c, the
 * block kernels chosen at load time) against the scalar quantizer it
 * replaced (lowp_ref.c):
 *  - every float32 whose upper 16 bits take each of the 65536 patterns, with
 *    lower halves 0x0000 (exact ties of every format), 0x0001, 0x7fff,
 *    0x8000, 0xffff and one random one, under anchors (each block's or the
 *    tensor's largest magnitude, 2^-133 .. 2^127) that put them on every
 *    binade of E4M3 and HiF8 and below (underflow), with the scale shifts
 *    of the saturation fault and a dequantization shift (outputs that
 *    overflow float32): the same bits, the same counts and scale range, and
 *    squared sums equal to 1e-12 (their order of summation differs);
 *  - blocks along a strided K with a short last block, infinities and NaNs
 *    (an MX block becomes NaN, HiF8 saturates an infinity and keeps a NaN);
 *  - values worked by hand (MX scale 2^-8 and HiF8 scale 2^-3 of amax 1,
 *    ties to even / away, underflow, HiF8's single zero; an MX E5M2 block,
 *    scale 2^-13 of amax 7.75, saturation, subnormals and their tie);
 *  - the same sweeps for MX blocks of E5M2 (the gradients' format) under
 *    every other anchor, with the underflow fault's shift 30. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "lowp_ref.h"
#include "nprobe/lowp.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

static float fbits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* both quantizers on src (outer, K, inner); 1 when they agree */
static int same(const float *src, int64_t outer, int64_t K, int64_t inner, np_lowp f, int shift, int dq,
                const char *what)
{
    int64_t n = outer * K * inner;
    float *got = malloc((size_t)n * sizeof *got), *want = malloc((size_t)n * sizeof *want);
    if (!got || !want) {
        free(got);
        free(want);
        CHECK(0);
        return 0;
    }
    np_lowp_stats sg, sw;
    np_lowp_stats_init(&sg);
    np_lowp_stats_init(&sw);
    np_lowp_quantize(got, src, outer, K, inner, f, shift, dq, &sg);
    ref_lowp_quantize(want, src, outer, K, inner, f, shift, dq, &sw);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) && bad++ < 5) {
            uint32_t a, b, x;
            memcpy(&a, &got[i], 4);
            memcpy(&b, &want[i], 4);
            memcpy(&x, &src[i], 4);
            fprintf(stderr, "%s %s shift %d dq %d: element %lld (0x%08x %.9g): 0x%08x %.9g, want 0x%08x %.9g\n",
                    what, np_lowp_name(f), shift, dq, (long long)i, x, src[i], a, got[i], b, want[i]);
        }
    CHECK_MSG(bad == 0, "%s %s shift %d dq %d: %lld of %lld elements differ", what, np_lowp_name(f), shift, dq,
              (long long)bad, (long long)n);
    CHECK_EQ_INT(sg.n, sw.n);
    CHECK_EQ_INT(sg.underflow, sw.underflow);
    CHECK_EQ_INT(sg.saturated, sw.saturated);
    CHECK_EQ_INT(sg.scale_lo, sw.scale_lo);
    CHECK_EQ_INT(sg.scale_hi, sw.scale_hi);
    CHECK_CLOSE(sg.sq_err, sw.sq_err, 0, 1e-12);
    CHECK_CLOSE(sg.sq_ref, sw.sq_ref, 0, 1e-12);
    /* in place */
    memcpy(got, src, (size_t)n * sizeof *got);
    np_lowp_quantize(got, got, outer, K, inner, f, shift, dq, NULL);
    CHECK(!memcmp(got, want, (size_t)n * sizeof *got));
    free(got);
    free(want);
    return bad == 0;
}

/* The patterns, finite and at most 2^ea in magnitude, as MX blocks (each led
 * by +-2^ea, so the block's scale is 2^(ea - 8 + shift)) or one HiF8 tensor
 * (led by 2^ea, with infinities and NaNs mixed in). */
static void sweep(int ea, np_lowp f, int shift, int dq)
{
    static const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0xffff, 0};
    enum { NL = sizeof lows / sizeof lows[0] };
    float *x = malloc((size_t)65536 * NL * 2 * sizeof *x);
    if (!x) {
        CHECK(0);
        return;
    }
    float anchor = (float)ldexp(1.0, ea);
    int64_t n = 0;
    uint32_t lr = rnd32() & 0xffff;
    for (uint32_t up = 0; up < 65536; up++)
        for (int l = 0; l < NL; l++) {
            float v = fbits(up << 16 | (l == NL - 1 ? lr : lows[l]));
            if (!(fabsf(v) <= anchor))
                continue;
            if (f != NP_LOWP_HIF8 && n % 32 == 0) {
                x[n] = (n / 32) % 2 ? -anchor : anchor;
                n++;
            } else if (f == NP_LOWP_HIF8 && n == 0)
                x[n++] = anchor;
            x[n++] = v;
            if (f == NP_LOWP_HIF8 && up % 4096 == 0) /* not part of the amax */
                x[n++] = l % 3 == 0 ? INFINITY : l % 3 == 1 ? -INFINITY : fbits(0x7fc00000u | up | (uint32_t)l << 31);
        }
    while (f != NP_LOWP_HIF8 && n % 32)
        x[n++] = 0.0f;
    char what[32];
    snprintf(what, sizeof what, "anchor 2^%d", ea);
    same(x, 1, n, 1, f, shift, dq, what);
    free(x);
}

/* strided K, a short last block, non-finite values */
static void strided(np_lowp f, int shift)
{
    enum { OUTER = 3, K = 70, INNER = 5, N = OUTER * K * INNER };
    float x[N];
    for (int i = 0; i < N; i++) /* magnitudes 2^-40 .. 2^20, zeros, +-0 */
        x[i] = i % 19 == 0 ? (i % 2 ? -0.0f : 0.0f)
                           : (float)ldexp((double)(rnd32() >> 8) / 0x1p24 - 0.5, -40 + (int)(rnd32() % 60));
    x[3 * INNER + 2] = INFINITY;            /* row 0, column 2, block 0 */
    x[(K + 40) * INNER + 1] = NAN;         /* row 1, column 1, block 1 */
    x[(2 * K + 65) * INNER + 4] = -INFINITY; /* row 2, column 4, the short block */
    same(x, OUTER, K, INNER, f, shift, 0, "strided");
}

/* values worked by hand */
static void by_hand(void)
{
    /* MX, one block, amax 1: scale 2^(0 - 8), x * 256 on E4M3's grid */
    float x[6] = {1.0f, 0.3f, -0.265625f, 0.296875f, 0.001f, -0x1p-20f};
    float q[6];
    np_lowp_stats st;
    np_lowp_stats_init(&st);
    np_lowp_quantize(q, x, 1, 6, 1, NP_LOWP_MXFP8, 0, 0, &st);
    CHECK_CLOSE(q[0], 1.0, 0, 0);         /* 256 exact */
    CHECK_CLOSE(q[1], 0.3125, 0, 0);      /* 76.8 in [64, 128), step 8: 80 */
    CHECK_CLOSE(q[2], -0.25, 0, 0);       /* 68: tie between 64 (even) and 72 */
    CHECK_CLOSE(q[3], 0.3125, 0, 0);      /* 76: tie between 72 and 80 (even) */
    CHECK_CLOSE(q[4], 0x1p-10, 0, 0);     /* 0.256 in [0.25, 0.5), step 2^-5: 0.25 */
    CHECK(q[5] == 0 && signbit(q[5]));    /* 2^-12 < 2^-10, half the smallest subnormal: -0 */
    CHECK_EQ_INT(st.underflow, 1);
    CHECK_EQ_INT(st.saturated, 0);
    CHECK_EQ_INT(st.scale_lo, -8);
    CHECK_EQ_INT(st.scale_hi, -8);
    /* the saturation fault's shift -4: scale 2^-12, 1.0 -> 4096 > 448 */
    np_lowp_stats_init(&st);
    np_lowp_quantize(q, x, 1, 6, 1, NP_LOWP_MXFP8, -4, 0, &st);
    CHECK_CLOSE(q[0], 448.0 / 4096, 0, 0);
    CHECK_CLOSE(q[1], 448.0 / 4096, 0, 0);  /* 1228.8 > 448 */
    CHECK_CLOSE(q[2], -448.0 / 4096, 0, 0); /* -1088 */
    CHECK_CLOSE(q[4], 4.0 / 4096, 0, 0);    /* 4.096 in [4, 8), step 0.5: 4 */
    CHECK_EQ_INT(st.saturated, 4);          /* 4096, 1228.8, 1088, 1216 */

    /* HiF8, amax 1: scale 2^(0 - 3), x * 8 on HiF8's grid */
    float h[7] = {1.0f, 0.3f, 0.265625f, 0.01f, 0x1p-26f, -0x1.fcp-27f, -0.0f};
    float hq[7];
    np_lowp_stats_init(&st);
    np_lowp_quantize(hq, h, 1, 7, 1, NP_LOWP_HIF8, 0, 0, &st);
    CHECK_CLOSE(hq[0], 1.0, 0, 0);          /* 8 = 2^3 */
    CHECK_CLOSE(hq[1], 0.3125, 0, 0);       /* 2.4 in [2, 4), 3 bits, step 0.25: 2.5 */
    CHECK_CLOSE(hq[2], 0.28125, 0, 0);      /* 2.125: tie between 2 and 2.25, away: 2.25 */
    CHECK_CLOSE(hq[3], 0.009765625, 0, 0);  /* 0.08 in [2^-4, 2^-3), 2 bits, step 2^-6: 5 * 2^-6 */
    CHECK_CLOSE(hq[4], 0x1p-25, 0, 0);      /* 2^-23: the midpoint 0 .. 2^-22, away */
    CHECK(hq[5] == 0 && !signbit(hq[5]));   /* below 2^-23: HiF8's one zero, +0 */
    CHECK(hq[6] == 0 && !signbit(hq[6]));
    CHECK_EQ_INT(st.underflow, 1);
    CHECK_EQ_INT(st.scale_lo, -3);

    /* MX with E5M2 elements (the gradients of --lowp-grad e5m2), one block,
     * amax 7.75: scale 2^(2 - 15) = 2^-13; E5M2 has 2 mantissa bits, normals
     * from 2^-14 (x >= 2^-27 here), subnormals m * 2^-16 (m * 2^-29 here) */
    float g[12] = {3.0f, 1.0f, 0x1p-18f, 0.3f, -2.5f, 7.75f, 5.5f, 0.7f, 0x1p-29f, 0x1.8p-29f, 0x1p-31f, 0.0f};
    static const double gw[12] = {
        3.0,      /* 1.1b x 2: exact */
        1.0,
        0x1p-18,  /* 2^-5 after the scale: a normal, kept (E4M3's scale 2^-6 would flush it) */
        0.3125,   /* [0.25, 0.5) in steps of 2^-4: 0.3 -> 0.3125 */
        -2.5,     /* [2, 4) in steps of 0.5: exact */
        7.0,      /* 63488 after the scale > 57344: saturates to 57344 x 2^-13 = 7 */
        6.0,      /* [4, 8) in steps of 1: 5.5 a tie between 5 (mantissa 01) and 6 (10, even) */
        0.75,     /* [0.5, 1) in steps of 2^-3: 0.7 -> 0.75 */
        0x1p-29,  /* 2^-16 after the scale: the least subnormal */
        0x1p-28,  /* 1.5 x 2^-16: a tie between 2^-16 (odd) and 2^-15 (even) */
        0.0,      /* 2^-18 after the scale, under half the least subnormal */
        0.0,
    };
    float gq[12];
    np_lowp_stats_init(&st);
    np_lowp_quantize(gq, g, 1, 12, 1, NP_LOWP_MXFP8_E5M2, 0, 0, &st);
    for (int i = 0; i < 12; i++)
        CHECK_MSG(gq[i] == gw[i], "mxfp8_e5m2 element %d: %a -> %a, want %a", i, (double)g[i], (double)gq[i],
                  gw[i]);
    CHECK_EQ_INT(st.underflow, 1);
    CHECK_EQ_INT(st.saturated, 1);
    CHECK_EQ_INT(st.scale_lo, -13);
    CHECK_EQ_INT(st.scale_hi, -13);
    CHECK_EQ_INT(np_lowp_from_name("mxfp8_e5m2"), NP_LOWP_MXFP8_E5M2);
}

int main(void)
{
    by_hand();
    static const int anchors[] = {-133, -118, -60, -9, 0, 7, 60, 120, 127};
    for (size_t i = 0; i < sizeof anchors / sizeof anchors[0]; i++) {
        int dq = anchors[i] == 0 || anchors[i] == 127;
        sweep(anchors[i], NP_LOWP_MXFP8, 0, 0);
        sweep(anchors[i], NP_LOWP_MXFP8, -4, dq);
        sweep(anchors[i], NP_LOWP_HIF8, 0, dq);
        sweep(anchors[i], NP_LOWP_HIF8, -14, 0);
        if (i % 2 == 0) /* E5M2 blocks (the gradients' format): every other anchor, both ends */
            sweep(anchors[i], NP_LOWP_MXFP8_E5M2, i % 4 ? 30 : 0, 0);
    }
    for (int shift = -4; shift <= 0; shift += 4) {
        strided(NP_LOWP_MXFP8, shift);
        strided(NP_LOWP_HIF8, shift ? -14 : 0);
        strided(NP_LOWP_MXFP8_E5M2, shift ? 30 : 0);
    }
    return check_report();
}
