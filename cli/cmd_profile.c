/* cli/cmd_profile.c - `nprobe profile TRACE...` (time by category, top
 * operators, idle bubbles, comm/compute overlap, FLOP/s and MFU of
 * torch.profiler's Chrome traces) and `nprobe profile compare A B` (two
 * traces op by op, the most regressed first). One option table drives
 * parsing and help (cli/opts.h); docs/PROFILE.md. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cmd.h"
#include "nprobe/profile.h"
#include "opts.h"

typedef struct pf_args {
    const char *out, *format;
    long top;
    double peak_flops;
    np_cli_list pos; /* TRACE... or compare A B */
} pf_args;

#define F(f) offsetof(pf_args, f)
static const np_cli_opt pf_opts[] = {
    {NULL, "TRACE", NULL, NULL, NP_OPT_POS_LIST, F(pos), 0, 0, NULL, 0, NULL},
    {NULL, "-o|--out", "DIR", "write the reports into DIR (created; default: none)", NP_OPT_STR, F(out), 0,
     0, NULL, 0, NULL},
    {NULL, "--format", "LIST", "report formats, comma-separated: csv, json, html, xlsx\n"
                               "(default csv,json)", NP_OPT_STR, F(format), 0, 0, NULL, 0, NULL},
    {NULL, "--top", "N", "operators (and compare rows) printed (10)", NP_OPT_LONG, F(top), 0,
     1L << 30, NULL, 0, NULL},
    {NULL, "--peak-flops", "X", "the device's peak FLOP/s: MFU = achieved / X (0: no MFU)",
     NP_OPT_DOUBLE, F(peak_flops), 0, 0, NULL, 0, NULL},
    {NULL, "--help", NULL, "show this help", NP_OPT_HELP, 0, 0, 0, NULL, 0, NULL},
};
#define N_PF_OPTS ((int)(sizeof pf_opts / sizeof pf_opts[0]))

static const char help_before[] =
    "usage: nprobe profile TRACE... [options]\n"
    "       nprobe profile compare A B [options]\n"
    "\n"
    "Analyse Chrome/Perfetto trace-event JSON as torch.profiler writes it\n"
    "(export_chrome_trace, tensorboard_trace_handler; .json or .json.gz; a folder:\n"
    "every *.json and *.json.gz in it, one trace per rank), Ascend's trace_view.json\n"
    "(its Ascend Hardware and HCCL lanes as the device timeline), kernel_details.csv\n"
    "(one kernel per row, steps from Step Id) and operator_details.csv (each call's\n"
    "host self/total and device self time; no start times). Per trace: the timeline\n"
    "split into compute, communication, memory, optimizer, data loading, other and\n"
    "idle time, communication/compute overlap, idle bubbles, operators by total and\n"
    "by mean time, FLOP/s where the trace gives flops and an MFU estimate.\n"
    "`compare A B` pairs two traces' operators by category and name and lists the\n"
    "per-step time of each, B/A ratio and share of the step, most regressed first,\n"
    "ops on one side only, and the step-time gap; where an op is called several\n"
    "times a step, also its calls paired in call order (NAME #k: the k-th call in\n"
    "each step), most regressed first. Reading streams: memory does\n"
    "not grow with the trace's size (docs/PROFILE.md).\n"
    "\noptions:\n";
static const char help_after[] =
    "\nreports (-o): profile_summary.csv, profile_ops.csv, profile.json, profile.html\n"
    "(--format html: tables and the median step's timeline, self-contained),\n"
    "profile.xlsx (--format xlsx: sheets ranks and ops);\n"
    "compare: profile_compare.csv, profile_compare.json, profile_compare.xlsx,\n"
    "profile_compare_calls.csv (the calls in call order).\n"
    "exit code: 0 done, 2 usage or input error (unreadable trace).\n";

/* ---- trace paths ------------------------------------------------------------ */
typedef struct paths {
    char **v;
    size_t n, cap;
} paths;

static int path_add(paths *p, const char *s)
{
    if (np_grow((void **)&p->v, &p->cap, p->n + 1, sizeof *p->v))
        return -1;
    if (!(p->v[p->n] = strdup(s)))
        return -1;
    p->n++;
    return 0;
}

