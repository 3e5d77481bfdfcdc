/* probe/h5writer.c - writes one step of one rank into HDF5 (format v1,
 * nprobe/format.h, docs/FORMAT.md). Crash safety: the step is written to
 * "dump.h5.partial" (root attribute complete=0), rows are appended to
 * /entries and /calls in blocks, and every block ends with H5Fflush; the
 * metadata cache is told never to evict between flushes, so what is on disk
 * is always the state of the last flush plus unreferenced bytes. At the end
 * of the step complete=1 is written, the file is closed and renamed to
 * "dump.h5" - a dump.h5 is therefore always a complete step. Object times
 * are not tracked, so an identical step gives identical bytes.
 *
 * Large uncompressed payloads (DIRECT_MIN bytes and more) go around the page
 * cache: HDF5 allocates the contiguous dataset at creation (4096-aligned,
 * never filled), H5Dget_offset gives its place in the file, and the bytes
 * are written there with a second descriptor opened O_DIRECT; the last
 * < 4096 bytes go through HDF5's own descriptor. Memory that is aligned (the
 * async queue's copies) is written at once; other memory (a tensor, in sync
 * mode) is copied into one of STAGE_BUFS aligned staging buffers that an I/O
 * thread writes while the caller goes on, so the disk works while training
 * runs. Every flush, step end or abandon first waits for the staged writes,
 * so flushed rows never point at unwritten bytes (crash safety as above); a
 * failed staged write is reported by the next call. The file is the same
 * HDF5 file (format unchanged). Where O_DIRECT is refused (tmpfs, some
 * network file systems) everything goes through H5Dwrite as before. */
#define _GNU_SOURCE /* O_DIRECT */
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "probe_internal.h"

#define ROW_BLOCK 256     /* rows buffered before an append */
#define FLUSH_BLOCKS 4    /* full row blocks per flush (1024 rows) */
#define TABLE_CHUNK 64    /* rows per HDF5 chunk of /entries and /calls */
#define PAYLOAD_CHUNK_BYTES ((size_t)1 << 20)
#define DIRECT_ALIGN NP_H5W_DIRECT_ALIGN /* file offset, memory and size unit of O_DIRECT */
#define DIRECT_MIN NP_H5W_DIRECT_MIN     /* payloads from 256 KiB bypass the page cache */
#define STAGE_BUFS 4                     /* staging buffers for unaligned payloads */
#define STAGE_BYTES ((size_t)4 << 20)      /* bytes each */

/* The staged O_DIRECT writes: a FIFO of STAGE_BUFS slots and the thread
 * that writes them. */
typedef struct stager {
    unsigned char *buf;      /* STAGE_BUFS * STAGE_BYTES, aligned */
    size_t n[STAGE_BUFS];
    uint64_t off[STAGE_BUFS];
    char name[STAGE_BUFS][NP_FMT_NAME_LEN];
    int head, count, stop, started;
    int fd, tail_fd;         /* O_DIRECT and the buffered fallback (EINVAL) */
    int err;                 /* errno of the first failed write, 0 */
    char err_name[NP_FMT_NAME_LEN];
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
} stager;

/* A table's rows packed by hand into its file layout (the file type is the
 * memory struct H5Tpack'ed: the same members, no padding), so HDF5 writes
 * them without converting (a conversion costs thousands of instructions a
 * row); the file bytes are the same. */
#define PACK_MAX_MEMBERS 32
typedef struct row_pack {
    int n;
    size_t moff[PACK_MAX_MEMBERS], foff[PACK_MAX_MEMBERS], size[PACK_MAX_MEMBERS];
    size_t msize, fsize; /* a row in memory, in the file */
} row_pack;

struct np_h5w {
    char *root;
    int compression;
    hid_t file, entries, calls, data, entry_mt, entry_ft, call_mt, call_ft;
    hid_t row_dxpl;          /* row appends: our own conversion buffers */
    void *tconv, *bkg;       /* ROW_BLOCK rows of the larger record each */
    row_pack epack, cpack;   /* /entries and /calls rows packed by hand */
    unsigned char *pbuf;     /* ROW_BLOCK packed rows of the larger record, or NULL */
    char partial[4200], final[4200];
    np_entry_rec *ebuf;
    np_call_rec *cbuf;
    int en, cn;
    hsize_t e_rows, c_rows;  /* rows already in the file */
    int in_step;
    int dfd;                 /* O_DIRECT descriptor of the step file, or -1 */
    int hfd;                 /* HDF5's own (sec2) descriptor, for the tails */
    stager *sg;              /* lazily, for unaligned payloads */
    void *vf;                /* our file driver's state of `file` (h5vfd.c), or NULL */
    int vfd_err;             /* errno of a write failed while closing, 0 */
    np_out out;              /* the step file, created exclusively (common/outfile.c) */
    int lock_fd;             /* the step's rank folder, locked while in a step, or -1 */
    np_h5w_totals tot;
    int has_mesh;            /* the step is format version 2 */
    np_place_rec *places;    /* the step's /placements rows, written at its end */
    size_t np, capp;
    int blocks;              /* full row blocks appended since the last flush */
};

/* ---- HDF5 error text ---------------------------------------------------- */

typedef struct h5msg {
    char text[600];
    int errnum;
    int got;
} h5msg;

static herr_t walk_cb(unsigned n, const H5E_error2_t *e, void *data)
{
    h5msg *m = data;
    (void)n;
    if (!m->got && e->desc) {
        const char *em = strstr(e->desc, "error message = '");
        const char *en = strstr(e->desc, "errno = ");
        if (en)
            m->errnum = atoi(en + 8);
        if (em) {
            em += 17;
            const char *end = strchr(em, '\'');
            int len = end ? (int)(end - em) : (int)strlen(em);
            snprintf(m->text, sizeof m->text, "%.*s", len, em);
        } else {
            snprintf(m->text, sizeof m->text, "%s (%s)", e->desc,
                     e->func_name ? e->func_name : "?");
        }
        m->got = 1;
    }
    return 0;
}

