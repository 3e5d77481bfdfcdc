/* runtime/fault_step.c - the one-time faults of nprobe/fault_step.h: an
 * observer of order -100 that rewrites one API call's output in place at
 * the chosen step and rank, before any other observer (dump, monitor)
 * sees it and before the next op reads it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nprobe/fault_step.h"
#include "nprobe/ops.h"

static const np_step_fault_info catalog[] = {
    {"none", NULL, NULL},
    {"gemm_bitflip", "h.0.mlp.c_fc",
     "a one-time bit flip (bit 30, the exponent's top bit) in one output element of the GEMM of "
     "h.0.mlp.c_fc"},
    {"outlier_batch", "wte", "an extreme batch: the token embeddings of one step x 256"},
    {"logit_growth", "lm_head",
     "the logits grow x256 a step from step S on until bf16 overflows"},
    {"nan_input", "wte", "one element of the token embeddings turns NaN (one rank's input)"},
    {"rare_pattern", "h.0.attn.c_attn",
     "a GEMM defect that fires on a rare input (the first two elements both -3.96875: the first "
     "output row x1024); at step S h.0.ln_1's output carries that pattern"},
};
_Static_assert(sizeof catalog / sizeof catalog[0] == NP_STEP_FAULT_COUNT, "one entry per kind");

/* The call each fault corrupts: its op (the API name is the op table's,
 * np_op_api) and parent module prefix. */
static const np_op target_op[] = {NP_OP_COUNT, NP_OP_LINEAR, NP_OP_EMBEDDING, NP_OP_LINEAR,
                                  NP_OP_EMBEDDING, NP_OP_LAYER_NORM};
static const char *const target_parent[] = {NULL, "Module.h.0.mlp.c_fc.", "Module.wte.",
                                            "Module.lm_head.", "Module.wte.", "Module.h.0.ln_1."};

/* rare_pattern: the input the defective GEMM mishandles */
#define RARE_VALUE (-3.96875f) /* exact in bf16 and fp16 */
_Static_assert(sizeof target_op / sizeof target_op[0] == NP_STEP_FAULT_COUNT, "one per kind");
_Static_assert(sizeof target_parent / sizeof target_parent[0] == NP_STEP_FAULT_COUNT, "one per kind");

const np_step_fault_info *np_step_fault_get(int k)
{
    return k > 0 && k < NP_STEP_FAULT_COUNT ? &catalog[k] : NULL;
}

int np_step_fault_from_name(const char *name)
{
    for (int k = 1; name && k < NP_STEP_FAULT_COUNT; k++)
        if (!strcmp(name, catalog[k].name))
            return k;
    return -1;
}

struct np_step_fault {
    np_ctx *ctx;
    np_step_fault_kind kind;
    int64_t step;
    int rank;
    int fired;
    int64_t fired_step; /* the step of the last firing (once per step) */
    int64_t first_step; /* the first step this run did (-1 before it) */
};

static int active_step(const np_step_fault *f, int64_t step)
{
    return f->kind == NP_STEP_FAULT_LOGIT_GROWTH ? step >= f->step : step == f->step;
}

static void corrupt(np_step_fault *f, np_tensor *t, int64_t step)
{
    float *x = t->data;
    int64_t n = t->numel;
    if (!x || n < 1 || t->dtype == NP_FLOAT64 || !np_dtype_is_floating(t->dtype))
        return;
    switch (f->kind) {
    case NP_STEP_FAULT_GEMM_BITFLIP: {
        uint32_t b;
        memcpy(&b, &x[n / 3], sizeof b);
        b ^= 1u << 30;
        memcpy(&x[n / 3], &b, sizeof b);
        break;
    }
    case NP_STEP_FAULT_OUTLIER_BATCH:
        for (int64_t i = 0; i < n; i++)
            x[i] *= 256.0f;
        break;
    case NP_STEP_FAULT_LOGIT_GROWTH: {
        /* an overflow of the reduced precision: fp32 logits are left alone */
        if (t->dtype != NP_BFLOAT16 && t->dtype != NP_FLOAT16)
            return;
        float s = ldexpf(1.0f, (int)(8 * (step - f->step + 1) > 120 ? 120 : 8 * (step - f->step + 1)));
        for (int64_t i = 0; i < n; i++)
            x[i] = np_round_to(t->dtype, x[i] * s);
        break;
    }
    case NP_STEP_FAULT_NAN_INPUT:
        x[0] = NAN;
        break;
    case NP_STEP_FAULT_RARE_PATTERN: /* plant the pattern; the defect is in on_event */
        if (n < 2)
            return;
        x[0] = x[1] = RARE_VALUE;
        break;
    default:
        return;
    }
    f->fired++;
    f->fired_step = step;
}

