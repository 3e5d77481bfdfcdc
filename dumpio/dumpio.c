/* dumpio/dumpio.c - the front of np_dumpio: the registered sources, finding
 * step files in whichever format recognises a path, the crash-isolated
 * open, and what every source gets for free (all rows at once, the first
 * values of a payload). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

struct np_dumpio {
    const np_dumpio_source *src;
    void *h;
    np_dumpio_info info;
    char path[4096];
};

/* ---- sources ---------------------------------------------------------------- */

/* Detection order: the first source whose detect accepts a path reads it;
 * when none does, the first one (nprobe's) says why not. */
static const np_dumpio_source *const sources[] = {
    &np_dumpio_nprobe_source,
    &np_dumpio_msprobe_source,
    NULL,
};

const np_dumpio_source *const *np_dumpio_sources(void) { return sources; }

const np_dumpio_source *np_dumpio_source_by_name(const char *name)
{
    for (int i = 0; sources[i]; i++)
        if (strcmp(sources[i]->name, name) == 0)
            return sources[i];
    return NULL;
}

const char *np_dumpio_layouts(char *buf, size_t cap, char *files, size_t files_cap)
{
    size_t n = 0, nf = 0;
    buf[0] = '\0';
    if (files)
        files[0] = '\0';
    for (int i = 0; sources[i]; i++) {
        const char *sep = !sources[i + 1] ? " or " : ", ";
        if (n < cap)
            n += (size_t)snprintf(buf + n, cap - n, "%s%s (%s)", i ? sep : "",
                                  sources[i]->layout, sources[i]->name);
        if (files && nf < files_cap)
            nf += (size_t)snprintf(files + nf, files_cap - nf, "%s%s", i ? sep : "",
                                   sources[i]->file);
    }
    return buf;
}

/* The source whose detect accepts `path`, NULL when none does. */
static const np_dumpio_source *detect_any(const char *path)
{
    for (int i = 0; sources[i]; i++)
        if (sources[i]->detect(path))
            return sources[i];
    return NULL;
}

static const np_dumpio_source *detect(const char *path)
{
    const np_dumpio_source *s = detect_any(path);
    return s ? s : sources[0];
}

np_status np_dumpio_find(np_dumpio_ref **out, size_t *n, const char *path, np_error *err)
{
    *out = NULL;
    *n = 0;
    const np_dumpio_source *any = detect_any(path), *src = any ? any : sources[0];
    np_status st = src->find(out, n, path, err);
    if (st == NP_ERR_NOTFOUND && !any) {
        /* no format recognised the path: say what every one looks for */
        char lay[512], files[128];
        np_dumpio_layouts(lay, sizeof lay, files, sizeof files);
        int dir = dumpio_is_dir(path), absent = !dir && access(path, F_OK) != 0;
        if ((dir || absent) && err)
            np_error_clear(err); /* this message replaces the first source's */
        if (dir)
            return np_error_set(err, st, path, NULL,
                                "no dump files (%s) found here (expected %s below it, or a step "
                                "or rank directory of either)",
                                files, lay);
        if (absent)
            return np_error_set(err, st, path, NULL,
                                "no such file or directory (expected a dump root, a step or rank "
                                "directory, or a step file: %s)",
                                files);
    }
    if (st != NP_OK)
        return st;
    for (size_t i = 0; i < *n; i++)
        (*out)[i].source = src;
    return NP_OK;
}

/* ---- one file --------------------------------------------------------------- */

typedef struct walk_arg {
    const np_dumpio_source *src;
    const char *path;
} walk_arg;

static int walk_child(void *arg)
{
    const walk_arg *w = arg;
    return w->src->walk(w->path);
}

int dumpio_isolation_on(void)
{
    return getenv("NPROBE_NO_ISOLATION") == NULL;
}

