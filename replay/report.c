/* replay/report.c - the reports of `nprobe replay` (include/nprobe/replay.h):
 * csv, json and xlsx with the same columns (docs/COMPARE.md, "nprobe
 * replay"): one row per compared output or input gradient, one row per call
 * not recomputed. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>
#include <xlsxwriter.h>

#include "nprobe/replay.h"

static const char *const headers[] = {
    "Call", "Pass", "Leaf", "Dtype", "Numel", "Isolated Error (u)", "Budget (u)", "Status",
    "MaxAbsErr", "RelL2Err", "Worst Index", "Worst Dumped", "Worst Exact", "Reason",
};
#define N_COLS ((int)(sizeof headers / sizeof headers[0]))

typedef struct rp_row {
    const np_replay_call *c;
    const np_replay_leaf *l; /* NULL for a call not recomputed */
} rp_row;

/* Calls each leaf row (or the call's one row) in order; stops at a non-zero return. */
static int each_row(const np_replay_result *r, int (*fn)(const rp_row *row, void *u), void *u)
{
    for (size_t i = 0; i < r->n_calls; i++) {
        const np_replay_call *c = &r->calls[i];
        rp_row row = {c, NULL};
        if (c->n_leaves == 0 && fn(&row, u))
            return -1;
        for (int j = 0; j < c->n_leaves; j++) {
            row.l = &c->leaves[j];
            if (fn(&row, u))
                return -1;
        }
    }
    return 0;
}

static const char *row_status(const rp_row *row)
{
    if (!row->l)
        return np_replay_status_name(row->c->status);
    return row->l->err_units > row->l->budget ? "exceeds" : "pass";
}

/* ---- csv ---------------------------------------------------------------------- */

static void csv_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void csv_num(FILE *f, double x)
{
    if (isnan(x))
        fputs("N/A", f);
    else
        fprintf(f, "%.17g", x);
}

static int csv_row(const rp_row *row, void *u)
{
    FILE *f = u;
    const np_replay_leaf *l = row->l;
    csv_str(f, row->c->name);
    fprintf(f, ",%s,", row->c->backward ? "backward" : "forward");
    csv_str(f, l ? l->name : "");
    fprintf(f, ",%s,", l ? l->dtype : "");
    if (l) {
        fprintf(f, "%lld,", (long long)l->numel);
        csv_num(f, l->err_units);
        fputc(',', f);
        csv_num(f, l->budget);
    } else {
        fputs(",N/A,N/A", f);
    }
    fprintf(f, ",%s,", row_status(row));
    if (l) {
        csv_num(f, l->max_abs);
        fputc(',', f);
        csv_num(f, l->rel_l2);
        fprintf(f, ",%lld,", (long long)l->worst);
        csv_num(f, l->worst >= 0 ? l->worst_dumped : NAN);
        fputc(',', f);
        csv_num(f, l->worst >= 0 ? l->worst_exact : NAN);
    } else {
        fputs("N/A,N/A,N/A,N/A,N/A", f);
    }
    fputc(',', f);
    csv_str(f, l && strcmp(row_status(row), "pass") == 0 ? "" : row->c->reason);
    fputc('\n', f);
    return ferror(f) ? -1 : 0;
}

np_status np_replay_write_csv(const np_replay_result *r, const char *path, np_error *err)
{
    FILE *f = fopen(path, "wx");
    if (!f)
        return np_error_set(err, NP_ERR_IO, path, NULL, "cannot create the report");
    for (int i = 0; i < N_COLS; i++)
        fprintf(f, "%s%s", i ? "," : "", headers[i]);
    fputc('\n', f);
    int bad = each_row(r, csv_row, f);
    if (fclose(f) != 0 || bad)
        return np_error_set(err, NP_ERR_IO, path, NULL, "writing the report failed");
    return NP_OK;
}

/* ---- json --------------------------------------------------------------------- */