/* Turn the HDF5 error stack into an np_error. */
static np_status h5fail(np_error *err, const char *path, const char *what)
{
    h5msg m = {{0}, 0, 0};
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk_cb, &m);
    H5Eclear2(H5E_DEFAULT);
    int nospace = m.errnum == EFBIG || m.errnum == ENOSPC || m.errnum == EDQUOT;
    return np_error_set(err, nospace ? NP_ERR_NOSPACE : NP_ERR_HDF5, path, NULL,
                        "%s failed: %s", what, m.got ? m.text : "HDF5 error");
}

/* ---- helpers ------------------------------------------------------------ */

static herr_t attr_str(hid_t obj, const char *name, const char *value)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
    herr_t e = -1;
    if (a >= 0) {
        const char *v = value ? value : "";
        e = H5Awrite(a, t, &v);
        H5Aclose(a);
    }
    H5Sclose(s);
    H5Tclose(t);
    return e;
}

static herr_t attr_i64(hid_t obj, const char *name, int64_t value)
{
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT);
    herr_t e = -1;
    if (a >= 0) {
        e = H5Awrite(a, H5T_NATIVE_INT64, &value);
        H5Aclose(a);
    }
    H5Sclose(s);
    return e;
}

static hid_t table(hid_t file, const char *name, hid_t ftype, int compression)
{
    hsize_t dims = 0, maxd = H5S_UNLIMITED, chunk = TABLE_CHUNK;
    hid_t s = H5Screate_simple(1, &dims, &maxd);
    hid_t p = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(p, 1, &chunk);
    H5Pset_obj_track_times(p, 0);
    if (compression > 0)
        H5Pset_deflate(p, (unsigned)compression);
    hid_t d = H5Dcreate2(file, name, ftype, s, H5P_DEFAULT, p, H5P_DEFAULT);
    H5Pclose(p);
    H5Sclose(s);
    return d;
}

/* 0 when `ft` is `mt` packed with members a hand packing can copy. */
static int row_pack_init(row_pack *rp, hid_t mt, hid_t ft)
{
    int n = H5Tget_nmembers(ft);
    if (n <= 0 || n > PACK_MAX_MEMBERS || H5Tget_nmembers(mt) != n)
        return -1;
    rp->n = n;
    rp->msize = H5Tget_size(mt);
    rp->fsize = H5Tget_size(ft);
    size_t end = 0;
    for (int i = 0; i < n; i++) {
        hid_t a = H5Tget_member_type(mt, i), b = H5Tget_member_type(ft, i);
        int same = a >= 0 && b >= 0 && H5Tequal(a, b) > 0;
        rp->size[i] = b >= 0 ? H5Tget_size(b) : 0;
        if (a >= 0)
            H5Tclose(a);
        if (b >= 0)
            H5Tclose(b);
        rp->moff[i] = H5Tget_member_offset(mt, i);
        rp->foff[i] = H5Tget_member_offset(ft, i);
        if (!same || rp->foff[i] != end)
            return -1;
        end += rp->size[i];
    }
    return end == rp->fsize ? 0 : -1;
}

static void row_pack_rows(const row_pack *rp, unsigned char *dst, const void *src, int rows)
{
    const unsigned char *s = src;
    for (int r = 0; r < rows; r++, s += rp->msize, dst += rp->fsize)
        for (int i = 0; i < rp->n; i++)
            memcpy(dst + rp->foff[i], s + rp->moff[i], rp->size[i]);
}

static herr_t append(hid_t ds, hid_t mtype, hid_t dxpl, hsize_t *rows, const void *buf, int n)
{
    if (n == 0)
        return 0;
    hsize_t start = *rows, count = (hsize_t)n, total = *rows + (hsize_t)n;
    if (H5Dset_extent(ds, &total) < 0)
        return -1;
    hid_t fs = H5Dget_space(ds);
    hid_t ms = H5Screate_simple(1, &count, NULL);
    herr_t e = H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &count, NULL);
    if (e >= 0)
        e = H5Dwrite(ds, mtype, ms, fs, dxpl, buf);
    H5Sclose(ms);
    H5Sclose(fs);
    if (e >= 0)
        *rows = total;
    return e;
}

/* ---- staged O_DIRECT writes ------------------------------------------- */

