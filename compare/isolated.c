/* compare/isolated.c - the isolated error of each call (nprobe replay,
 * include/nprobe/replay.h) in compare's root cause (docs/COMPARE.md,
 * "Isolated error in the root cause"). When the run under test is a tensor
 * dump, each of its API calls is recomputed in float64 from its own dumped
 * inputs: a call whose isolated error exceeds its budget is a culprit even
 * when its accumulated difference against the reference stays below the
 * noise level; a culprit of the accumulated error whose isolated error is
 * clean stays the culprit, with a reason saying so (its arguments differ:
 * a scalar, a missing bias). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "nprobe/replay.h"

static void set_reason(np_cmp_call *c, cmp_arena *a, const char *text)
{
    const char *s = cmp_arena_strdup(a, text);
    if (s)
        c->reason = s;
}

/* Mark the modules enclosing call k as holding a culprit. */
static void mark_parents(np_cmp_pair *p, const np_strmap *byname, size_t k)
{
    const char *par = p->calls[k].parent;
    for (int d = 0; par && par[0] && d < 64; d++) {
        int j = np_strmap_get(byname, par);
        if (j < 0 || (size_t)j == k)
            break;
        if (p->calls[j].status != NP_CALL_PASS) {
            p->calls[j].status = NP_CALL_CONTAINS;
            p->calls[j].reason = "a call inside this module is the culprit";
        }
        par = p->calls[j].parent;
    }
}

/* The three-way rule (docs/COMPARE.md, "Three-way verdicts"): a call is a
 * culprit by its isolated error only when that error is above its budget
 * (the dtype's level) and more than NP_ISO_FACTOR times the reference's
 * own isolated error for the same call, both as multiples of their budgets
 * (each side's error measured in its own dtype's rounding unit). */
#define NP_ISO_FACTOR 4.0

static void apply(np_cmp_pair *p, const np_replay_result *r, const np_replay_result *ref,
                  const char *ref_why, const np_strmap *byname)
{
    cmp_pair_priv *pv = p->priv;
    char buf[900], rest[300];
    np_strmap refmap;
    int have_ref = ref && np_strmap_init(&refmap, ref->n_calls * 2 + 16) == 0;
    for (size_t i = 0; have_ref && i < ref->n_calls; i++)
        if (np_strmap_get(&refmap, ref->calls[i].name) < 0)
            np_strmap_put(&refmap, ref->calls[i].name, (int)i);
    for (size_t i = 0; i < r->n_calls; i++) {
        const np_replay_call *rc = &r->calls[i];
        int k = np_strmap_get(byname, rc->name);
        if (k < 0 || rc->status == NP_REPLAY_SKIPPED)
            continue;
        np_cmp_call *c = &p->calls[k];
        c->iso_err = rc->err_units;
        c->iso_ratio = rc->ratio;
        int j = have_ref ? np_strmap_get(&refmap, rc->name) : -1;
        const np_replay_call *bc = j >= 0 ? &ref->calls[j] : NULL;
        if (bc && bc->status != NP_REPLAY_SKIPPED) {
            c->ref_iso_err = bc->err_units;
            c->ref_iso_ratio = bc->ratio;
        }
        if (rc->status == NP_REPLAY_EXCEEDS && c->status != NP_CALL_CULPRIT) {
            if (bc && bc->status != NP_REPLAY_SKIPPED) {
                /* the reference's own call is as far from exact: torch's kernel
                 * and the float64 reference differ, not the two runs */
                if ((rc->signature && bc->signature) ||
                    (!rc->signature && !(rc->ratio > NP_ISO_FACTOR * bc->ratio)))
                    continue;
                snprintf(rest, sizeof rest,
                         "; the reference's same call: %.3g u, %.3g x its budget "
                         "(worse by %.3g, more than the factor %g)",
                         bc->err_units, bc->ratio, bc->ratio > 0 ? rc->ratio / bc->ratio : INFINITY,
                         NP_ISO_FACTOR);
            } else
                snprintf(rest, sizeof rest,
                         "; the reference has no recomputable data for this call (%.200s): "
                         "judged on its budget alone",
                         bc ? bc->reason : ref_why);
            if (rc->signature)
                snprintf(buf, sizeof buf,
                         "recomputed in float64 from its own dumped inputs, its isolated error "
                         "(%.3g u) is within its budget, but %.400s; accumulated severity %.3g%s%s",
                         rc->err_units, rc->reason, c->sev_out,
                         c->sev_out < 1 ? ", below the error level" : "", rest);
            else
                snprintf(buf, sizeof buf,
                         "isolated error %.3g u, %.3g x its budget (recomputed in float64 from "
                         "its own dumped inputs: %.350s)%s; accumulated severity %.3g%s",
                         rc->err_units, rc->ratio, rc->reason, rest, c->sev_out,
                         c->sev_out < 1 ? ", below the error level" : "");
            c->status = NP_CALL_CULPRIT;
            set_reason(c, &pv->arena, buf);
            mark_parents(p, byname, (size_t)k);
        } else if (rc->status == NP_REPLAY_PASS && c->status == NP_CALL_CULPRIT) {
            /* still the culprit: its arguments (a scalar, a missing input) differ */
            snprintf(buf, sizeof buf,
                     "%.400s; recomputed in float64 from its own dumped inputs and arguments "
                     "it is within %.3g u of exact: look at what it was called with",
                     c->reason, rc->err_units);
            set_reason(c, &pv->arena, buf);
        }
    }
    if (have_ref)
        np_strmap_free(&refmap);
}

