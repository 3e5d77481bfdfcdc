/* scripts/bench/bench_lowp.c - ns per element of np_lowp_quantize (the block
 * kernels, common/lowp.c) and of the scalar quantizer it replaced
 * (tests/runtime/lowp_ref.c) on one (rows, cols) tensor quantized along
 * cols, with statistics, as the runtime's GEMM operands are; the best of
 * REPS timed calls of each, interleaved. Built and run by bench_lowp.sh.
 * usage: bench_lowp [ROWS COLS REPS] */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "lowp_ref.h"
#include "nprobe/lowp.h"

typedef void (*quant_fn)(float *, const float *, int64_t, int64_t, int64_t, np_lowp, int, int, np_lowp_stats *);

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double once(quant_fn fn, float *dst, const float *src, int64_t R, int64_t C, np_lowp f)
{
    np_lowp_stats st;
    np_lowp_stats_init(&st);
    double t0 = now();
    fn(dst, src, R, C, 1, f, 0, 0, &st);
    return now() - t0;
}

int main(int argc, char **argv)
{
    int64_t R = argc > 2 ? atoll(argv[1]) : 768, C = argc > 2 ? atoll(argv[2]) : 768;
    int reps = argc > 3 ? atoi(argv[3]) : 20;
    int64_t n = R * C;
    float *src = malloc((size_t)n * sizeof *src), *dst = malloc((size_t)n * sizeof *dst);
    if (!src || !dst || n <= 0 || reps <= 0)
        return 2;
    uint64_t s = 88172645463325252ull;
    for (int64_t i = 0; i < n; i++) { /* weights-like: uniform in (-0.05, 0.05) */
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        src[i] = (float)(((double)(s >> 11) * 0x1p-53 - 0.5) * 0.1);
    }
    for (int f = NP_LOWP_MXFP8; f <= NP_LOWP_MXFP8_E5M2; f++) { /* mxfp8_e5m2: the gradients of --lowp-grad e5m2 */
        double best_new = 1e30, best_ref = 1e30;
        for (int r = 0; r < reps; r++) {
            double a = once(np_lowp_quantize, dst, src, R, C, (np_lowp)f);
            double b = once(ref_lowp_quantize, dst, src, R, C, (np_lowp)f);
            best_new = a < best_new ? a : best_new;
            best_ref = b < best_ref ? b : best_ref;
        }
        printf("%s %lldx%lld: block kernels %.2f ns/element, scalar %.2f ns/element, x%.1f faster\n",
               np_lowp_name((np_lowp)f), (long long)R, (long long)C, 1e9 * best_new / (double)n,
               1e9 * best_ref / (double)n, best_ref / best_new);
    }
    free(src);
    free(dst);
    return 0;
}
