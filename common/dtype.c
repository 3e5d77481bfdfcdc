/* common/dtype.c - the logical dtypes (nprobe/tensor.h): the dtype and
 * leaf role name tables (nprobe/hook.h), storage sizes, and bit-exact
 * bfloat16/float16 rounding and bit conversions (round to nearest even,
 * overflow to inf, float16 subnormals kept). Shared by the runtime, the
 * probe and the readers, so that none of them needs the runtime library. */
#include <math.h>
#include <string.h>

#include "nprobe/hook.h"
#include "nprobe/lowp.h"
#include "nprobe/tensor.h"

static const char *const dtype_names[] = { /* enum order, no designators: the size check below sees a missing name */
    "float32", "bfloat16", "float16", "float64", "int64", "int32", "bool",
    "float8_e4m3fn", "float8_e5m2", "hifloat8",
};
_Static_assert(sizeof dtype_names / sizeof dtype_names[0] == NP_DTYPE_COUNT,
               "dtype_names must name every np_dtype");

static const char *const role_names[] = { /* enum order, no designators: the size check below sees a missing name */
    "input", "output", "parameters", "kwargs", "parameters_grad",
};
_Static_assert(sizeof role_names / sizeof role_names[0] == NP_ROLE_COUNT,
               "role_names must name every np_role");

const char *np_dtype_name(np_dtype dt)
{
    return (unsigned)dt < NP_DTYPE_COUNT ? dtype_names[dt] : "unknown";
}

const char *np_role_name(np_role r)
{
    return (unsigned)r < NP_ROLE_COUNT ? role_names[r] : "unknown";
}

int np_dtype_from_name(const char *name)
{
    static const struct { const char *alias; np_dtype dt; } aliases[] = {
        {"fp32", NP_FLOAT32}, {"bf16", NP_BFLOAT16}, {"fp16", NP_FLOAT16},
        {"fp64", NP_FLOAT64}, {"half", NP_FLOAT16},  {"float", NP_FLOAT32},
        {"double", NP_FLOAT64},
    };
    if (!name)
        return -1;
    for (int i = 0; i < NP_DTYPE_COUNT; i++)
        if (strcmp(name, dtype_names[i]) == 0)
            return i;
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcmp(name, aliases[i].alias) == 0)
            return (int)aliases[i].dt;
    return -1;
}

size_t np_dtype_storage_size(np_dtype dt)
{
    switch (dt) {
    case NP_FLOAT64:
    case NP_INT64:
        return 8;
    case NP_BOOL:
        return 1;
    default:
        return 4;
    }
}

int np_dtype_is_floating(np_dtype dt)
{
    return dt == NP_FLOAT32 || dt == NP_BFLOAT16 || dt == NP_FLOAT16 || dt == NP_FLOAT64 ||
           dt == NP_FLOAT8_E4M3FN || dt == NP_FLOAT8_E5M2 || dt == NP_HIFLOAT8;
}

size_t np_tensor_nbytes(const np_tensor *t)
{
    return (size_t)t->numel * np_dtype_storage_size(t->dtype);
}

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
    case NP_FLOAT8_E4M3FN:
        return (float)np_fp8_round(NP_FP8_E4M3, x, 1);
    case NP_FLOAT8_E5M2:
        return (float)np_fp8_round(NP_FP8_E5M2, x, 0);
    case NP_HIFLOAT8:
        return (float)np_fp8_round(NP_FP8_HIF8, x, 0);
    default:
        return x;
    }
}
