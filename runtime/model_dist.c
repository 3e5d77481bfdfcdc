/* runtime/model_dist.c - data-parallel steps (nprobe/dist.h): the batch
 * shard of a rank, the reductions in rank order over a gather callback, the
 * Distributed.all_reduce hook points and the collective fault catalog. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_train_internal.h"

static const np_dist_fault_info dist_faults[] = { /* enum order: the size check below sees a missing one */
    {NP_DIST_FAULT_NONE, "none", "", "", 0, "no collective fault"},
    {NP_DIST_FAULT_REDUCE_BF16, "allreduce_bf16", "Distributed.all_reduce", "every rank", 0,
     "gradients all-reduced in bfloat16: each rank's gradient and every partial sum rounded to "
     "bf16 (a compression hook or a bf16 gradient bucket), ~4e-3 relative error"},
    {NP_DIST_FAULT_SHARD_DRIFT, "shard_drift", "input data", "the last rank", 0,
     "the last rank reads its shard of the next step's batch (a sampler whose epoch or offset "
     "was not set on one rank)"},
    {NP_DIST_FAULT_SKIP_PARAM, "allreduce_skip_param", "Distributed.all_reduce", "every rank", 1,
     "one parameter's gradient is left out of the all-reduce (registered after the data-parallel "
     "wrapper was built): each rank steps with its own gradient and the replicas part"},
    {NP_DIST_FAULT_WRONG_COUNT, "allreduce_wrong_count", "Distributed.all_reduce", "every rank", 0,
     "the gradient average divides by 2K (the whole world with a tensor-parallel degree of 2) "
     "instead of the data-parallel group size K"},
    {NP_DIST_FAULT_UNSYNCED_INIT, "unsynced_init", "parameters", "ranks > 0", 1,
     "ranks > 0 initialise the model from seed + rank and the parameters are never broadcast "
     "from rank 0: the replicas differ from the first step"},
    {NP_DIST_FAULT_TP_MISSING_ALLREDUCE, "tp_missing_allreduce", "Module.h.0.mlp.c_proj",
     "every rank", 1,
     "tensor parallel (--tp): the row-parallel c_proj of the first block's MLP leaves its "
     "output unreduced: each rank goes on with its partial sum"},
    {NP_DIST_FAULT_TP_SHARD_OFFSET, "tp_shard_offset", "Module.h.0.mlp.c_fc", "every rank", 1,
     "tensor parallel (--tp): the column-parallel c_fc of the first block's MLP takes its "
     "weight and bias shard at the neighbour's offset (rank r holds block r+1)"},
    {NP_DIST_FAULT_SP_NORM_GRAD_UNREDUCED, "sp_norm_grad_unreduced", "layer norms", "every rank",
     1,
     "sequence parallel (--tp --sp): the layer norms' weight and bias gradients, each TP rank's "
     "from its slice of the sequence, are not all-reduced over the TP group: the replicas of "
     "the layer norms drift apart from the first update"},
    {NP_DIST_FAULT_PP_GRAD_ACCUM_DROP, "pp_grad_accum_drop", "parameter gradients", "every rank",
     0,
     "gradient accumulation (--micro-batches M >= 2): the parameters' gradients are zeroed "
     "again after micro-batch 0's backward (a zero_grad inside the accumulation loop), so "
     "micro-batch 0's gradient is left out of the update"},
    {NP_DIST_FAULT_PP_MICROBATCH_SWAP, "pp_microbatch_swap", "Distributed.recv", "stage 1", 1,
     "pipeline parallel (--pp P --micro-batches M >= 2): the second stage takes micro-batch 1's "
     "activation as micro-batch 0's and micro-batch 0's as micro-batch 1's (receive buffers "
     "indexed out of order), so both run on the other's rows and send their gradients back "
     "under the wrong micro-batch"},
};
_Static_assert(sizeof dist_faults / sizeof dist_faults[0] == NP_DIST_FAULT_COUNT,
               "dist_faults must hold every np_dist_fault");

int np_dist_fault_count(void)
{
    return NP_DIST_FAULT_COUNT;
}

const np_dist_fault_info *np_dist_fault_get(int i)
{
    return i >= 0 && i < NP_DIST_FAULT_COUNT ? &dist_faults[i] : NULL;
}

