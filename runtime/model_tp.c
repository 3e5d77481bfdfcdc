/* runtime/model_tp.c - tensor parallelism for the GPT, Megatron-style
 * (nprobe/dist.h np_dist.tp, docs/RUNTIME.md "Tensor parallel"). On rank r
 * of T, in every block's MLP:
 *
 *   x (whole on every rank) -> f -> c_fc, column-parallel: rows
 *   [r*4C/T, (r+1)*4C/T) of its weight and bias -> gelu on the shard ->
 *   c_proj, row-parallel: columns [r*4C/T, (r+1)*4C/T) of its weight, the
 *   bias added by rank 0 only -> a partial sum -> g -> the whole output
 *
 * f is the identity forward and an all-reduce (sum) of the gradient
 * backward; g an all-reduce (sum) forward and the identity backward. Both
 * are tape nodes without events (rt_quiet_init): every call keeps the name
 * it has in one process, so a TP run pairs leaf by leaf with the one-process
 * run once compare assembles its shards (np_tp_placement says how they lie).
 * The all-reduce gathers every rank's float32 values and sums them in
 * float64 in rank order, rounding once: the same bits on every rank. The
 * c_proj bias gradient, which only rank 0 computes, is summed over the
 * ranks after the backward (np_tp_sync_grads), so every rank steps the same
 * bias. The global gradient norm sums the shards' squares over the ranks
 * and counts the whole parameters once (np_tp_grad_norm).
 *
 * The parameters are initialised whole, as one process initialises them,
 * and each rank keeps its slice: the model at step 0 is the one-process
 * model, cut. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"
#include "model_train_internal.h"
#include "nprobe/format.h"
#include "nprobe/hook.h"
#include "rt_internal.h"

struct np_tp {
    int size, rank;        /* the TP group: its size T and this rank's index in it */
    int world, base;       /* all ranks; the group's first (rank - rank % T) */
    int dp, dp_rank;       /* data-parallel groups beside it (world / (T P)), this one */
    int stage_base;        /* the first rank of this pipeline stage (0 without one) */
    np_allgather_fn allgather;
    np_p2p_fn msg_send, msg_recv; /* a pipeline's stages: the TP group's gathers by messages */
    int p2p;
    void *user;
    np_dist_fault fault;
    float *buf;
    size_t cap;
    np_tensor **sharded;  /* the parameters each rank holds a slice of */
    int *shard_dim;       /* ... along this dimension */
    int n_sharded;
    np_tensor **rank0;    /* the parameters only rank 0 computes a gradient for */
    int n_rank0;
    float *send;          /* the data-parallel reduction's packed gradients */
    size_t send_cap;
    int sp;               /* sequence parallel */
    np_tensor **norms;    /* sequence parallel: the layer norms' parameters */
    int n_norms;
    np_train_coll_fn coll_fn; /* the collectives told to a monitor (np_trainer_set_coll_watch) */
    void *coll_user;
};

/* ---- the all-reduce ------------------------------------------------------------ */

/* Room for `need` bytes of gathered values. */
static int reserve(np_tp *tp, size_t need)
{
    if (need > tp->cap) {
        float *b = realloc(tp->buf, need);
        if (!b)
            return -1;
        tp->buf = b;
        tp->cap = need;
    }
    return 0;
}

enum { TAG_TP = 7201 };

/* Every TP group rank's `bytes` of x into tp->buf at its world rank's
 * place (room for the world reserved by the caller). Without a pipeline
 * the world's gather (the callback knows no groups; the other groups'
 * values are ignored). Under a pipeline the stages run different
 * collectives at the same time, so a world gather would wait for a stage
 * that waits for a message: the group exchanges messages instead, each
 * pair (i < j) in one order on every rank (i sends first, j receives
 * first), which cannot deadlock (the first unfinished pair in that order
 * has both ranks at it). */
static int group_gather(np_tp *tp, const void *x, size_t bytes)
{
    if (!tp->p2p)
        return tp->allgather(tp->buf, x, bytes, tp->user);
    char *b = (char *)tp->buf;
    memcpy(b + (size_t)(tp->base + tp->rank) * bytes, x, bytes);
    for (int i = 0; i < tp->size; i++)
        for (int j = i + 1; j < tp->size; j++) {
            if (tp->rank != i && tp->rank != j)
                continue;
            int peer = tp->base + (tp->rank == i ? j : i);
            void *mine = (void *)(uintptr_t)x, *theirs = b + (size_t)peer * bytes;
            int rc = tp->rank == i ? tp->msg_send(mine, bytes, peer, TAG_TP, tp->user) ||
                                         tp->msg_recv(theirs, bytes, peer, TAG_TP, tp->user)
                                   : tp->msg_recv(theirs, bytes, peer, TAG_TP, tp->user) ||
                                         tp->msg_send(mine, bytes, peer, TAG_TP, tp->user);
            if (rc)
                return -1;
        }
    return 0;
}

/* x[0..n) = the sum over the ranks of the TP group of their x, in float64
 * in rank order. */
static int allreduce_sum(np_tp *tp, float *x, int64_t n)
{
    size_t bytes = (size_t)n * sizeof(float);
    if (reserve(tp, bytes * (size_t)tp->world) != 0)
        return -1;
    if (group_gather(tp, x, bytes) != 0)
        return -1;
    for (int64_t e = 0; e < n; e++) {
        double acc = 0.0;
        for (int r = tp->base; r < tp->base + tp->size; r++)
            acc += (double)tp->buf[(size_t)r * (size_t)n + (size_t)e];
        x[e] = (float)acc;
    }
    return 0;
}

/* The collectives are no hook events (a TP run keeps one process's
 * calls): a monitor's cc_distribution is told what this rank sends
 * (received 0, before the collective) and what it got (1). */
static void coll_tell_dt(const np_tp *tp, const char *op, int bwd, int received, const void *x,
                         np_dtype dt, int64_t n)
{
    if (tp->coll_fn)
        tp->coll_fn(op, bwd, received, x, dt, n, tp->coll_user);
}

static void coll_tell(const np_tp *tp, const char *op, int bwd, int received, const float *x,
                      int64_t n)
{
    coll_tell_dt(tp, op, bwd, received, x, NP_FLOAT32, n);
}

void np_tp_set_coll_watch(np_tp *tp, np_train_coll_fn fn, void *user)
{
    tp->coll_fn = fn;
    tp->coll_user = fn ? user : NULL;
}

static np_tensor *copy_of(np_ctx *ctx, np_tensor *x)
{
    np_tensor *y = rt_new(ctx, x->dtype, x->ndim, x->shape);
    if (y)
        memcpy(y->data, x->data, np_tensor_nbytes(x));
    return y;
}

