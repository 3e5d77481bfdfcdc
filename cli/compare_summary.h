/* cli/compare_summary.h - what `nprobe compare` prints on stdout when it
 * compared many step/rank pairs: a summary that does not scroll for 100
 * steps (cli/compare_summary.c). */
#ifndef NPROBE_CLI_COMPARE_SUMMARY_H
#define NPROBE_CLI_COMPARE_SUMMARY_H

#include <stddef.h>

#include "nprobe/compare.h"

/* Failing pairs listed one line each before "... and N more". */
#define NP_SUMMARY_MAX_LINES 8
/* Report paths listed one by one up to this many; a count past it. */
#define NP_SUMMARY_MAX_PATHS 6

/* Totals, one line per failing pair (the first NP_SUMMARY_MAX_LINES, then a
 * count), then the overall first culprit ("first culprit: CALL ..." as for
 * one pair). */
void np_compare_summary(const np_cmp_result *r);
/* The reports written: paths[i] (n of them) one per line when few, else a
 * count per extension with the folder and the name pattern; then `html`
 * (may be NULL). */
void np_compare_summary_paths(char *const *paths, size_t n, const char *outdir, const char *html);

#endif
