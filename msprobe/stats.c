/* msprobe/stats.c - statistics in msprobe's convention. nprobe's
 * max/min/mean/norm are over the finite elements, with the NaN and +-inf
 * counts beside them; msprobe's are torch's over all elements (an infinity
 * shows in max/min/mean/norm, a NaN makes them all NaN), without counts.
 * Comparing one against the other compares the like with the like: the
 * nprobe side is put into msprobe's form (exactly: its counts say where the
 * non-finite values go), and both sides' counts become presence flags,
 * which is all msprobe's statistics can tell. */
#include <math.h>

#include "nprobe/msprobe.h"

static int floating(const char *dtype)
{
    return (dtype[0] == 'f' && dtype[1] == 'l') || (dtype[0] == 'b' && dtype[1] == 'f');
}

void np_msp_stats_keep_inf(np_entry_rec *r)
{
    if (!floating(r->dtype) || r->numel == 0)
        return;
    int nan = r->nan_count > 0, pos = r->posinf_count > 0, neg = r->neginf_count > 0;
    int finite = r->numel > r->nan_count + r->posinf_count + r->neginf_count;
    if (nan) {
        r->max = r->min = r->mean = r->norm = NAN;
        pos = neg = 0;
    } else {
        r->max = pos ? INFINITY : finite ? r->max : -INFINITY;
        r->min = neg ? -INFINITY : finite ? r->min : INFINITY;
        r->mean = pos && neg ? NAN : pos ? INFINITY : neg ? -INFINITY : r->mean;
        r->norm = pos || neg ? INFINITY : r->norm;
    }
    r->nan_count = nan;
    r->posinf_count = pos;
    r->neginf_count = neg;
}
