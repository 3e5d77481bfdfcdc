/* tests/probe/test_probe_crc.c - np_crc32 (the carry-less-multiply crc32 the
 * probe uses for md5 and tensor payloads) against zlib's crc32, the
 * independent reference: every length 0..300 at every start alignment 0..15,
 * longer odd lengths, chained calls with a running crc, and the check value
 * of the CRC-32 standard ("123456789" -> 0xcbf43926); for np_crc32 and for
 * each of its kernels that this CPU runs (the others are named as not run). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "check.h"
#include "nprobe/common.h"

typedef uint32_t (*crc_fn)(uint32_t crc, const void *buf, size_t len);
static np_crc32_kernel kernel;
static uint32_t with_kernel(uint32_t crc, const void *buf, size_t len)
{
    return np_crc32_with(kernel, crc, buf, len);
}

static void check_fn(crc_fn f, const unsigned char *buf)
{
    CHECK_EQ_INT(f(0, "123456789", 9), 0xcbf43926u);
    CHECK_EQ_INT(f(0, NULL, 0), 0);
    CHECK_EQ_INT(f(77, buf, 0), 77);
    int bad = 0;
    for (size_t align = 0; align < 16; align++)
        for (size_t n = 0; n <= 600; n++) {
            uint32_t want = (uint32_t)crc32(0L, buf + align, (uInt)n);
            if (f(0, buf + align, n) != want)
                bad++;
        }
    CHECK_EQ_INT(bad, 0);
    size_t lens[] = {1023, 4096, 65536, 65537, 262144 + 13, 1 << 20};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++)
        for (size_t align = 0; align < 64; align += 7)
            CHECK_EQ_INT(f(0, buf + align, lens[k]),
                         (uint32_t)crc32(0L, buf + align, (uInt)lens[k]));
    /* chained: the crc of a prefix passed on */
    for (size_t cut = 0; cut < 2000; cut += 97) {
        uint32_t c = f(0, buf, cut);
        c = f(c, buf + cut, 5000 - cut);
        CHECK_EQ_INT(c, (uint32_t)crc32(0L, buf, 5000));
        CHECK_EQ_INT(f(0xdeadbeefu, buf + cut, 3000),
                     (uint32_t)crc32(0xdeadbeefUL, buf + cut, 3000));
    }
}

int main(void)
{
    size_t cap = 1 << 20;
    unsigned char *buf = malloc(cap + 64);
    uint32_t s = 12345;
    for (size_t i = 0; i < cap + 64; i++) {
        s = s * 1103515245u + 12345u;
        buf[i] = (unsigned char)(s >> 16);
    }
    check_fn(np_crc32, buf);
    static const char *const names[] = {"zlib", "pclmul", "vpclmul256", "vpclmul512"};
    for (int k = NP_CRC32_ZLIB; k <= NP_CRC32_VPCLMUL512; k++) {
        if (!np_crc32_kernel_supported((np_crc32_kernel)k)) {
            printf("kernel %s: not supported by this CPU, not run\n", names[k]);
            continue;
        }
        printf("kernel %s\n", names[k]);
        kernel = (np_crc32_kernel)k;
        check_fn(with_kernel, buf);
    }
    free(buf);
    return check_report();
}
