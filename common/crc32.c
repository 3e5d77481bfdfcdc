/* common/crc32.c - zlib's crc32 (same polynomial, same results), faster:
 * on x86-64 CPUs with PCLMULQDQ (checked at run time) the buffer is folded
 * 64 bytes at a time in four 128-bit lanes with carry-less multiplies, the
 * lanes are folded into one, and that 16-byte remainder plus the last < 16
 * bytes go through zlib's crc32. With VPCLMULQDQ and AVX-512 the bulk is
 * first folded 256 bytes at a time in four 512-bit registers (sixteen
 * 128-bit lanes, the same algebra), then handed to the four 128-bit lanes;
 * with VPCLMULQDQ and AVX2 only (AMD Zen 3, Intel Alder Lake) the same 256
 * bytes a step go through eight 256-bit registers.
 * Elsewhere, and for short buffers, it is zlib's crc32.
 *
 * Folding (bit-reflected CRC, as zlib's): a 16-byte lane read little-endian
 * holds a polynomial whose first 8 bytes H are its x^127..x^64 half and last
 * 8 bytes L its x^63..x^0 half. Moving the lane D bits further down the
 * message multiplies it by x^D; modulo P that is H*(x^(D+64) mod P) +
 * L*(x^D mod P), a polynomial of degree < 96 that is xor-ed into the lane
 * D bits ahead. In this reflected layout a carry-less product comes out one
 * degree low, so the constants are x^(D+63) mod P and x^(D-1) mod P, stored
 * with the coefficient of x^m at bit 63 - m. The initial register (~crc) is
 * xor-ed into the first 4 bytes; the folded 16 bytes R then satisfy
 * crc32 = zlib_crc32(zlib_crc32(0xffffffff, R), rest). */
#include <zlib.h>

#include "nprobe/common.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* D = 512 (four lanes ahead) and D = 128 (one lane ahead), P = 0x104c11db7. */
#define K512_H 0x653d982200000000ULL /* x^575 mod P */
#define K512_L 0xcad38e8f00000000ULL /* x^511 mod P */
#define K128_H 0x65673b4600000000ULL /* x^191 mod P */
#define K128_L 0x9ba54c6f00000000ULL /* x^127 mod P */
#define K2048_H 0x7cc8e1e700000000ULL /* x^2111 mod P (D = 2048: four zmm ahead) */
#define K2048_L 0x03f9f86300000000ULL /* x^2047 mod P */

__attribute__((target("pclmul,sse2"))) static __m128i fold(__m128i x, __m128i k)
{
    return _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11));
}

/* Four lanes x[0..3] hold the folded bytes before p + off (off >= 64):
 * fold the rest of the len bytes in and finish. */
__attribute__((target("pclmul,sse2"))) static uint32_t crc32_lanes(__m128i x0, __m128i x1,
                                                                    __m128i x2, __m128i x3,
                                                                    const unsigned char *p,
                                                                    size_t off, size_t len)
{
    const __m128i k4 = _mm_set_epi64x((long long)K512_L, (long long)K512_H);
    const __m128i k1 = _mm_set_epi64x((long long)K128_L, (long long)K128_H);
    for (; len - off >= 64; off += 64) {
        const unsigned char *q = p + off;
        x0 = _mm_xor_si128(fold(x0, k4), _mm_loadu_si128((const __m128i *)(const void *)q));
        x1 = _mm_xor_si128(fold(x1, k4), _mm_loadu_si128((const __m128i *)(const void *)(q + 16)));
        x2 = _mm_xor_si128(fold(x2, k4), _mm_loadu_si128((const __m128i *)(const void *)(q + 32)));
        x3 = _mm_xor_si128(fold(x3, k4), _mm_loadu_si128((const __m128i *)(const void *)(q + 48)));
    }
    __m128i x = _mm_xor_si128(fold(x0, k1), x1);
    x = _mm_xor_si128(fold(x, k1), x2);
    x = _mm_xor_si128(fold(x, k1), x3);
    for (; len - off >= 16; off += 16)
        x = _mm_xor_si128(fold(x, k1), _mm_loadu_si128((const __m128i *)(const void *)(p + off)));
    unsigned char r[16];
    _mm_storeu_si128((__m128i *)(void *)r, x);
    uLong c = crc32(0xffffffffUL, r, 16);
    return (uint32_t)crc32_z(c, p + off, len - off);
}

/* len >= 64. */
__attribute__((target("pclmul,sse2"))) static uint32_t crc32_fold(uint32_t crc,
                                                                   const unsigned char *p,
                                                                   size_t len)
{
    __m128i x0 = _mm_loadu_si128((const __m128i *)(const void *)p);
    __m128i x1 = _mm_loadu_si128((const __m128i *)(const void *)(p + 16));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(const void *)(p + 32));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(const void *)(p + 48));
    x0 = _mm_xor_si128(x0, _mm_cvtsi32_si128((int)~crc));
    return crc32_lanes(x0, x1, x2, x3, p, 64, len);
}

#define TARGET_512 "avx512f,vpclmulqdq,pclmul,sse2"

__attribute__((target(TARGET_512))) static __m512i fold512(__m512i x, __m512i k)
{
    return _mm512_xor_si512(_mm512_clmulepi64_epi128(x, k, 0x00),
                            _mm512_clmulepi64_epi128(x, k, 0x11));
}

