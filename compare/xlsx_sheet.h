/* compare/xlsx_sheet.h - the data rows of large xlsx sheets, written after
 * libxlsxwriter closed the workbook (compare/xlsx_sheet.c): libxlsxwriter
 * writes the workbook with these sheets' header rows only (formats, frozen
 * pane, autofilter, column widths, charts), then their rows are spliced in,
 * produced and deflated in parallel. Private to np_compare. */
#ifndef NPROBE_COMPARE_XLSX_SHEET_H
#define NPROBE_COMPARE_XLSX_SHEET_H

#include <stddef.h>

#include "report_internal.h"

/* Fill `cells` with data row `i` of a sheet; returns the row's xf (style)
 * index, 0 for none. Called from several threads at once: it must only
 * read shared data. */
typedef int (*cmp_xlsx_row_fn)(cmp_cells *cells, size_t i, const void *user);

typedef struct cmp_xlsx_sheet {
    int number;           /* the part xl/worksheets/sheet{number}.xml */
    size_t first, n_rows; /* data rows first .. first + n_rows - 1, below the header */
    int n_cols;           /* columns, for the dimension */
    cmp_xlsx_row_fn row;
    const void *user;
} cmp_xlsx_sheet;

/* `tmp` is an xlsx that libxlsxwriter closed (the temporary of the report
 * `path`, the name the messages give), whose listed sheets hold
 * their header row only. Rewrites each listed sheet part with its data rows
 * after the header, cells as libxlsxwriter writes them (numbers as %.16G,
 * strings inline, an empty string as a blank cell) but without the optional
 * r attributes, and the dimension widened to the rows. The XML is produced
 * and deflated (level 1, raw deflate blocks joined by sync flushes) by the
 * OpenMP threads, blocks of rows at a time, and streamed into the archive by
 * libzip, which rewrites the file through a temporary file and a rename. */
np_status cmp_xlsx_fill_sheets(const char *tmp, const char *path, const cmp_xlsx_sheet *sheets,
                               int n, np_error *err);

#endif
