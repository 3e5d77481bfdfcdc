/* configcheck/ccsort.c - external sort of flattened records (ccsort.h): a
 * side gathers records in a budget of memory, sorts them and spills them as
 * a run to an unlinked temporary file in the output folder when the budget
 * is full; the runs are then merged through a heap. No spill happens when
 * a side fits in its budget, nor without a spill folder. */
#define _GNU_SOURCE /* O_TMPFILE */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ccsort.h"

/* ---- spill files ----------------------------------------------------------- */

np_status cc_spill_error(const cc_spill *sp, int en, np_error *err)
{
    np_status st = en == ENOSPC || en == EFBIG || en == EDQUOT ? NP_ERR_NOSPACE : NP_ERR_IO;
    return np_error_set(err, st, sp->report ? sp->report : sp->dir, NULL,
                        "cannot write a temporary file in the output folder: %s", strerror(en));
}

/* A nameless file in dir (O_TMPFILE: it never has a name), or -1 with errno
 * EOPNOTSUPP when the file system cannot make one. */
static int nameless_file(const char *dir)
{
#ifdef O_TMPFILE
    int fd = open(dir, O_RDWR | O_TMPFILE | O_CLOEXEC, 0600);
    if (fd < 0 && (errno == EISDIR || errno == EINVAL))
        errno = EOPNOTSUPP;
    return fd;
#else
    (void)dir;
    errno = EOPNOTSUPP;
    return -1;
#endif
}

np_status cc_spill_file(FILE **f, const cc_spill *sp, np_error *err)
{
    static atomic_uint seq; /* one process may compare in several threads */
    int fd = nameless_file(sp->dir);
    int en = errno;
    for (int tries = 0; fd < 0 && en == EOPNOTSUPP && tries < 100; tries++) {
        /* else a name created exclusively, unlinked at once */
        char path[4200];
        snprintf(path, sizeof path, "%s/.nprobe-cc.%ld.%u.tmp", sp->dir, (long)getpid(),
                 atomic_fetch_add(&seq, 1u));
        fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        en = fd < 0 && errno == EEXIST ? EOPNOTSUPP : errno;
        if (fd >= 0)
            unlink(path); /* nameless from now on: nothing is left behind */
    }
    if (fd < 0)
        return cc_spill_error(sp, en, err);
    *f = fdopen(fd, "w+");
    if (!*f) {
        en = errno;
        close(fd);
        return np_error_set(err, NP_ERR_NOMEM, sp->dir, NULL, "out of memory (%s)", strerror(en));
    }
    return NP_OK;
}

/* ---- records in memory ----------------------------------------------------- */

typedef struct rec {
    const char *k, *v; /* NUL-terminated; v NULL for a marker */
    uint32_t klen, vlen;
    uint64_t parent, seq;
    unsigned flags;
} rec;

typedef struct rec_hdr { /* a record in a run file, then key and value bytes */
    uint32_t klen, vlen, flags;
    uint64_t parent, seq;
} rec_hdr;

struct cc_sorter {
    cc_spill sp;
    rec *v;
    size_t n, cap, bytes;
    np_arena text;
    uint64_t seq;
    FILE **runs;
    size_t n_runs, cap_runs;
};

static int key_cmp(const char *a, size_t na, const char *b, size_t nb)
{
    int c = memcmp(a, b, na < nb ? na : nb);
    return c ? c : (na > nb) - (na < nb);
}

static int rec_cmp(const rec *a, const rec *b)
{
    int c = key_cmp(a->k, a->klen, b->k, b->klen);
    if (c)
        return c;
    if (a->parent != b->parent)
        return a->parent < b->parent ? -1 : 1;
    return (a->seq > b->seq) - (a->seq < b->seq);
}

static int rec_qcmp(const void *x, const void *y)
{
    return rec_cmp(x, y);
}

np_status cc_sorter_new(cc_sorter **s, const cc_spill *sp, np_error *err)
{
    *s = calloc(1, sizeof **s);
    if (!*s)
        return np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory");
    (*s)->sp = *sp;
    return NP_OK;
}

void cc_sorter_free(cc_sorter *s)
{
    if (!s)
        return;
    np_arena_free(&s->text);
    free(s->v);
    for (size_t i = 0; i < s->n_runs; i++)
        fclose(s->runs[i]);
    free(s->runs);
    free(s);
}

