/* configcheck/ccflat.c - flatten one side's member into sorted records
 * without a document tree: the member is inflated (into memory, or into a
 * spill file that is mapped and read by msprobe's pull reader, which hands
 * pages behind it back to the kernel), walked token by token, and each leaf
 * goes to the external sort (ccsort.c) as "a/b/c" -> text.
 *
 * The text of a leaf is what jansson gives (the parser before): a plain
 * ASCII string and a small integer are taken as they stand; every other
 * scalar, and an array of scalars (a leaf as a whole), is decoded and
 * re-encoded by jansson, which also refuses what it refused before
 * (invalid UTF-8, bad escapes, NaN, integer overflow, ...). */
#define _DEFAULT_SOURCE 1 /* madvise */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "nprobe/msprobe.h"
#include "packread.h"

typedef struct walker {
    np_json_reader r;
    cc_sorter *s;
    uint64_t ids;
    const char *pack, *member;
    np_error *err;
    char *path, *kbuf, *tbuf;     /* the key path; a decoded key; a leaf's text */
    size_t plen, pcap, kcap, tcap;
} walker;

enum { W_CONTAINER = 0, W_LEAF = 1 };

static int grow(char **b, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t nc = need > 2 * *cap ? need : 2 * *cap;
    char *nb = realloc(*b, nc);
    if (!nb)
        return -1;
    *b = nb;
    *cap = nc;
    return 0;
}

static np_status nomem(walker *w)
{
    return np_error_set(w->err, NP_ERR_NOMEM, w->pack, w->member, "out of memory");
}

/* A malformed-JSON refusal from jansson about the text that starts at `at`
 * (its line and column `je` counted from there): the position in the
 * member as jansson gave it for the whole document (columns count UTF-8
 * characters). */
static np_status bad_at(walker *w, const char *at, const json_error_t *je)
{
    long line = 1, col = 0;
    for (const char *q = w->r.base; q < at && q < w->r.end; q++) {
        if (*q == '\n')
            line++, col = 0;
        else if (((unsigned char)*q & 0xC0) != 0x80)
            col++;
    }
    if (je->line > 1)
        line += je->line - 1, col = je->column;
    else
        col += je->column;
    return np_error_set(w->err, NP_ERR_JSON, w->pack, w->member,
                        "refused: malformed JSON at line %ld, column %ld: %s", line, col, je->text);
}

static np_status bad_text(walker *w, const char *at, const char *text)
{
    json_error_t je;
    memset(&je, 0, sizeof je);
    je.line = 1;
    je.column = 1;
    snprintf(je.text, sizeof je.text, "%s", text);
    return bad_at(w, at, &je);
}

static np_status next(walker *w, np_json_tok *t)
{
    np_error e;
    np_error_clear(&e);
    np_status st = np_json_next(t, &w->r, &e);
    if (st == NP_OK)
        return NP_OK;
    return np_error_set(w->err, st == NP_ERR_LIMIT ? NP_ERR_LIMIT : NP_ERR_JSON, w->pack,
                        w->member, "refused: malformed JSON at line %ld, column %ld: %s", e.line,
                        e.column, e.text);
}

static int plain_ascii(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
            return 0;
    return 1;
}

/* A string token's text (t->s, t->len are the bytes between the quotes)
 * into *buf. */
static np_status string_text(walker *w, const np_json_tok *t, char **buf, size_t *cap, size_t *n)
{
    if (!t->escaped && plain_ascii(t->s, t->len)) {
        if (grow(buf, cap, t->len + 1))
            return nomem(w);
        memcpy(*buf, t->s, t->len);
        (*buf)[t->len] = '\0';
        *n = t->len;
        return NP_OK;
    }
    json_error_t je;
    json_t *v = json_loadb(t->s - 1, t->len + 2, JSON_DECODE_ANY, &je);
    if (!v)
        return bad_at(w, t->s - 1, &je);
    size_t len = json_string_length(v);
    np_status st = grow(buf, cap, len + 1) ? nomem(w) : NP_OK;
    if (st == NP_OK) {
        memcpy(*buf, json_string_value(v), len + 1);
        *n = len;
    }
    json_decref(v);
    return st;
}

