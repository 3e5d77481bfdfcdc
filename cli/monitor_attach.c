/* cli/monitor_attach.c - the monitor inside `nprobe train`: a config.json
 * with "task": "monitor" opens it instead of the probe (docs/MONITOR.md). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cmd.h"
#include "nprobe/model.h"
#include "nprobe/monitor.h"

int np_cli_monitor_wanted(const char *config_path)
{
    return config_path && np_monitor_config_is_monitor(config_path);
}

int np_cli_monitor_attach(struct np_monitor **out, struct np_ctx *ctx, struct np_trainer *tr,
                          const char *config_path, int rank, int world)
{
    *out = NULL;
    np_error err;
    np_error_clear(&err);
    np_monitor_config *cfg = malloc(sizeof *cfg);
    if (!cfg) {
        np_cli_error("out of memory");
        return NP_EXIT_USAGE;
    }
    np_monitor *m = NULL;
    const np_train_opts *to = np_trainer_opts(tr);
    np_status st = np_monitor_config_load(cfg, config_path, &err);
    if (!st && to->dist.pp > 1) {
        /* a pipeline stage's file says so (the order of the anomalies;
         * the stage is the rank: model_pp.c) */
        cfg->pp_stages = to->dist.pp;
        cfg->pp_stage = to->dist.rank;
    }
    if (st ||
        np_monitor_open(&m, cfg, rank, world, &err) || np_monitor_attach(m, ctx, tr, &err)) {
        np_cli_report(&err);
        np_monitor_free(m);
        free(cfg);
        return NP_EXIT_USAGE;
    }
    free(cfg);
    *out = m;
    return NP_EXIT_OK;
}

int np_cli_monitor_detach(struct np_monitor *m)
{
    if (!m)
        return NP_EXIT_OK;
    np_error err;
    np_error_clear(&err);
    np_status st = np_monitor_close(m, &err);
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    double proc = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec, mon = np_monitor_cpu_seconds(m);
    fprintf(stderr, "nprobe: monitor: %lld step(s), %lld record(s), %.3f s of CPU in the monitor "
                    "(%.2f%% of the process's %.3f s)\n",
            (long long)np_monitor_steps(m), (long long)np_monitor_records(m), mon,
            proc > 0 ? 100.0 * mon / proc : 0.0, proc);
    double u1 = np_monitor_update_seconds(m, 1), u0 = np_monitor_update_seconds(m, 0);
    if (u1 > 0 && u0 > 0)
        fprintf(stderr, "nprobe: monitor: optimizer update %.3f ms of CPU on a recorded step, "
                        "%.3f ms on the others (x%.3f)\n", 1e3 * u1, 1e3 * u0, u1 / u0);
    int64_t ck_step = -1;
    int missed = 0;
    const char *ck = np_monitor_anomaly_checkpoint(m, &ck_step, &missed);
    if (ck)
        fprintf(stderr, "nprobe: monitor: anomaly at step %lld: the state it began from in %s\n",
                (long long)ck_step, ck);
    else if (missed)
        fprintf(stderr, "nprobe: monitor: anomaly at step %lld after the update, no state kept "
                        "(monitor.anomaly_ring 0): no checkpoint\n", (long long)ck_step);
    int n_calls = 0, n_after = 0;
    const char *calls = np_monitor_anomaly_calls(m, &ck_step, &n_calls, &n_after);
    if (calls)
        fprintf(stderr, "nprobe: monitor: anomaly at step %lld: its last %d call(s) up to it and "
                        "%d after it in %s (a tensor dump: nprobe replay)\n", (long long)ck_step,
                n_calls, n_after, calls);
    if (st)
        np_cli_report(&err);
    np_monitor_free(m);
    return st ? NP_EXIT_USAGE : NP_EXIT_OK;
}
