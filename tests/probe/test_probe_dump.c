/* tests/probe/test_probe_dump.c - the probe on synthetic hook-event
 * sequences: every filter key (level, step, rank, scope, list, data_mode)
 * checked by leaf name against the sequence written here, the files read
 * back with the HDF5 C API (root attributes, rows, statistics against a
 * float64 reference, crc32 against zlib, payload bit-equality), async ==
 * sync content, overflow_check, the embedding API, and the error paths
 * (unwritable dump_path, a file size limit without killing the process,
 * on_error=stop_training). */
#include <errno.h>
#include <hdf5.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"
#include "nprobe/dumpio.h"
#include "nprobe/probe.h"

/* The numel of leaf `leaf` in the entries of d, -1 if absent. */
static int64_t leaf_numel(np_dumpio *d, const char *leaf)
{
    np_entry_rec *e = NULL;
    size_t n = 0;
    int64_t v = -1;
    if (np_dumpio_read_entries(&e, &n, d, NULL) == NP_OK)
        for (size_t i = 0; i < n; i++)
            if (strcmp(e[i].name, leaf) == 0)
                v = e[i].numel;
    free(e);
    return v;
}

static char g_tmp[512];

/* ---- a synthetic training step ------------------------------------------ */

#define N_X 24   /* x is (4, 6) */
#define N_W 18   /* w is (3, 6) */
#define N_Y 12   /* y is (4, 3) */

typedef struct fake {
    float x[N_X], w[N_W], b[3], y[N_Y], r[N_Y], gy[N_Y], gr[N_Y], gx[N_X], gw[N_W], gb[3];
    np_tensor tx, tw, tb, ty, tr, tgy, tgr, tgx, tgw, tgb;
} fake;

static void mk(np_tensor *t, float *data, int ndim, int64_t d0, int64_t d1)
{
    memset(t, 0, sizeof *t);
    t->dtype = NP_FLOAT32;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->numel = ndim == 1 ? d0 : d0 * d1;
    t->data = data;
}

static void fake_fill(fake *f, int step, int nan_at_step)
{
    for (int i = 0; i < N_X; i++) f->x[i] = (float)sin(i + step) * 2.0f;
    for (int i = 0; i < N_W; i++) f->w[i] = (float)cos(i * 0.5 + step) * 0.5f;
    for (int i = 0; i < 3; i++) f->b[i] = 0.1f * (float)(i + step);
    for (int i = 0; i < N_Y; i++) {
        f->y[i] = (float)(i - 5) * 0.25f + (float)step;
        f->r[i] = f->y[i] > 0 ? f->y[i] : 0;
        f->gy[i] = 0.01f * (float)i;
        f->gr[i] = 0.02f * (float)i - 0.1f;
    }
    if (step == nan_at_step) {
        f->r[3] = NAN;
        f->gr[2] = INFINITY;
    }
    for (int i = 0; i < N_X; i++) f->gx[i] = 0.001f * (float)i;
    for (int i = 0; i < N_W; i++) f->gw[i] = -0.003f * (float)i;
    for (int i = 0; i < 3; i++) f->gb[i] = 0.5f;
    mk(&f->tx, f->x, 2, 4, 6);
    f->tx.requires_grad = 0;
    mk(&f->tw, f->w, 2, 3, 6);
    f->tw.requires_grad = 1;
    mk(&f->tb, f->b, 1, 3, 0);
    f->tb.requires_grad = 1;
    mk(&f->ty, f->y, 2, 4, 3);
    f->ty.requires_grad = 1;
    mk(&f->tr, f->r, 2, 4, 3);
    mk(&f->tgy, f->gy, 2, 4, 3);
    mk(&f->tgr, f->gr, 2, 4, 3);
    mk(&f->tgx, f->gx, 2, 4, 6);
    mk(&f->tgw, f->gw, 2, 3, 6);
    mk(&f->tgb, f->gb, 1, 3, 0);
}

static int emit(np_probe *p, np_event_kind kind, const char *name, int is_module,
                const char *parent, int step, int *seq, const np_hook_tensor *t, int nt,
                const np_hook_scalar *s, int ns)
{
    np_hook_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = kind;
    ev.name = name;
    ev.is_module = is_module;
    ev.parent = parent;
    ev.callsite = name ? "test_probe_dump.c:1 fake_step" : NULL;
    ev.step = step;
    ev.rank = 0;
    ev.seq = (*seq)++;
    ev.tensors = t;
    ev.n_tensors = nt;
    ev.scalars = s;
    ev.n_scalars = ns;
    return np_probe_on_event(&ev, p);
}

/* One step, in the order the runtime emits events (CONTRACTS.md):
 *   fwd  Functional.linear.0.forward (in Module.fc1.Linear.forward.0)
 *        Module.fc1.Linear.forward.0
 *        Functional.relu.0.forward
 *        Functional.layer_norm.0.forward (kwargs eps)
 *   bwd  Functional.relu.0.backward
 *        Module.fc1.Linear.backward.0
 *        Functional.linear.0.backward (in Module.fc1.Linear.backward.0)
 *   grads Module.fc1.Linear (parameters_grad weight, bias) */
static int fake_step(np_probe *p, int step, int nan_at_step)
{
    fake f;
    fake_fill(&f, step, nan_at_step);
    int seq = 0, rc = 0;
    const char *mod_f = "Module.fc1.Linear.forward.0", *mod_b = "Module.fc1.Linear.backward.0";
    rc |= emit(p, NP_EV_STEP_BEGIN, NULL, 0, NULL, step, &seq, NULL, 0, NULL, 0);
    np_hook_tensor lin[4] = {{NP_ROLE_INPUT, 0, NULL, &f.tx}, {NP_ROLE_INPUT, 1, NULL, &f.tw},
                             {NP_ROLE_INPUT, 2, NULL, &f.tb}, {NP_ROLE_OUTPUT, 0, NULL, &f.ty}};
    rc |= emit(p, NP_EV_API_FORWARD, "Functional.linear.0.forward", 0, mod_f, step, &seq, lin, 4,
               NULL, 0);
    np_hook_tensor mod[4] = {{NP_ROLE_INPUT, 0, NULL, &f.tx},
                             {NP_ROLE_PARAMETERS, -1, "weight", &f.tw},
                             {NP_ROLE_PARAMETERS, -1, "bias", &f.tb},
                             {NP_ROLE_OUTPUT, 0, NULL, &f.ty}};
    rc |= emit(p, NP_EV_MODULE_FORWARD, mod_f, 1, NULL, step, &seq, mod, 4, NULL, 0);
    np_hook_tensor relu[2] = {{NP_ROLE_INPUT, 0, NULL, &f.ty}, {NP_ROLE_OUTPUT, 0, NULL, &f.tr}};
    rc |= emit(p, NP_EV_API_FORWARD, "Functional.relu.0.forward", 0, NULL, step, &seq, relu, 2,
               NULL, 0);
    np_hook_tensor ln[2] = {{NP_ROLE_INPUT, 0, NULL, &f.tr}, {NP_ROLE_OUTPUT, 0, NULL, &f.tr}};
    np_hook_scalar eps = {"eps", 1e-5};
    rc |= emit(p, NP_EV_API_FORWARD, "Functional.layer_norm.0.forward", 0, NULL, step, &seq, ln,
               2, &eps, 1);
    np_hook_tensor rb[3] = {{NP_ROLE_INPUT, 0, NULL, &f.tgr}, {NP_ROLE_OUTPUT, 0, NULL, &f.tgy},
                            {NP_ROLE_OUTPUT, 1, NULL, NULL}};
    rc |= emit(p, NP_EV_API_BACKWARD, "Functional.relu.0.backward", 0, NULL, step, &seq, rb, 3,
               NULL, 0);
    np_hook_tensor mb[2] = {{NP_ROLE_INPUT, 0, NULL, &f.tgy}, {NP_ROLE_OUTPUT, 0, NULL, &f.tgx}};
    rc |= emit(p, NP_EV_MODULE_BACKWARD, mod_b, 1, NULL, step, &seq, mb, 2, NULL, 0);
    np_hook_tensor lb[4] = {{NP_ROLE_INPUT, 0, NULL, &f.tgy}, {NP_ROLE_OUTPUT, 0, NULL, &f.tgx},
                            {NP_ROLE_OUTPUT, 1, NULL, &f.tgw}, {NP_ROLE_OUTPUT, 2, NULL, &f.tgb}};
    rc |= emit(p, NP_EV_API_BACKWARD, "Functional.linear.0.backward", 0, mod_b, step, &seq, lb, 4,
               NULL, 0);
    np_hook_tensor pg[2] = {{NP_ROLE_PARAMETERS_GRAD, -1, "weight", &f.tgw},
                            {NP_ROLE_PARAMETERS_GRAD, -1, "bias", &f.tgb}};
    rc |= emit(p, NP_EV_PARAM_GRAD, "Module.fc1.Linear", 1, NULL, step, &seq, pg, 2, NULL, 0);
    rc |= emit(p, NP_EV_STEP_END, NULL, 0, NULL, step, &seq, NULL, 0, NULL, 0);
    return rc;
}

