/* tests/probe/test_probe_stats.c - the probe's one-pass statistics and crc32
 * against independent references: a plain float64 loop over the finite
 * elements and zlib's crc32 over the whole buffer, on crafted tensors (empty,
 * one element, all NaN, mixed +-Inf, bf16/fp16-rounded values, float64 and
 * integer storage) and on a large tensor cut into parallel chunks, whose
 * result must not depend on the thread count. The float32 sums must also be
 * exactly the documented order (docs/FORMAT.md: 8 lanes, element i in lane
 * i % 8, lanes folded pairwise, the n % 8 tail after), on the vector path
 * chosen for this CPU and on the portable one. Under ASan the kernels run in
 * fake stack frames, whatever the libasan's default. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "check.h"
#include "nprobe/probe.h"

#if defined(__SANITIZE_ADDRESS__)
/* In the sanitized pass every frame goes to ASan's fake stack (use-after-
 * return detection), on Debian 12 too: GCC 13+'s libasan (Debian 13) does it
 * by default, GCC 12's (Debian 12) not, and the vector kernels' lane arrays
 * once faulted only there (probe/stats.c, NP_ZMM_ALIGN). ASAN_OPTIONS still
 * wins where it names the option. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "detect_stack_use_after_return=1"; }
#endif

/* probe/probe_internal.h: 1 forces the portable statistics kernel. */
void np_stats_force_portable(int on);

typedef struct ref {
    double max, min, mean, norm;
    long long nan, pinf, ninf;
} ref;

/* Reference over doubles: finite elements only, naive sequential sums. */
static ref reference(const double *x, size_t n)
{
    ref r = {NAN, NAN, NAN, NAN, 0, 0, 0};
    double s = 0, q = 0, mx = -INFINITY, mn = INFINITY;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(x[i])) { r.nan++; continue; }
        if (isinf(x[i])) { if (x[i] > 0) r.pinf++; else r.ninf++; continue; }
        s += x[i];
        q += x[i] * x[i];
        if (x[i] > mx) mx = x[i];
        if (x[i] < mn) mn = x[i];
        k++;
    }
    if (k) {
        r.max = mx;
        r.min = mn;
        r.mean = s / (double)k;
        r.norm = sqrt(q);
    }
    return r;
}

static void check_f32(const float *x, size_t n, np_dtype dt, const char *what)
{
    double *d = malloc((n ? n : 1) * sizeof *d);
    for (size_t i = 0; i < n; i++)
        d[i] = x[i];
    ref r = reference(d, n);
    np_probe_stats st;
    uint32_t crc = 12345;
    np_probe_tensor_stats(&st, &crc, dt, x, (int64_t)n);
    fprintf(stderr, "case %s (n=%zu)\n", what, n);
    CHECK_EQ_FLOAT(st.max, r.max);
    CHECK_EQ_FLOAT(st.min, r.min);
    CHECK_CLOSE(st.mean, r.mean, 1e-300, 1e-12);
    CHECK_CLOSE(st.norm, r.norm, 1e-300, 1e-12);
    CHECK_EQ_INT(st.nan_count, r.nan);
    CHECK_EQ_INT(st.posinf_count, r.pinf);
    CHECK_EQ_INT(st.neginf_count, r.ninf);
    uint32_t want = (uint32_t)crc32(0L, (const Bytef *)x, (uInt)(n * sizeof(float)));
    CHECK_EQ_INT(crc, want);
    free(d);
}

/* np_probe_tensor_stats_f32 on x (and b, the "before" array, or NULL)
 * against float64: the statistics must be np_probe_tensor_stats' bits, the
 * zero count that of x[i] == 0, the difference norm sqrt of the sum of
 * (double)x - (double)b squared over the finite differences. */
