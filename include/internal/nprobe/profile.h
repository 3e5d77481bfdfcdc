/* nprobe/profile.h - performance traces (docs/PROFILE.md): reading the
 * Chrome/Perfetto trace-event JSON that torch.profiler writes
 * (export_chrome_trace, tensorboard_trace_handler) as a stream of events,
 * the analysis behind `nprobe profile` (time by category on the timeline,
 * operators by total and mean time, idle bubbles, communication/compute
 * overlap, FLOP/s) and the op-by-op compare of two traces. Part of the
 * np_profile library. Reads in memory independent of the trace's size
 * (the JSON pull reader of np_msprobe over a mapping); never prints. */
#ifndef NPROBE_PROFILE_H
#define NPROBE_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include "nprobe/common.h"
#include "nprobe/hook.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One trace event as read. Strings are decoded, NUL-terminated and valid
 * during the callback only. Absent numbers are NAN (ts, dur, flops) or -1
 * (stream, correlation, pid/tid when not integers: then pid_s/tid_s). */
typedef struct np_prof_event {
    const char *name, *cat;
    char ph;               /* 'X', 'B', 'E', 'i', 'M', ... ('?' when absent) */
    double ts, dur;        /* microseconds */
    long long pid, tid;
    double flops;          /* args.flops */
    long long stream;      /* args.stream (device events) */
    long long correlation; /* args.correlation (launches and kernels) */
    const char *arg_name;  /* args.name (a metadata event's process or thread name), "" */
    const char *task_type; /* args."Task Type" (Ascend's device tasks), "" */
    int self_given;        /* 1: self_us is the file's (Ascend's operator_details.csv has
                            * no start times, only each call's self and total time):
                            * the event is not nested, its self time is self_us and on
                            * the timeline it covers [ts, ts + self_us] */
    double self_us;
} np_prof_event;

/* Non-zero return stops the read: np_prof_read returns NP_ERR_ARG and
 * leaves err to the caller. */
typedef int (*np_prof_event_fn)(const np_prof_event *e, void *user);

/* Root facts of a trace file. */
typedef struct np_prof_trace_info {
    long long rank;   /* distributedInfo.rank, -1 when absent */
    long long events; /* events read */
} np_prof_trace_info;

/* Stream the events of `path`: a {"traceEvents": [...]} object (other
 * root keys skipped) or a bare array of events; a .gz file is inflated in
 * memory first. A .csv file is Ascend's kernel_details.csv (one kernel
 * event per row, a ProfilerStep#N per Step Id) or operator_details.csv
 * (per row, one cpu_op event with its host total and self time, and a
 * kernel event of its device self time when there is one; no start times
 * in that file: each side's calls are laid back to back by self time, in
 * row order). info may be NULL. Errors name the file, line and column. */
np_status np_prof_read(np_prof_trace_info *info, const char *path, np_prof_event_fn fn, void *user,
                       np_error *err);

/* ---- analysis ----------------------------------------------------------- */
/* Timeline categories. On a device timeline (the trace has GPU/NPU
 * kernels, args.stream) the busy time is split compute > communication >
 * memory > other (the first that covers an instant takes it: compute is
 * HTA's compute time, the rest HTA's non-compute time); on a CPU timeline
 * (no device events) optimizer > data loading > communication > compute.
 * Idle is the span not covered by any event. */
typedef enum np_prof_class {
    NP_PROF_COMPUTE = 0,
    NP_PROF_COMM,
    NP_PROF_MEMORY,
    NP_PROF_OPTIMIZER,
    NP_PROF_DATA,
    NP_PROF_OTHER,
    NP_PROF_IDLE,
    NP_PROF_CLASS_COUNT
} np_prof_class;
const char *np_prof_class_name(np_prof_class c);

/* An operator: all complete events ('X') of one category and name. */
typedef struct np_prof_op {
    char *cat, *name;
    long long count;
    double total_us, min_us, max_us;
    double self_us;     /* total less the time of the ops nested in its calls
                         * (cpu_op on one thread; a device event's own); NAN
                         * for other categories or when self_ok is 0 */
    double step_us;     /* the median over the ProfilerStep#s of its time in
                         * each step (its self time, by the start of each
                         * call): one step preempted or stalled does not
                         * move it. NAN when the trace has no steps or the
                         * op no self time */
    double flops;       /* sum of args.flops (0 when none) */
    long long first;    /* order of its first event in the trace */
    double *per_step;   /* its time in each step (internal) */
    long long *step_n;  /* its calls in each step (internal) */
    double at_us;       /* a call row (np_prof_rank.calls): its start from its
                         * step's start in the first step it is in */
    char *within;       /* a call row: the outermost cpu_op holding it (NULL: none) */
} np_prof_op;

