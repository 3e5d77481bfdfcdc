/* msprobe/dumpjson.c - msprobe's dump.json streamed into nprobe leaves.
 *
 *   {"task", "level", "framework", "dump_data_dir", "data": {call: {...}}}
 *
 * A forward call holds input_args (a list that can nest), input_kwargs,
 * output and, for modules, parameters; a backward call input (gradients
 * arriving at the outputs) and output (gradients produced); a
 * "Module.X.parameters_grad.N" call maps a parameter name to a list of
 * gradients. Each item is a tensor {type, dtype, shape, Max, Min, Mean,
 * Norm, requires_grad[, data_name][, md5]}, a non-tensor {type, value}, or
 * null. Names become nprobe's (docs/FORMAT.md, "msprobe dumps"): input_args
 * i -> {call}.input.i (nested: .input.i.j), input_kwargs k ->
 * {call}.kwargs.k (msprobe: {call}.input.k), parameters_grad.0 ->
 * {module}.parameters_grad.{name}. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nprobe/msprobe.h"

#define NAME_CAP 1024

typedef struct walk {
    np_json_reader r;
    const np_msp_sink *sink;
    np_msp_header *hdr;
    char nm[NAME_CAP], ms[NAME_CAP]; /* nprobe and msprobe names being built */
    size_t nm_len, ms_len;
    char call[NP_FMT_NAME_LEN];      /* the nprobe call */
    const char *role;
    np_msp_entry e;
} walk;

static np_status next(np_json_tok *t, walk *w, np_error *err)
{
    return np_json_next(t, &w->r, err);
}

/* Append "." + s to both names (ms may differ: kwargs). */
static void names_push(walk *w, const char *nm_part, const char *ms_part, size_t saved[2])
{
    saved[0] = w->nm_len;
    saved[1] = w->ms_len;
    int a = snprintf(w->nm + w->nm_len, NAME_CAP - w->nm_len, ".%s", nm_part);
    int b = snprintf(w->ms + w->ms_len, NAME_CAP - w->ms_len, ".%s", ms_part);
    w->nm_len += (size_t)a < NAME_CAP - w->nm_len ? (size_t)a : NAME_CAP - 1 - w->nm_len;
    w->ms_len += (size_t)b < NAME_CAP - w->ms_len ? (size_t)b : NAME_CAP - 1 - w->ms_len;
}

static void names_pop(walk *w, const size_t saved[2])
{
    w->nm_len = saved[0];
    w->ms_len = saved[1];
    w->nm[w->nm_len] = '\0';
    w->ms[w->ms_len] = '\0';
}

static double stat_value(const np_json_tok *t)
{
    switch (t->type) {
    case NP_JSON_NUM: return t->num;
    case NP_JSON_TRUE: return 1.0;
    case NP_JSON_FALSE: return 0.0;
    default: return NAN; /* null: int64 Mean/Norm */
    }
}

static void dtype_of(char *dst, const char *msp_dtype)
{
    const char *d = msp_dtype;
    if (!strncmp(d, "torch.", 6))
        d += 6;
    static const struct { const char *from, *to; } alias[] = {
        {"float", "float32"}, {"half", "float16"}, {"double", "float64"},
        {"long", "int64"},    {"int", "int32"},    {"short", "int16"},
    };
    for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++)
        if (!strcmp(d, alias[i].from))
            d = alias[i].to;
    np_fmt_copy_name(dst, NP_FMT_DTYPE_LEN, d);
}

static np_status read_shape(walk *w, np_error *err)
{
    np_json_tok t;
    np_status st = next(&t, w, err);
    if (st)
        return st;
    if (t.type != NP_JSON_ARR)
        return np_json_error(&w->r, err, NP_ERR_FORMAT, w->ms, "shape: expected a list");
    np_entry_rec *r = &w->e.rec;
    r->numel = 1;
    for (;;) {
        if ((st = next(&t, w, err)))
            return st;
        if (t.type == NP_JSON_ARR_END)
            return NP_OK;
        if (t.type != NP_JSON_NUM || !(t.num >= 0) || t.num > 9.0e15 || t.num != floor(t.num))
            return np_json_error(&w->r, err, NP_ERR_FORMAT, w->ms,
                                 "shape: expected non-negative integers");
        if (r->ndim >= NP_FMT_MAX_DIMS)
            return np_json_error(&w->r, err, NP_ERR_UNSUPPORTED, w->ms,
                                 "more than %d dimensions", NP_FMT_MAX_DIMS);
        int64_t d = (int64_t)t.num;
        r->shape[r->ndim++] = d;
        /* a product past int64 is kept at INT64_MAX: compare names the row's
         * shape as overflowing (never a wrapped count) */
        r->numel = d && r->numel > INT64_MAX / d ? INT64_MAX : r->numel * d;
    }
}

