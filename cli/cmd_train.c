/* cli/cmd_train.c - `nprobe train`: train the runtime's MLP, CNN or GPT on
 * cpu or npu-sim, printing one line per step; optionally with the probe
 * attached (--dump-config / NPROBE_DUMP_CONFIG), a config_check pack of the
 * run (--config-check-out) and checkpoints (--save / --load). */
#include <math.h>
#include <stddef.h>
#include <omp.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd.h"
#include "opts.h"
#include "nprobe/configcheck.h"
#include "nprobe/fault_slow.h"
#include "nprobe/fault_step.h"
#include "nprobe/model.h"
#include "nprobe/monitor.h"
#include "nprobe/precision.h"
#include "nprobe/runtime.h"

#define N_HASHED_BATCHES 4

typedef struct train_args {
    const char *model, *device, *precision, *fault, *optim, *lowp_grad;
    const char *data, *save, *load, *dump_config, *cc_out, *monitor_config, *profile;
    long steps, seed, threads, batch, log_every, warmup, stop_after;
    long layers, heads, width, context, moe;
    long fault_step, fault_rank;
    long tp, pp, micro_batches;
    double lr, grad_clip;
    int list_faults, load_other_precision, sp, lowp_backward, vocab_parallel;
} train_args;

static const char help_before[] =
    "usage: nprobe train [--model mlp|cnn|gpt] [options]\n"
    "\n"
    "Train one of the runtime's models on generated data (or a text file) and\n"
    "print 'step S loss L lr X  N tok/s' (samples/s for mlp/cnn) per step.\n";

static const char help_after[] =
    "\n"
    "data parallel (docs/RUNTIME.md, \"Distributed\"):\n"
    "  mpirun -n K nprobe train ...   K ranks train one model, each on B/K rows of\n"
    "                        every global batch B (a multiple of K), gradients\n"
    "                        averaged in rank order before the update; rank 0 prints,\n"
    "                        dumps go to rank{R}/ (needs a build with MPI)\n"
    "\n"
    "exit codes: 0 run completed, 1 the loss became non-finite on the cpu fp32\n"
    "reference, 2 usage or input error\n";

static int bad_fault(const char *o, const char *v);

static const char *const models[] = {"mlp", "cnn", "gpt"};
static const char *const devices[] = {"cpu", "npu-sim"};
static const char *const precs[] = {"fp32", "bf16", "fp16", "mxfp8", "hif8"};
static const char *const grad_fmts[] = {"e4m3", "e5m2"};
static const char *const optims[] = {"adamw", "sgd"};

