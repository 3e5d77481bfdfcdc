/* compare/assemble.c - the assemble stage (stages.h, cmp_assembler): a
 * side whose step file carries a device mesh (format version 2,
 * docs/FORMAT.md "/placements") is one rank of a sharded layout; its rows
 * become the logical tensors, rebuilt from the files of every rank of the
 * step (step{S}/rank{R}/dump.h5 beside it):
 *
 *   - Shard(d): the pieces concatenated at their offsets (uneven pieces
 *     too); they must cover the logical tensor without overlap;
 *   - Replicate(): the copies must be equal (crc32 of the stored bytes with
 *     payloads, else the statistics bit for bit); the lowest rank's is kept;
 *   - Partial(sum): the pieces summed in float64 (tensor mode; a statistics
 *     dump cannot sum statistics, the row is left out with a note);
 *     Partial(avg): the same sum divided by the size of the mesh
 *     dimension(s) it averages over.
 *
 * A leaf without a placement row is whole on every rank that holds it
 * (Replicate() on every mesh dimension). Statistics of the logical tensor
 * come from the pieces' statistics where that is exact (max, min, the
 * counts; norm as the root of the summed squares; mean weighted by the
 * finite elements), from the summed payload for Partial(sum). Payloads
 * (tensor mode) are streamed when the metrics stage asks for them: a range
 * of the logical tensor at a time, made from the ranges of the pieces that
 * fall in it (cmp_asm_stream), so memory holds a few MB, not a logical
 * tensor, whatever the dump's size.
 *
 * Disagreements are named with the leaf, the ranks and their mesh
 * coordinates: replicas that differ (the lowest rank's copy is compared,
 * so the call where the bug lives shows as the error; the note says which
 * ranks differ), a missing piece or overlapping pieces (the row is a dump
 * defect). The rows keep the order and the calls of this rank's file;
 * leaves this rank does not hold are not compared (noted). Under a
 * framework's pipeline (the package's, each stage numbering its calls from
 * 0) they are another stage's, and a run's directory compares each stage
 * in its own pair; a stage's API calls are renumbered by the earlier
 * stages' (stage_offsets; each stage of a file of several, an interleaved
 * schedule's, by its own), and left out, with a note, where that cannot
 * be done: an earlier stage without a file. Under the runtime's pipeline
 * (a mesh dimension "pp" in a file of framework nprobe-runtime) the rows and calls of every stage's
 * file are merged in the order one process runs them (the stages'
 * forwards first to last, their backwards last to first, then the
 * parameters' gradients), each leaf assembled from the rank(s) holding
 * it, and every activation a stage received is checked against what the
 * stage before sent (Distributed.recv against Distributed.send, micro-batch
 * by micro-batch: cmp_assembly_p2p). */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stages.h"

/* One rank's file of the step. */
typedef struct asm_rank {
    int rank;
    np_dumpio *io;
    int64_t coords[NP_FMT_MESH_MAX];
    np_entry_rec *e;
    size_t ne;
    np_place_rec *pl;
    size_t npl;
    int stage;             /* the lowest pipeline stage its placement rows carry, -1 none */
    uint64_t stages;       /* the stages its rows carry (bit s: stage s < 64; several:
                            * an interleaved schedule, several stages a rank) */
    int *mb;               /* per row of e: its micro-batch, -1 none (micro-batches only) */
    int *st;               /* per row of e: its stage, -1 none (micro-batches only) */
    np_strmap emap, pmap;  /* leaf name -> row of e / pl (emap: rows of micro-batch
                            * m >= 1 under "LOGICAL\x1fm" instead, mb_key; a pipeline
                            * stage's renumbered rows under their logical names) */
    np_strmap nmap;        /* the file's own leaf names -> row of e (micro-batches only) */
    int8_t *later;         /* per row of e: 1 for a micro-batch m >= 1 (a piece only) */
    char (*keys)[NP_FMT_NAME_LEN + 16]; /* their emap keys; a renumbered row of micro-batch
                                         * 0: its logical name */
    char (*lcall)[NP_FMT_NAME_LEN];     /* per row of e: its call's logical name when
                                         * it has another, else "" */
    int8_t *moved;         /* per row of e: 1 when its call is renumbered (stage_offsets) */
    np_call_rec *c;        /* the runtime's pipeline: the file's calls */
    size_t nc;
    char *path;            /* the file */
} asm_rank;

/* A piece of a logical tensor: rank r's row (a representative of its
 * replicas). */
typedef struct asm_piece {
    int r;                 /* index into cmp_assembly.ranks */
    int m;                 /* its micro-batch (0 without micro-batches) */
    const np_entry_rec *e;
    const np_place_rec *pl; /* NULL: whole */
    int64_t off0;          /* its offset on dimension 0 (rows_of) */
} asm_piece;

typedef struct asm_leaf {
    asm_piece *pieces;
    int n;
    int ndim;
    int64_t gshape[NP_FMT_MAX_DIMS];
    int64_t numel;
    double div;            /* Partial(avg): the pieces' sum divided by it (else 1) */
    int partial;           /* a Partial dimension: the values are a sum */
} asm_leaf;

struct cmp_assembly {
    np_fmt_mesh mesh;
    int mb_dim, n_mb;      /* the micro-batches' mesh dimension ("mb", -1: none), its size */
    asm_rank *ranks;
    int n_ranks;
    np_strmap leaf_map;    /* logical leaf name -> index in leaves */
    np_strmap skipped;     /* Partial(sum) leaves left out (statistics) */
    np_strmap parted;      /* leaves whose replicas differ */
    asm_leaf *leaves;
    size_t n_leaves;
    /* what the notes say */
    size_t n_assembled, n_replica_diff, n_partial_skipped, n_not_here, n_defects;
    size_t n_local;        /* Local() leaves left out on both sides */
    np_strmap local_io;    /* call -> which of its leaves were Local() and left out (1 an
                            * input, parameter or scalar argument, 2 an output) */
    size_t n_others;       /* leaves held only by other ranks, merged in (merge_others) */
    char first_replica[800], first_defect[800];
    char missing_ranks[160];
    int64_t own_rank;      /* the rank of the file whose rows these are */
    int own_stage;         /* its pipeline stage, -1 none (or the runtime's pipeline,
                            * merged whole: pp_dim) */
    int no_stage;          /* an earlier stage without a file (its API calls cannot be
                            * counted: the own stage's are left out), -1 none */
    size_t n_unnumbered;   /* the own stages' API call rows left out for it */
    int pp_dim;            /* the runtime's pipeline: its mesh dimension ("pp", -1: none) */
    np_strmap call_rank;   /* a pipeline's merged calls -> the index of the rank whose they are */
    size_t n_p2p;          /* pipeline: received activations and gradients checked */
    char p2p_leaf[NP_FMT_NAME_LEN]; /* the first whose values are not those sent ("": none) */
    char p2p_text[1100];
};

/* ---- the rank files ------------------------------------------------------------ */

static void rank_free(asm_rank *r)
{
    np_dumpio_close(r->io);
    free(r->e);
    free(r->pl);
    np_strmap_free(&r->emap);
    np_strmap_free(&r->pmap);
    np_strmap_free(&r->nmap);
    free(r->mb);
    free(r->st);
    free(r->later);
    free(r->keys);
    free(r->lcall);
    free(r->moved);
    free(r->c);
    free(r->path);
}

void cmp_assembly_free(cmp_assembly *a)
{
    if (!a)
        return;
    for (int i = 0; i < a->n_ranks; i++)
        rank_free(&a->ranks[i]);
    free(a->ranks);
    for (size_t i = 0; i < a->n_leaves; i++)
        free(a->leaves[i].pieces);
    free(a->leaves);
    np_strmap_free(&a->leaf_map);
    np_strmap_free(&a->skipped);
    np_strmap_free(&a->local_io);
    np_strmap_free(&a->parted);
    np_strmap_free(&a->call_rank);
    free(a);
}

/* {step dir}/rank{r}/dump.h5 of the file at `path` ({step dir}/rank{R}/dump.h5). */
static int sibling_path(char *out, size_t cap, const char *path, int r)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return -1;
    const char *prev = slash;
    while (prev > path && prev[-1] != '/')
        prev--;
    if (prev == path || strncmp(prev, "rank", 4) != 0)
        return -1;
    int n = snprintf(out, cap, "%.*srank%d%s", (int)(prev - path), path, r, slash);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

/* Call "Functional.linear.5.forward" (the counter before the direction) or
 * "Module.h.0.mlp.MLP.forward.5" (after it): the counter, its start and
 * length in the string; -1 when the call has none. */
static long call_counter(const char *call, size_t *at, size_t *len)
{
    const char *dot = strrchr(call, '.');
    if (!dot || dot == call)
        return -1;
    const char *prev = dot - 1;
    while (prev > call && prev[-1] != '.')
        prev--;
    const char *num = NULL, *end = NULL;
    if (!strcmp(dot + 1, "forward") || !strcmp(dot + 1, "backward")) {
        num = prev;
        end = dot;
    } else if (prev > call && (!strncmp(prev, "forward.", 8) || !strncmp(prev, "backward.", 9))) {
        num = dot + 1;
        end = dot + 1 + strlen(dot + 1);
    }
    if (!num || end == num || end - num > 9)
        return -1;
    for (const char *c = num; c < end; c++)
        if (*c < '0' || *c > '9')
            return -1;
    *at = (size_t)(num - call);
    *len = (size_t)(end - num);
    return strtol(num, NULL, 10);
}

/* The key of the API or module of a call without its counter and direction
 * into buf, with a stage and a micro-batch ("1\x1f0\x1fFunctional.linear",
 * "-1\x1f-1\x1fModule.h.0.mlp.MLP": -1 for any). */
static void counter_key(char *buf, size_t cap, int s, int m, const char *call, size_t at)
{
    size_t end = at ? at - 1 : 0; /* the '.' before the counter */
    if (end >= 8 && !strncmp(call + end - 8, ".forward", 8))
        end -= 8;
    else if (end >= 9 && !strncmp(call + end - 9, ".backward", 9))
        end -= 9;
    snprintf(buf, cap, "%d\x1f%d\x1f%.*s", s, m, (int)end, call);
}

/* 1 for a call of an API (its counter counts the API's calls through the
 * process), 0 for a module's (counted by its path). */
static int api_call(const char *call) { return strncmp(call, "Module.", 7) != 0; }

/* Put v under key k in map m when it is below what k holds (or k holds
 * nothing); -1 out of memory. */
static int put_min(np_strmap *m, const char *k, int v)
{
    int had = np_strmap_get(m, k);
    return had >= 0 && had <= v ? 0 : np_strmap_put(m, k, v);
}

/* Micro-batches (mesh dimension "mb"): each row's micro-batch and stage (a
 * leaf without a placement row, a scalar argument, has its call's); the
 * stages the file's placement rows carry. */
static int rank_mb(asm_rank *r)
{
    np_strmap callm, calls;
    r->mb = calloc(r->ne + 1, sizeof *r->mb);
    r->st = calloc(r->ne + 1, sizeof *r->st);
    if (!r->mb || !r->st || np_strmap_init(&callm, r->ne + 1) != 0)
        return -1;
    if (np_strmap_init(&calls, r->ne + 1) != 0) {
        np_strmap_free(&callm);
        return -1;
    }
    int rc = 0;
    r->stage = -1;
    r->stages = 0;
    for (size_t i = 0; i < r->npl; i++) {
        int s = r->pl[i].stage;
        if (s >= 0 && (r->stage < 0 || s < r->stage))
            r->stage = s;
        if (s >= 0 && s < 64)
            r->stages |= (uint64_t)1 << s;
    }
    for (size_t i = 0; i < r->ne; i++) {
        int pi = np_strmap_get(&r->pmap, r->e[i].name);
        r->mb[i] = pi >= 0 ? r->pl[pi].micro_batch : -1;
        r->st[i] = pi >= 0 ? r->pl[pi].stage : -1;
        if (r->mb[i] >= 0 && np_strmap_get(&callm, r->e[i].call) < r->mb[i] &&
            np_strmap_put(&callm, r->e[i].call, r->mb[i]) != 0)
            rc = -1;
        if (r->st[i] >= 0 && put_min(&calls, r->e[i].call, r->st[i]) != 0)
            rc = -1;
    }
    for (size_t i = 0; i < r->ne; i++) {
        if (r->mb[i] < 0)
            r->mb[i] = np_strmap_get(&callm, r->e[i].call);
        if (r->st[i] < 0)
            r->st[i] = np_strmap_get(&calls, r->e[i].call);
    }
    np_strmap_free(&callm);
    np_strmap_free(&calls);
    return rc;
}

