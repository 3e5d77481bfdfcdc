/* runtime/rt_internal.h - private structures of the runtime core: the
 * context, the step arena, tape nodes, module calls, and the helpers every
 * op source uses (node building, event emission, GEMM, rounding). */
#ifndef NPROBE_RT_INTERNAL_H
#define NPROBE_RT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "nprobe/lowp.h"
#include "nprobe/ops.h"
#include "nprobe/runtime.h"

/* Ops are named by np_op (include/internal/nprobe/ops.h), the one op identity. */

/* ---- tensors ----------------------------------------------------------- */
typedef struct rt_tensor {
    np_tensor t;
    int persistent;     /* 1: malloc'd, lives until freed; 0: arena */
    int is_param;
    char *name_copy;    /* persistent name storage */
} rt_tensor;

#define RT_T(t) ((rt_tensor *)(t)->rt)

/* ---- tape ---------------------------------------------------------------- */
enum { RT_NODE_API = 0, RT_NODE_MOD_BEGIN, RT_NODE_MOD_END, RT_NODE_QUIET };
#define RT_MAX_IN 4
#define RT_MAX_SC 16 /* 10 of them: a low-precision GEMM's quantization statistics (lowp.c) */

/* Where an API or module call was made: a preformatted string (np_ctx_set_callsite)
 * or file/line/function (np_ctx_set_callsite_at, all static storage), formatted
 * "basename:LINE function" only when an event is emitted. */
typedef struct rt_site {
    const char *str;
    const char *file, *func;
    int line;
} rt_site;

typedef struct rt_node rt_node;
/* gout[j]: gradient at output j (NULL = none; never all NULL); gin[i]: float32
 * buffer to fill with the contribution for input i, NULL when input i needs
 * no gradient; zeroed unless bit i of the node's gin_full is set. */
typedef void (*rt_bwd_fn)(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin);

struct rt_node {
    int kind;
    int op;
    int n;              /* API counter */
    int mcall;          /* API: enclosing module call (-1); markers: their call */
    int record;         /* goes on the tape */
    np_tensor *in[RT_MAX_IN];
    int n_in;
    np_tensor **out;
    int n_out;
    np_tensor *out1;
    np_dtype gdt[RT_MAX_IN]; /* dtype input grads are rounded to */
    np_hook_scalar sc[RT_MAX_SC];
    int n_sc;
    const void *st;     /* the op's saved state for backward: one typed struct per op (arena) */
    int gin_full;       /* bit i: bwd writes every element of gin[i] (no zeroing needed) */
    rt_bwd_fn bwd;
    rt_site site;       /* callsite of the call (forward and backward events) */
    unsigned declined;  /* bit i: observer i declined the forward call (before event) */
    const rt_kernels *k; /* the kernels of this call (ctx->k, or a promotion fault's: promote.c) */
};

typedef struct rt_mcall {
    np_module *m;
    int n;
    int parent;
    char *fwd_name, *bwd_name;
    np_tensor **in, **out;
    int n_in, n_out;
    float **swap;       /* (n_in) grads of the inputs set aside while this call's backward runs */
    rt_site site;       /* where the module was called */
    unsigned declined_fwd, declined_bwd; /* bit i: observer i declined this call's forward /
                                          * backward (its before event) */
} rt_mcall;

struct np_module {
    np_ctx *ctx;
    char *path, *cls, *name;
    int counter;
    int n_params, cap_params;
    char **keys;
    np_tensor **params;
};

typedef struct rt_slab {
    char *base;
    size_t size, used;
} rt_slab;

#define RT_MAX_SLABS 64

