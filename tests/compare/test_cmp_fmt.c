/* tests/compare/test_cmp_fmt.c - the report's fast "%.17g" / "%.Ng"
 * formatter (compare/fmt.c) against the C library's snprintf, byte for byte
 * (every precision 1..17 for each value), and np_cmp_row_reason against
 * snprintf of the same format:
 * random bit patterns over the whole double range, decimal fractions,
 * integers, powers of ten and their neighbours, values that round up to the
 * next power of ten, signs, zeros, subnormals and infinities. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../../compare/report_internal.h"
#include "nprobe/compare.h"
#include "check.h"

static int n_bad;
static int all_prec; /* check every precision 1..17, not three of them */

static void one(double x)
{
    char want[64], got[CMP_G17_MAX + 8];
    snprintf(want, sizeof want, "%.17g", x);
    int len = cmp_fmt_g17(got, x);
    if (strcmp(want, got) != 0 || len != (int)strlen(want)) {
        if (n_bad++ < 10)
            fprintf(stderr, "%a: want %s got %s\n", x, want, got);
    }
    /* every precision for the structured values, one in turn (and 3 and 9,
     * the reasons' precisions) for the random ones, to keep the test short */
    static unsigned turn;
    turn++;
    for (int prec = 1; prec <= 17; prec++) {
        if (!all_prec && prec != 3 && prec != 9 && prec != (int)(turn % 17) + 1)
            continue;
        snprintf(want, sizeof want, "%.*g", prec, x);
        len = cmp_fmt_g(got, x, prec);
        if (strcmp(want, got) != 0 || len != (int)strlen(want)) {
            if (n_bad++ < 10)
                fprintf(stderr, "%a %%.%dg: want %s got %s\n", x, prec, want, got);
        }
    }
}

/* A row reason with two numbers, against snprintf of the same format. */
static void reason(const char *fmt, double a, double b, int nargs)
{
    np_cmp_row r;
    memset(&r, 0, sizeof r);
    r.reason = fmt;
    r.reason_args[0] = a;
    r.reason_args[1] = b;
    r.n_reason_args = (int8_t)nargs;
    char want[512], got[256];
    if (strstr(fmt, "%lld"))
        snprintf(want, sizeof want, "NaN/Inf counts differ (cmp %lld, bench %lld non-finite)",
                 (long long)a, (long long)b);
    else if (strstr(fmt, "%.9g"))
        snprintf(want, sizeof want, "Cosine %.9g below %.9g", a, b);
    else
        snprintf(want, sizeof want, "mean differs by %.3g (relative to the bench scale), above %.3g",
                 a, b);
    CHECK_STREQ(np_cmp_row_reason(got, sizeof got, &r), want);
}

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

int main(void)
{
    uint64_t s = 88172645463325252u;
    for (int i = 0; i < 300000; i++) {
        uint64_t bits = rng(&s);
        double x;
        memcpy(&x, &bits, sizeof x);
        if (!isnan(x))
            one(x);
    }
    for (int i = -2000; i <= 2000; i++) {
        one(i);
        one(i * 0.1);
        one(i * 1e-3);
        one(i / 3.0);
        one(i * 1e15);
    }
    all_prec = 1;
    for (int e = -320; e <= 308; e++) {
        double p = pow(10.0, e);
        one(p);
        one(-p);
        one(nextafter(p, 0));
        one(nextafter(p, INFINITY));
        one(p * 0.99999999999999999);
        one(p * 9.9999999999999995);
        one(p * 1.2345678901234567);
    }
    /* short decimals: ties for the small precisions (0.125 at %.2g, ...) */
    for (int i = 1; i <= 20000; i++) {
        one(i / 8.0);
        one(i / 1000.0);
        one(i * 0.0005);
    }
    all_prec = 0;
    /* 17-digit ties and near-ties in the fast range */
    for (int i = 0; i < 100000; i++) {
        double x = (double)(rng(&s) % 100000000000000000u) / 1e16 * pow(10.0, (int)(rng(&s) % 40) - 20);
        one(x);
        one(nextafter(x, 0));
    }
    double special[] = {0.0, -0.0, INFINITY, -INFINITY, DBL_MIN, DBL_MAX, DBL_TRUE_MIN, -DBL_MIN,
                        0.5, 1.5, 2.5, 1e16, 1e17, 99999999999999999.0, 123456789012345678.0,
                        0.0001, 0.00001, 0.000123456, 5e-324};
    all_prec = 1;
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        one(special[i]);
    CHECK_EQ_INT(n_bad, 0);
    reason("NaN/Inf counts differ (cmp %lld, bench %lld non-finite)", 12, 4096, 2);
    reason("Cosine %.9g below %.9g", 0.99999123456789, 0.9999999, 2);
    reason("mean differs by %.3g (relative to the bench scale), above %.3g", 1.23456e-5, 5e-6, 2);
    reason("mean differs by %.3g (relative to the bench scale), above %.3g", 0.0125, 0.1, 2);
    reason("mean differs by %.3g (relative to the bench scale), above %.3g", INFINITY, 1e-6, 2);
    /* a reason without numbers is the text itself; a small buffer truncates */
    np_cmp_row r;
    memset(&r, 0, sizeof r);
    r.reason = "Shape of NPU and bench Tensor do not match.";
    char small[8];
    CHECK(np_cmp_row_reason(small, sizeof small, &r) == r.reason);
    r.reason = "Cosine %.9g below %.9g";
    r.reason_args[0] = 0.5;
    r.reason_args[1] = 0.9;
    r.n_reason_args = 2;
    CHECK_STREQ(np_cmp_row_reason(small, sizeof small, &r), "Cosine ");
    return check_report();
}
