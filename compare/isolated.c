/* compare/isolated.c - the isolated error of each call (nprobe replay,
 * include/internal/nprobe/replay.h) in compare's root cause (docs/COMPARE.md,
 * "Isolated error in the root cause"). When the run under test is a tensor
 * dump, each of its API calls is recomputed in float64 from its own dumped
 * inputs: a call whose isolated error exceeds its budget is a culprit even
 * when its accumulated difference against the reference stays below the
 * noise level; a culprit of the accumulated error whose isolated error is
 * clean stays the culprit, with a reason saying so (its arguments differ:
 * a scalar, a missing bias). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"
#include "nprobe/replay.h"

static void set_reason(np_cmp_call *c, cmp_arena *a, const char *text)
{
    const char *s = cmp_arena_strdup(a, text);
    if (s)
        c->reason = s;
}

/* Mark the modules enclosing call k as holding a culprit. */
static void mark_parents(np_cmp_pair *p, const np_strmap *byname, size_t k)
{
    const char *par = p->calls[k].parent;
    for (int d = 0; par && par[0] && d < 64; d++) {
        int j = np_strmap_get(byname, par);
        if (j < 0 || (size_t)j == k)
            break;
        if (p->calls[j].status != NP_CALL_PASS) {
            p->calls[j].status = NP_CALL_CONTAINS;
            p->calls[j].reason = "a call inside this module is the culprit";
        }
        par = p->calls[j].parent;
    }
}

/* The three-way rule (docs/COMPARE.md, "Three-way verdicts"): a call is a
 * culprit by its isolated error only when that error is above its budget
 * (the dtype's level) and more than NP_ISO_FACTOR times the reference's
 * own isolated error for the same call, both as multiples of their budgets
 * (each side's error measured in its own dtype's rounding unit). */
#define NP_ISO_FACTOR 4.0

/* The replayed calls of some results by name (the first of a name wins). */
typedef struct call_index {
    const np_replay_call **v;
    size_t n;
    np_strmap map;
    int ok;
} call_index;

static void index_calls(call_index *x, np_replay_result *const *rs, int n)
{
    size_t total = 0;
    memset(x, 0, sizeof *x);
    for (int i = 0; i < n; i++)
        total += rs[i] ? rs[i]->n_calls : 0;
    x->v = malloc((total + 1) * sizeof *x->v);
    x->ok = x->v && np_strmap_init(&x->map, total * 2 + 16) == 0;
    for (int i = 0; x->ok && i < n; i++)
        for (size_t c = 0; rs[i] && c < rs[i]->n_calls; c++)
            if (np_strmap_get(&x->map, rs[i]->calls[c].name) < 0) {
                x->v[x->n] = &rs[i]->calls[c];
                np_strmap_put(&x->map, rs[i]->calls[c].name, (int)x->n++);
            }
}

static const np_replay_call *find_call(const call_index *x, const char *name)
{
    int j = x->ok ? np_strmap_get(&x->map, name) : -1;
    return j < 0 ? NULL : x->v[j];
}

static void index_free(call_index *x)
{
    if (x->ok)
        np_strmap_free(&x->map);
    free(x->v);
}

/* 1 when the three-way rule names the call (rc exceeds): the reference's
 * same call bc (NULL: not recomputable there) does not explain it. */
static int three_way(const np_replay_call *rc, const np_replay_call *bc)
{
    if (rc->status != NP_REPLAY_EXCEEDS)
        return 0;
    if (!bc || bc->status == NP_REPLAY_SKIPPED)
        return 1;
    if (rc->signature)
        return !bc->signature;
    return rc->ratio > NP_ISO_FACTOR * bc->ratio;
}

/* rs: the run under test's results, refs: the reference's (ref_ok: its
 * replay ran). */
