/* nprobe/common.h - status codes, the caller-owned error struct, version.
 *
 * Every nprobe library function that can fail returns an np_status (0 = ok),
 * takes its outputs first and an optional `np_error *err` last. The error
 * struct is owned by the caller; NULL is allowed; the first error set wins
 * (later calls do not overwrite it). No library function prints or exits. */
#ifndef NPROBE_COMMON_H
#define NPROBE_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NP_VERSION_STRING "0.1.0"
#define NP_VERSION_MAJOR 0
#define NP_VERSION_MINOR 1
#define NP_VERSION_PATCH 0

/* ---- status codes ------------------------------------------------------ */
typedef enum np_status {
    NP_OK = 0,
    NP_ERR_NOMEM,       /* out of memory */
    NP_ERR_ARG,         /* invalid argument */
    NP_ERR_IO,          /* file system error (open, write, rename, ...) */
    NP_ERR_NOSPACE,     /* disk full or file size limit reached */
    NP_ERR_FORMAT,      /* a file is not in the expected format or is corrupt */
    NP_ERR_CONFIG,      /* a configuration key or value is invalid */
    NP_ERR_JSON,        /* JSON syntax error */
    NP_ERR_HDF5,        /* the HDF5 library reported an error */
    NP_ERR_ZIP,         /* the zip library reported an error */
    NP_ERR_SHAPE,       /* tensor shapes do not fit */
    NP_ERR_DTYPE,       /* tensor dtype not supported here */
    NP_ERR_NOTFOUND,    /* a named item does not exist */
    NP_ERR_UNSUPPORTED, /* valid but not supported */
    NP_ERR_INCOMPLETE,  /* data is incomplete (a crashed run, a truncated file) */
    NP_ERR_LIMIT,       /* a size or count limit was exceeded */
    NP_ERR_INTERNAL,    /* a bug in nprobe */
    NP_STATUS_COUNT
} np_status;

/* Static English text for a status; never NULL. */
const char *np_strerror(np_status st);

/* ---- the error struct -------------------------------------------------- */
#define NP_ERROR_TEXT_MAX 1024

typedef struct np_error {
    np_status status;             /* NP_OK while no error was set */
    char file[512];               /* file concerned, "" if none */
    char key[256];                /* config key, tensor name or entry, "" if none */
    long line;                    /* 1-based position in `file`, 0 if unknown */
    long column;
    char text[NP_ERROR_TEXT_MAX]; /* full human message, names what was expected */
} np_error;

/* Reset an error struct to "no error". NULL is a no-op. */
void np_error_clear(np_error *err);

/* Record an error (first one wins) and return `st`, so callers can write
 * `return np_error_set(err, NP_ERR_IO, path, NULL, "cannot open: %s", why);`.
 * `file` and `key` may be NULL. `err` may be NULL. */
np_status np_error_set(np_error *err, np_status st, const char *file,
                       const char *key, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

/* Same with a position inside `file`. */
np_status np_error_set_at(np_error *err, np_status st, const char *file,
                          long line, long column, const char *key,
                          const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 7, 8)))
#endif
    ;

/* ---- small shared utilities -------------------------------------------- */

/* Levenshtein distance between two strings (for "did you mean"). */
size_t np_edit_distance(const char *a, const char *b);

/* Index in `words[0..n)` of the closest word to `word` when close enough to be
 * a plausible typo (distance <= max(2, strlen/3)), else -1. */
int np_closest_word(const char *word, const char *const *words, int n);

/* ---- SHA-256 (FIPS 180-4), common/sha256.c ----------------------------- */

typedef struct np_sha256 {
    uint32_t h[8];
    uint64_t nbytes;           /* message length so far */
    unsigned char buf[64];
    size_t nbuf;
} np_sha256;

