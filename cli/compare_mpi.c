/* cli/compare_mpi.c - `mpirun -n P nprobe compare -b A -c B -o OUT`: the
 * (step, rank) pairs of the two dumps spread over the P processes (pair i
 * goes to process i mod P), each pair compared and its reports written
 * exactly as a single process writes them (same names: rank 0's clock is
 * broadcast); every process gets one record per pair (all-gathered), rank
 * 0 prints them in (step, rank) order and writes
 * OUT/compare_summary_{stamp}.json naming the first culprit across all
 * steps and ranks, and the process that compared the pair the HTML page
 * shows writes the page (docs/COMPARE.md, "Distributed"). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "cmd.h"
#include "nprobe/compare.h"
#include "nprobe/dumpio.h"

/* What rank 0 learns about one pair (fixed size: gathered as bytes). */
typedef struct pair_rec {
    int step, rank, rc;           /* rc: 0 same, 1 differences, 2 failed */
    int compared;                 /* 1 when the pair was compared */
    char mode[16];
    long long rows, pass, warning, error;
    long long seq;                /* first culprit's seq, -1 without one */
    char call[256];
    char reason[512];
    char issues[1024];
    int owner;                    /* the process that compared it */
    np_cmp_pair_digest dig;       /* what the HTML page needs (when compared) */
} pair_rec;

/* The one pair a process keeps whole for the HTML page: its first pair with
 * a culprit, else its first failing pair, else its first pair. The page's
 * focus (np_cmp_html_focus over all pairs) is then the kept pair of the
 * process that compared it. */
typedef struct kept_pair {
    np_cmp_result *r;
    char report[300];             /* the file name of its first report */
} kept_pair;

static int digest_fails(const np_cmp_pair_digest *d)
{
    return d->count_verdict[NP_VERDICT_ERROR] || d->n_culprits;
}

/* Keep r (pair rec) instead of what is kept when the page would rather show
 * it; returns 1 when r was taken. */
static int keep_pair(kept_pair *k, np_cmp_result *r, const pair_rec *rec, const char *report)
{
    const np_cmp_pair_digest *now = &rec->dig;
    np_cmp_pair_digest old;
    if (k->r)
        np_cmp_pair_digest_of(&old, &k->r->pairs[0]);
    int better = !k->r || (!old.n_culprits && now->n_culprits) ||
                 (!old.n_culprits && !digest_fails(&old) && digest_fails(now));
    if (!better)
        return 0;
    np_cmp_result_free(k->r);
    k->r = r;
    snprintf(k->report, sizeof k->report, "%s", report);
    return 1;
}

typedef struct pair_id {
    int step, rank;
    int sides;                    /* bit 0: on the bench side, bit 1: on the cmp side */
} pair_id;

static int cmp_id(const void *a, const void *b)
{
    const pair_id *x = a, *y = b;
    return x->step != y->step ? (x->step > y->step) - (x->step < y->step)
                              : (x->rank > y->rank) - (x->rank < y->rank);
}

/* --single-ref: the pairs are the cmp side's (step, rank); a bench file
 * (its one rank of a step) serves every cmp rank of its step, or stands
 * alone when the cmp side lacks the step. Returns the new count. */
static size_t single_ref_ids(pair_id *ids, size_t k)
{
    size_t u = 0;
    for (size_t i = 0; i < k; i++)
        if (ids[i].sides == 2)
            ids[u++] = ids[i];
    size_t n_cmp = u;
    for (size_t i = 0; i < k; i++) {
        if (ids[i].sides != 1)
            continue;
        int seen = 0;
        for (size_t j = 0; j < n_cmp; j++)
            if (ids[j].step == ids[i].step) {
                ids[j].sides |= 1;
                seen = 1;
            }
        if (!seen)
            ids[u++] = ids[i];
    }
    return u;
}

/* 1 when the side's files carry a device mesh (a sharded layout: compare
 * pairs it by step through its lowest rank and assembles the rest). */
