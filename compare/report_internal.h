/* compare/report_internal.h - the cell model shared by the xlsx, csv and
 * json writers, so all three carry the same values in the same order. */
#ifndef NPROBE_COMPARE_REPORT_INTERNAL_H
#define NPROBE_COMPARE_REPORT_INTERNAL_H

#include "nprobe/compare.h"

enum { CELL_NA = 0, CELL_NUM, CELL_STR };

typedef struct cmp_cell {
    int kind;
    double num;
    const char *str;
} cmp_cell;

#define CMP_MAX_COLS 40
#define CMP_SCRATCH 4

typedef struct cmp_cells {
    cmp_cell c[CMP_MAX_COLS];
    int n;
    char scratch[CMP_SCRATCH][160];
    char reason[256];             /* the row's formatted reason */
} cmp_cells;

/* Fill the cells of one row in the column order of np_cmp_headers(p->mode). */
void cmp_row_cells(cmp_cells *out, const np_cmp_pair *p, const np_cmp_row *r);
/* The parent chain of a call, outermost first, joined by " > ", into buf. */
void cmp_module_chain(char *buf, size_t cap, const np_cmp_pair *p, int call_index);

/* Longest text of cmp_fmt_g17 / cmp_fmt_g, with the terminating NUL. */
#define CMP_G17_MAX 32
/* buf (CMP_G17_MAX bytes) = snprintf(buf, .., "%.17g", x), byte for byte,
 * but about ten times faster for the usual magnitudes. Returns the length. */
int cmp_fmt_g17(char *buf, double x);
/* The same for snprintf(buf, .., "%.*g", prec, x), prec in 1..17. */
int cmp_fmt_g(char *buf, double x, int prec);

/* The tolerances in effect (report.c): a dtype's levels as text, whether
 * they are the exact ones of integers, and the overrides given (or "none:
 * ..."). */
void cmp_tolerance_text(char *buf, size_t cap, const np_cmp_tolerance *t);
int cmp_is_exact_tolerance(const np_cmp_tolerance *t);
void cmp_overrides_text(char *buf, size_t cap, const np_cmp_pair *p);

/* A table report that is not a compare pair (nprobe replay's), written by
 * the same writers: a summary (key, value) and rows of cells. `row` fills
 * the cells of data row i and returns its fill: 0 none, 1 red (an error),
 * 2 yellow (a warning); it is called from several threads at once (xlsx). */
typedef struct cmp_table {
    const char *const *headers;
    int n_cols;
    size_t n_rows;
    int (*row)(cmp_cells *cells, size_t i, const void *user);
    const void *user;
    const char *const *sum_keys; /* the summary: n_sum keys and cells */
    const cmp_cell *sum_vals;
    int n_sum;
} cmp_table;

/* csv (report.c): header and rows as np_cmp_write_csv writes them. */
np_status cmp_table_write_csv(const cmp_table *t, const char *path, np_error *err);
/* json (report.c): {"summary": {key: value}, "headers": [...], "rows": [[...]]},
 * numbers as np_cmp_write_json writes them (N/A null, infinities "inf"). */
np_status cmp_table_write_json(const cmp_table *t, const char *path, np_error *err);
/* xlsx (report_xlsx.c): sheet "summary" (key, value) and sheet "rows"
 * (frozen header, autofilter, fills), the rows spliced in as compare's. */
np_status cmp_table_write_xlsx(const cmp_table *t, const char *path, np_error *err);

#endif
