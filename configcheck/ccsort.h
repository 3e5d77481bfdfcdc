/* configcheck/ccsort.h - the bounded-memory machinery of config_check compare
 * (private to configcheck): spill files, an external sort of flattened
 * (key, value) records, and the sorted, de-duplicated stream of one side.
 *
 * A record is one member of a JSON object (or element of an array) under its
 * flattened key "a/b/c": a leaf with its text, or a marker for a container
 * that is flattened further. Records are sorted by (key, parent, seq):
 * `parent` names the object (or array) holding the member, `seq` is the
 * order of appearance. Two records of one key and one parent are a
 * duplicate object key (refused, as the JSON parser did); of several
 * records of one key the last visible leaf wins (as in a JSON object whose
 * flattened keys collide). Markers and hidden records (the parts of a
 * member that are not compared) only take part in the duplicate check. */
#ifndef NPROBE_CC_SORT_H
#define NPROBE_CC_SORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "nprobe/common.h"

#define CC_REC_MARKER 1u /* a container flattened further: no value */
#define CC_REC_HIDDEN 2u /* outside the compared part */

/* Where spill files go and what they may cost: dir NULL means no spilling
 * (everything stays in memory: np_cc_compare's in-memory result). */
typedef struct cc_spill {
    const char *dir;    /* the output folder */
    const char *report; /* the report being made there, named in errors */
    size_t budget;      /* bytes of records a side holds before it spills a run */
    size_t *kept;       /* bytes of the small sides kept in memory (at most budget / 2
                         * in all), so that a small pack makes no runs */
} cc_spill;

/* A temporary file in spill->dir, created exclusively and unlinked at once
 * (so nothing is left whatever ends the process); a stream of it in *f. */
np_status cc_spill_file(FILE **f, const cc_spill *sp, np_error *err);
/* The error for a failed write or read of a spill file (errno `en`). */
np_status cc_spill_error(const cc_spill *sp, int en, np_error *err);

typedef struct cc_sorter cc_sorter;

np_status cc_sorter_new(cc_sorter **s, const cc_spill *sp, np_error *err);
/* Add a record (value NULL for a marker). */
np_status cc_sorter_put(cc_sorter *s, const char *key, size_t klen, const char *val, size_t vlen,
                        uint64_t parent, unsigned flags, np_error *err);
void cc_sorter_free(cc_sorter *s);

/* The sorted stream of one side: the visible leaves, one per key. */
typedef struct cc_side cc_side;

/* Sort what `s` holds (it is consumed: *side owns it from now on). `what`
 * names the member for a duplicate key error. */
np_status cc_side_open(cc_side **side, cc_sorter *s, const char *pack, const char *what,
                       np_error *err);
/* The next key and its value (valid until the next call); 0 at the end, 1
 * with a record, -1 on error (err set). */
int cc_side_next(cc_side *side, const char **key, const char **val, np_error *err);
void cc_side_free(cc_side *side);
/* How many runs the side was sorted in (0: in memory). */
long long cc_side_runs(const cc_side *side);

#endif
