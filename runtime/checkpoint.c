/* runtime/checkpoint.c - HDF5 checkpoints of a trainer (docs/CONTRACTS.md
 * "Checkpoint file"): root attributes format/format_version/model/step/seed
 * and the model configuration; /params/{name} float32 datasets with a
 * `dtype` attribute; /optim with the optimizer's step count, kind and
 * hyperparameters, one group per state slot (/optim/exp_avg/{name}, ...) and
 * the loss scaler's state; /train with the run's hyperparameters (lr, warmup,
 * batch, grad_clip, steps, min_lr_frac, precision, device, data, data_file),
 * which np_trainer_load requires to be those of the run resuming it.
 * Written to a temp file and renamed. */
#include <errno.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt_internal.h"
#include "model_internal.h"
#include "nprobe/lowp.h"
#include "nprobe/format.h"
#include "model_train_internal.h"


/* ---- datasets ----------------------------------------------------------- */

static int write_f32(hid_t grp, const char *name, const np_tensor *shape_of, const float *data,
                     const char *dtype_attr)
{
    hsize_t dims[NP_MAX_DIMS];
    for (int d = 0; d < shape_of->ndim; d++)
        dims[d] = (hsize_t)shape_of->shape[d];
    hid_t sp = shape_of->ndim ? H5Screate_simple(shape_of->ndim, dims, NULL) : H5Screate(H5S_SCALAR);
    hid_t ds = sp < 0 ? -1 : H5Dcreate2(grp, name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int ok = ds >= 0 && H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0;
    if (ok && dtype_attr)
        ok = np_h5_attr_set_str(ds, "dtype", dtype_attr) == 0;
    if (ds >= 0)
        H5Dclose(ds);
    if (sp >= 0)
        H5Sclose(sp);
    return ok ? 0 : -1;
}

/* Read dataset `name` of `grp` into data; its shape must equal t's. */
static np_status read_f32(hid_t grp, const char *name, const np_tensor *t, float *data,
                          const char *path, np_error *err)
{
    if (H5Lexists(grp, name, H5P_DEFAULT) <= 0)
        return np_error_set(err, NP_ERR_FORMAT, path, name, "missing in the checkpoint");
    int problem = 0;
    hid_t ds = np_h5_open_local(grp, name, &problem);
    if (ds < 0)
        return np_error_set(err, NP_ERR_FORMAT, path, name, "the dataset %s",
                            np_h5_dset_problem(problem));
    hid_t sp = H5Dget_space(ds);
    np_status st = NP_OK;
    hsize_t dims[NP_MAX_DIMS];
    int nd = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
    if (nd != t->ndim) {
        st = np_error_set(err, NP_ERR_FORMAT, path, name, "expected %d dimensions, the file has %d",
                          t->ndim, nd);
    } else {
        H5Sget_simple_extent_dims(sp, dims, NULL);
        for (int d = 0; d < nd && !st; d++)
            if ((int64_t)dims[d] != t->shape[d])
                st = np_error_set(err, NP_ERR_FORMAT, path, name,
                                  "expected size %lld in dimension %d, the file has %lld",
                                  (long long)t->shape[d], d, (long long)dims[d]);
        if (!st && H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
            st = np_error_set(err, NP_ERR_HDF5, path, name, "cannot read the dataset");
    }
    if (sp >= 0)
        H5Sclose(sp);
    if (ds >= 0)
        H5Dclose(ds);
    return st;
}

/* ---- run hyperparameters (/train) --------------------------------------- */

/* The hyperparameters of the run tr belongs to, as strings compared on load
 * (doubles with %.17g, so equal strings mean equal values). */
typedef struct run_hp {
    const char *key;   /* attribute of /train, also the error key */
    char val[160];
    int is_num;        /* 1: int64 or f64 attribute, 0: string */
    int is_int;
    double d;
    int64_t i;
} run_hp;

enum { N_HP = 10 };

static void run_hps(const np_trainer *tr, run_hp hp[N_HP])
{
    const np_ctx_opts *co = np_ctx_options(tr->ctx);
    const np_train_opts *o = &tr->opts;
    memset(hp, 0, sizeof(run_hp) * N_HP);
    int k = 0;
#define HP_F(name, v) hp[k].key = name, hp[k].is_num = 1, hp[k].d = (v), snprintf(hp[k].val, sizeof hp[k].val, "%.17g", hp[k].d), k++
#define HP_I(name, v) hp[k].key = name, hp[k].is_num = 1, hp[k].is_int = 1, hp[k].i = (v), snprintf(hp[k].val, sizeof hp[k].val, "%lld", (long long)hp[k].i), k++
#define HP_S(name, v) hp[k].key = name, snprintf(hp[k].val, sizeof hp[k].val, "%s", (v)), k++
    const char *prec = co->lowp != NP_LOWP_NONE         ? np_lowp_name((np_lowp)co->lowp)
                       : co->precision == NP_FLOAT32    ? "fp32"
                       : co->precision == NP_BFLOAT16 ? "bf16"
                       : co->precision == NP_FLOAT16  ? "fp16"
                                                      : np_dtype_name(co->precision);
    HP_I("steps", o->steps);   /* first: a different --steps also changes the default warmup */
    HP_F("lr", o->optim.lr);
    HP_I("warmup", o->warmup);
    HP_I("batch", o->batch);
    HP_F("grad_clip", o->grad_clip);
    HP_F("min_lr_frac", o->min_lr_frac);
    HP_S("precision", prec);
    HP_S("device", np_device_name(co->device));
    HP_S("data", np_data_kind_name(np_data_kind_of(tr->data)));
    HP_S("data_file", o->data_path ? o->data_path : "");
#undef HP_F
#undef HP_I
#undef HP_S
}

static int write_run_hps(hid_t f, const np_trainer *tr)
{
    run_hp hp[N_HP];
    run_hps(tr, hp);
    hid_t g = H5Gcreate2(f, "train", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int bad = g < 0;
    for (int i = 0; i < N_HP && !bad; i++)
        bad = hp[i].is_int ? np_h5_attr_set_i64(g, hp[i].key, hp[i].i)
              : hp[i].is_num ? np_h5_attr_set_f64(g, hp[i].key, hp[i].d)
                             : np_h5_attr_set_str(g, hp[i].key, hp[i].val);
    if (g >= 0)
        H5Gclose(g);
    return bad;
}

/* Refuse a checkpoint written by a run with other hyperparameters: resuming
 * then could not continue that run (the schedule, the batches, the
 * numerics differ). Checkpoints without /train (older files) are not checked. */
static np_status check_run_hps(hid_t f, const np_trainer *tr, const char *path, np_error *err)
{
    if (H5Lexists(f, "train", H5P_DEFAULT) <= 0)
        return NP_OK;
    int problem = 0;
    hid_t g = np_h5_open_local(f, "train", &problem);
    if (g < 0)
        return np_error_set(err, NP_ERR_FORMAT, path, "train", "group /train %s",
                            np_h5_dset_problem(problem));
    run_hp hp[N_HP];
    run_hps(tr, hp);
    np_status st = NP_OK;
    for (int i = 0; i < N_HP && !st; i++) {
        if (tr->opts.load_other_precision && !strcmp(hp[i].key, "precision"))
            continue; /* a rerun at another precision, asked for */
        char got[160];
        int bad;
        if (hp[i].is_int) {
            int64_t v = 0;
            bad = np_h5_attr_get_i64(g, hp[i].key, &v);
            snprintf(got, sizeof got, "%lld", (long long)v);
        } else if (hp[i].is_num) {
            double v = 0;
            bad = np_h5_attr_get_f64(g, hp[i].key, &v);
            snprintf(got, sizeof got, "%.17g", v);
        } else {
            bad = np_h5_attr_get_str(g, hp[i].key, got, sizeof got);
        }
        if (bad) {
            st = np_error_set(err, NP_ERR_FORMAT, path, hp[i].key, "attribute %s of /train %s",
                              hp[i].key, np_h5_attr_problem(bad));
        } else if (strcmp(got, hp[i].val) != 0) {
            char a[200], b[200];
            const char *q = hp[i].is_num ? "" : "'";
            snprintf(a, sizeof a, "%s%s%s", q, got, q);
            snprintf(b, sizeof b, "%s%s%s", q, hp[i].val, q);
            /* doubles shown as short as still tells them apart */
            if (hp[i].is_num && !hp[i].is_int) {
                double x = strtod(got, NULL), y = hp[i].d;
                for (int prec = 6; prec <= 17; prec++) {
                    snprintf(a, sizeof a, "%.*g", prec, x);
                    snprintf(b, sizeof b, "%.*g", prec, y);
                    if (strcmp(a, b) != 0)
                        break;
                }
            }
            st = np_error_set(err, NP_ERR_ARG, path, hp[i].key,
                              "the checkpoint was written by a run with %s %s, this run has %s %s; "
                              "resume with the run's own settings%s",
                              hp[i].key, a, hp[i].key, b,
                              strcmp(hp[i].key, "steps") == 0
                                  ? " (steps is the schedule length: to stop early and resume, keep "
                                    "--steps and stop with --stop-after)"
                                  : "");
        }
    }
    H5Gclose(g);
    return st;
}

/* ---- save ---------------------------------------------------------------- */

/* The checkpoint is built in memory (HDF5's core driver, no backing store)
 * and its image written to the exclusive temporary by write_image: a write
 * error (full disk, ulimit -f) is then nprobe's to report, never a failed
 * H5Fclose that leaves HDF5 a half-closed file to crash on at exit. */
static hid_t create_in_memory(const char *name)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0)
        return -1;
    hid_t f = H5Pset_fapl_core(fapl, (size_t)1 << 20, 0) < 0
                  ? -1 : H5Fcreate(name, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    return f;
}

static np_status write_image(hid_t f, int fd, const char *path, np_error *err)
{
    if (H5Fflush(f, H5F_SCOPE_GLOBAL) < 0)
        return np_error_set(err, NP_ERR_HDF5, path, NULL, "cannot write the checkpoint");
    ssize_t n = H5Fget_file_image(f, NULL, 0);
    char *buf = n > 0 ? malloc((size_t)n) : NULL;
    if (!buf || H5Fget_file_image(f, buf, (size_t)n) != n) {
        free(buf);
        return np_error_set(err, n > 0 ? NP_ERR_NOMEM : NP_ERR_HDF5, path, NULL,
                            "cannot make the checkpoint's file image");
    }
    np_status st = NP_OK;
    for (size_t done = 0; done < (size_t)n && !st;) {
        ssize_t w = write(fd, buf + done, (size_t)n - done);
        if (w > 0)
            done += (size_t)w;
        else if (w < 0 && errno == EINTR)
            continue;
        else
            st = np_error_set(err, w < 0 && (errno == ENOSPC || errno == EFBIG || errno == EDQUOT)
                                       ? NP_ERR_NOSPACE : NP_ERR_IO,
                              path, NULL, "writing the checkpoint failed: %s",
                              w < 0 ? strerror(errno) : "short write");
    }
    free(buf);
    return st;
}

/* Tensor and pipeline parallel: the whole tensors of the parameters and
 * of their optimizer slots (k = 0: the values, k = 1 + s: slot s; index
 * k * n + i; NULL where a rank's own array is whole and its own), gathered
 * by every rank in the same order before anything is written: beside
 * --tp the sharded ones over the TP group, under a pipeline every one from
 * the stage that holds it. */
static void free_wholes(float **w, int count)
{
    for (int i = 0; w && i < count; i++)
        free(w[i]);
    free(w);
}

/* Slot s of model parameter i: the optimizer's index is the stage's under
 * a pipeline (NULL: another stage's parameter). */
static float *slot_of(const np_trainer *tr, int s, int i, const np_tensor *t)
{
    int j = tr->pp ? np_pp_index(tr->pp, t) : i;
    return j < 0 ? NULL : np_optim_slot(tr->optim, s, j);
}

static np_status gather_wholes(const np_trainer *tr, float ***out, int *count, np_error *err)
{
    int n = 0, slots = np_optim_n_slots(tr->optim);
    np_tensor *const *params = np_model_params(tr->model, &n);
    *count = (slots + 1) * n;
    float **w = calloc((size_t)*count + 1, sizeof *w);
    np_status st = w ? NP_OK : np_error_set(err, NP_ERR_NOMEM, NULL, "checkpoint", "out of memory");
    for (int k = 0; k <= slots && !st; k++)
        for (int i = 0; i < n && !st; i++) {
            np_tensor whole = *params[i];
            if (np_tp_shard_dim(tr->tp, params[i], &whole) < 0 && !tr->pp)
                continue;
            int here = !tr->pp || np_pp_index(tr->pp, params[i]) >= 0;
            const float *data = !here ? NULL
                                : k ? slot_of(tr, k - 1, i, params[i]) : np_tensor_f32(params[i]);
            w[k * n + i] = malloc((size_t)(whole.numel ? whole.numel : 1) * sizeof(float));
            if (!w[k * n + i])
                st = np_error_set(err, NP_ERR_NOMEM, NULL, "checkpoint", "out of memory");
            else if (tr->pp)
                st = np_pp_gather_whole(tr->pp, tr->tp, params[i], data, w[k * n + i], err);
            else
                st = np_tp_gather_whole(tr->tp, params[i], data, w[k * n + i], err);
        }
    if (st) {
        free_wholes(w, *count);
        w = NULL;
    }
    *out = w;
    return st;
}

np_status np_trainer_save(const np_trainer *tr, const char *path, np_error *err)
{
    float **whole = NULL;
    int n_whole = 0;
    if (tr->tp || tr->pp) {
        np_status ws = gather_wholes(tr, &whole, &n_whole, err);
        if (ws || tr->opts.dist.rank != 0) { /* rank 0 writes the one-process tensors */
            free_wholes(whole, n_whole);
            return ws;
        }
    }
    /* a temporary beside `path`, created exclusively, renamed when complete */
    np_out out;
    np_status st = np_out_begin(&out, path, NULL, err);
    if (st != NP_OK) {
        free_wholes(whole, n_whole);
        return st;
    }
    const char *tmp = out.tmp;
    H5E_auto2_t old_fn;
    void *old_data;
    H5Eget_auto2(H5E_DEFAULT, &old_fn, &old_data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = create_in_memory(tmp);
    hid_t gp = -1, go = -1;
    if (f < 0) {
        st = np_error_set(err, NP_ERR_IO, path, NULL, "cannot create the checkpoint file");
        goto done;
    }
    const np_model_config *c = np_model_get_config(tr->model);
    char eps[32];
    snprintf(eps, sizeof eps, "%.17g", c->ln_eps);
    int bad = np_h5_attr_set_str(f, "format", CKPT_FORMAT) || np_h5_attr_set_i64(f, "format_version", CKPT_VERSION) ||
              np_h5_attr_set_str(f, "model", np_model_kind_name(c->kind)) ||
              np_h5_attr_set_i64(f, "step", tr->step) || np_h5_attr_set_i64(f, "seed", (int64_t)tr->opts.seed) ||
              np_h5_attr_set_str(f, "ln_eps", eps) ||
              np_h5_attr_set_str(f, "data", np_data_kind_name(np_data_kind_of(tr->data)));
    for (int i = 0; i < np_ckpt_n_settings() && !bad; i++)
        bad = np_h5_attr_set_i64(f, np_ckpt_setting_name(i), np_ckpt_setting_get(c, i));
    bad = bad || write_run_hps(f, tr);
    gp = bad ? -1 : H5Gcreate2(f, "params", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int n = 0;
    np_tensor *const *params = np_model_params(tr->model, &n);
    bad = bad || gp < 0;
    np_tensor shp;
    for (int i = 0; i < n && !bad; i++)
        bad = write_f32(gp, params[i]->name,
                        np_tp_shard_dim(tr->tp, params[i], &shp) >= 0 ? &shp : params[i],
                        whole && whole[i] ? whole[i] : np_tensor_f32(params[i]),
                        np_dtype_name(params[i]->dtype));
    go = bad ? -1 : H5Gcreate2(f, "optim", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    bad = bad || go < 0;
    const np_optim_config *oc = np_optim_get_config(tr->optim);
    if (!bad)
        bad = np_h5_attr_set_str(go, "kind", np_optim_kind_name(oc->kind)) ||
              np_h5_attr_set_i64(go, "t", np_optim_steps(tr->optim)) || np_h5_attr_set_f64(go, "lr", oc->lr) ||
              np_h5_attr_set_f64(go, "momentum", oc->momentum) || np_h5_attr_set_f64(go, "beta1", oc->beta1) ||
              np_h5_attr_set_f64(go, "beta2", oc->beta2) || np_h5_attr_set_f64(go, "eps", oc->eps) ||
              np_h5_attr_set_f64(go, "weight_decay", oc->weight_decay) ||
              np_h5_attr_set_i64(go, "scaler_enabled", tr->scaler.enabled) ||
              np_h5_attr_set_f64(go, "scaler_scale", tr->scaler.scale) ||
              np_h5_attr_set_i64(go, "scaler_good_steps", tr->scaler.good_steps) ||
              np_h5_attr_set_i64(go, "scaler_skipped", tr->scaler.skipped);
    for (int s = 0; s < np_optim_n_slots(tr->optim) && !bad; s++) {
        hid_t gs = H5Gcreate2(go, np_optim_slot_name(tr->optim, s), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        bad = gs < 0;
        for (int i = 0; i < n && !bad; i++) {
            float *wd = whole ? whole[(s + 1) * n + i] : NULL;
            bad = write_f32(gs, params[i]->name,
                            np_tp_shard_dim(tr->tp, params[i], &shp) >= 0 ? &shp : params[i],
                            wd ? wd : slot_of(tr, s, i, params[i]), NULL);
        }
        if (gs >= 0)
            H5Gclose(gs);
    }
    if (bad)
        st = np_error_set(err, NP_ERR_HDF5, path, NULL, "cannot write the checkpoint");
done:
    if (go >= 0)
        H5Gclose(go);
    if (gp >= 0)
        H5Gclose(gp);
    if (f >= 0 && !st)
        st = write_image(f, out.fd, path, err);
    if (f >= 0 && H5Fclose(f) < 0 && !st)
        st = np_error_set(err, NP_ERR_HDF5, path, NULL, "cannot close the checkpoint");
    if (!st)
        st = np_out_commit(&out, NP_OUT_SYNC, err);
    else
        np_out_abort(&out);
    H5Eset_auto2(H5E_DEFAULT, old_fn, old_data);
    free_wholes(whole, n_whole);
    return st;
}

/* Read parameter-shaped dataset `name` into data: a sharded parameter of a
 * TP run reads the whole tensor and keeps this rank's piece. */
static np_status read_param(hid_t grp, const np_trainer *tr, const np_tensor *t, float *data,
                            const char *path, np_error *err)
{
    np_tensor whole;
    if (np_tp_shard_dim(tr->tp, t, &whole) < 0)
        return read_f32(grp, t->name, t, data, path, err);
    float *buf = malloc((size_t)whole.numel * sizeof *buf);
    if (!buf)
        return np_error_set(err, NP_ERR_NOMEM, path, t->name, "out of memory");
    np_status st = read_f32(grp, t->name, &whole, buf, path, err);
    if (!st)
        np_tp_take_piece(tr->tp, t, buf, data);
    free(buf);
    return st;
}

/* ---- load ---------------------------------------------------------------- */

np_status np_trainer_load(np_trainer *tr, const char *path, np_error *err)
{
    H5E_auto2_t old_fn;
    void *old_data;
    H5Eget_auto2(H5E_DEFAULT, &old_fn, &old_data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = -1, gp = -1, go = -1;
    np_model_config fc;
    int64_t step = 0, v = 0;
    uint64_t seed = 0;
    np_status st = np_ckpt_open(&f, path, err);
    if (!st)
        st = np_ckpt_read_config(&fc, &step, &seed, f, path, err);
    const np_model_config *mc = np_model_get_config(tr->model);
    if (!st && fc.kind != mc->kind)
        st = np_error_set(err, NP_ERR_FORMAT, path, "model", "the checkpoint holds a %s, this run builds a %s",
                          np_model_kind_name(fc.kind), np_model_kind_name(mc->kind));
    for (int i = 0; i < np_ckpt_n_settings() && !st; i++)
        if (np_ckpt_setting_get(&fc, i) != np_ckpt_setting_get(mc, i))
            st = np_error_set(err, NP_ERR_FORMAT, path, np_ckpt_setting_name(i),
                              "the checkpoint has %d, this run has %d", np_ckpt_setting_get(&fc, i), np_ckpt_setting_get(mc, i));
    if (!st)
        st = check_run_hps(f, tr, path, err);
    int problem = 0;
    if (!st && (gp = np_h5_open_local(f, "params", &problem)) < 0)
        st = np_error_set(err, NP_ERR_FORMAT, path, "params", "group /params %s",
                          np_h5_dset_problem(problem));
    int n = 0;
    np_tensor *const *params = np_model_params(tr->model, &n);
    /* a pipeline stage reads its own parameters (the others' stay as built,
     * as in a run that did not load) */
    for (int i = 0; i < n && !st; i++)
        if (!tr->pp || np_pp_index(tr->pp, params[i]) >= 0)
            st = read_param(gp, tr, params[i], np_tensor_f32(params[i]), path, err);
    if (!st && (go = np_h5_open_local(f, "optim", &problem)) < 0)
        st = np_error_set(err, NP_ERR_FORMAT, path, "optim", "group /optim %s",
                          np_h5_dset_problem(problem));
    char kind[16];
    const np_optim_config *oc = np_optim_get_config(tr->optim);
    int rc = st ? 0 : np_h5_attr_get_str(go, "kind", kind, sizeof kind);
    if (!st && (rc || strcmp(kind, np_optim_kind_name(oc->kind)) != 0))
        st = np_error_set(err, NP_ERR_FORMAT, path, "optim.kind",
                          "expected optimizer state of %s (attribute kind of /optim %s)",
                          np_optim_kind_name(oc->kind), rc ? np_h5_attr_problem(rc) : "differs");
    if (!st && (rc = np_h5_attr_get_i64(go, "t", &v)) != 0)
        st = np_error_set(err, NP_ERR_FORMAT, path, "optim.t", "attribute t of /optim %s (expected an int64)",
                          np_h5_attr_problem(rc));
    if (!st)
        np_optim_set_steps(tr->optim, v);
    for (int s = 0; s < np_optim_n_slots(tr->optim) && !st; s++) {
        const char *sn = np_optim_slot_name(tr->optim, s);
        hid_t gs = H5Lexists(go, sn, H5P_DEFAULT) > 0 ? np_h5_open_local(go, sn, &problem) : -1;
        if (gs < 0) {
            st = np_error_set(err, NP_ERR_FORMAT, path, sn, "optimizer state group /optim/%s %s", sn,
                              problem == NP_H5_NOT_LOCAL ? np_h5_dset_problem(problem) : "missing");
            break;
        }
        for (int i = 0; i < n && !st; i++) {
            float *slot = slot_of(tr, s, i, params[i]);
            if (slot)
                st = read_param(gs, tr, params[i], slot, path, err);
        }
        H5Gclose(gs);
    }
    if (!st && tr->scaler.enabled) {
        double scale = 0;
        int64_t good = 0, skipped = 0, en = 0;
        if (np_h5_attr_get_i64(go, "scaler_enabled", &en) ||
            np_h5_attr_get_f64(go, "scaler_scale", &scale) ||
            np_h5_attr_get_i64(go, "scaler_good_steps", &good) ||
            np_h5_attr_get_i64(go, "scaler_skipped", &skipped)) {
            st = np_error_set(err, NP_ERR_FORMAT, path, "optim",
                              "loss-scaler attributes of /optim missing or not single numbers");
        } else if (en) {
            tr->scaler.scale = scale;
            tr->scaler.good_steps = (int)good;
            tr->scaler.skipped = skipped;
        }
    }
    if (!st)
        tr->step = step;
    if (go >= 0)
        H5Gclose(go);
    if (gp >= 0)
        H5Gclose(gp);
    if (f >= 0)
        H5Fclose(f);
    H5Eset_auto2(H5E_DEFAULT, old_fn, old_data);
    return st;
}
