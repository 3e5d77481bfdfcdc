/* compare/report_xlsx.c - the xlsx report (libxlsxwriter, constant-memory
 * mode): a "summary" sheet (inputs, counts, first culprit and the others,
 * advice, issues), the rows in msprobe's columns then nprobe's, split over
 * "rows", "rows_2", ... before Excel's row limit, red rows for errors and
 * yellow for warnings, frozen header and autofilter; and a "calls" sheet with
 * the per-call error along execution order and its chart. libxlsxwriter
 * writes the rows and calls sheets with their header row only; their data
 * rows are spliced in after it closed the workbook (xlsx_sheet.c: built and
 * deflated in parallel, ~10x faster). The file is written under a temporary
 * name and renamed when complete. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xlsxwriter.h>

#include "internal.h"
#include "report_internal.h"
#include "xlsx_sheet.h"

#define RED 0xFF0000    /* msprobe's highlight colours */
#define YELLOW 0xFFFF00

typedef struct fmts {
    lxw_format *bold, *red, *yellow, *plain, *header, *wrap;
} fmts;

/* The formats both workbooks use, added in this order (bold, header, red,
 * yellow: the xf indices, hence styles.xml, depend on it); plain and wrap
 * are left NULL. */
static void add_formats(fmts *F, lxw_workbook *wb)
{
    F->bold = workbook_add_format(wb);
    format_set_bold(F->bold);
    F->header = workbook_add_format(wb);
    format_set_bold(F->header);
    format_set_bottom(F->header, LXW_BORDER_THIN);
    F->red = workbook_add_format(wb);
    format_set_pattern(F->red, LXW_PATTERN_SOLID);
    format_set_bg_color(F->red, RED);
    F->yellow = workbook_add_format(wb);
    format_set_pattern(F->yellow, LXW_PATTERN_SOLID);
    format_set_bg_color(F->yellow, YELLOW);
    F->plain = F->wrap = NULL;
}

/* A string cell of user data (names, callsites, reasons quoting them): a
 * text a spreadsheet would take for a formula gets a leading '. */
static void put_str(lxw_worksheet *ws, lxw_row_t row, lxw_col_t col, const char *s, lxw_format *f)
{
    if (!s || !np_cell_is_formula_like(s)) {
        worksheet_write_string(ws, row, col, s ? s : "", f);
        return;
    }
    size_t n = strlen(s);
    char *t = malloc(n + 2);
    if (!t)
        return;
    t[0] = '\'';
    memcpy(t + 1, s, n + 1);
    worksheet_write_string(ws, row, col, t, f);
    free(t);
}

static void put_cell(lxw_worksheet *ws, lxw_row_t row, lxw_col_t col, const cmp_cell *c, lxw_format *f)
{
    if (c->kind == CELL_NUM && isfinite(c->num))
        worksheet_write_number(ws, row, col, c->num, f);
    else if (c->kind == CELL_NUM)
        worksheet_write_string(ws, row, col, isnan(c->num) ? "N/A" : c->num > 0 ? "inf" : "-inf", f);
    else
        put_str(ws, row, col, c->kind == CELL_STR ? c->str : "N/A", f);
}

static double col_width(const char *h)
{
    static const struct { const char *name; double w; } w[] = {
        {"NPU Name", 60}, {"Bench Name", 60}, {"Err_message", 40}, {"Reason", 50},
        {"Module", 40}, {"NPU Tensor Shape", 18}, {"Bench Tensor Shape", 18}};
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
        if (!strcmp(h, w[i].name))
            return w[i].w;
    double n = (double)strlen(h) + 2;
    return n < 12 ? 12 : n;
}

/* The xf indices of the fills, for the rows written by xlsx_sheet.c. */
typedef struct row_styles {
    const np_cmp_pair *p;
    int red, yellow;
} row_styles;