/* f backward: the gradient summed over the ranks. */
static void f_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    np_tp *tp = (np_tp *)(uintptr_t)nd->st;
    if (!gin[0])
        return;
    memcpy(gin[0], gout[0], (size_t)nd->in[0]->numel * sizeof(float));
    coll_tell(tp, "all_reduce", 1, 0, gin[0], nd->in[0]->numel);
    if (allreduce_sum(tp, gin[0], nd->in[0]->numel) != 0)
        rt_fail(ctx, NP_ERR_IO, "tp", "tensor parallel: the all-reduce of a gradient failed");
    else
        coll_tell(tp, "all_reduce", 1, 1, gin[0], nd->in[0]->numel);
}

/* g backward: the identity. */
static void g_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    (void)ctx;
    if (gin[0])
        memcpy(gin[0], gout[0], (size_t)nd->in[0]->numel * sizeof(float));
}

/* f: the identity forward, the gradient all-reduced backward. */
static np_tensor *tp_copy(np_ctx *ctx, np_tp *tp, np_tensor *x)
{
    if (!x || np_ctx_status(ctx))
        return NULL;
    rt_node nd;
    rt_quiet_init(ctx, &nd, &x, 1);
    nd.st = (const void *)tp;
    nd.gin_full = 1;
    return rt_finish_quiet(ctx, &nd, copy_of(ctx, x), f_bwd);
}

/* g: the partial sums all-reduced forward (unless the fault leaves them),
 * the identity backward. */
static np_tensor *tp_reduce(np_ctx *ctx, np_tp *tp, np_tensor *x, int skip)
{
    if (!x || np_ctx_status(ctx))
        return NULL;
    np_tensor *y = copy_of(ctx, x);
    if (!y)
        return NULL;
    if (!np_tensor_f32(x))
        return rt_fail(ctx, NP_ERR_ARG, "tp", "tensor parallel: floating activations only");
    if (!skip)
        coll_tell(tp, "all_reduce", 0, 0, np_tensor_f32(y), y->numel);
    if (!skip && allreduce_sum(tp, np_tensor_f32(y), y->numel) != 0)
        return rt_fail(ctx, NP_ERR_IO, "tp", "tensor parallel: the all-reduce of an output failed");
    rt_round_buf(np_tensor_f32(y), y->numel, y->dtype); /* autocast: the sum in its dtype */
    if (!skip)
        coll_tell(tp, "all_reduce", 0, 1, np_tensor_f32(y), y->numel);
    rt_node nd;
    rt_quiet_init(ctx, &nd, &x, 1);
    nd.gin_full = 1;
    return rt_finish_quiet(ctx, &nd, y, g_bwd);
}

/* Columns [c0, c0 + n) of the last dimension of x: a quiet slice (the
 * heads of this rank); backward puts the gradient back in place, zeros
 * elsewhere (the other ranks' heads: the sum over the ranks is whole). */
static void slice_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    (void)ctx;
    const int64_t *at = nd->st;
    const np_tensor *x = nd->in[0];
    int64_t w = x->shape[x->ndim - 1], rows = x->numel / w, c0 = at[0], n = at[1];
    if (!gin[0])
        return;
    for (int64_t r = 0; r < rows; r++)
        memcpy(gin[0] + r * w + c0, gout[0] + r * n, (size_t)n * sizeof(float));
}

static np_tensor *tp_slice(np_ctx *ctx, np_tensor *x, int64_t c0, int64_t n)
{
    if (!x || np_ctx_status(ctx))
        return NULL;
    if (!np_tensor_f32(x))
        return rt_fail(ctx, NP_ERR_ARG, "tp", "tensor parallel: floating activations only");
    int64_t shape[NP_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    int64_t w = x->shape[x->ndim - 1], rows = x->numel / w;
    shape[x->ndim - 1] = n;
    np_tensor *y = rt_new(ctx, x->dtype, x->ndim, shape);
    int64_t *at = rt_alloc(ctx, 2 * sizeof *at);
    if (!y || !at)
        return NULL;
    const float *s = np_tensor_f32(x);
    float *d = np_tensor_f32(y);
    for (int64_t r = 0; r < rows; r++)
        memcpy(d + r * n, s + r * w + c0, (size_t)n * sizeof *d);
    at[0] = c0;
    at[1] = n;
    rt_node nd;
    rt_quiet_init(ctx, &nd, &x, 1);
    nd.st = at;
    return rt_finish_quiet(ctx, &nd, y, slice_bwd);
}

static int add_to(np_tensor ***v, int *n, np_tensor *t);

/* ---- sequence parallel ------------------------------------------------------------ */

/* Over the sequence dimension (1) of a (B, T, C) tensor, each TP rank of
 * the group holding T/size positions (Megatron's sequence parallelism):
 *
 *   SP_SCATTER   forward: this rank's slice; backward: the slices' gradients
 *                gathered (the layers before are whole on every rank)
 *   SP_GATHER    forward: the slices gathered; backward: the gradients summed
 *                over the group, this rank's slice kept (a reduce-scatter:
 *                a column-parallel layer follows, its input gradients partial)
 *   SP_GATHER_1  the same forward; backward: this rank's slice of a gradient
 *                that is already whole on every rank (lm_head, and c_attn,
 *                whose output's gradient f sums)
 *   SP_RSCATTER  forward: the partial sums summed over the group, this
 *                rank's slice kept (a reduce-scatter, instead of g's
 *                all-reduce); backward: the gradients gathered */
enum { SP_SCATTER, SP_GATHER, SP_GATHER_1, SP_RSCATTER };

typedef struct sp_at {
    np_tp *tp;
    int op;
} sp_at;

/* out (B, Ts*size, C) from every group rank's x (B, Ts, C) (an all-gather,
 * told to the watcher: bwd 1 inside the backward). */
static int seq_gather(np_tp *tp, float *out, const float *x, int64_t B, int64_t Ts, int64_t C,
                      int bwd)
{
    size_t n = (size_t)(B * Ts * C);
    coll_tell(tp, "all_gather_into_tensor", bwd, 0, x, (int64_t)n);
    if (reserve(tp, n * sizeof(float) * (size_t)tp->world) != 0 ||
        group_gather(tp, x, n * sizeof(float)) != 0)
        return -1;
    int64_t T = Ts * tp->size;
    for (int r = 0; r < tp->size; r++)
        for (int64_t b = 0; b < B; b++)
            memcpy(out + (b * T + r * Ts) * C, tp->buf + (size_t)(tp->base + r) * n + (size_t)(b * Ts * C),
                   (size_t)(Ts * C) * sizeof(float));
    coll_tell(tp, "all_gather_into_tensor", bwd, 1, out, (int64_t)n * tp->size);
    return 0;
}

/* out (B, Ts, C) = this rank's positions of full (B, Ts*size, C). */
static void seq_slice(const np_tp *tp, float *out, const float *full, int64_t B, int64_t Ts,
                      int64_t C)
{
    int64_t T = Ts * tp->size;
    for (int64_t b = 0; b < B; b++)
        memcpy(out + b * Ts * C, full + (b * T + tp->rank * Ts) * C, (size_t)(Ts * C) * sizeof(float));
}

static void sp_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    const sp_at *at = nd->st;
    np_tp *tp = at->tp;
    const np_tensor *x = nd->in[0];
    if (!gin[0])
        return;
    int64_t B = x->shape[0], C = x->shape[2];
    int64_t Ts = at->op == SP_SCATTER || at->op == SP_RSCATTER ? x->shape[1] / tp->size : x->shape[1];
    int fail = 0;
    if (at->op == SP_SCATTER || at->op == SP_RSCATTER) {
        fail = seq_gather(tp, gin[0], gout[0], B, Ts, C, 1);
    } else if (at->op == SP_GATHER) {
        size_t n = (size_t)(B * Ts * tp->size * C);
        float *t = malloc(n * sizeof *t);
        fail = !t;
        if (t) {
            memcpy(t, gout[0], n * sizeof *t);
            coll_tell(tp, "reduce_scatter", 1, 0, t, (int64_t)n);
            fail = allreduce_sum(tp, t, (int64_t)n);
            seq_slice(tp, gin[0], t, B, Ts, C);
            if (!fail)
                coll_tell(tp, "reduce_scatter", 1, 1, gin[0], B * Ts * C);
        }
        free(t);
    } else {
        seq_slice(tp, gin[0], gout[0], B, Ts, C);
    }
    if (fail)
        rt_fail(ctx, NP_ERR_IO, "sp", "sequence parallel: a collective of a gradient failed");
}

