/* probe/config.c - config.json: msprobe's keys (task, dump_path, rank, step,
 * level, per-task sections with scope/list/data_mode/summary_mode and
 * overflow_nums) plus nprobe's own (async_dump, queue_mb, compression, stack,
 * on_error). Everything is validated before anything is written; each
 * message names the file, the key, the value and what is allowed. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "probe_internal.h"

static const char *const task_names[] = {"statistics", "tensor", "md5", "overflow_check"};
static const char *const level_names[] = {"L0", "L1", "mix"};
/* enum order; a missing name fails the build */
_Static_assert(sizeof task_names / sizeof task_names[0] == NP_TASK_COUNT, "task_names");
_Static_assert(sizeof level_names / sizeof level_names[0] == NP_LEVEL_COUNT, "level_names");

const char *np_probe_task_name(np_probe_task t)
{
    return (unsigned)t < NP_TASK_COUNT ? task_names[t] : "unknown";
}

const char *np_probe_level_name(np_probe_level l)
{
    return (unsigned)l < NP_LEVEL_COUNT ? level_names[l] : "unknown";
}

/* msprobe's keys that nprobe accepts (type-checked) and ignores: extra_info,
 * seed, is_deterministic, enable_dataloader at the top level; tensor_list,
 * file_format, check_mode in the task sections (docs/CONFIG.md). */
static const char *const top_keys[] = {
    "task", "dump_path", "rank", "step", "level", "extra_info", "async_dump", "queue_mb",
    "compression", "stack", "on_error", "statistics", "tensor", "md5", "overflow_check",
    "seed", "is_deterministic", "enable_dataloader", "monitor", "fp32_ops",
};
#define N_TOP_KEYS ((int)(sizeof top_keys / sizeof top_keys[0]))
static const char *const stat_keys[] = {"scope", "list", "data_mode", "summary_mode",
                                        "tensor_list", "file_format", "check_mode"};
static const char *const tensor_keys[] = {"scope", "list", "data_mode",
                                          "tensor_list", "file_format", "check_mode"};
static const char *const overflow_keys[] = {"overflow_nums",
                                            "tensor_list", "file_format", "check_mode"};
#define N_KEYS(a) ((int)(sizeof a / sizeof a[0]))
static const char *const data_modes[] = {"all", "input", "output", "forward", "backward"};

typedef struct parse_ctx {
    const char *src;
    np_error *err;
} parse_ctx;

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static np_status bad(parse_ctx *pc, const char *key, const char *fmt, ...)
{
    char text[NP_ERROR_TEXT_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    return np_error_set(pc->err, NP_ERR_CONFIG, pc->src, key, "%s", text);
}

/* A compact rendering of a JSON value for messages. */
static void show_value(char *buf, size_t cap, const json_t *v)
{
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!s) {
        snprintf(buf, cap, "?");
        return;
    }
    if (strlen(s) > 80)
        snprintf(buf, cap, "%.77s...", s);
    else
        snprintf(buf, cap, "%s", s);
    free(s);
}

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "a list";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

static np_status wrong_type(parse_ctx *pc, const char *key, const json_t *v, const char *want)
{
    char val[128];
    show_value(val, sizeof val, v);
    return np_error_set(pc->err, NP_ERR_CONFIG, pc->src, key,
                        "expected %s, got %s %s", want, type_name(v), val);
}

static void join_words(char *buf, size_t cap, const char *const *words, int n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%s", i ? ", " : "", words[i]);
}

static np_status bad_choice(parse_ctx *pc, const char *key, const char *got,
                            const char *const *words, int n)
{
    char allowed[512];
    join_words(allowed, sizeof allowed, words, n);
    int near = np_closest_word(got, words, n);
    if (near >= 0)
        return np_error_set(pc->err, NP_ERR_CONFIG, pc->src, key,
                            "bad value \"%s\"; did you mean \"%s\"? (allowed: %s)", got,
                            words[near], allowed);
    return np_error_set(pc->err, NP_ERR_CONFIG, pc->src, key,
                        "bad value \"%s\" (allowed: %s)", got, allowed);
}