static int rows_row(cmp_cells *cells, size_t i, const void *user)
{
    const row_styles *S = user;
    const np_cmp_row *r = &S->p->rows[i];
    cmp_row_cells(cells, S->p, r);
    return r->verdict == NP_VERDICT_ERROR ? S->red : r->verdict == NP_VERDICT_WARNING ? S->yellow : 0;
}

/* The rows sheets with their header row; their data rows are described in
 * out[0..] (returns how many) for cmp_xlsx_fill_sheets. `first_number` is
 * the worksheet number of the first of them. */
static int write_rows_sheets(cmp_xlsx_sheet *out, lxw_workbook *wb, const np_cmp_pair *p,
                             long per_sheet, const fmts *F, int first_number, const row_styles *S)
{
    int nh;
    const char *const *h = np_cmp_headers(p->mode, &nh);
    size_t n = p->n_rows, done = 0;
    int sheet = 0;
    do {
        char name[32];
        if (sheet == 0)
            snprintf(name, sizeof name, "rows");
        else
            snprintf(name, sizeof name, "rows_%d", sheet + 1);
        lxw_worksheet *ws = workbook_add_worksheet(wb, name);
        if (!ws)
            break;
        size_t take = n - done < (size_t)per_sheet ? n - done : (size_t)per_sheet;
        for (int k = 0; k < nh; k++)
            worksheet_set_column(ws, (lxw_col_t)k, (lxw_col_t)k, col_width(h[k]), NULL);
        worksheet_freeze_panes(ws, 1, 0);
        worksheet_autofilter(ws, 0, 0, (lxw_row_t)take, (lxw_col_t)(nh - 1));
        for (int k = 0; k < nh; k++)
            worksheet_write_string(ws, 0, (lxw_col_t)k, h[k], F->header);
        cmp_xlsx_sheet d = {first_number + sheet, done, take, nh, rows_row, S};
        out[sheet] = d;
        done += take;
        sheet++;
    } while (done < n);
    return sheet;
}

static void kv(lxw_worksheet *ws, lxw_row_t *row, const char *k, const char *v, const fmts *F)
{
    worksheet_write_string(ws, *row, 0, k, F->bold);
    put_str(ws, *row, 1, v, NULL);
    (*row)++;
}

static void kvn(lxw_worksheet *ws, lxw_row_t *row, const char *k, double v, const fmts *F)
{
    worksheet_write_string(ws, *row, 0, k, F->bold);
    cmp_cell c = {isnan(v) ? CELL_NA : CELL_NUM, v, NULL};
    put_cell(ws, *row, 1, &c, NULL);
    (*row)++;
}

static void culprit_block(lxw_worksheet *ws, lxw_row_t *row, const np_cmp_pair *p, int k, const fmts *F)
{
    const np_cmp_call *c = &p->calls[k];
    char chain[2048];
    cmp_module_chain(chain, sizeof chain, p, k);
    kv(ws, row, "call", c->name, F);
    kv(ws, row, "module path", chain[0] ? chain : "(top level)", F);
    kv(ws, row, "callsite", c->callsite[0] ? c->callsite : "(not recorded)", F);
    kv(ws, row, "why", c->reason, F);
    kvn(ws, row, "input severity", c->sev_in, F);
    kvn(ws, row, "output severity", c->sev_out, F);
    kvn(ws, row, "isolated error (u)", c->iso_err, F);
    kvn(ws, row, "isolated / budget", c->iso_ratio, F);
    kvn(ws, row, "reference isolated error (u)", c->ref_iso_err, F);
    kvn(ws, row, "reference isolated / budget", c->ref_iso_ratio, F);
    if (c->worst_row >= 0) {
        const np_cmp_row *r = &p->rows[c->worst_row];
        kv(ws, row, "worst output", r->cmp ? r->cmp->name : r->bench ? r->bench->name : "", F);
        if (r->m) {
            kvn(ws, row, "Cosine", r->m->cosine, F);
            kvn(ws, row, "EucDist", r->m->euc_dist, F);
            kvn(ws, row, "MaxAbsErr", r->m->max_abs_err, F);
            kvn(ws, row, "MaxRelativeErr", r->m->max_rel_err, F);
            kvn(ws, row, "relative L2 error", r->m->rel_l2, F);
        }
        char why[256];
        kv(ws, row, "verdict reason", np_cmp_row_verdict_text(why, sizeof why, r), F);
    }
}

