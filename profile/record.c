/* profile/record.c - the profile task: an observer of the runtime's hook
 * (before events at a call's start, after events at its end) that writes
 * each API and module call of the schedule's active steps as a complete
 * event ("ph": "X") of the Chrome trace-event JSON that torch.profiler
 * writes, so `nprobe profile`, Perfetto and chrome://tracing read it
 * (docs/PROFILE.md, "The profile task"). A step's events are kept in
 * memory and written at its end in start order (parents before their
 * children), the order nprobe profile's self times and streaming need. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "nprobe/profile.h"

#define MAX_DEPTH 256

enum { CAT_OP = 0, CAT_MODULE, CAT_STEP, CAT_MEM };
static const char *const cat_names[] = {"cpu_op", "python_function", "user_annotation", NULL};

typedef struct rec {
    long long ts, dur; /* CLOCK_MONOTONIC, nanoseconds */
    double flops;
    size_t name, args; /* offsets into the step's strings (args: -1 none) */
    int cat;
    long long mem;     /* CAT_MEM: bytes in use */
} rec;

typedef struct open_call {
    long long ts;
    size_t name;
} open_call;

struct np_prof_rec {
    np_prof_rec_opts o;
    np_out out;
    FILE *fp;
    char path[4096];
    int active, step;
    long long step_ts;
    open_call st[MAX_DEPTH];
    int depth;
    rec *recs;
    size_t n_recs, cap_recs;
    char *str;
    size_t n_str, cap_str;
    int first_written;
    np_prof_rec_summary sum;
    np_status fail;         /* first failure (recording stopped) */
    char why[160];
};

/* Timestamps are CLOCK_MONOTONIC: the same clock in every rank of one
 * machine, and small enough (time since boot) that a double keeps its
 * nanoseconds when a reader parses "ts" in microseconds. */
static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void put_s(char *b, size_t *k, const char *s);

/* ---- the schedule ---------------------------------------------------------- */
int np_prof_schedule_active(const np_prof_schedule *s, long long step)
{
    if (!s || s->active <= 0)
        return step >= (s ? s->skip_first : 0);
    if (step < s->skip_first)
        return 0;
    long long k = step - s->skip_first, cycle = (long long)s->wait + s->warmup + s->active;
    if (s->repeat > 0 && k / cycle >= s->repeat)
        return 0;
    return k % cycle >= (long long)s->wait + s->warmup;
}

/* ---- FLOPs from shapes ------------------------------------------------------ */
static const np_tensor *role_t(const np_hook_event *ev, np_role role, int index)
{
    for (int i = 0; i < ev->n_tensors; i++)
        if (ev->tensors[i].role == role && ev->tensors[i].index == index)
            return ev->tensors[i].t;
    return NULL;
}

static double last_dim(const np_tensor *t) { return t && t->ndim ? (double)t->shape[t->ndim - 1] : 0.0; }
static double dim_from_end(const np_tensor *t, int k)
{
    return t && t->ndim >= k ? (double)t->shape[t->ndim - k] : 0.0;
}

static int op_is(const char *name, const char *const *apis)
{
    for (; *apis; apis++) {
        size_t n = strlen(*apis);
        if (!strncmp(name, *apis, n) && name[n] == '.')
            return 1;
    }
    return 0;
}

static const char *const linear_apis[] = {"Functional.linear", "Torch.nn.functional.linear", NULL};
static const char *const matmul_apis[] = {"Torch.matmul", "Tensor.matmul", "Tensor.__matmul__", "Torch.bmm",
                                          "Tensor.bmm", "Torch.mm", "Tensor.mm", NULL};
static const char *const conv_apis[] = {"Functional.conv2d", "Torch.conv2d", NULL};
static const char *const sdpa_apis[] = {"Functional.scaled_dot_product_attention", NULL};

/* sdpa: q (..., L, E), k (..., S, E), v (..., S, Ev): 2 GEMMs of the
 * scores and the weighted sum (the causal mask not subtracted). */
