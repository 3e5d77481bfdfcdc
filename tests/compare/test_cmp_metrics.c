/* tests/compare/test_cmp_metrics.c - msprobe's metrics (Cosine, EucDist,
 * MaxAbsErr, MaxRelativeErr, One Thousandth / Five Thousandths Err Ratio)
 * against hand-worked values and a float64 reference written here, with
 * every edge case: zero norms, one element, 0-d, empty, NaN/Inf masks equal
 * and different; and thread-count independence. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "check.h"
#include "nprobe/compare.h"

#define EPS64 2.220446049250313e-16
#define EPS32 1.1920928955078125e-07f

typedef struct ref {
    double cos, euc, maxabs, maxrel, r1, r5;
} ref;

/* Straight loops over msprobe's definitions, float64 except the relative
 * error (float32, the arrays' type): equal NaN/Inf positions are zeroed on
 * both sides first. */
static void reference(ref *o, const float *b, const float *c, int n)
{
    double dot = 0, nb = 0, nc = 0, dd = 0, maxabs = 0, maxrel = 0;
    int c1 = 0, c5 = 0;
    for (int i = 0; i < n; i++) {
        double x = b[i], y = c[i];
        if (!isfinite(x) || !isfinite(y)) {
            x = 0;
            y = 0;
        }
        dot += x * y;
        nb += x * x;
        nc += y * y;
        dd += (y - x) * (y - x);
        maxabs = fmax(maxabs, fabs(y - x));
        /* msprobe 26: the relative error in the arrays' type, float32 here */
        float xf = (float)x, yf = (float)y;
        float rel = xf == 0 ? fabsf(((yf + EPS32) - (xf + EPS32)) / (xf + EPS32))
                            : fabsf((yf - xf) / xf);
        maxrel = fmax(maxrel, rel);
        c1 += rel < 0.001f;
        c5 += rel < 0.005f;
    }
    o->cos = dot / (sqrt(nb) * sqrt(nc));
    o->euc = sqrt(dd);
    o->maxabs = maxabs;
    o->maxrel = maxrel;
    o->r1 = (double)c1 / n;
    o->r5 = (double)c5 / n;
}

static void check_against_ref(const float *b, const float *c, int n)
{
    np_cmp_metrics m;
    ref r;
    np_cmp_metrics_f32(&m, b, c, n, 1, 0.0);
    reference(&r, b, c, n);
    CHECK_CLOSE(m.cosine, r.cos, 1e-12, 1e-12);
    CHECK_CLOSE(m.euc_dist, r.euc, 0, 1e-12);
    CHECK_CLOSE(m.max_abs_err, r.maxabs, 0, 0);
    CHECK_CLOSE(m.max_rel_err, r.maxrel, 0, 1e-15);
    CHECK_CLOSE(m.one_thousandth, r.r1, 0, 0);
    CHECK_CLOSE(m.five_thousandths, r.r5, 0, 0);
}

static double urand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return ((*s >> 8) & 0xFFFFFF) / 16777216.0;
}

/* Near-parallel sides (cmp = k * bench, rounded to float32): the float64
 * sums can put dot / sqrt(cc * bb) an ulp above 1; the cosine is clamped to
 * [-1, 1], and -1 for an opposite side. */
static void test_cosine_bounds(void)
{
    unsigned s = 7;
    int above = 0;
    for (int trial = 0; trial < 400; trial++) {
        int n = 2 + trial % 37;
        float b[40], c[40], c2[40];
        double k = 1.0 + (trial % 13) * 0.0731;
        for (int i = 0; i < n; i++) {
            s = s * 1664525u + 1013904223u;
            b[i] = (float)((double)(s >> 8) / 16777216.0 - 0.37);
            c[i] = (float)(b[i] * k);
            c2[i] = -c[i];
        }
        np_cmp_metrics m;
        np_cmp_metrics_f32(&m, b, c, n, 1, 0.0);
        above += m.cosine > 1.0;
        CHECK(m.cosine <= 1.0 && m.cosine > 1.0 - 1e-12);
        np_cmp_metrics_f32(&m, b, c2, n, 1, 0.0);
        CHECK(m.cosine >= -1.0 && m.cosine < -1.0 + 1e-12);
    }
    CHECK_EQ_INT(above, 0);
}