static void write_summary(lxw_worksheet *ws, const np_cmp_result *r, const np_cmp_pair *p, const fmts *F)
{
    lxw_row_t row = 0;
    char buf[256];
    worksheet_set_column(ws, 0, 0, 28, NULL);
    worksheet_set_column(ws, 1, 1, 110, NULL);
    worksheet_write_string(ws, row++, 0, "nprobe compare report", F->bold);
    row++;
    kv(ws, &row, "bench (reference)", r ? r->bench_input : p->bench_path, F);
    kv(ws, &row, "cmp (under test)", r ? r->cmp_input : p->cmp_path, F);
    kv(ws, &row, "bench file", p->bench_path, F);
    kv(ws, &row, "cmp file", p->cmp_path, F);
    snprintf(buf, sizeof buf, "step %d, rank %d", p->step, p->rank);
    kv(ws, &row, "step / rank", buf, F);
    kv(ws, &row, "mode", np_cmp_mode_name(p->mode), F);
    snprintf(buf, sizeof buf, "task %s, device %s, precision %s, loss scale %.17g", p->bench_task,
             p->bench_device, p->bench_precision, p->bench_loss_scale);
    kv(ws, &row, "bench run", buf, F);
    snprintf(buf, sizeof buf, "task %s, device %s, precision %s, loss scale %.17g", p->cmp_task,
             p->cmp_device, p->cmp_precision, p->cmp_loss_scale);
    kv(ws, &row, "cmp run", buf, F);
    kv(ws, &row, "notes", p->notes[0] ? p->notes : "none", F);
    row++;
    worksheet_write_string(ws, row++, 0, "rows by verdict", F->bold);
    for (int v = 0; v < 3; v++)
        kvn(ws, &row, np_cmp_verdict_name((np_cmp_verdict)v), (double)p->count_verdict[v], F);
    worksheet_write_string(ws, row++, 0, "rows by match", F->bold);
    for (int m = 0; m < 5; m++)
        kvn(ws, &row, np_cmp_match_name((np_cmp_match)m), (double)p->count_match[m], F);
    /* the tolerances in effect, per cmp dtype, and the overrides given */
    worksheet_write_string(ws, row++, 0, "tolerances", F->bold);
    const cmp_pair_priv *pv = p->priv;
    if (p->mode == NP_CMP_MODE_MD5)
        kv(ws, &row, "md5 mode", "crc32 equality, no tolerance", F);
    for (int k = 0; pv && k < pv->n_tols; k++) {
        char t[256];
        cmp_tolerance_text(t, sizeof t, &pv->tols[k].t);
        char label[384];
        snprintf(label, sizeof label, "%s%s%s", pv->tols[k].dtype, pv->tols[k].scope[0] ? ", " : "",
                 pv->tols[k].scope);
        kv(ws, &row, label, t, F);
    }
    char ov[256];
    cmp_overrides_text(ov, sizeof ov, p);
    kv(ws, &row, "overrides", ov, F);
    row++;
    if (p->n_culprits) {
        worksheet_write_string(ws, row++, 0, "FIRST CULPRIT", F->red);
        culprit_block(ws, &row, p, p->culprits[0], F);
        row++;
        snprintf(buf, sizeof buf, "other culprits (%zu)", p->n_culprits - 1);
        worksheet_write_string(ws, row++, 0, buf, F->bold);
        for (size_t i = 1; i < p->n_culprits; i++) {
            const np_cmp_call *c = &p->calls[p->culprits[i]];
            put_str(ws, row, 0, c->name, NULL);
            char chain[2048];
            cmp_module_chain(chain, sizeof chain, p, p->culprits[i]);
            char line[2600];
            int len = snprintf(line, sizeof line, "%s | %s | ", chain[0] ? chain : "(top level)",
                               c->callsite[0] ? c->callsite : "-");
            if (len > 0 && (size_t)len < sizeof line)
                snprintf(line + len, sizeof line - (size_t)len, "%.200s", c->reason);
            put_str(ws, row++, 1, line, NULL);
        }
    } else {
        kv(ws, &row, "first culprit", "none", F);
    }
    row++;
    worksheet_write_string(ws, row, 0, "advice", F->bold);
    worksheet_write_string(ws, row++, 1, np_cmp_advice(p), F->wrap);
    if (r && r->n_issues) {
        row++;
        worksheet_write_string(ws, row++, 0, "issues", F->bold);
        for (size_t i = 0; i < r->n_issues; i++)
            put_str(ws, row++, 1, r->issues[i].text, NULL);
    }
}