static double sdpa_flops(const np_tensor *q, const np_tensor *k, const np_tensor *v)
{
    if (!q || !k || !v || q->ndim < 2 || k->ndim < 2 || v->ndim < 2)
        return 0.0;
    double L = dim_from_end(q, 2), E = last_dim(q), S = dim_from_end(k, 2), Ev = last_dim(v);
    double batch = L * E > 0 ? (double)q->numel / (L * E) : 0.0;
    return 2.0 * batch * L * S * E + 2.0 * batch * L * S * Ev;
}

double np_prof_event_flops(const np_hook_event *ev)
{
    if (!ev || !ev->name || ev->is_module)
        return 0.0;
    int bwd = ev->kind == NP_EV_API_BACKWARD;
    if (ev->kind != NP_EV_API_FORWARD && !bwd)
        return 0.0;
    /* forward: inputs by index, the result output 0; backward: the grad
     * arriving at output 0 is input 0, the grads for the inputs outputs */
    const np_tensor *out = role_t(ev, bwd ? NP_ROLE_INPUT : NP_ROLE_OUTPUT, 0);
    const np_tensor *a = role_t(ev, bwd ? NP_ROLE_OUTPUT : NP_ROLE_INPUT, 0);
    const np_tensor *b = role_t(ev, bwd ? NP_ROLE_OUTPUT : NP_ROLE_INPUT, 1);
    if (!out)
        return 0.0;
    double n_out = (double)out->numel;
    if (op_is(ev->name, linear_apis) || op_is(ev->name, matmul_apis)) {
        int lin = op_is(ev->name, linear_apis);
        /* the contracted size K: a's last dim, else b's (linear: weight (O, K);
         * matmul: (..., K, N), or (K) as a vector) */
        double K = a ? last_dim(a) : !b ? 0.0 : lin || b->ndim < 2 ? last_dim(b) : dim_from_end(b, 2);
        if (!lin && !a && b && b->ndim == 1)
            K = last_dim(b);
        double gemms = bwd ? (a != NULL) + (b != NULL) : 1.0;
        return 2.0 * n_out * K * gemms;
    }
    if (op_is(ev->name, conv_apis)) {
        /* 2 x out x (Cin/groups x kh x kw) per GEMM: the weight's numel / Cout */
        if (!b || b->ndim != 4 || b->shape[0] <= 0)
            return 0.0;
        double per = (double)b->numel / (double)b->shape[0];
        double gemms = bwd ? (a != NULL) + 1.0 : 1.0;
        return 2.0 * n_out * per * gemms;
    }
    if (op_is(ev->name, sdpa_apis)) {
        const np_tensor *c = role_t(ev, bwd ? NP_ROLE_OUTPUT : NP_ROLE_INPUT, 2);
        /* backward: dV, dP, dQ and dK, two GEMMs of each product (torch's count) */
        return (bwd ? 2.0 : 1.0) * sdpa_flops(a, b, c);
    }
    return 0.0;
}

/* ---- recording ---------------------------------------------------------------- */
static void rec_fail(np_prof_rec *r, np_status st, const char *why)
{
    if (!r->fail) {
        r->fail = st;
        snprintf(r->why, sizeof r->why, "%s", why);
    }
    r->active = 0;
}

/* Append n bytes to the step's strings; the offset, or (size_t)-1. */
static size_t str_put(np_prof_rec *r, const char *s, size_t n)
{
    if (np_grow((void **)&r->str, &r->cap_str, r->n_str + n + 1, 1)) {
        rec_fail(r, NP_ERR_NOMEM, "out of memory");
        return (size_t)-1;
    }
    size_t at = r->n_str;
    memcpy(r->str + at, s, n);
    r->str[at + n] = 0;
    r->n_str += n + 1;
    return at;
}

static rec *rec_new(np_prof_rec *r)
{
    if (np_grow((void **)&r->recs, &r->cap_recs, r->n_recs + 1, sizeof *r->recs)) {
        rec_fail(r, NP_ERR_NOMEM, "out of memory");
        return NULL;
    }
    rec *e = &r->recs[r->n_recs++];
    memset(e, 0, sizeof *e);
    e->args = (size_t)-1;
    e->mem = -1;
    return e;
}

