/* tests/runtime/test_rt_large.c - shapes big enough to take the kernels'
 * parallel paths (GEMM panels spread over threads, per-head attention
 * GEMMs): linear and causal attention forward and backward against float64
 * references written here, and the same bits at 1, 2 and 3 OpenMP threads,
 * on cpu and npu-sim. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "nprobe/runtime.h"

/* linear: x (R, I), w (O, I), b (O); rows-split when R >= O, else column-split */
typedef struct lin_case { int R, I, O; } lin_case;
/* attention: (B, H, T, D) */
enum { AB = 2, AH = 3, AT = 40, AD = 24 };

typedef struct result {
    float *y, *dx, *dw, *db;   /* linear */
    float *o, *dq, *dk, *dv;   /* attention */
} result;

static float *copy_out(const float *p, int64_t n)
{
    float *d = malloc((size_t)n * sizeof *d);
    if (d)
        memcpy(d, p, (size_t)n * sizeof *d);
    return d;
}

static void result_free(result *r)
{
    free(r->y), free(r->dx), free(r->dw), free(r->db);
    free(r->o), free(r->dq), free(r->dk), free(r->dv);
    memset(r, 0, sizeof *r);
}

/* loss = sum(y * Rw) with Rw[i] = cos(0.37 i): the seed gradient is Rw. */
static double rw(int64_t i) { return cos(0.37 * (double)i); }

static np_tensor *weighted_sum(np_ctx *ctx, np_tensor *y)
{
    np_tensor *w = np_tensor_tmp(ctx, NP_FLOAT32, y->ndim, y->shape);
    if (!w)
        return NULL;
    float *wd = w->data;
    for (int64_t i = 0; i < y->numel; i++)
        wd[i] = (float)rw(i);
    return np_sum(ctx, np_mul(ctx, y, w));
}

static np_status run_linear(np_device dev, const lin_case *c, result *r)
{
    np_ctx_opts o;
    np_ctx_opts_default(&o);
    o.device = dev;
    np_ctx *ctx = NULL;
    np_error err = {0};
    if (np_ctx_new(&ctx, &o, &err))
        return err.status;
    int64_t xs[2] = {c->R, c->I}, ws[2] = {c->O, c->I}, bs[1] = {c->O};
    np_tensor *x = np_tensor_new_param(ctx, NP_FLOAT32, 2, xs, "x");
    np_tensor *w = np_tensor_new_param(ctx, NP_FLOAT32, 2, ws, "w");
    np_tensor *b = np_tensor_new_param(ctx, NP_FLOAT32, 1, bs, "b");
    np_status st = NP_ERR_INTERNAL;
    if (x && w && b) {
        np_tensor_fill_uniform(x, 5, 1, -1.0, 1.0);
        np_tensor_fill_uniform(w, 5, 2, -1.0, 1.0);
        np_tensor_fill_uniform(b, 5, 3, -1.0, 1.0);
        np_ctx_step_begin(ctx);
        np_tensor *y = np_linear(ctx, x, w, b);
        np_tensor *loss = y ? weighted_sum(ctx, y) : NULL;
        if (loss && np_backward(ctx, loss) == NP_OK) {
            r->y = copy_out(y->data, y->numel);
            r->dx = copy_out(x->grad, x->numel);
            r->dw = copy_out(w->grad, w->numel);
            r->db = copy_out(b->grad, b->numel);
            st = NP_OK;
        }
        np_ctx_step_end(ctx);
    }
    if (np_ctx_status(ctx))
        st = np_ctx_status(ctx);
    np_ctx_free(ctx);
    return st;
}

