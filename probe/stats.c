/* probe/stats.c - one-pass tensor statistics in double (max, min, mean, L2
 * norm over finite elements; NaN/+Inf/-Inf counts) and zlib's crc32 of the
 * stored bytes. Tensors are cut into fixed chunks of CHUNK elements; chunks
 * run in parallel (OpenMP) for large tensors and their partials are combined
 * in chunk order, so the result never depends on the thread count. Inside a
 * chunk interleaved lanes (8 for float32, 4 otherwise) keep the loop short of
 * dependency chains. The float32 fast path runs in AVX-512 or AVX2 registers
 * when the CPU has them (picked at run time) with the same lanes and order,
 * so every CPU gives the same bits. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include <zlib.h>

#include "probe_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define NP_STATS_X86 1
#include <immintrin.h>
#else
#define NP_STATS_X86 0
#endif

#define CHUNK ((int64_t)1 << 16)   /* elements per chunk; a multiple of LANES and FLANES */
#define PAR_MIN_CHUNKS 4           /* parallel only from this many chunks */
#define CRC_PAR_MIN_BYTES 65536    /* below PAR_MIN_CHUNKS: crc32 beside the statistics from here */
#define LANES 4

typedef struct part {
    double max, min, sum, sumsq;
    double dsumsq;   /* the extras (chunk_extra): sum of squares of x - prev */
    int64_t nfin, nan, pinf, ninf;
    int64_t zeros;   /* the extras: elements equal to 0 */
    uint32_t crc;
    size_t nbytes;
} part;

static void part_init(part *p)
{
    p->max = -INFINITY;
    p->min = INFINITY;
    p->sum = p->sumsq = p->dsumsq = 0.0;
    p->nfin = p->nan = p->pinf = p->ninf = p->zeros = 0;
    p->crc = 0;
    p->nbytes = 0;
}

/* Lane-combine helper: lanes l=0..3 folded in order. */
static void fold(part *p, const double *mx, const double *mn, const double *s,
                 const double *q)
{
    for (int l = 0; l < LANES; l++) {
        if (mx[l] > p->max) p->max = mx[l];
        if (mn[l] < p->min) p->min = mn[l];
    }
    p->sum += (s[0] + s[1]) + (s[2] + s[3]);
    p->sumsq += (q[0] + q[1]) + (q[2] + q[3]);
}

#define NONFINITE(p, v)                    \
    do {                                   \
        if (isnan(v)) (p)->nan++;          \
        else if ((v) > 0) (p)->pinf++;     \
        else (p)->ninf++;                  \
    } while (0)

/* x is (n,) float32 storage. Fast path first: a branch-free pass that the
 * compiler can vectorise, with FLANES lanes (element i goes to lane i %
 * FLANES) so the double accumulators form independent dependency chains.
 * Max/min and the finiteness check run in float (exact: converting to
 * double is monotonic); z accumulates (v - v), which is NaN as soon as one
 * element is NaN or infinite; only then the chunk is redone element by
 * element (slow path, lane i % FLANES for every element). A chunk takes
 * one path or the other depending only on its data, so results stay
 * deterministic. */
#define FLANES 8

static void fold_f32(part *p, const float *mx, const float *mn, const double *s,
                     const double *q)
{
    for (int l = 0; l < FLANES; l++) {
        if ((double)mx[l] > p->max) p->max = (double)mx[l];
        if ((double)mn[l] < p->min) p->min = (double)mn[l];
    }
    p->sum += ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    p->sumsq += ((q[0] + q[1]) + (q[2] + q[3])) + ((q[4] + q[5]) + (q[6] + q[7]));
}

static void lanes_init(float *mx, float *mn, double *s, double *q)
{
    for (int l = 0; l < FLANES; l++) {
        mx[l] = -INFINITY;
        mn[l] = INFINITY;
        s[l] = q[l] = 0.0;
    }
}

/* The portable fast path (any CPU). */
static int chunk_f32_fast_c(part *p, const float *x, int64_t n)
{
    float mx[FLANES], mn[FLANES];
    double s[FLANES], q[FLANES];
    lanes_init(mx, mn, s, q);
    /* Two passes over the chunk (it stays in L2). The float pass (max, min,
     * finiteness) is an OpenMP simd reduction: max and min are exact in any
     * order, and z (a sum of v - v, all 0 when finite) only tells whether
     * there is a NaN/Inf, so its order does not matter either. The double
     * pass (sum, sum of squares) keeps fixed lanes, so its order is fixed.
     * The lane arrays are only indexed by constants so they stay in
     * registers; the n % FLANES tail is added after the lanes are folded. */
    float fmx = -INFINITY, fmn = INFINITY, zs = 0.0f;
#pragma omp simd reduction(max : fmx) reduction(min : fmn) reduction(+ : zs)
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        zs += v - v;
        fmx = v > fmx ? v : fmx;
        fmn = v < fmn ? v : fmn;
    }
    if (isnan(zs))
        return 0;
    mx[0] = fmx;
    mn[0] = fmn;
    int64_t nb = n - n % FLANES;
    for (int64_t i = 0; i < nb; i += FLANES) {
        for (int l = 0; l < FLANES; l++) {
            double d = (double)x[i + l];
            s[l] += d;
            q[l] += d * d;
        }
    }
    p->nfin += n;
    fold_f32(p, mx, mn, s, q);
    for (int64_t i = nb; i < n; i++) {
        double d = (double)x[i];
        p->sum += d;
        p->sumsq += d * d;
    }
    return 1;
}

/* The same fast path in one pass with x86 vector registers: the FLANES
 * double lanes are one zmm (AVX-512) or two ymm (AVX2), element i still goes
 * to lane i % FLANES, each lane still adds its elements in index order
 * (multiply, then add: no fused multiply-add, -ffp-contract=off), the lanes
 * are folded by fold_f32 and the tail is added after, so the sums are the
 * same bits as chunk_f32_fast_c's on every CPU. Sums are computed while the
 * finiteness is checked; a chunk with a NaN/Inf throws them away (returns 0)
 * and takes the slow path, exactly as before. */