#define F(f) offsetof(train_args, f)
#define CHOICE(f, list) NP_OPT_CHOICE, F(f), 0, 0, list, (int)(sizeof list / sizeof list[0]), NULL
#define LONG(f, lo, hi) NP_OPT_LONG, F(f), lo, hi, NULL, 0, NULL
#define DBL(f) NP_OPT_DOUBLE, F(f), 0, 0, NULL, 0, NULL
#define STR(f) NP_OPT_STR, F(f), 0, 0, NULL, 0, NULL
/* `nprobe train`'s options: parsing and --help from this one table (cli/opts.h). */
static const np_cli_opt train_opts_table[] = {
    {"model and data:", "--model", "NAME", "mlp | cnn | gpt (default gpt)", CHOICE(model, models)},
    {NULL, "--layers", "L", "gpt blocks (default 2)", LONG(layers, 1, 256)},
    {NULL, "--heads", "H", "gpt attention heads (default 2)", LONG(heads, 1, 256)},
    {NULL, "--width", "C", "gpt embedding width, a multiple of heads (default 64)", LONG(width, 1, 65536)},
    {NULL, "--context", "T", "gpt context length (default 32)", LONG(context, 1, 65536)},
    {NULL, "--moe", "E", "gpt: each block's MLP a mixture of E experts of its shape, top-1\n"
                         "routed by a float32 router (docs/RUNTIME.md \"MoE\"; default dense)",
     LONG(moe, 1, 64)},
    {NULL, "--data", "FILE", "gpt: train on a text file at char level (default: the\n"
                             "generated sum language '3+4=7;8+5=13;')", STR(data)},
    {NULL, "--batch", "B", "samples per step (default mlp 64, cnn 32, gpt 8)", LONG(batch, 1, 1 << 20)},
    {"device and numerics:", "--device", "NAME", "cpu | npu-sim (default cpu)", CHOICE(device, devices)},
    {NULL, "--precision", "NAME", "fp32 | bf16 | fp16 autocast (default fp32); fp16 uses\n"
                                  "a dynamic loss scaler that skips overflowing steps;\n"
                                  "mxfp8 | hif8: float32 with the GEMM inputs of linear,\n"
                                  "matmul and conv2d quantized (MX E4M3 blocks of 32, HiF8\n"
                                  "per tensor)",
     CHOICE(precision, precs)},
    {NULL, "--lowp-backward", NULL, "mxfp8 | hif8: quantize linear's backward GEMMs too (the\n"
                                    "gradient, the input and the weight, blocks along each\n"
                                    "GEMM's reduction dim; docs/RUNTIME.md)",
     NP_OPT_FLAG, F(lowp_backward), 0, 0, NULL, 0, NULL},
    {NULL, "--lowp-grad", "FMT", "with --lowp-backward and mxfp8: the gradient's elements,\n"
                                 "e4m3 (default) | e5m2 (MX training's gradient format;\n"
                                 "input and weight stay E4M3)",
     CHOICE(lowp_grad, grad_fmts)},
    {NULL, "--fault", "NAME", "inject a fault of the npu-sim device (default none); the\n"
                              "collective faults act in a data-parallel run, the slow_*\n"
                              "ones (same results, one op slower) on any device",
     NP_OPT_CHECKED, F(fault), 0, 0, NULL, 0, bad_fault},
    {NULL, "--fault-step", "S", "the step of a one-time fault (gemm_bitflip, outlier_batch,\n"
                                "logit_growth, nan_input, rare_pattern: any device, gpt;\n"
                                "docs/MONITOR.md)",
     LONG(fault_step, 0, 100000000)},
    {NULL, "--fault-rank", "R", "the rank a one-time or slow_* fault acts on (default every\n"
                                "rank)", LONG(fault_rank, 0, 1 << 20)},
    {NULL, "--list-faults", NULL, "print the fault catalog and exit", NP_OPT_FLAG, F(list_faults), 0, 0,
     NULL, 0, NULL},
    {NULL, "--tp", "T", "tensor parallel over groups of T ranks (mpirun -n K, K a multiple\n"
                        "of T: data parallel over the K/T groups; gpt; docs/RUNTIME.md\n"
                        "\"Tensor parallel\")", LONG(tp, 1, 1024)},
    {NULL, "--sp", NULL, "sequence parallel beside --tp: layer norms and residuals on a\n"
                         "slice of the sequence per TP rank", NP_OPT_FLAG, F(sp), 0, 0, NULL, 0, NULL},
    {NULL, "--vocab-parallel", NULL, "beside --tp: the word embedding's rows, the lm head's logits\n"
                                     "and the loss split over the TP group (docs/RUNTIME.md\n"
                                     "\"Vocabulary parallel\")", NP_OPT_FLAG, F(vocab_parallel), 0, 0,
     NULL, 0, NULL},
    {NULL, "--pp", "P", "pipeline parallel over P stages (mpirun -n P, or with --tp T\n"
                        "-n K, K a multiple of P x T: data parallel over the rest; gpt:\n"
                        "the blocks split over the stages, micro-batches through a GPipe\n"
                        "schedule; docs/RUNTIME.md \"Pipeline parallel\")", LONG(pp, 1, 1024)},
    {NULL, "--micro-batches", "M", "gradient accumulation: each rank's rows of the batch in M\n"
                                   "micro-batches, forward and backward in turn (default 1;\n"
                                   "docs/RUNTIME.md \"Micro-batches\")", LONG(micro_batches, 1, 4096)},
    {NULL, "--threads", "N", "OpenMP and OpenBLAS threads (default 0: leave as set)", LONG(threads, 0, 1024)},
    {NULL, "--seed", "S", "seed of initialisation and data (default 1234)", LONG(seed, 0, 2147483647L)},
    {"optimization:", "--steps", "N", "total steps, also the schedule length (default 100)",
     LONG(steps, 0, 100000000)},
    {NULL, "--stop-after", "N", "stop after step N-1 of the --steps schedule (then --save);\n"
                                "a --load of that checkpoint with the same flags continues\n"
                                "the run exactly", LONG(stop_after, 0, 100000000)},
    {NULL, "--optim", "NAME", "adamw | sgd (default adamw; sgd with momentum 0.9)", CHOICE(optim, optims)},
    {NULL, "--lr", "LR", "peak learning rate (default mlp/cnn 0.01, gpt 0.003)", DBL(lr)},
    {NULL, "--warmup", "N", "linear warmup steps before the cosine decay (default steps/10)",
     LONG(warmup, 0, 100000000)},
    {NULL, "--grad-clip", "X", "max global gradient norm, 0 = off (default gpt 1, others 0)", DBL(grad_clip)},
    {"files and probes:", "--save", "CKPT", "write an HDF5 checkpoint at the end (or at --stop-after)",
     STR(save)},
    {NULL, "--load", "CKPT", "resume from a checkpoint (model settings and seed come\n"
                             "from it; training continues up to --steps). The other\n"
                             "settings (--lr --warmup --batch --grad-clip --steps\n"
                             "--precision --device --data) must be those of the run\n"
                             "that wrote it", STR(load)},
    {NULL, "--load-other-precision", NULL, "--load accepts a checkpoint of another --precision\n"
                                           "(a rerun of a step at other numerics: nprobe triage)",
     NP_OPT_FLAG, F(load_other_precision), 0, 0, NULL, 0, NULL},
    {NULL, "--log-every", "K", "print every K-th step (default 1)", LONG(log_every, 1, 100000000)},
    {NULL, "--dump-config", "FILE", "attach the probe with this config.json (also env\n"
                                    "NPROBE_DUMP_CONFIG; rank from NPROBE_RANK/NPROBE_WORLD_SIZE);\n"
                                    "\"task\": \"monitor\" attaches the monitor (docs/MONITOR.md)",
     STR(dump_config)},
    {NULL, "--monitor-config", "FILE", "attach the monitor with this config.json (\"task\":\n"
                                       "\"monitor\"), beside a dump of --dump-config",
     STR(monitor_config)},
    {NULL, "--profile", "DIR", "write a per-op trace of every step (Chrome trace JSON,\n"
                               "DIR/rank{R}.trace.json; docs/PROFILE.md); a config.json\n"
                               "with \"task\": \"profile\" in --dump-config sets a schedule",
     STR(profile)},
    {NULL, "--config-check-out", "PACK.zip", "write a config_check pack of this run before step 0",
     STR(cc_out)},
    {NULL, "--help", NULL, "show this help", NP_OPT_HELP, 0, 0, 0, NULL, 0, NULL},
};
#undef F
#undef CHOICE
#undef LONG
#undef DBL
#undef STR
#define N_TRAIN_OPTS ((int)(sizeof train_opts_table / sizeof train_opts_table[0]))

static void list_dist_faults(void)
{
    printf("\ncollective faults of the npu-sim device in a data-parallel run\n"
           "(mpirun -n K nprobe train --device npu-sim --fault NAME):\n");
    for (int i = 1; i < np_dist_fault_count(); i++) {
        const np_dist_fault_info *f = np_dist_fault_get(i);
        printf("  %-24s %s, %s%s\n  %-24s %s\n", f->name, f->op, f->ranks,
               f->needs_ranks ? " (K >= 2)" : "", "", f->description);
    }
}

