/* nprobe/dumpio.h - reading dumps: the one module every reader uses
 * (compare, ls, show, the summary of `nprobe dump`, config_check).
 *
 * A dump is read through a *source*: one implementation per on-disk format
 * (nprobe's HDF5 dump, docs/FORMAT.md; msprobe's dump.json + .pt files),
 * each a table of functions (np_dumpio_source) listed in dumpio/dumpio.c.
 * Callers never see the format: they find the step files under a path,
 * open one, and read its root information, its /entries and /calls rows
 * (as np_entry_rec / np_call_rec, whatever the format stores) and payloads
 * (as float32 or float64).
 *
 * Crash isolation: HDF5 1.10 can crash or loop on a file whose metadata is
 * corrupt. A source that reads through such a library names a `walk`; the
 * readers run it in a child process first (np_dumpio_open does it per file,
 * np_dumpio_checker for many files in a few children, ahead of the reads),
 * and a file whose walk dies is refused as corrupt. NPROBE_NO_ISOLATION=1
 * turns the walks off; NPROBE_FILE_CHECK_TIMEOUT bounds one file's walk.
 *
 * Errors: NP_ERR_NOTFOUND (no such path, no dump below it, no payload),
 * NP_ERR_FORMAT (not a dump of any known format, a corrupt file, a format
 * version this nprobe does not read), NP_ERR_INCOMPLETE (a step file cut
 * short that cannot be read), NP_ERR_NOMEM, NP_ERR_IO. Messages name the
 * file and, where there is one, the attribute, table or leaf.
 * The library never prints. Part of np_dumpio (depends on np_common only). */
#ifndef NPROBE_DUMPIO_H
#define NPROBE_DUMPIO_H

#include <stddef.h>
#include <stdint.h>

#include "nprobe/common.h"
#include "nprobe/format.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct np_dumpio_source np_dumpio_source;
typedef struct np_dumpio np_dumpio;

/* ==== finding the step files ============================================= */

typedef enum np_dumpio_state {
    NP_DUMPIO_COMPLETE = 0, /* a finished step file (dump.h5) */
    NP_DUMPIO_PARTIAL,      /* a step still being written or cut short
                             * (dump.h5.partial): readable as far as flushed */
    NP_DUMPIO_TEMP,         /* only a temporary file, not readable as a dump */
    NP_DUMPIO_MISSING       /* a rank directory without any dump file; path is
                             * the directory */
} np_dumpio_state;

/* One step file (or a rank directory without one) found under a path. */
typedef struct np_dumpio_ref {
    const char *path;               /* in the same allocation as the refs */
    int step, rank;                 /* from the directory names; -1 when not known */
    np_dumpio_state state;
    const np_dumpio_source *source; /* the format that found it */
} np_dumpio_ref;

/* The step files under `path`: a step file itself, a rank directory, a step
 * directory or a dump root, in whichever registered format recognises the
 * path (np_dumpio_source.detect, in registration order). Sorted by step,
 * rank, then state (a complete file before a partial one of the same step
 * and rank). *out is the caller's: one free() releases the refs and their
 * paths (build them with dumpio/internal.h's list); *n is >= 1 on success.
 * NP_ERR_NOTFOUND when `path` does not exist or holds no dump (the message
 * says what was expected). */
np_status np_dumpio_find(np_dumpio_ref **out, size_t *n, const char *path, np_error *err);

/* ==== one step file ====================================================== */

/* Root information of a step file (nprobe: the root attributes,
 * docs/FORMAT.md; other formats fill what they know, "" / -1 otherwise). */
