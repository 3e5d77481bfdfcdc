/* nprobe/dist.h - data-parallel training without a communication library in
 * the runtime: the trainer is given a gather callback (the program that links
 * MPI implements it with MPI_Allgather) and does every reduction itself, in
 * rank order, so results are bit-reproducible and do not depend on the
 * library's reduction algorithm.
 *
 * With np_train_opts.dist.allgather set, one training step on rank r of K:
 *
 *     global batch b of B samples (a pure function of seed and step)
 *     rows [r*B/K, (r+1)*B/K) of it -> forward, backward (local loss = mean
 *         over the shard)
 *     Distributed.all_reduce.0..n-1   one call per parameter gradient (and
 *                                     the loss): mean over ranks, summed in
 *                                     float64 in rank order
 *     NP_EV_PARAM_GRAD                the reduced gradients, as in PyTorch DDP
 *     Distributed.all_reduce.n        fp16 only: the loss scaler's found-inf
 *                                     flag (max over ranks)
 *     Distributed.all_reduce.n(+1)    the squared gradient norm (mean over
 *                                     ranks) behind clipping and grad_norm
 *
 * Every collective is an API hook point (NP_EV_API_FORWARD, input.0 = what
 * this rank sent, output.0 = what it received) with a before event (a
 * profiler times it: the step's first gradient call spans the gather). The reduction over K equal
 * shards equals the single-process step on the whole batch up to rounding:
 * the mean of K shard means against one mean over B, and the float64 sum of
 * K float32 gradients rounded once (docs/RUNTIME.md, "Distributed").
 *
 * Collective faults (np_dist_fault) are the emulated accelerator's: they act
 * only on device npu-sim, like np_fault. */
#ifndef NPROBE_DIST_H
#define NPROBE_DIST_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Gather `bytes` bytes of `send` from every rank into `recv` (world_size *
 * bytes, rank r's at offset r * bytes), like MPI_Allgather. Every rank calls
 * it the same number of times with the same `bytes`. Return 0 on success;
 * non-zero fails the step (NP_ERR_IO). */
typedef int (*np_allgather_fn)(void *recv, const void *send, size_t bytes, void *user);
/* Point-to-point (the pipeline's activations and gradients, --pp): send
 * `bytes` of buf to rank `peer` with `tag`, or receive exactly `bytes` from
 * it into buf, like MPI_Send / MPI_Recv (blocking; the messages between two
 * ranks with one tag arrive in the order sent). 0 on success. */
typedef int (*np_p2p_fn)(void *buf, size_t bytes, int peer, int tag, void *user);

typedef enum np_dist_fault {
    NP_DIST_FAULT_NONE = 0,
    NP_DIST_FAULT_REDUCE_BF16,    /* gradients reduced in bfloat16 */
    NP_DIST_FAULT_SHARD_DRIFT,    /* the last rank reads its shard of the next step's batch */
    NP_DIST_FAULT_SKIP_PARAM,     /* one parameter's gradient left out of the all-reduce */
    NP_DIST_FAULT_WRONG_COUNT,    /* mean divided by 2K instead of K */
    NP_DIST_FAULT_UNSYNCED_INIT,  /* ranks > 0 initialise from seed + rank (no broadcast) */
    NP_DIST_FAULT_TP_MISSING_ALLREDUCE, /* tensor parallel: a row-parallel output not reduced */
    NP_DIST_FAULT_TP_SHARD_OFFSET,      /* tensor parallel: a column shard at the neighbour's offset */
    NP_DIST_FAULT_SP_NORM_GRAD_UNREDUCED, /* sequence parallel: layer-norm gradients not summed over TP */
    NP_DIST_FAULT_PP_GRAD_ACCUM_DROP,   /* micro-batches: micro-batch 0's gradient left out */
    NP_DIST_FAULT_PP_MICROBATCH_SWAP,   /* pipeline: micro-batches 0 and 1 swapped at stage 1's input */
    NP_DIST_FAULT_COUNT
} np_dist_fault;

typedef struct np_dist_fault_info {
    np_dist_fault id;
    const char *name;        /* "allreduce_bf16", used by --fault */
    const char *op;          /* where it shows: "Distributed.all_reduce", ... */
    const char *ranks;       /* "every rank", "the last rank", "ranks > 0" */
    int needs_ranks;         /* 1: acts only with 2 or more ranks */
    const char *description; /* one sentence */
} np_dist_fault_info;

/* Entries of the collective catalog, including "none" at 0. */
int np_dist_fault_count(void);
/* Entry i in [0, np_dist_fault_count()); NULL when out of range. */
const np_dist_fault_info *np_dist_fault_get(int i);
/* Fault id by name ("none" gives NP_DIST_FAULT_NONE); -1 if unknown. */
int np_dist_fault_from_name(const char *name);

