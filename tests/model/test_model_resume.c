/* tests/model/test_model_resume.c - stopping a run early and resuming it
 * continues that run exactly, and a resume with other hyperparameters is
 * refused.
 *
 * Trainer: 8-step schedule, stop after 4 and save, load into a trainer with
 * the same options and run 4 more: the 8 losses (as doubles) and the final
 * weights are bit-identical to a straight 8-step run (GPT AdamW fp32, MLP
 * SGD). Loading with another steps, lr, warmup, batch, grad_clip or
 * precision fails naming the key and both values; another precision loads
 * with np_train_opts.load_other_precision.
 *
 * CLI ($NPROBE_BIN): `train --steps 8 --stop-after 4 --save H` then
 * `train --steps 8 --load H --save R` prints the same step lines (loss,
 * lr) as `train --steps 8 --save F`, and R holds bit for bit the weights
 * and optimizer state of F; `--steps 4 --load H` exits 2 naming steps 8 and
 * 4; `--stop-after 9 --steps 8` is a usage error. */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "nprobe/model.h"
#include "nprobe/runtime.h"

/* ---- trainer ---------------------------------------------------------- */

typedef struct run_out {
    double loss[16];
    int n;
    float *w;
    int64_t nw;
} run_out;

/* From `load` (or fresh), run up to `stop` of o's schedule, save to `save`. */
static int run(run_out *r, const np_train_opts *o, np_dtype prec, int64_t stop, const char *load,
               const char *save, np_error *err)
{
    memset(r, 0, sizeof *r);
    np_ctx_opts co;
    np_ctx_opts_default(&co);
    co.threads = 1;
    co.precision = prec;
    co.seed = o->seed;
    np_ctx *ctx = NULL;
    np_trainer *tr = NULL;
    np_error_clear(err);
    int ok = np_ctx_new(&ctx, &co, err) == NP_OK && np_trainer_new(&tr, ctx, o, err) == NP_OK;
    if (ok && load)
        ok = np_trainer_load(tr, load, err) == NP_OK;
    while (ok && np_trainer_next_step(tr) < stop && r->n < 16) {
        np_step_result res;
        ok = np_trainer_step(tr, &res, err) == NP_OK;
        if (ok)
            r->loss[r->n++] = res.loss;
    }
    if (ok) {
        int n = 0;
        np_tensor *const *p = np_model_params(np_trainer_model(tr), &n);
        r->nw = np_model_n_weights(np_trainer_model(tr));
        r->w = malloc((size_t)r->nw * sizeof(float));
        int64_t off = 0;
        for (int i = 0; i < n && r->w; i++) {
            memcpy(r->w + off, np_tensor_f32(p[i]), (size_t)p[i]->numel * sizeof(float));
            off += p[i]->numel;
        }
    }
    if (ok && save)
        ok = np_trainer_save(tr, save, err) == NP_OK;
    np_trainer_free(tr);
    np_ctx_free(ctx);
    return ok;
}

