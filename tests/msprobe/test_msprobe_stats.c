/* tests/msprobe/test_msprobe_stats.c - statistics in msprobe's convention
 * (answers worked out by hand): nprobe records put into msprobe's form
 * (np_msp_stats_keep_inf), and the statistics-mode numbers of a row when
 * the statistics hold infinities (np_cmp_row_stats: equal infinities
 * differ by 0, equal values have relative error 0, a bench of 0 gives inf). */
#include <math.h>
#include <string.h>

#include "check.h"
#include "nprobe/compare.h"
#include "nprobe/msprobe.h"

static np_entry_rec rec(const char *dtype, int64_t numel, double mx, double mn, double mean,
                        double norm, int64_t nan, int64_t pos, int64_t neg)
{
    np_entry_rec r;
    memset(&r, 0, sizeof r);
    strcpy(r.dtype, dtype);
    r.numel = numel;
    r.max = mx;
    r.min = mn;
    r.mean = mean;
    r.norm = norm;
    r.nan_count = nan;
    r.posinf_count = pos;
    r.neginf_count = neg;
    return r;
}

static void test_keep_inf(void)
{
    /* [1, 2, -inf, -inf]: nprobe max 2 min 1 mean 1.5 norm sqrt(5) over the finite */
    np_entry_rec r = rec("float32", 4, 2, 1, 1.5, sqrt(5.0), 0, 0, 2);
    np_msp_stats_keep_inf(&r);
    CHECK_CLOSE(r.max, 2, 0, 0);
    CHECK(isinf(r.min) && r.min < 0);
    CHECK(isinf(r.mean) && r.mean < 0);
    CHECK(isinf(r.norm) && r.norm > 0);
    CHECK_EQ_INT(r.neginf_count, 1);
    CHECK_EQ_INT(r.posinf_count, 0);
    /* [inf, -inf, 3]: torch's mean is NaN, max inf, min -inf */
    r = rec("bfloat16", 3, 3, 3, 3, 3, 0, 1, 1);
    np_msp_stats_keep_inf(&r);
    CHECK(isinf(r.max) && r.max > 0);
    CHECK(isinf(r.min) && r.min < 0);
    CHECK(isnan(r.mean));
    CHECK(isinf(r.norm));
    /* a NaN makes all four NaN; only the NaN flag is left */
    r = rec("float16", 3, 3, 1, 2, 3, 1, 1, 0);
    np_msp_stats_keep_inf(&r);
    CHECK(isnan(r.max) && isnan(r.min) && isnan(r.mean) && isnan(r.norm));
    CHECK_EQ_INT(r.nan_count, 1);
    CHECK_EQ_INT(r.posinf_count, 0);
    /* all -inf: no finite element (nprobe NaN), torch max = min = -inf */
    r = rec("float32", 2, NAN, NAN, NAN, NAN, 0, 0, 2);
    np_msp_stats_keep_inf(&r);
    CHECK(isinf(r.max) && r.max < 0);
    CHECK(isinf(r.min) && r.min < 0);
    /* finite only: unchanged; integers: unchanged */
    r = rec("float32", 2, 2, 1, 1.5, sqrt(5.0), 0, 0, 0);
    np_msp_stats_keep_inf(&r);
    CHECK_CLOSE(r.mean, 1.5, 0, 0);
    r = rec("int64", 2, 7, 1, NAN, NAN, 0, 0, 0);
    np_msp_stats_keep_inf(&r);
    CHECK_CLOSE(r.max, 7, 0, 0);
}

static np_cmp_side side(double mx, double mn, double mean, double norm)
{
    np_cmp_side s;
    memset(&s, 0, sizeof s);
    s.stats = (np_stats){.max = mx, .min = mn, .mean = mean, .norm = norm};
    s.dtype = "float32";
    s.role = "output";
    return s;
}

static void test_row_stats(void)
{
    /* masked_fill's output in both runs: max differs, min/mean -inf, norm inf */
    np_cmp_side b = side(0.25, -INFINITY, -INFINITY, INFINITY);
    np_cmp_side c = side(0.5, -INFINITY, -INFINITY, INFINITY);
    np_cmp_row r;
    memset(&r, 0, sizeof r);
    r.bench = &b;
    r.cmp = &c;
    r.has_stats = 1;
    np_cmp_stats st;
    np_cmp_row_stats(&st, &r);
    CHECK_CLOSE(st.diff[0], 0.25, 0, 0);
    CHECK_CLOSE(st.rel[0], 1.0, 0, 0);
    for (int i = 1; i < 4; i++) {
        CHECK_CLOSE(st.diff[i], 0, 0, 0);
        CHECK_CLOSE(st.rel[i], 0, 0, 0);
    }
    /* a bench of 0: equal -> 0, different -> inf; infinity on one side only */
    b = side(0, 0, 1, 1);
    c = side(0, 1, INFINITY, 1);
    np_cmp_row_stats(&st, &r);
    CHECK_CLOSE(st.rel[0], 0, 0, 0);
    CHECK(isinf(st.rel[1]));
    CHECK(isinf(st.diff[2]) && st.diff[2] > 0);
    /* absent statistics (null Mean of an int64 tensor): N/A */
    b = side(1, 0, NAN, NAN);
    c = side(1, 0, NAN, NAN);
    np_cmp_row_stats(&st, &r);
    CHECK(isnan(st.diff[2]) && isnan(st.rel[3]));
}

int main(void)
{
    test_keep_inf();
    test_row_stats();
    return check_report();
}
