/* runtime/model_train_internal.h - the trainer struct, shared by
 * model_train.c and checkpoint.c. Private to runtime/. */
#ifndef NPROBE_RUNTIME_MODEL_TRAIN_INTERNAL_H
#define NPROBE_RUNTIME_MODEL_TRAIN_INTERNAL_H

#include "nprobe/model.h"

struct np_trainer {
    np_ctx *ctx;              /* borrowed */
    np_train_opts opts;       /* model.vocab_size etc. as built */
    np_dataset *data;
    np_model *model;
    np_optim *optim;
    np_scaler scaler;
    np_batch batch;           /* host buffers, reused each step */
    int64_t step;             /* next step to run */
};

#endif
