/* probe/probe.c - the probe: turns hook events (or embedding-API calls) into
 * dump rows. Per call: level and scope decide whether the call counts; per
 * leaf: data_mode and list decide; the statistics (and crc32) are computed
 * on the training thread in one chunked pass; rows and payloads go to the HDF5
 * writer directly (sync) or through the bounded queue (async_dump). A dump
 * error stops the dump and is kept for the summary; training goes on unless
 * on_error is stop_training. */
#include <hdf5.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "probe_internal.h"

struct np_probe {
    np_probe_config *cfg;
    char framework[64], device[64], precision[16];
    int rank, world_size;
    double loss_scale;   /* of the next/current step (np_probe_set_loss_scale, STEP_BEGIN) */
    double dp_grad_scale; /* of the steps begun from now on (np_probe_set_dp_grad_scale) */
    np_h5w *w;           /* sync writer, or the one the async front owns */
    np_aw *aw;           /* NULL in sync mode */
    int closed;
    int dump_off;        /* after an error or overflow_nums reached */
    int failed;          /* a dump error happened */
    np_error error;
    int rank_selected;
    /* step state */
    int in_step, step, step_selected, file_open;
    int scope_state;     /* 0 before scope[0], 1 inside, 2 after scope[1] */
    int64_t scope_steps, scope_unreached, scope_open; /* over the step files written */
    int scope_unreached_step, scope_open_step;        /* the first of each, -1 if none */
    int64_t seq;         /* next row of /calls in this step */
    /* the call being recorded */
    np_call_rec call;
    int call_emitted;
    int64_t call_seq;
    /* embed API: the current call name (consecutive dumps share it) */
    char embed_call[NP_FMT_NAME_LEN];
    int embed_selected;
    /* embed API: the leaf names of this step (a name must be unique):
     * copies in blocks that are reused step after step, and a map over
     * them that keeps its size */
    np_arena names;
    np_strmap leaf_set;
    /* per-call buffer (hook path) */
    np_entry_rec *recs;
    const void **datas;
    size_t *nbytes;
    int nrec, caprec;
    np_stats_scratch scratch;
    /* results */
    int64_t overflows;
    int has_overflow;
    char of_call[NP_FMT_NAME_LEN], of_module[NP_FMT_NAME_LEN];
    int of_step, of_rank;
    H5E_auto2_t old_efunc;
    void *old_edata;
    /* embedding API: serialises every entry point (autograd's threads) */
    pthread_mutex_t mu;
    void *vbuf;          /* converted/gathered tensor views */
    size_t vcap;
    /* the last NP_VIEW_REUSE views (np_tensor_view.version): their keys and,
     * once computed, their statistics */
    struct view_memo {
        np_tensor_view key;
        int64_t shape[NP_MAX_DIMS], strides[NP_MAX_DIMS];
        int has_stats;
        np_entry_rec rec;
    } memo[NP_VIEW_REUSE];
    int memo_next, memo_len;
    struct view_memo *memo_fill; /* the slot of the view being dumped */
    /* overflow_check through the embedding API: the current call's leaves
     * are held until one of them holds NaN/Inf (then the whole call is
     * written, as the hook path writes it) or the call ends (then they are
     * dropped). Payloads are copied: the caller's memory may change before
     * the call ends (an in-place op's input). */
    struct pend_leaf {
        np_entry_rec rec;
        size_t off, len;
        int has_data;
    } *pend;
    int npend, cappend;
    unsigned char *arena;
    size_t arena_n, arena_cap;
    int embed_keep;      /* the current call overflowed: its leaves go out directly */
    /* the device mesh (np_probe_set_mesh) for the steps begun from now on,
     * and the one of the step in progress (its placements are checked
     * against it); ndim 0: none (the step file is format version 1) */
    np_fmt_mesh mesh, step_mesh;
    char mesh_str[3][96], step_mesh_str[3][96]; /* dims, shape, coords as written */
    /* the leaves of the step with a mesh (name -> index in pleaves), and the
     * placements given for them; those of leaves written go to the file when
     * the step ends */
    np_strmap pleaf_map;
    np_arena pnames;
    struct place_leaf {
        int ndim, emitted, placed;
        int64_t shape[NP_FMT_MAX_DIMS];
    } *pleaves;
    int npleaves, cappleaves;
    np_place_rec *places;
    int *place_leaf;
    int nplaces, capplaces;
};

#define LOCK(p) pthread_mutex_lock(&(p)->mu)
#define UNLOCK(p) pthread_mutex_unlock(&(p)->mu)

/* ---- errors -------------------------------------------------------------- */

static void fail(np_probe *p, const np_error *e)
{
    if (!p->failed) {
        p->failed = 1;
        p->error = *e;
    }
    p->dump_off = 1;
    if (!p->aw && p->w)
        np_h5w_abandon(p->w);
    p->file_open = 0;
}

/* ---- writer front ------------------------------------------------------- */

static np_status w_step_begin(np_probe *p, np_error *e)
{
    np_h5w_step_info in = {np_probe_task_name(p->cfg->task), np_probe_level_name(p->cfg->level),
                           p->framework, p->device, p->precision, p->step, p->rank,
                           p->world_size, p->loss_scale,
                           p->step_mesh_str[0], p->step_mesh_str[1], p->step_mesh_str[2],
                           p->dp_grad_scale};
    return p->aw ? np_aw_step_begin(p->aw, &in, e) : np_h5w_step_begin(p->w, &in, e);
}

static np_status w_call(np_probe *p, const np_call_rec *r, np_error *e)
{
    return p->aw ? np_aw_call(p->aw, r, e) : np_h5w_call(p->w, r, e);
}

static np_status w_entry(np_probe *p, const np_entry_rec *r, const void *d, size_t n,
                         np_error *e)
{
    return p->aw ? np_aw_entry(p->aw, r, d, n, e) : np_h5w_entry(p->w, r, d, e);
}

static np_status w_place(np_probe *p, const np_place_rec *r, np_error *e)
{
    return p->aw ? np_aw_place(p->aw, r, e) : np_h5w_place(p->w, r, e);
}

static np_status w_step_end(np_probe *p, np_error *e)
{
    np_h5w_scope sc, *scp = NULL;
    if (p->cfg->n_scope == 2) {
        /* How the range fared in this step: recorded in the file (and read
         * back by the `nprobe dump` summary, which warns). */
        memset(&sc, 0, sizeof sc);
        snprintf(sc.state, sizeof sc.state, "%s",
                 p->scope_state == 2 ? "closed" : p->scope_state == 1 ? "open" : "not reached");
        np_fmt_copy_name(sc.first, NP_FMT_NAME_LEN, p->cfg->scope[0]);
        np_fmt_copy_name(sc.last, NP_FMT_NAME_LEN, p->cfg->scope[1]);
        scp = &sc;
    }
    return p->aw ? np_aw_step_end(p->aw, scp, e) : np_h5w_step_end(p->w, scp, e);
}

static int open_file(np_probe *p)
{
    if (p->file_open)
        return 1;
    if (p->dump_off)
        return 0;
    np_error e;
    np_error_clear(&e);
    if (w_step_begin(p, &e)) {
        fail(p, &e);
        return 0;
    }
    p->file_open = 1;
    return 1;
}

/* ---- selection ---------------------------------------------------------- */

static int step_in_config(const np_probe_config *c, int step)
{
    if (c->n_steps == 0)
        return 1;
    for (int i = 0; i < c->n_steps; i++)
        if (step >= c->steps[i][0] && step <= c->steps[i][1])
            return 1;
    return 0;
}

