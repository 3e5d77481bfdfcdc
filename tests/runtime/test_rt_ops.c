/* tests/runtime/test_rt_ops.c - every op's forward against a float64
 * reference written here, and its backward against central finite
 * differences of that reference (loss = sum(y * R) for a fixed random R). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "nprobe/runtime.h"

typedef np_tensor *(*run_fn)(np_ctx *ctx, np_tensor **in);
typedef void (*ref_fn)(double **in, double *out);

typedef struct opcase {
    const char *name;
    int n_in;
    int ndim[4];
    int64_t shape[4][5];
    int int_hi[4];   /* > 0: int64 input with values in [0, int_hi) (or -100 marks) */
    run_fn run;
    ref_fn ref;
} opcase;

/* ---- float64 references ------------------------------------------------ */
static void ref_linear(double **in, double *y) /* x (3,5) w (4,5) b (4) */
{
    for (int r = 0; r < 3; r++)
        for (int o = 0; o < 4; o++) {
            double s = in[2][o];
            for (int i = 0; i < 5; i++)
                s += in[0][r * 5 + i] * in[1][o * 5 + i];
            y[r * 4 + o] = s;
        }
}
static void ref_linear_nb(double **in, double *y) /* x (2,3,5) w (4,5) */
{
    for (int r = 0; r < 6; r++)
        for (int o = 0; o < 4; o++) {
            double s = 0;
            for (int i = 0; i < 5; i++)
                s += in[0][r * 5 + i] * in[1][o * 5 + i];
            y[r * 4 + o] = s;
        }
}
static void ref_matmul(double **in, double *y) /* a (2,3,4) b (2,4,5) */
{
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 5; j++) {
                double s = 0;
                for (int k = 0; k < 4; k++)
                    s += in[0][(b * 3 + i) * 4 + k] * in[1][(b * 4 + k) * 5 + j];
                y[(b * 3 + i) * 5 + j] = s;
            }
}
static void ref_matmul_shared(double **in, double *y) /* a (2,3,4) b (4,5) */
{
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 5; j++) {
                double s = 0;
                for (int k = 0; k < 4; k++)
                    s += in[0][(b * 3 + i) * 4 + k] * in[1][k * 5 + j];
                y[(b * 3 + i) * 5 + j] = s;
            }
}
static void ref_conv(double **in, double *y) /* x (2,3,5,5) w (4,3,3,3) b (4) s2 p1 -> (2,4,3,3) */
{
    for (int n = 0; n < 2; n++)
        for (int o = 0; o < 4; o++)
            for (int oh = 0; oh < 3; oh++)
                for (int ow = 0; ow < 3; ow++) {
                    double s = in[2][o];
                    for (int c = 0; c < 3; c++)
                        for (int kh = 0; kh < 3; kh++)
                            for (int kw = 0; kw < 3; kw++) {
                                int ih = oh * 2 - 1 + kh, iw = ow * 2 - 1 + kw;
                                if (ih < 0 || ih >= 5 || iw < 0 || iw >= 5)
                                    continue;
                                s += in[0][((n * 3 + c) * 5 + ih) * 5 + iw] * in[1][((o * 3 + c) * 3 + kh) * 3 + kw];
                            }
                    y[((n * 4 + o) * 3 + oh) * 3 + ow] = s;
                }
}
static void ref_pool(double **in, double *y) /* x (1,2,4,6) k2 s2 -> (1,2,2,3) */
{
    for (int c = 0; c < 2; c++)
        for (int oh = 0; oh < 2; oh++)
            for (int ow = 0; ow < 3; ow++) {
                double m = -INFINITY;
                for (int kh = 0; kh < 2; kh++)
                    for (int kw = 0; kw < 2; kw++)
                        m = fmax(m, in[0][(c * 4 + oh * 2 + kh) * 6 + ow * 2 + kw]);
                y[(c * 2 + oh) * 3 + ow] = m;
            }
}
static void ref_relu(double **in, double *y) { for (int i = 0; i < 14; i++) y[i] = in[0][i] > 0 ? in[0][i] : 0; }
static void ref_gelu(double **in, double *y) { for (int i = 0; i < 14; i++) y[i] = in[0][i] * 0.5 * (1 + erf(in[0][i] / sqrt(2.0))); }
static void ref_gelu_tanh(double **in, double *y)
{
    for (int i = 0; i < 14; i++) {
        double x = in[0][i];
        y[i] = 0.5 * x * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
    }
}
static void ref_silu(double **in, double *y) { for (int i = 0; i < 14; i++) y[i] = in[0][i] / (1 + exp(-in[0][i])); }
static void ref_tanh(double **in, double *y) { for (int i = 0; i < 14; i++) y[i] = 1 - 2 / (exp(2 * in[0][i]) + 1); }
static void ref_ln(double **in, double *y) /* x (3,6) w b, eps 1e-5 */
{
    for (int r = 0; r < 3; r++) {
        double m = 0, v = 0;
        for (int c = 0; c < 6; c++)
            m += in[0][r * 6 + c] / 6;
        for (int c = 0; c < 6; c++)
            v += (in[0][r * 6 + c] - m) * (in[0][r * 6 + c] - m) / 6;
        for (int c = 0; c < 6; c++)
            y[r * 6 + c] = (in[0][r * 6 + c] - m) / sqrt(v + 1e-5) * in[1][c] + in[2][c];
    }
}
static void softmax_d(const double *x, double *y, int n)
{
    double m = -INFINITY, s = 0;
    for (int i = 0; i < n; i++)
        m = fmax(m, x[i]);
    for (int i = 0; i < n; i++)
        s += exp(x[i] - m);
    for (int i = 0; i < n; i++)
        y[i] = exp(x[i] - m) / s;
}
static void ref_softmax(double **in, double *y) { for (int r = 0; r < 3; r++) softmax_d(in[0] + r * 7, y + r * 7, 7); }
static void sdpa_d(double **in, double *y, int causal, double scale) /* (1,2,5,3) */
{
    for (int h = 0; h < 2; h++)
        for (int t = 0; t < 5; t++) {
            double s[5], p[5];
            int L = causal ? t + 1 : 5;
            for (int j = 0; j < L; j++) {
                s[j] = 0;
                for (int d = 0; d < 3; d++)
                    s[j] += in[0][(h * 5 + t) * 3 + d] * in[1][(h * 5 + j) * 3 + d];
                s[j] *= scale;
            }
            softmax_d(s, p, L);
            for (int d = 0; d < 3; d++) {
                double o = 0;
                for (int j = 0; j < L; j++)
                    o += p[j] * in[2][(h * 5 + j) * 3 + d];
                y[(h * 5 + t) * 3 + d] = o;
            }
        }
}
static void ref_sdpa_causal(double **in, double *y) { sdpa_d(in, y, 1, 1 / sqrt(3.0)); }
static void ref_sdpa_full(double **in, double *y) { sdpa_d(in, y, 0, 0.3); }
static void ref_embedding(double **in, double *y) /* idx (2,3) w (5,4) */
{
    for (int i = 0; i < 6; i++)
        for (int c = 0; c < 4; c++)
            y[i * 4 + c] = in[1][(int)in[0][i] * 4 + c];
}
static void ref_ce(double **in, double *y) /* logits (4,6) targets (4), row 2 ignored */
{
    double tot = 0;
    int n = 0;
    for (int r = 0; r < 4; r++) {
        int t = (int)in[1][r];
        if (t == -100)
            continue;
        double m = -INFINITY, s = 0;
        for (int c = 0; c < 6; c++)
            m = fmax(m, in[0][r * 6 + c]);
        for (int c = 0; c < 6; c++)
            s += exp(in[0][r * 6 + c] - m);
        tot += m + log(s) - in[0][r * 6 + t];
        n++;
    }
    y[0] = tot / n;
}
static void ref_add(double **in, double *y) { for (int i = 0; i < 24; i++) y[i] = in[0][i] + in[1][i]; }
static void ref_add_bc(double **in, double *y) { for (int i = 0; i < 24; i++) y[i] = in[0][i] + in[1][i % 12]; }
static void ref_add_bc_rev(double **in, double *y) { for (int i = 0; i < 24; i++) y[i] = in[0][i % 12] + in[1][i]; }
static void ref_mul_bc(double **in, double *y) { for (int i = 0; i < 24; i++) y[i] = in[0][i] * in[1][i % 4]; }
static void ref_mul_one(double **in, double *y) { for (int i = 0; i < 24; i++) y[i] = in[0][i] * in[1][0]; }
static void ref_scale(double **in, double *y) { for (int i = 0; i < 24; i++) y[i] = in[0][i] * (double)0.7f; }
static void ref_sum(double **in, double *y) { y[0] = 0; for (int i = 0; i < 24; i++) y[0] += in[0][i]; }
static void ref_mean(double **in, double *y) { ref_sum(in, y); y[0] /= 24; }
static void ref_copy(double **in, double *y) { for (int i = 0; i < 24; i++) y[i] = in[0][i]; }
static void ref_transpose(double **in, double *y) /* (2,3,4) -> (4,3,2) */
{
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 4; c++)
                y[(c * 3 + b) * 2 + a] = in[0][(a * 3 + b) * 4 + c];
}
static void ref_split1(double **in, double *y) /* (2,7) chunks of 3 on dim 1, chunk 1 */
{
    for (int r = 0; r < 2; r++)
        for (int j = 0; j < 3; j++)
            y[r * 3 + j] = in[0][r * 7 + 3 + j];
}
static void ref_split2(double **in, double *y) /* chunk 2 (width 1) */
{
    for (int r = 0; r < 2; r++)
        y[r] = in[0][r * 7 + 6];
}

