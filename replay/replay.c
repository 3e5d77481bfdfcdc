/* replay/replay.c - `nprobe replay`'s engine (include/internal/nprobe/replay.h): read
 * a tensor dump, recompute each API call in float64 through the op registry
 * (include/internal/nprobe/ops.h) and measure the isolated error of every output.
 * Reads the dump through dumpio (nprobe/dumpio.h), whatever its format. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "msprobe_args.h"
#include "nprobe/dumpio.h"
#include "nprobe/lowp.h"
#include "nprobe/ops.h"
#include "nprobe/replay.h"
#include "nprobe/tensor.h"
#include "replay_internal.h"

const char *np_replay_status_name(np_replay_status s)
{
    static const char *const names[] = {"pass", "exceeds", "not recomputable"};
    return (unsigned)s < 3 ? names[s] : "unknown";
}

void np_replay_options_init(np_replay_options *o)
{
    memset(o, 0, sizeof *o);
    o->budget_scale = 1.0;
}

double np_replay_unit(const char *dtype)
{
    if (dtype && strcmp(dtype, "bfloat16") == 0)
        return 0x1p-8;
    if (dtype && strcmp(dtype, "float16") == 0)
        return 0x1p-11;
    if (dtype && strcmp(dtype, "float64") == 0)
        return 0x1p-53;
    return 0x1p-24;
}

/* The largest finite value of a dtype: an exact value beyond it rounds to
 * +-inf in that dtype (IEEE overflow, under a loss scale in fp16). */
static double dtype_max(const char *dtype)
{
    if (dtype && strcmp(dtype, "float16") == 0)
        return 65504.0;
    if (dtype && strcmp(dtype, "bfloat16") == 0)
        return 0x1.fep127;
    if (dtype && strcmp(dtype, "float64") == 0)
        return INFINITY;
    return 0x1.fffffep127;
}

/* Half the smallest subnormal: below it, a difference is no rounding error. */
static double unit_floor(const char *dtype)
{
    if (dtype && strcmp(dtype, "float16") == 0)
        return 0x1p-25;
    if (dtype && strcmp(dtype, "bfloat16") == 0)
        return 0x1p-134;
    if (dtype && strcmp(dtype, "float64") == 0)
        return 0x1p-1074;
    return 0x1p-150;
}

/* Budgets in units of u, docs/COMPARE.md: a correct kernel in a low dtype
 * is within one rounding of the exact result on its (rounded) inputs, plus
 * intermediate roundings of fused ops (sdpa's scores and probabilities);
 * float32 kernels accumulate in float32 over K terms, measured against the
 * magnitude (sum of |terms|) that bound covers. */
double np_replay_budget(const char *dtype, int exact_op)
{
    if (exact_op)
        return 0.5;
    if (dtype && (strcmp(dtype, "bfloat16") == 0 || strcmp(dtype, "float16") == 0))
        return 8.0;
    if (dtype && strcmp(dtype, "float64") == 0)
        return 4096.0;
    return 256.0;
}

/* ---- the dump's tables ------------------------------------------------------ */

typedef struct rp_dump {
    np_dumpio *d;
    const char *path;
    np_entry_rec *e;
    size_t n_e;
    np_strmap names;            /* leaf name -> entry index */
    int lowp;                   /* np_lowp of the run's precision (mxfp8, hif8), 0: none */
    int positional;             /* 1: msprobe's dump, arguments as torch received them
                                 * (replay/msprobe_args.h) */
    np_place_rec *pl;           /* the placement rows (format version 2), NULL: none */
    size_t n_pl;
    np_strmap sharded;          /* call -> its first leaf split or partial (index into pl) */
    int have_sharded;
    double *buf[NP_OP_MAX_IN + 2 * NP_OP_MAX_OUT];
    int n_buf;
    char why[200];              /* why the last read_leaf failed */
} rp_dump;

static const np_entry_rec *leaf(const rp_dump *rd, const char *call, const char *role, int i)
{
    char name[NP_FMT_NAME_LEN + 40];
    snprintf(name, sizeof name, "%s.%s.%d", call, role, i);
    int k = np_strmap_get(&rd->names, name);
    return k < 0 ? NULL : &rd->e[k];
}

