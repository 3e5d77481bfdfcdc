/* runtime/data.c - deterministic data sets the models can learn: noisy rings
 * of 2-D points (MLP), 16x16 pattern images (CNN), a char-level language of
 * single-digit sums (GPT) and char-level windows of a text file (GPT).
 * Batch i is a pure function of (seed, i): a run resumed at step s sees the
 * same batches as an uninterrupted one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nprobe/model.h"

#define ARITH_VOCAB "+0123456789;="
#define IMG_SIDE 16

struct np_dataset {
    np_data_kind kind;
    uint64_t seed;
    int context;             /* T for language data */
    int n_classes;           /* classes or vocabulary size */
    char vocab[257];         /* language data: token -> byte */
    int tok_of[256];         /* byte -> token, -1 when absent */
    int64_t *text;           /* text data: the file as tokens */
    int64_t text_len;
    char file_sha[65];
    uint64_t draws;
    /* per-batch generator state */
    uint64_t key, ctr;
};

static const char *const kind_names[] = { /* enum order, no designators: the size check below
                                           * sees a missing name */
    "points", "images", "arith", "text",
};
_Static_assert(sizeof kind_names / sizeof kind_names[0] == NP_DATA_KIND_COUNT, "kind_names");

const char *np_data_kind_name(np_data_kind k)
{
    return (unsigned)k < NP_DATA_KIND_COUNT ? kind_names[k] : "unknown";
}

/* ---- the generator: counter-based, keyed per batch ---------------------- */

static void gen_start(np_dataset *ds, int64_t index)
{
    ds->key = np_rng_u64(ds->seed ^ 0x6e7072d0a7a5e7ull, (uint64_t)index * 4 + (uint64_t)ds->kind);
    ds->ctr = 0;
}

static double gen_uniform(np_dataset *ds)
{
    ds->draws++;
    return (double)np_rng_uniform(ds->key, ds->ctr++);
}

static uint64_t gen_below(np_dataset *ds, uint64_t n)
{
    ds->draws++;
    return np_rng_u64(ds->key, ds->ctr++) % n;
}

static double gen_normal(np_dataset *ds)
{
    double u1 = gen_uniform(ds), u2 = gen_uniform(ds);
    return sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
}

/* ---- opening ------------------------------------------------------------ */

static np_dataset *ds_alloc(np_data_kind kind, int context, uint64_t seed)
{
    np_dataset *ds = calloc(1, sizeof *ds);
    if (!ds)
        return NULL;
    ds->kind = kind;
    ds->seed = seed;
    ds->context = context;
    for (int i = 0; i < 256; i++)
        ds->tok_of[i] = -1;
    return ds;
}

static void set_vocab(np_dataset *ds, const char *chars, int n)
{
    memcpy(ds->vocab, chars, (size_t)n);
    ds->vocab[n] = '\0';
    ds->n_classes = n;
    for (int i = 0; i < n; i++)
        ds->tok_of[(unsigned char)chars[i]] = i;
}

np_status np_data_open(np_dataset **out, np_data_kind kind, int context, uint64_t seed,
                       np_error *err)
{
    *out = NULL;
    if (kind != NP_DATA_POINTS && kind != NP_DATA_IMAGES && kind != NP_DATA_ARITH)
        return np_error_set(err, NP_ERR_ARG, NULL, "data", "np_data_open: kind %d is not a generated data set", (int)kind);
    if (kind == NP_DATA_ARITH && context < 1)
        return np_error_set(err, NP_ERR_ARG, NULL, "context", "expected a context >= 1, got %d", context);
    np_dataset *ds = ds_alloc(kind, context, seed);
    if (!ds)
        return np_error_set(err, NP_ERR_NOMEM, NULL, "data", "out of memory");
    if (kind == NP_DATA_POINTS)
        ds->n_classes = 3;
    else if (kind == NP_DATA_IMAGES)
        ds->n_classes = 4;
    else
        set_vocab(ds, ARITH_VOCAB, (int)strlen(ARITH_VOCAB));
    *out = ds;
    return NP_OK;
}

