/* probe/h5vfd.c - the HDF5 file driver of the dump writer: HDF5's "sec2"
 * (POSIX pread/pwrite on one descriptor, same features, same file bytes) with
 * a switch that decides what happens to I/O errors once a step file is being
 * closed.
 *
 * Why: in HDF5 1.10 a failed H5Fclose (or H5Dclose) frees the file but keeps
 * its id registered; at exit H5_term_library closes that id again and the
 * program dies in H5F__close_cb (SIGSEGV). A close fails whenever the flush it
 * does fails - after a full disk or a file size limit, exactly when a dump
 * step is abandoned. There is no public way to drop such an id, so the writer
 * makes sure a close cannot fail on I/O: before closing it sets the mode of
 * the file's driver to
 *   NP_VFD_DISCARD  every further write and truncation is dropped (the file
 *                   stays as it was at its last flush, like a killed run's);
 *   NP_VFD_REPORT   writes are attempted, a failure is recorded in *report
 *                   (errno) instead of being returned to HDF5.
 * Reads are always real. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "probe_internal.h"

typedef struct vfd_file {
    H5FD_t pub;         /* must be first */
    int fd;             /* get_handle gives &fd (as sec2 does) */
    haddr_t eoa, eof;
    dev_t dev;
    ino_t ino;
    int mode;           /* NP_VFD_* */
    int *report;        /* NP_VFD_REPORT: first errno goes here */
} vfd_file;

_Static_assert(sizeof(hid_t) == sizeof(int64_t), "hid_t is 64 bits");

#define VFD_MAXADDR (((haddr_t)1 << (8 * sizeof(off_t) - 1)) - 1)

static hid_t g_vfd_id = -1;
static pthread_once_t g_vfd_once = PTHREAD_ONCE_INIT;

static herr_t fail_errno(int en)
{
    /* HDF5's own error text carries "errno = N" for the writer's h5fail(). */
    H5Epush2(H5E_DEFAULT, __FILE__, "np_vfd", __LINE__, H5E_ERR_CLS, H5E_IO, H5E_WRITEERROR,
             "file write failed: errno = %d, error message = '%s'", en, strerror(en));
    return -1;
}

/* In NP_VFD_REPORT mode a failure is noted and swallowed. */
static herr_t io_failed(vfd_file *f, int en)
{
    if (f->mode == NP_VFD_REPORT) {
        if (f->report && *f->report == 0)
            *f->report = en ? en : EIO;
        return 0;
    }
    return fail_errno(en);
}

static H5FD_t *vfd_open(const char *name, unsigned flags, hid_t fapl, haddr_t maxaddr)
{
    (void)fapl;
    if (!name || !*name || maxaddr == 0 || maxaddr > VFD_MAXADDR)
        return NULL;
    int o = (flags & H5F_ACC_RDWR) ? O_RDWR : O_RDONLY;
    if (flags & H5F_ACC_TRUNC)
        o |= O_TRUNC;
    if (flags & H5F_ACC_CREAT)
        o |= O_CREAT;
    if (flags & H5F_ACC_EXCL)
        o |= O_EXCL;
    if (flags & H5F_ACC_RDWR)
        o |= O_NOFOLLOW; /* the writer's step file is never reached through a symlink */
    int fd = open(name, o | O_CLOEXEC, 0666);
    if (fd < 0) {
        int en = errno;
        H5Epush2(H5E_DEFAULT, __FILE__, "np_vfd_open", __LINE__, H5E_ERR_CLS, H5E_FILE,
                 H5E_CANTOPENFILE, "unable to open file: name = '%s', errno = %d, error message = '%s'",
                 name, en, strerror(en));
        return NULL;
    }
    struct stat sb;
    vfd_file *f = fstat(fd, &sb) == 0 ? calloc(1, sizeof *f) : NULL;
    if (!f) {
        close(fd);
        return NULL;
    }
    f->fd = fd;
    f->eof = (haddr_t)sb.st_size;
    f->dev = sb.st_dev;
    f->ino = sb.st_ino;
    return &f->pub;
}

static herr_t vfd_close(H5FD_t *file)
{
    vfd_file *f = (vfd_file *)file;
    int r = close(f->fd);
    int en = errno;
    herr_t e = 0;
    if (r != 0 && f->mode != NP_VFD_DISCARD)
        e = io_failed(f, en);
    free(f);
    return e;
}

static int vfd_cmp(const H5FD_t *a, const H5FD_t *b)
{
    const vfd_file *x = (const vfd_file *)a, *y = (const vfd_file *)b;
    if (x->dev != y->dev)
        return x->dev < y->dev ? -1 : 1;
    if (x->ino != y->ino)
        return x->ino < y->ino ? -1 : 1;
    return 0;
}

static herr_t vfd_query(const H5FD_t *file, unsigned long *flags)
{
    (void)file;
    /* sec2's features: the same aggregation, so the same file bytes. */
    *flags = H5FD_FEAT_AGGREGATE_METADATA | H5FD_FEAT_ACCUMULATE_METADATA |
             H5FD_FEAT_DATA_SIEVE | H5FD_FEAT_AGGREGATE_SMALLDATA |
             H5FD_FEAT_POSIX_COMPAT_HANDLE | H5FD_FEAT_SUPPORTS_SWMR_IO |
             H5FD_FEAT_DEFAULT_VFD_COMPATIBLE;
    return 0;
}

static haddr_t vfd_get_eoa(const H5FD_t *file, H5FD_mem_t type)
{
    (void)type;
    return ((const vfd_file *)file)->eoa;
}