/* The emap keys of one rank's rows: the rows of micro-batch m >= 1 are
 * pieces of the logical leaves whose calls micro-batch 0 names. A chunk's
 * call (stage s, micro-batch m) is numbered as one process numbers it: its
 * index among the calls of its API (or module) in that chunk (its counter
 * less the chunk's first), plus the file's first counter of that API in any
 * chunk, plus, for an API call of a pipeline stage, the calls of that API
 * the stages before s make in a micro-batch (`off`, stage_offsets: NULL or
 * none, 0). A file of one stage keeps its stage's order; a file of several
 * (an interleaved schedule, its calls counted through the stages in the
 * schedule's order) gets each stage's calls their one-process numbers too
 * (docs/FORMAT.md "/placements"). Rows of micro-batch m >= 1 are keyed
 * "LOGICAL\x1fm" in emap, renumbered rows of micro-batch 0 by their
 * logical names. */
static int rank_keys(asm_rank *r, const np_strmap *off)
{
    np_strmap first = {0}, any = {0};
    char (*ck)[NP_FMT_NAME_LEN + 16] = calloc(r->ne + 1, sizeof *ck);
    const char **api = calloc(r->ne + 1, sizeof *api);
    r->later = calloc(r->ne + 1, sizeof *r->later);
    r->keys = calloc(r->ne + 1, sizeof *r->keys);
    r->lcall = calloc(r->ne + 1, sizeof *r->lcall);
    r->moved = calloc(r->ne + 1, sizeof *r->moved);
    if (!ck || !api || !r->later || !r->keys || !r->lcall || !r->moved ||
        np_strmap_init(&first, r->ne + 1) != 0 || np_strmap_init(&any, r->ne + 1) != 0) {
        np_strmap_free(&first);
        free(ck);
        free(api);
        return -1;
    }
    int rc = 0;
    /* ck[i]: the call's chunk key (stage, micro-batch, API), api[i] its API
     * (the key's tail); first, any: the lowest counter of each */
    for (size_t i = 0; i < r->ne; i++) {
        size_t at, len;
        long c = r->mb[i] >= 0 ? call_counter(r->e[i].call, &at, &len) : -1;
        if (c < 0)
            continue;
        counter_key(ck[i], sizeof ck[i], r->st[i], r->mb[i], r->e[i].call, at);
        api[i] = strchr(strchr(ck[i], '\x1f') + 1, '\x1f') + 1;
        if (put_min(&first, ck[i], (int)c) != 0 || put_min(&any, api[i], (int)c) != 0)
            rc = -1;
    }
    for (size_t i = 0; i < r->ne && rc == 0; i++) {
        int m = r->mb[i];
        if (m < 0)
            continue;
        const np_entry_rec *e = &r->e[i];
        size_t at, len;
        long c = call_counter(e->call, &at, &len);
        if (c < 0) { /* no counter: the name itself */
            if (m < 1)
                continue;
            r->later[i] = 1;
            snprintf(r->keys[i], sizeof r->keys[i], "%s\x1f%d", e->name, m);
        } else {
            long o = 0;
            char k0[NP_FMT_NAME_LEN + 16];
            if (off && api_call(e->call)) {
                counter_key(k0, sizeof k0, r->st[i], -1, e->call, at);
                o = np_strmap_get(off, k0);
                o = o < 0 ? 0 : o;
            }
            long lc = c - np_strmap_get(&first, ck[i]) + np_strmap_get(&any, api[i]) + o;
            if (m < 1 && lc == c)
                continue; /* its own name */
            r->later[i] = m >= 1;
            r->moved[i] = o != 0 || m < 1;
            size_t cl = strlen(e->call);
            snprintf(r->lcall[i], sizeof r->lcall[i], "%.*s%ld%.*s", (int)at, e->call, lc,
                     (int)(cl - at - len), e->call + at + len);
            snprintf(r->keys[i], sizeof r->keys[i], m ? "%s%s\x1f%d" : "%s%s", r->lcall[i],
                     !strncmp(e->name, e->call, cl) ? e->name + cl : "", m);
        }
        if (np_strmap_put(&r->emap, r->keys[i], (int)i) != 0)
            rc = -1;
    }
    for (size_t i = 0; i < r->ne && rc == 0; i++)
        if (!r->later[i] && !r->keys[i][0] && np_strmap_get(&r->emap, r->e[i].name) < 0 &&
            np_strmap_put(&r->emap, r->e[i].name, (int)i) != 0)
            rc = -1;
    np_strmap_free(&first);
    np_strmap_free(&any);
    free(ck);
    free(api);
    return rc;
}

static np_status rank_read(asm_rank *r, const char *path, int micro, np_error *err)
{
    np_status st = np_dumpio_open(&r->io, path, NULL, 0, err);
    if (st != NP_OK)
        return st;
    const np_dumpio_info *in = np_dumpio_get_info(r->io);
    for (int k = 0; k < NP_FMT_MESH_MAX; k++)
        r->coords[k] = k < in->mesh_ndim ? in->mesh_coords[k] : 0;
    r->stage = -1;
    st = np_dumpio_read_entries(&r->e, &r->ne, r->io, err);
    if (st == NP_OK)
        st = np_dumpio_read_placements(&r->pl, &r->npl, r->io, err);
    if (st != NP_OK)
        return st;
    if (np_strmap_init(&r->emap, r->ne + 1) != 0 || np_strmap_init(&r->pmap, r->npl + 1) != 0)
        return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    for (size_t i = 0; i < r->npl; i++)
        if (np_strmap_put(&r->pmap, r->pl[i].name, (int)i) != 0)
            return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    if (micro && (rank_mb(r) != 0 || np_strmap_init(&r->nmap, r->ne + 1) != 0))
        return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    for (size_t i = 0; micro && i < r->ne; i++)
        if (np_strmap_put(&r->nmap, r->e[i].name, (int)i) != 0)
            return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    if (!micro)
        for (size_t i = 0; i < r->ne; i++)
            if (np_strmap_get(&r->emap, r->e[i].name) < 0 &&
                np_strmap_put(&r->emap, r->e[i].name, (int)i) != 0)
                return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    return NP_OK;
}

/* The calls of each API stage s makes in micro-batch 0, from the lowest
 * rank's file that holds stage s (`seen`: scratch), added to `run`
 * ("-1\x1f-1\x1fAPI" -> the count so far; keys in `keys`); 0, -1 out of
 * memory. */
static int stage_count(const asm_rank *r, int s, np_strmap *run, np_strmap *seen, np_arena *keys)
{
    np_strmap_clear(seen);
    for (size_t i = 0; i < r->ne; i++) {
        size_t at, len;
        long c = r->mb[i] == 0 && r->st[i] == s && api_call(r->e[i].call)
                     ? call_counter(r->e[i].call, &at, &len) : -1;
        if (c < 0)
            continue;
        /* one count a call (its leaves, forward and backward alike) */
        char api[NP_FMT_NAME_LEN + 16], one[NP_FMT_NAME_LEN + 40];
        counter_key(api, sizeof api, -1, -1, r->e[i].call, at);
        snprintf(one, sizeof one, "%s\x1f%ld", api, c);
        if (np_strmap_get(seen, one) >= 0)
            continue;
        int had = np_strmap_get(run, api);
        const char *ka = had >= 0 ? NULL : np_arena_put(keys, api, strlen(api));
        const char *ko = np_arena_put(keys, one, strlen(one));
        if (!ko || (had < 0 && !ka) || np_strmap_put(seen, ko, 1) != 0 ||
            np_strmap_put(run, had < 0 ? ka : api, (had < 0 ? 0 : had) + 1) != 0)
            return -1;
    }
    return 0;
}

/* A pipeline stage's API calls numbered as one process numbers them: for
 * each stage s >= 1 of the own file (several under an interleaved
 * schedule), the calls of each API that the stages before it make in
 * micro-batch 0 (stage_count: "s\x1f-1\x1fAPI" -> their count, into *off;
 * keys in `keys`). 1 when offsets were counted (*missing: the first earlier
 * stage without a file, whose later stages' API calls cannot be numbered,
 * else -1), 0 when none apply (no own stage >= 1), -1 out of memory. */
static int stage_offsets(const cmp_assembly *a, const asm_rank *own, np_strmap *off,
                         np_arena *keys, int *missing)
{
    *missing = -1;
    int top = -1;
    for (int s = 0; s < 64; s++)
        if (own->stages >> s & 1)
            top = s;
    if (top < 1)
        return 0;
    size_t cap = 0;
    for (int i = 0; i < a->n_ranks; i++)
        cap += a->ranks[i].ne;
    np_strmap seen = {0}, run = {0};
    if (np_strmap_init(off, cap + 1) != 0 || np_strmap_init(&seen, cap + 1) != 0 ||
        np_strmap_init(&run, cap + 1) != 0) {
        np_strmap_free(&seen);
        return -1;
    }
    int rc = 1;
    for (int s = 0; s < top && rc == 1; s++) {
        const asm_rank *r = NULL;
        for (int i = 0; i < a->n_ranks && !r; i++)
            if (a->ranks[i].stages >> s & 1)
                r = &a->ranks[i];
        if (!r) {
            *missing = s; /* a stage without a file: no offsets past it */
            break;
        }
        if (stage_count(r, s, &run, &seen, keys) != 0)
            rc = -1;
        for (size_t j = 0; rc == 1 && (own->stages >> (s + 1) & 1) && j < run.cap; j++) {
            if (!run.keys[j])
                continue;
            char k[NP_FMT_NAME_LEN + 24];
            snprintf(k, sizeof k, "%d%s", s + 1, run.keys[j] + 2); /* "-1\x1f-1..." */
            const char *kk = np_arena_put(keys, k, strlen(k));
            if (!kk || np_strmap_put(off, kk, run.vals[j]) != 0)
                rc = -1;
        }
    }
    np_strmap_free(&seen);
    np_strmap_free(&run);
    return rc;
}

/* Every rank of the step (those whose file is missing are listed). */
static np_status ranks_open(cmp_assembly *a, const cmp_dump *d, int64_t world, np_error *err)
{
    a->ranks = calloc((size_t)world, sizeof *a->ranks);
    if (!a->ranks)
        return np_error_set(err, NP_ERR_NOMEM, d->path, NULL, "out of memory");
    for (int r = 0; r < world; r++) {
        char path[1200];
        if (sibling_path(path, sizeof path, d->path, r) != 0)
            return np_error_set(err, NP_ERR_ARG, d->path, NULL,
                                "a sharded dump (mesh) must lie at step{S}/rank{R}/%s to find "
                                "its other ranks", NP_FMT_FILE);
        if (access(path, R_OK) != 0) {
            size_t n = strlen(a->missing_ranks);
            snprintf(a->missing_ranks + n, sizeof a->missing_ranks - n, "%s%d", n ? ", " : "", r);
            continue;
        }
        asm_rank *k = &a->ranks[a->n_ranks++];
        k->rank = r;
        if (!(k->path = strdup(path)))
            return np_error_set(err, NP_ERR_NOMEM, d->path, NULL, "out of memory");
        np_status st = rank_read(k, path, a->mb_dim >= 0, err);
        if (st == NP_OK && a->pp_dim >= 0)
            st = np_dumpio_read_calls(&k->c, &k->nc, k->io, err);
        if (st != NP_OK)
            return st;
    }
    if (a->mb_dim < 0)
        return NP_OK;
    /* micro-batches: the rows' logical names; a pipeline stage's API calls
     * renumbered (stage_offsets) on the ranks of the file's own stage(s) */
    const asm_rank *own = NULL;
    for (int r = 0; r < a->n_ranks && a->pp_dim < 0; r++) /* not the runtime's: merged */
        if (a->ranks[r].rank == d->rank) {
            own = &a->ranks[r];
            a->own_stage = own->stage;
        }
    np_strmap off = {0};
    np_arena keys = {0};
    int with = own ? stage_offsets(a, own, &off, &keys, &a->no_stage) : 0;
    np_status st = with < 0 ? np_error_set(err, NP_ERR_NOMEM, d->path, NULL, "out of memory")
                            : NP_OK;
    for (int r = 0; r < a->n_ranks && st == NP_OK; r++) {
        asm_rank *k = &a->ranks[r];
        if (rank_keys(k, with > 0 && k->stages == own->stages ? &off : NULL) != 0)
            st = np_error_set(err, NP_ERR_NOMEM, d->path, NULL, "out of memory");
    }
    np_strmap_free(&off);
    np_arena_free(&keys);
    return st;
}

