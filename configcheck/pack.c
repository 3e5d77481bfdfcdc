/* configcheck/pack.c - build a pack: collect every member as JSON (keys
 * sorted, so equal inputs give equal bytes), then write the zip with libzip
 * (which writes a temporary file and renames it on close). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zip.h>

#include "cc_internal.h"

#define JSON_FLAGS (JSON_SORT_KEYS | JSON_INDENT(2) | JSON_ENSURE_ASCII)

typedef struct builder {
    json_t *docs[NP_CC_ITEM_COUNT]; /* NULL for pip (text) */
    char *pip;
    json_t *collected;               /* manifest "collected" */
} builder;

static np_status nomem(np_error *err, const char *what)
{
    return np_error_set(err, NP_ERR_NOMEM, NULL, what, "out of memory");
}

static np_status collect_run(builder *b, const np_run_info *run, np_error *err)
{
    for (int i = 0; i < run->n_hyperparams; i++)
        if (!run->hyperparams[i].key || !run->hyperparams[i].value ||
            json_object_set_new(b->docs[NP_CC_HYPERPARAMS], run->hyperparams[i].key,
                                json_string(run->hyperparams[i].value)))
            return np_error_set(err, NP_ERR_ARG, NULL, "hyperparams",
                                "run hyperparameter %d: expected a UTF-8 key and value", i);
    for (int i = 0; i < run->n_libs; i++)
        if (!run->libs[i].key || !run->libs[i].value ||
            json_object_set_new(b->docs[NP_CC_LIBS], run->libs[i].key,
                                json_string(run->libs[i].value)))
            return np_error_set(err, NP_ERR_ARG, NULL, "libs",
                                "run library %d: expected a UTF-8 name and version", i);
    for (int i = 0; i < run->n_random; i++)
        if (!run->random[i].key || !run->random[i].value ||
            json_object_set_new(b->docs[NP_CC_RANDOM], run->random[i].key,
                                json_string(run->random[i].value)))
            return np_error_set(err, NP_ERR_ARG, NULL, "random",
                                "run random entry %d: expected a UTF-8 key and value", i);
    json_t *params = json_object_get(b->docs[NP_CC_WEIGHTS], "params");
    np_status st = np_cc_weights_tensors(params, run->weights, run->n_weights, err);
    if (st != NP_OK)
        return st;
    json_t *batches = json_object_get(b->docs[NP_CC_DATASET], "batches");
    for (int i = 0; i < run->n_batches; i++) {
        char key[32];
        snprintf(key, sizeof key, "batch.%04d", i);
        if (!run->batch_hashes[i] ||
            json_object_set_new(batches, key, json_string(run->batch_hashes[i])))
            return np_error_set(err, NP_ERR_ARG, NULL, "batch_hashes",
                                "run batch hash %d: expected a string", i);
    }
    json_t *files = json_object_get(b->docs[NP_CC_DATASET], "files");
    for (int i = 0; i < run->n_data_files && st == NP_OK; i++)
        st = run->data_files[i] ? np_cc_dataset_add(files, run->data_files[i], err)
                                : np_error_set(err, NP_ERR_ARG, NULL, "data_files",
                                               "run data file %d is NULL", i);
    if (st == NP_OK && run->n_weights)
        json_object_set_new(b->collected, "weights", json_string("runtime (initial parameters)"));
    if (st == NP_OK && run->n_hyperparams)
        json_object_set_new(b->collected, "hyperparameters", json_string("runtime options"));
    return st;
}

static np_status collect_opts(builder *b, const np_cc_pack_opts *o, np_error *err)
{
    np_status st = NP_OK;
    json_t *params = json_object_get(b->docs[NP_CC_WEIGHTS], "params");
    if (o->weights_path && o->dump_path)
        return np_error_set(err, NP_ERR_ARG, NULL, "weights",
                            "give either a checkpoint or a dump, not both");
    if (o->weights_path) {
        st = np_cc_weights_checkpoint(params, o->weights_path, err);
        if (st != NP_OK)
            return st;
        json_object_set_new(b->docs[NP_CC_WEIGHTS], "source", json_string("checkpoint"));
        json_object_set_new(b->collected, "weights", json_string(o->weights_path));
    } else if (o->dump_path) {
        char *used = NULL;
        st = np_cc_weights_dump(params, &used, o->dump_path, err);
        if (st != NP_OK)
            return st;
        json_object_set_new(b->docs[NP_CC_WEIGHTS], "source", json_string("dump"));
        json_object_set_new(b->collected, "weights", json_string(used));
        free(used);
    }
    json_t *files = json_object_get(b->docs[NP_CC_DATASET], "files");
    for (int i = 0; i < o->n_datasets && st == NP_OK; i++)
        st = np_cc_dataset_add(files, o->datasets[i], err);
    if (st != NP_OK)
        return st;
    if (o->hyperparams_path) {
        json_t *h = NULL;
        st = np_cc_hyperparams_file(&h, o->hyperparams_path, err);
        if (st != NP_OK)
            return st;
        json_object_update(b->docs[NP_CC_HYPERPARAMS], h);
        json_decref(h);
        json_object_set_new(b->collected, "hyperparameters", json_string(o->hyperparams_path));
    }
    if (o->has_seed) {
        char v[32];
        snprintf(v, sizeof v, "%lld", o->seed);
        json_object_set_new(b->docs[NP_CC_RANDOM], "seed", json_string(v));
    }
    return NP_OK;
}

