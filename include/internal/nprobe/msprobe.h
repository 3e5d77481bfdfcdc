/* nprobe/msprobe.h - reading msprobe's dumps (docs/FORMAT.md, "msprobe
 * dumps") without Python: a pull reader for JSON that accepts msprobe's bare
 * NaN/Infinity/-Infinity tokens, the dump.json/construct.json/stack.json
 * walkers that turn msprobe's records into nprobe leaves, the step/rank
 * layouts, and a reader of torch.save .pt files (zip + a pickle interpreter
 * that knows only what a saved tensor needs). Part of the np_msprobe
 * library. Never prints; every error names the file (and key or leaf). */
#ifndef NPROBE_MSPROBE_H
#define NPROBE_MSPROBE_H

#include <stddef.h>
#include <stdint.h>

#include "nprobe/common.h"
#include "nprobe/format.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================
 * JSON pull reader
 * ====================================================================== */

#define NP_JSON_MAX_DEPTH 128

typedef enum np_json_type {
    NP_JSON_END = 0,  /* the document is finished */
    NP_JSON_OBJ,      /* '{' */
    NP_JSON_OBJ_END,  /* '}' */
    NP_JSON_ARR,      /* '[' */
    NP_JSON_ARR_END,  /* ']' */
    NP_JSON_KEY,      /* an object key (its ':' is consumed) */
    NP_JSON_STR,
    NP_JSON_NUM,      /* also NaN, Infinity, -Infinity */
    NP_JSON_TRUE,
    NP_JSON_FALSE,
    NP_JSON_NULL
} np_json_type;

/* One token. s/len (KEY, STR) point at the raw bytes between the quotes,
 * inside the reader's buffer: valid until the next few tokens only (the
 * reader hands bytes far behind it back to the kernel); copy what you keep.
 * `escaped` says the raw bytes hold backslash escapes (np_json_str decodes). */
typedef struct np_json_tok {
    np_json_type type;
    const char *s;
    size_t len;
    int escaped;
    double num;
    int depth;        /* containers open after this token */
} np_json_tok;

typedef struct np_json_reader {
    const char *base, *p, *end;
    const char *name;             /* the file, for messages (borrowed) */
    size_t map_len;               /* > 0: base is a mapping of this length */
    size_t released;              /* bytes at the start handed back to the kernel */
    size_t last_tok;              /* offset of the previous token's start */
    int depth, state;
    uint8_t stack[NP_JSON_MAX_DEPTH]; /* '{' or '[' per open container */
} np_json_reader;

/* Map `path` read-only and start reading it. Pages far behind the cursor are
 * dropped as reading goes on, so the resident size stays bounded whatever
 * the file's size. NP_ERR_IO when it cannot be opened. */
np_status np_json_open_file(np_json_reader *r, const char *path, np_error *err);
/* Read `n` bytes at `buf` (borrowed; no copy). `name` names it in errors. */
void np_json_init_mem(np_json_reader *r, const char *buf, size_t n, const char *name);
/* The next token. NP_ERR_JSON naming file, line and column on bad syntax
 * (also a truncated document). After NP_JSON_END only END again. */
np_status np_json_next(np_json_tok *t, np_json_reader *r, np_error *err);
/* Skip the rest of the value `t` starts (t just read): nothing for a
 * scalar, through the matching close for '{' or '['. */
np_status np_json_skip(np_json_reader *r, const np_json_tok *t, np_error *err);
/* Decode a KEY/STR token into dst (NUL-terminated, truncated to cap - 1;
 * \uXXXX to UTF-8, surrogate pairs joined). A NUL (\u0000 or a raw 0 byte),
 * a lone surrogate or a bad escape becomes U+FFFD: a name never ends early
 * (two names that differ after a NUL stay two names). Returns the decoded
 * length (which may exceed cap - 1). */