#if NP_STATS_X86
/* The arrays a vector register is stored into are declared with the
 * register's alignment (64 bytes for a zmm, 32 for a ymm). Left at a
 * double's alignment, GCC (12 and 14) raises it to 64 bytes itself when it
 * vectorises the loops that read them back (fold_f32, inlined) and then
 * stores with an aligned move (vmovapd); under AddressSanitizer with
 * use-after-return detection the function's locals live in a fake stack
 * frame whose layout does not honour that raised alignment (it does a
 * declared one), so the array sat 32 bytes off a 64-byte boundary and the
 * store faulted: the sanitized build on Debian 13, whose libasan turns the
 * detection on by default. tests/probe/test_probe_stats
 * runs with the detection on (docs/DEVELOPING.md, "Debian 12 and 13"). */
#define NP_ZMM_ALIGN _Alignas(64)
#define NP_YMM_ALIGN _Alignas(32)

/* Software prefetch distance in floats (2 KiB): tensors often come from
 * memory, not cache, and this made the pass ~1.5x faster there. */
#define PREFETCH 512

/* The end both vector kernels share: elements [i, n) into the finiteness
 * check and max/min, then (all finite) the lane sums sa/qa folded and the
 * elements past the last full block of lanes, [nb, n), added one by one.
 * Returns 0 when the chunk holds a NaN/Inf (the caller takes the slow path). */
static int fast_tail(part *p, const float *x, int64_t i, int64_t nb, int64_t n, float zs,
                     float fmx, float fmn, const double *sa, const double *qa)
{
    for (; i < n; i++) {
        float v = x[i];
        zs += v - v;
        fmx = v > fmx ? v : fmx;
        fmn = v < fmn ? v : fmn;
    }
    if (isnan(zs))
        return 0;
    float mx[FLANES], mn[FLANES];
    double unused_s[FLANES], unused_q[FLANES];
    lanes_init(mx, mn, unused_s, unused_q);
    mx[0] = fmx;
    mn[0] = fmn;
    p->nfin += n;
    fold_f32(p, mx, mn, sa, qa);
    for (i = nb; i < n; i++) {
        double d = (double)x[i];
        p->sum += d;
        p->sumsq += d * d;
    }
    return 1;
}

/* Whether the AVX-512 lane sums of a chunk's first n16 elements are all
 * finite: each lane adds every one of its elements, the sums of finite
 * float32 values (and of their squares: at most 65536 x 1.2e77) never
 * overflow a double, and a NaN or infinity, once added, never leaves
 * (x + NaN, Inf - Inf: NaN; Inf + finite: Inf). So "all lane sums
 * finite" is "all those elements finite", with no separate check. */
__attribute__((target("avx512f"))) static float lanes_finite_zs(__m512d s)
{
    NP_ZMM_ALIGN double l[FLANES];
    _mm512_storeu_pd(l, s);
    double z = 0.0;
    for (int k = 0; k < FLANES; k++)
        z += l[k] - l[k];
    return (float)z; /* 0, or NaN when one lane is not finite */
}

/* One block of 16 floats of a stream into its lanes (the order of
 * chunk_f32_fast_c: element i to lane i % FLANES, lo then hi). */
#define AVX512_BLOCK(x, i, s, q, vmx, vmn)                                  \
    do {                                                                    \
        __m512 v_ = _mm512_loadu_ps((x) + (i));                             \
        vmx = _mm512_max_ps(vmx, v_);                                       \
        vmn = _mm512_min_ps(vmn, v_);                                       \
        __m512d lo_ = _mm512_cvtps_pd(_mm256_loadu_ps((x) + (i)));          \
        __m512d hi_ = _mm512_cvtps_pd(_mm256_loadu_ps((x) + (i) + 8));      \
        s = _mm512_add_pd(s, lo_);                                          \
        q = _mm512_add_pd(q, _mm512_mul_pd(lo_, lo_));                      \
        s = _mm512_add_pd(s, hi_);                                          \
        q = _mm512_add_pd(q, _mm512_mul_pd(hi_, hi_));                      \
    } while (0)

__attribute__((target("avx512f"))) static int chunk_f32_fast_avx512(part *p, const float *x,
                                                                      int64_t n)
{
    __m512d s = _mm512_setzero_pd(), q = _mm512_setzero_pd();
    __m512 vmx = _mm512_set1_ps(-INFINITY), vmn = _mm512_set1_ps(INFINITY);
    int64_t nb = n - n % FLANES, n16 = n - n % 16, i = 0;
    for (; i < n16; i += 16) {
        if (i + PREFETCH < n)
            _mm_prefetch((const char *)(x + i + PREFETCH), _MM_HINT_T0);
        AVX512_BLOCK(x, i, s, q, vmx, vmn);
    }
    float zs = lanes_finite_zs(s);
    float fmx = _mm512_reduce_max_ps(vmx), fmn = _mm512_reduce_min_ps(vmn);
    if (i < nb) { /* one block of 8 left (its finiteness: fast_tail) */
        __m256 v = _mm256_loadu_ps(x + i);
        __m512d d = _mm512_cvtps_pd(v);
        s = _mm512_add_pd(s, d);
        q = _mm512_add_pd(q, _mm512_mul_pd(d, d));
    }
    NP_ZMM_ALIGN double sa[FLANES];
    NP_ZMM_ALIGN double qa[FLANES];
    _mm512_storeu_pd(sa, s);
    _mm512_storeu_pd(qa, q);
    return fast_tail(p, x, i, nb, n, zs, fmx, fmn, sa, qa);
}

/* Two whole chunks (CHUNK elements each, a multiple of 16) at once: the
 * same arithmetic per chunk as chunk_f32_fast_avx512 (so the same bits),
 * interleaved, so that the two chunks' dependency chains of double adds
 * (each lane adds its elements in order: 4 cycles an add) overlap. Bit k
 * of the result is set when chunk k was all finite and p[k] holds it. */
