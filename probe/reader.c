/* probe/reader.c - reading dump files back (nprobe/dumpfile.h): finding the
 * files of a dump root / step / rank directory, root attributes (fixed or
 * variable-length strings, so files written by h5py read too), the two
 * tables and payload values. Partial files are opened with file locking
 * off, so a step being written by a live run can be inspected. */
#include <dirent.h>
#include <errno.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "nprobe/dumpfile.h"
#include "nprobe/format.h"
#include "nprobe/probe.h"

struct np_dump {
    hid_t file;
    char path[4096];
    np_dump_info info;
};

/* ---- finding files -------------------------------------------------------- */

typedef struct ref_list {
    np_dump_ref *v;
    size_t n, cap;
} ref_list;

static int push(ref_list *l, const char *path, int step, int rank, int partial)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        np_dump_ref *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return -1;
        l->v = v;
        l->cap = cap;
    }
    np_dump_ref *r = &l->v[l->n++];
    size_t len = strlen(path);
    if (len >= sizeof r->path)
        len = sizeof r->path - 1;
    memcpy(r->path, path, len);
    r->path[len] = 0;
    r->step = step;
    r->rank = rank;
    r->partial = partial;
    return 0;
}

static int is_file(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* "step12" -> 12 (prefix "step"), -1 otherwise. */
static int num_after(const char *name, const char *prefix)
{
    size_t l = strlen(prefix);
    if (strncmp(name, prefix, l) != 0 || !name[l])
        return -1;
    long v = 0;
    for (const char *p = name + l; *p; p++) {
        if (*p < '0' || *p > '9' || v > 100000000)
            return -1;
        v = v * 10 + (*p - '0');
    }
    return (int)v;
}

static int add_rank_dir(ref_list *l, const char *dir, int step, int rank)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, NP_FMT_FILE);
    if (is_file(p) && push(l, p, step, rank, 0))
        return -1;
    snprintf(p, sizeof p, "%s/%s%s", dir, NP_FMT_FILE, NP_DUMP_PARTIAL_SUFFIX);
    if (is_file(p) && push(l, p, step, rank, 1))
        return -1;
    return 0;
}

/* Call fn for each subdirectory named {prefix}{N}. */
static int each_numbered(ref_list *l, const char *dir, const char *prefix, int step)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d))) {
        int num = num_after(e->d_name, prefix);
        if (num < 0)
            continue;
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
        if (!is_dir(sub))
            continue;
        if (step < 0 && strcmp(prefix, "step") == 0)
            rc = each_numbered(l, sub, "rank", num);
        else
            rc = add_rank_dir(l, sub, step, num);
    }
    closedir(d);
    return rc;
}

static int cmp_ref(const void *a, const void *b)
{
    const np_dump_ref *x = a, *y = b;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return x->partial - y->partial;
}

/* Step and rank from ".../step{S}/rank{R}/file" or ".../step{S}/rank{R}". */
static void guess_numbers(const char *path, int is_file_path, int *step, int *rank)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0';
    if (is_file_path) {
        char *s = strrchr(buf, '/');
        if (s)
            *s = '\0';
        else
            snprintf(buf, sizeof buf, ".");
    }
    char *s = strrchr(buf, '/');
    *rank = num_after(s ? s + 1 : buf, "rank");
    if (s) {
        *s = '\0';
        char *t = strrchr(buf, '/');
        *step = num_after(t ? t + 1 : buf, "step");
    } else {
        *step = -1;
    }
}

np_status np_dump_find(np_dump_ref **out, size_t *n, const char *path, np_error *err)
{
    *out = NULL;
    *n = 0;
    ref_list l = {NULL, 0, 0};
    int rc = 0;
    int step, rank;
    if (is_file(path)) {
        guess_numbers(path, 1, &step, &rank);
        size_t len = strlen(path), sl = strlen(NP_DUMP_PARTIAL_SUFFIX);
        int partial = len > sl && strcmp(path + len - sl, NP_DUMP_PARTIAL_SUFFIX) == 0;
        rc = push(&l, path, step, rank, partial);
    } else if (is_dir(path)) {
        char p1[4096], p2[4096];
        snprintf(p1, sizeof p1, "%s/%s", path, NP_FMT_FILE);
        snprintf(p2, sizeof p2, "%s/%s%s", path, NP_FMT_FILE, NP_DUMP_PARTIAL_SUFFIX);
        guess_numbers(path, 0, &step, &rank);
        if (is_file(p1) || is_file(p2)) {
            rc = add_rank_dir(&l, path, step, rank);
        } else {
            rc = each_numbered(&l, path, "rank", step < 0 ? -2 : step);
            if (rc == 0 && l.n == 0)
                rc = each_numbered(&l, path, "step", -1);
        }
    } else {
        return np_error_set(err, NP_ERR_NOTFOUND, path, NULL, "no such file or directory");
    }
    if (rc) {
        free(l.v);
        return np_error_set(err, NP_ERR_NOMEM, path, NULL, NULL);
    }
    for (size_t i = 0; i < l.n; i++)
        if (l.v[i].step == -2)
            l.v[i].step = -1;
    if (l.n > 1)
        qsort(l.v, l.n, sizeof *l.v, cmp_ref);
    *out = l.v;
    *n = l.n;
    return NP_OK;
}

