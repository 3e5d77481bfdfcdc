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

/* The data-parallel options: ranks in range, a global batch that splits
 * into equal shards, each into equal micro-batches. */
static np_status dist_check(const np_train_opts *o, np_error *err)
{
    const np_dist *d = &o->dist;
    if (o->micro_batches < 0)
        return np_error_set(err, NP_ERR_ARG, NULL, "micro_batches", "expected >= 0, got %d",
                            o->micro_batches);
    if (d->allgather && (d->world_size < 1 || d->rank < 0 || d->rank >= d->world_size))
        return np_error_set(err, NP_ERR_ARG, NULL, "rank",
                            "expected 0 <= rank < world_size, got rank %d of %d", d->rank,
                            d->world_size);
    /* rank = (s * D + d) * T + t (dist.h): D data-parallel groups beside
     * the T TP ranks and the P stages */
    int T = d->tp > 1 ? d->tp : 1, P = d->pp > 1 ? d->pp : 1;
    int dp = !d->allgather ? 1 : d->world_size % (T * P) == 0 ? d->world_size / (T * P)
                                                                : d->world_size;
    if (d->allgather && o->batch % dp != 0)
        return np_error_set(err, NP_ERR_ARG, NULL, "batch",
                            "the global batch %d does not split into %d equal shards (expected "
                            "a multiple of the number of data-parallel ranks)", o->batch, dp);
    if (d->allgather && d->tp > 1 && d->pp <= 1 && d->world_size % d->tp != 0)
        return np_error_set(err, NP_ERR_ARG, NULL, "tp",
                            "tensor parallel over %d ranks needs a world of a multiple of %d "
                            "ranks (data parallel over world / %d groups), got %d", d->tp, d->tp,
                            d->tp, d->world_size);
    if (d->pp > 1 && (!d->allgather || !d->send || !d->recv || d->world_size % (T * P) != 0 ||
                      (T == 1 && d->world_size != P)))
        return np_error_set(err, NP_ERR_ARG, NULL, "pp",
                            "pipeline parallel over %d stages needs %s and point-to-point "
                            "messages, got %d rank(s)", P,
                            T > 1 ? "a world of a multiple of --tp x --pp ranks (data parallel "
                                    "over the rest)"
                                  : "exactly that many ranks (data parallel beside a pipeline "
                                    "needs --tp)",
                            d->allgather ? d->world_size : 1);
    if (d->pp > 1 && d->vp)
        return np_error_set(err, NP_ERR_ARG, NULL, "pp", "pipeline parallel with a "
                            "vocabulary-parallel embedding (--vocab-parallel) is not built");
    int mb = o->micro_batches > 1 ? o->micro_batches : 1;
    int rows = d->allgather ? o->batch / dp : o->batch;
    if (rows % mb != 0)
        return np_error_set(err, NP_ERR_ARG, NULL, "micro_batches",
                            "%d rows per %s do not split into %d equal micro-batches (expected "
                            "a batch of a multiple of %d)", rows,
                            d->allgather && dp > 1 ? "data-parallel rank" : "step", mb,
                            mb * (d->allgather ? dp : 1));
    if ((int)d->fault < 0 || d->fault >= NP_DIST_FAULT_COUNT)
        return np_error_set(err, NP_ERR_ARG, NULL, "fault", "unknown collective fault %d",
                            (int)d->fault);
    return NP_OK;
}

np_status np_trainer_new(np_trainer **out, np_ctx *ctx, const np_train_opts *o, np_error *err)
{
    *out = NULL;
    if (o->batch < 1)
        return np_error_set(err, NP_ERR_ARG, NULL, "batch", "expected >= 1, got %d", o->batch);
    if (o->steps < 0)
        return np_error_set(err, NP_ERR_ARG, NULL, "steps", "expected >= 0, got %lld", (long long)o->steps);
    np_status st = dist_check(o, err);
    if (st)
        return st;
    np_trainer *tr = calloc(1, sizeof *tr);
    if (!tr)
        return np_error_set(err, NP_ERR_NOMEM, NULL, "trainer", "out of memory");
    tr->ctx = ctx;
    tr->opts = *o;
    if (tr->opts.warmup < 0)
        tr->opts.warmup = o->steps / 10;
    np_model_config mc = o->model;
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
    const np_ctx_opts *co = np_ctx_options(ctx);
    if ((o->dist.allgather || o->dist.fault == NP_DIST_FAULT_PP_GRAD_ACCUM_DROP) &&
        co->device == NP_DEVICE_NPU_SIM)
        tr->dfault = o->dist.fault;
    /* unsynced_init: ranks > 0 build their replica from their own seed */
    uint64_t init_seed = o->seed;
    if (tr->dfault == NP_DIST_FAULT_UNSYNCED_INIT)
        init_seed += (uint64_t)o->dist.rank;
    if (!st)
        st = np_model_new(&tr->model, ctx, &mc, init_seed, err);
    if (!st && o->dist.allgather && o->dist.tp > 1)
        st = np_tp_setup(tr, err);
    if (!st && o->dist.allgather && o->dist.tp > 1 && o->dist.vp)
        st = np_vocab_setup(tr, err);
    if (!st && o->dist.allgather && o->dist.pp > 1)
        st = np_pp_setup(tr, err);
    if (!st) {
        tr->opts.model = mc;
        int n = 0;
        np_tensor *const *p = tr->pp ? np_pp_params(tr->pp, &n) : np_model_params(tr->model, &n);
        st = np_optim_new(&tr->optim, &o->optim, p, n, err);
    }
    if (st) {
        np_trainer_free(tr);
        return st;
    }
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
    np_dist_free_buffers(tr);
    np_tp_free(tr->tp);
    np_pp_free(tr->pp);
    free(tr);
}

