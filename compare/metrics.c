/* compare/metrics.c - msprobe's tensor metrics in one pass, in float64
 * (the relative error per element in the payloads' type, as msprobe):
 * Cosine, EucDist, MaxAbsErr, MaxRelativeErr, One Thousandth and Five
 * Thousandths Err Ratio, plus the relative L2 error nprobe's verdict uses.
 * Elements are processed in fixed blocks (read straight from the file with
 * pread when the storage allows, else from memory); OpenMP spreads the
 * blocks over threads and the per-block partials are combined in block
 * order, so the numbers do not depend on the thread count. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "internal.h"

#define BLOCK 32768                      /* elements per block */
#define REL_EPS 2.220446049250313e-16    /* float64 epsilon (numpy's finfo(float64).eps) */
#define REL_EPS32 1.1920928955078125e-07f /* float32 epsilon (numpy's finfo(float32).eps) */

typedef struct part {
    double dot, bb, cc, dd, max_abs, max_rel;
    int64_t n1, n5, masked, mismatch;
    uint32_t crc_b, crc_c;       /* a block's bytes (block_part; combine() leaves them) */
} part;

/* NaN = 1, +inf = 2, -inf = 3, finite = 0. */
static int fclass(double x)
{
    if (isnan(x))
        return 1;
    if (isinf(x))
        return x > 0 ? 2 : 3;
    return 0;
}

static void elem_slow(part *p, double b, double c)
{
    if (fclass(b) == fclass(c)) {
        p->masked++;
        p->n1++;
        p->n5++;
    } else {
        p->mismatch++;
    }
}

/* The relative error of one element, as msprobe 26 computes it: in the
 * result type of the two arrays (float32 when both sides are float32
 * payloads, else float64), with that type's epsilon added to both sides
 * where the bench is 0; the thousandths thresholds compared in that type
 * too (numpy compares a float32 array with float32(0.001)). */
static inline double rel_f64(double b, double c, double ad)
{
    int z = b == 0.0;
    double num = z ? fabs((c + REL_EPS) - REL_EPS) : ad;
    double den = z ? REL_EPS : fabs(b);
    return num / den;
}

static inline double rel_f32(double b, double c, double ad)
{
    (void)ad;
    float bf = (float)b, cf = (float)c;
    int z = bf == 0.0f;
    float nb = z ? cf + REL_EPS32 : cf, db = z ? REL_EPS32 : bf;
    return (double)fabsf((nb - db) / db);
}
#define T1_F64 0.001
#define T5_F64 0.005
#define T1_F32 ((double)0.001f)
#define T5_F32 ((double)0.005f)

/* The per-element body; b and c are finite or handled by elem_slow. */
#define KERNEL_BODY(LOADB, LOADC, REL, T1, T5)                                      \
    for (int64_t i = 0; i < n; i++) {                                               \
        double b = LOADB, c = LOADC;                                                \
        if (!isfinite(b) || !isfinite(c)) {                                         \
            elem_slow(&q, b, c);                                                    \
            continue;                                                               \
        }                                                                           \
        double d = c - b;                                                           \
        q.dot += b * c;                                                             \
        q.bb += b * b;                                                              \
        q.cc += c * c;                                                              \
        q.dd += d * d;                                                              \
        double ad = fabs(d);                                                        \
        if (ad > q.max_abs)                                                         \
            q.max_abs = ad;                                                         \
        double rel = REL(b, c, ad);                                                 \
        if (rel > q.max_rel)                                                        \
            q.max_rel = rel;                                                        \
        q.n1 += rel < T1;                                                           \
        q.n5 += rel < T5;                                                           \
    }

/* The vectorisable fast path. Each sub-block of SUB elements accumulates
 * into LANES independent partial sums per metric (lane j takes elements
 * i + j), written branch-free so GCC vectorises the inner loop at -O2/-O3
 * without fast-math; the lanes are then added in lane order, so the result
 * depends on the data and SUB/LANES only, never on the thread count. The
 * relative error keeps msprobe's exact definition (a true division, which
 * vectorises). Sub-blocks holding any NaN or Inf, and the ragged tail of a
 * block, go through KERNEL_BODY element by element. Counts are kept in
 * double lanes (exact below 2^53) so every lane has the same width. */
#define LANES 8
#define SUB 4096