np_status np_data_open_text(np_dataset **out, const char *path, int context, uint64_t seed,
                            np_error *err)
{
    *out = NULL;
    const char *why = NULL;
    FILE *f = np_fopen_regular(path, &why);
    if (!f)
        return np_error_set(err, NP_ERR_IO, path, NULL, "cannot open the text file for --data: %s",
                            why);
    unsigned char *bytes = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 65536;
            unsigned char *nb = realloc(bytes, cap);
            if (!nb) {
                free(bytes);
                fclose(f);
                return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory reading the file");
            }
            bytes = nb;
        }
        size_t got = fread(bytes + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(bytes);
        return np_error_set(err, NP_ERR_IO, path, NULL, "read error");
    }
    if (context < 1 || len < (size_t)context + 2) {
        free(bytes);
        return np_error_set(err, NP_ERR_FORMAT, path, NULL,
                            "expected more than %d bytes (context + 1), the file has %zu",
                            context + 1, len);
    }
    np_dataset *ds = ds_alloc(NP_DATA_TEXT, context, seed);
    int64_t *text = malloc(len * sizeof *text);
    if (!ds || !text) {
        free(ds);
        free(text);
        free(bytes);
        return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    }
    int seen[256] = {0};
    for (size_t i = 0; i < len; i++)
        seen[bytes[i]] = 1;
    char chars[256];
    int n = 0;
    for (int c = 0; c < 256; c++)
        if (seen[c])
            chars[n++] = (char)c;
    set_vocab(ds, chars, n);
    for (size_t i = 0; i < len; i++)
        text[i] = ds->tok_of[bytes[i]];
    np_sha256_hex(ds->file_sha, bytes, len);
    free(bytes);
    ds->text = text;
    ds->text_len = (int64_t)len;
    *out = ds;
    return NP_OK;
}

void np_data_free(np_dataset *ds)
{
    if (!ds)
        return;
    free(ds->text);
    free(ds);
}

np_data_kind np_data_kind_of(const np_dataset *ds) { return ds->kind; }
int np_data_n_classes(const np_dataset *ds) { return ds->n_classes; }
uint64_t np_data_draws(const np_dataset *ds) { return ds->draws; }
const char *np_data_file_sha256(const np_dataset *ds) { return ds->file_sha; }

const char *np_data_vocab(const np_dataset *ds)
{
    return ds->kind == NP_DATA_ARITH || ds->kind == NP_DATA_TEXT ? ds->vocab : NULL;
}

int np_data_feature_dim(const np_dataset *ds)
{
    return ds->kind == NP_DATA_POINTS ? 2 : ds->kind == NP_DATA_IMAGES ? IMG_SIDE : 0;
}

/* ---- generators --------------------------------------------------------- */

/* Class c: a ring of radius c + 1 with radial noise (std 0.15). */
static void gen_point(np_dataset *ds, float *x, int64_t *y)
{
    int c = (int)gen_below(ds, 3);
    double th = 6.283185307179586 * gen_uniform(ds);
    double r = (double)(c + 1) + 0.15 * gen_normal(ds);
    x[0] = (float)(r * cos(th));
    x[1] = (float)(r * sin(th));
    *y = c;
}

/* Class 0: a horizontal bar, 1: a vertical bar, 2: a diagonal, 3: a hollow
 * box, each of random length/place, on noise of std 0.1. x is (16,16). */
static void gen_image(np_dataset *ds, float *x, int64_t *y)
{
    const int S = IMG_SIDE;
    int c = (int)gen_below(ds, 4);
    for (int i = 0; i < S * S; i++)
        x[i] = (float)(0.1 * gen_normal(ds));
    int len = 6 + (int)gen_below(ds, 7);            /* 6..12 */
    int r0 = (int)gen_below(ds, (uint64_t)(S - len + 1));
    int c0 = (int)gen_below(ds, (uint64_t)(S - len + 1));
    int at = (int)gen_below(ds, (uint64_t)S);
    for (int k = 0; k < len; k++) {
        switch (c) {
        case 0: x[at * S + c0 + k] += 1.0f; break;
        case 1: x[(r0 + k) * S + at] += 1.0f; break;
        case 2: x[(r0 + k) * S + c0 + k] += 1.0f; break;
        default: {
            int side = len / 2 + 2;                 /* 5..8 */
            if (k < side) {
                x[r0 * S + c0 + k] += 1.0f;
                x[(r0 + side - 1) * S + c0 + k] += 1.0f;
                if (k > 0 && k < side - 1) {
                    x[(r0 + k) * S + c0] += 1.0f;
                    x[(r0 + k) * S + c0 + side - 1] += 1.0f;
                }
            }
        }
        }
    }
    *y = c;
}

/* T+1 tokens of the sum language, starting at a random place in a line. */
static void gen_arith(np_dataset *ds, int64_t *toks, int n)
{
    char line[16];
    int skip = (int)gen_below(ds, 7);
    int have = 0;
    while (have < n) {
        int a = (int)gen_below(ds, 10), b = (int)gen_below(ds, 10);
        int len = snprintf(line, sizeof line, "%d+%d=%d;", a, b, a + b);
        for (int i = 0; i < len && have < n; i++) {
            if (skip > 0) {
                skip--;
                continue;
            }
            toks[have++] = ds->tok_of[(unsigned char)line[i]];
        }
    }
}

