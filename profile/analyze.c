/* profile/analyze.c - one trace analysed (time by category on the timeline,
 * operators, idle bubbles, communication/compute overlap, FLOPs) and two
 * traces compared op by op (include/internal/nprobe/profile.h, docs/PROFILE.md).
 *
 * Memory: the operator table grows with the distinct (category, name)
 * pairs, the timeline with its disjoint busy runs: each category's
 * intervals are buffered and, when the buffer fills, sorted and merged in
 * place, so a long trace of back-to-back events keeps few of them. The
 * calls in call order (the call rows) are kept per step to the end of the
 * read, 24 bytes each, at most NP_PROF_MAX_CALLS of them. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nprobe/profile.h"

static const char *const class_names[] = {"compute", "communication", "memory", "optimizer",
                                          "data_loading", "other", "idle"};
_Static_assert(sizeof class_names / sizeof class_names[0] == NP_PROF_CLASS_COUNT, "class names");

const char *np_prof_class_name(np_prof_class c)
{
    return (unsigned)c < NP_PROF_CLASS_COUNT ? class_names[c] : "?";
}

/* ---- interval sets ---------------------------------------------------- */
typedef struct ivset {
    double *v; /* start, end pairs */
    size_t n, cap;
} ivset;

static int iv_cmp(const void *a, const void *b)
{
    const double *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : (x[1] < y[1] ? -1 : x[1] > y[1]);
}

/* Sort and merge touching/overlapping intervals in place. */
static void iv_compact(ivset *s)
{
    if (s->n < 2)
        return;
    qsort(s->v, s->n, 2 * sizeof(double), iv_cmp);
    size_t k = 0;
    for (size_t i = 1; i < s->n; i++) {
        if (s->v[2 * i] <= s->v[2 * k + 1]) {
            if (s->v[2 * i + 1] > s->v[2 * k + 1])
                s->v[2 * k + 1] = s->v[2 * i + 1];
        } else {
            k++;
            s->v[2 * k] = s->v[2 * i];
            s->v[2 * k + 1] = s->v[2 * i + 1];
        }
    }
    s->n = k + 1;
}

static int iv_add(ivset *s, double a, double b)
{
    if (s->n == s->cap) {
        iv_compact(s);
        if (!s->cap || s->n * 2 > s->cap) { /* still half full: grow */
            size_t cap = s->cap ? s->cap * 2 : 4096;
            double *v = realloc(s->v, cap * 2 * sizeof(double));
            if (!v)
                return -1;
            s->v = v;
            s->cap = cap;
        }
    }
    s->v[2 * s->n] = a;
    s->v[2 * s->n + 1] = b;
    s->n++;
    return 0;
}

static double iv_len(const ivset *s)
{
    double t = 0;
    for (size_t i = 0; i < s->n; i++)
        t += s->v[2 * i + 1] - s->v[2 * i];
    return t;
}

/* out = a U b (both compacted); out must be distinct from a and b. */
static int iv_union(ivset *out, const ivset *a, const ivset *b)
{
    out->n = 0;
    size_t need = a->n + b->n;
    if (need > out->cap) {
        double *v = realloc(out->v, (need ? need : 1) * 2 * sizeof(double));
        if (!v)
            return -1;
        out->v = v;
        out->cap = need;
    }
    if (a->n)
        memcpy(out->v, a->v, a->n * 2 * sizeof(double));
    if (b->n)
        memcpy(out->v + 2 * a->n, b->v, b->n * 2 * sizeof(double));
    out->n = need;
    iv_compact(out);
    return 0;
}

/* ---- operator table ------------------------------------------------------ */
typedef struct optab {
    np_prof_op *ops;
    size_t n, cap;
    uint32_t *slot; /* index + 1, 0 empty */
    size_t nslot;
} optab;

static uint64_t hash2(const char *a, const char *b)
{
    uint64_t h = 1469598103934665603ull;
    for (; *a; a++)
        h = (h ^ (unsigned char)*a) * 1099511628211ull;
    h = (h ^ 0x1f) * 1099511628211ull;
    for (; *b; b++)
        h = (h ^ (unsigned char)*b) * 1099511628211ull;
    return h;
}

/* The slot of (cat, name) in t (nslot > 0): its own or the empty one it would take. */
static size_t probe(const optab *t, const char *cat, const char *name)
{
    size_t j = hash2(cat, name) & (t->nslot - 1);
    while (t->slot[j]) {
        const np_prof_op *o = &t->ops[t->slot[j] - 1];
        if (!strcmp(o->name, name) && !strcmp(o->cat, cat))
            break;
        j = (j + 1) & (t->nslot - 1);
    }
    return j;
}

/* The op (cat, name) of t, NULL when absent. */
static np_prof_op *op_find(const optab *t, const char *cat, const char *name)
{
    if (!t->nslot)
        return NULL;
    size_t j = probe(t, cat, name);
    return t->slot[j] ? &t->ops[t->slot[j] - 1] : NULL;
}

/* The op (cat, name) of t, added (first = order) when absent; NULL out of memory. */
static np_prof_op *op_get(optab *t, const char *cat, const char *name, long long order)
{
    if ((t->n + 1) * 2 > t->nslot) {
        size_t ns = t->nslot ? t->nslot * 2 : 1024;
        uint32_t *s = calloc(ns, sizeof *s);
        if (!s)
            return NULL;
        for (size_t i = 0; i < t->n; i++) {
            size_t j = hash2(t->ops[i].cat, t->ops[i].name) & (ns - 1);
            while (s[j])
                j = (j + 1) & (ns - 1);
            s[j] = (uint32_t)(i + 1);
        }
        free(t->slot);
        t->slot = s;
        t->nslot = ns;
    }
    size_t j = probe(t, cat, name);
    if (t->slot[j])
        return &t->ops[t->slot[j] - 1];
    if (np_grow((void **)&t->ops, &t->cap, t->n + 1, sizeof *t->ops))
        return NULL;
    np_prof_op *o = &t->ops[t->n];
    memset(o, 0, sizeof *o);
    o->cat = strdup(cat);
    o->name = strdup(name);
    if (!o->cat || !o->name) {
        free(o->cat);
        free(o->name);
        return NULL;
    }
    o->min_us = INFINITY;
    o->first = order;
    t->slot[j] = (uint32_t)(++t->n);
    return o;
}

