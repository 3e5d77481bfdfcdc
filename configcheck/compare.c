/* configcheck/compare.c - diff two packs item by item. Each member is
 * flattened to "a/b/c" -> text, the keys of both sides are merged, and each
 * difference gets a level from the documented lists below
 * (docs/CONFIG_CHECK.md): what can change the numbers is an error. */
#include <ctype.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "packread.h"

/* ---- levels ------------------------------------------------------------ */

/* A pattern ending in '*' is a prefix. */
static int match_any(const char *name, const char *const *pats, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(pats[i]);
        if (len && pats[i][len - 1] == '*') {
            if (strncmp(name, pats[i], len - 1) == 0)
                return 1;
        } else if (strcmp(name, pats[i]) == 0) {
            return 1;
        }
    }
    return 0;
}
#define MATCH(name, pats) match_any(name, pats, sizeof pats / sizeof pats[0])

/* Environment variables that change numerics: thread counts, BLAS and math
 * libraries, device visibility, framework switches, library loading. */
static const char *const env_error[] = {
    "OMP_*", "GOMP_*", "KMP_*", "OPENBLAS_*", "GOTO_*", "MKL_*", "BLIS_*", "VECLIB_*",
    "DNNL_*", "ONEDNN_*", "CUDA_*", "CUBLAS_*", "CUDNN_*", "NCCL_*", "NVIDIA_TF32_OVERRIDE",
    "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ASCEND_*", "HCCL_*", "NPU_*", "NPROBE_*",
    "LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONHASHSEED", "TORCH_*", "PYTORCH_*", "TF_*", "XLA_*",
    "JAX_*", "MS_*", "MINDSPORE_*", "CUBLAS_WORKSPACE_CONFIG",
};
/* Variables that change which programs and libraries are found, or parsing. */
static const char *const env_warning[] = {
    "PATH", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV",
    "LANG", "LC_*", "TZ", "CC", "CFLAGS", "LDFLAGS", "MALLOC_*", "GLIBC_TUNABLES",
};

static np_cc_level env_level(const char *key)
{
    if (MATCH(key, env_error))
        return NP_CC_ERROR;
    if (MATCH(key, env_warning))
        return NP_CC_WARNING;
    return NP_CC_INFO;
}

static np_cc_level libs_level(const char *key)
{
    static const char *const info[] = {"openblas/num_procs", "openmp/num_procs"};
    static const char *const warning[] = {"hdf5", "jansson", "libzip", "libxlsxwriter",
                                          "openmp/version"};
    static const char *const error[] = {"nprobe/*", "compiler", "libc/*", "openblas/*",
                                        "openmp/max_threads"};
    if (MATCH(key, info))
        return NP_CC_INFO;
    if (MATCH(key, warning))
        return NP_CC_WARNING;
    if (MATCH(key, error))
        return NP_CC_ERROR;
    return NP_CC_WARNING;
}

/* Python distributions that compute (normalised names). */
static const char *const pip_error[] = {
    "torch", "torch-npu", "torchvision", "torchaudio", "numpy", "scipy", "jax", "jaxlib",
    "tensorflow", "tensorflow-cpu", "tensorflow-gpu", "mindspore", "paddlepaddle", "apex",
    "deepspeed", "megatron-core", "transformers", "accelerate", "triton", "flash-attn",
    "xformers", "mkl", "intel-openmp", "nvidia-*", "cupy*", "onnxruntime*", "scikit-learn",
    "mindstudio-probe",
};

static np_cc_level pip_level(const char *key)
{
    return MATCH(key, pip_error) ? NP_CC_ERROR : NP_CC_WARNING;
}

static np_cc_level item_level(np_cc_item_id id, const char *key)
{
    switch (id) {
    case NP_CC_ENV: return env_level(key);
    case NP_CC_LIBS: return libs_level(key);
    case NP_CC_PIP: return pip_level(key);
    default: return NP_CC_ERROR;
    }
}

/* Level when a member is in one pack only. */
static np_cc_level missing_level(np_cc_item_id id)
{
    return id == NP_CC_PIP ? NP_CC_WARNING : NP_CC_ERROR;
}

/* ---- flattening --------------------------------------------------------- */

static char *scalar_text(const json_t *v)
{
    if (json_is_string(v))
        return strdup(json_string_value(v));
    return json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_SORT_KEYS);
}

static int all_scalars(const json_t *a)
{
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v) if (json_is_object(v) || json_is_array(v)) return 0;
    return 1;
}