static np_tensor *sp_node(np_ctx *ctx, np_tp *tp, np_tensor *x, int op, int skip)
{
    if (!x || np_ctx_status(ctx))
        return NULL;
    if (!np_tensor_f32(x) || x->ndim != 3)
        return rt_fail(ctx, NP_ERR_ARG, "sp", "sequence parallel: floating (B, T, C) activations only");
    int64_t B = x->shape[0], C = x->shape[2], shape[3] = {B, x->shape[1], C};
    int down = op == SP_SCATTER || op == SP_RSCATTER;
    if (down && x->shape[1] % tp->size != 0)
        return rt_fail(ctx, NP_ERR_ARG, "sp", "sequence parallel: the sequence (%lld) is not a "
                       "multiple of --tp %d", (long long)x->shape[1], tp->size);
    shape[1] = down ? x->shape[1] / tp->size : x->shape[1] * tp->size;
    np_tensor *y = rt_new(ctx, x->dtype, 3, shape);
    sp_at *at = rt_alloc(ctx, sizeof *at);
    if (!y || !at)
        return NULL;
    at->tp = tp;
    at->op = op;
    int64_t Ts = down ? shape[1] : x->shape[1];
    int fail = 0;
    if (op == SP_SCATTER) {
        seq_slice(tp, np_tensor_f32(y), np_tensor_f32(x), B, Ts, C);
    } else if (op == SP_RSCATTER) {
        np_tensor *t = copy_of(ctx, x);
        if (t && !skip)
            coll_tell(tp, "reduce_scatter", 0, 0, np_tensor_f32(t), t->numel);
        fail = !t || (!skip && allreduce_sum(tp, np_tensor_f32(t), t->numel) != 0);
        if (t && !fail)
            rt_round_buf(np_tensor_f32(t), t->numel, t->dtype);
        if (t)
            seq_slice(tp, np_tensor_f32(y), np_tensor_f32(t), B, Ts, C);
        if (t && !fail && !skip)
            coll_tell(tp, "reduce_scatter", 0, 1, np_tensor_f32(y), y->numel);
    } else {
        fail = seq_gather(tp, np_tensor_f32(y), np_tensor_f32(x), B, Ts, C, 0);
    }
    if (fail)
        return rt_fail(ctx, NP_ERR_IO, "sp", "sequence parallel: a collective of an output failed");
    rt_node nd;
    rt_quiet_init(ctx, &nd, &x, 1);
    nd.st = at;
    nd.gin_full = 1;
    return rt_finish_quiet(ctx, &nd, y, sp_bwd);
}

np_tensor *np_sp_enter(np_ctx *ctx, np_tp *tp, np_tensor *x)
{
    return tp && tp->sp ? sp_node(ctx, tp, x, SP_SCATTER, 0) : x;
}

np_tensor *np_sp_leave(np_ctx *ctx, np_tp *tp, np_tensor *x)
{
    return tp && tp->sp ? sp_node(ctx, tp, x, SP_GATHER_1, 0) : x;
}

np_tensor *np_tp_head_input(np_ctx *ctx, np_tp *tp, np_tensor *x)
{
    if (!tp)
        return x;
    return tp->sp ? sp_node(ctx, tp, x, SP_GATHER, 0) : tp_copy(ctx, tp, x);
}

np_tensor *np_tp_reduce_quiet(np_ctx *ctx, np_tp *tp, np_tensor *x)
{
    return tp_reduce(ctx, tp, x, 0);
}

const void *np_tp_gather_group(np_tp *tp, const void *x, size_t bytes, np_dtype dt)
{
    int64_t n = (int64_t)(bytes / np_dtype_storage_size(dt));
    coll_tell_dt(tp, "all_gather_into_tensor", 0, 0, x, dt, n);
    if (reserve(tp, bytes * (size_t)tp->world) != 0 || group_gather(tp, x, bytes) != 0)
        return NULL;
    const void *got = (const char *)tp->buf + (size_t)tp->base * bytes;
    coll_tell_dt(tp, "all_gather_into_tensor", 0, 1, got, dt, n * tp->size);
    return got;
}

void np_tp_group(const np_tp *tp, int *rank, int *size)
{
    *rank = tp->rank;
    *size = tp->size;
}

int np_tp_add_sharded(np_tp *tp, np_tensor *t, int dim)
{
    int *dims = realloc(tp->shard_dim, (size_t)(tp->n_sharded + 1) * sizeof *dims);
    if (!dims)
        return -1;
    tp->shard_dim = dims;
    dims[tp->n_sharded] = dim;
    return add_to(&tp->sharded, &tp->n_sharded, t);
}

/* ---- attention and the MLP -------------------------------------------------------- */

static np_tensor *row_linear(np_ctx *ctx, np_tp *tp, np_nn_linear *l, np_tensor *x, int skip);

/* Causal self-attention over this rank's heads: c_attn whole (every rank
 * computes q, k, v), f, the split, this rank's heads [r*H/T, (r+1)*H/T),
 * attention on them, c_proj row-parallel. */
