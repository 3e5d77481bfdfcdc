/* compare/report.c - column headers (msprobe's, then nprobe's), the cells of
 * a row, the report file name, the advice text, and the csv and json
 * writers (streamed, numbers as %.17g). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "report_internal.h"

/* msprobe CompareConst: COMPARE_RESULT_HEADER, SUMMARY_COMPARE_RESULT_HEADER,
 * MD5_COMPARE_RESULT_HEADER (BASIC_INFO + indices + SUMMARY_INFO + ...). */
#define BASIC "NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", \
              "Bench Tensor Shape", "NPU Requires_grad", "Bench Requires_grad"
#define SUMMARY_INFO "NPU max", "NPU min", "NPU mean", "NPU l2norm", "Bench max", "Bench min", \
                     "Bench mean", "Bench l2norm"
#define OURS "Match", "Verdict", "Culprit", "Module", "Reason"

static const char *const hdr_tensor[] = {
    BASIC, "Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio",
    "Five Thousandths Err Ratio", SUMMARY_INFO, "Requires_grad Consistent",
    "Accuracy Reached or Not", "Err_message", OURS};
static const char *const hdr_stats[] = {
    BASIC, "Max diff", "Min diff", "Mean diff", "L2norm diff", "MaxRelativeErr", "MinRelativeErr",
    "MeanRelativeErr", "NormRelativeErr", SUMMARY_INFO, "Requires_grad Consistent", "Result",
    "Err_message", OURS};
static const char *const hdr_md5[] = {BASIC, "NPU MD5", "BENCH MD5", "Requires_grad Consistent",
                                      "Result", OURS};

#define COUNT(a) ((int)(sizeof a / sizeof a[0]))

const char *const *np_cmp_headers(np_cmp_mode mode, int *n)
{
    if (mode == NP_CMP_MODE_STATISTICS) {
        *n = COUNT(hdr_stats);
        return hdr_stats;
    }
    if (mode == NP_CMP_MODE_MD5) {
        *n = COUNT(hdr_md5);
        return hdr_md5;
    }
    *n = COUNT(hdr_tensor);
    return hdr_tensor;
}

void np_cmp_report_basename(char *buf, size_t cap, const np_cmp_pair *p, long long unix_time)
{
    time_t t = (time_t)unix_time;
    struct tm tm;
    localtime_r(&t, &tm);
    char ts[32];
    strftime(ts, sizeof ts, "%Y%m%d%H%M%S", &tm);
    snprintf(buf, cap, "compare_result_rank%d_step%d_%s", p->rank, p->step, ts);
}

const char *np_cmp_advice(const np_cmp_pair *p)
{
    if (p->n_culprits)
        return "Start with the first culprit: its inputs and parameters agree with the bench but "
               "its outputs do not, so the departure starts inside this call. Check its "
               "implementation on the cmp side (kernel, epsilon and other scalar arguments, "
               "masking, dtype of the accumulation), then rerun the compare. Later culprits may "
               "be consequences or independent faults; propagated calls follow from earlier ones.";
    if (p->count_verdict[NP_VERDICT_ERROR])
        return "Rows fail but no call qualifies as a culprit (errors only grew from noise, or "
               "inputs were not dumped). Dump at level mix with data_mode all to see the inputs, "
               "or tighten the scope around the first error row.";
    if (p->count_match[NP_MATCH_CMP_ONLY] || p->count_match[NP_MATCH_BENCH_ONLY])
        return "No error rows, but some leaves have no partner: the two runs do not call the same "
               "operations. Try --fuzzy, or a --mapping file for renamed modules or APIs.";
    if (p->count_verdict[NP_VERDICT_WARNING])
        return "No error rows; warnings are differences above the usual noise of the dtype under "
               "test but below the error threshold. Watch them over more steps.";
    return "The two runs agree within the tolerance of the dtype under test.";
}

/* ---- cells ------------------------------------------------------------------ */

static cmp_cell num(double x)
{
    cmp_cell c = {isnan(x) ? CELL_NA : CELL_NUM, x, NULL};
    return c;
}

static cmp_cell str(const char *s)
{
    cmp_cell c = {CELL_STR, 0, s ? s : ""};
    return c;
}

static cmp_cell na(void)
{
    cmp_cell c = {CELL_NA, 0, NULL};
    return c;
}

