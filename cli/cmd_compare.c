/* cli/cmd_compare.c - `nprobe compare`. (Skeleton: filled in by its issue.) */
#include <stdio.h>

#include "cmd.h"

static void help(FILE *out)
{
    fprintf(out, "usage: nprobe compare -b BENCH -c CMP -o OUTDIR [options]\n");
}

int np_cmd_compare(int argc, char **argv)
{
    if (argc < 2) {
        help(stderr);
        np_cli_error("compare: missing arguments (see 'nprobe compare --help')");
        return NP_EXIT_USAGE;
    }
    if (np_cli_is_help(argv[1])) {
        help(stdout);
        return NP_EXIT_OK;
    }
    np_cli_error("compare: not available in this build yet");
    return NP_EXIT_USAGE;
}
