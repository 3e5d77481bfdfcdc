/* cli/cmd_show.c - `nprobe show DUMP NAME [-n COUNT]`: one leaf's row
 * (dtype, shape, statistics, counts, crc32) and, when the payload is
 * stored, its first values - in every dump file under DUMP that holds it.
 * Works on incomplete steps as far as they were flushed. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "opts.h"
#include "nprobe/dumpio.h"

typedef struct show_args {
    const char *path, *name;
    long count;
} show_args;

#define F(f) offsetof(show_args, f)
/* `nprobe show`'s arguments: parsing and --help from this one table (cli/opts.h). */
static const np_cli_opt show_opts[] = {
    {NULL, "DUMP", NULL, NULL, NP_OPT_POS, F(path), 0, 0, NULL, 0, NULL},
    {NULL, "NAME", NULL, NULL, NP_OPT_POS, F(name), 0, 0, NULL, 0, NULL},
    {NULL, "-n|--count", "COUNT", "how many values to print (default 16)", NP_OPT_LONG, F(count), 0,
     1000000, NULL, 0, NULL},
    {NULL, "--help", NULL, "show this help", NP_OPT_HELP, 0, 0, 0, NULL, 0, NULL},
};
#undef F
#define N_SHOW_OPTS ((int)(sizeof show_opts / sizeof show_opts[0]))

static const char show_before[] =
    "usage: nprobe show DUMP NAME [-n COUNT]\n"
    "\n"
    "Print the tensor leaf NAME (e.g. Functional.linear.0.forward.input.0):\n"
    "its dtype, shape, max, min, mean, norm, NaN/Inf counts and crc32, then its\n"
    "first COUNT values when the dump holds its payload (tensor or\n"
    "overflow_check task). DUMP is a dump.h5, a rank or step directory or a\n"
    "dump root; every file holding NAME is shown.\n"
    "\n"
    "options:\n";
static const char show_after[] =
    "\n"
    "exit code: 0, or 2 when NAME is in none of the files.\n";

/* The leaf's placement (format version 2): the mesh, the placements, the
 * logical shape and the shard's offset, stage and micro-batch; a row outside
 * the format is a dump defect naming the field. */
static void show_placement(np_dumpio *d, const np_dumpio_info *in, const np_entry_rec *e)
{
    np_place_rec *p = NULL;
    size_t np = 0;
    np_error err;
    np_error_clear(&err);
    if (np_dumpio_read_placements(&p, &np, d, &err)) {
        np_cli_printf("  DUMP DEFECT: %s\n", err.text);
        return;
    }
    for (size_t i = 0; i < np; i++) {
        if (strcmp(p[i].name, e->name) != 0)
            continue;
        char why[600];
        if (np_dumpio_place_problem(in, &p[i], e, why, sizeof why)) {
            np_cli_printf("  DUMP DEFECT: %s\n", why);
            break;
        }
        np_cli_printf("  mesh      (");
        for (int k = 0; k < in->mesh_ndim; k++)
            np_cli_printf("%s%s=%lld", k ? ", " : "", in->mesh_dims[k],
                          (long long)in->mesh_shape[k]);
        np_cli_printf(") at (");
        for (int k = 0; k < in->mesh_ndim; k++)
            np_cli_printf("%s%lld", k ? ", " : "", (long long)in->mesh_coords[k]);
        np_cli_printf(")\n  placements [%s]\n  global    (", p[i].placements);
        for (int k = 0; k < p[i].global_ndim; k++)
            np_cli_printf("%s%lld", k ? ", " : "", (long long)p[i].global_shape[k]);
        np_cli_printf(") offset (");
        for (int k = 0; k < p[i].global_ndim; k++)
            np_cli_printf("%s%lld", k ? ", " : "", (long long)p[i].offset[k]);
        np_cli_printf(")\n");
        if (p[i].stage >= 0 || p[i].micro_batch >= 0)
            np_cli_printf("  stage     %d  micro-batch %d\n", p[i].stage, p[i].micro_batch);
        break;
    }
    free(p);
}

