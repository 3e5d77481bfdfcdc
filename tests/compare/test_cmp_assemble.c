/* tests/compare/test_cmp_assemble.c - compare's assemble stage (issue 25):
 * a sharded run written through the probe's placements writer (a 2-rank
 * tensor-parallel mesh: an uneven Shard(0) output, a Replicate() weight, a
 * Partial(sum) output whose pieces sum to the logical tensor) compares
 * clean against the one-process dump of the same logical tensors, in
 * tensor and statistics mode, the assembled statistics equal to the
 * logical tensor's (computed here in float64); replicas that differ, a
 * shard at the neighbour's offset (overlap) and a missing rank are named
 * with the leaf, the rank and its mesh coordinate; a Partial(avg) leaf is
 * the mean of its pieces; a shard whose values are wrong on one rank makes
 * the first culprit's reason name that rank alone; a pipeline stage's API
 * calls are taken by their one-process names (counted on after the
 * earlier stages'), its micro-batches assembled; a stage whose earlier
 * stage has no file has its API calls left out with a note, its modules
 * compared; a file of several stages (an interleaved schedule) has each
 * stage's API calls by their one-process names, and a wrong one named with
 * its micro-batch; data-parallel ranks whose batches differ in size, each
 * writing its micro-batches' offsets as if every rank's batch were its
 * own, are assembled at the offsets their row counts give, and a wrong
 * piece named with its rank and micro-batch; an expert-parallel run's
 * experts, each on its own rank, are all compared, its Local() routing
 * left out on both sides; under data parallel across expert-parallel
 * groups (mesh (dp, ep)) each expert's replicas' tokens, unequal in
 * number, assembled from their row counts, the other group rank's expert
 * (more leaves than this rank's file holds) merged in; its routing in the
 * root cause (a call with a Local() input has unknown inputs, not passing
 * ones; a module where the expert-parallel side communicates holds no gap
 * for the one process's split: a wrong dispatch is named at the expert's
 * first call, a wrong combine at the index_copy after it); tensors larger than the assembly's buffers
 * (streamed a range at a time) give the metrics, statistics and crc32 of
 * the whole logical tensor in memory, bit for bit. */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "nprobe/compare.h"
#include "nprobe/probe.h"
#include "probe_rows.h"

static char g_tmp[256];

#define CALL "Module.fc.RowParallelLinear.forward.0"
#define OUT CALL ".output.0"
#define W CALL ".parameters.weight"
#define PART "Functional.matmul.0.forward.output.0"
#define AVG "Functional.mean.0.forward.output.0"

/* The logical tensors: out 4x3, weight 2x3, the partial 2x2 = a + b. */
static float g_out[12], g_w[6], g_a[4], g_b[4];

static void init_values(void)
{
    for (int i = 0; i < 12; i++)
        g_out[i] = 0.25f * (float)(i * 7 % 11) - 1.0f;
    for (int i = 0; i < 6; i++)
        g_w[i] = 0.5f * (float)i - 1.25f;
    for (int i = 0; i < 4; i++) {
        g_a[i] = (float)(i + 1);
        g_b[i] = (float)(3 - 2 * i);
    }
}

/* framework NULL: the runtime's ("nprobe-runtime"). */
static np_probe *open_probe_as(const char *dir, const char *task, int rank, int world,
                               const char *framework)
{
    char cfg[600];
    snprintf(cfg, sizeof cfg, "{\"task\": \"%s\", \"dump_path\": \"%s\", \"level\": \"mix\"}",
             task, dir);
    np_probe_meta meta = {framework, NULL, NULL, rank, world};
    np_probe *p = NULL;
    np_error err;
    np_error_clear(&err);
    CHECK_EQ_INT(np_probe_open_json(&p, cfg, &meta, &err), NP_OK);
    return p;
}

static np_probe *open_probe(const char *dir, const char *task, int rank, int world)
{
    return open_probe_as(dir, task, rank, world, NULL);
}

/* The one-process dump. */
static void write_single(const char *dir, const char *task)
{
    np_probe *p = open_probe(dir, task, 0, 1);
    if (!p)
        return;
    np_error err;
    np_error_clear(&err);
    float part[4];
    for (int i = 0; i < 4; i++)
        part[i] = g_a[i] + g_b[i];
    float mean[4];
    for (int i = 0; i < 4; i++)
        mean[i] = 0.5f * (g_a[i] + g_b[i]);
    np_tensor o = np_test_mat(g_out, 4, 3), w = np_test_mat(g_w, 2, 3), q = np_test_mat(part, 2, 2),
              m = np_test_mat(mean, 2, 2);
    CHECK_EQ_INT(np_probe_step_begin(p, 0, &err), NP_OK);
    CHECK_EQ_INT(np_probe_dump(p, "Functional.mean.0.forward", NP_ROLE_OUTPUT, "0", &m, &err),
                 NP_OK);
    CHECK_EQ_INT(np_probe_dump(p, "Functional.matmul.0.forward", NP_ROLE_OUTPUT, "0", &q, &err),
                 NP_OK);
    CHECK_EQ_INT(np_probe_dump(p, CALL, NP_ROLE_PARAMETERS, "weight", &w, &err), NP_OK);
    CHECK_EQ_INT(np_probe_dump(p, CALL, NP_ROLE_OUTPUT, "0", &o, &err), NP_OK);
    CHECK_EQ_INT(np_probe_close(p, NULL, &err), NP_OK);
    np_probe_free(p);
}

enum { F_NONE, F_REPLICA, F_OFFSET, F_MISSING, F_VALUE };

/* Rank `rank` of the 2-rank tensor-parallel run: out rows [0,3) on rank 0
 * and [3,4) on rank 1 (uneven), the weight whole on both, the partial's
 * pieces a and b. */
static void write_rank(const char *dir, const char *task, int rank, int fault)
{
    np_probe *p = open_probe(dir, task, rank, 2);
    if (!p)
        return;
    np_error err;
    np_error_clear(&err);
    const char *dims[1] = {"tp"};
    int64_t shape[1] = {2}, coords[1] = {rank};
    CHECK_EQ_INT(np_probe_set_mesh(p, 1, dims, shape, coords, &err), NP_OK);
    float w[6];
    memcpy(w, g_w, sizeof w);
    if (fault == F_REPLICA && rank == 1)
        w[4] += 0.125f; /* a replica that drifted */
    int64_t rows = rank == 0 ? 3 : 1, off = rank == 0 ? 0 : 3;
    if (fault == F_OFFSET && rank == 1)
        off = 2; /* the neighbour's offset: overlaps rank 0's rows */
    float bad[3] = {g_out[9] + 0.5f, g_out[10], g_out[11]}; /* F_VALUE: rank 1's row wrong */
    float *mine = fault == F_VALUE && rank == 1 ? bad : g_out + (rank == 0 ? 0 : 9);
    np_tensor o = np_test_mat(mine, rows, 3), wt = np_test_mat(w, 2, 3),
              q = np_test_mat(rank == 0 ? g_a : g_b, 2, 2);
    CHECK_EQ_INT(np_probe_step_begin(p, 0, &err), NP_OK);
    CHECK_EQ_INT(np_probe_dump(p, "Functional.mean.0.forward", NP_ROLE_OUTPUT, "0", &q, &err),
                 NP_OK);
    np_place_rec ra = np_test_place("Partial(avg)", 2, 2, 0, 0);
    CHECK_EQ_INT(np_probe_place(p, "Functional.mean.0.forward", NP_ROLE_OUTPUT, "0", &ra, &err),
                 NP_OK);
    CHECK_EQ_INT(np_probe_dump(p, "Functional.matmul.0.forward", NP_ROLE_OUTPUT, "0", &q, &err),
                 NP_OK);
    np_place_rec r = np_test_place("Partial(sum)", 2, 2, 0, 0);
    CHECK_EQ_INT(np_probe_place(p, "Functional.matmul.0.forward", NP_ROLE_OUTPUT, "0", &r, &err),
                 NP_OK);
    CHECK_EQ_INT(np_probe_dump(p, CALL, NP_ROLE_PARAMETERS, "weight", &wt, &err), NP_OK);
    r = np_test_place("Replicate()", 2, 3, 0, 0);
    CHECK_EQ_INT(np_probe_place(p, CALL, NP_ROLE_PARAMETERS, "weight", &r, &err), NP_OK);
    CHECK_EQ_INT(np_probe_dump(p, CALL, NP_ROLE_OUTPUT, "0", &o, &err), NP_OK);
    r = np_test_place("Shard(0)", 4, 3, off, 0);
    CHECK_EQ_INT(np_probe_place(p, CALL, NP_ROLE_OUTPUT, "0", &r, &err), NP_OK);
    CHECK_EQ_INT(np_probe_close(p, NULL, &err), NP_OK);
    np_probe_free(p);
}

