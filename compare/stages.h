/* compare/stages.h - one pair's comparison as a chain of stages over one
 * context (docs/DEVELOPING.md, "compare as stages"). Private to
 * np_compare.
 *
 *   read -> select (--single-ref) -> assemble (sharded layouts) -> describe
 *   -> pair -> calls -> metrics (tensor mode) -> verdicts -> root cause
 *   -> replay -> gaps -> sub-threshold -> digest; the report writers then
 *   read the finished np_cmp_pair.
 *
 * A mode is a choice of stages (a stage's `when`), not a flag passed down
 * through the functions. */
#ifndef NPROBE_COMPARE_STAGES_H
#define NPROBE_COMPARE_STAGES_H

#include "internal.h"
#include "nprobe/replicas.h"

/* One pair on its way through the stages. The read stage fills bd/cd and
 * bench_names; every later stage works on p (rows, calls, notes). */
typedef struct cmp_run {
    np_cmp_pair *p;
    cmp_pair_priv *pv;              /* p->priv */
    const np_dumpio_ref *bench_ref, *cmp_ref;
    unsigned flags;                 /* np_dumpio_open_ref flags */
    const np_cmp_options *o;
    const cmp_mapping *map;         /* --mapping, or NULL */
    int pair_index, n_pairs;        /* for progress */
    cmp_dump bd, cd;                /* the two sides as read (entries are rows' sides) */
    np_strmap bench_names;          /* bench leaf names -> index in bd.entries */
    const np_rep_result *rep;       /* the cmp side checked against itself (several ranks
                                     * of a data-parallel run), or NULL */
} cmp_run;

typedef struct cmp_stage {
    const char *name;
    np_status (*run)(cmp_run *r, np_error *err);
    int (*when)(const cmp_run *r);  /* NULL: always; else the stage runs when it returns 1 */
} cmp_stage;

/* ---- the assemble stage's slot (issue 25) --------------------------------
 * An assembler turns one side's entries as read (a leaf per shard when the
 * dump holds a sharded layout: tensor/pipeline/sequence parallel) into
 * logical entries (one per logical tensor, as a single process would have
 * dumped it), in place: d->entries / d->n_entries (d->entries is malloc'd;
 * the assembler may replace it with another malloc'd array, freeing the old
 * one). New strings and shapes go into `arena` (the pair's; they live as
 * long as the rows). d->io is still open, for payloads. Rows it cannot
 * assemble it leaves as read (and may mark defect). Returns NP_OK or an
 * error naming the file and the leaf.
 *
 * cmp_assembler is NULL while no assembler exists: the assemble stage is
 * then skipped and the rows as read are the logical rows. After it runs,
 * the stage rebuilds bench_names and hands the new arrays to the pair. */
typedef np_status (*cmp_assemble_fn)(cmp_dump *d, cmp_arena *arena, np_error *err);
extern const cmp_assemble_fn cmp_assembler;

/* The replicas stage (reduce_check.c): the first finding of the cmp side's
 * check against itself (np_rep_check) for this pair's step and rank - a
 * collective whose output is not the reduction of the ranks' inputs, a
 * replica that parts - makes its leaf's row an error, so the root cause
 * names that call with plain compare (no --replicas needed). */
np_status cmp_stage_replicas(cmp_run *r, np_error *err);
int cmp_when_replicas(const cmp_run *r);

/* The pipeline stage (reduce_check.c): the first received activation or
 * gradient of a pipeline-parallel side whose values are not those the
 * stage before (after) sent (cmp_assembly_p2p) makes its row an error, so
 * the root cause names the Distributed.recv call with plain compare. */
np_status cmp_stage_p2p(cmp_run *r, np_error *err);
int cmp_when_p2p(const cmp_run *r);

/* Run the chain on one pair (compare.c). On failure p is freed. */
np_status cmp_run_stages(cmp_run *r, np_error *err);

#endif
