/* compare/reduce_check.c - the replicas and pipeline stages (stages.h).
 * The replicas stage: plain `nprobe
 * compare` of a data-parallel dump (several ranks per step) also checks the
 * cmp side against itself (nprobe/replicas.h, the check behind --replicas)
 * and turns its finding for the pair's step into an error row at the leaf
 * where it lives: a collective whose output is not the reduction of the
 * ranks' inputs (a bf16 all-reduce, a wrong divisor: within a bf16
 * tolerance of the reference, so the metrics alone pass it), a replica
 * that parts on the ranks named. The root cause then names that call as it
 * names any other, with the rank in the pair. The pipeline stage does the
 * same for a stage's received activation or gradient that is not what the
 * stage before (after) sent (the assembly's check, cmp_assembly_p2p). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stages.h"

/* The finding for step `step`, or NULL. */
static const np_rep_finding *finding_of(const np_rep_result *rep, int step)
{
    for (int i = 0; rep && i < rep->n_steps; i++)
        if (rep->steps[i] == step && rep->per_step[i].kind != NP_REP_NONE)
            return &rep->per_step[i];
    return NULL;
}

/* 1 when `rank` is among the finding's ranks ("every rank", "1, 3"). */
static int names_rank(const np_rep_finding *f, int rank)
{
    if (strstr(f->ranks, "every"))
        return 1;
    const char *s = f->ranks;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s) {
            s++;
            continue;
        }
        if (v == rank)
            return 1;
        s = end;
    }
    return 0;
}

int cmp_when_replicas(const cmp_run *r)
{
    return r->rep != NULL;
}

/* The cmp row of leaf `leaf` made an error with reason `why`; NULL when
 * the pair has no such row. */
static np_cmp_row *make_error(cmp_run *r, const char *leaf, const char *why, const char *dflt)
{
    np_cmp_pair *p = r->p;
    for (size_t i = 0; i < p->n_rows; i++) {
        np_cmp_row *row = &p->rows[i];
        if (!row->cmp || strcmp(row->cmp->name, leaf) != 0)
            continue;
        const char *text = cmp_arena_strdup(&r->pv->arena, why);
        if (row->verdict != NP_VERDICT_ERROR) {
            p->count_verdict[row->verdict]--;
            p->count_verdict[NP_VERDICT_ERROR]++;
        }
        row->verdict = NP_VERDICT_ERROR;
        row->severity = isnan(row->severity) || row->severity < 1 ? 1.0 : row->severity;
        row->reason = text ? text : dflt;
        row->n_reason_args = 0;
        return row;
    }
    return NULL;
}

int cmp_when_p2p(const cmp_run *r)
{
    const char *leaf;
    return cmp_assembly_p2p(&r->cd, &leaf) != NULL || cmp_assembly_p2p(&r->bd, &leaf) != NULL;
}

np_status cmp_stage_p2p(cmp_run *r, np_error *err)
{
    (void)err;
    const char *leaf = NULL, *text = cmp_assembly_p2p(&r->cd, &leaf);
    if (text && make_error(r, leaf, text, "pipeline: a received tensor is not the one sent"))
        cmp_note(r->p, "Pipeline stages checked against each other: %s is not what was sent.",
                 leaf);
    return NP_OK;
}

np_status cmp_stage_replicas(cmp_run *r, np_error *err)
{
    (void)err;
    np_cmp_pair *p = r->p;
    const np_rep_finding *f = finding_of(r->rep, p->step);
    if (!f || !names_rank(f, p->rank))
        return NP_OK;
    char why[800];
    snprintf(why, sizeof why, "replicas: %s (ranks %s; the check of --replicas)", f->text,
             f->ranks);
    if (make_error(r, f->leaf, why, "replicas: the ranks' check failed (see --replicas)"))
        cmp_note(p, "Replicas checked across the ranks of step %d: %s at %s (rank(s) %s).",
                 f->step, f->kind == NP_REP_REDUCE ? "a collective's output is not the reduction "
                                                     "of the ranks' inputs"
                                                   : "the replicas part",
                 f->call, f->ranks);
    return NP_OK;
}