int np_dist_fault_from_name(const char *name)
{
    if (!name)
        return -1;
    for (int i = 0; i < NP_DIST_FAULT_COUNT; i++)
        if (strcmp(name, dist_faults[i].name) == 0)
            return i;
    return -1;
}

int np_dist_skipped_param(int n)
{
    return n / 2;
}

int np_dist_active(const np_trainer *tr)
{
    /* tensor parallel and a pipeline: their collectives are model_tp.c's
     * and model_pp.c's */
    return tr->opts.dist.allgather != NULL && tr->opts.dist.tp <= 1 && tr->opts.dist.pp <= 1;
}

static int world_of(const np_trainer *tr)
{
    return tr->opts.dist.world_size > 0 ? tr->opts.dist.world_size : 1;
}

void np_dist_shard(np_batch *view, const np_trainer *tr)
{
    *view = tr->batch;
    /* beside tensor parallelism and a pipeline the data-parallel groups
     * split the batch: rank = (s * k + d) * t + tp_rank (nprobe/dist.h) */
    int t = tr->opts.dist.tp > 1 ? tr->opts.dist.tp : 1;
    int p = tr->opts.dist.pp > 1 ? tr->opts.dist.pp : 1;
    int k = world_of(tr) / (t * p), r = (tr->opts.dist.rank / t) % (k > 0 ? k : 1);
    if (!tr->opts.dist.allgather || k == 1)
        return;
    int64_t rows = tr->batch.x_shape[0] / k;
    int64_t xrow = tr->batch.x_numel / tr->batch.x_shape[0];
    int64_t yrow = tr->batch.y_numel / tr->batch.y_shape[0];
    view->x_shape[0] = rows;
    view->x_numel = rows * xrow;
    view->y_shape[0] = rows;
    view->y_numel = rows * yrow;
    if (view->xf)
        view->xf += (int64_t)r * rows * xrow;
    if (view->xi)
        view->xi += (int64_t)r * rows * xrow;
    view->y += (int64_t)r * rows * yrow;
}

void np_batch_micro_view(np_batch *v, int m, int M)
{
    int64_t rows = v->x_shape[0] / M;
    int64_t xrow = v->x_numel / v->x_shape[0], yrow = v->y_numel / v->y_shape[0];
    v->x_shape[0] = rows;
    v->x_numel = rows * xrow;
    v->y_shape[0] = rows;
    v->y_numel = rows * yrow;
    if (v->xf)
        v->xf += (int64_t)m * rows * xrow;
    if (v->xi)
        v->xi += (int64_t)m * rows * xrow;
    v->y += (int64_t)m * rows * yrow;
}

void np_dist_free_buffers(np_trainer *tr)
{
    free(tr->gather);
    free(tr->send);
    tr->gather = tr->send = NULL;
    tr->gather_cap = tr->send_cap = 0;
}

/* Gather `bytes` of tr->send from every rank into tr->gather. */
static np_status gather(np_trainer *tr, size_t bytes, np_error *err)
{
    size_t need = bytes * (size_t)world_of(tr);
    if (need > tr->gather_cap) {
        float *g = realloc(tr->gather, need);
        if (!g)
            return np_error_set(err, NP_ERR_NOMEM, NULL, "all_reduce", "out of memory (%zu bytes)", need);
        tr->gather = g;
        tr->gather_cap = need;
    }
    if (tr->opts.dist.allgather(tr->gather, tr->send, bytes, tr->opts.dist.user) != 0)
        return np_error_set(err, NP_ERR_IO, NULL, "all_reduce",
                            "step %lld: the gather of %zu bytes between %d ranks failed",
                            (long long)tr->step, bytes, world_of(tr));
    return NP_OK;
}

static np_status reserve_send(np_trainer *tr, size_t bytes, np_error *err)
{
    if (bytes <= tr->send_cap)
        return NP_OK;
    float *s = realloc(tr->send, bytes);
    if (!s)
        return np_error_set(err, NP_ERR_NOMEM, NULL, "all_reduce", "out of memory (%zu bytes)", bytes);
    tr->send = s;
    tr->send_cap = bytes;
    return NP_OK;
}

