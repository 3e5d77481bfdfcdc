/* tests/model/test_model_optim.c - optimizer steps, clipping, the schedule,
 * the loss scaler and SHA-256 against independent references: float64
 * re-computations of PyTorch's SGD/AdamW formulas, hand-worked norms and
 * schedule values, and the FIPS 180-2 SHA-256 test vectors. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "nprobe/model.h"
#include "nprobe/runtime.h"

#define N 5

static np_tensor *param(np_ctx *ctx, int ndim, const char *name, const float *w, const float *g)
{
    int64_t shape[2] = {ndim == 2 ? 1 : N, N};
    np_tensor *t = np_tensor_new_param(ctx, NP_FLOAT32, ndim, shape, name);
    CHECK(t != NULL);
    memcpy(np_tensor_f32(t), w, N * sizeof(float));
    memcpy(t->grad, g, N * sizeof(float));
    return t;
}

static const float w0[N] = {0.5f, -1.25f, 2.0f, 0.0f, 3.5f};
static const float gseq[3][N] = {
    {0.1f, -0.2f, 0.3f, 1.5f, -0.05f},
    {-0.4f, 0.25f, 0.0f, 1.0f, 0.2f},
    {0.3f, 0.3f, -0.7f, -2.0f, 0.01f},
};

static void test_adamw(np_ctx *ctx)
{
    /* p0: 2-D (decayed), p1: 1-D (not decayed) */
    np_tensor *p[2] = {param(ctx, 2, "a.weight", w0, gseq[0]), param(ctx, 1, "a.bias", w0, gseq[0])};
    np_optim_config c;
    np_optim_config_default(&c, NP_OPTIM_ADAMW);
    c.lr = 0.01;
    c.beta1 = 0.9;
    c.beta2 = 0.95;
    c.eps = 1e-8;
    c.weight_decay = 0.1;
    np_optim *o = NULL;
    CHECK_EQ_INT(np_optim_new(&o, &c, p, 2, NULL), NP_OK);
    double ref[2][N], m[2][N] = {{0}}, v[2][N] = {{0}};
    for (int k = 0; k < N; k++)
        ref[0][k] = ref[1][k] = w0[k];
    double lrs[3] = {0.01, 0.005, 0.002};
    for (int s = 0; s < 3; s++) {
        for (int i = 0; i < 2; i++)
            memcpy(p[i]->grad, gseq[s], sizeof gseq[s]);
        np_optim_step(o, lrs[s]);
        double t = s + 1;
        for (int i = 0; i < 2; i++)
            for (int k = 0; k < N; k++) {
                double g = gseq[s][k];
                double wd = i == 0 ? 0.1 : 0.0;
                ref[i][k] *= 1.0 - lrs[s] * wd;
                m[i][k] = 0.9 * m[i][k] + 0.1 * g;
                v[i][k] = 0.95 * v[i][k] + 0.05 * g * g;
                double mh = m[i][k] / (1.0 - pow(0.9, t));
                double vh = sqrt(v[i][k]) / sqrt(1.0 - pow(0.95, t));
                ref[i][k] -= lrs[s] * mh / (vh + 1e-8);
            }
    }
    CHECK_EQ_INT(np_optim_steps(o), 3);
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < N; k++)
            CHECK_CLOSE(np_tensor_f32(p[i])[k], ref[i][k], 1e-6, 1e-6);
    /* state exposed for checkpoints */
    CHECK_EQ_INT(np_optim_n_slots(o), 2);
    CHECK_STREQ(np_optim_slot_name(o, 1), "exp_avg_sq");
    CHECK_CLOSE(np_optim_slot(o, 0, 0)[3], m[0][3], 1e-7, 1e-6);
    CHECK_CLOSE(np_optim_slot(o, 1, 1)[2], v[1][2], 1e-9, 1e-6);
    np_optim_free(o);
}

