/* ops/ref_norm.c - float64 reference kernels of the normalising ops
 * (layer_norm, rms_norm, softmax, log_softmax, scaled_dot_product_attention,
 * cross_entropy) and their registry entries (include/internal/nprobe/ops.h). Each
 * kernel also gives, when asked, the magnitude of every output: the sum of
 * the absolute values of the terms it is made of, so that cancellation
 * (a layer-norm gradient summing to zero, log_softmax near 0) is measured
 * against the size of what cancelled. Rows are independent: OpenMP over
 * rows, never a reduction across threads. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops_ref_internal.h"

#define ROWS_PAR (1 << 15) /* elements above which the row loops go parallel */

/* ---- layer_norm --------------------------------------------------------------- */

static void ln_stats(const double *x, int64_t C, double eps, double *mean, double *rstd)
{
    double m = 0.0, v = 0.0;
    for (int64_t j = 0; j < C; j++)
        m += x[j];
    m /= (double)C;
    for (int64_t j = 0; j < C; j++)
        v += (x[j] - m) * (x[j] - m);
    *mean = m;
    *rstd = 1.0 / sqrt(v / (double)C + eps);
}

void np_ref_layernorm_forward(double *out, double *mag, double *mean, double *rstd,
                              const double *inp, const double *weight, const double *bias,
                              int64_t R, int64_t C, double eps)
{
#pragma omp parallel for if (R * C > ROWS_PAR)
    for (int64_t r = 0; r < R; r++) {
        const double *x = inp + r * C;
        double m, s;
        ln_stats(x, C, eps, &m, &s);
        if (mean)
            mean[r] = m;
        if (rstd)
            rstd[r] = s;
        /* the mean is a sum of C terms: a float32 kernel gets it within
         * ~u mean|x| (not u |mean|), and every output of the row carries
         * that error times rstd (PyTorch's CPU layer_norm: 536 u of |mean|
         * at an element near the mean of a row whose mean is ~0) */
        double mabs = 0.0;
        for (int64_t j = 0; mag && j < C; j++)
            mabs += fabs(x[j]);
        mabs /= (double)C;
        for (int64_t j = 0; j < C; j++) {
            double w = weight ? weight[j] : 1.0, b = bias ? bias[j] : 0.0;
            double xh = (x[j] - m) * s;
            out[r * C + j] = xh * w + b;
            if (mag) /* (x - mean) and (xhat w + b) both cancel */
                mag[r * C + j] = (fabs(x[j]) + mabs) * s * fabs(w) + fabs(b);
        }
    }
}

void np_ref_layernorm_backward(double *dinp, double *dweight, double *dbias, double *mdinp,
                               const double *dout, const double *inp, const double *weight,
                               int64_t R, int64_t C, double eps)
{
    if (dweight)
        memset(dweight, 0, (size_t)C * sizeof(double));
    if (dbias)
        memset(dbias, 0, (size_t)C * sizeof(double));
    for (int64_t r = 0; r < R; r++) {
        const double *x = inp + r * C, *g = dout + r * C;
        double m, s, a = 0.0, b = 0.0, am = 0.0, bm = 0.0;
        ln_stats(x, C, eps, &m, &s);
        for (int64_t j = 0; j < C; j++) {
            double w = weight ? weight[j] : 1.0, xh = (x[j] - m) * s, dxh = g[j] * w;
            a += dxh;
            b += dxh * xh;
            am += fabs(dxh);
            bm += fabs(dxh * xh);
            if (dweight)
                dweight[j] += g[j] * xh;
            if (dbias)
                dbias[j] += g[j];
        }
        a /= (double)C;
        b /= (double)C;
        double mabs = 0.0; /* xhat carries the mean's error, ~u mean|x| rstd */
        for (int64_t j = 0; mdinp && j < C; j++)
            mabs += fabs(x[j]);
        mabs = mabs / (double)C * s;
        for (int64_t j = 0; j < C; j++) {
            double w = weight ? weight[j] : 1.0, xh = (x[j] - m) * s, dxh = g[j] * w;
            if (dinp)
                dinp[r * C + j] = s * (dxh - a - xh * b);
            if (mdinp)
                mdinp[r * C + j] = s * (fabs(dxh) + am / (double)C + (fabs(xh) + mabs) * bm / (double)C);
        }
    }
}