static double clip_sev(double s)
{
    if (isnan(s) || s < 1e-6)
        return 1e-6;
    return s > 1e6 ? 1e6 : s;
}

static const char *const calls_hdr[] = {"Order", "Seq", "Call", "Kind", "Status",
                                         "Input severity", "Output severity",
                                         "Output severity (plotted)", "Error threshold",
                                         "Module", "Callsite", "Reason",
                                         "Isolated error (u)", "Isolated / budget",
                                         "Reference isolated (u)", "Reference / budget"};
#define CALLS_COLS ((int)(sizeof calls_hdr / sizeof calls_hdr[0]))

static int calls_row(cmp_cells *cells, size_t i, const void *user)
{
    const row_styles *S = user;
    const np_cmp_call *c = &S->p->calls[i];
    cmp_cell *o = cells->c;
    cmp_cell num = {CELL_NUM, 0, NULL}, str = {CELL_STR, 0, NULL};
    o[0] = num, o[0].num = (double)i;
    o[1] = num, o[1].num = (double)c->seq;
    o[2] = str, o[2].str = c->name;
    o[3] = str, o[3].str = c->kind;
    o[4] = str, o[4].str = np_cmp_call_status_name(c->status);
    o[5] = num, o[5].num = c->sev_in;   /* N/A when NaN */
    o[6] = num, o[6].num = c->sev_out;
    o[7] = num, o[7].num = clip_sev(c->sev_out);
    o[8] = num, o[8].num = 1.0;
    o[9] = str, o[9].str = c->parent;
    o[10] = str, o[10].str = c->callsite;
    o[11] = str, o[11].str = c->reason;
    o[12] = num, o[12].num = c->iso_err; /* N/A when not recomputed */
    o[13] = num, o[13].num = c->iso_ratio;
    o[14] = num, o[14].num = c->ref_iso_err; /* the bench's same call, N/A when not */
    o[15] = num, o[15].num = c->ref_iso_ratio;
    cells->n = CALLS_COLS;
    return c->status == NP_CALL_CULPRIT ? S->red : c->n_error_out ? S->yellow : 0;
}

/* The calls sheet with its header row and chart; its data rows are
 * described in *out for cmp_xlsx_fill_sheets. 0 if the sheet is missing. */
