/* ckpt/checkpoint_read.c - the reading side of the checkpoint format
 * (docs/CONTRACTS.md "Checkpoint file"): the root attributes, the model
 * settings and their agreement with the /params datasets. np_ckpt is the
 * small library config_check links for np_checkpoint_check_settings; the
 * trainer's save and load (runtime/checkpoint.c) use it too. */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_internal.h"
#include "nprobe/format.h"

/* ---- model configuration as attributes ---------------------------------- */

typedef struct cfg_field {
    const char *name;
    size_t off;
} cfg_field;

#define CF(f) {#f, offsetof(np_model_config, f)}
static const cfg_field cfg_fields[] = {
    CF(in_dim), CF(hidden), CF(image_size), CF(channels), CF(n_classes),
    CF(n_layer), CF(n_head), CF(n_embd), CF(block_size), CF(vocab_size),
};
#undef CF
#define N_CFG ((int)(sizeof cfg_fields / sizeof cfg_fields[0]))

int np_ckpt_setting_get(const np_model_config *c, int i)
{
    return *(const int *)(const void *)((const char *)c + cfg_fields[i].off);
}

static void cfg_set(np_model_config *c, int i, int v)
{
    *(int *)(void *)((char *)c + cfg_fields[i].off) = v;
}

int np_ckpt_n_settings(void)
{
    return N_CFG;
}

const char *np_ckpt_setting_name(int i)
{
    return cfg_fields[i].name;
}

/* ---- open and read -------------------------------------------------------- */

np_status np_ckpt_open(hid_t *out, const char *path, np_error *err)
{
    const char *why = NULL;
    *out = np_h5_fopen_read(path, 0, &why);
    if (*out < 0)
        return np_error_set(err, NP_ERR_IO, path, NULL, "cannot open%s%s", why ? ": " : " ",
                            why ? why : "as an HDF5 checkpoint");
    char fmt[64];
    int64_t ver = 0;
    int rf = np_h5_attr_get_str(*out, "format", fmt, sizeof fmt);
    int rv = rf ? 0 : np_h5_attr_get_i64(*out, "format_version", &ver);
    np_status st = NP_OK;
    if (rf && rf != NP_H5_ATTR_ABSENT)
        st = np_error_set(err, NP_ERR_FORMAT, path, "format",
                          "root attribute format %s (expected the string \"%s\")",
                          np_h5_attr_problem(rf), CKPT_FORMAT);
    else if (rv && rv != NP_H5_ATTR_ABSENT)
        st = np_error_set(err, NP_ERR_FORMAT, path, "format_version",
                          "root attribute format_version %s (expected the integer %d)",
                          np_h5_attr_problem(rv), CKPT_VERSION);
    else if (rf || strcmp(fmt, CKPT_FORMAT) != 0 || rv || ver != CKPT_VERSION)
        st = np_error_set(err, NP_ERR_FORMAT, path, "format",
                          "expected an %s file of format_version %d", CKPT_FORMAT, CKPT_VERSION);
    if (st) {
        H5Fclose(*out);
        *out = -1;
    }
    return st;
}

/* ---- the settings agree with the datasets in the file ------------------ */

/* A parameter dataset the settings imply: each dimension is mul x the
 * setting `sym` names (E n_embd, V vocab_size, T block_size, H hidden,
 * I in_dim, K n_classes, C channels, F the cnn's fc inputs 2 x channels x
 * (image_size / 4)^2, 1 the constant). np_model_config_check bounds them
 * all to int32, so no product here overflows. */
typedef struct param_dim {
    char sym;
    int mul;
} param_dim;

typedef struct param_want {
    const char *name;   /* under /params; a gpt block's names follow "h.{i}." */
    int nd;
    param_dim dim[4];
} param_want;

