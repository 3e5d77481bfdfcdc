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
    np_optim_tstats *st_out;   /* np_optim_collect_stats: the next step's statistics */
    const unsigned char *st_want;
    unsigned st_mask;          /* the NP_OPTIM_ST_* gathered (bits) */
};

static const char *const optim_names[] = {
    [NP_OPTIM_ADAMW] = "adamw", [NP_OPTIM_SGD] = "sgd",
};
/* unsized, so a kind added without its name fails here */
_Static_assert(sizeof optim_names / sizeof optim_names[0] == NP_OPTIM_KIND_COUNT,
               "optim_names: one name per np_optim_kind");

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
    o->st_mask = (1u << NP_OPTIM_ST_N) - 1;
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

float *np_optim_swap_slot(np_optim *o, int slot, int i, float *buf)
{
    float *old = o->slot[slot][i];
    o->slot[slot][i] = buf;
    return old;
}

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

/* AdamW's constants of one parameter's update, as the loops read them:
 * beta1, beta2, 1 - beta1, 1 - beta2, lr / bc1, sqrt(bc2), eps, decay */
enum { AW_B1, AW_B2, AW_OMB1, AW_OMB2, AW_STEP, AW_BC2_SQRT, AW_EPS, AW_DECAY, AW_N };

/* One element of AdamW (PyTorch's rule): m and v updated in place, the new
 * weight returned, not rounded. Every AdamW loop (plain, fused with the
 * statistics, low-precision masters) calls it, so all give the same bits
 * (-ffp-contract=off; inlined, the loops still vectorize). */
typedef struct aw_k {
    float b1, b2, omb1, omb2, step, bc2_sqrt, eps, decay;
} aw_k;

/* the constants as values of the loop (no store through w, m or v can
 * change them: the loops keep them in registers and vectorize) */
static inline aw_k aw_load(const float *c)
{
    return (aw_k){c[AW_B1], c[AW_B2], c[AW_OMB1], c[AW_OMB2],
                  c[AW_STEP], c[AW_BC2_SQRT], c[AW_EPS], c[AW_DECAY]};
}

static inline float adamw_elem(float w0, float gk, float *m, float *v, aw_k c)
{
    float wk = w0 * c.decay;
    float mk = *m * c.b1 + c.omb1 * gk;
    float vk = *v * c.b2 + c.omb2 * gk * gk;
    *m = mk;
    *v = vk;
    float denom = sqrtf(vk) / c.bc2_sqrt + c.eps;
    return wk - c.step * (mk / denom);
}

/* c[AW_N] of parameter p's update at step o->t + 1 with learning rate lr */
static void adamw_consts(const np_optim *o, const np_tensor *p, double lr, float *c)
{
    double t = (double)(o->t + 1);
    double bc1 = 1.0 - pow(o->cfg.beta1, t);
    double bc2 = 1.0 - pow(o->cfg.beta2, t);
    c[AW_B1] = (float)o->cfg.beta1;
    c[AW_B2] = (float)o->cfg.beta2;
    c[AW_OMB1] = (float)(1.0 - o->cfg.beta1);
    c[AW_OMB2] = (float)(1.0 - o->cfg.beta2);
    c[AW_STEP] = (float)(lr / bc1);
    c[AW_BC2_SQRT] = (float)sqrt(bc2);
    c[AW_EPS] = (float)o->cfg.eps;
    c[AW_DECAY] = p->ndim >= 2 ? (float)(1.0 - lr * o->cfg.weight_decay) : 1.0f;
}

/* ==== the update with its statistics (np_optim_collect_stats) ============
 * The same float expressions as sgd_update/adamw_update, so the same bits;
 * per chunk of ST_CHUNK elements one loop updates, then each asked array of
 * the chunk, still in cache, goes through np_optim_tstats_add. */
#define ST_CHUNK 4096
/* float32 partial sums over blocks of ST_BLOCK elements, each block's
 * added to the float64 totals (docs/MONITOR.md "Statistics": the error
 * bound follows from it) */
#define ST_BLOCK 512

static void tst_init(np_optim_tstats *t)
{
    memset(t, 0, sizeof *t);
    t->min = INFINITY;
    t->max = -INFINITY;
}

/* one value into t, in float64 (a float32 value exactly: the same sums) */
static inline void tst_add_one(np_optim_tstats *t, double v)
{
    if (isnan(v)) {
        t->nans++;
    } else if (isinf(v)) {
        t->infs++;
    } else {
        t->sum += v;
        t->sumsq += v * v;
        if (v < t->min) t->min = v;
        if (v > t->max) t->max = v;
        t->finite++;
        t->zeros += v == 0.0;
    }
}