/* ---- runtime calls ------------------------------------------------------ */
static np_tensor *run_linear(np_ctx *c, np_tensor **in) { return np_linear(c, in[0], in[1], in[2]); }
static np_tensor *run_linear_nb(np_ctx *c, np_tensor **in) { return np_linear(c, in[0], in[1], NULL); }
static np_tensor *run_matmul(np_ctx *c, np_tensor **in) { return np_matmul(c, in[0], in[1]); }
static np_tensor *run_conv(np_ctx *c, np_tensor **in) { return np_conv2d(c, in[0], in[1], in[2], 2, 1); }
static np_tensor *run_pool(np_ctx *c, np_tensor **in) { return np_max_pool2d(c, in[0], 2, 0); }
static np_tensor *run_relu(np_ctx *c, np_tensor **in) { return np_relu(c, in[0]); }
static np_tensor *run_gelu(np_ctx *c, np_tensor **in) { return np_gelu(c, in[0], 0); }
static np_tensor *run_gelu_tanh(np_ctx *c, np_tensor **in) { return np_gelu(c, in[0], 1); }
static np_tensor *run_silu(np_ctx *c, np_tensor **in) { return np_silu(c, in[0]); }
static np_tensor *run_tanh(np_ctx *c, np_tensor **in) { return np_tanh(c, in[0]); }
static np_tensor *run_ln(np_ctx *c, np_tensor **in) { return np_layer_norm(c, in[0], in[1], in[2], 1e-5); }
static np_tensor *run_softmax(np_ctx *c, np_tensor **in) { return np_softmax(c, in[0], -1); }
static np_tensor *run_sdpa_causal(np_ctx *c, np_tensor **in) { return np_sdpa(c, in[0], in[1], in[2], 1, 0.0); }
static np_tensor *run_sdpa_full(np_ctx *c, np_tensor **in) { return np_sdpa(c, in[0], in[1], in[2], 0, 0.3); }
static np_tensor *run_embedding(np_ctx *c, np_tensor **in) { return np_embedding(c, in[0], in[1]); }
static np_tensor *run_ce(np_ctx *c, np_tensor **in)
{
    int64_t *t = np_tensor_i64(in[1]);
    t[2] = -100;
    return np_cross_entropy(c, in[0], in[1], -100);
}
static np_tensor *run_add(np_ctx *c, np_tensor **in) { return np_add(c, in[0], in[1]); }
static np_tensor *run_mul(np_ctx *c, np_tensor **in) { return np_mul(c, in[0], in[1]); }
static np_tensor *run_scale(np_ctx *c, np_tensor **in) { return np_scale(c, in[0], 0.7); }
static np_tensor *run_sum(np_ctx *c, np_tensor **in) { return np_sum(c, in[0]); }
static np_tensor *run_mean(np_ctx *c, np_tensor **in) { return np_mean(c, in[0]); }
static np_tensor *run_view(np_ctx *c, np_tensor **in) { return np_view(c, in[0], 2, (const int64_t[]){3, -1}); }
static np_tensor *run_reshape(np_ctx *c, np_tensor **in) { return np_reshape(c, in[0], 3, (const int64_t[]){4, 3, 2}); }
static np_tensor *run_flatten(np_ctx *c, np_tensor **in) { return np_flatten(c, in[0], 1); }
static np_tensor *run_transpose(np_ctx *c, np_tensor **in) { return np_transpose(c, in[0], 0, -1); }
static np_tensor *run_split1(np_ctx *c, np_tensor **in)
{
    np_tensor *o[3];
    return np_split(c, in[0], 3, 1, o, 3) == 3 ? o[1] : NULL;
}
static np_tensor *run_split2(np_ctx *c, np_tensor **in)
{
    np_tensor *o[3];
    return np_split(c, in[0], 3, -1, o, 3) == 3 ? o[2] : NULL;
}