static int side_sharded(const np_dumpio_ref *refs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (refs[i].state != NP_DUMPIO_COMPLETE)
            continue;
        np_dumpio *d = NULL;
        np_error e;
        np_error_clear(&e);
        if (np_dumpio_open_ref(&d, &refs[i], 0, &e) != NP_OK)
            return 0;
        int mesh = np_dumpio_get_info(d)->mesh_ndim > 0;
        np_dumpio_close(d);
        return mesh;
    }
    return 0;
}

/* The (step, rank) pairs found on either side, sorted, unique, within the
 * --step/--rank filters; *n = 0 when a side has a file without step/rank
 * (a single dump.h5: nothing to spread). */
static np_status list_pairs(pair_id **out, size_t *n, const char *bench, const char *cmp,
                            const np_cmp_options *o, np_error *err)
{
    *out = NULL;
    *n = 0;
    np_dumpio_ref *rb = NULL, *rc = NULL;
    size_t nb = 0, nc = 0;
    np_status st = np_dumpio_find(&rb, &nb, bench, err);
    if (!st)
        st = np_dumpio_find(&rc, &nc, cmp, err);
    pair_id *ids = st ? NULL : malloc(sizeof *ids * (nb + nc + 1));
    if (!st && !ids)
        st = np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory");
    size_t k = 0;
    int spreadable = 1;
    int sharded[2] = {!st && side_sharded(rb, nb), !st && side_sharded(rc, nc)};
    for (size_t i = 0; !st && i < nb + nc; i++) {
        const np_dumpio_ref *r = i < nb ? &rb[i] : &rc[i - nb];
        if (r->step < 0 || r->rank < 0)
            spreadable = 0;
        const np_dumpio_ref *prev = i == 0 || i == nb ? NULL : r - 1;
        if (sharded[i >= nb] && prev && prev->step == r->step)
            continue; /* a sharded side: its lowest rank of the step stands for it */
        if ((o->step >= 0 && r->step != o->step) || (o->rank >= 0 && r->rank != o->rank && !(o->single_ref && i < nb)))
            continue;
        ids[k].step = r->step;
        ids[k].rank = r->rank;
        ids[k++].sides = i < nb ? 1 : 2;
    }
    free(rb);
    free(rc);
    if (st || !spreadable) {
        free(ids);
        return st;
    }
    if (o->single_ref)
        k = single_ref_ids(ids, k);
    qsort(ids, k, sizeof *ids, cmp_id);
    size_t u = 0;
    for (size_t i = 0; i < k; i++) {
        if (u > 0 && cmp_id(&ids[u - 1], &ids[i]) == 0)
            ids[u - 1].sides |= ids[i].sides;
        else
            ids[u++] = ids[i];
    }
    *out = ids;
    *n = u;
    return NP_OK;
}

/* Compare one pair, write its reports, fill its record. */
/* The issues a single process would list for the whole comparison: those
 * of the pairs present on one side only (every process finds the same). */
typedef struct issue_list {
    np_cmp_issue *v;
    size_t n;
} issue_list;

static void one_sided_issues(issue_list *out, const pair_id *ids, size_t n, const char *bench,
                             const char *cmp, const np_cmp_options *base)
{
    out->v = NULL;
    out->n = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i].sides == 3)
            continue;
        np_cmp_options o = *base;
        o.step = ids[i].step;
        o.rank = ids[i].rank;
        o.progress = NULL;
        np_cmp_result *r = NULL;
        if (np_cmp_run(&r, bench, cmp, &o, NULL) != NP_OK)
            continue;
        np_cmp_issue *v = r->n_issues ? realloc(out->v, sizeof *v * (out->n + r->n_issues)) : NULL;
        if (v) {
            memcpy(v + out->n, r->issues, sizeof *v * r->n_issues);
            out->v = v;
            out->n += r->n_issues;
        }
        np_cmp_result_free(r);
    }
}