static int level_ok(const np_probe_config *c, int is_module)
{
    return c->level == NP_LEVEL_MIX || (is_module ? c->level == NP_LEVEL_L0
                                                  : c->level == NP_LEVEL_L1);
}

/* Scope bookkeeping for every call seen; returns 1 if the call is inside. */
static int scope_enter(np_probe *p, const char *name)
{
    const np_probe_config *c = p->cfg;
    if (c->n_scope == 0)
        return 1;
    if (p->scope_state == 0 && strcmp(name, c->scope[0]) == 0)
        p->scope_state = 1;
    return p->scope_state == 1;
}

static void scope_leave(np_probe *p, const char *name)
{
    const np_probe_config *c = p->cfg;
    if (c->n_scope && p->scope_state == 1 && strcmp(name, c->scope[1]) == 0)
        p->scope_state = 2;
}

static int role_ok(const np_probe_config *c, np_role role, int backward)
{
    if (c->dm_dirs && !(c->dm_dirs & (backward ? NP_DM_BACKWARD : NP_DM_FORWARD)))
        return 0;
    if (c->dm_roles) {
        int is_out = role == NP_ROLE_OUTPUT || role == NP_ROLE_PARAMETERS_GRAD;
        if (!(c->dm_roles & (is_out ? NP_DM_OUTPUT : NP_DM_INPUT)))
            return 0;
    }
    return 1;
}

static int list_ok(const np_probe_config *c, const char *leaf)
{
    if (c->n_list == 0)
        return 1;
    for (int i = 0; i < c->n_list; i++)
        if (strstr(leaf, c->list[i]))
            return 1;
    return 0;
}

/* ---- rows ---------------------------------------------------------------- */

/* "{a}.{b}.{c}" into dst (cap bytes, NUL-terminated, cut when longer);
 * returns the length of the whole name (snprintf's, without its cost on
 * every leaf). */
static size_t join3(char *dst, size_t cap, const char *a, const char *b, const char *c)
{
    const char *part[3] = {a, b, c};
    size_t n = 0;
    for (int i = 0; i < 3; i++) {
        if (i) {
            if (n + 1 < cap)
                dst[n] = '.';
            n++;
        }
        size_t len = strlen(part[i]);
        if (n + 1 < cap)
            memcpy(dst + n, part[i], len < cap - 1 - n ? len : cap - 1 - n);
        n += len;
    }
    dst[n < cap ? n : cap - 1] = '\0';
    return n;
}

/* An np_error to pass down: only what a reader of a success looks at is
 * set (np_error_clear's memset of the whole struct costs on every row). */
static void err_reset(np_error *e)
{
    e->status = NP_OK;
    e->file[0] = e->key[0] = e->text[0] = '\0';
    e->line = e->column = 0;
}

static void leaf_name(char *dst, const char *call, np_role role, int index, const char *key)
{
    char buf[NP_FMT_NAME_LEN * 2];
    if (key)
        snprintf(buf, sizeof buf, "%s.%s.%s", call, np_role_name(role), key);
    else
        snprintf(buf, sizeof buf, "%s.%s.%d", call, np_role_name(role), index);
    np_fmt_copy_name(dst, NP_FMT_NAME_LEN, buf);
}

static int keeps_data(const np_probe_config *c)
{
    return c->task == NP_TASK_TENSOR || c->task == NP_TASK_OVERFLOW_CHECK;
}

static void fill_tensor_rec(np_probe *p, np_entry_rec *r, const np_tensor *t)
{
    np_fmt_copy_name(r->dtype, NP_FMT_DTYPE_LEN, np_dtype_name(t->dtype));
    r->ndim = t->ndim;
    memset(r->shape, 0, sizeof r->shape);
    for (int i = 0; i < t->ndim && i < NP_FMT_MAX_DIMS; i++)
        r->shape[i] = t->shape[i];
    r->numel = t->numel;
    np_probe_stats st;
    uint32_t crc = 0;
    r->has_data = (int8_t)(keeps_data(p->cfg) && t->data != NULL);
    /* The crc32 in the same chunked pass as the statistics, while each chunk
     * is in cache (also for payloads that go through the async queue: on the
     * writer thread it would read the queued copy back from memory). */
    int want_crc = p->cfg->task != NP_TASK_STATISTICS;
    np_stats_compute(&st, want_crc ? &crc : NULL, t->dtype, t->data, t->numel, &p->scratch);
    np_fmt_entry_set_stats(r, &st);
    r->crc32 = crc;
    r->requires_grad = (int8_t)(t->requires_grad != 0);
}

static void fill_scalar_rec(np_entry_rec *r, double v)
{
    np_fmt_copy_name(r->dtype, NP_FMT_DTYPE_LEN, "float64");
    r->ndim = 0;
    memset(r->shape, 0, sizeof r->shape);
    r->numel = 1;
    np_stats st = {v, v, v, fabs(v), isnan(v) ? 1 : 0, isinf(v) && v > 0 ? 1 : 0,
                   isinf(v) && v < 0 ? 1 : 0};
    np_fmt_entry_set_stats(r, &st);
    r->crc32 = 0;
    r->has_data = 0;
    r->requires_grad = 0;
}

static int grow(np_probe *p)
{
    if (p->nrec < p->caprec)
        return 1;
    int cap = p->caprec ? p->caprec * 2 : 16;
    np_entry_rec *r = realloc(p->recs, (size_t)cap * sizeof *r);
    if (r)
        p->recs = r;
    const void **d = realloc(p->datas, (size_t)cap * sizeof *d);
    if (d)
        p->datas = d;
    size_t *n = realloc(p->nbytes, (size_t)cap * sizeof *n);
    if (n)
        p->nbytes = n;
    if (!r || !d || !n)
        return 0;
    p->caprec = cap;
    return 1;
}

static void begin_call_rec(np_probe *p, const char *name, int is_module, const char *parent,
                           const char *callsite)
{
    memset(&p->call, 0, sizeof p->call);
    np_fmt_copy_name(p->call.call, NP_FMT_NAME_LEN, name);
    np_fmt_copy_name(p->call.kind, NP_FMT_KIND_LEN, is_module ? "module" : "api");
    np_fmt_copy_name(p->call.parent, NP_FMT_NAME_LEN, parent ? parent : "");
    np_fmt_copy_name(p->call.callsite, NP_FMT_SITE_LEN,
                     p->cfg->stack && callsite ? callsite : "");
    p->call_emitted = 0;
}

/* ---- placements (a step with a mesh) ---------------------------------------- */

/* Leaf `r` of a step with a mesh: its shape kept for np_probe_place's check,
 * `emitted` when its row went to the writer. Out of memory: not kept (a
 * placement given for it is then refused as for a leaf not dumped). */
static void place_note(np_probe *p, const np_entry_rec *r, int emitted)
{
    if (!p->pleaf_map.cap && np_strmap_init(&p->pleaf_map, 64) != 0)
        return;
    int i = np_strmap_get(&p->pleaf_map, r->name);
    if (i < 0) {
        if (p->npleaves == p->cappleaves) {
            int cap = p->cappleaves ? 2 * p->cappleaves : 64;
            struct place_leaf *t = realloc(p->pleaves, (size_t)cap * sizeof *t);
            if (!t)
                return;
            p->pleaves = t;
            p->cappleaves = cap;
        }
        const char *copy = np_arena_put(&p->pnames, r->name, strlen(r->name));
        if (!copy || np_strmap_put(&p->pleaf_map, copy, p->npleaves) != 0)
            return;
        i = p->npleaves++;
        memset(&p->pleaves[i], 0, sizeof p->pleaves[i]);
    }
    struct place_leaf *l = &p->pleaves[i];
    l->ndim = r->ndim;
    memcpy(l->shape, r->shape, sizeof l->shape);
    l->emitted |= emitted;
}