typedef struct np_dumpio_info {
    const char *source;           /* the source's name: "nprobe", "msprobe", ... */
    char format[32];              /* the format's own name, e.g. "nprobe-dump" */
    int64_t format_version;
    char nprobe_version[32], task[32], level[16];
    char framework[64], device[64], precision[16];
    int64_t step, rank, world_size;   /* -1 when unknown (world_size: 1) */
    int64_t complete;             /* 1 once the step was closed cleanly */
    double loss_scale;            /* the loss scaler's factor the step's gradients carry
                                   * (1 when absent) */
    double dp_grad_scale;         /* the factor an averaging data-parallel reduction leaves
                                   * on them (root attribute dp_grad_scale; 1 when absent) */
    int stats_keep_inf;           /* 0: max/min/mean/norm are over the finite elements
                                   * (nprobe); 1: they include +-inf (msprobe) */
    int has_calls;                /* 1 when the file has a calls table (0: calls only
                                   * from the leaf names; np_dumpio_calls gives no rows) */
    char scope[16];               /* how the configured scope fared in the step: "closed",
                                   * "open", "not reached", or "" (no scope) */
    char scope_first[NP_FMT_NAME_LEN], scope_last[NP_FMT_NAME_LEN];
    int mesh_ndim;                /* format version 2: the device mesh (0: none, a
                                   * dump without placements) */
    char mesh_dims[NP_FMT_MESH_MAX][16]; /* its dimension names ("dp", "tp", "pp") */
    int64_t mesh_shape[NP_FMT_MESH_MAX], mesh_coords[NP_FMT_MESH_MAX];
    char problems[512];           /* root attributes outside what the format allows, each
                                   * named with its value, what was expected and how it
                                   * was read ("complete is 2 (expected 0 or 1): read as
                                   * 0"), "; "-separated; "" when none (readers note it) */
} np_dumpio_info;

/* Open flags. */
#define NP_DUMPIO_CHECKED 1u  /* the file's walk already passed (np_dumpio_checker):
                               * no child process for it here */

/* Open one step file read-only (also while another process writes it; file
 * locking is off), in the format `source` (NULL: the first registered
 * source whose detect accepts `path`). Unless NP_DUMPIO_CHECKED, the
 * source's walk runs in a child process first. Refuses a file that is not
 * of that format, or of a format version it does not read (NP_ERR_FORMAT),
 * or a partial file that cannot be read (NP_ERR_INCOMPLETE). *out is the
 * caller's: np_dumpio_close. */
np_status np_dumpio_open(np_dumpio **out, const char *path, const np_dumpio_source *source,
                         unsigned flags, np_error *err);
/* Same for a found ref (its source). */
np_status np_dumpio_open_ref(np_dumpio **out, const np_dumpio_ref *ref, unsigned flags,
                             np_error *err);
/* Close; NULL is a no-op. */
void np_dumpio_close(np_dumpio *d);
/* The root information (borrowed, valid while d is open) and the path. */
const np_dumpio_info *np_dumpio_get_info(const np_dumpio *d);
const char *np_dumpio_path(const np_dumpio *d);

/* ---- rows: streamed in chunks ---- */

/* Receives the rows of a table in order, in chunks: `rows` (count `n`,
 * the first being row `first` of the table) are borrowed for the call, may
 * be modified, and have every string NUL-terminated. `begin` (may be NULL)
 * is called once before any rows with the row count when the source knows
 * it (else 0). A status other than NP_OK stops the read and is returned. */
typedef struct np_dumpio_entry_sink {
    np_status (*begin)(void *user, size_t n_hint, np_error *err);
    np_status (*rows)(void *user, np_entry_rec *rows, size_t first, size_t n, np_error *err);
    void *user;
} np_dumpio_entry_sink;

typedef struct np_dumpio_call_sink {
    np_status (*begin)(void *user, size_t n_hint, np_error *err);
    np_status (*rows)(void *user, np_call_rec *rows, size_t first, size_t n, np_error *err);
    void *user;
} np_dumpio_call_sink;

typedef struct np_dumpio_place_sink {
    np_status (*begin)(void *user, size_t n_hint, np_error *err);
    np_status (*rows)(void *user, np_place_rec *rows, size_t first, size_t n, np_error *err);
    void *user;
} np_dumpio_place_sink;

/* Stream all rows of the entries (one per tensor leaf, in production
 * order) or the calls (one per call; none when !info.has_calls). Memory
 * does not grow with the table beyond what the sink keeps. */