/* input (..., C), weight (C) or absent, bias (C) or absent. */
np_status rt_ref_norm_shape(np_op_call *c, np_error *err)
{
    const np_op_tensor *x = &c->in[0];
    int64_t C = x->ndim ? x->shape[x->ndim - 1] : 0;
    for (int i = 1; i < c->n_in; i++)
        if (c->in[i].data && (c->in[i].ndim != 1 || c->in[i].shape[0] != C))
            return np_error_set(err, NP_ERR_UNSUPPORTED, NULL, c->info->name,
                                "%s: supported is normalisation over the last dimension: input "
                                "(..., C) with weight and bias (C)", c->info->name);
    if (C == 0)
        return np_error_set(err, NP_ERR_SHAPE, NULL, c->info->name,
                            "%s: the input needs a non-empty last dimension", c->info->name);
    c->n_out = 1;
    rt_ref_set_shape(&c->out[0], x->ndim, x->shape);
    return NP_OK;
}

void rt_ref_layernorm_fwd(np_op_call *c)
{
    int64_t C = c->in[0].shape[c->in[0].ndim - 1];
    np_ref_layernorm_forward(c->out[0].data, c->out[0].mag, NULL, NULL, c->in[0].data,
                             c->in[1].data, c->in[2].data, c->in[0].numel / C, C, c->sc[0]);
}

void rt_ref_layernorm_bwd(np_op_call *c)
{
    int64_t C = c->in[0].shape[c->in[0].ndim - 1];
    np_ref_layernorm_backward(c->want_gin[0] ? c->gin[0].data : NULL,
                              c->want_gin[1] && c->in[1].data ? c->gin[1].data : NULL,
                              c->want_gin[2] && c->in[2].data ? c->gin[2].data : NULL,
                              c->want_gin[0] ? c->gin[0].mag : NULL, c->gout[0].data,
                              c->in[0].data, c->in[1].data, c->in[0].numel / C, C, c->sc[0]);
    /* the weight and bias gradients are sums over rows: |terms| summed */
    if (c->want_gin[1] && c->gin[1].mag && c->in[1].data) {
        memset(c->gin[1].mag, 0, (size_t)C * sizeof(double));
        for (int64_t r = 0; r < c->in[0].numel / C; r++) {
            const double *x = c->in[0].data + r * C, *g = c->gout[0].data + r * C;
            double m, s;
            ln_stats(x, C, c->sc[0], &m, &s);
            for (int64_t j = 0; j < C; j++)
                c->gin[1].mag[j] += fabs(g[j] * (x[j] - m) * s);
        }
    }
    if (c->want_gin[2] && c->gin[2].mag && c->in[2].data) {
        memset(c->gin[2].mag, 0, (size_t)C * sizeof(double));
        for (int64_t i = 0; i < c->in[0].numel; i++)
            c->gin[2].mag[i % C] += fabs(c->gout[0].data[i]);
    }
}

/* ---- rms_norm ------------------------------------------------------------------ */

static double rms_inv(const double *x, int64_t C, double eps)
{
    double s = 0.0;
    for (int64_t j = 0; j < C; j++)
        s += x[j] * x[j];
    return 1.0 / sqrt(s / (double)C + eps);
}

void np_ref_rmsnorm_forward(double *out, double *mag, const double *inp, const double *weight,
                            int64_t R, int64_t C, double eps)
{
#pragma omp parallel for if (R * C > ROWS_PAR)
    for (int64_t r = 0; r < R; r++) {
        double s = rms_inv(inp + r * C, C, eps);
        for (int64_t j = 0; j < C; j++) {
            out[r * C + j] = inp[r * C + j] * s * (weight ? weight[j] : 1.0);
            if (mag)
                mag[r * C + j] = fabs(out[r * C + j]);
        }
    }
}