static const char *shape_str(char *buf, size_t cap, const np_cmp_side *s)
{
    size_t len = 0;
    len += (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < s->ndim && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", i ? ", " : "", (long long)s->shape[i]);
    if (len < cap)
        snprintf(buf + len, cap - len, "]");
    return buf;
}

void cmp_module_chain(char *buf, size_t cap, const np_cmp_pair *p, int call_index)
{
    buf[0] = '\0';
    if (call_index < 0)
        return;
    const char *chain[32];
    int n = 0;
    const char *par = p->calls[call_index].parent;
    while (par && par[0] && n < 32) {
        chain[n++] = par;
        const char *next = NULL;
        for (size_t k = 0; k < p->n_calls; k++)
            if (!strcmp(p->calls[k].name, par)) {
                next = p->calls[k].parent;
                break;
            }
        par = next;
    }
    size_t len = 0;
    for (int i = n - 1; i >= 0 && len < cap; i--)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", i == n - 1 ? "" : " > ", chain[i]);
}

void cmp_row_cells(cmp_cells *o, const np_cmp_pair *p, const np_cmp_row *r)
{
    const np_cmp_side *b = r->bench, *c = r->cmp;
    int n = 0;
    o->c[n++] = c ? str(c->name) : str("N/A");
    o->c[n++] = b ? str(b->name) : str("N/A");
    o->c[n++] = c ? str(c->dtype) : na();
    o->c[n++] = b ? str(b->dtype) : na();
    o->c[n++] = c ? str(shape_str(o->scratch[0], sizeof o->scratch[0], c)) : na();
    o->c[n++] = b ? str(shape_str(o->scratch[1], sizeof o->scratch[1], b)) : na();
    o->c[n++] = c ? str(c->requires_grad ? "True" : "False") : na();
    o->c[n++] = b ? str(b->requires_grad ? "True" : "False") : na();
    if (p->mode == NP_CMP_MODE_TENSOR) {
        const np_cmp_metrics *m = r->m;
        o->c[n++] = m ? num(m->cosine) : na();
        o->c[n++] = m ? num(m->euc_dist) : na();
        o->c[n++] = m ? num(m->max_abs_err) : na();
        o->c[n++] = m ? num(m->max_rel_err) : na();
        o->c[n++] = m ? num(m->one_thousandth) : na();
        o->c[n++] = m ? num(m->five_thousandths) : na();
    } else if (p->mode == NP_CMP_MODE_STATISTICS) {
        np_cmp_stats st;
        np_cmp_row_stats(&st, r);
        for (int i = 0; i < 4; i++)
            o->c[n++] = num(st.diff[i]);
        for (int i = 0; i < 4; i++)
            o->c[n++] = num(st.rel[i]);
    } else {
        snprintf(o->scratch[2], sizeof o->scratch[2], "%08x", c ? c->crc32 : 0u);
        snprintf(o->scratch[3], sizeof o->scratch[3], "%08x", b ? b->crc32 : 0u);
        o->c[n++] = c ? str(o->scratch[2]) : na();
        o->c[n++] = b ? str(o->scratch[3]) : na();
    }
    if (p->mode != NP_CMP_MODE_MD5) {
        o->c[n++] = c ? num(c->max) : na();
        o->c[n++] = c ? num(c->min) : na();
        o->c[n++] = c ? num(c->mean) : na();
        o->c[n++] = c ? num(c->norm) : na();
        o->c[n++] = b ? num(b->max) : na();
        o->c[n++] = b ? num(b->min) : na();
        o->c[n++] = b ? num(b->mean) : na();
        o->c[n++] = b ? num(b->norm) : na();
    }
    o->c[n++] = b && c ? str(b->requires_grad == c->requires_grad ? "True" : "False") : na();
    if (p->mode == NP_CMP_MODE_TENSOR) {
        o->c[n++] = str(!b || !c ? "Unmatched" : r->verdict == NP_VERDICT_ERROR ? "No" : "Yes");
        o->c[n++] = str(r->m ? r->m->note : "");
    } else if (p->mode == NP_CMP_MODE_STATISTICS) {
        o->c[n++] = str(np_cmp_verdict_name((np_cmp_verdict)r->verdict));
        o->c[n++] = str(!b || !c ? "No bench data matched." : "");
    } else {
        o->c[n++] = str(!b || !c ? "N/A" : b->crc32 == c->crc32 ? "pass" : "diff");
    }
    o->c[n++] = str(np_cmp_match_name((np_cmp_match)r->match));
    o->c[n++] = str(np_cmp_verdict_name((np_cmp_verdict)r->verdict));
    const np_cmp_call *call = r->call_index >= 0 ? &p->calls[r->call_index] : NULL;
    o->c[n++] = str(call && call->status != NP_CALL_PASS ? np_cmp_call_status_name(call->status) : "");
    o->c[n++] = str(call ? call->parent : "");
    o->c[n++] = str(np_cmp_row_reason(o->reason, sizeof o->reason, r));
    o->n = n;
}

/* ---- csv -------------------------------------------------------------------- */

/* Rows are formatted into a memory buffer and written in large pieces. */
typedef struct outbuf {
    char data[1 << 16];
    size_t n;
    FILE *f;
} outbuf;

static void ob_flush(outbuf *b)
{
    if (b->n)
        fwrite(b->data, 1, b->n, b->f);
    b->n = 0;
}

static void ob_put(outbuf *b, const char *s, size_t len)
{
    if (len > sizeof b->data - b->n) {
        ob_flush(b);
        if (len > sizeof b->data) {
            fwrite(s, 1, len, b->f);
            return;
        }
    }
    memcpy(b->data + b->n, s, len);
    b->n += len;
}

static void ob_putc(outbuf *b, char c)
{
    if (b->n == sizeof b->data)
        ob_flush(b);
    b->data[b->n++] = c;
}

static void ob_num(outbuf *b, double x)
{
    if (sizeof b->data - b->n < CMP_G17_MAX)
        ob_flush(b);
    if (isinf(x)) {
        ob_put(b, x > 0 ? "inf" : "-inf", x > 0 ? 3 : 4);
        return;
    }
    b->n += (size_t)cmp_fmt_g17(b->data + b->n, x);
}

static void csv_str(outbuf *b, const char *s)
{
    if (!strpbrk(s, ",\"\n\r")) {
        ob_put(b, s, strlen(s));
        return;
    }
    ob_putc(b, '"');
    for (; *s; s++) {
        if (*s == '"')
            ob_putc(b, '"');
        ob_putc(b, *s);
    }
    ob_putc(b, '"');
}

np_status np_cmp_write_csv(const np_cmp_pair *p, const char *path, np_error *err)
{
    FILE *f = fopen(path, "w");
    outbuf *b = f ? malloc(sizeof *b) : NULL;
    if (!b) {
        if (f)
            fclose(f);
        return np_error_set(err, f ? NP_ERR_NOMEM : NP_ERR_IO, path, NULL,
                            "cannot create the csv report");
    }
    b->n = 0;
    b->f = f;
    int nh;
    const char *const *h = np_cmp_headers(p->mode, &nh);
    for (int i = 0; i < nh; i++) {
        if (i)
            ob_putc(b, ',');
        csv_str(b, h[i]);
    }
    ob_putc(b, '\n');
    cmp_cells cells;
    for (size_t i = 0; i < p->n_rows; i++) {
        cmp_row_cells(&cells, p, &p->rows[i]);
        for (int k = 0; k < cells.n; k++) {
            if (k)
                ob_putc(b, ',');
            const cmp_cell *c = &cells.c[k];
            if (c->kind == CELL_NUM)
                ob_num(b, c->num);
            else
                csv_str(b, c->kind == CELL_STR ? c->str : "N/A");
        }
        ob_putc(b, '\n');
    }
    ob_flush(b);
    free(b);
    if (ferror(f) | (fclose(f) != 0))
        return np_error_set(err, NP_ERR_IO, path, NULL, "writing the csv report failed (disk full?)");
    return NP_OK;
}

/* ---- json ------------------------------------------------------------------- */

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    const unsigned char *u = (const unsigned char *)(s ? s : "");
    while (*u) {
        size_t run = 0;
        while (u[run] && u[run] != '"' && u[run] != '\\' && u[run] >= 0x20)
            run++;
        if (run) {
            fwrite(u, 1, run, f);
            u += run;
            continue;
        }
        if (*u == '"' || *u == '\\')
            fprintf(f, "\\%c", *u);
        else
            fprintf(f, "\\u%04x", *u);
        u++;
    }
    fputc('"', f);
}

