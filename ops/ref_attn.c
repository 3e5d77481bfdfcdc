/* ops/ref_attn.c - float64 reference kernel of
 * Functional.scaled_dot_product_attention, forward and backward, with the
 * magnitudes of its outputs (include/internal/nprobe/ops.h). One head at a time,
 * OpenMP over heads (each head writes only its own outputs). A causal mask
 * is PyTorch's: query t sees keys 0..t (top-left aligned when S != T). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops_ref_internal.h"

/* P (T,S) = softmax of the scores of one head; returns the keys row t sees. */
static int64_t seen(int64_t t, int64_t S, int causal)
{
    return causal ? (t + 1 < S ? t + 1 : S) : S;
}

static void head_probs(double *P, const double *q, const double *k, int64_t T, int64_t S,
                       int64_t D, int causal, double scale)
{
    for (int64_t t = 0; t < T; t++) {
        double *p = P + t * S, mx = -INFINITY, sum = 0.0;
        int64_t L = seen(t, S, causal);
        for (int64_t j = 0; j < L; j++) {
            double s = 0.0;
            for (int64_t d = 0; d < D; d++)
                s += q[t * D + d] * k[j * D + d];
            p[j] = s * scale;
            mx = p[j] > mx ? p[j] : mx;
        }
        for (int64_t j = 0; j < L; j++)
            sum += (p[j] = exp(p[j] - mx));
        for (int64_t j = 0; j < L; j++)
            p[j] /= sum;
        for (int64_t j = L; j < S; j++)
            p[j] = 0.0;
    }
}

void np_ref_sdpa_forward(double *out, double *mag, const double *q, const double *k,
                         const double *v, int64_t BH, int64_t T, int64_t S, int64_t D, int64_t Dv,
                         int causal, double scale)
{
    double *Pall = malloc((size_t)(BH * T * S + 1) * sizeof(double));
    if (!Pall)
        return;
#pragma omp parallel for schedule(dynamic) if (BH * T * S * D > (1 << 18))
    for (int64_t h = 0; h < BH; h++) {
        double *P = Pall + h * T * S;
        const double *vh = v + h * S * Dv;
        head_probs(P, q + h * T * D, k + h * S * D, T, S, D, causal, scale);
        for (int64_t t = 0; t < T; t++)
            for (int64_t e = 0; e < Dv; e++) {
                double o = 0.0, m = 0.0;
                for (int64_t j = 0; j < S; j++) {
                    o += P[t * S + j] * vh[j * Dv + e];
                    m += P[t * S + j] * fabs(vh[j * Dv + e]);
                }
                out[(h * T + t) * Dv + e] = o;
                if (mag)
                    mag[(h * T + t) * Dv + e] = m;
            }
    }
    free(Pall);
}

/* dS = P o (dP - rowdot), its magnitude P o (|dO||V|^T + rowdot of those). */
static void head_dscores(double *dS, double *mS, const double *P, const double *go,
                         const double *vh, int64_t T, int64_t S, int64_t Dv)
{
    for (int64_t t = 0; t < T; t++) {
        double dot = 0.0, dotm = 0.0;
        for (int64_t j = 0; j < S; j++) {
            double dp = 0.0, dm = 0.0;
            for (int64_t e = 0; e < Dv; e++) {
                dp += go[t * Dv + e] * vh[j * Dv + e];
                dm += fabs(go[t * Dv + e] * vh[j * Dv + e]);
            }
            dS[t * S + j] = dp;
            mS[t * S + j] = dm;
            dot += P[t * S + j] * dp;
            dotm += P[t * S + j] * dm;
        }
        for (int64_t j = 0; j < S; j++) {
            dS[t * S + j] = P[t * S + j] * (dS[t * S + j] - dot);
            mS[t * S + j] = P[t * S + j] * (mS[t * S + j] + dotm);
        }
    }
}

/* out (R,C) (+)= A (R,N) B (N,C), or A^T when at; magnitudes with |B| when absb. */
static void small_mm(double *out, const double *A, const double *B, int64_t R, int64_t N,
                     int64_t C, int at, int absb, double f)
{
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) {
            double s = 0.0;
            for (int64_t n = 0; n < N; n++) {
                double a = at ? A[n * R + r] : A[r * N + n], b = B[n * C + c];
                s += a * (absb ? fabs(b) : b);
            }
            out[r * C + c] = s * f;
        }
}

