/* runtime/optim.c - SGD with momentum and AdamW with PyTorch's update rules,
 * global grad-norm clipping (norm in double) and the warmup + cosine
 * learning-rate schedule. Updates run elementwise in float32, parallel over
 * parameters' elements, so bits do not depend on the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nprobe/model.h"
#include "rt_internal.h"

struct np_optim {
    np_optim_config cfg;
    np_tensor *const *params;  /* borrowed */
    int n;
    int64_t t;                 /* updates done */
    float **slot[2];           /* [slot][param] -> numel floats, or NULL */
    int n_slots;
};

static const char *const optim_names[NP_OPTIM_KIND_COUNT] = {
    [NP_OPTIM_ADAMW] = "adamw", [NP_OPTIM_SGD] = "sgd",
};

const char *np_optim_kind_name(np_optim_kind k)
{
    return (unsigned)k < NP_OPTIM_KIND_COUNT ? optim_names[k] : "unknown";
}

int np_optim_kind_from_name(const char *name)
{
    for (int i = 0; name && i < NP_OPTIM_KIND_COUNT; i++)
        if (strcmp(name, optim_names[i]) == 0)
            return i;
    return -1;
}

void np_optim_config_default(np_optim_config *c, np_optim_kind kind)
{
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->lr = kind == NP_OPTIM_SGD ? 0.05 : 1e-3;
    c->momentum = 0.9;
    c->beta1 = 0.9;
    c->beta2 = 0.95;
    c->eps = 1e-8;
    c->weight_decay = kind == NP_OPTIM_SGD ? 0.0 : 0.01;
}

np_status np_optim_new(np_optim **out, const np_optim_config *c, np_tensor *const *params,
                       int n, np_error *err)
{
    *out = NULL;
    if ((unsigned)c->kind >= NP_OPTIM_KIND_COUNT)
        return np_error_set(err, NP_ERR_ARG, NULL, "optim", "unknown optimizer kind %d", (int)c->kind);
    for (int i = 0; i < n; i++)
        if (!params[i] || !np_tensor_f32(params[i]) || !params[i]->grad)
            return np_error_set(err, NP_ERR_ARG, NULL, params[i] && params[i]->name ? params[i]->name : "param",
                                "expected a float parameter with a gradient buffer");
    np_optim *o = calloc(1, sizeof *o);
    if (!o)
        return np_error_set(err, NP_ERR_NOMEM, NULL, "optim", "out of memory");
    o->cfg = *c;
    o->params = params;
    o->n = n;
    o->n_slots = c->kind == NP_OPTIM_ADAMW ? 2 : 1;
    for (int s = 0; s < o->n_slots; s++) {
        o->slot[s] = calloc((size_t)(n > 0 ? n : 1), sizeof *o->slot[s]);
        if (!o->slot[s])
            goto nomem;
        for (int i = 0; i < n; i++) {
            o->slot[s][i] = calloc((size_t)params[i]->numel, sizeof(float));
            if (!o->slot[s][i] && params[i]->numel > 0)
                goto nomem;
        }
    }
    *out = o;
    return NP_OK;
nomem:
    np_optim_free(o);
    return np_error_set(err, NP_ERR_NOMEM, NULL, "optim", "out of memory for the optimizer state");
}

void np_optim_free(np_optim *o)
{
    if (!o)
        return;
    for (int s = 0; s < 2; s++) {
        if (!o->slot[s])
            continue;
        for (int i = 0; i < o->n; i++)
            free(o->slot[s][i]);
        free(o->slot[s]);
    }
    free(o);
}

const np_optim_config *np_optim_get_config(const np_optim *o) { return &o->cfg; }
int64_t np_optim_steps(const np_optim *o) { return o->t; }
void np_optim_set_steps(np_optim *o, int64_t t) { o->t = t; }
int np_optim_n_slots(const np_optim *o) { return o->n_slots; }

const char *np_optim_slot_name(const np_optim *o, int slot)
{
    if (o->cfg.kind == NP_OPTIM_SGD)
        return slot == 0 ? "momentum_buffer" : NULL;
    return slot == 0 ? "exp_avg" : slot == 1 ? "exp_avg_sq" : NULL;
}

float *np_optim_slot(np_optim *o, int slot, int i)
{
    if (slot < 0 || slot >= o->n_slots || i < 0 || i >= o->n)
        return NULL;
    return o->slot[slot][i];
}