np_status np_dumpio_open(np_dumpio **out, const char *path, const np_dumpio_source *source,
                         unsigned flags, np_error *err)
{
    *out = NULL;
    const np_dumpio_source *src = source ? source : detect(path);
    /* a library that can crash or loop on corrupt metadata: walk the file
     * in a child process first, and refuse it if the child dies */
    if (src->walk && !(flags & NP_DUMPIO_CHECKED) && dumpio_isolation_on() &&
        access(path, R_OK) == 0 && dumpio_is_file(path)) {
        int sig = 0;
        double limit = np_file_check_timeout();
        walk_arg w = {src, path};
        int r = np_run_isolated(walk_child, &w, limit, &sig);
        np_status st = np_isolated_walk_error(err, path, r, sig, limit);
        if (st != NP_OK)
            return st;
    }
    np_dumpio *d = calloc(1, sizeof *d);
    if (!d)
        return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    d->src = src;
    d->info.loss_scale = 1.0;
    d->info.dp_grad_scale = 1.0;
    d->info.step = d->info.rank = -1;
    d->info.world_size = 1;
    snprintf(d->path, sizeof d->path, "%s", path);
    np_status st = src->open(&d->h, &d->info, path, err);
    if (st != NP_OK) {
        free(d);
        return st;
    }
    d->info.source = src->name;
    *out = d;
    return NP_OK;
}

np_status np_dumpio_open_ref(np_dumpio **out, const np_dumpio_ref *ref, unsigned flags,
                             np_error *err)
{
    return np_dumpio_open(out, ref->path, ref->source, flags, err);
}

void np_dumpio_close(np_dumpio *d)
{
    if (!d)
        return;
    d->src->close(d->h);
    free(d);
}

const np_dumpio_info *np_dumpio_get_info(const np_dumpio *d) { return &d->info; }

const char *np_dumpio_path(const np_dumpio *d) { return d->path; }

np_status np_dumpio_entries(np_dumpio *d, const np_dumpio_entry_sink *sink, np_error *err)
{
    return d->src->entries(d->h, sink, err);
}

np_status np_dumpio_calls(np_dumpio *d, const np_dumpio_call_sink *sink, np_error *err)
{
    return d->src->calls(d->h, sink, err);
}

/* ---- all rows at once --------------------------------------------------------- */

typedef struct collect {
    void *v;
    size_t n, cap, recsize;
    const char *path;
} collect;

static np_status collect_begin(void *user, size_t n_hint, np_error *err)
{
    collect *c = user;
    if (n_hint && n_hint > c->cap) {
        void *v = realloc(c->v, n_hint * c->recsize);
        if (!v)
            return np_error_set(err, NP_ERR_NOMEM, c->path, NULL, "out of memory for %zu rows",
                                n_hint);
        c->v = v;
        c->cap = n_hint;
    }
    return NP_OK;
}

static np_status collect_rows(collect *c, const void *rows, size_t n, np_error *err)
{
    if (np_grow(&c->v, &c->cap, c->n + n, c->recsize))
        return np_error_set(err, NP_ERR_NOMEM, c->path, NULL, "out of memory for %zu rows",
                            c->n + n);
    memcpy((char *)c->v + c->n * c->recsize, rows, n * c->recsize);
    c->n += n;
    return NP_OK;
}

static np_status collect_entries(void *user, np_entry_rec *rows, size_t first, size_t n,
                                 np_error *err)
{
    (void)first;
    return collect_rows(user, rows, n, err);
}

static np_status collect_calls(void *user, np_call_rec *rows, size_t first, size_t n,
                               np_error *err)
{
    (void)first;
    return collect_rows(user, rows, n, err);
}

static np_status collect_done(void **out, size_t *n, collect *c, np_status st)
{
    if (st != NP_OK || c->n == 0) {
        free(c->v);
        c->v = NULL;
        c->n = 0;
    }
    *out = c->v;
    *n = c->n;
    return st;
}

