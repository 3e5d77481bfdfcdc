/* runtime/train_state.c - a copy of the trainer's state at a step's start
 * (weights, optimizer state and counter, loss scaler, step), written later
 * as a checkpoint of that step: the monitor's ring of the last steps, so an
 * anomaly seen at or after the update still has the state its step began
 * from (docs/MONITOR.md "Dump on anomaly"). Tensor parallel: the rank's
 * shards; a pipeline: the stage's parameters only (its optimizer's
 * indices); the checkpoint written from it gathers them as a --save does. */
#include <stdlib.h>
#include <string.h>

#include "model_train_internal.h"
#include "nprobe/model.h"

struct np_train_state {
    int n, n_slots;
    int *opt;          /* [param] its index in the optimizer (a pipeline: the stage's; -1:
                          another stage's parameter, not kept) */
    void **data;       /* [param] a copy of params[i]->data */
    float **slot[2];   /* [slot][param] */
    int64_t optim_t, step;
    np_scaler scaler;
    int taken;
};

void np_train_state_free(np_train_state *s)
{
    if (!s)
        return;
    for (int i = 0; s->data && i < s->n; i++)
        free(s->data[i]);
    free(s->data);
    free(s->opt);
    for (int k = 0; k < 2; k++) {
        for (int i = 0; s->slot[k] && i < s->n; i++)
            free(s->slot[k][i]);
        free(s->slot[k]);
    }
    free(s);
}

np_status np_train_state_new(np_train_state **out, const np_trainer *tr, np_error *err)
{
    *out = NULL;
    int n = 0;
    np_tensor *const *p = np_model_params(tr->model, &n);
    np_train_state *s = calloc(1, sizeof *s);
    if (!s)
        goto nomem;
    s->n = n;
    s->n_slots = np_optim_n_slots(tr->optim);
    s->data = calloc((size_t)(n > 0 ? n : 1), sizeof *s->data);
    s->opt = calloc((size_t)(n > 0 ? n : 1), sizeof *s->opt);
    if (!s->data || !s->opt)
        goto nomem;
    for (int k = 0; k < s->n_slots; k++)
        if (!(s->slot[k] = calloc((size_t)(n > 0 ? n : 1), sizeof *s->slot[k])))
            goto nomem;
    for (int i = 0; i < n; i++) {
        s->opt[i] = tr->pp ? np_pp_index(tr->pp, p[i]) : i;
        if (s->opt[i] < 0)
            continue;
        size_t nb = np_tensor_nbytes(p[i]);
        if (!(s->data[i] = malloc(nb ? nb : 1)))
            goto nomem;
        for (int k = 0; k < s->n_slots; k++)
            if (!(s->slot[k][i] = malloc((size_t)(p[i]->numel > 0 ? p[i]->numel : 1) * sizeof(float))))
                goto nomem;
    }
    *out = s;
    return NP_OK;
nomem:
    np_train_state_free(s);
    return np_error_set(err, NP_ERR_NOMEM, NULL, "monitor", "out of memory for a copy of the training state");
}

void np_train_state_take(np_train_state *s, np_trainer *tr)
{
    int n = 0;
    np_tensor *const *p = np_model_params(tr->model, &n);
    for (int i = 0; i < n && i < s->n; i++) {
        if (s->opt[i] < 0)
            continue;
        memcpy(s->data[i], p[i]->data, np_tensor_nbytes(p[i]));
        for (int k = 0; k < s->n_slots; k++)
            memcpy(s->slot[k][i], np_optim_slot(tr->optim, k, s->opt[i]),
                   (size_t)p[i]->numel * sizeof(float));
    }
    s->optim_t = np_optim_steps(tr->optim);
    s->step = tr->step;
    s->scaler = tr->scaler;
    s->taken = 1;
}

int64_t np_train_state_step(const np_train_state *s)
{
    return s && s->taken ? s->step : -1;
}

/* exchange the copy with the trainer's own buffers and counters (twice:
 * back as it was) */
static void swap_in(np_train_state *s, np_trainer *tr)
{
    int n = 0;
    np_tensor *const *p = np_model_params(tr->model, &n);
    for (int i = 0; i < n && i < s->n; i++) {
        if (s->opt[i] < 0)
            continue;
        void *d = p[i]->data;
        p[i]->data = s->data[i];
        s->data[i] = d;
        for (int k = 0; k < s->n_slots; k++)
            s->slot[k][i] = np_optim_swap_slot(tr->optim, k, s->opt[i], s->slot[k][i]);
    }
    int64_t t = np_optim_steps(tr->optim);
    np_optim_set_steps(tr->optim, s->optim_t);
    s->optim_t = t;
    int64_t step = tr->step;
    tr->step = s->step;
    s->step = step;
    np_scaler sc = tr->scaler;
    tr->scaler = s->scaler;
    s->scaler = sc;
}

np_status np_train_state_save(np_train_state *s, np_trainer *tr, const char *path, np_error *err)
{
    if (!s->taken)
        return np_error_set(err, NP_ERR_ARG, path, "monitor", "no training state was kept");
    swap_in(s, tr);
    np_status st = np_trainer_save(tr, path, err);
    swap_in(s, tr);
    return st;
}