np_model *np_trainer_model(const np_trainer *tr) { return tr->model; }
np_dataset *np_trainer_data(const np_trainer *tr) { return tr->data; }
np_optim *np_trainer_optim(const np_trainer *tr) { return tr->optim; }
np_scaler *np_trainer_scaler(np_trainer *tr) { return &tr->scaler; }
const np_train_opts *np_trainer_opts(const np_trainer *tr) { return &tr->opts; }
int64_t np_trainer_next_step(const np_trainer *tr) { return tr->step; }

void np_trainer_set_watch(np_trainer *tr, np_train_watch_fn fn, void *user)
{
    tr->watch = fn;
    tr->watch_user = fn ? user : NULL;
}

void np_trainer_set_coll_watch(np_trainer *tr, np_train_coll_fn fn, void *user)
{
    if (tr->tp)
        np_tp_set_coll_watch(tr->tp, fn, user);
}

static void watch(np_trainer *tr, np_train_point pt, const np_step_result *res)
{
    if (tr->watch)
        (void)tr->watch(pt, tr, res, tr->watch_user);
}

static np_status ctx_fail(np_ctx *ctx, np_error *err, const char *what)
{
    np_status st = np_ctx_status(ctx) ? np_ctx_status(ctx) : NP_ERR_INTERNAL;
    const np_error *ce = np_ctx_error(ctx);
    return np_error_set(err, st, NULL, ce && ce->key[0] ? ce->key : what, "%s",
                        ce && ce->text[0] ? ce->text : np_strerror(st));
}

/* Forward and backward of this rank's shard of tr->batch; *loss the local
 * mean. With micro-batches (gradient accumulation) the shard's rows in M
 * equal parts, each forward and backward in turn, its backward seeded with
 * 1/M (the gradients of the shard's mean loss add up over them); *loss the
 * mean of their losses, summed in float64. */
static np_status forward_backward(np_trainer *tr, double *loss, np_error *err)
{
    np_ctx *ctx = tr->ctx;
    np_status st;
    np_ctx_set_step(ctx, (int)tr->step);
    np_ctx_set_loss_scale(ctx, tr->scaler.enabled ? tr->scaler.scale : 1.0);
    np_ctx_step_begin(ctx);
    np_ctx_zero_grads(ctx);
    tr->coll_n = 0;
    np_batch shard;
    np_dist_shard(&shard, tr);
    int M = tr->opts.micro_batches > 1 ? tr->opts.micro_batches : 1;
    /* data parallel beside tensor parallel: each group's backward seeded
     * with 1/dp, its gradients the group's share of the whole batch's */
    double seed = (tr->scaler.enabled ? tr->scaler.scale : 1.0) / np_tp_dp_size(tr->tp) / M;
    if (tr->pp)
        return np_pp_forward_backward(tr, &shard, M, seed, loss, err);
    double sum = 0.0;
    for (int m = 0; m < M; m++) {
        np_batch part = shard;
        if (M > 1) {
            np_batch_micro_view(&part, m, M);
            np_ctx_set_micro_batch(ctx, m);
        }
        np_tensor *x = NULL, *y = NULL;
        if ((st = np_batch_to_tensors(&x, &y, ctx, &part, err)))
            return st;
        np_tensor *l = np_model_loss(tr->model, x, y);
        if (!l || np_ctx_status(ctx))
            return ctx_fail(ctx, err, "forward");
        const float *lp = np_tensor_f32(l);
        sum += lp ? (double)lp[0] : NAN;
        st = np_backward_seed(ctx, l, (float)seed);
        if (st || np_ctx_status(ctx))
            return ctx_fail(ctx, err, "backward");
        /* pp_grad_accum_drop: a zero_grad after the first micro-batch */
        if (m == 0 && M > 1 && tr->dfault == NP_DIST_FAULT_PP_GRAD_ACCUM_DROP)
            np_ctx_zero_grads(ctx);
    }
    np_ctx_set_micro_batch(ctx, -1);
    *loss = sum / M;
    return NP_OK;
}

