/* compare/verdict.c - tolerances per dtype, the verdict of every row
 * (pass / warning / error with a reason) and the root-cause walk over the
 * calls in execution order (docs/COMPARE.md explains the rules). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* A call is a culprit only when its output error is at least this many
 * times its input error (severity units), see docs/COMPARE.md. */
#define AMPLIFICATION 3.0

static int role_is_out(const char *role);
static int role_is_in(const char *role);

np_cmp_tolerance np_cmp_tolerance_for(const char *dtype)
{
    /* Calibrated on npu-sim against the cpu fp32 reference (docs/COMPARE.md):
     * largest relative L2 error of any row of a GPT step without a fault is
     * 3.3e-7 in fp32 and 6.2e-3 in bf16; the error levels keep a margin of
     * about 15x over that noise. */
    np_cmp_tolerance t = {1e-7, 5e-6, 1e-6, 0.9999999, 0.99999999}; /* float32 */
    if (!dtype)
        return t;
    if (!strcmp(dtype, "bfloat16") || !strcmp(dtype, "bf16"))
        t = (np_cmp_tolerance){1e-5, 0.1, 0.03, 0.995, 0.9995};
    else if (!strcmp(dtype, "float16") || !strcmp(dtype, "fp16"))
        t = (np_cmp_tolerance){1e-6, 0.02, 0.005, 0.9998, 0.99998};
    else if (!strcmp(dtype, "mxfp8") || !strcmp(dtype, "hif8") || !strcmp(dtype, "float8_e4m3fn") ||
             !strcmp(dtype, "float8_e5m2") || !strcmp(dtype, "hifloat8"))
        t = np_cmp_tolerance_lowp(dtype);
    else if (!strcmp(dtype, "float64") || !strcmp(dtype, "fp64"))
        t = (np_cmp_tolerance){1e-15, 1e-9, 1e-11, 1.0 - 1e-12, 1.0 - 1e-14};
    else if (!strcmp(dtype, "int64") || !strcmp(dtype, "int32") || !strcmp(dtype, "bool"))
        t = (np_cmp_tolerance){0, 0, 0, 1.0, 1.0};
    return t;
}

static int is_int_dtype(const char *d)
{
    return d && (!strcmp(d, "int64") || !strcmp(d, "int32") || !strcmp(d, "bool"));
}

/* The looser of two tolerances (per field). */
static np_cmp_tolerance looser(np_cmp_tolerance a, np_cmp_tolerance b)
{
    np_cmp_tolerance t = a;
    t.atol = fmax(a.atol, b.atol);
    t.rtol = fmax(a.rtol, b.rtol);
    t.rtol_warn = fmax(a.rtol_warn, b.rtol_warn);
    t.cos = fmin(a.cos, b.cos);
    t.cos_warn = fmin(a.cos_warn, b.cos_warn);
    return t;
}

/* Unit roundoff of a low-precision dtype or run precision (bf16 2^-8,
 * fp16 2^-11), 0 for any other. */
static double low_unit_roundoff(const char *d)
{
    if (!d)
        return 0;
    if (!strcmp(d, "bfloat16") || !strcmp(d, "bf16"))
        return 0x1p-8;
    if (!strcmp(d, "float16") || !strcmp(d, "fp16"))
        return 0x1p-11;
    return np_cmp_lowp_unit_roundoff(d);
}

/* The error level of a routed gradient (docs/COMPARE.md, "Gradients behind
 * a non-smooth op"): the backward of relu, max_pool2d, ... routes every
 * gradient element by a comparison of forward values; forward values with
 * relative noise d (~u in a low-precision run) send a fraction ~d of the
 * comparisons the other way, each moving a whole element, so the gradient's
 * relative L2 error is of order sqrt(u), not u. Measured in bf16 up to
 * 4.3 sqrt(u) (0.267, a conv bias gradient; mlp and cnn, 12 seeds x 4-5
 * batch sizes, scripts/tools/calibrate_compare.py); the level, 8 sqrt(u),
 * keeps a ~2x margin over that. */
#define ROUTED_LEVEL 8.0

np_cmp_tolerance np_cmp_tolerance_routed(np_cmp_tolerance t, double u)
{
    if (u <= 0)
        return t;
    double r = ROUTED_LEVEL * sqrt(u), w = r / 3.0;
    np_cmp_tolerance g = {t.atol, r, w, 1.0 - r * r / 2.0, 1.0 - w * w / 2.0};
    return looser(t, g);
}

/* Tolerance for a row: the cmp dtype's, loosened to the run's precision
 * (a float32 tensor of a bf16 run carries bf16 noise) and, for a gradient
 * behind a non-smooth op (routed_u > 0: the run's unit roundoff), to the
 * routed level; then the overrides. */
static np_cmp_tolerance row_tolerance(const np_cmp_pair *p, const char *dtype, const np_cmp_options *o,
                                      double routed_u, const char *inherited)
{
    np_cmp_tolerance t = np_cmp_tolerance_for(dtype);
    if (!is_int_dtype(dtype)) {
        if (inherited) /* the data carry a lower dtype's rounding (docs/COMPARE.md) */
            t = looser(t, np_cmp_tolerance_for(inherited));
        if (p->cmp_precision[0])
            t = looser(t, np_cmp_tolerance_for(p->cmp_precision));
        if (p->bench_precision[0])
            t = looser(t, np_cmp_tolerance_for(p->bench_precision));
        t = np_cmp_tolerance_routed(t, routed_u);
        if (!isnan(o->atol))
            t.atol = o->atol;
        if (!isnan(o->rtol)) {
            t.rtol = o->rtol;
            t.rtol_warn = o->rtol / 3.0;
            if (isnan(o->cos)) { /* the cosine that goes with this L2 error: 1 - rtol^2 / 2 */
                t.cos = 1.0 - o->rtol * o->rtol / 2.0;
                t.cos_warn = 1.0 - t.rtol_warn * t.rtol_warn / 2.0;
            }
        }
        if (!isnan(o->cos)) {
            t.cos = o->cos;
            t.cos_warn = 1.0 - (1.0 - o->cos) / 10.0;
        }
    }
    return t;
}

/* The tolerance of the last dtype seen: rows come in runs of one dtype
 * (one memo for plain rows, one for routed gradients). */
typedef struct tol_memo {
    const char *dtype;
    np_cmp_tolerance t;
} tol_memo;

/* Ops whose backward routes the gradient by a comparison of forward values
 * (a sign, the position of a maximum, a clamp bound): API names (the part
 * after "Functional." / "Torch." / "Tensor.") and module classes. */
static const char *const nonsmooth_api[] = {
    "relu", "relu_", "relu6", "leaky_relu", "leaky_relu_", "rrelu", "prelu", "hardtanh",
    "hardtanh_", "threshold", "threshold_", "hardswish", "hardsigmoid", "max_pool1d",
    "max_pool2d", "max_pool3d", "adaptive_max_pool1d", "adaptive_max_pool2d",
    "adaptive_max_pool3d", "max", "min", "amax", "amin", "maximum", "minimum", "clamp",
    "clamp_", "clip", "abs", "topk", "sort", "median", NULL};
static const char *const nonsmooth_module[] = {
    "ReLU", "ReLU6", "LeakyReLU", "RReLU", "PReLU", "Hardtanh", "Threshold", "Hardswish",
    "Hardsigmoid", "MaxPool1d", "MaxPool2d", "MaxPool3d", "AdaptiveMaxPool1d",
    "AdaptiveMaxPool2d", "AdaptiveMaxPool3d", NULL};

static int in_list(const char *const *l, const char *s, size_t n)
{
    for (; *l; l++)
        if (strlen(*l) == n && !strncmp(*l, s, n))
            return 1;
    return 0;
}

/* 1 when `name` is the backward call of a non-smooth op:
 * "Functional.relu.1.backward", "Module.pool.MaxPool2d.backward.0". */
int cmp_is_nonsmooth_backward(const char *name)
{
    const char *b = strstr(name, ".backward");
    if (!b)
        return 0;
    if (!strncmp(name, "Module.", 7)) {
        const char *cls = b;
        while (cls > name && cls[-1] != '.')
            cls--;
        return in_list(nonsmooth_module, cls, (size_t)(b - cls));
    }
    const char *op = strchr(name, '.');
    if (!op)
        return 0;
    op++;
    const char *end = strchr(op, '.');
    return end && in_list(nonsmooth_api, op, (size_t)(end - op));
}

/* The first call from which gradients count as routed (index into
 * p->calls, -1 for none): in a low-precision run, the first backward call
 * of a non-smooth op; when the dump holds no API call at all (level L0),
 * the first backward call, since any module may hold one. */
static int first_routed_call(const np_cmp_pair *p)
{
    int any_api = 0, first_bwd = -1;
    for (size_t k = 0; k < p->n_calls; k++) {
        const np_cmp_call *c = &p->calls[k];
        if (c->backward && cmp_is_nonsmooth_backward(c->name))
            return (int)k;
        if (!strcmp(c->kind, "api"))
            any_api = 1;
        if (c->backward && first_bwd < 0)
            first_bwd = (int)k;
    }
    return any_api ? -1 : first_bwd;
}

static void set(np_cmp_row *r, np_cmp_verdict v, double sev, const char *why)
{
    r->verdict = (int8_t)v;
    r->severity = sev;
    r->reason = why;
    r->n_reason_args = 0;
}

/* A verdict whose reason is the static format `fmt` with the numbers a0, a1
 * (n of them), formatted only when the text is asked for
 * (np_cmp_row_reason): a statistics comparison has a reason on nearly every
 * row, and storing each text would cost more than the row. The formats use
 * only %.Ng and %lld. */
static void set_fmt(np_cmp_row *r, np_cmp_verdict v, double sev, const char *fmt, int n, double a0,
                    double a1)
{
    set(r, v, sev, fmt);
    r->reason_args[0] = a0;
    r->reason_args[1] = a1;
    r->n_reason_args = (int8_t)n;
}


static void verdict_tensor(np_cmp_row *r, np_cmp_tolerance t, double scale)
{
    np_cmp_metrics *m = r->m;
    if (m->n == 0 && !m->n_mask_mismatch) {
        set(r, NP_VERDICT_PASS, 0, m->note[0] ? m->note : "empty tensor");
        return;
    }
    if (m->n_mask_mismatch) {
        set_fmt(r, NP_VERDICT_ERROR, INFINITY, "NaN/Inf positions differ at %lld elements", 1,
                (double)m->n_mask_mismatch, 0);
        return;
    }
    if (is_int_dtype(r->cmp->dtype) || is_int_dtype(r->bench->dtype)) {
        if (m->max_abs_err > 0)
            set_fmt(r, NP_VERDICT_ERROR, INFINITY, "integer values differ (MaxAbsErr %.17g)", 1,
                    m->max_abs_err, 0);
        else
            set(r, NP_VERDICT_PASS, 0, "");
        return;
    }
    double floor = fmax(t.atol * sqrt((double)m->n), scale);
    double den = m->bench_norm > floor ? m->bench_norm : floor;
    m->rel_l2 = den > 0 ? m->euc_dist / den : (m->euc_dist > 0 ? INFINITY : 0.0);
    double sev = t.rtol > 0 ? m->rel_l2 / t.rtol : (m->rel_l2 > 0 ? INFINITY : 0);
    int cos_ok = !isnan(m->cosine) && m->bench_norm > floor;
    /* 1 - cos grows with the square of the error: its square root keeps the
     * severity linear in the error, like rel_l2, so ratios compare. */
    double cos_sev = cos_ok && t.cos < 1 && m->cosine < 1 ? sqrt((1.0 - m->cosine) / (1.0 - t.cos)) : 0;
    if (cos_sev > sev)
        sev = cos_sev;
    if (sev > 1) {
        if (cos_sev >= sev)
            set_fmt(r, NP_VERDICT_ERROR, sev, "Cosine %.9g below %.9g", 2, m->cosine, t.cos);
        else
            set_fmt(r, NP_VERDICT_ERROR, sev, "relative L2 error %.3g above %.3g", 2, m->rel_l2,
                    t.rtol);
    } else if (m->rel_l2 > t.rtol_warn) {
        set_fmt(r, NP_VERDICT_WARNING, sev, "relative L2 error %.3g above the warning level %.3g",
                2, m->rel_l2, t.rtol_warn);
    } else if (cos_ok && m->cosine < t.cos_warn) {
        set_fmt(r, NP_VERDICT_WARNING, sev, "Cosine %.9g below the warning level %.9g", 2,
                m->cosine, t.cos_warn);
    } else {
        set(r, NP_VERDICT_PASS, sev, m->note);
    }
}

void np_cmp_row_stats(np_cmp_stats *out, const np_cmp_row *r)
{
    const np_cmp_side *b = r->bench, *c = r->cmp;
    if (!r->has_stats || !b || !c) {
        for (int i = 0; i < 4; i++)
            out->diff[i] = out->rel[i] = NAN;
        return;
    }
    const np_stats *bs = &b->stats, *cs = &c->stats;
    double bv[4] = {bs->max, bs->min, bs->mean, bs->norm}, cv[4] = {cs->max, cs->min, cs->mean, cs->norm};
    for (int i = 0; i < 4; i++) {
        /* equal infinities (msprobe's statistics keep them) differ by 0, as msprobe says */
        out->diff[i] = cv[i] == bv[i] ? 0.0 : cv[i] - bv[i];
        /* as msprobe: 0 when equal, inf against a bench of 0 */
        out->rel[i] = out->diff[i] == 0 ? 0.0
                      : isnan(out->diff[i]) ? NAN
                      : bv[i] != 0 ? fabs(out->diff[i] / bv[i])
                                   : INFINITY;
    }
}

