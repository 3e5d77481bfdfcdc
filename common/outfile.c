/* common/outfile.c - how nprobe creates every file it writes (dump steps,
 * compare reports, config_check results and packs): a temporary in the final
 * file's folder, created exclusively (O_CREAT|O_EXCL|O_NOFOLLOW: a planted
 * symlink, even a dangling one, is never followed and nothing that exists is
 * truncated), written, renamed onto the final name only when complete, removed
 * on failure. Also the reservation of report names shared by parallel runs
 * and the lock a dump run holds on the step it writes. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "nprobe/common.h"

static atomic_uint g_out_seq;

/* The live temporaries and reservations, for np_out_remove_live: fixed
 * slots (a signal handler reads them; nothing is freed under it), state 0
 * free, 1 being filled, 2 holding a path. More than LIVE_MAX at once are
 * not tracked (then a signal leaves those). */
#define LIVE_MAX 32
static struct live_slot {
    atomic_int state;
    char path[4200];
} g_live[LIVE_MAX];
static atomic_int g_dying;    /* np_out_remove_live ran: the process is ending */
static atomic_int g_creating; /* threads between creating a file and recording it */

static void live_add(const char *path)
{
    if (strlen(path) >= sizeof g_live[0].path)
        return;
    for (int i = 0; i < LIVE_MAX; i++) {
        int free_slot = 0;
        if (atomic_compare_exchange_strong(&g_live[i].state, &free_slot, 1)) {
            memcpy(g_live[i].path, path, strlen(path) + 1);
            atomic_store(&g_live[i].state, 2);
            return;
        }
    }
}

static void live_del(const char *path)
{
    for (int i = 0; i < LIVE_MAX; i++) {
        int held = 2;
        if (atomic_load(&g_live[i].state) == 2 && !strcmp(g_live[i].path, path) &&
            atomic_compare_exchange_strong(&g_live[i].state, &held, 1)) {
            atomic_store(&g_live[i].state, 0);
            return;
        }
    }
}

void np_out_remove_live(void)
{
    atomic_store(&g_dying, 1);
    struct timespec ms = {0, 1000000};
    for (int k = 0; k < 200 && atomic_load(&g_creating) > 0; k++)
        nanosleep(&ms, NULL);
    for (int i = 0; i < LIVE_MAX; i++)
        if (atomic_load(&g_live[i].state) == 2)
            unlink(g_live[i].path);
}

static np_status io_status(int en)
{
    return en == ENOSPC || en == EFBIG || en == EDQUOT ? NP_ERR_NOSPACE : NP_ERR_IO;
}

/* dir part of `path` ("." when none) and base part, both malloc'ed */
static int split_path(char **dir, char **base, const char *path)
{
    const char *slash = strrchr(path, '/');
    *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    *base = strdup(slash ? slash + 1 : path);
    if (*dir && *base)
        return 0;
    free(*dir);
    free(*base);
    return -1;
}

static int create_excl(const char *path)
{
    return open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
}

/* Create `path` exclusively and record it as live, unless the process is
 * ending (np_out_remove_live waits for the creations under way, so no
 * file is made after its sweep). */
static int create_live(const char *path)
{
    /* the ending signals wait on this thread until the file is recorded (a
     * handler run between the open and the record would miss it) */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    atomic_fetch_add(&g_creating, 1);
    int fd = -1, en = 0;
    if (atomic_load(&g_dying))
        en = EINTR;
    else if ((fd = create_excl(path)) >= 0)
        live_add(path);
    else
        en = errno;
    atomic_fetch_sub(&g_creating, 1);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = en;
    return fd;
}

static np_status make_temp(np_out *o, np_error *err)
{
    char *dir, *base;
    if (split_path(&dir, &base, o->final) != 0)
        return np_error_set(err, NP_ERR_NOMEM, o->final, NULL, "out of memory");
    size_t cap = strlen(dir) + strlen(base) + 64;
    o->tmp = malloc(cap);
    np_status st = o->tmp ? NP_OK : NP_ERR_NOMEM;
    for (int tries = 0; st == NP_OK && o->fd < 0; tries++) {
        snprintf(o->tmp, cap, "%s/.%s.%ld.%u.tmp", dir, base, (long)getpid(),
                 atomic_fetch_add(&g_out_seq, 1u));
        o->fd = create_live(o->tmp);
        if (o->fd < 0 && (errno != EEXIST || tries >= 100))
            st = np_error_set(err, io_status(errno), o->final, NULL,
                              "cannot create a temporary file %s in the output folder: %s",
                              o->tmp, strerror(errno));
    }
    if (st == NP_ERR_NOMEM)
        np_error_set(err, st, o->final, NULL, "out of memory");
    free(dir);
    free(base);
    return st;
}

np_status np_out_begin(np_out *o, const char *final, const char *tmp, np_error *err)
{
    o->fd = -1;
    o->fp = NULL;
    o->tmp = NULL;
    o->final = strdup(final);
    if (!o->final)
        return np_error_set(err, NP_ERR_NOMEM, final, NULL, "out of memory");
    np_status st = NP_OK;
    if (tmp) {
        o->tmp = strdup(tmp);
        if (!o->tmp)
            st = np_error_set(err, NP_ERR_NOMEM, tmp, NULL, "out of memory");
        else if ((o->fd = create_excl(tmp)) < 0)
            st = np_error_set(err, io_status(errno), tmp, NULL,
                              errno == EEXIST || errno == ELOOP
                                  ? "cannot create the file: %s (nprobe never writes through "
                                    "or over an existing file)"
                                  : "cannot create the file: %s",
                              strerror(errno));
    } else {
        st = make_temp(o, err);
    }
    if (st != NP_OK) {
        free(o->tmp);
        free(o->final);
        o->tmp = o->final = NULL;
    }
    return st;
}