/* All leaves of one step in production order, with their flags. */
typedef struct leaf {
    const char *name;
    int module, backward, output;  /* output: role output or parameters_grad */
} leaf;

static const leaf all_leaves[] = {
    {"Functional.linear.0.forward.input.0", 0, 0, 0},
    {"Functional.linear.0.forward.input.1", 0, 0, 0},
    {"Functional.linear.0.forward.input.2", 0, 0, 0},
    {"Functional.linear.0.forward.output.0", 0, 0, 1},
    {"Module.fc1.Linear.forward.0.input.0", 1, 0, 0},
    {"Module.fc1.Linear.forward.0.parameters.weight", 1, 0, 0},
    {"Module.fc1.Linear.forward.0.parameters.bias", 1, 0, 0},
    {"Module.fc1.Linear.forward.0.output.0", 1, 0, 1},
    {"Functional.relu.0.forward.input.0", 0, 0, 0},
    {"Functional.relu.0.forward.output.0", 0, 0, 1},
    {"Functional.layer_norm.0.forward.input.0", 0, 0, 0},
    {"Functional.layer_norm.0.forward.output.0", 0, 0, 1},
    {"Functional.layer_norm.0.forward.kwargs.eps", 0, 0, 0},
    {"Functional.relu.0.backward.input.0", 0, 1, 0},
    {"Functional.relu.0.backward.output.0", 0, 1, 1},
    {"Module.fc1.Linear.backward.0.input.0", 1, 1, 0},
    {"Module.fc1.Linear.backward.0.output.0", 1, 1, 1},
    {"Functional.linear.0.backward.input.0", 0, 1, 0},
    {"Functional.linear.0.backward.output.0", 0, 1, 1},
    {"Functional.linear.0.backward.output.1", 0, 1, 1},
    {"Functional.linear.0.backward.output.2", 0, 1, 1},
    {"Module.fc1.Linear.parameters_grad.weight", 1, 1, 1},
    {"Module.fc1.Linear.parameters_grad.bias", 1, 1, 1},
};
#define N_LEAVES ((int)(sizeof all_leaves / sizeof all_leaves[0]))

/* ---- reading back with the HDF5 C API ------------------------------------- */

static char *step_file(char *buf, size_t cap, const char *root, int step, int rank)
{
    snprintf(buf, cap, "%s/step%d/rank%d/dump.h5", root, step, rank);
    return buf;
}

static int exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

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

static int64_t attr_i64(const char *path, const char *name)
{
    int64_t v = -99;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    H5Aread(a, H5T_NATIVE_INT64, &v);
    H5Aclose(a);
    H5Fclose(f);
    return v;
}

static void attr_str(const char *path, const char *name, char *out, size_t cap)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    char *s = NULL;
    H5Aread(a, t, &s);
    snprintf(out, cap, "%s", s ? s : "");
    H5free_memory(s);
    H5Tclose(t);
    H5Aclose(a);
    H5Fclose(f);
}

/* Names in a step file must equal the expected list, in order. */
static void check_names(const char *what, const char *path, const char *const *want, int nwant)
{
    size_t n;
    np_entry_rec *r = read_entries(path, &n);
    CHECK_MSG(r != NULL, "%s: cannot read %s", what, path);
    CHECK_MSG((int)n == nwant, "%s: %zu rows, want %d", what, n, nwant);
    for (int i = 0; r && i < nwant && i < (int)n; i++)
        CHECK_MSG(strcmp(r[i].name, want[i]) == 0, "%s: row %d is %s, want %s", what, i,
                  r[i].name, want[i]);
    free(r);
}

/* ---- running a config ------------------------------------------------------- */

static np_status run(const char *json_fmt, const char *dir, int steps, int rank, int nan_at,
                     np_probe_summary *sum, int *stop_rc)
{
    char json[4096];
    const char *at = strstr(json_fmt, "%s");
    if (!at)
        return NP_ERR_ARG;
    snprintf(json, sizeof json, "%.*s%s%s", (int)(at - json_fmt), json_fmt, dir, at + 2);
    np_probe *p = NULL;
    np_error err;
    np_error_clear(&err);
    np_probe_meta meta = {"test", "cpu", "fp32", rank, 2};
    np_status st = np_probe_open_json(&p, json, &meta, &err);
    if (st) {
        fprintf(stderr, "open: %s: %s\n", err.key, err.text);
        return st;
    }
    int rc = 0;
    for (int s = 0; s < steps; s++)
        rc |= fake_step(p, s, nan_at);
    if (stop_rc)
        *stop_rc = rc;
    st = np_probe_close(p, sum, &err);
    np_probe_free(p);
    return st;
}

static const char *mkdir_case(const char *name)
{
    static char buf[600];
    snprintf(buf, sizeof buf, "%s/%s", g_tmp, name);
    return buf;
}

/* Leaves matching a predicate, in order. */
typedef int (*pred_fn)(const leaf *l);
static int collect(const char **out, pred_fn pred)
{
    int n = 0;
    for (int i = 0; i < N_LEAVES; i++)
        if (pred(&all_leaves[i]))
            out[n++] = all_leaves[i].name;
    return n;
}
static int p_l1(const leaf *l) { return !l->module; }
static int p_l0(const leaf *l) { return l->module; }
static int p_all(const leaf *l) { (void)l; return 1; }
static int p_fwd_l1(const leaf *l) { return !l->module && !l->backward; }
static int p_in_mix(const leaf *l) { return !l->output; }
static int p_bwd_out_mix(const leaf *l) { return l->backward && l->output; }
static int p_relu(const leaf *l) { return strstr(l->name, "relu") != NULL; }

