/* cli/compare_reports.c - the reports of `nprobe compare` (compare_reports.h):
 * used by the one-process path (cmd_compare.c) and the MPI path
 * (compare_mpi.c), calling neither. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd.h"
#include "compare_reports.h"

void np_cli_compare_print_pair(const np_cmp_pair *p)
{
    printf("step %d rank %d (%s mode): %zu rows: %zu pass, %zu warning, %zu error "
           "(%zu exact, %zu fuzzy, %zu mapping, %zu cmp-only, %zu bench-only)\n",
           p->step, p->rank, np_cmp_mode_name(p->mode), p->n_rows,
           p->count_verdict[NP_VERDICT_PASS], p->count_verdict[NP_VERDICT_WARNING],
           p->count_verdict[NP_VERDICT_ERROR], p->count_match[NP_MATCH_EXACT],
           p->count_match[NP_MATCH_FUZZY], p->count_match[NP_MATCH_MAPPING],
           p->count_match[NP_MATCH_CMP_ONLY], p->count_match[NP_MATCH_BENCH_ONLY]);
    /* names are user data: no terminal escapes pass through (T) */
    char t1[4 * NP_FMT_NAME_LEN], t2[4 * NP_FMT_NAME_LEN], t3[4 * NP_FMT_SITE_LEN];
#define T(buf, s) np_term_safe(buf, sizeof buf, s)
    if (p->notes[0]) {
        char *nt = malloc(4 * strlen(p->notes) + 1);
        printf("  note: %s\n", nt ? np_term_safe(nt, 4 * strlen(p->notes) + 1, p->notes) : "");
        free(nt);
    }
    if (p->n_culprits) {
        const np_cmp_call *c = &p->calls[p->culprits[0]];
        printf("  first culprit: %s", T(t1, c->name));
        if (c->parent[0])
            printf(" (in %s)", T(t2, c->parent));
        if (c->callsite[0])
            printf(" at %s", T(t3, c->callsite));
        np_cli_printf(": %s\n", c->reason);
        if (c->worst_row >= 0 && p->rows[c->worst_row].cmp &&
            p->rows[c->worst_row].verdict != NP_VERDICT_PASS) {
            const np_cmp_row *r = &p->rows[c->worst_row];
            char why[256];
            printf("    worst output %s: %s\n", T(t1, r->cmp->name), np_cmp_row_reason(why, sizeof why, r));
        }
        for (size_t i = 1; i < p->n_culprits && i < 6; i++)
            printf("  culprit: %s\n", T(t1, p->calls[p->culprits[i]].name));
        if (p->n_culprits > 6)
            printf("  ... and %zu more culprits (see the report)\n", p->n_culprits - 6);
#undef T
    } else {
        printf("  first culprit: none\n");
    }
}


int np_cli_report_list_add(report_list *l, size_t pair, const char *path)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        char **v = realloc(l->paths, cap * sizeof *v);
        if (!v)
            goto oom;
        l->paths = v;
        l->cap = cap;
    }
    if (pair >= l->n_first) {
        const char **v = realloc(l->first, (pair + 1) * sizeof *v);
        if (!v)
            goto oom;
        for (size_t k = l->n_first; k <= pair; k++)
            v[k] = NULL;
        l->first = v;
        l->n_first = pair + 1;
    }
    if (!(l->paths[l->n] = strdup(path)))
        goto oom;
    if (!l->first[pair]) {
        const char *slash = strrchr(l->paths[l->n], '/');
        l->first[pair] = slash ? slash + 1 : l->paths[l->n];
    }
    l->n++;
    return 0;
oom:
    np_cli_error("compare: out of memory listing the reports");
    return -1;
}

void np_cli_report_list_free(report_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->paths[i]);
    free(l->paths);
    free(l->first);
}

/* The reports of one pair, under a name reserved among parallel compares into
 * `outdir` (common/outfile.c: a report of the same step and rank written in
 * the same second gets _2, _3, ...; nothing is overwritten). Each file is
 * written to a temporary and renamed when complete; the first failure stops,
 * reported once. */
