/* cli/opts.h - option tables: one table per command drives its parsing and
 * its --help (libgit2's CLI does the same with its opts[]). An entry names
 * the option, its value, its help text, what kind of value it takes and
 * where in the command's argument struct the value goes; the help is the
 * table printed in order, a heading where the group changes. */
#ifndef NPROBE_CLI_OPTS_H
#define NPROBE_CLI_OPTS_H

#include <stddef.h>
#include <stdio.h>

typedef enum np_opt_kind {
    NP_OPT_HELP = 0, /* -h, --help: print the help, leave with exit 0 */
    NP_OPT_FLAG,     /* no value: int field set to 1 */
    NP_OPT_STR,      /* const char * field = the value */
    NP_OPT_CHOICE,   /* const char * field = the value, one of choices */
    NP_OPT_LONG,     /* long field in [lo, hi] */
    NP_OPT_DOUBLE,   /* double field, finite, >= lo and, when hi > lo, <= hi */
    NP_OPT_CHECKED,  /* const char * field = the value, accepted by check() */
    NP_OPT_INT,      /* int field in [lo, hi] */
    NP_OPT_POS,      /* a positional argument (name: its placeholder): const char *
                      * field = the next one not taken by an earlier NP_OPT_POS;
                      * help lists it only when it has help text */
    NP_OPT_APPEND,   /* a repeatable option: np_cli_list field, one item per use */
    NP_OPT_POS_LIST, /* the positional arguments after the NP_OPT_POS ones (name:
                      * their placeholder, "TRACE..."): np_cli_list field */
    NP_OPT_REST      /* "--": int field = the index in argv of what follows (the
                      * rest is not parsed); 0 when absent; arg names it in the
                      * error for a stray argument ("command") */
} np_opt_kind;

/* NP_OPT_APPEND's field: the command's array of cap items, n used. */
typedef struct np_cli_list {
    const char **items;
    int n, cap;
} np_cli_list;

typedef struct np_cli_opt {
    const char *group;  /* heading before this option in the help, NULL: none */
    const char *name;   /* "--model", or "-b|--bench": a short name too */
    const char *arg;    /* "NAME" in the help, NULL for none */
    const char *help;   /* lines separated by '\n' */
    np_opt_kind kind;
    size_t off;         /* offsetof the field in the argument struct */
    long lo, hi;
    const char *const *choices;
    int n_choices;
    int (*check)(const char *opt, const char *value); /* 1 = bad (after its error) */
} np_cli_opt;

/* The table's help: before, the options (name and value in a 22-column
 * field, longer ones on their own line), after. */
void np_cli_opts_help(FILE *out, const char *before, const np_cli_opt *t, int n, const char *after);
/* Parse argv[1..] into args; 0, or an exit code + 1 to leave with (help
 * shown: NP_EXIT_OK + 1; a usage error, already reported: NP_EXIT_USAGE + 1).
 * cmd names the command in errors ("train"). */
int np_cli_opts_parse(const np_cli_opt *t, int n, void *args, const char *cmd, const char *before,
                      const char *after, int argc, char **argv);
/* Index of text in allowed, or -1 after "OPT: expected one of A, B, got 'X'". */
int np_cli_opt_choice(const char *opt, const char *text, const char *const *allowed, int n);

#endif
