/* tests/compare/dumpwriter.h - a small dump writer for the compare tests:
 * builds nprobe dump files (format v1) directly with the HDF5 C API and the
 * compound types of nprobe/format.h, so the tests do not depend on the probe. */
#ifndef NPROBE_TESTS_DUMPWRITER_H
#define NPROBE_TESTS_DUMPWRITER_H

#include <stdint.h>

typedef struct tw tw;

enum { TW_CHUNKED = 0, TW_CONTIGUOUS = 1, TW_DEFLATE = 2 };

/* Open a dump for writing. task: statistics|tensor|md5; complete is written
 * as the `complete` attribute. Returns NULL on failure. */
tw *tw_open(const char *path, const char *task, const char *precision, int step, int rank);
/* Payload layout for the following tensors (TW_CHUNKED by default). */
void tw_layout(tw *w, int layout);
/* on = 1: the following tensors get a wrong crc32 in /entries (the stored
 * bytes then look corrupt to a reader that checks them); 0: correct again. */
void tw_bad_crc(tw *w, int on);
/* Add a call; returns its seq. */
int tw_call(tw *w, const char *call, const char *kind, const char *parent, const char *callsite);
/* Add a float tensor leaf "{call}.{role}.{key}" with float32 values (stored
 * when the task is tensor). shape (ndim). */
void tw_tensor(tw *w, int seq, const char *call, const char *role, const char *key,
               const char *dtype, int ndim, const int64_t *shape, const float *data);
/* An int64 tensor leaf. */
void tw_tensor_i64(tw *w, int seq, const char *call, const char *role, const char *key, int ndim,
                   const int64_t *shape, const int64_t *data);
/* A scalar argument (role kwargs). */
void tw_scalar(tw *w, int seq, const char *call, const char *key, double v);
/* The root attribute loss_scale (written at tw_close; not written unless set). */
void tw_loss_scale(tw *w, double scale);
/* Write /entries and /calls and the attributes; complete = 0 or 1. 0 ok. */
int tw_close(tw *w, int complete);

/* Make a directory and its parents; 0 ok. */
int tw_mkdirs(const char *path);

#endif