size_t np_json_str(char *dst, size_t cap, const np_json_tok *t);
/* 1 when a KEY/STR token equals `s` (no escapes in it). */
int np_json_is(const np_json_tok *t, const char *s);
/* An error at the reader's current position (file:line:col), returns st. */
np_status np_json_error(np_json_reader *r, np_error *err, np_status st, const char *key,
                        const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;
void np_json_close(np_json_reader *r);

/* ======================================================================
 * dump.json, construct.json, stack.json
 * ====================================================================== */

/* What an item of dump.json holds. */
typedef enum np_msp_kind {
    NP_MSP_TENSOR = 0,   /* torch.Tensor (or numpy.ndarray): dtype, shape, statistics */
    NP_MSP_SCALAR,       /* {type: int|float|bool, value}: the value in max/min/mean */
    NP_MSP_OTHER,        /* any other {type, value} (str, slice, torch.dtype ...) */
    NP_MSP_NONE          /* null in an argument list */
} np_msp_kind;

/* One leaf of a msprobe dump, as an nprobe leaf (rec.name, rec.call,
 * rec.role ...). Statistics are msprobe's: over all elements, so +-inf and
 * NaN show in max/min/mean/norm (`raw_stats` = 1); the counts are lower
 * bounds derived from them (posinf_count 1 when max is +inf ...). int64
 * tensors' null Mean/Norm are NaN, bool Max/Min 1/0. */
typedef struct np_msp_entry {
    np_entry_rec rec;
    char msp_name[NP_FMT_NAME_LEN];  /* msprobe's row name (its compare output) */
    char data_name[NP_FMT_NAME_LEN]; /* tensor task: the .pt file, "" otherwise */
    char md5[16];                    /* md5 task: 8 hex digits (CRC-32), "" otherwise */
    char type[32];                   /* msprobe's "type" ("torch.Tensor", "float", ...) */
    np_msp_kind kind;
    int raw_stats;
} np_msp_entry;

/* Root fields of dump.json. */
typedef struct np_msp_header {
    char task[32], level[16], framework[32];
    int64_t n_calls, n_entries;
} np_msp_header;

/* Callbacks of the dump.json walk; a non-zero return stops the walk with
 * NP_ERR_INTERNAL unless the callback set `err` itself. `e` and `call` are
 * borrowed for the call. Calls come in file order (seq 0, 1, ...), each
 * before its leaves. */
typedef struct np_msp_sink {
    int (*call)(void *user, const char *call, int64_t seq, np_error *err);
    int (*entry)(void *user, const np_msp_entry *e, np_error *err);
    void *user;
} np_msp_sink;

/* Stream `path` (a dump.json) into `sink`; `hdr` (may be NULL) gets the root
 * fields. Memory stays bounded whatever the file's size. */
np_status np_msp_read_dump_json(np_msp_header *hdr, const char *path, const np_msp_sink *sink,
                                np_error *err);

/* Put a record whose statistics are nprobe's (over the finite elements,
 * with counts) into msprobe's form (over all elements: +-inf in max/min/
 * mean/norm, NaN everywhere when there is one), its counts into presence
 * flags (0/1) as msprobe's records carry them: comparing an nprobe dump
 * against a msprobe dump compares the like with the like. Integer and bool
 * records are left as they are. */
void np_msp_stats_keep_inf(np_entry_rec *r);

/* nprobe's call name for a msprobe call name: "M.parameters_grad.0" ->
 * "M.parameters_grad", others unchanged. 0 ok, -1 when it does not fit. */
int np_msp_call_name(char *dst, size_t cap, const char *msp_call);

/* construct.json: call -> parent module call (null at top level); stack.json
 * (msprobe 26: {"N": [[calls...], [frames...]]}; 8.x: {call: [frames...]}):
 * call -> its first frame outside torch and msprobe, shortened to
 * "file.py:line in function" (no directories). `fn` gets each pair
 * (parent or site "" when none); borrowed strings. */
typedef int (*np_msp_pair_fn)(void *user, const char *call, const char *value, np_error *err);
np_status np_msp_read_construct(const char *path, np_msp_pair_fn fn, void *user, np_error *err);
np_status np_msp_read_stack(const char *path, np_msp_pair_fn fn, void *user, np_error *err);

/* ======================================================================
 * Layouts
 * ====================================================================== */

/* One dump.json found under a path: msprobe 26 stepN/rankR/ or stepN/procPID/,
 * 8.x stepN/rank/ (rank -1), or a single folder holding dump.json. */
typedef struct np_msp_ref {
    char dir[4096];   /* the folder holding dump.json */
    int step;         /* -1 when not known */
    int rank;         /* -1 for proc{PID} and 8.x rank/ */
    long pid;         /* proc{PID}, else -1 */
} np_msp_ref;

/* 1 when `path` is (or holds, at any level of the layouts above) a msprobe
 * dump: a dump.json, a folder with dump.json, a step folder, a dump root. */
int np_msp_is_dump(const char *path);
/* The dump.json folders under `path`, sorted by step then rank. *out is the
 * caller's (free()); NP_ERR_NOTFOUND when there is none. */
np_status np_msp_find(np_msp_ref **out, size_t *n, const char *path, np_error *err);
/* The path of a tensor file named `data_name` in `dir`/dump_tensor_data
 * (the folder next to dump.json; msprobe's dump_data_dir is ignored).
 * NP_ERR_FORMAT when data_name could escape that folder ('/', "..", NUL)
 * or when a symlink (the file, or dump_tensor_data/) leads out of `dir`. */
np_status np_msp_data_path(char *out, size_t cap, const char *dir, const char *data_name,
                           np_error *err);

/* ======================================================================
 * .pt files (torch.save of one tensor)
 * ====================================================================== */

typedef struct np_pt_tensor {
    char dtype[16];             /* float32, bfloat16, float16, float64, int64, int32,
                                 * int16, int8, uint8, bool */
    int elsize;                 /* bytes per element */
    int ndim;
    int64_t shape[NP_FMT_MAX_DIMS], stride[NP_FMT_MAX_DIMS]; /* strides in elements */
    int64_t offset;             /* storage offset in elements */
    int64_t numel;
    int64_t storage_numel;      /* elements in the storage */
    uint64_t storage_pos;       /* byte position of the storage in the file */
    const uint8_t *storage;     /* the storage, mapped in place */
    int requires_grad;
    int contiguous;             /* 1: row-major without gaps */
    void *map;
    size_t map_len;
} np_pt_tensor;

/* Open a .pt: zip members stored (never inflated), a data.pkl made only of
 * the opcodes and globals torch's tensor save uses, storage bounds checked
 * against shape and strides. Anything else is NP_ERR_FORMAT or
 * NP_ERR_UNSUPPORTED naming the file; nothing in the file is executed. */
np_status np_pt_open(np_pt_tensor *t, const char *path, np_error *err);
/* Elements [start, start + count) in row-major order, converted to float32
 * (out_f64 = 0) or float64 (1), into dst. */
np_status np_pt_read(void *dst, int out_f64, const np_pt_tensor *t, int64_t start, int64_t count,
                     np_error *err);
void np_pt_close(np_pt_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