static const np_entry_rec *kwarg(const rp_dump *rd, const char *call, const char *key)
{
    char name[NP_FMT_NAME_LEN + 80];
    snprintf(name, sizeof name, "%s.kwargs.%s", call, key);
    int k = np_strmap_get(&rd->names, name);
    return k < 0 ? NULL : &rd->e[k];
}

/* Input n of the op (forward call fwd): nprobe's dumps name it
 * {fwd}.input.{n}; msprobe's put it at its position in torch's signature
 * or under its key, and dump an absent one as None (NULL here). */
static const np_entry_rec *input_leaf(const rp_dump *rd, const np_op_info *info, const char *fwd,
                                      int n)
{
    if (!rd->positional)
        return leaf(rd, fwd, "input", n);
    int pos = rp_msp_arg_pos(info->op, info->inputs[n]);
    const np_entry_rec *en = pos >= 0 ? leaf(rd, fwd, "input", pos) : NULL;
    if (!en)
        en = kwarg(rd, fwd, info->inputs[n]);
    /* a number where a tensor may stand (mul's other) is a scalar argument */
    return en && (strcmp(en->dtype, "None") == 0 || rp_msp_is_number(en)) ? NULL : en;
}

/* Scalar argument i of the op given by position in a msprobe dump, or NULL. */
static const np_entry_rec *scalar_leaf(const rp_dump *rd, const np_op_info *info, const char *fwd,
                                       int i)
{
    int pos = rd->positional ? rp_msp_arg_pos(info->op, info->scalars[i].name) : -1;
    const np_entry_rec *en = pos >= 0 ? leaf(rd, fwd, "input", pos) : NULL;
    return en && rp_msp_is_number(en) ? en : NULL;
}

/* The entries of call `fwd` (contiguous in a msprobe dump): first, count. */
static void call_entries(const rp_dump *rd, const char *fwd, size_t *first, size_t *n)
{
    char name[NP_FMT_NAME_LEN + 40];
    int k = -1;
    for (int i = 0; k < 0 && i < 2; i++) {
        snprintf(name, sizeof name, "%s.%s.0", fwd, i ? "output" : "input");
        k = np_strmap_get(&rd->names, name);
    }
    *first = *n = 0;
    if (k < 0)
        return;
    size_t a = (size_t)k, b = (size_t)k;
    while (a > 0 && strcmp(rd->e[a - 1].call, fwd) == 0)
        a--;
    while (b < rd->n_e && strcmp(rd->e[b].call, fwd) == 0)
        b++;
    *first = a;
    *n = b - a;
}

static int is_low(const char *dt)
{
    return strcmp(dt, "bfloat16") == 0 || strcmp(dt, "float16") == 0;
}

static int is_wide(const char *dt)
{
    return strcmp(dt, "float32") == 0 || strcmp(dt, "float64") == 0;
}

/* 1 when the entry's ndim, shape and numel agree (a damaged file may say anything). */
static int shape_ok(const np_entry_rec *en)
{
    if (en->ndim < 0 || en->ndim > NP_OP_MAX_DIM || en->numel < 0)
        return 0;
    int64_t n = 1;
    for (int i = 0; i < en->ndim; i++) {
        if (en->shape[i] < 0 || (en->shape[i] > 0 && n > INT64_MAX / en->shape[i]))
            return 0;
        n *= en->shape[i];
    }
    return n == en->numel;
}

/* Read a leaf's payload as doubles into a new buffer owned by rd (freed per call). */
static double *read_leaf(rp_dump *rd, const np_entry_rec *en, np_error *err)
{
    snprintf(rd->why, sizeof rd->why, " could not be read");
    if (rd->n_buf == (int)(sizeof rd->buf / sizeof rd->buf[0]) || !shape_ok(en))
        return NULL;
    double *p = malloc((size_t)(en->numel > 0 ? en->numel : 1) * sizeof(double));
    if (!p)
        return NULL;
    rd->buf[rd->n_buf++] = p;
    /* checked against the entry's crc32: a corrupt payload is not recomputed
     * with (it would name a culprit op for a flipped bit on disk) */
    np_error e;
    np_error_clear(&e);
    if (np_dumpio_read_checked(p, rd->d, en, &e) != NP_OK) {
        snprintf(rd->why, sizeof rd->why, " could not be read: %.170s", e.text);
        if (err && !err->status)
            *err = e;
        return NULL;
    }
    return p;
}

