/* nprobe/configcheck.h - environment packs (zip) and their diff.
 *
 * A pack is a zip of JSON members (manifest, env, libs, random, weights,
 * dataset, hyperparameters) plus pip.txt; docs/CONFIG_CHECK.md describes
 * each member and the levels the compare gives to differences. */
#ifndef NPROBE_CONFIGCHECK_H
#define NPROBE_CONFIGCHECK_H

#include <stddef.h>
#include <stdint.h>

#include "nprobe/common.h"
#include "nprobe/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct np_kv {
    const char *key;
    const char *value;
} np_kv;

typedef struct np_named_tensor {
    const char *name;         /* GPT-2 style parameter name */
    const np_tensor *t;
} np_named_tensor;

/* What a training run knows about itself, for `nprobe train
 * --config-check-out PACK.zip`. Everything is borrowed for the call. */
typedef struct np_run_info {
    const np_kv *hyperparams;  int n_hyperparams;  /* "lr"="0.001", "model"="gpt", ... */
    const np_kv *random;       int n_random;       /* "seed"="42", "rng.init.draws"="1234", ... */
    const np_named_tensor *weights; int n_weights; /* initial parameters */
    const char *const *batch_hashes; int n_batches; /* hex SHA-256 of the first batches */
    const char *const *data_files;   int n_data_files; /* files the run read (--data) */
    /* added at ABI level 1 (zero in older callers' designated initialisers) */
    const np_kv *libs;         int n_libs;         /* framework versions for libs.json:
                                                      "torch"="2.1.0", "cuda"="12.1", ... */
} np_run_info;

/* Write a complete pack for a run of the runtime to `zip_path`. */
np_status np_cc_pack_run(const char *zip_path, const np_run_info *run, np_error *err);

/* SHA-256 (np_sha256_*) lives in nprobe/common.h. */

/* ==== pack ============================================================== */

/* The pack format (manifest.json "format" / "format_version"). */
#define NP_CC_FORMAT "nprobe-config-check"
#define NP_CC_FORMAT_VERSION 1

/* What `nprobe config_check pack` collects. Everything is borrowed. */
typedef struct np_cc_pack_opts {
    const char *weights_path;          /* checkpoint .h5 (docs/CONTRACTS.md), or NULL */
    const char *dump_path;             /* dump.h5 or a dump folder, or NULL */
    const char *const *datasets; int n_datasets; /* files or folders to hash */
    const char *hyperparams_path;      /* JSON object or key=value lines, or NULL */
    long long seed; int has_seed;      /* --seed */
    const char *python;                /* interpreter for pip.txt; NULL: python3 on
                                        * PATH if any; "" : no pip.txt */
    int python_timeout_s;              /* limit for listing its packages (pip, then
                                        * importlib.metadata, together); 0: 60 s.
                                        * Past it the interpreter's process group is
                                        * killed and pip.txt is left out, the manifest's
                                        * collected.pip saying why */
} np_cc_pack_opts;

/* Write a pack from the current process's environment and `opts`. The zip
 * appears at `zip_path` only when complete (written to a temporary name in
 * the same folder, then renamed). */
np_status np_cc_pack(const char *zip_path, const np_cc_pack_opts *opts, np_error *err);

/* Both in one: `run` (may be NULL) fills random, weights, dataset batches and
 * files, hyperparameters; `opts` (may be NULL) adds its files, seed and
 * hyperparameter file and picks the Python for pip.txt. np_cc_pack() and
 * np_cc_pack_run() call this. */
np_status np_cc_pack_ex(const char *zip_path, const np_cc_pack_opts *opts,
                        const np_run_info *run, np_error *err);

/* The value stored in env.json for a variable whose name looks secret:
 * "sha256:" + hex SHA-256 of (the fixed salt of this pack format || value).
 * `out` needs 72 bytes. Exposed for tests. */
void np_cc_mask_value(char out[72], const char *value);
/* 1 when `name` looks like it holds a secret (KEY, TOKEN, SECRET, JWT,
 * SSHPASS, a PWD word as in MYSQL_PWD but not PWD itself, ...). */
int np_cc_name_is_secret(const char *name);
/* 1 when a value carries a secret whatever its name: a URL with
 * user:password@, a token=/password=/key=... pair, a JSON Web Token. */
int np_cc_value_is_secret(const char *value);

/* ==== compare =========================================================== */

/* Level of one difference, and of an item (pass_check is PASS, WARNING or
 * ERROR; INFO differences do not make an item fail). */
typedef enum np_cc_level {
    NP_CC_PASS = 0,
    NP_CC_INFO,
    NP_CC_WARNING,
    NP_CC_ERROR,
    NP_CC_LEVEL_COUNT
} np_cc_level;

/* "pass", "info", "warning", "error". */
const char *np_cc_level_name(np_cc_level lv);

/* The compared items, in report order. */
typedef enum np_cc_item_id {
    NP_CC_ENV = 0,
    NP_CC_LIBS,
    NP_CC_PIP,
    NP_CC_RANDOM,
    NP_CC_WEIGHTS,
    NP_CC_DATASET,
    NP_CC_HYPERPARAMS,
    NP_CC_ITEM_COUNT
} np_cc_item_id;