static np_status check_keys(parse_ctx *pc, const json_t *obj, const char *where,
                            const char *const *keys, int n)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)obj, k, v) {
        int found = 0;
        for (int i = 0; i < n && !found; i++)
            found = strcmp(k, keys[i]) == 0;
        if (found)
            continue;
        char allowed[512], full[300];
        join_words(allowed, sizeof allowed, keys, n);
        snprintf(full, sizeof full, "%s%s%s", where ? where : "", where ? "." : "", k);
        int near = np_closest_word(k, keys, n);
        if (near >= 0)
            return np_error_set(pc->err, NP_ERR_CONFIG, pc->src, full,
                                "unknown key \"%s\"; did you mean \"%s\"? (allowed: %s)", k,
                                keys[near], allowed);
        return np_error_set(pc->err, NP_ERR_CONFIG, pc->src, full,
                            "unknown key \"%s\" (allowed: %s)", k, allowed);
    }
    return NP_OK;
}

static np_status get_choice(parse_ctx *pc, const json_t *v, const char *key,
                            const char *const *words, int n, int *out)
{
    if (!json_is_string(v))
        return wrong_type(pc, key, v, "a string");
    const char *s = json_string_value(v);
    for (int i = 0; i < n; i++)
        if (strcmp(s, words[i]) == 0) {
            *out = i;
            return NP_OK;
        }
    return bad_choice(pc, key, s, words, n);
}

static np_status get_bool(parse_ctx *pc, const json_t *v, const char *key, int *out)
{
    if (!json_is_boolean(v))
        return wrong_type(pc, key, v, "true or false");
    *out = json_is_true(v);
    return NP_OK;
}

static np_status get_int(parse_ctx *pc, const json_t *v, const char *key, long lo, long hi,
                         long *out)
{
    if (!json_is_integer(v))
        return wrong_type(pc, key, v, "an integer");
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi) {
        char val[64], range[96];
        snprintf(val, sizeof val, "%lld", (long long)x);
        snprintf(range, sizeof range, "%ld..%ld", lo, hi);
        return bad(pc, key, "bad value %s (allowed: an integer in %s)", val, range);
    }
    *out = (long)x;
    return NP_OK;
}

/* Parse a whole non-negative int; -1 if not one. */
static long parse_nonneg(const char *s, const char **end)
{
    if (*s < '0' || *s > '9')
        return -1;
    long v = 0;
    while (*s >= '0' && *s <= '9') {
        v = v * 10 + (*s - '0');
        if (v > INT_MAX)
            return -1;
        s++;
    }
    *end = s;
    return v;
}

static np_status parse_ranks(parse_ctx *pc, np_probe_config *c, const json_t *v)
{
    if (!json_is_array(v))
        return wrong_type(pc, "rank", v, "a list of integers (empty: all ranks)");
    size_t n = json_array_size(v);
    c->ranks = calloc(n ? n : 1, sizeof *c->ranks);
    if (!c->ranks)
        return np_error_set(pc->err, NP_ERR_NOMEM, pc->src, "rank", NULL);
    for (size_t i = 0; i < n; i++) {
        long r = 0;
        np_status st = get_int(pc, json_array_get(v, i), "rank", 0, INT_MAX, &r);
        if (st)
            return st;
        c->ranks[c->n_ranks++] = (int)r;
    }
    return NP_OK;
}

static np_status parse_steps(parse_ctx *pc, np_probe_config *c, const json_t *v)
{
    if (!json_is_array(v))
        return wrong_type(pc, "step", v,
                          "a list of integers or \"a-b\" ranges (empty: all steps)");
    size_t n = json_array_size(v);
    c->steps = calloc(n ? n : 1, sizeof *c->steps);
    if (!c->steps)
        return np_error_set(pc->err, NP_ERR_NOMEM, pc->src, "step", NULL);
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(v, i);
        long a = 0, b = 0;
        if (json_is_integer(e)) {
            np_status st = get_int(pc, e, "step", 0, INT_MAX, &a);
            if (st)
                return st;
            b = a;
        } else if (json_is_string(e)) {
            const char *s = json_string_value(e), *end = s;
            a = parse_nonneg(s, &end);
            b = a;
            if (a >= 0 && *end == '-')
                b = parse_nonneg(end + 1, &end);
            if (a < 0 || b < 0 || *end)
                return bad(pc, "step",
                           "bad step range \"%s\" (allowed: a non-negative integer or \"a-b\" "
                           "with integers a <= b)%s", s, "");
            if (a > b)
                return bad(pc, "step", "bad step range \"%s\": the start exceeds the end%s",
                           s, " (allowed: \"a-b\" with a <= b)");
        } else {
            return wrong_type(pc, "step", e, "an integer or an \"a-b\" range string");
        }
        c->steps[c->n_steps][0] = (int)a;
        c->steps[c->n_steps][1] = (int)b;
        c->n_steps++;
    }
    return NP_OK;
}

