/* runtime/model_pp.c - pipeline parallelism for the GPT (nprobe/dist.h
 * np_dist.pp, docs/RUNTIME.md "Pipeline parallel"). Rank s of P is stage
 * s: blocks [s*L/P, (s+1)*L/P) of the L blocks, the embeddings on stage 0,
 * ln_f, the lm head (tied to the word embedding) and the loss on stage
 * P-1. Every rank builds the whole model from the seed, as one process
 * does, and keeps its stage's parameters (the others' gradients are
 * dropped, the optimizer steps its own); the word embedding's weight lives
 * on the first and the last stage, its two gradients summed after the
 * backward (float64, rounded once: the one-process sum of the two
 * contributions, bit for bit).
 *
 * The schedule is GPipe's: the M micro-batches' forwards one after the
 * other, each stage sending its output (Distributed.send.K.forward, input
 * 0) to the next, which receives it (Distributed.recv.K.forward, output 0:
 * a leaf that requires grad); then the M backwards in micro-batch order,
 * each over its micro-batch's range of the tape, the gradient of a stage's
 * input sent back (Distributed.recv.K.backward, input 0) to the stage
 * before, which seeds its output with it (Distributed.send.K.backward,
 * output 0). K = b + m(P-1) for boundary b (between stages b and b+1) and
 * micro-batch m, so micro-batch 0's calls are named send.b / recv.b.
 *
 * Names: every other call keeps its one-process name. The blocks keep
 * their global index (h.N); the API counters (Functional.linear.N, ...)
 * arrive with micro-batch 0's activation (the sending stage's counters
 * after its forward of micro-batch 0), so stage s counts on from where one
 * process would be; its later micro-batches count on from there, and the
 * dump's micro-batch rule (docs/FORMAT.md) maps them back.
 *
 * Reductions: the loss is the last stage's (the mean of the micro-batches'
 * losses in float64), sent to every rank; the gradient norm sums each
 * parameter's squares where it lives and adds them in the model's
 * parameter order, np_grad_norm's arithmetic.
 *
 * Beside tensor parallelism (--tp T, model_tp.c) each stage is D x T
 * ranks, rank = (s * D + d) * T + t (Megatron's order: tp fastest, then
 * dp, pp slowest; nprobe/dist.h): the TP group of a stage is T contiguous
 * ranks, and each rank sends to and receives from the rank at its own
 * place (d, t) in the next and the previous stage (rank -+ D x T). The
 * boundary's activation is whole on every TP rank (its copies the same),
 * or under sequence parallelism this TP rank's positions; each place
 * sends its own, so no split or gather is needed at the boundary. The TP
 * collectives of a stage run inside its forward and backward while the
 * other stages wait for messages: they are messages inside the group
 * (model_tp.c group_gather), not world gathers. After the backward the
 * data-parallel sum runs over each stage's D groups (np_tp_dp_reduce),
 * then the tied embedding's two gradients at each place, and the norm
 * counts a TP shard on every TP rank and a whole parameter once.
 *
 * Checkpoints hold the one-process tensors under the one-process names
 * (checkpoint.c): at a save every rank gathers each parameter and
 * optimizer slot from the stage that holds it (its first data-parallel
 * group's TP pieces assembled; np_pp_gather_whole, a world gather in the
 * model's parameter order) and world rank 0 writes them; at a load each
 * rank reads its stage's parameters and their optimizer state (its TP
 * piece of them), the others' left as built. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"
#include "model_train_internal.h"
#include "nprobe/format.h"
#include "nprobe/hook.h"
#include "rt_internal.h"

enum { TAG_ACT = 7101, TAG_GRAD = 7102 };

/* A received activation message: its dtype and the sender's API counters
 * (after its forward of the micro-batch), then the values. */
typedef struct pp_head {
    int32_t dtype;
    int32_t counters[NP_OP_COUNT];
} pp_head;