__attribute__((target("avx512f"))) static int chunk2_f32_fast_avx512(part *p, const float *x0,
                                                                       const float *x1)
{
    __m512d s0 = _mm512_setzero_pd(), q0 = s0, s1 = s0, q1 = s0;
    __m512 mx0 = _mm512_set1_ps(-INFINITY), mn0 = _mm512_set1_ps(INFINITY);
    __m512 mx1 = mx0, mn1 = mn0;
    for (int64_t i = 0; i < CHUNK; i += 16) {
        if (i + PREFETCH < CHUNK) {
            _mm_prefetch((const char *)(x0 + i + PREFETCH), _MM_HINT_T0);
            _mm_prefetch((const char *)(x1 + i + PREFETCH), _MM_HINT_T0);
        }
        AVX512_BLOCK(x0, i, s0, q0, mx0, mn0);
        AVX512_BLOCK(x1, i, s1, q1, mx1, mn1);
    }
    int ok = 0;
    const float *xs[2] = {x0, x1};
    __m512d ss[2] = {s0, s1}, qs[2] = {q0, q1};
    __m512 mxs[2] = {mx0, mx1}, mns[2] = {mn0, mn1};
    for (int k = 0; k < 2; k++) {
        NP_ZMM_ALIGN double sa[FLANES];
        NP_ZMM_ALIGN double qa[FLANES];
        _mm512_storeu_pd(sa, ss[k]);
        _mm512_storeu_pd(qa, qs[k]);
        part_init(&p[k]);
        if (fast_tail(&p[k], xs[k], CHUNK, CHUNK, CHUNK, lanes_finite_zs(ss[k]),
                      _mm512_reduce_max_ps(mxs[k]), _mm512_reduce_min_ps(mns[k]), sa, qa))
            ok |= 1 << k;
    }
    return ok;
}

__attribute__((target("avx2"))) static int chunk_f32_fast_avx2(part *p, const float *x,
                                                                 int64_t n)
{
    __m256d s0 = _mm256_setzero_pd(), s1 = s0, q0 = s0, q1 = s0;
    __m256 vmx = _mm256_set1_ps(-INFINITY), vmn = _mm256_set1_ps(INFINITY);
    __m256 z = _mm256_setzero_ps();
    int64_t nb = n - n % FLANES, i = 0;
    for (; i < nb; i += FLANES) {
        if (i % 16 == 0 && i + PREFETCH < n)
            _mm_prefetch((const char *)(x + i + PREFETCH), _MM_HINT_T0);
        __m256 v = _mm256_loadu_ps(x + i);
        z = _mm256_add_ps(z, _mm256_sub_ps(v, v));
        vmx = _mm256_max_ps(vmx, v);
        vmn = _mm256_min_ps(vmn, v);
        __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
        __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
        s0 = _mm256_add_pd(s0, lo);
        q0 = _mm256_add_pd(q0, _mm256_mul_pd(lo, lo));
        s1 = _mm256_add_pd(s1, hi);
        q1 = _mm256_add_pd(q1, _mm256_mul_pd(hi, hi));
    }
    NP_YMM_ALIGN float zl[8];
    NP_YMM_ALIGN float mxl[8];
    NP_YMM_ALIGN float mnl[8];
    _mm256_storeu_ps(zl, z);
    _mm256_storeu_ps(mxl, vmx);
    _mm256_storeu_ps(mnl, vmn);
    float zs = 0.0f, fmx = -INFINITY, fmn = INFINITY;
    for (int l = 0; l < 8; l++) {
        zs += zl[l];
        fmx = mxl[l] > fmx ? mxl[l] : fmx;
        fmn = mnl[l] < fmn ? mnl[l] : fmn;
    }
    NP_YMM_ALIGN double sa[FLANES];
    NP_YMM_ALIGN double qa[FLANES];
    _mm256_storeu_pd(sa, s0);
    _mm256_storeu_pd(sa + 4, s1);
    _mm256_storeu_pd(qa, q0);
    _mm256_storeu_pd(qa + 4, q1);
    return fast_tail(p, x, i, nb, n, zs, fmx, fmn, sa, qa);
}
#endif

#if NP_STATS_X86
/* The slow path (a chunk holding NaN/Inf: masked attention scores) in
 * vector registers: element i still goes to lane i % FLANES, each lane
 * adds its finite elements in index order (masked adds: a non-finite
 * element leaves the lane untouched, as the scalar loop skips it) and keeps
 * max/min as `v > mx ? v : mx` / `v < mn ? v : mn` do (the first operand
 * wins only when strictly greater/less); the tail goes one by one. Same
 * bits as chunk_f32's scalar loop. */
__attribute__((target("avx512f"))) static void chunk_f32_slow_avx512(part *p, const float *x,
                                                                      int64_t n)
{
    const __m512d inf = _mm512_set1_pd(INFINITY);
    __m512d s = _mm512_setzero_pd(), q = _mm512_setzero_pd();
    __m512d mx = _mm512_set1_pd(-INFINITY), mn = _mm512_set1_pd(INFINITY);
    int64_t nb = n - n % FLANES, nfin = 0, i = 0;
    for (; i < nb; i += FLANES) {
        __m512d d = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
        __mmask8 fin = _mm512_cmp_pd_mask(_mm512_abs_pd(d), inf, _CMP_LT_OQ);
        s = _mm512_mask_add_pd(s, fin, s, d);
        q = _mm512_mask_add_pd(q, fin, q, _mm512_mul_pd(d, d));
        mx = _mm512_mask_max_pd(mx, fin, d, mx);
        mn = _mm512_mask_min_pd(mn, fin, d, mn);
        nfin += __builtin_popcount((unsigned)fin);
        if (fin != 0xff) {
            p->nan += __builtin_popcount((unsigned)_mm512_cmp_pd_mask(d, d, _CMP_UNORD_Q));
            p->pinf += __builtin_popcount((unsigned)_mm512_cmp_pd_mask(d, inf, _CMP_EQ_OQ));
            p->ninf += __builtin_popcount(
                (unsigned)_mm512_cmp_pd_mask(d, _mm512_set1_pd(-INFINITY), _CMP_EQ_OQ));
        }
    }
    NP_ZMM_ALIGN double sl[FLANES];
    NP_ZMM_ALIGN double ql[FLANES];
    NP_ZMM_ALIGN double mxd[FLANES];
    NP_ZMM_ALIGN double mnd[FLANES];
    _mm512_storeu_pd(sl, s);
    _mm512_storeu_pd(ql, q);
    _mm512_storeu_pd(mxd, mx);
    _mm512_storeu_pd(mnd, mn);
    float mxl[FLANES], mnl[FLANES];
    for (int l = 0; l < FLANES; l++) {
        mxl[l] = (float)mxd[l]; /* exact: they are floats */
        mnl[l] = (float)mnd[l];
    }
    for (; i < n; i++) {
        int l = (int)(i % FLANES);
        float v = x[i];
        if (isfinite(v)) {
            double d = (double)v;
            sl[l] += d;
            ql[l] += d * d;
            mxl[l] = v > mxl[l] ? v : mxl[l];
            mnl[l] = v < mnl[l] ? v : mnl[l];
            nfin++;
        } else {
            NONFINITE(p, v);
        }
    }
    p->nfin += nfin;
    fold_f32(p, mxl, mnl, sl, ql);
}
#endif

