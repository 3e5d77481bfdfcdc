/* tests/configcheck/test_cc_compare.c - diffs of packs built with controlled
 * inputs: a different seed fails exactly random and weights; different
 * OMP/OpenBLAS thread counts (two `nprobe config_check pack` processes)
 * exactly env and libs; one changed data file exactly dataset; identical
 * packs pass everything. With the argument "xlsx": the report read back
 * with openpyxl (exit 77 when NP_PYTHON lacks it). With "train": the same
 * four cases with packs written by real `nprobe train --config-check-out`
 * runs. */
#include "check.h"
#include "cc_util.h"
#include "nprobe/configcheck.h"

static float W0[6] = {0.5f, -1.0f, 0.25f, 2.0f, -0.125f, 3.0f};

/* A run: seed s, weights W0 scaled by the seed, one data file. */
static void pack_run(const char *zip, const char *seed, const char *data_file)
{
    float w[6];
    for (int i = 0; i < 6; i++)
        w[i] = W0[i] * (float)atoi(seed);
    np_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = NP_FLOAT32, t.ndim = 2, t.shape[0] = 2, t.shape[1] = 3, t.numel = 6, t.data = w;
    np_named_tensor nt[1] = {{"h.0.mlp.c_fc.weight", &t}};
    np_kv rnd[2] = {{"seed", seed}, {"rng.init.draws", "6"}};
    np_kv hp[2] = {{"lr", "0.001"}, {"batch", "4"}};
    const char *batches[1] = {"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"};
    const char *files[1] = {data_file};
    np_run_info run = {hp, 2, rnd, 2, nt, 1, batches, 1, files, 1, NULL, 0};
    np_cc_pack_opts o;
    memset(&o, 0, sizeof o);
    o.python = "";
    np_error err;
    np_error_clear(&err);
    np_status st = np_cc_pack_ex(zip, &o, &run, &err);
    CHECK_EQ_INT(st, NP_OK);
    if (st)
        fprintf(stderr, "pack %s: %s\n", zip, err.text);
}

/* Compare and check every item's pass_check against `want` (level per item). */
static void expect(const char *a, const char *b, const np_cc_level want[NP_CC_ITEM_COUNT],
                   const char *what)
{
    np_cc_result *r = NULL;
    np_error err;
    np_error_clear(&err);
    CHECK_EQ_INT(np_cc_compare(&r, a, b, NULL, &err), NP_OK);
    if (!r) {
        fprintf(stderr, "%s: %s\n", what, err.text);
        return;
    }
    for (int i = 0; i < NP_CC_ITEM_COUNT; i++) {
        CHECK_MSG(r->items[i].pass_check == want[i], "%s: item %s is %s, want %s", what,
                  np_cc_item_name((np_cc_item_id)i), np_cc_level_name(r->items[i].pass_check),
                  np_cc_level_name(want[i]));
        if (r->items[i].pass_check != want[i])
            for (int j = 0; j < r->items[i].n_rows; j++)
                if (r->items[i].rows[j].level >= NP_CC_WARNING)
                    fprintf(stderr, "  %s: %s | %s\n", r->items[i].rows[j].key,
                            r->items[i].rows[j].bench ? r->items[i].rows[j].bench : "-",
                            r->items[i].rows[j].cmp ? r->items[i].rows[j].cmp : "-");
    }
    np_cc_result_free(r);
}

