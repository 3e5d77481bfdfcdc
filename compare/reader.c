/* compare/reader.c - open an nprobe dump (format v1) for reading: check the
 * format attribute, read the root attributes, and stream /entries and /calls
 * in chunks into compact records. HDF5's own error printing is silenced and
 * every failure becomes an np_error naming the file. */
#include <fcntl.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

#define ENTRY_CHUNK 2048

static void silence_hdf5(void)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}


static const char *const known_roles[] = {"input", "output", "parameters", "kwargs",
                                          "parameters_grad"};
static const char *const known_dtypes[] = {"float32", "bfloat16", "float16", "float64",
                                           "int64", "int32", "bool"};

static const char *intern(cmp_arena *a, const char *s, const char *const *table, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(s, table[i]) == 0)
            return table[i];
    return cmp_arena_strdup(a, s);
}

/* Row callbacks of read_table: `begin` once with the row count (before any
 * rows, also for an empty table), then `rows` for each chunk of records. */
typedef struct table_reader {
    np_status (*begin)(cmp_dump *d, size_t n, np_error *err);
    np_status (*rows)(cmp_dump *d, cmp_arena *arena, const void *recs, size_t off, size_t cnt,
                      np_error *err);
} table_reader;

/* A copy of the memory type `mt` whose string members take the padding of
 * the file's member of the same name when that is NUL-padded or
 * NUL-terminated (the readers terminate every string themselves). The probe
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

/* Stream the one-dimensional compound table /`name` in chunks of ENTRY_CHUNK
 * records of `recsize` bytes (memory type `mt`), so memory does not grow with
 * the table beyond what the callbacks keep. *n_rows is set only when the
 * whole table was read. */
static np_status read_table(cmp_dump *d, cmp_arena *arena, const char *name, hid_t mt,
                            size_t recsize, const table_reader *tr, size_t *n_rows,
                            np_error *err)
{
    hid_t ds = H5Dopen2(d->file_id, name, H5P_DEFAULT);
    hid_t space = ds >= 0 ? H5Dget_space(ds) : -1;
    hid_t ft = ds >= 0 ? H5Dget_type(ds) : -1;
    hid_t padded = mt >= 0 ? mem_type_like_file(mt, ft) : -1;
    if (padded >= 0)
        mt = padded;
    /* the same type in file and memory: HDF5 copies whole records, so the
     * buffer needs no clearing (members missing from an older file would) */
    int same_type = ft >= 0 && mt >= 0 && H5Tequal(ft, mt) > 0;
    unsigned char *buf = malloc(ENTRY_CHUNK * recsize);
    np_status st = NP_OK;
    hsize_t n = 0;
    if (ds < 0 || space < 0 || mt < 0 || H5Sget_simple_extent_ndims(space) != 1 ||
        H5Sget_simple_extent_dims(space, &n, NULL) < 0) {
        st = np_error_set(err, NP_ERR_FORMAT, d->path, name,
                          "cannot read /%s as a one-dimensional table (file corrupt?)", name);
        goto done;
    }
    if (!buf) {
        st = np_error_set(err, NP_ERR_NOMEM, d->path, name, "out of memory reading /%s", name);
        goto done;
    }
    if ((st = tr->begin(d, (size_t)n, err)) != NP_OK)
        goto done;
    for (hsize_t off = 0; off < n; off += ENTRY_CHUNK) {
        hsize_t cnt = n - off < ENTRY_CHUNK ? n - off : ENTRY_CHUNK;
        hid_t ms = H5Screate_simple(1, &cnt, NULL);
        herr_t e = H5Sselect_hyperslab(space, H5S_SELECT_SET, &off, NULL, &cnt, NULL);
        if (!same_type)
            memset(buf, 0, cnt * recsize);
        if (e >= 0)
            e = H5Dread(ds, mt, ms, space, H5P_DEFAULT, buf);
        H5Sclose(ms);
        if (e < 0) {
            st = np_error_set(err, NP_ERR_FORMAT, d->path, name,
                              "cannot read rows %llu..%llu of /%s (truncated or corrupt file)",
                              (unsigned long long)off, (unsigned long long)(off + cnt - 1), name);
            goto done;
        }
        if ((st = tr->rows(d, arena, buf, (size_t)off, (size_t)cnt, err)) != NP_OK)
            goto done;
    }
    *n_rows = (size_t)n;
done:
    free(buf);
    if (padded >= 0)
        H5Tclose(padded);
    if (ft >= 0)
        H5Tclose(ft);
    if (space >= 0)
        H5Sclose(space);
    if (ds >= 0)
        H5Dclose(ds);
    return st;
}

