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

/* Dtype casts (issue 31): a mixed-precision run makes casts the float32
 * run does not (HF T5 casts its hidden states to the weight's dtype only
 * when they differ), so the calls after an extra cast take other counters
 * and exact names would pair different casts. Cast calls are paired by
 * their callsite instead: the k-th cast of an API from one callsite on one
 * side with the k-th from that callsite on the other (docs/COMPARE.md,
 * "Matching"); an extra cast is then a call of one side only. Without
 * callsites (runtime and msprobe dumps) that is the counter order. */
static const char *const cast_api[] = {"Tensor.to", "Tensor.float", "Tensor.half",
                                       "Tensor.bfloat16", "Tensor.double", "Tensor.type",
                                       "Tensor.type_as", NULL};

/* The length of "API.N" at the start of a forward call name of a cast
 * ("Tensor.to.4.forward" -> 11), 0 for any other call. */
size_t cmp_cast_base(const char *call)
{
    for (int i = 0; cast_api[i]; i++) {
        size_t l = strlen(cast_api[i]);
        if (strncmp(call, cast_api[i], l) != 0 || call[l] != '.')
            continue;
        size_t k = l + 1;
        while (call[k] >= '0' && call[k] <= '9')
            k++;
        return k > l + 1 && call[k] == '.' ? k : 0;
    }
    return 0;
}

typedef struct cast_map {
    np_strmap by_base; /* "Tensor.to.4" -> index into keys */
    np_strmap by_key;  /* "Tensor.to|callsite#k" -> index into bases */
    const char **keys, **bases;
    size_t n;
} cast_map;

static void cast_map_free(cast_map *m)
{
    np_strmap_free(&m->by_base);
    np_strmap_free(&m->by_key);
    free(m->keys);
    free(m->bases);
}

/* The casts of one side's forward calls, keyed by API, callsite and their
 * order among that API's calls from that callsite. -1 when out of memory. */
static int cast_map_build(cast_map *m, const cmp_dump *d, cmp_arena *a)
{
    if (np_strmap_init(&m->by_base, d->n_calls + 16) || np_strmap_init(&m->by_key, d->n_calls + 16))
        return -1;
    m->keys = calloc(d->n_calls + 1, sizeof *m->keys);
    m->bases = calloc(d->n_calls + 1, sizeof *m->bases);
    np_strmap count = {0};
    if (!m->keys || !m->bases || np_strmap_init(&count, d->n_calls + 16))
        return -1;
    char key[1400];
    int rc = 0;
    for (size_t k = 0; k < d->n_calls && !rc; k++) {
        const cmp_call_rec *c = &d->calls[k];
        size_t b = cmp_cast_base(c->name);
        size_t l = strlen(c->name);
        if (!b || l < 8 || strcmp(c->name + l - 8, ".forward") != 0)
            continue;
        size_t api = b - 1;
        while (api > 0 && c->name[api] != '.')
            api--;
        snprintf(key, sizeof key, "%.*s|%.1000s", (int)api, c->name, c->callsite ? c->callsite : "");
        int seen = np_strmap_get(&count, key);
        const char *ck = cmp_arena_strdup(a, key);
        if (!ck || np_strmap_put(&count, ck, seen < 0 ? 1 : seen + 1)) {
            rc = -1;
            break;
        }
        snprintf(key + strlen(key), sizeof key - strlen(key), "#%d", seen < 0 ? 0 : seen);
        const char *fk = cmp_arena_strdup(a, key);
        char base[512];
        snprintf(base, sizeof base, "%.*s", (int)b, c->name);
        const char *fb = cmp_arena_strdup(a, base);
        if (!fk || !fb || np_strmap_get(&m->by_base, fb) >= 0) {
            rc = fk && fb ? 0 : -1;
            continue;
        }
        m->keys[m->n] = fk;
        m->bases[m->n] = fb;
        if (np_strmap_put(&m->by_base, fb, (int)m->n) || np_strmap_put(&m->by_key, fk, (int)m->n))
            rc = -1;
        m->n++;
    }
    np_strmap_free(&count);
    return rc;
}

/* The bench-side name of a cmp leaf of a cast call: 1 renamed into buf, 0
 * not a cast (look it up as it is), -1 a cast the bench did not make. */
static int cast_name(char *buf, size_t cap, const cast_map *bm, const cast_map *cm, const char *name)
{
    size_t b = cmp_cast_base(name);
    if (!b || !cm->n)
        return 0;
    char base[512];
    snprintf(base, sizeof base, "%.*s", (int)b, name);
    int i = np_strmap_get(&cm->by_base, base);
    if (i < 0)
        return 0;
    int j = np_strmap_get(&bm->by_key, cm->keys[i]);
    if (j < 0)
        return -1;
    snprintf(buf, cap, "%s%s", bm->bases[j], name + b);
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
    cast_map bcast, ccast; /* exact: casts paired by callsite */
    memset(&bcast, 0, sizeof bcast);
    memset(&ccast, 0, sizeof ccast);
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
    int casts_ok = !fuzzy && cast_map_build(&bcast, b, arena) == 0 &&
                   cast_map_build(&ccast, c, arena) == 0;
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
        int cast = 0;
        if (!fuzzy && !renamed && casts_ok) {
            cast = cast_name(mapped, sizeof mapped, &bcast, &ccast, cs->name);
            if (cast > 0)
                look = mapped;
        }
        if (!fuzzy && cast < 0) {
            j = -1; /* a cast the bench did not make */
        } else if (!fuzzy) {
            j = np_strmap_get(exact, look);
            if (j >= 0 && used[j])
                j = -1;
            if (j >= 0)
                how = renamed ? NP_MATCH_MAPPING : NP_MATCH_EXACT;
        } else {
            cmp_fuzzy_key(key, sizeof key, look);
            int k = np_strmap_get(&keys, key);
            while (k >= 0 && (used[k] || !cmp_same_shape(&b->entries[k], cs)))
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
    cast_map_free(&bcast);
    cast_map_free(&ccast);
    free(used);
    free(next);
    np_strmap_free(&keys);
    return st;
}
