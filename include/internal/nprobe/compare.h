/* nprobe/compare.h - pair two dumps tensor by tensor, compute msprobe's
 * accuracy metrics, give every row a verdict, name the call where the
 * departure starts, and write xlsx / csv / json reports (docs/COMPARE.md).
 *
 * Vocabulary: bench = the reference run (-b), cmp = the run under test (-c,
 * msprobe's "NPU" columns).
 *
 *   np_cmp_options o; np_cmp_options_init(&o);
 *   np_cmp_result *r = NULL;
 *   np_cmp_run(&r, "bench_dump", "cmp_dump", &o, &err);   pairs steps/ranks
 *   for each r->pairs[i]: np_cmp_write_xlsx(r, &r->pairs[i], path, &err) ...
 *   np_cmp_result_free(r);
 *
 * The library never prints: problems with one side of one step/rank (a step
 * missing on a side, a file that is not a dump, an incomplete or corrupt file)
 * are kept as np_cmp_issue records; the rest is still compared. */
#ifndef NPROBE_COMPARE_H
#define NPROBE_COMPARE_H

#include <stddef.h>
#include <stdint.h>

#include "nprobe/common.h"
#include "nprobe/format.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==== enums ============================================================== */

typedef enum np_cmp_verdict { NP_VERDICT_PASS = 0, NP_VERDICT_WARNING, NP_VERDICT_ERROR } np_cmp_verdict;
/* "pass", "warning", "error". */
const char *np_cmp_verdict_name(np_cmp_verdict v);

typedef enum np_cmp_match {
    NP_MATCH_EXACT = 0, /* same leaf name, same shape */
    NP_MATCH_FUZZY,     /* same name with the call counters dropped, in order, same shape */
    NP_MATCH_MAPPING,   /* matched after renaming through --mapping */
    NP_MATCH_CMP_ONLY,  /* no bench row for this cmp row */
    NP_MATCH_BENCH_ONLY /* no cmp row for this bench row */
} np_cmp_match;
/* "exact", "fuzzy", "mapping", "cmp-only", "bench-only". */
const char *np_cmp_match_name(np_cmp_match m);

typedef enum np_cmp_mode {
    NP_CMP_MODE_TENSOR = 0, /* payloads on both sides: msprobe's "all" columns */
    NP_CMP_MODE_STATISTICS, /* statistics only: msprobe's "summary" columns */
    NP_CMP_MODE_MD5         /* crc32 equality: msprobe's "md5" columns */
} np_cmp_mode;
/* "tensor", "statistics", "md5". */
const char *np_cmp_mode_name(np_cmp_mode m);

typedef enum np_cmp_call_status {
    NP_CALL_PASS = 0,      /* no output of the call is an error */
    NP_CALL_CULPRIT,       /* inputs pass, outputs fail: the departure starts here */
    NP_CALL_PROPAGATED,    /* outputs fail, but its inputs already failed (or only noise grew) */
    NP_CALL_CONTAINS       /* a module whose failing outputs come from a culprit inside it */
} np_cmp_call_status;
/* "pass", "culprit", "propagated", "contains-culprit". */
const char *np_cmp_call_status_name(np_cmp_call_status s);

/* ==== options ============================================================ */

/* Progress: `done` of `total` units (payload bytes in tensor mode, rows
 * otherwise) of the pair `pair_index` of `n_pairs`. */
typedef void (*np_cmp_progress_fn)(int pair_index, int n_pairs, uint64_t done,
                                   uint64_t total, void *user);

typedef struct np_cmp_result np_cmp_result;
/* Called by np_cmp_run after each pair is compared (r->pairs[pair], pairs
 * in step, rank order), before the next one: the caller may write that
 * pair's reports and shrink pairs it no longer needs in full
 * (np_cmp_pair_shrink), so memory stays bounded over many pairs. Non-zero
 * stops the run: the pairs compared so far are returned. */
typedef int (*np_cmp_pair_fn)(np_cmp_result *r, size_t pair, void *user);

/* The cmp side's replica check (docs/COMPARE.md, "Distributed") kept over
 * several np_cmp_run calls on the same cmp input: the first run does it,
 * the others reuse it. Compare over MPI runs once a pair, and the check
 * opens every rank's file of the cmp side. */
