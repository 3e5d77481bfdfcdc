/* configcheck/collect_data.c - dataset.json (size and SHA-256 of every data
 * file, folders walked in sorted order) and hyperparameters.json read from a
 * JSON object or key=value lines. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cc_internal.h"

#define MAX_DEPTH 32
#define MAX_FILES 100000
#define MAX_HYPER_BYTES ((long)16 << 20)

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static np_status add_path(json_t *files, const char *path, int depth, np_error *err)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return np_error_set(err, NP_ERR_IO, path, NULL, "cannot read: %s", strerror(errno));
    if (S_ISREG(st.st_mode)) {
        if (json_object_size(files) >= MAX_FILES)
            return np_error_set(err, NP_ERR_LIMIT, path, NULL, "more than %d data files", MAX_FILES);
        char hex[65];
        uint64_t size = 0;
        np_status s = np_cc_hash_file(hex, &size, path, err);
        if (s != NP_OK)
            return s;
        json_t *o = json_pack("{s:I, s:s}", "size", (json_int_t)size, "sha256", hex);
        if (!o || json_object_set_new(files, path, o))
            return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
        return NP_OK;
    }
    if (!S_ISDIR(st.st_mode))
        return np_error_set(err, NP_ERR_ARG, path, NULL, "expected a regular file or a folder");
    if (depth >= MAX_DEPTH)
        return np_error_set(err, NP_ERR_LIMIT, path, NULL, "folders nested deeper than %d", MAX_DEPTH);
    DIR *d = opendir(path);
    if (!d)
        return np_error_set(err, NP_ERR_IO, path, NULL, "cannot list: %s", strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    np_status s = NP_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (np_grow((void **)&names, &cap, n + 1, sizeof *names)) {
            s = np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
            break;
        }
        size_t len = strlen(path) + strlen(e->d_name) + 2;
        names[n] = malloc(len);
        if (!names[n]) {
            s = np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
            break;
        }
        size_t pl = strlen(path);
        snprintf(names[n], len, "%s%s%s", path, pl && path[pl - 1] == '/' ? "" : "/", e->d_name);
        n++;
    }
    closedir(d);
    if (s == NP_OK)
        qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n; i++) {
        if (s == NP_OK) {
            struct stat cs;
            if (stat(names[i], &cs) == 0 && (S_ISREG(cs.st_mode) || S_ISDIR(cs.st_mode)))
                s = add_path(files, names[i], depth + 1, err);
        }
        free(names[i]);
    }
    free(names);
    return s;
}

np_status np_cc_dataset_add(json_t *files, const char *path, np_error *err)
{
    return add_path(files, path, 0, err);
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

np_status np_cc_hyperparams_file(json_t **out, const char *path, np_error *err)
{
    *out = NULL;
    const char *why = NULL;
    FILE *f = np_fopen_regular(path, &why);
    if (!f)
        return np_error_set(err, NP_ERR_IO, path, NULL, "cannot read the hyperparameters: %s", why);
    char *buf = malloc((size_t)MAX_HYPER_BYTES + 1);
    size_t n = buf ? fread(buf, 1, (size_t)MAX_HYPER_BYTES + 1, f) : 0;
    fclose(f);
    if (!buf)
        return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    if (n > (size_t)MAX_HYPER_BYTES) {
        free(buf);
        return np_error_set(err, NP_ERR_LIMIT, path, NULL, "larger than 16 MiB");
    }
    buf[n] = '\0';
    char *start = buf;
    while (isspace((unsigned char)*start))
        start++;
    if (*start == '{') {
        json_error_t je;
        json_t *doc = json_loadb(buf, n, JSON_REJECT_DUPLICATES, &je);
        free(buf);
        if (!doc)
            return np_error_set_at(err, NP_ERR_JSON, path, je.line, je.column, NULL, "%s", je.text);
        *out = doc;
        return NP_OK;
    }
    json_t *doc = json_object();
    long line = 0;
    np_status s = NP_OK;
    for (char *p = buf; p && *p && s == NP_OK;) {
        char *nl = strchr(p, '\n');
        if (nl)
            *nl = '\0';
        line++;
        char *l = trim(p);
        p = nl ? nl + 1 : NULL;
        if (!*l || *l == '#')
            continue;
        char *eq = strchr(l, '=');
        if (!eq) {
            s = np_error_set_at(err, NP_ERR_CONFIG, path, line, 0, NULL,
                                "expected key=value (or a JSON object), got '%.80s'", l);
            break;
        }
        *eq = '\0';
        char *k = trim(l), *v = trim(eq + 1);
        if (!*k) {
            s = np_error_set_at(err, NP_ERR_CONFIG, path, line, 0, NULL, "empty key before '='");
            break;
        }
        json_t *jv = json_string(v);
        if (!jv) {
            s = np_error_set_at(err, NP_ERR_CONFIG, path, line, 0, k, "value is not valid UTF-8");
            break;
        }
        if (json_object_get(doc, k)) {
            json_decref(jv);
            s = np_error_set_at(err, NP_ERR_CONFIG, path, line, 0, k, "key given twice");
            break;
        }
        if (json_object_set_new(doc, k, jv))
            s = np_error_set_at(err, NP_ERR_CONFIG, path, line, 0, k, "key is not valid UTF-8");
    }
    free(buf);
    if (s != NP_OK) {
        json_decref(doc);
        return s;
    }
    *out = doc;
    return NP_OK;
}