/* Returns the number of non-finite elements seen (the part is then void). */
#define FAST_BODY(LOADB, LOADC, REL, T1, T5)                                        \
    double dot[LANES] = {0}, bb[LANES] = {0}, cc[LANES] = {0}, dd[LANES] = {0};      \
    double ma[LANES] = {0}, mr[LANES] = {0}, c1[LANES] = {0}, c5[LANES] = {0};       \
    double nf[LANES] = {0};                                                         \
    for (int64_t i0 = 0; i0 < n; i0 += LANES) {                                     \
        for (int j = 0; j < LANES; j++) {                                           \
            int64_t i = i0 + j;                                                     \
            double b = LOADB, c = LOADC;                                            \
            double d = c - b;                                                       \
            nf[j] += ((b - b) + (c - c)) == 0.0 ? 0.0 : 1.0;                        \
            dot[j] += b * c;                                                        \
            bb[j] += b * b;                                                         \
            cc[j] += c * c;                                                         \
            dd[j] += d * d;                                                         \
            double ad = fabs(d);                                                    \
            ma[j] = ad > ma[j] ? ad : ma[j];                                        \
            double rel = REL(b, c, ad);                                             \
            mr[j] = rel > mr[j] ? rel : mr[j];                                      \
            c1[j] += rel < T1 ? 1.0 : 0.0;                                          \
            c5[j] += rel < T5 ? 1.0 : 0.0;                                          \
        }                                                                           \
    }                                                                               \
    double bad = 0;                                                                 \
    part q = {0};                                                                   \
    for (int j = 0; j < LANES; j++) {                                               \
        bad += nf[j];                                                               \
        q.dot += dot[j];                                                            \
        q.bb += bb[j];                                                              \
        q.cc += cc[j];                                                              \
        q.dd += dd[j];                                                              \
        if (ma[j] > q.max_abs)                                                      \
            q.max_abs = ma[j];                                                      \
        if (mr[j] > q.max_rel)                                                      \
            q.max_rel = mr[j];                                                      \
        q.n1 += (int64_t)c1[j];                                                     \
        q.n5 += (int64_t)c5[j];                                                     \
    }                                                                               \
    *out = q;                                                                       \
    return bad != 0;

/* Slow exact kernels, element by element (non-finite values, tails). */
static void slow_ff(part *out, const float *pb, const float *pc, int64_t n)
{
    part q = {0};
    KERNEL_BODY((double)pb[i], (double)pc[i], rel_f32, T1_F32, T5_F32)
    *out = q;
}

static void slow_dd(part *out, const double *pb, const double *pc, int64_t n)
{
    part q = {0};
    KERNEL_BODY(pb[i], pc[i], rel_f64, T1_F64, T5_F64)
    *out = q;
}

static void slow_fd(part *out, const float *pb, const double *pc, int64_t n)
{
    part q = {0};
    KERNEL_BODY((double)pb[i], pc[i], rel_f64, T1_F64, T5_F64)
    *out = q;
}

static void slow_df(part *out, const double *pb, const float *pc, int64_t n)
{
    part q = {0};
    KERNEL_BODY(pb[i], (double)pc[i], rel_f64, T1_F64, T5_F64)
    *out = q;
}

/* n is a multiple of LANES. */
static int fast_ff(part *out, const float *restrict pb, const float *restrict pc, int64_t n)
{
    FAST_BODY((double)pb[i], (double)pc[i], rel_f32, T1_F32, T5_F32)
}

static int fast_dd(part *out, const double *restrict pb, const double *restrict pc, int64_t n)
{
    FAST_BODY(pb[i], pc[i], rel_f64, T1_F64, T5_F64)
}

static int fast_fd(part *out, const float *restrict pb, const double *restrict pc, int64_t n)
{
    FAST_BODY((double)pb[i], pc[i], rel_f64, T1_F64, T5_F64)
}

static int fast_df(part *out, const double *restrict pb, const float *restrict pc, int64_t n)
{
    FAST_BODY(pb[i], (double)pc[i], rel_f64, T1_F64, T5_F64)
}

static void combine(part *acc, const part *p);

/* One block: SUB-element sub-blocks on the fast path (falling back to the
 * exact element loop when a sub-block holds NaN/Inf), then the tail. */
#define KERN_BLOCK(NAME, TB, TC, FAST, SLOW)                                        \
    static void NAME(part *out, const TB *pb, const TC *pc, int64_t n)              \
    {                                                                               \
        part acc = {0}, p;                                                          \
        int64_t i = 0;                                                              \
        for (; i + LANES <= n; i += SUB) {                                          \
            int64_t m = n - i < SUB ? n - i : SUB;                                  \
            m -= m % LANES;                                                         \
            if (FAST(&p, pb + i, pc + i, m))                                        \
                SLOW(&p, pb + i, pc + i, m);                                        \
            combine(&acc, &p);                                                      \
            if (m < SUB) {                                                          \
                i += m;                                                             \
                break;                                                              \
            }                                                                       \
        }                                                                           \
        if (i < n) {                                                                \
            SLOW(&p, pb + i, pc + i, n - i);                                        \
            combine(&acc, &p);                                                      \
        }                                                                           \
        *out = acc;                                                                 \
    }

