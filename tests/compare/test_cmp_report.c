/* tests/compare/test_cmp_report.c - write the xlsx, csv and json reports of
 * a crafted comparison (error, warning and pass rows, one culprit) and check
 * them with openpyxl (check_report.py, run with NP_PYTHON): sheets, headers
 * in msprobe's order, fills, frozen header, autofilter, chart, row split,
 * and the same numbers in all three formats. Skips (77) without openpyxl. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "dumpwriter.h"
#include "nprobe/compare.h"

#define N 64

static void write_side(const char *path, int cmp)
{
    tw *w = tw_open(path, "tensor", "fp32", 0, 0);
    CHECK(w != NULL);
    if (!w)
        return;
    const int64_t s[2] = {8, 8};
    float x[N], y[N], z[N];
    for (int i = 0; i < N; i++) {
        x[i] = (float)(i % 7) - 3.0f + 0.25f;
        y[i] = x[i] > 0 ? x[i] : 0;
        z[i] = y[i] * 2;
        if (cmp) {
            y[i] *= (float)(1 + 0.01 * (i % 2 ? 1 : -1));   /* relu breaks */
            z[i] *= (float)(1 + 0.01 * (i % 2 ? 1 : -1));
        }
    }
    float xw[N];
    for (int i = 0; i < N; i++)
        xw[i] = x[i] * (float)(cmp ? 1 + 2e-6 * (i % 2 ? 1 : -1) : 1); /* a warning */
    int m = tw_call(w, "Module.net.Net.forward.0", "module", "", "model.c:5");
    tw_tensor(w, m, "Module.net.Net.forward.0", "input", "0", "float32", 2, s, x);
    int l = tw_call(w, "Functional.linear.0.forward", "api", "Module.net.Net.forward.0", "model.c:9");
    tw_tensor(w, l, "Functional.linear.0.forward", "input", "0", "float32", 2, s, x);
    tw_tensor(w, l, "Functional.linear.0.forward", "output", "0", "float32", 2, s, xw);
    int r = tw_call(w, "Functional.relu.0.forward", "api", "Module.net.Net.forward.0", "model.c:10");
    tw_tensor(w, r, "Functional.relu.0.forward", "input", "0", "float32", 2, s, xw);
    tw_tensor(w, r, "Functional.relu.0.forward", "output", "0", "float32", 2, s, y);
    int q = tw_call(w, "Functional.mul.0.forward", "api", "Module.net.Net.forward.0", "model.c:11");
    tw_tensor(w, q, "Functional.mul.0.forward", "input", "0", "float32", 2, s, y);
    tw_scalar(w, q, "Functional.mul.0.forward", "other", 2.0);
    tw_tensor(w, q, "Functional.mul.0.forward", "output", "0", "float32", 2, s, z);
    tw_tensor(w, m, "Module.net.Net.forward.0", "output", "0", "float32", 2, s, z);
    const int64_t one[1] = {1};
    float e[1] = {5};
    if (!cmp) /* a bench-only leaf of a call paired on both sides */
        tw_tensor(w, q, "Functional.mul.0.forward", "output", "extra", "float32", 1, one, e);
    CHECK_EQ_INT(tw_close(w, 1), 0);
}

int main(void)
{
    const char *py = getenv("NP_PYTHON");
    if (!py || access(py, X_OK) != 0)
        CHECK_SKIP("NP_PYTHON not set");
    char dir[] = "/tmp/np_cmp_report_XXXXXX";
    if (!mkdtemp(dir))
        CHECK_SKIP("no temp dir");
    char b[300], c[300], x[300], cs[300], js[300], sp[300];
    snprintf(b, sizeof b, "%s/b.h5", dir);
    snprintf(c, sizeof c, "%s/c.h5", dir);
    write_side(b, 0);
    write_side(c, 1);
    np_cmp_options o;
    np_cmp_options_init(&o);
    np_cmp_result *r = NULL;
    np_error err = {0};
    CHECK_EQ_INT(np_cmp_run(&r, b, c, &o, &err), NP_OK);
    if (!r)
        return check_report();
    CHECK_EQ_INT(r->n_pairs, 1);
    const np_cmp_pair *p = &r->pairs[0];
    CHECK(p->n_culprits == 2 && !strcmp(p->calls[p->culprits[0]].name, "Functional.relu.0.forward"));
    /* the bench-only output of mul, a call paired on both sides, is
     * evidence: an error that makes mul a culprit too (issue 16 rule 1) */
    CHECK(p->n_culprits == 2 && !strcmp(p->calls[p->culprits[1]].name, "Functional.mul.0.forward"));
    char base[256];
    np_cmp_report_basename(base, sizeof base, p, 0);
    CHECK(strncmp(base, "compare_result_rank0_step0_", 27) == 0 && strlen(base) == 27 + 14);
    snprintf(x, sizeof x, "%s/r.xlsx", dir);
    snprintf(cs, sizeof cs, "%s/r.csv", dir);
    snprintf(js, sizeof js, "%s/r.json", dir);
    snprintf(sp, sizeof sp, "%s/split.xlsx", dir);
    CHECK_EQ_INT(np_cmp_write_xlsx(r, p, x, &err), NP_OK);
    CHECK_EQ_INT(np_cmp_write_csv(p, cs, &err), NP_OK);
    CHECK_EQ_INT(np_cmp_write_json(r, p, js, &err), NP_OK);
    r->opts.rows_per_sheet = 4;
    CHECK_EQ_INT(np_cmp_write_xlsx(r, p, sp, &err), NP_OK);
    np_cmp_result_free(r);
    /* the same with --rtol 0.001: the json records the tolerances in effect */
    char jo[300];
    snprintf(jo, sizeof jo, "%s/over.json", dir);
    o.rtol = 1e-3;
    r = NULL;
    CHECK_EQ_INT(np_cmp_run(&r, b, c, &o, &err), NP_OK);
    if (r && r->n_pairs == 1)
        CHECK_EQ_INT(np_cmp_write_json(r, &r->pairs[0], jo, &err), NP_OK);
    np_cmp_result_free(r);
    pid_t pid = fork();
    if (pid == 0) {
        execl(py, py, NP_CHECK_REPORT_PY, x, cs, js, sp, jo, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    if (code == 77)
        CHECK_SKIP("openpyxl is not installed");
    CHECK_EQ_INT(code, 0);
    if (getenv("NP_KEEP"))
        return check_report();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (check_failures_ == 0 && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return check_report();
}
