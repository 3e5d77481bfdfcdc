/* tests/probe_rows.h - what the probe and compare tests hand the probe: a
 * float32 matrix as an np_tensor and a placement row (np_probe_place). */
#ifndef NP_TESTS_PROBE_ROWS_H
#define NP_TESTS_PROBE_ROWS_H

#include <stdio.h>
#include <string.h>

#include "nprobe/probe.h"

/* The r x c float32 matrix at buf (contiguous). */
static inline np_tensor np_test_mat(float *buf, int64_t r, int64_t c)
{
    np_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = NP_FLOAT32;
    t.ndim = 2;
    t.shape[0] = r;
    t.shape[1] = c;
    t.numel = r * c;
    t.data = buf;
    return t;
}

/* A placement row: placements `pl` of a g0 x g1 logical tensor, this
 * piece at (o0, o1); no pipeline stage or micro-batch. */
static inline np_place_rec np_test_place(const char *pl, int64_t g0, int64_t g1, int64_t o0,
                                         int64_t o1)
{
    np_place_rec r;
    memset(&r, 0, sizeof r);
    snprintf(r.placements, sizeof r.placements, "%s", pl);
    r.global_ndim = 2;
    r.global_shape[0] = g0;
    r.global_shape[1] = g1;
    r.offset[0] = o0;
    r.offset[1] = o1;
    r.stage = r.micro_batch = -1;
    return r;
}

#endif
