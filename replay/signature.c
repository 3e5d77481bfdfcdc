/* replay/signature.c - known-defect signatures (docs/COMPARE.md, "Defect
 * signatures"). Some defects stay inside one rounding of a low dtype, so no
 * bound on the isolated error can see them without naming correct ops
 * too; but their error is deterministic given the inputs. A softmax
 * computed without max subtraction, with its exponentials and running sum
 * in float16 (the classic fp16 port), rounds its sum differently in every
 * row: replay recomputes that defect from the dumped inputs and fits the
 * dumped output's departure from the exact result onto the defect's
 * departure (a least-squares coefficient beta). A correct op leaves beta
 * near 0 (its rounding errors do not follow the defect's pattern), the
 * defect gives beta near 1, each with a standard error from the residual.
 * A GELU of the wrong form (tanh for erf) is told by votes (gelu_votes). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nprobe/ops.h"
#include "nprobe/tensor.h"
#include "replay_internal.h"

/* The fit: a signature is found when beta is in [BETA_MIN, BETA_MAX] and
 * beta / its standard error >= Z_MIN (clean runs: |z| <= 5 measured). */
#define BETA_MIN 0.5
#define BETA_MAX 2.0
#define Z_MIN 12.0

typedef struct fit_sums {
    double es, ss, e2s2, es3, s4; /* sums of e.s, s^2, e^2 s^2, e s^3, s^4 */
} fit_sums;

static void fit_add(fit_sums *f, double e, double s)
{
    double s2 = s * s;
    f->es += e * s;
    f->ss += s2;
    f->e2s2 += e * e * s2;
    f->es3 += e * s2 * s;
    f->s4 += s2 * s2;
}

static void fit_merge(fit_sums *a, const fit_sums *b)
{
    a->es += b->es;
    a->ss += b->ss;
    a->e2s2 += b->e2s2;
    a->es3 += b->es3;
    a->s4 += b->s4;
}

/* rd: rounding of a low output dtype (0 none, else the np_dtype). */
static double rnd(int dt, double x)
{
    return dt ? (double)np_round_to((np_dtype)dt, (float)x) : x;
}

/* One row of L logits x (stride 1) -> exact probabilities pc and the
 * defect's pf (exp and running sum in float16, no max subtraction), both
 * rounded to dt when dt != 0. */
static void row_probs(double *pc, double *pf, const double *x, int64_t L, int dt)
{
    double mx = -INFINITY, sum = 0.0;
    for (int64_t j = 0; j < L; j++)
        mx = x[j] > mx ? x[j] : mx;
    for (int64_t j = 0; j < L; j++)
        sum += (pc[j] = exp(x[j] - mx));
    float s = 0.0f;
    for (int64_t j = 0; j < L; j++) {
        pf[j] = np_round_f16(expf(np_round_f16((float)x[j])));
        s = np_round_f16(s + (float)pf[j]);
    }
    for (int64_t j = 0; j < L; j++) {
        pc[j] = rnd(dt, pc[j] / sum);
        pf[j] = rnd(dt, np_round_f16((float)pf[j] / s));
    }
}

/* The attention of one head: scores as a kernel in dtype dt sees them
 * (rounded, scaled in float32, rounded again), both softmaxes, both
 * outputs against the dumped one. Non-finite elements are counted apart. */
static void head_fit(fit_sums *f, int64_t *nonfin, const double *q, const double *k,
                     const double *v, const double *dumped, int64_t T, int64_t S, int64_t D,
                     int64_t Dv, int causal, double scale, int dt, double *work)
{
    double *x = work, *pc = x + S, *pf = pc + S;
    float scf = (float)scale;
    for (int64_t t = 0; t < T; t++) {
        int64_t L = causal ? (t + 1 < S ? t + 1 : S) : S;
        for (int64_t j = 0; j < L; j++) {
            double s = 0.0;
            for (int64_t d = 0; d < D; d++)
                s += q[t * D + d] * k[j * D + d];
            x[j] = dt ? rnd(dt, (double)((float)rnd(dt, s) * scf)) : s * scale;
        }
        row_probs(pc, pf, x, L, dt);
        for (int64_t e = 0; e < Dv; e++) {
            double oc = 0.0, of = 0.0;
            for (int64_t j = 0; j < L; j++) {
                oc += pc[j] * v[j * Dv + e];
                of += pf[j] * v[j * Dv + e];
            }
            double y = dumped[t * Dv + e];
            if (!isfinite(y) || !isfinite(of))
                *nonfin += !isfinite(y) && !isfinite(of);
            else
                fit_add(f, y - oc, of - oc);
        }
    }
}

