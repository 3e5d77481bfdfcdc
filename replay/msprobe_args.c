/* replay/msprobe_args.c - torch's signatures of the ops the registry
 * recomputes, as msprobe dumps their arguments (replay/msprobe_args.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "msprobe_args.h"

/* Torch's positional signature of each op: its op_table row's
 * torch_args (include/internal/nprobe/ops.h), NULL when none is known. */
static const char *const *sig_of(int op)
{
    const np_op_info *info = np_op_get(op);
    return info ? info->torch_args : NULL;
}


int rp_msp_arg_pos(int op, const char *name)
{
    if (op < 0 || op >= NP_OP_COUNT || !sig_of(op))
        return -1;
    for (int i = 0; sig_of(op)[i]; i++)
        if (strcmp(sig_of(op)[i] + (sig_of(op)[i][0] == '~'), name) == 0)
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
    const char *const *s = sig_of(op);
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
    if (!sig_of(info->op))
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
        int same = slot_of(slot, sizeof slot, info->op, &e[i], plen, kw);
        const char *elem = strchr(e[i].name + plen, '.');
        if (!strcmp(slot, "normalized_shape") && elem && strcmp(elem, ".0") != 0) {
            snprintf(buf, cap, "argument normalized_shape (%s): the float64 reference "
                     "normalises over the last dimension only", e[i].name);
            return buf;
        }
        if (same)
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

/* The numbers list argument `base` holds in entries e[0..n) of call `fwd`
 * ({fwd}.kwargs.{base}.{j}): 1 when all are equal (*v the value), -1 when
 * they differ, 0 when there is none. */
static int list_value(const np_entry_rec *e, size_t n, const char *fwd, const char *base,
                      double *v)
{
    char prefix[NP_FMT_NAME_LEN + 80];
    size_t plen = (size_t)snprintf(prefix, sizeof prefix, "%s.kwargs.%s.", fwd, base);
    int found = 0;
    for (size_t i = 0; i < n; i++) {
        if (strncmp(e[i].name, prefix, plen) != 0 || strchr(e[i].name + plen, '.'))
            continue;
        if (found && e[i].mean != *v)
            return -1;
        *v = e[i].mean;
        found = 1;
    }
    return found;
}

int rp_np_list_scalar(const np_entry_rec *e, size_t n, const char *fwd, const char *key,
                      double *v)
{
    return list_value(e, n, fwd, key, v);
}

const char *rp_np_unmodelled(char *buf, size_t cap, const np_op_info *info, const char *fwd,
                             const np_entry_rec *e, size_t n)
{
    int n_in = 0;
    while (info->inputs[n_in])
        n_in++;
    char prefix[NP_FMT_NAME_LEN + 16], slot[NP_FMT_NAME_LEN];
    for (size_t i = 0; i < n; i++) {
        int kw = strcmp(e[i].role, "kwargs") == 0;
        if (!kw && strcmp(e[i].role, "input") != 0)
            continue;
        size_t plen = (size_t)snprintf(prefix, sizeof prefix, "%s.%s.", fwd, kw ? "kwargs" : "input");
        if (strncmp(e[i].name, prefix, plen) != 0)
            continue;
        const char *rest = e[i].name + plen, *dot = strchr(rest, '.');
        if (!kw) { /* the package numbers a call's tensors in argument order */
            if (dot || atoi(rest) >= n_in) {
                snprintf(buf, cap, "tensor argument %s is not one its float64 reference takes",
                         e[i].name);
                return buf;
            }
            continue;
        }
        /* a keyword or a positional scalar, named by the parameter (or its position) */
        snprintf(slot, sizeof slot, "%.*s", (int)(dot ? (size_t)(dot - rest) : strlen(rest)), rest);
        int ignorable = 0;
        if (slot[0] >= '0' && slot[0] <= '9' && sig_of(info->op)) {
            int k = atoi(slot), m = 0;
            while (sig_of(info->op)[m])
                m++;
            if (k < m) {
                ignorable = sig_of(info->op)[k][0] == '~';
                snprintf(slot, sizeof slot, "%s", sig_of(info->op)[k] + ignorable);
            } else
                ignorable = m > 0 && strcmp(sig_of(info->op)[m - 1], "~*") == 0;
        } else if (sig_of(info->op)) {
            int k = rp_msp_arg_pos(info->op, slot);
            ignorable = k >= 0 && sig_of(info->op)[k][0] == '~';
        }
        if (!strcmp(slot, "normalized_shape") && dot && strcmp(dot, ".0") != 0) {
            snprintf(buf, cap, "argument normalized_shape (%s): the float64 reference "
                     "normalises over the last dimension only", e[i].name);
            return buf;
        }
        /* a low-precision run's quantization statistics, a per-op override's mark */
        if (ignorable || !strncmp(slot, "lowp_", 5) || !strcmp(slot, "fp32_override"))
            continue;
        if (!is_scalar(info, slot)) {
            snprintf(buf, cap, "argument %s (%s) is not one its float64 reference takes", slot,
                     e[i].name);
            return buf;
        }
        double v = e[i].mean;
        if (isnan(v)) {
            snprintf(buf, cap, "argument %s (%s) has a value the float64 reference cannot read "
                     "(a string or object the package does not encode)", slot, e[i].name);
            return buf;
        }
        if (dot && list_value(e, n, fwd, slot, &v) < 0) {
            snprintf(buf, cap, "argument %s (%s...) differs between dimensions; the float64 "
                     "reference takes one value for all", slot, e[i].name);
            return buf;
        }
    }
    return NULL;
}
