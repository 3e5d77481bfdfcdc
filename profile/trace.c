/* profile/trace.c - the trace-event JSON (Chrome/Perfetto, as torch.profiler
 * and Kineto write it) read as a stream of events through np_msprobe's pull
 * reader: no document tree, the mapping's pages behind the cursor go back
 * to the kernel, so a gigabyte trace is read in bounded memory. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "nprobe/msprobe.h"
#include "nprobe/profile.h"

typedef struct sbuf {
    char *s;
    size_t cap;
} sbuf;

/* Decode a string token into b (grown to fit). */
static int take_str(sbuf *b, const np_json_tok *t)
{
    size_t n = np_json_str(b->s, b->cap, t);
    if (n + 1 > b->cap) {
        size_t cap = n + 64;
        char *s = realloc(b->s, cap);
        if (!s)
            return -1;
        b->s = s;
        b->cap = cap;
        np_json_str(b->s, b->cap, t);
    }
    return 0;
}

static int has_suffix(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

/* A .gz trace inflated whole (tensorboard_trace_handler's use_gzip). */
static np_status inflate_file(char **out, size_t *n_out, const char *path, np_error *err)
{
    gzFile g = gzopen(path, "rb");
    if (!g)
        return np_error_set(err, NP_ERR_IO, path, NULL, "cannot open: %s", strerror(errno));
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            gzclose(g);
            return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory inflating the trace");
        }
        int k = gzread(g, buf + n, (unsigned)(cap - n > (1u << 30) ? (1u << 30) : cap - n));
        if (k < 0) {
            int e;
            const char *m = gzerror(g, &e);
            np_status st = np_error_set(err, NP_ERR_FORMAT, path, NULL, "bad gzip data: %s", m);
            gzclose(g);
            free(buf);
            return st;
        }
        if (k == 0)
            break;
        n += (size_t)k;
        if (n == cap) {
            cap *= 2;
            char *nb = realloc(buf, cap);
            if (!nb)
                free(buf);
            buf = nb;
        }
    }
    gzclose(g);
    *out = buf;
    *n_out = n;
    return NP_OK;
}

typedef struct rd {
    np_json_reader r;
    sbuf name, cat, tmp;
    np_error *err;
} rd;

static np_status num_or_null(double *v, rd *d, const np_json_tok *t, const char *key)
{
    if (t->type == NP_JSON_NUM) {
        *v = t->num;
        return NP_OK;
    }
    if (t->type == NP_JSON_STR) { /* some writers quote numbers */
        if (take_str(&d->tmp, t))
            return np_error_set(d->err, NP_ERR_NOMEM, d->r.name, key, "out of memory");
        char *end;
        double x = strtod(d->tmp.s, &end);
        if (end != d->tmp.s && !*end) {
            *v = x;
            return NP_OK;
        }
        return NP_OK;
    }
    return np_json_skip(&d->r, t, d->err);
}

/* The id fields pid/tid: an integer, or a string (then -1). */
static np_status id_field(long long *v, rd *d, const np_json_tok *t)
{
    if (t->type == NP_JSON_NUM && t->num == floor(t->num) && fabs(t->num) < 9e15)
        *v = (long long)t->num;
    else
        *v = -1;
    return np_json_skip(&d->r, t, d->err);
}

static np_status read_args(np_prof_event *e, rd *d)
{
    np_json_tok t;
    np_status st;
    for (;;) {
        if ((st = np_json_next(&t, &d->r, d->err)))
            return st;
        if (t.type == NP_JSON_OBJ_END)
            return NP_OK;
        int which = np_json_is(&t, "flops") ? 1 : np_json_is(&t, "stream") ? 2
                    : np_json_is(&t, "correlation")                       ? 3
                                                                         : 0;
        if ((st = np_json_next(&t, &d->r, d->err)))
            return st;
        if (which && t.type == NP_JSON_NUM) {
            if (which == 1)
                e->flops = t.num;
            else if (which == 2)
                e->stream = (long long)t.num;
            else
                e->correlation = (long long)t.num;
        } else if ((st = np_json_skip(&d->r, &t, d->err))) {
            return st;
        }
    }
}