static int simd_off; /* np_stats_force_portable */

void np_stats_force_portable(int on) { simd_off = on; }

static int chunk_f32_fast(part *p, const float *x, int64_t n)
{
#if NP_STATS_X86
    if (!simd_off) {
        if (__builtin_cpu_supports("avx512f"))
            return chunk_f32_fast_avx512(p, x, n);
        if (__builtin_cpu_supports("avx2"))
            return chunk_f32_fast_avx2(p, x, n);
    }
#endif
    return chunk_f32_fast_c(p, x, n);
}

static void chunk_f32(part *p, const float *x, int64_t n)
{
    if (chunk_f32_fast(p, x, n))
        return;
#if NP_STATS_X86
    if (!simd_off && __builtin_cpu_supports("avx512f")) {
        chunk_f32_slow_avx512(p, x, n);
        return;
    }
#endif
    float mx[FLANES], mn[FLANES];
    double s[FLANES], q[FLANES];
    lanes_init(mx, mn, s, q);
    int64_t nfin = 0;
    for (int64_t i = 0; i < n; i++) {
        int l = (int)(i % FLANES);
        float v = x[i];
        if (isfinite(v)) {
            double d = (double)v;
            s[l] += d;
            q[l] += d * d;
            mx[l] = v > mx[l] ? v : mx[l];
            mn[l] = v < mn[l] ? v : mn[l];
            nfin++;
        } else {
            NONFINITE(p, v);
        }
    }
    p->nfin += nfin;
    fold_f32(p, mx, mn, s, q);
}

/* x is (n,) float64 storage. */
static void chunk_f64(part *p, const double *x, int64_t n)
{
    double mx[LANES], mn[LANES], s[LANES] = {0}, q[LANES] = {0};
    for (int l = 0; l < LANES; l++) {
        mx[l] = -INFINITY;
        mn[l] = INFINITY;
    }
    int64_t nfin = 0;
    for (int64_t i = 0; i < n; i++) {
        int l = (int)(i % LANES);
        double d = x[i];
        if (isfinite(d)) {
            s[l] += d;
            q[l] += d * d;
            mx[l] = d > mx[l] ? d : mx[l];
            mn[l] = d < mn[l] ? d : mn[l];
            nfin++;
        } else {
            NONFINITE(p, d);
        }
    }
    p->nfin += nfin;
    fold(p, mx, mn, s, q);
}

#define CHUNK_INT(fname, type)                                              \
    static void fname(part *p, const type *x, int64_t n)                    \
    {                                                                       \
        double mx[LANES], mn[LANES], s[LANES] = {0}, q[LANES] = {0};        \
        for (int l = 0; l < LANES; l++) {                                   \
            mx[l] = -INFINITY;                                              \
            mn[l] = INFINITY;                                               \
        }                                                                   \
        for (int64_t i = 0; i < n; i++) {                                   \
            int l = (int)(i % LANES);                                       \
            double d = (double)x[i];                                        \
            s[l] += d;                                                      \
            q[l] += d * d;                                                  \
            mx[l] = d > mx[l] ? d : mx[l];                                  \
            mn[l] = d < mn[l] ? d : mn[l];                                  \
        }                                                                   \
        p->nfin += n;                                                       \
        fold(p, mx, mn, s, q);                                              \
    }
CHUNK_INT(chunk_i64, int64_t)
CHUNK_INT(chunk_i32, int32_t)
CHUNK_INT(chunk_u8, uint8_t)

static void run_chunk(part *p, np_dtype dt, const void *data, int64_t off, int64_t n,
                      int want_crc)
{
    size_t es = np_dtype_storage_size(dt);
    const unsigned char *bytes = (const unsigned char *)data + (size_t)off * es;
    part_init(p);
    switch (dt) {
    case NP_FLOAT32:
    case NP_BFLOAT16:
    case NP_FLOAT16:
    case NP_FLOAT8_E4M3FN:
    case NP_FLOAT8_E5M2:
    case NP_HIFLOAT8: chunk_f32(p, (const float *)(const void *)bytes, n); break;
    case NP_FLOAT64: chunk_f64(p, (const double *)(const void *)bytes, n); break;
    case NP_INT64: chunk_i64(p, (const int64_t *)(const void *)bytes, n); break;
    case NP_INT32: chunk_i32(p, (const int32_t *)(const void *)bytes, n); break;
    default: chunk_u8(p, bytes, n); break;
    }
    p->nbytes = (size_t)n * es;
    if (want_crc)
        p->crc = np_crc32(0, bytes, p->nbytes);
}

/* Chunks c and c + 1 (when there is one) into pp[0] and pp[1]; how many.
 * Two whole float chunks go through the interleaved kernel where the CPU
 * has it; the results are those of run_chunk on each, in any case. */
static int run_pair_stats(part *pp, np_dtype dt, const void *data, int64_t c, int64_t nchunks,
                          int64_t numel, int want_crc)
{
    int64_t off = c * CHUNK;
    int64_t n0 = numel - off < CHUNK ? numel - off : CHUNK;
    if (c + 1 >= nchunks) {
        run_chunk(&pp[0], dt, data, off, n0, want_crc);
        return 1;
    }
    int64_t n1 = numel - off - CHUNK < CHUNK ? numel - off - CHUNK : CHUNK;
#if NP_STATS_X86
    if ((dt == NP_FLOAT32 || dt == NP_BFLOAT16 || dt == NP_FLOAT16 || dt == NP_FLOAT8_E4M3FN ||
         dt == NP_FLOAT8_E5M2 || dt == NP_HIFLOAT8) && n1 == CHUNK &&
        !simd_off && __builtin_cpu_supports("avx512f")) {
        const float *x = (const float *)data + off;
        int ok = chunk2_f32_fast_avx512(pp, x, x + CHUNK);
        for (int k = 0; k < 2; k++) {
            if (!(ok & (1 << k))) {
                part_init(&pp[k]);
                chunk_f32(&pp[k], x + k * CHUNK, CHUNK);
            }
            pp[k].nbytes = (size_t)CHUNK * sizeof(float);
            if (want_crc)
                pp[k].crc = np_crc32(0, x + k * CHUNK, pp[k].nbytes);
        }
        return 2;
    }
#endif
    run_chunk(&pp[0], dt, data, off, n0, want_crc);
    run_chunk(&pp[1], dt, data, off + CHUNK, n1, want_crc);
    return 2;
}