struct np_pp {
    int size, stage;           /* P, this rank's stage */
    int world, stride, inner;  /* all ranks; a stage's (D x T); this rank's place in its stage */
    int l0, l1;                /* its blocks */
    int n_layer;               /* the model's */
    int seq_div;               /* sequence parallel: a boundary activation holds T/seq_div
                                * positions (else 1) */
    np_dist d;                 /* the callbacks */
    np_dist_fault fault;
    np_tensor **params;        /* this stage's parameters (the optimizer's) */
    int n_params;
    np_tensor *tied;           /* the word embedding's weight: stages 0 and P-1 both */
    /* a step's micro-batches */
    int cap_m;
    np_tensor **out;           /* the stage's output (the loss on the last stage) */
    np_tensor **in;            /* the received input (stages > 0) */
    int *lo, *hi;              /* their tape ranges */
    char **stash;              /* received activation messages (in arrival order) */
    int n_stash;
    void *buf;                 /* messages and gathers */
    size_t cap;
};

/* ---- set-up --------------------------------------------------------------------- */

/* 1 when parameter `name` lives on stage s of P (blocks [l0, l1)). */
static int on_stage(const char *name, int s, int P, int l0, int l1)
{
    if (!strncmp(name, "wte.", 4))
        return s == 0 || s == P - 1;
    if (!strncmp(name, "wpe.", 4))
        return s == 0;
    if (!strncmp(name, "ln_f.", 5))
        return s == P - 1;
    if (!strncmp(name, "h.", 2)) {
        int n = atoi(name + 2);
        return n >= l0 && n < l1;
    }
    return 1;
}

np_status np_pp_setup(np_trainer *tr, np_error *err)
{
    const np_dist *d = &tr->opts.dist;
    const np_model_config *c = &tr->model->cfg;
    int P = d->pp;
    if (c->kind != NP_MODEL_GPT || c->n_layer < P)
        return np_error_set(err, NP_ERR_ARG, NULL, "pp",
                            "pipeline parallel: the gpt model only, with at least --pp %d blocks "
                            "(--layers), got %d", P, c->kind == NP_MODEL_GPT ? c->n_layer : 0);
    np_pp *pp = calloc(1, sizeof *pp);
    if (!pp)
        return np_error_set(err, NP_ERR_NOMEM, NULL, "pp", "out of memory");
    tr->pp = pp;
    pp->size = P;
    /* rank = (s * D + d) * T + t (nprobe/dist.h): a stage is D x T ranks, and
     * rank k's neighbours in the pipeline are k -+ D x T */
    pp->world = d->world_size;
    pp->stride = d->world_size / P;
    pp->inner = d->rank % pp->stride;
    pp->stage = d->rank / pp->stride;
    pp->seq_div = d->tp > 1 && d->sp ? d->tp : 1;
    pp->n_layer = c->n_layer;
    pp->l0 = (int)((int64_t)pp->stage * c->n_layer / P);
    pp->l1 = (int)((int64_t)(pp->stage + 1) * c->n_layer / P);
    pp->d = *d;
    pp->fault = tr->dfault;
    int n = 0;
    np_tensor *const *p = np_model_params(tr->model, &n);
    pp->params = calloc((size_t)n + 1, sizeof *pp->params);
    if (!pp->params)
        return np_error_set(err, NP_ERR_NOMEM, NULL, "pp", "out of memory");
    for (int i = 0; i < n; i++) {
        if (on_stage(p[i]->name ? p[i]->name : "", pp->stage, P, pp->l0, pp->l1)) {
            pp->params[pp->n_params++] = p[i];
            continue;
        }
        free(p[i]->grad); /* another stage's: no gradient here, no update, no dump row */
        p[i]->grad = NULL;
    }
    pp->tied = tr->model->wte.weight;
    return NP_OK;
}

