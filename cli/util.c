/* cli/util.c - message and argument helpers shared by the subcommands. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd.h"
#include "nprobe/dumpio.h"

/* Messages quote names, paths and values that are user data: control
 * characters other than newline and tab go to the terminal as \xNN. */
static void put_safe(FILE *out, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        int c1 = p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f;
        if ((*p < 0x20 && *p != '\n' && *p != '\t') || *p == 0x7f || c1) {
            fprintf(out, "\\x%02x", c1 ? p[1] : *p);
            p += c1;
        } else {
            fputc(*p, out);
        }
    }
}

/* fmt formatted, then written through put_safe. */
static void vput_safe(FILE *out, const char *fmt, va_list ap)
{
    char small[1024];
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    char *big = n >= (int)sizeof small ? malloc((size_t)n + 1) : NULL;
    if (big)
        vsnprintf(big, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    put_safe(out, big ? big : small);
    free(big);
}

/* A message is gathered in memory and goes to stderr (unbuffered) in one
 * write, so the lines of processes sharing it (mpirun's ranks) never
 * interleave mid-line. Without memory it is written piece by piece. */
typedef struct msg {
    char *buf;
    size_t len;
    FILE *m;
} msg;

static FILE *msg_begin(msg *g)
{
    g->buf = NULL;
    g->len = 0;
    g->m = open_memstream(&g->buf, &g->len);
    return g->m ? g->m : stderr;
}

static void msg_end(msg *g)
{
    if (g->m && fclose(g->m) == 0 && g->buf)
        fwrite(g->buf, 1, g->len, stderr);
    free(g->buf);
}

void np_cli_error(const char *fmt, ...)
{
    va_list ap;
    msg g;
    FILE *out = msg_begin(&g);
    fputs("nprobe: ", out);
    va_start(ap, fmt);
    vput_safe(out, fmt, ap);
    va_end(ap);
    fputc('\n', out);
    msg_end(&g);
}

void np_cli_printf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vput_safe(stdout, fmt, ap);
    va_end(ap);
}

void np_cli_report_line(const char *path)
{
    size_t cap = 4 * strlen(path) + 1;
    char *t = malloc(cap);
    printf("  report: %s\n", t ? np_term_safe(t, cap, path) : "(out of memory)");
    free(t);
}

void np_cli_report(const np_error *err)
{
    msg g;
    FILE *out = msg_begin(&g);
    fputs("nprobe: ", out);
    if (err->file[0]) {
        put_safe(out, err->file);
        if (err->line > 0) {
            fprintf(out, ":%ld", err->line);
            if (err->column > 0)
                fprintf(out, ":%ld", err->column);
        }
        fputs(": ", out);
    }
    if (err->key[0]) {
        put_safe(out, err->key);
        fputs(": ", out);
    }
    put_safe(out, err->text[0] ? err->text : np_strerror(err->status));
    fputc('\n', out);
    msg_end(&g);
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

/* SIGINT/SIGTERM/SIGHUP: the temporaries and reservations of the reports
 * being written are removed, then the signal takes its default course (the
 * exit status says which). */
static void clean_and_die(int sig)
{
    np_out_remove_live();
    signal(sig, SIG_DFL);
    raise(sig);
}

void np_cli_clean_on_signal(void)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t k = 0; k < sizeof sigs / sizeof sigs[0]; k++) {
        struct sigaction old, sa;
        if (sigaction(sigs[k], NULL, &old) != 0 || old.sa_handler == SIG_IGN)
            continue; /* nohup's or the parent's ignore is kept */
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = clean_and_die;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[k], &sa, NULL);
    }
}

void np_cli_ignore_sigxfsz(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGXFSZ, &sa, NULL);
}

int np_cli_find_checked(np_dumpio_ref **refs, size_t *n, np_dumpio_checker **chk, const char *path)
{
    np_error err;
    np_error_clear(&err);
    *refs = NULL;
    *n = 0;
    *chk = NULL;
    if (np_dumpio_find(refs, n, path, &err)) {
        np_cli_report(&err);
        return NP_EXIT_USAGE;
    }
    if (np_dumpio_checker_start(chk, *refs, *n, &err)) {
        np_cli_report(&err);
        free(*refs);
        *refs = NULL;
        return NP_EXIT_USAGE;
    }
    return 0;
}