static json_t *jnum(double x)
{
    return isfinite(x) ? json_real(x) : json_null();
}

static int json_row(const rp_row *row, void *u)
{
    const np_replay_leaf *l = row->l;
    json_t *a = json_array();
    json_array_append_new(a, json_string(row->c->name));
    json_array_append_new(a, json_string(row->c->backward ? "backward" : "forward"));
    json_array_append_new(a, json_string(l ? l->name : ""));
    json_array_append_new(a, json_string(l ? l->dtype : ""));
    json_array_append_new(a, l ? json_integer(l->numel) : json_null());
    json_array_append_new(a, l ? jnum(l->err_units) : json_null());
    json_array_append_new(a, l ? jnum(l->budget) : json_null());
    json_array_append_new(a, json_string(row_status(row)));
    json_array_append_new(a, l ? jnum(l->max_abs) : json_null());
    json_array_append_new(a, l ? jnum(l->rel_l2) : json_null());
    json_array_append_new(a, l ? json_integer(l->worst) : json_null());
    json_array_append_new(a, l && l->worst >= 0 ? jnum(l->worst_dumped) : json_null());
    json_array_append_new(a, l && l->worst >= 0 ? jnum(l->worst_exact) : json_null());
    json_array_append_new(a, json_string(l && strcmp(row_status(row), "pass") == 0 ? ""
                                                                                  : row->c->reason));
    return json_array_append_new(u, a);
}

np_status np_replay_write_json(const np_replay_result *r, const char *path, np_error *err)
{
    json_t *root = json_object(), *h = json_array(), *rows = json_array();
    for (int i = 0; i < N_COLS; i++)
        json_array_append_new(h, json_string(headers[i]));
    each_row(r, json_row, rows);
    json_t *sum = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:f}", "input", r->path,
                            "task", r->task, "device", r->device, "precision", r->precision, "step",
                            (json_int_t)r->step, "rank", (json_int_t)r->rank, "pass",
                            (json_int_t)r->count[NP_REPLAY_PASS], "exceeds",
                            (json_int_t)r->count[NP_REPLAY_EXCEEDS], "not_recomputable",
                            (json_int_t)r->count[NP_REPLAY_SKIPPED], "seconds", r->seconds);
    json_object_set_new(root, "summary", sum);
    json_object_set_new(root, "headers", h);
    json_object_set_new(root, "rows", rows);
    FILE *f = fopen(path, "wx");
    int bad = !f || json_dumpf(root, f, JSON_INDENT(1) | JSON_REAL_PRECISION(17)) != 0;
    if (f && fclose(f) != 0)
        bad = 1;
    json_decref(root);
    return bad ? np_error_set(err, NP_ERR_IO, path, NULL, "cannot write the report") : NP_OK;
}

/* ---- xlsx --------------------------------------------------------------------- */

typedef struct xl {
    lxw_worksheet *ws;
    lxw_format *red;
    lxw_row_t row;
} xl;

static void xl_num(lxw_worksheet *ws, lxw_row_t r, lxw_col_t c, double x, lxw_format *f)
{
    if (isfinite(x))
        worksheet_write_number(ws, r, c, x, f);
    else
        worksheet_write_string(ws, r, c, isnan(x) ? "N/A" : (x > 0 ? "inf" : "-inf"), f);
}