static herr_t vfd_set_eoa(H5FD_t *file, H5FD_mem_t type, haddr_t addr)
{
    (void)type;
    ((vfd_file *)file)->eoa = addr;
    return 0;
}

static haddr_t vfd_get_eof(const H5FD_t *file, H5FD_mem_t type)
{
    (void)type;
    return ((const vfd_file *)file)->eof;
}

static herr_t vfd_get_handle(H5FD_t *file, hid_t fapl, void **handle)
{
    (void)fapl;
    *handle = &((vfd_file *)file)->fd;
    return 0;
}

static herr_t vfd_read(H5FD_t *file, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size,
                       void *buf)
{
    (void)type;
    (void)dxpl;
    vfd_file *f = (vfd_file *)file;
    unsigned char *p = buf;
    while (size > 0) {
        ssize_t r = pread(f->fd, p, size, (off_t)addr);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return fail_errno(errno);
        if (r == 0) { /* past the end of the file: zeros, as sec2 */
            memset(p, 0, size);
            break;
        }
        p += r;
        size -= (size_t)r;
        addr += (haddr_t)r;
    }
    return 0;
}

static herr_t vfd_write(H5FD_t *file, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size,
                        const void *buf)
{
    (void)type;
    (void)dxpl;
    vfd_file *f = (vfd_file *)file;
    haddr_t end = addr + size;
    if (f->mode != NP_VFD_DISCARD) {
        const unsigned char *p = buf;
        while (size > 0) {
            ssize_t r = pwrite(f->fd, p, size, (off_t)addr);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                return io_failed(f, r == 0 ? EIO : errno);
            p += r;
            size -= (size_t)r;
            addr += (haddr_t)r;
        }
    }
    if (end > f->eof)
        f->eof = end;
    return 0;
}

static herr_t vfd_truncate(H5FD_t *file, hid_t dxpl, hbool_t closing)
{
    (void)dxpl;
    (void)closing;
    vfd_file *f = (vfd_file *)file;
    if (f->eoa != f->eof) {
        if (f->mode != NP_VFD_DISCARD && ftruncate(f->fd, (off_t)f->eoa) != 0) {
            herr_t e = io_failed(f, errno);
            if (e < 0)
                return e;
        }
        f->eof = f->eoa;
    }
    return 0;
}

static herr_t vfd_lock(H5FD_t *file, hbool_t rw)
{
    vfd_file *f = (vfd_file *)file;
    if (flock(f->fd, (rw ? LOCK_EX : LOCK_SH) | LOCK_NB) != 0 && errno != ENOSYS) {
        int en = errno;
        H5Epush2(H5E_DEFAULT, __FILE__, "np_vfd_lock", __LINE__, H5E_ERR_CLS, H5E_FILE,
                 H5E_BADFILE, "unable to lock file, errno = %d, error message = '%s'", en,
                 strerror(en));
        return -1;
    }
    return 0;
}

static herr_t vfd_unlock(H5FD_t *file)
{
    vfd_file *f = (vfd_file *)file;
    if (flock(f->fd, LOCK_UN) != 0 && errno != ENOSYS && f->mode == NP_VFD_NORMAL)
        return fail_errno(errno);
    return 0;
}

/* HDF5 1.13.2 and later version the class struct and give each driver a
 * value; this one is only ever registered at run time (a file names no
 * driver: its bytes are sec2's), so it takes one of the values HDF5 leaves to
 * unregistered drivers (H5_VFD_RESERVED to 511). */
static const H5FD_class_t vfd_class = {
#ifdef H5FD_CLASS_VERSION
    .version = H5FD_CLASS_VERSION,
    .value = (H5FD_class_value_t)(H5_VFD_RESERVED + 0x6e),
#endif
    .name = "nprobe-sec2",
    .maxaddr = VFD_MAXADDR,
    .fc_degree = H5F_CLOSE_WEAK,
    .open = vfd_open,
    .close = vfd_close,
    .cmp = vfd_cmp,
    .query = vfd_query,
    .get_eoa = vfd_get_eoa,
    .set_eoa = vfd_set_eoa,
    .get_eof = vfd_get_eof,
    .get_handle = vfd_get_handle,
    .read = vfd_read,
    .write = vfd_write,
    .truncate = vfd_truncate,
    .lock = vfd_lock,
    .unlock = vfd_unlock,
    .fl_map = H5FD_FLMAP_DICHOTOMY,
};

static void vfd_register(void)
{
    g_vfd_id = H5FDregister(&vfd_class);
}

int64_t np_vfd_id(void)
{
    pthread_once(&g_vfd_once, vfd_register);
    /* The id dies with the library (atexit); never use a stale one. */
    if (g_vfd_id >= 0 && H5Iis_valid(g_vfd_id) <= 0)
        g_vfd_id = -1;
    return g_vfd_id;
}

void *np_vfd_of(int64_t file)
{
    hid_t fapl = H5Fget_access_plist(file);
    void *handle = NULL;
    int ours = fapl >= 0 && g_vfd_id >= 0 && H5Pget_driver(fapl) == g_vfd_id &&
               H5Fget_vfd_handle(file, fapl, &handle) >= 0 && handle;
    if (fapl >= 0)
        H5Pclose(fapl);
    return ours ? (char *)handle - offsetof(vfd_file, fd) : NULL;
}

void np_vfd_set_mode(void *vf, int mode, int *report)
{
    vfd_file *f = vf;
    if (!f)
        return;
    f->mode = mode;
    f->report = report;
}
