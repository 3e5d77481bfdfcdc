/* compare/calltree.c - the module tree of a dump's calls from their parent
 * links (nprobe/calltree.h): shared by `nprobe ls --tree` and the HTML
 * report. Linear in the number of calls: one hash map of the names, one
 * walk up the parent links per chain (cycles cut), one pre-order pass. */
#include <stdlib.h>
#include <string.h>

#include "nprobe/calltree.h"

/* Parent links by name; a parent that is no call gets a node of its own.
 * Returns the node count, or -1 when out of memory. */
static long link_parents(np_calltree_node *v, const char *const *names,
                         const char *const *parents, size_t n)
{
    np_strmap m = {0};
    if (np_strmap_init(&m, 2 * n + 16) != 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (np_strmap_put(&m, names[i] ? names[i] : "", (int)i) != 0)
            goto oom;
    size_t nn = n;
    for (size_t i = 0; i < n; i++) {
        const char *p = parents ? parents[i] : NULL;
        if (!p || !p[0])
            continue;
        int j = np_strmap_get(&m, p);
        if (j == (int)i)
            continue;
        if (j < 0) {
            j = (int)nn;
            v[nn++] = (np_calltree_node){.name = p, .call = -1, .parent = -1};
            if (np_strmap_put(&m, p, j) != 0)
                goto oom;
        }
        v[i].parent = j;
    }
    np_strmap_free(&m);
    return (long)nn;
oom:
    np_strmap_free(&m);
    return -1;
}

/* Drop the parent link that closes a cycle. state: 0 unseen, 1 on the
 * chain being walked, 2 done. path holds the chain (n entries). */
static void cut_cycles(np_calltree_node *v, size_t nn, unsigned char *state, int *path)
{
    for (size_t i = 0; i < nn; i++) {
        int len = 0, cur = (int)i;
        while (cur >= 0 && state[cur] == 0) {
            state[cur] = 1;
            path[len++] = cur;
            cur = v[cur].parent;
        }
        if (cur >= 0 && state[cur] == 1)
            v[path[len - 1]].parent = -1;
        for (int k = 0; k < len; k++)
            state[path[k]] = 2;
    }
}

/* The top node of every node, into top (memoised along each chain). */
static void find_tops(const np_calltree_node *v, size_t nn, int *top, int *path)
{
    for (size_t i = 0; i < nn; i++)
        top[i] = -1;
    for (size_t i = 0; i < nn; i++) {
        int len = 0, cur = (int)i;
        while (top[cur] < 0 && v[cur].parent >= 0) {
            path[len++] = cur;
            cur = v[cur].parent;
        }
        int t = top[cur] >= 0 ? top[cur] : cur;
        top[cur] = t;
        for (int k = 0; k < len; k++)
            top[path[k]] = t;
    }
}

/* Children and top-level lists in call order; depths; subtree call counts. */
static void link_children(np_calltree *t, const int *top, int *last, unsigned char *seen)
{
    np_calltree_node *v = t->nodes;
    size_t nn = t->n_nodes;
    for (size_t i = 0; i < nn; i++) {
        last[i] = -1;
        seen[i] = 0;
    }
    int last_root = -1;
    for (size_t i = 0; i < nn; i++) {
        int p = v[i].parent;
        if (p >= 0) {
            if (last[p] < 0)
                v[p].first_child = (int)i;
            else
                v[last[p]].next_sibling = (int)i;
            last[p] = (int)i;
        }
        int r = top[i];
        if (i < t->n_calls && !seen[r]) {
            seen[r] = 1;
            if (last_root < 0)
                t->first_root = r;
            else
                v[last_root].next_sibling = r;
            last_root = r;
        }
    }
    /* pre-order: depths downwards; then call counts upwards in reverse */
    int k = 0;
    for (int i = t->first_root; i >= 0; i = np_calltree_next(t, i)) {
        v[i].depth = v[i].parent >= 0 ? v[v[i].parent].depth + 1 : 0;
        v[i].n_calls = v[i].call >= 0;
        last[k++] = i;
    }
    while (k-- > 0)
        if (v[last[k]].parent >= 0)
            v[v[last[k]].parent].n_calls += v[last[k]].n_calls;
}

np_status np_calltree_build(np_calltree **out, const char *const *names,
                            const char *const *parents, size_t n, np_error *err)
{
    *out = NULL;
    np_calltree *t = calloc(1, sizeof *t);
    np_calltree_node *v = calloc(2 * n + 1, sizeof *v);
    int *a = malloc((2 * n + 1) * sizeof *a), *b = malloc((2 * n + 1) * sizeof *b);
    unsigned char *state = calloc(2 * n + 1, 1);
    long nn = t && v && a && b && state ? 0 : -1;
    for (size_t i = 0; nn == 0 && i < n; i++)
        v[i] = (np_calltree_node){.name = names[i] ? names[i] : "", .call = (int)i, .parent = -1};
    if (nn == 0)
        nn = link_parents(v, names, parents, n);
    if (nn < 0) {
        free(t);
        free(v);
        free(a);
        free(b);
        free(state);
        return np_error_set(err, NP_ERR_NOMEM, NULL, NULL,
                            "out of memory building the module tree of %zu calls", n);
    }
    for (long i = 0; i < nn; i++)
        v[i].first_child = v[i].next_sibling = -1;
    t->nodes = v;
    t->n_nodes = (size_t)nn;
    t->n_calls = n;
    t->first_root = -1;
    cut_cycles(v, t->n_nodes, state, a);
    find_tops(v, t->n_nodes, b, a);
    link_children(t, b, a, state);
    free(a);
    free(b);
    free(state);
    *out = t;
    return NP_OK;
}

int np_calltree_next(const np_calltree *t, int node)
{
    const np_calltree_node *v = t->nodes;
    if (v[node].first_child >= 0)
        return v[node].first_child;
    while (node >= 0) {
        if (v[node].next_sibling >= 0)
            return v[node].next_sibling;
        node = v[node].parent;
    }
    return -1;
}

void np_calltree_free(np_calltree *t)
{
    if (!t)
        return;
    free(t->nodes);
    free(t);
}