static void free_bufs(rp_dump *rd)
{
    for (int i = 0; i < rd->n_buf; i++)
        free(rd->buf[i]);
    rd->n_buf = 0;
}

static void view_of(np_op_tensor *t, const np_entry_rec *en, double *data)
{
    t->data = data;
    t->ndim = en->ndim;
    for (int i = 0; i < en->ndim && i < NP_OP_MAX_DIM; i++)
        t->shape[i] = en->shape[i];
    t->numel = en->numel;
}

/* ---- one call ------------------------------------------------------------------ */

/* add, sub, mul, div: a tensor second operand stands for their scalar
 * `other` (their `alpha` keeps its default) */
static int binary_arith(np_op op)
{
    return op == NP_OP_ADD || op == NP_OP_SUB || op == NP_OP_MUL || op == NP_OP_DIV;
}

static void skip(np_replay_call *c, const char *what, const char *detail)
{
    c->status = NP_REPLAY_SKIPPED;
    snprintf(c->reason, sizeof c->reason, "%.300s%.200s", what, detail);
}

/* The forward inputs and scalars of call `fwd` into oc; `round_to` (may be
 * NULL): float inputs wider than it are rounded to it (autocast). */
static int load_inputs(np_replay_call *c, np_op_call *oc, rp_dump *rd, const char *fwd,
                       const char *kw_call, const char *round_to, np_error *err)
{
    const np_op_info *info = oc->info;
    int n = 0;
    for (const char *const *nm = info->inputs; *nm; nm++, n++) {
        const np_entry_rec *en = input_leaf(rd, info, fwd, n);
        if (!en)
            continue;
        if (!en->has_data) {
            skip(c, en->name, " has no payload");
            return -1;
        }
        double *p = read_leaf(rd, en, err);
        if (!p) {
            skip(c, en->name, shape_ok(en) ? rd->why : ": its shape and element count disagree");
            return -1;
        }
        if (round_to && is_wide(en->dtype) && !(info->int_mask >> n & 1u)) {
            np_dtype dt = (np_dtype)np_dtype_from_name(round_to);
            for (int64_t i = 0; i < en->numel; i++)
                p[i] = np_round_to(dt, (float)p[i]);
        }
        view_of(&oc->in[n], en, p);
        oc->n_in = n + 1;
    }
    for (int i = 0; i < info->n_in_min; i++)
        if (!oc->in[i].data) {
            skip(c, info->inputs[i], ": this input is not in the dump");
            return -1;
        }
    for (int i = 0; i < info->n_scalars; i++) {
        const np_entry_rec *en = kwarg(rd, kw_call, info->scalars[i].name);
        if (!en)
            en = kwarg(rd, fwd, info->scalars[i].name);
        if (!en)
            en = scalar_leaf(rd, info, fwd, i);
        double v;
        int got = en != NULL;
        if (en)
            v = en->mean;
        else if (!rd->positional) {
            /* a list with one value for every dimension (stride (2, 2)); under
             * its position where the package could not name the parameter */
            char pos[16];
            int k = rp_msp_arg_pos(info->op, info->scalars[i].name);
            snprintf(pos, sizeof pos, "%d", k);
            size_t first, n_e;
            call_entries(rd, fwd, &first, &n_e);
            got = rp_np_list_scalar(rd->e + first, n_e, fwd, info->scalars[i].name, &v) == 1;
            if (!got && k >= 0 && (en = kwarg(rd, fwd, pos)) != NULL) {
                v = en->mean;
                got = 1;
            }
            if (!got && k >= 0)
                got = rp_np_list_scalar(rd->e + first, n_e, fwd, pos, &v) == 1;
        }
        if (got)
            oc->sc[i] = v;
        else if (info->scalars[i].required &&
                 !(binary_arith(info->op) && oc->in[1].data)) {
            skip(c, info->scalars[i].name, ": this scalar argument is not in the dump");
            return -1;
        }
    }
    return 0;
}