void np_optim_tstats_add_f64(np_optim_tstats *t, const double *x, int64_t n)
{
    for (int64_t k = 0; k < n; k++)
        tst_add_one(t, x[k]);
}

static void tst_add_slow(np_optim_tstats *t, const float *x, int64_t n)
{
    for (int64_t k = 0; k < n; k++)
        tst_add_one(t, x[k]);
}

/* One block x[0, n), n <= ST_BLOCK: float32 sums in an OpenMP simd
 * reduction (every accumulator as wide as a float lane, so a vector holds
 * 16 of them under AVX-512), min/max exact. The zeros are not counted in
 * the loop: the least square (a product the sum of squares makes anyway)
 * is 0 only when the block holds a zero or a value below about 2^-75 in
 * magnitude, and only then are they counted (block_zeros): one vector
 * operation an array less. The float32 sums do not hold the block
 * (block_ok) with a value not finite (its square is NaN or Inf), a sum of
 * squares past FLT_MAX, or a largest magnitude below 2^-50 (squares near
 * float32's subnormals); the block is then taken in double. Cloned for AVX-512/AVX2
 * (picked at run time). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define NP_ST_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define NP_ST_CLONES
#endif
static int block_zeros(const float *x, int n)
{
    int z = 0;
    for (int k = 0; k < n; k++)
        z += x[k] == 0.0f;
    return z;
}

/* a block's float32 sums: sum, sum of squares, min, max, least square */
enum { BS_SUM, BS_SQ, BS_MIN, BS_MAX, BS_SQMIN, BS_N };

/* whether float32 block sums f hold the block (block_f32's test) */
static int block_ok(const float *f)
{
    float big = -f[BS_MIN] > f[BS_MAX] ? -f[BS_MIN] : f[BS_MAX];
    return isfinite(f[BS_SQ]) && (big >= 0x1p-50f || big == 0.0f);
}

NP_ST_CLONES static void block_f32(const float *x, int n, float *f)
{
    float s = 0.0f, q = 0.0f, mn = INFINITY, mx = -INFINITY, q0 = INFINITY;
#pragma omp simd reduction(+ : s, q) reduction(min : mn, q0) reduction(max : mx)
    for (int k = 0; k < n; k++) {
        float v = x[k], vv = v * v;
        s += v;
        q += vv;
        q0 = vv < q0 ? vv : q0;
        mn = v < mn ? v : mn;
        mx = v > mx ? v : mx;
    }
    f[BS_SUM] = s, f[BS_SQ] = q, f[BS_MIN] = mn, f[BS_MAX] = mx, f[BS_SQMIN] = q0;
}

/* add block x[0, n)'s float32 sums f to t (block_f32's, or the fused
 * update's: the same figures), or the block in double when they do not
 * hold it */
static void tst_add_block(np_optim_tstats *t, const float *x, int n, const float *f)
{
    if (!block_ok(f)) {
        tst_add_slow(t, x, n);
        return;
    }
    t->sum += f[BS_SUM];
    t->sumsq += f[BS_SQ];
    if ((double)f[BS_MIN] < t->min) t->min = f[BS_MIN];
    if ((double)f[BS_MAX] > t->max) t->max = f[BS_MAX];
    t->finite += n;
    if (f[BS_SQMIN] == 0.0f)
        t->zeros += block_zeros(x, n);
}

void np_optim_tstats_add(np_optim_tstats *t, const float *x, int64_t n)
{
    for (int64_t k0 = 0; k0 < n; k0 += ST_BLOCK) {
        int b = n - k0 < ST_BLOCK ? (int)(n - k0) : ST_BLOCK;
        float f[BS_N];
        block_f32(x + k0, b, f);
        tst_add_block(t, x + k0, b, f);
    }
}

/* the AdamW update of [k0, k1) (adamw_update's expressions) and the sum of
 * squares of the weights' change */
NP_ST_CLONES static double adamw_chunk(float *w, const float *g, float *m, float *v, int64_t k0,
                                       int64_t k1, const float *c)
{
    const aw_k K = aw_load(c);
    double dq = 0.0;
#pragma omp simd reduction(+ : dq)
    for (int64_t k = k0; k < k1; k++) {
        float w0 = w[k];
        float wn = adamw_elem(w0, g[k], &m[k], &v[k], K);
        w[k] = wn;
        float d = wn - w0;
        dq += (double)d * d;
    }
    return dq;
}