int main(void)
{
    np_cmp_metrics m;
    test_cosine_bounds();
    /* hand-worked: b = [1, 2, 3], c = [1, 2, 4] */
    {
        float b[] = {1, 2, 3}, c[] = {1, 2, 4};
        np_cmp_metrics_f32(&m, b, c, 3, 1, 0.0);
        CHECK_CLOSE(m.cosine, 17.0 / sqrt(14.0 * 21.0), 1e-15, 0);
        CHECK_CLOSE(m.euc_dist, 1.0, 0, 0);
        CHECK_CLOSE(m.max_abs_err, 1.0, 0, 0);
        CHECK_CLOSE(m.max_rel_err, (double)(1.0f / 3.0f), 0, 0); /* float32, as msprobe */
        CHECK_CLOSE(m.one_thousandth, 2.0 / 3.0, 0, 0);
        CHECK_CLOSE(m.five_thousandths, 2.0 / 3.0, 0, 0);
        CHECK_CLOSE(m.bench_norm, sqrt(14.0), 1e-15, 0);
        CHECK_CLOSE(m.rel_l2, 1.0 / sqrt(14.0), 1e-15, 0);
        CHECK_STREQ(m.note, "");
        double bd[] = {1, 2, 3}, cd[] = {1, 2, 4};
        np_cmp_metrics_f64(&m, bd, cd, 3, 1, 0.0);
        CHECK_CLOSE(m.cosine, 17.0 / sqrt(14.0 * 21.0), 1e-15, 0);
        CHECK_CLOSE(m.max_rel_err, 1.0 / 3.0, 1e-16, 0);
    }
    /* relative error thresholds: 0.0009 < 0.001 <= 0.002 < 0.005 <= 0.006 */
    {
        float b[] = {1000, 1000, 1000, 1000}, c[] = {1000.9f, 1002, 1006, 1000};
        np_cmp_metrics_f32(&m, b, c, 4, 1, 0.0);
        CHECK_CLOSE(m.one_thousandth, 0.5, 0, 0);
        CHECK_CLOSE(m.five_thousandths, 0.75, 0, 0);
        CHECK_CLOSE(m.max_rel_err, (double)(6.0f / 1000.0f), 0, 0);
    }
    /* random, many blocks (OpenMP path), compared with the reference */
    {
        int n = 300007;
        float *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
        unsigned s = 7;
        for (int i = 0; i < n; i++) {
            b[i] = (float)(urand(&s) * 4 - 2);
            c[i] = b[i] * (float)(1 + (urand(&s) - 0.5) * 0.02);
            if (i % 1000 == 0)
                b[i] = 0; /* zero bench elements: rel err = |c| / eps */
        }
        check_against_ref(b, c, n);
        /* the same numbers with 1 and 2 threads */
        np_cmp_metrics m1, m2;
        omp_set_num_threads(1);
        np_cmp_metrics_f32(&m1, b, c, n, 1, 0.0);
        omp_set_num_threads(2);
        np_cmp_metrics_f32(&m2, b, c, n, 1, 0.0);
        CHECK_EQ_FLOAT(m1.cosine, m2.cosine);
        CHECK_EQ_FLOAT(m1.euc_dist, m2.euc_dist);
        CHECK_EQ_FLOAT(m1.max_rel_err, m2.max_rel_err);
        free(b);
        free(c);
    }
    /* the vectorised fast path and its fallbacks: equal NaN/Inf positions
     * scattered in some sub-blocks only, zero bench elements, elements at
     * exactly the 0.001 / 0.005 thresholds, ragged lengths (tails), each
     * against the reference and at 1 and 2 threads */
    {
        int lens[] = {4096 * 3 + 5, 32768 + 4096 + 7, 70001};
        for (int t = 0; t < 3; t++) {
            int n = lens[t];
            float *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
            unsigned s = 11u + (unsigned)t;
            for (int i = 0; i < n; i++) {
                b[i] = (float)(urand(&s) * 8 - 4);
                c[i] = b[i] * (float)(1 + (urand(&s) - 0.5) * 0.015);
                if (i % 777 == 0)
                    b[i] = 0;
                if (i % 501 == 0) { /* |c - b| / |b| exactly 0.001 or 0.005 */
                    b[i] = 1000.0f;
                    c[i] = i % 2 ? 1001.0f : 995.0f;
                }
            }
            for (int i = 4096 + 3; i < n; i += 9001) { /* not in the first sub-block */
                b[i] = c[i] = i % 2 ? NAN : -INFINITY;
            }
            check_against_ref(b, c, n);
            np_cmp_metrics m1, m2;
            omp_set_num_threads(1);
            np_cmp_metrics_f32(&m1, b, c, n, 1, 0.0);
            omp_set_num_threads(2);
            np_cmp_metrics_f32(&m2, b, c, n, 1, 0.0);
            CHECK_EQ_FLOAT(m1.cosine, m2.cosine);
            CHECK_EQ_FLOAT(m1.euc_dist, m2.euc_dist);
            CHECK_EQ_FLOAT(m1.max_abs_err, m2.max_abs_err);
            CHECK_EQ_FLOAT(m1.max_rel_err, m2.max_rel_err);
            CHECK_EQ_FLOAT(m1.one_thousandth, m2.one_thousandth);
            CHECK_EQ_INT(m1.n_masked, m2.n_masked);
            CHECK(m1.n_masked > 0);
            /* the float64 entry point gives the same metrics, but for the
             * relative error, in float64 there (msprobe: the arrays' type) */
            double *b64 = malloc(n * sizeof *b64), *c64 = malloc(n * sizeof *c64);
            double maxrel64 = 0;
            int64_t n5 = 0;
            for (int i = 0; i < n; i++) {
                b64[i] = b[i];
                c64[i] = c[i];
                double x = b64[i], y = c64[i];
                if (!isfinite(x) || !isfinite(y))
                    x = y = 0;
                double rel = x == 0 ? fabs(((y + EPS64) - (x + EPS64)) / (x + EPS64))
                                    : fabs((y - x) / x);
                maxrel64 = fmax(maxrel64, rel);
                n5 += rel < 0.005;
            }
            np_cmp_metrics_f64(&m2, b64, c64, n, 1, 0.0);
            CHECK_CLOSE(m2.cosine, m1.cosine, 1e-15, 0);
            CHECK_EQ_FLOAT(m2.max_abs_err, m1.max_abs_err);
            CHECK_EQ_FLOAT(m2.max_rel_err, maxrel64);
            CHECK_EQ_FLOAT(m2.five_thousandths, (double)n5 / n);
            /* identical sides: cosine exactly 1, no error */
            np_cmp_metrics_f32(&m1, b, b, n, 1, 0.0);
            CHECK_EQ_FLOAT(m1.cosine, 1.0);
            CHECK_EQ_FLOAT(m1.max_abs_err, 0.0);
            CHECK_EQ_FLOAT(m1.one_thousandth, 1.0);
            free(b64);
            free(c64);
            free(b);
            free(c);
        }
    }
    /* zero bench element: msprobe adds eps to both sides */
    {
        float b[] = {0, 1}, c[] = {1e-3f, 1};
        np_cmp_metrics_f32(&m, b, c, 2, 1, 0.0);
        CHECK_CLOSE(m.max_rel_err, (double)(((1e-3f + EPS32) - EPS32) / EPS32), 0, 0);
        CHECK_CLOSE(m.one_thousandth, 0.5, 0, 0);
    }
    /* zero norms */
    {
        float z[] = {0, 0, 0}, x[] = {1, 0, 0};
        np_cmp_metrics_f32(&m, z, z, 3, 1, 0.0);
        CHECK_CLOSE(m.cosine, 1.0, 0, 0);
        CHECK_CLOSE(m.max_abs_err, 0.0, 0, 0);
        CHECK_CLOSE(m.one_thousandth, 1.0, 0, 0);
        np_cmp_metrics_f32(&m, z, x, 3, 1, 0.0); /* bench all zero */
        CHECK(isnan(m.cosine));
        CHECK_CONTAINS(m.note, "All the data is Zero in Bench dump data");
        CHECK_CLOSE(m.max_rel_err, (double)(((1.0f + EPS32) - EPS32) / EPS32), 0, 0);
        np_cmp_metrics_f32(&m, x, z, 3, 1, 0.0); /* cmp all zero */
        CHECK(isnan(m.cosine));
        CHECK_CONTAINS(m.note, "All the data is Zero in npu dump data");
        CHECK_CLOSE(m.max_rel_err, 1.0, 0, 0);
    }
    /* one element (1-d of length 1): no cosine, ratios computed */
    {
        float b[] = {2}, c[] = {2.002f};
        np_cmp_metrics_f32(&m, b, c, 1, 1, 0.0);
        CHECK(isnan(m.cosine));
        CHECK_CONTAINS(m.note, "length 1");
        CHECK_CLOSE(m.max_abs_err, fabs((double)2.002f - 2.0), 0, 0);
        CHECK_CLOSE(m.one_thousandth, 0.0, 0, 0);
        CHECK_CLOSE(m.five_thousandths, 1.0, 0, 0);
    }
    /* 0-d: no cosine, no ratios; MaxAbsErr and MaxRelativeErr computed */
    {
        float b[] = {4}, c[] = {5};
        np_cmp_metrics_f32(&m, b, c, 1, 0, 0.0);
        CHECK(isnan(m.cosine));
        CHECK(isnan(m.one_thousandth));
        CHECK(isnan(m.five_thousandths));
        CHECK_CLOSE(m.max_abs_err, 1.0, 0, 0);
        CHECK_CLOSE(m.max_rel_err, 0.25, 0, 0);
        CHECK_CONTAINS(m.note, "0-d tensor");
    }
    /* empty */
    {
        np_cmp_metrics_f32(&m, NULL, NULL, 0, 1, 0.0);
        CHECK(isnan(m.cosine) && isnan(m.max_abs_err) && isnan(m.euc_dist));
        CHECK_EQ_INT(m.n, 0);
        CHECK_CONTAINS(m.note, "empty");
    }
    /* equal NaN/Inf masks: excluded (zeroed on both sides as msprobe does) */
    {
        float b[] = {1, NAN, INFINITY, 3, -INFINITY}, c[] = {1.5f, NAN, INFINITY, 3, -INFINITY};
        np_cmp_metrics_f32(&m, b, c, 5, 1, 0.0);
        CHECK_EQ_INT(m.n_masked, 3);
        CHECK_EQ_INT(m.n_mask_mismatch, 0);
        check_against_ref(b, c, 5);
        CHECK_CLOSE(m.max_abs_err, 0.5, 0, 0);
        CHECK_CLOSE(m.cosine, (1.5 + 9) / (sqrt(10.0) * sqrt(2.25 + 9)), 1e-15, 0);
    }
    /* different masks: an error, metrics not available */
    {
        float b[] = {1, NAN, 2}, c[] = {1, 2, 2};
        np_cmp_metrics_f32(&m, b, c, 3, 1, 0.0);
        CHECK_EQ_INT(m.n_mask_mismatch, 1);
        CHECK(isnan(m.cosine) && isnan(m.max_abs_err));
        CHECK_CONTAINS(m.note, "inf or nan");
        float p[] = {INFINITY, 1}, q[] = {-INFINITY, 1};
        np_cmp_metrics_f32(&m, p, q, 2, 1, 0.0);
        CHECK_EQ_INT(m.n_mask_mismatch, 1);
    }
    /* rel_l2 with an RMS floor: ||d|| / max(||b||, atol*sqrt(n)) */
    {
        float b[] = {1e-9f, 0, 0, 0}, c[] = {0, 0, 0, 1e-9f};
        np_cmp_metrics_f32(&m, b, c, 4, 1, 1e-6);
        double d = sqrt(2.0) * (double)1e-9f;
        CHECK_CLOSE(m.rel_l2, d / (1e-6 * 2.0), 0, 1e-12);
    }
    return check_report();
}
