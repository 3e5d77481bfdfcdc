/* compare/reader.c - a side of a compare: one step file read through
 * np_dumpio (any registered format) into compact records - leaf names,
 * calls and shapes shared with the other side where they are equal, kept
 * in the pair's arena. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "nprobe/msprobe.h"

static const char *const known_roles[] = {"input", "output", "parameters", "kwargs",
                                          "parameters_grad"};
static const char *const known_dtypes[] = {"float32", "bfloat16", "float16", "float64",
                                           "int64", "int32", "bool"};

static const char *intern(cmp_arena *a, const char *s, const char *const *table, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(s, table[i]) == 0)
            return table[i];
    return cmp_arena_strdup(a, s);
}

/* The dump being read and the arena its strings go to (the sinks' user). */
typedef struct reading {
    cmp_dump *d;
    cmp_arena *arena;
    int to_keep_inf;   /* convert the rows' statistics into msprobe's form */
} reading;

/* Room for rows [0, need) of a table whose rows arrive in chunks (the
 * count is known up front for some formats only). 0, or -1 out of memory. */
static int grow(void **v, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap && *v)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *p = realloc(*v, c * size);
    if (!p)
        return -1;
    memset((char *)p + *cap * size, 0, (c - *cap) * size);
    *v = p;
    *cap = c;
    return 0;
}

static np_status entries_begin(void *user, size_t n, np_error *err)
{
    cmp_dump *d = ((reading *)user)->d;
    if (grow((void **)&d->entries, &d->cap_entries, n ? n : 1, sizeof *d->entries) != 0)
        return np_error_set(err, NP_ERR_NOMEM, d->path, NP_FMT_ENTRIES,
                            "out of memory for %zu entries", n);
    return NP_OK;
}

/* Why an /entries row contradicts itself, NULL when it does not: numel
 * must be the product of the shape (1 for ndim 0), no dimension negative,
 * has_data 0 or 1. Such a row would otherwise pass as an "empty tensor"
 * with blank metrics. The text names the field; the caller the leaf. */
static const char *row_defect(cmp_arena *arena, const np_entry_rec *r)
{
    int64_t prod = 1;
    int overflow = 0, negative = 0;
    for (int k = 0; k < r->ndim; k++) {
        if (r->shape[k] < 0)
            negative = 1;
        else if (r->shape[k] && prod > INT64_MAX / r->shape[k])
            overflow = 1;
        else
            prod *= r->shape[k];
    }
    char sh[NP_FMT_MAX_DIMS * 24 + 8] = "(";
    size_t u = 1;
    for (int k = 0; k < r->ndim && u < sizeof sh; k++)
        u += (size_t)snprintf(sh + u, sizeof sh - u, "%s%lld", k ? ", " : "", (long long)r->shape[k]);
    if (u < sizeof sh)
        snprintf(sh + u, sizeof sh - u, ")");
    char buf[400];
    if (r->has_data != 0 && r->has_data != 1)
        snprintf(buf, sizeof buf, "has_data is %d (expected 0 or 1)", r->has_data);
    else if (negative)
        snprintf(buf, sizeof buf, "shape %s has a negative dimension", sh);
    else if (overflow)
        snprintf(buf, sizeof buf, "shape %s overflows a 64-bit element count", sh);
    else if (r->numel != prod)
        snprintf(buf, sizeof buf, "numel %lld disagrees with shape %s = %lld elements",
                 (long long)r->numel, sh, (long long)prod);
    else
        return NULL;
    const char *t = cmp_arena_strdup(arena, buf);
    return t ? t : "inconsistent row";
}

static np_status entries_rows(void *user, np_entry_rec *buf, size_t off, size_t cnt,
                              np_error *err)
{
    cmp_dump *d = ((reading *)user)->d;
    cmp_arena *arena = ((reading *)user)->arena;
    if (grow((void **)&d->entries, &d->cap_entries, off + cnt, sizeof *d->entries) != 0)
        return np_error_set(err, NP_ERR_NOMEM, d->path, NP_FMT_ENTRIES,
                            "out of memory for %zu entries", off + cnt);
    d->n_entries = off + cnt;
    const char *prev_call = off ? d->entries[off - 1].call : NULL;
    for (size_t i = 0; i < cnt; i++) {
        np_entry_rec *r = &buf[i];
        if (((reading *)user)->to_keep_inf)
            np_msp_stats_keep_inf(r);
        np_cmp_side *s = &d->entries[off + i];
        if (r->ndim < 0 || r->ndim > NP_FMT_MAX_DIMS)
            return np_error_set(err, NP_ERR_FORMAT, d->path, r->name,
                                "ndim %d out of range [0, %d] in /entries row %zu", r->ndim,
                                NP_FMT_MAX_DIMS, off + i);
        /* the same leaf on the other side: share its strings */
        int j = d->twin_names ? np_strmap_get(d->twin_names, r->name) : -1;
        const np_cmp_side *twin = j >= 0 ? &d->twin_entries[j] : NULL;
        s->name = twin ? twin->name : cmp_arena_strdup(arena, r->name);
        if (prev_call && strcmp(prev_call, r->call) == 0)
            s->call = prev_call;
        else if (twin && strcmp(twin->call, r->call) == 0)
            s->call = twin->call;
        else
            s->call = cmp_arena_strdup(arena, r->call);
        prev_call = s->call;
        s->role = intern(arena, r->role, known_roles, 5);
        s->dtype = intern(arena, r->dtype, known_dtypes, 7);
        size_t shape_bytes = (size_t)r->ndim * sizeof(int64_t);
        const int64_t *shape = NULL;
        const np_cmp_side *prev = off + i ? &d->entries[off + i - 1] : NULL;
        if (twin && twin->ndim == r->ndim && (!r->ndim || !memcmp(twin->shape, r->shape, shape_bytes))) {
            shape = twin->shape;
        } else if (prev && prev->ndim == r->ndim && r->ndim &&
                   !memcmp(prev->shape, r->shape, shape_bytes)) {
            shape = prev->shape; /* the same shape as the row before */
        } else if (r->ndim) {
            int64_t *sh = cmp_arena_alloc(arena, shape_bytes, sizeof(int64_t));
            if (sh)
                memcpy(sh, r->shape, shape_bytes);
            shape = sh;
        }
        if (!s->name || !s->call || !s->role || !s->dtype || (r->ndim && !shape))
            return np_error_set(err, NP_ERR_NOMEM, d->path, NULL, "out of memory reading /entries");
        s->shape = shape;
        s->ndim = (int8_t)r->ndim;
        s->seq = r->seq;
        s->numel = r->numel;
        s->max = r->max;
        s->min = r->min;
        s->mean = r->mean;
        s->norm = r->norm;
        s->nan_count = r->nan_count;
        s->inf_count = r->posinf_count + r->neginf_count;
        s->crc32 = r->crc32;
        s->has_data = r->has_data;
        s->requires_grad = r->requires_grad;
        s->defect = row_defect(arena, r);
    }
    return NP_OK;
}