static void test_sgd(np_ctx *ctx)
{
    np_tensor *p[1] = {param(ctx, 2, "s.weight", w0, gseq[0])};
    np_optim_config c;
    np_optim_config_default(&c, NP_OPTIM_SGD);
    c.lr = 0.1;
    c.momentum = 0.9;
    c.weight_decay = 0.01;
    np_optim *o = NULL;
    CHECK_EQ_INT(np_optim_new(&o, &c, p, 1, NULL), NP_OK);
    double ref[N], buf[N];
    for (int k = 0; k < N; k++)
        ref[k] = w0[k];
    for (int s = 0; s < 3; s++) {
        memcpy(p[0]->grad, gseq[s], sizeof gseq[s]);
        np_optim_step(o, 0.1);
        for (int k = 0; k < N; k++) {
            double d = gseq[s][k] + 0.01 * ref[k];
            buf[k] = s == 0 ? d : 0.9 * buf[k] + d;
            ref[k] -= 0.1 * buf[k];
        }
    }
    for (int k = 0; k < N; k++)
        CHECK_CLOSE(np_tensor_f32(p[0])[k], ref[k], 1e-6, 1e-6);
    /* hand-worked first step of element 0: d = 0.1 + 0.01*0.5 = 0.105, w = 0.5 - 0.0105 */
    np_optim_free(o);
    np_tensor *q[1] = {param(ctx, 2, "t.weight", w0, gseq[0])};
    CHECK_EQ_INT(np_optim_new(&o, &c, q, 1, NULL), NP_OK);
    np_optim_step(o, 0.1);
    CHECK_CLOSE(np_tensor_f32(q[0])[0], 0.4895, 1e-7, 0);
    np_optim_free(o);
}

static void test_clip(np_ctx *ctx)
{
    float wa[N] = {0}, ga[N] = {3, 0, 0, 0, 0}, gb[N] = {0, 4, 0, 12, 0};
    np_tensor *p[2] = {param(ctx, 1, "c.a", wa, ga), param(ctx, 1, "c.b", wa, gb)};
    CHECK_CLOSE(np_grad_norm(p, 2), 13.0, 0, 1e-15);          /* sqrt(9+16+144) */
    double n = np_clip_grad_norm(p, 2, 26.0);                  /* coef > 1: unchanged */
    CHECK_CLOSE(n, 13.0, 0, 1e-15);
    CHECK_EQ_FLOAT(p[1]->grad[3], 12.0f);
    n = np_clip_grad_norm(p, 2, 6.5);                          /* halve */
    CHECK_CLOSE(n, 13.0, 0, 1e-15);
    CHECK_CLOSE(p[0]->grad[0], 1.5, 1e-6, 0);
    CHECK_CLOSE(p[1]->grad[3], 6.0, 1e-6, 0);
    CHECK_CLOSE(np_grad_norm(p, 2), 6.5, 1e-6, 0);
}

static void test_schedule(void)
{
    /* lr 1, floor 0.1, 10 warmup steps, 110 in all */
    CHECK_CLOSE(np_lr_schedule(0, 1.0, 0.1, 10, 110), 0.1, 0, 1e-15);
    CHECK_CLOSE(np_lr_schedule(4, 1.0, 0.1, 10, 110), 0.5, 0, 1e-15);
    CHECK_CLOSE(np_lr_schedule(9, 1.0, 0.1, 10, 110), 1.0, 0, 1e-15);
    CHECK_CLOSE(np_lr_schedule(10, 1.0, 0.1, 10, 110), 1.0, 0, 1e-15);
    CHECK_CLOSE(np_lr_schedule(60, 1.0, 0.1, 10, 110), 0.55, 1e-15, 1e-12);
    CHECK_CLOSE(np_lr_schedule(35, 1.0, 0.1, 10, 110), 0.1 + 0.9 * (1 + sqrt(0.5)) / 2, 1e-15, 1e-12);
    CHECK_CLOSE(np_lr_schedule(110, 1.0, 0.1, 10, 110), 0.1, 1e-15, 1e-12);
    CHECK_CLOSE(np_lr_schedule(500, 1.0, 0.1, 10, 110), 0.1, 1e-15, 1e-12);
    CHECK_CLOSE(np_lr_schedule(0, 1.0, 0.0, 0, 2), 1.0, 0, 1e-15);   /* no warmup */
}