static void test_trainer(const char *dir, np_model_kind kind)
{
    char half[512];
    snprintf(half, sizeof half, "%s/half_%d.h5", dir, (int)kind);
    np_train_opts o;
    np_train_opts_default(&o, kind);
    if (kind == NP_MODEL_MLP) {
        double lr = o.optim.lr * 5;
        np_optim_config_default(&o.optim, NP_OPTIM_SGD);
        o.optim.lr = lr;
    }
    o.steps = 8;    /* warmup 0 (steps/10): the cosine starts at once, lr changes every step */
    o.batch = 4;
    run_out full, a, b;
    np_error err;
    CHECK(run(&full, &o, NP_FLOAT32, 8, NULL, NULL, &err));
    CHECK(run(&a, &o, NP_FLOAT32, 4, NULL, half, &err));
    CHECK(run(&b, &o, NP_FLOAT32, 8, half, NULL, &err));
    CHECK_EQ_INT(full.n, 8);
    CHECK_EQ_INT(a.n, 4);
    CHECK_EQ_INT(b.n, 4);
    if (full.n == 8 && a.n == 4 && b.n == 4) {
        CHECK_MSG(memcmp(full.loss, a.loss, 4 * sizeof(double)) == 0 &&
                      memcmp(full.loss + 4, b.loss, 4 * sizeof(double)) == 0,
                  "%s: losses of stop at 4 + resume differ from the straight run", np_model_kind_name(kind));
        for (int i = 0; i < 4; i++)
            if (full.loss[4 + i] != b.loss[i])
                fprintf(stderr, "step %d: %.17g vs %.17g\n", 4 + i, full.loss[4 + i], b.loss[i]);
        CHECK(full.nw == b.nw && full.w && b.w && memcmp(full.w, b.w, (size_t)full.nw * sizeof(float)) == 0);
    }
    free(full.w), free(a.w), free(b.w);

    /* refusals: each names the key and both values */
    struct { const char *key, *was, *now; } cases[] = {
        {"steps", "steps 8", "steps 16"}, {"lr", "lr 0.", "lr 0."},       {"warmup", "warmup 0", "warmup 2"},
        {"batch", "batch 4", "batch 5"},  {"grad_clip", "grad_clip ", "grad_clip 0.5"},
        {"precision", "'fp32'", "'bf16'"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        np_train_opts p = o;
        np_dtype prec = NP_FLOAT32;
        if (c == 0)
            p.steps = 16, p.warmup = 0;
        if (c == 1)
            p.optim.lr *= 2;
        if (c == 2)
            p.warmup = 2;
        if (c == 3)
            p.batch = 5;
        if (c == 4)
            p.grad_clip = 0.5;
        if (c == 5)
            prec = NP_BFLOAT16;
        run_out r;
        CHECK_MSG(!run(&r, &p, prec, 8, half, NULL, &err), "%s: a different %s should be refused",
                  np_model_kind_name(kind), cases[c].key);
        CHECK_STREQ(err.key, cases[c].key);
        CHECK_CONTAINS(err.text, cases[c].was);
        CHECK_CONTAINS(err.text, cases[c].now);
        CHECK_CONTAINS(err.text, "this run has");
        free(r.w);
    }
    /* load_other_precision (nprobe triage's reruns): the fp32 checkpoint
     * resumes in a bf16 run, which trains on from the saved step */
    np_train_opts p = o;
    p.load_other_precision = 1;
    run_out r;
    CHECK_MSG(run(&r, &p, NP_BFLOAT16, 5, half, NULL, &err), "%s: load_other_precision: %s",
              np_model_kind_name(kind), err.text);
    CHECK_EQ_INT(r.n, 1);
    CHECK(r.n == 1 && isfinite(r.loss[0]));
    free(r.w);
}

/* ---- CLI -------------------------------------------------------------- */

/* Runs cmd, output (stdout and stderr) into out; returns the exit status. */
static int sh(const char *cmd, char *out, size_t cap)
{
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The "step S loss L lr X" part of the line of step s (speeds cut), or "". */
static void step_line(const char *out, int s, char *buf, size_t cap)
{
    char want[32];
    snprintf(want, sizeof want, "step %d loss ", s);
    buf[0] = 0;
    const char *p = strstr(out, want);
    if (!p)
        return;
    const char *e = strstr(p, "  ");
    size_t n = e ? (size_t)(e - p) : strcspn(p, "\n");
    if (n >= cap)
        n = cap - 1;
    memcpy(buf, p, n);
    buf[n] = 0;
}

/* Every dataset of group `grp` equal, bit for bit, in files a and b. */
static int same_group(hid_t fa, hid_t fb, const char *grp, int *count)
{
    hid_t ga = H5Gopen2(fa, grp, H5P_DEFAULT), gb = H5Gopen2(fb, grp, H5P_DEFAULT);
    int ok = ga >= 0 && gb >= 0;
    hsize_t n = 0;
    if (ok)
        H5Gget_num_objs(ga, &n);
    for (hsize_t i = 0; ok && i < n; i++) {
        char name[256];
        H5Gget_objname_by_idx(ga, i, name, sizeof name);
        if (H5Gget_objtype_by_idx(ga, i) != H5G_DATASET)
            continue;
        hid_t da = H5Dopen2(ga, name, H5P_DEFAULT), db = H5Dopen2(gb, name, H5P_DEFAULT);
        ok = da >= 0 && db >= 0;
        if (ok) {
            hid_t sa = H5Dget_space(da), sb = H5Dget_space(db);
            hssize_t na = H5Sget_simple_extent_npoints(sa), nb = H5Sget_simple_extent_npoints(sb);
            ok = na == nb && na > 0;
            float *va = ok ? malloc((size_t)na * sizeof(float)) : NULL, *vb = ok ? malloc((size_t)na * sizeof(float)) : NULL;
            ok = ok && va && vb && H5Dread(da, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, va) >= 0 &&
                 H5Dread(db, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, vb) >= 0 &&
                 memcmp(va, vb, (size_t)na * sizeof(float)) == 0;
            if (!ok)
                fprintf(stderr, "%s/%s differs\n", grp, name);
            free(va), free(vb);
            H5Sclose(sa), H5Sclose(sb);
            (*count)++;
        }
        if (da >= 0)
            H5Dclose(da);
        if (db >= 0)
            H5Dclose(db);
    }
    if (ga >= 0)
        H5Gclose(ga);
    if (gb >= 0)
        H5Gclose(gb);
    return ok;
}

static void test_cli(const char *dir)
{
    const char *bin = getenv("NPROBE_BIN");
    if (!bin || !*bin || access(bin, X_OK) != 0) {
        fprintf(stderr, "NPROBE_BIN not set or not executable: the CLI part is skipped\n");
        return;
    }
    static char full[8192], a[8192], b[8192], out[8192];
    char cmd[2048];
    const char *common = "train --model gpt --steps 8 --batch 4 --threads 1";
    snprintf(cmd, sizeof cmd, "'%s' %s --save '%s/full.h5' 2>&1", bin, common, dir);
    CHECK_EQ_INT(sh(cmd, full, sizeof full), 0);
    snprintf(cmd, sizeof cmd, "'%s' %s --stop-after 4 --save '%s/half.h5' 2>&1", bin, common, dir);
    CHECK_EQ_INT(sh(cmd, a, sizeof a), 0);
    CHECK_CONTAINS(a, "done: 4 steps");
    CHECK_CONTAINS(a, "stopped at step 4 of 8");
    CHECK_CONTAINS(a, "(step 4)");
    CHECK(strstr(a, "step 4 loss") == NULL);
    snprintf(cmd, sizeof cmd, "'%s' %s --load '%s/half.h5' --save '%s/resumed.h5' 2>&1", bin, common, dir, dir);
    CHECK_EQ_INT(sh(cmd, b, sizeof b), 0);
    CHECK_CONTAINS(b, "resuming at step 4");
    CHECK(strstr(b, "step 3 loss") == NULL);
    for (int s = 0; s < 8; s++) {
        char lf[128], lr[128];
        step_line(full, s, lf, sizeof lf);
        step_line(s < 4 ? a : b, s, lr, sizeof lr);
        CHECK_MSG(lf[0] && strcmp(lf, lr) == 0, "step %d: '%s' vs '%s'", s, lf, lr);
    }
    char pf[600], pr[600];
    snprintf(pf, sizeof pf, "%s/full.h5", dir);
    snprintf(pr, sizeof pr, "%s/resumed.h5", dir);
    hid_t ff = H5Fopen(pf, H5F_ACC_RDONLY, H5P_DEFAULT), fr = H5Fopen(pr, H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK(ff >= 0 && fr >= 0);
    if (ff >= 0 && fr >= 0) {
        int count = 0;
        CHECK_MSG(same_group(ff, fr, "params", &count), "weights after 8 steps differ");
        CHECK_MSG(same_group(ff, fr, "optim/exp_avg", &count), "AdamW m differs");
        CHECK_MSG(same_group(ff, fr, "optim/exp_avg_sq", &count), "AdamW v differs");
        CHECK_MSG(count >= 3 * 28, "%d datasets compared", count);
    }
    if (ff >= 0)
        H5Fclose(ff);
    if (fr >= 0)
        H5Fclose(fr);

    /* the schedule length is part of the run: --steps 4 cannot resume it */
    snprintf(cmd, sizeof cmd, "'%s' train --model gpt --steps 16 --batch 4 --load '%s/half.h5' 2>&1", bin, dir);
    CHECK_EQ_INT(sh(cmd, out, sizeof out), 2);
    CHECK_CONTAINS(out, "steps: the checkpoint was written by a run with steps 8, this run has steps 16");
    CHECK_CONTAINS(out, "--stop-after");
    snprintf(cmd, sizeof cmd, "'%s' %s --lr 0.01 --load '%s/half.h5' 2>&1", bin, common, dir);
    CHECK_EQ_INT(sh(cmd, out, sizeof out), 2);
    CHECK_CONTAINS(out, "lr: the checkpoint was written by a run with lr 0.003, this run has lr 0.01");
    snprintf(cmd, sizeof cmd, "'%s' %s --stop-after 9 2>&1", bin, common);
    CHECK_EQ_INT(sh(cmd, out, sizeof out), 2);
    CHECK_CONTAINS(out, "--stop-after: expected at most --steps (8), got 9");
}

int main(void)
{
    char dir[] = "/tmp/np_resume_XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    test_trainer(dir, NP_MODEL_GPT);
    test_trainer(dir, NP_MODEL_MLP);
    test_cli(dir);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return check_report();
}