typedef struct np_prof_bubble {
    double start_us; /* from the start of the span */
    double dur_us;
} np_prof_bubble;

#define NP_PROF_TOP_BUBBLES 10

/* One trace (one rank). */
typedef struct np_prof_rank {
    char *path;
    long long rank;
    int device;                   /* 1: device timeline, 0: CPU timeline */
    long long events, steps;      /* events read, ProfilerStep# annotations */
    double step_med_us;           /* median ProfilerStep# duration (NAN: none) */
    int last_step_dropped;        /* device kernels launched in the last step left out (as HTA) */
    double span_us;               /* first busy start to last busy end */
    double busy_us;               /* union of the timeline's events */
    double class_us[NP_PROF_CLASS_COUNT];
    double comm_us, compute_us;   /* unions of each (not exclusive) */
    double overlap_us;            /* communication and compute at once */
    long long n_bubbles;          /* gaps on the timeline */
    double bubble_us;             /* their sum (= idle) */
    np_prof_bubble top[NP_PROF_TOP_BUBBLES]; /* the longest, longest first */
    int n_top;
    double flops;                 /* all args.flops */
    int self_ok;                  /* 1: each thread's cpu_op events came in start order */
    int streamed;                 /* 1: the timeline's past was finalized while reading
                                   * (its events came in start order): memory bounded;
                                   * 0: all its busy runs were kept to the end */
    np_prof_op *ops;              /* sorted by total time, longest first */
    size_t n_ops;
    /* The calls in call order. Each step's calls (cpu_op and device
     * events, in file order) are aligned to a reference step's - the
     * sequence of ops most steps share, ties the earliest - as
     * np_prof_compare.calls aligns two runs; the reference's k-th call of
     * an op is the row "NAME #k", and a call the reference lacks (an extra
     * call in some steps) a row of its own numbered after the reference's
     * calls of its op, ordered after the reference row before it. So an
     * extra call in one step leaves every other row as it is. A row's
     * count is the steps it was called in, self_us and total_us its self
     * time summed over them, step_us the median over those steps only (an
     * absent step is not a zero), at_us and within from the first step it
     * is in. calls_ok 0: none (no op called twice in a step, a thread out
     * of order, or more than NP_PROF_MAX_CALLS calls in all: 24 bytes
     * each are kept to the end of the read). */
    np_prof_op *calls;
    size_t n_calls;
    int calls_ok;
} np_prof_rank;

#define NP_PROF_MAX_CALLS (1 << 20)

/* Read and analyse one trace. *out is filled (np_prof_rank_free). */
np_status np_prof_analyze(np_prof_rank *out, const char *path, np_error *err);
/* The same without the call rows (calls_ok 0): what `nprobe profile`
 * reports of one trace. Its memory does not grow with the trace's size:
 * a window of the mapped file, one entry per distinct (category, name) with
 * its time per ProfilerStep, each thread's open calls, the timeline's
 * unfinalized part (events in start order per thread and stream, as torch
 * writes them) and the last step's launches as runs of correlation ids. */
np_status np_prof_analyze_ops(np_prof_rank *out, const char *path, np_error *err);
void np_prof_rank_free(np_prof_rank *r);

/* ---- compare -------------------------------------------------------------- */
/* One operator of A and B paired by category and name (calls paired in
 * their order: the counts say how many of each side). Only operators with
 * a self time take part (cpu_op and device events): their self times add
 * up to the busy time, so the pairs' deltas explain the step-time gap;
 * an unordered trace (self_ok 0) falls back to total times. */
typedef struct np_prof_pair {
    const np_prof_op *a, *b;  /* NULL: on one side only */
    double a_step_us, b_step_us; /* time per step: the op's step_us when
                                  * both traces have steps, else its time
                                  * over the trace / steps */
    double delta_us;          /* b_step - a_step */
    double ratio;             /* b_step / a_step (NAN when one-sided or a is 0) */
    double share_a, share_b;  /* of the side's step time */
} np_prof_pair;

