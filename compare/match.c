/* compare/match.c - pair the two dumps' leaves: exact names (shape checked
 * by the verdict), --fuzzy (call counters dropped, both sides walked in
 * order, equal shapes), --mapping (JSON renames of module paths, API names
 * or whole leaves; docs/COMPARE.md). Every row says how it was matched; the
 * leaves of either side left over become cmp-only / bench-only rows. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct rename_rule {
    char *from, *to;
} rename_rule;

struct cmp_mapping {
    rename_rule *rules[3]; /* names, apis, modules */
    size_t n[3];
};

static const char *const mapping_keys[3] = {"names", "apis", "modules"};

void cmp_mapping_free(cmp_mapping *m)
{
    if (!m)
        return;
    for (int k = 0; k < 3; k++) {
        for (size_t i = 0; i < m->n[k]; i++) {
            free(m->rules[k][i].from);
            free(m->rules[k][i].to);
        }
        free(m->rules[k]);
    }
    free(m);
}

np_status cmp_mapping_load(cmp_mapping **out, const char *path, np_error *err)
{
    *out = NULL;
    json_error_t je;
    const char *why = NULL;
    FILE *f = np_fopen_regular(path, &why); /* a FIFO would block forever */
    if (!f)
        return np_error_set(err, errno == ENOENT ? NP_ERR_NOTFOUND : NP_ERR_IO, path, NULL,
                            "cannot open the mapping: %s", why);
    json_t *root = json_loadf(f, 0, &je);
    fclose(f);
    if (!root)
        return np_error_set_at(err, NP_ERR_JSON, path, je.line, je.column, NULL, "%s", je.text);
    np_status st = NP_OK;
    cmp_mapping *m = calloc(1, sizeof *m);
    if (!m) {
        json_decref(root);
        return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    }
    if (!json_is_object(root)) {
        st = np_error_set(err, NP_ERR_CONFIG, path, NULL,
                          "expected a JSON object with \"names\", \"apis\" and/or \"modules\"");
        goto done;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        int k = -1;
        for (int i = 0; i < 3; i++)
            if (strcmp(key, mapping_keys[i]) == 0)
                k = i;
        if (k < 0) {
            int near = np_closest_word(key, mapping_keys, 3);
            st = np_error_set(err, NP_ERR_CONFIG, path, key,
                              "unknown key%s%s%s; expected \"names\", \"apis\" or \"modules\"",
                              near >= 0 ? " (did you mean \"" : "", near >= 0 ? mapping_keys[near] : "",
                              near >= 0 ? "\"?)" : "");
            goto done;
        }
        if (!json_is_object(val)) {
            st = np_error_set(err, NP_ERR_CONFIG, path, key,
                              "expected an object of \"cmp name\": \"bench name\" pairs");
            goto done;
        }
        m->rules[k] = calloc(json_object_size(val) + 1, sizeof(rename_rule));
        if (!m->rules[k]) {
            st = np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
            goto done;
        }
        const char *from;
        json_t *to;
        json_object_foreach(val, from, to) {
            if (!json_is_string(to) || !from[0]) {
                st = np_error_set(err, NP_ERR_CONFIG, path, from,
                                  "in \"%s\": expected a non-empty name mapped to a string", key);
                goto done;
            }
            rename_rule *r = &m->rules[k][m->n[k]++];
            r->from = strdup(from);
            r->to = strdup(json_string_value(to));
            if (!r->from || !r->to) {
                st = np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
                goto done;
            }
        }
    }
done:
    json_decref(root);
    if (st != NP_OK)
        cmp_mapping_free(m);
    else
        *out = m;
    return st;
}

/* Replace the longest rule whose `from` is a dotted prefix of name (after
 * `skip` leading characters). 1 if renamed. */
static int apply_rules(char *buf, size_t cap, const char *name, size_t skip, const rename_rule *r,
                       size_t n)
{
    size_t best = 0;
    const rename_rule *hit = NULL;
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(r[i].from);
        if (strncmp(name + skip, r[i].from, l) == 0 &&
            (name[skip + l] == '.' || name[skip + l] == '\0') && l > best) {
            best = l;
            hit = &r[i];
        }
    }
    if (!hit)
        return 0;
    snprintf(buf, cap, "%.*s%s%s", (int)skip, name, hit->to, name + skip + best);
    return 1;
}

/* The bench-side name of a cmp leaf under the mapping; 1 if renamed. */
static int map_name(char *buf, size_t cap, const cmp_mapping *m, const char *name)
{
    char tmp[2 * NP_FMT_NAME_LEN];
    if (apply_rules(buf, cap, name, 0, m->rules[0], m->n[0]))
        return 1;
    if (apply_rules(buf, cap, name, 0, m->rules[1], m->n[1]))
        return 1;
    if (strncmp(name, "Module.", 7) == 0 && apply_rules(tmp, sizeof tmp, name, 7, m->rules[2], m->n[2])) {
        snprintf(buf, cap, "%s", tmp);
        return 1;
    }
    return 0;
}