/* The reasons of statistics rows, by the statistic that differs most. */
static const char *const stat_err_fmt[4] = {
    "max differs by %.3g (relative to the bench scale), above %.3g",
    "min differs by %.3g (relative to the bench scale), above %.3g",
    "mean differs by %.3g (relative to the bench scale), above %.3g",
    "L2 norm differs by %.3g (relative to the bench scale), above %.3g"};
static const char *const stat_warn_fmt[4] = {
    "max differs by %.3g (relative to the bench scale), above the warning level %.3g",
    "min differs by %.3g (relative to the bench scale), above the warning level %.3g",
    "mean differs by %.3g (relative to the bench scale), above the warning level %.3g",
    "L2 norm differs by %.3g (relative to the bench scale), above the warning level %.3g"};

static void verdict_stats(np_cmp_row *r, np_cmp_tolerance t, double scale)
{
    const np_cmp_side *b = r->bench, *c = r->cmp;
    const np_stats *bs = &b->stats, *cs = &c->stats;
    double bv[4] = {bs->max, bs->min, bs->mean, bs->norm}, cv[4] = {cs->max, cs->min, cs->mean, cs->norm};
    np_cmp_stats st;
    r->has_stats = 1;
    np_cmp_row_stats(&st, r);
    if (bs->nan_count != cs->nan_count || np_cmp_side_infs(b) != np_cmp_side_infs(c)) {
        set_fmt(r, NP_VERDICT_ERROR, INFINITY,
                "NaN/Inf counts differ (cmp %lld, bench %lld non-finite)", 2,
                (double)(cs->nan_count + np_cmp_side_infs(c)),
                (double)(bs->nan_count + np_cmp_side_infs(b)));
        return;
    }
    if (is_int_dtype(c->dtype) || is_int_dtype(b->dtype)) {
        int same = 1;
        for (int i = 0; i < 4; i++)
            same &= st.diff[i] == 0 || (isnan(bv[i]) && isnan(cv[i]));
        set(r, same ? NP_VERDICT_PASS : NP_VERDICT_ERROR, same ? 0 : INFINITY,
            same ? "" : "integer statistics differ");
        return;
    }
    double n = (double)(b->numel > 0 ? b->numel : 1);
    double floor = fmax(t.atol * sqrt(n), scale);
    /* the scales from finite statistics only (msprobe's keep +-inf) */
    double maxabs = fmax(isfinite(bs->max) ? fabs(bs->max) : 0, isfinite(bs->min) ? fabs(bs->min) : 0);
    double norm = isfinite(bs->norm) ? bs->norm : maxabs * sqrt(n);
    double rms_floor = fmax(t.atol, scale / sqrt(n));
    double den[4] = {fmax(maxabs, rms_floor), fmax(maxabs, rms_floor), fmax(norm / sqrt(n), rms_floor),
                     fmax(norm, floor)};
    double worst = 0;
    int wi = 0;
    for (int i = 0; i < 4; i++) {
        if ((isnan(bv[i]) && isnan(cv[i])) || bv[i] == cv[i])
            continue;
        double e = den[i] > 0 ? fabs(st.diff[i]) / den[i] : (st.diff[i] != 0 ? INFINITY : 0);
        if (isnan(e))
            e = INFINITY;
        if (e > worst) {
            worst = e;
            wi = i;
        }
    }
    double sev = t.rtol > 0 ? worst / t.rtol : (worst > 0 ? INFINITY : 0);
    if (sev > 1)
        set_fmt(r, NP_VERDICT_ERROR, sev, stat_err_fmt[wi], 2, worst, t.rtol);
    else if (worst > t.rtol_warn)
        set_fmt(r, NP_VERDICT_WARNING, sev, stat_warn_fmt[wi], 2, worst, t.rtol_warn);
    else
        set(r, NP_VERDICT_PASS, sev, "");
}

/* The roles a side records for a call, as bits; the facts of one call for
 * the one-sided rule below (CALL_PAIRED: some leaf of it matched). */
enum { ROLE_INPUT = 1, ROLE_OUTPUT = 2, ROLE_PARAM = 4, ROLE_GRAD = 8, CALL_PAIRED = 0x80 };

static int role_bit(const char *role)
{
    return !strcmp(role, "input")             ? ROLE_INPUT
           : !strcmp(role, "output")          ? ROLE_OUTPUT
           : !strcmp(role, "parameters")      ? ROLE_PARAM
           : !strcmp(role, "parameters_grad") ? ROLE_GRAD
                                              : 0;
}

/* Per call k: facts[2k] the bench's roles, facts[2k+1] the cmp's, each
 * with CALL_PAIRED when a leaf of k matched. NULL when out of memory. */
static unsigned char *call_facts(const np_cmp_pair *p)
{
    unsigned char *f = calloc(2 * (p->n_calls + 1), 1);
    for (size_t i = 0; f && i < p->n_rows; i++) {
        const np_cmp_row *r = &p->rows[i];
        if (r->call_index < 0)
            continue;
        unsigned char *fb = &f[2 * r->call_index];
        if (r->bench)
            fb[0] |= (unsigned char)role_bit(r->bench->role);
        if (r->cmp)
            fb[1] |= (unsigned char)role_bit(r->cmp->role);
        if (r->bench && r->cmp)
            fb[0] |= CALL_PAIRED, fb[1] |= CALL_PAIRED;
    }
    return f;
}

/* A leaf on one side only is evidence, an error that can make a culprit,
 * when the other side should have it too: an input, output, parameter or
 * parameter gradient of a call paired on both sides, when the other side
 * records leaves of that role for the call but not this one (a dropped
 * bias at step 0 shows only this way: weight there, bias missing). When the
 * other side records no leaf of that role for the call at all, the two
 * dumpers differ in what they record (a module's backward outputs), not
 * the runs: a warning, as for calls the other run never made. */
/* `call` is the forward call of a dtype cast API (match.c pairs these by
 * callsite). */
static int dropped_cast(const char *call)
{
    size_t n = strlen(call);
    return n >= 8 && !strcmp(call + n - 8, ".forward") && cmp_cast_base(call) > 0;
}

static void verdict_one_side(np_cmp_pair *p, np_cmp_row *r, const unsigned char *facts)
{
    const np_cmp_side *s = r->bench ? r->bench : r->cmp;
    const char *has = r->bench ? "bench" : "cmp", *lacks = r->bench ? "cmp" : "bench";
    cmp_pair_priv *pv = p->priv;
    const char *why = NULL;
    int bit = role_bit(s->role);
    if (bit && facts && r->call_index >= 0) {
        unsigned char other = facts[2 * r->call_index + (r->bench ? 1 : 0)];
        if ((other & CALL_PAIRED) && (other & bit))
            why = bit == ROLE_GRAD ? "parameter gradient" : bit == ROLE_PARAM ? "parameter" : s->role;
    }
    if (why && pv) {
        set(r, NP_VERDICT_ERROR, INFINITY,
            cmp_arena_printf(&pv->arena, "only the %s has this %s (%s of the call); the %s lacks it",
                       has, why, s->role, lacks));
        return;
    }
    /* a dtype cast the bench makes and the cmp does not (a router's
     * .float() dropped): the cmp computes what follows in another dtype; a
     * cast of the cmp only is what mixed precision adds (a warning) */
    if (r->bench && pv && dropped_cast(s->call)) {
        set(r, NP_VERDICT_ERROR, INFINITY,
            cmp_arena_printf(&pv->arena, "the bench casts here (%s) and the cmp does not: a dropped "
                       "dtype cast, so the cmp computes what follows in another dtype", s->call));
        return;
    }
    set(r, NP_VERDICT_WARNING, 0,
        r->bench ? "no cmp leaf matched this bench leaf" : "No bench data matched.");
}

/* Rows whose error says nothing about the numerics: left out of the root
 * cause (a payload unreadable or corrupt, an /entries row that contradicts
 * itself, a payload on one side only). */
/* Leaves whose values are uninitialized memory, or may be: the output of
 * the torch.empty family, and the first input of a call that overwrites it
 * (`x[idx] = v`, x.copy_(v), x.fill_(v), x.zero_()), its destination before
 * the write (HF Mixtral: inv_perm = torch.empty_like(perm);
 * inv_perm[perm] = arange(...)). Two identical runs hold different bytes
 * there, so they are not judged; a destination that held real data was
 * judged where it was made, and what is written is judged where it is read. (msprobe 26.2 passes every row of these calls,
 * and of `to` and `numpy`, which nprobe judges.) */
static const char *const uninit_api[] = {"empty", "empty_like", "empty_strided", "new_empty",
                                         "new_empty_strided", NULL};

static const char *const write_api[] = {"__setitem__", "copy_", "fill_", "zero_", NULL};

static int uninitialized_leaf(const np_cmp_side *s)
{
    const char *op = s && s->call ? strchr(s->call, '.') : NULL;
    if (!op || strncmp(s->call, "Module.", 7) == 0 || !strstr(s->call, ".forward"))
        return 0;
    op++;
    const char *end = strchr(op, '.');
    if (!end)
        return 0;
    size_t n = (size_t)(end - op);
    if (in_list(write_api, op, n)) {
        size_t ln = strlen(s->name);
        return !strcmp(s->role, "input") && ln > 8 && !strcmp(s->name + ln - 8, ".input.0");
    }
    return !strcmp(s->role, "output") && in_list(uninit_api, op, n);
}

static int row_left_out(const np_cmp_pair *p, const np_cmp_row *r, size_t i)
{
    const cmp_pair_priv *pv = p->priv;
    if (pv && pv->payload && pv->payload[i] != CMP_PAYLOAD_OK)
        return 1;
    if ((r->bench && r->bench->defect) || (r->cmp && r->cmp->defect))
        return 1;
    return p->mode == NP_CMP_MODE_TENSOR && r->bench && r->cmp &&
           strcmp(r->cmp->role, "kwargs") != 0 && r->bench->has_data != r->cmp->has_data;
}

/* A step the loss scaler skipped (docs/COMPARE.md, "A step the loss scaler
 * skipped"): a gradient row that is non-finite on one side only, where that
 * side's step carries a loss scale above 1 (root attribute loss_scale),
 * overflowed its dtype under the scale. A dynamic loss scaler
 * (torch.amp.GradScaler, the runtime's fp16 scaler) finds the inf/NaN,
 * skips the optimizer step and lowers the scale: what the run was built to
 * do, not a defect of the call. The row is a warning of severity 0 (it
 * makes no culprit), and the pair's notes say it once. */
static void verdict_overflow(np_cmp_pair *p, np_cmp_row *r)
{
    const np_cmp_side *b = r->bench, *c = r->cmp;
    if (r->verdict != NP_VERDICT_ERROR || !cmp_side_is_grad(b) || !cmp_side_is_grad(c))
        return;
    int bad_b = b->stats.nan_count + np_cmp_side_infs(b) > 0 || !isfinite(b->stats.max) ||
                !isfinite(b->stats.min);
    int bad_c = c->stats.nan_count + np_cmp_side_infs(c) > 0 || !isfinite(c->stats.max) ||
                !isfinite(c->stats.min);
    double s = bad_c ? p->cmp_loss_scale : p->bench_loss_scale;
    if (bad_b == bad_c || !(s > 1))
        return;
    const char *side = bad_c ? "cmp" : "bench";
    set_fmt(r, NP_VERDICT_WARNING, 0,
            bad_c ? "non-finite on the cmp side only, under its loss scale %.17g: the gradient "
                    "overflowed, and the loss scaler skips this step (not judged)"
                  : "non-finite on the bench side only, under its loss scale %.17g: the gradient "
                    "overflowed, and the loss scaler skips this step (not judged)",
            1, s, 0);
    char note[400];
    int n = snprintf(note, sizeof note, "Step skipped by the %s's loss scaler: gradients "
                     "non-finite on the %s side only, under its loss scale %.17g (an overflow; "
                     "the scaler skips the optimizer step): those rows are warnings, not "
                     "judged, and the next steps run on weights that differ by this update.",
                     side, side, s);
    size_t len = strlen(p->notes);
    if (strstr(p->notes, note) || n <= 0 || len + (size_t)n + 2 > sizeof p->notes)
        return;
    snprintf(p->notes + len, sizeof p->notes - len, "%s%s", len ? " " : "", note);
}

