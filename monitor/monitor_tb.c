/* monitor/monitor_tb.c - TensorBoard event files of a monitor folder's
 * scalar series (docs/MONITOR.md "TensorBoard"): per rank one file
 * OUT/rank{R}/events.out.tfevents.0.nprobe, a TFRecord stream (length,
 * masked CRC-32C of the length, an Event protobuf, its masked CRC-32C) of a
 * file_version event and one event per recorded step holding a Summary of
 * simple values: `{name}/{metric}` (the norm of a tensor record, the value
 * of a scalar one: loss, grad_norm, update ratios). Encoded here by hand
 * (protobuf's wire format: varint keys, fixed64 doubles, fixed32 floats,
 * length-delimited messages); written through np_out. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>

#include "mon_internal.h"
#include "nprobe/common.h"

/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), bitwise table */
static uint32_t crc32c(const unsigned char *p, size_t n)
{
    static uint32_t table[256];
    static int ready;
    if (!ready) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
            table[i] = c;
        }
        ready = 1;
    }
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++)
        c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static uint32_t masked(const unsigned char *p, size_t n)
{
    uint32_t c = crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* a growing byte buffer */
typedef struct buf {
    unsigned char *p;
    size_t n, cap;
    int bad;
} buf;

static void put(buf *b, const void *x, size_t n)
{
    if (b->bad)
        return;
    if (np_grow((void **)&b->p, &b->cap, b->n + n, 1)) {
        b->bad = 1;
        return;
    }
    memcpy(b->p + b->n, x, n);
    b->n += n;
}

static void varint(buf *b, uint64_t v)
{
    unsigned char t[10];
    int k = 0;
    do {
        t[k] = (unsigned char)(v & 0x7F);
        v >>= 7;
        if (v)
            t[k] |= 0x80;
        k++;
    } while (v);
    put(b, t, (size_t)k);
}

static void le(buf *b, uint64_t v, int bytes)
{
    unsigned char t[8];
    for (int i = 0; i < bytes; i++)
        t[i] = (unsigned char)(v >> (8 * i));
    put(b, t, (size_t)bytes);
}

static void field_bytes(buf *b, int field, const void *x, size_t n)
{
    varint(b, ((uint64_t)field << 3) | 2);
    varint(b, n);
    put(b, x, n);
}

static void field_double(buf *b, int field, double v)
{
    uint64_t u;
    memcpy(&u, &v, 8);
    varint(b, ((uint64_t)field << 3) | 1);
    le(b, u, 8);
}

/* one TFRecord of the event in ev */
static void record(FILE *f, const buf *ev, int *bad)
{
    unsigned char len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)((uint64_t)ev->n >> (8 * i));
    uint32_t lc = masked(len, 8), dc = masked(ev->p, ev->n);
    unsigned char c1[4], c2[4];
    for (int i = 0; i < 4; i++) {
        c1[i] = (unsigned char)(lc >> (8 * i));
        c2[i] = (unsigned char)(dc >> (8 * i));
    }
    if (fwrite(len, 1, 8, f) != 8 || fwrite(c1, 1, 4, f) != 4 ||
        (ev->n && fwrite(ev->p, 1, ev->n, f) != ev->n) || fwrite(c2, 1, 4, f) != 4)
        *bad = 1;
}

/* Summary.Value {tag = 1, simple_value = 2 (float)} appended to sum */
static void value(buf *sum, const char *tag, double v)
{
    buf val = {0};
    field_bytes(&val, 1, tag, strlen(tag));
    float fv = (float)v;
    uint32_t u;
    memcpy(&u, &fv, 4);
    varint(&val, (2 << 3) | 5);
    le(&val, u, 4);
    field_bytes(sum, 1, val.p, val.n);
    sum->bad |= val.bad;
    free(val.p);
}

static np_status write_rank(const char *path, const rank_data *rd, np_error *err)
{
    np_out o;
    np_status st = np_out_begin(&o, path, NULL, err);
    if (st)
        return st;
    FILE *f = np_out_stream(&o);
    int bad = 0;
    buf ev = {0};
    field_double(&ev, 1, 0.0);
    field_bytes(&ev, 3, "brain.Event:2", 13);
    record(f, &ev, &bad);
    for (int64_t i = 0; i < rd->n_rec && !bad;) {
        int64_t step = rd->rec[i].step;
        buf sum = {0};
        for (; i < rd->n_rec && rd->rec[i].step == step; i++) {
            const np_mon_record *r = &rd->rec[i];
            const np_mon_key *k = &rd->keys[r->key];
            int scalar = r->numel == 1 && (!strcmp(k->metric, "loss") ||
                                           !strcmp(k->metric, "loss_scale") ||
                                           !strcmp(k->metric, "grad_norm") ||
                                           !strcmp(k->metric, "update_ratio"));
            char tag[NP_MONITOR_NAME_LEN + NP_MONITOR_METRIC_LEN + 2];
            snprintf(tag, sizeof tag, "%s/%s", k->name, k->metric);
            value(&sum, tag, scalar ? r->mean : r->norm);
        }
        ev.n = 0;
        field_double(&ev, 1, 0.0);
        varint(&ev, (2 << 3) | 0);
        varint(&ev, (uint64_t)step);
        field_bytes(&ev, 5, sum.p, sum.n);
        bad |= sum.bad | ev.bad;
        free(sum.p);
        if (!bad)
            record(f, &ev, &bad);
    }
    free(ev.p);
    if (bad) {
        np_out_abort(&o);
        return np_error_set(err, NP_ERR_IO, path, NULL, "cannot write the event file");
    }
    return np_out_commit(&o, 0, err);
}

np_status np_monitor_write_tensorboard(const char *outdir, const char *dir, int ranks,
                                       np_error *err)
{
    np_status st = NP_OK;
    int found = 0;
    for (int r = 0; found < ranks && r < 1 << 20 && !st; r++) {
        char in[4608], sub[4608], out[4700];
        snprintf(in, sizeof in, "%s/monitor_rank%d.h5", dir, r);
        FILE *probe = fopen(in, "rb");
        if (!probe)
            continue;
        fclose(probe);
        rank_data rd;
        st = np_mon_read_rank(&rd, in, err);
        if (!st) {
            found++;
            snprintf(sub, sizeof sub, "%s/rank%d", outdir, r);
            if (np_mkdirs(sub))
                st = np_error_set(err, NP_ERR_IO, sub, NULL, "cannot create: %s", strerror(errno));
            snprintf(out, sizeof out, "%s/events.out.tfevents.0.nprobe", sub);
            if (!st)
                st = write_rank(out, &rd, err);
        }
        free(rd.keys);
        free(rd.rec);
    }
    if (!st && !found)
        st = np_error_set(err, NP_ERR_NOTFOUND, dir, NULL, "no monitor_rank*.h5 file");
    return st;
}
