/* runtime/ctx.c - the runtime context: options, errors, the step arena
 * (llm.c-style slabs reset at step end), persistent tensors and parameters,
 * modules and module calls, the tape, hook emission and the backward driver. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "nprobe/precision.h"
#include "rt_internal.h"

#define RT_ALIGN 64
#define RT_DEFAULT_ARENA ((size_t)64 << 20)

static const char *const device_names[] = { /* enum order, no designators: the size check below sees a missing name */
    "cpu", "npu-sim",
};
_Static_assert(sizeof device_names / sizeof device_names[0] == NP_DEVICE_COUNT,
               "device_names must name every device");

const char *np_device_name(np_device d)
{
    return (unsigned)d < NP_DEVICE_COUNT ? device_names[d] : "unknown";
}

int np_device_from_name(const char *name)
{
    if (!name)
        return -1;
    for (int i = 0; i < NP_DEVICE_COUNT; i++)
        if (strcmp(name, device_names[i]) == 0)
            return i;
    return -1;
}

/* ---- errors ---------------------------------------------------------------- */
void *rt_fail(np_ctx *ctx, np_status st, const char *key, const char *fmt, ...)
{
    if (ctx->err.status != NP_OK)
        return NULL;
    char buf[NP_ERROR_TEXT_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    np_error_set(&ctx->err, st, NULL, key, "%s", buf);
    return NULL;
}

np_status np_ctx_status(const np_ctx *ctx) { return ctx->err.status; }
const np_error *np_ctx_error(const np_ctx *ctx) { return &ctx->err; }
void np_ctx_clear_error(np_ctx *ctx) { np_error_clear(&ctx->err); }

/* ---- context ----------------------------------------------------------- */
void np_ctx_opts_default(np_ctx_opts *o)
{
    memset(o, 0, sizeof *o);
    o->device = NP_DEVICE_CPU;
    o->precision = NP_FLOAT32;
    o->fault = NP_FAULT_NONE;
}

np_status np_ctx_new(np_ctx **out, const np_ctx_opts *o, np_error *err)
{
    *out = NULL;
    np_ctx_opts d;
    np_ctx_opts_default(&d);
    if (!o)
        o = &d;
    if ((unsigned)o->device >= NP_DEVICE_COUNT)
        return np_error_set(err, NP_ERR_ARG, NULL, "device",
                            "unknown device %d (expected cpu or npu-sim)", (int)o->device);
    if (o->precision != NP_FLOAT32 && o->precision != NP_BFLOAT16 && o->precision != NP_FLOAT16)
        return np_error_set(err, NP_ERR_ARG, NULL, "precision",
                            "precision must be fp32, bf16 or fp16, got %s",
                            np_dtype_name(o->precision));
    if (o->lowp < 0 || o->lowp >= NP_LOWP_COUNT)
        return np_error_set(err, NP_ERR_ARG, NULL, "precision", "unknown low-precision format %d", o->lowp);
    if (o->lowp != NP_LOWP_NONE && o->precision != NP_FLOAT32)
        return np_error_set(err, NP_ERR_ARG, NULL, "precision",
                            "%s quantizes the GEMM operands of a float32 run; it does not combine with %s autocast",
                            np_lowp_name((np_lowp)o->lowp), np_dtype_name(o->precision));
    if (o->lowp == NP_LOWP_MXFP8_E5M2)
        return np_error_set(err, NP_ERR_ARG, NULL, "precision",
                            "mxfp8_e5m2 is the gradients' format of a quantized backward (lowp_backward 2), "
                            "not a run's (expected mxfp8 or hif8)");
    if (o->lowp_backward < 0 || o->lowp_backward > 2)
        return np_error_set(err, NP_ERR_ARG, NULL, "precision",
                            "lowp_backward must be 0, 1 or 2 (E5M2 gradients), got %d", o->lowp_backward);
    if (o->lowp_backward == 2 && o->lowp != NP_LOWP_MXFP8)
        return np_error_set(err, NP_ERR_ARG, NULL, "precision",
                            "E5M2 gradients (lowp_backward 2) are MxFP8's: expected mxfp8, got %s",
                            np_lowp_name((np_lowp)o->lowp));
    if (o->lowp_backward && o->lowp == NP_LOWP_NONE)
        return np_error_set(err, NP_ERR_ARG, NULL, "precision",
                            "a quantized backward (lowp_backward) needs a low-precision format (mxfp8 or hif8)");
    if (o->prec_fault < 0 || o->prec_fault >= NP_PREC_FAULT_COUNT)
        return np_error_set(err, NP_ERR_ARG, NULL, "fault", "unknown precision fault id %d", o->prec_fault);
    if ((int)o->fault < 0 || (int)o->fault >= NP_FAULT_COUNT)
        return np_error_set(err, NP_ERR_ARG, NULL, "fault", "unknown fault id %d", (int)o->fault);
    np_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory creating the runtime context");
    ctx->o = *o;
    ctx->micro_batch = -1;
    if (ctx->o.arena_bytes == 0)
        ctx->o.arena_bytes = RT_DEFAULT_ARENA;
    ctx->fault = o->device == NP_DEVICE_NPU_SIM ? o->fault : NP_FAULT_NONE;
    rt_kernels_for(&ctx->k, ctx->fault);
    rt_prec_kernels(&ctx->kp, &ctx->k, o->prec_fault);
    if (rt_fp32_setup(ctx)) {
        rt_fp32_free(ctx);
        free(ctx);
        return np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory creating the runtime context");
    }
    ctx->grad_enabled = 1;
    ctx->cur_mc = -1;
    rt_blas_setup();
    if (o->threads > 0)
        omp_set_num_threads(o->threads);
    *out = ctx;
    return NP_OK;
}

static void free_pers(rt_tensor *r)
{
    if (!r)
        return;
    free(r->t.data);
    free(r->t.grad);
    free(r->name_copy);
    free(r);
}

void np_ctx_free(np_ctx *ctx)
{
    if (!ctx)
        return;
    for (int i = 0; i < ctx->n_pers; i++)
        free_pers(ctx->pers[i]);
    free(ctx->pers);
    free(ctx->params);
    for (int i = 0; i < ctx->n_mods; i++) {
        np_module *m = ctx->mods[i];
        for (int k = 0; k < m->n_params; k++)
            free(m->keys[k]);
        free(m->keys);
        free(m->params);
        free(m->path);
        free(m->cls);
        free(m->name);
        free(m);
    }
    free(ctx->mods);
    rt_fp32_free(ctx);
    for (int i = 0; i < ctx->n_slabs; i++)
        free(ctx->slabs[i].base);
    free(ctx->nodes);
    free(ctx->mc);
    free(ctx);
}

static void obs_count(np_ctx *ctx)
{
    ctx->n_before = 0;
    for (int i = 0; i < ctx->n_obs; i++)
        ctx->n_before += ctx->obs[i].before != NULL;
}

/* Insert o after the observers of lower or equal order. */
static void obs_insert(np_ctx *ctx, const np_observer *o, int is_hook)
{
    int at = ctx->n_obs;
    while (at > 0 && ctx->obs[at - 1].order > o->order) {
        ctx->obs[at] = ctx->obs[at - 1];
        ctx->obs_hook[at] = ctx->obs_hook[at - 1];
        at--;
    }
    ctx->obs[at] = *o;
    ctx->obs_hook[at] = is_hook;
    ctx->n_obs++;
    obs_count(ctx);
}

static void obs_remove_if(np_ctx *ctx, const void *user, int hook_only)
{
    int k = 0;
    for (int i = 0; i < ctx->n_obs; i++) {
        if (hook_only ? ctx->obs_hook[i] : ctx->obs[i].user == user)
            continue;
        ctx->obs[k] = ctx->obs[i];
        ctx->obs_hook[k++] = ctx->obs_hook[i];
    }
    ctx->n_obs = k;
    obs_count(ctx);
}

void np_ctx_set_hook(np_ctx *ctx, np_hook_fn fn, void *user)
{
    obs_remove_if(ctx, NULL, 1);
    if (fn && ctx->n_obs < NP_CTX_MAX_OBSERVERS)
        obs_insert(ctx, &(np_observer){0, NULL, fn, user}, 1);
}

np_status np_ctx_add_observer(np_ctx *ctx, const np_observer *obs, np_error *err)
{
    if (!obs || (!obs->before && !obs->after))
        return np_error_set(err, NP_ERR_ARG, NULL, "observer", "an observer needs a before or an after callback");
    if (ctx->n_obs == NP_CTX_MAX_OBSERVERS)
        return np_error_set(err, NP_ERR_LIMIT, NULL, "observer", "at most %d observers",
                            NP_CTX_MAX_OBSERVERS);
    obs_insert(ctx, obs, 0);
    return NP_OK;
}

void np_ctx_remove_observers(np_ctx *ctx, const void *user)
{
    obs_remove_if(ctx, user, 0);
}

int np_ctx_stop_requested(const np_ctx *ctx) { return ctx->stop; }
const np_ctx_opts *np_ctx_options(const np_ctx *ctx) { return &ctx->o; }
np_fault np_ctx_active_fault(const np_ctx *ctx) { return ctx->fault; }
void np_ctx_set_grad_enabled(np_ctx *ctx, int enabled) { ctx->grad_enabled = enabled != 0; }
int np_ctx_grad_enabled(const np_ctx *ctx) { return ctx->grad_enabled; }
void np_ctx_set_callsite(np_ctx *ctx, const char *callsite)
{
    ctx->site = (rt_site){callsite, NULL, NULL, 0};
}

void np_ctx_set_callsite_at(np_ctx *ctx, const char *file, int line, const char *func)
{
    ctx->site = (rt_site){NULL, file, func, line};
}

/* The pending callsite, cleared: it belongs to one call. */
static rt_site take_site(np_ctx *ctx)
{
    rt_site s = ctx->site;
    ctx->site = (rt_site){NULL, NULL, NULL, 0};
    return s;
}

/* "basename:LINE function" of s in ctx->site_buf (valid during the event), or NULL. */
static const char *site_str(np_ctx *ctx, const rt_site *s)
{
    if (s->str)
        return s->str;
    if (!s->file)
        return NULL;
    const char *base = strrchr(s->file, '/');
    base = base ? base + 1 : s->file;
    snprintf(ctx->site_buf, sizeof ctx->site_buf, "%s:%d %s", base, s->line, s->func ? s->func : "?");
    return ctx->site_buf;
}
int np_ctx_step(const np_ctx *ctx) { return ctx->step; }
void np_ctx_set_step(np_ctx *ctx, int step) { ctx->step = step; }
void np_ctx_set_micro_batch(np_ctx *ctx, int m) { ctx->micro_batch = m < 0 ? -1 : m; }
int np_ctx_micro_batch(const np_ctx *ctx) { return ctx->micro_batch; }

np_dtype rt_ac(const np_ctx *ctx) { return ctx->ac_off ? NP_FLOAT32 : ctx->o.precision; }

np_dtype rt_promote(np_dtype a, np_dtype b)
{
    if (a == b)
        return a;
    if (a == NP_FLOAT64 || b == NP_FLOAT64)
        return NP_FLOAT64;
    return NP_FLOAT32;
}

/* ---- arena ------------------------------------------------------------- */
static int slab_new(np_ctx *ctx, size_t size)
{
    if (ctx->n_slabs >= RT_MAX_SLABS)
        return -1;
    size = (size + RT_ALIGN - 1) / RT_ALIGN * RT_ALIGN;
    void *p = NULL;
    if (posix_memalign(&p, RT_ALIGN, size) != 0)
        return -1;
    ctx->slabs[ctx->n_slabs].base = p;
    ctx->slabs[ctx->n_slabs].size = size;
    ctx->slabs[ctx->n_slabs].used = 0;
    ctx->cur_slab = ctx->n_slabs++;
    return 0;
}

void *rt_alloc(np_ctx *ctx, size_t bytes)
{
    size_t need = (bytes + RT_ALIGN - 1) / RT_ALIGN * RT_ALIGN;
    if (need == 0)
        need = RT_ALIGN;
    for (int i = ctx->n_slabs ? ctx->cur_slab : 0; i < ctx->n_slabs; i++) {
        rt_slab *s = &ctx->slabs[i];
        if (s->size - s->used >= need) {
            void *p = s->base + s->used;
            s->used += need;
            ctx->cur_slab = i;
            return p;
        }
    }
    size_t sz = ctx->o.arena_bytes;
    if (sz < need * 2)
        sz = need * 2;
    if (slab_new(ctx, sz) != 0)
        return rt_fail(ctx, NP_ERR_NOMEM, NULL, "out of memory: step arena cannot grow by %zu bytes", sz);
    rt_slab *s = &ctx->slabs[ctx->cur_slab];
    s->used = need;
    return s->base;
}

void *rt_calloc(np_ctx *ctx, size_t bytes)
{
    void *p = rt_alloc(ctx, bytes);
    if (p)
        memset(p, 0, bytes);
    return p;
}

size_t np_ctx_arena_bytes(const np_ctx *ctx)
{
    size_t n = 0;
    for (int i = 0; i < ctx->n_slabs; i++)
        n += ctx->slabs[i].size;
    return n;
}

static void arena_reset(np_ctx *ctx)
{
    if (ctx->n_slabs > 1) {
        /* consolidate into one slab so the next step never mallocs */
        size_t total = np_ctx_arena_bytes(ctx);
        for (int i = 0; i < ctx->n_slabs; i++)
            free(ctx->slabs[i].base);
        ctx->n_slabs = 0;
        if (slab_new(ctx, total) != 0)
            rt_fail(ctx, NP_ERR_NOMEM, NULL, "out of memory: cannot reserve a %zu-byte arena", total);
    }
    for (int i = 0; i < ctx->n_slabs; i++)
        ctx->slabs[i].used = 0;
    ctx->cur_slab = 0;
}

static void tape_clear(np_ctx *ctx)
{
    ctx->n_nodes = 0;
    ctx->n_mc = 0;
    ctx->cur_mc = -1;
}

void np_ctx_reset_arena(np_ctx *ctx)
{
    tape_clear(ctx);
    arena_reset(ctx);
}

/* ---- tensors ------------------------------------------------------------- */
int64_t np_shape_numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    return n;
}