void np_ref_sdpa_backward(double *dq, double *dk, double *dv, double *mdq, double *mdk,
                          double *mdv, const double *dout, const double *q, const double *k,
                          const double *v, int64_t BH, int64_t T, int64_t S, int64_t D,
                          int64_t Dv, int causal, double scale)
{
    double *work = malloc((size_t)(BH * 3 * T * S + 1) * sizeof(double));
    double *absgo = malloc((size_t)(BH * T * Dv + 1) * sizeof(double));
    if (!work || !absgo) {
        free(work);
        free(absgo);
        return;
    }
    for (int64_t i = 0; i < BH * T * Dv; i++)
        absgo[i] = fabs(dout[i]);
#pragma omp parallel for schedule(dynamic) if (BH * T * S * D > (1 << 17))
    for (int64_t h = 0; h < BH; h++) {
        double *P = work + h * 3 * T * S, *dS = P + T * S, *mS = dS + T * S;
        const double *qh = q + h * T * D, *kh = k + h * S * D, *vh = v + h * S * Dv;
        const double *go = dout + h * T * Dv;
        head_probs(P, qh, kh, T, S, D, causal, scale);
        if (dv)
            small_mm(dv + h * S * Dv, P, go, S, T, Dv, 1, 0, 1.0);
        if (mdv)
            small_mm(mdv + h * S * Dv, P, absgo + h * T * Dv, S, T, Dv, 1, 0, 1.0);
        head_dscores(dS, mS, P, go, vh, T, S, Dv);
        if (dq)
            small_mm(dq + h * T * D, dS, kh, T, S, D, 0, 0, scale);
        if (mdq)
            small_mm(mdq + h * T * D, mS, kh, T, S, D, 0, 1, scale);
        if (dk)
            small_mm(dk + h * S * D, dS, qh, S, T, D, 1, 0, scale);
        if (mdk)
            small_mm(mdk + h * S * D, mS, qh, S, T, D, 1, 1, scale);
    }
    free(work);
    free(absgo);
}

/* q (..., T, D), k (..., S, D), v (..., S, Dv) with the same leading dims. */
np_status rt_ref_sdpa_shape(np_op_call *c, np_error *err)
{
    const np_op_tensor *q = &c->in[0], *k = &c->in[1], *v = &c->in[2];
    int n = q->ndim, ok = n >= 2 && k->ndim == n && v->ndim == n &&
                          k->shape[n - 1] == q->shape[n - 1] && v->shape[n - 2] == k->shape[n - 2];
    for (int i = 0; ok && i < n - 2; i++)
        ok = k->shape[i] == q->shape[i] && v->shape[i] == q->shape[i];
    if (!ok || c->n_in > 3 || (c->sc[2] != 0.0))
        return np_error_set(err, NP_ERR_UNSUPPORTED, NULL, "scaled_dot_product_attention",
                            "scaled_dot_product_attention: supported are q (..., T, D), k (..., S, "
                            "D), v (..., S, Dv) without attn_mask and with dropout_p 0");
    c->n_out = 1;
    rt_ref_set_shape(&c->out[0], n, q->shape);
    c->out[0].shape[n - 1] = v->shape[n - 1];
    c->out[0].numel = np_op_numel(n, c->out[0].shape);
    return NP_OK;
}

static void sdpa_dims(const np_op_call *c, int64_t *BH, int64_t *T, int64_t *S, int64_t *D,
                      int64_t *Dv, double *scale)
{
    int n = c->in[0].ndim;
    *BH = np_op_numel(n - 2, c->in[0].shape);
    *T = c->in[0].shape[n - 2];
    *D = c->in[0].shape[n - 1];
    *S = c->in[1].shape[n - 2];
    *Dv = c->in[2].shape[n - 1];
    *scale = c->sc[1] > 0.0 ? c->sc[1] : 1.0 / sqrt((double)*D);
}

void rt_ref_sdpa_fwd(np_op_call *c)
{
    int64_t BH, T, S, D, Dv;
    double sc;
    sdpa_dims(c, &BH, &T, &S, &D, &Dv, &sc);
    np_ref_sdpa_forward(c->out[0].data, c->out[0].mag, c->in[0].data, c->in[1].data,
                        c->in[2].data, BH, T, S, D, Dv, c->sc[0] != 0.0, sc);
}

void rt_ref_sdpa_bwd(np_op_call *c)
{
    int64_t BH, T, S, D, Dv;
    double sc;
    sdpa_dims(c, &BH, &T, &S, &D, &Dv, &sc);
    np_op_tensor *g = c->gin;
    np_ref_sdpa_backward(c->want_gin[0] ? g[0].data : NULL, c->want_gin[1] ? g[1].data : NULL,
                         c->want_gin[2] ? g[2].data : NULL, c->want_gin[0] ? g[0].mag : NULL,
                         c->want_gin[1] ? g[1].mag : NULL, c->want_gin[2] ? g[2].mag : NULL,
                         c->gout[0].data, c->in[0].data, c->in[1].data, c->in[2].data, BH, T, S,
                         D, Dv, c->sc[0] != 0.0, sc);
}
