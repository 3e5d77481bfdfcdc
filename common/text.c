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

size_t np_utf8_seq(const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    if (u[0] < 0x80)
        return 1;
    size_t n = u[0] >= 0xC2 && u[0] <= 0xDF   ? 2
               : u[0] >= 0xE0 && u[0] <= 0xEF ? 3
               : u[0] >= 0xF0 && u[0] <= 0xF4 ? 4
                                               : 0;
    if (!n)
        return 0;
    /* the second byte's range excludes overlong forms, surrogates and
     * code points past U+10FFFF */
    unsigned lo = 0x80, hi = 0xBF;
    if (u[0] == 0xE0)
        lo = 0xA0;
    else if (u[0] == 0xED)
        hi = 0x9F;
    else if (u[0] == 0xF0)
        lo = 0x90;
    else if (u[0] == 0xF4)
        hi = 0x8F;
    if (u[1] < lo || u[1] > hi)
        return 0;
    for (size_t k = 2; k < n; k++)
        if ((u[k] & 0xC0) != 0x80)
            return 0;
    return n;
}

void np_json_quote(void (*put)(void *user, const char *bytes, size_t n), void *user,
                   const char *s)
{
    put(user, "\"", 1);
    const char *p = s ? s : "";
    while (*p) {
        const char *run = p;
        size_t k;
        for (;;) {
            unsigned char c = (unsigned char)*p;
            if (c < 0x20 || c == '"' || c == '\\' || c == 0x7f)
                break;
            if (c < 0x80) {
                p++;
                continue;
            }
            k = np_utf8_seq(p);
            if (!k || (k == 3 && c == 0xE2 && (unsigned char)p[1] == 0x80 &&
                       ((unsigned char)p[2] == 0xA8 || (unsigned char)p[2] == 0xA9)))
                break;
            p += k;
        }
        if (p > run)
            put(user, run, (size_t)(p - run));
        if (!*p)
            break;
        unsigned char c = (unsigned char)*p;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\', esc[1] = (char)c, esc[2] = '\0';
            p++;
        } else if (c < 0x80) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            p++;
        } else if (np_utf8_seq(p) == 3) { /* U+2028, U+2029 */
            snprintf(esc, sizeof esc, "\\u%04x", 0x2000 | (((unsigned char)p[2] & 0x3F)));
            p += 3;
        } else {
            snprintf(esc, sizeof esc, "\\ufffd");
            p++;
        }
        put(user, esc, strlen(esc));
    }
    put(user, "\"", 1);
}

const char *np_utf8_fix(char *dst, size_t cap, const char *s)
{
    size_t n = 0;
    if (!cap)
        return dst;
    for (const char *p = s ? s : ""; *p;) {
        size_t k = np_utf8_seq(p);
        const char *src = k ? p : "\xef\xbf\xbd";
        size_t len = k ? k : 3;
        if (n + len >= cap)
            break;
        memcpy(dst + n, src, len);
        n += len;
        p += k ? k : 1;
    }
    dst[n] = '\0';
    return dst;
}