/* Isolated error of dumped values `d` against exact `r` with magnitudes `m`. */
static void measure(np_replay_leaf *lf, const double *d, const double *r, const double *m,
                    int64_t n, const char *dtype)
{
    double u = np_replay_unit(dtype), eta = unit_floor(dtype), worst = 0.0, se = 0.0, sr = 0.0;
    double big = dtype_max(dtype);
    lf->worst = -1;
    lf->max_abs = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double e;
        if (isinf(d[i]) && isfinite(r[i]) && fabs(r[i]) >= big && (d[i] > 0) == (r[i] > 0))
            e = 0.0; /* the exact value overflows the dtype: +-inf is its rounding */
        else if (!isfinite(r[i]) || !isfinite(d[i]))
            e = (isnan(r[i]) && isnan(d[i])) || r[i] == d[i] ? 0.0 : INFINITY;
        else {
            double a = fabs(d[i] - r[i]);
            e = a / (u * m[i] + eta);
            lf->max_abs = a > lf->max_abs ? a : lf->max_abs;
            se += a * a;
            sr += r[i] * r[i];
        }
        if (e > worst || (lf->worst < 0 && e >= worst)) {
            worst = e;
            lf->worst = i;
        }
    }
    lf->err_units = worst;
    lf->rel_l2 = sr > 0 ? sqrt(se / sr) : NAN;
    if (lf->worst >= 0) {
        lf->worst_dumped = d[lf->worst];
        lf->worst_exact = r[lf->worst];
    }
}

/* Compare computed tensors t[0..n) with the dumped leaves `call`.output.i. */
static int compare_outputs(np_replay_call *c, rp_dump *rd, const char *call, np_op_tensor *t,
                           int n, int exact_op, const char *ac, const np_replay_options *o,
                           const np_op_call *sig, np_error *err)
{
    c->leaves = calloc((size_t)(n > 0 ? n : 1), sizeof *c->leaves);
    if (!c->leaves)
        return -1;
    c->err_units = 0.0;
    c->ratio = 0.0;
    for (int i = 0; i < n; i++) {
        const np_entry_rec *en = leaf(rd, call, "output", i);
        if (!en || !en->has_data || !t[i].data)
            continue;
        if (en->numel != t[i].numel) {
            skip(c, en->name, ": the recomputed shape differs from the dumped one");
            return -1;
        }
        double *d = read_leaf(rd, en, err);
        if (!d) {
            skip(c, en->name, rd->why);
            return -1;
        }
        np_replay_leaf *lf = &c->leaves[c->n_leaves++];
        snprintf(lf->name, sizeof lf->name, "%s", en->name);
        snprintf(lf->dtype, sizeof lf->dtype, "%s", en->dtype);
        lf->numel = en->numel;
        /* a gradient of an autocast op is computed in the autocast dtype, whatever
         * dtype it is handed back in (PyTorch casts it to its input's) */
        const char *ud = ac && np_replay_unit(ac) > np_replay_unit(en->dtype) ? ac : en->dtype;
        lf->budget = np_replay_budget(ud, exact_op) * o->budget_scale;
        measure(lf, d, t[i].data, t[i].mag, en->numel, ud);
        double ratio = lf->err_units / lf->budget;
        if (c->n_leaves == 1 || ratio > c->ratio) {
            c->ratio = ratio;
            c->err_units = lf->err_units;
        }
        if (lf->err_units > lf->budget && c->status != NP_REPLAY_EXCEEDS) {
            c->status = NP_REPLAY_EXCEEDS;
            snprintf(c->reason, sizeof c->reason, "%.300s: %.3g u above the budget of %.3g u",
                     lf->name, lf->err_units, lf->budget);
        } else if (sig && i == 0 && lf->err_units <= lf->budget &&
                   rp_signature(c->reason, sizeof c->reason, sig, d, ud, c->backward, lf->name)) {
            c->status = NP_REPLAY_EXCEEDS;
            c->signature = 1;
        }
    }
    if (c->n_leaves == 0) {
        skip(c, "no output of the call has a payload to compare", "");
        return -1;
    }
    return 0;
}

