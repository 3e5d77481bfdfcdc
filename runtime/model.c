/* runtime/model.c - model configuration, construction and initialisation;
 * the MLP (fc1-relu-fc2-relu-fc3) and the CNN (conv1-relu-pool-conv2-relu-
 * pool-fc); the GPT lives in model_gpt.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"
#include "nprobe/ops.h"

/* The API ops each model calls in a training step (forward or backward),
 * checked against the runs in tests/model/test_model_faults.c. */
static const np_op model_ops[][8] = { /* np_model_kind order, no designators: the size check
                                       * below sees a missing model */
    /* mlp */ {NP_OP_LINEAR, NP_OP_RELU, NP_OP_CROSS_ENTROPY, NP_OP_COUNT},
    /* cnn */ {NP_OP_CONV2D, NP_OP_RELU, NP_OP_MAX_POOL2D, NP_OP_FLATTEN, NP_OP_LINEAR,
               NP_OP_CROSS_ENTROPY, NP_OP_COUNT},
    /* gpt */ {NP_OP_EMBEDDING, NP_OP_LAYER_NORM, NP_OP_LINEAR, NP_OP_SDPA, NP_OP_GELU,
               NP_OP_CROSS_ENTROPY, NP_OP_COUNT},
};
_Static_assert(sizeof model_ops / sizeof model_ops[0] == NP_MODEL_KIND_COUNT,
               "model_ops must list every model's ops");

int np_model_calls_api(np_model_kind k, const char *api, size_t len)
{
    if ((unsigned)k >= NP_MODEL_KIND_COUNT || !api)
        return 0;
    for (int i = 0; model_ops[k][i] != NP_OP_COUNT; i++) {
        const char *a = np_op_api(model_ops[k][i]);
        if (strlen(a) == len && !strncmp(a, api, len))
            return 1;
    }
    return 0;
}

int np_model_fault_applies(np_model_kind k, const char *ops)
{
    /* ops: "Functional.softmax, Functional.scaled_dot_product_attention" */
    const char *s = ops;
    while (s && *s) {
        while (*s == ' ' || *s == ',')
            s++;
        size_t n = strcspn(s, ",");
        while (n > 0 && s[n - 1] == ' ')
            n--;
        if (n && np_model_calls_api(k, s, n))
            return 1;
        s += strcspn(s, ",");
    }
    return 0;
}

/* PyTorch's default Linear/Conv2d init: uniform(-1/sqrt(fan_in), 1/sqrt(fan_in))
 * for weight and bias. Streams are the parameters' creation indices. */
static void init_uniform_fanin(np_model *m)
{
    for (int i = 0; i < m->n_params; i++) {
        np_tensor *p = m->params[i];
        /* the weight precedes its bias: fan_in from the weight */
        np_tensor *w = p->ndim >= 2 ? p : m->params[i - 1];
        int64_t fan_in = w->numel / w->shape[0];
        double bound = 1.0 / sqrt((double)fan_in);
        np_tensor_fill_uniform(p, m->seed, (uint64_t)i, -bound, bound);
        m->init_draws += (uint64_t)p->numel;
    }
}

static np_status build_mlp(np_model *m, np_error *err)
{
    const np_model_config *c = &m->cfg;
    np_status st;
    if ((st = np_nn_linear_init(&m->fc1, m->ctx, "fc1", c->in_dim, c->hidden, 1, err)) ||
        (st = np_nn_linear_init(&m->fc2, m->ctx, "fc2", c->hidden, c->hidden, 1, err)) ||
        (st = np_nn_linear_init(&m->fc3, m->ctx, "fc3", c->hidden, c->n_classes, 1, err)))
        return st;
    return NP_OK;
}

static np_status build_cnn(np_model *m, np_error *err)
{
    const np_model_config *c = &m->cfg;
    int c1 = c->channels, c2 = 2 * c->channels, s = c->image_size / 4;
    np_status st;
    if ((st = np_nn_conv2d_init(&m->conv1, m->ctx, "conv1", 1, c1, 3, 1, 1, err)))
        return st;
    if (!(m->pool = np_module_new(m->ctx, "pool", "MaxPool2d")))
        return np_error_set(err, NP_ERR_NOMEM, NULL, "pool", "cannot register the module");
    if ((st = np_nn_conv2d_init(&m->conv2, m->ctx, "conv2", c1, c2, 3, 1, 1, err)) ||
        (st = np_nn_linear_init(&m->fc, m->ctx, "fc", c2 * s * s, c->n_classes, 1, err)))
        return st;
    return NP_OK;
}