static json_t *manifest(const builder *b, const char *source)
{
    char host[256] = "unknown", when[64] = "unknown";
    if (gethostname(host, sizeof host - 1) != 0)
        snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = '\0';
    for (char *c = host; *c; c++)
        if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
            *c = '?';
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm))
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_t *members = json_array();
    json_array_append_new(members, json_string("manifest.json"));
    for (int i = 0; i < NP_CC_ITEM_COUNT; i++)
        if (b->docs[i] || (i == NP_CC_PIP && b->pip))
            json_array_append_new(members, json_string(np_cc_member_names[i]));
    json_t *m = json_pack("{s:s, s:i, s:s, s:s, s:s, s:s, s:o, s:O}", "format", NP_CC_FORMAT,
                          "format_version", NP_CC_FORMAT_VERSION, "nprobe_version",
                          NP_VERSION_STRING, "host", host, "time", when, "source", source,
                          "members", members, "collected", b->collected);
    return m;
}

static np_status add_member(zip_t *za, const char *name, char *data, size_t len,
                            const char *zip_path, np_error *err)
{
    zip_source_t *src = zip_source_buffer(za, data, len, 1);
    if (!src) {
        free(data);
        return np_error_set(err, NP_ERR_ZIP, zip_path, name, "%s", zip_strerror(za));
    }
    zip_int64_t idx = zip_file_add(za, name, src, ZIP_FL_ENC_UTF_8 | ZIP_FL_OVERWRITE);
    if (idx < 0) {
        zip_source_free(src);
        return np_error_set(err, NP_ERR_ZIP, zip_path, name, "%s", zip_strerror(za));
    }
    /* a regular file, rw-r--r--: libzip's default 0666 unpacks world-writable */
    if (zip_file_set_external_attributes(za, (zip_uint64_t)idx, 0, ZIP_OPSYS_UNIX,
                                         (zip_uint32_t)0100644 << 16) < 0)
        return np_error_set(err, NP_ERR_ZIP, zip_path, name, "%s", zip_strerror(za));
    return NP_OK;
}

static np_status write_zip_to(const builder *b, json_t *man, const char *tmp,
                              const char *zip_path, np_error *err)
{
    int zerr = 0;
    zip_t *za = zip_open(tmp, ZIP_CREATE | ZIP_TRUNCATE, &zerr);
    if (!za) {
        zip_error_t ze;
        zip_error_init_with_code(&ze, zerr);
        np_status st = np_error_set(err, NP_ERR_IO, zip_path, NULL, "cannot create the pack: %s",
                                    zip_error_strerror(&ze));
        zip_error_fini(&ze);
        return st;
    }
    np_status st = NP_OK;
    for (int i = -1; i < NP_CC_ITEM_COUNT && st == NP_OK; i++) {
        const char *name = i < 0 ? "manifest.json" : np_cc_member_names[i];
        char *data;
        if (i == NP_CC_PIP)
            data = b->pip ? strdup(b->pip) : NULL;
        else if (i < 0 || b->docs[i])
            data = json_dumps(i < 0 ? man : b->docs[i], JSON_FLAGS);
        else
            continue;
        if (i == NP_CC_PIP && !b->pip)
            continue;
        if (!data) {
            st = nomem(err, name);
            break;
        }
        size_t len = strlen(data);
        if (i != NP_CC_PIP) { /* end the JSON with a newline */
            char *d2 = realloc(data, len + 2);
            if (!d2) {
                free(data);
                st = nomem(err, name);
                break;
            }
            data = d2;
            data[len++] = '\n';
            data[len] = '\0';
        }
        st = add_member(za, name, data, len, zip_path, err);
    }
    if (st != NP_OK) {
        zip_discard(za);
        return st;
    }
    if (zip_close(za) < 0) {
        st = np_error_set(err, NP_ERR_IO, zip_path, NULL, "cannot write the pack: %s",
                          zip_strerror(za));
        zip_discard(za);
    }
    return st;
}

