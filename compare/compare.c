/* compare/compare.c - np_cmp_run: resolve each side (dump root, step dir,
 * rank dir or one file), pair steps and ranks by number, and compare each
 * pair of files: match the leaves, stream the payload metrics, give the
 * verdicts and walk the calls for the culprit. Problems of one side of one
 * step/rank become issues; the rest is still compared. */
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"

/* ---- names of enums ------------------------------------------------------- */

const char *np_cmp_verdict_name(np_cmp_verdict v)
{
    static const char *const n[] = {"pass", "warning", "error"};
    return (unsigned)v < 3 ? n[v] : "?";
}

const char *np_cmp_match_name(np_cmp_match m)
{
    static const char *const n[] = {"exact", "fuzzy", "mapping", "cmp-only", "bench-only"};
    return (unsigned)m < 5 ? n[m] : "?";
}

const char *np_cmp_mode_name(np_cmp_mode m)
{
    static const char *const n[] = {"tensor", "statistics", "md5"};
    return (unsigned)m < 3 ? n[m] : "?";
}

const char *np_cmp_call_status_name(np_cmp_call_status s)
{
    static const char *const n[] = {"pass", "culprit", "propagated", "contains-culprit"};
    return (unsigned)s < 4 ? n[s] : "?";
}

void np_cmp_options_init(np_cmp_options *o)
{
    memset(o, 0, sizeof *o);
    o->step = o->rank = -1;
    o->atol = o->rtol = o->cos = NAN;
    o->rows_per_sheet = 1000000;
}

/* ---- one pair of files ------------------------------------------------------ */

/* Gradients carry their step's loss scale (root attribute loss_scale): their
 * statistics are divided by it here, their payloads as they are read
 * (cmp_payload_metrics). */
static void unscale_grads(cmp_dump *d)
{
    if (d->loss_scale == 1.0)
        return;
    double f = 1.0 / d->loss_scale;
    for (size_t i = 0; i < d->n_entries; i++) {
        np_cmp_side *e = &d->entries[i];
        if (!cmp_side_is_grad(e))
            continue;
        e->max *= f;
        e->min *= f;
        e->mean *= f;
        e->norm *= f;
    }
}

