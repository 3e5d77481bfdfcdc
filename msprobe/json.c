/* msprobe/json.c - a pull reader for JSON over a mapped file, accepting the
 * bare NaN, Infinity and -Infinity tokens Python's json module writes (and
 * msprobe's dump.json carries). No document tree: tokens point into the
 * mapping, and pages far behind the cursor go back to the kernel, so a
 * gigabyte dump.json is read in bounded memory. */
#define _DEFAULT_SOURCE 1 /* madvise(MADV_DONTNEED): glibc's posix_madvise ignores DONTNEED */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nprobe/msprobe.h"

enum { S_VALUE = 0, S_VALUE_OR_END, S_KEY_OR_END, S_KEY, S_AFTER, S_DONE };

#define RELEASE_STEP ((size_t)8 << 20) /* drop mapped pages in 8 MB steps: <= 16 MB resident */

void np_json_init_mem(np_json_reader *r, const char *buf, size_t n, const char *name)
{
    memset(r, 0, sizeof *r);
    r->base = r->p = buf;
    r->end = buf + n;
    r->name = name;
}

np_status np_json_open_file(np_json_reader *r, const char *path, np_error *err)
{
    memset(r, 0, sizeof *r);
    const char *why = NULL;
    int fd = np_open_regular(path, &why); /* a FIFO must not block the reader */
    if (fd < 0)
        return np_error_set(err, errno == ENOENT ? NP_ERR_NOTFOUND : NP_ERR_IO, path, NULL,
                            "cannot open: %s", why);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return np_error_set(err, NP_ERR_IO, path, NULL, "cannot stat: %s", strerror(errno));
    }
    void *m = NULL;
    if (st.st_size > 0) {
        m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            return np_error_set(err, NP_ERR_IO, path, NULL, "cannot map: %s", strerror(e));
        }
        madvise(m, (size_t)st.st_size, MADV_SEQUENTIAL);
    }
    close(fd);
    np_json_init_mem(r, m ? (const char *)m : "", (size_t)st.st_size, path);
    r->map_len = m ? (size_t)st.st_size : 0;
    return NP_OK;
}

void np_json_close(np_json_reader *r)
{
    if (r && r->map_len)
        munmap((void *)r->base, r->map_len);
    if (r)
        memset(r, 0, sizeof *r);
}

/* Hand pages before the previous token back to the kernel (mapped files). */
static void release_behind(np_json_reader *r)
{
    if (!r->map_len || r->last_tok < r->released + 2 * RELEASE_STEP)
        return;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t upto = (r->last_tok - RELEASE_STEP) / page * page;
    if (upto > r->released) {
        madvise((char *)r->base + r->released, upto - r->released, MADV_DONTNEED);
        r->released = upto;
    }
}

np_status np_json_error(np_json_reader *r, np_error *err, np_status st, const char *key,
                        const char *fmt, ...)
{
    long line = 1, col = 1;
    for (const char *q = r->base; q < r->p && q < r->end; q++) {
        if (*q == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    return np_error_set_at(err, st, r->name, line, col, key, "%s", text);
}

static void skip_ws(np_json_reader *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\n' || *r->p == '\r' || *r->p == '\t'))
        r->p++;
}

static int lit(np_json_reader *r, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, w, n) != 0)
        return 0;
    r->p += n;
    return 1;
}

static np_status read_string(np_json_tok *t, np_json_reader *r, np_error *err)
{
    const char *q = ++r->p;
    int esc = 0;
    while (q < r->end && *q != '"') {
        if ((unsigned char)*q < 0x20) {
            r->p = q;
            return np_json_error(r, err, NP_ERR_JSON, NULL, "control character in a string");
        }
        if (*q == '\\') {
            esc = 1;
            if (++q >= r->end)
                break;
        }
        q++;
    }
    if (q >= r->end) {
        r->p = q;
        return np_json_error(r, err, NP_ERR_JSON, NULL, "unterminated string (file truncated?)");
    }
    t->s = r->p;
    t->len = (size_t)(q - r->p);
    t->escaped = esc;
    r->p = q + 1;
    return NP_OK;
}

