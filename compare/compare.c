/* compare/compare.c - np_cmp_run: resolve each side (dump root, step dir,
 * rank dir or one file), pair steps and ranks by number, and compare each
 * pair of files: match the leaves, stream the payload metrics, give the
 * verdicts and walk the calls for the culprit. Problems of one side of one
 * step/rank become issues; the rest is still compared. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stages.h"

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

/* Gradients carry their step's loss scale and data-parallel factor (root
 * attributes loss_scale, dp_grad_scale): their statistics are divided by
 * both here, their payloads as they are read (cmp_payload_metrics). */
static void unscale_grads(cmp_dump *d)
{
    if (d->grad_div == 1.0)
        return;
    double f = 1.0 / d->grad_div;
    for (size_t i = 0; i < d->n_entries; i++) {
        np_cmp_side *e = &d->entries[i];
        if (!cmp_side_is_grad(e))
            continue;
        e->stats.max *= f;
        e->stats.min *= f;
        e->stats.mean *= f;
        e->stats.norm *= f;
    }
}

static void note(np_cmp_pair *p, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void note(np_cmp_pair *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cmp_vnote(p, fmt, ap);
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
                         .parent = "", .callsite = "", .seq = seq, .iso_err = NAN,
                         .iso_ratio = NAN, .ref_iso_err = NAN, .ref_iso_ratio = NAN};
}

/* Rule 2 (verdict.c cmp_gaps): per module and API, the forward calls each
 * side made in it; a module where the bench made more (a missing residual
 * add: the cmp's later calls take the missing one's counter, so no call is
 * missing by name) is a gap, kept in pv->gap_*. */
static int api_of(char *out, size_t cap, const char *call)
{
    size_t n = strlen(call), k;
    if (n < 9 || strcmp(call + n - 8, ".forward") != 0)
        return -1;
    k = n - 8;
    while (k > 0 && call[k - 1] >= '0' && call[k - 1] <= '9')
        k--;
    if (k < 2 || call[k - 1] != '.' || k - 1 >= cap)
        return -1;
    memcpy(out, call, k - 1);
    out[k - 1] = '\0';
    return 0;
}

static int count_side(np_strmap *m, int **cnt, size_t *n, size_t *cap, const char ***keys,
                      cmp_arena *a, const cmp_call_rec *c, size_t nc, int side)
{
    char api[256], key[1024];
    for (size_t k = 0; k < nc; k++) {
        if (strcmp(c[k].kind, "api") != 0 || !c[k].parent || !c[k].parent[0] ||
            api_of(api, sizeof api, c[k].name) != 0)
            continue;
        /* dtype casts count too: a mixed-precision run makes casts the
         * fp32 run does not need, but those are the cmp's extra calls, and
         * only the bench's extra calls are gaps; a cast the bench makes and
         * the cmp dropped (a router's .float()) is one (match.c pairs casts
         * by callsite, so the calls after it stay paired) */
        snprintf(key, sizeof key, "%s\x1f%s", c[k].parent, api);
        int i = np_strmap_get(m, key);
        if (i < 0) {
            if (*n == *cap) {
                size_t nn = *cap ? 2 * *cap : 64;
                int *c2 = realloc(*cnt, 2 * nn * sizeof **cnt);
                const char **k2 = c2 ? realloc(*keys, nn * sizeof **keys) : NULL;
                if (c2)
                    *cnt = c2;
                if (!k2)
                    return -1;
                *keys = k2;
                *cap = nn;
            }
            const char *kc = cmp_arena_strdup(a, key);
            if (!kc || np_strmap_put(m, kc, (int)*n) != 0)
                return -1;
            (*keys)[*n] = kc;
            (*cnt)[2 * *n] = (*cnt)[2 * *n + 1] = 0;
            i = (int)(*n)++;
        }
        (*cnt)[2 * i + side]++;
    }
    return 0;
}

static np_status find_gaps(np_cmp_pair *p, const cmp_dump *bd, const cmp_dump *cd, np_error *err)
{
    cmp_pair_priv *pv = p->priv;
    np_strmap m = {0};
    int *cnt = NULL;
    const char **keys = NULL;
    size_t n = 0, cap = 0;
    np_status st = NP_OK;
    if (np_strmap_init(&m, bd->n_calls + cd->n_calls + 16) != 0 ||
        count_side(&m, &cnt, &n, &cap, &keys, &pv->arena, bd->calls, bd->n_calls, 0) != 0 ||
        count_side(&m, &cnt, &n, &cap, &keys, &pv->arena, cd->calls, cd->n_calls, 1) != 0)
        st = np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory finding gaps");
    size_t ng = 0;
    for (size_t i = 0; st == NP_OK && i < n; i++)
        ng += cnt[2 * i] > cnt[2 * i + 1];
    if (st == NP_OK && ng) {
        pv->gap_mod = cmp_arena_alloc(&pv->arena, 2 * ng * sizeof *pv->gap_mod, sizeof(void *));
        pv->gap_bench = cmp_arena_alloc(&pv->arena, 2 * ng * sizeof *pv->gap_bench, sizeof(int));
        if (!pv->gap_mod || !pv->gap_bench)
            st = np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory finding gaps");
    }
    for (size_t i = 0; st == NP_OK && ng && i < n; i++) {
        if (cnt[2 * i] <= cnt[2 * i + 1])
            continue;
        char *k = (char *)keys[i], *sep = strchr(k, '\x1f');
        *sep = '\0'; /* the key is dead: the map is freed below */
        int g = pv->n_gaps++;
        pv->gap_mod[g] = k;
        pv->gap_mod[ng + g] = sep + 1;
        pv->gap_bench[g] = cnt[2 * i];
        pv->gap_bench[ng + g] = cnt[2 * i + 1];
    }
    if (ng && pv->gap_mod) {
        pv->gap_api = pv->gap_mod + ng;
        pv->gap_cmp = pv->gap_bench + ng;
    }
    np_strmap_free(&m);
    free(cnt);
    free(keys);
    return st;
}

/* p->calls in execution order: the cmp side's /calls, then calls named by
 * its entries only, sorted by seq; then calls of bench-only rows (from the
 * bench side's /calls when it has them) at the end. Every row gets its
 * call_index. */