void np_ref_rmsnorm_backward(double *dinp, double *dweight, double *mdinp, const double *dout,
                             const double *inp, const double *weight, int64_t R, int64_t C,
                             double eps)
{
    if (dweight)
        memset(dweight, 0, (size_t)C * sizeof(double));
    for (int64_t r = 0; r < R; r++) {
        const double *x = inp + r * C, *g = dout + r * C;
        double s = rms_inv(x, C, eps), d = 0.0, dm = 0.0;
        for (int64_t j = 0; j < C; j++) {
            double gw = g[j] * (weight ? weight[j] : 1.0);
            d += gw * x[j];
            dm += fabs(gw * x[j]);
            if (dweight)
                dweight[j] += g[j] * x[j] * s;
        }
        d /= (double)C;
        dm /= (double)C;
        for (int64_t j = 0; j < C; j++) {
            double gw = g[j] * (weight ? weight[j] : 1.0);
            if (dinp)
                dinp[r * C + j] = s * (gw - x[j] * s * s * d);
            if (mdinp)
                mdinp[r * C + j] = s * (fabs(gw) + fabs(x[j]) * s * s * dm);
        }
    }
}

void rt_ref_rmsnorm_fwd(np_op_call *c)
{
    int64_t C = c->in[0].shape[c->in[0].ndim - 1];
    np_ref_rmsnorm_forward(c->out[0].data, c->out[0].mag, c->in[0].data, c->in[1].data,
                           c->in[0].numel / C, C, rt_ref_rms_eps(c->sc[0]));
}

void rt_ref_rmsnorm_bwd(np_op_call *c)
{
    int64_t C = c->in[0].shape[c->in[0].ndim - 1], R = c->in[0].numel / C;
    double eps = rt_ref_rms_eps(c->sc[0]);
    np_ref_rmsnorm_backward(c->want_gin[0] ? c->gin[0].data : NULL,
                            c->want_gin[1] && c->in[1].data ? c->gin[1].data : NULL,
                            c->want_gin[0] ? c->gin[0].mag : NULL, c->gout[0].data,
                            c->in[0].data, c->in[1].data, R, C, eps);
    if (c->want_gin[1] && c->gin[1].mag && c->in[1].data) {
        memset(c->gin[1].mag, 0, (size_t)C * sizeof(double));
        for (int64_t r = 0; r < R; r++) {
            double s = rms_inv(c->in[0].data + r * C, C, eps);
            for (int64_t j = 0; j < C; j++)
                c->gin[1].mag[j] += fabs(c->gout[0].data[r * C + j] * c->in[0].data[r * C + j] * s);
        }
    }
}

/* ---- softmax / log_softmax -------------------------------------------------------- */

void np_ref_softmax_forward(double *out, double *mag, const double *inp, int64_t O, int64_t N,
                            int64_t In, int log_form)
{
#pragma omp parallel for if (O * N * In > ROWS_PAR)
    for (int64_t o = 0; o < O; o++)
        for (int64_t i = 0; i < In; i++) {
            const double *x = inp + o * N * In + i;
            double *y = out + o * N * In + i;
            double mx = -INFINITY, sum = 0.0;
            for (int64_t j = 0; j < N; j++)
                mx = x[j * In] > mx ? x[j * In] : mx;
            for (int64_t j = 0; j < N; j++)
                sum += exp(x[j * In] - mx);
            double ls = log(sum);
            for (int64_t j = 0; j < N; j++) {
                double z = x[j * In] - mx;
                y[j * In] = log_form ? z - ls : exp(z) / sum;
                if (mag) /* log_softmax: (x - max) - log(sum) cancels near p = 1 */
                    mag[o * N * In + i + j * In] = log_form ? fabs(z) + ls : fabs(y[j * In]);
            }
        }
}

