/* samples/embed/embed_linreg.c - a training loop of its own (linear
 * regression y = x.w + b by gradient descent on plain float arrays) that
 * uses only the probe's public API (nprobe/probe.h): open from a config,
 * step begin/end, dump named tensors, close. No nprobe runtime involved.
 *
 * usage: embed_linreg [-c CONFIG.json] [STEPS]
 *        (CONFIG defaults to $NPROBE_DUMP_CONFIG, STEPS to 20) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nprobe/probe.h"

#define N 256 /* samples */
#define D 4   /* features */

/* A float32 tensor over a caller-owned array. */
static np_tensor wrap(float *data, int ndim, int64_t d0, int64_t d1)
{
    np_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = NP_FLOAT32;
    t.ndim = ndim;
    t.shape[0] = d0;
    t.shape[1] = d1;
    t.numel = ndim == 0 ? 1 : ndim == 1 ? d0 : d0 * d1;
    t.data = data;
    return t;
}

static int report(const char *what, const np_error *err)
{
    fprintf(stderr, "embed_linreg: %s: %s%s%s\n", what, err->key, err->key[0] ? ": " : "",
            err->text);
    return 1;
}

int main(int argc, char **argv)
{
    const char *cfg = getenv("NPROBE_DUMP_CONFIG");
    int steps = 20;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-c") == 0 && i + 1 < argc)
            cfg = argv[++i];
        else if (atoi(argv[i]) > 0)
            steps = atoi(argv[i]);
        else
            cfg = NULL, i = argc;
    }
    if (!cfg || !*cfg) {
        fprintf(stderr, "usage: embed_linreg [-c CONFIG.json] [STEPS] (or set NPROBE_DUMP_CONFIG)\n");
        return 2;
    }
    np_error err;
    np_error_clear(&err);
    np_probe *probe = NULL;
    np_probe_meta meta = {"embed-linreg", "cpu", "fp32", 0, 1};
    if (np_probe_open(&probe, cfg, &meta, &err))
        return report(cfg, &err) + 1;

    /* data: y = x . w_true + 0.5, deterministic */
    static float x[N * D], y[N], pred[N], gpred[N];
    const float w_true[D] = {1.5f, -2.0f, 0.25f, 3.0f};
    unsigned s = 7;
    for (int i = 0; i < N; i++) {
        float acc = 0.5f;
        for (int j = 0; j < D; j++) {
            s = s * 1103515245u + 12345u;
            x[i * D + j] = (float)((s >> 9) & 0xffff) / 32768.0f - 1.0f;
            acc += x[i * D + j] * w_true[j];
        }
        y[i] = acc;
    }
    float w[D] = {0}, b = 0, gw[D], gb, loss = 0;
    const float lr = 0.3f;
    np_tensor tx = wrap(x, 2, N, D), tw = wrap(w, 1, D, 0), tb = wrap(&b, 0, 0, 0);
    np_tensor tp = wrap(pred, 1, N, 0), ty = wrap(y, 1, N, 0), tl = wrap(&loss, 0, 0, 0);
    np_tensor tgp = wrap(gpred, 1, N, 0), tgw = wrap(gw, 1, D, 0), tgb = wrap(&gb, 0, 0, 0);

    for (int step = 0; step < steps; step++) {
        if (np_probe_step_begin(probe, step, &err))
            return report("step_begin", &err);
        /* forward: pred = x w + b; loss = mean((pred - y)^2) */
        loss = 0;
        for (int i = 0; i < N; i++) {
            float p = b;
            for (int j = 0; j < D; j++)
                p += x[i * D + j] * w[j];
            pred[i] = p;
            loss += (p - y[i]) * (p - y[i]) / N;
        }
        const char *lin = "Functional.linear.0.forward", *mse = "Functional.mse_loss.0.forward";
        np_probe_dump(probe, lin, NP_ROLE_INPUT, "0", &tx, &err);
        np_probe_dump(probe, lin, NP_ROLE_INPUT, "1", &tw, &err);
        np_probe_dump(probe, lin, NP_ROLE_INPUT, "2", &tb, &err);
        np_probe_dump(probe, lin, NP_ROLE_OUTPUT, "0", &tp, &err);
        np_probe_dump(probe, mse, NP_ROLE_INPUT, "0", &tp, &err);
        np_probe_dump(probe, mse, NP_ROLE_INPUT, "1", &ty, &err);
        np_probe_dump_scalar(probe, mse, "reduction_mean", 1.0, &err);
        np_probe_dump(probe, mse, NP_ROLE_OUTPUT, "0", &tl, &err);
        /* backward */
        memset(gw, 0, sizeof gw);
        gb = 0;
        for (int i = 0; i < N; i++) {
            gpred[i] = 2.0f * (pred[i] - y[i]) / N;
            for (int j = 0; j < D; j++)
                gw[j] += gpred[i] * x[i * D + j];
            gb += gpred[i];
        }
        const char *linb = "Functional.linear.0.backward";
        np_probe_dump(probe, linb, NP_ROLE_INPUT, "0", &tgp, &err);
        np_probe_dump(probe, linb, NP_ROLE_OUTPUT, "1", &tgw, &err);
        np_probe_dump(probe, linb, NP_ROLE_OUTPUT, "2", &tgb, &err);
        np_probe_dump(probe, "Module.model.Linear", NP_ROLE_PARAMETERS_GRAD, "weight", &tgw, &err);
        np_probe_dump(probe, "Module.model.Linear", NP_ROLE_PARAMETERS_GRAD, "bias", &tgb, &err);
        /* update */
        for (int j = 0; j < D; j++)
            w[j] -= lr * gw[j];
        b -= lr * gb;
        if (np_probe_step_end(probe, &err))
            return report("step_end", &err);
        printf("step %d loss %.6f\n", step, loss);
    }
    np_probe_summary sum;
    np_status st = np_probe_close(probe, &sum, &err);
    printf("w = %.4f %.4f %.4f %.4f, b = %.4f\n", w[0], w[1], w[2], w[3], b);
    printf("dump: %lld steps, %lld calls, %lld tensors, %lld payload bytes\n",
           (long long)sum.steps, (long long)sum.calls, (long long)sum.tensors,
           (long long)sum.data_bytes);
    np_probe_free(probe);
    if (st)
        return report("dump", &sum.error);
    return 0;
}
