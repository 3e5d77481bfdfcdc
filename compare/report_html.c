/* compare/report_html.c - the HTML report of a whole comparison
 * (np_cmp_write_html): one self-contained page, no network, every chart
 * inline SVG (report_html_chart.c), a few lines of inline script for the
 * tree buttons and the rows filter. Sections: the headline (first culprit
 * over all steps and ranks, counts, both runs, tolerances), across steps,
 * the module tree of the failing step (nprobe/calltree.h), the per-call
 * severity along execution order, and the failing step's rows (capped:
 * the full rows stay in xlsx/csv). Every text that comes from a dump or a
 * path is escaped (leaf names are user input). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "nprobe/calltree.h"
#include "report_html.h"
#include "report_internal.h"

/* Rows shown in the table; children shown per group in the tree. */
#define HTML_MAX_ROWS 1000
#define TREE_GROUP 250

/* ---- output ------------------------------------------------------------------ */

static void num_text(char *buf, size_t cap, double x, int prec)
{
    if (isnan(x))
        snprintf(buf, cap, "N/A");
    else if (isinf(x))
        snprintf(buf, cap, x > 0 ? "inf" : "-inf");
    else
        snprintf(buf, cap, "%.*g", prec, x);
}

/* ---- what the page shows ----------------------------------------------------- */

typedef struct page {
    const np_cmp_result *r;      /* the inputs and the issues */
    const np_cmp_pair_digest *d; /* every pair, in (step, rank) order */
    size_t n;
    const np_cmp_pair *fp;       /* the failing step's pair in full (np_cmp_html_focus) */
    const char *fp_report;       /* where its full rows are (may be NULL) */
    cmp_html_step *steps;
    int n_steps, first_fail;     /* index into steps, -1 */
    size_t verdicts[3], matches[5], failing_pairs;
} page;

static int pair_fails(const np_cmp_pair_digest *p)
{
    return p->count_verdict[NP_VERDICT_ERROR] || p->n_culprits;
}

void np_cmp_pair_digest_of(np_cmp_pair_digest *out, const np_cmp_pair *p)
{
    memset(out, 0, sizeof *out);
    out->step = p->step;
    out->rank = p->rank;
    out->worst = p->worst_severity;
    out->has_loss = p->has_loss;
    out->loss_bench = p->loss_bench;
    out->loss_cmp = p->loss_cmp;
    out->n_rows = p->n_rows;
    for (int v = 0; v < 3; v++)
        out->count_verdict[v] = p->count_verdict[v];
    for (int m = 0; m < 5; m++)
        out->count_match[m] = p->count_match[m];
    out->n_culprits = p->n_culprits;
    if (p->n_culprits)
        snprintf(out->first_culprit, sizeof out->first_culprit, "%s",
                 p->calls[p->culprits[0]].name);
}

size_t np_cmp_html_focus(const np_cmp_pair_digest *d, size_t n)
{
    size_t error_pair = n;
    for (size_t i = 0; i < n; i++) {
        if (d[i].n_culprits)
            return i;
        if (error_pair == n && pair_fails(&d[i]))
            error_pair = i;
    }
    return error_pair < n ? error_pair : 0;
}

/* Steps over ranks (pairs come in step, then rank order), the counts.
 * Returns -1 when out of memory. */
static int analyse(page *pg)
{
    pg->steps = calloc(pg->n + 1, sizeof *pg->steps);
    if (!pg->steps)
        return -1;
    pg->first_fail = -1;
    for (size_t i = 0; i < pg->n; i++) {
        const np_cmp_pair_digest *p = &pg->d[i];
        if (!pg->n_steps || pg->steps[pg->n_steps - 1].step != p->step)
            pg->steps[pg->n_steps++] = (cmp_html_step){.step = p->step, .worst = NAN};
        cmp_html_step *s = &pg->steps[pg->n_steps - 1];
        double w = p->worst;
        if (!isnan(w) && (isnan(s->worst) || w > s->worst))
            s->worst = w;
        s->errors += p->count_verdict[NP_VERDICT_ERROR];
        s->warnings += p->count_verdict[NP_VERDICT_WARNING];
        s->rows += p->n_rows;
        s->verdict = s->errors ? NP_VERDICT_ERROR : s->warnings ? NP_VERDICT_WARNING : s->verdict;
        if (!s->has_loss && p->has_loss) {
            s->has_loss = 1;
            s->loss_bench = p->loss_bench;
            s->loss_cmp = p->loss_cmp;
        }
        for (int v = 0; v < 3; v++)
            pg->verdicts[v] += p->count_verdict[v];
        for (int m = 0; m < 5; m++)
            pg->matches[m] += p->count_match[m];
        if (pair_fails(p)) {
            pg->failing_pairs++;
            if (pg->first_fail < 0)
                pg->first_fail = pg->n_steps - 1;
        }
    }
    return 0;
}

/* Per call: worst verdict and worst row (by severity) of its own rows. */
static void call_worst(const np_cmp_pair *p, int8_t *verdict, int *worst)
{
    for (size_t k = 0; k < p->n_calls; k++) {
        verdict[k] = NP_VERDICT_PASS;
        worst[k] = -1;
    }
    for (size_t i = 0; i < p->n_rows; i++) {
        int k = p->rows[i].call_index;
        if (k < 0 || (size_t)k >= p->n_calls)
            continue;
        const np_cmp_row *r = &p->rows[i];
        if (r->verdict > verdict[k])
            verdict[k] = r->verdict;
        if (worst[k] < 0 || r->severity > p->rows[worst[k]].severity)
            worst[k] = (int)i;
    }
}

/* ---- headline ----------------------------------------------------------------- */

static void kv(FILE *f, const char *k, const char *v)
{
    cmp_html_printf(f, "<tr><th>%s<td>", k);
    cmp_html_text(f, v);
    cmp_html_raw(f, "\n");
}