static void apply(np_cmp_pair *p, np_replay_result *const *rs, int n_rs, const call_index *refs,
                  int ref_ok, const char *ref_why, const np_strmap *byname)
{
    cmp_pair_priv *pv = p->priv;
    char buf[900], rest[300];
    for (int ri = 0; ri < n_rs; ri++) {
    const np_replay_result *r = rs[ri];
    for (size_t i = 0; r && i < r->n_calls; i++) {
        const np_replay_call *rc = &r->calls[i];
        int k = np_strmap_get(byname, rc->name);
        if (k < 0 || rc->status == NP_REPLAY_SKIPPED)
            continue;
        np_cmp_call *c = &p->calls[k];
        c->iso_err = rc->err_units;
        c->iso_ratio = rc->ratio;
        const np_replay_call *bc = ref_ok ? find_call(refs, rc->name) : NULL;
        if (bc && bc->status != NP_REPLAY_SKIPPED) {
            c->ref_iso_err = bc->err_units;
            c->ref_iso_ratio = bc->ratio;
        }
        if (rc->status == NP_REPLAY_EXCEEDS && c->status != NP_CALL_CULPRIT) {
            if (bc && bc->status != NP_REPLAY_SKIPPED) {
                /* the reference's own call is as far from exact: torch's kernel
                 * and the float64 reference differ, not the two runs */
                if ((rc->signature && bc->signature) ||
                    (!rc->signature && !(rc->ratio > NP_ISO_FACTOR * bc->ratio)))
                    continue;
                snprintf(rest, sizeof rest,
                         "; the reference's same call: %.3g u, %.3g x its budget "
                         "(worse by %.3g, more than the factor %g)",
                         bc->err_units, bc->ratio, bc->ratio > 0 ? rc->ratio / bc->ratio : INFINITY,
                         NP_ISO_FACTOR);
            } else
                snprintf(rest, sizeof rest,
                         "; the reference has no recomputable data for this call (%.200s): "
                         "judged on its budget alone",
                         bc ? bc->reason : ref_why);
            if (rc->signature)
                snprintf(buf, sizeof buf,
                         "recomputed in float64 from its own dumped inputs, its isolated error "
                         "(%.3g u) is within its budget, but %.400s; accumulated severity %.3g%s%s",
                         rc->err_units, rc->reason, c->sev_out,
                         c->sev_out < 1 ? ", below the error level" : "", rest);
            else
                snprintf(buf, sizeof buf,
                         "isolated error %.3g u, %.3g x its budget (recomputed in float64 from "
                         "its own dumped inputs: %.350s)%s; accumulated severity %.3g%s",
                         rc->err_units, rc->ratio, rc->reason, rest, c->sev_out,
                         c->sev_out < 1 ? ", below the error level" : "");
            c->status = NP_CALL_CULPRIT;
            set_reason(c, &pv->arena, buf);
            mark_parents(p, byname, (size_t)k);
        } else if (rc->status == NP_REPLAY_PASS && c->status == NP_CALL_CULPRIT) {
            /* still the culprit: its arguments (a scalar, a missing input) differ */
            snprintf(buf, sizeof buf,
                     "%.400s; recomputed in float64 from its own dumped inputs and arguments "
                     "it is within %.3g u of exact: look at what it was called with",
                     c->reason, rc->err_units);
            set_reason(c, &pv->arena, buf);
        }
    }
    }
}

/* ---- what the verdict needs (docs/COMPARE.md, "What the replay
 * recomputes") ---------------------------------------------------------------- */

/* 1 when row i holds the same values on both sides: the same dtype and
 * shape, payloads read and equal element for element (NaN/Inf at the same
 * places), or a scalar argument of the same value. */
