/* probe/view.c - a framework's tensor view (nprobe/probe.h, np_tensor_view)
 * turned into the np_tensor the probe records: read in place when the view
 * is contiguous and its storage is the dump's (float32, float64, int64,
 * int32, bool); otherwise gathered (strides, byte offset) and, for
 * bfloat16/float16, widened to the float32 the dump stores, into a buffer
 * the probe owns and reuses. */
#include <stdlib.h>
#include <string.h>

#include "nprobe/lowp.h"
#include "probe_internal.h"

size_t np_view_element_size(np_dtype dt)
{
    switch (dt) {
    case NP_BFLOAT16:
    case NP_FLOAT16: return 2;
    case NP_FLOAT32:
    case NP_INT32: return 4;
    case NP_FLOAT64:
    case NP_INT64: return 8;
    case NP_BOOL:
    case NP_FLOAT8_E4M3FN:
    case NP_FLOAT8_E5M2:
    case NP_HIFLOAT8: return 1;
    default: return 0;
    }
}

static int is_contiguous(const np_tensor_view *v)
{
    if (!v->strides)
        return 1;
    int64_t want = 1;
    for (int d = v->ndim - 1; d >= 0; d--) {
        if (v->shape[d] != 1 && v->strides[d] != want)
            return 0;
        want *= v->shape[d];
    }
    return 1;
}

/* Convert n elements of view storage at `src` (element stride `st`) into
 * dump storage at `dst`; one typed loop per storage size (a memcpy per
 * element was the cost of every strided view). */
static void convert_run(void *dst, const unsigned char *src, int64_t st, int64_t n, np_dtype dt,
                        size_t es)
{
    if (dt == NP_BFLOAT16) {
        float *o = dst;
        const uint16_t *s = (const uint16_t *)(const void *)src;
        for (int64_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)s[i * st] << 16;
            memcpy(&o[i], &u, 4);
        }
    } else if (dt == NP_FLOAT16) {
        float *o = dst;
        const uint16_t *s = (const uint16_t *)(const void *)src;
        for (int64_t i = 0; i < n; i++)
            o[i] = np_f16_bits_to_f32(s[i * st]);
    } else if (dt == NP_FLOAT8_E4M3FN || dt == NP_FLOAT8_E5M2 || dt == NP_HIFLOAT8) {
        /* the 8-bit codes decoded through a table (nprobe/lowp.h) */
        np_fp8_kind k = dt == NP_FLOAT8_E4M3FN ? NP_FP8_E4M3 : dt == NP_FLOAT8_E5M2 ? NP_FP8_E5M2 : NP_FP8_HIF8;
        float lut[256];
        for (int c = 0; c < 256; c++)
            lut[c] = (float)np_fp8_decode(k, (uint8_t)c);
        float *o = dst;
        for (int64_t i = 0; i < n; i++)
            o[i] = lut[src[i * st]];
    } else if (st == 1) {
        memcpy(dst, src, (size_t)n * es);
    } else if (es == 4) {
        uint32_t *o = dst;
        const uint32_t *s = (const uint32_t *)(const void *)src;
        for (int64_t i = 0; i < n; i++)
            o[i] = s[i * st];
    } else if (es == 8) {
        uint64_t *o = dst;
        const uint64_t *s = (const uint64_t *)(const void *)src;
        for (int64_t i = 0; i < n; i++)
            o[i] = s[i * st];
    } else {
        unsigned char *o = dst;
        for (int64_t i = 0; i < n; i++)
            o[i] = src[i * st];
    }
}

/* Row-major walk over every index of the view, one innermost run at a time. */
static void gather(void *dst, const np_tensor_view *v, const unsigned char *base, size_t es_view,
                   size_t es_store)
{
    int nd = v->ndim;
    int64_t inner = nd ? v->shape[nd - 1] : 1;
    int64_t ist = nd ? (v->strides ? v->strides[nd - 1] : 1) : 1;
    int64_t idx[NP_MAX_DIMS] = {0};
    int64_t cstr[NP_MAX_DIMS];
    int64_t acc = 1;
    for (int d = nd - 1; d >= 0; d--) {
        cstr[d] = v->strides ? v->strides[d] : acc;
        acc *= v->shape[d];
    }
    int64_t runs = inner ? acc / inner : 0;
    if (nd == 0)
        runs = 1;
    unsigned char *o = dst;
    for (int64_t r = 0; r < runs; r++) {
        int64_t off = 0;
        for (int d = 0; d < nd - 1; d++)
            off += idx[d] * cstr[d];
        convert_run(o, base + off * (int64_t)es_view, ist, inner, v->dtype, es_view);
        o += (size_t)inner * es_store;
        for (int d = nd - 2; d >= 0; d--) {
            if (++idx[d] < v->shape[d])
                break;
            idx[d] = 0;
        }
    }
}