static const param_want gpt_top[] = {
    {"wte.weight", 2, {{'V', 1}, {'E', 1}}}, {"wpe.weight", 2, {{'T', 1}, {'E', 1}}},
    {"ln_f.weight", 1, {{'E', 1}}},          {"ln_f.bias", 1, {{'E', 1}}},
};
static const param_want gpt_block[] = {
    {"attn.c_attn.weight", 2, {{'E', 3}, {'E', 1}}}, {"attn.c_attn.bias", 1, {{'E', 3}}},
    {"attn.c_proj.weight", 2, {{'E', 1}, {'E', 1}}}, {"attn.c_proj.bias", 1, {{'E', 1}}},
    {"ln_1.weight", 1, {{'E', 1}}},                  {"ln_1.bias", 1, {{'E', 1}}},
    {"ln_2.weight", 1, {{'E', 1}}},                  {"ln_2.bias", 1, {{'E', 1}}},
    {"mlp.c_fc.weight", 2, {{'E', 4}, {'E', 1}}},    {"mlp.c_fc.bias", 1, {{'E', 4}}},
    {"mlp.c_proj.weight", 2, {{'E', 1}, {'E', 4}}},  {"mlp.c_proj.bias", 1, {{'E', 1}}},
};
static const param_want mlp_params[] = {
    {"fc1.weight", 2, {{'H', 1}, {'I', 1}}}, {"fc1.bias", 1, {{'H', 1}}},
    {"fc2.weight", 2, {{'H', 1}, {'H', 1}}}, {"fc2.bias", 1, {{'H', 1}}},
    {"fc3.weight", 2, {{'K', 1}, {'H', 1}}}, {"fc3.bias", 1, {{'K', 1}}},
};
static const param_want cnn_params[] = {
    {"conv1.weight", 4, {{'C', 1}, {'1', 1}, {'1', 3}, {'1', 3}}}, {"conv1.bias", 1, {{'C', 1}}},
    {"conv2.weight", 4, {{'C', 2}, {'C', 1}, {'1', 3}, {'1', 3}}}, {"conv2.bias", 1, {{'C', 2}}},
    {"fc.weight", 2, {{'K', 1}, {'F', 1}}},                         {"fc.bias", 1, {{'K', 1}}},
};
#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* The value and the attribute name of setting `sym`. */
static int64_t sym_value(const np_model_config *c, char sym, const char **attr)
{
    int64_t s = c->image_size / 4;
    switch (sym) {
    case 'E': *attr = "n_embd"; return c->n_embd;
    case 'V': *attr = "vocab_size"; return c->vocab_size;
    case 'T': *attr = "block_size"; return c->block_size;
    case 'H': *attr = "hidden"; return c->hidden;
    case 'I': *attr = "in_dim"; return c->in_dim;
    case 'K': *attr = "n_classes"; return c->n_classes;
    case 'C': *attr = "channels"; return c->channels;
    case 'F': *attr = "channels"; return 2 * (int64_t)c->channels * s * s;
    default: *attr = "model"; return 1;
    }
}

/* /params/{prefix}{w->name} exists, is float data the file holds, and has
 * the shape the settings give. */
static np_status check_param(hid_t gp, const char *prefix, const param_want *w,
                             const np_model_config *c, const char *path, np_error *err)
{
    char name[160];
    snprintf(name, sizeof name, "%s%s", prefix, w->name);
    const char *attr = w->dim[0].sym == '1' ? "model" : NULL;
    if (!attr)
        sym_value(c, w->dim[0].sym, &attr);
    if (H5Lexists(gp, name, H5P_DEFAULT) <= 0)
        return np_error_set(err, NP_ERR_FORMAT, path, attr,
                            "the model settings (root attribute %s ...) need the dataset "
                            "/params/%s, which the checkpoint does not have", attr, name);
    int problem = 0;
    hid_t ds = np_h5_open_local(gp, name, &problem);
    int64_t dims[NP_MAX_DIMS];
    int nd = 0;
    int64_t numel = 0;
    int rc = ds < 0 ? problem : np_h5_dset_extent(ds, sizeof(float), NP_MAX_DIMS, dims, &nd, &numel);
    if (ds >= 0)
        H5Dclose(ds);
    if (rc)
        return np_error_set(err, NP_ERR_FORMAT, path, name, "dataset /params/%s %s", name,
                            np_h5_dset_problem(rc));
    if (nd != w->nd)
        return np_error_set(err, NP_ERR_FORMAT, path, attr,
                            "dataset /params/%s has %d dimensions, the model settings give it %d",
                            name, nd, w->nd);
    for (int d = 0; d < nd; d++) {
        int64_t want = w->dim[d].mul * sym_value(c, w->dim[d].sym, &attr);
        if (dims[d] != want)
            return np_error_set(err, NP_ERR_FORMAT, path, attr,
                                "root attribute %s disagrees with the data: the settings give "
                                "/params/%s size %lld in dimension %d, the file has %lld",
                                attr, name, (long long)want, d, (long long)dims[d]);
    }
    return NP_OK;
}