static np_cmp_result *run(const char *bench, const char *cmp)
{
    np_cmp_options o;
    np_cmp_options_init(&o);
    o.no_replay = 1;
    np_cmp_result *r = NULL;
    np_error err;
    np_error_clear(&err);
    np_status st = np_cmp_run(&r, bench, cmp, &o, &err);
    CHECK_MSG(st == NP_OK, "%s", err.text);
    return r;
}

static const np_cmp_row *row_of(const np_cmp_pair *p, const char *name)
{
    for (size_t i = 0; i < p->n_rows; i++)
        if (p->rows[i].cmp && !strcmp(p->rows[i].cmp->name, name))
            return &p->rows[i];
    return NULL;
}

static void check_clean(const char *task)
{
    char b[400], c[400];
    snprintf(b, sizeof b, "%s/%s_single", g_tmp, task);
    snprintf(c, sizeof c, "%s/%s_tp2", g_tmp, task);
    np_cmp_result *r = run(b, c);
    if (!r)
        return;
    CHECK_EQ_INT(r->n_pairs, 1); /* the two ranks are one logical step */
    CHECK_EQ_INT(r->n_issues, 0);
    CHECK_EQ_INT(np_cmp_has_differences(r), 0);
    const np_cmp_pair *p = &r->pairs[0];
    CHECK_CONTAINS(p->notes, "Sharded layout (mesh tp=2)");
    const np_cmp_row *o = row_of(p, OUT);
    CHECK(o != NULL);
    if (o) {
        /* the logical tensor's statistics, in float64 here */
        double mx = -INFINITY, mn = INFINITY, s = 0, q = 0;
        for (int i = 0; i < 12; i++) {
            mx = fmax(mx, g_out[i]);
            mn = fmin(mn, g_out[i]);
            s += g_out[i];
            q += (double)g_out[i] * g_out[i];
        }
        CHECK_EQ_INT(o->cmp->numel, 12);
        CHECK_EQ_INT(o->cmp->shape[0], 4);
        CHECK_EQ_FLOAT(o->cmp->stats.max, mx);
        CHECK_EQ_FLOAT(o->cmp->stats.min, mn);
        CHECK_CLOSE(o->cmp->stats.mean, s / 12, 1e-12, 1e-9);
        CHECK_CLOSE(o->cmp->stats.norm, sqrt(q), 1e-12, 1e-9);
        CHECK_EQ_INT(o->verdict, NP_VERDICT_PASS);
        if (o->m)
            CHECK_EQ_FLOAT(o->m->max_abs_err, 0.0);
        /* tensor mode: the assembled tensor's crc32 is the one the
         * one-process probe stored for the whole tensor (the verdicts know
         * a tensor by its values through it) */
        if (!strcmp(task, "tensor"))
            CHECK_EQ_INT((long long)o->cmp->crc32, (long long)o->bench->crc32);
    }
    const np_cmp_row *q = row_of(p, PART), *a = row_of(p, AVG);
    if (!strcmp(task, "tensor")) {
        CHECK(q != NULL);
        if (q) {
            CHECK_EQ_FLOAT(q->cmp->stats.max, 4.0);  /* a + b = {4, 3, 2, 1} */
            CHECK_EQ_FLOAT(q->cmp->stats.min, 1.0);
            CHECK_EQ_INT(q->verdict, NP_VERDICT_PASS);
        }
        CHECK(a != NULL);
        if (a) {
            CHECK_EQ_FLOAT(a->cmp->stats.max, 2.0);  /* (a + b) / 2 = {2, 1.5, 1, 0.5} */
            CHECK_EQ_FLOAT(a->cmp->stats.min, 0.5);
            CHECK_EQ_FLOAT(a->cmp->stats.mean, 1.25);
            CHECK_EQ_INT(a->verdict, NP_VERDICT_PASS);
            if (a->m)
                CHECK_EQ_FLOAT(a->m->max_abs_err, 0.0);
        }
    } else {
        CHECK(q == NULL); /* a sum cannot be formed from statistics */
        CHECK(a == NULL); /* nor a mean */
        for (size_t i = 0; i < p->n_rows; i++) /* nor does it stand on the bench side alone */
            CHECK(!p->rows[i].bench || strcmp(p->rows[i].bench->name, PART) != 0);
        CHECK_CONTAINS(p->notes, "Partial(sum) leaf(s) left out");
    }
    np_cmp_result_free(r);
}

static void check_fault(const char *dir, const char *want1, const char *want2, int defect)
{
    char b[400];
    snprintf(b, sizeof b, "%s/tensor_single", g_tmp);
    np_cmp_result *r = run(b, dir);
    if (!r)
        return;
    CHECK_EQ_INT(np_cmp_has_differences(r), 1);
    if (r->n_pairs == 1) {
        const np_cmp_pair *p = &r->pairs[0];
        CHECK_CONTAINS(p->notes, want1);
        CHECK_CONTAINS(p->notes, want2);
        if (defect) {
            const np_cmp_row *o = row_of(p, OUT);
            CHECK(o && o->verdict == NP_VERDICT_ERROR && o->cmp->defect != NULL);
        } else {
            CHECK_EQ_INT(p->replica_diffs, 1); /* rank 0's copy passes: the pair still fails */
        }
    }
    np_cmp_result_free(r);
}

/* Rank 1's shard of OUT holds a wrong value: the first culprit (the call
 * of OUT) names rank 1 alone as the rank whose piece differs. */
static void check_blame(const char *dir)
{
    char b[400];
    snprintf(b, sizeof b, "%s/tensor_single", g_tmp);
    np_cmp_result *r = run(b, dir);
    if (!r)
        return;
    CHECK_EQ_INT(np_cmp_has_differences(r), 1);
    CHECK_EQ_INT(r->n_pairs, 1);
    if (r->n_pairs == 1) {
        const np_cmp_pair *p = &r->pairs[0];
        CHECK(p->n_culprits >= 1);
        if (p->n_culprits >= 1) {
            const np_cmp_call *c = &p->calls[p->culprits[0]];
            CHECK(!strcmp(c->name, CALL));
            CHECK_CONTAINS(c->reason, "the rank(s) whose piece of " OUT
                                      " differs from the bench: rank 1 (tp=1)");
            CHECK(strstr(c->reason, "rank 0") == NULL);
        }
    }
    np_cmp_result_free(r);
}

/* A 2-stage pipeline, 2 micro-batches of one row (mesh pp x mb): stage r's
 * Functional.linear.0 (micro-batch 0) and .1 (micro-batch 1) are the rows
 * of the one process's Functional.linear.r (stage 0's output g_out rows
 * 0-1, stage 1's rows 2-3). `bad`: stage 1's micro-batch 1 row off. */