np_status np_dumpio_read_entries(np_entry_rec **out, size_t *n, np_dumpio *d, np_error *err)
{
    collect c = {NULL, 0, 0, sizeof(np_entry_rec), d->path};
    np_dumpio_entry_sink s = {collect_begin, collect_entries, &c};
    void *v;
    np_status st = collect_done(&v, n, &c, np_dumpio_entries(d, &s, err));
    *out = v;
    return st;
}

np_status np_dumpio_read_calls(np_call_rec **out, size_t *n, np_dumpio *d, np_error *err)
{
    collect c = {NULL, 0, 0, sizeof(np_call_rec), d->path};
    np_dumpio_call_sink s = {collect_begin, collect_calls, &c};
    void *v;
    np_status st = collect_done(&v, n, &c, np_dumpio_calls(d, &s, err));
    *out = v;
    return st;
}

static np_status collect_places(void *user, np_place_rec *rows, size_t first, size_t n,
                                np_error *err)
{
    (void)first;
    return collect_rows(user, rows, n, err);
}

np_status np_dumpio_read_placements(np_place_rec **out, size_t *n, np_dumpio *d, np_error *err)
{
    *out = NULL;
    *n = 0;
    if (!d->src->placements)
        return NP_OK;
    collect c = {NULL, 0, 0, sizeof(np_place_rec), d->path};
    np_dumpio_place_sink s = {collect_begin, collect_places, &c};
    void *v;
    np_status st = collect_done(&v, n, &c, d->src->placements(d->h, &s, err));
    *out = v;
    return st;
}

/* ---- payloads ----------------------------------------------------------------- */

void np_dumpio_buf_free(np_dumpio_buf *b)
{
    if (!b)
        return;
    free(b->p);
    b->p = NULL;
    b->cap = 0;
}

np_status np_dumpio_payload_get(np_dumpio_payload *out, np_dumpio *d, const char *leaf,
                                int64_t numel, unsigned flags, np_dumpio_buf *buf, np_error *err)
{
    memset(out, 0, sizeof *out);
    out->fd = -1;
    out->numel = numel;
    return d->src->payload(out, d->h, leaf, numel, flags, buf, err);
}

int np_dumpio_read_f32(int fd, const np_dumpio_seg *segs, int nseg, int64_t lo, int64_t cnt,
                       float *buf)
{
    int64_t done = 0;
    for (int k = 0; k < nseg && done < cnt; k++) {
        const np_dumpio_seg *g = &segs[k];
        int64_t pos = lo + done;
        if (pos < g->start || pos >= g->start + g->count)
            continue;
        int64_t take = g->start + g->count - pos;
        if (take > cnt - done)
            take = cnt - done;
        size_t want = (size_t)take * sizeof(float);
        char *dst = (char *)(buf + done);
        off_t at = (off_t)(g->addr + (uint64_t)(pos - g->start) * sizeof(float));
        while (want) {
            ssize_t r = pread(fd, dst, want, at);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                return -1;
            want -= (size_t)r;
            dst += r;
            at += r;
        }
        done += take;
        k = -1; /* segments need not be in address order: rescan */
    }
    return done == cnt ? 0 : -1;
}

void np_dumpio_payload_release(np_dumpio_payload *p)
{
    if (!p)
        return;
    if (p->release)
        p->release(p);
    else
        free(p->owned);
    p->owned = NULL;
    p->release = NULL;
    p->segs = NULL;
    p->nseg = 0;
}