np_tensor *np_tp_attn_forward(np_ctx *ctx, np_gpt_block *b, const np_model_config *c,
                              np_tensor *x)
{
    np_tp *tp = b->tp;
    if (!x || np_module_begin(ctx, b->attn) != NP_OK)
        return NULL;
    np_tensor *xs = x;
    if (tp->sp)
        x = sp_node(ctx, tp, x, SP_GATHER_1, 0);
    if (!x) {
        np_module_end(ctx, b->attn, &xs, 1, &x, 1);
        return NULL;
    }
    int64_t B = x->shape[0], T = x->shape[1], C = c->n_embd, H = c->n_head, D = C / H;
    int64_t h = H / tp->size, w = h * D;
    np_tensor *qkv = NP_AT(ctx, np_nn_linear_forward(ctx, &b->c_attn, x)); /* (B,T,3C) */
    qkv = tp_copy(ctx, tp, qkv);
    np_tensor *parts[3] = {NULL, NULL, NULL};
    np_tensor *y = NULL;
    int nparts = 0;
    if (qkv)
        nparts = NP_AT(ctx, np_split(ctx, qkv, C, -1, parts, 3));
    if (nparts == 3) {
        int64_t s4[4] = {B, T, h, D};
        np_tensor *heads[3];
        for (int k = 0; k < 3; k++) {
            heads[k] = tp_slice(ctx, parts[k], tp->rank * w, w);        /* (B,T,C/T) */
            heads[k] = NP_AT(ctx, np_view(ctx, heads[k], 4, s4));      /* (B,T,h,D) */
            heads[k] = NP_AT(ctx, np_transpose(ctx, heads[k], 1, 2));  /* (B,h,T,D) */
        }
        y = NP_AT(ctx, np_sdpa(ctx, heads[0], heads[1], heads[2], 1, 0.0));
        y = NP_AT(ctx, np_transpose(ctx, y, 1, 2));
        int64_t s3[3] = {B, T, w};
        y = NP_AT(ctx, np_view(ctx, y, 3, s3));
        y = NP_AT(ctx, row_linear(ctx, tp, &b->attn_proj, y, 0)); /* (the fault: the MLP's) */
    }
    np_module_end(ctx, b->attn, &xs, 1, &y, 1);
    return y;
}

/* c_proj, row-parallel: this rank's columns, the bias on rank 0, reduced. */
static np_tensor *row_linear(np_ctx *ctx, np_tp *tp, np_nn_linear *l, np_tensor *x, int skip)
{
    if (!x || np_module_begin(ctx, l->mod) != NP_OK)
        return NULL;
    np_tensor *y = NP_AT(ctx, np_linear(ctx, x, l->weight, tp->rank == 0 ? l->bias : NULL));
    y = tp->sp ? sp_node(ctx, tp, y, SP_RSCATTER, skip) : tp_reduce(ctx, tp, y, skip);
    np_module_end(ctx, l->mod, &x, 1, &y, 1);
    return y;
}

np_tensor *np_tp_mlp_forward(np_ctx *ctx, np_gpt_block *b, int layer, np_tensor *x)
{
    np_tp *tp = b->tp;
    if (!x || np_module_begin(ctx, b->mlp.mod) != NP_OK)
        return NULL;
    np_tensor *xf = tp->sp ? sp_node(ctx, tp, x, SP_GATHER, 0) : tp_copy(ctx, tp, x);
    np_tensor *h = NP_AT(ctx, np_nn_linear_forward(ctx, &b->mlp.c_fc, xf));
    h = NP_AT(ctx, np_gelu(ctx, h, 0));
    int skip = tp->fault == NP_DIST_FAULT_TP_MISSING_ALLREDUCE && layer == 0;
    h = NP_AT(ctx, row_linear(ctx, tp, &b->mlp.c_proj, h, skip));
    np_module_end(ctx, b->mlp.mod, &x, 1, &h, 1);
    return h;
}

/* ---- the shards ---------------------------------------------------------------- */

/* Keep rows [r0, r0 + n) of t (dimension 0), in place. */
static void keep_rows(np_tensor *t, int64_t r0, int64_t n)
{
    int64_t row = t->numel / t->shape[0];
    float *d = np_tensor_f32(t);
    memmove(d, d + r0 * row, (size_t)(n * row) * sizeof *d);
    t->shape[0] = n;
    t->numel = n * row;
}

/* Keep columns [c0, c0 + n) of the 2-D t, in place. */
static void keep_cols(np_tensor *t, int64_t c0, int64_t n)
{
    int64_t rows = t->shape[0], cols = t->shape[1];
    float *d = np_tensor_f32(t);
    for (int64_t i = 0; i < rows; i++)
        memmove(d + i * n, d + i * cols + c0, (size_t)n * sizeof *d);
    t->shape[1] = n;
    t->numel = rows * n;
}

static int add_to(np_tensor ***v, int *n, np_tensor *t)
{
    np_tensor **p = realloc(*v, (size_t)(*n + 1) * sizeof *p);
    if (!p)
        return -1;
    p[(*n)++] = t;
    *v = p;
    return 0;
}

np_status np_tp_setup(np_trainer *tr, np_error *err)
{
    const np_dist *d = &tr->opts.dist;
    np_model *m = tr->model;
    const np_model_config *c = &m->cfg;
    int T = d->tp;
    if (c->kind != NP_MODEL_GPT || c->n_head % T != 0)
        return np_error_set(err, NP_ERR_ARG, NULL, "tp",
                            "tensor parallel: the gpt model only, with its heads (%d) a multiple "
                            "of --tp %d", c->n_head, T);
    np_tp *tp = calloc(1, sizeof *tp);
    if (!tp)
        return np_error_set(err, NP_ERR_NOMEM, NULL, "tp", "out of memory");
    tr->tp = tp;
    tp->size = T;
    tp->rank = d->rank % T;
    tp->world = d->world_size;
    tp->base = d->rank - tp->rank;
    /* rank = (s * dp + d) * T + t (nprobe/dist.h) */
    int P = d->pp > 1 ? d->pp : 1;
    tp->dp = d->world_size / (T * P);
    tp->dp_rank = (d->rank / T) % tp->dp;
    tp->stage_base = d->rank - d->rank % (T * tp->dp);
    tp->p2p = P > 1;
    tp->msg_send = d->send;
    tp->msg_recv = d->recv;
    tp->sp = d->sp;
    if (tp->sp && (add_to(&tp->norms, &tp->n_norms, m->ln_f.weight) ||
                   add_to(&tp->norms, &tp->n_norms, m->ln_f.bias)))
        return np_error_set(err, NP_ERR_NOMEM, NULL, "tp", "out of memory");
    tp->allgather = d->allgather;
    tp->user = d->user;
    tp->fault = tr->dfault;
    int64_t part = 4 * (int64_t)c->n_embd / T;
    for (int i = 0; i < c->n_layer; i++) {
        np_gpt_block *b = &m->h[i];
        b->tp = tp;
        b->tp_layer = i;
        /* tp_shard_offset: the first block's c_fc takes the neighbour's block */
        int at = tp->fault == NP_DIST_FAULT_TP_SHARD_OFFSET && i == 0 ? (tp->rank + 1) % T
                                                                        : tp->rank;
        keep_rows(b->mlp.c_fc.weight, at * part, part);
        keep_rows(b->mlp.c_fc.bias, at * part, part);
        keep_cols(b->mlp.c_proj.weight, tp->rank * part, part);
        keep_cols(b->attn_proj.weight, tp->rank * (c->n_embd / T), c->n_embd / T);
        if (tp->sp && (add_to(&tp->norms, &tp->n_norms, b->ln_1.weight) ||
                       add_to(&tp->norms, &tp->n_norms, b->ln_1.bias) ||
                       add_to(&tp->norms, &tp->n_norms, b->ln_2.weight) ||
                       add_to(&tp->norms, &tp->n_norms, b->ln_2.bias)))
            return np_error_set(err, NP_ERR_NOMEM, NULL, "tp", "out of memory");
        int *dims = realloc(tp->shard_dim, (size_t)(tp->n_sharded + 4) * sizeof *dims);
        if (!dims)
            return np_error_set(err, NP_ERR_NOMEM, NULL, "tp", "out of memory");
        tp->shard_dim = dims;
        dims += tp->n_sharded;
        dims[0] = dims[1] = 0;
        dims[2] = dims[3] = 1;
        if (add_to(&tp->sharded, &tp->n_sharded, b->mlp.c_fc.weight) ||
            add_to(&tp->sharded, &tp->n_sharded, b->mlp.c_fc.bias) ||
            add_to(&tp->sharded, &tp->n_sharded, b->mlp.c_proj.weight) ||
            add_to(&tp->sharded, &tp->n_sharded, b->attn_proj.weight) ||
            add_to(&tp->rank0, &tp->n_rank0, b->attn_proj.bias) ||
            add_to(&tp->rank0, &tp->n_rank0, b->mlp.c_proj.bias))
            return np_error_set(err, NP_ERR_NOMEM, NULL, "tp", "out of memory");
    }
    return NP_OK;
}

