/* nprobe/calltree.h - the module tree of one dump's calls, built from their
 * parent links: one builder for `nprobe ls --tree` and the HTML report's
 * tree (compare/calltree.c).
 *
 *   np_calltree *t = NULL;
 *   np_calltree_build(&t, names, parents, n_calls, &err);
 *   for (int i = t->first_root; i >= 0; i = np_calltree_next(t, i)) ...   pre-order
 *   np_calltree_free(t);
 *
 * Every call is one node (node i is call i). A parent named by some call but
 * not itself a call (level L1 dumps name the enclosing module without
 * dumping it) becomes one extra node, marked call = -1. Children follow the
 * calls' order; top-level nodes come in the order of their first call. A
 * parent link to the call itself, or one that closes a cycle (hostile or
 * corrupt input), is dropped: the node is then at the top. */
#ifndef NPROBE_CALLTREE_H
#define NPROBE_CALLTREE_H

#include <stddef.h>

#include "nprobe/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct np_calltree_node {
    const char *name;  /* borrowed from the names (or parents) given */
    int call;          /* index of the call, -1 for a parent that is not a call */
    int parent;        /* node index, -1 at the top */
    int first_child;   /* -1 for a leaf */
    int next_sibling;  /* next node under the same parent (or the next top-level node), -1 */
    int depth;         /* 0 at the top */
    int n_calls;       /* calls in the subtree, the node's own included */
} np_calltree_node;

typedef struct np_calltree {
    np_calltree_node *nodes;  /* n_calls call nodes, then the parents that are not calls */
    size_t n_nodes, n_calls;
    int first_root;           /* -1 when empty */
} np_calltree;

/* Build the tree of n calls: names[i] is call i's name, parents[i] the name
 * of its enclosing call ("" or NULL at the top). The strings are borrowed:
 * they must outlive the tree. *out is the caller's (np_calltree_free).
 * Fails only with NP_ERR_NOMEM. */
np_status np_calltree_build(np_calltree **out, const char *const *names,
                            const char *const *parents, size_t n, np_error *err);
/* The node after `node` in pre-order (parents before their children,
 * children in order), -1 after the last. */
int np_calltree_next(const np_calltree *t, int node);
void np_calltree_free(np_calltree *t);

#ifdef __cplusplus
}
#endif
#endif