static int run_packs(void)
{
    char data[600], a[600], a2[600], s[600], d[600];
    cc_path(data, sizeof data, "train.bin");
    cc_write_file(data, "0123456789", 10);
    pack_run(cc_path(a, sizeof a, "a.zip"), "42", data);
    pack_run(cc_path(a2, sizeof a2, "a2.zip"), "42", data);
    pack_run(cc_path(s, sizeof s, "seed.zip"), "43", data);
    cc_write_file(data, "0123456788", 10); /* one byte changed, same size */
    pack_run(cc_path(d, sizeof d, "data.zip"), "42", data);

    const np_cc_level P = NP_CC_PASS, E = NP_CC_ERROR;
    np_cc_level same[NP_CC_ITEM_COUNT] = {P, P, P, P, P, P, P};
    np_cc_level seed[NP_CC_ITEM_COUNT] = {P, P, P, E, E, P, P};
    np_cc_level dset[NP_CC_ITEM_COUNT] = {P, P, P, P, P, E, P};
    expect(a, a2, same, "identical runs");
    expect(a, s, seed, "seed 42 vs 43");
    expect(a, d, dset, "one data file changed");

    /* the rows say which entry differs */
    np_cc_result *r = NULL;
    CHECK_EQ_INT(np_cc_compare(&r, a, s, NULL, NULL), NP_OK);
    if (r) {
        int found = 0;
        const np_cc_item *w = &r->items[NP_CC_WEIGHTS];
        for (int j = 0; j < w->n_rows; j++)
            if (!strcmp(w->rows[j].key, "h.0.mlp.c_fc.weight/sha256"))
                found = w->rows[j].level == NP_CC_ERROR && w->rows[j].bench && w->rows[j].cmp &&
                        strcmp(w->rows[j].bench, w->rows[j].cmp) != 0;
        CHECK(found);
        const np_cc_item *rn = &r->items[NP_CC_RANDOM];
        int seed_row = 0;
        for (int j = 0; j < rn->n_rows; j++)
            if (!strcmp(rn->rows[j].key, "seed"))
                seed_row = rn->rows[j].level == NP_CC_ERROR && !strcmp(rn->rows[j].bench, "42") &&
                           !strcmp(rn->rows[j].cmp, "43");
        CHECK(seed_row);
        CHECK_EQ_INT(np_cc_result_level(r), NP_CC_ERROR);
        np_cc_result_free(r);
    }

    /* thread counts: two processes of the CLI with different env */
    const char *bin = getenv("NPROBE_BIN");
    if (!bin) {
        fprintf(stderr, "NPROBE_BIN not set: the thread-count case is not run\n");
        return 0;
    }
    char cmd[2000];
    for (int t = 1; t <= 2; t++) {
        snprintf(cmd, sizeof cmd,
                 "cd '%s' && env OMP_NUM_THREADS=%d OPENBLAS_NUM_THREADS=%d '%s' config_check pack "
                 "-o t%d.zip --no-python 2>/dev/null",
                 cc_tmp, t, t, bin, t);
        CHECK_EQ_INT(cc_sh(cmd), 0);
    }
    snprintf(cmd, sizeof cmd,
             "cd '%s' && env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 '%s' config_check pack "
             "-o t1b.zip --no-python 2>/dev/null",
             cc_tmp, bin);
    CHECK_EQ_INT(cc_sh(cmd), 0);
    char t1[600], t2[600], t1b[600];
    cc_path(t1, sizeof t1, "t1.zip");
    cc_path(t2, sizeof t2, "t2.zip");
    cc_path(t1b, sizeof t1b, "t1b.zip");
    np_cc_level thr[NP_CC_ITEM_COUNT] = {E, E, P, P, P, P, P};
    expect(t1, t2, thr, "OMP/OpenBLAS threads 1 vs 2");
    expect(t1, t1b, same, "two identical CLI packs");

    /* the CLI: exit codes, result.json */
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' config_check compare t1.zip t2.zip -o outj --format json >/dev/null",
             cc_tmp, bin);
    CHECK_EQ_INT(cc_sh(cmd), 1);
    char rj[600];
    json_t *res = json_load_file(cc_path(rj, sizeof rj, "outj/result.json"), 0, NULL);
    CHECK(res != NULL);
    json_t *sum = json_object_get(res, "summary");
    CHECK_STREQ(json_string_value(json_object_get(sum, "env")), "error");
    CHECK_STREQ(json_string_value(json_object_get(sum, "libs")), "error");
    CHECK_STREQ(json_string_value(json_object_get(sum, "weights")), "pass");
    int omp_row = 0;
    size_t i;
    json_t *row;
    json_array_foreach(json_object_get(json_object_get(json_object_get(res, "items"), "env"), "rows"), i, row)
        if (!strcmp(json_string_value(json_object_get(row, "key")), "OMP_NUM_THREADS"))
            omp_row = !strcmp(json_string_value(json_object_get(row, "bench")), "1") &&
                      !strcmp(json_string_value(json_object_get(row, "cmp")), "2") &&
                      !strcmp(json_string_value(json_object_get(row, "level")), "error");
    CHECK(omp_row);
    json_decref(res);
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' config_check compare t1.zip t1b.zip -o outk >/dev/null",
             cc_tmp, bin);
    CHECK_EQ_INT(cc_sh(cmd), 0);
    return 0;
}