/* Columns the headline leaves out: said elsewhere in the box. */
static int skip_header(const char *h)
{
    static const char *const skip[] = {"NPU Name", "Bench Name", "Match", "Verdict", "Culprit",
                                       "Module", "Reason", "Result", "Err_message",
                                       "Accuracy Reached or Not", "NPU Requires_grad",
                                       "Bench Requires_grad", "Requires_grad Consistent"};
    for (size_t i = 0; i < sizeof skip / sizeof skip[0]; i++)
        if (!strcmp(h, skip[i]))
            return 1;
    return 0;
}

/* The worst output row of a call: its metrics with the report's headers. */
static void worst_row_cells(FILE *f, const np_cmp_pair *p, const np_cmp_row *row)
{
    cmp_cells *cells = malloc(sizeof *cells);
    if (!cells)
        return;
    int nh;
    const char *const *h = np_cmp_headers(p->mode, &nh);
    cmp_row_cells(cells, p, row);
    cmp_html_raw(f, "<div class=cells>");
    for (int k = 0; k < cells->n && k < nh; k++) {
        const cmp_cell *c = &cells->c[k];
        char num[40];
        if (c->kind == CELL_NA || (c->kind == CELL_STR && !c->str[0]) || skip_header(h[k]))
            continue;
        if (c->kind == CELL_NUM)
            num_text(num, sizeof num, c->num, 6);
        cmp_html_raw(f, "<span><b>");
        cmp_html_text(f, h[k]);
        cmp_html_raw(f, "</b> ");
        cmp_html_text(f, c->kind == CELL_NUM ? num : c->str);
        cmp_html_raw(f, "</span>");
    }
    cmp_html_raw(f, "</div>\n");
    free(cells);
}

static void culprit_box(FILE *f, const np_cmp_pair *p)
{
    if (!p->n_culprits) {
        cmp_html_printf(f, "<div class='box ok'><h2>No culprit</h2><p>");
        cmp_html_text(f, np_cmp_advice(p));
        cmp_html_raw(f, "</p></div>\n");
        return;
    }
    const np_cmp_call *c = &p->calls[p->culprits[0]];
    char chain[2048], buf[256];
    cmp_module_chain(chain, sizeof chain, p, p->culprits[0]);
    cmp_html_raw(f, "<div class='box bad' id=first-culprit><h2>First culprit: <code>");
    cmp_html_text(f, c->name);
    cmp_html_printf(f, "</code></h2><table class=kv>");
    snprintf(buf, sizeof buf, "step %d, rank %d", p->step, p->rank);
    kv(f, "where", buf);
    kv(f, "module path", chain[0] ? chain : "(top level)");
    kv(f, "callsite", c->callsite[0] ? c->callsite : "(not recorded)");
    kv(f, "why", c->reason ? c->reason : "");
    char a[40], b[40];
    num_text(a, sizeof a, c->sev_in, 4);
    num_text(b, sizeof b, c->sev_out, 4);
    snprintf(buf, sizeof buf, "inputs %s, outputs %s (1 = error level)", a, b);
    kv(f, "severity", buf);
    if (!isnan(c->iso_err)) { /* both sides' isolated errors (docs/COMPARE.md, three-way) */
        char ri[40], rr[40];
        num_text(a, sizeof a, c->iso_err, 4);
        num_text(b, sizeof b, c->iso_ratio, 4);
        num_text(ri, sizeof ri, c->ref_iso_err, 4);
        num_text(rr, sizeof rr, c->ref_iso_ratio, 4);
        if (isnan(c->ref_iso_err))
            snprintf(buf, sizeof buf, "under test %s u (%s x its budget); reference: not "
                     "recomputed", a, b);
        else
            snprintf(buf, sizeof buf, "under test %s u (%s x its budget); reference %s u "
                     "(%s x its budget)", a, b, ri, rr);
        kv(f, "isolated error", buf);
    }
    if (c->worst_row >= 0) {
        const np_cmp_row *r = &p->rows[c->worst_row];
        kv(f, "worst output", r->cmp ? r->cmp->name : r->bench ? r->bench->name : "");
        kv(f, "verdict reason", np_cmp_row_verdict_text(buf, sizeof buf, r));
        cmp_html_raw(f, "<tr><th>metrics<td>");
        worst_row_cells(f, p, r);
    }
    cmp_html_raw(f, "</table>");
    if (p->n_culprits > 1)
        cmp_html_printf(f, "<p>%zu more culprits in this step (marked in the tree).</p>",
                        p->n_culprits - 1);
    cmp_html_raw(f, "<p class=advice>");
    cmp_html_text(f, np_cmp_advice(p));
    cmp_html_raw(f, "</p></div>\n");
}

static void counts_box(FILE *f, const page *pg)
{
    const np_cmp_result *r = pg->r;
    size_t n = pg->n;
    cmp_html_printf(f, "<div class=box><h2>Counts</h2><table class=kv>"
                       "<tr><th>compared<td>%zu step/rank pair%s over %d step%s, %s mode"
                       "<tr><th>failing pairs<td>%zu"
                       "<tr><th>rows<td><span class=c2>%zu error</span> &middot; "
                       "<span class=c1>%zu warning</span> &middot; <span class=c0>%zu pass</span>"
                       "<tr><th>matched<td>",
                    n, n == 1 ? "" : "s", pg->n_steps,
                    pg->n_steps == 1 ? "" : "s", np_cmp_mode_name(pg->fp->mode), pg->failing_pairs,
                    pg->verdicts[2], pg->verdicts[1], pg->verdicts[0]);
    for (int m = 0; m < 5; m++)
        cmp_html_printf(f, "%s%zu %s", m ? " &middot; " : "", pg->matches[m],
                        np_cmp_match_name((np_cmp_match)m));
    cmp_html_raw(f, "</table>");
    for (size_t i = 0; i < r->n_issues && i < 20; i++) {
        cmp_html_raw(f, "<p class=issue>");
        cmp_html_text(f, r->issues[i].text);
        cmp_html_raw(f, "</p>");
    }
    if (r->n_issues > 20)
        cmp_html_printf(f, "<p class=issue>... and %zu more issues</p>", r->n_issues - 20);
    cmp_html_raw(f, "</div>\n");
}