static void run_pair(pair_rec *rec, pair_id id, const char *bench, const char *cmp,
                     const char *outdir, int formats, const np_cmp_options *base, long long now,
                     const issue_list *all, kept_pair *keep)
{
    memset(rec, 0, sizeof *rec);
    rec->step = id.step;
    rec->rank = id.rank;
    rec->seq = -1;
    np_cmp_options o = *base;
    o.step = id.step;
    o.rank = id.rank;
    o.progress = NULL;
    np_error err = {0};
    np_cmp_result *r = NULL;
    if (np_cmp_run(&r, bench, cmp, &o, &err) != NP_OK) {
        /* as a single process: a pair missing or unreadable on one side is a
         * difference when others were compared (merge: usage error otherwise) */
        rec->rc = NP_EXIT_DIFF;
        snprintf(rec->issues, sizeof rec->issues, "%.400s%s%.600s", err.file, err.file[0] ? ": " : "",
                 err.text);
        return;
    }
    for (size_t i = 0; i < r->n_issues; i++) {
        size_t l = strlen(rec->issues);
        snprintf(rec->issues + l, sizeof rec->issues - l, "%s%.*s", l ? "; " : "",
                 (int)(sizeof rec->issues - l > 3 ? sizeof rec->issues - l - 3 : 0), r->issues[i].text);
    }
    rec->rc = np_cmp_has_differences(r) ? NP_EXIT_DIFF : NP_EXIT_OK;
    if (r->n_pairs == 1) {
        const np_cmp_pair *p = &r->pairs[0];
        rec->compared = 1;
        snprintf(rec->mode, sizeof rec->mode, "%s", np_cmp_mode_name(p->mode));
        rec->rows = (long long)p->n_rows;
        rec->pass = (long long)p->count_verdict[NP_VERDICT_PASS];
        rec->warning = (long long)p->count_verdict[NP_VERDICT_WARNING];
        rec->error = (long long)p->count_verdict[NP_VERDICT_ERROR];
        if (p->n_culprits) {
            const np_cmp_call *c = &p->calls[p->culprits[0]];
            rec->seq = c->seq;
            snprintf(rec->call, sizeof rec->call, "%.255s", c->name);
            snprintf(rec->reason, sizeof rec->reason, "%.511s", c->reason ? c->reason : "");
        }
        /* the reports list the issues of the whole comparison, as one process's do */
        np_cmp_issue *own = r->issues;
        size_t n_own = r->n_issues;
        r->issues = all->v;
        r->n_issues = all->n;
        char first[300];
        int wrc = np_cli_compare_reports(r, outdir, formats, 1, now, first, sizeof first);
        r->issues = own;
        r->n_issues = n_own;
        if (wrc)
            rec->rc = wrc;
        np_cmp_pair_digest_of(&rec->dig, p);
        if ((formats & 8) && keep_pair(keep, r, rec, first)) /* F_HTML (cmd_compare.c) */
            r = NULL;
    } else if (rec->rc == NP_EXIT_OK) {
        rec->rc = NP_EXIT_DIFF; /* present on one side only */
    }
    np_cmp_result_free(r);
}

/* The first culprit across all pairs: lowest step, then seq, then rank. */
static const pair_rec *first_culprit(const pair_rec *recs, size_t n)
{
    const pair_rec *best = NULL;
    for (size_t i = 0; i < n; i++) {
        const pair_rec *p = &recs[i];
        if (p->seq < 0)
            continue;
        if (!best || p->step < best->step || (p->step == best->step && p->seq < best->seq) ||
            (p->step == best->step && p->seq == best->seq && p->rank < best->rank))
            best = p;
    }
    return best;
}

/* A pair's first culprit as JSON ("where": with its step and rank). The
 * names are user data and may not be UTF-8 (or be cut inside a character):
 * jansson refuses such a string (NULL, and the key would silently go
 * missing), so they are made valid first (np_utf8_fix). */
