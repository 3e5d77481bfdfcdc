/* tests/dist/test_dist_reduce.c - the trainer's data-parallel path in one
 * process, without MPI (a gather callback that copies, world size 1): it is
 * bit-identical to the trainer without the callback; every step fires one
 * Distributed.all_reduce.N.forward per parameter, one for the loss and one
 * for the squared gradient norm, whose output equals its input at K = 1;
 * the collective fault allreduce_wrong_count halves every reduced gradient
 * exactly (the mean divides by 2K); a failing gather fails the step with an
 * error naming the all-reduce; a batch that does not split into K shards is
 * refused naming "batch". Runs under ASan with leak checking (the MPI runs
 * of tests/dist cannot). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "nprobe/model.h"
#include "nprobe/runtime.h"

static int copy_gather(void *recv, const void *send, size_t bytes, void *user)
{
    (void)user;
    memcpy(recv, send, bytes);
    return 0;
}

static int failing_gather(void *recv, const void *send, size_t bytes, void *user)
{
    (void)recv; (void)send; (void)bytes; (void)user;
    return -1;
}

typedef struct seen {
    int calls;            /* Distributed.* events this step */
    int halved, equal;    /* outputs that are exactly input/2, exactly input */
    int n_tensors_bad;
} seen;

static int on_event(const np_hook_event *ev, void *user)
{
    seen *s = user;
    if (ev->kind != NP_EV_API_FORWARD || strncmp(ev->name, "Distributed.all_reduce.", 23) != 0)
        return 0;
    s->calls++;
    if (ev->n_tensors != 2 || ev->tensors[0].role != NP_ROLE_INPUT ||
        ev->tensors[1].role != NP_ROLE_OUTPUT) {
        s->n_tensors_bad++;
        return 0;
    }
    const np_tensor *in = ev->tensors[0].t, *out = ev->tensors[1].t;
    if (in->dtype != NP_FLOAT32 || in->numel != out->numel)
        return 0; /* the float64 squared norm */
    const float *a = in->data, *b = out->data;
    int eq = 1, half = 1;
    for (int64_t k = 0; k < in->numel; k++) {
        eq &= a[k] == b[k];
        half &= a[k] * 0.5f == b[k];
    }
    s->equal += eq;
    s->halved += half && !eq;
    return 0;
}

/* 3 steps of a 1-layer GPT; losses out[0..3), weight checksum out[3]. */
static np_status run(double out[4], np_device dev, const np_dist *d, seen *s, np_error *err)
{
    np_train_opts o;
    np_train_opts_default(&o, NP_MODEL_GPT);
    o.steps = 3;
    o.batch = 4;
    o.model.n_layer = 1;
    o.model.n_embd = 32;
    o.model.block_size = 16;
    if (d)
        o.dist = *d;
    np_ctx_opts co;
    np_ctx_opts_default(&co);
    co.threads = 1;
    co.device = dev;
    np_ctx *ctx = NULL;
    np_trainer *tr = NULL;
    np_status st = np_ctx_new(&ctx, &co, err);
    if (!st)
        st = np_trainer_new(&tr, ctx, &o, err);
    if (!st && s)
        np_ctx_set_hook(ctx, on_event, s);
    for (int i = 0; !st && i < 3; i++) {
        np_step_result r;
        st = np_trainer_step(tr, &r, err);
        out[i] = st ? NAN : r.loss;
    }
    if (!st) {
        int n = 0;
        double sum = 0.0;
        np_tensor *const *p = np_model_params(np_trainer_model(tr), &n);
        for (int i = 0; i < n; i++)
            for (int64_t j = 0; j < p[i]->numel; j++)
                sum += np_tensor_f32(p[i])[j] * (double)(j % 7 + 1);
        out[3] = sum;
    }
    np_trainer_free(tr);
    np_ctx_free(ctx);
    return st;
}

int main(void)
{
    np_error err;
    np_error_clear(&err);
    double plain[4], dist[4];
    CHECK_EQ_INT(run(plain, NP_DEVICE_CPU, NULL, NULL, &err), NP_OK);
    np_dist d = {0, 1, copy_gather, NULL, NP_DIST_FAULT_NONE, 0, 0, 0, NULL, NULL, 0};
    seen s = {0};
    CHECK_EQ_INT(run(dist, NP_DEVICE_CPU, &d, &s, &err), NP_OK);
    for (int i = 0; i < 4; i++)
        CHECK_MSG(plain[i] == dist[i], "value %d: %.9g without the gather, %.9g with it", i,
                  plain[i], dist[i]);
    /* 1-layer GPT: wte, wpe, ln_f and 12 per block = 16 parameters (+ loss, norm) */
    CHECK_EQ_INT(s.calls, 3 * 18);
    CHECK_EQ_INT(s.n_tensors_bad, 0);
    CHECK_EQ_INT(s.equal, 3 * 17);

    /* the mean divided by 2K: every gradient all-reduce halves its input */
    d.fault = NP_DIST_FAULT_WRONG_COUNT;
    seen h = {0};
    CHECK_EQ_INT(run(dist, NP_DEVICE_NPU_SIM, &d, &h, &err), NP_OK);
    CHECK_EQ_INT(h.halved, 3 * 16);
    /* on cpu the collective fault does not act */
    seen c = {0};
    CHECK_EQ_INT(run(dist, NP_DEVICE_CPU, &d, &c, &err), NP_OK);
    CHECK_EQ_INT(c.halved, 0);
    CHECK(dist[3] == plain[3]);

    np_dist bad = {0, 1, failing_gather, NULL, NP_DIST_FAULT_NONE, 0, 0, 0, NULL, NULL, 0};
    np_error_clear(&err);
    CHECK_EQ_INT(run(dist, NP_DEVICE_CPU, &bad, NULL, &err), NP_ERR_IO);
    CHECK_CONTAINS(err.text, "gather");
    CHECK_STREQ(err.key, "all_reduce");

    np_dist three = {1, 3, copy_gather, NULL, NP_DIST_FAULT_NONE, 0, 0, 0, NULL, NULL, 0};
    np_error_clear(&err);
    CHECK_EQ_INT(run(dist, NP_DEVICE_CPU, &three, NULL, &err), NP_ERR_ARG);
    CHECK_STREQ(err.key, "batch");
    CHECK_CONTAINS(err.text, "4 does not split into 3 equal shards");
    return check_report();
}