static np_status entries_begin(cmp_dump *d, size_t n, np_error *err)
{
    if (!(d->entries = calloc(n ? n : 1, sizeof *d->entries)))
        return np_error_set(err, NP_ERR_NOMEM, d->path, NP_FMT_ENTRIES,
                            "out of memory for %zu entries", n);
    return NP_OK;
}

static np_status entries_rows(cmp_dump *d, cmp_arena *arena, const void *recs, size_t off,
                              size_t cnt, np_error *err)
{
    np_entry_rec *buf = (np_entry_rec *)recs;
    const char *prev_call = off ? d->entries[off - 1].call : NULL;
    for (size_t i = 0; i < cnt; i++) {
        np_entry_rec *r = &buf[i];
        np_cmp_side *s = &d->entries[off + i];
        r->name[NP_FMT_NAME_LEN - 1] = r->call[NP_FMT_NAME_LEN - 1] = '\0';
        r->role[NP_FMT_ROLE_LEN - 1] = r->dtype[NP_FMT_DTYPE_LEN - 1] = '\0';
        if (r->ndim < 0 || r->ndim > NP_FMT_MAX_DIMS)
            return np_error_set(err, NP_ERR_FORMAT, d->path, r->name,
                                "ndim %d out of range [0, %d] in /entries row %zu", r->ndim,
                                NP_FMT_MAX_DIMS, off + i);
        /* the same leaf on the other side: share its strings */
        int j = d->twin_names ? np_strmap_get(d->twin_names, r->name) : -1;
        const np_cmp_side *twin = j >= 0 ? &d->twin_entries[j] : NULL;
        s->name = twin ? twin->name : cmp_arena_strdup(arena, r->name);
        if (prev_call && strcmp(prev_call, r->call) == 0)
            s->call = prev_call;
        else if (twin && strcmp(twin->call, r->call) == 0)
            s->call = twin->call;
        else
            s->call = cmp_arena_strdup(arena, r->call);
        prev_call = s->call;
        s->role = intern(arena, r->role, known_roles, 5);
        s->dtype = intern(arena, r->dtype, known_dtypes, 7);
        size_t shape_bytes = (size_t)r->ndim * sizeof(int64_t);
        const int64_t *shape = NULL;
        const np_cmp_side *prev = off + i ? &d->entries[off + i - 1] : NULL;
        if (twin && twin->ndim == r->ndim && (!r->ndim || !memcmp(twin->shape, r->shape, shape_bytes))) {
            shape = twin->shape;
        } else if (prev && prev->ndim == r->ndim && r->ndim &&
                   !memcmp(prev->shape, r->shape, shape_bytes)) {
            shape = prev->shape; /* the same shape as the row before */
        } else if (r->ndim) {
            int64_t *sh = cmp_arena_alloc(arena, shape_bytes, sizeof(int64_t));
            if (sh)
                memcpy(sh, r->shape, shape_bytes);
            shape = sh;
        }
        if (!s->name || !s->call || !s->role || !s->dtype || (r->ndim && !shape))
            return np_error_set(err, NP_ERR_NOMEM, d->path, NULL, "out of memory reading /entries");
        s->shape = shape;
        s->ndim = (int8_t)r->ndim;
        s->seq = r->seq;
        s->numel = r->numel;
        s->max = r->max;
        s->min = r->min;
        s->mean = r->mean;
        s->norm = r->norm;
        s->nan_count = r->nan_count;
        s->inf_count = r->posinf_count + r->neginf_count;
        s->crc32 = r->crc32;
        s->has_data = r->has_data;
        s->requires_grad = r->requires_grad;
    }
    return NP_OK;
}