FILE *np_out_stream(np_out *o)
{
    if (!o->fp && o->fd >= 0)
        o->fp = fdopen(o->fd, "w");
    return o->fp;
}

/* close the temporary's descriptor (and stream); errno of the first failure */
static int out_close(np_out *o)
{
    int en = 0;
    if (o->fp) {
        if (fflush(o->fp) != 0 || ferror(o->fp))
            en = errno ? errno : EIO;
        if (fclose(o->fp) != 0 && !en)
            en = errno ? errno : EIO;
        o->fp = NULL;
        o->fd = -1;
    }
    if (o->fd >= 0) {
        if (close(o->fd) != 0 && !en)
            en = errno;
        o->fd = -1;
    }
    return en;
}

static void out_free(np_out *o)
{
    if (o->tmp)
        live_del(o->tmp);
    free(o->tmp);
    free(o->final);
    o->tmp = o->final = NULL;
}

static int sync_path(const char *path)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno;
    int en = fsync(fd) != 0 ? errno : 0;
    close(fd);
    return en;
}

static int install(const char *tmp, const char *final, unsigned flags)
{
    if (!(flags & NP_OUT_NOREPLACE))
        return rename(tmp, final) != 0 ? errno : 0;
    /* link() never replaces: the name is taken atomically or not at all */
    if (link(tmp, final) != 0)
        return errno;
    unlink(tmp);
    return 0;
}

np_status np_out_commit(np_out *o, unsigned flags, np_error *err)
{
    int en = out_close(o);
    if (!en && (flags & NP_OUT_SYNC))
        en = sync_path(o->tmp);
    if (en) {
        np_status st = np_error_set(err, io_status(en), o->final, NULL,
                                    "writing the file failed: %s", strerror(en));
        np_out_abort(o);
        return st;
    }
    en = install(o->tmp, o->final, flags);
    if (en) {
        np_status st = np_error_set(err, io_status(en), o->final, NULL,
                                    en == EEXIST ? "the file exists already (written by another "
                                                   "run?); it is not overwritten"
                                                 : "cannot rename %s onto it: %s",
                                    o->tmp, strerror(en));
        np_out_abort(o);
        return st;
    }
    out_free(o);
    return NP_OK;
}

void np_out_abort(np_out *o)
{
    if (!o->final)
        return;
    out_close(o);
    unlink(o->tmp);
    out_free(o);
}

void np_out_keep(np_out *o)
{
    if (!o->final)
        return;
    out_close(o);
    out_free(o);
}

/* ---- report names ------------------------------------------------------- */

static int name_taken(const char *dir, const char *name, const char *const *exts, int n_ext)
{
    char path[4200];
    struct stat sb;
    for (int k = 0; k < n_ext; k++) {
        snprintf(path, sizeof path, "%s/%s.%s", dir, name, exts[k]);
        if (lstat(path, &sb) == 0)
            return 1;
    }
    return 0;
}

np_status np_out_reserve(char *name, size_t cap, const char *dir, const char *base,
                         const char *const *exts, int n_ext, np_error *err)
{
    char path[4200];
    for (int n = 1; n < 10000; n++) {
        if (n == 1)
            snprintf(name, cap, "%s", base);
        else
            snprintf(name, cap, "%s_%d", base, n);
        snprintf(path, sizeof path, "%s/.%s.reserved", dir, name);
        int fd = create_live(path);
        if (fd < 0) {
            if (errno == EEXIST)
                continue;
            return np_error_set(err, io_status(errno), path, NULL,
                                "cannot reserve a report name: %s", strerror(errno));
        }
        close(fd);
        if (!name_taken(dir, name, exts, n_ext))
            return NP_OK;
        live_del(path);
        unlink(path);
    }
    return np_error_set(err, NP_ERR_LIMIT, dir, base, "no free report name left");
}

void np_out_release(const char *dir, const char *name)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/.%s.reserved", dir, name);
    unlink(path);
    live_del(path);
}

/* ---- the lock of a folder ---------------------------------------------- */

np_status np_dir_lock(int *fd, const char *dir, np_error *err)
{
    *fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (*fd < 0)
        return np_error_set(err, NP_ERR_IO, dir, NULL, "cannot open the folder: %s",
                            strerror(errno));
    if (flock(*fd, LOCK_EX | LOCK_NB) == 0)
        return NP_OK;
    int en = errno;
    close(*fd);
    *fd = -1;
    if (en == EWOULDBLOCK)
        return np_error_set(err, NP_ERR_LIMIT, dir, NULL,
                            "another run is writing into this folder now (two runs cannot dump "
                            "into one dump_path at the same time; give each its own)");
    return np_error_set(err, NP_ERR_IO, dir, NULL, "cannot lock the folder: %s", strerror(en));
}

void np_dir_unlock(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

const char *np_out_lib_reason(const char *lib_text, int errnum)
{
    switch (errnum) {
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
    case EIO:
    case EROFS:
        return strerror(errnum);
    default:
        return lib_text;
    }
}