/* The defective GEMM of rare_pattern, on every step and rank: the first
 * output row x1024 when the input starts with the pattern. */
static void rare_gemm(const np_hook_event *ev)
{
    const np_tensor *in = NULL, *out = NULL;
    for (int i = 0; i < ev->n_tensors; i++) {
        const np_hook_tensor *h = &ev->tensors[i];
        if (h->index == 0 && h->role == NP_ROLE_INPUT)
            in = h->t;
        if (h->index == 0 && h->role == NP_ROLE_OUTPUT)
            out = h->t;
    }
    if (!in || !out || in->numel < 2 || !in->data || !out->data || out->ndim < 1 ||
        in->dtype == NP_FLOAT64 || out->dtype == NP_FLOAT64)
        return;
    const float *x = in->data;
    if (x[0] != RARE_VALUE || x[1] != RARE_VALUE)
        return;
    float *y = out->data;
    int64_t row = out->shape[out->ndim - 1];
    for (int64_t k = 0; k < row && k < out->numel; k++)
        y[k] = np_round_to(out->dtype, y[k] * 1024.0f);
}

static int on_event(const np_hook_event *ev, void *user)
{
    np_step_fault *f = user;
    if (f->kind == NP_STEP_FAULT_RARE_PATTERN && ev->kind == NP_EV_API_FORWARD && ev->name &&
        ev->parent && np_op_call_of(ev->name, NP_OP_LINEAR) &&
        !strncmp(ev->parent, "Module.h.0.attn.c_attn.", 23))
        rare_gemm(ev);
    if (f->first_step < 0)
        f->first_step = ev->step;
    /* gemm_bitflip is a one-time hardware event: a rerun of its step (a run
     * resumed at or after it from a checkpoint; at step 0 a rerun is a
     * fresh run, which meets it) does not meet it again */
    if (f->kind == NP_STEP_FAULT_GEMM_BITFLIP && f->step > 0 && f->first_step >= f->step)
        return 0;
    if (ev->kind != NP_EV_API_FORWARD || !ev->name || !ev->parent || !active_step(f, ev->step) ||
        (f->rank >= 0 && ev->rank != f->rank) || f->fired_step == ev->step)
        return 0;
    const char *par = target_parent[f->kind];
    if (!np_op_call_of(ev->name, target_op[f->kind]) || strncmp(ev->parent, par, strlen(par)))
        return 0;
    for (int i = 0; i < ev->n_tensors; i++)
        if (ev->tensors[i].role == NP_ROLE_OUTPUT && ev->tensors[i].index == 0 && ev->tensors[i].t) {
            corrupt(f, (np_tensor *)ev->tensors[i].t, ev->step);
            break;
        }
    return 0;
}

np_status np_step_fault_attach(np_step_fault **out, np_ctx *ctx, np_step_fault_kind kind,
                               int64_t step, int rank, np_error *err)
{
    *out = NULL;
    if (kind <= NP_STEP_FAULT_NONE || kind >= NP_STEP_FAULT_COUNT)
        return np_error_set(err, NP_ERR_ARG, NULL, "fault", "unknown step fault %d", (int)kind);
    if (step < 0)
        return np_error_set(err, NP_ERR_ARG, NULL, "fault-step", "expected >= 0");
    np_step_fault *f = calloc(1, sizeof *f);
    if (!f)
        return np_error_set(err, NP_ERR_NOMEM, NULL, "fault", "out of memory");
    f->ctx = ctx;
    f->kind = kind;
    f->step = step;
    f->rank = rank;
    f->fired_step = -1;
    f->first_step = -1;
    np_observer obs = {-100, NULL, on_event, f};
    np_status st = np_ctx_add_observer(ctx, &obs, err);
    if (st) {
        free(f);
        return st;
    }
    *out = f;
    return NP_OK;
}

int np_step_fault_detach(np_step_fault *f)
{
    if (!f)
        return 0;
    np_ctx_remove_observers(f->ctx, f);
    int n = f->fired;
    free(f);
    return n;
}
