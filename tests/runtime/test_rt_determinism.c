/* tests/runtime/test_rt_determinism.c - the tiny all-ops graph gives the same
 * bits at 1 and 2 OpenMP threads and for the same seed, on cpu and npu-sim
 * (fp32 and bf16); a different seed gives different numbers. */
#include <math.h>
#include <omp.h>

#include "check.h"
#include "rt_graph.h"

static int same_bits(const recorder *a, const recorder *b, const char *what)
{
    if (a->n != b->n) {
        fprintf(stderr, "%s: %d vs %d events\n", what, a->n, b->n);
        return 0;
    }
    for (int i = 0; i < a->n; i++) {
        if (strcmp(a->ev[i].name, b->ev[i].name) != 0 || a->ev[i].n != b->ev[i].n ||
            memcmp(a->ev[i].vals, b->ev[i].vals, sizeof(float) * (size_t)a->ev[i].n) != 0) {
            fprintf(stderr, "%s: event %d (%s) differs\n", what, i, a->ev[i].name);
            return 0;
        }
    }
    return 1;
}

int main(void)
{
    const struct { np_device d; np_dtype p; const char *name; } cfg[] = {
        {NP_DEVICE_CPU, NP_FLOAT32, "cpu fp32"},
        {NP_DEVICE_CPU, NP_BFLOAT16, "cpu bf16"},
        {NP_DEVICE_NPU_SIM, NP_FLOAT32, "npu-sim fp32"},
        {NP_DEVICE_NPU_SIM, NP_FLOAT16, "npu-sim fp16"},
    };
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        recorder r1 = {0}, r2 = {0}, r3 = {0}, r4 = {0};
        omp_set_num_threads(1);
        CHECK(graph_run(cfg[c].d, cfg[c].p, NP_FAULT_NONE, 11, &r1) == NP_OK);
        omp_set_num_threads(2);
        CHECK(graph_run(cfg[c].d, cfg[c].p, NP_FAULT_NONE, 11, &r2) == NP_OK);
        CHECK(graph_run(cfg[c].d, cfg[c].p, NP_FAULT_NONE, 11, &r3) == NP_OK);
        CHECK(graph_run(cfg[c].d, cfg[c].p, NP_FAULT_NONE, 12, &r4) == NP_OK);
        CHECK(r1.n > 40);
        CHECK(isfinite(r1.loss));
        CHECK_MSG(same_bits(&r1, &r2, cfg[c].name), "%s: 1 vs 2 threads", cfg[c].name);
        CHECK_MSG(same_bits(&r2, &r3, cfg[c].name), "%s: same seed twice", cfg[c].name);
        CHECK_MSG(r4.loss != r3.loss, "%s: another seed should change the loss", cfg[c].name);
        rec_free(&r1);
        rec_free(&r2);
        rec_free(&r3);
        rec_free(&r4);
    }
    return check_report();
}
