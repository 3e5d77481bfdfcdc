/* tests/model/test_model_torch.c - the runtime's GPT agrees with the same
 * GPT built in PyTorch. This program writes the runtime's weights (an HDF5
 * checkpoint), one batch, and what the runtime computed from them (each
 * block's output, the logits, the loss, every parameter gradient) to HDF5,
 * then runs tests/model/torch_gpt_check.py with $NP_PYTHON, which rebuilds
 * the GPT in torch (float64, from those weights) and compares. Two cases:
 * the untrained model (biases 0, layer norms 1/0), and the model after a
 * few AdamW steps at a high learning rate, whose biases and layer-norm
 * weights and biases are no longer 0 and 1, so a forward or backward that
 * ignored one of them would disagree. Skips (77) when torch or h5py cannot
 * be imported. */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "nprobe/model.h"
#include "nprobe/runtime.h"

static void write_ds(hid_t f, const char *name, hid_t mem_t, hid_t file_t, int ndim,
                     const int64_t *shape, const void *data)
{
    hsize_t dims[NP_MAX_DIMS];
    for (int d = 0; d < ndim; d++)
        dims[d] = (hsize_t)shape[d];
    hid_t sp = ndim ? H5Screate_simple(ndim, dims, NULL) : H5Screate(H5S_SCALAR);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t ds = H5Dcreate2(f, name, file_t, sp, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(ds >= 0);
    if (ds >= 0) {
        CHECK(H5Dwrite(ds, mem_t, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0);
        H5Dclose(ds);
    }
    H5Pclose(lcpl);
    H5Sclose(sp);
}

/* Captures the logits: input.0 of the cross_entropy forward event. */
typedef struct logits_cap {
    float *v;
    int64_t shape[NP_MAX_DIMS];
    int ndim;
} logits_cap;

static int cap_hook(const np_hook_event *e, void *user)
{
    logits_cap *c = user;
    if (!e->name || e->kind != NP_EV_API_FORWARD || strncmp(e->name, "Functional.cross_entropy.", 25) != 0)
        return 0;
    for (int i = 0; i < e->n_tensors; i++) {
        const np_hook_tensor *t = &e->tensors[i];
        if (t->role == NP_ROLE_INPUT && t->index == 0 && t->t && np_tensor_f32(t->t)) {
            free(c->v);
            c->v = malloc(sizeof(float) * (size_t)t->t->numel);
            if (c->v)
                memcpy(c->v, t->t->data, sizeof(float) * (size_t)t->t->numel);
            c->ndim = t->t->ndim;
            memcpy(c->shape, t->t->shape, sizeof c->shape);
        }
    }
    return 0;
}

static int run_cmd(const char *cmd)
{
    int st = system(cmd);
    if (st == -1 || !WIFEXITED(st))
        return -1;
    return WEXITSTATUS(st);
}

/* Trains `steps` steps, writes the checkpoint to ckpt, then runs one
 * forward/backward on batch `bidx` and writes it to ref. */
static void dump_case(const char *ckpt, const char *ref, int steps, int64_t bidx)
{
    np_train_opts o;
    np_train_opts_default(&o, NP_MODEL_GPT);
    o.model.n_layer = 2;
    o.model.n_head = 4;
    o.model.n_embd = 64;
    o.model.block_size = 16;
    o.batch = 4;
    o.optim.lr = 3e-2; /* large steps: biases and layer norms move well away from 0 and 1 */
    o.steps = 100;
    o.warmup = 1;
    np_ctx_opts co;
    np_ctx_opts_default(&co);
    co.threads = 1;
    np_ctx *ctx = NULL;
    np_trainer *tr = NULL;
    np_error err;
    np_error_clear(&err);
    CHECK_EQ_INT(np_ctx_new(&ctx, &co, &err), NP_OK);
    CHECK_EQ_INT(np_trainer_new(&tr, ctx, &o, &err), NP_OK);
    if (!tr)
        return;
    for (int s = 0; s < steps; s++) {
        np_step_result res;
        CHECK_EQ_INT(np_trainer_step(tr, &res, &err), NP_OK);
    }
    CHECK_EQ_INT(np_trainer_save(tr, ckpt, &err), NP_OK);

    np_model *m = np_trainer_model(tr);
    const np_model_config *mc = np_model_get_config(m);
    logits_cap cap = {0};
    np_ctx_set_hook(ctx, cap_hook, &cap);
    np_batch b;
    memset(&b, 0, sizeof b);
    CHECK_EQ_INT(np_data_get_batch(&b, np_trainer_data(tr), bidx, o.batch, &err), NP_OK);
    np_ctx_step_begin(ctx);
    np_ctx_zero_grads(ctx);
    np_tensor *x = NULL, *y = NULL;
    CHECK_EQ_INT(np_batch_to_tensors(&x, &y, ctx, &b, &err), NP_OK);
    np_tensor *loss = np_model_loss(m, x, y);
    CHECK(loss != NULL);
    CHECK(cap.v != NULL);
    if (!loss || !cap.v) {
        fprintf(stderr, "forward failed: %s\n", np_ctx_error(ctx)->text);
        return;
    }
    hid_t f = H5Fcreate(ref, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    write_ds(f, "idx", H5T_NATIVE_INT64, H5T_STD_I64LE, 2, b.x_shape, b.xi);
    write_ds(f, "targets", H5T_NATIVE_INT64, H5T_STD_I64LE, 2, b.y_shape, b.y);
    for (int i = 0; i < mc->n_layer; i++) {
        np_tensor *h = np_model_gpt_block_output(m, i);
        CHECK(h != NULL);
        char name[64];
        snprintf(name, sizeof name, "block/%d", i);
        if (h)
            write_ds(f, name, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, h->ndim, h->shape, np_tensor_f32(h));
    }
    write_ds(f, "logits", H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, cap.ndim, cap.shape, cap.v);
    write_ds(f, "loss", H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, 0, NULL, np_tensor_f32(loss));
    CHECK_EQ_INT(np_backward(ctx, loss), NP_OK);
    int n = 0;
    np_tensor *const *p = np_model_params(m, &n);
    for (int i = 0; i < n; i++) {
        char name[300];
        snprintf(name, sizeof name, "grad/%s", p[i]->name);
        write_ds(f, name, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, p[i]->ndim, p[i]->shape, p[i]->grad);
    }
    H5Fclose(f);
    np_ctx_step_end(ctx);
    np_ctx_set_hook(ctx, NULL, NULL);
    free(cap.v);
    np_batch_free(&b);
    np_trainer_free(tr);
    np_ctx_free(ctx);
}

int main(void)
{
    const char *py = getenv("NP_PYTHON");
    const char *src = getenv("NP_SOURCE_DIR");
    if (!py || !*py || !src || !*src)
        CHECK_SKIP("NP_PYTHON or NP_SOURCE_DIR is not set");
    /* looked up, not imported: an import of torch costs seconds (CI time) */
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "'%s' -c 'import importlib.util as u, sys; sys.exit(not all(map(u.find_spec, (\"torch\", \"h5py\"))))'"
             " >/dev/null 2>&1", py);
    if (run_cmd(cmd) != 0)
        CHECK_SKIP("%s cannot import torch and h5py", py);

    char dir[] = "/tmp/np_torch_XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    /* untrained (step 0, batch 0), and trained for 5 steps (batch 5, unseen);
     * both checked by one torch_gpt_check.py process (one torch import) */
    const struct { int steps; int64_t batch; const char *name; } cases[] = {{0, 0, "init"}, {5, 5, "trained"}};
    int len = snprintf(cmd, sizeof cmd, "'%s' '%s/tests/model/torch_gpt_check.py'", py, src);
    for (int c = 0; c < 2; c++) {
        char ckpt[512], ref[512];
        snprintf(ckpt, sizeof ckpt, "%s/%s.h5", dir, cases[c].name);
        snprintf(ref, sizeof ref, "%s/%s_runtime.h5", dir, cases[c].name);
        printf("case %s (%d training steps): %s\n", cases[c].name, cases[c].steps, ckpt);
        dump_case(ckpt, ref, cases[c].steps, cases[c].batch);
        len += snprintf(cmd + len, sizeof cmd - (size_t)len, " '%s' '%s'%s", ckpt, ref,
                        cases[c].steps ? " --trained" : "");
    }
    fflush(stdout);
    CHECK(len < (int)sizeof cmd);
    int rc = run_cmd(cmd);
    CHECK_MSG(rc == 0, "torch_gpt_check.py exited with %d", rc);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (run_cmd(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return check_report();
}
