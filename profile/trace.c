/* profile/trace.c - the trace-event JSON (Chrome/Perfetto, as torch.profiler
 * and Kineto write it) read as a stream of events through np_msprobe's pull
 * reader: no document tree, the mapping's pages behind the cursor go back
 * to the kernel, so a gigabyte trace is read in bounded memory. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
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
    sbuf name, cat, tmp, arg_name, task_type;
    np_error *err;
} rd;

/* The next member of the object being read: its key in *k, its value's
 * first token in *v; at the object's end v->type is NP_JSON_OBJ_END (a key
 * token stays valid over its value's first token: np_json_tok). */
static np_status member(np_json_reader *r, np_json_tok *k, np_json_tok *v, np_error *err)
{
    np_status st = np_json_next(k, r, err);
    if (st || k->type == NP_JSON_OBJ_END) {
        v->type = NP_JSON_OBJ_END;
        return st;
    }
    return np_json_next(v, r, err);
}

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
    np_json_tok k, t;
    np_status st;
    for (;;) {
        if ((st = member(&d->r, &k, &t, d->err)) || t.type == NP_JSON_OBJ_END)
            return st;
        int which = np_json_is(&k, "flops") ? 1 : np_json_is(&k, "stream") ? 2
                    : np_json_is(&k, "correlation")                       ? 3
                    : np_json_is(&k, "name")                              ? 4
                    : np_json_is(&k, "Task Type")                         ? 5
                                                                         : 0;
        if (which >= 4 && t.type == NP_JSON_STR) {
            if (take_str(which == 4 ? &d->arg_name : &d->task_type, &t))
                return np_error_set(d->err, NP_ERR_NOMEM, d->r.name, "args", "out of memory");
        } else if (which && which < 4 && t.type == NP_JSON_NUM) {
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
    d->name.s[0] = d->cat.s[0] = d->arg_name.s[0] = d->task_type.s[0] = 0;
    np_json_tok k, t;
    np_status st;
    for (;;) {
        if ((st = member(&d->r, &k, &t, d->err)))
            return st;
        if (t.type == NP_JSON_OBJ_END)
            break;
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
    e.arg_name = d->arg_name.s;
    e.task_type = d->task_type.s;
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
    np_json_tok k, t;
    np_status st;
    for (;;) {
        if ((st = member(&d->r, &k, &t, d->err)) || t.type == NP_JSON_OBJ_END)
            return st;
        if (np_json_is(&k, "rank") && t.type == NP_JSON_NUM)
            *rank = (long long)t.num;
        else if ((st = np_json_skip(&d->r, &t, d->err)))
            return st;
    }
}

/* ---- Ascend's kernel_details.csv ------------------------------------------------ */
/* One csv record into b, split in place: fields at commas outside quotes,
 * "" a quote; a quoted field may hold newlines (more lines are read). 1: a
 * record, 0: end of file, -1: out of memory. */
static int csv_record(FILE *f, sbuf *b, char **fld, int max, int *nf)
{
    size_t n = 0;
    int inq = 0;
    for (;;) {
        if (n + 2 >= b->cap) {
            char *s = realloc(b->s, b->cap * 2);
            if (!s)
                return -1;
            b->s = s;
            b->cap *= 2;
        }
        if (!fgets(b->s + n, (int)(b->cap - n > (1u << 30) ? (1u << 30) : b->cap - n), f)) {
            if (!n)
                return 0;
            break;
        }
        size_t k = n + strlen(b->s + n);
        for (size_t i = n; i < k; i++)
            if (b->s[i] == '"')
                inq = !inq;
        n = k;
        if (n && b->s[n - 1] == '\n' && !inq)
            break;
    }
    while (n && (b->s[n - 1] == '\n' || b->s[n - 1] == '\r'))
        b->s[--n] = 0;
    char *r = b->s, *w = b->s;
    *nf = 0;
    inq = 0;
    if (max > 0)
        fld[(*nf)++] = w;
    for (; *r; r++) {
        if (*r == '"') {
            if (inq && r[1] == '"')
                *w++ = *r++;
            else
                inq = !inq;
        } else if (*r == ',' && !inq) {
            *w++ = 0;
            if (*nf < max)
                fld[(*nf)++] = w;
        } else {
            *w++ = *r;
        }
    }
    *w = 0;
    return 1;
}

/* A number of a csv cell; msprof writes some with a tab after them. */
static int csv_num(const char *s, double *v)
{
    char *end;
    while (*s == ' ' || *s == '\t')
        s++;
    *v = strtod(s, &end);
    if (end == s)
        return -1;
    while (*end == ' ' || *end == '\t')
        end++;
    return *end ? -1 : 0;
}

static int csv_col(char **fld, int nf, const char *a, const char *b)
{
    for (int i = 0; i < nf; i++)
        if (!strcmp(fld[i], a) || (b && !strcmp(fld[i], b)))
            return i;
    return -1;
}

#define CSV_MAX_FIELDS 256
typedef struct csv_step {
    long long id;
    double start, end;
} csv_step;

/* A csv number cell of column `col` at `line` into *v; an empty cell (or
 * N/A) is `dflt` when dflt is not NAN, else an error naming the column. */
static np_status csv_cell(double *v, const char *cell, double dflt, const char *path, const char *col,
                          long long line, np_error *err)
{
    if (!csv_num(cell, v))
        return NP_OK;
    if (!isnan(dflt) && (!cell[strspn(cell, " \t")] || !strcmp(cell, "N/A"))) {
        *v = dflt;
        return NP_OK;
    }
    return np_error_set(err, NP_ERR_FORMAT, path, col, "line %lld: not a number: '%s'", line, cell);
}

/* The next record of a csv table that is not a blank line into fld/nf,
 * *line its line number; *more 0 at the end of the file. A record with no
 * field past column `need` (the largest one read) is an error. */
static np_status csv_row(FILE *f, sbuf *b, char **fld, int *nf, int need, long long *line,
                         int *more, const char *path, np_error *err)
{
    int rc;
    do {
        rc = csv_record(f, b, fld, CSV_MAX_FIELDS, nf);
        *line += rc > 0;
    } while (rc > 0 && *nf == 1 && !fld[0][0]); /* a blank line */
    *more = rc > 0;
    if (rc < 0)
        return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    if (rc > 0 && *nf <= need)
        return np_error_set(err, NP_ERR_FORMAT, path, NULL, "line %lld: %d fields, the header has more",
                            *line, *nf);
    return NP_OK;
}

/* Grow a step table by one; NULL out of memory. */
static csv_step *step_slot(csv_step **steps, size_t *n, size_t *cap)
{
    if (np_grow((void **)steps, cap, *n + 1, sizeof **steps))
        return NULL;
    return &(*steps)[(*n)++];
}

/* kernel_details.csv as Ascend's PyTorch profiler writes it: one row per
 * device task, its Name, Start Time(us), Duration(us) (older files: Op
 * Name, Task Start Time(us), Task Duration(us)), and where present its
 * Stream ID, Step Id and Accelerator Core (Task Type). Each row is one
 * kernel event on its stream; each Step Id becomes a ProfilerStep#N
 * spanning its rows, given after them. fld/nf: the header. */
static np_status kernel_rows(FILE *f, sbuf *b, char **fld, int nf, const char *path, np_prof_event_fn fn,
                             void *user, long long *count, np_error *err)
{
    csv_step *steps = NULL;
    size_t n_steps = 0, cap_steps = 0;
    long long line = 1;
    np_status st = NP_OK;
    int more;
    int c_name = csv_col(fld, nf, "Name", "Op Name");
    int c_ts = csv_col(fld, nf, "Start Time(us)", "Task Start Time(us)");
    int c_dur = csv_col(fld, nf, "Duration(us)", "Task Duration(us)");
    int c_stream = csv_col(fld, nf, "Stream ID", "Stream Id");
    int c_step = csv_col(fld, nf, "Step Id", "Step ID");
    int c_core = csv_col(fld, nf, "Accelerator Core", "Task Type");
    if (c_name < 0 || c_ts < 0 || c_dur < 0)
        return np_error_set(err, NP_ERR_FORMAT, path,
                            c_name < 0 ? "Name" : c_ts < 0 ? "Start Time(us)" : "Duration(us)",
                            "not a kernel_details.csv (nor operator_details.csv): no such column in the header");
    int need = c_name > c_ts ? c_name : c_ts;
    need = need > c_dur ? need : c_dur;
    while (!(st = csv_row(f, b, fld, &nf, need, &line, &more, path, err)) && more) {
        np_prof_event e = {.ph = 'X', .cat = "kernel", .arg_name = "", .task_type = "", .pid = 0,
                           .tid = 0, .flops = NAN, .stream = 0, .correlation = -1};
        double v;
        e.name = fld[c_name];
        if ((st = csv_cell(&e.ts, fld[c_ts], NAN, path, "Start Time(us)", line, err)) ||
            (st = csv_cell(&e.dur, fld[c_dur], NAN, path, "Duration(us)", line, err)))
            goto done;
        if (c_stream >= 0 && c_stream < nf && !csv_num(fld[c_stream], &v))
            e.tid = e.stream = (long long)v;
        if (c_core >= 0 && c_core < nf)
            e.task_type = fld[c_core];
        if (c_step >= 0 && c_step < nf && !csv_num(fld[c_step], &v)) {
            size_t k = 0;
            while (k < n_steps && steps[k].id != (long long)v)
                k++;
            if (k == n_steps) {
                csv_step *s = step_slot(&steps, &n_steps, &cap_steps);
                if (!s) {
                    st = np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
                    goto done;
                }
                *s = (csv_step){(long long)v, e.ts, e.ts + e.dur};
            }
            if (e.ts < steps[k].start)
                steps[k].start = e.ts;
            if (e.ts + e.dur > steps[k].end)
                steps[k].end = e.ts + e.dur;
        }
        (*count)++;
        if (fn(&e, user)) {
            st = NP_ERR_ARG;
            goto done;
        }
    }
    if (st)
        goto done;
    for (size_t k = 0; k < n_steps; k++) {
        char name[48];
        snprintf(name, sizeof name, "ProfilerStep#%lld", steps[k].id);
        np_prof_event e = {.ph = 'X', .cat = "user_annotation", .name = name, .arg_name = "",
                           .task_type = "", .pid = 0, .tid = -1, .flops = NAN, .stream = -1,
                           .correlation = -1, .ts = steps[k].start, .dur = steps[k].end - steps[k].start};
        (*count)++;
        if (fn(&e, user)) {
            st = NP_ERR_ARG;
            goto done;
        }
    }
done:
    free(steps);
    return st;
}

/* operator_details.csv as Ascend's PyTorch profiler writes it: one row per
 * framework op call (the profiler steps left out), in the order of its op
 * tree, with Name, Host Self Duration(us), Host Total Duration(us) and
 * Device Self Duration(us) (the kernels the call launched itself; also
 * Input Shapes, Call Stack, Device Total Duration(us) and the AI Core
 * shares, not read). It has no start times, so each row becomes a cpu_op
 * event of its host total time with its self time given (self_given),
 * placed after the previous rows' self times (the host timeline is the
 * calls' self times back to back: busy time, no idle), and, when its
 * device self time is above 0, a kernel event of that time on stream 0,
 * after the previous rows' device times. */
static np_status operator_rows(FILE *f, sbuf *b, char **fld, int nf, const char *path, np_prof_event_fn fn,
                               void *user, long long *count, np_error *err)
{
    static const char k_self[] = "Host Self Duration(us)", k_total[] = "Host Total Duration(us)",
                      k_dev[] = "Device Self Duration(us)";
    int c_name = csv_col(fld, nf, "Name", NULL), c_self = csv_col(fld, nf, k_self, NULL);
    int c_total = csv_col(fld, nf, k_total, NULL), c_dev = csv_col(fld, nf, k_dev, NULL);
    if (c_name < 0 || c_total < 0)
        return np_error_set(err, NP_ERR_FORMAT, path, c_name < 0 ? "Name" : k_total,
                            "operator_details.csv without this column in its header");
    int need = c_name > c_self ? c_name : c_self;
    need = need > c_total ? need : c_total;
    double host_at = 0, dev_at = 0;
    long long line = 1;
    int more;
    np_status st;
    while (!(st = csv_row(f, b, fld, &nf, need, &line, &more, path, err)) && more) {
        np_prof_event e = {.ph = 'X', .cat = "cpu_op", .name = fld[c_name], .arg_name = "",
                           .task_type = "", .pid = 0, .tid = 1, .flops = NAN, .stream = -1,
                           .correlation = -1, .ts = host_at, .self_given = 1};
        double dev = 0;
        if ((st = csv_cell(&e.self_us, fld[c_self], NAN, path, k_self, line, err)) ||
            (st = csv_cell(&e.dur, fld[c_total], NAN, path, k_total, line, err)) ||
            (c_dev >= 0 && c_dev < nf && (st = csv_cell(&dev, fld[c_dev], 0, path, k_dev, line, err))))
            return st;
        if (e.self_us < 0 || e.dur < e.self_us)
            return np_error_set(err, NP_ERR_FORMAT, path, k_self,
                                "line %lld: self time %g outside 0 .. the total time %g", line, e.self_us,
                                e.dur);
        host_at += e.self_us;
        (*count)++;
        if (fn(&e, user))
            return NP_ERR_ARG;
        if (dev > 0) {
            np_prof_event k = {.ph = 'X', .cat = "kernel", .name = fld[c_name], .arg_name = "",
                               .task_type = "", .pid = 1, .tid = 0, .flops = NAN, .stream = 0,
                               .correlation = -1, .ts = dev_at, .dur = dev};
            dev_at += dev;
            (*count)++;
            if (fn(&k, user))
                return NP_ERR_ARG;
        }
    }
    return st;
}

/* Ascend's csv files: kernel_details.csv or operator_details.csv, told
 * apart by their header (operator_details.csv has Host Self Duration). */
static np_status read_csv(np_prof_trace_info *info, const char *path, np_prof_event_fn fn, void *user,
                          np_error *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return np_error_set(err, NP_ERR_IO, path, NULL, "cannot open: %s", strerror(errno));
    sbuf b = {malloc(4096), 4096};
    char *fld[CSV_MAX_FIELDS];
    int nf = 0;
    long long count = 0;
    np_status st = NP_OK;
    int rc = b.s ? csv_record(f, &b, fld, CSV_MAX_FIELDS, &nf) : -1;
    if (rc < 0) {
        st = np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    } else if (rc == 0) {
        st = np_error_set(err, NP_ERR_FORMAT, path, NULL,
                          "empty csv: expected the header of kernel_details.csv or operator_details.csv");
    } else {
        if (!strncmp(fld[0], "\xef\xbb\xbf", 3)) /* a UTF-8 byte order mark */
            memmove(fld[0], fld[0] + 3, strlen(fld[0] + 3) + 1);
        if (csv_col(fld, nf, "Host Self Duration(us)", NULL) >= 0)
            st = operator_rows(f, &b, fld, nf, path, fn, user, &count, err);
        else
            st = kernel_rows(f, &b, fld, nf, path, fn, user, &count, err);
    }
    if (info) {
        info->rank = -1;
        info->events = count;
    }
    free(b.s);
    fclose(f);
    return st;
}

np_status np_prof_read(np_prof_trace_info *info, const char *path, np_prof_event_fn fn, void *user,
                       np_error *err)
{
    if (has_suffix(path, ".csv"))
        return read_csv(info, path, fn, user, err);
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
    d.name.cap = d.cat.cap = d.tmp.cap = d.arg_name.cap = d.task_type.cap = 256;
    d.name.s = malloc(256);
    d.cat.s = malloc(256);
    d.tmp.s = malloc(256);
    d.arg_name.s = malloc(256);
    d.task_type.s = malloc(256);
    np_json_tok t;
    if (!d.name.s || !d.cat.s || !d.tmp.s || !d.arg_name.s || !d.task_type.s) {
        st = np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
        goto done;
    }
    if ((st = np_json_next(&t, &d.r, err)))
        goto done;
    if (t.type == NP_JSON_ARR) {
        seen_events = 1;
        st = read_events(&d, fn, user, &count);
    } else if (t.type == NP_JSON_OBJ) {
        np_json_tok k;
        for (;;) {
            if ((st = member(&d.r, &k, &t, err)) || t.type == NP_JSON_OBJ_END)
                break;
            if (np_json_is(&k, "traceEvents") && t.type == NP_JSON_ARR) {
                seen_events = 1;
                st = read_events(&d, fn, user, &count);
            } else if (np_json_is(&k, "distributedInfo") && t.type == NP_JSON_OBJ) {
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
    free(d.arg_name.s);
    free(d.task_type.s);
    np_json_close(&d.r);
    free(mem);
    return st;
}