static void test_levels(void)
{
    const char *want[N_LEAVES];
    char f[700];
    struct { const char *level; pred_fn pred; } cases[] = {
        {"L1", p_l1}, {"L0", p_l0}, {"mix", p_all}};
    for (int c = 0; c < 3; c++) {
        char json[512], name[32];
        snprintf(name, sizeof name, "level_%s", cases[c].level);
        snprintf(json, sizeof json,
                 "{\"task\": \"statistics\", \"dump_path\": \"%%s\", \"level\": \"%s\"}",
                 cases[c].level);
        const char *dir = mkdir_case(name);
        np_probe_summary sum;
        CHECK_EQ_INT(run(json, dir, 2, 0, -1, &sum, NULL), NP_OK);
        int n = collect(want, cases[c].pred);
        check_names(name, step_file(f, sizeof f, dir, 0, 0), want, n);
        check_names(name, step_file(f, sizeof f, dir, 1, 0), want, n);
        CHECK_EQ_INT(sum.tensors, 2 * n);
        CHECK_EQ_INT(sum.steps, 2);
    }
}

static void test_steps_ranks(void)
{
    char f[700];
    const char *dir = mkdir_case("steps");
    CHECK_EQ_INT(run("{\"task\": \"statistics\", \"dump_path\": \"%s\", \"step\": [1, \"3-4\"]}",
                     dir, 6, 0, -1, NULL, NULL), NP_OK);
    int want[6] = {0, 1, 0, 1, 1, 0};
    for (int s = 0; s < 6; s++)
        CHECK_MSG(exists(step_file(f, sizeof f, dir, s, 0)) == want[s], "step %d", s);

    dir = mkdir_case("rank_other");
    np_probe_summary sum;
    CHECK_EQ_INT(run("{\"task\": \"statistics\", \"dump_path\": \"%s\", \"rank\": [1]}", dir, 2,
                     0, -1, &sum, NULL), NP_OK);
    CHECK(!exists(step_file(f, sizeof f, dir, 0, 0)));
    CHECK_EQ_INT(sum.files, 0);
    dir = mkdir_case("rank_mine");
    CHECK_EQ_INT(run("{\"task\": \"statistics\", \"dump_path\": \"%s\", \"rank\": [0, 1]}", dir,
                     1, 1, -1, NULL, NULL), NP_OK);
    CHECK(exists(step_file(f, sizeof f, dir, 0, 1)));
    CHECK_EQ_INT(attr_i64(f, "rank"), 1);
    CHECK_EQ_INT(attr_i64(f, "world_size"), 2);
}

static void test_scope_list_data_mode(void)
{
    char f[700];
    const char *want[N_LEAVES];
    const char *dir = mkdir_case("scope");
    CHECK_EQ_INT(run("{\"task\": \"statistics\", \"dump_path\": \"%s\", \"level\": \"L1\","
                     " \"statistics\": {\"scope\": [\"Functional.relu.0.forward\","
                     " \"Functional.relu.0.backward\"]}}", dir, 1, 0, -1, NULL, NULL), NP_OK);
    const char *scope_want[] = {
        "Functional.relu.0.forward.input.0", "Functional.relu.0.forward.output.0",
        "Functional.layer_norm.0.forward.input.0", "Functional.layer_norm.0.forward.output.0",
        "Functional.layer_norm.0.forward.kwargs.eps", "Functional.relu.0.backward.input.0",
        "Functional.relu.0.backward.output.0"};
    check_names("scope", step_file(f, sizeof f, dir, 0, 0), scope_want, 7);

    dir = mkdir_case("list");
    CHECK_EQ_INT(run("{\"task\": \"statistics\", \"dump_path\": \"%s\", \"level\": \"mix\","
                     " \"statistics\": {\"list\": [\"relu\"]}}", dir, 1, 0, -1, NULL, NULL),
                 NP_OK);
    check_names("list", step_file(f, sizeof f, dir, 0, 0), want, collect(want, p_relu));

    dir = mkdir_case("dm_forward");
    CHECK_EQ_INT(run("{\"task\": \"statistics\", \"dump_path\": \"%s\", \"level\": \"L1\","
                     " \"statistics\": {\"data_mode\": [\"forward\"]}}", dir, 1, 0, -1, NULL,
                     NULL), NP_OK);
    check_names("data_mode forward", step_file(f, sizeof f, dir, 0, 0), want,
                collect(want, p_fwd_l1));

    dir = mkdir_case("dm_input");
    CHECK_EQ_INT(run("{\"task\": \"statistics\", \"dump_path\": \"%s\", \"level\": \"mix\","
                     " \"statistics\": {\"data_mode\": [\"input\"]}}", dir, 1, 0, -1, NULL,
                     NULL), NP_OK);
    check_names("data_mode input", step_file(f, sizeof f, dir, 0, 0), want,
                collect(want, p_in_mix));

    dir = mkdir_case("dm_bwd_out");
    CHECK_EQ_INT(run("{\"task\": \"statistics\", \"dump_path\": \"%s\", \"level\": \"mix\","
                     " \"statistics\": {\"data_mode\": [\"backward\", \"output\"]}}", dir, 1, 0,
                     -1, NULL, NULL), NP_OK);
    check_names("data_mode backward+output", step_file(f, sizeof f, dir, 0, 0), want,
                collect(want, p_bwd_out_mix));
}

/* Rows, statistics, crc and payloads of a tensor-task dump against the
 * values the fake step used. */