static void run_row(FILE *f, const char *side, const char *input, const char *task,
                    const char *device, const char *precision, double loss_scale)
{
    char ls[40];
    num_text(ls, sizeof ls, loss_scale, 6);
    cmp_html_printf(f, "<tr><th>%s<td>", side);
    cmp_html_text(f, input);
    cmp_html_raw(f, "<td>");
    cmp_html_text(f, device);
    cmp_html_raw(f, "<td>");
    cmp_html_text(f, precision);
    cmp_html_raw(f, "<td>");
    cmp_html_text(f, task);
    cmp_html_printf(f, "<td>%s\n", ls);
}

static void inputs_box(FILE *f, const page *pg)
{
    const np_cmp_pair *p = pg->fp;
    cmp_html_printf(f, "<div class=box><h2>Inputs <small>(step %d, rank %d)</small></h2>"
                       "<table class=grid><tr><th><th>dump<th>device<th>precision<th>task"
                       "<th>loss scale\n",
                    p->step, p->rank);
    run_row(f, "bench", pg->r->bench_input, p->bench_task, p->bench_device, p->bench_precision,
            p->bench_loss_scale);
    run_row(f, "cmp", pg->r->cmp_input, p->cmp_task, p->cmp_device, p->cmp_precision,
            p->cmp_loss_scale);
    cmp_html_raw(f, "</table>");
    if (p->notes[0]) {
        cmp_html_raw(f, "<p class=note>");
        cmp_html_text(f, p->notes);
        cmp_html_raw(f, "</p>");
    }
    cmp_html_raw(f, "<h3>Tolerances in effect</h3><table class=kv>");
    const cmp_pair_priv *pv = p->priv;
    if (p->mode == NP_CMP_MODE_MD5)
        kv(f, "md5 mode", "crc32 equality, no tolerance");
    for (int k = 0; pv && k < pv->n_tols; k++) {
        char t[256];
        cmp_tolerance_text(t, sizeof t, &pv->tols[k].t);
        /* the scope (which rows: "gradients from Functional.relu.0.backward
         * on (...)") under the tolerance, not in the label column: a label as
         * long as a call name left the values a one-character column */
        cmp_html_raw(f, "<tr><th>");
        cmp_html_text(f, pv->tols[k].dtype);
        cmp_html_raw(f, "<td>");
        cmp_html_text(f, t);
        if (pv->tols[k].scope[0]) {
            cmp_html_raw(f, "<br><small class=scope>");
            cmp_html_text(f, pv->tols[k].scope);
            cmp_html_raw(f, "</small>");
        }
        cmp_html_raw(f, "\n");
    }
    char ov[256];
    cmp_overrides_text(ov, sizeof ov, p);
    kv(f, "overrides", ov);
    cmp_html_raw(f, "</table></div>\n");
}

/* ---- the module tree ---------------------------------------------------------- */

typedef struct treeview {
    const np_cmp_pair *p;
    np_calltree *t;
    int8_t *cv;       /* per call: worst verdict of its own rows */
    int *cw;          /* per call: its worst row, -1 */
    int8_t *sv;       /* per node: worst verdict in its subtree */
    int *ord;         /* per node: position among its siblings */
    int *nch;         /* per node: number of children */
    int *pord;        /* per node: position of the child on the culprit's path, -1 */
    int n_roots, root_pord;
    int culprit;      /* node of the first culprit, -1 */
} treeview;

/* The worst row's metric as compact markup: its labels and the match kind
 * come from the style sheet (.tree.mt/.ms/.m5, .k1-.k4: ~50 bytes a node,
 * a page with 47k calls stays light). */
static void node_metric(FILE *f, const np_cmp_pair *p, const np_cmp_row *r)
{
    char a[40], b[40];
    if (!r->bench || !r->cmp) {
        cmp_html_printf(f, "<i class=um>%s</i>", np_cmp_match_name((np_cmp_match)r->match));
        return;
    }
    if (p->mode == NP_CMP_MODE_TENSOR && r->m && !isnan(r->m->cosine)) {
        num_text(a, sizeof a, r->m->cosine, 6);
        num_text(b, sizeof b, r->m->max_abs_err, 3);
        cmp_html_printf(f, "<i>%s</i><u>%s</u>", a, b);
    } else if (p->mode == NP_CMP_MODE_MD5) {
        cmp_html_printf(f, "<i>%s</i>", r->bench->crc32 == r->cmp->crc32 ? "equal" : "diff");
    } else {
        np_cmp_stats st;
        np_cmp_row_stats(&st, r);
        num_text(a, sizeof a, isnan(st.rel[3]) ? r->severity : st.rel[3], 3);
        cmp_html_printf(f, isnan(st.rel[3]) ? "<i class=sv>%s</i>" : "<i>%s</i>", a);
    }
}

/* A node: <p> for a leaf (closed by what follows), <details> for a node
 * with children. Classes: c call / x named but not dumped, v0-v2 worst
 * verdict in the subtree, s1-s3 culprit/propagated/contains, k1-k4 how its
 * worst row was matched (exact when absent). */
