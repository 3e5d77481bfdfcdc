/* tests/compare/test_cmp_xlsx.c - the xlsx rows written after libxlsxwriter
 * (compare/xlsx_sheet.c) on crafted cells: XML special characters, leading
 * and trailing spaces, a control character, empty cells in the middle and
 * at the end, a string beyond Excel's 32767 characters, numbers at the
 * edges of the double range, NaN/inf, fills on alternate rows, rows over
 * several deflate batches and one sheet starting in the middle of the rows.
 * check_xlsx_sheet.py computes the expected cells independently (Python's
 * "%.16G") and reads the file with openpyxl; with the argument
 * "libreoffice" the same file is converted by LibreOffice instead (skipped,
 * 77, when it is not installed). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xlsxwriter.h>

#include "../../compare/xlsx_sheet.h"
#include "check.h"

#define ROWS_A 9000 /* sheet "a": rows 0 .. 8999 */
#define ROWS_B 1234 /* sheet "b": rows 9000 .. 10233 */

static char long_text[40000];

/* Row i's cells; the same rules are in check_xlsx_sheet.py. */
static const double nums[] = {0.1, -2.5, 1e-300, 1.7976931348623157e308, 5e-324,
                              123456789012345678.0, 0.30000000000000004, -0.0, 1.0 / 3.0,
                              NAN, INFINITY, -INFINITY, 65536.0};
static const char *const strs[] = {"a&b<c>d", " lead", "trail ", "", "plain", "ctl\x01x",
                                   "tab\tin", "\xc3\xa9t\xc3\xa9", "x > y & z"};

typedef struct styles {
    int red, yellow;
} styles;

static int row_fn(cmp_cells *c, size_t i, const void *user)
{
    const styles *S = user;
    int n = 0;
    cmp_cell num = {CELL_NUM, 0, NULL}, str = {CELL_STR, 0, NULL}, na = {CELL_NA, 0, NULL};
    c->c[n] = num;
    c->c[n++].num = (double)i;
    c->c[n] = str;
    c->c[n++].str = i == 77 ? long_text : strs[i % (sizeof strs / sizeof strs[0])];
    c->c[n] = num;
    c->c[n++].num = nums[i % (sizeof nums / sizeof nums[0])] * (i % 2 ? 1 : -1);
    c->c[n++] = na;
    c->c[n] = str;
    c->c[n++].str = "";            /* an empty cell in the middle */
    c->c[n] = num;
    c->c[n++].num = (double)i * 1e-7 + 1e-3;
    c->c[n] = str;
    c->c[n++].str = "";            /* empty at the end: dropped when not styled */
    c->n = n;
    return i % 3 == 1 ? S->red : i % 3 == 2 ? S->yellow : 0;
}

static int run_py(const char *py, const char *script, const char *a, const char *b)
{
    pid_t pid = fork();
    if (pid == 0) {
        execl(py, py, script, a, b, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "openpyxl";
    const char *py = getenv("NP_PYTHON");
    if (!py || access(py, X_OK) != 0)
        CHECK_SKIP("NP_PYTHON not set");
    /* the sanitized pass writes the same file in the openpyxl mode; what this
     * mode adds is LibreOffice's reading, no code of the tree (CI time) */
    if (!strcmp(mode, "libreoffice") && getenv("NP_SANITIZED") && !strcmp(getenv("NP_SANITIZED"), "1"))
        CHECK_SKIP("sanitized pass: the openpyxl mode writes the same file; LibreOffice runs in the plain pass");
    memset(long_text, 'L', sizeof long_text - 1);
    memcpy(long_text + 32760, "<&>", 3);   /* escaped across the cut at 32767 */
    char dir[] = "/tmp/np_cmp_xlsx_XXXXXX";
    if (!mkdtemp(dir))
        CHECK_SKIP("no temp dir");
    char path[300];
    snprintf(path, sizeof path, "%s/t.xlsx", dir);

    lxw_workbook_options o = {.constant_memory = LXW_TRUE, .tmpdir = NULL};
    lxw_workbook *wb = workbook_new_opt(path, &o);
    CHECK(wb != NULL);
    if (!wb)
        return check_report();
    lxw_format *red = workbook_add_format(wb), *yellow = workbook_add_format(wb);
    format_set_pattern(red, LXW_PATTERN_SOLID);
    format_set_bg_color(red, 0xFF0000);
    format_set_pattern(yellow, LXW_PATTERN_SOLID);
    format_set_bg_color(yellow, 0xFFFF00);
    styles S = {lxw_format_get_xf_index(red), lxw_format_get_xf_index(yellow)};
    static const char *const hdr[] = {"i", "text", "x", "na", "empty", "y", "end"};
    const char *names[] = {"first", "a", "b"};
    for (int s = 0; s < 3; s++) {
        lxw_worksheet *ws = workbook_add_worksheet(wb, names[s]);
        CHECK(ws != NULL);
        if (!ws)
            return check_report();
        if (s == 0) {
            worksheet_write_string(ws, 0, 0, "untouched", NULL);
            continue;
        }
        size_t n = s == 1 ? ROWS_A : ROWS_B;
        worksheet_freeze_panes(ws, 1, 0);
        worksheet_autofilter(ws, 0, 0, (lxw_row_t)n, 6);
        for (int k = 0; k < 7; k++)
            worksheet_write_string(ws, 0, (lxw_col_t)k, hdr[k], NULL);
    }
    CHECK_EQ_INT(workbook_close(wb), LXW_NO_ERROR);
    cmp_xlsx_sheet sh[2] = {{2, 0, ROWS_A, 7, row_fn, &S}, {3, ROWS_A, ROWS_B, 7, row_fn, &S}};
    np_error err = {0};
    CHECK_EQ_INT(cmp_xlsx_fill_sheets(path, path, sh, 2, &err), NP_OK);
    if (err.status)
        fprintf(stderr, "%s\n", err.text);

    /* a missing sheet part is an error naming it, and the file is unchanged */
    cmp_xlsx_sheet bad = {9, 0, 1, 7, row_fn, &S};
    np_error e2 = {0};
    CHECK_EQ_INT(cmp_xlsx_fill_sheets(path, path, &bad, 1, &e2), NP_ERR_FORMAT);
    CHECK_STREQ(e2.key, "xl/worksheets/sheet9.xml");

    char script[400];
    snprintf(script, sizeof script, "%s/check_xlsx_sheet.py", NP_CHECK_DIR);
    char rows[32];
    snprintf(rows, sizeof rows, "%d,%d,%s", ROWS_A, ROWS_B, mode);
    int code = run_py(py, script, path, rows);
    if (code == 77 && !strcmp(mode, "libreoffice"))
        CHECK_SKIP("LibreOffice is not installed");
    if (code == 77)
        CHECK_SKIP("openpyxl is not installed");
    CHECK_EQ_INT(code, 0);
    if (getenv("NP_KEEP"))
        return check_report();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (check_failures_ == 0 && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return check_report();
}
