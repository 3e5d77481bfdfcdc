/* tests/probe/test_probe_crc.c - np_crc32 (the carry-less-multiply crc32 the
 * probe uses for md5 and tensor payloads) against zlib's crc32, the
 * independent reference: every length 0..300 at every start alignment 0..15,
 * longer odd lengths, chained calls with a running crc, and the check value
 * of the CRC-32 standard ("123456789" -> 0xcbf43926). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "check.h"
#include "nprobe/common.h"

int main(void)
{
    size_t cap = 1 << 20;
    unsigned char *buf = malloc(cap + 64);
    uint32_t s = 12345;
    for (size_t i = 0; i < cap + 64; i++) {
        s = s * 1103515245u + 12345u;
        buf[i] = (unsigned char)(s >> 16);
    }
    CHECK_EQ_INT(np_crc32(0, "123456789", 9), 0xcbf43926u);
    CHECK_EQ_INT(np_crc32(0, NULL, 0), 0);
    CHECK_EQ_INT(np_crc32(77, buf, 0), 77);
    int bad = 0;
    for (size_t align = 0; align < 16; align++)
        for (size_t n = 0; n <= 300; n++) {
            uint32_t want = (uint32_t)crc32(0L, buf + align, (uInt)n);
            if (np_crc32(0, buf + align, n) != want)
                bad++;
        }
    CHECK_EQ_INT(bad, 0);
    size_t lens[] = {1023, 4096, 65536, 65537, 262144 + 13, 1 << 20};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++)
        for (size_t align = 0; align < 64; align += 7)
            CHECK_EQ_INT(np_crc32(0, buf + align, lens[k]),
                         (uint32_t)crc32(0L, buf + align, (uInt)lens[k]));
    /* chained: the crc of a prefix passed on */
    for (size_t cut = 0; cut < 2000; cut += 97) {
        uint32_t c = np_crc32(0, buf, cut);
        c = np_crc32(c, buf + cut, 5000 - cut);
        CHECK_EQ_INT(c, (uint32_t)crc32(0L, buf, 5000));
        CHECK_EQ_INT(np_crc32(0xdeadbeefu, buf + cut, 3000),
                     (uint32_t)crc32(0xdeadbeefUL, buf + cut, 3000));
    }
    free(buf);
    return check_report();
}
