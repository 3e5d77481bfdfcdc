/* replay/msprobe_args.c - torch's signatures of the ops the registry
 * recomputes, as msprobe dumps their arguments (replay/msprobe_args.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "msprobe_args.h"

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* Positional arguments in torch's order. A leading '~' marks an argument
 * that does not change the values computed (a shape the dumped output
 * gives, an in-place flag); "~*" stands for every further positional one
 * (Tensor.view(*shape)). Keyword-only arguments (add's alpha) are found by
 * their key. */
static const char *const *const sig[NP_OP_COUNT] = {
    [NP_OP_LINEAR] = ARGS("input", "weight", "bias"),
    [NP_OP_MATMUL] = ARGS("input", "other"),
    [NP_OP_CONV2D] = ARGS("input", "weight", "bias", "stride", "padding", "dilation", "groups"),
    [NP_OP_MAX_POOL2D] = ARGS("input", "kernel_size", "stride", "padding", "dilation",
                              "ceil_mode", "return_indices"),
    [NP_OP_EMBEDDING] = ARGS("input", "weight", "~padding_idx", "max_norm", "norm_type",
                             "~scale_grad_by_freq", "~sparse"),
    [NP_OP_RELU] = ARGS("input", "~inplace"),
    [NP_OP_GELU] = ARGS("input", "approximate"),
    [NP_OP_SILU] = ARGS("input", "~inplace"),
    [NP_OP_DROPOUT] = ARGS("input", "p", "training", "~inplace"),
    [NP_OP_LAYER_NORM] = ARGS("input", "~normalized_shape", "weight", "bias", "eps"),
    [NP_OP_RMS_NORM] = ARGS("input", "~normalized_shape", "weight", "eps"),
    [NP_OP_SOFTMAX] = ARGS("input", "dim", "~_stacklevel", "dtype"),
    [NP_OP_LOG_SOFTMAX] = ARGS("input", "dim", "~_stacklevel", "dtype"),
    [NP_OP_SDPA] = ARGS("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale"),
    [NP_OP_CROSS_ENTROPY] = ARGS("input", "target", "weight", "size_average", "ignore_index",
                                 "reduce", "reduction", "label_smoothing"),
    [NP_OP_ADD] = ARGS("input", "other"),
    [NP_OP_SUB] = ARGS("input", "other"),
    [NP_OP_MUL] = ARGS("input", "other"),
    [NP_OP_DIV] = ARGS("input", "other"),
    [NP_OP_SUM] = ARGS("input", "dim", "~keepdim", "dtype"),
    [NP_OP_MEAN] = ARGS("input", "dim", "~keepdim", "dtype"),
    [NP_OP_VIEW] = ARGS("input", "~*"),
    [NP_OP_TRANSPOSE] = ARGS("input", "dim0", "dim1"),
    [NP_OP_SPLIT] = ARGS("input", "split_size", "dim"),
};
_Static_assert(sizeof sig / sizeof sig[0] == NP_OP_COUNT, "sig must cover every np_op");

int rp_msp_arg_pos(int op, const char *name)
{
    if (op < 0 || op >= NP_OP_COUNT || !sig[op])
        return -1;
    for (int i = 0; sig[op][i]; i++)
        if (strcmp(sig[op][i] + (sig[op][i][0] == '~'), name) == 0)
            return i;
    return -1;
}

int rp_msp_is_number(const np_entry_rec *e)
{
    return !e->has_data && e->ndim == 0 && e->numel == 1 &&
           (!strcmp(e->dtype, "int64") || !strcmp(e->dtype, "float64") ||
            !strcmp(e->dtype, "bool"));
}

static int in_list(const char *const *names, const char *s)
{
    for (int i = 0; names && names[i]; i++)
        if (strcmp(names[i], s) == 0)
            return 1;
    return 0;
}

static int is_scalar(const np_op_info *info, const char *s)
{
    for (int i = 0; i < info->n_scalars; i++)
        if (strcmp(info->scalars[i].name, s) == 0)
            return 1;
    return 0;
}

/* The argument an input or kwargs leaf belongs to, into name (cap bytes):
 * its signature name, or "#K" past the end; 1 when the slot is marked '~'. */
static int slot_of(char *name, size_t cap, int op, const np_entry_rec *e, size_t plen, int kw)
{
    const char *rest = e->name + plen; /* "3", "3.0", "eps" */
    size_t len = strcspn(rest, ".");
    if (kw) {
        snprintf(name, cap, "%.*s", (int)len, rest);
        return 0;
    }
    int k = atoi(rest), n = 0;
    const char *const *s = sig[op];
    while (s[n])
        n++;
    if (k < n) {
        snprintf(name, cap, "%s", s[k] + (s[k][0] == '~'));
        return s[k][0] == '~';
    }
    snprintf(name, cap, "#%d", k);
    return n > 0 && strcmp(s[n - 1], "~*") == 0;
}

const char *rp_msp_unmodelled(char *buf, size_t cap, const np_op_info *info, const char *fwd,
                              const np_entry_rec *e, size_t n)
{
    if (!sig[info->op])
        return "its arguments' positions are not known";
    char prefix[NP_FMT_NAME_LEN + 16], slot[NP_FMT_NAME_LEN];
    for (size_t i = 0; i < n; i++) {
        /* a keyword argument by its name: msprobe's tensor kwargs are
         * read with the role input, its scalar ones with kwargs */
        size_t flen = strlen(fwd);
        int kw = strcmp(e[i].role, "kwargs") == 0 ||
                 (strncmp(e[i].name, fwd, flen) == 0 && strncmp(e[i].name + flen, ".kwargs.", 8) == 0);
        if ((!kw && strcmp(e[i].role, "input") != 0) || strcmp(e[i].dtype, "None") == 0)
            continue;
        size_t plen = (size_t)snprintf(prefix, sizeof prefix, "%s.%s.", fwd, kw ? "kwargs" : "input");
        if (strncmp(e[i].name, prefix, plen) != 0)
            continue;
        if (slot_of(slot, sizeof slot, info->op, &e[i], plen, kw))
            continue; /* does not change the values */
        int tensor_ok = in_list(info->inputs, slot), number_ok = is_scalar(info, slot);
        int nested = strchr(e[i].name + plen, '.') != NULL;
        if (!nested && ((tensor_ok && e[i].has_data) || (number_ok && rp_msp_is_number(&e[i]))))
            continue;
        snprintf(buf, cap, "argument %s (%s) is not one its float64 reference takes",
                 slot, e[i].name);
        return buf;
    }
    return NULL;
}
