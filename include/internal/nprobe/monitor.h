/* nprobe/monitor.h - the monitor: a training-health record that stays on
 * for a long run (docs/MONITOR.md), and the anomaly rules that read it.
 *
 * config.json with "task": "monitor" and a "monitor" section selects it
 * (msprobe's TrainerMon keys where they exist: targets, step_interval,
 * start_step, collect_times, xy_distribution, wg_distribution,
 * mv_distribution, param_distribution, ur_distribution, cc_distribution,
 * alert.rules).
 *
 * Writing: np_monitor_open, then np_monitor_attach on a runtime context
 * (an observer: module activations and activation gradients, the reduced
 * parameter gradients) and its trainer (a watcher: gradients before the
 * data-parallel reduction, weights, Adam's m and v, the update-to-weight
 * ratio, loss, loss scale, global gradient norm). One HDF5 file per rank,
 * {dump_path}/monitor_rank{R}.h5, appended each monitored step and
 * readable while the run goes on and after a kill -9 up to the last
 * finished step (HDF5 SWMR).
 *
 * Reading: np_monitor_analyze reads every rank's file of a folder, applies
 * the rules and orders the anomalies across ranks by step and call order. */
#ifndef NPROBE_MONITOR_H
#define NPROBE_MONITOR_H

#include <stddef.h>
#include <stdint.h>

#include "nprobe/common.h"
#include "nprobe/model.h"
#include "nprobe/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NP_MONITOR_NAME_LEN 192
#define NP_MONITOR_METRIC_LEN 32
#define NP_MONITOR_MAX_TARGETS 64

/* The anomaly rules (defaults by np_monitor_rules_default). */
typedef struct np_monitor_rules {
    int nan;                /* NaN/Inf in any record (default 1) */
    double turbulence;      /* t: an activation or gradient norm above (1 + t) x its
                               running mean (msprobe's AnomalyTurbulence; an exponential
                               mean, 0.9 on the past); <= 0 off (default 49) */
    int turbulence_warmup;  /* records of a key before the rule applies (default 10) */
    double spike_factor;    /* loss or grad_norm above factor x the mean of the last
                               `spike_window` steps; <= 0 off (default 10) */
    int spike_window;       /* default 10 */
    double ratio_min, ratio_max; /* update-to-weight ratio range; max <= 0: off
                                    (default off) */
} np_monitor_rules;

void np_monitor_rules_default(np_monitor_rules *r);

typedef struct np_monitor_config {
    char dump_path[4096];
    int ranks[64];          /* "rank": the ranks that record; n_ranks 0 = all */
    int n_ranks;
    char targets[NP_MONITOR_MAX_TARGETS][NP_MONITOR_NAME_LEN]; /* name patterns (prefix,
                               or fnmatch glob with * ? [); none = every module */
    int n_targets;
    int step_interval;      /* every N-th step (default 1) */
    int64_t start_step;     /* first step recorded (default 0) */
    int64_t collect_times;  /* steps recorded at most; <= 0 unbounded */
    int xy;                 /* activations and activation gradients (default 1) */
    int wg;                 /* parameter gradients, before and after the reduction (1) */
    int mv;                 /* Adam m and v norms (1) */
    int param;              /* weights after the update (1) */
    int ur;                 /* the update-to-weight ratio ("ur_distribution"; default: param) */
    int anomaly_checkpoint; /* on the run's first anomalous step S, write the state S began
                               from as {dump_path}/anomaly_rank{R}.step{S}.h5 (0) */
    int anomaly_ring;       /* copies kept of the last N recorded steps' starting state, for
                               anomalies seen at or after the update (0: none, no cost) */
    int anomaly_calls;      /* copies kept of the step's last K API calls (inputs, outputs),
                               written on the run's first anomaly as a tensor dump of its step
                               under {dump_path}/anomaly_calls (0: none, no cost) */
    int anomaly_calls_after; /* and the next N API calls after it, into the same dump (the
                               next step's file when the step ends first) */
    int cc;                 /* cc_distribution.enable: the collectives' inputs and outputs
                               (comm_in, comm_out; docs/MONITOR.md "Collectives") (0) */
    np_monitor_rules rules;
    int pp_stages, pp_stage; /* not read from the file: the caller's pipeline (pp_stages > 1:
                               written as the file's pp_stages/pp_stage attributes, which order
                               the ranks' anomalies within a step, docs/MONITOR.md) */
} np_monitor_config;

/* 1 if the JSON file at `path` has "task": "monitor", else 0 (also when it
 * cannot be read: the probe's config loader reports that). */
int np_monitor_config_is_monitor(const char *path);
/* 1 if it has a "monitor" object: a dump's config (a dump task) with one
 * attaches the monitor too, from the same file (nprobe train --dump-config). */
int np_monitor_config_has_section(const char *path);
/* Read config.json; errors name the file and key. */
np_status np_monitor_config_load(np_monitor_config *out, const char *path, np_error *err);

typedef struct np_monitor np_monitor;

/* Create {dump_path}/monitor_rank{rank}.h5 (the folder too) unless this
 * rank is not selected (then *out is a monitor that records nothing). */
np_status np_monitor_open(np_monitor **out, const np_monitor_config *cfg, int rank,
                          int world_size, np_error *err);