void np_sha256_init(np_sha256 *s);
void np_sha256_update(np_sha256 *s, const void *data, size_t n);
/* Finish and write the 32-byte digest; `s` must be re-initialised to reuse. */
void np_sha256_final(np_sha256 *s, unsigned char digest[32]);
/* One-shot: 64 lowercase hex digits plus NUL into `hex`. */
void np_sha256_hex(char hex[65], const void *data, size_t n);

/* ---- string -> int map, common/strmap.c ---------------------------------- */
/* Open addressing; the keys are borrowed (they must outlive the map). */
typedef struct np_strmap {
    const char **keys;
    int *vals;
    size_t cap, len;
} np_strmap;

int np_strmap_init(np_strmap *m, size_t expected);        /* 0 ok, -1 out of memory */
int np_strmap_put(np_strmap *m, const char *key, int val); /* replaces; -1 out of memory */
int np_strmap_get(const np_strmap *m, const char *key);    /* -1 if absent */
void np_strmap_free(np_strmap *m);                         /* the map, not the keys */
void np_strmap_clear(np_strmap *m);                        /* empty, room kept */

/* ---- string arena, common/arena.c ---------------------------------------- */
/* Copies of strings in 1 MiB blocks (a longer string gets a block of its
 * own), all freed together. Zero-initialise; np_arena_reset forgets every
 * copy but keeps the blocks for the next ones. */
typedef struct np_arena_block np_arena_block;
typedef struct np_arena {
    np_arena_block *used, *spare;
} np_arena;

/* A NUL-terminated copy of the n bytes at s (s may be NULL when n is 0);
 * NULL when out of memory. */
char *np_arena_put(np_arena *a, const char *s, size_t n);
void np_arena_reset(np_arena *a);
void np_arena_free(np_arena *a);

/* ---- growing arrays, common/grow.c --------------------------------------- */
/* Room for `need` elements of `elem` bytes in the array *p (any T *, passed
 * as (void **)&p) that has room for *cap: when *cap < need, *p is
 * reallocated to max(need, 2 * *cap, 16) elements and *cap set. 0 ok; -1
 * out of memory or a size past SIZE_MAX, *p and *cap then unchanged (the
 * array still valid). The test is inline, so an append that fits costs a
 * compare: `if (np_grow((void **)&v, &cap, n + 1, sizeof *v)) fail;` */
int np_grow_to(void **p, size_t *cap, size_t need, size_t elem);
static inline int np_grow(void **p, size_t *cap, size_t need, size_t elem)
{
    return need <= *cap ? 0 : np_grow_to(p, cap, need, elem);
}

/* ---- CRC-32, common/crc32.c ---------------------------------------------- */
/* zlib's crc32 (same polynomial and results; start with crc 0), folded with
 * carry-less multiplies where the CPU has them. buf may be NULL when len 0. */
uint32_t np_crc32(uint32_t crc, const void *buf, size_t len);
/* The kernels np_crc32 chooses from (the best the CPU supports), named so
 * that tests and benchmarks can run each: same results from all. */
typedef enum np_crc32_kernel {
    NP_CRC32_ZLIB,        /* zlib's crc32 */
    NP_CRC32_PCLMUL,      /* PCLMULQDQ, four 128-bit lanes */
    NP_CRC32_VPCLMUL256,  /* VPCLMULQDQ with AVX2: eight 256-bit registers */
    NP_CRC32_VPCLMUL512   /* VPCLMULQDQ with AVX-512: four 512-bit registers */
} np_crc32_kernel;
int np_crc32_kernel_supported(np_crc32_kernel k);
/* np_crc32 by kernel k, which must be supported. */
uint32_t np_crc32_with(np_crc32_kernel k, uint32_t crc, const void *buf, size_t len);

/* mkdir -p: create `path` and its missing parents. 0, or -1 with errno
 * (ENOTDIR when it, or a part of it, exists and is not a directory). */
int np_mkdirs(const char *path);

