/* tests/configcheck/test_cc_hostile.c - packs from other people: path
 * traversal, absolute and backslash names, zip bombs (declared past the cap,
 * and one lying about its size), truncation, garbage, malformed JSON, a zip
 * that is not a pack, and a missing member. Each refusal names the pack and
 * the entry, exits 2 from the CLI, and nothing is written anywhere (the
 * output folder is not even created). */
#include "check.h"
#include "cc_util.h"
#include "nprobe/configcheck.h"

static const char *const members[] = {"manifest.json", "env.json", "libs.json", "random.json",
                                      "weights.json", "dataset.json", "hyperparameters.json"};
#define N_MEMBERS 7

static char good[700], work[600];
static char *good_data[N_MEMBERS];
static size_t good_len[N_MEMBERS];

/* A zip of the good members, with member `drop` left out (-1: none), member
 * `replace` given new contents (-1: none), and one extra entry (NULL: none). */
static void make_zip(const char *path, int drop, int replace, const char *rdata, size_t rlen,
                     const char *extra, const char *edata, size_t elen)
{
    int e = 0;
    zip_t *za = zip_open(path, ZIP_CREATE | ZIP_TRUNCATE, &e);
    if (!za) {
        fprintf(stderr, "cannot create %s\n", path);
        exit(1);
    }
    for (int m = 0; m < N_MEMBERS; m++) {
        if (m == drop)
            continue;
        const char *d = m == replace ? rdata : good_data[m];
        size_t n = m == replace ? rlen : good_len[m];
        zip_source_t *s = zip_source_buffer(za, d, n, 0);
        if (!s || zip_file_add(za, members[m], s, ZIP_FL_ENC_RAW) < 0) {
            fprintf(stderr, "zip_file_add %s: %s\n", members[m], zip_strerror(za));
            exit(1);
        }
    }
    if (extra) {
        zip_source_t *s = zip_source_buffer(za, edata, elen, 0);
        if (!s || zip_file_add(za, extra, s, ZIP_FL_ENC_RAW) < 0) {
            fprintf(stderr, "zip_file_add %s: %s\n", extra, zip_strerror(za));
            exit(1);
        }
    }
    if (zip_close(za) < 0) {
        fprintf(stderr, "zip_close %s: %s\n", path, zip_strerror(za));
        exit(1);
    }
}

static void tree(char *out, size_t cap)
{
    char cmd[1200], list[600];
    snprintf(list, sizeof list, "%s/tree.txt", cc_tmp);
    snprintf(cmd, sizeof cmd, "cd '%s' && find . -path ./tree.txt -prune -o -print | sort > '%s'",
             cc_tmp, list);
    cc_sh(cmd);
    char *s = cc_read_file(list, NULL);
    snprintf(out, cap, "%s", s ? s : "");
    free(s);
}

/* Run the CLI on good.zip vs `bad`; check the exit code, the stderr
 * fragments, and that nothing was written (the tree is unchanged apart from
 * the captured stderr). */
static void refuse(const char *bad_name, int want_exit, const char *frag1, const char *frag2)
{
    static char before[1 << 16], after[1 << 16];
    const char *bin = getenv("NPROBE_BIN");
    char errf[600], cmd[2000];
    snprintf(errf, sizeof errf, "%s/err.txt", cc_tmp);
    tree(before, sizeof before);
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' config_check compare good.zip '%s' -o out >/dev/null 2>'%s'",
             work, bin, bad_name, errf);
    int rc = cc_sh(cmd);
    CHECK_MSG(rc == want_exit, "%s: exit %d, want %d", bad_name, rc, want_exit);
    char *err = cc_read_file(errf, NULL);
    CHECK_CONTAINS(err, frag1);
    if (frag2)
        CHECK_CONTAINS(err, frag2);
    if (want_exit == 2)
        CHECK_CONTAINS(err, bad_name);
    free(err);
    remove(errf);
    tree(after, sizeof after);
    CHECK_MSG(strcmp(before, after) == 0, "%s: files changed:\n--before\n%s--after\n%s", bad_name,
              before, after);
}

/* Patch the uncompressed size of `name` in its local and central headers. */
static void lie_about_size(const char *path, const char *name, uint32_t size)
{
    size_t n = 0;
    unsigned char *b = (unsigned char *)cc_read_file(path, &n);
    size_t nl = strlen(name);
    int patched = 0;
    for (size_t i = 0; b && i + 46 < n; i++) {
        if (memcmp(b + i, "PK\1\2", 4) != 0)
            continue;
        size_t len = b[i + 28] | (size_t)b[i + 29] << 8;
        if (len != nl || memcmp(b + i + 46, name, nl) != 0)
            continue;
        uint32_t off = b[i + 42] | (uint32_t)b[i + 43] << 8 | (uint32_t)b[i + 44] << 16 |
                       (uint32_t)b[i + 45] << 24;
        for (int k = 0; k < 4; k++) {
            b[i + 24 + (size_t)k] = (unsigned char)(size >> (8 * k));
            b[off + 22 + (size_t)k] = (unsigned char)(size >> (8 * k));
        }
        patched = 1;
    }
    CHECK(patched);
    cc_write_file(path, b, n);
    free(b);
}

