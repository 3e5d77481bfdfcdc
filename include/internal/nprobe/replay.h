/* nprobe/replay.h - recompute every dumped API call in float64 and measure
 * its isolated error (docs/COMPARE.md, "Replay and isolated error").
 *
 * For each call of a tensor-task dump whose inputs have payloads, the op
 * registry (nprobe/ops.h) recomputes the outputs from the dumped inputs
 * and scalar arguments (forward), or the input gradients from the dumped
 * forward inputs and incoming gradients (backward), in float64. The
 * isolated error of an output is
 *
 *     max_i |dumped_i - exact_i| / (u * mag_i + eta)
 *
 * in units of u, the unit roundoff of the output's dtype (2^-24 float32,
 * 2^-8 bfloat16, 2^-11 float16), where mag_i is the element's magnitude
 * (the sum of the absolute values of the terms that make it) and eta half
 * the dtype's smallest subnormal. A correct op is within a few units; each
 * dtype has a budget (np_replay_budget). Calls the registry cannot
 * recompute are listed with the reason, never guessed. A call of a
 * sharded layout (a leaf of it, or of its forward, split or partial in
 * /placements) is not recomputed: the local op ran on what DTensor or the
 * runtime redistributed it to, not on the dumped shards (a row-parallel
 * linear adds its share of a replicated bias), so a recompute from one
 * rank's pieces would name a correct call.
 *
 *   np_replay_result *r = NULL;
 *   np_replay_file(&r, "dump/step0/rank0/dump.h5", NULL, &err);
 *   for r->calls[i]: status, isolated error, budget ...
 *   np_replay_result_free(r);
 *
 * The library never prints. */
#ifndef NPROBE_REPLAY_H
#define NPROBE_REPLAY_H

#include <stddef.h>
#include <stdint.h>

#include "nprobe/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum np_replay_status {
    NP_REPLAY_PASS = 0,       /* every output within its budget */
    NP_REPLAY_EXCEEDS,        /* an output's isolated error exceeds its budget */
    NP_REPLAY_SKIPPED         /* not recomputable here (reason says why) */
} np_replay_status;
/* "pass", "exceeds", "not recomputable". */
const char *np_replay_status_name(np_replay_status s);

/* One output (forward) or input gradient (backward) compared. */
typedef struct np_replay_leaf {
    char name[256];            /* the dumped leaf */
    char dtype[16];
    double err_units;          /* isolated error in units of u of dtype */
    double budget;             /* in the same units */
    double max_abs;            /* max |dumped - exact| */
    double rel_l2;             /* ||dumped - exact|| / ||exact|| (NaN when the exact norm is 0) */
    int64_t worst;             /* flat index of the worst element, -1 if none */
    double worst_dumped, worst_exact;
    int64_t numel;
} np_replay_leaf;

typedef struct np_replay_call {
    char name[256];            /* "Functional.gelu.0.forward" */
    char api[200];             /* "Functional.gelu" */
    int backward;
    int64_t seq;
    np_replay_status status;
    char reason[512];          /* why skipped / which output exceeded, "" when it passed */
    double err_units;          /* worst over the leaves (NaN when skipped) */
    double ratio;              /* err_units / budget of that leaf (NaN when skipped) */
    int signature;             /* 1: exceeds by a known defect's signature (reason says which),
                                  its isolated error being within the budget */
    int sharded;               /* 1: not recomputable here because its leaves are this rank's
                                  shards of logical tensors (a Shard or Partial(sum) row in
                                  /placements, format version 2) */
    np_replay_leaf *leaves;
    int n_leaves;
} np_replay_call;

typedef struct np_replay_result {
    char path[4096];
    char task[32], device[64], precision[16];
    int64_t step, rank;
    np_replay_call *calls;
    size_t n_calls;
    size_t count[3];           /* by np_replay_status */
    double seconds;            /* wall time of the recomputation */
} np_replay_result;

/* Progress: `done` of `total` calls. */
typedef void (*np_replay_progress_fn)(size_t done, size_t total, void *user);

/* Which calls to recompute: 1 for the call named `call`, 0 to leave it out
 * of the result (compare recomputes only what its verdict needs). */
typedef int (*np_replay_select_fn)(const char *call, void *user);

typedef struct np_replay_options {
    double budget_scale;       /* multiplies every budget (1) */
    np_replay_progress_fn progress;
    void *progress_user;
    np_replay_select_fn select; /* NULL: every API call of the dump */
    void *select_user;
} np_replay_options;

void np_replay_options_init(np_replay_options *o);

/* The budget of an output of logical dtype `dtype` ("float32", ...), in
 * units of its unit roundoff; for shape ops (exact copies) 0.5. */
double np_replay_budget(const char *dtype, int exact_op);
/* The unit roundoff of a logical dtype (2^-24 for float32 and unknown names). */
double np_replay_unit(const char *dtype);

/* Replay one dump file (a step file of a tensor task). Fails only when the
 * file cannot be read (NP_ERR_*, naming it); a dump without payloads gives
 * every call as not recomputable. *out is the caller's. */
np_status np_replay_file(np_replay_result **out, const char *path, const np_replay_options *o,
                         np_error *err);
/* Replay n dump files at once: the selected calls of all of them share
 * one pool of threads (one call per thread at a time), so two sides of a
 * comparison are recomputed side by side. opts[i] may be NULL (defaults),
 * opts itself too. out[i] is the caller's, NULL when file i could not be
 * read (errs[i] says why; errs may be NULL). Returns NP_OK when every file
 * was read, else the first failing file's status. */
np_status np_replay_files(size_t n, const char *const *paths, const np_replay_options *const *opts,
                          np_replay_result **out, np_error *errs);
void np_replay_result_free(np_replay_result *r);

/* Reports (the columns are in docs/COMPARE.md): one row per compared leaf
 * and one per call not recomputed. Written by compare's report writers
 * (np_compare, compare/report_replay.c): a temporary renamed onto `path`
 * when complete (an existing `path` is replaced; reserve names with
 * np_out_reserve). */
np_status np_replay_write_csv(const np_replay_result *r, const char *path, np_error *err);
np_status np_replay_write_json(const np_replay_result *r, const char *path, np_error *err);
np_status np_replay_write_xlsx(const np_replay_result *r, const char *path, np_error *err);

#ifdef __cplusplus
}
#endif
#endif