static void check_extras(const float *x, const float *b, size_t n, const char *what)
{
    long long zeros = 0;
    double q = 0.0;
    for (size_t i = 0; i < n; i++) {
        zeros += x[i] == 0.0f;
        if (b) {
            double d = (double)x[i] - (double)b[i];
            if (isfinite(d))
                q += d * d;
        }
    }
    np_probe_stats st, ref_st;
    int64_t z = -1;
    double dn = -1.0;
    fprintf(stderr, "extras %s (n=%zu)\n", what, n);
    np_probe_tensor_stats_f32(&st, &z, &dn, x, b, (int64_t)n);
    np_probe_tensor_stats(&ref_st, NULL, NP_FLOAT32, x, (int64_t)n);
    CHECK(memcmp(&st, &ref_st, sizeof st) == 0);
    CHECK_EQ_INT(z, zeros);
    if (b)
        CHECK_CLOSE(dn, sqrt(q), 1e-300, 1e-12);
    else
        CHECK(isnan(dn));
    /* no zero count asked, no norm asked: the statistics alone */
    np_probe_tensor_stats_f32(&st, NULL, NULL, x, b, (int64_t)n);
    CHECK(memcmp(&st, &ref_st, sizeof st) == 0);
}

static void test_extras(void)
{
    const float sub = 1.4e-45f; /* the least subnormal */
    float x[19] = {0.0f, -0.0f, 1.0f, NAN, INFINITY, -INFINITY, sub, -sub, 3.5f, 0.0f,
                   1e30f, -2.0f, 0.0f, 1.17549435e-38f, 7.0f, -0.0f, 2.5e-42f, 1e-3f, 4.0f};
    float b[19] = {0.0f, 1.0f, 1.0f, 2.0f, 1.0f, 3.0f, 0.0f, sub, INFINITY, NAN,
                   -1e30f, -2.5f, sub, 0.0f, 7.0f, 1e-7f, 0.0f, 1e-3f, -4.0f};
    check_extras(NULL, NULL, 0, "empty");
    check_extras(x, NULL, 19, "zeros, NaN, Inf, subnormals");
    check_extras(x, b, 19, "the same, minus b");
    check_extras(x, b, 7, "a block short of 8");
    check_extras(x + 1, b + 3, 16, "unaligned");
    /* by hand: x = {0, -0, 3}, b = {0, 4, 3}: 2 zeros, |x - b| = 4, |x| = 3 */
    {
        const float hx[3] = {0.0f, -0.0f, 3.0f}, hb[3] = {0.0f, 4.0f, 3.0f};
        np_probe_stats st;
        int64_t z = 0;
        double dn = 0.0;
        np_probe_tensor_stats_f32(&st, &z, &dn, hx, hb, 3);
        CHECK_EQ_INT(z, 2);
        CHECK_EQ_FLOAT(dn, 4.0);
        CHECK_EQ_FLOAT(st.norm, 3.0);
        CHECK_EQ_FLOAT(st.mean, 1.0);
    }
    /* many chunks (the parallel path, a partial last chunk): same bits on
     * 1 and 2 threads and on the portable kernel */
    size_t n = getenv("NP_SANITIZED") ? 300001 : 1500007;
    float *y = malloc(n * sizeof *y), *w = malloc(n * sizeof *w);
    uint32_t s = 7;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        y[i] = (s >> 28) == 0 ? 0.0f : ((float)(s >> 8) / 16777216.0f - 0.5f);
        w[i] = y[i] + ((float)(s & 255) - 128.0f) * 1e-6f;
    }
    y[70001] = NAN;
    w[5] = INFINITY;
    check_extras(y, w, n, "large");
    np_probe_stats a, c;
    int64_t za, zc;
    double da, dc;
    omp_set_num_threads(1);
    np_probe_tensor_stats_f32(&a, &za, &da, y, w, (int64_t)n);
    omp_set_num_threads(2);
    np_probe_tensor_stats_f32(&c, &zc, &dc, y, w, (int64_t)n);
    CHECK(memcmp(&a, &c, sizeof a) == 0 && za == zc && memcmp(&da, &dc, sizeof da) == 0);
    np_stats_force_portable(1);
    np_probe_tensor_stats_f32(&c, &zc, &dc, y, w, (int64_t)n);
    np_stats_force_portable(0);
    CHECK(memcmp(&a, &c, sizeof a) == 0 && za == zc && memcmp(&da, &dc, sizeof da) == 0);
    free(y);
    free(w);
}