typedef struct np_prof_compare {
    double a_step_us, b_step_us; /* median step duration, else span / steps */
    int robust;                   /* 1: per-op medians over steps */
    double a_steps, b_steps;
    np_prof_pair *pairs;          /* most regressed first (delta_us descending) */
    size_t n_pairs;
    np_prof_pair *calls;          /* the ranks' calls (both calls_ok) paired in
                                   * call order: the two sequences of call rows
                                   * aligned on their op (category, NAME without
                                   * " #k") as diff aligns lines, so an op called
                                   * once more in one run leaves one row one-sided
                                   * instead of shifting every later k; rows
                                   * left one-sided pair by full name. Most
                                   * regressed first; a->name and b->name may
                                   * differ in k */
    size_t n_calls;
} np_prof_compare;

/* Pair two analysed traces. The pairs borrow a's and b's ops. */
np_status np_prof_compare_ranks(np_prof_compare *out, const np_prof_rank *a, const np_prof_rank *b,
                                np_error *err);
void np_prof_compare_free(np_prof_compare *c);

/* The xlsx report at `path`: sheets "ranks" and "ops" of the analysed
 * traces (ranks NULL: none), "compare" of a compare (cmp NULL: none); the
 * columns of the csv reports, an absent number an empty cell. */
np_status np_prof_write_xlsx(const char *path, const np_prof_rank *ranks, size_t n,
                             const np_prof_compare *cmp, np_error *err);

/* ---- the profile task (profile/record.c) ------------------------------------ */
/* torch.profiler's schedule: skip_first steps, then cycles of `wait` steps
 * not recorded, `warmup` steps not recorded, `active` steps recorded,
 * `repeat` cycles (0: cycles until the run ends). active 0: every step
 * after skip_first is recorded. */
typedef struct np_prof_schedule {
    int skip_first, wait, warmup, active, repeat;
} np_prof_schedule;

/* 1 when `step` (from 0) is recorded under schedule s (NULL: every step). */
int np_prof_schedule_active(const np_prof_schedule *s, long long step);

typedef struct np_prof_rec_opts {
    const char *dir;            /* the trace goes to {dir}/rank{rank}.trace.json */
    int rank, world;
    np_prof_schedule schedule;
    size_t (*mem)(void *user);  /* bytes in use (a "Memory" counter after each
                                 * module call and step), NULL: none */
    void *mem_user;
} np_prof_rec_opts;

typedef struct np_prof_rec np_prof_rec;

typedef struct np_prof_rec_summary {
    long long steps, events; /* steps recorded, call events written */
    double flops;            /* their FLOPs estimated from shapes */
} np_prof_rec_summary;

/* Open the trace (the folder is made; the file is written under a
 * temporary name and appears complete at close). */
np_status np_prof_rec_open(np_prof_rec **out, const np_prof_rec_opts *o, np_error *err);
/* The observer's callbacks (include/nprobe/hook.h), `user` the recorder:
 * register {order, np_prof_rec_before, np_prof_rec_after, rec}. A step not
 * in the schedule declines every call (no after events, no clock read). */
int np_prof_rec_before(const np_hook_event *ev, void *rec);
int np_prof_rec_after(const np_hook_event *ev, void *rec);
/* The trace's final path. */
const char *np_prof_rec_path(const np_prof_rec *r);
/* Finish the file, free r (NULL ok); sum (may be NULL) says what was written. */
np_status np_prof_rec_close(np_prof_rec *r, np_prof_rec_summary *sum, np_error *err);

/* FLOPs of an API call's after event from its tensors' shapes (0 for other
 * ops): linear and matmul 2 x out x K per GEMM (backward: one GEMM per
 * gradient produced), conv2d 2 x out x (Cin/groups x kh x kw) per GEMM,
 * scaled_dot_product_attention 4 x batch x L x S x E forward (E = Ev),
 * twice that backward, the causal mask not subtracted (torch's
 * flop_counter counts the same). */
double np_prof_event_flops(const np_hook_event *ev);

/* A config.json with "task": "profile" (1), anything else (0). */
int np_prof_config_is_profile(const char *path);
/* Read a profile config: {"task": "profile", "dump_path": DIR, "profile":
 * {"skip_first", "wait", "warmup", "active", "repeat"}} (all optional but
 * dump_path); dir receives dump_path. Errors name the file and key. */
np_status np_prof_config_load(np_prof_schedule *s, char *dir, size_t dir_cap, const char *path,
                              np_error *err);

#ifdef __cplusplus
}
#endif
#endif
