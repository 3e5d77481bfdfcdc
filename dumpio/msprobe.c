/* dumpio/msprobe.c - the msprobe source: msprobe's dumps as they lie on
 * disk (docs/FORMAT.md, "msprobe dumps"), read through np_msprobe.
 *
 * A "step file" is a dump.json: stepN/rank{R}/, stepN/proc{PID}/ (msprobe
 * 26) or stepN/rank/ (8.x); a proc or 8.x folder counts as rank 0. Entries
 * stream from dump.json as nprobe leaves; calls come from the call order
 * of dump.json, parents from construct.json, callsites from stack.json;
 * payloads from dump_tensor_data/{data_name} next to dump.json (msprobe's
 * dump_data_dir, a path of the machine that dumped, is ignored). */
#define _GNU_SOURCE 1 /* memmem */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"
#include "nprobe/msprobe.h"

#define CHUNK 512

/* ---- a string arena --------------------------------------------------------- */

typedef struct sblock {
    struct sblock *next;
    size_t used, cap;
    char data[];
} sblock;

static const char *sdup(sblock **head, const char *s)
{
    size_t n = strlen(s) + 1;
    if (!*head || (*head)->cap - (*head)->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        sblock *b = malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        b->next = *head;
        b->used = 0;
        b->cap = cap;
        *head = b;
    }
    char *p = (*head)->data + (*head)->used;
    memcpy(p, s, n);
    (*head)->used += n;
    return p;
}

static void sfree(sblock *b)
{
    while (b) {
        sblock *n = b->next;
        free(b);
        b = n;
    }
}

/* ---- the handle --------------------------------------------------------------- */

typedef struct mspdump {
    char path[4096];        /* dump.json */
    char dir[4096];         /* its folder */
    pthread_mutex_t lock;   /* the lazily built tables below */
    sblock *strings;
    const char **calls;     /* in dump.json order */
    size_t n_calls, cap_calls;
    int have_calls;
    np_strmap data;         /* leaf -> index in data_names and labels */
    const char **data_names;
    size_t n_data, cap_data;
    struct label *labels;   /* what dump.json says of each payload */
    size_t cap_labels;
    int have_data;
    int building;           /* a pass that builds them runs, on thread `builder` */
    pthread_t builder;
} mspdump;

static int push_str(const char ***v, size_t *n, size_t *cap, const char *s)
{
    if (np_grow((void **)v, cap, *n + 1, sizeof **v))
        return -1;
    (*v)[(*n)++] = s;
    return 0;
}

/* What dump.json states of a leaf with a payload: the .pt must hold it. */
typedef struct label {
    char dtype[NP_FMT_DTYPE_LEN];
    int32_t ndim;
    int64_t shape[NP_FMT_MAX_DIMS];
} label;

static int push_label(mspdump *d, const np_entry_rec *r)
{
    if (d->n_data > d->cap_labels) {
        size_t c = d->cap_data > d->n_data ? d->cap_data : d->n_data;
        label *p = realloc(d->labels, c * sizeof *p);
        if (!p)
            return -1;
        d->labels = p;
        d->cap_labels = c;
    }
    label *l = &d->labels[d->n_data - 1];
    memcpy(l->dtype, r->dtype, sizeof l->dtype);
    l->ndim = r->ndim;
    memcpy(l->shape, r->shape, sizeof l->shape);
    return 0;
}

/* ---- finding ------------------------------------------------------------------ */

static int msp_detect(const char *path)
{
    if (dumpio_is_file(path)) {
        const char *b = strrchr(path, '/');
        return !strcmp(b ? b + 1 : path, "dump.json");
    }
    return dumpio_is_dir(path) && np_msp_is_dump(path);
}