/* The step's placements of the leaves written, to the writer (before the
 * step ends). */
static np_status places_flush(np_probe *p, np_error *e)
{
    for (int i = 0; i < p->nplaces; i++) {
        if (!p->pleaves[p->place_leaf[i]].emitted)
            continue; /* overflow_check dropped the leaf's call */
        np_status st = w_place(p, &p->places[i], e);
        if (st)
            return st;
    }
    return NP_OK;
}

static void places_clear(np_probe *p)
{
    p->nplaces = p->npleaves = 0;
    np_arena_reset(&p->pnames);
    np_strmap_clear(&p->pleaf_map);
}

/* Write the call row (once) and the buffered/one entry row. */
static int emit_call(np_probe *p)
{
    if (p->call_emitted)
        return 1;
    if (!open_file(p))
        return 0;
    p->call.seq = p->seq;
    np_error e;
    err_reset(&e);
    if (w_call(p, &p->call, &e)) {
        fail(p, &e);
        return 0;
    }
    p->call_seq = p->seq++;
    p->call_emitted = 1;
    return 1;
}

static int emit_entry(np_probe *p, np_entry_rec *r, const void *data, size_t nbytes)
{
    if (p->dump_off || !emit_call(p))
        return 0;
    r->seq = p->call_seq;
    np_error e;
    err_reset(&e);
    if (w_entry(p, r, data, nbytes, &e)) {
        fail(p, &e);
        return 0;
    }
    if (p->step_mesh.ndim)
        place_note(p, r, 1);
    return 1;
}

static int rec_overflows(const np_entry_rec *r)
{
    if (strcmp(r->role, "kwargs") == 0)
        return 0;
    return r->nan_count > 0 || r->posinf_count > 0 || r->neginf_count > 0;
}

static void note_overflow(np_probe *p, const char *call, const char *module)
{
    p->overflows++;
    if (!p->has_overflow) {
        p->has_overflow = 1;
        np_fmt_copy_name(p->of_call, NP_FMT_NAME_LEN, call);
        np_fmt_copy_name(p->of_module, NP_FMT_NAME_LEN, module ? module : "");
        p->of_step = p->step;
        p->of_rank = p->rank;
    }
    if (p->cfg->overflow_nums > 0 && p->overflows >= p->cfg->overflow_nums)
        p->dump_off = 1; /* after this call: checked by the callers */
}

/* ---- leaf names of a step (embedding API) -------------------------------- */

/* 1 if `name` (`len` bytes) was new (now added), 0 if it is there, -1 out
 * of memory. */
static int leaves_add(np_probe *p, const char *name, size_t len)
{
    if (!p->leaf_set.cap && np_strmap_init(&p->leaf_set, 64) != 0)
        return -1;
    if (np_strmap_get(&p->leaf_set, name) >= 0)
        return 0;
    const char *copy = np_arena_put(&p->names, name, len);
    if (!copy || np_strmap_put(&p->leaf_set, copy, 1) != 0)
        return -1;
    return 1;
}

/* The step's names go; their blocks and the map's room stay for the next. */
static void leaves_clear(np_probe *p)
{
    np_arena_reset(&p->names);
    np_strmap_clear(&p->leaf_set);
    places_clear(p);
}

static void leaves_free(np_probe *p)
{
    leaves_clear(p);
    np_arena_free(&p->names);
    np_strmap_free(&p->leaf_set);
    np_arena_free(&p->pnames);
    np_strmap_free(&p->pleaf_map);
    free(p->pleaves);
    free(p->places);
    free(p->place_leaf);
}

/* ---- overflow_check through the embedding API ----------------------------- */

/* The embedded call ends: an overflowing call counts (and may stop the
 * dump: overflow_nums), the held leaves of a clean one are dropped. */
static void embed_call_end(np_probe *p)
{
    if (p->embed_keep)
        note_overflow(p, p->call.call,
                      strcmp(p->call.kind, "module") == 0 ? p->call.call : p->call.parent);
    p->embed_keep = 0;
    p->npend = 0;
    p->arena_n = 0;
}

/* Hold one leaf of the current call (its payload copied); 0 out of memory. */
static int pend_add(np_probe *p, const np_entry_rec *r, const void *data, size_t nbytes)
{
    if (p->npend == p->cappend) {
        int cap = p->cappend ? 2 * p->cappend : 16;
        struct pend_leaf *t = realloc(p->pend, (size_t)cap * sizeof *t);
        if (!t)
            return 0;
        p->pend = t;
        p->cappend = cap;
    }
    size_t need = data ? nbytes : 0;
    if (need > p->arena_cap - p->arena_n) {
        size_t cap = p->arena_cap ? p->arena_cap : (size_t)1 << 20;
        while (cap - p->arena_n < need)
            cap *= 2;
        unsigned char *a = realloc(p->arena, cap);
        if (!a)
            return 0;
        p->arena = a;
        p->arena_cap = cap;
    }
    struct pend_leaf *l = &p->pend[p->npend++];
    l->rec = *r;
    l->off = p->arena_n;
    l->len = need;
    l->has_data = data != NULL;
    if (need)
        memcpy(p->arena + p->arena_n, data, need);
    p->arena_n += need;
    return 1;
}

/* overflow_check: hold, or write the call whole once a leaf overflows. */
static void overflow_leaf(np_probe *p, np_entry_rec *r, const void *data, size_t nbytes)
{
    if (!p->embed_keep && !rec_overflows(r)) {
        if (!pend_add(p, r, data, nbytes)) {
            np_error e;
            np_error_set(&e, NP_ERR_NOMEM, NULL, r->name,
                         "overflow_check: out of memory holding the call's tensors");
            fail(p, &e);
        }
        return;
    }
    if (!p->embed_keep) {
        p->embed_keep = 1;
        for (int i = 0; i < p->npend; i++) {
            struct pend_leaf *l = &p->pend[i];
            if (!emit_entry(p, &l->rec, l->has_data ? p->arena + l->off : NULL, l->len))
                break;
        }
        p->npend = 0;
        p->arena_n = 0;
    }
    emit_entry(p, r, data, nbytes);
}

/* ---- steps --------------------------------------------------------------- */

static void end_step(np_probe *p)
{
    if (p->in_step)
        embed_call_end(p);
    if (p->in_step && p->embed_call[0]) {
        scope_leave(p, p->embed_call); /* the embedding API's last call ends here */
        p->embed_call[0] = '\0';
    }
    if (p->in_step && p->file_open) {
        np_error e;
        np_error_clear(&e);
        if (places_flush(p, &e) || w_step_end(p, &e))
            fail(p, &e);
        else if (p->cfg->n_scope == 2) {
            p->scope_steps++;
            if (p->scope_state == 0 && p->scope_unreached++ == 0)
                p->scope_unreached_step = p->step;
            if (p->scope_state == 1 && p->scope_open++ == 0)
                p->scope_open_step = p->step;
        }
    }
    p->in_step = 0;
    p->file_open = 0;
    p->embed_call[0] = '\0';
    p->memo_len = p->memo_next = 0;
    leaves_clear(p);
}

