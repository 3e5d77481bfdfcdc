/* runtime/model_train.c - the trainer behind `nprobe train`: data, model,
 * optimizer, schedule, clipping and the fp16 loss scaler around the
 * runtime's step/forward/backward/param-grad events. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"
#include "model_train_internal.h"

void np_train_opts_default(np_train_opts *o, np_model_kind kind)
{
    memset(o, 0, sizeof *o);
    np_model_config_default(&o->model, kind);
    np_optim_config_default(&o->optim, NP_OPTIM_ADAMW);
    o->optim.lr = kind == NP_MODEL_GPT ? 3e-3 : 1e-2;
    o->batch = kind == NP_MODEL_MLP ? 64 : kind == NP_MODEL_CNN ? 32 : 8;
    o->steps = 200;
    o->warmup = -1;
    o->min_lr_frac = 0.1;
    o->grad_clip = kind == NP_MODEL_GPT ? 1.0 : 0.0;
    o->seed = 1234;
    o->scaler_growth_interval = 2000;
    o->scaler_init = 65536.0;
}

np_status np_trainer_new(np_trainer **out, np_ctx *ctx, const np_train_opts *o, np_error *err)
{
    *out = NULL;
    if (o->batch < 1)
        return np_error_set(err, NP_ERR_ARG, NULL, "batch", "expected >= 1, got %d", o->batch);
    if (o->steps < 0)
        return np_error_set(err, NP_ERR_ARG, NULL, "steps", "expected >= 0, got %lld", (long long)o->steps);
    np_trainer *tr = calloc(1, sizeof *tr);
    if (!tr)
        return np_error_set(err, NP_ERR_NOMEM, NULL, "trainer", "out of memory");
    tr->ctx = ctx;
    tr->opts = *o;
    if (tr->opts.warmup < 0)
        tr->opts.warmup = o->steps / 10;
    np_model_config mc = o->model;
    np_status st;
    if (mc.kind == NP_MODEL_GPT) {
        st = o->data_path ? np_data_open_text(&tr->data, o->data_path, mc.block_size, o->seed, err)
                          : np_data_open(&tr->data, NP_DATA_ARITH, mc.block_size, o->seed, err);
        if (!st)
            mc.vocab_size = np_data_n_classes(tr->data);
    } else if (mc.kind == NP_MODEL_MLP) {
        st = np_data_open(&tr->data, NP_DATA_POINTS, 0, o->seed, err);
        if (!st) {
            mc.in_dim = np_data_feature_dim(tr->data);
            mc.n_classes = np_data_n_classes(tr->data);
        }
    } else {
        st = np_data_open(&tr->data, NP_DATA_IMAGES, 0, o->seed, err);
        if (!st) {
            mc.image_size = np_data_feature_dim(tr->data);
            mc.n_classes = np_data_n_classes(tr->data);
        }
    }
    if (!st)
        st = np_model_new(&tr->model, ctx, &mc, o->seed, err);
    if (!st) {
        tr->opts.model = mc;
        int n = 0;
        np_tensor *const *p = np_model_params(tr->model, &n);
        st = np_optim_new(&tr->optim, &o->optim, p, n, err);
    }
    if (st) {
        np_trainer_free(tr);
        return st;
    }
    const np_ctx_opts *co = np_ctx_options(ctx);
    np_scaler_init(&tr->scaler, co->precision == NP_FLOAT16);
    if (tr->scaler.enabled) {
        tr->scaler.scale = o->scaler_init > 0 ? o->scaler_init : 65536.0;
        tr->scaler.growth_interval = o->scaler_growth_interval > 0 ? o->scaler_growth_interval : 2000;
    }
    *out = tr;
    return NP_OK;
}

void np_trainer_free(np_trainer *tr)
{
    if (!tr)
        return;
    np_optim_free(tr->optim);
    np_model_free(tr->model);
    np_data_free(tr->data);
    np_batch_free(&tr->batch);
    free(tr);
}

np_model *np_trainer_model(const np_trainer *tr) { return tr->model; }
np_dataset *np_trainer_data(const np_trainer *tr) { return tr->data; }
np_optim *np_trainer_optim(const np_trainer *tr) { return tr->optim; }
np_scaler *np_trainer_scaler(np_trainer *tr) { return &tr->scaler; }
const np_train_opts *np_trainer_opts(const np_trainer *tr) { return &tr->opts; }
int64_t np_trainer_next_step(const np_trainer *tr) { return tr->step; }

static np_status ctx_fail(np_ctx *ctx, np_error *err, const char *what)
{
    np_status st = np_ctx_status(ctx) ? np_ctx_status(ctx) : NP_ERR_INTERNAL;
    const np_error *ce = np_ctx_error(ctx);
    return np_error_set(err, st, NULL, ce && ce->key[0] ? ce->key : what, "%s",
                        ce && ce->text[0] ? ce->text : np_strerror(st));
}

np_status np_trainer_step(np_trainer *tr, np_step_result *res, np_error *err)
{
    np_ctx *ctx = tr->ctx;
    const np_train_opts *o = &tr->opts;
    memset(res, 0, sizeof *res);
    res->step = tr->step;
    np_status st = np_data_get_batch(&tr->batch, tr->data, tr->step, o->batch, err);
    if (st)
        return st;
    np_ctx_set_step(ctx, (int)tr->step);
    np_ctx_set_loss_scale(ctx, tr->scaler.enabled ? tr->scaler.scale : 1.0);
    np_ctx_step_begin(ctx);
    np_ctx_zero_grads(ctx);
    np_tensor *x = NULL, *y = NULL;
    st = np_batch_to_tensors(&x, &y, ctx, &tr->batch, err);
    if (st) {
        np_ctx_step_end(ctx);
        return st;
    }
    np_tensor *loss = np_model_loss(tr->model, x, y);
    if (!loss || np_ctx_status(ctx)) {
        st = ctx_fail(ctx, err, "forward");
        np_ctx_step_end(ctx);
        return st;
    }
    const float *lp = np_tensor_f32(loss);
    res->loss = lp ? (double)lp[0] : NAN;
    res->loss_scale = tr->scaler.enabled ? tr->scaler.scale : 1.0;
    st = tr->scaler.enabled ? np_backward_seed(ctx, loss, (float)tr->scaler.scale)
                            : np_backward(ctx, loss);
    if (st || np_ctx_status(ctx)) {
        st = ctx_fail(ctx, err, "backward");
        np_ctx_step_end(ctx);
        return st;
    }
    np_ctx_emit_param_grads(ctx);
    int n = 0;
    np_tensor *const *params = np_model_params(tr->model, &n);
    int found_inf = np_scaler_unscale(&tr->scaler, params, n);
    res->lr = np_lr_schedule(tr->step, o->optim.lr, o->optim.lr * o->min_lr_frac, o->warmup,
                             o->steps);
    if (!found_inf) {
        res->grad_norm = o->grad_clip > 0 ? np_clip_grad_norm(params, n, o->grad_clip)
                                          : np_grad_norm(params, n);
        np_optim_step(tr->optim, res->lr);
    }
    res->skipped = found_inf;
    np_scaler_update(&tr->scaler, found_inf);
    res->items = tr->batch.y_numel;
    np_ctx_step_end(ctx);
    tr->step++;
    return NP_OK;
}
