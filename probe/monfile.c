/* probe/monfile.c - the monitor file's writer (nprobe/probe.h
 * np_monitor_file_*, docs/MONITOR.md "File format"): one HDF5 file per
 * rank, three chunked tables grown a step at a time, SWMR so that a reader
 * sees every finished step while the run goes on and after a kill -9. The
 * runtime's monitor (monitor/monitor.c) and the Python package's
 * (nprobe.torch.TrainerMon, through libnprobe) both write through it. */
#include <errno.h>
#include <hdf5.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nprobe/monfile.h"
#include "probe_internal.h"

_Static_assert(sizeof(np_monitor_record) == 80, "the record row is 80 bytes, packed");
_Static_assert(sizeof(np_monitor_key) == 224, "the key row is 224 bytes");

struct np_monitor_file {
    char *path;
    hid_t file, d_rec, d_key, d_step;
    hid_t t_rec, t_key, t_step;
    void *vf;              /* the file's driver (h5vfd.c: a failed write never fails a close) */
    int64_t rows, keys, steps;
    np_status st;          /* the first error: the file takes no more steps */
    np_error err;
};

hid_t np_monfile_type_record(void)
{
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(np_monitor_record));
    H5Tinsert(t, "step", HOFFSET(np_monitor_record, step), H5T_NATIVE_INT64);
    H5Tinsert(t, "seq", HOFFSET(np_monitor_record, seq), H5T_NATIVE_INT32);
    H5Tinsert(t, "key", HOFFSET(np_monitor_record, key), H5T_NATIVE_INT32);
    H5Tinsert(t, "numel", HOFFSET(np_monitor_record, numel), H5T_NATIVE_INT64);
    H5Tinsert(t, "norm", HOFFSET(np_monitor_record, norm), H5T_NATIVE_DOUBLE);
    H5Tinsert(t, "min", HOFFSET(np_monitor_record, min), H5T_NATIVE_DOUBLE);
    H5Tinsert(t, "max", HOFFSET(np_monitor_record, max), H5T_NATIVE_DOUBLE);
    H5Tinsert(t, "mean", HOFFSET(np_monitor_record, mean), H5T_NATIVE_DOUBLE);
    H5Tinsert(t, "zeros", HOFFSET(np_monitor_record, zeros), H5T_NATIVE_INT64);
    H5Tinsert(t, "nans", HOFFSET(np_monitor_record, nans), H5T_NATIVE_INT64);
    H5Tinsert(t, "infs", HOFFSET(np_monitor_record, infs), H5T_NATIVE_INT64);
    return t;
}

static hid_t fixed_str(size_t n)
{
    hid_t s = H5Tcopy(H5T_C_S1);
    H5Tset_size(s, n);
    H5Tset_strpad(s, H5T_STR_NULLTERM);
    return s;
}

hid_t np_monfile_type_key(void)
{
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(np_monitor_key));
    hid_t a = fixed_str(NP_MONITOR_FILE_NAME_LEN), b = fixed_str(NP_MONITOR_FILE_METRIC_LEN);
    H5Tinsert(t, "name", HOFFSET(np_monitor_key, name), a);
    H5Tinsert(t, "metric", HOFFSET(np_monitor_key, metric), b);
    H5Tclose(a);
    H5Tclose(b);
    return t;
}

hid_t np_monfile_type_step(void)
{
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(np_monitor_step));
    H5Tinsert(t, "step", HOFFSET(np_monitor_step, step), H5T_NATIVE_INT64);
    H5Tinsert(t, "records", HOFFSET(np_monitor_step, records), H5T_NATIVE_INT64);
    H5Tinsert(t, "keys", HOFFSET(np_monitor_step, keys), H5T_NATIVE_INT64);
    return t;
}

static hid_t make_table(hid_t file, const char *name, hid_t type, hsize_t chunk)
{
    hsize_t zero = 0, unl = H5S_UNLIMITED;
    hid_t sp = H5Screate_simple(1, &zero, &unl);
    hid_t pl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(pl, 1, &chunk);
    /* rows are written as the table grows, and read up to the last steps
     * row: no fill values (their writing took a third of the monitor's
     * own instructions a step) */
    H5Pset_fill_time(pl, H5D_FILL_TIME_NEVER);
    hid_t d = H5Dcreate2(file, name, type, sp, H5P_DEFAULT, pl, H5P_DEFAULT);
    H5Pclose(pl);
    H5Sclose(sp);
    return d;
}