static int all_chars(const char *s, const char *set, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strchr(set, s[i]))
            return 0;
    return n > 0;
}

#define IDENT_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"
#define DIGITS "0123456789"

/* 1: API call name "{Prefix}.{api}.{N}.{forward|backward}";
 * 2: module call name "Module.{path}.{Class}.{forward|backward}.{N}"; 0: neither. */
static int call_name_kind(const char *s)
{
    const char *dots[64];
    int nd = 0;
    for (const char *p = s; *p && nd < 64; p++)
        if (*p == '.')
            dots[nd++] = p;
    if (nd < 3)
        return 0;
    const char *last = dots[nd - 1] + 1;
    const char *prev = dots[nd - 2] + 1;
    size_t prev_len = (size_t)(dots[nd - 1] - prev);
    if (strncmp(s, "Module.", 7) == 0) {
        /* ... .{forward|backward}.{N} with a path and a class before */
        if (nd < 4 || !all_chars(last, DIGITS, strlen(last)))
            return 0;
        if (!((prev_len == 7 && strncmp(prev, "forward", 7) == 0) ||
              (prev_len == 8 && strncmp(prev, "backward", 8) == 0)))
            return 0;
        for (const char *p = s + 7; p < dots[nd - 2]; p++)
            if (!strchr(IDENT_CHARS ".", *p))
                return 0;
        return 2;
    }
    if (nd != 3)
        return 0;
    if (strcmp(last, "forward") != 0 && strcmp(last, "backward") != 0)
        return 0;
    if (!all_chars(prev, DIGITS, prev_len))
        return 0;
    if (!all_chars(s, IDENT_CHARS, (size_t)(dots[0] - s)))
        return 0;
    if (!all_chars(dots[0] + 1, IDENT_CHARS, (size_t)(dots[1] - dots[0] - 1)))
        return 0;
    return 1;
}

/* A valid call name (call_name_kind != 0) split into the name of what is
 * called (API "Prefix.api", module "Module.path.Class"), its call index and
 * its direction. */
static void split_call(const char *s, size_t *base_len, long *index, int *backward)
{
    const char *last = strrchr(s, '.');
    const char *p = last - 1;
    while (p > s && *p != '.')
        p--;
    if (strncmp(s, "Module.", 7) == 0) { /* base.{dir}.{N} */
        *base_len = (size_t)(p - s);
        *backward = strncmp(p + 1, "backward", 8) == 0;
        *index = strtol(last + 1, NULL, 10);
    } else { /* base.{N}.{dir} */
        *base_len = (size_t)(p - s);
        *backward = strcmp(last + 1, "backward") == 0;
        *index = strtol(p + 1, NULL, 10);
    }
}

/* [first, last] of the same API or module must be in execution order: the
 * calls of one API are counted up in forward, and a call's backward comes
 * after its forward. Refused: a forward range that counts down, a backward
 * before its own forward or before a forward of an earlier call. (Two
 * backwards are left alone: autograd's order between them is not fixed.) */
static np_status check_scope_order(parse_ctx *pc, const char *key, const char *first,
                                   const char *last)
{
    size_t b1, b2;
    long i1, i2;
    int bw1, bw2;
    split_call(first, &b1, &i1, &bw1);
    split_call(last, &b2, &i2, &bw2);
    if (b1 != b2 || strncmp(first, last, b1) != 0)
        return NP_OK;
    const char *why = NULL;
    if (!bw1 && !bw2 && i1 > i2)
        why = "forward calls of one API or module are counted up";
    else if (bw1 && !bw2 && i2 == i1)
        why = "a call's backward runs after its own forward";
    else if (bw1 && !bw2 && i2 < i1)
        why = "the backward of a call runs after its forward, which runs after the "
              "forward of every earlier call";
    if (!why)
        return NP_OK;
    return bad(pc, key,
               "bad range [\"%s\", \"%s\"]: the last call runs before the first (%s; "
               "allowed: [first, last] in execution order, e.g. [\"%s\", \"%s\"])",
               first, last, why, last, first);
}