typedef struct np_cmp_replicas np_cmp_replicas;
/* NULL: out of memory. *out is the caller's: np_cmp_replicas_free (NULL: no-op). */
np_cmp_replicas *np_cmp_replicas_new(void);
void np_cmp_replicas_free(np_cmp_replicas *c);

typedef struct np_cmp_options {
    int step;                 /* only this step, -1 = all */
    int rank;                 /* only this rank, -1 = all */
    int fuzzy;                /* 1: match with call counters dropped, in order */
    const char *mapping_path; /* JSON renames (docs/COMPARE.md), NULL = none; borrowed */
    double atol, rtol, cos;   /* NaN = derived from the cmp dtype (np_cmp_tolerance) */
    long rows_per_sheet;      /* xlsx rows per sheet before a split (default 1000000) */
    np_cmp_progress_fn progress;
    void *progress_user;
    int no_replay;            /* 1: no float64 recompute of the cmp side's calls (the
                               * isolated error; also NPROBE_NO_REPLAY=1 in the environment) */
    int replay_all;           /* 1: recompute also the calls after the first culprit whose
                               * inputs already fail (by default left out: docs/COMPARE.md,
                               * "What the replay recomputes") */
    np_cmp_pair_fn on_pair;   /* NULL: none */
    void *on_pair_user;
    int single_ref;           /* 1: the bench is a single-process run (one rank per step)
                               * and the cmp a data-parallel run: every cmp rank is paired
                               * with the bench's rank of its step, and only the leaves a
                               * data-parallel rank shares with the single run on the same
                               * global batch are compared (roles parameters and
                               * parameters_grad); docs/COMPARE.md "Distributed" */
    np_cmp_replicas *replicas; /* NULL: each run checks the replicas itself; borrowed */
} np_cmp_options;

/* Defaults: all steps and ranks, exact matching, per-dtype tolerances. */
void np_cmp_options_init(np_cmp_options *o);

/* ==== tolerances ========================================================= */

typedef struct np_cmp_tolerance {
    double atol;     /* RMS floor: errors are relative to max(||bench||, atol*sqrt(n)) */
    double rtol;     /* error when the relative L2 error exceeds it */
    double rtol_warn;/* warning above this */
    double cos;      /* error when cosine < cos (and the bench is above the floor) */
    double cos_warn; /* warning when cosine < cos_warn */
} np_cmp_tolerance;

/* Default tolerance for a cmp logical dtype name ("float32", "bfloat16",
 * "float16", "float64", ints/bool: exact). Unknown names get float32's. */
np_cmp_tolerance np_cmp_tolerance_for(const char *dtype);
/* `t` loosened to the level of a gradient behind a non-smooth op in a run of
 * unit roundoff u (bf16 2^-8, fp16 2^-11): rtol 8 sqrt(u), warning at a
 * third of it, cosine levels 1 - rtol^2/2 (docs/COMPARE.md). u <= 0: t. */
np_cmp_tolerance np_cmp_tolerance_routed(np_cmp_tolerance t, double u);

/* ==== metrics ============================================================ */

/* msprobe's tensor-mode metrics in float64 (docs/COMPARE.md). A metric that
 * does not apply is NaN and `note` says why ("unsupported" in msprobe). */
typedef struct np_cmp_metrics {
    double cosine, euc_dist, max_abs_err, max_rel_err;
    double one_thousandth, five_thousandths; /* fraction of elements with rel err < 0.001 / 0.005 */
    double bench_norm, cmp_norm;             /* L2 norms over the compared elements */
    double rel_l2;                           /* nprobe: ||cmp-bench|| / max(||bench||, atol*sqrt(n)) */
    int64_t n;                               /* elements compared */
    int64_t n_masked;                        /* NaN/Inf positions equal on both sides (excluded) */
    int64_t n_mask_mismatch;                 /* positions where NaN/Inf differ: an error */
    const char *note;                        /* msprobe-style message (static), "" if none */
} np_cmp_metrics;

/* Metrics of two float32 arrays of `n` elements (`ndim` is the logical rank:
 * 0 for a 0-d tensor). bench (n), cmp (n). `atol` is the RMS floor for
 * rel_l2. OpenMP over fixed element blocks, partials combined in block order:
 * the result does not depend on the thread count. */
void np_cmp_metrics_f32(np_cmp_metrics *out, const float *bench, const float *cmp,
                        int64_t n, int ndim, double atol);