np_status np_model_new(np_model **out, np_ctx *ctx, const np_model_config *c, uint64_t seed,
                       np_error *err)
{
    *out = NULL;
    np_status st = np_model_config_check(c, err);
    if (st)
        return st;
    np_model *m = calloc(1, sizeof *m);
    if (!m)
        return np_error_set(err, NP_ERR_NOMEM, NULL, "model", "out of memory");
    m->ctx = ctx;
    m->cfg = *c;
    m->seed = seed;
    int before = 0;
    np_ctx_params(ctx, &before);
    if (c->kind == NP_MODEL_MLP)
        st = build_mlp(m, err);
    else if (c->kind == NP_MODEL_CNN)
        st = build_cnn(m, err);
    else
        st = np_model_gpt_build(m, err);
    if (st) {
        np_model_free(m);
        return st;
    }
    int n = 0;
    np_tensor *const *all = np_ctx_params(ctx, &n);
    m->n_params = n - before;
    m->params = malloc((size_t)(m->n_params > 0 ? m->n_params : 1) * sizeof *m->params);
    if (!m->params) {
        np_model_free(m);
        return np_error_set(err, NP_ERR_NOMEM, NULL, "model", "out of memory");
    }
    for (int i = 0; i < m->n_params; i++)
        m->params[i] = all[before + i];
    if (c->kind == NP_MODEL_GPT) {
        const np_model_config *g = c;
        double std_res = 0.02 / sqrt(2.0 * g->n_layer);
        for (int i = 0; i < m->n_params; i++) {
            np_tensor *p = m->params[i];
            const char *name = p->name ? p->name : "";
            size_t len = strlen(name);
            int is_weight = len >= 7 && strcmp(name + len - 7, ".weight") == 0;
            if (p->ndim < 2 || !is_weight)
                continue;   /* biases 0, layer norms 1/0 */
            double std = strstr(name, ".c_proj.weight") ? std_res : 0.02;
            np_tensor_fill_normal(p, seed, (uint64_t)i, 0.0, std);
            m->init_draws += (uint64_t)p->numel;
        }
    } else {
        init_uniform_fanin(m);
    }
    if (np_ctx_status(ctx)) {
        np_error_set(err, np_ctx_status(ctx), NULL, "model", "%s", np_ctx_error(ctx)->text);
        np_model_free(m);
        return np_ctx_status(ctx);
    }
    *out = m;
    return NP_OK;
}

void np_model_free(np_model *m)
{
    if (!m)
        return;
    for (int i = 0; m->h && i < m->cfg.n_layer; i++)
        np_moe_free(m->h[i].moe);
    free(m->h);
    free(m->params);
    np_vocab_free(m->vocab);
    free(m);
}

const np_model_config *np_model_get_config(const np_model *m) { return &m->cfg; }
uint64_t np_model_init_draws(const np_model *m) { return m->init_draws; }

np_tensor *const *np_model_params(const np_model *m, int *n)
{
    *n = m->n_params;
    return m->params;
}

int64_t np_model_n_weights(const np_model *m)
{
    int64_t n = 0;
    for (int i = 0; i < m->n_params; i++)
        n += m->params[i]->numel;
    return n;
}

np_tensor *np_model_gpt_block_output(const np_model *m, int i)
{
    if (m->cfg.kind != NP_MODEL_GPT || i < 0 || i >= m->cfg.n_layer)
        return NULL;
    return m->h[i].out;
}

static np_tensor *pool_forward(np_model *m, np_tensor *x)
{
    if (!x || np_module_begin(m->ctx, m->pool) != NP_OK)
        return NULL;
    np_tensor *y = NP_AT(m->ctx, np_max_pool2d(m->ctx, x, 2, 2));
    np_module_end(m->ctx, m->pool, &x, 1, &y, 1);
    return y;
}

np_tensor *np_model_forward(np_model *m, np_tensor *x)
{
    np_ctx *ctx = m->ctx;
    switch (m->cfg.kind) {
    /* one call per statement, each wrapped in NP_AT (the line is its
     * callsite): a callsite belongs to the next call made, so in a nested
     * call the inner call would take it */
    case NP_MODEL_MLP: {
        np_tensor *h = NP_AT(ctx, np_nn_linear_forward(ctx, &m->fc1, x));
        h = NP_AT(ctx, np_relu(ctx, h));
        h = NP_AT(ctx, np_nn_linear_forward(ctx, &m->fc2, h));
        h = NP_AT(ctx, np_relu(ctx, h));
        return NP_AT(ctx, np_nn_linear_forward(ctx, &m->fc3, h));
    }
    case NP_MODEL_CNN: {
        np_tensor *h = NP_AT(ctx, np_nn_conv2d_forward(ctx, &m->conv1, x));
        h = NP_AT(ctx, np_relu(ctx, h));
        h = NP_AT(ctx, pool_forward(m, h));
        h = NP_AT(ctx, np_nn_conv2d_forward(ctx, &m->conv2, h));
        h = NP_AT(ctx, np_relu(ctx, h));
        h = NP_AT(ctx, pool_forward(m, h));
        if (!h)
            return NULL;
        h = NP_AT(ctx, np_flatten(ctx, h, 1));
        return NP_AT(ctx, np_nn_linear_forward(ctx, &m->fc, h));
    }
    default:
        return np_model_gpt_forward(m, x);
    }
}

np_tensor *np_model_loss(np_model *m, np_tensor *x, np_tensor *y)
{
    return np_model_loss_of(m, np_model_forward(m, x), y);
}

np_tensor *np_model_loss_of(np_model *m, np_tensor *logits, np_tensor *y)
{
    if (!logits || !y)
        return NULL;
    if (y->ndim > 1) {
        int64_t n = y->numel;
        y = NP_AT(m->ctx, np_view(m->ctx, y, 1, &n));
    }
    if (m->vocab)
        return NP_AT(m->ctx, np_vocab_cross_entropy(m->ctx, m->vocab, logits, y, -100));
    return NP_AT(m->ctx, np_cross_entropy(m->ctx, logits, y, -100));
}