static void check_linear_ref(const lin_case *c, const result *r, double tol)
{
    int R = c->R, I = c->I, O = c->O;
    double *x = malloc(sizeof(double) * (size_t)R * I), *w = malloc(sizeof(double) * (size_t)O * I);
    double *b = malloc(sizeof(double) * (size_t)O);
    /* the inputs again: fills are pure functions of seed, stream and index */
    np_ctx *ctx = NULL;
    np_error err = {0};
    CHECK(np_ctx_new(&ctx, NULL, &err) == NP_OK);
    if (!ctx || !x || !w || !b)
        goto done;
    int64_t xs[2] = {R, I}, ws[2] = {O, I}, bs[1] = {O};
    np_tensor *tx = np_tensor_new(ctx, NP_FLOAT32, 2, xs), *tw = np_tensor_new(ctx, NP_FLOAT32, 2, ws);
    np_tensor *tb = np_tensor_new(ctx, NP_FLOAT32, 1, bs);
    np_tensor_fill_uniform(tx, 5, 1, -1.0, 1.0);
    np_tensor_fill_uniform(tw, 5, 2, -1.0, 1.0);
    np_tensor_fill_uniform(tb, 5, 3, -1.0, 1.0);
    for (int64_t i = 0; i < (int64_t)R * I; i++)
        x[i] = ((float *)tx->data)[i];
    for (int64_t i = 0; i < (int64_t)O * I; i++)
        w[i] = ((float *)tw->data)[i];
    for (int i = 0; i < O; i++)
        b[i] = ((float *)tb->data)[i];
    double worst_y = 0, worst_dx = 0, worst_dw = 0, worst_db = 0;
    for (int i = 0; i < R; i++)
        for (int o = 0; o < O; o++) {
            double s = b[o];
            for (int k = 0; k < I; k++)
                s += x[(size_t)i * I + k] * w[(size_t)o * I + k];
            worst_y = fmax(worst_y, fabs(r->y[(size_t)i * O + o] - s) / (1.0 + fabs(s)));
        }
    for (int i = 0; i < R; i++)
        for (int k = 0; k < I; k++) {
            double s = 0;
            for (int o = 0; o < O; o++)
                s += rw((int64_t)i * O + o) * w[(size_t)o * I + k];
            worst_dx = fmax(worst_dx, fabs(r->dx[(size_t)i * I + k] - s) / (1.0 + fabs(s)));
        }
    for (int o = 0; o < O; o++) {
        double sb = 0;
        for (int i = 0; i < R; i++)
            sb += rw((int64_t)i * O + o);
        worst_db = fmax(worst_db, fabs(r->db[o] - sb) / (1.0 + fabs(sb)));
        for (int k = 0; k < I; k++) {
            double s = 0;
            for (int i = 0; i < R; i++)
                s += rw((int64_t)i * O + o) * x[(size_t)i * I + k];
            worst_dw = fmax(worst_dw, fabs(r->dw[(size_t)o * I + k] - s) / (1.0 + fabs(s)));
        }
    }
    CHECK_MSG(worst_y < tol, "linear %dx%dx%d y rel err %g", R, I, O, worst_y);
    CHECK_MSG(worst_dx < tol, "linear %dx%dx%d dx rel err %g", R, I, O, worst_dx);
    CHECK_MSG(worst_dw < tol, "linear %dx%dx%d dw rel err %g", R, I, O, worst_dw);
    CHECK_MSG(worst_db < tol, "linear %dx%dx%d db rel err %g", R, I, O, worst_db);
done:
    np_ctx_free(ctx);
    free(x), free(w), free(b);
}

static np_status run_attn(np_device dev, result *r, double **qkv64)
{
    np_ctx_opts o;
    np_ctx_opts_default(&o);
    o.device = dev;
    np_ctx *ctx = NULL;
    np_error err = {0};
    if (np_ctx_new(&ctx, &o, &err))
        return err.status;
    int64_t s[4] = {AB, AH, AT, AD};
    np_tensor *t[3];
    const char *nm[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) {
        t[i] = np_tensor_new_param(ctx, NP_FLOAT32, 4, s, nm[i]);
        if (t[i])
            np_tensor_fill_normal(t[i], 9, (uint64_t)i, 0.0, 1.0);
        if (t[i] && qkv64)
            for (int64_t j = 0; j < t[i]->numel; j++)
                qkv64[i][j] = ((float *)t[i]->data)[j];
    }
    np_status st = NP_ERR_INTERNAL;
    if (t[0] && t[1] && t[2]) {
        np_ctx_step_begin(ctx);
        np_tensor *y = np_sdpa(ctx, t[0], t[1], t[2], 1, 0.0);
        np_tensor *loss = y ? weighted_sum(ctx, y) : NULL;
        if (loss && np_backward(ctx, loss) == NP_OK) {
            r->o = copy_out(y->data, y->numel);
            r->dq = copy_out(t[0]->grad, y->numel);
            r->dk = copy_out(t[1]->grad, y->numel);
            r->dv = copy_out(t[2]->grad, y->numel);
            st = NP_OK;
        }
        np_ctx_step_end(ctx);
    }
    if (np_ctx_status(ctx))
        st = np_ctx_status(ctx);
    np_ctx_free(ctx);
    return st;
}

