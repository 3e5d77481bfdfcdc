/* compare/replicas.c - a data-parallel dump checked against itself
 * (nprobe/replicas.h): replica tensors identical on every rank, every
 * all-reduce delivering the reduction of what the ranks sent. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nprobe/dumpio.h"
#include "nprobe/replicas.h"

typedef struct rank_file {
    int rank;
    np_dumpio *d;
    np_entry_rec *e;
    size_t n;
} rank_file;

static int is_collective(const char *call)
{
    return strncmp(call, "Distributed.", 12) == 0;
}

static int is_replica(const np_entry_rec *e)
{
    return !strcmp(e->role, "parameters") || !strcmp(e->role, "parameters_grad") ||
           (is_collective(e->call) && !strcmp(e->role, "output"));
}

/* The entry named `name` in rf, looked for at `hint` first. */
static const np_entry_rec *find_entry(const rank_file *rf, const char *name, size_t hint)
{
    if (hint < rf->n && !strcmp(rf->e[hint].name, name))
        return &rf->e[hint];
    for (size_t i = 0; i < rf->n; i++)
        if (!strcmp(rf->e[i].name, name))
            return &rf->e[i];
    return NULL;
}

/* Bit-identical as far as the dump tells: layout, crc32, statistics. */
static int same_leaf(const np_entry_rec *a, const np_entry_rec *b)
{
    if (strcmp(a->dtype, b->dtype) || a->numel != b->numel || a->ndim != b->ndim ||
        a->crc32 != b->crc32)
        return 0;
    for (int i = 0; i < a->ndim && i < NP_FMT_MAX_DIMS; i++)
        if (a->shape[i] != b->shape[i])
            return 0;
    np_stats sa = np_fmt_entry_stats(a), sb = np_fmt_entry_stats(b);
    return memcmp(&sa, &sb, sizeof sa) == 0;
}

static void set_finding(np_rep_finding *f, np_rep_kind kind, int step, const np_entry_rec *e)
{
    memset(f, 0, sizeof *f);
    f->kind = kind;
    f->step = step;
    f->seq = e->seq;
    snprintf(f->call, sizeof f->call, "%s", e->call);
    snprintf(f->leaf, sizeof f->leaf, "%s", e->name);
}

static void append_rank(char *buf, size_t cap, int rank)
{
    size_t l = strlen(buf);
    snprintf(buf + l, cap - l, "%s%d", l ? ", " : "", rank);
}

/* Replica leaf e0 (rank 0's, entry index i) against the other ranks. */
static int check_replica(np_rep_finding *f, int step, const rank_file *rf, int k, size_t i)
{
    const np_entry_rec *e0 = &rf[0].e[i];
    char differ[128] = "", missing[128] = "";
    int n_differ = 0, first = -1;
    for (int r = 1; r < k; r++) {
        const np_entry_rec *er = find_entry(&rf[r], e0->name, i);
        if (!er) {
            append_rank(missing, sizeof missing, rf[r].rank);
        } else if (!same_leaf(e0, er)) {
            append_rank(differ, sizeof differ, rf[r].rank);
            if (first < 0)
                first = r;
            n_differ++;
        }
    }
    if (missing[0]) {
        set_finding(f, NP_REP_MISSING, step, e0);
        snprintf(f->ranks, sizeof f->ranks, "%s", missing);
        snprintf(f->text, sizeof f->text, "%s is on rank %d but not on rank(s) %s", e0->name,
                 rf[0].rank, missing);
        return 1;
    }
    if (!n_differ)
        return 0;
    set_finding(f, NP_REP_PART, step, e0);
    const np_entry_rec *ef = find_entry(&rf[first], e0->name, i);
    /* every other rank differs from rank 0 and they agree: rank 0 is the odd one */
    int others_agree = n_differ == k - 1 && k >= 3;
    for (int r = 2; others_agree && r < k; r++)
        others_agree = same_leaf(ef, find_entry(&rf[r], e0->name, i));
    if (others_agree)
        snprintf(f->ranks, sizeof f->ranks, "%d", rf[0].rank);
    else
        snprintf(f->ranks, sizeof f->ranks, "%s", differ);
    snprintf(f->text, sizeof f->text,
             "the replicas part: %s differs on rank(s) %s from rank %d%s (norm %.9g vs %.9g, "
             "max %.9g vs %.9g)",
             e0->name, others_agree ? "all but" : differ, rf[0].rank,
             others_agree ? ", which agree among themselves" : "", ef->norm, e0->norm, ef->max,
             e0->max);
    return 1;
}

/* Tolerance of a reduction delivered in `dtype` (relative to max |mean|). */
static double reduce_tol(const char *dtype)
{
    if (!strcmp(dtype, "float64"))
        return 1e-12;
    if (!strcmp(dtype, "bfloat16"))
        return 8e-3;
    if (!strcmp(dtype, "float16"))
        return 1e-3;
    return 1e-6;
}

/* Read `n` values of rank r's leaf into buf; 0 when done. */
static int read_leaf(double *buf, int64_t n, const rank_file *rf, const char *leaf)
{
    size_t got = 0;
    return np_dumpio_read_values(buf, (size_t)n, &got, rf->d, leaf, n, NULL) == NP_OK &&
                   (int64_t)got == n ? 0 : -1;
}