static int write_calls(cmp_xlsx_sheet *out, lxw_workbook *wb, const np_cmp_pair *p, const fmts *F,
                       int number, const row_styles *S)
{
    lxw_worksheet *ws = workbook_add_worksheet(wb, "calls");
    if (!ws)
        return 0;
    const int nh = CALLS_COLS;
    worksheet_set_column(ws, 2, 2, 50, NULL);
    worksheet_set_column(ws, 9, 9, 40, NULL);
    worksheet_set_column(ws, 11, 11, 50, NULL);
    worksheet_freeze_panes(ws, 1, 0);
    worksheet_autofilter(ws, 0, 0, (lxw_row_t)p->n_calls, (lxw_col_t)(nh - 1));
    for (int k = 0; k < nh; k++)
        worksheet_write_string(ws, 0, (lxw_col_t)k, calls_hdr[k], F->header);
    cmp_xlsx_sheet d = {number, 0, p->n_calls, nh, calls_row, S};
    *out = d;
    if (!p->n_calls)
        return 1;
    lxw_chart *ch = workbook_add_chart(wb, LXW_CHART_SCATTER_STRAIGHT_WITH_MARKERS);
    if (!ch)
        return 1;
    lxw_chart_series *s = chart_add_series(ch, NULL, NULL);
    chart_series_set_categories(s, "calls", 1, 0, (lxw_row_t)p->n_calls, 0);
    chart_series_set_values(s, "calls", 1, 7, (lxw_row_t)p->n_calls, 7);
    chart_series_set_name(s, "output severity (error / tolerance)");
    lxw_chart_series *t = chart_add_series(ch, NULL, NULL);
    chart_series_set_categories(t, "calls", 1, 0, (lxw_row_t)p->n_calls, 0);
    chart_series_set_values(t, "calls", 1, 8, (lxw_row_t)p->n_calls, 8);
    chart_series_set_name(t, "error threshold");
    chart_title_set_name(ch, "Per-call output error along execution order");
    chart_axis_set_name(ch->x_axis, "call (execution order: forward, then backward)");
    chart_axis_set_name(ch->y_axis, "severity (log scale)");
    chart_axis_set_log_base(ch->y_axis, 10);
    lxw_chart_options opt = {.x_scale = 2.5, .y_scale = 1.6};
    worksheet_insert_chart_opt(ws, 1, (lxw_col_t)(nh + 1), ch, &opt);
    return 1;
}

np_status np_cmp_write_xlsx(const np_cmp_result *r, const np_cmp_pair *p, const char *path,
                            np_error *err)
{
    if (p->shrunk)
        return cmp_shrunk_error(path, err);
    long per = r && r->opts.rows_per_sheet > 0 ? r->opts.rows_per_sheet : 1000000;
    if (per > 1048575)
        per = 1048575;
    size_t n_rows_sheets = p->n_rows ? (p->n_rows + (size_t)per - 1) / (size_t)per : 1;
    cmp_xlsx_sheet *sheets = malloc((n_rows_sheets + 1) * sizeof *sheets);
    if (!sheets)
        return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    /* written under a unique temporary name, renamed when complete */
    np_out out;
    np_status st = np_out_begin(&out, path, NULL, err);
    if (st != NP_OK) {
        free(sheets);
        return st;
    }
    const char *tmp = out.tmp;
    lxw_workbook_options o = {.constant_memory = LXW_TRUE, .tmpdir = NULL};
    lxw_workbook *wb = workbook_new_opt(tmp, &o);
    if (!wb) {
        np_out_abort(&out);
        free(sheets);
        return np_error_set(err, NP_ERR_IO, path, NULL, "cannot create the xlsx report");
    }
    fmts F;
    add_formats(&F, wb);
    F.wrap = workbook_add_format(wb);
    format_set_text_wrap(F.wrap);
    /* the fills' xf indices, registered now so that styles.xml has them even
     * when only the spliced rows use them */
    row_styles S = {p, lxw_format_get_xf_index(F.red), lxw_format_get_xf_index(F.yellow)};
    lxw_worksheet *sum = workbook_add_worksheet(wb, "summary");
    if (sum)
        write_summary(sum, r, p, &F);
    int n = write_rows_sheets(sheets, wb, p, per, &F, 2, &S);
    n += write_calls(&sheets[n], wb, p, &F, n + 2, &S);
    errno = 0;
    lxw_error e = workbook_close(wb);
    int close_errno = errno;
    if (e != LXW_NO_ERROR)
        st = np_error_set(err, NP_ERR_IO, path, NULL, "writing the xlsx report failed: %s",
                          np_out_lib_reason(lxw_strerror(e), close_errno));
    else if (!sum)
        st = np_error_set(err, NP_ERR_NOMEM, path, NULL, "cannot add the summary sheet");
    else {
        int k = 0;
        for (int i = 0; i < n; i++)
            if (sheets[i].n_rows)
                sheets[k++] = sheets[i];
        if (k)
            st = cmp_xlsx_fill_sheets(tmp, path, sheets, k, err);
    }
    if (st == NP_OK)
        st = np_out_commit(&out, 0, err);
    else
        np_out_abort(&out);
    free(sheets);
    return st;
}