/* ---- flattened sides: (key, text) pairs in a string arena ---------------
 * An item of millions of keys (a dataset folder, a hostile pack) is
 * flattened into one array of pointers into large string blocks, sorted
 * and merged with the other side: no hash table and no per-key
 * allocation. The rows then point into the same blocks, which the result
 * owns (np_cc_item.strings), so memory is the text plus 40 bytes a key. */

typedef struct sblock {
    struct sblock *next;
    size_t used, cap;
    char data[];
} sblock;

typedef struct kv {
    const char *k, *v;
    size_t order; /* the later of equal keys wins, as in a JSON object */
} kv;

typedef struct flat {
    kv *v;
    size_t n, cap;
    sblock *blocks;
} flat;

static char *put_text(sblock **head, const char *s, size_t n)
{
    sblock *b = *head;
    if (!b || b->cap - b->used < n + 1) {
        size_t cap = n + 1 > ((size_t)1 << 20) ? n + 1 : (size_t)1 << 20;
        sblock *nb = malloc(sizeof *nb + cap);
        if (!nb)
            return NULL;
        nb->next = b;
        nb->used = 0;
        nb->cap = cap;
        *head = b = nb;
    }
    char *d = b->data + b->used;
    memcpy(d, s, n);
    d[n] = '\0';
    b->used += n + 1;
    return d;
}

static void free_blocks(sblock *b)
{
    while (b) {
        sblock *n = b->next;
        free(b);
        b = n;
    }
}

static int flat_put(flat *f, const char *key, const char *val)
{
    if (f->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 256;
        kv *nv = realloc(f->v, cap * sizeof *nv);
        if (!nv)
            return -1;
        f->v = nv;
        f->cap = cap;
    }
    const char *k = put_text(&f->blocks, key, strlen(key));
    const char *v = k ? put_text(&f->blocks, val, strlen(val)) : NULL;
    if (!v)
        return -1;
    f->v[f->n] = (kv){k, v, f->n};
    f->n++;
    return 0;
}

static int flatten(flat *out, const char *prefix, const json_t *v);

/* Flatten child `c` of a container under the key "prefix/name" ("name" at
 * the top level). */
static int flatten_child(flat *out, const char *prefix, const char *name, const json_t *c)
{
    size_t len = strlen(prefix) + strlen(name) + 2;
    char *key = malloc(len);
    if (!key)
        return -1;
    snprintf(key, len, "%s%s%s", prefix, *prefix ? "/" : "", name);
    int r = flatten(out, key, c);
    free(key);
    return r;
}

/* out[prefix/...] = text for every leaf of v. */
static int flatten(flat *out, const char *prefix, const json_t *v)
{
    if (json_is_object(v) && json_object_size(v) > 0) {
        const char *k;
        json_t *c;
        json_object_foreach((json_t *)v, k, c) {
            int r = flatten_child(out, prefix, k, c);
            if (r)
                return r;
        }
        return 0;
    }
    if (json_is_array(v) && !all_scalars(v)) {
        size_t i;
        json_t *c;
        json_array_foreach(v, i, c) {
            char index[32];
            snprintf(index, sizeof index, "%zu", i);
            int r = flatten_child(out, prefix, index, c);
            if (r)
                return r;
        }
        return 0;
    }
    if (!*prefix) /* an empty top-level object: nothing to compare */
        return 0;
    char *t = scalar_text(v);
    if (!t)
        return -1;
    int r = flat_put(out, prefix, t);
    free(t);
    return r;
}

/* Lower-case, with runs of '-', '_', '.' as one '-' (PEP 503). */
static void pip_normalise(char *s)
{
    char *w = s;
    for (char *r = s; *r; r++) {
        if (*r == '-' || *r == '_' || *r == '.') {
            if (w == s || w[-1] != '-')
                *w++ = '-';
        } else {
            *w++ = (char)tolower((unsigned char)*r);
        }
    }
    *w = '\0';
}

