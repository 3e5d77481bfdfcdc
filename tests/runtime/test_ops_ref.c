/* tests/runtime/test_ops_ref.c - the op registry and its float64 reference
 * kernels (include/internal/nprobe/ops.h): every op's forward against an independent
 * float64 computation written here (naive loops, direct formulas, hand
 * values), every backward against central finite differences of the
 * forward (L = sum(g * out) for a random g), magnitudes never below |out|,
 * and the registry's names, aliases, scalars and errors. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "nprobe/ops.h"

static uint64_t rng = 88172645463325252ull;

static double urand(void) /* uniform in [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 4503599627370496.0 - 1.0;
}

#define MAXN 4096
typedef struct tin {
    double v[MAXN];
    int ndim;
    int64_t shape[NP_OP_MAX_DIM];
} tin;

static void fill(tin *t, int ndim, const int64_t *shape, double scale)
{
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof(int64_t));
    for (int64_t i = 0; i < np_op_numel(ndim, shape); i++)
        t->v[i] = scale * urand();
}

/* Set call c up for `op` with inputs ins (NULL entries = absent) and scalars. */
static void setup(np_op_call *c, int op, tin *const *ins, int n_in, const double *sc, int n_sc)
{
    np_op_call_init(c, np_op_get(op));
    c->n_in = n_in;
    for (int i = 0; i < n_in; i++)
        if (ins[i]) {
            c->in[i].data = ins[i]->v;
            c->in[i].ndim = ins[i]->ndim;
            memcpy(c->in[i].shape, ins[i]->shape, sizeof ins[i]->shape);
            c->in[i].numel = np_op_numel(ins[i]->ndim, ins[i]->shape);
        }
    for (int i = 0; i < n_sc; i++)
        c->sc[i] = sc[i];
}

static double gbuf[NP_OP_MAX_OUT][MAXN];

/* Forward, then backward with random output gradients, then each float
 * input's gradient against central differences of sum(g * out). */
static void check_op(const char *what, int op, tin *const *ins, int n_in, const double *sc,
                     int n_sc, const double *want0, double tol)
{
    np_op_call c;
    np_error err;
    np_error_clear(&err);
    setup(&c, op, ins, n_in, sc, n_sc);
    CHECK_MSG(c.info->shape(&c, &err) == NP_OK, "%s: shape: %s", what, err.text);
    CHECK(np_op_call_alloc(&c, NP_OP_FORWARD, 1, &err) == NP_OK);
    CHECK(np_op_run(&c, NP_OP_FORWARD, &err) == NP_OK);
    for (int64_t i = 0; want0 && i < c.out[0].numel; i++)
        CHECK_MSG(fabs(c.out[0].data[i] - want0[i]) <= tol * (1.0 + fabs(want0[i])),
                  "%s forward [%lld]: got %.17g want %.17g", what, (long long)i, c.out[0].data[i],
                  want0[i]);
    for (int o = 0; o < c.n_out; o++)
        for (int64_t i = 0; i < c.out[o].numel; i++)
            CHECK_MSG(c.out[o].mag[i] >= fabs(c.out[o].data[i]) * (1 - 1e-12),
                      "%s: magnitude %g below |out| %g", what, c.out[o].mag[i],
                      fabs(c.out[o].data[i]));
    if (!c.info->backward) {
        np_op_call_free(&c);
        return;
    }
    np_op_call b;
    setup(&b, op, ins, n_in, sc, n_sc);
    b.info->shape(&b, &err);
    for (int o = 0; o < b.n_out; o++) {
        b.gout[o] = b.out[o];
        b.gout[o].data = gbuf[o];
        for (int64_t i = 0; i < b.out[o].numel; i++)
            gbuf[o][i] = urand();
    }
    for (int i = 0; i < n_in; i++)
        b.want_gin[i] = ins[i] && !(b.info->int_mask >> i & 1u);
    CHECK(np_op_call_alloc(&b, NP_OP_BACKWARD, 1, &err) == NP_OK);
    CHECK(np_op_run(&b, NP_OP_BACKWARD, &err) == NP_OK);
    const double h = 1e-6;
    for (int i = 0; i < n_in; i++) {
        if (!b.want_gin[i])
            continue;
        double gmax = 0.0;
        for (int64_t j = 0; j < b.in[i].numel; j++)
            gmax = fmax(gmax, fabs(b.gin[i].data[j]));
        for (int64_t j = 0; j < b.in[i].numel; j++) {
            double keep = ins[i]->v[j], lp = 0.0, lm = 0.0;
            for (int s = 0; s < 2; s++) {
                ins[i]->v[j] = keep + (s ? -h : h);
                np_op_call f;
                setup(&f, op, ins, n_in, sc, n_sc);
                f.info->shape(&f, &err);
                np_op_call_alloc(&f, NP_OP_FORWARD, 0, &err);
                np_op_run(&f, NP_OP_FORWARD, &err);
                double l = 0.0;
                for (int o = 0; o < f.n_out; o++)
                    for (int64_t k = 0; k < f.out[o].numel; k++)
                        l += gbuf[o][k] * f.out[o].data[k];
                *(s ? &lm : &lp) = l;
                np_op_call_free(&f);
            }
            ins[i]->v[j] = keep;
            double fd = (lp - lm) / (2 * h);
            CHECK_MSG(fabs(b.gin[i].data[j] - fd) <= 1e-6 * (1.0 + gmax),
                      "%s backward input %d [%lld]: got %.12g, finite difference %.12g", what, i,
                      (long long)j, b.gin[i].data[j], fd);
            CHECK_MSG(b.gin[i].mag[j] >= fabs(b.gin[i].data[j]) * (1 - 1e-12),
                      "%s: gradient magnitude below |grad|", what);
        }
    }
    np_op_call_free(&b);
    np_op_call_free(&c);
}

