/* compare/payload.c - locate a leaf's payload in /data and feed it to the
 * metric kernel. Uncompressed little-endian float32 payloads (contiguous, or
 * chunked with whole trailing dimensions per chunk) are read straight from
 * the file with pread in parallel blocks, without a full-tensor buffer; any
 * other layout or type (compressed chunks, integers, float64) is read with
 * H5Dread into a reusable buffer that grows to the largest such tensor.
 * Safe to call from several OpenMP threads with their own buffers: the
 * HDF5 calls are serialised by a named critical section. */
#include <hdf5.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

void cmp_buffers_free(cmp_buffers *bufs)
{
    if (!bufs)
        return;
    free(bufs->b);
    free(bufs->c);
    memset(bufs, 0, sizeof *bufs);
}

/* File segments of an uncompressed float32 LE dataset, or 0 segments if the
 * storage does not allow direct reads. *segs is malloc'ed. */
static int direct_segments(hid_t ds, int64_t n, cmp_seg **segs)
{
    *segs = NULL;
    hid_t t = H5Dget_type(ds);
    int ok = t >= 0 && H5Tequal(t, H5T_IEEE_F32LE) > 0 && H5Tequal(H5T_NATIVE_FLOAT, H5T_IEEE_F32LE) > 0;
    if (t >= 0)
        H5Tclose(t);
    if (!ok || n <= 0)
        return 0;
    hid_t dcpl = H5Dget_create_plist(ds);
    if (dcpl < 0)
        return 0;
    H5D_layout_t layout = H5Pget_layout(dcpl);
    int nseg = 0;
    if (layout == H5D_CONTIGUOUS) {
        haddr_t a = H5Dget_offset(ds);
        if (a != HADDR_UNDEF && (*segs = malloc(sizeof **segs))) {
            (*segs)[0] = (cmp_seg){0, n, (uint64_t)a};
            nseg = 1;
        }
    } else if (layout == H5D_CHUNKED && H5Pget_nfilters(dcpl) == 0) {
        hid_t space = H5Dget_space(ds);
        int nd = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
        hsize_t dims[H5S_MAX_RANK], cdims[H5S_MAX_RANK];
        hsize_t nchunks = 0;
        int good = nd >= 1 && H5Sget_simple_extent_dims(space, dims, NULL) >= 0 &&
                   H5Pget_chunk(dcpl, nd, cdims) == nd &&
                   H5Dget_num_chunks(ds, space, &nchunks) >= 0 && nchunks > 0 &&
                   nchunks < (1u << 20);
        int64_t row = 1;
        for (int i = 1; good && i < nd; i++) {
            if (cdims[i] != dims[i])
                good = 0;
            row *= (int64_t)dims[i];
        }
        if (good && (*segs = malloc(nchunks * sizeof **segs))) {
            int64_t total = 0;
            for (hsize_t k = 0; k < nchunks; k++) {
                hsize_t off[H5S_MAX_RANK];
                unsigned mask = 0;
                haddr_t addr = HADDR_UNDEF;
                hsize_t size = 0;
                if (H5Dget_chunk_info(ds, space, k, off, &mask, &addr, &size) < 0 ||
                    addr == HADDR_UNDEF || mask != 0) {
                    good = 0;
                    break;
                }
                int64_t rows = (int64_t)cdims[0];
                if ((int64_t)(off[0] + cdims[0]) > (int64_t)dims[0])
                    rows = (int64_t)(dims[0] - off[0]);
                (*segs)[k] = (cmp_seg){(int64_t)off[0] * row, rows * row, (uint64_t)addr};
                total += rows * row;
            }
            if (good && total == n)
                nseg = (int)nchunks;
        }
        if (space >= 0)
            H5Sclose(space);
    }
    H5Pclose(dcpl);
    if (!nseg) {
        free(*segs);
        *segs = NULL;
    }
    return nseg;
}