static void paths_free(paths *p)
{
    for (size_t i = 0; i < p->n; i++)
        free(p->v[i]);
    free(p->v);
}

static int ends(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A file, or a folder's *.json and *.json.gz (sorted). */
static int expand(paths *p, const char *arg)
{
    struct stat st;
    if (stat(arg, &st) != 0) {
        np_cli_error("%s: %s", arg, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode))
        return path_add(p, arg);
    DIR *d = opendir(arg);
    if (!d) {
        np_cli_error("%s: %s", arg, strerror(errno));
        return -1;
    }
    size_t first = p->n;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || !(ends(e->d_name, ".json") || ends(e->d_name, ".json.gz")))
            continue;
        size_t len = strlen(arg) + strlen(e->d_name) + 2;
        char *full = malloc(len);
        if (!full || (snprintf(full, len, "%s/%s", arg, e->d_name), path_add(p, full))) {
            free(full);
            closedir(d);
            return -1;
        }
        free(full);
    }
    closedir(d);
    if (p->n == first) {
        np_cli_error("%s: no trace in this folder (*.json, *.json.gz)", arg);
        return -1;
    }
    qsort(p->v + first, p->n - first, sizeof *p->v, str_cmp);
    return 0;
}

/* ---- writers ------------------------------------------------------------------ */
static void csv_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void json_num(FILE *f, double x)
{
    if (isfinite(x))
        fprintf(f, "%.17g", x);
    else
        fputs("null", f);
}

static void csv_num(FILE *f, double x)
{
    if (isfinite(x))
        fprintf(f, "%.17g", x);
}

/* n numbers as csv cells, each after a comma (not finite: an empty cell). */
static void csv_nums(FILE *f, size_t n, const double *v)
{
    for (size_t i = 0; i < n; i++) {
        fputc(',', f);
        csv_num(f, v[i]);
    }
}

/* `, "key": x` (not finite: null). */
static void json_field(FILE *f, const char *key, double x)
{
    fprintf(f, ", \"%s\": ", key);
    json_num(f, x);
}

typedef void (*writer_fn)(FILE *f, const void *data);

static int write_report(const char *dir, const char *name, writer_fn fn, const void *data)
{
    size_t len = strlen(dir) + strlen(name) + 2;
    char *path = malloc(len);
    if (!path)
        return -1;
    snprintf(path, len, "%s/%s", dir, name);
    np_out o;
    np_error err = {0};
    if (np_out_begin(&o, path, NULL, &err)) {
        np_cli_report(&err);
        free(path);
        return -1;
    }
    FILE *f = np_out_stream(&o);
    if (!f) {
        np_out_abort(&o);
        np_cli_error("%s: cannot write", path);
        free(path);
        return -1;
    }
    fn(f, data);
    if (np_out_commit(&o, 0, &err)) {
        np_cli_report(&err);
        free(path);
        return -1;
    }
    np_cli_report_line(path);
    free(path);
    return 0;
}

static int write_xlsx(const char *dir, const char *name, const np_prof_rank *r, size_t n,
                      const np_prof_compare *c)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    np_error err;
    np_error_clear(&err);
    if (np_prof_write_xlsx(path, r, n, c, &err)) {
        np_cli_report(&err);
        return -1;
    }
    np_cli_report_line(path);
    return 0;
}

typedef struct ranks {
    np_prof_rank *r;
    size_t n;
    double peak;
} ranks;

static long long rank_id(const ranks *R, size_t i)
{
    return R->r[i].rank >= 0 ? R->r[i].rank : (long long)i;
}

static double mfu(double flops, double span_us, double peak)
{
    return peak > 0 && span_us > 0 && flops > 0 ? flops / (span_us * 1e-6) / peak : NAN;
}

