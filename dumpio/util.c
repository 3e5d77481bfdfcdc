/* dumpio/util.c - helpers the sources share: lists of found files and the
 * step{S}/rank{R} directory names. */
#define _DEFAULT_SOURCE /* d_type */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"

int dumpio_refs_push(dumpio_refs *l, const char *path, int step, int rank, np_dumpio_state st)
{
    size_t len = strlen(path) + 1;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        np_dumpio_ref *v = realloc(l->v, cap * sizeof *v);
        if (v)
            l->v = v;
        size_t *at = v ? realloc(l->at, cap * sizeof *at) : NULL;
        if (!at)
            return -1;
        l->at = at;
        l->cap = cap;
    }
    if (l->used + len > l->pool_cap) {
        size_t cap = l->pool_cap ? l->pool_cap * 2 : 4096;
        while (cap < l->used + len)
            cap *= 2;
        char *p = realloc(l->pool, cap);
        if (!p)
            return -1;
        l->pool = p;
        l->pool_cap = cap;
    }
    memcpy(l->pool + l->used, path, len);
    l->at[l->n] = l->used;
    l->used += len;
    np_dumpio_ref *r = &l->v[l->n++];
    memset(r, 0, sizeof *r);
    r->step = step;
    r->rank = rank;
    r->state = st;
    return 0;
}

void dumpio_refs_free(dumpio_refs *l)
{
    free(l->v);
    free(l->at);
    free(l->pool);
    memset(l, 0, sizeof *l);
}

static int ref_order(const void *a, const void *b)
{
    const np_dumpio_ref *x = a, *y = b;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    if (x->state != y->state)
        return x->state < y->state ? -1 : 1;
    return strcmp(x->path, y->path);
}

int dumpio_refs_finish(dumpio_refs *l, np_dumpio_ref **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    size_t head = l->n * sizeof(np_dumpio_ref);
    np_dumpio_ref *v = l->n ? malloc(head + l->used) : NULL;
    if (l->n && !v) {
        dumpio_refs_free(l);
        return -1;
    }
    if (v) {
        char *pool = (char *)v + head;
        memcpy(pool, l->pool, l->used);
        for (size_t i = 0; i < l->n; i++) {
            v[i] = l->v[i];
            v[i].path = pool + l->at[i];
        }
        if (l->n > 1)
            qsort(v, l->n, sizeof *v, ref_order);
    }
    *out = v;
    *n = l->n;
    dumpio_refs_free(l);
    return 0;
}

int dumpio_num_after(const char *name, const char *prefix)
{
    size_t l = strlen(prefix);
    if (strncmp(name, prefix, l) != 0 || !name[l])
        return -1;
    /* the number as writers spell it: "step01" beside "step1" was read as
     * step 1 twice, and compare paired whichever came first */
    if (name[l] == '0' && name[l + 1])
        return -1;
    long v = 0;
    for (const char *p = name + l; *p; p++) {
        if (*p < '0' || *p > '9' || v > 100000000)
            return -1;
        v = v * 10 + (*p - '0');
    }
    return (int)v;
}

void dumpio_tail_names(const char *path, char *last, char *prev, size_t cap)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0';
    char *s = strrchr(buf, '/');
    snprintf(last, cap, "%s", s ? s + 1 : buf);
    prev[0] = '\0';
    if (s) {
        *s = '\0';
        char *t = strrchr(buf, '/');
        snprintf(prev, cap, "%s", t ? t + 1 : buf);
    }
}

int dumpio_is_file(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

int dumpio_is_dir(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

int dumpio_each_numbered(const char *dir, const char *prefix,
                         int (*fn)(void *user, const char *path, int num), void *user)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *e;
    int rc = 0;
    char sub[4096];
    while (rc == 0 && (e = readdir(d))) {
        int num = dumpio_num_after(e->d_name, prefix);
        if (num < 0)
            continue;
        if ((size_t)snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name) >= sizeof sub)
            continue;
        if (e->d_type != DT_DIR && (e->d_type != DT_UNKNOWN && e->d_type != DT_LNK))
            continue;
        if (e->d_type != DT_DIR && !dumpio_is_dir(sub))
            continue;
        rc = fn(user, sub, num);
    }
    closedir(d);
    return rc;
}