static int host_little_endian(void)
{
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* Read a whole dataset into *buf (grown as needed): a 4-byte float as
 * float32, another float as float64, an integer (int8..int64, uint8 for
 * bool) as its own bytes, whose crc32 is taken there, then widened to
 * float64 in place. *verify says how the stored bytes can be checked
 * against /entries' crc32: 0 not (not little-endian, unknown class), 1 on
 * the blocks read for the metrics (the buffer holds the stored bytes),
 * 2 the crc32 is in *crc already (integers). */
static int read_whole(hid_t ds, int64_t n, void **buf, size_t *cap, int *is_f64, int *verify,
                      uint32_t *crc)
{
    hid_t t = H5Dget_type(ds);
    if (t < 0)
        return -1;
    H5T_class_t cls = H5Tget_class(t);
    size_t sz = H5Tget_size(t);
    int le = host_little_endian() && (sz == 1 || H5Tget_order(t) == H5T_ORDER_LE);
    int is_signed = cls == H5T_INTEGER && H5Tget_sign(t) == H5T_SGN_2;
    H5Tclose(t);
    *is_f64 = !(cls == H5T_FLOAT && sz == 4);
    *verify = 0;
    *crc = 0;
    size_t need = (size_t)(n > 0 ? n : 1) * (*is_f64 ? sizeof(double) : sizeof(float));
    if (need > *cap) {
        void *p = realloc(*buf, need);
        if (!p)
            return -1;
        *buf = p;
        *cap = need;
    }
    hid_t mt = -1;
    if (cls == H5T_INTEGER && le) {
        if (sz == 1)
            mt = is_signed ? H5T_NATIVE_INT8 : H5T_NATIVE_UINT8;
        else if (sz == 2)
            mt = is_signed ? H5T_NATIVE_INT16 : H5T_NATIVE_UINT16;
        else if (sz == 4)
            mt = is_signed ? H5T_NATIVE_INT32 : H5T_NATIVE_UINT32;
        else if (sz == 8)
            mt = is_signed ? H5T_NATIVE_INT64 : H5T_NATIVE_UINT64;
    }
    if (mt >= 0) {
        *verify = 2;
        if (n == 0)
            return 0;
        if (H5Dread(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, *buf) < 0)
            return -1;
        *crc = np_crc32(0, *buf, (size_t)n * sz);
        /* widen to float64 in place, last element first: element i's double
         * (bytes 8i..8i+7) only covers source bytes of elements >= i */
        unsigned char *base = *buf;
        for (int64_t i = n - 1; i >= 0; i--) {
            const unsigned char *src = base + (size_t)i * sz;
            double v;
            if (sz == 1) {
                v = is_signed ? (double)(int8_t)src[0] : (double)src[0];
            } else if (sz == 2) {
                uint16_t x;
                memcpy(&x, src, 2);
                v = is_signed ? (double)(int16_t)x : (double)x;
            } else if (sz == 4) {
                uint32_t x;
                memcpy(&x, src, 4);
                v = is_signed ? (double)(int32_t)x : (double)x;
            } else {
                uint64_t x;
                memcpy(&x, src, 8);
                v = is_signed ? (double)(int64_t)x : (double)x;
            }
            memcpy(base + (size_t)i * sizeof(double), &v, sizeof v);
        }
        return 0;
    }
    if (cls == H5T_FLOAT && le && (sz == 4 || sz == 8))
        *verify = 1; /* read as they are stored: the metric blocks hold the stored bytes */
    if (n == 0)
        return 0;
    return H5Dread(ds, *is_f64 ? H5T_NATIVE_DOUBLE : H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL,
                   H5P_DEFAULT, *buf) < 0 ? -1 : 0;
}

static np_status open_payload(hid_t *ds, cmp_dump *d, const np_cmp_side *s, np_error *err)
{
    *ds = -1;
    if (d->data_group < 0 || H5Lexists(d->data_group, s->name, H5P_DEFAULT) <= 0)
        return np_error_set(err, NP_ERR_NOTFOUND, d->path, s->name,
                            "/entries says the payload is stored, but /data has no such dataset");
    *ds = H5Dopen2(d->data_group, s->name, H5P_DEFAULT);
    if (*ds < 0)
        return np_error_set(err, NP_ERR_FORMAT, d->path, s->name, "cannot open the payload dataset");
    hid_t space = H5Dget_space(*ds);
    hssize_t npts = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
    if (space >= 0)
        H5Sclose(space);
    if (npts != (hssize_t)s->numel) {
        H5Dclose(*ds);
        *ds = -1;
        return np_error_set(err, NP_ERR_FORMAT, d->path, s->name,
                            "payload has %lld elements, /entries says numel %lld", (long long)npts,
                            (long long)s->numel);
    }
    return NP_OK;
}

void cmp_payload_walk(cmp_dump *d)
{
    np_error e;
    for (size_t i = 0; i < d->n_entries; i++) {
        const np_cmp_side *s = &d->entries[i];
        if (!s->has_data)
            continue;
        hid_t ds = -1;
        np_error_clear(&e);
        if (open_payload(&ds, d, s, &e) != NP_OK)
            continue;
        cmp_seg *segs = NULL;
        direct_segments(ds, s->numel, &segs);
        free(segs);
        H5Dclose(ds);
    }
}

/* The crc32 check of one side: 1 when it was checked and does not match. */
static int crc_differs(int verify, uint32_t pre, uint32_t computed, const np_cmp_side *s,
                       uint32_t *got)
{
    *got = verify == 2 ? pre : computed;
    return verify && *got != s->crc32;
}

np_status cmp_payload_metrics(np_cmp_metrics *m, cmp_dump *bd, const np_cmp_side *bs, cmp_dump *cd,
                              const np_cmp_side *cs, double atol, cmp_buffers *bufs,
                              uint64_t *bytes, int *corrupt, np_error *err)
{
    hid_t dsb = -1, dsc = -1;
    cmp_seg *segb = NULL, *segc = NULL;
    np_status st = NP_OK;
    int64_t n = cs->numel;
    cmp_src sb = {0}, sc = {0};
    int vb = 0, vc = 0;           /* how each side's crc32 is checked (read_whole) */
    uint32_t pre_b = 0, pre_c = 0;
    if (corrupt)
        *corrupt = 0;
    /* HDF5 (a serial build) is entered by one thread at a time; the payload
     * reads that follow (pread) and the metrics run outside the lock. */
#pragma omp critical(np_cmp_hdf5)
    {
        st = open_payload(&dsb, bd, bs, err);
        if (st == NP_OK)
            st = open_payload(&dsc, cd, cs, err);
        if (st == NP_OK) {
            int nb = bd->fd >= 0 ? direct_segments(dsb, n, &segb) : 0;
            int nc = cd->fd >= 0 ? direct_segments(dsc, n, &segc) : 0;
            int f64 = 0;
            if (nb) {
                sb = (cmp_src){CMP_SRC_FILE_F32, NULL, bd->fd, segb, nb, 1, 1.0};
                vb = 1;
            } else if (read_whole(dsb, n, &bufs->b, &bufs->cap_b, &f64, &vb, &pre_b) == 0) {
                sb = (cmp_src){f64 ? CMP_SRC_MEM_F64 : CMP_SRC_MEM_F32, bufs->b, -1, NULL, 0, vb == 1, 1.0};
            } else {
                st = np_error_set(err, NP_ERR_FORMAT, bd->path, bs->name,
                                  "cannot read the payload (truncated or corrupt file)");
            }
            if (st == NP_OK) {
                if (nc) {
                    sc = (cmp_src){CMP_SRC_FILE_F32, NULL, cd->fd, segc, nc, 1, 1.0};
                    vc = 1;
                } else if (read_whole(dsc, n, &bufs->c, &bufs->cap_c, &f64, &vc, &pre_c) == 0) {
                    sc = (cmp_src){f64 ? CMP_SRC_MEM_F64 : CMP_SRC_MEM_F32, bufs->c, -1, NULL, 0,
                                   vc == 1, 1.0};
                } else {
                    st = np_error_set(err, NP_ERR_FORMAT, cd->path, cs->name,
                                      "cannot read the payload (truncated or corrupt file)");
                }
            }
        }
        if (dsb >= 0)
            H5Dclose(dsb);
        if (dsc >= 0)
            H5Dclose(dsc);
    }
    if (st == NP_OK) {
        /* gradients are compared divided by the loss scale of their step */
        sb.scale = cmp_side_is_grad(bs) ? 1.0 / bd->loss_scale : 1.0;
        sc.scale = cmp_side_is_grad(cs) ? 1.0 / cd->loss_scale : 1.0;
        uint32_t crc[2];
        if (cmp_metrics_src(m, &sb, &sc, n, cs->ndim, atol, crc) != 0) {
            st = np_error_set(err, NP_ERR_IO, cd->path, cs->name,
                              "reading the payload failed (truncated file?) on one side "
                              "(bench %s)", bd->path);
        } else {
            if (bytes) {
                size_t eb = sb.kind == CMP_SRC_MEM_F64 ? 8 : 4, ec = sc.kind == CMP_SRC_MEM_F64 ? 8 : 4;
                *bytes += (uint64_t)n * (eb + ec);
            }
            uint32_t gb, gc;
            int bad_b = crc_differs(vb, pre_b, crc[0], bs, &gb);
            int bad_c = crc_differs(vc, pre_c, crc[1], cs, &gc);
            if (bad_b && bad_c)
                st = np_error_set(err, NP_ERR_FORMAT, bd->path, bs->name,
                                  "the stored bytes of both payloads do not match their crc32 in "
                                  "/entries (file corrupt): bench crc32 %08x, /entries %08x; cmp "
                                  "(%s) crc32 %08x, /entries %08x",
                                  (unsigned)gb, (unsigned)bs->crc32, cd->path, (unsigned)gc,
                                  (unsigned)cs->crc32);
            else if (bad_b || bad_c)
                st = np_error_set(err, NP_ERR_FORMAT, bad_b ? bd->path : cd->path,
                                  bad_b ? bs->name : cs->name,
                                  "the stored bytes of the %s payload do not match their crc32 in "
                                  "/entries (file corrupt): crc32 %08x, /entries %08x",
                                  bad_b ? "bench" : "cmp", (unsigned)(bad_b ? gb : gc),
                                  (unsigned)(bad_b ? bs->crc32 : cs->crc32));
            if ((bad_b || bad_c) && corrupt)
                *corrupt = 1;
        }
    }
    free(segb);
    free(segc);
    return st;
}