/* ---- one logical leaf --------------------------------------------------------- */

/* "rank 1 (dp=0, tp=1)", "rank 0 (mb=1)": micro-batch m */
static void who(char *buf, size_t cap, const cmp_assembly *a, const asm_rank *r, int m)
{
    int n = snprintf(buf, cap, "rank %d (", r->rank);
    for (int k = 0; k < a->mesh.ndim && n > 0 && (size_t)n < cap; k++)
        n += snprintf(buf + n, cap - (size_t)n, "%s%s=%lld", k ? ", " : "", a->mesh.dims[k],
                      (long long)(k == a->mb_dim ? m : r->coords[k]));
    if (n > 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, ")");
}

/* The kind of each mesh dimension for a piece ('S' with *sdim, 'R', 'P'). */
static void kinds_of(const cmp_assembly *a, const np_place_rec *pl, char *kind, int *sdim)
{
    /* the reader bounds ndim by NP_FMT_MESH_MAX; said again here for the
     * compiler (gcc 14 -Wstringop-overflow on the callers' arrays) */
    int nd = a->mesh.ndim < NP_FMT_MESH_MAX ? a->mesh.ndim : NP_FMT_MESH_MAX;
    for (int k = 0; k < nd; k++) {
        kind[k] = 'R';
        sdim[k] = -1;
        char it[NP_FMT_PLACE_LEN];
        if (pl)
            kind[k] = (char)np_fmt_place_kind(np_fmt_place_item(pl, k, it, sizeof it), &sdim[k]);
    }
}

/* 1 when two replicas' rows hold the same values (crc32 of the stored
 * bytes when both have them, else the statistics bit for bit). */
static int same_values(const np_entry_rec *x, const np_entry_rec *y)
{
    if (x->has_data && y->has_data && (x->crc32 || y->crc32))
        return x->crc32 == y->crc32;
    np_stats a = np_fmt_entry_stats(x), b = np_fmt_entry_stats(y);
    return !memcmp(&a, &b, sizeof a);
}

/* Piece p's offset on dimension d (dimension 0: rows_of's). */
static int64_t piece_off(const asm_piece *p, int d)
{
    return d == 0 ? p->off0 : p->pl ? p->pl->offset[d] : 0;
}

/* 1 when the boxes of two pieces intersect. */
static int overlaps(const asm_piece *x, const asm_piece *y, int ndim)
{
    for (int d = 0; d < ndim; d++) {
        int64_t xo = piece_off(x, d), yo = piece_off(y, d);
        if (xo + x->e->shape[d] <= yo || yo + y->e->shape[d] <= xo)
            return 0;
    }
    return 1;
}

typedef struct holder {
    int r, m;
    const np_entry_rec *e;
    const np_place_rec *pl;
    int64_t dkey[NP_FMT_MESH_MAX], skey[NP_FMT_MESH_MAX];
    int64_t off0;          /* its offset on dimension 0 (rows_of) */
    int64_t key0;          /* its place in the grid of the mesh dimensions that split
                            * dimension 0 (row-major, mesh order), -1: none does */
    int dmask;             /* those dimensions (bit k: mesh dimension k) */
} holder;

/* The ranks holding leaf `name`, with their keys: the coordinates on the
 * dimensions that split the values (dkey: Shard and Partial; skey: Shard).
 * Returns the count; -1 when some place the leaf and others do not. */
static int holders_of(const cmp_assembly *a, const char *name, holder *h, int *partial)
{
    int n = 0, placed = 0;
    *partial = 0;
    char key[NP_FMT_NAME_LEN + 16];
    for (int i = 0; i < a->n_ranks; i++)
        for (int m = 0; m < a->n_mb; m++) {
            const asm_rank *r = &a->ranks[i];
            if (a->own_stage >= 0 && r->stage >= 0 && r->stage != a->own_stage)
                break; /* another pipeline stage's: its leaves are others */
            if (m)
                snprintf(key, sizeof key, "%s\x1f%d", name, m);
            int ei = np_strmap_get(&r->emap, m ? key : name);
            if (ei < 0)
                continue;
            int pi = np_strmap_get(&r->pmap, r->e[ei].name);
            holder *x = &h[n++];
            x->r = i;
            x->m = m;
            x->e = &r->e[ei];
            x->pl = pi >= 0 ? &r->pl[pi] : NULL;
            placed += x->pl != NULL;
            char kind[NP_FMT_MESH_MAX];
            int sdim[NP_FMT_MESH_MAX];
            kinds_of(a, x->pl, kind, sdim);
            x->off0 = x->pl && x->e->ndim > 0 ? x->pl->offset[0] : 0;
            x->key0 = -1;
            x->dmask = 0;
            for (int k = 0; k < NP_FMT_MESH_MAX; k++) {
                int on = k < a->mesh.ndim;
                int p = on && (kind[k] == 'P' || kind[k] == 'A');
                int64_t c = k == a->mb_dim ? m : r->coords[k];
                x->dkey[k] = on && (kind[k] == 'S' || p) ? c : -1;
                x->skey[k] = on && kind[k] == 'S' ? c : -1;
                *partial |= p;
                if (on && kind[k] == 'S' && sdim[k] == 0) {
                    x->key0 = (x->key0 < 0 ? 0 : x->key0) * a->mesh.shape[k] + c;
                    x->dmask |= 1 << k;
                }
            }
        }
    return placed && placed != n ? -1 : n;
}

static int same_key(const int64_t *x, const int64_t *y)
{
    return !memcmp(x, y, NP_FMT_MESH_MAX * sizeof *x);
}

/* Dimension 0 of a leaf that mesh dimensions split (Shard(0)): each
 * holder's offset there (off0) and the logical size (*g0, on entry the
 * recorded one). The recorded offsets stand unless the pieces disagree on
 * the logical size, the writers then not knowing each other's sizes
 * (data-parallel ranks whose batches differ in size, each writing its
 * micro-batches as if every rank's batch were its own: docs/COMPARE.md
 * "Sharded layouts"); then, when the pieces are the whole grid of the
 * dimensions that split it, one size a grid point, the offsets are derived
 * from the pieces' row counts in DTensor's order (the earlier mesh
 * dimension outer; the micro-batches, the mesh's last dimension,
 * innermost). 1 when derived. */
static int rows_of(const cmp_assembly *a, holder *h, int n, int64_t *g0)
{
    if (n < 1 || h[0].key0 < 0 || !h[0].pl)
        return 0;
    int differ = 0;
    for (int i = 1; i < n && !differ; i++)
        differ = h[i].pl && h[i].pl->global_shape[0] != h[0].pl->global_shape[0];
    int64_t G = 1;
    for (int k = 0; k < a->mesh.ndim; k++)
        if (h[0].dmask >> k & 1)
            G *= a->mesh.shape[k] > 0 ? a->mesh.shape[k] : 1;
    int64_t *rows = differ && G <= 65536 ? malloc((size_t)G * sizeof *rows) : NULL;
    if (!rows)
        return 0;
    for (int64_t i = 0; i < G; i++)
        rows[i] = -1;
    int ok = 1;
    for (int i = 0; i < n && ok; i++) {
        int64_t *c = h[i].dmask == h[0].dmask && h[i].key0 >= 0 && h[i].key0 < G &&
                     h[i].e->ndim > 0 ? &rows[h[i].key0] : NULL;
        if (c && *c < 0)
            *c = h[i].e->shape[0];
        else
            ok = c && *c == h[i].e->shape[0];
    }
    int64_t at = 0;
    for (int64_t i = 0; i < G && ok; i++) {
        ok = rows[i] >= 0;
        int64_t r = rows[i];
        rows[i] = at; /* its offset */
        at += r;
    }
    for (int i = 0; i < n && ok; i++)
        h[i].off0 = rows[h[i].key0];
    if (ok)
        *g0 = at;
    free(rows);
    return ok;
}

/* Keep the first replica of each value key as a piece; replicas that
 * differ from it are counted and the first such named. */
static int pick_pieces(cmp_assembly *a, const char *name, const holder *h, int n, asm_piece *out)
{
    int np = 0;
    for (int i = 0; i < n; i++) {
        int j = 0;
        while (j < i && !same_key(h[j].dkey, h[i].dkey))
            j++;
        if (j == i) {
            out[np++] = (asm_piece){h[i].r, h[i].m, h[i].e, h[i].pl, h[i].off0};
            continue;
        }
        if (!same_values(h[j].e, h[i].e)) {
            if (a->n_replica_diff++ == 0) {
                char wa[160], wb[160];
                who(wa, sizeof wa, a, &a->ranks[h[j].r], h[j].m);
                who(wb, sizeof wb, a, &a->ranks[h[i].r], h[i].m);
                snprintf(a->first_replica, sizeof a->first_replica,
                         "%s: %s and %s should hold equal values (%s) but differ (max %.9g vs "
                         "%.9g, norm %.9g vs %.9g)", name, wa, wb,
                         h[i].pl ? h[i].pl->placements : "no placement: whole on every rank",
                         h[j].e->max, h[i].e->max, h[j].e->norm, h[i].e->norm);
            }
        }
    }
    return np;
}

/* Why the pieces do not tile the logical tensor (NULL: they do). */
static const char *coverage_problem(cmp_assembly *a, const char *name, const asm_piece *p, int n,
                                    int64_t gnumel, int ndim, char *buf, size_t cap)
{
    int64_t covered = 0;
    for (int i = 0; i < n; i++) {
        int dup = 0; /* Partial(sum) pieces share their box */
        for (int j = 0; j < i && !dup; j++) {
            int same = 1;
            for (int d = 0; d < ndim && same; d++)
                same = piece_off(&p[i], d) == piece_off(&p[j], d) &&
                       p[i].e->shape[d] == p[j].e->shape[d];
            if (same)
                dup = 1;
            else if (overlaps(&p[i], &p[j], ndim)) {
                char wa[160], wb[160];
                who(wa, sizeof wa, a, &a->ranks[p[j].r], p[j].m);
                who(wb, sizeof wb, a, &a->ranks[p[i].r], p[i].m);
                snprintf(buf, cap, "shards of %s overlap: %s at offset %lld and %s at offset "
                         "%lld (dimension 0)", name, wa, (long long)p[j].off0, wb,
                         (long long)p[i].off0);
                return buf;
            }
        }
        if (!dup)
            covered += p[i].e->numel;
    }
    if (covered != gnumel) {
        snprintf(buf, cap, "shards of %s cover %lld of its %lld elements (a shard is missing%s%s)",
                 name, (long long)covered, (long long)gnumel,
                 a->missing_ranks[0] ? "; no file for rank(s) " : "", a->missing_ranks);
        return buf;
    }
    return NULL;
}

/* The statistics block of `fin` finite elements of extremes mx, mn, sum
 * `sum` and sum of squares `sq` (mean and norm NaN when there are none). */
static np_stats finite_stats(double mx, double mn, double sum, double sq, int64_t fin,
                             int64_t nan, int64_t pos, int64_t neg)
{
    return (np_stats){.max = mx, .min = mn, .mean = fin ? sum / (double)fin : NAN,
                      .norm = fin ? sqrt(sq) : NAN, .nan_count = nan, .posinf_count = pos,
                      .neginf_count = neg};
}