struct np_ctx {
    np_ctx_opts o;
    np_fault fault;     /* active fault */
    rt_kernels k;       /* the kernels a fault can act on: the reference, or the fault's (kernels.h) */
    np_observer obs[NP_CTX_MAX_OBSERVERS]; /* in calling order */
    int obs_hook[NP_CTX_MAX_OBSERVERS];    /* 1: the np_ctx_set_hook one */
    int n_obs;          /* observers; 0: nobody listens, no event is formatted */
    int n_before;       /* observers with a before callback */
    double loss_scale;  /* carried by NP_EV_STEP_BEGIN (np_ctx_set_loss_scale) */
    int micro_batch;    /* np_ctx_set_micro_batch, -1 outside micro-batches */
    int stop;
    np_error err;
    int grad_enabled;
    rt_site site;       /* pending callsite, consumed by the next API or module call */
    char site_buf[256]; /* the formatted callsite of the event being emitted */
    int step, seq, in_step;
    int counters[NP_OP_COUNT];  /* per API name: np_op */
    rt_slab slabs[RT_MAX_SLABS];
    int n_slabs, cur_slab;
    rt_node *nodes;
    int n_nodes, cap_nodes;
    rt_mcall *mc;
    int n_mc, cap_mc, cur_mc;
    rt_tensor **pers;
    int n_pers, cap_pers;
    np_tensor **params;
    int n_params, cap_params;
    np_module **mods;
    int n_mods, cap_mods;
    char name[512];
    np_lowp_stats lowp_st[2]; /* the last GEMM's operands as quantized (lowp.c): input, weight */
    rt_kernels kp;            /* ctx->k with the promotion fault's kernels (promote.c) */
    char *fp32_buf;           /* the per-op overrides, split (promote.c) */
    const char **fp32_ent;
    int n_fp32;
    int ac_off;               /* autocast disabled (model_moe.c's router): rt_ac is float32 */
};

/* A tape node without events and without an API counter (model_tp.c: the
 * tensor-parallel communication, which the single process does not have,
 * so the names of every other call stay those of one process). Its
 * backward runs nd->bwd like any node's, without events. */
void rt_quiet_init(np_ctx *ctx, rt_node *nd, np_tensor *const *in, int n_in);
np_tensor *rt_finish_quiet(np_ctx *ctx, rt_node *nd, np_tensor *out, rt_bwd_fn bwd);

/* A pipeline stage's backward (model_pp.c): the gradient of `root` set to
 * g (root->numel floats, copied; NULL: `seed` everywhere, as
 * np_backward_seed), then tape nodes [lo, hi) run backward, last first;
 * the tape is kept (several micro-batches' ranges run in turn; the step's
 * end clears it). */
np_status rt_backward_range(np_ctx *ctx, np_tensor *root, const float *g, float seed, int lo, int hi);

