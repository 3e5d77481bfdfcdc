/* compare/parted_noise.c - weights that parted on the noise of the step
 * before (docs/COMPARE.md, "Weights that parted on the noise of the step
 * before"). At a step s > 0 the runs' weights are the optimizer's answer to
 * step s-1's gradients; Adam moves each element by about lr sign(g) on its
 * first steps, so an element whose gradient at s-1 was rounding noise (an
 * attention key bias, which softmax ignores; one element of a bias that
 * cancels) moves by +-lr in either run, whatever the dtype's rounding. A
 * weight that parted beyond its level that way is said as such when the
 * data show it: its gradient at step s-1 is read on both sides (the same
 * rank's files of the step before), an element is noise where min(|g_b|,
 * |g_c|) is at most NOISE x the runs' largest difference on that gradient
 * (the test of an element-normalised update, noise_quotient.c), and the
 * weight, those elements given the bench's value on both sides, must be
 * within its level; and the gradient itself must have been within its
 * level at s-1 (pn_grad_within: a gradient bug of that step makes the
 * runs' largest difference large, so every element would pass as noise;
 * without the weight's gradient, the gradients its call received:
 * pn_flip_grads_within). Then the L2 norm of the runs' difference on those
 * elements is what the weight carries into the calls that use it
 * (verdict.c puts it on their outputs' scale). A weight that parted where
 * its gradient was well defined (a wrong checkpoint, a skipped or a
 * doubled update) is not explained and stays named "the weights parted
 * before this step"; nor is a weight whose replicas over the ranks of a
 * parallel layout differ, or whose gradient's replicas differed at the
 * step before (a gradient left unreduced on some ranks parts the
 * replicas, which one-device noise does not). A sharded side's weights
 * and its step before's gradients are the logical tensors assembled from
 * its ranks' pieces (the step before's files assembled as this step's
 * are). Tensor mode only: the elements are needed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stages.h"

/* Largest weight the rule reads (elements). */
#define PN_MAX_NUMEL (1 << 24)
/* A gradient element within this many times the runs' largest difference
 * on its tensor is noise (as in noise_quotient.c and near_tie.c). */
#define PN_NOISE 2.0

/* Where the gradients come from: the step before's two files, opened on
 * first use (a sharded side's read and assembled as this step's are:
 * own[k], its logical leaves read whole through the assembly's stream),
 * or, when the dump holds no step before (a window of steps, a step's
 * files compared alone), this step's own sides (now: this step's gradient
 * stands in for the step before's). */
typedef struct pn_prev {
    np_dumpio *io[2];
    cmp_dump own[2]; /* a sharded side's step before (own[k].assembly set) */
    cmp_dump *d[2];  /* the sides whose assembly reads sharded leaves, or NULL */
    cmp_arena arena; /* own's strings */
    double scale[2]; /* what their gradients are divided by: the loss scale (a sharded
                      * side's and this step's: times the dp_grad_scale, as this step's
                      * rows are) */
    int now;         /* 1: this step's sides (no step before in the dump) */
    int tried, ok;
} pn_prev;

static double grad_div_of(const cmp_dump *d)
{
    return d->grad_div > 0 && isfinite(d->grad_div) ? d->grad_div : 1.0;
}

/* Side k's file of the step before as a sharded one: read and assembled. */
static int pn_open_sharded(pn_prev *pr, int k, const np_dumpio_ref *ref)
{
    np_error e;
    np_error_clear(&e);
    if (cmp_dump_open(&pr->own[k], ref, 0, 0, NULL, NULL, &pr->arena, &e) != NP_OK)
        return 0;
    if (cmp_assembler(&pr->own[k], &pr->arena, &e) != NP_OK || !pr->own[k].assembly)
        return 0;
    pr->d[k] = &pr->own[k];
    pr->io[k] = pr->own[k].io;
    pr->scale[k] = grad_div_of(&pr->own[k]);
    return 1;
}