/* len >= 256. */
__attribute__((target(TARGET_512))) static uint32_t crc32_fold512(uint32_t crc,
                                                                   const unsigned char *p,
                                                                   size_t len)
{
    const __m512i k16 = _mm512_broadcast_i32x4(
        _mm_set_epi64x((long long)K2048_L, (long long)K2048_H));
    const __m512i k4 = _mm512_broadcast_i32x4(
        _mm_set_epi64x((long long)K512_L, (long long)K512_H));
    __m512i z0 = _mm512_loadu_si512((const void *)p);
    __m512i z1 = _mm512_loadu_si512((const void *)(p + 64));
    __m512i z2 = _mm512_loadu_si512((const void *)(p + 128));
    __m512i z3 = _mm512_loadu_si512((const void *)(p + 192));
    z0 = _mm512_xor_si512(z0, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)~crc)));
    size_t off = 256;
    for (; len - off >= 256; off += 256) {
        const unsigned char *q = p + off;
        z0 = _mm512_xor_si512(fold512(z0, k16), _mm512_loadu_si512((const void *)q));
        z1 = _mm512_xor_si512(fold512(z1, k16), _mm512_loadu_si512((const void *)(q + 64)));
        z2 = _mm512_xor_si512(fold512(z2, k16), _mm512_loadu_si512((const void *)(q + 128)));
        z3 = _mm512_xor_si512(fold512(z3, k16), _mm512_loadu_si512((const void *)(q + 192)));
    }
    /* Four registers into one (64 bytes ahead each), then its four lanes. */
    __m512i z = _mm512_xor_si512(fold512(z0, k4), z1);
    z = _mm512_xor_si512(fold512(z, k4), z2);
    z = _mm512_xor_si512(fold512(z, k4), z3);
    return crc32_lanes(_mm512_extracti32x4_epi32(z, 0), _mm512_extracti32x4_epi32(z, 1),
                       _mm512_extracti32x4_epi32(z, 2), _mm512_extracti32x4_epi32(z, 3), p,
                       off, len);
}
#define TARGET_256 "avx2,vpclmulqdq,pclmul,sse2"

__attribute__((target(TARGET_256))) static __m256i fold256(__m256i x, __m256i k)
{
    return _mm256_xor_si256(_mm256_clmulepi64_epi128(x, k, 0x00),
                            _mm256_clmulepi64_epi128(x, k, 0x11));
}

/* len >= 256: the 512-bit algorithm with each zmm as two ymm (y[2i], y[2i+1]). */
__attribute__((target(TARGET_256))) static uint32_t crc32_fold256(uint32_t crc,
                                                                   const unsigned char *p,
                                                                   size_t len)
{
    const __m256i k16 = _mm256_broadcastsi128_si256(
        _mm_set_epi64x((long long)K2048_L, (long long)K2048_H));
    const __m256i k4 = _mm256_broadcastsi128_si256(
        _mm_set_epi64x((long long)K512_L, (long long)K512_H));
    __m256i y[8];
    for (int i = 0; i < 8; i++)
        y[i] = _mm256_loadu_si256((const __m256i *)(const void *)(p + 32 * i));
    y[0] = _mm256_xor_si256(y[0], _mm256_zextsi128_si256(_mm_cvtsi32_si128((int)~crc)));
    size_t off = 256;
    for (; len - off >= 256; off += 256)
        for (int i = 0; i < 8; i++)
            y[i] = _mm256_xor_si256(fold256(y[i], k16),
                                    _mm256_loadu_si256((const __m256i *)(const void *)(p + off + 32 * i)));
    /* Four 64-byte groups into one (64 bytes ahead each), then its four lanes. */
    __m256i a = y[0], b = y[1];
    for (int g = 1; g < 4; g++) {
        a = _mm256_xor_si256(fold256(a, k4), y[2 * g]);
        b = _mm256_xor_si256(fold256(b, k4), y[2 * g + 1]);
    }
    return crc32_lanes(_mm256_extracti128_si256(a, 0), _mm256_extracti128_si256(a, 1),
                       _mm256_extracti128_si256(b, 0), _mm256_extracti128_si256(b, 1), p, off,
                       len);
}
#endif

int np_crc32_kernel_supported(np_crc32_kernel k)
{
    switch (k) {
    case NP_CRC32_ZLIB:
        return 1;
#if defined(__x86_64__) && defined(__GNUC__)
    case NP_CRC32_PCLMUL:
        return __builtin_cpu_supports("pclmul");
    case NP_CRC32_VPCLMUL256:
        return __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("avx2");
    case NP_CRC32_VPCLMUL512:
        return __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("avx512f");
#endif
    default:
        return 0;
    }
}

uint32_t np_crc32_with(np_crc32_kernel k, uint32_t crc, const void *buf, size_t len)
{
    if (!buf || len == 0)
        return crc;
#if defined(__x86_64__) && defined(__GNUC__)
    if (k == NP_CRC32_VPCLMUL512 && len >= 256)
        return crc32_fold512(crc, buf, len);
    if (k == NP_CRC32_VPCLMUL256 && len >= 256)
        return crc32_fold256(crc, buf, len);
    if (k != NP_CRC32_ZLIB && len >= 64)
        return crc32_fold(crc, buf, len);
#endif
    (void)k;
    return (uint32_t)crc32_z(crc, buf, len);
}

static np_crc32_kernel best_kernel(void)
{
    for (int k = NP_CRC32_VPCLMUL512; k > NP_CRC32_ZLIB; k--)
        if (np_crc32_kernel_supported((np_crc32_kernel)k))
            return (np_crc32_kernel)k;
    return NP_CRC32_ZLIB;
}

uint32_t np_crc32(uint32_t crc, const void *buf, size_t len)
{
    return np_crc32_with(best_kernel(), crc, buf, len);
}