/* ---- one file ------------------------------------------------------------- */

/* The root attributes are read into the info with defaults for absent
 * ones; the first one present but not a single value of its type is kept
 * (bad_name, bad_rc) and refuses the file. */
typedef struct attr_reader {
    hid_t file;
    const char *bad_name;
    int bad_rc;
} attr_reader;

static void read_str_attr(attr_reader *r, const char *name, char *dst, size_t cap)
{
    int rc = np_h5_attr_get_str(r->file, name, dst, cap);
    if (rc != 0 && rc != NP_H5_ATTR_ABSENT && !r->bad_name) {
        r->bad_name = name;
        r->bad_rc = rc;
    }
}

static int64_t read_i64_attr(attr_reader *r, const char *name, int64_t dflt)
{
    int64_t v = dflt;
    int rc = np_h5_attr_get_i64(r->file, name, &v);
    if (rc != 0 && rc != NP_H5_ATTR_ABSENT && !r->bad_name) {
        r->bad_name = name;
        r->bad_rc = rc;
    }
    return rc == 0 ? v : dflt;
}

/* The root attributes of an open dump into *in; NP_ERR_FORMAT naming the
 * attribute when the file is not a dump of this version or one attribute is
 * not a single value of its type. */
static np_status read_root_attrs(np_dump_info *in, hid_t f, const char *path, np_error *err)
{
    attr_reader r = {f, NULL, 0};
    read_str_attr(&r, NP_FMT_ATTR_FORMAT, in->format, sizeof in->format);
    in->format_version = read_i64_attr(&r, NP_FMT_ATTR_FORMAT_VERSION, 0);
    read_str_attr(&r, NP_FMT_ATTR_NPROBE_VERSION, in->nprobe_version, sizeof in->nprobe_version);
    read_str_attr(&r, NP_FMT_ATTR_TASK, in->task, sizeof in->task);
    read_str_attr(&r, NP_FMT_ATTR_LEVEL, in->level, sizeof in->level);
    read_str_attr(&r, NP_FMT_ATTR_FRAMEWORK, in->framework, sizeof in->framework);
    read_str_attr(&r, NP_FMT_ATTR_DEVICE, in->device, sizeof in->device);
    read_str_attr(&r, NP_FMT_ATTR_PRECISION, in->precision, sizeof in->precision);
    in->step = read_i64_attr(&r, NP_FMT_ATTR_STEP, -1);
    in->rank = read_i64_attr(&r, NP_FMT_ATTR_RANK, -1);
    in->world_size = read_i64_attr(&r, NP_FMT_ATTR_WORLD_SIZE, 1);
    in->complete = read_i64_attr(&r, NP_FMT_ATTR_COMPLETE, 0);
    in->loss_scale = np_fmt_get_loss_scale(f);
    int format_bad = r.bad_name && strcmp(r.bad_name, NP_FMT_ATTR_FORMAT) == 0;
    if (strcmp(in->format, NP_FMT_NAME) != 0 && !format_bad)
        return np_error_set(err, NP_ERR_FORMAT, path, NP_FMT_ATTR_FORMAT,
                            "not an nprobe dump: root attribute format is \"%s\", expected "
                            "\"%s\"", in->format, NP_FMT_NAME);
    if (r.bad_name)
        return np_error_set(err, NP_ERR_FORMAT, path, r.bad_name, "root attribute %s %s",
                            r.bad_name, np_h5_attr_problem(r.bad_rc));
    if (in->format_version != NP_FMT_VERSION)
        return np_error_set(err, NP_ERR_FORMAT, path, NP_FMT_ATTR_FORMAT_VERSION,
                            "format version %lld is not supported (expected %d)",
                            (long long)in->format_version, NP_FMT_VERSION);
    return NP_OK;
}