void np_ref_softmax_backward(double *dinp, double *mdinp, const double *dout, const double *inp,
                             int64_t O, int64_t N, int64_t In, int log_form)
{
    double *p = malloc((size_t)(N > 0 ? N : 1) * sizeof(double));
    if (!p)
        return;
    for (int64_t o = 0; o < O; o++)
        for (int64_t i = 0; i < In; i++) {
            int64_t base = o * N * In + i;
            const double *x = inp + base, *g = dout + base;
            double mx = -INFINITY, sum = 0.0, dot = 0.0, dotm = 0.0;
            for (int64_t j = 0; j < N; j++)
                mx = x[j * In] > mx ? x[j * In] : mx;
            for (int64_t j = 0; j < N; j++)
                sum += (p[j] = exp(x[j * In] - mx));
            for (int64_t j = 0; j < N; j++) {
                p[j] /= sum;
                dot += log_form ? g[j * In] : p[j] * g[j * In];
                dotm += log_form ? fabs(g[j * In]) : p[j] * fabs(g[j * In]);
            }
            for (int64_t j = 0; j < N; j++) {
                double gj = g[j * In];
                dinp[base + j * In] = log_form ? gj - p[j] * dot : p[j] * (gj - dot);
                if (mdinp)
                    mdinp[base + j * In] = log_form ? fabs(gj) + p[j] * dotm : p[j] * (fabs(gj) + dotm);
            }
        }
    free(p);
}

/* input (...), dim in [-ndim, ndim). */
np_status rt_ref_softmax_shape(np_op_call *c, np_error *err)
{
    const np_op_tensor *x = &c->in[0];
    int d = (int)c->sc[0];
    if (d < 0)
        d += x->ndim;
    if (x->ndim < 1 || d < 0 || d >= x->ndim)
        return np_error_set(err, NP_ERR_SHAPE, NULL, c->info->name,
                            "%s: dim %g is outside the input's %d dimensions", c->info->name,
                            c->sc[0], x->ndim);
    c->sc[0] = d;
    c->n_out = 1;
    rt_ref_set_shape(&c->out[0], x->ndim, x->shape);
    return NP_OK;
}

static void softmax_dims(const np_op_call *c, int64_t *O, int64_t *N, int64_t *In)
{
    int d = (int)c->sc[0];
    *O = np_op_numel(d, c->in[0].shape);
    *N = c->in[0].shape[d];
    *In = np_op_numel(c->in[0].ndim - d - 1, c->in[0].shape + d + 1);
}

void rt_ref_softmax_fwd(np_op_call *c)
{
    int64_t O, N, In;
    softmax_dims(c, &O, &N, &In);
    np_ref_softmax_forward(c->out[0].data, c->out[0].mag, c->in[0].data, O, N, In,
                           c->info->op == NP_OP_LOG_SOFTMAX);
}

void rt_ref_softmax_bwd(np_op_call *c)
{
    int64_t O, N, In;
    softmax_dims(c, &O, &N, &In);
    np_ref_softmax_backward(c->gin[0].data, c->gin[0].mag, c->gout[0].data, c->in[0].data, O, N,
                            In, c->info->op == NP_OP_LOG_SOFTMAX);
}

/* ---- cross_entropy ------------------------------------------------------------------ */

static int64_t ce_count(const double *target, int64_t N, int64_t ignore)
{
    int64_t n = 0;
    for (int64_t i = 0; i < N; i++)
        n += (int64_t)target[i] != ignore;
    return n;
}

void np_ref_cross_entropy_forward(double *loss, double *mag, const double *logits,
                                  const double *target, int64_t N, int64_t C, int64_t ignore,
                                  double ls)
{
    double s = 0.0, sm = 0.0;
    int64_t n = ce_count(target, N, ignore);
    for (int64_t i = 0; i < N; i++) {
        int64_t t = (int64_t)target[i];
        if (t == ignore)
            continue;
        const double *x = logits + i * C;
        double mx = -INFINITY, sum = 0.0, mean = 0.0, meanm = 0.0;
        for (int64_t j = 0; j < C; j++)
            mx = x[j] > mx ? x[j] : mx;
        for (int64_t j = 0; j < C; j++) {
            sum += exp(x[j] - mx);
            mean += (x[j] - mx) / (double)C;
            meanm += fabs(x[j] - mx) / (double)C;
        }
        double lse = log(sum), xt = (t >= 0 && t < C) ? x[t] - mx : NAN;
        s += (1.0 - ls) * (lse - xt) + ls * (lse - mean);
        sm += lse + (1.0 - ls) * fabs(xt) + ls * meanm;
    }
    *loss = s / (double)n;
    if (mag)
        *mag = sm / (double)n;
}

