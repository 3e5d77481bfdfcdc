/* tests/runtime/test_rt_kernels.c - the runtime's float32 kernels
 * (runtime/kernels.h) called on plain buffers, without a context, against
 * the float64 reference kernels (include/internal/nprobe/ops.h, independent code);
 * and the fault kernel tables: the reference in every slot without a fault,
 * and a fault's wrapper equal, bit for bit, to the reference kernel called
 * with the fault's arguments. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels.h"
#include "nprobe/ops.h"

#define N_ROWS 12
#define WIDTH 40

static uint64_t rng = 88172645463325252ull;
static double urand(void) /* xorshift64, uniform in [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / (double)(1ull << 52) - 1.0;
}

static void fill(float *f, double *d, int64_t n, double scale)
{
    for (int64_t i = 0; i < n; i++) {
        f[i] = (float)(urand() * scale);
        d[i] = f[i];
    }
}

/* max |got - want| / (max |want| + tiny) */
static double rel_err(const float *got, const double *want, int64_t n)
{
    double e = 0.0, m = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        e = fmax(e, fabs((double)got[i] - want[i]));
        m = fmax(m, fabs(want[i]));
    }
    return e / m;
}

static void test_layernorm(void)
{
    enum { R = N_ROWS, C = WIDTH };
    float x[R * C], w[C], b[C], y[R * C], mean[R], rstd[R], g[R * C], dx[R * C], dw[C], db[C];
    double xd[R * C], wd[C], bd[C], yd[R * C], gd[R * C], dxd[R * C], dwd[C], dbd[C];
    fill(x, xd, R * C, 3.0);
    fill(w, wd, C, 1.0);
    fill(b, bd, C, 1.0);
    fill(g, gd, R * C, 1.0);
    rt_layernorm_forward(y, mean, rstd, x, w, b, R, C, 1e-5);
    np_ref_layernorm_forward(yd, NULL, NULL, NULL, xd, wd, bd, R, C, 1e-5);
    CHECK_MSG(rel_err(y, yd, R * C) < 1e-6, "layernorm forward %g", rel_err(y, yd, R * C));
    rt_layernorm_backward(dx, dw, db, g, x, w, mean, rstd, R, C);
    np_ref_layernorm_backward(dxd, dwd, dbd, NULL, gd, xd, wd, R, C, 1e-5);
    CHECK_MSG(rel_err(dx, dxd, R * C) < 1e-5, "layernorm dinp %g", rel_err(dx, dxd, R * C));
    CHECK_MSG(rel_err(dw, dwd, C) < 1e-5, "layernorm dweight %g", rel_err(dw, dwd, C));
    CHECK_MSG(rel_err(db, dbd, C) < 1e-6, "layernorm dbias %g", rel_err(db, dbd, C));

    /* faults: layernorm_eps wraps (the reference with eps * 1e5), bwd_no_mean
     * replaces the input gradient only */
    rt_kernels k;
    rt_kernels_for(&k, NP_FAULT_LAYERNORM_EPS);
    float yf[R * C], y5[R * C], mf[R], rf[R];
    k.layernorm_forward(yf, mf, rf, x, w, b, R, C, 1e-5);
    rt_layernorm_forward(y5, mean, rstd, x, w, b, R, C, 1e-5 * 1e5);
    CHECK(memcmp(yf, y5, sizeof yf) == 0);
    CHECK(rel_err(yf, yd, R * C) > 1e-2);
    CHECK(k.layernorm_backward == rt_layernorm_backward);
    rt_kernels_for(&k, NP_FAULT_LAYERNORM_BWD_NO_MEAN);
    CHECK(k.layernorm_forward == rt_layernorm_forward);
    rt_layernorm_forward(y, mean, rstd, x, w, b, R, C, 1e-5);
    float dxf[R * C], dwf[C], dbf[C];
    k.layernorm_backward(dxf, dwf, dbf, g, x, w, mean, rstd, R, C);
    CHECK(memcmp(dwf, dw, sizeof dw) == 0 && memcmp(dbf, db, sizeof db) == 0);
    CHECK(rel_err(dxf, dxd, R * C) > 1e-2);
    /* dx = rstd * w * g exactly as the fault's formula gives it */
    CHECK_MSG(fabsf(dxf[5] - (float)((double)rstd[0] * ((double)g[5] * (double)w[5]))) == 0.0f, "no_mean dx[5]");
}