static void node_open(FILE *f, const treeview *tv, int i)
{
    const np_calltree_node *v = &tv->t->nodes[i];
    const np_cmp_call *c = v->call >= 0 ? &tv->p->calls[v->call] : NULL;
    int branch = v->first_child >= 0;
    int st = c ? (int)c->status : 0;
    int wr = c ? tv->cw[v->call] : -1;
    int k = wr >= 0 ? tv->p->rows[wr].match : 0;
    char cls[32];
    snprintf(cls, sizeof cls, "%s v%d%s%.1s%s%.1s", c ? "c" : "x", tv->sv[i], st ? " s" : "",
             st ? "0123" + st : "", k ? " k" : "", k ? "01234" + k : "");
    cmp_html_printf(f, "<%s class=\"%s\"%s%s>%s", branch ? "details" : "p", cls,
                    i == tv->culprit ? " id=culprit-node" : "", tv->pord[i] >= 0 ? " open" : "",
                    branch ? "<summary>" : "");
    cmp_html_text(f, v->name);
    if (!c)
        cmp_html_printf(f, "<i class=nd>%d</i>", v->n_calls);
    else if (wr >= 0)
        node_metric(f, tv->p, &tv->p->rows[wr]);
    cmp_html_raw(f, branch ? "</summary><div>\n" : "\n");
}

/* Siblings in groups of TREE_GROUP when there are more: `count` siblings,
 * `pord` the one on the culprit's path. */
static void group_open(FILE *f, const treeview *tv, int i, int count, int pord)
{
    int o = tv->ord[i];
    if (count <= TREE_GROUP || o % TREE_GROUP)
        return;
    int worst = 0, k = 0;
    for (int j = i; j >= 0 && k < TREE_GROUP; j = tv->t->nodes[j].next_sibling, k++)
        worst = tv->sv[j] > worst ? tv->sv[j] : worst;
    cmp_html_printf(f, "<details class='g v%d'%s><summary>%d&#8211;%d of %d</summary><div>\n",
                    worst, pord >= o && pord < o + TREE_GROUP ? " open" : "", o + 1, o + k, count);
}

static void group_close(FILE *f, const treeview *tv, int i, int count)
{
    if (count > TREE_GROUP &&
        (tv->ord[i] % TREE_GROUP == TREE_GROUP - 1 || tv->t->nodes[i].next_sibling < 0))
        cmp_html_raw(f, "</div></details>\n");
}

static void tree_emit(FILE *f, const treeview *tv)
{
    const np_calltree_node *v = tv->t->nodes;
    int i = tv->t->first_root;
    while (i >= 0) {
        int par = v[i].parent;
        group_open(f, tv, i, par >= 0 ? tv->nch[par] : tv->n_roots, par >= 0 ? tv->pord[par] : tv->root_pord);
        node_open(f, tv, i);
        if (v[i].first_child >= 0) {
            i = v[i].first_child;
            continue;
        }
        for (;;) {
            par = v[i].parent;
            group_close(f, tv, i, par >= 0 ? tv->nch[par] : tv->n_roots);
            if (v[i].next_sibling >= 0) {
                i = v[i].next_sibling;
                break;
            }
            i = par;
            if (i < 0)
                break;
            cmp_html_raw(f, "</div></details>\n");
        }
    }
}

static int tree_setup(treeview *tv, const np_cmp_pair *p)
{
    size_t nc = p->n_calls;
    const char **names = malloc((2 * nc + 1) * sizeof *names);
    if (!names)
        return -1;
    for (size_t k = 0; k < nc; k++) {
        names[k] = p->calls[k].name;
        names[nc + k] = p->calls[k].parent;
    }
    tv->p = p;
    np_status st = np_calltree_build(&tv->t, names, names + nc, nc, NULL);
    free(names);
    if (st != NP_OK)
        return -1;
    size_t nn = tv->t->n_nodes + 1;
    tv->cv = malloc(nc + 1);
    tv->cw = malloc((nc + 1) * sizeof *tv->cw);
    tv->sv = calloc(nn, 1);
    tv->ord = calloc(nn, sizeof *tv->ord);
    tv->nch = calloc(nn, sizeof *tv->nch);
    tv->pord = malloc(nn * sizeof *tv->pord);
    if (!tv->cv || !tv->cw || !tv->sv || !tv->ord || !tv->nch || !tv->pord)
        return -1;
    call_worst(p, tv->cv, tv->cw);
    const np_calltree_node *v = tv->t->nodes;
    for (size_t i = 0; i + 1 < nn; i++) {
        tv->pord[i] = -1;
        tv->sv[i] = v[i].call >= 0 ? tv->cv[v[i].call] : 0;
    }
    /* subtree verdicts: children after their parents in pre-order, so a
     * reverse pass sees every child before its parent */
    int *pre = tv->ord, n = 0;
    for (int i = tv->t->first_root; i >= 0; i = np_calltree_next(tv->t, i))
        pre[n++] = i;
    while (n-- > 0) {
        int i = pre[n], par = v[i].parent;
        if (par >= 0 && tv->sv[i] > tv->sv[par])
            tv->sv[par] = tv->sv[i];
    }
    tv->n_roots = 0;
    for (size_t i = 0; i + 1 < nn; i++)
        tv->ord[i] = 0;
    for (int i = tv->t->first_root; i >= 0; i = v[i].next_sibling)
        tv->ord[i] = tv->n_roots++;
    for (size_t i = 0; i + 1 < nn; i++)
        for (int c = v[i].first_child; c >= 0; c = v[c].next_sibling)
            tv->ord[c] = tv->nch[i]++;
    tv->culprit = p->n_culprits ? p->culprits[0] : -1;
    tv->root_pord = -1;
    for (int i = tv->culprit, hops = 0; i >= 0 && (size_t)hops < nn; i = v[i].parent, hops++) {
        if (v[i].parent >= 0)
            tv->pord[v[i].parent] = tv->ord[i];
        else
            tv->root_pord = tv->ord[i];
    }
    return 0;
}

static void tree_free(treeview *tv)
{
    np_calltree_free(tv->t);
    free(tv->cv);
    free(tv->cw);
    free(tv->sv);
    free(tv->ord);
    free(tv->nch);
    free(tv->pord);
}

