/* runtime/model_internal.h - the model struct shared by model.c (MLP, CNN,
 * common parts) and model_gpt.c (the GPT). Private to runtime/. */
#ifndef NPROBE_RUNTIME_MODEL_INTERNAL_H
#define NPROBE_RUNTIME_MODEL_INTERNAL_H

#include "nprobe/model.h"

typedef struct np_tp np_tp;   /* tensor parallelism (model_tp.c) */
typedef struct np_moe np_moe; /* a block's mixture of experts (model_moe.c) */

/* A GPT MLP (class MLP): c_fc C -> 4C, erf gelu, c_proj 4C -> C. The dense
 * block's "h.N.mlp" and each MoE expert "h.N.mlp.experts.K" (model_moe.c). */
typedef struct np_gpt_mlp {
    np_module *mod;            /* "{path}" MLP */
    np_nn_linear c_fc;         /* "{path}.c_fc" (4C, C) */
    np_nn_linear c_proj;       /* "{path}.c_proj" (C, 4C) */
} np_gpt_mlp;

typedef struct np_gpt_block {
    np_module *mod;            /* "h.N" Block */
    np_nn_layer_norm ln_1;
    np_module *attn;           /* "h.N.attn" CausalSelfAttention */
    np_nn_linear c_attn;       /* (3C, C) */
    np_nn_linear attn_proj;    /* "h.N.attn.c_proj" (C, C) */
    np_nn_layer_norm ln_2;
    np_gpt_mlp mlp;            /* "h.N.mlp" (unused with moe) */
    np_tensor *out;            /* block output of the last forward (B,T,C), step-scoped */
    np_tp *tp;                 /* tensor parallel (borrowed), or NULL */
    int tp_layer;              /* the block's index, for the tensor-parallel faults */
    np_moe *moe;               /* "h.N.mlp" MoE in place of the MLP (n_expert > 0), or NULL */
} np_gpt_block;

/* model_mlp.c: an MLP's module and linears registered under `path` (C the
 * width); its forward x (..., C) -> (..., C). */
np_status np_gpt_mlp_build(np_gpt_mlp *m, np_ctx *ctx, const char *path, int C, np_error *err);
np_tensor *np_gpt_mlp_forward(np_ctx *ctx, np_gpt_mlp *m, np_tensor *x);

/* model_moe.c: block i's MoE "h.N.mlp" (router, experts.K.c_fc/c_proj) in
 * b->moe; its forward x (B,T,C) -> (B,T,C); its free. */
np_status np_moe_build(np_gpt_block *b, np_ctx *ctx, int i, const np_model_config *c, np_error *err);
np_tensor *np_moe_forward(np_ctx *ctx, np_moe *moe, np_tensor *x);
void np_moe_free(np_moe *moe);

/* model_tp.c: a block's MLP over the tensor-parallel ranks. */
np_tensor *np_tp_mlp_forward(np_ctx *ctx, np_gpt_block *b, int layer, np_tensor *x);
np_tensor *np_tp_attn_forward(np_ctx *ctx, np_gpt_block *b, const np_model_config *c,
                              np_tensor *x);
/* Sequence parallel (tp with sp; else x itself): the embeddings' sum cut to
 * this rank's positions before the blocks, gathered again after ln_f. */
np_tensor *np_sp_enter(np_ctx *ctx, np_tp *tp, np_tensor *x);
np_tensor *np_sp_leave(np_ctx *ctx, np_tp *tp, np_tensor *x);
/* For the vocabulary-parallel head (model_vocab.c): its input whole on
 * every rank (sequence parallel: the slices gathered), its gradient summed
 * over the TP group backward (each rank's is its vocabulary slice's:
 * Megatron's f, or a reduce-scatter under sp); g, the quiet all-reduce of a
 * partial sum; every world rank's `bytes` of x gathered, the TP group's
 * pieces returned (group rank g's at g * bytes; valid until the next
 * collective; NULL on failure); this rank's index and the group's size; a
 * parameter sharded along `dim` (the gradient norm sums its squares over
 * the group). */
np_tensor *np_tp_head_input(np_ctx *ctx, np_tp *tp, np_tensor *x);
np_tensor *np_tp_reduce_quiet(np_ctx *ctx, np_tp *tp, np_tensor *x);
const void *np_tp_gather_group(np_tp *tp, const void *x, size_t bytes, np_dtype dt);
void np_tp_group(const np_tp *tp, int *rank, int *size);
int np_tp_add_sharded(np_tp *tp, np_tensor *t, int dim);

/* model_vocab.c: the vocabulary-parallel word embedding and loss (--tp T
 * --vocab-parallel): TP rank r holds rows [r*V/T, (r+1)*V/T) of the word
 * embedding (uneven when T does not divide V), the lm head's logits are
 * its vocabulary slice, the cross-entropy combines the slices. */
typedef struct np_vocab np_vocab;
np_tensor *np_vocab_embedding(np_ctx *ctx, np_vocab *v, np_nn_embedding *e, np_tensor *idx);
np_tensor *np_vocab_cross_entropy(np_ctx *ctx, np_vocab *v, np_tensor *logits, np_tensor *y,
                                  int64_t ignore_index);
void np_vocab_free(np_vocab *v);

struct np_model {
    np_ctx *ctx;
    np_model_config cfg;
    uint64_t seed;
    uint64_t init_draws;
    np_tensor **params;        /* creation order */
    int n_params;
    /* mlp */
    np_nn_linear fc1, fc2, fc3;
    /* cnn */
    np_nn_conv2d conv1, conv2;
    np_module *pool;
    np_nn_linear fc;
    /* gpt */
    np_nn_embedding wte, wpe;
    np_gpt_block *h;           /* n_layer blocks */
    np_nn_layer_norm ln_f;
    np_module *lm_head;        /* Linear without parameters of its own: tied to wte */
    np_vocab *vocab;           /* vocabulary parallel (model_vocab.c), or NULL */
};

np_status np_model_gpt_build(np_model *m, np_error *err);
np_tensor *np_model_gpt_forward(np_model *m, np_tensor *idx);
/* Its parts, for a pipeline's stages (model_pp.c): the embeddings' sum of
 * tokens idx (B,T); blocks [l0, l1) on x; ln_f and the tied lm head. */
np_tensor *np_model_gpt_embed(np_model *m, np_tensor *idx);
np_tensor *np_model_gpt_blocks(np_model *m, np_tensor *x, int l0, int l1);
np_tensor *np_model_gpt_head(np_model *m, np_tensor *x);
/* The loss of logits against targets y (model.c, np_model_loss's tail). */
np_tensor *np_model_loss_of(np_model *m, np_tensor *logits, np_tensor *y);

#endif