/* Decimal digits of v at b (no NUL); their count. The hot paths format
 * by hand: snprintf was three quarters of the profile's cost per call. */
static size_t put_ll(char *b, long long v)
{
    char t[24];
    size_t n = 0, k = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do
        t[n++] = (char)('0' + u % 10);
    while (u /= 10);
    if (v < 0)
        b[k++] = '-';
    while (n)
        b[k++] = t[--n];
    return k;
}

/* Nanoseconds as microseconds with three decimals ("12.345"). */
static size_t put_us(char *b, long long ns)
{
    size_t k = put_ll(b, ns / 1000);
    long long f = ns % 1000;
    b[k++] = '.';
    b[k++] = (char)('0' + f / 100);
    b[k++] = (char)('0' + f / 10 % 10);
    b[k++] = (char)('0' + f % 10);
    return k;
}

/* The shapes of the event's tensors of one role group as JSON arrays:
 * "[[8,32,64],[192,64]]" (a missing tensor: []); -1 past cap. */
static int put_dims(char *b, size_t cap, const np_hook_event *ev, int outputs)
{
    size_t n = 0;
    int first = 1;
    b[n++] = '[';
    for (int i = 0; i < ev->n_tensors; i++) {
        np_role ro = ev->tensors[i].role;
        if ((ro == NP_ROLE_OUTPUT) != outputs || ro == NP_ROLE_KWARGS || ro == NP_ROLE_PARAMETERS_GRAD)
            continue;
        const np_tensor *t = ev->tensors[i].t;
        int nd = t ? t->ndim : 0;
        if (n + 3 + (size_t)nd * 21 + 2 > cap)
            return -1;
        if (!first)
            b[n++] = ',';
        first = 0;
        b[n++] = '[';
        for (int d = 0; d < nd; d++) {
            if (d)
                b[n++] = ',';
            n += put_ll(b + n, (long long)t->shape[d]);
        }
        b[n++] = ']';
    }
    if (n + 2 > cap)
        return -1;
    b[n++] = ']';
    b[n] = 0;
    return (int)n;
}

int np_prof_rec_before(const np_hook_event *ev, void *user)
{
    np_prof_rec *r = user;
    if (!r->active || !ev->name)
        return 1; /* not a recorded step: declined, no after event */
    if (r->depth == MAX_DEPTH) {
        rec_fail(r, NP_ERR_LIMIT, "calls nested more than 256 deep");
        return 1;
    }
    size_t nm = str_put(r, ev->name, strlen(ev->name));
    if (nm == (size_t)-1)
        return 1;
    r->st[r->depth++] = (open_call){now_ns(), nm};
    return 0;
}

static void step_begin(np_prof_rec *r, const np_hook_event *ev)
{
    r->active = !r->fail && np_prof_schedule_active(&r->o.schedule, ev->step);
    r->step = ev->step;
    r->depth = 0;
    r->n_recs = 0;
    r->n_str = 0;
    r->step_ts = now_ns();
}

static void mem_sample(np_prof_rec *r, long long ts)
{
    if (!r->o.mem)
        return;
    rec *m = rec_new(r);
    if (m) {
        m->cat = CAT_MEM;
        m->ts = ts;
        m->mem = (long long)r->o.mem(r->o.mem_user);
    }
}

static void call_end(np_prof_rec *r, const np_hook_event *ev)
{
    long long t1 = now_ns();
    /* the innermost open call of this name (one whose after event never
     * came is dropped with it) */
    int i = r->depth - 1;
    while (i >= 0 && strcmp(r->str + r->st[i].name, ev->name))
        i--;
    if (i < 0)
        return; /* no start seen (a module backward without gradients) */
    open_call c = r->st[i];
    r->depth = i;
    rec *e = rec_new(r);
    if (!e)
        return;
    e->ts = c.ts;
    e->dur = t1 - c.ts;
    e->name = c.name;
    e->cat = ev->is_module ? CAT_MODULE : CAT_OP;
    e->flops = np_prof_event_flops(ev);
    /* "Input Dims":[...],"Output Dims":[...] (a list too long: []) */
    char args[1700];
    size_t k = 0;
    put_s(args, &k, "\"Input Dims\":");
    int ni = put_dims(args + k, 1024, ev, 0);
    if (ni < 0)
        put_s(args, &k, "[]");
    else
        k += (size_t)ni;
    put_s(args, &k, ",\"Output Dims\":");
    int no = put_dims(args + k, 600, ev, 1);
    if (no < 0)
        put_s(args, &k, "[]");
    else
        k += (size_t)no;
    e->args = str_put(r, args, k);
    if (ev->is_module)
        mem_sample(r, t1);
}