static np_status read_number(np_json_tok *t, np_json_reader *r, np_error *err)
{
    char c0 = *r->p;
    if (c0 == 'N' && lit(r, "NaN")) {
        t->num = NAN;
        return NP_OK;
    }
    if (c0 == 'I' && lit(r, "Infinity")) {
        t->num = INFINITY;
        return NP_OK;
    }
    if (c0 == '-' && lit(r, "-Infinity")) {
        t->num = -INFINITY;
        return NP_OK;
    }
    const char *q = r->p;
    int digits_only = 1; /* an integer (a shape, an int item): no strtod */
    while (q < r->end &&
           ((*q >= '0' && *q <= '9') || *q == '-' || *q == '+' || *q == '.' || *q == 'e' ||
            *q == 'E')) {
        digits_only &= (*q >= '0' && *q <= '9') || (q == r->p && *q == '-');
        q++;
    }
    size_t n = (size_t)(q - r->p);
    char small[64]; /* a longer number (JSON sets no limit) is copied to the heap */
    char *buf = n < sizeof small ? small : malloc(n + 1);
    if (!buf)
        return np_json_error(r, err, NP_ERR_NOMEM, NULL, "out of memory");
    memcpy(buf, r->p, n);
    buf[n] = '\0';
    size_t neg = n && buf[0] == '-';
    char *e = buf + n;
    int lead_ok = n > 0 && (buf[0] == '-' || (buf[0] >= '0' && buf[0] <= '9'));
    if (digits_only && n > neg && n - neg <= 15) {
        int64_t v = 0; /* at most 15 digits: exact in a double */
        for (size_t i = neg; i < n; i++)
            v = v * 10 + (buf[i] - '0');
        t->num = neg ? -(double)v : (double)v;
    } else {
        t->num = lead_ok ? strtod(buf, &e) : 0.0;
    }
    int ok = lead_ok && e == buf + n;
    if (buf != small)
        free(buf);
    if (!ok)
        return np_json_error(r, err, NP_ERR_JSON, NULL,
                             "expected a value (number, string, true, false, null, NaN, "
                             "Infinity, an object or an array)");
    r->p = q;
    return NP_OK;
}

static np_status push(np_json_tok *t, np_json_reader *r, char c, np_error *err)
{
    if (r->depth >= NP_JSON_MAX_DEPTH)
        return np_json_error(r, err, NP_ERR_LIMIT, NULL, "nested deeper than %d levels",
                             NP_JSON_MAX_DEPTH);
    r->stack[r->depth++] = (uint8_t)c;
    r->p++;
    t->type = c == '{' ? NP_JSON_OBJ : NP_JSON_ARR;
    r->state = c == '{' ? S_KEY_OR_END : S_VALUE_OR_END;
    return NP_OK;
}

static np_status close_container(np_json_tok *t, np_json_reader *r, char c, np_error *err)
{
    char open = c == '}' ? '{' : '[';
    if (r->depth == 0 || r->stack[r->depth - 1] != open)
        return np_json_error(r, err, NP_ERR_JSON, NULL, "unexpected '%c'", c);
    r->depth--;
    r->p++;
    t->type = c == '}' ? NP_JSON_OBJ_END : NP_JSON_ARR_END;
    r->state = r->depth ? S_AFTER : S_DONE;
    return NP_OK;
}

/* A value where one is expected (state S_VALUE or S_VALUE_OR_END). */
static np_status read_value(np_json_tok *t, np_json_reader *r, np_error *err)
{
    char c = *r->p;
    if (c == '{' || c == '[')
        return push(t, r, c, err);
    np_status st = NP_OK;
    if (c == '"') {
        t->type = NP_JSON_STR;
        st = read_string(t, r, err);
    } else if (c == 't' && lit(r, "true")) {
        t->type = NP_JSON_TRUE;
    } else if (c == 'f' && lit(r, "false")) {
        t->type = NP_JSON_FALSE;
    } else if (c == 'n' && lit(r, "null")) {
        t->type = NP_JSON_NULL;
    } else {
        t->type = NP_JSON_NUM;
        st = read_number(t, r, err);
    }
    r->state = r->depth ? S_AFTER : S_DONE;
    return st;
}

static np_status read_key(np_json_tok *t, np_json_reader *r, np_error *err)
{
    if (*r->p != '"')
        return np_json_error(r, err, NP_ERR_JSON, NULL, "expected a key (a string in quotes)");
    t->type = NP_JSON_KEY;
    np_status st = read_string(t, r, err);
    if (st)
        return st;
    skip_ws(r);
    if (r->p >= r->end || *r->p != ':')
        return np_json_error(r, err, NP_ERR_JSON, NULL, "expected ':' after a key");
    r->p++;
    r->state = S_VALUE;
    return NP_OK;
}

static np_status next_token(np_json_tok *t, np_json_reader *r, np_error *err)
{
    skip_ws(r);
    if (r->state == S_DONE) {
        if (r->p < r->end)
            return np_json_error(r, err, NP_ERR_JSON, NULL, "text after the end of the document");
        t->type = NP_JSON_END;
        return NP_OK;
    }
    if (r->p >= r->end)
        return np_json_error(r, err, NP_ERR_JSON, NULL,
                             "unexpected end of file (the document is truncated)");
    r->last_tok = (size_t)(r->p - r->base);
    char c = *r->p;
    switch (r->state) {
    case S_AFTER:
        if (c == '}' || c == ']')
            return close_container(t, r, c, err);
        if (c != ',')
            return np_json_error(r, err, NP_ERR_JSON, NULL, "expected ',' or a closing bracket");
        r->p++;
        r->state = r->stack[r->depth - 1] == '{' ? S_KEY : S_VALUE;
        return next_token(t, r, err);
    case S_KEY_OR_END:
        if (c == '}')
            return close_container(t, r, c, err);
        return read_key(t, r, err);
    case S_KEY:
        return read_key(t, r, err);
    case S_VALUE_OR_END:
        if (c == ']')
            return close_container(t, r, c, err);
        return read_value(t, r, err);
    default:
        return read_value(t, r, err);
    }
}

