/* compare/html_out.c - the HTML report's output primitives (report_html.h):
 * raw markup, escaped text, printf for markup and numbers. Used by the page
 * (report_html.c) and its charts (report_html_chart.c), so neither calls
 * back into the other. */
#include <stdarg.h>
#include <stdio.h>

#include "report_html.h"

void cmp_html_raw(FILE *f, const char *s)
{
    fputs(s, f);
}

void cmp_html_text(FILE *f, const char *s)
{
    const char *run = s;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        const char *rep = c == '&'   ? "&amp;"
                          : c == '<' ? "&lt;"
                          : c == '>' ? "&gt;"
                          : c == '"' ? "&quot;"
                          : c == '\'' ? "&#39;"
                          : (c < 0x20 && c != '\t' && c != '\n') || c == 0x7f ? "&#xFFFD;"
                                                                              : NULL;
        if (!rep)
            continue;
        fwrite(run, 1, (size_t)(s - run), f);
        fputs(rep, f);
        run = s + 1;
    }
    fwrite(run, 1, (size_t)(s - run), f);
}

void cmp_html_printf(FILE *f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
}