#define S1(a) 1, {{a}}
static const opcase cases[] = {
    {"linear", 3, {2, 2, 1}, {{3, 5}, {4, 5}, {4}}, {0}, run_linear, ref_linear},
    {"linear_nobias", 2, {3, 2}, {{2, 3, 5}, {4, 5}}, {0}, run_linear_nb, ref_linear_nb},
    {"matmul", 2, {3, 3}, {{2, 3, 4}, {2, 4, 5}}, {0}, run_matmul, ref_matmul},
    {"matmul_shared", 2, {3, 2}, {{2, 3, 4}, {4, 5}}, {0}, run_matmul, ref_matmul_shared},
    {"conv2d", 3, {4, 4, 1}, {{2, 3, 5, 5}, {4, 3, 3, 3}, {4}}, {0}, run_conv, ref_conv},
    {"max_pool2d", 1, {4}, {{1, 2, 4, 6}}, {0}, run_pool, ref_pool},
    {"relu", 1, {2}, {{2, 7}}, {0}, run_relu, ref_relu},
    {"gelu", 1, {2}, {{2, 7}}, {0}, run_gelu, ref_gelu},
    {"gelu_tanh", 1, {2}, {{2, 7}}, {0}, run_gelu_tanh, ref_gelu_tanh},
    {"silu", 1, {2}, {{2, 7}}, {0}, run_silu, ref_silu},
    {"tanh", 1, {2}, {{2, 7}}, {0}, run_tanh, ref_tanh},
    {"layer_norm", 3, {2, 1, 1}, {{3, 6}, {6}, {6}}, {0}, run_ln, ref_ln},
    {"softmax", 1, {2}, {{3, 7}}, {0}, run_softmax, ref_softmax},
    {"sdpa_causal", 3, {4, 4, 4}, {{1, 2, 5, 3}, {1, 2, 5, 3}, {1, 2, 5, 3}}, {0}, run_sdpa_causal, ref_sdpa_causal},
    {"sdpa_full_scale", 3, {4, 4, 4}, {{1, 2, 5, 3}, {1, 2, 5, 3}, {1, 2, 5, 3}}, {0}, run_sdpa_full, ref_sdpa_full},
    {"embedding", 2, {2, 2}, {{2, 3}, {5, 4}}, {5, 0}, run_embedding, ref_embedding},
    {"cross_entropy", 2, {2, 1}, {{4, 6}, {4}}, {0, 6}, run_ce, ref_ce},
    {"add", 2, {3, 3}, {{2, 3, 4}, {2, 3, 4}}, {0}, run_add, ref_add},
    {"add_broadcast", 2, {3, 2}, {{2, 3, 4}, {3, 4}}, {0}, run_add, ref_add_bc},
    {"add_broadcast_rev", 2, {2, 3}, {{3, 4}, {2, 3, 4}}, {0}, run_add, ref_add_bc_rev},
    {"mul_broadcast", 2, {3, 1}, {{2, 3, 4}, {4}}, {0}, run_mul, ref_mul_bc},
    {"mul_one", 2, {3, 1}, {{2, 3, 4}, {1}}, {0}, run_mul, ref_mul_one},
    {"scale", 1, {3}, {{2, 3, 4}}, {0}, run_scale, ref_scale},
    {"sum", 1, {3}, {{2, 3, 4}}, {0}, run_sum, ref_sum},
    {"mean", 1, {3}, {{2, 3, 4}}, {0}, run_mean, ref_mean},
    {"view", 1, {3}, {{2, 3, 4}}, {0}, run_view, ref_copy},
    {"reshape", 1, {2}, {{6, 4}}, {0}, run_reshape, ref_copy},
    {"flatten", 1, {4}, {{2, 3, 2, 2}}, {0}, run_flatten, ref_copy},
    {"transpose", 1, {3}, {{2, 3, 4}}, {0}, run_transpose, ref_transpose},
    {"split_mid", 1, {2}, {{2, 7}}, {0}, run_split1, ref_split1},
    {"split_last", 1, {2}, {{2, 7}}, {0}, run_split2, ref_split2},
};