static int pn_open(pn_prev *pr, const cmp_pair_priv *pv, const cmp_run_sides *s)
{
    if (pr->tried)
        return pr->ok;
    pr->tried = 1;
    const np_dumpio_ref *ref[2] = {pv->prev_bench, pv->prev_cmp};
    cmp_dump *now[2] = {s->bench, s->cmp};
    if (!ref[0] || !ref[1]) { /* no step before: this step's gradients */
        pr->now = 1;
        for (int k = 0; k < 2; k++) {
            pr->io[k] = now[k]->io;
            pr->d[k] = now[k]->assembly ? now[k] : NULL;
            pr->scale[k] = grad_div_of(now[k]);
        }
        return pr->ok = 1;
    }
    for (int k = 0; k < 2; k++) {
        np_error e;
        np_error_clear(&e);
        if (now[k]->assembly) {
            if (!pn_open_sharded(pr, k, ref[k]))
                return 0;
            continue;
        }
        if (np_dumpio_open_ref(&pr->io[k], ref[k], 0, &e) != NP_OK)
            return 0;
        const np_dumpio_info *in = np_dumpio_get_info(pr->io[k]);
        pr->scale[k] = in && in->loss_scale > 0 && isfinite(in->loss_scale) ? in->loss_scale : 1.0;
    }
    return pr->ok = 1;
}

static void pn_close(pn_prev *pr)
{
    for (int k = 0; k < 2 && !pr->now; k++) {
        if (pr->own[k].io || pr->own[k].assembly) {
            cmp_dump_close(&pr->own[k]); /* closes io[k] */
            free(pr->own[k].entries);
            free(pr->own[k].calls);
        } else {
            np_dumpio_close(pr->io[k]);
        }
    }
    cmp_arena_free(&pr->arena);
}

/* Leaf `leaf` (n elements) of dump d, or of the file io when d is not a
 * sharded side's or the leaf is whole in its file: its values, or NULL. */
static double *pn_values(cmp_dump *d, np_dumpio *io, const char *leaf, int64_t n)
{
    size_t got = 0;
    double *x = malloc((size_t)n * sizeof *x);
    if (!x)
        return NULL;
    np_error e;
    np_error_clear(&e);
    int ok = d && cmp_assembly_has(d, leaf)
                 ? cmp_assembly_values(x, d, leaf, n, &e) == NP_OK
                 : np_dumpio_read_values(x, (size_t)n, &got, io, leaf, n, NULL) == NP_OK &&
                       got == (size_t)n;
    if (!ok) {
        free(x);
        x = NULL;
    }
    return x;
}

/* Leaf `leaf` of side k where the gradients come from. */
static double *pn_read(pn_prev *pr, int k, const char *leaf, int64_t n)
{
    return pn_values(pr->d[k], pr->io[k], leaf, n);
}

/* A leaf whose replicas over side k's ranks differ where the gradients
 * come from (a gradient left unreduced there): not noise. */
static int pn_parted(const pn_prev *pr, int k, const char *leaf)
{
    return pr->d[k] && cmp_assembly_parted(pr->d[k], leaf);
}

/* The gradient leaf of weight leaf `name` into buf, 0 when it has none:
 * "M.forward.N.parameters.P" -> "M.parameters_grad.P" (a module's
 * parameter), "API.op.N.forward.input.K" -> "API.op.N.backward.output.K"
 * (an API call's input at L1). */
static int grad_leaf(char *buf, size_t cap, const char *name, const char *role)
{
    if (!strcmp(role, "parameters")) {
        const char *par = strstr(name, ".parameters.");
        const char *fw = NULL;
        for (const char *q = strstr(name, ".forward."); q && q < par; q = strstr(q + 1, ".forward."))
            fw = q;
        if (!par || !fw)
            return 0;
        return snprintf(buf, cap, "%.*s.parameters_grad.%s", (int)(fw - name), name,
                        par + strlen(".parameters.")) < (int)cap;
    }
    const char *in = strstr(name, ".forward.input.");
    if (!in || strstr(in + 1, ".forward.input."))
        return 0;
    return snprintf(buf, cap, "%.*s.backward.output.%s", (int)(in - name), name,
                    in + strlen(".forward.input.")) < (int)cap;
}

/* The row that holds the same values as row r on both sides and whose cmp
 * side's role is `role` (of a backward call when `backward`), or -1. */