void np_tp_free(np_tp *tp)
{
    if (!tp)
        return;
    free(tp->send);
    free(tp->buf);
    free(tp->sharded);
    free(tp->shard_dim);
    free(tp->rank0);
    free(tp->norms);
    free(tp);
}

/* allreduce_sum of a gradient after the backward, told to the watcher */
static int allreduce_told(np_tp *tp, float *x, int64_t n)
{
    coll_tell(tp, "all_reduce", 0, 0, x, n);
    int rc = allreduce_sum(tp, x, n);
    if (!rc)
        coll_tell(tp, "all_reduce", 0, 1, x, n);
    return rc;
}

np_status np_tp_sync_grads(np_tp *tp, np_error *err)
{
    /* sequence parallel: each rank's layer-norm gradients are its slice's
     * (sp_norm_grad_unreduced leaves them so) */
    for (int i = 0; tp->fault != NP_DIST_FAULT_SP_NORM_GRAD_UNREDUCED && i < tp->n_norms; i++) {
        np_tensor *t = tp->norms[i];
        if (t->grad && allreduce_told(tp, t->grad, t->numel) != 0)
            return np_error_set(err, NP_ERR_IO, NULL, "sp",
                                "sequence parallel: the all-reduce of %s's gradient failed",
                                t->name ? t->name : "a layer norm");
    }
    for (int i = 0; i < tp->n_rank0; i++) {
        np_tensor *t = tp->rank0[i];
        if (!t->grad)
            continue;
        if (tp->rank != 0)
            memset(t->grad, 0, (size_t)t->numel * sizeof(float));
        if (allreduce_told(tp, t->grad, t->numel) != 0)
            return np_error_set(err, NP_ERR_IO, NULL, "tp",
                                "tensor parallel: the all-reduce of %s's gradient failed",
                                t->name ? t->name : "a bias");
    }
    return NP_OK;
}

int np_tp_dp_size(const np_tp *tp)
{
    return tp ? tp->dp : 1;
}

np_status np_tp_dp_reduce(np_tp *tp, np_tensor *const *p, int n, double *loss, np_dist_fault f,
                          np_error *err)
{
    if (tp->dp <= 1)
        return NP_OK;
    size_t total = 1;
    for (int i = 0; i < n; i++)
        total += (size_t)p[i]->numel;
    /* the TP ranks' shards may differ in size (a vocabulary split unevenly):
     * every rank sends the largest count, its own values first */
    uint64_t mine = total;
    if (reserve(tp, sizeof mine * (size_t)tp->world) != 0)
        return np_error_set(err, NP_ERR_NOMEM, NULL, "all_reduce", "out of memory");
    if (tp->allgather(tp->buf, &mine, sizeof mine, tp->user) != 0)
        return np_error_set(err, NP_ERR_IO, NULL, "all_reduce", "data parallel beside tensor "
                            "parallel: the gather of the gradients' sizes failed");
    for (int r = 0; r < tp->world; r++) {
        uint64_t t;
        memcpy(&t, (const char *)tp->buf + (size_t)r * sizeof t, sizeof t);
        if (t > total)
            total = (size_t)t;
    }
    if (total > tp->send_cap) {
        float *s = realloc(tp->send, total * sizeof *s);
        if (!s)
            return np_error_set(err, NP_ERR_NOMEM, NULL, "all_reduce", "out of memory");
        tp->send = s;
        tp->send_cap = total;
    }
    size_t off = 0;
    for (int i = 0; i < n; off += (size_t)p[i]->numel, i++)
        if (p[i]->grad)
            memcpy(tp->send + off, p[i]->grad, (size_t)p[i]->numel * sizeof(float));
        else
            memset(tp->send + off, 0, (size_t)p[i]->numel * sizeof(float));
    tp->send[off] = (float)*loss;
    memset(tp->send + off + 1, 0, (total - off - 1) * sizeof(float));
    if (reserve(tp, total * sizeof(float) * (size_t)tp->world) != 0)
        return np_error_set(err, NP_ERR_NOMEM, NULL, "all_reduce", "out of memory");
    if (tp->allgather(tp->buf, tp->send, total * sizeof(float), tp->user) != 0)
        return np_error_set(err, NP_ERR_IO, NULL, "all_reduce",
                            "data parallel beside tensor parallel: the gather of the gradients "
                            "failed");
    /* rank tp->rank of each data-parallel group of this stage:
     * stage_base + d * T + tp->rank, d in order */
    double scale = f == NP_DIST_FAULT_WRONG_COUNT ? 0.5 : 1.0;
    size_t r0 = (size_t)(tp->stage_base + tp->rank), rs = (size_t)tp->size;
    off = 0;
    for (int i = 0; i < n; off += (size_t)p[i]->numel, i++) {
        if (!p[i]->grad)
            continue;
        /* one all-reduce per gradient as a data-parallel run's (its sent values
         * still in tp->send) */
        coll_tell(tp, "all_reduce", 0, 0, tp->send + off, p[i]->numel);
        for (int64_t e = 0; e < p[i]->numel; e++) {
            double acc = 0.0;
            for (int d = 0; d < tp->dp; d++)
                acc += (double)tp->buf[(r0 + (size_t)d * rs) * total + off + (size_t)e];
            p[i]->grad[e] = (float)(acc * scale);
        }
        coll_tell(tp, "all_reduce", 0, 1, p[i]->grad, p[i]->numel);
    }
    double lsum = 0.0;
    for (int d = 0; d < tp->dp; d++)
        lsum += (double)tp->buf[(r0 + (size_t)d * rs) * total + off];
    float lmean = (float)(lsum / tp->dp);
    coll_tell(tp, "all_reduce", 0, 0, tp->send + off, 1);
    coll_tell(tp, "all_reduce", 0, 1, &lmean, 1);
    *loss = (double)lmean;
    return NP_OK;
}

