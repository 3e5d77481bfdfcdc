/* dumpio/nprobe_h5.c - the source for nprobe's own dump, format version 1
 * (docs/FORMAT.md): {root}/step{S}/rank{R}/dump.h5. Finding the step files,
 * opening them read-only with file locking off (a live run's partial step
 * can be inspected), the root attributes (fixed or variable-length strings,
 * so files written by h5py read too), /entries and /calls streamed in
 * chunks, and payloads: uncompressed little-endian float32 described as
 * file segments for the caller's own pread, anything else read with
 * H5Dread. HDF5 (a serial build) is entered by one thread at a time. */
#define _DEFAULT_SOURCE /* d_type */
#include <dirent.h>
#include <fcntl.h>
#include <hdf5.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

#define ROW_CHUNK 2048

/* HDF5 is not thread-safe in Debian's serial build: every call of this
 * source holds this lock. */
static pthread_mutex_t h5_lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct h5dump {
    hid_t file;
    hid_t data;              /* /data, opened on the first payload; -1 absent, -2 not yet */
    int data_problem;        /* why /data was not opened (np_h5_open_local) */
    int fd;                  /* for FILE_F32 payloads, opened on the first; -1 */
    char path[4096];
    int complete;
} h5dump;

/* ---- finding files ---------------------------------------------------------- */

/* The state of a file in a rank directory by its name; -1 for other files. */
static int file_state(const char *name)
{
    size_t fl = strlen(NP_FMT_FILE), n = strlen(name);
    if (strcmp(name, NP_FMT_FILE) == 0)
        return NP_DUMPIO_COMPLETE;
    if (strncmp(name, NP_FMT_FILE NP_FMT_PARTIAL_SUFFIX, fl + strlen(NP_FMT_PARTIAL_SUFFIX)) == 0)
        return NP_DUMPIO_PARTIAL;
    if (strncmp(name, NP_FMT_FILE ".", fl + 1) == 0 || (n > 4 && !strcmp(name + n - 4, ".tmp")))
        return NP_DUMPIO_TEMP;
    return -1;
}

/* The dump files of a rank directory; the number found, -1 out of memory. */
static int scan_rank_dir(dumpio_refs *l, const char *dir, int step, int rank)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *e;
    int found = 0;
    char path[4096];
    while ((e = readdir(d))) {
        int st = file_state(e->d_name);
        if (st < 0 || (size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path)
            continue;
        if (e->d_type != DT_REG && !dumpio_is_file(path))
            continue;
        if (dumpio_refs_push(l, path, step, rank, (np_dumpio_state)st) != 0) {
            found = -1;
            break;
        }
        found++;
    }
    closedir(d);
    return found;
}

typedef struct scan_ctx {
    dumpio_refs *l;
    int step;
    int oom;
} scan_ctx;

static int on_rank_dir(void *user, const char *path, int rank)
{
    scan_ctx *c = user;
    int n = scan_rank_dir(c->l, path, c->step, rank);
    if (n == 0)
        n = dumpio_refs_push(c->l, path, c->step, rank, NP_DUMPIO_MISSING) == 0 ? 1 : -1;
    c->oom |= n < 0;
    return n < 0;
}

static int on_step_dir(void *user, const char *path, int step)
{
    scan_ctx *c = user;
    scan_ctx sub = {c->l, step, 0};
    dumpio_each_numbered(path, "rank", on_rank_dir, &sub);
    c->oom |= sub.oom;
    return sub.oom;
}

static np_status h5_find(np_dumpio_ref **out, size_t *n, const char *path, np_error *err)
{
    *out = NULL;
    *n = 0;
    dumpio_refs l;
    memset(&l, 0, sizeof l);
    char last[256], prev[256];
    dumpio_tail_names(path, last, prev, sizeof last);
    int oom = 0;
    if (dumpio_is_file(path)) {
        /* step and rank from ".../step{S}/rank{R}/file" */
        char dir[4096], dlast[256], dprev[256];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        dumpio_tail_names(slash ? dir : ".", dlast, dprev, sizeof dlast);
        int st = file_state(last);
        oom = dumpio_refs_push(&l, path, slash ? dumpio_num_after(dprev, "step") : -1,
                               slash ? dumpio_num_after(dlast, "rank") : -1,
                               st == NP_DUMPIO_PARTIAL ? NP_DUMPIO_PARTIAL : NP_DUMPIO_COMPLETE);
    } else if (!dumpio_is_dir(path)) {
        return np_error_set(err, NP_ERR_NOTFOUND, path, NULL,
                            "no such file or directory (expected a dump root, a step or rank "
                            "directory, or a %s)", NP_FMT_FILE);
    } else {
        int step = dumpio_num_after(last, "step");
        int found = scan_rank_dir(&l, path, dumpio_num_after(prev, "step"),
                                  dumpio_num_after(last, "rank"));
        oom = found < 0;
        scan_ctx c = {&l, step, 0};
        if (!oom && found == 0)
            dumpio_each_numbered(path, "rank", on_rank_dir, &c);
        if (!oom && !c.oom && l.n == 0)
            dumpio_each_numbered(path, "step", on_step_dir, &c);
        oom |= c.oom;
    }
    if (oom || dumpio_refs_finish(&l, out, n) != 0) {
        dumpio_refs_free(&l);
        return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory listing the dump");
    }
    if (*n == 0)
        return np_error_set(err, NP_ERR_NOTFOUND, path, NULL,
                            "no dump files (%s) found here (expected step*/rank*/%s below it, "
                            "rank*/%s, or %s)",
                            NP_FMT_FILE, NP_FMT_FILE, NP_FMT_FILE, NP_FMT_FILE);
    return NP_OK;
}

static int has_signature(const char *path)
{
    static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    unsigned char b[8];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t r = pread(fd, b, sizeof b, 0);
    close(fd);
    return r == (ssize_t)sizeof b && memcmp(b, sig, sizeof b) == 0;
}

