/* configcheck/packread.h - a pack opened for reading (private to configcheck):
 * the zip's entries checked and the manifest read; each member is inflated
 * on demand, into memory or into a spill file. */
#ifndef NPROBE_CC_PACKREAD_H
#define NPROBE_CC_PACKREAD_H

#include <zip.h>

#include "cc_internal.h"
#include "ccsort.h"

typedef struct np_cc_packin {
    const char *path;               /* borrowed */
    json_t *manifest;
    zip_t *za;
    zip_int64_t idx[NP_CC_ITEM_COUNT]; /* the members' entries, -1 when absent */
    uint64_t size[NP_CC_ITEM_COUNT];
    int present[NP_CC_ITEM_COUNT];
    size_t max_entry, budget;       /* per entry; inflated bytes left in total */
    int msprobe;                    /* 1: a pack of msprobe's ConfigChecker (no manifest) */
    const char *names[NP_CC_ITEM_COUNT]; /* each item's member in this pack, NULL: none */
} np_cc_packin;

/* The member an msprobe ConfigChecker pack holds item m in (NULL: msprobe
 * packs no such item; the first step and rank where msprobe packs per step). */
const char *np_cc_msprobe_member(np_cc_item_id m);

/* Open and validate `path` (see np_cc_compare for what is refused): entry
 * names and sizes, the manifest. On error *p is left empty. */
np_status np_cc_packin_open(np_cc_packin *p, const char *path, const np_cc_limits *lim,
                            np_error *err);
/* Inflate member m (present) into memory (*buf, NUL-terminated, *len bytes;
 * f NULL) or into the spill file f of sp (buf NULL). The limits hold: a
 * member inflating past its declared size or a limit is refused. */
np_status np_cc_packin_member(np_cc_packin *p, np_cc_item_id m, char **buf, size_t *len, FILE *f,
                              const cc_spill *sp, np_error *err);
void np_cc_packin_free(np_cc_packin *p);

/* Flatten side p's member `id` (ccflat.c) into *side, sorted by key, one
 * record a key (the last of equal flattened keys); an absent member gives
 * an empty side. Without sp->dir nothing is spilled. */
np_status cc_flatten_member(cc_side **side, np_cc_packin *p, np_cc_item_id id, const cc_spill *sp,
                            np_error *err);

#endif