void np_ref_cross_entropy_backward(double *dlogits, double *mdlogits, double dloss,
                                   const double *logits, const double *target, int64_t N,
                                   int64_t C, int64_t ignore, double ls)
{
    int64_t n = ce_count(target, N, ignore);
    double g = dloss / (double)n;
    for (int64_t i = 0; i < N; i++) {
        int64_t t = (int64_t)target[i];
        const double *x = logits + i * C;
        double mx = -INFINITY, sum = 0.0;
        for (int64_t j = 0; j < C; j++)
            mx = x[j] > mx ? x[j] : mx;
        for (int64_t j = 0; j < C; j++)
            sum += exp(x[j] - mx);
        for (int64_t j = 0; j < C; j++) {
            double p = exp(x[j] - mx) / sum, q = (1.0 - ls) * (j == t) + ls / (double)C;
            dlogits[i * C + j] = t == ignore ? 0.0 : g * (p - q);
            if (mdlogits)
                mdlogits[i * C + j] = t == ignore ? 0.0 : fabs(g) * (p + q);
        }
    }
}

/* logits (..., C) flattened to rows, targets (rows) of integers. */
np_status rt_ref_cross_entropy_shape(np_op_call *c, np_error *err)
{
    const np_op_tensor *x = &c->in[0], *t = &c->in[1];
    int64_t C = x->ndim ? x->shape[x->ndim - 1] : 0;
    /* torch takes the classes at dim 1 (logits (N, C, d...), target (N, d...)):
     * recomputed are (N, C) and the runtime's (..., C) with flattened targets */
    if (x->ndim < 2 || C == 0 || t->numel * C != x->numel || (x->ndim > 2 && t->ndim != 1))
        return np_error_set(err, NP_ERR_UNSUPPORTED, NULL, "cross_entropy",
                            "cross_entropy: supported are logits (..., C) with one class index "
                            "per row (class probabilities and weights are not)");
    int64_t ig = (int64_t)c->sc[0];
    for (int64_t i = 0; i < t->numel; i++)
        if ((int64_t)t->data[i] != ig && !(t->data[i] >= 0 && t->data[i] < (double)C))
            return np_error_set(err, NP_ERR_SHAPE, NULL, "cross_entropy",
                                "cross_entropy: target %g at %lld is not a class of %lld",
                                t->data[i], (long long)i, (long long)C);
    if (ce_count(t->data, t->numel, ig) == 0)
        return np_error_set(err, NP_ERR_UNSUPPORTED, NULL, "cross_entropy",
                            "cross_entropy: every target is ignore_index (the loss is NaN)");
    c->n_out = 1;
    rt_ref_set_shape(&c->out[0], 0, NULL);
    return NP_OK;
}

const char *rt_ref_cross_entropy_unsupported(const np_op_call *c)
{
    return c->sc[2] != 1.0 ? "cross_entropy: the float64 reference takes reduction 'mean' only"
                           : NULL;
}

void rt_ref_cross_entropy_fwd(np_op_call *c)
{
    int64_t C = c->in[0].shape[c->in[0].ndim - 1];
    np_ref_cross_entropy_forward(c->out[0].data, c->out[0].mag, c->in[0].data, c->in[1].data,
                                 c->in[1].numel, C, (int64_t)c->sc[0], c->sc[1]);
}

void rt_ref_cross_entropy_bwd(np_op_call *c)
{
    int64_t C = c->in[0].shape[c->in[0].ndim - 1];
    double g = c->gout[0].data ? c->gout[0].data[0] : 0.0;
    if (c->want_gin[0])
        np_ref_cross_entropy_backward(c->gin[0].data, c->gin[0].mag, g, c->in[0].data,
                                      c->in[1].data, c->in[1].numel, C, (int64_t)c->sc[0],
                                      c->sc[1]);
}