/* Global gradient norm; data-parallel: the mean over ranks of the squared
 * norms (equal on every rank when the replicas agree), then clipping with it
 * (np_clip_grad_norm's arithmetic). */
static np_status clip_norm(np_trainer *tr, np_tensor *const *params, int n, double *norm,
                           np_error *err)
{
    const np_train_opts *o = &tr->opts;
    if (tr->pp)
        return np_pp_grad_norm(tr->pp, tr->tp, params, n, o->grad_clip, norm, err);
    if (tr->tp)
        return np_tp_grad_norm(tr->tp, params, n, o->grad_clip, norm, err);
    if (!np_dist_active(tr)) {
        *norm = o->grad_clip > 0 ? np_clip_grad_norm(params, n, o->grad_clip)
                                 : np_grad_norm(params, n);
        return NP_OK;
    }
    double sq = 0.0; /* np_grad_norm's sum before its square root */
    for (int i = 0; i < n; i++) {
        double s = 0.0;
        for (int64_t k = 0; params[i]->grad && k < params[i]->numel; k++)
            s += (double)params[i]->grad[k] * (double)params[i]->grad[k];
        sq += s;
    }
    np_status st = np_dist_reduce_mean(tr, &sq, err);
    if (st)
        return st;
    *norm = sqrt(sq);
    double coef = o->grad_clip / (*norm + 1e-6);
    if (o->grad_clip > 0 && coef < 1.0) {
        float c = (float)coef;
        for (int i = 0; i < n; i++)
            for (int64_t k = 0; params[i]->grad && k < params[i]->numel; k++)
                params[i]->grad[k] *= c;
    }
    return NP_OK;
}

/* Reduce (data-parallel), unscale, clip, update or skip. */
static np_status update(np_trainer *tr, np_step_result *res, np_error *err)
{
    const np_train_opts *o = &tr->opts;
    watch(tr, NP_TRAIN_BACKWARD_END, res);
    np_status st = np_dist_active(tr) ? np_dist_reduce_grads(tr, &res->loss, err) : NP_OK;
    int n = 0;
    np_tensor *const *params = np_model_params(tr->model, &n);
    if (!st && tr->tp) { /* a pipeline's stage reduces its own parameters */
        int ns = n;
        np_tensor *const *ps = tr->pp ? np_pp_params(tr->pp, &ns) : params;
        st = np_tp_dp_reduce(tr->tp, ps, ns, &res->loss, tr->dfault, err);
    }
    if (!st && tr->tp)
        st = np_tp_sync_grads(tr->tp, err);
    if (!st && tr->pp)
        st = np_pp_sync_grads(tr->pp, err);
    if (st)
        return st;
    np_ctx_emit_param_grads(tr->ctx);
    int found_inf = np_scaler_unscale(&tr->scaler, params, n);
    if (tr->scaler.enabled && np_dist_active(tr) && (st = np_dist_reduce_flag(tr, &found_inf, err)))
        return st;
    if (tr->scaler.enabled && tr->pp && (st = np_pp_reduce_flag(tr->pp, &found_inf, err)))
        return st;
    res->lr = np_lr_schedule(tr->step, o->optim.lr, o->optim.lr * o->min_lr_frac, o->warmup,
                             o->steps);
    if (!found_inf) {
        if ((st = clip_norm(tr, params, n, &res->grad_norm, err)))
            return st;
        watch(tr, NP_TRAIN_UPDATE_BEGIN, res);
        np_optim_step(tr->optim, res->lr);
    }
    res->skipped = found_inf;
    np_scaler_update(&tr->scaler, found_inf);
    return NP_OK;
}

np_status np_trainer_step(np_trainer *tr, np_step_result *res, np_error *err)
{
    memset(res, 0, sizeof *res);
    res->step = tr->step;
    res->loss_scale = tr->scaler.enabled ? tr->scaler.scale : 1.0;
    /* shard_drift: the last rank reads the next step's batch */
    const np_dist *d = &tr->opts.dist;
    int64_t index = tr->step;
    if (tr->dfault == NP_DIST_FAULT_SHARD_DRIFT && d->rank == d->world_size - 1)
        index++;
    np_status st = np_data_get_batch(&tr->batch, tr->data, index, tr->opts.batch, err);
    if (st)
        return st;
    st = forward_backward(tr, &res->loss, err);
    if (!st)
        st = update(tr, res, err);
    if (!st) {
        res->items = tr->batch.y_numel;
        watch(tr, NP_TRAIN_UPDATE_END, res);
    }
    np_ctx_step_end(tr->ctx);
    if (!st)
        tr->step++;
    return st;
}
