/* compare/util.c - the string arena, the string hash map and the name
 * helpers (backward/forward pairs, fuzzy keys) used across compare/. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---- arena --------------------------------------------------------------- */

struct cmp_arena_block {
    cmp_arena_block *next;
    size_t used, cap;
    max_align_t align_;
};

#define ARENA_BLOCK (1u << 20)

void *cmp_arena_alloc(cmp_arena *a, size_t n, size_t align)
{
    cmp_arena_block *b = a->head;
    size_t off = 0;
    if (b) {
        off = (b->used + align - 1) & ~(align - 1);
        if (off + n <= b->cap) {
            b->used = off + n;
            return (char *)(b + 1) + off;
        }
    }
    size_t cap = n > ARENA_BLOCK ? n : ARENA_BLOCK;
    b = malloc(sizeof *b + cap);
    if (!b)
        return NULL;
    b->next = a->head;
    b->cap = cap;
    b->used = n;
    a->head = b;
    return b + 1;
}

const char *cmp_arena_strdup(cmp_arena *a, const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = cmp_arena_alloc(a, n, 1);
    if (p)
        memcpy(p, s, n);
    return p;
}

const char *cmp_arena_printf(cmp_arena *a, const char *fmt, ...)
{
    char buf[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    const char *s = cmp_arena_strdup(a, buf);
    return s ? s : "";
}

void cmp_arena_free(cmp_arena *a)
{
    if (!a)
        return;
    cmp_arena_block *b = a->head;
    while (b) {
        cmp_arena_block *next = b->next;
        free(b);
        b = next;
    }
    a->head = NULL;
}

/* ---- names --------------------------------------------------------------- */

/* Position of the token `tok` (".tok." or ".tok" at the end) in s, or NULL. */
static const char *find_token(const char *s, const char *tok)
{
    size_t n = strlen(tok);
    for (const char *p = strchr(s, '.'); p; p = strchr(p + 1, '.'))
        if (strncmp(p + 1, tok, n) == 0 && (p[1 + n] == '.' || p[1 + n] == '\0'))
            return p + 1;
    return NULL;
}

int cmp_is_backward(const char *call)
{
    return find_token(call, "backward") != NULL || find_token(call, "parameters_grad") != NULL ||
           (strncmp(call, "Module.", 7) == 0 && !find_token(call, "forward"));
}

int cmp_side_is_grad(const np_cmp_side *s)
{
    return s && s->call && s->role && strcmp(s->role, "kwargs") != 0 && cmp_is_backward(s->call);
}

int cmp_forward_of(char *buf, size_t cap, const char *call)
{
    const char *p = find_token(call, "backward");
    if (!p)
        return 0;
    size_t pre = (size_t)(p - call);
    if (pre + strlen("forward") + strlen(p + 8) + 1 > cap)
        return 0;
    memcpy(buf, call, pre);
    strcpy(buf + pre, "forward");
    strcat(buf, p + 8);
    return 1;
}

static int all_digits(const char *s, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    return 1;
}

void cmp_fuzzy_key(char *buf, size_t cap, const char *leaf)
{
    snprintf(buf, cap, "%s", leaf);
    const char *dir = find_token(leaf, "forward");
    const char *b = find_token(leaf, "backward");
    if (!dir || (b && b < dir))
        dir = b;
    if (!dir)
        return;
    size_t dlen = (size_t)(strchr(dir, '.') ? (size_t)(strchr(dir, '.') - dir) : strlen(dir));
    if (strncmp(leaf, "Module.", 7) == 0) {
        /* Module.{path}.{Class}.{forward|backward}.{N}.... : drop ".N" after it */
        const char *n0 = dir + dlen;
        if (*n0 == '.') {
            const char *n1 = strchr(n0 + 1, '.');
            size_t nl = n1 ? (size_t)(n1 - n0 - 1) : strlen(n0 + 1);
            if (all_digits(n0 + 1, nl)) {
                size_t pre = (size_t)(n0 - leaf);
                snprintf(buf, cap, "%.*s%s", (int)pre, leaf, n1 ? n1 : "");
            }
        }
    } else {
        /* {Prefix}.{api}.{N}.{forward|backward}.... : drop ".N" before it */
        const char *end = dir - 1; /* the '.' before the direction */
        const char *start = end;
        while (start > leaf && start[-1] != '.')
            start--;
        if (start > leaf && all_digits(start, (size_t)(end - start))) {
            size_t pre = (size_t)(start - 1 - leaf);
            snprintf(buf, cap, "%.*s%s", (int)pre, leaf, end);
        }
    }
}

size_t cmp_forward_api_op(const np_cmp_call *c, const char **op)
{
    *op = NULL;
    if (c->backward || strcmp(c->kind, "api") != 0)
        return 0;
    const char *dot = strchr(c->name, '.');
    const char *end = dot ? strchr(dot + 1, '.') : NULL;
    if (!end)
        return 0;
    *op = dot + 1;
    return (size_t)(end - *op);
}

int cmp_op_is(const char *op, size_t n, const char *name)
{
    return op && strlen(name) == n && !strncmp(op, name, n);
}

int cmp_same_shape(const np_cmp_side *a, const np_cmp_side *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return 0;
    return 1;
}

void cmp_vnote(np_cmp_pair *p, const char *fmt, va_list ap)
{
    size_t len = strlen(p->notes);
    if (len + 2 >= sizeof p->notes)
        return;
    if (len) {
        p->notes[len++] = ' ';
        p->notes[len] = '\0';
    }
    vsnprintf(p->notes + len, sizeof p->notes - len, fmt, ap);
}

void cmp_note(np_cmp_pair *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cmp_vnote(p, fmt, ap);
    va_end(ap);
}
