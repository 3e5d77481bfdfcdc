/* test_probe_view.c - the embedding API a foreign framework uses
 * (nprobe/probe.h): tensor views (bf16/fp16 in their 2-byte storage,
 * strides, byte offset) read in place or gathered, leaves with caller
 * statistics, calls with parent and callsite, np_probe_selects, the
 * metadata set after open, and several threads feeding one probe. Values
 * are exact in bf16/fp16, so the expected payloads and statistics are
 * worked out by hand. */
#include <hdf5.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "nprobe/format.h"
#include "nprobe/probe.h"

static np_entry_rec *read_entries(const char *path, size_t *n)
{
    *n = 0;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0)
        return NULL;
    hid_t d = H5Dopen2(f, "entries", H5P_DEFAULT);
    hid_t s = H5Dget_space(d);
    hssize_t rows = H5Sget_simple_extent_npoints(s);
    np_entry_rec *r = calloc((size_t)rows + 1, sizeof *r);
    hid_t t = np_fmt_entry_h5type();
    if (rows > 0)
        H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, r);
    H5Tclose(t);
    H5Sclose(s);
    H5Dclose(d);
    H5Fclose(f);
    *n = (size_t)rows;
    return r;
}

static const np_entry_rec *find(const np_entry_rec *r, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(r[i].name, name) == 0)
            return &r[i];
    return NULL;
}

static int read_floats(const char *path, const char *name, float *out, size_t n)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    char ds[400];
    snprintf(ds, sizeof ds, "data/%s", name);
    hid_t d = H5Dopen2(f, ds, H5P_DEFAULT);
    int ok = d >= 0 && H5Sget_simple_extent_npoints(H5Dget_space(d)) == (hssize_t)n &&
             H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) >= 0;
    if (d >= 0)
        H5Dclose(d);
    H5Fclose(f);
    return ok;
}

/* bf16 bits of values exact in bf16: sign | exponent | 7 mantissa bits */
static uint16_t bf(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)(u >> 16);
}

/* A probe dumping into DIR/SUB with the other settings `rest` (JSON object
 * members), checked to open; NULL if it did not. */
static np_probe *open_probe(const char *dir, const char *sub, const char *rest,
                            const np_probe_meta *meta)
{
    char cfg[512];
    snprintf(cfg, sizeof cfg, "{\"dump_path\": \"%s/%s\", %s}", dir, sub, rest);
    np_probe *p = NULL;
    np_error err;
    np_error_clear(&err);
    CHECK_EQ_INT(np_probe_open_json(&p, cfg, meta, &err), NP_OK);
    return p;
}