static int is_sharded(const np_tp *tp, const np_tensor *t)
{
    for (int i = 0; i < tp->n_sharded; i++)
        if (tp->sharded[i] == t)
            return 1;
    return 0;
}

int np_tp_shard_dim(const np_tp *tp, const np_tensor *t, np_tensor *whole)
{
    for (int i = 0; tp && i < tp->n_sharded; i++)
        if (tp->sharded[i] == t) {
            *whole = *t;
            whole->shape[tp->shard_dim[i]] *= tp->size;
            whole->numel *= tp->size;
            return tp->shard_dim[i];
        }
    return -1;
}

/* Rows (dim 0) or columns (dim 1, 2-D) of the whole tensor `whole`: piece
 * r of size, to or from `piece`. */
static void piece_copy(float *whole, float *piece, const np_tensor *w, int dim, int r, int size,
                       int to_whole)
{
    if (dim == 0) {
        size_t n = (size_t)(w->numel / size);
        float *at = whole + (size_t)r * n;
        memcpy(to_whole ? at : piece, to_whole ? piece : at, n * sizeof(float));
        return;
    }
    int64_t rows = w->shape[0], cols = w->shape[1], n = cols / size;
    for (int64_t i = 0; i < rows; i++) {
        float *at = whole + i * cols + r * n;
        memcpy(to_whole ? at : piece + i * n, to_whole ? piece + i * n : at,
               (size_t)n * sizeof(float));
    }
}

np_status np_tp_gather_whole(np_tp *tp, const np_tensor *t, const float *data, float *out,
                             np_error *err)
{
    size_t bytes = (size_t)t->numel * sizeof(float);
    if (reserve(tp, bytes * (size_t)tp->world) != 0)
        return np_error_set(err, NP_ERR_NOMEM, NULL, t->name, "out of memory");
    if (tp->allgather(tp->buf, data, bytes, tp->user) != 0)
        return np_error_set(err, NP_ERR_IO, NULL, t->name,
                            "tensor parallel: the gather of a shard for the checkpoint failed");
    np_tp_assemble(tp, t, tp->buf + (size_t)tp->base * (size_t)t->numel, out);
    return NP_OK;
}

void np_tp_assemble(const np_tp *tp, const np_tensor *t, const float *pieces, float *out)
{
    np_tensor w;
    int dim = np_tp_shard_dim(tp, t, &w);
    for (int r = 0; r < tp->size; r++)
        piece_copy(out, (float *)(uintptr_t)(pieces + (size_t)r * (size_t)t->numel), &w, dim, r,
                   tp->size, 1);
}

void np_tp_take_piece(const np_tp *tp, const np_tensor *t, const float *whole, float *out)
{
    np_tensor w;
    int dim = np_tp_shard_dim(tp, t, &w);
    piece_copy((float *)(uintptr_t)whole, out, &w, dim, tp->rank, tp->size, 0);
}

np_status np_tp_grad_norm(np_tp *tp, np_tensor *const *params, int n, double clip, double *norm,
                          np_error *err)
{
    double whole = 0.0, mine = 0.0;
    for (int i = 0; i < n; i++) {
        double s = 0.0;
        for (int64_t k = 0; params[i]->grad && k < params[i]->numel; k++)
            s += (double)params[i]->grad[k] * (double)params[i]->grad[k];
        if (is_sharded(tp, params[i]))
            mine += s;
        else
            whole += s;
    }
    /* the shards' squares summed over the TP group, in rank order (float64);
     * the data-parallel replicas hold the same (reduced) gradients */
    if (reserve(tp, sizeof(double) * (size_t)tp->world) != 0)
        return np_error_set(err, NP_ERR_NOMEM, NULL, "tp", "out of memory");
    if (tp->allgather(tp->buf, &mine, sizeof mine, tp->user) != 0)
        return np_error_set(err, NP_ERR_IO, NULL, "tp",
                            "tensor parallel: the all-reduce of the gradient norm failed");
    double sq = whole, x, red = 0.0;
    for (int r = tp->base; r < tp->base + tp->size; r++) {
        memcpy(&x, (const char *)tp->buf + (size_t)r * sizeof x, sizeof x);
        sq += x;
        red += x;
    }
    /* told as the all-reduce of the shards' squares it is (float64) */
    coll_tell_dt(tp, "all_reduce", 0, 0, &mine, NP_FLOAT64, 1);
    coll_tell_dt(tp, "all_reduce", 0, 1, &red, NP_FLOAT64, 1);
    *norm = sqrt(sq);
    double coef = clip / (*norm + 1e-6);
    if (clip > 0 && coef < 1.0) {
        float c = (float)coef;
        for (int i = 0; i < n; i++)
            for (int64_t k = 0; params[i]->grad && k < params[i]->numel; k++)
                params[i]->grad[k] *= c;
    }
    return NP_OK;
}

/* ---- placements ------------------------------------------------------------------ */

enum { R_NONE = 0, R_FC, R_PROJ, R_MLP, R_ATTN, R_LN, R_BLOCK };

/* The TP region of a module name "Module.h.N.mlp.c_fc.Linear[.forward.K]". */
static int region_of(const char *mod)
{
    if (mod && !strncmp(mod, "Module.ln_f.LayerNorm.", 22))
        return R_LN;
    if (!mod || strncmp(mod, "Module.h.", 9) != 0)
        return R_NONE;
    if (strstr(mod, ".mlp.c_fc.Linear"))
        return R_FC;
    if (strstr(mod, ".mlp.c_proj.Linear") || strstr(mod, ".attn.c_proj.Linear"))
        return R_PROJ;
    if (strstr(mod, ".attn.CausalSelfAttention."))
        return R_ATTN;
    if (strstr(mod, ".mlp.MLP."))
        return R_MLP;
    if (strstr(mod, ".ln_1.LayerNorm.") || strstr(mod, ".ln_2.LayerNorm."))
        return R_LN;
    if (strstr(mod, ".Block."))
        return R_BLOCK;
    return R_NONE;
}

