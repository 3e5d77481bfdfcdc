/* ckpt/model_config.c - the models' settings (np_model_config): kind
 * names, defaults and the check of a configuration, without the models
 * themselves (runtime/model.c builds them): what the checkpoint reader
 * needs to validate a file, so np_ckpt needs no trainer. */
#include <stdint.h>
#include <string.h>

#include "nprobe/model.h"

static const char *const model_names[] = {"mlp", "cnn", "gpt"}; /* np_model_kind order */
_Static_assert(sizeof model_names / sizeof model_names[0] == NP_MODEL_KIND_COUNT,
               "model_names must name every np_model_kind");

const char *np_model_kind_name(np_model_kind k)
{
    return (unsigned)k < NP_MODEL_KIND_COUNT ? model_names[k] : "unknown";
}

int np_model_kind_from_name(const char *name)
{
    for (int i = 0; name && i < NP_MODEL_KIND_COUNT; i++)
        if (strcmp(name, model_names[i]) == 0)
            return i;
    return -1;
}

void np_model_config_default(np_model_config *c, np_model_kind kind)
{
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->in_dim = 2;
    c->hidden = 64;
    c->image_size = 16;
    c->channels = 8;
    c->n_classes = kind == NP_MODEL_CNN ? 4 : 3;
    c->n_layer = 2;
    c->n_head = 2;
    c->n_embd = 64;
    c->block_size = 32;
    c->vocab_size = 0;
    c->ln_eps = 1e-5;
}

np_status np_model_config_check(const np_model_config *c, np_error *err)
{
#define NEED(cond, key, ...) \
    if (!(cond)) return np_error_set(err, NP_ERR_ARG, NULL, key, __VA_ARGS__)
    NEED((unsigned)c->kind < NP_MODEL_KIND_COUNT, "model", "unknown model kind %d", (int)c->kind);
    if (c->kind == NP_MODEL_MLP) {
        NEED(c->in_dim >= 1, "in_dim", "expected >= 1, got %d", c->in_dim);
        NEED(c->hidden >= 1, "hidden", "expected >= 1, got %d", c->hidden);
        NEED(c->n_classes >= 2, "n_classes", "expected >= 2, got %d", c->n_classes);
    } else if (c->kind == NP_MODEL_CNN) {
        NEED(c->image_size >= 4 && c->image_size % 4 == 0, "image_size",
             "expected a multiple of 4, got %d", c->image_size);
        NEED(c->channels >= 1, "channels", "expected >= 1, got %d", c->channels);
        NEED(c->n_classes >= 2, "n_classes", "expected >= 2, got %d", c->n_classes);
        /* conv2 has 2 * channels outputs, fc 2 * channels * (image_size/4)^2 inputs */
        int64_t s = c->image_size / 4;
        NEED(s <= INT32_MAX / s && 2 * (int64_t)c->channels * s * s <= INT32_MAX, "channels",
             "channels %d and image_size %d give the fc layer more than %d inputs",
             c->channels, c->image_size, INT32_MAX);
    } else {
        NEED(c->n_layer >= 1, "layers", "expected >= 1, got %d", c->n_layer);
        NEED(c->n_head >= 1, "heads", "expected >= 1, got %d", c->n_head);
        NEED(c->n_embd >= 1 && c->n_embd % c->n_head == 0, "width",
             "expected a multiple of heads (%d), got %d", c->n_head, c->n_embd);
        NEED(c->n_embd <= INT32_MAX / 4, "width", "expected at most %d (the MLP is 4 x width wide), got %d",
             INT32_MAX / 4, c->n_embd);
        NEED(c->block_size >= 1, "context", "expected >= 1, got %d", c->block_size);
        NEED(c->vocab_size >= 2, "vocab_size", "expected >= 2, got %d", c->vocab_size);
        NEED(c->ln_eps > 0, "ln_eps", "expected > 0, got %g", c->ln_eps);
        NEED(c->n_expert >= 0 && c->n_expert <= 64, "moe", "expected 0 (dense) to 64 experts, got %d",
             c->n_expert);
    }
#undef NEED
    return NP_OK;
}