/* A string field of an item into dst (cap bytes). */
static np_status read_str_field(char *dst, size_t cap, walk *w, const char *what, np_error *err)
{
    np_json_tok t;
    np_status st = next(&t, w, err);
    if (st)
        return st;
    if (t.type == NP_JSON_NULL) {
        dst[0] = '\0';
        return NP_OK;
    }
    if (t.type != NP_JSON_STR)
        return np_json_error(&w->r, err, NP_ERR_FORMAT, w->ms, "%s: expected a string", what);
    if (np_json_str(dst, cap, &t) >= cap)
        return np_json_error(&w->r, err, NP_ERR_LIMIT, w->ms, "%s: longer than %zu bytes", what,
                             cap - 1);
    return NP_OK;
}

/* The "value" of a non-tensor item. */
static np_status read_item_value(walk *w, np_error *err)
{
    np_json_tok t;
    np_status st = next(&t, w, err);
    if (st)
        return st;
    np_entry_rec *r = &w->e.rec;
    if (t.type == NP_JSON_NUM || t.type == NP_JSON_TRUE || t.type == NP_JSON_FALSE) {
        double v = stat_value(&t);
        r->max = r->min = r->mean = r->norm = v; /* msprobe's four statistics of a value */
        w->e.kind = NP_MSP_SCALAR;
        return NP_OK;
    }
    return np_json_skip(&w->r, &t, err);
}

/* One field of an item (key `k` read). */
static np_status item_field(walk *w, const np_json_tok *k, np_error *err)
{
    np_entry_rec *r = &w->e.rec;
    double *stat = np_json_is(k, "Max")    ? &r->max
                   : np_json_is(k, "Min")  ? &r->min
                   : np_json_is(k, "Mean") ? &r->mean
                   : np_json_is(k, "Norm") ? &r->norm
                                           : NULL;
    np_json_tok t;
    np_status st;
    if (stat || np_json_is(k, "requires_grad")) {
        if ((st = next(&t, w, err)))
            return st;
        if (t.type == NP_JSON_OBJ || t.type == NP_JSON_ARR || t.type == NP_JSON_STR)
            return np_json_error(&w->r, err, NP_ERR_FORMAT, w->ms,
                                 "%.*s: expected a number, true, false or null", (int)k->len, k->s);
        if (stat)
            *stat = stat_value(&t);
        else
            r->requires_grad = t.type == NP_JSON_TRUE;
        return NP_OK;
    }
    if (np_json_is(k, "shape"))
        return read_shape(w, err);
    if (np_json_is(k, "value"))
        return read_item_value(w, err);
    if (np_json_is(k, "dtype")) {
        char d[64];
        st = read_str_field(d, sizeof d, w, "dtype", err);
        dtype_of(r->dtype, d);
        return st;
    }
    if (np_json_is(k, "data_name"))
        return read_str_field(w->e.data_name, sizeof w->e.data_name, w, "data_name", err);
    if (np_json_is(k, "md5"))
        return read_str_field(w->e.md5, sizeof w->e.md5, w, "md5", err);
    if ((st = next(&t, w, err)))
        return st;
    return np_json_skip(&w->r, &t, err);
}

static void entry_begin(walk *w)
{
    memset(&w->e, 0, sizeof w->e);
    np_entry_rec *r = &w->e.rec;
    r->max = r->min = r->mean = r->norm = NAN;
    r->numel = 1;
    w->e.raw_stats = 1;
}