/* float64 causal attention forward and backward (dO = Rw). */
static void check_attn_ref(double **in, const result *r, double tol)
{
    const double *q = in[0], *k = in[1], *v = in[2];
    double sc = 1.0 / sqrt((double)AD);
    double worst[4] = {0};
    double *dq = calloc((size_t)AB * AH * AT * AD, sizeof(double));
    double *dk = calloc((size_t)AB * AH * AT * AD, sizeof(double));
    double *dv = calloc((size_t)AB * AH * AT * AD, sizeof(double));
    if (!dq || !dk || !dv)
        goto done;
    for (int h = 0; h < AB * AH; h++)
        for (int t = 0; t < AT; t++) {
            size_t row = (size_t)h * AT + t;
            double p[AT], dp[AT], mx = -INFINITY, sum = 0;
            for (int j = 0; j <= t; j++) {
                double s = 0;
                for (int d = 0; d < AD; d++)
                    s += q[row * AD + d] * k[((size_t)h * AT + j) * AD + d];
                p[j] = s * sc;
                mx = fmax(mx, p[j]);
            }
            for (int j = 0; j <= t; j++)
                sum += p[j] = exp(p[j] - mx);
            for (int j = 0; j <= t; j++)
                p[j] /= sum;
            double dot = 0;
            for (int d = 0; d < AD; d++) {
                double o = 0;
                for (int j = 0; j <= t; j++)
                    o += p[j] * v[((size_t)h * AT + j) * AD + d];
                worst[0] = fmax(worst[0], fabs(r->o[row * AD + d] - o) / (1 + fabs(o)));
            }
            for (int j = 0; j <= t; j++) {
                dp[j] = 0;
                for (int d = 0; d < AD; d++) {
                    double go = rw((int64_t)(row * AD + (size_t)d));
                    dp[j] += go * v[((size_t)h * AT + j) * AD + d];
                    dv[((size_t)h * AT + j) * AD + d] += p[j] * go;
                }
                dot += p[j] * dp[j];
            }
            for (int j = 0; j <= t; j++) {
                double ds = p[j] * (dp[j] - dot) * sc;
                for (int d = 0; d < AD; d++) {
                    dq[row * AD + d] += ds * k[((size_t)h * AT + j) * AD + d];
                    dk[((size_t)h * AT + j) * AD + d] += ds * q[row * AD + d];
                }
            }
        }
    for (size_t i = 0; i < (size_t)AB * AH * AT * AD; i++) {
        worst[1] = fmax(worst[1], fabs(r->dq[i] - dq[i]) / (1 + fabs(dq[i])));
        worst[2] = fmax(worst[2], fabs(r->dk[i] - dk[i]) / (1 + fabs(dk[i])));
        worst[3] = fmax(worst[3], fabs(r->dv[i] - dv[i]) / (1 + fabs(dv[i])));
    }
    CHECK_MSG(worst[0] < tol, "sdpa out rel err %g", worst[0]);
    CHECK_MSG(worst[1] < tol, "sdpa dq rel err %g", worst[1]);
    CHECK_MSG(worst[2] < tol, "sdpa dk rel err %g", worst[2]);
    CHECK_MSG(worst[3] < tol, "sdpa dv rel err %g", worst[3]);
done:
    free(dq), free(dk), free(dv);
}

static int same(const float *a, const float *b, int64_t n)
{
    return a && b && memcmp(a, b, (size_t)n * sizeof(float)) == 0;
}

int main(void)
{
    const lin_case lc[] = {{160, 96, 72}, {40, 96, 200}, {7, 300, 5}};
    const np_device devs[2] = {NP_DEVICE_CPU, NP_DEVICE_NPU_SIM};
    for (int dv = 0; dv < 2; dv++) {
        double tol = devs[dv] == NP_DEVICE_CPU ? 1e-5 : 1e-5;
        for (size_t c = 0; c < sizeof lc / sizeof lc[0]; c++) {
            result r[3] = {{0}};
            for (int th = 1; th <= 3; th++) {
                omp_set_num_threads(th);
                CHECK(run_linear(devs[dv], &lc[c], &r[th - 1]) == NP_OK);
            }
            if (!r[0].y)
                continue;
            check_linear_ref(&lc[c], &r[0], tol);
            int64_t ny = (int64_t)lc[c].R * lc[c].O, nx = (int64_t)lc[c].R * lc[c].I;
            int64_t nw = (int64_t)lc[c].O * lc[c].I;
            for (int th = 1; th < 3; th++)
                CHECK_MSG(same(r[0].y, r[th].y, ny) && same(r[0].dx, r[th].dx, nx) &&
                              same(r[0].dw, r[th].dw, nw) && same(r[0].db, r[th].db, lc[c].O),
                          "%s linear %zu: bits differ at %d vs 1 threads", np_device_name(devs[dv]), c, th + 1);
            for (int th = 0; th < 3; th++)
                result_free(&r[th]);
        }
        int64_t n = (int64_t)AB * AH * AT * AD;
        double *qkv[3];
        for (int i = 0; i < 3; i++)
            qkv[i] = malloc((size_t)n * sizeof(double));
        result r[3] = {{0}};
        for (int th = 1; th <= 3; th++) {
            omp_set_num_threads(th);
            CHECK(run_attn(devs[dv], &r[th - 1], th == 1 ? qkv : NULL) == NP_OK);
        }
        if (r[0].o && qkv[0] && qkv[1] && qkv[2])
            check_attn_ref(qkv, &r[0], 1e-5);
        for (int th = 1; th < 3; th++)
            CHECK_MSG(same(r[0].o, r[th].o, n) && same(r[0].dq, r[th].dq, n) &&
                          same(r[0].dk, r[th].dk, n) && same(r[0].dv, r[th].dv, n),
                      "%s sdpa: bits differ at %d vs 1 threads", np_device_name(devs[dv]), th + 1);
        for (int th = 0; th < 3; th++)
            result_free(&r[th]);
        for (int i = 0; i < 3; i++)
            free(qkv[i]);
    }
    return check_report();
}