/* out against the float64 mean and the max of in[0..k) (n values each). */
static int judge_reduce(char *text, size_t cap, const double *out, const double *in, int64_t n,
                        int k, const char *dtype, const char *leaf)
{
    double maxdiff = 0.0, scale = 0.0, dot = 0.0, mm = 0.0;
    int is_max = 1;
    for (int64_t j = 0; j < n; j++) {
        double s = 0.0, mx = in[j];
        for (int r = 0; r < k; r++) {
            s += in[(size_t)r * (size_t)n + (size_t)j];
            mx = fmax(mx, in[(size_t)r * (size_t)n + (size_t)j]);
        }
        double mean = s / k;
        is_max &= out[j] == mx;
        maxdiff = fmax(maxdiff, fabs(out[j] - mean));
        scale = fmax(scale, fabs(mean));
        dot += out[j] * mean;
        mm += mean * mean;
    }
    double tol = reduce_tol(dtype);
    if (is_max || maxdiff <= tol * scale || (scale == 0.0 && maxdiff == 0.0))
        return 0;
    snprintf(text, cap,
             "%s is not the mean of the %d ranks' inputs (recomputed in float64 in rank "
             "order): max abs diff %.3g, %.3g of max |mean| (a %s reduction is within %.0e); "
             "the output is %.6g x the mean",
             leaf, k, maxdiff, scale > 0 ? maxdiff / scale : INFINITY, dtype, tol,
             mm > 0 ? dot / mm : NAN);
    return 1;
}

/* The all-reduce whose output is rank 0's entry i. 1 on a finding, 0 ok,
 * -1 without payloads. */
static int check_reduce(np_rep_finding *f, int step, const rank_file *rf, int k, size_t i)
{
    const np_entry_rec *e0 = &rf[0].e[i];
    char in_name[NP_FMT_NAME_LEN + 16];
    snprintf(in_name, sizeof in_name, "%s.input.0", e0->call);
    int64_t n = e0->numel;
    if (!e0->has_data || n <= 0)
        return -1;
    double *buf = malloc(sizeof(double) * (size_t)n * (size_t)(k + 1));
    if (!buf)
        return -1;
    int ok = read_leaf(buf + (size_t)k * (size_t)n, n, &rf[0], e0->name) == 0;
    for (int r = 0; ok && r < k; r++) {
        const np_entry_rec *in = find_entry(&rf[r], in_name, i > 0 ? i - 1 : 0);
        ok = in && in->numel == n && in->has_data &&
             read_leaf(buf + (size_t)r * (size_t)n, n, &rf[r], in_name) == 0;
    }
    char text[512];
    int bad = ok && judge_reduce(text, sizeof text, buf + (size_t)k * (size_t)n, buf, n, k,
                                 e0->dtype, e0->name);
    free(buf);
    if (!ok)
        return -1;
    if (!bad)
        return 0;
    set_finding(f, NP_REP_REDUCE, step, e0);
    snprintf(f->ranks, sizeof f->ranks, "every rank");
    snprintf(f->text, sizeof f->text, "%s", text);
    return 1;
}

/* One step: the first finding in seq order into *f (kind NONE if none). */
static void check_step(np_rep_finding *f, np_rep_result *res, int step, const rank_file *rf, int k)
{
    memset(f, 0, sizeof *f);
    for (size_t i = 0; i < rf[0].n; i++) {
        const np_entry_rec *e0 = &rf[0].e[i];
        if (f->kind != NP_REP_NONE && e0->seq >= f->seq)
            continue;
        np_rep_finding g;
        if (is_replica(e0)) {
            res->n_replica_leaves += k - 1;
            if (check_replica(&g, step, rf, k, i))
                *f = g;
        }
        if (f->kind != NP_REP_NONE && e0->seq >= f->seq)
            continue;
        if (!strncmp(e0->call, "Distributed.all_reduce.", 23) && !strcmp(e0->role, "output")) {
            int r = check_reduce(&g, step, rf, k, i);
            res->n_collectives += r >= 0;
            res->n_collectives_no_data += r < 0;
            if (r > 0)
                *f = g;
        }
    }
}

static void close_ranks(rank_file *rf, int k)
{
    for (int r = 0; r < k; r++) {
        free(rf[r].e);
        np_dumpio_close(rf[r].d);
    }
}

static np_status open_ranks(rank_file *rf, const np_dumpio_ref *refs, int k, np_error *err)
{
    memset(rf, 0, sizeof *rf * (size_t)k);
    for (int r = 0; r < k; r++) {
        rf[r].rank = refs[r].rank;
        np_status st = np_dumpio_open_ref(&rf[r].d, &refs[r], 0, err);
        if (!st)
            st = np_dumpio_read_entries(&rf[r].e, &rf[r].n, rf[r].d, err);
        if (st) {
            close_ranks(rf, r + 1);
            return st;
        }
    }
    return NP_OK;
}