static void tree_section(FILE *f, const page *pg)
{
    const np_cmp_pair *p = pg->fp;
    treeview tv = {0};
    cmp_html_printf(f, "<section id=tree><h2>Module tree <small>step %d, rank %d: %zu calls",
                    p->step, p->rank, p->n_calls);
    if (tree_setup(&tv, p) != 0) {
        cmp_html_raw(f, "</small></h2><p class=note>Out of memory drawing the tree.</p></section>\n");
        tree_free(&tv);
        return;
    }
    cmp_html_raw(f, "</small></h2><p class=tools><button id=t-open>expand all</button> "
                    "<button id=t-close>collapse all</button> <button id=t-path>culprit path"
                    "</button> <span class=legend><span class='dot v0'></span>pass "
                    "<span class='dot v1'></span>warning <span class='dot v2'></span>error "
                    "(worst in the subtree) &middot; <em class=t1>culprit</em> "
                    "<em class=t2>propagated</em> <em class=t3>contains-culprit</em> &middot; "
                    "each node: its worst row's metric and how it was matched</span></p>");
    cmp_html_printf(f, "<div class=\"tree %s\" id=tree-root>\n",
                    p->mode == NP_CMP_MODE_TENSOR ? "mt" : p->mode == NP_CMP_MODE_MD5 ? "m5" : "ms");
    tree_emit(f, &tv);
    cmp_html_raw(f, "</div></section>\n");
    tree_free(&tv);
}

/* ---- the rows of the failing step ---------------------------------------------- */

/* Column headers shown in the table, per mode (the rest is in xlsx/csv). */
static const char *const cols_tensor[] = {"NPU Dtype", "NPU Tensor Shape", "Cosine", "MaxAbsErr",
                                          "MaxRelativeErr", "One Thousandth Err Ratio", NULL};
static const char *const cols_stats[] = {"NPU Dtype", "NPU Tensor Shape", "Max diff", "Mean diff",
                                         "L2norm diff", "NormRelativeErr", NULL};
static const char *const cols_md5[] = {"NPU Dtype", "NPU Tensor Shape", "NPU MD5", "BENCH MD5", NULL};

static int col_index(const np_cmp_pair *p, const char *name)
{
    int nh;
    const char *const *h = np_cmp_headers(p->mode, &nh);
    for (int k = 0; k < nh; k++)
        if (!strcmp(h[k], name))
            return k;
    return -1;
}

/* Mark the rows shown: errors first, then warnings, then passes, up to the cap. */
static size_t pick_rows(uint8_t *shown, const np_cmp_pair *p)
{
    size_t n = 0;
    for (int v = NP_VERDICT_ERROR; v >= NP_VERDICT_PASS; v--)
        for (size_t i = 0; i < p->n_rows && n < HTML_MAX_ROWS; i++)
            if (p->rows[i].verdict == v) {
                shown[i] = 1;
                n++;
            }
    return n;
}

static void cell(FILE *f, const cmp_cell *c)
{
    char num[40];
    cmp_html_raw(f, "<td>");
    if (c->kind == CELL_NUM) {
        num_text(num, sizeof num, c->num, 6);
        cmp_html_raw(f, num);
    } else if (c->kind == CELL_STR) {
        cmp_html_text(f, c->str);
    }
}

static void row_line(FILE *f, const np_cmp_pair *p, size_t i, const int *cols, int ncols,
                     cmp_cells *cells)
{
    const np_cmp_row *r = &p->rows[i];
    cmp_row_cells(cells, p, r);
    const np_cmp_call *c = r->call_index >= 0 ? &p->calls[r->call_index] : NULL;
    cmp_html_printf(f, "<tr class=v%d><td>%zu<td class=nm>", r->verdict, i + 1);
    cmp_html_text(f, r->cmp ? r->cmp->name : r->bench ? r->bench->name : "");
    cmp_html_printf(f, "<td>%s<td>%s<td>%s", np_cmp_verdict_name((np_cmp_verdict)r->verdict),
                    np_cmp_match_name((np_cmp_match)r->match),
                    c && c->status ? np_cmp_call_status_name(c->status) : "");
    for (int k = 0; k < ncols; k++) {
        if (cols[k] >= 0 && cols[k] < cells->n)
            cell(f, &cells->c[cols[k]]);
        else
            cmp_html_raw(f, "<td>");
    }
    char why[256];
    cmp_html_raw(f, "<td class=why>");
    cmp_html_text(f, np_cmp_row_reason(why, sizeof why, r));
    cmp_html_raw(f, "\n");
}

static void rows_section(FILE *f, const page *pg)
{
    const np_cmp_pair *p = pg->fp;
    const char *const *names = p->mode == NP_CMP_MODE_TENSOR       ? cols_tensor
                               : p->mode == NP_CMP_MODE_STATISTICS ? cols_stats
                                                                   : cols_md5;
    int cols[8], ncols = 0;
    for (; names[ncols]; ncols++)
        cols[ncols] = col_index(p, names[ncols]);
    uint8_t *shown = calloc(p->n_rows + 1, 1);
    cmp_cells *cells = malloc(sizeof *cells);
    size_t n = shown && cells ? pick_rows(shown, p) : 0;
    cmp_html_printf(f, "<section id=rows><h2>Rows <small>step %d, rank %d</small></h2>"
                       "<p class=tools><select id=f-verdict><option value=''>all verdicts"
                       "<option value=v2>error<option value=v1>warning<option value=v0>pass"
                       "</select> <input id=f-name type=search placeholder='search names' size=40> "
                       "<span id=f-count></span></p><p class=note>%zu of %zu rows shown",
                    p->step, p->rank, n, p->n_rows);
    if (n < p->n_rows)
        cmp_html_printf(f, " (errors first, then warnings, then passes; in execution order)");
    cmp_html_raw(f, ". All rows, with every column: ");
    const char *where = pg->fp_report;
    cmp_html_text(f, where && where[0] ? where : "run nprobe compare with --format xlsx or csv");
    cmp_html_raw(f, ".</p><div class=scroll><table class=rows id=rows-table><thead><tr><th>#"
                    "<th>name<th>verdict<th>match<th>call");
    for (int k = 0; k < ncols; k++) {
        cmp_html_raw(f, "<th>");
        cmp_html_text(f, names[k]);
    }
    cmp_html_raw(f, "<th>reason</thead><tbody>\n");
    for (size_t i = 0; n && i < p->n_rows; i++)
        if (shown[i])
            row_line(f, p, i, cols, ncols, cells);
    cmp_html_raw(f, "</tbody></table></div></section>\n");
    free(shown);
    free(cells);
}