static int any_file(void *user, const char *path, int num)
{
    (void)num;
    dumpio_refs *l = user;
    return scan_rank_dir(l, path, -1, -1) != 0;
}

static int any_step(void *user, const char *path, int num)
{
    (void)num;
    return dumpio_each_numbered(path, "rank", any_file, user);
}

static int h5_detect(const char *path)
{
    if (dumpio_is_file(path))
        return has_signature(path);
    if (!dumpio_is_dir(path))
        return 0;
    dumpio_refs l;
    memset(&l, 0, sizeof l);
    int found = scan_rank_dir(&l, path, -1, -1) != 0 ||
                dumpio_each_numbered(path, "rank", any_file, &l) ||
                dumpio_each_numbered(path, "step", any_step, &l);
    dumpio_refs_free(&l);
    return found;
}

/* ---- opening ------------------------------------------------------------------ */

static int is_partial_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return file_state(s ? s + 1 : path) == NP_DUMPIO_PARTIAL;
}

/* File access: locking off (another process may be writing the file), and
 * a small metadata cache: peak memory must not grow with the number of
 * payload datasets (each chunked dataset's index node stays in the cache,
 * up to 32 MB per file by default); a reader touches each dataset once. */
static hid_t reader_fapl(void)
{
    static int limits_set;
    if (!limits_set) {
        /* regular-object and block lists keep up to 4 MB: the metadata
         * cache of a file (~0.5 MB) and the chunk buffers of its tables are
         * then reused by the next file instead of allocated and touched
         * afresh (page faults cost more than reading a small table) */
        H5set_free_list_limits(4 << 20, 2 << 20, 1 << 20, 256 << 10, 4 << 20, 2 << 20);
        limits_set = 1;
    }
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0)
        return H5P_DEFAULT;
    H5Pset_file_locking(fapl, 0, 1);
    H5AC_cache_config_t mdc;
    memset(&mdc, 0, sizeof mdc);
    mdc.version = H5AC__CURR_CACHE_CONFIG_VERSION;
    if (H5Pget_mdc_config(fapl, &mdc) >= 0) {
        mdc.set_initial_size = 1;
        mdc.initial_size = 1 << 20;
        mdc.min_size = 1 << 20;
        mdc.max_size = 2 << 20;
        H5Pset_mdc_config(fapl, &mdc);
    }
    return fapl;
}

/* The root attributes are read into the info with defaults for absent
 * ones; the first one present but not a single value of its type (an
 * array, another type class) is kept and refuses the file. */
typedef struct attr_reader {
    hid_t file;
    const char *bad_name;
    int bad_rc;
} attr_reader;

static void attr_str(attr_reader *r, const char *name, char *dst, size_t cap)
{
    int rc = np_h5_attr_get_str(r->file, name, dst, cap);
    if (rc != 0 && rc != NP_H5_ATTR_ABSENT && !r->bad_name) {
        r->bad_name = name;
        r->bad_rc = rc;
    }
}

static void attr_i64(attr_reader *r, const char *name, int64_t *v)
{
    int rc = np_h5_attr_get_i64(r->file, name, v);
    if (rc != 0 && rc != NP_H5_ATTR_ABSENT && !r->bad_name) {
        r->bad_name = name;
        r->bad_rc = rc;
    }
}

