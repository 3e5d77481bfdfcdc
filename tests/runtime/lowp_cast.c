/* tests/runtime/lowp_cast.c - float32 values on stdin to float8 codes on
 * stdout (np_fp8_encode), for test_lowp_torch.py.
 * usage: lowp_cast e4m3|e5m2|hif8 0|1 (1: saturating) */
#include <stdio.h>
#include <string.h>

#include "nprobe/lowp.h"

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    int k = -1;
    for (int i = 0; i < NP_FP8_KIND_COUNT; i++)
        if (!strcmp(argv[1], np_fp8_name((np_fp8_kind)i)))
            k = i;
    if (k < 0)
        return 2;
    float v;
    while (fread(&v, sizeof v, 1, stdin) == 1) {
        unsigned char c = np_fp8_encode((np_fp8_kind)k, v, argv[2][0] == '1');
        if (fwrite(&c, 1, 1, stdout) != 1)
            return 1;
    }
    return 0;
}
