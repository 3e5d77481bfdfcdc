/* test_rt_observers.c - the hook's observer list and before events
 * (include/nprobe/hook.h): observers run in their order, each sees every
 * after event unless its before event declined the call; a before event
 * comes first, with the after event's name and seq and the call's inputs
 * (forward) or arriving gradients (backward); with nobody listening no
 * event is formatted. Also prints the cost per call of an op with no
 * observer, with a before-only observer that declines everything, and with
 * an after observer (information, not a pass criterion). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "nprobe/runtime.h"

typedef struct rec {
    char log[64][64];
    int n;
} rec;
static rec R; /* one log for every observer, in call order */

typedef struct who {
    const char *tag;
    const char *decline; /* API name prefix this observer declines */
    int befores, afters;
} who;

static void add(const char *tag, const char *what, const np_hook_event *ev)
{
    if (R.n < 64)
        snprintf(R.log[R.n++], 64, "%s %s %s %d", tag, what, ev->name ? ev->name : "-", ev->seq);
}

static int before(const np_hook_event *ev, void *user)
{
    who *w = user;
    w->befores++;
    add(w->tag, "before", ev);
    CHECK(ev->n_tensors >= 1 && ev->tensors[0].role == NP_ROLE_INPUT && ev->n_scalars == 0);
    return w->decline && strncmp(ev->name, w->decline, strlen(w->decline)) == 0;
}

/* A before event of any call, logged with its tensor count; declines the
 * calls named with the observer's prefix. */
static int module_before(const np_hook_event *ev, void *user)
{
    who *w = user;
    w->befores++;
    if (R.n < 64)
        snprintf(R.log[R.n++], 64, "%s before %s %d t%d", w->tag, ev->name, ev->seq, ev->n_tensors);
    CHECK(ev->n_scalars == 0 && (ev->n_tensors == 0 || ev->tensors[0].role == NP_ROLE_INPUT));
    return w->decline && strncmp(ev->name, w->decline, strlen(w->decline)) == 0;
}

static int after(const np_hook_event *ev, void *user)
{
    who *w = user;
    w->afters++;
    add(w->tag, "after", ev);
    return 0;
}

static double ns_per_call(np_ctx *ctx, np_tensor *x, int n)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < n; i++) {
        np_relu(ctx, x);
        if (i % 1024 == 1023)
            np_ctx_reset_arena(ctx);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    np_ctx_reset_arena(ctx);
    return ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / n;
}