static void w_summary_csv(FILE *f, const void *data)
{
    const ranks *R = data;
    fputs("rank,trace,timeline,steps,events,span_us,busy_us", f);
    for (int c = 0; c < NP_PROF_CLASS_COUNT; c++)
        fprintf(f, ",%s_us", np_prof_class_name(c));
    fputs(",comm_us,compute_us,overlap_us,overlap_of_comm,bubbles,flops,flops_per_s,mfu\n", f);
    for (size_t i = 0; i < R->n; i++) {
        const np_prof_rank *r = &R->r[i];
        fprintf(f, "%lld,", rank_id(R, i));
        csv_str(f, r->path);
        fprintf(f, ",%s,%lld,%lld", r->device ? "device" : "cpu", r->steps, r->events);
        double v[2 + NP_PROF_CLASS_COUNT + 4] = {r->span_us, r->busy_us};
        for (int c = 0; c < NP_PROF_CLASS_COUNT; c++)
            v[2 + c] = r->class_us[c];
        double *t = v + 2 + NP_PROF_CLASS_COUNT;
        t[0] = r->comm_us, t[1] = r->compute_us, t[2] = r->overlap_us;
        t[3] = r->comm_us > 0 ? r->overlap_us / r->comm_us : NAN;
        csv_nums(f, sizeof v / sizeof v[0], v);
        fprintf(f, ",%lld", r->n_bubbles);
        double fl[3] = {r->flops, r->span_us > 0 && r->flops > 0 ? r->flops / (r->span_us * 1e-6) : NAN,
                        mfu(r->flops, r->span_us, R->peak)};
        csv_nums(f, 3, fl);
        fputc('\n', f);
    }
}

static void w_ops_csv(FILE *f, const void *data)
{
    const ranks *R = data;
    fputs("rank,category,name,count,total_us,self_us,step_median_us,mean_us,min_us,max_us,flops,flops_per_s\n", f);
    for (size_t i = 0; i < R->n; i++)
        for (size_t k = 0; k < R->r[i].n_ops; k++) {
            const np_prof_op *o = &R->r[i].ops[k];
            fprintf(f, "%lld,", rank_id(R, i));
            csv_str(f, o->cat);
            fputc(',', f);
            csv_str(f, o->name);
            fprintf(f, ",%lld", o->count);
            double v[] = {o->total_us, o->self_us, o->step_us, o->total_us / (double)o->count, o->min_us,
                          o->max_us, o->flops,
                          o->flops > 0 && o->total_us > 0 ? o->flops / (o->total_us * 1e-6) : NAN};
            csv_nums(f, sizeof v / sizeof v[0], v);
            fputc('\n', f);
        }
}

static void w_json(FILE *f, const void *data)
{
    const ranks *R = data;
    fputs("{\"ranks\": [", f);
    for (size_t i = 0; i < R->n; i++) {
        const np_prof_rank *r = &R->r[i];
        fprintf(f, "%s\n {\"rank\": %lld, \"trace\": ", i ? "," : "", rank_id(R, i));
        json_str(f, r->path);
        fprintf(f, ", \"timeline\": \"%s\", \"steps\": %lld, \"events\": %lld, \"last_step_dropped\": %s"
                   ", \"streamed\": %s",
                r->device ? "device" : "cpu", r->steps, r->events, r->last_step_dropped ? "true" : "false",
                r->streamed ? "true" : "false");
        json_field(f, "span_us", r->span_us);
        json_field(f, "busy_us", r->busy_us);
        fputs(", \"time_us\": {", f);
        for (int c = 0; c < NP_PROF_CLASS_COUNT; c++) {
            fprintf(f, "%s\"%s\": ", c ? ", " : "", np_prof_class_name(c));
            json_num(f, r->class_us[c]);
        }
        fputc('}', f);
        json_field(f, "comm_us", r->comm_us);
        json_field(f, "compute_us", r->compute_us);
        json_field(f, "overlap_us", r->overlap_us);
        fprintf(f, ", \"bubbles\": %lld", r->n_bubbles);
        json_field(f, "bubble_us", r->bubble_us);
        fputs(", \"longest_bubbles\": [", f);
        for (int k = 0; k < r->n_top; k++) {
            fprintf(f, "%s{\"start_us\": ", k ? ", " : "");
            json_num(f, r->top[k].start_us);
            fputs(", \"dur_us\": ", f);
            json_num(f, r->top[k].dur_us);
            fputc('}', f);
        }
        fputc(']', f);
        json_field(f, "flops", r->flops);
        json_field(f, "mfu", mfu(r->flops, r->span_us, R->peak));
        fputs(", \"ops\": [", f);
        for (size_t k = 0; k < r->n_ops; k++) {
            const np_prof_op *o = &r->ops[k];
            fputs(k ? ",\n  {\"category\": " : "\n  {\"category\": ", f);
            json_str(f, o->cat);
            fputs(", \"name\": ", f);
            json_str(f, o->name);
            fprintf(f, ", \"count\": %lld", o->count);
            json_field(f, "total_us", o->total_us);
            json_field(f, "self_us", o->self_us);
            json_field(f, "step_median_us", o->step_us);
            json_field(f, "min_us", o->min_us);
            json_field(f, "max_us", o->max_us);
            json_field(f, "flops", o->flops);
            fputc('}', f);
        }
        fputs("]}", f);
    }
    fputs("\n]}\n", f);
}

