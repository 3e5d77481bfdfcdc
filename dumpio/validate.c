/* dumpio/validate.c - rows and root attributes that contradict themselves
 * or the format (docs/FORMAT.md, "What readers check"): statistics that
 * cannot come from any tensor (a count below 0 or above numel, min above
 * max, a mean outside [min, max], a negative norm, ...), fields outside
 * their sets (role, dtype, kind, has_data), names that are not
 * "{call}.{role}.{key}" or hold control characters. The readers turn each
 * into a note naming the file, the row and the field: a corrupt or edited
 * dump is never compared as if it were data. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "nprobe/hook.h"
#include "nprobe/tensor.h"

static const char *say(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static const char *say(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
    return buf;
}

/* 0 when s is valid UTF-8 (shortest forms, no surrogates) without control
 * characters (C0, DEL, C1); else 1 and *at the byte offset of the fault. */
static int bad_text(const char *s, size_t *at)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (p[i]) {
        unsigned c = p[i];
        int n = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2
                             : (c & 0xF8) == 0xF0 ? 3 : -1;
        if (n < 0 || (n == 1 && c < 0xC2) || (n == 3 && c > 0xF4)) {
            *at = i;
            return 1;
        }
        unsigned cp = n ? c & (0x3Fu >> n) : c;
        for (int k = 1; k <= n; k++) {
            if ((p[i + k] & 0xC0) != 0x80) {
                *at = i;
                return 1;
            }
            cp = cp << 6 | (p[i + k] & 0x3Fu);
        }
        if ((n == 2 && (cp < 0x800 || (cp >= 0xD800 && cp < 0xE000))) || (n == 3 && cp < 0x10000) ||
            cp > 0x10FFFF || cp < 0x20 || (cp >= 0x7F && cp < 0xA0)) {
            *at = i;
            return 1;
        }
        i += (size_t)n + 1;
    }
    return 0;
}

/* 1 when s is dot-separated non-empty parts ("Functional.linear.0.forward"). */
static int dotted(const char *s)
{
    if (!s[0] || s[0] == '.')
        return 0;
    for (const char *p = s; *p; p++)
        if (*p == '.' && (p[1] == '.' || p[1] == '\0'))
            return 0;
    return 1;
}

/* 1 for "Module.{path}.{Class}.{forward|backward}.{N}" (N decimal). */
static int module_call_name(const char *s)
{
    if (strncmp(s, "Module.", 7) != 0 || !dotted(s))
        return 0;
    const char *dot = strrchr(s, '.');
    for (const char *q = dot + 1; *q; q++)
        if (*q < '0' || *q > '9')
            return 0;
    if (dot[1] == '0' && dot[2])
        return 0;
    size_t pre = (size_t)(dot - s);
    return (pre > 15 && !strncmp(dot - 8, ".forward", 8)) ||
           (pre > 16 && !strncmp(dot - 9, ".backward", 9));
}

static const char *text_problem(const char *field, const char *s, int need, char *buf, size_t cap)
{
    size_t at = 0;
    if (need && !s[0])
        return say(buf, cap, "%s is empty", field);
    if (bad_text(s, &at))
        return say(buf, cap, "%s has byte 0x%02x at offset %zu (expected UTF-8 text without "
                             "control characters)",
                   field, (unsigned char)s[at], at);
    return NULL;
}

static int known_role(const char *r)
{
    for (int k = 0; k < NP_ROLE_COUNT; k++)
        if (!strcmp(r, np_role_name((np_role)k)))
            return 1;
    return 0;
}

static int known_dtype(const char *d)
{
    for (int k = 0; k < NP_DTYPE_COUNT; k++)
        if (!strcmp(d, np_dtype_name((np_dtype)k)))
            return 1;
    return 0;
}

/* 1 when v is a value a tensor of `dtype` can hold (nprobe's max and min
 * are elements of the tensor, exactly). */