static tin A, B, Cb, D;
static double want[MAXN];

static void test_linear_matmul(void)
{
    int64_t xs[3] = {2, 3, 5}, ws[2] = {4, 5}, bs[1] = {4};
    fill(&A, 3, xs, 1);
    fill(&B, 2, ws, 1);
    fill(&Cb, 1, bs, 1);
    for (int m = 0; m < 6; m++)
        for (int n = 0; n < 4; n++) {
            double s = Cb.v[n];
            for (int k = 0; k < 5; k++)
                s += A.v[m * 5 + k] * B.v[n * 5 + k];
            want[m * 4 + n] = s;
        }
    check_op("linear", NP_OP_LINEAR, (tin *const[]){&A, &B, &Cb}, 3, NULL, 0, want, 1e-14);
    check_op("linear no bias", NP_OP_LINEAR, (tin *const[]){&A, &B, NULL}, 3, NULL, 0, NULL, 0);
    /* bmm (2, 3, 5) @ (2, 5, 4) */
    int64_t bs3[3] = {2, 5, 4};
    fill(&B, 3, bs3, 1);
    for (int t = 0; t < 2; t++)
        for (int m = 0; m < 3; m++)
            for (int n = 0; n < 4; n++) {
                double s = 0;
                for (int k = 0; k < 5; k++)
                    s += A.v[(t * 3 + m) * 5 + k] * B.v[(t * 5 + k) * 4 + n];
                want[(t * 3 + m) * 4 + n] = s;
            }
    check_op("bmm", np_op_from_api("Torch.bmm"), (tin *const[]){&A, &B}, 2, NULL, 0, want, 1e-14);
    int64_t b2[2] = {5, 4};
    fill(&B, 2, b2, 1);
    check_op("matmul 2-D other", NP_OP_MATMUL, (tin *const[]){&A, &B}, 2, NULL, 0, NULL, 0);
}