static void begin_step(np_probe *p, int step)
{
    if (p->in_step)
        end_step(p);
    p->in_step = 1;
    p->step = step;
    p->step_mesh = p->mesh;
    memcpy(p->step_mesh_str, p->mesh_str, sizeof p->step_mesh_str);
    p->seq = 0;
    p->scope_state = 0;
    p->file_open = 0;
    p->embed_call[0] = '\0';
    p->memo_len = p->memo_next = 0;
    leaves_clear(p);
    p->step_selected = p->rank_selected && !p->dump_off && step_in_config(p->cfg, step);
    if (p->step_selected && p->cfg->task != NP_TASK_OVERFLOW_CHECK) {
        open_file(p); /* replaces an earlier run's dump.h5 of this step */
    } else if (p->step_selected) {
        /* overflow_check writes the step only if it overflows: an earlier
         * run's files of this step go now, whatever this run finds. */
        np_error e;
        np_error_clear(&e);
        if (np_h5w_clear_step(p->cfg->dump_path, step, p->rank, &e))
            fail(p, &e);
    }
}

/* ---- the hook ------------------------------------------------------------ */

static void on_call_event(np_probe *p, const np_hook_event *ev)
{
    int backward = ev->kind == NP_EV_API_BACKWARD || ev->kind == NP_EV_MODULE_BACKWARD ||
                   ev->kind == NP_EV_PARAM_GRAD;
    const char *name = ev->name ? ev->name : "";
    int inside = scope_enter(p, name);
    if (inside && level_ok(p->cfg, ev->is_module)) {
        begin_call_rec(p, name, ev->is_module, ev->parent, ev->callsite);
        int overflow = 0;
        p->nrec = 0;
        for (int i = 0; i < ev->n_tensors; i++) {
            const np_hook_tensor *ht = &ev->tensors[i];
            if (!ht->t || !role_ok(p->cfg, ht->role, backward) || !grow(p))
                continue;
            np_entry_rec *r = &p->recs[p->nrec];
            leaf_name(r->name, name, ht->role, ht->index, ht->key);
            if (!list_ok(p->cfg, r->name))
                continue;
            np_fmt_copy_name(r->call, NP_FMT_NAME_LEN, name);
            np_fmt_copy_name(r->role, NP_FMT_ROLE_LEN, np_role_name(ht->role));
            fill_tensor_rec(p, r, ht->t);
            overflow |= rec_overflows(r);
            p->datas[p->nrec] = ht->t->data;
            p->nbytes[p->nrec] = np_tensor_nbytes(ht->t);
            p->nrec++;
        }
        for (int i = 0; i < ev->n_scalars; i++) {
            if (!role_ok(p->cfg, NP_ROLE_KWARGS, backward) || !grow(p))
                continue;
            np_entry_rec *r = &p->recs[p->nrec];
            leaf_name(r->name, name, NP_ROLE_KWARGS, 0, ev->scalars[i].key);
            if (!list_ok(p->cfg, r->name))
                continue;
            np_fmt_copy_name(r->call, NP_FMT_NAME_LEN, name);
            np_fmt_copy_name(r->role, NP_FMT_ROLE_LEN, "kwargs");
            fill_scalar_rec(r, ev->scalars[i].value);
            p->datas[p->nrec] = NULL;
            p->nbytes[p->nrec] = 0;
            p->nrec++;
        }
        int keep = p->nrec > 0 && (p->cfg->task != NP_TASK_OVERFLOW_CHECK || overflow);
        for (int i = 0; keep && i < p->nrec; i++)
            if (!emit_entry(p, &p->recs[i], p->datas[i], p->nbytes[i]))
                break;
        if (keep && overflow && p->cfg->task == NP_TASK_OVERFLOW_CHECK)
            note_overflow(p, name, ev->is_module ? name : ev->parent);
    }
    scope_leave(p, name);
}

static void set_loss_scale(np_probe *p, double scale)
{
    p->loss_scale = scale > 0 && isfinite(scale) ? scale : 1.0;
}

static int on_event(np_probe *p, const np_hook_event *ev)
{
    if (p->closed)
        return 0;
    switch (ev->kind) {
    case NP_EV_STEP_BEGIN:
        p->loss_scale = 1.0;
        for (int i = 0; i < ev->n_scalars; i++)
            if (ev->scalars[i].key && !strcmp(ev->scalars[i].key, "loss_scale"))
                set_loss_scale(p, ev->scalars[i].value);
        begin_step(p, ev->step);
        break;
    case NP_EV_STEP_END:
        if (!p->in_step)
            begin_step(p, ev->step);
        end_step(p);
        break;
    default:
        if (!p->in_step || ev->step != p->step)
            begin_step(p, ev->step);
        if (p->step_selected && !p->dump_off)
            on_call_event(p, ev);
        break;
    }
    return p->failed && p->cfg->stop_training ? 1 : 0;
}

int np_probe_on_event(const np_hook_event *ev, void *probe)
{
    np_probe *p = probe;
    if (!p || !ev)
        return 0;
    LOCK(p);
    int r = on_event(p, ev);
    UNLOCK(p);
    return r;
}

/* ---- embedding API --------------------------------------------------------- */

void np_probe_set_loss_scale(np_probe *p, double scale)
{
    if (!p)
        return;
    LOCK(p);
    set_loss_scale(p, scale);
    UNLOCK(p);
}

void np_probe_set_dp_grad_scale(np_probe *p, double factor)
{
    if (!p)
        return;
    LOCK(p);
    p->dp_grad_scale = factor > 0 && isfinite(factor) ? factor : 1.0;
    UNLOCK(p);
}

np_status np_probe_step_begin(np_probe *p, int step, np_error *err)
{
    if (!p)
        return np_error_set(err, NP_ERR_ARG, NULL, NULL, "no probe");
    if (step < 0)
        return np_error_set(err, NP_ERR_ARG, NULL, NULL, "step %d: expected >= 0", step);
    LOCK(p);
    np_status st = NP_OK;
    if (p->closed)
        st = np_error_set(err, NP_ERR_ARG, NULL, NULL, "the probe is closed");
    else
        begin_step(p, step);
    UNLOCK(p);
    return st;
}

np_status np_probe_step_end(np_probe *p, np_error *err)
{
    if (!p)
        return np_error_set(err, NP_ERR_ARG, NULL, NULL, "no probe");
    LOCK(p);
    np_status st = NP_OK;
    if (p->closed)
        st = np_error_set(err, NP_ERR_ARG, NULL, NULL, "the probe is closed");
    else {
        end_step(p);
        if (p->failed && p->cfg->stop_training)
            st = np_error_set(err, p->error.status, p->error.file, p->error.key, "%s",
                              p->error.text);
    }
    UNLOCK(p);
    return st;
}

/* Position on call `call` for the embedding API; 1 if it is selected. */
static void embed_switch(np_probe *p, const char *call, const char *parent,
                         const char *callsite)
{
    embed_call_end(p);
    if (p->embed_call[0])
        scope_leave(p, p->embed_call);
    np_fmt_copy_name(p->embed_call, NP_FMT_NAME_LEN, call);
    int is_module = strncmp(call, "Module.", 7) == 0;
    p->embed_selected = scope_enter(p, call) && level_ok(p->cfg, is_module);
    begin_call_rec(p, call, is_module, parent, callsite);
}

static int embed_call(np_probe *p, const char *call, np_role role)
{
    if (strcmp(call, p->embed_call) != 0)
        embed_switch(p, call, NULL, NULL);
    (void)role;
    return p->embed_selected;
}

static np_status check_role(np_role role, const char *call, np_error *err)
{
    if ((unsigned)role >= NP_ROLE_COUNT || role == NP_ROLE_KWARGS)
        return np_error_set(err, NP_ERR_ARG, NULL, call,
                            "role: expected input, output, parameters or parameters_grad "
                            "(scalars go through np_probe_dump_scalar)");
    return NP_OK;
}