/* ---- page ------------------------------------------------------------------------- */

static const char *const css[] = {
    "<style>\n"
    ":root{--ok:#2f855a;--warn:#c88a04;--err:#c53030;--fg:#1a202c;--mut:#5a6473;--bg:#f6f7f9;"
    "--card:#fff;--line:#e2e5ea;--fwd:#2b6cb0;--bwd:#dd6b20}\n"
    "body{margin:0;font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;"
    "color:var(--fg);background:var(--bg)}\n"
    "header{background:#1f2933;color:#fff;padding:14px 28px}header h1{margin:0;font-size:20px}"
    "header p{margin:2px 0 0;color:#cbd2d9;font-size:13px;word-break:break-all}\n"
    "main{max-width:1180px;margin:0 auto;padding:18px 24px 40px}\n"
    "section,.box{background:var(--card);border:1px solid var(--line);border-radius:8px;"
    "padding:14px 18px;margin:0 0 16px}\n"
    ".heads{display:grid;grid-template-columns:1fr 1fr;gap:16px}.heads .box{margin:0}"
    ".heads .wide{grid-column:1/3}\n"
    "h2{font-size:16px;margin:0 0 10px}h2 small,h3 small{color:var(--mut);font-weight:normal}"
    "h3{font-size:14px;margin:12px 0 6px}\n"
    ".bad{border-left:6px solid var(--err)}.ok{border-left:6px solid var(--ok)}"
    ".bad h2 code{color:var(--err);font-size:16px}\n"
    "code,.tree p,.tree summary,.rows .nm{font-family:ui-monospace,'DejaVu Sans Mono',Menlo,monospace;"
    "font-size:12.5px}\n"
    "table.kv th{text-align:left;color:var(--mut);font-weight:600;padding:2px 14px 2px 0;"
    "vertical-align:top;white-space:nowrap}table.kv td{padding:2px 0;overflow-wrap:anywhere}"
    "table.kv .scope{color:var(--mut)}\n"
    "table.grid{border-collapse:collapse}table.grid th,table.grid td{border-bottom:1px solid "
    "var(--line);padding:3px 10px 3px 0;text-align:left;word-break:break-all}table.grid th{white-space:nowrap}\n"
    ".cells span{display:inline-block;background:#f1f3f6;border-radius:4px;padding:1px 6px;"
    "margin:2px 4px 2px 0;font-size:12px}.cells b{color:var(--mut);font-weight:600}\n"
    ".advice,.note{color:var(--mut);font-size:13px}.issue{color:var(--err);font-size:13px;margin:4px 0}\n"
    ".c0{color:var(--ok)}.c1{color:var(--warn)}.c2{color:var(--err);font-weight:600}\n"
    "svg.chart{width:100%;height:auto;display:block}svg text{font:11px system-ui,sans-serif;"
    "fill:var(--mut)}svg .axt{font-weight:600}\n"
    "svg .gr{stroke:#edf0f3}svg .err{stroke:var(--err);stroke-dasharray:5 4}"
    "svg .errl,svg .ffl{fill:var(--err);font-weight:600}\n"
    "svg rect.v0{fill:#68d391}svg rect.v1{fill:#f6c343}svg rect.v2{fill:#e53e3e}"
    "svg rect.eb{fill:#feb2b2}svg .bwd{fill:#fff7ed}\n"
    "svg .ff{stroke:var(--err);stroke-width:1.5;stroke-dasharray:3 3}svg .lb,svg .lc{fill:none;"
    "stroke-width:2}svg .lb{stroke:#718096;stroke-dasharray:6 4}svg .lc{stroke:var(--fwd)}",
    "svg .lgb{fill:#718096}svg .lgc,svg .lgf{fill:var(--fwd);font-weight:600}"
    "svg .lgk{fill:var(--bwd);font-weight:600}\n"
    "svg .sf,svg .sb{fill:none;stroke-width:2}svg .sf{stroke:var(--fwd)}svg .sb{stroke:var(--bwd)}"
    "svg .cm{fill:var(--err)}svg .cm2{fill:#fc8181}\n"
    ".tools{margin:0 0 8px}.tools button,.tools select,.tools input{font:inherit;font-size:13px;"
    "padding:3px 10px;border:1px solid #cbd2d9;border-radius:5px;background:#fff}"
    ".tools button{cursor:pointer}.legend{color:var(--mut);font-size:12.5px;margin-left:10px}\n"
    ".dot{display:inline-block;width:10px;height:10px;border-radius:2px;margin:0 3px 0 8px;"
    "vertical-align:-1px}.dot.v0{background:var(--ok)}.dot.v1{background:var(--warn)}"
    ".dot.v2{background:var(--err)}\n"
    ".tree{max-height:640px;overflow:auto;border:1px solid var(--line);border-radius:6px;"
    "padding:6px 8px}\n"
    ".tree details>div{margin-left:18px;border-left:1px dotted #cbd2d9;padding-left:4px}"
    ".tree summary{cursor:pointer;list-style:none;display:block}"
    ".tree summary::-webkit-details-marker{display:none}"
    ".tree summary::before{content:'\\25B8';display:inline-block;width:14px;color:var(--mut)}"
    ".tree details[open]>summary::before{content:'\\25BE'}\n"
    ".tree p{margin:0}.tree p,.tree summary{width:max-content}"
    ".tree p,.tree summary{white-space:nowrap;line-height:1.6}"
    ".tree p,.tree summary{border-left:4px solid var(--ok);padding-left:6px;border-radius:2px}"
    ".tree .v1>summary,.tree p.v1{border-left-color:var(--warn)}"
    ".tree .v2>summary,.tree p.v2{border-left-color:var(--err)}\n"
    ".tree p.x,.tree .x>summary{color:var(--mut);font-style:italic}"
    ".tree p{padding-left:20px}"
    ".tree i,.tree u{color:var(--mut);font:12px system-ui,sans-serif;text-decoration:none}"
    ".tree i{margin-left:8px}\n"
    ".ms i::before{content:'norm rel err '}.mt i::before{content:'cos '}"
    ".mt u::before{content:', max abs err '}.m5 i::before{content:'crc32 '}"
    ".tree i.sv::before{content:'severity '}.tree i.nd::before{content:'not dumped, calls inside: '}\n"
    ".c>:is(i,u):last-child::after,.c>summary>:is(i,u):last-child::after{content:' \\00B7  exact'}"
    ".k1>:is(i,u):last-child::after,.k1>summary>:is(i,u):last-child::after{content:' \\00B7  fuzzy'}"
    ".k2>:is(i,u):last-child::after,.k2>summary>:is(i,u):last-child::after{content:' \\00B7  mapping'}\n"
    ".tree .c>i.um::after,.tree .c>summary>i.um::after{content:none}"
    ".tree i.um{color:var(--err)}\n"
    ".s1::after,.s1>summary::after,.s2::after,.s2>summary::after,.s3::after,.s3>summary::after"
    "{font-size:11px;font-weight:700;border-radius:9px;padding:0 7px;margin-left:8px}"
    "details.s1::after,details.s2::after,details.s3::after{content:none}"
    ".s1::after,.s1>summary::after{content:'culprit';background:var(--err);color:#fff}"
    ".s2::after,.s2>summary::after{content:'propagated';background:#fed7d7;color:#9b2c2c}"
    ".s3::after,.s3>summary::after{content:'contains-culprit';background:#feebc8;color:#9c4221}\n"
    "p#culprit-node::after,#culprit-node>summary::after{content:'\\25C0  first culprit'}"
    "em.t1,em.t2,em.t3{font-style:normal;font-size:11px;font-weight:700;border-radius:9px;padding:0 7px;"
    "margin-left:8px}.t1{background:var(--err);color:#fff}.t2{background:#fed7d7;color:#9b2c2c}"
    ".t3{background:#feebc8;color:#9c4221}\n"
    ".tree p.s1,.tree .s1>summary{background:#fff5f5;color:#742a2a;font-weight:700}"
    "p#culprit-node,#culprit-node>summary{outline:2px solid var(--err);outline-offset:-1px}\n"
    ".tree .g>summary{color:var(--mut);font-size:12.5px}\n"
    ".scroll{max-height:560px;overflow:auto;border:1px solid var(--line);border-radius:6px}\n"
    "table.rows{border-collapse:collapse;font-size:12.5px;width:100%}table.rows th{position:sticky;"
    "top:0;background:#edf0f3;text-align:left;padding:4px 6px;white-space:nowrap}"
    "table.rows td{padding:2px 6px;border-bottom:1px solid #f0f2f5;white-space:nowrap}"
    "table.rows td.why{white-space:normal;min-width:260px;color:var(--mut)}\n",
    "table.rows tr.v2 td:nth-child(3){color:var(--err);font-weight:700}"
    "table.rows tr.v1 td:nth-child(3){color:var(--warn);font-weight:700}"
    "table.rows tr.v2{background:#fff5f5}table.rows tr.v1{background:#fffbeb}\n"
    "#order,#rows{content-visibility:auto;contain-intrinsic-size:auto 600px}\n"
    "footer{color:var(--mut);font-size:12px;text-align:center;padding:0 0 24px}\n"
    "@media(max-width:900px){.heads{grid-template-columns:1fr}.heads .wide{grid-column:1}}\n"
    "</style>\n"};

