/* runtime/fault_slow.c - the performance faults (include/internal/nprobe/fault_slow.h):
 * a slow path put in the context's kernel table in place of one op's
 * reference kernel. The slow kernels compute the reference's function, in
 * a wider type, element by element: only the time changes. */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "kernels.h"
#include "nprobe/fault_slow.h"
#include "nprobe/ops.h"
#include "rt_internal.h"

/* The catalog; the op a fault slows is an np_op id, its API name (the op
 * table's) put in np_slow_fault_info.op once. */
typedef struct slow_def {
    const char *name;
    np_op op;
    const char *description;
} slow_def;

static const slow_def defs[] = { /* enum order: the size check sees a missing one */
    {"none", NP_OP_COUNT, ""},
    {"slow_gelu", NP_OP_GELU,
     "forward and backward one element at a time in long double (erfl, expl): no vector "
     "clone, no threads (a scalar fallback path)"},
    {"slow_linear", NP_OP_LINEAR,
     "forward GEMM as a naive triple loop in double: no BLAS, no threads (a reference "
     "kernel left in a build)"},
};
_Static_assert(sizeof defs / sizeof defs[0] == NP_SLOW_FAULT_COUNT, "one entry per kind");

static np_slow_fault_info catalog[NP_SLOW_FAULT_COUNT];
static pthread_once_t catalog_once = PTHREAD_ONCE_INIT;

static void catalog_init(void)
{
    for (int k = 0; k < NP_SLOW_FAULT_COUNT; k++)
        catalog[k] = (np_slow_fault_info){defs[k].name, k ? np_op_api(defs[k].op) : "",
                                          defs[k].description};
}

const np_slow_fault_info *np_slow_fault_get(int k)
{
    if (k <= 0 || k >= NP_SLOW_FAULT_COUNT)
        return NULL;
    pthread_once(&catalog_once, catalog_init);
    return &catalog[k];
}

int np_slow_fault_from_name(const char *name)
{
    for (int k = 1; name && k < NP_SLOW_FAULT_COUNT; k++)
        if (!strcmp(name, defs[k].name))
            return k;
    return -1;
}

#define SQRT1_2L 0.707106781186547524400844362104849039L
#define INV_SQRT_2PIL 0.398942280401432677939946059934381868L

static void slow_gelu_forward(float *out, double *cdf, const float *inp, int64_t n, np_dtype dt)
{
    for (int64_t i = 0; i < n; i++) {
        long double x = inp[i], c = 0.5L * (1.0L + erfl(x * SQRT1_2L));
        if (cdf)
            cdf[i] = (double)c;
        float y = (float)(double)(x * c);
        out[i] = dt != NP_FLOAT32 ? np_round_to(dt, y) : y;
    }
}

static void slow_gelu_backward(float *dinp, const float *dout, const float *inp, const double *cdf,
                               int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        long double x = inp[i];
        long double c = cdf ? (long double)cdf[i] : 0.5L * (1.0L + erfl(x * SQRT1_2L));
        dinp[i] = (float)(double)((long double)dout[i] * (c + x * INV_SQRT_2PIL * expl(-0.5L * x * x)));
    }
}

static int slow_linear_forward(float *out, const float *inp, const float *weight, const float *bias,
                               int64_t N, int64_t K, int64_t O, np_dtype dt, np_device dev)
{
    (void)dev;
    for (int64_t r = 0; r < N; r++)
        for (int64_t o = 0; o < O; o++) {
            double s = bias ? (double)bias[o] : 0.0;
            for (int64_t k = 0; k < K; k++)
                s += (double)inp[r * K + k] * (double)weight[o * K + k];
            out[r * O + o] = (float)s;
        }
    rt_round_buf(out, N * O, dt);
    return 0;
}

np_status np_slow_fault_apply(np_ctx *ctx, np_slow_fault_kind kind, np_error *err)
{
    if (!ctx)
        return np_error_set(err, NP_ERR_ARG, NULL, "fault", "no context");
    switch (kind) {
    case NP_SLOW_FAULT_GELU:
        ctx->k.gelu_forward = slow_gelu_forward;
        ctx->k.gelu_backward = slow_gelu_backward;
        return NP_OK;
    case NP_SLOW_FAULT_LINEAR:
        ctx->k.linear_forward = slow_linear_forward;
        return NP_OK;
    default:
        return np_error_set(err, NP_ERR_ARG, NULL, "fault", "not a slow fault: %d", (int)kind);
    }
}