static void test_content(void)
{
    char f[700];
    const char *dir = mkdir_case("tensor");
    CHECK_EQ_INT(run("{\"task\": \"tensor\", \"dump_path\": \"%s\", \"level\": \"mix\"}", dir, 2,
                     0, -1, NULL, NULL), NP_OK);
    step_file(f, sizeof f, dir, 1, 0);
    char s[64];
    attr_str(f, "format", s, sizeof s);
    CHECK_STREQ(s, "nprobe-dump");
    attr_str(f, "task", s, sizeof s);
    CHECK_STREQ(s, "tensor");
    attr_str(f, "level", s, sizeof s);
    CHECK_STREQ(s, "mix");
    attr_str(f, "framework", s, sizeof s);
    CHECK_STREQ(s, "test");
    CHECK_EQ_INT(attr_i64(f, "format_version"), 1);
    CHECK_EQ_INT(attr_i64(f, "step"), 1);
    CHECK_EQ_INT(attr_i64(f, "complete"), 1);

    fake fk;
    fake_fill(&fk, 1, -1);
    size_t n;
    np_entry_rec *r = read_entries(f, &n);
    CHECK_EQ_INT(n, N_LEAVES);
    hid_t file = H5Fopen(f, H5F_ACC_RDONLY, H5P_DEFAULT);
    for (size_t i = 0; r && i < n; i++) {
        if (strcmp(r[i].name, "Functional.linear.0.forward.input.1") == 0) {
            /* w: (3, 6) */
            CHECK_STREQ(r[i].call, "Functional.linear.0.forward");
            CHECK_STREQ(r[i].role, "input");
            CHECK_STREQ(r[i].dtype, "float32");
            CHECK_EQ_INT(r[i].ndim, 2);
            CHECK_EQ_INT(r[i].shape[0], 3);
            CHECK_EQ_INT(r[i].shape[1], 6);
            CHECK_EQ_INT(r[i].numel, 18);
            CHECK_EQ_INT(r[i].requires_grad, 1);
            CHECK_EQ_INT(r[i].seq, 0);
            double mx = -INFINITY, mn = INFINITY, sum = 0, sq = 0;
            for (int k = 0; k < N_W; k++) {
                double v = fk.w[k];
                mx = v > mx ? v : mx;
                mn = v < mn ? v : mn;
                sum += v;
                sq += v * v;
            }
            CHECK_EQ_FLOAT(r[i].max, mx);
            CHECK_EQ_FLOAT(r[i].min, mn);
            CHECK_CLOSE(r[i].mean, sum / N_W, 1e-15, 1e-12);
            CHECK_CLOSE(r[i].norm, sqrt(sq), 1e-15, 1e-12);
            CHECK_EQ_INT(r[i].crc32, (uint32_t)crc32(0L, (const Bytef *)fk.w, sizeof fk.w));
            CHECK_EQ_INT(r[i].has_data, 1);
            float back[N_W];
            hid_t d = H5Dopen2(file, "/data/Functional.linear.0.forward.input.1", H5P_DEFAULT);
            CHECK(d >= 0);
            H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, back);
            CHECK(memcmp(back, fk.w, sizeof back) == 0);
            H5Dclose(d);
        }
        if (strcmp(r[i].name, "Functional.layer_norm.0.forward.kwargs.eps") == 0) {
            CHECK_STREQ(r[i].role, "kwargs");
            CHECK_EQ_INT(r[i].ndim, 0);
            CHECK_EQ_INT(r[i].numel, 1);
            CHECK_EQ_FLOAT(r[i].max, 1e-5);
            CHECK_EQ_FLOAT(r[i].mean, 1e-5);
            CHECK_EQ_INT(r[i].has_data, 0);
        }
        if (strcmp(r[i].name, "Module.fc1.Linear.parameters_grad.bias") == 0) {
            CHECK_STREQ(r[i].role, "parameters_grad");
            CHECK_EQ_FLOAT(r[i].mean, 0.5);
            CHECK_EQ_FLOAT(r[i].norm, sqrt(0.75));
        }
    }
    /* /calls: the parent links */
    hid_t d = H5Dopen2(file, "calls", H5P_DEFAULT);
    hid_t sp = H5Dget_space(d);
    hssize_t nc = H5Sget_simple_extent_npoints(sp);
    CHECK_EQ_INT(nc, 8);
    np_call_rec calls[8];
    hid_t ct = np_fmt_call_h5type();
    if (nc == 8) {
        H5Dread(d, ct, H5S_ALL, H5S_ALL, H5P_DEFAULT, calls);
        CHECK_STREQ(calls[0].call, "Functional.linear.0.forward");
        CHECK_STREQ(calls[0].kind, "api");
        CHECK_STREQ(calls[0].parent, "Module.fc1.Linear.forward.0");
        CHECK_STREQ(calls[1].kind, "module");
        CHECK_STREQ(calls[1].parent, "");
        CHECK_STREQ(calls[0].callsite, "test_probe_dump.c:1 fake_step");
        CHECK_EQ_INT(calls[7].seq, 7);
        CHECK_STREQ(calls[7].call, "Module.fc1.Linear");
    }
    H5Tclose(ct);
    H5Sclose(sp);
    H5Dclose(d);
    H5Fclose(file);
    free(r);

    /* md5: crc but no payload; statistics: neither */
    dir = mkdir_case("md5");
    CHECK_EQ_INT(run("{\"task\": \"md5\", \"dump_path\": \"%s\"}", dir, 1, 0, -1, NULL, NULL),
                 NP_OK);
    r = read_entries(step_file(f, sizeof f, dir, 0, 0), &n);
    fake_fill(&fk, 0, -1);
    CHECK(n > 0);
    if (r && n > 0) {
        CHECK_STREQ(r[0].name, "Functional.linear.0.forward.input.0");
        CHECK_EQ_INT(r[0].crc32, (uint32_t)crc32(0L, (const Bytef *)fk.x, sizeof fk.x));
        CHECK_EQ_INT(r[0].has_data, 0);
    }
    free(r);
    dir = mkdir_case("statistics_summary_md5");
    CHECK_EQ_INT(run("{\"task\": \"statistics\", \"dump_path\": \"%s\","
                     " \"statistics\": {\"summary_mode\": \"md5\"}}", dir, 1, 0, -1, NULL, NULL),
                 NP_OK);
    r = read_entries(step_file(f, sizeof f, dir, 0, 0), &n);
    CHECK(r && n > 0 && r[0].crc32 == (uint32_t)crc32(0L, (const Bytef *)fk.x, sizeof fk.x));
    free(r);
}

/* Async and sync writes give the same /entries rows and /data payloads. */
static void test_async_equals_sync(void)
{
    char fa[700], fs[700];
    const char *json_s = "{\"task\": \"tensor\", \"dump_path\": \"%s\", \"level\": \"mix\"}";
    const char *json_a = "{\"task\": \"tensor\", \"dump_path\": \"%s\", \"level\": \"mix\","
                         " \"async_dump\": true, \"queue_mb\": 1}";
    char ds[600], da[600];
    snprintf(ds, sizeof ds, "%s", mkdir_case("sync"));
    snprintf(da, sizeof da, "%s", mkdir_case("async"));
    np_probe_summary a, s;
    CHECK_EQ_INT(run(json_s, ds, 3, 0, -1, &s, NULL), NP_OK);
    CHECK_EQ_INT(run(json_a, da, 3, 0, -1, &a, NULL), NP_OK);
    CHECK_EQ_INT(a.tensors, s.tensors);
    CHECK_EQ_INT(a.calls, s.calls);
    CHECK_EQ_INT(a.data_bytes, s.data_bytes);
    for (int st = 0; st < 3; st++) {
        size_t na, ns;
        np_entry_rec *ra = read_entries(step_file(fa, sizeof fa, da, st, 0), &na);
        np_entry_rec *rs = read_entries(step_file(fs, sizeof fs, ds, st, 0), &ns);
        CHECK_EQ_INT(na, ns);
        CHECK(ra && rs && na == ns && memcmp(ra, rs, na * sizeof *ra) == 0);
        /* payloads */
        hid_t x = H5Fopen(fa, H5F_ACC_RDONLY, H5P_DEFAULT);
        hid_t y = H5Fopen(fs, H5F_ACC_RDONLY, H5P_DEFAULT);
        for (size_t i = 0; ra && rs && i < na && i < ns; i++) {
            if (!ra[i].has_data)
                continue;
            char path[300];
            snprintf(path, sizeof path, "/data/%s", ra[i].name);
            float bx[64] = {0}, by[64] = {0};
            hid_t dx = H5Dopen2(x, path, H5P_DEFAULT), dy = H5Dopen2(y, path, H5P_DEFAULT);
            CHECK(dx >= 0 && dy >= 0);
            H5Dread(dx, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, bx);
            H5Dread(dy, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, by);
            CHECK(memcmp(bx, by, sizeof bx) == 0);
            H5Dclose(dx);
            H5Dclose(dy);
        }
        H5Fclose(x);
        H5Fclose(y);
        free(ra);
        free(rs);
    }
}

