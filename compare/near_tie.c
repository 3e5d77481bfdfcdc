/* compare/near_tie.c - a discrete choice that flipped on a near-tie
 * (docs/COMPARE.md, "A choice that flipped on a near-tie"): a top-k router
 * (topk, sort, max, min, ...) whose inputs agree within their level picks
 * another index where two of its inputs lie closer than the runs' noise.
 * The values it returns agree, the indices differ, and everything that
 * follows computes with another choice: rows that no level can make right.
 * Such a flip is said as such ("the choice flipped on a near-tie (margin X
 * vs noise Y)"), its rows and the rows after it are warnings that name no
 * culprit, and the pair's notes say it once. A choice the cmp makes from
 * values of another dtype than the bench's (a router softmax in bfloat16
 * where the bench's is float32) is not excused: that is the choice's own
 * computation differing, and it stays the culprit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Ops that return values and the indices they chose (API names after
 * "Torch." / "Tensor." / "Functional."). */
static const char *const choice_api[] = {"topk", "sort", "max", "min", "kthvalue", "median",
                                         "mode", NULL};

/* Largest input a flip's margin is measured on (elements). */
#define TIE_MAX_NUMEL (1 << 24)


static int int_dtype(const char *d)
{
    return d && (!strcmp(d, "int64") || !strcmp(d, "int32") || !strcmp(d, "bool"));
}

static int choice_call(const np_cmp_call *c)
{
    const char *op;
    size_t n = cmp_forward_api_op(c, &op);
    for (int i = 0; n && choice_api[i]; i++)
        if (cmp_op_is(op, n, choice_api[i]))
            return 1;
    return 0;
}

/* One choice call's rows. */
typedef struct tie_call {
    int in, val, idx;   /* row of its first float input, float output, index output; -1 none */
    char idx_err;       /* an index output differs */
    char other_err;     /* any other row of it fails, or is on one side only */
    char lower;         /* a float input has another dtype on the two sides */
    double dim;         /* kwargs dim (NAN: not given) */
} tie_call;

static void tie_gather(const np_cmp_pair *p, tie_call *tc)
{
    for (size_t k = 0; k < p->n_calls; k++)
        tc[k] = (tie_call){-1, -1, -1, 0, 0, 0, NAN};
    for (size_t i = 0; i < p->n_rows; i++) {
        const np_cmp_row *r = &p->rows[i];
        if (r->call_index < 0 || !choice_call(&p->calls[r->call_index]))
            continue;
        tie_call *t = &tc[r->call_index];
        int err = r->verdict == NP_VERDICT_ERROR;
        if (!r->bench || !r->cmp) {
            t->other_err |= (char)err;
            continue;
        }
        const char *role = r->cmp->role;
        size_t ln = strlen(r->cmp->name);
        if (!strcmp(role, "kwargs")) {
            if (ln > 4 && !strcmp(r->cmp->name + ln - 4, ".dim"))
                t->dim = r->cmp->stats.max;
            t->other_err |= (char)err;
        } else if (!strcmp(role, "output") && int_dtype(r->cmp->dtype)) {
            t->idx_err |= (char)err;
            if (t->idx < 0)
                t->idx = (int)i;
        } else {
            t->other_err |= (char)err;
            if (!int_dtype(r->cmp->dtype) && strcmp(r->cmp->dtype, r->bench->dtype) != 0)
                t->lower = 1;
            if (!strcmp(role, "input") && t->in < 0 && !int_dtype(r->cmp->dtype))
                t->in = (int)i;
            if (!strcmp(role, "output") && t->val < 0 && !int_dtype(r->cmp->dtype))
                t->val = (int)i;
        }
    }
}

/* The flip's margin (the largest gap, in the bench's inputs, between the
 * index the bench chose and the one the cmp chose) and the noise (the
 * largest difference between the runs of an input of a token that flipped);
 * NAN both when they cannot be measured (statistics mode, a choice along
 * another dimension than the last, a payload unreadable). *n_flip / *n_all:
 * the choices that differ, of all. */
