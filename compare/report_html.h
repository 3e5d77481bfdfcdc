/* compare/report_html.h - pieces of the HTML report shared by its two
 * sources: report_html.c (page, headline, tree, rows) and
 * report_html_chart.c (the inline SVG charts). Private to np_compare. */
#ifndef NPROBE_COMPARE_REPORT_HTML_H
#define NPROBE_COMPARE_REPORT_HTML_H

#include <stdio.h>

#include "nprobe/compare.h"

/* Raw markup, escaped text (& < > " ' and control characters), printf for
 * markup and numbers only (never user data). */
void cmp_html_raw(FILE *f, const char *s);
void cmp_html_text(FILE *f, const char *s);
void cmp_html_printf(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* One step of the comparison, over its ranks. */
typedef struct cmp_html_step {
    int step;
    double worst;          /* worst row severity over the step's ranks (NaN: no rows) */
    size_t errors, warnings, rows;
    int verdict;           /* worst np_cmp_verdict */
    int has_loss;
    double loss_bench, loss_cmp; /* the loss output of the lowest rank, where dumped */
} cmp_html_step;

/* The across-steps chart: worst severity, error rows, loss; `first_fail`
 * is the index (into steps) of the first failing step, -1 if none. */
void cmp_html_steps_chart(FILE *f, const cmp_html_step *steps, int n, int first_fail);
/* The per-call severity of pair p along execution order, forward and
 * backward told apart, the error level, the culprits marked. */
void cmp_html_order_chart(FILE *f, const np_cmp_pair *p);

#endif