static np_status calls_begin(cmp_dump *d, size_t n, np_error *err)
{
    if (!(d->calls = calloc(n ? n : 1, sizeof *d->calls)))
        return np_error_set(err, NP_ERR_NOMEM, d->path, NP_FMT_CALLS, "out of memory");
    return NP_OK;
}

static np_status calls_rows(cmp_dump *d, cmp_arena *arena, const void *recs, size_t off,
                            size_t cnt, np_error *err)
{
    np_call_rec *buf = (np_call_rec *)recs;
    for (size_t i = 0; i < cnt; i++) {
        np_call_rec *r = &buf[i];
        cmp_call_rec *c = &d->calls[off + i];
        r->call[NP_FMT_NAME_LEN - 1] = r->parent[NP_FMT_NAME_LEN - 1] = '\0';
        r->kind[NP_FMT_KIND_LEN - 1] = r->callsite[NP_FMT_SITE_LEN - 1] = '\0';
        /* the entries name their calls in seq order (the row of /calls):
         * walk them alongside and share the entry's copy of the name */
        while (d->call_cursor < d->n_entries && d->entries[d->call_cursor].seq < r->seq)
            d->call_cursor++;
        const np_cmp_side *e = d->call_cursor < d->n_entries ? &d->entries[d->call_cursor] : NULL;
        c->name = e && e->seq == r->seq && !strcmp(e->call, r->call) ? e->call
                                                                       : cmp_arena_strdup(arena, r->call);
        c->kind = strcmp(r->kind, "module") == 0 ? "module" : "api";
        c->parent = r->parent[0] ? cmp_arena_strdup(arena, r->parent) : "";
        c->callsite = r->callsite[0] ? cmp_arena_strdup(arena, r->callsite) : "";
        c->seq = r->seq;
        if (!c->name || !c->parent || !c->callsite)
            return np_error_set(err, NP_ERR_NOMEM, d->path, NULL, "out of memory reading /calls");
    }
    return NP_OK;
}

static np_status read_entries(cmp_dump *d, cmp_arena *arena, np_error *err)
{
    static const table_reader tr = {entries_begin, entries_rows};
    if (H5Lexists(d->file_id, NP_FMT_ENTRIES, H5P_DEFAULT) <= 0)
        return np_error_set(err, NP_ERR_FORMAT, d->path, NP_FMT_ENTRIES,
                            "no /entries table (an incomplete step or not a dump)");
    hid_t mt = np_fmt_entry_h5type();
    np_status st = read_table(d, arena, NP_FMT_ENTRIES, mt, sizeof(np_entry_rec), &tr,
                              &d->n_entries, err);
    if (mt >= 0)
        H5Tclose(mt);
    return st;
}

static np_status read_calls(cmp_dump *d, cmp_arena *arena, np_error *err)
{
    static const table_reader tr = {calls_begin, calls_rows};
    if (H5Lexists(d->file_id, NP_FMT_CALLS, H5P_DEFAULT) <= 0)
        return NP_OK; /* optional for reading: rows then have no call tree */
    hid_t mt = np_fmt_call_h5type();
    np_status st = read_table(d, arena, NP_FMT_CALLS, mt, sizeof(np_call_rec), &tr,
                              &d->n_calls, err);
    if (mt >= 0)
        H5Tclose(mt);
    return st;
}

/* The root attributes the compare uses; NP_ERR_FORMAT or
 * NP_ERR_UNSUPPORTED naming the attribute when the file is not a dump of
 * this version, or one attribute is present but not a single value of its
 * type (never read into a buffer it does not fit). */
