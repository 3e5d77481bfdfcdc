/* cli/cmd_config_check.c - `nprobe config_check`. (Skeleton: filled in by its issue.) */
#include <stdio.h>

#include "cmd.h"

static void help(FILE *out)
{
    fprintf(out, "usage: nprobe config_check pack|compare ...\n");
}

int np_cmd_config_check(int argc, char **argv)
{
    if (argc < 2) {
        help(stderr);
        np_cli_error("config_check: missing arguments (see 'nprobe config_check --help')");
        return NP_EXIT_USAGE;
    }
    if (np_cli_is_help(argv[1])) {
        help(stdout);
        return NP_EXIT_OK;
    }
    np_cli_error("config_check: not available in this build yet");
    return NP_EXIT_USAGE;
}