int np_tensor_same_shape(const np_tensor *a, const np_tensor *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return 0;
    return 1;
}

static int shape_ok(np_ctx *ctx, np_dtype dt, int ndim, const int64_t *shape)
{
    if ((unsigned)dt >= NP_DTYPE_COUNT) {
        rt_fail(ctx, NP_ERR_DTYPE, NULL, "unknown dtype %d", (int)dt);
        return 0;
    }
    if (ndim < 0 || ndim > NP_MAX_DIMS || (ndim > 0 && !shape)) {
        rt_fail(ctx, NP_ERR_SHAPE, NULL, "tensor rank %d outside [0, %d]", ndim, NP_MAX_DIMS);
        return 0;
    }
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0) {
            rt_fail(ctx, NP_ERR_SHAPE, NULL, "negative size %lld in dim %d",
                    (long long)shape[i], i);
            return 0;
        }
    return 1;
}

static void set_shape(np_tensor *t, np_dtype dt, int ndim, const int64_t *shape)
{
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        t->shape[i] = shape[i];
    t->numel = np_shape_numel(ndim, shape);
}

np_tensor *rt_new(np_ctx *ctx, np_dtype dt, int ndim, const int64_t *shape)
{
    if (!shape_ok(ctx, dt, ndim, shape))
        return NULL;
    rt_tensor *r = rt_calloc(ctx, sizeof *r);
    if (!r)
        return NULL;
    set_shape(&r->t, dt, ndim, shape);
    r->t.rt = r;
    r->t.data = rt_alloc(ctx, (size_t)r->t.numel * np_dtype_storage_size(dt));
    return r->t.data ? &r->t : NULL;
}