static int show_one(np_dumpio *d, const np_entry_rec *e, long count)
{
    /* names are user data: no terminal escapes pass through */
    char nm[4 * NP_FMT_NAME_LEN], cl[4 * NP_FMT_NAME_LEN], ro[4 * NP_FMT_ROLE_LEN],
        dt[4 * NP_FMT_DTYPE_LEN];
    printf("  name      %s\n  call      %s\n  role      %s\n  dtype     %s\n",
           np_term_safe(nm, sizeof nm, e->name), np_term_safe(cl, sizeof cl, e->call),
           np_term_safe(ro, sizeof ro, e->role), np_term_safe(dt, sizeof dt, e->dtype));
    printf("  shape     (");
    for (int i = 0; i < e->ndim && i < NP_FMT_MAX_DIMS; i++)
        printf("%s%lld", i ? ", " : "", (long long)e->shape[i]);
    printf(")\n  numel     %lld\n", (long long)e->numel);
    np_stats st = np_fmt_entry_stats(e);
    printf("  max       %.17g\n  min       %.17g\n  mean      %.17g\n  norm      %.17g\n", st.max,
           st.min, st.mean, st.norm);
    printf("  nan       %lld\n  +inf      %lld\n  -inf      %lld\n", (long long)st.nan_count,
           (long long)st.posinf_count, (long long)st.neginf_count);
    printf("  crc32     %08x\n  requires_grad %d\n", e->crc32, e->requires_grad);
    if (!e->has_data) {
        printf("  values    (not stored: task without payloads)\n");
        return 0;
    }
    double *v = malloc((size_t)count * sizeof *v);
    size_t got = 0;
    int64_t numel = e->numel;
    np_error err;
    np_error_clear(&err);
    if (!v || np_dumpio_read_values(v, (size_t)count, &got, d, e->name, numel, &err)) {
        if (v)
            np_cli_report(&err);
        free(v);
        return 1;
    }
    printf("  values    first %zu of %lld:", got, (long long)numel);
    for (size_t i = 0; i < got; i++)
        printf("%s%.9g", i % 8 == 0 ? "\n    " : " ", v[i]);
    printf("\n");
    free(v);
    return 0;
}

int np_cmd_show(int argc, char **argv)
{
    show_args a = {NULL, NULL, 16};
    int rc = np_cli_opts_parse(show_opts, N_SHOW_OPTS, &a, "show", show_before, show_after, argc, argv);
    if (rc)
        return rc - 1;
    const char *path = a.path, *name = a.name;
    long count = a.count;
    if (!path || !name) {
        np_cli_opts_help(stderr, show_before, show_opts, N_SHOW_OPTS, show_after);
        np_cli_error("show: missing arguments (see 'nprobe show --help')");
        return NP_EXIT_USAGE;
    }
    np_dumpio_ref *refs = NULL;
    size_t n = 0;
    np_dumpio_checker *chk = NULL;
    if ((rc = np_cli_find_checked(&refs, &n, &chk, path)) != 0)
        return rc;
    np_error err;
    int found = 0, failed = 0;
    char near[NP_FMT_NAME_LEN] = "";
    size_t near_d = (size_t)-1;
    for (size_t i = 0; i < n; i++) {
        np_dumpio *d = NULL;
        np_error_clear(&err);
        if (refs[i].state >= NP_DUMPIO_TEMP)
            continue;
        if (np_dumpio_checker_wait(chk, i, &err) ||
            np_dumpio_open_ref(&d, &refs[i], NP_DUMPIO_CHECKED, &err)) {
            np_cli_report(&err); /* a file skipped is said, not silent */
            continue;
        }
        const np_dumpio_info *in = np_dumpio_get_info(d);
        np_entry_rec *e = NULL;
        size_t ne = 0;
        np_dumpio_read_entries(&e, &ne, d, NULL);
        for (size_t k = 0; k < ne; k++) {
            if (strcmp(e[k].name, name) == 0) {
                int complete = in->complete && refs[i].state == NP_DUMPIO_COMPLETE;
                np_cli_printf("step %lld rank %lld: %s%s\n", (long long)in->step,
                              (long long)in->rank, refs[i].path,
                              complete ? "" : "  (INCOMPLETE step: the run stopped during it)");
                char why[400];
                if (in->problems[0])
                    np_cli_printf("  DUMP DEFECT: root attribute %s\n", in->problems);
                if (np_dumpio_entry_problem(in, &e[k], why, sizeof why))
                    np_cli_printf("  DUMP DEFECT: this row contradicts itself: %s\n", why);
                show_placement(d, in, &e[k]);
                failed |= show_one(d, &e[k], count);
                found++;
                break;
            }
            if (!found && strstr(e[k].name, name)) {
                size_t dd = strlen(e[k].name) - strlen(name);
                if (dd < near_d) {
                    near_d = dd;
                    snprintf(near, sizeof near, "%s", e[k].name);
                }
            } else if (!found && near_d == (size_t)-1 && ne) {
                const char *one[1] = {e[k].name};
                if (np_closest_word(name, one, 1) == 0)
                    snprintf(near, sizeof near, "%s", e[k].name);
            }
        }
        free(e);
        np_dumpio_close(d);
    }
    np_dumpio_checker_free(chk);
    free(refs);
    if (!found) {
        char nr[4 * NP_FMT_NAME_LEN];
        if (near[0])
            np_cli_error("%s: no tensor named '%s'; did you mean '%s'?", path, name,
                         np_term_safe(nr, sizeof nr, near));
        else
            np_cli_error("%s: no tensor named '%s' (see 'nprobe ls %s')", path, name, path);
        return NP_EXIT_USAGE;
    }
    return failed ? NP_EXIT_USAGE : NP_EXIT_OK;
}