/* One np_probe_tensor_stats_f32_many call over tensors xs[k] (bs[k] the
 * "before" array or NULL) against one np_probe_tensor_stats_f32 call each
 * on the portable kernel (chunk_f32_fast_c + chunk_extra_c: the order the
 * vector kernels must keep), bit for bit; and the copies cs[k] -> ds[k]
 * made in the same call equal to their sources. */
static void check_many(const float *const *xs, const float *const *bs, const int64_t *ns,
                       int count, const float *const *cs, float *const *ds, const char *what)
{
    np_probe_stats st[8], ref_st;
    int64_t z[8], ref_z;
    double dn[8], ref_dn;
    fprintf(stderr, "many %s (%d tensors)\n", what, count);
    np_probe_tensor_stats_f32_many(st, z, dn, xs, bs, ns, count, cs, ds);
    for (int k = 0; k < count; k++) {
        np_stats_force_portable(1);
        np_probe_tensor_stats_f32(&ref_st, &ref_z, &ref_dn, xs[k], bs ? bs[k] : NULL, ns[k]);
        np_stats_force_portable(0);
        CHECK(memcmp(&st[k], &ref_st, sizeof ref_st) == 0);
        CHECK_EQ_INT(z[k], ref_z);
        CHECK(memcmp(&dn[k], &ref_dn, sizeof ref_dn) == 0 || (isnan(dn[k]) && isnan(ref_dn)));
        if (cs && cs[k])
            CHECK(memcmp(ds[k], cs[k], (size_t)ns[k] * sizeof(float)) == 0);
    }
}