static void test_conv_pool(void)
{
    /* hand value: a 1x1x3x3 input of 1..9, a 2x2 kernel of ones: window sums */
    int64_t xs[4] = {1, 1, 3, 3}, ws[4] = {1, 1, 2, 2};
    A.ndim = 4;
    memcpy(A.shape, xs, sizeof xs);
    for (int i = 0; i < 9; i++)
        A.v[i] = i + 1;
    B.ndim = 4;
    memcpy(B.shape, ws, sizeof ws);
    for (int i = 0; i < 4; i++)
        B.v[i] = 1;
    double w4[4] = {12, 16, 24, 28};
    check_op("conv2d hand", NP_OP_CONV2D, (tin *const[]){&A, &B, NULL}, 3, (double[]){1, 0}, 2,
             w4, 0);
    double p4[4] = {5, 6, 8, 9};
    check_op("max_pool2d hand", NP_OP_MAX_POOL2D, (tin *const[]){&A}, 1, (double[]){2, 1}, 2, p4,
             0);
    int64_t x2[4] = {2, 3, 5, 4}, w2[4] = {2, 3, 3, 2}, b2[1] = {2};
    fill(&A, 4, x2, 1);
    fill(&B, 4, w2, 1);
    fill(&Cb, 1, b2, 1);
    check_op("conv2d stride 2 pad 1", NP_OP_CONV2D, (tin *const[]){&A, &B, &Cb}, 3,
             (double[]){2, 1}, 2, NULL, 0);
    check_op("max_pool2d 2", NP_OP_MAX_POOL2D, (tin *const[]){&A}, 1, (double[]){2, 0}, 2, NULL,
             0);
}

static void test_pointwise(void)
{
    int64_t s[2] = {3, 7};
    fill(&A, 2, s, 3.5);
    for (int i = 0; i < 21; i++)
        want[i] = 0.5 * A.v[i] * (1 + erf(A.v[i] / sqrt(2.0)));
    check_op("gelu erf", NP_OP_GELU, (tin *const[]){&A}, 1, (double[]){0}, 1, want, 1e-15);
    for (int i = 0; i < 21; i++) {
        double x = A.v[i];
        want[i] = 0.5 * x * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
    }
    check_op("gelu tanh", NP_OP_GELU, (tin *const[]){&A}, 1, (double[]){1}, 1, want, 1e-15);
    for (int i = 0; i < 21; i++)
        want[i] = A.v[i] * (1 / (1 + exp(-A.v[i])));
    check_op("silu", NP_OP_SILU, (tin *const[]){&A}, 1, NULL, 0, want, 1e-15);
    for (int i = 0; i < 21; i++) /* tanh = (e^2x - 1) / (e^2x + 1) */
        want[i] = expm1(2 * A.v[i]) / (exp(2 * A.v[i]) + 1);
    check_op("tanh", NP_OP_TANH, (tin *const[]){&A}, 1, NULL, 0, want, 1e-15);
    CHECK_EQ_INT(np_op_from_api("Tensor.tanh"), NP_OP_TANH);
    for (int i = 0; i < 21; i++)
        want[i] = A.v[i] > 0 ? A.v[i] : 0;
    check_op("relu", NP_OP_RELU, (tin *const[]){&A}, 1, NULL, 0, want, 0);
    check_op("dropout eval", NP_OP_DROPOUT, (tin *const[]){&A}, 1, (double[]){0.1, 0}, 2, A.v, 0);
    np_op_call c;
    setup(&c, NP_OP_DROPOUT, (tin *const[]){&A}, 1, (double[]){0.1, 1}, 2);
    CHECK(c.info->not_recomputable && c.info->not_recomputable(&c) != NULL);
    setup(&c, NP_OP_DROPOUT, (tin *const[]){&A}, 1, (double[]){0.0, 1}, 2);
    CHECK(c.info->not_recomputable(&c) == NULL);
}

