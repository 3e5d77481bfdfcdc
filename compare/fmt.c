/* compare/fmt.c - printf("%.17g") (and "%.Ng") for report numbers, fast,
 * and the text of a row's formatted reason. The digits
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

static const uint64_t pow10u[18] = {
    UINT64_C(1), UINT64_C(10), UINT64_C(100), UINT64_C(1000), UINT64_C(10000), UINT64_C(100000),
    UINT64_C(1000000), UINT64_C(10000000), UINT64_C(100000000), UINT64_C(1000000000),
    UINT64_C(10000000000), UINT64_C(100000000000), UINT64_C(1000000000000),
    UINT64_C(10000000000000), UINT64_C(100000000000000), UINT64_C(1000000000000000),
    UINT64_C(10000000000000000), UINT64_C(100000000000000000)};

/* `prec` (1..17) significant digits of |x| (> 0, normal) as an integer in
 * [10^(prec-1), 10^prec), and the decimal exponent; 0 if not certain. The
 * first guess of the exponent comes from the binary exponent (off by at
 * most one, corrected by the range check). */
static int digits(uint64_t *d, int *e10, double ax, int prec)
{
    uint64_t bits;
    memcpy(&bits, &ax, sizeof bits);
    int be = (int)((bits >> 52) & 0x7ff) - 1022; /* ax (normal) in [2^(be-1), 2^be) */
    int e = (int)floor((be - 1) * 0.30102999566398120);
    long double lo = (long double)pow10u[prec - 1], hi = (long double)pow10u[prec];
    for (int attempt = 0; attempt < 3; attempt++) {
        int k = prec - 1 - e;
        if (k > 27 || k < -27)
            return 0;
        long double m = k >= 0 ? (long double)ax * pow10l_exact(k)
                               : (long double)ax / pow10l_exact(-k);
        if (m < lo) {
            e--;
            continue;
        }
        if (m >= hi) {
            e++;
            continue;
        }
        /* m < 2^57: its integer part fits, and its error (one rounding in a
         * 64-bit significand) is below 1/128 */
        uint64_t fl = (uint64_t)m;
        long double fr = m - (long double)fl;
        if (fabsl(fr - 0.5L) < 1.0L / 64)
            return 0;
        uint64_t v = fl + (fr > 0.5L);
        if (v == pow10u[prec]) {
            v = pow10u[prec - 1];
            e++;
        }
        *d = v;
        *e10 = e;
        return 1;
    }
    return 0;
}
#endif

/* The n (1..17) decimal digits of d (< 10^n), leading zeros included. Two
 * digits at a time, in 32-bit halves. */
static void put_digits(char *dig, uint64_t d, int n)
{
    static const char pairs[201] =
        "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
        "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
        "8081828384858687888990919293949596979899";
    uint32_t lo = (uint32_t)(d % 100000000u), hi = (uint32_t)(d / 100000000u);
    char tmp[24];
    /* 8 low digits, then up to 9 high digits (at most 10^17 / 10^8 < 10^9) */
    for (int i = 22; i > 14; i -= 2) {
        memcpy(tmp + i, pairs + 2 * (lo % 100), 2);
        lo /= 100;
    }
    for (int i = 14; i > 4; i -= 2) {
        memcpy(tmp + i, pairs + 2 * (hi % 100), 2);
        hi /= 100;
    }
    /* tmp[6..23] holds the 18 digits of d; take the last n */
    memcpy(dig, tmp + 24 - n, (size_t)n);
}

int cmp_fmt_g(char *buf, double x, int prec)
{
#if LDBL_MANT_DIG >= 64
    double ax = fabs(x);
    uint64_t d;
    int e;
    if (prec >= 1 && prec <= 17 && isfinite(x) && ax >= DBL_MIN && digits(&d, &e, ax, prec)) {
        char dig[18];
        put_digits(dig, d, prec);
        int nd = prec;
        while (nd > 1 && dig[nd - 1] == '0')
            nd--;
        char *o = buf;
        if (x < 0)
            *o++ = '-';
        if (e >= -4 && e < prec) {
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
    return snprintf(buf, CMP_G17_MAX, "%.*g", prec, x);
}

int cmp_fmt_g17(char *buf, double x)
{
    return cmp_fmt_g(buf, x, 17);
}

/* Formatted reasons (verdict.c) use %.Ng (N <= 17) and %lld only. */
const char *np_cmp_row_reason(char *buf, size_t cap, const np_cmp_row *r)
{
    if (!r->reason)
        return "";
    if (r->n_reason_args <= 0 || !cap)
        return r->reason;
    size_t n = 0;
    int arg = 0;
    char num[CMP_G17_MAX];
    for (const char *f = r->reason; *f; f++) {
        const char *piece = f;
        size_t len = strcspn(f, "%");
        if (len)
            f += len - 1; /* a run of literal text */
        else {
            int prec = 6;
            const char *q = f + 1;
            if (*q == '.') {
                prec = 0;
                for (q++; *q >= '0' && *q <= '9'; q++)
                    prec = prec * 10 + (*q - '0');
            }
            double v = arg < r->n_reason_args && arg < 2 ? r->reason_args[arg] : 0;
            if (*q == 'g') {
                len = (size_t)cmp_fmt_g(num, v, prec > 17 ? 17 : prec);
                piece = num;
                arg++;
                f = q;
            } else if (!strncmp(q, "lld", 3)) {
                len = (size_t)snprintf(num, sizeof num, "%lld", (long long)v);
                piece = num;
                arg++;
                f = q + 2;
            } else {
                len = 1; /* a lone '%' */
            }
        }
        if (len > cap - 1 - n)
            len = cap - 1 - n;
        memcpy(buf + n, piece, len);
        n += len;
    }
    buf[n] = '\0';
    return buf;
}

const char *np_cmp_row_verdict_text(char *buf, size_t cap, const np_cmp_row *r)
{
    const char *why = np_cmp_row_reason(buf, cap, r);
    if (why[0] || !cap)
        return why;
    char sev[CMP_G17_MAX];
    cmp_fmt_g(sev, r->severity, 3);
    if (r->verdict == NP_VERDICT_PASS && r->m && !isnan(r->m->rel_l2)) {
        char rl[CMP_G17_MAX];
        cmp_fmt_g(rl, r->m->rel_l2, 3);
        snprintf(buf, cap, "passes: relative L2 error %s, severity %s (1 = the error level)", rl,
                 sev);
    } else
        snprintf(buf, cap, "%s: severity %s (1 = the error level)",
                 r->verdict == NP_VERDICT_PASS      ? "passes"
                 : r->verdict == NP_VERDICT_WARNING ? "warning"
                                                    : "error",
                 sev);
    return buf;
}
