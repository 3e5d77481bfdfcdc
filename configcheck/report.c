/* configcheck/report.c - write a compare result as result.xlsx (summary sheet
 * plus one sheet per item) or as JSON. Text from a pack is somebody else's:
 * control characters are replaced and cells are cut to Excel's limit. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xlsxwriter.h>

#include "cc_internal.h"

#define CELL_MAX 32000 /* Excel allows 32767 characters per cell */

/* A copy of s fit for a cell: control characters -> '?', at most CELL_MAX
 * bytes, cut on a UTF-8 boundary; a text a spreadsheet would run as a
 * formula (=, +, -, @ first, not a number) gets a leading '. */
static char *cell_text(const char *s)
{
    size_t n = strlen(s), q = np_cell_is_formula_like(s) ? 1 : 0;
    if (n > CELL_MAX) {
        n = CELL_MAX;
        while (n && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
    }
    char *t = malloc(n + q + 1);
    if (!t)
        return NULL;
    if (q)
        t[0] = '\'';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        t[q + i] = (c < 0x20 && c != '\t' && c != '\n') || c == 0x7f ? '?' : (char)c;
    }
    t[q + n] = '\0';
    return t;
}

static lxw_error write_text(lxw_worksheet *ws, int row, int col, const char *s, lxw_format *f)
{
    char *t = cell_text(s);
    if (!t)
        return LXW_ERROR_MEMORY_MALLOC_FAILED;
    lxw_error e = worksheet_write_string(ws, (lxw_row_t)row, (lxw_col_t)col, t, f);
    free(t);
    return e;
}

/* ---- row sources ---------------------------------------------------------- */

static int next_mem(cc_rows *src, int item, np_cc_row *row)
{
    const np_cc_item *it = &src->r->items[item];
    if (src->pos[item] >= it->n_rows)
        return 0;
    *row = it->rows[src->pos[item]++];
    return 1;
}

void cc_rows_mem(cc_rows *src, const np_cc_result *r)
{
    memset(src, 0, sizeof *src);
    src->r = r;
    src->next = next_mem;
    for (int i = 0; i < NP_CC_ITEM_COUNT; i++)
        src->n[i] = r->items[i].n_rows;
}

static int next_file(cc_rows *src, int item, np_cc_row *row)
{
    FILE *f = src->f[item];
    cc_row_hdr h;
    if (fread(&h, sizeof h, 1, f) != 1)
        goto fail;
    size_t bl = h.blen == UINT32_MAX ? 0 : h.blen, cl = h.clen == UINT32_MAX ? 0 : h.clen;
    size_t need = (size_t)h.klen + bl + cl + 3;
    if (need > src->cap) {
        char *nb = realloc(src->buf, need);
        if (!nb)
            goto fail;
        src->buf = nb;
        src->cap = need;
    }
    char *k = src->buf, *b = k + h.klen + 1, *c = b + bl + 1;
    if (fread(k, 1, h.klen, f) != h.klen || fread(b, 1, bl, f) != bl || fread(c, 1, cl, f) != cl)
        goto fail;
    k[h.klen] = b[bl] = c[cl] = '\0';
    row->key = k;
    row->bench = h.blen == UINT32_MAX ? NULL : b;
    row->cmp = h.clen == UINT32_MAX ? NULL : c;
    row->level = (np_cc_level)(h.level < NP_CC_LEVEL_COUNT ? h.level : NP_CC_ERROR);
    if (src->demote[item] && row->level != NP_CC_PASS)
        row->level = NP_CC_INFO;
    return 1;
fail:
    src->failed = errno ? errno : EIO;
    return 0;
}

void cc_rows_files(cc_rows *src, FILE *const f[NP_CC_ITEM_COUNT],
                   const long long n[NP_CC_ITEM_COUNT], const int demote[NP_CC_ITEM_COUNT])
{
    memset(src, 0, sizeof *src);
    src->next = next_file;
    for (int i = 0; i < NP_CC_ITEM_COUNT; i++) {
        src->f[i] = f[i];
        src->n[i] = n[i];
        src->demote[i] = demote[i];
        rewind(f[i]);
    }
}