static json_t *culprit_json(const pair_rec *p, int where)
{
    char call[sizeof p->call], reason[sizeof p->reason];
    np_utf8_fix(call, sizeof call, p->call);
    np_utf8_fix(reason, sizeof reason, p->reason);
    json_t *o = json_pack("{s:s, s:I, s:s}", "call", call, "seq", (json_int_t)p->seq, "reason",
                          reason);
    if (o && where && (json_object_set_new(o, "step", json_integer(p->step)) ||
                       json_object_set_new(o, "rank", json_integer(p->rank)))) {
        json_decref(o);
        o = NULL;
    }
    return o;
}

static json_t *rec_json(const pair_rec *p)
{
    char issues[sizeof p->issues];
    np_utf8_fix(issues, sizeof issues, p->issues);
    json_t *o = json_pack("{s:i, s:i, s:b, s:s, s:I, s:I, s:I, s:I, s:s}", "step", p->step,
                          "rank", p->rank, "compared", p->compared, "mode", p->mode, "rows",
                          (json_int_t)p->rows, "pass", (json_int_t)p->pass, "warning",
                          (json_int_t)p->warning, "error", (json_int_t)p->error, "issues",
                          issues);
    json_t *c = !o || p->seq < 0 ? json_null() : culprit_json(p, 0);
    if (o && (!c || json_object_set_new(o, "first_culprit", c))) {
        json_decref(o);
        o = NULL;
    }
    return o;
}

/* OUT/compare_summary_{stamp}.json, written to a temporary name and renamed. */
static int write_summary(const char *outdir, long long now, const pair_rec *recs, size_t n,
                         int world, int quiet)
{
    json_t *root = json_object(), *pairs = json_array();
    if (!root || !pairs) {
        json_decref(root);
        json_decref(pairs);
        return -1;
    }
    int built = 1; /* a value jansson could not build is an error, not a missing key */
    for (size_t i = 0; i < n; i++)
        built &= json_array_append_new(pairs, rec_json(&recs[i])) == 0;
    const pair_rec *fc = first_culprit(recs, n);
    built &= json_object_set_new(root, "processes", json_integer(world)) == 0;
    built &= json_object_set_new(root, "pairs", pairs) == 0;
    built &= json_object_set_new(root, "first_culprit", fc ? culprit_json(fc, 1) : json_null()) == 0;
    time_t t = (time_t)now;
    struct tm tm;
    char ts[32], base[64], name[96], path[4200];
    localtime_r(&t, &tm);
    strftime(ts, sizeof ts, "%Y%m%d%H%M%S", &tm);
    snprintf(base, sizeof base, "compare_summary_%s", ts);
    /* the name reserved among parallel runs (_2, _3, ... when taken), an
     * exclusive temporary renamed only when complete (common/outfile.c) */
    static const char *const json_ext[] = {"json"};
    np_error e = {0};
    np_out o;
    np_status st = np_out_reserve(name, sizeof name, outdir, base, json_ext, 1, &e);
    int reserved = st == NP_OK;
    snprintf(path, sizeof path, "%s/%s.json", outdir, name);
    if (st == NP_OK && !built)
        st = np_error_set(&e, NP_ERR_NOMEM, path, NULL, "cannot build the summary (out of memory)");
    if (st == NP_OK)
        st = np_out_begin(&o, path, NULL, &e);
    FILE *f = st == NP_OK ? np_out_stream(&o) : NULL;
    if (st == NP_OK && !f) {
        np_out_abort(&o);
        st = np_error_set(&e, NP_ERR_NOMEM, path, NULL, "out of memory");
    }
    /* ASCII: a name's U+2028 is escaped too (a raw one ends a JavaScript line) */
    size_t flags = JSON_INDENT(1) | JSON_SORT_KEYS | JSON_ENSURE_ASCII;
    if (f && (json_dumpf(root, f, flags) != 0 || ferror(f))) {
        np_out_abort(&o);
        st = np_error_set(&e, NP_ERR_IO, path, NULL, "writing the summary failed");
    } else if (f) {
        st = np_out_commit(&o, NP_OUT_NOREPLACE, &e);
    }
    if (reserved)
        np_out_release(outdir, name);
    if (st != NP_OK)
        np_cli_report(&e);
    else if (!quiet)
        np_cli_printf("summary: %s\n", path);
    json_decref(root);
    return st != NP_OK ? -1 : 0;
}