static void write_pp(const char *dir, int rank, int bad)
{
    /* a framework's pipeline (the package's): each stage counts its calls from
     * 0 (the runtime's stages carry one process's counters and are merged
     * whole: test_dist_pp) */
    np_probe *p = open_probe_as(dir, "tensor", rank, 2, "pytorch");
    if (!p)
        return;
    np_error err;
    np_error_clear(&err);
    const char *dims[2] = {"pp", "mb"};
    int64_t shape[2] = {2, 2}, coords[2] = {rank, 0};
    CHECK_EQ_INT(np_probe_set_mesh(p, 2, dims, shape, coords, &err), NP_OK);
    CHECK_EQ_INT(np_probe_step_begin(p, 0, &err), NP_OK);
    for (int m = 0; m < 2; m++) {
        float row[3];
        memcpy(row, g_out + 3 * (2 * rank + m), sizeof row);
        if (bad && rank == 1 && m == 1)
            row[1] += 0.5f;
        char call[64];
        snprintf(call, sizeof call, "Functional.linear.%d.forward", m);
        np_tensor t = np_test_mat(row, 1, 3);
        CHECK_EQ_INT(np_probe_dump(p, call, NP_ROLE_OUTPUT, "0", &t, &err), NP_OK);
        np_place_rec r = np_test_place("Replicate(),Shard(0)", 2, 3, m, 0);
        r.stage = rank;
        r.micro_batch = m;
        CHECK_EQ_INT(np_probe_place(p, call, NP_ROLE_OUTPUT, "0", &r, &err), NP_OK);
        /* the stage's module (counted by its path: the one process's name) */
        snprintf(call, sizeof call, "Module.layers.%d.Linear.forward.%d", rank, m);
        CHECK_EQ_INT(np_probe_dump(p, call, NP_ROLE_OUTPUT, "0", &t, &err), NP_OK);
        CHECK_EQ_INT(np_probe_place(p, call, NP_ROLE_OUTPUT, "0", &r, &err), NP_OK);
    }
    CHECK_EQ_INT(np_probe_close(p, NULL, &err), NP_OK);
    np_probe_free(p);
}

/* Stage 1's file without stage 0's: its API calls cannot be numbered as
 * one process numbers them, so they are left out (not paired with the one
 * process's Functional.linear.0, stage 0's), with a note naming the missing
 * stage and rank; its module's rows (the one process's names) compare
 * clean, assembled from both micro-batches. */
static void check_pipeline_missing(const char *b)
{
    char c[400], d[400];
    snprintf(d, sizeof d, "%s/pp_missing", g_tmp);
    write_pp(d, 1, 0);
    snprintf(c, sizeof c, "%s/pp_missing/step0/rank1/dump.h5", g_tmp);
    np_cmp_result *r = run(b, c);
    if (!r)
        return;
    CHECK_EQ_INT(np_cmp_has_differences(r), 0);
    const np_cmp_pair *q = r->n_pairs == 1 ? &r->pairs[0] : NULL;
    CHECK(q != NULL);
    const np_cmp_row *o = q ? row_of(q, "Module.layers.1.Linear.forward.0.output.0") : NULL;
    CHECK(o && o->bench && o->cmp->numel == 6 && o->verdict == NP_VERDICT_PASS);
    CHECK(q && !row_of(q, "Functional.linear.0.forward.output.0"));
    CHECK(q && !row_of(q, "Functional.linear.1.forward.output.0"));
    if (q) {
        CHECK_CONTAINS(q->notes, "stage 0 has no file beside this one (no file for rank(s) 0)");
        CHECK_CONTAINS(q->notes, "its 1 API call row(s) are left out");
    }
    np_cmp_result_free(r);
}

/* An interleaved schedule on one rank (pp 1): its file holds stages 0 and
 * 1 (layers.0 and layers.1), its API calls counted through both in the
 * schedule's order (micro-batch 0's stage 0 and 1, then micro-batch 1's:
 * Functional.linear.0 .. 3): each stage's are given one process's numbers
 * (stage 1's first linear is the process's Functional.linear.1), and the
 * API and module rows are assembled from both micro-batches and compare
 * clean; `bad`: stage 1's linear of micro-batch 1 (the file's
 * Functional.linear.3) off, named at Functional.linear.1.forward with its
 * micro-batch, its module passing. */
static void check_interleaved(const char *b, int bad)
{
    char c[400], d[400];
    snprintf(d, sizeof d, "%s/pp_il%d", g_tmp, bad);
    np_probe *p = open_probe_as(d, "tensor", 0, 1, "pytorch");
    if (!p)
        return;
    np_error err;
    np_error_clear(&err);
    const char *dims[2] = {"pp", "mb"};
    int64_t shape[2] = {1, 2}, coords[2] = {0, 0};
    CHECK_EQ_INT(np_probe_set_mesh(p, 2, dims, shape, coords, &err), NP_OK);
    CHECK_EQ_INT(np_probe_step_begin(p, 0, &err), NP_OK);
    for (int m = 0; m < 2; m++)
        for (int st = 0; st < 2; st++) {
            float row[3];
            memcpy(row, g_out + 3 * (2 * st + m), sizeof row);
            np_tensor t = np_test_mat(row, 1, 3);
            np_place_rec r = np_test_place("Replicate(),Shard(0)", 2, 3, m, 0);
            r.stage = st;
            r.micro_batch = m;
            char call[64];
            snprintf(call, sizeof call, "Module.layers.%d.Linear.forward.%d", st, m);
            CHECK_EQ_INT(np_probe_dump(p, call, NP_ROLE_OUTPUT, "0", &t, &err), NP_OK);
            CHECK_EQ_INT(np_probe_place(p, call, NP_ROLE_OUTPUT, "0", &r, &err), NP_OK);
            float api[3];
            memcpy(api, row, sizeof api);
            if (bad && st == 1 && m == 1)
                api[2] -= 0.5f;
            np_tensor ta = np_test_mat(api, 1, 3);
            snprintf(call, sizeof call, "Functional.linear.%d.forward", 2 * m + st);
            CHECK_EQ_INT(np_probe_dump(p, call, NP_ROLE_OUTPUT, "0", &ta, &err), NP_OK);
            CHECK_EQ_INT(np_probe_place(p, call, NP_ROLE_OUTPUT, "0", &r, &err), NP_OK);
        }
    CHECK_EQ_INT(np_probe_close(p, NULL, &err), NP_OK);
    np_probe_free(p);
    snprintf(c, sizeof c, "%s/pp_il%d/step0/rank0/dump.h5", g_tmp, bad);
    np_cmp_result *res = run(b, c);
    if (!res)
        return;
    CHECK_EQ_INT(np_cmp_has_differences(res), bad);
    const np_cmp_pair *q = res->n_pairs == 1 ? &res->pairs[0] : NULL;
    CHECK(q != NULL);
    for (int st = 0; st < 2 && q; st++) {
        char name[80];
        snprintf(name, sizeof name, "Module.layers.%d.Linear.forward.0.output.0", st);
        const np_cmp_row *o = row_of(q, name);
        CHECK(o && o->bench && o->cmp->numel == 6 && o->verdict == NP_VERDICT_PASS);
        snprintf(name, sizeof name, "Functional.linear.%d.forward.output.0", st);
        o = row_of(q, name);
        CHECK(o && o->bench && o->cmp->numel == 6 &&
              o->verdict == (bad && st ? NP_VERDICT_ERROR : NP_VERDICT_PASS));
    }
    CHECK(q && !row_of(q, "Functional.linear.2.forward.output.0"));
    CHECK(q && !strstr(q->notes, "left out"));
    if (q && bad) {
        CHECK(q->n_culprits >= 1);
        const np_cmp_call *k = q->n_culprits ? &q->calls[q->culprits[0]] : NULL;
        CHECK(k && !strcmp(k->name, "Functional.linear.1.forward"));
        if (k) {
            CHECK_CONTAINS(k->reason, "differs from the bench: rank 0 (pp=0, mb=1)");
            CHECK(strstr(k->reason, "mb=0") == NULL);
        }
    }
    np_cmp_result_free(res);
}

/* Data parallel over micro-batches whose batches differ in size (mesh dp x
 * mb, 2 ranks): a 5-row logical tensor, rank 0's batch rows 0-2 in
 * micro-batches of 2 and 1 rows, rank 1's rows 3-4 in 1 and 1. Each rank
 * writes its offsets as if every rank's batch were its own (rank 0: global
 * 6, offsets 0 and 2; rank 1: global 4, offsets 2 and 3: overlapping rank
 * 0's); compare derives them from the row counts (0, 2, 3, 4 of 5): clean
 * against the one process's 5 rows; `bad`: rank 1's micro-batch 1 row off,
 * named with its rank and micro-batch alone. */
