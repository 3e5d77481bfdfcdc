/* monitor/monitor_calls.c - the ring of call inputs inside a step
 * (monitor.anomaly_calls, docs/MONITOR.md "Dump on anomaly"): copies of
 * the last K API calls of the step in progress (their inputs, parameters,
 * scalar arguments and outputs, as the runtime's events hand them), written
 * on the anomaly as a tensor dump through the probe, so that nprobe replay
 * recomputes each kept call from its own inputs and names the op whose
 * output is not what its inputs give. */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "mon_internal.h"
#include "nprobe/probe.h"

typedef struct mon_call {
    np_hook_event ev;       /* its pointers into the buffers below */
    int micro;              /* the micro-batch it ran in (its placements) */
    int64_t idx;            /* its number among the step's calls taken */
    char *strs;             /* name, parent, callsite, the tensors' and scalars' keys */
    size_t cap_strs;
    np_hook_tensor *ht;
    np_tensor *t;
    np_hook_scalar *sc;
    size_t cap_ht, cap_t, cap_sc;
    unsigned char *data;    /* the tensors' storage, 16-byte aligned pieces */
    size_t cap_data;
} mon_call;

struct np_mon_calls {
    mon_call *slot;
    int cap, head, n;
    int keep;               /* the calls before the anomaly written (cap, or less: a margin) */
    int64_t taken;          /* calls taken this step */
    int64_t step;
    double loss_scale;
    /* after the anomaly: the dump stays open for the next `left` calls */
    np_probe *live;
    const np_mon_layout *lay;
    int left, after, in_step, n_before;
};

np_mon_calls *np_mon_calls_new(int cap)
{
    np_mon_calls *c = calloc(1, sizeof *c);
    if (!c || !(c->slot = calloc((size_t)(cap > 0 ? cap : 1), sizeof *c->slot))) {
        free(c);
        return NULL;
    }
    c->cap = c->keep = cap;
    c->loss_scale = 1.0;
    return c;
}

void np_mon_calls_free(np_mon_calls *c)
{
    if (!c)
        return;
    np_mon_calls_finish(c, NULL);
    for (int i = 0; i < c->cap; i++) {
        free(c->slot[i].strs);
        free(c->slot[i].ht);
        free(c->slot[i].t);
        free(c->slot[i].sc);
        free(c->slot[i].data);
    }
    free(c->slot);
    free(c);
}

void np_mon_calls_reset(np_mon_calls *c, int64_t step, double loss_scale)
{
    c->head = c->n = 0;
    c->taken = 0;
    c->step = step;
    c->loss_scale = loss_scale;
}

int np_mon_calls_count(const np_mon_calls *c) { return c ? c->n : 0; }

int64_t np_mon_calls_taken(const np_mon_calls *c) { return c ? c->taken : 0; }

void np_mon_calls_keep(np_mon_calls *c, int keep) { c->keep = keep < c->cap ? keep : c->cap; }

static size_t slen(const char *s) { return s ? strlen(s) + 1 : 0; }

static const char *put(char **w, const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    memcpy(*w, s, n);
    const char *r = *w;
    *w += n;
    return r;
}

#define ALIGN16(n) (((n) + 15u) & ~(size_t)15u)

int np_mon_calls_take(np_mon_calls *c, const np_hook_event *ev, int micro)
{
    mon_call *s;
    if (c->cap <= 0)
        return 0;
    if (c->n < c->cap) {
        s = &c->slot[(c->head + c->n) % c->cap];
        c->n++;
    } else { /* full: the oldest call goes */
        s = &c->slot[c->head];
        c->head = (c->head + 1) % c->cap;
    }
    size_t ns = slen(ev->name) + slen(ev->parent) + slen(ev->callsite), nd = 0;
    for (int i = 0; i < ev->n_tensors; i++) {
        ns += slen(ev->tensors[i].key);
        if (ev->tensors[i].t && ev->tensors[i].t->data)
            nd += ALIGN16(np_tensor_nbytes(ev->tensors[i].t));
    }
    for (int i = 0; i < ev->n_scalars; i++)
        ns += slen(ev->scalars[i].key);
    if (np_grow((void **)&s->strs, &s->cap_strs, ns, 1) ||
        np_grow((void **)&s->data, &s->cap_data, nd, 1) ||
        np_grow((void **)&s->ht, &s->cap_ht, (size_t)ev->n_tensors, sizeof *s->ht) ||
        np_grow((void **)&s->t, &s->cap_t, (size_t)ev->n_tensors, sizeof *s->t) ||
        np_grow((void **)&s->sc, &s->cap_sc, (size_t)ev->n_scalars, sizeof *s->sc)) {
        c->n--; /* the slot (the newest) is dropped: the ring keeps the calls before it */
        return -1;
    }
    char *w = s->strs;
    unsigned char *d = s->data;
    s->ev = *ev;
    s->ev.name = put(&w, ev->name);
    s->ev.parent = put(&w, ev->parent);
    s->ev.callsite = put(&w, ev->callsite);
    for (int i = 0; i < ev->n_tensors; i++) {
        const np_hook_tensor *h = &ev->tensors[i];
        s->ht[i] = *h;
        s->ht[i].key = put(&w, h->key);
        if (!h->t) {
            s->ht[i].t = NULL;
            continue;
        }
        np_tensor *t = &s->t[i];
        *t = *h->t;
        t->grad = NULL;
        t->name = NULL;
        t->rt = NULL;
        if (h->t->data) {
            size_t nb = np_tensor_nbytes(h->t);
            memcpy(d, h->t->data, nb);
            t->data = d;
            d += ALIGN16(nb);
        }
        s->ht[i].t = t;
    }
    for (int i = 0; i < ev->n_scalars; i++) {
        s->sc[i] = ev->scalars[i];
        s->sc[i].key = put(&w, ev->scalars[i].key);
    }
    s->micro = micro;
    s->idx = c->taken++;
    s->ev.tensors = s->ht;
    s->ev.scalars = s->sc;
    return 0;
}