static np_status add_step(np_rep_result *res, const np_dumpio_ref *refs, int k, np_error *err)
{
    int step = refs[0].step;
    rank_file *rf = calloc((size_t)k, sizeof *rf);
    np_rep_finding *ps = realloc(res->per_step, sizeof *ps * (size_t)(res->n_steps + 1));
    int *ss = ps ? realloc(res->steps, sizeof *ss * (size_t)(res->n_steps + 1)) : NULL;
    if (ps)
        res->per_step = ps;
    if (ss)
        res->steps = ss;
    if (!rf || !ps || !ss) {
        free(rf);
        return np_error_set(err, NP_ERR_NOMEM, refs[0].path, NULL, "out of memory");
    }
    np_status st = open_ranks(rf, refs, k, err);
    if (st) {
        free(rf);
        return st;
    }
    np_rep_finding *f = &res->per_step[res->n_steps];
    check_step(f, res, step, rf, k);
    res->steps[res->n_steps++] = step;
    if (k > res->world_size)
        res->world_size = k;
    if (f->kind != NP_REP_NONE && res->first.kind == NP_REP_NONE)
        res->first = *f;
    close_ranks(rf, k);
    free(rf);
    return NP_OK;
}

static const char *state_words(np_dumpio_state st)
{
    return st == NP_DUMPIO_PARTIAL ? "dump.h5.partial only (incomplete: the rank stopped "
                                     "during the step)"
           : st == NP_DUMPIO_TEMP  ? "a temporary file only"
                                   : "no dump file";
}

/* Say what of step refs[i..j) cannot be checked: the ranks without a
 * complete file, and the whole step when fewer than two ranks have one. */
static np_status add_gap(np_rep_result *res, const np_dumpio_ref *refs, size_t i, size_t j,
                         const np_dumpio_ref *grp, int k, np_error *err)
{
    char bad[400] = "";
    size_t u = 0;
    int last = -2;
    for (size_t q = i; q < j && u < sizeof bad; q++) {
        int done = 0;
        for (int g = 0; g < k; g++)
            done |= grp[g].rank == refs[q].rank;
        if (done || refs[q].rank == last)
            continue;
        last = refs[q].rank;
        u += (size_t)snprintf(bad + u, sizeof bad - u, "%srank %d: %s", u ? "; " : "",
                              refs[q].rank, state_words(refs[q].state));
    }
    if (k >= 2 && !bad[0])
        return NP_OK;
    np_rep_gap *g = realloc(res->gaps, sizeof *g * (size_t)(res->n_gaps + 1));
    if (!g)
        return np_error_set(err, NP_ERR_NOMEM, refs[i].path, NULL, "out of memory");
    res->gaps = g;
    g = &res->gaps[res->n_gaps++];
    g->step = refs[i].step;
    g->checked = k >= 2;
    if (k >= 2)
        snprintf(g->text, sizeof g->text, "checked without %s", bad);
    else if (k == 1)
        snprintf(g->text, sizeof g->text, "not checked: one complete rank (rank %d); %s",
                 grp[0].rank, bad[0] ? bad : "no other rank folder");
    else
        snprintf(g->text, sizeof g->text, "not checked: no complete rank file (%s)", bad);
    res->n_steps_unchecked += k < 2;
    return NP_OK;
}

np_status np_rep_check(np_rep_result *out, const char *path, np_error *err)
{
    memset(out, 0, sizeof *out);
    np_dumpio_ref *refs = NULL;
    size_t n = 0;
    np_status st = np_dumpio_find(&refs, &n, path, err);
    if (st)
        return st;
    if (n == 0) {
        free(refs);
        return np_error_set(err, NP_ERR_NOTFOUND, path, NULL,
                            "no dump file (step*/rank*/dump.h5) below this path");
    }
    /* refs are sorted by step then rank; complete files only */
    size_t i = 0;
    while (!st && i < n) {
        size_t j = i;
        np_dumpio_ref *grp = malloc(sizeof *grp * n);
        int k = 0;
        for (; grp && j < n && refs[j].step == refs[i].step; j++)
            if (refs[j].state == NP_DUMPIO_COMPLETE && (k == 0 || refs[j].rank != grp[k - 1].rank))
                grp[k++] = refs[j];
        st = !grp ? np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory")
                  : add_gap(out, refs, i, j, grp, k, err);
        if (!st && k >= 2)
            st = add_step(out, grp, k, err);
        free(grp);
        i = j;
    }
    if (!st && out->n_steps == 0 && out->n_gaps)
        st = np_error_set(err, NP_ERR_ARG, refs[0].path, NULL,
                          "no step can be checked: step %d %s (replicas are checked across 2 or "
                          "more complete ranks of a data-parallel dump)",
                          out->gaps[0].step, out->gaps[0].text);
    free(refs);
    if (st)
        np_rep_result_free(out);
    return st;
}

void np_rep_result_free(np_rep_result *r)
{
    if (!r)
        return;
    free(r->per_step);
    free(r->steps);
    free(r->gaps);
    r->per_step = NULL;
    r->steps = NULL;
    r->gaps = NULL;
    r->n_steps = r->n_gaps = r->n_steps_unchecked = 0;
}
