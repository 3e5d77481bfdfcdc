/* common/text.c - user data (leaf, call and module names come from the
 * program that was dumped) made safe for where it is shown: spreadsheet
 * cells that would run as formulas, terminals that would obey escapes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nprobe/common.h"

int np_cell_is_formula_like(const char *s)
{
    if (!s || !strchr("=+-@\t\r", s[0]) || !s[0])
        return 0;
    /* a number written as text ("-0.5", "-inf", "+1e-3") stays a number */
    char *end = NULL;
    strtod(s, &end);
    return !(end && end != s && *end == '\0');
}

const char *np_term_safe(char *dst, size_t cap, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = 0;
    if (!cap)
        return dst;
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        /* C0 controls, DEL, and the C1 controls U+0080..U+009F (UTF-8 C2 80..C2 9F) */
        int c1 = p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f;
        if (*p < 0x20 || *p == 0x7f || c1) {
            unsigned char v = c1 ? p[1] : *p;
            if (n + 4 >= cap)
                break;
            dst[n++] = '\\';
            dst[n++] = 'x';
            dst[n++] = hex[v >> 4];
            dst[n++] = hex[v & 15];
            p += c1;
            continue;
        }
        if (n + 1 >= cap)
            break;
        dst[n++] = (char)*p;
    }
    dst[n] = '\0';
    return dst;
}