static np_status parse_task_section(parse_ctx *pc, np_probe_config *c, const json_t *sec,
                                    const char *secname)
{
    char key[64];
    const json_t *v;
    if ((v = json_object_get(sec, "scope"))) {
        snprintf(key, sizeof key, "%s.scope", secname);
        if (!json_is_array(v))
            return wrong_type(pc, key, v, "a list of two call names [first, last] (or [])");
        size_t n = json_array_size(v);
        if (n != 0 && n != 2) {
            char val[128];
            show_value(val, sizeof val, v);
            return bad(pc, key, "bad value %s (allowed: [] or two call names [first, last])%s",
                       val, "");
        }
        for (size_t i = 0; i < n; i++) {
            const json_t *e = json_array_get(v, i);
            if (!json_is_string(e))
                return wrong_type(pc, key, e, "a call name string");
            const char *s = json_string_value(e);
            int kind = call_name_kind(s);
            if (!kind)
                return bad(pc, key,
                           "\"%s\" cannot be a call name (allowed: an API call "
                           "\"Prefix.api.N.forward|backward\" such as "
                           "\"Functional.linear.0.forward\", or a module call "
                           "\"Module.path.Class.forward|backward.N\")%s", s, "");
            if (kind == 2 && c->level == NP_LEVEL_L1)
                return bad(pc, key,
                           "\"%s\" is a module call but level L1 dumps API calls only "
                           "(allowed: API call names, or level L0/mix)%s", s, "");
            if (kind == 1 && c->level == NP_LEVEL_L0)
                return bad(pc, key,
                           "\"%s\" is an API call but level L0 dumps module calls only "
                           "(allowed: module call names, or level L1/mix)%s", s, "");
            c->scope[i] = strdup(s);
            if (!c->scope[i])
                return np_error_set(pc->err, NP_ERR_NOMEM, pc->src, key, NULL);
        }
        c->n_scope = (int)n;
        np_status st;
        if (n == 2 && (st = check_scope_order(pc, key, c->scope[0], c->scope[1])))
            return st;
    }
    if ((v = json_object_get(sec, "list"))) {
        snprintf(key, sizeof key, "%s.list", secname);
        if (!json_is_array(v))
            return wrong_type(pc, key, v, "a list of name substrings (or [])");
        size_t n = json_array_size(v);
        c->list = calloc(n ? n : 1, sizeof *c->list);
        if (!c->list)
            return np_error_set(pc->err, NP_ERR_NOMEM, pc->src, key, NULL);
        for (size_t i = 0; i < n; i++) {
            const json_t *e = json_array_get(v, i);
            if (!json_is_string(e))
                return wrong_type(pc, key, e, "a name substring (string)");
            if (!json_string_value(e)[0])
                return bad(pc, key, "an empty string would match every name%s%s",
                           " (allowed: non-empty substrings, or [] for everything)", "");
            c->list[c->n_list] = strdup(json_string_value(e));
            if (!c->list[c->n_list])
                return np_error_set(pc->err, NP_ERR_NOMEM, pc->src, key, NULL);
            c->n_list++;
        }
    }
    if ((v = json_object_get(sec, "data_mode"))) {
        snprintf(key, sizeof key, "%s.data_mode", secname);
        if (!json_is_array(v) || json_array_size(v) == 0)
            return wrong_type(pc, key, v,
                              "a non-empty list of all, input, output, forward, backward");
        unsigned roles = 0, dirs = 0;
        int all = 0;
        for (size_t i = 0; i < json_array_size(v); i++) {
            int m = 0;
            np_status st = get_choice(pc, json_array_get(v, i), key, data_modes, 5, &m);
            if (st)
                return st;
            if (m == 0) all = 1;
            if (m == 1) roles |= NP_DM_INPUT;
            if (m == 2) roles |= NP_DM_OUTPUT;
            if (m == 3) dirs |= NP_DM_FORWARD;
            if (m == 4) dirs |= NP_DM_BACKWARD;
        }
        c->dm_roles = all ? 0 : roles;
        c->dm_dirs = all ? 0 : dirs;
    }
    if ((v = json_object_get(sec, "summary_mode"))) {
        static const char *const modes[] = {"statistics", "md5"};
        int m = 0;
        snprintf(key, sizeof key, "%s.summary_mode", secname);
        np_status st = get_choice(pc, v, key, modes, 2, &m);
        if (st)
            return st;
        if (m == 1 && c->task == NP_TASK_STATISTICS)
            c->task = NP_TASK_MD5;
    }
    return NP_OK;
}

