/* nprobe/hook.h - the runtime's hook: an ordered list of observers, each
 * with an after callback (np_hook_fn: every event) and an optional before
 * callback for API calls (np_hook_before_fn: the call's start, which may
 * decline the call), plus the payload.
 *
 * The runtime calls its observers at every hook point; an observer (the
 * probe, a monitor, a profiler) registers itself (np_ctx_set_hook for the
 * one classic hook, np_ctx_add_observer for more). The runtime never
 * includes the probe. Everything an event points to is borrowed for the duration of
 * the call only: copy what you keep.
 *
 * Names follow msprobe (DESIGN.md section 3):
 *   API call:     "Functional.linear.3.forward" / "Functional.linear.3.backward"
 *   module call:  "Module.h.0.attn.CausalSelfAttention.forward.0"
 *   param grads:  event name "Module.h.0.mlp.c_fc.Linear" (module path and
 *                 class, no counter), tensors of role parameters_grad with
 *                 key "weight"/"bias"
 * A leaf is "{name}.{role}.{index or key}" for every event kind, giving e.g.
 * "Functional.linear.3.forward.input.0" and
 * "Module.h.0.mlp.c_fc.Linear.parameters_grad.weight"; the observer builds it
 * from the event name and each tensor's role and index/key. */
#ifndef NPROBE_HOOK_H
#define NPROBE_HOOK_H

#include "nprobe/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum np_event_kind {
    NP_EV_API_FORWARD = 0,   /* after an API op ran forward: inputs, params, kwargs, outputs */
    NP_EV_API_BACKWARD,      /* after its backward: input = grads arriving at outputs,
                                output = grads produced for inputs (NULL tensor: no grad) */
    NP_EV_MODULE_FORWARD,    /* after a module's forward */
    NP_EV_MODULE_BACKWARD,   /* after a module's backward */
    NP_EV_PARAM_GRAD,        /* a module's parameter gradients, once per step after backward */
    NP_EV_STEP_BEGIN,        /* a training step starts (no tensors; scalar "loss_scale":
                                the factor this step's gradients carry, 1 without a
                                loss scaler) */
    NP_EV_STEP_END,          /* a training step ended: after the optimizer update */
    NP_EVENT_KIND_COUNT
} np_event_kind;

typedef enum np_role {
    NP_ROLE_INPUT = 0,
    NP_ROLE_OUTPUT,
    NP_ROLE_PARAMETERS,      /* key = parameter name inside the module ("weight") */
    NP_ROLE_KWARGS,          /* scalar arguments travel in np_hook_event.scalars */
    NP_ROLE_PARAMETERS_GRAD, /* key = parameter name inside the module */
    NP_ROLE_COUNT
} np_role;

/* "input", "output", "parameters", "kwargs", "parameters_grad". */
const char *np_role_name(np_role r);

typedef struct np_hook_tensor {
    np_role role;
    int index;               /* position for input/output, -1 when `key` is used */
    const char *key;         /* parameter name or keyword, NULL when `index` is used */
    const np_tensor *t;      /* may be NULL (e.g. no gradient for an int input) */
} np_hook_tensor;

typedef struct np_hook_scalar {
    const char *key;         /* "eps", "dim", "p", "scale", ... */
    double value;
} np_hook_scalar;

typedef struct np_hook_event {
    np_event_kind kind;
    const char *name;        /* full call name as above; NULL for step events */
    int is_module;           /* 1 for module calls and parameter grads */
    const char *parent;      /* enclosing module call name ("Module....forward.0") or NULL */
    const char *callsite;    /* where the call was made, "models.c:212 gpt_forward" or NULL */
    int step;                /* current step, from 0 */
    int rank;                /* this process's rank (0 on one process) */
    int seq;                 /* order of this call in the step, from 0 */
    const np_hook_tensor *tensors;
    int n_tensors;
    const np_hook_scalar *scalars;
    int n_scalars;
} np_hook_event;

/* Return 0 to continue. A non-zero return asks the runtime to stop training
 * at the next step boundary (the probe returns non-zero only when it was
 * configured to stop training on a dump error). */
typedef int (*np_hook_fn)(const np_hook_event *ev, void *user);

/* The before event of an API call (ggml's "ask"): the call's name, parent,
 * callsite, seq (that of its after event) and its inputs - forward: the
 * input tensors; backward: the gradients arriving at its outputs (role
 * input) - no scalars, no outputs yet. Return 0 to observe the call (the
 * after event follows), non-zero to decline it: this observer gets no
 * after event for this call. A module call has one too (is_module 1), at
 * np_module_begin for its forward - no tensors (its inputs come with its
 * end), seq the next event's, not its after event's (its inner calls come
 * first) - and at the start of its backward, with the gradients arriving
 * at its outputs (role input). Parameter-gradient and step events have no
 * before. */
typedef int (*np_hook_before_fn)(const np_hook_event *ev, void *user);

/* An observer of the runtime's events. Observers run in increasing `order`
 * (registration order among equals), each with its own `user`; so a dump,
 * a monitor and a profiler observe one run side by side. */
typedef struct np_observer {
    int order;
    np_hook_before_fn before; /* NULL: no before events */
    np_hook_fn after;         /* every event, as np_ctx_set_hook's hook; NULL: none */
    void *user;               /* borrowed */
} np_observer;

#ifdef __cplusplus
}
#endif
#endif