/* The logical side from its pieces' statistics (no Partial(sum)). */
static void combine_stats(np_cmp_side *s, const asm_piece *p, int n)
{
    double mx = NAN, mn = NAN, sq = 0, sum = 0;
    int64_t nan = 0, pos = 0, neg = 0, fin = 0;
    for (int i = 0; i < n; i++) {
        const np_stats e = np_fmt_entry_stats(p[i].e);
        int64_t f = p[i].e->numel - e.nan_count - e.posinf_count - e.neginf_count;
        nan += e.nan_count;
        pos += e.posinf_count;
        neg += e.neginf_count;
        if (f <= 0 || isnan(e.max))
            continue;
        mx = fin ? fmax(mx, e.max) : e.max;
        mn = fin ? fmin(mn, e.min) : e.min;
        sq += e.norm * e.norm;
        sum += e.mean * (double)f;
        fin += f;
    }
    s->stats = finite_stats(mx, mn, sum, sq, fin, nan, pos, neg);
}

/* ---- payloads, streamed ---------------------------------------------------------- */

/* A logical tensor is never built whole: cmp_asm_stream gives its elements
 * in order, a range at a time, each range made from the pieces' elements
 * that fall in it (read with pread from the raw float32 storage the
 * runtime and the package write: no piece is read whole either). A
 * piece's element k lies at a logical index that grows with k, so the
 * elements of a logical range are one contiguous range of each piece, and
 * each piece is read once, front to back, its crc32 taken on the way. The
 * sums are those of a whole-tensor build: every element starts at 0 and
 * takes its pieces' values in piece order (a Partial's sum), then the
 * Partial(avg) division. */

/* Elements of a piece read and placed at a time (the stream's buffers). */
#define ASM_RUN 65536
/* Elements of a Partial's logical tensor summarised at a time (partial_stats). */
#define ASM_CHUNK (1 << 19)

/* The logical (row-major) index of piece p's element k. */
static int64_t piece_at(const asm_leaf *l, const asm_piece *p, int64_t k)
{
    int nd = l->ndim;
    int64_t idx[NP_FMT_MAX_DIMS] = {0};
    for (int d = nd - 1; d >= 0; d--) {
        int64_t sh = p->e->shape[d];
        idx[d] = sh > 0 ? k % sh : 0;
        k = sh > 0 ? k / sh : 0;
    }
    int64_t at = 0;
    for (int d = 0; d < nd; d++)
        at = at * l->gshape[d] + piece_off(p, d) + idx[d];
    return at;
}

/* The first element k >= from of piece p at a logical index >= lo (the
 * piece's numel when none). */
static int64_t piece_first(const asm_leaf *l, const asm_piece *p, int64_t from, int64_t lo)
{
    int64_t a = from, b = p->e->numel > 0 ? p->e->numel : 0;
    while (a < b) {
        int64_t m = a + (b - a) / 2;
        if (piece_at(l, p, m) >= lo)
            b = m;
        else
            a = m + 1;
    }
    return a;
}

/* Add piece p's elements [k0, k0 + m) (values v) into out, which holds the
 * logical elements from lo on. */
static void place_run(double *out, int64_t lo, const asm_leaf *l, const asm_piece *p, int64_t k0,
                      const double *v, int64_t m)
{
    int nd = l->ndim;
    int64_t w = nd ? p->e->shape[nd - 1] : 1;
    for (int64_t j = 0; j < m;) {
        int64_t k = k0 + j, take = w > 0 ? w - k % w : m - j;
        if (take > m - j)
            take = m - j;
        double *o = out + (piece_at(l, p, k) - lo);
        for (int64_t t = 0; t < take; t++)
            o[t] += v[j + t];
        j += take;
    }
}

/* One piece's payload as the stream reads it. */
typedef struct asm_src {
    np_dumpio_payload p;
    np_dumpio_buf buf;     /* a payload not stored as raw float32: the piece in memory */
    int64_t next;          /* the next element to read */
    uint32_t crc;          /* the crc32 of the stored bytes read so far */
    int got;
} asm_src;

struct cmp_asm_stream {
    const cmp_assembly *a;
    const asm_leaf *l;
    np_cmp_side *s;        /* gets the logical crc32 at the end (NULL: none wanted) */
    asm_src *src;          /* one per piece */
    int64_t pos;           /* the next logical element */
    int want_crc;          /* wants_crc: the logical crc32 is taken */
    uint32_t lcrc;
    float *f;              /* ASM_RUN floats */
    double *v;             /* ASM_RUN doubles */
    np_status st;          /* the first failure, kept for the close */
    np_error err;
};

/* Elements [lo, lo + cnt) of a raw float32 payload into f (segments in any
 * order, as the metrics' file reads take them). */
/* Piece i's elements [k0, k0 + m) (m <= ASM_RUN, k0 its next) into st->v,
 * their stored bytes into its crc32. */
static int src_read(cmp_asm_stream *st, int i, int64_t k0, int64_t m)
{
    asm_src *s = &st->src[i];
    const np_dumpio_payload *p = &s->p;
    int sum = p->crc_kind == NP_DUMPIO_CRC_ELEMENTS;
    if (p->form == NP_DUMPIO_FILE_F32) {
        if (np_dumpio_read_f32(p->fd, p->segs, p->nseg, k0, m, st->f) != 0)
            return -1;
        if (sum)
            s->crc = np_crc32(s->crc, st->f, (size_t)m * sizeof(float));
        for (int64_t j = 0; j < m; j++)
            st->v[j] = st->f[j];
    } else if (p->form == NP_DUMPIO_MEM_F64) {
        const double *x = (const double *)p->mem + k0;
        if (sum)
            s->crc = np_crc32(s->crc, x, (size_t)m * sizeof(double));
        memcpy(st->v, x, (size_t)m * sizeof(double));
    } else {
        const float *x = (const float *)p->mem + k0;
        if (sum)
            s->crc = np_crc32(s->crc, x, (size_t)m * sizeof(float));
        for (int64_t j = 0; j < m; j++)
            st->v[j] = x[j];
    }
    return 0;
}

int cmp_assembly_stream_fill(void *user, int64_t lo, int64_t cnt, double *out)
{
    cmp_asm_stream *st = user;
    const asm_leaf *l = st->l;
    if (st->st != NP_OK)
        return -1;
    if (lo != st->pos || cnt < 0 || lo + cnt > l->numel) {
        st->st = np_error_set(&st->err, NP_ERR_ARG, NULL, NULL,
                              "assembled elements asked out of order (%lld after %lld)",
                              (long long)lo, (long long)st->pos);
        return -1;
    }
    memset(out, 0, (size_t)cnt * sizeof *out);
    for (int i = 0; i < l->n; i++) {
        const asm_piece *p = &l->pieces[i];
        asm_src *s = &st->src[i];
        int64_t end = piece_first(l, p, s->next, lo + cnt);
        while (s->next < end) {
            int64_t m = end - s->next < ASM_RUN ? end - s->next : ASM_RUN;
            if (src_read(st, i, s->next, m) != 0) {
                st->st = np_error_set(&st->err, NP_ERR_IO, np_dumpio_path(st->a->ranks[p->r].io),
                                      p->e->name, "reading the payload failed (truncated file?)");
                return -1;
            }
            place_run(out, lo, l, p, s->next, st->v, m);
            s->next += m;
        }
    }
    if (l->div != 1.0)
        for (int64_t j = 0; j < cnt; j++)
            out[j] /= l->div;
    for (int64_t j = 0; st->want_crc && j < cnt; j += ASM_RUN) {
        int64_t m = cnt - j < ASM_RUN ? cnt - j : ASM_RUN;
        for (int64_t t = 0; t < m; t++)
            st->f[t] = (float)out[j + t]; /* exact: the pieces' float32 values */
        st->lcrc = np_crc32(st->lcrc, st->f, (size_t)m * sizeof(float));
    }
    st->pos += cnt;
    return 0;
}

/* 1 when a leaf of dtype `dt` is stored as float32 (docs/FORMAT.md "/data"). */
static int stored_f32(const char *dt)
{
    static const char *const f32[] = {"float32", "bfloat16", "float16", "float8_e4m3fn",
                                      "float8_e5m2", "hifloat8"};
    for (size_t i = 0; i < sizeof f32 / sizeof *f32; i++)
        if (!strcmp(dt, f32[i]))
            return 1;
    return 0;
}

/* The crc32 a one-process dump stores for logical leaf l: that of its
 * float32 bytes, little-endian, row-major, when its pieces are float32
 * stored values placed side by side (Shard, Replicate: the values are
 * theirs, exactly); a sum (Partial) has none. The stream takes it on the
 * way (want_crc) and sets it on the side once every element was read, so
 * the verdicts that recognise a tensor by its values (an input holding an
 * earlier output's: docs/COMPARE.md "Rows computed from weights that
 * parted") see an assembled tensor as the whole one it is. */
static int wants_crc(const asm_leaf *l, const np_cmp_side *s)
{
    if (!s || l->partial || l->numel < 1 || !stored_f32(s->dtype))
        return 0;
    for (int i = 0; i < l->n; i++)
        if (!stored_f32(l->pieces[i].e->dtype))
            return 0;
    return 1;
}

static np_status stream_open(cmp_asm_stream **out, const cmp_assembly *a, const asm_leaf *l,
                             np_cmp_side *s, np_error *err)
{
    cmp_asm_stream *st = calloc(1, sizeof *st);
    *out = st;
    if (st) {
        st->src = calloc((size_t)l->n + 1, sizeof *st->src);
        st->f = malloc(ASM_RUN * sizeof *st->f);
        st->v = malloc(ASM_RUN * sizeof *st->v);
    }
    if (!st || !st->src || !st->f || !st->v)
        return np_error_set(err, NP_ERR_NOMEM, NULL, s ? s->name : NULL, "out of memory");
    st->a = a;
    st->l = l;
    st->s = s;
    st->want_crc = wants_crc(l, s);
    np_error_clear(&st->err);
    for (int i = 0; i < l->n; i++) {
        const asm_piece *p = &l->pieces[i];
        np_status r = np_dumpio_payload_get(&st->src[i].p, a->ranks[p->r].io, p->e->name,
                                            p->e->numel, NP_DUMPIO_ALLOW_FILE, &st->src[i].buf,
                                            err);
        if (r != NP_OK)
            return r;
        st->src[i].got = 1;
    }
    return NP_OK;
}

np_status cmp_assembly_stream_open(cmp_asm_stream **out, cmp_dump *d, const char *name,
                                   np_cmp_side *s, int64_t *numel, np_error *err)
{
    *out = NULL;
    const cmp_assembly *a = d->assembly;
    int li = a ? np_strmap_get(&a->leaf_map, name) : -1;
    if (li < 0)
        return np_error_set(err, NP_ERR_NOTFOUND, d->path, name, "not an assembled leaf");
    if (numel)
        *numel = a->leaves[li].numel;
    np_status st = stream_open(out, a, &a->leaves[li], s, err);
    if (st != NP_OK) {
        cmp_assembly_stream_close(*out, NULL);
        *out = NULL;
    }
    return st;
}

np_status cmp_assembly_stream_close(cmp_asm_stream *st, np_error *err)
{
    if (!st)
        return NP_OK;
    np_status r = st->st;
    if (r != NP_OK && err)
        *err = st->err;
    /* every element read: the pieces' stored bytes against their crc32 */
    for (int i = 0; r == NP_OK && st->l && st->pos == st->l->numel && i < st->l->n; i++) {
        const asm_src *s = &st->src[i];
        const np_entry_rec *e = st->l->pieces[i].e;
        uint32_t crc = s->p.crc_kind == NP_DUMPIO_CRC_GIVEN ? s->p.crc : s->crc;
        if (s->got && s->p.crc_kind != NP_DUMPIO_CRC_NONE && crc != e->crc32)
            r = np_error_set(err, NP_ERR_FORMAT, np_dumpio_path(st->a->ranks[st->l->pieces[i].r].io),
                             e->name, "the stored bytes do not match their crc32 in the entries "
                             "(file corrupt): crc32 %08x, entry %08x", crc, e->crc32);
    }
    if (r == NP_OK && st->want_crc && st->pos == st->l->numel)
        st->s->crc32 = st->lcrc;
    for (int i = 0; st->src && st->l && i < st->l->n; i++) {
        if (st->src[i].got)
            np_dumpio_payload_release(&st->src[i].p);
        np_dumpio_buf_free(&st->src[i].buf);
    }
    free(st->src);
    free(st->f);
    free(st->v);
    free(st);
    return r;
}