static double loss_ref(const opcase *c, double **in, const double *R, int64_t ny, double *ybuf)
{
    c->ref(in, ybuf);
    double l = 0;
    for (int64_t i = 0; i < ny; i++)
        l += ybuf[i] * R[i];
    return l;
}

static void run_case(const opcase *c)
{
    np_ctx *ctx = NULL;
    CHECK(np_ctx_new(&ctx, NULL, NULL) == NP_OK);
    np_tensor *in[4] = {0};
    double *din[4] = {0};
    for (int i = 0; i < c->n_in; i++) {
        if (c->int_hi[i] > 0) {
            in[i] = np_tensor_new(ctx, NP_INT64, c->ndim[i], c->shape[i]);
            int64_t *d = np_tensor_i64(in[i]);
            for (int64_t k = 0; k < in[i]->numel; k++)
                d[k] = (k * 7 + 3) % c->int_hi[i];
        } else {
            in[i] = np_tensor_new_param(ctx, NP_FLOAT32, c->ndim[i], c->shape[i], "x");
            np_tensor_fill_normal(in[i], 42, (uint64_t)i, 0.0, 1.0);
        }
    }
    np_ctx_step_begin(ctx);
    np_tensor *y = c->run(ctx, in);
    CHECK_MSG(y != NULL, "%s: op failed: %s", c->name, np_ctx_error(ctx)->text);
    if (!y) {
        np_ctx_free(ctx);
        return;
    }
    for (int i = 0; i < c->n_in; i++) {
        din[i] = malloc(sizeof(double) * (size_t)in[i]->numel);
        for (int64_t k = 0; k < in[i]->numel; k++)
            din[i][k] = in[i]->dtype == NP_INT64 ? (double)np_tensor_i64(in[i])[k] : (double)np_tensor_f32(in[i])[k];
    }
    int64_t ny = y->numel;
    double *yref = malloc(sizeof(double) * (size_t)ny), *R = malloc(sizeof(double) * (size_t)ny);
    c->ref(din, yref);
    int bad = 0;
    for (int64_t k = 0; k < ny; k++) {
        double got = np_tensor_f32(y)[k];
        if (!(fabs(got - yref[k]) <= 1e-5 + 1e-5 * fabs(yref[k]))) {
            if (bad++ < 3)
                fprintf(stderr, "%s: forward[%lld] got %.9g want %.9g\n", c->name, (long long)k, got, yref[k]);
        }
    }
    CHECK_MSG(bad == 0, "%s: %d forward elements off", c->name, bad);
    np_tensor *Rt = np_tensor_tmp(ctx, NP_FLOAT32, y->ndim, y->shape);
    np_tensor_fill_uniform(Rt, 7, 99, -1.0, 1.0);
    for (int64_t k = 0; k < ny; k++)
        R[k] = np_tensor_f32(Rt)[k];
    np_tensor *loss = np_sum(ctx, np_mul(ctx, y, Rt));
    CHECK_MSG(np_backward(ctx, loss) == NP_OK, "%s: backward: %s", c->name, np_ctx_error(ctx)->text);
    double *ybuf = malloc(sizeof(double) * (size_t)ny);
    for (int i = 0; i < c->n_in; i++) {
        if (c->int_hi[i] > 0)
            continue;
        CHECK_MSG(in[i]->grad != NULL, "%s: input %d has no grad", c->name, i);
        bad = 0;
        for (int64_t k = 0; k < in[i]->numel && in[i]->grad; k++) {
            double h = 1e-5 * fmax(1.0, fabs(din[i][k])), x0 = din[i][k];
            din[i][k] = x0 + h;
            double lp = loss_ref(c, din, R, ny, ybuf);
            din[i][k] = x0 - h;
            double lm = loss_ref(c, din, R, ny, ybuf);
            din[i][k] = x0;
            double fd = (lp - lm) / (2 * h), got = in[i]->grad[k];
            if (!(fabs(got - fd) <= 5e-5 + 2e-4 * fabs(fd))) {
                if (bad++ < 3)
                    fprintf(stderr, "%s: grad input %d [%lld] got %.9g want %.9g\n", c->name, i, (long long)k, got, fd);
            }
        }
        CHECK_MSG(bad == 0, "%s: %d gradient elements of input %d off", c->name, bad, i);
    }
    np_ctx_step_end(ctx);
    CHECK_EQ_INT(np_ctx_status(ctx), NP_OK);
    for (int i = 0; i < c->n_in; i++)
        free(din[i]);
    free(yref);
    free(R);
    free(ybuf);
    np_ctx_free(ctx);
}

