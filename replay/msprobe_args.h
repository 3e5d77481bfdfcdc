/* replay/msprobe_args.h - where msprobe puts a call's arguments (private to
 * replay/). msprobe dumps a forward call's arguments as torch received
 * them: positional ones as input_args (nprobe leaf {call}.input.{i}, lists
 * nested: {call}.input.{i}.{j}), keyword ones as input_kwargs
 * ({call}.kwargs.{key}), scalars as {type, value} items, None as null. The
 * op registry (nprobe/ops.h) names its inputs and scalars; this table says
 * at which position of torch's signature each one comes, and which other
 * arguments do not change the result (so a call that passes anything else
 * is not recomputed rather than recomputed wrongly). */
#ifndef NPROBE_REPLAY_MSPROBE_ARGS_H
#define NPROBE_REPLAY_MSPROBE_ARGS_H

#include <stddef.h>

#include "nprobe/format.h"
#include "nprobe/ops.h"

/* Position of argument `name` in the signature of op `op` (0 = the first
 * tensor), -1 when it is not a positional argument there. */
int rp_msp_arg_pos(int op, const char *name);

/* 1 when an entry is a number msprobe dumped as {type: int|float|bool, value}. */
int rp_msp_is_number(const np_entry_rec *e);

/* NULL when every argument of forward call `fwd` (its entries e[0..n),
 * the call's leaves) is one the registry's float64 reference of `info`
 * takes, an absent one (None), or one that does not change the result
 * (normalized_shape, inplace, ...); otherwise why not, in buf (cap bytes). */
const char *rp_msp_unmodelled(char *buf, size_t cap, const np_op_info *info, const char *fwd,
                              const np_entry_rec *e, size_t n);

/* The same for a call of nprobe's own dumps (the package and the runtime):
 * tensors {fwd}.input.{k} in the order of the op's inputs, every other
 * argument {fwd}.kwargs.{name} (a list as {name}.{j}; a string as its code,
 * docs/FORMAT.md, NaN when it has none): NULL when every one is a tensor or
 * scalar the reference takes (lists with one value for every dimension) or
 * one that does not change the values; otherwise why not, in buf. */
const char *rp_np_unmodelled(char *buf, size_t cap, const np_op_info *info, const char *fwd,
                             const np_entry_rec *e, size_t n);

/* List argument `key` of call `fwd` ({fwd}.kwargs.{key}.{j} in e[0..n)):
 * 1 and *v when every element is the same number, -1 when they differ,
 * 0 when the dump has no such list. */
int rp_np_list_scalar(const np_entry_rec *e, size_t n, const char *fwd, const char *key,
                      double *v);

#endif