static np_status dump_open_raw(np_dump **out, const char *path, np_error *err);

/* The child's walk of a file (np_dump_open): the root attributes, /entries
 * and /calls, as `nprobe ls` reads them. */
static int walk_in_child(void *arg)
{
    np_dump *d = NULL;
    if (dump_open_raw(&d, (const char *)arg, NULL) != NP_OK)
        return 1;
    np_entry_rec *e = NULL;
    np_call_rec *c = NULL;
    size_t n = 0;
    np_dump_read_entries(&e, &n, d, NULL);
    np_dump_read_calls(&c, &n, d, NULL);
    free(e);
    free(c);
    np_dump_close(d);
    return 0;
}

np_status np_dump_open(np_dump **out, const char *path, np_error *err)
{
    *out = NULL;
    /* HDF5 1.10 can crash or loop on a file whose metadata is corrupt:
     * walk it in a child process first, and refuse it if the child dies */
    if (is_file(path) && !getenv("NPROBE_NO_ISOLATION")) {
        int sig = 0;
        double limit = np_file_check_timeout();
        int r = np_run_isolated(walk_in_child, (void *)path, limit, &sig);
        np_status st = np_isolated_walk_error(err, path, r, sig, limit);
        if (st != NP_OK)
            return st;
    }
    return dump_open_raw(out, path, err);
}

static np_status dump_open_raw(np_dump **out, const char *path, np_error *err)
{
    *out = NULL;
    size_t len = strlen(path), sl = strlen(NP_DUMP_PARTIAL_SUFFIX);
    int partial = len > sl && strcmp(path + len - sl, NP_DUMP_PARTIAL_SUFFIX) == 0;
    H5E_auto2_t of;
    void *od;
    H5Eget_auto2(H5E_DEFAULT, &of, &od);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_file_locking(fapl, 0, 1);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    np_status st = NP_OK;
    if (f < 0) {
        H5Eclear2(H5E_DEFAULT);
        if (!is_file(path))
            st = np_error_set(err, NP_ERR_NOTFOUND, path, NULL, "no such file");
        else if (partial)
            st = np_error_set(err, NP_ERR_INCOMPLETE, path, NULL,
                              "incomplete step: the run stopped while writing this file and "
                              "it cannot be read");
        else
            st = np_error_set(err, NP_ERR_FORMAT, path, NULL,
                              "not an HDF5 file, or a damaged one");
        H5Eset_auto2(H5E_DEFAULT, of, od);
        return st;
    }
    np_dump *d = calloc(1, sizeof *d);
    if (!d) {
        H5Fclose(f);
        H5Eset_auto2(H5E_DEFAULT, of, od);
        return np_error_set(err, NP_ERR_NOMEM, path, NULL, NULL);
    }
    d->file = f;
    snprintf(d->path, sizeof d->path, "%s", path);
    st = read_root_attrs(&d->info, f, path, err);
    H5Eclear2(H5E_DEFAULT);
    H5Eset_auto2(H5E_DEFAULT, of, od);
    if (st != NP_OK) {
        np_dump_close(d);
        return st;
    }
    *out = d;
    return NP_OK;
}

const np_dump_info *np_dump_get_info(const np_dump *d) { return &d->info; }

