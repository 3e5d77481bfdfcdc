/* compare/noise_quotient.c - an update normalised element by element
 * (docs/COMPARE.md, "An update normalised element by element"): Adam's
 * and AdamW's step is param.addcdiv_(m, sqrt(v) + eps, value=-lr / bc),
 * each element divided by its own magnitude, so its first update is about
 * -lr sign(g). Where an element of m (or of the denominator) is no larger
 * than the runs' difference on that tensor (a gradient that is rounding
 * noise: an attention key bias, a norm's bias whose gradient cancels), the
 * quotient is noise over noise and the two runs move that weight by +-lr,
 * or one by lr and the other by nothing: a difference of order 1 that the
 * inputs, which agree within their level, cannot bound. A call whose
 * inputs pass and whose output fails only there is said as such: its
 * output rows become warnings when the output, those elements left out,
 * is within its level. The rest of the update is judged as before (a wrong
 * learning rate is its scalar argument, a wrong eps the denominator's
 * add), and a quotient that differs where its operands are well above the
 * noise stays an error. Tensor mode only (the elements are needed). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Largest operand the rule reads (elements). */
#define NQ_MAX_NUMEL (1 << 24)
/* An operand element within this many times the runs' largest difference
 * on its tensor is noise (as a near-tie's margin, near_tie.c). */
#define NQ_NOISE 2.0

/* 1 when call c is a forward addcdiv / addcdiv_ (Tensor., Torch.). */
static int quotient_call(const np_cmp_call *c)
{
    const char *op;
    size_t n = cmp_forward_api_op(c, &op);
    return cmp_op_is(op, n, "addcdiv") || cmp_op_is(op, n, "addcdiv_");
}

/* One call's rows: its numerator (input.1), denominator (input.2) and
 * first output; -1 none. bad: an input or argument row fails, or a row is
 * on one side only. */
typedef struct nq_call {
    int num, den, out;
    char bad;
} nq_call;

static int ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && !strcmp(s + a - b, tail);
}

static void nq_gather(const np_cmp_pair *p, nq_call *qc)
{
    for (size_t k = 0; k < p->n_calls; k++)
        qc[k] = (nq_call){-1, -1, -1, 0};
    for (size_t i = 0; i < p->n_rows; i++) {
        const np_cmp_row *r = &p->rows[i];
        if (r->call_index < 0 || !quotient_call(&p->calls[r->call_index]))
            continue;
        nq_call *q = &qc[r->call_index];
        if (!r->bench || !r->cmp) {
            q->bad = 1;
            continue;
        }
        const char *nm = r->cmp->name;
        if (!strcmp(r->cmp->role, "output")) {
            if (q->out < 0 && ends_with(nm, ".output.0"))
                q->out = (int)i;
            continue;
        }
        if (r->verdict == NP_VERDICT_ERROR)
            q->bad = 1;
        if (ends_with(nm, ".input.1"))
            q->num = (int)i;
        else if (ends_with(nm, ".input.2"))
            q->den = (int)i;
    }
}

static double *read_side(cmp_dump *d, const np_cmp_side *s)
{
    size_t got = 0;
    double *x = malloc((size_t)s->numel * sizeof *x);
    if (x && (np_dumpio_read_values(x, (size_t)s->numel, &got, d->io, s->name, s->numel, NULL) != NP_OK ||
              got != (size_t)s->numel)) {
        free(x);
        x = NULL;
    }
    return x;
}

static double max_diff(const double *b, const double *c, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs(c[i] - b[i]));
    return m;
}

/* The output's severity with the elements whose numerator or denominator
 * is noise left out (both sides given the bench's value there), bounded
 * from above by scaling the row's severity with the drop of its distance
 * and of its cosine deficit; NAN when it cannot be measured. *n_noise:
 * the elements left out, *noise: the numerator's noise. */