/* chunk_extra: the extras of a float32 chunk x (n elements), read again right after the
 * statistics read it, while it is still in cache (a chunk is 256 KiB), so
 * the tensor comes from memory once: the count of elements equal to 0
 * (+0 and -0, as x == 0 compares) when ex->zeros, and, when ex->prev is
 * set, the sum of squares of x - prev over the finite differences (the
 * statistics' norm skips non-finite elements; so does this one). Each
 * difference is taken in double, where the difference of two floats is
 * exact unless their exponents are more than 28 apart (then it is the
 * rounding of it, still closer than a float32 subtraction); lane i %
 * FLANES and fold order as the statistics', so the sum is deterministic.
 * chunk_extra_c is the portable loop, chunk_extra_avx512 the same in zmm
 * registers.
 *
 * extra_fold: the lanes of the difference's squares folded (fold_f32's order), then the
 * elements past the last whole block of lanes, [nb, n), one by one. */
static double extra_fold(const double *q, const float *x, const float *prev, int64_t nb,
                         int64_t n)
{
    double t = ((q[0] + q[1]) + (q[2] + q[3])) + ((q[4] + q[5]) + (q[6] + q[7]));
    for (int64_t i = nb; i < n; i++) {
        double d = (double)x[i] - (double)prev[i];
        if (fabs(d) < INFINITY)
            t += d * d;
    }
    return t;
}

static void chunk_extra_c(part *p, const float *x, const float *prev, int64_t n, int zeros)
{
    if (zeros) {
        int32_t z = 0; /* n <= CHUNK */
#pragma omp simd reduction(+ : z)
        for (int64_t i = 0; i < n; i++)
            z += x[i] == 0.0f;
        p->zeros += z;
    }
    if (!prev)
        return;
    double q[FLANES] = {0};
    int64_t nb = n - n % FLANES;
    for (int64_t i = 0; i < nb; i += FLANES) {
        for (int l = 0; l < FLANES; l++) {
            double d = (double)x[i + l] - (double)prev[i + l];
            d = fabs(d) < INFINITY ? d : 0.0; /* NaN/Inf: skipped */
            q[l] += d * d;
        }
    }
    p->dsumsq += extra_fold(q, x, prev, nb, n);
}

#if NP_STATS_X86
/* chunk_extra_c in zmm registers (GCC does not vectorise the portable
 * loops well: 3.5 ns an element for the difference): the same lanes, the
 * same masked skip of non-finite differences, the same fold and tail, so
 * the same bits. */
__attribute__((target("avx512f"))) static void chunk_extra_avx512(part *p, const float *x,
                                                                   const float *prev, int64_t n,
                                                                   int zeros)
{
    int64_t i = 0, n16 = n - n % 16;
    if (zeros) {
        int64_t z = 0;
        const __m512 zero = _mm512_setzero_ps();
        for (; i < n16; i += 16)
            z += __builtin_popcount(
                (unsigned)_mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), zero, _CMP_EQ_OQ));
        for (; i < n; i++)
            z += x[i] == 0.0f;
        p->zeros += z;
    }
    if (!prev)
        return;
    const __m512d inf = _mm512_set1_pd(INFINITY);
    __m512d q = _mm512_setzero_pd();
    int64_t nb = n - n % FLANES;
    for (i = 0; i < nb; i += FLANES) {
        __m512d d = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + i)),
                                  _mm512_cvtps_pd(_mm256_loadu_ps(prev + i)));
        __mmask8 fin = _mm512_cmp_pd_mask(_mm512_abs_pd(d), inf, _CMP_LT_OQ);
        q = _mm512_mask_add_pd(q, fin, q, _mm512_mul_pd(d, d));
    }
    NP_ZMM_ALIGN double ql[FLANES];
    _mm512_storeu_pd(ql, q);
    p->dsumsq += extra_fold(ql, x, prev, nb, n);
}

/* The statistics and the extras of one float32 chunk in a single pass
 * (the package's monitor: np_probe_tensor_stats_f32), x and prev read once:
 * chunk_f32_fast_avx512's lanes, order and tail for the statistics, the
 * zeros counted from a compare mask per 16 elements, and the difference's
 * squares added to their lanes without chunk_extra_avx512's finiteness
 * mask: a non-finite difference (x or prev not finite) leaves its lane sum
 * NaN or +Inf for good (the squares are >= 0, so no Inf - Inf), and a
 * finite one adds what the masked add would; a finite difference of two
 * floats squared is at most 4.7e77, so 8192 of them in a lane never
 * overflow. So: all lanes finite, the same bits as the masked loop; else
 * the chunk's norm is redone by chunk_extra_avx512 (as the statistics are
 * by the slow path when x holds a NaN/Inf). Same results as run_chunk +
 * chunk_extra, bit for bit (test_probe_stats). has_prev is a constant at
 * each call (the loop without the difference when there is none). */