static void test_norms(void)
{
    int64_t s[2] = {4, 6}, w[1] = {6};
    fill(&A, 2, s, 2);
    for (int i = 0; i < 24; i++)
        A.v[i] += 3.0; /* a mean far from 0 */
    fill(&B, 1, w, 1);
    fill(&Cb, 1, w, 1);
    for (int r = 0; r < 4; r++) {
        double m = 0, v = 0;
        for (int j = 0; j < 6; j++)
            m += A.v[r * 6 + j] / 6;
        for (int j = 0; j < 6; j++)
            v += (A.v[r * 6 + j] - m) * (A.v[r * 6 + j] - m) / 6;
        for (int j = 0; j < 6; j++)
            want[r * 6 + j] = (A.v[r * 6 + j] - m) / sqrt(v + 1e-5) * B.v[j] + Cb.v[j];
    }
    check_op("layer_norm", NP_OP_LAYER_NORM, (tin *const[]){&A, &B, &Cb}, 3, (double[]){1e-5}, 1,
             want, 1e-13);
    check_op("layer_norm no affine", NP_OP_LAYER_NORM, (tin *const[]){&A, NULL, NULL}, 3,
             (double[]){1e-5}, 1, NULL, 0);
    for (int r = 0; r < 4; r++) {
        double q = 0;
        for (int j = 0; j < 6; j++)
            q += A.v[r * 6 + j] * A.v[r * 6 + j] / 6;
        for (int j = 0; j < 6; j++)
            want[r * 6 + j] = A.v[r * 6 + j] / sqrt(q + 1e-6) * B.v[j];
    }
    check_op("rms_norm", NP_OP_RMS_NORM, (tin *const[]){&A, &B}, 2, (double[]){1e-6}, 1, want,
             1e-13);
}

static void test_softmax_ce(void)
{
    int64_t s[3] = {2, 5, 3};
    fill(&A, 3, s, 3);
    /* softmax over dim 1 (size 5), directly without the max shift */
    for (int o = 0; o < 2; o++)
        for (int i = 0; i < 3; i++) {
            double z = 0;
            for (int j = 0; j < 5; j++)
                z += exp(A.v[(o * 5 + j) * 3 + i]);
            for (int j = 0; j < 5; j++)
                want[(o * 5 + j) * 3 + i] = exp(A.v[(o * 5 + j) * 3 + i]) / z;
        }
    check_op("softmax dim 1", NP_OP_SOFTMAX, (tin *const[]){&A}, 1, (double[]){1}, 1, want, 1e-14);
    for (int i = 0; i < 30; i++)
        want[i] = log(want[i]);
    check_op("log_softmax dim -2", NP_OP_LOG_SOFTMAX, (tin *const[]){&A}, 1, (double[]){-2}, 1,
             want, 1e-14);
    /* cross entropy of logits (2, 3, 4) against 6 targets, one ignored */
    int64_t ls[3] = {2, 3, 4}, ts[1] = {6};
    fill(&A, 3, ls, 2);
    B.ndim = 1;
    memcpy(B.shape, ts, sizeof ts);
    double tg[6] = {0, 3, -100, 2, 1, 1};
    memcpy(B.v, tg, sizeof tg);
    double loss = 0;
    for (int r = 0; r < 6; r++) {
        if (tg[r] < 0)
            continue;
        double z = 0;
        for (int j = 0; j < 4; j++)
            z += exp(A.v[r * 4 + j]);
        loss += -log(exp(A.v[r * 4 + (int)tg[r]]) / z) / 5;
    }
    check_op("cross_entropy", NP_OP_CROSS_ENTROPY, (tin *const[]){&A, &B}, 2,
             (double[]){-100, 0}, 2, &loss, 1e-14);
    check_op("cross_entropy label_smoothing", NP_OP_CROSS_ENTROPY, (tin *const[]){&A, &B}, 2,
             (double[]){-100, 0.1}, 2, NULL, 0);
}