/* rows appended after the cur rows the table holds (the writer counts
 * them: no read of the extent) */
static int append(hid_t d, hid_t type, const void *rows, hsize_t n, hsize_t cur)
{
    if (!n)
        return 0;
    hsize_t nd = cur + n;
    if (H5Dset_extent(d, &nd) < 0)
        return -1;
    hid_t sp = H5Dget_space(d);
    H5Sselect_hyperslab(sp, H5S_SELECT_SET, &cur, NULL, &n, NULL);
    hid_t ms = H5Screate_simple(1, &n, NULL);
    herr_t e = H5Dwrite(d, type, ms, sp, H5P_DEFAULT, rows);
    H5Sclose(ms);
    H5Sclose(sp);
    return e < 0 ? -1 : 0;
}

static void close_handles(np_monitor_file *f)
{
    if (f->d_rec >= 0) H5Dclose(f->d_rec);
    if (f->d_key >= 0) H5Dclose(f->d_key);
    if (f->d_step >= 0) H5Dclose(f->d_step);
    f->d_rec = f->d_key = f->d_step = -1;
}

/* The first error is kept: the file takes no more steps. A write the
 * file system refused for space (errno ENOSPC, EFBIG, EDQUOT, as HDF5's
 * write left it) is NP_ERR_NOSPACE with the system's words. */
static np_status fail(np_monitor_file *f, np_status st, const char *what, np_error *err)
{
    if (!f->st) {
        int e = errno;
        /* nothing more reaches the file: it stays as it was at its last
         * finished step, like a killed run's, and its close cannot fail
         * (an HDF5 1.10 close that fails leaves a freed file id that the
         * library closes again at exit: h5vfd.c) */
        np_vfd_set_mode(f->vf, NP_VFD_DISCARD, NULL);
        if (st == NP_ERR_IO && (e == ENOSPC || e == EFBIG || e == EDQUOT)) {
            f->st = NP_ERR_NOSPACE;
            np_error_set(&f->err, f->st, f->path, NULL, "%s: %s", what, strerror(e));
        } else {
            f->st = st;
            np_error_set(&f->err, st, f->path, NULL, "%s", what);
        }
    }
    if (err && err->status == NP_OK)
        *err = f->err;
    return f->st;
}

np_status np_monitor_file_create(np_monitor_file **out, const char *path, int rank,
                                 int world_size, int step_interval, int pp_stages, int pp_stage,
                                 np_error *err)
{
    *out = NULL;
    np_monitor_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    }
    f->file = f->d_rec = f->d_key = f->d_step = -1;
    f->t_rec = np_monfile_type_record();
    f->t_key = np_monfile_type_key();
    f->t_step = np_monfile_type_step();
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
    hid_t vfd = (hid_t)np_vfd_id();
    if (vfd >= 0)
        H5Pset_driver(fapl, vfd, NULL);
    errno = 0;
    H5E_BEGIN_TRY {
        f->file = H5Fcreate(path, H5F_ACC_EXCL, H5P_DEFAULT, fapl);
    } H5E_END_TRY;
    int en = errno;
    H5Pclose(fapl);
    f->vf = f->file >= 0 ? np_vfd_of(f->file) : NULL;
    if (f->file < 0) {
        np_monitor_file_close(f, NULL);
        if (en == EEXIST || (en == 0 && access(path, F_OK) == 0))
            return np_error_set(err, NP_ERR_IO, path, NULL, "cannot create the monitor file: it "
                                "exists already (the monitor never overwrites a run's record)");
        return np_error_set(err, en == ENOSPC || en == EDQUOT ? NP_ERR_NOSPACE : NP_ERR_IO, path,
                            NULL, "cannot create the monitor file: %s",
                            en ? strerror(en) : "HDF5 refused it");
    }
    np_h5_attr_set_str(f->file, "format", NP_MONITOR_FILE_FORMAT);
    np_h5_attr_set_i64(f->file, "version", NP_MONITOR_FILE_VERSION);
    np_h5_attr_set_i64(f->file, "rank", rank);
    np_h5_attr_set_i64(f->file, "world_size", world_size);
    np_h5_attr_set_i64(f->file, "step_interval", step_interval);
    if (pp_stages > 1) {
        np_h5_attr_set_i64(f->file, "pp_stages", pp_stages);
        np_h5_attr_set_i64(f->file, "pp_stage", pp_stage);
    }
    herr_t swmr = -1;
    H5E_BEGIN_TRY {
        /* 512 rows (40 KiB) a chunk: each step's flush writes the
         * last chunk whole (a 4096-row chunk wrote 320 KiB a step for
         * a step's few dozen records) */
        f->d_rec = make_table(f->file, "records", f->t_rec, 512);
        f->d_key = make_table(f->file, "keys", f->t_key, 256);
        f->d_step = make_table(f->file, "steps", f->t_step, 256);
        if (f->d_rec >= 0 && f->d_key >= 0 && f->d_step >= 0)
            swmr = H5Fstart_swmr_write(f->file);
    } H5E_END_TRY;
    if (swmr < 0) {
        np_monitor_file_close(f, NULL);
        return np_error_set(err, NP_ERR_HDF5, path, NULL, "cannot set up the monitor file");
    }
    *out = f;
    return NP_OK;
}