static int same_values_row(const np_cmp_pair *p, const np_cmp_row *r, const char *role,
                           int backward)
{
    for (size_t i = 0; i < p->n_rows; i++) {
        const np_cmp_row *q = &p->rows[i];
        if (q == r || !q->bench || !q->cmp || strcmp(q->cmp->role, role) != 0 ||
            (backward && (q->call_index < 0 || !p->calls[q->call_index].backward)))
            continue;
        const np_cmp_side *a[2] = {r->bench, r->cmp}, *b[2] = {q->bench, q->cmp};
        int same = 1;
        for (int k = 0; k < 2 && same; k++)
            same = a[k]->numel == b[k]->numel && a[k]->crc32 == b[k]->crc32 &&
                   a[k]->stats.norm == b[k]->stats.norm && a[k]->stats.max == b[k]->stats.max &&
                   a[k]->stats.min == b[k]->stats.min &&
                   !strcmp(a[k]->dtype, b[k]->dtype);
        if (same)
            return (int)i;
    }
    return -1;
}

/* A gradient of the step before on both sides (bench leaf lb, cmp leaf lc,
 * n elements), each divided by its step's loss scale, into g[0], g[1]; 0
 * (and both NULL) when either is not there. */
static int pn_read_grads(pn_prev *pr, const char *lb, const char *lc, int64_t n, double *g[2])
{
    g[0] = pn_parted(pr, 0, lb) ? NULL : pn_read(pr, 0, lb, n);
    g[1] = g[0] && !pn_parted(pr, 1, lc) ? pn_read(pr, 1, lc, n) : NULL;
    if (!g[0] || !g[1]) {
        free(g[0]);
        free(g[1]);
        g[0] = g[1] = NULL;
        return 0;
    }
    for (int64_t j = 0; j < n; j++) {
        g[0][j] /= pr->scale[0];
        g[1][j] /= pr->scale[1];
    }
    return 1;
}

/* Row r's gradient at the step before, both sides (divided by their loss
 * scales) into g[0], g[1], its leaf name (the cmp side's) into leaf; 0 when
 * not found. */
static int prev_grad(const np_cmp_pair *p, const np_cmp_row *r, pn_prev *pr, double *g[2],
                     char *leaf, size_t cap)
{
    int64_t n = r->cmp->numel;
    for (int attempt = 0; attempt < 2; attempt++) {
        const np_cmp_row *w = r;
        if (attempt == 1) { /* an API input at mix: its module's parameter */
            int q = strcmp(r->cmp->role, "input") ? -1 : same_values_row(p, r, "parameters", 0);
            if (q < 0)
                return 0;
            w = &p->rows[q];
        }
        if (!grad_leaf(leaf, cap, w->cmp->name, w->cmp->role))
            continue;
        if (pn_read_grads(pr, leaf, leaf, n, g))
            return 1;
    }
    return 0;
}

/* Without its gradient (an L1 leaf whose backward output is not dumped:
 * the token that expand copies), the weight's own values at the step
 * before give the same evidence: where both runs held the same value there
 * and each moved it by the same amount in opposite directions (|u_b + u_c|
 * <= PN_FLIP x max(|u_b|, |u_c|), u the step's update), the element took
 * Adam's normalised step on a gradient whose sign the runs disagree on. The
 * flipped elements are marked 1 in noise[]; 0 when the leaf is not there. */
#define PN_FLIP 0.05

static int prev_flips(const np_cmp_row *r, pn_prev *pr, const double *w[2], unsigned char *noise,
                      double *gap)
{
    int64_t n = r->cmp->numel;
    double *v[2];
    v[0] = pn_read(pr, 0, r->bench->name, n);
    v[1] = v[0] ? pn_read(pr, 1, r->cmp->name, n) : NULL;
    int ok = v[0] && v[1];
    for (int64_t j = 0; ok && j < n; j++) {
        double ub = w[0][j] - v[0][j], uc = w[1][j] - v[1][j];
        double m = fmax(fabs(ub), fabs(uc));
        noise[j] = v[0][j] == v[1][j] && ub * uc < 0 && fabs(ub + uc) <= PN_FLIP * m;
        *gap = fmax(*gap, fabs(v[0][j] - v[1][j]));
    }
    free(v[0]);
    free(v[1]);
    return ok;
}