/* Which of csv, json; -1 after an error. */
static int formats_of(const char *s)
{
    if (!s)
        return 3;
    int f = 0;
    char buf[64];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        if (!strcmp(t, "csv"))
            f |= 1;
        else if (!strcmp(t, "json"))
            f |= 2;
        else if (!strcmp(t, "html"))
            f |= 4;
        else if (!strcmp(t, "xlsx"))
            f |= 8;
        else {
            np_cli_error("--format: expected csv, json, html, xlsx, got '%s'", t);
            return -1;
        }
    }
    if (!f)
        np_cli_error("--format: empty list");
    return f ? f : -1;
}

/* ---- printing --------------------------------------------------------------- */
static int ptr_mean_cmp(const void *x, const void *y)
{
    const np_prof_op *a = *(const np_prof_op *const *)x, *b = *(const np_prof_op *const *)y;
    double ma = a->total_us / (double)a->count, mb = b->total_us / (double)b->count;
    if (ma != mb)
        return ma > mb ? -1 : 1;
    return a->first < b->first ? -1 : a->first > b->first;
}

/* An operator for the printed tables: not a span (Trace), a step or a
 * user range (annotations), a Python frame. */
static int is_operator(const np_prof_op *o)
{
    return strcmp(o->cat, "Trace") && strcmp(o->cat, "user_annotation") &&
           strcmp(o->cat, "gpu_user_annotation") && strcmp(o->cat, "python_function");
}

static void print_rank(const ranks *R, size_t i, long top)
{
    const np_prof_rank *r = &R->r[i];
    np_cli_printf("rank %lld: %s\n", rank_id(R, i), r->path);
    np_cli_printf("  %s timeline, %lld events, %lld steps, span %.3f ms (busy %.3f ms)%s\n",
                  r->device ? "device" : "cpu", r->events, r->steps, r->span_us / 1e3, r->busy_us / 1e3,
                  r->last_step_dropped ? ", kernels of the last step left out" : "");
    np_cli_printf("  time by category:");
    for (int c = 0; c < NP_PROF_CLASS_COUNT; c++)
        if (r->class_us[c] > 0 || c == NP_PROF_IDLE || c == NP_PROF_COMPUTE)
            np_cli_printf(" %s %.3f ms (%.1f%%)", np_prof_class_name(c), r->class_us[c] / 1e3,
                          r->span_us > 0 ? 100 * r->class_us[c] / r->span_us : 0.0);
    np_cli_printf("\n");
    if (r->comm_us > 0)
        np_cli_printf("  communication %.3f ms, %.1f%% of it overlapped with compute\n", r->comm_us / 1e3,
                      100 * r->overlap_us / r->comm_us);
    np_cli_printf("  idle bubbles: %lld, %.3f ms", r->n_bubbles, r->bubble_us / 1e3);
    if (r->n_top)
        np_cli_printf(", longest %.3f ms at +%.3f ms", r->top[0].dur_us / 1e3, r->top[0].start_us / 1e3);
    np_cli_printf("\n");
    if (r->flops > 0) {
        double fs = r->flops / (r->span_us * 1e-6);
        np_cli_printf("  %.4g FLOP, %.4g FLOP/s over the span", r->flops, fs);
        if (R->peak > 0)
            np_cli_printf(", MFU %.2f%% of %.4g", 100 * fs / R->peak, R->peak);
        np_cli_printf("\n");
    }
    const np_prof_op **by = malloc((r->n_ops + 1) * sizeof *by);
    if (!by)
        return;
    size_t m = 0;
    for (size_t k = 0; k < r->n_ops; k++)
        if (is_operator(&r->ops[k]))
            by[m++] = &r->ops[k];
    size_t n = m < (size_t)top ? m : (size_t)top;
    if (!n) {
        free(by);
        return;
    }
    np_cli_printf("  top operators by total time:\n");
    for (size_t k = 0; k < n; k++) {
        const np_prof_op *o = by[k];
        np_cli_printf("    %12.3f ms %8lld x %10.3f us  %s [%s]\n", o->total_us / 1e3, o->count,
                      o->total_us / (double)o->count, o->name, o->cat);
    }
    qsort(by, m, sizeof *by, ptr_mean_cmp);
    np_cli_printf("  top operators by mean time:\n");
    for (size_t k = 0; k < n; k++)
        np_cli_printf("    %12.3f us %8lld x  %s [%s]\n", by[k]->total_us / (double)by[k]->count,
                      by[k]->count, by[k]->name, by[k]->cat);
    free(by);
}

