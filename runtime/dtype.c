/* runtime/dtype.c - bit-exact bfloat16/float16 rounding (round to nearest
 * even, overflow to inf, float16 subnormals kept). The dtype and role name
 * tables are in common/dtype.c (the probe links without the runtime). */
#include <math.h>
#include <string.h>

#include "nprobe/tensor.h"

static uint32_t f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float x;
    memcpy(&x, &u, 4);
    return x;
}

uint16_t np_f32_to_bf16_bits(float x)
{
    uint32_t u = f32_bits(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN, sign kept */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float np_bf16_bits_to_f32(uint16_t b)
{
    return bits_f32((uint32_t)b << 16);
}

uint16_t np_f32_to_f16_bits(float x)
{
    uint32_t u = f32_bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u)
        return (uint16_t)(sign | 0x7E00u);       /* NaN */
    if (a >= 0x477FF000u)                        /* >= 65520 rounds to inf */
        return (uint16_t)(sign | 0x7C00u);
    if (a < 0x38800000u) {                       /* below 2^-14: subnormal or 0 */
        /* exact: |x| * 2^24 < 1024, rintf rounds half to even */
        float v = rintf(bits_f32(a) * 16777216.0f);
        return (uint16_t)(sign | (uint16_t)v);
    }
    uint32_t e = (a >> 23) - 127 + 15;
    uint32_t m = a & 0x7FFFFFu;
    uint32_t h = (e << 10) | (m >> 13);
    uint32_t rem = m & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++;                                     /* carry may reach inf: correct */
    return (uint16_t)(sign | h);
}

float np_f16_bits_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu;
    uint32_t m = h & 0x3FFu;
    if (e == 0) {
        float v = (float)m * (1.0f / 16777216.0f); /* m * 2^-24, exact */
        return sign ? -v : v;
    }
    if (e == 31)
        return bits_f32(sign | 0x7F800000u | (m << 13));
    return bits_f32(sign | ((e - 15 + 127) << 23) | (m << 13));
}

float np_round_bf16(float x)
{
    return np_bf16_bits_to_f32(np_f32_to_bf16_bits(x));
}

float np_round_f16(float x)
{
    return np_f16_bits_to_f32(np_f32_to_f16_bits(x));
}

float np_round_to(np_dtype dt, float x)
{
    switch (dt) {
    case NP_BFLOAT16:
        return np_round_bf16(x);
    case NP_FLOAT16:
        return np_round_f16(x);
    default:
        return x;
    }
}