void np_pp_free(np_pp *pp)
{
    if (!pp)
        return;
    for (int i = 0; i < pp->n_stash; i++)
        free(pp->stash[i]);
    free(pp->stash);
    free(pp->params);
    free(pp->out);
    free(pp->in);
    free(pp->lo);
    free(pp->hi);
    free(pp->buf);
    free(pp);
}

np_tensor *const *np_pp_params(const np_pp *pp, int *n)
{
    *n = pp->n_params;
    return pp->params;
}

/* Room for `bytes` in pp->buf. */
static void *reserve(np_pp *pp, size_t bytes)
{
    if (bytes > pp->cap) {
        void *b = realloc(pp->buf, bytes);
        if (!b)
            return NULL;
        pp->buf = b;
        pp->cap = bytes;
    }
    return pp->buf;
}

/* Room for M micro-batches. */
static int reserve_m(np_pp *pp, int M)
{
    if (M <= pp->cap_m)
        return 0;
    np_tensor **o = realloc(pp->out, (size_t)M * sizeof *o);
    if (o)
        pp->out = o;
    np_tensor **in = realloc(pp->in, (size_t)M * sizeof *in);
    if (in)
        pp->in = in;
    int *lo = realloc(pp->lo, (size_t)M * sizeof *lo);
    if (lo)
        pp->lo = lo;
    int *hi = realloc(pp->hi, (size_t)M * sizeof *hi);
    if (hi)
        pp->hi = hi;
    char **st = realloc(pp->stash, (size_t)M * sizeof *st);
    if (st)
        pp->stash = st;
    if (!o || !in || !lo || !hi || !st)
        return -1;
    pp->cap_m = M;
    return 0;
}

/* ---- the boundary's calls --------------------------------------------------------- */

/* Distributed.{send,recv}.K.{forward,backward} as a pair of hook events
 * around the transfer (a profiler's slice spans it): the before event with
 * what is known before it, the after event with the tensor. */
typedef struct p2p_call {
    char name[64], site[96];
    np_hook_tensor ts[1];
    np_hook_event ev;
    unsigned declined;
} p2p_call;

static void p2p_begin(np_ctx *ctx, p2p_call *c, const char *op, int k, int bwd, int peer,
                      np_tensor *in)
{
    snprintf(c->name, sizeof c->name, "Distributed.%s.%d.%s", op, k, bwd ? "backward" : "forward");
    snprintf(c->site, sizeof c->site, "model_pp.c %s %s stage %d", op,
             op[0] == 's' ? "to" : "from", peer);
    memset(&c->ev, 0, sizeof c->ev);
    c->ev.kind = bwd ? NP_EV_API_BACKWARD : NP_EV_API_FORWARD;
    c->ev.name = c->name;
    c->ev.callsite = c->site;
    c->ev.tensors = c->ts;
    c->ts[0] = (np_hook_tensor){NP_ROLE_INPUT, 0, NULL, in}; /* what is sent */
    c->ev.n_tensors = in ? 1 : 0;
    c->declined = np_ctx_emit_begin(ctx, &c->ev);
}

static void p2p_end(np_ctx *ctx, p2p_call *c, np_role role, np_tensor *t)
{
    c->ts[0] = (np_hook_tensor){role, 0, NULL, t};
    c->ev.n_tensors = t ? 1 : 0;
    np_ctx_emit_end(ctx, &c->ev, c->declined);
}

static np_status io_fail(np_trainer *tr, const char *what, int peer, int m, np_error *err)
{
    return np_error_set(err, NP_ERR_IO, NULL, "pp",
                        "step %lld: pipeline stage %d: the %s stage %d of micro-batch %d failed",
                        (long long)tr->step, tr->pp->stage, what, peer, m);
}

static np_status ctx_err(np_ctx *ctx, np_error *err, const char *what)
{
    np_status st = np_ctx_status(ctx) ? np_ctx_status(ctx) : NP_ERR_INTERNAL;
    const np_error *ce = np_ctx_error(ctx);
    return np_error_set(err, st, NULL, ce && ce->key[0] ? ce->key : what, "%s",
                        ce && ce->text[0] ? ce->text : np_strerror(st));
}