/* Sort what is in memory and write it as a run. */
static np_status spill_run(cc_sorter *s, np_error *err)
{
    if (s->n_runs == s->cap_runs) {
        size_t cap = s->cap_runs ? 2 * s->cap_runs : 8;
        FILE **nr = realloc(s->runs, cap * sizeof *nr);
        if (!nr)
            return np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory");
        s->runs = nr;
        s->cap_runs = cap;
    }
    FILE *f = NULL;
    np_status st = cc_spill_file(&f, &s->sp, err);
    if (st != NP_OK)
        return st;
    s->runs[s->n_runs++] = f;
    qsort(s->v, s->n, sizeof *s->v, rec_qcmp);
    for (size_t i = 0; i < s->n; i++) {
        const rec *r = &s->v[i];
        rec_hdr h = {r->klen, r->v ? r->vlen : UINT32_MAX, r->flags, r->parent, r->seq};
        fwrite(&h, sizeof h, 1, f);
        fwrite(r->k, 1, r->klen, f);
        if (r->v)
            fwrite(r->v, 1, r->vlen, f);
    }
    int en = fflush(f) != 0 || ferror(f) ? (errno ? errno : EIO) : 0;
    if (!en && fseek(f, 0, SEEK_SET) != 0)
        en = errno;
    if (en)
        return cc_spill_error(&s->sp, en, err);
    np_arena_reset(&s->text);
    s->n = 0;
    s->bytes = 0;
    return NP_OK;
}

np_status cc_sorter_put(cc_sorter *s, const char *key, size_t klen, const char *val, size_t vlen,
                        uint64_t parent, unsigned flags, np_error *err)
{
    if (klen >= UINT32_MAX || vlen >= UINT32_MAX)
        return np_error_set(err, NP_ERR_LIMIT, NULL, key, "a key or value of 4 GB or more");
    size_t need = klen + vlen + 2 + sizeof(rec);
    if (s->sp.dir && s->n && s->bytes + need > s->sp.budget) {
        np_status st = spill_run(s, err);
        if (st != NP_OK)
            return st;
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 256;
        if (s->sp.dir && s->sp.budget / sizeof(rec) + 1 < cap)
            cap = s->sp.budget / sizeof(rec) + 1; /* the index stays within the budget */
        rec *nv = cap > s->cap ? realloc(s->v, cap * sizeof *nv) : NULL;
        if (!nv)
            return np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory");
        s->v = nv;
        s->cap = cap;
    }
    rec *r = &s->v[s->n];
    r->k = np_arena_put(&s->text, key, klen);
    r->v = r->k && val ? np_arena_put(&s->text, val, vlen) : NULL;
    if (!r->k || (val && !r->v))
        return np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory");
    r->klen = (uint32_t)klen;
    r->vlen = (uint32_t)vlen;
    r->parent = parent;
    r->seq = s->seq++;
    r->flags = flags;
    s->n++;
    s->bytes += need;
    return NP_OK;
}

/* ---- the sorted side --------------------------------------------------------- */

typedef struct rrun { /* a run file being read */
    FILE *f;
    char *buf;
    size_t cap;
    rec r;
} rrun;

struct cc_side {
    cc_sorter *s;
    size_t pos;            /* in memory (no runs): the next record */
    int merged;            /* else the runs, merged through a heap */
    rrun *runs;
    rrun **heap;
    size_t n_heap;
    char *key, *val;       /* the record handed out */
    size_t kcap, vcap;
    const char *pack, *what;
};

/* The next record of a run: 1, 0 at its end, -1 on a read error. */
static int rrun_next(rrun *rr)
{
    rec_hdr h;
    size_t got = fread(&h, 1, sizeof h, rr->f);
    if (got == 0 && feof(rr->f))
        return 0;
    if (got != sizeof h)
        return -1;
    size_t vlen = h.vlen == UINT32_MAX ? 0 : h.vlen;
    size_t need = (size_t)h.klen + vlen + 2;
    if (need > rr->cap) {
        char *nb = realloc(rr->buf, need);
        if (!nb)
            return -1;
        rr->buf = nb;
        rr->cap = need;
    }
    if (fread(rr->buf, 1, h.klen, rr->f) != h.klen ||
        fread(rr->buf + h.klen + 1, 1, vlen, rr->f) != vlen)
        return -1;
    rr->buf[h.klen] = '\0';
    rr->buf[h.klen + 1 + vlen] = '\0';
    rr->r = (rec){rr->buf, h.vlen == UINT32_MAX ? NULL : rr->buf + h.klen + 1, h.klen,
                  (uint32_t)vlen, h.parent, h.seq, h.flags};
    return 1;
}