/* pip.txt lines "name==version" or "name @ url" -> flat[name] = version. */
static int flatten_pip(flat *out, const char *text)
{
    const char *p = text;
    while (p && *p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char *line = malloc(len + 1);
        if (!line)
            return -1;
        memcpy(line, p, len);
        line[len] = '\0';
        while (len && (line[len - 1] == '\r' || line[len - 1] == ' '))
            line[--len] = '\0';
        p = nl ? nl + 1 : NULL;
        if (!len || line[0] == '#') {
            free(line);
            continue;
        }
        char *sep = strstr(line, "==");
        size_t seplen = 2;
        if (!sep) {
            sep = strstr(line, " @ ");
            seplen = 3;
        }
        const char *ver = sep ? sep + seplen : "";
        if (sep)
            *sep = '\0';
        char *name = line;
        pip_normalise(name);
        json_t *utf8 = json_string(ver); /* the reports are UTF-8 */
        int bad = *name ? flat_put(out, name, utf8 ? ver : "(not UTF-8)") : 0;
        json_decref(utf8);
        free(line);
        if (bad)
            return -1;
    }
    return 0;
}

/* The part of each member that is compared. */
static const json_t *compared_part(np_cc_item_id id, const json_t *doc)
{
    if (id == NP_CC_ENV)
        return json_object_get(doc, "variables");
    if (id == NP_CC_WEIGHTS)
        return json_object_get(doc, "params");
    return doc;
}

static int kv_order(const void *x, const void *y)
{
    const kv *a = x, *b = y;
    int c = strcmp(a->k, b->k);
    return c ? c : (a->order > b->order) - (a->order < b->order);
}

/* Flatten side p's member id, sorted by key, equal keys reduced to the
 * last one; the member's parsed document is released once flattened. */
static int flatten_side(flat *out, np_cc_item_id id, np_cc_packin *p)
{
    int r = 0;
    if (id == NP_CC_PIP) {
        r = p->pip ? flatten_pip(out, p->pip) : 0;
    } else {
        const json_t *part = p->docs[id] ? compared_part(id, p->docs[id]) : NULL;
        r = part ? flatten(out, "", part) : 0;
        json_decref(p->docs[id]);
        p->docs[id] = NULL;
    }
    if (r)
        return r;
    if (out->n > 1)
        qsort(out->v, out->n, sizeof *out->v, kv_order);
    size_t w = 0;
    for (size_t i = 0; i < out->n; i++) {
        if (w && strcmp(out->v[w - 1].k, out->v[i].k) == 0)
            w--;
        out->v[w++] = out->v[i];
    }
    out->n = w;
    return 0;
}

/* ---- the diff ----------------------------------------------------------- */

/* Take over the string blocks of f (the rows point into them). */
static void adopt_blocks(np_cc_item *it, flat *f)
{
    sblock *b = f->blocks;
    while (b) {
        sblock *n = b->next;
        b->next = it->strings;
        it->strings = b;
        b = n;
    }
    f->blocks = NULL;
}

static np_status diff_item(np_cc_item *it, np_cc_item_id id, np_cc_packin *a, np_cc_packin *b,
                           np_error *err)
{
    flat fa = {0}, fb = {0};
    np_status st = NP_OK;
    const char *name = np_cc_member_names[id];
    if (flatten_side(&fa, id, a) || flatten_side(&fb, id, b)) {
        st = np_error_set(err, NP_ERR_NOMEM, NULL, name, "out of memory");
        goto done;
    }
    if (fa.n + fb.n > (size_t)INT_MAX) {
        st = np_error_set(err, NP_ERR_LIMIT, NULL, name, "more than %d keys", INT_MAX);
        goto done;
    }
    it->rows = calloc(fa.n + fb.n ? fa.n + fb.n : 1, sizeof *it->rows);
    if (!it->rows) {
        st = np_error_set(err, NP_ERR_NOMEM, NULL, name, "out of memory for %zu keys", fa.n + fb.n);
        goto done;
    }
    adopt_blocks(it, &fa);
    adopt_blocks(it, &fb);
    np_cc_level worst = NP_CC_PASS;
    for (size_t i = 0, j = 0; i < fa.n || j < fb.n;) {
        int c = i == fa.n ? 1 : j == fb.n ? -1 : strcmp(fa.v[i].k, fb.v[j].k);
        np_cc_row *r = &it->rows[it->n_rows++];
        r->key = (char *)(c <= 0 ? fa.v[i].k : fb.v[j].k);
        r->bench = c <= 0 ? (char *)fa.v[i++].v : NULL;
        r->cmp = c >= 0 ? (char *)fb.v[j++].v : NULL;
        r->level = r->bench && r->cmp && strcmp(r->bench, r->cmp) == 0 ? NP_CC_PASS
                                                                      : item_level(id, r->key);
        if (r->level > worst)
            worst = r->level;
    }
    char note[256] = "";
    if (a->present[id] != b->present[id]) {
        snprintf(note, sizeof note, "%s is missing from the %s pack", name,
                 a->present[id] ? "compare" : "bench");
        if (missing_level(id) > worst)
            worst = missing_level(id);
    } else if (!a->present[id]) {
        snprintf(note, sizeof note, "%s is in neither pack", name);
    }
    if (note[0] && !(it->note = strdup(note)))
        st = np_error_set(err, NP_ERR_NOMEM, NULL, name, "out of memory");
    it->pass_check = worst == NP_CC_INFO ? NP_CC_PASS : worst;
done:
    free(fa.v);
    free(fb.v);
    free_blocks(fa.blocks);
    free_blocks(fb.blocks);
    return st;
}