__attribute__((target("avx512f"), always_inline)) static inline void
chunk_mon_avx512_body(part *p, const float *x, const float *prev, int64_t n, int zeros,
                      int has_prev)
{
    __m512d s = _mm512_setzero_pd(), q = s, dq = s;
    __m512 vmx = _mm512_set1_ps(-INFINITY), vmn = _mm512_set1_ps(INFINITY);
    const __m512 zero = _mm512_setzero_ps();
    int64_t nb = n - n % FLANES, n16 = n - n % 16, i = 0, z = 0;
    for (; i < n16; i += 16) {
        if (i + PREFETCH < n) {
            _mm_prefetch((const char *)(x + i + PREFETCH), _MM_HINT_T0);
            if (has_prev)
                _mm_prefetch((const char *)(prev + i + PREFETCH), _MM_HINT_T0);
        }
        __m512 v = _mm512_loadu_ps(x + i);
        vmx = _mm512_max_ps(vmx, v);
        vmn = _mm512_min_ps(vmn, v);
        if (zeros)
            z += __builtin_popcount((unsigned)_mm512_cmp_ps_mask(v, zero, _CMP_EQ_OQ));
        __m512d lo = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
        __m512d hi = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8));
        s = _mm512_add_pd(s, lo);
        q = _mm512_add_pd(q, _mm512_mul_pd(lo, lo));
        s = _mm512_add_pd(s, hi);
        q = _mm512_add_pd(q, _mm512_mul_pd(hi, hi));
        if (has_prev) {
            __m512d dlo = _mm512_sub_pd(lo, _mm512_cvtps_pd(_mm256_loadu_ps(prev + i)));
            __m512d dhi = _mm512_sub_pd(hi, _mm512_cvtps_pd(_mm256_loadu_ps(prev + i + 8)));
            dq = _mm512_add_pd(dq, _mm512_mul_pd(dlo, dlo));
            dq = _mm512_add_pd(dq, _mm512_mul_pd(dhi, dhi));
        }
    }
    float zs = lanes_finite_zs(s);
    float fmx = _mm512_reduce_max_ps(vmx), fmn = _mm512_reduce_min_ps(vmn);
    if (i < nb) { /* one block of 8 left (its finiteness: fast_tail) */
        __m512d d = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
        s = _mm512_add_pd(s, d);
        q = _mm512_add_pd(q, _mm512_mul_pd(d, d));
        if (has_prev) {
            __m512d dd = _mm512_sub_pd(d, _mm512_cvtps_pd(_mm256_loadu_ps(prev + i)));
            dq = _mm512_add_pd(dq, _mm512_mul_pd(dd, dd));
        }
    }
    if (zeros) {
        for (int64_t k = n16; k < n; k++)
            z += x[k] == 0.0f;
        p->zeros += z;
    }
    NP_ZMM_ALIGN double sa[FLANES];
    NP_ZMM_ALIGN double qa[FLANES];
    _mm512_storeu_pd(sa, s);
    _mm512_storeu_pd(qa, q);
    if (!fast_tail(p, x, i, nb, n, zs, fmx, fmn, sa, qa))
        chunk_f32_slow_avx512(p, x, n);
    if (has_prev) {
        if (isnan(lanes_finite_zs(dq))) {
            chunk_extra_avx512(p, x, prev, n, 0);
        } else {
            NP_ZMM_ALIGN double dl[FLANES];
            _mm512_storeu_pd(dl, dq);
            p->dsumsq += extra_fold(dl, x, prev, nb, n);
        }
    }
}

__attribute__((target("avx512f"))) static void chunk_mon_avx512(part *p, const float *x,
                                                                 const float *prev, int64_t n,
                                                                 int zeros)
{
    if (prev)
        chunk_mon_avx512_body(p, x, prev, n, zeros, 1);
    else
        chunk_mon_avx512_body(p, x, NULL, n, zeros, 0);
}
#endif

static void chunk_extra(part *p, const float *x, const float *prev, int64_t n, int zeros)
{
#if NP_STATS_X86
    if (!simd_off && __builtin_cpu_supports("avx512f")) {
        chunk_extra_avx512(p, x, prev, n, zeros);
        return;
    }
#endif
    chunk_extra_c(p, x, prev, n, zeros);
}

/* Adam's update derived from what the optimizer holds after its step (the
 * package's monitor: np_probe_tensor_stats_f32_adam): per element, in
 * float32, u = A * m / (sqrt(v) * B + E) + K * x (coef = A, K, B, E), its
 * square added in double to lane i % FLANES, a non-finite u skipped (as the
 * difference norm skips a non-finite difference); the lanes folded as
 * extra_fold's, then the tail one by one. The AVX-512 loop fuses sqrt(v) *
 * B + E (one rounding less than the portable loop): the two paths agree to
 * a few float32 roundings of u, not bit for bit. */
static inline float adam_u(float x, float m, float v, const float *c)
{
    return c[0] * (m / (sqrtf(v) * c[2] + c[3])) + c[1] * x;
}

static double adam_fold(const double *q, const float *x, const float *m, const float *v,
                        int64_t nb, int64_t n, const float *c)
{
    double t = ((q[0] + q[1]) + (q[2] + q[3])) + ((q[4] + q[5]) + (q[6] + q[7]));
    for (int64_t i = nb; i < n; i++) {
        double d = (double)adam_u(x[i], m[i], v[i], c);
        if (fabs(d) < INFINITY)
            t += d * d;
    }
    return t;
}

static void chunk_adam_c(part *p, const float *x, const float *m, const float *v, int64_t n,
                         const float *c)
{
    double q[FLANES] = {0};
    int64_t nb = n - n % FLANES;
    for (int64_t i = 0; i < nb; i += FLANES) {
        for (int l = 0; l < FLANES; l++) {
            double d = (double)adam_u(x[i + l], m[i + l], v[i + l], c);
            d = fabs(d) < INFINITY ? d : 0.0;
            q[l] += d * d;
        }
    }
    p->dsumsq += adam_fold(q, x, m, v, nb, n, c);
}