static void print_recs(const pair_rec *recs, size_t n, int world)
{
    for (size_t i = 0; i < n; i++) {
        const pair_rec *p = &recs[i];
        if (!p->compared) {
            printf("step %d rank %d: not compared (see above)\n", p->step, p->rank);
            continue;
        }
        np_cli_printf("step %d rank %d (%s mode): %lld rows: %lld pass, %lld warning, %lld error; "
               "first culprit: %s\n", p->step, p->rank, p->mode, p->rows, p->pass, p->warning,
               p->error, p->seq >= 0 ? p->call : "none");
    }
    const pair_rec *fc = first_culprit(recs, n);
    printf("%zu pair(s) compared over %d process(es)\n", n, world);
    if (fc)
        np_cli_printf("first culprit across all steps and ranks: step %d rank %d %s: %s\n", fc->step,
               fc->rank, fc->call, fc->reason);
    else
        printf("first culprit across all steps and ranks: none\n");
}

/* The gathered records arrive grouped by process: back to (step, rank) order. */
static void sort_recs(pair_rec *recs, size_t n)
{
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && (recs[j - 1].step > recs[j].step ||
                                     (recs[j - 1].step == recs[j].step &&
                                      recs[j - 1].rank > recs[j].rank)); j--) {
            pair_rec t = recs[j];
            recs[j] = recs[j - 1];
            recs[j - 1] = t;
        }
}

/* Rank 0: print the sorted records, write the summary; the exit code. */
static int merge(const pair_rec *recs, size_t n, const char *outdir, long long now, int world,
                 int quiet)
{
    int rc = NP_EXIT_OK, any = 0;
    for (size_t i = 0; i < n; i++) {
        any |= recs[i].compared;
        if (recs[i].issues[0])
            np_cli_error("compare: %s", recs[i].issues);
        if (recs[i].rc > rc)
            rc = recs[i].rc;
    }
    if (!any) {
        np_cli_error("compare: nothing could be compared");
        return NP_EXIT_USAGE;
    }
    if (!quiet)
        print_recs(recs, n, world);
    if (write_summary(outdir, now, recs, n, world, quiet) != 0)
        rc = NP_EXIT_USAGE; /* said by write_summary */
    return rc;
}

/* The HTML page over all pairs (every process calls it): the digests of
 * the compared pairs in (step, rank) order; the process that compared the
 * focus pair writes the page from its kept copy, rank 0 says where it is.
 * Returns rank 0's exit code for the page (0, or NP_EXIT_USAGE). */
static int html_page(const pair_rec *recs, size_t n, const kept_pair *keep,
                     const issue_list *issues, const char *outdir, long long now, int rank,
                     int quiet)
{
    np_cmp_pair_digest *d = malloc((n ? n : 1) * sizeof *d);
    size_t nd = 0;
    int owner = -1;
    for (size_t i = 0; d && i < n; i++)
        if (recs[i].compared)
            d[nd++] = recs[i].dig;
    if (d && nd) {
        size_t fi = np_cmp_html_focus(d, nd);
        for (size_t i = 0, c = 0; i < n; i++)
            if (recs[i].compared && c++ == fi)
                owner = recs[i].owner;
    }
    /* the owner sends its path ("" when it failed), the others nothing */
    char path[4200] = "";
    size_t send = 0;
    if (owner == rank) {
        np_cmp_result *r = keep->r;
        const np_cmp_pair_digest *f = &d[np_cmp_html_focus(d, nd)];
        if (r && r->pairs[0].step == f->step && r->pairs[0].rank == f->rank) {
            np_cmp_issue *own = r->issues;
            size_t n_own = r->n_issues;
            r->issues = issues->v; /* the page lists the issues of the whole comparison */
            r->n_issues = issues->n;
            if (np_cli_compare_html(r, d, nd, &r->pairs[0], keep->report, outdir, now, path,
                                    sizeof path) != 0)
                path[0] = '\0';
            r->issues = own;
            r->n_issues = n_own;
        } else {
            np_cli_error("compare: internal error: the pair the HTML page shows (step %d rank "
                         "%d) is not the one this process kept", f->step, f->rank);
        }
        send = strlen(path) + 1;
    }
    free(d);
    void *all = NULL;
    size_t total = 0;
    int gr = np_cli_mpi_allgather_bytes(&all, &total, path, send);
    int rc = NP_EXIT_OK;
    if (rank == 0 && owner >= 0) {
        const char *got = gr || total == 0 ? "" : all;
        if (!got[0])
            rc = NP_EXIT_USAGE; /* said by the owner */
        else if (!quiet)
            np_cli_report_line(got);
    }
    free(all);
    return rc;
}

