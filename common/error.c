/* common/error.c - status strings, the first-error-wins error struct, and
 * the edit distance behind "did you mean". */
#include "nprobe/common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const status_text[] = { /* enum order, no designators: the size check below sees a missing name */
    "ok",
    "out of memory",
    "invalid argument",
    "input/output error",
    "no space left (disk full or file size limit)",
    "bad file format",
    "invalid configuration",
    "invalid JSON",
    "HDF5 error",
    "zip error",
    "shape mismatch",
    "unsupported dtype",
    "not found",
    "unsupported",
    "incomplete data",
    "limit exceeded",
    "internal error",
};

_Static_assert(sizeof status_text / sizeof status_text[0] == NP_STATUS_COUNT,
               "status_text must name every np_status");

const char *np_strerror(np_status st)
{
    if ((int)st < 0 || st >= NP_STATUS_COUNT || !status_text[st])
        return "unknown status";
    return status_text[st];
}

void np_error_clear(np_error *err)
{
    if (err)
        memset(err, 0, sizeof *err);
}

static void copy_str(char *dst, size_t cap, const char *src)
{
    if (!src) {
        dst[0] = '\0';
        return;
    }
    snprintf(dst, cap, "%s", src);
}

static np_status set_v(np_error *err, np_status st, const char *file, long line,
                       long column, const char *key, const char *fmt, va_list ap)
{
    if (!err || err->status != NP_OK)
        return st;
    err->status = st;
    copy_str(err->file, sizeof err->file, file);
    copy_str(err->key, sizeof err->key, key);
    err->line = line;
    err->column = column;
    if (fmt)
        vsnprintf(err->text, sizeof err->text, fmt, ap);
    else
        copy_str(err->text, sizeof err->text, np_strerror(st));
    return st;
}

np_status np_error_set(np_error *err, np_status st, const char *file,
                       const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    st = set_v(err, st, file, 0, 0, key, fmt, ap);
    va_end(ap);
    return st;
}

np_status np_error_set_at(np_error *err, np_status st, const char *file,
                          long line, long column, const char *key,
                          const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    st = set_v(err, st, file, line, column, key, fmt, ap);
    va_end(ap);
    return st;
}

size_t np_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    size_t *row = malloc((lb + 1) * sizeof *row);
    if (!row)
        return (size_t)-1;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            size_t best = diag + cost;
            if (row[j] + 1 < best)
                best = row[j] + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    size_t d = row[lb];
    free(row);
    return d;
}

int np_closest_word(const char *word, const char *const *words, int n)
{
    size_t len = strlen(word);
    size_t limit = len / 3 > 2 ? len / 3 : 2;
    int best = -1;
    size_t best_d = (size_t)-1;
    for (int i = 0; i < n; i++) {
        size_t d = np_edit_distance(word, words[i]);
        if (d < best_d) {
            best_d = d;
            best = i;
        }
    }
    return best_d <= limit ? best : -1;
}