static void check_uneven_dp(int bad)
{
    static const int rows[2][2] = {{2, 1}, {1, 1}}, start[2] = {0, 3};
    float v[15];
    for (int i = 0; i < 15; i++)
        v[i] = 0.5f * (float)(i * 5 % 7) - 1.0f;
    char b[400], c[400], d[400];
    np_error err;
    np_error_clear(&err);
    snprintf(d, sizeof d, "%s/udp_single", g_tmp);
    np_probe *p = bad ? NULL : open_probe(d, "tensor", 0, 1);
    if (p) {
        np_tensor t = np_test_mat(v, 5, 3);
        CHECK_EQ_INT(np_probe_step_begin(p, 0, &err), NP_OK);
        CHECK_EQ_INT(np_probe_dump(p, "Functional.linear.0.forward", NP_ROLE_OUTPUT, "0", &t, &err),
                     NP_OK);
        CHECK_EQ_INT(np_probe_close(p, NULL, &err), NP_OK);
        np_probe_free(p);
    }
    snprintf(d, sizeof d, "%s/udp%d", g_tmp, bad);
    for (int rank = 0; rank < 2; rank++) {
        p = open_probe_as(d, "tensor", rank, 2, "pytorch");
        if (!p)
            return;
        const char *dims[2] = {"dp", "mb"};
        int64_t shape[2] = {2, 2}, coords[2] = {rank, 0};
        CHECK_EQ_INT(np_probe_set_mesh(p, 2, dims, shape, coords, &err), NP_OK);
        CHECK_EQ_INT(np_probe_step_begin(p, 0, &err), NP_OK);
        int64_t local = rows[rank][0] + rows[rank][1];
        for (int m = 0, at = start[rank]; m < 2; at += rows[rank][m], m++) {
            float piece[6];
            memcpy(piece, v + 3 * at, (size_t)(3 * rows[rank][m]) * sizeof *piece);
            if (bad && rank == 1 && m == 1)
                piece[1] += 0.5f;
            char call[64];
            snprintf(call, sizeof call, "Functional.linear.%d.forward", m);
            np_tensor t = np_test_mat(piece, rows[rank][m], 3);
            CHECK_EQ_INT(np_probe_dump(p, call, NP_ROLE_OUTPUT, "0", &t, &err), NP_OK);
            np_place_rec r = np_test_place("Shard(0),Shard(0)", 2 * local, 3,
                                           rank * local + (m ? rows[rank][0] : 0), 0);
            r.micro_batch = m;
            CHECK_EQ_INT(np_probe_place(p, call, NP_ROLE_OUTPUT, "0", &r, &err), NP_OK);
        }
        CHECK_EQ_INT(np_probe_close(p, NULL, &err), NP_OK);
        np_probe_free(p);
    }
    snprintf(b, sizeof b, "%s/udp_single/step0/rank0/dump.h5", g_tmp);
    snprintf(c, sizeof c, "%s/udp%d/step0/rank0/dump.h5", g_tmp, bad);
    np_cmp_result *r = run(b, c);
    if (!r)
        return;
    CHECK_EQ_INT(np_cmp_has_differences(r), bad);
    const np_cmp_pair *q = r->n_pairs == 1 ? &r->pairs[0] : NULL;
    const np_cmp_row *o = q ? row_of(q, "Functional.linear.0.forward.output.0") : NULL;
    CHECK(o && o->bench && o->cmp->numel == 15 && o->cmp->defect == NULL);
    if (o && !bad)
        CHECK(o->verdict == NP_VERDICT_PASS && o->m && o->m->max_abs_err == 0.0);
    if (q && bad) {
        const np_cmp_call *k = q->n_culprits ? &q->calls[q->culprits[0]] : NULL;
        CHECK(k && !strcmp(k->name, "Functional.linear.0.forward"));
        if (k) {
            CHECK_CONTAINS(k->reason, "differs from the bench: rank 1 (dp=1, mb=1)");
            CHECK(strstr(k->reason, "rank 0") == NULL && strstr(k->reason, "mb=0") == NULL);
        }
    }
    np_cmp_result_free(r);
}

/* Stage 1's file against the one process: its Functional.linear.0 is the
 * process's Functional.linear.1 (stage 0 makes one linear a micro-batch),
 * assembled from both micro-batches, and stage 0's Functional.linear.0 is
 * no replica of it; the wrong row is named with its micro-batch. */
static void check_pipeline(void)
{
    char b[400], c[400], d[400];
    snprintf(d, sizeof d, "%s/pp_single", g_tmp);
    np_probe *p = open_probe(d, "tensor", 0, 1);
    if (p) {
        np_error err;
        np_error_clear(&err);
        CHECK_EQ_INT(np_probe_step_begin(p, 0, &err), NP_OK);
        for (int k = 0; k < 2; k++) {
            char call[64];
            snprintf(call, sizeof call, "Functional.linear.%d.forward", k);
            np_tensor t = np_test_mat(g_out + 6 * k, 2, 3);
            CHECK_EQ_INT(np_probe_dump(p, call, NP_ROLE_OUTPUT, "0", &t, &err), NP_OK);
            snprintf(call, sizeof call, "Module.layers.%d.Linear.forward.0", k);
            CHECK_EQ_INT(np_probe_dump(p, call, NP_ROLE_OUTPUT, "0", &t, &err), NP_OK);
        }
        CHECK_EQ_INT(np_probe_close(p, NULL, &err), NP_OK);
        np_probe_free(p);
    }
    snprintf(b, sizeof b, "%s/pp_single/step0/rank0/dump.h5", g_tmp);
    for (int bad = 0; bad < 2; bad++) {
        snprintf(d, sizeof d, "%s/pp%d", g_tmp, bad);
        write_pp(d, 0, bad);
        write_pp(d, 1, bad);
        snprintf(c, sizeof c, "%s/pp%d/step0/rank1/dump.h5", g_tmp, bad);
        np_cmp_result *r = run(b, c);
        if (!r)
            continue;
        CHECK_EQ_INT(np_cmp_has_differences(r), bad);
        const np_cmp_pair *q = r->n_pairs == 1 ? &r->pairs[0] : NULL;
        CHECK(q != NULL);
        const np_cmp_row *o = q ? row_of(q, "Functional.linear.1.forward.output.0") : NULL;
        CHECK(o && o->bench && o->cmp->numel == 6);
        CHECK(q && !row_of(q, "Functional.linear.0.forward.output.0"));
        if (q && !bad) {
            CHECK_EQ_INT(q->replica_diffs, 0);
            CHECK(o && o->verdict == NP_VERDICT_PASS && o->m && o->m->max_abs_err == 0.0);
            CHECK_CONTAINS(q->notes, "Sharded layout (mesh pp=2, mb=2)");
        } else if (q && q->n_culprits) {
            const np_cmp_call *k = &q->calls[q->culprits[0]];
            CHECK(!strcmp(k->name, "Functional.linear.1.forward"));
            CHECK_CONTAINS(k->reason, "differs from the bench: rank 1 (pp=1, mb=1)");
            CHECK(strstr(k->reason, "mb=0") == NULL);
        } else {
            CHECK(q && q->n_culprits > 0);
        }
        np_cmp_result_free(r);
    }
    check_pipeline_missing(b);
    check_interleaved(b, 0);
    check_interleaved(b, 1);
    check_uneven_dp(0);
    check_uneven_dp(1);
}

#define EXP0 "Module.experts.0.Expert.forward.0"
#define EXP1 "Module.experts.1.Expert.forward.0"
#define ROUTE "Torch.argsort.0.forward"

/* Expert parallel: one process runs both experts (world 1); rank e of a
 * 2-rank mesh "ep" holds experts.e alone, its rows as one process names
 * them, and its own routing positions (Local()); `bad`: rank 1's expert
 * output one element off. */