static void list_step_faults(void)
{
    printf("\none-time faults at a step (--fault NAME --fault-step S [--fault-rank R]; gpt,\n"
           "any device):\n");
    for (int i = 1; np_step_fault_get(i); i++) {
        const np_step_fault_info *f = np_step_fault_get(i);
        printf("  %-24s %s\n  %-24s %s\n", f->name, f->module, "", f->description);
    }
}

static void list_prec_faults(void)
{
    printf("\nprecision faults of the npu-sim device (--device npu-sim --fault NAME, with the\n"
           "precision named):\n");
    for (int i = 1; i < np_prec_fault_count(); i++) {
        const np_prec_fault_info *f = np_prec_fault_get(i);
        printf("  %-24s %s (--precision %s)\n  %-24s %s\n", f->name, f->op, f->needs, "", f->description);
    }
}

static void list_faults(void)
{
    printf("faults of the npu-sim device (--device npu-sim --fault NAME):\n");
    for (int i = 0; i < np_fault_count(); i++) {
        const np_fault_info *f = np_fault_get(i);
        if (!f)
            continue;
        if (i == 0) {
            printf("  %-24s %s\n", f->name, f->description ? f->description : "");
            continue;
        }
        printf("  %-24s %s (%s)\n  %-24s %s\n", f->name, f->op ? f->op : "-",
               f->pass ? f->pass : "-", "", f->description ? f->description : "");
    }
}

static void set_defaults(train_args *a)
{
    memset(a, 0, sizeof *a);
    a->model = "gpt";
    a->device = "cpu";
    a->precision = "fp32";
    a->lowp_grad = "e4m3";
    a->fault = "none";
    a->optim = "adamw";
    a->steps = 100;
    a->seed = 1234;
    a->batch = -1;
    a->log_every = 1;
    a->warmup = -1;
    a->stop_after = -1;
    a->layers = a->heads = a->width = a->context = a->moe = -1;
    a->lr = -1;
    a->grad_clip = -1;
    a->fault_step = a->fault_rank = -1;
}

/* --fault NAME: a name of either catalog; 1 (after the error) if none. */
static int bad_fault(const char *o, const char *v)
{
    if (np_fault_from_name(v) >= 0 || np_dist_fault_from_name(v) >= 0 ||
        np_step_fault_from_name(v) >= 0 || np_prec_fault_from_name(v) >= 0 ||
        np_slow_fault_from_name(v) >= 0)
        return 0;
    const char *names[64];
    int n = 0;
    for (int k = 0; k < np_fault_count() && n < 64; k++)
        if (np_fault_get(k))
            names[n++] = np_fault_get(k)->name;
    for (int k = 1; k < np_dist_fault_count() && n < 64; k++)
        names[n++] = np_dist_fault_get(k)->name;
    for (int k = 1; np_step_fault_get(k) && n < 64; k++)
        names[n++] = np_step_fault_get(k)->name;
    for (int k = 1; k < np_prec_fault_count() && n < 64; k++)
        names[n++] = np_prec_fault_get(k)->name;
    for (int k = 1; np_slow_fault_get(k) && n < 64; k++)
        names[n++] = np_slow_fault_get(k)->name;
    np_cli_opt_choice(o, v, names, n);
    return 1;
}

/* The options that constrain one another; 0, or an exit code + 1. */
static int check_args(const train_args *a)
{
    if (a->width > 0 && a->heads > 0 && a->width % a->heads != 0) {
        np_cli_error("--width: expected a multiple of --heads (%ld), got %ld", a->heads, a->width);
        return NP_EXIT_USAGE + 1;
    }
    if (a->stop_after > a->steps) {
        np_cli_error("--stop-after: expected at most --steps (%ld), got %ld", a->steps, a->stop_after);
        return NP_EXIT_USAGE + 1;
    }
    int sf = np_step_fault_from_name(a->fault) > 0;
    int slow = np_slow_fault_from_name(a->fault) > 0; /* --fault-rank without --fault-step */
    if (sf != (a->fault_step >= 0) || (a->fault_rank >= 0 && !sf && !slow)) {
        np_cli_error(sf ? "--fault %s: a one-time fault needs --fault-step S"
                        : "--fault-step/--fault-rank: expected a one-time fault (--fault %s is not one; "
                          "see --list-faults)", a->fault);
        return NP_EXIT_USAGE + 1;
    }
    if (sf && strcmp(a->model, "gpt") != 0) {
        np_cli_error("--fault %s: the one-time faults act on the gpt model (got --model %s)",
                     a->fault, a->model);
        return NP_EXIT_USAGE + 1;
    }
    if (a->lowp_backward && np_lowp_from_name(a->precision) <= 0) {
        np_cli_error("--lowp-backward: expected --precision mxfp8 or hif8 (got %s)", a->precision);
        return NP_EXIT_USAGE + 1;
    }
    if (!strcmp(a->lowp_grad, "e5m2") && (!a->lowp_backward || strcmp(a->precision, "mxfp8") != 0)) {
        np_cli_error("--lowp-grad e5m2: expected --precision mxfp8 with --lowp-backward (got --precision %s%s)",
                     a->precision, a->lowp_backward ? "" : " without --lowp-backward");
        return NP_EXIT_USAGE + 1;
    }
    if (a->data && strcmp(a->model, "gpt") != 0) {
        np_cli_error("--data: only the gpt model reads a text file (got --model %s)", a->model);
        return NP_EXIT_USAGE + 1;
    }
    return 0;
}

/* Parse argv into a; returns 0, or an exit code + 1 to leave with. */
static int parse_args(train_args *a, int argc, char **argv)
{
    set_defaults(a);
    int rc = np_cli_opts_parse(train_opts_table, N_TRAIN_OPTS, a, "train", help_before, help_after,
                               argc, argv);
    return rc ? rc : check_args(a);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* An integer from the environment in [lo, 2^20]; `dflt` when unset or
 * empty, -1 (after an error message naming the variable) when malformed. */
static int env_int(const char *name, int dflt, int lo)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (*end || errno || x < lo || x > 1 << 20) {
        np_cli_error("environment variable %s=\"%s\": expected an integer from %d to %d", name,
                     v, lo, 1 << 20);
        return -1;
    }
    return (int)x;
}

