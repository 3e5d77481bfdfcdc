/* configcheck/compare.c - diff two packs item by item. Each member is
 * flattened to "a/b/c" -> text, the keys of both sides are merged, and each
 * difference gets a level from the documented lists below
 * (docs/CONFIG_CHECK.md): what can change the numbers is an error. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "packread.h"

/* ---- levels ------------------------------------------------------------ */

/* A pattern ending in '*' is a prefix. */
static int match_any(const char *name, const char *const *pats, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(pats[i]);
        if (len && pats[i][len - 1] == '*') {
            if (strncmp(name, pats[i], len - 1) == 0)
                return 1;
        } else if (strcmp(name, pats[i]) == 0) {
            return 1;
        }
    }
    return 0;
}
#define MATCH(name, pats) match_any(name, pats, sizeof pats / sizeof pats[0])

/* Environment variables that change numerics: thread counts, BLAS and math
 * libraries, device visibility, framework switches, library loading. */
static const char *const env_error[] = {
    "OMP_*", "GOMP_*", "KMP_*", "OPENBLAS_*", "GOTO_*", "MKL_*", "BLIS_*", "VECLIB_*",
    "DNNL_*", "ONEDNN_*", "CUDA_*", "CUBLAS_*", "CUDNN_*", "NCCL_*", "NVIDIA_TF32_OVERRIDE",
    "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ASCEND_*", "HCCL_*", "NPU_*", "NPROBE_*",
    "LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONHASHSEED", "TORCH_*", "PYTORCH_*", "TF_*", "XLA_*",
    "JAX_*", "MS_*", "MINDSPORE_*", "CUBLAS_WORKSPACE_CONFIG",
};
/* Variables that change which programs and libraries are found, or parsing. */
static const char *const env_warning[] = {
    "PATH", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV",
    "LANG", "LC_*", "TZ", "CC", "CFLAGS", "LDFLAGS", "MALLOC_*", "GLIBC_TUNABLES",
};

static np_cc_level env_level(const char *key)
{
    if (MATCH(key, env_error))
        return NP_CC_ERROR;
    if (MATCH(key, env_warning))
        return NP_CC_WARNING;
    return NP_CC_INFO;
}

static np_cc_level libs_level(const char *key)
{
    static const char *const info[] = {"openblas/num_procs", "openmp/num_procs"};
    static const char *const warning[] = {"hdf5", "jansson", "libzip", "libxlsxwriter",
                                          "openmp/version"};
    static const char *const error[] = {"nprobe/*", "compiler", "libc/*", "openblas/*",
                                        "openmp/max_threads"};
    if (MATCH(key, info))
        return NP_CC_INFO;
    if (MATCH(key, warning))
        return NP_CC_WARNING;
    if (MATCH(key, error))
        return NP_CC_ERROR;
    return NP_CC_WARNING;
}

/* Python distributions that compute (normalised names). */
static const char *const pip_error[] = {
    "torch", "torch-npu", "torchvision", "torchaudio", "numpy", "scipy", "jax", "jaxlib",
    "tensorflow", "tensorflow-cpu", "tensorflow-gpu", "mindspore", "paddlepaddle", "apex",
    "deepspeed", "megatron-core", "transformers", "accelerate", "triton", "flash-attn",
    "xformers", "mkl", "intel-openmp", "nvidia-*", "cupy*", "onnxruntime*", "scikit-learn",
    "mindstudio-probe",
};

static np_cc_level pip_level(const char *key)
{
    return MATCH(key, pip_error) ? NP_CC_ERROR : NP_CC_WARNING;
}

static np_cc_level item_level(np_cc_item_id id, const char *key)
{
    switch (id) {
    case NP_CC_ENV: return env_level(key);
    case NP_CC_LIBS: return libs_level(key);
    case NP_CC_PIP: return pip_level(key);
    default: return NP_CC_ERROR;
    }
}

/* Level when a member is in one pack only. */
static np_cc_level missing_level(np_cc_item_id id)
{
    return id == NP_CC_PIP ? NP_CC_WARNING : NP_CC_ERROR;
}

/* ---- rows ----------------------------------------------------------------
 * The two sides come sorted from ccflat.c/ccsort.c and are merge-joined.
 * In memory (np_cc_compare) the rows go into the item, their text in large
 * blocks the result owns (np_cc_item.strings); streamed
 * (np_cc_compare_report) they go to a spill file per item that the report
 * writers read back, and only counts stay in memory. */