np_status cmp_assembly_values(double *out, cmp_dump *d, const char *name, int64_t n,
                              np_error *err)
{
    cmp_asm_stream *st = NULL;
    int64_t numel = 0;
    np_status r = cmp_assembly_stream_open(&st, d, name, NULL, &numel, err);
    if (r == NP_OK && numel != n)
        r = np_error_set(err, NP_ERR_ARG, d->path, name, "%lld elements asked of %lld",
                         (long long)n, (long long)numel);
    if (r == NP_OK)
        cmp_assembly_stream_fill(st, 0, n, out);
    np_status c = cmp_assembly_stream_close(st, err);
    return r != NP_OK ? r : c;
}

/* The product of the sizes of the mesh dimensions placement pl averages
 * over (Partial(avg)); 1 when none. */
static double avg_divisor(const cmp_assembly *a, const np_place_rec *pl)
{
    char kind[NP_FMT_MESH_MAX];
    int sdim[NP_FMT_MESH_MAX];
    double div = 1.0;
    kinds_of(a, pl, kind, sdim);
    for (int k = 0; pl && k < a->mesh.ndim; k++)
        if (kind[k] == 'A')
            div *= (double)a->mesh.shape[k];
    return div;
}

int cmp_assembly_has(const cmp_dump *d, const char *name)
{
    return d->assembly && np_strmap_get(&d->assembly->leaf_map, name) >= 0;
}

int cmp_assembly_stage(const cmp_dump *d)
{
    return d->assembly ? d->assembly->own_stage : -1;
}

int cmp_assembly_parted(const cmp_dump *d, const char *name)
{
    return d->assembly && d->assembly->parted.cap &&
           np_strmap_get(&d->assembly->parted, name) >= 0;
}

/* Statistics of a Partial(sum) or Partial(avg) leaf from its summed
 * payload, streamed in order (the same sums as over the whole tensor). */
static np_status partial_stats(np_cmp_side *s, const cmp_assembly *a, const asm_leaf *l,
                               np_error *err)
{
    cmp_asm_stream *st = NULL;
    int64_t ch = l->numel < ASM_CHUNK ? (l->numel > 0 ? l->numel : 1) : ASM_CHUNK;
    double *v = malloc((size_t)ch * sizeof *v);
    np_status r = v ? stream_open(&st, a, l, NULL, err)
                    : np_error_set(err, NP_ERR_NOMEM, NULL, s->name, "out of memory");
    double mx = NAN, mn = NAN, sq = 0, sum = 0;
    int64_t nan = 0, pos = 0, neg = 0, fin = 0;
    for (int64_t lo = 0; r == NP_OK && lo < l->numel; lo += ch) {
        int64_t cnt = l->numel - lo < ch ? l->numel - lo : ch;
        if (cmp_assembly_stream_fill(st, lo, cnt, v) != 0)
            break;
        for (int64_t i = 0; i < cnt; i++) {
            if (isnan(v[i])) {
                nan++;
                continue;
            }
            if (isinf(v[i])) {
                *(v[i] > 0 ? &pos : &neg) += 1;
                continue;
            }
            mx = fin ? fmax(mx, v[i]) : v[i];
            mn = fin ? fmin(mn, v[i]) : v[i];
            sq += v[i] * v[i];
            sum += v[i];
            fin++;
        }
    }
    np_status c = cmp_assembly_stream_close(st, err);
    free(v);
    s->stats = finite_stats(mx, mn, sum, sq, fin, nan, pos, neg);
    return r != NP_OK ? r : c;
}

/* ---- the stage ------------------------------------------------------------------ */

/* Side s (this rank's row of the leaf) made the logical one; 0 when the
 * row is to be left out (a Partial(sum) leaf without payloads). */
/* 1 when a holder's placement says Local() on some mesh dimension: the
 * leaf is each rank's own values (an expert-parallel run's routing
 * positions), no piece of a logical tensor; left out on both sides (the
 * skipped map), counted for the note, and its call marked (local_io: the
 * root cause takes such a call's inputs for unknown, not for passing). */
static int skip_local(cmp_assembly *a, const np_cmp_side *s, cmp_arena *arena, np_error *err,
                      np_status *st)
{
    a->n_local++;
    const char *nm = cmp_arena_strdup(arena, s->name);
    int io = s->role && !strcmp(s->role, "output") ? 2 : 1;
    int was = s->call && a->local_io.cap ? np_strmap_get(&a->local_io, s->call) : -1;
    if ((!a->skipped.cap && np_strmap_init(&a->skipped, 64) != 0) || !nm ||
        np_strmap_put(&a->skipped, nm, 1) != 0 ||
        (!a->local_io.cap && np_strmap_init(&a->local_io, 64) != 0) ||
        (s->call && np_strmap_put(&a->local_io, s->call, (was < 0 ? 0 : was) | io) != 0))
        *st = np_error_set(err, NP_ERR_NOMEM, NULL, s->name, "out of memory");
    return 1;
}

static int local_leaf(cmp_assembly *a, const np_cmp_side *s, const holder *h, int n,
                      cmp_arena *arena, np_error *err, np_status *st)
{
    char kind[NP_FMT_MESH_MAX];
    int sdim[NP_FMT_MESH_MAX], local = 0;
    for (int i = 0; i < n && !local; i++) {
        kinds_of(a, h[i].pl, kind, sdim);
        for (int k = 0; h[i].pl && k < a->mesh.ndim; k++)
            local |= kind[k] == 'L';
    }
    return local ? skip_local(a, s, arena, err, st) : 0;
}

/* 1 when scalar argument s (kwargs) belongs to a call whose first input or
 * output is Local() here: each rank's own routing (an all_to_all's split
 * sizes), no replica of the other ranks' values. */
static int local_scalar(const cmp_assembly *a, const np_cmp_side *s)
{
    if (!s->call || !strstr(s->name, ".kwargs."))
        return 0;
    for (int r = 0; r < a->n_ranks; r++) {
        const asm_rank *k = &a->ranks[r];
        for (int w = 0; k->rank == a->own_rank && w < 2; w++) {
            char nm[NP_FMT_NAME_LEN + 16];
            snprintf(nm, sizeof nm, "%s.%s.0", s->call, w ? "output" : "input");
            int i = np_strmap_get(&k->pmap, nm);
            char kind[NP_FMT_MESH_MAX];
            int sdim[NP_FMT_MESH_MAX];
            if (i < 0)
                continue;
            kinds_of(a, &k->pl[i], kind, sdim);
            for (int d = 0; d < a->mesh.ndim; d++)
                if (kind[d] == 'L')
                    return 1;
        }
    }
    return 0;
}

static int assemble_leaf(cmp_assembly *a, np_cmp_side *s, cmp_arena *arena, holder *h,
                         asm_piece *pieces, int renamed, np_error *err, np_status *st)
{
    int partial = 0;
    int n = holders_of(a, s->name, h, &partial);
    if (n > 0 && local_leaf(a, s, h, n, arena, err, st))
        return 0;
    if (n > 0 && local_scalar(a, s) && skip_local(a, s, arena, err, st))
        return 0;
    if (n < 0) {
        s->defect = "placed on some ranks and not on others";
        a->n_defects++;
        return 1;
    }
    if (n < 1)
        return 1;
    const np_place_rec *pl = h[0].pl;
    if (!pl && n == 1 && !renamed && a->ranks[h[0].r].rank == a->own_rank && h[0].m == 0)
        return 1; /* whole, held here only (a renamed row's payload is read as a piece) */
    int64_t g0 = s->ndim > 0 ? (pl ? pl->global_shape[0] : s->shape[0]) : 0;
    rows_of(a, h, n, &g0);
    size_t differ = a->n_replica_diff;
    int np = pick_pieces(a, s->name, h, n, pieces);
    if (a->n_replica_diff > differ) {
        const char *nm = cmp_arena_strdup(arena, s->name);
        if ((!a->parted.cap && np_strmap_init(&a->parted, 64) != 0) || !nm ||
            np_strmap_put(&a->parted, nm, 1) != 0)
            *st = np_error_set(err, NP_ERR_NOMEM, NULL, s->name, "out of memory");
    }
    int whole = 1;
    for (int d = 0; d < s->ndim && pl; d++)
        whole &= (d ? pl->global_shape[d] : g0) == s->shape[d];
    if (np == 1 && whole && !partial && a->ranks[pieces[0].r].rank == a->own_rank &&
        pieces[0].m == 0 && !renamed)
        return 1; /* this rank's copy is the logical tensor (its replicas checked) */
    asm_leaf l = {NULL, np, s->ndim, {0}, 1, avg_divisor(a, pl), partial};
    for (int d = 0; d < s->ndim; d++) {
        l.gshape[d] = d == 0 ? g0 : pl ? pl->global_shape[d] : s->shape[d];
        l.numel *= l.gshape[d];
    }
    char why[700];
    if (coverage_problem(a, s->name, pieces, np, l.numel, l.ndim, why, sizeof why)) {
        s->defect = cmp_arena_strdup(arena, why);
        if (a->n_defects++ == 0)
            snprintf(a->first_defect, sizeof a->first_defect, "%s", why);
        return 1;
    }
    /* an empty piece (an expert no token reached on that rank) holds
     * nothing and stores no payload: left out (one kept if all are) */
    int kept = 0;
    for (int i = 0; i < np; i++)
        if (pieces[i].e->numel > 0 || (i == np - 1 && kept == 0))
            pieces[kept++] = pieces[i];
    np = l.n = kept;
    int has_data = 1;
    for (int i = 0; i < np; i++)
        has_data &= pieces[i].e->has_data != 0;
    if (partial && !has_data) {
        a->n_partial_skipped++;
        const char *nm = cmp_arena_strdup(arena, s->name);
        if ((!a->skipped.cap && np_strmap_init(&a->skipped, 64) != 0) || !nm ||
            np_strmap_put(&a->skipped, nm, 1) != 0)
            *st = np_error_set(err, NP_ERR_NOMEM, NULL, s->name, "out of memory");
        return 0;
    }
    int64_t *shape = cmp_arena_alloc(arena, (size_t)(l.ndim ? l.ndim : 1) * sizeof *shape,
                                     sizeof *shape);
    l.pieces = malloc((size_t)np * sizeof *l.pieces);
    if (!shape || !l.pieces ||
        np_strmap_put(&a->leaf_map, s->name, (int)a->n_leaves) != 0) {
        free(l.pieces);
        *st = np_error_set(err, NP_ERR_NOMEM, NULL, s->name, "out of memory");
        return 1;
    }
    memcpy(l.pieces, pieces, (size_t)np * sizeof *pieces);
    memcpy(shape, l.gshape, (size_t)l.ndim * sizeof *shape);
    a->leaves[a->n_leaves++] = l;
    s->shape = shape;
    s->numel = l.numel;
    s->crc32 = 0;
    s->has_data = (int8_t)has_data;
    if (partial)
        *st = partial_stats(s, a, &l, err);
    else
        combine_stats(s, pieces, np);
    a->n_assembled++;
    return 1;
}

/* The file's /calls renamed as its rows were (a pipeline stage's API calls
 * by their one-process names; calls of micro-batches m >= 1 by their
 * micro-batch 0 call's, which compare keeps once). */
