/* ckpt/ckpt_internal.h - what the trainer's checkpoint save and load
 * (runtime/checkpoint.c) share with the reader of np_ckpt
 * (ckpt/checkpoint_read.c): the format's name and version, the model
 * settings stored as root attributes, opening a file and reading its
 * settings. Private to np_ckpt and np_runtime. */
#ifndef NPROBE_CKPT_INTERNAL_H
#define NPROBE_CKPT_INTERNAL_H

#include <hdf5.h>
#include <stdint.h>

#include "nprobe/model.h"

#define CKPT_FORMAT "nprobe-checkpoint"
#define CKPT_VERSION 1

/* The model settings stored as int64 root attributes: how many, the
 * attribute name of the i-th, its value in c. */
int np_ckpt_n_settings(void);
const char *np_ckpt_setting_name(int i);
int np_ckpt_setting_get(const np_model_config *c, int i);

/* Open path read-only and check its format attributes; *out the file, or
 * -1 with err set (NP_ERR_IO, NP_ERR_FORMAT). */
np_status np_ckpt_open(hid_t *out, const char *path, np_error *err);
/* The model settings, step and seed of an open checkpoint, checked
 * (np_model_config_check) and against the /params datasets. */
np_status np_ckpt_read_config(np_model_config *c, int64_t *step, uint64_t *seed, hid_t f,
                              const char *path, np_error *err);

#endif