static const char js[] =
    "<script>\n(function(){\n"
    "var $=function(i){return document.getElementById(i)};\n"
    "function all(o){var d=document.querySelectorAll('#tree-root details');"
    "for(var i=0;i<d.length;i++)d[i].open=o}\n"
    "function path(){all(false);var c=$('culprit-node');if(!c)return;"
    "for(var e=c.parentElement;e;e=e.parentElement)if(e.tagName==='DETAILS')e.open=true;"
    "c.scrollIntoView({block:'center'})}\n"
    "if($('t-open')){$('t-open').onclick=function(){all(true)};"
    "$('t-close').onclick=function(){all(false)};$('t-path').onclick=path}\n"
    "var sel=$('f-verdict'),inp=$('f-name'),cnt=$('f-count'),"
    "rows=document.querySelectorAll('#rows-table tbody tr');\n"
    "function filt(){var v=sel.value,s=inp.value.toLowerCase(),n=0;"
    "for(var i=0;i<rows.length;i++){var r=rows[i],ok=(!v||r.className===v)&&"
    "(!s||r.cells[1].textContent.toLowerCase().indexOf(s)>=0);r.hidden=!ok;if(ok)n++}"
    "cnt.textContent=n+' of '+rows.length+' shown'}\n"
    "if(sel){sel.onchange=filt;inp.oninput=filt;filt()}\n"
    "document.body.setAttribute('data-ready','1');\n"
    "})();\n</script>\n";

static void page_head(FILE *f, const page *pg)
{
    char when[64];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    cmp_html_raw(f, "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
                    "<meta name=viewport content='width=device-width,initial-scale=1'>"
                    "<title>nprobe compare: ");
    if (pg->fp->n_culprits)
        cmp_html_text(f, pg->fp->calls[pg->fp->culprits[0]].name);
    else
        cmp_html_raw(f, pg->failing_pairs ? "differences" : "no differences");
    cmp_html_raw(f, "</title>\n");
    for (size_t i = 0; i < sizeof css / sizeof css[0]; i++)
        cmp_html_raw(f, css[i]);
    cmp_html_raw(f, "</head><body><header><h1>nprobe compare</h1><p>bench ");
    cmp_html_text(f, pg->r->bench_input);
    cmp_html_raw(f, " &nbsp;vs&nbsp; cmp ");
    cmp_html_text(f, pg->r->cmp_input);
    cmp_html_printf(f, " &middot; %s</p></header><main>\n", when);
}

