/* probe/async.c - the asynchronous writer: the training thread copies rows
 * and payloads into a byte ring of fixed size (queue_mb) and a writer thread
 * feeds them to the HDF5 step writer. When the ring is full the training
 * thread waits (backpressure), nothing is dropped, and memory stays bounded
 * by the ring. A payload larger than the ring is handed over by pointer: the
 * training thread waits until the ring is empty and the writer has written
 * it. Large payloads (NP_H5W_DIRECT_MIN bytes and more) start at
 * NP_H5W_DIRECT_ALIGN-aligned addresses of the ring, so the writer hands the
 * queued copy to O_DIRECT as it is. After a write error the writer keeps consuming (and discarding) so the
 * producer never blocks forever; the error is returned by the next call. */
#include <hdf5.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "probe_internal.h"

enum { M_WRAP = 1, M_STEP_BEGIN, M_CALL, M_ENTRY, M_ENTRY_BIG, M_PLACE, M_STEP_END, M_STOP };

#define ALIGN 16
#define HDR 16

typedef struct msg_hdr {
    uint32_t type;
    uint32_t pad;
    uint64_t len;   /* total bytes including this header, multiple of ALIGN */
} msg_hdr;
_Static_assert(sizeof(msg_hdr) == HDR, "header size");

typedef struct step_msg {
    char task[32], level[16], framework[64], device[64], precision[16];
    int64_t step, rank, world_size;
    double loss_scale, dp_grad_scale;
    char mesh_dims[80], mesh_shape[96], mesh_coords[96];
} step_msg;

typedef struct entry_msg {
    np_entry_rec rec;
    uint64_t data_off;   /* payload offset from the message start */
} entry_msg;

typedef struct big_msg {
    np_entry_rec rec;
    const void *data;
    size_t nbytes;
} big_msg;

struct np_aw {
    np_h5w *w;
    unsigned char *buf;
    uint64_t cap;
    uint64_t wpos, rpos;   /* monotonic; offsets are pos % cap */
    uint64_t peak;
    pthread_mutex_t mu;
    pthread_cond_t can_write, can_read;
    pthread_t th;
    int failed;
    np_error err;          /* writer's first error */
};

static uint64_t round_up(uint64_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

static void process(np_aw *a, const msg_hdr *h)
{
    const unsigned char *body = (const unsigned char *)h + HDR;
    np_status st = NP_OK;
    if (a->failed && h->type != M_STOP)
        return;
    switch (h->type) {
    case M_STEP_BEGIN: {
        const step_msg *m = (const step_msg *)(const void *)body;
        np_h5w_step_info in = {m->task, m->level,      m->framework,  m->device,
                               m->precision, m->step, m->rank, m->world_size,
                               m->loss_scale, m->mesh_dims, m->mesh_shape,
                               m->mesh_coords, m->dp_grad_scale};
        st = np_h5w_step_begin(a->w, &in, &a->err);
        break;
    }
    case M_CALL:
        st = np_h5w_call(a->w, (const np_call_rec *)(const void *)body, &a->err);
        break;
    case M_ENTRY: {
        const entry_msg *m = (const entry_msg *)(const void *)body;
        st = np_h5w_entry(a->w, &m->rec, (const unsigned char *)h + m->data_off, &a->err);
        break;
    }
    case M_ENTRY_BIG: {
        const big_msg *m = (const big_msg *)(const void *)body;
        st = np_h5w_entry(a->w, &m->rec, m->data, &a->err);
        break;
    }
    case M_PLACE:
        st = np_h5w_place(a->w, (const np_place_rec *)(const void *)body, &a->err);
        break;
    case M_STEP_END:
        st = np_h5w_step_end(a->w, h->len >= HDR + sizeof(np_h5w_scope)
                                       ? (const np_h5w_scope *)(const void *)body : NULL,
                             &a->err);
        break;
    default:
        break;
    }
    if (st) {
        np_h5w_abandon(a->w);
        pthread_mutex_lock(&a->mu);
        a->failed = 1;
        pthread_mutex_unlock(&a->mu);
    }
}

static void *writer_main(void *arg)
{
    np_aw *a = arg;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    for (;;) {
        pthread_mutex_lock(&a->mu);
        while (a->rpos == a->wpos)
            pthread_cond_wait(&a->can_read, &a->mu);
        uint64_t off = a->rpos % a->cap;
        pthread_mutex_unlock(&a->mu);
        const msg_hdr *h = (const msg_hdr *)(const void *)(a->buf + off);
        uint32_t type = h->type;
        uint64_t len = h->len;
        process(a, h);
        pthread_mutex_lock(&a->mu);
        a->rpos += len;
        pthread_cond_broadcast(&a->can_write);
        pthread_mutex_unlock(&a->mu);
        if (type == M_STOP)
            break;
    }
    return NULL;
}

np_status np_aw_new(np_aw **out, np_h5w *w, size_t queue_bytes, np_error *err)
{
    *out = NULL;
    np_aw *a = calloc(1, sizeof *a);
    uint64_t cap = queue_bytes < 4096 ? 4096 : queue_bytes;
    cap = (cap + NP_H5W_DIRECT_ALIGN - 1) / NP_H5W_DIRECT_ALIGN * NP_H5W_DIRECT_ALIGN;
    if (a)
        a->buf = aligned_alloc(NP_H5W_DIRECT_ALIGN, (size_t)cap);
    if (!a || !a->buf) {
        free(a);
        return np_error_set(err, NP_ERR_NOMEM, NULL, "queue_mb",
                            "cannot allocate the %zu-byte dump queue", queue_bytes);
    }
    a->w = w;
    a->cap = cap;
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->can_write, NULL);
    pthread_cond_init(&a->can_read, NULL);
    if (pthread_create(&a->th, NULL, writer_main, a) != 0) {
        pthread_mutex_destroy(&a->mu);
        pthread_cond_destroy(&a->can_write);
        pthread_cond_destroy(&a->can_read);
        free(a->buf);
        free(a);
        return np_error_set(err, NP_ERR_INTERNAL, NULL, NULL, "cannot start the writer thread");
    }
    *out = a;
    return NP_OK;
}