/* Write the config_check pack: hyperparameters, seeds, weights, batch hashes. */
static int write_pack(const train_args *a, np_trainer *tr)
{
    const np_train_opts *o = np_trainer_opts(tr);
    const np_model_config *mc = &o->model;
    char buf[24][64];
    int k = 0;
    np_kv hp[24];
#define HP(k_, ...) \
    do { snprintf(buf[k], sizeof buf[k], __VA_ARGS__); hp[k].key = k_; hp[k].value = buf[k]; k++; } while (0)
    HP("model", "%s", np_model_kind_name(mc->kind));
    HP("device", "%s", a->device);
    HP("precision", "%s%s%s", a->precision, a->lowp_backward ? "+backward" : "",
       a->lowp_backward && !strcmp(a->lowp_grad, "e5m2") ? "-e5m2" : "");
    HP("fault", "%s", a->fault);
    HP("optim", "%s", np_optim_kind_name(o->optim.kind));
    HP("lr", "%.17g", o->optim.lr);
    HP("weight_decay", "%.17g", o->optim.weight_decay);
    if (o->optim.kind == NP_OPTIM_SGD)
        HP("momentum", "%.17g", o->optim.momentum);
    else
        HP("betas", "%.17g,%.17g", o->optim.beta1, o->optim.beta2);
    HP("steps", "%lld", (long long)o->steps);
    HP("warmup", "%lld", (long long)o->warmup);
    HP("min_lr_frac", "%.17g", o->min_lr_frac);
    HP("grad_clip", "%.17g", o->grad_clip);
    HP("batch", "%d", o->batch);
    HP("threads", "%ld", a->threads); /* the option as given (0 = from the environment): the effective count is in libs.json */
    if (mc->kind == NP_MODEL_GPT) {
        HP("layers", "%d", mc->n_layer);
        HP("heads", "%d", mc->n_head);
        HP("width", "%d", mc->n_embd);
        HP("context", "%d", mc->block_size);
        HP("vocab", "%d", mc->vocab_size);
        if (mc->n_expert > 0)
            HP("experts", "%d", mc->n_expert);
    }
    HP("data", "%s", a->data ? a->data : np_data_kind_name(np_data_kind_of(np_trainer_data(tr))));
#undef HP
    int64_t start = np_trainer_next_step(tr);
    char hashes[N_HASHED_BATCHES][65];
    const char *hp_hashes[N_HASHED_BATCHES];
    np_batch b;
    memset(&b, 0, sizeof b);
    np_error err;
    np_error_clear(&err);
    for (int i = 0; i < N_HASHED_BATCHES; i++) {
        if (np_data_get_batch(&b, np_trainer_data(tr), start + i, o->batch, &err)) {
            np_batch_free(&b);
            np_cli_report(&err);
            return NP_EXIT_USAGE;
        }
        np_data_batch_sha256(&b, hashes[i]);
        hp_hashes[i] = hashes[i];
    }
    np_batch_free(&b);
    char rbuf[3][32];
    snprintf(rbuf[0], sizeof rbuf[0], "%lld", (long long)o->seed);
    snprintf(rbuf[1], sizeof rbuf[1], "%llu", (unsigned long long)np_model_init_draws(np_trainer_model(tr)));
    snprintf(rbuf[2], sizeof rbuf[2], "%llu", (unsigned long long)np_data_draws(np_trainer_data(tr)));
    np_kv rnd[3] = {{"seed", rbuf[0]}, {"rng.init.draws", rbuf[1]}, {"rng.data.draws", rbuf[2]}};
    int n = 0;
    np_tensor *const *params = np_model_params(np_trainer_model(tr), &n);
    np_named_tensor *w = calloc((size_t)(n > 0 ? n : 1), sizeof *w);
    if (!w) {
        np_cli_error("out of memory");
        return NP_EXIT_USAGE;
    }
    for (int i = 0; i < n; i++) {
        w[i].name = params[i]->name;
        w[i].t = params[i];
    }
    const char *files[1] = {a->data};
    np_run_info run = {
        .hyperparams = hp, .n_hyperparams = k, .random = rnd, .n_random = 3,
        .weights = w, .n_weights = n, .batch_hashes = hp_hashes,
        .n_batches = N_HASHED_BATCHES, .data_files = files, .n_data_files = a->data ? 1 : 0,
    };
    np_status st = np_cc_pack_run(a->cc_out, &run, &err);
    free(w);
    if (st) {
        np_cli_report(&err);
        return NP_EXIT_USAGE;
    }
    return NP_EXIT_OK;
}

/* The fault of --fault: the op-level catalog into co, the collective one
 * into o->dist; warns where it will not act. */