static void test_sdpa(void)
{
    int64_t q[4] = {1, 2, 4, 3}, v[4] = {1, 2, 4, 2};
    fill(&A, 4, q, 1);
    fill(&B, 4, q, 1);
    fill(&Cb, 4, v, 1);
    /* causal, scale 1/sqrt(3): composed from naive loops */
    for (int h = 0; h < 2; h++)
        for (int t = 0; t < 4; t++) {
            double p[4], z = 0;
            for (int j = 0; j <= t; j++) {
                double s = 0;
                for (int d = 0; d < 3; d++)
                    s += A.v[(h * 4 + t) * 3 + d] * B.v[(h * 4 + j) * 3 + d];
                z += (p[j] = exp(s / sqrt(3.0)));
            }
            for (int e = 0; e < 2; e++) {
                double o = 0;
                for (int j = 0; j <= t; j++)
                    o += p[j] / z * Cb.v[(h * 4 + j) * 2 + e];
                want[(h * 4 + t) * 2 + e] = o;
            }
        }
    check_op("sdpa causal", NP_OP_SDPA, (tin *const[]){&A, &B, &Cb}, 3, (double[]){1, 0, 0}, 3,
             want, 1e-14);
    check_op("sdpa scale 0.5", NP_OP_SDPA, (tin *const[]){&A, &B, &Cb}, 3, (double[]){0, 0.5, 0},
             3, NULL, 0);
}

static void test_binary_shape(void)
{
    int64_t a[3] = {2, 3, 4}, b[2] = {1, 4};
    fill(&A, 3, a, 1);
    fill(&B, 2, b, 1);
    for (int i = 0; i < 24; i++)
        B.v[i % 4] = B.v[i % 4] + 0 * i, want[i] = A.v[i] + 2 * B.v[i % 4];
    check_op("add alpha 2 broadcast", NP_OP_ADD, (tin *const[]){&A, &B}, 2, (double[]){NAN, 2}, 2,
             want, 1e-15);
    for (int i = 0; i < 24; i++)
        want[i] = A.v[i] - B.v[i % 4];
    check_op("sub broadcast", NP_OP_SUB, (tin *const[]){&A, &B}, 2, (double[]){NAN, 1}, 2, want,
             1e-15);
    for (int i = 0; i < 24; i++)
        want[i] = A.v[i] * B.v[i % 4];
    check_op("mul broadcast", NP_OP_MUL, (tin *const[]){&A, &B}, 2, (double[]){NAN}, 1, want, 1e-15);
    for (int i = 0; i < 4; i++)
        B.v[i] = 2 + B.v[i];
    for (int i = 0; i < 24; i++)
        want[i] = A.v[i] / B.v[i % 4];
    check_op("div broadcast", NP_OP_DIV, (tin *const[]){&A, &B}, 2, (double[]){NAN}, 1, want, 1e-15);
    for (int i = 0; i < 24; i++)
        want[i] = A.v[i] * 0.25;
    check_op("mul scalar other", NP_OP_MUL, (tin *const[]){&A, NULL}, 2, (double[]){0.25}, 1, want,
             0);
    double s = 0;
    for (int i = 0; i < 24; i++)
        s += A.v[i];
    check_op("sum", NP_OP_SUM, (tin *const[]){&A}, 1, NULL, 0, &s, 1e-15);
    s /= 24;
    check_op("mean", NP_OP_MEAN, (tin *const[]){&A}, 1, NULL, 0, &s, 1e-15);
    /* transpose(0, 2) of (2, 3, 4): out[k][j][i] = in[i][j][k] */
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++)
                want[(k * 3 + j) * 2 + i] = A.v[(i * 3 + j) * 4 + k];
    check_op("transpose", NP_OP_TRANSPOSE, (tin *const[]){&A}, 1, (double[]){0, -1}, 2, want, 0);
    /* split(3, dim -1) of (2, 3, 4): pieces of 3 and 1 columns */
    for (int r = 0; r < 6; r++)
        for (int k = 0; k < 3; k++)
            want[r * 3 + k] = A.v[r * 4 + k];
    check_op("split", NP_OP_SPLIT, (tin *const[]){&A}, 1, (double[]){3, -1}, 2, want, 0);
    check_op("view", NP_OP_VIEW, (tin *const[]){&A}, 1, NULL, 0, A.v, 0);
    /* embedding rows */
    int64_t is[2] = {2, 3}, ws[2] = {5, 4};
    D.ndim = 2;
    memcpy(D.shape, is, sizeof is);
    double idx[6] = {4, 0, 4, 2, 1, 4}; /* repeated index: the gradient accumulates */
    memcpy(D.v, idx, sizeof idx);
    fill(&B, 2, ws, 1);
    for (int i = 0; i < 6; i++)
        memcpy(want + i * 4, B.v + (int)idx[i] * 4, 4 * sizeof(double));
    check_op("embedding", NP_OP_EMBEDDING, (tin *const[]){&D, &B}, 2, NULL, 0, want, 0);
}