static np_status rename_calls(cmp_dump *d, const asm_rank *own, cmp_arena *arena, np_error *err)
{
    np_strmap m;
    if (np_strmap_init(&m, own->ne + 1) != 0)
        return np_error_set(err, NP_ERR_NOMEM, d->path, NULL, "out of memory");
    int any = 0;
    for (size_t i = 0; i < own->ne; i++)
        if (own->moved[i] && np_strmap_get(&m, own->e[i].call) < 0) {
            any = 1;
            if (np_strmap_put(&m, own->e[i].call, (int)i) != 0) {
                np_strmap_free(&m);
                return np_error_set(err, NP_ERR_NOMEM, d->path, NULL, "out of memory");
            }
        }
    np_status st = NP_OK;
    for (size_t k = 0; any && k < d->n_calls && st == NP_OK; k++) {
        int i = np_strmap_get(&m, d->calls[k].name);
        if (i < 0)
            continue;
        const char *nm = cmp_arena_strdup(arena, own->lcall[i]);
        if (!nm)
            st = np_error_set(err, NP_ERR_NOMEM, d->path, NULL, "out of memory");
        else
            d->calls[k].name = nm;
    }
    np_strmap_free(&m);
    return st;
}

/* Leaves held by other ranks only (another pipeline stage's), counted once. */
static void count_not_here(cmp_assembly *a, int64_t own_rank)
{
    const asm_rank *own = NULL;
    for (int r = 0; r < a->n_ranks; r++)
        if (a->ranks[r].rank == own_rank)
            own = &a->ranks[r];
    np_strmap seen;
    if (!own || np_strmap_init(&seen, 64) != 0)
        return;
    for (int r = 0; r < a->n_ranks; r++)
        for (size_t i = 0; i < a->ranks[r].ne; i++) {
            const char *nm = a->ranks[r].e[i].name;
            if (a->ranks[r].later && a->ranks[r].later[i])
                continue; /* a micro-batch's piece */
            if (np_strmap_get(&own->emap, nm) >= 0 || np_strmap_get(&seen, nm) >= 0)
                continue;
            if (np_strmap_put(&seen, nm, 1) == 0)
                a->n_not_here++;
        }
    np_strmap_free(&seen);
}

/* ---- leaves held only by other ranks (expert parallel) -------------------------- */

static int side_of(np_cmp_side *s, const np_entry_rec *r, const np_dumpio_info *in,
                   cmp_arena *arena);

/* A call's place in the merged step: its anchor (the own file's call it
 * comes before, the file's call count after the last), then 1 + the rank
 * index of the file it comes from, or INT64_MAX for the own call itself
 * (after what comes before it), then its row in that file. */
typedef struct mg_key {
    int64_t anchor, from, k;
} mg_key;

static int mg_cmp(const void *x, const void *y)
{
    const mg_key *a = x, *b = y;
    if (a->anchor != b->anchor)
        return a->anchor < b->anchor ? -1 : 1;
    if (a->from != b->from)
        return a->from < b->from ? -1 : 1;
    return a->k < b->k ? -1 : a->k > b->k;
}

typedef struct mg_ent {
    int64_t seq, i;
} mg_ent;

