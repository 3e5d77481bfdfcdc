/* tests/compare/test_cmp_fmt.c - the report's fast "%.17g" formatter
 * (compare/fmt.c) against the C library's snprintf("%.17g"), byte for byte:
 * random bit patterns over the whole double range, decimal fractions,
 * integers, powers of ten and their neighbours, values that round up to the
 * next power of ten, signs, zeros, subnormals and infinities. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../../compare/report_internal.h"
#include "check.h"

static int n_bad;

static void one(double x)
{
    char want[64], got[CMP_G17_MAX + 8];
    snprintf(want, sizeof want, "%.17g", x);
    int len = cmp_fmt_g17(got, x);
    if (strcmp(want, got) != 0 || len != (int)strlen(want)) {
        if (n_bad++ < 10)
            fprintf(stderr, "%a: want %s got %s\n", x, want, got);
    }
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
    /* 17-digit ties and near-ties in the fast range */
    for (int i = 0; i < 100000; i++) {
        double x = (double)(rng(&s) % 100000000000000000u) / 1e16 * pow(10.0, (int)(rng(&s) % 40) - 20);
        one(x);
        one(nextafter(x, 0));
    }
    double special[] = {0.0, -0.0, INFINITY, -INFINITY, DBL_MIN, DBL_MAX, DBL_TRUE_MIN, -DBL_MIN,
                        0.5, 1.5, 2.5, 1e16, 1e17, 99999999999999999.0, 123456789012345678.0,
                        0.0001, 0.00001, 0.000123456, 5e-324};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        one(special[i]);
    CHECK_EQ_INT(n_bad, 0);
    return check_report();
}
