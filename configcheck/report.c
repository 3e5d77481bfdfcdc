/* configcheck/report.c - write a compare result as result.xlsx (summary sheet
 * plus one sheet per item) or as JSON. Text from a pack is somebody else's:
 * control characters are replaced and cells are cut to Excel's limit. */
#include <errno.h>
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

np_status np_cc_write_xlsx(const np_cc_result *r, const char *path, np_error *err)
{
    /* written under a unique temporary name, renamed when complete */
    np_out out;
    np_status st = np_out_begin(&out, path, NULL, err);
    if (st != NP_OK)
        return st;
    lxw_workbook *wb = workbook_new(out.tmp);
    if (!wb) {
        np_out_abort(&out);
        return np_error_set(err, NP_ERR_IO, path, NULL, "cannot create the workbook");
    }
    lxw_format *head = workbook_add_format(wb);
    format_set_bold(head);
    format_set_bottom(head, LXW_BORDER_THIN);
    lxw_format *lv[NP_CC_LEVEL_COUNT] = {NULL};
    static const lxw_color_t colors[NP_CC_LEVEL_COUNT] = {0xC6EFCE, 0xDDEBF7, 0xFFEB9C, 0xFFC7CE};
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
        if (!e && it->note)
            e = write_text(sum, i + 1, 2, it->note, NULL);
    }
    for (int i = 0; i < NP_CC_ITEM_COUNT && !e; i++) {
        const np_cc_item *it = &r->items[i];
        lxw_worksheet *ws = workbook_add_worksheet(wb, np_cc_item_name((np_cc_item_id)i));
        if (!ws) {
            e = LXW_ERROR_MEMORY_MALLOC_FAILED;
            break;
        }
        worksheet_set_column(ws, 0, 0, 40, NULL);
        worksheet_set_column(ws, 1, 2, 36, NULL);
        worksheet_set_column(ws, 3, 3, 10, NULL);
        static const char *const h[] = {"key", "bench", "cmp", "level"};
        for (int c = 0; c < 4 && !e; c++)
            e = worksheet_write_string(ws, 0, (lxw_col_t)c, h[c], head);
        worksheet_freeze_panes(ws, 1, 0);
        for (int j = 0; j < it->n_rows && !e; j++) {
            const np_cc_row *row = &it->rows[j];
            int rr = j + 1;
            if (rr > 1048575) /* Excel's row limit */
                break;
            e = write_text(ws, rr, 0, row->key, NULL);
            if (!e)
                e = write_text(ws, rr, 1, row->bench ? row->bench : "(missing)", NULL);
            if (!e)
                e = write_text(ws, rr, 2, row->cmp ? row->cmp : "(missing)", NULL);
            if (!e)
                e = worksheet_write_string(ws, (lxw_row_t)rr, 3, np_cc_level_name(row->level),
                                           lv[row->level]);
        }
        if (!e && it->n_rows > 0)
            worksheet_autofilter(ws, 0, 0, (lxw_row_t)(it->n_rows < 1048575 ? it->n_rows : 1048575), 3);
    }
    lxw_error ce = workbook_close(wb);
    if (e || ce) {
        np_out_abort(&out);
        return np_error_set(err, NP_ERR_IO, path, NULL, "cannot write the workbook: %s",
                            lxw_strerror(e ? e : ce));
    }
    return np_out_commit(&out, 0, err);
}

np_status np_cc_write_json(const np_cc_result *r, const char *path, np_error *err)
{
    json_t *doc = json_object(), *summary = json_object(), *items = json_object();
    int bad = !doc || !summary || !items;
    for (int i = 0; i < NP_CC_ITEM_COUNT && !bad; i++) {
        const np_cc_item *it = &r->items[i];
        const char *name = np_cc_item_name((np_cc_item_id)i);
        json_t *rows = json_array();
        for (int j = 0; j < it->n_rows && rows; j++) {
            const np_cc_row *row = &it->rows[j];
            json_t *o = json_pack("{s:s, s:o, s:o, s:s}", "key", row->key, "bench",
                                  row->bench ? json_string(row->bench) : json_null(), "cmp",
                                  row->cmp ? json_string(row->cmp) : json_null(), "level",
                                  np_cc_level_name(row->level));
            if (!o || json_array_append_new(rows, o))
                bad = 1;
        }
        json_t *o = json_pack("{s:s, s:o, s:o}", "pass_check", np_cc_level_name(it->pass_check),
                              "note", it->note ? json_string(it->note) : json_null(), "rows",
                              rows ? rows : json_array());
        if (!o || json_object_set_new(items, name, o) ||
            json_object_set_new(summary, name, json_string(np_cc_level_name(it->pass_check))))
            bad = 1;
    }
    if (!bad) {
        json_object_set_new(doc, "bench", json_string(r->bench_path ? r->bench_path : ""));
        json_object_set_new(doc, "cmp", json_string(r->cmp_path ? r->cmp_path : ""));
        json_object_set_new(doc, "pass_check", json_string(np_cc_level_name(np_cc_result_level(r))));
        json_object_set_new(doc, "summary", summary);
        json_object_set_new(doc, "items", items);
        summary = items = NULL;
    }
    np_status st = NP_OK;
    np_out out;
    if (bad)
        st = np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    else if ((st = np_out_begin(&out, path, NULL, err)) != NP_OK)
        ;
    else if (json_dumpfd(doc, out.fd, JSON_SORT_KEYS | JSON_INDENT(2)) != 0) {
        int en = errno;
        np_out_abort(&out);
        st = np_error_set(err, en == EFBIG || en == ENOSPC ? NP_ERR_NOSPACE : NP_ERR_IO, path,
                          NULL, "cannot write the file: %s", strerror(en));
    } else
        st = np_out_commit(&out, 0, err);
    json_decref(doc);
    json_decref(summary);
    json_decref(items);
    return st;
}