np_status np_dumpio_entries(np_dumpio *d, const np_dumpio_entry_sink *sink, np_error *err);
np_status np_dumpio_calls(np_dumpio *d, const np_dumpio_call_sink *sink, np_error *err);
/* All rows at once; *out is the caller's (free()), NULL when *n is 0. */
np_status np_dumpio_read_entries(np_entry_rec **out, size_t *n, np_dumpio *d, np_error *err);
np_status np_dumpio_read_calls(np_call_rec **out, size_t *n, np_dumpio *d, np_error *err);

/* The placement rows (format version 2, /placements; none for a dump
 * without them or a source without placements): *out is the caller's. */
np_status np_dumpio_read_placements(np_place_rec **out, size_t *n, np_dumpio *d, np_error *err);

/* ---- payloads ---- */

/* A byte range of a payload stored as raw little-endian float32 in a file:
 * elements [start, start + count) at byte address addr. */
typedef struct np_dumpio_seg {
    int64_t start, count;
    uint64_t addr;
} np_dumpio_seg;

typedef enum np_dumpio_form {
    NP_DUMPIO_MEM_F32 = 0,  /* numel float32 values at `mem` */
    NP_DUMPIO_MEM_F64,      /* numel float64 values at `mem` */
    NP_DUMPIO_FILE_F32      /* raw little-endian float32 in file `fd` at `segs`:
                             * the caller reads it (pread), in any order, from
                             * any thread */
} np_dumpio_form;

/* How the stored bytes can be checked against the entry's crc32. */
typedef enum np_dumpio_crc {
    NP_DUMPIO_CRC_NONE = 0, /* they cannot (a format without the crc32, a
                             * conversion that changes the bytes) */
    NP_DUMPIO_CRC_ELEMENTS, /* the crc32 of the delivered elements' bytes (4 each
                             * for *_F32, 8 for MEM_F64, in element order) is the
                             * crc32 of the stored bytes */
    NP_DUMPIO_CRC_GIVEN     /* `crc` holds the crc32 of the stored bytes,
                             * computed while reading */
} np_dumpio_crc;

/* A caller-owned buffer the payload reads reuse (grown as needed); one per
 * thread. np_dumpio_buf_free frees it ({0} is empty). */
typedef struct np_dumpio_buf {
    void *p;
    size_t cap;
} np_dumpio_buf;
void np_dumpio_buf_free(np_dumpio_buf *b);

typedef struct np_dumpio_payload {
    np_dumpio_form form;
    int64_t numel;
    const void *mem;                 /* MEM_*: the values (in the caller's buf) */
    int fd;                          /* FILE_F32: valid until np_dumpio_payload_release */
    const np_dumpio_seg *segs;       /* FILE_F32: nseg segments in element order */
    int nseg;
    np_dumpio_crc crc_kind;
    uint32_t crc;                    /* CRC_GIVEN: the stored bytes' crc32 */
    void *owned;                     /* the source's: freed by np_dumpio_payload_release
                                      * with `release`, or free() when that is NULL */
    void (*release)(struct np_dumpio_payload *p);
} np_dumpio_payload;

/* Payload flags. */
#define NP_DUMPIO_ALLOW_FILE 1u  /* the caller reads NP_DUMPIO_FILE_F32 payloads itself */

/* The payload of leaf `leaf` (a row of this dump's entries with has_data,
 * of `numel` elements):
 * float32 when the stored values are at most 32-bit floats, float64 for
 * anything else (float64, integers, bool). With NP_DUMPIO_ALLOW_FILE a
 * payload stored as raw little-endian float32 is not read but described
 * (FILE_F32). NP_ERR_NOTFOUND when the dump holds no payload for the leaf,
 * NP_ERR_FORMAT when its element count is not `numel` or it cannot be read.
 * Safe to call from several threads at once (each with its own buf); the
 * sources serialise what their libraries need. Release *out afterwards. */
np_status np_dumpio_payload_get(np_dumpio_payload *out, np_dumpio *d, const char *leaf,
                                int64_t numel, unsigned flags, np_dumpio_buf *buf, np_error *err);
