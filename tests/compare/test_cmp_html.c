/* tests/compare/test_cmp_html.c - the HTML report (np_cmp_write_html) on
 * crafted dumps whose culprit is known by construction, opened in headless
 * Chromium by check_html.py (NP_PYTHON):
 *   1. three steps, step 0 agrees, steps 1 and 2 depart at one call; module,
 *      call and leaf names carry HTML and script (hostile input): escaped in
 *      the file, inert in the DOM; the tree holds the 5 calls plus the
 *      module named but not dumped, the culprit on an open path; the steps
 *      chart marks step 1; no console message; a screenshot is not blank.
 *   2. one step of 600 top-level calls with the culprit at call 400: the
 *      tree shows them in groups, the group that holds the culprit open.
 * Skips (77) without NP_PYTHON or chromium. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "dumpwriter.h"
#include "nprobe/compare.h"

#define N 64
#define MOD "Module.blk<script>alert(1)<\\script>.Blk.forward.0"
#define A1 "Functional.lin&amp;\"'<i>.0.forward"
#define A2 "Functional.bad\"><img src=x onerror=alert(2)>.0.forward"
#define A3 "Functional.after.0.forward"
#define GHOST "Module.ghost<b>.G.forward.0"
#define LOSS "Functional.cross_entropy.0.forward"

/* x -> A1 (y = 2x) -> A2 (z = y + 1; the cmp side departs from step 1 on)
 * -> A3 (w = z / 2, propagates) -> loss (mean of w). */
static void write_story(const char *path, int step, int cmp)
{
    tw *w = tw_open(path, "tensor", "fp32", step, 0);
    CHECK(w != NULL);
    if (!w)
        return;
    const int64_t s[1] = {N}, one[1] = {1};
    float x[N], y[N], z[N], v[N], loss[1] = {0};
    for (int i = 0; i < N; i++) {
        x[i] = (float)(i % 9) - 4.0f + 0.5f * (float)step;
        y[i] = 2 * x[i];
        z[i] = y[i] + 1 + (cmp && step > 0 ? 0.5f * (float)(i % 3) : 0);
        v[i] = z[i] / 2;
        loss[0] += v[i] / N;
    }
    int m = tw_call(w, MOD, "module", "", "model.c:1");
    tw_tensor(w, m, MOD, "input", "0", "float32", 1, s, x);
    int a1 = tw_call(w, A1, "api", MOD, "model.c:2");
    tw_tensor(w, a1, A1, "input", "0", "float32", 1, s, x);
    tw_tensor(w, a1, A1, "output", "0", "float32", 1, s, y);
    int a2 = tw_call(w, A2, "api", MOD, "model.c:3 <script>alert(3)</script> \"q\" &");
    tw_tensor(w, a2, A2, "input", "0", "float32", 1, s, y);
    tw_tensor(w, a2, A2, "output", "0", "float32", 1, s, z);
    tw_tensor(w, m, MOD, "output", "0", "float32", 1, s, z);
    int a3 = tw_call(w, A3, "api", GHOST, "model.c:4");
    tw_tensor(w, a3, A3, "input", "0", "float32", 1, s, z);
    tw_tensor(w, a3, A3, "output", "0", "float32", 1, s, v);
    int l = tw_call(w, LOSS, "api", "", "model.c:5");
    tw_tensor(w, l, LOSS, "input", "0", "float32", 1, s, v);
    tw_tensor(w, l, LOSS, "output", "0", "float32", 0, one, loss);
    CHECK_EQ_INT(tw_close(w, 1), 0);
}

/* n top-level calls in a chain; the cmp side departs at call `bad`. */
static void write_flat(const char *path, int n, int bad, int cmp)
{
    tw *w = tw_open(path, "statistics", "fp32", 0, 0);
    CHECK(w != NULL);
    if (!w)
        return;
    const int64_t s[1] = {8};
    float in[8], out[8];
    for (int i = 0; i < 8; i++)
        in[i] = (float)i + 1;
    for (int k = 0; k < n; k++) {
        char name[64];
        snprintf(name, sizeof name, "Functional.op.%d.forward", k);
        for (int i = 0; i < 8; i++)
            out[i] = in[i] * 1.5f + (cmp && k >= bad ? 3.0f : 0);
        int c = tw_call(w, name, "api", "", "flat.c:1");
        tw_tensor(w, c, name, "input", "0", "float32", 1, s, in);
        tw_tensor(w, c, name, "output", "0", "float32", 1, s, out);
        memcpy(in, out, sizeof in);
        for (int i = 0; i < 8; i++)
            in[i] = (float)((i + k) % 5) + 1;  /* the next call's input: equal on both sides */
    }
    CHECK_EQ_INT(tw_close(w, 1), 0);
}