/* The model settings read from the root attributes agree with the
 * parameter datasets actually in the file (their number, names, shapes and
 * stored bytes), so nothing is allocated for a model the file does not
 * hold: a file with n_layer or n_embd of 2^31 is refused before any model
 * is built. */
static np_status check_settings_vs_data(hid_t f, const np_model_config *c, const char *path,
                                        np_error *err)
{
    int problem = 0;
    hid_t gp = H5Lexists(f, "params", H5P_DEFAULT) > 0 ? np_h5_open_local(f, "params", &problem) : -1;
    if (gp < 0)
        return np_error_set(err, NP_ERR_FORMAT, path, "params", "%s",
                            problem == NP_H5_NOT_LOCAL ? "group /params lies outside the file "
                                                         "(an external or soft link): refused"
                                                       : "missing group /params");
    H5G_info_t info;
    np_status st = NP_OK;
    const param_want *top = c->kind == NP_MODEL_GPT ? gpt_top
                            : c->kind == NP_MODEL_MLP ? mlp_params : cnn_params;
    int n_top = c->kind == NP_MODEL_GPT ? N_OF(gpt_top) : N_OF(mlp_params);
    int64_t layers = c->kind == NP_MODEL_GPT ? c->n_layer : 0;
    int64_t want = n_top + layers * N_OF(gpt_block);
    if (H5Gget_info(gp, &info) < 0)
        st = np_error_set(err, NP_ERR_FORMAT, path, "params", "cannot list group /params");
    else if ((int64_t)info.nlinks != want)
        st = np_error_set(err, NP_ERR_FORMAT, path, layers ? "n_layer" : "model",
                          "the model settings (model %s%s%lld) give %lld parameters, /params holds %llu",
                          np_model_kind_name(c->kind), layers ? ", n_layer " : "",
                          layers ? (long long)layers : 0LL, (long long)want,
                          (unsigned long long)info.nlinks);
    for (int i = 0; i < n_top && !st; i++)
        st = check_param(gp, "", &top[i], c, path, err);
    for (int64_t l = 0; l < layers && !st; l++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "h.%lld.", (long long)l);
        for (int i = 0; i < N_OF(gpt_block) && !st; i++)
            st = check_param(gp, prefix, &gpt_block[i], c, path, err);
    }
    H5Gclose(gp);
    return st;
}