/* beta and z of the fit; 1 when it is the defect's signature. */
static int judge(char *why, size_t n, const fit_sums *f, int64_t nonfin, const char *what)
{
    if (nonfin > 0 && f->ss <= 0.0) {
        snprintf(why, n, "%s: its %lld non-finite element(s) are where a softmax without max "
                 "subtraction in float16 overflows", what, (long long)nonfin);
        return 1;
    }
    if (!(f->ss > 0.0))
        return 0;
    double beta = f->es / f->ss;
    double v = f->e2s2 - 2.0 * beta * f->es3 + beta * beta * f->s4;
    double sd = sqrt(v > 0.0 ? v : 0.0) / f->ss;
    double z = sd > 0.0 ? beta / sd : (beta > 0.0 ? INFINITY : 0.0);
    if (!(beta >= BETA_MIN && beta <= BETA_MAX && z >= Z_MIN))
        return 0;
    snprintf(why, n, "%s departs from the exact result as a softmax without max subtraction, "
             "exponentials and sum in float16, does (fit %.3g +- %.2g, %.0f standard errors; a "
             "correct op fits ~0)", what, beta, sd, z);
    return 1;
}

static int sdpa_signature(char *why, size_t n, const np_op_call *oc, const double *dumped, int dt,
                          const char *what)
{
    const np_op_tensor *q = &oc->in[0], *k = &oc->in[1], *v = &oc->in[2];
    int nd = q->ndim;
    if (oc->n_in > 3 || oc->sc[2] != 0.0 || nd < 2)
        return 0;
    int64_t BH = np_op_numel(nd - 2, q->shape), T = q->shape[nd - 2], D = q->shape[nd - 1];
    int64_t S = k->shape[nd - 2], Dv = v->shape[nd - 1];
    double scale = oc->sc[1] > 0.0 ? oc->sc[1] : 1.0 / sqrt((double)D);
    int causal = oc->sc[0] != 0.0;
    fit_sums *part = calloc((size_t)(BH > 0 ? BH : 1), sizeof *part);
    int64_t *nf = calloc((size_t)(BH > 0 ? BH : 1), sizeof *nf);
    double *work = malloc((size_t)(3 * S + 1) * sizeof(double) * (size_t)(BH > 0 ? BH : 1));
    int bad = !part || !nf || !work;
#pragma omp parallel for schedule(dynamic) if (!bad && BH * T * S * (D + Dv) > (1 << 18))
    for (int64_t h = 0; h < (bad ? 0 : BH); h++)
        head_fit(&part[h], &nf[h], q->data + h * T * D, k->data + h * S * D, v->data + h * S * Dv,
                 dumped + h * T * Dv, T, S, D, Dv, causal, scale, dt, work + h * (3 * S + 1));
    fit_sums f = {0};
    int64_t nonfin = 0;
    for (int64_t h = 0; h < (bad ? 0 : BH); h++) {
        fit_merge(&f, &part[h]);
        nonfin += nf[h];
    }
    free(part);
    free(nf);
    free(work);
    return !bad && judge(why, n, &f, nonfin, what);
}