static void heap_down(rrun **h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        if (l < n && rec_cmp(&h[l]->r, &h[m]->r) < 0)
            m = l;
        if (l + 1 < n && rec_cmp(&h[l + 1]->r, &h[m]->r) < 0)
            m = l + 1;
        if (m == i)
            return;
        rrun *t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

static np_status read_error(cc_side *sd, np_error *err)
{
    return cc_spill_error(&sd->s->sp, errno ? errno : EIO, err);
}

np_status cc_side_open(cc_side **side, cc_sorter *s, const char *pack, const char *what,
                       np_error *err)
{
    cc_side *sd = calloc(1, sizeof *sd);
    if (!sd) {
        cc_sorter_free(s);
        return np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory");
    }
    sd->s = s;
    sd->pack = pack;
    sd->what = what;
    *side = sd;
    np_status st = NP_OK;
    /* with a spill folder a side that fits is still spilled (the sides of
     * every item are read before the first join), unless it is small and
     * the small sides kept so far leave room for it */
    int keep = !s->sp.dir;
    if (!keep && !s->n_runs && s->sp.kept && *s->sp.kept + s->bytes <= s->sp.budget / 2) {
        *s->sp.kept += s->bytes;
        keep = 1;
    }
    if (keep) { /* in memory */
        if (s->n > 1)
            qsort(s->v, s->n, sizeof *s->v, rec_qcmp);
        return NP_OK;
    }
    if (s->n && (st = spill_run(s, err)) != NP_OK)
        return st;
    free(s->v); /* all in the runs now */
    s->v = NULL;
    s->cap = 0;
    sd->merged = 1;
    sd->runs = calloc(s->n_runs + 1, sizeof *sd->runs);
    sd->heap = calloc(s->n_runs + 1, sizeof *sd->heap);
    if (!sd->runs || !sd->heap)
        return np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory");
    for (size_t i = 0; i < s->n_runs; i++) {
        sd->runs[i].f = s->runs[i];
        setvbuf(s->runs[i], NULL, _IOFBF, 1 << 16);
        int r = rrun_next(&sd->runs[i]);
        if (r < 0)
            return read_error(sd, err);
        if (r > 0)
            sd->heap[sd->n_heap++] = &sd->runs[i];
    }
    for (size_t i = sd->n_heap; i-- > 0;)
        heap_down(sd->heap, sd->n_heap, i);
    return NP_OK;
}

/* The smallest record not yet taken, or NULL. */
static const rec *side_peek(cc_side *sd)
{
    if (!sd->merged)
        return sd->pos < sd->s->n ? &sd->s->v[sd->pos] : NULL;
    return sd->n_heap ? &sd->heap[0]->r : NULL;
}

static int side_advance(cc_side *sd)
{
    if (!sd->merged) {
        sd->pos++;
        return 0;
    }
    int r = rrun_next(sd->heap[0]);
    if (r < 0)
        return -1;
    if (r == 0)
        sd->heap[0] = sd->heap[--sd->n_heap];
    heap_down(sd->heap, sd->n_heap, 0);
    return 0;
}

static int keep(char **dst, size_t *cap, const char *s, size_t n)
{
    if (n + 1 > *cap) {
        size_t nc = n + 1 > 2 * *cap ? n + 1 : 2 * *cap;
        char *nb = realloc(*dst, nc);
        if (!nb)
            return -1;
        *dst = nb;
        *cap = nc;
    }
    memcpy(*dst, s, n);
    (*dst)[n] = '\0';
    return 0;
}

int cc_side_next(cc_side *sd, const char **key, const char **val, np_error *err)
{
    const rec *r;
    while ((r = side_peek(sd)) != NULL) {
        if (keep(&sd->key, &sd->kcap, r->k, r->klen) != 0)
            goto nomem;
        size_t klen = r->klen;
        uint64_t parent = 0, best = 0;
        int first = 1, found = 0;
        for (; r && key_cmp(r->k, r->klen, sd->key, klen) == 0; r = side_peek(sd)) {
            if (!first && r->parent == parent && strcmp(sd->what, "pip") == 0) {
                /* msprobe's pip member lists importlib.metadata's
                 * distributions in sys.path order: in a venv that sees the
                 * system's site-packages (Debian 13's python3-torch) a
                 * package installed in both is listed twice, the one Python
                 * imports first. That one is kept (lowest order first). */
                if (side_advance(sd) != 0) {
                    read_error(sd, err);
                    return -1;
                }
                continue;
            }
            if (!first && r->parent == parent) {
                if (strcmp(sd->what, "pip.txt") == 0)
                    np_error_set(err, NP_ERR_FORMAT, sd->pack, sd->what,
                                 "refused: the package \"%s\" is listed twice (names "
                                 "compared as PEP 503 normalises them)", sd->key);
                else
                    np_error_set(err, NP_ERR_JSON, sd->pack, sd->what,
                                 "refused: malformed JSON: duplicate object key \"%s\"",
                                 sd->key);
                return -1;
            }
            first = 0;
            parent = r->parent;
            if (!r->flags && (!found || r->seq > best)) {
                if (keep(&sd->val, &sd->vcap, r->v, r->vlen) != 0)
                    goto nomem;
                found = 1;
                best = r->seq;
            }
            if (side_advance(sd) != 0) {
                read_error(sd, err);
                return -1;
            }
        }
        if (found) {
            *key = sd->key;
            *val = sd->val;
            return 1;
        }
    }
    return 0;
nomem:
    np_error_set(err, NP_ERR_NOMEM, sd->pack, sd->what, "out of memory");
    return -1;
}

void cc_side_free(cc_side *sd)
{
    if (!sd)
        return;
    for (size_t i = 0; sd->runs && i < sd->s->n_runs; i++)
        free(sd->runs[i].buf);
    cc_sorter_free(sd->s); /* closes the runs */
    free(sd->runs);
    free(sd->heap);
    free(sd->key);
    free(sd->val);
    free(sd);
}

long long cc_side_runs(const cc_side *sd)
{
    return sd ? (long long)sd->s->n_runs : 0;
}