/* What the summary and the batch explanation need of an item's rows. */
typedef struct item_acc {
    FILE *rows;                 /* streamed: the rows file; NULL in memory */
    size_t cap;                 /* in memory: rows allocated */
    long long n_rows, n_level[NP_CC_LEVEL_COUNT];
    int seed_error;             /* a row whose key holds "seed" is an error */
    int other_diff;             /* a non-pass row that is not a batch hash of both sides */
    int demote;                 /* dataset: non-pass rows read back as info */
} item_acc;

static int row_put_file(FILE *f, const char *key, const char *bench, const char *cmp,
                        np_cc_level lv)
{
    cc_row_hdr h = {(uint32_t)strlen(key), bench ? (uint32_t)strlen(bench) : UINT32_MAX,
                 cmp ? (uint32_t)strlen(cmp) : UINT32_MAX, (uint32_t)lv};
    fwrite(&h, sizeof h, 1, f);
    fwrite(key, 1, h.klen, f);
    if (bench)
        fwrite(bench, 1, h.blen, f);
    if (cmp)
        fwrite(cmp, 1, h.clen, f);
    return ferror(f) ? -1 : 0;
}

static int row_put_mem(np_cc_item *it, item_acc *acc, const char *key, const char *bench,
                       const char *cmp, np_cc_level lv)
{
    if ((size_t)it->n_rows == acc->cap) {
        size_t cap = acc->cap ? 2 * acc->cap : 64;
        np_cc_row *nr = realloc(it->rows, cap * sizeof *nr);
        if (!nr)
            return -1;
        it->rows = nr;
        acc->cap = cap;
    }
    np_arena *a = it->strings;
    if (!a && !(a = it->strings = calloc(1, sizeof *a)))
        return -1;
    np_cc_row *r = &it->rows[it->n_rows];
    r->key = np_arena_put(a, key, strlen(key));
    r->bench = bench ? np_arena_put(a, bench, strlen(bench)) : NULL;
    r->cmp = cmp ? np_arena_put(a, cmp, strlen(cmp)) : NULL;
    r->level = lv;
    if (!r->key || (bench && !r->bench) || (cmp && !r->cmp))
        return -1;
    it->n_rows++;
    return 0;
}

static np_status add_row(np_cc_item *it, item_acc *acc, np_cc_item_id id, const char *key,
                         const char *bench, const char *cmp, const cc_spill *sp, np_error *err)
{
    np_cc_level lv = bench && cmp && strcmp(bench, cmp) == 0 ? NP_CC_PASS : item_level(id, key);
    if (acc->n_rows >= INT_MAX)
        return np_error_set(err, NP_ERR_LIMIT, NULL, np_cc_member_names[id], "more than %d keys",
                            INT_MAX);
    if (acc->rows ? row_put_file(acc->rows, key, bench, cmp, lv) != 0
                  : row_put_mem(it, acc, key, bench, cmp, lv) != 0)
        return acc->rows ? cc_spill_error(sp, errno ? errno : EIO, err)
                         : np_error_set(err, NP_ERR_NOMEM, NULL, np_cc_member_names[id],
                                        "out of memory for %lld keys", acc->n_rows);
    acc->n_rows++;
    acc->n_level[lv]++;
    if (lv == NP_CC_ERROR && strstr(key, "seed"))
        acc->seed_error = 1;
    if (lv != NP_CC_PASS && (strncmp(key, "batches/", 8) != 0 || !bench || !cmp))
        acc->other_diff = 1;
    return NP_OK;
}

/* Merge-join the sorted sides of item id into rows. */
static np_status join_sides(np_cc_item *it, item_acc *acc, np_cc_item_id id, cc_side *sa,
                            cc_side *sb, const cc_spill *sp, np_error *err)
{
    const char *ka = NULL, *va = NULL, *kb = NULL, *vb = NULL;
    int ha = cc_side_next(sa, &ka, &va, err);
    int hb = ha < 0 ? 0 : cc_side_next(sb, &kb, &vb, err);
    np_status st = NP_OK;
    while (st == NP_OK && ha >= 0 && hb >= 0 && (ha || hb)) {
        int c = !ha ? 1 : !hb ? -1 : strcmp(ka, kb);
        st = add_row(it, acc, id, c <= 0 ? ka : kb, c <= 0 ? va : NULL, c >= 0 ? vb : NULL, sp,
                     err);
        if (st == NP_OK && c <= 0)
            ha = cc_side_next(sa, &ka, &va, err);
        if (st == NP_OK && c >= 0 && ha >= 0)
            hb = cc_side_next(sb, &kb, &vb, err);
    }
    if (st == NP_OK && (ha < 0 || hb < 0))
        st = err && err->status != NP_OK ? err->status : NP_ERR_IO;
    return st;
}