static int by_start(const void *pa, const void *pb)
{
    const rec *a = pa, *b = pb;
    if (a->ts != b->ts)
        return a->ts < b->ts ? -1 : 1;
    if (a->dur != b->dur)
        return a->dur > b->dur ? -1 : 1; /* the enclosing call first */
    return a->cat < b->cat ? -1 : a->cat > b->cat;
}

static void put_fp(void *user, const char *bytes, size_t n) { fwrite(bytes, 1, n, (FILE *)user); }

/* Append the literal s to b at *k. */
static void put_s(char *b, size_t *k, const char *s)
{
    size_t n = strlen(s);
    memcpy(b + *k, s, n);
    *k += n;
}

/* Append an event's place and start: "pid":RANK,"tid":1,"ts":US. */
static void put_where(char *b, size_t *k, const np_prof_rec *r, long long ts)
{
    put_s(b, k, "\"pid\":");
    *k += put_ll(b + *k, r->o.rank);
    put_s(b, k, ",\"tid\":1,\"ts\":");
    *k += put_us(b + *k, ts);
}

/* One event's JSON up to its name, and from its name on, by hand (the
 * name goes through np_json_quote between the two). */
static size_t event_head(char *b, const np_prof_rec *r, const rec *e)
{
    size_t k = 0;
    put_s(b, &k, r->first_written ? ",\n{\"ph\":\"" : "\n{\"ph\":\"");
    if (e->cat == CAT_MEM) {
        put_s(b, &k, "C\",\"name\":\"Memory\",");
        put_where(b, &k, r, e->ts);
        put_s(b, &k, ",\"args\":{\"arena_bytes\":");
        k += put_ll(b + k, e->mem);
        put_s(b, &k, "}}");
        return k;
    }
    put_s(b, &k, "X\",\"cat\":\"");
    put_s(b, &k, cat_names[e->cat]);
    put_s(b, &k, "\",\"name\":");
    if (e->cat == CAT_STEP) {
        put_s(b, &k, "\"ProfilerStep#");
        k += put_ll(b + k, r->step);
        b[k++] = '"';
    }
    return k;
}

static size_t event_tail(char *b, const np_prof_rec *r, const rec *e)
{
    size_t k = 0;
    put_s(b, &k, ",");
    put_where(b, &k, r, e->ts);
    put_s(b, &k, ",\"dur\":");
    k += put_us(b + k, e->dur);
    put_s(b, &k, ",\"args\":{");
    return k;
}

static void step_flush(np_prof_rec *r)
{
    qsort(r->recs, r->n_recs, sizeof *r->recs, by_start);
    FILE *fp = r->fp;
    char b[256];
    for (size_t i = 0; i < r->n_recs; i++) {
        const rec *e = &r->recs[i];
        fwrite(b, 1, event_head(b, r, e), fp);
        r->first_written = 1;
        if (e->cat == CAT_MEM)
            continue;
        if (e->cat != CAT_STEP)
            np_json_quote(put_fp, fp, r->str + e->name);
        fwrite(b, 1, event_tail(b, r, e), fp);
        if (e->args != (size_t)-1) {
            fputs(r->str + e->args, fp);
            fputc(',', fp);
        }
        size_t k = 0;
        if (e->flops > 0) {
            if (e->flops < 9e18) {
                put_s(b, &k, "\"flops\":");
                k += put_ll(b + k, (long long)e->flops);
                b[k++] = ',';
            } else {
                k = (size_t)snprintf(b, sizeof b, "\"flops\":%.0f,", e->flops);
            }
        }
        put_s(b, &k, "\"step\":");
        k += put_ll(b + k, r->step);
        put_s(b, &k, ",\"rank\":");
        k += put_ll(b + k, r->o.rank);
        put_s(b, &k, "}}");
        fwrite(b, 1, k, fp);
        r->sum.events += e->cat != CAT_STEP;
        r->sum.flops += e->flops;
    }
    r->sum.steps++;
    if (ferror(fp))
        rec_fail(r, NP_ERR_IO, strerror(errno ? errno : EIO));
}