/* A step-scoped copy of `n` values (float32 or float64) shaped like `like`
 * (NULL: a scalar); NULL when the arena fails (error kept in ctx). */
static np_tensor *snapshot(np_ctx *ctx, np_dtype dt, const np_tensor *like, const void *src)
{
    np_tensor *t = np_tensor_tmp(ctx, dt, like ? like->ndim : 0, like ? like->shape : NULL);
    if (t)
        memcpy(t->data, src, np_tensor_nbytes(t));
    return t;
}

/* One Distributed.all_reduce.N.forward call (input.0 sent, output.0
 * received) as a timed pair of hook events: coll_begin before the work (its
 * before event: name and input), coll_end after it (the after event), so a
 * profiler's slice spans the gather and the reduction. */
typedef struct coll {
    char name[64], site[160];
    np_hook_tensor ts[2];
    np_hook_event ev;
    unsigned declined;
} coll;

static np_status ctx_status_err(np_trainer *tr, np_error *err);

static np_status coll_begin(np_trainer *tr, coll *c, np_dtype dt, const np_tensor *like, const void *sent,
                            const char *what, np_error *err)
{
    np_tensor *in = snapshot(tr->ctx, dt, like, sent);
    if (!in)
        return ctx_status_err(tr, err);
    snprintf(c->name, sizeof c->name, "Distributed.all_reduce.%d.forward", tr->coll_n);
    snprintf(c->site, sizeof c->site, "model_dist.c all_reduce of %s", what);
    c->ts[0] = (np_hook_tensor){NP_ROLE_INPUT, 0, NULL, in};
    memset(&c->ev, 0, sizeof c->ev);
    c->ev.kind = NP_EV_API_FORWARD;
    c->ev.name = c->name;
    c->ev.callsite = c->site;
    c->ev.tensors = c->ts;
    c->ev.n_tensors = 1;
    c->declined = np_ctx_emit_begin(tr->ctx, &c->ev);
    return NP_OK;
}

static np_status coll_end(np_trainer *tr, coll *c, np_dtype dt, const np_tensor *like, const void *got,
                          np_error *err)
{
    np_tensor *out = snapshot(tr->ctx, dt, like, got);
    if (!out)
        return ctx_status_err(tr, err);
    c->ts[1] = (np_hook_tensor){NP_ROLE_OUTPUT, 0, NULL, out};
    c->ev.n_tensors = 2;
    tr->coll_n++;
    np_ctx_emit_end(tr->ctx, &c->ev, c->declined);
    return NP_OK;
}

/* out[k] = mean over ranks of rank r's float at gather[r * stride + off + k],
 * summed in float64 in rank order; the faults change the arithmetic. */
static void reduce_mean(float *out, const float *g, size_t stride, size_t off, int64_t numel,
                        int k, np_dist_fault f)
{
    if (f == NP_DIST_FAULT_REDUCE_BF16) {
        float kb = (float)k;
        for (int64_t e = 0; e < numel; e++) {
            float acc = np_round_bf16(g[off + (size_t)e]);
            for (int r = 1; r < k; r++)
                acc = np_round_bf16(acc + np_round_bf16(g[(size_t)r * stride + off + (size_t)e]));
            out[e] = np_round_bf16(acc / kb);
        }
        return;
    }
    double div = f == NP_DIST_FAULT_WRONG_COUNT ? 2.0 * k : (double)k;
    for (int64_t e = 0; e < numel; e++) {
        double acc = 0.0;
        for (int r = 0; r < k; r++)
            acc += (double)g[(size_t)r * stride + off + (size_t)e];
        out[e] = (float)(acc / div);
    }
}

static np_status ctx_status_err(np_trainer *tr, np_error *err)
{
    const np_error *ce = np_ctx_error(tr->ctx);
    np_status st = np_ctx_status(tr->ctx) ? np_ctx_status(tr->ctx) : NP_ERR_NOMEM;
    return np_error_set(err, st, NULL, "all_reduce", "%s", ce && ce->text[0] ? ce->text : np_strerror(st));
}

static void grad_what(char *what, size_t n, const np_tensor *p)
{
    snprintf(what, n, "%s.grad", p->name ? p->name : "?");
}