/* ---- compare ------------------------------------------------------------------ */
static const char *side_of(const np_prof_pair *p)
{
    return p->a && p->b ? "both" : p->a ? "a_only" : "b_only";
}

/* A pair's times as csv cells: a_step_us .. share_b. */
static void csv_pair(FILE *f, const np_prof_pair *p)
{
    double v[] = {p->a_step_us, p->b_step_us, p->delta_us, p->ratio, p->share_a, p->share_b};
    csv_nums(f, sizeof v / sizeof v[0], v);
    fprintf(f, ",%s\n", side_of(p));
}

static void w_compare_csv(FILE *f, const void *data)
{
    const np_prof_compare *c = data;
    fputs("category,name,count_a,count_b,a_step_us,b_step_us,delta_us,ratio,share_a,share_b,side\n", f);
    for (size_t i = 0; i < c->n_pairs; i++) {
        const np_prof_pair *p = &c->pairs[i];
        const np_prof_op *o = p->a ? p->a : p->b;
        csv_str(f, o->cat);
        fputc(',', f);
        csv_str(f, o->name);
        fprintf(f, ",%lld,%lld", p->a ? p->a->count : 0, p->b ? p->b->count : 0);
        csv_pair(f, p);
    }
}

/* The calls paired in call order: one row per call index of an op; name_b
 * is B's row where the alignment paired another call index (an op called
 * once more or less earlier in one run); steps_a/b the steps each side's
 * call was made in (its time per step is the median over those). */
static void w_calls_csv(FILE *f, const void *data)
{
    const np_prof_compare *c = data;
    fputs("category,name,name_b,within,at_us,steps_a,steps_b,a_step_us,b_step_us,delta_us,ratio,share_a,"
          "share_b,side\n",
          f);
    for (size_t i = 0; i < c->n_calls; i++) {
        const np_prof_pair *p = &c->calls[i];
        const np_prof_op *o = p->a ? p->a : p->b;
        csv_str(f, o->cat);
        fputc(',', f);
        csv_str(f, o->name);
        fputc(',', f);
        csv_str(f, p->b ? p->b->name : "");
        fputc(',', f);
        csv_str(f, o->within ? o->within : "");
        csv_nums(f, 1, &o->at_us);
        fprintf(f, ",%lld,%lld", p->a ? p->a->count : 0, p->b ? p->b->count : 0);
        csv_pair(f, p);
    }
}

/* `, "a_step_us": .. , "side": ..}` of a pair. */
static void json_pair(FILE *f, const np_prof_pair *p)
{
    json_field(f, "a_step_us", p->a_step_us);
    json_field(f, "b_step_us", p->b_step_us);
    json_field(f, "delta_us", p->delta_us);
    json_field(f, "ratio", p->ratio);
    fprintf(f, ", \"side\": \"%s\"}", side_of(p));
}

