/* compare/internal.h - private pieces of np_compare shared between its
 * sources: string arena, string hash map, the dump reader, the payload
 * reader and the per-pair storage. Not installed, not for other parts. */
#ifndef NPROBE_COMPARE_INTERNAL_H
#define NPROBE_COMPARE_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "nprobe/compare.h"
#include "nprobe/dumpio.h"

/* ---- arena: many small strings and shape arrays, freed at once -------- */
typedef struct cmp_arena_block cmp_arena_block;
typedef struct cmp_arena {
    cmp_arena_block *head;
} cmp_arena;

void *cmp_arena_alloc(cmp_arena *a, size_t n, size_t align); /* NULL on OOM */
const char *cmp_arena_strdup(cmp_arena *a, const char *s);   /* NULL on OOM */
/* A formatted string (up to 900 bytes) in the arena; "" on OOM. */
const char *cmp_arena_printf(cmp_arena *a, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void cmp_arena_free(cmp_arena *a);


/* ---- a dump file (read through np_dumpio) ---------------------------- */
typedef struct cmp_call_rec {
    const char *name, *kind, *parent, *callsite;
    int64_t seq;
} cmp_call_rec;

typedef struct cmp_assembly cmp_assembly;

typedef struct cmp_dump {
    char path[1024];
    np_dumpio *io;             /* open while the pair is compared (payloads) */
    char task[32], level[16], precision[16], device[32];
    int64_t step, rank, complete;
    double loss_scale;         /* root attribute loss_scale (1 when absent) */
    double dp_grad_scale;      /* root attribute dp_grad_scale (1 when absent) */
    double grad_div;           /* loss_scale x dp_grad_scale: what gradients are divided by */
    int has_calls;             /* the file has a calls table */
    np_cmp_side *entries; size_t n_entries, cap_entries;
    cmp_call_rec *calls; size_t n_calls, cap_calls;
    const np_cmp_side *twin_entries; /* the other side's entries, or NULL */
    const np_strmap *twin_names;     /* their names -> index */
    size_t call_cursor;              /* reading /calls: position in entries */
    char attr_problems[512];         /* np_dumpio_info.problems: root attributes */
    char call_problem[640];          /* the first /calls row that contradicts itself or
                                      * the entries ("/calls row 3: kind ..."), "" when none */
    size_t n_call_problems;
    cmp_assembly *assembly;          /* a sharded side's logical tensors (assemble.c), or NULL */
} cmp_dump;

/* ---- a sharded side's logical tensors (assemble.c, the assemble stage) ---- */

/* Freed with the dump (cmp_dump_close): the other ranks' files close. */
void cmp_assembly_free(cmp_assembly *a);
/* 1 when leaf `name` of d is assembled from several ranks' pieces. */
int cmp_assembly_has(const cmp_dump *d, const char *name);
/* The pipeline stage d's file holds (its placement rows), -1 none. */
int cmp_assembly_stage(const cmp_dump *d);
/* Whether leaf `name`'s replicas over the ranks of d's step differ. */
int cmp_assembly_parted(const cmp_dump *d, const char *name);
/* An assembled logical tensor read in order, a range at a time, with
 * bounded memory (the pieces' ranges read as they are needed; a piece not
 * stored as raw float32 is held whole): open leaf `name` of d (*numel, may
 * be NULL, gets its element count; with s, the side gets the logical
 * tensor's crc32 once every element was read, where a one-process dump
 * would store one), fill elements [lo, lo + cnt) as float64 into out in
 * order (lo the previous call's end; 0 ok, -1 on a failure the close
 * returns), close (checks each piece's stored bytes against its crc32 when
 * every element was read; NULL is a no-op). cmp_assembly_stream_fill has
 * the cmp_src fill form (metrics.c streams it chunk by chunk). */
typedef struct cmp_asm_stream cmp_asm_stream;
np_status cmp_assembly_stream_open(cmp_asm_stream **out, cmp_dump *d, const char *name,
                                   np_cmp_side *s, int64_t *numel, np_error *err);
int cmp_assembly_stream_fill(void *stream, int64_t lo, int64_t cnt, double *out);
np_status cmp_assembly_stream_close(cmp_asm_stream *st, np_error *err);
/* The whole logical tensor of leaf `name` (n elements) into out, through
 * the stream (the caller holds it whole: the weights rule's small rows). */
np_status cmp_assembly_values(double *out, cmp_dump *d, const char *name, int64_t n,
                              np_error *err);
/* The assembly's notes (what was assembled; replica and shard
 * disagreements naming leaf, ranks and mesh coordinates), each to `note`. */
size_t cmp_assembly_notes(const cmp_dump *d, void (*note)(void *, const char *), void *user);
/* (returns the number of leaves whose replicas differ) */
/* Which ranks' pieces of the cmp side's leaf cs differ from the bench's
 * leaf bs (a one-rank bench): every holder's piece (shards and replicas
 * alike) read and compared with the bench values at its offset (relative
 * L2 error, gradients divided by their loss scale); those within a tenth
 * of the worst piece's error, and above 1e-6, are named: "rank 0 (tp=0),
 * rank 1 (tp=1)" in the arena. NULL when nothing can be said (a partial
 * sum, no payloads, a sharded bench, every piece agrees). */
const char *cmp_assembly_blame(cmp_dump *cd, const np_cmp_side *cs, cmp_dump *bd,
                               const np_cmp_side *bs, cmp_arena *arena, np_error *err);
/* A pipeline (mesh dimension "pp"): the first received leaf (Distributed.
 * recv.K.forward's output, .backward's input) whose values on some
 * micro-batch are not those its sender dumped (Distributed.send.K), into
 * *leaf, and the words naming both ranks, stages and micro-batches; NULL
 * when every one agrees (or d is no pipeline). */
const char *cmp_assembly_p2p(const cmp_dump *d, const char **leaf);
/* A pipeline's stage files (0 when d is no pipeline), the path of file i,
 * and the file whose call `call` is (the merged call was taken from it: a
 * stage's micro-batch m >= 1 calls may bear another stage's names); -1
 * when none. The replay recomputes each file's own calls. */
int cmp_assembly_files(const cmp_dump *d);
const char *cmp_assembly_file(const cmp_dump *d, int i);
int cmp_assembly_call_file(const cmp_dump *d, const char *call);
/* Which of call `call`'s leaves the assembly left out as Local() (each
 * rank's own values: an expert-parallel run's routing): 1 an input,
 * parameter or scalar argument, 2 an output, 3 both; 0 none. */
int cmp_assembly_local_io(const cmp_dump *d, const char *call);
/* Leave out of `other` the leaves `from`'s assembly left out (Partial(sum)
 * in a statistics dump), so they do not stand as one-sided rows. */
void cmp_assembly_drop_skipped(const cmp_dump *from, cmp_dump *other);

/* Open the step file `ref` (np_dumpio_open_ref with `flags`), read its root
 * information, its entries (in chunks, into compact records stored in
 * `arena`) and its calls. With `twin` (the other side, already read) and
 * `twin_names` (its leaf names -> index), a leaf also present there
 * borrows its name, call and shape strings instead of storing copies (both
 * sides live in the same arena). On failure *d is closed. */
/* keep_inf: the other side's statistics include +-inf (msprobe's): put
 * this side's into that form too when its own do not (the like with the
 * like, np_msp_stats_keep_inf). */
np_status cmp_dump_open(cmp_dump *d, const np_dumpio_ref *ref, unsigned flags, int keep_inf,
                        const cmp_dump *twin, const np_strmap *twin_names, cmp_arena *arena,
                        np_error *err);
/* Close the file; the entries and calls stay (handed over to the pair). */
void cmp_dump_close(cmp_dump *d);

/* ---- payloads ---------------------------------------------------------- */

/* Where a side's elements come from: memory (float32 or float64) or file
 * segments read with pread (uncompressed little-endian float32 storage). */
typedef np_dumpio_seg cmp_seg;  /* flat element range and its byte address in the file */

enum { CMP_SRC_MEM_F32 = 0, CMP_SRC_MEM_F64, CMP_SRC_FILE_F32, CMP_SRC_STREAM };

typedef struct cmp_src {
    int kind;
    const void *mem;
    int fd;
    const cmp_seg *segs;
    int nseg;
    int crc;                    /* 1: compute the crc32 of the elements' bytes (4 bytes each,
                                 * 8 for CMP_SRC_MEM_F64) in the same pass */
    double scale;               /* the metrics see the elements times this (0 or 1: as
                                 * stored; a loss scale's inverse for gradients); the crc32
                                 * is of the stored bytes */
    /* CMP_SRC_STREAM: fill(user, lo, cnt, out) writes elements [lo, lo + cnt)
     * as float64, called in element order (lo the previous call's end); 0
     * ok. The kernel holds one chunk of them at a time and computes exactly
     * what it computes for the same values as CMP_SRC_MEM_F64 (crc unset:
     * the stream checks its own). */
    int (*fill)(void *user, int64_t lo, int64_t cnt, double *out);
    void *user;
    int64_t base;               /* the kernel's: the element mem[0] holds (a stream's chunk) */
} cmp_src;

/* The one-pass metric kernel over two sources of n elements; 0 ok, -1 when a
 * file read failed (m is then undefined). With crc (may be NULL), crc[0]
 * and crc[1] receive the crc32 of the bench and cmp elements' bytes, for
 * the sources whose `crc` is set: computed on each block as it is read for
 * the metrics (still in cache), combined in block order. */
int cmp_metrics_src(np_cmp_metrics *m, const cmp_src *b, const cmp_src *c, int64_t n,
                    int ndim, double atol, uint32_t crc[2]);

/* Reusable buffers of the payload reader, one per thread. */
typedef struct cmp_buffers {
    np_dumpio_buf b, c;
} cmp_buffers;
void cmp_buffers_free(cmp_buffers *bufs);

/* Compare the payloads of one matched pair of leaves (both have data):
 * fills m (NaN where not applicable) and adds the bytes read, and checks
 * each payload's stored bytes against its crc32 in /entries
 * (docs/FORMAT.md) on the blocks read for the metrics. Returns NP_OK, or
 * an error naming the file and leaf when a payload cannot be read or does
 * not match its crc32 (the row then becomes an error row, left out of the
 * root cause); *corrupt (may be NULL) is set to 1 in the second case. */
np_status cmp_payload_metrics(np_cmp_metrics *m, cmp_dump *bd, const np_cmp_side *bs,
                              cmp_dump *cd, const np_cmp_side *cs, double atol,
                              cmp_buffers *bufs, uint64_t *bytes, int *corrupt, np_error *err);

/* ---- analysis ---------------------------------------------------------- */

/* Give every row its verdict and severity (rows' metrics filled). Outside
 * tensor mode, reports progress in rows (o->progress, every 65536 rows and
 * at the end) as pair `pair_index` of `n_pairs`. */
/* s: the two sides as read (payloads for the weights rule), or NULL. */
typedef struct cmp_run_sides cmp_run_sides;
void cmp_verdicts(np_cmp_pair *p, const np_cmp_options *o, const cmp_run_sides *s,
                  int pair_index, int n_pairs);
/* The two sides of a pair as read (their payloads open in tensor mode). */
struct cmp_run_sides {
    cmp_dump *bench, *cmp;
};
/* A discrete choice (topk, sort, ...) that flipped on a near-tie: its index
 * rows and the failing rows after it become warnings, the notes say it
 * (near_tie.c; after the verdicts, before the root cause). */
void cmp_near_ties(np_cmp_pair *p, const cmp_run_sides *s);
/* An element-normalised update (addcdiv: Adam's step) whose output fails
 * only where its numerator or denominator is the runs' noise: its output
 * rows become warnings (noise_quotient.c; after the near-ties). */
void cmp_noise_quotients(np_cmp_pair *p, const cmp_run_sides *s);
/* Weights that parted beyond their level at a step s > 0 on the noise of
 * step s-1's gradient (read from the same rank's files of that step,
 * pv->prev_bench / prev_cmp): rows i with wt[i] and severity > 1, their
 * level t[i].rtol; the step before's gradient of each must itself have been
 * within its level (t[j], scale[j]: the level and scale row j, the same
 * gradient at this step, was judged at; `rows`: the cmp leaf names -> row,
 * the one map verdict.c builds a pair); dw[i] gets the L2 norm of the
 * runs' difference on the noise elements (0: not explained), the row's
 * reason and the pair's notes say it. Returns how many (parted_noise.c; tensor mode). */
int cmp_parted_noise(np_cmp_pair *p, const cmp_run_sides *s, const unsigned char *wt,
                     const np_cmp_tolerance *t, const double *scale, const np_strmap *rows,
                     double *dw);
/* Per-call statuses and the culprit list (rows' verdicts filled). */
np_status cmp_root_cause(np_cmp_pair *p, np_error *err);
/* p->culprits: the calls whose status is culprit, in call order (verdict.c). */
np_status cmp_culprit_list(np_cmp_pair *p, np_error *err);

/* Tensor mode: recompute the cmp side's calls in float64 (nprobe replay) and
 * let each call's isolated error correct its status (compare/isolated.c). */
np_status cmp_isolated(np_cmp_pair *p, int no_replay, int replay_all, np_error *err);
/* Append a sentence to the pair's notes (util.c; cut at the notes' size). */
void cmp_vnote(np_cmp_pair *p, const char *fmt, va_list ap)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 0)))
#endif
    ;
