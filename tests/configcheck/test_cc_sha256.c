/* tests/configcheck/test_cc_sha256.c - SHA-256 against the FIPS 180-4 /
 * NIST example vectors, incremental updates split at every offset, and
 * against coreutils' sha256sum on an odd-length file. */

#include "check.h"
#include "cc_util.h"
#include "nprobe/configcheck.h"

static void hex_of_parts(char hex[65], const char *msg, size_t n, size_t split)
{
    static const char digits[] = "0123456789abcdef";
    np_sha256 s;
    unsigned char d[32];
    np_sha256_init(&s);
    np_sha256_update(&s, msg, split);
    np_sha256_update(&s, msg + split, n - split);
    np_sha256_final(&s, d);
    for (int i = 0; i < 32; i++) {
        hex[2 * i] = digits[d[i] >> 4];
        hex[2 * i + 1] = digits[d[i] & 15];
    }
    hex[64] = '\0';
}

int main(void)
{
    char hex[65];
    /* NIST CSRC examples (SHA256.pdf) and FIPS 180-2 appendix B */
    np_sha256_hex(hex, "abc", 3);
    CHECK_STREQ(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    np_sha256_hex(hex, "", 0);
    CHECK_STREQ(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    np_sha256_hex(hex, m448, strlen(m448));
    CHECK_STREQ(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
                       "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
    np_sha256_hex(hex, m896, strlen(m896));
    CHECK_STREQ(hex, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");

    /* one million 'a', fed in uneven pieces */
    char *a = malloc(1000000);
    memset(a, 'a', 1000000);
    np_sha256 s;
    unsigned char d[32];
    np_sha256_init(&s);
    size_t off = 0, piece = 1;
    while (off < 1000000) {
        size_t n = piece < 1000000 - off ? piece : 1000000 - off;
        np_sha256_update(&s, a + off, n);
        off += n;
        piece = piece * 3 % 997 + 1;
    }
    np_sha256_final(&s, d);
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        hex[2 * i] = digits[d[i] >> 4];
        hex[2 * i + 1] = digits[d[i] & 15];
    }
    hex[64] = '\0';
    CHECK_STREQ(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(a);

    /* splitting the 448-bit message anywhere gives the same digest */
    for (size_t split = 0; split <= strlen(m448); split++) {
        hex_of_parts(hex, m448, strlen(m448), split);
        CHECK_STREQ(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    }

    /* messages around the padding boundary (55, 56, 63, 64, 65 bytes) against sha256sum */
    cc_mktemp();
    size_t lens[] = {55, 56, 63, 64, 65, 119, 120, 1001};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        unsigned char buf[1001];
        for (size_t j = 0; j < lens[i]; j++)
            buf[j] = (unsigned char)(j * 131 + lens[i]);
        char path[600], cmd[800], want[128];
        cc_path(path, sizeof path, "m.bin");
        cc_write_file(path, buf, lens[i]);
        snprintf(cmd, sizeof cmd, "sha256sum '%s' | cut -c1-64", path);
        if (cc_sh_out(cmd, want, sizeof want) != 0 || strlen(want) != 64) {
            fprintf(stderr, "sha256sum unavailable; skipping the boundary cross-check\n");
            break;
        }
        np_sha256_hex(hex, buf, lens[i]);
        CHECK_STREQ(hex, want);
    }
    return check_report();
}