void cc_rows_fini(cc_rows *src)
{
    free(src->buf);
    src->buf = NULL;
}

/* Rows per item sheet by default: Excel's 1,048,576 rows less the header. */
#define SHEET_ROWS 1048575

/* One item's rows: sheet "name", then "name (2)", "name (3)", ... each
 * with the header, every row kept (never cut at Excel's row limit). */
static lxw_error write_item_sheets(lxw_workbook *wb, cc_rows *src, int item, const char *name,
                                   int per_sheet, lxw_format *head, lxw_format *const *lv)
{
    lxw_error e = LXW_NO_ERROR;
    int done = 0, part = 1, n_rows = (int)src->n[item];
    do {
        char sheet[40]; /* Excel allows 31 characters: 20 + " (65535)" */
        if (part == 1)
            snprintf(sheet, sizeof sheet, "%s", name);
        else
            snprintf(sheet, sizeof sheet, "%.20s (%d)", name, part & 0xffff);
        lxw_worksheet *ws = workbook_add_worksheet(wb, sheet);
        if (!ws)
            return LXW_ERROR_MEMORY_MALLOC_FAILED;
        worksheet_set_column(ws, 0, 0, 40, NULL);
        worksheet_set_column(ws, 1, 2, 36, NULL);
        worksheet_set_column(ws, 3, 3, 10, NULL);
        worksheet_freeze_panes(ws, 1, 0);
        int take = n_rows - done < per_sheet ? n_rows - done : per_sheet;
        if (take > 0)
            worksheet_autofilter(ws, 0, 0, (lxw_row_t)take, 3);
        static const char *const h[] = {"key", "bench", "cmp", "level"};
        for (int c = 0; c < 4 && !e; c++)
            e = worksheet_write_string(ws, 0, (lxw_col_t)c, h[c], head);
        for (int j = 0; j < take && !e; j++) {
            np_cc_row rw, *row = &rw;
            if (src->next(src, item, &rw) <= 0)
                return LXW_ERROR_CREATING_TMPFILE; /* a read error of the rows (src->failed) */
            int rr = j + 1;
            e = write_text(ws, rr, 0, row->key, NULL);
            if (!e)
                e = write_text(ws, rr, 1, row->bench ? row->bench : "(missing)", NULL);
            if (!e)
                e = write_text(ws, rr, 2, row->cmp ? row->cmp : "(missing)", NULL);
            if (!e)
                e = worksheet_write_string(ws, (lxw_row_t)rr, 3, np_cc_level_name(row->level),
                                           lv[row->level]);
        }
        done += take;
        part++;
    } while (done < n_rows && !e);
    return e;
}

np_status np_cc_write_xlsx(const np_cc_result *r, const char *path, np_error *err)
{
    return np_cc_write_xlsx_ex(r, path, 0, err);
}

np_status np_cc_write_xlsx_ex(const np_cc_result *r, const char *path, long rows_per_sheet,
                              np_error *err)
{
    cc_rows src;
    cc_rows_mem(&src, r);
    return cc_write_xlsx(&src, r, path, rows_per_sheet, err);
}

/* The folder of `path` (for libxlsxwriter's temporaries: nothing is written
 * outside the report's folder). */
static char *folder_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
}