np_status np_monitor_file_append(np_monitor_file *f, int64_t step,
                                 const np_monitor_record *records, int64_t n_records,
                                 const np_monitor_key *keys, int64_t n_keys, np_error *err)
{
    if (f->st)
        return fail(f, f->st, "", err);
    if (n_records < 0 || n_keys < 0 || (n_records && !records) || (n_keys && !keys))
        return np_error_set(err, NP_ERR_ARG, f->path, NULL, "np_monitor_file_append: %lld "
                            "records, %lld keys", (long long)n_records, (long long)n_keys);
    np_status st = NP_OK;
    errno = 0;   /* what a failed write leaves names the cause (fail) */
    H5E_BEGIN_TRY {
        if (append(f->d_rec, f->t_rec, records, (hsize_t)n_records, (hsize_t)f->rows) ||
            append(f->d_key, f->t_key, keys, (hsize_t)n_keys, (hsize_t)f->keys)) {
            st = fail(f, NP_ERR_IO, "cannot append a step's records", err);
        } else if (H5Dflush(f->d_rec) < 0 || (n_keys && H5Dflush(f->d_key) < 0)) {
            /* the records and keys reach the file before the steps row
             * that covers them (the keys only when the step added some:
             * after the first recorded step seldom) */
            st = fail(f, NP_ERR_IO, "cannot flush a step's records", err);
        } else {
            f->rows += n_records;
            f->keys += n_keys;
            np_monitor_step row = {step, f->rows, f->keys};
            if (append(f->d_step, f->t_step, &row, 1, (hsize_t)f->steps) ||
                H5Dflush(f->d_step) < 0)
                st = fail(f, NP_ERR_IO, "cannot append a step", err);
            else
                f->steps++;
        }
    } H5E_END_TRY;
    return st;
}

void np_monitor_file_counts(const np_monitor_file *f, int64_t *records, int64_t *keys,
                            int64_t *steps)
{
    if (records) *records = f ? f->rows : 0;
    if (keys) *keys = f ? f->keys : 0;
    if (steps) *steps = f ? f->steps : 0;
}

np_status np_monitor_file_close(np_monitor_file *f, np_error *err)
{
    if (!f)
        return NP_OK;
    /* a write failing now is reported, never returned to H5Fclose */
    int report = 0;
    if (!f->st)
        np_vfd_set_mode(f->vf, NP_VFD_REPORT, &report);
    close_handles(f);
    f->vf = NULL;          /* the driver's state goes with the file */
    herr_t ce = 0;
    errno = 0;
    H5E_BEGIN_TRY {
        ce = f->file >= 0 ? H5Fclose(f->file) : 0;
    } H5E_END_TRY;
    if (ce < 0 || report) {
        errno = report ? report : errno;
        fail(f, NP_ERR_IO, "cannot close the monitor file", NULL);
    }
    H5Tclose(f->t_rec);
    H5Tclose(f->t_key);
    H5Tclose(f->t_step);
    np_status st = f->st;
    if (st && err && err->status == NP_OK)
        *err = f->err;
    free(f->path);
    free(f);
    return st;
}