static void test_registry(void)
{
    CHECK_EQ_INT(np_op_from_api("Functional.linear"), NP_OP_LINEAR);
    CHECK_EQ_INT(np_op_from_api("Tensor.__add__"), NP_OP_ADD);
    CHECK_EQ_INT(np_op_from_api("Torch.bmm"), NP_OP_MATMUL);
    CHECK_EQ_INT(np_op_from_api("Functional.scaled_dot_product_attention"), NP_OP_SDPA);
    CHECK_EQ_INT(np_op_from_api("Functional.not_an_op"), -1);
    for (int i = 0; i < NP_OP_COUNT; i++) {
        const np_op_info *info = np_op_get(i);
        CHECK(info && (int)info->op == i && strcmp(info->name, np_op_name(i)) == 0);
        CHECK(strcmp(info->api, np_op_api(i)) == 0);
        CHECK_EQ_INT(np_op_from_api(info->api), info->flags & NP_OPF_AS_VIEW ? NP_OP_VIEW : i);
    }
    /* the runtime's reshape and flatten are ops of their own (their own
     * call counters), recomputed as a view */
    CHECK_EQ_INT(np_op_from_api("Tensor.reshape"), NP_OP_VIEW);
    CHECK_EQ_INT(np_op_from_api("Torch.flatten"), NP_OP_VIEW);
    CHECK_EQ_INT(np_op_from_api("Tensor.flatten"), NP_OP_VIEW);
    CHECK(strcmp(np_op_api(NP_OP_LAYER_NORM), "Functional.layer_norm") == 0);
    CHECK(strcmp(np_op_api(NP_OP_COUNT), "Unknown.op") == 0);
    /* a call of an op: its API name, a dot, the rest */
    const char *rest = np_op_call_of("Tensor.transpose.5.backward", NP_OP_TRANSPOSE);
    CHECK(rest && strcmp(rest, "5.backward") == 0);
    CHECK(np_op_call_of("Functional.linear.0.forward", NP_OP_LAYER_NORM) == NULL);
    CHECK(np_op_call_of("Functional.layer_norm_x.0.forward", NP_OP_LAYER_NORM) == NULL);
    CHECK(np_op_call_of("Functional.layer_norm", NP_OP_LAYER_NORM) == NULL);
    CHECK(np_op_call_of(NULL, NP_OP_LAYER_NORM) == NULL);
    CHECK(np_op_call_of("Unknown.op.0.forward", NP_OP_COUNT) == NULL);
    CHECK(np_op_get(NP_OP_COUNT) == NULL);
    CHECK_EQ_INT(np_op_scalar_index(np_op_get(NP_OP_LAYER_NORM), "eps"), 0);
    CHECK_EQ_INT(np_op_scalar_index(np_op_get(NP_OP_LAYER_NORM), "dim"), -1);
    /* a shape error names the op and what was expected */
    np_op_call c;
    np_error err;
    np_error_clear(&err);
    int64_t xs[2] = {3, 5}, ws[2] = {4, 6};
    fill(&A, 2, xs, 1);
    fill(&B, 2, ws, 1);
    setup(&c, NP_OP_LINEAR, (tin *const[]){&A, &B}, 2, NULL, 0);
    CHECK(c.info->shape(&c, &err) == NP_ERR_SHAPE);
    CHECK_CONTAINS(err.text, "weight (N, K)");
    /* the magnitude of linear is |x| |w|^T + |b| */
    int64_t x1[2] = {1, 2}, w1[2] = {1, 2}, b1[1] = {1};
    A.ndim = 2; memcpy(A.shape, x1, sizeof x1); A.v[0] = 1; A.v[1] = -1;
    B.ndim = 2; memcpy(B.shape, w1, sizeof w1); B.v[0] = 2; B.v[1] = 2;
    Cb.ndim = 1; memcpy(Cb.shape, b1, sizeof b1); Cb.v[0] = -0.5;
    setup(&c, NP_OP_LINEAR, (tin *const[]){&A, &B, &Cb}, 3, NULL, 0);
    c.info->shape(&c, &err);
    np_op_call_alloc(&c, NP_OP_FORWARD, 1, &err);
    np_op_run(&c, NP_OP_FORWARD, &err);
    CHECK_CLOSE(c.out[0].data[0], -0.5, 0, 0);
    CHECK_CLOSE(c.out[0].mag[0], 4.5, 0, 0);
    np_op_call_free(&c);
}