static void w_compare_json(FILE *f, const void *data)
{
    const np_prof_compare *c = data;
    fputs("{", f);
    fputs("\"a_step_us\": ", f);
    json_num(f, c->a_step_us);
    json_field(f, "b_step_us", c->b_step_us);
    fputs(", \"ops\": [", f);
    for (size_t i = 0; i < c->n_pairs; i++) {
        const np_prof_pair *p = &c->pairs[i];
        const np_prof_op *o = p->a ? p->a : p->b;
        fputs(i ? ",\n {\"category\": " : "\n {\"category\": ", f);
        json_str(f, o->cat);
        fputs(", \"name\": ", f);
        json_str(f, o->name);
        fprintf(f, ", \"count_a\": %lld, \"count_b\": %lld", p->a ? p->a->count : 0,
                p->b ? p->b->count : 0);
        json_pair(f, p);
    }
    fputs("\n], \"calls\": [", f);
    size_t n = c->n_calls < 1000 ? c->n_calls : 1000; /* the most regressed; all in the csv */
    for (size_t i = 0; i < n; i++) {
        const np_prof_pair *p = &c->calls[i];
        const np_prof_op *o = p->a ? p->a : p->b;
        fputs(i ? ",\n {\"category\": " : "\n {\"category\": ", f);
        json_str(f, o->cat);
        fputs(", \"name\": ", f);
        json_str(f, o->name);
        fputs(", \"name_b\": ", f);
        json_str(f, p->b ? p->b->name : "");
        fputs(", \"within\": ", f);
        json_str(f, o->within ? o->within : "");
        json_field(f, "at_us", o->at_us);
        fprintf(f, ", \"steps_a\": %lld, \"steps_b\": %lld", p->a ? p->a->count : 0, p->b ? p->b->count : 0);
        json_pair(f, p);
    }
    fputs("\n]}\n", f);
}

/* calls: with the call rows (a compare pairs them; one trace's report
 * does not show them, and without them its memory does not grow with the
 * trace). */
static int analyze_one(np_prof_rank *r, const char *path, int calls)
{
    np_error err = {0};
    if ((calls ? np_prof_analyze : np_prof_analyze_ops)(r, path, &err)) {
        np_cli_report(&err);
        return -1;
    }
    return 0;
}

