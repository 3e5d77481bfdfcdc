/* tests/check.h - checks that survive NDEBUG and print got/want in full
 * precision. A test file includes this, calls CHECK* freely, and ends main
 * with `return check_report();` (exit status 1 if any check failed).
 * Use CHECK_SKIP() to leave with ctest's skip code (77). */
#ifndef NPROBE_TESTS_CHECK_H
#define NPROBE_TESTS_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_failures_ = 0;
static int check_count_ = 0;

#define CHECK_SKIP_CODE 77

#define CHECK(cond)                                                            \
    do {                                                                       \
        check_count_++;                                                        \
        if (!(cond)) {                                                         \
            check_failures_++;                                                 \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__,  \
                    #cond);                                                    \
        }                                                                      \
    } while (0)

#define CHECK_MSG(cond, ...)                                                   \
    do {                                                                       \
        check_count_++;                                                        \
        if (!(cond)) {                                                         \
            check_failures_++;                                                 \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__,   \
                    #cond);                                                    \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
        }                                                                      \
    } while (0)

#define CHECK_EQ_INT(got, want)                                                \
    do {                                                                       \
        long long g_ = (long long)(got), w_ = (long long)(want);               \
        check_count_++;                                                        \
        if (g_ != w_) {                                                        \
            check_failures_++;                                                 \
            fprintf(stderr, "%s:%d: %s: got %lld, want %lld\n", __FILE__,      \
                    __LINE__, #got, g_, w_);                                   \
        }                                                                      \
    } while (0)

/* |got - want| <= atol + rtol * |want|; NaN equals NaN, inf equals same inf. */
#define CHECK_CLOSE(got, want, atol, rtol)                                     \
    do {                                                                       \
        double g_ = (double)(got), w_ = (double)(want);                        \
        int ok_ = (isnan(g_) && isnan(w_)) || (g_ == w_) ||                    \
                  (fabs(g_ - w_) <= (atol) + (rtol) * fabs(w_));               \
        check_count_++;                                                        \
        if (!ok_) {                                                            \
            check_failures_++;                                                 \
            fprintf(stderr,                                                    \
                    "%s:%d: %s: got %.17g, want %.17g (diff %.3g, atol %g, "   \
                    "rtol %g)\n",                                              \
                    __FILE__, __LINE__, #got, g_, w_, fabs(g_ - w_),           \
                    (double)(atol), (double)(rtol));                           \
        }                                                                      \
    } while (0)

/* Bit-exact float comparison (NaN equals NaN). */
#define CHECK_EQ_FLOAT(got, want) CHECK_CLOSE(got, want, 0.0, 0.0)

#define CHECK_STREQ(got, want)                                                 \
    do {                                                                       \
        const char *g_ = (got), *w_ = (want);                                  \
        check_count_++;                                                        \
        if (!g_ || !w_ || strcmp(g_, w_) != 0) {                               \
            check_failures_++;                                                 \
            fprintf(stderr, "%s:%d: %s: got \"%s\", want \"%s\"\n", __FILE__,  \
                    __LINE__, #got, g_ ? g_ : "(null)", w_ ? w_ : "(null)");   \
        }                                                                      \
    } while (0)

/* `hay` contains `needle`. */
#define CHECK_CONTAINS(hay, needle)                                            \
    do {                                                                       \
        const char *h_ = (hay), *n_ = (needle);                                \
        check_count_++;                                                        \
        if (!h_ || !n_ || !strstr(h_, n_)) {                                   \
            check_failures_++;                                                 \
            fprintf(stderr, "%s:%d: %s: \"%s\" does not contain \"%s\"\n",     \
                    __FILE__, __LINE__, #hay, h_ ? h_ : "(null)",              \
                    n_ ? n_ : "(null)");                                       \
        }                                                                      \
    } while (0)

#define CHECK_SKIP(...)                                                        \
    do {                                                                       \
        fprintf(stderr, "SKIP: " __VA_ARGS__);                                 \
        fputc('\n', stderr);                                                   \
        exit(CHECK_SKIP_CODE);                                                 \
    } while (0)

static inline int check_report(void)
{
    fprintf(stderr, "%d checks, %d failed\n", check_count_, check_failures_);
    return check_failures_ ? 1 : 0;
}

#endif
