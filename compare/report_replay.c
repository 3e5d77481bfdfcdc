/* compare/report_replay.c - the reports of `nprobe replay`
 * (include/internal/nprobe/replay.h), written by compare's report writers (the
 * generic tables of report.c and report_xlsx.c: files made through
 * common/outfile.c, numbers formatted as compare's): one row per compared
 * output or input gradient, one row per call not recomputed (the columns in
 * docs/COMPARE.md, "Replay and isolated error"). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nprobe/replay.h"
#include "report_internal.h"

static const char *const headers[] = {
    "Call", "Pass", "Leaf", "Dtype", "Numel", "Isolated Error (u)", "Budget (u)", "Status",
    "MaxAbsErr", "RelL2Err", "Worst Index", "Worst Dumped", "Worst Exact", "Reason",
};
#define N_COLS ((int)(sizeof headers / sizeof headers[0]))

/* Row i of the report: call c, leaf l (-1: the call's one row, not recomputed). */
typedef struct rp_ref {
    const np_replay_call *c;
    int l;
} rp_ref;

typedef struct rp_rows {
    const np_replay_result *r;
    rp_ref *ref;
    size_t n;
} rp_rows;

static int index_rows(rp_rows *rows, const np_replay_result *r)
{
    size_t n = 0;
    for (size_t i = 0; i < r->n_calls; i++)
        n += r->calls[i].n_leaves ? (size_t)r->calls[i].n_leaves : 1;
    rows->r = r;
    rows->n = 0;
    rows->ref = malloc((n + 1) * sizeof *rows->ref);
    if (!rows->ref)
        return -1;
    for (size_t i = 0; i < r->n_calls; i++) {
        const np_replay_call *c = &r->calls[i];
        if (c->n_leaves == 0)
            rows->ref[rows->n++] = (rp_ref){c, -1};
        for (int j = 0; j < c->n_leaves; j++)
            rows->ref[rows->n++] = (rp_ref){c, j};
    }
    return 0;
}

static cmp_cell num(double x)
{
    return (cmp_cell){isnan(x) ? CELL_NA : CELL_NUM, x, NULL};
}

static cmp_cell str(const char *s)
{
    return (cmp_cell){CELL_STR, 0, s ? s : ""};
}

static int row_cells(cmp_cells *o, size_t i, const void *user)
{
    const rp_rows *rows = user;
    const np_replay_call *c = rows->ref[i].c;
    const np_replay_leaf *l = rows->ref[i].l >= 0 ? &c->leaves[rows->ref[i].l] : NULL;
    /* a leaf row exceeds on its own error, or by the call's defect signature (its first leaf) */
    int exceeds = l ? l->err_units > l->budget || (c->signature && rows->ref[i].l == 0)
                    : c->status == NP_REPLAY_EXCEEDS;
    const char *st = l ? (exceeds ? "exceeds" : "pass") : np_replay_status_name(c->status);
    int n = 0;
    o->c[n++] = str(c->name);
    o->c[n++] = str(c->backward ? "backward" : "forward");
    o->c[n++] = str(l ? l->name : "");
    o->c[n++] = str(l ? l->dtype : "");
    o->c[n++] = num(l ? (double)l->numel : NAN);
    o->c[n++] = num(l ? l->err_units : NAN);
    o->c[n++] = num(l ? l->budget : NAN);
    o->c[n++] = str(st);
    o->c[n++] = num(l ? l->max_abs : NAN);
    o->c[n++] = num(l ? l->rel_l2 : NAN);
    o->c[n++] = num(l ? (double)l->worst : NAN);
    o->c[n++] = num(l && l->worst >= 0 ? l->worst_dumped : NAN);
    o->c[n++] = num(l && l->worst >= 0 ? l->worst_exact : NAN);
    o->c[n++] = str(l && !exceeds ? "" : c->reason);
    o->n = n;
    return exceeds ? 1 : 0;
}

typedef np_status (*table_writer)(const cmp_table *t, const char *path, np_error *err);

static np_status write_with(table_writer w, const np_replay_result *r, const char *path,
                            np_error *err)
{
    rp_rows rows;
    if (index_rows(&rows, r) != 0)
        return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    static const char *const keys[] = {"input", "task", "device", "precision", "step", "rank",
                                       "pass", "exceeds", "not_recomputable", "seconds"};
    cmp_cell vals[] = {str(r->path), str(r->task), str(r->device), str(r->precision),
                       num((double)r->step), num((double)r->rank),
                       num((double)r->count[NP_REPLAY_PASS]),
                       num((double)r->count[NP_REPLAY_EXCEEDS]),
                       num((double)r->count[NP_REPLAY_SKIPPED]), num(r->seconds)};
    cmp_table t = {headers, N_COLS, rows.n, row_cells, &rows, keys, vals,
                   (int)(sizeof keys / sizeof keys[0])};
    np_status st = w(&t, path, err);
    free(rows.ref);
    return st;
}

np_status np_replay_write_csv(const np_replay_result *r, const char *path, np_error *err)
{
    return write_with(cmp_table_write_csv, r, path, err);
}

np_status np_replay_write_json(const np_replay_result *r, const char *path, np_error *err)
{
    return write_with(cmp_table_write_json, r, path, err);
}

np_status np_replay_write_xlsx(const np_replay_result *r, const char *path, np_error *err)
{
    return write_with(cmp_table_write_xlsx, r, path, err);
}