/* What explains a weight row (pn_explain). */
typedef struct pn_why {
    double dw;       /* L2 norm of the runs' difference on the noise elements */
    int64_t n_noise; /* their count */
    double rest;     /* the weight's relative L2 error without them */
    double noise;    /* the runs' largest difference on the gradient (how 1), on the
                      * weight's values at the step before (how 2) */
    double g_err;    /* the relative L2 error at the step before of the weight's gradient
                      * (how 1), of a gradient its call received (how 2) */
    double g_level;  /* and the level it is held to */
    int how;         /* 1 from the gradient, 2 from the updates (prev_flips), 3 from this
                      * step's gradient (no step before in the dump) */
} pn_why;

/* The rows' own levels (verdict.c's tolerances, which follow the data): row
 * j's as judged here, found by the cmp side's leaf name. */
typedef struct pn_levels {
    const np_cmp_tolerance *t;
    const double *scale;
    const np_strmap *rows; /* cmp leaf name -> row (verdict.c's, one a pair) */
} pn_levels;

/* The bound that keeps a real gradient bug from being excused: the step
 * before's gradient g of weight row i (n elements, leaf `leaf`) must itself
 * have been within its level, its relative L2 error measured as verdict.c
 * measures a row (on max(|g_bench|, atol sqrt(n), the row's scale)) and held
 * to the level of the same gradient row in this step (the tolerances that
 * follow the data), or, for a parameter's gradient, of the API backward
 * output that holds its values here (verdict.c's grad_params_follow: the
 * lower severity of the two); where this step holds no such row, the
 * weight's own level. A gradient beyond it (a backward that computes
 * something else) makes its elements' differences the bug's, not noise. */
static int pn_grad_within(const np_cmp_pair *p, const pn_levels *lv, size_t i, const char *leaf,
                          double *const g[2], int64_t n, pn_why *y)
{
    double d2 = 0, b2 = 0;
    for (int64_t k = 0; k < n; k++) {
        double d = g[1][k] - g[0][k];
        d2 += d * d;
        b2 += g[0][k] * g[0][k];
    }
    int j = np_strmap_get(lv->rows, leaf);
    int rows[3] = {j, -1, -1}, n_rows = 0;
    if (j >= 0 && lv->t[j].rtol > 0)
        n_rows = 1;
    if (j >= 0 && !strcmp(p->rows[j].cmp->role, "parameters_grad") &&
        (rows[n_rows] = same_values_row(p, &p->rows[j], "output", 1)) >= 0 &&
        lv->t[rows[n_rows]].rtol > 0)
        n_rows++;
    if (!n_rows)
        rows[n_rows++] = (int)i;
    double best = INFINITY;
    for (int k = 0; k < n_rows; k++) {
        np_cmp_tolerance t = lv->t[rows[k]];
        double scale = rows[k] == (int)i ? 0 : lv->scale[rows[k]];
        double den = fmax(sqrt(b2), fmax(t.atol * sqrt((double)n), scale));
        double err = den > 0 ? sqrt(d2) / den : (d2 > 0 ? INFINITY : 0);
        if (t.rtol > 0 && err / t.rtol < best) {
            best = err / t.rtol;
            y->g_err = err;
            y->g_level = t.rtol;
        }
    }
    return best <= 1;
}

/* The flips' bound (the weight's gradient not dumped): the gradients its
 * call received at the step before, "C.backward.input.K" of the call C
 * ("X.forward[.N]") that holds weight row i, must each have been within
 * their levels there (pn_grad_within, their rows in this step); a wrong
 * gradient flowing into that call (a bug behind it) flips the updates just
 * as noise does. 0 when none is dumped at both steps. */
