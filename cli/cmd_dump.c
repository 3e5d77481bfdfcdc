/* cli/cmd_dump.c - `nprobe dump`. (Skeleton: filled in by its issue.) */
#include <stdio.h>

#include "cmd.h"

static void help(FILE *out)
{
    fprintf(out, "usage: nprobe dump -c CONFIG.json -- COMMAND [ARGS...]\n");
}

int np_cmd_dump(int argc, char **argv)
{
    if (argc < 2) {
        help(stderr);
        np_cli_error("dump: missing arguments (see 'nprobe dump --help')");
        return NP_EXIT_USAGE;
    }
    if (np_cli_is_help(argv[1])) {
        help(stdout);
        return NP_EXIT_OK;
    }
    np_cli_error("dump: not available in this build yet");
    return NP_EXIT_USAGE;
}
