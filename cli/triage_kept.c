/* cli/triage_kept.c - nprobe triage's op from the calls the monitor kept
 * at the anomaly (monitor.anomaly_calls, docs/MONITOR.md "Dump on
 * anomaly"): the float64 replay of each kept call from its own inputs
 * names the call whose output is not what its inputs give, whatever the
 * class (a code defect reproduces in fp32 too, so there is no clean rerun
 * to compare with; the replay needs none). */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd.h"
#include "nprobe/format.h"
#include "nprobe/replay.h"

np_call_rec *np_cli_dump_calls(const char *path, size_t *n_out)
{
    np_call_rec *rows = NULL;
    *n_out = 0;
    H5E_BEGIN_TRY {
        hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
        hid_t d = f >= 0 ? H5Dopen2(f, "calls", H5P_DEFAULT) : -1;
        hid_t t = (hid_t)np_fmt_call_h5type();
        hid_t sp = d >= 0 ? H5Dget_space(d) : -1;
        hssize_t n = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
        rows = n > 0 ? calloc((size_t)n, sizeof *rows) : NULL;
        if (rows && H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows) >= 0) {
            *n_out = (size_t)n;
        } else {
            free(rows);
            rows = NULL;
        }
        if (sp >= 0) H5Sclose(sp);
        if (t >= 0) H5Tclose(t);
        if (d >= 0) H5Dclose(d);
        if (f >= 0) H5Fclose(f);
    } H5E_END_TRY;
    return rows;
}

/* "Module.h.0.attn.c_attn.Linear.forward.0" -> "h.0.attn.c_attn" ("" at top level). */
static void module_of(char *out, size_t cap, const np_call_rec *rows, size_t n, const char *call)
{
    out[0] = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(rows[i].call, call))
            continue;
        const char *p = rows[i].parent;
        snprintf(out, cap, "%s", strncmp(p, "Module.", 7) ? p : p + 7);
        for (int drop = 0; drop < 3; drop++) {
            char *dot = strrchr(out, '.');
            if (!dot)
                break;
            *dot = 0;
        }
        return;
    }
}

static int inside(const char *m, const char *mod)
{
    size_t k = strlen(mod);
    return !strncmp(m, mod, k) && (m[k] == 0 || m[k] == '.');
}

int np_cli_triage_kept_op(const char *dir, int64_t step, int rank, const char *mod)
{
    char path[4600];
    snprintf(path, sizeof path, "%s/anomaly_calls/step%lld/rank%d/dump.h5", dir, (long long)step,
             rank);
    if (access(path, R_OK))
        return -1;
    np_replay_result *r = NULL;
    np_error err;
    np_error_clear(&err);
    if (np_replay_file(&r, path, NULL, &err)) {
        np_cli_report(&err);
        return -1;
    }
    size_t n_rows = 0;
    np_call_rec *rows = np_cli_dump_calls(path, &n_rows);
    /* the first exceeding call inside the anomalous module, else the first kept */
    const np_replay_call *pick = NULL, *any = NULL;
    char where[NP_FMT_NAME_LEN], pick_where[NP_FMT_NAME_LEN] = "";
    printf("kept calls: %zu in %s, %zu exceed their error budget in the float64 replay",
           r->n_calls, path, r->count[NP_REPLAY_EXCEEDS]);
    int first = 1;
    for (size_t i = 0; i < r->n_calls; i++) {
        const np_replay_call *c = &r->calls[i];
        if (c->status != NP_REPLAY_EXCEEDS)
            continue;
        module_of(where, sizeof where, rows, n_rows, c->name);
        printf("%s%s (in %s, %.3g x)", first ? ": " : ", ", c->name, where[0] ? where : "top",
               c->ratio);
        first = 0;
        if (!any)
            any = c;
        if (!pick && inside(where, mod)) {
            pick = c;
            snprintf(pick_where, sizeof pick_where, "%s", where);
        }
    }
    printf("\n");
    int rc = -1;
    if (!pick && any) {
        pick = any;
        module_of(pick_where, sizeof pick_where, rows, n_rows, any->name);
    }
    if (pick) {
        printf("op: %s (in %s; the replay of the calls the monitor kept at the anomaly: %.3g x its "
               "error budget)\n", pick->name, pick_where[0] ? pick_where : "top", pick->ratio);
        rc = 0;
    }
    free(rows);
    np_replay_result_free(r);
    return rc;
}
