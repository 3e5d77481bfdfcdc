/* monitor/monitor.c - the monitor's config and writer: statistics of the
 * selected modules' activations and activation gradients (runtime
 * observer), of parameter gradients before and after the data-parallel
 * reduction, weights, Adam's m and v, the update ratio and the step's
 * scalars (trainer watcher), appended to one HDF5 file per rank in SWMR
 * mode (docs/MONITOR.md). */
#include <errno.h>
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <hdf5.h>
#include <jansson.h>

#include <unistd.h>

#include "mon_internal.h"
#include "nprobe/common.h"
#include "nprobe/format.h"

/* ==== config ============================================================= */

/* a config.json read as a regular file only: a FIFO, socket or device is
 * refused without blocking (np_open_regular), whose reason *why names */
static json_t *load_regular(const char *path, json_error_t *je, const char **why)
{
    int fd = np_open_regular(path, why);
    if (fd < 0)
        return NULL;
    json_t *root = json_loadfd(fd, 0, je);
    close(fd);
    return root;
}

int np_monitor_config_is_monitor(const char *path)
{
    json_error_t je;
    const char *why = NULL;
    json_t *root = load_regular(path, &je, &why);
    if (!root)
        return 0;   /* not a monitor config: the probe's loader names what is wrong */
    json_t *t = json_object_get(root, "task");
    int yes = json_is_string(t) && strcmp(json_string_value(t), "monitor") == 0;
    json_decref(root);
    return yes;
}

int np_monitor_config_has_section(const char *path)
{
    json_error_t je;
    const char *why = NULL;
    json_t *root = load_regular(path, &je, &why);
    if (!root)
        return 0;
    int yes = json_is_object(json_object_get(root, "monitor"));
    json_decref(root);
    return yes;
}

static np_status cfg_bad(np_error *err, const char *path, const char *key, const char *what)
{
    return np_error_set(err, NP_ERR_CONFIG, path, key, "%s", what);
}

static np_status get_bool(int *out, json_t *sec, const char *key, const char *path,
                          np_error *err)
{
    json_t *v = json_object_get(sec, key);
    if (!v)
        return NP_OK;
    if (!json_is_boolean(v))
        return np_error_set(err, NP_ERR_CONFIG, path, key, "monitor.%s: expected true or false",
                            key);
    *out = json_is_true(v);
    return NP_OK;
}

static np_status get_int(int64_t *out, json_t *sec, const char *key, int64_t lo,
                         const char *path, np_error *err)
{
    json_t *v = json_object_get(sec, key);
    if (!v)
        return NP_OK;
    if (!json_is_integer(v) || json_integer_value(v) < lo)
        return np_error_set(err, NP_ERR_CONFIG, path, key,
                            "monitor.%s: expected an integer >= %lld", key, (long long)lo);
    *out = (int64_t)json_integer_value(v);
    return NP_OK;
}

static np_status get_num(double *out, json_t *obj, const char *key, const char *where,
                         const char *path, np_error *err)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return NP_OK;
    if (!json_is_number(v) || !isfinite(json_number_value(v)))
        return np_error_set(err, NP_ERR_CONFIG, path, key, "%s.%s: expected a finite number",
                            where, key);
    *out = json_number_value(v);
    return NP_OK;
}

/* alert.rules: [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 0.5}}, ...];
 * a rules list names the rules in force (the others are off). */
static np_status parse_rules(np_monitor_rules *r, json_t *alert, const char *path,
                             np_error *err)
{
    if (!json_is_object(alert))
        return cfg_bad(err, path, "alert", "monitor.alert: expected an object");
    json_t *rules = json_object_get(alert, "rules");
    if (!rules)
        return NP_OK;
    if (!json_is_array(rules))
        return cfg_bad(err, path, "rules", "monitor.alert.rules: expected a list");
    np_monitor_rules d = *r;
    r->nan = 0;
    r->turbulence = r->spike_factor = 0;
    r->ratio_max = 0;
    size_t i;
    json_t *it;
    json_array_foreach(rules, i, it) {
        json_t *nm = json_object_get(it, "rule_name");
        json_t *args = json_object_get(it, "args");
        if (!json_is_string(nm))
            return cfg_bad(err, path, "rule_name",
                           "monitor.alert.rules: each rule needs a \"rule_name\" string");
        if (args && !json_is_object(args))
            return cfg_bad(err, path, "args", "monitor.alert.rules: \"args\" must be an object");
        const char *n = json_string_value(nm);
        np_status st = NP_OK;
        if (!strcmp(n, "AnomalyNan")) {
            r->nan = 1;
        } else if (!strcmp(n, "AnomalyTurbulence")) {
            r->turbulence = d.turbulence;
            st = get_num(&r->turbulence, args, "threshold", "AnomalyTurbulence.args", path, err);
            double w = r->turbulence_warmup;
            if (!st)
                st = get_num(&w, args, "warmup", "AnomalyTurbulence.args", path, err);
            r->turbulence_warmup = (int)w;
        } else if (!strcmp(n, "AnomalySpike")) {
            r->spike_factor = d.spike_factor;
            double w = r->spike_window;
            st = get_num(&r->spike_factor, args, "factor", "AnomalySpike.args", path, err);
            if (!st)
                st = get_num(&w, args, "window", "AnomalySpike.args", path, err);
            if (!st && (w < 1 || w > 100000))
                return cfg_bad(err, path, "window", "AnomalySpike.args.window: expected 1 .. 100000");
            r->spike_window = (int)w;
        } else if (!strcmp(n, "AnomalyUpdateRatio")) {
            r->ratio_min = d.ratio_min;
            r->ratio_max = d.ratio_max;
            st = get_num(&r->ratio_min, args, "min", "AnomalyUpdateRatio.args", path, err);
            if (!st)
                st = get_num(&r->ratio_max, args, "max", "AnomalyUpdateRatio.args", path, err);
        } else {
            return np_error_set(err, NP_ERR_CONFIG, path, "rule_name",
                                "monitor.alert.rules: unknown rule \"%s\" (allowed: AnomalyNan, "
                                "AnomalyTurbulence, AnomalySpike, AnomalyUpdateRatio)", n);
        }
        if (st)
            return st;
    }
    return NP_OK;
}

static const char *const section_keys[] = {
    "targets", "step_interval", "start_step", "collect_times", "xy_distribution",
    "wg_distribution", "mv_distribution", "param_distribution", "alert", "format", "ops", "eps",
    "anomaly_checkpoint", "anomaly_ring", "anomaly_calls", "anomaly_calls_after",
    "update_source", /* the package's (docs/MONITOR.md); the runtime's update is its own */
    "cc_distribution", "ur_distribution",
};

/* monitor.cc_distribution (msprobe's keys): enable; cc_pre_hook accepted
 * and ignored (the inputs are always recorded: they name the source rank);
 * cc_codeline (regexes over the Python call stack) and cc_log_only refused
 * when they ask for anything: the runtime has no Python stack. */