/* the AdamW update of [k0, k1), no statistics: adamw_chunk's loop without
 * the sum, cloned alike, so a run with the monitor and one without update
 * with the same instructions (and the same bits) */
NP_ST_CLONES static void adamw_range(float *w, const float *g, float *m, float *v, int64_t k0,
                                     int64_t k1, const float *c)
{
    const aw_k K = aw_load(c);
#pragma omp simd
    for (int64_t k = k0; k < k1; k++)
        w[k] = adamw_elem(w[k], g[k], &m[k], &v[k], K);
}

static void adamw_update(np_optim *o, int i, double lr)
{
    const np_tensor *p = o->params[i];
    float *w = np_tensor_f32(p);
    const float *g = p->grad;
    float *m = o->slot[0][i], *v = o->slot[1][i];
    float c[AW_N];
    adamw_consts(o, p, lr, c);
    int64_t n = p->numel, n_ch = (n + ST_CHUNK - 1) / ST_CHUNK;
#pragma omp parallel for schedule(static) if (rt_par_all || n > 65536)
    for (int64_t ch = 0; ch < n_ch; ch++)
        adamw_range(w, g, m, v, ch * ST_CHUNK, ch * ST_CHUNK + ST_CHUNK < n ? ch * ST_CHUNK + ST_CHUNK : n, c);
    round_params(p);
}

/* [k0, k1) of float32 AdamW (adamw_update's expressions) fused with the
 * statistics of the array it reads (g) and the one it writes (w after the
 * update), block by block of ST_BLOCK: float32 block sums as block_f32's
 * (the same figures, the same lane order), added to part's totals by
 * tst_add_block; the statistics' adds, products, minima and maxima issue
 * beside the update's divisions and square root, with no load or loop of
 * their own. One least square serves both arrays' zero test (min of g^2
 * and w^2: 0 when either block may hold a zero, and then both blocks'
 * zeros are counted exactly, block_zeros): one accumulator less, so the
 * loop's accumulators and AdamW's constants fit AVX2's 16 registers with
 * fewer spills. The blocks are looped here, inside the clone, so the
 * constants are set up once per chunk, not per block. m and v, when mask
 * asks them, go through block_f32 while the block is in L1: the
 * accumulators of more arrays in one loop outnumber the registers (their
 * spills cost more instructions than the second pass;
 * bench_monitor_ir.sh). Returns the sum of squares of the change. */
NP_ST_CLONES static double adamw_fused_st(float *w, const float *g, float *m, float *v,
                                          int64_t k0, int64_t k1, const float *c, unsigned mask,
                                          np_optim_tstats *part)
{
    const aw_k K = aw_load(c);
    double dq = 0.0;
    for (int64_t b0 = k0; b0 < k1; b0 += ST_BLOCK) {
        int n = k1 - b0 < ST_BLOCK ? (int)(k1 - b0) : ST_BLOCK;
        float *wb = w + b0, *mb = m + b0, *vb = v + b0;
        const float *gb = g + b0;
        float gs = 0, gq = 0, gmn = INFINITY, gmx = -INFINITY, q0 = INFINITY;
        float ws = 0, wq = 0, wmn = INFINITY, wmx = -INFINITY;
        float bdq = 0;
#pragma omp simd reduction(+ : gs, gq, ws, wq, bdq) reduction(min : gmn, wmn, q0) \
    reduction(max : gmx, wmx)
        for (int k = 0; k < n; k++) {
            float w0 = wb[k], gk = gb[k];
            float wn = adamw_elem(w0, gk, &mb[k], &vb[k], K);
            wb[k] = wn;
            float d = wn - w0, gg = gk * gk, ww = wn * wn;
            float sq = gg < ww ? gg : ww;
            bdq += d * d;
            gs += gk, gq += gg, q0 = sq < q0 ? sq : q0;
            gmn = gk < gmn ? gk : gmn, gmx = gk > gmx ? gk : gmx;
            ws += wn, wq += ww;
            wmn = wn < wmn ? wn : wmn, wmx = wn > wmx ? wn : wmx;
        }
        const float fg[BS_N] = {[BS_SUM] = gs, [BS_SQ] = gq, [BS_MIN] = gmn, [BS_MAX] = gmx,
                                [BS_SQMIN] = q0};
        const float fw[BS_N] = {[BS_SUM] = ws, [BS_SQ] = wq, [BS_MIN] = wmn, [BS_MAX] = wmx,
                                [BS_SQMIN] = q0};
        dq += bdq;
        tst_add_block(&part[NP_OPTIM_ST_GRAD], gb, n, fg);
        tst_add_block(&part[NP_OPTIM_ST_WEIGHT], wb, n, fw);
        for (int s = NP_OPTIM_ST_SLOT0; s <= NP_OPTIM_ST_SLOT1; s++)
            if (mask & 1u << s) {
                const float *x = s == NP_OPTIM_ST_SLOT0 ? mb : vb;
                float fs[BS_N];
                block_f32(x, n, fs);
                tst_add_block(&part[s], x, n, fs);
            }
    }
    return dq;
}

