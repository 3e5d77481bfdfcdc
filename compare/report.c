/* compare/report.c - column headers (msprobe's, then nprobe's), the cells of
 * a row, the report file name, the advice text, and the csv and json
 * writers (streamed, numbers as %.17g). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
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

/* The three-way rule's test on a call's isolated errors (compare/isolated.c):
 * above its budget and more than 4x the reference's (or no reference). */
static int named_by_isolated(const np_cmp_call *c)
{
    return !isnan(c->iso_ratio) && c->iso_ratio > 1 &&
           (isnan(c->ref_iso_ratio) || c->iso_ratio > 4.0 * c->ref_iso_ratio);
}

#define LATER " Later culprits may be consequences or independent faults; propagated calls " \
              "follow from earlier ones."

/* What to do about the first culprit, said from the facts its card shows
 * (the severities of its inputs and outputs, its isolated errors): the
 * advice never claims that inputs agree when their severity is above 1. */
static const char *culprit_advice(const np_cmp_call *c)
{
    if (named_by_isolated(c))
        return "Start with the first culprit: recomputed in float64 from its own dumped inputs, "
               "its result departs from the exact one by more than its budget (and by more than "
               "the reference's same call, where the reference could be recomputed), so the "
               "defect is inside this call on the cmp side, whatever its inputs carry. Check its "
               "implementation (kernel, epsilon and other scalar arguments, masking, dtype of the "
               "accumulation), then rerun the compare." LATER;
    if (c->sev_in > 1)
        return "Start with the first culprit: its inputs already differ from the bench (input "
               "severity above 1) while no call dumped before it fails, so the departure starts "
               "before this call: in an op the dump does not hold (widen the config's scope or "
               "list, or dump at level mix), in the input data, or in parameters that parted "
               "before this step (compare an earlier step, or start both runs from the same "
               "checkpoint). Then rerun the compare." LATER;
    if (!isnan(c->iso_ratio) && c->iso_ratio <= 1 && c->sev_out >= 1)
        return "Start with the first culprit: its inputs and parameters agree with the bench "
               "(within the error level) but its outputs do not, and recomputed in float64 from "
               "its own dumped inputs and arguments it is within its budget: the op computes "
               "right from what it was given, so look at what it was called with on the cmp "
               "side (epsilon and other scalar arguments, a missing bias or mask, the dtype of "
               "the accumulation), then rerun the compare." LATER;
    if (c->sev_out >= 1)
        return "Start with the first culprit: its inputs and parameters agree with the bench "
               "(within the error level) but its outputs do not, so the departure starts inside "
               "this call. Check its implementation on the cmp side (kernel, epsilon and other "
               "scalar arguments, masking, dtype of the accumulation), then rerun the compare."
               LATER;
    return "Start with the first culprit: its reason says what sets it apart (a scalar argument, "
           "a leaf on one side only, or an error below the level that the rows after it grow "
           "from). Check its implementation and arguments on the cmp side, then rerun the "
           "compare." LATER;
}

