/* nprobe/dumpfile.h - reading dump files back (format v1, docs/FORMAT.md):
 * finding the files of a dump, their root attributes, the /entries and
 * /calls tables and payload values. Used by `nprobe ls`, `nprobe show` and
 * the summary of `nprobe dump`; works on incomplete steps ("dump.h5.partial"
 * left by a run that stopped mid-step), which it reports as such. Never
 * prints. Part of the np_probe library. */
#ifndef NPROBE_DUMPFILE_H
#define NPROBE_DUMPFILE_H

#include <stddef.h>
#include <stdint.h>

#include "nprobe/common.h"
#include "nprobe/format.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NP_DUMP_PARTIAL_SUFFIX ".partial"

/* One dump file found under a path. */
typedef struct np_dump_ref {
    char path[4096];
    int step, rank;   /* from the directory names; -1 when not known */
    int partial;      /* 1 for "dump.h5.partial": the step did not finish */
} np_dump_ref;

/* Find the dump files under `path`: a dump file itself, a rank directory, a
 * step directory or a dump root. Sorted by step, then rank, then complete
 * before partial. *out is the caller's (free()); *n may be 0 (then *out is
 * NULL). NP_ERR_NOTFOUND when `path` does not exist. */
np_status np_dump_find(np_dump_ref **out, size_t *n, const char *path, np_error *err);

typedef struct np_dump_info {
    char format[32];
    int64_t format_version;
    char nprobe_version[32], task[32], level[16];
    char framework[64], device[64], precision[16];
    int64_t step, rank, world_size;
    int64_t complete;   /* 1 once the step was closed cleanly */
    double loss_scale;  /* the factor the step's gradients carry (1 when absent) */
} np_dump_info;

typedef struct np_dump np_dump;

/* Open one dump file read-only (also while another process writes it).
 * NP_ERR_FORMAT when it is not an nprobe dump, NP_ERR_INCOMPLETE when a
 * partial file cannot be read (the run was killed while writing it). */
np_status np_dump_open(np_dump **out, const char *path, np_error *err);
/* Root attributes (borrowed, valid while d is open). */
const np_dump_info *np_dump_get_info(const np_dump *d);
/* All rows of /entries or /calls; *out is the caller's (free()), NULL when
 * *n is 0. */
np_status np_dump_read_entries(np_entry_rec **out, size_t *n, np_dump *d, np_error *err);
np_status np_dump_read_calls(np_call_rec **out, size_t *n, np_dump *d, np_error *err);
/* Up to `max` first values (row-major) of /data/{leaf} as doubles into
 * out[0..max); *n gets how many were read, *numel (may be NULL) the total.
 * NP_ERR_NOTFOUND when the leaf has no payload. */
np_status np_dump_read_values(double *out, size_t max, size_t *n, int64_t *numel, np_dump *d,
                              const char *leaf, np_error *err);
/* Close; NULL is a no-op. */
void np_dump_close(np_dump *d);

#ifdef __cplusplus
}
#endif
#endif
