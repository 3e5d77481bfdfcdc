/* nprobe/configcheck.h - environment packs (zip) and their diff.
 * (Contract part fixed up front; the rest is added by the config_check issue.) */
#ifndef NPROBE_CONFIGCHECK_H
#define NPROBE_CONFIGCHECK_H

#include "nprobe/common.h"
#include "nprobe/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct np_kv {
    const char *key;
    const char *value;
} np_kv;

typedef struct np_named_tensor {
    const char *name;         /* GPT-2 style parameter name */
    const np_tensor *t;
} np_named_tensor;

/* What a training run knows about itself, for `nprobe train
 * --config-check-out PACK.zip`. Everything is borrowed for the call. */
typedef struct np_run_info {
    const np_kv *hyperparams;  int n_hyperparams;  /* "lr"="0.001", "model"="gpt", ... */
    const np_kv *random;       int n_random;       /* "seed"="42", "rng.init.draws"="1234", ... */
    const np_named_tensor *weights; int n_weights; /* initial parameters */
    const char *const *batch_hashes; int n_batches; /* hex SHA-256 of the first batches */
    const char *const *data_files;   int n_data_files; /* files the run read (--data) */
} np_run_info;

/* Write a complete pack for a run of the runtime to `zip_path`. */
np_status np_cc_pack_run(const char *zip_path, const np_run_info *run, np_error *err);

#ifdef __cplusplus
}
#endif
#endif
