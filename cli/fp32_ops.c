/* cli/fp32_ops.c - the per-op precision overrides of `nprobe train`: the
 * environment's NPROBE_FP32_OPS (comma-separated) and the dump config's
 * "fp32_ops" list, joined into one comma-separated string for
 * np_ctx_opts.fp32_ops (docs/CONFIG.md, docs/RUNTIME.md). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd.h"
#include "nprobe/common.h"

static int append(char *buf, size_t cap, const char *s)
{
    size_t n = strlen(buf);
    if (n + strlen(s) + 2 > cap)
        return -1;
    snprintf(buf + n, cap - n, "%s%s", n ? "," : "", s);
    return 0;
}

int np_cli_fp32_ops(char *buf, size_t cap, const char *dump_config)
{
    buf[0] = '\0';
    const char *env = getenv("NPROBE_FP32_OPS");
    if (env && *env && append(buf, cap, env)) {
        np_cli_error("NPROBE_FP32_OPS: longer than %zu bytes", cap - 1);
        return NP_EXIT_USAGE;
    }
    if (!dump_config || !*dump_config)
        return NP_EXIT_OK;
    const char *why = NULL;
    int fd = np_open_regular(dump_config, &why);
    if (fd < 0)
        return NP_EXIT_OK; /* the probe's own load reports the file */
    json_error_t je;
    json_t *root = json_loadfd(fd, 0, &je);
    close(fd);
    json_t *list = root ? json_object_get(root, "fp32_ops") : NULL;
    size_t i;
    json_t *e;
    int code = NP_EXIT_OK;
    if (list && json_is_array(list))
        json_array_foreach(list, i, e) {
            if (json_is_string(e) && append(buf, cap, json_string_value(e))) {
                np_cli_error("%s: fp32_ops: longer than %zu bytes", dump_config, cap - 1);
                code = NP_EXIT_USAGE;
                break;
            }
        }
    json_decref(root);
    return code;
}