KERN_BLOCK(kern_ff, float, float, fast_ff, slow_ff)
KERN_BLOCK(kern_dd, double, double, fast_dd, slow_dd)
KERN_BLOCK(kern_fd, float, double, fast_fd, slow_fd)
KERN_BLOCK(kern_df, double, float, fast_df, slow_df)

/* Read elements [lo, lo+cnt) of a file source into buf (float32). */
/* Pointer to a block of a side: memory directly, or read into tmp. */
static const void *side_block(const cmp_src *s, int64_t lo, int64_t cnt, float *tmp, int *is_f64,
                              int *bad)
{
    *is_f64 = s->kind == CMP_SRC_MEM_F64 || s->kind == CMP_SRC_STREAM;
    if (s->kind == CMP_SRC_MEM_F32)
        return (const float *)s->mem + lo;
    if (*is_f64)
        return (const double *)s->mem + (lo - s->base);
    if (np_dumpio_read_f32(s->fd, s->segs, s->nseg, lo, cnt, tmp) != 0)
        *bad = 1;
    return tmp;
}

static int scaled_src(const cmp_src *s)
{
    return s->scale != 0 && s->scale != 1;
}

/* The block times s->scale, in tmp (which may already hold it: a file block). */
static const void *scale_block(const cmp_src *s, const void *p, int is_f64, int64_t cnt, void *tmp)
{
    if (!scaled_src(s))
        return p;
    if (is_f64) {
        const double *x = p;
        double *y = tmp;
        for (int64_t i = 0; i < cnt; i++)
            y[i] = x[i] * s->scale;
    } else {
        const float *x = p;
        float *y = tmp;
        for (int64_t i = 0; i < cnt; i++)
            y[i] = (float)((double)x[i] * s->scale);
    }
    return tmp;
}

static void block_part(part *out, const cmp_src *b, const cmp_src *c, int64_t lo, int64_t cnt,
                       float *tb, float *tc, int *bad)
{
    int fb, fc;
    const void *pb = side_block(b, lo, cnt, tb, &fb, bad);
    const void *pc = side_block(c, lo, cnt, tc, &fc, bad);
    if (*bad) {
        memset(out, 0, sizeof *out);
        return;
    }
    /* the payloads' crc32 on the stored bytes just read (in cache), in the
     * same pass; then the metrics, on the elements times their scale */
    uint32_t cb = b->crc ? np_crc32(0, pb, (size_t)cnt * (fb ? 8 : 4)) : 0;
    uint32_t cc = c->crc ? np_crc32(0, pc, (size_t)cnt * (fc ? 8 : 4)) : 0;
    pb = scale_block(b, pb, fb, cnt, tb);
    pc = scale_block(c, pc, fc, cnt, tc);
    if (!fb && !fc)
        kern_ff(out, pb, pc, cnt);
    else if (fb && fc)
        kern_dd(out, pb, pc, cnt);
    else if (!fb)
        kern_fd(out, pb, pc, cnt);
    else
        kern_df(out, pb, pc, cnt);
    out->crc_b = cb;
    out->crc_c = cc;
}

/* crc32 of a whole source from its blocks' crc32s, in block order: the
 * full blocks share one combination operator. */
static uint32_t crc_blocks(const part *parts, int64_t nb, int64_t n, size_t esize, int which)
{
    uLong op = crc32_combine_gen((z_off_t)((size_t)BLOCK * esize));
    uLong crc = 0;
    for (int64_t k = 0; k < nb; k++) {
        uLong x = which ? parts[k].crc_c : parts[k].crc_b;
        int64_t cnt = n - k * BLOCK < BLOCK ? n - k * BLOCK : BLOCK;
        if (k == 0)
            crc = x;
        else if (cnt == BLOCK)
            crc = crc32_combine_op(crc, x, op);
        else
            crc = crc32_combine(crc, x, (z_off_t)((size_t)cnt * esize));
    }
    return (uint32_t)crc;
}

static void combine(part *acc, const part *p)
{
    acc->dot += p->dot;
    acc->bb += p->bb;
    acc->cc += p->cc;
    acc->dd += p->dd;
    if (p->max_abs > acc->max_abs)
        acc->max_abs = p->max_abs;
    if (p->max_rel > acc->max_rel)
        acc->max_rel = p->max_rel;
    acc->n1 += p->n1;
    acc->n5 += p->n5;
    acc->masked += p->masked;
    acc->mismatch += p->mismatch;
}