np_status np_json_next(np_json_tok *t, np_json_reader *r, np_error *err)
{
    memset(t, 0, sizeof *t);
    np_status st = next_token(t, r, err);
    t->depth = r->depth;
    release_behind(r);
    return st;
}

np_status np_json_skip(np_json_reader *r, const np_json_tok *t, np_error *err)
{
    if (t->type != NP_JSON_OBJ && t->type != NP_JSON_ARR)
        return NP_OK;
    int target = t->depth - 1;
    np_json_tok u;
    do {
        np_status st = np_json_next(&u, r, err);
        if (st)
            return st;
        if (u.type == NP_JSON_END)
            return np_json_error(r, err, NP_ERR_JSON, NULL, "unexpected end of the document");
    } while (u.depth > target || (u.type != NP_JSON_OBJ_END && u.type != NP_JSON_ARR_END));
    return NP_OK;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static size_t put_utf8(char *dst, size_t cap, size_t n, unsigned cp)
{
    char b[4];
    size_t k;
    if (cp < 0x80) {
        b[0] = (char)cp;
        k = 1;
    } else if (cp < 0x800) {
        b[0] = (char)(0xC0 | (cp >> 6));
        b[1] = (char)(0x80 | (cp & 0x3F));
        k = 2;
    } else if (cp < 0x10000) {
        b[0] = (char)(0xE0 | (cp >> 12));
        b[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (char)(0x80 | (cp & 0x3F));
        k = 3;
    } else {
        b[0] = (char)(0xF0 | (cp >> 18));
        b[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[3] = (char)(0x80 | (cp & 0x3F));
        k = 4;
    }
    for (size_t i = 0; i < k; i++, n++)
        if (n + 1 < cap)
            dst[n] = b[i];
    return n;
}

/* The 4 hex digits at s; -1 when they are not. */
static long hex4(const char *s)
{
    long cp = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval(s[k]);
        if (h < 0)
            return -1;
        cp = cp * 16 + h;
    }
    return cp;
}

/* \uXXXX at t->s[*i] (the 'u'), with a following low surrogate joined;
 * *i left on the last digit read. NUL (a C string would end there: two
 * names would become one), lone surrogates and bad digits read as U+FFFD. */
static unsigned json_escape_u(const np_json_tok *t, size_t *i)
{
    long cp = hex4(t->s + *i + 1);
    *i += 4;
    if (cp >= 0xD800 && cp <= 0xDBFF && *i + 6 < t->len && t->s[*i + 1] == '\\' &&
        t->s[*i + 2] == 'u') {
        long lo = hex4(t->s + *i + 3);
        if (lo >= 0xDC00 && lo <= 0xDFFF) {
            *i += 6;
            return (unsigned)(0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00));
        }
    }
    return cp <= 0 || (cp >= 0xD800 && cp <= 0xDFFF) ? 0xFFFDu : (unsigned)cp;
}

size_t np_json_str(char *dst, size_t cap, const np_json_tok *t)
{
    size_t n = 0;
    for (size_t i = 0; i < t->len; i++) {
        char c = t->s[i];
        if (c == '\\' && i + 1 < t->len) {
            char e = t->s[++i];
            static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
            const char *f = strchr(from, e);
            if (e == 'u' && i + 4 < t->len) {
                n = put_utf8(dst, cap, n, json_escape_u(t, &i));
                continue;
            }
            c = f && e ? to[f - from] : e;
        }
        if (c == '\0') { /* a raw NUL byte: as \u0000 */
            n = put_utf8(dst, cap, n, 0xFFFDu);
            continue;
        }
        if (n + 1 < cap)
            dst[n] = c;
        n++;
    }
    if (cap)
        dst[n < cap ? n : cap - 1] = '\0';
    return n;
}

int np_json_is(const np_json_tok *t, const char *s)
{
    /* the first byte first: item fields are tried against a list of keys */
    if ((t->type != NP_JSON_KEY && t->type != NP_JSON_STR) || (t->len && t->s[0] != s[0]))
        return 0;
    size_t n = strlen(s);
    return t->len == n && memcmp(t->s, s, n) == 0;
}