np_tensor *rt_wrap(np_ctx *ctx, const np_tensor *like, void *data, np_dtype dt)
{
    rt_tensor *r = rt_calloc(ctx, sizeof *r);
    if (!r)
        return NULL;
    set_shape(&r->t, dt, like->ndim, like->shape);
    r->t.rt = r;
    r->t.data = data;
    return &r->t;
}

np_tensor *np_tensor_tmp(np_ctx *ctx, np_dtype dt, int ndim, const int64_t *shape)
{
    np_tensor *t = rt_new(ctx, dt, ndim, shape);
    if (t)
        memset(t->data, 0, np_tensor_nbytes(t));
    return t;
}

static int grow(void **arr, int *cap, int need, size_t elem)
{
    if (need <= *cap)
        return 0;
    int nc = *cap ? *cap * 2 : 16;
    while (nc < need)
        nc *= 2;
    void *p = realloc(*arr, (size_t)nc * elem);
    if (!p)
        return -1;
    *arr = p;
    *cap = nc;
    return 0;
}

np_tensor *np_tensor_new(np_ctx *ctx, np_dtype dt, int ndim, const int64_t *shape)
{
    if (!shape_ok(ctx, dt, ndim, shape))
        return NULL;
    if (grow((void **)&ctx->pers, &ctx->cap_pers, ctx->n_pers + 1, sizeof *ctx->pers) != 0)
        return rt_fail(ctx, NP_ERR_NOMEM, NULL, "out of memory");
    rt_tensor *r = calloc(1, sizeof *r);
    if (!r)
        return rt_fail(ctx, NP_ERR_NOMEM, NULL, "out of memory");
    set_shape(&r->t, dt, ndim, shape);
    r->t.rt = r;
    r->persistent = 1;
    size_t nb = np_tensor_nbytes(&r->t);
    r->t.data = calloc(nb ? nb : 1, 1);
    if (!r->t.data) {
        free(r);
        return rt_fail(ctx, NP_ERR_NOMEM, NULL, "out of memory allocating %zu bytes", nb);
    }
    ctx->pers[ctx->n_pers++] = r;
    return &r->t;
}

np_tensor *np_tensor_new_param(np_ctx *ctx, np_dtype dt, int ndim,
                               const int64_t *shape, const char *name)
{
    if (!np_dtype_is_floating(dt) || dt == NP_FLOAT64)
        return rt_fail(ctx, NP_ERR_DTYPE, name, "parameter dtype must be float32, bfloat16 or float16, got %s",
                       np_dtype_name(dt));
    if (grow((void **)&ctx->params, &ctx->cap_params, ctx->n_params + 1, sizeof *ctx->params) != 0)
        return rt_fail(ctx, NP_ERR_NOMEM, name, "out of memory");
    np_tensor *t = np_tensor_new(ctx, dt, ndim, shape);
    if (!t)
        return NULL;
    rt_tensor *r = RT_T(t);
    r->is_param = 1;
    t->grad = calloc((size_t)(t->numel ? t->numel : 1), sizeof(float));
    if (name) {
        size_t l = strlen(name);
        r->name_copy = malloc(l + 1);
        if (r->name_copy)
            memcpy(r->name_copy, name, l + 1);
        t->name = r->name_copy;
    }
    if (!t->grad || (name && !r->name_copy)) {
        np_tensor_free(ctx, t);
        return rt_fail(ctx, NP_ERR_NOMEM, name, "out of memory");
    }
    t->requires_grad = 1;
    ctx->params[ctx->n_params++] = t;
    return t;
}

void np_tensor_free(np_ctx *ctx, np_tensor *t)
{
    if (!t || !t->rt || !RT_T(t)->persistent)
        return;
    for (int i = 0; i < ctx->n_params; i++)
        if (ctx->params[i] == t) {
            memmove(&ctx->params[i], &ctx->params[i + 1],
                    (size_t)(ctx->n_params - i - 1) * sizeof *ctx->params);
            ctx->n_params--;
            break;
        }
    for (int i = 0; i < ctx->n_pers; i++)
        if (ctx->pers[i] == RT_T(t)) {
            ctx->pers[i] = ctx->pers[--ctx->n_pers];
            break;
        }
    free_pers(RT_T(t));
}

np_tensor *const *np_ctx_params(const np_ctx *ctx, int *n)
{
    *n = ctx->n_params;
    return ctx->params;
}

void np_ctx_zero_grads(np_ctx *ctx)
{
    for (int i = 0; i < ctx->n_params; i++)
        if (ctx->params[i]->grad)
            memset(ctx->params[i]->grad, 0, (size_t)ctx->params[i]->numel * sizeof(float));
}

np_status np_tensor_set_requires_grad(np_ctx *ctx, np_tensor *t, int on)
{
    if (!t)
        return NP_ERR_ARG;
    if (on && !np_dtype_is_floating(t->dtype)) {
        rt_fail(ctx, NP_ERR_DTYPE, t->name, "only floating tensors can require grad, got %s",
                np_dtype_name(t->dtype));
        return NP_ERR_DTYPE;
    }
    t->requires_grad = on != 0;
    if (on && t->rt && RT_T(t)->persistent && !t->grad) {
        t->grad = calloc((size_t)(t->numel ? t->numel : 1), sizeof(float));
        if (!t->grad) {
            rt_fail(ctx, NP_ERR_NOMEM, t->name, "out of memory");
            return NP_ERR_NOMEM;
        }
    }
    return NP_OK;
}