/* The rank at this rank's place in the stage `dir` (+1, -1) after this one. */
static int peer_rank(const np_pp *pp, int dir)
{
    return (pp->stage + dir) * pp->stride + pp->inner;
}

/* Send stage output x of micro-batch m to the next stage. */
static np_status send_act(np_trainer *tr, np_tensor *x, int m, np_error *err)
{
    np_pp *pp = tr->pp;
    np_ctx *ctx = tr->ctx;
    size_t bytes = sizeof(pp_head) + (size_t)x->numel * sizeof(float);
    char *msg = reserve(pp, bytes);
    if (!msg)
        return np_error_set(err, NP_ERR_NOMEM, NULL, "pp", "out of memory");
    pp_head h;
    memset(&h, 0, sizeof h);
    h.dtype = (int32_t)x->dtype;
    for (int i = 0; i < NP_OP_COUNT; i++)
        h.counters[i] = ctx->counters[i];
    memcpy(msg, &h, sizeof h);
    memcpy(msg + sizeof h, np_tensor_f32(x), (size_t)x->numel * sizeof(float));
    p2p_call c;
    p2p_begin(ctx, &c, "send", pp->stage + m * (pp->size - 1), 0, pp->stage + 1, x);
    if (pp->d.send(msg, bytes, peer_rank(pp, 1), TAG_ACT, pp->d.user) != 0)
        return io_fail(tr, "send to", pp->stage + 1, m, err);
    p2p_end(ctx, &c, NP_ROLE_INPUT, x);
    return NP_OK;
}

/* The message of micro-batch m from the stage before (`bytes` long): the
 * messages arrive in micro-batch order and wait in the stash until taken.
 * pp_microbatch_swap: stage 1 takes micro-batch 1's as 0's and 0's as 1's. */
static const char *take_act(np_trainer *tr, int m, size_t bytes, np_error *err)
{
    np_pp *pp = tr->pp;
    int want = m;
    if (pp->fault == NP_DIST_FAULT_PP_MICROBATCH_SWAP && pp->stage == 1 && m < 2 &&
        tr->opts.micro_batches >= 2)
        want = 1 - m;
    while (pp->n_stash <= want) {
        char *b = malloc(bytes);
        if (!b) {
            np_error_set(err, NP_ERR_NOMEM, NULL, "pp", "out of memory");
            return NULL;
        }
        if (pp->d.recv(b, bytes, peer_rank(pp, -1), TAG_ACT, pp->d.user) != 0) {
            free(b);
            io_fail(tr, "receive from", pp->stage - 1, pp->n_stash, err);
            return NULL;
        }
        pp->stash[pp->n_stash++] = b;
    }
    return pp->stash[want];
}

/* Stage input of micro-batch m (B, T, C; sequence parallel: this rank's
 * T/seq_div positions) from the same place in the stage before: a leaf
 * that requires grad; micro-batch 0's brings the API counters. */