/* one chunk [k0, k1) of AdamW with statistics into part[NP_OPTIM_ST_N] */
static void adamw_chunk_st(float *w, const float *g, float *m, float *v, int64_t k0, int64_t k1,
                           const float *c, np_dtype dt, unsigned mask, np_optim_tstats *part)
{
    const unsigned gw = 1u << NP_OPTIM_ST_GRAD | 1u << NP_OPTIM_ST_WEIGHT;
    int64_t n = k1 - k0;
    double dq = 0.0;
    int fast = 1;
    for (int s = 0; s < NP_OPTIM_ST_N; s++)
        tst_init(&part[s]);
    if (dt == NP_BFLOAT16 || dt == NP_FLOAT16) {
        /* low-precision master weights: rounded as round_params does */
        const aw_k K = aw_load(c);
        for (int64_t k = k0; k < k1; k++) {
            float w0 = w[k];
            w[k] = np_round_to(dt, adamw_elem(w0, g[k], &m[k], &v[k], K));
            float d = w[k] - w0;
            dq += (double)d * d;
        }
    } else if ((mask & gw) == gw) {
        /* gradients and weights asked (the monitor's default, with or
         * without m and v): the fused loop */
        dq = adamw_fused_st(w, g, m, v, k0, k1, c, mask, part);
        for (int s = 0; s < NP_OPTIM_ST_DELTA; s++)
            fast &= !(mask & 1u << s) || part[s].finite == n;
        part[NP_OPTIM_ST_DELTA].sumsq = dq;
        part[NP_OPTIM_ST_DELTA].finite = fast || isfinite(dq) ? n : 0;
        return;
    } else {
        dq = adamw_chunk(w, g, m, v, k0, k1, c);
    }
    const float *arr[4] = {g + k0, m + k0, v + k0, w + k0};
    const int slot[4] = {NP_OPTIM_ST_GRAD, NP_OPTIM_ST_SLOT0, NP_OPTIM_ST_SLOT1, NP_OPTIM_ST_WEIGHT};
    for (int j = 0; j < 4; j++)
        if (mask & 1u << slot[j]) {
            np_optim_tstats_add(&part[slot[j]], arr[j], n);
            fast &= part[slot[j]].finite == n;
        }
    part[NP_OPTIM_ST_DELTA].sumsq = dq;
    part[NP_OPTIM_ST_DELTA].finite = fast || isfinite(dq) ? n : 0;
}

/* one chunk of SGD with statistics (slot 1 stays empty) */
static void sgd_chunk_st(float *w, const float *g, float *buf, int64_t k0, int64_t k1,
                         float lr, float mom, float wd, int first, np_dtype dt,
                         unsigned mask, np_optim_tstats *part)
{
    double dq = 0.0;
    for (int64_t k = k0; k < k1; k++) {
        float w0 = w[k];
        float d = g[k];
        if (wd != 0.0f)
            d = d + wd * w[k];
        float b = first ? d : mom * buf[k] + d;
        buf[k] = b;
        float wn = w[k] - lr * b;
        if (dt == NP_BFLOAT16 || dt == NP_FLOAT16)
            wn = np_round_to(dt, wn);
        w[k] = wn;
        float dd = wn - w0;
        dq += (double)dd * dd;
    }
    for (int s = 0; s < NP_OPTIM_ST_N; s++)
        tst_init(&part[s]);
    int64_t n = k1 - k0;
    if (mask & 1u << NP_OPTIM_ST_GRAD)
        np_optim_tstats_add(&part[NP_OPTIM_ST_GRAD], g + k0, n);
    if (mask & 1u << NP_OPTIM_ST_SLOT0)
        np_optim_tstats_add(&part[NP_OPTIM_ST_SLOT0], buf + k0, n);
    if (mask & 1u << NP_OPTIM_ST_WEIGHT)
        np_optim_tstats_add(&part[NP_OPTIM_ST_WEIGHT], w + k0, n);
    part[NP_OPTIM_ST_DELTA].sumsq = dq;
    part[NP_OPTIM_ST_DELTA].finite = isfinite(dq) ? n : 0;
}