static np_status diff_item(np_cc_item *it, item_acc *acc, np_cc_item_id id, np_cc_packin *a,
                           np_cc_packin *b, cc_side *sa, cc_side *sb, const cc_spill *sp,
                           np_error *err)
{
    const char *name = a->names[id] ? a->names[id] : np_cc_member_names[id];
    np_status st = join_sides(it, acc, id, sa, sb, sp, err);
    if (st != NP_OK)
        return st;
    np_cc_level worst = NP_CC_PASS;
    for (int lv = 0; lv < NP_CC_LEVEL_COUNT; lv++)
        if (acc->n_level[lv])
            worst = (np_cc_level)lv;
    char note[256] = "";
    if (a->present[id] != b->present[id]) {
        snprintf(note, sizeof note, "%s is missing from the %s pack", name,
                 a->present[id] ? "compare" : "bench");
        if (missing_level(id) > worst)
            worst = missing_level(id);
    } else if (!a->present[id] && a->msprobe && !np_cc_msprobe_member(id)) {
        snprintf(note, sizeof note, "not compared: msprobe's ConfigChecker packs no %s item",
                 np_cc_item_name(id));
    } else if (!a->present[id]) {
        snprintf(note, sizeof note, "%s is in neither pack", a->names[id] ? a->names[id] : name);
    }
    if (note[0] && !(it->note = strdup(note)))
        st = np_error_set(err, NP_ERR_NOMEM, NULL, name, "out of memory");
    it->pass_check = worst == NP_CC_INFO ? NP_CC_PASS : worst;
    return st;
}

void np_cc_result_free(np_cc_result *r)
{
    if (!r)
        return;
    for (int i = 0; i < NP_CC_ITEM_COUNT; i++) {
        np_cc_item *it = &r->items[i];
        if (it->strings) /* the rows' text */
            np_arena_free(it->strings);
        free(it->strings);
        free(it->rows);
        free(it->note);
    }
    free(r->bench_path);
    free(r->cmp_path);
    free(r);
}

/* The first batches are drawn by the seeded RNG: when the seeds differ (an
 * error under random) and every data file is equal, differing batch hashes
 * are a consequence, not a second finding; they drop to info. With equal
 * seeds they stay errors (the data or the pipeline differs). */
static np_status explain_batches(np_cc_result *r, item_acc *acc, np_error *err)
{
    np_cc_item *ds = &r->items[NP_CC_DATASET];
    item_acc *da = &acc[NP_CC_DATASET];
    if (!acc[NP_CC_RANDOM].seed_error || ds->note || da->other_diff)
        return NP_OK;
    long long moved = 0;
    for (int lv = NP_CC_INFO; lv < NP_CC_LEVEL_COUNT; lv++) {
        moved += da->n_level[lv];
        da->n_level[lv] = 0;
    }
    da->n_level[NP_CC_INFO] = moved;
    da->demote = 1;
    for (int j = 0; j < ds->n_rows; j++) /* in memory; streamed rows are demoted when read */
        if (ds->rows[j].level != NP_CC_PASS)
            ds->rows[j].level = NP_CC_INFO;
    ds->pass_check = NP_CC_PASS;
    if (moved && !(ds->note = strdup("the batch hashes differ because the seeds differ (see "
                                      "random); the data files are equal")))
        return np_error_set(err, NP_ERR_NOMEM, NULL, "dataset.json", "out of memory");
    return NP_OK;
}

/* Open both packs and diff every item (rows in memory, or into the rows
 * files of acc when sp->dir is set). */