np_status np_cli_compare_write_pair(const np_cmp_result *r, size_t pair, const char *outdir,
                                    int formats, long long now, int print, report_list *written)
{
    const np_cmp_pair *p = &r->pairs[pair];
    static const char *const ext[] = {"xlsx", "csv", "json"};
    const char *exts[3];
    int n_ext = 0;
    for (int k = 0; k < 3; k++)
        if (formats & (1 << k))
            exts[n_ext++] = ext[k];
    char base[256], name[300], path[4400];
    np_cmp_report_basename(base, sizeof base, p, now);
    np_error e = {0};
    np_status st = np_out_reserve(name, sizeof name, outdir, base, exts, n_ext, &e);
    int reserved = st == NP_OK;
    for (int k = 0; k < 3 && st == NP_OK; k++) {
        if (!(formats & (1 << k)))
            continue;
        snprintf(path, sizeof path, "%s/%s.%s", outdir, name, ext[k]);
        st = k == 0   ? np_cmp_write_xlsx(r, p, path, &e)
             : k == 1 ? np_cmp_write_csv(p, path, &e)
                      : np_cmp_write_json(r, p, path, &e);
        if (st == NP_OK && np_cli_report_list_add(written, pair, path) != 0)
            st = NP_ERR_NOMEM; /* said by report_list_add */
        else if (st == NP_OK && print)
            np_cli_report_line(path);
    }
    if (reserved)
        np_out_release(outdir, name);
    if (st != NP_OK && e.status != NP_OK)
        np_cli_report(&e);
    return st;
}

/* Reserve OUTDIR/compare_report_{YYYYmmddHHMMSS}.html (_2, _3, ... when
 * taken): name (release it with np_out_release) and the path. */
static int html_reserve(char *name, size_t ncap, char *path, size_t cap, const char *outdir,
                        long long now)
{
    time_t t = (time_t)now;
    struct tm tm;
    char ts[32], base[64];
    localtime_r(&t, &tm);
    strftime(ts, sizeof ts, "%Y%m%d%H%M%S", &tm);
    snprintf(base, sizeof base, "compare_report_%s", ts);
    static const char *const html_ext[] = {"html"};
    np_error e = {0};
    if (np_out_reserve(name, ncap, outdir, base, html_ext, 1, &e) != NP_OK) {
        np_cli_report(&e);
        return -1;
    }
    snprintf(path, cap, "%s/%s.html", outdir, name);
    return 0;
}

int np_cli_compare_write_html(const np_cmp_result *r, const report_list *l, const char *outdir,
                              long long now, int quiet)
{
    char name[128], path[4200];
    if (html_reserve(name, sizeof name, path, sizeof path, outdir, now) != 0)
        return -1;
    np_error e = {0};
    const char **hints = calloc(r->n_pairs + 1, sizeof *hints);
    for (size_t i = 0; hints && i < r->n_pairs && i < l->n_first; i++)
        hints[i] = l->first[i];
    np_status st = np_cmp_write_html(r, hints, path, &e);
    free(hints);
    np_out_release(outdir, name);
    if (st != NP_OK) {
        np_cli_report(&e);
        return -1;
    }
    if (!quiet)
        np_cli_report_line(path);
    return 0;
}

int np_cli_compare_html(const np_cmp_result *r, const np_cmp_pair_digest *d, size_t n,
                        const np_cmp_pair *focus, const char *focus_report, const char *outdir,
                        long long now, char *path, size_t cap)
{
    char name[128];
    if (html_reserve(name, sizeof name, path, cap, outdir, now) != 0)
        return -1;
    np_error e = {0};
    np_status st = np_cmp_write_html_digests(r, d, n, focus, focus_report, path, &e);
    np_out_release(outdir, name);
    if (st != NP_OK) {
        np_cli_report(&e);
        return -1;
    }
    return 0;
}

int np_cli_compare_reports(const np_cmp_result *r, const char *outdir, int formats, int quiet,
                           long long now, char *first, size_t cap)
{
    report_list written = {0};
    int rc = NP_EXIT_OK;
    for (size_t i = 0; i < r->n_pairs && rc == NP_EXIT_OK; i++) {
        if (!quiet)
            np_cli_compare_print_pair(&r->pairs[i]);
        if (np_cli_compare_write_pair(r, i, outdir, formats, now, !quiet, &written) != NP_OK)
            rc = NP_EXIT_USAGE;
    }
    if (first && cap)
        snprintf(first, cap, "%s", written.n_first && written.first[0] ? written.first[0] : "");
    np_cli_report_list_free(&written);
    return rc;
}