/* Sequence parallel: what lies on this rank's positions (Shard(1)): the
 * layer norms' and the residuals' activations, the blocks', attentions'
 * and MLPs' inputs and outputs, a row-parallel c_proj's output (after its
 * reduce-scatter); the layer norms' in-backward weight gradients are
 * Partial(sum). -1: not decided here (the tensor-parallel rule). */
static int sp_rule(int rg, int api, int bwd, const np_hook_tensor *ht, int *dim)
{
    int act = ht->role == NP_ROLE_INPUT || ht->role == NP_ROLE_OUTPUT;
    int idx = ht->index;
    if (rg == R_LN || rg == R_BLOCK) {
        if (!act)
            return 0;
        if (rg == R_LN && api && idx >= 1) /* weight, bias; their gradients */
            return bwd && ht->role == NP_ROLE_OUTPUT ? 'P' : 0;
        return *dim = 1, 'S';
    }
    if (api || !act || idx != 0)
        return -1;
    if (rg == R_ATTN || rg == R_MLP)
        return *dim = 1, 'S';
    if (rg == R_PROJ && ht->role == (bwd ? NP_ROLE_INPUT : NP_ROLE_OUTPUT))
        return *dim = 1, 'S';
    return -1;
}

/* 'S' with *dim, 'P', or 0 (whole) for tensor `ht` of an event in region
 * `rg`; `api`: an API call inside the region's module, `bwd`: backward. */
static int rule(int rg, int api, int bwd, const np_hook_tensor *ht, int *dim)
{
    int last = ht->t->ndim - 1, idx = ht->index;
    int param = ht->role == NP_ROLE_PARAMETERS || ht->role == NP_ROLE_PARAMETERS_GRAD;
    int weight = param && ht->key && !strcmp(ht->key, "weight");
    int bias = param && ht->key && !strcmp(ht->key, "bias");
    int in = ht->role == NP_ROLE_INPUT, out = ht->role == NP_ROLE_OUTPUT;
    if (rg == R_MLP)
        return api ? (*dim = last, 'S') : 0; /* gelu on the shard */
    if (rg == R_FC) {
        if (weight || bias)
            return *dim = 0, 'S';
        if (!bwd && out && idx == 0)
            return *dim = last, 'S';
        if (!bwd && api && in && (idx == 1 || idx == 2))
            return *dim = 0, 'S';
        if (bwd && in && idx == 0)
            return *dim = last, 'S';
        if (bwd && out && idx == 0)
            return 'P';
        if (bwd && api && out && (idx == 1 || idx == 2))
            return *dim = 0, 'S';
        return 0;
    }
    if (rg == R_PROJ) {
        if (weight)
            return *dim = 1, 'S';
        if (!bwd && in && idx == 0)
            return *dim = last, 'S';
        if (!bwd && api && in && idx == 1)
            return *dim = 1, 'S';
        if (!bwd && api && out && idx == 0)
            return 'P';
        if (bwd && out && idx == 0)
            return *dim = last, 'S';
        if (bwd && api && out && idx == 1)
            return *dim = 1, 'S';
    }
    return 0;
}

/* The attention's own API calls: the split works on whole q, k, v (its
 * gradients are partial sums: each rank's heads only); every call after
 * this rank's heads were taken holds them: dimension 2 of (B,T,C/T) and
 * (B,T,h,D), dimension 1 of (B,h,T,D). The forms follow the calls' order
 * in a block: 3 views to (B,T,h,D), 3 transposes to (B,h,T,D), the
 * attention, a transpose back, a view (the GPT's 4 transposes a block). */
static int attn_rule(const char *name, int bwd, const np_hook_tensor *ht, int *dim)
{
    if (np_op_call_of(name, NP_OP_SPLIT))
        return bwd ? 'P' : 0;
    if (np_op_call_of(name, NP_OP_SDPA))
        return *dim = 1, 'S';
    if (np_op_call_of(name, NP_OP_VIEW))
        return *dim = 2, 'S';
    const char *k = np_op_call_of(name, NP_OP_TRANSPOSE);
    if (k) {
        int n = atoi(k);
        /* forward: input then output; backward swaps their roles */
        int is_in = (ht->role == NP_ROLE_INPUT) != bwd;
        int first = n % 4 < 3; /* (B,T,h,D) -> (B,h,T,D) */
        *dim = (first == is_in) ? 2 : 1;
        return 'S';
    }
    return 0;
}

static int tp_place(int tp, int rank, int sp, const np_hook_event *ev, int i, np_place_rec *rec)
{
    if (tp <= 1 || !ev || i < 0 || i >= ev->n_tensors || !ev->tensors[i].t)
        return 0;
    const np_hook_tensor *ht = &ev->tensors[i];
    int api = !ev->is_module;
    int rg = region_of(api ? ev->parent : ev->name);
    int bwd = ev->kind == NP_EV_API_BACKWARD || ev->kind == NP_EV_MODULE_BACKWARD;
    int dim = -1;
    int kind = sp && rg ? sp_rule(rg, api, bwd, ht, &dim) : -1;
    /* a pipeline's boundary under sp: the blocks' activations, this rank's positions */
    if (sp && api && ht->t->ndim == 3 && ev->name && !strncmp(ev->name, "Distributed.", 12))
        kind = 'S', dim = 1;
    if (kind < 0)
        kind = rg == R_ATTN ? (api ? attn_rule(ev->name, bwd, ht, &dim) : 0)
               : rg == R_LN || rg == R_BLOCK ? 0
               : rg        ? rule(rg, api, bwd, ht, &dim)
                           : 0;
    if (!kind || ht->t->ndim < 1 || ht->t->ndim > NP_FMT_MAX_DIMS)
        return 0;
    memset(rec, 0, sizeof *rec);
    rec->global_ndim = ht->t->ndim;
    for (int d = 0; d < ht->t->ndim; d++)
        rec->global_shape[d] = ht->t->shape[d];
    if (kind == 'S') {
        rec->global_shape[dim] = ht->t->shape[dim] * tp;
        rec->offset[dim] = ht->t->shape[dim] * rank;
        snprintf(rec->placements, sizeof rec->placements, "Shard(%d)", dim);
    } else {
        snprintf(rec->placements, sizeof rec->placements, "Partial(sum)");
    }
    rec->stage = rec->micro_batch = -1;
    return 1;
}

int np_tp_placement(int tp, int rank, const np_hook_event *ev, int i, np_place_rec *rec)
{
    return tp_place(tp, rank, 0, ev, i, rec);
}

/* The data-parallel dimension: 'S' (the batch, dimension 0), 'P' (a
 * gradient summed over the groups: a parameter's, or of what is broadcast
 * over the batch), 'A' (the loss: each group's mean over its rows) or 'R'.
 * Each group's backward is seeded with 1/dp (model_train.c), so its
 * activation gradients are the rows of the one-process ones. */