static np_status calls_begin(void *user, size_t n, np_error *err)
{
    cmp_dump *d = ((reading *)user)->d;
    size_t cap = 0;
    if (grow((void **)&d->calls, &cap, n ? n : 1, sizeof *d->calls) != 0)
        return np_error_set(err, NP_ERR_NOMEM, d->path, NP_FMT_CALLS, "out of memory");
    d->cap_calls = cap;
    return NP_OK;
}

static np_status calls_rows(void *user, np_call_rec *buf, size_t off, size_t cnt, np_error *err)
{
    cmp_dump *d = ((reading *)user)->d;
    cmp_arena *arena = ((reading *)user)->arena;
    if (grow((void **)&d->calls, &d->cap_calls, off + cnt, sizeof *d->calls) != 0)
        return np_error_set(err, NP_ERR_NOMEM, d->path, NP_FMT_CALLS, "out of memory");
    d->n_calls = off + cnt;
    for (size_t i = 0; i < cnt; i++) {
        np_call_rec *r = &buf[i];
        cmp_call_rec *c = &d->calls[off + i];
        /* the entries name their calls in seq order (the row of /calls):
         * walk them alongside and share the entry's copy of the name */
        while (d->call_cursor < d->n_entries && d->entries[d->call_cursor].seq < r->seq)
            d->call_cursor++;
        const np_cmp_side *e = d->call_cursor < d->n_entries ? &d->entries[d->call_cursor] : NULL;
        c->name = e && e->seq == r->seq && !strcmp(e->call, r->call) ? e->call
                                                                       : cmp_arena_strdup(arena, r->call);
        c->kind = strcmp(r->kind, "module") == 0 ? "module" : "api";
        c->parent = r->parent[0] ? cmp_arena_strdup(arena, r->parent) : "";
        c->callsite = r->callsite[0] ? cmp_arena_strdup(arena, r->callsite) : "";
        c->seq = r->seq;
        if (!c->name || !c->parent || !c->callsite)
            return np_error_set(err, NP_ERR_NOMEM, d->path, NULL, "out of memory reading /calls");
    }
    return NP_OK;
}

static void copy_info(cmp_dump *d, const np_dumpio_info *in)
{
    snprintf(d->task, sizeof d->task, "%s", in->task);
    snprintf(d->level, sizeof d->level, "%s", in->level);
    snprintf(d->precision, sizeof d->precision, "%s", in->precision);
    snprintf(d->device, sizeof d->device, "%.31s", in->device);
    d->step = in->step;
    d->rank = in->rank;
    d->complete = in->complete;
    d->loss_scale = in->loss_scale;
    d->has_calls = in->has_calls;
}

np_status cmp_dump_open(cmp_dump *d, const np_dumpio_ref *ref, unsigned flags, int keep_inf,
                        const cmp_dump *twin, const np_strmap *twin_names, cmp_arena *arena,
                        np_error *err)
{
    memset(d, 0, sizeof *d);
    if (twin && twin_names) {
        d->twin_entries = twin->entries;
        d->twin_names = twin_names;
    }
    snprintf(d->path, sizeof d->path, "%s", ref->path);
    np_status st = np_dumpio_open_ref(&d->io, ref, flags, err);
    if (st != NP_OK)
        return st;
    copy_info(d, np_dumpio_get_info(d->io));
    reading rd = {d, arena, keep_inf && !np_dumpio_get_info(d->io)->stats_keep_inf};
    np_dumpio_entry_sink es = {entries_begin, entries_rows, &rd};
    np_dumpio_call_sink cs = {calls_begin, calls_rows, &rd};
    st = np_dumpio_entries(d->io, &es, err);
    if (st == NP_OK)
        st = np_dumpio_calls(d->io, &cs, err);
    if (st != NP_OK) {
        free(d->entries);
        free(d->calls);
        d->entries = NULL;
        d->calls = NULL;
        d->n_entries = d->n_calls = 0;
        cmp_dump_close(d);
    }
    return st;
}

void cmp_dump_close(cmp_dump *d)
{
    if (!d)
        return;
    np_dumpio_close(d->io);
    d->io = NULL;
    /* entries and calls are handed over to the pair (or freed by it) */
}