np_cc_level np_cc_result_level(const np_cc_result *r)
{
    np_cc_level w = NP_CC_PASS;
    for (int i = 0; r && i < NP_CC_ITEM_COUNT; i++)
        if (r->items[i].pass_check > w)
            w = r->items[i].pass_check;
    return w;
}

void np_cc_result_free(np_cc_result *r)
{
    if (!r)
        return;
    for (int i = 0; i < NP_CC_ITEM_COUNT; i++) {
        np_cc_item *it = &r->items[i];
        free_blocks(it->strings); /* the rows' text */
        free(it->rows);
        free(it->note);
    }
    free(r->bench_path);
    free(r->cmp_path);
    free(r);
}

/* The first batches are drawn by the seeded RNG: when the seeds differ (an
 * error under random) and every data file is equal, differing batch hashes
 * are a consequence, not a second finding; they drop to info. With equal
 * seeds they stay errors (the data or the pipeline differs). */
static np_status explain_batches(np_cc_result *r, np_error *err)
{
    const np_cc_item *rn = &r->items[NP_CC_RANDOM];
    np_cc_item *ds = &r->items[NP_CC_DATASET];
    int seed_differs = 0;
    for (int j = 0; j < rn->n_rows; j++)
        if (rn->rows[j].level == NP_CC_ERROR && strstr(rn->rows[j].key, "seed"))
            seed_differs = 1;
    if (!seed_differs || ds->note)
        return NP_OK;
    int moved = 0;
    for (int j = 0; j < ds->n_rows; j++) {
        np_cc_row *row = &ds->rows[j];
        if (row->level == NP_CC_PASS)
            continue;
        if (strncmp(row->key, "batches/", 8) != 0 || !row->bench || !row->cmp)
            return NP_OK; /* a data file differs, or a batch is missing: keep the errors */
    }
    np_cc_level worst = NP_CC_PASS;
    for (int j = 0; j < ds->n_rows; j++) {
        if (ds->rows[j].level != NP_CC_PASS) {
            ds->rows[j].level = NP_CC_INFO;
            moved++;
        }
        if (ds->rows[j].level > worst)
            worst = ds->rows[j].level;
    }
    ds->pass_check = worst == NP_CC_INFO ? NP_CC_PASS : worst;
    if (moved && !(ds->note = strdup("the batch hashes differ because the seeds differ (see "
                                      "random); the data files are equal")))
        return np_error_set(err, NP_ERR_NOMEM, NULL, "dataset.json", "out of memory");
    return NP_OK;
}

np_status np_cc_compare(np_cc_result **out, const char *bench_zip, const char *cmp_zip,
                        const np_cc_limits *lim, np_error *err)
{
    *out = NULL;
    np_cc_packin a, b;
    np_status st = np_cc_packin_read(&a, bench_zip, lim, err);
    if (st != NP_OK)
        return st;
    st = np_cc_packin_read(&b, cmp_zip, lim, err);
    if (st != NP_OK) {
        np_cc_packin_free(&a);
        return st;
    }
    np_cc_result *r = calloc(1, sizeof *r);
    if (!r || !(r->bench_path = strdup(bench_zip)) || !(r->cmp_path = strdup(cmp_zip)))
        st = np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory");
    for (int i = 0; i < NP_CC_ITEM_COUNT && st == NP_OK; i++)
        st = diff_item(&r->items[i], (np_cc_item_id)i, &a, &b, err);
    if (st == NP_OK)
        st = explain_batches(r, err);
    np_cc_packin_free(&a);
    np_cc_packin_free(&b);
    if (st != NP_OK) {
        np_cc_result_free(r);
        return st;
    }
    *out = r;
    return NP_OK;
}