#if NP_STATS_X86
__attribute__((target("avx512f"))) static void chunk_adam_avx512(part *p, const float *x,
                                                                  const float *m, const float *v,
                                                                  int64_t n, const float *c)
{
    const __m512 a = _mm512_set1_ps(c[0]), k = _mm512_set1_ps(c[1]), b = _mm512_set1_ps(c[2]),
                 e = _mm512_set1_ps(c[3]);
    const __m512 h = _mm512_set1_ps(0.5f), th = _mm512_set1_ps(1.5f), two = _mm512_set1_ps(2.0f);
    __m512d q = _mm512_setzero_pd();
    int64_t nb = n - n % FLANES, i = 0;
    for (; i + 16 <= nb; i += 16) {
        /* sqrt(v) as v * rsqrt(v) and 1 / den by rcp, each estimate (2^-14)
         * refined by one Newton step (about 2^-23 after it): no sqrt or
         * divide, whose throughput bound the loop (2 ms of 4.7 M elements);
         * v = 0 gives 0 (not 0 * inf), a NaN v NaN */
        __m512 vv = _mm512_loadu_ps(v + i);
        __m512 r = _mm512_rsqrt14_ps(vv);
        r = _mm512_mul_ps(r, _mm512_fnmadd_ps(_mm512_mul_ps(h, vv), _mm512_mul_ps(r, r), th));
        __m512 sq = _mm512_maskz_mul_ps(_mm512_cmp_ps_mask(vv, _mm512_setzero_ps(), _CMP_NEQ_UQ),
                                        vv, r);
        __m512 den = _mm512_fmadd_ps(sq, b, e);
        __m512 ri = _mm512_rcp14_ps(den);
        ri = _mm512_mul_ps(ri, _mm512_fnmadd_ps(den, ri, two));
        __m512 u = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_loadu_ps(m + i), ri), a,
                                   _mm512_mul_ps(_mm512_loadu_ps(x + i), k));
        __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(u));
        __m512d hi = _mm512_cvtps_pd(
            _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(u), 1)));
        /* no finiteness mask: a non-finite u leaves its lane NaN or +Inf
         * (squares >= 0), and then the chunk is redone by the portable
         * loop, which skips it (chunk_mon_avx512's way) */
        q = _mm512_fmadd_pd(lo, lo, q);
        q = _mm512_fmadd_pd(hi, hi, q);
    }
    NP_ZMM_ALIGN double ql[FLANES];
    _mm512_storeu_pd(ql, q);
    if (isnan(lanes_finite_zs(q))) {
        chunk_adam_c(p, x, m, v, n, c);
        return;
    }
    for (; i < nb; i += FLANES) { /* one block of 8 left */
        for (int l = 0; l < FLANES; l++) {
            double d = (double)adam_u(x[i + l], m[i + l], v[i + l], c);
            ql[l] += fabs(d) < INFINITY ? d * d : 0.0;
        }
    }
    p->dsumsq += adam_fold(ql, x, m, v, nb, n, c);
}
#endif

static void chunk_adam(part *p, const float *x, const float *m, const float *v, int64_t n,
                       const double *coef)
{
    const float c[4] = {(float)coef[0], (float)coef[1], (float)coef[2], (float)coef[3]};
#if NP_STATS_X86
    if (!simd_off && __builtin_cpu_supports("avx512f")) {
        chunk_adam_avx512(p, x, m, v, n, c);
        return;
    }
#endif
    chunk_adam_c(p, x, m, v, n, c);
}

/* run_pair_stats, then the extras of each chunk it did (ex NULL: none;
 * float32 storage only, as np_stats_compute_ex checks). */
static int run_pair(part *pp, np_dtype dt, const void *data, int64_t c, int64_t nchunks,
                    int64_t numel, int want_crc, const np_stats_extra *ex)
{
#if NP_STATS_X86
    if (ex && !simd_off && __builtin_cpu_supports("avx512f")) {
        /* statistics and extras in one pass (chunk_mon_avx512) */
        int m = c + 1 < nchunks ? 2 : 1;
        for (int k = 0; k < m; k++) {
            int64_t off = (c + k) * CHUNK;
            int64_t n = numel - off < CHUNK ? numel - off : CHUNK;
            const float *x = (const float *)data + off;
            part_init(&pp[k]);
            chunk_mon_avx512(&pp[k], x, ex->prev ? ex->prev + off : NULL, n, ex->zeros);
            if (ex->m) /* the chunk again, from L2 */
                chunk_adam(&pp[k], x, ex->m + off, ex->v + off, n, ex->coef);
            pp[k].nbytes = (size_t)n * sizeof(float);
            if (want_crc)
                pp[k].crc = np_crc32(0, x, pp[k].nbytes);
        }
        return m;
    }
#endif
    int m = run_pair_stats(pp, dt, data, c, nchunks, numel, want_crc);
    if (ex) {
        for (int k = 0; k < m; k++) {
            int64_t off = (c + k) * CHUNK;
            int64_t n = numel - off < CHUNK ? numel - off : CHUNK;
            chunk_extra(&pp[k], (const float *)data + off, ex->prev ? ex->prev + off : NULL, n,
                        ex->zeros);
            if (ex->m)
                chunk_adam(&pp[k], (const float *)data + off, ex->m + off, ex->v + off, n,
                           ex->coef);
        }
    }
    return m;
}

static void combine(part *acc, const part *p, int want_crc)
{
    if (p->max > acc->max) acc->max = p->max;
    if (p->min < acc->min) acc->min = p->min;
    acc->sum += p->sum;
    acc->sumsq += p->sumsq;
    acc->dsumsq += p->dsumsq;
    acc->zeros += p->zeros;
    acc->nfin += p->nfin;
    acc->nan += p->nan;
    acc->pinf += p->pinf;
    acc->ninf += p->ninf;
    if (want_crc)
        acc->crc = (uint32_t)crc32_combine(acc->crc, p->crc, (z_off_t)p->nbytes);
    acc->nbytes += p->nbytes;
}

void np_stats_compute(np_probe_stats *st, uint32_t *crc, np_dtype dt, const void *data,
                      int64_t numel, np_stats_scratch *scratch)
{
    np_stats_compute_ex(st, crc, dt, data, numel, scratch, NULL);
}