static void test_overflow(void)
{
    char f[700];
    const char *dir = mkdir_case("overflow1");
    np_probe_summary sum;
    CHECK_EQ_INT(run("{\"task\": \"overflow_check\", \"dump_path\": \"%s\", \"level\": \"mix\"}",
                     dir, 3, 0, 1, &sum, NULL), NP_OK);
    CHECK(!exists(step_file(f, sizeof f, dir, 0, 0)));
    CHECK(!exists(step_file(f, sizeof f, dir, 2, 0)));
    const char *want[] = {"Functional.relu.0.forward.input.0",
                          "Functional.relu.0.forward.output.0"};
    check_names("overflow first", step_file(f, sizeof f, dir, 1, 0), want, 2);
    CHECK_EQ_INT(sum.has_overflow, 1);
    CHECK_STREQ(sum.overflow_call, "Functional.relu.0.forward");
    CHECK_EQ_INT(sum.overflow_step, 1);
    CHECK_EQ_INT(sum.overflow_rank, 0);
    CHECK_EQ_INT(sum.overflows, 1);

    /* No limit: relu fwd, layer_norm fwd (input holds NaN), relu bwd (Inf). */
    dir = mkdir_case("overflow_all");
    CHECK_EQ_INT(run("{\"task\": \"overflow_check\", \"dump_path\": \"%s\", \"level\": \"L1\","
                     " \"overflow_check\": {\"overflow_nums\": -1}}", dir, 3, 0, 1, &sum, NULL),
                 NP_OK);
    CHECK_EQ_INT(sum.overflows, 3);
    size_t n;
    np_entry_rec *r = read_entries(step_file(f, sizeof f, dir, 1, 0), &n);
    CHECK_EQ_INT(n, 7);
    for (size_t i = 0; r && i < n; i++)
        if (strcmp(r[i].role, "kwargs") != 0)
            CHECK_EQ_INT(r[i].has_data, 1);
    free(r);

    /* Module path of the first overflow: linear inside fc1. */
    dir = mkdir_case("overflow_module");
    fake fk;
    (void)fk;
    np_probe *p = NULL;
    char json[2048];
    snprintf(json, sizeof json,
             "{\"task\": \"overflow_check\", \"dump_path\": \"%s\", \"level\": \"L1\"}", dir);
    CHECK_EQ_INT(np_probe_open_json(&p, json, NULL, NULL), NP_OK);
    float bad[2] = {1.0f, -INFINITY};
    np_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = NP_FLOAT32;
    t.ndim = 1;
    t.shape[0] = 2;
    t.numel = 2;
    t.data = bad;
    np_hook_tensor ht = {NP_ROLE_OUTPUT, 0, NULL, &t};
    int seq = 0;
    emit(p, NP_EV_STEP_BEGIN, NULL, 0, NULL, 4, &seq, NULL, 0, NULL, 0);
    emit(p, NP_EV_API_FORWARD, "Functional.linear.7.forward", 0, "Module.h.0.mlp.MLP.forward.0",
         4, &seq, &ht, 1, NULL, 0);
    emit(p, NP_EV_STEP_END, NULL, 0, NULL, 4, &seq, NULL, 0, NULL, 0);
    CHECK_EQ_INT(np_probe_close(p, &sum, NULL), NP_OK);
    np_probe_free(p);
    CHECK_STREQ(sum.overflow_call, "Functional.linear.7.forward");
    CHECK_STREQ(sum.overflow_module, "Module.h.0.mlp.MLP.forward.0");
    CHECK_EQ_INT(sum.overflow_step, 4);
}

static void test_embed(void)
{
    char f[700];
    const char *dir = mkdir_case("embed");
    char json[2048];
    snprintf(json, sizeof json,
             "{\"task\": \"tensor\", \"dump_path\": \"%s\", \"level\": \"mix\"}", dir);
    np_probe *p = NULL;
    np_error err;
    np_error_clear(&err);
    CHECK_EQ_INT(np_probe_open_json(&p, json, NULL, &err), NP_OK);
    float w[3] = {1, 2, 3}, g[3] = {0.5f, -0.5f, 0};
    np_tensor tw, tg;
    mk(&tw, w, 1, 3, 0);
    mk(&tg, g, 1, 3, 0);
    CHECK(np_probe_dump(p, "Functional.mul.0.forward", NP_ROLE_INPUT, "0", &tw, &err) != NP_OK);
    np_error_clear(&err);
    CHECK_EQ_INT(np_probe_step_begin(p, 0, &err), NP_OK);
    CHECK_EQ_INT(np_probe_dump(p, "Functional.mul.0.forward", NP_ROLE_INPUT, "0", &tw, &err),
                 NP_OK);
    CHECK_EQ_INT(np_probe_dump_scalar(p, "Functional.mul.0.forward", "other", 2.0, &err), NP_OK);
    CHECK_EQ_INT(np_probe_dump(p, "Module.lin.Linear", NP_ROLE_PARAMETERS_GRAD,
                               "weight", &tg, &err), NP_OK);
    CHECK_EQ_INT(np_probe_step_end(p, &err), NP_OK);
    np_probe_summary sum;
    CHECK_EQ_INT(np_probe_close(p, &sum, &err), NP_OK);
    np_probe_free(p);
    CHECK_EQ_INT(sum.calls, 2);
    CHECK_EQ_INT(sum.tensors, 3);
    CHECK_EQ_INT(sum.data_bytes, 24);
    const char *want[] = {"Functional.mul.0.forward.input.0", "Functional.mul.0.forward.kwargs.other",
                          "Module.lin.Linear.parameters_grad.weight"};
    check_names("embed", step_file(f, sizeof f, dir, 0, 0), want, 3);

    /* The reader API reads the same file. */
    np_dumpio *d = NULL;
    CHECK_EQ_INT(np_dumpio_open(&d, f, NULL, 0, &err), NP_OK);
    if (d) {
        CHECK_EQ_INT(np_dumpio_get_info(d)->complete, 1);
        double v[8];
        size_t nv;
        int64_t numel;
        CHECK_EQ_INT(np_dumpio_read_values(v, 8, &nv, d, "Functional.mul.0.forward.input.0",
                                           numel = leaf_numel(d, "Functional.mul.0.forward.input.0"), &err), NP_OK);
        CHECK_EQ_INT(nv, 3);
        CHECK_EQ_INT(numel, 3);
        CHECK_EQ_FLOAT(v[2], 3.0);
        np_dumpio_close(d);
    }
}

static double attr_f64(const char *path, const char *name)
{
    double v = -99;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    if (H5Aread(a, H5T_NATIVE_DOUBLE, &v) < 0)
        v = -98;
    H5Aclose(a);
    H5Fclose(f);
    return v;
}

/* The loss scale of each step (root attribute loss_scale, float64): 1 by
 * default, np_probe_set_loss_scale for the steps begun after it, and the
 * runtime's "loss_scale" scalar of NP_EV_STEP_BEGIN; sync and async. The
 * data-parallel factor (root attribute dp_grad_scale) beside it: absent
 * by default and for a NaN (read as 1), 2 once np_probe_set_dp_grad_scale
 * said so, the loss scale untouched by it. */