static void verdict_row(np_cmp_pair *p, np_cmp_row *r, const np_cmp_options *o, double scale,
                        tol_memo *memo,
                        double routed_u, const char *routed_from, const char *inherited,
                        const char *inherited_from, const unsigned char *facts)
{
    cmp_pair_priv *pv = p->priv;
    const np_cmp_side *bad = r->bench && r->bench->defect ? r->bench
                             : r->cmp && r->cmp->defect   ? r->cmp
                                                          : NULL;
    if (bad && pv) {
        set(r, NP_VERDICT_ERROR, INFINITY,
            cmp_arena_printf(&pv->arena, "the %s row in /entries contradicts itself: %s",
                       bad == r->bench ? "bench" : "cmp", bad->defect));
        return;
    }
    const np_cmp_side *one = r->bench ? r->bench : r->cmp;
    if ((!r->bench || !r->cmp) && one && !strcmp(one->dtype, "None")) {
        /* msprobe's null item (an optional argument left out): a dump that
         * does not record absent arguments has the same absent value */
        set(r, NP_VERDICT_PASS, 0,
            "None on one side, not dumped on the other: the same absent argument");
        return;
    }
    np_cmp_verdict lv;
    double lsev, llevel;
    const char *lfmt;
    if ((!r->bench || !r->cmp) && one &&
        cmp_lowp_row(one->name, one->role, one->stats.max,
                     one == r->cmp ? p->cmp_precision : p->bench_precision, &lv, &lsev, &lfmt, &llevel)) {
        set_fmt(r, lv, lsev, lfmt, isnan(llevel) ? 0 : 2, one->stats.max, llevel);
        return;
    }
    if (!r->bench || !r->cmp) {
        verdict_one_side(p, r, facts);
        return;
    }
    if (r->reason && r->reason[0] && r->verdict == NP_VERDICT_ERROR)
        return; /* set earlier: payload read failure */
    const np_cmp_side *b = r->bench, *c = r->cmp;
    if (!strcmp(c->role, "kwargs") || !strcmp(b->role, "kwargs")) {
        double bv = b->stats.max, cv = c->stats.max;
        r->has_stats = r->m == NULL; /* statistics mode: the diffs of the value, as msprobe */
        if (r->m) {
            r->m->max_abs_err = fabs(cv - bv);
            r->m->max_rel_err = bv != 0 ? fabs((cv - bv) / bv) : fabs(cv) / 2.220446049250313e-16;
        }
        if (bv == cv || (isnan(bv) && isnan(cv)) || fabs(cv - bv) <= 1e-12 * fabs(bv))
            set(r, NP_VERDICT_PASS, 0, "");
        else
            set_fmt(r, NP_VERDICT_ERROR, INFINITY, "scalar argument differs: cmp %.17g, bench %.17g",
                    2, cv, bv);
        return;
    }
    if (!cmp_same_shape(b, c)) {
        set(r, NP_VERDICT_ERROR, INFINITY, "Shape of NPU and bench Tensor do not match.");
        return;
    }
    if (is_int_dtype(b->dtype) != is_int_dtype(c->dtype)) {
        set(r, NP_VERDICT_ERROR, INFINITY, "Dtype of NPU and bench Tensor do not match.");
        return;
    }
    if (!memo->dtype || strcmp(memo->dtype, c->dtype) != 0) {
        memo->t = row_tolerance(p, c->dtype, o, routed_u, inherited);
        memo->dtype = c->dtype;
        /* remember it for the reports (the tolerances in effect) */
        const char *scope = routed_u > 0 ? routed_from : inherited ? inherited_from : "";
        int seen = 0;
        for (int k = 0; pv && k < pv->n_tols && !seen; k++)
            seen = !strcmp(pv->tols[k].dtype, c->dtype) && !strcmp(pv->tols[k].scope, scope);
        if (pv && !seen && pv->n_tols < CMP_MAX_TOLS && p->mode != NP_CMP_MODE_MD5)
            pv->tols[pv->n_tols++] = (cmp_tol_rec){c->dtype, scope, memo->t};
    }
    np_cmp_tolerance t = memo->t;
    if (p->mode == NP_CMP_MODE_TENSOR && b->has_data != c->has_data) {
        set(r, NP_VERDICT_ERROR, INFINITY,
            b->has_data ? "has_data is 0 on the cmp side: it stored no payload, the bench did "
                          "(nothing to compare)"
                        : "has_data is 0 on the bench side: it stored no payload, the cmp did "
                          "(nothing to compare)");
        return;
    }
    if (p->mode == NP_CMP_MODE_MD5) {
        if (b->crc32 == c->crc32)
            set(r, NP_VERDICT_PASS, 0, "");
        else
            set(r, NP_VERDICT_ERROR, INFINITY, "crc32 differs");
    } else if (p->mode == NP_CMP_MODE_TENSOR && b->has_data && c->has_data) {
        verdict_tensor(r, t, scale);
    } else {
        verdict_stats(r, t, scale);
    }
    if (r->verdict != NP_VERDICT_PASS && uninitialized_leaf(b) && uninitialized_leaf(c))
        set(r, NP_VERDICT_PASS, 0, /* judged above for its metrics, then not */
            "not judged: uninitialized memory (torch.empty's output, or an in-place write's "
            "destination before the write)");
    verdict_overflow(p, r);
}

/* Weights that parted in an earlier step (docs/COMPARE.md): after the
 * first step the runs' weights are the optimizer's answer to the earlier
 * steps' gradients, which those steps' comparisons judged. Adam normalises
 * each element's update (lr m / sqrt(v)), so a gradient element that is
 * rounding noise around zero (an attention key bias, which softmax
 * ignores; a batch-norm bias followed by another normalisation) moves its
 * weight by +-lr in either direction: a relative difference of order 1 on
 * a weight near zero, not a fault of this step. So at a step > 0 a
 * parameter row, and an API input row that holds the same values as a
 * parameter row (a bias passed to Functional.linear), is at most a
 * warning; its severity still counts as an input of the calls that use it,
 * so a call whose outputs fail from such weights is named "the weights
 * parted before this step" (rule 4) and its successors propagate. */
/* What identifies a tensor's values: the crc32 of its stored bytes where
 * the row has one (a file's, or an assembled tensor's own: compare/
 * assemble.c logical_crc, whose statistics, combined from its pieces', may
 * differ from a whole tensor's in the last bits), else its statistics. */
static void weights_key(char *buf, size_t cap, const np_cmp_side *s)
{
    if (s->has_data && s->crc32)
        snprintf(buf, cap, "%lld|crc %08x|%s", (long long)s->numel, (unsigned)s->crc32, s->dtype);
    else
        snprintf(buf, cap, "%lld|%.17g|%.17g|%.17g|%.17g|%u|%s", (long long)s->numel, s->stats.max,
                 s->stats.min, s->stats.mean, s->stats.norm, (unsigned)s->crc32, s->dtype);
}

/* The reason of an input row that holds a parted weight (its pointer marks
 * such rows for the walk's in-place update rule, rc_calls). */
static const char weight_input_fmt[] =
    "an input that holds a weight (a parameter's values, or at L1 a leaf that takes a gradient; "
    "severity %.3g): the weights parted in an earlier step (the optimizer's answer to earlier "
    "gradients); judged there, and here through the calls that use it";

static int verdict_weights(np_cmp_pair *p, np_cmp_row *r, const np_strmap *wmap,
                           const np_strmap *omap)
{
    char k[256];
    const char *role = r->cmp->role;
    int is_param = !strcmp(role, "parameters");
    if (r->verdict == NP_VERDICT_PASS || !isfinite(r->severity))
        return 0;
    if (!is_param) {
        if (strcmp(role, "input") != 0 || r->call_index < 0 ||
            strcmp(p->calls[r->call_index].kind, "api") != 0)
            return 0;
        weights_key(k, sizeof k, r->cmp);
        int w = np_strmap_get(wmap, k);
        if (w >= 0) {
            char kb[256], kw[256];
            weights_key(kb, sizeof kb, r->bench);
            weights_key(kw, sizeof kw, p->rows[w].bench);
            if (strcmp(kb, kw) != 0)
                return 0;
        } else if (!omap || !r->cmp->requires_grad || !r->bench->requires_grad ||
                   np_strmap_get(omap, k) >= 0) {
            return 0; /* a dump without parameter rows: a leaf that takes a gradient */
        }
    }
    set_fmt(r, NP_VERDICT_WARNING, r->severity,
            is_param ? "the weights parted in an earlier step (severity %.3g): the optimizer's "
                       "answer to earlier gradients (Adam moves a weight whose gradient is "
                       "rounding noise by +-lr); judged there, and here through the calls that "
                       "use it"
                     : weight_input_fmt,
            1, r->severity, 0);
    return 1;
}

/* The optimizer's in-place steps on a weight that parted (docs/COMPARE.md,
 * "Weights that parted in an earlier step"): where the optimizer runs
 * between start and stop, its in-place calls (weight decay's mul_, Adam's
 * addcdiv_) take the parted weight as their input.0 and give it back
 * updated. Such an output row, failing by less than AMPLIFICATION x the
 * weight's own parting, holds the weight: a warning as the weight is; so is
 * every later input row that holds it (same statistics and crc32 on both
 * sides). A weight that parted beyond that, or an update of a weight that
 * agrees, is judged as before. Rows in execution order. */
static int inplace_api(const char *name)
{
    const char *op = strchr(name, '.');
    const char *end = op ? strchr(op + 1, '.') : NULL;
    return end && end - op > 2 && end[-1] == '_' && end[-2] != '_';
}

static void parted_key(char *k, size_t cap, const np_cmp_row *r);

static void weights_inplace(np_cmp_pair *p)
{
    cmp_pair_priv *pv = p->priv;
    np_strmap held = {0};
    if (!pv || np_strmap_init(&held, 64) != 0)
        return;
    int call = -1;
    double w_self = 0; /* the current call's input.0 holds a parted weight: its severity */
    for (size_t i = 0; i < p->n_rows; i++) {
        np_cmp_row *r = &p->rows[i];
        if (!r->bench || !r->cmp || r->call_index < 0 || !isfinite(r->severity))
            continue;
        const np_cmp_call *c = &p->calls[r->call_index];
        if (r->call_index != call) {
            call = r->call_index;
            w_self = 0;
        }
        if (c->backward || strcmp(c->kind, "api") != 0)
            continue;
        char k[600];
        parted_key(k, sizeof k, r);
        int in = !strcmp(r->cmp->role, "input"), out = !strcmp(r->cmp->role, "output");
        if (in && r->verdict == NP_VERDICT_ERROR && np_strmap_get(&held, k) >= 0)
            set_fmt(r, NP_VERDICT_WARNING, r->severity, weight_input_fmt, 1, r->severity, 0);
        size_t ln = strlen(r->cmp->name);
        /* (the reason may go on: a weight that parted on noise, parted_noise.c) */
        if (in && r->verdict == NP_VERDICT_WARNING && r->reason &&
            (r->reason == weight_input_fmt ||
             !strncmp(r->reason, weight_input_fmt, strcspn(weight_input_fmt, "%"))) && ln > 8 &&
            !strcmp(r->cmp->name + ln - 8, ".input.0"))
            w_self = r->severity;
        if (out && w_self > 1 && inplace_api(c->name) && r->verdict == NP_VERDICT_ERROR &&
            r->severity < AMPLIFICATION * w_self) {
            set_fmt(r, NP_VERDICT_WARNING, r->severity,
                    "holds a weight that parted in an earlier step (severity %.3g), after the "
                    "optimizer's in-place step on it: it differs as the weight does; judged where "
                    "it parted",
                    1, r->severity, 0);
            const char *kc = cmp_arena_strdup(&pv->arena, k);
            if (kc && np_strmap_get(&held, kc) < 0)
                np_strmap_put(&held, kc, (int)i);
        }
    }
    np_strmap_free(&held);
}

/* The lowest precision the data carry (a bfloat16/float16 tensor on
 * either side, from its first call on: *s_low), when the runs' declared
 * precision (u) says less; NULL otherwise. *from: the sentence naming
 * where (docs/COMPARE.md, "Tolerances that follow the data"). */
static const char *data_low_precision(np_cmp_pair *p, const np_cmp_options *o, double u,
                                      int64_t *s_low, const char **from)
{
    cmp_pair_priv *pv = p->priv;
    const char *inherited = NULL;
    for (size_t i = 0; isnan(o->rtol) && i < p->n_rows; i++) {
        const np_cmp_row *r = &p->rows[i];
        if (r->call_index < 0)
            continue;
        const np_cmp_side *sd[2] = {r->bench, r->cmp};
        for (int k = 0; k < 2; k++) {
            if (!sd[k] || !strcmp(sd[k]->role, "kwargs"))
                continue;
            double lu = low_unit_roundoff(sd[k]->dtype);
            int64_t sq = p->calls[r->call_index].seq;
            if (lu <= 0)
                continue;
            if (!inherited || lu > low_unit_roundoff(inherited))
                inherited = sd[k]->dtype; /* the lowest precision seen */
            *s_low = sq < *s_low ? sq : *s_low;  /* from the first low tensor on */
        }
    }
    if (inherited && u >= low_unit_roundoff(inherited))
        inherited = NULL; /* the declared precision says as much */
    if (inherited && pv) {
        for (size_t k = 0; k < p->n_calls; k++)
            if (p->calls[k].seq == *s_low) {
                *from = cmp_arena_printf(&pv->arena, "rows from %s on (the data carry %s rounding)",
                                   p->calls[k].name, inherited);
                break;
            }
    }
    return inherited;
}

/* The weights rule's maps (step > 0, not md5): wmap the parameter rows,
 * omap the cmp's forward outputs; *n_params the parameter rows. Returns
 * whether the rule applies. */
static int weights_maps(np_cmp_pair *p, np_strmap *wmap, np_strmap *omap, int *n_params)
{
    cmp_pair_priv *pv = p->priv;
    int weights_rule = p->step > 0 && p->mode != NP_CMP_MODE_MD5 && pv &&
                       np_strmap_init(wmap, 64) == 0;
    /* and, for a dump without parameter rows (level L1), the cmp's forward
     * outputs: an input that is none of them is a leaf of the step */
    for (size_t i = 0; weights_rule && i < p->n_rows; i++) {
        const np_cmp_row *r = &p->rows[i];
        char k[256];
        int par = r->cmp && !strcmp(r->cmp->role, "parameters");
        *n_params += par;
        if (!r->cmp || (!par && (strcmp(r->cmp->role, "output") != 0 || r->call_index < 0 ||
                                 p->calls[r->call_index].backward)))
            continue;
        if (!par && !omap->cap && np_strmap_init(omap, 64) != 0)
            continue;
        if (par && !r->bench)
            continue;
        weights_key(k, sizeof k, r->cmp);
        np_strmap *m = par ? wmap : omap;
        if (np_strmap_get(m, k) < 0) {
            const char *kc = cmp_arena_strdup(&pv->arena, k);
            if (kc)
                np_strmap_put(m, kc, (int)i);
        }
    }
    return weights_rule;
}