static np_status parse_cc(np_monitor_config *c, json_t *v, const char *path, np_error *err)
{
    if (!json_is_object(v))
        return cfg_bad(err, path, "cc_distribution", "monitor.cc_distribution: expected an object");
    const char *key;
    json_t *it;
    json_object_foreach(v, key, it) {
        if (!strcmp(key, "enable") || !strcmp(key, "cc_pre_hook")) {
            if (!json_is_boolean(it))
                return np_error_set(err, NP_ERR_CONFIG, path, key, "monitor.cc_distribution.%s: "
                                    "expected true or false", key);
        } else if (!strcmp(key, "cc_codeline") || !strcmp(key, "cc_log_only")) {
            /* the no-op values of msprobe's own config (an empty list, false) port as they are */
            if (!strcmp(key, "cc_codeline") ? !json_is_array(it) || json_array_size(it) > 0
                                            : !json_is_false(it))
                return np_error_set(err, NP_ERR_CONFIG, path, key,
                                    "monitor.cc_distribution.%s: not supported by the runtime, "
                                    "which has no Python call stack to select or log collectives "
                                    "by (every collective of a recorded step is recorded; narrow "
                                    "the modules with \"targets\")", key);
        } else {
            return np_error_set(err, NP_ERR_CONFIG, path, key, "monitor.cc_distribution: unknown "
                                "key \"%s\" (allowed: enable, cc_pre_hook, cc_codeline, "
                                "cc_log_only)", key);
        }
    }
    c->cc = json_is_true(json_object_get(v, "enable"));
    return NP_OK;
}

/* monitor.targets: a list of patterns, or msprobe's object {"name": {}}. */
static np_status parse_targets(np_monitor_config *c, json_t *v, const char *path, np_error *err)
{
    if (!json_is_array(v) && !json_is_object(v))
        return cfg_bad(err, path, "targets", "monitor.targets: expected a list of module patterns");
    size_t i;
    json_t *it;
    if (json_is_array(v)) {
        json_array_foreach(v, i, it) {
            if (!json_is_string(it) || c->n_targets >= NP_MONITOR_MAX_TARGETS ||
                strlen(json_string_value(it)) >= NP_MONITOR_NAME_LEN)
                return cfg_bad(err, path, "targets", "monitor.targets: expected at most 64 "
                               "strings of under 192 characters");
            snprintf(c->targets[c->n_targets++], NP_MONITOR_NAME_LEN, "%s",
                     json_string_value(it));
        }
        return NP_OK;
    }
    const char *nm;
    json_object_foreach(v, nm, it) {
        if (c->n_targets >= NP_MONITOR_MAX_TARGETS || strlen(nm) >= NP_MONITOR_NAME_LEN)
            return cfg_bad(err, path, "targets", "monitor.targets: at most 64 names of "
                           "under 192 characters");
        snprintf(c->targets[c->n_targets++], NP_MONITOR_NAME_LEN, "%s", nm);
    }
    return NP_OK;
}

np_status np_monitor_config_load(np_monitor_config *c, const char *path, np_error *err)
{
    memset(c, 0, sizeof *c);
    c->step_interval = 1;
    c->xy = c->wg = c->mv = c->param = c->ur = 1;
    np_monitor_rules_default(&c->rules);
    json_error_t je;
    const char *why = NULL;
    json_t *root = load_regular(path, &je, &why);
    if (!root && why)
        return np_error_set(err, NP_ERR_CONFIG, path, NULL, "cannot open the config: %s", why);
    if (!root)
        return np_error_set_at(err, NP_ERR_JSON, path, je.line, je.column, NULL, "%s", je.text);
    np_status st = NP_OK;
    json_t *v;
    if (!json_is_object(root)) {
        st = cfg_bad(err, path, NULL, "expected a JSON object");
        goto out;
    }
    v = json_object_get(root, "dump_path");
    if (!json_is_string(v) || !*json_string_value(v)) {
        st = cfg_bad(err, path, "dump_path", "missing key \"dump_path\" (the monitor's folder)");
        goto out;
    }
    snprintf(c->dump_path, sizeof c->dump_path, "%s", json_string_value(v));
    if ((v = json_object_get(root, "rank"))) {
        size_t i;
        json_t *it;
        if (!json_is_array(v) || json_array_size(v) > 64) {
            st = cfg_bad(err, path, "rank", "\"rank\": expected a list of at most 64 ranks");
            goto out;
        }
        json_array_foreach(v, i, it) {
            if (!json_is_integer(it) || json_integer_value(it) < 0) {
                st = cfg_bad(err, path, "rank", "\"rank\": expected integers >= 0");
                goto out;
            }
            c->ranks[c->n_ranks++] = (int)json_integer_value(it);
        }
    }
    json_t *sec = json_object_get(root, "monitor");
    if (!sec)
        goto out; /* every default */
    if (!json_is_object(sec)) {
        st = cfg_bad(err, path, "monitor", "\"monitor\": expected an object");
        goto out;
    }
    const char *key;
    json_object_foreach(sec, key, v) {
        int known = 0;
        for (size_t k = 0; k < sizeof section_keys / sizeof section_keys[0]; k++)
            known |= !strcmp(key, section_keys[k]);
        if (!known) {
            st = np_error_set(err, NP_ERR_CONFIG, path, key,
                              "monitor: unknown key \"%s\" (allowed: targets, step_interval, "
                              "start_step, collect_times, xy_distribution, wg_distribution, "
                              "mv_distribution, param_distribution, anomaly_checkpoint, "
                              "anomaly_ring, anomaly_calls, anomaly_calls_after, "
                              "cc_distribution, ur_distribution, alert)", key);
            goto out;
        }
    }
    if ((v = json_object_get(sec, "targets")) && (st = parse_targets(c, v, path, err)))
        goto out;
    int64_t x = c->step_interval;
    if ((st = get_int(&x, sec, "step_interval", 1, path, err)))
        goto out;
    c->step_interval = x > 1 << 30 ? 1 << 30 : (int)x;
    if ((st = get_int(&c->start_step, sec, "start_step", 0, path, err)) ||
        (st = get_int(&c->collect_times, sec, "collect_times", 0, path, err)) ||
        (st = get_bool(&c->xy, sec, "xy_distribution", path, err)) ||
        (st = get_bool(&c->wg, sec, "wg_distribution", path, err)) ||
        (st = get_bool(&c->mv, sec, "mv_distribution", path, err)) ||
        (st = get_bool(&c->param, sec, "param_distribution", path, err)) ||
        (st = get_bool(&c->anomaly_checkpoint, sec, "anomaly_checkpoint", path, err)))
        goto out;
    /* msprobe's key for its own update view; here the update_ratio records,
     * following param_distribution unless given */
    c->ur = c->param;
    if ((st = get_bool(&c->ur, sec, "ur_distribution", path, err)))
        goto out;
    x = 0;
    if ((st = get_int(&x, sec, "anomaly_ring", 0, path, err)))
        goto out;
    if (x > 64) {
        st = cfg_bad(err, path, "anomaly_ring", "monitor.anomaly_ring: at most 64 steps (each "
                     "holds a copy of the weights and the optimizer state)");
        goto out;
    }
    c->anomaly_ring = (int)x;
    x = 0;
    if ((st = get_int(&x, sec, "anomaly_calls", 0, path, err)))
        goto out;
    if (x > 65536) {
        st = cfg_bad(err, path, "anomaly_calls", "monitor.anomaly_calls: at most 65536 calls (each "
                     "holds a copy of its inputs and outputs)");
        goto out;
    }
    c->anomaly_calls = (int)x;
    x = 0;
    if ((st = get_int(&x, sec, "anomaly_calls_after", 0, path, err)))
        goto out;
    if (x > 65536) {
        st = cfg_bad(err, path, "anomaly_calls_after", "monitor.anomaly_calls_after: at most "
                     "65536 calls");
        goto out;
    }
    c->anomaly_calls_after = (int)x;
    if ((v = json_object_get(sec, "cc_distribution")) && (st = parse_cc(c, v, path, err)))
        goto out;
    if ((v = json_object_get(sec, "alert")))
        st = parse_rules(&c->rules, v, path, err);
out:
    json_decref(root);
    return st;
}