/* Append one problem to in->problems ("; "-separated). */
static void problem(np_dumpio_info *in, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(np_dumpio_info *in, const char *fmt, ...)
{
    size_t u = strlen(in->problems);
    if (u + 3 >= sizeof in->problems)
        return;
    if (u) {
        memcpy(in->problems + u, "; ", 3);
        u += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(in->problems + u, sizeof in->problems - u, fmt, ap);
    va_end(ap);
}

static int one_of(const char *s, const char *const *set)
{
    for (; *set; set++)
        if (!strcmp(s, *set))
            return 1;
    return 0;
}

/* Root attributes outside their sets (docs/FORMAT.md): noted, and read as
 * the safe value (complete other than 1: incomplete; loss_scale not
 * positive finite: 1). */
static void check_info(attr_reader *r, np_dumpio_info *in)
{
    static const char *const tasks[] = {"statistics", "tensor", "md5", "overflow_check", NULL};
    static const char *const levels[] = {"L0", "L1", "mix", NULL};
    static const char *const scopes[] = {"closed", "open", "not reached", NULL};
    in->problems[0] = '\0';
    if (in->complete != 0 && in->complete != 1) {
        problem(in, "complete is %lld (expected 0 or 1): read as 0, an incomplete step",
                (long long)in->complete);
        in->complete = 0;
    }
    double ls = 1.0;
    if (np_h5_attr_get_f64(r->file, NP_FMT_ATTR_LOSS_SCALE, &ls) == 0 && !(isfinite(ls) && ls > 0))
        problem(in, "loss_scale is %g (expected a positive finite factor): read as 1, gradients "
                    "compared unscaled", ls);
    if (in->task[0] && !one_of(in->task, tasks))
        problem(in, "task is '%s' (expected statistics, tensor, md5 or overflow_check)", in->task);
    if (in->level[0] && !one_of(in->level, levels))
        problem(in, "level is '%s' (expected L0, L1 or mix)", in->level);
    if (in->scope[0] && !one_of(in->scope, scopes))
        problem(in, "scope is '%s' (expected closed, open or not reached)", in->scope);
    if (in->world_size < 1)
        problem(in, "world_size is %lld (expected at least 1)", (long long)in->world_size);
    if (in->step < -1 || (in->step == -1 && H5Aexists(r->file, NP_FMT_ATTR_STEP) > 0))
        problem(in, "step is %lld (expected 0 or more)", (long long)in->step);
    if (in->rank < -1 || (in->rank == -1 && H5Aexists(r->file, NP_FMT_ATTR_RANK) > 0))
        problem(in, "rank is %lld (expected 0 or more)", (long long)in->rank);
    else if (in->world_size >= 1 && in->rank >= in->world_size)
        problem(in, "rank %lld is not below world_size %lld", (long long)in->rank,
                (long long)in->world_size);
}

/* "a,b,c" into at most NP_FMT_MESH_MAX items; the count, -1 past it. */
static int split_list(const char *s, char out[][16], int64_t *num)
{
    int k = 0;
    while (*s) {
        if (k == NP_FMT_MESH_MAX)
            return -1;
        const char *c = strchr(s, ',');
        size_t len = c ? (size_t)(c - s) : strlen(s);
        if (out)
            snprintf(out[k], 16, "%.*s", (int)(len < 15 ? len : 15), s);
        if (num) {
            char tmp[32], *end;
            snprintf(tmp, sizeof tmp, "%.*s", (int)(len < 31 ? len : 31), s);
            num[k] = strtoll(tmp, &end, 10);
            if (!tmp[0] || *end)
                num[k] = -1;
        }
        k++;
        s += len;
        if (*s == ',' && !*++s)
            return -1;
    }
    return k;
}

/* The mesh of a version 2 file: mesh_dims, mesh_shape and mesh_coords, each
 * with the same number of items; a mismatch is a problem and no mesh. */
static void read_mesh(attr_reader *r, np_dumpio_info *in)
{
    char dims[128] = "", shape[128] = "", coords[128] = "";
    attr_str(r, NP_FMT_ATTR_MESH_DIMS, dims, sizeof dims);
    attr_str(r, NP_FMT_ATTR_MESH_SHAPE, shape, sizeof shape);
    attr_str(r, NP_FMT_ATTR_MESH_COORDS, coords, sizeof coords);
    int nd = split_list(dims, in->mesh_dims, NULL);
    int ns = split_list(shape, NULL, in->mesh_shape);
    int nc = split_list(coords, NULL, in->mesh_coords);
    in->mesh_ndim = 0;
    if (nd <= 0 || ns != nd || nc != nd) {
        problem(in, "mesh_dims '%s', mesh_shape '%s', mesh_coords '%s' (expected 1 to %d "
                    "\",\"-separated items each, as many of each): read as no mesh",
                dims, shape, coords, NP_FMT_MESH_MAX);
        return;
    }
    int64_t size = 1;
    for (int k = 0; k < nd; k++) {
        if (in->mesh_shape[k] < 1 || in->mesh_coords[k] < 0 ||
            in->mesh_coords[k] >= in->mesh_shape[k]) {
            problem(in, "mesh_coords '%s' is not inside mesh_shape '%s' (dimension %s): read "
                        "as no mesh", coords, shape, in->mesh_dims[k]);
            return;
        }
        if (strcmp(in->mesh_dims[k], NP_FMT_MESH_MB) != 0) /* micro-batches: in time */
            size *= in->mesh_shape[k];
    }
    if (in->world_size >= 1 && size != in->world_size) {
        problem(in, "mesh_shape '%s' holds %lld ranks, world_size is %lld: read as no mesh",
                shape, (long long)size, (long long)in->world_size);
        return;
    }
    in->mesh_ndim = nd;
}

static void read_info(attr_reader *r, np_dumpio_info *in)
{
    attr_str(r, NP_FMT_ATTR_NPROBE_VERSION, in->nprobe_version, sizeof in->nprobe_version);
    attr_str(r, NP_FMT_ATTR_TASK, in->task, sizeof in->task);
    attr_str(r, NP_FMT_ATTR_LEVEL, in->level, sizeof in->level);
    attr_str(r, NP_FMT_ATTR_FRAMEWORK, in->framework, sizeof in->framework);
    attr_str(r, NP_FMT_ATTR_DEVICE, in->device, sizeof in->device);
    attr_str(r, NP_FMT_ATTR_PRECISION, in->precision, sizeof in->precision);
    in->step = in->rank = -1;
    in->world_size = 1;
    in->complete = 0;
    attr_i64(r, NP_FMT_ATTR_STEP, &in->step);
    attr_i64(r, NP_FMT_ATTR_RANK, &in->rank);
    attr_i64(r, NP_FMT_ATTR_WORLD_SIZE, &in->world_size);
    attr_i64(r, NP_FMT_ATTR_COMPLETE, &in->complete);
    in->loss_scale = np_fmt_get_loss_scale(r->file);
    in->stats_keep_inf = 0;
    in->has_calls = H5Lexists(r->file, NP_FMT_CALLS, H5P_DEFAULT) > 0;
    attr_str(r, NP_FMT_ATTR_SCOPE, in->scope, sizeof in->scope);
    if (in->scope[0]) {
        attr_str(r, NP_FMT_ATTR_SCOPE_FIRST, in->scope_first, sizeof in->scope_first);
        attr_str(r, NP_FMT_ATTR_SCOPE_LAST, in->scope_last, sizeof in->scope_last);
    }
    if (in->format_version >= 2)
        read_mesh(r, in);
    check_info(r, in);
}

/* The format and version checks, then the other attributes; NP_OK when f
 * is an nprobe dump v1 whose attributes are each a single value. */
static np_status check_format(np_dumpio_info *in, hid_t f, const char *path, np_error *err)
{
    int rc = np_h5_attr_get_str(f, NP_FMT_ATTR_FORMAT, in->format, sizeof in->format);
    if (rc != 0 && rc != NP_H5_ATTR_ABSENT)
        return np_error_set(err, NP_ERR_FORMAT, path, NP_FMT_ATTR_FORMAT,
                            "not an nprobe dump: root attribute '%s' %s", NP_FMT_ATTR_FORMAT,
                            np_h5_attr_problem(rc));
    if (rc != 0 || strcmp(in->format, NP_FMT_NAME) != 0)
        return np_error_set(err, NP_ERR_FORMAT, path, NP_FMT_ATTR_FORMAT,
                            "not an nprobe dump: root attribute '%s' is '%s', expected '%s'",
                            NP_FMT_ATTR_FORMAT, in->format[0] ? in->format : "(missing)",
                            NP_FMT_NAME);
    in->format_version = -1;
    rc = np_h5_attr_get_i64(f, NP_FMT_ATTR_FORMAT_VERSION, &in->format_version);
    if (rc != 0 && rc != NP_H5_ATTR_ABSENT)
        return np_error_set(err, NP_ERR_FORMAT, path, NP_FMT_ATTR_FORMAT_VERSION,
                            "root attribute '%s' %s", NP_FMT_ATTR_FORMAT_VERSION,
                            np_h5_attr_problem(rc));
    if (in->format_version < 1 || in->format_version > NP_FMT_VERSION_MAX)
        return np_error_set(err, NP_ERR_FORMAT, path, NP_FMT_ATTR_FORMAT_VERSION,
                            "dump format version %lld, this nprobe reads versions 1 to %d",
                            (long long)in->format_version, NP_FMT_VERSION_MAX);
    attr_reader r = {f, NULL, 0};
    read_info(&r, in);
    if (r.bad_name)
        return np_error_set(err, NP_ERR_FORMAT, path, r.bad_name, "root attribute '%s' %s",
                            r.bad_name, np_h5_attr_problem(r.bad_rc));
    /* the data-parallel factor is refused, not read as 1: gradients divided
     * by a wrong factor would be judged against the wrong values */
    in->dp_grad_scale = 1.0;
    rc = np_h5_attr_get_f64(f, NP_FMT_ATTR_DP_GRAD_SCALE, &in->dp_grad_scale);
    if (rc != 0 && rc != NP_H5_ATTR_ABSENT)
        return np_error_set(err, NP_ERR_FORMAT, path, NP_FMT_ATTR_DP_GRAD_SCALE,
                            "root attribute '%s' %s", NP_FMT_ATTR_DP_GRAD_SCALE,
                            np_h5_attr_problem(rc));
    if (rc == NP_H5_ATTR_ABSENT)
        in->dp_grad_scale = 1.0;
    else if (!(isfinite(in->dp_grad_scale) && in->dp_grad_scale > 0))
        return np_error_set(err, NP_ERR_FORMAT, path, NP_FMT_ATTR_DP_GRAD_SCALE,
                            "root attribute '%s' is %g (expected a positive finite factor, the "
                            "divisor of the run's averaging data-parallel reduction)",
                            NP_FMT_ATTR_DP_GRAD_SCALE, in->dp_grad_scale);
    return NP_OK;
}

static np_status open_locked(h5dump **out, np_dumpio_info *in, const char *path, np_error *err)
{
    *out = NULL;
    if (access(path, R_OK) != 0)
        return np_error_set(err, NP_ERR_NOTFOUND, path, NULL,
                            dumpio_is_file(path) ? "cannot read the file" : "no such file");
    hid_t fapl = reader_fapl();
    const char *why = NULL;
    hid_t f = np_h5_fopen_read(path, fapl, &why); /* a FIFO must not block the reader */
    if (fapl != H5P_DEFAULT)
        H5Pclose(fapl);
    if (f < 0 && why)
        return np_error_set(err, NP_ERR_FORMAT, path, NULL, "cannot open: %s", why);
    if (f < 0) {
        if (is_partial_name(path))
            return np_error_set(err, NP_ERR_INCOMPLETE, path, NULL,
                                "incomplete step: the run stopped while writing this file and "
                                "it cannot be read");
        return np_error_set(err, NP_ERR_FORMAT, path, NULL,
                            "not an HDF5 file, or truncated (expected an nprobe dump, %s)",
                            NP_FMT_FILE);
    }
    np_status st = check_format(in, f, path, err);
    h5dump *d = st == NP_OK ? calloc(1, sizeof *d) : NULL;
    if (st == NP_OK && !d)
        st = np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    if (st != NP_OK) {
        H5Fclose(f);
        return st;
    }
    d->file = f;
    d->data = -2;
    d->fd = -1;
    d->complete = in->complete != 0;
    snprintf(d->path, sizeof d->path, "%s", path);
    *out = d;
    return NP_OK;
}

static np_status h5_open(void **h, np_dumpio_info *in, const char *path, np_error *err)
{
    np_h5_quiet_state q;
    pthread_mutex_lock(&h5_lock);
    np_h5_quiet(&q);
    h5dump *d = NULL;
    np_status st = open_locked(&d, in, path, err);
    H5Eclear2(H5E_DEFAULT);
    np_h5_unquiet(&q);
    pthread_mutex_unlock(&h5_lock);
    *h = d;
    return st;
}

static void h5_close(void *h)
{
    h5dump *d = h;
    if (!d)
        return;
    pthread_mutex_lock(&h5_lock);
    np_h5_quiet_state q;
    np_h5_quiet(&q);
    if (d->data >= 0)
        H5Gclose(d->data);
    if (d->file >= 0)
        H5Fclose(d->file);
    H5Eclear2(H5E_DEFAULT);
    np_h5_unquiet(&q);
    pthread_mutex_unlock(&h5_lock);
    if (d->fd >= 0)
        close(d->fd);
    free(d);
}

/* ---- the tables ----------------------------------------------------------------- */

/* A copy of the memory type `mt` whose string members take the padding of
 * the file's member of the same name when that is NUL-padded or
 * NUL-terminated (the rows are terminated after the read anyway). The probe
 * writes exactly `mt`; a table written by another tool (h5py writes
 * NUL-padded strings) would otherwise be converted string by string by
 * HDF5, which costs more than the rest of the read. -1 if not needed. */
static hid_t mem_type_like_file(hid_t mt, hid_t ft)
{
    if (ft < 0 || H5Tget_class(ft) != H5T_COMPOUND || H5Tequal(ft, mt) > 0)
        return -1;
    int n = H5Tget_nmembers(mt);
    hid_t t = n > 0 ? H5Tcreate(H5T_COMPOUND, H5Tget_size(mt)) : -1;
    int changed = 0;
    herr_t e = t >= 0 ? 0 : -1;
    for (int i = 0; i < n && e >= 0; i++) {
        char *name = H5Tget_member_name(mt, (unsigned)i);
        hid_t m = H5Tget_member_type(mt, (unsigned)i);
        int fi = name ? H5Tget_member_index(ft, name) : -1;
        hid_t fm = fi >= 0 ? H5Tget_member_type(ft, (unsigned)fi) : -1;
        if (m >= 0 && fm >= 0 && H5Tget_class(m) == H5T_STRING &&
            H5Tget_class(fm) == H5T_STRING) {
            H5T_str_t pad = H5Tget_strpad(fm);
            if ((pad == H5T_STR_NULLPAD || pad == H5T_STR_NULLTERM) && pad != H5Tget_strpad(m)) {
                hid_t c = H5Tcopy(m);
                if (c >= 0 && H5Tset_strpad(c, pad) >= 0) {
                    H5Tclose(m);
                    m = c;
                    changed = 1;
                } else if (c >= 0) {
                    H5Tclose(c);
                }
            }
        }
        e = name && m >= 0 ? H5Tinsert(t, name, H5Tget_member_offset(mt, (unsigned)i), m) : -1;
        if (fm >= 0)
            H5Tclose(fm);
        if (m >= 0)
            H5Tclose(m);
        if (name)
            H5free_memory(name);
    }
    if (e < 0 || !changed) {
        if (t >= 0)
            H5Tclose(t);
        return -1;
    }
    return t;
}

/* What read_table hands each chunk to: the sink's begin and user, and
 * `deliver`, which terminates the rows' strings and calls the sink. */
typedef struct table_out {
    np_status (*begin)(void *user, size_t n_hint, np_error *err);
    void *user;
    np_status (*deliver)(const void *sink, void *recs, size_t first, size_t n, np_error *err);
    const void *sink;
} table_out;

/* The row buffer of read_table, kept for the next table (under h5_lock):
 * a fresh buffer of this size is a fresh mmap and ~350 page faults per
 * table in glibc, which cost more than reading the rows of a small table. */
static void *spare_buf;
static size_t spare_cap;

static void *take_buf(size_t need, size_t *cap)
{
    if (spare_buf && spare_cap >= need) {
        void *b = spare_buf;
        *cap = spare_cap;
        spare_buf = NULL;
        return b;
    }
    *cap = need;
    return malloc(need);
}

static void give_buf(void *b, size_t cap)
{
    if (!b)
        return;
    if (!spare_buf || spare_cap < cap) {
        free(spare_buf);
        spare_buf = b;
        spare_cap = cap;
    } else {
        free(b);
    }
}

/* The transfer property list of table reads: the probe packs its table
 * types in the file, so every read converts records, and HDF5 would take
 * a fresh 1 MB conversion and background buffer per read (~500 page
 * faults); these two stay for the life of the process (under h5_lock). */
#define TCONV_BYTES ((size_t)256 << 10)

static hid_t table_dxpl(void)
{
    static void *tconv, *bkg;
    if (!tconv)
        tconv = malloc(TCONV_BYTES);
    if (!bkg)
        bkg = malloc(TCONV_BYTES);
    hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
    if (dxpl < 0)
        return H5P_DEFAULT;
    if (tconv && bkg)
        H5Pset_buffer(dxpl, TCONV_BYTES, tconv, bkg);
    return dxpl;
}

/* One chunk of rows [off, off + cnt) of `ds` into buf; HDF5 under the lock. */
static herr_t read_rows(hid_t ds, hid_t space, hid_t mt, int same_type, hsize_t off,
                        hsize_t cnt, size_t recsize, void *buf, hid_t dxpl)
{
    hid_t ms = H5Screate_simple(1, &cnt, NULL);
    herr_t e = ms >= 0 ? H5Sselect_hyperslab(space, H5S_SELECT_SET, &off, NULL, &cnt, NULL) : -1;
    if (!same_type)
        memset(buf, 0, (size_t)cnt * recsize); /* members missing from an older file */
    if (e >= 0)
        e = H5Dread(ds, mt, ms, space, dxpl, buf);
    if (ms >= 0)
        H5Sclose(ms);
    return e;
}

/* Stream the one-dimensional compound table /`name` in chunks of ROW_CHUNK
 * records of `recsize` bytes (memory type `mt`); the sink runs outside the
 * HDF5 lock. */
static np_status read_table(h5dump *d, const char *name, hid_t mt, size_t recsize,
                            const table_out *to, np_error *err)
{
    np_h5_quiet_state q;
    pthread_mutex_lock(&h5_lock);
    np_h5_quiet(&q);
    int outside = 0;
    hid_t ds = np_h5_open_local(d->file, name, &outside);
    outside = outside == NP_H5_NOT_LOCAL;
    hid_t space = ds >= 0 ? H5Dget_space(ds) : -1;
    hid_t ft = ds >= 0 ? H5Dget_type(ds) : -1;
    hid_t padded = mt >= 0 ? mem_type_like_file(mt, ft) : -1;
    hid_t use = padded >= 0 ? padded : mt;
    int same_type = ft >= 0 && use >= 0 && H5Tequal(ft, use) > 0;
    hsize_t n = 0;
    int shape_ok = ds >= 0 && space >= 0 && use >= 0 && H5Sget_simple_extent_ndims(space) == 1 &&
                   H5Sget_simple_extent_dims(space, &n, NULL) >= 0;
    size_t buf_cap = 0;
    hid_t dxpl = table_dxpl();
    unsigned char *buf = shape_ok ? take_buf(ROW_CHUNK * recsize, &buf_cap) : NULL;
    np_status st = NP_OK;
    if (outside)
        st = np_error_set(err, NP_ERR_FORMAT, d->path, name, "/%s %s", name,
                          np_h5_dset_problem(NP_H5_NOT_LOCAL));
    else if (!shape_ok)
        st = np_error_set(err, NP_ERR_FORMAT, d->path, name,
                          "cannot read /%s as a one-dimensional table (file corrupt?)", name);
    else if (!buf)
        st = np_error_set(err, NP_ERR_NOMEM, d->path, name, "out of memory reading /%s", name);
    if (st == NP_OK && to->begin) {
        pthread_mutex_unlock(&h5_lock);
        st = to->begin(to->user, (size_t)n, err);
        pthread_mutex_lock(&h5_lock);
    }
    for (hsize_t off = 0; st == NP_OK && off < n; off += ROW_CHUNK) {
        hsize_t cnt = n - off < ROW_CHUNK ? n - off : ROW_CHUNK;
        if (read_rows(ds, space, use, same_type, off, cnt, recsize, buf, dxpl) < 0) {
            st = np_error_set(err, NP_ERR_FORMAT, d->path, name,
                              "cannot read rows %llu..%llu of /%s (truncated or corrupt file)",
                              (unsigned long long)off, (unsigned long long)(off + cnt - 1), name);
            break;
        }
        pthread_mutex_unlock(&h5_lock);
        st = to->deliver(to->sink, buf, (size_t)off, (size_t)cnt, err);
        pthread_mutex_lock(&h5_lock);
    }
    give_buf(buf, buf_cap);
    if (dxpl != H5P_DEFAULT) H5Pclose(dxpl);
    if (padded >= 0) H5Tclose(padded);
    if (ft >= 0) H5Tclose(ft);
    if (space >= 0) H5Sclose(space);
    if (ds >= 0) H5Dclose(ds);
    H5Eclear2(H5E_DEFAULT);
    np_h5_unquiet(&q);
    pthread_mutex_unlock(&h5_lock);
    return st;
}

static np_status deliver_entries(const void *sink, void *recs, size_t first, size_t n,
                                 np_error *err)
{
    const np_dumpio_entry_sink *s = sink;
    np_entry_rec *r = recs;
    for (size_t i = 0; i < n; i++) {
        r[i].name[NP_FMT_NAME_LEN - 1] = r[i].call[NP_FMT_NAME_LEN - 1] = '\0';
        r[i].role[NP_FMT_ROLE_LEN - 1] = r[i].dtype[NP_FMT_DTYPE_LEN - 1] = '\0';
    }
    return s->rows(s->user, r, first, n, err);
}

static np_status deliver_calls(const void *sink, void *recs, size_t first, size_t n,
                               np_error *err)
{
    const np_dumpio_call_sink *s = sink;
    np_call_rec *r = recs;
    for (size_t i = 0; i < n; i++) {
        r[i].call[NP_FMT_NAME_LEN - 1] = r[i].parent[NP_FMT_NAME_LEN - 1] = '\0';
        r[i].kind[NP_FMT_KIND_LEN - 1] = r[i].callsite[NP_FMT_SITE_LEN - 1] = '\0';
    }
    return s->rows(s->user, r, first, n, err);
}

static int table_exists(h5dump *d, const char *name)
{
    pthread_mutex_lock(&h5_lock);
    np_h5_quiet_state q;
    np_h5_quiet(&q);
    int yes = H5Lexists(d->file, name, H5P_DEFAULT) > 0;
    H5Eclear2(H5E_DEFAULT);
    np_h5_unquiet(&q);
    pthread_mutex_unlock(&h5_lock);
    return yes;
}

static np_status h5_entries(void *h, const np_dumpio_entry_sink *sink, np_error *err)
{
    h5dump *d = h;
    if (!table_exists(d, NP_FMT_ENTRIES))
        return np_error_set(err, d->complete ? NP_ERR_FORMAT : NP_ERR_INCOMPLETE, d->path,
                            NP_FMT_ENTRIES,
                            "no /%s table (an incomplete step or not a dump)", NP_FMT_ENTRIES);
    table_out to = {sink->begin, sink->user, deliver_entries, sink};
    pthread_mutex_lock(&h5_lock);
    hid_t mt = np_fmt_entry_h5type();
    pthread_mutex_unlock(&h5_lock);
    np_status st = read_table(d, NP_FMT_ENTRIES, mt, sizeof(np_entry_rec), &to, err);
    pthread_mutex_lock(&h5_lock);
    if (mt >= 0)
        H5Tclose(mt);
    pthread_mutex_unlock(&h5_lock);
    return st;
}

static np_status deliver_places(const void *sink, void *recs, size_t first, size_t n,
                                np_error *err)
{
    const np_dumpio_place_sink *s = sink;
    np_place_rec *r = recs;
    for (size_t i = 0; i < n; i++)
        r[i].name[NP_FMT_NAME_LEN - 1] = r[i].placements[NP_FMT_PLACE_LEN - 1] = '\0';
    return s->rows(s->user, r, first, n, err);
}

static np_status h5_placements(void *h, const np_dumpio_place_sink *sink, np_error *err)
{
    h5dump *d = h;
    if (!table_exists(d, NP_FMT_PLACEMENTS)) /* version 1: no placements */
        return sink->begin ? sink->begin(sink->user, 0, err) : NP_OK;
    table_out to = {sink->begin, sink->user, deliver_places, sink};
    pthread_mutex_lock(&h5_lock);
    hid_t mt = np_fmt_place_h5type();
    pthread_mutex_unlock(&h5_lock);
    np_status st = read_table(d, NP_FMT_PLACEMENTS, mt, sizeof(np_place_rec), &to, err);
    pthread_mutex_lock(&h5_lock);
    if (mt >= 0)
        H5Tclose(mt);
    pthread_mutex_unlock(&h5_lock);
    return st;
}

static np_status h5_calls(void *h, const np_dumpio_call_sink *sink, np_error *err)
{
    h5dump *d = h;
    if (!table_exists(d, NP_FMT_CALLS)) /* optional: rows then have no call tree */
        return sink->begin ? sink->begin(sink->user, 0, err) : NP_OK;
    table_out to = {sink->begin, sink->user, deliver_calls, sink};
    pthread_mutex_lock(&h5_lock);
    hid_t mt = np_fmt_call_h5type();
    pthread_mutex_unlock(&h5_lock);
    np_status st = read_table(d, NP_FMT_CALLS, mt, sizeof(np_call_rec), &to, err);
    pthread_mutex_lock(&h5_lock);
    if (mt >= 0)
        H5Tclose(mt);
    pthread_mutex_unlock(&h5_lock);
    return st;
}

/* ---- payloads -------------------------------------------------------------------- */

/* File segments of an uncompressed float32 LE dataset (contiguous, or
 * chunked with whole trailing dimensions per chunk), or 0 segments if the
 * storage does not allow direct reads. *segs is malloc'ed. */
static int chunk_segments(hid_t ds, hid_t dcpl, int64_t n, np_dumpio_seg **segs)
{
    hid_t space = H5Dget_space(ds);
    int nd = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
    hsize_t dims[H5S_MAX_RANK], cdims[H5S_MAX_RANK];
    hsize_t nchunks = 0;
    int good = nd >= 1 && H5Sget_simple_extent_dims(space, dims, NULL) >= 0 &&
               H5Pget_chunk(dcpl, nd, cdims) == nd && H5Dget_num_chunks(ds, space, &nchunks) >= 0 &&
               nchunks > 0 && nchunks < (1u << 20);
    int64_t row = 1, total = 0;
    for (int i = 1; good && i < nd; i++) {
        if (cdims[i] != dims[i])
            good = 0;
        row *= (int64_t)dims[i];
    }
    if (good && !(*segs = malloc(nchunks * sizeof **segs)))
        good = 0;
    for (hsize_t k = 0; good && k < nchunks; k++) {
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
        (*segs)[k] = (np_dumpio_seg){(int64_t)off[0] * row, rows * row, (uint64_t)addr};
        total += rows * row;
    }
    if (space >= 0)
        H5Sclose(space);
    return good && total == n ? (int)nchunks : 0;
}

static int direct_segments(hid_t ds, int64_t n, np_dumpio_seg **segs)
{
    *segs = NULL;
    hid_t t = H5Dget_type(ds);
    int ok = t >= 0 && H5Tequal(t, H5T_IEEE_F32LE) > 0 &&
             H5Tequal(H5T_NATIVE_FLOAT, H5T_IEEE_F32LE) > 0;
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
            (*segs)[0] = (np_dumpio_seg){0, n, (uint64_t)a};
            nseg = 1;
        }
    } else if (layout == H5D_CHUNKED && H5Pget_nfilters(dcpl) == 0) {
        nseg = chunk_segments(ds, dcpl, n, segs);
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

/* Widen n integers of `sz` bytes at base to float64 in place, last element
 * first: element i's double (bytes 8i..8i+7) only covers source bytes of
 * elements >= i. */
static void widen_ints(unsigned char *base, int64_t n, size_t sz, int is_signed)
{
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
}

static hid_t int_mem_type(size_t sz, int is_signed)
{
    switch (sz) {
    case 1: return is_signed ? H5T_NATIVE_INT8 : H5T_NATIVE_UINT8;
    case 2: return is_signed ? H5T_NATIVE_INT16 : H5T_NATIVE_UINT16;
    case 4: return is_signed ? H5T_NATIVE_INT32 : H5T_NATIVE_UINT32;
    case 8: return is_signed ? H5T_NATIVE_INT64 : H5T_NATIVE_UINT64;
    default: return -1;
    }
}

/* Read a whole dataset into buf (grown as needed): a 4-byte float as
 * float32, another float as float64, an integer (int8..int64, uint8 for
 * bool) as its own bytes, whose crc32 is taken there, then widened to
 * float64 in place. p->crc_kind says how the stored bytes can be checked. */
static int read_whole(np_dumpio_payload *p, hid_t ds, int64_t n, np_dumpio_buf *buf)
{
    hid_t t = H5Dget_type(ds);
    if (t < 0)
        return -1;
    H5T_class_t cls = H5Tget_class(t);
    size_t sz = H5Tget_size(t);
    int le = host_little_endian() && (sz == 1 || H5Tget_order(t) == H5T_ORDER_LE);
    int is_signed = cls == H5T_INTEGER && H5Tget_sign(t) == H5T_SGN_2;
    H5Tclose(t);
    int f64 = !(cls == H5T_FLOAT && sz == 4);
    p->form = f64 ? NP_DUMPIO_MEM_F64 : NP_DUMPIO_MEM_F32;
    p->crc_kind = NP_DUMPIO_CRC_NONE;
    size_t need = (size_t)(n > 0 ? n : 1) * (f64 ? sizeof(double) : sizeof(float));
    if (need > buf->cap) {
        void *q = realloc(buf->p, need);
        if (!q)
            return -1;
        buf->p = q;
        buf->cap = need;
    }
    p->mem = buf->p;
    hid_t mt = cls == H5T_INTEGER && le ? int_mem_type(sz, is_signed) : -1;
    if (mt >= 0) {
        p->crc_kind = NP_DUMPIO_CRC_GIVEN;
        if (n == 0)
            return 0;
        if (H5Dread(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf->p) < 0)
            return -1;
        p->crc = np_crc32(0, buf->p, (size_t)n * sz);
        widen_ints(buf->p, n, sz, is_signed);
        return 0;
    }
    if (cls == H5T_FLOAT && le && (sz == 4 || sz == 8))
        p->crc_kind = NP_DUMPIO_CRC_ELEMENTS; /* read as stored: the values are the stored bytes */
    if (n == 0)
        return 0;
    return H5Dread(ds, f64 ? H5T_NATIVE_DOUBLE : H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                   buf->p) < 0 ? -1 : 0;
}

static np_status open_payload(hid_t *ds, h5dump *d, const char *leaf, int64_t numel,
                              np_error *err)
{
    *ds = -1;
    int problem = 0;
    if (d->data == -2) {
        d->data = H5Lexists(d->file, NP_FMT_DATA, H5P_DEFAULT) > 0
                      ? np_h5_open_local(d->file, NP_FMT_DATA, &problem)
                      : -1;
        d->data_problem = problem;
    }
    if (d->data_problem == NP_H5_NOT_LOCAL)
        return np_error_set(err, NP_ERR_FORMAT, d->path, leaf, "/%s %s", NP_FMT_DATA,
                            np_h5_dset_problem(NP_H5_NOT_LOCAL));
    if (d->data < 0 || H5Lexists(d->data, leaf, H5P_DEFAULT) <= 0)
        return np_error_set(err, NP_ERR_NOTFOUND, d->path, leaf,
                            "/%s says the payload is stored, but /%s has no such dataset",
                            NP_FMT_ENTRIES, NP_FMT_DATA);
    *ds = np_h5_open_local(d->data, leaf, &problem);
    if (*ds < 0)
        return np_error_set(err, NP_ERR_FORMAT, d->path, leaf, "the payload dataset %s",
                            np_h5_dset_problem(problem));
    hid_t space = H5Dget_space(*ds);
    hssize_t npts = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
    if (space >= 0)
        H5Sclose(space);
    if (npts != (hssize_t)numel) {
        H5Dclose(*ds);
        *ds = -1;
        return np_error_set(err, NP_ERR_FORMAT, d->path, leaf,
                            "payload has %lld elements, /%s says numel %lld", (long long)npts,
                            NP_FMT_ENTRIES, (long long)numel);
    }
    return NP_OK;
}

static np_status payload_locked(np_dumpio_payload *p, h5dump *d, const char *leaf, int64_t numel,
                                unsigned flags, np_dumpio_buf *buf, np_error *err)
{
    hid_t ds = -1;
    np_status st = open_payload(&ds, d, leaf, numel, err);
    if (st != NP_OK)
        return st;
    np_dumpio_seg *segs = NULL;
    if ((flags & NP_DUMPIO_ALLOW_FILE) && d->fd < 0)
        d->fd = open(d->path, O_RDONLY | O_CLOEXEC);
    int nseg = (flags & NP_DUMPIO_ALLOW_FILE) && d->fd >= 0 ? direct_segments(ds, numel, &segs) : 0;
    if (nseg) {
        p->form = NP_DUMPIO_FILE_F32;
        p->fd = d->fd;
        p->segs = segs;
        p->nseg = nseg;
        p->owned = segs;
        p->crc_kind = NP_DUMPIO_CRC_ELEMENTS;
    } else if (read_whole(p, ds, numel, buf) != 0) {
        st = np_error_set(err, NP_ERR_FORMAT, d->path, leaf,
                          "cannot read the payload (truncated or corrupt file)");
    }
    H5Dclose(ds);
    return st;
}

static np_status h5_payload(np_dumpio_payload *p, void *h, const char *leaf, int64_t numel,
                            unsigned flags, np_dumpio_buf *buf, np_error *err)
{
    h5dump *d = h;
    pthread_mutex_lock(&h5_lock);
    np_h5_quiet_state q;
    np_h5_quiet(&q);
    np_status st = payload_locked(p, d, leaf, numel, flags, buf, err);
    H5Eclear2(H5E_DEFAULT);
    np_h5_unquiet(&q);
    pthread_mutex_unlock(&h5_lock);
    return st;
}

/* ---- the isolated walk --------------------------------------------------------- */

typedef struct walk_rows {
    h5dump *d;
} walk_rows;

static np_status walk_entry_rows(void *user, np_entry_rec *rows, size_t first, size_t n,
                                 np_error *err)
{
    (void)first;
    (void)err;
    walk_rows *w = user;
    /* every payload's layout, as the payload reads will ask for it */
    for (size_t i = 0; i < n; i++) {
        if (!rows[i].has_data)
            continue;
        np_dumpio_payload p;
        memset(&p, 0, sizeof p);
        hid_t ds = -1;
        pthread_mutex_lock(&h5_lock);
        if (open_payload(&ds, w->d, rows[i].name, rows[i].numel, NULL) == NP_OK) {
            np_dumpio_seg *segs = NULL;
            direct_segments(ds, rows[i].numel, &segs);
            free(segs);
            H5Dclose(ds);
        }
        pthread_mutex_unlock(&h5_lock);
    }
    return NP_OK;
}

static np_status walk_call_rows(void *user, np_call_rec *rows, size_t first, size_t n,
                                np_error *err)
{
    (void)user, (void)rows, (void)first, (void)n, (void)err;
    return NP_OK;
}

/* The child's walk of a file: the root attributes, /entries, /calls and
 * each payload dataset's layout. 0 when it read, 1 when it refused. */
static np_status walk_place_rows(void *user, np_place_rec *rows, size_t first, size_t n,
                                 np_error *err)
{
    (void)user, (void)rows, (void)first, (void)n, (void)err;
    return NP_OK;
}

static int h5_walk(const char *path)
{
    np_dumpio_info in;
    memset(&in, 0, sizeof in);
    void *h = NULL;
    if (h5_open(&h, &in, path, NULL) != NP_OK)
        return 1;
    walk_rows w = {h};
    np_dumpio_entry_sink es = {NULL, walk_entry_rows, &w};
    np_dumpio_call_sink cs = {NULL, walk_call_rows, &w};
    h5_entries(h, &es, NULL);
    h5_calls(h, &cs, NULL);
    np_dumpio_place_sink ps = {NULL, walk_place_rows, NULL};
    h5_placements(h, &ps, NULL);
    h5_close(h);
    return 0;
}

const np_dumpio_source np_dumpio_nprobe_source = {
    .name = "nprobe",
    .detect = h5_detect,
    .find = h5_find,
    .open = h5_open,
    .entries = h5_entries,
    .calls = h5_calls,
    .payload = h5_payload,
    .close = h5_close,
    .placements = h5_placements,
    .walk = h5_walk,
    .file = NP_FMT_FILE,
    .layout = "step*/rank*/" NP_FMT_FILE,
};