static void write_experts(const char *dir, int rank, int world, int bad)
{
    np_probe *p = open_probe_as(dir, "tensor", rank, world, "pytorch");
    if (!p)
        return;
    np_error err;
    np_error_clear(&err);
    const char *dims[1] = {"ep"};
    int64_t shape[1] = {2}, coords[1] = {rank};
    if (world > 1)
        CHECK_EQ_INT(np_probe_set_mesh(p, 1, dims, shape, coords, &err), NP_OK);
    float route[4] = {0, 2, 1, 3}, out[2][6];
    for (int e = 0; e < 2; e++)
        for (int i = 0; i < 6; i++)
            out[e][i] = g_w[i] + (float)e + (bad && e == 1 && i == 4 ? 0.5f : 0.0f);
    CHECK_EQ_INT(np_probe_step_begin(p, 0, &err), NP_OK);
    np_tensor rt = np_test_mat(world > 1 ? route + 2 * rank : route, world > 1 ? 2 : 4, 1);
    CHECK_EQ_INT(np_probe_dump(p, ROUTE, NP_ROLE_OUTPUT, "0", &rt, &err), NP_OK);
    np_place_rec r = np_test_place("Local()", 2, 1, 0, 0);
    if (world > 1)
        CHECK_EQ_INT(np_probe_place(p, ROUTE, NP_ROLE_OUTPUT, "0", &r, &err), NP_OK);
    for (int e = 0; e < 2; e++) {
        if (world > 1 && e != rank)
            continue;
        np_tensor o = np_test_mat(out[e], 2, 3);
        CHECK_EQ_INT(np_probe_dump(p, e ? EXP1 : EXP0, NP_ROLE_OUTPUT, "0", &o, &err), NP_OK);
    }
    CHECK_EQ_INT(np_probe_close(p, NULL, &err), NP_OK);
    np_probe_free(p);
}

/* Every expert compared from the rank holding it (rank 1's experts.1 in
 * rank 0's pair), after experts.0 in the calls' order; the Local() routing
 * left out on both sides; rank 1's wrong expert output an error. */
static void check_experts(void)
{
    char b[400], c[400], bad[400];
    snprintf(b, sizeof b, "%s/ep_single", g_tmp);
    snprintf(c, sizeof c, "%s/ep2", g_tmp);
    snprintf(bad, sizeof bad, "%s/ep2_bad", g_tmp);
    write_experts(b, 0, 1, 0);
    for (int r = 0; r < 2; r++) {
        write_experts(c, r, 2, 0);
        write_experts(bad, r, 2, 1);
    }
    np_cmp_result *res = run(b, c);
    if (res && res->n_pairs == 1) {
        const np_cmp_pair *p = &res->pairs[0];
        CHECK_EQ_INT(np_cmp_has_differences(res), 0);
        const np_cmp_row *e0 = row_of(p, EXP0 ".output.0"), *e1 = row_of(p, EXP1 ".output.0");
        CHECK(e0 && e0->verdict == NP_VERDICT_PASS);
        CHECK(e1 && e1->verdict == NP_VERDICT_PASS && e0 < e1);
        for (size_t i = 0; i < p->n_rows; i++)
            CHECK((!p->rows[i].bench || strncmp(p->rows[i].bench->name, ROUTE, 15) != 0) &&
                  (!p->rows[i].cmp || strncmp(p->rows[i].cmp->name, ROUTE, 15) != 0));
        CHECK_CONTAINS(p->notes, "1 Local() leaf(s) left out on both sides");
        CHECK_CONTAINS(p->notes, "1 leaf(s) held only by other ranks of the step");
    } else {
        CHECK(res && res->n_pairs == 1);
    }
    if (res)
        np_cmp_result_free(res);
    res = run(b, bad);
    if (res && res->n_pairs == 1) {
        const np_cmp_row *e1 = row_of(&res->pairs[0], EXP1 ".output.0");
        CHECK(e1 && e1->verdict == NP_VERDICT_ERROR);
        CHECK_EQ_INT(np_cmp_has_differences(res), 1);
    }
    if (res)
        np_cmp_result_free(res);
}

/* dp x ep: mesh (dp=2, ep=2), rank 2c + e holds experts.e for dp group c,
 * its K_e outputs (K_0 = 1, K_1 = 5: rank 0's file has fewer rows than the
 * merged ones of experts.1) of the tokens its group routed to expert e:
 * EP_ROWS[e][c] rows at EP_AT[e][c] of the one process's 4 (expert 0: 1
 * and 3, so each rank writes its offset as if the other's were as many:
 * compare derives them; expert 1: none on rank 1, an empty piece without
 * a payload, all 4 on rank 3). One process (world 1): every expert's 4 rows.
 * `bad`: rank 3's output.0 one element off. */
static const int EP_ROWS[2][2] = {{1, 3}, {0, 4}}, EP_AT[2][2] = {{0, 1}, {0, 0}};

static float ep_val(int e, int k, int row, int col)
{
    return (float)e + 0.25f * (float)k + (float)row + 0.125f * (float)col;
}

static void write_dpep(const char *dir, int rank, int world, int bad)
{
    np_probe *p = open_probe_as(dir, "tensor", rank, world, "pytorch");
    if (!p)
        return;
    np_error err;
    np_error_clear(&err);
    const char *dims[2] = {"dp", "ep"};
    int64_t shape[2] = {2, 2}, coords[2] = {rank / 2, rank % 2};
    if (world > 1)
        CHECK_EQ_INT(np_probe_set_mesh(p, 2, dims, shape, coords, &err), NP_OK);
    CHECK_EQ_INT(np_probe_step_begin(p, 0, &err), NP_OK);
    for (int e = 0; e < 2; e++) {
        if (world > 1 && e != rank % 2)
            continue;
        int c = rank / 2, n = world > 1 ? EP_ROWS[e][c] : 4, at = world > 1 ? EP_AT[e][c] : 0;
        for (int k = 0; k < 1 + 4 * e; k++) {
            float v[4 * 3];
            for (int i = 0; i < n * 3; i++)
                v[i] = ep_val(e, k, at + i / 3, i % 3) +
                       (bad && rank == 3 && k == 0 && i == 1 ? 0.5f : 0.0f);
            np_tensor o = np_test_mat(v, n, 3);
            if (n == 0)
                o.data = NULL; /* as the package hands an empty tensor: no storage */
            char key[8];
            snprintf(key, sizeof key, "%d", k);
            CHECK_EQ_INT(np_probe_dump(p, e ? EXP1 : EXP0, NP_ROLE_OUTPUT, key, &o, &err),
                         NP_OK);
            np_place_rec r = np_test_place("Shard(0),Replicate()", 2 * n, 3, c * n, 0);
            if (world > 1)
                CHECK_EQ_INT(np_probe_place(p, e ? EXP1 : EXP0, NP_ROLE_OUTPUT, key, &r, &err),
                             NP_OK);
        }
    }
    CHECK_EQ_INT(np_probe_close(p, NULL, &err), NP_OK);
    np_probe_free(p);
}

/* Rank 0's pair: experts.0 assembled from ranks 0 and 2 (1 + 3 rows),
 * experts.1's 5 leaves from ranks 1 and 3 (0 + 4), all passing; rank 3's
 * wrong element an error named with rank 3 (dp=1, ep=1). (Before, the
 * merged rows overran the assembly's leaves, sized for the own file's
 * rows, and an empty piece made the logical tensor one without a payload:
 * "has_data is 0 on the cmp side".) */