static int holds(const char *dtype, double v)
{
    if (!strcmp(dtype, "float32") || !strcmp(dtype, "float16") || !strcmp(dtype, "bfloat16") ||
        !strncmp(dtype, "float8_", 7) || !strcmp(dtype, "hifloat8"))
        return (double)(float)v == v;
    if (!strcmp(dtype, "int64") || !strcmp(dtype, "int32"))
        return v == floor(v);
    if (!strcmp(dtype, "bool"))
        return v == 0 || v == 1;
    return 1;
}

static const char *shape_problem(const np_entry_rec *r, char *buf, size_t cap)
{
    if (r->ndim < 0 || r->ndim > NP_FMT_MAX_DIMS)
        return say(buf, cap, "ndim %d is outside [0, %d]", r->ndim, NP_FMT_MAX_DIMS);
    int64_t prod = 1;
    int overflow = 0;
    for (int k = 0; k < r->ndim; k++) {
        if (r->shape[k] < 0)
            return say(buf, cap, "shape[%d] is %lld (a negative dimension)", k,
                       (long long)r->shape[k]);
        if (r->shape[k] && prod > INT64_MAX / r->shape[k])
            overflow = 1;
        else
            prod *= r->shape[k];
    }
    for (int k = r->ndim; k < NP_FMT_MAX_DIMS; k++)
        if (r->shape[k] != 0)
            return say(buf, cap, "shape[%d] is %lld beyond ndim %d (expected 0)", k,
                       (long long)r->shape[k], r->ndim);
    char sh[NP_FMT_MAX_DIMS * 24 + 8] = "(";
    size_t u = 1;
    for (int k = 0; k < r->ndim && u < sizeof sh; k++)
        u += (size_t)snprintf(sh + u, sizeof sh - u, "%s%lld", k ? ", " : "", (long long)r->shape[k]);
    if (u < sizeof sh)
        snprintf(sh + u, sizeof sh - u, ")");
    if (overflow)
        return say(buf, cap, "shape %s overflows a 64-bit element count", sh);
    if (r->numel != prod)
        return say(buf, cap, "numel %lld disagrees with shape %s = %lld elements",
                   (long long)r->numel, sh, (long long)prod);
    return NULL;
}

/* The statistics: counts within numel, then max/min/mean/norm as they can
 * be for the finite elements (nprobe) or all elements (keep_inf). */