static void tie_margin(const cmp_run_sides *s, const np_cmp_pair *p, const tie_call *t,
                       double *margin, double *noise, long long *n_flip, long long *n_all)
{
    *margin = *noise = NAN;
    *n_flip = *n_all = 0;
    const np_cmp_row *ri = &p->rows[t->in], *rx = &p->rows[t->idx];
    const np_cmp_side *bi = ri->bench, *ci = ri->cmp, *bx = rx->bench, *cx = rx->cmp;
    if (!s || !s->bench || !s->cmp || !s->bench->io || !s->cmp->io || !bi->has_data ||
        !ci->has_data || !bx->has_data || !cx->has_data || bi->ndim < 1 || bx->ndim < 1 ||
        bi->numel > TIE_MAX_NUMEL || bx->numel > TIE_MAX_NUMEL || bx->numel != cx->numel ||
        bi->numel != ci->numel || (!isnan(t->dim) && t->dim != -1 && t->dim != bi->ndim - 1))
        return;
    int64_t kk = bx->shape[bx->ndim - 1], e = bi->shape[bi->ndim - 1];
    if (kk <= 0 || e <= 0 || bx->numel % kk || bi->numel % e || bx->numel / kk != bi->numel / e)
        return;
    int64_t nt = bi->numel / e;
    double *xb = malloc((size_t)bi->numel * sizeof *xb), *xc = malloc((size_t)bi->numel * sizeof *xc);
    double *ib = malloc((size_t)bx->numel * sizeof *ib), *ic = malloc((size_t)bx->numel * sizeof *ic);
    size_t g[4] = {0, 0, 0, 0};
    if (xb && xc && ib && ic &&
        np_dumpio_read_values(xb, (size_t)bi->numel, &g[0], s->bench->io, bi->name, bi->numel, NULL) == NP_OK &&
        np_dumpio_read_values(xc, (size_t)ci->numel, &g[1], s->cmp->io, ci->name, ci->numel, NULL) == NP_OK &&
        np_dumpio_read_values(ib, (size_t)bx->numel, &g[2], s->bench->io, bx->name, bx->numel, NULL) == NP_OK &&
        np_dumpio_read_values(ic, (size_t)cx->numel, &g[3], s->cmp->io, cx->name, cx->numel, NULL) == NP_OK &&
        g[0] == (size_t)bi->numel && g[1] == g[0] && g[2] == (size_t)bx->numel && g[3] == g[2]) {
        double m = 0, n = 0;
        for (int64_t tok = 0; tok < nt; tok++) {
            const double *b = xb + tok * e, *c = xc + tok * e;
            double tok_noise = -1;
            for (int64_t j = 0; j < kk; j++) {
                double a = ib[tok * kk + j], z = ic[tok * kk + j];
                (*n_all)++;
                if (a == z)
                    continue;
                if (!(a >= 0 && a < (double)e && z >= 0 && z < (double)e)) {
                    m = INFINITY; /* an index out of range is no tie */
                    continue;
                }
                (*n_flip)++;
                m = fmax(m, fabs(b[(int64_t)a] - b[(int64_t)z]));
                if (tok_noise < 0) {
                    tok_noise = 0;
                    for (int64_t q = 0; q < e; q++)
                        tok_noise = fmax(tok_noise, fabs(c[q] - b[q]));
                }
                n = fmax(n, tok_noise);
            }
        }
        if (*n_flip) {
            *margin = m;
            *noise = n;
        }
    }
    free(xb);
    free(xc);
    free(ib);
    free(ic);
}

/* 1 when call f is k or a module around k. */
static int encloses(const np_cmp_pair *p, const np_strmap *byname, size_t f, size_t k)
{
    const char *par = p->calls[k].parent;
    if (f == k)
        return 1;
    for (int d = 0; par && par[0] && d < 64; d++) {
        int j = np_strmap_get(byname, par);
        if (j < 0)
            return 0;
        if ((size_t)j == f)
            return 1;
        par = p->calls[j].parent;
    }
    return 0;
}

/* The rows of the flip and after it: warnings of severity 0 that name no
 * culprit; returns how many rows were errors. */
static int tie_settle(np_cmp_pair *p, cmp_arena *a, size_t f, const char *why)
{
    np_strmap byname = {0};
    int n = 0;
    if (np_strmap_init(&byname, p->n_calls + 1) != 0)
        return 0;
    for (size_t k = 0; k < p->n_calls; k++)
        np_strmap_put(&byname, p->calls[k].name, (int)k);
    int64_t s0 = p->calls[f].seq;
    for (size_t i = 0; i < p->n_rows; i++) {
        np_cmp_row *r = &p->rows[i];
        if (r->verdict != NP_VERDICT_ERROR || r->call_index < 0)
            continue;
        size_t k = (size_t)r->call_index;
        const np_cmp_side *sd = r->cmp ? r->cmp : r->bench;
        int after = p->calls[k].seq > s0 ||
                    ((size_t)k != f && encloses(p, &byname, k, f) && sd && strcmp(sd->role, "output") == 0);
        if (k != f && !after)
            continue;
        char buf[300];
        const char *old = np_cmp_row_reason(buf, sizeof buf, r);
        r->reason = k == f ? why
                           : cmp_arena_printf(a, "after the near-tie flip at %s the runs compute with "
                                     "different choices: not judged (%s)",
                                     p->calls[f].name, old[0] ? old : "differs");
        r->verdict = NP_VERDICT_WARNING;
        r->severity = 0;
        r->n_reason_args = 0;
        n++;
    }
    np_strmap_free(&byname);
    return n;
}