/* Every rank of every failing step, one line each (the first 50). */
static void failing_pairs(FILE *f, const page *pg)
{
    if (!pg->failing_pairs)
        return;
    cmp_html_printf(f, "<h3>Failing step/rank pairs <small>%zu of %zu</small></h3>"
                       "<div class=scroll style='max-height:220px'><table class=rows id=pairs-table>"
                       "<thead><tr><th>step<th>rank<th>error rows<th>warning rows<th>rows"
                       "<th>first culprit</thead><tbody>\n",
                    pg->failing_pairs, pg->n);
    size_t shown = 0;
    for (size_t i = 0; i < pg->n && shown < 50; i++) {
        const np_cmp_pair_digest *p = &pg->d[i];
        if (!pair_fails(p))
            continue;
        shown++;
        cmp_html_printf(f, "<tr class=v2><td>%d<td>%d<td>%zu<td>%zu<td>%zu<td class=nm>", p->step,
                        p->rank, p->count_verdict[NP_VERDICT_ERROR],
                        p->count_verdict[NP_VERDICT_WARNING], p->n_rows);
        cmp_html_text(f, p->n_culprits ? p->first_culprit : "none");
        cmp_html_raw(f, "\n");
    }
    cmp_html_raw(f, "</tbody></table></div>");
    if (pg->failing_pairs > shown)
        cmp_html_printf(f, "<p class=note>... and %zu more failing pairs (the chart shows every "
                           "step; the stdout summary and the per-pair reports list them).</p>",
                        pg->failing_pairs - shown);
    cmp_html_raw(f, "\n");
}

static void steps_section(FILE *f, const page *pg)
{
    cmp_html_printf(f, "<section id=steps><h2>Across steps <small>%d step%s, worst over ranks",
                    pg->n_steps, pg->n_steps == 1 ? "" : "s");
    if (pg->first_fail >= 0)
        cmp_html_printf(f, "; first failing step %d", pg->steps[pg->first_fail].step);
    else
        cmp_html_raw(f, "; no step fails");
    cmp_html_raw(f, "</small></h2>\n");
    cmp_html_steps_chart(f, pg->steps, pg->n_steps, pg->first_fail);
    failing_pairs(f, pg);
    cmp_html_raw(f, "</section>\n");
}

static void order_section(FILE *f, const page *pg)
{
    cmp_html_printf(f, "<section id=order><h2>Along execution order <small>step %d, rank %d: "
                       "worst output severity of each call, forward then backward</small></h2>\n",
                    pg->fp->step, pg->fp->rank);
    cmp_html_order_chart(f, pg->fp);
    cmp_html_raw(f, "</section>\n");
}

np_status np_cmp_write_html_digests(const np_cmp_result *r, const np_cmp_pair_digest *d,
                                    size_t n, const np_cmp_pair *focus, const char *focus_report,
                                    const char *path, np_error *err)
{
    if (!r || !d || n == 0 || !focus)
        return np_error_set(err, NP_ERR_ARG, path, NULL, "no compared pair to report");
    if (focus->shrunk)
        return cmp_shrunk_error(path, err);
    page pg = {.r = r, .d = d, .n = n, .fp = focus, .fp_report = focus_report};
    if (analyse(&pg) != 0)
        return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory for the HTML report");
    /* written to an exclusive temporary, renamed when complete: never a half
     * page, never through a planted symlink (common/outfile.c) */
    np_out out;
    np_status st = np_out_begin(&out, path, NULL, err);
    FILE *f = st == NP_OK ? np_out_stream(&out) : NULL;
    if (!f) {
        free(pg.steps);
        if (st == NP_OK)
            np_out_abort(&out);
        return st != NP_OK ? st
                           : np_error_set(err, NP_ERR_IO, path, NULL,
                                          "cannot create the HTML report");
    }
    setvbuf(f, NULL, _IOFBF, 1 << 20);
    page_head(f, &pg);
    cmp_html_raw(f, "<div class=heads><div class=wide>");
    culprit_box(f, pg.fp);
    cmp_html_raw(f, "</div>");
    counts_box(f, &pg);
    inputs_box(f, &pg);
    cmp_html_raw(f, "</div><br>\n");
    steps_section(f, &pg);
    tree_section(f, &pg);
    order_section(f, &pg);
    rows_section(f, &pg);
    cmp_html_raw(f, "</main><footer>nprobe &middot; self-contained report: no network, "
                    "charts drawn as inline SVG</footer>\n");
    cmp_html_raw(f, js);
    cmp_html_raw(f, "</body></html>\n");
    free(pg.steps);
    return np_out_commit(&out, 0, err);
}

np_status np_cmp_write_html(const np_cmp_result *r, const char *const *pair_reports,
                            const char *path, np_error *err)
{
    if (!r || r->n_pairs == 0)
        return np_error_set(err, NP_ERR_ARG, path, NULL, "no compared pair to report");
    np_cmp_pair_digest *d = malloc(r->n_pairs * sizeof *d);
    if (!d)
        return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory for the HTML report");
    for (size_t i = 0; i < r->n_pairs; i++)
        np_cmp_pair_digest_of(&d[i], &r->pairs[i]);
    size_t fi = np_cmp_focus_pair(r);
    np_status st = np_cmp_write_html_digests(r, d, r->n_pairs, &r->pairs[fi],
                                             pair_reports ? pair_reports[fi] : NULL, path, err);
    free(d);
    return st;
}