/* dropout: mask properties (no float64 reference for a random mask). */
static void test_dropout(void)
{
    np_ctx *ctx = NULL;
    np_ctx_opts o;
    np_ctx_opts_default(&o);
    o.seed = 5;
    CHECK(np_ctx_new(&ctx, &o, NULL) == NP_OK);
    int64_t shape[1] = {20000};
    np_tensor *x = np_tensor_new_param(ctx, NP_FLOAT32, 1, shape, "x");
    np_tensor_fill_normal(x, 1, 0, 0.0, 1.0);
    float *keep1 = malloc(sizeof(float) * 20000);
    for (int rep = 0; rep < 2; rep++) {
        np_ctx_set_step(ctx, 3);
        np_ctx_zero_grads(ctx);
        np_ctx_step_begin(ctx);
        np_tensor *y = np_dropout(ctx, x, 0.25, 1);
        np_tensor *loss = np_sum(ctx, y);
        CHECK(np_backward(ctx, loss) == NP_OK);
        int kept = 0, bad = 0, same = 0;
        const float s = (float)(1.0 / 0.75);
        for (int i = 0; i < 20000; i++) {
            float xv = np_tensor_f32(x)[i], yv = np_tensor_f32(y)[i];
            int k = yv != 0.0f;
            kept += k;
            if (k && yv != xv * s)
                bad++;
            if (x->grad[i] != (k ? s : 0.0f))
                bad++;
            if (rep == 0)
                keep1[i] = (float)k;
            else
                same += keep1[i] == (float)k;
        }
        CHECK_EQ_INT(bad, 0);
        CHECK_MSG(fabs(kept / 20000.0 - 0.75) < 0.02, "kept fraction %g", kept / 20000.0);
        if (rep == 1)
            CHECK_EQ_INT(same, 20000); /* same seed, step, call: same mask */
        np_ctx_step_end(ctx);
    }
    /* another step gives another mask; eval mode is the identity */
    np_ctx_step_begin(ctx);
    np_tensor *y = np_dropout(ctx, x, 0.25, 1);
    int same = 0;
    for (int i = 0; i < 20000; i++)
        same += keep1[i] == (float)(np_tensor_f32(y)[i] != 0.0f);
    CHECK(same < 19000);
    np_tensor *e = np_dropout(ctx, x, 0.25, 0);
    CHECK(memcmp(e->data, x->data, 20000 * sizeof(float)) == 0);
    np_ctx_step_end(ctx);
    free(keep1);
    np_ctx_free(ctx);
}