static np_tensor *recv_act(np_trainer *tr, int m, int64_t B, int64_t T, np_error *err)
{
    np_pp *pp = tr->pp;
    np_ctx *ctx = tr->ctx;
    int64_t shape[3] = {B, T / pp->seq_div, tr->model->cfg.n_embd};
    size_t numel = (size_t)(B * shape[1] * shape[2]);
    p2p_call c;
    p2p_begin(ctx, &c, "recv", pp->stage - 1 + m * (pp->size - 1), 0, pp->stage - 1, NULL);
    const char *msg = take_act(tr, m, sizeof(pp_head) + numel * sizeof(float), err);
    if (!msg)
        return NULL;
    pp_head h;
    if (m == 0) { /* the first message's (micro-batch 0's, whatever the swap takes) */
        memcpy(&h, pp->stash[0], sizeof h);
        for (int i = 0; i < NP_OP_COUNT; i++)
            ctx->counters[i] = h.counters[i];
    }
    memcpy(&h, msg, sizeof h);
    np_tensor *x = np_tensor_tmp(ctx, (np_dtype)h.dtype, 3, shape);
    if (!x || !np_tensor_f32(x) || np_tensor_set_requires_grad(ctx, x, 1) != NP_OK) {
        if (!np_ctx_status(ctx))
            np_error_set(err, NP_ERR_FORMAT, NULL, "pp", "pipeline: a received activation "
                         "of dtype %d (expected a floating one)", (int)h.dtype);
        else
            ctx_err(ctx, err, "pp");
        return NULL;
    }
    memcpy(np_tensor_f32(x), msg + sizeof h, numel * sizeof(float));
    p2p_end(ctx, &c, NP_ROLE_OUTPUT, x);
    return x;
}

/* ---- the schedule ---------------------------------------------------------------- */

/* Forward of micro-batch m (rows `part`) through this stage: its output
 * (the loss on the last stage, whose value is added to *sum). */
static np_status stage_forward(np_trainer *tr, const np_batch *part, int m, double *sum,
                               np_error *err)
{
    np_pp *pp = tr->pp;
    np_ctx *ctx = tr->ctx;
    np_model *md = tr->model;
    int first = pp->stage == 0, last = pp->stage == pp->size - 1;
    np_tensor *x = NULL, *y = NULL, *h;
    np_status st;
    pp->lo[m] = ctx->n_nodes;
    pp->in[m] = NULL;
    if ((first || last) && (st = np_batch_to_tensors(&x, &y, ctx, part, err)))
        return st;
    for (int i = pp->l0; i < pp->l1; i++)
        md->h[i].out = NULL;
    if (first) {
        h = np_model_gpt_embed(md, x);
    } else {
        h = pp->in[m] = recv_act(tr, m, part->x_shape[0], part->x_shape[1], err);
        if (!h)
            return err->status ? err->status : ctx_err(ctx, err, "pp");
    }
    h = np_model_gpt_blocks(md, h, pp->l0, pp->l1);
    if (last) {
        h = np_model_loss_of(md, np_model_gpt_head(md, h), y);
        const float *lp = h ? np_tensor_f32(h) : NULL;
        *sum += lp ? (double)lp[0] : NAN;
    }
    if (!h || np_ctx_status(ctx))
        return ctx_err(ctx, err, "forward");
    if (!last && (st = send_act(tr, h, m, err)))
        return st;
    pp->out[m] = h;
    pp->hi[m] = ctx->n_nodes;
    return NP_OK;
}

/* Backward of micro-batch m: the last stage's loss seeded with `seed`, an
 * earlier stage's output with the gradient the next stage sends; then the
 * gradient of this stage's input sent to the stage before. */