/* Reserve `len` contiguous bytes (len <= cap); returns the pointer, with the
 * mutex released. Blocks while the ring is full. When the tail of the ring
 * is too short for the message, a wrap marker fills the tail as soon as
 * there is room for the marker alone (not for marker plus message: with a
 * message longer than cap minus the tail that never comes, and the producer
 * would wait forever on an empty ring); the message then goes to offset 0
 * once the writer has consumed enough. */
static unsigned char *reserve(np_aw *a, uint64_t len)
{
    pthread_mutex_lock(&a->mu);
    for (;;) {
        uint64_t off = a->wpos % a->cap;
        uint64_t used = a->wpos - a->rpos;
        if (a->cap - off < len) {
            uint64_t pad = a->cap - off; /* >= HDR: lengths and cap are multiples of ALIGN */
            if (a->cap - used >= pad) {
                msg_hdr *h = (msg_hdr *)(void *)(a->buf + off);
                h->type = M_WRAP;
                h->len = pad;
                a->wpos += pad;
                pthread_cond_signal(&a->can_read);
                continue;
            }
        } else if (a->cap - used >= len) {
            break;
        }
        pthread_cond_wait(&a->can_write, &a->mu);
    }
    unsigned char *p = a->buf + a->wpos % a->cap;
    pthread_mutex_unlock(&a->mu);
    return p;
}

static void commit(np_aw *a, unsigned char *p, uint32_t type, uint32_t flags, uint64_t len)
{
    msg_hdr *h = (msg_hdr *)(void *)p;
    h->type = type;
    h->pad = flags;
    h->len = len;
    pthread_mutex_lock(&a->mu);
    a->wpos += len;
    if (a->wpos - a->rpos > a->peak)
        a->peak = a->wpos - a->rpos;
    pthread_cond_signal(&a->can_read);
    pthread_mutex_unlock(&a->mu);
}

static np_status check_failed(np_aw *a, np_error *err)
{
    pthread_mutex_lock(&a->mu);
    int f = a->failed;
    pthread_mutex_unlock(&a->mu);
    if (!f)
        return NP_OK;
    np_error_set(err, a->err.status, a->err.file, a->err.key, "%s", a->err.text);
    return a->err.status;
}

static void wait_empty(np_aw *a)
{
    pthread_mutex_lock(&a->mu);
    while (a->rpos != a->wpos)
        pthread_cond_wait(&a->can_write, &a->mu);
    pthread_mutex_unlock(&a->mu);
}