static const char *stats_problem(const np_dumpio_info *in, const np_entry_rec *r, char *buf,
                                 size_t cap)
{
    const int64_t cnt[3] = {r->nan_count, r->posinf_count, r->neginf_count};
    static const char *const cname[3] = {"nan_count", "posinf_count", "neginf_count"};
    int64_t sum = 0;
    for (int k = 0; k < 3; k++) {
        if (cnt[k] < 0 || cnt[k] > r->numel)
            return say(buf, cap, "%s %lld is outside [0, numel %lld]", cname[k],
                       (long long)cnt[k], (long long)r->numel);
        sum += cnt[k];
    }
    if (sum > r->numel)
        return say(buf, cap, "nan_count + posinf_count + neginf_count = %lld exceeds numel %lld",
                   (long long)sum, (long long)r->numel);
    int nprobe = !in->stats_keep_inf;
    int kwargs = !strcmp(r->role, "kwargs");
    const double mx = r->max, mn = r->min, me = r->mean, no = r->norm;
    if (!isnan(mx) && !isnan(mn) && mn > mx)
        return say(buf, cap, "min %.17g is above max %.17g", mn, mx);
    if (nprobe && !kwargs) {
        int64_t fin = r->numel - sum;
        const double v[4] = {mx, mn, me, no};
        static const char *const vname[4] = {"max", "min", "mean", "norm"};
        /* float64 sums and squares can overflow or underflow: only max
         * and min are sure to be finite there */
        int f64 = !strcmp(r->dtype, "float64");
        for (int k = 0; k < 4; k++) {
            if (fin == 0 && !isnan(v[k]))
                return say(buf, cap, "%s is %.17g but the tensor has no finite element (numel "
                                     "%lld, %lld NaN/Inf; expected NaN)",
                           vname[k], v[k], (long long)r->numel, (long long)sum);
            if (fin > 0 && !isfinite(v[k]) && (k < 2 || !f64))
                return say(buf, cap, "%s is %g but the tensor has %lld finite element(s) "
                                     "(expected a finite value over them)",
                           vname[k], v[k], (long long)fin);
        }
        if (fin == 0)
            return NULL;
        if (!holds(r->dtype, mx))
            return say(buf, cap, "max %.17g is not a %s value (expected an element of the tensor)",
                       mx, r->dtype);
        if (!holds(r->dtype, mn))
            return say(buf, cap, "min %.17g is not a %s value (expected an element of the tensor)",
                       mn, r->dtype);
    }
    if (isfinite(mx) && isfinite(mn) && isfinite(me)) {
        /* float64 sums of float32 values stay inside [min, max] but for
         * rounding; other writers' means may be float32 */
        double big = fmax(fabs(mx), fabs(mn)), tol = big * (nprobe ? 1e-5 : 1e-3);
        if (me < mn - tol || me > mx + tol)
            return say(buf, cap, "mean %.17g is outside [min %.17g, max %.17g]", me, mn, mx);
    }
    if (!isnan(no) && no < 0 && (nprobe || r->ndim > 0)) /* msprobe: a scalar's norm is itself */
        return say(buf, cap, "norm %.17g is negative", no);
    if (nprobe && kwargs) {
        if (r->numel != 1 || r->nan_count != !!isnan(mx) || r->posinf_count != (mx == INFINITY) ||
            r->neginf_count != (mx == -INFINITY))
            return say(buf, cap, "a scalar argument of value %.17g has numel %lld, nan_count %lld, "
                                 "posinf_count %lld, neginf_count %lld (expected 1 and its own "
                                 "class: one count 1 or none)",
                       mx, (long long)r->numel, (long long)r->nan_count,
                       (long long)r->posinf_count, (long long)r->neginf_count);
        if (!isnan(mx) && (mn != mx || me != mx || no != fabs(mx)))
            return say(buf, cap, "a scalar argument's max %.17g, min %.17g, mean %.17g, norm "
                                 "%.17g (expected the value three times and its absolute value)",
                       mx, mn, me, no);
        return NULL;
    }
    if (nprobe && strcmp(r->dtype, "float64") != 0 && isfinite(no) && isfinite(mx) && isfinite(mn) && isfinite(me)) {
        /* |element| <= norm <= sqrt(n) * max|element|; norm >= sqrt(n) * |mean| */
        double n = (double)(r->numel - sum), big = fmax(fabs(mx), fabs(mn));
        if (no < big * (1 - 1e-5))
            return say(buf, cap, "norm %.17g is below the largest magnitude %.17g (max/min)", no,
                       big);
        if (no > sqrt(n) * big * (1 + 1e-5))
            return say(buf, cap, "norm %.17g is above sqrt(%lld finite elements) x largest "
                                 "magnitude %.17g",
                       no, (long long)(r->numel - sum), big);
        if (no < sqrt(n) * fabs(me) * (1 - 1e-5))
            return say(buf, cap, "norm %.17g is below sqrt(%lld finite elements) x |mean| %.17g",
                       no, (long long)(r->numel - sum), fabs(me));
    }
    return NULL;
}

