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
                                           "int64", "int32", "bool", "float8_e4m3fn",
                                           "float8_e5m2", "hifloat8"};

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

/* Why an /entries row contradicts itself or the format, NULL when it does
 * not (np_dumpio_entry_problem: the field, its value, what was expected).
 * Such a row would otherwise pass as an "empty tensor" with blank metrics,
 * or be compared as if its statistics were data. */
static const char *row_defect(cmp_arena *arena, const np_dumpio_info *in, const np_entry_rec *r)
{
    char buf[400];
    if (!np_dumpio_entry_problem(in, r, buf, sizeof buf))
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
        const char *defect = row_defect(arena, np_dumpio_get_info(d->io), r);
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
        s->dtype = intern(arena, r->dtype, known_dtypes, (int)(sizeof known_dtypes / sizeof known_dtypes[0]));
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
        s->stats = np_fmt_entry_stats(r);
        s->crc32 = r->crc32;
        s->has_data = r->has_data;
        s->requires_grad = r->requires_grad;
        s->defect = defect;
    }
    return NP_OK;
}

static void call_problem(cmp_dump *d, size_t row, const char *why);

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
        char why[400];
        if (np_dumpio_call_problem(np_dumpio_get_info(d->io), r, off + i, why, sizeof why))
            call_problem(d, off + i, why);
    }
    return NP_OK;
}

/* A /calls problem of row `row`: the first one's words are kept, all
 * counted (the pair notes them, naming the file). */
static void call_problem(cmp_dump *d, size_t row, const char *why)
{
    if (!d->n_call_problems++)
        snprintf(d->call_problem, sizeof d->call_problem, "/calls row %zu: %s", row, why);
}

/* What the two tables say of each other (nprobe's files, which have
 * both): each entry's seq is a row of /calls naming the entry's call, a
 * leaf name appears once, a call name once, a parent found in /calls is a
 * module call. An entry that fails becomes a row defect, a call a problem. */
static np_status cross_check(cmp_dump *d, cmp_arena *arena, np_error *err)
{
    np_strmap calls, leaves;
    if (np_strmap_init(&calls, d->n_calls + 1) != 0)
        return np_error_set(err, NP_ERR_NOMEM, d->path, NULL, "out of memory");
    if (np_strmap_init(&leaves, d->n_entries + 1) != 0) {
        np_strmap_free(&calls);
        return np_error_set(err, NP_ERR_NOMEM, d->path, NULL, "out of memory");
    }
    np_status st = NP_OK;
    char why[600];
    for (size_t i = 0; i < d->n_calls && st == NP_OK; i++) {
        int j = np_strmap_get(&calls, d->calls[i].name);
        if (j >= 0) {
            snprintf(why, sizeof why, "call '%s' also in row %d (a call is listed once)",
                     d->calls[i].name, j);
            call_problem(d, i, why);
        } else if (np_strmap_put(&calls, d->calls[i].name, (int)i) != 0) {
            st = np_error_set(err, NP_ERR_NOMEM, d->path, NULL, "out of memory");
        }
    }
    for (size_t i = 0; i < d->n_calls && st == NP_OK; i++) {
        const char *par = d->calls[i].parent;
        if (!par[0])
            continue;
        /* a parent none of whose leaves was selected (list, data_mode,
         * level L1) has no row: only one that is there must be a module */
        int j = np_strmap_get(&calls, par);
        if (j >= 0 && strcmp(d->calls[j].kind, "module") != 0) {
            snprintf(why, sizeof why, "parent '%s' is /calls row %d of kind %s (expected module)",
                     par, j, d->calls[j].kind);
            call_problem(d, i, why);
        }
    }
    for (size_t i = 0; i < d->n_entries && st == NP_OK; i++) {
        np_cmp_side *e = &d->entries[i];
        int j = np_strmap_get(&leaves, e->name);
        why[0] = '\0';
        if (j >= 0)
            snprintf(why, sizeof why, "name '%s' also in /entries row %d (leaf names are unique)",
                     e->name, j);
        else if (np_strmap_put(&leaves, e->name, (int)i) != 0)
            st = np_error_set(err, NP_ERR_NOMEM, d->path, NULL, "out of memory");
        if (e->defect || why[0])
            ;
        else if (e->seq < 0 || (uint64_t)e->seq >= d->n_calls)
            snprintf(why, sizeof why, "seq %lld is not a row of /calls (%zu rows)",
                     (long long)e->seq, d->n_calls);
        else if (strcmp(d->calls[e->seq].name, e->call) != 0)
            snprintf(why, sizeof why, "seq %lld points to /calls row %lld, call '%s', not this "
                     "row's call '%s'", (long long)e->seq, (long long)e->seq,
                     d->calls[e->seq].name, e->call);
        if (why[0] && !e->defect) {
            e->defect = cmp_arena_strdup(arena, why);
            if (!e->defect)
                e->defect = "inconsistent row";
        }
    }
    np_strmap_free(&calls);
    np_strmap_free(&leaves);
    return st;
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
    d->dp_grad_scale = in->dp_grad_scale > 0 ? in->dp_grad_scale : 1.0;
    d->grad_div = d->loss_scale * d->dp_grad_scale;
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
    const np_dumpio_info *in = np_dumpio_get_info(d->io);
    snprintf(d->attr_problems, sizeof d->attr_problems, "%s", in->problems);
    if (st == NP_OK && in->has_calls && d->n_calls && !strcmp(in->source, "nprobe"))
        st = cross_check(d, arena, err);
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
    cmp_assembly_free(d->assembly);
    d->assembly = NULL;
    /* entries and calls are handed over to the pair (or freed by it) */
}