static void test_scaler(np_ctx *ctx)
{
    np_scaler s;
    np_scaler_init(&s, 1);
    CHECK_EQ_FLOAT(s.scale, 65536.0);
    s.growth_interval = 2;
    float wa[N] = {0}, g[N] = {65536.0f * 2, -65536.0f, 0, 32768.0f, 1};
    np_tensor *p[1] = {param(ctx, 1, "sc.a", wa, g)};
    CHECK_EQ_INT(np_scaler_unscale(&s, p, 1), 0);
    CHECK_EQ_FLOAT(p[0]->grad[0], 2.0f);
    CHECK_EQ_FLOAT(p[0]->grad[3], 0.5f);
    np_scaler_update(&s, 0);
    CHECK_EQ_INT(s.good_steps, 1);
    CHECK_EQ_FLOAT(s.scale, 65536.0);
    p[0]->grad[2] = INFINITY;                                 /* injected overflow */
    int found = np_scaler_unscale(&s, p, 1);
    CHECK_EQ_INT(found, 1);
    np_scaler_update(&s, found);
    CHECK_EQ_FLOAT(s.scale, 32768.0);
    CHECK_EQ_INT(s.good_steps, 0);
    CHECK_EQ_INT(s.skipped, 1);
    p[0]->grad[2] = NAN;
    found = np_scaler_unscale(&s, p, 1);
    CHECK_EQ_INT(found, 1);
    np_scaler_update(&s, found);
    CHECK_EQ_FLOAT(s.scale, 16384.0);
    np_scaler_update(&s, 0);
    np_scaler_update(&s, 0);                                  /* 2 good steps: grow */
    CHECK_EQ_FLOAT(s.scale, 32768.0);
    CHECK_EQ_INT(s.skipped, 2);
    np_scaler off;
    np_scaler_init(&off, 0);
    CHECK_EQ_INT(np_scaler_unscale(&off, p, 1), 0);           /* disabled: untouched */
    CHECK(isnan(p[0]->grad[2]));
    CHECK_EQ_FLOAT(off.scale, 1.0);
}

static void test_sha256(void)
{
    char hex[65];
    np_sha256_hex(hex, "abc", 3);
    CHECK_STREQ(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    np_sha256_hex(hex, "", 0);
    CHECK_STREQ(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    np_sha256_hex(hex, m, strlen(m));
    CHECK_STREQ(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* streaming in odd pieces gives the same digest as one shot */
    np_sha256 c;
    uint8_t d[32];
    char hex2[65];
    np_sha256_init(&c);
    for (size_t i = 0; i < strlen(m); i += 7)
        np_sha256_update(&c, m + i, strlen(m) - i < 7 ? strlen(m) - i : 7);
    np_sha256_final(&c, d);
    for (int i = 0; i < 32; i++)
        snprintf(hex2 + 2 * i, 3, "%02x", d[i]);
    CHECK_STREQ(hex2, hex);
    /* one million 'a' */
    static char million[1000000];
    memset(million, 'a', sizeof million);
    np_sha256_hex(hex, million, sizeof million);
    CHECK_STREQ(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

int main(void)
{
    np_ctx *ctx = NULL;
    CHECK_EQ_INT(np_ctx_new(&ctx, NULL, NULL), NP_OK);
    if (!ctx)
        return check_report();
    test_adamw(ctx);
    test_sgd(ctx);
    test_clip(ctx);
    test_schedule();
    test_scaler(ctx);
    test_sha256();
    np_ctx_free(ctx);
    return check_report();
}