/* Per backward API call, the bench's incoming gradient (its input rows):
 * the largest norm and its element count (NULL when out of memory). */
static double *grad_in(const np_cmp_pair *p)
{
    double *gin = calloc(2 * (p->n_calls + 1), sizeof *gin);
    for (size_t i = 0; gin && i < p->n_rows; i++) {
        const np_cmp_row *r = &p->rows[i];
        if (r->call_index < 0 || !r->bench || !r->cmp || strcmp(r->bench->role, "input") != 0 ||
            !p->calls[r->call_index].backward || strcmp(p->calls[r->call_index].kind, "api") != 0 ||
            is_int_dtype(r->bench->dtype) || !isfinite(r->bench->stats.norm))
            continue;
        double *g = &gin[2 * r->call_index];
        if (r->bench->stats.norm > g[0]) {
            g[0] = r->bench->stats.norm;
            g[1] = (double)r->bench->numel;
        }
    }
    return gin;
}

/* A parameter gradient row (level mix) holds the values of an API
 * backward output: it takes that row's verdict when the output was
 * measured on the scale of its terms. */
static void grad_params_follow(np_cmp_pair *p, const double *gin)
{
    cmp_pair_priv *pv = p->priv;
    np_strmap gmap = {0};
    for (size_t i = 0; gin && pv && i < p->n_rows; i++) {
        const np_cmp_row *r = &p->rows[i];
        if (!r->bench || !r->cmp || r->call_index < 0 || !p->calls[r->call_index].backward ||
            strcmp(p->calls[r->call_index].kind, "api") != 0 || strcmp(r->cmp->role, "output") != 0)
            continue;
        char k[600], kb[256];
        weights_key(k, sizeof k, r->cmp);
        weights_key(kb, sizeof kb, r->bench);
        strncat(k, "/", sizeof k - strlen(k) - 1);
        strncat(k, kb, sizeof k - strlen(k) - 1);
        if ((!gmap.cap && np_strmap_init(&gmap, 64) != 0) || np_strmap_get(&gmap, k) >= 0)
            continue;
        const char *kc = cmp_arena_strdup(&pv->arena, k);
        if (kc)
            np_strmap_put(&gmap, kc, (int)i);
    }
    for (size_t i = 0; gmap.cap && i < p->n_rows; i++) {
        np_cmp_row *r = &p->rows[i];
        if (!r->bench || !r->cmp || strcmp(r->cmp->role, "parameters_grad") != 0 ||
            r->verdict == NP_VERDICT_PASS || !isfinite(r->severity))
            continue;
        char k[600], kb[256];
        weights_key(k, sizeof k, r->cmp);
        weights_key(kb, sizeof kb, r->bench);
        strncat(k, "/", sizeof k - strlen(k) - 1);
        strncat(k, kb, sizeof k - strlen(k) - 1);
        int j = np_strmap_get(&gmap, k);
        if (j >= 0 && p->rows[j].severity < r->severity) {
            r->verdict = p->rows[j].verdict;
            r->severity = p->rows[j].severity;
            r->reason = p->rows[j].reason;
            r->n_reason_args = p->rows[j].n_reason_args;
            r->reason_args[0] = p->rows[j].reason_args[0];
            r->reason_args[1] = p->rows[j].reason_args[1];
        }
    }
    np_strmap_free(&gmap);
}

/* Rows computed from weights that parted (docs/COMPARE.md, "Rows computed
 * from weights that parted"): from the second step on, the runs' weights
 * differ by the optimizer's answer to rounding noise (AdamW's first update
 * is about lr sign(g), so an element whose gradient sign is noise moves by
 * 2 lr between the runs), an amount set by the learning rate, not by the
 * dtype, and what is computed from those weights differs by more than the
 * dtype's rounding. So at a step > 0 the level of a call's output rows
 * follows the parting its inputs carry in: PARTED_FACTOR times the largest
 * relative error measured on an input row (parameters and weight-holding
 * inputs included; a backward call's forward inputs too) that is within its
 * own level (severity <= 1: a parting beyond it, a skipped step's update, a
 * wrong checkpoint, stays named as "the weights parted before this step");
 * an input row that holds an earlier output's values (same statistics and
 * crc32 on both sides) is judged at that output's level. The factor is the
 * walk's AMPLIFICATION: an output failing by less than that over its inputs
 * only propagates there, and here it is not an error row either. In
 * statistics mode the four statistics of an input bound its parting from
 * below only (T5: one hidden unit 3 % off moves none of them by more than
 * 0.1 %, and the min of the weight gradient picks exactly that unit), so
 * there the parting carried in is at least the largest measured on a
 * forward output of the step before the call, within its dtype's level (as
 * the routed level follows the forward's measured error). */
#define PARTED_FACTOR AMPLIFICATION

typedef struct parted_rows {
    np_cmp_tolerance *t; /* per row: the level it was judged at (rtol 0: not judgeable) */
    double *scale;       /* per row: the scale it was measured on */
    unsigned char *wt;   /* per row: made a warning by the weights rule */
    double *dw;          /* per row: a weight parted on the noise of the step before, the
                          * runs' difference there (L2; 0: none; parted_noise.c) */
    np_strmap rows;      /* cmp leaf name -> row: the one map of the pair's names the
                          * rule (summed_level) and parted_noise.c look rows up in */
    struct sum_index *ins; /* summed_level's forward inputs by their values (built on
                            * its first call) */
} parted_rows;

static np_cmp_tolerance tolerance_at(np_cmp_tolerance t, double level)
{
    double w = level / 3.0;
    np_cmp_tolerance g = {t.atol, level, w, 1.0 - level * level / 2.0, 1.0 - w * w / 2.0};
    return level > t.rtol ? looser(t, g) : t;
}

/* A row the rule may judge anew: both sides, a float tensor of a call,
 * judged by its metrics (finite severity) at a known level. */
static int parted_row(const np_cmp_pair *p, const parted_rows *pr, size_t i)
{
    const np_cmp_row *r = &p->rows[i];
    return r->bench && r->cmp && r->call_index >= 0 && pr->t[i].rtol > 0 && !pr->wt[i] &&
           strcmp(r->cmp->role, "kwargs") != 0 && !is_int_dtype(r->cmp->dtype) &&
           !is_int_dtype(r->bench->dtype) && isfinite(r->severity) && !row_left_out(p, r, i);
}

/* Judge row i again at `level`; its reason says why. */
static void parted_rejudge(np_cmp_pair *p, const parted_rows *pr, size_t i, double level,
                           double carried, int from_output)
{
    np_cmp_row *r = &p->rows[i];
    np_cmp_tolerance t = tolerance_at(pr->t[i], level);
    double sev0 = r->severity;
    if (p->mode == NP_CMP_MODE_TENSOR && r->m && r->bench->has_data && r->cmp->has_data)
        verdict_tensor(r, t, pr->scale[i]);
    else
        verdict_stats(r, t, pr->scale[i]);
    /* still an error: its severity stays on its dtype's level, the scale the
     * walk measures its inputs on (the raised level already took the
     * amplification it asks for) */
    if (r->verdict == NP_VERDICT_ERROR)
        r->severity = sev0;
    char buf[300];
    const char *why = np_cmp_row_reason(buf, sizeof buf, r);
    if (from_output == 2) { /* summed_level */
        r->reason = cmp_arena_printf(
            &((cmp_pair_priv *)p->priv)->arena,
            "%s%sat step %d these values are the sum autograd made (not dumped) of the "
            "gradients of the %.0f calls that use one tensor: their levels times their norms, "
            "summed, over the sum's norm = %.3g%s",
            why, why[0] ? "; " : "", p->step, carried, level,
            p->step > 0 ? " (the weights parted in an earlier step)" : "");
        r->n_reason_args = 0;
        return;
    }
    r->reason = cmp_arena_printf(&((cmp_pair_priv *)p->priv)->arena,
                           from_output ? "%s%sat step %d the level of these values is that of the "
                                         "output that made them, %.0f x the parting its inputs "
                                         "carry (%.3g) = %.3g: the weights parted in an earlier step"
                                       : "%s%sat step %d the level follows the parting the call's "
                                         "inputs carry: %.0f x %.3g = %.3g (the weights parted in an "
                                         "earlier step)",
                           why, why[0] ? "; " : "", p->step, PARTED_FACTOR, carried, level);
    r->n_reason_args = 0;
}

static void parted_key(char *k, size_t cap, const np_cmp_row *r)
{
    char kb[256];
    weights_key(k, cap, r->cmp);
    weights_key(kb, sizeof kb, r->bench);
    strncat(k, "/", cap - strlen(k) - 1);
    strncat(k, kb, cap - strlen(k) - 1);
}

/* What a weight that parted on the noise of the step before (its
 * difference there dw, L2) carries into its call, relative to the call's
 * first output y: a weight whose shape broadcasts to y's (a bias added
 * along it, a token copied by expand, a norm's scale) reaches each of its
 * elements numel(y) / numel(w) times: dw sqrt(numel(y) / numel(w)), exact
 * for an add or a copy; any other (a linear's or a matmul's matrix) at most
 * dw |x| (x the call's first input: a product's bound). 0 when the call has
 * no such rows. */
static double noise_carried(const np_cmp_pair *p, const int *byc, size_t j0, size_t j1,
                            const np_cmp_row *w, double dw)
{
    const np_cmp_side *x = NULL, *y = NULL;
    for (size_t j = j0; j < j1; j++) {
        const np_cmp_row *r = &p->rows[byc[j]];
        if (!r->bench || !r->cmp)
            continue;
        size_t ln = strlen(r->bench->name);
        if (!y && role_is_out(r->bench->role) && ln > 9 && !strcmp(r->bench->name + ln - 9, ".output.0"))
            y = r->bench;
        if (!x && !strcmp(r->bench->role, "input") && ln > 8 &&
            !strcmp(r->bench->name + ln - 8, ".input.0"))
            x = r->bench;
    }
    if (!y || !(y->stats.norm > 0) || y->numel <= 0)
        return 0;
    const np_cmp_side *b = w->bench;
    int bcast = b->ndim >= 1 && b->ndim <= y->ndim && b->numel > 0 && y->numel % b->numel == 0;
    for (int d = 1; bcast && d <= b->ndim; d++)
        bcast = b->shape[b->ndim - d] == y->shape[y->ndim - d] || b->shape[b->ndim - d] == 1;
    if (bcast)
        return dw * sqrt((double)(y->numel / b->numel)) / y->stats.norm;
    return x && x != b && x->stats.norm > 0 ? dw * x->stats.norm / y->stats.norm : 0;
}

/* The values of a row on both sides without their bytes' dtype: a cast
 * that keeps the values (float16 -> float32, as autocast hands a float16
 * matmul's gradient to a float32 softmax backward) keeps the key. */
static void values_key(char *k, size_t cap, const np_cmp_row *r)
{
    const np_cmp_side *sd[2] = {r->cmp, r->bench};
    size_t n = (size_t)snprintf(k, cap, "v");
    for (int j = 0; j < 2 && n < cap; j++)
        n += (size_t)snprintf(k + n, cap - n, "|%lld|%.17g|%.17g|%.17g|%.17g",
                              (long long)sd[j]->numel, sd[j]->stats.max, sd[j]->stats.min,
                              sd[j]->stats.mean, sd[j]->stats.norm);
}

/* The output row whose values row r holds (its bytes, or its values after
 * a cast), or -1. */
static int outs_find(const np_strmap *outs, const np_cmp_row *r)
{
    char key[600];
    parted_key(key, sizeof key, r);
    int o = np_strmap_get(outs, key);
    if (o < 0) {
        values_key(key, sizeof key, r);
        o = np_strmap_get(outs, key);
    }
    return o;
}

/* The leaf that pairs with a leaf across the passes, into buf: a forward
 * call's input "A.forward.input.K" (a module's "M.forward.N.input.K") and
 * its gradient "A.backward.output.K" (how 0 -> and 2 <-); a backward call's
 * input "A.backward.input.K" (the gradient of an output) and that output
 * "A.forward.output.K" (how 1 ->). 0 when the name has no such form. */
static int grad_twin(char *buf, size_t cap, const char *name, int how)
{
    static const char *const pass[3][2] = {{".forward.", ".backward"},
                                           {".backward.", ".forward"},
                                           {".backward.", ".forward"}};
    static const char *const role[3][2] = {{".input.", ".output."},
                                           {".input.", ".output."},
                                           {".output.", ".input."}};
    const char *from = pass[how][0], *p = NULL, *q = NULL;
    for (const char *x = strstr(name, from); x; x = strstr(x + 1, from))
        p = x;
    const char *pe = p ? p + strlen(from) - 1 : NULL; /* the dot after the pass */
    for (const char *x = pe ? strstr(pe, role[how][0]) : NULL; x; x = strstr(x + 1, role[how][0]))
        q = x;
    if (!p || !q)
        return 0;
    return snprintf(buf, cap, "%.*s%s%.*s%s%s", (int)(p - name), name, pass[how][1],
                    (int)(q - pe), pe, role[how][1], q + strlen(role[how][0])) < (int)cap;
}

/* The level of a gradient row r that autograd summed, in an op that is
 * not dumped, from the gradients of the calls that took one tensor y as an
 * input (their backward outputs of that input; at mix a module and the API
 * call inside it hold the same ones, counted once): a backward call's input
 * that no output holds (y: its forward output), or a module's backward
 * output (y: the module's forward input, which the calls inside it take). Each addend a_i is held to its
 * level l_i (relative L2); a sum of them is then off by at most
 * sum l_i |a_i|, so its level is sum l_i |a_i| / |sum| (a bound,
 * cancellation included; the bench's norms). 0 when fewer than two addends
 * are found, one is not dumped or has no level, or they do not account for
 * the sum (|sum| above sum |a_i|: an addend is missing). *n_add: their
 * count. */