static np_status msp_find(np_dumpio_ref **out, size_t *n, const char *path, np_error *err)
{
    *out = NULL;
    *n = 0;
    np_msp_ref *v = NULL;
    size_t m = 0;
    np_status st = np_msp_find(&v, &m, path, err);
    if (st)
        return st;
    dumpio_refs l;
    memset(&l, 0, sizeof l);
    int oom = 0;
    for (size_t i = 0; i < m && !oom; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/dump.json", v[i].dir);
        oom = dumpio_refs_push(&l, p, v[i].step, v[i].rank < 0 ? 0 : v[i].rank,
                               NP_DUMPIO_COMPLETE) != 0;
    }
    free(v);
    if (oom || dumpio_refs_finish(&l, out, n) != 0) {
        dumpio_refs_free(&l);
        return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory listing the dump");
    }
    return NP_OK;
}

/* ---- opening ------------------------------------------------------------------- */

/* "bf16" when dump.json holds a bfloat16 tensor, "fp16" for a float16 one,
 * else "fp32": scanned in windows handed back to the kernel behind. */
static const char *scan_precision(const np_json_reader *r)
{
    static const char bf[] = "\"torch.bfloat16\"", hf[] = "\"torch.float16\"";
    const size_t win = (size_t)8 << 20, page = (size_t)sysconf(_SC_PAGESIZE);
    size_t len = (size_t)(r->end - r->base);
    int half = 0;
    for (size_t at = 0; at < len; at += win) {
        size_t n = len - at < win + 16 ? len - at : win + 16;
        if (memmem(r->base + at, n, bf, sizeof bf - 1))
            return "bf16";
        half |= memmem(r->base + at, n, hf, sizeof hf - 1) != NULL;
        if (r->map_len && at + win < len)
            madvise((char *)r->base + at / page * page, win, MADV_DONTNEED);
    }
    return half ? "fp16" : "fp32";
}

/* The root fields before "data", and whether the first tensor item has an
 * md5 (the md5 task: msprobe writes task "statistics" with summary_mode md5). */
static np_status read_head(np_dumpio_info *in, const char *path, np_error *err)
{
    np_json_reader r;
    np_status st = np_json_open_file(&r, path, err);
    if (st)
        return st;
    np_json_tok t;
    int in_data = 0, md5 = 0, item_end = 0;
    for (long k = 0; !st && k < 100000; k++) {
        if ((st = np_json_next(&t, &r, err)) || t.type == NP_JSON_END)
            break;
        if (k == 0 && t.type != NP_JSON_OBJ) {
            st = np_json_error(&r, err, NP_ERR_FORMAT, NULL, "not a msprobe dump.json");
            break;
        }
        if (item_end && t.type == NP_JSON_OBJ_END && t.depth < item_end)
            break; /* the first tensor item ended without an md5 */
        if (t.type != NP_JSON_KEY)
            continue;
        if (!in_data && t.depth == 1) {
            char *dst = np_json_is(&t, "task")        ? in->task
                        : np_json_is(&t, "level")     ? in->level
                        : np_json_is(&t, "framework") ? in->framework
                                                      : NULL;
            size_t cap = dst == in->task ? sizeof in->task
                         : dst == in->level ? sizeof in->level : sizeof in->framework;
            in_data = np_json_is(&t, "data");
            if (!in_data && !(st = np_json_next(&t, &r, err))) {
                if (dst && t.type == NP_JSON_STR)
                    np_json_str(dst, cap, &t);
                else
                    st = np_json_skip(&r, &t, err);
            }
        } else if (in_data && np_json_is(&t, "md5")) {
            md5 = 1;
            break;
        } else if (in_data && !item_end && np_json_is(&t, "requires_grad")) {
            item_end = t.depth; /* msprobe writes md5 after requires_grad */
        }
    }
    /* the run's precision: a bf16 (fp16) run has bf16 (fp16) tensors
     * (autocast); the tolerances of its float32 tensors follow it */
    snprintf(in->precision, sizeof in->precision, "%s", scan_precision(&r));
    np_json_close(&r);
    if (md5)
        snprintf(in->task, sizeof in->task, "md5");
    return st;
}