static int softmax_signature(char *why, size_t n, const np_op_call *oc, const double *dumped,
                             int dt, const char *what)
{
    const np_op_tensor *x = &oc->in[0];
    int d = (int)oc->sc[0];
    int64_t O = np_op_numel(d, x->shape), N = x->shape[d];
    int64_t In = np_op_numel(x->ndim - d - 1, x->shape + d + 1);
    double *w = malloc((size_t)(3 * N + 1) * sizeof(double));
    if (!w)
        return 0;
    double *row = w, *pc = w + N, *pf = pc + N;
    fit_sums f = {0};
    int64_t nonfin = 0;
    for (int64_t o = 0; o < O; o++)
        for (int64_t i = 0; i < In; i++) {
            const double *xs = x->data + o * N * In + i;
            const double *ys = dumped + o * N * In + i;
            for (int64_t j = 0; j < N; j++)
                row[j] = xs[j * In];
            row_probs(pc, pf, row, N, 0);
            for (int64_t j = 0; j < N; j++) {
                double y = ys[j * In];
                if (!isfinite(y) || !isfinite(pf[j]))
                    nonfin += !isfinite(y) && !isfinite(pf[j]);
                else
                    fit_add(&f, y - pc[j], pf[j] - pc[j]);
            }
        }
    free(w);
    return judge(why, n, &f, nonfin, what);
}

/* GELU in a low dtype: the erf and tanh forms differ by less than one
 * rounding for small inputs (|x| < 1: ~1e-5 against a bfloat16 half-ulp of
 * ~1e-3), so no bound on the error sees the wrong form; but for ~1 % of
 * the elements the two forms round to different values, and each such
 * element is a vote: the dumped value is one rounding or the other. The
 * wrong form is named when it takes at least VOTE_FRAC of at least
 * VOTE_MIN votes (a correct kernel computed in float32 then rounded takes
 * nearly all of them for its own form). */
#define VOTE_MIN 16
#define VOTE_FRAC 0.75

static int gelu_votes(char *why, size_t n, const np_op_call *oc, const double *dumped, int dt,
                      int backward, const char *what)
{
    const np_op_tensor *x = &oc->in[0];
    int64_t ne = x->numel;
    const double *g = backward ? oc->gout[0].data : NULL;
    if (!dt || (backward && !g))
        return 0;
    int own = oc->sc[0] != 0.0;
    double *a = malloc((size_t)(2 * ne + 1) * sizeof(double)), *b = a ? a + ne : NULL;
    if (!a)
        return 0;
    if (backward) {
        np_ref_gelu_backward(a, g, x->data, ne, own);
        np_ref_gelu_backward(b, g, x->data, ne, !own);
    } else {
        np_ref_gelu_forward(a, x->data, ne, own);
        np_ref_gelu_forward(b, x->data, ne, !own);
    }
    int64_t votes = 0, for_own = 0, for_other = 0;
    for (int64_t i = 0; i < ne; i++) {
        double ra = rnd(dt, a[i]), rb = rnd(dt, b[i]);
        if (ra == rb || !isfinite(ra) || !isfinite(rb))
            continue;
        votes++;
        for_own += dumped[i] == ra;
        for_other += dumped[i] == rb;
    }
    free(a);
    if (votes < VOTE_MIN || (double)for_other < VOTE_FRAC * (double)votes)
        return 0;
    snprintf(why, n, "%s is the %s form of GELU rounded, not the %s form asked for: of the %lld "
             "elements where the two forms round differently, %lld hold the %s form's rounding "
             "and %lld the %s form's", what, own ? "erf" : "tanh", own ? "tanh" : "erf",
             (long long)votes, (long long)for_other, own ? "erf" : "tanh", (long long)for_own,
             own ? "tanh" : "erf");
    return 1;
}

int rp_signature(char *why, size_t n, const np_op_call *oc, const double *dumped,
                 const char *dtype, int backward, const char *what)
{
    int dt = 0;
    if (strcmp(dtype, "bfloat16") == 0 || strcmp(dtype, "float16") == 0)
        dt = np_dtype_from_name(dtype);
    if (oc->info->op == NP_OP_GELU)
        return gelu_votes(why, n, oc, dumped, dt, backward, what);
    if (backward)
        return 0;
    if (oc->info->op == NP_OP_SDPA)
        return sdpa_signature(why, n, oc, dumped, dt, what);
    if (oc->info->op == NP_OP_SOFTMAX)
        return softmax_signature(why, n, oc, dumped, dt, what);
    return 0;
}