static np_status stage_backward(np_trainer *tr, int m, double seed, np_error *err)
{
    np_pp *pp = tr->pp;
    np_ctx *ctx = tr->ctx;
    np_tensor *o = pp->out[m];
    int P = pp->size;
    const float *g = NULL;
    if (pp->stage < P - 1) {
        size_t bytes = (size_t)o->numel * sizeof(float);
        float *gb = rt_alloc(ctx, bytes ? bytes : 1);
        if (!gb)
            return ctx_err(ctx, err, "pp");
        p2p_call c;
        p2p_begin(ctx, &c, "send", pp->stage + m * (P - 1), 1, pp->stage + 1, NULL);
        if (pp->d.recv(gb, bytes, peer_rank(pp, 1), TAG_GRAD, pp->d.user) != 0)
            return io_fail(tr, "gradient from", pp->stage + 1, m, err);
        np_tensor *gt = rt_wrap(ctx, o, gb, NP_FLOAT32);
        if (!gt)
            return ctx_err(ctx, err, "pp");
        p2p_end(ctx, &c, NP_ROLE_OUTPUT, gt);
        g = gb;
    }
    if (rt_backward_range(ctx, o, g, (float)seed, pp->lo[m], pp->hi[m]) != NP_OK)
        return ctx_err(ctx, err, "backward");
    if (pp->stage == 0)
        return NP_OK;
    np_tensor *x = pp->in[m];
    size_t bytes = (size_t)x->numel * sizeof(float);
    float *gx = x->grad;
    if (!gx && !(gx = rt_calloc(ctx, bytes ? bytes : 1)))
        return ctx_err(ctx, err, "pp");
    np_tensor *gt = rt_wrap(ctx, x, gx, NP_FLOAT32);
    if (!gt)
        return ctx_err(ctx, err, "pp");
    p2p_call c;
    p2p_begin(ctx, &c, "recv", pp->stage - 1 + m * (P - 1), 1, pp->stage - 1, gt);
    if (pp->d.send(gx, bytes, peer_rank(pp, -1), TAG_GRAD, pp->d.user) != 0)
        return io_fail(tr, "gradient to", pp->stage - 1, m, err);
    p2p_end(ctx, &c, NP_ROLE_INPUT, gt);
    return NP_OK;
}

/* The last stage's value at this rank's place in the stage (its
 * data-parallel group's), on every rank of the place (a gather). */
static np_status from_last(np_pp *pp, double *v, np_error *err)
{
    double *all = reserve(pp, sizeof(double) * (size_t)pp->world);
    if (!all)
        return np_error_set(err, NP_ERR_NOMEM, NULL, "pp", "out of memory");
    double mine = *v;
    if (pp->d.allgather(all, &mine, sizeof mine, pp->d.user) != 0)
        return np_error_set(err, NP_ERR_IO, NULL, "pp", "pipeline: the gather of the loss failed");
    *v = all[(pp->size - 1) * pp->stride + pp->inner];
    return NP_OK;
}

np_status np_pp_forward_backward(np_trainer *tr, const np_batch *shard, int M, double seed,
                                 double *loss, np_error *err)
{
    np_pp *pp = tr->pp;
    np_ctx *ctx = tr->ctx;
    np_status st = NP_OK;
    if (reserve_m(pp, M) != 0)
        return np_error_set(err, NP_ERR_NOMEM, NULL, "pp", "out of memory");
    double sum = 0.0;
    for (int m = 0; m < M && !st; m++) {
        np_batch part = *shard;
        if (M > 1) {
            np_batch_micro_view(&part, m, M);
            np_ctx_set_micro_batch(ctx, m);
        }
        st = stage_forward(tr, &part, m, &sum, err);
    }
    for (int m = 0; m < M && !st; m++) {
        if (M > 1)
            np_ctx_set_micro_batch(ctx, m);
        st = stage_backward(tr, m, seed, err);
        /* pp_grad_accum_drop: a zero_grad after the first micro-batch */
        if (!st && m == 0 && M > 1 && tr->dfault == NP_DIST_FAULT_PP_GRAD_ACCUM_DROP)
            np_ctx_zero_grads(ctx);
    }
    np_ctx_set_micro_batch(ctx, -1);
    ctx->n_nodes = 0; /* the tape's ranges are spent */
    for (int i = 0; i < pp->n_stash; i++)
        free(pp->stash[i]);
    pp->n_stash = 0;
    if (st)
        return st;
    *loss = pp->stage == pp->size - 1 ? sum / M : 0.0;
    return from_last(pp, loss, err);
}

/* ---- after the backward ------------------------------------------------------------ */