static np_status msp_open(void **h, np_dumpio_info *in, const char *path, np_error *err)
{
    mspdump *d = calloc(1, sizeof *d);
    if (!d)
        return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    if (dumpio_is_dir(path))
        snprintf(d->path, sizeof d->path, "%.4085s/dump.json", path);
    else
        snprintf(d->path, sizeof d->path, "%s", path);
    snprintf(d->dir, sizeof d->dir, "%s", d->path);
    char *slash = strrchr(d->dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(d->dir, sizeof d->dir, ".");
    np_status st = read_head(in, d->path, err);
    if (st) {
        free(d);
        return st;
    }
    pthread_mutex_init(&d->lock, NULL);
    snprintf(in->format, sizeof in->format, "msprobe");
    in->format_version = 0;
    char last[256], prev[256];
    dumpio_tail_names(d->dir, last, prev, sizeof last);
    in->step = dumpio_num_after(prev, "step");
    in->rank = dumpio_num_after(last, "rank");
    if (in->rank < 0)
        in->rank = 0; /* proc{PID}/ or 8.x rank/: not distributed */
    in->world_size = -1;
    in->complete = 1;
    in->loss_scale = 1.0;
    in->dp_grad_scale = 1.0;
    in->stats_keep_inf = 1;
    in->has_calls = 1;
    *h = d;
    return NP_OK;
}

static void msp_close(void *h)
{
    mspdump *d = h;
    if (!d)
        return;
    sfree(d->strings);
    free(d->calls);
    free(d->data_names);
    free(d->labels);
    if (d->have_data)
        np_strmap_free(&d->data);
    pthread_mutex_destroy(&d->lock);
    free(d);
}

/* ---- entries and calls ---------------------------------------------------------- */

typedef struct entry_ctx {
    mspdump *d;
    const np_dumpio_entry_sink *sink;
    np_entry_rec *buf;
    size_t n, first;
    int keep_calls, keep_data, oom;
} entry_ctx;

static int flush_entries(entry_ctx *c, np_error *err)
{
    if (!c->n || !c->sink || !c->sink->rows)
        return c->n = 0, 0;
    np_status st = c->sink->rows(c->sink->user, c->buf, c->first, c->n, err);
    c->first += c->n;
    c->n = 0;
    return st != NP_OK;
}

static int on_entry(void *user, const np_msp_entry *e, np_error *err)
{
    entry_ctx *c = user;
    np_entry_rec *r = &c->buf[c->n++];
    *r = e->rec;
    if (e->kind == NP_MSP_NONE || e->kind == NP_MSP_OTHER) {
        /* not a tensor nor a number: named by its type, no statistics */
        const char *t = e->kind == NP_MSP_NONE ? "None" : e->type;
        const char *dot = strrchr(t, '.');
        np_fmt_copy_name(r->dtype, NP_FMT_DTYPE_LEN, dot ? dot + 1 : t);
    }
    if (c->keep_data && e->data_name[0]) {
        mspdump *d = c->d;
        const char *leaf = sdup(&d->strings, r->name), *dn = sdup(&d->strings, e->data_name);
        if (!leaf || !dn || push_str(&d->data_names, &d->n_data, &d->cap_data, dn) ||
            push_label(d, r) || np_strmap_put(&d->data, leaf, (int)(d->n_data - 1)) != 0)
            return c->oom = 1;
    }
    return c->n == CHUNK ? flush_entries(c, err) : 0;
}

static int on_call(void *user, const char *call, int64_t seq, np_error *err)
{
    entry_ctx *c = user;
    (void)seq;
    (void)err;
    if (!c->keep_calls)
        return 0;
    const char *s = sdup(&c->d->strings, call);
    if (!s || push_str(&c->d->calls, &c->d->n_calls, &c->d->cap_calls, s))
        return c->oom = 1;
    return 0;
}

/* Stream dump.json to `sink` (may be NULL), building the call list and the
 * leaf -> data_name table on the first pass. Called with d->lock held
 * when sink is NULL (a pass for the tables only). */
static np_status stream(mspdump *d, const np_dumpio_entry_sink *sink, np_error *err)
{
    entry_ctx c;
    memset(&c, 0, sizeof c);
    c.d = d;
    c.sink = sink;
    c.buf = malloc(CHUNK * sizeof *c.buf);
    c.keep_calls = !d->have_calls;
    c.keep_data = !d->have_data;
    if (c.keep_data && np_strmap_init(&d->data, 1024) != 0)
        c.buf = (free(c.buf), NULL);
    if (!c.buf)
        return np_error_set(err, NP_ERR_NOMEM, d->path, NULL, "out of memory");
    np_msp_sink ms = {on_call, on_entry, &c};
    np_status st = NP_OK;
    d->building = 1;
    d->builder = pthread_self();
    if (sink && sink->begin)
        st = sink->begin(sink->user, 0, err);
    if (!st)
        st = np_msp_read_dump_json(NULL, d->path, &ms, err);
    if (!st && flush_entries(&c, err))
        st = err && err->status ? err->status : NP_ERR_INTERNAL;
    if (c.oom && !st)
        st = np_error_set(err, NP_ERR_NOMEM, d->path, NULL, "out of memory");
    free(c.buf);
    d->building = 0;
    if (c.keep_calls && !st)
        d->have_calls = 1;
    if (c.keep_data) {
        if (!st)
            d->have_data = 1;
        else
            np_strmap_free(&d->data);
    }
    return st;
}

static np_status msp_entries(void *h, const np_dumpio_entry_sink *sink, np_error *err)
{
    mspdump *d = h;
    pthread_mutex_lock(&d->lock);
    np_status st = stream(d, sink, err);
    pthread_mutex_unlock(&d->lock);
    return st;
}

typedef struct meta {
    np_strmap map;
    const char **vals;
    size_t n, cap;
    sblock **strings;
    int oom;
} meta;

static int on_pair(void *user, const char *call, const char *value, np_error *err)
{
    (void)err;
    meta *m = user;
    const char *k = sdup(m->strings, call), *v = sdup(m->strings, value);
    if (!k || !v || push_str(&m->vals, &m->n, &m->cap, v) ||
        np_strmap_put(&m->map, k, (int)(m->n - 1)) != 0)
        return m->oom = 1;
    return 0;
}

/* construct.json or stack.json next to dump.json into m; absent is fine. */
static np_status read_meta(meta *m, mspdump *d, const char *file, int stack, np_error *err)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", d->dir, file);
    if (np_strmap_init(&m->map, 1024) != 0)
        return np_error_set(err, NP_ERR_NOMEM, p, NULL, "out of memory");
    m->strings = &d->strings;
    if (!dumpio_is_file(p))
        return NP_OK;
    np_status st = stack ? np_msp_read_stack(p, on_pair, m, err)
                         : np_msp_read_construct(p, on_pair, m, err);
    return m->oom && !st ? np_error_set(err, NP_ERR_NOMEM, p, NULL, "out of memory") : st;
}