/* Names are user data. 1 when a spreadsheet would take text s for a
 * formula: it starts with =, +, -, @, a tab or a CR and is not a number
 * ("-0.5" and "-inf" stay numbers). Report writers put a ' before such a
 * text in csv and xlsx string cells (OWASP's CSV-injection advice). */
int np_cell_is_formula_like(const char *s);
/* s for a terminal: control characters (C0, DEL, C1) as \xNN, the rest
 * as is, truncated to cap - 1 bytes; returns dst. */
const char *np_term_safe(char *dst, size_t cap, const char *s);
/* The length of the valid UTF-8 sequence at s (1-4 bytes), 0 when the
 * bytes there are not one (a stray continuation byte, an overlong form, a
 * surrogate, past U+10FFFF, cut short by the NUL). */
size_t np_utf8_seq(const char *s);
/* s as a JSON string literal (quotes included), through put(user, bytes,
 * n) in runs: '"' and '\\' escaped, control characters (C0, DEL) and
 * U+2028/U+2029 (line breaks to JavaScript) as \uXXXX, each byte that is
 * not valid UTF-8 as \ufffd: the document stays valid JSON whatever the
 * name (names are user data). NULL writes "". */
void np_json_quote(void (*put)(void *user, const char *bytes, size_t n), void *user,
                   const char *s);
/* s with every byte that is not valid UTF-8 replaced by U+FFFD, into dst
 * (cap bytes, truncated at a character boundary); returns dst. For JSON
 * libraries that refuse invalid UTF-8 (jansson's json_string: NULL). */
const char *np_utf8_fix(char *dst, size_t cap, const char *s);

/* fopen(path, "rb") for input files named by the user: only a regular file
 * is opened (a FIFO would block forever, a directory reads as garbage).
 * NULL on refusal, *why (static text) says why: "it is a directory, not a
 * file", "it is not a regular file (a FIFO, socket or device)" or
 * strerror's text. */
FILE *np_fopen_regular(const char *path, const char **why);
/* The same as a read-only descriptor (O_CLOEXEC, blocking once opened), for
 * readers that map or pread: -1 with *why set (errno ENOENT when the path
 * does not exist). A FIFO in a dump folder must not block its reader. */
int np_open_regular(const char *path, const char **why);

/* ---- output files, common/outfile.c ---------------------------------------
 * Every file nprobe writes (dump steps, compare reports, config_check results
 * and packs) is made this way: np_out_begin creates a temporary in the final
 * file's folder exclusively (O_CREAT|O_EXCL|O_NOFOLLOW: a planted symlink,
 * even a dangling one, is never followed, nothing that exists is truncated);
 * the caller writes it (through `fd`, np_out_stream, or by its path `tmp` for
 * libraries that open files by name); np_out_commit renames it onto the final
 * name only when complete; np_out_abort removes it. So a final name always
 * holds a complete file and nothing outside the output folder changes. */
typedef struct np_out {
    int fd;       /* the temporary, open read-write; -1 once closed */
    FILE *fp;     /* set by np_out_stream (then it owns fd) */
    char *tmp;    /* the temporary's path (owned) */
    char *final;  /* the final path (owned) */
} np_out;

#define NP_OUT_NOREPLACE 1u /* commit fails (EEXIST) rather than replace the final name */
#define NP_OUT_SYNC 2u      /* fsync the file before the rename */

/* Create the temporary for `final`: `tmp` names it (it must not exist), or
 * NULL for a hidden unique name ".{base}.{pid}.{n}.tmp" beside `final`. */
np_status np_out_begin(np_out *o, const char *final, const char *tmp, np_error *err);
/* A stdio stream on the temporary (NULL when fdopen fails); commit closes it. */
FILE *np_out_stream(np_out *o);
/* Close (reporting write errors: EFBIG/ENOSPC/EDQUOT as NP_ERR_NOSPACE),
 * optionally fsync, rename onto the final name. On failure the temporary is
 * removed and nothing is left under the final name. */