static void test_loss_scale(void)
{
    for (int async = 0; async < 2; async++) {
        char f[700], json[2048];
        const char *dir = mkdir_case(async ? "loss_scale_async" : "loss_scale");
        snprintf(json, sizeof json,
                 "{\"task\": \"statistics\", \"dump_path\": \"%s\", \"async_dump\": %s}", dir,
                 async ? "true" : "false");
        np_probe *p = NULL;
        np_error err;
        np_error_clear(&err);
        CHECK_EQ_INT(np_probe_open_json(&p, json, NULL, &err), NP_OK);
        if (!p)
            continue;
        float g[3] = {0.5f, -0.5f, 0};
        np_tensor tg;
        mk(&tg, g, 1, 3, 0);
        /* step 0: default; step 1: set through the API; step 2: through the hook */
        for (int step = 0; step < 3; step++) {
            if (step == 1) {
                np_probe_set_loss_scale(p, 1024.0);
                np_probe_set_dp_grad_scale(p, NAN);
            }
            if (step == 2)
                np_probe_set_dp_grad_scale(p, 2.0);
            if (step < 2) {
                CHECK_EQ_INT(np_probe_step_begin(p, step, &err), NP_OK);
            } else {
                np_hook_scalar ls = {"loss_scale", 32768.0};
                np_hook_event ev = {0};
                ev.kind = NP_EV_STEP_BEGIN;
                ev.step = step;
                ev.scalars = &ls;
                ev.n_scalars = 1;
                CHECK_EQ_INT(np_probe_on_event(&ev, p), 0);
            }
            CHECK_EQ_INT(np_probe_dump(p, "Module.lin.Linear", NP_ROLE_PARAMETERS_GRAD, "weight",
                                       &tg, &err), NP_OK);
            CHECK_EQ_INT(np_probe_step_end(p, &err), NP_OK);
        }
        np_probe_summary sum;
        CHECK_EQ_INT(np_probe_close(p, &sum, &err), NP_OK);
        np_probe_free(p);
        CHECK_EQ_FLOAT(attr_f64(step_file(f, sizeof f, dir, 0, 0), "loss_scale"), 1.0);
        CHECK_EQ_FLOAT(attr_f64(step_file(f, sizeof f, dir, 1, 0), "loss_scale"), 1024.0);
        CHECK_EQ_FLOAT(attr_f64(step_file(f, sizeof f, dir, 2, 0), "loss_scale"), 32768.0);
        CHECK_EQ_FLOAT(attr_f64(step_file(f, sizeof f, dir, 0, 0), "dp_grad_scale"), -98.0);
        CHECK_EQ_FLOAT(attr_f64(step_file(f, sizeof f, dir, 1, 0), "dp_grad_scale"), -98.0);
        CHECK_EQ_FLOAT(attr_f64(step_file(f, sizeof f, dir, 2, 0), "dp_grad_scale"), 2.0);
    }
}

static void test_errors(void)
{
    char f[700];
    np_probe *p = NULL;
    np_error err;
    np_error_clear(&err);
    /* unwritable dump_path: refused at open, nothing written */
    char json[2048], dir[600];
    if (geteuid() == 0) {
        snprintf(dir, sizeof dir, "/proc/self/nprobe_dump");
    } else {
        snprintf(dir, sizeof dir, "%s/ro", g_tmp);
        mkdir(dir, 0500);
        strcat(dir, "/dump");
    }
    snprintf(json, sizeof json, "{\"task\": \"statistics\", \"dump_path\": \"%s\"}", dir);
    CHECK_EQ_INT(np_probe_open_json(&p, json, NULL, &err), NP_ERR_IO);
    CHECK_EQ_INT(err.status, NP_ERR_IO);
    CHECK_STREQ(err.key, "dump_path");
    CHECK_CONTAINS(err.text, "not writable");
    CHECK(p == NULL);
    CHECK(!exists(dir));

    /* dump_path under a regular file */
    snprintf(f, sizeof f, "%s/a_file", g_tmp);
    FILE *fp = fopen(f, "w");
    if (fp)
        fclose(fp);
    snprintf(json, sizeof json, "{\"task\": \"statistics\", \"dump_path\": \"%s/x\"}", f);
    np_error_clear(&err);
    CHECK_EQ_INT(np_probe_open_json(&p, json, NULL, &err), NP_ERR_IO);
    CHECK_CONTAINS(err.text, "not a directory");

    /* A file size limit, sync and async, in a child: the dump stops with one
     * clear error, training goes on and the process is not killed - also not
     * at exit (exit(), not _exit(): HDF5 closes what is left open then). */
    for (int mode = 0; mode < 3; mode++) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            struct rlimit rl = {150000, 150000};
            setrlimit(RLIMIT_FSIZE, &rl);
            char d2[600];
            snprintf(d2, sizeof d2, "%s/fsize%d", g_tmp, mode);
            snprintf(json, sizeof json,
                     "{\"task\": \"tensor\", \"dump_path\": \"%s\", \"async_dump\": %s,"
                     " \"queue_mb\": 1, \"on_error\": \"%s\"}",
                     d2, mode == 1 ? "true" : "false", mode == 2 ? "stop_training" : "stop_dump");
            np_probe *q = NULL;
            if (np_probe_open_json(&q, json, NULL, NULL))
                exit(10);
            static float big[40000];
            np_tensor t;
            mk(&t, big, 1, 40000, 0);
            np_hook_tensor ht = {NP_ROLE_OUTPUT, 0, NULL, &t};
            int seq = 0, rc = 0, steps_done = 0;
            for (int s = 0; s < 5; s++) {
                char name[64];
                rc |= emit(q, NP_EV_STEP_BEGIN, NULL, 0, NULL, s, &seq, NULL, 0, NULL, 0);
                for (int k = 0; k < 3; k++) {
                    snprintf(name, sizeof name, "Functional.relu.%d.forward", k);
                    rc |= emit(q, NP_EV_API_FORWARD, name, 0, NULL, s, &seq, &ht, 1, NULL, 0);
                }
                rc |= emit(q, NP_EV_STEP_END, NULL, 0, NULL, s, &seq, NULL, 0, NULL, 0);
                steps_done++;
            }
            np_probe_summary sum;
            np_error e;
            np_error_clear(&e);
            np_status st = np_probe_close(q, &sum, &e);
            np_probe_free(q);
            if (st != NP_ERR_NOSPACE || sum.error.status != NP_ERR_NOSPACE)
                exit(11);
            if (!strstr(e.text, "File too large"))
                exit(12);
            if (steps_done != 5)
                exit(13);
            if (mode == 2 && rc == 0)
                exit(14);
            if (mode == 0 && rc != 0)
                exit(15);
            exit(0);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        CHECK_MSG(WIFEXITED(status), "fsize mode %d: child killed by signal %d", mode,
                  WIFSIGNALED(status) ? WTERMSIG(status) : 0);
        CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "fsize mode %d: exit %d", mode,
                  WEXITSTATUS(status));
    }
}


/* A write error after one finished step, sync and async, in a child that
 * ends with exit() (HDF5's atexit handler runs): step 0 (small) stays a
 * complete, readable dump.h5, step 1 (larger than the file size limit) is
 * left as dump.h5.partial, the error is reported once and the process exits
 * normally (it crashed with SIGSEGV in H5F__close_cb when a failed H5Fclose
 * left a freed file id behind). */