/* -?(0|[1-9][0-9]{0,17}): jansson's text of it is itself ("-0" is "0"). */
static int simple_int(const char *s, size_t n)
{
    size_t i = n && s[0] == '-';
    if (i == n || n - i > 18 || (s[i] == '0' && n - i > 1))
        return 0;
    for (; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    return 1;
}

/* The raw JSON [a, b) (a number, an array of scalars) as jansson writes it. */
static np_status reencode(walker *w, const char *a, const char *b, size_t *n)
{
    json_error_t je;
    json_t *v = json_loadb(a, (size_t)(b - a), JSON_DECODE_ANY, &je);
    if (!v)
        return bad_at(w, a, &je);
    char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(v);
    if (!t)
        return nomem(w);
    size_t len = strlen(t);
    np_status st = grow(&w->tbuf, &w->tcap, len + 1) ? nomem(w) : NP_OK;
    if (st == NP_OK) {
        memcpy(w->tbuf, t, len + 1);
        *n = len;
    }
    free(t);
    return st;
}

/* The text of scalar token t (just read) into w->tbuf. */
static np_status scalar_text(walker *w, const np_json_tok *t, size_t *n)
{
    const char *lit = t->type == NP_JSON_TRUE ? "true" : t->type == NP_JSON_FALSE ? "false"
                                                       : t->type == NP_JSON_NULL  ? "null"
                                                                                  : NULL;
    if (t->type == NP_JSON_STR)
        return string_text(w, t, &w->tbuf, &w->tcap, n);
    if (!lit) { /* a number: its raw bytes */
        const char *a = w->r.base + w->r.last_tok, *b = w->r.p;
        if (!simple_int(a, (size_t)(b - a)))
            return reencode(w, a, b, n);
        int neg0 = b - a == 2 && a[0] == '-';
        lit = neg0 ? "0" : NULL;
        if (!lit) {
            if (grow(&w->tbuf, &w->tcap, (size_t)(b - a) + 1))
                return nomem(w);
            memcpy(w->tbuf, a, (size_t)(b - a));
            w->tbuf[b - a] = '\0';
            *n = (size_t)(b - a);
            return NP_OK;
        }
    }
    *n = strlen(lit);
    if (grow(&w->tbuf, &w->tcap, *n + 1))
        return nomem(w);
    memcpy(w->tbuf, lit, *n + 1);
    return NP_OK;
}

/* Path += "/" name (name alone on an empty path). */
static np_status path_push(walker *w, const char *name, size_t n)
{
    size_t sep = w->plen ? 1 : 0;
    if (grow(&w->path, &w->pcap, w->plen + sep + n + 1))
        return nomem(w);
    if (sep)
        w->path[w->plen] = '/';
    memcpy(w->path + w->plen + sep, name, n);
    w->plen += sep + n;
    w->path[w->plen] = '\0';
    return NP_OK;
}

static np_status walk_value(walker *w, const np_json_tok *t, unsigned flags, int *kind);

/* The record of a member (or element) under w->path: its leaf when it is
 * visible and has a key, else a marker (for the duplicate check). */
static np_status put_member(walker *w, const char *key, size_t klen, int kind, size_t vlen,
                            uint64_t parent, unsigned flags)
{
    if (kind == W_LEAF && !flags && klen)
        return cc_sorter_put(w->s, key, klen, w->tbuf, vlen, parent, 0, w->err);
    return cc_sorter_put(w->s, key, klen, NULL, 0, parent, flags | CC_REC_MARKER, w->err);
}

/* Walk value t as a member of container `parent`, then record it. `own`
 * (root picks only) is the key of its own record when it differs from the
 * path its children get. */
static np_status walk_member(walker *w, const np_json_tok *t, uint64_t parent, unsigned flags,
                             unsigned own_flags, const char *own, size_t own_len)
{
    int kind = W_CONTAINER;
    size_t vlen = 0;
    np_status st;
    if (t->type == NP_JSON_OBJ || t->type == NP_JSON_ARR)
        st = walk_value(w, t, flags, &kind);
    else
        st = scalar_text(w, t, &vlen), kind = W_LEAF;
    if (st == NP_OK && kind == W_LEAF && (t->type == NP_JSON_OBJ || t->type == NP_JSON_ARR))
        vlen = strlen(w->tbuf); /* "{}" or an array's text */
    if (st != NP_OK)
        return st;
    if (own)
        return put_member(w, own, own_len, kind, vlen, parent, own_flags);
    return put_member(w, w->path, w->plen, kind, vlen, parent, flags);
}

/* An object whose '{' was just read; `pick` (the root of env and weights):
 * only the member of that name is compared, its children on an empty path. */
static np_status walk_object(walker *w, const np_json_tok *t, unsigned flags, const char *pick,
                             int *kind)
{
    np_json_tok u;
    np_status st = next(w, &u);
    if (st != NP_OK)
        return st;
    if (u.type == NP_JSON_OBJ_END) { /* {} is a leaf */
        if (grow(&w->tbuf, &w->tcap, 3))
            return nomem(w);
        memcpy(w->tbuf, "{}", 3);
        *kind = W_LEAF;
        return NP_OK;
    }
    uint64_t id = ++w->ids;
    (void)t;
    while (st == NP_OK && u.type == NP_JSON_KEY) {
        size_t klen = 0, plen0 = w->plen;
        np_json_tok v;
        st = string_text(w, &u, &w->kbuf, &w->kcap, &klen);
        if (st == NP_OK)
            st = next(w, &v);
        if (st != NP_OK)
            break;
        if (pick) {
            int is_pick = strcmp(w->kbuf, pick) == 0 && strlen(w->kbuf) == klen;
            char *name = strdup(w->kbuf);
            if (!name)
                return nomem(w);
            if (!is_pick)
                st = path_push(w, name, klen);
            if (st == NP_OK)
                st = walk_member(w, &v, id, is_pick ? 0 : CC_REC_HIDDEN, CC_REC_HIDDEN, name, klen);
            free(name);
        } else {
            st = path_push(w, w->kbuf, klen);
            if (st == NP_OK)
                st = walk_member(w, &v, id, flags, flags, NULL, 0);
        }
        w->plen = plen0;
        if (w->path)
            w->path[plen0] = '\0';
        if (st == NP_OK)
            st = next(w, &u);
    }
    *kind = W_CONTAINER;
    return st;
}

/* An array whose '[' was just read: a leaf when every element is a scalar,
 * else its elements are members "0", "1", ... */
static np_status walk_array(walker *w, const np_json_tok *t, unsigned flags, int *kind)
{
    np_json_reader saved = w->r;
    const char *start = w->r.base + w->r.last_tok;
    np_json_tok u;
    np_status st;
    int scalars = 1;
    for (;;) {
        if ((st = next(w, &u)) != NP_OK)
            return st;
        if (u.type == NP_JSON_ARR_END && u.depth == t->depth - 1)
            break;
        if (u.type == NP_JSON_OBJ || u.type == NP_JSON_ARR) {
            scalars = 0;
            break;
        }
    }
    if (scalars) {
        size_t n;
        *kind = W_LEAF;
        return reencode(w, start, w->r.p, &n);
    }
    w->r = saved; /* walk it again, element by element */
    uint64_t id = ++w->ids;
    *kind = W_CONTAINER;
    for (size_t i = 0;; i++) {
        if ((st = next(w, &u)) != NP_OK)
            return st;
        if (u.type == NP_JSON_ARR_END)
            return NP_OK;
        char index[32];
        size_t plen0 = w->plen;
        int len = snprintf(index, sizeof index, "%zu", i);
        st = path_push(w, index, (size_t)len);
        if (st == NP_OK)
            st = walk_member(w, &u, id, flags, flags, NULL, 0);
        w->plen = plen0;
        w->path[plen0] = '\0';
        if (st != NP_OK)
            return st;
    }
}

static np_status walk_value(walker *w, const np_json_tok *t, unsigned flags, int *kind)
{
    if (t->type == NP_JSON_OBJ)
        return walk_object(w, t, flags, NULL, kind);
    return walk_array(w, t, flags, kind);
}

/* Walk a whole member document: an object (else refused), of which `pick`
 * (or all) is compared. */
static np_status walk_doc(walker *w, const char *pick)
{
    np_json_tok t;
    np_status st = next(w, &t);
    int kind;
    if (st != NP_OK)
        return st;
    if (t.type != NP_JSON_OBJ && t.type != NP_JSON_ARR)
        return bad_text(w, w->r.base + w->r.last_tok, "'[' or '{' expected");
    if (t.type != NP_JSON_OBJ) { /* refused either way: malformed, or not an object */
        st = walk_value(w, &t, CC_REC_HIDDEN, &kind);
        if (st == NP_OK)
            st = next(w, &t); /* text after the end? */
        if (st == NP_OK)
            st = np_error_set(w->err, NP_ERR_FORMAT, w->pack, w->member,
                              "refused: expected a JSON object");
        return st;
    }
    st = walk_object(w, &t, 0, pick, &kind);
    if (st == NP_OK)
        st = next(w, &t);
    if (st == NP_OK && t.type != NP_JSON_END)
        st = bad_text(w, w->r.p, "end of file expected");
    return st;
}

/* ---- pip.txt ------------------------------------------------------------------ */

/* Lower-case, with runs of '-', '_', '.' as one '-' (PEP 503). */
static void pip_normalise(char *s)
{
    char *w = s;
    for (char *r = s; *r; r++) {
        if (*r == '-' || *r == '_' || *r == '.') {
            if (w == s || w[-1] != '-')
                *w++ = '-';
        } else {
            *w++ = (char)tolower((unsigned char)*r);
        }
    }
    *w = '\0';
}

/* One line "name==version" or "name @ url" -> name = version. Every line
 * has the same parent, so a name listed twice (also once PEP 503
 * normalised: Foo_Bar and foo-bar) is refused by the sort's duplicate
 * check (the last line silently won, and pip passed). */
static np_status pip_line(walker *w, const char *p, size_t len)
{
    if (grow(&w->kbuf, &w->kcap, len + 1))
        return nomem(w);
    char *line = w->kbuf;
    memcpy(line, p, len);
    line[len] = '\0';
    while (len && (line[len - 1] == '\r' || line[len - 1] == ' '))
        line[--len] = '\0';
    if (!len || line[0] == '#')
        return NP_OK;
    char *sep = strstr(line, "==");
    size_t seplen = 2;
    if (!sep) {
        sep = strstr(line, " @ ");
        seplen = 3;
    }
    if (!sep && (sep = strchr(line, '=')) != NULL)
        seplen = 1; /* msprobe's pip member: "name=version" */
    const char *ver = sep ? sep + seplen : "";
    if (sep)
        *sep = '\0';
    pip_normalise(line);
    if (!*line)
        return NP_OK;
    json_t *utf8 = json_string(ver); /* the reports are UTF-8 */
    const char *v = utf8 ? ver : "(not UTF-8)";
    json_decref(utf8);
    return cc_sorter_put(w->s, line, strlen(line), v, strlen(v), 1, 0, w->err);
}

/* Every line of pip.txt; a NUL byte is refused (the lines after it were
 * cut off: the text was read up to it, and pip passed). */
static np_status walk_pip(walker *w, const char *buf, size_t n, size_t map_len)
{
    const char *nul = memchr(buf, '\0', n);
    if (nul)
        return np_error_set(w->err, NP_ERR_FORMAT, w->pack, w->member,
                            "refused: a NUL byte at offset %zu", (size_t)(nul - buf));
    const char *p = buf, *end = buf + n;
    size_t released = 0, page = (size_t)sysconf(_SC_PAGESIZE);
    np_status st = NP_OK;
    while (st == NP_OK && p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        st = pip_line(w, p, len);
        p = nl ? nl + 1 : end;
        size_t at = (size_t)(p - buf) / page * page;
        if (map_len && at > released + ((size_t)8 << 20)) {
            madvise((char *)buf + released, at - released, MADV_DONTNEED);
            released = at;
        }
    }
    return st;
}

/* ---- one side's member -------------------------------------------------------- */

/* Inflate member id of p: into memory without a spill folder or when it is
 * small (a 16th of the sort budget: 1 MiB by default), else into a spill
 * file that is mapped. */
static np_status load_member(const char **base, size_t *len, size_t *map_len, char **mem,
                             np_cc_packin *p, np_cc_item_id id, const cc_spill *sp, np_error *err)
{
    *mem = NULL;
    *map_len = 0;
    if (!sp->dir || p->size[id] <= sp->budget / 16) { /* small: no temporary */
        np_status st = np_cc_packin_member(p, id, mem, len, NULL, sp, err);
        *base = *mem;
        return st;
    }
    FILE *f = NULL;
    np_status st = cc_spill_file(&f, sp, err);
    if (st == NP_OK)
        st = np_cc_packin_member(p, id, NULL, len, f, sp, err);
    *base = "";
    if (st == NP_OK && *len) {
        void *m = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fileno(f), 0);
        if (m == MAP_FAILED)
            st = np_error_set(err, NP_ERR_NOMEM, p->path, np_cc_member_names[id],
                              "cannot map the inflated member: %s", strerror(errno));
        else {
            madvise(m, *len, MADV_SEQUENTIAL);
            *base = m;
            *map_len = *len;
        }
    }
    if (f)
        fclose(f); /* the mapping keeps the (nameless) file */
    return st;
}

