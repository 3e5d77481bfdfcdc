/* common/dtype.c - the logical dtype and leaf role name tables
 * (nprobe/tensor.h, nprobe/hook.h), shared by the runtime, the probe and the
 * readers, so that none of them needs the runtime library for names. */
#include <string.h>

#include "nprobe/hook.h"
#include "nprobe/tensor.h"

static const char *const dtype_names[NP_DTYPE_COUNT] = {
    [NP_FLOAT32] = "float32", [NP_BFLOAT16] = "bfloat16", [NP_FLOAT16] = "float16",
    [NP_FLOAT64] = "float64", [NP_INT64] = "int64",       [NP_INT32] = "int32",
    [NP_BOOL] = "bool",
};
_Static_assert(sizeof dtype_names / sizeof dtype_names[0] == NP_DTYPE_COUNT,
               "dtype_names must name every np_dtype");

static const char *const role_names[NP_ROLE_COUNT] = {
    [NP_ROLE_INPUT] = "input",           [NP_ROLE_OUTPUT] = "output",
    [NP_ROLE_PARAMETERS] = "parameters", [NP_ROLE_KWARGS] = "kwargs",
    [NP_ROLE_PARAMETERS_GRAD] = "parameters_grad",
};
_Static_assert(sizeof role_names / sizeof role_names[0] == NP_ROLE_COUNT,
               "role_names must name every np_role");

const char *np_dtype_name(np_dtype dt)
{
    return (unsigned)dt < NP_DTYPE_COUNT ? dtype_names[dt] : "unknown";
}

const char *np_role_name(np_role r)
{
    return (unsigned)r < NP_ROLE_COUNT ? role_names[r] : "unknown";
}

int np_dtype_from_name(const char *name)
{
    static const struct { const char *alias; np_dtype dt; } aliases[] = {
        {"fp32", NP_FLOAT32}, {"bf16", NP_BFLOAT16}, {"fp16", NP_FLOAT16},
        {"fp64", NP_FLOAT64}, {"half", NP_FLOAT16},  {"float", NP_FLOAT32},
        {"double", NP_FLOAT64},
    };
    if (!name)
        return -1;
    for (int i = 0; i < NP_DTYPE_COUNT; i++)
        if (strcmp(name, dtype_names[i]) == 0)
            return i;
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcmp(name, aliases[i].alias) == 0)
            return (int)aliases[i].dt;
    return -1;
}

size_t np_dtype_storage_size(np_dtype dt)
{
    switch (dt) {
    case NP_FLOAT64:
    case NP_INT64:
        return 8;
    case NP_BOOL:
        return 1;
    default:
        return 4;
    }
}

int np_dtype_is_floating(np_dtype dt)
{
    return dt == NP_FLOAT32 || dt == NP_BFLOAT16 || dt == NP_FLOAT16 || dt == NP_FLOAT64;
}

size_t np_tensor_nbytes(const np_tensor *t)
{
    return (size_t)t->numel * np_dtype_storage_size(t->dtype);
}