typedef struct np_dist {
    int rank;                 /* this process, in [0, world_size) */
    int world_size;           /* K; 0 or 1 with allgather NULL: single process */
    np_allgather_fn allgather;/* NULL: no collectives (single process) */
    void *user;               /* passed to allgather; borrowed */
    np_dist_fault fault;      /* acts on npu-sim only */
    int tp;                   /* tensor-parallel degree (0 or 1: none); > 1: the GPT's
                               * attention and MLPs Megatron-style over groups of tp
                               * ranks, data parallel over world_size / (tp * pp)
                               * groups (model_tp.c; the rank layout: pp below) */
    int sp;                   /* with tp > 1: sequence parallel (layer norms and residuals
                               * on a slice of the sequence per TP rank) */
    int pp;                   /* pipeline-parallel stages (0 or 1: none); > 1: the GPT's
                               * blocks split over pp stages, micro-batches through a
                               * GPipe schedule (model_pp.c); needs send and recv.
                               * The rank layout (Megatron's order, tp fastest, pp
                               * slowest): rank = (s * D + d) * T + t for stage s of
                               * pp, data-parallel group d of D = world_size / (T *
                               * pp), TP rank t of T = max(tp, 1); a world of one
                               * stage is the tensor-parallel layout d * T + t */
    np_p2p_fn send, recv;     /* point-to-point, for pp > 1 */
    int vp;                   /* with tp > 1: the word embedding's rows (and so the lm
                               * head's logits and the loss) split over the TP group
                               * (model_vocab.c) */
} np_dist;

/* Index of the parameter NP_DIST_FAULT_SKIP_PARAM leaves out among n
 * parameters (n / 2). */
int np_dist_skipped_param(int n);

/* ---- tensor parallelism (runtime/model_tp.c, docs/RUNTIME.md) ------------ */

struct np_hook_event;
struct np_place_rec;
/* Where tensor i of event `ev` of rank `rank` of a `tp`-rank tensor-parallel
 * GPT lies in its logical tensor: 1 and `rec` filled (placements over the
 * one mesh dimension "tp", global shape, offset; name left empty) when it is
 * a shard (Shard(d)) or a partial sum (Partial(sum)); 0 when it is whole
 * (replicated on every rank). For the dump's /placements
 * (np_probe_place). */
int np_tp_placement(int tp, int rank, const struct np_hook_event *ev, int i,
                    struct np_place_rec *rec);
/* The same over a (dp, tp) mesh of world = dp x tp ranks, rank = d * tp + t
 * (the TP groups contiguous, as Megatron lays them out): placements
 * "DP_ITEM,TP_ITEM", the batch Shard(0) over dp, parameter gradients and
 * what is broadcast over the batch Partial(sum), the loss Partial(avg)
 * (docs/RUNTIME.md "Tensor parallel"). dp <= 1: np_tp_placement. */
int np_mesh_placement(int tp, int dp, int rank, const struct np_hook_event *ev, int i,
                      struct np_place_rec *rec);
/* np_mesh_placement of a sequence-parallel run (--sp): the layer norms',
 * residuals' and blocks' activations Shard(1) over tp, the layer norms'
 * in-backward weight gradients Partial(sum). */
int np_mesh_placement_sp(int tp, int dp, int sp, int rank, const struct np_hook_event *ev,
                         int i, struct np_place_rec *rec);
/* np_mesh_placement_sp with gradient accumulation over mb > 1 micro-batches
 * (np_train_opts.micro_batches), m the call's micro-batch (-1 outside them:
 * np_ctx_micro_batch): one more mesh dimension "mb" last, its item the
 * data-parallel one's (Shard(0) for the rows, Partial(sum) for gradients
 * summed over the micro-batches, Partial(avg) for the loss, Replicate());
 * every leaf of a micro-batch is placed, with micro_batch m (docs/FORMAT.md
 * "/placements"). tp <= 1: the mesh is (mb) alone (one process). */
int np_mesh_placement_mb(int tp, int dp, int sp, int mb, int m, int rank,
                         const struct np_hook_event *ev, int i, struct np_place_rec *rec);

/* A pipeline of pp > 1 stages with mb micro-batches (m the call's, -1
 * outside them), each stage tp x dp ranks (tp <= 1: none beside it): one
 * more mesh dimension "pp" first (the stages; every leaf's item
 * Replicate(): each stage holds its own leaves, the tied word embedding on
 * the first and the last stage the same), then the stage's (dp, tp, mb)
 * items as np_mesh_placement_mb gives them for `inner`, the rank within the
 * stage (d * tp + t), Replicate() where it places nothing; under sp the
 * activations crossing a stage boundary (Distributed.send/recv) are
 * Shard(1) over tp. Every leaf is placed, with its stage (docs/FORMAT.md
 * "/placements"). */
int np_mesh_placement_pp(int pp, int stage, int tp, int dp, int sp, int mb, int m, int inner,
                         const struct np_hook_event *ev, int i, struct np_place_rec *rec);
/* np_mesh_placement_mb of a vocabulary-parallel run (np_dist.vp) over a
 * vocabulary of `vocab` tokens: on tp, the word embedding's weight and its
 * gradients Shard(0) (rows [r*V/T, (r+1)*V/T), uneven when T does not
 * divide V), the lm head's logits and their gradient Shard(-1) (also the
 * cross-entropy's input), the embedding's output and the gradient of the
 * lm head's input Partial(sum). */
int np_mesh_placement_vp(int tp, int dp, int sp, int mb, int m, int rank, int64_t vocab,
                         const struct np_hook_event *ev, int i, struct np_place_rec *rec);

#ifdef __cplusplus
}
#endif
#endif