np_status cmp_isolated(np_cmp_pair *p, int no_replay, np_error *err)
{
    for (size_t k = 0; k < p->n_calls; k++)
        p->calls[k].iso_err = p->calls[k].iso_ratio = p->calls[k].ref_iso_err =
            p->calls[k].ref_iso_ratio = NAN;
    if (p->mode != NP_CMP_MODE_TENSOR || no_replay || getenv("NPROBE_NO_REPLAY"))
        return NP_OK;
    np_replay_result *r = NULL;
    np_error e;
    np_error_clear(&e);
    if (np_replay_file(&r, p->cmp_path, NULL, &e) != NP_OK)
        return NP_OK; /* the accumulated root cause stands */
    np_strmap byname;
    if (np_strmap_init(&byname, p->n_calls * 2 + 16)) {
        np_replay_result_free(r);
        return np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory");
    }
    for (size_t k = 0; k < p->n_calls; k++)
        if (np_strmap_get(&byname, p->calls[k].name) < 0)
            np_strmap_put(&byname, p->calls[k].name, (int)k);
    /* the reference's own isolated errors, recomputed from its dumped inputs */
    np_replay_result *ref = NULL;
    char ref_why[300];
    snprintf(ref_why, sizeof ref_why, "the reference is a %s dump", p->bench_task);
    if (!strcmp(p->bench_task, "tensor")) {
        np_error_clear(&e);
        if (np_replay_file(&ref, p->bench_path, NULL, &e) != NP_OK)
            snprintf(ref_why, sizeof ref_why, "its replay failed: %.250s", e.text);
    }
    apply(p, r, ref, ref_why, &byname);
    np_strmap_free(&byname);
    np_replay_result_free(r);
    np_replay_result_free(ref);
    size_t n = 0;
    for (size_t k = 0; k < p->n_calls; k++)
        n += p->calls[k].status == NP_CALL_CULPRIT;
    int *cul = malloc((n + 1) * sizeof *cul);
    if (!cul)
        return np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory");
    free(p->culprits);
    p->culprits = cul;
    p->n_culprits = 0;
    for (size_t k = 0; k < p->n_calls; k++)
        if (p->calls[k].status == NP_CALL_CULPRIT)
            p->culprits[p->n_culprits++] = (int)k;
    return NP_OK;
}
