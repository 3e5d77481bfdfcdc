/* tests/model/test_model_faults.c - which faults act on which model.
 *
 * For every model and every fault of the catalog: 3 training steps on
 * npu-sim with the fault and without it (same seed, fp32). The runs differ
 * (some step's loss, or the final weights) exactly when
 * np_model_fault_applies says the model calls the faulted op: the table
 * behind `nprobe train`'s "the model does not call it" warning is checked
 * against what the models really do. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "nprobe/model.h"
#include "nprobe/runtime.h"

/* Losses of 3 steps and a checksum of the final weights. */
static int run(double out[4], np_model_kind kind, np_fault fault)
{
    np_train_opts o;
    np_train_opts_default(&o, kind);
    o.steps = 3;
    o.batch = 8;
    if (kind == NP_MODEL_GPT) {
        o.model.n_layer = 1;
        o.model.n_embd = 32;
        o.model.block_size = 16;
    }
    np_ctx_opts co;
    np_ctx_opts_default(&co);
    co.threads = 1;
    co.device = NP_DEVICE_NPU_SIM;
    co.fault = fault;
    co.seed = o.seed;
    np_ctx *ctx = NULL;
    np_trainer *tr = NULL;
    np_error err;
    np_error_clear(&err);
    int ok = np_ctx_new(&ctx, &co, &err) == NP_OK && np_trainer_new(&tr, ctx, &o, &err) == NP_OK;
    for (int s = 0; ok && s < 3; s++) {
        np_step_result res;
        ok = np_trainer_step(tr, &res, &err) == NP_OK;
        out[s] = ok ? res.loss : NAN;
    }
    double sum = 0;
    if (ok) {
        int n = 0;
        np_tensor *const *p = np_model_params(np_trainer_model(tr), &n);
        for (int i = 0; i < n; i++) {
            const float *v = np_tensor_f32(p[i]);
            for (int64_t j = 0; v && j < p[i]->numel; j++)
                sum += v[j] * (double)((j % 7) + 1);
        }
    }
    out[3] = sum;
    if (!ok)
        fprintf(stderr, "run failed: %s\n", err.text);
    np_trainer_free(tr);
    np_ctx_free(ctx);
    return ok;
}

int main(void)
{
    for (int k = 0; k < NP_MODEL_KIND_COUNT; k++) {
        double ref[4];
        if (!run(ref, (np_model_kind)k, NP_FAULT_NONE)) {
            CHECK(0);
            continue;
        }
        for (int f = 1; f < np_fault_count(); f++) {
            const np_fault_info *fi = np_fault_get(f);
            double got[4];
            if (!run(got, (np_model_kind)k, (np_fault)f)) {
                CHECK(0);
                continue;
            }
            int differs = 0;
            for (int i = 0; i < 4; i++)
                differs |= memcmp(&got[i], &ref[i], sizeof got[i]) != 0;
            int says = np_model_fault_applies((np_model_kind)k, fi->op);
            CHECK_MSG(differs == says, "model %s, fault %s (%s): the runs %s, the table says %s",
                      np_model_kind_name((np_model_kind)k), fi->name, fi->op,
                      differs ? "differ" : "are identical", says ? "it applies" : "it does not");
        }
    }
    /* the op list parser */
    CHECK(np_model_fault_applies(NP_MODEL_GPT, "Functional.softmax, Functional.scaled_dot_product_attention"));
    CHECK(!np_model_fault_applies(NP_MODEL_MLP, "Functional.softmax, Functional.scaled_dot_product_attention"));
    CHECK(!np_model_fault_applies(NP_MODEL_MLP, "Functional.lin"));
    CHECK(!np_model_fault_applies(NP_MODEL_MLP, ""));
    return check_report();
}