int main(void)
{
    const char *bin = getenv("NPROBE_BIN");
    if (!bin || access(bin, X_OK) != 0)
        CHECK_SKIP("NPROBE_BIN not set");
    cc_mktemp();
    snprintf(work, sizeof work, "%s/work", cc_tmp);
    mkdir(work, 0777);
    snprintf(good, sizeof good, "%s/good.zip", work);
    np_cc_pack_opts o;
    memset(&o, 0, sizeof o);
    o.python = "";
    np_error err;
    np_error_clear(&err);
    CHECK_EQ_INT(np_cc_pack(good, &o, &err), NP_OK);
    for (int m = 0; m < N_MEMBERS; m++) {
        good_data[m] = cc_zip_member(good, members[m], &good_len[m]);
        CHECK(good_data[m] != NULL);
    }
    char p[700];
    const char *evil = "{\"evil\": 1}\n";

    /* names that escape the output folder */
    snprintf(p, sizeof p, "%s/trav.zip", work);
    make_zip(p, -1, -1, NULL, 0, "../evil.json", evil, strlen(evil));
    refuse("trav.zip", 2, "../evil.json", "unsafe entry name");
    snprintf(p, sizeof p, "%s/trav2.zip", work);
    make_zip(p, -1, -1, NULL, 0, "data/../../evil.json", evil, strlen(evil));
    refuse("trav2.zip", 2, "'..'", NULL);
    int had_x = access("/tmp/x.json", F_OK) == 0;
    snprintf(p, sizeof p, "%s/abs.zip", work);
    make_zip(p, -1, -1, NULL, 0, "/tmp/x.json", evil, strlen(evil));
    refuse("abs.zip", 2, "/tmp/x.json", "absolute name");
    if (!had_x)
        CHECK(access("/tmp/x.json", F_OK) != 0);
    snprintf(p, sizeof p, "%s/bs.zip", work);
    make_zip(p, -1, -1, NULL, 0, "..\\evil.json", evil, strlen(evil));
    refuse("bs.zip", 2, "backslash", NULL);

    /* zip bombs: past the per-entry cap (honest header), and a lying header */
    size_t big = NP_CC_DEFAULT_MAX_ENTRY + 1024;
    char *zeros = malloc(big);
    memset(zeros, ' ', big);
    zeros[0] = '{';
    zeros[big - 1] = '}';
    snprintf(p, sizeof p, "%s/bomb.zip", work);
    make_zip(p, 4, -1, NULL, 0, "weights.json", zeros, big);
    free(zeros);
    refuse("bomb.zip", 2, "weights.json", "limit");
    size_t lie_n = 1 << 20;
    char *lie = malloc(lie_n);
    memset(lie, 'x', lie_n);
    memcpy(lie, "{\"a\": \"", 7);
    memcpy(lie + lie_n - 2, "\"}", 2);
    snprintf(p, sizeof p, "%s/liar.zip", work);
    make_zip(p, -1, 1, lie, lie_n, NULL, NULL, 0);
    free(lie);
    lie_about_size(p, "env.json", 64);
    refuse("liar.zip", 2, "env.json", "refused");
    /* the same through the API with a small cap: limit error naming the entry */
    {
        size_t cap = 0;
        for (int m = 0; m < N_MEMBERS; m++)
            cap = good_len[m] > cap ? good_len[m] : cap;
        np_cc_limits lim = {cap + 1, 0, 0};
        np_cc_result *r = NULL;
        char bp[700];
        snprintf(bp, sizeof bp, "%s/big.zip", work);
        np_error_clear(&err);
        size_t padn = cap + 100;
        char *pad = malloc(padn);
        memset(pad, ' ', padn);
        pad[0] = '{';
        pad[padn - 1] = '}';
        make_zip(bp, -1, 3, pad, padn, NULL, NULL, 0);
        free(pad);
        CHECK_EQ_INT(np_cc_compare(&r, good, bp, &lim, &err), NP_ERR_LIMIT);
        CHECK_STREQ(err.file, bp);
        CHECK_STREQ(err.key, "random.json");
        CHECK(r == NULL);
    }

    /* truncated and garbage */
    size_t gl = 0;
    char *g = cc_read_file(good, &gl);
    snprintf(p, sizeof p, "%s/half.zip", work);
    cc_write_file(p, g, gl / 2);
    free(g);
    refuse("half.zip", 2, "refused", "zip");
    char junk[4096];
    unsigned x = 12345;
    for (size_t i = 0; i < sizeof junk; i++) {
        x = x * 1103515245u + 12345u;
        junk[i] = (char)(x >> 16);
    }
    snprintf(p, sizeof p, "%s/junk.zip", work);
    cc_write_file(p, junk, sizeof junk);
    refuse("junk.zip", 2, "not a zip archive", NULL);

    /* malformed JSON inside, a non-object member, not a pack at all */
    const char *broken = "{\"variables\": {\"A\": ";
    snprintf(p, sizeof p, "%s/badjson.zip", work);
    make_zip(p, -1, 1, broken, strlen(broken), NULL, NULL, 0);
    refuse("badjson.zip", 2, "env.json", "malformed JSON");
    snprintf(p, sizeof p, "%s/arr.zip", work);
    make_zip(p, -1, 3, "[1,2]", 5, NULL, NULL, 0);
    refuse("arr.zip", 2, "random.json", "expected a JSON object");
    snprintf(p, sizeof p, "%s/nopack.zip", work);
    {
        int e = 0;
        zip_t *za = zip_open(p, ZIP_CREATE | ZIP_TRUNCATE, &e);
        zip_file_add(za, "hello.txt", zip_source_buffer(za, "hi", 2, 0), 0);
        zip_close(za);
    }
    refuse("nopack.zip", 2, "manifest.json", "not an nprobe config_check pack");

    /* pip.txt naming a package twice (also once PEP 503 normalised), or
     * holding a NUL: refused (the last line won, the text was cut at the
     * NUL, and pip passed; issue 30) */
    const char *pip_twice = "numpy==1.26.0\ntorch==2.13.0\nnumpy==2.4.0\n";
    snprintf(p, sizeof p, "%s/pip_twice.zip", work);
    make_zip(p, -1, -1, NULL, 0, "pip.txt", pip_twice, strlen(pip_twice));
    refuse("pip_twice.zip", 2, "pip.txt", "\"numpy\" is listed twice");
    const char *pip_norm = "Foo_Bar==1.0\nfoo.bar==2.0\n";
    snprintf(p, sizeof p, "%s/pip_norm.zip", work);
    make_zip(p, -1, -1, NULL, 0, "pip.txt", pip_norm, strlen(pip_norm));
    refuse("pip_norm.zip", 2, "pip.txt", "\"foo-bar\" is listed twice");
    const char pip_nul[] = "numpy==1.26.0\n\0torch==2.13.0\n";
    snprintf(p, sizeof p, "%s/pip_nul.zip", work);
    make_zip(p, -1, -1, NULL, 0, "pip.txt", pip_nul, sizeof pip_nul - 1);
    refuse("pip_nul.zip", 2, "pip.txt", "NUL byte");

    /* entry names with control characters, as stored: libzip reads a name
     * without the UTF-8 flag as CP437 (0x01 becomes a smiley) and one with
     * a C1 control (U+0085) as UTF-8; both refused (issue 30) */
    snprintf(p, sizeof p, "%s/ctl_cp437.zip", work);
    make_zip(p, -1, -1, NULL, 0, "notes\001.json", "{}", 2);
    refuse("ctl_cp437.zip", 2, "unsafe entry name", "a control character");
    snprintf(p, sizeof p, "%s/ctl_c1.zip", work);
    make_zip(p, -1, -1, NULL, 0, "notes\302\205.json", "{}", 2);
    refuse("ctl_c1.zip", 2, "unsafe entry name", "a control character");
    /* the same entry name twice (libzip's consistency check says only
     * "File already exists"): refused naming the entry */
    snprintf(p, sizeof p, "%s/dup.zip", work);
    make_zip(p, -1, -1, NULL, 0, "env.jsoo", good_data[1], good_len[1]);
    {
        size_t n = 0;
        char *b = cc_read_file(p, &n);
        int renamed = 0;
        for (size_t i = 0; b && i + 8 <= n; i++)
            if (!memcmp(b + i, "env.jsoo", 8)) {
                b[i + 7] = 'n';
                renamed++;
            }
        CHECK_EQ_INT(renamed, 2); /* local and central header */
        cc_write_file(p, b, n);
        free(b);
    }
    refuse("dup.zip", 2, "env.json", "appears twice");

    /* a member missing from one side: reported, not fatal (exit 1) */
    snprintf(p, sizeof p, "%s/noweights.zip", work);
    make_zip(p, 4, -1, NULL, 0, NULL, NULL, 0);
    np_cc_result *r = NULL;
    np_error_clear(&err);
    CHECK_EQ_INT(np_cc_compare(&r, good, p, NULL, &err), NP_OK);
    if (r) {
        CHECK_EQ_INT(r->items[NP_CC_WEIGHTS].pass_check, NP_CC_ERROR);
        CHECK_CONTAINS(r->items[NP_CC_WEIGHTS].note, "weights.json is missing from the compare pack");
        CHECK_EQ_INT(r->items[NP_CC_ENV].pass_check, NP_CC_PASS);
        np_cc_result_free(r);
    }
    char cmd[2000], outp[700];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' config_check compare good.zip noweights.zip -o out > out.txt 2>&1",
             work, bin);
    CHECK_EQ_INT(cc_sh(cmd), 1);
    snprintf(outp, sizeof outp, "%s/out.txt", work);
    char *o_txt = cc_read_file(outp, NULL);
    CHECK_CONTAINS(o_txt, "weights.json is missing from the compare pack");
    free(o_txt);

    for (int m = 0; m < N_MEMBERS; m++)
        free(good_data[m]);
    return check_report();
}