const char *np_cmp_advice(const np_cmp_pair *p)
{
    if (p->n_culprits)
        return culprit_advice(&p->calls[p->culprits[0]]);
    const cmp_pair_priv *pv = p->shrunk ? NULL : p->priv; /* shrunk: no payload states */
    size_t n_bad = 0;
    for (size_t i = 0; pv && pv->payload && i < p->n_rows; i++)
        n_bad += pv->payload[i] != CMP_PAYLOAD_OK;
    if (n_bad && n_bad == p->count_verdict[NP_VERDICT_ERROR])
        return "The only error rows are payloads that could not be read or do not match their "
               "crc32 in /entries (a corrupt or truncated dump file; see the notes and the rows' "
               "reasons): no numerical difference was found in the rest. Dump the step again, "
               "or check the storage the file was copied through.";
    if (p->replica_diffs && !p->count_verdict[NP_VERDICT_ERROR])
        return "Values that the layout says are equal on several ranks differ (see the notes, "
               "\"Replica disagreement\": the leaf, the ranks and their mesh coordinates): a "
               "reduction left out or done differently on one rank (an all-reduce not applied, "
               "a gradient not synchronised). The lowest rank's copy was compared and agrees.";
    if (p->dump_defects && !p->count_verdict[NP_VERDICT_ERROR])
        return "A dump file contradicts its own format (see the notes, \"Dump defect in ...\": "
               "a root attribute, a /calls row, or a step/rank attribute against its folder): "
               "the file was damaged or edited, and what it says there was not taken as data. "
               "Dump the step again, or check the storage the file was copied through.";
    if (p->bench_incomplete || p->cmp_incomplete) {
        if (p->count_match[NP_MATCH_EXACT] + p->count_match[NP_MATCH_FUZZY] +
                p->count_match[NP_MATCH_MAPPING] ==
            0)
            return "Nothing was compared: the incomplete side holds no leaf of the other (the run "
                   "stopped before its dump of this step got going). Compare a step that closed "
                   "(its dump.h5 has complete = 1).";
        return "One side is incomplete (the run stopped during this step): only what it holds "
               "was compared, and leaves it never wrote are listed as unmatched. Compare a step "
               "that closed (its dump.h5 has complete = 1) for a full picture.";
    }
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

/* "[d0, d1, ...]" (cap >= 32); a shape that does not fit ends in "...]". */
static const char *shape_str(char *buf, size_t cap, const np_cmp_side *s)
{
    size_t len = 0;
    buf[len++] = '[';
    for (int i = 0; i < s->ndim; i++) {
        char tmp[24];
        int k = 0;
        long long v = (long long)s->shape[i];
        unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
        do {
            tmp[k++] = (char)('0' + u % 10);
            u /= 10;
        } while (u);
        if (v < 0)
            tmp[k++] = '-';
        if (len + (size_t)k + 2 + 5 > cap) {
            memcpy(buf + len, "...", 3);
            len += 3;
            break;
        }
        if (i) {
            buf[len++] = ',';
            buf[len++] = ' ';
        }
        while (k)
            buf[len++] = tmp[--k];
    }
    buf[len++] = ']';
    buf[len] = '\0';
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
        o->c[n++] = c ? num(c->stats.max) : na();
        o->c[n++] = c ? num(c->stats.min) : na();
        o->c[n++] = c ? num(c->stats.mean) : na();
        o->c[n++] = c ? num(c->stats.norm) : na();
        o->c[n++] = b ? num(b->stats.max) : na();
        o->c[n++] = b ? num(b->stats.min) : na();
        o->c[n++] = b ? num(b->stats.mean) : na();
        o->c[n++] = b ? num(b->stats.norm) : na();
    }
    o->c[n++] = b && c ? str(b->requires_grad == c->requires_grad ? "True" : "False") : na();
    /* Err_message: msprobe's note on the metrics; where none could be
     * computed for an error row (shape or dtype mismatch, a payload that
     * cannot be read or fails its crc32), the reason */
    const char *why = np_cmp_row_reason(o->reason, sizeof o->reason, r);
    int structural = r->verdict == NP_VERDICT_ERROR && isinf(r->severity) && b && c &&
                     (!r->m || isnan(r->m->euc_dist)) && strcmp(c->role, "kwargs") != 0;
    if (p->mode == NP_CMP_MODE_TENSOR) {
        o->c[n++] = str(!b || !c ? "Unmatched" : r->verdict == NP_VERDICT_ERROR ? "No" : "Yes");
        o->c[n++] = str(r->m && r->m->note && r->m->note[0] ? r->m->note : structural ? why : "");
    } else if (p->mode == NP_CMP_MODE_STATISTICS) {
        o->c[n++] = str(np_cmp_verdict_name((np_cmp_verdict)r->verdict));
        o->c[n++] = str(!b || !c ? "No bench data matched." : structural ? why : "");
    } else {
        o->c[n++] = str(!b || !c ? "N/A" : b->crc32 == c->crc32 ? "pass" : "diff");
    }
    o->c[n++] = str(np_cmp_match_name((np_cmp_match)r->match));
    o->c[n++] = str(np_cmp_verdict_name((np_cmp_verdict)r->verdict));
    const np_cmp_call *call = r->call_index >= 0 ? &p->calls[r->call_index] : NULL;
    o->c[n++] = str(call && call->status != NP_CALL_PASS ? np_cmp_call_status_name(call->status) : "");
    o->c[n++] = str(call ? call->parent : "");
    o->c[n++] = str(why);
    o->n = n;
}

/* ---- csv -------------------------------------------------------------------- */