/* The dump of the anomaly's step: its kept calls, then (after > 0) the
 * probe stays open for the next `after` calls as they come (follow). */
np_status np_mon_calls_fire(np_mon_calls *c, const char *dir, const char *precision, int rank,
                            int world, int after, int64_t upto, const np_mon_layout *lay,
                            np_error *err)
{
    json_t *cfg = json_pack("{s:s, s:s, s:s, s:[], s:[]}", "task", "tensor", "level", "L1",
                            "dump_path", dir, "step", "rank");
    char *text = cfg ? json_dumps(cfg, JSON_COMPACT) : NULL;
    json_decref(cfg);
    if (!text)
        return np_error_set(err, NP_ERR_NOMEM, dir, "anomaly_calls", "out of memory");
    np_probe_meta meta = {"nprobe-runtime", "cpu", precision, rank, world};
    np_probe *p = NULL;
    np_status st = np_probe_open_json(&p, text, &meta, err);
    free(text);
    if (!st && lay && lay->set_mesh && (st = lay->set_mesh(p, lay->user, err)))
        np_probe_free(p);
    if (st)
        return st;
    c->live = p;
    c->lay = lay;
    np_hook_scalar ls = {"loss_scale", c->loss_scale};
    np_hook_event b;
    memset(&b, 0, sizeof b);
    b.kind = NP_EV_STEP_BEGIN;
    b.step = (int)c->step;
    b.rank = rank;
    b.scalars = &ls;
    b.n_scalars = 1;
    np_probe_on_event(&b, p);
    c->in_step = 1;
    /* the calls before the anomaly (numbered below upto; < 0: all), the
     * last `keep` of them, then those after it the ring already holds (a
     * margin: they count among the `after`) */
    int before = 0;
    for (int i = 0; i < c->n; i++)
        before += upto < 0 || c->slot[(c->head + i) % c->cap].idx < upto;
    c->after = 0;
    c->left = after;
    c->n_before = 0;
    for (int i = 0; i < c->n; i++) {
        const mon_call *k = &c->slot[(c->head + i) % c->cap];
        int is_after = upto >= 0 && k->idx >= upto;
        if (is_after ? c->left <= 0 : i < before - c->keep)
            continue;
        np_probe_on_event(&k->ev, p);
        if (lay && lay->place)
            lay->place(p, &k->ev, k->micro, lay->user);
        if (is_after) {
            c->after++;
            c->left--;
        } else {
            c->n_before++;
        }
    }
    return c->left > 0 ? NP_OK : np_mon_calls_finish(c, err);
}

int np_mon_calls_follow(np_mon_calls *c, const np_hook_event *ev, int micro, np_error *err,
                        np_status *st)
{
    *st = NP_OK;
    if (!c || !c->live)
        return 0;
    if (ev->kind == NP_EV_STEP_BEGIN || ev->kind == NP_EV_STEP_END) {
        np_probe_on_event(ev, c->live);
        c->in_step = ev->kind == NP_EV_STEP_BEGIN;
        return 1;
    }
    if (ev->kind != NP_EV_API_FORWARD && ev->kind != NP_EV_API_BACKWARD)
        return 1;
    np_probe_on_event(ev, c->live);
    if (c->lay && c->lay->place)
        c->lay->place(c->live, ev, micro, c->lay->user);
    c->after++;
    if (--c->left <= 0)
        *st = np_mon_calls_finish(c, err);
    return 1;
}

int np_mon_calls_after(const np_mon_calls *c) { return c ? c->after : 0; }

int np_mon_calls_before(const np_mon_calls *c) { return c ? c->n_before : 0; }

int np_mon_calls_open(const np_mon_calls *c) { return c && c->live; }

np_status np_mon_calls_finish(np_mon_calls *c, np_error *err)
{
    if (!c || !c->live)
        return NP_OK;
    np_probe *p = c->live;
    c->live = NULL;
    c->left = 0;
    if (c->in_step) {
        np_hook_event b;
        memset(&b, 0, sizeof b);
        b.kind = NP_EV_STEP_END;
        np_probe_on_event(&b, p);
        c->in_step = 0;
    }
    np_status st = np_probe_close(p, NULL, err);
    np_probe_free(p);
    return st;
}