/* "env", "libs", "pip", "random", "weights", "dataset", "hyperparameters". */
const char *np_cc_item_name(np_cc_item_id id);

typedef struct np_cc_row {       /* the strings belong to the item (strings) */
    char *key;
    char *bench;               /* NULL: absent from the bench pack */
    char *cmp;                 /* NULL: absent from the compare pack */
    np_cc_level level;         /* PASS when equal */
} np_cc_row;

typedef struct np_cc_item {
    np_cc_level pass_check;    /* PASS, WARNING or ERROR */
    char *note;                /* e.g. "weights.json is missing from CMP", or NULL */
    np_cc_row *rows;           /* every key of either side, sorted */
    int n_rows;
    void *strings;             /* the rows' text (an np_arena; np_cc_result_free) */
} np_cc_item;

typedef struct np_cc_result {
    np_cc_item items[NP_CC_ITEM_COUNT];
    char *bench_path, *cmp_path;
} np_cc_result;

/* Limits for reading packs from other people; 0 fields mean the defaults
 * (64 MiB per entry, 256 MiB in total, 4096 entries). */
typedef struct np_cc_limits {
    size_t max_entry_bytes;
    size_t max_total_bytes;
    long max_entries;
} np_cc_limits;

#define NP_CC_DEFAULT_MAX_ENTRY ((size_t)64 << 20)
#define NP_CC_DEFAULT_MAX_TOTAL ((size_t)256 << 20)
#define NP_CC_DEFAULT_MAX_ENTRIES 4096L

/* Diff two packs. Entries are read in memory (never extracted). A pack that
 * is not a zip, is truncated, holds an entry name that is absolute, contains
 * ".." or a backslash, an entry that expands past a limit, or malformed JSON
 * is refused (NP_ERR_FORMAT / NP_ERR_LIMIT / NP_ERR_JSON, err->file = the
 * pack, err->key = the entry). A member missing from one side is reported in
 * its item, not refused. `lim` may be NULL. *out is the caller's to free. */
np_status np_cc_compare(np_cc_result **out, const char *bench_zip, const char *cmp_zip,
                        const np_cc_limits *lim, np_error *err);

/* Worst pass_check over the items. */
np_cc_level np_cc_result_level(const np_cc_result *r);

/* Write the report: a "summary" sheet (item, pass_check, note) and one sheet
 * per item (key, bench, cmp, level); an item of more rows than a sheet holds
 * (Excel: 1,048,575 under the header) continues on "item (2)", "item (3)",
 * ... and the summary's note says so: no row is cut. Rows are streamed
 * (constant memory). _ex: at most rows_per_sheet rows a sheet (0: Excel's
 * limit). */
np_status np_cc_write_xlsx(const np_cc_result *r, const char *path, np_error *err);
np_status np_cc_write_xlsx_ex(const np_cc_result *r, const char *path, long rows_per_sheet,
                              np_error *err);
/* The same as JSON: {"summary": {item: level}, "items": {item: {...}}}. */
np_status np_cc_write_json(const np_cc_result *r, const char *path, np_error *err);

/* ---- compare in bounded memory (ABI level 2) ----------------------------
 * np_cc_compare holds every row in memory (about 100 bytes a key and more);
 * np_cc_compare_report diffs and writes the report in one go, its memory
 * independent of the number of keys: each side's members are streamed out
 * of the zip, flattened into records sorted in runs of at most sort_budget
 * bytes (spilled to temporary files in the report's folder, created
 * exclusively and unlinked at once, so none is ever left behind), merged,
 * joined, and the rows are streamed into the report. Same rows, levels and
 * bytes as np_cc_compare followed by np_cc_write_xlsx_ex / np_cc_write_json.
 * A full disk or a file size limit while spilling: NP_ERR_NOSPACE, nothing
 * left under the report's name. */
#define NP_CC_DEFAULT_SORT_BUDGET ((size_t)16 << 20)

typedef struct np_cc_report_opts {
    int json;                  /* 0: xlsx, 1: json */
    long rows_per_sheet;       /* xlsx: at most this many rows a sheet; 0: Excel's limit */
    size_t sort_budget;        /* bytes of records a side sorts in memory before it spills
                                * a run; 0: NP_CC_DEFAULT_SORT_BUDGET (at least 4096) */
} np_cc_report_opts;

typedef struct np_cc_counts {
    long long rows[NP_CC_ITEM_COUNT];                      /* keys of either side */
    long long level[NP_CC_ITEM_COUNT][NP_CC_LEVEL_COUNT];  /* rows of each level */
    long long spill_runs;      /* sorted runs written to temporary files, both sides */
} np_cc_counts;

/* Diff two packs into the report `report` (its folder must exist). *out
 * gets each item's pass_check and note; its rows are in the report only
 * (rows NULL, n_rows 0). `counts` (may be NULL) gets the row counts.
 * `lim`, `opts` may be NULL. */
np_status np_cc_compare_report(np_cc_result **out, np_cc_counts *counts, const char *bench_zip,
                               const char *cmp_zip, const char *report,
                               const np_cc_limits *lim, const np_cc_report_opts *opts,
                               np_error *err);

/* NULL is a no-op. */
void np_cc_result_free(np_cc_result *r);

#ifdef __cplusplus
}
#endif
#endif