static np_status build_calls(np_cmp_pair *p, const cmp_dump *bd, const cmp_dump *cd, np_error *err)
{
    size_t cap = 0;
    np_strmap m = {0}, bcalls = {0}, renamed = {0}, bonly = {0};
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
    if (np_strmap_init(&m, n_sorted + 16) != 0 || np_strmap_init(&bcalls, bd->n_calls + 1) != 0 ||
        np_strmap_init(&renamed, 16) != 0 || np_strmap_init(&bonly, 16) != 0)
        goto oom;
    for (size_t k = 0; k < n_sorted; k++)
        if (np_strmap_put(&m, p->calls[k].name, (int)k) != 0)
            goto oom;
    for (size_t k = 0; k < bd->n_calls; k++)
        if (np_strmap_put(&bcalls, bd->calls[k].name, (int)k) != 0)
            goto oom;
    /* a cmp call paired with a bench call of another name (casts are
     * paired by callsite, match.c): a bench-only row of the bench call of
     * that name belongs to a call of its own, not to the cmp's */
    for (size_t i = 0; i < p->n_rows; i++) {
        const np_cmp_row *r = &p->rows[i];
        if (r->cmp && r->bench && strcmp(r->cmp->call, r->bench->call) != 0 &&
            np_strmap_get(&renamed, r->cmp->call) < 0 && np_strmap_put(&renamed, r->cmp->call, 0) != 0)
            goto oom;
    }
    for (size_t i = 0; i < p->n_rows; i++) {
        np_cmp_row *r = &p->rows[i];
        const char *call = r->cmp ? r->cmp->call : r->bench->call;
        int own = !r->cmp && np_strmap_get(&renamed, call) >= 0;
        int k = np_strmap_get(own ? &bonly : &m, call);
        if (k < 0) {
            int b = np_strmap_get(&bcalls, call);
            np_cmp_call c = b >= 0 ? (np_cmp_call){.name = bd->calls[b].name, .kind = bd->calls[b].kind,
                                                   .parent = bd->calls[b].parent,
                                                   .callsite = bd->calls[b].callsite,
                                                   .seq = bd->calls[b].seq}
                                   : module_or_api(call, r->bench->seq);
            k = (int)p->n_calls;
            if (push_call(p, &cap, c) != 0 || np_strmap_put(own ? &bonly : &m, call, k) != 0)
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
    np_strmap_free(&renamed);
    np_strmap_free(&bonly);
    return st;
}

static void metrics_nan(np_cmp_metrics *m)
{
    m->cosine = m->euc_dist = m->max_abs_err = m->max_rel_err = NAN;
    m->one_thousandth = m->five_thousandths = NAN;
    m->bench_norm = m->cmp_norm = m->rel_l2 = NAN;
    m->note = "";
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
    return r->bench && r->cmp && r->bench->has_data == 1 && r->cmp->has_data == 1 &&
           !r->bench->defect && !r->cmp->defect && strcmp(r->cmp->role, "kwargs") &&
           r->bench->numel == r->cmp->numel && cmp_same_shape(r->bench, r->cmp);
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

/* Everything of a pair's private part but the shrunk block. */
static void priv_release(cmp_pair_priv *pv)
{
    cmp_arena_free(&pv->arena);
    free(pv->bench_entries);
    free(pv->cmp_entries);
    free(pv->bench_calls);
    free(pv->cmp_calls);
    free(pv->metrics);
    free(pv->payload);
    pv->bench_entries = pv->cmp_entries = NULL;
    pv->bench_calls = pv->cmp_calls = NULL;
    pv->metrics = NULL;
    pv->payload = NULL;
    pv->n_tols = 0; /* their strings were in the arena */
}

void np_cmp_pair_free(np_cmp_pair *p)
{
    if (!p)
        return;
    free(p->rows);
    if (p->shrunk) {
        free(p->priv); /* the shrunk block: calls[0], culprits[0] and their strings */
    } else {
        cmp_pair_priv *pv = p->priv;
        free(p->calls);
        free(p->culprits);
        if (pv) {
            priv_release(pv);
            free(pv);
        }
    }
    memset(p, 0, sizeof *p);
}

/* What np_cmp_pair_shrink keeps of the first culprit. */
typedef struct shrunk_block {
    np_cmp_call call;
    int culprit;
    char text[]; /* name, kind, parent, callsite, reason, NUL-separated */
} shrunk_block;

static const char *stash(char **at, const char *s)
{
    const char *r = *at;
    size_t n = strlen(s ? s : "") + 1;
    memcpy(*at, s ? s : "", n);
    *at += n;
    return r;
}

void np_cmp_pair_shrink(np_cmp_pair *p)
{
    cmp_pair_priv *pv = p->priv;
    if (!pv || p->shrunk)
        return;
    const np_cmp_call *c = p->n_culprits ? &p->calls[p->culprits[0]] : NULL;
    const char *parts[5] = {c ? c->name : "", c ? c->kind : "", c ? c->parent : "",
                            c ? c->callsite : "", c ? c->reason : ""};
    size_t len = 0;
    for (int i = 0; i < 5; i++)
        len += strlen(parts[i] ? parts[i] : "") + 1;
    shrunk_block *b = c ? malloc(sizeof *b + len) : NULL;
    if (c && !b)
        return; /* out of memory: the pair stays whole */
    if (b) {
        char *at = b->text;
        b->call = *c;
        b->call.name = stash(&at, parts[0]);
        b->call.kind = stash(&at, parts[1]);
        b->call.parent = stash(&at, parts[2]);
        b->call.callsite = stash(&at, parts[3]);
        b->call.reason = stash(&at, parts[4]);
        b->call.worst_row = -1;
        b->culprit = 0;
    }
    free(p->rows);
    free(p->calls);
    free(p->culprits);
    priv_release(pv);
    free(pv);
    p->rows = NULL;
    p->calls = b ? &b->call : NULL;
    p->culprits = b ? &b->culprit : NULL;
    p->n_calls = p->n_culprits = b ? 1 : 0;
    p->priv = b; /* freed with the pair */
    p->shrunk = 1;
}

static int has_loss_name(const char *call)
{
    return strstr(call, "cross_entropy") || strstr(call, "loss") || strstr(call, "Loss");
}

/* The figures a summary over many pairs keeps of a compared pair: its
 * worst row severity and the loss, where the dump holds it (a
 * one-element forward output of a loss call). */
static void pair_digest(np_cmp_pair *p)
{
    p->worst_severity = NAN;
    p->has_loss = 0;
    for (size_t i = 0; i < p->n_rows; i++) {
        const np_cmp_row *r = &p->rows[i];
        if (!isnan(r->severity) && (isnan(p->worst_severity) || r->severity > p->worst_severity))
            p->worst_severity = r->severity;
        if (p->has_loss || !r->bench || !r->cmp || r->cmp->numel != 1 ||
            strcmp(r->cmp->role, "output") != 0 || cmp_is_backward(r->cmp->call) ||
            !has_loss_name(r->cmp->call))
            continue;
        p->has_loss = 1;
        p->loss_bench = r->bench->stats.mean;
        p->loss_cmp = r->cmp->stats.mean;
    }
}

/* 1 when pair x's first culprit comes before pair y's in one process's
 * order, both stages of one pipeline step: the forward runs stage after
 * stage, the backward back. */
static int stage_before(const np_cmp_pair *x, const np_cmp_pair *y)
{
    int bx = x->calls[x->culprits[0]].backward, by = y->calls[y->culprits[0]].backward;
    if (bx != by)
        return !bx;
    return bx ? x->stage > y->stage : x->stage < y->stage;
}

size_t np_cmp_focus_pair(const np_cmp_result *r)
{
    size_t failing = SIZE_MAX, best = SIZE_MAX;
    for (size_t i = 0; i < r->n_pairs; i++) {
        const np_cmp_pair *p = &r->pairs[i];
        if (p->n_culprits) {
            const np_cmp_pair *b = best != SIZE_MAX ? &r->pairs[best] : NULL;
            if (!b || (p->step == b->step && p->stage >= 0 && b->stage >= 0 &&
                       stage_before(p, b)))
                best = i;
        }
        if (failing == SIZE_MAX && p->count_verdict[NP_VERDICT_ERROR])
            failing = i;
    }
    return best != SIZE_MAX ? best : failing != SIZE_MAX ? failing : 0;
}

/* The two files of a pair, and how to open them. */
typedef struct pair_files {
    const np_dumpio_ref *bench, *cmp;
    unsigned flags;             /* NP_DUMPIO_CHECKED when their walks passed */
    const np_rep_result *rep;   /* the cmp side checked against itself, or NULL */
    /* the same rank's files of the step before (step - 1), both sides, or
     * NULL: the weights rule reads their gradients (parted_noise.c) */
    const np_dumpio_ref *prev_bench, *prev_cmp;
} pair_files;

/* ---- the stages of one pair (stages.h) -------------------------------- */

static np_status names_oom(const cmp_run *r, np_error *err)
{
    return np_error_set(err, NP_ERR_NOMEM, r->bench_ref->path, NULL,
                        "out of memory for %zu names", r->bd.n_entries);
}

/* read: both sides (the cmp side sharing the bench side's strings); the
 * pair owns their entries and calls from here on. */
static np_status stage_read(cmp_run *r, np_error *err)
{
    cmp_pair_priv *pv = r->pv;
    /* statistics that keep +-inf on one side only: compare the like with the like */
    int b_inf = r->bench_ref->source && r->bench_ref->source->stats_keep_inf;
    int c_inf = r->cmp_ref->source && r->cmp_ref->source->stats_keep_inf;
    np_status st = cmp_dump_open(&r->bd, r->bench_ref, r->flags, c_inf, NULL, NULL, &pv->arena, err);
    if (st != NP_OK)
        return st;
    pv->bench_entries = r->bd.entries;
    pv->bench_calls = r->bd.calls;
    if (cmp_names_map(&r->bench_names, &r->bd) != 0)
        return names_oom(r, err);
    st = cmp_dump_open(&r->cd, r->cmp_ref, r->flags, b_inf, &r->bd, &r->bench_names, &pv->arena,
                       err);
    pv->cmp_entries = r->cd.entries;
    pv->cmp_calls = r->cd.calls;
    return st;
}

/* select (--single-ref): the leaves a data-parallel rank shares with the
 * single run: the reduced gradients at every step, the parameters at step
 * 0 (the same initialisation). Later parameters carry the optimizer's
 * history: AdamW turns the rounding of a gradient that is zero in exact
 * arithmetic (the attention's key bias: softmax ignores it) into steps of
 * +-lr, so two equivalent runs part there (docs/COMPARE.md "Distributed"). */
static void keep_dp_shared(cmp_dump *d)
{
    size_t k = 0;
    for (size_t i = 0; i < d->n_entries; i++)
        if ((d->step == 0 && !strcmp(d->entries[i].role, "parameters")) ||
            !strcmp(d->entries[i].role, "parameters_grad"))
            d->entries[k++] = d->entries[i];
    d->n_entries = k;
}

static int when_single_ref(const cmp_run *r) { return r->o->single_ref; }

static np_status stage_select_dp(cmp_run *r, np_error *err)
{
    keep_dp_shared(&r->bd);
    keep_dp_shared(&r->cd);
    np_strmap_free(&r->bench_names);
    return cmp_names_map(&r->bench_names, &r->bd) != 0 ? names_oom(r, err) : NP_OK;
}

static int when_assembler(const cmp_run *r)
{
    (void)r;
    return cmp_assembler != NULL;
}

static void assembly_note(void *p, const char *text) { note(p, "%s", text); }

/* assemble: shards into logical rows (stages.h, assemble.c). */
static np_status stage_assemble(cmp_run *r, np_error *err)
{
    cmp_pair_priv *pv = r->pv;
    np_status st = cmp_assembler(&r->bd, &pv->arena, err);
    pv->bench_entries = r->bd.entries;
    pv->bench_calls = r->bd.calls; /* a pipeline's assembly merges the stages' calls */
    if (st == NP_OK)
        st = cmp_assembler(&r->cd, &pv->arena, err);
    pv->cmp_entries = r->cd.entries;
    pv->cmp_calls = r->cd.calls;
    if (st != NP_OK)
        return st;
    cmp_assembly_drop_skipped(&r->cd, &r->bd);
    cmp_assembly_drop_skipped(&r->bd, &r->cd);
    r->p->replica_diffs = (int)(cmp_assembly_notes(&r->bd, assembly_note, r->p) +
                                cmp_assembly_notes(&r->cd, assembly_note, r->p));
    np_strmap_free(&r->bench_names);
    return cmp_names_map(&r->bench_names, &r->bd) != 0 ? names_oom(r, err) : NP_OK;
}

static void file_defects(np_cmp_pair *p, const char *side, const cmp_dump *d,
                         const np_dumpio_ref *ref);

/* describe: the pair's header (step, rank, tasks, precisions, mode) and
 * the notes on the files themselves; gradients divided by their loss scale. */
static np_status stage_describe(cmp_run *r, np_error *err)
{
    (void)err;
    np_cmp_pair *p = r->p;
    cmp_dump *bd = &r->bd, *cd = &r->cd;
    file_defects(p, "bench", bd, r->bench_ref);
    file_defects(p, "cmp", cd, r->cmp_ref);
    p->step = (int)(cd->step >= 0 ? cd->step : bd->step);
    p->rank = (int)(cd->rank >= 0 ? cd->rank : bd->rank);
    p->stage = cmp_assembly_stage(cd);
    snprintf(p->bench_task, sizeof p->bench_task, "%s", bd->task);
    snprintf(p->cmp_task, sizeof p->cmp_task, "%s", cd->task);
    snprintf(p->bench_precision, sizeof p->bench_precision, "%s", bd->precision);
    snprintf(p->cmp_precision, sizeof p->cmp_precision, "%s", cd->precision);
    p->bench_loss_scale = bd->loss_scale;
    p->cmp_loss_scale = cd->loss_scale;
    p->bench_dp_grad_scale = bd->dp_grad_scale;
    p->cmp_dp_grad_scale = cd->dp_grad_scale;
    unscale_grads(bd);
    unscale_grads(cd);
    if (bd->loss_scale != 1 || cd->loss_scale != 1)
        note(p, "Gradient rows compared divided by the loss scale of their step (bench %.17g, "
                "cmp %.17g: root attribute loss_scale); their statistics are shown divided too.",
             bd->loss_scale, cd->loss_scale);
    if (bd->dp_grad_scale != 1 || cd->dp_grad_scale != 1)
        note(p, "Gradient rows compared divided by the factor of their run's averaging "
                "data-parallel reduction (bench %.17g, cmp %.17g: root attribute dp_grad_scale); "
                "their statistics are shown divided too.",
             bd->dp_grad_scale, cd->dp_grad_scale);
    snprintf(p->bench_device, sizeof p->bench_device, "%s", bd->device);
    snprintf(p->cmp_device, sizeof p->cmp_device, "%s", cd->device);
    if (!strcmp(bd->task, "tensor") && !strcmp(cd->task, "tensor"))
        p->mode = NP_CMP_MODE_TENSOR;
    else if (!strcmp(bd->task, "md5") && !strcmp(cd->task, "md5"))
        p->mode = NP_CMP_MODE_MD5;
    else
        p->mode = NP_CMP_MODE_STATISTICS;
    if (strcmp(bd->task, cd->task) != 0)
        note(p, "Task mismatch: bench task '%s', cmp task '%s': compared on statistics.", bd->task,
             cd->task);
    p->bench_incomplete = !bd->complete;
    p->cmp_incomplete = !cd->complete;
    static const char *const side[2] = {"bench", "cmp"};
    const cmp_dump *d[2] = {bd, cd};
    for (int k = 0; k < 2; k++)
        if (!d[k]->complete)
            note(p, "The %s dump %s is incomplete (complete = 0: the step was not closed cleanly); "
                    "compared what it holds.", side[k], d[k]->path);
    if (bd->step >= 0 && cd->step >= 0 && bd->step != cd->step)
        note(p, "Steps differ between the two files (bench step %lld, cmp step %lld).",
             (long long)bd->step, (long long)cd->step);
    for (int k = 0; k < 2; k++)
        if (d[k]->n_entries && !d[k]->n_calls)
            note(p, "The %s dump %s has no /calls table: calls are taken from the leaf names; "
                    "module paths, callsites and the order of modules are unknown.", side[k],
                 d[k]->path);
    if (r->o->single_ref)
        note(p, "Against a single-process run (--single-ref): this rank's reduced gradients (and "
                "at step 0 its parameters) only; activations come from the rank's shard of the "
                "batch.");
    else if (bd->rank >= 0 && cd->rank >= 0 && bd->rank != cd->rank)
        note(p, "Ranks differ between the two files (bench rank %lld, cmp rank %lld).",
             (long long)bd->rank, (long long)cd->rank);
    return NP_OK;
}

/* pair: match the two sides' entries into rows; in tensor mode each row
 * gets its metrics record (a statistics row stays small). */
static np_status stage_pair(cmp_run *r, np_error *err)
{
    np_cmp_pair *p = r->p;
    cmp_pair_priv *pv = r->pv;
    np_status st = cmp_match(p, &r->bd, &r->cd, &r->bench_names, r->o->fuzzy, r->map, &pv->arena,
                             err);
    np_strmap_free(&r->bench_names);
    if (st != NP_OK || p->mode != NP_CMP_MODE_TENSOR)
        return st;
    pv->metrics = malloc((p->n_rows + 1) * sizeof *pv->metrics);
    pv->payload = calloc(p->n_rows + 1, 1);
    if (!pv->metrics || !pv->payload)
        return np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory for %zu rows", p->n_rows);
    for (size_t i = 0; i < p->n_rows; i++) {
        p->rows[i].m = &pv->metrics[i];
        metrics_nan(p->rows[i].m);
        p->rows[i].m->n = p->rows[i].m->n_masked = p->rows[i].m->n_mask_mismatch = 0;
    }
    return NP_OK;
}

/* calls: the pair's call list and its gaps; the /calls records are then
 * no longer needed (their strings stay in the arena). */
static np_status stage_calls(cmp_run *r, np_error *err)
{
    np_status st = build_calls(r->p, &r->bd, &r->cd, err);
    if (st == NP_OK)
        st = find_gaps(r->p, &r->bd, &r->cd, err);
    if (st != NP_OK)
        return st;
    free(r->pv->bench_calls);
    free(r->pv->cmp_calls);
    r->pv->bench_calls = r->pv->cmp_calls = NULL;
    r->bd.calls = r->cd.calls = NULL;
    r->bd.n_calls = r->cd.n_calls = 0;
    return NP_OK;
}

static int when_tensor(const cmp_run *r) { return r->p->mode == NP_CMP_MODE_TENSOR; }

/* metrics (tensor mode): every paired payload read and measured. */
static np_status stage_metrics(cmp_run *r, np_error *err)
{
    (void)err;
    np_cmp_pair *p = r->p;
    np_status st = compare_payloads(p, &r->bd, &r->cd, r->pair_index, r->n_pairs, r->o);
    size_t n_bad[3] = {0};
    for (size_t i = 0; i < p->n_rows; i++)
        n_bad[r->pv->payload[i]]++;
    if (n_bad[CMP_PAYLOAD_CORRUPT])
        note(p, "%zu payload(s) do not match their crc32 in /entries (file corrupt): those rows "
                "are errors, left out of the root cause.", n_bad[CMP_PAYLOAD_CORRUPT]);
    if (n_bad[CMP_PAYLOAD_UNREADABLE])
        note(p, "%zu payload(s) could not be read (missing from /data or unreadable): those "
                "rows are errors, left out of the root cause.", n_bad[CMP_PAYLOAD_UNREADABLE]);
    return st;
}

static np_status stage_verdicts(cmp_run *r, np_error *err)
{
    (void)err;
    cmp_run_sides sides = {&r->bd, &r->cd};
    cmp_verdicts(r->p, r->o, &sides, r->pair_index, r->n_pairs);
    cmp_near_ties(r->p, &sides);
    cmp_noise_quotients(r->p, &sides);
    return NP_OK;
}

/* root cause: the walk over the calls (verdict.c); a sharded side's calls
 * with Local() leaves left out are marked first (their inputs unknown). */
static np_status stage_root_cause(cmp_run *r, np_error *err)
{
    np_cmp_pair *p = r->p;
    cmp_pair_priv *pv = r->pv;
    pv->local_io = NULL;
    for (size_t k = 0; k < p->n_calls && (r->cd.assembly || r->bd.assembly); k++) {
        int io = cmp_assembly_local_io(&r->cd, p->calls[k].name) |
                 cmp_assembly_local_io(&r->bd, p->calls[k].name);
        if (!io)
            continue;
        if (!pv->local_io) {
            pv->local_io = cmp_arena_alloc(&pv->arena, p->n_calls, 1);
            if (!pv->local_io)
                return np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory");
            memset(pv->local_io, 0, p->n_calls);
        }
        pv->local_io[k] = (unsigned char)io;
    }
    return cmp_root_cause(p, err);
}

static np_status stage_replay(cmp_run *r, np_error *err)
{
    r->pv->cmp_side = &r->cd; /* a pipeline's stage files */
    np_status st = cmp_isolated(r->p, r->o->no_replay, r->o->replay_all, err);
    r->pv->cmp_side = NULL;
    return st;
}

/* A sharded cmp side: the first culprit's reason names the ranks whose
 * pieces of its first failing assembled leaf differ from the bench. */
static int when_shards(const cmp_run *r)
{
    return r->cd.assembly && r->p->n_culprits && r->p->mode == NP_CMP_MODE_TENSOR;
}

static np_status stage_shards(cmp_run *r, np_error *err)
{
    np_cmp_pair *p = r->p;
    int ci = p->culprits[0];
    np_cmp_call *c = &p->calls[ci];
    for (size_t i = 0; i < p->n_rows; i++) {
        const np_cmp_row *row = &p->rows[i];
        if (row->call_index != ci || row->verdict != NP_VERDICT_ERROR || !row->bench || !row->cmp)
            continue;
        const char *who = cmp_assembly_blame(&r->cd, row->cmp, &r->bd, row->bench,
                                             &r->pv->arena, err);
        if (who && *who) {
            c->reason = cmp_arena_printf(&r->pv->arena, "%s; the rank(s) whose piece of %s "
                                         "differs from the bench: %s", c->reason, row->cmp->name,
                                         who);
            break;
        }
    }
    return NP_OK;
}

static np_status stage_gaps(cmp_run *r, np_error *err) { return cmp_gaps(r->p, err); }

static np_status stage_subthreshold(cmp_run *r, np_error *err) { return cmp_subthreshold(r->p, err); }

static np_status stage_paired_nothing(cmp_run *r, np_error *err)
{
    (void)err;
    if (np_cmp_pair_paired_nothing(r->p))
        note(r->p, "Nothing was paired: no leaf of the cmp dump (%zu) matched one of the bench "
                   "(%zu), so nothing was compared, which is not a pass. If the names differ only "
                   "in their call counters try --fuzzy; if modules or APIs were renamed give "
                   "--mapping FILE.", r->cd.n_entries, r->bd.n_entries);
    return NP_OK;
}

/* The chain, in order (docs/DEVELOPING.md, "compare as stages"). */
static const cmp_stage chain[] = {
    {"read", stage_read, NULL},
    {"select", stage_select_dp, when_single_ref},
    {"assemble", stage_assemble, when_assembler},
    {"describe", stage_describe, NULL},
    {"pair", stage_pair, NULL},
    {"calls", stage_calls, NULL},
    {"metrics", stage_metrics, when_tensor},
    {"verdicts", stage_verdicts, NULL},
    {"replicas", cmp_stage_replicas, cmp_when_replicas},
    {"pipeline", cmp_stage_p2p, cmp_when_p2p},
    {"root cause", stage_root_cause, NULL},
    {"replay", stage_replay, NULL},
    {"shards", stage_shards, when_shards},
    {"gaps", stage_gaps, NULL},
    {"sub-threshold", stage_subthreshold, NULL},
    {"paired nothing", stage_paired_nothing, NULL},
};

np_status cmp_run_stages(cmp_run *r, np_error *err)
{
    np_status st = NP_OK;
    for (size_t i = 0; st == NP_OK && i < sizeof chain / sizeof chain[0]; i++)
        if (!chain[i].when || chain[i].when(r))
            st = chain[i].run(r, err);
    np_strmap_free(&r->bench_names);
    cmp_dump_close(&r->bd);
    cmp_dump_close(&r->cd);
    if (st != NP_OK)
        np_cmp_pair_free(r->p);
    else
        pair_digest(r->p);
    return st;
}

/* One pair of files through the chain into *p. */
static np_status compare_files(np_cmp_pair *p, const pair_files *pf, const np_cmp_options *o,
                               const cmp_mapping *map, int pair_index, int n_pairs, np_error *err)
{
    memset(p, 0, sizeof *p);
    p->step = p->rank = p->stage = -1;
    snprintf(p->bench_path, sizeof p->bench_path, "%s", pf->bench->path);
    snprintf(p->cmp_path, sizeof p->cmp_path, "%s", pf->cmp->path);
    cmp_pair_priv *pv = calloc(1, sizeof *pv);
    if (!pv)
        return np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory");
    p->priv = pv;
    pv->prev_bench = pf->prev_bench;
    pv->prev_cmp = pf->prev_cmp;
    cmp_run r = {.p = p, .pv = pv, .bench_ref = pf->bench, .cmp_ref = pf->cmp, .flags = pf->flags,
                 .o = o, .map = map, .pair_index = pair_index, .n_pairs = n_pairs,
                 .rep = pf->rep};
    return cmp_run_stages(&r, err);
}

/* What a side's file says against itself (noted, naming the file; each
 * makes the pair count as a difference, np_cmp_has_differences): root
 * attributes outside the format, a /calls row that contradicts itself or
 * the entries, a step or rank attribute other than its folder's number
 * (the pairing goes by the folders: step{S}/rank{R}). */
static void file_defects(np_cmp_pair *p, const char *side, const cmp_dump *d,
                         const np_dumpio_ref *ref)
{
    if (d->attr_problems[0]) {
        note(p, "Dump defect in the %s file %s: root attribute %s.", side, d->path,
             d->attr_problems);
        p->dump_defects++;
    }
    if (d->n_call_problems) {
        note(p, "Dump defect in the %s file %s: %s%s; the call tree of this file is not "
                "reliable.", side, d->path, d->call_problem,
             d->n_call_problems > 1 ? " (and more /calls rows)" : "");
        p->dump_defects++;
    }
    if (ref->step >= 0 && d->step >= 0 && ref->step != d->step) {
        note(p, "Dump defect in the %s file %s: its step attribute is %lld but its folder is "
                "step%d (paired by the folder).", side, d->path, (long long)d->step, ref->step);
        p->dump_defects++;
    }
    if (ref->rank >= 0 && d->rank >= 0 && ref->rank != d->rank) {
        note(p, "Dump defect in the %s file %s: its rank attribute is %lld but its folder is "
                "rank%d (paired by the folder).", side, d->path, (long long)d->rank, ref->rank);
        p->dump_defects++;
    }
}

/* The step file at `path` as a ref of its detected format (*refs is the
 * caller's, free()); a path that is not one file stays as it is, for the
 * open to refuse. */
static np_status file_ref(np_dumpio_ref **refs, np_dumpio_ref *one, const char *path,
                          np_error *err)
{
    size_t n = 0;
    *refs = NULL;
    np_error e;
    np_error_clear(&e);
    np_status st = np_dumpio_find(refs, &n, path, &e);
    if (st == NP_OK && n == 1 && strcmp((*refs)[0].path, path) == 0) {
        *one = (*refs)[0];
        return NP_OK;
    }
    if (st == NP_ERR_NOTFOUND && access(path, F_OK) != 0)
        return np_error_set(err, st, e.file, NULL, "%s", e.text);
    memset(one, 0, sizeof *one);
    one->path = path;
    one->step = one->rank = -1;
    one->source = np_dumpio_sources()[0];
    return NP_OK;
}

np_status np_cmp_compare_files(np_cmp_pair *out, const char *bench_h5, const char *cmp_h5,
                               const np_cmp_options *opts, np_error *err)
{
    np_cmp_options o;
    if (opts)
        o = *opts;
    else
        np_cmp_options_init(&o);
    memset(out, 0, sizeof *out);
    cmp_mapping *map = NULL;
    np_dumpio_ref *rb = NULL, *rc = NULL, two[2];
    np_dumpio_checker *chk = NULL;
    np_status st = NP_OK;
    if (o.mapping_path)
        st = cmp_mapping_load(&map, o.mapping_path, err);
    if (st == NP_OK)
        st = file_ref(&rb, &two[0], bench_h5, err);
    if (st == NP_OK)
        st = file_ref(&rc, &two[1], cmp_h5, err);
    if (st == NP_OK)
        st = np_dumpio_checker_start(&chk, two, 2, err);
    if (st == NP_OK) {
        /* both walks run at once; the bench file's error first */
        np_error cerr;
        np_error_clear(&cerr);
        st = np_dumpio_checker_wait(chk, 0, err);
        np_status cst = np_dumpio_checker_wait(chk, 1, &cerr);
        if (st == NP_OK && cst != NP_OK) {
            if (err)
                *err = cerr;
            st = cst;
        }
    }
    if (st == NP_OK) {
        pair_files pf = {&two[0], &two[1], NP_DUMPIO_CHECKED, NULL, NULL, NULL};
        st = compare_files(out, &pf, &o, map, 0, 1, err);
    }
    np_dumpio_checker_free(chk);
    free(rb);
    free(rc);
    cmp_mapping_free(map);
    return st;
}

/* ---- resolving a side -------------------------------------------------------- */

/* One (step, rank) of a side: its best file (np_dumpio_find sorts a
 * complete file first). */
typedef struct unit {
    int step, rank;
    int temp_only;            /* 1: only a temporary/partial file was found; 2: none at all */
    const np_dumpio_ref *ref;
} unit;

typedef struct side_files {
    np_dumpio_ref *refs;      /* np_dumpio_find's result */
    size_t n_refs;
    unit *u;                  /* sorted by step, rank */
    size_t n;
} side_files;

static void side_free(side_files *s)
{
    free(s->refs);
    free(s->u);
    memset(s, 0, sizeof *s);
}

static np_status resolve(side_files *s, const char *input, np_error *err)
{
    memset(s, 0, sizeof *s);
    np_status st = np_dumpio_find(&s->refs, &s->n_refs, input, err);
    if (st != NP_OK)
        return st;
    if (!(s->u = calloc(s->n_refs, sizeof *s->u)))
        return np_error_set(err, NP_ERR_NOMEM, input, NULL, "out of memory");
    struct stat sb;
    int one_file = stat(input, &sb) == 0 && S_ISREG(sb.st_mode);
    for (size_t i = 0; i < s->n_refs; i++) {
        const np_dumpio_ref *r = &s->refs[i];
        if (s->n && s->u[s->n - 1].step == r->step && s->u[s->n - 1].rank == r->rank)
            continue; /* the best file of this step and rank came first */
        int temp = r->state == NP_DUMPIO_COMPLETE || one_file ? 0
                   : r->state == NP_DUMPIO_MISSING             ? 2
                                                               : 1;
        s->u[s->n++] = (unit){r->step, r->rank, temp, r};
    }
    return NP_OK;
}

/* A side given as one file, paired against a directory: it must be a
 * readable dump (else its own error, not "present on one side only"), and
 * the step and rank its path does not give come from its root information. */
static np_status number_single_file(side_files *s, const char *input, np_error *err)
{
    struct stat sb;
    if (s->n != 1 || stat(input, &sb) != 0 || !S_ISREG(sb.st_mode) ||
        (s->u[0].step >= 0 && s->u[0].rank >= 0))
        return NP_OK;
    np_dumpio *d = NULL;
    np_status st = np_dumpio_open_ref(&d, s->u[0].ref, 0, err);
    if (st == NP_OK) {
        const np_dumpio_info *in = np_dumpio_get_info(d);
        if (s->u[0].step < 0)
            s->u[0].step = (int)in->step;
        if (s->u[0].rank < 0)
            s->u[0].rank = (int)in->rank;
        np_dumpio_close(d);
    }
    return st;
}

/* The pipeline stage a unit's file holds (the stage its placement rows
 * carry), -1 none or unreadable, or a file of the runtime's (its stages
 * are merged whole by the assembly of the lowest rank's). */
static int unit_stage(const unit *u)
{
    np_dumpio *d = NULL;
    np_place_rec *pl = NULL;
    size_t n = 0;
    int stage = -1;
    np_error e;
    np_error_clear(&e);
    if (!u->temp_only && np_dumpio_open_ref(&d, u->ref, 0, &e) == NP_OK &&
        strcmp(np_dumpio_get_info(d)->framework, "nprobe-runtime") != 0 &&
        np_dumpio_read_placements(&pl, &n, d, &e) == NP_OK)
        for (size_t i = 0; i < n && stage < 0; i++)
            stage = pl[i].stage;
    free(pl);
    np_dumpio_close(d);
    return stage;
}

/* A side whose files carry a device mesh (format version 2) is a sharded
 * layout: its ranks of a step are one logical step, assembled from all of
 * them (assemble.c), so it pairs by step through its lowest rank; a
 * pipeline's through the lowest rank of each stage (each stage's file
 * holds its own layers). Returns 0 when not sharded, 1 when sharded, 2
 * when a step keeps several stages. */
static int fold_sharded(side_files *s)
{
    size_t i = 0;
    while (i < s->n && s->u[i].temp_only)
        i++;
    if (i == s->n)
        return 0;
    np_dumpio *d = NULL;
    np_error e;
    np_error_clear(&e);
    if (np_dumpio_open_ref(&d, s->u[i].ref, 0, &e) != NP_OK)
        return 0; /* the pair's own open reports it */
    int sharded = np_dumpio_get_info(d)->mesh_ndim > 0;
    np_dumpio_close(d);
    if (!sharded)
        return 0;
    int *stage = calloc(s->n + 1, sizeof *stage);
    size_t k = 0, first = 0; /* first: the step's first unit kept */
    int several = 0;
    for (size_t j = 0; j < s->n; j++) {
        if (k == 0 || s->u[k - 1].step != s->u[j].step) {
            first = k;
            if (stage)
                stage[k] = unit_stage(&s->u[j]);
            s->u[k++] = s->u[j];
            continue;
        }
        int st = stage && stage[first] >= 0 ? unit_stage(&s->u[j]) : -1;
        int seen = st < 0;
        for (size_t q = first; q < k && !seen; q++)
            seen = stage[q] == st;
        if (!seen) {
            stage[k] = st;
            s->u[k++] = s->u[j];
            several = 1;
        }
    }
    s->n = k;
    free(stage);
    return several ? 2 : 1;
}

/* 1 when the side holds one rank a step. */
static int one_rank_each_step(const side_files *s)
{
    for (size_t i = 1; i < s->n; i++)
        if (s->u[i].step == s->u[i - 1].step)
            return 0;
    return 1;
}

/* 1 when some step of the side has two or more complete ranks and the
 * files are the nprobe runtime's: its gradient leaves are the reduced ones
 * (identical replicas); a framework's hooks may record them before the
 * reduction (PyTorch DDP), where ranks differ by design. */
static int several_ranks(const side_files *s)
{
    for (size_t i = 1; i < s->n; i++)
        if (s->u[i].step == s->u[i - 1].step && !s->u[i].temp_only && !s->u[i - 1].temp_only) {
            np_dumpio *d = NULL;
            np_error e;
            np_error_clear(&e);
            if (np_dumpio_open_ref(&d, s->u[i].ref, 0, &e) != NP_OK)
                return 0;
            int ours = !strcmp(np_dumpio_get_info(d)->framework, "nprobe-runtime");
            np_dumpio_close(d);
            return ours;
        }
    return 0;
}

/* The replicas check of the cmp side (np_rep_check); 0 when it could not
 * run (nothing to add to the pairs then: --replicas says why). */
static int check_replicas(np_rep_result *rep, const char *cmp)
{
    np_error e;
    np_error_clear(&e);
    memset(rep, 0, sizeof *rep);
    if (np_rep_check(rep, cmp, &e) == NP_OK)
        return 1;
    np_rep_result_free(rep);
    return 0;
}

struct np_cmp_replicas {
    int state;          /* 0: not run yet; 1: rep holds the check; -1: no check */
    np_rep_result rep;
};

np_cmp_replicas *np_cmp_replicas_new(void)
{
    return calloc(1, sizeof(np_cmp_replicas));
}

void np_cmp_replicas_free(np_cmp_replicas *c)
{
    if (!c)
        return;
    np_rep_result_free(&c->rep);
    free(c);
}

/* The replica check for this run, NULL when there is none (a sharded or
 * one-rank cmp side, a framework's dump, a check that could not run): the
 * cache's when it holds one, else run here into the cache or into *own
 * (then the caller's to free). */
static const np_rep_result *replicas_for(np_cmp_replicas *cache, np_rep_result *own,
                                         const side_files *lc, int cmp_sharded, const char *cmp)
{
    if (cache && cache->state)
        return cache->state > 0 ? &cache->rep : NULL;
    np_rep_result *rep = cache ? &cache->rep : own;
    int ok = !cmp_sharded && several_ranks(lc) && check_replicas(rep, cmp);
    if (cache)
        cache->state = ok ? 1 : -1;
    return ok ? rep : NULL;
}

static int unit_order(const void *x, const void *y)
{
    const unit *a = x, *b = y;
    if (a->step != b->step)
        return a->step < b->step ? -1 : 1;
    return a->rank < b->rank ? -1 : a->rank > b->rank;
}

/* A (step, rank) to compare and each side's unit there (NULL: none). */
typedef struct pair_key {
    int step, rank;
    const unit *b, *c;
    size_t check;             /* index of the bench file in the checker; cmp is check + 1 */
} pair_key;

/* The keys of both sides, merged in (step, rank) order: one pair when each
 * side is a single file. *out is the caller's. */
static int key_order(const void *x, const void *y)
{
    const pair_key *a = x, *b = y;
    if (a->step != b->step)
        return a->step < b->step ? -1 : 1;
    return a->rank < b->rank ? -1 : a->rank > b->rank;
}

/* single_ref: every cmp unit with the bench's unit of its step (the bench
 * holds one rank per step, checked by the caller), then the bench's steps
 * the cmp side lacks. */
static void single_ref_keys(pair_key *out, size_t *n, const side_files *lb, const side_files *lc)
{
    for (size_t j = 0; j < lc->n; j++) {
        const unit *b = NULL;
        for (size_t i = 0; i < lb->n && !b; i++)
            if (lb->u[i].step == lc->u[j].step)
                b = &lb->u[i];
        out[(*n)++] = (pair_key){lc->u[j].step, lc->u[j].rank, b, &lc->u[j], 0};
    }
    for (size_t i = 0; i < lb->n; i++) {
        int seen = 0;
        for (size_t j = 0; j < lc->n && !seen; j++)
            seen = lc->u[j].step == lb->u[i].step;
        if (!seen)
            out[(*n)++] = (pair_key){lb->u[i].step, lb->u[i].rank, &lb->u[i], NULL, 0};
    }
    qsort(out, *n, sizeof *out, key_order);
}

static int merge_keys(pair_key **out, size_t *n, const side_files *lb, const side_files *lc,
                      int single_ref)
{
    *n = 0;
    *out = calloc(lb->n + lc->n + 1, sizeof **out);
    if (!*out)
        return -1;
    if (single_ref) { /* also a pipeline's stages against one process */
        single_ref_keys(*out, n, lb, lc);
        return 0;
    }
    if (lb->n == 1 && lc->n == 1) {
        (*out)[(*n)++] = (pair_key){lc->u[0].step, lc->u[0].rank, &lb->u[0], &lc->u[0], 0};
        return 0;
    }
    size_t i = 0, j = 0;
    while (i < lb->n || j < lc->n) {
        int o = i == lb->n ? 1 : j == lc->n ? -1 : unit_order(&lb->u[i], &lc->u[j]);
        const unit *b = o <= 0 ? &lb->u[i++] : NULL;
        const unit *c = o >= 0 ? &lc->u[j++] : NULL;
        const unit *k = b ? b : c;
        (*out)[(*n)++] = (pair_key){k->step, k->rank, b, c, 0};
    }
    return 0;
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

int np_cmp_pair_paired_nothing(const np_cmp_pair *p)
{
    return p->count_match[NP_MATCH_EXACT] + p->count_match[NP_MATCH_FUZZY] +
               p->count_match[NP_MATCH_MAPPING] ==
           0;
}

int np_cmp_has_differences(const np_cmp_result *r)
{
    if (r->n_issues)
        return 1;
    for (size_t i = 0; i < r->n_pairs; i++)
        if (r->pairs[i].count_verdict[NP_VERDICT_ERROR] || r->pairs[i].bench_incomplete ||
            r->pairs[i].cmp_incomplete || r->pairs[i].n_culprits || r->pairs[i].dump_defects ||
            r->pairs[i].replica_diffs ||
            np_cmp_pair_paired_nothing(&r->pairs[i]))
            return 1;
    return 0;
}

static const char *const side_names[2] = {"bench", "cmp"};

static int selected(const np_cmp_options *o, int step, int rank)
{
    return (o->step < 0 || step == o->step) && (o->rank < 0 || rank == o->rank);
}

/* An issue for a side of key k that cannot be compared; 1 if there was one. */
static int side_issue(np_cmp_result *r, const pair_key *k, int side, const char *const inputs[2])
{
    const unit *u = side ? k->c : k->b;
    int s = k->step, q = k->rank;
    char lay[512], files[128];
    np_dumpio_layouts(lay, sizeof lay, files, sizeof files);
    if (!u)
        add_issue(r, NP_ERR_NOTFOUND, s, q,
                  "step %d rank %d: present on the %s side only; the %s side (%s) has no dump of "
                  "step %d rank %d (looked for %s)",
                  s, q, side_names[!side], side_names[side], inputs[side], s, q, lay);
    else if (u->temp_only == 2)
        add_issue(r, NP_ERR_NOTFOUND, s, q,
                  "%s: step %d rank %d of the %s side has no dump file (no %s, no %s.partial)",
                  u->ref->path, s, q, side_names[side], files, NP_FMT_FILE);
    else if (u->temp_only)
        add_issue(r, NP_ERR_INCOMPLETE, s, q,
                  "%s: step %d rank %d of the %s side is incomplete: only a temporary or partial "
                  "file, no closed %s (the run stopped during this step)",
                  u->ref->path, s, q, side_names[side], NP_FMT_FILE);
    return !u || u->temp_only;
}

/* The files of the selected pairs that will be opened, bench and cmp of a
 * pair side by side, in order: their walks run ahead of the compare. */
static np_status start_checks(np_dumpio_checker **chk, np_dumpio_ref **files, pair_key *keys,
                              size_t n_keys, const np_cmp_options *o, np_error *err)
{
    *files = malloc((2 * n_keys + 1) * sizeof **files);
    if (!*files)
        return np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < n_keys; i++) {
        pair_key *k = &keys[i];
        if (!selected(o, k->step, k->rank) || !k->b || !k->c || k->b->temp_only ||
            k->c->temp_only)
            continue;
        k->check = n;
        (*files)[n++] = *k->b->ref;
        (*files)[n++] = *k->c->ref;
    }
    return np_dumpio_checker_start(chk, *files, n, err);
}

/* Compare the pair of key k (walked by the checker) into r. */
static void compare_key(np_cmp_result *r, const pair_key *k, const pair_key *prev,
                        np_dumpio_checker *chk, const np_dumpio_ref *files,
                        const cmp_mapping *map, int idx, int n_sel, int single,
                        const np_rep_result *rep)
{
    np_error e;
    np_error_clear(&e);
    np_cmp_pair *p = &r->pairs[r->n_pairs];
    np_status st = np_dumpio_checker_wait(chk, k->check, &e);
    if (st == NP_OK)
        st = np_dumpio_checker_wait(chk, k->check + 1, &e);
    pair_files pf = {&files[k->check], &files[k->check + 1], NP_DUMPIO_CHECKED, rep,
                     prev ? prev->b->ref : NULL, prev ? prev->c->ref : NULL};
    if (st == NP_OK)
        st = compare_files(p, &pf, &r->opts, map, idx, n_sel, &e);
    if (st != NP_OK) {
        add_issue(r, e.status, k->step, k->rank, "%s%s%s%s%s", e.file, e.file[0] ? ": " : "",
                  e.key, e.key[0] ? ": " : "", e.text);
        return;
    }
    if (!single) {
        p->step = k->step;
        p->rank = k->rank;
    }
    if (p->step < 0)
        p->step = 0;
    if (p->rank < 0)
        p->rank = 0;
    r->n_pairs++;
}

/* The key of the same rank at the step before k's (step - 1) with a
 * complete file on both sides, or NULL. */
static const pair_key *prev_key(const pair_key *keys, size_t n, const pair_key *k)
{
    for (size_t i = 0; k->step > 0 && i < n; i++) {
        const pair_key *q = &keys[i];
        if (q->step == k->step - 1 && q->rank == k->rank && q->b && q->c && !q->b->temp_only &&
            !q->c->temp_only)
            return q;
    }
    return NULL;
}

/* single_ref: the bench must be a single-process run. */
static np_status one_rank_per_step(const side_files *lb, const char *bench, np_error *err)
{
    for (size_t i = 1; i < lb->n; i++)
        if (lb->u[i].step == lb->u[i - 1].step)
            return np_error_set(err, NP_ERR_ARG, bench, NULL,
                                "--single-ref: the bench holds ranks %d and %d of step %d; "
                                "expected a single-process run (one rank per step)",
                                lb->u[i - 1].rank, lb->u[i].rank, lb->u[i].step);
    return NP_OK;
}

/* "steps 0, 1, 5; ranks 0": what the two sides hold, for a selection that
 * matched nothing. */
static void list_keys(char *have, size_t cap, const pair_key *keys, size_t n)
{
    size_t hn = 0;
    have[0] = '\0';
    for (int what = 0; what < 2; what++) {
        int first = 1;
        hn += (size_t)snprintf(have + hn, cap - hn, "%s", what ? "; ranks" : "steps");
        /* each number once; the text stays well inside `have` */
        for (size_t i = 0; i < n && hn < cap / 2; i++) {
            int v = what ? keys[i].rank : keys[i].step;
            int seen = 0;
            for (size_t j = 0; j < i && !seen; j++)
                seen = (what ? keys[j].rank : keys[j].step) == v;
            if (seen)
                continue;
            hn += (size_t)snprintf(have + hn, cap - hn, "%s %d", first ? "" : ",", v);
            first = 0;
        }
    }
}

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
    side_files lb = {0}, lc = {0};
    pair_key *keys = NULL;
    size_t n_keys = 0, n_sel = 0;
    np_dumpio_ref *files = NULL;
    np_dumpio_checker *chk = NULL;
    cmp_mapping *map = NULL;
    np_status st = NP_OK;
    if (r->opts.mapping_path && (st = cmp_mapping_load(&map, r->opts.mapping_path, err)) != NP_OK)
        goto fail;
    if ((st = resolve(&lb, bench, err)) != NP_OK || (st = resolve(&lc, cmp, err)) != NP_OK)
        goto fail;
    fold_sharded(&lb);
    int cmp_sharded = fold_sharded(&lc);
    int single = lb.n == 1 && lc.n == 1;
    if (!single && ((st = number_single_file(&lb, bench, err)) != NP_OK ||
                    (st = number_single_file(&lc, cmp, err)) != NP_OK))
        goto fail;
    if (r->opts.single_ref && (st = one_rank_per_step(&lb, bench, err)) != NP_OK)
        goto fail;
    /* a pipeline's stages each against the one-process run of the step */
    int by_step = r->opts.single_ref || (cmp_sharded == 2 && one_rank_each_step(&lb));
    if (merge_keys(&keys, &n_keys, &lb, &lc, by_step) != 0) {
        st = np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < n_keys; i++)
        n_sel += (size_t)selected(&r->opts, keys[i].step, keys[i].rank);
    if (n_sel == 0) {
        char have[512];
        list_keys(have, sizeof have, keys, n_keys);
        st = np_error_set(err, NP_ERR_NOTFOUND, NULL, NULL,
                          "compare: no step/rank selected%s (the two sides hold %s)",
                          r->opts.step >= 0 || r->opts.rank >= 0 ? " by --step/--rank" : "", have);
        goto fail;
    }
    if (!(r->pairs = calloc(n_sel + 1, sizeof *r->pairs))) {
        st = np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory");
        goto fail;
    }
    if ((st = start_checks(&chk, &files, keys, n_keys, &r->opts, err)) != NP_OK)
        goto fail;
    const char *inputs[2] = {bench, cmp};
    /* several ranks of a step on the cmp side (data parallel, not a sharded
     * layout): their replicas and collectives checked against each other */
    np_rep_result own;
    const np_rep_result *rep = replicas_for(r->opts.replicas, &own, &lc, cmp_sharded, cmp);
    /* the one-sided pairs first: every report (written as its pair is done,
     * see on_pair) lists them all */
    for (size_t i = 0; i < n_keys; i++)
        if (selected(&r->opts, keys[i].step, keys[i].rank)) {
            side_issue(r, &keys[i], 0, inputs);
            side_issue(r, &keys[i], 1, inputs);
        }
    int idx = 0;
    for (size_t i = 0; i < n_keys; i++) {
        const pair_key *k = &keys[i];
        if (!selected(&r->opts, k->step, k->rank))
            continue;
        int skip = !k->b || !k->c || k->b->temp_only || k->c->temp_only;
        size_t before = r->n_pairs;
        if (!skip)
            compare_key(r, k, prev_key(keys, n_keys, k), chk, files, map, idx, (int)n_sel,
                        single, rep);
        idx++;
        if (r->n_pairs > before && r->opts.on_pair &&
            r->opts.on_pair(r, r->n_pairs - 1, r->opts.on_pair_user) != 0)
            break; /* the caller stopped the run */
    }
    if (rep == &own)
        np_rep_result_free(&own);
    *out = r;
    r = NULL;
fail:
    np_dumpio_checker_free(chk);
    free(files);
    free(keys);
    side_free(&lb);
    side_free(&lc);
    cmp_mapping_free(map);
    np_cmp_result_free(r);
    return st;
}