/* The forward dtype of call `fwd` that autocast rounds inputs to, or NULL. */
static const char *autocast_dtype(const rp_dump *rd, const char *fwd, const char *bwd)
{
    const np_entry_rec *o = leaf(rd, fwd, "output", 0);
    if (!o && bwd) { /* only the backward: a low gradient for a wide input */
        for (int i = 0; i < NP_OP_MAX_IN; i++) {
            const np_entry_rec *g = leaf(rd, bwd, "output", i), *x = leaf(rd, fwd, "input", i);
            if (g && x && is_low(g->dtype) && is_wide(x->dtype))
                return g->dtype;
        }
        return NULL;
    }
    return o && is_low(o->dtype) ? o->dtype : NULL;
}

/* The placement row of a leaf of call `call` that is split or partial, or NULL. */
static const np_place_rec *sharded_leaf(const rp_dump *rd, const char *call)
{
    int k = rd->have_sharded ? np_strmap_get(&rd->sharded, call) : -1;
    return k < 0 ? NULL : &rd->pl[k];
}

/* A call of a sharded layout (a leaf of it or of its forward `fwd` split or
 * partial) is left out: the local op ran on what the layout redistributed
 * its arguments to (a row-parallel linear adds 1/k of its replicated bias),
 * not on the dumped shards; recomputed from them it would be named wrongly.
 * Returns 1 when c is left out. */
static int skip_sharded(np_replay_call *c, const rp_dump *rd, const char *fwd)
{
    const np_place_rec *sh = sharded_leaf(rd, c->name);
    if (!sh && c->backward)
        sh = sharded_leaf(rd, fwd);
    if (!sh)
        return 0;
    c->status = NP_REPLAY_SKIPPED;
    c->sharded = 1;
    snprintf(c->reason, sizeof c->reason,
             "a call of a sharded layout (%.200s: %.96s): its leaves are this rank's pieces "
             "of logical tensors, which the replay does not recompute from; compare judges "
             "it on the assembled tensors",
             sh->name, sh->placements);
    return 1;
}

/* A call is recomputed only when every argument it was given is one the
 * reference takes; msprobe lists a backward's gradients as autograd hands them
 * over, not by argument. Marks the call skipped and returns 1 otherwise. */
static int skip_unmodelled(np_replay_call *c, rp_dump *rd, const np_op_info *info,
                           const char *fwd)
{
    char why[NP_FMT_NAME_LEN + 200];
    size_t first, n;
    call_entries(rd, fwd, &first, &n);
    const char *no;
    if (!rd->positional)
        no = rp_np_unmodelled(why, sizeof why, info, fwd, rd->e + first, n);
    else if (c->backward)
        no = "msprobe's backward gradients are not tied to argument positions";
    else
        no = rp_msp_unmodelled(why, sizeof why, info, fwd, rd->e + first, n);
    if (!no)
        return 0;
    skip(c, no, "");
    return 1;
}