static const char *meta_get(const meta *m, const char *call)
{
    int i = np_strmap_get(&m->map, call);
    return i >= 0 ? m->vals[i] : "";
}

static np_status emit_calls(mspdump *d, const meta *parents, const meta *sites,
                            const np_dumpio_call_sink *sink, np_error *err)
{
    np_call_rec *buf = malloc(CHUNK * sizeof *buf);
    if (!buf)
        return np_error_set(err, NP_ERR_NOMEM, d->path, NULL, "out of memory");
    np_status st = sink->begin ? sink->begin(sink->user, d->n_calls, err) : NP_OK;
    size_t k = 0;
    for (size_t i = 0; !st && i < d->n_calls; i++) {
        np_call_rec *r = &buf[k++];
        memset(r, 0, sizeof *r);
        r->seq = (int64_t)i;
        np_fmt_copy_name(r->call, NP_FMT_NAME_LEN, d->calls[i]);
        np_fmt_copy_name(r->kind, NP_FMT_KIND_LEN,
                         strncmp(d->calls[i], "Module.", 7) ? "api" : "module");
        np_fmt_copy_name(r->parent, NP_FMT_NAME_LEN, meta_get(parents, d->calls[i]));
        np_fmt_copy_name(r->callsite, NP_FMT_SITE_LEN, meta_get(sites, d->calls[i]));
        if (k == CHUNK || i + 1 == d->n_calls) {
            st = sink->rows(sink->user, buf, i + 1 - k, k, err);
            k = 0;
        }
    }
    free(buf);
    return st;
}

