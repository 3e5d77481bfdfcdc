/* tests/configcheck/cc_util.h - helpers for the config_check tests: a temp
 * folder, small files, running a shell command, reading zip members with
 * libzip (independently of the code under test). */
#ifndef NPROBE_TESTS_CC_UTIL_H
#define NPROBE_TESTS_CC_UTIL_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zip.h>

static char cc_tmp[512];

/* A fresh temp folder in cc_tmp, removed at exit unless KEEP_TMP is set. */
static void cc_rm_tmp(void)
{
    if (cc_tmp[0] && !getenv("KEEP_TMP")) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", cc_tmp);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", cc_tmp);
    }
}

static inline const char *cc_mktemp(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(cc_tmp, sizeof cc_tmp, "%s/nprobe-cc-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(cc_tmp)) {
        perror("mkdtemp");
        exit(1);
    }
    atexit(cc_rm_tmp);
    return cc_tmp;
}

/* cc_tmp/name into buf. */
static inline const char *cc_path(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", cc_tmp, name);
    return buf;
}

static inline void cc_write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

/* Whole file, NUL-terminated (malloc'd), or NULL. */
static inline char *cc_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[n] = '\0';
        if (len)
            *len = (size_t)n;
    }
    return b;
}

/* Run a shell command; its exit status (or -1). */
static inline int cc_sh(const char *cmd)
{
    int s = system(cmd);
    if (s == -1 || !WIFEXITED(s))
        return -1;
    return WEXITSTATUS(s);
}

/* First line of a command's stdout into buf; the exit status. */
static inline int cc_sh_out(const char *cmd, char *buf, size_t cap)
{
    buf[0] = '\0';
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    if (!fgets(buf, (int)cap, p))
        buf[0] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    int s = pclose(p);
    return WIFEXITED(s) ? WEXITSTATUS(s) : -1;
}

/* A member of a zip, read with libzip (malloc'd, NUL-terminated), or NULL. */
static inline char *cc_zip_member(const char *zip_path, const char *name, size_t *len)
{
    int e = 0;
    zip_t *za = zip_open(zip_path, ZIP_RDONLY, &e);
    if (!za)
        return NULL;
    zip_stat_t st;
    char *buf = NULL;
    if (zip_stat(za, name, 0, &st) == 0) {
        zip_file_t *zf = zip_fopen(za, name, 0);
        buf = malloc(st.size + 1);
        if (zf && buf && zip_fread(zf, buf, st.size) == (zip_int64_t)st.size) {
            buf[st.size] = '\0';
            if (len)
                *len = st.size;
        } else {
            free(buf);
            buf = NULL;
        }
        if (zf)
            zip_fclose(zf);
    }
    zip_discard(za);
    return buf;
}

/* A JSON member parsed (new reference), or NULL. */
static inline json_t *cc_zip_json(const char *zip_path, const char *name)
{
    char *s = cc_zip_member(zip_path, name, NULL);
    if (!s)
        return NULL;
    json_t *j = json_loads(s, 0, NULL);
    free(s);
    return j;
}

/* 1 if NP_PYTHON can import every module in `mods` (comma separated). */
static inline int cc_python_has(const char *mods)
{
    const char *py = getenv("NP_PYTHON");
    if (!py || !*py)
        return 0;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "'%s' -c 'import %s' >/dev/null 2>&1", py, mods);
    return cc_sh(cmd) == 0;
}

#endif