static int pn_flip_grads_within(const np_cmp_pair *p, const pn_levels *lv, pn_prev *pr, size_t i,
                                pn_why *y)
{
    const char *call = p->rows[i].cmp->call, *fw = NULL;
    for (const char *x = call ? strstr(call, ".forward") : NULL; x; x = strstr(x + 1, ".forward"))
        if (x[8] == '.' || x[8] == '\0')
            fw = x;
    if (!fw)
        return 0;
    int found = 0;
    for (int k = 0; k < 8; k++) {
        char leaf[2 * NP_FMT_NAME_LEN];
        if (snprintf(leaf, sizeof leaf, "%.*s.backward%s.input.%d", (int)(fw - call), call,
                     fw + 8, k) >= (int)sizeof leaf)
            return 0;
        int j = np_strmap_get(lv->rows, leaf);
        if (j < 0 || !p->rows[j].bench || p->rows[j].cmp->numel <= 0 ||
            p->rows[j].cmp->numel > PN_MAX_NUMEL || p->rows[j].bench->numel != p->rows[j].cmp->numel)
            continue;
        int64_t n = p->rows[j].cmp->numel;
        double *g[2];
        int ok = pn_read_grads(pr, p->rows[j].bench->name, p->rows[j].cmp->name, n, g) &&
                 pn_grad_within(p, lv, i, leaf, g, n, y);
        free(g[0]);
        free(g[1]);
        if (!ok)
            return 0;
        found++;
    }
    return found > 0;
}

/* Row i explained by the noise of the step before (filled into *y); 0 when
 * not. */
static int pn_explain(const np_cmp_pair *p, size_t i, const cmp_run_sides *s, pn_prev *pr,
                      const pn_levels *lv, pn_why *y)
{
    const np_cmp_row *r = &p->rows[i];
    double level = lv->t[i].rtol;
    int64_t n = r->cmp->numel;
    if (n <= 0 || n > PN_MAX_NUMEL || r->bench->numel != n || !r->bench->has_data ||
        !r->cmp->has_data || cmp_assembly_parted(s->bench, r->bench->name) ||
        cmp_assembly_parted(s->cmp, r->cmp->name))
        return 0; /* replicas that differ: a parallel bug, not noise */
    double *g[2] = {NULL, NULL}, *w[2] = {NULL, NULL};
    unsigned char *nz = calloc((size_t)n, 1);
    char leaf[2 * NP_FMT_NAME_LEN];
    int ok = 0;
    w[0] = pn_values(s->bench, s->bench->io, r->bench->name, n);
    w[1] = w[0] ? pn_values(s->cmp, s->cmp->io, r->cmp->name, n) : NULL;
    y->noise = 0;
    if (nz && w[0] && w[1]) {
        if (prev_grad(p, r, pr, g, leaf, sizeof leaf)) {
            y->how = pr->now ? 3 : 1;
            for (int64_t j = 0; j < n; j++)
                y->noise = fmax(y->noise, fabs(g[0][j] - g[1][j]));
            for (int64_t j = 0; j < n; j++)
                nz[j] = y->noise > 0 && fmin(fabs(g[0][j]), fabs(g[1][j])) <= PN_NOISE * y->noise;
            ok = pn_grad_within(p, lv, i, leaf, g, n, y);
        } else if (!pr->now) {
            y->how = 2;
            const double *wc[2] = {w[0], w[1]};
            ok = prev_flips(r, pr, wc, nz, &y->noise) && pn_flip_grads_within(p, lv, pr, i, y);
        }
    }
    if (ok) {
        double d2 = 0, r2 = 0, b2 = 0;
        y->n_noise = 0;
        for (int64_t j = 0; j < n; j++) {
            double d = w[1][j] - w[0][j];
            b2 += w[0][j] * w[0][j];
            if (nz[j]) {
                d2 += d * d;
                y->n_noise++;
            } else {
                r2 += d * d;
            }
        }
        y->dw = sqrt(d2);
        y->rest = b2 > 0 ? sqrt(r2 / b2) : (r2 > 0 ? INFINITY : 0);
        ok = y->n_noise > 0 && y->dw > 0 && y->rest <= level;
    }
    free(nz);
    free(g[0]);
    free(g[1]);
    free(w[0]);
    free(w[1]);
    return ok;
}