static void test_many(void)
{
    /* by hand: x = {1, 0, -2, 3}, b = {1, 1, -2, 0}: 1 zero, |x| = sqrt(14),
     * mean 0.5, |x - b| = sqrt(0 + 1 + 0 + 9); the second tensor has no
     * before (NaN), the third is empty */
    {
        const float x[4] = {1.0f, 0.0f, -2.0f, 3.0f}, b[4] = {1.0f, 1.0f, -2.0f, 0.0f};
        const float y[2] = {-0.0f, 5.0f};
        const float *xs[3] = {x, y, NULL}, *bs[3] = {b, NULL, NULL};
        const int64_t ns[3] = {4, 2, 0};
        np_probe_stats st[3];
        int64_t z[3];
        double dn[3];
        np_probe_tensor_stats_f32_many(st, z, dn, xs, bs, ns, 3, NULL, NULL);
        CHECK_EQ_INT(z[0], 1);
        CHECK_EQ_FLOAT(st[0].norm, sqrt(14.0));
        CHECK_EQ_FLOAT(st[0].mean, 0.5);
        CHECK_EQ_FLOAT(st[0].max, 3.0);
        CHECK_EQ_FLOAT(st[0].min, -2.0);
        CHECK_EQ_FLOAT(dn[0], sqrt(10.0));
        CHECK_EQ_INT(z[1], 1);
        CHECK_EQ_FLOAT(st[1].norm, 5.0);
        CHECK(isnan(dn[1]));
        CHECK_EQ_INT(z[2], 0);
        CHECK(isnan(st[2].norm) && isnan(dn[2]));
    }
    /* differences as large as float32 allows: each is finite in double and
     * so is the sum of their squares (3 x (6.8e38)^2 = 1.4e78), so the
     * one-pass sum holds: 0 NaN/Inf, the norm sqrt(3) x 6.8e38 */
    {
        const float big = 3.4e38f;
        float x[24], b[24];
        for (int i = 0; i < 24; i++) {
            x[i] = i < 3 ? big : 1.0f;
            b[i] = i < 3 ? -big : 1.0f;
        }
        const float *xs[1] = {x}, *bs[1] = {b};
        const int64_t ns[1] = {24};
        np_probe_stats st;
        int64_t z;
        double dn;
        np_probe_tensor_stats_f32_many(&st, &z, &dn, xs, bs, ns, 1, NULL, NULL);
        CHECK_EQ_INT(st.nan_count + st.posinf_count + st.neginf_count, 0);
        CHECK_CLOSE(dn, sqrt(3.0) * 2.0 * (double)big, 0.0, 1e-15);
        CHECK_EQ_INT(z, 0);
        check_many(xs, bs, ns, 1, NULL, NULL, "the largest differences");
    }
    /* tails of every kind, a chunk with a NaN in x, one with an Inf or a NaN
     * only in before (its difference norm redone with the mask), two and
     * five chunks (the parallel path), copies beside them (one to an
     * unaligned destination) */
    const int64_t sizes[7] = {5, 8, 15, 16, 24, 65536 + 24, 5 * 65536 + 13};
    float *x[7], *b[7], *c[7], *d[7];
    uint32_t s = 11;
    for (int k = 0; k < 7; k++) {
        int64_t n = sizes[k];
        x[k] = malloc((size_t)n * sizeof(float));
        b[k] = malloc((size_t)n * sizeof(float));
        c[k] = malloc((size_t)n * sizeof(float));
        d[k] = malloc((size_t)(n + 1) * sizeof(float));
        for (int64_t i = 0; i < n; i++) {
            s = s * 1664525u + 1013904223u;
            x[k][i] = (s >> 27) == 0 ? 0.0f : ((float)(s >> 8) / 16777216.0f - 0.5f);
            b[k][i] = x[k][i] - ((float)(s & 255) - 128.0f) * 1e-5f;
            c[k][i] = (float)i * 0.25f;
        }
    }
    b[4][21] = INFINITY;       /* the 8-block after the 16s */
    b[5][70000] = NAN;         /* second chunk, before only */
    x[6][3 * 65536 + 5] = NAN; /* fourth chunk, x: the statistics' slow path too */
    b[6][65536 + 17] = -INFINITY;
    const float *xs[7], *bs[7], *cs[7];
    float *ds[7];
    for (int k = 0; k < 7; k++) {
        xs[k] = x[k];
        bs[k] = k == 2 ? NULL : b[k];
        cs[k] = k == 3 ? NULL : c[k];
        ds[k] = k == 5 ? d[k] + 1 : d[k];
    }
    check_many(xs, bs, sizes, 7, cs, ds, "tails, NaN/Inf, chunks, copies");
    check_many(xs, NULL, sizes, 7, NULL, NULL, "no before, no copy");
    omp_set_num_threads(1);
    check_many(xs, bs, sizes, 7, cs, ds, "one thread");
    omp_set_num_threads(2);
    for (int k = 0; k < 7; k++) {
        free(x[k]);
        free(b[k]);
        free(c[k]);
        free(d[k]);
    }
}

/* np_probe_tensor_stats_f32_adam: the weights' statistics and zeros the same
 * bits as np_probe_tensor_stats_f32_many's, m's and v's too; the derived
 * update's norm against float64 (u = A m / (sqrt(v) B + E) + K w, each
 * element within ~16 float32 roundings: 1e-6 relative on the norm), on the
 * SIMD and the portable loop, 1 and 2 threads; a NaN in v (one element)
 * left out of the norm; NULL m: NaN. Sizes past a chunk (65536) and with
 * a tail. */