/* Run the comparison of two roots and write its page; 0 ok. */
static int compare_to_html(const char *b, const char *c, const char *html, np_cmp_result **out)
{
    np_cmp_options o;
    np_cmp_options_init(&o);
    np_error err = {0};
    CHECK_EQ_INT(np_cmp_run(out, b, c, &o, &err), NP_OK);
    if (!*out)
        return -1;
    const char *reports[3] = {"step0.xlsx", "step1 <&> report.xlsx", "step2.xlsx"};
    CHECK_EQ_INT(np_cmp_write_html(*out, (*out)->n_pairs == 3 ? reports : NULL, html, &err), NP_OK);
    return 0;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n)
        n = 0;
    if (s)
        s[n] = '\0';
    fclose(f);
    return s;
}

static int run_check(const char *py, const char *html, const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' %s", py, NP_CHECK_HTML_PY, html, args);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void story(const char *dir, const char *py)
{
    char p[600], html[600];
    for (int step = 0; step < 3; step++)
        for (int cmp = 0; cmp < 2; cmp++) {
            snprintf(p, sizeof p, "%s/%s/step%d/rank0", dir, cmp ? "c" : "b", step);
            CHECK_EQ_INT(tw_mkdirs(p), 0);
            snprintf(p, sizeof p, "%s/%s/step%d/rank0/dump.h5", dir, cmp ? "c" : "b", step);
            write_story(p, step, cmp);
        }
    char b[600], c[600];
    snprintf(b, sizeof b, "%s/b", dir);
    snprintf(c, sizeof c, "%s/c", dir);
    snprintf(html, sizeof html, "%s/story.html", dir);
    np_cmp_result *r = NULL;
    if (compare_to_html(b, c, html, &r) != 0)
        return;
    CHECK_EQ_INT((int)r->n_pairs, 3);
    CHECK(r->pairs[0].n_culprits == 0 && r->pairs[1].n_culprits == 1);
    if (r->pairs[1].n_culprits)
        CHECK_STREQ(r->pairs[1].calls[r->pairs[1].culprits[0]].name, A2);
    np_cmp_result_free(r);
    char *s = slurp(html);
    CHECK(s != NULL);
    if (s) {
        CHECK(strstr(s, "<script>alert") == NULL);
        CHECK(strstr(s, "<img src=x") == NULL);
        CHECK(strstr(s, "<i>.0.forward") == NULL);
        CHECK_CONTAINS(s, "Module.blk&lt;script&gt;alert(1)&lt;\\script&gt;.Blk.forward.0");
        CHECK_CONTAINS(s, "model.c:3 &lt;script&gt;alert(3)&lt;/script&gt; &quot;q&quot; &amp;");
        CHECK_CONTAINS(s, "Functional.bad&quot;&gt;&lt;img src=x onerror=alert(2)&gt;.0.forward");
        CHECK_CONTAINS(s, "Functional.lin&amp;amp;&quot;&#39;&lt;i&gt;.0.forward");
        CHECK_CONTAINS(s, "step1 &lt;&amp;&gt; report.xlsx");
        CHECK_CONTAINS(s, "first failing step 1");
        CHECK_CONTAINS(s, "<h3>Failing step/rank pairs <small>2 of 3</small></h3>");
    }
    free(s);
    char args[1024];
    snprintf(args, sizeof args, "--culprit '%s' --calls 5 --step 1 --shot",
             "Functional.bad\"><img src=x onerror=alert(2)>.0.forward");
    int rc = run_check(py, html, args);
    if (rc == 77)
        CHECK_SKIP("chromium is not installed");
    CHECK_EQ_INT(rc, 0);
}

static void flat(const char *dir, const char *py)
{
    char b[600], c[600], html[600];
    snprintf(b, sizeof b, "%s/flat_b.h5", dir);
    snprintf(c, sizeof c, "%s/flat_c.h5", dir);
    snprintf(html, sizeof html, "%s/flat.html", dir);
    write_flat(b, 600, 400, 0);
    write_flat(c, 600, 400, 1);
    np_cmp_result *r = NULL;
    if (compare_to_html(b, c, html, &r) != 0)
        return;
    CHECK(r->pairs[0].n_culprits >= 1);
    if (r->pairs[0].n_culprits)
        CHECK_STREQ(r->pairs[0].calls[r->pairs[0].culprits[0]].name, "Functional.op.400.forward");
    np_cmp_result_free(r);
    char *s = slurp(html);
    CHECK(s && strstr(s, "<details class='g v2' open><summary>251&#8211;500 of 600"));
    CHECK(s && strstr(s, "<details class='g v0'><summary>1&#8211;250 of 600"));
    free(s);
    CHECK_EQ_INT(run_check(py, html, "--culprit Functional.op.400.forward --calls 600"), 0);
}

int main(void)
{
    const char *py = getenv("NP_PYTHON");
    if (!py || access(py, X_OK) != 0)
        CHECK_SKIP("NP_PYTHON not set");
    char dir[] = "/tmp/np_cmp_html_XXXXXX";
    if (!mkdtemp(dir))
        CHECK_SKIP("no temp dir");
    story(dir, py);
    flat(dir, py);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (check_failures_ == 0 && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return check_report();
}