int np_cli_compare_mpi(const char *bench, const char *cmp, const char *outdir, int formats,
                       int quiet, const np_cmp_options *o, int rank, int world)
{
    np_cli_ignore_sigxfsz(); /* a file size limit is a write error, reported */
    long long now = (long long)time(NULL);
    np_cli_mpi_bcast_ll(&now);
    pair_id *ids = NULL;
    size_t n = 0;
    np_error err = {0};
    int bad = list_pairs(&ids, &n, bench, cmp, o, &err) != NP_OK;
    if (!bad && np_mkdirs(outdir) != 0) {
        np_error_set(&err, NP_ERR_IO, outdir, NULL, "cannot create the output directory: %s",
                     strerror(errno));
        bad = 1;
    }
    if (bad || n == 0) {
        /* every process sees the same dumps: all fail alike, rank 0 says why */
        if (rank == 0 && bad)
            np_cli_report(&err);
        else if (rank == 0)
            np_cli_error("compare: no step{S}/rank{R} pairs to spread over %d processes under %s "
                         "and %s (two single files are compared by one process: run it "
                         "without mpirun)", world, bench, cmp);
        free(ids);
        return NP_EXIT_USAGE;
    }
    size_t mine = 0;
    for (size_t i = (size_t)rank; i < n; i += (size_t)world)
        mine++;
    pair_rec *recs = calloc(mine ? mine : 1, sizeof *recs);
    if (!recs) {
        free(ids);
        return NP_EXIT_USAGE;
    }
    /* one replica check of the cmp side for all of this process's runs
     * (without the cache, every pair's run would open every rank's file) */
    np_cmp_options po = *o;
    po.replicas = np_cmp_replicas_new();
    issue_list one_sided;
    one_sided_issues(&one_sided, ids, n, bench, cmp, &po);
    kept_pair keep = {0};
    size_t k = 0;
    for (size_t i = (size_t)rank; i < n; i += (size_t)world) {
        run_pair(&recs[k], ids[i], bench, cmp, outdir, formats, &po, now, &one_sided, &keep);
        recs[k++].owner = rank;
    }
    np_cmp_replicas_free(po.replicas);
    free(ids);
    void *all = NULL;
    size_t total = 0;
    int gr = np_cli_mpi_allgather_bytes(&all, &total, recs, mine * sizeof *recs);
    free(recs);
    int rc = NP_EXIT_OK;
    if (!gr)
        sort_recs(all, total / sizeof(pair_rec));
    if (rank == 0)
        rc = gr ? NP_EXIT_USAGE : merge(all, total / sizeof(pair_rec), outdir, now, world, quiet);
    if (!gr && (formats & 8)) { /* F_HTML (cmd_compare.c) */
        int hrc = html_page(all, total / sizeof(pair_rec), &keep, &one_sided, outdir, now, rank,
                            quiet);
        if (hrc > rc)
            rc = hrc;
    }
    np_cmp_result_free(keep.r);
    free(one_sided.v);
    free(all);
    /* the exit code is rank 0's: the other processes say 0 unless they failed */
    return rank == 0 ? rc : (gr ? NP_EXIT_USAGE : NP_EXIT_OK);
}