static int mg_ent_cmp(const void *x, const void *y)
{
    const mg_ent *a = x, *b = y;
    if (a->seq != b->seq)
        return a->seq < b->seq ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

/* The calls of d and those only other ranks made, each before the own
 * call that follows it in its rank's /calls (rank 1's experts.1 after rank
 * 0's experts.0, before the combine both make): keys[0 .. *n) and names
 * (the pos map: call name -> index in keys); -1 out of memory. */
static int mg_calls(const cmp_assembly *a, const cmp_dump *d, const asm_rank *own, mg_key *keys,
                    cmp_call_rec *calls, size_t *n, np_strmap *pos, cmp_arena *arena)
{
    for (size_t q = 0; q < d->n_calls; q++) {
        keys[q] = (mg_key){(int64_t)q, INT64_MAX, 0};
        calls[q] = d->calls[q];
        if (np_strmap_put(pos, d->calls[q].name, (int)q) != 0)
            return -1;
    }
    *n = d->n_calls;
    for (int r = 0; r < a->n_ranks; r++) {
        const asm_rank *k = &a->ranks[r];
        if (k == own)
            continue;
        int64_t anchor = (int64_t)d->n_calls;
        for (size_t q = k->nc; q-- > 0;) {
            const np_call_rec *c = &k->c[q];
            int j = np_strmap_get(pos, c->call);
            if (j >= 0) {
                anchor = (size_t)j < d->n_calls ? j : anchor;
                continue;
            }
            cmp_call_rec *o = &calls[*n];
            o->name = cmp_arena_strdup(arena, c->call);
            o->kind = strcmp(c->kind, "module") == 0 ? "module" : "api";
            o->parent = cmp_arena_strdup(arena, c->parent);
            o->callsite = cmp_arena_strdup(arena, c->callsite);
            if (!o->name || !o->parent || !o->callsite ||
                np_strmap_put(pos, o->name, (int)*n) != 0)
                return -1;
            keys[(*n)++] = (mg_key){anchor, 1 + r, (int64_t)q};
        }
    }
    return 0;
}

/* The rows of other ranks' leaves that the own file lacks, assembled from
 * their holders, appended to ents (their seq: their call's new place). */
static int mg_rows(cmp_assembly *a, const asm_rank *own, const np_strmap *pos, const int64_t *seq,
                   np_cmp_side *ents, size_t *ne, holder *h, asm_piece *pieces, cmp_arena *arena,
                   np_error *err, np_status *st)
{
    np_strmap added;
    if (np_strmap_init(&added, 64) != 0)
        return -1;
    for (int r = 0; r < a->n_ranks && *st == NP_OK; r++) {
        const asm_rank *k = &a->ranks[r];
        for (size_t i = 0; k != own && i < k->ne && *st == NP_OK; i++) {
            const np_entry_rec *e = &k->e[i];
            int j = np_strmap_get(pos, e->call);
            if (j < 0 || np_strmap_get(&own->emap, e->name) >= 0 ||
                np_strmap_get(&added, e->name) >= 0)
                continue;
            np_cmp_side *s = &ents[*ne];
            if (side_of(s, e, np_dumpio_get_info(k->io), arena) != 0 ||
                np_strmap_put(&added, s->name, 1) != 0) {
                np_strmap_free(&added);
                return -1;
            }
            s->seq = seq[j];
            if (assemble_leaf(a, s, arena, h, pieces, 0, err, st)) {
                (*ne)++;
                a->n_others++;
            }
        }
    }
    np_strmap_free(&added);
    return 0;
}

/* Outside a pipeline (each rank the same calls but its own modules: an
 * expert-parallel run, rank e holding experts.e as one process names it),
 * the leaves only other ranks hold are compared too: their calls merged
 * into d's (mg_calls), their rows assembled from their holders. */
static np_status merge_others(cmp_assembly *a, cmp_dump *d, holder *h, asm_piece *pieces,
                              cmp_arena *arena, np_error *err)
{
    const asm_rank *own = NULL;
    size_t nc = d->n_calls, ne = d->n_entries;
    for (int r = 0; r < a->n_ranks; r++)
        if (a->ranks[r].rank == d->rank)
            own = &a->ranks[r];
    int any = 0;
    for (int r = 0; own && r < a->n_ranks; r++)
        for (size_t i = 0; &a->ranks[r] != own && i < a->ranks[r].ne && !any; i++)
            any = np_strmap_get(&own->emap, a->ranks[r].e[i].name) < 0;
    if (!any)
        return NP_OK;
    np_status st = NP_OK;
    for (int r = 0; r < a->n_ranks && st == NP_OK; r++) {
        asm_rank *x = &a->ranks[r];
        if (x != own && !x->c)
            st = np_dumpio_read_calls(&x->c, &x->nc, x->io, err);
        nc += x->nc;
        ne += x->ne;
    }
    if (st != NP_OK)
        return st;
    mg_key *keys = calloc(nc + 1, sizeof *keys);
    cmp_call_rec *calls = calloc(nc + 1, sizeof *calls);
    int64_t *seq = calloc(nc + 1, sizeof *seq);
    np_cmp_side *ents = calloc(ne + 1, sizeof *ents);
    mg_ent *order = calloc(ne + 1, sizeof *order);
    np_strmap pos = {0};
    size_t n = 0, k = d->n_entries;
    int bad = !keys || !calls || !seq || !ents || !order || np_strmap_init(&pos, nc + 1) != 0 ||
              mg_calls(a, d, own, keys, calls, &n, &pos, arena) != 0;
    mg_key *sorted = bad ? NULL : malloc((n + 1) * sizeof *sorted);
    bad |= !sorted;
    /* room for the leaves the merged rows assemble (a->leaves was sized
     * for this file's rows: data-parallel replicas of the other ranks'
     * experts are assembled pieces too) */
    asm_leaf *grown = bad ? NULL : realloc(a->leaves, (a->n_leaves + ne + 1) * sizeof *grown);
    bad |= !grown;
    if (grown)
        a->leaves = grown;
    if (!bad) {
        memcpy(sorted, keys, n * sizeof *keys);
        qsort(sorted, n, sizeof *sorted, mg_cmp);
        for (size_t i = 0; i < n; i++) /* the merged order of call i: bsearch its key */
            seq[i] = (mg_key *)bsearch(&keys[i], sorted, n, sizeof *sorted, mg_cmp) - sorted;
        for (size_t i = 0; i < d->n_entries; i++) {
            ents[i] = d->entries[i];
            int j = np_strmap_get(&pos, ents[i].call);
            ents[i].seq = j >= 0 ? seq[j] : ents[i].seq;
        }
        bad = mg_rows(a, own, &pos, seq, ents, &k, h, pieces, arena, err, &st) != 0;
    }
    if (!bad && st == NP_OK) {
        cmp_call_rec *cs = calloc(n + 1, sizeof *cs);
        np_cmp_side *es = calloc(k + 1, sizeof *es);
        bad = !cs || !es;
        for (size_t i = 0; !bad && i < n; i++) {
            cs[seq[i]] = calls[i];
            cs[seq[i]].seq = seq[i];
        }
        for (size_t i = 0; !bad && i < k; i++)
            order[i] = (mg_ent){ents[i].seq, (int64_t)i};
        if (!bad)
            qsort(order, k, sizeof *order, mg_ent_cmp);
        for (size_t i = 0; !bad && i < k; i++)
            es[i] = ents[order[i].i];
        if (bad) {
            free(cs);
            free(es);
        } else {
            free(d->calls);
            free(d->entries);
            d->calls = cs;
            d->n_calls = n;
            d->cap_calls = n + 1;
            d->entries = es;
            d->n_entries = k;
            d->cap_entries = k + 1;
        }
    }
    if (bad && st == NP_OK)
        st = np_error_set(err, NP_ERR_NOMEM, d->path, NULL, "out of memory merging the leaves "
                          "held by other ranks");
    np_strmap_free(&pos);
    free(keys);
    free(calls);
    free(seq);
    free(ents);
    free(order);
    free(sorted);
    return st;
}

/* ---- a pipeline's stages ------------------------------------------------------- */

/* 0: a forward call, 1: a backward call, 2: neither (a module's parameter
 * gradients, after the backward). */
static int call_phase(const char *call)
{
    size_t at, len;
    if (call_counter(call, &at, &len) < 0)
        return 2;
    return cmp_is_backward(call) ? 1 : 0;
}

typedef struct pp_call {
    int r;                 /* index into a->ranks */
    size_t k;              /* row of its /calls */
    int phase, key;        /* key: the stage, counted from the last in the backward */
} pp_call;

static int pp_call_order(const void *x, const void *y)
{
    const pp_call *a = x, *b = y;
    if (a->phase != b->phase)
        return a->phase < b->phase ? -1 : 1;
    if (a->key != b->key)
        return a->key < b->key ? -1 : 1;
    if (a->r != b->r)
        return a->r < b->r ? -1 : 1;
    return a->k < b->k ? -1 : a->k > b->k;
}

/* Another rank's row as a side (strings and shape in the arena); -1 out of memory. */
static int side_of(np_cmp_side *s, const np_entry_rec *r, const np_dumpio_info *in,
                   cmp_arena *arena)
{
    memset(s, 0, sizeof *s);
    s->name = cmp_arena_strdup(arena, r->name);
    s->call = cmp_arena_strdup(arena, r->call);
    s->role = cmp_arena_strdup(arena, r->role);
    s->dtype = cmp_arena_strdup(arena, r->dtype);
    int nd = r->ndim < 0 ? 0 : r->ndim > NP_FMT_MAX_DIMS ? NP_FMT_MAX_DIMS : r->ndim;
    int64_t *shape = cmp_arena_alloc(arena, (size_t)(nd ? nd : 1) * sizeof *shape, sizeof *shape);
    if (!s->name || !s->call || !s->role || !s->dtype || !shape)
        return -1;
    memcpy(shape, r->shape, (size_t)nd * sizeof *shape);
    s->shape = shape;
    s->ndim = (int8_t)nd;
    s->numel = r->numel;
    s->stats = np_fmt_entry_stats(r);
    s->crc32 = r->crc32;
    s->has_data = r->has_data;
    s->requires_grad = r->requires_grad;
    char why[400];
    if (np_dumpio_entry_problem(in, r, why, sizeof why) &&
        !(s->defect = cmp_arena_strdup(arena, why)))
        return -1;
    return 0;
}

/* The calls of every stage in the order one process makes them: the
 * forwards of stages 0 .. P-1, the backwards of P-1 .. 0, then the
 * parameters' gradients (a call both the first and the last stage make,
 * the tied embedding's, once). */
static pp_call *pp_calls(const cmp_assembly *a, size_t *n)
{
    size_t nc = 0;
    for (int r = 0; r < a->n_ranks; r++)
        nc += a->ranks[r].nc;
    pp_call *pc = malloc((nc + 1) * sizeof *pc);
    if (!pc)
        return NULL;
    int P = (int)a->mesh.shape[a->pp_dim];
    *n = 0;
    for (int r = 0; r < a->n_ranks; r++) {
        int stage = (int)a->ranks[r].coords[a->pp_dim];
        for (size_t k = 0; k < a->ranks[r].nc; k++) {
            int phase = call_phase(a->ranks[r].c[k].call);
            pc[(*n)++] = (pp_call){r, k, phase, phase == 1 ? P - 1 - stage : stage};
        }
    }
    qsort(pc, *n, sizeof *pc, pp_call_order);
    return pc;
}

/* One merged call and its rows (the first holder's; micro-batch m >= 1
 * rows are pieces, not rows): appended to calls / ents. */
static int pp_take_call(cmp_assembly *a, const cmp_dump *d, const pp_call *pc,
                        const int64_t *head, const int64_t *next, np_strmap *leaves,
                        cmp_call_rec *calls, size_t *kc, np_cmp_side *ents, size_t *ke,
                        cmp_arena *arena)
{
    const asm_rank *k = &a->ranks[pc->r];
    const np_call_rec *c = &k->c[pc->k];
    cmp_call_rec *o = &calls[*kc];
    o->name = cmp_arena_strdup(arena, c->call);
    o->kind = strcmp(c->kind, "module") == 0 ? "module" : "api";
    o->parent = c->parent[0] ? cmp_arena_strdup(arena, c->parent) : "";
    o->callsite = c->callsite[0] ? cmp_arena_strdup(arena, c->callsite) : "";
    o->seq = (int64_t)*kc;
    if (!o->name || !o->parent || !o->callsite ||
        np_strmap_put(&a->call_rank, o->name, pc->r) != 0)
        return -1;
    int own = k->rank == a->own_rank;
    for (int64_t i = c->seq >= 0 && (size_t)c->seq < k->nc ? head[c->seq] : -1; i >= 0; i = next[i]) {
        const np_entry_rec *e = &k->e[i];
        if ((k->later && k->later[i]) || np_strmap_get(leaves, e->name) >= 0)
            continue;
        np_cmp_side *s = &ents[*ke];
        if (own && (size_t)i < d->n_entries)
            *s = d->entries[i]; /* this file's row as read (the same order) */
        else if (side_of(s, e, np_dumpio_get_info(k->io), arena) != 0)
            return -1;
        s->seq = o->seq;
        if (np_strmap_put(leaves, s->name, (int)*ke) != 0)
            return -1;
        (*ke)++;
    }
    (*kc)++;
    return 0;
}

/* The rows of rank k by call: head[seq] its first, next[i] the one after. */
static int pp_index(const asm_rank *k, int64_t **head, int64_t **next)
{
    *head = malloc((k->nc + 1) * sizeof **head);
    *next = malloc((k->ne + 1) * sizeof **next);
    if (!*head || !*next)
        return -1;
    for (size_t q = 0; q < k->nc; q++)
        (*head)[q] = -1;
    for (size_t i = k->ne; i-- > 0;) {
        int64_t q = k->e[i].seq;
        (*next)[i] = q >= 0 && (size_t)q < k->nc ? (*head)[q] : -1;
        if (q >= 0 && (size_t)q < k->nc)
            (*head)[q] = (int64_t)i;
    }
    return 0;
}

/* d's rows and calls replaced by every stage's, merged (pp_calls' order). */
static np_status pp_merge(cmp_assembly *a, cmp_dump *d, cmp_arena *arena, np_error *err)
{
    size_t n = 0, ne = 0;
    for (int r = 0; r < a->n_ranks; r++)
        ne += a->ranks[r].ne;
    pp_call *pc = pp_calls(a, &n);
    cmp_call_rec *calls = calloc(n + 1, sizeof *calls);
    np_cmp_side *ents = calloc(ne + 1, sizeof *ents);
    int64_t **head = calloc((size_t)a->n_ranks + 1, sizeof *head);
    int64_t **next = calloc((size_t)a->n_ranks + 1, sizeof *next);
    np_strmap seen = {0}, leaves = {0};
    int bad = !pc || !calls || !ents || !head || !next || np_strmap_init(&seen, n + 1) != 0 ||
              np_strmap_init(&leaves, ne + 1) != 0 || np_strmap_init(&a->call_rank, n + 1) != 0;
    for (int r = 0; !bad && r < a->n_ranks; r++)
        bad = pp_index(&a->ranks[r], &head[r], &next[r]) != 0;
    size_t kc = 0, ke = 0;
    for (size_t j = 0; !bad && j < n; j++) {
        const asm_rank *k = &a->ranks[pc[j].r];
        const np_call_rec *c = &k->c[pc[j].k];
        int64_t first = c->seq >= 0 && (size_t)c->seq < k->nc ? head[pc[j].r][c->seq] : -1;
        if ((first >= 0 && k->later && k->later[first]) || np_strmap_get(&seen, c->call) >= 0)
            continue; /* a micro-batch m >= 1's call (its name may be another stage's) */
        const char *nm = c->call;
        bad = np_strmap_put(&seen, nm, 1) != 0 ||
              pp_take_call(a, d, &pc[j], head[pc[j].r], next[pc[j].r], &leaves, calls, &kc, ents,
                           &ke, arena) != 0;
    }
    for (int r = 0; head && next && r < a->n_ranks; r++) {
        free(head[r]);
        free(next[r]);
    }
    free(head);
    free(next);
    free(pc);
    np_strmap_free(&seen);
    np_strmap_free(&leaves);
    if (bad) {
        free(calls);
        free(ents);
        return np_error_set(err, NP_ERR_NOMEM, d->path, NULL, "out of memory merging the "
                            "pipeline stages' rows");
    }
    free(d->entries);
    free(d->calls);
    d->entries = ents;
    d->n_entries = ke;
    d->cap_entries = ne + 1;
    d->calls = calls;
    d->n_calls = kc;
    d->cap_calls = n + 1;
    return NP_OK;
}

/* The holder of micro-batch m among h[0..n) at the place in its stage of
 * rank ranks[r] (the same coordinates on every mesh dimension but pp and
 * mb: its data-parallel group's rows, its TP rank's copy or positions), or
 * NULL. */
static const holder *holder_of_m(const cmp_assembly *a, const holder *h, int n, int m, int r)
{
    for (int i = 0; i < n; i++) {
        int same = h[i].m == m;
        for (int k = 0; k < a->mesh.ndim && same; k++)
            same = k == a->pp_dim || k == a->mb_dim ||
                   a->ranks[h[i].r].coords[k] == a->ranks[r].coords[k];
        if (same)
            return &h[i];
    }
    return NULL;
}

/* A received leaf (Distributed.recv.K.forward's output 0, .backward's input
 * 0) against the leaf its sender dumped (Distributed.send.K.forward's input
 * 0, .backward's output 0), micro-batch by micro-batch: the first that
 * differs is the finding (cmp_assembly_p2p). */
static void p2p_check(cmp_assembly *a, const char *recv_leaf, holder *hr, holder *hs)
{
    const char *at = strstr(recv_leaf, "Distributed.recv.");
    int bwd = strstr(recv_leaf, ".backward.") != NULL;
    if (at != recv_leaf || strcmp(recv_leaf + strlen(recv_leaf) - (bwd ? 8 : 9),
                                  bwd ? ".input.0" : ".output.0") != 0)
        return;
    char send_leaf[NP_FMT_NAME_LEN + 16];
    snprintf(send_leaf, sizeof send_leaf, "Distributed.send.%.*s%s",
             (int)(strlen(recv_leaf) - 17 - (bwd ? 8 : 9)), recv_leaf + 17,
             bwd ? ".output.0" : ".input.0");
    int partial = 0;
    int nr = holders_of(a, recv_leaf, hr, &partial), ns = holders_of(a, send_leaf, hs, &partial);
    if (nr < 1 || ns < 1)
        return;
    a->n_p2p++;
    for (int i = 0; i < nr && !a->p2p_leaf[0]; i++) {
        const holder *s = holder_of_m(a, hs, ns, hr[i].m, hr[i].r);
        if (!s || same_values(s->e, hr[i].e))
            continue;
        char wr[160], ws[160], also[200] = "";
        who(wr, sizeof wr, a, &a->ranks[hr[i].r], hr[i].m);
        who(ws, sizeof ws, a, &a->ranks[s->r], s->m);
        for (int j = 0; j < a->n_mb; j++) {
            const holder *o = j != hr[i].m ? holder_of_m(a, hs, ns, j, hr[i].r) : NULL;
            if (o && same_values(o->e, hr[i].e)) {
                snprintf(also, sizeof also, "; it holds what was sent as micro-batch %d", j);
                break;
            }
        }
        snprintf(a->p2p_leaf, sizeof a->p2p_leaf, "%s", recv_leaf);
        snprintf(a->p2p_text, sizeof a->p2p_text,
                 "pipeline: %.100s received at %.160s values other than %.100s sent (%.160s: "
                 "max %.9g vs %.9g, norm %.9g vs %.9g)%s", wr, hr[i].e->call, ws, s->e->name, hr[i].e->max,
                 s->e->max, hr[i].e->norm, s->e->norm, also);
    }
}

int cmp_assembly_files(const cmp_dump *d)
{
    return d->assembly && d->assembly->pp_dim >= 0 ? d->assembly->n_ranks : 0;
}

const char *cmp_assembly_file(const cmp_dump *d, int i)
{
    return i >= 0 && i < cmp_assembly_files(d) ? d->assembly->ranks[i].path : NULL;
}

int cmp_assembly_call_file(const cmp_dump *d, const char *call)
{
    return cmp_assembly_files(d) ? np_strmap_get(&d->assembly->call_rank, call) : -1;
}

const char *cmp_assembly_p2p(const cmp_dump *d, const char **leaf)
{
    const cmp_assembly *a = d->assembly;
    if (!a || !a->p2p_leaf[0])
        return NULL;
    *leaf = a->p2p_leaf;
    return a->p2p_text;
}

static np_status assemble(cmp_dump *d, cmp_arena *arena, np_error *err)
{
    const np_dumpio_info *in = d->io ? np_dumpio_get_info(d->io) : NULL;
    if (!in || in->mesh_ndim < 1)
        return NP_OK; /* not sharded: the rows as read are the logical rows */
    cmp_assembly *a = calloc(1, sizeof *a);
    if (!a)
        return np_error_set(err, NP_ERR_NOMEM, d->path, NULL, "out of memory");
    d->assembly = a;
    a->own_rank = d->rank;
    a->mesh.ndim = in->mesh_ndim;
    for (int k = 0; k < in->mesh_ndim; k++) {
        memcpy(a->mesh.dims[k], in->mesh_dims[k], sizeof a->mesh.dims[k]);
        a->mesh.shape[k] = in->mesh_shape[k];
        a->mesh.coords[k] = in->mesh_coords[k];
    }
    a->mb_dim = a->pp_dim = -1;
    a->n_mb = 1;
    a->own_stage = a->no_stage = -1;
    for (int k = 0; k < in->mesh_ndim; k++)
        if (!strcmp(in->mesh_dims[k], NP_FMT_MESH_MB)) {
            a->mb_dim = k;
            a->n_mb = (int)in->mesh_shape[k];
        } else if (!strcmp(in->mesh_dims[k], "pp") && !strcmp(in->framework, "nprobe-runtime")) {
            /* the runtime's stages name every call as one process does: merged
             * whole (a framework's stages count their calls from 0: each
             * compared on its own, stage_offsets) */
            a->pp_dim = k;
        }
    np_status st = ranks_open(a, d, in->world_size, err);
    if (st == NP_OK && a->pp_dim >= 0)
        st = pp_merge(a, d, arena, err);
    size_t nh = (size_t)a->n_ranks * (size_t)a->n_mb + 1;
    holder *h = calloc(nh, sizeof *h), *h2 = calloc(nh, sizeof *h2);
    asm_piece *pieces = calloc(nh, sizeof *pieces);
    a->leaves = calloc(d->n_entries + 1, sizeof *a->leaves);
    if (st == NP_OK && (!h || !h2 || !pieces || !a->leaves || np_strmap_init(&a->leaf_map, d->n_entries + 1)))
        st = np_error_set(err, NP_ERR_NOMEM, d->path, NULL, "out of memory");
    /* this rank's rows of micro-batches m >= 1 are pieces, not rows (a
     * pipeline's merged rows are rows) */
    const asm_rank *own = NULL;
    for (int r = 0; r < a->n_ranks && a->mb_dim >= 0 && a->pp_dim < 0; r++)
        if (a->ranks[r].rank == d->rank)
            own = &a->ranks[r];
    size_t k = 0;
    for (size_t i = 0; st == NP_OK && i < d->n_entries; i++) {
        np_cmp_side s = d->entries[i];
        int ri = own ? np_strmap_get(&own->nmap, s.name) : -1, renamed = 0;
        if (ri >= 0 && own->later[ri])
            continue; /* a piece of micro-batch m >= 1, not a row */
        if (ri >= 0 && a->no_stage >= 0 && own->st[ri] > a->no_stage && own->mb[ri] >= 0 &&
            api_call(s.call)) {
            /* an earlier stage has no file: the API calls of the stages
             * after it cannot be given their one-process numbers (nor
             * paired by their own) */
            a->n_unnumbered++;
            continue;
        }
        if (ri >= 0 && own->keys[ri][0]) {
            /* a pipeline stage's API call, by its one-process name */
            s.name = cmp_arena_strdup(arena, own->keys[ri]);
            s.call = cmp_arena_strdup(arena, own->lcall[ri]);
            renamed = 1;
            if (!s.name || !s.call)
                st = np_error_set(err, NP_ERR_NOMEM, d->path, NULL, "out of memory");
        }
        if (st == NP_OK && assemble_leaf(a, &s, arena, h, pieces, renamed, err, &st))
            d->entries[k++] = s;
        if (st == NP_OK && a->pp_dim >= 0)
            p2p_check(a, s.name, h, h2);
    }
    if (st == NP_OK)
        d->n_entries = k;
    if (st == NP_OK && own)
        st = rename_calls(d, own, arena, err);
    if (st == NP_OK && a->pp_dim < 0 && a->mb_dim < 0)
        st = merge_others(a, d, h, pieces, arena, err);
    if (st == NP_OK && a->pp_dim < 0 && a->mb_dim >= 0)
        count_not_here(a, d->rank);
    free(h);
    free(h2);
    free(pieces);
    return st;
}

const cmp_assemble_fn cmp_assembler = assemble;

void cmp_assembly_drop_skipped(const cmp_dump *from, cmp_dump *other)
{
    const cmp_assembly *a = from->assembly;
    if (!a || !a->skipped.cap)
        return;
    size_t k = 0;
    for (size_t i = 0; i < other->n_entries; i++)
        if (np_strmap_get(&a->skipped, other->entries[i].name) < 0)
            other->entries[k++] = other->entries[i];
    other->n_entries = k;
}

int cmp_assembly_local_io(const cmp_dump *d, const char *call)
{
    const cmp_assembly *a = d->assembly;
    int v = a && a->local_io.cap && call ? np_strmap_get(&a->local_io, call) : -1;
    return v < 0 ? 0 : v;
}

size_t cmp_assembly_notes(const cmp_dump *d, void (*note)(void *, const char *), void *user)
{
    const cmp_assembly *a = d->assembly;
    if (!a)
        return 0;
    char buf[1500];
    snprintf(buf, sizeof buf, "Sharded layout (mesh");
    for (int k = 0; k < a->mesh.ndim; k++)
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s=%lld", k ? ", " : " ",
                 a->mesh.dims[k], (long long)a->mesh.shape[k]);
    snprintf(buf + strlen(buf), sizeof buf - strlen(buf),
             "): %zu logical tensor(s) assembled from the %d rank file(s) of the step.",
             a->n_assembled, a->n_ranks);
    note(user, buf);
    if (a->missing_ranks[0]) {
        snprintf(buf, sizeof buf, "Sharded layout: no file for rank(s) %s of the step.",
                 a->missing_ranks);
        note(user, buf);
    }
    if (a->no_stage >= 0) {
        int has = a->missing_ranks[0] != 0;
        snprintf(buf, sizeof buf, "Pipeline: stage %d has no file beside this one%s%s%s: "
                 "the API calls of this file's stages after it cannot be numbered as one "
                 "process numbers them (the earlier stages' calls are counted from their "
                 "files), so its %zu API call row(s) are left out; its modules' rows are "
                 "compared.", a->no_stage, has ? " (no file for rank(s) " : "",
                 has ? a->missing_ranks : "", has ? ")" : "", a->n_unnumbered);
        note(user, buf);
    }
    if (a->n_replica_diff) {
        snprintf(buf, sizeof buf, "Replica disagreement: %zu leaf(s) whose replicas differ; the "
                 "first: %s. The lowest rank's copy was compared.", a->n_replica_diff,
                 a->first_replica);
        note(user, buf);
    }
    if (a->n_defects) {
        snprintf(buf, sizeof buf, "Shard disagreement: %zu leaf(s) could not be assembled; the "
                 "first: %s.", a->n_defects, a->first_defect);
        note(user, buf);
    }
    if (a->pp_dim >= 0) {
        snprintf(buf, sizeof buf, "Pipeline (pp=%lld): the stages' rows merged in the order one "
                 "process runs them; %zu received activation(s) and gradient(s) checked against "
                 "what the stage before or after sent%s%s.", (long long)a->mesh.shape[a->pp_dim],
                 a->n_p2p, a->p2p_leaf[0] ? ": " : "", a->p2p_leaf[0] ? a->p2p_text : ", all equal");
        note(user, buf);
    }
    if (a->n_not_here) {
        snprintf(buf, sizeof buf, "%zu leaf(s) held only by other ranks of the step (another "
                 "pipeline stage's) are not compared.", a->n_not_here);
        note(user, buf);
    }
    if (a->n_local) {
        snprintf(buf, sizeof buf, "%zu Local() leaf(s) left out on both sides: each rank's own "
                 "values (an expert-parallel run's routing positions, the tokens it sorted), no "
                 "piece of a one-process tensor.", a->n_local);
        note(user, buf);
    }
    if (a->n_others) {
        snprintf(buf, sizeof buf, "%zu leaf(s) held only by other ranks of the step (their own "
                 "modules: an expert-parallel run's experts) compared from their holders' "
                 "files, their calls placed before the call after them there.", a->n_others);
        note(user, buf);
    }
    if (a->n_partial_skipped) {
        snprintf(buf, sizeof buf, "%zu Partial(sum) leaf(s) left out on both sides: their sum "
                 "(Partial(avg): their mean) cannot be formed from statistics (compare "
                 "tensor dumps).",
                 a->n_partial_skipped);
        note(user, buf);
    }
    return a->n_replica_diff;
}