/* Rows are formatted into a memory buffer and written in large pieces. */
typedef struct outbuf {
    char data[1 << 16];
    size_t n;
    FILE *f;
} outbuf;

/* The report file: a temporary beside `path`, renamed onto it when complete
 * (common/outfile.c), and its buffered writer *b (report_close flushes,
 * frees and renames). */
static np_status report_open(np_out *o, outbuf **b, const char *path, np_error *err)
{
    np_status st = np_out_begin(o, path, NULL, err);
    if (st != NP_OK)
        return st;
    FILE *f = np_out_stream(o);
    *b = f ? malloc(sizeof **b) : NULL;
    if (!*b) {
        np_out_abort(o);
        return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    }
    (*b)->n = 0;
    (*b)->f = f;
    return NP_OK;
}

static void ob_flush(outbuf *b)
{
    if (b->n)
        fwrite(b->data, 1, b->n, b->f);
    b->n = 0;
}

static np_status report_close(np_out *o, outbuf *b, np_error *err)
{
    ob_flush(b);
    free(b);
    return np_out_commit(o, 0, err);
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

/* A text field; one a spreadsheet would run as a formula (a leaf name
 * starting with =, +, -, @: names are user data) gets a leading '. */
static void csv_str(outbuf *b, const char *s)
{
    int q = np_cell_is_formula_like(s);
    if (!strpbrk(s, ",\"\n\r")) {
        if (q)
            ob_putc(b, '\'');
        ob_put(b, s, strlen(s));
        return;
    }
    ob_putc(b, '"');
    if (q)
        ob_putc(b, '\'');
    for (; *s; s++) {
        if (*s == '"')
            ob_putc(b, '"');
        ob_putc(b, *s);
    }
    ob_putc(b, '"');
}

np_status cmp_shrunk_error(const char *path, np_error *err)
{
    return np_error_set(err, NP_ERR_ARG, path, NULL,
                        "the pair's rows were already freed (np_cmp_pair_shrink): its report "
                        "cannot be written");
}

np_status np_cmp_write_csv(const np_cmp_pair *p, const char *path, np_error *err)
{
    if (p->shrunk)
        return cmp_shrunk_error(path, err);
    np_out o;
    outbuf *b;
    np_status st = report_open(&o, &b, path, err);
    if (st != NP_OK)
        return st;
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
    return report_close(&o, b, err);
}

/* ---- json ------------------------------------------------------------------- */

static void ob_put_cb(void *b, const char *bytes, size_t n)
{
    ob_put(b, bytes, n);
}

/* names are user data: np_json_quote keeps the document valid JSON */
static void json_str(outbuf *b, const char *s)
{
    np_json_quote(ob_put_cb, b, s);
}

static void ob_puts(outbuf *b, const char *s)
{
    ob_put(b, s, strlen(s));
}

static void ob_printf(outbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void ob_printf(outbuf *b, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0)
        ob_put(b, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

static void json_num(outbuf *b, double x)
{
    if (!isfinite(x)) {
        if (isnan(x))
            ob_puts(b, "null");
        else
            ob_puts(b, x > 0 ? "\"inf\"" : "\"-inf\"");
        return;
    }
    ob_num(b, x);
}

int cmp_is_exact_tolerance(const np_cmp_tolerance *t)
{
    return t->rtol == 0 && t->atol == 0 && t->cos >= 1;
}

void cmp_tolerance_text(char *buf, size_t cap, const np_cmp_tolerance *t)
{
    if (cmp_is_exact_tolerance(t))
        snprintf(buf, cap, "exact (any difference is an error)");
    else
        snprintf(buf, cap, "atol %.3g, rtol %.3g (warning %.3g), cos %.10g (warning %.10g)", t->atol,
                 t->rtol, t->rtol_warn, t->cos, t->cos_warn);
}

void cmp_overrides_text(char *buf, size_t cap, const np_cmp_pair *p)
{
    const cmp_pair_priv *pv = p->priv;
    size_t n = 0;
    buf[0] = '\0';
    if (pv && !isnan(pv->opt_atol))
        n += (size_t)snprintf(buf + n, cap - n, "--atol %.17g ", pv->opt_atol);
    if (pv && !isnan(pv->opt_rtol) && n < cap)
        n += (size_t)snprintf(buf + n, cap - n, "--rtol %.17g ", pv->opt_rtol);
    if (pv && !isnan(pv->opt_cos) && n < cap)
        n += (size_t)snprintf(buf + n, cap - n, "--cos %.17g ", pv->opt_cos);
    if (n && n < cap)
        buf[n - 1] = '\0';
    else if (!n)
        snprintf(buf, cap, "none: the defaults of each dtype, loosened to the run's precision");
}

static void json_call(outbuf *f, const np_cmp_pair *p, int k)
{
    const np_cmp_call *c = &p->calls[k];
    char chain[2048];
    cmp_module_chain(chain, sizeof chain, p, k);
    ob_puts(f, "{\"call\": ");
    json_str(f, c->name);
    ob_puts(f, ", \"seq\": ");
    ob_printf(f, "%lld", (long long)c->seq);
    ob_puts(f, ", \"module\": ");
    json_str(f, chain);
    ob_puts(f, ", \"callsite\": ");
    json_str(f, c->callsite);
    ob_puts(f, ", \"status\": ");
    json_str(f, np_cmp_call_status_name(c->status));
    ob_puts(f, ", \"reason\": ");
    json_str(f, c->reason);
    ob_puts(f, ", \"input_severity\": ");
    json_num(f, c->sev_in);
    ob_puts(f, ", \"output_severity\": ");
    json_num(f, c->sev_out);
    ob_puts(f, ", \"isolated_error_u\": ");
    json_num(f, c->iso_err);
    ob_puts(f, ", \"isolated_ratio\": ");
    json_num(f, c->iso_ratio);
    ob_puts(f, ", \"ref_isolated_error_u\": ");
    json_num(f, c->ref_iso_err);
    ob_puts(f, ", \"ref_isolated_ratio\": ");
    json_num(f, c->ref_iso_ratio);
    ob_puts(f, ", \"worst_row\": ");
    if (c->worst_row >= 0)
        json_str(f, p->rows[c->worst_row].cmp ? p->rows[c->worst_row].cmp->name : "");
    else
        ob_puts(f, "null");
    /* the worst output's metrics and verdict reason, as in the xlsx summary */
    ob_puts(f, ", \"worst_row_metrics\": ");
    const np_cmp_row *w = c->worst_row >= 0 ? &p->rows[c->worst_row] : NULL;
    if (w && w->m) {
        ob_puts(f, "{\"Cosine\": ");
        json_num(f, w->m->cosine);
        ob_puts(f, ", \"EucDist\": ");
        json_num(f, w->m->euc_dist);
        ob_puts(f, ", \"MaxAbsErr\": ");
        json_num(f, w->m->max_abs_err);
        ob_puts(f, ", \"MaxRelativeErr\": ");
        json_num(f, w->m->max_rel_err);
        ob_puts(f, ", \"relative_l2_error\": ");
        json_num(f, w->m->rel_l2);
        ob_putc(f, '}');
    } else {
        ob_puts(f, "null");
    }
    ob_puts(f, ", \"worst_row_reason\": ");
    if (w) {
        char why[256];
        json_str(f, np_cmp_row_reason(why, sizeof why, w));
    } else {
        ob_puts(f, "null");
    }
    ob_putc(f, '}');
}

/* The JSON report's "inputs" block (up to its notes). */
static void json_inputs(outbuf *f, const np_cmp_result *r, const np_cmp_pair *p)
{
    ob_puts(f, "{\n\"inputs\": {\"bench\": ");
    json_str(f, r ? r->bench_input : p->bench_path);
    ob_puts(f, ", \"cmp\": ");
    json_str(f, r ? r->cmp_input : p->cmp_path);
    ob_puts(f, ", \"bench_file\": ");
    json_str(f, p->bench_path);
    ob_puts(f, ", \"cmp_file\": ");
    json_str(f, p->cmp_path);
    ob_printf(f, ", \"step\": %d, \"rank\": %d, \"mode\": ", p->step, p->rank);
    json_str(f, np_cmp_mode_name(p->mode));
    ob_puts(f, ", \"bench_run\": {\"task\": ");
    json_str(f, p->bench_task);
    ob_puts(f, ", \"device\": ");
    json_str(f, p->bench_device);
    ob_puts(f, ", \"precision\": ");
    json_str(f, p->bench_precision);
    ob_puts(f, ", \"loss_scale\": ");
    json_num(f, p->bench_loss_scale);
    ob_puts(f, ", \"dp_grad_scale\": ");
    json_num(f, p->bench_dp_grad_scale);
    ob_puts(f, "}, \"cmp_run\": {\"task\": ");
    json_str(f, p->cmp_task);
    ob_puts(f, ", \"device\": ");
    json_str(f, p->cmp_device);
    ob_puts(f, ", \"precision\": ");
    json_str(f, p->cmp_precision);
    ob_puts(f, ", \"loss_scale\": ");
    json_num(f, p->cmp_loss_scale);
    ob_puts(f, ", \"dp_grad_scale\": ");
    json_num(f, p->cmp_dp_grad_scale);
    ob_puts(f, "}, \"notes\": ");
    json_str(f, p->notes);
}

static void json_tolerances(outbuf *f, const cmp_pair_priv *pv)
{
    /* the tolerances in effect: the overrides given and, per cmp dtype, the
     * levels its rows were judged by (none in md5 mode) */
    ob_puts(f, "},\n\"tolerances\": {\"overrides\": {\"atol\": ");
    json_num(f, pv ? pv->opt_atol : NAN);
    ob_puts(f, ", \"rtol\": ");
    json_num(f, pv ? pv->opt_rtol : NAN);
    ob_puts(f, ", \"cos\": ");
    json_num(f, pv ? pv->opt_cos : NAN);
    ob_puts(f, "}, \"by_dtype\": [");
    for (int k = 0; pv && k < pv->n_tols; k++) {
        const np_cmp_tolerance *t = &pv->tols[k].t;
        ob_puts(f, k ? ", {\"dtype\": " : "{\"dtype\": ");
        json_str(f, pv->tols[k].dtype);
        ob_puts(f, ", \"rows\": ");
        json_str(f, pv->tols[k].scope[0] ? pv->tols[k].scope : "all");
        ob_printf(f, ", \"exact\": %s, \"atol\": ", cmp_is_exact_tolerance(t) ? "true" : "false");
        json_num(f, t->atol);
        ob_puts(f, ", \"rtol\": ");
        json_num(f, t->rtol);
        ob_puts(f, ", \"rtol_warn\": ");
        json_num(f, t->rtol_warn);
        ob_puts(f, ", \"cos\": ");
        json_num(f, t->cos);
        ob_puts(f, ", \"cos_warn\": ");
        json_num(f, t->cos_warn);
        ob_putc(f, '}');
    }
}

/* The "rows" array: each row's cells, as the csv has them. */
static void json_rows(outbuf *f, const np_cmp_pair *p)
{
    ob_puts(f, "],\n\"rows\": [");
    cmp_cells cells;
    for (size_t i = 0; i < p->n_rows; i++) {
        cmp_row_cells(&cells, p, &p->rows[i]);
        ob_puts(f, i ? ",\n[" : "\n[");
        for (int k = 0; k < cells.n; k++) {
            if (k)
                ob_puts(f, ", ");
            const cmp_cell *c = &cells.c[k];
            if (c->kind == CELL_NUM)
                json_num(f, c->num);
            else if (c->kind == CELL_STR)
                json_str(f, c->str);
            else
                ob_puts(f, "null");
        }
        ob_putc(f, ']');
    }
}

np_status np_cmp_write_json(const np_cmp_result *r, const np_cmp_pair *p, const char *path,
                            np_error *err)
{
    if (p->shrunk)
        return cmp_shrunk_error(path, err);
    np_out o;
    outbuf *f;
    np_status st = report_open(&o, &f, path, err);
    if (st != NP_OK)
        return st;
    json_inputs(f, r, p);
    ob_puts(f, "},\n\"summary\": {");
    for (int v = 0; v < 3; v++)
        ob_printf(f, "%s\"%s\": %zu", v ? ", " : "", np_cmp_verdict_name((np_cmp_verdict)v),
                p->count_verdict[v]);
    for (int m = 0; m < 5; m++)
        ob_printf(f, ", \"%s\": %zu", np_cmp_match_name((np_cmp_match)m), p->count_match[m]);
    ob_puts(f, ", \"advice\": ");
    json_str(f, np_cmp_advice(p));
    json_tolerances(f, p->priv);
    ob_puts(f, "]},\n\"first_culprit\": ");
    if (p->n_culprits)
        json_call(f, p, p->culprits[0]);
    else
        ob_puts(f, "null");
    ob_puts(f, ",\n\"culprits\": [");
    for (size_t i = 0; i < p->n_culprits; i++) {
        ob_puts(f, i ? ",\n  " : "\n  ");
        json_call(f, p, p->culprits[i]);
    }
    ob_puts(f, "],\n\"issues\": [");
    for (size_t i = 0; r && i < r->n_issues; i++) {
        ob_puts(f, i ? ", " : "");
        json_str(f, r->issues[i].text);
    }
    ob_puts(f, "],\n\"headers\": [");
    int nh;
    const char *const *h = np_cmp_headers(p->mode, &nh);
    for (int i = 0; i < nh; i++) {
        ob_puts(f, i ? ", " : "");
        json_str(f, h[i]);
    }
    json_rows(f, p);
    ob_puts(f, "\n]\n}\n");
    return report_close(&o, f, err);
}

/* ---- generic tables (report_internal.h): nprobe replay's reports ----------- */

/* A table report's output (an exclusive temporary, np_out), its buffered
 * writer and the row cells; table_end flushes, frees and renames. */
static np_status table_begin(np_out *o, outbuf **b, cmp_cells **cells, const char *path,
                             np_error *err)
{
    np_status st = report_open(o, b, path, err);
    if (st != NP_OK)
        return st;
    if (!(*cells = malloc(sizeof **cells))) {
        free(*b);
        np_out_abort(o);
        return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    }
    return NP_OK;
}

static np_status table_end(np_out *o, outbuf *b, cmp_cells *cells, np_error *err)
{
    free(cells);
    return report_close(o, b, err);
}

static void table_cell_csv(outbuf *b, const cmp_cell *c)
{
    if (c->kind == CELL_NUM)
        ob_num(b, c->num);
    else
        csv_str(b, c->kind == CELL_STR ? c->str : "N/A");
}

np_status cmp_table_write_csv(const cmp_table *t, const char *path, np_error *err)
{
    np_out o;
    outbuf *b;
    cmp_cells *cells;
    np_status st = table_begin(&o, &b, &cells, path, err);
    if (st != NP_OK)
        return st;
    for (int k = 0; k < t->n_cols; k++) {
        if (k)
            ob_putc(b, ',');
        csv_str(b, t->headers[k]);
    }
    ob_putc(b, '\n');
    for (size_t i = 0; i < t->n_rows; i++) {
        t->row(cells, i, t->user);
        for (int k = 0; k < cells->n; k++) {
            if (k)
                ob_putc(b, ',');
            table_cell_csv(b, &cells->c[k]);
        }
        ob_putc(b, '\n');
    }
    return table_end(&o, b, cells, err);
}

static void table_cell_json(outbuf *b, const cmp_cell *c)
{
    if (c->kind == CELL_NUM)
        json_num(b, c->num);
    else if (c->kind == CELL_STR)
        json_str(b, c->str);
    else
        ob_puts(b, "null");
}

np_status cmp_table_write_json(const cmp_table *t, const char *path, np_error *err)
{
    np_out o;
    outbuf *b;
    cmp_cells *cells;
    np_status st = table_begin(&o, &b, &cells, path, err);
    if (st != NP_OK)
        return st;
    ob_puts(b, "{\n\"summary\": {");
    for (int k = 0; k < t->n_sum; k++) {
        ob_puts(b, k ? ", " : "");
        json_str(b, t->sum_keys[k]);
        ob_puts(b, ": ");
        table_cell_json(b, &t->sum_vals[k]);
    }
    ob_puts(b, "},\n\"headers\": [");
    for (int k = 0; k < t->n_cols; k++) {
        ob_puts(b, k ? ", " : "");
        json_str(b, t->headers[k]);
    }
    ob_puts(b, "],\n\"rows\": [");
    for (size_t i = 0; i < t->n_rows; i++) {
        t->row(cells, i, t->user);
        ob_puts(b, i ? ",\n[" : "\n[");
        for (int k = 0; k < cells->n; k++) {
            ob_puts(b, k ? ", " : "");
            table_cell_json(b, &cells->c[k]);
        }
        ob_putc(b, ']');
    }
    ob_puts(b, "]\n}\n");
    return table_end(&o, b, cells, err);
}
