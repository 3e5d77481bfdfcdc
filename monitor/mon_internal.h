/* monitor/mon_internal.h - the monitor's reader and rules, shared by the
 * writer (monitor.c) and the reader (monitor_read.c); the file's rows and
 * HDF5 types are nprobe/monfile.h's (docs/MONITOR.md "File format").
 * Private to monitor/. */
#ifndef NPROBE_MONITOR_MON_INTERNAL_H
#define NPROBE_MONITOR_MON_INTERNAL_H

#include <hdf5.h>
#include <stdint.h>

#include "nprobe/hook.h"
#include "nprobe/monfile.h"
#include "nprobe/monitor.h"

/* the rows (nprobe/probe.h, nprobe/monfile.h: one writer of the format,
 * probe/monfile.c, for the runtime and the package) */
typedef np_monitor_record np_mon_record;
typedef np_monitor_key np_mon_key;
typedef np_monitor_step np_mon_step;
_Static_assert(NP_MONITOR_NAME_LEN == NP_MONITOR_FILE_NAME_LEN &&
               NP_MONITOR_METRIC_LEN == NP_MONITOR_FILE_METRIC_LEN, "the key row's lengths");

/* One rank's file, read up to its last finished step. */
typedef struct rank_data {
    int rank;
    int stage;          /* pipeline stage (the file's pp_stage), -1: none */
    np_mon_key *keys;
    int64_t n_keys;
    np_mon_record *rec;
    int64_t n_rec;
    int64_t steps;
} rank_data;
np_status np_mon_read_rank(rank_data *rd, const char *path, np_error *err);

/* The rules record by record (nprobe monitor's reading and the writer's
 * online check for the checkpoint on anomaly): feed the records in the
 * file's order; hit->rule is the rule that fired on r, or NULL. -1 on a
 * bad key or out of memory. */
typedef struct np_mon_rules_state np_mon_rules_state;
typedef struct np_mon_hit {
    const char *rule, *stat;
    double value, ref;
} np_mon_hit;
np_mon_rules_state *np_mon_rules_state_new(void);
void np_mon_rules_state_free(np_mon_rules_state *s);
int np_mon_rules_feed(np_mon_rules_state *s, const np_monitor_rules *ru, const np_mon_record *r,
                      const char *metric, np_mon_hit *hit);
/* norm/min/max/mean/zeros/nans/infs of n floats (np_optim_tstats_add). */
void np_mon_stats(np_mon_record *r, const float *x, int64_t n);

/* The ring of call inputs inside a step (monitor.anomaly_calls,
 * monitor_calls.c): copies of the step's last `cap` API calls (0: none),
 * written on the anomaly as a tensor dump of step S under dir
 * (dir/step{S}/rank{R}/dump.h5, the probe's layout), with the mesh and
 * placements of `lay` when given. take: -1 out of memory (the call is not
 * kept). fire: writes the kept calls and keeps the dump open for the next
 * `after` API calls, which follow() writes as the events come (the step's
 * end and the next step's start too: step S+1's file); open: 1 while the
 * dump is open. finish: completes the dump (at the last call or the run's
 * end). */
typedef struct np_mon_calls np_mon_calls;
np_mon_calls *np_mon_calls_new(int cap);
void np_mon_calls_free(np_mon_calls *c);
void np_mon_calls_reset(np_mon_calls *c, int64_t step, double loss_scale);
int np_mon_calls_take(np_mon_calls *c, const np_hook_event *ev, int micro);
int np_mon_calls_count(const np_mon_calls *c);
/* calls taken this step (the next one's number); keep: only the last
 * `keep` calls before the anomaly are written (a ring with a margin) */
int64_t np_mon_calls_taken(const np_mon_calls *c);
void np_mon_calls_keep(np_mon_calls *c, int keep);
/* upto: the calls numbered below it are before the anomaly (< 0: all); the
 * ring's later ones are written first among the `after` */
np_status np_mon_calls_fire(np_mon_calls *c, const char *dir, const char *precision, int rank,
                            int world, int after, int64_t upto, const np_mon_layout *lay,
                            np_error *err);
int np_mon_calls_before(const np_mon_calls *c);
int np_mon_calls_follow(np_mon_calls *c, const np_hook_event *ev, int micro, np_error *err,
                        np_status *st);
int np_mon_calls_after(const np_mon_calls *c);
int np_mon_calls_open(const np_mon_calls *c);
np_status np_mon_calls_finish(np_mon_calls *c, np_error *err);

#endif
