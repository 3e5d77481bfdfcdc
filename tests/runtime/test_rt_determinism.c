/* tests/runtime/test_rt_determinism.c - the all-ops graph gives the same bits
 * at 1, 2 and 3 OpenMP threads and for the same seed, on cpu and npu-sim
 * (fp32, bf16, fp16); a different seed gives different numbers.
 *
 * The tiny default graph (B 2, T 8, C 16) is below every OpenMP threshold
 * (rt_internal.h), so on its own it would run every kernel on one thread and
 * could not fail. The test therefore also runs a wider graph (B 4, C 64,
 * V 48: four 16-column blocks for the column reductions, two GEMM panels,
 * two 2048-element GELU blocks, 8 attention heads) with the
 * runtime's rt_set_par_all(1) knob, which sends every kernel, GEMM and
 * optimizer loop down its OpenMP path whatever the size: a kernel whose
 * result depends on the thread that computes a piece now changes the bits.
 * (Serial and parallel paths are not compared with each other: a GEMM cut
 * into panels may round differently from one sgemm call; what is promised is
 * independence from the thread count.) */
#include <math.h>
#include <omp.h>

#include "check.h"
#include "rt_graph.h"
#include "rt_internal.h"

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

/* Number of threads that run an OpenMP region of the parallel kernels. */
static int region_threads(void)
{
    int n = 0;
#pragma omp parallel if (rt_par_all)
    {
#pragma omp atomic
        n++;
    }
    return n;
}

int main(void)
{
    const struct { np_device d; np_dtype p; const char *name; } cfg[] = {
        {NP_DEVICE_CPU, NP_FLOAT32, "cpu fp32"},
        {NP_DEVICE_CPU, NP_BFLOAT16, "cpu bf16"},
        {NP_DEVICE_NPU_SIM, NP_FLOAT32, "npu-sim fp32"},
        {NP_DEVICE_NPU_SIM, NP_FLOAT16, "npu-sim fp16"},
    };
    const graph_dims wide = {4, 8, 64, 48};
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        /* the default tiny graph at the real thresholds */
        recorder r1 = {0}, r2 = {0}, r3 = {0}, r4 = {0};
        rt_set_par_all(0);
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

        /* the wide graph with every kernel on its parallel path */
        recorder s1 = {0}, s2 = {0}, s3 = {0};
        rt_set_par_all(1);
        omp_set_num_threads(1);
        CHECK(graph_run_dims(cfg[c].d, cfg[c].p, NP_FAULT_NONE, 11, &s1, wide) == NP_OK);
        omp_set_num_threads(2);
        CHECK_EQ_INT(region_threads(), 2);
        CHECK(graph_run_dims(cfg[c].d, cfg[c].p, NP_FAULT_NONE, 11, &s2, wide) == NP_OK);
        omp_set_num_threads(3);
        CHECK_EQ_INT(region_threads(), 3);
        CHECK(graph_run_dims(cfg[c].d, cfg[c].p, NP_FAULT_NONE, 11, &s3, wide) == NP_OK);
        CHECK(s1.n > 40);
        CHECK(isfinite(s1.loss));
        CHECK_MSG(same_bits(&s1, &s2, cfg[c].name), "%s: wide graph, 1 vs 2 threads", cfg[c].name);
        CHECK_MSG(same_bits(&s1, &s3, cfg[c].name), "%s: wide graph, 1 vs 3 threads", cfg[c].name);
        rt_set_par_all(0);
        rec_free(&s1);
        rec_free(&s2);
        rec_free(&s3);
    }
    return check_report();
}
