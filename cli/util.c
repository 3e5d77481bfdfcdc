/* cli/util.c - message and argument helpers shared by the subcommands. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd.h"

void np_cli_error(const char *fmt, ...)
{
    va_list ap;
    fputs("nprobe: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

void np_cli_report(const np_error *err)
{
    fputs("nprobe: ", stderr);
    if (err->file[0]) {
        fputs(err->file, stderr);
        if (err->line > 0) {
            fprintf(stderr, ":%ld", err->line);
            if (err->column > 0)
                fprintf(stderr, ":%ld", err->column);
        }
        fputs(": ", stderr);
    }
    if (err->key[0])
        fprintf(stderr, "%s: ", err->key);
    fputs(err->text[0] ? err->text : np_strerror(err->status), stderr);
    fputc('\n', stderr);
}

int np_cli_is_help(const char *arg)
{
    return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0;
}

int np_cli_parse_int(const char *opt, const char *text, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = text ? strtol(text, &end, 10) : 0;
    if (!text || !*text || *end || errno || v < lo || v > hi) {
        np_cli_error("%s: expected an integer in [%ld, %ld], got '%s'", opt, lo, hi,
                     text ? text : "");
        return -1;
    }
    *out = v;
    return 0;
}

int np_cli_stderr_is_tty(void)
{
    return isatty(2);
}

void np_cli_ignore_sigxfsz(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGXFSZ, &sa, NULL);
}