/* ---- helpers (ctx.c) ---------------------------------------------------- */
void *rt_alloc(np_ctx *ctx, size_t bytes);   /* arena, 64-byte aligned, uninitialised; NULL + ctx error */
void *rt_calloc(np_ctx *ctx, size_t bytes);
/* Arena tensor with uninitialised data. */
np_tensor *rt_new(np_ctx *ctx, np_dtype dt, int ndim, const int64_t *shape);
/* Arena header aliasing `data` with `like`'s shape. */
np_tensor *rt_wrap(np_ctx *ctx, const np_tensor *like, void *data, np_dtype dt);
/* Record an error in ctx (first wins); returns NULL for `return rt_fail(...)`. */
void *rt_fail(np_ctx *ctx, np_status st, const char *key, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
/* Autocast dtype in force (NP_FLOAT32 when off). */
np_dtype rt_ac(const np_ctx *ctx);
/* Promotion of two logical dtypes (equal -> same, else float32). */
np_dtype rt_promote(np_dtype a, np_dtype b);
/* Input data rounded to dt (a copy in the arena), or the data itself when no
 * rounding is needed. */
float *rt_rounded(np_ctx *ctx, const np_tensor *t, np_dtype dt);
/* A GEMM operand (outer, K, inner; K the reduction dim) quantized to the
 * context's low-precision format (a copy in the arena), or src itself when
 * lowp is off (lowp.c). is_weight: the weight/right operand. */
const float *rt_lowp_operand(np_ctx *ctx, int is_weight, const float *src, int64_t outer, int64_t K,
                             int64_t inner);
/* The quantization statistics of the operands of the GEMM just quantized,
 * as the node's scalars lowp_{x,w}_{underflow,saturation,mse,scale_min,
 * scale_max} (no-op when lowp is off; lowp.c). */
void rt_lowp_scalars(np_ctx *ctx, rt_node *nd);
/* The same for linear's backward GEMMs (lowp_backward): src (outer, K,
 * inner) quantized along K into the arena, no statistics; is_grad: the
 * gradient (where lowp_bwd_underflow acts). */
const float *rt_lowp_bwd_operand(np_ctx *ctx, int is_grad, const float *src, int64_t outer, int64_t K,
                                 int64_t inner);
/* Per-op overrides (promote.c): parse o.fp32_ops (-1: no memory), free;
 * nonzero when the next call of op (counter ctx->counters[op], the current
 * module calls) is listed: it runs in float32 inside autocast; 1 listed by
 * API name or call (its output cast back to the autocast dtype), 2 inside
 * a listed module (its output kept float32, as the package does). */
int rt_fp32_setup(np_ctx *ctx);
void rt_fp32_free(np_ctx *ctx);
int rt_promoted(const np_ctx *ctx, int op);
/* The kernels the next call of op runs: ctx->kp where a promotion fault
 * acts on op under autocast and op is not promoted, else ctx->k. */
const rt_kernels *rt_kern(const np_ctx *ctx, int op);
void rt_prec_kernels(rt_kernels *kp, const rt_kernels *k, int f);
/* Round n floats in place to dt (no-op for float32; numeric.c). */
void rt_round_buf(float *p, int64_t n, np_dtype dt);
/* The random generator's mixing function (splitmix64's finaliser; numeric.c). */
uint64_t rt_mix64(uint64_t z);
/* 1 if t is floating, non-NULL; sets ctx error naming `what` otherwise. */
int rt_need_float(np_ctx *ctx, const np_tensor *t, const char *api, const char *what);

/* Start a node for op with inputs (n counter assigned, record decided). */
void rt_node_init(np_ctx *ctx, rt_node *nd, np_op op, np_tensor *const *in, int n_in);
void rt_node_scalar(rt_node *nd, const char *key, double v);
/* Finish: mark outputs, push on the tape when recording, emit the forward
 * event. Returns out (single output form). */
np_tensor *rt_finish(np_ctx *ctx, rt_node *nd, np_tensor *out, rt_bwd_fn bwd);
void rt_finish_multi(np_ctx *ctx, rt_node *nd, np_tensor **outs, int n_out, rt_bwd_fn bwd);

/* ---- GEMM (gemm.c) ------------------------------------------------------- */
/* Row-major C (M,N) = beta*C + op(A) op(B); op(A) (M,K), op(B) (K,N).
 * cpu: cblas_sgemm on fixed panels; npu-sim: blocked accumulation (K blocks
 * of 64 combined pairwise), own kernel. No context: 0, or -1 when npu-sim
 * has no memory for the contiguous copy of a transposed operand. */
int rt_gemm_dev(np_device dev, int transA, int transB, int M, int N, int K, const float *A, int lda,
                const float *B, int ldb, float beta, float *C, int ldc);

/* Once per process: OpenBLAS kernel choice (see gemm.c) and OpenBLAS
 * single-threaded (rt_gemm_dev parallelises with OpenMP). */
void rt_blas_setup(void);


/* OpenMP thresholds (elements): below them a kernel runs on the calling
 * thread. A parallel region costs a few microseconds when the other thread
 * spins, but 20-80 us when it sleeps (OMP_WAIT_POLICY=PASSIVE, or a busy
 * machine) and has to be woken; a kernel is split only when its serial time
 * is well above that. RT_PAR_MIN for kernels doing some arithmetic per
 * element (~32k elements is ~100 us), RT_PAR_EW for plain copies, adds and
 * scales (memory-bound, ~1 MiB). Measured in docs/PERFORMANCE.md. */
/* rt_par_all (test knob, numeric.c: rt_set_par_all): when non-zero every kernel
 * takes its OpenMP path whatever its size (thresholds 0, GEMM panels and the
 * optimizer's loops included), so a small graph exercises the parallel code
 * and the 1-vs-N-thread determinism tests can fail. Set it before running;
 * it is read, never written, by the kernels. */
extern int rt_par_all;
void rt_set_par_all(int on);
#define RT_PAR_MIN (rt_par_all ? 0 : 32768)
#define RT_PAR_EW (rt_par_all ? 0 : (1 << 18))

#endif
