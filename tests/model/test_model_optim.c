/* tests/model/test_model_optim.c - optimizer steps, clipping, the schedule,
 * the loss scaler and SHA-256 against independent references: float64
 * re-computations of PyTorch's SGD/AdamW formulas, hand-worked norms and
 * schedule values, and the FIPS 180-2 SHA-256 test vectors; the monitor's
 * statistics (float32 block sums) against float64 ones within their bound. */
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

/* ---- the monitor's statistics (np_optim_tstats_add, np_optim_collect_stats) */

typedef struct ref_st {
    double sum, sumsq, min, max, sumabs;
    int64_t finite, zeros, nans, infs;
} ref_st;

static ref_st ref_of(const float *x, int64_t n)
{
    ref_st r = {0, 0, INFINITY, -INFINITY, 0, 0, 0, 0, 0};
    for (int64_t k = 0; k < n; k++) {
        double v = x[k];
        if (isnan(v)) {
            r.nans++;
        } else if (isinf(v)) {
            r.infs++;
        } else {
            r.sum += v, r.sumsq += v * v, r.sumabs += fabs(v), r.finite++, r.zeros += v == 0.0;
            r.min = v < r.min ? v : r.min, r.max = v > r.max ? v : r.max;
        }
    }
    return r;
}

/* float32 block sums (512 elements): a sum of squares within 512 u of its
 * float64 value, a sum within 512 u of the sum of magnitudes (u = 2^-24);
 * min, max and counts exact */
static void check_st(const np_optim_tstats *t, const ref_st *r)
{
    const double u512 = 512.0 * 0x1p-24;
    CHECK_EQ_INT(t->finite, r->finite);
    CHECK_EQ_INT(t->zeros, r->zeros);
    CHECK_EQ_INT(t->nans, r->nans);
    CHECK_EQ_INT(t->infs, r->infs);
    CHECK_EQ_FLOAT(t->min, r->min);
    CHECK_EQ_FLOAT(t->max, r->max);
    CHECK_CLOSE(t->sumsq, r->sumsq, 0.0, u512);
    CHECK_CLOSE(t->sum, r->sum, u512 * r->sumabs, 0.0);
}