static int pwrite_all(int fd, const unsigned char *p, size_t n, uint64_t off)
{
    while (n > 0) {
        ssize_t r = pwrite(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (r == 0)
                errno = EIO;
            return -1;
        }
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

static void *stager_main(void *arg)
{
    stager *g = arg;
    pthread_mutex_lock(&g->mu);
    for (;;) {
        while (g->count == 0 && !g->stop)
            pthread_cond_wait(&g->work, &g->mu);
        if (g->count == 0)
            break;
        int i = g->head, fd = g->fd, tail_fd = g->tail_fd;
        pthread_mutex_unlock(&g->mu);
        const unsigned char *b = g->buf + (size_t)i * STAGE_BYTES;
        int r = pwrite_all(fd, b, g->n[i], g->off[i]);
        if (r != 0 && errno == EINVAL) /* O_DIRECT refused after all */
            r = pwrite_all(tail_fd, b, g->n[i], g->off[i]);
        int en = r != 0 ? errno : 0;
        pthread_mutex_lock(&g->mu);
        if (en && !g->err) {
            g->err = en;
            memcpy(g->err_name, g->name[i], sizeof g->err_name);
        }
        g->head = (g->head + 1) % STAGE_BUFS;
        g->count--;
        pthread_cond_broadcast(&g->done);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

static stager *stager_new(void)
{
    stager *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->buf = aligned_alloc(DIRECT_ALIGN, STAGE_BUFS * STAGE_BYTES);
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->work, NULL);
    pthread_cond_init(&g->done, NULL);
    if (g->buf && pthread_create(&g->th, NULL, stager_main, g) == 0)
        g->started = 1;
    if (!g->started) {
        pthread_mutex_destroy(&g->mu);
        pthread_cond_destroy(&g->work);
        pthread_cond_destroy(&g->done);
        free(g->buf);
        free(g);
        return NULL;
    }
    return g;
}

/* Wait until every staged write is done; the errno of the first failure
 * (cleared) or 0, with the tensor's name in `name`. */
static int stager_wait(stager *g, char *name, size_t name_len)
{
    if (!g)
        return 0;
    pthread_mutex_lock(&g->mu);
    while (g->count > 0)
        pthread_cond_wait(&g->done, &g->mu);
    int en = g->err;
    if (en)
        snprintf(name, name_len, "%s", g->err_name);
    g->err = 0;
    pthread_mutex_unlock(&g->mu);
    return en;
}

/* Copy `n` <= STAGE_BYTES bytes into a free slot (waiting for one) and queue
 * their write at `off` through `fd` (`tail_fd` if O_DIRECT is refused). */
static void stager_put(stager *g, int fd, int tail_fd, const unsigned char *data, size_t n,
                       uint64_t off, const char *name)
{
    pthread_mutex_lock(&g->mu);
    while (g->count == STAGE_BUFS)
        pthread_cond_wait(&g->done, &g->mu);
    int i = (g->head + g->count) % STAGE_BUFS;
    pthread_mutex_unlock(&g->mu);
    memcpy(g->buf + (size_t)i * STAGE_BYTES, data, n);
    pthread_mutex_lock(&g->mu);
    g->n[i] = n;
    g->off[i] = off;
    snprintf(g->name[i], sizeof g->name[i], "%s", name);
    g->fd = fd;
    g->tail_fd = tail_fd;
    g->count++;
    pthread_cond_signal(&g->work);
    pthread_mutex_unlock(&g->mu);
}

static void stager_free(stager *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&g->mu);
    g->stop = 1;
    pthread_cond_signal(&g->work);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->th, NULL);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->work);
    pthread_cond_destroy(&g->done);
    free(g->buf);
    free(g);
}

static np_status io_error(np_h5w *w, const char *name, int en, np_error *err)
{
    int nospace = en == EFBIG || en == ENOSPC || en == EDQUOT;
    return np_error_set(err, nospace ? NP_ERR_NOSPACE : NP_ERR_IO, w->partial, name,
                        "writing a payload failed: %s", strerror(en));
}

/* Wait for the staged writes; their first error, if any. */
static np_status staged_done(np_h5w *w, np_error *err)
{
    char name[NP_FMT_NAME_LEN] = "";
    int en = stager_wait(w->sg, name, sizeof name);
    return en ? io_error(w, name, en, err) : NP_OK;
}

/* The error of an earlier staged write, if any, without waiting. */
static np_status staged_failed(np_h5w *w, np_error *err)
{
    char name[NP_FMT_NAME_LEN] = "";
    pthread_mutex_lock(&w->sg->mu);
    int en = w->sg->err;
    if (en)
        snprintf(name, sizeof name, "%s", w->sg->err_name);
    w->sg->err = 0;
    pthread_mutex_unlock(&w->sg->mu);
    return en ? io_error(w, name, en, err) : NP_OK;
}

/* ---- lifecycle ---------------------------------------------------------- */

np_status np_h5w_new(np_h5w **out, const char *dump_path, int compression, np_error *err)
{
    *out = NULL;
    np_h5w *w = calloc(1, sizeof *w);
    if (!w)
        return np_error_set(err, NP_ERR_NOMEM, dump_path, NULL, NULL);
    w->root = strdup(dump_path);
    w->ebuf = calloc(ROW_BLOCK, sizeof *w->ebuf);
    w->cbuf = calloc(ROW_BLOCK, sizeof *w->cbuf);
    w->compression = compression;
    w->file = w->entries = w->calls = w->data = w->row_dxpl = -1;
    w->dfd = w->hfd = w->lock_fd = -1;
    w->entry_mt = np_fmt_entry_h5type();
    w->call_mt = np_fmt_call_h5type();
    w->entry_ft = w->entry_mt >= 0 ? H5Tcopy(w->entry_mt) : -1;
    w->call_ft = w->call_mt >= 0 ? H5Tcopy(w->call_mt) : -1;
    /* The rows are converted (padded memory struct -> packed file type) on
     * every append; HDF5 would calloc a fresh conversion buffer each time
     * (page faults and a memset on every step), so give it ours. */
    size_t rb = sizeof(np_entry_rec) > sizeof(np_call_rec) ? sizeof(np_entry_rec)
                                                           : sizeof(np_call_rec);
    rb *= ROW_BLOCK;
    w->tconv = malloc(rb);
    w->bkg = calloc(1, rb);
    w->row_dxpl = H5Pcreate(H5P_DATASET_XFER);
    if (w->row_dxpl >= 0 && w->tconv && w->bkg &&
        H5Pset_buffer(w->row_dxpl, rb, w->tconv, w->bkg) < 0) {
        H5Pclose(w->row_dxpl);
        w->row_dxpl = -1;
    }
    if (!w->root || !w->ebuf || !w->cbuf || w->entry_ft < 0 || w->call_ft < 0 ||
        w->row_dxpl < 0) {
        np_h5w_free(w);
        return np_error_set(err, NP_ERR_NOMEM, dump_path, NULL, "cannot set up the writer");
    }
    H5Tpack(w->entry_ft);
    H5Tpack(w->call_ft);
    if (row_pack_init(&w->epack, w->entry_mt, w->entry_ft) == 0 &&
        row_pack_init(&w->cpack, w->call_mt, w->call_ft) == 0)
        w->pbuf = malloc(ROW_BLOCK * (w->epack.fsize > w->cpack.fsize ? w->epack.fsize
                                                                       : w->cpack.fsize));
    *out = w;
    return NP_OK;
}