static void note(np_cmp_pair *p, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void note(np_cmp_pair *p, const char *fmt, ...)
{
    size_t len = strlen(p->notes);
    if (len + 2 >= sizeof p->notes)
        return;
    if (len) {
        p->notes[len++] = ' ';
        p->notes[len] = '\0';
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->notes + len, sizeof p->notes - len, fmt, ap);
    va_end(ap);
}

/* Execution order: seq, then the order of first appearance (kept in
 * worst_row while sorting). */
static int cmp_call_seq(const void *x, const void *y)
{
    const np_cmp_call *a = x, *b = y;
    if (a->seq != b->seq)
        return a->seq < b->seq ? -1 : 1;
    return a->worst_row < b->worst_row ? -1 : a->worst_row > b->worst_row;
}

/* Append a call to p->calls (capacity *cap); 0 ok, -1 OOM. */
static int push_call(np_cmp_pair *p, size_t *cap, np_cmp_call c)
{
    if (p->n_calls == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        np_cmp_call *v = realloc(p->calls, (nc + 1) * sizeof *v);
        if (!v)
            return -1;
        p->calls = v;
        *cap = nc;
    }
    c.worst_row = (int)p->n_calls;
    p->calls[p->n_calls++] = c;
    return 0;
}

static np_cmp_call module_or_api(const char *name, int64_t seq)
{
    return (np_cmp_call){.name = name, .kind = strncmp(name, "Module.", 7) == 0 ? "module" : "api",
                         .parent = "", .callsite = "", .seq = seq};
}

/* p->calls in execution order: the cmp side's /calls, then calls named by
 * its entries only, sorted by seq; then calls of bench-only rows (from the
 * bench side's /calls when it has them) at the end. Every row gets its
 * call_index. */
static np_status build_calls(np_cmp_pair *p, const cmp_dump *bd, const cmp_dump *cd, np_error *err)
{
    size_t cap = 0;
    np_strmap m = {0}, bcalls = {0};
    np_status st = NP_OK;
    p->n_calls = 0;
    if (np_strmap_init(&m, cd->n_calls + 16) != 0)
        goto oom;
    for (size_t k = 0; k < cd->n_calls; k++) {
        const cmp_call_rec *r = &cd->calls[k];
        if (np_strmap_get(&m, r->name) >= 0)
            continue;
        if (np_strmap_put(&m, r->name, 0) != 0 ||
            push_call(p, &cap, (np_cmp_call){.name = r->name, .kind = r->kind, .parent = r->parent,
                                             .callsite = r->callsite, .seq = r->seq}) != 0)
            goto oom;
    }
    for (size_t i = 0; i < cd->n_entries; i++) {
        const np_cmp_side *s = &cd->entries[i];
        if (np_strmap_get(&m, s->call) >= 0)
            continue;
        if (np_strmap_put(&m, s->call, 0) != 0 || push_call(p, &cap, module_or_api(s->call, s->seq)) != 0)
            goto oom;
    }
    if (p->n_calls)
        qsort(p->calls, p->n_calls, sizeof *p->calls, cmp_call_seq);
    size_t n_sorted = p->n_calls;
    np_strmap_free(&m);
    if (np_strmap_init(&m, n_sorted + 16) != 0 || np_strmap_init(&bcalls, bd->n_calls + 1) != 0)
        goto oom;
    for (size_t k = 0; k < n_sorted; k++)
        if (np_strmap_put(&m, p->calls[k].name, (int)k) != 0)
            goto oom;
    for (size_t k = 0; k < bd->n_calls; k++)
        if (np_strmap_put(&bcalls, bd->calls[k].name, (int)k) != 0)
            goto oom;
    for (size_t i = 0; i < p->n_rows; i++) {
        np_cmp_row *r = &p->rows[i];
        const char *call = r->cmp ? r->cmp->call : r->bench->call;
        int k = np_strmap_get(&m, call);
        if (k < 0) {
            int b = np_strmap_get(&bcalls, call);
            np_cmp_call c = b >= 0 ? (np_cmp_call){.name = bd->calls[b].name, .kind = bd->calls[b].kind,
                                                   .parent = bd->calls[b].parent,
                                                   .callsite = bd->calls[b].callsite,
                                                   .seq = bd->calls[b].seq}
                                   : module_or_api(call, r->bench->seq);
            k = (int)p->n_calls;
            if (push_call(p, &cap, c) != 0 || np_strmap_put(&m, call, k) != 0)
                goto oom;
        }
        r->call_index = k;
    }
    if (!p->calls && !(p->calls = calloc(1, sizeof *p->calls)))
        goto oom;
    for (size_t k = 0; k < p->n_calls; k++) {
        p->calls[k].backward = cmp_is_backward(p->calls[k].name);
        p->calls[k].worst_row = -1;
    }
    goto done;
oom:
    st = np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory building the call list");
done:
    np_strmap_free(&m);
    np_strmap_free(&bcalls);
    return st;
}

static void metrics_nan(np_cmp_metrics *m)
{
    m->cosine = m->euc_dist = m->max_abs_err = m->max_rel_err = NAN;
    m->one_thousandth = m->five_thousandths = NAN;
    m->bench_norm = m->cmp_norm = m->rel_l2 = NAN;
    m->note = "";
}

static int same_shape(const np_cmp_side *a, const np_cmp_side *b)
{
    if (a->ndim != b->ndim || a->numel != b->numel)
        return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return 0;
    return 1;
}

/* Tensors of at least this many elements are compared one at a time with
 * OpenMP over their blocks; smaller ones are spread over the threads one
 * pair each (HDF5 serialised, reads and metrics in parallel), which keeps
 * both cores busy between tensors. Either way each tensor's metrics come
 * from the same fixed blocks, so the numbers do not depend on the thread
 * count. */
#define BIG_TENSOR (8 << 20)

static int payload_row(const np_cmp_row *r)
{
    return r->bench && r->cmp && r->bench->has_data && r->cmp->has_data &&
           strcmp(r->cmp->role, "kwargs") && same_shape(r->bench, r->cmp);
}

static void payload_one(np_cmp_pair *p, np_cmp_row *r, cmp_dump *bd, cmp_dump *cd,
                        cmp_buffers *bufs, uint64_t *done, uint64_t total, int pair_index,
                        int n_pairs, const np_cmp_options *o, size_t i)
{
    cmp_pair_priv *pv = p->priv;
    np_error e = {0};
    uint64_t bytes = 0;
    int corrupt = 0;
    np_status st =
        cmp_payload_metrics(r->m, bd, r->bench, cd, r->cmp, 0.0, bufs, &bytes, &corrupt, &e);
#pragma omp critical(np_cmp_rows)
    {
        if (st != NP_OK) {
            /* unreadable or corrupt: an error row, left out of the root cause */
            metrics_nan(r->m);
            char buf[NP_ERROR_TEXT_MAX + 600];
            snprintf(buf, sizeof buf, "%s: %s", e.file, e.text);
            r->reason = cmp_arena_strdup(&pv->arena, buf);
            r->n_reason_args = 0;
            r->verdict = NP_VERDICT_ERROR;
            r->severity = INFINITY;
            pv->payload[i] = (int8_t)(corrupt ? CMP_PAYLOAD_CORRUPT : CMP_PAYLOAD_UNREADABLE);
        }
        p->bytes_read += bytes;
        *done += (uint64_t)(r->bench->numel + r->cmp->numel) * 4;
        if (o->progress && (i % 16 == 0 || *done == total))
            o->progress(pair_index, n_pairs, *done, total, o->progress_user);
    }
}

static np_status compare_payloads(np_cmp_pair *p, cmp_dump *bd, cmp_dump *cd, int pair_index,
                                  int n_pairs, const np_cmp_options *o)
{
    uint64_t total = 0, done = 0;
    for (size_t i = 0; i < p->n_rows; i++) /* the rows payload_one will read */
        if (payload_row(&p->rows[i]))
            total += (uint64_t)(p->rows[i].bench->numel + p->rows[i].cmp->numel) * 4;
    cmp_buffers bufs = {0};
    for (size_t i = 0; i < p->n_rows; i++) {
        np_cmp_row *r = &p->rows[i];
        if (payload_row(r) && r->cmp->numel >= BIG_TENSOR)
            payload_one(p, r, bd, cd, &bufs, &done, total, pair_index, n_pairs, o, i);
    }
    cmp_buffers_free(&bufs);
    long long nrows = (long long)p->n_rows;
#pragma omp parallel
    {
        cmp_buffers tb = {0};
#pragma omp for schedule(dynamic, 1)
        for (long long i = 0; i < nrows; i++) {
            np_cmp_row *r = &p->rows[i];
            if (payload_row(r) && r->cmp->numel < BIG_TENSOR)
                payload_one(p, r, bd, cd, &tb, &done, total, pair_index, n_pairs, o, (size_t)i);
        }
        cmp_buffers_free(&tb);
    }
    return NP_OK;
}

void np_cmp_pair_free(np_cmp_pair *p)
{
    if (!p)
        return;
    cmp_pair_priv *pv = p->priv;
    if (pv) {
        cmp_arena_free(&pv->arena);
        free(pv->bench_entries);
        free(pv->cmp_entries);
        free(pv->bench_calls);
        free(pv->cmp_calls);
        free(pv->metrics);
        free(pv->payload);
        free(pv);
    }
    free(p->rows);
    free(p->calls);
    free(p->culprits);
    memset(p, 0, sizeof *p);
}

static np_status compare_files(np_cmp_pair *p, const char *bench_h5, const char *cmp_h5,
                               const np_cmp_options *o, const cmp_mapping *map, int pair_index,
                               int n_pairs, np_error *err)
{
    memset(p, 0, sizeof *p);
    p->step = p->rank = -1;
    snprintf(p->bench_path, sizeof p->bench_path, "%s", bench_h5);
    snprintf(p->cmp_path, sizeof p->cmp_path, "%s", cmp_h5);
    cmp_pair_priv *pv = calloc(1, sizeof *pv);
    if (!pv)
        return np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory");
    p->priv = pv;
    cmp_dump bd, cd;
    np_strmap bench_names = {0};
    /* both files walked in child processes at once, then opened */
    cmp_walk wb, wc;
    cmp_dump_walk_start(&wb, bench_h5);
    cmp_dump_walk_start(&wc, cmp_h5);
    np_error cerr;
    np_error_clear(&cerr);
    np_status st = cmp_dump_walk_finish(&wb, err);
    np_status cst = cmp_dump_walk_finish(&wc, &cerr);
    if (st == NP_OK && cst != NP_OK) {
        if (err)
            *err = cerr;
        st = cst;
    }
    if (st == NP_OK)
        st = cmp_dump_open_walked(&bd, bench_h5, NULL, NULL, &pv->arena, err);
    else
        memset(&bd, 0, sizeof bd);
    if (st != NP_OK) {
        np_cmp_pair_free(p);
        return st;
    }
    if (cmp_names_map(&bench_names, &bd) != 0)
        st = np_error_set(err, NP_ERR_NOMEM, bench_h5, NULL, "out of memory for %zu names",
                          bd.n_entries);
    if (st == NP_OK)
        st = cmp_dump_open_walked(&cd, cmp_h5, &bd, &bench_names, &pv->arena, err);
    if (st != NP_OK) {
        np_strmap_free(&bench_names);
        free(bd.entries);
        free(bd.calls);
        cmp_dump_close(&bd);
        np_cmp_pair_free(p);
        return st;
    }
    pv->bench_entries = bd.entries;
    pv->cmp_entries = cd.entries;
    pv->bench_calls = bd.calls;
    pv->cmp_calls = cd.calls;
    p->step = (int)(cd.step >= 0 ? cd.step : bd.step);
    p->rank = (int)(cd.rank >= 0 ? cd.rank : bd.rank);
    snprintf(p->bench_task, sizeof p->bench_task, "%s", bd.task);
    snprintf(p->cmp_task, sizeof p->cmp_task, "%s", cd.task);
    snprintf(p->bench_precision, sizeof p->bench_precision, "%s", bd.precision);
    snprintf(p->cmp_precision, sizeof p->cmp_precision, "%s", cd.precision);
    p->bench_loss_scale = bd.loss_scale;
    p->cmp_loss_scale = cd.loss_scale;
    unscale_grads(&bd);
    unscale_grads(&cd);
    if (bd.loss_scale != 1 || cd.loss_scale != 1)
        note(p, "Gradient rows compared divided by the loss scale of their step (bench %.17g, "
                "cmp %.17g: root attribute loss_scale); their statistics are shown divided too.",
             bd.loss_scale, cd.loss_scale);
    snprintf(p->bench_device, sizeof p->bench_device, "%s", bd.device);
    snprintf(p->cmp_device, sizeof p->cmp_device, "%s", cd.device);
    if (!strcmp(bd.task, "tensor") && !strcmp(cd.task, "tensor"))
        p->mode = NP_CMP_MODE_TENSOR;
    else if (!strcmp(bd.task, "md5") && !strcmp(cd.task, "md5"))
        p->mode = NP_CMP_MODE_MD5;
    else
        p->mode = NP_CMP_MODE_STATISTICS;
    if (strcmp(bd.task, cd.task) != 0)
        note(p, "Task mismatch: bench task '%s', cmp task '%s': compared on statistics.", bd.task,
             cd.task);
    p->bench_incomplete = !bd.complete;
    p->cmp_incomplete = !cd.complete;
    if (!bd.complete)
        note(p, "The bench dump %s is incomplete (complete = 0: the step was not closed cleanly); "
                "compared what it holds.", bench_h5);
    if (!cd.complete)
        note(p, "The cmp dump %s is incomplete (complete = 0: the step was not closed cleanly); "
                "compared what it holds.", cmp_h5);
    if (bd.step >= 0 && cd.step >= 0 && bd.step != cd.step)
        note(p, "Steps differ between the two files (bench step %lld, cmp step %lld).",
             (long long)bd.step, (long long)cd.step);
    if (bd.n_entries && !bd.n_calls)
        note(p, "The bench dump %s has no /calls table: calls are taken from the leaf names; "
                "module paths, callsites and the order of modules are unknown.", bench_h5);
    if (cd.n_entries && !cd.n_calls)
        note(p, "The cmp dump %s has no /calls table: calls are taken from the leaf names; "
                "module paths, callsites and the order of modules are unknown.", cmp_h5);
    if (bd.rank >= 0 && cd.rank >= 0 && bd.rank != cd.rank)
        note(p, "Ranks differ between the two files (bench rank %lld, cmp rank %lld).",
             (long long)bd.rank, (long long)cd.rank);
    st = cmp_match(p, &bd, &cd, &bench_names, o->fuzzy, map, &pv->arena, err);
    np_strmap_free(&bench_names);
    if (st == NP_OK && p->mode == NP_CMP_MODE_TENSOR) {
        /* metrics only in tensor mode: a statistics row stays small */
        pv->metrics = malloc((p->n_rows + 1) * sizeof *pv->metrics);
        pv->payload = calloc(p->n_rows + 1, 1);
        if (!pv->metrics || !pv->payload)
            st = np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory for %zu rows", p->n_rows);
        for (size_t i = 0; st == NP_OK && i < p->n_rows; i++) {
            p->rows[i].m = &pv->metrics[i];
            metrics_nan(p->rows[i].m);
            p->rows[i].m->n = p->rows[i].m->n_masked = p->rows[i].m->n_mask_mismatch = 0;
        }
    }
    if (st == NP_OK)
        st = build_calls(p, &bd, &cd, err);
    if (st == NP_OK) {
        /* p->calls holds what is needed of the /calls records (their
         * strings stay in the arena) */
        free(pv->bench_calls);
        free(pv->cmp_calls);
        pv->bench_calls = pv->cmp_calls = NULL;
        bd.calls = cd.calls = NULL;
        bd.n_calls = cd.n_calls = 0;
    }
    if (st == NP_OK && p->mode == NP_CMP_MODE_TENSOR) {
        st = compare_payloads(p, &bd, &cd, pair_index, n_pairs, o);
        size_t n_bad[3] = {0};
        for (size_t i = 0; i < p->n_rows; i++)
            n_bad[pv->payload[i]]++;
        if (n_bad[CMP_PAYLOAD_CORRUPT])
            note(p, "%zu payload(s) do not match their crc32 in /entries (file corrupt): those rows "
                    "are errors, left out of the root cause.", n_bad[CMP_PAYLOAD_CORRUPT]);
        if (n_bad[CMP_PAYLOAD_UNREADABLE])
            note(p, "%zu payload(s) could not be read (missing from /data or unreadable): those "
                    "rows are errors, left out of the root cause.", n_bad[CMP_PAYLOAD_UNREADABLE]);
    }
    if (st == NP_OK) {
        cmp_verdicts(p, o, pair_index, n_pairs);
        st = cmp_root_cause(p, err);
    }
    cmp_dump_close(&bd);
    cmp_dump_close(&cd);
    if (st != NP_OK)
        np_cmp_pair_free(p);
    return st;
}

np_status np_cmp_compare_files(np_cmp_pair *out, const char *bench_h5, const char *cmp_h5,
                               const np_cmp_options *opts, np_error *err)
{
    np_cmp_options o;
    if (opts)
        o = *opts;
    else
        np_cmp_options_init(&o);
    cmp_mapping *map = NULL;
    if (o.mapping_path) {
        np_status st = cmp_mapping_load(&map, o.mapping_path, err);
        if (st != NP_OK)
            return st;
    }
    np_status st = compare_files(out, bench_h5, cmp_h5, &o, map, 0, 1, err);
    cmp_mapping_free(map);
    return st;
}

/* ---- resolving a side -------------------------------------------------------- */

typedef struct unit {
    int step, rank;
    int temp_only;            /* 1: only a temporary/partial file was found; 2: none at all */
    char path[1280];          /* dump.h5, or the temporary file, or the rank dir */
} unit;

typedef struct unit_list {
    unit *u;
    size_t n, cap;
} unit_list;

static int push_unit(unit_list *l, int step, int rank, int temp, const char *path)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        unit *u = realloc(l->u, cap * sizeof *u);
        if (!u)
            return -1;
        l->u = u;
        l->cap = cap;
    }
    unit *x = &l->u[l->n++];
    x->step = step;
    x->rank = rank;
    x->temp_only = temp;
    snprintf(x->path, sizeof x->path, "%s", path);
    return 0;
}