/* Can `path` be created and written? Checked on the closest existing
 * ancestor without creating anything. */
static np_status check_dump_path(parse_ctx *pc, const char *path)
{
    char buf[PATH_MAX];
    if (strlen(path) >= sizeof buf)
        return np_error_set(pc->err, NP_ERR_IO, pc->src, "dump_path",
                            "is %zu bytes long, more than the system's limit of %d (PATH_MAX)",
                            strlen(path), PATH_MAX - 1);
    for (const char *p = path; *p;) {
        size_t n = strcspn(p, "/");
        if (n > NAME_MAX)
            return np_error_set(pc->err, NP_ERR_IO, pc->src, "dump_path",
                                "has a component of %zu bytes, more than the limit of %d "
                                "(NAME_MAX)", n, NAME_MAX);
        p += n + (p[n] == '/');
    }
    snprintf(buf, sizeof buf, "%s", path);
    struct stat sb;
    for (;;) {
        struct stat lb;
        if (lstat(buf, &lb) == 0 && S_ISLNK(lb.st_mode) && stat(buf, &sb) != 0)
            return np_error_set(pc->err, NP_ERR_IO, pc->src, "dump_path",
                                "\"%s\": \"%s\" is a symbolic link to nothing (dangling); "
                                "remove it or point it at a directory", path, buf);
        if (stat(buf, &sb) == 0) {
            if (!S_ISDIR(sb.st_mode))
                return np_error_set(pc->err, NP_ERR_IO, pc->src, "dump_path",
                                    "\"%s\": \"%s\" exists and is not a directory (allowed: a "
                                    "directory that can be created and written)", path, buf);
            if (access(buf, W_OK | X_OK) != 0)
                return np_error_set(pc->err, NP_ERR_IO, pc->src, "dump_path",
                                    "\"%s\" is not writable: cannot write in \"%s\" (%s)", path,
                                    buf, strerror(errno));
            return NP_OK;
        }
        if (errno != ENOENT && errno != ENOTDIR)
            return np_error_set(pc->err, NP_ERR_IO, pc->src, "dump_path",
                                "\"%s\": cannot access \"%s\" (%s)", path, buf, strerror(errno));
        char *slash = strrchr(buf, '/');
        if (!slash)
            return NP_OK; /* unreachable: path is absolute */
        if (slash == buf) {
            buf[1] = '\0';
            if (strcmp(buf, "/") == 0 && stat(buf, &sb) == 0 && access(buf, W_OK) != 0)
                return np_error_set(pc->err, NP_ERR_IO, pc->src, "dump_path",
                                    "\"%s\" is not writable: cannot write in \"/\"", path);
            if (stat(buf, &sb) == 0)
                return NP_OK;
        }
        *slash = '\0';
    }
}

/* msprobe's task-section keys nprobe ignores: tensor_list (a list of API
 * names), file_format (a string: npy, bin), check_mode (a string: all,
 * aicore, atomic). Only their types are checked. */
static np_status check_msprobe_section_keys(parse_ctx *pc, const json_t *sec,
                                            const char *secname)
{
    char key[96];
    const json_t *v;
    if ((v = json_object_get(sec, "tensor_list"))) {
        snprintf(key, sizeof key, "%s.tensor_list", secname);
        if (!json_is_array(v))
            return wrong_type(pc, key, v, "a list of API names (or [])");
        for (size_t i = 0; i < json_array_size(v); i++)
            if (!json_is_string(json_array_get(v, i)))
                return wrong_type(pc, key, json_array_get(v, i), "an API name (string)");
    }
    static const char *const str_keys[] = {"file_format", "check_mode"};
    for (int i = 0; i < 2; i++)
        if ((v = json_object_get(sec, str_keys[i])) && !json_is_string(v)) {
            snprintf(key, sizeof key, "%s.%s", secname, str_keys[i]);
            return wrong_type(pc, key, v, "a string");
        }
    return NP_OK;
}