/* ---- which shards differ ------------------------------------------------------- */

/* Relative L2 error of piece h (values v) against the bench's logical
 * tensor b (shape gshape, ndim nd) at the piece's offset. */
static double piece_error(const holder *h, const double *v, double sv, const double *b, double sb,
                          const int64_t *gshape, int nd)
{
    const int64_t *sh = h->e->shape;
    int64_t idx[NP_FMT_MAX_DIMS] = {0}, rows = 1, w = nd ? sh[nd - 1] : 1;
    for (int d = 0; d < nd - 1; d++)
        rows *= sh[d];
    double dd = 0.0, bb = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t at = 0;
        for (int d = 0; d < nd; d++)
            at = at * gshape[d] + (d == 0 ? h->off0 : h->pl ? h->pl->offset[d] : 0) +
                 (d < nd - 1 ? idx[d] : 0);
        for (int64_t j = 0; j < w; j++) {
            double x = v[r * w + j] * sv, y = b[at + j] * sb;
            dd += (x - y) * (x - y);
            bb += y * y;
        }
        for (int d = nd - 2; d >= 0; d--) {
            if (++idx[d] < sh[d])
                break;
            idx[d] = 0;
        }
    }
    return bb > 0 ? sqrt(dd / bb) : sqrt(dd);
}

const char *cmp_assembly_blame(cmp_dump *cd, const np_cmp_side *cs, cmp_dump *bd,
                               const np_cmp_side *bs, cmp_arena *arena, np_error *err)
{
    cmp_assembly *a = cd->assembly;
    if (!a || bd->assembly || !cs->has_data || !bs->has_data || cs->numel != bs->numel ||
        cs->ndim != bs->ndim || cs->numel < 1)
        return NULL;
    holder *h = calloc((size_t)a->n_ranks * (size_t)a->n_mb + 1, sizeof *h);
    double *b = malloc((size_t)bs->numel * sizeof *b), *v = NULL, *e = NULL;
    int partial = 0, n = h ? holders_of(a, cs->name, h, &partial) : -1;
    int64_t g0 = n > 0 && h[0].pl && h[0].e->ndim > 0 ? h[0].pl->global_shape[0] : 0;
    if (n > 0)
        rows_of(a, h, n, &g0); /* the offsets the assembly used */
    size_t got = 0;
    const char *out = NULL;
    if (n < 2 || partial || !b ||
        np_dumpio_read_values(b, (size_t)bs->numel, &got, bd->io, bs->name, bs->numel, err) ||
        got != (size_t)bs->numel)
        goto done;
    double sb = cmp_side_is_grad(bs) ? 1.0 / bd->grad_div : 1.0;
    double sv = cmp_side_is_grad(cs) ? 1.0 / cd->grad_div : 1.0, worst = 0.0;
    e = calloc((size_t)n, sizeof *e);
    if (!e)
        goto done;
    for (int i = 0; i < n; i++) {
        if (h[i].e->numel == 0)
            continue; /* an empty piece (no payload): nothing of it differs */
        double *nv = realloc(v, (size_t)h[i].e->numel * sizeof *v);
        if (!nv)
            goto done;
        v = nv;
        if (!h[i].e->has_data || h[i].e->ndim != cs->ndim ||
            np_dumpio_read_checked(v, a->ranks[h[i].r].io, h[i].e, err) != NP_OK)
            goto done;
        e[i] = piece_error(&h[i], v, sv, b, sb, cs->shape, cs->ndim);
        worst = fmax(worst, e[i]);
    }
    if (!(worst > 1e-6))
        goto done;
    char buf[900];
    size_t len = 0;
    int named = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && len < sizeof buf - 200; i++) {
        if (!(e[i] >= 0.1 * worst && e[i] > 1e-6))
            continue;
        if (named++ == 8) {
            len += (size_t)snprintf(buf + len, sizeof buf - len, ", ...");
            break;
        }
        char w[160];
        who(w, sizeof w, a, &a->ranks[h[i].r], h[i].m);
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s", named > 1 ? ", " : "", w);
    }
    out = cmp_arena_strdup(arena, buf);
done:
    np_error_clear(err);
    free(h);
    free(b);
    free(v);
    free(e);
    return out;
}