/* "step12" with prefix "step" -> 12; -1 if not of that form. */
static int name_num(const char *name, const char *prefix)
{
    size_t l = strlen(prefix);
    if (strncmp(name, prefix, l) != 0 || !name[l])
        return -1;
    long v = 0;
    for (const char *s = name + l; *s; s++) {
        if (*s < '0' || *s > '9' || v > 100000000)
            return -1;
        v = v * 10 + (*s - '0');
    }
    return (int)v;
}

static int is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int is_file(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Last path component and the one before it. */
static void tail_names(const char *path, char *last, char *prev, size_t cap)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0';
    char *s = strrchr(buf, '/');
    snprintf(last, cap, "%s", s ? s + 1 : buf);
    prev[0] = '\0';
    if (s) {
        *s = '\0';
        char *t = strrchr(buf, '/');
        snprintf(prev, cap, "%s", t ? t + 1 : buf);
    }
}

/* A rank directory: dump.h5, or only a temporary file. 1 if something found. */
static int scan_rank_dir(unit_list *l, const char *dir, int step, int rank)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, NP_FMT_FILE);
    if (is_file(path))
        return push_unit(l, step, rank, 0, path) == 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *e;
    int found = 0;
    while ((e = readdir(d)) && !found) {
        size_t n = strlen(e->d_name);
        if (strncmp(e->d_name, NP_FMT_FILE, strlen(NP_FMT_FILE)) == 0 ||
            (n > 4 && !strcmp(e->d_name + n - 4, ".tmp")) ||
            (n > 8 && !strcmp(e->d_name + n - 8, ".partial"))) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            found = push_unit(l, step, rank, 1, path) == 0;
        }
    }
    closedir(d);
    return found;
}

