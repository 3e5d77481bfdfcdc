/* tests/profile/test_prof_analyze.c - np_profile on small traces whose
 * answers are worked out by hand in the comments: the device timeline
 * (compute > communication > memory, the last step's kernels left out as
 * HTA does), the CPU timeline (optimizer > data > communication > compute),
 * self times of nested calls, idle bubbles, overlap, the op-by-op compare
 * and the call-by-call one (a slow call of a repeated op named),
 * the root forms (object, bare array) and bad input naming the file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "nprobe/profile.h"

static char dir[] = "np_prof_test_XXXXXX"; /* in the test's build folder */

static const char *put(const char *name, const char *text)
{
    static char path[4][256];
    static int k;
    char *p = path[k++ % 4];
    snprintf(p, 256, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    fputs(text, f);
    fclose(f);
    return p;
}

static const np_prof_op *find(const np_prof_rank *r, const char *name)
{
    for (size_t i = 0; i < r->n_ops; i++)
        if (!strcmp(r->ops[i].name, name))
            return &r->ops[i];
    return NULL;
}

/* Two steps [0,100) [100,200). Kernels: gemm [20,50] (launch 10),
 * nccl [40,70] (launch 12), Memcpy [80,90] (launch 14), gemm [160,170]
 * launched at 150 in the last step: left out. compute 30; communication
 * [50,70] 20; memory 10; busy 60; span 20..90 = 70; idle 10, one bubble
 * [70,80]; overlap [40,50] 10 of communication's 30. */
static const char device_trace[] =
    "{\"schemaVersion\": 1, \"distributedInfo\": {\"rank\": 3}, \"traceEvents\": [\n"
    "{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"ProfilerStep#1\",\"pid\":1,\"tid\":1,\"ts\":0,\"dur\":100},\n"
    "{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"ProfilerStep#2\",\"pid\":1,\"tid\":1,\"ts\":100,\"dur\":100},\n"
    "{\"ph\":\"X\",\"cat\":\"cuda_runtime\",\"name\":\"cudaLaunchKernel\",\"pid\":1,\"tid\":1,\"ts\":10,\"dur\":1,\"args\":{\"correlation\":1}},\n"
    "{\"ph\":\"X\",\"cat\":\"cuda_runtime\",\"name\":\"cudaLaunchKernel\",\"pid\":1,\"tid\":1,\"ts\":12,\"dur\":1,\"args\":{\"correlation\":2}},\n"
    "{\"ph\":\"X\",\"cat\":\"cuda_runtime\",\"name\":\"cudaMemcpyAsync\",\"pid\":1,\"tid\":1,\"ts\":14,\"dur\":1,\"args\":{\"correlation\":3}},\n"
    "{\"ph\":\"X\",\"cat\":\"cuda_runtime\",\"name\":\"cudaLaunchKernel\",\"pid\":1,\"tid\":1,\"ts\":150,\"dur\":1,\"args\":{\"correlation\":4}},\n"
    "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"gemm\",\"pid\":0,\"tid\":7,\"ts\":20,\"dur\":30,\"args\":{\"stream\":7,\"correlation\":1,\"flops\":3e6}},\n"
    "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"ncclKernel_AllReduce_RING\",\"pid\":0,\"tid\":20,\"ts\":40,\"dur\":30,\"args\":{\"stream\":20,\"correlation\":2}},\n"
    "{\"ph\":\"X\",\"cat\":\"gpu_memcpy\",\"name\":\"Memcpy HtoD (Pageable -> Device)\",\"pid\":0,\"tid\":7,\"ts\":80,\"dur\":10,\"args\":{\"stream\":7,\"correlation\":3}},\n"
    "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"gemm\",\"pid\":0,\"tid\":7,\"ts\":160,\"dur\":10,\"args\":{\"stream\":7,\"correlation\":4}},\n"
    "{\"ph\":\"i\",\"name\":\"marker\",\"pid\":1,\"tid\":1,\"ts\":5}\n"
    "], \"traceName\": \"t\"}\n";

/* torch's (Kineto's) layout: every CPU event first, then the GPU activity
 * (per launch: kernel, flow end, runtime call, flow start), the metadata
 * and "Record Window End" (a string pid) last. Steps [0,100) [100,200)
 * [200,300). Launches (runtime ts, correlation): 10/1 gemm [20,50], 12/2
 * nccl [40,60], 13/3 cudaStreamIsCapturing (no kernel), 110/4 gemm
 * [120,150], 115/5 Memcpy [160,170], 150/8 gemm [180,190], 210/7 gemm
 * [220,240] and 212/9 gemm [250,260] in the last step: left out. The launch
 * 8 comes last, after 7 and 9 made one run 7..9: it splits the run (kept
 * 180..190). Kernels: compute [20,50] [120,150] [180,190] 70; communication
 * [50,60] 10 (its [40,50] under compute: overlap 10 of 20); memory 10; busy
 * 90; span 20..190 = 170; idle 80 in 3 bubbles [60,120] [150,160]
 * [170,180] - HTA's kernel_time 170, idle 80, compute 70, non-compute 20.
 * gemm: 3 calls, 70 us (twice in step 2: call rows with np_prof_analyze,
 * none with np_prof_analyze_ops, every other figure the same). */
#define KX(cat, name, tid, ts, dur, corr) \
    "{\"ph\":\"X\",\"cat\":\"" cat "\",\"name\":\"" name "\",\"pid\":0,\"tid\":" #tid ",\"ts\":" #ts \
    ",\"dur\":" #dur ",\"args\":{\"External id\":1,\"device\":0,\"stream\":" #tid ",\"correlation\":" #corr "}},\n" \
    "{\"ph\":\"f\",\"id\":" #corr ",\"pid\":0,\"tid\":" #tid ",\"ts\":" #ts ",\"cat\":\"ac2g\",\"name\":\"ac2g\",\"bp\":\"e\"},\n"
#define RT(name, ts, corr) \
    "{\"ph\":\"X\",\"cat\":\"cuda_runtime\",\"name\":\"" name "\",\"pid\":1,\"tid\":1,\"ts\":" #ts \
    ",\"dur\":1,\"args\":{\"External id\":1,\"cbid\":211,\"correlation\":" #corr "}},\n" \
    "{\"ph\":\"s\",\"id\":" #corr ",\"pid\":1,\"tid\":1,\"ts\":" #ts ",\"cat\":\"ac2g\",\"name\":\"ac2g\"},\n"
#define STEP(n, ts) \
    "{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"ProfilerStep#" #n "\",\"pid\":1,\"tid\":1,\"ts\":" #ts \
    ",\"dur\":99,\"args\":{\"External id\":9}},\n"
#define MM(ts) \
    "{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"aten::mm\",\"pid\":1,\"tid\":1,\"ts\":" #ts ",\"dur\":20," \
    "\"args\":{\"External id\":2,\"Input Dims\":[[4,4],[4,4]]}},\n"
static const char *const kineto_trace[] = {
    "{\n  \"schemaVersion\": 1,\n  \"deviceProperties\": [{\"id\": 0, \"name\": \"gpu\"}],\n"
    "  \"distributedInfo\": {\"backend\": \"nccl\", \"rank\": 0, \"world_size\": 1},\n  \"traceEvents\": [\n"
    STEP(1, 0) MM(10) STEP(2, 100) MM(110) STEP(3, 200) MM(210)
    "{\"ph\":\"X\",\"cat\":\"gpu_user_annotation\",\"name\":\"ProfilerStep#1\",\"pid\":0,\"tid\":7,\"ts\":0,"
    "\"dur\":300,\"args\":{\"External id\":9}},\n",
    KX("kernel", "gemm", 7, 20, 30, 1) RT("cudaLaunchKernel", 10, 1)
    KX("kernel", "ncclKernel_AllReduce_RING_LL_Sum_float", 20, 40, 20, 2) RT("cudaLaunchKernel", 12, 2)
    RT("cudaStreamIsCapturing", 13, 3)
    KX("kernel", "gemm", 7, 120, 30, 4) RT("cudaLaunchKernel", 110, 4),
    KX("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 7, 160, 10, 5) RT("cudaMemcpyAsync", 115, 5)
    KX("kernel", "gemm", 7, 180, 10, 8)
    KX("kernel", "gemm", 7, 220, 20, 7) RT("cudaLaunchKernel", 210, 7)
    KX("kernel", "gemm", 7, 250, 10, 9) RT("cudaLaunchKernel", 212, 9)
    RT("cudaLaunchKernel", 150, 8),
    "{\"name\":\"process_name\",\"ph\":\"M\",\"ts\":0,\"pid\":0,\"tid\":0,\"args\":{\"name\":\"python\"}},\n"
    "{\"name\":\"thread_name\",\"ph\":\"M\",\"ts\":0,\"pid\":0,\"tid\":7,\"args\":{\"name\":\"stream 7 \"}},\n"
    "{\"name\":\"Record Window End\",\"ph\":\"i\",\"s\":\"g\",\"pid\":\"\",\"tid\":\"\",\"ts\":300}\n"
    "  ],\n  \"traceName\": \"t.pt.trace.json\",\n  \"displayTimeUnit\": \"ms\"\n}\n"};

/* A launch after a step start that comes before that step's annotation
 * (launch 2 at 150, then ProfilerStep#2 [100,200)): the run 1..2 cannot be
 * split, so pass 1 is read again keeping each launch; only kernel 2 is left
 * out: compute [20,30] 10, span 10. */
static const char straddle_trace[] =
    "{\"traceEvents\": [\n" STEP(1, 0) RT("cudaLaunchKernel", 10, 1) RT("cudaLaunchKernel", 150, 2)
    STEP(2, 100) KX("kernel", "gemm", 7, 20, 10, 1) KX("kernel", "gemm", 7, 160, 10, 2)
    "{\"ph\":\"i\",\"name\":\"end\",\"pid\":1,\"tid\":1,\"ts\":300}]}\n";

static void test_kineto_order(void)
{
    char text[16384] = "";
    for (size_t i = 0; i < sizeof kineto_trace / sizeof kineto_trace[0]; i++)
        strcat(text, kineto_trace[i]);
    const char *path = put("kin.json", text);
    for (int ops_only = 0; ops_only < 2; ops_only++) {
        np_prof_rank r;
        np_error err = {0};
        CHECK((ops_only ? np_prof_analyze_ops : np_prof_analyze)(&r, path, &err) == NP_OK);
        CHECK(r.device == 1 && r.rank == 0 && r.steps == 3 && r.last_step_dropped == 1);
        CHECK_CLOSE(r.class_us[NP_PROF_COMPUTE], 70, 0, 0);
        CHECK_CLOSE(r.class_us[NP_PROF_COMM], 10, 0, 0);
        CHECK_CLOSE(r.class_us[NP_PROF_MEMORY], 10, 0, 0);
        CHECK_CLOSE(r.class_us[NP_PROF_OTHER], 0, 0, 0);
        CHECK_CLOSE(r.class_us[NP_PROF_IDLE], 80, 0, 0);
        CHECK_CLOSE(r.span_us, 170, 0, 0);
        CHECK_CLOSE(r.busy_us, 90, 0, 0);
        CHECK_CLOSE(r.overlap_us, 10, 0, 0);
        CHECK(r.n_bubbles == 3);
        CHECK_CLOSE(r.bubble_us, 80, 0, 0);
        CHECK_CLOSE(r.top[0].start_us, 40, 0, 0); /* [60,120] from the span's start 20 */
        CHECK_CLOSE(r.top[0].dur_us, 60, 0, 0);
        const np_prof_op *g = find(&r, "gemm"), *mm = find(&r, "aten::mm"), *l = find(&r, "cudaLaunchKernel");
        CHECK(g && g->count == 3 && g->total_us == 70);
        CHECK(mm && mm->count == 3 && mm->total_us == 60 && mm->self_us == 60);
        CHECK(l && l->count == 6 && l->total_us == 6);
        CHECK(r.calls_ok == !ops_only && (r.n_calls > 0) == !ops_only);
        np_prof_rank_free(&r);
    }
    np_prof_rank r;
    np_error err = {0};
    CHECK(np_prof_analyze_ops(&r, put("str.json", straddle_trace), &err) == NP_OK);
    CHECK(r.steps == 2 && r.last_step_dropped == 1);
    CHECK_CLOSE(r.class_us[NP_PROF_COMPUTE], 10, 0, 0);
    CHECK_CLOSE(r.span_us, 10, 0, 0);
    const np_prof_op *g = find(&r, "gemm");
    CHECK(g && g->count == 1 && g->total_us == 10);
    np_prof_rank_free(&r);
}

/* No steps. Thread 1: outer [0,100] holding inner [10,40] and [50,70]:
 * outer self 50, inner total and self 50. Optimizer.step [120,150]
 * (annotation) holding aten::add_ [125,135]. Thread 2: c10d::allreduce_
 * [90,110]. optimizer 30; communication 20; compute [0,90] 90; busy 140;
 * span 150; idle 10, one bubble [110,120]; overlap [90,100] 10. */
#define CPU_EVENTS(inner2_dur)                                                                        \
    "{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"outer\",\"pid\":1,\"tid\":1,\"ts\":0,\"dur\":100},\n"   \
    "{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"inner\",\"pid\":1,\"tid\":1,\"ts\":10,\"dur\":30},\n"   \
    "{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"inner\",\"pid\":1,\"tid\":1,\"ts\":50,\"dur\":" inner2_dur "},\n" \
    "{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"aten::add_\",\"pid\":1,\"tid\":1,\"ts\":125,\"dur\":10},\n" \
    "{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"c10d::allreduce_\",\"pid\":1,\"tid\":2,\"ts\":90,\"dur\":20},\n" \
    "{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"Optimizer.step#SGD.step\",\"pid\":1,\"tid\":1,\"ts\":120,\"dur\":30}\n"

static void test_device(void)
{
    np_prof_rank r;
    np_error err = {0};
    CHECK(np_prof_analyze(&r, put("dev.json", device_trace), &err) == NP_OK);
    CHECK(r.device == 1 && r.rank == 3 && r.steps == 2 && r.last_step_dropped == 1);
    CHECK(r.events == 11);
    CHECK_CLOSE(r.class_us[NP_PROF_COMPUTE], 30, 0, 0);
    CHECK_CLOSE(r.class_us[NP_PROF_COMM], 20, 0, 0);
    CHECK_CLOSE(r.class_us[NP_PROF_MEMORY], 10, 0, 0);
    CHECK_CLOSE(r.class_us[NP_PROF_OTHER], 0, 0, 0);
    CHECK_CLOSE(r.class_us[NP_PROF_IDLE], 10, 0, 0);
    CHECK_CLOSE(r.span_us, 70, 0, 0);
    CHECK_CLOSE(r.busy_us, 60, 0, 0);
    CHECK_CLOSE(r.comm_us, 30, 0, 0);
    CHECK_CLOSE(r.overlap_us, 10, 0, 0);
    CHECK(r.n_bubbles == 1 && r.n_top == 1);
    CHECK_CLOSE(r.top[0].start_us, 50, 0, 0);
    CHECK_CLOSE(r.top[0].dur_us, 10, 0, 0);
    CHECK_CLOSE(r.flops, 3e6, 0, 0);
    const np_prof_op *g = find(&r, "gemm");
    CHECK(g && g->count == 1);
    CHECK(g && g->total_us == 30 && g->self_us == 30 && g->flops == 3e6);
    /* per step: gemm 30 in step 1, nothing in step 2 (left out): median 15 */
    CHECK(g && g->step_us == 15);
    CHECK_CLOSE(r.step_med_us, 100, 0, 0);
    CHECK(r.calls_ok == 0 && r.n_calls == 0); /* no op twice in a step */
    np_prof_rank_free(&r);
}

static void test_cpu(void)
{
    np_prof_rank r;
    np_error err = {0};
    /* a bare array of events */
    CHECK(np_prof_analyze(&r, put("cpu.json", "[\n" CPU_EVENTS("20") "]\n"), &err) == NP_OK);
    CHECK(r.device == 0 && r.rank == -1 && r.steps == 0 && r.self_ok == 1);
    CHECK_CLOSE(r.class_us[NP_PROF_OPTIMIZER], 30, 0, 0);
    CHECK_CLOSE(r.class_us[NP_PROF_COMM], 20, 0, 0);
    CHECK_CLOSE(r.class_us[NP_PROF_COMPUTE], 90, 0, 0);
    CHECK_CLOSE(r.class_us[NP_PROF_DATA], 0, 0, 0);
    CHECK_CLOSE(r.class_us[NP_PROF_IDLE], 10, 0, 0);
    CHECK_CLOSE(r.span_us, 150, 0, 0);
    CHECK_CLOSE(r.overlap_us, 10, 0, 0);
    CHECK(r.n_bubbles == 1);
    CHECK_CLOSE(r.top[0].start_us, 110, 0, 0);
    const np_prof_op *o = find(&r, "outer"), *in = find(&r, "inner");
    CHECK(o && o->self_us == 50 && o->total_us == 100);
    CHECK(in && in->count == 2 && in->total_us == 50 && in->self_us == 50 && in->min_us == 20 &&
          in->max_us == 30);
    CHECK(r.ops[0].total_us == 100); /* sorted by total: outer first */
    /* no steps: calls counted over the trace; inner's second call within outer */
    CHECK(r.calls_ok == 1 && r.n_calls == 5);
    for (size_t i = 0; i < r.n_calls; i++)
        if (!strcmp(r.calls[i].name, "inner #1"))
            CHECK(r.calls[i].self_us == 20 && r.calls[i].at_us == 50 &&
                  !strcmp(r.calls[i].within, "outer"));
    np_prof_rank_free(&r);
}

static void test_compare(void)
{
    np_prof_rank a, b;
    np_error err = {0};
    CHECK(np_prof_analyze(&a, put("a.json", "{\"traceEvents\": [" CPU_EVENTS("20") "]}"), &err) == NP_OK);
    /* B: the second inner lasts 40 (to 90): inner self 70 (+20), outer self 30 (-20) */
    CHECK(np_prof_analyze(&b, put("b.json", "{\"traceEvents\": [" CPU_EVENTS("40")
                                            ",{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"only_b\",\"pid\":1,"
                                            "\"tid\":3,\"ts\":0,\"dur\":5}]}"),
                          &err) == NP_OK);
    np_prof_compare c;
    CHECK(np_prof_compare_ranks(&c, &a, &b, &err) == NP_OK);
    CHECK(c.n_pairs == 5); /* outer inner add_ allreduce_ (both), only_b; the annotation takes no part */
    CHECK(c.pairs[0].a && c.pairs[0].b && !strcmp(c.pairs[0].a->name, "inner"));
    CHECK_CLOSE(c.pairs[0].delta_us, 20, 0, 0);
    CHECK_CLOSE(c.pairs[0].ratio, 70.0 / 50.0, 0, 1e-15);
    CHECK(!c.pairs[1].a && !strcmp(c.pairs[1].b->name, "only_b"));
    CHECK(!strcmp(c.pairs[c.n_pairs - 1].a->name, "outer"));
    CHECK_CLOSE(c.pairs[c.n_pairs - 1].delta_us, -20, 0, 0);
    np_prof_compare_free(&c);
    np_prof_rank_free(&a);
    np_prof_rank_free(&b);
}

/* Two steps [0,100) [100,200), each (o = 0, 100): aten::linear [o+5,o+25]
 * holding aten::mm [o+10,o+20], linear [o+30,o+50] holding mm [o+35,o+45],
 * linear [o+85,o+95] holding mm [o+87,o+93]. B: the second mm of each step
 * lasts 40 (its linear 50). By name aten::mm is 26 vs 56 us a step (which
 * call?); in call order "aten::mm #1" within aten::linear at 35 us is
 * 10 vs 40 (B/A 4), every other call 0 (linear's self times 10 10 4 alike). */
static void ev(char *buf, size_t cap, const char *name, double ts, double dur)
{
    size_t n = strlen(buf);
    snprintf(buf + n, cap - n,
             "%s{\"ph\":\"X\",\"cat\":\"%s\",\"name\":\"%s\",\"pid\":1,\"tid\":1,\"ts\":%g,\"dur\":%g}\n",
             n > 2 ? "," : "", strncmp(name, "ProfilerStep", 12) ? "cpu_op" : "user_annotation", name, ts,
             dur);
}

static const char *calls_trace(const char *file, double d2)
{
    static char buf[4096];
    strcpy(buf, "[\n");
    for (int s = 0; s < 2; s++) {
        double o = 100.0 * s;
        ev(buf, sizeof buf, s ? "ProfilerStep#2" : "ProfilerStep#1", o, 100);
        ev(buf, sizeof buf, "aten::linear", o + 5, 20);
        ev(buf, sizeof buf, "aten::mm", o + 10, 10);
        ev(buf, sizeof buf, "aten::linear", o + 30, d2 + 10);
        ev(buf, sizeof buf, "aten::mm", o + 35, d2);
        ev(buf, sizeof buf, "aten::linear", o + 85, 10);
        ev(buf, sizeof buf, "aten::mm", o + 87, 6);
    }
    strcat(buf, "]\n");
    return put(file, buf);
}

static const np_prof_pair *find_call(const np_prof_compare *c, const char *name)
{
    for (size_t i = 0; i < c->n_calls; i++)
        if (c->calls[i].a && !strcmp(c->calls[i].a->name, name))
            return &c->calls[i];
    return NULL;
}

static void test_calls(void)
{
    np_prof_rank a, b;
    np_error err = {0};
    CHECK(np_prof_analyze(&a, calls_trace("ca.json", 10), &err) == NP_OK);
    CHECK(np_prof_analyze(&b, calls_trace("cb.json", 40), &err) == NP_OK);
    CHECK(a.calls_ok == 1 && a.n_calls == 6 && b.calls_ok == 1 && b.n_calls == 6);
    np_prof_compare c;
    CHECK(np_prof_compare_ranks(&c, &a, &b, &err) == NP_OK);
    /* by name: aten::mm 26 -> 56 a step, the first row */
    CHECK(c.n_pairs == 2 && !strcmp(c.pairs[0].a->name, "aten::mm"));
    CHECK_CLOSE(c.pairs[0].a_step_us, 26, 0, 0);
    CHECK_CLOSE(c.pairs[0].b_step_us, 56, 0, 0);
    /* in call order: the second call, within aten::linear, 35 us into its step */
    CHECK(c.n_calls == 6 && c.calls[0].a && c.calls[0].b);
    const np_prof_op *top = c.calls[0].a;
    CHECK(!strcmp(top->name, "aten::mm #1") && top->within && !strcmp(top->within, "aten::linear"));
    CHECK_CLOSE(top->at_us, 35, 0, 0);
    CHECK_CLOSE(c.calls[0].a_step_us, 10, 0, 0);
    CHECK_CLOSE(c.calls[0].b_step_us, 40, 0, 0);
    CHECK_CLOSE(c.calls[0].ratio, 4, 0, 0);
    for (size_t i = 1; i < c.n_calls; i++)
        CHECK(c.calls[i].a && c.calls[i].b && c.calls[i].delta_us == 0);
    const np_prof_pair *l2 = find_call(&c, "aten::linear #2"), *m0 = find_call(&c, "aten::mm #0");
    CHECK(l2 && l2->a_step_us == 4 && !l2->a->within && l2->a->at_us == 85);
    CHECK(m0 && m0->b_step_us == 10 && m0->a->at_us == 10);
    np_prof_compare_free(&c);
    np_prof_rank_free(&a);
    np_prof_rank_free(&b);
}

/* Call order across a changed program: two steps of four layers, each
 * layer (40 us from o + 40k) aten::linear [1, 10] holding aten::mm [2, 6],
 * then aten::relu [25, 4]. B calls one aten::mm more after layer 1's relu
 * ([31, 3], no linear around it) and its layer 2 mm takes 18 (linear 22).
 * B's mm calls are #0 #1 (extra) #2 #3 #4 against A's #0 .. #3: aligned on
 * the op sequence, A's mm #2 pairs with B's mm #3 (6 -> 18, B/A 3, the first
 * row), B's mm #2 is B only (+3), and every other pair is equal (linear
 * self 4, relu 4). Pairing by k would give A's #2 B's extra call and A's #3
 * the slow one. */
static const char *shift_trace(const char *file, int extra)
{
    static char buf[8192];
    strcpy(buf, "[\n");
    for (int s = 0; s < 2; s++) {
        double o = 200.0 * s;
        ev(buf, sizeof buf, s ? "ProfilerStep#2" : "ProfilerStep#1", o, 200);
        for (int k = 0; k < 4; k++) {
            double base = o + 40 * k, slow = extra && k == 2 ? 12 : 0;
            ev(buf, sizeof buf, "aten::linear", base + 1, 10 + slow);
            ev(buf, sizeof buf, "aten::mm", base + 2, 6 + slow);
            ev(buf, sizeof buf, "aten::relu", base + 25, 4);
            if (extra && k == 1)
                ev(buf, sizeof buf, "aten::mm", base + 31, 3);
        }
    }
    strcat(buf, "]\n");
    return put(file, buf);
}

static void test_calls_shift(void)
{
    np_prof_rank a, b;
    np_error err = {0};
    CHECK(np_prof_analyze(&a, shift_trace("sa.json", 0), &err) == NP_OK);
    CHECK(np_prof_analyze(&b, shift_trace("sb.json", 1), &err) == NP_OK);
    CHECK(a.calls_ok && a.n_calls == 12 && b.calls_ok && b.n_calls == 13);
    np_prof_compare c;
    CHECK(np_prof_compare_ranks(&c, &a, &b, &err) == NP_OK);
    CHECK(c.n_calls == 13);
    const np_prof_pair *top = c.n_calls ? &c.calls[0] : NULL;
    CHECK(top && top->a && top->b && !strcmp(top->a->name, "aten::mm #2") &&
          !strcmp(top->b->name, "aten::mm #3"));
    CHECK_CLOSE(top ? top->ratio : 0, 3, 0, 0);
    CHECK_CLOSE(top ? top->delta_us : 0, 12, 0, 0);
    int one_sided = 0;
    for (size_t i = 1; i < c.n_calls; i++) {
        const np_prof_pair *p = &c.calls[i];
        if (!p->a) {
            one_sided++;
            CHECK(!strcmp(p->b->name, "aten::mm #2") && p->delta_us == 3);
        } else {
            CHECK(p->b && p->delta_us == 0);
        }
    }
    CHECK(one_sided == 1);
    np_prof_compare_free(&c);
    /* the other way round: the extra call is A only, the slow one B/A 1/3 */
    CHECK(np_prof_compare_ranks(&c, &b, &a, &err) == NP_OK);
    CHECK(c.n_calls == 13);
    const np_prof_pair *last = c.n_calls ? &c.calls[c.n_calls - 1] : NULL;
    CHECK(last && last->a && last->b && !strcmp(last->a->name, "aten::mm #3") &&
          !strcmp(last->b->name, "aten::mm #2") && last->delta_us == -12);
    np_prof_compare_free(&c);
    np_prof_rank_free(&a);
    np_prof_rank_free(&b);
}

/* Calls made in some steps only: five steps of shift_trace's four layers;
 * layer 2's mm lasts 6 9 7 20 8 us in steps 0-4 (its linear 4 us more, so
 * every linear's self time is 4), in A and in B. B calls one aten::mm more
 * after layer 1's relu ([71, x] from its step's start, no linear around
 * it) in steps 1 (x = 3) and 3 (x = 5) only; C in step 0 only (x = 2).
 * Each step is aligned to the call order most steps share, so B's and C's
 * rows are A's 12 (mm #2: median of 6 9 7 20 8 = 8, in 5 steps; mm #3: 6)
 * and one more, "aten::mm #4" (after the reference's mm #0-#3), right
 * after "aten::relu #1", in 2 steps with median 4 (3, 5) for B, in 1 step
 * with 2 for C, at 71 us. By call index with absent steps as 0 (before),
 * B's mm #2 was median(6, 3, 7, 5, 8) = 6 and its mm #4 median(0, 6, 0, 6,
 * 0) = 0. A against B: every pair equal (delta 0), B's extra call the only
 * one-sided row (+4). */
static const char *steps_trace(const char *file, const double *extra)
{
    static char buf[16384];
    static const double d2[5] = {6, 9, 7, 20, 8};
    strcpy(buf, "[\n");
    for (int s = 0; s < 5; s++) {
        double o = 200.0 * s;
        char step[32];
        snprintf(step, sizeof step, "ProfilerStep#%d", s + 1);
        ev(buf, sizeof buf, step, o, 200);
        for (int k = 0; k < 4; k++) {
            double base = o + 40 * k, mm = k == 2 ? d2[s] : 6;
            ev(buf, sizeof buf, "aten::linear", base + 1, mm + 4);
            ev(buf, sizeof buf, "aten::mm", base + 2, mm);
            ev(buf, sizeof buf, "aten::relu", base + 25, 4);
            if (k == 1 && extra[s] > 0)
                ev(buf, sizeof buf, "aten::mm", base + 31, extra[s]);
        }
    }
    strcat(buf, "]\n");
    return put(file, buf);
}

static const np_prof_op *find_row(const np_prof_rank *r, const char *name, size_t *at)
{
    for (size_t i = 0; i < r->n_calls; i++)
        if (!strcmp(r->calls[i].name, name)) {
            if (at)
                *at = i;
            return &r->calls[i];
        }
    return NULL;
}

static void test_calls_steps(void)
{
    static const double none[5] = {0}, xb[5] = {0, 3, 0, 5, 0}, xc[5] = {2, 0, 0, 0, 0};
    np_prof_rank a, x[2];
    np_error err = {0};
    CHECK(np_prof_analyze(&a, steps_trace("pa.json", none), &err) == NP_OK);
    CHECK(np_prof_analyze(&x[0], steps_trace("pb.json", xb), &err) == NP_OK);
    CHECK(np_prof_analyze(&x[1], steps_trace("pc.json", xc), &err) == NP_OK);
    CHECK(a.calls_ok && a.n_calls == 12 && a.steps == 5);
    for (size_t i = 0; i < a.n_calls; i++) {
        const np_prof_op *o = &a.calls[i];
        double want = !strcmp(o->name, "aten::mm #2") ? 8 : !strncmp(o->name, "aten::mm", 8) ? 6 : 4;
        CHECK(o->count == 5 && o->step_us == want);
    }
    const double x_med[2] = {4, 2}, x_steps[2] = {2, 1};
    for (int v = 0; v < 2; v++) {
        np_prof_rank *b = &x[v];
        CHECK(b->calls_ok && b->n_calls == 13);
        size_t at_relu = 0, at_extra = 0;
        const np_prof_op *extra = find_row(b, "aten::mm #4", &at_extra);
        CHECK(find_row(b, "aten::relu #1", &at_relu) && at_extra == at_relu + 1);
        CHECK(extra && extra->count == x_steps[v] && extra->step_us == x_med[v] && extra->at_us == 71 &&
              !extra->within);
        for (size_t i = 0; i < a.n_calls; i++) { /* A's rows unchanged */
            const np_prof_op *o = find_row(b, a.calls[i].name, NULL);
            CHECK(o && o->count == 5 && o->step_us == a.calls[i].step_us && o->at_us == a.calls[i].at_us &&
                  !o->within == !a.calls[i].within);
        }
        np_prof_compare c;
        CHECK(np_prof_compare_ranks(&c, &a, b, &err) == NP_OK);
        CHECK(c.n_calls == 13);
        int one_sided = 0;
        for (size_t i = 0; i < c.n_calls; i++) {
            const np_prof_pair *p = &c.calls[i];
            if (!p->a) {
                one_sided++;
                CHECK(!strcmp(p->b->name, "aten::mm #4") && p->delta_us == x_med[v]);
            } else {
                CHECK(p->b && p->delta_us == 0 && !strcmp(p->a->name, p->b->name));
            }
        }
        CHECK(one_sided == 1);
        np_prof_compare_free(&c);
        np_prof_rank_free(b);
    }
    np_prof_rank_free(&a);
}

/* torch_npu's trace_view.json writes each op when it ends (its children
 * before it) and its ProfilerStep#N as a cpu_op: A's trace of
 * test_calls_shift in that order. The steps are steps (2, not operators),
 * each thread's self times are those of the start-ordered trace (mm 6,
 * linear 4, relu 4 per layer: 48, 32, 32), the CPU timeline 14 per layer
 * (112), and its calls pair with the start-ordered trace's with delta 0. */
static void test_end_order(void)
{
    static char buf[8192];
    strcpy(buf, "[\n");
    for (int s = 0; s < 2; s++) {
        double o = 200.0 * s;
        for (int k = 0; k < 4; k++) {
            double base = o + 40 * k;
            ev(buf, sizeof buf, "aten::mm", base + 2, 6);
            ev(buf, sizeof buf, "aten::linear", base + 1, 10);
            ev(buf, sizeof buf, "aten::relu", base + 25, 4);
        }
        size_t n = strlen(buf);
        snprintf(buf + n, sizeof buf - n,
                 ",{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"ProfilerStep#%d\",\"pid\":1,\"tid\":1,"
                 "\"ts\":%g,\"dur\":200}\n", s + 1, o);
    }
    strcat(buf, "]\n");
    np_prof_rank e, a;
    np_error err = {0};
    CHECK(np_prof_analyze(&e, put("eo.json", buf), &err) == NP_OK);
    CHECK(e.self_ok && e.calls_ok && e.steps == 2 && e.n_calls == 12);
    const np_prof_op *mm = find(&e, "aten::mm"), *lin = find(&e, "aten::linear"), *st = find(&e, "ProfilerStep#1");
    CHECK_CLOSE(mm ? mm->self_us : 0, 48, 0, 0);
    CHECK_CLOSE(lin ? lin->self_us : 0, 32, 0, 0);
    CHECK_CLOSE(lin ? lin->step_us : 0, 16, 0, 0);
    CHECK(st && !strcmp(st->cat, "user_annotation"));
    CHECK_CLOSE(e.class_us[NP_PROF_COMPUTE], 112, 0, 0);
    CHECK(np_prof_analyze(&a, shift_trace("sa.json", 0), &err) == NP_OK);
    np_prof_compare c;
    CHECK(np_prof_compare_ranks(&c, &a, &e, &err) == NP_OK);
    CHECK(c.n_calls == 12);
    /* within as the start-ordered trace gives it: each mm inside its linear
     * (the holder came after it), linear and relu in nothing */
    int inside = 0;
    for (size_t i = 0; i < c.n_calls; i++) {
        const np_prof_op *x = c.calls[i].a, *y = c.calls[i].b;
        CHECK(x && y && c.calls[i].delta_us == 0 && !strcmp(x->name, y->name));
        if (!x || !y)
            continue;
        int is_mm = !strncmp(y->name, "aten::mm #", 10);
        inside += is_mm && y->within && !strcmp(y->within, "aten::linear");
        CHECK(is_mm ? y->within != NULL : y->within == NULL);
        CHECK(!x->within == !y->within && (!x->within || !strcmp(x->within, y->within)));
    }
    CHECK(inside == 4);
    np_prof_compare_free(&c);
    np_prof_rank_free(&a);
    np_prof_rank_free(&e);
    /* three levels in end order: aten::mm [2, 6] in aten::linear [1, 10]
     * in Module.fc [0, 20], aten::relu [12, 4] in the module too; then
     * Module.g [29, 8] holding aten::relu [30, 2]: each row within the
     * outermost holder (which comes last), the modules within nothing */
    strcpy(buf, "[\n");
    ev(buf, sizeof buf, "aten::mm", 2, 6);
    ev(buf, sizeof buf, "aten::linear", 1, 10);
    ev(buf, sizeof buf, "aten::relu", 12, 4);
    ev(buf, sizeof buf, "Module.fc", 0, 20);
    ev(buf, sizeof buf, "aten::relu", 30, 2);
    ev(buf, sizeof buf, "Module.g", 29, 8);
    strcat(buf, "]\n");
    CHECK(np_prof_analyze(&e, put("eo.json", buf), &err) == NP_OK);
    CHECK(e.calls_ok && e.n_calls == 6);
    static const char *want[][2] = {{"aten::mm #0", "Module.fc"}, {"aten::linear #0", "Module.fc"},
                                    {"aten::relu #0", "Module.fc"}, {"Module.fc #0", NULL},
                                    {"aten::relu #1", "Module.g"}, {"Module.g #0", NULL}};
    for (size_t k = 0; k < 6; k++) {
        const np_prof_op *r = NULL;
        for (size_t i = 0; i < e.n_calls; i++)
            if (!strcmp(e.calls[i].name, want[k][0]))
                r = &e.calls[i];
        CHECK(r && (want[k][1] ? r->within && !strcmp(r->within, want[k][1]) : !r->within));
    }
    np_prof_rank_free(&e);
}

/* Ascend's trace_view.json: a bare array, ts as decimal strings; the
 * processes named by metadata (the Ascend Hardware one given last: pass 1
 * learns them before pass 2 reads the events). Ascend Hardware (pid 2):
 * stream 10 MatMul [10,40] AI_CORE, Add [50,60] AI_VECTOR_CORE, MatMul
 * [110,130]; stream 11 hcom_allReduce__1_0_1 [30,70] (a collective by name),
 * MEMCPY [80,90] MEMCPY_ASYNC; stream 12 MEMCPY_ASYNC [85,90] of Task Type
 * Other (as torch_npu writes some: memory by its name; as compute it would
 * take [85,90] from memory). HCCL (pid 3): the op [30,70] on tid 30, its
 * task Notify_Wait [30,50] on thread "Plane 0" (left out). Overlap Analysis
 * (pid 4): Computing [10,60] (left out). Compute [10,40]+[50,60]+[110,130]
 * = 60; communication [30,70] less compute's [30,40] [50,60] = 20; memory
 * 10; busy 90; span 10..130 = 120; idle 30; overlap 20. */
static const char ascend_trace[] =
    "[{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"Python\"}},\n"
    "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":3,\"tid\":0,\"args\":{\"name\":\"HCCL\"}},\n"
    "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":3,\"tid\":31,\"args\":{\"name\":\"Plane 0\"}},\n"
    "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":4,\"tid\":0,\"args\":{\"name\":\"Overlap Analysis\"}},\n"
    "{\"ph\":\"X\",\"name\":\"ProfilerStep#1\",\"pid\":1,\"tid\":1,\"ts\":\"0.000\",\"dur\":100},\n"
    "{\"ph\":\"X\",\"name\":\"ProfilerStep#2\",\"pid\":1,\"tid\":1,\"ts\":\"100.000\",\"dur\":100},\n"
    "{\"ph\":\"X\",\"name\":\"MatMul\",\"pid\":2,\"tid\":10,\"ts\":\"10.000\",\"dur\":30,\"args\":{\"Task Type\":\"AI_CORE\"}},\n"
    "{\"ph\":\"X\",\"name\":\"Add\",\"pid\":2,\"tid\":10,\"ts\":\"50.000\",\"dur\":10,\"args\":{\"Task Type\":\"AI_VECTOR_CORE\"}},\n"
    "{\"ph\":\"X\",\"name\":\"MatMul\",\"pid\":2,\"tid\":10,\"ts\":\"110.000\",\"dur\":20,\"args\":{\"Task Type\":\"AI_CORE\"}},\n"
    "{\"ph\":\"X\",\"name\":\"hcom_allReduce__1_0_1\",\"pid\":2,\"tid\":11,\"ts\":\"30.000\",\"dur\":40,\"args\":{\"Task Type\":\"AI_CPU\"}},\n"
    "{\"ph\":\"X\",\"name\":\"MEMCPY\",\"pid\":2,\"tid\":11,\"ts\":\"80.000\",\"dur\":10,\"args\":{\"Task Type\":\"MEMCPY_ASYNC\"}},\n"
    "{\"ph\":\"X\",\"name\":\"MEMCPY_ASYNC\",\"pid\":2,\"tid\":12,\"ts\":\"85.000\",\"dur\":5,\"args\":{\"Task Type\":\"Other\"}},\n"
    "{\"ph\":\"X\",\"name\":\"hcom_allReduce__1_0_1\",\"pid\":3,\"tid\":30,\"ts\":\"30.000\",\"dur\":40},\n"
    "{\"ph\":\"X\",\"name\":\"Notify_Wait\",\"pid\":3,\"tid\":31,\"ts\":\"30.000\",\"dur\":20},\n"
    "{\"ph\":\"X\",\"name\":\"Computing\",\"pid\":4,\"tid\":0,\"ts\":\"10.000\",\"dur\":50},\n"
    "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":2,\"tid\":0,\"args\":{\"name\":\"Ascend Hardware\"}}]\n";

static void test_ascend(void)
{
    np_prof_rank r;
    np_error err = {0};
    CHECK(np_prof_analyze(&r, put("asc.json", ascend_trace), &err) == NP_OK);
    CHECK(r.device == 1 && r.steps == 2);
    CHECK_CLOSE(r.class_us[NP_PROF_COMPUTE], 60, 0, 0);
    CHECK_CLOSE(r.class_us[NP_PROF_COMM], 20, 0, 0);
    CHECK_CLOSE(r.class_us[NP_PROF_MEMORY], 10, 0, 0);
    CHECK_CLOSE(r.class_us[NP_PROF_OTHER], 0, 0, 0);
    CHECK_CLOSE(r.span_us, 120, 0, 0);
    CHECK_CLOSE(r.class_us[NP_PROF_IDLE], 30, 0, 0);
    CHECK_CLOSE(r.overlap_us, 20, 0, 0);
    const np_prof_op *m = find(&r, "MatMul");
    CHECK(m && m->count == 2 && m->self_us == 50 && !strcmp(m->cat, "kernel"));
    CHECK(m && m->step_us == 25); /* 30 and 20 */
    CHECK(!find(&r, "Notify_Wait") && !find(&r, "Computing"));
    int hccl = 0;
    for (size_t i = 0; i < r.n_ops; i++)
        hccl += !strcmp(r.ops[i].name, "hcom_allReduce__1_0_1") && !strcmp(r.ops[i].cat, "hccl");
    CHECK(hccl == 1);
    np_prof_rank_free(&r);
}

/* kernel_details.csv as msprof writes it (a byte order mark, tabs after
 * the times, quoted shapes with commas). Steps 1 and 2 from Step Id: each
 * MatMul 10, MatMul 10 (B: 30), Add 5 on stream 2; step 1 starts at
 * 1000.5. By name MatMul is 20 vs 40 a step; in call order "MatMul #1" at
 * 19.5 us into its step is 10 vs 30 (B/A 3). */
static const char *kernel_csv(const char *file, int d2)
{
    static char buf[2048];
    int n = snprintf(buf, sizeof buf,
                     "\xef\xbb\xbfStep Id,Model ID,Task ID,Stream ID,Name,Type,OP State,Accelerator Core,"
                     "Start Time(us),Duration(us),Wait Time(us),Block Dim,Input Shapes\n");
    for (int s = 1; s <= 2; s++) {
        double o = 900.0 + 100.0 * s;
        n += snprintf(buf + n, sizeof buf - n,
                      "%d,4294967295,1,2,MatMul,MatMulV2,dynamic,AI_CORE,%.1f\t,10\t,0,20,\"8,16;16,32\"\n"
                      "%d,4294967295,2,2,MatMul,MatMulV2,dynamic,AI_CORE,%.1f\t,%d\t,0,20,\"8,32;32,8\"\n"
                      "%d,4294967295,3,2,Add,Add,dynamic,AI_VECTOR_CORE,%.1f\t,5\t,0,8,\"8,8;8,8\"\n",
                      s, o + 0.5, s, o + 20, d2, s, o + 60);
    }
    return put(file, buf);
}

static void test_kernel_csv(void)
{
    np_prof_rank a, b;
    np_error err = {0};
    CHECK(np_prof_analyze(&a, kernel_csv("ka.csv", 10), &err) == NP_OK);
    CHECK(np_prof_analyze(&b, kernel_csv("kb.csv", 30), &err) == NP_OK);
    CHECK(a.device == 1 && a.steps == 2 && a.events == 8 && a.calls_ok == 1);
    CHECK_CLOSE(a.class_us[NP_PROF_COMPUTE], 2 * 25, 0, 0);
    CHECK_CLOSE(a.step_med_us, 64.5, 0, 1e-12); /* 1000.5 .. 1065 */
    np_prof_compare c;
    CHECK(np_prof_compare_ranks(&c, &a, &b, &err) == NP_OK);
    CHECK(c.n_pairs == 2 && !strcmp(c.pairs[0].a->name, "MatMul"));
    CHECK_CLOSE(c.pairs[0].a_step_us, 20, 0, 0);
    CHECK_CLOSE(c.pairs[0].b_step_us, 40, 0, 0);
    CHECK(c.n_calls == 3 && !strcmp(c.calls[0].a->name, "MatMul #1"));
    CHECK_CLOSE(c.calls[0].ratio, 3, 0, 0);
    CHECK_CLOSE(c.calls[0].a->at_us, 19.5, 0, 1e-12);
    np_prof_compare_free(&c);
    np_prof_rank_free(&a);
    np_prof_rank_free(&b);
    memset(&err, 0, sizeof err);
    CHECK(np_prof_analyze(&a, put("kx.csv", "Name,Start Time(us),Duration(us)\nMatMul,12x,3\n"), &err) ==
          NP_ERR_FORMAT);
    CHECK_CONTAINS(err.file, "kx.csv");
    CHECK(err.key[0] && strstr(err.key, "Start Time") && strstr(err.text, "line 2"));
}

static const np_prof_op *find_cat(const np_prof_op *ops, size_t n, const char *cat, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(ops[i].name, name) && !strcmp(ops[i].cat, cat))
            return &ops[i];
    return NULL;
}

/* Ascend's operator_details.csv (torch_npu's columns; no start times): one
 * row per op call in op-tree order, host self and total, device self (its
 * own kernels). Two linear layers (linear > t, addmm) and a relu:
 *   host self 4 2 14 | 5 2 18 | 3 = 48; linear total 20 + 25 = 45, self 9;
 *   addmm self = total 14 + 18 = 32; device self: addmm 30 and d2, relu 6.5
 *   (one N/A: no device time). A (d2 50): device busy 30 + 50 + 6.5 = 86.5,
 *   all compute, no idle (the calls are laid back to back); B (d2 150): the
 *   addmm kernels 180 against 80, the first pair +100 and the second addmm
 *   call (#1) B/A 3. Without device times the host timeline: busy 48. */
static const char *op_csv(const char *file, const char *d1, const char *d2, const char *relu_dev)
{
    static char text[1400];
    snprintf(text, sizeof text,
             "\xef\xbb\xbfName,Input Shapes,Call Stack,Host Self Duration(us),Host Total Duration(us),"
             "Device Self Duration(us),Device Total Duration(us),Device Self Duration With AICore(us),"
             "Device Total Duration With AICore(us)\n"
             "aten::linear,\"\"\"8,16;32,16;32\"\"\",\"model.py(10): forward\nmodule.py(5): _call\",4,20,0,30,0,30\n"
             "aten::t,\"\"\"32,16\"\"\",,2,2,0,0,0,0\n"
             "aten::addmm,\"\"\"32;8,16;16,32\"\"\",,14,14,%s,30,30,30\n"
             "aten::linear,,,5,25,0,%s,0,0\n"
             "aten::t,,,2,2,N/A,0,0,0\n"
             "aten::addmm,,,18,18,%s,%s,0,0\n"
             "aten::relu,,,3,3,%s,%s,0,0\n",
             d1, d2, d2, d2, relu_dev, relu_dev);
    return put(file, text);
}

/* src's text as torch_npu writes operator_details.csv (Python's csv.writer
 * in Ascend/pytorch's torch_npu/profiler/analysis/prof_view/
 * _operator_view_parser.py, OPERATOR_HEADERS: the header op_csv uses): no
 * byte order mark, "\r\n" after every row and inside the quoted call stack. */
static const char *as_python_csv(const char *file, const char *src)
{
    static char text[2048];
    FILE *f = fopen(src, "rb");
    size_t n = f ? fread(text, 1, sizeof text / 2 - 1, f) : 0;
    if (f)
        fclose(f);
    text[n] = 0;
    char out[2048], *o = out;
    for (const char *t = strncmp(text, "\xef\xbb\xbf", 3) ? text : text + 3; *t; t++) {
        if (*t == '\n')
            *o++ = '\r';
        *o++ = *t;
    }
    *o = 0;
    return put(file, out);
}

static void test_operator_csv(void)
{
    np_prof_rank a, b, h;
    np_error err = {0};
    CHECK(np_prof_analyze(&a, op_csv("oa.csv", "30", "50", "6.5"), &err) == NP_OK);
    CHECK(np_prof_analyze(&b, op_csv("ob.csv", "30", "150", "6.5"), &err) == NP_OK);
    CHECK(a.device == 1 && a.steps == 0 && a.events == 7 + 3 && a.self_ok && a.calls_ok);
    CHECK_CLOSE(a.class_us[NP_PROF_COMPUTE], 86.5, 0, 0);
    CHECK_CLOSE(a.span_us, 86.5, 0, 0);
    CHECK_CLOSE(a.class_us[NP_PROF_IDLE], 0, 0, 0);
    const np_prof_op *o = find_cat(a.ops, a.n_ops, "cpu_op", "aten::linear");
    CHECK(o && o->count == 2);
    CHECK_CLOSE(o ? o->total_us : 0, 45, 0, 0);
    CHECK_CLOSE(o ? o->self_us : 0, 9, 0, 0);
    o = find_cat(a.ops, a.n_ops, "cpu_op", "aten::addmm");
    CHECK_CLOSE(o ? o->self_us : 0, 32, 0, 0);
    o = find_cat(a.ops, a.n_ops, "kernel", "aten::addmm");
    CHECK(o && o->count == 2);
    CHECK_CLOSE(o ? o->total_us : 0, 80, 0, 0);
    CHECK(!find_cat(a.ops, a.n_ops, "kernel", "aten::t"));
    /* written as torch_npu's Python writer does: the same answers */
    np_prof_rank p;
    CHECK(np_prof_analyze(&p, as_python_csv("op.csv", a.path), &err) == NP_OK);
    CHECK(p.device == 1 && p.events == a.events && p.n_ops == a.n_ops && p.n_calls == a.n_calls);
    CHECK_CLOSE(p.class_us[NP_PROF_COMPUTE], 86.5, 0, 0);
    for (size_t i = 0; i < a.n_ops && p.n_ops == a.n_ops; i++)
        CHECK(!strcmp(p.ops[i].name, a.ops[i].name) && p.ops[i].total_us == a.ops[i].total_us &&
              p.ops[i].self_us == a.ops[i].self_us);
    np_prof_rank_free(&p);
    np_prof_compare c;
    CHECK(np_prof_compare_ranks(&c, &a, &b, &err) == NP_OK);
    CHECK(c.n_pairs >= 1 && !strcmp(c.pairs[0].a->name, "aten::addmm") &&
          !strcmp(c.pairs[0].a->cat, "kernel"));
    CHECK_CLOSE(c.pairs[0].delta_us, 100, 0, 0);
    CHECK(c.n_calls >= 1 && !strcmp(c.calls[0].a->name, "aten::addmm #1"));
    CHECK_CLOSE(c.n_calls ? c.calls[0].ratio : 0, 3, 0, 0);
    CHECK_CLOSE(c.n_calls > 1 ? c.calls[1].delta_us : 1, 0, 0, 0);
    np_prof_compare_free(&c);
    np_prof_rank_free(&a);
    np_prof_rank_free(&b);
    /* no device time at all: the host timeline, the self times back to back */
    CHECK(np_prof_analyze(&h, op_csv("oh.csv", "0", "0", "0"), &err) == NP_OK);
    CHECK(h.device == 0 && h.events == 7);
    CHECK_CLOSE(h.class_us[NP_PROF_COMPUTE], 48, 0, 0);
    CHECK_CLOSE(h.span_us, 48, 0, 0);
    np_prof_rank_free(&h);
    /* a cell that is not a number names its column and line; self > total */
    memset(&err, 0, sizeof err);
    CHECK(np_prof_analyze(&h, op_csv("ox.csv", "30", "5x", "0"), &err) == NP_ERR_FORMAT);
    CHECK(strstr(err.file, "ox.csv") && !strcmp(err.key, "Device Self Duration(us)") &&
          strstr(err.text, "line 7") && strstr(err.text, "5x"));
    memset(&err, 0, sizeof err);
    CHECK(np_prof_analyze(&h, put("oy.csv", "Name,Host Self Duration(us),Host Total Duration(us)\n"
                                            "aten::mm,5,4\n"),
                          &err) == NP_ERR_FORMAT);
    CHECK(!strcmp(err.key, "Host Self Duration(us)") && strstr(err.text, "line 2"));
    memset(&err, 0, sizeof err);
    CHECK(np_prof_analyze(&h, put("oz.csv", "Name,Host Self Duration(us)\naten::mm,5\n"), &err) ==
          NP_ERR_FORMAT);
    CHECK(!strcmp(err.key, "Host Total Duration(us)"));
}

/* N cpu_op events [10i, 10i + 5] on one thread: compute 5N, N - 1
 * bubbles of 5, span 10(N - 1) + 5. Enough of them that the timeline's
 * past is finalized while reading; the same events with the first moved
 * to the end (it starts before the finalized past: read again without
 * finalizing) and in reverse order (never finalized) give the same. */
static void test_long(void)
{
    enum { N = 50000 };
    const char *names[] = {"long_sorted.json", "long_late.json", "long_reverse.json"};
    for (int form = 0; form < 3; form++) {
        char path[300];
        snprintf(path, sizeof path, "%s/%s", dir, names[form]);
        FILE *f = fopen(path, "w");
        fputs("{\"traceEvents\": [", f);
        for (int k = 0; k < N; k++) {
            int i = form == 0 ? k : form == 1 ? (k + 1) % N : N - 1 - k;
            fprintf(f, "%s{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"op%d\",\"pid\":1,\"tid\":1,"
                       "\"ts\":%d,\"dur\":5}",
                    k ? ",\n" : "", i % 3, 10 * i);
        }
        fputs("]}\n", f);
        fclose(f);
        np_prof_rank r;
        np_error err = {0};
        CHECK(np_prof_analyze(&r, path, &err) == NP_OK);
        CHECK_CLOSE(r.class_us[NP_PROF_COMPUTE], 5.0 * N, 0, 0);
        CHECK_CLOSE(r.span_us, 10.0 * (N - 1) + 5, 0, 0);
        CHECK_CLOSE(r.class_us[NP_PROF_IDLE], 5.0 * (N - 1), 0, 0);
        CHECK(r.n_bubbles == N - 1);
        CHECK_CLOSE(r.bubble_us, 5.0 * (N - 1), 0, 0);
        CHECK(r.n_ops == 3 && r.ops[0].count + r.ops[1].count + r.ops[2].count == N);
        CHECK(r.self_ok == (form == 0));
        CHECK(r.streamed == (form == 0));
        np_prof_rank_free(&r);
        unlink(path);
    }
}

static void test_bad(void)
{
    np_prof_rank r;
    np_error err = {0};
    CHECK(np_prof_analyze(&r, put("t.json", "{\"traceEvents\": [{\"ph\": \"X\", \"ts\": 1,"), &err) ==
          NP_ERR_JSON);
    CHECK_CONTAINS(err.file, "t.json");
    memset(&err, 0, sizeof err);
    CHECK(np_prof_analyze(&r, put("n.json", "{\"schemaVersion\": 1}"), &err) == NP_ERR_FORMAT);
    CHECK_CONTAINS(err.text, "traceEvents");
    memset(&err, 0, sizeof err);
    CHECK(np_prof_analyze(&r, put("s.json", "\"a string\""), &err) == NP_ERR_FORMAT);
    memset(&err, 0, sizeof err);
    CHECK(np_prof_analyze(&r, put("e.json", "{\"traceEvents\": [1, 2]}"), &err) == NP_ERR_FORMAT);
    memset(&err, 0, sizeof err);
    char missing[300];
    snprintf(missing, sizeof missing, "%s/missing.json", dir);
    CHECK(np_prof_analyze(&r, missing, &err) == NP_ERR_NOTFOUND);
    /* odd values are ignored, not fatal: string pid, non-numeric dur, ph B */
    memset(&err, 0, sizeof err);
    CHECK(np_prof_analyze(&r, put("o.json", "[{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"x\",\"pid\":\"p\","
                                            "\"tid\":\"t\",\"ts\":\"5\",\"dur\":\"2.5\"},"
                                            "{\"ph\":\"X\",\"name\":\"y\",\"ts\":1,\"dur\":null},"
                                            "{\"ph\":\"B\",\"name\":\"z\",\"ts\":1}]"),
                          &err) == NP_OK);
    CHECK(r.n_ops == 1 && r.ops[0].total_us == 2.5 && r.span_us == 2.5);
    np_prof_rank_free(&r);
}

int main(void)
{
    if (!mkdtemp(dir))
        return 1;
    test_device();
    test_kineto_order();
    test_cpu();
    test_compare();
    test_calls();
    test_ascend();
    test_kernel_csv();
    test_calls_shift();
    test_calls_steps();
    test_end_order();
    test_operator_csv();
    test_bad();
    test_long();
    const char *names[] = {"dev.json", "cpu.json", "a.json", "b.json", "t.json", "n.json", "s.json", "e.json", "o.json",
                           "ca.json", "cb.json", "asc.json", "ka.csv", "kb.csv", "kx.csv", "oa.csv", "ob.csv", "oh.csv",
                           "ox.csv", "oy.csv", "oz.csv", "sa.json", "sb.json", "eo.json", "pa.json", "pb.json", "pc.json", "op.csv",
                           "kin.json", "str.json"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char p[300];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
    return check_report();
}
