/* monitor/monitor_read.c - reading the monitor files of a run (every
 * rank's, up to its last finished step, also while the run goes on or
 * after it was killed) and the anomaly rules (docs/MONITOR.md). */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mon_internal.h"

/* the running mean of a norm: m = EMA m + (1 - EMA) x */
#define NP_MON_EMA 0.9

/* Rows [0, n) of a 1-D dataset into a new buffer (n <= its extent). */
static void *read_rows(hid_t file, const char *name, hid_t type, size_t row, hsize_t n)
{
    hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
    if (d < 0)
        return NULL;
    void *buf = malloc(n ? n * row : 1);
    hid_t sp = H5Dget_space(d);
    hsize_t cur = 0, zero = 0;
    H5Sget_simple_extent_dims(sp, &cur, NULL);
    herr_t e = -1;
    if (buf && n <= cur) {
        e = 0;
        if (n) {
            H5Sselect_hyperslab(sp, H5S_SELECT_SET, &zero, NULL, &n, NULL);
            hid_t ms = H5Screate_simple(1, &n, NULL);
            e = H5Dread(d, type, ms, sp, H5P_DEFAULT, buf);
            H5Sclose(ms);
        }
    }
    H5Sclose(sp);
    H5Dclose(d);
    if (e < 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

static hsize_t extent(hid_t file, const char *name)
{
    hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
    if (d < 0)
        return 0;
    hid_t sp = H5Dget_space(d);
    hsize_t cur = 0;
    H5Sget_simple_extent_dims(sp, &cur, NULL);
    H5Sclose(sp);
    H5Dclose(d);
    return cur;
}

np_status np_mon_read_rank(rank_data *rd, const char *path, np_error *err)
{
    memset(rd, 0, sizeof *rd);
    hid_t f;
    H5E_BEGIN_TRY {
        f = H5Fopen(path, H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, H5P_DEFAULT);
    } H5E_END_TRY;
    if (f < 0)
        return np_error_set(err, NP_ERR_FORMAT, path, NULL, "not a readable monitor file");
    np_status st = NP_OK;
    hid_t ts = np_monfile_type_step(), tk = np_monfile_type_key(),
          tr = np_monfile_type_record();
    H5E_BEGIN_TRY {
        long long rank = -1;
        hid_t a = H5Aopen(f, "rank", H5P_DEFAULT);
        if (a < 0 || H5Aread(a, H5T_NATIVE_LLONG, &rank) < 0 || rank < 0 || rank > 1 << 24) {
            st = np_error_set(err, NP_ERR_FORMAT, path, "rank", "no valid \"rank\" attribute");
        }
        if (a >= 0)
            H5Aclose(a);
        rd->rank = (int)rank;
        /* a pipeline stage's file (absent: no pipeline) */
        long long stage = -1;
        hid_t as = H5Aexists(f, "pp_stage") > 0 ? H5Aopen(f, "pp_stage", H5P_DEFAULT) : -1;
        if (as >= 0) {
            if (H5Aread(as, H5T_NATIVE_LLONG, &stage) < 0 || stage < 0 || stage > 1 << 24)
                stage = -1;
            H5Aclose(as);
        }
        rd->stage = (int)stage;
        hsize_t ns = st ? 0 : extent(f, "steps");
        np_mon_step *steps = st ? NULL : read_rows(f, "steps", ts, sizeof *steps, ns);
        if (!st && !steps)
            st = np_error_set(err, NP_ERR_FORMAT, path, "steps", "cannot read /steps");
        if (!st && ns) {
            np_mon_step last = steps[ns - 1];
            rd->steps = (int64_t)ns;
            rd->n_rec = last.records;
            rd->n_keys = last.keys;
            if (last.records < 0 || last.keys < 0 || last.keys > 1 << 24 ||
                (hsize_t)last.records > extent(f, "records") || (hsize_t)last.keys > extent(f, "keys"))
                st = np_error_set(err, NP_ERR_FORMAT, path, "steps",
                                  "/steps names more rows than /records or /keys hold");
            if (!st) {
                rd->keys = read_rows(f, "keys", tk, sizeof *rd->keys, (hsize_t)rd->n_keys);
                rd->rec = read_rows(f, "records", tr, sizeof *rd->rec, (hsize_t)rd->n_rec);
                if (!rd->keys || !rd->rec)
                    st = np_error_set(err, NP_ERR_FORMAT, path, NULL, "cannot read /keys or /records");
            }
            for (int64_t i = 0; !st && i < rd->n_rec; i++)
                if (rd->rec[i].key < 0 || rd->rec[i].key >= rd->n_keys)
                    st = np_error_set(err, NP_ERR_FORMAT, path, "records",
                                      "record %lld names key %d of %lld", (long long)i,
                                      (int)rd->rec[i].key, (long long)rd->n_keys);
        }
        free(steps);
    } H5E_END_TRY;
    H5Tclose(ts);
    H5Tclose(tk);
    H5Tclose(tr);
    H5Fclose(f);
    for (int64_t i = 0; i < rd->n_keys; i++) {
        rd->keys[i].name[NP_MONITOR_NAME_LEN - 1] = 0;
        rd->keys[i].metric[NP_MONITOR_METRIC_LEN - 1] = 0;
    }
    return st;
}

/* ==== rules ============================================================== */

typedef struct key_hist {
    int64_t n;        /* finite norms seen */
    double mean;      /* their running mean: exponential, weight NP_MON_EMA on the past */
    double *win;      /* spike window (loss, grad_norm) */
    int w_n, w_pos;
} key_hist;

typedef struct anomalies {
    np_monitor_anomaly *a;
    size_t n, cap;
} anomalies;

static int push(anomalies *A, const rank_data *rd, const np_mon_record *r, const char *rule,
                const char *stat, double value, double ref)
{
    if (np_grow((void **)&A->a, &A->cap, A->n + 1, sizeof *A->a))
        return -1;
    np_monitor_anomaly *a = &A->a[A->n++];
    memset(a, 0, sizeof *a);
    a->step = r->step;
    a->rank = rd->rank;
    a->seq = r->seq;
    a->stage = rd->stage;
    snprintf(a->name, sizeof a->name, "%s", rd->keys[r->key].name);
    snprintf(a->metric, sizeof a->metric, "%s", rd->keys[r->key].metric);
    a->rule = rule;
    a->stat = stat;
    a->value = value;
    a->ref = ref;
    return 0;
}

static int is_scalar_metric(const char *m)
{
    return !strcmp(m, "loss") || !strcmp(m, "grad_norm") || !strcmp(m, "loss_scale") ||
           !strcmp(m, "update_ratio");
}

/* The norms the turbulence rule watches: activations and gradients (the
 * weights drift slowly, Adam's moments grow from zero by design). */
static int turbulent_metric(const char *m)
{
    return !strcmp(m, "activation") || !strcmp(m, "activation_grad") || !strcmp(m, "grad_pre") ||
           !strcmp(m, "grad") || !strcmp(m, "comm_in") || !strcmp(m, "comm_out");
}

/* The rules' history over the records fed so far, per key (the writer's
 * online check and the reader share it: the same records in the same
 * order give the same anomalies). */
struct np_mon_rules_state {
    key_hist *h;
    int64_t cap;
};

/* The rules live here, with the code that applies them (the writer, monitor.c,
 * takes its defaults from here too: no call circle between the two). */
void np_monitor_rules_default(np_monitor_rules *r)
{
    memset(r, 0, sizeof *r);
    r->nan = 1;
    r->turbulence = 49.0;
    r->turbulence_warmup = 10;
    r->spike_factor = 10.0;
    r->spike_window = 10;
    r->ratio_min = 0.0;
    r->ratio_max = 0.0; /* off: Adam's ratio follows the learning rate */
}

np_mon_rules_state *np_mon_rules_state_new(void)
{
    return calloc(1, sizeof(np_mon_rules_state));
}

void np_mon_rules_state_free(np_mon_rules_state *s)
{
    if (!s)
        return;
    for (int64_t i = 0; i < s->cap; i++)
        free(s->h[i].win);
    free(s->h);
    free(s);
}

int np_mon_rules_feed(np_mon_rules_state *S, const np_monitor_rules *ru, const np_mon_record *r,
                      const char *metric, np_mon_hit *hit)
{
    hit->rule = NULL;
    if (r->key < 0)
        return -1;
    if (r->key >= S->cap) {
        int64_t nc = S->cap ? S->cap : 64;
        while (nc <= r->key)
            nc *= 2;
        key_hist *x = realloc(S->h, (size_t)nc * sizeof *x);
        if (!x)
            return -1;
        memset(x + S->cap, 0, (size_t)(nc - S->cap) * sizeof *x);
        S->h = x;
        S->cap = nc;
    }
    key_hist *k = &S->h[r->key];
    int scalar = is_scalar_metric(metric);
    double v = scalar ? r->mean : r->norm;
    int flagged = 0;
    if (ru->nan && !strcmp(metric, "grad_norm") && isnan(v) && r->nans) {
        /* a step the loss scaler skipped records NaN: the scaler's own business */
    } else if (ru->nan && (r->nans || r->infs) && strcmp(metric, "loss_scale") != 0) {
        *hit = scalar ? (np_mon_hit){"nan", "value", v, NAN}
                      : (np_mon_hit){"nan", r->nans ? "nans" : "infs",
                                     (double)(r->nans ? r->nans : r->infs), (double)r->numel};
        flagged = 1;
    }
    if (!flagged && turbulent_metric(metric) && ru->turbulence > 0 &&
        k->n >= ru->turbulence_warmup && isfinite(v) && v > (1.0 + ru->turbulence) * k->mean) {
        *hit = (np_mon_hit){"turbulence", "norm", v, k->mean};
        flagged = 1;
    }
    if (!flagged && ru->spike_factor > 0 && (!strcmp(metric, "loss") || !strcmp(metric, "grad_norm")) &&
        isfinite(v)) {
        if (!k->win && !(k->win = calloc((size_t)ru->spike_window, sizeof *k->win)))
            return -1;
        int need = ru->spike_window < 3 ? ru->spike_window : 3;
        if (k->w_n >= need) {
            double s = 0.0;
            for (int j = 0; j < k->w_n; j++)
                s += k->win[j];
            double mean = s / k->w_n;
            if (v > ru->spike_factor * mean) {
                *hit = (np_mon_hit){"spike", "value", v, mean};
                flagged = 1;
            }
        }
        k->win[k->w_pos] = v;
        k->w_pos = (k->w_pos + 1) % ru->spike_window;
        if (k->w_n < ru->spike_window)
            k->w_n++;
    }
    if (!flagged && ru->ratio_max > 0 && !strcmp(metric, "update_ratio") && isfinite(v) &&
        (v < ru->ratio_min || v > ru->ratio_max))
        *hit = (np_mon_hit){"update_ratio", "value", v, ru->ratio_max};
    if (!scalar && isfinite(v)) {
        k->mean = k->n ? NP_MON_EMA * k->mean + (1.0 - NP_MON_EMA) * v : v;
        k->n++;
    }
    return 0;
}

static int apply_rules(anomalies *A, const rank_data *rd, const np_monitor_rules *ru)
{
    np_mon_rules_state *S = np_mon_rules_state_new();
    if (!S)
        return -1;
    int rc = 0;
    for (int64_t i = 0; i < rd->n_rec && !rc; i++) {
        const np_mon_record *r = &rd->rec[i];
        np_mon_hit hit;
        rc = np_mon_rules_feed(S, ru, r, rd->keys[r->key].metric, &hit);
        if (!rc && hit.rule)
            rc = push(A, rd, r, hit.rule, hit.stat, hit.value, hit.ref);
    }
    np_mon_rules_state_free(S);
    return rc;
}

/* a record's phase in a pipeline's step: the forward (activations) runs
 * stage 0 first, the backward (the gradients at the outputs) the last
 * stage first, the rest (parameter gradients, optimizer, loss) after */
static int pp_phase(const char *metric, const char *name)
{
    if (!strncmp(metric, "comm_", 5)) {
        /* a collective: its call's direction (a pipeline's send and recv, TP's all-reduces) */
        size_t n = strlen(name);
        return n > 9 && !strcmp(name + n - 9, ".backward") ? 1 : 0;
    }
    return !strcmp(metric, "activation") ? 0 : !strcmp(metric, "activation_grad") ? 1 : 2;
}

static int cmp_anomaly(const void *pa, const void *pb)
{
    const np_monitor_anomaly *a = pa, *b = pb;
    if (a->step != b->step)
        return a->step < b->step ? -1 : 1;
    /* pipeline stages count their calls each from 0: a stage's records
     * come after those of the stages that feed it (its forward input, its
     * backward's output gradient), whatever their call numbers */
    if (a->stage >= 0 && b->stage >= 0) {
        /* the key (phase, stage in the phase's order, seq, rank): within
         * a stage the phases follow its call order already */
        int ph_a = pp_phase(a->metric, a->name), ph_b = pp_phase(b->metric, b->name);
        if (ph_a != ph_b)
            return ph_a < ph_b ? -1 : 1;
        if (ph_a < 2 && a->stage != b->stage)
            return (a->stage < b->stage) == (ph_a == 0) ? -1 : 1;
    }
    if (a->seq != b->seq)
        return a->seq < b->seq ? -1 : 1;
    return (a->rank > b->rank) - (a->rank < b->rank);
}

np_status np_monitor_analyze(np_monitor_result *out, const char *dir,
                             const np_monitor_rules *rules, np_error *err)
{
    memset(out, 0, sizeof *out);
    np_monitor_rules dflt;
    if (!rules) {
        np_monitor_rules_default(&dflt);
        rules = &dflt;
    }
    if (rules->spike_factor > 0 && rules->spike_window < 1)
        return np_error_set(err, NP_ERR_ARG, NULL, "spike_window", "expected >= 1");
    DIR *d = opendir(dir);
    if (!d)
        return np_error_set(err, NP_ERR_IO, dir, NULL, "cannot open the folder");
    anomalies A = {0};
    np_status st = NP_OK;
    struct dirent *e;
    while (!st && (e = readdir(d))) {
        int r = -1, len = 0;
        if (sscanf(e->d_name, "monitor_rank%d.h5%n", &r, &len) != 1 || r < 0 ||
            e->d_name[len] != 0)
            continue;
        char path[4608];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        rank_data rd;
        st = np_mon_read_rank(&rd, path, err);
        if (!st) {
            out->ranks++;
            out->records += rd.n_rec;
            if (rd.steps > out->steps)
                out->steps = rd.steps;
            if (apply_rules(&A, &rd, rules))
                st = np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
        }
        free(rd.keys);
        free(rd.rec);
    }
    closedir(d);
    if (!st && !out->ranks)
        st = np_error_set(err, NP_ERR_NOTFOUND, dir, NULL,
                          "no monitor_rank*.h5 file in the folder (is it the monitor's dump_path?)");
    if (st) {
        free(A.a);
        return st;
    }
    if (A.n)
        qsort(A.a, A.n, sizeof *A.a, cmp_anomaly);
    out->anomalies = A.a;
    out->n = A.n;
    return NP_OK;
}

/* key of (name, metric) in rd, added when absent; -1: out of memory */
static int64_t key_of(rank_data *rd, const np_mon_key *k, int64_t *cap)
{
    for (int64_t i = 0; i < rd->n_keys; i++)
        if (!strcmp(rd->keys[i].name, k->name) && !strcmp(rd->keys[i].metric, k->metric))
            return i;
    if (rd->n_keys == *cap) {
        int64_t nc = *cap ? *cap * 2 : 64;
        np_mon_key *x = realloc(rd->keys, (size_t)nc * sizeof *x);
        if (!x)
            return -1;
        rd->keys = x;
        *cap = nc;
    }
    rd->keys[rd->n_keys] = *k;
    return rd->n_keys++;
}

np_status np_monitor_analyze_rerun(np_monitor_result *out, const char *dir, int rank,
                                   int64_t step, const char *rerun_dir,
                                   const np_monitor_rules *rules, np_error *err)
{
    memset(out, 0, sizeof *out);
    np_monitor_rules dflt;
    if (!rules) {
        np_monitor_rules_default(&dflt);
        rules = &dflt;
    }
    char path[4608];
    rank_data h = {0}, r = {0};
    snprintf(path, sizeof path, "%s/monitor_rank%d.h5", dir, rank);
    np_status st = np_mon_read_rank(&h, path, err);
    snprintf(path, sizeof path, "%s/monitor_rank%d.h5", rerun_dir, rank);
    if (!st)
        st = np_mon_read_rank(&r, path, err);
    anomalies A = {0};
    if (!st) {
        int64_t keep = 0, cap = h.n_keys;
        while (keep < h.n_rec && h.rec[keep].step < step)
            keep++;
        np_mon_record *all = realloc(h.rec, (size_t)(keep + r.n_rec + 1) * sizeof *all);
        if (!all) {
            st = np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
        } else {
            h.rec = all;
            h.n_rec = keep;
            for (int64_t i = 0; i < r.n_rec && !st; i++) {
                if (r.rec[i].step < step)
                    continue;
                int64_t k = key_of(&h, &r.keys[r.rec[i].key], &cap);
                if (k < 0)
                    st = np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
                h.rec[h.n_rec] = r.rec[i];
                h.rec[h.n_rec++].key = (int32_t)k;
            }
        }
        h.rank = rank;
        if (!st && apply_rules(&A, &h, rules))
            st = np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
        out->ranks = 1;
        out->records = r.n_rec;
        out->steps = r.steps;
    }
    free(h.keys);
    free(h.rec);
    free(r.keys);
    free(r.rec);
    if (st) {
        free(A.a);
        return st;
    }
    size_t n = 0;
    for (size_t i = 0; i < A.n; i++)
        if (A.a[i].step >= step)
            A.a[n++] = A.a[i];
    if (n)
        qsort(A.a, n, sizeof *A.a, cmp_anomaly);
    out->anomalies = A.a;
    out->n = n;
    return NP_OK;
}

void np_monitor_result_free(np_monitor_result *r)
{
    if (!r)
        return;
    free(r->anomalies);
    memset(r, 0, sizeof *r);
}