/* The counts msprobe's statistics imply, the md5 field, the strings. */
static np_status entry_finish(walk *w, np_error *err)
{
    np_msp_entry *e = &w->e;
    np_entry_rec *r = &e->rec;
    if (w->nm_len >= NP_FMT_NAME_LEN || w->ms_len >= NP_FMT_NAME_LEN)
        return np_json_error(&w->r, err, NP_ERR_LIMIT, w->ms, "leaf name longer than %d bytes",
                             NP_FMT_NAME_LEN - 1);
    memcpy(r->name, w->nm, w->nm_len + 1);
    memcpy(e->msp_name, w->ms, w->ms_len + 1);
    memcpy(r->call, w->call, sizeof r->call);
    /* a tensor passed by keyword (HF models call their layers so:
     * hidden_states=...) is an input; the kwargs role holds scalar arguments,
     * compared by value (docs/FORMAT.md) */
    np_fmt_copy_name(r->role, NP_FMT_ROLE_LEN,
                     e->kind == NP_MSP_TENSOR && !strcmp(w->role, "kwargs") ? "input" : w->role);
    if (e->kind == NP_MSP_TENSOR) {
        int fl = !strncmp(r->dtype, "float", 5) || !strcmp(r->dtype, "bfloat16");
        r->posinf_count = r->max == INFINITY || r->mean == INFINITY;
        r->neginf_count = r->min == -INFINITY || r->mean == -INFINITY;
        r->nan_count = fl && (isnan(r->max) || isnan(r->min));
    } else {
        /* one Python object (a number, a string, None ...): a 0-d row of one
         * element, as numel = product of the shape ( () -> 1 ) says */
        r->ndim = 0;
        r->numel = 1;
        if (e->kind == NP_MSP_SCALAR && !r->dtype[0])
            np_fmt_copy_name(r->dtype, NP_FMT_DTYPE_LEN, "float64");
    }
    if (e->md5[0]) {
        char *end = NULL;
        unsigned long v = strtoul(e->md5, &end, 16);
        if (strlen(e->md5) != 8 || *end)
            return np_json_error(&w->r, err, NP_ERR_FORMAT, w->ms,
                                 "md5: expected 8 hex digits (msprobe's CRC-32), got \"%s\"",
                                 e->md5);
        r->crc32 = (uint32_t)v;
    }
    r->has_data = e->data_name[0] != '\0';
    return NP_OK;
}

static np_status emit(walk *w, np_error *err)
{
    np_status st = entry_finish(w, err);
    if (st)
        return st;
    if (w->hdr)
        w->hdr->n_entries++;
    if (w->sink && w->sink->entry && w->sink->entry(w->sink->user, &w->e, err))
        return err && err->status ? err->status
                                  : np_error_set(err, NP_ERR_INTERNAL, w->r.name, w->ms,
                                                 "reading stopped");
    return NP_OK;
}

static np_status read_node(walk *w, const np_json_tok *first, np_error *err);

/* The rest of an item whose "type" value `type` was read. */
static np_status read_item_rest(walk *w, const np_json_tok *type, np_error *err)
{
    entry_begin(w);
    np_json_str(w->e.type, sizeof w->e.type, type);
    int tensor = !strcmp(w->e.type, "torch.Tensor") || !strcmp(w->e.type, "numpy.ndarray") ||
                 !strcmp(w->e.type, "mindspore.Tensor");
    w->e.kind = tensor ? NP_MSP_TENSOR : NP_MSP_OTHER;
    if (!tensor) {
        const char *t = w->e.type;
        np_fmt_copy_name(w->e.rec.dtype, NP_FMT_DTYPE_LEN,
                         !strcmp(t, "int") ? "int64" : !strcmp(t, "bool") ? "bool" : "float64");
        w->e.raw_stats = 0;
    }
    np_json_tok k;
    for (;;) {
        np_status st = next(&k, w, err);
        if (st)
            return st;
        if (k.type == NP_JSON_OBJ_END)
            break;
        if ((st = item_field(w, &k, err)))
            return st;
    }
    if (w->e.kind == NP_MSP_OTHER)
        w->e.rec.dtype[0] = '\0';
    return emit(w, err);
}

/* A {...} that is not an item: name -> node, with its first key `k` read. */
static np_status read_dict_rest(walk *w, np_json_tok k, np_error *err)
{
    for (;;) {
        if (k.type == NP_JSON_OBJ_END)
            return NP_OK;
        char key[NP_FMT_NAME_LEN];
        np_json_str(key, sizeof key, &k);
        size_t saved[2];
        names_push(w, key, key, saved);
        np_json_tok v;
        np_status st = next(&v, w, err);
        if (!st)
            st = read_node(w, &v, err);
        names_pop(w, saved);
        if (st || (st = next(&k, w, err)))
            return st;
    }
}

static np_status read_list_rest(walk *w, np_error *err)
{
    for (int i = 0;; i++) {
        np_json_tok v;
        np_status st = next(&v, w, err);
        if (st)
            return st;
        if (v.type == NP_JSON_ARR_END)
            return NP_OK;
        char idx[24];
        snprintf(idx, sizeof idx, "%d", i);
        size_t saved[2];
        names_push(w, idx, idx, saved);
        st = read_node(w, &v, err);
        names_pop(w, saved);
        if (st)
            return st;
    }
}