/* ==== statistics ========================================================= */

/* One pass over the tensor for every statistic (norm, min, max, mean,
 * zeros, NaN/Inf counts): np_optim_tstats_add, float32 sums per block of
 * 512 elements in an OpenMP simd reduction, float64 totals, blocks added in
 * order (deterministic); a block with a value not finite is taken again
 * element by element. */
static void rec_from_tstats(np_mon_record *r, const np_optim_tstats *t, int64_t n)
{
    r->numel = n;
    r->zeros = t->zeros;
    r->nans = t->nans;
    r->infs = t->infs;
    if (t->finite > 0) {
        r->norm = sqrt(t->sumsq);
        r->min = t->min;
        r->max = t->max;
        r->mean = t->sum / (double)t->finite;
    } else {
        r->norm = r->min = r->max = r->mean = NAN;
    }
}

void np_mon_stats(np_mon_record *r, const float *x, int64_t n)
{
    np_optim_tstats t = {0, 0, INFINITY, -INFINITY, 0, 0, 0, 0};
    np_optim_tstats_add(&t, x, n);
    rec_from_tstats(r, &t, n);
}

static void scalar_stats(np_mon_record *r, double v)
{
    r->numel = 1;
    r->norm = fabs(v);
    r->max = r->min = r->mean = v;
    r->zeros = v == 0.0;
    r->nans = isnan(v);
    r->infs = isinf(v);
}

/* ==== the file =========================================================== */

struct np_monitor {
    np_monitor_config cfg;
    int rank, world, active;
    char path[4200];
    np_monitor_file *file; /* the writer (probe/monfile.c) */
    np_ctx *ctx;
    np_trainer *tr;
    int observing;         /* an observer of ctx's events (np_monitor_attach) */
    /* the step in progress */
    int on;                /* this step is recorded */
    int64_t step;
    int seq;
    np_mon_record *rec;    /* buffered records of the step */
    size_t n_rec, cap_rec;
    /* keys: names seen so far (hash by linear probing) */
    np_mon_key *keys;
    int n_keys, cap_keys, keys_flushed;
    int *slots;
    int n_slots;
    int64_t rows, steps_done, collected;
    np_optim_tstats *ost;  /* the optimizer's statistics of the step, NP_OPTIM_ST_N per parameter */
    unsigned char *want;   /* the parameters the targets select */
    int n_ost, ost_pending;
    double cpu_s;          /* thread CPU time spent in the monitor's callbacks */
    double upd_t0;         /* thread CPU time at NP_TRAIN_UPDATE_BEGIN (< 0: none) */
    double upd_s[2];       /* the optimizer updates' thread CPU time: [0] unrecorded steps, */
    int64_t upd_seen;      /* updates seen (the first is not counted) */
    /* the checkpoint on anomaly (docs/MONITOR.md "Dump on anomaly") */
    np_mon_rules_state *rs; /* the rules' history, fed the records as they come */
    size_t fed;            /* records of the step fed so far */
    np_train_state **ring; /* the last anomaly_ring recorded steps' starting state */
    int ring_pos;
    int ck_done, ck_missed;
    int anom;              /* the run's first anomaly was seen (at step anom_step): rules stop */
    int64_t anom_step;
    np_mon_calls *calls;   /* the ring of the step's last anomaly_calls API calls */
    int calls_n;           /* calls written at the anomaly (0: none) */
    int calls_fired;       /* the kept calls were written (or could not be): no more kept */
    int calls_sync;        /* tensor parallel: the ranks agree on writing them (calls_agree) */
    int64_t calls_mark;    /* calls_sync: the calls taken at this rank's first anomaly (-1) */
    int64_t calls_seen;    /* calls_sync: the calls seen while the ring waits (agreements) */
    int64_t calls_step;    /* the step they were written at */
    int calls_open;        /* the dump is open for the calls after it (anomaly_calls_after) */
    const np_mon_layout *lay; /* the run's mesh and placements for that dump (NULL: one process) */
    char calls_dir[4200];
    double step_scale;     /* the step's loss scale (its STEP_BEGIN event) */
    int64_t ck_step;
    char ck_path[4200];
    int64_t upd_n[2];      /*   [1] recorded ones (with the statistics in their loop) */
    const void *last_data; /* the last module tensor measured, while no API call ran since */
    int64_t last_numel;
    size_t last_rec;
    int cc_n[3];           /* cc_distribution: the step's TP all-reduces, reduce-scatters and
                              all-gathers so far */
    np_status st;          /* first write error */
    np_error err;
};

/* --tp with kept calls: the ranks agree every this many calls (and the
 * ring holds this many more) */
#define NP_MON_CALLS_MARGIN 16

