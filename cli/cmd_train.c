/* cli/cmd_train.c - `nprobe train`. (Skeleton: filled in by its issue.) */
#include <stdio.h>

#include "cmd.h"

static void help(FILE *out)
{
    fprintf(out, "usage: nprobe train --model mlp|cnn|gpt [options]\n");
}

int np_cmd_train(int argc, char **argv)
{
    if (argc < 2) {
        help(stderr);
        np_cli_error("train: missing arguments (see 'nprobe train --help')");
        return NP_EXIT_USAGE;
    }
    if (np_cli_is_help(argv[1])) {
        help(stdout);
        return NP_EXIT_OK;
    }
    np_cli_error("train: not available in this build yet");
    return NP_EXIT_USAGE;
}
