/* cli/compare_reports.h - the reports of `nprobe compare` (compare_reports.c),
 * written by the one-process path (cmd_compare.c) and the MPI path
 * (compare_mpi.c): each pair's xlsx/csv/json, its block on stdout, the HTML
 * page. Its own file so that neither path calls back into the other. */
#ifndef NPROBE_CLI_COMPARE_REPORTS_H
#define NPROBE_CLI_COMPARE_REPORTS_H

#include <stddef.h>

#include "nprobe/compare.h"

/* The reports written: every path, and per pair the file name of its first
 * (where the HTML page sends readers for the full rows). */
typedef struct report_list {
    char **paths;
    size_t n, cap;
    const char **first;  /* per pair, borrowed from paths; NULL if none */
    size_t n_first;
} report_list;

/* Add path as a report of pair; -1 (said on stderr) when out of memory. */
int np_cli_report_list_add(report_list *l, size_t pair, const char *path);
void np_cli_report_list_free(report_list *l);
/* One pair's block on stdout: counts, notes, the first culprit. */
void np_cli_compare_print_pair(const np_cmp_pair *p);
/* The reports of pair `pair` into outdir (formats: bit 0 xlsx, 1 csv, 2
 * json), added to written, each path printed when print; the first failure
 * stops, reported once. */
np_status np_cli_compare_write_pair(const np_cmp_result *r, size_t pair, const char *outdir,
                                    int formats, long long now, int print, report_list *written);
/* OUTDIR/compare_report_{stamp}.html of the whole result, the pairs' first
 * reports as its links; its path printed unless quiet. 0, or -1 (said). */
int np_cli_compare_write_html(const np_cmp_result *r, const report_list *l, const char *outdir,
                              long long now, int quiet);

#endif
