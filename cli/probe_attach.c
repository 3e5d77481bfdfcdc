/* cli/probe_attach.c - the probe inside `nprobe train`. (Skeleton.) */
#include <stddef.h>

#include "cmd.h"

int np_cli_probe_attach(np_cli_probe **out, struct np_ctx *ctx,
                        const char *config_path, const np_cli_run_meta *meta)
{
    (void)ctx;
    (void)meta;
    *out = NULL;
    np_cli_error("%s: the probe is not available in this build yet", config_path);
    return NP_EXIT_USAGE;
}

int np_cli_probe_detach(np_cli_probe *p)
{
    (void)p;
    return NP_EXIT_OK;
}