/* dump_path: absolute, without trailing slashes (relative ones are taken
 * from the current directory). */
static np_status parse_dump_path(parse_ctx *pc, np_probe_config *c, const json_t *root)
{
    const json_t *v;
    const char *dp = "./dump_path";
    if ((v = json_object_get(root, "dump_path"))) {
        if (!json_is_string(v))
            return wrong_type(pc, "dump_path", v, "a directory path string");
        dp = json_string_value(v);
        if (!dp[0])
            return bad(pc, "dump_path", "empty path%s%s",
                       " (allowed: a directory that can be created and written)", "");
    }
    if (dp[0] == '/') {
        c->dump_path = strdup(dp);
    } else {
        char cwd[4096];
        if (!getcwd(cwd, sizeof cwd))
            return np_error_set(pc->err, NP_ERR_IO, pc->src, "dump_path",
                                "cannot get the current directory: %s", strerror(errno));
        size_t n = strlen(cwd) + strlen(dp) + 2;
        c->dump_path = malloc(n);
        if (c->dump_path)
            snprintf(c->dump_path, n, "%s/%s", cwd, dp[0] == '.' && dp[1] == '/' ? dp + 2 : dp);
    }
    if (!c->dump_path)
        return np_error_set(pc->err, NP_ERR_NOMEM, pc->src, "dump_path", NULL);
    size_t dl = strlen(c->dump_path);
    while (dl > 1 && c->dump_path[dl - 1] == '/')
        c->dump_path[--dl] = '\0';
    return NP_OK;
}

/* The per-task sections, overflow_check's overflow_nums, and the section
 * of the configured task parsed into c. */
static np_status parse_sections(parse_ctx *pc, np_probe_config *c, const json_t *root)
{
    np_status st = NP_OK;
    const json_t *v;
    /* Per-task sections: every present one is checked; the task's applies. */
    static const char *const sections[] = {"statistics", "tensor", "md5", "overflow_check"};
    for (int s = 0; s < 4; s++) {
        const json_t *sec = json_object_get(root, sections[s]);
        if (!sec)
            continue;
        if (!json_is_object(sec))
            return wrong_type(pc, sections[s], sec, "an object");
        if (s == 0)
            st = check_keys(pc, sec, sections[s], stat_keys, N_KEYS(stat_keys));
        else if (s == 3)
            st = check_keys(pc, sec, sections[s], overflow_keys, N_KEYS(overflow_keys));
        else
            st = check_keys(pc, sec, sections[s], tensor_keys, N_KEYS(tensor_keys));
        if (st || (st = check_msprobe_section_keys(pc, sec, sections[s])))
            return st;
    }
    c->overflow_nums = 1;
    const json_t *ov = json_object_get(root, "overflow_check");
    if (ov && (v = json_object_get(ov, "overflow_nums"))) {
        if (!json_is_integer(v))
            return wrong_type(pc, "overflow_check.overflow_nums", v, "an integer");
        long n = (long)json_integer_value(v);
        if (n == 0 || n < -1) {
            char val[32];
            snprintf(val, sizeof val, "%ld", n);
            return bad(pc, "overflow_check.overflow_nums",
                       "bad value %s (allowed: -1 for no limit, or an integer >= 1)%s", val, "");
        }
        c->overflow_nums = n;
    }
    /* Which section applies: the task's own; md5 falls back to statistics. */
    const char *use = sections[c->task];
    if (c->task == NP_TASK_MD5 && !json_object_get(root, "md5"))
        use = "statistics";
    const json_t *sec = json_object_get(root, use);
    if (c->task != NP_TASK_OVERFLOW_CHECK && sec &&
        (st = parse_task_section(pc, c, sec, use)))
        return st;
    return NP_OK;
}