static int cmd_compare(int argc, char **argv, const pf_args *a, int formats)
{
    if (argc != 2) {
        np_cli_error("profile compare: expected two traces A B (see 'nprobe profile --help')");
        return NP_EXIT_USAGE;
    }
    np_prof_rank ra, rb;
    if (analyze_one(&ra, argv[0], 1))
        return NP_EXIT_USAGE;
    if (analyze_one(&rb, argv[1], 1)) {
        np_prof_rank_free(&ra);
        return NP_EXIT_USAGE;
    }
    np_prof_compare c;
    np_error err = {0};
    int rc = NP_EXIT_OK;
    if (np_prof_compare_ranks(&c, &ra, &rb, &err)) {
        np_cli_report(&err);
        rc = NP_EXIT_USAGE;
        goto done;
    }
    np_cli_printf("A: %s\nB: %s\n", argv[0], argv[1]);
    np_cli_printf("step time: A %.3f ms, B %.3f ms, gap %+.3f ms (B/A %.3f)%s\n", c.a_step_us / 1e3,
                  c.b_step_us / 1e3, (c.b_step_us - c.a_step_us) / 1e3,
                  c.a_step_us > 0 ? c.b_step_us / c.a_step_us : NAN,
                  ra.self_ok && rb.self_ok ? "" : " (total times: a trace's events are out of order)");
    double explained = 0;
    for (size_t i = 0; i < c.n_pairs; i++)
        explained += c.pairs[i].delta_us;
    np_cli_printf("gap explained: operators %+.3f ms, the rest (idle, launch gaps) %+.3f ms%s\n",
                  explained / 1e3, (c.b_step_us - c.a_step_us - explained) / 1e3,
                  c.robust ? "; times are medians over the steps" : "");
    np_cli_printf("%12s %12s %12s %8s %7s %7s  %s\n", "A us/step", "B us/step", "delta us", "B/A", "A %step",
                  "B %step", "operator");
    size_t n = c.n_pairs < (size_t)a->top ? c.n_pairs : (size_t)a->top;
    for (size_t i = 0; i < n; i++) {
        const np_prof_pair *p = &c.pairs[i];
        const np_prof_op *o = p->a ? p->a : p->b;
        np_cli_printf("%12.3f %12.3f %+12.3f %8.3f %6.2f%% %6.2f%%  %s [%s]%s\n", p->a_step_us, p->b_step_us,
                      p->delta_us, p->ratio, 100 * p->share_a, 100 * p->share_b, o->name, o->cat,
                      p->a && p->b ? "" : p->a ? " (A only)" : " (B only)");
    }
    size_t only_a = 0, only_b = 0;
    for (size_t i = 0; i < c.n_pairs; i++)
        only_a += !c.pairs[i].b, only_b += !c.pairs[i].a;
    np_cli_printf("operators: %zu paired, %zu in A only, %zu in B only\n", c.n_pairs - only_a - only_b,
                  only_a, only_b);
    if (c.n_calls) {
        np_cli_printf("calls paired in call order (NAME #k: the op's k-th call in each step, the "
                      "steps aligned on the most common one; self times, medians over the steps "
                      "a call was made in):\n");
        np_cli_printf("%12s %12s %12s %8s %10s  %s\n", "A us/step", "B us/step", "delta us", "B/A",
                      "at us", "call (within)");
        n = c.n_calls < (size_t)a->top ? c.n_calls : (size_t)a->top;
        for (size_t i = 0; i < n; i++) {
            const np_prof_pair *p = &c.calls[i];
            const np_prof_op *o = p->a ? p->a : p->b;
            const char *kb = p->a && p->b && strcmp(p->a->name, p->b->name) ? strrchr(p->b->name, '#') : NULL;
            char some[96] = "";
            long long sa = p->a ? p->a->count : 0, sb = p->b ? p->b->count : 0;
            if ((p->a && sa < ra.steps) || (p->b && sb < rb.steps))
                snprintf(some, sizeof some, " (in %lld/%lld steps of A, %lld/%lld of B)", sa, ra.steps, sb,
                         rb.steps);
            np_cli_printf("%12.3f %12.3f %+12.3f %8.3f %10.1f  %s%s%s%s [%s]%s%s%s%s\n", p->a_step_us,
                          p->b_step_us, p->delta_us, p->ratio, o->at_us, o->name, kb ? " (B " : "",
                          kb ? kb : "", kb ? ")" : "", o->cat, o->within ? " within " : "",
                          o->within ? o->within : "", p->a && p->b ? "" : p->a ? " (A only)" : " (B only)",
                          some);
        }
    } else if (ra.calls_ok != rb.calls_ok) {
        np_cli_printf("calls not paired in call order: %s has no call rows (no op called twice in a "
                      "step, a thread out of order, or over %d calls)\n", ra.calls_ok ? "B" : "A",
                      NP_PROF_MAX_CALLS);
    }
    if (a->out) {
        if ((formats & 1) && write_report(a->out, "profile_compare.csv", w_compare_csv, &c))
            rc = NP_EXIT_USAGE;
        if ((formats & 2) && write_report(a->out, "profile_compare.json", w_compare_json, &c))
            rc = NP_EXIT_USAGE;
        if ((formats & 1) && c.n_calls &&
            write_report(a->out, "profile_compare_calls.csv", w_calls_csv, &c))
            rc = NP_EXIT_USAGE;
        if ((formats & 8) && write_xlsx(a->out, "profile_compare.xlsx", NULL, 0, &c))
            rc = NP_EXIT_USAGE;
    }
    np_prof_compare_free(&c);
done:
    np_prof_rank_free(&ra);
    np_prof_rank_free(&rb);
    return rc;
}

/* What makes the slowest rank slow: its ops against the fastest rank's,
 * the most regressed first (the compare's rows). */
