/* configcheck/packread.h - a pack read into memory (private to configcheck). */
#ifndef NPROBE_CC_PACKREAD_H
#define NPROBE_CC_PACKREAD_H

#include "cc_internal.h"

typedef struct np_cc_packin {
    json_t *manifest;
    json_t *docs[NP_CC_ITEM_COUNT]; /* NULL for pip and for absent members */
    char *pip;                      /* pip.txt, NUL-terminated, or NULL */
    int present[NP_CC_ITEM_COUNT];
} np_cc_packin;

/* Read and validate `path` (see np_cc_compare for what is refused). On error
 * *p is left empty. */
np_status np_cc_packin_read(np_cc_packin *p, const char *path, const np_cc_limits *lim,
                            np_error *err);
void np_cc_packin_free(np_cc_packin *p);

#endif