const char *np_dumpio_entry_problem(const np_dumpio_info *in, const np_entry_rec *r, char *buf,
                                    size_t cap)
{
    const char *t;
    if (r->has_data != 0 && r->has_data != 1)
        return say(buf, cap, "has_data is %d (expected 0 or 1)", r->has_data);
    if (r->requires_grad != 0 && r->requires_grad != 1)
        return say(buf, cap, "requires_grad is %d (expected 0 or 1)", r->requires_grad);
    if ((t = text_problem("name", r->name, 1, buf, cap)) || (t = text_problem("call", r->call, 1, buf, cap)) ||
        (t = text_problem("role", r->role, 1, buf, cap)) || (t = text_problem("dtype", r->dtype, 1, buf, cap)))
        return t;
    if ((t = shape_problem(r, buf, cap)))
        return t;
    int nprobe = in->source && !strcmp(in->source, "nprobe");
    if (nprobe) {
        if (!known_role(r->role))
            return say(buf, cap, "role '%s' is not one of input, output, parameters, kwargs, "
                                 "parameters_grad", r->role);
        if (!known_dtype(r->dtype))
            return say(buf, cap, "dtype '%s' is not one of float32, bfloat16, float16, float64, "
                                 "int64, int32, bool", r->dtype);
        if (!dotted(r->call))
            return say(buf, cap, "call '%s' is not a dotted call name (empty part)", r->call);
        size_t lc = strlen(r->call), lr = strlen(r->role);
        if (strncmp(r->name, r->call, lc) != 0 || r->name[lc] != '.' ||
            strncmp(r->name + lc + 1, r->role, lr) != 0 || r->name[lc + 1 + lr] != '.' ||
            !r->name[lc + 2 + lr])
            return say(buf, cap, "name '%s' is not {call}.{role}.{key} of call '%s' and role '%s'",
                       r->name, r->call, r->role);
        if (!strcmp(in->task, "statistics") && r->crc32 != 0)
            return say(buf, cap, "crc32 is 0x%08x in a statistics dump (expected 0)",
                       (unsigned)r->crc32);
        if (!strcmp(in->task, "statistics") && r->has_data)
            return say(buf, cap, "has_data is 1 in a statistics dump (expected 0: no payloads)");
    }
    return stats_problem(in, r, buf, cap);
}

const char *np_dumpio_call_problem(const np_dumpio_info *in, const np_call_rec *r, size_t row,
                                   char *buf, size_t cap)
{
    const char *t;
    if (r->seq < 0 || (uint64_t)r->seq != row)
        return say(buf, cap, "seq is %lld in row %zu (expected the row number)", (long long)r->seq,
                   row);
    if ((t = text_problem("call", r->call, 1, buf, cap)) ||
        (t = text_problem("parent", r->parent, 0, buf, cap)) ||
        (t = text_problem("callsite", r->callsite, 0, buf, cap)))
        return t;
    if ((t = text_problem("kind", r->kind, 1, buf, cap)))
        return t;
    if (strcmp(r->kind, "api") != 0 && strcmp(r->kind, "module") != 0)
        return say(buf, cap, "kind '%.7s' is not api or module", r->kind);
    if (!dotted(r->call))
        return say(buf, cap, "call '%s' is not a dotted call name (empty part)", r->call);
    if (r->parent[0] && !dotted(r->parent))
        return say(buf, cap, "parent '%s' is not a dotted call name (empty part)", r->parent);
    if (in->source && !strcmp(in->source, "nprobe")) {
        /* the probe's rule: a call named Module.* is a module call */
        int module = !strncmp(r->call, "Module.", 7);
        if (module != !strcmp(r->kind, "module"))
            return say(buf, cap, "kind '%s' disagrees with call '%s' (a module call's name starts "
                                 "with Module.)", r->kind, r->call);
        if (r->parent[0] && !module_call_name(r->parent))
            return say(buf, cap, "parent '%s' is not a module call name "
                                 "(Module.{path}.{Class}.{forward|backward}.{N})", r->parent);
    }
    return NULL;
}

/* ---- placements (format version 2): the check lives in common/place.c ---------- */

const char *np_dumpio_place_item(const np_place_rec *p, int k, char *buf, size_t cap)
{
    return np_fmt_place_item(p, k, buf, cap);
}

const char *np_dumpio_place_problem(const np_dumpio_info *in, const np_place_rec *p,
                                    const np_entry_rec *e, char *buf, size_t cap)
{
    np_fmt_mesh m;
    memset(&m, 0, sizeof m);
    m.ndim = in->mesh_ndim;
    for (int k = 0; k < in->mesh_ndim && k < NP_FMT_MESH_MAX; k++) {
        memcpy(m.dims[k], in->mesh_dims[k], sizeof m.dims[k]);
        m.shape[k] = in->mesh_shape[k];
        m.coords[k] = in->mesh_coords[k];
    }
    return np_fmt_place_problem(&m, p, e ? e->ndim : -1, e ? e->shape : NULL, buf, cap);
}