static uint64_t hash_key(const char *name, const char *metric)
{
    uint64_t h = 1469598103934665603ull;
    for (const char *p = name; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;
    for (const char *p = metric; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return h;
}

static int key_id(np_monitor *m, const char *name, const char *metric)
{
    if (m->n_keys * 2 >= m->n_slots) {
        int ns = m->n_slots ? m->n_slots * 2 : 256;
        int *s = malloc((size_t)ns * sizeof *s);
        if (!s)
            return -1;
        for (int i = 0; i < ns; i++)
            s[i] = -1;
        for (int k = 0; k < m->n_keys; k++) {
            uint64_t h = hash_key(m->keys[k].name, m->keys[k].metric) % (uint64_t)ns;
            while (s[h] >= 0)
                h = (h + 1) % (uint64_t)ns;
            s[h] = k;
        }
        free(m->slots);
        m->slots = s;
        m->n_slots = ns;
    }
    uint64_t h = hash_key(name, metric) % (uint64_t)m->n_slots;
    while (m->slots[h] >= 0) {
        np_mon_key *k = &m->keys[m->slots[h]];
        if (!strcmp(k->name, name) && !strcmp(k->metric, metric))
            return m->slots[h];
        h = (h + 1) % (uint64_t)m->n_slots;
    }
    if (m->n_keys == m->cap_keys) {
        int nc = m->cap_keys ? m->cap_keys * 2 : 128;
        np_mon_key *k = realloc(m->keys, (size_t)nc * sizeof *k);
        if (!k)
            return -1;
        m->keys = k;
        m->cap_keys = nc;
    }
    np_mon_key *k = &m->keys[m->n_keys];
    memset(k, 0, sizeof *k);   /* the names cut to their fields, NUL-ended */
    memcpy(k->name, name, strnlen(name, sizeof k->name - 1));
    memcpy(k->metric, metric, strnlen(metric, sizeof k->metric - 1));
    m->slots[h] = m->n_keys;
    return m->n_keys++;
}

static void fail(np_monitor *m, np_status st, const char *what)
{
    if (!m->st) {
        m->st = st;
        np_error_set(&m->err, st, m->path, NULL, "monitor: %s", what);
    }
}

static np_mon_record *add(np_monitor *m, const char *name, const char *metric)
{
    if (m->st)
        return NULL;
    int k = key_id(m, name, metric);
    if (k < 0 || (m->n_rec == m->cap_rec &&
                  !(m->cap_rec = m->cap_rec ? m->cap_rec * 2 : 256,
                    m->rec = realloc(m->rec, m->cap_rec * sizeof *m->rec)))) {
        fail(m, NP_ERR_NOMEM, "out of memory");
        return NULL;
    }
    np_mon_record *r = &m->rec[m->n_rec++];
    memset(r, 0, sizeof *r);
    r->step = m->step;
    r->seq = m->seq++;
    r->key = k;
    return r;
}

static void add_tensor(np_monitor *m, const char *name, const char *metric, const float *x,
                       int64_t n)
{
    np_mon_record *r = add(m, name, metric);
    if (r)
        np_mon_stats(r, x, n);
}

static void add_scalar(np_monitor *m, const char *name, const char *metric, double v)
{
    np_mon_record *r = add(m, name, metric);
    if (r)
        scalar_stats(r, v);
}

/* ==== collectives (cc_distribution) ====================================== */

static double cpu_now(void);

/* x's values (float32, or float64 taken in float64) added to t */
static void tstats_add(np_optim_tstats *t, const void *x, np_dtype dt, int64_t n)
{
    if (dt == NP_FLOAT64)
        np_optim_tstats_add_f64(t, x, n);
    else
        np_optim_tstats_add(t, x, n);
}

/* One record of the event's tensors of role `role` merged (norm over all,
 * min, max, counts over all, mean weighted by the finite elements); none
 * when it has none. */
static void cc_record(np_monitor *m, const np_hook_event *ev, np_role role, const char *metric)
{
    np_optim_tstats t = {0, 0, INFINITY, -INFINITY, 0, 0, 0, 0};
    int64_t n = 0;
    int any = 0;
    for (int i = 0; i < ev->n_tensors; i++) {
        const np_tensor *x = ev->tensors[i].t;
        if (ev->tensors[i].role != role || !x || !x->data || !np_dtype_is_floating(x->dtype))
            continue;
        tstats_add(&t, x->data, x->dtype, x->numel);
        n += x->numel;
        any = 1;
    }
    np_mon_record *r = any ? add(m, ev->name, metric) : NULL;
    if (r)
        rec_from_tstats(r, &t, n);
}

/* A Distributed.* call event (data parallel's all-reduces, a pipeline's
 * send and recv): what this rank sent (its inputs, read before the
 * collective ran) and what arrived (its outputs). */
static void cc_event(np_monitor *m, const np_hook_event *ev)
{
    double t0 = cpu_now();
    cc_record(m, ev, NP_ROLE_INPUT, "comm_in");
    cc_record(m, ev, NP_ROLE_OUTPUT, "comm_out");
    m->cpu_s += cpu_now() - t0;
}

/* Tensor parallel's collectives (no hook events: np_trainer_set_coll_watch),
 * named as a dump names a call: Distributed.{op}.{k}.{forward|backward},
 * k counting the step's calls of that op. */
static void on_coll(const char *op, int bwd, int received, const void *x, np_dtype dt, int64_t n,
                    void *user)
{
    np_monitor *m = user;
    if (!m->on || m->st)
        return;
    double t0 = cpu_now();
    /* all_reduce, reduce_scatter, all_gather_into_tensor */
    int *k = &m->cc_n[op[0] == 'r' ? 1 : op[4] == 'g' ? 2 : 0];
    char name[64];
    snprintf(name, sizeof name, "Distributed.%s.%d.%s", op, *k, bwd ? "backward" : "forward");
    /* (float64: the gradient norm's squares, as a data-parallel run's
     * all-reduce of them in cc_record) */
    np_optim_tstats t = {0, 0, INFINITY, -INFINITY, 0, 0, 0, 0};
    tstats_add(&t, x, dt, n);
    np_mon_record *r = add(m, name, received ? "comm_out" : "comm_in");
    if (r)
        rec_from_tstats(r, &t, n);
    *k += received;
    m->last_data = NULL;
    m->cpu_s += cpu_now() - t0;
}

np_status np_monitor_open(np_monitor **out, const np_monitor_config *cfg, int rank,
                          int world_size, np_error *err)
{
    *out = NULL;
    np_monitor *m = calloc(1, sizeof *m);
    if (!m)
        return np_error_set(err, NP_ERR_NOMEM, NULL, "monitor", "out of memory");
    m->cfg = *cfg;
    m->rank = rank;
    m->world = world_size;
    m->upd_t0 = -1;
    m->active = cfg->n_ranks == 0;
    for (int i = 0; i < cfg->n_ranks; i++)
        m->active |= cfg->ranks[i] == rank;
    *out = m;
    if (!m->active)
        return NP_OK;
    if ((cfg->anomaly_calls > 0 || cfg->anomaly_calls_after > 0) &&
        !(m->calls = np_mon_calls_new(cfg->anomaly_calls)))
        return np_error_set(err, NP_ERR_NOMEM, NULL, "anomaly_calls", "out of memory");
    if (np_mkdirs(cfg->dump_path))
        return np_error_set(err, NP_ERR_IO, cfg->dump_path, "dump_path", "cannot create: %s",
                            strerror(errno));
    snprintf(m->path, sizeof m->path, "%s/monitor_rank%d.h5", cfg->dump_path, rank);
    return np_monitor_file_create(&m->file, m->path, rank, world_size, cfg->step_interval,
                                  cfg->pp_stages, cfg->pp_stage, err);
}

/* ==== events ============================================================= */

static int matches(const np_monitor *m, const char *name)
{
    if (!m->cfg.n_targets)
        return 1;
    for (int i = 0; i < m->cfg.n_targets; i++) {
        const char *t = m->cfg.targets[i];
        if (strpbrk(t, "*?[") ? fnmatch(t, name, 0) == 0 : strncmp(name, t, strlen(t)) == 0)
            return 1;
    }
    return 0;
}

/* "Module.h.0.mlp.MLP.forward.0" -> "h.0.mlp" (path without class and call). */
static void module_path(char *out, size_t cap, const char *ev)
{
    const char *s = strncmp(ev, "Module.", 7) == 0 ? ev + 7 : ev;
    snprintf(out, cap, "%s", s);
    for (int drop = 0; drop < 3; drop++) {
        char *dot = strrchr(out, '.');
        if (!dot)
            break;
        *dot = 0;
    }
}

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int on_event(const np_hook_event *ev, void *user)
{
    np_monitor *m = user;
    if (!m->on || !m->cfg.xy || m->st)
        return 0;
    if (ev->kind != NP_EV_MODULE_FORWARD && ev->kind != NP_EV_MODULE_BACKWARD)
        return 0;
    char path[NP_MONITOR_NAME_LEN];
    module_path(path, sizeof path, ev->name ? ev->name : "");
    if (!path[0] || !matches(m, path))
        return 0;
    int fwd = ev->kind == NP_EV_MODULE_FORWARD;
    np_role want = fwd ? NP_ROLE_OUTPUT : NP_ROLE_INPUT; /* backward: grads at the outputs */
    for (int i = 0; i < ev->n_tensors; i++) {
        const np_hook_tensor *ht = &ev->tensors[i];
        if (ht->role != want || !ht->t || !ht->t->data || ht->index != 0 ||
            !np_dtype_is_floating(ht->t->dtype) || ht->t->dtype == NP_FLOAT64)
            continue;
        const char *metric = fwd ? "activation" : "activation_grad";
        /* a module returning its last submodule's output (h.0.attn = h.0.attn.c_proj):
         * the same tensor, unchanged as no API call ran since, measured once */
        if (ht->t->data == m->last_data && ht->t->numel == m->last_numel && m->last_rec < m->n_rec) {
            np_mon_record prev = m->rec[m->last_rec];
            np_mon_record *r = add(m, path, metric);
            if (r) {
                int seq = r->seq, key = r->key;
                *r = prev;
                r->seq = seq;
                r->key = key;
            }
            continue;
        }
        np_mon_record *r = add(m, path, metric);
        if (!r)
            continue;
        np_mon_stats(r, ht->t->data, ht->t->numel);
        m->last_data = ht->t->data;
        m->last_numel = ht->t->numel;
        m->last_rec = m->n_rec - 1;
    }
    return 0;
}

static int step_selected(const np_monitor *m, int64_t step)
{
    if (!m->active || step < m->cfg.start_step)
        return 0;
    if ((step - m->cfg.start_step) % m->cfg.step_interval)
        return 0;
    return m->cfg.collect_times <= 0 || m->collected < m->cfg.collect_times;
}

static void grads(np_monitor *m, np_tensor *const *p, int n, const char *metric)
{
    for (int i = 0; i < n; i++)
        if (p[i]->grad && p[i]->name && matches(m, p[i]->name))
            add_tensor(m, p[i]->name, metric, p[i]->grad, p[i]->numel);
}

/* The step's records, the keys it added, then its /steps row
 * (np_monitor_file_append). The library never prints: the first error is
 * kept (np_monitor_close returns it). */
static void flush_step(np_monitor *m)
{
    if (m->st || !m->file)
        return;
    np_error e;
    np_error_clear(&e);
    if (np_monitor_file_append(m->file, m->step, m->rec, (int64_t)m->n_rec,
                               m->keys + m->keys_flushed, m->n_keys - m->keys_flushed, &e)) {
        if (!m->st) {
            m->st = e.status;
            m->err = e;
        }
        return;
    }
    m->rows += (int64_t)m->n_rec;
    m->keys_flushed = m->n_keys;
    m->steps_done++;
    m->collected++;
}

/* ==== the checkpoint on anomaly ========================================== */

/* 1 when the run's checkpoint is a collective: tensor or pipeline parallel
 * (np_trainer_save gathers the shards and the stages' tensors, and world
 * rank 0 writes the one-process tensors) */
static int collective(const np_monitor *m)
{
    const np_train_opts *o = m->tr ? np_trainer_opts(m->tr) : NULL;
    return o && (o->dist.tp > 1 || o->dist.pp > 1);
}

/* The checkpoint of step `step`: the rank's own, or a collective one's,
 * written by rank 0, named by it (nprobe triage looks for it there) */
static void ck_path(const np_monitor *m, char *out, size_t cap, int64_t step)
{
    snprintf(out, cap, "%s/anomaly_rank%d.step%lld.h5", m->cfg.dump_path,
             collective(m) ? 0 : m->rank, (long long)step);
}

/* 1 when any rank's flag is set (an allgather over the world: every rank
 * calls it at the same point). */
static int any_rank(np_monitor *m, int mine, const char *what)
{
    const np_train_opts *o = np_trainer_opts(m->tr);
    int n = o->dist.world_size, any = 0;
    int *all = calloc((size_t)n, sizeof *all);
    int flag = mine;
    if (!all || o->dist.allgather(all, &flag, sizeof flag, o->dist.user)) {
        free(all);
        fail(m, NP_ERR_NOMEM, what);
        return 0;
    }
    for (int r = 0; r < n; r++)
        any |= all[r];
    free(all);
    return any;
}

/* Tensor and pipeline parallel: the checkpoint is a collective, so every
 * rank writes it when any rank saw the run's first anomaly at this step
 * before the update (with anomaly_ring, after it too: the kept states'
 * checkpoints are collectives as well); the ranks agree by an allgather of
 * their flags at every recorded step's update (and its end with the ring,
 * until written). 1 when this rank is to
 * write. Otherwise: the rank's own. */
static int ck_agree(np_monitor *m, int before_update, int mine)
{
    const np_train_opts *o = m->tr ? np_trainer_opts(m->tr) : NULL;
    if (!collective(m) || !o->dist.allgather || o->dist.world_size <= 1)
        return mine;
    if (!before_update && m->cfg.anomaly_ring <= 0)
        return 0;   /* after the update the live state is not S's: only the ring writes */
    return any_rank(m, mine, "cannot agree on the checkpoint on anomaly with the other ranks");
}

/* At a recorded step's start: a copy of the state into the ring. */
static void ring_take(np_monitor *m)
{
    int k = m->cfg.anomaly_ring;
    /* under tensor and pipeline parallelism a failed rank still keeps its
     * copies: the kept states' checkpoints are collectives */
    if (k <= 0 || !m->cfg.anomaly_checkpoint || m->ck_done || !m->tr || (m->st && !collective(m)))
        return;
    if (!m->ring && !(m->ring = calloc((size_t)k, sizeof *m->ring))) {
        fail(m, NP_ERR_NOMEM, "out of memory for the anomaly ring");
        return;
    }
    np_train_state **s = &m->ring[m->ring_pos];
    if (!*s && np_train_state_new(s, m->tr, NULL)) {
        fail(m, NP_ERR_NOMEM, "out of memory for a copy of the training state (anomaly_ring)");
        return;
    }
    np_train_state_take(*s, m->tr);
    m->ring_pos = (m->ring_pos + 1) % k;
}

/* The kept calls written as the anomaly's step's dump (anomaly_calls),
 * those numbered below upto before it (< 0: all), the dump left open for
 * the calls after it (anomaly_calls_after). */
static void calls_fire(np_monitor *m, int64_t upto)
{
    if (!m->calls || m->calls_fired)
        return;
    m->calls_fired = 1;
    m->calls_step = m->step;
    if (m->st || (np_mon_calls_count(m->calls) == 0 && m->cfg.anomaly_calls_after <= 0))
        return;
    const np_ctx_opts *o = m->ctx ? np_ctx_options(m->ctx) : NULL;
    const char *prec = !o ? "fp32" : o->precision == NP_BFLOAT16 ? "bf16"
                                   : o->precision == NP_FLOAT16 ? "fp16" : "fp32";
    snprintf(m->calls_dir, sizeof m->calls_dir, "%s/anomaly_calls", m->cfg.dump_path);
    np_error e;
    np_error_clear(&e);
    if (np_mon_calls_fire(m->calls, m->calls_dir, prec, m->rank, m->world,
                          m->cfg.anomaly_calls_after, upto, m->lay, &e)) {
        fail(m, e.status, "cannot write the calls kept on anomaly");
        m->calls_dir[0] = '\0';
    } else {
        m->calls_n = np_mon_calls_before(m->calls);
        m->calls_open = np_mon_calls_open(m->calls);
    }
}

/* Tensor parallel with kept calls (calls_sync): the ranks run the same
 * calls, so every NP_MON_CALLS_MARGIN calls (and at the update) they tell
 * each other the call at which each saw its first anomaly; at the first
 * agreement that one did, every rank writes its ring cut at the earliest
 * such call (the ring holds K + the margin, so those K are still in it) and
 * what followed it as calls after. */
static void calls_agree(np_monitor *m)
{
    if (!m->calls_sync || m->calls_fired)
        return;
    const np_train_opts *o = np_trainer_opts(m->tr);
    int n = o->dist.world_size, mine = m->calls_mark < 0 ? -1 : (int)m->calls_mark, first = -1;
    int *all = calloc((size_t)n, sizeof *all);
    if (!all || o->dist.allgather(all, &mine, sizeof mine, o->dist.user)) {
        free(all);
        fail(m, NP_ERR_NOMEM, "cannot agree on the calls kept on anomaly with the other ranks");
        return;
    }
    for (int r = 0; r < n; r++)
        if (all[r] >= 0 && (first < 0 || all[r] < first))
            first = all[r];
    free(all);
    if (first >= 0)
        calls_fire(m, first);
}

/* The rules over the step's records not yet fed (the same history as
 * nprobe monitor's reading, so the same verdicts); on the run's first
 * anomaly at step S, the kept calls are written (anomaly_calls; under
 * calls_sync once the ranks agreed). 1 when the first anomaly was seen
 * now. */
static int rules_feed(np_monitor *m)
{
    if (m->anom || m->st)
        return 0;
    if (!m->rs && !(m->rs = np_mon_rules_state_new())) {
        fail(m, NP_ERR_NOMEM, "out of memory");
        return 0;
    }
    int hit = 0;
    for (; m->fed < m->n_rec && !hit; m->fed++) {
        const np_mon_record *r = &m->rec[m->fed];
        np_mon_hit h;
        if (np_mon_rules_feed(m->rs, &m->cfg.rules, r, m->keys[r->key].metric, &h)) {
            fail(m, NP_ERR_NOMEM, "out of memory");
            return 0;
        }
        hit = h.rule != NULL;
    }
    if (!hit)
        return 0;
    m->anom = 1;
    m->anom_step = m->step;
    if (!m->calls_sync)
        calls_fire(m, -1);
    else if (m->calls && m->calls_mark < 0 && !m->calls_fired)
        m->calls_mark = np_mon_calls_taken(m->calls);
    return 1;
}

/* The rules over the rest of the step's records; on the run's first
 * anomaly at step S (seen now or earlier in this step): the state S began
 * from as a checkpoint, live before the update (nothing changed it yet),
 * else from the ring, with the ring's earlier steps. */
static void online_check(np_monitor *m, int before_update)
{
    if ((!m->cfg.anomaly_checkpoint && !m->calls) || (m->st && !collective(m)))
        return;
    if (!m->st)
        rules_feed(m);
    calls_agree(m);
    if (m->ck_done || !m->cfg.anomaly_checkpoint)
        return;
    /* under tensor and pipeline parallelism every rank takes part, as long
     * as none wrote */
    if (!ck_agree(m, before_update, !m->st && m->anom && m->anom_step == m->step))
        return;
    m->ck_done = 1;
    m->ck_step = m->step;
    char path[sizeof m->ck_path];
    np_error e;
    np_error_clear(&e);
    int wrote = 0;
    if (before_update) {
        ck_path(m, path, sizeof path, m->step);
        if (np_trainer_save(m->tr, path, &e))
            fail(m, e.status, "cannot write the checkpoint on anomaly");
        else
            wrote = 1;
    }
    for (int i = 0; m->ring && i < m->cfg.anomaly_ring; i++) {
        /* oldest first */
        np_train_state *st = m->ring[(m->ring_pos + i) % m->cfg.anomaly_ring];
        int64_t s = np_train_state_step(st);
        if (s < 0 || (s == m->step && wrote))
            continue;
        ck_path(m, path, sizeof path, s);
        /* a collective: every rank goes on (rank 0 writes the whole tensors) */
        if (np_train_state_save(st, m->tr, path, &e)) {
            fail(m, e.status, "cannot write a kept state on anomaly");
            if (!collective(m))
                return;
            continue;
        }
        wrote |= s == m->step;
    }
    if (wrote)
        ck_path(m, m->ck_path, sizeof m->ck_path, m->step);
    else
        m->ck_missed = 1;
}

const char *np_monitor_anomaly_calls(const np_monitor *m, int64_t *step, int *n, int *after)
{
    int wrote = m && m->calls_dir[0];
    if (step)
        *step = wrote ? m->calls_step : -1;
    if (n)
        *n = wrote ? m->calls_n : 0;
    if (after)
        *after = wrote ? np_mon_calls_after(m->calls) : 0;
    return wrote ? m->calls_dir : NULL;
}

void np_monitor_set_layout(np_monitor *m, const np_mon_layout *lay)
{
    if (m)
        m->lay = lay;
}

/* The calls after the anomaly (anomaly_calls_after): each API call and
 * step boundary into the open dump until N were written. */
static void calls_follow(np_monitor *m, const np_hook_event *ev)
{
    np_error e;
    np_error_clear(&e);
    np_status st;
    double t0 = cpu_now();
    np_mon_calls_follow(m->calls, ev, m->ctx ? np_ctx_micro_batch(m->ctx) : 0, &e, &st);
    m->cpu_s += cpu_now() - t0;
    if (st)
        fail(m, e.status, "cannot write the calls after the anomaly");
}

const char *np_monitor_anomaly_checkpoint(const np_monitor *m, int64_t *step, int *missed)
{
    if (step)
        *step = m ? m->ck_step : -1;
    if (missed)
        *missed = m ? m->ck_missed : 0;
    return m && m->ck_path[0] ? m->ck_path : NULL;
}

static int train_point(np_train_point pt, np_trainer *tr, const np_step_result *res, void *user)
{
    np_monitor *m = user;
    if (m->st) {
        /* tensor parallel: a failed rank still takes part in the other
         * ranks' checkpoint on anomaly (a collective) */
        if (pt == NP_TRAIN_UPDATE_BEGIN && m->on)
            online_check(m, 1);
        else if (pt == NP_TRAIN_UPDATE_END && m->on && m->cfg.anomaly_ring > 0)
            online_check(m, 0);
        return 0;
    }
    int n = 0;
    np_tensor *const *p = np_model_params(np_trainer_model(tr), &n);
    if (pt == NP_TRAIN_BACKWARD_END) {
        /* the step's first watch point: the observer's records came before it */
        if (!m->on)
            return 0;
        add_scalar(m, "loss", "loss", res->loss);
        add_scalar(m, "loss_scale", "loss_scale", res->loss_scale);
        if (m->cfg.wg && m->world > 1) /* one process: nothing is reduced */
            grads(m, p, n, "grad_pre");
        return 0;
    }
    if (!m->on)
        return 0;
    np_optim *o = np_trainer_optim(tr);
    if (pt == NP_TRAIN_UPDATE_BEGIN) {
        online_check(m, 1);
        /* the gradients the update reads, its state and weights after it and
         * ||W_after - W_before||: gathered inside the optimizer's own loop
         * (np_optim_collect_stats), no pass over the parameters of ours */
        if (!o || (!m->cfg.wg && !m->cfg.param && !m->cfg.ur && !m->cfg.mv))
            return 0;
        if (m->n_ost != n) {
            free(m->ost);
            free(m->want);
            m->ost = calloc((size_t)(n > 0 ? n : 1) * NP_OPTIM_ST_N, sizeof *m->ost);
            m->want = calloc((size_t)(n > 0 ? n : 1), 1);
            m->n_ost = m->ost && m->want ? n : 0;
            for (int i = 0; i < m->n_ost; i++)
                m->want[i] = p[i]->name && matches(m, p[i]->name);
        }
        if (m->n_ost == n) {
            /* only what the config asks: the others cost nothing */
            np_optim_collect_mask(o, (m->cfg.wg ? 1u << NP_OPTIM_ST_GRAD : 0) |
                                         (m->cfg.mv ? 1u << NP_OPTIM_ST_SLOT0 | 1u << NP_OPTIM_ST_SLOT1 : 0) |
                                         (m->cfg.param || m->cfg.ur ? 1u << NP_OPTIM_ST_WEIGHT : 0) |
                                         (m->cfg.ur ? 1u << NP_OPTIM_ST_DELTA : 0));
            np_optim_collect_stats(o, m->ost, m->want);
            m->ost_pending = 1;
        }
        return 0;
    }
    /* NP_TRAIN_UPDATE_END */
    int fused = m->ost_pending && !res->skipped;
    m->ost_pending = 0;
    if (fused && m->cfg.wg)
        for (int i = 0; i < n; i++)
            if (m->want[i]) {
                np_mon_record *r = add(m, p[i]->name, "grad");
                if (r)
                    rec_from_tstats(r, &m->ost[(size_t)i * NP_OPTIM_ST_N + NP_OPTIM_ST_GRAD],
                                    p[i]->numel);
            }
    if (m->cfg.param || m->cfg.ur || m->cfg.mv) {
        for (int i = 0; i < n; i++) {
            if (!p[i]->name || !matches(m, p[i]->name))
                continue;
            const np_optim_tstats *t = fused ? &m->ost[(size_t)i * NP_OPTIM_ST_N] : NULL;
            if (m->cfg.param) {
                np_mon_record *wr = add(m, p[i]->name, "weight");
                if (wr && t)
                    rec_from_tstats(wr, &t[NP_OPTIM_ST_WEIGHT], p[i]->numel);
                else if (wr)
                    np_mon_stats(wr, p[i]->data, p[i]->numel);
            }
            if (m->cfg.ur && t) {
                /* ||W_after - W_before|| / ||W_after|| */
                np_mon_record w;
                rec_from_tstats(&w, &t[NP_OPTIM_ST_WEIGHT], p[i]->numel);
                double wn = w.norm, dn = sqrt(t[NP_OPTIM_ST_DELTA].sumsq);
                add_scalar(m, p[i]->name, "update_ratio", wn > 0 ? dn / wn : 0.0);
            }
            for (int s = 0; m->cfg.mv && o && s < np_optim_n_slots(o); s++) {
                np_mon_record *r = add(m, p[i]->name, np_optim_slot_name(o, s));
                if (r && t)
                    rec_from_tstats(r, &t[NP_OPTIM_ST_SLOT0 + s], p[i]->numel);
                else if (r)
                    np_mon_stats(r, np_optim_slot(o, s, i), p[i]->numel);
            }
        }
    }
    add_scalar(m, "grad_norm", "grad_norm", res->skipped ? NAN : res->grad_norm);
    online_check(m, 0);
    flush_step(m);
    return 0;
}

/* A step's start decides whether it is recorded: at the STEP_BEGIN event,
 * or without an observer at the trainer's BACKWARD_END (the state the step
 * began from is still unchanged there). */
static void step_begin(np_monitor *m, int64_t step)
{
    m->step = step;
    m->seq = 0;
    m->n_rec = 0;
    m->fed = 0;
    m->cc_n[0] = m->cc_n[1] = m->cc_n[2] = 0;
    m->on = step_selected(m, step);
    if (m->on)
        ring_take(m);
}

static int on_train(np_train_point pt, np_trainer *tr, const np_step_result *res, void *user)
{
    np_monitor *m = user;
    if (pt == NP_TRAIN_BACKWARD_END && !m->observing)
        step_begin(m, res->step);
    /* the update's cost, recorded steps against the others (step_interval
     * > 1): the span from UPDATE_BEGIN's return to UPDATE_END; not the
     * run's first update, which first touches the optimizer's zeroed state
     * (page faults: a recorded step 0 read 2.5x the others) */
    if (pt == NP_TRAIN_UPDATE_END && m->upd_t0 >= 0 && !res->skipped && m->upd_seen++ > 0) {
        m->upd_s[m->on] += cpu_now() - m->upd_t0;
        m->upd_n[m->on]++;
    }
    m->upd_t0 = -1;
    if (!m->on) {
        if (pt == NP_TRAIN_UPDATE_BEGIN)
            m->upd_t0 = cpu_now();
        return 0;
    }
    double t0 = cpu_now();
    train_point(pt, tr, res, user);
    double t1 = cpu_now();
    m->cpu_s += t1 - t0;
    if (pt == NP_TRAIN_UPDATE_BEGIN)
        m->upd_t0 = t1;
    if (pt == NP_TRAIN_UPDATE_END && !m->observing)
        m->on = 0;   /* the step's end */
    return 0;
}

/* The step boundary and the module and call events. */
static int on_step(const np_hook_event *ev, void *user)
{
    np_monitor *m = user;
    if (m->calls_open) {
        /* after the anomaly: the calls into its dump until N were written */
        calls_follow(m, ev);
        m->calls_open = np_mon_calls_open(m->calls);
    }
    if (ev->kind == NP_EV_STEP_BEGIN) {
        step_begin(m, ev->step);
        if (m->calls) {
            double ls = 1.0;
            for (int i = 0; i < ev->n_scalars; i++)
                if (ev->scalars[i].key && !strcmp(ev->scalars[i].key, "loss_scale"))
                    ls = ev->scalars[i].value;
            np_mon_calls_reset(m->calls, ev->step, ls);
        }
    } else if (ev->kind == NP_EV_STEP_END) {
        m->on = 0;
    }
    if (ev->kind == NP_EV_API_FORWARD || ev->kind == NP_EV_API_BACKWARD || ev->kind == NP_EV_STEP_BEGIN)
        m->last_data = NULL;
    if (m->cfg.cc && m->on && !m->st && (ev->kind == NP_EV_API_FORWARD || ev->kind == NP_EV_API_BACKWARD) &&
        ev->name && !strncmp(ev->name, "Distributed.", 12))
        cc_event(m, ev);
    if (m->on && m->calls && !m->calls_fired &&
        (ev->kind == NP_EV_API_FORWARD || ev->kind == NP_EV_API_BACKWARD)) {
        /* the ring of call inputs: a copy of the call (anomaly_calls) */
        double t0 = cpu_now();
        if (!m->st && np_mon_calls_take(m->calls, ev, m->ctx ? np_ctx_micro_batch(m->ctx) : 0))
            fail(m, NP_ERR_NOMEM, "out of memory for a call kept (anomaly_calls)");
        /* every rank counts the same calls, failed or not */
        if (m->calls_sync && ++m->calls_seen % NP_MON_CALLS_MARGIN == 0)
            calls_agree(m);
        m->cpu_s += cpu_now() - t0;
        return 0;
    }
    if (!m->on || (ev->kind != NP_EV_MODULE_FORWARD && ev->kind != NP_EV_MODULE_BACKWARD))
        return 0;
    double t0 = cpu_now();
    on_event(ev, user);
    if (m->calls)
        rules_feed(m); /* at once: the ring still holds the calls up to this module's */
    m->cpu_s += cpu_now() - t0;
    return 0;
}

np_status np_monitor_attach(np_monitor *m, np_ctx *ctx, np_trainer *tr, np_error *err)
{
    const np_train_opts *o = np_trainer_opts(tr);
    /* the checkpoint on anomaly of a tensor- or pipeline-parallel run is a
     * collective: a rank left out by the config's "rank" list would never take part
     * (every rank refuses the same config) */
    if (m->cfg.anomaly_checkpoint && m->cfg.n_ranks > 0 && (o->dist.tp > 1 || o->dist.pp > 1))
        return np_error_set(err, NP_ERR_ARG, NULL, "monitor",
                            "anomaly_checkpoint with a \"rank\" list under %s: every rank takes "
                            "part in writing it (leave out \"rank\")",
                            o->dist.pp > 1 ? "--pp" : "--tp");
    if (!m->active)
        return NP_OK;
    /* tensor parallel (no pipeline): the ranks run the same calls, each on
     * its shards, so they agree at each module record whether one saw the
     * run's first anomaly, and every rank writes its kept calls (the same
     * calls: compare assembles them); a pipeline's stages hold different
     * calls, the stage that saw it writes its own */
    m->calls_sync = m->calls && o->dist.tp > 1 && o->dist.pp <= 1 && o->dist.world_size > 1 &&
                    o->dist.allgather && m->cfg.n_ranks == 0; /* every rank monitors */
    m->calls_mark = -1;
    if (m->calls_sync) {
        /* the ring with a margin: the calls between an anomaly and the
         * agreement that follows it */
        np_mon_calls_free(m->calls);
        if (!(m->calls = np_mon_calls_new(m->cfg.anomaly_calls + NP_MON_CALLS_MARGIN)))
            return np_error_set(err, NP_ERR_NOMEM, NULL, "anomaly_calls", "out of memory");
        np_mon_calls_keep(m->calls, m->cfg.anomaly_calls);
    }
    /* the events only for the modules' outputs or the ring of calls: an
     * observer makes the runtime name and emit every call (a third of
     * the monitor's own instructions a step without them) */
    if (m->cfg.xy || m->calls || m->cfg.cc) {
        np_observer obs = {10, NULL, on_step, m};
        np_status st = np_ctx_add_observer(ctx, &obs, err);
        if (st)
            return st;
        m->observing = 1;
    }
    m->ctx = ctx;
    m->tr = tr;
    np_trainer_set_watch(tr, on_train, m);
    if (m->cfg.cc) /* off: no watcher, nothing added to a collective */
        np_trainer_set_coll_watch(tr, on_coll, m);
    return NP_OK;
}

int64_t np_monitor_steps(const np_monitor *m) { return m ? m->steps_done : 0; }
int64_t np_monitor_records(const np_monitor *m) { return m ? m->rows : 0; }
double np_monitor_cpu_seconds(const np_monitor *m) { return m ? m->cpu_s : 0.0; }

double np_monitor_update_seconds(const np_monitor *m, int recorded)
{
    return m && m->upd_n[recorded != 0] ? m->upd_s[recorded != 0] / (double)m->upd_n[recorded != 0]
                                         : 0.0;
}

np_status np_monitor_close(np_monitor *m, np_error *err)
{
    if (!m)
        return NP_OK;
    if (m->calls_open) {
        /* the run ended before the N calls after the anomaly came */
        np_error e;
        np_error_clear(&e);
        m->calls_open = 0;
        if (np_mon_calls_finish(m->calls, &e))
            fail(m, e.status, "cannot write the calls after the anomaly");
    }
    if (m->ctx && m->observing)
        np_ctx_remove_observers(m->ctx, m);
    m->observing = 0;
    if (m->tr)
        np_trainer_set_watch(m->tr, NULL, NULL);
    if (m->tr && m->cfg.cc)
        np_trainer_set_coll_watch(m->tr, NULL, NULL);
    m->ctx = NULL;
    m->tr = NULL;
    if (m->file) {
        np_error e;
        np_error_clear(&e);
        if (np_monitor_file_close(m->file, &e) && !m->st) {
            m->st = e.status;
            m->err = e;
        }
        m->file = NULL;
    }
    if (m->st && err)
        *err = m->err;
    return m->st;
}

void np_monitor_free(np_monitor *m)
{
    if (!m)
        return;
    np_monitor_close(m, NULL);
    for (int i = 0; m->ring && i < m->cfg.anomaly_ring; i++)
        np_train_state_free(m->ring[i]);
    free(m->ring);
    np_mon_rules_state_free(m->rs);
    np_mon_calls_free(m->calls);
    free(m->ost);
    free(m->want);
    free(m->rec);
    free(m->keys);
    free(m->slots);
    free(m);
}