static int row_identical(const np_cmp_pair *p, size_t i)
{
    const np_cmp_row *r = &p->rows[i];
    const cmp_pair_priv *pv = p->priv;
    const np_cmp_side *b = r->bench, *c = r->cmp;
    if (!b || !c || strcmp(b->dtype, c->dtype) != 0 || r->verdict != NP_VERDICT_PASS)
        return 0;
    if (!strcmp(c->role, "kwargs"))
        return b->stats.max == c->stats.max || (isnan(b->stats.max) && isnan(c->stats.max));
    if (!r->m || (pv && pv->payload && pv->payload[i] != CMP_PAYLOAD_OK) || b->numel != c->numel ||
        !cmp_same_shape(b, c))
        return 0;
    return b->has_data && c->has_data && r->m->n_mask_mismatch == 0 &&
           (r->m->max_abs_err == 0 || (r->m->n == 0 && c->numel == 0));
}

/* FNV-1a over bytes. */
static uint64_t fnv(uint64_t h, const void *data, size_t n)
{
    const unsigned char *b = data;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* The identity of a tensor as the cmp side dumped it: its dtype, element
 * count, statistics and crc32 (an output and the input it becomes later
 * are the same bytes). */
static uint64_t leaf_key(const np_cmp_side *s)
{
    uint64_t h = fnv(14695981039346656037ull, s->dtype, strlen(s->dtype));
    double st[4] = {s->stats.max, s->stats.min, s->stats.mean, s->stats.norm};
    h = fnv(h, &s->numel, sizeof s->numel);
    h = fnv(h, st, sizeof st);
    return fnv(h, &s->crc32, sizeof s->crc32);
}

typedef struct key_call {
    uint64_t key;
    int call;
} key_call;

static int key_call_order(const void *x, const void *y)
{
    const key_call *a = x, *b = y;
    if (a->key != b->key)
        return a->key < b->key ? -1 : 1;
    return (a->call > b->call) - (a->call < b->call);
}

/* The latest API call before `k` with an output of key `key`, -1 if none. */
static int producer(const key_call *kc, size_t n, uint64_t key, int k)
{
    size_t lo = 0, hi = n; /* first element >= (key, k) */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (kc[mid].key < key || (kc[mid].key == key && kc[mid].call < k))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo > 0 && kc[lo - 1].key == key ? kc[lo - 1].call : -1;
}

/* The API calls whose isolated error the verdict needs: need[k] = 1.
 * Everything, except
 * - a call whose inputs (its forward's too, for a backward), scalar
 *   arguments and outputs are identical on both sides: both replays would
 *   give the same numbers, which the three-way rule never calls a culprit;
 * - a call after the first culprit of the accumulated walk whose inputs
 *   already fail (severity > 1) and that is no culprit itself: its error
 *   is explained as propagated, and its isolated error could only add a
 *   later culprit, never change the first (--replay-all recomputes them).
 * A call kept brings in the producers of its inputs (the latest earlier
 * API call with an output of the same bytes): an error born there below
 * the level is found where it starts. need[k] = 2 marks a call left out
 * after the first culprit (recomputed later when a call of its API is named
 * by the three-way rule: a kernel wrong at one call is wrong at the others).
 * Returns the number of those. */
static size_t select_calls(const np_cmp_pair *p, char *need, int replay_all)
{
    size_t nc = p->n_calls, n_late = 0;
    char *same = malloc(nc + 1);
    int *byname_fwd = malloc((nc + 1) * sizeof *byname_fwd);
    key_call *kc = malloc((p->n_rows + 1) * sizeof *kc);
    np_strmap names;
    int have_map = np_strmap_init(&names, nc * 2 + 16) == 0;
    for (size_t k = 0; k < nc; k++)
        need[k] = !strcmp(p->calls[k].kind, "api");
    if (!same || !byname_fwd || !kc || !have_map)
        goto out; /* out of memory: recompute every call */
    /* identical calls */
    for (size_t k = 0; k < nc; k++) {
        same[k] = p->calls[k].n_rows > 0;
        if (np_strmap_get(&names, p->calls[k].name) < 0)
            np_strmap_put(&names, p->calls[k].name, (int)k);
    }
    for (size_t i = 0; i < p->n_rows; i++) {
        int k = p->rows[i].call_index;
        if (k >= 0 && (size_t)k < nc && same[k] && !row_identical(p, i))
            same[k] = 0;
    }
    char fwd[2 * NP_FMT_NAME_LEN];
    for (size_t k = 0; k < nc; k++) {
        byname_fwd[k] = -1;
        if (p->calls[k].backward && cmp_forward_of(fwd, sizeof fwd, p->calls[k].name))
            byname_fwd[k] = np_strmap_get(&names, fwd);
    }
    /* a backward also recomputes from its forward's inputs: those must agree too */
    char *fwd_in_same = calloc(nc + 1, 1);
    if (!fwd_in_same)
        goto out;
    for (size_t k = 0; k < nc; k++)
        fwd_in_same[k] = 1;
    for (size_t i = 0; i < p->n_rows; i++) {
        const np_cmp_row *r = &p->rows[i];
        const np_cmp_side *s = r->cmp ? r->cmp : r->bench;
        if (r->call_index >= 0 && (size_t)r->call_index < nc && s && strcmp(s->role, "output") != 0 &&
            !row_identical(p, i))
            fwd_in_same[r->call_index] = 0;
    }
    for (size_t k = 0; k < nc; k++)
        if (need[k] && same[k] &&
            (!p->calls[k].backward || (byname_fwd[k] >= 0 && fwd_in_same[byname_fwd[k]])))
            need[k] = 0;
    free(fwd_in_same);
    if (replay_all)
        goto out;
    /* after the first culprit: calls whose inputs already fail */
    size_t first = p->n_culprits ? (size_t)p->culprits[0] : nc;
    for (size_t i = 0; i < p->n_culprits; i++)
        if ((size_t)p->culprits[i] < first)
            first = (size_t)p->culprits[i];
    char *late = calloc(nc + 1, 1);
    if (!late)
        goto out;
    for (size_t k = first + 1; k < nc; k++)
        if (need[k] && p->calls[k].sev_in > 1 && p->calls[k].status != NP_CALL_CULPRIT) {
            need[k] = 0;
            late[k] = 1;
        }
    /* the producers of the kept calls' inputs */
    char *bwd_need = calloc(nc + 1, 1);
    if (!bwd_need) {
        free(late);
        goto out;
    }
    for (size_t k = 0; k < nc; k++)
        if (need[k] && byname_fwd[k] >= 0)
            bwd_need[byname_fwd[k]] = 1;
    size_t n_kc = 0;
    for (size_t i = 0; i < p->n_rows; i++) {
        const np_cmp_row *r = &p->rows[i];
        int k = r->call_index;
        if (r->cmp && k >= 0 && (size_t)k < nc && !strcmp(p->calls[k].kind, "api") &&
            !strcmp(r->cmp->role, "output"))
            kc[n_kc++] = (key_call){leaf_key(r->cmp), k};
    }
    qsort(kc, n_kc, sizeof *kc, key_call_order);
    for (size_t i = 0; i < p->n_rows; i++) {
        const np_cmp_row *r = &p->rows[i];
        int k = r->call_index;
        if (!r->cmp || k < 0 || (size_t)k >= nc || strcmp(r->cmp->role, "input") != 0)
            continue;
        /* an input of call k, or of a backward call whose forward k is */
        if (!need[k] && !bwd_need[k])
            continue;
        int j = producer(kc, n_kc, leaf_key(r->cmp), k);
        if (j >= 0 && late[j]) {
            need[j] = 1;
            late[j] = 0;
        }
    }
    for (size_t k = 0; k < nc; k++)
        if (late[k]) {
            need[k] = 2;
            n_late++;
        }
    free(late);
    free(bwd_need);
out:
    free(same);
    free(byname_fwd);
    free(kc);
    if (have_map)
        np_strmap_free(&names);
    return n_late;
}

/* np_replay_options.select over a name map. */
static int select_name(const char *call, void *user)
{
    return np_strmap_get(user, call) >= 0;
}

/* "Functional.layer_norm.2.backward" -> "Functional.layer_norm" in buf. */
static const char *api_of(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s", name);
    char *dot = strrchr(buf, '.');
    if (dot)
        *dot = '\0';
    dot = strrchr(buf, '.');
    if (dot)
        *dot = '\0';
    return buf;
}

/* Replay `path` for the calls in `want` (none: no replay, NULL result). */
static np_replay_result *replay_some(const char *path, np_strmap *want, size_t n_want,
                                     char *why, size_t cap)
{
    if (!n_want)
        return NULL;
    np_replay_options o;
    np_replay_options_init(&o);
    o.select = select_name;
    o.select_user = want;
    np_replay_result *r = NULL;
    np_error e;
    np_error_clear(&e);
    if (np_replay_files(1, &path, (const np_replay_options *const[]){&o}, &r, &e) != NP_OK)
        snprintf(why, cap, "its replay failed: %.250s", e.text);
    return r;
}

/* r absorbs the calls of `from` (freed). */
static np_replay_result *absorb(np_replay_result *r, np_replay_result *from)
{
    if (!r || !from)
        return r ? r : from;
    np_replay_call *c = realloc(r->calls, (r->n_calls + from->n_calls + 1) * sizeof *c);
    if (c) {
        memcpy(c + r->n_calls, from->calls, from->n_calls * sizeof *c);
        r->calls = c;
        r->n_calls += from->n_calls;
        for (int i = 0; i < 3; i++)
            r->count[i] += from->count[i];
        r->seconds += from->seconds;
        from->n_calls = 0; /* the leaves are r's now */
    }
    np_replay_result_free(from);
    return r;
}

/* The cmp side's calls in `want` recomputed from its file, or from a
 * pipeline's stage files, each its own calls (a stage's micro-batch m >= 1
 * calls may bear another stage's names: they are not selected). */
static np_replay_result *replay_cmp(const np_cmp_pair *p, np_strmap *want, size_t n_want,
                                    char *why, size_t cap)
{
    const cmp_dump *d = ((const cmp_pair_priv *)p->priv)->cmp_side;
    int nf = d ? cmp_assembly_files(d) : 0;
    if (!nf)
        return replay_some(p->cmp_path, want, n_want, why, cap);
    np_replay_result *r = NULL;
    for (int f = 0; f < nf; f++) {
        np_strmap mine;
        size_t n = 0;
        if (np_strmap_init(&mine, n_want * 2 + 16) != 0)
            break;
        for (size_t k = 0; k < p->n_calls; k++)
            if (np_strmap_get(want, p->calls[k].name) >= 0 &&
                cmp_assembly_call_file(d, p->calls[k].name) == f &&
                np_strmap_put(&mine, p->calls[k].name, (int)k) == 0)
                n++;
        r = absorb(r, replay_some(cmp_assembly_file(d, f), &mine, n, why, cap));
        np_strmap_free(&mine);
    }
    return r;
}

/* The calls of `r` above their budget that `done` does not hold, into `want`
 * (initialised here); returns their count. */
static size_t exceeders(np_strmap *want, const np_replay_result *r, const call_index *done)
{
    size_t n = 0;
    memset(want, 0, sizeof *want);
    if (np_strmap_init(want, (r ? r->n_calls : 0) * 2 + 16) != 0)
        return 0;
    for (size_t i = 0; r && i < r->n_calls; i++)
        if (r->calls[i].status == NP_REPLAY_EXCEEDS && !find_call(done, r->calls[i].name)) {
            np_strmap_put(want, r->calls[i].name, (int)i);
            n++;
        }
    return n;
}

/* Passes 3 and 4 of cmp_isolated: the calls left out after the first
 * culprit (need[k] == 2), of an API the three-way rule names at a call
 * recomputed, into cr[1]; their reference side where they exceed into
 * rr[2] (refs re-indexed). Returns the calls still left out. */
static size_t replay_late(np_cmp_pair *p, const char *need, size_t n_late,
                          np_replay_result *cr[2], np_replay_result *rr[3], call_index *refs,
                          int ref_ok, char *ref_why, size_t why_cap)
{
    size_t nc = p->n_calls;
    const np_replay_result *r = cr[0];
    np_strmap want_cmp, want_ref;
    /* 3: the calls left out after the first culprit, of an API the
     * three-way rule names at a call recomputed */
    np_strmap apis;
    size_t n = 0;
    char api[NP_FMT_NAME_LEN];
    if (np_strmap_init(&apis, 64) == 0) {
        for (size_t i = 0; i < r->n_calls; i++)
            if (three_way(&r->calls[i], ref_ok ? find_call(refs, r->calls[i].name) : NULL))
                np_strmap_put(&apis, r->calls[i].api, 1);
        if (np_strmap_init(&want_cmp, nc * 2 + 16) == 0) {
            for (size_t k = 0; k < nc; k++)
                if (need[k] == 2 &&
                    np_strmap_get(&apis, api_of(api, sizeof api, p->calls[k].name)) >= 0) {
                    np_strmap_put(&want_cmp, p->calls[k].name, (int)k);
                    n++;
                }
            char why[300];
            cr[1] = replay_cmp(p, &want_cmp, n, why, sizeof why);
            np_strmap_free(&want_cmp);
        }
        np_strmap_free(&apis);
    }
    n_late -= cr[1] ? cr[1]->n_calls : 0;
    if (cr[1] && ref_ok) {
        /* 4: their reference side where they exceed */
        size_t n4 = exceeders(&want_ref, cr[1], refs);
        rr[2] = replay_some(p->bench_path, &want_ref, n4, ref_why, why_cap);
        np_strmap_free(&want_ref);
        index_free(refs);
        index_calls(refs, rr, 3);
    }
    return n_late;
}

/* 1 when the cmp side is a pipeline's stage files. */
static int cmp_pipeline(const np_cmp_pair *p)
{
    const cmp_dump *d = ((const cmp_pair_priv *)p->priv)->cmp_side;
    return d && cmp_assembly_files(d) > 0;
}

np_status cmp_isolated(np_cmp_pair *p, int no_replay, int replay_all, np_error *err)
{
    for (size_t k = 0; k < p->n_calls; k++)
        p->calls[k].iso_err = p->calls[k].iso_ratio = p->calls[k].ref_iso_err =
            p->calls[k].ref_iso_ratio = NAN;
    if (p->mode != NP_CMP_MODE_TENSOR || no_replay || getenv("NPROBE_NO_REPLAY"))
        return NP_OK;
    size_t nc = p->n_calls;
    char *need = malloc(nc + 1);
    np_strmap byname, want_cmp, want_ref;
    int maps = 0;
    if (need && np_strmap_init(&byname, nc * 2 + 16) == 0)
        maps |= 1;
    if ((maps & 1) && np_strmap_init(&want_cmp, nc * 2 + 16) == 0)
        maps |= 2;
    if ((maps & 2) && np_strmap_init(&want_ref, nc * 2 + 16) == 0)
        maps |= 4;
    if (maps != 7) {
        if (maps & 1)
            np_strmap_free(&byname);
        if (maps & 2)
            np_strmap_free(&want_cmp);
        free(need);
        return np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory");
    }
    size_t n_late = select_calls(p, need, replay_all);
    int ref_tensor = !strcmp(p->bench_task, "tensor");
    for (size_t k = 0; k < nc; k++) {
        if (np_strmap_get(&byname, p->calls[k].name) < 0)
            np_strmap_put(&byname, p->calls[k].name, (int)k);
        if (need[k] == 1)
            np_strmap_put(&want_cmp, p->calls[k].name, (int)k);
        /* the culprits of the accumulated walk: the reference's side at once
         * (their cards show both); the rest once the run under test exceeds */
        if (need[k] == 1 && p->calls[k].status == NP_CALL_CULPRIT)
            np_strmap_put(&want_ref, p->calls[k].name, (int)k);
    }
    /* 1: the selected calls of both sides side by side */
    np_replay_options oc, orf;
    np_replay_options_init(&oc);
    np_replay_options_init(&orf);
    oc.select = orf.select = select_name;
    oc.select_user = &want_cmp;
    orf.select_user = &want_ref;
    const char *paths[2] = {p->cmp_path, p->bench_path};
    const np_replay_options *opts[2] = {&oc, &orf};
    np_replay_result *cr[2] = {NULL, NULL}, *rr[3] = {NULL, NULL, NULL};
    np_error es[2];
    if (!cmp_pipeline(p)) {
        np_replay_files(ref_tensor ? 2 : 1, paths, opts, cr, es);
    } else { /* each stage file its own calls, then the reference */
        cr[0] = replay_cmp(p, &want_cmp, nc, es[0].text, sizeof es[0].text);
        if (ref_tensor)
            np_replay_files(1, &paths[1], &opts[1], &cr[1], &es[1]);
    }
    rr[0] = cr[1];
    cr[1] = NULL;
    np_strmap_free(&want_cmp);
    np_strmap_free(&want_ref);
    np_replay_result *r = cr[0];
    int ref_ok = rr[0] != NULL;
    char ref_why[300];
    snprintf(ref_why, sizeof ref_why, "the reference is a %s dump", p->bench_task);
    if (ref_tensor && !ref_ok)
        snprintf(ref_why, sizeof ref_why, "its replay failed: %.250s", es[1].text);
    call_index refs;
    memset(&refs, 0, sizeof refs);
    if (r && ref_ok) {
        /* 2: the reference's side of the calls above their budget */
        index_calls(&refs, rr, 1);
        size_t n = exceeders(&want_ref, r, &refs);
        rr[1] = replay_some(p->bench_path, &want_ref, n, ref_why, sizeof ref_why);
        np_strmap_free(&want_ref);
        index_free(&refs);
        index_calls(&refs, rr, 2);
    }
    if (r && n_late)
        n_late = replay_late(p, need, n_late, cr, rr, &refs, ref_ok, ref_why, sizeof ref_why);
    if (r)
        apply(p, cr, 2, &refs, ref_ok, ref_why, &byname);
    size_t n_sharded = 0;
    const char *first_sharded = NULL;
    for (size_t i = 0; r && i < r->n_calls; i++)
        if (r->calls[i].sharded && !n_sharded++)
            first_sharded = r->calls[i].name;
    if (n_sharded)
        cmp_note(p, "The float64 replay left out %zu API call(s) of the sharded layout (the first: "
                    "%s): their leaves are this rank's pieces of logical tensors, and the local op "
                    "ran on what the layout redistributed them to (a row-parallel linear adds its "
                    "share of a replicated bias), so their isolated error is N/A; they are judged "
                    "on the assembled tensors.", n_sharded, first_sharded);
    if (r && n_late)
        cmp_note(p, "The float64 replay left out %zu API call(s) after the first culprit whose "
                    "inputs already fail (their isolated error is N/A; --replay-all recomputes "
                    "them).", n_late);
    index_free(&refs);
    np_strmap_free(&byname);
    free(need);
    for (int i = 0; i < 2; i++)
        np_replay_result_free(cr[i]);
    for (int i = 0; i < 3; i++)
        np_replay_result_free(rr[i]);
    if (!r)
        return NP_OK; /* the accumulated root cause stands */
    return cmp_culprit_list(p, err);
}