static void test_error_after_a_step(void)
{
    for (int mode = 0; mode < 2; mode++) {
        char d2[600];
        snprintf(d2, sizeof d2, "%s/after_step%d", g_tmp, mode);
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            struct rlimit rl = {200000, 200000};
            setrlimit(RLIMIT_FSIZE, &rl);
            char json[1200];
            snprintf(json, sizeof json,
                     "{\"task\": \"tensor\", \"dump_path\": \"%s\", \"async_dump\": %s,"
                     " \"queue_mb\": 1}", d2, mode ? "true" : "false");
            np_probe *q = NULL;
            if (np_probe_open_json(&q, json, NULL, NULL))
                exit(10);
            static float small[64], big[30000];
            for (int i = 0; i < 64; i++)
                small[i] = (float)i;
            np_tensor ts, tb;
            mk(&ts, small, 1, 64, 0);
            mk(&tb, big, 1, 30000, 0);
            np_error e;
            np_error_clear(&e);
            int bad = 0;
            bad |= np_probe_step_begin(q, 0, &e) != NP_OK;
            bad |= np_probe_dump(q, "Functional.relu.0.forward", NP_ROLE_OUTPUT, "0", &ts, &e) != NP_OK;
            bad |= np_probe_step_end(q, &e) != NP_OK;
            if (bad)
                exit(11);
            np_probe_step_begin(q, 1, NULL);
            for (int k = 0; k < 12; k++) {
                char name[64];
                snprintf(name, sizeof name, "Functional.relu.%d.forward", k);
                np_probe_dump(q, name, NP_ROLE_OUTPUT, "0", &tb, NULL);
            }
            np_probe_step_end(q, NULL);
            np_probe_summary sum;
            np_error_clear(&e);
            np_status st = np_probe_close(q, &sum, &e);
            np_probe_free(q);
            if (st != NP_ERR_NOSPACE || sum.error.status != NP_ERR_NOSPACE)
                exit(12);
            if (!strstr(e.text, "File too large") || !strstr(e.file, "step1"))
                exit(13);
            if (sum.steps != 1)
                exit(14);
            exit(0);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        CHECK_MSG(WIFEXITED(status), "after a step, mode %d: child killed by signal %d", mode,
                  WIFSIGNALED(status) ? WTERMSIG(status) : 0);
        CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "after a step, mode %d: exit %d", mode, WEXITSTATUS(status));
        char f[700], part[720];
        step_file(f, sizeof f, d2, 0, 0);
        CHECK_EQ_INT(attr_i64(f, "complete"), 1);
        const char *want[] = {"Functional.relu.0.forward.output.0"};
        check_names("after a step", f, want, 1);
        np_dumpio *d = NULL;
        np_error err;
        np_error_clear(&err);
        CHECK_EQ_INT(np_dumpio_open(&d, f, NULL, 0, &err), NP_OK);
        if (d) {
            double v[64];
            size_t nv;
            int64_t numel;
            CHECK_EQ_INT(np_dumpio_read_values(v, 64, &nv, d, "Functional.relu.0.forward.output.0",
                                           numel = leaf_numel(d, "Functional.relu.0.forward.output.0"), &err), NP_OK);
            CHECK_EQ_INT(nv, 64);
            CHECK_EQ_FLOAT(v[63], 63.0);
            np_dumpio_close(d);
        }
        step_file(f, sizeof f, d2, 1, 0);
        snprintf(part, sizeof part, "%s.partial", f);
        CHECK(!exists(f));
        CHECK(exists(part));
    }
}


/* A rerun into the same dump_path replaces each step it starts: the earlier
 * run's dump.h5 of that step is removed when the step begins, so a rerun
 * killed in step 0 leaves only its own dump.h5.partial there (readers used
 * to take the stale dump.h5 beside it). Sync and async; overflow_check,
 * which writes a step only if it overflows, also drops the old files. */
static void test_rerun(void)
{
    char f[700], part[720];
    for (int mode = 0; mode < 2; mode++) {
        const char *dir = mkdir_case(mode ? "rerun_async" : "rerun_sync");
        char d[600];
        snprintf(d, sizeof d, "%s", dir);
        const char *cfg = mode ? "{\"task\": \"tensor\", \"dump_path\": \"%s\", \"async_dump\": true}"
                               : "{\"task\": \"tensor\", \"dump_path\": \"%s\"}";
        np_probe_summary sum;
        CHECK_EQ_INT(run(cfg, d, 2, 0, -1, &sum, NULL), NP_OK);
        CHECK(exists(step_file(f, sizeof f, d, 0, 0)));
        CHECK(exists(step_file(f, sizeof f, d, 1, 0)));
        step_file(f, sizeof f, d, 0, 0);
        snprintf(part, sizeof part, "%s.partial", f);
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            char json[1200];
            const char *at = strstr(cfg, "%s");
            snprintf(json, sizeof json, "%.*s%s%s", (int)(at - cfg), cfg, d, at + 2);
            np_probe *q = NULL;
            if (np_probe_open_json(&q, json, NULL, NULL))
                _exit(10);
            float v[4] = {1, 2, 3, 4};
            np_tensor t;
            mk(&t, v, 1, 4, 0);
            np_probe_step_begin(q, 0, NULL);
            np_probe_dump(q, "Functional.relu.0.forward", NP_ROLE_OUTPUT, "0", &t, NULL);
            for (int i = 0; i < 500 && !exists(part); i++)
                nanosleep(&(struct timespec){0, 10000000}, NULL); /* async: the writer began */
            raise(SIGKILL);    /* killed in step 0 of the rerun */
            _exit(11);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        CHECK_MSG(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "rerun %d: child status %d",
                  mode, status);
        CHECK_MSG(!exists(f), "rerun %d: the earlier run's %s is still there", mode, f);
        CHECK(exists(part));
        CHECK(exists(step_file(f, sizeof f, d, 1, 0))); /* not started by the rerun */
    }

    const char *dir = mkdir_case("rerun_overflow");
    char d[600];
    snprintf(d, sizeof d, "%s", dir);
    const char *cfg = "{\"task\": \"overflow_check\", \"dump_path\": \"%s\", \"level\": \"mix\"}";
    np_probe_summary sum;
    CHECK_EQ_INT(run(cfg, d, 3, 0, 1, &sum, NULL), NP_OK);
    CHECK(exists(step_file(f, sizeof f, d, 1, 0)));
    CHECK_EQ_INT(run(cfg, d, 3, 0, -1, &sum, NULL), NP_OK);
    CHECK_EQ_INT(sum.has_overflow, 0);
    CHECK_MSG(!exists(step_file(f, sizeof f, d, 1, 0)), "rerun overflow_check: stale %s", f);
}


/* The embedding API refuses a leaf name dumped twice in a step, or one too
 * long for the table (two such names would be equal after the 255-byte
 * cut), with an error naming the tensor; the rest of the step is written
 * and np_probe_step_end/np_probe_close report no error. (Before, the second
 * payload failed the whole step with "writing a payload failed: HDF5 error"
 * while both calls had returned NP_OK.) Sync and async. */
