/* common/strmap.c - string -> int map: open addressing, linear probing,
 * FNV-1a hash, keys borrowed (include/nprobe/common.h). Shared by compare
 * (call and leaf names) and the probe (leaf names of a step). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nprobe/common.h"

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

int np_strmap_init(np_strmap *m, size_t expected)
{
    size_t cap = 16;
    while (cap < expected * 2)
        cap <<= 1;
    m->keys = calloc(cap, sizeof *m->keys);
    m->vals = malloc(cap * sizeof *m->vals);
    m->cap = cap;
    m->len = 0;
    if (!m->keys || !m->vals) {
        np_strmap_free(m);
        return -1;
    }
    return 0;
}

static int map_grow(np_strmap *m)
{
    np_strmap n;
    if (np_strmap_init(&n, m->cap) != 0)
        return -1;
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i])
            np_strmap_put(&n, m->keys[i], m->vals[i]);
    np_strmap_free(m);
    *m = n;
    return 0;
}

int np_strmap_put(np_strmap *m, const char *key, int val)
{
    if ((m->len + 1) * 2 > m->cap && map_grow(m) != 0)
        return -1;
    size_t mask = m->cap - 1, i = (size_t)hash_str(key) & mask;
    while (m->keys[i]) {
        if (strcmp(m->keys[i], key) == 0) {
            m->vals[i] = val;
            return 0;
        }
        i = (i + 1) & mask;
    }
    m->keys[i] = key;
    m->vals[i] = val;
    m->len++;
    return 0;
}

int np_strmap_get(const np_strmap *m, const char *key)
{
    if (!m->cap)
        return -1;
    size_t mask = m->cap - 1, i = (size_t)hash_str(key) & mask;
    while (m->keys[i]) {
        if (m->keys[i] == key || strcmp(m->keys[i], key) == 0)
            return m->vals[i];
        i = (i + 1) & mask;
    }
    return -1;
}

void np_strmap_free(np_strmap *m)
{
    if (!m)
        return;
    free(m->keys);
    free(m->vals);
    m->keys = NULL;
    m->vals = NULL;
    m->cap = m->len = 0;
}

void np_strmap_clear(np_strmap *m)
{
    if (m->keys)
        memset(m->keys, 0, m->cap * sizeof *m->keys);
    m->len = 0;
}