/* A value in an argument structure whose first token is `first`. */
static np_status read_node(walk *w, const np_json_tok *first, np_error *err)
{
    np_status st;
    switch (first->type) {
    case NP_JSON_NULL:
        entry_begin(w);
        w->e.kind = NP_MSP_NONE;
        w->e.raw_stats = 0;
        np_fmt_copy_name(w->e.type, sizeof w->e.type, "None");
        return emit(w, err);
    case NP_JSON_ARR:
        return read_list_rest(w, err);
    case NP_JSON_OBJ: {
        np_json_tok k, v;
        if ((st = next(&k, w, err)))
            return st;
        if (!np_json_is(&k, "type"))
            return read_dict_rest(w, k, err);
        if ((st = next(&v, w, err)))
            return st;
        if (v.type == NP_JSON_STR)
            return read_item_rest(w, &v, err);
        /* an argument named "type": a dict after all */
        size_t saved[2];
        names_push(w, "type", "type", saved);
        st = read_node(w, &v, err);
        names_pop(w, saved);
        if (st || (st = next(&k, w, err)))
            return st;
        return read_dict_rest(w, k, err);
    }
    default:
        return np_json_error(&w->r, err, NP_ERR_FORMAT, w->ms,
                             "expected an item {type, ...}, a list, an object or null");
    }
}

/* One group of a call ("input_args", "output", ...) with its value next. */
static np_status read_group(walk *w, const char *role, const char *nm_part, const char *ms_part,
                            np_error *err)
{
    np_json_tok v;
    np_status st = next(&v, w, err);
    if (st)
        return st;
    w->role = role;
    size_t saved[2];
    names_push(w, nm_part, ms_part, saved);
    if (v.type == NP_JSON_OBJ && !strcmp(role, "output")) {
        /* a single output item: index 0 */
        size_t s2[2];
        names_push(w, "0", "0", s2);
        st = read_node(w, &v, err);
        names_pop(w, s2);
    } else {
        st = read_node(w, &v, err);
    }
    names_pop(w, saved);
    return st;
}

/* A parameters_grad call's {name: [gradient, ...]} member (key `k` read):
 * the first gradient is {call}.{name}, further ones {call}.{name}.{i}. */
static np_status read_pgrad(walk *w, const np_json_tok *k, np_error *err)
{
    char key[NP_FMT_NAME_LEN];
    np_json_str(key, sizeof key, k);
    size_t saved[2];
    names_push(w, key, key, saved);
    w->role = "parameters_grad";
    np_json_tok v;
    np_status st = next(&v, w, err);
    if (!st && v.type != NP_JSON_ARR)
        st = read_node(w, &v, err);
    for (int i = 0; !st && v.type == NP_JSON_ARR; i++) {
        np_json_tok u;
        if ((st = next(&u, w, err)) || u.type == NP_JSON_ARR_END)
            break;
        char idx[24];
        snprintf(idx, sizeof idx, "%d", i);
        size_t s2[2];
        names_push(w, i ? idx : "", "", s2);
        if (!i) { /* no index for the first: undo the "." */
            w->nm_len = s2[0];
            w->ms_len = s2[1];
            w->nm[w->nm_len] = w->ms[w->ms_len] = '\0';
        }
        st = read_node(w, &u, err);
        names_pop(w, s2);
    }
    names_pop(w, saved);
    return st;
}

/* The members of one call object ('{' read). */
static np_status read_call_members(walk *w, int pgrad, np_error *err)
{
    static const struct { const char *key, *role, *nm, *ms; } groups[] = {
        {"input_args", "input", "input", "input"},
        {"input_kwargs", "kwargs", "kwargs", "input"},
        {"input", "input", "input", "input"},
        {"output", "output", "output", "output"},
        {"parameters", "parameters", "parameters", "parameters"},
    };
    for (;;) {
        np_json_tok k;
        np_status st = next(&k, w, err);
        if (st)
            return st;
        if (k.type == NP_JSON_OBJ_END)
            return NP_OK;
        if (pgrad) {
            st = read_pgrad(w, &k, err);
        } else {
            size_t g = 0, ng = sizeof groups / sizeof groups[0];
            while (g < ng && !np_json_is(&k, groups[g].key))
                g++;
            if (g < ng) {
                st = read_group(w, groups[g].role, groups[g].nm, groups[g].ms, err);
            } else {
                np_json_tok v;
                if (!(st = next(&v, w, err)))
                    st = np_json_skip(&w->r, &v, err);
            }
        }
        if (st)
            return st;
    }
}