static void test_views(const char *dir)
{
    char path[600];
    np_probe_meta meta = {"pytorch", "cpu", "fp32", 0, 1};
    np_probe *p = open_probe(dir, "d1", "\"task\": \"tensor\", \"level\": \"mix\"", &meta);
    if (!p)
        return;
    np_error err;
    np_error_clear(&err);
    CHECK_EQ_INT(np_probe_selects(p, 0), NP_SELECT_API | NP_SELECT_MODULE | NP_SELECT_CALLSITE);
    CHECK_EQ_INT(np_probe_selects(p, -1), 0);
    np_probe_meta later = {"pytorch", "cuda", "bf16", 3, 4};
    CHECK_EQ_INT(np_probe_set_meta(p, &later, &err), NP_OK);
    CHECK_EQ_INT(np_probe_step_begin(p, 0, &err), NP_OK);
    CHECK_EQ_INT(np_probe_call_begin(p, "Functional.linear.0.forward",
                                     "Module.fc.Linear.forward.0", "train.py:7 forward", &err),
                 NP_OK);
    /* a 2x3 bf16 matrix stored transposed (3x2 row-major storage), with
     * one element of padding in front: byte_offset 2 */
    const float m[2][3] = {{1.5f, -2.25f, 4.0f}, {0.5f, 3.0f, -8.0f}};
    uint16_t store[1 + 6];
    store[0] = 0xffff;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            store[1 + j * 2 + i] = bf(m[i][j]);
    int64_t shape[2] = {2, 3}, strides[2] = {1, 2};
    np_tensor_view v = {sizeof v, NP_BFLOAT16, 2, shape, strides, store, 2, 1, -1};
    CHECK_EQ_INT(np_probe_dump_view(p, "Functional.linear.0.forward", NP_ROLE_INPUT, "0", &v,
                                    &err), NP_OK);
    /* fp16 contiguous, 4 elements: 1, -0.5, 65504 (fp16 max), 2^-24 (smallest subnormal) */
    uint16_t h[4] = {0x3c00, 0xb800, 0x7bff, 0x0001};
    int64_t hs[1] = {4};
    np_tensor_view vh = {sizeof vh, NP_FLOAT16, 1, hs, NULL, h, 0, 0, -1};
    CHECK_EQ_INT(np_probe_dump_view(p, "Functional.linear.0.forward", NP_ROLE_OUTPUT, "0", &vh,
                                    &err), NP_OK);
    /* float32 read in place, offset by one element */
    float f32[5] = {9.0f, 1.0f, 2.0f, 3.0f, 4.0f};
    int64_t fs[2] = {2, 2};
    np_tensor_view vf = {sizeof vf, NP_FLOAT32, 2, fs, NULL, f32, 4, 0, -1};
    CHECK_EQ_INT(np_probe_dump_view(p, "Functional.linear.0.forward", NP_ROLE_INPUT, "1", &vf,
                                    &err), NP_OK);
    /* device statistics */
    int64_t ds[3] = {2, 3, 5};
    np_leaf_stats ls = {sizeof ls, NP_BFLOAT16, 3, ds, {7.5, -1.25, 0.5, 12.0, 2, 1, 0}, 1};
    CHECK_EQ_INT(np_probe_dump_stats(p, "Functional.gelu.0.forward", NP_ROLE_OUTPUT, "0", &ls,
                                     &err), NP_OK);
    /* a bad view is refused, naming the tensor */
    np_tensor_view bad = v;
    bad.size = 8;
    np_error e2;
    np_error_clear(&e2);
    CHECK_EQ_INT(np_probe_dump_view(p, "Functional.gelu.0.forward", NP_ROLE_INPUT, "0", &bad,
                                    &e2), NP_ERR_ARG);
    CHECK_CONTAINS(e2.text, "sizeof np_tensor_view");
    CHECK_EQ_INT(np_probe_step_end(p, &err), NP_OK);
    np_probe_free(p);

    snprintf(path, sizeof path, "%s/d1/step0/rank3/dump.h5", dir);
    size_t n = 0;
    np_entry_rec *r = read_entries(path, &n);
    CHECK(r != NULL);
    if (!r)
        return;
    CHECK_EQ_INT(n, 4);
    const np_entry_rec *a = find(r, n, "Functional.linear.0.forward.input.0");
    CHECK(a != NULL);
    if (a) {
        CHECK_STREQ(a->dtype, "bfloat16");
        CHECK_EQ_INT(a->ndim, 2);
        CHECK_EQ_INT(a->shape[1], 3);
        CHECK_CLOSE(a->max, 4.0, 0, 0);
        CHECK_CLOSE(a->min, -8.0, 0, 0);
        CHECK_CLOSE(a->mean, (1.5 - 2.25 + 4.0 + 0.5 + 3.0 - 8.0) / 6.0, 1e-15, 0);
        CHECK_EQ_INT(a->requires_grad, 1);
        float back[6];
        CHECK(read_floats(path, a->name, back, 6));
        for (int i = 0; i < 6; i++)
            CHECK_CLOSE(back[i], m[i / 3][i % 3], 0, 0);
    }
    const np_entry_rec *o = find(r, n, "Functional.linear.0.forward.output.0");
    CHECK(o != NULL);
    if (o) {
        CHECK_CLOSE(o->max, 65504.0, 0, 0);
        CHECK_CLOSE(o->min, -0.5, 0, 0);
        float back[4];
        CHECK(read_floats(path, o->name, back, 4));
        CHECK_CLOSE(back[3], 0x1p-24, 0, 0);
    }
    const np_entry_rec *i1 = find(r, n, "Functional.linear.0.forward.input.1");
    CHECK(i1 != NULL);
    if (i1)
        CHECK_CLOSE(i1->mean, 2.5, 0, 0);
    const np_entry_rec *g = find(r, n, "Functional.gelu.0.forward.output.0");
    CHECK(g != NULL);
    if (g) {
        CHECK_CLOSE(g->norm, 12.0, 0, 0);
        CHECK_EQ_INT(g->numel, 30);
        CHECK_EQ_INT(g->nan_count, 2);
        CHECK_EQ_INT(g->has_data, 0);
    }
    free(r);
    /* the call row carries parent and callsite; the root the later meta */
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "calls", H5P_DEFAULT);
    np_call_rec calls[4];
    memset(calls, 0, sizeof calls);
    hid_t ct = np_fmt_call_h5type();
    CHECK_EQ_INT(H5Sget_simple_extent_npoints(H5Dget_space(d)), 2);
    H5Dread(d, ct, H5S_ALL, H5S_ALL, H5P_DEFAULT, calls);
    CHECK_STREQ(calls[0].parent, "Module.fc.Linear.forward.0");
    CHECK_STREQ(calls[0].callsite, "train.py:7 forward");
    char prec[32] = "";
    np_h5_attr_get_str(f, "precision", prec, sizeof prec);
    CHECK_STREQ(prec, "bf16");
    H5Tclose(ct);
    H5Dclose(d);
    H5Fclose(f);
}