static int dp_rule(const np_hook_event *ev, const np_hook_tensor *ht, int bwd)
{
    const np_tensor *t = ht->t;
    if (ht->role != NP_ROLE_INPUT && ht->role != NP_ROLE_OUTPUT)
        return 'R'; /* parameters, kwargs, the reduced parameter gradients */
    if (ev->kind == NP_EV_PARAM_GRAD)
        return 'R';
    int api = !ev->is_module;
    const char *where = api ? ev->parent : ev->name;
    if (where && !strncmp(where, "Module.wpe.", 11))
        return bwd ? 'P' : 'R'; /* the positions: the same for every row */
    if (t->ndim == 0) {
        if (api && np_op_call_of(ev->name, NP_OP_CROSS_ENTROPY))
            return bwd ? 'P' : ht->role == NP_ROLE_OUTPUT ? 'A' : 'R';
        return 'R';
    }
    /* an API's weight and bias (inputs 1, 2; their gradients: outputs 1, 2) */
    int param_in = ht->index >= 1 && ht->role == (bwd ? NP_ROLE_OUTPUT : NP_ROLE_INPUT);
    if (api && param_in &&
        (np_op_call_of(ev->name, NP_OP_LINEAR) ||
         np_op_call_of(ev->name, NP_OP_LAYER_NORM) ||
         np_op_call_of(ev->name, NP_OP_EMBEDDING)))
        return bwd ? 'P' : 'R';
    /* an operand broadcast over the batch (the position embedding's add) */
    int most = 0;
    for (int k = 0; k < ev->n_tensors; k++)
        if (ev->tensors[k].t && ev->tensors[k].t->ndim > most)
            most = ev->tensors[k].t->ndim;
    if (api && np_op_call_of(ev->name, NP_OP_ADD) && t->ndim < most)
        return bwd ? 'P' : 'R';
    return 'S';
}

int np_mesh_placement(int tp, int dp, int rank, const np_hook_event *ev, int i,
                      np_place_rec *rec)
{
    return np_mesh_placement_sp(tp, dp, 0, rank, ev, i, rec);
}

int np_mesh_placement_sp(int tp, int dp, int sp, int rank, const np_hook_event *ev, int i,
                         np_place_rec *rec)
{
    if (dp <= 1)
        return tp_place(tp, rank, sp, ev, i, rec);
    if (tp <= 1 || !ev || i < 0 || i >= ev->n_tensors || !ev->tensors[i].t)
        return 0;
    const np_hook_tensor *ht = &ev->tensors[i];
    if (ht->t->ndim > NP_FMT_MAX_DIMS)
        return 0;
    np_place_rec t;
    int has_t = tp_place(tp, rank % tp, sp, ev, i, &t);
    int bwd = ev->kind == NP_EV_API_BACKWARD || ev->kind == NP_EV_MODULE_BACKWARD;
    int k = dp_rule(ev, ht, bwd);
    if (!has_t && k == 'R')
        return 0;
    if (has_t && k == 'S' && strcmp(t.placements, "Shard(0)") == 0)
        return 0; /* not a layout of this runtime */
    memset(rec, 0, sizeof *rec);
    rec->global_ndim = ht->t->ndim;
    for (int d = 0; d < ht->t->ndim; d++) {
        rec->global_shape[d] = has_t ? t.global_shape[d] : ht->t->shape[d];
        rec->offset[d] = has_t ? t.offset[d] : 0;
    }
    const char *item = k == 'P' ? "Partial(sum)" : k == 'A' ? "Partial(avg)"
                       : k == 'S' ? "Shard(0)" : "Replicate()";
    if (k == 'S') {
        rec->global_shape[0] = ht->t->shape[0] * dp;
        rec->offset[0] = ht->t->shape[0] * (rank / tp);
    }
    char tpi[24];
    snprintf(tpi, sizeof tpi, "%.23s", has_t ? t.placements : "Replicate()");
    snprintf(rec->placements, sizeof rec->placements, "%s,%s", item, tpi);
    rec->stage = rec->micro_batch = -1;
    return 1;
}

/* Micro-batches (gradient accumulation, np_train_opts.micro_batches) as the
 * last mesh dimension "mb": a step's calls of micro-batch m are its
 * coordinate m there. Its item is the data-parallel rule's (the
 * micro-batches split this rank's rows as the groups split the batch):
 * Shard(0) for the rows, Partial(sum) for a gradient summed over them,
 * Partial(avg) for the loss, else Replicate(). Outside the micro-batches
 * (m < 0: the parameters' gradients after the accumulation) a leaf is whole
 * along mb. */
int np_mesh_placement_mb(int tp, int dp, int sp, int mb, int m, int rank,
                         const np_hook_event *ev, int i, np_place_rec *rec)
{
    int has = tp > 1 ? np_mesh_placement_sp(tp, dp, sp, rank, ev, i, rec) : 0;
    if (mb <= 1)
        return has;
    if (!ev || i < 0 || i >= ev->n_tensors || !ev->tensors[i].t)
        return 0;
    const np_hook_tensor *ht = &ev->tensors[i];
    if (ht->t->ndim > NP_FMT_MAX_DIMS)
        return 0;
    size_t len = has ? strlen(rec->placements) : 0;
    if (m < 0 || ev->kind == NP_EV_PARAM_GRAD) {
        if (has)
            snprintf(rec->placements + len, sizeof rec->placements - len, ",Replicate()");
        return has;
    }
    int bwd = ev->kind == NP_EV_API_BACKWARD || ev->kind == NP_EV_MODULE_BACKWARD;
    int k = dp_rule(ev, ht, bwd);
    if (!has) {
        memset(rec, 0, sizeof *rec);
        rec->global_ndim = ht->t->ndim;
        for (int d = 0; d < ht->t->ndim; d++)
            rec->global_shape[d] = ht->t->shape[d];
        /* Replicate() on each dimension of the (dp, tp) mesh there is */
        int n = tp > 1 ? (dp > 1 ? 2 : 1) : 0;
        for (int j = 0; j < n; j++)
            len += (size_t)snprintf(rec->placements + len, sizeof rec->placements - len, "%s%s",
                                    j ? "," : "", "Replicate()");
    }
    if (k == 'S') {
        rec->global_shape[0] *= mb;
        rec->offset[0] = rec->offset[0] * mb + (int64_t)m * ht->t->shape[0];
    }
    const char *item = k == 'P' ? "Partial(sum)" : k == 'A' ? "Partial(avg)"
                       : k == 'S' ? "Shard(0)" : "Replicate()";
    snprintf(rec->placements + len, sizeof rec->placements - len, "%s%s", len ? "," : "", item);
    rec->stage = -1;
    rec->micro_batch = m;
    return 1;
}
