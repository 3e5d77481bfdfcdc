/* nprobe/replicas.h - one data-parallel dump checked against itself
 * (`nprobe compare --replicas DUMP`, docs/COMPARE.md "Distributed").
 *
 * In a data-parallel run every rank holds a replica of the model: the
 * parameters (role parameters), the gradients after the all-reduce (role
 * parameters_grad) and what every collective delivers (the output of the
 * Distributed.* calls) must be bit-identical on all ranks of a step. And an
 * all-reduce must deliver the reduction of what the ranks sent: the mean
 * (or the max) of the ranks' inputs, recomputed here in float64 in rank
 * order. The check walks each step's calls in execution order (seq) and
 * names the first call where the replicas part, or where a collective's
 * output is not the reduction of its inputs, and the rank(s) at fault.
 *
 * Identity is judged from what the dump holds: crc32 of the payload
 * (tensor and md5 tasks) and the statistics (max, min, mean, norm, NaN/Inf
 * counts). The collective arithmetic needs payloads (task tensor). */
#ifndef NPROBE_REPLICAS_H
#define NPROBE_REPLICAS_H

#include <stdint.h>

#include "nprobe/common.h"
#include "nprobe/format.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum np_rep_kind {
    NP_REP_NONE = 0,
    NP_REP_PART,      /* a replica tensor differs between ranks */
    NP_REP_REDUCE,    /* a collective's output is not the reduction of the ranks' inputs */
    NP_REP_MISSING    /* a replica tensor present on rank 0 is missing on another rank */
} np_rep_kind;

typedef struct np_rep_finding {
    np_rep_kind kind;
    int step;
    int64_t seq;                  /* the call's order in the step (rank 0's) */
    char call[NP_FMT_NAME_LEN];   /* "Distributed.all_reduce.3.forward" */
    char leaf[NP_FMT_NAME_LEN];   /* "...output.0", "Module.fc1.Linear.parameters_grad.weight" */
    char ranks[128];              /* the ranks at fault: "1", "1, 2, 3", "every rank" */
    char text[512];               /* one sentence: what differs and by how much */
} np_rep_finding;

/* A step, or ranks of a step, that could not be checked: fewer than two
 * complete rank files (a killed rank leaves dump.h5.partial or nothing),
 * or ranks left out of a checked step for the same reason. */
typedef struct np_rep_gap {
    int step;
    int checked;                  /* 1: the step was checked without the ranks named */
    char text[512];               /* which ranks, which files, why */
} np_rep_gap;

typedef struct np_rep_result {
    int world_size;               /* ranks found (the largest over the steps) */
    int n_steps;                  /* steps checked */
    int64_t n_replica_leaves;     /* replica tensors compared across ranks (per rank pair) */
    int64_t n_collectives;        /* all-reduce calls whose arithmetic was checked */
    int64_t n_collectives_no_data;/* all-reduce calls without payloads (not checked) */
    np_rep_finding first;         /* the first finding over all steps (kind NONE: none) */
    np_rep_finding *per_step;     /* n_steps entries: each step's first finding */
    int *steps;                   /* n_steps step numbers */
    np_rep_gap *gaps;             /* n_gaps: what could not be checked, in step order */
    int n_gaps;
    int n_steps_unchecked;        /* steps with fewer than two complete ranks: not checked */
} np_rep_result;

/* Check the dump under `path` (a dump root or a step directory holding
 * rank{R}/ directories). A step is checked across its complete rank files
 * (two or more); a step with fewer, and the ranks of a step whose file is
 * incomplete or missing, are listed in gaps, not checked (a killed rank).
 * NP_ERR_ARG naming the step when no step at all can be checked. *out is
 * filled; free with np_rep_result_free. */
np_status np_rep_check(np_rep_result *out, const char *path, np_error *err);
void np_rep_result_free(np_rep_result *r);

#ifdef __cplusplus
}
#endif
#endif