/* The statistics a caller computed, as an entry row (no payload, no crc). */
static void fill_stats_rec(np_entry_rec *r, const np_leaf_stats *s)
{
    np_fmt_copy_name(r->dtype, NP_FMT_DTYPE_LEN, np_dtype_name(s->dtype));
    r->ndim = s->ndim;
    memset(r->shape, 0, sizeof r->shape);
    r->numel = 1;
    for (int i = 0; i < s->ndim && i < NP_FMT_MAX_DIMS; i++) {
        r->shape[i] = s->shape[i];
        r->numel *= s->shape[i];
    }
    np_fmt_entry_set_stats(r, &s->stats);
    r->crc32 = 0;
    r->has_data = 0;
    r->requires_grad = (int8_t)(s->requires_grad != 0);
}

/* ---- reuse of a view's statistics (np_tensor_view.version) ---------------- */

static int memo_usable(const np_probe *p, const np_tensor_view *v)
{
    return v && v->size >= sizeof *v && v->version >= 0 && v->ndim >= 0 &&
           v->ndim <= NP_MAX_DIMS && !keeps_data(p->cfg);
}

static int memo_same(const struct view_memo *m, const np_tensor_view *v)
{
    if (m->key.data != v->data || m->key.byte_offset != v->byte_offset ||
        m->key.dtype != v->dtype || m->key.ndim != v->ndim || m->key.version != v->version ||
        (m->key.strides == NULL) != (v->strides == NULL))
        return 0;
    for (int d = 0; d < v->ndim; d++)
        if (m->shape[d] != v->shape[d] || (v->strides && m->strides[d] != v->strides[d]))
            return 0;
    return 1;
}

/* The memo of an earlier view like `v` that has statistics, or NULL. */
static const struct view_memo *memo_find(const np_probe *p, const np_tensor_view *v)
{
    for (int i = 0; i < p->memo_len; i++)
        if (p->memo[i].has_stats && memo_same(&p->memo[i], v))
            return &p->memo[i];
    return NULL;
}

/* The view a leaf's statistics are read from, and its memo key: `v`
 * itself, or, for the statistics task, the contiguous block `v` is a
 * permutation of (probe_view_block: a transpose, permute or reshape of a
 * contiguous tensor), read in memory order. The recorded max, min and
 * counts are those of `v`; mean and norm are float64 sums of the same
 * elements in another order (docs/TORCH.md, "Statistics of views"). Views
 * of one block at one version then share one computation. The md5 task
 * hashes the elements in the view's order and reads the view as it is. */
static const np_tensor_view *stats_view(const np_probe *p, const np_tensor_view *v,
                                        probe_block_view *b)
{
    if (v && p->cfg->task == NP_TASK_STATISTICS && probe_view_block(v, b))
        return &b->v;
    return v;
}

/* A record's shape set to view `v`'s. */
static void rec_shape(np_entry_rec *r, const np_tensor_view *v)
{
    r->ndim = v->ndim;
    memset(r->shape, 0, sizeof r->shape);
    for (int i = 0; i < v->ndim && i < NP_FMT_MAX_DIMS; i++)
        r->shape[i] = v->shape[i];
}

/* Every view call takes the next slot (the caller keeps the last
 * NP_VIEW_REUSE tensors alive: the slots never outlive them). */
static struct view_memo *memo_push(np_probe *p, const np_tensor_view *v)
{
    struct view_memo *m = &p->memo[p->memo_next];
    p->memo_next = (p->memo_next + 1) % NP_VIEW_REUSE;
    if (p->memo_len < NP_VIEW_REUSE)
        p->memo_len++;
    m->key = *v;
    for (int d = 0; d < v->ndim; d++) {
        m->shape[d] = v->shape[d];
        m->strides[d] = v->strides ? v->strides[d] : 0;
    }
    m->has_stats = 0;
    return m;
}

/* One leaf: a tensor `t`, caller statistics `ls`, or (both NULL) a scalar. */
static np_status embed_leaf(np_probe *p, const char *call, np_role role, const char *key,
                            const np_tensor *t, const np_tensor_view *v,
                            const np_leaf_stats *ls, double scalar, np_error *err)
{
    if (p->closed)
        return np_error_set(err, NP_ERR_ARG, NULL, NULL, "the probe is closed");
    if (!call || !call[0] || !key || !key[0])
        return np_error_set(err, NP_ERR_ARG, NULL, call, "a call name and a key are needed");
    if (strchr(call, '/') || strchr(key, '/'))
        return np_error_set(err, NP_ERR_ARG, NULL, call, "names must not contain '/'");
    if (!p->in_step)
        return np_error_set(err, NP_ERR_ARG, NULL, call,
                            "no step has begun (call np_probe_step_begin first)");
    if (t && (t->numel > 0 && !t->data))
        return np_error_set(err, NP_ERR_ARG, NULL, call, "tensor without data");
    if (!p->step_selected || p->dump_off)
        return NP_OK; /* (overflow_nums stops the dump when an overflowing call ends) */
    /* A leaf name is a dataset name under /data and a row of /entries: it
     * must be unique in the step and fit the table (255 bytes) uncut, or
     * the step would fail later with a misleading HDF5 error. Refused here,
     * the rest of the step goes on. */
    char full[3 * NP_FMT_NAME_LEN];
    {
        size_t len = join3(full, sizeof full, call, np_role_name(role), key);
        if (len >= NP_FMT_NAME_LEN)
            return np_error_set(err, NP_ERR_ARG, NULL, full,
                                "tensor %.80s...: leaf name of %zu bytes, the most is %d "
                                "(\"{call}.{role}.{key}\" must fit the dump table uncut; "
                                "refused, the step goes on)",
                                full, len, NP_FMT_NAME_LEN - 1);
        int r = leaves_add(p, full, len);
        if (r < 0)
            return np_error_set(err, NP_ERR_NOMEM, NULL, full, "out of memory");
        if (r == 0)
            return np_error_set(err, NP_ERR_ARG, NULL, full,
                                "tensor %s was already dumped in step %d: a leaf name must "
                                "be unique within a step (refused, the step goes on)",
                                full, p->step);
    }
    int selected = embed_call(p, call, role);
    int backward = role == NP_ROLE_PARAMETERS_GRAD || strstr(call, ".backward") != NULL;
    if (!selected || !role_ok(p->cfg, role, backward))
        return NP_OK;
    np_entry_rec r;
    np_fmt_copy_name(r.name, NP_FMT_NAME_LEN, full); /* fits: checked above */
    if (!list_ok(p->cfg, r.name))
        return NP_OK;
    np_fmt_copy_name(r.call, NP_FMT_NAME_LEN, call);
    np_fmt_copy_name(r.role, NP_FMT_ROLE_LEN, np_role_name(role));
    np_tensor vt;
    probe_block_view blk;
    const np_tensor_view *sv = stats_view(p, v, &blk);
    const struct view_memo *hit = memo_usable(p, sv) ? memo_find(p, sv) : NULL;
    if (v && !hit) {
        np_status vs = probe_view_tensor(&vt, sv, &p->vbuf, &p->vcap, r.name, err);
        if (vs)
            return vs;
        t = &vt;
    }
    if (hit) {
        np_entry_rec keep = r;
        r = hit->rec;
        memcpy(r.name, keep.name, sizeof r.name);
        memcpy(r.call, keep.call, sizeof r.call);
        memcpy(r.role, keep.role, sizeof r.role);
        r.requires_grad = (int8_t)(v->requires_grad != 0);
        t = NULL;
    } else if (t)
        fill_tensor_rec(p, &r, t);
    else if (ls)
        fill_stats_rec(&r, ls);
    else
        fill_scalar_rec(&r, scalar);
    if (v && p->memo_fill) {
        p->memo_fill->rec = r;
        p->memo_fill->has_stats = 1;
    }
    if (sv != v)
        rec_shape(&r, v); /* read as its block: recorded with its own shape */
    if (p->step_mesh.ndim)
        place_note(p, &r, 0);
    if (p->cfg->task == NP_TASK_OVERFLOW_CHECK)
        overflow_leaf(p, &r, t ? t->data : NULL, t ? np_tensor_nbytes(t) : 0);
    else
        emit_entry(p, &r, t ? t->data : NULL, t ? np_tensor_nbytes(t) : 0);
    if (p->failed && p->cfg->stop_training)
        return np_error_set(err, p->error.status, p->error.file, p->error.key, "%s",
                            p->error.text);
    return NP_OK;
}