static void check_dpep(void)
{
    char b[400], c[400], bad[400];
    snprintf(b, sizeof b, "%s/dpep_single", g_tmp);
    snprintf(c, sizeof c, "%s/dpep", g_tmp);
    snprintf(bad, sizeof bad, "%s/dpep_bad", g_tmp);
    write_dpep(b, 0, 1, 0);
    for (int r = 0; r < 4; r++) {
        write_dpep(c, r, 4, 0);
        write_dpep(bad, r, 4, 1);
    }
    for (int wrong = 0; wrong < 2; wrong++) {
        np_cmp_result *res = run(b, wrong ? bad : c);
        const np_cmp_pair *p = res && res->n_pairs == 1 ? &res->pairs[0] : NULL;
        CHECK(p != NULL);
        if (p) {
            CHECK_EQ_INT(np_cmp_has_differences(res), wrong);
            for (int k = 0; k < 5; k++) {
                char nm[96];
                snprintf(nm, sizeof nm, EXP1 ".output.%d", k);
                const np_cmp_row *o = row_of(p, nm);
                CHECK(o && o->cmp->numel == 12 && o->cmp->defect == NULL);
                CHECK(o && o->verdict == (wrong && k == 0 ? NP_VERDICT_ERROR : NP_VERDICT_PASS));
            }
            const np_cmp_row *o = row_of(p, EXP0 ".output.0");
            CHECK(o && o->cmp->numel == 12 && o->verdict == NP_VERDICT_PASS && o->m &&
                  o->m->max_abs_err == 0.0);
            CHECK_CONTAINS(p->notes, "5 leaf(s) held only by other ranks of the step");
            const np_cmp_call *k = p->n_culprits ? &p->calls[p->culprits[0]] : NULL;
            CHECK(wrong ? k && strstr(k->reason, "rank 3 (dp=1, ep=1)") &&
                              !strstr(k->reason, "rank 1 ")
                        : k == NULL);
        }
        if (res)
            np_cmp_result_free(res);
    }
}

/* ---- expert parallel's routing in the root cause ----------------------------------
 * A MoE layer (Module.moe.MoE.forward.0) on 4 tokens x 3, top-1 to 2
 * experts (tokens 0-1 to expert 0, 2-3 to expert 1; expert e: 2 x + e).
 * One process splits the sorted tokens (Torch.split.0, its own call) and
 * runs Functional.linear.0 (expert 0) and .1, then puts the outputs back
 * (Tensor.index_copy.0: zeros, source). Rank r of an ep=2 mesh holds
 * tokens 2r, 2r + 1 and expert r: it dispatches (Distributed.
 * all_to_all_single.0: what it sends and receives Local(), each rank's
 * own), runs Functional.linear.r, combines back (all_to_all_single.1,
 * Local()), index_copies into its half (zeros and output Shard(0), the
 * source Local()). EPR_DISPATCH: rank 0's expert receives one token
 * element 0.5 off (a wrong dispatch); EPR_COMBINE: rank 1 gets one element
 * of its expert's output back 0.5 off (a wrong combine). */
#define MOE "Module.moe.MoE.forward.0"
#define A2A0 "Distributed.all_to_all_single.0.forward"
#define A2A1 "Distributed.all_to_all_single.1.forward"
#define ICOPY "Tensor.index_copy.0.forward"
enum { EPR_CLEAN, EPR_DISPATCH, EPR_COMBINE };

static void epr_dump(np_probe *p, const char *call, np_role role, const char *key, float *v,
                     int rows, const char *pl, int64_t off)
{
    np_error err;
    np_error_clear(&err);
    np_tensor t = np_test_mat(v, rows, 3);
    CHECK_EQ_INT(np_probe_dump(p, call, role, key, &t, &err), NP_OK);
    if (pl) {
        np_place_rec r = !strcmp(pl, "Local()") ? np_test_place(pl, rows, 3, 0, 0)
                                                : np_test_place(pl, 4, 3, off, 0);
        CHECK_EQ_INT(np_probe_place(p, call, role, key, &r, &err), NP_OK);
    }
}

static void epr_begin(np_probe *p, const char *call, const char *parent)
{
    np_error err;
    np_error_clear(&err);
    CHECK_EQ_INT(np_probe_call_begin(p, call, parent, "moe.py:1 forward", &err), NP_OK);
}

/* rank -1: the one process */
static void write_ep_routing(const char *dir, int rank, int fault)
{
    np_probe *p = open_probe_as(dir, "tensor", rank < 0 ? 0 : rank, rank < 0 ? 1 : 2,
                                "pytorch");
    if (!p)
        return;
    np_error err;
    np_error_clear(&err);
    const char *dims[1] = {"ep"};
    int64_t shape[1] = {2}, coords[1] = {rank};
    if (rank >= 0)
        CHECK_EQ_INT(np_probe_set_mesh(p, 1, dims, shape, coords, &err), NP_OK);
    float x[12], y[12], zeros[12] = {0}, in[12];
    for (int i = 0; i < 12; i++) {
        x[i] = g_out[i];
        y[i] = 2.0f * x[i] + (float)(i / 6);
    }
    CHECK_EQ_INT(np_probe_step_begin(p, 0, &err), NP_OK);
    char lin[64];
    if (rank < 0) {
        epr_begin(p, "Torch.split.0.forward", MOE);
        epr_dump(p, "Torch.split.0.forward", NP_ROLE_INPUT, "0", x, 4, NULL, 0);
        for (int e = 0; e < 2; e++) {
            snprintf(lin, sizeof lin, "Functional.linear.%d.forward", e);
            epr_begin(p, lin, MOE);
            epr_dump(p, lin, NP_ROLE_INPUT, "0", x + 6 * e, 2, NULL, 0);
            epr_dump(p, lin, NP_ROLE_OUTPUT, "0", y + 6 * e, 2, NULL, 0);
        }
        epr_begin(p, ICOPY, MOE);
        epr_dump(p, ICOPY, NP_ROLE_INPUT, "0", zeros, 4, NULL, 0);
        epr_dump(p, ICOPY, NP_ROLE_INPUT, "1", y, 4, NULL, 0);
        epr_dump(p, ICOPY, NP_ROLE_OUTPUT, "0", y, 4, NULL, 0);
        epr_begin(p, MOE, "");
        epr_dump(p, MOE, NP_ROLE_INPUT, "0", x, 4, NULL, 0);
        epr_dump(p, MOE, NP_ROLE_OUTPUT, "0", y, 4, NULL, 0);
    } else {
        float *mx = x + 6 * rank, *my = y + 6 * rank, out[6], back[6];
        memcpy(in, mx, 6 * sizeof *in);
        if (fault == EPR_DISPATCH && rank == 0)
            in[1] += 0.5f;
        for (int i = 0; i < 6; i++)
            out[i] = 2.0f * in[i] + (float)rank;
        memcpy(back, out, sizeof back);
        if (fault == EPR_COMBINE && rank == 1)
            back[4] += 0.5f;
        epr_begin(p, A2A0, MOE);
        epr_dump(p, A2A0, NP_ROLE_INPUT, "0", mx, 2, "Local()", 0);
        epr_dump(p, A2A0, NP_ROLE_OUTPUT, "0", in, 2, "Local()", 0);
        snprintf(lin, sizeof lin, "Functional.linear.%d.forward", rank);
        epr_begin(p, lin, MOE);
        epr_dump(p, lin, NP_ROLE_INPUT, "0", in, 2, NULL, 0);
        epr_dump(p, lin, NP_ROLE_OUTPUT, "0", out, 2, NULL, 0);
        epr_begin(p, A2A1, MOE);
        epr_dump(p, A2A1, NP_ROLE_INPUT, "0", out, 2, "Local()", 0);
        epr_dump(p, A2A1, NP_ROLE_OUTPUT, "0", back, 2, "Local()", 0);
        epr_begin(p, ICOPY, MOE);
        epr_dump(p, ICOPY, NP_ROLE_INPUT, "0", zeros, 2, "Shard(0)", 2 * rank);
        epr_dump(p, ICOPY, NP_ROLE_INPUT, "1", back, 2, "Local()", 0);
        epr_dump(p, ICOPY, NP_ROLE_OUTPUT, "0", back, 2, "Shard(0)", 2 * rank);
        epr_begin(p, MOE, "");
        epr_dump(p, MOE, NP_ROLE_INPUT, "0", mx, 2, "Shard(0)", 2 * rank);
        epr_dump(p, MOE, NP_ROLE_OUTPUT, "0", back, 2, "Shard(0)", 2 * rank);
        (void)my;
    }
    CHECK_EQ_INT(np_probe_close(p, NULL, &err), NP_OK);
    np_probe_free(p);
}