static np_status read_table(void **out, size_t *n, np_dump *d, const char *name, hid_t mt,
                            size_t recsize, np_error *err)
{
    *out = NULL;
    *n = 0;
    H5E_auto2_t of;
    void *od;
    H5Eget_auto2(H5E_DEFAULT, &of, &od);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    np_status st = NP_OK;
    if (H5Lexists(d->file, name, H5P_DEFAULT) <= 0) {
        st = np_error_set(err, d->info.complete ? NP_ERR_FORMAT : NP_ERR_INCOMPLETE, d->path,
                          name, "the table /%s is missing", name);
        goto done;
    }
    hid_t ds = H5Dopen2(d->file, name, H5P_DEFAULT);
    hid_t sp = ds >= 0 ? H5Dget_space(ds) : -1;
    hssize_t rows = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
    if (rows > 0) {
        void *buf = calloc((size_t)rows, recsize);
        if (!buf) {
            st = np_error_set(err, NP_ERR_NOMEM, d->path, name, NULL);
        } else if (H5Dread(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
            free(buf);
            st = np_error_set(err, NP_ERR_FORMAT, d->path, name, "cannot read /%s", name);
        } else {
            *out = buf;
            *n = (size_t)rows;
        }
    } else if (rows < 0) {
        st = np_error_set(err, NP_ERR_FORMAT, d->path, name, "cannot open /%s", name);
    }
    if (sp >= 0) H5Sclose(sp);
    if (ds >= 0) H5Dclose(ds);
done:
    H5Eclear2(H5E_DEFAULT);
    H5Eset_auto2(H5E_DEFAULT, of, od);
    return st;
}

np_status np_dump_read_entries(np_entry_rec **out, size_t *n, np_dump *d, np_error *err)
{
    hid_t mt = np_fmt_entry_h5type();
    void *v = NULL;
    np_status st = read_table(&v, n, d, NP_FMT_ENTRIES, mt, sizeof(np_entry_rec), err);
    H5Tclose(mt);
    *out = v;
    return st;
}

np_status np_dump_read_calls(np_call_rec **out, size_t *n, np_dump *d, np_error *err)
{
    hid_t mt = np_fmt_call_h5type();
    void *v = NULL;
    np_status st = read_table(&v, n, d, NP_FMT_CALLS, mt, sizeof(np_call_rec), err);
    H5Tclose(mt);
    *out = v;
    return st;
}

np_status np_dump_read_values(double *out, size_t max, size_t *n, int64_t *numel, np_dump *d,
                              const char *leaf, np_error *err)
{
    *n = 0;
    if (numel)
        *numel = 0;
    char path[600];
    snprintf(path, sizeof path, "/%s/%s", NP_FMT_DATA, leaf);
    H5E_auto2_t of;
    void *od;
    H5Eget_auto2(H5E_DEFAULT, &of, &od);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    np_status st = NP_OK;
    hid_t ds = -1, sp = -1, ms = -1;
    if (H5Lexists(d->file, "/" NP_FMT_DATA, H5P_DEFAULT) <= 0 ||
        H5Lexists(d->file, path, H5P_DEFAULT) <= 0 ||
        (ds = H5Dopen2(d->file, path, H5P_DEFAULT)) < 0) {
        st = np_error_set(err, NP_ERR_NOTFOUND, d->path, leaf,
                          "no payload /data/%s in this file", leaf);
        goto done;
    }
    sp = H5Dget_space(ds);
    hssize_t total = H5Sget_simple_extent_npoints(sp);
    int nd = H5Sget_simple_extent_ndims(sp);
    if (numel)
        *numel = total;
    if (total <= 0 || max == 0)
        goto done;
    hsize_t dims[H5S_MAX_RANK];
    H5Sget_simple_extent_dims(sp, dims, NULL);
    /* Read the first rows (along dim 0) that cover `max` values. */
    size_t row = 1;
    for (int i = 1; i < nd; i++)
        row *= (size_t)dims[i];
    size_t want = max < (size_t)total ? max : (size_t)total;
    double *buf = out;
    size_t nread = (size_t)total;
    if (nd > 0) {
        hsize_t start[H5S_MAX_RANK] = {0}, count[H5S_MAX_RANK];
        for (int i = 0; i < nd; i++)
            count[i] = dims[i];
        count[0] = (hsize_t)((want + row - 1) / row);
        nread = (size_t)count[0] * row;
        H5Sselect_hyperslab(sp, H5S_SELECT_SET, start, NULL, count, NULL);
        ms = H5Screate_simple(nd, count, NULL);
    } else {
        ms = H5Screate(H5S_SCALAR);
    }
    if (nread > max) {
        buf = malloc(nread * sizeof *buf);
        if (!buf) {
            st = np_error_set(err, NP_ERR_NOMEM, d->path, leaf, NULL);
            goto done;
        }
    }
    if (H5Dread(ds, H5T_NATIVE_DOUBLE, ms, sp, H5P_DEFAULT, buf) < 0) {
        st = np_error_set(err, NP_ERR_FORMAT, d->path, leaf, "cannot read /data/%s", leaf);
    } else {
        if (buf != out)
            memcpy(out, buf, want * sizeof *out);
        *n = want;
    }
    if (buf != out)
        free(buf);
done:
    if (ms >= 0) H5Sclose(ms);
    if (sp >= 0) H5Sclose(sp);
    if (ds >= 0) H5Dclose(ds);
    H5Eclear2(H5E_DEFAULT);
    H5Eset_auto2(H5E_DEFAULT, of, od);
    return st;
}

void np_dump_close(np_dump *d)
{
    if (!d)
        return;
    if (d->file >= 0)
        H5Fclose(d->file);
    free(d);
}