/* An abandoned step: nothing more goes into its file (it stays as it was at
 * the last flush, like the file of a killed run) and no close can fail on
 * I/O - in HDF5 1.10 a failed H5Fclose leaves a freed file id registered that
 * crashes the program at exit (h5vfd.c). */
static void close_handles(np_h5w *w)
{
    char name[NP_FMT_NAME_LEN];
    stager_wait(w->sg, name, sizeof name);
    np_vfd_set_mode(w->vf, NP_VFD_DISCARD, NULL);
    w->vf = NULL;
    if (w->entries >= 0) H5Dclose(w->entries);
    if (w->calls >= 0) H5Dclose(w->calls);
    if (w->data >= 0) H5Gclose(w->data);
    if (w->file >= 0) H5Fclose(w->file);
    w->file = w->entries = w->calls = w->data = -1;
    if (w->dfd >= 0) close(w->dfd);
    w->dfd = w->hfd = -1;
    H5Eclear2(H5E_DEFAULT);
    np_out_keep(&w->out); /* an abandoned step stays as .partial */
    np_dir_unlock(&w->lock_fd);
}

void np_h5w_abandon(np_h5w *w)
{
    if (!w || !w->in_step)
        return;
    close_handles(w);
    w->in_step = 0;
    w->en = w->cn = 0;
    w->np = 0; /* placements are written at the step's end only: a .partial has none */
}

void np_h5w_free(np_h5w *w)
{
    if (!w)
        return;
    np_h5w_abandon(w);
    if (w->entry_mt >= 0) H5Tclose(w->entry_mt);
    if (w->entry_ft >= 0) H5Tclose(w->entry_ft);
    if (w->call_mt >= 0) H5Tclose(w->call_mt);
    if (w->call_ft >= 0) H5Tclose(w->call_ft);
    if (w->row_dxpl >= 0) H5Pclose(w->row_dxpl);
    free(w->tconv);
    free(w->pbuf);
    free(w->bkg);
    stager_free(w->sg);
    free(w->root);
    free(w->ebuf);
    free(w->cbuf);
    free(w->places);
    free(w);
}

int np_h5w_in_step(const np_h5w *w) { return w->in_step; }

void np_h5w_totals_get(const np_h5w *w, np_h5w_totals *t) { *t = w->tot; }

/* Remove `dir`/dump.h5 and .partial of an earlier run: the caller holds the
 * folder's lock, so no live run is writing them (unlink removes a symlink,
 * never its target). */
static np_status remove_earlier(const char *dir, np_error *err)
{
    static const char *const suffix[2] = {"", ".partial"};
    for (int i = 0; i < 2; i++) {
        char f[4200];
        snprintf(f, sizeof f, "%s/%s%s", dir, NP_FMT_FILE, suffix[i]);
        if (unlink(f) != 0 && errno != ENOENT && errno != ENOTDIR)
            return np_error_set(err, NP_ERR_IO, f, NULL,
                                "cannot remove the earlier dump of this step: %s",
                                strerror(errno));
    }
    return NP_OK;
}

/* step{S} and step{S}/rank{R} below the dump root (`root_len` bytes of
 * `dir`) must be folders of the dump's own: a symbolic link planted there
 * (step0 -> elsewhere) took the step file, and the removal of an earlier
 * dump.h5, outside dump_path (the file-level checks follow no link, but
 * the folders were followed). Checked before the folders are made and
 * again after. */
static np_status no_dir_links(const char *dir, size_t root_len, np_error *err)
{
    char path[4096];
    for (const char *p = dir + root_len; *p;) {
        const char *slash = strchr(p + 1, '/');
        size_t len = slash ? (size_t)(slash - dir) : strlen(dir);
        if (len >= sizeof path)
            break;
        memcpy(path, dir, len);
        path[len] = '\0';
        struct stat sb;
        if (lstat(path, &sb) == 0 && !S_ISDIR(sb.st_mode))
            return np_error_set(err, NP_ERR_IO, path, NULL,
                                S_ISLNK(sb.st_mode)
                                    ? "is a symbolic link: the dump writes nothing outside "
                                      "dump_path through it (remove it)"
                                    : "is not a folder (remove it)");
        if (!slash)
            break;
        p = slash;
    }
    return NP_OK;
}

np_status np_h5w_clear_step(const char *dump_path, int64_t step, int64_t rank, np_error *err)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/step%lld/rank%lld", dump_path, (long long)step,
             (long long)rank);
    np_status lst = no_dir_links(dir, strlen(dump_path), err);
    if (lst != NP_OK)
        return lst;
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return NP_OK; /* nothing of this step */
    int lock = -1;
    np_status st = np_dir_lock(&lock, dir, err);
    if (st == NP_OK)
        st = remove_earlier(dir, err);
    np_dir_unlock(&lock);
    return st;
}

/* The step file HDF5 opened is the one np_out created (nothing swapped in). */
static int same_file(hid_t file, int fd)
{
    hid_t afp = H5Fget_access_plist(file);
    void *handle = NULL;
    int ok = afp >= 0 && H5Fget_vfd_handle(file, afp, &handle) >= 0 && handle;
    if (afp >= 0)
        H5Pclose(afp);
    struct stat a, b;
    ok = ok && fstat(*(int *)handle, &a) == 0 && fstat(fd, &b) == 0 && a.st_dev == b.st_dev &&
         a.st_ino == b.st_ino;
    H5Eclear2(H5E_DEFAULT);
    return ok;
}