static np_status msp_calls(void *h, const np_dumpio_call_sink *sink, np_error *err)
{
    mspdump *d = h;
    pthread_mutex_lock(&d->lock);
    np_status st = d->have_calls ? NP_OK : stream(d, NULL, err);
    meta parents, sites;
    memset(&parents, 0, sizeof parents);
    memset(&sites, 0, sizeof sites);
    if (!st)
        st = read_meta(&parents, d, "construct.json", 0, err);
    if (!st)
        st = read_meta(&sites, d, "stack.json", 1, err);
    if (!st)
        st = emit_calls(d, &parents, &sites, sink, err);
    np_strmap_free(&parents.map);
    np_strmap_free(&sites.map);
    free(parents.vals);
    free(sites.vals);
    pthread_mutex_unlock(&d->lock);
    return st;
}

/* ---- payloads -------------------------------------------------------------------- */

typedef struct file_payload {
    np_dumpio_seg seg;
    int fd;
} file_payload;

static void release_file(np_dumpio_payload *p)
{
    file_payload *f = p->owned;
    if (f && f->fd >= 0)
        close(f->fd);
    free(f);
}

static void *reserve(np_dumpio_buf *b, size_t bytes)
{
    if (b->cap < bytes) {
        void *p = realloc(b->p, bytes ? bytes : 1);
        if (!p)
            return NULL;
        b->p = p;
        b->cap = bytes;
    }
    return b->p;
}

static np_status as_file(np_dumpio_payload *p, const np_pt_tensor *t, const char *path,
                         np_error *err)
{
    file_payload *f = malloc(sizeof *f);
    if (!f)
        return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    const char *why = NULL;
    f->fd = np_open_regular(path, &why);
    if (f->fd < 0) {
        free(f);
        return np_error_set(err, NP_ERR_IO, path, NULL, "cannot open: %s", why);
    }
    f->seg.start = 0;
    f->seg.count = t->numel;
    f->seg.addr = t->storage_pos + (uint64_t)t->offset * 4u;
    p->form = NP_DUMPIO_FILE_F32;
    p->fd = f->fd;
    p->segs = &f->seg;
    p->nseg = 1;
    p->owned = f;
    p->release = release_file;
    return NP_OK;
}

static np_status leaf_file(char *path, size_t cap, label *lb, mspdump *d, const char *leaf,
                           np_error *err)
{
    if (d->building && pthread_equal(d->builder, pthread_self()))
        return np_error_set(err, NP_ERR_ARG, d->path, leaf,
                            "a payload asked for while the entries are first read");
    pthread_mutex_lock(&d->lock);
    np_status st = d->have_data ? NP_OK : stream(d, NULL, err);
    int i = st ? -1 : np_strmap_get(&d->data, leaf);
    const char *dn = i >= 0 ? d->data_names[i] : NULL;
    if (dn)
        *lb = d->labels[i];
    pthread_mutex_unlock(&d->lock);
    if (st)
        return st;
    if (!dn)
        return np_error_set(err, NP_ERR_NOTFOUND, d->path, leaf, "no data_name for %s", leaf);
    return np_msp_data_path(path, cap, d->dir, dn, err);
}