static void tst_combine(np_optim_tstats *t, const np_optim_tstats *p)
{
    t->sum += p->sum;
    t->sumsq += p->sumsq;
    if (p->min < t->min) t->min = p->min;
    if (p->max > t->max) t->max = p->max;
    t->finite += p->finite;
    t->zeros += p->zeros;
    t->nans += p->nans;
    t->infs += p->infs;
}

static void update_st(np_optim *o, int i, double lr, np_optim_tstats *out)
{
    const np_tensor *p = o->params[i];
    float *w = np_tensor_f32(p);
    const float *g = p->grad;
    int64_t n = p->numel, nch = (n + ST_CHUNK - 1) / ST_CHUNK;
    np_optim_tstats one[NP_OPTIM_ST_N];
    np_optim_tstats *parts = nch > 1 ? malloc((size_t)nch * NP_OPTIM_ST_N * sizeof *parts) : one;
    int par = parts != one;
    if (!parts) {
        parts = one;   /* out of memory: chunk by chunk, combined as it goes */
        par = 0;
    }
    for (int s = 0; s < NP_OPTIM_ST_N; s++)
        tst_init(&out[s]);
    if (o->cfg.kind == NP_OPTIM_SGD) {
        float mom = (float)o->cfg.momentum, lrf = (float)lr;
        float wd = p->ndim >= 2 ? (float)o->cfg.weight_decay : 0.0f;
        int first = o->t == 0;
#pragma omp parallel for schedule(static) if (par && (rt_par_all || n > 65536))
        for (int64_t c = 0; c < nch; c++) {
            np_optim_tstats *pc = par ? parts + c * NP_OPTIM_ST_N : parts;
            int64_t k1 = (c + 1) * ST_CHUNK < n ? (c + 1) * ST_CHUNK : n;
            sgd_chunk_st(w, g, o->slot[0][i], c * ST_CHUNK, k1, lrf, mom, wd, first, p->dtype, o->st_mask, pc);
            if (!par)
                for (int s = 0; s < NP_OPTIM_ST_N; s++)
                    tst_combine(&out[s], &pc[s]);
        }
    } else {
        float c[AW_N];
        adamw_consts(o, p, lr, c);
#pragma omp parallel for schedule(static) if (par && (rt_par_all || n > 65536))
        for (int64_t ch = 0; ch < nch; ch++) {
            np_optim_tstats *pc = par ? parts + ch * NP_OPTIM_ST_N : parts;
            int64_t k1 = (ch + 1) * ST_CHUNK < n ? (ch + 1) * ST_CHUNK : n;
            adamw_chunk_st(w, g, o->slot[0][i], o->slot[1][i], ch * ST_CHUNK, k1, c, p->dtype, o->st_mask, pc);
            if (!par)
                for (int s = 0; s < NP_OPTIM_ST_N; s++)
                    tst_combine(&out[s], &pc[s]);
        }
    }
    if (par) {
        for (int64_t c = 0; c < nch; c++)
            for (int s = 0; s < NP_OPTIM_ST_N; s++)
                tst_combine(&out[s], &parts[c * NP_OPTIM_ST_N + s]);
        free(parts);
    }
    if (out[NP_OPTIM_ST_DELTA].finite < n)
        out[NP_OPTIM_ST_DELTA].sumsq = NAN;
}

void np_optim_collect_stats(np_optim *o, np_optim_tstats *out, const unsigned char *want)
{
    o->st_out = out;
    o->st_want = want;
}

void np_optim_collect_mask(np_optim *o, unsigned mask)
{
    o->st_mask = mask;
}

void np_optim_step(np_optim *o, double lr)
{
    np_optim_tstats *st = o->st_out;
    o->st_out = NULL;
    for (int i = 0; i < o->n; i++) {
        if (st && (!o->st_want || o->st_want[i]))
            update_st(o, i, lr, st + (size_t)i * NP_OPTIM_ST_N);
        else if (o->cfg.kind == NP_OPTIM_SGD)
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