/* Round updated low-precision parameters to their dtype, in a pass of its
 * own so the update loops stay free of calls and vectorise (float32, the
 * usual master-weight dtype, needs no rounding). */
static void round_params(const np_tensor *p)
{
    if (p->dtype != NP_BFLOAT16 && p->dtype != NP_FLOAT16)
        return;
    float *w = np_tensor_f32(p);
    for (int64_t k = 0; k < p->numel; k++)
        w[k] = np_round_to(p->dtype, w[k]);
}

static void sgd_update(np_optim *o, int i, float lr)
{
    const np_tensor *p = o->params[i];
    float *w = np_tensor_f32(p);
    const float *g = p->grad;
    float *buf = o->slot[0][i];
    float mom = (float)o->cfg.momentum;
    float wd = p->ndim >= 2 ? (float)o->cfg.weight_decay : 0.0f;
    int first = o->t == 0;
    int64_t n = p->numel;
#pragma omp parallel for schedule(static) if (rt_par_all || n > 65536)
    for (int64_t k = 0; k < n; k++) {
        float d = g[k];
        if (wd != 0.0f)
            d = d + wd * w[k];
        float b = first ? d : mom * buf[k] + d;
        buf[k] = b;
        w[k] = w[k] - lr * b;
    }
    round_params(p);
}

static void adamw_update(np_optim *o, int i, double lr)
{
    const np_tensor *p = o->params[i];
    float *w = np_tensor_f32(p);
    const float *g = p->grad;
    float *m = o->slot[0][i], *v = o->slot[1][i];
    double t = (double)(o->t + 1);
    float b1 = (float)o->cfg.beta1, b2 = (float)o->cfg.beta2;
    float omb1 = (float)(1.0 - o->cfg.beta1), omb2 = (float)(1.0 - o->cfg.beta2);
    double bc1 = 1.0 - pow(o->cfg.beta1, t);
    double bc2 = 1.0 - pow(o->cfg.beta2, t);
    float step_size = (float)(lr / bc1);
    float bc2_sqrt = (float)sqrt(bc2);
    float eps = (float)o->cfg.eps;
    float decay = p->ndim >= 2 ? (float)(1.0 - lr * o->cfg.weight_decay) : 1.0f;
    int64_t n = p->numel;
#pragma omp parallel for schedule(static) if (rt_par_all || n > 65536)
    for (int64_t k = 0; k < n; k++) {
        float wk = w[k] * decay;
        float mk = m[k] * b1 + omb1 * g[k];
        float vk = v[k] * b2 + omb2 * g[k] * g[k];
        m[k] = mk;
        v[k] = vk;
        float denom = sqrtf(vk) / bc2_sqrt + eps;
        w[k] = wk - step_size * (mk / denom);
    }
    round_params(p);
}

void np_optim_step(np_optim *o, double lr)
{
    for (int i = 0; i < o->n; i++) {
        if (o->cfg.kind == NP_OPTIM_SGD)
            sgd_update(o, i, (float)lr);
        else
            adamw_update(o, i, lr);
    }
    o->t++;
}

/* Per-parameter sums of squares in double, then summed in parameter order:
 * the result does not depend on the thread count. */
double np_grad_norm(np_tensor *const *params, int n)
{
    double total = 0.0;
    for (int i = 0; i < n; i++) {
        const float *g = params[i]->grad;
        if (!g)
            continue;
        double s = 0.0;
        for (int64_t k = 0; k < params[i]->numel; k++)
            s += (double)g[k] * (double)g[k];
        total += s;
    }
    return sqrt(total);
}

double np_clip_grad_norm(np_tensor *const *params, int n, double max_norm)
{
    double norm = np_grad_norm(params, n);
    double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0) {
        float c = (float)coef;
        for (int i = 0; i < n; i++) {
            float *g = params[i]->grad;
            if (!g)
                continue;
            for (int64_t k = 0; k < params[i]->numel; k++)
                g[k] *= c;
        }
    }
    return norm;
}

double np_lr_schedule(int64_t step, double lr, double min_lr, int64_t warmup, int64_t total)
{
    if (step < warmup)
        return lr * (double)(step + 1) / (double)warmup;
    int64_t span = total - warmup;
    double p = (double)(step - warmup) / (double)(span > 1 ? span : 1);
    if (p > 1.0)
        p = 1.0;
    if (p < 0.0)
        p = 0.0;
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + cos(3.14159265358979323846 * p));
}
