/* tests/compare/test_calltree.c - the module tree builder shared by
 * `nprobe ls --tree` and the HTML report (nprobe/calltree.h): hand-worked
 * trees in pre-order as text, a parent that is not a call, a module
 * recorded after its children, self links and cycles cut, a deep chain
 * walked without recursion, the subtree call counts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "nprobe/calltree.h"

/* The tree as "depth:name[*],..." in pre-order (* = not a call). */
static void render(char *buf, size_t cap, const np_calltree *t)
{
    size_t u = 0;
    buf[0] = '\0';
    for (int i = t->first_root; i >= 0 && u < cap; i = np_calltree_next(t, i))
        u += (size_t)snprintf(buf + u, cap - u, "%s%d:%s%s", u ? "," : "", t->nodes[i].depth,
                              t->nodes[i].name, t->nodes[i].call < 0 ? "*" : "");
}

static np_calltree *build(const char *const *names, const char *const *parents, size_t n)
{
    np_calltree *t = NULL;
    np_error err = {0};
    CHECK_EQ_INT(np_calltree_build(&t, names, parents, n, &err), NP_OK);
    return t;
}

int main(void)
{
    char buf[4096];
    /* mix level: modules recorded after their children; an API at the top */
    const char *n1[] = {"lin.0", "relu.0", "M.fc", "M.net", "loss.0"};
    const char *p1[] = {"M.fc", "M.net", "M.net", "", ""};
    np_calltree *t = build(n1, p1, 5);
    render(buf, sizeof buf, t);
    CHECK_STREQ(buf, "0:M.net,1:relu.0,1:M.fc,2:lin.0,0:loss.0");
    CHECK_EQ_INT((int)t->n_nodes, 5);
    CHECK_EQ_INT(t->nodes[3].n_calls, 4); /* M.net holds relu, fc, lin and itself */
    CHECK_EQ_INT(t->nodes[2].n_calls, 2);
    CHECK_EQ_INT(t->nodes[0].parent, 2);
    np_calltree_free(t);

    /* L1: parents named but never dumped become nodes of their own, at the top */
    const char *n2[] = {"a.0", "b.0", "c.0", "d.0"};
    const char *p2[] = {"Mod.x", "Mod.y", "Mod.x", NULL};
    t = build(n2, p2, 4);
    render(buf, sizeof buf, t);
    CHECK_STREQ(buf, "0:Mod.x*,1:a.0,1:c.0,0:Mod.y*,1:b.0,0:d.0");
    CHECK_EQ_INT((int)t->n_nodes, 6);
    CHECK_EQ_INT((int)t->n_calls, 4);
    CHECK_EQ_INT(t->nodes[4].n_calls, 2);
    np_calltree_free(t);

    /* a self link and a cycle (corrupt input): cut, every call still listed */
    const char *n3[] = {"s", "x", "y", "z"};
    const char *p3[] = {"s", "y", "z", "x"};
    t = build(n3, p3, 4);
    render(buf, sizeof buf, t);
    CHECK_STREQ(buf, "0:s,0:z,1:y,2:x");
    np_calltree_free(t);

    /* empty */
    t = build(NULL, NULL, 0);
    CHECK_EQ_INT(t->first_root, -1);
    CHECK_EQ_INT((int)t->n_nodes, 0);
    np_calltree_free(t);

    /* a chain 200000 deep: built and walked without recursion */
    size_t n = 200000;
    char **nm = malloc(n * sizeof *nm);
    const char **par = malloc(n * sizeof *par);
    for (size_t i = 0; i < n; i++) {
        nm[i] = malloc(16);
        snprintf(nm[i], 16, "c%zu", i);
    }
    for (size_t i = 0; i < n; i++)
        par[i] = i ? nm[i - 1] : "";
    t = build((const char *const *)nm, par, n);
    int count = 0, last = -1;
    for (int i = t->first_root; i >= 0; i = np_calltree_next(t, i))
        count++, last = i;
    CHECK_EQ_INT(count, (int)n);
    CHECK_EQ_INT(t->nodes[last].depth, (int)n - 1);
    CHECK_EQ_INT(t->nodes[0].n_calls, (int)n);
    np_calltree_free(t);
    for (size_t i = 0; i < n; i++)
        free(nm[i]);
    free(nm);
    free(par);
    return check_report();
}