np_status np_dist_reduce_grads(np_trainer *tr, double *loss, np_error *err)
{
    int n = 0;
    np_tensor *const *p = np_model_params(tr->model, &n);
    int skip = tr->dfault == NP_DIST_FAULT_SKIP_PARAM ? np_dist_skipped_param(n) : -1;
    size_t total = 1;
    for (int i = 0; i < n; i++)
        total += p[i]->grad ? (size_t)p[i]->numel : 0;
    np_status st = reserve_send(tr, total * sizeof(float), err);
    if (st)
        return st;
    size_t off = 0, first_off = 0;
    int first = -1; /* the first call: its slice holds the gather (the communication) */
    for (int i = 0; i < n; i++)
        if (p[i]->grad) {
            if (first < 0 && i != skip) {
                first = i;
                first_off = off;
            }
            memcpy(tr->send + off, p[i]->grad, (size_t)p[i]->numel * sizeof(float));
            off += (size_t)p[i]->numel;
        }
    tr->send[off] = (float)*loss;
    char what[128];
    coll c;
    if (first >= 0) {
        grad_what(what, sizeof what, p[first]);
        st = coll_begin(tr, &c, NP_FLOAT32, p[first], tr->send + first_off, what, err);
    } else {
        st = coll_begin(tr, &c, NP_FLOAT32, NULL, tr->send + off, "the loss", err);
    }
    if (st || (st = gather(tr, total * sizeof(float), err)))
        return st;
    int k = world_of(tr);
    off = 0;
    for (int i = 0; i < n; i++) {
        if (!p[i]->grad)
            continue;
        if (i != skip) {
            grad_what(what, sizeof what, p[i]);
            if (i != first && (st = coll_begin(tr, &c, NP_FLOAT32, p[i], tr->send + off, what, err)))
                return st;
            reduce_mean(p[i]->grad, tr->gather, total, off, p[i]->numel, k, tr->dfault);
            if ((st = coll_end(tr, &c, NP_FLOAT32, p[i], p[i]->grad, err)))
                return st;
        }
        off += (size_t)p[i]->numel;
    }
    float lsum;
    if (first >= 0 && (st = coll_begin(tr, &c, NP_FLOAT32, NULL, tr->send + off, "the loss", err)))
        return st;
    reduce_mean(&lsum, tr->gather, total, off, 1, k, NP_DIST_FAULT_NONE);
    if ((st = coll_end(tr, &c, NP_FLOAT32, NULL, &lsum, err)))
        return st;
    *loss = (double)lsum;
    return NP_OK;
}

np_status np_dist_reduce_flag(np_trainer *tr, int *flag, np_error *err)
{
    np_status st = reserve_send(tr, sizeof(float), err);
    if (st)
        return st;
    tr->send[0] = *flag ? 1.0f : 0.0f;
    coll c;
    if ((st = coll_begin(tr, &c, NP_FLOAT32, NULL, tr->send, "the loss scaler's found-inf flag (max)", err)) ||
        (st = gather(tr, sizeof(float), err)))
        return st;
    float mx = 0.0f;
    for (int r = 0; r < world_of(tr); r++)
        if (tr->gather[r] > mx)
            mx = tr->gather[r];
    if ((st = coll_end(tr, &c, NP_FLOAT32, NULL, &mx, err)))
        return st;
    *flag = mx != 0.0f;
    return NP_OK;
}

np_status np_dist_reduce_mean(np_trainer *tr, double *v, np_error *err)
{
    np_status st = reserve_send(tr, sizeof(double), err);
    if (st)
        return st;
    memcpy(tr->send, v, sizeof(double));
    coll c;
    if ((st = coll_begin(tr, &c, NP_FLOAT64, NULL, v, "the squared gradient norm", err)) ||
        (st = gather(tr, sizeof(double), err)))
        return st;
    int k = world_of(tr);
    double acc = 0.0, x;
    for (int r = 0; r < k; r++) {
        memcpy(&x, (const char *)tr->gather + (size_t)r * sizeof(double), sizeof x);
        acc += x;
    }
    acc /= (double)k;
    if ((st = coll_end(tr, &c, NP_FLOAT64, NULL, &acc, err)))
        return st;
    *v = acc;
    return NP_OK;
}