static void set_fault(np_ctx_opts *co, np_train_opts *o, const train_args *a, np_model_kind kind,
                      int mpi, int world, int warn)
{
    int df = np_dist_fault_from_name(a->fault);
    if (df > 0) {
        o->dist.fault = (np_dist_fault)df;
        const np_dist_fault_info *f = np_dist_fault_get(df);
        if (!warn)
            return;
        if (co->device != NP_DEVICE_NPU_SIM)
            fprintf(stderr, "nprobe: warning: --fault %s acts on --device npu-sim only; "
                            "the cpu reference runs without it\n", a->fault);
        else if (df == NP_DIST_FAULT_PP_GRAD_ACCUM_DROP && a->micro_batches < 2)
            fprintf(stderr, "nprobe: warning: --fault %s acts with --micro-batches M >= 2 only: "
                            "this run is the same as one without the fault\n", a->fault);
        else if (df == NP_DIST_FAULT_PP_GRAD_ACCUM_DROP)
            return;
        else if (df == NP_DIST_FAULT_PP_MICROBATCH_SWAP && (a->pp < 2 || a->micro_batches < 2))
            fprintf(stderr, "nprobe: warning: --fault %s acts with --pp P --micro-batches M >= 2 "
                            "only: this run is the same as one without the fault\n", a->fault);
        else if (!mpi)
            fprintf(stderr, "nprobe: warning: --fault %s is a collective fault: it acts in a "
                            "data-parallel run (mpirun -n K nprobe train ...) only\n", a->fault);
        else if (f->needs_ranks && world < 2)
            fprintf(stderr, "nprobe: warning: --fault %s needs 2 or more ranks (mpirun -n 1 "
                            "runs without it)\n", a->fault);
        else if ((df == NP_DIST_FAULT_REDUCE_BF16 || df == NP_DIST_FAULT_SKIP_PARAM) && a->tp > 1)
            fprintf(stderr, "nprobe: warning: --fault %s acts on the data-parallel reduction "
                            "without --tp only: this run is the same as one without the fault\n",
                    a->fault);
        else if ((df == NP_DIST_FAULT_TP_MISSING_ALLREDUCE || df == NP_DIST_FAULT_TP_SHARD_OFFSET ||
                  df == NP_DIST_FAULT_SP_NORM_GRAD_UNREDUCED) && a->tp <= 1)
            fprintf(stderr, "nprobe: warning: --fault %s acts with --tp only: this run is the "
                            "same as one without the fault\n", a->fault);
        else if (df == NP_DIST_FAULT_SP_NORM_GRAD_UNREDUCED && !a->sp)
            fprintf(stderr, "nprobe: warning: --fault %s acts with --sp only: this run is the "
                            "same as one without the fault\n", a->fault);
        return;
    }
    int pf = np_prec_fault_from_name(a->fault);
    if (pf > 0) {
        co->prec_fault = pf;
        if (warn && co->device != NP_DEVICE_NPU_SIM)
            fprintf(stderr, "nprobe: warning: --fault %s acts on --device npu-sim only; "
                            "the cpu reference runs without it\n", a->fault);
        else if (warn && !strstr(np_prec_fault_get(pf)->needs, a->precision))
            fprintf(stderr, "nprobe: warning: --fault %s acts with --precision %s only: this run "
                            "is the same as one without the fault\n", a->fault, np_prec_fault_get(pf)->needs);
        else if (warn && pf == NP_PREC_FAULT_LOWP_BWD_UNDERFLOW && !a->lowp_backward)
            fprintf(stderr, "nprobe: warning: --fault %s acts with --lowp-backward only: this run "
                            "is the same as one without the fault\n", a->fault);
        else if (warn && pf == NP_PREC_FAULT_MOE_ROUTER_BF16 && a->moe <= 0)
            fprintf(stderr, "nprobe: warning: --fault %s acts with --moe only: this run is the same "
                            "as one without the fault\n", a->fault);
        return;
    }
    if (np_step_fault_from_name(a->fault) > 0 || np_slow_fault_from_name(a->fault) > 0) {
        co->fault = NP_FAULT_NONE; /* attached (applied) once the context exists */
        return;
    }
    co->fault = (np_fault)np_fault_from_name(a->fault);
    if (!warn)
        return;
    if (co->fault != NP_FAULT_NONE && co->device != NP_DEVICE_NPU_SIM)
        fprintf(stderr, "nprobe: warning: --fault %s acts on --device npu-sim only; "
                        "the cpu reference runs without it\n", a->fault);
    else if (co->fault != NP_FAULT_NONE && !np_model_fault_applies(kind, np_fault_get(co->fault)->op))
        fprintf(stderr, "nprobe: warning: --fault %s acts on %s, which the %s model does not "
                        "call: this run is the same as one without the fault\n",
                a->fault, np_fault_get(co->fault)->op, a->model);
}

/* Rank and world size: MPI's when launched by mpirun, else NPROBE_RANK /
 * NPROBE_WORLD_SIZE (labels only). 0, or an exit code. */
static int rank_of(int *rank, int *world, int mpi)
{
    if (mpi)
        return 0;
    *rank = env_int("NPROBE_RANK", 0, 0);
    *world = env_int("NPROBE_WORLD_SIZE", 1, 1);
    if (*rank < 0 || *world < 0)
        return NP_EXIT_USAGE;
    if (*rank >= *world) {
        np_cli_error("NPROBE_RANK=%d is not below NPROBE_WORLD_SIZE=%d (ranks are 0 .. %d)", *rank,
                     *world, *world - 1);
        return NP_EXIT_USAGE;
    }
    return 0;
}

/* The trainer's options from the command line (and --load's settings);
 * 0, or an exit code. */
static int train_opts(np_train_opts *out, const train_args *a, np_model_kind kind)
{
    np_error err;
    np_error_clear(&err);
    np_train_opts o;
    np_train_opts_default(&o, kind);
    o.optim.kind = (np_optim_kind)np_optim_kind_from_name(a->optim);
    if (o.optim.kind == NP_OPTIM_SGD) {
        double lr = o.optim.lr;
        np_optim_config_default(&o.optim, NP_OPTIM_SGD);
        o.optim.lr = lr * 10.0;
    }
    if (a->lr > 0)
        o.optim.lr = a->lr;
    if (a->grad_clip >= 0)
        o.grad_clip = a->grad_clip;
    if (a->batch > 0)
        o.batch = (int)a->batch;
    o.micro_batches = a->micro_batches > 1 ? (int)a->micro_batches : 0;
    o.steps = a->steps;
    o.warmup = a->warmup;
    o.seed = (uint64_t)a->seed;
    o.data_path = a->data;
    o.load_other_precision = a->load_other_precision;
    if (a->layers > 0) o.model.n_layer = (int)a->layers;
    if (a->heads > 0) o.model.n_head = (int)a->heads;
    if (a->width > 0) o.model.n_embd = (int)a->width;
    if (a->context > 0) o.model.block_size = (int)a->context;
    if (a->moe > 0) {
        if (kind != NP_MODEL_GPT || a->tp > 1 || a->load || a->save) {
            np_cli_error("--moe %ld: a gpt option, not with --tp, --save or --load (a checkpoint "
                         "does not record the experts yet)", a->moe);
            return NP_EXIT_USAGE;
        }
        o.model.n_expert = (int)a->moe;
    }
    if (o.model.n_embd % o.model.n_head != 0) {
        np_cli_error("--width: expected a multiple of --heads (%d), got %d", o.model.n_head, o.model.n_embd);
        return NP_EXIT_USAGE;
    }
    if (a->load) {
        np_model_config lc;
        int64_t lstep = 0;
        uint64_t lseed = 0;
        if (np_checkpoint_read_config(&lc, &lstep, &lseed, a->load, &err)) {
            np_cli_report(&err);
            return NP_EXIT_USAGE;
        }
        if (lc.kind != kind) {
            np_cli_error("%s: the checkpoint holds a %s model, --model is %s", a->load,
                         np_model_kind_name(lc.kind), a->model);
            return NP_EXIT_USAGE;
        }
        o.model = lc;
        o.seed = lseed;
    }
    *out = o;
    return 0;
}