static void replay_call(np_replay_call *c, rp_dump *rd, const np_replay_options *o, np_error *err)
{
    int op = np_op_from_api(c->api);
    const np_op_info *info = np_op_get(op);
    if (!info) {
        skip(c, c->api, ": no float64 reference in the op registry");
        return;
    }
    char fwd[NP_FMT_NAME_LEN];
    snprintf(fwd, sizeof fwd, "%.*s.forward", (int)(strlen(c->name) - (c->backward ? 9 : 8)),
             c->name);
    if (skip_sharded(c, rd, fwd))
        return;
    if (skip_unmodelled(c, rd, info, fwd))
        return;
    np_op_call oc;
    np_op_call_init(&oc, info);
    const char *ac = autocast_dtype(rd, fwd, c->backward ? c->name : NULL);
    if (kwarg(rd, fwd, "fp32_override")) /* a per-op override: float32 inputs, the output cast back */
        ac = NULL;
    if (load_inputs(c, &oc, rd, fwd, c->name, ac, err))
        return;
    /* a promoted call was not quantized; a linear with a quantized backward
     * quantizes its backward GEMMs' operands itself */
    int lowp = kwarg(rd, fwd, "fp32_override") ? 0 : rd->lowp;
    const np_entry_rec *qb = lowp && c->backward && (info->op == NP_OP_LINEAR || info->op == NP_OP_MATMUL)
                                 ? kwarg(rd, fwd, "lowp_backward")
                                 : NULL;
    int qbwd = qb != NULL, grad_lowp = qb && qb->max == 2 ? NP_LOWP_MXFP8_E5M2 : lowp; /* 2: E5M2 gradients */
    if (!qbwd && rp_lowp_inputs(&oc, lowp)) {
        skip(c, "out of memory quantizing the GEMM operands", "");
        return;
    }
    const char *why = info->not_recomputable ? info->not_recomputable(&oc) : NULL;
    if (why) {
        skip(c, why, "");
        return;
    }
    if (info->op == NP_OP_VIEW) { /* the target shape is the dumped output's */
        const np_entry_rec *y = leaf(rd, fwd, "output", 0);
        if (y)
            view_of(&oc.out[0], y, NULL);
    }
    np_error e2;
    np_error_clear(&e2);
    if (info->shape(&oc, &e2) != NP_OK) {
        skip(c, e2.text, "");
        return;
    }
    int exact = (info->flags & NP_OPF_EXACT) != 0;
    if (!c->backward) {
        if (np_op_call_alloc(&oc, NP_OP_FORWARD, 1, &e2) || np_op_run(&oc, NP_OP_FORWARD, &e2))
            skip(c, e2.text, "");
        else
            compare_outputs(c, rd, c->name, oc.out, oc.n_out, exact, NULL, o, &oc, err);
        np_op_call_free(&oc);
        return;
    }
    /* the leaves a backward is judged on: at least one gradient arriving at
     * an output (an absent one of several is torch's None, zero) and one it
     * produced; otherwise it is not recomputable, not judged on zeros */
    int any_gout = 0, any_gin = 0;
    for (int j = 0; j < oc.n_out; j++) {
        const np_entry_rec *g = leaf(rd, c->name, "input", j);
        if (g && g->has_data && g->numel != oc.out[j].numel) {
            skip(c, g->name, ": its element count differs from the recomputed output's");
            np_op_call_free(&oc);
            return;
        }
        any_gout |= g && g->has_data;
    }
    for (int i = 0; i < oc.n_in; i++) {
        const np_entry_rec *g = leaf(rd, c->name, "output", i);
        any_gin |= g && g->has_data && oc.in[i].data && !(info->int_mask >> i & 1u);
    }
    if (!any_gout || !any_gin) {
        skip(c, !any_gout ? "no gradient arriving at its outputs is in the dump"
                          : "no gradient it produced for a float input is in the dump", "");
        np_op_call_free(&oc);
        return;
    }
    for (int j = 0; j < oc.n_out; j++) {
        const np_entry_rec *g = leaf(rd, c->name, "input", j);
        if (g && g->has_data && g->numel == oc.out[j].numel) {
            double *p = read_leaf(rd, g, err);
            if (!p) {
                skip(c, g->name, rd->why);
                return;
            }
            oc.gout[j] = oc.out[j];
            oc.gout[j].data = p;
        }
    }
    for (int i = 0; i < oc.n_in; i++) {
        const np_entry_rec *g = leaf(rd, c->name, "output", i);
        oc.want_gin[i] = g && g->has_data && !(info->int_mask >> i & 1u);
    }
    if (np_op_call_alloc(&oc, NP_OP_BACKWARD, 1, &e2) ||
        (qbwd ? (info->op == NP_OP_MATMUL ? rp_lowp_matmul_backward : rp_lowp_linear_backward)(&oc, lowp, grad_lowp, &e2)
              : np_op_run(&oc, NP_OP_BACKWARD, &e2)))
        skip(c, e2.text, "");
    else
        compare_outputs(c, rd, c->name, oc.gin, oc.n_in, exact, ac, o, &oc, err);
    np_op_call_free(&oc);
}

/* "Functional.linear.3.forward" -> api "Functional.linear", backward 0; -1 if not an API name. */
static int parse_call(np_replay_call *c, const char *name)
{
    size_t n = strlen(name);
    int bwd = n > 9 && strcmp(name + n - 9, ".backward") == 0;
    if (!bwd && !(n > 8 && strcmp(name + n - 8, ".forward") == 0))
        return -1;
    size_t end = n - (bwd ? 9 : 8), k = end;
    while (k > 0 && name[k - 1] >= '0' && name[k - 1] <= '9')
        k--;
    if (k == end || k < 2 || name[k - 1] != '.' || k - 1 >= sizeof c->api)
        return -1;
    snprintf(c->name, sizeof c->name, "%s", name);
    memcpy(c->api, name, k - 1);
    c->api[k - 1] = '\0';
    c->backward = bwd;
    return 0;
}