np_status np_pp_sync_grads(np_pp *pp, np_error *err)
{
    int P = pp->size;
    np_tensor *t = pp->tied;
    if (P < 2 || !t)
        return NP_OK;
    size_t n = (size_t)t->numel;
    float *all = reserve(pp, n * sizeof(float) * (size_t)(pp->world + 1));
    if (!all)
        return np_error_set(err, NP_ERR_NOMEM, NULL, "pp", "out of memory");
    float *mine = all + n * (size_t)pp->world;
    if (t->grad)
        memcpy(mine, t->grad, n * sizeof(float));
    else
        memset(mine, 0, n * sizeof(float));
    if (pp->d.allgather(all, mine, n * sizeof(float), pp->d.user) != 0)
        return np_error_set(err, NP_ERR_IO, NULL, "pp", "pipeline: the all-reduce of the tied "
                            "word embedding's gradient failed");
    if (!t->grad)
        return NP_OK;
    /* the first stage's (the embedding's) plus the last's (the lm head's), at
     * this rank's place in the stage (after the data-parallel reduction) */
    const float *first = all + (size_t)pp->inner * n;
    const float *last = all + (size_t)((P - 1) * pp->stride + pp->inner) * n;
    for (size_t e = 0; e < n; e++)
        t->grad[e] = (float)((double)first[e] + (double)last[e]);
    return NP_OK;
}

np_status np_pp_reduce_flag(np_pp *pp, int *flag, np_error *err)
{
    int *all = reserve(pp, sizeof(int) * (size_t)pp->world);
    if (!all)
        return np_error_set(err, NP_ERR_NOMEM, NULL, "pp", "out of memory");
    int mine = *flag != 0;
    if (pp->d.allgather(all, &mine, sizeof mine, pp->d.user) != 0)
        return np_error_set(err, NP_ERR_IO, NULL, "pp", "pipeline: the gather of the loss "
                            "scaler's flag failed");
    for (int r = 0; r < pp->world; r++)
        mine |= all[r];
    *flag = mine;
    return NP_OK;
}

np_status np_pp_grad_norm(np_pp *pp, const np_tp *tp, np_tensor *const *all_params, int n,
                          double clip, double *norm, np_error *err)
{
    int W = pp->world;
    double *sq = reserve(pp, sizeof(double) * (size_t)n * (size_t)(W + 1));
    if (!sq)
        return np_error_set(err, NP_ERR_NOMEM, NULL, "pp", "out of memory");
    double *mine = sq + (size_t)n * (size_t)W;
    /* a stage's data-parallel groups hold the same (reduced) gradients: the
     * first group's count; inside it, a TP shard on every TP rank, a whole
     * parameter on TP rank 0 only */
    int tp_size = 1, tp_rank = 0;
    if (tp)
        np_tp_group(tp, &tp_rank, &tp_size);
    int first_group = pp->inner < tp_size;
    for (int i = 0; i < n; i++) {
        const np_tensor *p = all_params[i];
        np_tensor whole;
        double s = 0.0;
        int sharded = tp && np_tp_shard_dim(tp, p, &whole) >= 0;
        /* the tied weight counts once: on the first stage */
        int here = p->grad && first_group && (sharded || tp_rank == 0) &&
                   (p != pp->tied || pp->stage == 0);
        for (int64_t k = 0; here && k < p->numel; k++)
            s += (double)p->grad[k] * (double)p->grad[k];
        mine[i] = s;
    }
    if (pp->d.allgather(sq, mine, sizeof(double) * (size_t)n, pp->d.user) != 0)
        return np_error_set(err, NP_ERR_IO, NULL, "pp",
                            "pipeline: the gather of the gradient norm failed");
    /* each parameter's squares summed over the ranks in rank order (one
     * stage holds it: the others' are 0; its TP shards in TP rank order),
     * then those sums in the model's parameter order */
    double total = 0.0;
    for (int i = 0; i < n; i++) {
        double s = 0.0;
        for (int r = 0; r < W; r++)
            s += sq[(size_t)r * (size_t)n + (size_t)i];
        total += s;
    }
    *norm = sqrt(total);
    double coef = clip / (*norm + 1e-6);
    if (clip > 0 && coef < 1.0) {
        float c = (float)coef;
        for (int i = 0; i < pp->n_params; i++)
            for (int64_t k = 0; pp->params[i]->grad && k < pp->params[i]->numel; k++)
                pp->params[i]->grad[k] *= c;
    }
    return NP_OK;
}