static int scan_step_dir(unit_list *l, const char *dir, int step)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *e;
    int found = 0;
    char path[1200];
    while ((e = readdir(d))) {
        int r = name_num(e->d_name, "rank");
        if (r < 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (!is_dir(path))
            continue;
        if (!scan_rank_dir(l, path, step, r))
            push_unit(l, step, r, 2, path); /* a rank dir without a dump file: reported */
        found = 1;
    }
    closedir(d);
    return found;
}

static np_status resolve(unit_list *l, const char *input, np_error *err)
{
    char last[256], prev[256];
    tail_names(input, last, prev, sizeof last);
    if (is_file(input)) {
        int r = name_num(prev, "rank");
        char dir[1024], s_last[256], s_prev[256];
        snprintf(dir, sizeof dir, "%s", input);
        char *slash = strrchr(dir, '/');
        int s = -1;
        if (slash) {
            *slash = '\0';
            tail_names(dir, s_last, s_prev, sizeof s_last);
            s = name_num(s_prev, "step");
        }
        push_unit(l, s, r, 0, input);
        return NP_OK;
    }
    if (!is_dir(input))
        return np_error_set(err, NP_ERR_NOTFOUND, input, NULL,
                            "no such file or directory (expected a dump root, a step or rank "
                            "directory, or a %s)", NP_FMT_FILE);
    int r = name_num(last, "rank");
    if (r >= 0 || is_file(input)) {
        if (scan_rank_dir(l, input, name_num(prev, "step"), r))
            return NP_OK;
    } else {
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", input, NP_FMT_FILE);
        if (is_file(path)) {
            push_unit(l, name_num(prev, "step"), -1, 0, path);
            return NP_OK;
        }
    }
    if (scan_step_dir(l, input, name_num(last, "step")))
        return NP_OK;
    DIR *d = opendir(input);
    int found = 0;
    if (d) {
        struct dirent *e;
        char path[1200];
        while ((e = readdir(d))) {
            int s = name_num(e->d_name, "step");
            if (s < 0)
                continue;
            snprintf(path, sizeof path, "%s/%s", input, e->d_name);
            if (is_dir(path)) {
                scan_step_dir(l, path, s);
                found = 1;
            }
        }
        closedir(d);
    }
    if (!found)
        return np_error_set(err, NP_ERR_NOTFOUND, input, NULL,
                            "no dump found (expected step*/rank*/%s below it, rank*/%s, or %s)",
                            NP_FMT_FILE, NP_FMT_FILE, NP_FMT_FILE);
    return NP_OK;
}