/* The checks every leaf entry point shares: a probe, a role that is not
 * kwargs (scalars have their own entry point), and the leaf itself. */
static np_status leaf_args_ok(const np_probe *p, const char *call, np_role role,
                              const void *leaf, const char *what, np_error *err)
{
    if (!p)
        return np_error_set(err, NP_ERR_ARG, NULL, call, "no probe");
    if (check_role(role, call, err))
        return NP_ERR_ARG;
    if (!leaf)
        return np_error_set(err, NP_ERR_ARG, NULL, call, "no %s given", what);
    return NP_OK;
}

np_status np_probe_dump(np_probe *p, const char *call, np_role role, const char *key,
                        const np_tensor *t, np_error *err)
{
    np_status st = leaf_args_ok(p, call, role, t, "tensor", err);
    if (st)
        return st;
    LOCK(p);
    st = embed_leaf(p, call, role, key, t, NULL, NULL, 0.0, err);
    UNLOCK(p);
    return st;
}

np_status np_probe_dump_scalar(np_probe *p, const char *call, const char *key, double value,
                               np_error *err)
{
    if (!p)
        return np_error_set(err, NP_ERR_ARG, NULL, call, "no probe");
    LOCK(p);
    np_status st = embed_leaf(p, call, NP_ROLE_KWARGS, key, NULL, NULL, NULL, value, err);
    UNLOCK(p);
    return st;
}

np_status np_probe_dump_view(np_probe *p, const char *call, np_role role, const char *key,
                             const np_tensor_view *v, np_error *err)
{
    np_status st = leaf_args_ok(p, call, role, v, "tensor view", err);
    if (st)
        return st;
    LOCK(p);
    probe_block_view blk;
    const np_tensor_view *sv = stats_view(p, v, &blk);
    struct view_memo *m = memo_usable(p, sv) ? memo_push(p, sv) : NULL;
    p->memo_fill = m;
    st = embed_leaf(p, call, role, key, NULL, v, NULL, 0.0, err);
    p->memo_fill = NULL;
    UNLOCK(p);
    return st;
}

np_status np_probe_dump_stats(np_probe *p, const char *call, np_role role, const char *key,
                              const np_leaf_stats *s, np_error *err)
{
    np_status st = leaf_args_ok(p, call, role, s, "leaf statistics", err);
    if (st)
        return st;
    if (s->size < sizeof *s || s->ndim < 0 || s->ndim > NP_MAX_DIMS ||
        (s->ndim > 0 && !s->shape) || (unsigned)s->dtype >= NP_DTYPE_COUNT)
        return np_error_set(err, NP_ERR_ARG, NULL, call,
                            "leaf statistics: expected size = sizeof(np_leaf_stats), a known "
                            "dtype and 0..%d dimensions with a shape", NP_MAX_DIMS);
    LOCK(p);
    st = embed_leaf(p, call, role, key, NULL, NULL, s, 0.0, err);
    UNLOCK(p);
    return st;
}

/* np_probe_leaf is filled from packed bytes by bindings: its layout is fixed. */
_Static_assert(sizeof(np_probe_leaf) == 176 && offsetof(np_probe_leaf, data) == 24 &&
                   offsetof(np_probe_leaf, value) == 40 && offsetof(np_probe_leaf, shape) == 48 &&
                   offsetof(np_probe_leaf, strides) == 112,
               "np_probe_leaf layout");

/* One leaf of np_probe_dump_call (the lock is held). */
static np_status call_leaf(np_probe *p, const char *call, const np_probe_leaf *l,
                           const char *names, np_error *err)
{
    char idx[16];
    const char *key = idx;
    if (l->name_off >= 0)
        key = names ? names + l->name_off : NULL;
    else
        snprintf(idx, sizeof idx, "%d", (int)l->index);
    if (l->role == NP_ROLE_KWARGS)
        return embed_leaf(p, call, NP_ROLE_KWARGS, key, NULL, NULL, NULL, l->value, err);
    if (check_role((np_role)l->role, call, err))
        return NP_ERR_ARG;
    np_tensor_view v = {sizeof v, (np_dtype)l->dtype, l->ndim, l->shape, l->strides, l->data,
                        0, l->requires_grad, l->version};
    probe_block_view blk;
    const np_tensor_view *sv = stats_view(p, &v, &blk);
    struct view_memo *m = memo_usable(p, sv) ? memo_push(p, sv) : NULL;
    p->memo_fill = m;
    np_status st = embed_leaf(p, call, (np_role)l->role, key, NULL, &v, NULL, 0.0, err);
    p->memo_fill = NULL;
    return st;
}

np_status np_probe_dump_call(np_probe *p, const char *call, const char *parent,
                             const char *callsite, const np_probe_leaf *leaves, int n,
                             const char *names, int *refused, np_error *err)
{
    if (refused)
        *refused = 0;
    if (n > 0 && !leaves)
        return np_error_set(err, NP_ERR_ARG, NULL, call, "no leaves given");
    np_status first = np_probe_call_begin(p, call, parent, callsite, err);
    if (first)
        return first;
    LOCK(p);
    for (int i = 0; i < n; i++) {
        np_error e;
        err_reset(&e);
        np_status st = call_leaf(p, call, &leaves[i], names, &e);
        if (st == NP_OK)
            continue;
        if (refused)
            (*refused)++;
        if (!first) {
            first = st;
            if (err)
                *err = e;
        }
    }
    UNLOCK(p);
    return first;
}

np_status np_probe_call_begin(np_probe *p, const char *call, const char *parent,
                              const char *callsite, np_error *err)
{
    if (!p)
        return np_error_set(err, NP_ERR_ARG, NULL, call, "no probe");
    if (!call || !call[0])
        return np_error_set(err, NP_ERR_ARG, NULL, NULL, "a call name is needed");
    LOCK(p);
    np_status st = NP_OK;
    if (p->closed)
        st = np_error_set(err, NP_ERR_ARG, NULL, call, "the probe is closed");
    else if (!p->in_step)
        st = np_error_set(err, NP_ERR_ARG, NULL, call,
                          "no step has begun (call np_probe_step_begin first)");
    else
        embed_switch(p, call, parent, callsite);
    UNLOCK(p);
    return st;
}

static void apply_meta(np_probe *p, const np_probe_meta *meta)
{
    snprintf(p->framework, sizeof p->framework, "%s",
             meta && meta->framework ? meta->framework : "nprobe-runtime");
    snprintf(p->device, sizeof p->device, "%s", meta && meta->device ? meta->device : "cpu");
    snprintf(p->precision, sizeof p->precision, "%s",
             meta && meta->precision ? meta->precision : "fp32");
    p->rank = meta && meta->rank > 0 ? meta->rank : 0;
    p->world_size = meta && meta->world_size > 0 ? meta->world_size : 1;
    p->rank_selected = p->cfg->n_ranks == 0;
    for (int i = 0; i < p->cfg->n_ranks; i++)
        p->rank_selected |= p->cfg->ranks[i] == p->rank;
}

