/* cli/compare_summary.c - the stdout summary of a compare over many
 * step/rank pairs: totals, one line per failing pair (capped), the overall
 * first culprit in the same words as a single pair's, the report paths (a
 * count when there are many). One pair keeps its detailed block
 * (cmd_compare.c). */
#include <stdio.h>
#include <string.h>

#include "cmd.h"
#include "compare_summary.h"

static void failing_line(const np_cmp_pair *p)
{
    printf("  step %d rank %d: %zu error, %zu warning of %zu rows", p->step, p->rank,
           p->count_verdict[NP_VERDICT_ERROR], p->count_verdict[NP_VERDICT_WARNING], p->n_rows);
    if (p->n_culprits)
        np_cli_printf("; culprit %s", p->calls[p->culprits[0]].name);
    else if (p->bench_incomplete || p->cmp_incomplete)
        printf("; incomplete step");
    else if (p->dump_defects)
        printf("; dump defect (see the notes)");
    else if (p->replica_diffs)
        printf("; replicas differ (see the notes)");
    else
        printf("; no culprit");
    printf("\n");
}

static void first_culprit(const np_cmp_result *r)
{
    /* the focus pair: the first with a culprit (a pipeline's stages in one
     * process's order) */
    const np_cmp_pair *p = r->n_pairs ? &r->pairs[np_cmp_focus_pair(r)] : NULL;
    if (!p || !p->n_culprits) {
        printf("first culprit: none\n");
        return;
    }
    const np_cmp_call *c = &p->calls[p->culprits[0]];
    np_cli_printf("first culprit: %s", c->name);
    if (c->parent[0])
        np_cli_printf(" (in %s)", c->parent);
    if (c->callsite[0])
        np_cli_printf(" at %s", c->callsite);
    np_cli_printf(": %s\n  in step %d rank %d", c->reason, p->step, p->rank);
    if (c->worst_row >= 0 && p->rows[c->worst_row].cmp) {
        const np_cmp_row *w = &p->rows[c->worst_row];
        char why[256];
        np_cli_printf(", worst output %s: %s", w->cmp->name, np_cmp_row_verdict_text(why, sizeof why, w));
    }
    printf("\n");
}

void np_compare_summary(const np_cmp_result *r)
{
    size_t v[3] = {0, 0, 0}, rows = 0, failing = 0;
    int steps = 0, last_step = -1;
    const char *note = NULL;
    for (size_t i = 0; i < r->n_pairs; i++) {
        const np_cmp_pair *p = &r->pairs[i];
        for (int k = 0; k < 3; k++)
            v[k] += p->count_verdict[k];
        rows += p->n_rows;
        steps += i == 0 || p->step != last_step;
        last_step = p->step;
        failing += p->count_verdict[NP_VERDICT_ERROR] || p->bench_incomplete || p->cmp_incomplete ||
                   p->dump_defects || p->replica_diffs;
        if (!note && p->notes[0])
            note = p->notes;
    }
    printf("compared %zu step/rank pairs over %d steps (%s mode): %zu rows: %zu pass, %zu warning, "
           "%zu error\n",
           r->n_pairs, steps, np_cmp_mode_name(r->pairs[0].mode), rows, v[0], v[1], v[2]);
    if (note)
        np_cli_printf("  note (first of the pairs' notes): %s\n", note);
    printf("%zu of %zu pairs fail%s\n", failing, r->n_pairs, failing ? ":" : "");
    size_t shown = 0;
    for (size_t i = 0; i < r->n_pairs && shown < NP_SUMMARY_MAX_LINES; i++) {
        const np_cmp_pair *p = &r->pairs[i];
        if (p->count_verdict[NP_VERDICT_ERROR] || p->bench_incomplete || p->cmp_incomplete ||
            p->dump_defects || p->replica_diffs) {
            failing_line(p);
            shown++;
        }
    }
    if (failing > shown)
        printf("  ... and %zu more failing pairs (the HTML report charts every step)\n",
               failing - shown);
    first_culprit(r);
}

void np_compare_summary_paths(char *const *paths, size_t n, const char *outdir, const char *html)
{
    if (n <= NP_SUMMARY_MAX_PATHS) {
        for (size_t i = 0; i < n; i++)
            np_cli_report_line(paths[i]);
    } else {
        static const char *const ext[] = {".xlsx", ".csv", ".json"};
        for (int k = 0; k < 3; k++) {
            size_t c = 0;
            const char *one = NULL;
            for (size_t i = 0; i < n; i++) {
                size_t len = strlen(paths[i]), el = strlen(ext[k]);
                if (len >= el && !strcmp(paths[i] + len - el, ext[k])) {
                    c++;
                    one = one ? one : paths[i];
                }
            }
            if (c)
                np_cli_printf("  reports: %zu %s files in %s (one per step and rank, e.g. %s)\n", c,
                       ext[k] + 1, outdir, strrchr(one, '/') ? strrchr(one, '/') + 1 : one);
        }
    }
    if (html)
        np_cli_report_line(html);
}
