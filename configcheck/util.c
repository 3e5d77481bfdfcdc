/* configcheck/util.c - small helpers: digest hex, hashing a file, statistics
 * of a parameter, the item and level name tables. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cc_internal.h"

/* enum order; unsized, so a missing name fails the size checks below */
const char *const np_cc_member_names[] = {
    "env.json", "libs.json", "pip.txt", "random.json",
    "weights.json", "dataset.json", "hyperparameters.json",
};

static const char *const item_names[] = {
    "env", "libs", "pip", "random", "weights", "dataset", "hyperparameters",
};

static const char *const level_names[] = {"pass", "info", "warning", "error"};
_Static_assert(sizeof np_cc_member_names / sizeof np_cc_member_names[0] == NP_CC_ITEM_COUNT,
               "np_cc_member_names");
_Static_assert(sizeof item_names / sizeof item_names[0] == NP_CC_ITEM_COUNT, "item_names");
_Static_assert(sizeof level_names / sizeof level_names[0] == NP_CC_LEVEL_COUNT, "level_names");

/* The worst level of a result (here, beside the level names: compare.c and
 * report.c both ask it, and report.c is called by compare.c). */
np_cc_level np_cc_result_level(const np_cc_result *r)
{
    np_cc_level w = NP_CC_PASS;
    for (int i = 0; r && i < NP_CC_ITEM_COUNT; i++)
        if (r->items[i].pass_check > w)
            w = r->items[i].pass_check;
    return w;
}

const char *np_cc_item_name(np_cc_item_id id)
{
    return (unsigned)id < NP_CC_ITEM_COUNT ? item_names[id] : "?";
}

const char *np_cc_level_name(np_cc_level lv)
{
    return (unsigned)lv < NP_CC_LEVEL_COUNT ? level_names[lv] : "?";
}

void np_cc_digest_hex(char hex[65], const unsigned char d[32])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        hex[2 * i] = digits[d[i] >> 4];
        hex[2 * i + 1] = digits[d[i] & 15];
    }
    hex[64] = '\0';
}

np_status np_cc_hash_file(char hex[65], uint64_t *size, const char *path, np_error *err)
{
    const char *why = NULL;
    FILE *f = np_fopen_regular(path, &why);
    if (!f)
        return np_error_set(err, NP_ERR_IO, path, NULL, "cannot open: %s", why);
    enum { CHUNK = 1 << 16 };
    unsigned char *buf = malloc(CHUNK);
    if (!buf) {
        fclose(f);
        return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    }
    np_sha256 s;
    np_sha256_init(&s);
    uint64_t total = 0;
    size_t n;
    while ((n = fread(buf, 1, CHUNK, f)) > 0) {
        np_sha256_update(&s, buf, n);
        total += n;
    }
    int bad = ferror(f);
    free(buf);
    fclose(f);
    if (bad)
        return np_error_set(err, NP_ERR_IO, path, NULL, "read error");
    unsigned char d[32];
    np_sha256_final(&s, d);
    np_cc_digest_hex(hex, d);
    *size = total;
    return NP_OK;
}

static json_t *real_or_null(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

json_t *np_cc_stats_json(const void *data, char kind, int64_t n)
{
    double mx = -INFINITY, mn = INFINITY, sum = 0.0, sq = 0.0;
    int64_t finite = 0, nonfinite = 0;
    for (int64_t i = 0; i < n; i++) {
        double v;
        switch (kind) {
        case 'f': v = ((const float *)data)[i]; break;
        case 'd': v = ((const double *)data)[i]; break;
        case 'l': v = (double)((const int64_t *)data)[i]; break;
        case 'i': v = ((const int32_t *)data)[i]; break;
        default: v = ((const uint8_t *)data)[i]; break;
        }
        if (!isfinite(v)) {
            nonfinite++;
            continue;
        }
        finite++;
        mx = v > mx ? v : mx;
        mn = v < mn ? v : mn;
        sum += v;
        sq += v * v;
    }
    double nan = NAN;
    return json_pack("{s:o, s:o, s:o, s:o, s:I}", "max", real_or_null(finite ? mx : nan),
                     "min", real_or_null(finite ? mn : nan), "mean",
                     real_or_null(finite ? sum / (double)finite : nan), "norm",
                     real_or_null(finite ? sqrt(sq) : nan), "nonfinite", (json_int_t)nonfinite);
}