/* The xlsx report, read back with openpyxl. */
static int run_xlsx(void)
{
    const char *bin = getenv("NPROBE_BIN");
    if (!bin || !cc_python_has("openpyxl"))
        CHECK_SKIP("needs NPROBE_BIN and openpyxl in NP_PYTHON");
    char data[600], a[600], s[600], cmd[3000];
    cc_path(data, sizeof data, "train.bin");
    cc_write_file(data, "abc", 3);
    pack_run(cc_path(a, sizeof a, "a.zip"), "42", data);
    pack_run(cc_path(s, sizeof s, "seed.zip"), "43", data);
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' config_check compare a.zip seed.zip -o out >/dev/null",
             cc_tmp, bin);
    CHECK_EQ_INT(cc_sh(cmd), 1);
    char script[600];
    cc_path(script, sizeof script, "check.py");
    const char *py =
        "import sys, openpyxl\n"
        "wb = openpyxl.load_workbook(sys.argv[1])\n"
        "want = ['summary','env','libs','pip','random','weights','dataset','hyperparameters']\n"
        "assert wb.sheetnames == want, wb.sheetnames\n"
        "rows = [tuple(c.value for c in r[:2]) for r in wb['summary'].iter_rows()]\n"
        "assert rows[0] == ('item', 'pass_check'), rows[0]\n"
        "got = dict(rows[1:])\n"
        "exp = {'env':'pass','libs':'pass','pip':'pass','random':'error','weights':'error',\n"
        "       'dataset':'pass','hyperparameters':'pass'}\n"
        "assert got == exp, got\n"
        "ws = wb['random']\n"
        "hdr = [c.value for c in ws[1]]\n"
        "assert hdr == ['key','bench','cmp','level'], hdr\n"
        "r = {row[0]: row[1:] for row in ws.iter_rows(min_row=2, values_only=True)}\n"
        "assert r['seed'] == ('42', '43', 'error'), r['seed']\n"
        "assert r['rng.init.draws'] == ('6', '6', 'pass'), r['rng.init.draws']\n"
        "w = {row[0]: row[1:] for row in wb['weights'].iter_rows(min_row=2, values_only=True)}\n"
        "assert w['h.0.mlp.c_fc.weight/sha256'][2] == 'error'\n"
        "assert w['h.0.mlp.c_fc.weight/shape'] == ('[2,3]', '[2,3]', 'pass'), w['h.0.mlp.c_fc.weight/shape']\n"
        "print('ok')\n";
    cc_write_file(script, py, strlen(py));
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s/out/result.xlsx'", getenv("NP_PYTHON"), script, cc_tmp);
    CHECK_EQ_INT(cc_sh(cmd), 0);
    return 0;
}

/* One `nprobe train` run writing a pack; `env` is prepended to the command. */
static void train_pack(const char *env, const char *args, const char *zip)
{
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "cd '%s' && env %s '%s' train %s --steps 1 --config-check-out %s "
             ">/dev/null 2>train.err", cc_tmp, env, getenv("NPROBE_BIN"), args, zip);
    CHECK_MSG(cc_sh(cmd) == 0, "%s", cmd);
}

static int run_train(void)
{
    const char *bin = getenv("NPROBE_BIN");
    char cmd[1200], a[600], b[600];
    snprintf(cmd, sizeof cmd, "'%s' train --help >/dev/null 2>&1", bin ? bin : "/nonexistent");
    if (!bin || cc_sh(cmd) != 0)
        CHECK_SKIP("nprobe train is not available");
    const char *one = "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1";
    const char *two = "OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2";
    const char *mlp = "--model mlp --batch 8";
    char args[256];
    snprintf(args, sizeof args, "%s --seed 1", mlp);
    train_pack(one, args, "s1.zip");
    train_pack(one, args, "s1b.zip");
    train_pack(two, args, "t2.zip");
    snprintf(args, sizeof args, "%s --seed 2", mlp);
    train_pack(one, args, "s2.zip");
    const np_cc_level P = NP_CC_PASS, E = NP_CC_ERROR;
    np_cc_level same[NP_CC_ITEM_COUNT] = {P, P, P, P, P, P, P};
    np_cc_level seed[NP_CC_ITEM_COUNT] = {P, P, P, E, E, P, P};
    np_cc_level dset[NP_CC_ITEM_COUNT] = {P, P, P, P, P, E, P};
    expect(cc_path(a, sizeof a, "s1.zip"), cc_path(b, sizeof b, "s1b.zip"), same, "train: identical runs");
    expect(a, cc_path(b, sizeof b, "s2.zip"), seed, "train: seed 1 vs 2");

    /* thread counts (OMP_NUM_THREADS / OPENBLAS_NUM_THREADS): exactly env and libs */
    np_cc_level thr[NP_CC_ITEM_COUNT] = {E, E, P, P, P, P, P};
    expect(a, cc_path(b, sizeof b, "t2.zip"), thr, "train: threads 1 vs 2");

    /* one data file changed (same path, same size) */
    char data[600];
    cc_path(data, sizeof data, "corpus.txt");
    char text[2048];
    for (int i = 0; i < 2047; i++)
        text[i] = "abcdefgh ijkl\n"[i % 14];
    cc_write_file(data, text, 2047);
    const char *gpt = "--model gpt --layers 1 --heads 1 --width 16 --context 8 --batch 2 --seed 1 "
                      "--data corpus.txt";
    train_pack(one, gpt, "g1.zip");
    text[100] = 'a'; /* was 'c': same vocabulary, same size */
    cc_write_file(data, text, 2047);
    train_pack(one, gpt, "g2.zip");
    expect(cc_path(a, sizeof a, "g1.zip"), cc_path(b, sizeof b, "g2.zip"), dset,
           "train: one data file changed");
    return 0;
}

int main(int argc, char **argv)
{
    cc_mktemp();
    if (argc > 1 && !strcmp(argv[1], "xlsx"))
        run_xlsx();
    else if (argc > 1 && !strcmp(argv[1], "train"))
        run_train();
    else
        run_packs();
    return check_report();
}