static void test_adam(void)
{
    const int64_t n = 3 * 65536 + 13;
    float *w = malloc((size_t)n * sizeof(float)), *m = malloc((size_t)n * sizeof(float)),
          *v = malloc((size_t)n * sizeof(float));
    uint32_t r = 12345;
    for (int64_t i = 0; i < n; i++) {
        r = r * 1664525u + 1013904223u;
        w[i] = ((float)(r >> 8) / 16777216.0f - 0.5f) * 0.2f;
        r = r * 1664525u + 1013904223u;
        m[i] = ((float)(r >> 8) / 16777216.0f - 0.5f) * 1e-3f;
        r = r * 1664525u + 1013904223u;
        v[i] = (i % 97 == 0) ? 0.0f : (float)(r >> 8) / 16777216.0f * 1e-6f;
    }
    const double coef[8] = {1e-3 / 0.1 / 0.99, 0.01 / 0.99, 1.0 / sqrt(0.02), 1e-8,
                            1e-4, 0.0, 1.0, 1e-8};
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            v[777] = NAN; /* left out of the norm */
        double want[2] = {0.0, 0.0};
        for (int k = 0; k < 2; k++)
            for (int64_t i = 0; i < n; i++) {
                double d = coef[4 * k] * (double)m[i] /
                               (sqrt((double)v[i]) * coef[4 * k + 2] + coef[4 * k + 3]) +
                           coef[4 * k + 1] * (double)w[i];
                if (fabs(d) < INFINITY)
                    want[k] += d * d;
            }
        const float *ws[3] = {w, w, w}, *ms[3] = {m, m, NULL}, *vs[3] = {v, v, NULL};
        const int64_t ns[3] = {n, n, n};
        np_probe_stats want_st[3];
        int64_t rz[3];
        const float *want_in[3] = {w, m, v};
        np_probe_tensor_stats_f32_many(want_st, rz, NULL, want_in, NULL, ns, 3, NULL, NULL);
        for (int mode = 0; mode < 3; mode++) { /* SIMD 2 threads, 1 thread, portable */
            omp_set_num_threads(mode == 1 ? 1 : 2);
            np_stats_force_portable(mode == 2);
            np_probe_stats st[3], mv[6];
            int64_t z[3], mz[6];
            double un[3];
            np_probe_tensor_stats_f32_adam(st, z, un, ws, ms, vs, coef, ns, 3, NULL, NULL);
            for (int k = 0; k < 2; k++) {
                if (!(fabs(un[k] - sqrt(want[k])) <= 1e-6 * sqrt(want[k])))
                    fprintf(stderr, "adam pass %d mode %d k %d: %.17g want %.17g\n", pass, mode, k,
                            un[k], sqrt(want[k]));
                CHECK(fabs(un[k] - sqrt(want[k])) <= 1e-6 * sqrt(want[k]));
            }
            CHECK(isnan(un[2]));
            CHECK(memcmp(&st[0], &want_st[0], sizeof st[0]) == 0 && z[0] == rz[0]);
            np_probe_tensor_stats_f32_adam(st, z, un, ws, ms, vs, coef, ns, 2, mv, mz);
            CHECK(memcmp(&st[1], &want_st[0], sizeof st[1]) == 0 && z[1] == rz[0]);
            CHECK(memcmp(&mv[2], &want_st[1], sizeof mv[2]) == 0 && mz[2] == rz[1]);
            CHECK(memcmp(&mv[3], &want_st[2], sizeof mv[3]) == 0 && mz[3] == rz[2]);
            CHECK(fabs(un[1] - sqrt(want[1])) <= 1e-6 * sqrt(want[1]));
        }
        np_stats_force_portable(0);
        omp_set_num_threads(2);
    }
    free(w);
    free(m);
    free(v);
}