int main(void)
{
    np_ctx *ctx = NULL;
    CHECK(np_ctx_new(&ctx, NULL, NULL) == NP_OK);
    np_tensor *x = np_tensor_new_param(ctx, NP_FLOAT32, 1, (const int64_t[]){4}, "x");
    np_tensor_fill_normal(x, 1, 0, 0.0, 1.0);
    who late = {"late", NULL, 0, 0}, early = {"early", "Functional.relu", 0, 0}, hook = {"hook", NULL, 0, 0};
    np_error err;
    np_error_clear(&err);
    CHECK(np_ctx_add_observer(ctx, &(np_observer){5, before, after, &late}, &err) == NP_OK);
    CHECK(np_ctx_add_observer(ctx, &(np_observer){1, before, after, &early}, &err) == NP_OK);
    np_ctx_set_hook(ctx, after, &hook); /* order 0, after events only */
    CHECK(np_ctx_add_observer(ctx, &(np_observer){2, NULL, NULL, &hook}, &err) == NP_ERR_ARG);

    np_tensor *y = np_relu(ctx, x);
    np_tensor *s = np_sum(ctx, y);
    CHECK(np_backward(ctx, s) == NP_OK);
    static const char *const want[] = {
        "early before Functional.relu.0.forward 0",  "late before Functional.relu.0.forward 0",
        "hook after Functional.relu.0.forward 0",    "late after Functional.relu.0.forward 0",
        "early before Torch.sum.0.forward 1",        "late before Torch.sum.0.forward 1",
        "hook after Torch.sum.0.forward 1",          "early after Torch.sum.0.forward 1",
        "late after Torch.sum.0.forward 1",          "early before Torch.sum.0.backward 2",
        "late before Torch.sum.0.backward 2",        "hook after Torch.sum.0.backward 2",
        "early after Torch.sum.0.backward 2",        "late after Torch.sum.0.backward 2",
        "early before Functional.relu.0.backward 3", "late before Functional.relu.0.backward 3",
        "hook after Functional.relu.0.backward 3",   "late after Functional.relu.0.backward 3",
    };
    int nw = (int)(sizeof want / sizeof want[0]);
    CHECK_EQ_INT(R.n, nw);
    for (int i = 0; i < nw && i < R.n; i++)
        CHECK_MSG(strcmp(R.log[i], want[i]) == 0, "event %d: got '%s', want '%s'", i, R.log[i], want[i]);
    CHECK_EQ_INT(early.afters, 2);
    CHECK_EQ_INT(late.afters, 4);
    CHECK_EQ_INT(hook.befores, 0);

    /* removing: the hook by np_ctx_set_hook(NULL), the others by user */
    np_ctx_set_hook(ctx, NULL, NULL);
    np_ctx_remove_observers(ctx, &late);
    R.n = 0;
    np_relu(ctx, x);
    CHECK_EQ_INT(R.n, 1); /* early's before only: it declines relu */
    np_ctx_remove_observers(ctx, &early);
    R.n = 0;
    np_relu(ctx, x);
    CHECK_EQ_INT(R.n, 0);
    for (int i = 0; i < NP_CTX_MAX_OBSERVERS; i++)
        CHECK(np_ctx_add_observer(ctx, &(np_observer){i, NULL, after, &late}, &err) == NP_OK);
    CHECK(np_ctx_add_observer(ctx, &(np_observer){0, NULL, after, &late}, &err) == NP_ERR_LIMIT);
    np_ctx_remove_observers(ctx, &late);
    np_ctx_reset_arena(ctx);

    /* module calls: a before event at np_module_begin (no tensors) and at
     * the start of the module's backward (the gradient arriving at its
     * output); an observer declining the module gets no module after
     * event but still sees the API calls inside it */
    np_module *m = np_module_new(ctx, "m", "M");
    who mod = {"mod", "Module.m.M", 0, 0};
    CHECK(np_ctx_add_observer(ctx, &(np_observer){0, module_before, after, &mod}, &err) == NP_OK);
    R.n = 0;
    CHECK(np_module_begin(ctx, m) == NP_OK);
    np_tensor *my = np_relu(ctx, x);
    CHECK(np_module_end(ctx, m, (np_tensor *const[]){x}, 1, (np_tensor *const[]){my}, 1) == NP_OK);
    CHECK(np_backward(ctx, np_sum(ctx, my)) == NP_OK);
    /* seqs: 0-3 above, 4 and 5 the two relu calls after them; the module's
     * before event has the next event's seq (its first inner call's), its
     * after event (declined here) takes 7 */
    static const char *const want_mod[] = {
        "mod before Module.m.M.forward.0 6 t0",        "mod before Functional.relu.3.forward 6 t1",
        "mod after Functional.relu.3.forward 6",       "mod before Torch.sum.1.forward 8 t1",
        "mod after Torch.sum.1.forward 8",             "mod before Torch.sum.1.backward 9 t1",
        "mod after Torch.sum.1.backward 9",            "mod before Module.m.M.backward.0 10 t1",
        "mod before Functional.relu.3.backward 10 t1", "mod after Functional.relu.3.backward 10",
    };
    int nm = (int)(sizeof want_mod / sizeof want_mod[0]);
    CHECK_EQ_INT(R.n, nm);
    for (int i = 0; i < nm && i < R.n; i++)
        CHECK_MSG(strcmp(R.log[i], want_mod[i]) == 0, "module event %d: got '%s', want '%s'", i,
                  R.log[i], want_mod[i]);
    CHECK_EQ_INT(mod.befores, 6);
    CHECK_EQ_INT(mod.afters, 4);
    np_ctx_remove_observers(ctx, &mod);
    np_ctx_reset_arena(ctx);

    /* the cost of a call (no recording: a plain tensor) */
    np_tensor *z = np_tensor_new(ctx, NP_FLOAT32, 1, (const int64_t[]){4});
    np_tensor_fill_normal(z, 1, 1, 0.0, 1.0);
    int n = 50000;
    double none = ns_per_call(ctx, z, n);
    who quiet = {"q", "", 0, 0}; /* declines every call */
    np_ctx_add_observer(ctx, &(np_observer){0, before, NULL, &quiet}, &err);
    double declined = ns_per_call(ctx, z, n);
    np_ctx_remove_observers(ctx, &quiet);
    np_ctx_add_observer(ctx, &(np_observer){0, NULL, after, &quiet}, &err);
    double listened = ns_per_call(ctx, z, n);
    np_ctx_remove_observers(ctx, &quiet);
    printf("np_relu on 4 floats: %.0f ns/call with no observer, %.0f with a declining before, "
           "%.0f with an after observer\n", none, declined, listened);
    R.n = 0;
    np_ctx_free(ctx);
    return check_report();
}