/* A side given as one file, paired against a directory: it must be a
 * readable dump (else its own error, not "present on one side only"), and
 * the step and rank its path does not give come from its attributes. */
static np_status number_single_file(unit_list *l, const char *input, np_error *err)
{
    if (l->n != 1 || !is_file(input) || (l->u[0].step >= 0 && l->u[0].rank >= 0))
        return NP_OK;
    cmp_arena a = {0};
    cmp_dump d;
    np_status st = cmp_dump_open(&d, input, NULL, NULL, &a, err);
    if (st == NP_OK) {
        if (l->u[0].step < 0)
            l->u[0].step = (int)d.step;
        if (l->u[0].rank < 0)
            l->u[0].rank = (int)d.rank;
        free(d.entries);
        free(d.calls);
        cmp_dump_close(&d);
    }
    cmp_arena_free(&a);
    return st;
}

static int unit_order(const void *x, const void *y)
{
    const unit *a = x, *b = y;
    if (a->step != b->step)
        return a->step < b->step ? -1 : 1;
    return a->rank < b->rank ? -1 : a->rank > b->rank;
}

static const unit *find_unit(const unit_list *l, int step, int rank)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->u[i].step == step && l->u[i].rank == rank)
            return &l->u[i];
    return NULL;
}

static int add_issue(np_cmp_result *r, np_status st, int step, int rank, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

static int add_issue(np_cmp_result *r, np_status st, int step, int rank, const char *fmt, ...)
{
    np_cmp_issue *v = realloc(r->issues, (r->n_issues + 1) * sizeof *v);
    if (!v)
        return -1;
    r->issues = v;
    np_cmp_issue *x = &v[r->n_issues++];
    x->status = st;
    x->step = step;
    x->rank = rank;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->text, sizeof x->text, fmt, ap);
    va_end(ap);
    return 0;
}