static void test_softmax_and_ce(void)
{
    enum { R = N_ROWS, C = WIDTH };
    float x[R * C], y[R * C], g[R * C], dx[R * C];
    double xd[R * C], yd[R * C], gd[R * C], dxd[R * C];
    fill(x, xd, R * C, 4.0);
    fill(g, gd, R * C, 1.0);
    rt_softmax_forward(y, x, R, C, rt_softmax_row);
    np_ref_softmax_forward(yd, NULL, xd, R, C, 1, 0); /* (O, N, In): R rows of C */
    CHECK_MSG(rel_err(y, yd, R * C) < 1e-6, "softmax forward %g", rel_err(y, yd, R * C));
    rt_softmax_backward(dx, g, y, R, C);
    np_ref_softmax_backward(dxd, NULL, gd, xd, R, C, 1, 0);
    CHECK_MSG(rel_err(dx, dxd, R * C) < 1e-5, "softmax backward %g", rel_err(dx, dxd, R * C));

    int64_t t[R];
    double td[R], loss_d, dld[R * C];
    float loss, lse[R], dl[R * C], one = 1.0f;
    double scratch[R];
    for (int r = 0; r < R; r++) {
        t[r] = r == 3 ? -100 : (r * 7) % C;
        td[r] = (double)t[r];
    }
    rt_cross_entropy_forward(&loss, lse, scratch, x, t, R, C, -100, R - 1);
    np_ref_cross_entropy_forward(&loss_d, NULL, xd, td, R, C, -100, 0.0);
    CHECK_MSG(fabs(loss - loss_d) < 1e-6 * fabs(loss_d), "cross_entropy %g vs %g", loss, loss_d);
    memset(dl, 0, sizeof dl);
    rt_cross_entropy_backward(dl, &one, x, lse, t, R, C, -100, R - 1);
    np_ref_cross_entropy_backward(dld, NULL, 1.0, xd, td, R, C, -100, 0.0);
    CHECK_MSG(rel_err(dl, dld, R * C) < 1e-5, "cross_entropy backward %g", rel_err(dl, dld, R * C));

    /* softmax_fp16_nomax replaces the row kernel only */
    rt_kernels k;
    rt_kernels_for(&k, NP_FAULT_SOFTMAX_FP16_NOMAX);
    CHECK(k.softmax_row != rt_softmax_row && k.layernorm_forward == rt_layernorm_forward);
    float yf[R * C];
    rt_softmax_forward(yf, x, R, C, k.softmax_row);
    CHECK(rel_err(yf, yd, R * C) > 1e-5 && rel_err(yf, yd, R * C) < 1e-2);
}