/* summed_level's index: the rows that are inputs of a forward call, by
 * their values (parted_key): `keys` maps a key to its first row, next[i]
 * the following row with the same key (-1: none), in row order. Built
 * once a pair, so that the rule looks up the calls that took a tensor
 * instead of scanning every row for each row it judges. */
typedef struct sum_index {
    np_strmap keys;
    int *next;
    np_arena arena; /* the keys */
    int ok;
} sum_index;

static void sum_index_free(sum_index *x)
{
    if (!x)
        return;
    np_strmap_free(&x->keys);
    free(x->next);
    np_arena_free(&x->arena);
    free(x);
}

static int fwd_input_row(const np_cmp_pair *p, const np_cmp_row *q)
{
    return q->bench && q->cmp && !strcmp(q->cmp->role, "input") && q->call_index >= 0 &&
           !p->calls[q->call_index].backward;
}

static const sum_index *sum_index_get(const np_cmp_pair *p, const parted_rows *pr)
{
    sum_index *x = pr->ins;
    if (!x || x->ok)
        return x && x->ok > 0 ? x : NULL;
    x->ok = -1;
    x->next = malloc((p->n_rows + 1) * sizeof *x->next);
    if (!x->next || np_strmap_init(&x->keys, 64) != 0)
        return NULL;
    char k[600];
    for (size_t j = p->n_rows; j-- > 0;) { /* backwards: each chain in row order */
        x->next[j] = -1;
        if (!fwd_input_row(p, &p->rows[j]))
            continue;
        parted_key(k, sizeof k, &p->rows[j]);
        int first = np_strmap_get(&x->keys, k);
        const char *key = first >= 0 ? NULL : np_arena_put(&x->arena, k, strlen(k));
        if (first < 0 && (!key || np_strmap_put(&x->keys, key, (int)j) != 0))
            return NULL;
        if (first >= 0) {
            x->next[j] = first;
            np_strmap_put(&x->keys, k, (int)j); /* replaces: the key is kept */
        }
    }
    x->ok = 1;
    return x;
}

/* The level of a gradient row r that autograd summed, in an op that is
 * not dumped, from the gradients of the calls that took one tensor y as an
 * input (their backward outputs of that input; at mix a module and the API
 * call inside it hold the same ones, counted once): a backward call's input
 * that no output holds (y: its forward output), or a module's backward
 * output (y: the module's forward input, which the calls inside it take). Each addend a_i is held to its
 * level l_i (relative L2); a sum of them is then off by at most
 * sum l_i |a_i|, so its level is sum l_i |a_i| / |sum| (a bound,
 * cancellation included; the bench's norms). 0 when fewer than two addends
 * are found, one is not dumped or has no level, or they do not account for
 * the sum (|sum| above sum |a_i|: an addend is missing). *n_add: their
 * count. The calls that took y: the forward inputs with y's values
 * (sum_index). */
static double summed_level(const np_cmp_pair *p, const parted_rows *pr, const double *lvl,
                           size_t i, int *n_add)
{
    const np_strmap *rows = &pr->rows;
    const np_cmp_row *r = &p->rows[i];
    char y[2 * NP_FMT_NAME_LEN], a[2 * NP_FMT_NAME_LEN], k1[600], k2[600];
    int out = !strcmp(r->cmp->role, "output");
    if (!grad_twin(y, sizeof y, r->cmp->name, out ? 2 : 1))
        return 0;
    int yi = np_strmap_get(rows, y);
    if (yi < 0 || !p->rows[yi].bench || !p->rows[yi].cmp)
        return 0;
    const np_cmp_row *yr = &p->rows[yi];
    const sum_index *ix = sum_index_get(p, pr);
    if (!ix)
        return 0;
    parted_key(k1, sizeof k1, yr);
    double sum = 0, err = 0;
    int n = 0;
    int seen[8];
    for (int j = np_strmap_get(&ix->keys, k1); j >= 0 && n < 8; j = ix->next[j]) {
        const np_cmp_row *q = &p->rows[j];
        if (q->cmp->numel != yr->cmp->numel || q->cmp->stats.norm != yr->cmp->stats.norm ||
            q->bench->stats.norm != yr->bench->stats.norm)
            continue; /* (a crc32's key holds no norm) */
        if (j == yi || !grad_twin(a, sizeof a, q->cmp->name, 0))
            continue;
        int ai = np_strmap_get(rows, a);
        if (ai == (int)i)
            continue;
        if (ai < 0 || !p->rows[ai].bench || !p->rows[ai].cmp)
            return 0; /* an addend not dumped */
        double l = lvl[ai] > 0 ? lvl[ai] : pr->t[ai].rtol;
        if (!(l > 0) || !isfinite(p->rows[ai].bench->stats.norm))
            return 0;
        int dup = 0; /* the same values as an addend already counted */
        parted_key(k2, sizeof k2, &p->rows[ai]);
        for (int m = 0; m < n && !dup; m++) {
            parted_key(a, sizeof a, &p->rows[seen[m]]);
            dup = !strcmp(a, k2);
        }
        if (dup)
            continue;
        seen[n++] = ai;
        sum += p->rows[ai].bench->stats.norm;
        err += l * p->rows[ai].bench->stats.norm;
    }
    double s = r->bench->stats.norm;
    *n_add = n;
    if (n < 2 || !(s > 0) || s > sum * (1 + 1e-6))
        return 0;
    return err / s;
}

/* The level input row i of call c is measured against in the pass: its
 * own, or the level of the output whose values it holds, or of the sum
 * autograd made of several calls' gradients (summed_level); the row judged
 * anew at it when that is higher (*n counts). */
static double parted_input_level(np_cmp_pair *p, const parted_rows *pr, const double *lvl,
                                 const np_strmap *outs, const np_cmp_call *c, size_t i, int *n)
{
    np_cmp_row *r = &p->rows[i];
    int o = -1;
    if (!pr->wt[i] && !strcmp(r->cmp->role, "input"))
        o = outs_find(outs, r);
    double li = pr->t[i].rtol; /* the level its severity is measured against */
    if (p->step > 0 && o >= 0 && r->verdict == NP_VERDICT_ERROR && lvl[o] > li) {
        parted_rejudge(p, pr, i, lvl[o], lvl[o] / PARTED_FACTOR, 1);
        li = lvl[o];
        (*n)++;
    }
    double ls = 0;
    int n_add = 0;
    if (o < 0 && c->backward && r->verdict == NP_VERDICT_ERROR && !pr->wt[i] &&
        !strcmp(r->cmp->role, "input") &&
        (ls = summed_level(p, pr, lvl, i, &n_add)) > li) {
        parted_rejudge(p, pr, i, ls, n_add, 2);
        li = ls;
        (*n)++;
    }
    return li;
}

/* The pass over the calls in execution order; returns the rows judged
 * anew, *top the highest level given (and *dtype its row's dtype). */
static int verdict_parted(np_cmp_pair *p, const parted_rows *pr, double *top, const char **dtype)
{
    cmp_pair_priv *pv = p->priv;
    size_t nr = p->n_rows, nc = p->n_calls;
    size_t *start = calloc(nc + 2, sizeof *start);
    int *byc = malloc((nr + 1) * sizeof *byc);
    double *carried = calloc(nc + 1, sizeof *carried), *lvl = calloc(nr + 1, sizeof *lvl);
    np_strmap names = {0}, outs = {0};
    int n = 0;
    if (!start || !byc || !carried || !lvl || np_strmap_init(&names, nc + 1) != 0 ||
        np_strmap_init(&outs, 64) != 0)
        goto done;
    for (size_t i = 0; i < nr; i++)
        if (p->rows[i].call_index >= 0)
            start[p->rows[i].call_index + 2]++;
    for (size_t k = 2; k < nc + 2; k++)
        start[k] += start[k - 1];
    for (size_t i = 0; i < nr; i++)
        if (p->rows[i].call_index >= 0)
            byc[start[p->rows[i].call_index + 1]++] = (int)i;
    for (size_t k = 0; k < nc; k++)
        np_strmap_put(&names, p->calls[k].name, (int)k);
    /* statistics mode: the largest parting measured on a forward output of
     * the step so far, within its dtype's level */
    double fwd_max = 0;
    int stats = p->mode != NP_CMP_MODE_TENSOR;
    for (size_t k = 0; k < nc; k++) {
        const np_cmp_call *c = &p->calls[k];
        double e = stats && p->step > 0 ? fwd_max : 0;
        char key[600], fwd[2 * NP_FMT_NAME_LEN];
        if (c->backward && cmp_forward_of(fwd, sizeof fwd, c->name)) {
            int f = np_strmap_get(&names, fwd);
            if (f >= 0 && (size_t)f < k)
                e = carried[f];
        }
        for (size_t j = start[k]; j < start[k + 1]; j++) { /* the inputs */
            size_t i = (size_t)byc[j];
            np_cmp_row *r = &p->rows[i];
            if (!r->bench || !r->cmp || !role_is_in(r->cmp->role) ||
                (!pr->wt[i] && !parted_row(p, pr, i)) || !isfinite(r->severity))
                continue;
            double li = parted_input_level(p, pr, lvl, &outs, c, i, &n);
            /* (step 0: only a sum's raised level carries) */
            if (r->verdict != NP_VERDICT_ERROR && r->severity <= 1 && li > 0 &&
                (p->step > 0 || li > pr->t[i].rtol))
                e = fmax(e, r->severity * li);
            if (pr->dw[i] > 0)
                e = fmax(e, noise_carried(p, byc, start[k], start[k + 1], r, pr->dw[i]));
        }
        carried[k] = e;
        double level = PARTED_FACTOR * e;
        for (size_t j = start[k]; j < start[k + 1]; j++) { /* the outputs */
            size_t i = (size_t)byc[j];
            np_cmp_row *r = &p->rows[i];
            if (!parted_row(p, pr, i) || !role_is_out(r->cmp->role))
                continue;
            lvl[i] = fmax(level, pr->t[i].rtol);
            int n_add = 0;
            double ls = c->backward && r->verdict == NP_VERDICT_ERROR &&
                                !strcmp(c->kind, "module")
                            ? summed_level(p, pr, lvl, i, &n_add)
                            : 0;
            if (ls > lvl[i]) { /* a module's input gradient, summed inside it */
                lvl[i] = ls;
                parted_rejudge(p, pr, i, ls, n_add, 2);
                n++;
            }
            if (stats && !c->backward && r->verdict != NP_VERDICT_ERROR)
                fwd_max = fmax(fwd_max, r->severity * pr->t[i].rtol);
            if (r->verdict == NP_VERDICT_ERROR && level > pr->t[i].rtol && level > ls) {
                parted_rejudge(p, pr, i, level, e, 0);
                n++;
                if (level > *top) {
                    *top = level;
                    *dtype = r->cmp->dtype;
                }
            }
            for (int v = 0; v < 2; v++) {
                (v ? values_key : parted_key)(key, sizeof key, r);
                int o = np_strmap_get(&outs, key);
                const char *kc = o < 0 || lvl[o] < lvl[i] ? cmp_arena_strdup(&pv->arena, key) : NULL;
                if (kc)
                    np_strmap_put(&outs, kc, (int)i);
            }
        }
    }
    /* rows that hold the values of an output judged at a higher level
     * elsewhere: a module's output (the last inner call's), an input met
     * before its maker in the calls' order */
    for (size_t i = 0; i < nr; i++) {
        np_cmp_row *r = &p->rows[i];
        if (r->verdict != NP_VERDICT_ERROR || !parted_row(p, pr, i) ||
            (strcmp(r->cmp->role, "input") != 0 && !role_is_out(r->cmp->role)))
            continue;
        int o = outs_find(&outs, r);
        if (o >= 0 && (size_t)o != i && lvl[o] > pr->t[i].rtol) {
            parted_rejudge(p, pr, i, lvl[o], lvl[o] / PARTED_FACTOR, 1);
            n++;
        }
    }
done:
    free(start);
    free(byc);
    free(carried);
    free(lvl);
    np_strmap_free(&names);
    np_strmap_free(&outs);
    return n;
}

/* Whether the pass runs: where the weights rule does (step > 0), and at
 * step 0, where no weight parted, for the summed gradients only. */
static int parted_on(const np_cmp_pair *p, int weights_rule)
{
    return weights_rule || (p->step == 0 && p->mode != NP_CMP_MODE_MD5 && p->priv);
}

/* The per-row arrays of the rule and its name map; 0 when out of memory (the rule is then
 * off). */
static int parted_alloc(const np_cmp_pair *p, parted_rows *pr)
{
    size_t n_rows = p->n_rows;
    pr->t = calloc(n_rows + 1, sizeof *pr->t);
    pr->scale = calloc(n_rows + 1, sizeof *pr->scale);
    pr->wt = calloc(n_rows + 1, 1);
    pr->dw = calloc(n_rows + 1, sizeof *pr->dw);
    pr->ins = calloc(1, sizeof *pr->ins);
    if (!pr->t || !pr->scale || !pr->wt || !pr->dw || !pr->ins ||
        np_strmap_init(&pr->rows, n_rows + 1) != 0)
        return 0;
    for (size_t i = 0; i < n_rows; i++)
        if (p->rows[i].cmp && np_strmap_put(&pr->rows, p->rows[i].cmp->name, (int)i) != 0)
            return 0;
    return 1;
}

/* The rule's pass (when `run`), the tolerances panel's line for the
 * highest level it gave; frees the arrays. */