static double nq_masked(const cmp_run_sides *s, const np_cmp_pair *p, const nq_call *q,
                        int64_t *n_noise, double *noise)
{
    const np_cmp_row *rn = &p->rows[q->num], *rd = &p->rows[q->den], *ro = &p->rows[q->out];
    const np_cmp_side *sd[6] = {rn->bench, rn->cmp, rd->bench, rd->cmp, ro->bench, ro->cmp};
    int64_t n = ro->bench->numel;
    *n_noise = 0;
    *noise = NAN;
    if (!ro->m || !(ro->m->euc_dist > 0) || n <= 0 || n > NQ_MAX_NUMEL)
        return NAN;
    for (int k = 0; k < 6; k++)
        if (!sd[k]->has_data || sd[k]->numel != n)
            return NAN;
    double *x[6] = {NULL};
    double sev = NAN;
    int ok = 1;
    for (int k = 0; k < 6 && ok; k++)
        ok = (x[k] = read_side(k % 2 ? s->cmp : s->bench, sd[k])) != NULL;
    if (ok) {
        double nn = max_diff(x[0], x[1], n), nd = max_diff(x[2], x[3], n);
        for (int64_t i = 0; i < n; i++)
            if (fmin(fabs(x[0][i]), fabs(x[1][i])) <= NQ_NOISE * nn ||
                fmin(fabs(x[2][i]), fabs(x[3][i])) <= NQ_NOISE * nd) {
                x[5][i] = x[4][i];
                (*n_noise)++;
            }
        np_cmp_metrics m;
        np_cmp_metrics_f64(&m, x[4], x[5], n, ro->bench->ndim, 0.0);
        double c0 = 1.0 - ro->m->cosine, c1 = 1.0 - m.cosine;
        double f = m.euc_dist / ro->m->euc_dist;
        if (c0 > 0 && c1 > 0)
            f = fmax(f, sqrt(c1 / c0));
        else if (!(c0 > 0) && c1 > 0)
            f = INFINITY;
        sev = ro->severity * f;
        *noise = nn;
    }
    for (int k = 0; k < 6; k++)
        free(x[k]);
    return sev;
}

void cmp_noise_quotients(np_cmp_pair *p, const cmp_run_sides *s)
{
    cmp_pair_priv *pv = p->priv;
    if (!pv || !p->n_calls || p->mode != NP_CMP_MODE_TENSOR || !s || !s->bench || !s->cmp ||
        !s->bench->io || !s->cmp->io)
        return;
    nq_call *qc = calloc(p->n_calls, sizeof *qc);
    if (!qc)
        return;
    nq_gather(p, qc);
    int changed = 0, first = -1;
    long long n_all = 0;
    for (size_t k = 0; k < p->n_calls; k++) {
        const nq_call *q = &qc[k];
        if (q->bad || q->num < 0 || q->den < 0 || q->out < 0 ||
            p->rows[q->out].verdict != NP_VERDICT_ERROR || !isfinite(p->rows[q->out].severity))
            continue;
        int64_t n_noise;
        double noise, sev = nq_masked(s, p, q, &n_noise, &noise);
        if (!(sev <= 1) || n_noise == 0)
            continue;
        np_cmp_row *r = &p->rows[q->out];
        char buf[300];
        const char *old = np_cmp_row_reason(buf, sizeof buf, r);
        r->reason = cmp_arena_printf(
            &pv->arena,
            "%s; an update normalised element by element (Adam's m / (sqrt(v) + eps)): %lld of "
            "%lld elements have a numerator or denominator within %.0f x the runs' difference on "
            "it (numerator noise %.3g), where the quotient is noise over noise; without them the "
            "output is within its level (severity %.3g): not a defect",
            old, (long long)n_noise, (long long)r->bench->numel, NQ_NOISE, noise, sev);
        r->verdict = NP_VERDICT_WARNING;
        r->severity = sev;
        r->n_reason_args = 0;
        changed++;
        n_all += n_noise;
        if (first < 0)
            first = (int)k;
    }
    if (changed) {
        cmp_note(p, "%d update call(s) from %s on divide elements of a gradient that is rounding "
                 "noise (%lld elements: Adam normalises each element, so those move by +-lr in "
                 "either run): their outputs are warnings, judged without those elements.",
                 changed, p->calls[first].name, n_all);
        memset(p->count_verdict, 0, sizeof p->count_verdict);
        for (size_t i = 0; i < p->n_rows; i++)
            p->count_verdict[p->rows[i].verdict]++;
    }
    free(qc);
}