static void step_end(np_prof_rec *r)
{
    if (!r->active)
        return;
    long long t1 = now_ns();
    mem_sample(r, t1);
    rec *e = rec_new(r);
    if (!e)
        return;
    e->cat = CAT_STEP;
    e->ts = r->step_ts;
    e->dur = t1 - r->step_ts;
    step_flush(r);
    r->active = 0;
}

int np_prof_rec_after(const np_hook_event *ev, void *user)
{
    np_prof_rec *r = user;
    switch (ev->kind) {
    case NP_EV_STEP_BEGIN:
        step_begin(r, ev);
        break;
    case NP_EV_STEP_END:
        step_end(r);
        break;
    case NP_EV_API_FORWARD:
    case NP_EV_API_BACKWARD:
    case NP_EV_MODULE_FORWARD:
    case NP_EV_MODULE_BACKWARD:
        if (r->active && ev->name)
            call_end(r, ev);
        break;
    default:
        break;
    }
    return 0; /* the profile never stops training */
}

/* ---- open and close ------------------------------------------------------------ */
np_status np_prof_rec_open(np_prof_rec **out, const np_prof_rec_opts *o, np_error *err)
{
    *out = NULL;
    if (!o || !o->dir || !*o->dir)
        return np_error_set(err, NP_ERR_ARG, NULL, "profile", "the profile task needs an output folder");
    const np_prof_schedule *s = &o->schedule;
    if (s->skip_first < 0 || s->wait < 0 || s->warmup < 0 || s->active < 0 || s->repeat < 0)
        return np_error_set(err, NP_ERR_CONFIG, NULL, "profile",
                            "schedule: skip_first, wait, warmup, active and repeat must be >= 0");
    np_prof_rec *r = calloc(1, sizeof *r);
    if (!r)
        return np_error_set(err, NP_ERR_NOMEM, NULL, "profile", "out of memory");
    r->o = *o;
    r->out.fd = -1;
    if (np_mkdirs(o->dir) != 0) {
        np_status st = np_error_set(err, NP_ERR_IO, o->dir, NULL, "cannot create the folder: %s",
                                    strerror(errno));
        free(r);
        return st;
    }
    snprintf(r->path, sizeof r->path, "%s/rank%d.trace.json", o->dir, o->rank);
    r->o.dir = NULL; /* borrowed for the open only: r->path is what stays */
    np_status bst = np_out_begin(&r->out, r->path, NULL, err);
    if (bst) {
        free(r);
        return bst;
    }
    r->fp = np_out_stream(&r->out);
    if (!r->fp) {
        np_status st = np_error_set(err, NP_ERR_IO, r->path, NULL, "cannot write: %s", strerror(errno));
        np_out_abort(&r->out);
        free(r);
        return st;
    }
    /* baseTimeNanoseconds: the epoch time of ts 0, as torch writes it */
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    long long base = (long long)rt.tv_sec * 1000000000LL + rt.tv_nsec - now_ns();
    fprintf(r->fp, "{\"schemaVersion\":1,\"displayTimeUnit\":\"ms\",\"baseTimeNanoseconds\":%lld,"
                   "\"deviceProperties\":[],"
                   "\"distributedInfo\":{\"backend\":\"nprobe\",\"rank\":%d,\"world_size\":%d},"
                   "\"traceName\":\"nprobe profile task\",\"traceEvents\":[",
            base, o->rank, o->world > 0 ? o->world : 1);
    fprintf(r->fp, "\n{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"tid\":0,"
                   "\"args\":{\"name\":\"rank %d\"}},"
                   "\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":1,"
                   "\"args\":{\"name\":\"API and module calls\"}}",
            o->rank, o->rank, o->rank);
    r->first_written = 1;
    *out = r;
    return NP_OK;
}