/* The calls with a leaf split or partial over the mesh (rd->sharded). */
static np_status read_sharded(rp_dump *rd, const char *path, np_error *err)
{
    np_status st = np_dumpio_read_placements(&rd->pl, &rd->n_pl, rd->d, err);
    if (st || !rd->n_pl)
        return st;
    if (np_strmap_init(&rd->sharded, rd->n_pl * 2 + 16))
        return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    rd->have_sharded = 1;
    const np_dumpio_info *di = np_dumpio_get_info(rd->d);
    for (size_t i = 0; i < rd->n_pl; i++) {
        const np_place_rec *p = &rd->pl[i];
        int k = np_strmap_get(&rd->names, p->name), split = 0;
        char item[NP_FMT_PLACE_LEN];
        for (int j = 0; *np_fmt_place_item(p, j, item, sizeof item); j++) {
            int dim;
            /* a micro-batch (mesh dimension mb) is a whole call of its own:
             * it ran on exactly the leaves it dumped */
            if (j < di->mesh_ndim && !strcmp(di->mesh_dims[j], NP_FMT_MESH_MB))
                continue;
            int kind = np_fmt_place_kind(item, &dim);
            split |= kind == 'S' || kind == 'P' || kind == 'A';
        }
        if (k >= 0 && split && np_strmap_get(&rd->sharded, rd->e[k].call) < 0 &&
            np_strmap_put(&rd->sharded, rd->e[k].call, (int)i))
            return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    }
    return NP_OK;
}

static np_status open_dump(rp_dump *rd, np_replay_result *r, const char *path, np_error *err)
{
    np_status st = np_dumpio_open(&rd->d, path, NULL, 0, err);
    if (st)
        return st;
    const np_dumpio_info *di = np_dumpio_get_info(rd->d);
    rd->positional = di->source && strcmp(di->source, "msprobe") == 0;
    rd->lowp = np_lowp_from_name(di->precision) > 0 ? np_lowp_from_name(di->precision) : 0;
    snprintf(r->task, sizeof r->task, "%s", di->task);
    snprintf(r->device, sizeof r->device, "%s", di->device);
    snprintf(r->precision, sizeof r->precision, "%s", di->precision);
    r->step = di->step;
    r->rank = di->rank;
    if ((st = np_dumpio_read_entries(&rd->e, &rd->n_e, rd->d, err)))
        return st;
    if (np_strmap_init(&rd->names, rd->n_e * 2 + 16))
        return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    for (size_t i = 0; i < rd->n_e; i++)
        if (np_strmap_get(&rd->names, rd->e[i].name) < 0 &&
            np_strmap_put(&rd->names, rd->e[i].name, (int)i))
            return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    return read_sharded(rd, path, err);
}

/* The API calls of the dump in production order, each once; with a
 * selection, only the calls it keeps. */
static np_status list_calls(np_replay_result *r, const rp_dump *rd, const np_replay_options *o,
                            np_error *err)
{
    r->calls = calloc(rd->n_e + 1, sizeof *r->calls);
    if (!r->calls)
        return np_error_set(err, NP_ERR_NOMEM, r->path, NULL, "out of memory");
    const char *last = "";
    for (size_t i = 0; i < rd->n_e; i++) {
        const np_entry_rec *en = &rd->e[i];
        if (strcmp(en->call, last) == 0 || strncmp(en->call, "Module.", 7) == 0)
            continue;
        last = en->call;
        if (o->select && !o->select(en->call, o->select_user))
            continue;
        np_replay_call *c = &r->calls[r->n_calls];
        memset(c, 0, sizeof *c);
        if (parse_call(c, en->call) == 0) {
            c->seq = en->seq;
            c->err_units = c->ratio = NAN;
            r->n_calls++;
        }
    }
    return NP_OK;
}

/* One file of np_replay_files: its dump, result and progress. */
typedef struct rp_file {
    rp_dump rd;
    np_replay_result *r;
    const np_replay_options *o;
    np_status st;
    size_t done;
    struct timespec t0;
} rp_file;

static double since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

