/* profile/xlsx.c - the xlsx reports of `nprobe profile` (profile.xlsx:
 * sheets "ranks" and "ops") and of its compare (profile_compare.xlsx:
 * sheet "compare"), the same columns as the csv files, through
 * libxlsxwriter; the file appears complete or not at all (np_out). */
#include <errno.h>
#include <math.h>
#include <string.h>

#include <xlsxwriter.h>

#include "nprobe/profile.h"

typedef struct xw {
    lxw_worksheet *ws;
    lxw_format *bold;
    lxw_row_t row;
    lxw_col_t col;
} xw;

static void x_str(xw *x, const char *s)
{
    char buf[4096];
    if (s && np_cell_is_formula_like(s)) { /* text, never a formula (csv's rule) */
        snprintf(buf, sizeof buf, "'%s", s);
        s = buf;
    }
    worksheet_write_string(x->ws, x->row, x->col++, s ? s : "", NULL);
}

static void x_num(xw *x, double v)
{
    if (isfinite(v))
        worksheet_write_number(x->ws, x->row, x->col, v, NULL);
    x->col++;
}

static lxw_worksheet *sheet(lxw_workbook *wb, xw *x, const char *name, const char *const *head)
{
    x->ws = workbook_add_worksheet(wb, name);
    if (!x->ws)
        return NULL;
    x->row = 0;
    x->col = 0;
    for (; *head; head++)
        worksheet_write_string(x->ws, 0, x->col++, *head, x->bold);
    worksheet_freeze_panes(x->ws, 1, 0);
    x->row = 1;
    return x->ws;
}

static const char *const rank_head[] = {"rank", "trace", "timeline", "steps", "events", "span_us", "busy_us",
                                        "compute_us", "communication_us", "memory_us", "optimizer_us",
                                        "data_loading_us", "other_us", "idle_us", "comm_union_us",
                                        "compute_union_us", "overlap_us", "flops", NULL};
static const char *const ops_head[] = {"rank", "category", "name", "count", "total_us", "self_us",
                                       "step_median_us", "mean_us", "min_us", "max_us", "flops", "flops_per_s", NULL};
static const char *const cmp_head[] = {"category", "name", "count_a", "count_b", "a_step_us", "b_step_us",
                                       "delta_us", "ratio", "share_a", "share_b", "side", NULL};

static long long rank_of(const np_prof_rank *r, size_t i) { return r->rank >= 0 ? r->rank : (long long)i; }

static int write_ranks(lxw_workbook *wb, xw *x, const np_prof_rank *R, size_t n)
{
    if (!sheet(wb, x, "ranks", rank_head))
        return -1;
    for (size_t i = 0; i < n; i++, x->row++) {
        const np_prof_rank *r = &R[i];
        x->col = 0;
        x_num(x, (double)rank_of(r, i));
        x_str(x, r->path);
        x_str(x, r->device ? "device" : "cpu");
        x_num(x, (double)r->steps);
        x_num(x, (double)r->events);
        x_num(x, r->span_us);
        x_num(x, r->busy_us);
        for (int c = 0; c < NP_PROF_CLASS_COUNT; c++)
            x_num(x, r->class_us[c]);
        x_num(x, r->comm_us);
        x_num(x, r->compute_us);
        x_num(x, r->overlap_us);
        x_num(x, r->flops);
    }
    if (!sheet(wb, x, "ops", ops_head))
        return -1;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < R[i].n_ops; k++, x->row++) {
            const np_prof_op *o = &R[i].ops[k];
            x->col = 0;
            x_num(x, (double)rank_of(&R[i], i));
            x_str(x, o->cat);
            x_str(x, o->name);
            x_num(x, (double)o->count);
            x_num(x, o->total_us);
            x_num(x, o->self_us);
            x_num(x, o->step_us);
            x_num(x, o->total_us / (double)o->count);
            x_num(x, o->min_us);
            x_num(x, o->max_us);
            x_num(x, o->flops);
            x_num(x, o->flops > 0 && o->total_us > 0 ? o->flops / (o->total_us * 1e-6) : NAN);
        }
    return 0;
}

static int write_compare(lxw_workbook *wb, xw *x, const np_prof_compare *c)
{
    if (!sheet(wb, x, "compare", cmp_head))
        return -1;
    for (size_t i = 0; i < c->n_pairs; i++, x->row++) {
        const np_prof_pair *p = &c->pairs[i];
        const np_prof_op *o = p->a ? p->a : p->b;
        x->col = 0;
        x_str(x, o->cat);
        x_str(x, o->name);
        x_num(x, p->a ? (double)p->a->count : 0);
        x_num(x, p->b ? (double)p->b->count : 0);
        x_num(x, p->a_step_us);
        x_num(x, p->b_step_us);
        x_num(x, p->delta_us);
        x_num(x, p->ratio);
        x_num(x, p->share_a);
        x_num(x, p->share_b);
        x_str(x, p->a && p->b ? "both" : p->a ? "A only" : "B only");
    }
    return 0;
}

np_status np_prof_write_xlsx(const char *path, const np_prof_rank *ranks, size_t n,
                             const np_prof_compare *cmp, np_error *err)
{
    np_out out;
    np_status st = np_out_begin(&out, path, NULL, err);
    if (st)
        return st;
    lxw_workbook *wb = workbook_new(out.tmp);
    if (!wb) {
        np_out_abort(&out);
        return np_error_set(err, NP_ERR_IO, path, NULL, "cannot create the xlsx report");
    }
    xw x = {0};
    x.bold = workbook_add_format(wb);
    if (x.bold)
        format_set_bold(x.bold);
    int bad = (ranks && write_ranks(wb, &x, ranks, n)) || (cmp && write_compare(wb, &x, cmp));
    errno = 0;
    lxw_error e = workbook_close(wb);
    int close_errno = errno;
    if (e != LXW_NO_ERROR)
        st = np_error_set(err, NP_ERR_IO, path, NULL, "writing the xlsx report failed: %s",
                          np_out_lib_reason(lxw_strerror(e), close_errno));
    else if (bad)
        st = np_error_set(err, NP_ERR_NOMEM, path, NULL, "cannot add the report's sheets");
    if (st == NP_OK)
        st = np_out_commit(&out, 0, err);
    else
        np_out_abort(&out);
    return st;
}