static np_status batch_alloc(np_batch *b, const np_dataset *ds, int batch, np_error *err)
{
    memset(b, 0, sizeof *b);
    if (ds->kind == NP_DATA_POINTS) {
        b->x_ndim = 2; b->x_shape[0] = batch; b->x_shape[1] = 2;
    } else if (ds->kind == NP_DATA_IMAGES) {
        b->x_ndim = 4; b->x_shape[0] = batch; b->x_shape[1] = 1;
        b->x_shape[2] = IMG_SIDE; b->x_shape[3] = IMG_SIDE;
    } else {
        b->x_is_int = 1;
        b->x_ndim = 2; b->x_shape[0] = batch; b->x_shape[1] = ds->context;
    }
    b->x_numel = 1;
    for (int i = 0; i < b->x_ndim; i++)
        b->x_numel *= b->x_shape[i];
    if (b->x_is_int) {
        b->y_ndim = 2; b->y_shape[0] = batch; b->y_shape[1] = ds->context;
        b->y_numel = b->x_numel;
        b->xi = malloc((size_t)b->x_numel * sizeof *b->xi);
    } else {
        b->y_ndim = 1; b->y_shape[0] = batch;
        b->y_numel = batch;
        b->xf = malloc((size_t)b->x_numel * sizeof *b->xf);
    }
    b->y = malloc((size_t)b->y_numel * sizeof *b->y);
    if ((!b->xi && !b->xf) || !b->y) {
        np_batch_free(b);
        return np_error_set(err, NP_ERR_NOMEM, NULL, "batch", "out of memory");
    }
    return NP_OK;
}

np_status np_data_get_batch(np_batch *b, np_dataset *ds, int64_t index, int batch,
                            np_error *err)
{
    if (batch < 1)
        return np_error_set(err, NP_ERR_ARG, NULL, "batch", "expected a batch size >= 1, got %d", batch);
    if (!b->y) {
        np_status st = batch_alloc(b, ds, batch, err);
        if (st)
            return st;
    } else if (b->x_shape[0] != batch) {
        return np_error_set(err, NP_ERR_ARG, NULL, "batch",
                            "batch size changed from %lld to %d", (long long)b->x_shape[0], batch);
    }
    gen_start(ds, index);
    int T = ds->context;
    int64_t *tmp = NULL;
    if (ds->kind == NP_DATA_ARITH) {
        tmp = malloc((size_t)(T + 1) * sizeof *tmp);
        if (!tmp)
            return np_error_set(err, NP_ERR_NOMEM, NULL, "batch", "out of memory");
    }
    for (int i = 0; i < batch; i++) {
        switch (ds->kind) {
        case NP_DATA_POINTS:
            gen_point(ds, b->xf + 2 * i, b->y + i);
            break;
        case NP_DATA_IMAGES:
            gen_image(ds, b->xf + (int64_t)i * IMG_SIDE * IMG_SIDE, b->y + i);
            break;
        case NP_DATA_ARITH:
            gen_arith(ds, tmp, T + 1);
            memcpy(b->xi + (int64_t)i * T, tmp, (size_t)T * sizeof *tmp);
            memcpy(b->y + (int64_t)i * T, tmp + 1, (size_t)T * sizeof *tmp);
            break;
        default: {
            int64_t off = (int64_t)gen_below(ds, (uint64_t)(ds->text_len - T));
            memcpy(b->xi + (int64_t)i * T, ds->text + off, (size_t)T * sizeof *tmp);
            memcpy(b->y + (int64_t)i * T, ds->text + off + 1, (size_t)T * sizeof *tmp);
        }
        }
    }
    free(tmp);
    return NP_OK;
}

void np_batch_free(np_batch *b)
{
    if (!b)
        return;
    free(b->xf);
    free(b->xi);
    free(b->y);
    memset(b, 0, sizeof *b);
}

void np_data_batch_sha256(const np_batch *b, char hex[65])
{
    np_sha256 c;
    uint8_t d[32];
    np_sha256_init(&c);
    if (b->x_is_int)
        np_sha256_update(&c, b->xi, (size_t)b->x_numel * sizeof *b->xi);
    else
        np_sha256_update(&c, b->xf, (size_t)b->x_numel * sizeof *b->xf);
    np_sha256_update(&c, b->y, (size_t)b->y_numel * sizeof *b->y);
    np_sha256_final(&c, d);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

np_status np_batch_to_tensors(np_tensor **x, np_tensor **y, np_ctx *ctx, const np_batch *b,
                              np_error *err)
{
    *x = np_tensor_tmp(ctx, b->x_is_int ? NP_INT64 : NP_FLOAT32, b->x_ndim, b->x_shape);
    *y = np_tensor_tmp(ctx, NP_INT64, b->y_ndim, b->y_shape);
    if (!*x || !*y)
        return np_error_set(err, np_ctx_status(ctx) ? np_ctx_status(ctx) : NP_ERR_NOMEM,
                            NULL, "batch", "cannot allocate the batch tensors");
    np_status st = b->x_is_int ? np_tensor_copy_i64(*x, b->xi, b->x_numel, err)
                               : np_tensor_copy_f32(*x, b->xf, b->x_numel, err);
    if (!st)
        st = np_tensor_copy_i64(*y, b->y, b->y_numel, err);
    return st;
}
