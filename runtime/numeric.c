/* runtime/numeric.c - the numeric helpers the context-free kernels share
 * with the context: the parallel-threshold test knob, the counter-based
 * random generator (dropout masks, parameter initialisation) and in-place
 * rounding to a low-precision dtype. Nothing here knows the context, so
 * kern_*.c and fault_kernels.c depend on this file, not on ctx.c. */
#include <stdint.h>

#include "rt_internal.h"

int rt_par_all = 0;

void rt_set_par_all(int on) { rt_par_all = on != 0; }

/* ---- random numbers -------------------------------------------------------- */
uint64_t rt_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t np_rng_u64(uint64_t key, uint64_t counter)
{
    return rt_mix64(rt_mix64(key + 0x9E3779B97F4A7C15ull) ^ (counter * 0xD6E8FEB86659FD93ull + 0x632BE59BD9B4E019ull));
}

float np_rng_uniform(uint64_t key, uint64_t counter)
{
    return (float)(np_rng_u64(key, counter) >> 40) * (1.0f / 16777216.0f);
}

/* ---- rounding helpers ------------------------------------------------------- */
void rt_round_buf(float *p, int64_t n, np_dtype dt)
{
    if (dt == NP_BFLOAT16) {
#pragma omp parallel for if (n > RT_PAR_MIN)
        for (int64_t i = 0; i < n; i++)
            p[i] = np_round_bf16(p[i]);
    } else if (dt == NP_FLOAT16) {
#pragma omp parallel for if (n > RT_PAR_MIN)
        for (int64_t i = 0; i < n; i++)
            p[i] = np_round_f16(p[i]);
    }
}