/* errors: bad shapes are refused with the op named, NULL propagates. */
static void test_errors(void)
{
    np_ctx *ctx = NULL;
    CHECK(np_ctx_new(&ctx, NULL, NULL) == NP_OK);
    np_tensor *a = np_tensor_new(ctx, NP_FLOAT32, 2, (const int64_t[]){2, 3});
    np_tensor *w = np_tensor_new(ctx, NP_FLOAT32, 2, (const int64_t[]){4, 5});
    CHECK(np_linear(ctx, a, w, NULL) == NULL);
    CHECK_EQ_INT(np_ctx_status(ctx), NP_ERR_SHAPE);
    CHECK_CONTAINS(np_ctx_error(ctx)->text, "Functional.linear");
    CHECK(np_relu(ctx, NULL) == NULL);
    np_ctx_clear_error(ctx);
    np_tensor *idx = np_tensor_new(ctx, NP_INT64, 1, (const int64_t[]){1});
    np_tensor_i64(idx)[0] = 9;
    CHECK(np_embedding(ctx, idx, w) == NULL);
    CHECK_CONTAINS(np_ctx_error(ctx)->text, "outside [0, 4)");
    np_ctx_free(ctx);
    np_ctx_opts o;
    np_ctx_opts_default(&o);
    o.precision = NP_INT64;
    np_error err;
    np_error_clear(&err);
    CHECK(np_ctx_new(&ctx, &o, &err) == NP_ERR_ARG && ctx == NULL);
    CHECK_CONTAINS(err.text, "precision");
}

int main(void)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i]);
    test_dropout();
    test_errors();
    return check_report();
}