static void parted_finish(np_cmp_pair *p, parted_rows *pr, int run)
{
    cmp_pair_priv *pv = p->priv;
    double top = 0;
    const char *top_dtype = NULL;
    int n_parted = run ? verdict_parted(p, pr, &top, &top_dtype) : 0;
    free(pr->t);
    free(pr->scale);
    free(pr->wt);
    free(pr->dw);
    np_strmap_free(&pr->rows);
    sum_index_free(pr->ins);
    if (n_parted && top_dtype && pv && pv->n_tols < CMP_MAX_TOLS) {
        np_cmp_tolerance t0 = np_cmp_tolerance_for(top_dtype);
        pv->tols[pv->n_tols++] = (cmp_tol_rec){
            top_dtype,
            cmp_arena_printf(&pv->arena, "up to: rows computed from weights that parted in an "
                       "earlier step (step %d; %d rows): %.0f x the parting their call's "
                       "inputs carry", p->step, n_parted, PARTED_FACTOR),
            tolerance_at(t0, top)};
    }
}

/* The routed level's scope, as the tolerances panel says it ("" when
 * r0 < 0). */
static const char *routed_scope(np_cmp_pair *p, int r0)
{
    cmp_pair_priv *pv = p->priv;
    if (r0 < 0 || !pv)
        return "";
    const np_cmp_call *rc = &p->calls[r0];
    return cmp_arena_printf(&pv->arena, "gradients from %s on (%s)", rc->name,
                      cmp_is_nonsmooth_backward(rc->name)
                          ? "behind a non-smooth op"
                          : "level L0: any module may hold a non-smooth op");
}

void cmp_verdicts(np_cmp_pair *p, const np_cmp_options *o, const cmp_run_sides *s,
                  int pair_index, int n_pairs)
{
    memset(p->count_verdict, 0, sizeof p->count_verdict);
    memset(p->count_match, 0, sizeof p->count_match);
    tol_memo memo[4];
    memset(memo, 0, sizeof memo);
    cmp_pair_priv *pv = p->priv;
    if (pv) {
        pv->n_tols = 0;
        pv->opt_atol = o->atol;
        pv->opt_rtol = o->rtol;
        pv->opt_cos = o->cos;
    }
    /* gradients behind a non-smooth op, in a low-precision run */
    double u = fmax(low_unit_roundoff(p->cmp_precision), low_unit_roundoff(p->bench_precision));
    if (!isnan(o->rtol))
        u = 0; /* --rtol sets every row's level */
    int r0 = u > 0 ? first_routed_call(p) : -1;
    int64_t s0 = r0 >= 0 ? p->calls[r0].seq : INT64_MAX;
    const char *routed_from = routed_scope(p, r0);
    /* what each side records per call (one-sided leaves as evidence); NULL
     * when out of memory: one-sided leaves stay warnings */
    unsigned char *facts = call_facts(p);
    /* tolerances follow the data (docs/COMPARE.md, "Tolerances that follow
     * the data"): from the first call that holds a bfloat16/float16 tensor on
     * either side on, every float row may carry that rounding (type promotion,
     * mixed-precision adds, float32 master copies), whatever its own dtype
     * and the run's declared precision say */
    const char *inherited_from = "";
    int64_t s_low = INT64_MAX;
    const char *inherited = data_low_precision(p, o, u, &s_low, &inherited_from);
    /* weights at a step after the first (docs/COMPARE.md, "Weights that
     * parted in an earlier step"): the parameter rows, and the API inputs
     * that are those parameters (same values on each side), keyed here by
     * the cmp side's statistics and crc32 */
    np_strmap wmap = {0}, omap = {0};
    int n_params = 0;
    int weights_rule = weights_maps(p, &wmap, &omap, &n_params);
    /* rows computed from weights that parted: each row's level and scale,
     * for the pass after the verdicts (off with --rtol, and where memory
     * runs short) */
    parted_rows pr = {NULL, NULL, NULL, NULL, {0}, NULL};
    int parted = parted_on(p, weights_rule) && isnan(o->rtol) && parted_alloc(p, &pr);
    /* tensor mode reports payload bytes while reading them (compare.c) */
    int rows_progress = o->progress && p->mode != NP_CMP_MODE_TENSOR;
    double *gin = grad_in(p);
    /* two passes: the rows judged by their dtype's level first, then the
     * routed gradients, whose level follows the forward's measured error
     * (docs/COMPARE.md, "Gradients behind a non-smooth op") */
    double fwd_err = 0;
    for (int pass = 0; pass < 2; pass++) {
        double ur = u;
        if (pass == 1 && r0 >= 0 && fwd_err / 2 > u) {
            ur = fwd_err / 2; /* clean forward rows of a u-precision run measure up to 2u */
            if (pv)
                routed_from = cmp_arena_printf(&pv->arena, "%s; the forward outputs differ by up to "
                                         "%.3g (relative), so the routed level is 8 sqrt(%.3g)",
                                         routed_from, fwd_err, ur);
        }
        for (size_t i = 0; i < p->n_rows; i++) {
            np_cmp_row *r = &p->rows[i];
            int routed = 0;
            const np_cmp_call *c = r->call_index >= 0 ? &p->calls[r->call_index] : NULL;
            const np_cmp_side *sd = r->cmp ? r->cmp : r->bench;
            if (r0 >= 0 && c)
                routed = c->backward && (c->seq > s0 || (c->seq == s0 && sd && role_is_out(sd->role)));
            if (routed != pass)
                continue;
            int inh = inherited && c && c->seq >= s_low;
            tol_memo *mm = &memo[routed + 2 * inh];
            double scale = 0;
            /* a gradient summed over the batch is measured on the scale of
             * the gradient it sums (docs/COMPARE.md, "Gradients on the
             * scale of their terms") */
            if (gin && c && c->backward && sd && !strcmp(sd->role, "output") && r->bench &&
                gin[2 * r->call_index] > 0 && r->bench->numel > 0 &&
                (double)r->bench->numel * 2 <= gin[2 * r->call_index + 1])
                scale = gin[2 * r->call_index];
            verdict_row(p, r, o, scale, mm, routed ? ur : 0, routed_from, inh ? inherited : NULL,
                        inherited_from, facts);
            int wt = weights_rule && r->bench && r->cmp &&
                     verdict_weights(p, r, &wmap, n_params ? NULL : &omap);
            if (parted && r->cmp && mm->dtype && !strcmp(mm->dtype, r->cmp->dtype)) {
                pr.t[i] = mm->t;
                pr.scale[i] = scale;
                pr.wt[i] = (unsigned char)wt;
            }
            if (!r->reason)
                r->reason = "";
            /* the forward's measured error: outputs of forward calls */
            if (!pass && c && !c->backward && r->bench && r->cmp && sd && !strcmp(sd->role, "output") &&
                !is_int_dtype(r->cmp->dtype) && isfinite(r->severity) && mm->dtype &&
                r->severity * mm->t.rtol > fwd_err)
                fwd_err = r->severity * mm->t.rtol;
            if (rows_progress && (i + 1) % 65536 == 0 && i + 1 < p->n_rows)
                o->progress(pair_index, n_pairs, i + 1, p->n_rows, o->progress_user);
        }
    }
    /* weights that parted on the noise of the step before (parted_noise.c):
     * what they carry into the calls that use them */
    if (parted && s)
        cmp_parted_noise(p, s, pr.wt, pr.t, pr.scale, &pr.rows, pr.dw);
    parted_finish(p, &pr, parted);
    if (weights_rule)
        weights_inplace(p);
    grad_params_follow(p, gin);
    free(gin);
    for (size_t i = 0; i < p->n_rows; i++) {
        p->count_verdict[p->rows[i].verdict]++;
        p->count_match[p->rows[i].match]++;
    }
    free(facts);
    if (weights_rule) {
        np_strmap_free(&wmap);
        np_strmap_free(&omap);
    }
    if (rows_progress)
        o->progress(pair_index, n_pairs, p->n_rows, p->n_rows, o->progress_user);
}

/* ---- root cause ------------------------------------------------------------ */

static int role_is_in(const char *role)
{
    return !strcmp(role, "input") || !strcmp(role, "parameters");
}

static int role_is_out(const char *role)
{
    return !strcmp(role, "output") || !strcmp(role, "parameters_grad");
}

static int int_order(const void *x, const void *y)
{
    int a = *(const int *)x, b = *(const int *)y;
    return a < b ? -1 : a > b;
}

/* The root-cause walk's facts about one call (one struct per call, filled
 * by the passes below in order). */
typedef struct rc_call {
    int n_in;          /* input rows compared (a backward call: its forward's too) */
    int n_left[2];     /* rows left out (payload unreadable or corrupt): inputs, outputs */
    char kw_bad;       /* a scalar argument (kwargs row) fails */
    char par_bad;      /* a parameter row fails */
    int par_row;       /* its worst failing parameter row (a backward call: its forward's), -1 none */
    char one_side;     /* a leaf of it is evidence on one side only */
    const char *one_why; /* that row's reason when a check of the side's ranks set it (the
                          * replicas and pipeline stages: "replicas: ...", "pipeline: ...") */
    char lowp_sat;     /* a quantization statistic says an operand saturates (tol_lowp.c) */
    char coll_cmp;     /* a collective (Distributed.*): of the cmp side only when it has */
    char has_bench;    /* no row of the bench's (the calls of rows-less calls are the cmp's) */
    char local_in;     /* an input left out as Local() (a sharded side: each rank's own
                        * values): its inputs are unknown, not passing (a backward call:
                        * its forward's too) */
    char in_warn;      /* a row of its inputs is at least a warning (statistics mode) */
    char out_warn;     /* a row of its outputs is at least a warning */
    char has_cul;      /* the module pass: contains a culprit */
    char par_cul;      /* a module named for its own parameters (rc_calls) */
    int depth;         /* the module pass: depth in the module tree */
    int first_fail;    /* the module pass: first failing inner call, -1 none */
    double s_before;   /* the module pass: the error seen before first_fail */
} rc_call;

/* The walk over one pair: its calls' facts and the calls by name. */
typedef struct rc_walk {
    np_cmp_pair *p;
    cmp_arena *arena;
    size_t nc;
    rc_call *cc;
    np_strmap byname;
} rc_walk;

/* 1 when call k had an input (or scalar argument) left out as Local()
 * (compare.c stage_root_cause). */
static char pv_local_in(const np_cmp_pair *p, size_t k)
{
    const cmp_pair_priv *pv = p->priv;
    return pv && pv->local_io && (pv->local_io[k] & 1);
}

/* Pass 1: reset the calls' statuses and gather their rows' facts. */
static void rc_gather(rc_walk *w)
{
    np_cmp_pair *p = w->p;
    for (size_t k = 0; k < w->nc; k++) {
        np_cmp_call *c = &p->calls[k];
        c->sev_in = c->sev_out = 0;
        c->n_rows = c->n_error_out = 0;
        c->worst_row = -1;
        c->status = NP_CALL_PASS;
        c->reason = "";
        w->cc[k].par_row = -1;
        w->cc[k].local_in = pv_local_in(p, k);
        w->cc[k].coll_cmp = !strncmp(c->name, "Distributed.", 12);
        np_strmap_put(&w->byname, c->name, (int)k);
    }
    for (size_t i = 0; i < p->n_rows; i++) {
        np_cmp_row *r = &p->rows[i];
        if (r->call_index < 0)
            continue;
        np_cmp_call *c = &p->calls[r->call_index];
        rc_call *f = &w->cc[r->call_index];
        c->n_rows++;
        f->has_bench |= r->bench != NULL;
        /* one side only: a warning says nothing; an error is evidence */
        if ((!r->bench || !r->cmp) && r->verdict != NP_VERDICT_ERROR)
            continue;
        const char *role = (r->cmp ? r->cmp : r->bench)->role;
        if (!r->bench || !r->cmp) {
            const char *nm = (r->cmp ? r->cmp : r->bench)->name;
            if (strstr(nm, ".kwargs.lowp_"))
                f->lowp_sat = 1;
            else if (strstr(nm, ".kwargs.fp32_override"))
                continue; /* passes: cmp_lowp_row */
            else
                f->one_side = 1;
            if (!f->one_why && r->n_reason_args == 0 && r->reason &&
                (!strncmp(r->reason, "pipeline: ", 10) || !strncmp(r->reason, "replicas: ", 10)))
                f->one_why = r->reason;
            continue;
        }
        if (row_left_out(p, r, i)) {
            /* its error says nothing about the numerics */
            f->n_left[role_is_out(role) ? 1 : 0]++;
            continue;
        }
        if (!strcmp(role, "kwargs")) {
            if (r->verdict == NP_VERDICT_ERROR)
                f->kw_bad = 1;
        } else if (role_is_in(role)) {
            f->n_in++;
            if (r->severity > c->sev_in)
                c->sev_in = r->severity;
            if (!strcmp(role, "parameters") && r->severity > 1) {
                f->par_bad = 1;
                if (f->par_row < 0 || r->severity > p->rows[f->par_row].severity)
                    f->par_row = (int)i;
            }
            if (r->verdict != NP_VERDICT_PASS)
                f->in_warn = 1;
        } else if (role_is_out(role)) {
            if (r->verdict != NP_VERDICT_PASS)
                f->out_warn = 1;
            if (r->verdict == NP_VERDICT_ERROR)
                c->n_error_out++;
            if (c->worst_row < 0 || r->severity > p->rows[c->worst_row].severity)
                c->worst_row = (int)i;
            if (r->severity > c->sev_out)
                c->sev_out = r->severity;
        }
    }
}