/* Same for float64 arrays. */
void np_cmp_metrics_f64(np_cmp_metrics *out, const double *bench, const double *cmp,
                        int64_t n, int ndim, double atol);

/* ==== results ============================================================ */

/* One side of a row: one row of that side's /entries. */
typedef struct np_cmp_side {
    const char *name;             /* leaf name */
    const char *call;             /* the call it belongs to */
    const char *role;             /* input|output|parameters|kwargs|parameters_grad */
    const char *dtype;            /* logical dtype */
    const int64_t *shape;         /* ndim dims */
    int64_t seq, numel;
    np_stats stats;               /* the row's statistics block (np_fmt_entry_stats) */
    uint32_t crc32;
    int8_t ndim, requires_grad, has_data;
    const char *defect;           /* NULL, or why the /entries row contradicts itself
                                   * ("numel -1 disagrees with shape (4, 8) = 32"):
                                   * the row is an error, left out of the root cause */
} np_cmp_side;

/* A side's +Inf and -Inf elements together. */
static inline int64_t np_cmp_side_infs(const np_cmp_side *s)
{
    return s->stats.posinf_count + s->stats.neginf_count;
}

/* Statistics-mode numbers of a row (np_cmp_row_stats). */
typedef struct np_cmp_stats {
    double diff[4];               /* cmp - bench of max, min, mean, norm */
    double rel[4];                /* |diff / bench|: 0 when equal, inf when only the bench
                                   * is 0 (as msprobe), NaN ("N/A") when a side is absent */
} np_cmp_stats;

/* One row of the report: a matched pair, or one side alone. All pointers
 * are borrowed from the pair that holds the row. Kept small (a statistics
 * comparison holds one per leaf): the statistics are derived from the two
 * sides when asked for, the reason text is formatted when asked for. */
typedef struct np_cmp_row {
    const np_cmp_side *bench;     /* NULL for cmp-only rows */
    const np_cmp_side *cmp;       /* NULL for bench-only rows */
    np_cmp_metrics *m;            /* tensor mode: the row's metrics (NaN where not
                                   * computed); NULL in statistics and md5 mode */
    const char *reason;           /* why (error/warning) or a note, "" if none: the text,
                                   * or when n_reason_args > 0 its format (read it with
                                   * np_cmp_row_reason) */
    double reason_args[2];        /* the numbers of a formatted reason */
    double severity;              /* >= 1: error; 0 for exact agreement */
    int call_index;               /* into pair->calls, -1 if the call is unknown */
    int8_t match;                 /* np_cmp_match */
    int8_t verdict;               /* np_cmp_verdict */
    int8_t has_stats;             /* 1: statistics compared (np_cmp_row_stats gives numbers) */
    int8_t n_reason_args;         /* 0..2 */
} np_cmp_row;

/* The reason of a row as text: `reason` itself, or formatted into buf
 * (cap bytes; 256 are always enough for a formatted reason). Returns the
 * text (borrowed from the row or buf). */
const char *np_cmp_row_reason(char *buf, size_t cap, const np_cmp_row *r);
/* The same, never empty: a row without a reason (one that passes) is said
 * with its severity ("passes: relative L2 error 0.00123, severity 0.0123
 * (1 = the error level)"), as a culprit's worst output is shown. */
const char *np_cmp_row_verdict_text(char *buf, size_t cap, const np_cmp_row *r);

/* Statistics-mode numbers of a matched row: cmp - bench of max, min, mean
 * and norm (0 between equal infinities, as msprobe) and |diff / bench|;
 * all NaN when the statistics were not compared (unmatched, shape or dtype
 * mismatch, md5 rows, tensor rows with payloads). */
void np_cmp_row_stats(np_cmp_stats *out, const np_cmp_row *r);

typedef struct np_cmp_call {
    const char *name;             /* "Functional.linear.3.forward" */
    const char *kind;             /* "api" | "module" */
    const char *parent;           /* enclosing module call, "" at the top */
    const char *callsite;
    int64_t seq;
    int backward;                 /* 1 for backward calls and parameter gradients */
    double sev_in, sev_out;       /* worst severity of inputs(+params) and of outputs */
    int n_rows, n_error_out;
    np_cmp_call_status status;
    const char *reason;           /* why culprit/propagated; borrowed */
    int worst_row;                /* row index of the worst output, -1 if none */
    double iso_err, iso_ratio;    /* tensor mode: the cmp side's isolated error (nprobe replay)
                                   * in units of u and as a multiple of its budget; NaN when
                                   * not recomputed */
    double ref_iso_err, ref_iso_ratio; /* the same of the bench side's call (recomputed from
                                        * the bench's own dumped inputs); NaN when not */
} np_cmp_call;