/* ---- generic tables (report_internal.h): nprobe replay's reports ----------- */

typedef struct table_styles {
    const cmp_table *t;
    int red, yellow;
} table_styles;

static int table_row(cmp_cells *cells, size_t i, const void *user)
{
    const table_styles *S = user;
    int fill = S->t->row(cells, i, S->t->user);
    return fill == 1 ? S->red : fill == 2 ? S->yellow : 0;
}

np_status cmp_table_write_xlsx(const cmp_table *t, const char *path, np_error *err)
{
    np_out out;
    np_status st = np_out_begin(&out, path, NULL, err);
    if (st != NP_OK)
        return st;
    lxw_workbook_options o = {.constant_memory = LXW_TRUE, .tmpdir = NULL};
    lxw_workbook *wb = workbook_new_opt(out.tmp, &o);
    if (!wb) {
        np_out_abort(&out);
        return np_error_set(err, NP_ERR_IO, path, NULL, "cannot create the xlsx report");
    }
    fmts F;
    add_formats(&F, wb);
    table_styles S = {t, lxw_format_get_xf_index(F.red), lxw_format_get_xf_index(F.yellow)};
    lxw_worksheet *sum = workbook_add_worksheet(wb, "summary");
    lxw_worksheet *ws = workbook_add_worksheet(wb, "rows");
    if (sum && ws) {
        for (int k = 0; k < t->n_sum; k++) {
            worksheet_write_string(sum, (lxw_row_t)k, 0, t->sum_keys[k], F.bold);
            put_cell(sum, (lxw_row_t)k, 1, &t->sum_vals[k], NULL);
        }
        worksheet_set_column(sum, 0, 0, 20, NULL);
        worksheet_set_column(sum, 1, 1, 70, NULL);
        for (int k = 0; k < t->n_cols; k++) {
            worksheet_set_column(ws, (lxw_col_t)k, (lxw_col_t)k, col_width(t->headers[k]), NULL);
            worksheet_write_string(ws, 0, (lxw_col_t)k, t->headers[k], F.header);
        }
        worksheet_freeze_panes(ws, 1, 0);
        worksheet_autofilter(ws, 0, 0, (lxw_row_t)t->n_rows, (lxw_col_t)(t->n_cols - 1));
    }
    errno = 0;
    lxw_error e = workbook_close(wb);
    int close_errno = errno;
    if (e != LXW_NO_ERROR)
        st = np_error_set(err, NP_ERR_IO, path, NULL, "writing the xlsx report failed: %s",
                          np_out_lib_reason(lxw_strerror(e), close_errno));
    else if (!sum || !ws)
        st = np_error_set(err, NP_ERR_NOMEM, path, NULL, "cannot add the report's sheets");
    else if (t->n_rows) {
        cmp_xlsx_sheet d = {2, 0, t->n_rows, t->n_cols, table_row, &S};
        st = cmp_xlsx_fill_sheets(out.tmp, path, &d, 1, err);
    }
    if (st == NP_OK)
        st = np_out_commit(&out, 0, err);
    else
        np_out_abort(&out);
    return st;
}