np_status np_probe_set_meta(np_probe *p, const np_probe_meta *meta, np_error *err)
{
    if (!p)
        return np_error_set(err, NP_ERR_ARG, NULL, NULL, "no probe");
    if (meta && meta->rank < 0)
        return np_error_set(err, NP_ERR_ARG, NULL, NULL, "rank %d: expected >= 0", meta->rank);
    LOCK(p);
    apply_meta(p, meta);
    UNLOCK(p);
    return NP_OK;
}

/* ---- the mesh and placements (format version 2) ----------------------------------- */

/* Why dimension name `s` cannot be written (NULL: it can). */
static const char *mesh_name_problem(const char *s)
{
    if (!s || !s[0])
        return "is empty";
    if (strlen(s) > 15)
        return "is longer than 15 bytes";
    for (const char *c = s; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
              (*c >= '0' && *c <= '9') || *c == '_'))
            return "holds a character other than a letter, a digit or '_'";
    return NULL;
}

static np_status mesh_check(const np_probe *p, int ndim, const char *const *dim_names,
                            const int64_t *shape, const int64_t *coords, np_error *err)
{
    if (ndim < 0 || ndim > NP_FMT_MESH_MAX)
        return np_error_set(err, NP_ERR_ARG, NULL, "ndim",
                            "mesh: ndim %d, expected 0 (no mesh) to %d", ndim, NP_FMT_MESH_MAX);
    if (ndim > 0 && (!dim_names || !shape || !coords))
        return np_error_set(err, NP_ERR_ARG, NULL, NULL,
                            "mesh: dim_names, shape and coords are needed");
    int64_t size = 1;
    for (int k = 0; k < ndim; k++) {
        const char *why = mesh_name_problem(dim_names[k]);
        if (why)
            return np_error_set(err, NP_ERR_ARG, NULL, "dim_names",
                                "mesh: dimension %d's name '%s' %s", k,
                                dim_names[k] ? dim_names[k] : "", why);
        for (int j = 0; j < k; j++)
            if (!strcmp(dim_names[j], dim_names[k]))
                return np_error_set(err, NP_ERR_ARG, NULL, "dim_names",
                                    "mesh: dimension name '%s' given twice", dim_names[k]);
        if (shape[k] < 1 || shape[k] > (int64_t)1 << 30)
            return np_error_set(err, NP_ERR_ARG, NULL, "shape",
                                "mesh: dimension %s has size %lld (expected 1 or more)",
                                dim_names[k], (long long)shape[k]);
        if (coords[k] < 0 || coords[k] >= shape[k])
            return np_error_set(err, NP_ERR_ARG, NULL, "coords",
                                "mesh: coordinate %lld on dimension %s is outside 0..%lld",
                                (long long)coords[k], dim_names[k], (long long)shape[k] - 1);
        if (strcmp(dim_names[k], NP_FMT_MESH_MB) != 0) /* micro-batches: in time */
            size *= shape[k];
    }
    if (ndim > 0 && size != p->world_size)
        return np_error_set(err, NP_ERR_ARG, NULL, "shape",
                            "mesh: its shape holds %lld ranks, the world size is %d (set the "
                            "rank and world size with np_probe_set_meta first)",
                            (long long)size, p->world_size);
    return NP_OK;
}

np_status np_probe_set_mesh(np_probe *p, int ndim, const char *const *dim_names,
                            const int64_t *shape, const int64_t *coords, np_error *err)
{
    if (!p)
        return np_error_set(err, NP_ERR_ARG, NULL, NULL, "no probe");
    LOCK(p);
    np_status st = mesh_check(p, ndim, dim_names, shape, coords, err);
    if (st == NP_OK) {
        memset(&p->mesh, 0, sizeof p->mesh);
        memset(p->mesh_str, 0, sizeof p->mesh_str);
        p->mesh.ndim = ndim;
        for (int k = 0; k < ndim; k++) {
            snprintf(p->mesh.dims[k], sizeof p->mesh.dims[k], "%s", dim_names[k]);
            p->mesh.shape[k] = shape[k];
            p->mesh.coords[k] = coords[k];
            const char *sep = k ? "," : "";
            size_t n0 = strlen(p->mesh_str[0]), n1 = strlen(p->mesh_str[1]),
                   n2 = strlen(p->mesh_str[2]);
            snprintf(p->mesh_str[0] + n0, sizeof p->mesh_str[0] - n0, "%s%s", sep, dim_names[k]);
            snprintf(p->mesh_str[1] + n1, sizeof p->mesh_str[1] - n1, "%s%lld", sep,
                     (long long)shape[k]);
            snprintf(p->mesh_str[2] + n2, sizeof p->mesh_str[2] - n2, "%s%lld", sep,
                     (long long)coords[k]);
        }
    }
    UNLOCK(p);
    return st;
}

/* np_probe_place with the lock held. */
static np_status place_locked(np_probe *p, const char *call, np_role role, const char *key,
                              const np_place_rec *rec, np_error *err)
{
    if (p->closed)
        return np_error_set(err, NP_ERR_ARG, NULL, NULL, "the probe is closed");
    if (!p->in_step)
        return np_error_set(err, NP_ERR_ARG, NULL, call,
                            "no step has begun (call np_probe_step_begin first)");
    if (!p->step_selected || p->dump_off)
        return NP_OK; /* nothing of this step is written */
    char full[3 * NP_FMT_NAME_LEN];
    if (join3(full, sizeof full, call, np_role_name(role), key) >= NP_FMT_NAME_LEN)
        return np_error_set(err, NP_ERR_ARG, NULL, full, "placement of %.80s...: no leaf has "
                            "so long a name", full);
    if (p->step_mesh.ndim == 0)
        return np_error_set(err, NP_ERR_ARG, NULL, full,
                            "placement of '%s': step %d has no mesh (call np_probe_set_mesh "
                            "before the step begins)", full, p->step);
    int i = p->pleaf_map.cap ? np_strmap_get(&p->pleaf_map, full) : -1;
    if (i < 0) {
        if (p->leaf_set.cap && np_strmap_get(&p->leaf_set, full) >= 0)
            return NP_OK; /* dumped but not selected (level, scope, list, data_mode) */
        int backward = role == NP_ROLE_PARAMETERS_GRAD || strstr(call, ".backward") != NULL;
        if (p->cfg->n_scope || p->cfg->task == NP_TASK_OVERFLOW_CHECK ||
            !level_ok(p->cfg, strncmp(call, "Module.", 7) == 0) ||
            !role_ok(p->cfg, role, backward) || !list_ok(p->cfg, full))
            return NP_OK; /* the config does not select it, or overflow_check dropped its
                           * call (a hook's leaf: never dumped) */
        return np_error_set(err, NP_ERR_ARG, NULL, full,
                            "placement of '%s': no such tensor was dumped in step %d "
                            "(np_probe_place follows the np_probe_dump* of its leaf)", full,
                            p->step);
    }
    if (p->pleaves[i].placed)
        return np_error_set(err, NP_ERR_ARG, NULL, full,
                            "placement of '%s': given twice in step %d", full, p->step);
    np_place_rec row = *rec;
    np_fmt_copy_name(row.name, NP_FMT_NAME_LEN, full);
    char why[600];
    if (np_fmt_place_problem(&p->step_mesh, &row, p->pleaves[i].ndim, p->pleaves[i].shape,
                             why, sizeof why))
        return np_error_set(err, NP_ERR_ARG, NULL, full, "%s (refused, the step goes on)", why);
    if (p->nplaces == p->capplaces) {
        int cap = p->capplaces ? 2 * p->capplaces : 64;
        np_place_rec *t = realloc(p->places, (size_t)cap * sizeof *t);
        if (t)
            p->places = t;
        int *u = realloc(p->place_leaf, (size_t)cap * sizeof *u);
        if (u)
            p->place_leaf = u;
        if (!t || !u)
            return np_error_set(err, NP_ERR_NOMEM, NULL, full, "out of memory");
        p->capplaces = cap;
    }
    p->places[p->nplaces] = row;
    p->place_leaf[p->nplaces++] = i;
    p->pleaves[i].placed = 1;
    return NP_OK;
}