/* The layout of a parallel run for the dump of the calls kept on anomaly
 * (anomaly_calls): set_mesh gives the dump's probe the run's mesh, place
 * gives the placements of an event's tensors after the probe recorded it
 * (micro: its micro-batch), as the run's own tensor dump does them
 * (cli/probe_attach.c). The struct must outlive the monitor. */
struct np_probe;
struct np_hook_event;
typedef struct np_mon_layout {
    np_status (*set_mesh)(struct np_probe *p, void *user, np_error *err);
    void (*place)(struct np_probe *p, const struct np_hook_event *ev, int micro, void *user);
    void *user;
} np_mon_layout;
void np_monitor_set_layout(np_monitor *m, const np_mon_layout *lay);
/* Observe ctx (an observer of order 10) and watch tr. */
np_status np_monitor_attach(np_monitor *m, np_ctx *ctx, np_trainer *tr, np_error *err);
/* Detach, close the file; the first write error of the run, if any. */
np_status np_monitor_close(np_monitor *m, np_error *err);
void np_monitor_free(np_monitor *m);
/* The checkpoint written on the first anomaly (anomaly_checkpoint), or NULL;
 * *step its step. *missed is set when an anomaly came after the update
 * with no kept state of its step (anomaly_ring 0): nothing was written. */
const char *np_monitor_anomaly_checkpoint(const np_monitor *m, int64_t *step, int *missed);
/* The folder of the tensor dump of the calls kept at the first anomaly
 * (anomaly_calls: {dump_path}/anomaly_calls, the step in *step/rank{R}/
 * dump.h5, *n calls up to it, *after calls after it: anomaly_calls_after,
 * the later ones in step{S+1}/... when the step ended first), or NULL when
 * none was written. */
const char *np_monitor_anomaly_calls(const np_monitor *m, int64_t *step, int *n, int *after);
/* Steps and records written so far. */
int64_t np_monitor_steps(const np_monitor *m);
int64_t np_monitor_records(const np_monitor *m);
/* Thread CPU seconds spent in the monitor (statistics, file), its cost. */
double np_monitor_cpu_seconds(const np_monitor *m);
/* The optimizer update's mean thread CPU seconds on recorded steps
 * (recorded = 1: with the statistics gathered in its loop) or on the others
 * (0; step_interval > 1 gives both in one run); 0 when none. */
double np_monitor_update_seconds(const np_monitor *m, int recorded);

/* ==== reading ============================================================ */

typedef struct np_monitor_anomaly {
    int64_t step;
    int rank;
    int seq;                          /* call order inside the step */
    int stage;                        /* pipeline stage of the rank (-1: no pipeline) */
    char name[NP_MONITOR_NAME_LEN];   /* module or parameter ("h.0.mlp", "loss") */
    char metric[NP_MONITOR_METRIC_LEN]; /* "activation", "grad_pre", ... */
    const char *rule;                 /* "nan", "turbulence", "spike", "update_ratio" */
    const char *stat;                 /* "norm", "nans", "infs", "value" */
    double value;
    double ref;                       /* the history it was held against (NaN: none) */
} np_monitor_anomaly;

typedef struct np_monitor_result {
    int ranks;                        /* files read */
    int64_t steps;                    /* finished steps (the most of any rank) */
    int64_t records;
    np_monitor_anomaly *anomalies;    /* ordered: step, seq, rank (a pipeline: step, forward
                                         by stage, backward by stage from the last, the rest;
                                         then seq, rank) */
    size_t n;
} np_monitor_result;

/* Read DIR/monitor_rank*.h5 (up to each file's last finished step), apply
 * the rules; *out holds the anomalies (free with np_monitor_result_free). */
np_status np_monitor_analyze(np_monitor_result *out, const char *dir,
                             const np_monitor_rules *rules, np_error *err);
void np_monitor_result_free(np_monitor_result *r);
/* TensorBoard event files of DIR's scalar series, OUTDIR/rank{R}/
 * events.out.tfevents.0.nprobe per rank file (`ranks` of them, as
 * np_monitor_analyze counted): per step `{name}/{metric}` = a tensor
 * record's norm or a scalar record's value. */
np_status np_monitor_write_tensorboard(const char *outdir, const char *dir, int ranks,
                                       np_error *err);
/* nprobe triage: the rules over rank `rank`'s records in DIR before `step`
 * followed by those of the rerun's same rank (RERUN_DIR/monitor_rank{rank}.h5)
 * from `step` on, keys matched by name and metric (a rerun of one step is
 * judged against the run's own history); the anomalies from `step` on. */
np_status np_monitor_analyze_rerun(np_monitor_result *out, const char *dir, int rank,
                                   int64_t step, const char *rerun_dir,
                                   const np_monitor_rules *rules, np_error *err);
/* A self-contained HTML page at `path` (through np_out): per rank the loss
 * and grad_norm trends with the anomalous steps marked, and a step x module
 * heat map of the activation norms of the first anomaly's rank (rank 0
 * without one), each cell against its module's median, anomalies outlined. */
np_status np_monitor_write_html(const char *path, const char *dir, const np_monitor_result *res,
                                np_error *err);

#ifdef __cplusplus
}
#endif
#endif