typedef struct np_cmp_issue {
    np_status status;             /* what kind of problem */
    int step, rank;               /* -1 if not known */
    char text[NP_ERROR_TEXT_MAX]; /* names the file or directory and what was expected */
} np_cmp_issue;

typedef struct np_cmp_pair {
    int step, rank;
    char bench_path[1024], cmp_path[1024];
    np_cmp_mode mode;
    char bench_task[32], cmp_task[32], bench_precision[16], cmp_precision[16];
    char bench_device[32], cmp_device[32];
    int bench_incomplete, cmp_incomplete;  /* complete = 0 in that side's file: compared, but it
                                            * counts as a difference (np_cmp_has_differences) */
    int dump_defects;                      /* root attributes, /calls rows or a step/rank
                                            * attribute against its folder that contradict the
                                            * format in either file (each noted, naming the
                                            * file): counts as a difference */
    double bench_loss_scale, cmp_loss_scale; /* root attribute loss_scale of each side (1 when
                                              * absent): gradient rows are compared divided
                                              * by it */
    double bench_dp_grad_scale, cmp_dp_grad_scale; /* root attribute dp_grad_scale (1 when
                                              * absent): divided by too; unlike loss_scale, it
                                              * never makes a non-finite gradient a skipped
                                              * step */
    np_cmp_row *rows; size_t n_rows;
    np_cmp_call *calls; size_t n_calls;   /* in execution order (seq) */
    int *culprits; size_t n_culprits;     /* indices into calls, first = the first culprit */
    size_t count_verdict[3];              /* by np_cmp_verdict */
    size_t count_match[5];                /* by np_cmp_match */
    uint64_t bytes_read;                  /* payload bytes over both sides */
    char notes[1024];                     /* task mismatch, incomplete step, ... */
    double worst_severity;                /* the highest row severity, NaN when no row has one */
    int has_loss;                         /* 1: a loss call's one-element forward output was */
    double loss_bench, loss_cmp;          /* dumped, with these values (the mean) */
    int shrunk;                           /* 1 after np_cmp_pair_shrink: see there */
    int replica_diffs;                    /* a sharded side (format version 2): leaves whose
                                           * replicas (Replicate() or unplaced copies on
                                           * several ranks) differ; named in the notes */
    int stage;                            /* the pipeline stage the cmp file holds (its
                                           * placement rows), -1 none */
    void *priv;                           /* string storage; library-private */
} np_cmp_pair;

struct np_cmp_result {
    char bench_input[1024], cmp_input[1024];
    np_cmp_pair *pairs; size_t n_pairs;
    np_cmp_issue *issues; size_t n_issues;
    np_cmp_options opts;                  /* as used (mapping_path borrowed) */
};

/* Compare `bench` with `cmp` (each a dump root, a step directory, a rank
 * directory or one dump.h5). On success *out (the caller's, free with
 * np_cmp_result_free) holds every comparable pair and every issue. Fails
 * (NP_ERR_NOTFOUND/NP_ERR_ARG/NP_ERR_JSON/...) only when nothing can be
 * compared at all: a path that does not exist, a bad mapping file, no step
 * or rank in common (the issues are then in err's text). */
np_status np_cmp_run(np_cmp_result **out, const char *bench, const char *cmp,
                     const np_cmp_options *opts, np_error *err);
void np_cmp_result_free(np_cmp_result *r);

/* Compare exactly two dump files (no directory walk); *out is the caller's
 * (np_cmp_pair_free). Used by np_cmp_run and by tests. */
np_status np_cmp_compare_files(np_cmp_pair *out, const char *bench_h5, const char *cmp_h5,
                               const np_cmp_options *opts, np_error *err);
void np_cmp_pair_free(np_cmp_pair *p);
/* Free a pair's rows, calls and sides, keeping what a summary over many
 * pairs needs: step, rank, paths, tasks, mode, notes, the counts, n_rows
 * (rows is NULL), worst_severity, the loss, and the first culprit as
 * calls[0] (n_calls and n_culprits are 1 then, culprits[0] = 0; 0 without
 * a culprit; its worst_row is -1). Reports of a shrunk pair cannot be
 * written any more (NP_ERR_ARG). Idempotent. */