np_status np_out_commit(np_out *o, unsigned flags, np_error *err);
/* Why a library that writes a file by its name (libxlsxwriter) failed:
 * strerror(errnum) when errnum, errno read right after the library's call,
 * is a file-system error (full disk, quota, file size limit, I/O error,
 * read-only), so the message says "No space left on device"; else the
 * library's own text. */
const char *np_out_lib_reason(const char *lib_text, int errnum);
/* Give up: close and remove the temporary. No-op after commit/abort. */
void np_out_abort(np_out *o);
/* Give up but keep the temporary where it is (a dump step's .partial). */
void np_out_keep(np_out *o);

/* Reserve the family of names dir/{name}.{exts[k]} for one writer, atomically
 * among parallel runs: `name` receives `base`, or base_2, base_3, ... when
 * another run holds `base` or one of its files exists. The reservation is the
 * hidden file dir/.{name}.reserved; np_out_release removes it. */
np_status np_out_reserve(char *name, size_t cap, const char *dir, const char *base,
                         const char *const *exts, int n_ext, np_error *err);
void np_out_release(const char *dir, const char *name);
/* Remove every temporary (np_out_begin without a name of the caller's) and
 * reservation this process holds now: async-signal-safe, for a program's
 * SIGINT/SIGTERM/SIGHUP handler, so a run stopped by a signal leaves no
 * hidden files in its output folders (a dump step's named .partial is not
 * among them: it stays, docs/FORMAT.md). Libraries never call it. */
void np_out_remove_live(void);

/* Hold an exclusive lock (flock) on folder `dir` for as long as *fd is open;
 * NP_ERR_LIMIT when another process holds it. np_dir_unlock: -1 is a no-op. */
np_status np_dir_lock(int *fd, const char *dir, np_error *err);
void np_dir_unlock(int *fd);

/* Run fn(arg) in a forked child process and wait for it, at most
 * timeout_s seconds (<= 0: no limit): work that may crash or loop (HDF5
 * reading a file whose metadata is corrupt) cannot take the caller down.
 * Returns fn's result (0..127, from the child's exit code),
 * NP_ISOLATE_CRASHED when the child died (*sig, may be NULL, receives the
 * signal), NP_ISOLATE_TIMEOUT when it ran out of time (it is killed), or
 * NP_ISOLATE_NOFORK when no child could be started (fn did not run: the
 * caller decides whether to do the work unprotected). The child ends with
 * _exit: stdio buffers are not flushed, atexit handlers not run. */
#define NP_ISOLATE_CRASHED (-1)
#define NP_ISOLATE_NOFORK (-2)
#define NP_ISOLATE_TIMEOUT (-3)
int np_run_isolated(int (*fn)(void *), void *arg, double timeout_s, int *sig);
/* The same in two halves, so that several children run at once: start
 * (0, or NP_ISOLATE_NOFORK: fn did not run), then wait (the timeout counts
 * from the start). Every started child must be waited for. */
typedef struct np_isolated {
    long pid;
    struct timespec t0;
} np_isolated;
int np_isolated_start(np_isolated *h, int (*fn)(void *), void *arg);
int np_isolated_wait(np_isolated *h, double timeout_s, int *sig);
/* Seconds a reader's walk of one file's metadata may take in its child:
 * NPROBE_FILE_CHECK_TIMEOUT if set (> 0), else 120 (a 141k-row statistics
 * dump walks in ~0.1 s). */
double np_file_check_timeout(void);
/* The error for a file whose isolated walk ended with `r` (and signal
 * `sig`, after at most `limit` s): NP_ERR_FORMAT naming `path` as corrupt
 * for NP_ISOLATE_CRASHED and NP_ISOLATE_TIMEOUT, NP_OK for anything else. */
np_status np_isolated_walk_error(np_error *err, const char *path, int r, int sig, double limit);

#ifdef __cplusplus
}
#endif
#endif
