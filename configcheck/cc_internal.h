/* configcheck/cc_internal.h - helpers shared by the configcheck sources
 * (not installed, not part of the public API). */
#ifndef NPROBE_CC_INTERNAL_H
#define NPROBE_CC_INTERNAL_H

#include <jansson.h>
#include <stdio.h>

#include "nprobe/configcheck.h"

/* The pack's member names, indexed by np_cc_item_id. */
extern const char *const np_cc_member_names[]; /* NP_CC_ITEM_COUNT (util.c checks it) */

/* Hex of a 32-byte digest. */
void np_cc_digest_hex(char hex[65], const unsigned char d[32]);

/* SHA-256 and size of a file's bytes. */
np_status np_cc_hash_file(char hex[65], uint64_t *size, const char *path, np_error *err);

/* Statistics over the finite elements of `n` values stored as `kind`
 * ('f' float32, 'd' float64, 'l' int64, 'i' int32, 'b' uint8): an object
 * {max, min, mean, norm, nonfinite}; max/min/mean/norm are null when no
 * element is finite. New reference. */
json_t *np_cc_stats_json(const void *data, char kind, int64_t n);

/* ---- collectors (collect_*.c); each returns a new reference or status --- */

/* {"variables": {NAME: value or masked}, "masking": {...}} */
json_t *np_cc_collect_env(void);
/* nprobe version and build, compiler, HDF5, OpenBLAS, OpenMP, ... */
json_t *np_cc_collect_libs(void);
/* Output of `python -m pip list --format=freeze` (or importlib.metadata).
 * `python` NULL: python3 on PATH. NP_ERR_NOTFOUND when there is no Python.
 * *out (malloc'd, NUL-terminated) is the caller's. */
np_status np_cc_collect_pip(char **out, const char *python, int timeout_s, np_error *err);

/* Add {name: {sha256, dtype, shape, max, min, mean, norm, nonfinite}} to
 * `params` for every parameter of a checkpoint / a dump / a list of tensors. */
np_status np_cc_weights_checkpoint(json_t *params, const char *path, np_error *err);
/* `*used` receives the dump.h5 that was read (malloc'd, caller frees). */
np_status np_cc_weights_dump(json_t *params, char **used, const char *path, np_error *err);
np_status np_cc_weights_tensors(json_t *params, const np_named_tensor *w, int n, np_error *err);

/* Add {path: {size, sha256}} for a file, or for every regular file under a folder. */
np_status np_cc_dataset_add(json_t *files, const char *path, np_error *err);

/* Read a hyperparameter file: a JSON object, or key=value lines ('#' comments). */
np_status np_cc_hyperparams_file(json_t **out, const char *path, np_error *err);

/* ---- writing the zip (pack.c) ------------------------------------------ */
typedef struct np_cc_member {
    const char *name;
    char *data;                /* owned */
    size_t len;
} np_cc_member;

/* ---- the rows of a compare, for the report writers (report.c) ------------ */

/* Where the writers take an item's rows from, in order: the in-memory
 * result (cc_rows_mem), or the rows files a streamed compare wrote
 * (cc_rows_files: each file holds row records, rewound; `demote` reads an
 * item's non-pass rows back as info). */
typedef struct cc_rows cc_rows;
struct cc_rows {
    long long n[NP_CC_ITEM_COUNT];                /* rows per item */
    int (*next)(cc_rows *src, int item, np_cc_row *row); /* 1, or 0 on a failure */
    int failed;                                   /* errno of a read failure */
    const np_cc_result *r;                        /* in memory */
    long long pos[NP_CC_ITEM_COUNT];
    FILE *f[NP_CC_ITEM_COUNT];                    /* files */
    int demote[NP_CC_ITEM_COUNT];
    char *buf;
    size_t cap;
};

void cc_rows_mem(cc_rows *src, const np_cc_result *r);
void cc_rows_files(cc_rows *src, FILE *const f[NP_CC_ITEM_COUNT],
                   const long long n[NP_CC_ITEM_COUNT], const int demote[NP_CC_ITEM_COUNT]);
void cc_rows_fini(cc_rows *src);
/* The row record of a rows file (then key, bench and cmp bytes). */
typedef struct cc_row_hdr {
    uint32_t klen, blen, clen, level; /* UINT32_MAX: the side is absent */
} cc_row_hdr;

np_status cc_write_xlsx(cc_rows *src, const np_cc_result *r, const char *path,
                        long rows_per_sheet, np_error *err);
np_status cc_write_json(cc_rows *src, const np_cc_result *r, const char *path, np_error *err);

#endif