void np_cmp_result_free(np_cmp_result *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_pairs; i++)
        np_cmp_pair_free(&r->pairs[i]);
    free(r->pairs);
    free(r->issues);
    free(r);
}

int np_cmp_has_differences(const np_cmp_result *r)
{
    if (r->n_issues)
        return 1;
    for (size_t i = 0; i < r->n_pairs; i++)
        if (r->pairs[i].count_verdict[NP_VERDICT_ERROR] || r->pairs[i].bench_incomplete ||
            r->pairs[i].cmp_incomplete)
            return 1;
    return 0;
}

static const char *const side_names[2] = {"bench", "cmp"};

np_status np_cmp_run(np_cmp_result **out, const char *bench, const char *cmp,
                     const np_cmp_options *opts, np_error *err)
{
    *out = NULL;
    np_cmp_result *r = calloc(1, sizeof *r);
    if (!r)
        return np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory");
    if (opts)
        r->opts = *opts;
    else
        np_cmp_options_init(&r->opts);
    snprintf(r->bench_input, sizeof r->bench_input, "%s", bench);
    snprintf(r->cmp_input, sizeof r->cmp_input, "%s", cmp);
    unit_list lb = {0}, lc = {0};
    cmp_mapping *map = NULL;
    np_status st = NP_OK;
    if (r->opts.mapping_path && (st = cmp_mapping_load(&map, r->opts.mapping_path, err)) != NP_OK)
        goto fail;
    if ((st = resolve(&lb, bench, err)) != NP_OK || (st = resolve(&lc, cmp, err)) != NP_OK)
        goto fail;
    if (!(lb.n == 1 && lc.n == 1) && ((st = number_single_file(&lb, bench, err)) != NP_OK ||
                                      (st = number_single_file(&lc, cmp, err)) != NP_OK))
        goto fail;
    qsort(lb.u, lb.n, sizeof *lb.u, unit_order);
    qsort(lc.u, lc.n, sizeof *lc.u, unit_order);
    /* the list of (step, rank) keys to compare */
    unit_list keys = {0};
    if (lb.n == 1 && lc.n == 1) {
        push_unit(&keys, lc.u[0].step, lc.u[0].rank, 0, "");
    } else {
        for (int side = 0; side < 2; side++) {
            const unit_list *l = side ? &lc : &lb;
            for (size_t i = 0; i < l->n; i++)
                if (!find_unit(&keys, l->u[i].step, l->u[i].rank))
                    push_unit(&keys, l->u[i].step, l->u[i].rank, 0, "");
        }
        qsort(keys.u, keys.n, sizeof *keys.u, unit_order);
    }
    size_t n_sel = 0;
    for (size_t i = 0; i < keys.n; i++)
        if ((r->opts.step < 0 || keys.u[i].step == r->opts.step) &&
            (r->opts.rank < 0 || keys.u[i].rank == r->opts.rank))
            n_sel++;
    r->pairs = calloc(n_sel + 1, sizeof *r->pairs);
    if (!r->pairs) {
        free(keys.u);
        st = np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory");
        goto fail;
    }
    int idx = 0;
    for (size_t i = 0; i < keys.n; i++) {
        int s = keys.u[i].step, k = keys.u[i].rank;
        if ((r->opts.step >= 0 && s != r->opts.step) || (r->opts.rank >= 0 && k != r->opts.rank))
            continue;
        const unit *ub = lb.n == 1 && lc.n == 1 ? &lb.u[0] : find_unit(&lb, s, k);
        const unit *uc = lb.n == 1 && lc.n == 1 ? &lc.u[0] : find_unit(&lc, s, k);
        const unit *us[2] = {ub, uc};
        const char *inputs[2] = {bench, cmp};
        int skip = 0;
        for (int side = 0; side < 2; side++) {
            if (!us[side]) {
                add_issue(r, NP_ERR_NOTFOUND, s, k,
                          "step %d rank %d: present on the %s side only; the %s side (%s) has no "
                          "step%d/rank%d/%s", s, k, side_names[!side], side_names[side],
                          inputs[side], s, k, NP_FMT_FILE);
                skip = 1;
            } else if (us[side]->temp_only == 2) {
                add_issue(r, NP_ERR_NOTFOUND, s, k,
                          "%s: step %d rank %d of the %s side has no dump file (no %s, no "
                          "%s.partial)",
                          us[side]->path, s, k, side_names[side], NP_FMT_FILE, NP_FMT_FILE);
                skip = 1;
            } else if (us[side]->temp_only) {
                add_issue(r, NP_ERR_INCOMPLETE, s, k,
                          "%s: step %d rank %d of the %s side is incomplete: only a temporary or "
                          "partial file, no closed %s (the run stopped during this step)",
                          us[side]->path, s, k, side_names[side], NP_FMT_FILE);
                skip = 1;
            }
        }
        if (skip)
            continue;
        np_error e = {0};
        np_cmp_pair *p = &r->pairs[r->n_pairs];
        if (compare_files(p, ub->path, uc->path, &r->opts, map, idx, (int)n_sel, &e) != NP_OK) {
            add_issue(r, e.status, s, k, "%s%s%s%s%s", e.file, e.file[0] ? ": " : "", e.key,
                      e.key[0] ? ": " : "", e.text);
        } else {
            if (lb.n != 1 || lc.n != 1) {
                p->step = s;
                p->rank = k;
            }
            if (p->step < 0)
                p->step = 0;
            if (p->rank < 0)
                p->rank = 0;
            r->n_pairs++;
        }
        idx++;
    }
    if (n_sel == 0) {
        /* say what there is: "steps 0, 1, 5; ranks 0" */
        char have[512] = "";
        size_t hn = 0;
        for (int what = 0; what < 2; what++) {
            int first = 1;
            hn += (size_t)snprintf(have + hn, sizeof have - hn, "%s", what ? "; ranks" : "steps");
            /* each number once; the text stays well inside `have` */
            for (size_t i = 0; i < keys.n && hn < sizeof have / 2; i++) {
                int v = what ? keys.u[i].rank : keys.u[i].step;
                int seen = 0;
                for (size_t j = 0; j < i && !seen; j++)
                    seen = (what ? keys.u[j].rank : keys.u[j].step) == v;
                if (seen)
                    continue;
                hn += (size_t)snprintf(have + hn, sizeof have - hn, "%s %d", first ? "" : ",", v);
                first = 0;
            }
        }
        free(keys.u);
        st = np_error_set(err, NP_ERR_NOTFOUND, NULL, NULL,
                          "compare: no step/rank selected%s (the two sides hold %s)",
                          r->opts.step >= 0 || r->opts.rank >= 0 ? " by --step/--rank" : "", have);
        goto fail;
    }
    free(keys.u);
    free(lb.u);
    free(lc.u);
    cmp_mapping_free(map);
    *out = r;
    return NP_OK;
fail:
    free(lb.u);
    free(lc.u);
    cmp_mapping_free(map);
    np_cmp_result_free(r);
    return st;
}