static void test_embed_names(void)
{
    for (int mode = 0; mode < 2; mode++) {
        char f[700], json[1200];
        const char *dir = mkdir_case(mode ? "embed_names_async" : "embed_names_sync");
        snprintf(json, sizeof json, "{\"task\": \"tensor\", \"dump_path\": \"%s\"%s}", dir,
                 mode ? ", \"async_dump\": true" : "");
        np_probe *p = NULL;
        np_error err;
        np_error_clear(&err);
        CHECK_EQ_INT(np_probe_open_json(&p, json, NULL, &err), NP_OK);
        if (!p)
            continue;
        float a[3] = {1, 2, 3}, b[3] = {7, 8, 9};
        np_tensor ta, tb;
        mk(&ta, a, 1, 3, 0);
        mk(&tb, b, 1, 3, 0);
        const char *call = "Functional.add.0.forward";
        CHECK_EQ_INT(np_probe_step_begin(p, 0, &err), NP_OK);
        CHECK_EQ_INT(np_probe_dump(p, call, NP_ROLE_INPUT, "0", &ta, &err), NP_OK);
        CHECK_EQ_INT(np_probe_dump(p, call, NP_ROLE_INPUT, "0", &tb, &err), NP_ERR_ARG);
        CHECK_STREQ(err.key, "Functional.add.0.forward.input.0");
        CHECK_CONTAINS(err.text, "Functional.add.0.forward.input.0");
        CHECK_CONTAINS(err.text, "already dumped");
        np_error_clear(&err);
        /* Two names of 300 bytes that agree on their first 255. */
        char longcall[320];
        memset(longcall, 'x', sizeof longcall);
        memcpy(longcall, "Functional.", 11);
        snprintf(longcall + 280, 40, ".forward");
        CHECK_EQ_INT(np_probe_dump(p, longcall, NP_ROLE_INPUT, "0", &ta, &err), NP_ERR_ARG);
        CHECK_CONTAINS(err.text, "Functional.xxx");
        CHECK_CONTAINS(err.text, "the most is 255");
        np_error_clear(&err);
        CHECK_EQ_INT(np_probe_dump(p, longcall, NP_ROLE_INPUT, "1", &ta, &err), NP_ERR_ARG);
        np_error_clear(&err);
        CHECK_EQ_INT(np_probe_dump(p, call, NP_ROLE_INPUT, "1", &tb, &err), NP_OK);
        CHECK_EQ_INT(np_probe_dump(p, call, NP_ROLE_OUTPUT, "0", &tb, &err), NP_OK);
        CHECK_EQ_INT(np_probe_step_end(p, &err), NP_OK);
        /* The same name again in the next step is fine. */
        CHECK_EQ_INT(np_probe_step_begin(p, 1, &err), NP_OK);
        CHECK_EQ_INT(np_probe_dump(p, call, NP_ROLE_INPUT, "0", &tb, &err), NP_OK);
        CHECK_EQ_INT(np_probe_step_end(p, &err), NP_OK);
        np_probe_summary sum;
        CHECK_EQ_INT(np_probe_close(p, &sum, &err), NP_OK);
        CHECK_MSG(err.status == NP_OK, "embed names %d: %s", mode, err.text);
        CHECK_EQ_INT(sum.error.status, NP_OK);
        CHECK_EQ_INT(sum.steps, 2);
        np_probe_free(p);
        const char *want[] = {"Functional.add.0.forward.input.0",
                              "Functional.add.0.forward.input.1",
                              "Functional.add.0.forward.output.0"};
        check_names("embed names", step_file(f, sizeof f, dir, 0, 0), want, 3);
        np_dumpio *d = NULL;
        CHECK_EQ_INT(np_dumpio_open(&d, f, NULL, 0, &err), NP_OK);
        if (d) {
            double v[3];
            size_t nv;
            int64_t numel;
            CHECK_EQ_INT(np_dumpio_read_values(v, 3, &nv, d, "Functional.add.0.forward.input.0",
                                           numel = leaf_numel(d, "Functional.add.0.forward.input.0"), &err), NP_OK);
            CHECK_EQ_FLOAT(v[0], 1.0); /* the first dump's data */
            np_dumpio_close(d);
        }
        const char *want1[] = {"Functional.add.0.forward.input.0"};
        check_names("embed names step 1", step_file(f, sizeof f, dir, 1, 0), want1, 1);
    }
}


/* How the scope fared in each step is recorded in the step file (root
 * attributes scope, scope_first, scope_last; the `nprobe dump` summary
 * warns from them): "closed" when first and last arrived (also when last is
 * the embedding API's final call of the step), "open" when last never
 * came, "not reached" when first never came. No attributes without scope.
 * Sync and async. */
static void test_scope_record(void)
{
    for (int mode = 0; mode < 2; mode++) {
        char f[700], json[1200], v[300];
        const char *dir = mkdir_case(mode ? "scope_rec_async" : "scope_rec_sync");
        snprintf(json, sizeof json,
                 "{\"task\": \"statistics\", \"dump_path\": \"%s\"%s, \"statistics\": "
                 "{\"scope\": [\"Functional.a.0.forward\", \"Functional.a.1.forward\"]}}",
                 dir, mode ? ", \"async_dump\": true" : "");
        np_probe *p = NULL;
        np_error err;
        np_error_clear(&err);
        CHECK_EQ_INT(np_probe_open_json(&p, json, NULL, &err), NP_OK);
        if (!p)
            continue;
        float x[2] = {1, 2};
        np_tensor t;
        mk(&t, x, 1, 2, 0);
        static const char *const calls[3][3] = {
            {"Functional.b.0.forward", "Functional.a.0.forward", "Functional.a.1.forward"},
            {"Functional.a.0.forward", "Functional.b.0.forward", NULL},
            {"Functional.b.0.forward", NULL, NULL}};
        for (int s = 0; s < 3; s++) {
            CHECK_EQ_INT(np_probe_step_begin(p, s, &err), NP_OK);
            for (int k = 0; k < 3 && calls[s][k]; k++)
                CHECK_EQ_INT(np_probe_dump(p, calls[s][k], NP_ROLE_OUTPUT, "0", &t, &err), NP_OK);
            CHECK_EQ_INT(np_probe_step_end(p, &err), NP_OK);
        }
        CHECK_EQ_INT(np_probe_close(p, NULL, &err), NP_OK);
        np_probe_free(p);
        static const char *const want[3] = {"closed", "open", "not reached"};
        for (int s = 0; s < 3; s++) {
            attr_str(step_file(f, sizeof f, dir, s, 0), "scope", v, sizeof v);
            CHECK_MSG(strcmp(v, want[s]) == 0, "scope mode %d step %d: \"%s\", want \"%s\"", mode,
                      s, v, want[s]);
        }
        attr_str(f, "scope_first", v, sizeof v);
        CHECK_STREQ(v, "Functional.a.0.forward");
        attr_str(f, "scope_last", v, sizeof v);
        CHECK_STREQ(v, "Functional.a.1.forward");
        const char *want0[] = {"Functional.a.0.forward.output.0", "Functional.a.1.forward.output.0"};
        check_names("scope record", step_file(f, sizeof f, dir, 0, 0), want0, 2);
    }
    /* No scope: no attribute. */
    char f[700], v[64];
    const char *dir = mkdir_case("scope_rec_none");
    char d[600];
    snprintf(d, sizeof d, "%s", dir);
    np_probe_summary sum;
    CHECK_EQ_INT(run("{\"task\": \"statistics\", \"dump_path\": \"%s\"}", d, 1, 0, -1, &sum, NULL),
                 NP_OK);
    hid_t h = H5Fopen(step_file(f, sizeof f, d, 0, 0), H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK(h >= 0);
    CHECK_EQ_INT(H5Aexists(h, "scope"), 0);
    H5Fclose(h);
    (void)v;
}

int main(void)
{
    snprintf(g_tmp, sizeof g_tmp, "/tmp/np_probe_dump_XXXXXX");
    if (!mkdtemp(g_tmp))
        return 1;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    test_levels();
    test_steps_ranks();
    test_scope_list_data_mode();
    test_content();
    test_async_equals_sync();
    test_overflow();
    test_embed();
    test_loss_scale();
    test_embed_names();
    test_errors();
    test_error_after_a_step();
    test_rerun();
    test_scope_record();
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "chmod -R u+w '%s' && rm -rf '%s'", g_tmp, g_tmp);
    if (check_failures_ == 0 && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", g_tmp);
    return check_report();
}