np_status np_probe_place(np_probe *p, const char *call, np_role role, const char *key,
                         const np_place_rec *rec, np_error *err)
{
    np_status st = leaf_args_ok(p, call, role, rec, "placement", err);
    if (st)
        return st;
    if (!call[0] || !key || !key[0])
        return np_error_set(err, NP_ERR_ARG, NULL, call, "a call name and a key are needed");
    LOCK(p);
    st = place_locked(p, call, role, key, rec, err);
    UNLOCK(p);
    return st;
}

int np_probe_selects(np_probe *p, int step)
{
    if (!p)
        return 0;
    LOCK(p);
    int r = 0;
    if (!p->closed && p->rank_selected && !p->dump_off && step >= 0 &&
        step_in_config(p->cfg, step))
        r = (level_ok(p->cfg, 0) ? NP_SELECT_API : 0) |
            (level_ok(p->cfg, 1) ? NP_SELECT_MODULE : 0) |
            (p->cfg->stack ? NP_SELECT_CALLSITE : 0);
    UNLOCK(p);
    return r;
}

np_probe_task np_probe_task_of(np_probe *p)
{
    return p ? p->cfg->task : NP_TASK_STATISTICS;
}

/* ---- open / close -------------------------------------------------------------- */

np_status np_probe_open_config(np_probe **out, const np_probe_config *cfg,
                               const np_probe_meta *meta, np_error *err)
{
    *out = NULL;
    np_probe *p = calloc(1, sizeof *p);
    if (!p || !(p->cfg = np_probe_config_dup(cfg))) {
        free(p);
        return np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "cannot allocate the probe");
    }
    apply_meta(p, meta);
    p->loss_scale = p->dp_grad_scale = 1.0;
    p->scope_unreached_step = p->scope_open_step = -1;
    np_status st = np_h5w_new(&p->w, p->cfg->dump_path, p->cfg->compression, err);
    if (st == NP_OK && p->cfg->async_dump) {
        st = np_aw_new(&p->aw, p->w, (size_t)p->cfg->queue_mb << 20, err);
        if (st)
            np_h5w_free(p->w);
        p->w = NULL;
    }
    if (st) {
        np_probe_config_free(p->cfg);
        free(p);
        return st;
    }
    /* A file size limit must give an error, not kill the program. */
    struct sigaction sa;
    if (sigaction(SIGXFSZ, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL) {
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_IGN;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGXFSZ, &sa, NULL);
    }
    H5Eget_auto2(H5E_DEFAULT, &p->old_efunc, &p->old_edata);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    pthread_mutex_init(&p->mu, NULL);
    *out = p;
    return NP_OK;
}

np_status np_probe_open(np_probe **out, const char *config_path, const np_probe_meta *meta,
                        np_error *err)
{
    *out = NULL;
    np_probe_config *cfg;
    np_status st = np_probe_config_load(&cfg, config_path, err);
    if (st)
        return st;
    st = np_probe_open_config(out, cfg, meta, err);
    np_probe_config_free(cfg);
    return st;
}

np_status np_probe_open_json(np_probe **out, const char *json_text, const np_probe_meta *meta,
                             np_error *err)
{
    *out = NULL;
    np_probe_config *cfg;
    np_status st = np_probe_config_parse(&cfg, json_text, NULL, err);
    if (st)
        return st;
    st = np_probe_open_config(out, cfg, meta, err);
    np_probe_config_free(cfg);
    return st;
}

static np_status probe_close(np_probe *p, np_probe_summary *out, np_error *err);

np_status np_probe_close(np_probe *p, np_probe_summary *out, np_error *err)
{
    if (!p)
        return NP_OK;
    LOCK(p);
    np_status st = probe_close(p, out, err);
    UNLOCK(p);
    return st;
}

static np_status probe_close(np_probe *p, np_probe_summary *out, np_error *err)
{
    if (!p->closed) {
        end_step(p);
        np_error e;
        np_error_clear(&e);
        if (p->aw) {
            p->w = np_aw_stop(p->aw, &e);
            p->aw = NULL;
            if (e.status)
                fail(p, &e);
        }
        if (p->w)
            np_h5w_abandon(p->w);
        p->closed = 1;
        H5Eset_auto2(H5E_DEFAULT, p->old_efunc, p->old_edata);
    }
    if (out) {
        memset(out, 0, sizeof *out);
        np_h5w_totals t = {0, 0, 0, 0, 0};
        if (p->w)
            np_h5w_totals_get(p->w, &t);
        out->steps = out->files = t.files;
        out->ranks = t.files > 0 ? 1 : 0;
        out->calls = t.calls;
        out->tensors = t.entries;
        out->data_bytes = t.data_bytes;
        out->bytes = t.bytes;
        out->overflows = p->overflows;
        out->has_overflow = p->has_overflow;
        memcpy(out->overflow_call, p->of_call, sizeof out->overflow_call);
        memcpy(out->overflow_module, p->of_module, sizeof out->overflow_module);
        out->overflow_step = p->of_step;
        out->overflow_rank = p->of_rank;
        out->scope_steps = p->scope_steps;
        out->scope_unreached = p->scope_unreached;
        out->scope_open = p->scope_open;
        out->scope_unreached_step = p->scope_unreached_step;
        out->scope_open_step = p->scope_open_step;
        if (p->cfg->n_scope == 2) {
            np_fmt_copy_name(out->scope_first, NP_FMT_NAME_LEN, p->cfg->scope[0]);
            np_fmt_copy_name(out->scope_last, NP_FMT_NAME_LEN, p->cfg->scope[1]);
        }
        out->error = p->error;
    }
    if (p->failed) {
        np_error_set(err, p->error.status, p->error.file, p->error.key, "%s", p->error.text);
        return p->error.status;
    }
    return NP_OK;
}

void np_probe_abandon(np_probe *p)
{
    if (!p)
        return;
    LOCK(p);
    if (!p->closed && p->in_step) {
        embed_call_end(p);
        np_error e;
        np_error_clear(&e);
        if (p->aw) {
            /* the queued rows are written first (the writer thread drains) */
            p->w = np_aw_stop(p->aw, &e);
            p->aw = NULL;
            if (e.status)
                fail(p, &e);
        }
        if (p->w && p->file_open && !p->failed && np_h5w_flush(p->w, &e))
            fail(p, &e);
        if (p->w)
            np_h5w_abandon(p->w);
        p->in_step = 0;
        p->file_open = 0;
        p->embed_call[0] = '\0';
        p->memo_len = p->memo_next = 0;
        leaves_clear(p);
    }
    UNLOCK(p);
}

void np_probe_free(np_probe *p)
{
    if (!p)
        return;
    np_probe_close(p, NULL, NULL);
    np_h5w_free(p->w);
    np_probe_config_free(p->cfg);
    free(p->recs);
    free(p->datas);
    free(p->nbytes);
    leaves_free(p);
    np_stats_scratch_free(&p->scratch);
    free(p->vbuf);
    free(p->pend);
    free(p->arena);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