void np_dumpio_payload_release(np_dumpio_payload *p);
/* Elements [lo, lo + cnt) of a FILE_F32 payload's segments (nseg of them,
 * in any address order) read with pread from fd into buf. 0, or -1 when a
 * read fails or the segments do not cover the range. */
int np_dumpio_read_f32(int fd, const np_dumpio_seg *segs, int nseg, int64_t lo, int64_t cnt,
                       float *buf);

/* Up to `max` first values (row-major) of leaf `leaf`'s payload (of
 * `numel` elements, as its entry says) as doubles into out[0..max); *n
 * gets how many. NP_ERR_NOTFOUND when the leaf has no payload. */
np_status np_dumpio_read_values(double *out, size_t max, size_t *n, np_dumpio *d,
                                const char *leaf, int64_t numel, np_error *err);
/* All values of the leaf of entry `e` as doubles into out[0..e->numel),
 * their stored bytes checked against e->crc32 where the format allows it
 * (np_dumpio_crc): NP_ERR_FORMAT naming the leaf when they differ (a
 * corrupt file must not be computed with as if it were data). */
np_status np_dumpio_read_checked(double *out, np_dumpio *d, const np_entry_rec *e,
                                 np_error *err);

/* ==== rows that contradict themselves ==================================== */

/* Why row `r` of /entries of the file `info` describes contradicts itself or
 * the format (docs/FORMAT.md, "What readers check"), NULL when it does not:
 * the words go to buf (cap bytes), naming the field, its value and what was
 * expected ("nan_count -5 is outside [0, numel 8]"); the caller names the
 * file and the leaf. Statistics checks follow info->stats_keep_inf; the
 * stricter ones (role, dtype, name = {call}.{role}.{key}, max and min values
 * of the dtype, crc32 and has_data 0 in a statistics dump) only for
 * nprobe's own files. */
const char *np_dumpio_entry_problem(const np_dumpio_info *info, const np_entry_rec *r, char *buf,
                                    size_t cap);
/* Same for row `row` of /calls: seq equal to the row, kind api or module,
 * call and parent dotted names, text fields UTF-8 without control
 * characters. */
const char *np_dumpio_call_problem(const np_dumpio_info *info, const np_call_rec *r, size_t row,
                                   char *buf, size_t cap);
/* Why placement row `p` of the file `info` describes is outside the format
 * (docs/FORMAT.md, "/placements"): one placement per mesh dimension, each
 * Shard(d) with d below global_ndim, Replicate() or Partial(sum); the leaf's
 * row `e` (NULL: the row names no leaf of /entries) with the same ndim, and
 * each dimension's shard [offset, offset + shape) inside global_shape, whole
 * where nothing shards it; stage and micro_batch -1 or more. The message
 * names the field; NULL when the row is sound. The check is common/place.c's
 * np_fmt_place_problem, the one the writer (np_probe_place) makes. */
const char *np_dumpio_place_problem(const np_dumpio_info *info, const np_place_rec *p,
                                    const np_entry_rec *e, char *buf, size_t cap);
/* Placement item k of p ("Shard(1)") into buf; returns buf ("" past the end). */
const char *np_dumpio_place_item(const np_place_rec *p, int k, char *buf, size_t cap);

/* ==== many files: crash-isolated walks ahead of the reads ================= */

/* Walks the files refs[0..n) (their sources' walks) in child processes, a
 * few at a time and not one process per file, starting at once and running
 * ahead of the caller; np_dumpio_checker_wait gives a file's verdict when
 * it is known. A child that dies or runs out of time on a file marks that
 * file corrupt and a new child goes on with the next. The refs are
 * borrowed: they must outlive the checker.
 * Files whose source has no walk, or when isolation is off
 * (NPROBE_NO_ISOLATION) or no child can be started, pass unchecked. */
typedef struct np_dumpio_checker np_dumpio_checker;
np_status np_dumpio_checker_start(np_dumpio_checker **out, const np_dumpio_ref *refs, size_t n,
                                  np_error *err);
