/* common/place.c - the placements of format version 2 (nprobe/format.h,
 * docs/FORMAT.md "/placements"): the check of one row against its file's
 * mesh and its leaf, shared by the writer (np_probe_place) and the readers
 * (np_dumpio_place_problem), so what one writes the other accepts. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "nprobe/format.h"

const char *np_fmt_place_item(const np_place_rec *p, int k, char *buf, size_t cap)
{
    const char *s = p->placements;
    for (int i = 0; i < k && s; i++) {
        s = strchr(s, ',');
        if (s)
            s++;
    }
    const char *c = s ? strchr(s, ',') : NULL;
    size_t len = !s ? 0 : c ? (size_t)(c - s) : strlen(s);
    snprintf(buf, cap, "%.*s", (int)len, s ? s : "");
    return buf;
}

int np_fmt_place_kind(const char *it, int *dim)
{
    if (!strcmp(it, "Replicate()"))
        return 'R';
    if (!strcmp(it, "Partial(sum)"))
        return 'P';
    if (!strcmp(it, "Partial(avg)"))
        return 'A';
    if (!strcmp(it, "Local()"))
        return 'L';
    int d = -1, used = 0;
    if (sscanf(it, "Shard(%d)%n", &d, &used) == 1 && used == (int)strlen(it) && d >= 0 &&
        it[6] >= '0' && it[6] <= '9') {
        *dim = d;
        return 'S';
    }
    return 0;
}

static const char *place_say(char *buf, size_t cap, const np_place_rec *p, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static const char *place_say(char *buf, size_t cap, const np_place_rec *p, const char *fmt, ...)
{
    int u = snprintf(buf, cap, "placement of '%s': ", p->name);
    va_list ap;
    va_start(ap, fmt);
    if (u >= 0 && (size_t)u < cap)
        vsnprintf(buf + u, cap - (size_t)u, fmt, ap);
    va_end(ap);
    return buf;
}

/* The per-dimension checks: the shard lies inside the logical tensor and
 * covers it whole where no placement shards that dimension. */
static const char *extent_problem(const np_place_rec *p, const int64_t *parts,
                                  const int64_t *shape, char *buf, size_t cap)
{
    for (int d = 0; d < p->global_ndim; d++) {
        int64_t g = p->global_shape[d], o = p->offset[d], l = shape[d];
        if (g < 0 || o < 0 || o + l > g)
            return place_say(buf, cap, p, "offset[%d] %lld + the leaf's shape[%d] %lld is "
                             "outside global_shape[%d] %lld", d, (long long)o, d, (long long)l,
                             d, (long long)g);
        if (parts[d] == 1 && (o != 0 || l != g))
            return place_say(buf, cap, p, "dimension %d is not sharded but the leaf's shape[%d] "
                             "%lld at offset %lld is not global_shape[%d] %lld", d, d,
                             (long long)l, (long long)o, d, (long long)g);
    }
    return NULL;
}

const char *np_fmt_place_problem(const np_fmt_mesh *m, const np_place_rec *p, int ndim,
                                 const int64_t *shape, char *buf, size_t cap)
{
    if (m->ndim < 1)
        return place_say(buf, cap, p, "the file has no mesh (root attributes mesh_dims, "
                                      "mesh_shape, mesh_coords) for its placements");
    if (ndim < 0 || !shape)
        return place_say(buf, cap, p, "name is no leaf of /entries");
    if (p->global_ndim != ndim || p->global_ndim < 0 || p->global_ndim > NP_FMT_MAX_DIMS)
        return place_say(buf, cap, p, "global_ndim is %d, the leaf's ndim %d", p->global_ndim,
                         ndim);
    if (!memchr(p->placements, '\0', sizeof p->placements))
        return place_say(buf, cap, p, "placements is not NUL-terminated within %d bytes",
                         NP_FMT_PLACE_LEN);
    int n = 1;
    for (const char *c = p->placements; *c; c++)
        n += *c == ',';
    if (n != m->ndim)
        return place_say(buf, cap, p, "placements '%s' has %d item(s), the mesh %d dimension(s)",
                         p->placements, n, m->ndim);
    int64_t parts[NP_FMT_MAX_DIMS];
    for (int d = 0; d < NP_FMT_MAX_DIMS; d++)
        parts[d] = 1;
    for (int k = 0; k < n; k++) {
        char it[NP_FMT_PLACE_LEN];
        int dim = -1;
        int kind = np_fmt_place_kind(np_fmt_place_item(p, k, it, sizeof it), &dim);
        if (!kind)
            return place_say(buf, cap, p, "placements item %d '%s' (mesh dimension %s) is not "
                             "Shard(d), Replicate(), Partial(sum), Partial(avg) or Local()", k, it,
                             m->dims[k]);
        if (kind == 'S' && dim >= p->global_ndim)
            return place_say(buf, cap, p, "placements item %d '%s' shards dimension %d of a "
                             "%d-dimensional tensor", k, it, dim, p->global_ndim);
        if (kind == 'S')
            parts[dim] *= m->shape[k];
    }
    const char *why = extent_problem(p, parts, shape, buf, cap);
    if (why)
        return why;
    if (p->stage < -1 || p->micro_batch < -1)
        return place_say(buf, cap, p, "%s is %d (expected -1 or more)",
                         p->stage < -1 ? "stage" : "micro_batch",
                         p->stage < -1 ? p->stage : p->micro_batch);
    return NULL;
}