static void explain_slow(const ranks *R, size_t slow)
{
    size_t fast = 0;
    for (size_t i = 1; i < R->n; i++)
        if (R->r[i].span_us < R->r[fast].span_us)
            fast = i;
    np_prof_compare c;
    if (fast == slow || np_prof_compare_ranks(&c, &R->r[fast], &R->r[slow], NULL))
        return;
    np_cli_printf("  against the fastest rank %lld (span %.3f ms), most regressed:\n", rank_id(R, fast),
                  R->r[fast].span_us / 1e3);
    for (size_t i = 0; i < c.n_pairs && i < 3 && c.pairs[i].delta_us > 0; i++) {
        const np_prof_pair *p = &c.pairs[i];
        const np_prof_op *o = p->b ? p->b : p->a;
        np_cli_printf("    %+12.3f us/step  %s [%s]%s\n", p->delta_us, o->name, o->cat,
                      p->a ? "" : " (slowest rank only)");
    }
    np_prof_compare_free(&c);
}

int np_cmd_profile(int argc, char **argv)
{
    pf_args a = {.top = 10};
    char **pos = calloc((size_t)argc + 1, sizeof *pos);
    if (!pos) {
        np_cli_error("out of memory");
        return NP_EXIT_USAGE;
    }
    a.pos = (np_cli_list){(const char **)pos, 0, argc};
    int rc = np_cli_opts_parse(pf_opts, N_PF_OPTS, &a, "profile", help_before, help_after, argc, argv);
    int np = a.pos.n;
    int formats = 0;
    paths P = {0};
    ranks R = {0};
    if (rc) {
        rc -= 1;
        goto done;
    }
    if ((formats = formats_of(a.format)) < 0) {
        rc = NP_EXIT_USAGE;
        goto done;
    }
    if (a.out && np_mkdirs(a.out) != 0) {
        np_cli_error("--out %s: cannot create: %s", a.out, strerror(errno));
        rc = NP_EXIT_USAGE;
        goto done;
    }
    np_cli_clean_on_signal();
    if (np >= 1 && !strcmp(pos[0], "compare")) {
        rc = cmd_compare(np - 1, pos + 1, &a, formats);
        goto done;
    }
    if (np == 0) {
        np_cli_error("profile: expected a trace (see 'nprobe profile --help')");
        rc = NP_EXIT_USAGE;
        goto done;
    }
    for (int i = 0; i < np; i++)
        if (expand(&P, pos[i])) {
            rc = NP_EXIT_USAGE;
            goto done;
        }
    R.r = calloc(P.n, sizeof *R.r);
    R.peak = a.peak_flops;
    if (!R.r) {
        np_cli_error("out of memory");
        rc = NP_EXIT_USAGE;
        goto done;
    }
    for (size_t i = 0; i < P.n; i++) {
        if (analyze_one(&R.r[i], P.v[i], 0)) {
            rc = NP_EXIT_USAGE;
            goto done;
        }
        R.n++;
    }
    for (size_t i = 0; i < R.n; i++)
        print_rank(&R, i, a.top);
    if (R.n > 1) {
        size_t slow = 0;
        for (size_t i = 1; i < R.n; i++)
            if (R.r[i].span_us > R.r[slow].span_us)
                slow = i;
        np_cli_printf("slowest rank: %lld (span %.3f ms)\n", rank_id(&R, slow), R.r[slow].span_us / 1e3);
        explain_slow(&R, slow);
    }
    if (a.out) {
        if ((formats & 1) && (write_report(a.out, "profile_summary.csv", w_summary_csv, &R) ||
                              write_report(a.out, "profile_ops.csv", w_ops_csv, &R)))
            rc = NP_EXIT_USAGE;
        if ((formats & 2) && write_report(a.out, "profile.json", w_json, &R))
            rc = NP_EXIT_USAGE;
        np_cli_profile_page pg = {R.r, R.n, a.top};
        if ((formats & 4) && write_report(a.out, "profile.html", np_cli_profile_html, &pg))
            rc = NP_EXIT_USAGE;
        if ((formats & 8) && write_xlsx(a.out, "profile.xlsx", R.r, R.n, NULL))
            rc = NP_EXIT_USAGE;
    }
done:
    for (size_t i = 0; i < R.n; i++)
        np_prof_rank_free(&R.r[i]);
    free(R.r);
    paths_free(&P);
    free(pos);
    return rc;
}