static np_status read_root_attrs(cmp_dump *d, const char *path, np_error *err)
{
    hid_t f = d->file_id;
    int rc = np_h5_attr_get_str(f, NP_FMT_ATTR_FORMAT, d->format, sizeof d->format);
    if (rc != 0 || strcmp(d->format, NP_FMT_NAME) != 0) {
        if (rc != 0 && rc != NP_H5_ATTR_ABSENT)
            return np_error_set(err, NP_ERR_FORMAT, path, NP_FMT_ATTR_FORMAT,
                                "not an nprobe dump: root attribute 'format' %s",
                                np_h5_attr_problem(rc));
        return np_error_set(err, NP_ERR_FORMAT, path, NP_FMT_ATTR_FORMAT,
                            "not an nprobe dump: root attribute 'format' is '%s', expected '%s'",
                            d->format[0] ? d->format : "(missing)", NP_FMT_NAME);
    }
    d->format_version = -1;
    rc = np_h5_attr_get_i64(f, NP_FMT_ATTR_FORMAT_VERSION, &d->format_version);
    if (rc != 0 && rc != NP_H5_ATTR_ABSENT)
        return np_error_set(err, NP_ERR_FORMAT, path, NP_FMT_ATTR_FORMAT_VERSION,
                            "root attribute '%s' %s", NP_FMT_ATTR_FORMAT_VERSION,
                            np_h5_attr_problem(rc));
    if (d->format_version != NP_FMT_VERSION)
        return np_error_set(err, NP_ERR_UNSUPPORTED, path, NP_FMT_ATTR_FORMAT_VERSION,
                            "dump format version %lld, this nprobe reads version %d",
                            (long long)d->format_version, NP_FMT_VERSION);
    struct {
        const char *name;
        char *s;
        size_t cap;
        int64_t *i;
    } at[] = {
        {NP_FMT_ATTR_TASK, d->task, sizeof d->task, NULL},
        {NP_FMT_ATTR_LEVEL, d->level, sizeof d->level, NULL},
        {NP_FMT_ATTR_PRECISION, d->precision, sizeof d->precision, NULL},
        {NP_FMT_ATTR_DEVICE, d->device, sizeof d->device, NULL},
        {NP_FMT_ATTR_STEP, NULL, 0, &d->step},
        {NP_FMT_ATTR_RANK, NULL, 0, &d->rank},
        {NP_FMT_ATTR_COMPLETE, NULL, 0, &d->complete},
    };
    d->step = d->rank = -1;
    d->complete = 0;
    for (size_t k = 0; k < sizeof at / sizeof at[0]; k++) {
        rc = at[k].s ? np_h5_attr_get_str(f, at[k].name, at[k].s, at[k].cap)
                     : np_h5_attr_get_i64(f, at[k].name, at[k].i);
        if (rc != 0 && rc != NP_H5_ATTR_ABSENT)
            return np_error_set(err, NP_ERR_FORMAT, path, at[k].name, "root attribute '%s' %s",
                                at[k].name, np_h5_attr_problem(rc));
    }
    return NP_OK;
}

static np_status dump_open_raw(cmp_dump *d, const char *path, const cmp_dump *twin,
                               const np_strmap *twin_names, cmp_arena *arena, np_error *err)
{
    memset(d, 0, sizeof *d);
    if (twin && twin_names) {
        d->twin_entries = twin->entries;
        d->twin_names = twin_names;
    }
    d->file_id = d->data_group = -1;
    d->fd = -1;
    snprintf(d->path, sizeof d->path, "%s", path);
    silence_hdf5();
    if (access(path, R_OK) != 0)
        return np_error_set(err, NP_ERR_NOTFOUND, path, NULL, "cannot read the file");
    htri_t is = H5Fis_hdf5(path);
    if (is <= 0)
        return np_error_set(err, NP_ERR_FORMAT, path, NULL,
                            "not an HDF5 file, or truncated (expected an nprobe dump, %s)",
                            NP_FMT_FILE);
    /* Peak memory must not grow with the number of payload datasets: each
     * chunked dataset's chunk-index node (~17 KB) stays in HDF5's metadata
     * cache (up to 32 MB per file by default) and freed blocks stay in
     * HDF5's free lists; cap both. The compare touches each dataset once, so
     * a small cache costs nothing. */
    H5set_free_list_limits(1 << 20, 256 << 10, 1 << 20, 256 << 10, 1 << 20, 256 << 10);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl >= 0) {
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
    }
    d->file_id = H5Fopen(path, H5F_ACC_RDONLY, fapl >= 0 ? fapl : H5P_DEFAULT);
    if (fapl >= 0)
        H5Pclose(fapl);
    if (d->file_id < 0)
        return np_error_set(err, NP_ERR_FORMAT, path, NULL,
                            "HDF5 cannot open the file (truncated or corrupt)");
    np_status st = read_root_attrs(d, path, err);
    if (st != NP_OK) {
        cmp_dump_close(d);
        return st;
    }
    d->loss_scale = np_fmt_get_loss_scale(d->file_id);
    st = read_entries(d, arena, err);
    if (st == NP_OK)
        st = read_calls(d, arena, err);
    if (st != NP_OK) {
        /* the tables are the pair's only once the open succeeded */
        free(d->entries);
        free(d->calls);
        d->entries = NULL;
        d->calls = NULL;
        cmp_dump_close(d);
        return st;
    }
    if (H5Lexists(d->file_id, NP_FMT_DATA, H5P_DEFAULT) > 0)
        d->data_group = H5Gopen2(d->file_id, NP_FMT_DATA, H5P_DEFAULT);
    d->fd = open(path, O_RDONLY);
    return NP_OK;
}

