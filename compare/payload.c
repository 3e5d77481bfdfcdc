/* compare/payload.c - a leaf's payload, as np_dumpio gives it, fed to the
 * metric kernel. Payloads stored as raw little-endian float32 are read by
 * the kernel itself with pread in parallel blocks, without a full-tensor
 * buffer; any other layout or type arrives as float32 or float64 in a
 * reusable buffer that grows to the largest such tensor. Safe to call from
 * several OpenMP threads with their own buffers (np_dumpio serialises what
 * its sources need). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

void cmp_buffers_free(cmp_buffers *bufs)
{
    if (!bufs)
        return;
    np_dumpio_buf_free(&bufs->b);
    np_dumpio_buf_free(&bufs->c);
}

/* The metric source of a payload. */
static cmp_src src_of(const np_dumpio_payload *p)
{
    cmp_src s = {0};
    s.kind = p->form == NP_DUMPIO_FILE_F32  ? CMP_SRC_FILE_F32
             : p->form == NP_DUMPIO_MEM_F64 ? CMP_SRC_MEM_F64
                                            : CMP_SRC_MEM_F32;
    s.mem = p->mem;
    s.fd = p->fd;
    s.segs = p->segs;
    s.nseg = p->nseg;
    s.crc = p->crc_kind == NP_DUMPIO_CRC_ELEMENTS;
    s.scale = 1.0;
    return s;
}

/* The crc32 check of one side: 1 when it was checked and does not match. */
static int crc_differs(const np_dumpio_payload *p, uint32_t computed, const np_cmp_side *s,
                       uint32_t *got)
{
    *got = p->crc_kind == NP_DUMPIO_CRC_GIVEN ? p->crc : computed;
    return p->crc_kind != NP_DUMPIO_CRC_NONE && *got != s->crc32;
}

/* A side's payload: its file's, or (a leaf assembled from the ranks'
 * pieces, assemble.c) a stream of the logical tensor (*as). */
static np_status side_payload(np_dumpio_payload *out, cmp_asm_stream **as, cmp_dump *d,
                              const np_cmp_side *s, np_dumpio_buf *buf, np_error *err)
{
    if (cmp_assembly_has(d, s->name))
        return cmp_assembly_stream_open(as, d, s->name, (np_cmp_side *)s, NULL, err);
    return np_dumpio_payload_get(out, d->io, s->name, s->numel, NP_DUMPIO_ALLOW_FILE, buf, err);
}

/* The metric source of a side: its payload's or its stream's. */
static cmp_src side_src(const np_dumpio_payload *p, cmp_asm_stream *as)
{
    cmp_src s = src_of(p);
    if (as) {
        s.kind = CMP_SRC_STREAM;
        s.crc = 0;
        s.fill = cmp_assembly_stream_fill;
        s.user = as;
    }
    return s;
}

np_status cmp_payload_metrics(np_cmp_metrics *m, cmp_dump *bd, const np_cmp_side *bs, cmp_dump *cd,
                              const np_cmp_side *cs, double atol, cmp_buffers *bufs,
                              uint64_t *bytes, int *corrupt, np_error *err)
{
    np_dumpio_payload pb, pc;
    cmp_asm_stream *ab = NULL, *ac = NULL; /* the sides' assembled streams (s is a row of
                                            * d->entries: it gets the logical crc32) */
    np_status st = NP_OK;
    int64_t n = cs->numel;
    if (corrupt)
        *corrupt = 0;
    memset(&pb, 0, sizeof pb);
    memset(&pc, 0, sizeof pc);
    st = side_payload(&pb, &ab, bd, bs, &bufs->b, err);
    if (st == NP_OK)
        st = side_payload(&pc, &ac, cd, cs, &bufs->c, err);
    cmp_src sb = side_src(&pb, ab), sc = side_src(&pc, ac);
    if (st == NP_OK) {
        /* gradients are compared divided by the loss scale of their step */
        sb.scale = cmp_side_is_grad(bs) ? 1.0 / bd->grad_div : 1.0;
        sc.scale = cmp_side_is_grad(cs) ? 1.0 / cd->grad_div : 1.0;
        uint32_t crc[2];
        int failed = cmp_metrics_src(m, &sb, &sc, n, cs->ndim, atol, crc) != 0;
        /* a stream's own failure (a piece unreadable, its bytes not its
         * crc32) is the error; the logical crc32 is set on the side here */
        np_status sst = cmp_assembly_stream_close(ab, err);
        np_status cst = cmp_assembly_stream_close(ac, sst == NP_OK ? err : NULL);
        ab = ac = NULL;
        if (sst == NP_OK)
            sst = cst;
        if (sst != NP_OK) {
            st = sst;
        } else if (failed) {
            st = np_error_set(err, NP_ERR_IO, cd->path, cs->name,
                              "reading the payload failed (truncated file?) on one side "
                              "(bench %s)", bd->path);
        } else {
            if (bytes) { /* a stream counts as the float64 tensor it was */
                size_t eb = sb.kind == CMP_SRC_MEM_F64 || sb.kind == CMP_SRC_STREAM ? 8 : 4;
                size_t ec = sc.kind == CMP_SRC_MEM_F64 || sc.kind == CMP_SRC_STREAM ? 8 : 4;
                *bytes += (uint64_t)n * (eb + ec);
            }
            uint32_t gb, gc;
            int bad_b = crc_differs(&pb, crc[0], bs, &gb);
            int bad_c = crc_differs(&pc, crc[1], cs, &gc);
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
    cmp_assembly_stream_close(ab, NULL);
    cmp_assembly_stream_close(ac, NULL);
    np_dumpio_payload_release(&pb);
    np_dumpio_payload_release(&pc);
    return st;
}