np_status cc_write_xlsx(cc_rows *src, const np_cc_result *r, const char *path,
                        long rows_per_sheet, np_error *err)
{
    int per_sheet = rows_per_sheet > 0 && rows_per_sheet < SHEET_ROWS ? (int)rows_per_sheet
                                                                      : SHEET_ROWS;
    /* written under a unique temporary name, renamed when complete */
    np_out out;
    np_status st = np_out_begin(&out, path, NULL, err);
    if (st != NP_OK)
        return st;
    /* constant memory: rows are streamed to a temporary file as written,
     * so an item of millions of keys does not hold them all as cells */
    char *dir = folder_of(path);
    lxw_workbook_options wo = {.constant_memory = LXW_TRUE, .tmpdir = dir};
    lxw_workbook *wb = dir ? workbook_new_opt(out.tmp, &wo) : NULL;
    if (!wb) {
        free(dir);
        np_out_abort(&out);
        return np_error_set(err, NP_ERR_IO, path, NULL, "cannot create the workbook");
    }
    lxw_format *head = workbook_add_format(wb);
    format_set_bold(head);
    format_set_bottom(head, LXW_BORDER_THIN);
    lxw_format *lv[NP_CC_LEVEL_COUNT] = {NULL};
    static const lxw_color_t colors[] = {0xC6EFCE, 0xDDEBF7, 0xFFEB9C, 0xFFC7CE};
    _Static_assert(sizeof colors / sizeof colors[0] == NP_CC_LEVEL_COUNT, "a colour per level");
    for (int i = 0; i < NP_CC_LEVEL_COUNT; i++) {
        lv[i] = workbook_add_format(wb);
        format_set_bg_color(lv[i], colors[i]);
    }
    lxw_error e = LXW_NO_ERROR;
    lxw_worksheet *sum = workbook_add_worksheet(wb, "summary");
    if (!sum)
        e = LXW_ERROR_MEMORY_MALLOC_FAILED;
    if (!e) {
        worksheet_set_column(sum, 0, 0, 18, NULL);
        worksheet_set_column(sum, 1, 1, 12, NULL);
        worksheet_set_column(sum, 2, 2, 60, NULL);
        static const char *const h[] = {"item", "pass_check", "note"};
        for (int c = 0; c < 3 && !e; c++)
            e = worksheet_write_string(sum, 0, (lxw_col_t)c, h[c], head);
    }
    for (int i = 0; i < NP_CC_ITEM_COUNT && !e; i++) {
        const np_cc_item *it = &r->items[i];
        e = worksheet_write_string(sum, (lxw_row_t)(i + 1), 0, np_cc_item_name((np_cc_item_id)i), NULL);
        if (!e)
            e = worksheet_write_string(sum, (lxw_row_t)(i + 1), 1, np_cc_level_name(it->pass_check),
                                       lv[it->pass_check]);
        char split[160] = "";
        int n_rows = (int)src->n[i];
        if (n_rows > per_sheet)
            snprintf(split, sizeof split, "%s%d rows over %d sheets (%s, %s (2), ...: %d rows "
                     "a sheet)", it->note ? "; " : "", n_rows,
                     (n_rows + per_sheet - 1) / per_sheet, np_cc_item_name((np_cc_item_id)i),
                     np_cc_item_name((np_cc_item_id)i), per_sheet);
        if (!e && (it->note || split[0])) {
            size_t nl = (it->note ? strlen(it->note) : 0) + strlen(split) + 1;
            char *t = malloc(nl);
            if (t)
                snprintf(t, nl, "%s%s", it->note ? it->note : "", split);
            e = t ? write_text(sum, i + 1, 2, t, NULL) : LXW_ERROR_MEMORY_MALLOC_FAILED;
            free(t);
        }
    }
    for (int i = 0; i < NP_CC_ITEM_COUNT && !e; i++)
        e = write_item_sheets(wb, src, i, np_cc_item_name((np_cc_item_id)i), per_sheet, head, lv);
    errno = 0;
    lxw_error ce = workbook_close(wb);
    int close_errno = errno;
    free(dir);
    if (src->failed) {
        np_out_abort(&out);
        return np_error_set(err, NP_ERR_IO, path, NULL, "cannot read the rows back: %s",
                            strerror(src->failed));
    }
    if (e || ce) {
        np_out_abort(&out);
        return np_error_set(err, NP_ERR_IO, path, NULL, "cannot write the workbook: %s",
                            e ? lxw_strerror(e) : np_out_lib_reason(lxw_strerror(ce), close_errno));
    }
    return np_out_commit(&out, 0, err);
}

/* A JSON string (np_json_quote: valid JSON whatever the bytes). */
static void put_file(void *f, const char *bytes, size_t n)
{
    fwrite(bytes, 1, n, f);
}