/* The pack is written under a unique temporary name beside zip_path and
 * renamed when complete (common/outfile.c). */
static np_status write_zip(const builder *b, json_t *man, const char *zip_path, np_error *err)
{
    np_out out;
    np_status st = np_out_begin(&out, zip_path, NULL, err);
    if (st != NP_OK)
        return st;
    st = write_zip_to(b, man, out.tmp, zip_path, err);
    if (st != NP_OK) {
        np_out_abort(&out);
        return st;
    }
    return np_out_commit(&out, 0, err);
}

np_status np_cc_pack_ex(const char *zip_path, const np_cc_pack_opts *opts,
                        const np_run_info *run, np_error *err)
{
    if (!zip_path || !*zip_path)
        return np_error_set(err, NP_ERR_ARG, NULL, NULL, "no output path for the pack");
    builder b;
    memset(&b, 0, sizeof b);
    np_status st = NP_OK;
    json_t *man = NULL;
    b.collected = json_object();
    b.docs[NP_CC_ENV] = np_cc_collect_env();
    b.docs[NP_CC_LIBS] = np_cc_collect_libs();
    b.docs[NP_CC_RANDOM] = json_object();
    b.docs[NP_CC_WEIGHTS] = json_pack("{s:s, s:{}}", "source", run ? "runtime" : "none", "params");
    b.docs[NP_CC_DATASET] = json_pack("{s:{}, s:{}}", "files", "batches");
    b.docs[NP_CC_HYPERPARAMS] = json_object();
    for (int i = 0; i < NP_CC_ITEM_COUNT; i++)
        if (i != NP_CC_PIP && !b.docs[i]) {
            st = nomem(err, np_cc_member_names[i]);
            goto done;
        }
    if (!b.collected) {
        st = nomem(err, "manifest.json");
        goto done;
    }
    if (run && (st = collect_run(&b, run, err)) != NP_OK)
        goto done;
    if (opts && (st = collect_opts(&b, opts, err)) != NP_OK)
        goto done;
    const char *python = opts ? opts->python : NULL;
    if (python && !*python) {
        json_object_set_new(b.collected, "pip", json_string("not requested"));
    } else {
        np_error perr;
        np_error_clear(&perr);
        if (np_cc_collect_pip(&b.pip, python, opts ? opts->python_timeout_s : 0, &perr) == NP_OK)
            json_object_set_new(b.collected, "pip", json_string(python ? python : "python3"));
        else
            json_object_set_new(b.collected, "pip", json_string(perr.text));
    }
    json_object_set_new(b.collected, "env", json_true());
    json_object_set_new(b.collected, "libs", json_true());
    json_object_set_new(b.collected, "random", json_integer((json_int_t)json_object_size(b.docs[NP_CC_RANDOM])));
    json_object_set_new(b.collected, "dataset_files",
                        json_integer((json_int_t)json_object_size(
                            json_object_get(b.docs[NP_CC_DATASET], "files"))));
    json_object_set_new(b.collected, "dataset_batches",
                        json_integer((json_int_t)json_object_size(
                            json_object_get(b.docs[NP_CC_DATASET], "batches"))));
    json_object_set_new(b.collected, "weights_params",
                        json_integer((json_int_t)json_object_size(
                            json_object_get(b.docs[NP_CC_WEIGHTS], "params"))));
    man = manifest(&b, run ? "runtime" : "cli");
    if (!man) {
        st = nomem(err, "manifest.json");
        goto done;
    }
    st = write_zip(&b, man, zip_path, err);
done:
    json_decref(man);
    json_decref(b.collected);
    for (int i = 0; i < NP_CC_ITEM_COUNT; i++)
        json_decref(b.docs[i]);
    free(b.pip);
    return st;
}

np_status np_cc_pack(const char *zip_path, const np_cc_pack_opts *opts, np_error *err)
{
    np_cc_pack_opts none;
    memset(&none, 0, sizeof none);
    return np_cc_pack_ex(zip_path, opts ? opts : &none, NULL, err);
}

np_status np_cc_pack_run(const char *zip_path, const np_run_info *run, np_error *err)
{
    if (!run)
        return np_error_set(err, NP_ERR_ARG, zip_path, NULL, "no run information");
    return np_cc_pack_ex(zip_path, NULL, run, err);
}