/* The run's first lines: model, data, device, run settings. */
static void print_banner(const train_args *a, np_trainer *tr, np_model_kind kind, int mpi,
                         int world, const np_train_opts *o, int64_t stop)
{
    int threads = a->threads > 0 ? (int)a->threads : omp_get_max_threads();
    const np_train_opts *to = np_trainer_opts(tr);
    const np_model_config *mc = &to->model;
    printf("nprobe train: model %s", a->model);
    if (kind == NP_MODEL_GPT)
        printf(" (%d layers, %d heads, width %d, context %d, vocab %d%s)", mc->n_layer, mc->n_head,
               mc->n_embd, mc->block_size, mc->vocab_size, mc->n_expert > 0 ? ", MoE" : "");
    printf(", %lld parameters, data %s, batch %d\n", (long long)np_model_n_weights(np_trainer_model(tr)),
           a->data ? a->data : np_data_kind_name(np_data_kind_of(np_trainer_data(tr))), to->batch);
    printf("device %s, precision %s%s, fault %s, optim %s, lr %g, steps %lld, seed %lld, threads %d",
           a->device, a->precision, a->lowp_backward ? strcmp(a->lowp_grad, "e5m2") ? " (backward quantized)" : " (backward quantized, gradients e5m2)" : "", a->fault, a->optim, to->optim.lr, (long long)to->steps,
           (long long)to->seed, threads);
    if (a->load)
        printf(", resuming at step %lld", (long long)np_trainer_next_step(tr));
    if (a->stop_after >= 0)
        printf(", stopping after %lld", (long long)stop);
    printf("\n");
    int tp = o->dist.tp > 1 ? o->dist.tp : 1;
    if (mpi && tp > 1 && o->dist.pp > 1)
        printf("pipeline x tensor parallel%s: %d rank(s), %d stage(s) of %d data-parallel "
               "group(s) of %d TP rank(s) (rank = (stage x %d + group) x %d + TP rank), "
               "%d block(s) split over the stages, GPipe schedule, global batch %d, %d per "
               "group%s%s\n", o->dist.sp ? " + sequence parallel" : "", world, o->dist.pp,
               world / (o->dist.pp * tp), tp, world / (o->dist.pp * tp), tp, to->model.n_layer,
               to->batch, to->batch / (world / (o->dist.pp * tp)),
               o->dist.fault ? ", collective fault " : "",
               o->dist.fault ? np_dist_fault_get(o->dist.fault)->name : "");
    else if (mpi && tp > 1)
        printf("tensor parallel%s: %d rank(s), %d group(s) of %d (data parallel over the groups), "
               "global batch %d, %d per group%s%s\n", o->dist.sp ? " + sequence parallel" : "",
               world, world / tp, tp, to->batch,
               to->batch / (world / tp), o->dist.fault ? ", collective fault " : "",
               o->dist.fault ? np_dist_fault_get(o->dist.fault)->name : "");
    else if (mpi && o->dist.pp > 1)
        printf("pipeline parallel: %d stage(s), %d block(s) split over them, GPipe schedule "
               "(every micro-batch's forward, then every backward), batch %d%s%s\n", o->dist.pp,
               to->model.n_layer, to->batch, o->dist.fault ? ", collective fault " : "",
               o->dist.fault ? np_dist_fault_get(o->dist.fault)->name : "");
    else if (mpi)
        printf("data parallel: %d rank(s), global batch %d, %d per rank%s%s\n", world, to->batch,
               to->batch / world, o->dist.fault ? ", collective fault " : "",
               o->dist.fault ? np_dist_fault_get(o->dist.fault)->name : "");
    if (to->micro_batches > 1)
        printf("micro-batches: %d of %d row(s) each, gradients accumulated\n", to->micro_batches,
               to->batch / (mpi ? world / tp / (o->dist.pp > 1 ? o->dist.pp : 1) : 1) /
                   to->micro_batches);
    fflush(stdout);
}

/* The training steps up to stop, a line per logged step and the "done"
 * line; NP_EXIT_OK, or the exit code of a failed or diverged step. */