int main(void)
{
    test_extras();
    test_many();
    test_adam();
    /* empty */
    check_f32(NULL, 0, NP_FLOAT32, "empty");
    {
        np_probe_stats st;
        uint32_t crc = 7;
        np_probe_tensor_stats(&st, &crc, NP_FLOAT32, NULL, 0);
        CHECK(isnan(st.max) && isnan(st.min) && isnan(st.mean) && isnan(st.norm));
        CHECK_EQ_INT(crc, 0);
    }
    /* one element, by hand */
    {
        float x = -2.5f;
        np_probe_stats st;
        np_probe_tensor_stats(&st, NULL, NP_FLOAT32, &x, 1);
        CHECK_EQ_FLOAT(st.max, -2.5);
        CHECK_EQ_FLOAT(st.min, -2.5);
        CHECK_EQ_FLOAT(st.mean, -2.5);
        CHECK_EQ_FLOAT(st.norm, 2.5);
        check_f32(&x, 1, NP_FLOAT32, "single");
    }
    /* by hand: 3, 4 -> norm 5, mean 3.5, plus NaN and infinities */
    {
        float x[7] = {3.0f, NAN, INFINITY, 4.0f, -INFINITY, -INFINITY, NAN};
        np_probe_stats st;
        np_probe_tensor_stats(&st, NULL, NP_FLOAT32, x, 7);
        CHECK_EQ_FLOAT(st.max, 4.0);
        CHECK_EQ_FLOAT(st.min, 3.0);
        CHECK_EQ_FLOAT(st.mean, 3.5);
        CHECK_EQ_FLOAT(st.norm, 5.0);
        CHECK_EQ_INT(st.nan_count, 2);
        CHECK_EQ_INT(st.posinf_count, 1);
        CHECK_EQ_INT(st.neginf_count, 2);
        check_f32(x, 7, NP_FLOAT32, "mixed");
    }
    /* all NaN; all Inf */
    {
        float x[5] = {NAN, NAN, NAN, NAN, NAN};
        check_f32(x, 5, NP_FLOAT32, "all-nan");
        float y[3] = {INFINITY, -INFINITY, INFINITY};
        np_probe_stats st;
        np_probe_tensor_stats(&st, NULL, NP_FLOAT32, y, 3);
        CHECK(isnan(st.mean) && isnan(st.norm));
        CHECK_EQ_INT(st.posinf_count, 2);
        CHECK_EQ_INT(st.neginf_count, 1);
    }
    /* Mid-size (2 chunks, >= 64 KiB: the crc32 runs beside the statistics on
     * a second thread) with an odd tail, all finite and then with a NaN and
     * an Inf in the second chunk (slow path for that chunk only). */
    {
        size_t n = 100003;
        float *m = malloc(n * sizeof *m);
        for (size_t i = 0; i < n; i++)
            m[i] = (float)cos((double)i * 0.011) * 40.0f - 3.0f;
        check_f32(m, n, NP_FLOAT32, "mid-size");
        m[70001] = NAN;
        m[99999] = -INFINITY;
        check_f32(m, n, NP_FLOAT32, "mid-size-nonfinite");
        free(m);
    }
    /* bf16 and fp16 values stored as float32 (odd length: tail loop) */
    {
        size_t n = 1001;
        float *b = malloc(n * sizeof *b), *h = malloc(n * sizeof *h);
        for (size_t i = 0; i < n; i++) {
            float v = (float)sin((double)i * 0.37) * 300.0f + 1e-3f * (float)i;
            b[i] = np_round_bf16(v);
            h[i] = np_round_f16(v * 300.0f); /* some overflow to inf in fp16 */
        }
        check_f32(b, n, NP_BFLOAT16, "bf16");
        check_f32(h, n, NP_FLOAT16, "fp16-with-inf");
        free(b);
        free(h);
    }
    /* float64, int64, int32, bool */
    {
        double d[6] = {1e300, -1e-300, 2.0, NAN, -INFINITY, 7.0};
        ref r = reference(d, 6);
        np_probe_stats st;
        uint32_t crc;
        np_probe_tensor_stats(&st, &crc, NP_FLOAT64, d, 6);
        CHECK_EQ_FLOAT(st.max, r.max);
        CHECK_EQ_FLOAT(st.min, r.min);
        CHECK_CLOSE(st.mean, r.mean, 0, 1e-15);
        CHECK_EQ_INT(st.nan_count, 1);
        CHECK_EQ_INT(st.neginf_count, 1);
        CHECK_EQ_INT(crc, (uint32_t)crc32(0L, (const Bytef *)d, sizeof d));
        int64_t i64[4] = {-3, 10, 0, 5};
        np_probe_tensor_stats(&st, NULL, NP_INT64, i64, 4);
        CHECK_EQ_FLOAT(st.max, 10.0);
        CHECK_EQ_FLOAT(st.min, -3.0);
        CHECK_EQ_FLOAT(st.mean, 3.0);
        CHECK_CLOSE(st.norm, sqrt(134.0), 0, 1e-15);
        int32_t i32[3] = {1, 2, 2};
        np_probe_tensor_stats(&st, NULL, NP_INT32, i32, 3);
        CHECK_EQ_FLOAT(st.norm, 3.0);
        uint8_t bl[4] = {1, 0, 1, 1};
        np_probe_tensor_stats(&st, &crc, NP_BOOL, bl, 4);
        CHECK_EQ_FLOAT(st.mean, 0.75);
        CHECK_EQ_FLOAT(st.max, 1.0);
        CHECK_EQ_INT(crc, (uint32_t)crc32(0L, bl, 4));
    }
    /* The documented float32 summation order, bit for bit, for every length
     * up to 200 and a few across chunks (65536 elements; two whole chunks
     * go through the vector kernel side by side), finite data; the vector
     * and the portable kernels must both give it. */
    {
        size_t lens[] = {1000, 4095, 65535, 65536, 65543, 131072, 196621, 262149};
        size_t nmax = 262149;
        float *x = malloc(nmax * sizeof *x);
        uint32_t s = 7;
        for (size_t i = 0; i < nmax; i++) {
            s = s * 1664525u + 1013904223u;
            /* magnitudes over 2^-20..2^20: double sums round, so a different
             * order gives different bits */
            x[i] = ((float)(s >> 8) / 16777216.0f - 0.3f) * ldexpf(1.0f, (int)(s % 41) - 20);
        }
        for (size_t k = 0; k < 200 + sizeof lens / sizeof lens[0]; k++) {
            size_t n = k < 200 ? k + 1 : lens[k - 200];
            size_t chunk = 65536;
            double sum = 0.0, sq = 0.0;
            for (size_t c0 = 0; c0 < n; c0 += chunk) {
                size_t m = n - c0 < chunk ? n - c0 : chunk;
                double ls[8] = {0}, lq[8] = {0};
                size_t mb = m - m % 8;
                for (size_t i = 0; i < mb; i++) {
                    double d = (double)x[c0 + i];
                    ls[i % 8] += d;
                    lq[i % 8] += d * d;
                }
                double cs = ((ls[0] + ls[1]) + (ls[2] + ls[3])) + ((ls[4] + ls[5]) + (ls[6] + ls[7]));
                double cq = ((lq[0] + lq[1]) + (lq[2] + lq[3])) + ((lq[4] + lq[5]) + (lq[6] + lq[7]));
                for (size_t i = mb; i < m; i++) {
                    double d = (double)x[c0 + i];
                    cs += d;
                    cq += d * d;
                }
                sum = c0 == 0 ? cs : sum + cs;
                sq = c0 == 0 ? cq : sq + cq;
            }
            for (int portable = 0; portable < 2; portable++) {
                np_stats_force_portable(portable);
                np_probe_stats st;
                np_probe_tensor_stats(&st, NULL, NP_FLOAT32, x, (int64_t)n);
                CHECK_EQ_FLOAT(st.mean, sum / (double)n);
                CHECK_EQ_FLOAT(st.norm, sqrt(sq));
            }
            np_stats_force_portable(0);
        }
        /* a pair of whole chunks with NaN/Inf in one of them (slow path for
         * that one only), then in the other: the portable kernel's bits */
        for (int bad = 0; bad < 2; bad++) {
            size_t n = 196621, at = bad ? 70001 : 123;
            float keep = x[at], keep2 = x[at + 9];
            x[at] = NAN;
            x[at + 9] = INFINITY;
            np_probe_stats a, b;
            np_stats_force_portable(0);
            np_probe_tensor_stats(&a, NULL, NP_FLOAT32, x, (int64_t)n);
            np_stats_force_portable(1);
            np_probe_tensor_stats(&b, NULL, NP_FLOAT32, x, (int64_t)n);
            np_stats_force_portable(0);
            fprintf(stderr, "case pair with a non-finite chunk %d\n", bad);
            CHECK_EQ_FLOAT(a.mean, b.mean);
            CHECK_EQ_FLOAT(a.norm, b.norm);
            CHECK_EQ_FLOAT(a.max, b.max);
            CHECK_EQ_FLOAT(a.min, b.min);
            CHECK_EQ_INT(a.nan_count, 1);
            CHECK_EQ_INT(a.posinf_count, 1);
            check_f32(x, n, NP_FLOAT32, "pair with a non-finite chunk");
            x[at] = keep;
            x[at + 9] = keep2;
        }
        free(x);
    }
    /* A chunk holding NaN/Inf (masked attention scores) takes the slow path:
     * the vector kernel gives the scalar loop's bits (signed zeros, ties,
     * every kind of non-finite value, a tail past the last full lane block),
     * and the values a float64 reference gives. */
    {
        size_t n = 4096 + 13;
        float *x = malloc(n * sizeof *x);
        uint32_t s = 7;
        for (size_t i = 0; i < n; i++) {
            s = s * 1664525u + 1013904223u;
            x[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 64.0f;
            if (i % 37 == 5)
                x[i] = -INFINITY;
            if (i % 101 == 7)
                x[i] = NAN;
            if (i % 211 == 3)
                x[i] = INFINITY;
            if (i % 53 == 11)
                x[i] = (i & 1) ? -0.0f : 0.0f;
        }
        x[n - 1] = NAN;
        x[n - 2] = -INFINITY;
        check_f32(x, n, NP_FLOAT32, "non-finite chunk");
        np_probe_stats a, b;
        np_stats_force_portable(0);
        np_probe_tensor_stats(&a, NULL, NP_FLOAT32, x, (int64_t)n);
        np_stats_force_portable(1);
        np_probe_tensor_stats(&b, NULL, NP_FLOAT32, x, (int64_t)n);
        np_stats_force_portable(0);
        CHECK(memcmp(&a, &b, sizeof a) == 0);
        for (size_t i = 0; i < n; i++) /* all zeros and non-finite: max/min of signed zeros */
            x[i] = i % 3 == 0 ? NAN : (i % 3 == 1 ? -0.0f : 0.0f);
        np_probe_tensor_stats(&a, NULL, NP_FLOAT32, x, (int64_t)n);
        np_stats_force_portable(1);
        np_probe_tensor_stats(&b, NULL, NP_FLOAT32, x, (int64_t)n);
        np_stats_force_portable(0);
        CHECK(memcmp(&a, &b, sizeof a) == 0);
        CHECK_EQ_INT(a.nan_count, (int64_t)((n + 2) / 3));
        free(x);
    }
    /* Large: many chunks in parallel; same bits with 1 and 2 threads. */
    {
        size_t n = getenv("NP_SANITIZED") ? 300000 : 1500007;
        float *x = malloc(n * sizeof *x);
        uint32_t s = 1;
        for (size_t i = 0; i < n; i++) {
            s = s * 1664525u + 1013904223u;
            x[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 8.0f;
        }
        x[12345] = NAN;
        x[n - 1] = INFINITY;
        check_f32(x, n, NP_FLOAT32, "large");
        np_probe_stats a, b;
        uint32_t ca, cb;
        omp_set_num_threads(1);
        np_probe_tensor_stats(&a, &ca, NP_FLOAT32, x, (int64_t)n);
        omp_set_num_threads(2);
        np_probe_tensor_stats(&b, &cb, NP_FLOAT32, x, (int64_t)n);
        CHECK(memcmp(&a, &b, sizeof a) == 0);
        CHECK_EQ_INT(ca, cb);
        free(x);
    }
    return check_report();
}