static int same_shape(const np_cmp_side *a, const np_cmp_side *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return 0;
    return 1;
}

int cmp_names_map(np_strmap *m, const cmp_dump *d)
{
    if (np_strmap_init(m, d->n_entries) != 0)
        return -1;
    for (size_t j = 0; j < d->n_entries; j++)
        if (np_strmap_get(m, d->entries[j].name) < 0 && np_strmap_put(m, d->entries[j].name, (int)j) != 0)
            return -1;
    return 0;
}

np_status cmp_match(np_cmp_pair *p, const cmp_dump *b, const cmp_dump *c,
                    const np_strmap *bench_names, int fuzzy, const cmp_mapping *map,
                    cmp_arena *arena, np_error *err)
{
    size_t nb = b->n_entries, nc = c->n_entries;
    const np_strmap *exact = bench_names;
    np_strmap keys = {0};
    int *next = NULL;     /* fuzzy: next bench index with the same key */
    char *used = calloc(nb + 1, 1);
    np_status st = NP_OK;
    /* rows: one per cmp leaf plus the unused bench leaves, counted below */
    p->rows = calloc(nc + 1, sizeof *p->rows);
    if (!used || !p->rows) {
        st = np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory matching %zu x %zu rows", nb, nc);
        goto done;
    }
    if (fuzzy) {
        next = malloc((nb + 1) * sizeof *next);
        if (!next || np_strmap_init(&keys, nb) != 0) {
            st = np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory");
            goto done;
        }
        /* walk backwards so each key's list is in bench order */
        char kb[2 * NP_FMT_NAME_LEN];
        for (size_t j = nb; j-- > 0;) {
            cmp_fuzzy_key(kb, sizeof kb, b->entries[j].name);
            const char *k = cmp_arena_strdup(arena, kb);
            if (!k) {
                st = np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory");
                goto done;
            }
            next[j] = np_strmap_get(&keys, k);
            if (np_strmap_put(&keys, k, (int)j) != 0) {
                st = np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory");
                goto done;
            }
        }
    }
    size_t nr = 0;
    char mapped[2 * NP_FMT_NAME_LEN], key[2 * NP_FMT_NAME_LEN];
    for (size_t i = 0; i < nc; i++) {
        const np_cmp_side *cs = &c->entries[i];
        np_cmp_row *r = &p->rows[nr++];
        r->cmp = cs;
        r->call_index = -1;
        int renamed = map && map_name(mapped, sizeof mapped, map, cs->name);
        const char *look = renamed ? mapped : cs->name;
        int j = -1;
        np_cmp_match how = NP_MATCH_CMP_ONLY;
        if (!fuzzy) {
            j = np_strmap_get(exact, look);
            if (j >= 0 && used[j])
                j = -1;
            if (j >= 0)
                how = renamed ? NP_MATCH_MAPPING : NP_MATCH_EXACT;
        } else {
            cmp_fuzzy_key(key, sizeof key, look);
            int k = np_strmap_get(&keys, key);
            while (k >= 0 && (used[k] || !same_shape(&b->entries[k], cs)))
                k = next[k];
            if (k >= 0) {
                j = k;
                how = renamed ? NP_MATCH_MAPPING
                              : strcmp(b->entries[k].name, cs->name) == 0 ? NP_MATCH_EXACT
                                                                         : NP_MATCH_FUZZY;
            }
        }
        if (j >= 0) {
            used[j] = 1;
            r->bench = &b->entries[j];
        }
        r->match = how;
    }
    size_t n_unused = 0;
    for (size_t j = 0; j < nb; j++)
        n_unused += !used[j];
    if (n_unused) {
        np_cmp_row *rows = realloc(p->rows, (nr + n_unused + 1) * sizeof *rows);
        if (!rows) {
            st = np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory matching %zu x %zu rows",
                              nb, nc);
            goto done;
        }
        p->rows = rows;
        memset(p->rows + nr, 0, (n_unused + 1) * sizeof *rows);
    }
    for (size_t j = 0; j < nb; j++) {
        if (used[j])
            continue;
        np_cmp_row *r = &p->rows[nr++];
        r->bench = &b->entries[j];
        r->match = NP_MATCH_BENCH_ONLY;
        r->call_index = -1;
    }
    p->n_rows = nr;
done:
    free(used);
    free(next);
    np_strmap_free(&keys);
    return st;
}