static int run_steps(const train_args *a, np_trainer *tr, np_ctx *ctx, np_model_kind kind,
                     const np_ctx_opts *co, int mpi, int64_t stop)
{
    np_error err;
    np_error_clear(&err);
    const np_train_opts *to = np_trainer_opts(tr);
    int code = NP_EXIT_OK;
    const char *unit = kind == NP_MODEL_GPT ? "tok/s" : "samples/s";
    int is_reference = co->device == NP_DEVICE_CPU && co->precision == NP_FLOAT32;
    double last_loss = NAN;
    int64_t done_steps = 0;
    while (np_trainer_next_step(tr) < stop) {
        np_step_result r;
        double t0 = now_s();
        if (np_trainer_step(tr, &r, &err)) {
            np_cli_report(&err);
            code = NP_EXIT_USAGE;
            break;
        }
        double dt = now_s() - t0;
        done_steps++;
        last_loss = r.loss;
        if (r.step % a->log_every == 0 || r.skipped || !isfinite(r.loss) ||
            r.step + 1 == stop) {
            printf("step %lld loss %.6f lr %.3e  %.0f %s", (long long)r.step, r.loss, r.lr,
                   dt > 0 ? (double)r.items / dt : 0.0, unit);
            if (r.skipped)
                printf("  skipped (fp16 overflow, loss scale now %g)", np_trainer_scaler(tr)->scale);
            printf("\n");
            fflush(stdout);
        }
        if (!isfinite(r.loss) && is_reference) {
            np_cli_error("step %lld: the loss is %s on the cpu fp32 reference: the run diverged "
                         "(try a lower --lr or --grad-clip 1)", (long long)r.step,
                         isnan(r.loss) ? "nan" : "inf");
            code = NP_EXIT_DIFF;
            break;
        }
        if (mpi ? np_cli_mpi_max_int(np_ctx_stop_requested(ctx)) : np_ctx_stop_requested(ctx)) {
            np_cli_error("the probe asked to stop training after step %lld", (long long)r.step);
            break;
        }
    }
    if (code == NP_EXIT_OK) {
        const np_scaler *sc = np_trainer_scaler(tr);
        printf("done: %lld steps, final loss %.6f", (long long)done_steps, last_loss);
        if (np_trainer_next_step(tr) < to->steps)
            printf(", stopped at step %lld of %lld", (long long)np_trainer_next_step(tr), (long long)to->steps);
        if (sc->enabled)
            printf(", %lld steps skipped by the loss scaler (scale %g)", (long long)sc->skipped, sc->scale);
        printf("\n");
    }
    return code;
}

/* The MPI layout: ranks, the gather, tensor and sequence parallelism. */
static int dist_opts(np_train_opts *o, const train_args *a, int mpi, int rank, int world)
{
    if (mpi) {
        o->dist.rank = rank;
        o->dist.world_size = world;
        o->dist.allgather = np_cli_mpi_allgather;
        o->dist.tp = a->tp > 1 ? (int)a->tp : 0;
        o->dist.sp = a->sp;
        o->dist.pp = a->pp > 1 ? (int)a->pp : 0;
        o->dist.vp = a->vocab_parallel;
        o->dist.send = np_cli_mpi_send;
        o->dist.recv = np_cli_mpi_recv;
    } else if (a->tp > 1) {
        np_cli_error("--tp %ld: tensor parallelism runs under mpirun -n %ld", a->tp, a->tp);
        return NP_EXIT_USAGE;
    } else if (a->pp > 1) {
        np_cli_error("--pp %ld: pipeline parallelism runs under mpirun -n %ld", a->pp, a->pp);
        return NP_EXIT_USAGE;
    }
    if (a->sp && a->tp <= 1) {
        np_cli_error("--sp: sequence parallelism needs --tp T > 1");
        return NP_EXIT_USAGE;
    }
    if (a->vocab_parallel && (a->tp <= 1 || a->save || a->load)) {
        np_cli_error("--vocab-parallel: %s", a->tp <= 1 ? "the vocabulary splits over --tp T > 1"
                     : "checkpoints (--save, --load) of a vocabulary-parallel run are not built yet");
        return NP_EXIT_USAGE;
    }
    return NP_EXIT_OK;
}

/* The dump's mesh and placements for --tp and --micro-batches. */
static int probe_layout(np_cli_probe *probe, const np_train_opts *o, int mpi, int rank, int world,
                        int64_t vocab)
{
    int mb = o->micro_batches > 1 ? o->micro_batches : 1;
    if (o->dist.pp > 1)
        return np_cli_probe_layout_pp(probe, o->dist.pp, o->dist.tp, o->dist.sp, mb, rank, world);
    if (mb > 1 && mpi && world > 1 && o->dist.tp <= 1) {
        np_cli_error("--micro-batches %d with a dump of a plain data-parallel run: its "
                     "placements are not written yet (dump one process, or add --tp)", mb);
        return NP_EXIT_USAGE;
    }
    if (o->dist.tp <= 1 && mb <= 1)
        return NP_EXIT_OK;
    int rc = np_cli_probe_layout(probe, o->dist.tp, o->dist.sp, mb, rank, world);
    if (rc == NP_EXIT_OK && o->dist.tp > 1 && o->dist.vp)
        np_cli_probe_vocab(probe, vocab);
    return rc;
}

/* The dump of the calls the monitor keeps (anomaly_calls) under --tp and
 * --pp: the run's mesh and placements, as its tensor dump's. */
static int monitor_layout(np_cli_probe **lay, struct np_monitor *mon, const np_train_opts *o,
                          int mpi, int rank, int world, int64_t vocab)
{
    if (o->dist.tp <= 1 && o->dist.pp <= 1)
        return NP_EXIT_OK;
    if (!(*lay = np_cli_layout_new())) {
        np_cli_error("out of memory");
        return NP_EXIT_USAGE;
    }
    int rc = probe_layout(*lay, o, mpi, rank, world, vocab);
    if (rc == NP_EXIT_OK)
        np_monitor_set_layout(mon, np_cli_layout_mon(*lay));
    return rc;
}