/* Pass 2: a backward call also uses its forward's inputs and parameters. */
static void rc_backward_inputs(rc_walk *w)
{
    char fwd[2 * NP_FMT_NAME_LEN];
    for (size_t k = 0; k < w->nc; k++) {
        np_cmp_call *c = &w->p->calls[k];
        if (!c->backward || !cmp_forward_of(fwd, sizeof fwd, c->name))
            continue;
        int f = np_strmap_get(&w->byname, fwd);
        if (f < 0)
            continue;
        w->cc[k].n_in += w->cc[f].n_in;
        if (w->p->calls[f].sev_in > c->sev_in)
            c->sev_in = w->p->calls[f].sev_in;
        w->cc[k].par_bad |= w->cc[f].par_bad;
        if (w->cc[k].par_row < 0)
            w->cc[k].par_row = w->cc[f].par_row;
        w->cc[k].in_warn |= w->cc[f].in_warn;
        w->cc[k].local_in |= w->cc[f].local_in;
    }
}

/* Call k's worst failing parameter row, or that of a module around it (an
 * API call takes the module's weights as inputs); -1 when none fails. */
static int rc_params_bad(const rc_walk *w, size_t k)
{
    int pr = w->cc[k].par_row;
    const char *par = w->p->calls[k].parent;
    for (int d = 0; pr < 0 && par && par[0] && d < 64; d++) {
        int j = np_strmap_get(&w->byname, par);
        if (j < 0 || j == (int)k)
            break;
        pr = w->cc[j].par_row;
        par = w->p->calls[j].parent;
    }
    return pr;
}

/* The reason of a call whose parameters already differ at the start of the
 * dump, naming the parameter row (its worst one). */
static const char *rc_params_reason(const rc_walk *w, int row)
{
    const np_cmp_row *r = &w->p->rows[row];
    return cmp_arena_printf(w->arena,
                            "its parameters already differ from the bench (%s, severity %.3g), "
                            "and no earlier dumped call fails: the weights parted before this step "
                            "(compare an earlier step or its skipped-step note, or start both "
                            "from one checkpoint)",
                            r->cmp->name, r->severity);
}

/* Pass 3: each call's status from its inputs and outputs, in call order
 * (propagation: what fails after a failing call only propagates unless it
 * amplifies). */
static void rc_calls(rc_walk *w)
{
    np_cmp_pair *p = w->p;
    int failed_before = 0, api_failed_before = 0, coll = -1;
    for (size_t k = 0; k < w->nc; k++) {
        np_cmp_call *c = &p->calls[k];
        const rc_call *f = &w->cc[k];
        int out_bad = c->n_error_out > 0;
        int is_api = !strcmp(c->kind, "api");
        if (f->kw_bad) {
            c->status = NP_CALL_CULPRIT;
            c->reason = "a scalar argument differs from the bench";
        } else if (f->lowp_sat) {
            c->status = NP_CALL_CULPRIT;
            c->reason = "a GEMM operand saturates in the low-precision format (its "
                        "lowp_x_saturation / lowp_w_saturation row): a scale too small for its values";
        } else if (f->one_side) {
            /* a structural difference at this call, whatever came before */
            c->status = NP_CALL_CULPRIT;
            c->reason = f->one_why ? f->one_why
                                   : "a leaf of this call is on one side only (a dropped or added "
                                     "parameter, input or output: see its rows)";
        } else if (!out_bad) {
            c->status = NP_CALL_PASS;
        } else if (f->n_in == 0) {
            c->status = failed_before ? NP_CALL_PROPAGATED : NP_CALL_CULPRIT;
            c->reason = failed_before ? "no inputs recorded and an earlier call already fails"
                                      : "outputs fail and no earlier call fails (no inputs recorded)";
        } else if (c->sev_in > 1 && !api_failed_before && is_api) {
            /* nothing dumped before it fails, yet its inputs do: the error
             * comes from outside the dump (modules: see below) */
            int pr = rc_params_bad(w, k);
            c->status = NP_CALL_CULPRIT;
            c->reason = pr >= 0 ? rc_params_reason(w, pr)
                        : coll >= 0
                            ? cmp_arena_printf(w->arena,
                                               "its inputs already fail, but no earlier compared "
                                               "call fails: the error starts before it, in %s (a "
                                               "collective of the cmp side only, with nothing of "
                                               "the bench's to compare: the parallel program's "
                                               "own communication), in an op that is not dumped "
                                               "or in the input data",
                                               p->calls[coll].name)
                            : "its inputs already fail, but no earlier dumped call fails: the "
                              "error starts before it, in an op that is not dumped (the config's "
                              "list or scope left it out) or in the input data";
        } else if (!is_api && f->par_row >= 0 && !failed_before) {
            /* a module whose own parameters differ before anything dumped
             * fails (an L0 dump has no API call to name): the module is the
             * culprit, the rows inside it follow (rc_modules) */
            c->status = NP_CALL_CULPRIT;
            c->reason = rc_params_reason(w, f->par_row);
            w->cc[k].par_cul = 1;
        } else if (c->sev_in > 1) {
            c->status = NP_CALL_PROPAGATED;
            c->reason = "its inputs already fail";
        } else if (f->local_in) {
            /* the inputs compared pass, but one is not compared: unknown,
             * so "inputs pass" is not known (docs/COMPARE.md) */
            c->status = failed_before ? NP_CALL_PROPAGATED : NP_CALL_CULPRIT;
            c->reason = failed_before ? "an input is Local() (each rank's own values, left out of "
                                        "the compare: unknown) and an earlier call already fails"
                                      : "outputs fail and no earlier call fails; its compared "
                                        "inputs pass, but an input is Local() (each rank's own "
                                        "values, left out of the compare): the error may come "
                                        "from it (the routing before this call)";
        } else if (c->sev_out < AMPLIFICATION * c->sev_in) {
            c->status = NP_CALL_PROPAGATED;
            c->reason = cmp_arena_printf(w->arena,
                                   "outputs fail narrowly: error %.3g x the input error, "
                                   "below the amplification threshold %.0f",
                                   c->sev_in > 0 ? c->sev_out / c->sev_in : 0, AMPLIFICATION);
        } else {
            c->status = NP_CALL_CULPRIT;
            c->reason = c->sev_in > 0 ? cmp_arena_printf(w->arena, "inputs pass, outputs fail (%.3g x the input error)",
                                                   c->sev_out / c->sev_in)
                                      : "inputs pass, outputs fail";
        }
        if (out_bad || f->kw_bad || f->one_side || f->lowp_sat) {
            failed_before = 1;
            api_failed_before |= is_api;
        }
        if (f->coll_cmp && !f->has_bench)
            coll = (int)k; /* the last collective of the cmp side only so far */
    }
}

/* Pass 4, statistics mode: max/min/mean/norm do not see a reordering or a
 * change that keeps them (a flipped kernel, a gradient that lost a term),
 * so "inputs pass" is weak evidence there. A culprit whose inputs are
 * already above the warning level hands the title to the first call of
 * its kind whose outputs rose above the warning level while its inputs
 * stayed below: where the difference became visible. */
static void rc_statistics(rc_walk *w)
{
    np_cmp_pair *p = w->p;
    size_t nc = w->nc;
    const rc_call *cc = w->cc;
    /* the first API culprit (modules are settled below, from their inner
     * calls); at L0, the first module culprit */
    int any_api = 0;
    for (size_t i = 0; i < nc && !any_api; i++)
        any_api = !strcmp(p->calls[i].kind, "api");
    size_t k = 0;
    while (k < nc && (p->calls[k].status != NP_CALL_CULPRIT ||
                      (any_api && strcmp(p->calls[k].kind, "api") != 0)))
        k++;
    if (k >= nc || cc[k].kw_bad || !cc[k].in_warn)
        return;
    np_cmp_call *c = &p->calls[k];
    int j = -1;
    for (size_t i = 0; i < k && j < 0; i++)
        if (cc[i].out_warn && !cc[i].in_warn && !cc[i].kw_bad && cc[i].n_in > 0 &&
            !strcmp(p->calls[i].kind, c->kind))
            j = (int)i;
    if (j < 0)
        return;
    np_cmp_call *wc = &p->calls[j];
    wc->status = NP_CALL_CULPRIT;
    wc->reason = cmp_arena_printf(w->arena,
                            "statistics mode: the first call whose outputs differ "
                            "(above the warning level) while its inputs pass; %s "
                            "fails outright later, its inputs already differing. "
                            "Statistics cannot tell more: confirm with a tensor dump "
                            "of this call",
                            c->name);
    c->status = NP_CALL_PROPAGATED;
    c->reason = cmp_arena_printf(w->arena,
                           "its inputs already differ (above the warning level) "
                           "since %s",
                           wc->name);
}

/* The module pass's tree facts: each call's depth, each module's first
 * failing inner call and the error before it, "contains a final culprit";
 * the modules into order[], deepest first, then in execution order.
 * Returns their count. */
static size_t rc_module_tree(rc_walk *w, int *order)
{
    np_cmp_pair *p = w->p;
    size_t nc = w->nc;
    rc_call *cc = w->cc;
    for (size_t k = 0; k < nc; k++)
        cc[k].first_fail = -1;
    size_t n_mod = 0;
    for (size_t k = 0; k < nc; k++) {
        np_cmp_call *c = &p->calls[k];
        int fails = c->n_error_out > 0 || cc[k].kw_bad;
        int is_mod = !strcmp(c->kind, "module");
        /* the statuses of API calls (and of scalar-argument culprits) are final */
        int final_culprit = c->status == NP_CALL_CULPRIT && (!is_mod || cc[k].kw_bad);
        int d = 0;
        const char *par = c->parent;
        for (; par && par[0] && d < 64; d++) {
            int j = np_strmap_get(&w->byname, par);
            if (j < 0 || j == (int)k)
                break;
            if (cc[j].first_fail < 0) {
                if (fails)
                    cc[j].first_fail = (int)k;
                else if (c->sev_out > cc[j].s_before)
                    cc[j].s_before = c->sev_out;
            }
            if (final_culprit)
                cc[j].has_cul = 1;
            par = p->calls[j].parent;
        }
        cc[k].depth = d;
        if (is_mod)
            order[n_mod++] = (int)k;
    }
    /* deepest first, then in execution order */
    for (size_t a = 0; a < n_mod; a++)
        order[a] = (64 - cc[order[a]].depth) * (int)(nc + 1) + order[a];
    qsort(order, n_mod, sizeof *order, int_order);
    for (size_t a = 0; a < n_mod; a++)
        order[a] %= (int)(nc + 1);
    return n_mod;
}

/* Module k (a culprit of the walk with a failing inner call): stays the
 * culprit when that call's inputs already fail by AMPLIFICATION x the
 * error seen before it, else only propagates. */
static void rc_module_culprit(rc_walk *w, int k)
{
    np_cmp_call *m = &w->p->calls[k];
    const rc_call *mf = &w->cc[k];
    const np_cmp_call *f = &w->p->calls[mf->first_fail];
    double before = m->sev_in > mf->s_before ? m->sev_in : mf->s_before;
    if (f->sev_in > 1 && f->sev_in >= AMPLIFICATION * before) {
        m->reason = before > 0
                        ? cmp_arena_printf(w->arena,
                                     "the error starts inside this module, in a call not "
                                     "dumped: inputs pass, outputs fail, and the first call "
                                     "inside it to fail, %s, already has failing inputs "
                                     "(%.3g x the error before it)",
                                     f->name, f->sev_in / before)
                        : cmp_arena_printf(w->arena,
                                     "the error starts inside this module, in a call not "
                                     "dumped: inputs pass, outputs fail, and the first call "
                                     "inside it to fail, %s, already has failing inputs",
                                     f->name);
    } else {
        m->status = NP_CALL_PROPAGATED;
        m->reason = "the calls inside it fail, but none is a culprit (the error only grew)";
    }
}

/* Pass 5: modules, innermost first. A module's failing outputs are
 * explained by the calls inside it:
 * - a module enclosing a culprit "contains" it;
 * - a module the walk found a culprit (inputs pass, outputs fail by
 *   AMPLIFICATION x its input error) whose first failing inner call
 *   already has failing inputs, by AMPLIFICATION x the error seen
 *   before it (the module's inputs and the outputs of the inner calls
 *   before it), stays the culprit: the error starts inside the module
 *   in something the dump does not hold (an L0 dump has no API calls;
 *   at mix level an op that is not hooked), so the module is the
 *   finest place the dump can name;
 * - otherwise, when inner calls fail (the first one narrowly: noise
 *   that grew), it only propagates;
 * - a module whose inner calls all pass (or were not dumped) stays a
 *   culprit itself. */
static void rc_modules(rc_walk *w, int *order)
{
    size_t n_mod = rc_module_tree(w, order);
    rc_call *cc = w->cc;
    for (size_t a = 0; a < n_mod; a++) {
        int k = order[a];
        np_cmp_call *m = &w->p->calls[k];
        if (m->status == NP_CALL_PASS || cc[k].kw_bad)
            ;
        else if (cc[k].has_cul) {
            m->status = NP_CALL_CONTAINS;
            m->reason = "a call inside this module is the culprit";
        } else if (m->status == NP_CALL_CULPRIT && cc[k].first_fail >= 0 && !cc[k].par_cul) {
            rc_module_culprit(w, k);
        }
        if (m->status == NP_CALL_CULPRIT) {
            const char *par = m->parent;
            for (int d = 0; par && par[0] && d < 64; d++) {
                int j = np_strmap_get(&w->byname, par);
                if (j < 0 || j == k)
                    break;
                cc[j].has_cul = 1;
                par = w->p->calls[j].parent;
            }
        }
    }
}

/* Pass 6: say which rows were left out, and that the status does not rest
 * on them. */