static uint32_t lcg(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static void test_tstats(void)
{
    /* blocks: ordinary values with zeros; NaN and Inf among them; values
     * whose squares are float32 subnormals (2^-70: taken in double, exact);
     * values whose squares pass FLT_MAX (1e20); a partial last block */
    enum { NB = 512, LEN = 4 * NB + 300 };
    static float x[LEN];
    uint32_t seed = 7;
    for (int k = 0; k < LEN; k++)
        x[k] = ((float)lcg(&seed) / 16777216.0f - 0.5f) * 3.0f;
    for (int k = 0; k < NB; k += 37)
        x[k] = 0.0f;
    x[NB + 5] = NAN;
    x[NB + 100] = INFINITY;
    x[NB + 101] = -INFINITY;
    for (int k = 2 * NB; k < 3 * NB; k++)
        x[k] = ldexpf((float)(k - 2 * NB + 1), -70) * (k % 2 ? -1.0f : 1.0f);
    for (int k = 3 * NB; k < 4 * NB; k += 3)
        x[k] = 1e20f;
    x[4 * NB + 17] = 1e-30f;   /* its square is 0 in float32: not a zero */
    np_optim_tstats t = {0, 0, INFINITY, -INFINITY, 0, 0, 0, 0};
    np_optim_tstats_add(&t, x, LEN);
    ref_st r = ref_of(x, LEN);
    check_st(&t, &r);
    /* the tiny block alone: exact in double */
    np_optim_tstats tt = {0, 0, INFINITY, -INFINITY, 0, 0, 0, 0};
    np_optim_tstats_add(&tt, x + 2 * NB, NB);
    ref_st rt = ref_of(x + 2 * NB, NB);
    CHECK_EQ_FLOAT(tt.sumsq, rt.sumsq);
    CHECK(tt.sumsq > 0.0);

    /* the fused AdamW update: the same bits as without statistics, each
     * array's statistics against float64 ones of the arrays themselves, the
     * change's sum of squares; a mask leaves the others empty */
    enum { PN = 3 * 4096 + 700 };
    static float wa[PN], ga[PN], w_before[PN];
    for (int k = 0; k < PN; k++) {
        wa[k] = ((float)lcg(&seed) / 16777216.0f - 0.5f);
        ga[k] = k % 11 == 0 ? 0.0f : ((float)lcg(&seed) / 16777216.0f - 0.5f) * 1e-2f;
    }
    np_ctx *ctx = NULL;
    CHECK_EQ_INT(np_ctx_new(&ctx, NULL, NULL), NP_OK);
    if (!ctx)
        return;
    int64_t shape[2] = {PN / 4, 4};   /* PN is a multiple of 4 */
    np_tensor *pa = np_tensor_new_param(ctx, NP_FLOAT32, 2, shape, "fa.weight");
    np_tensor *pb = np_tensor_new_param(ctx, NP_FLOAT32, 2, shape, "fb.weight");
    CHECK(pa && pb);
    if (!pa || !pb)
        return;
    memcpy(np_tensor_f32(pa), wa, sizeof wa);
    memcpy(np_tensor_f32(pb), wa, sizeof wa);
    np_optim_config c;
    np_optim_config_default(&c, NP_OPTIM_ADAMW);
    np_optim *oa = NULL, *ob = NULL;
    CHECK_EQ_INT(np_optim_new(&oa, &c, &pa, 1, NULL), NP_OK);
    CHECK_EQ_INT(np_optim_new(&ob, &c, &pb, 1, NULL), NP_OK);
    np_optim_tstats st[NP_OPTIM_ST_N];
    /* step 0: every array (the fused loop, m and v by block_f32); step 1:
     * gradients, weights and the change (mv_distribution off: the fused
     * loop alone); step 2: the gradient alone (the plain update, then a
     * pass) */
    const unsigned masks[3] = {(1u << NP_OPTIM_ST_N) - 1,
                               1u << NP_OPTIM_ST_GRAD | 1u << NP_OPTIM_ST_WEIGHT | 1u << NP_OPTIM_ST_DELTA,
                               1u << NP_OPTIM_ST_GRAD};
    for (int s = 0; s < 3; s++) {
        memcpy(pa->grad, ga, sizeof ga);
        memcpy(pb->grad, ga, sizeof ga);
        memcpy(w_before, np_tensor_f32(pa), sizeof w_before);
        np_optim_collect_mask(oa, masks[s]);
        np_optim_collect_stats(oa, st, NULL);
        np_optim_step(oa, 1e-3);
        np_optim_step(ob, 1e-3);
        CHECK(memcmp(np_tensor_f32(pa), np_tensor_f32(pb), sizeof wa) == 0);
        CHECK(memcmp(np_optim_slot(oa, 0, 0), np_optim_slot(ob, 0, 0), sizeof wa) == 0);
        CHECK(memcmp(np_optim_slot(oa, 1, 0), np_optim_slot(ob, 1, 0), sizeof wa) == 0);
        ref_st rg = ref_of(ga, PN);
        check_st(&st[NP_OPTIM_ST_GRAD], &rg);
        /* each asked array's figures are those of the monitor's separate
         * pass over it (np_optim_tstats_add), bit for bit */
        const float *arr[4] = {ga, np_optim_slot(ob, 0, 0), np_optim_slot(ob, 1, 0), np_tensor_f32(pb)};
        const int slot[4] = {NP_OPTIM_ST_GRAD, NP_OPTIM_ST_SLOT0, NP_OPTIM_ST_SLOT1, NP_OPTIM_ST_WEIGHT};
        for (int j = 0; j < 4; j++) {
            if (!(masks[s] & 1u << slot[j])) {
                CHECK_EQ_INT(st[slot[j]].finite, 0);
                continue;
            }
            np_optim_tstats sep = {0, 0, INFINITY, -INFINITY, 0, 0, 0, 0};
            np_optim_tstats_add(&sep, arr[j], PN);
            const np_optim_tstats *ts = &st[slot[j]];
            CHECK(ts->sum == sep.sum && ts->sumsq == sep.sumsq && ts->min == sep.min && ts->max == sep.max);
            CHECK(ts->finite == sep.finite && ts->zeros == sep.zeros && ts->nans == sep.nans);
            ref_st ra = ref_of(arr[j], PN);
            check_st(ts, &ra);
        }
        CHECK_EQ_INT(st[NP_OPTIM_ST_GRAD].zeros, (PN + 10) / 11);
        if (s == 2)
            break;
        double dq = 0.0;
        for (int k = 0; k < PN; k++) {
            double d = (double)np_tensor_f32(pb)[k] - w_before[k];
            dq += d * d;
        }
        CHECK(dq > 0.0);
        CHECK_CLOSE(st[NP_OPTIM_ST_DELTA].sumsq, dq, 0.0, 512.0 * 0x1p-24);
    }
    np_optim_free(oa);
    np_optim_free(ob);
    np_ctx_free(ctx);
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
    test_tstats();
    np_ctx_free(ctx);
    return check_report();
}