/* Row r's reason once explained (y) or refused by the bound (explained 0). */
static void pn_reason(np_cmp_pair *p, np_cmp_row *r, const pn_why *y, int explained)
{
    cmp_pair_priv *pv = p->priv;
    char buf[300], at[80], what[96];
    const char *old = np_cmp_row_reason(buf, sizeof buf, r);
    if (y->how == 3) {
        snprintf(at, sizeof at, "this step (step %d)", p->step);
        snprintf(what, sizeof what, "this step's gradient (step %d; the dump holds no step before)",
                 p->step);
    } else {
        snprintf(at, sizeof at, "step %d", p->step - 1);
        snprintf(what, sizeof what, "step %d's gradient", p->step - 1);
    }
    if (!explained)
        r->reason = cmp_arena_printf(
            &pv->arena,
            "%s; its gradient at %s was beyond its level there (relative L2 error %.3g above "
            "%.3g%s), so the parting is that gradient's, not rounding noise",
            old, at, y->g_err, y->g_level, y->how == 2 ? ", the gradient its call received" : "");
    else if (y->how != 2)
        r->reason = cmp_arena_printf(
            &pv->arena,
            "%s; it parted on the noise of %s: %lld of %lld elements had a gradient within "
            "%.0f x the runs' difference on it there (%.3g), which Adam moves by +-lr either "
            "way%s, and that gradient was within its level (relative L2 error %.3g, at most "
            "%.3g); without them it is within its level (relative error %.3g), and their "
            "difference (L2 %.3g) is what the calls that use it carry",
            old, what, (long long)y->n_noise, (long long)r->cmp->numel, PN_NOISE, y->noise,
            y->how == 3 ? " (this step's gradient stands in for the earlier steps': a gradient "
                          "zero in exact arithmetic is noise at every step)" : "",
            y->g_err, y->g_level, y->rest, y->dw);
    else
        r->reason = cmp_arena_printf(
            &pv->arena,
            "%s; it parted on the noise of %s's gradient (not dumped; its values there agree): "
            "%lld of %lld elements were moved by the same step in opposite directions by the "
            "two runs, Adam's normalised update of a gradient whose sign the runs disagree on, "
            "and the gradient its call received there was within its level (relative L2 error "
            "%.3g, at most %.3g); without them it is within its level (relative error %.3g), "
            "and their difference (L2 %.3g) is what the calls that use it carry",
            old, at, (long long)y->n_noise, (long long)r->cmp->numel, y->g_err, y->g_level,
            y->rest, y->dw);
    r->n_reason_args = 0;
}

int cmp_parted_noise(np_cmp_pair *p, const cmp_run_sides *s, const unsigned char *wt,
                     const np_cmp_tolerance *t, const double *scale, const np_strmap *rows,
                     double *dw)
{
    cmp_pair_priv *pv = p->priv;
    if (!pv || p->step <= 0 || p->mode != NP_CMP_MODE_TENSOR || !s || !s->bench || !s->cmp ||
        !s->bench->io || !s->cmp->io)
        return 0;
    pn_prev pr;
    memset(&pr, 0, sizeof pr);
    pr.scale[0] = pr.scale[1] = 1;
    pn_levels lv = {t, scale, rows};
    int n = 0;
    for (size_t i = 0; i < p->n_rows; i++) {
        np_cmp_row *r = &p->rows[i];
        dw[i] = 0;
        if (!wt[i] || !r->bench || !r->cmp || !(r->severity > 1) || !isfinite(r->severity) ||
            !(t[i].rtol > 0))
            continue;
        if (!pn_open(&pr, pv, s))
            break;
        pn_why y = {0, 0, 0, 0, NAN, NAN, 0};
        if (!pn_explain(p, i, s, &pr, &lv, &y)) {
            if (y.g_err > y.g_level) /* why the noise rule did not apply */
                pn_reason(p, r, &y, 0);
            continue;
        }
        dw[i] = y.dw;
        pn_reason(p, r, &y, 1);
        n++;
    }
    pn_close(&pr);
    if (n && pr.now)
        cmp_note(p, "%d weight row(s) parted beyond their level where this step's gradient is "
                 "rounding noise (elements within %.0f x the runs' difference on it, which Adam "
                 "moves by +-lr in either run, the gradient itself within its level; the dump "
                 "holds no step before, so this step's gradient stands in for the earlier "
                 "steps'): warnings, and the calls that use them are judged at the level that "
                 "difference gives their outputs.",
                 n, PN_NOISE);
    else if (n)
        cmp_note(p, "%d weight row(s) parted beyond their level on the noise of step %d's gradient "
                 "(elements within %.0f x the runs' difference there, which Adam moves by +-lr in "
                 "either run, the gradient itself within its level): warnings, and the calls "
                 "that use them are judged at the level that difference gives their outputs.",
                 n, p->step - 1, PN_NOISE);
    return n;
}