static int train(const train_args *a, int mpi, int rank, int world)
{
    np_error err;
    np_error_clear(&err);
    np_model_kind kind = (np_model_kind)np_model_kind_from_name(a->model);
    np_train_opts o;
    int rc = train_opts(&o, a, kind);
    if (rc)
        return rc;
    np_ctx_opts co;
    np_ctx_opts_default(&co);
    co.device = (np_device)np_device_from_name(a->device);
    int lowp = np_lowp_from_name(a->precision);
    co.lowp = lowp > 0 ? lowp : NP_LOWP_NONE;
    co.precision = lowp > 0 ? NP_FLOAT32 : (np_dtype)np_dtype_from_name(a->precision);
    co.lowp_backward = a->lowp_backward ? (strcmp(a->lowp_grad, "e5m2") ? 1 : 2) : 0;
    co.seed = o.seed;
    co.threads = (int)a->threads;
    static char fp32_ops[4096];
    rc = np_cli_fp32_ops(fp32_ops, sizeof fp32_ops,
                         a->dump_config ? a->dump_config : getenv("NPROBE_DUMP_CONFIG"));
    if (rc)
        return rc;
    co.fp32_ops = fp32_ops;
    rc = rank_of(&rank, &world, mpi);
    if (rc)
        return rc;
    co.rank = rank;
    if ((rc = dist_opts(&o, a, mpi, rank, world)) != NP_EXIT_OK)
        return rc;
    /* only rank 0 reports, warns, saves and packs */
    int quiet = rank > 0 && mpi;
    if (quiet && !freopen("/dev/null", "w", stdout))
        return NP_EXIT_USAGE;
    set_fault(&co, &o, a, kind, mpi, world, !quiet);
    np_ctx *ctx = NULL;
    np_trainer *tr = NULL;
    np_cli_probe *probe = NULL, *mon_lay = NULL;
    struct np_monitor *mon = NULL;
    np_cli_profiler *prof = NULL;
    np_step_fault *sfault = NULL;
    int code = NP_EXIT_USAGE;
    if (np_ctx_new(&ctx, &co, &err) || np_trainer_new(&tr, ctx, &o, &err)) {
        np_cli_report(&err);
        goto done;
    }
    if (a->load && np_trainer_load(tr, a->load, &err)) {
        np_cli_report(&err);
        goto done;
    }
    const np_train_opts *to = np_trainer_opts(tr);
    int64_t stop = a->stop_after >= 0 ? a->stop_after : to->steps;
    print_banner(a, tr, kind, mpi, world, &o, stop);

    const char *dump_cfg = a->dump_config ? a->dump_config : getenv("NPROBE_DUMP_CONFIG");
    if (a->monitor_config && !np_cli_monitor_wanted(a->monitor_config)) {
        np_cli_error("--monitor-config %s: expected \"task\": \"monitor\"", a->monitor_config);
        goto done;
    }
    const char *mon_cfg = a->monitor_config ? a->monitor_config
                          : dump_cfg && *dump_cfg && np_cli_monitor_wanted(dump_cfg) ? dump_cfg : NULL;
    /* one file for both: a dump task with a "monitor" section */
    int mon_too = !mon_cfg && dump_cfg && *dump_cfg && np_monitor_config_has_section(dump_cfg);
    if (mon_too)
        mon_cfg = dump_cfg;
    if (mon_cfg && np_cli_monitor_attach(&mon, ctx, tr, mon_cfg, rank, world) != NP_EXIT_OK)
        goto done;
    if (mon && monitor_layout(&mon_lay, mon, &o, mpi, rank, world, to->model.vocab_size))
        goto done;
    const char *prof_cfg = NULL; /* the profile task, the slow faults (cli/profile_attach.c) */
    if (np_cli_profile_setup(&prof, &prof_cfg, ctx, a->profile, dump_cfg, a->fault, (int)a->fault_rank, rank,
                             world) != NP_EXIT_OK)
        goto done;
    if (dump_cfg && *dump_cfg && (mon_cfg != dump_cfg || mon_too) && prof_cfg != dump_cfg) {
        np_cli_run_meta meta = {"nprobe-runtime", a->device, a->precision, rank, world};
        if (np_cli_probe_attach(&probe, ctx, dump_cfg, &meta) != NP_EXIT_OK)
            goto done;
        if (probe_layout(probe, &o, mpi, rank, world, to->model.vocab_size) != NP_EXIT_OK)
            goto done;
    }
    int sf = np_step_fault_from_name(a->fault);
    if (sf > 0 && np_step_fault_attach(&sfault, ctx, (np_step_fault_kind)sf, a->fault_step,
                                       (int)a->fault_rank, &err)) {
        np_cli_report(&err);
        goto done;
    }
    if (a->cc_out && !quiet && (code = write_pack(a, tr)) != NP_EXIT_OK)
        goto done;

    code = run_steps(a, tr, ctx, kind, &co, mpi, stop);
    /* tensor and pipeline parallel: every rank takes part in gathering the
     * shards and the stages' tensors; rank 0 writes the one-process tensors */
    if (code == NP_EXIT_OK && a->save && (!quiet || o.dist.tp > 1 || o.dist.pp > 1)) {
        if (np_trainer_save(tr, a->save, &err)) {
            np_cli_report(&err);
            code = NP_EXIT_USAGE;
        } else {
            printf("saved %s (step %lld)\n", a->save, (long long)np_trainer_next_step(tr));
        }
    }
done:
    np_step_fault_detach(sfault);
    code = np_cli_profile_end(prof, code);
    if (mon) {
        int mc = np_cli_monitor_detach(mon);
        if (mc != NP_EXIT_OK && code == NP_EXIT_OK)
            code = mc;
    }
    np_cli_layout_free(mon_lay);
    if (probe) {
        int pc = np_cli_probe_detach(probe);
        if (pc != NP_EXIT_OK && code == NP_EXIT_OK)
            code = pc;
    }
    np_trainer_free(tr);
    np_ctx_free(ctx);
    return code;
}

int np_cmd_train(int argc, char **argv)
{
    train_args a;
    int r = parse_args(&a, argc, argv);
    if (r)
        return r - 1;
    if (a.list_faults) {
        list_faults();
        list_dist_faults();
        list_step_faults();
        list_prec_faults();
        np_cli_list_slow_faults();
        return NP_EXIT_OK;
    }
    int rank = 0, world = 1, mpi = np_cli_mpi_start(&rank, &world);
    if (mpi < 0) {
        np_cli_error("train: MPI_Init failed");
        return NP_EXIT_USAGE;
    }
    np_cli_ignore_sigxfsz(); /* a file size limit is a write error (--save, dumps, packs), reported */
    r = train(&a, mpi, rank, world);
    np_cli_mpi_end();
    return r;
}