const char *np_prof_rec_path(const np_prof_rec *r) { return r ? r->path : ""; }

np_status np_prof_rec_close(np_prof_rec *r, np_prof_rec_summary *sum, np_error *err)
{
    if (sum)
        memset(sum, 0, sizeof *sum);
    if (!r)
        return NP_OK;
    np_status st = NP_OK;
    if (r->fail) {
        st = np_error_set(err, r->fail, r->path, NULL, "profile: %s", r->why);
        np_out_abort(&r->out);
    } else {
        fputs("\n]}\n", r->fp);
        st = np_out_commit(&r->out, 0, err);
    }
    if (sum)
        *sum = r->sum;
    free(r->recs);
    free(r->str);
    free(r);
    return st;
}

/* ---- the config ------------------------------------------------------------------ */
static json_t *load_cfg(const char *path, const char **why, json_error_t *je)
{
    int fd = np_open_regular(path, why);
    if (fd < 0)
        return NULL;
    json_t *root = json_loadfd(fd, 0, je);
    close(fd);
    if (!root)
        *why = NULL;
    return root;
}

int np_prof_config_is_profile(const char *path)
{
    const char *why = NULL;
    json_error_t je;
    json_t *root = load_cfg(path, &why, &je);
    if (!root)
        return 0;
    json_t *t = json_object_get(root, "task");
    int yes = json_is_string(t) && !strcmp(json_string_value(t), "profile");
    json_decref(root);
    return yes;
}

np_status np_prof_config_load(np_prof_schedule *s, char *dir, size_t dir_cap, const char *path,
                              np_error *err)
{
    memset(s, 0, sizeof *s);
    const char *why = NULL;
    json_error_t je;
    json_t *root = load_cfg(path, &why, &je);
    if (!root)
        return why ? np_error_set(err, NP_ERR_IO, path, NULL, "cannot read: %s", why)
                   : np_error_set(err, NP_ERR_JSON, path, NULL, "line %d column %d: %s", je.line,
                                  je.column, je.text);
    np_status st = NP_OK;
    json_t *t = json_object_get(root, "task"), *dp = json_object_get(root, "dump_path");
    json_t *sec = json_object_get(root, "profile");
    if (!json_is_string(t) || strcmp(json_string_value(t), "profile"))
        st = np_error_set(err, NP_ERR_CONFIG, path, "task", "expected \"task\": \"profile\"");
    else if (!json_is_string(dp) || !*json_string_value(dp))
        st = np_error_set(err, NP_ERR_CONFIG, path, "dump_path",
                          "the profile task needs \"dump_path\": the trace's folder");
    else if (strlen(json_string_value(dp)) >= dir_cap)
        st = np_error_set(err, NP_ERR_CONFIG, path, "dump_path", "the path is too long");
    else if (sec && !json_is_object(sec))
        st = np_error_set(err, NP_ERR_CONFIG, path, "profile",
                          "expected an object of schedule keys (wait, warmup, active, repeat, skip_first)");
    if (!st) {
        snprintf(dir, dir_cap, "%s", json_string_value(dp));
        static const char *const keys[] = {"skip_first", "wait", "warmup", "active", "repeat"};
        int *dst[] = {&s->skip_first, &s->wait, &s->warmup, &s->active, &s->repeat};
        const char *k;
        json_t *v;
        json_object_foreach(sec, k, v) {
            size_t i = 0;
            while (i < 5 && strcmp(k, keys[i]))
                i++;
            if (i == 5) {
                st = np_error_set(err, NP_ERR_CONFIG, path, k,
                                  "profile.%s: unknown key (wait, warmup, active, repeat, skip_first)", k);
                break;
            }
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1000000000) {
                st = np_error_set(err, NP_ERR_CONFIG, path, k, "profile.%s: expected an integer >= 0", k);
                break;
            }
            *dst[i] = (int)json_integer_value(v);
        }
    }
    json_decref(root);
    return st;
}
