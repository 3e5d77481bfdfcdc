/* msprobe/layout.c - where msprobe puts a dump: {dump_path}/step{N}/ then
 * rank{R}/ (msprobe 26 in a distributed job), proc{PID}/ (26 outside one)
 * or rank/ (8.3), each folder holding dump.json, construct.json,
 * stack.json and, for the tensor task, dump_tensor_data/ *.pt. */
#define _DEFAULT_SOURCE 1 /* realpath */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "nprobe/msprobe.h"

#define DUMP_JSON "dump.json"

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int has_dump_json(const char *dir)
{
    char p[4200];
    if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, DUMP_JSON) >= sizeof p)
        return 0;
    return is_file(p);
}

/* "step12" -> 12; "rank3" -> 3; "rank" -> -1 (value 1); else 0. */
static int parse_num(const char *name, const char *prefix, long *out)
{
    size_t n = strlen(prefix);
    if (strncmp(name, prefix, n) != 0)
        return 0;
    *out = -1;
    if (name[n] == '\0')
        return 1;
    char *end = NULL;
    long v = strtol(name + n, &end, 10);
    if (name[n] < '0' || name[n] > '9' || *end || v < 0 || v > 1000000000L)
        return 0;
    *out = v;
    return 1;
}

static const char *base_name(const char *path, char *buf, size_t cap)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/')
        b--;
    snprintf(buf, cap, "%.*s", (int)(n - b), path + b);
    return buf;
}

typedef struct refs {
    np_msp_ref *v;
    size_t n, cap;
} refs;

static int add_ref(refs *r, const char *dir, int step)
{
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 8;
        void *v = realloc(r->v, cap * sizeof *r->v);
        if (!v)
            return -1;
        r->v = v;
        r->cap = cap;
    }
    np_msp_ref *f = &r->v[r->n++];
    memset(f, 0, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "%s", dir);
    f->step = step;
    f->rank = -1;
    f->pid = -1;
    char b[256];
    long v;
    base_name(dir, b, sizeof b);
    if (parse_num(b, "rank", &v))
        f->rank = (int)v;
    else if (parse_num(b, "proc", &v))
        f->pid = v;
    return 0;
}

/* The rank/proc folders of a step folder. */
static int scan_step(refs *r, const char *dir, int step)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *de;
    int rc = 0;
    while (!rc && (de = readdir(d))) {
        long v;
        if (!parse_num(de->d_name, "rank", &v) && !parse_num(de->d_name, "proc", &v))
            continue;
        char sub[4096];
        if ((size_t)snprintf(sub, sizeof sub, "%s/%s", dir, de->d_name) >= sizeof sub)
            continue;
        if (has_dump_json(sub))
            rc = add_ref(r, sub, step);
    }
    closedir(d);
    return rc;
}

static int scan_root(refs *r, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *de;
    int rc = 0;
    while (!rc && (de = readdir(d))) {
        long v;
        if (!parse_num(de->d_name, "step", &v) || v < 0)
            continue;
        char sub[4096];
        if ((size_t)snprintf(sub, sizeof sub, "%s/%s", dir, de->d_name) >= sizeof sub)
            continue;
        rc = scan_step(r, sub, (int)v);
    }
    closedir(d);
    return rc;
}

static int step_of_dir(const char *dir)
{
    char b[256];
    long v;
    return parse_num(base_name(dir, b, sizeof b), "step", &v) ? (int)v : -1;
}

static int cmp_ref(const void *a, const void *b)
{
    const np_msp_ref *x = a, *y = b;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    return strcmp(x->dir, y->dir);
}

static void parent_dir(char *out, size_t cap, const char *path)
{
    snprintf(out, cap, "%s", path);
    char *s = strrchr(out, '/');
    if (s && s != out)
        *s = '\0';
    else if (s)
        s[1] = '\0';
    else
        snprintf(out, cap, ".");
}

np_status np_msp_find(np_msp_ref **out, size_t *n, const char *path, np_error *err)
{
    *out = NULL;
    *n = 0;
    refs r = {0};
    int rc = 0;
    char dir[4096], up[4096];
    if (is_file(path)) {
        parent_dir(dir, sizeof dir, path);
        parent_dir(up, sizeof up, dir);
        rc = add_ref(&r, dir, step_of_dir(up));
    } else if (!is_dir(path)) {
        return np_error_set(err, NP_ERR_NOTFOUND, path, NULL, "no such file or folder");
    } else if (has_dump_json(path)) {
        parent_dir(up, sizeof up, path);
        rc = add_ref(&r, path, step_of_dir(up));
    } else {
        rc = scan_step(&r, path, step_of_dir(path));
        if (!rc && r.n == 0)
            rc = scan_root(&r, path);
    }
    if (rc) {
        free(r.v);
        return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    }
    if (r.n == 0)
        return np_error_set(err, NP_ERR_NOTFOUND, path, NULL,
                            "no msprobe dump found (expected step*/{rank*,proc*,rank}/dump.json)");
    qsort(r.v, r.n, sizeof *r.v, cmp_ref);
    *out = r.v;
    *n = r.n;
    return NP_OK;
}

int np_msp_is_dump(const char *path)
{
    np_msp_ref *v = NULL;
    size_t n = 0;
    np_status st = np_msp_find(&v, &n, path, NULL);
    free(v);
    if (st || n == 0)
        return 0;
    char b[256];
    /* a file given directly must be named like one */
    return !is_file(path) || strstr(base_name(path, b, sizeof b), ".json") != NULL;
}

/* A tensor file reached through a symlink (the file's or dump_tensor_data/'s)
 * must still lie in the dump's folder: a hostile dump could point it at any
 * file the reader may read. A file that does not exist is left to the open
 * (not found). */
static np_status inside_dump(const char *path, const char *dir, const char *data_name,
                             np_error *err)
{
    struct stat st;
    char sub[4200];
    snprintf(sub, sizeof sub, "%s/dump_tensor_data", dir);
    if (lstat(path, &st) != 0 || (!S_ISLNK(st.st_mode) && lstat(sub, &st) == 0 &&
                                  !S_ISLNK(st.st_mode)))
        return NP_OK;
    char *real = realpath(path, NULL), *root = realpath(dir, NULL);
    size_t n = root ? strlen(root) : 0;
    int inside = real && root && !strncmp(real, root, n) && real[n] == '/';
    np_status rc = NP_OK;
    if (real && root && !inside)
        rc = np_error_set(err, NP_ERR_FORMAT, path, data_name,
                          "a symlink leads outside the dump's folder %s (to %s): refused, not "
                          "read",
                          root, real);
    free(real);
    free(root);
    return rc;
}

np_status np_msp_data_path(char *out, size_t cap, const char *dir, const char *data_name,
                           np_error *err)
{
    if (!data_name[0] || strchr(data_name, '/') || strchr(data_name, '\\') ||
        !strcmp(data_name, ".") || !strcmp(data_name, ".."))
        return np_error_set(err, NP_ERR_FORMAT, dir, data_name,
                            "data_name \"%s\" would leave dump_tensor_data/ (expected a plain file "
                            "name)",
                            data_name);
    if ((size_t)snprintf(out, cap, "%s/dump_tensor_data/%s", dir, data_name) >= cap)
        return np_error_set(err, NP_ERR_LIMIT, dir, data_name, "path too long");
    return inside_dump(out, dir, data_name, err);
}