void np_stats_compute_ex(np_probe_stats *st, uint32_t *crc, np_dtype dt, const void *data,
                         int64_t numel, np_stats_scratch *scratch, np_stats_extra *ex)
{
    int want_crc = crc != NULL;
    if (ex && np_dtype_storage_size(dt) != sizeof(float))
        ex = NULL; /* the extras read float32 storage only (their outputs stay 0) */
    part acc;
    part_init(&acc);
    if (numel > 0 && data) {
        int64_t nchunks = (numel + CHUNK - 1) / CHUNK;
        part *parts = NULL;
        if (nchunks >= PAR_MIN_CHUNKS && scratch) {
            size_t need = (size_t)nchunks * sizeof(part);
            if (scratch->cap < need) {
                void *nb = realloc(scratch->buf, need);
                if (nb) {
                    scratch->buf = nb;
                    scratch->cap = need;
                }
            }
            if (scratch->cap >= need)
                parts = scratch->buf;
        }
        if (parts) {
#pragma omp parallel for schedule(static)
            for (int64_t c2 = 0; c2 < (nchunks + 1) / 2; c2++)
                run_pair(&parts[2 * c2], dt, data, 2 * c2, nchunks, numel, want_crc, ex);
            for (int64_t c = 0; c < nchunks; c++)
                combine(&acc, &parts[c], want_crc);
        } else if (want_crc && numel * (int64_t)np_dtype_storage_size(dt) >= CRC_PAR_MIN_BYTES) {
            /* A few chunks: the statistics and the crc32 run side by side on
             * two threads (same chunking and order as below, same results). */
            uint32_t whole = 0;
#pragma omp parallel sections num_threads(2) if (omp_get_max_threads() > 1)
            {
#pragma omp section
                for (int64_t c = 0; c < nchunks; c += 2) {
                    part pp[2];
                    int m = run_pair(pp, dt, data, c, nchunks, numel, 0, ex);
                    for (int k = 0; k < m; k++)
                        combine(&acc, &pp[k], 0);
                }
#pragma omp section
                whole = np_crc32(0, data,
                                          (size_t)numel * np_dtype_storage_size(dt));
            }
            acc.crc = whole;
        } else {
            for (int64_t c = 0; c < nchunks; c += 2) {
                part pp[2];
                int m = run_pair(pp, dt, data, c, nchunks, numel, want_crc, ex);
                for (int k = 0; k < m; k++)
                    combine(&acc, &pp[k], want_crc);
            }
        }
    }
    st->nan_count = acc.nan;
    st->posinf_count = acc.pinf;
    st->neginf_count = acc.ninf;
    if (acc.nfin > 0) {
        st->max = acc.max;
        st->min = acc.min;
        st->mean = acc.sum / (double)acc.nfin;
        st->norm = sqrt(acc.sumsq);
    } else {
        st->max = st->min = st->mean = st->norm = NAN;
    }
    if (crc)
        *crc = acc.crc;
    if (ex) {
        ex->zeros_out = acc.zeros;
        ex->diff_sumsq_out = acc.dsumsq;
    }
}

void np_stats_scratch_free(np_stats_scratch *s)
{
    if (!s)
        return;
    free(s->buf);
    s->buf = NULL;
    s->cap = 0;
}

void np_probe_tensor_stats(np_probe_stats *out, uint32_t *crc, np_dtype dt, const void *data,
                           int64_t numel)
{
    np_stats_scratch s = {NULL, 0};
    np_stats_compute(out, crc, dt, data, numel, &s);
    np_stats_scratch_free(&s);
}

void np_probe_tensor_stats_f32(np_probe_stats *out, int64_t *zeros, double *diff_norm,
                               const float *data, const float *before, int64_t numel)
{
    np_stats_scratch s = {NULL, 0};
    np_stats_extra ex = {.prev = before, .zeros = zeros != NULL};
    np_stats_compute_ex(out, NULL, NP_FLOAT32, data, numel, &s, &ex);
    np_stats_scratch_free(&s);
    if (zeros)
        *zeros = ex.zeros_out;
    if (diff_norm)
        *diff_norm = before ? sqrt(ex.diff_sumsq_out) : NAN;
}

/* dst = src (n floats) with stores that bypass the cache where the CPU has
 * AVX-512 (a snapshot written now and read after the optimizer's step has
 * streamed its state through the cache: no read of dst's lines first, no
 * eviction of what the step will read next) */
#if NP_STATS_X86
__attribute__((target("avx512f"))) static void copy_stream_avx512(float *dst, const float *src,
                                                                   int64_t n)
{
    int64_t i = 0;
    for (; i < n && ((uintptr_t)(dst + i) & 63); i++)
        dst[i] = src[i];
    for (; i + 16 <= n; i += 16) {
        if (i + PREFETCH < n)
            _mm_prefetch((const char *)(src + i + PREFETCH), _MM_HINT_T0);
        _mm512_stream_ps(dst + i, _mm512_loadu_ps(src + i));
    }
    for (; i < n; i++)
        dst[i] = src[i];
    _mm_sfence();
}
#endif

static void copy_f32(float *dst, const float *src, int64_t n)
{
#if NP_STATS_X86
    if (!simd_off && ((uintptr_t)dst & 3) == 0 && __builtin_cpu_supports("avx512f")) {
        copy_stream_avx512(dst, src, n);
        return;
    }
#endif
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void np_probe_tensor_stats_f32_many(np_probe_stats *out, int64_t *zeros, double *diff_norm,
                                    const float *const *data, const float *const *before,
                                    const int64_t *numel, int64_t count,
                                    const float *const *copy_src, float *const *copy_dst)
{
    np_stats_scratch s = {NULL, 0};
    for (int64_t k = 0; k < count; k++) {
        const float *b = before ? before[k] : NULL;
        np_stats_extra ex = {.prev = b, .zeros = zeros != NULL};
        np_stats_compute_ex(&out[k], NULL, NP_FLOAT32, data[k], numel[k], &s, &ex);
        if (zeros)
            zeros[k] = ex.zeros_out;
        if (diff_norm)
            diff_norm[k] = b ? sqrt(ex.diff_sumsq_out) : NAN;
        if (copy_src && copy_src[k] && copy_dst && copy_dst[k] && numel[k] > 0)
            copy_f32(copy_dst[k], copy_src[k], numel[k]);
    }
    np_stats_scratch_free(&s);
}

void np_probe_tensor_stats_f32_adam(np_probe_stats *out, int64_t *zeros, double *upd_norm,
                                    const float *const *data, const float *const *m,
                                    const float *const *v, const double *coef,
                                    const int64_t *numel, int64_t count, np_probe_stats *mv_out,
                                    int64_t *mv_zeros)
{
    np_stats_scratch s = {NULL, 0};
    for (int64_t k = 0; k < count; k++) {
        np_stats_extra ex = {.zeros = zeros != NULL, .m = m[k], .v = v[k], .coef = coef + 4 * k};
        if (!ex.m || !ex.v)
            ex.m = ex.v = NULL;
        for (int j = 0; mv_out && j < 2; j++) { /* m, v first: read again below from cache */
            np_stats_extra e2 = {.zeros = mv_zeros != NULL};
            np_stats_compute_ex(&mv_out[2 * k + j], NULL, NP_FLOAT32, j ? v[k] : m[k], numel[k],
                                &s, &e2);
            if (mv_zeros)
                mv_zeros[2 * k + j] = e2.zeros_out;
        }
        np_stats_compute_ex(&out[k], NULL, NP_FLOAT32, data[k], numel[k], &s, &ex);
        if (zeros)
            zeros[k] = ex.zeros_out;
        if (upd_norm)
            upd_norm[k] = ex.m ? sqrt(ex.diff_sumsq_out) : NAN;
    }
    np_stats_scratch_free(&s);
}