static void put_json_str(FILE *f, const char *s)
{
    if (!s) {
        fputs("null", f);
        return;
    }
    np_json_quote(put_file, f, s);
}

/* The json document, keys in sorted order as json_dump's JSON_SORT_KEYS
 * wrote them before. */
static void write_json_body(FILE *f, cc_rows *src, const np_cc_result *r)
{
    const char *order[NP_CC_ITEM_COUNT];
    int idx[NP_CC_ITEM_COUNT];
    for (int i = 0; i < NP_CC_ITEM_COUNT; i++) {
        int k = i;
        order[i] = np_cc_item_name((np_cc_item_id)i);
        idx[i] = i;
        for (; k > 0 && strcmp(order[k - 1], order[k]) > 0; k--) {
            const char *t = order[k];
            order[k] = order[k - 1], order[k - 1] = t;
            int ti = idx[k];
            idx[k] = idx[k - 1], idx[k - 1] = ti;
        }
    }
    fputs("{\n  \"bench\": ", f);
    put_json_str(f, r->bench_path ? r->bench_path : "");
    fputs(",\n  \"cmp\": ", f);
    put_json_str(f, r->cmp_path ? r->cmp_path : "");
    fputs(",\n  \"items\": {", f);
    for (int o = 0; o < NP_CC_ITEM_COUNT; o++) {
        const np_cc_item *it = &r->items[idx[o]];
        fprintf(f, "%s\n    ", o ? "," : "");
        put_json_str(f, order[o]);
        fputs(": {\n      \"note\": ", f);
        put_json_str(f, it->note);
        fprintf(f, ",\n      \"pass_check\": \"%s\",\n      \"rows\": [", np_cc_level_name(it->pass_check));
        for (long long j = 0; j < src->n[idx[o]]; j++) {
            np_cc_row rw, *row = &rw;
            if (src->next(src, idx[o], &rw) <= 0)
                return; /* src->failed */
            fprintf(f, "%s\n        {\n          \"bench\": ", j ? "," : "");
            put_json_str(f, row->bench);
            fputs(",\n          \"cmp\": ", f);
            put_json_str(f, row->cmp);
            fputs(",\n          \"key\": ", f);
            put_json_str(f, row->key);
            fprintf(f, ",\n          \"level\": \"%s\"\n        }", np_cc_level_name(row->level));
        }
        fprintf(f, "%s]\n    }", src->n[idx[o]] ? "\n      " : "");
    }
    fprintf(f, "\n  },\n  \"pass_check\": \"%s\",\n  \"summary\": {",
            np_cc_level_name(np_cc_result_level(r)));
    for (int o = 0; o < NP_CC_ITEM_COUNT; o++) {
        fprintf(f, "%s\n    ", o ? "," : "");
        put_json_str(f, order[o]);
        fprintf(f, ": \"%s\"", np_cc_level_name(r->items[idx[o]].pass_check));
    }
    fputs("\n  }\n}\n", f);
}

/* The json report, streamed row by row (an item of millions of keys is
 * never built as a document in memory) into a temporary renamed when
 * complete (np_out: a write error leaves nothing under the final name). */
np_status np_cc_write_json(const np_cc_result *r, const char *path, np_error *err)
{
    cc_rows src;
    cc_rows_mem(&src, r);
    return cc_write_json(&src, r, path, err);
}

np_status cc_write_json(cc_rows *src, const np_cc_result *r, const char *path, np_error *err)
{
    np_out out;
    np_status st = np_out_begin(&out, path, NULL, err);
    if (st != NP_OK)
        return st;
    FILE *f = np_out_stream(&out);
    if (!f) {
        int en = errno;
        np_out_abort(&out);
        return np_error_set(err, NP_ERR_IO, path, NULL, "cannot write the file: %s", strerror(en));
    }
    write_json_body(f, src, r);
    if (src->failed) {
        np_out_abort(&out);
        return np_error_set(err, NP_ERR_IO, path, NULL, "cannot read the rows back: %s",
                            strerror(src->failed));
    }
    return np_out_commit(&out, 0, err);
}