static np_status put(np_aw *a, uint32_t type, const void *body, size_t n, np_error *err)
{
    np_status st = check_failed(a, err);
    if (st)
        return st;
    uint64_t len = round_up(HDR + n);
    unsigned char *p = reserve(a, len);
    if (n)
        memcpy(p + HDR, body, n);
    commit(a, p, type, 0, len);
    return NP_OK;
}

np_status np_aw_step_begin(np_aw *a, const np_h5w_step_info *in, np_error *err)
{
    step_msg m;
    memset(&m, 0, sizeof m);
    snprintf(m.task, sizeof m.task, "%s", in->task);
    snprintf(m.level, sizeof m.level, "%s", in->level);
    snprintf(m.framework, sizeof m.framework, "%s", in->framework);
    snprintf(m.device, sizeof m.device, "%s", in->device);
    snprintf(m.precision, sizeof m.precision, "%s", in->precision);
    m.step = in->step;
    m.rank = in->rank;
    m.world_size = in->world_size;
    m.loss_scale = in->loss_scale;
    m.dp_grad_scale = in->dp_grad_scale;
    snprintf(m.mesh_dims, sizeof m.mesh_dims, "%s", in->mesh_dims ? in->mesh_dims : "");
    snprintf(m.mesh_shape, sizeof m.mesh_shape, "%s", in->mesh_shape ? in->mesh_shape : "");
    snprintf(m.mesh_coords, sizeof m.mesh_coords, "%s", in->mesh_coords ? in->mesh_coords : "");
    return put(a, M_STEP_BEGIN, &m, sizeof m, err);
}

np_status np_aw_call(np_aw *a, const np_call_rec *rec, np_error *err)
{
    return put(a, M_CALL, rec, sizeof *rec, err);
}

np_status np_aw_entry(np_aw *a, const np_entry_rec *rec, const void *data, size_t nbytes,
                      np_error *err)
{
    np_status st = check_failed(a, err);
    if (st)
        return st;
    if (!rec->has_data)
        nbytes = 0;
    uint64_t head = round_up(HDR + sizeof(entry_msg));
    int aligned = nbytes >= NP_H5W_DIRECT_MIN;
    /* Room for the payload to start at the next aligned address. */
    uint64_t len = round_up(head + (aligned ? NP_H5W_DIRECT_ALIGN : 0) + nbytes);
    if (len > a->cap) {
        /* Too big for the ring: hand the borrowed pointer over and wait. */
        big_msg m;
        m.rec = *rec;
        m.data = data;
        m.nbytes = nbytes;
        wait_empty(a);
        uint64_t blen = round_up(HDR + sizeof m);
        unsigned char *p = reserve(a, blen);
        memcpy(p + HDR, &m, sizeof m);
        commit(a, p, M_ENTRY_BIG, 0, blen);
        wait_empty(a);
        return check_failed(a, err);
    }
    unsigned char *p = reserve(a, len);
    entry_msg m;
    memset(&m, 0, sizeof m);
    m.rec = *rec;
    m.data_off = head;
    if (aligned) {
        uint64_t at = (uint64_t)(p - a->buf) + head;
        m.data_off += (NP_H5W_DIRECT_ALIGN - at % NP_H5W_DIRECT_ALIGN) % NP_H5W_DIRECT_ALIGN;
    }
    memcpy(p + HDR, &m, sizeof m);
    if (nbytes)
        memcpy(p + m.data_off, data, nbytes);
    commit(a, p, M_ENTRY, 0, round_up(m.data_off + nbytes));
    return NP_OK;
}

np_status np_aw_place(np_aw *a, const np_place_rec *rec, np_error *err)
{
    return put(a, M_PLACE, rec, sizeof *rec, err);
}

np_status np_aw_step_end(np_aw *a, const np_h5w_scope *scope, np_error *err)
{
    return put(a, M_STEP_END, scope, scope ? sizeof *scope : 0, err);
}

np_status np_aw_drain(np_aw *a, np_error *err)
{
    wait_empty(a);
    return check_failed(a, err);
}

size_t np_aw_peak_bytes(const np_aw *a) { return (size_t)a->peak; }

np_h5w *np_aw_stop(np_aw *a, np_error *err)
{
    if (!a)
        return NULL;
    unsigned char *p = reserve(a, HDR);
    commit(a, p, M_STOP, 0, HDR);
    pthread_join(a->th, NULL);
    check_failed(a, err);
    np_h5w *w = a->w;
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->can_write);
    pthread_cond_destroy(&a->can_read);
    free(a->buf);
    free(a);
    return w;
}