static void finish(np_cmp_metrics *m, const part *q, int64_t n, int ndim, double atol)
{
    m->n = n;
    m->n_masked = q->masked;
    m->n_mask_mismatch = q->mismatch;
    m->note = "";
    if (n == 0) {
        m->note = "This is empty data, can not compare.";
        return;
    }
    if (q->mismatch) {
        m->note = "The position of inf or nan in NPU and bench Tensor do not match.";
        return;
    }
    m->max_abs_err = q->max_abs;
    m->max_rel_err = q->max_rel;
    m->euc_dist = sqrt(q->dd);
    m->bench_norm = sqrt(q->bb);
    m->cmp_norm = sqrt(q->cc);
    double floor = atol > 0 ? atol * sqrt((double)n) : 0.0;
    double den = m->bench_norm > floor ? m->bench_norm : floor;
    m->rel_l2 = den > 0 ? m->euc_dist / den : (m->euc_dist > 0 ? INFINITY : 0.0);
    if (ndim == 0) {
        m->note = "This is type of 0-d tensor, can not calculate 'Cosine', "
                  "'One Thousandth Err Ratio' and 'Five Thousandths Err Ratio'. ";
        return;
    }
    m->one_thousandth = (double)q->n1 / (double)n;
    m->five_thousandths = (double)q->n5 / (double)n;
    if (n == 1) {
        m->note = "This is a 1-d tensor of length 1.";
        return;
    }
    if (m->cmp_norm <= REL_EPS && m->bench_norm <= REL_EPS) {
        m->cosine = 1.0;
    } else if (m->cmp_norm <= REL_EPS) {
        m->note = "Cannot compare by Cosine Similarity, All the data is Zero in npu dump data.";
    } else if (m->bench_norm <= REL_EPS) {
        m->note = "Cannot compare by Cosine Similarity, All the data is Zero in Bench dump data.";
    } else {
        /* sqrt(cc * bb) rather than the product of the norms: identical
         * sides then give exactly 1 (sqrt of a rounded square is exact) */
        double p = q->cc * q->bb;
        double nn = isfinite(p) && p >= DBL_MIN ? sqrt(p) : m->cmp_norm * m->bench_norm;
        m->cosine = q->dot / nn;
        /* rounding can put |cos| a few ulp above 1 (Cauchy-Schwarz holds
         * exactly, the float64 sums do not): clamp */
        if (m->cosine > 1.0)
            m->cosine = 1.0;
        else if (m->cosine < -1.0)
            m->cosine = -1.0;
    }
}

static void metrics_nan(np_cmp_metrics *m)
{
    m->cosine = m->euc_dist = m->max_abs_err = m->max_rel_err = NAN;
    m->one_thousandth = m->five_thousandths = NAN;
    m->bench_norm = m->cmp_norm = m->rel_l2 = NAN;
    m->n = m->n_masked = m->n_mask_mismatch = 0;
    m->note = "";
}

/* Blocks [k0, k1) of n elements into parts[k0..k1), OpenMP over the
 * blocks; 1 when a read failed. */
static int run_blocks(part *parts, const cmp_src *b, const cmp_src *c, int64_t n, int64_t k0,
                      int64_t k1, size_t esz, int need_tmp)
{
    int bad = 0;
#pragma omp parallel
    {
        float *tb = NULL, *tc = NULL;
        int mybad = 0;
        if (need_tmp) {
            tb = malloc(BLOCK * esz);
            tc = malloc(BLOCK * esz);
            if (!tb || !tc)
                mybad = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t k = k0; k < k1; k++) {
            if (mybad)
                continue;
            int64_t lo = k * BLOCK, cnt = n - lo < BLOCK ? n - lo : BLOCK;
            block_part(&parts[k], b, c, lo, cnt, tb, tc, &mybad);
        }
        if (mybad) {
#pragma omp atomic write
            bad = 1;
        }
        free(tb);
        free(tc);
    }
    return bad;
}

/* Streamed sources: this many blocks' elements at a time (4 MB of float64
 * a side); a chunk is whole blocks, so every block's part is what the
 * whole tensor in memory gives. */
#define CHUNK (16 * (int64_t)BLOCK)

/* The chunk [lo, lo + cnt) of each streamed side into its buffer (s[k]'s
 * mem and base); 1 when a fill failed. */
static int fill_chunk(cmp_src *s[2], int64_t lo, int64_t cnt)
{
    for (int k = 0; k < 2; k++) {
        if (s[k]->kind != CMP_SRC_STREAM)
            continue;
        s[k]->base = lo;
        if (s[k]->fill(s[k]->user, lo, cnt, (double *)s[k]->mem) != 0)
            return 1;
    }
    return 0;
}