static np_status read_event(rd *d, np_prof_event_fn fn, void *user)
{
    np_prof_event e = {.ph = '?', .ts = NAN, .dur = NAN, .pid = -1, .tid = -1, .flops = NAN,
                       .stream = -1, .correlation = -1};
    d->name.s[0] = d->cat.s[0] = 0;
    np_json_tok t;
    np_status st;
    for (;;) {
        if ((st = np_json_next(&t, &d->r, d->err)))
            return st;
        if (t.type == NP_JSON_OBJ_END)
            break;
        np_json_tok k = t;
        if ((st = np_json_next(&t, &d->r, d->err)))
            return st;
        if (np_json_is(&k, "name") && t.type == NP_JSON_STR) {
            if (take_str(&d->name, &t))
                return np_error_set(d->err, NP_ERR_NOMEM, d->r.name, "name", "out of memory");
        } else if (np_json_is(&k, "cat") && t.type == NP_JSON_STR) {
            if (take_str(&d->cat, &t))
                return np_error_set(d->err, NP_ERR_NOMEM, d->r.name, "cat", "out of memory");
        } else if (np_json_is(&k, "ph") && t.type == NP_JSON_STR) {
            e.ph = t.len ? t.s[0] : '?';
        } else if (np_json_is(&k, "ts")) {
            st = num_or_null(&e.ts, d, &t, "ts");
        } else if (np_json_is(&k, "dur")) {
            st = num_or_null(&e.dur, d, &t, "dur");
        } else if (np_json_is(&k, "pid")) {
            st = id_field(&e.pid, d, &t);
        } else if (np_json_is(&k, "tid")) {
            st = id_field(&e.tid, d, &t);
        } else if (np_json_is(&k, "args") && t.type == NP_JSON_OBJ) {
            st = read_args(&e, d);
        } else {
            st = np_json_skip(&d->r, &t, d->err);
        }
        if (st)
            return st;
    }
    e.name = d->name.s;
    e.cat = d->cat.s;
    if (fn(&e, user))
        return NP_ERR_ARG; /* the caller says why */
    return NP_OK;
}

static np_status read_events(rd *d, np_prof_event_fn fn, void *user, long long *count)
{
    np_json_tok t;
    np_status st;
    for (;;) {
        if ((st = np_json_next(&t, &d->r, d->err)))
            return st;
        if (t.type == NP_JSON_ARR_END)
            return NP_OK;
        if (t.type != NP_JSON_OBJ)
            return np_json_error(&d->r, d->err, NP_ERR_FORMAT, "traceEvents",
                                 "an event is not an object");
        if ((st = read_event(d, fn, user)))
            return st;
        (*count)++;
    }
}

static np_status read_dist_info(rd *d, long long *rank)
{
    np_json_tok t;
    np_status st;
    for (;;) {
        if ((st = np_json_next(&t, &d->r, d->err)))
            return st;
        if (t.type == NP_JSON_OBJ_END)
            return NP_OK;
        int is_rank = np_json_is(&t, "rank");
        if ((st = np_json_next(&t, &d->r, d->err)))
            return st;
        if (is_rank && t.type == NP_JSON_NUM)
            *rank = (long long)t.num;
        else if ((st = np_json_skip(&d->r, &t, d->err)))
            return st;
    }
}

np_status np_prof_read(np_prof_trace_info *info, const char *path, np_prof_event_fn fn, void *user,
                       np_error *err)
{
    rd d;
    memset(&d, 0, sizeof d);
    d.err = err;
    char *mem = NULL;
    np_status st;
    if (has_suffix(path, ".gz")) {
        size_t n = 0;
        if ((st = inflate_file(&mem, &n, path, err)))
            return st;
        np_json_init_mem(&d.r, mem, n, path);
    } else if ((st = np_json_open_file(&d.r, path, err))) {
        return st;
    }
    long long rank = -1, count = 0;
    int seen_events = 0;
    d.name.cap = d.cat.cap = d.tmp.cap = 256;
    d.name.s = malloc(256);
    d.cat.s = malloc(256);
    d.tmp.s = malloc(256);
    np_json_tok t;
    if (!d.name.s || !d.cat.s || !d.tmp.s) {
        st = np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
        goto done;
    }
    if ((st = np_json_next(&t, &d.r, err)))
        goto done;
    if (t.type == NP_JSON_ARR) {
        seen_events = 1;
        st = read_events(&d, fn, user, &count);
    } else if (t.type == NP_JSON_OBJ) {
        for (;;) {
            if ((st = np_json_next(&t, &d.r, err)))
                goto done;
            if (t.type == NP_JSON_OBJ_END)
                break;
            int ev = np_json_is(&t, "traceEvents"), di = np_json_is(&t, "distributedInfo");
            if ((st = np_json_next(&t, &d.r, err)))
                goto done;
            if (ev && t.type == NP_JSON_ARR) {
                seen_events = 1;
                st = read_events(&d, fn, user, &count);
            } else if (di && t.type == NP_JSON_OBJ) {
                st = read_dist_info(&d, &rank);
            } else {
                st = np_json_skip(&d.r, &t, err);
            }
            if (st)
                goto done;
        }
    } else {
        st = np_json_error(&d.r, err, NP_ERR_FORMAT, NULL,
                           "not a trace: expected an object with traceEvents or an array of events");
        goto done;
    }
    if (!st && !seen_events)
        st = np_error_set(err, NP_ERR_FORMAT, path, "traceEvents",
                          "not a trace: no traceEvents array");
done:
    if (info) {
        info->rank = rank;
        info->events = count;
    }
    free(d.name.s);
    free(d.cat.s);
    free(d.tmp.s);
    np_json_close(&d.r);
    free(mem);
    return st;
}