static int xl_row(const rp_row *row, void *u)
{
    xl *x = u;
    const np_replay_leaf *l = row->l;
    lxw_row_t r = ++x->row;
    const char *st = row_status(row);
    lxw_format *f = strcmp(st, "exceeds") == 0 ? x->red : NULL;
    worksheet_write_string(x->ws, r, 0, row->c->name, f);
    worksheet_write_string(x->ws, r, 1, row->c->backward ? "backward" : "forward", f);
    worksheet_write_string(x->ws, r, 2, l ? l->name : "", f);
    worksheet_write_string(x->ws, r, 3, l ? l->dtype : "", f);
    xl_num(x->ws, r, 4, l ? (double)l->numel : NAN, f);
    xl_num(x->ws, r, 5, l ? l->err_units : NAN, f);
    xl_num(x->ws, r, 6, l ? l->budget : NAN, f);
    worksheet_write_string(x->ws, r, 7, st, f);
    xl_num(x->ws, r, 8, l ? l->max_abs : NAN, f);
    xl_num(x->ws, r, 9, l ? l->rel_l2 : NAN, f);
    xl_num(x->ws, r, 10, l ? (double)l->worst : NAN, f);
    xl_num(x->ws, r, 11, l && l->worst >= 0 ? l->worst_dumped : NAN, f);
    xl_num(x->ws, r, 12, l && l->worst >= 0 ? l->worst_exact : NAN, f);
    worksheet_write_string(x->ws, r, 13, l && strcmp(st, "pass") == 0 ? "" : row->c->reason, f);
    return 0;
}

static void xl_summary(lxw_workbook *wb, const np_replay_result *r, lxw_format *bold)
{
    lxw_worksheet *s = workbook_add_worksheet(wb, "summary");
    const char *keys[] = {"input", "task", "device", "precision"};
    const char *vals[] = {r->path, r->task, r->device, r->precision};
    for (int i = 0; i < 4; i++) {
        worksheet_write_string(s, (lxw_row_t)i, 0, keys[i], bold);
        worksheet_write_string(s, (lxw_row_t)i, 1, vals[i], NULL);
    }
    const char *ck[] = {"step", "rank", "pass", "exceeds", "not recomputable", "seconds"};
    double cv[] = {(double)r->step, (double)r->rank, (double)r->count[NP_REPLAY_PASS],
                   (double)r->count[NP_REPLAY_EXCEEDS], (double)r->count[NP_REPLAY_SKIPPED],
                   r->seconds};
    for (int i = 0; i < 6; i++) {
        worksheet_write_string(s, (lxw_row_t)(4 + i), 0, ck[i], bold);
        worksheet_write_number(s, (lxw_row_t)(4 + i), 1, cv[i], NULL);
    }
    worksheet_set_column(s, 0, 0, 18, NULL);
    worksheet_set_column(s, 1, 1, 60, NULL);
}

np_status np_replay_write_xlsx(const np_replay_result *r, const char *path, np_error *err)
{
    FILE *probe = fopen(path, "wx"); /* refuse an existing file, as csv and json do */
    if (!probe)
        return np_error_set(err, NP_ERR_IO, path, NULL, "cannot create the report");
    fclose(probe);
    lxw_workbook *wb = workbook_new(path);
    if (!wb)
        return np_error_set(err, NP_ERR_IO, path, NULL, "cannot create the report");
    lxw_format *bold = workbook_add_format(wb);
    format_set_bold(bold);
    xl x = {NULL, workbook_add_format(wb), 0};
    format_set_bg_color(x.red, 0xFFC7CE);
    xl_summary(wb, r, bold);
    x.ws = workbook_add_worksheet(wb, "rows");
    for (int i = 0; i < N_COLS; i++)
        worksheet_write_string(x.ws, 0, (lxw_col_t)i, headers[i], bold);
    worksheet_freeze_panes(x.ws, 1, 0);
    worksheet_set_column(x.ws, 0, 0, 44, NULL);
    worksheet_set_column(x.ws, 2, 2, 52, NULL);
    worksheet_set_column(x.ws, 13, 13, 60, NULL);
    each_row(r, xl_row, &x);
    worksheet_autofilter(x.ws, 0, 0, x.row, N_COLS - 1);
    lxw_error e = workbook_close(wb);
    if (e != LXW_NO_ERROR)
        return np_error_set(err, NP_ERR_IO, path, NULL, "writing the report failed: %s",
                            lxw_strerror(e));
    return NP_OK;
}