static np_status parse_root(parse_ctx *pc, np_probe_config *c, const json_t *root)
{
    np_status st;
    const json_t *v;
    if (!json_is_object(root))
        return wrong_type(pc, "", root, "a JSON object at the top level");
    if ((st = check_keys(pc, root, NULL, top_keys, N_TOP_KEYS)))
        return st;

    int i = 0;
    if (!(v = json_object_get(root, "task")))
        return bad(pc, "task", "missing key \"task\" (allowed: %s)%s",
                   "statistics, tensor, md5, overflow_check", "");
    if (json_is_string(v) && !strcmp(json_string_value(v), "monitor"))
        return bad(pc, "task", "\"monitor\" is the monitor's task, not a dump's (nprobe train "
                   "--dump-config attaches the monitor for it, nprobe.torch.TrainerMon in PyTorch; "
                   "for a dump beside it keep a dump task: statistics, tensor, md5, overflow_check, "
                   "and the \"monitor\" section in the same file)");
    if ((st = get_choice(pc, v, "task", task_names, NP_TASK_COUNT, &i)))
        return st;
    c->task = (np_probe_task)i;
    /* the monitor's section (docs/MONITOR.md), read by the monitor's loader */
    if ((v = json_object_get(root, "monitor")) && !json_is_object(v))
        return wrong_type(pc, "monitor", v, "an object (the monitor's section)");

    c->level = NP_LEVEL_L1;
    if ((v = json_object_get(root, "level"))) {
        if ((st = get_choice(pc, v, "level", level_names, NP_LEVEL_COUNT, &i)))
            return st;
        c->level = (np_probe_level)i;
    }

    if ((st = parse_dump_path(pc, c, root)))
        return st;

    if ((v = json_object_get(root, "rank")) && (st = parse_ranks(pc, c, v)))
        return st;
    if ((v = json_object_get(root, "step")) && (st = parse_steps(pc, c, v)))
        return st;

    /* msprobe's keys without a meaning here: checked, then ignored. */
    int b = 0;
    long seed = 0;
    if ((v = json_object_get(root, "extra_info")) && (st = get_bool(pc, v, "extra_info", &b)))
        return st;
    if ((v = json_object_get(root, "is_deterministic")) &&
        (st = get_bool(pc, v, "is_deterministic", &b)))
        return st;
    if ((v = json_object_get(root, "enable_dataloader")) &&
        (st = get_bool(pc, v, "enable_dataloader", &b)))
        return st;
    if ((v = json_object_get(root, "seed")) &&
        (st = get_int(pc, v, "seed", 0, 4294967295L, &seed)))
        return st;
    /* the host's per-op precision overrides (docs/CONFIG.md): checked here,
     * applied by the host (nprobe train, the PyTorch package) */
    if ((v = json_object_get(root, "fp32_ops"))) {
        size_t fi;
        json_t *e;
        if (!json_is_array(v))
            return bad(pc, "fp32_ops", "bad value (allowed: a list of API names, API calls or module paths)");
        json_array_foreach(v, fi, e) {
            if (!json_is_string(e) || !json_string_length(e) || strchr(json_string_value(e), ','))
                return bad(pc, "fp32_ops", "bad entry %zu (allowed: a non-empty string without a comma)", fi);
        }
    }
    c->stack = 1;
    if ((v = json_object_get(root, "stack")) && (st = get_bool(pc, v, "stack", &c->stack)))
        return st;
    if ((v = json_object_get(root, "async_dump")) &&
        (st = get_bool(pc, v, "async_dump", &c->async_dump)))
        return st;
    c->queue_mb = 64;
    if ((v = json_object_get(root, "queue_mb")) &&
        (st = get_int(pc, v, "queue_mb", 1, 65536, &c->queue_mb)))
        return st;
    if ((v = json_object_get(root, "compression"))) {
        static const char *const comp[] = {"none", "deflate", "deflate:1", "deflate:2",
                                           "deflate:3", "deflate:4", "deflate:5", "deflate:6",
                                           "deflate:7", "deflate:8", "deflate:9"};
        if ((st = get_choice(pc, v, "compression", comp, 11, &i)))
            return st;
        c->compression = i == 0 ? 0 : i == 1 ? 4 : i - 1;
    }
    if ((v = json_object_get(root, "on_error"))) {
        static const char *const modes[] = {"stop_dump", "stop_training"};
        if ((st = get_choice(pc, v, "on_error", modes, 2, &i)))
            return st;
        c->stop_training = i == 1;
    }

    if ((st = parse_sections(pc, c, root)))
        return st;
    return check_dump_path(pc, c->dump_path);
}

static np_status finish(np_probe_config **out, np_probe_config *c, json_t *root,
                        parse_ctx *pc)
{
    np_status st = parse_root(pc, c, root);
    json_decref(root);
    if (st) {
        np_probe_config_free(c);
        return st;
    }
    *out = c;
    return NP_OK;
}