void np_cmp_pair_shrink(np_cmp_pair *p);
/* The pair a report over all pairs details (the HTML page, the summary's
 * first culprit): the first with a culprit (among a pipeline's stages of
 * that step, the culprit first in one process's order: a forward call's on
 * the lowest stage, else a backward call's on the highest), else the first
 * with an error row, else 0. */
size_t np_cmp_focus_pair(const np_cmp_result *r);

/* 1 when some row of some pair is an error, some issue was recorded, a side
 * is incomplete, or a pair paired nothing. */
int np_cmp_has_differences(const np_cmp_result *r);
/* 1 when no leaf of the pair was matched (exact, fuzzy or mapping): a
 * comparison of nothing, never a pass. */
int np_cmp_pair_paired_nothing(const np_cmp_pair *p);

/* ==== reports ============================================================ */

/* "compare_result_rank{R}_step{S}_{YYYYmmddHHMMSS}" (no extension) into buf. */
void np_cmp_report_basename(char *buf, size_t cap, const np_cmp_pair *p, long long unix_time);

/* msprobe's column headers for a mode, then nprobe's (Match, Verdict,
 * Culprit, Module). Static strings; *n receives the count. */
const char *const *np_cmp_headers(np_cmp_mode mode, int *n);

/* xlsx: a "summary" sheet, the rows sheet(s) ("rows", "rows_2", ...), a
 * "calls" sheet with the chart of the per-call error along execution order. */
np_status np_cmp_write_xlsx(const np_cmp_result *r, const np_cmp_pair *p,
                            const char *path, np_error *err);
/* csv: the rows with the same headers, numbers as %.17g, "N/A" for NaN. */
np_status np_cmp_write_csv(const np_cmp_pair *p, const char *path, np_error *err);
/* json: {"inputs", "summary", "culprits", "headers", "rows": [[...], ...]},
 * NaN as null. */
np_status np_cmp_write_json(const np_cmp_result *r, const np_cmp_pair *p,
                            const char *path, np_error *err);

/* html: one self-contained page for the whole comparison (all pairs): the
 * first culprit over all steps and ranks, counts, both runs, tolerances,
 * the per-step chart, the module tree, the per-call severity along
 * execution order and the failing step's rows (capped). pair_reports (may
 * be NULL; else r->n_pairs entries, each may be NULL) says where each
 * pair's full rows are (e.g. its xlsx file name). docs/COMPARE.md. */
np_status np_cmp_write_html(const np_cmp_result *r, const char *const *pair_reports,
                            const char *path, np_error *err);

/* What the HTML page needs of a pair it does not show in full (what a
 * shrunk pair keeps, np_cmp_pair_shrink), fixed size and without pointers:
 * processes that compared different pairs under mpirun exchange them as
 * bytes. */
typedef struct np_cmp_pair_digest {
    int step, rank;
    int has_loss;                 /* 1: a loss output was dumped (loss_bench, loss_cmp) */
    double worst;                 /* worst row severity, NaN when no row has one */
    double loss_bench, loss_cmp;
    uint64_t n_rows, count_verdict[3], count_match[5], n_culprits;
    char first_culprit[256];      /* the first culprit's call name, "" without one */
} np_cmp_pair_digest;
void np_cmp_pair_digest_of(np_cmp_pair_digest *out, const np_cmp_pair *p);
/* Which of n digests (in step, rank order) the page shows in full, as
 * np_cmp_focus_pair: the first pair with a culprit, else the first with an
 * error row, else 0. */
size_t np_cmp_html_focus(const np_cmp_pair_digest *d, size_t n);
/* The same page as np_cmp_write_html from the digests of every pair (in
 * step, rank order) and the focus pair in full (d[np_cmp_html_focus(d, n)]'s
 * pair); r gives the inputs and the issues only (its pairs are not read).
 * focus_report (may be NULL): where the focus pair's full rows are. */
np_status np_cmp_write_html_digests(const np_cmp_result *r, const np_cmp_pair_digest *d,
                                    size_t n, const np_cmp_pair *focus, const char *focus_report,
                                    const char *path, np_error *err);

/* A short advice text for the summary (borrowed, static). */
const char *np_cmp_advice(const np_cmp_pair *p);

#ifdef __cplusplus
}
#endif
#endif
