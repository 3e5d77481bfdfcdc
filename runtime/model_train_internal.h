/* runtime/model_train_internal.h - the trainer struct, shared by
 * model_train.c and checkpoint.c. Private to runtime/. */
#ifndef NPROBE_RUNTIME_MODEL_TRAIN_INTERNAL_H
#define NPROBE_RUNTIME_MODEL_TRAIN_INTERNAL_H

#include "nprobe/model.h"

struct np_trainer {
    np_ctx *ctx;              /* borrowed */
    np_train_opts opts;       /* model.vocab_size etc. as built */
    np_dataset *data;
    np_model *model;
    np_optim *optim;
    np_scaler scaler;
    np_batch batch;           /* host buffers, reused each step */
    int64_t step;             /* next step to run */
    np_dist_fault dfault;     /* the collective fault in force (npu-sim only) */
    float *gather;            /* allgather buffers, grown as needed */
    size_t gather_cap;        /* bytes of gather (world_size times the send) */
    float *send;
    size_t send_cap;
    int coll_n;               /* Distributed.all_reduce counter of the step */
    np_train_watch_fn watch;  /* np_trainer_set_watch (a monitor) or NULL */
    void *watch_user;
    struct np_tp *tp;         /* tensor parallel (model_tp.c), or NULL */
    struct np_pp *pp;         /* pipeline parallel (model_pp.c), or NULL */
};


/* model_pp.c: pipeline parallelism (np_dist.pp > 1). Setup keeps this
 * stage's parameters (before the optimizer exists: np_pp_params are the
 * ones it steps); forward_backward runs the step's M micro-batches through
 * the GPipe schedule (*loss the mean of their losses, on every rank);
 * sync sums the tied word embedding's gradients of the first and the last
 * stage; the flag is or-ed over the stages; the norm is np_grad_norm's
 * over the whole model (all_params: the model's list, in its order). */
typedef struct np_pp np_pp;
np_status np_pp_setup(np_trainer *tr, np_error *err);
void np_pp_free(np_pp *pp);
np_tensor *const *np_pp_params(const np_pp *pp, int *n);
np_status np_pp_forward_backward(np_trainer *tr, const np_batch *shard, int M, double seed,
                                 double *loss, np_error *err);
np_status np_pp_sync_grads(np_pp *pp, np_error *err);
np_status np_pp_reduce_flag(np_pp *pp, int *flag, np_error *err);
np_status np_pp_grad_norm(np_pp *pp, const struct np_tp *tp, np_tensor *const *all_params, int n,
                          double clip, double *norm, np_error *err);
/* Checkpoints of a pipeline hold the one-process tensors. The index of
 * model parameter t in np_pp_params (the optimizer's), -1 when another
 * stage holds it; the whole tensor of t (its TP pieces assembled beside
 * --tp) from the stage that holds it (the first of the two for the tied
 * weight; its first data-parallel group), `data` this rank's values of t
 * (NULL: not on this stage): a collective, every rank calls it in the
 * same order. */
int np_pp_index(const np_pp *pp, const np_tensor *t);
np_status np_pp_gather_whole(np_pp *pp, const struct np_tp *tp, const np_tensor *t,
                             const float *data, float *out, np_error *err);

/* model_tp.c: tensor parallelism (np_dist.tp > 1). Setup slices the
 * parameters (before the optimizer exists); sync sums the gradients only
 * rank 0 computes; the norm counts the shards once over the ranks. */
np_status np_tp_setup(np_trainer *tr, np_error *err);
void np_tp_free(struct np_tp *tp);
/* The group's all-reduces and reduce-scatters told to fn (NULL: none). */
void np_tp_set_coll_watch(struct np_tp *tp, np_train_coll_fn fn, void *user);
/* Checkpoints of a TP run hold the one-process (whole) tensors. The
 * dimension parameter t is split along (-1: whole on every rank), *whole
 * its one-process shape; the whole tensor gathered from the TP group's
 * pieces `data` (a collective: every rank calls it, in the same order);
 * this rank's piece of a whole tensor. */
int np_tp_shard_dim(const struct np_tp *tp, const np_tensor *t, np_tensor *whole);
np_status np_tp_gather_whole(struct np_tp *tp, const np_tensor *t, const float *data, float *out,
                             np_error *err);
void np_tp_take_piece(const struct np_tp *tp, const np_tensor *t, const float *whole, float *out);
/* The whole tensor of sharded parameter t from its T pieces (each t->numel
 * long, one after the other in TP rank order). */
void np_tp_assemble(const struct np_tp *tp, const np_tensor *t, const float *pieces, float *out);
/* Data parallel beside it (world = T x dp, rank = d * T + t): the number of
 * data-parallel groups (1: none). */
int np_tp_dp_size(const struct np_tp *tp);
/* The gradients summed over the data-parallel group (each rank's backward
 * was seeded with 1/dp, so its gradients are partial sums of the
 * one-process ones), float64 in rank order; *loss the mean of the group's
 * local losses. The fault allreduce_wrong_count halves the sum. */
np_status np_tp_dp_reduce(struct np_tp *tp, np_tensor *const *p, int n, double *loss,
                          np_dist_fault f, np_error *err);
np_status np_tp_sync_grads(struct np_tp *tp, np_error *err);
/* model_vocab.c: the word embedding's rows split over the TP group
 * (np_dist.vp, after np_tp_setup). */
np_status np_vocab_setup(np_trainer *tr, np_error *err);
np_status np_tp_grad_norm(struct np_tp *tp, np_tensor *const *params, int n, double clip,
                          double *norm, np_error *err);

/* model_dist.c: the data-parallel part of a step (nprobe/dist.h). */
int np_dist_active(const np_trainer *tr);
/* Rows of the global batch this rank trains on: a view into tr->batch. */
void np_dist_shard(np_batch *view, const np_trainer *tr);
/* Rows [m * rows / M, (m + 1) * rows / M) of a batch view (micro-batch m
 * of M). */
void np_batch_micro_view(np_batch *v, int m, int M);
/* Average the gradients (and the loss, *loss in/out) over the ranks, one
 * Distributed.all_reduce call per parameter. */
np_status np_dist_reduce_grads(np_trainer *tr, double *loss, np_error *err);
/* Max of a flag over the ranks (Distributed.all_reduce). */
np_status np_dist_reduce_flag(np_trainer *tr, int *flag, np_error *err);
/* Mean of a float64 value over the ranks (Distributed.all_reduce). */
np_status np_dist_reduce_mean(np_trainer *tr, double *v, np_error *err);
void np_dist_free_buffers(np_trainer *tr);

#endif