/* An O_DIRECT descriptor of the step file np_out created, or -1. */
static int open_direct(const np_h5w *w)
{
    int fd = open(w->partial, O_WRONLY | O_DIRECT | O_NOFOLLOW | O_CLOEXEC);
    struct stat a, b;
    if (fd >= 0 && (fstat(fd, &a) != 0 || fstat(w->out.fd, &b) != 0 || a.st_dev != b.st_dev ||
                    a.st_ino != b.st_ino)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Lock the step's rank folder, remove an earlier run's files of the step,
 * create dump.h5.partial exclusively. */
static np_status claim_step(np_h5w *w, const char *dir, np_error *err)
{
    np_status st = np_dir_lock(&w->lock_fd, dir, err);
    if (st != NP_OK)
        return st;
    snprintf(w->partial, sizeof w->partial, "%s/%s.partial", dir, NP_FMT_FILE);
    snprintf(w->final, sizeof w->final, "%s/%s", dir, NP_FMT_FILE);
    /* This step is being replaced: a dump.h5 of an earlier run goes now, so
     * that a run killed in this step does not leave it beside the new
     * .partial for readers to take (docs/FORMAT.md, "Crash safety"). */
    st = remove_earlier(dir, err);
    if (st == NP_OK)
        st = np_out_begin(&w->out, w->final, w->partial, err);
    if (st != NP_OK)
        np_dir_unlock(&w->lock_fd);
    return st;
}

/* The root attributes of a new step file (docs/FORMAT.md), complete=0 aside. */
static herr_t root_attrs(np_h5w *w, const np_h5w_step_info *in)
{
    herr_t e = 0;
    e |= attr_str(w->file, NP_FMT_ATTR_FORMAT, NP_FMT_NAME);
    /* Version 2 only for a step with a mesh (and so maybe placements): a
     * plain dump stays version 1 for readers that know nothing else. */
    w->has_mesh = in->mesh_dims && in->mesh_dims[0];
    w->np = 0;
    e |= attr_i64(w->file, NP_FMT_ATTR_FORMAT_VERSION, w->has_mesh ? 2 : NP_FMT_VERSION);
    e |= attr_str(w->file, NP_FMT_ATTR_NPROBE_VERSION, NP_VERSION_STRING);
    e |= attr_str(w->file, NP_FMT_ATTR_TASK, in->task);
    e |= attr_str(w->file, NP_FMT_ATTR_LEVEL, in->level);
    e |= attr_str(w->file, NP_FMT_ATTR_FRAMEWORK, in->framework);
    e |= attr_str(w->file, NP_FMT_ATTR_DEVICE, in->device);
    e |= attr_str(w->file, NP_FMT_ATTR_PRECISION, in->precision);
    e |= attr_i64(w->file, NP_FMT_ATTR_STEP, in->step);
    e |= attr_i64(w->file, NP_FMT_ATTR_RANK, in->rank);
    e |= attr_i64(w->file, NP_FMT_ATTR_WORLD_SIZE, in->world_size);
    e |= np_h5_attr_set_f64(w->file, NP_FMT_ATTR_LOSS_SCALE, in->loss_scale > 0 ? in->loss_scale : 1.0);
    if (in->dp_grad_scale > 0 && in->dp_grad_scale != 1.0)
        e |= np_h5_attr_set_f64(w->file, NP_FMT_ATTR_DP_GRAD_SCALE, in->dp_grad_scale);
    if (w->has_mesh) {
        e |= attr_str(w->file, NP_FMT_ATTR_MESH_DIMS, in->mesh_dims);
        e |= attr_str(w->file, NP_FMT_ATTR_MESH_SHAPE, in->mesh_shape);
        e |= attr_str(w->file, NP_FMT_ATTR_MESH_COORDS, in->mesh_coords);
    }
    return e;
}

np_status np_h5w_step_begin(np_h5w *w, const np_h5w_step_info *in, np_error *err)
{
    if (w->in_step)
        np_h5w_abandon(w);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/step%lld/rank%lld", w->root, (long long)in->step,
             (long long)in->rank);
    np_status cst = no_dir_links(dir, strlen(w->root), err);
    if (cst != NP_OK)
        return cst;
    if (np_mkdirs(dir) != 0)
        return np_error_set(err, errno == ENOSPC ? NP_ERR_NOSPACE : NP_ERR_IO, dir, NULL,
                            "cannot create the dump directory: %s", strerror(errno));
    cst = no_dir_links(dir, strlen(w->root), err);
    if (cst == NP_OK)
        cst = claim_step(w, dir, err);
    if (cst != NP_OK)
        return cst;

    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5AC_cache_config_t mdc;
    memset(&mdc, 0, sizeof mdc);
    mdc.version = H5AC__CURR_CACHE_CONFIG_VERSION;
    if (H5Pget_mdc_config(fapl, &mdc) >= 0) {
        mdc.evictions_enabled = 0;
        mdc.incr_mode = H5C_incr__off;
        mdc.flash_incr_mode = H5C_flash_incr__off;
        mdc.decr_mode = H5C_decr__off;
        H5Pset_mdc_config(fapl, &mdc);
    }
    /* Large payloads around the page cache where the file system allows
     * O_DIRECT (uncompressed only): aligned in the file for it. */
    w->dfd = w->hfd = -1;
    int payloads = strcmp(in->task, "statistics") != 0 && strcmp(in->task, "md5") != 0;
    if (w->compression == 0 && payloads) {
        w->dfd = open_direct(w);
        if (w->dfd >= 0 && H5Pset_alignment(fapl, DIRECT_MIN, DIRECT_ALIGN) < 0) {
            close(w->dfd);
            w->dfd = -1;
        }
    }
    hid_t vfd = (hid_t)np_vfd_id();
    if (vfd >= 0)
        H5Pset_driver(fapl, vfd, NULL);
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
    H5Pset_obj_track_times(fcpl, 0);
    w->file = H5Fcreate(w->partial, H5F_ACC_TRUNC, fcpl, fapl);
    H5Pclose(fapl);
    H5Pclose(fcpl);
    if (w->file >= 0 && !same_file(w->file, w->out.fd)) {
        H5Fclose(w->file);
        w->file = -1;
        np_error_set(err, NP_ERR_IO, w->partial, NULL,
                     "the dump file was replaced while it was being created");
    }
    if (w->file < 0) {
        if (w->dfd >= 0)
            close(w->dfd);
        w->dfd = -1;
        np_out_abort(&w->out);
        np_dir_unlock(&w->lock_fd);
        return h5fail(err, w->partial, "creating the dump file");
    }
    w->vf = np_vfd_of(w->file);
    w->vfd_err = 0;
    if (w->dfd >= 0) {
        /* The tails go through HDF5's descriptor: only with sec2 or ours. */
        hid_t afp = H5Fget_access_plist(w->file);
        void *handle = NULL;
        hid_t drv = afp >= 0 ? H5Pget_driver(afp) : -1;
        if (afp >= 0 && (drv == H5FD_SEC2 || (vfd >= 0 && drv == vfd)) &&
            H5Fget_vfd_handle(w->file, afp, &handle) >= 0 && handle)
            w->hfd = *(int *)handle;
        if (afp >= 0)
            H5Pclose(afp);
        if (w->hfd < 0) {
            close(w->dfd);
            w->dfd = -1;
        }
        H5Eclear2(H5E_DEFAULT);
    }
    w->in_step = 1;
    w->blocks = 0;
    w->e_rows = w->c_rows = 0;
    w->en = w->cn = 0;

    herr_t e = root_attrs(w, in);
    e |= attr_i64(w->file, NP_FMT_ATTR_COMPLETE, 0);
    if (e < 0) {
        np_status st = h5fail(err, w->partial, "writing the root attributes");
        np_h5w_abandon(w);
        return st;
    }
    w->entries = table(w->file, NP_FMT_ENTRIES, w->entry_ft, w->compression);
    w->calls = table(w->file, NP_FMT_CALLS, w->call_ft, w->compression);
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
    H5Pset_obj_track_times(gcpl, 0);
    w->data = H5Gcreate2(w->file, NP_FMT_DATA, H5P_DEFAULT, gcpl, H5P_DEFAULT);
    H5Pclose(gcpl);
    if (w->entries < 0 || w->calls < 0 || w->data < 0) {
        np_status st = h5fail(err, w->partial, "creating the tables");
        np_h5w_abandon(w);
        return st;
    }
    return np_h5w_flush(w, err);
}

/* `n` rows of a table: packed by hand and written as the file type when
 * the writer could set that up, else converted by HDF5. */
static herr_t append_rows(np_h5w *w, hid_t ds, const row_pack *rp, hid_t mt, hid_t ft,
                          hsize_t *rows, const void *buf, int n)
{
    if (!w->pbuf || n == 0)
        return append(ds, mt, w->row_dxpl, rows, buf, n);
    row_pack_rows(rp, w->pbuf, buf, n);
    return append(ds, ft, H5P_DEFAULT, rows, w->pbuf, n);
}

static np_status write_rows(np_h5w *w, np_error *err)
{
    if (append_rows(w, w->calls, &w->cpack, w->call_mt, w->call_ft, &w->c_rows, w->cbuf,
                    w->cn) < 0)
        return h5fail(err, w->partial, "appending to /calls");
    w->tot.calls += w->cn;
    w->cn = 0;
    if (append_rows(w, w->entries, &w->epack, w->entry_mt, w->entry_ft, &w->e_rows, w->ebuf,
                    w->en) < 0)
        return h5fail(err, w->partial, "appending to /entries");
    w->tot.entries += w->en;
    w->en = 0;
    return NP_OK;
}

np_status np_h5w_flush(np_h5w *w, np_error *err)
{
    if (!w->in_step)
        return NP_OK;
    /* The payloads before the rows that point at them. */
    np_status st = staged_done(w, err);
    if (!st)
        st = write_rows(w, err);
    if (st)
        return st;
    if (H5Fflush(w->file, H5F_SCOPE_LOCAL) < 0)
        return h5fail(err, w->partial, "flushing the dump file");
    w->blocks = 0;
    return NP_OK;
}

/* A block of ROW_BLOCK rows is full: appended to the tables; every
 * FLUSH_BLOCKS-th block the file is flushed too (a flush writes HDF5's
 * metadata in many small writes: with small rows the largest cost of a
 * block), else the next one or the step's end flushes it. On disk it is
 * still the state of a flush plus bytes nothing on disk points at yet
 * (crash safety as before), and the same rows give the same bytes. */
static np_status block_full(np_h5w *w, np_error *err)
{
    if (++w->blocks >= FLUSH_BLOCKS)
        return np_h5w_flush(w, err);
    return write_rows(w, err);
}

np_status np_h5w_call(np_h5w *w, const np_call_rec *rec, np_error *err)
{
    if (!w->in_step)
        return np_error_set(err, NP_ERR_INTERNAL, NULL, rec->call, "call outside a step");
    w->cbuf[w->cn++] = *rec;
    if (w->cn == ROW_BLOCK)
        return block_full(w, err);
    return NP_OK;
}

static hid_t mem_type(np_dtype dt)
{
    switch (dt) {
    case NP_FLOAT64: return H5T_NATIVE_DOUBLE;
    case NP_INT64: return H5T_NATIVE_INT64;
    case NP_INT32: return H5T_NATIVE_INT32;
    case NP_BOOL: return H5T_NATIVE_UINT8;
    default: return H5T_NATIVE_FLOAT;
    }
}

static hid_t file_type(np_dtype dt)
{
    switch (dt) {
    case NP_FLOAT64: return H5T_IEEE_F64LE;
    case NP_INT64: return H5T_STD_I64LE;
    case NP_INT32: return H5T_STD_I32LE;
    case NP_BOOL: return H5T_STD_U8LE;
    default: return H5T_IEEE_F32LE;
    }
}

/* `n` bytes of `data` to file offset `addr` (DIRECT_ALIGN-aligned): the
 * aligned body with O_DIRECT (at once from aligned memory, else staged), the
 * rest through HDF5's descriptor. If the file system turns O_DIRECT down
 * after all (EINVAL), direct writing stops for this step and the bytes go
 * through HDF5's descriptor. */
static np_status direct_write(np_h5w *w, const char *name, uint64_t addr,
                              const unsigned char *data, size_t n, np_error *err)
{
    size_t body = n - n % DIRECT_ALIGN, done = 0;
    int r = 0;
    np_status st = NP_OK;
    if ((uintptr_t)data % DIRECT_ALIGN == 0) {
        r = pwrite_all(w->dfd, data, body, addr);
        done = r == 0 ? body : 0;
    } else {
        if (!w->sg)
            w->sg = stager_new();
        if (w->sg && (st = staged_failed(w, err)) != NP_OK)
            return st;
        for (; w->sg && done < body; done += STAGE_BYTES < body - done ? STAGE_BYTES : body - done)
            stager_put(w->sg, w->dfd, w->hfd, data + done,
                       STAGE_BYTES < body - done ? STAGE_BYTES : body - done, addr + done, name);
    }
    if (r != 0 && errno == EINVAL) {
        close(w->dfd);
        w->dfd = -1;
        r = 0;
    }
    if (r == 0 && done < n)
        r = pwrite_all(w->hfd, data + done, n - done, addr + done);
    return r != 0 ? io_error(w, name, errno, err) : NP_OK;
}

static np_status write_payload(np_h5w *w, const np_entry_rec *rec, const void *data,
                               np_error *err)
{
    int dt = np_dtype_from_name(rec->dtype);
    if (dt < 0)
        return np_error_set(err, NP_ERR_DTYPE, w->partial, rec->name, "unknown dtype %s",
                            rec->dtype);
    if (strchr(rec->name, '/'))
        return np_error_set(err, NP_ERR_ARG, w->partial, rec->name,
                            "a leaf name must not contain '/'");
    hsize_t dims[NP_FMT_MAX_DIMS], chunk[NP_FMT_MAX_DIMS];
    int nd = rec->ndim;
    size_t es = np_dtype_storage_size((np_dtype)dt);
    size_t bytes = es;
    for (int i = 0; i < nd; i++) {
        dims[i] = chunk[i] = (hsize_t)rec->shape[i];
        bytes *= (size_t)rec->shape[i];
    }
    size_t total = bytes;
    int direct = 0;
    hid_t space = nd == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(nd, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_obj_track_times(dcpl, 0);
    if (nd > 0 && rec->numel > 0 && w->compression == 0) {
        /* No compression: one contiguous block, written by HDF5 straight from
         * the caller's buffer in one write (no chunk index, no chunk cache
         * copy); never filled first. */
        H5Pset_layout(dcpl, H5D_CONTIGUOUS);
        H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
        if (w->dfd >= 0 && total >= DIRECT_MIN && data) {
            H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
            direct = 1;
        }
    } else if (nd > 0 && rec->numel > 0) {
        /* Compressed: chunks of at most PAYLOAD_CHUNK_BYTES, cut along the
         * leading dims. */
        for (int i = 0; i < nd && bytes > PAYLOAD_CHUNK_BYTES; i++) {
            size_t rest = bytes / chunk[i];
            hsize_t c = rest >= PAYLOAD_CHUNK_BYTES ? 1 : (hsize_t)(PAYLOAD_CHUNK_BYTES / rest);
            if (c < 1)
                c = 1;
            if (c < chunk[i]) {
                chunk[i] = c;
                bytes = rest * c;
            }
        }
        H5Pset_chunk(dcpl, nd, chunk);
        if (w->compression > 0)
            H5Pset_deflate(dcpl, (unsigned)w->compression);
    }
    hid_t ds = H5Dcreate2(w->data, rec->name, file_type((np_dtype)dt), space, H5P_DEFAULT,
                          dcpl, H5P_DEFAULT);
    H5Pclose(dcpl);
    herr_t e = ds < 0 ? -1 : 0;
    np_status st = NP_OK;
    haddr_t addr = direct && e >= 0 ? H5Dget_offset(ds) : HADDR_UNDEF;
    if (addr != HADDR_UNDEF && addr % DIRECT_ALIGN == 0)
        st = direct_write(w, rec->name, (uint64_t)addr, data, total, err);
    else if (e >= 0 && rec->numel > 0)
        e = H5Dwrite(ds, mem_type((np_dtype)dt), H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    if (e >= 0 && !st)
        e = attr_str(ds, NP_FMT_DATA_DTYPE_ATTR, rec->dtype);
    /* Read the error stack before H5Dclose clears it. */
    if (e < 0)
        st = h5fail(err, w->partial, "writing a payload");
    if (ds >= 0) {
        /* The close writes what HDF5 still buffers (the sieve buffer of a
         * small payload): a failure is reported, never left to H5Dclose,
         * which in HDF5 1.10 would keep a freed id registered. */
        np_vfd_set_mode(w->vf, st ? NP_VFD_DISCARD : NP_VFD_REPORT, &w->vfd_err);
        herr_t ce = H5Dclose(ds);
        np_vfd_set_mode(w->vf, st ? NP_VFD_DISCARD : NP_VFD_NORMAL, NULL);
        if (!st && w->vfd_err) {
            st = io_error(w, rec->name, w->vfd_err, err);
            w->vfd_err = 0;
        } else if (ce < 0 && !st) {
            st = h5fail(err, w->partial, "writing a payload");
        }
    }
    H5Sclose(space);
    if (st)
        return st;
    w->tot.data_bytes += (int64_t)es * rec->numel;
    return NP_OK;
}

np_status np_h5w_entry(np_h5w *w, const np_entry_rec *rec, const void *data, np_error *err)
{
    if (!w->in_step)
        return np_error_set(err, NP_ERR_INTERNAL, NULL, rec->name, "entry outside a step");
    if (rec->has_data) {
        np_status st = write_payload(w, rec, data, err);
        if (st)
            return st;
    }
    w->ebuf[w->en++] = *rec;
    if (w->en == ROW_BLOCK)
        return block_full(w, err);
    return NP_OK;
}

np_status np_h5w_place(np_h5w *w, const np_place_rec *rec, np_error *err)
{
    if (!w->in_step || !w->has_mesh)
        return np_error_set(err, NP_ERR_INTERNAL, NULL, rec->name,
                            "placement outside a step with a mesh");
    if (w->np == w->capp) {
        size_t cap = w->capp ? 2 * w->capp : 64;
        np_place_rec *t = realloc(w->places, cap * sizeof *t);
        if (!t)
            return np_error_set(err, NP_ERR_NOMEM, NULL, rec->name, "out of memory");
        w->places = t;
        w->capp = cap;
    }
    w->places[w->np++] = *rec;
    return NP_OK;
}

/* The step's placement rows as /placements (none: no table). */
static np_status write_places(np_h5w *w, np_error *err)
{
    if (w->np == 0)
        return NP_OK;
    hid_t mt = (hid_t)np_fmt_place_h5type();
    hid_t ft = mt >= 0 ? H5Tcopy(mt) : -1;
    herr_t e = ft >= 0 ? H5Tpack(ft) : -1;
    hid_t ds = e >= 0 ? table(w->file, NP_FMT_PLACEMENTS, ft, w->compression) : -1;
    hsize_t rows = 0;
    e = ds >= 0 ? append(ds, mt, H5P_DEFAULT, &rows, w->places, (int)w->np) : -1;
    if (ds >= 0)
        H5Dclose(ds);
    if (ft >= 0)
        H5Tclose(ft);
    if (mt >= 0)
        H5Tclose(mt);
    w->np = 0;
    return e < 0 ? h5fail(err, w->partial, "writing /placements") : NP_OK;
}

np_status np_h5w_step_end(np_h5w *w, const np_h5w_scope *scope, np_error *err)
{
    if (!w->in_step)
        return NP_OK;
    np_status st = staged_done(w, err);
    if (!st)
        st = write_rows(w, err);
    if (!st)
        st = write_places(w, err);
    if (!st && scope &&
        (attr_str(w->file, NP_FMT_ATTR_SCOPE, scope->state) < 0 ||
         attr_str(w->file, NP_FMT_ATTR_SCOPE_FIRST, scope->first) < 0 ||
         attr_str(w->file, NP_FMT_ATTR_SCOPE_LAST, scope->last) < 0))
        st = h5fail(err, w->partial, "writing the scope attributes");
    if (st) {
        np_h5w_abandon(w);
        return st;
    }
    int64_t one = 1;
    hid_t a = H5Aopen(w->file, NP_FMT_ATTR_COMPLETE, H5P_DEFAULT);
    herr_t e = a < 0 ? -1 : H5Awrite(a, H5T_NATIVE_INT64, &one);
    if (a >= 0)
        H5Aclose(a);
    if (e < 0) {
        st = h5fail(err, w->partial, "marking the step complete");
        np_h5w_abandon(w);
        return st;
    }
    /* Everything is written by this flush, where a failure can still be
     * handled (abandon); the closes after it only rewrite the superblock. */
    if (H5Fflush(w->file, H5F_SCOPE_LOCAL) < 0) {
        st = h5fail(err, w->partial, "closing the dump file");
        np_h5w_abandon(w);
        return st;
    }
    /* A write failing now is reported, never returned to H5Fclose (h5vfd.c). */
    w->vfd_err = 0;
    np_vfd_set_mode(w->vf, NP_VFD_REPORT, &w->vfd_err);
    w->vf = NULL;
    H5Dclose(w->entries);
    H5Dclose(w->calls);
    H5Gclose(w->data);
    w->entries = w->calls = w->data = -1;
    if (w->dfd >= 0)
        close(w->dfd);
    w->dfd = w->hfd = -1;
    e = H5Fclose(w->file);
    w->file = -1;
    w->in_step = 0;
    if (e < 0)
        st = h5fail(err, w->partial, "closing the dump file");
    else if (w->vfd_err)
        st = np_error_set(err, w->vfd_err == EFBIG || w->vfd_err == ENOSPC || w->vfd_err == EDQUOT
                                   ? NP_ERR_NOSPACE
                                   : NP_ERR_IO,
                          w->partial, NULL, "closing the dump file failed: %s",
                          strerror(w->vfd_err));
    w->vfd_err = 0;
    if (st != NP_OK)
        np_out_keep(&w->out);
    else
        st = np_out_commit(&w->out, 0, err); /* dump.h5.partial -> dump.h5 */
    np_dir_unlock(&w->lock_fd);
    if (st != NP_OK)
        return st;
    struct stat sb;
    if (stat(w->final, &sb) == 0)
        w->tot.bytes += (int64_t)sb.st_size;
    w->tot.files++;
    return NP_OK;
}