int probe_view_block(const np_tensor_view *v, probe_block_view *out)
{
    if (!v || v->size < sizeof *v || (unsigned)v->dtype >= NP_DTYPE_COUNT ||
        np_view_element_size(v->dtype) == 0 || v->ndim < 0 || v->ndim > NP_MAX_DIMS ||
        (v->ndim > 0 && !v->shape) || !v->data)
        return 0;
    /* the dimensions of size > 1, by increasing stride (insertion sort) */
    int64_t sz[NP_MAX_DIMS], st[NP_MAX_DIMS];
    int m = 0;
    int64_t numel = 1;
    for (int d = 0; d < v->ndim; d++) {
        if (v->shape[d] <= 0)
            return 0;
        numel *= v->shape[d];
        if (v->shape[d] == 1)
            continue;
        int64_t s = v->strides ? v->strides[d] : 0;
        int j = m++;
        for (; j > 0 && st[j - 1] > s; j--) {
            st[j] = st[j - 1];
            sz[j] = sz[j - 1];
        }
        st[j] = s;
        sz[j] = v->shape[d];
    }
    if (v->strides) {
        /* dense: the smallest stride 1, each next the span of those below
         * (then every stride is positive and the block starts at the view's
         * first element) */
        int64_t want = 1;
        for (int i = 0; i < m; i++) {
            if (st[i] != want)
                return 0;
            want *= sz[i];
        }
    }
    out->numel = numel;
    out->v = *v;
    out->v.ndim = 1;
    out->v.shape = &out->numel;
    out->v.strides = NULL;
    return 1;
}

np_status probe_view_tensor(np_tensor *out, const np_tensor_view *v, void **buf, size_t *cap,
                            const char *leaf, np_error *err)
{
    memset(out, 0, sizeof *out);
    if (!v || v->size < sizeof *v)
        return np_error_set(err, NP_ERR_ARG, NULL, leaf,
                            "tensor view: size field %zu, expected %zu (sizeof np_tensor_view)",
                            v ? v->size : 0, sizeof *v);
    size_t es_view = np_view_element_size(v->dtype);
    if ((unsigned)v->dtype >= NP_DTYPE_COUNT || es_view == 0)
        return np_error_set(err, NP_ERR_DTYPE, NULL, leaf, "tensor view: unknown dtype %d",
                            (int)v->dtype);
    if (v->ndim < 0 || v->ndim > NP_MAX_DIMS || (v->ndim > 0 && !v->shape))
        return np_error_set(err, NP_ERR_SHAPE, NULL, leaf,
                            "tensor view: ndim %d, expected 0..%d with a shape", v->ndim,
                            NP_MAX_DIMS);
    int64_t numel = 1;
    for (int d = 0; d < v->ndim; d++) {
        if (v->shape[d] < 0)
            return np_error_set(err, NP_ERR_SHAPE, NULL, leaf,
                                "tensor view: dimension %d is %lld, expected >= 0", d,
                                (long long)v->shape[d]);
        numel *= v->shape[d];
        out->shape[d] = v->shape[d];
    }
    if (numel > 0 && !v->data)
        return np_error_set(err, NP_ERR_ARG, NULL, leaf, "tensor view without data");
    out->dtype = v->dtype;
    out->ndim = v->ndim;
    out->numel = numel;
    out->requires_grad = v->requires_grad;
    if (numel == 0)
        return NP_OK;
    const unsigned char *base = (const unsigned char *)v->data + v->byte_offset;
    size_t es_store = np_dtype_storage_size(v->dtype);
    if (es_view == es_store && is_contiguous(v)) {
        out->data = (void *)(uintptr_t)base;
        return NP_OK;
    }
    size_t need = (size_t)numel * es_store;
    if (*cap < need) {
        void *nb = realloc(*buf, need);
        if (!nb)
            return np_error_set(err, NP_ERR_NOMEM, NULL, leaf,
                                "out of memory converting a %zu-byte tensor view", need);
        *buf = nb;
        *cap = need;
    }
    if (is_contiguous(v))
        convert_run(*buf, base, 1, numel, v->dtype, es_view);
    else
        gather(*buf, v, base, es_view, es_store);
    out->data = *buf;
    return NP_OK;
}