/* The first choice call whose only failing rows are its indices, with no
 * error in a forward API call before it; -1 none. */
static int first_flip(const np_cmp_pair *p, const tie_call *tc)
{
    int f = -1;
    for (size_t k = 0; k < p->n_calls; k++)
        if (tc[k].idx_err && !tc[k].other_err && tc[k].in >= 0 && tc[k].val >= 0 &&
            (f < 0 || p->calls[k].seq < p->calls[f].seq))
            f = (int)k;
    for (size_t i = 0; f >= 0 && i < p->n_rows; i++) {
        const np_cmp_row *r = &p->rows[i];
        if (r->verdict != NP_VERDICT_ERROR || r->call_index < 0 || r->call_index == f)
            continue;
        const np_cmp_call *c = &p->calls[r->call_index];
        if (!c->backward && !strcmp(c->kind, "api") && c->seq < p->calls[f].seq)
            return -1; /* the flip follows an earlier failure */
    }
    return f;
}

void cmp_near_ties(np_cmp_pair *p, const cmp_run_sides *s)
{
    cmp_pair_priv *pv = p->priv;
    if (!pv || !p->n_calls || p->mode == NP_CMP_MODE_MD5)
        return;
    tie_call *tc = calloc(p->n_calls, sizeof *tc);
    if (!tc)
        return;
    tie_gather(p, tc);
    int f = first_flip(p, tc);
    if (f < 0) {
        free(tc);
        return;
    }
    const tie_call *t = &tc[f];
    np_cmp_row *rx = &p->rows[t->idx];
    if (t->lower) {
        /* the choice's own computation differs: it stays the culprit */
        char buf[300];
        rx->reason = cmp_arena_printf(&pv->arena, "%s; the choice is made from %s values here and %s in "
                             "the bench: a choice computed in another dtype than the reference's "
                             "(a router softmax in %s) is no near-tie",
                             np_cmp_row_reason(buf, sizeof buf, rx), p->rows[t->in].cmp->dtype,
                             p->rows[t->in].bench->dtype, p->rows[t->in].cmp->dtype);
        rx->n_reason_args = 0;
        free(tc);
        return;
    }
    double margin, noise;
    long long n_flip, n_all;
    tie_margin(s, p, t, &margin, &noise, &n_flip, &n_all);
    if (!isnan(margin) && !(margin <= 2 * noise)) {
        rx->reason = cmp_arena_printf(&pv->arena, "integer values differ: the choice flipped where its "
                             "inputs are apart by %.3g, beyond what the runs' noise (%.3g) can "
                             "flip: no near-tie", margin, noise);
        rx->n_reason_args = 0;
        free(tc);
        return;
    }
    const char *why =
        isnan(margin)
            ? cmp_arena_printf(&pv->arena, "the choice flipped on a near-tie: its inputs and the values it "
                      "returns agree within their level while the indices differ (the margin "
                      "cannot be measured here: %s); not a defect, the runs route differently "
                      "from here",
                      p->mode == NP_CMP_MODE_TENSOR ? "the payloads do not allow it"
                                                    : "statistics mode")
            : cmp_arena_printf(&pv->arena, "the choice flipped on a near-tie (margin %.3g vs noise %.3g: "
                      "%lld of %lld choices differ, each between inputs closer than the runs' "
                      "difference); not a defect, the runs route differently from here",
                      margin, noise, n_flip, n_all);
    int n = tie_settle(p, &pv->arena, (size_t)f, why);
    memset(p->count_verdict, 0, sizeof p->count_verdict);
    for (size_t i = 0; i < p->n_rows; i++)
        p->count_verdict[p->rows[i].verdict]++;
    if (isnan(margin))
        cmp_note(p, "The choice of %s flipped on a near-tie (its inputs and values agree, its "
                 "indices differ; the margin is not measurable here): the runs compute with "
                 "different choices from there, so its %d failing rows and those after it are "
                 "warnings, not judged.", p->calls[f].name, n);
    else
        cmp_note(p, "The choice of %s flipped on a near-tie (margin %.3g vs noise %.3g; %lld of "
                 "%lld choices): the runs compute with different choices from there, so its %d "
                 "failing rows and those after it are warnings, not judged.",
                 p->calls[f].name, margin, noise, n_flip, n_all, n);
    free(tc);
}
