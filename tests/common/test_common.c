/* tests/common/test_common.c - the error convention, edit distance, the
 * dump-format compound types and np_grow. */
#include <hdf5.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "check.h"
#include "nprobe/common.h"
#include "nprobe/format.h"

static void test_error_first_wins(void)
{
    np_error err;
    np_error_clear(&err);
    CHECK_EQ_INT(err.status, NP_OK);
    np_status st = np_error_set(&err, NP_ERR_CONFIG, "cfg.json", "task", "bad value '%s'", "x");
    CHECK_EQ_INT(st, NP_ERR_CONFIG);
    np_error_set(&err, NP_ERR_IO, "other", NULL, "second");
    CHECK_EQ_INT(err.status, NP_ERR_CONFIG);
    CHECK_STREQ(err.file, "cfg.json");
    CHECK_STREQ(err.key, "task");
    CHECK_STREQ(err.text, "bad value 'x'");
    CHECK_EQ_INT(np_error_set(NULL, NP_ERR_IO, NULL, NULL, "ignored"), NP_ERR_IO);
    np_error_set_at(NULL, NP_ERR_JSON, "f", 3, 4, NULL, "x");
    np_error e2;
    np_error_clear(&e2);
    np_error_set_at(&e2, NP_ERR_JSON, "f.json", 3, 14, NULL, "unexpected '}'");
    CHECK_EQ_INT(e2.line, 3);
    CHECK_EQ_INT(e2.column, 14);
    for (int s = 0; s < NP_STATUS_COUNT; s++)
        CHECK(np_strerror((np_status)s)[0] != '\0');
    CHECK_STREQ(np_strerror((np_status)999), "unknown status");
}

static void test_edit_distance(void)
{
    CHECK_EQ_INT(np_edit_distance("kitten", "sitting"), 3);
    CHECK_EQ_INT(np_edit_distance("", "abc"), 3);
    CHECK_EQ_INT(np_edit_distance("same", "same"), 0);
    const char *words[] = {"task", "dump_path", "level", "scope"};
    CHECK_EQ_INT(np_closest_word("dump_pth", words, 4), 1);
    CHECK_EQ_INT(np_closest_word("levle", words, 4), 2);
    CHECK_EQ_INT(np_closest_word("completely_else", words, 4), -1);
}

static void test_format_types(void)
{
    hid_t et = (hid_t)np_fmt_entry_h5type();
    hid_t ct = (hid_t)np_fmt_call_h5type();
    CHECK(et >= 0);
    CHECK(ct >= 0);
    CHECK_EQ_INT(H5Tget_size(et), sizeof(np_entry_rec));
    CHECK_EQ_INT(H5Tget_nmembers(et), 18);
    CHECK_EQ_INT(H5Tget_member_index(et, "norm") >= 0, 1);
    CHECK_EQ_INT(H5Tget_member_index(ct, "parent") >= 0, 1);
    H5Tclose(et);
    H5Tclose(ct);
    char buf[8];
    CHECK_EQ_INT(np_fmt_copy_name(buf, sizeof buf, "abc"), 0);
    CHECK_STREQ(buf, "abc");
    CHECK_EQ_INT(buf[7], 0);
    CHECK_EQ_INT(np_fmt_copy_name(buf, sizeof buf, "abcdefghij"), 1);
    CHECK_STREQ(buf, "abcdefg");
}

static int iso_return(void *arg)
{
    return *(int *)arg;
}

static int iso_crash(void *arg)
{
    (void)arg;
    raise(SIGSEGV);
    return 0;
}

static int iso_loop(void *arg)
{
    volatile int *stop = arg;
    while (!*stop)
        ;
    return 0;
}

/* np_run_isolated: the child's result, a crash and a hang are told apart,
 * and the caller survives both; two children at once. */
static void test_isolated(void)
{
    int v = 7, sig = -1;
    CHECK_EQ_INT(np_run_isolated(iso_return, &v, 10.0, &sig), 7);
    CHECK_EQ_INT(sig, 0);
    CHECK_EQ_INT(np_run_isolated(iso_crash, NULL, 10.0, &sig), NP_ISOLATE_CRASHED);
    CHECK_EQ_INT(sig, SIGSEGV);
    int stop = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_EQ_INT(np_run_isolated(iso_loop, &stop, 0.3, &sig), NP_ISOLATE_TIMEOUT);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double el = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    CHECK_MSG(el >= 0.3 && el < 5.0, "timeout after %.3f s", el);
    np_isolated a, b;
    int va = 3, vb = 4;
    CHECK_EQ_INT(np_isolated_start(&a, iso_return, &va), 0);
    CHECK_EQ_INT(np_isolated_start(&b, iso_return, &vb), 0);
    CHECK_EQ_INT(np_isolated_wait(&b, 10.0, NULL), 4);
    CHECK_EQ_INT(np_isolated_wait(&a, 10.0, NULL), 3);
    CHECK_EQ_INT(np_isolated_wait(&a, 10.0, NULL), NP_ISOLATE_NOFORK); /* already waited */
}

/* np_grow: the capacities doubling gives (16 first, then 2x, or the need
 * when it is larger), the elements kept, and sizes past SIZE_MAX refused
 * with the array left as it was. */
static void test_grow(void)
{
    int *v = NULL;
    size_t cap = 0, n = 0;
    const size_t want_caps[] = {16, 32, 64, 128};
    int k = 0;
    for (int i = 0; i < 100; i++) {
        size_t before = cap;
        if (n == cap)
            CHECK_EQ_INT(np_grow((void **)&v, &cap, n + 1, sizeof *v), 0);
        if (cap != before)
            CHECK_MSG(k < 4 && cap == want_caps[k++], "capacity %zu after %zu", cap, before);
        v[n++] = i * 3;
    }
    CHECK_EQ_INT(k, 4);
    int kept = 1;
    for (int i = 0; i < 100; i++)
        kept &= v[i] == i * 3;
    CHECK_MSG(kept, "elements lost in growth");
    CHECK_EQ_INT(np_grow((void **)&v, &cap, 100, sizeof *v), 0); /* room enough: unchanged */
    CHECK_MSG(cap == 128, "capacity %zu (want 128)", cap);
    CHECK_EQ_INT(np_grow((void **)&v, &cap, 1000, sizeof *v), 0); /* past 2x: the need */
    CHECK_MSG(cap == 1000, "capacity %zu (want 1000)", cap);
    int *keep = v;
    CHECK_EQ_INT(np_grow((void **)&v, &cap, SIZE_MAX / 2, sizeof *v), -1); /* need x elem overflows */
    CHECK_EQ_INT(np_grow((void **)&v, &cap, 1001, 0), -1);
    CHECK_MSG(v == keep && cap == 1000 && v[99] == 297, "a refused growth changed the array");
    size_t big = SIZE_MAX / 8;
    char *c = NULL;
    CHECK_EQ_INT(np_grow((void **)&c, &big, big + 1, 8), -1); /* (big + 1) x 8 overflows */
    CHECK_MSG(c == NULL && big == SIZE_MAX / 8, "a refused growth changed the array");
    free(v);
}

int main(void)
{
    test_grow();
    test_isolated();
    test_error_first_wins();
    test_edit_distance();
    test_format_types();
    return check_report();
}