static const np_cmp_call *call_of(const np_cmp_pair *p, const char *name)
{
    for (size_t k = 0; k < p->n_calls; k++)
        if (!strcmp(p->calls[k].name, name))
            return &p->calls[k];
    return NULL;
}

/* Worked by hand: clean, no difference. A wrong dispatch: the first call
 * whose compared input or output is wrong is rank 0's Functional.linear.0
 * (its input, the tokens received; before it only the dispatch, whose
 * leaves are Local(), and the split, the one process's alone): the culprit,
 * its reason naming the dispatch, not the MoE module for the one process's
 * split (no gap: the module communicates on the EP side where the one
 * process splits); index_copy's output fails, its source Local() (unknown),
 * after a failing call: propagated, the only culprit linear.0. A wrong
 * combine: linear.0 and .1 pass, index_copy's output is the first wrong
 * one, its compared input (the zeros) passes but its source is Local():
 * the culprit, the reason saying its input is unknown, not "inputs pass". */
static void check_ep_routing(void)
{
    char b[400], d[400];
    snprintf(b, sizeof b, "%s/epr_single", g_tmp);
    write_ep_routing(b, -1, EPR_CLEAN);
    for (int f = EPR_CLEAN; f <= EPR_COMBINE; f++) {
        snprintf(d, sizeof d, "%s/epr%d", g_tmp, f);
        write_ep_routing(d, 0, f);
        write_ep_routing(d, 1, f);
        np_cmp_result *res = run(b, d);
        CHECK(res && res->n_pairs == 1);
        if (!res || res->n_pairs != 1) {
            if (res)
                np_cmp_result_free(res);
            continue;
        }
        const np_cmp_pair *p = &res->pairs[0];
        const np_cmp_call *ic = call_of(p, ICOPY), *moe = call_of(p, MOE);
        const np_cmp_call *first = p->n_culprits ? &p->calls[p->culprits[0]] : NULL;
        CHECK(ic && moe);
        CHECK_EQ_INT(np_cmp_has_differences(res), f != EPR_CLEAN);
        if (f == EPR_CLEAN || !ic || !moe) {
            CHECK_EQ_INT(p->n_culprits, 0);
        } else if (f == EPR_DISPATCH) {
            CHECK_EQ_INT(p->n_culprits, 1);
            CHECK(first && !strcmp(first->name, "Functional.linear.0.forward"));
            if (first)
                CHECK_CONTAINS(first->reason, "in " A2A0 " (a collective of the cmp side only");
            CHECK_EQ_INT(ic->status, NP_CALL_PROPAGATED);
            CHECK_CONTAINS(ic->reason, "an input is Local()");
            CHECK_EQ_INT(moe->status, NP_CALL_CONTAINS);
        } else {
            CHECK_EQ_INT(p->n_culprits, 1);
            CHECK(first == ic);
            CHECK_EQ_INT(ic->status, NP_CALL_CULPRIT);
            CHECK_CONTAINS(ic->reason, "an input is Local()");
            CHECK(strstr(ic->reason, "inputs pass, outputs fail") == NULL);
            const np_cmp_call *l1 = call_of(p, "Functional.linear.1.forward");
            CHECK(l1 && l1->status == NP_CALL_PASS);
        }
        np_cmp_result_free(res);
    }
}

/* ---- a logical tensor bigger than the assembly's buffers ----------------------
 * The assembly streams a logical tensor a range at a time (4 MB of float64
 * a chunk, 65536 elements a piece's read): a (3, 5, 40001) output split
 * unevenly on its last dimension (rank 0 columns [0, 20011), rank 1 the
 * rest, so every logical row is made of both ranks' pieces), a 600015-
 * element Partial(sum) and an input Shard(0) equal to the one-process
 * tensor, each larger than one chunk, must give the metrics the whole
 * logical tensor in memory gives (np_cmp_metrics_f64 on the values built
 * here, bit for bit), the statistics of the summed tensor, and the
 * one-process crc32 for the equal input. */
#define BIG_D0 3
#define BIG_D1 5
#define BIG_D2 40001
#define BIG_N ((int64_t)BIG_D0 * BIG_D1 * BIG_D2)
#define BIG_CUT 20011
#define BIG_OUT "Functional.linear.0.forward.output.0"
#define BIG_IN "Functional.linear.0.forward.input.0"
#define BIG_SUM "Functional.matmul.0.forward.output.0"

static np_tensor big_tensor(float *buf, int nd, const int64_t *shape)
{
    np_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = NP_FLOAT32;
    t.ndim = nd;
    t.numel = 1;
    for (int d = 0; d < nd; d++) {
        t.shape[d] = shape[d];
        t.numel *= shape[d];
    }
    t.data = buf;
    return t;
}

static np_place_rec big_place(const char *pl, int nd, const int64_t *g, const int64_t *off)
{
    np_place_rec r;
    memset(&r, 0, sizeof r);
    snprintf(r.placements, sizeof r.placements, "%s", pl);
    r.global_ndim = nd;
    for (int d = 0; d < nd; d++) {
        r.global_shape[d] = g[d];
        r.offset[d] = off[d];
    }
    r.stage = r.micro_batch = -1;
    return r;
}

/* bench: the one-process values; cmp: the run's logical output; a, c: the
 * Partial's pieces. */
static void big_values(float *bench, float *cmp, float *a, float *c)
{
    for (int64_t i = 0; i < BIG_N; i++) {
        bench[i] = (float)sin(0.001 * (double)i) + 0.25f;
        cmp[i] = bench[i] * (1.0f + 1e-3f * (float)((i * 7919) % 13 - 6));
        a[i] = (float)cos(0.0007 * (double)i);
        c[i] = 0.5f * bench[i] - a[i] * 0.125f;
    }
}

static void big_write_single(const char *dir, const float *bench, const float *a, const float *c)
{
    np_probe *p = open_probe(dir, "tensor", 0, 1);
    float *sum = malloc((size_t)BIG_N * sizeof *sum);
    if (!p || !sum) {
        CHECK(0);
        free(sum);
        np_probe_free(p);
        return;
    }
    for (int64_t i = 0; i < BIG_N; i++)
        sum[i] = a[i] + c[i] + 1e-4f; /* the bench's sum a little off */
    np_error err;
    np_error_clear(&err);
    int64_t s3[3] = {BIG_D0, BIG_D1, BIG_D2}, s1[1] = {BIG_N};
    np_tensor in = big_tensor((float *)bench, 1, s1), out = big_tensor((float *)bench, 3, s3),
              q = big_tensor(sum, 1, s1);
    CHECK_EQ_INT(np_probe_step_begin(p, 0, &err), NP_OK);
    CHECK_EQ_INT(np_probe_dump(p, "Functional.linear.0.forward", NP_ROLE_INPUT, "0", &in, &err),
                 NP_OK);
    CHECK_EQ_INT(np_probe_dump(p, "Functional.linear.0.forward", NP_ROLE_OUTPUT, "0", &out, &err),
                 NP_OK);
    CHECK_EQ_INT(np_probe_dump(p, "Functional.matmul.0.forward", NP_ROLE_OUTPUT, "0", &q, &err),
                 NP_OK);
    CHECK_EQ_INT(np_probe_close(p, NULL, &err), NP_OK);
    np_probe_free(p);
    free(sum);
}

/* Rank `rank`'s pieces: its columns of the output, its half of the input
 * rows, its addend of the sum. */
