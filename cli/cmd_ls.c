/* cli/cmd_ls.c - `nprobe ls`. (Skeleton: filled in by its issue.) */
#include <stdio.h>

#include "cmd.h"

static void help(FILE *out)
{
    fprintf(out, "usage: nprobe ls DUMP [--calls|--tree]\n");
}

int np_cmd_ls(int argc, char **argv)
{
    if (argc < 2) {
        help(stderr);
        np_cli_error("ls: missing arguments (see 'nprobe ls --help')");
        return NP_EXIT_USAGE;
    }
    if (np_cli_is_help(argv[1])) {
        help(stdout);
        return NP_EXIT_OK;
    }
    np_cli_error("ls: not available in this build yet");
    return NP_EXIT_USAGE;
}