/* The first `want` elements of a FILE_F32 payload as doubles. */
static int read_file_head(double *out, size_t want, const np_dumpio_payload *p, uint32_t *crc)
{
    size_t done = 0;
    for (int s = 0; s < p->nseg && done < want; s++) {
        const np_dumpio_seg *g = &p->segs[s];
        if (g->start > (int64_t)done || g->start + g->count <= (int64_t)done)
            continue; /* segments are in element order; a gap is not expected */
        size_t skip = done - (size_t)g->start;
        size_t take = (size_t)g->count - skip;
        if (take > want - done)
            take = want - done;
        float tmp[1024];
        while (take) {
            size_t k = take < 1024 ? take : 1024;
            off_t at = (off_t)(g->addr + (uint64_t)skip * sizeof(float));
            if (pread(p->fd, tmp, k * sizeof(float), at) != (ssize_t)(k * sizeof(float)))
                return -1;
            if (crc)
                *crc = np_crc32(*crc, tmp, k * sizeof(float));
            for (size_t i = 0; i < k; i++)
                out[done + i] = tmp[i];
            done += k;
            skip += k;
            take -= k;
        }
    }
    return done == want ? 0 : -1;
}

np_status np_dumpio_read_values(double *out, size_t max, size_t *n, np_dumpio *d,
                                const char *leaf, int64_t numel, np_error *err)
{
    *n = 0;
    np_dumpio_buf buf = {0};
    np_dumpio_payload p;
    np_status st = np_dumpio_payload_get(&p, d, leaf, numel, NP_DUMPIO_ALLOW_FILE, &buf, err);
    if (st != NP_OK) {
        np_dumpio_buf_free(&buf); /* a failed read may have grown it */
        return st;
    }
    size_t want = numel > 0 && (uint64_t)numel < max ? (size_t)numel : (numel > 0 ? max : 0);
    if (p.form == NP_DUMPIO_FILE_F32) {
        if (read_file_head(out, want, &p, NULL) != 0)
            st = np_error_set(err, NP_ERR_IO, d->path, leaf,
                              "reading the payload failed (truncated file?)");
    } else {
        for (size_t i = 0; i < want; i++)
            out[i] = p.form == NP_DUMPIO_MEM_F64 ? ((const double *)p.mem)[i]
                                                 : (double)((const float *)p.mem)[i];
    }
    if (st == NP_OK)
        *n = want;
    np_dumpio_payload_release(&p);
    np_dumpio_buf_free(&buf);
    return st;
}

np_status np_dumpio_read_checked(double *out, np_dumpio *d, const np_entry_rec *e,
                                 np_error *err)
{
    np_dumpio_buf buf = {0};
    np_dumpio_payload p;
    size_t n = e->numel > 0 ? (size_t)e->numel : 0;
    np_status st = np_dumpio_payload_get(&p, d, e->name, e->numel, NP_DUMPIO_ALLOW_FILE, &buf, err);
    if (st != NP_OK) {
        np_dumpio_buf_free(&buf); /* a failed read may have grown it */
        return st;
    }
    uint32_t crc = 0;
    if (p.form == NP_DUMPIO_FILE_F32) {
        if (read_file_head(out, n, &p, &crc) != 0)
            st = np_error_set(err, NP_ERR_IO, d->path, e->name,
                              "reading the payload failed (truncated file?)");
    } else {
        size_t es = p.form == NP_DUMPIO_MEM_F64 ? 8 : 4;
        for (size_t i = 0; i < n; i++)
            out[i] = p.form == NP_DUMPIO_MEM_F64 ? ((const double *)p.mem)[i]
                                                 : (double)((const float *)p.mem)[i];
        if (p.crc_kind == NP_DUMPIO_CRC_ELEMENTS)
            crc = np_crc32(0, p.mem, n * es);
    }
    if (p.crc_kind == NP_DUMPIO_CRC_GIVEN)
        crc = p.crc;
    if (st == NP_OK && p.crc_kind != NP_DUMPIO_CRC_NONE && crc != e->crc32)
        st = np_error_set(err, NP_ERR_FORMAT, d->path, e->name,
                          "the stored bytes do not match their crc32 in the entries (file "
                          "corrupt): crc32 %08x, entry %08x",
                          crc, e->crc32);
    np_dumpio_payload_release(&p);
    np_dumpio_buf_free(&buf);
    return st;
}