static void big_write_rank(const char *dir, int rank, const float *bench, const float *cmp,
                           const float *a, const float *c)
{
    np_probe *p = open_probe(dir, "tensor", rank, 2);
    int64_t w = rank == 0 ? BIG_CUT : BIG_D2 - BIG_CUT, c0 = rank == 0 ? 0 : BIG_CUT;
    float *mine = malloc((size_t)BIG_D0 * BIG_D1 * (size_t)w * sizeof *mine);
    if (!p || !mine) {
        CHECK(0);
        free(mine);
        np_probe_free(p);
        return;
    }
    for (int64_t r = 0; r < BIG_D0 * BIG_D1; r++)
        memcpy(mine + r * w, cmp + r * BIG_D2 + c0, (size_t)w * sizeof *mine);
    np_error err;
    np_error_clear(&err);
    const char *dims[1] = {"tp"};
    int64_t shape[1] = {2}, coords[1] = {rank};
    CHECK_EQ_INT(np_probe_set_mesh(p, 1, dims, shape, coords, &err), NP_OK);
    int64_t half = BIG_N / 2, rows = rank == 0 ? half : BIG_N - half;
    int64_t g3[3] = {BIG_D0, BIG_D1, BIG_D2}, s3[3] = {BIG_D0, BIG_D1, w}, o3[3] = {0, 0, c0};
    int64_t g1[1] = {BIG_N}, s1[1] = {rows}, o1[1] = {rank == 0 ? 0 : half}, z1[1] = {0};
    np_tensor in = big_tensor((float *)bench + o1[0], 1, s1), out = big_tensor(mine, 3, s3),
              q = big_tensor((float *)(rank == 0 ? a : c), 1, g1);
    np_place_rec pi = big_place("Shard(0)", 1, g1, o1), po = big_place("Shard(2)", 3, g3, o3),
                 pq = big_place("Partial(sum)", 1, g1, z1);
    CHECK_EQ_INT(np_probe_step_begin(p, 0, &err), NP_OK);
    const char *call[3] = {"Functional.linear.0.forward", "Functional.linear.0.forward",
                           "Functional.matmul.0.forward"};
    np_role role[3] = {NP_ROLE_INPUT, NP_ROLE_OUTPUT, NP_ROLE_OUTPUT};
    np_tensor *t[3] = {&in, &out, &q};
    np_place_rec *pl[3] = {&pi, &po, &pq};
    for (int k = 0; k < 3; k++) {
        CHECK_EQ_INT(np_probe_dump(p, call[k], role[k], "0", t[k], &err), NP_OK);
        CHECK_EQ_INT(np_probe_place(p, call[k], role[k], "0", pl[k], &err), NP_OK);
    }
    CHECK_EQ_INT(np_probe_close(p, NULL, &err), NP_OK);
    np_probe_free(p);
    free(mine);
}

/* Row `name`'s metrics against those of the logical tensors held whole. */
static void big_check_row(const np_cmp_pair *q, const char *name, const double *b, const double *c)
{
    const np_cmp_row *r = row_of(q, name);
    CHECK_MSG(r && r->m && r->cmp->numel == BIG_N, "%s", name);
    if (!r || !r->m)
        return;
    np_cmp_metrics w;
    np_cmp_metrics_f64(&w, b, c, BIG_N, r->cmp->ndim, 0.0);
    const np_cmp_metrics *g = r->m;
    double got[9] = {g->cosine, g->euc_dist, g->max_abs_err, g->max_rel_err, g->one_thousandth,
                     g->five_thousandths, g->bench_norm, g->cmp_norm, g->rel_l2};
    double want[9] = {w.cosine, w.euc_dist, w.max_abs_err, w.max_rel_err, w.one_thousandth,
                      w.five_thousandths, w.bench_norm, w.cmp_norm, w.rel_l2};
    for (int k = 0; k < 9; k++)
        CHECK_MSG(!memcmp(&got[k], &want[k], sizeof got[k]), "%s metric %d: %.17g vs %.17g",
                  name, k, got[k], want[k]);
}

static void check_big(void)
{
    float *bench = malloc((size_t)BIG_N * sizeof *bench), *cmp = malloc((size_t)BIG_N * sizeof *cmp);
    float *a = malloc((size_t)BIG_N * sizeof *a), *c = malloc((size_t)BIG_N * sizeof *c);
    double *bd = malloc((size_t)BIG_N * sizeof *bd), *cd = malloc((size_t)BIG_N * sizeof *cd);
    if (!bench || !cmp || !a || !c || !bd || !cd) {
        CHECK(0);
        goto done;
    }
    big_values(bench, cmp, a, c);
    char b[400], d[400];
    snprintf(b, sizeof b, "%s/big_single", g_tmp);
    snprintf(d, sizeof d, "%s/big_tp2", g_tmp);
    big_write_single(b, bench, a, c);
    big_write_rank(d, 0, bench, cmp, a, c);
    big_write_rank(d, 1, bench, cmp, a, c);
    np_cmp_result *r = run(b, d);
    const np_cmp_pair *q = r && r->n_pairs == 1 ? &r->pairs[0] : NULL;
    CHECK(q != NULL);
    if (q) {
        for (int64_t i = 0; i < BIG_N; i++) {
            bd[i] = bench[i];
            cd[i] = cmp[i];
        }
        big_check_row(q, BIG_OUT, bd, cd);
        big_check_row(q, BIG_IN, bd, bd);
        const np_cmp_row *in = row_of(q, BIG_IN);
        CHECK(in && in->m && in->m->max_abs_err == 0.0 && in->cmp->crc32 == in->bench->crc32);
        double mx = -INFINITY, mn = INFINITY, sq = 0, sum = 0;
        for (int64_t i = 0; i < BIG_N; i++) {
            bd[i] = (float)(a[i] + c[i] + 1e-4f);
            cd[i] = 0.0 + (double)a[i] + (double)c[i];
            mx = fmax(mx, cd[i]);
            mn = fmin(mn, cd[i]);
            sq += cd[i] * cd[i];
            sum += cd[i];
        }
        big_check_row(q, BIG_SUM, bd, cd);
        const np_cmp_row *s = row_of(q, BIG_SUM);
        CHECK(s && s->cmp->stats.max == mx && s->cmp->stats.min == mn &&
              s->cmp->stats.norm == sqrt(sq) && s->cmp->stats.mean == sum / (double)BIG_N);
    }
    np_cmp_result_free(r);
done:
    free(bench);
    free(cmp);
    free(a);
    free(c);
    free(bd);
    free(cd);
}

int main(void)
{
    snprintf(g_tmp, sizeof g_tmp, "/tmp/np_cmp_assemble_XXXXXX");
    if (!mkdtemp(g_tmp))
        return 1;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    init_values();
    const char *tasks[2] = {"tensor", "statistics"};
    char d[400];
    for (int t = 0; t < 2; t++) {
        snprintf(d, sizeof d, "%s/%s_single", g_tmp, tasks[t]);
        write_single(d, tasks[t]);
        snprintf(d, sizeof d, "%s/%s_tp2", g_tmp, tasks[t]);
        write_rank(d, tasks[t], 0, F_NONE);
        write_rank(d, tasks[t], 1, F_NONE);
        check_clean(tasks[t]);
    }
    snprintf(d, sizeof d, "%s/replica", g_tmp);
    write_rank(d, "tensor", 0, F_REPLICA);
    write_rank(d, "tensor", 1, F_REPLICA);
    check_fault(d, "Replica disagreement", W ": rank 0 (tp=0) and rank 1 (tp=1)", 0);
    snprintf(d, sizeof d, "%s/offset", g_tmp);
    write_rank(d, "tensor", 0, F_OFFSET);
    write_rank(d, "tensor", 1, F_OFFSET);
    check_fault(d, "shards of " OUT " overlap", "rank 1 (tp=1) at offset 2", 1);
    snprintf(d, sizeof d, "%s/value", g_tmp);
    write_rank(d, "tensor", 0, F_VALUE);
    write_rank(d, "tensor", 1, F_VALUE);
    check_blame(d);
    snprintf(d, sizeof d, "%s/missing", g_tmp);
    write_rank(d, "tensor", 0, F_NONE);
    check_fault(d, "cover 9 of its 12 elements", "no file for rank(s) 1", 1);
    check_pipeline();
    check_experts();
    check_dpep();
    check_ep_routing();
    check_big();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (getenv("NP_TEST_KEEP"))
        fprintf(stderr, "kept %s\n", g_tmp);
    else if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", g_tmp);
    return check_report();
}
