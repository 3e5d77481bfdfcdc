/* cli/cmd_show.c - `nprobe show`. (Skeleton: filled in by its issue.) */
#include <stdio.h>

#include "cmd.h"

static void help(FILE *out)
{
    fprintf(out, "usage: nprobe show DUMP NAME\n");
}

int np_cmd_show(int argc, char **argv)
{
    if (argc < 2) {
        help(stderr);
        np_cli_error("show: missing arguments (see 'nprobe show --help')");
        return NP_EXIT_USAGE;
    }
    if (np_cli_is_help(argv[1])) {
        help(stdout);
        return NP_EXIT_OK;
    }
    np_cli_error("show: not available in this build yet");
    return NP_EXIT_USAGE;
}