static void shape_text(char *out, size_t cap, int ndim, const int64_t *shape)
{
    size_t n = (size_t)snprintf(out, cap, "[");
    for (int k = 0; k < ndim && n < cap; k++)
        n += (size_t)snprintf(out + n, cap - n, "%s%lld", k ? ", " : "", (long long)shape[k]);
    if (n < cap)
        snprintf(out + n, cap - n, "]");
}

/* The payload must be what dump.json says: its dtype, shape and element
 * count (a float64 payload under a float32 label would be compared with
 * float32's tolerance: a silent wrong verdict). */
static np_status check_label(const np_pt_tensor *t, const label *lb, int64_t numel,
                             const char *path, const char *leaf, np_error *err)
{
    if (strcmp(t->dtype, lb->dtype))
        return np_error_set(err, NP_ERR_FORMAT, path, leaf,
                            "%s payload under a %s label: the .pt stores %s, dump.json says "
                            "dtype %s",
                            t->dtype, lb->dtype, t->dtype, lb->dtype);
    int same = t->ndim == lb->ndim;
    for (int k = 0; same && k < t->ndim; k++)
        same = t->shape[k] == lb->shape[k];
    if (!same) {
        char a[160], b[160];
        shape_text(a, sizeof a, t->ndim, t->shape);
        shape_text(b, sizeof b, lb->ndim, lb->shape);
        return np_error_set(err, NP_ERR_FORMAT, path, leaf,
                            "the .pt holds shape %s, dump.json says shape %s", a, b);
    }
    if (t->numel != numel)
        return np_error_set(err, NP_ERR_FORMAT, path, leaf, "%lld elements, dump.json says %lld",
                            (long long)t->numel, (long long)numel);
    return NP_OK;
}

static np_status msp_payload(np_dumpio_payload *p, void *h, const char *leaf, int64_t numel,
                             unsigned flags, np_dumpio_buf *buf, np_error *err)
{
    mspdump *d = h;
    char path[4400];
    memset(p, 0, sizeof *p);
    p->fd = -1;
    label lb;
    np_status st = leaf_file(path, sizeof path, &lb, d, leaf, err);
    if (st)
        return st;
    np_pt_tensor t;
    if ((st = np_pt_open(&t, path, err)))
        return st;
    if ((st = check_label(&t, &lb, numel, path, leaf, err))) {
        np_pt_close(&t);
        return st;
    }
    p->numel = numel;
    p->crc_kind = NP_DUMPIO_CRC_NONE;
    int f32 = !strcmp(t.dtype, "float32"), small = f32 || !strcmp(t.dtype, "bfloat16") ||
                                                   !strcmp(t.dtype, "float16");
    if (f32 && t.contiguous && (flags & NP_DUMPIO_ALLOW_FILE) && numel > 0) {
        st = as_file(p, &t, path, err);
    } else {
        void *dst = reserve(buf, (size_t)(numel ? numel : 1) * (small ? 4u : 8u));
        if (!dst)
            st = np_error_set(err, NP_ERR_NOMEM, path, leaf, "out of memory");
        else
            st = np_pt_read(dst, !small, &t, 0, numel, err);
        p->form = small ? NP_DUMPIO_MEM_F32 : NP_DUMPIO_MEM_F64;
        p->mem = dst;
    }
    np_pt_close(&t);
    return st;
}

const np_dumpio_source np_dumpio_msprobe_source = {
    .name = "msprobe",
    .detect = msp_detect,
    .find = msp_find,
    .open = msp_open,
    .entries = msp_entries,
    .calls = msp_calls,
    .payload = msp_payload,
    .close = msp_close,
    .walk = NULL,
    .stats_keep_inf = 1,
    .file = "dump.json",
    .layout = "step*/{rank*,proc*,rank}/dump.json",
};