/* ---- classification ------------------------------------------------------ */
static int starts(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

static int device_cat(const char *cat)
{
    return !strcmp(cat, "kernel") || !strcmp(cat, "gpu_memcpy") || !strcmp(cat, "gpu_memset") ||
           !strcmp(cat, "hccl");
}

static int is_device_event(const np_prof_event *e)
{
    return e->stream >= 0 || device_cat(e->cat);
}

/* HTA's kernel kinds: nccl...Kernel communication; Memcpy/Memset/dma memory;
 * compute unless nccl...Kernel, containing Memcpy, starting Memset or
 * containing Sync. */
static int nccl_kernel(const char *n)
{
    if (!starts(n, "nccl"))
        return 0;
    return strstr(n + 4, "Kernel") != NULL;
}

static np_prof_class device_class(const char *n);

/* Ascend's device tasks (trace_view.json): the HCCL/Communication process
 * is communication; on the Ascend Hardware process args."Task Type" says
 * what a task is (AI_CORE, AI_VECTOR_CORE, AI_CPU: compute; HCCL:
 * communication; MEMCPY_ASYNC...: memory, also a task so named; EVENT_WAIT,
 * NOTIFY...: other),
 * an hcom_ name is a collective; else the kernel-name rules. */
static np_prof_class device_class_ev(const np_prof_event *e)
{
    const char *t = e->task_type;
    if (!strcmp(e->cat, "hccl") || starts(t, "HCCL") || starts(t, "COMMUNICATION") ||
        starts(e->name, "hcom_"))
        return NP_PROF_COMM;
    if (strstr(t, "MEMCPY") || strstr(t, "MEMSET") || strstr(t, "DMA") || starts(e->name, "MEMCPY") ||
        starts(e->name, "MEMSET"))
        return NP_PROF_MEMORY; /* torch_npu names some tasks MEMCPY_ASYNC with Task Type Other */
    if (strstr(t, "EVENT") || strstr(t, "NOTIFY") || strstr(t, "WAIT"))
        return NP_PROF_OTHER;
    if (*t)
        return NP_PROF_COMPUTE;
    return device_class(e->name);
}

static np_prof_class device_class(const char *n)
{
    if (nccl_kernel(n))
        return NP_PROF_COMM;
    if (starts(n, "Memcpy") || starts(n, "Memset") || starts(n, "dma"))
        return NP_PROF_MEMORY;
    if (strstr(n, "Memcpy") || strstr(n, "Sync"))
        return NP_PROF_OTHER;
    return NP_PROF_COMPUTE;
}

static int comm_op_name(const char *n)
{
    static const char *const pats[] = {"c10d::", "nccl:", "gloo:", "hccl", "allreduce", "all_reduce",
                                       "allgather", "all_gather", "reduce_scatter", "broadcast_",
                                       "alltoall", "all_to_all", "record_param_comms"};
    for (size_t i = 0; i < sizeof pats / sizeof pats[0]; i++)
        if (strstr(n, pats[i]))
            return 1;
    return 0;
}

/* The CPU timeline's class of an 'X' event, -1 when it is not on it. */
static int cpu_class(const np_prof_event *e)
{
    int annot = !strcmp(e->cat, "user_annotation");
    if (annot || !strcmp(e->cat, "cpu_op")) {
        if (starts(e->name, "Optimizer."))
            return NP_PROF_OPTIMIZER;
        if (strstr(e->name, "DataLoader"))
            return NP_PROF_DATA;
        if (annot)
            return -1; /* ProfilerStep#N, user record_function ranges: not busy by themselves */
        return comm_op_name(e->name) ? NP_PROF_COMM : NP_PROF_COMPUTE;
    }
    return -1;
}

/* ---- the two passes -------------------------------------------------------- */
/* Intervals of one class buffered before the timeline's past is finalized
 * (events in start order: nothing can start before the latest start). */
#define FINAL_AT 16384
#define MAX_SRC 256 /* sources followed; more: nothing finalized */
typedef struct corr_ts {
    long long corr;
    double ts;
} corr_ts;

/* Ascend's processes in trace_view.json, by their process_name metadata:
 * the device lanes (tid: the stream), communication lanes (op slices; the
 * "Plane N" threads under them hold the ops' tasks again: left out) and the
 * Overlap Analysis lanes msprof derives from the others (left out). */
enum { ROLE_NONE, ROLE_ASCEND_HW, ROLE_HCCL, ROLE_SKIP };
#define MAX_ROLES 64
typedef struct roles {
    struct role { long long pid, tid; int role; } v[MAX_ROLES]; /* tid -1: the whole process */
    int n;
} roles;

static int role_of(const roles *r, long long pid, long long tid)
{
    int role = ROLE_NONE;
    for (int i = 0; i < r->n; i++)
        if (r->v[i].pid == pid) {
            if (r->v[i].tid == tid)
                return r->v[i].role;
            if (r->v[i].tid == -1)
                role = r->v[i].role;
        }
    return role;
}

static void role_meta(roles *r, const np_prof_event *e)
{
    int role = ROLE_NONE;
    long long tid = -1;
    if (!strcmp(e->name, "process_name")) {
        if (!strcmp(e->arg_name, "Ascend Hardware"))
            role = ROLE_ASCEND_HW;
        else if (!strcmp(e->arg_name, "HCCL") || !strcmp(e->arg_name, "Communication"))
            role = ROLE_HCCL;
        else if (!strcmp(e->arg_name, "Overlap Analysis"))
            role = ROLE_SKIP;
    } else if (!strcmp(e->name, "thread_name") && starts(e->arg_name, "Plane")) {
        role = ROLE_SKIP; /* skipped only under a communication process (pass2) */
        tid = e->tid;
    }
    if (role != ROLE_NONE && r->n < MAX_ROLES)
        r->v[r->n++] = (struct role){e->pid, tid, role};
}

/* The event as the analysis sees it: an Ascend device task as a kernel on
 * its stream (tid), a communication op as "hccl"; NULL: left out. */
static const np_prof_event *as_role(const roles *r, const np_prof_event *e, np_prof_event *tmp)
{
    if (!r->n || e->ph != 'X')
        return e;
    int proc = role_of(r, e->pid, -2), role = role_of(r, e->pid, e->tid);
    if (proc == ROLE_NONE)
        return e;
    if (proc == ROLE_SKIP || (proc == ROLE_HCCL && role == ROLE_SKIP))
        return NULL;
    *tmp = *e;
    tmp->stream = e->stream >= 0 ? e->stream : e->tid >= 0 ? e->tid : 0;
    tmp->cat = proc == ROLE_HCCL ? "hccl" : "kernel";
    return tmp;
}

/* A thread's cpu_op events as pass 1 saw them: in start order (torch
 * writes them so), in end order (torch_npu's trace_view.json writes each
 * op when it ends, its children before it) or neither. */
typedef struct thr_order {
    long long pid, tid;
    double last_ts, last_end;
    int bad_start, bad_end;
} thr_order;

/* Correlation ids lo..hi of launches in the last step: every launch seen
 * with an id in the range is in it (ts_min, ts_max: theirs). */
typedef struct corr_run {
    long long lo, hi;
    double ts_min, ts_max;
} corr_run;

typedef struct pass1 {
    roles roles;
    thr_order *thr;
    size_t n_thr, cap_thr;
    double *stepv;    /* ProfilerStep# start, end pairs */
    size_t cap_step;
    double last_step; /* latest ProfilerStep# start */
    long long steps, device_events;
    int exact;     /* keep each launch at or after the latest step start (late);
                    * else runs of their correlation ids (runs) */
    corr_ts *late; /* launches at or after the latest step start seen so far */
    size_t n_late, cap_late;
    corr_run *runs; /* sorted by lo, disjoint */
    size_t n_runs, cap_runs;
    long long max_corr; /* the largest correlation id seen (-1: none) */
    int mixed;      /* a run straddles a later step start: read again exact */
    int oom;
} pass1;

static int run_cmp(const void *k, const void *r)
{
    long long c = *(const long long *)k;
    const corr_run *x = r;
    return c < x->lo ? -1 : c > x->hi;
}

static corr_run *run_find(corr_run *v, size_t n, long long c)
{
    return n ? bsearch(&c, v, n, sizeof *v, run_cmp) : NULL;
}

/* Room for one more run at index i (runs shifted up). */
static corr_run *run_insert(pass1 *p, size_t i)
{
    if (np_grow((void **)&p->runs, &p->cap_runs, p->n_runs + 1, sizeof *p->runs))
        return NULL;
    memmove(p->runs + i + 1, p->runs + i, (p->n_runs - i) * sizeof *p->runs);
    p->n_runs++;
    return &p->runs[i];
}

/* A launch into the runs. Torch's launches come with rising ids (one
 * counter for all threads), so the runs of a step are one run: memory
 * independent of the number of launches. An id joins the last run when no
 * larger id was seen; a launch outside the last step splits the run holding
 * its id. Only ids never seen as a launch (a kernel without its launch in
 * the trace) can fall in a run without being in the step. */
static int run_launch(pass1 *p, const np_prof_event *e)
{
    long long c = e->correlation;
    int in = p->steps == 0 || e->ts >= p->last_step, fresh = c > p->max_corr;
    int extend = fresh && p->n_runs && p->runs[p->n_runs - 1].hi == p->max_corr;
    if (fresh)
        p->max_corr = c;
    corr_run *r = fresh ? NULL : run_find(p->runs, p->n_runs, c);
    if (!in) {
        if (!r)
            return 0;
        corr_run right = {c + 1, r->hi, r->ts_min, r->ts_max};
        r->hi = c - 1;
        if (right.lo <= right.hi) {
            size_t i = (size_t)(r - p->runs) + 1;
            if (!(r = run_insert(p, i)))
                return -1;
            *r = right;
            r = &p->runs[i - 1];
        }
        if (r->lo > r->hi) { /* emptied */
            size_t i = (size_t)(r - p->runs);
            memmove(r, r + 1, (p->n_runs - i - 1) * sizeof *r);
            p->n_runs--;
        }
        return 0;
    }
    if (extend) {
        r = &p->runs[p->n_runs - 1];
        r->hi = c;
    } else if (!r) {
        size_t i = 0;
        while (i < p->n_runs && p->runs[p->n_runs - 1 - i].lo > c)
            i++;
        if (!(r = run_insert(p, p->n_runs - i)))
            return -1;
        *r = (corr_run){c, c, e->ts, e->ts};
    }
    r->ts_min = e->ts < r->ts_min ? e->ts : r->ts_min;
    r->ts_max = e->ts > r->ts_max ? e->ts : r->ts_max;
    return 0;
}

/* The latest step start moved to p->last_step: the runs before it go; one
 * across it cannot be split (read again exact). */
static void runs_prune(pass1 *p)
{
    size_t k = 0;
    for (size_t i = 0; i < p->n_runs; i++) {
        if (p->runs[i].ts_min >= p->last_step)
            p->runs[k++] = p->runs[i];
        else if (p->runs[i].ts_max >= p->last_step)
            p->mixed = 1;
    }
    p->n_runs = k;
}

/* A launch kept in p->late (exact): 0, or -1 out of memory. */
static int late_launch(pass1 *p, const np_prof_event *e)
{
    if (p->n_late == p->cap_late) {
        size_t k = 0; /* drop the launches before the latest step first */
        for (size_t i = 0; i < p->n_late; i++)
            if (!p->steps || p->late[i].ts >= p->last_step)
                p->late[k++] = p->late[i];
        p->n_late = k;
        if (!p->cap_late || k * 2 >= p->cap_late) {
            size_t cap = p->cap_late ? p->cap_late * 2 : 1024;
            corr_ts *v = realloc(p->late, cap * sizeof *v);
            if (!v)
                return -1;
            p->late = v;
            p->cap_late = cap;
        }
    }
    p->late[p->n_late++] = (corr_ts){e->correlation, e->ts};
    return 0;
}

static int pass1_fn(const np_prof_event *e, void *user)
{
    pass1 *p = user;
    if (e->ph == 'M')
        role_meta(&p->roles, e);
    if (e->ph != 'X' || !isfinite(e->ts))
        return 0;
    if (is_device_event(e)) {
        p->device_events++;
        return 0;
    }
    if (!strcmp(e->cat, "cpu_op") && !e->self_given && !starts(e->name, "ProfilerStep#") &&
        isfinite(e->dur)) {
        size_t i = 0;
        while (i < p->n_thr && (p->thr[i].pid != e->pid || p->thr[i].tid != e->tid))
            i++;
        if (i == p->n_thr) {
            if (np_grow((void **)&p->thr, &p->cap_thr, p->n_thr + 1, sizeof *p->thr)) {
                p->oom = 1;
                return 1;
            }
            p->thr[p->n_thr++] = (thr_order){e->pid, e->tid, -INFINITY, -INFINITY, 0, 0};
        }
        thr_order *t = &p->thr[i];
        t->bad_start |= e->ts < t->last_ts;
        t->bad_end |= e->ts + e->dur < t->last_end;
        t->last_ts = e->ts;
        t->last_end = e->ts + e->dur;
    }
    if (starts(e->name, "ProfilerStep#") && strcmp(e->cat, "gpu_user_annotation")) {
        /* (start, end) pairs: elements of two doubles. Not the step's range
         * on a GPU stream, which torch also writes (HTA leaves it out). */
        if (np_grow((void **)&p->stepv, &p->cap_step, (size_t)p->steps + 1, 2 * sizeof *p->stepv)) {
            p->oom = 1;
            return 1;
        }
        p->stepv[2 * p->steps] = e->ts;
        p->stepv[2 * p->steps + 1] = e->ts + (isfinite(e->dur) ? e->dur : 0);
        p->steps++;
        if (p->steps == 1 || e->ts > p->last_step) {
            p->last_step = e->ts;
            if (!p->exact)
                runs_prune(p);
        }
        return 0;
    }
    if (e->correlation < 0)
        return 0;
    int fail = 0;
    if (!p->exact)
        fail = run_launch(p, e);
    else if (p->steps == 0 || e->ts >= p->last_step)
        fail = late_launch(p, e);
    if (fail) {
        p->oom = 1;
        return 1;
    }
    return 0;
}

static int ll_cmp(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

/* One call (a cpu_op or device event in a step) in call order: its start
 * from its step's start, its self time, its op (pass2.ops index; after
 * build_calls its call row) and the outermost cpu_op holding it (ops index
 * + 1, 0: none). 24 bytes. */
typedef struct cinst {
    double at, self;
    uint32_t op, within;
} cinst;

typedef struct cstep {
    cinst *v;
    size_t n, cap;
} cstep;

/* One thread's open cpu_op events (self time). */
typedef struct frame {
    double start, end, dur, child;
    size_t op;
    size_t call; /* its call (call_of's id), 0: none */
    size_t pend_lo; /* end order: where its subtree's calls start in thread_st.pend */
} frame;

typedef struct thread_st {
    long long pid, tid;
    double last_ts, last_end;
    int end_order; /* its events come in end order: st holds its outermost calls so far */
    frame *st;
    size_t n, cap;
    /* end order: the calls this thread made (call_of's ids), in the
     * order their events came; a call's subtree is a contiguous run of them
     * (its descendants come just before it), so each new holder names
     * itself their `within`, and the outermost one names it last */
    size_t *pend;
    size_t n_pend, cap_pend;
} thread_st;

/* An end-ordered thread's outermost calls kept (2^19 of them at most, 24 MiB:
 * beyond, the trace is taken as unordered). */
#define MAX_END_FRAMES (1u << 19)

typedef struct pass2 {
    roles roles;         /* Ascend's processes (pass 1) */
    int device;
    corr_run *drop; /* correlations of kernels left out (the last step's launches) */
    size_t n_drop;
    optab ops;
    cstep *cs;           /* each step's calls in call order (one step when the
                          * trace has none): np_prof_rank.calls at the end */
    size_t n_inst;       /* the calls of all steps */
    int calls_off;       /* too many of them: dropped */
    int repeats;         /* an op called twice in a step */
    ivset cls[NP_PROF_CLASS_COUNT];
    double flops;
    long long order;
    int oom, unordered;
    thread_st *th;
    size_t n_th, cap_th;
    const thr_order *thr; /* pass 1's view of each thread's order */
    size_t n_thr;
    const double *stepv; /* sorted step intervals */
    size_t n_steps;
    np_prof_rank *r;     /* the timeline's finalized part accumulates here */
    int allow_final;     /* finalize the timeline's past while events come in order */
    int sorted, violated;     /* sorted: every source in start order so far */
    double water;             /* the timeline is finalized up to here */
    struct src { long long pid, tid; double last; } src[MAX_SRC]; /* threads, streams */
    int n_src;
    int any;             /* something finalized: first .. last_end */
    double first, last_end;
} pass2;

static int timeline_part(pass2 *p, double upto);

/* The step holding time t, -1 when none. */
static long step_of(const pass2 *p, double t)
{
    size_t lo = 0, hi = p->n_steps;
    while (lo < hi) { /* first step starting after t */
        size_t mid = (lo + hi) / 2;
        if (p->stepv[2 * mid] <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0 || t > p->stepv[2 * (lo - 1) + 1])
        return -1;
    return (long)(lo - 1);
}

/* Add t us at `at` to op's time in its step. */
static int step_add(pass2 *p, np_prof_op *o, double at, double t)
{
    if (!p->n_steps)
        return 0;
    long k = step_of(p, at);
    if (k < 0)
        return 0;
    if (!o->per_step && !(o->per_step = calloc(p->n_steps, sizeof(double))))
        return -1;
    o->per_step[k] += t;
    return 0;
}

static thread_st *thread_of(pass2 *p, long long pid, long long tid)
{
    for (size_t i = 0; i < p->n_th; i++)
        if (p->th[i].pid == pid && p->th[i].tid == tid)
            return &p->th[i];
    if (np_grow((void **)&p->th, &p->cap_th, p->n_th + 1, sizeof *p->th))
        return NULL;
    thread_st *t = &p->th[p->n_th++];
    memset(t, 0, sizeof *t);
    t->pid = pid;
    t->tid = tid;
    t->last_ts = t->last_end = -INFINITY;
    for (size_t i = 0; i < p->n_thr; i++)
        if (p->thr[i].pid == pid && p->thr[i].tid == tid)
            t->end_order = p->thr[i].bad_start && !p->thr[i].bad_end;
    return t;
}

static int step_add(pass2 *p, np_prof_op *o, double at, double t);

static void optab_free(optab *t)
{
    for (size_t i = 0; i < t->n; i++) {
        free(t->ops[i].cat);
        free(t->ops[i].name);
        free(t->ops[i].within);
        free(t->ops[i].per_step);
        free(t->ops[i].step_n);
    }
    free(t->ops);
    free(t->slot);
    memset(t, 0, sizeof *t);
}

/* Drop every call kept (too many: no call rows). */
static void calls_free(pass2 *p)
{
    size_t ns = p->n_steps ? p->n_steps : 1;
    for (size_t k = 0; p->cs && k < ns; k++)
        free(p->cs[k].v);
    free(p->cs);
    p->cs = NULL;
    p->n_inst = 0;
}

/* e's call, kept in its step's call order (the whole trace's when it has
 * no steps) with its start from the step's start and `within` (the
 * outermost op holding it: ops index + 1, 0 none). Returns its id + 1
 * (step << 32 | index); 0 when e is in no step or the calls are off; -1
 * out of memory. Also counts op o's calls per step (an op called twice in
 * a step: p->repeats). */
static long long call_of(pass2 *p, np_prof_op *o, const np_prof_event *e, size_t within)
{
    if (p->calls_off)
        return 0;
    long s = p->n_steps ? step_of(p, e->ts) : 0;
    if (s < 0)
        return 0;
    size_t ns = p->n_steps ? p->n_steps : 1;
    if (!o->step_n && !(o->step_n = calloc(ns, sizeof *o->step_n)))
        return -1;
    if (o->step_n[s]++)
        p->repeats = 1;
    if (p->n_inst >= NP_PROF_MAX_CALLS) { /* memory stays bounded: no call rows */
        calls_free(p);
        p->calls_off = 1;
        return 0;
    }
    if (!p->cs && !(p->cs = calloc(ns, sizeof *p->cs)))
        return -1;
    cstep *c = &p->cs[s];
    if (np_grow((void **)&c->v, &c->cap, c->n + 1, sizeof *c->v))
        return -1;
    c->v[c->n] = (cinst){e->ts - (p->n_steps ? p->stepv[2 * s] : 0), 0, (uint32_t)(o - p->ops.ops),
                         (uint32_t)within};
    p->n_inst++;
    return (long long)(((uint64_t)s << 32) | c->n++) + 1;
}

static cinst *inst_of(pass2 *p, size_t call)
{
    uint64_t id = (uint64_t)call - 1;
    return &p->cs[id >> 32].v[id & 0xffffffffu];
}

/* Add self time t to call `call` (call_of's id; 0: none). */
static void call_add(pass2 *p, size_t call, double t)
{
    if (call && !p->calls_off)
        inst_of(p, call)->self += t;
}

static int frame_close(pass2 *p, thread_st *t)
{
    frame *f = &t->st[--t->n];
    np_prof_op *o = &p->ops.ops[f->op];
    o->self_us += f->dur - f->child;
    call_add(p, f->call, f->dur - f->child);
    return step_add(p, o, f->start, f->dur - f->child);
}

static int push_frame(thread_st *t, frame f)
{
    if (np_grow((void **)&t->st, &t->cap, t->n + 1, sizeof *t->st))
        return -1;
    t->st[t->n++] = f;
    return 0;
}

/* A cpu_op event of a thread whose events come in end order: its calls
 * (the outermost so far) that start at or after it are its children, all
 * of them seen, so its self time is final now; it replaces them. The call
 * rows made in its subtree get it as their `within` (a holder that comes
 * later replaces it: the outermost is the last). */
static int nest_end(pass2 *p, thread_st *t, const np_prof_event *e, size_t op)
{
    double end = e->ts + e->dur;
    if (end < t->last_end || t->n >= MAX_END_FRAMES) {
        p->unordered = 1;
        return 0;
    }
    t->last_end = end;
    double child = 0;
    size_t lo = t->n_pend;
    while (t->n && t->st[t->n - 1].start >= e->ts) {
        lo = t->st[t->n - 1].pend_lo;
        child += t->st[--t->n].dur;
    }
    if (p->calls_off) {
        t->n_pend = lo = 0;
    } else {
        for (size_t i = lo; i < t->n_pend; i++)
            inst_of(p, t->pend[i])->within = (uint32_t)op + 1;
    }
    np_prof_op *o = &p->ops.ops[op];
    double self = e->dur - child;
    o->self_us += self;
    long long call = call_of(p, o, e, 0);
    if (call < 0 || step_add(p, o, e->ts, self))
        return -1;
    call_add(p, (size_t)call, self);
    if (p->calls_off) {
        t->n_pend = lo = 0;
    } else if (call > 0) {
        if (np_grow((void **)&t->pend, &t->cap_pend, t->n_pend + 1, sizeof *t->pend))
            return -1;
        t->pend[t->n_pend++] = (size_t)call;
    }
    return push_frame(t, (frame){e->ts, end, e->dur, 0, op, 0, lo});
}

/* Nest a cpu_op event in its thread's stack (events in start order; in
 * end order: nest_end). */
static int nest(pass2 *p, const np_prof_event *e, size_t op)
{
    thread_st *t = thread_of(p, e->pid, e->tid);
    if (!t)
        return -1;
    if (t->end_order)
        return nest_end(p, t, e, op);
    if (e->ts < t->last_ts)
        p->unordered = 1;
    t->last_ts = e->ts;
    while (t->n && t->st[t->n - 1].end <= e->ts)
        if (frame_close(p, t))
            return -1;
    if (t->n)
        t->st[t->n - 1].child += e->dur;
    long long call = call_of(p, &p->ops.ops[op], e, t->n ? t->st[0].op + 1 : 0);
    if (call < 0)
        return -1;
    return push_frame(t, (frame){e->ts, e->ts + e->dur, e->dur, 0, op, (size_t)call, 0});
}

/* Track the latest start of e's source (its thread or stream; an
 * annotation apart from the ops of its thread); one out of order, or too
 * many sources, ends the finalizing. */
static void follow_source(pass2 *p, const np_prof_event *e, int c)
{
    long long tid = e->tid * 2 + (c == NP_PROF_OPTIMIZER || c == NP_PROF_DATA);
    int i = 0;
    while (i < p->n_src && (p->src[i].pid != e->pid || p->src[i].tid != tid))
        i++;
    if (i == p->n_src) {
        if (p->n_src == MAX_SRC) {
            p->sorted = 0;
            return;
        }
        p->src[p->n_src++] = (struct src){e->pid, tid, e->ts};
    } else if (e->ts < p->src[i].last) {
        p->sorted = 0;
    } else {
        p->src[i].last = e->ts;
    }
}

static int pass2_fn(const np_prof_event *e, void *user)
{
    pass2 *p = user;
    p->order++;
    if (e->ph != 'X' || !isfinite(e->ts) || !isfinite(e->dur) || e->dur < 0)
        return 0;
    np_prof_event tmp, step;
    if (!(e = as_role(&p->roles, e, &tmp)))
        return 0;
    if (!strcmp(e->cat, "cpu_op") && starts(e->name, "ProfilerStep#")) {
        step = *e; /* torch_npu writes its steps as cpu_op: an annotation, as torch's */
        step.cat = "user_annotation";
        e = &step;
    }
    int dev = is_device_event(e);
    if (dev && e->correlation >= 0 && run_find(p->drop, p->n_drop, e->correlation))
        return 0;
    np_prof_op *o = op_get(&p->ops, e->cat, e->name, p->order);
    if (!o) {
        p->oom = 1;
        return 1;
    }
    o->count++;
    o->total_us += e->dur;
    int fail = 0;
    if (dev) {
        o->self_us += e->dur;
        long long call = call_of(p, o, e, 0);
        fail = call < 0 || step_add(p, o, e->ts, e->dur);
        call_add(p, fail ? 0 : (size_t)call, e->dur);
    } else if (!strcmp(e->cat, "cpu_op")) {
        if (e->self_given) { /* operator_details.csv: its self time, not nested */
            o->self_us += e->self_us;
            long long call = call_of(p, o, e, 0);
            fail = call < 0 || step_add(p, o, e->ts, e->self_us);
            call_add(p, fail ? 0 : (size_t)call, e->self_us);
        } else if (!p->unordered) {
            fail = nest(p, e, (size_t)(o - p->ops.ops));
        }
    } /* other categories (steps, annotations) keep no per-step times: the
       * compare does not use them, and ProfilerStep#N is one op per step */
    if (fail) {
        p->oom = 1;
        return 1;
    }
    if (e->dur < o->min_us)
        o->min_us = e->dur;
    if (e->dur > o->max_us)
        o->max_us = e->dur;
    if (isfinite(e->flops)) {
        o->flops += e->flops;
        p->flops += e->flops;
    }
    int c = -1;
    if (p->device)
        c = dev ? (int)device_class_ev(e) : -1;
    else
        c = cpu_class(e);
    if (c < 0)
        return 0;
    if (e->ts < p->water) { /* before the finalized past: read again without finalizing */
        p->violated = 1;
        return 1;
    }
    follow_source(p, e, c);
    if (iv_add(&p->cls[c], e->ts, e->ts + (e->self_given ? e->self_us : e->dur))) {
        p->oom = 1;
        return 1;
    }
    if (p->allow_final && p->sorted && p->cls[c].n >= FINAL_AT) {
        /* every source's next event starts at or after its latest start */
        double upto = INFINITY;
        for (int i = 0; i < p->n_src; i++)
            if (p->src[i].last < upto)
                upto = p->src[i].last;
        if (upto > p->water) {
            if (timeline_part(p, upto)) {
                p->oom = 1;
                return 1;
            }
            p->water = upto;
            p->r->streamed = 1;
        }
    }
    return 0;
}

static int dbl_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[0..n) (n > 0; sorts v). */
static double median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, dbl_cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int op_total_cmp(const void *a, const void *b)
{
    const np_prof_op *x = a, *y = b;
    if (x->total_us != y->total_us)
        return x->total_us > y->total_us ? -1 : 1;
    return x->first < y->first ? -1 : x->first > y->first;
}

static void add_bubble(np_prof_rank *r, double start, double g)
{
    r->n_bubbles++;
    r->bubble_us += g;
    int k;
    if (r->n_top < NP_PROF_TOP_BUBBLES)
        k = r->n_top++;
    else if (g > r->top[NP_PROF_TOP_BUBBLES - 1].dur_us)
        k = NP_PROF_TOP_BUBBLES - 1;
    else
        return;
    r->top[k] = (np_prof_bubble){start, g};
    for (; k > 0 && r->top[k - 1].dur_us < r->top[k].dur_us; k--) {
        np_prof_bubble t = r->top[k - 1];
        r->top[k - 1] = r->top[k];
        r->top[k] = t;
    }
}

/* Move the parts of s (compacted) before `upto` into h; s keeps the rest. */
static int iv_split(ivset *h, ivset *s, double upto)
{
    iv_compact(s);
    h->n = 0;
    if (s->n > h->cap) {
        double *v = realloc(h->v, s->n * 2 * sizeof(double));
        if (!v)
            return -1;
        h->v = v;
        h->cap = s->n;
    }
    size_t i = 0;
    for (; i < s->n && s->v[2 * i] < upto; i++) {
        h->v[2 * h->n] = s->v[2 * i];
        h->v[2 * h->n + 1] = s->v[2 * i + 1] < upto ? s->v[2 * i + 1] : upto;
        h->n++;
        if (s->v[2 * i + 1] > upto) { /* crosses: its rest stays */
            s->v[2 * i] = upto;
            break;
        }
    }
    if (i && s->n > i)
        memmove(s->v, s->v + 2 * i, (s->n - i) * 2 * sizeof(double));
    s->n -= i;
    return 0;
}

/* The timeline before `upto` (INFINITY: all of it) finalized into p->r:
 * each instant goes to the first class covering it in the timeline's
 * order; busy time, bubbles (also the gap to what was finalized before),
 * communication/compute overlap. -1 out of memory. */
static int timeline_part(pass2 *p, double upto)
{
    static const int dev_prio[] = {NP_PROF_COMPUTE, NP_PROF_COMM, NP_PROF_MEMORY, NP_PROF_OTHER};
    static const int cpu_prio[] = {NP_PROF_OPTIMIZER, NP_PROF_DATA, NP_PROF_COMM, NP_PROF_COMPUTE};
    const int *prio = p->device ? dev_prio : cpu_prio;
    np_prof_rank *r = p->r;
    ivset head[4] = {{0}}, acc = {0}, tmp = {0};
    int oom = 0;
    for (int i = 0; i < 4; i++)
        oom |= iv_split(&head[i], &p->cls[prio[i]], upto);
    double before = 0;
    for (int i = 0; i < 4 && !oom; i++) {
        oom |= iv_union(&tmp, &acc, &head[i]);
        ivset t = acc;
        acc = tmp;
        tmp = t;
        double now = iv_len(&acc);
        r->class_us[prio[i]] += now - before;
        before = now;
    }
    r->busy_us += before;
    if (!oom && acc.n) {
        if (!p->any) {
            p->any = 1;
            p->first = acc.v[0];
        } else if (acc.v[0] > p->last_end) {
            add_bubble(r, p->last_end - p->first, acc.v[0] - p->last_end);
        }
        for (size_t i = 1; i < acc.n; i++)
            add_bubble(r, acc.v[2 * i - 1] - p->first, acc.v[2 * i] - acc.v[2 * i - 1]);
        p->last_end = acc.v[2 * acc.n - 1];
    }
    int ic = -1, im = -1; /* communication and compute among the four */
    for (int i = 0; i < 4; i++)
        prio[i] == NP_PROF_COMM ? (ic = i) : prio[i] == NP_PROF_COMPUTE ? (im = i) : 0;
    double lc = iv_len(&head[ic]), lm = iv_len(&head[im]);
    r->comm_us += lc;
    r->compute_us += lm;
    if (!oom) {
        oom |= iv_union(&tmp, &head[ic], &head[im]);
        r->overlap_us += lc + lm - iv_len(&tmp);
    }
    for (int i = 0; i < 4; i++)
        free(head[i].v);
    free(acc.v);
    free(tmp.v);
    return oom ? -1 : 0;
}

/* ---- sequences aligned ------------------------------------------------------ */
/* Two sequences x[0..nx) and y[0..ny) aligned the way diff aligns lines:
 * equal items pair; at a difference the nearest offset d (up to
 * ALIGN_WINDOW) from which the next ALIGN_RUN items of both sides agree
 * again skips d items of x, of y or of both (left unpaired); none found
 * skips one of each. Used twice: each step's calls against the trace's
 * reference step (build_calls), and two traces' call rows (pair_calls). */
#define ALIGN_WINDOW 256
#define ALIGN_RUN 8

typedef struct aligner {
    int (*same)(const void *u, size_t i, size_t j); /* x[i] and y[j] are equal */
    void (*pair)(void *u, size_t i, size_t j);      /* x[i] and y[j] paired */
    void *u;
    size_t nx, ny;
} aligner;

/* 1 when x[i..] and y[j..] agree for ALIGN_RUN items (or to the end of one). */
static int runs_agree(const aligner *a, size_t i, size_t j)
{
    size_t k = 0;
    for (; k < ALIGN_RUN && i + k < a->nx && j + k < a->ny; k++)
        if (!a->same(a->u, i + k, j + k))
            return 0;
    return k > 0;
}

static void align(const aligner *a)
{
    size_t i = 0, j = 0, nx = a->nx, ny = a->ny;
    while (i < nx && j < ny) {
        if (a->same(a->u, i, j)) {
            a->pair(a->u, i++, j++);
            continue;
        }
        size_t skip_a = 1, skip_b = 1;
        for (size_t d = 1; d <= ALIGN_WINDOW; d++) {
            if (i + d < nx && runs_agree(a, i + d, j)) {
                skip_a = d, skip_b = 0;
                break;
            }
            if (j + d < ny && runs_agree(a, i, j + d)) {
                skip_a = 0, skip_b = d;
                break;
            }
            if (i + d < nx && j + d < ny && runs_agree(a, i + d, j + d)) {
                skip_a = skip_b = d;
                break;
            }
        }
        i += skip_a;
        j += skip_b;
    }
}

/* ---- call rows ---------------------------------------------------------------- */
/* Each step's calls become rows by their place in a reference step's call
 * order: the step whose sequence of ops most steps share (ties: the
 * earliest). Its k-th call of an op is the row "NAME #k"; another step's
 * calls are aligned to it (align: an extra call in one step leaves the
 * others on their rows; a call left over that is the same op's k-th call
 * in both takes that row, a reordering); a call the reference lacks is a
 * row of its own, keyed by the reference row before it and its place
 * after that, named after the reference's calls of its op ("NAME #k", k
 * from the reference's count on) and ordered after that row. A row's
 * count is the steps it was called in, its step time the median over
 * those steps. */
typedef struct seq_key {
    uint64_t h;
    size_t n, step;
} seq_key;

static int seq_key_cmp(const void *x, const void *y)
{
    const seq_key *a = x, *b = y;
    if (a->h != b->h)
        return a->h < b->h ? -1 : 1;
    if (a->n != b->n)
        return a->n < b->n ? -1 : 1;
    return a->step < b->step ? -1 : a->step > b->step;
}

/* The reference step: the sequence of ops (a hash of it) most steps have. */
static long ref_step(const pass2 *p, size_t ns)
{
    seq_key *k = malloc(ns * sizeof *k);
    if (!k)
        return -1;
    size_t m = 0;
    for (size_t s = 0; s < ns; s++) {
        const cstep *c = &p->cs[s];
        if (!c->n)
            continue;
        uint64_t h = 1469598103934665603ull;
        for (size_t i = 0; i < c->n; i++)
            h = (h ^ c->v[i].op) * 1099511628211ull;
        k[m++] = (seq_key){h, c->n, s};
    }
    qsort(k, m, sizeof *k, seq_key_cmp);
    size_t best = 0, best_n = 0;
    for (size_t i = 0; i < m;) {
        size_t j = i;
        while (j < m && k[j].h == k[i].h && k[j].n == k[i].n)
            j++;
        if (j - i > best_n || (j - i == best_n && k[i].step < k[best].step))
            best = i, best_n = j - i;
        i = j;
    }
    long r = (long)k[best].step;
    free(k);
    return r;
}

typedef struct crows_b {
    pass2 *p;
    optab rows;        /* the call rows: the reference's, then the extra ones */
    size_t nref;
    uint32_t *ref;     /* the reference step's ops */
    uint32_t *row_op;  /* each row's op */
    long long *nk;     /* per op: its calls in the reference */
    long long *kk;     /* per op: a counter */
    long *m;           /* the step's calls: their reference row, -1 none */
    size_t *used;      /* per reference row: the step (+ 1) that took it */
    const cstep *c;
    size_t step;
} crows_b;

static int cb_same(const void *u, size_t i, size_t j)
{
    const crows_b *b = u;
    return b->ref[i] == b->c->v[j].op;
}

static void cb_pair(void *u, size_t i, size_t j)
{
    crows_b *b = u;
    b->m[j] = (long)i;
    b->used[i] = b->step + 1;
}

/* a and b in one new string; NULL out of memory. */
static char *joined(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 1);
    if (s) {
        memcpy(s, a, la);
        memcpy(s + la, b, lb + 1);
    }
    return s;
}

/* The row (cat of op, "NAME" + suffix) of b->rows, added with order key `first`. */
static long cb_row(crows_b *b, uint32_t op, const char *suffix, uint64_t first)
{
    const np_prof_op *o = &b->p->ops.ops[op];
    char *name = joined(o->name, suffix);
    if (!name)
        return -1;
    size_t before = b->rows.n;
    np_prof_op *r = op_get(&b->rows, o->cat, name, (long long)first);
    free(name);
    if (!r)
        return -1;
    if (b->rows.n > before) {
        uint32_t *v = realloc(b->row_op, b->rows.n * sizeof *v);
        if (!v)
            return -1;
        b->row_op = v;
        v[b->rows.n - 1] = op;
        r->self_us = 0;
    }
    return (long)(r - b->rows.ops);
}

/* Step b->step's calls matched to rows; each call's op replaced by its row. */
static int cb_step(crows_b *b, cstep *c)
{
    b->c = c;
    for (size_t i = 0; i < c->n; i++)
        b->m[i] = -1;
    align(&(aligner){cb_same, cb_pair, b, b->nref, c->n});
    char suffix[64];
    for (size_t i = 0; i < c->n; i++) { /* left over: the same op's k-th call in both */
        long long k = b->kk[c->v[i].op]++;
        if (b->m[i] >= 0 || k >= b->nk[c->v[i].op])
            continue;
        snprintf(suffix, sizeof suffix, " #%lld", k);
        const np_prof_op *o = &b->p->ops.ops[c->v[i].op];
        char *name = joined(o->name, suffix);
        if (!name)
            return -1;
        const np_prof_op *r = op_find(&b->rows, o->cat, name);
        free(name);
        size_t row = r ? (size_t)(r - b->rows.ops) : b->nref;
        if (row < b->nref && b->used[row] != b->step + 1)
            cb_pair(b, row, i);
    }
    long q = -1;
    uint64_t j = 0;
    for (size_t i = 0; i < c->n; i++) {
        b->kk[c->v[i].op] = 0;
        if (b->m[i] >= 0) {
            q = b->m[i], j = 0;
            continue;
        }
        snprintf(suffix, sizeof suffix, " #+%ld.%llu", q, (unsigned long long)j);
        long row = cb_row(b, c->v[i].op, suffix, ((uint64_t)(q + 1) << 41) | (1ull << 40) | (j << 20) |
                                                     (uint64_t)b->rows.n);
        if (row < 0)
            return -1;
        b->m[i] = row;
        j++;
    }
    for (size_t i = 0; i < c->n; i++)
        c->v[i].op = (uint32_t)b->m[i];
    return 0;
}

typedef struct row_ord {
    long long first;
    size_t row;
} row_ord;

static int row_ord_cmp(const void *x, const void *y)
{
    const row_ord *a = x, *b = y;
    return a->first < b->first ? -1 : a->first > b->first;
}

/* The rows' counts, times, medians, `at` and `within` from their calls,
 * then the rows in order (a reference row, the extra ones after it) as
 * r->calls, the extra ones named. */
static int rows_finish(np_prof_rank *r, pass2 *p, crows_b *b)
{
    size_t nr = b->rows.n, ns = p->n_steps ? p->n_steps : 1, pos = 0;
    np_prof_op *rows = b->rows.ops, *out = NULL;
    size_t *off = calloc(nr + 1, sizeof *off);
    row_ord *perm = malloc(nr * sizeof *perm);
    double *vals = malloc((p->n_inst ? p->n_inst : 1) * sizeof *vals);
    int rc = -1;
    if (!off || !perm || !vals)
        goto done;
    for (size_t s = 0; s < ns; s++)
        for (size_t i = 0; i < p->cs[s].n; i++) {
            const cinst *v = &p->cs[s].v[i];
            np_prof_op *o = &rows[v->op];
            if (!o->count) { /* the first step it is in */
                o->at_us = v->at;
                if (v->within && !(o->within = strdup(p->ops.ops[v->within - 1].name)))
                    goto done;
            }
            o->count++;
            o->self_us += v->self;
            o->total_us += v->self;
            o->min_us = v->self < o->min_us ? v->self : o->min_us;
            o->max_us = v->self > o->max_us ? v->self : o->max_us;
            off[v->op + 1]++;
        }
    for (size_t k = 0; k < nr; k++)
        off[k + 1] += off[k];
    for (size_t s = 0; s < ns; s++)
        for (size_t i = 0; i < p->cs[s].n; i++)
            vals[--off[p->cs[s].v[i].op + 1]] = p->cs[s].v[i].self;
    for (size_t k = 0; k < nr; k++) {
        rows[k].step_us = p->n_steps && rows[k].count ? median(vals + off[k + 1], (size_t)rows[k].count) : NAN;
        perm[k] = (row_ord){rows[k].first, k};
    }
    qsort(perm, nr, sizeof *perm, row_ord_cmp);
    if (!(out = malloc(nr * sizeof *out)))
        goto done;
    for (; pos < nr; pos++) {
        np_prof_op *o = &rows[perm[pos].row];
        if (perm[pos].row >= b->nref) { /* an extra row: "NAME #k", k after the reference's */
            uint32_t op = b->row_op[perm[pos].row];
            const char *base = p->ops.ops[op].name;
            size_t len = strlen(base) + 24;
            char *name = malloc(len);
            if (!name)
                goto done;
            snprintf(name, len, "%s #%lld", base, b->nk[op] + b->kk[op]++);
            free(o->name);
            o->name = name;
        }
        out[pos] = *o;
        out[pos].first = (long long)pos;
    }
    r->calls = out; /* owned by r from here; rows keep no strings */
    r->n_calls = nr;
    free(b->rows.slot);
    free(rows);
    memset(&b->rows, 0, sizeof b->rows);
    out = NULL;
    rc = 0;
done:
    free(out);
    free(off);
    free(perm);
    free(vals);
    return rc;
}

/* r->calls from p's calls kept per step (above). */
static int build_calls(np_prof_rank *r, pass2 *p)
{
    size_t ns = p->n_steps ? p->n_steps : 1, nops = p->ops.n, maxn = 1;
    crows_b b = {.p = p};
    int rc = -1;
    long rs = ref_step(p, ns);
    if (rs < 0)
        return -1;
    for (size_t s = 0; s < ns; s++)
        maxn = p->cs[s].n > maxn ? p->cs[s].n : maxn;
    const cstep *rcs = &p->cs[rs];
    b.nref = rcs->n;
    b.ref = malloc(b.nref * sizeof *b.ref);
    b.nk = calloc(nops, sizeof *b.nk);
    b.kk = calloc(nops, sizeof *b.kk);
    b.m = malloc(maxn * sizeof *b.m);
    b.used = calloc(b.nref, sizeof *b.used);
    if (!b.ref || !b.nk || !b.kk || !b.m || !b.used)
        goto done;
    char suffix[32];
    for (size_t i = 0; i < b.nref; i++) {
        b.ref[i] = rcs->v[i].op;
        snprintf(suffix, sizeof suffix, " #%lld", b.nk[b.ref[i]]++);
        if (cb_row(&b, b.ref[i], suffix, (uint64_t)(i + 1) << 41) != (long)i)
            goto done;
    }
    for (size_t s = 0; s < ns; s++) {
        b.step = s;
        if (cb_step(&b, &p->cs[s]))
            goto done;
    }
    rc = rows_finish(r, p, &b);
done:
    optab_free(&b.rows);
    free(b.ref);
    free(b.row_op);
    free(b.nk);
    free(b.kk);
    free(b.m);
    free(b.used);
    return rc;
}

/* The median step time, each op's median over the steps, self times
 * kept only where they mean something, the call rows. tmpv: room for the
 * steps (or NULL). -1 out of memory. */
static void finish_tab(np_prof_rank *r, pass2 *p, optab *t, double *tmpv);

static int finish_ops(np_prof_rank *r, pass2 *p, double *tmpv)
{
    r->step_med_us = NAN;
    if (tmpv && p->n_steps) {
        for (size_t k = 0; k < p->n_steps; k++)
            tmpv[k] = p->stepv[2 * k + 1] - p->stepv[2 * k];
        r->step_med_us = median(tmpv, p->n_steps);
    }
    finish_tab(r, p, &p->ops, tmpv);
    r->calls_ok = r->self_ok && !p->calls_off && p->repeats && p->n_inst;
    if (r->calls_ok && build_calls(r, p)) {
        r->calls_ok = 0;
        return -1;
    }
    return 0;
}

static void finish_tab(np_prof_rank *r, pass2 *p, optab *t, double *tmpv)
{
    for (size_t i = 0; i < t->n; i++) {
        np_prof_op *o = &t->ops[i];
        int is_cpu = !strcmp(o->cat, "cpu_op");
        int has_self = is_cpu ? r->self_ok : device_cat(o->cat);
        if (!has_self)
            o->self_us = NAN;
        o->step_us = NAN;
        if (tmpv && p->n_steps && has_self) {
            for (size_t k = 0; k < p->n_steps; k++)
                tmpv[k] = o->per_step ? o->per_step[k] : 0;
            o->step_us = median(tmpv, p->n_steps);
        }
        free(o->per_step);
        o->per_step = NULL;
        free(o->step_n);
        o->step_n = NULL;
    }
}

/* Free what pass 2 holds besides the operators. */
static void pass2_free(pass2 *p)
{
    free(p->drop);
    for (size_t i = 0; i < p->n_th; i++) {
        free(p->th[i].st);
        free(p->th[i].pend);
    }
    free(p->th);
    free(p->ops.slot);
    calls_free(p);
    for (int c = 0; c < NP_PROF_CLASS_COUNT; c++)
        free(p->cls[c].v);
}

/* Pass 2 into r: operators, self times, the timeline. NP_ERR_ARG with
 * p->violated when the finalized past was contradicted (read again with
 * allow_final 0). */
static np_status run_pass2(np_prof_rank *r, pass2 *p, const char *path, np_prof_trace_info *info,
                           np_error *err)
{
    p->r = r;
    p->sorted = 1;
    p->water = -INFINITY;
    np_status st = np_prof_read(info, path, pass2_fn, p, err);
    if (p->oom)
        return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    if (st)
        return st;
    for (size_t i = 0; i < p->n_th; i++)
        while (p->th[i].n && !p->th[i].end_order)
            if (frame_close(p, &p->th[i]))
                return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    if (timeline_part(p, INFINITY))
        return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    if (p->any) {
        r->span_us = p->last_end - p->first;
        r->class_us[NP_PROF_IDLE] = r->span_us - r->busy_us;
    }
    if (r->overlap_us < 0)
        r->overlap_us = 0;
    r->self_ok = !p->unordered;
    return NP_OK;
}

static void pass1_free(pass1 *p)
{
    free(p->late);
    free(p->runs);
    free(p->stepv);
    free(p->thr);
}

/* p->late's launches in the last step as runs of consecutive ids. */
static int late_runs(pass1 *p)
{
    size_t n = 0;
    long long *v = malloc((p->n_late ? p->n_late : 1) * sizeof *v);
    if (!v)
        return -1;
    for (size_t i = 0; i < p->n_late; i++)
        if (p->late[i].ts >= p->last_step)
            v[n++] = p->late[i].corr;
    qsort(v, n, sizeof *v, ll_cmp);
    p->n_runs = 0;
    for (size_t i = 0; i < n; i++) {
        if (p->n_runs && v[i] <= p->runs[p->n_runs - 1].hi + 1) {
            p->runs[p->n_runs - 1].hi = v[i];
            continue;
        }
        if (np_grow((void **)&p->runs, &p->cap_runs, p->n_runs + 1, sizeof *p->runs)) {
            free(v);
            return -1;
        }
        p->runs[p->n_runs++] = (corr_run){v[i], v[i], 0, 0};
    }
    free(v);
    return 0;
}

/* Pass 1: the ProfilerSteps and, on a device trace, the correlations of
 * the last step's launches (p2->drop). */
static np_status run_pass1(np_prof_rank *r, pass1 *p1, pass2 *p2, const char *path, np_error *err)
{
    np_prof_trace_info info;
    p1->max_corr = -1;
    np_status st = np_prof_read(&info, path, pass1_fn, p1, err);
    if (!st && !p1->oom && p1->mixed) { /* a run straddles a step start: keep each launch */
        pass1_free(p1);
        memset(p1, 0, sizeof *p1);
        p1->exact = 1;
        st = np_prof_read(&info, path, pass1_fn, p1, err);
    }
    if (p1->oom)
        return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    if (st)
        return st;
    if (p1->steps)
        qsort(p1->stepv, (size_t)p1->steps, 2 * sizeof(double), iv_cmp);
    p2->roles = p1->roles;
    p2->device = p1->device_events > 0;
    for (int i = 0; i < p1->roles.n; i++) /* Ascend's device lanes (their events are not
                                            * known as such in pass 1: metadata may follow) */
        if (p1->roles.v[i].role == ROLE_ASCEND_HW || p1->roles.v[i].role == ROLE_HCCL)
            p2->device = 1;
    /* HTA leaves out the kernels launched in the last ProfilerStep (they may
     * be cut off by the profiler's stop) when there are several steps. */
    if (p2->device && p1->steps >= 2) {
        if (p1->exact && late_runs(p1))
            return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
        p2->drop = p1->runs; /* owned by p2 from here */
        p2->n_drop = p1->n_runs;
        p1->runs = NULL;
        r->last_step_dropped = 1;
    }
    p2->stepv = p1->stepv;
    p2->n_steps = (size_t)p1->steps;
    p2->thr = p1->thr;
    p2->n_thr = p1->n_thr;
    return NP_OK;
}

static np_status analyze(np_prof_rank *r, const char *path, int calls, np_error *err)
{
    pass1 p1;
    pass2 p2;
    np_prof_trace_info info = {0};
    np_status st;
    for (int allow = 1;; allow = 0) {
        memset(r, 0, sizeof *r);
        r->rank = -1;
        memset(&p1, 0, sizeof p1);
        memset(&p2, 0, sizeof p2);
        p2.allow_final = allow;
        p2.calls_off = !calls;
        st = run_pass1(r, &p1, &p2, path, err);
        if (!st)
            st = run_pass2(r, &p2, path, &info, err);
        free(p1.late);
        free(p1.runs);
        r->ops = p2.ops.ops; /* owned by r from here */
        r->n_ops = p2.ops.n;
        if (st && p2.violated && allow) {
            free(p1.stepv);
            free(p1.thr);
            pass2_free(&p2);
            np_prof_rank_free(r);
            continue;
        }
        break;
    }
    double *tmpv = st ? NULL : malloc((p2.n_steps ? p2.n_steps : 1) * sizeof *tmpv);
    if (!st && !tmpv)
        st = np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    if (!st && finish_ops(r, &p2, tmpv))
        st = np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    free(tmpv);
    free(p1.stepv);
    free(p1.thr);
    pass2_free(&p2);
    r->path = strdup(path);
    r->rank = info.rank;
    r->device = p2.device;
    r->events = info.events;
    r->steps = p1.steps;
    r->flops = p2.flops;
    if (!st && !r->path)
        st = np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    if (st) {
        np_prof_rank_free(r);
        return st;
    }
    if (r->n_ops)
        qsort(r->ops, r->n_ops, sizeof *r->ops, op_total_cmp);
    return NP_OK;
}

np_status np_prof_analyze(np_prof_rank *r, const char *path, np_error *err)
{
    return analyze(r, path, 1, err);
}

np_status np_prof_analyze_ops(np_prof_rank *r, const char *path, np_error *err)
{
    return analyze(r, path, 0, err);
}

void np_prof_rank_free(np_prof_rank *r)
{
    if (!r)
        return;
    optab t = {.ops = r->ops, .n = r->n_ops};
    optab_free(&t);
    t = (optab){.ops = r->calls, .n = r->n_calls};
    optab_free(&t);
    free(r->path);
    memset(r, 0, sizeof *r);
}

/* ---- compare ----------------------------------------------------------------- */
static double op_time(const np_prof_op *o, int use_self)
{
    return use_self ? o->self_us : o->total_us;
}

static int pair_cmp(const void *x, const void *y)
{
    const np_prof_pair *a = x, *b = y;
    if (a->delta_us != b->delta_us)
        return a->delta_us > b->delta_us ? -1 : 1;
    const np_prof_op *oa = a->a ? a->a : a->b, *ob = b->a ? b->a : b->b;
    int c = strcmp(oa->cat, ob->cat);
    return c ? c : strcmp(oa->name, ob->name);
}

/* Operators that take part: those with a self time (or cpu_op and device
 * events by total when a side is unordered). */
static int takes_part(const np_prof_op *o, int use_self)
{
    if (use_self)
        return isfinite(o->self_us);
    return !strcmp(o->cat, "cpu_op") || device_cat(o->cat);
}

/* Pair a's and b's operators by category and name into *out (n rows):
 * a's in their order, then b's not in a. */
static int pair_ops(np_prof_pair **out, size_t *n_out, const np_prof_op *a, size_t na,
                    const np_prof_op *b, size_t nb, int use_self)
{
    optab idx = {0};
    np_prof_pair *pairs = malloc((na + nb + 1) * sizeof *pairs);
    if (!pairs)
        return -1;
    size_t n = 0;
    /* a's ops indexed by (cat, name) in a table of copies whose .first
     * is the pair's index */
    for (size_t i = 0; i < na; i++) {
        if (!takes_part(&a[i], use_self))
            continue;
        if (!op_get(&idx, a[i].cat, a[i].name, (long long)n))
            goto oom;
        pairs[n++] = (np_prof_pair){.a = &a[i]};
    }
    size_t n_a = n;
    for (size_t i = 0; i < nb; i++) {
        if (!takes_part(&b[i], use_self))
            continue;
        size_t before = idx.n;
        np_prof_op *o = op_get(&idx, b[i].cat, b[i].name, -1);
        if (!o)
            goto oom;
        if (idx.n == before && o->first >= 0 && (size_t)o->first < n_a) { /* in a */
            pairs[o->first].b = &b[i];
        } else {
            pairs[n++] = (np_prof_pair){.b = &b[i]};
        }
    }
    optab_free(&idx);
    *out = pairs;
    *n_out = n;
    return 0;
oom:
    optab_free(&idx);
    free(pairs);
    return -1;
}

/* ---- calls realigned -------------------------------------------------------- */
/* Call rows are named "NAME #k" (the k-th call of an op in its step), so
 * an op called once more in one run (one more add in a layer) shifts every
 * later k of that op: pairing by name would pair each later call with the
 * one before it. The rows are therefore aligned (align) as two sequences of
 * ops in call order (the rows' order), matching on category and NAME
 * without " #k". Rows left one-sided that carry the same full name on both
 * sides (a reordering, not an insertion) are paired by name afterwards. */
typedef struct crow {
    const np_prof_op *o;
    size_t len;  /* the name's length without " #k" */
    int matched;
} crow;

static size_t base_len(const char *n)
{
    const char *h = strrchr(n, '#');
    return h && h > n && h[-1] == ' ' ? (size_t)(h - 1 - n) : strlen(n);
}

static int crow_cmp(const void *x, const void *y)
{
    const crow *a = x, *b = y;
    return a->o->first < b->o->first ? -1 : a->o->first > b->o->first;
}

static crow *crows(const np_prof_op *o, size_t n)
{
    crow *v = malloc((n ? n : 1) * sizeof *v);
    if (!v)
        return NULL;
    for (size_t i = 0; i < n; i++)
        v[i] = (crow){&o[i], base_len(o[i].name), 0};
    if (n)
        qsort(v, n, sizeof *v, crow_cmp);
    return v;
}

typedef struct pc_align {
    crow *x, *y;
    np_prof_pair *pairs;
    size_t n;
} pc_align;

static int pc_same(const void *u, size_t i, size_t j)
{
    const pc_align *c = u;
    const crow *x = &c->x[i], *y = &c->y[j];
    return x->len == y->len && !memcmp(x->o->name, y->o->name, x->len) && !strcmp(x->o->cat, y->o->cat);
}

static void pc_pair(void *u, size_t i, size_t j)
{
    pc_align *c = u;
    c->pairs[c->n++] = (np_prof_pair){.a = c->x[i].o, .b = c->y[j].o};
    c->x[i].matched = c->y[j].matched = 1;
}

static int pair_calls(np_prof_pair **out, size_t *n_out, const np_prof_op *a, size_t na,
                      const np_prof_op *b, size_t nb)
{
    crow *x = crows(a, na), *y = crows(b, nb);
    np_prof_pair *pairs = malloc((na + nb + 1) * sizeof *pairs);
    optab idx = {0};
    if (!x || !y || !pairs)
        goto oom;
    pc_align c = {x, y, pairs, 0};
    align(&(aligner){pc_same, pc_pair, &c, na, nb});
    size_t n = c.n;
    /* one-sided rows: those of the same full name pair (a reordering) */
    size_t n_pre = n;
    for (size_t k = 0; k < na; k++)
        if (!x[k].matched) {
            if (!op_get(&idx, x[k].o->cat, x[k].o->name, (long long)n))
                goto oom;
            pairs[n++] = (np_prof_pair){.a = x[k].o};
        }
    for (size_t k = 0; k < nb; k++)
        if (!y[k].matched) {
            size_t before = idx.n;
            np_prof_op *o = op_get(&idx, y[k].o->cat, y[k].o->name, -1);
            if (!o)
                goto oom;
            if (idx.n == before && o->first >= (long long)n_pre && !pairs[o->first].b)
                pairs[o->first].b = y[k].o;
            else
                pairs[n++] = (np_prof_pair){.b = y[k].o};
        }
    optab_free(&idx);
    free(x);
    free(y);
    *out = pairs;
    *n_out = n;
    return 0;
oom:
    optab_free(&idx);
    free(x);
    free(y);
    free(pairs);
    return -1;
}

/* The pairs' times per step, deltas and shares; sorted most regressed first. */
static void pair_times(np_prof_compare *out, np_prof_pair *pairs, size_t n, int use_self)
{
    for (size_t k = 0; k < n; k++) {
        np_prof_pair *p = &pairs[k];
        if (out->robust) {
            p->a_step_us = p->a && isfinite(p->a->step_us) ? p->a->step_us : 0;
            p->b_step_us = p->b && isfinite(p->b->step_us) ? p->b->step_us : 0;
        } else {
            p->a_step_us = p->a ? op_time(p->a, use_self) / out->a_steps : 0;
            p->b_step_us = p->b ? op_time(p->b, use_self) / out->b_steps : 0;
        }
        p->delta_us = p->b_step_us - p->a_step_us;
        p->ratio = p->a && p->b && p->a_step_us > 0 ? p->b_step_us / p->a_step_us : NAN;
        p->share_a = out->a_step_us > 0 ? p->a_step_us / out->a_step_us : NAN;
        p->share_b = out->b_step_us > 0 ? p->b_step_us / out->b_step_us : NAN;
    }
    if (n)
        qsort(pairs, n, sizeof *pairs, pair_cmp);
}

np_status np_prof_compare_ranks(np_prof_compare *out, const np_prof_rank *a, const np_prof_rank *b,
                                np_error *err)
{
    memset(out, 0, sizeof *out);
    int use_self = a->self_ok && b->self_ok;
    out->a_steps = a->steps > 0 ? (double)a->steps : 1;
    out->b_steps = b->steps > 0 ? (double)b->steps : 1;
    out->robust = use_self && a->steps > 0 && b->steps > 0;
    out->a_step_us = out->robust ? a->step_med_us : a->span_us / out->a_steps;
    out->b_step_us = out->robust ? b->step_med_us : b->span_us / out->b_steps;
    if (pair_ops(&out->pairs, &out->n_pairs, a->ops, a->n_ops, b->ops, b->n_ops, use_self))
        return np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory");
    pair_times(out, out->pairs, out->n_pairs, use_self);
    if (a->calls_ok && b->calls_ok) { /* call by call: self times of both */
        if (pair_calls(&out->calls, &out->n_calls, a->calls, a->n_calls, b->calls, b->n_calls)) {
            np_prof_compare_free(out);
            return np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory");
        }
        pair_times(out, out->calls, out->n_calls, 1);
    }
    return NP_OK;
}

void np_prof_compare_free(np_prof_compare *c)
{
    if (c) {
        free(c->pairs);
        free(c->calls);
        memset(c, 0, sizeof *c);
    }
}
