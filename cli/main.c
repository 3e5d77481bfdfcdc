/* cli/main.c - `nprobe`: dispatch to a subcommand from the table. */
#include <stdio.h>
#include <string.h>

#include "cmd.h"

static const np_cmd commands[] = {
    {"train", np_cmd_train, "run the CPU training runtime (MLP, CNN, GPT) on cpu or npu-sim"},
    {"dump", np_cmd_dump, "run a training command with the probe on, writing HDF5 dumps"},
    {"compare", np_cmd_compare, "compare two dumps, name the culprit operation, write a report"},
    {"config_check", np_cmd_config_check, "pack an environment into a zip, or diff two packs"},
    {"ls", np_cmd_ls, "list the entries, calls or module tree of a dump"},
    {"show", np_cmd_show, "print one tensor's statistics and first values from a dump"},
    {"replay", np_cmd_replay, "recompute each dumped call in float64 and report its isolated error"},
    {"monitor", np_cmd_monitor, "read a run's monitor files and name the first anomaly across ranks"},
    {"triage", np_cmd_triage, "rerun a monitored anomaly's step to class it: transient, data, numerics, code"},
    {"promote", np_cmd_promote, "find the smallest set of ops to run in float32 that brings a run back"},
    {"profile", np_cmd_profile, "analyse torch.profiler traces (time by category, top ops), compare two"},
};
#define N_COMMANDS ((int)(sizeof commands / sizeof commands[0]))

static void usage(FILE *out)
{
    fprintf(out,
            "nprobe %s - numerical precision debugging for neural-network training\n"
            "\n"
            "usage: nprobe <command> [options]\n"
            "       nprobe <command> --help\n"
            "       nprobe --version\n"
            "\n"
            "commands:\n",
            NP_VERSION_STRING);
    for (int i = 0; i < N_COMMANDS; i++)
        fprintf(out, "  %-14s %s\n", commands[i].name, commands[i].desc);
    fprintf(out,
            "\n"
            "exit codes: 0 ok, 1 differences found, 2 usage or input error\n"
            "documentation: README.md and docs/ in the nprobe repository\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        np_cli_error("missing command (see 'nprobe --help')");
        return NP_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (np_cli_is_help(name) || strcmp(name, "help") == 0) {
        usage(stdout);
        return NP_EXIT_OK;
    }
    if (strcmp(name, "--version") == 0 || strcmp(name, "-V") == 0) {
        printf("nprobe %s\n", NP_VERSION_STRING);
        return NP_EXIT_OK;
    }
    for (int i = 0; i < N_COMMANDS; i++)
        if (strcmp(name, commands[i].name) == 0) {
            np_cli_clean_on_signal(); /* no hidden temporaries left by a signal */
            return commands[i].fn(argc - 1, argv + 1);
        }

    const char *names[N_COMMANDS];
    for (int i = 0; i < N_COMMANDS; i++)
        names[i] = commands[i].name;
    int near = np_closest_word(name, names, N_COMMANDS);
    if (near >= 0)
        np_cli_error("unknown command '%s'; did you mean '%s'? (see 'nprobe --help')",
                     name, names[near]);
    else
        np_cli_error("unknown command '%s' (see 'nprobe --help')", name);
    return NP_EXIT_USAGE;
}
