/* common/arena.c - copies of strings in large blocks that go together
 * (the leaf names of a step, the text of config_check's rows and sorted
 * records). */
#include <stdlib.h>
#include <string.h>

#include "nprobe/common.h"

struct np_arena_block {
    struct np_arena_block *next;
    size_t used, cap;
    char data[];
};

#define ARENA_BLOCK ((size_t)1 << 20) /* bytes per block unless a string is larger */

/* A block with room for `need` bytes: a spare one if it fits, else a new one. */
static np_arena_block *arena_block(np_arena *a, size_t need)
{
    np_arena_block *b = a->spare;
    if (b && b->cap >= need) {
        a->spare = b->next;
    } else {
        size_t cap = need > ARENA_BLOCK ? need : ARENA_BLOCK;
        if (!(b = malloc(sizeof *b + cap)))
            return NULL;
        b->cap = cap;
    }
    b->used = 0;
    b->next = a->used;
    a->used = b;
    return b;
}

char *np_arena_put(np_arena *a, const char *s, size_t n)
{
    np_arena_block *b = a->used;
    if ((!b || b->cap - b->used < n + 1) && !(b = arena_block(a, n + 1)))
        return NULL;
    char *d = b->data + b->used;
    if (n)
        memcpy(d, s, n);
    d[n] = '\0';
    b->used += n + 1;
    return d;
}

void np_arena_reset(np_arena *a)
{
    while (a->used) {
        np_arena_block *b = a->used;
        a->used = b->next;
        b->next = a->spare;
        a->spare = b;
    }
}

void np_arena_free(np_arena *a)
{
    np_arena_reset(a);
    while (a->spare) {
        np_arena_block *b = a->spare;
        a->spare = b->next;
        free(b);
    }
}