np_status np_replay_files(size_t n, const char *const *paths, const np_replay_options *const *opts,
                          np_replay_result **out, np_error *errs)
{
    np_replay_options defo;
    np_replay_options_init(&defo);
    rp_file *fs = calloc(n + 1, sizeof *fs);
    size_t n_jobs = 0;
    for (size_t i = 0; i < n; i++) {
        out[i] = NULL;
        if (errs)
            np_error_clear(&errs[i]);
    }
    if (!fs) {
        for (size_t i = 0; errs && i < n; i++)
            np_error_set(&errs[i], NP_ERR_NOMEM, paths[i], NULL, "out of memory");
        return NP_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        rp_file *f = &fs[i];
        np_error *err = errs ? &errs[i] : NULL;
        f->o = opts && opts[i] ? opts[i] : &defo;
        f->rd.path = paths[i];
        clock_gettime(CLOCK_MONOTONIC, &f->t0);
        f->r = calloc(1, sizeof *f->r);
        if (!f->r) {
            f->st = np_error_set(err, NP_ERR_NOMEM, paths[i], NULL, "out of memory");
            continue;
        }
        snprintf(f->r->path, sizeof f->r->path, "%s", paths[i]);
        f->st = open_dump(&f->rd, f->r, paths[i], err);
        if (!f->st)
            f->st = list_calls(f->r, &f->rd, f->o, err);
        if (!f->st)
            n_jobs += f->r->n_calls;
    }
    /* calls are independent, whichever file they come from: one per thread
     * at a time (the kernels inside run on that thread; the payload reads
     * are thread-safe), each with its own buffers; results depend on the
     * data only */
    size_t *job = malloc((n_jobs + 1) * sizeof *job);
    long nj = job ? (long)n_jobs : 0;
    if (job)
        for (size_t i = 0, k = 0; i < n; i++)
            for (size_t c = 0; !fs[i].st && c < fs[i].r->n_calls; c++)
                job[k++] = i << 32 | c;
    for (size_t i = 0; !job && i < n; i++)
        if (!fs[i].st)
            fs[i].st = np_error_set(errs ? &errs[i] : NULL, NP_ERR_NOMEM, paths[i], NULL,
                                    "out of memory");
#pragma omp parallel for schedule(dynamic, 1) if (nj > 1)
    for (long j = 0; j < nj; j++) {
        rp_file *f = &fs[job[j] >> 32];
        np_replay_call *c = &f->r->calls[job[j] & 0xffffffffu];
        rp_dump mine = f->rd;
        mine.n_buf = 0;
        np_error e;
        np_error_clear(&e);
        replay_call(c, &mine, f->o, &e);
        free_bufs(&mine);
        if (c->status == NP_REPLAY_SKIPPED)
            c->err_units = c->ratio = NAN;
        if (f->o->progress) {
#pragma omp critical(np_replay_progress)
            {
                size_t total = f->r->n_calls;
                f->done++;
                if (f->done % 64 == 0 || f->done == total)
                    f->o->progress(f->done, total, f->o->progress_user);
            }
        }
    }
    free(job);
    np_status first = NP_OK;
    for (size_t i = 0; i < n; i++) {
        rp_file *f = &fs[i];
        for (size_t c = 0; !f->st && c < f->r->n_calls; c++)
            f->r->count[f->r->calls[c].status]++;
        if (f->r)
            f->r->seconds = since(&f->t0);
        free_bufs(&f->rd);
        np_strmap_free(&f->rd.names);
        if (f->rd.have_sharded)
            np_strmap_free(&f->rd.sharded);
        free(f->rd.pl);
        free(f->rd.e);
        np_dumpio_close(f->rd.d);
        if (f->st) {
            np_replay_result_free(f->r);
            if (!first)
                first = f->st;
        } else
            out[i] = f->r;
    }
    free(fs);
    return first;
}

np_status np_replay_file(np_replay_result **out, const char *path, const np_replay_options *o,
                         np_error *err)
{
    np_error e;
    np_error_clear(&e);
    np_status st = np_replay_files(1, &path, &o, out, &e);
    if (st && err)
        *err = e;
    return st;
}

void np_replay_result_free(np_replay_result *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_calls; i++)
        free(r->calls[i].leaves);
    free(r->calls);
    free(r);
}
