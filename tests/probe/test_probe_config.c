/* tests/probe/test_probe_config.c - the bad-config suite: every folder of
 * bad_configs/ holds a config.json and `expected` (message fragments, one
 * per line); loading the config must fail, nothing may be written, and the
 * message "file[:line:col]: key: text" must contain every fragment. Every
 * folder of good_configs/ holds a config.json that must load (msprobe's own
 * config.json files among them). Also checks that the shipped sample configs
 * (samples/configs, every .json) load cleanly.
 * usage: test_probe_config SOURCE_DIR */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "nprobe/probe.h"

static int dir_is_empty(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    closedir(d);
    return n == 0;
}

static void run_case(const char *cases, const char *name)
{
    char cfg[1400], exp[1400], msg[4000];
    snprintf(cfg, sizeof cfg, "%s/%s/config.json", cases, name);
    snprintf(exp, sizeof exp, "%s/%s/expected", cases, name);
    np_probe_config *c = NULL;
    np_error err;
    np_error_clear(&err);
    np_status st = np_probe_config_load(&c, cfg, &err);
    CHECK_MSG(st != NP_OK && c == NULL, "%s: config was accepted", name);
    CHECK_MSG(err.status == st, "%s: status mismatch", name);
    int n = snprintf(msg, sizeof msg, "%s", err.file);
    if (err.line > 0)
        n += snprintf(msg + n, sizeof msg - (size_t)n, ":%ld:%ld", err.line, err.column);
    snprintf(msg + n, sizeof msg - (size_t)n, ": %s: %s", err.key, err.text);
    FILE *f = fopen(exp, "r");
    CHECK_MSG(f != NULL, "%s: no expected file", name);
    char line[1000];
    int frags = 0;
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (!line[0])
            continue;
        frags++;
        CHECK_MSG(strstr(msg, line) != NULL, "%s: message \"%s\" lacks \"%s\"", name, msg, line);
    }
    if (f)
        fclose(f);
    CHECK_MSG(frags > 0, "%s: expected has no fragment", name);
    np_probe_config_free(c);
}

int main(int argc, char **argv)
{
    const char *src = argc > 1 ? argv[1] : getenv("NP_SOURCE_DIR");
    if (!src)
        CHECK_SKIP("no source dir");
    char tmp[] = "/tmp/np_probe_cfg_XXXXXX";
    if (!mkdtemp(tmp) || chdir(tmp) != 0)
        return 1;
    char cases[1024];
    snprintf(cases, sizeof cases, "%s/tests/probe/bad_configs", src);
    DIR *d = opendir(cases);
    CHECK_MSG(d != NULL, "cannot open %s", cases);
    int count = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        run_case(cases, e->d_name);
        count++;
    }
    if (d)
        closedir(d);
    CHECK_MSG(count >= 20, "only %d bad configs", count);

    /* The good configs load, and write nothing either. */
    char goods[1024];
    snprintf(goods, sizeof goods, "%s/tests/probe/good_configs", src);
    d = opendir(goods);
    CHECK_MSG(d != NULL, "cannot open %s", goods);
    int ng = 0;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[1400];
        snprintf(p, sizeof p, "%s/%s/config.json", goods, e->d_name);
        np_probe_config *c = NULL;
        np_error err;
        np_error_clear(&err);
        CHECK_MSG(np_probe_config_load(&c, p, &err) == NP_OK, "%s: %s: %s", e->d_name, err.key,
                  err.text);
        np_probe_config_free(c);
        ng++;
    }
    if (d)
        closedir(d);
    CHECK_MSG(ng >= 3, "only %d good configs", ng);
    CHECK_MSG(dir_is_empty(tmp), "a config wrote something into %s", tmp);

    /* The sample configs are valid. */
    char samples[1024];
    snprintf(samples, sizeof samples, "%s/samples/configs", src);
    d = opendir(samples);
    int ns = 0;
    while (d && (e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 5, ".json") != 0)
            continue;
        char p[1400];
        snprintf(p, sizeof p, "%s/%s", samples, e->d_name);
        np_probe_config *c = NULL;
        np_error err;
        np_error_clear(&err);
        CHECK_MSG(np_probe_config_load(&c, p, &err) == NP_OK, "%s: %s: %s", e->d_name, err.key,
                  err.text);
        np_probe_config_free(c);
        ns++;
    }
    if (d)
        closedir(d);
    CHECK_MSG(ns >= 4, "only %d sample configs", ns);
    fprintf(stderr, "%d bad configs, %d good configs, %d sample configs\n", count, ng, ns);
    rmdir(tmp);
    return check_report();
}