/* The child's walk of a file: everything cmp_dump_open and the payload
 * reads ask HDF5 for (root attributes, /entries, /calls, each payload
 * dataset's layout). 0 when it read, 1 when it refused the file cleanly. */
static int walk_in_child(void *arg)
{
    const char *path = arg;
    cmp_arena a = {0};
    cmp_dump d;
    np_error e;
    np_error_clear(&e);
    if (dump_open_raw(&d, path, NULL, NULL, &a, &e) != NP_OK)
        return 1;
    cmp_payload_walk(&d);
    cmp_dump_close(&d);
    return 0;
}

void cmp_dump_walk_start(cmp_walk *w, const char *path)
{
    w->path = path;
    w->started = 0;
    /* HDF5 1.10 can crash or loop on a file with corrupt metadata: walk it
     * in a child first (docs/COMPARE.md, "Inputs"). A file the walk refuses
     * cleanly is refused again by cmp_dump_open, with the reason. */
    if (access(path, R_OK) != 0 || getenv("NPROBE_NO_ISOLATION"))
        return;
    w->started = np_isolated_start(&w->h, walk_in_child, (void *)path) == 0;
}

np_status cmp_dump_walk_finish(cmp_walk *w, np_error *err)
{
    if (!w->started)
        return NP_OK;
    w->started = 0;
    double limit = np_file_check_timeout();
    int sig = 0;
    int r = np_isolated_wait(&w->h, limit, &sig);
    return np_isolated_walk_error(err, w->path, r, sig, limit);
}

np_status cmp_dump_open(cmp_dump *d, const char *path, const cmp_dump *twin,
                        const np_strmap *twin_names, cmp_arena *arena, np_error *err)
{
    cmp_walk w;
    cmp_dump_walk_start(&w, path);
    np_status st = cmp_dump_walk_finish(&w, err);
    if (st != NP_OK) {
        memset(d, 0, sizeof *d);
        d->file_id = d->data_group = -1;
        d->fd = -1;
        return st;
    }
    return cmp_dump_open_walked(d, path, twin, twin_names, arena, err);
}

np_status cmp_dump_open_walked(cmp_dump *d, const char *path, const cmp_dump *twin,
                               const np_strmap *twin_names, cmp_arena *arena, np_error *err)
{
    return dump_open_raw(d, path, twin, twin_names, arena, err);
}

void cmp_dump_close(cmp_dump *d)
{
    if (!d)
        return;
    if (d->data_group >= 0)
        H5Gclose(d->data_group);
    if (d->file_id >= 0)
        H5Fclose(d->file_id);
    if (d->fd >= 0)
        close(d->fd);
    d->data_group = d->file_id = -1;
    d->fd = -1;
    /* entries and calls are handed over to the pair (or freed by it) */
}