/* A backward in which no input takes a gradient (want_gin all 0: an
 * integer input, a view of a no-grad tensor, as replay meets in HF models'
 * dumps) computes nothing and writes nowhere (view's kernel wrote gin[0]
 * through NULL before). */
static void test_backward_no_gradient(void)
{
    static const int ops[] = {NP_OP_VIEW, NP_OP_TRANSPOSE, NP_OP_SUM, NP_OP_RELU};
    int64_t xs[2] = {3, 4};
    fill(&A, 2, xs, 1);
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        np_op_call b;
        np_error err;
        np_error_clear(&err);
        double sc[2] = {0, 1};
        setup(&b, ops[k], (tin *const[]){&A}, 1, sc, ops[k] == NP_OP_TRANSPOSE ? 2 : 0);
        CHECK(b.info->shape(&b, &err) == NP_OK);
        b.gout[0] = b.out[0];
        b.gout[0].data = gbuf[0];
        for (int64_t i = 0; i < b.out[0].numel; i++)
            gbuf[0][i] = 1.0;
        b.want_gin[0] = 0;
        CHECK(np_op_call_alloc(&b, NP_OP_BACKWARD, 1, &err) == NP_OK);
        CHECK(b.gin[0].data == NULL);
        CHECK_MSG(np_op_run(&b, NP_OP_BACKWARD, &err) == NP_OK, "%s: %s", b.info->name, err.text);
        CHECK(b.gin[0].data == NULL);
        np_op_call_free(&b);
    }
}

/* A backward that wants no gradient, or a forward without output buffers:
 * no kernel writes through a buffer the call did not allocate (issue 31:
 * the copy kernel wrote through a NULL gradient; ASan/UBSan see it). */
static void test_unallocated(void)
{
    np_op_call c;
    np_error err;
    np_error_clear(&err);
    int64_t xs[2] = {4, 2};
    fill(&A, 2, xs, 1);
    for (int op = 0; op < NP_OP_COUNT; op++) {
        if (op != NP_OP_VIEW && op != NP_OP_RELU && op != NP_OP_GELU && op != NP_OP_SOFTMAX &&
            op != NP_OP_SUM)
            continue;
        setup(&c, op, (tin *const[]){&A}, 1, (const double[]){-1}, 1);
        CHECK_MSG(c.info->shape(&c, &err) == NP_OK, "%s: %s", np_op_name(op), err.text);
        c.want_gin[0] = 0; /* the dump holds no gradient for the input */
        CHECK(np_op_call_alloc(&c, NP_OP_BACKWARD, 1, &err) == NP_OK);
        CHECK(np_op_run(&c, NP_OP_BACKWARD, &err) == NP_OK);
        CHECK(c.gin[0].data == NULL);
        np_op_call_free(&c);
        setup(&c, op, (tin *const[]){&A}, 1, (const double[]){-1}, 1);
        c.info->shape(&c, &err);
        CHECK(np_op_run(&c, NP_OP_FORWARD, &err) == NP_ERR_ARG); /* no np_op_call_alloc */
        CHECK_CONTAINS(err.text, "no buffer");
        np_op_call_free(&c);
    }
}

int main(void)
{
    test_registry();
    test_backward_no_gradient();
    test_unallocated();
    test_linear_matmul();
    test_conv_pool();
    test_pointwise();
    test_norms();
    test_softmax_ce();
    test_sdpa();
    test_binary_shape();
    return check_report();
}