int np_msp_call_name(char *dst, size_t cap, const char *msp_call)
{
    const char *p = strstr(msp_call, ".parameters_grad");
    if (p && (!strcmp(p, ".parameters_grad.0") || !strcmp(p, ".parameters_grad"))) {
        size_t n = (size_t)(p - msp_call) + strlen(".parameters_grad");
        if (n >= cap)
            return -1;
        memcpy(dst, msp_call, n);
        dst[n] = '\0';
        return 0;
    }
    if (strlen(msp_call) >= cap)
        return -1;
    strcpy(dst, msp_call);
    return 0;
}

static np_status read_call(walk *w, const np_json_tok *k, int64_t seq, np_error *err)
{
    char msp_call[NP_FMT_NAME_LEN];
    if (np_json_str(msp_call, sizeof msp_call, k) >= sizeof msp_call)
        return np_json_error(&w->r, err, NP_ERR_LIMIT, NULL, "call name longer than %d bytes",
                             NP_FMT_NAME_LEN - 1);
    if (np_msp_call_name(w->call, sizeof w->call, msp_call) < 0)
        return np_json_error(&w->r, err, NP_ERR_LIMIT, msp_call, "call name too long");
    int pgrad = strstr(msp_call, ".parameters_grad") != NULL;
    w->nm_len = strlen(w->call);
    memcpy(w->nm, w->call, w->nm_len + 1);
    w->ms_len = strlen(msp_call);
    memcpy(w->ms, msp_call, w->ms_len + 1);
    np_json_tok v;
    np_status st = next(&v, w, err);
    if (st)
        return st;
    if (v.type != NP_JSON_OBJ)
        return np_json_error(&w->r, err, NP_ERR_FORMAT, msp_call, "expected an object for the call");
    if (w->hdr)
        w->hdr->n_calls++;
    if (w->sink && w->sink->call && w->sink->call(w->sink->user, w->call, seq, err))
        return err && err->status ? err->status
                                  : np_error_set(err, NP_ERR_INTERNAL, w->r.name, msp_call,
                                                 "reading stopped");
    return read_call_members(w, pgrad, err);
}

static np_status read_data(walk *w, np_error *err)
{
    np_json_tok t;
    np_status st = next(&t, w, err);
    if (st)
        return st;
    if (t.type != NP_JSON_OBJ)
        return np_json_error(&w->r, err, NP_ERR_FORMAT, "data", "expected an object of calls");
    for (int64_t seq = 0;; seq++) {
        if ((st = next(&t, w, err)))
            return st;
        if (t.type == NP_JSON_OBJ_END)
            return NP_OK;
        if ((st = read_call(w, &t, seq, err)))
            return st;
    }
}

static np_status read_root(walk *w, np_msp_header *hdr, np_error *err)
{
    np_json_tok t;
    np_status st = next(&t, w, err);
    if (st)
        return st;
    if (t.type != NP_JSON_OBJ)
        return np_json_error(&w->r, err, NP_ERR_FORMAT, NULL,
                             "expected an object {task, level, data, ...}: not a msprobe dump.json");
    int has_data = 0;
    for (;;) {
        if ((st = next(&t, w, err)))
            return st;
        if (t.type == NP_JSON_OBJ_END)
            break;
        char *dst = np_json_is(&t, "task")        ? hdr->task
                    : np_json_is(&t, "level")     ? hdr->level
                    : np_json_is(&t, "framework") ? hdr->framework
                                                  : NULL;
        size_t cap = dst == hdr->task ? sizeof hdr->task
                     : dst == hdr->level ? sizeof hdr->level : sizeof hdr->framework;
        if (np_json_is(&t, "data")) {
            has_data = 1;
            st = read_data(w, err);
        } else if ((st = next(&t, w, err)) == NP_OK) {
            if (dst && t.type == NP_JSON_STR)
                np_json_str(dst, cap, &t);
            else
                st = np_json_skip(&w->r, &t, err);
        }
        if (st)
            return st;
    }
    if ((st = next(&t, w, err)))
        return st;
    if (!has_data)
        return np_error_set(err, NP_ERR_FORMAT, w->r.name, "data",
                            "no \"data\" object: not a msprobe dump.json");
    return NP_OK;
}

np_status np_msp_read_dump_json(np_msp_header *hdr, const char *path, const np_msp_sink *sink,
                                np_error *err)
{
    walk *w = calloc(1, sizeof *w);
    np_msp_header local;
    if (!w)
        return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    memset(&local, 0, sizeof local);
    w->sink = sink;
    w->hdr = hdr ? hdr : &local;
    memset(w->hdr, 0, sizeof *w->hdr);
    np_status st = np_json_open_file(&w->r, path, err);
    if (!st)
        st = read_root(w, w->hdr, err);
    np_json_close(&w->r);
    free(w);
    return st;
}
