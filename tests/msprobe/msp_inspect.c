/* tests/msprobe/msp_inspect.c - prints what np_msprobe reads, for the
 * script tests that check it against Python's own reading (json module,
 * torch.load):
 *   msp_inspect leaves DUMP.json     one line per leaf, tab-separated:
 *       name msp_name call role kind dtype shape numel max min mean norm
 *       requires_grad crc32 has_data data_name
 *   msp_inspect calls DUMP.json      seq call
 *   msp_inspect construct FILE       call parent
 *   msp_inspect stack FILE           call site
 *   msp_inspect find PATH            step rank pid dir
 *   msp_inspect pt FILE.pt [f32]     dtype, shape, then every value
 * Exit 0, or 2 with the error on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nprobe/msprobe.h"

static void num(double x)
{
    printf("\t%.17g", x);
}

static int on_entry(void *user, const np_msp_entry *e, np_error *err)
{
    const np_entry_rec *r = &e->rec;
    printf("%s\t%s\t%s\t%s\t%d\t%s\t", r->name, e->msp_name, r->call, r->role, (int)e->kind,
           r->dtype);
    for (int d = 0; d < r->ndim; d++)
        printf("%s%lld", d ? "," : "", (long long)r->shape[d]);
    printf("\t%lld", (long long)r->numel);
    num(r->max);
    num(r->min);
    num(r->mean);
    num(r->norm);
    printf("\t%d\t%08x\t%d\t%s\n", r->requires_grad, r->crc32, r->has_data, e->data_name);
    return 0;
}

static int on_call(void *user, const char *call, int64_t seq, np_error *err)
{
    printf("%lld\t%s\n", (long long)seq, call);
    return 0;
}

static int on_pair(void *user, const char *a, const char *b, np_error *err)
{
    printf("%s\t%s\n", a, b);
    return 0;
}

static np_status show_pt(const char *path, int f32, np_error *err)
{
    np_pt_tensor t;
    np_status st = np_pt_open(&t, path, err);
    if (st)
        return st;
    printf("%s\t", t.dtype);
    for (int d = 0; d < t.ndim; d++)
        printf("%s%lld", d ? "," : "", (long long)t.shape[d]);
    printf("\t%lld\t%d\t%d\n", (long long)t.numel, t.contiguous, t.requires_grad);
    size_t es = f32 ? sizeof(float) : sizeof(double);
    void *buf = malloc(t.numel ? (size_t)t.numel * es : 1);
    if (!buf) {
        np_pt_close(&t);
        return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    }
    /* in two pieces, so reads that start mid-tensor are exercised */
    int64_t half = t.numel / 3;
    st = np_pt_read(buf, !f32, &t, 0, half, err);
    if (!st)
        st = np_pt_read((char *)buf + (size_t)half * es, !f32, &t, half, t.numel - half, err);
    for (int64_t i = 0; !st && i < t.numel; i++)
        printf("%.17g\n", f32 ? (double)((float *)buf)[i] : ((double *)buf)[i]);
    free(buf);
    np_pt_close(&t);
    return st;
}

static np_status run(int argc, char **argv, np_error *err)
{
    const char *what = argv[1], *path = argv[2];
    if (!strcmp(what, "leaves") || !strcmp(what, "calls")) {
        np_msp_sink sink = {on_call, on_entry, NULL};
        if (!strcmp(what, "calls"))
            sink.entry = NULL;
        else
            sink.call = NULL;
        np_msp_header h;
        np_status st = np_msp_read_dump_json(&h, path, &sink, err);
        if (!st)
            fprintf(stderr, "task=%s level=%s framework=%s calls=%lld entries=%lld\n", h.task,
                    h.level, h.framework, (long long)h.n_calls, (long long)h.n_entries);
        return st;
    }
    if (!strcmp(what, "construct"))
        return np_msp_read_construct(path, on_pair, NULL, err);
    if (!strcmp(what, "stack"))
        return np_msp_read_stack(path, on_pair, NULL, err);
    if (!strcmp(what, "pt"))
        return show_pt(path, argc > 3 && !strcmp(argv[3], "f32"), err);
    if (!strcmp(what, "find")) {
        np_msp_ref *v;
        size_t n;
        np_status st = np_msp_find(&v, &n, path, err);
        for (size_t i = 0; !st && i < n; i++)
            printf("%d\t%d\t%ld\t%s\n", v[i].step, v[i].rank, v[i].pid, v[i].dir);
        if (!st)
            free(v);
        return st;
    }
    return np_error_set(err, NP_ERR_ARG, NULL, NULL, "unknown command %s", what);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: msp_inspect leaves|calls|construct|stack|find|pt PATH [f32]\n");
        return 2;
    }
    np_error err;
    np_error_clear(&err);
    if (run(argc, argv, &err)) {
        if (err.line)
            fprintf(stderr, "msp_inspect: %s:%ld:%ld: %s\n", err.file, err.line, err.column,
                    err.text);
        else
            fprintf(stderr, "msp_inspect: %s: %s\n", err.file, err.text);
        return 2;
    }
    return 0;
}