/* ---- checkpoints ------------------------------------------------------------------- */

int np_pp_index(const np_pp *pp, const np_tensor *t)
{
    for (int i = 0; i < pp->n_params; i++)
        if (pp->params[i] == t)
            return i;
    return -1;
}

/* The first stage that holds parameter t. */
static int owner_of(const np_pp *pp, const np_tensor *t)
{
    for (int s = 0; s < pp->size; s++) {
        int l0 = (int)((int64_t)s * pp->n_layer / pp->size);
        int l1 = (int)((int64_t)(s + 1) * pp->n_layer / pp->size);
        if (on_stage(t->name ? t->name : "", s, pp->size, l0, l1))
            return s;
    }
    return 0;
}

np_status np_pp_gather_whole(np_pp *pp, const np_tp *tp, const np_tensor *t, const float *data,
                             float *out, np_error *err)
{
    /* every rank's t (its TP piece) at its world rank's place; the pieces
     * of the owner's first group are ranks owner x D x T + [0, T) */
    size_t n = (size_t)t->numel, bytes = n * sizeof(float);
    float *all = reserve(pp, bytes * (size_t)(pp->world + 1));
    if (!all)
        return np_error_set(err, NP_ERR_NOMEM, NULL, t->name, "out of memory");
    float *mine = all + n * (size_t)pp->world;
    if (data)
        memcpy(mine, data, bytes);
    else
        memset(mine, 0, bytes);
    if (pp->d.allgather(all, mine, bytes, pp->d.user) != 0)
        return np_error_set(err, NP_ERR_IO, NULL, t->name, "pipeline: the gather of a stage's "
                            "tensor for the checkpoint failed");
    const float *src = all + n * (size_t)owner_of(pp, t) * (size_t)pp->stride;
    np_tensor whole;
    if (tp && np_tp_shard_dim(tp, t, &whole) >= 0)
        np_tp_assemble(tp, t, src, out);
    else
        memcpy(out, src, bytes);
    return NP_OK;
}

/* ---- placements -------------------------------------------------------------------- */

int np_mesh_placement_pp(int pp, int stage, int tp, int dp, int sp, int mb, int m, int inner,
                         const np_hook_event *ev, int i, np_place_rec *rec)
{
    if (!ev || i < 0 || i >= ev->n_tensors || !ev->tensors[i].t)
        return 0;
    const np_tensor *t = ev->tensors[i].t;
    if (t->ndim > NP_FMT_MAX_DIMS)
        return 0;
    np_place_rec r;
    if (!np_mesh_placement_mb(tp, dp, sp, mb, m, inner, ev, i, &r)) {
        /* whole: Replicate() on each dimension of the stage's (dp, tp, mb) */
        memset(&r, 0, sizeof r);
        r.global_ndim = t->ndim;
        for (int d = 0; d < t->ndim; d++)
            r.global_shape[d] = t->shape[d];
        int n = (tp > 1 ? (dp > 1 ? 2 : 1) : 0) + (mb > 1);
        size_t len = 0;
        for (int j = 0; j < n; j++)
            len += (size_t)snprintf(r.placements + len, sizeof r.placements - len, "%s%s",
                                    j ? "," : "", "Replicate()");
        r.micro_batch = ev->kind == NP_EV_PARAM_GRAD ? -1 : m;
    }
    *rec = r;
    snprintf(rec->placements, sizeof rec->placements, "Replicate()%s%.80s",
             r.placements[0] ? "," : "", r.placements);
    rec->stage = pp > 1 ? stage : -1;
    return 1;
}