static void test_gelu_and_linear(void)
{
    enum { R = N_ROWS, K = WIDTH, O = 24 };
    float x[R * K], y[R * K], g[R * K], dx[R * K];
    double xd[R * K], yd[R * K], gd[R * K], dxd[R * K], cdf[R * K];
    fill(x, xd, R * K, 4.0);
    fill(g, gd, R * K, 1.0);
    rt_gelu_forward(y, cdf, x, R * K, NP_FLOAT32);
    np_ref_gelu_forward(yd, xd, R * K, 0);
    CHECK_MSG(rel_err(y, yd, R * K) < 1e-6, "gelu forward %g", rel_err(y, yd, R * K));
    rt_gelu_backward(dx, g, x, cdf, R * K);
    np_ref_gelu_backward(dxd, gd, xd, R * K, 0);
    CHECK_MSG(rel_err(dx, dxd, R * K) < 1e-6, "gelu backward %g", rel_err(dx, dxd, R * K));
    rt_kernels k;
    rt_kernels_for(&k, NP_FAULT_GELU_TANH);
    float yt[R * K], yt2[R * K];
    k.gelu_forward(yt, NULL, x, R * K, NP_FLOAT32);
    rt_gelu_tanh_forward(yt2, x, R * K, NP_FLOAT32);
    CHECK(memcmp(yt, yt2, sizeof yt) == 0);

    float w[O * K], b[O], out[R * O], go[R * O], dxl[R * K], dw[O * K], db[O];
    double wd[O * K], bd[O], outd[R * O], god[R * O], dxld[R * K], dwd[O * K], dbd[O];
    fill(w, wd, O * K, 0.5);
    fill(b, bd, O, 0.5);
    fill(go, god, R * O, 1.0);
    np_ref_linear_forward(outd, xd, wd, bd, R, K, O);
    np_ref_linear_backward(dxld, dwd, dbd, god, xd, wd, R, K, O);
    for (int dev = 0; dev < NP_DEVICE_COUNT; dev++) {
        CHECK(rt_linear_forward(out, x, w, b, R, K, O, NP_FLOAT32, (np_device)dev) == 0);
        CHECK_MSG(rel_err(out, outd, R * O) < 1e-5, "linear forward on %d: %g", dev, rel_err(out, outd, R * O));
        CHECK(rt_linear_backward(dxl, dw, db, go, x, w, R, K, O, (np_device)dev) == 0);
        CHECK_MSG(rel_err(dxl, dxld, R * K) < 1e-5, "linear dinp on %d", dev);
        CHECK_MSG(rel_err(dw, dwd, O * K) < 1e-5, "linear dweight on %d", dev);
        CHECK_MSG(rel_err(db, dbd, O) < 1e-6, "linear dbias on %d", dev);
    }
    /* linear_drop_bias wraps: no bias in the output, a zero bias gradient */
    rt_kernels_for(&k, NP_FAULT_LINEAR_DROP_BIAS);
    float o1[R * O], o2[R * O];
    k.linear_forward(o1, x, w, b, R, K, O, NP_FLOAT32, NP_DEVICE_NPU_SIM);
    rt_linear_forward(o2, x, w, NULL, R, K, O, NP_FLOAT32, NP_DEVICE_NPU_SIM);
    CHECK(memcmp(o1, o2, sizeof o1) == 0);
    k.linear_backward(NULL, NULL, db, go, x, w, R, K, O, NP_DEVICE_NPU_SIM);
    for (int i = 0; i < O; i++)
        CHECK(db[i] == 0.0f);
}

static void test_sdpa(void)
{
    enum { BH = 2, T = 9, D = 8 };
    float q[BH * T * D], kk[BH * T * D], v[BH * T * D], y[BH * T * D], P[BH * T * T];
    double qd[BH * T * D], kd[BH * T * D], vd[BH * T * D], yd[BH * T * D];
    fill(q, qd, BH * T * D, 1.0);
    fill(kk, kd, BH * T * D, 1.0);
    fill(v, vd, BH * T * D, 1.0);
    rt_attn_geom g = {BH, T, D, 1, 0, 1.0 / sqrt((double)D)};
    rt_sdpa_forward(y, P, q, kk, v, &g, NP_FLOAT32, NP_FLOAT32, rt_softmax_row);
    np_ref_sdpa_forward(yd, NULL, qd, kd, vd, BH, T, T, D, D, 1, 1.0 / sqrt((double)D));
    CHECK_MSG(rel_err(y, yd, BH * T * D) < 1e-5, "sdpa forward %g", rel_err(y, yd, BH * T * D));
    /* attn_mask_off_by_one wraps: the reference with the mask's diagonal 1 */
    rt_kernels k;
    rt_kernels_for(&k, NP_FAULT_ATTN_MASK_OFF_BY_ONE);
    float yf[BH * T * D], yf2[BH * T * D], Pf[BH * T * T];
    k.sdpa_forward(yf, Pf, q, kk, v, &g, NP_FLOAT32, NP_FLOAT32, rt_softmax_row);
    rt_attn_geom g1 = g;
    g1.diagonal = 1;
    rt_sdpa_forward(yf2, P, q, kk, v, &g1, NP_FLOAT32, NP_FLOAT32, rt_softmax_row);
    CHECK(memcmp(yf, yf2, sizeof yf) == 0);
    CHECK(Pf[0 * T + 1] > 0.0f); /* query 0 sees key 1 */
}

int main(void)
{
    rt_kernels k;
    rt_kernels_for(&k, NP_FAULT_NONE);
    CHECK(k.layernorm_forward == rt_layernorm_forward && k.softmax_row == rt_softmax_row &&
          k.gelu_forward == rt_gelu_forward && k.linear_forward == rt_linear_forward &&
          k.conv2d_forward == rt_conv2d_forward && k.sdpa_forward == rt_sdpa_forward &&
          k.embedding_backward == rt_embedding_backward);
    test_layernorm();
    test_softmax_and_ce();
    test_gelu_and_linear();
    test_sdpa();
    return check_report();
}
