/* configcheck/cc_internal.h - helpers shared by the configcheck sources
 * (not installed, not part of the public API). */
#ifndef NPROBE_CC_INTERNAL_H
#define NPROBE_CC_INTERNAL_H

#include <jansson.h>

#include "nprobe/configcheck.h"

/* The pack's member names, indexed by np_cc_item_id. */
extern const char *const np_cc_member_names[NP_CC_ITEM_COUNT];

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

#endif
