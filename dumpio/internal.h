/* dumpio/internal.h - helpers the dumpio sources share: directory names
 * (step{S}, rank{R}), lists of found files. Private to np_dumpio. */
#ifndef NPROBE_DUMPIO_INTERNAL_H
#define NPROBE_DUMPIO_INTERNAL_H

#include <stddef.h>

#include "nprobe/dumpio.h"

/* A growing list of refs and their paths; dumpio_refs_finish turns it
 * into np_dumpio_find's result (one allocation, sorted). */
typedef struct dumpio_refs {
    np_dumpio_ref *v;
    size_t *at;            /* offset of each ref's path in `pool` */
    size_t n, cap;
    char *pool;
    size_t used, pool_cap;
} dumpio_refs;

/* Append a ref; 0, or -1 out of memory. */
int dumpio_refs_push(dumpio_refs *l, const char *path, int step, int rank, np_dumpio_state st);
/* The refs sorted by step, rank, state, path, in one block (*out, *n);
 * frees the list. 0, or -1 out of memory (the list is freed either way). */
int dumpio_refs_finish(dumpio_refs *l, np_dumpio_ref **out, size_t *n);
/* Free the list without a result. */
void dumpio_refs_free(dumpio_refs *l);

/* The number after `prefix` in `name` ("step12" -> 12): decimal digits
 * without a leading zero, as every writer spells it; -1 otherwise. */
int dumpio_num_after(const char *name, const char *prefix);
/* The last path component and the one before it ("" when none), into
 * buffers of cap bytes each. */
void dumpio_tail_names(const char *path, char *last, char *prev, size_t cap);
/* 1 for an existing regular file / directory (following symlinks). */
int dumpio_is_file(const char *path);
int dumpio_is_dir(const char *path);

/* Run `fn` on each subdirectory of `dir` named {prefix}{N} (N >= 0), with
 * its path and N; stops at the first nonzero return, which it returns.
 * 0 also when `dir` cannot be read. */
int dumpio_each_numbered(const char *dir, const char *prefix,
                         int (*fn)(void *user, const char *path, int num), void *user);

/* 0 when NPROBE_NO_ISOLATION is set: no walks in child processes. */
int dumpio_isolation_on(void);

#endif