static np_status compare_packs(np_cc_result **out, item_acc *acc, long long *runs,
                               const char *bench_zip, const char *cmp_zip,
                               const np_cc_limits *lim, const cc_spill *sp, np_error *err)
{
    *out = NULL;
    np_cc_packin a, b;
    np_status st = np_cc_packin_open(&a, bench_zip, lim, err);
    if (st != NP_OK)
        return st;
    st = np_cc_packin_open(&b, cmp_zip, lim, err);
    if (st != NP_OK) {
        np_cc_packin_free(&a);
        return st;
    }
    if (a.msprobe != b.msprobe) {
        /* the items' contents differ in kind (hashes against statistics) */
        st = np_error_set(err, NP_ERR_UNSUPPORTED, a.msprobe ? bench_zip : cmp_zip, NULL,
                          "refused: an msprobe ConfigChecker pack compares only with another "
                          "one (%s is nprobe's)", a.msprobe ? cmp_zip : bench_zip);
        np_cc_packin_free(&a);
        np_cc_packin_free(&b);
        return st;
    }
    np_cc_result *r = calloc(1, sizeof *r);
    if (!r || !(r->bench_path = strdup(bench_zip)) || !(r->cmp_path = strdup(cmp_zip)))
        st = np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory");
    /* every member of the bench pack, then of the compare pack (the order
     * in which a faulty member is found, as when the packs were read
     * whole); then item by item, the join */
    cc_side *sides[2][NP_CC_ITEM_COUNT] = {{NULL}};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < NP_CC_ITEM_COUNT && st == NP_OK; i++)
            if ((st = cc_flatten_member(&sides[k][i], k ? &b : &a, (np_cc_item_id)i, sp,
                                        err)) == NP_OK)
                *runs += cc_side_runs(sides[k][i]);
    for (int i = 0; i < NP_CC_ITEM_COUNT && st == NP_OK; i++) {
        if (sp->dir)
            st = cc_spill_file(&acc[i].rows, sp, err);
        if (st == NP_OK)
            st = diff_item(&r->items[i], &acc[i], (np_cc_item_id)i, &a, &b, sides[0][i],
                           sides[1][i], sp, err);
        cc_side_free(sides[0][i]);
        cc_side_free(sides[1][i]);
        sides[0][i] = sides[1][i] = NULL;
    }
    for (int i = 0; i < NP_CC_ITEM_COUNT; i++) {
        cc_side_free(sides[0][i]);
        cc_side_free(sides[1][i]);
    }
    if (st == NP_OK)
        st = explain_batches(r, acc, err);
    np_cc_packin_free(&a);
    np_cc_packin_free(&b);
    if (st != NP_OK) {
        np_cc_result_free(r);
        return st;
    }
    *out = r;
    return NP_OK;
}

np_status np_cc_compare(np_cc_result **out, const char *bench_zip, const char *cmp_zip,
                        const np_cc_limits *lim, np_error *err)
{
    item_acc acc[NP_CC_ITEM_COUNT];
    memset(acc, 0, sizeof acc);
    cc_spill sp = {NULL, NULL, 0, NULL}; /* everything in memory */
    long long runs = 0;
    return compare_packs(out, acc, &runs, bench_zip, cmp_zip, lim, &sp, err);
}

np_status np_cc_compare_report(np_cc_result **out, np_cc_counts *counts, const char *bench_zip,
                               const char *cmp_zip, const char *report,
                               const np_cc_limits *lim, const np_cc_report_opts *opts,
                               np_error *err)
{
    *out = NULL;
    const char *slash = strrchr(report, '/');
    char *dir = slash ? strndup(report, slash == report ? 1 : (size_t)(slash - report))
                      : strdup(".");
    if (!dir)
        return np_error_set(err, NP_ERR_NOMEM, report, NULL, "out of memory");
    size_t budget = opts && opts->sort_budget ? opts->sort_budget : NP_CC_DEFAULT_SORT_BUDGET;
    size_t kept = 0;
    cc_spill sp = {dir, report, budget < 4096 ? 4096 : budget, &kept};
    item_acc acc[NP_CC_ITEM_COUNT];
    memset(acc, 0, sizeof acc);
    np_cc_result *r = NULL;
    long long runs = 0;
    np_status st = compare_packs(&r, acc, &runs, bench_zip, cmp_zip, lim, &sp, err);
    if (st == NP_OK) {
        FILE *f[NP_CC_ITEM_COUNT];
        long long n[NP_CC_ITEM_COUNT];
        int demote[NP_CC_ITEM_COUNT];
        for (int i = 0; i < NP_CC_ITEM_COUNT; i++) {
            f[i] = acc[i].rows;
            n[i] = acc[i].n_rows;
            demote[i] = acc[i].demote;
            if (fflush(f[i]) != 0 || ferror(f[i]))
                st = cc_spill_error(&sp, errno ? errno : EIO, err);
        }
        cc_rows src;
        cc_rows_files(&src, f, n, demote);
        if (st == NP_OK)
            st = opts && opts->json ? cc_write_json(&src, r, report, err)
                                    : cc_write_xlsx(&src, r, report,
                                                    opts ? opts->rows_per_sheet : 0, err);
        cc_rows_fini(&src);
    }
    for (int i = 0; i < NP_CC_ITEM_COUNT; i++) {
        if (acc[i].rows)
            fclose(acc[i].rows);
        if (counts) {
            counts->rows[i] = acc[i].n_rows;
            memcpy(counts->level[i], acc[i].n_level, sizeof acc[i].n_level);
        }
    }
    if (counts)
        counts->spill_runs = runs;
    free(dir);
    if (st != NP_OK) {
        np_cc_result_free(r);
        return st;
    }
    *out = r;
    return NP_OK;
}