int cmp_metrics_src(np_cmp_metrics *m, const cmp_src *b, const cmp_src *c, int64_t n, int ndim,
                    double atol, uint32_t crc[2])
{
    if (crc)
        crc[0] = crc[1] = 0;
    metrics_nan(m);
    int64_t nb = (n + BLOCK - 1) / BLOCK;
    part acc = {0};
    int bad = 0;
    int need_tmp = b->kind == CMP_SRC_FILE_F32 || c->kind == CMP_SRC_FILE_F32 || scaled_src(b) ||
                   scaled_src(c);
    /* a scaled float64 block needs room for doubles */
    int f64 = b->kind == CMP_SRC_MEM_F64 || c->kind == CMP_SRC_MEM_F64 ||
              b->kind == CMP_SRC_STREAM || c->kind == CMP_SRC_STREAM;
    size_t esz = f64 ? sizeof(double) : sizeof(float);
    /* a streamed side: its elements a chunk at a time (the whole tensor when
     * it is one block) in a buffer of its own */
    cmp_src lb = *b, lc = *c, *sd[2] = {&lb, &lc};
    int64_t ch = nb <= 1 ? (n > 0 ? n : 1) : CHUNK;
    double *buf[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++)
        if (sd[k]->kind == CMP_SRC_STREAM) {
            sd[k]->crc = 0;
            if (!(buf[k] = malloc((size_t)ch * sizeof(double))))
                bad = 1;
            sd[k]->mem = buf[k];
        }
    if (nb <= 1) {
        float *tb = NULL, *tc = NULL;
        if (need_tmp && n > 0) {
            tb = malloc((size_t)n * esz);
            tc = malloc((size_t)n * esz);
            if (!tb || !tc)
                bad = 1;
        }
        if (!bad && n > 0)
            bad = fill_chunk(sd, 0, n);
        if (!bad && n > 0)
            block_part(&acc, &lb, &lc, 0, n, tb, tc, &bad);
        free(tb);
        free(tc);
        if (crc) {
            crc[0] = acc.crc_b;
            crc[1] = acc.crc_c;
        }
    } else {
        part *parts = bad ? NULL : calloc((size_t)nb, sizeof *parts);
        if (!parts)
            bad = 1;
        /* without a streamed side one chunk: the whole tensor */
        int64_t step = buf[0] || buf[1] ? CHUNK : n;
        for (int64_t lo = 0; !bad && lo < n; lo += step) {
            int64_t cnt = n - lo < step ? n - lo : step;
            bad = fill_chunk(sd, lo, cnt) ||
                  run_blocks(parts, &lb, &lc, n, lo / BLOCK, (lo + cnt + BLOCK - 1) / BLOCK, esz,
                             need_tmp);
        }
        for (int64_t k = 0; !bad && k < nb; k++)
            combine(&acc, &parts[k]);
        if (crc && !bad) {
            if (lb.crc)
                crc[0] = crc_blocks(parts, nb, n, lb.kind == CMP_SRC_MEM_F64 ? 8 : 4, 0);
            if (lc.crc)
                crc[1] = crc_blocks(parts, nb, n, lc.kind == CMP_SRC_MEM_F64 ? 8 : 4, 1);
        }
        free(parts);
    }
    free(buf[0]);
    free(buf[1]);
    if (bad)
        return -1;
    finish(m, &acc, n, ndim, atol);
    return 0;
}

void np_cmp_metrics_f32(np_cmp_metrics *out, const float *bench, const float *cmp, int64_t n,
                        int ndim, double atol)
{
    cmp_src b = {CMP_SRC_MEM_F32, bench, -1, NULL, 0, 0, 1.0, NULL, NULL, 0};
    cmp_src c = {CMP_SRC_MEM_F32, cmp, -1, NULL, 0, 0, 1.0, NULL, NULL, 0};
    if (cmp_metrics_src(out, &b, &c, n, ndim, atol, NULL) != 0)
        metrics_nan(out);
}

void np_cmp_metrics_f64(np_cmp_metrics *out, const double *bench, const double *cmp, int64_t n,
                        int ndim, double atol)
{
    cmp_src b = {CMP_SRC_MEM_F64, bench, -1, NULL, 0, 0, 1.0, NULL, NULL, 0};
    cmp_src c = {CMP_SRC_MEM_F64, cmp, -1, NULL, 0, 0, 1.0, NULL, NULL, 0};
    if (cmp_metrics_src(out, &b, &c, n, ndim, atol, NULL) != 0)
        metrics_nan(out);
}