static void json_num(FILE *f, double x)
{
    if (!isfinite(x)) {
        if (isnan(x))
            fputs("null", f);
        else
            fputs(x > 0 ? "\"inf\"" : "\"-inf\"", f);
        return;
    }
    char buf[CMP_G17_MAX];
    cmp_fmt_g17(buf, x);
    fputs(buf, f);
}

static void json_call(FILE *f, const np_cmp_pair *p, int k)
{
    const np_cmp_call *c = &p->calls[k];
    char chain[2048];
    cmp_module_chain(chain, sizeof chain, p, k);
    fputs("{\"call\": ", f);
    json_str(f, c->name);
    fputs(", \"seq\": ", f);
    fprintf(f, "%lld", (long long)c->seq);
    fputs(", \"module\": ", f);
    json_str(f, chain);
    fputs(", \"callsite\": ", f);
    json_str(f, c->callsite);
    fputs(", \"status\": ", f);
    json_str(f, np_cmp_call_status_name(c->status));
    fputs(", \"reason\": ", f);
    json_str(f, c->reason);
    fputs(", \"input_severity\": ", f);
    json_num(f, c->sev_in);
    fputs(", \"output_severity\": ", f);
    json_num(f, c->sev_out);
    fputs(", \"worst_row\": ", f);
    if (c->worst_row >= 0)
        json_str(f, p->rows[c->worst_row].cmp ? p->rows[c->worst_row].cmp->name : "");
    else
        fputs("null", f);
    fputc('}', f);
}