np_status cc_flatten_member(cc_side **side, np_cc_packin *p, np_cc_item_id id, const cc_spill *sp,
                            np_error *err)
{
    *side = NULL;
    walker w;
    memset(&w, 0, sizeof w);
    w.pack = p->path;
    w.member = p->names[id] ? p->names[id] : np_cc_member_names[id];
    w.err = err;
    np_status st = cc_sorter_new(&w.s, sp, err);
    if (st != NP_OK)
        return st;
    const char *base = "";
    size_t len = 0, map_len = 0;
    char *mem = NULL;
    if (p->present[id])
        st = load_member(&base, &len, &map_len, &mem, p, id, sp, err);
    if (st == NP_OK && p->present[id]) {
        if (id == NP_CC_PIP) {
            st = walk_pip(&w, base, len, map_len);
        } else {
            np_json_init_mem(&w.r, base, len, p->path);
            w.r.map_len = map_len; /* pages behind the reader go back to the kernel */
            /* msprobe's env and weight.json are the objects themselves */
            st = walk_doc(&w, p->msprobe                ? NULL
                              : id == NP_CC_ENV     ? "variables"
                              : id == NP_CC_WEIGHTS ? "params"
                                                    : NULL);
            w.r.map_len = 0;
        }
    }
    if (map_len)
        munmap((void *)base, map_len);
    free(mem);
    free(w.path);
    free(w.kbuf);
    free(w.tbuf);
    if (st != NP_OK) {
        cc_sorter_free(w.s);
        return st;
    }
    st = cc_side_open(side, w.s, p->path, w.member, err);
    if (st != NP_OK) {
        cc_side_free(*side);
        *side = NULL;
    }
    return st;
}