np_status np_ckpt_read_config(np_model_config *c, int64_t *step, uint64_t *seed, hid_t f,
                             const char *path, np_error *err)
{
    char kind[16], eps[32];
    int64_t v = 0;
    int rc = np_h5_attr_get_str(f, "model", kind, sizeof kind);
    if (rc || np_model_kind_from_name(kind) < 0)
        return np_error_set(err, NP_ERR_FORMAT, path, "model", "root attribute model %s: expected mlp, cnn or gpt",
                            rc ? np_h5_attr_problem(rc) : "is unknown");
    np_model_config_default(c, (np_model_kind)np_model_kind_from_name(kind));
    for (int i = 0; i < N_CFG; i++) {
        if ((rc = np_h5_attr_get_i64(f, cfg_fields[i].name, &v)) != 0)
            return np_error_set(err, NP_ERR_FORMAT, path, cfg_fields[i].name,
                                "root attribute %s %s (expected an int64)", cfg_fields[i].name,
                                np_h5_attr_problem(rc));
        if (v < 0 || v > INT32_MAX)
            return np_error_set(err, NP_ERR_FORMAT, path, cfg_fields[i].name,
                                "root attribute %s is %lld (expected 0 to %d)", cfg_fields[i].name,
                                (long long)v, INT32_MAX);
        cfg_set(c, i, (int)v);
    }
    if ((rc = np_h5_attr_get_str(f, "ln_eps", eps, sizeof eps)) != 0)
        return np_error_set(err, NP_ERR_FORMAT, path, "ln_eps",
                            "root attribute ln_eps %s (expected a string)", np_h5_attr_problem(rc));
    c->ln_eps = strtod(eps, NULL);
    if ((rc = np_h5_attr_get_i64(f, "step", step)) != 0)
        return np_error_set(err, NP_ERR_FORMAT, path, "step",
                            "root attribute step %s (expected an int64)", np_h5_attr_problem(rc));
    if (*step < 0)
        return np_error_set(err, NP_ERR_FORMAT, path, "step",
                            "root attribute step is %lld (expected >= 0)", (long long)*step);
    if ((rc = np_h5_attr_get_i64(f, "seed", &v)) != 0)
        return np_error_set(err, NP_ERR_FORMAT, path, "seed",
                            "root attribute seed %s (expected an int64)", np_h5_attr_problem(rc));
    *seed = (uint64_t)v;
    np_error bad;
    np_error_clear(&bad);
    if (np_model_config_check(c, &bad) != NP_OK) {
        /* the check names the command-line option; the file has the attribute */
        static const char *const opt_attr[][2] = {
            {"layers", "n_layer"}, {"heads", "n_head"}, {"width", "n_embd"}, {"context", "block_size"}};
        const char *key = bad.key;
        for (size_t i = 0; i < sizeof opt_attr / sizeof opt_attr[0]; i++)
            if (strcmp(key, opt_attr[i][0]) == 0)
                key = opt_attr[i][1];
        return np_error_set(err, NP_ERR_FORMAT, path, key, "root attribute %s: %s", key, bad.text);
    }
    return check_settings_vs_data(f, c, path, err);
}

np_status np_checkpoint_read_config(np_model_config *c, int64_t *step, uint64_t *seed,
                                    const char *path, np_error *err)
{
    H5E_auto2_t old_fn;
    void *old_data;
    H5Eget_auto2(H5E_DEFAULT, &old_fn, &old_data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = -1;
    np_status st = np_ckpt_open(&f, path, err);
    if (!st)
        st = np_ckpt_read_config(c, step, seed, f, path, err);
    if (f >= 0)
        H5Fclose(f);
    H5Eset_auto2(H5E_DEFAULT, old_fn, old_data);
    return st;
}

np_status np_checkpoint_check_settings(const char *path, np_error *err)
{
    np_h5_quiet_state q;
    np_h5_quiet(&q);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl >= 0)
        H5Pset_file_locking(fapl, 0, 1); /* another process may hold the file */
    const char *why = NULL;
    hid_t f = np_h5_fopen_read(path, fapl >= 0 ? fapl : 0, &why);
    if (fapl >= 0)
        H5Pclose(fapl);
    int states = 0;
    for (int i = 0; i < N_CFG && f >= 0 && !states; i++)
        states = H5Aexists(f, cfg_fields[i].name) > 0;
    if (f >= 0)
        H5Fclose(f);
    np_h5_unquiet(&q);
    if (!states)
        return NP_OK; /* not an HDF5 file or no settings: the reader says what it finds */
    np_model_config c;
    int64_t step = 0;
    uint64_t seed = 0;
    return np_checkpoint_read_config(&c, &step, &seed, path, err);
}