np_status np_cmp_write_json(const np_cmp_result *r, const np_cmp_pair *p, const char *path,
                            np_error *err)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return np_error_set(err, NP_ERR_IO, path, NULL, "cannot create the json report");
    fputs("{\n\"inputs\": {\"bench\": ", f);
    json_str(f, r ? r->bench_input : p->bench_path);
    fputs(", \"cmp\": ", f);
    json_str(f, r ? r->cmp_input : p->cmp_path);
    fputs(", \"bench_file\": ", f);
    json_str(f, p->bench_path);
    fputs(", \"cmp_file\": ", f);
    json_str(f, p->cmp_path);
    fprintf(f, ", \"step\": %d, \"rank\": %d, \"mode\": ", p->step, p->rank);
    json_str(f, np_cmp_mode_name(p->mode));
    fputs(", \"notes\": ", f);
    json_str(f, p->notes);
    fputs("},\n\"summary\": {", f);
    for (int v = 0; v < 3; v++)
        fprintf(f, "%s\"%s\": %zu", v ? ", " : "", np_cmp_verdict_name((np_cmp_verdict)v),
                p->count_verdict[v]);
    for (int m = 0; m < 5; m++)
        fprintf(f, ", \"%s\": %zu", np_cmp_match_name((np_cmp_match)m), p->count_match[m]);
    fputs(", \"advice\": ", f);
    json_str(f, np_cmp_advice(p));
    fputs("},\n\"first_culprit\": ", f);
    if (p->n_culprits)
        json_call(f, p, p->culprits[0]);
    else
        fputs("null", f);
    fputs(",\n\"culprits\": [", f);
    for (size_t i = 0; i < p->n_culprits; i++) {
        fputs(i ? ",\n  " : "\n  ", f);
        json_call(f, p, p->culprits[i]);
    }
    fputs("],\n\"issues\": [", f);
    for (size_t i = 0; r && i < r->n_issues; i++) {
        fputs(i ? ", " : "", f);
        json_str(f, r->issues[i].text);
    }
    fputs("],\n\"headers\": [", f);
    int nh;
    const char *const *h = np_cmp_headers(p->mode, &nh);
    for (int i = 0; i < nh; i++) {
        fputs(i ? ", " : "", f);
        json_str(f, h[i]);
    }
    fputs("],\n\"rows\": [", f);
    cmp_cells cells;
    for (size_t i = 0; i < p->n_rows; i++) {
        cmp_row_cells(&cells, p, &p->rows[i]);
        fputs(i ? ",\n[" : "\n[", f);
        for (int k = 0; k < cells.n; k++) {
            if (k)
                fputs(", ", f);
            const cmp_cell *c = &cells.c[k];
            if (c->kind == CELL_NUM)
                json_num(f, c->num);
            else if (c->kind == CELL_STR)
                json_str(f, c->str);
            else
                fputs("null", f);
        }
        fputc(']', f);
    }
    fputs("\n]\n}\n", f);
    if (ferror(f) | (fclose(f) != 0))
        return np_error_set(err, NP_ERR_IO, path, NULL, "writing the json report failed (disk full?)");
    return NP_OK;
}