float *np_tensor_f32(const np_tensor *t)
{
    if (!t || (t->dtype != NP_FLOAT32 && t->dtype != NP_BFLOAT16 && t->dtype != NP_FLOAT16))
        return NULL;
    return (float *)t->data;
}

int64_t *np_tensor_i64(const np_tensor *t)
{
    return t && t->dtype == NP_INT64 ? (int64_t *)t->data : NULL;
}

void np_tensor_fill(np_tensor *t, double v)
{
    switch (t->dtype) {
    case NP_FLOAT64:
        for (int64_t i = 0; i < t->numel; i++)
            ((double *)t->data)[i] = v;
        break;
    case NP_INT64:
        for (int64_t i = 0; i < t->numel; i++)
            ((int64_t *)t->data)[i] = (int64_t)v;
        break;
    case NP_INT32:
        for (int64_t i = 0; i < t->numel; i++)
            ((int32_t *)t->data)[i] = (int32_t)v;
        break;
    case NP_BOOL:
        memset(t->data, v != 0.0, (size_t)t->numel);
        break;
    default: {
        float f = np_round_to(t->dtype, (float)v);
        for (int64_t i = 0; i < t->numel; i++)
            ((float *)t->data)[i] = f;
    }
    }
}

np_status np_tensor_copy_f32(np_tensor *t, const float *src, int64_t n, np_error *err)
{
    float *d = np_tensor_f32(t);
    if (!d)
        return np_error_set(err, NP_ERR_DTYPE, NULL, t->name, "copy_f32 needs a float32/bf16/fp16 tensor, got %s",
                            np_dtype_name(t->dtype));
    if (n != t->numel)
        return np_error_set(err, NP_ERR_SHAPE, NULL, t->name, "expected %lld values, got %lld",
                            (long long)t->numel, (long long)n);
    for (int64_t i = 0; i < n; i++)
        d[i] = np_round_to(t->dtype, src[i]);
    return NP_OK;
}

np_status np_tensor_copy_i64(np_tensor *t, const int64_t *src, int64_t n, np_error *err)
{
    if (t->dtype != NP_INT64 && t->dtype != NP_INT32)
        return np_error_set(err, NP_ERR_DTYPE, NULL, t->name, "copy_i64 needs an int64/int32 tensor, got %s",
                            np_dtype_name(t->dtype));
    if (n != t->numel)
        return np_error_set(err, NP_ERR_SHAPE, NULL, t->name, "expected %lld values, got %lld",
                            (long long)t->numel, (long long)n);
    for (int64_t i = 0; i < n; i++) {
        if (t->dtype == NP_INT64)
            ((int64_t *)t->data)[i] = src[i];
        else
            ((int32_t *)t->data)[i] = (int32_t)src[i];
    }
    return NP_OK;
}

np_status np_tensor_copy(np_tensor *dst, const np_tensor *src, np_error *err)
{
    if (dst->dtype != src->dtype || dst->numel != src->numel)
        return np_error_set(err, NP_ERR_SHAPE, NULL, dst->name,
                            "copy needs equal dtype and size (%s[%lld] vs %s[%lld])",
                            np_dtype_name(dst->dtype), (long long)dst->numel,
                            np_dtype_name(src->dtype), (long long)src->numel);
    memcpy(dst->data, src->data, np_tensor_nbytes(src));
    return NP_OK;
}

/* ---- random tensors (the generator: numeric.c) ------------------------------ */
void np_tensor_fill_uniform(np_tensor *t, uint64_t seed, uint64_t stream, double lo, double hi)
{
    float *d = np_tensor_f32(t);
    if (!d)
        return;
    uint64_t key = rt_mix64(seed ^ rt_mix64(stream + 1));
    for (int64_t i = 0; i < t->numel; i++) {
        double u = (double)(np_rng_u64(key, (uint64_t)i) >> 11) * (1.0 / 9007199254740992.0);
        d[i] = np_round_to(t->dtype, (float)(lo + (hi - lo) * u));
    }
}

