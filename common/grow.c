/* common/grow.c - one growth rule for the arrays that grow an element at a
 * time (include/nprobe/common.h): doubling, checked for overflow. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nprobe/common.h"

#define GROW_FIRST 16 /* elements of a first allocation, at least */

int np_grow_to(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    if (!elem)
        return -1;
    size_t max = SIZE_MAX / elem;
    if (need > max)
        return -1;
    size_t nc = *cap > max / 2 ? max : *cap * 2;
    if (nc < GROW_FIRST)
        nc = GROW_FIRST < max ? GROW_FIRST : max;
    if (nc < need)
        nc = need;
    void *old;
    memcpy(&old, p, sizeof old); /* *p's bytes: the caller's T * passed as void ** */
    void *v = realloc(old, nc * elem);
    if (!v)
        return -1;
    memcpy(p, &v, sizeof v);
    *cap = nc;
    return 0;
}