static np_status json_fail(parse_ctx *pc, const json_error_t *je)
{
    np_status st = je->line > 0 || je->position > 0 ? NP_ERR_JSON : NP_ERR_IO;
    if (json_error_code(je) == json_error_cannot_open_file)
        st = NP_ERR_IO;
    if (st == NP_ERR_IO)
        return np_error_set(pc->err, st, pc->src, NULL, "cannot open the config: %s", je->text);
    return np_error_set_at(pc->err, st, pc->src, je->line, je->column, NULL,
                           "JSON syntax error: %s (line %d, column %d)", je->text, je->line,
                           je->column);
}

np_status np_probe_config_parse(np_probe_config **out, const char *json_text,
                                const char *source, np_error *err)
{
    *out = NULL;
    np_probe_config *c = calloc(1, sizeof *c);
    if (!c)
        return np_error_set(err, NP_ERR_NOMEM, source, NULL, NULL);
    snprintf(c->source, sizeof c->source, "%s", source ? source : "<string>");
    parse_ctx pc = {c->source, err};
    json_error_t je;
    json_t *root = json_loads(json_text ? json_text : "", JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        np_status st = json_fail(&pc, &je);
        np_probe_config_free(c);
        return st;
    }
    return finish(out, c, root, &pc);
}

np_status np_probe_config_load(np_probe_config **out, const char *path, np_error *err)
{
    *out = NULL;
    np_probe_config *c = calloc(1, sizeof *c);
    if (!c)
        return np_error_set(err, NP_ERR_NOMEM, path, NULL, NULL);
    snprintf(c->source, sizeof c->source, "%s", path);
    parse_ctx pc = {c->source, err};
    const char *why = NULL;
    FILE *f = np_fopen_regular(path, &why);
    if (!f) {
        np_status st = np_error_set(err, NP_ERR_IO, path, NULL, "cannot open the config: %s",
                                    why);
        np_probe_config_free(c);
        return st;
    }
    json_error_t je;
    json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &je);
    fclose(f);
    if (!root) {
        np_status st = json_fail(&pc, &je);
        np_probe_config_free(c);
        return st;
    }
    return finish(out, c, root, &pc);
}

void np_probe_config_free(np_probe_config *c)
{
    if (!c)
        return;
    free(c->dump_path);
    free(c->ranks);
    free(c->steps);
    for (int i = 0; i < 2; i++)
        free(c->scope[i]);
    for (int i = 0; i < c->n_list; i++)
        free(c->list[i]);
    free(c->list);
    free(c);
}

np_probe_config *np_probe_config_dup(const np_probe_config *src)
{
    np_probe_config *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    *c = *src;
    c->dump_path = NULL;
    c->ranks = NULL;
    c->steps = NULL;
    c->scope[0] = c->scope[1] = NULL;
    c->list = NULL;
    c->n_list = 0;
    int ok = (c->dump_path = strdup(src->dump_path)) != NULL;
    c->ranks = calloc((size_t)src->n_ranks + 1, sizeof *c->ranks);
    c->steps = calloc((size_t)src->n_steps + 1, sizeof *c->steps);
    c->list = calloc((size_t)src->n_list + 1, sizeof *c->list);
    ok = ok && c->ranks && c->steps && c->list;
    if (ok) {
        if (src->n_ranks)
            memcpy(c->ranks, src->ranks, (size_t)src->n_ranks * sizeof *c->ranks);
        if (src->n_steps)
            memcpy(c->steps, src->steps, (size_t)src->n_steps * sizeof *c->steps);
        for (int i = 0; i < src->n_scope && ok; i++)
            ok = (c->scope[i] = strdup(src->scope[i])) != NULL;
        for (int i = 0; i < src->n_list && ok; i++) {
            ok = (c->list[i] = strdup(src->list[i])) != NULL;
            c->n_list += ok;
        }
    }
    if (!ok) {
        np_probe_config_free(c);
        return NULL;
    }
    return c;
}

np_probe_task np_probe_config_task(const np_probe_config *cfg) { return cfg->task; }
np_probe_level np_probe_config_level(const np_probe_config *cfg) { return cfg->level; }
const char *np_probe_config_dump_path(const np_probe_config *cfg) { return cfg->dump_path; }