void np_tensor_fill_normal(np_tensor *t, uint64_t seed, uint64_t stream, double mean, double std)
{
    float *d = np_tensor_f32(t);
    if (!d)
        return;
    uint64_t key = rt_mix64(seed ^ rt_mix64(stream + 1));
    for (int64_t i = 0; i < t->numel; i++) {
        /* Box-Muller on two 53-bit uniforms from counters 2i, 2i+1 */
        double u1 = ((double)(np_rng_u64(key, 2 * (uint64_t)i) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
        double u2 = (double)(np_rng_u64(key, 2 * (uint64_t)i + 1) >> 11) * (1.0 / 9007199254740992.0);
        double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
        d[i] = np_round_to(t->dtype, (float)(mean + std * z));
    }
}

/* ---- rounded copies (rt_round_buf: numeric.c) ------------------------------ */
float *rt_rounded(np_ctx *ctx, const np_tensor *t, np_dtype dt)
{
    float *src = (float *)t->data;
    if (dt != NP_BFLOAT16 && dt != NP_FLOAT16)
        return src;
    if (t->dtype == dt)
        return src;
    float *d = rt_alloc(ctx, (size_t)t->numel * sizeof(float));
    if (!d)
        return NULL;
    memcpy(d, src, (size_t)t->numel * sizeof(float));
    rt_round_buf(d, t->numel, dt);
    return d;
}

int rt_need_float(np_ctx *ctx, const np_tensor *t, const char *api, const char *what)
{
    if (!t)
        return 0;
    if (t->dtype != NP_FLOAT32 && t->dtype != NP_BFLOAT16 && t->dtype != NP_FLOAT16) {
        rt_fail(ctx, NP_ERR_DTYPE, api, "%s: %s must be float32, bfloat16 or float16, got %s",
                api, what, np_dtype_name(t->dtype));
        return 0;
    }
    return 1;
}

/* ---- events --------------------------------------------------------------- */
/* The after event to every observer that did not decline it (bit i of
 * `declined`); non-zero (and a stop request) when one asked to stop. */
static int emit_masked(np_ctx *ctx, np_hook_event *ev, unsigned declined)
{
    ev->step = ctx->step;
    ev->rank = ctx->o.rank;
    ev->seq = ctx->seq;
    if (ev->kind != NP_EV_STEP_BEGIN && ev->kind != NP_EV_STEP_END)
        ctx->seq++;
    int r = 0;
    for (int i = 0; i < ctx->n_obs; i++)
        if (ctx->obs[i].after && !((declined >> i) & 1u)) {
            int ri = ctx->obs[i].after(ev, ctx->obs[i].user);
            if (ri != 0 && r == 0)
                r = ri;
        }
    if (r != 0)
        ctx->stop = 1;
    return r;
}

static int emit_raw(np_ctx *ctx, np_hook_event *ev)
{
    return emit_masked(ctx, ev, 0u);
}

/* The before event (no seq taken: it is the after event's); the mask of
 * the observers that declined the call, and those without a before or
 * after callback need no after event either. */
static unsigned emit_before(np_ctx *ctx, np_hook_event *ev)
{
    ev->step = ctx->step;
    ev->rank = ctx->o.rank;
    ev->seq = ctx->seq;
    unsigned declined = 0;
    for (int i = 0; i < ctx->n_obs; i++)
        if (ctx->obs[i].before && ctx->obs[i].before(ev, ctx->obs[i].user) != 0)
            declined |= 1u << i;
    return declined;
}

int np_ctx_emit(np_ctx *ctx, const np_hook_event *ev)
{
    np_hook_event e = *ev;
    return emit_raw(ctx, &e);
}

unsigned np_ctx_emit_begin(np_ctx *ctx, const np_hook_event *ev)
{
    np_hook_event e = *ev;
    return emit_before(ctx, &e);
}

int np_ctx_emit_end(np_ctx *ctx, const np_hook_event *ev, unsigned declined)
{
    np_hook_event e = *ev;
    return emit_masked(ctx, &e, declined);
}

static const char *parent_name(const np_ctx *ctx, int mcall, int backward)
{
    if (mcall < 0 || mcall >= ctx->n_mc)
        return NULL;
    return backward ? ctx->mc[mcall].bwd_name : ctx->mc[mcall].fwd_name;
}

static unsigned api_before(np_ctx *ctx, const rt_node *nd, int backward, const np_hook_tensor *ts,
                           int nt);

void rt_node_init(np_ctx *ctx, rt_node *nd, np_op op, np_tensor *const *in, int n_in)
{
    memset(nd, 0, sizeof *nd);
    nd->kind = RT_NODE_API;
    nd->op = op;
    /* recorded in the dump: this call ran in float32 (a per-op override, or
     * the model's autocast-off region: the MoE router), so the replay
     * recomputes it unrounded and unquantized */
    if (rt_promoted(ctx, op) ||
        (ctx->ac_off && (ctx->o.precision != NP_FLOAT32 || ctx->o.lowp != NP_LOWP_NONE)))
        rt_node_scalar(nd, "fp32_override", 1.0);
    nd->k = rt_kern(ctx, op);
    nd->n = ctx->counters[op]++;
    nd->mcall = ctx->cur_mc;
    nd->site = take_site(ctx);
    nd->n_in = n_in;
    int rg = 0;
    for (int i = 0; i < n_in; i++) {
        nd->in[i] = in[i];
        if (in[i]) {
            nd->gdt[i] = in[i]->dtype;
            if (in[i]->requires_grad && np_dtype_is_floating(in[i]->dtype))
                rg = 1;
        }
    }
    nd->record = rg && ctx->grad_enabled;
    if (ctx->n_before) { /* the only cost of the before event when nobody asks */
        np_hook_tensor ts[RT_MAX_IN];
        int nt = 0;
        for (int i = 0; i < n_in; i++)
            if (in[i])
                ts[nt++] = (np_hook_tensor){NP_ROLE_INPUT, i, NULL, in[i]};
        nd->declined = api_before(ctx, nd, 0, ts, nt);
    }
}

static void push_node(np_ctx *ctx, const rt_node *nd);

void rt_quiet_init(np_ctx *ctx, rt_node *nd, np_tensor *const *in, int n_in)
{
    memset(nd, 0, sizeof *nd);
    nd->kind = RT_NODE_QUIET;
    nd->mcall = ctx->cur_mc;
    nd->n_in = n_in;
    int rg = 0;
    for (int i = 0; i < n_in; i++) {
        nd->in[i] = in[i];
        if (in[i]) {
            nd->gdt[i] = in[i]->dtype;
            rg |= in[i]->requires_grad && np_dtype_is_floating(in[i]->dtype);
        }
    }
    nd->record = rg && ctx->grad_enabled;
}

np_tensor *rt_finish_quiet(np_ctx *ctx, rt_node *nd, np_tensor *out, rt_bwd_fn bwd)
{
    if (!out)
        return NULL;
    nd->out1 = out;
    nd->out = &nd->out1;
    nd->n_out = 1;
    nd->bwd = bwd;
    out->requires_grad = nd->record && np_dtype_is_floating(out->dtype);
    if (nd->record)
        push_node(ctx, nd);
    return out;
}

void rt_node_scalar(rt_node *nd, const char *key, double v)
{
    if (nd->n_sc < RT_MAX_SC) {
        nd->sc[nd->n_sc].key = key;
        nd->sc[nd->n_sc].value = v;
        nd->n_sc++;
    }
}

/* Emit the API event of node `nd` for its forward or backward pass, with the
 * tensors `ts[0..nt)` and the node's scalar arguments. */
static void api_event(np_ctx *ctx, np_hook_event *ev, const rt_node *nd, int backward,
                      const np_hook_tensor *ts, int nt)
{
    snprintf(ctx->name, sizeof ctx->name, "%s.%d.%s", np_op_api(nd->op), nd->n,
             backward ? "backward" : "forward");
    memset(ev, 0, sizeof *ev);
    ev->kind = backward ? NP_EV_API_BACKWARD : NP_EV_API_FORWARD;
    ev->name = ctx->name;
    ev->parent = parent_name(ctx, nd->mcall, backward);
    ev->callsite = site_str(ctx, &nd->site);
    ev->tensors = ts;
    ev->n_tensors = nt;
}

/* The before event of node nd's forward (inputs) or backward (ts: the
 * gradients arriving); the mask of observers declining it. */
static unsigned api_before(np_ctx *ctx, const rt_node *nd, int backward, const np_hook_tensor *ts,
                           int nt)
{
    np_hook_event ev;
    api_event(ctx, &ev, nd, backward, ts, nt);
    return emit_before(ctx, &ev);
}

/* The event of module call c's forward or backward with the tensors
 * ts[0..nt) (module_before: its before event, no tensors forward, the
 * gradients arriving at its outputs backward; the mask of observers
 * declining it). */
static void module_event(np_ctx *ctx, np_hook_event *ev, const rt_mcall *c, int backward,
                         const np_hook_tensor *ts, int nt)
{
    memset(ev, 0, sizeof *ev);
    ev->kind = backward ? NP_EV_MODULE_BACKWARD : NP_EV_MODULE_FORWARD;
    ev->name = backward ? c->bwd_name : c->fwd_name;
    ev->is_module = 1;
    ev->parent = parent_name(ctx, c->parent, backward);
    ev->callsite = site_str(ctx, &c->site);
    ev->tensors = ts;
    ev->n_tensors = nt;
}

static unsigned module_before(np_ctx *ctx, const rt_mcall *c, int backward,
                              const np_hook_tensor *ts, int nt)
{
    np_hook_event ev;
    module_event(ctx, &ev, c, backward, ts, nt);
    return emit_before(ctx, &ev);
}

static void emit_api(np_ctx *ctx, const rt_node *nd, int backward, const np_hook_tensor *ts,
                     int nt, unsigned declined)
{
    np_hook_event ev;
    api_event(ctx, &ev, nd, backward, ts, nt);
    ev.scalars = nd->sc;
    ev.n_scalars = nd->n_sc;
    emit_masked(ctx, &ev, declined);
}

static void emit_api_forward(np_ctx *ctx, rt_node *nd)
{
    np_hook_tensor ts[RT_MAX_IN + 16];
    int nt = 0;
    for (int i = 0; i < nd->n_in; i++)
        if (nd->in[i])
            ts[nt++] = (np_hook_tensor){NP_ROLE_INPUT, i, NULL, nd->in[i]};
    for (int j = 0; j < nd->n_out && nt < RT_MAX_IN + 16; j++)
        ts[nt++] = (np_hook_tensor){NP_ROLE_OUTPUT, j, NULL, nd->out[j]};
    emit_api(ctx, nd, 0, ts, nt, nd->declined);
}

static void push_node(np_ctx *ctx, const rt_node *nd)
{
    if (grow((void **)&ctx->nodes, &ctx->cap_nodes, ctx->n_nodes + 1, sizeof *ctx->nodes) != 0) {
        rt_fail(ctx, NP_ERR_NOMEM, NULL, "out of memory growing the tape");
        return;
    }
    ctx->nodes[ctx->n_nodes++] = *nd;
}

void rt_finish_multi(np_ctx *ctx, rt_node *nd, np_tensor **outs, int n_out, rt_bwd_fn bwd)
{
    nd->out = outs;
    nd->n_out = n_out;
    nd->bwd = bwd;
    for (int j = 0; j < n_out; j++)
        outs[j]->requires_grad = nd->record && np_dtype_is_floating(outs[j]->dtype);
    if (nd->record) {
        push_node(ctx, nd); /* single-output nodes find out1 again in backward */
    }
    emit_api_forward(ctx, nd);
}

np_tensor *rt_finish(np_ctx *ctx, rt_node *nd, np_tensor *out, rt_bwd_fn bwd)
{
    if (!out)
        return NULL;
    nd->out1 = out;
    rt_finish_multi(ctx, nd, &nd->out1, 1, bwd);
    return out;
}

/* ---- modules ------------------------------------------------------------- */
static char *dupstr(const char *s)
{
    size_t l = strlen(s);
    char *d = malloc(l + 1);
    if (d)
        memcpy(d, s, l + 1);
    return d;
}

np_module *np_module_new(np_ctx *ctx, const char *path, const char *cls)
{
    if (!path || !cls || !*cls)
        return rt_fail(ctx, NP_ERR_ARG, NULL, "np_module_new needs a path and a class name");
    if (grow((void **)&ctx->mods, &ctx->cap_mods, ctx->n_mods + 1, sizeof *ctx->mods) != 0)
        return rt_fail(ctx, NP_ERR_NOMEM, path, "out of memory");
    np_module *m = calloc(1, sizeof *m);
    if (!m)
        return rt_fail(ctx, NP_ERR_NOMEM, path, "out of memory");
    m->ctx = ctx;
    m->path = dupstr(path);
    m->cls = dupstr(cls);
    size_t l = strlen(path) + strlen(cls) + 16;
    m->name = malloc(l);
    if (!m->path || !m->cls || !m->name) {
        free(m->path);
        free(m->cls);
        free(m->name);
        free(m);
        return rt_fail(ctx, NP_ERR_NOMEM, path, "out of memory");
    }
    if (*path)
        snprintf(m->name, l, "Module.%s.%s", path, cls);
    else
        snprintf(m->name, l, "Module.%s", cls);
    ctx->mods[ctx->n_mods++] = m;
    return m;
}

np_status np_module_add_param(np_module *m, const char *key, np_tensor *param)
{
    if (!m || !key || !param)
        return NP_ERR_ARG;
    if (grow((void **)&m->keys, &m->cap_params, m->n_params + 1, sizeof *m->keys) != 0)
        return NP_ERR_NOMEM;
    np_tensor **p = realloc(m->params, (size_t)m->cap_params * sizeof *p);
    if (!p)
        return NP_ERR_NOMEM;
    m->params = p;
    m->keys[m->n_params] = dupstr(key);
    if (!m->keys[m->n_params])
        return NP_ERR_NOMEM;
    m->params[m->n_params++] = param;
    return NP_OK;
}

const char *np_module_name(const np_module *m) { return m->name; }

static char *arena_printf(np_ctx *ctx, const char *a, const char *b, int n)
{
    size_t l = strlen(a) + strlen(b) + 24;
    char *s = rt_alloc(ctx, l);
    if (s)
        snprintf(s, l, "%s.%s.%d", a, b, n);
    return s;
}

np_status np_module_begin(np_ctx *ctx, np_module *m)
{
    if (!m)
        return NP_ERR_ARG;
    if (grow((void **)&ctx->mc, &ctx->cap_mc, ctx->n_mc + 1, sizeof *ctx->mc) != 0) {
        rt_fail(ctx, NP_ERR_NOMEM, m->name, "out of memory");
        return NP_ERR_NOMEM;
    }
    rt_mcall *c = &ctx->mc[ctx->n_mc];
    memset(c, 0, sizeof *c);
    c->m = m;
    c->n = m->counter++;
    c->parent = ctx->cur_mc;
    c->site = take_site(ctx);
    c->fwd_name = arena_printf(ctx, m->name, "forward", c->n);
    c->bwd_name = arena_printf(ctx, m->name, "backward", c->n);
    if (!c->fwd_name || !c->bwd_name)
        return NP_ERR_NOMEM;
    if (ctx->n_before) /* the call's start: no tensors yet (its inputs come with its end) */
        c->declined_fwd = module_before(ctx, c, 0, NULL, 0);
    ctx->cur_mc = ctx->n_mc++;
    rt_node nd;
    memset(&nd, 0, sizeof nd);
    nd.kind = RT_NODE_MOD_BEGIN;
    nd.mcall = ctx->cur_mc;
    push_node(ctx, &nd);
    return ctx->err.status;
}

np_status np_module_end(np_ctx *ctx, np_module *m, np_tensor *const *inputs, int n_in,
                        np_tensor *const *outputs, int n_out)
{
    if (ctx->cur_mc < 0 || ctx->mc[ctx->cur_mc].m != m) {
        rt_fail(ctx, NP_ERR_ARG, m ? m->name : NULL,
                "np_module_end: %s is not the innermost open module call", m ? m->name : "(null)");
        return NP_ERR_ARG;
    }
    int idx = ctx->cur_mc;
    rt_mcall *c = &ctx->mc[idx];
    c->n_in = n_in > 0 ? n_in : 0;
    c->n_out = n_out > 0 ? n_out : 0;
    c->in = rt_alloc(ctx, sizeof(np_tensor *) * (size_t)(c->n_in + 1));
    c->out = rt_alloc(ctx, sizeof(np_tensor *) * (size_t)(c->n_out + 1));
    if (!c->in || !c->out)
        return NP_ERR_NOMEM;
    for (int i = 0; i < c->n_in; i++)
        c->in[i] = inputs[i];
    for (int i = 0; i < c->n_out; i++)
        c->out[i] = outputs[i];
    int nt = c->n_in + c->n_out + m->n_params;
    np_hook_tensor *ts = rt_alloc(ctx, sizeof *ts * (size_t)(nt + 1));
    if (!ts)
        return NP_ERR_NOMEM;
    int k = 0;
    for (int i = 0; i < c->n_in; i++)
        if (c->in[i])
            ts[k++] = (np_hook_tensor){NP_ROLE_INPUT, i, NULL, c->in[i]};
    for (int i = 0; i < m->n_params; i++)
        ts[k++] = (np_hook_tensor){NP_ROLE_PARAMETERS, -1, m->keys[i], m->params[i]};
    for (int i = 0; i < c->n_out; i++)
        if (c->out[i])
            ts[k++] = (np_hook_tensor){NP_ROLE_OUTPUT, i, NULL, c->out[i]};
    np_hook_event ev;
    module_event(ctx, &ev, c, 0, ts, k);
    emit_masked(ctx, &ev, c->declined_fwd);
    rt_node nd;
    memset(&nd, 0, sizeof nd);
    nd.kind = RT_NODE_MOD_END;
    nd.mcall = idx;
    push_node(ctx, &nd);
    ctx->cur_mc = ctx->mc[idx].parent;
    return ctx->err.status;
}

void np_ctx_emit_param_grads(np_ctx *ctx)
{
    for (int i = 0; i < ctx->n_mods; i++) {
        np_module *m = ctx->mods[i];
        if (m->n_params == 0)
            continue;
        np_hook_tensor ts[64];
        np_tensor wraps[64];
        int k = 0, any = 0;
        for (int p = 0; p < m->n_params; p++)
            any |= m->params[p]->grad != NULL;
        if (!any)
            continue; /* another pipeline stage's module (model_pp.c) */
        for (int p = 0; p < m->n_params && k < 64; p++) {
            np_tensor *t = m->params[p];
            wraps[k] = *t;
            wraps[k].dtype = NP_FLOAT32;
            wraps[k].data = t->grad;
            wraps[k].grad = NULL;
            wraps[k].requires_grad = 0;
            wraps[k].rt = NULL;
            ts[k] = (np_hook_tensor){NP_ROLE_PARAMETERS_GRAD, -1, m->keys[p], t->grad ? &wraps[k] : NULL};
            k++;
        }
        np_hook_event ev = {0};
        ev.kind = NP_EV_PARAM_GRAD;
        ev.name = m->name;
        ev.is_module = 1;
        ev.tensors = ts;
        ev.n_tensors = k;
        emit_raw(ctx, &ev);
    }
}

/* ---- steps ----------------------------------------------------------------- */
void np_ctx_step_begin(np_ctx *ctx)
{
    tape_clear(ctx);
    ctx->micro_batch = -1;
    memset(ctx->counters, 0, sizeof ctx->counters);
    for (int i = 0; i < ctx->n_mods; i++)
        ctx->mods[i]->counter = 0;
    ctx->seq = 0;
    ctx->in_step = 1;
    ctx->site = (rt_site){NULL, NULL, NULL, 0};
    np_hook_event ev = {0};
    ev.kind = NP_EV_STEP_BEGIN;
    np_hook_scalar ls = {"loss_scale", ctx->loss_scale > 0 ? ctx->loss_scale : 1.0};
    ev.scalars = &ls;
    ev.n_scalars = 1;
    emit_raw(ctx, &ev);
}

void np_ctx_set_loss_scale(np_ctx *ctx, double scale)
{
    ctx->loss_scale = scale > 0 && isfinite(scale) ? scale : 1.0;
}

void np_ctx_step_end(np_ctx *ctx)
{
    np_hook_event ev = {0};
    ev.kind = NP_EV_STEP_END;
    emit_raw(ctx, &ev);
    ctx->in_step = 0;
    ctx->site = (rt_site){NULL, NULL, NULL, 0};
    tape_clear(ctx);
    arena_reset(ctx);
    ctx->step++;
}

/* ---- backward ------------------------------------------------------------ */
static int is_arena(const np_tensor *t) { return t->rt && !RT_T(t)->persistent; }

/* Accumulate contribution g (already rounded to its dtype) into t's grad,
 * rounding the sum to t's dtype. */
static void accum_grad(np_ctx *ctx, np_tensor *t, float *g)
{
    int64_t n = t->numel;
    if (!t->grad) {
        if (is_arena(t)) {
            t->grad = g;
            rt_round_buf(g, n, t->dtype);
            return;
        }
        t->grad = calloc((size_t)(n ? n : 1), sizeof(float));
        if (!t->grad) {
            rt_fail(ctx, NP_ERR_NOMEM, t->name, "out of memory for a gradient");
            return;
        }
    }
    rt_grad_accumulate(t->grad, g, n, t->dtype);
}

static np_hook_tensor *grad_tensors(np_ctx *ctx, np_tensor *const *ts, int n, np_role role,
                                    np_hook_tensor *buf, int *k, const np_dtype *dts, float *const *gs)
{
    for (int i = 0; i < n; i++) {
        if (!ts[i])
            continue;
        float *g = gs ? gs[i] : ts[i]->grad;
        np_tensor *w = NULL;
        if (g)
            w = rt_wrap(ctx, ts[i], g, dts ? dts[i] : ts[i]->dtype);
        buf[(*k)++] = (np_hook_tensor){role, i, NULL, w};
    }
    return buf;
}

static void run_api_backward(np_ctx *ctx, rt_node *nd)
{
    if (nd->out1)
        nd->out = &nd->out1; /* the tape may have moved since the node was pushed */
    float *gout_stack[16];
    float **gout = nd->n_out <= 16 ? gout_stack : rt_alloc(ctx, sizeof(float *) * (size_t)nd->n_out);
    if (!gout)
        return;
    int any = 0;
    for (int j = 0; j < nd->n_out; j++) {
        gout[j] = nd->out[j]->grad;
        if (gout[j])
            any = 1;
    }
    if (!any)
        return;
    float *gin[RT_MAX_IN] = {0};
    for (int i = 0; i < nd->n_in; i++) {
        np_tensor *t = nd->in[i];
        if (t && t->requires_grad && np_dtype_is_floating(t->dtype)) {
            size_t nb = (size_t)t->numel * sizeof(float);
            gin[i] = (nd->gin_full >> i) & 1 ? rt_alloc(ctx, nb) : rt_calloc(ctx, nb);
            if (!gin[i])
                return;
        }
    }
    unsigned declined = 0;
    int quiet = nd->kind == RT_NODE_QUIET;
    if (ctx->n_before && !quiet) { /* the call's start: the gradients arriving at its outputs */
        np_hook_tensor *bt = rt_alloc(ctx, sizeof *bt * (size_t)(nd->n_out + 1));
        np_dtype *bdt = rt_alloc(ctx, sizeof *bdt * (size_t)(nd->n_out + 1));
        if (!bt || !bdt)
            return;
        for (int j = 0; j < nd->n_out; j++)
            bdt[j] = nd->out[j]->dtype;
        int bk = 0;
        grad_tensors(ctx, nd->out, nd->n_out, NP_ROLE_INPUT, bt, &bk, bdt, gout);
        declined = api_before(ctx, nd, 1, bt, bk);
    }
    nd->bwd(ctx, nd, gout, gin);
    for (int i = 0; i < nd->n_in; i++)
        if (gin[i])
            rt_round_buf(gin[i], nd->in[i]->numel, nd->gdt[i]);
    if (ctx->n_obs && !quiet) {
        int cap = nd->n_out + nd->n_in;
        np_hook_tensor *ts = rt_alloc(ctx, sizeof *ts * (size_t)cap);
        np_dtype *odt = rt_alloc(ctx, sizeof *odt * (size_t)nd->n_out);
        if (!ts || !odt)
            return;
        for (int j = 0; j < nd->n_out; j++)
            odt[j] = nd->out[j]->dtype;
        int k = 0;
        grad_tensors(ctx, nd->out, nd->n_out, NP_ROLE_INPUT, ts, &k, odt, gout);
        grad_tensors(ctx, nd->in, nd->n_in, NP_ROLE_OUTPUT, ts, &k, nd->gdt, gin);
        emit_api(ctx, nd, 1, ts, k, declined);
    }
    for (int i = 0; i < nd->n_in; i++)
        if (gin[i])
            accum_grad(ctx, nd->in[i], gin[i]);
}

static int any_grad(np_tensor *const *ts, int n)
{
    for (int i = 0; i < n; i++)
        if (ts[i] && ts[i]->grad)
            return 1;
    return 0;
}

/* 1 if input i of c is the same tensor as an earlier input (set aside once). */
static int dup_input(const rt_mcall *c, int i)
{
    for (int j = 0; j < i; j++)
        if (c->in[j] == c->in[i])
            return 1;
    return 0;
}

/* Module call backward starts (its end marker, walking in reverse): set aside
 * the grads already accumulated at its inputs, in this call's own slots, so
 * that at its begin marker the inputs' grads hold exactly the module's own
 * contribution. The slots belong to the call, not to the tensor: a tensor
 * that is the input of nested calls (a Block's input x is also its ln_1's
 * input, and the residual add's gradient reaches x between the two end
 * markers) is set aside by each call in turn, a stack in reverse order. */
static void module_bwd_open(np_ctx *ctx, rt_mcall *c)
{
    if (ctx->n_before && any_grad(c->out, c->n_out)) {
        /* the call's start: the gradients arriving at its outputs */
        np_hook_tensor *ts = rt_alloc(ctx, sizeof *ts * (size_t)(c->n_out + 1));
        int k = 0;
        if (ts)
            grad_tensors(ctx, c->out, c->n_out, NP_ROLE_INPUT, ts, &k, NULL, NULL);
        c->declined_bwd = module_before(ctx, c, 1, ts, k);
    }
    c->swap = c->n_in ? rt_calloc(ctx, sizeof *c->swap * (size_t)c->n_in) : NULL;
    if (c->n_in && !c->swap)
        return;
    for (int i = 0; i < c->n_in; i++) {
        np_tensor *t = c->in[i];
        if (!t || !is_arena(t) || dup_input(c, i))
            continue;
        c->swap[i] = t->grad;
        t->grad = NULL;
    }
}

static void module_bwd_close(np_ctx *ctx, rt_mcall *c)
{
    if (any_grad(c->out, c->n_out)) {
        int cap = c->n_in + c->n_out;
        np_hook_tensor *ts = rt_alloc(ctx, sizeof *ts * (size_t)(cap + 1));
        if (ts && ctx->n_obs) {
            int k = 0;
            grad_tensors(ctx, c->out, c->n_out, NP_ROLE_INPUT, ts, &k, NULL, NULL);
            grad_tensors(ctx, c->in, c->n_in, NP_ROLE_OUTPUT, ts, &k, NULL, NULL);
            np_hook_event ev;
            module_event(ctx, &ev, c, 1, ts, k);
            emit_masked(ctx, &ev, c->declined_bwd);
        } else if (!ctx->n_obs) {
            ctx->seq++;
        }
    }
    for (int i = 0; i < c->n_in && c->swap; i++) {
        np_tensor *t = c->in[i];
        if (!t || !is_arena(t) || dup_input(c, i))
            continue;
        float *saved = c->swap[i];
        c->swap[i] = NULL;
        if (!saved)
            continue;
        if (!t->grad) {
            t->grad = saved;
            continue;
        }
        rt_grad_accumulate(t->grad, saved, t->numel, t->dtype); /* a + b == b + a in IEEE */
    }
}

/* Backward over tape nodes [lo, hi), last first. */
static void backward_nodes(np_ctx *ctx, int lo, int hi)
{
    for (int i = hi - 1; i >= lo && ctx->err.status == NP_OK; i--) {
        rt_node *nd = &ctx->nodes[i];
        switch (nd->kind) {
        case RT_NODE_MOD_END:
            module_bwd_open(ctx, &ctx->mc[nd->mcall]);
            break;
        case RT_NODE_MOD_BEGIN:
            module_bwd_close(ctx, &ctx->mc[nd->mcall]);
            break;
        default:
            run_api_backward(ctx, nd);
        }
    }
}

/* root's gradient: g (root->numel floats, copied) or `seed` everywhere. */
static np_status seed_grad(np_ctx *ctx, np_tensor *root, const float *g, float seed)
{
    if (ctx->err.status != NP_OK)
        return ctx->err.status;
    if (!root) {
        rt_fail(ctx, NP_ERR_ARG, NULL, "np_backward: loss is NULL");
        return NP_ERR_ARG;
    }
    if (!root->requires_grad) {
        rt_fail(ctx, NP_ERR_ARG, NULL, "np_backward: the loss does not require grad (no parameter on its tape)");
        return NP_ERR_ARG;
    }
    float *b = rt_alloc(ctx, (size_t)(root->numel ? root->numel : 1) * sizeof(float));
    if (!b)
        return ctx->err.status;
    float s = np_round_to(root->dtype, seed);
    for (int64_t i = 0; i < root->numel; i++)
        b[i] = g ? g[i] : s;
    if (root->grad && !is_arena(root)) {
        for (int64_t i = 0; i < root->numel; i++)
            root->grad[i] += b[i];
    } else {
        root->grad = b;
    }
    return NP_OK;
}

np_status np_backward_seed(np_ctx *ctx, np_tensor *loss, float seed)
{
    np_status st = seed_grad(ctx, loss, NULL, seed);
    if (st != NP_OK)
        return st;
    backward_nodes(ctx, 0, ctx->n_nodes);
    ctx->n_nodes = 0;
    return ctx->err.status;
}

np_status rt_backward_range(np_ctx *ctx, np_tensor *root, const float *g, float seed, int lo, int hi)
{
    np_status st = seed_grad(ctx, root, g, seed);
    if (st != NP_OK)
        return st;
    if (lo < 0 || hi > ctx->n_nodes || lo > hi) {
        rt_fail(ctx, NP_ERR_INTERNAL, NULL, "backward: tape nodes [%d, %d) of %d", lo, hi,
                ctx->n_nodes);
        return NP_ERR_INTERNAL;
    }
    backward_nodes(ctx, lo, hi);
    return ctx->err.status;
}

np_status np_backward(np_ctx *ctx, np_tensor *loss)
{
    return np_backward_seed(ctx, loss, 1.0f);
}