static void rc_left_out(rc_walk *w)
{
    for (size_t k = 0; k < w->nc; k++) {
        int li = w->cc[k].n_left[0], lo = w->cc[k].n_left[1];
        if (!li && !lo)
            continue;
        np_cmp_call *c = &w->p->calls[k];
        char what[96];
        if (li && lo)
            snprintf(what, sizeof what, "%d input and %d output row(s)", li, lo);
        else
            snprintf(what, sizeof what, "%d %s row(s)", li ? li : lo, li ? "input" : "output");
        c->reason = cmp_arena_printf(w->arena,
                               "%s%s%s left out of the root cause: the payload could not be "
                               "read or does not match its crc32 (file corrupt), so the error "
                               "says nothing about this call",
                               c->reason, c->reason[0] ? "; " : "", what);
    }
}

np_status cmp_culprit_list(np_cmp_pair *p, np_error *err)
{
    size_t n = 0;
    for (size_t k = 0; k < p->n_calls; k++)
        n += p->calls[k].status == NP_CALL_CULPRIT;
    free(p->culprits);
    p->culprits = malloc((n + 1) * sizeof *p->culprits);
    p->n_culprits = 0;
    if (!p->culprits)
        return np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory");
    for (size_t k = 0; k < p->n_calls; k++)
        if (p->calls[k].status == NP_CALL_CULPRIT)
            p->culprits[p->n_culprits++] = (int)k;
    return NP_OK;
}

/* The root cause as passes over one rc_call per call: gather, backward
 * inputs, calls, (statistics mode) the visible difference, modules, left-out
 * rows, the culprit list. */
np_status cmp_root_cause(np_cmp_pair *p, np_error *err)
{
    cmp_pair_priv *pv = p->priv;
    rc_walk w = {.p = p, .arena = &pv->arena, .nc = p->n_calls};
    w.cc = calloc(w.nc + 1, sizeof *w.cc);
    int *order = malloc((w.nc + 1) * sizeof *order);
    np_status st = NP_OK;
    if (!w.cc || !order || np_strmap_init(&w.byname, w.nc) != 0) {
        st = np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory in the root-cause walk");
    } else {
        rc_gather(&w);
        rc_backward_inputs(&w);
        rc_calls(&w);
        if (p->mode == NP_CMP_MODE_STATISTICS)
            rc_statistics(&w);
        rc_modules(&w, order);
        rc_left_out(&w);
        st = cmp_culprit_list(p, err);
    }
    free(w.cc);
    free(order);
    np_strmap_free(&w.byname);
    return st;
}

/* Rule 3 of issue 16, the sub-threshold origin (docs/COMPARE.md): error rows
 * but no culprit (every failing call only propagates, narrowly or from
 * failing inputs) means the error was born below the level and grew past
 * it later. Before the first call with failing outputs, the call whose
 * output error jumps by AMPLIFICATION x over its inputs' to the largest
 * severity (at least 1 / AMPLIFICATION of the level: above the dtype's
 * noise, which the levels keep 12x or more below) is named, with a reason
 * saying it is below the level. API calls are preferred to modules (the
 * finer name); modules around it contain the culprit. */
np_status cmp_subthreshold(np_cmp_pair *p, np_error *err)
{
    if (p->n_culprits)
        return NP_OK;
    size_t nc = p->n_calls, first = nc;
    int best = -1, any_api = 0;
    for (size_t k = 0; k < nc; k++)
        any_api |= !strcmp(p->calls[k].kind, "api");
    /* the first failing call of the kind named (a module's row may come
     * before or after its inner calls) */
    for (size_t k = 0; k < nc && first == nc; k++)
        if (p->calls[k].n_error_out > 0 && (!any_api || !strcmp(p->calls[k].kind, "api")))
            first = k;
    if (first == nc)
        return NP_OK;
    for (size_t k = 0; k < first; k++) {
        const np_cmp_call *c = &p->calls[k];
        if (any_api && strcmp(c->kind, "api") != 0)
            continue;
        if (c->sev_out >= 1.0 / AMPLIFICATION && c->sev_out >= AMPLIFICATION * c->sev_in &&
            (best < 0 || c->sev_out > p->calls[best].sev_out))
            best = (int)k;
    }
    if (best < 0)
        return NP_OK;
    cmp_pair_priv *pv = p->priv;
    np_cmp_call *c = &p->calls[best];
    c->status = NP_CALL_CULPRIT;
    c->reason = c->sev_in > 0
                    ? cmp_arena_printf(&pv->arena,
                                 "below the error level (severity %.3g, the level is 1), but %.3g x "
                                 "its input error, and the error rows that follow (from %s on) "
                                 "grow from it: no call reaches the level on its own",
                                 c->sev_out, c->sev_out / c->sev_in, p->calls[first].name)
                    : cmp_arena_printf(&pv->arena,
                                 "below the error level (severity %.3g, the level is 1) with "
                                 "inputs equal, and the error rows that follow (from %s on) grow "
                                 "from it: no call reaches the level on its own",
                                 c->sev_out, p->calls[first].name);
    const char *par = c->parent;
    for (int d = 0; par && par[0] && d < 64; d++) {
        size_t j = 0;
        while (j < nc && strcmp(p->calls[j].name, par) != 0)
            j++;
        if (j == nc || j == (size_t)best)
            break;
        if (p->calls[j].status != NP_CALL_PASS) {
            p->calls[j].status = NP_CALL_CONTAINS;
            p->calls[j].reason = "a call inside this module is the culprit";
        }
        par = p->calls[j].parent;
    }
    free(p->culprits);
    p->culprits = malloc(sizeof *p->culprits);
    if (!p->culprits) {
        p->n_culprits = 0;
        return np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory");
    }
    p->culprits[0] = best;
    p->n_culprits = 1;
    return NP_OK;
}

/* Rule 2 of issue 16, gaps (docs/COMPARE.md): a call the bench made and the
 * run under test did not (all its rows bench-only: a missing residual add,
 * a skipped op) leaves no failing row of its own; the first call after it
 * sees failing inputs with no earlier dumped call failing, and the walk
 * names that call ("the error starts before it"). When such a culprit and
 * a missing call share a module, the innermost module holding both is
 * named instead ("the gap is inside it"); the culprit and the modules
 * between it and that module become propagated. A call missing on the
 * cmp side is rarely missing by name: the calls after it take its counter,
 * so a module whose bench side made more forward calls of an API than its
 * cmp side (pv->gap_*, compare.c find_gaps) holds a gap too. */
static int call_index(const np_cmp_pair *p, const char *name)
{
    for (size_t j = 0; name && name[0] && j < p->n_calls; j++)
        if (!strcmp(p->calls[j].name, name))
            return (int)j;
    return -1;
}

/* 1 when module `mod` (a call name) is `name`'s parent or an ancestor of it. */
static int holds(const np_cmp_pair *p, const char *mod, const char *name)
{
    int k = call_index(p, name);
    const char *par = k >= 0 ? p->calls[k].parent : NULL;
    for (int d = 0; par && par[0] && d < 64; d++) {
        if (!strcmp(par, mod))
            return 1;
        int j = call_index(p, par);
        par = j >= 0 ? p->calls[j].parent : NULL;
    }
    return 0;
}

/* gap >= 0: a call of the bench side only; else -1 - i for pv->gap_*[i] (a count).
 * `mod` is named; `common` is the culprit's enclosing module that holds it
 * (mod itself, or an ancestor of mod when the gap is in a module beside the
 * culprit's: a router whose missing call shifted the counters of the calls
 * after it, in the experts). */
static void gap_rename(np_cmp_pair *p, int c, int gap, const char *mod, const char *common)
{
    cmp_pair_priv *pv = p->priv;
    int m = call_index(p, mod);
    if (m < 0)
        return;
    np_cmp_call *cul = &p->calls[c];
    char what[600];
    if (gap >= 0)
        snprintf(what, sizeof what, "%.400s was called on the bench side only", p->calls[gap].name);
    else
        snprintf(what, sizeof what, "the bench calls %.400s %d time(s) in it, the cmp %d",
                 pv->gap_api[-1 - gap], pv->gap_bench[-1 - gap], pv->gap_cmp[-1 - gap]);
    p->calls[m].status = NP_CALL_CULPRIT;
    p->calls[m].reason = cmp_arena_printf(&pv->arena,
                                     "a gap inside this module: %s (a missing call: a residual "
                                     "add, a skipped op), and the first call after it, %s, already "
                                     "has failing inputs with no earlier dumped call failing",
                                     what, cul->name);
    cul->status = NP_CALL_PROPAGATED;
    cul->reason = cmp_arena_printf(&pv->arena, "its inputs fail from the gap in %s (%s)", mod, what);
    /* the modules between the culprit and `common` only carry it; those around `mod` contain it */
    const char *par = cul->parent;
    int mc = call_index(p, common);
    for (int d = 0; par && par[0] && d < 64; d++) {
        int j = call_index(p, par);
        if (j < 0)
            break;
        if (j == mc) {
            par = p->calls[m].parent;
            for (int e = 0; par && par[0] && e < 64; e++) {
                int a = call_index(p, par);
                if (a < 0)
                    break;
                if (p->calls[a].status != NP_CALL_PASS) {
                    p->calls[a].status = NP_CALL_CONTAINS;
                    p->calls[a].reason = "a call inside this module is the culprit";
                }
                par = p->calls[a].parent;
            }
            return;
        }
        if (p->calls[j].status == NP_CALL_CONTAINS) {
            p->calls[j].status = NP_CALL_PROPAGATED;
            p->calls[j].reason = "its failing outputs come from the gap in an enclosing module";
        }
        par = p->calls[j].parent;
    }
}

/* 1 when module `mod` (a call name) itself (not a module inside it) makes
 * a collective (Distributed.*) on the cmp side only (coll[]): the
 * parallel program communicates there where the one process does not (an
 * expert-parallel dispatch and combine in place of the one process's split
 * and cat), so its calls differ from the bench's by design and a call or
 * a count missing in it is no gap. */
static int communicates(const np_cmp_pair *p, const char *coll, const char *mod)
{
    for (size_t j = 0; mod && mod[0] && j < p->n_calls; j++)
        if (coll[j] && p->calls[j].parent && !strcmp(p->calls[j].parent, mod))
            return 1;
    return 0;
}

np_status cmp_gaps(np_cmp_pair *p, np_error *err)
{
    size_t nc = p->n_calls;
    char *one_sided = calloc(nc + 1, 1), *two = calloc(nc + 1, 1), *coll = calloc(nc + 1, 1);
    if (!one_sided || !two || !coll) {
        free(one_sided);
        free(two);
        free(coll);
        return np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory");
    }
    for (size_t i = 0; i < p->n_rows; i++) {
        const np_cmp_row *r = &p->rows[i];
        if (r->call_index < 0)
            continue;
        if (r->cmp)
            two[r->call_index] = 1;
        else
            one_sided[r->call_index] = 1;
        if (r->bench)
            coll[r->call_index] = 1; /* a bench row: not the cmp side's only */
    }
    /* a collective without a bench row (a call without rows, its leaves
     * Local() and left out, is the cmp side's: compare.c build_calls) */
    for (size_t k = 0; k < nc; k++)
        coll[k] = !coll[k] && !strncmp(p->calls[k].name, "Distributed.", 12);
    int renamed = 0;
    for (size_t k = 0; k < nc; k++) {
        np_cmp_call *c = &p->calls[k];
        if (c->status != NP_CALL_CULPRIT || strcmp(c->kind, "api") != 0 || !(c->sev_in > 1))
            continue;
        /* the innermost module around c that also holds a call missing on the cmp side */
        const char *par = c->parent;
        for (int d = 0; par && par[0] && d < 64; d++) {
            int gap = 0, found = 0;
            for (size_t g = 0; g < nc && !found; g++)
                if (one_sided[g] && !two[g] && holds(p, par, p->calls[g].name) &&
                    !communicates(p, coll, p->calls[g].parent)) {
                    gap = (int)g;
                    found = 1;
                }
            const cmp_pair_priv *pv = p->priv;
            const char *named = par;
            for (int g = 0; g < pv->n_gaps && !found; g++)
                if (!strcmp(pv->gap_mod[g], par) && !communicates(p, coll, par)) {
                    gap = -1 - g;
                    found = 1;
                }
            /* a count gap in a module inside `par` that ran before the
             * culprit: the missing call shifted the counters of every later
             * call of its API, so the first of them to fail may sit in a
             * module beside it (issue 31: a router's missing Tensor.float,
             * the culprit in the experts); the gap's own module is named */
            for (int g = 0; g < pv->n_gaps && !found; g++) {
                int gm = call_index(p, pv->gap_mod[g]);
                if (gm >= 0 && gm < (int)k && holds(p, par, pv->gap_mod[g]) &&
                    !communicates(p, coll, pv->gap_mod[g])) {
                    gap = -1 - g;
                    named = pv->gap_mod[g];
                    found = 1;
                }
            }
            if (found) {
                gap_rename(p, (int)k, gap, named, par);
                renamed = 1;
                break;
            }
            int j = call_index(p, par);
            par = j >= 0 ? p->calls[j].parent : NULL;
        }
    }
    free(one_sided);
    free(two);
    free(coll);
    if (!renamed)
        return NP_OK;
    size_t n = 0;
    for (size_t k = 0; k < nc; k++)
        n += p->calls[k].status == NP_CALL_CULPRIT;
    free(p->culprits);
    p->culprits = malloc((n + 1) * sizeof *p->culprits);
    p->n_culprits = 0;
    if (!p->culprits)
        return np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory");
    for (size_t k = 0; k < nc; k++)
        if (p->calls[k].status == NP_CALL_CULPRIT)
            p->culprits[p->n_culprits++] = (int)k;
    return NP_OK;
}