/* Wait for file i's walk: NP_OK (open it with NP_DUMPIO_CHECKED), or
 * NP_ERR_FORMAT naming the file as corrupt (its walk crashed or timed out).
 * A file the walk refused cleanly is NP_OK here: np_dumpio_open then says
 * why. Files may be waited for in any order, each as often as needed. */
np_status np_dumpio_checker_wait(np_dumpio_checker *c, size_t i, np_error *err);
/* Stop the children (killed if still running) and free; NULL is a no-op. */
void np_dumpio_checker_free(np_dumpio_checker *c);

/* ==== sources ============================================================ */

/* One on-disk format: a const table defined in dumpio/<format>.c and listed
 * in dumpio/dumpio.c (np_dumpio_sources). Helpers the sources share (step
 * and rank directory names, ref lists) are in dumpio/internal.h. Every function gets what it needs; `h` is the
 * source's own handle of an open file. Required: name, detect, find, open,
 * info (filled by open), entries, calls, payload, close. Optional (NULL):
 * walk. */
struct np_dumpio_source {
    const char *name;
    /* 1 when `path` (a step file, a rank or step directory or a dump root)
     * looks like this format: cheap (a few stats and names, no parsing). */
    int (*detect)(const char *path);
    /* The step files under `path` (np_dumpio_find's contract, refs' source
     * set by the caller). */
    np_status (*find)(np_dumpio_ref **out, size_t *n, const char *path, np_error *err);
    /* Open a step file; fill *info. */
    np_status (*open)(void **h, np_dumpio_info *info, const char *path, np_error *err);
    np_status (*entries)(void *h, const np_dumpio_entry_sink *sink, np_error *err);
    np_status (*calls)(void *h, const np_dumpio_call_sink *sink, np_error *err);
    np_status (*payload)(np_dumpio_payload *out, void *h, const char *leaf, int64_t numel,
                         unsigned flags, np_dumpio_buf *buf, np_error *err);
    void (*close)(void *h);
    /* The placement rows (may be NULL: a format without placements). */
    np_status (*placements)(void *h, const np_dumpio_place_sink *sink, np_error *err);
    /* Run in a child process before the file is read: everything the reads
     * will ask a crash-prone library for (root attributes, tables, payload
     * layouts). 0 when it read, 1 when it refused the file cleanly. */
    int (*walk)(const char *path);
    /* 1 when the format's statistics include +-inf and NaN (msprobe's:
     * torch's over all elements), as np_dumpio_info.stats_keep_inf: a
     * reader comparing it against a format whose statistics do not puts
     * the other side into this form first. */
    int stats_keep_inf;
    /* The step file's name ("dump.h5") and where a dump root keeps it
     * (nprobe: step{S}/rank{R}/dump.h5 as a glob): for messages naming
     * what was looked for. */
    const char *file;
    const char *layout;
};

/* The registered sources, in detection order (NULL-terminated). */
const np_dumpio_source *const *np_dumpio_sources(void);
/* Every registered source's layout with its name, for messages (nprobe's,
 * then msprobe's: "step{S}/rank{R}/dump.h5 (nprobe) or
 * step{S}/{rank{R},proc{PID},rank}/dump.json (msprobe)" as globs) into buf
 * (cap bytes); returns buf. `files` (may be NULL) gets the step file
 * names the same way ("dump.h5 or dump.json"). */
const char *np_dumpio_layouts(char *buf, size_t cap, char *files, size_t files_cap);
/* The source named `name`, or NULL. */
const np_dumpio_source *np_dumpio_source_by_name(const char *name);
/* nprobe's HDF5 dump (docs/FORMAT.md). */
extern const np_dumpio_source np_dumpio_nprobe_source;
/* msprobe's dumps: dump.json + construct.json + stack.json + .pt payloads
 * (docs/FORMAT.md, "msprobe dumps"). */
extern const np_dumpio_source np_dumpio_msprobe_source;

#ifdef __cplusplus
}
#endif
#endif
