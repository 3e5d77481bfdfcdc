/* tests/runtime/test_rt_dtype.c - bfloat16/float16 rounding against known bit
 * patterns, ties to even, overflow to inf, subnormals, and an exhaustive
 * round trip of all 65536 float16 and bfloat16 patterns. */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "nprobe/tensor.h"

static float f_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t u_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* float16 value of bits h computed independently with ldexp. */
static double f16_value(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 0)
        v = ldexp((double)m, -24);
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexp(1024.0 + m, e - 25);
    return s ? -v : v;
}

int main(void)
{
    /* known patterns */
    CHECK_EQ_INT(np_f32_to_f16_bits(1.0f), 0x3C00);
    CHECK_EQ_INT(np_f32_to_f16_bits(-2.0f), 0xC000);
    CHECK_EQ_INT(np_f32_to_f16_bits(65504.0f), 0x7BFF);
    CHECK_EQ_INT(np_f32_to_f16_bits(0.333333343f), 0x3555);
    CHECK_EQ_INT(np_f32_to_bf16_bits(1.0f), 0x3F80);
    CHECK_EQ_INT(np_f32_to_bf16_bits(3.14159274f), 0x4049);
    CHECK_EQ_INT(np_f32_to_bf16_bits(-0.0f), 0x8000);
    /* ties to even: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10 in f16 */
    CHECK_EQ_INT(np_f32_to_f16_bits(1.0f + ldexpf(1.0f, -11)), 0x3C00);
    CHECK_EQ_INT(np_f32_to_f16_bits(1.0f + 3 * ldexpf(1.0f, -11)), 0x3C02);
    CHECK_EQ_INT(np_f32_to_bf16_bits(f_of(0x3F808000u)), 0x3F80); /* halfway, even stays */
    CHECK_EQ_INT(np_f32_to_bf16_bits(f_of(0x3F818000u)), 0x3F82); /* halfway, odd rounds up */
    CHECK_EQ_INT(np_f32_to_bf16_bits(f_of(0x3F808001u)), 0x3F81); /* above half */
    /* overflow */
    CHECK_EQ_INT(np_f32_to_f16_bits(65519.0f), 0x7BFF);
    CHECK_EQ_INT(np_f32_to_f16_bits(65520.0f), 0x7C00);
    CHECK_EQ_INT(np_f32_to_f16_bits(-1e6f), 0xFC00);
    CHECK(isinf(np_round_bf16(f_of(0x7F7FFFFFu))));
    CHECK(isinf(np_round_f16(INFINITY)) && np_round_f16(-INFINITY) < 0);
    CHECK(isnan(np_round_f16(NAN)) && isnan(np_round_bf16(NAN)));
    /* subnormals */
    CHECK_EQ_INT(np_f32_to_f16_bits(ldexpf(1.0f, -24)), 0x0001);
    CHECK_EQ_INT(np_f32_to_f16_bits(ldexpf(1.0f, -25)), 0x0000);            /* tie to even (0) */
    CHECK_EQ_INT(np_f32_to_f16_bits(ldexpf(3.0f, -25)), 0x0002);            /* 1.5 ulp -> 2 */
    CHECK_EQ_INT(np_f32_to_f16_bits(ldexpf(1023.0f, -24)), 0x03FF);
    CHECK_EQ_INT(np_f32_to_f16_bits(ldexpf(1023.5f, -24)), 0x0400);         /* rounds up to normal */
    CHECK_EQ_FLOAT(np_round_to(NP_FLOAT32, 0.1f), 0.1f);

    /* exhaustive f16: bits -> float (checked against ldexp) -> bits */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = np_f16_bits_to_f32((uint16_t)h);
        double want = f16_value((uint16_t)h);
        if (isnan(want)) {
            if (!isnan(f))
                bad++;
            continue;
        }
        if ((double)f != want)
            bad++;
        if (np_f32_to_f16_bits(f) != h)
            bad++;
        /* values between two neighbours round to the nearest */
        if ((h & 0x7C00) != 0x7C00 && (h & 0x7FFF) != 0x7BFF) {
            double next = f16_value((uint16_t)(h + 1));
            if (!isinf(next) && !(h & 0x8000)) {
                double mid = (want + next) / 2;
                uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
                if (np_f32_to_f16_bits((float)mid) != even)
                    bad++;
                if (np_f32_to_f16_bits((float)(want + (next - want) * 0.25)) != h)
                    bad++;
                if (np_f32_to_f16_bits((float)(want + (next - want) * 0.75)) != h + 1)
                    bad++;
            }
        }
    }
    CHECK_EQ_INT(bad, 0);
    /* exhaustive bf16 round trip */
    bad = 0;
    for (uint32_t b = 0; b < 65536; b++) {
        float f = np_bf16_bits_to_f32((uint16_t)b);
        if (u_of(f) != b << 16)
            bad++;
        if (!isnan(f) && np_f32_to_bf16_bits(f) != b)
            bad++;
    }
    CHECK_EQ_INT(bad, 0);
    return check_report();
}