typedef struct worker {
    np_probe *p;
    int id;
    int fails;
} worker;

static void *feed(void *arg)
{
    worker *w = arg;
    float x[64];
    for (int i = 0; i < 64; i++)
        x[i] = (float)(i + w->id);
    int64_t s[1] = {64};
    np_tensor_view v = {sizeof v, NP_FLOAT32, 1, s, NULL, x, 0, 0, -1};
    for (int k = 0; k < 200; k++) {
        char call[64];
        snprintf(call, sizeof call, "Functional.t%d.%d.backward", w->id, k);
        w->fails += np_probe_dump_view(w->p, call, NP_ROLE_OUTPUT, "0", &v, NULL) != NP_OK;
    }
    return NULL;
}

static void test_threads(const char *dir)
{
    char path[600];
    np_probe *p = open_probe(dir, "d2", "\"task\": \"statistics\", \"level\": \"L1\"", NULL);
    if (!p)
        return;
    CHECK_EQ_INT(np_probe_selects(p, 0), NP_SELECT_API | NP_SELECT_CALLSITE);
    np_probe_step_begin(p, 0, NULL);
    pthread_t th[4];
    worker w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (worker){p, i, 0};
        pthread_create(&th[i], NULL, feed, &w[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ_INT(w[i].fails, 0);
    }
    np_probe_summary sum;
    CHECK_EQ_INT(np_probe_close(p, &sum, NULL), NP_OK);
    CHECK_EQ_INT(sum.tensors, 800);
    CHECK_EQ_INT(sum.calls, 800);
    np_probe_free(p);
    snprintf(path, sizeof path, "%s/d2/step0/rank0/dump.h5", dir);
    size_t n = 0;
    np_entry_rec *r = read_entries(path, &n);
    CHECK_EQ_INT(n, 800);
    const np_entry_rec *e = r ? find(r, n, "Functional.t3.17.backward.output.0") : NULL;
    CHECK(e != NULL);
    if (e)
        CHECK_CLOSE(e->mean, 3.0 + 31.5, 0, 0);
    free(r);
}

/* A view dumped again with the same storage, layout and version reuses the
 * statistics computed the first time (np_tensor_view.version); a new
 * version or a different layout computes them again. */
static void test_reuse(const char *dir)
{
    char path[600];
    np_probe *p = open_probe(dir, "d3", "\"task\": \"md5\", \"level\": \"L1\"", NULL);
    if (!p)
        return;
    np_probe_step_begin(p, 0, NULL);
    float x[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    int64_t s[2] = {2, 2}, tr[2] = {1, 2};
    np_tensor_view v = {sizeof v, NP_FLOAT32, 2, s, NULL, x, 0, 0, 0};
    CHECK_EQ_INT(np_probe_dump_view(p, "Functional.a.0.forward", NP_ROLE_OUTPUT, "0", &v, NULL), NP_OK);
    x[0] = 10.0f; /* in place, version not bumped: the memo is (wrongly, on purpose) reused */
    CHECK_EQ_INT(np_probe_dump_view(p, "Functional.b.0.forward", NP_ROLE_INPUT, "0", &v, NULL), NP_OK);
    v.version = 1; /* bumped: computed again */
    CHECK_EQ_INT(np_probe_dump_view(p, "Functional.c.0.forward", NP_ROLE_INPUT, "0", &v, NULL), NP_OK);
    np_tensor_view t = v;
    t.strides = tr; /* the transpose of the same storage: another layout */
    CHECK_EQ_INT(np_probe_dump_view(p, "Functional.d.0.forward", NP_ROLE_INPUT, "0", &t, NULL), NP_OK);
    np_probe_close(p, NULL, NULL);
    np_probe_free(p);
    snprintf(path, sizeof path, "%s/d3/step0/rank0/dump.h5", dir);
    size_t n = 0;
    np_entry_rec *r = read_entries(path, &n);
    CHECK_EQ_INT(n, 4);
    if (!r || n != 4) {
        free(r);
        return;
    }
    CHECK_CLOSE(r[0].max, 4.0, 0, 0);
    CHECK_CLOSE(r[1].max, 4.0, 0, 0);
    CHECK_EQ_INT(r[1].crc32, r[0].crc32);
    CHECK_CLOSE(r[2].max, 10.0, 0, 0);
    CHECK(r[2].crc32 != r[0].crc32);
    CHECK_CLOSE(r[3].mean, 19.0 / 4.0, 0, 0);
    /* stored transposed: 10, 3, 2, 4 */
    float tx[4] = {10.0f, 3.0f, 2.0f, 4.0f};
    CHECK_EQ_INT(r[3].crc32, np_crc32(0, tx, sizeof tx));
    CHECK_STREQ(r[1].name, "Functional.b.0.forward.input.0");
    free(r);
}

/* overflow_check through the embedding API keeps a call whole, as the hook
 * path does: every leaf of a call one of whose tensors holds NaN/Inf (the
 * input as it was before an in-place write, converted bf16 included), none
 * of a clean call; overflow_nums stops after the call that reaches it. */
static void test_overflow_whole_call(const char *dir)
{
    char path[600];
    np_probe *p = open_probe(dir, "d4", "\"task\": \"overflow_check\", \"level\": \"L1\","
                             " \"overflow_check\": {\"overflow_nums\": 2}", NULL);
    if (!p)
        return;
    np_probe_step_begin(p, 0, NULL);
    float x[4] = {1.0f, 2.0f, 3.0f, 4.0f}, nan4[4] = {1.0f, NAN, 0.0f, 0.0f};
    uint16_t h[2] = {bf(0.5f), bf(1.5f)}, g[2] = {bf(-2.0f), bf(8.0f)};
    int64_t s4[1] = {4}, s2[1] = {2};
    np_tensor_view v = {sizeof v, NP_FLOAT32, 1, s4, NULL, x, 0, 0, -1};
    np_tensor_view hb = {sizeof hb, NP_BFLOAT16, 1, s2, NULL, h, 0, 0, -1};
    np_tensor_view gb = {sizeof gb, NP_BFLOAT16, 1, s2, NULL, g, 0, 0, -1};
    np_tensor_view vn = {sizeof vn, NP_FLOAT32, 1, s4, NULL, nan4, 0, 0, -1};
    /* a: an in-place op whose output overflows */
    np_probe_call_begin(p, "Functional.a.0.forward", NULL, NULL, NULL);
    np_probe_dump_view(p, "Functional.a.0.forward", NP_ROLE_INPUT, "0", &v, NULL);
    np_probe_dump_view(p, "Functional.a.0.forward", NP_ROLE_INPUT, "1", &hb, NULL);
    np_probe_dump_scalar(p, "Functional.a.0.forward", "eps", 0.25, NULL);
    np_probe_dump_view(p, "Functional.a.0.forward", NP_ROLE_INPUT, "2", &gb, NULL);
    x[0] = 100.0f;
    x[1] = INFINITY;
    np_probe_dump_view(p, "Functional.a.0.forward", NP_ROLE_OUTPUT, "0", &v, NULL);
    /* b: clean, not written */
    x[1] = 5.0f;
    np_probe_call_begin(p, "Functional.b.0.forward", NULL, NULL, NULL);
    np_probe_dump_view(p, "Functional.b.0.forward", NP_ROLE_INPUT, "0", &v, NULL);
    np_probe_dump_view(p, "Functional.b.0.forward", NP_ROLE_OUTPUT, "0", &v, NULL);
    /* c: its input overflows; the second overflow: the dump stops after it */
    np_probe_call_begin(p, "Functional.c.0.forward", NULL, NULL, NULL);
    np_probe_dump_view(p, "Functional.c.0.forward", NP_ROLE_INPUT, "0", &vn, NULL);
    np_probe_dump_view(p, "Functional.c.0.forward", NP_ROLE_OUTPUT, "0", &v, NULL);
    np_probe_call_begin(p, "Functional.d.0.forward", NULL, NULL, NULL);
    np_probe_dump_view(p, "Functional.d.0.forward", NP_ROLE_INPUT, "0", &vn, NULL);
    np_probe_summary sum;
    np_probe_close(p, &sum, NULL);
    np_probe_free(p);
    CHECK_EQ_INT(sum.overflows, 2);
    CHECK_STREQ(sum.overflow_call, "Functional.a.0.forward");
    snprintf(path, sizeof path, "%s/d4/step0/rank0/dump.h5", dir);
    size_t n = 0;
    np_entry_rec *r = read_entries(path, &n);
    CHECK_EQ_INT(n, 7);
    const char *want[7] = {"Functional.a.0.forward.input.0", "Functional.a.0.forward.input.1",
                           "Functional.a.0.forward.kwargs.eps", "Functional.a.0.forward.input.2",
                           "Functional.a.0.forward.output.0", "Functional.c.0.forward.input.0",
                           "Functional.c.0.forward.output.0"};
    for (size_t i = 0; r && i < 7 && i < n; i++)
        CHECK_STREQ(r[i].name, want[i]);
    free(r);
    float got[4];
    CHECK(read_floats(path, "Functional.a.0.forward.input.0", got, 4));
    CHECK(got[0] == 1.0f && got[1] == 2.0f && got[2] == 3.0f && got[3] == 4.0f);
    CHECK(read_floats(path, "Functional.a.0.forward.input.1", got, 2));
    CHECK(got[0] == 0.5f && got[1] == 1.5f);
    CHECK(read_floats(path, "Functional.a.0.forward.input.2", got, 2));
    CHECK(got[0] == -2.0f && got[1] == 8.0f);
    CHECK(read_floats(path, "Functional.a.0.forward.output.0", got, 4));
    CHECK(got[0] == 100.0f && got[1] > 1e30f);
}

/* np_probe_dump_call: a whole call in one crossing gives the rows the single
 * calls give (order, names, keys by index and by name, scalars, statistics
 * of a transposed view and of bf16 storage), and refuses a bad leaf on its
 * own (counted in *refused, the first error returned) while the others go
 * in. */
static void test_dump_call(const char *dir)
{
    char path[600];
    np_probe *p = open_probe(dir, "d5", "\"task\": \"statistics\", \"level\": \"L1\","
                             " \"stack\": true", NULL);
    if (!p)
        return;
    CHECK_EQ_INT(np_probe_step_begin(p, 0, NULL), NP_OK);
    float x[4] = {1.0f, 2.0f, 3.0f, -4.0f};
    uint16_t h[3] = {bf(0.5f), bf(-1.5f), bf(4.0f)};
    np_probe_leaf l[5];
    memset(l, 0, sizeof l);
    /* input 0: x seen transposed (2x2, strides 1, 2): 1, 3, 2, -4 */
    l[0].role = NP_ROLE_INPUT;
    l[0].index = 0;
    l[0].name_off = -1;
    l[0].dtype = NP_FLOAT32;
    l[0].ndim = 2;
    l[0].data = x;
    l[0].version = -1;
    l[0].shape[0] = l[0].shape[1] = 2;
    l[0].strides[0] = 1;
    l[0].strides[1] = 2;
    /* kwargs eps */
    l[1].role = NP_ROLE_KWARGS;
    l[1].name_off = 0;
    l[1].value = 0.25;
    /* parameters weight: bf16, 3 elements, requires_grad */
    l[2].role = NP_ROLE_PARAMETERS;
    l[2].name_off = 4;
    l[2].dtype = NP_BFLOAT16;
    l[2].ndim = 1;
    l[2].data = h;
    l[2].version = -1;
    l[2].requires_grad = 1;
    l[2].shape[0] = 3;
    l[2].strides[0] = 1;
    /* input 0 again: refused (the name is taken), the rest goes on */
    l[3] = l[0];
    /* output 3 */
    l[4] = l[0];
    l[4].role = NP_ROLE_OUTPUT;
    l[4].index = 3;
    const char names[] = "eps\0weight";
    int refused = -1;
    np_error err;
    np_error_clear(&err);
    CHECK_EQ_INT(np_probe_dump_call(p, "Functional.lin.0.forward", "Module.fc.Linear.forward.0",
                                    "train.py:9 forward", l, 5, names, &refused, &err),
                 NP_ERR_ARG);
    CHECK_EQ_INT(refused, 1);
    CHECK_CONTAINS(err.text, "already dumped");
    CHECK_EQ_INT(np_probe_dump_call(p, "Functional.relu.0.forward", NULL, NULL, l, 1, NULL,
                                    &refused, NULL), NP_OK);
    CHECK_EQ_INT(refused, 0);
    CHECK_EQ_INT(np_probe_step_end(p, NULL), NP_OK);
    np_probe_close(p, NULL, NULL);
    np_probe_free(p);
    snprintf(path, sizeof path, "%s/d5/step0/rank0/dump.h5", dir);
    size_t n = 0;
    np_entry_rec *r = read_entries(path, &n);
    CHECK_EQ_INT(n, 5);
    const char *want[5] = {"Functional.lin.0.forward.input.0", "Functional.lin.0.forward.kwargs.eps",
                           "Functional.lin.0.forward.parameters.weight",
                           "Functional.lin.0.forward.output.3", "Functional.relu.0.forward.input.0"};
    for (size_t i = 0; r && i < 5 && i < n; i++)
        CHECK_STREQ(r[i].name, want[i]);
    if (r && n == 5) {
        CHECK_CLOSE(r[0].mean, 0.5, 0, 0);
        CHECK_CLOSE(r[0].norm, sqrt(30.0), 1e-15, 0);
        CHECK_EQ_INT(r[0].shape[1], 2);
        CHECK_CLOSE(r[1].max, 0.25, 0, 0);
        CHECK_STREQ(r[2].dtype, "bfloat16");
        CHECK_CLOSE(r[2].max, 4.0, 0, 0);
        CHECK_CLOSE(r[2].min, -1.5, 0, 0);
        CHECK_EQ_INT(r[2].requires_grad, 1);
        CHECK_CLOSE(r[3].min, -4.0, 0, 0);
        CHECK_EQ_INT(r[4].seq, 1);
    }
    free(r);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "/calls", H5P_DEFAULT);
    np_call_rec calls[2];
    hid_t ct = (hid_t)np_fmt_call_h5type();
    CHECK(H5Dread(d, ct, H5S_ALL, H5S_ALL, H5P_DEFAULT, calls) >= 0);
    CHECK_STREQ(calls[0].parent, "Module.fc.Linear.forward.0");
    CHECK_STREQ(calls[0].callsite, "train.py:9 forward");
    CHECK_STREQ(calls[1].call, "Functional.relu.0.forward");
    H5Tclose(ct);
    H5Dclose(d);
    H5Fclose(f);
}

/* float64 statistics of view `v` of float32 storage, walked index by index
 * (the known answer of test_block_reuse). */
static void view_stats64(const np_tensor_view *v, double *mx, double *mn, double *mean,
                         double *norm)
{
    int64_t n = 1, idx[NP_MAX_DIMS] = {0};
    for (int d = 0; d < v->ndim; d++)
        n *= v->shape[d];
    double s = 0, q = 0;
    *mx = -INFINITY;
    *mn = INFINITY;
    for (int64_t i = 0; i < n; i++) {
        int64_t off = 0;
        for (int d = 0; d < v->ndim; d++)
            off += idx[d] * v->strides[d];
        double x = ((const float *)v->data)[v->byte_offset / 4 + off];
        *mx = x > *mx ? x : *mx;
        *mn = x < *mn ? x : *mn;
        s += x;
        q += x * x;
        for (int d = v->ndim - 1; d >= 0; d--) {
            if (++idx[d] < v->shape[d])
                break;
            idx[d] = 0;
        }
    }
    *mean = s / (double)n;
    *norm = sqrt(q);
}

/* The statistics task reads a view that is a permutation of one contiguous
 * block (transpose, permute, reshape of a contiguous tensor) as that block,
 * so views of one block at one version share one computation. Reuse is
 * made visible by writing the storage without bumping the version (as in
 * test_reuse): a reused row keeps the old values' statistics. Checked: the
 * rows equal a float64 walk over each view's own values (max/min/counts
 * exactly, mean/norm to 1e-12 relative: only the order of the float64 sums
 * differs) with the view's own shape; the rule fires for a permute and a
 * reshape of the block at the same version; it does not for a partial
 * view, overlapping views, another version, another start, another dtype. */
static void test_block_reuse(const char *dir)
{
    char path[600];
    np_probe *p = open_probe(dir, "d6", "\"task\": \"statistics\", \"level\": \"L1\"", NULL);
    if (!p)
        return;
    CHECK_EQ_INT(np_probe_step_begin(p, 0, NULL), NP_OK);
    float x[60];
    for (int i = 0; i < 60; i++)
        x[i] = (float)((i * 37) % 61 - 30) + 0.25f * (float)(i % 3);
    int64_t s3[3] = {3, 4, 5}, st3[3] = {20, 5, 1};
    int64_t sp[3] = {5, 3, 4}, stp[3] = {1, 20, 5};   /* permute(2, 0, 1) */
    int64_t s1[1] = {60}, st1[1] = {1};               /* reshape(60) */
    int64_t sh[3] = {3, 2, 5};                        /* [:, :2, :]: a gap */
    int64_t so[2] = {2, 60}, sto[2] = {0, 1};          /* expand: each twice */
    int64_t sr[2] = {2, 40}, str_[2] = {20, 1};        /* rows overlapping */
    int64_t s2[3] = {2, 4, 5};                        /* x[1:]: another start */
    struct {
        const char *call;
        np_tensor_view v;
        float poke_at;                                /* x[i] = poke_val before it */
        float poke_val;
        int reused;                                   /* 1: the block's earlier row */
    } c[] = {
        {"Functional.a.0.forward", {sizeof(np_tensor_view), NP_FLOAT32, 3, s3, st3, x, 0, 0, 0}, -1, 0, 0},
        {"Functional.b.0.forward", {sizeof(np_tensor_view), NP_FLOAT32, 3, sp, stp, x, 0, 0, 0}, 0, 1000, 1},
        {"Functional.c.0.forward", {sizeof(np_tensor_view), NP_FLOAT32, 1, s1, st1, x, 0, 0, 0}, -1, 0, 1},
        {"Functional.d.0.forward", {sizeof(np_tensor_view), NP_FLOAT32, 3, sp, stp, x, 0, 0, 1}, -1, 0, 0},
        {"Functional.e.0.forward", {sizeof(np_tensor_view), NP_FLOAT32, 3, sh, st3, x, 0, 0, 1}, 1, -2000, 0},
        {"Functional.f.0.forward", {sizeof(np_tensor_view), NP_FLOAT32, 2, so, sto, x, 0, 0, 1}, -1, 0, 0},
        {"Functional.g.0.forward", {sizeof(np_tensor_view), NP_FLOAT32, 2, sr, str_, x, 0, 0, 1}, -1, 0, 0},
        {"Functional.h.0.forward", {sizeof(np_tensor_view), NP_FLOAT32, 3, s2, st3, x, 80, 0, 1}, -1, 0, 0},
        {"Functional.i.0.forward", {sizeof(np_tensor_view), NP_FLOAT32, 3, sp, stp, x, 0, 0, 2}, -1, 0, 0},
    };
    int nc = (int)(sizeof c / sizeof c[0]);
    double want[16][4];
    for (int i = 0; i < nc; i++) {
        if (c[i].poke_at >= 0)
            x[(int)c[i].poke_at] = c[i].poke_val;
        int src = i;
        while (c[src].reused)
            src--;                                    /* the row it reuses */
        if (src == i)
            view_stats64(&c[i].v, &want[i][0], &want[i][1], &want[i][2], &want[i][3]);
        else
            memcpy(want[i], want[src], sizeof want[i]);
        CHECK_EQ_INT(np_probe_dump_view(p, c[i].call, NP_ROLE_INPUT, "0", &c[i].v, NULL), NP_OK);
    }
    /* another dtype over the same bytes (int32) at version 1: not the block's */
    int64_t si[1] = {60};
    np_tensor_view vi = {sizeof vi, NP_INT32, 1, si, NULL, x, 0, 0, 1};
    CHECK_EQ_INT(np_probe_dump_view(p, "Functional.j.0.forward", NP_ROLE_INPUT, "0", &vi, NULL),
                 NP_OK);
    double imax = -INFINITY;
    for (int i = 0; i < 60; i++) {
        int32_t b;
        memcpy(&b, &x[i], 4);
        imax = b > imax ? b : imax;
    }
    np_probe_close(p, NULL, NULL);
    np_probe_free(p);
    snprintf(path, sizeof path, "%s/d6/step0/rank0/dump.h5", dir);
    size_t n = 0;
    np_entry_rec *r = read_entries(path, &n);
    CHECK_EQ_INT(n, nc + 1);
    if (!r || n != (size_t)nc + 1) {
        free(r);
        return;
    }
    for (int i = 0; i < nc; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s.input.0", c[i].call);
        CHECK_STREQ(r[i].name, name);
        CHECK_EQ_INT(r[i].ndim, c[i].v.ndim);
        int64_t numel = 1;
        for (int d = 0; d < c[i].v.ndim; d++) {
            CHECK_EQ_INT(r[i].shape[d], c[i].v.shape[d]);
            numel *= c[i].v.shape[d];
        }
        CHECK_EQ_INT(r[i].numel, numel);
        CHECK_CLOSE(r[i].max, want[i][0], 0, 0);
        CHECK_CLOSE(r[i].min, want[i][1], 0, 0);
        CHECK_CLOSE(r[i].mean, want[i][2], 0, 1e-12);
        CHECK_CLOSE(r[i].norm, want[i][3], 0, 1e-12);
        CHECK_EQ_INT(r[i].nan_count + r[i].posinf_count + r[i].neginf_count, 0);
    }
    /* what the reuse shows: b, c kept the values before x[0] = 1000; e on */
    CHECK(r[1].max < 1000 && r[2].max < 1000 && r[3].max == 1000);
    CHECK(r[4].min == -2000 && r[5].min == -2000 && r[6].min == -2000 && r[8].min == -2000);
    CHECK(r[3].min > -2000);                          /* d ran before the poke */
    CHECK_CLOSE(r[nc].max, imax, 0, 0);
    CHECK_EQ_INT(r[nc].numel, 60);
    free(r);
}

int main(void)
{
    char dir[] = "/tmp/np_view_XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    test_views(dir);
    test_threads(dir);
    test_reuse(dir);
    test_overflow_whole_call(dir);
    test_dump_call(dir);
    test_block_reuse(dir);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return check_report();
}
