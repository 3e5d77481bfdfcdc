/* compare/fmt.c - printf("%.17g") for report numbers, fast: the 17 digits
 * come from one multiplication (or division) by an exact power of ten in
 * long double (64-bit significand), rounded to an integer. The result is
 * used only when that rounding is unambiguous (fraction not within 1/64 of
 * one half, far above the error of the scaling); otherwise, and for values
 * whose scale needs 10^k beyond the exact range, for subnormals and where
 * long double is not wider than double, snprintf does it. Either way the
 * text is byte-identical to snprintf(buf, cap, "%.17g", x). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "report_internal.h"

#if LDBL_MANT_DIG >= 64
/* 10^k for k = 0..27 are exact in a 64-bit significand (5^27 < 2^64). */
static long double pow10l_exact(int k)
{
    static const long double t[] = {1e0L, 1e1L, 1e2L, 1e3L, 1e4L, 1e5L, 1e6L, 1e7L, 1e8L, 1e9L,
                                    1e10L, 1e11L, 1e12L, 1e13L, 1e14L, 1e15L, 1e16L, 1e17L,
                                    1e18L, 1e19L, 1e20L, 1e21L, 1e22L, 1e23L, 1e24L, 1e25L,
                                    1e26L, 1e27L};
    return t[k];
}

/* 17 significant digits of |x| (> 0, normal) as an integer in
 * [1e16, 1e17), and the decimal exponent; 0 if not certain. */
static int digits17(uint64_t *d, int *e10, double ax)
{
    int e = (int)floor(log10(ax));
    for (int attempt = 0; attempt < 2; attempt++) {
        int k = 16 - e;
        if (k > 27 || k < -27)
            return 0;
        long double m = k >= 0 ? (long double)ax * pow10l_exact(k)
                               : (long double)ax / pow10l_exact(-k);
        if (m < 1e16L) {
            e--;
            continue;
        }
        if (m >= 1e17L) {
            e++;
            continue;
        }
        long double fl = floorl(m);
        long double fr = m - fl;
        if (fabsl(fr - 0.5L) < 1.0L / 64)
            return 0;
        uint64_t v = (uint64_t)fl + (fr > 0.5L);
        if (v == UINT64_C(100000000000000000)) {
            v = UINT64_C(10000000000000000);
            e++;
        }
        *d = v;
        *e10 = e;
        return 1;
    }
    return 0;
}
#endif

int cmp_fmt_g17(char *buf, double x)
{
#if LDBL_MANT_DIG >= 64
    double ax = fabs(x);
    uint64_t d;
    int e;
    if (isfinite(x) && ax >= DBL_MIN && digits17(&d, &e, ax)) {
        char dig[17];
        for (int i = 16; i >= 0; i--) {
            dig[i] = (char)('0' + d % 10);
            d /= 10;
        }
        int nd = 17;
        while (nd > 1 && dig[nd - 1] == '0')
            nd--;
        char *o = buf;
        if (x < 0)
            *o++ = '-';
        if (e >= -4 && e < 17) {
            if (e >= 0) {
                for (int i = 0; i <= e; i++)
                    *o++ = i < nd ? dig[i] : '0';
                if (nd > e + 1) {
                    *o++ = '.';
                    for (int i = e + 1; i < nd; i++)
                        *o++ = dig[i];
                }
            } else {
                *o++ = '0';
                *o++ = '.';
                for (int i = 0; i < -e - 1; i++)
                    *o++ = '0';
                for (int i = 0; i < nd; i++)
                    *o++ = dig[i];
            }
        } else {
            *o++ = dig[0];
            if (nd > 1) {
                *o++ = '.';
                for (int i = 1; i < nd; i++)
                    *o++ = dig[i];
            }
            *o++ = 'e';
            *o++ = e < 0 ? '-' : '+';
            int ae = e < 0 ? -e : e;
            if (ae >= 100)
                *o++ = (char)('0' + ae / 100);
            *o++ = (char)('0' + ae / 10 % 10);
            *o++ = (char)('0' + ae % 10);
        }
        *o = '\0';
        return (int)(o - buf);
    }
#endif
    return snprintf(buf, CMP_G17_MAX, "%.17g", x);
}