void cmp_note(np_cmp_pair *p, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Rule 3 (verdict.c): error rows but no culprit: name the call below the
 * level where the error jumped (docs/COMPARE.md, "Sub-threshold origin"). */
np_status cmp_subthreshold(np_cmp_pair *p, np_error *err);
/* Rule 2 (verdict.c): a call made on the bench side only (a gap) names the
 * innermost module holding it and the culprit after it (docs/COMPARE.md, "Gaps"). */
np_status cmp_gaps(np_cmp_pair *p, np_error *err);

/* Match the two dumps' entries into p->rows (rows get bench/cmp/match). */
typedef struct cmp_mapping cmp_mapping;
np_status cmp_mapping_load(cmp_mapping **out, const char *path, np_error *err);
void cmp_mapping_free(cmp_mapping *m);
/* `bench_names`: the bench leaf names -> first index (cmp_names_map). */
np_status cmp_match(np_cmp_pair *p, const cmp_dump *b, const cmp_dump *c,
                    const np_strmap *bench_names, int fuzzy, const cmp_mapping *map,
                    cmp_arena *arena, np_error *err);
/* Leaf names of a dump -> index of their first row; 0 ok, -1 OOM. */
int cmp_names_map(np_strmap *m, const cmp_dump *d);

/* The private part behind np_cmp_pair.priv. */
/* Per row, tensor mode: whether the payloads could be read and match their
 * crc32 (cmp_pair_priv.payload). */
enum { CMP_PAYLOAD_OK = 0, CMP_PAYLOAD_UNREADABLE = 1, CMP_PAYLOAD_CORRUPT = 2 };

/* A tolerance in effect: the one given to the rows of a cmp dtype. */
typedef struct cmp_tol_rec {
    const char *dtype;
    const char *scope; /* "" (all rows of the dtype) or which gradients (routed level) */
    np_cmp_tolerance t;
} cmp_tol_rec;
#define CMP_MAX_TOLS 16

typedef struct cmp_pair_priv {
    cmp_arena arena;
    cmp_tol_rec tols[CMP_MAX_TOLS]; /* by cmp dtype, in order of first use (cmp_verdicts) */
    int n_tols;
    double opt_atol, opt_rtol, opt_cos; /* the overrides given (NaN = none) */
    np_cmp_metrics *metrics;   /* tensor mode: one per row (rows[i].m) */
    int8_t *payload;           /* tensor mode: CMP_PAYLOAD_* per row, else NULL; rows
                                * not OK are errors left out of the root cause */
    np_cmp_side *bench_entries, *cmp_entries;
    cmp_call_rec *bench_calls, *cmp_calls;
    /* gaps (rule 2, compare.c find_gaps): module gap_mod[i] holds more forward
     * calls of API gap_api[i] on the bench side than on the cmp side */
    const char **gap_mod, **gap_api;
    int *gap_bench, *gap_cmp;
    int n_gaps;
    /* the same rank's files of the step before, both sides (NULL: none) */
    const np_dumpio_ref *prev_bench, *prev_cmp;
    unsigned char *local_io;  /* per call (p->calls), from the root-cause stage on: which of its
                               * leaves a sharded side left out as Local() (bits as
                               * cmp_assembly_local_io); NULL when none */
    const cmp_dump *cmp_side; /* while the replay stage runs: the cmp side (a pipeline's
                               * stage files, cmp_assembly_files) */
} cmp_pair_priv;

/* 1 when the side is a gradient (a tensor of a backward call or a
 * parameter gradient): it carries its step's loss scale. */
int cmp_side_is_grad(const np_cmp_side *s);
/* NP_ERR_ARG for a report of a shrunk pair (np_cmp_pair_shrink). */
np_status cmp_shrunk_error(const char *path, np_error *err);
/* 1 when the two sides have the same dimensions (util.c). */
int cmp_same_shape(const np_cmp_side *a, const np_cmp_side *b);
/* Name helpers. */
/* The op of a forward API call ("Tensor.NAME.N.forward" -> NAME): its
 * length, *op at its first character; 0 (and *op NULL) for a backward call,
 * a module or a name without "API.NAME." (util.c). */
size_t cmp_forward_api_op(const np_cmp_call *c, const char **op);
/* 1 when the n characters at op are `name` (op NULL: 0). */
int cmp_op_is(const char *op, size_t n, const char *name);
/* 1 when `name` is the backward call of an op whose gradient is routed by a
 * comparison of forward values (relu, max_pool2d, clamp, ...; the module
 * classes ReLU, MaxPool2d, ...). */
int cmp_is_nonsmooth_backward(const char *name);
int cmp_is_backward(const char *call);
/* The forward call of a backward call name into buf; 0 if not a backward name. */
int cmp_forward_of(char *buf, size_t cap, const char *call);
/* Leaf name with call counters removed (fuzzy key) into buf. */
void cmp_fuzzy_key(char *buf, size_t cap, const char *leaf);

/* The 8-bit formats' unit roundoff (mxfp8, hif8, float8_e4m3fn: 2^-4;
 * float8_e5m2: 2^-3; 0 for other names) and tolerance (tol_lowp.c). */
double np_cmp_lowp_unit_roundoff(const char *d);
np_cmp_tolerance np_cmp_tolerance_lowp(const char *d);
/* The verdict of a quantization statistic (a kwargs leaf lowp_*, one side
 * only) of a run of `precision`: pass, or an error above the format's
 * saturation level (the reason `fmt` takes value and *level). 0: not such
 * a leaf (tol_lowp.c). */
int cmp_lowp_row(const char *leaf, const char *role, double value, const char *precision,
                 np_cmp_verdict *verdict, double *severity, const char **fmt, double *level);

/* The length of "API.N" at the start of a call name of a dtype cast
 * ("Tensor.to.4.forward" -> 11), 0 for any other call (match.c). */
size_t cmp_cast_base(const char *call);

#endif
