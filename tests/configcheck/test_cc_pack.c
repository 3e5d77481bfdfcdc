/* tests/configcheck/test_cc_pack.c - what a pack holds: secret masking, the
 * members, weights hashed from a checkpoint / a dump / runtime tensors
 * (checked against sha256sum of the raw bytes and hand-computed statistics),
 * data files, hyperparameters, random, pip.txt, and the input errors. */
#include <hdf5.h>
#include <math.h>

#include "check.h"
#include "cc_util.h"
#include "nprobe/configcheck.h"
#include "nprobe/format.h"

/* sha256sum of a file (coreutils), 64 hex digits into want. */
static int sha256sum(char want[128], const char *path)
{
    char cmd[800];
    snprintf(cmd, sizeof cmd, "sha256sum '%s' | cut -c1-64", path);
    return cc_sh_out(cmd, want, 128) == 0 && strlen(want) == 64 ? 0 : -1;
}

static void str_attr(hid_t obj, const char *name, const char *v)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, strlen(v) + 1);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, t, v);
    H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
}

static void i64_attr(hid_t obj, const char *name, long long v)
{
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    int64_t x = v;
    H5Awrite(a, H5T_NATIVE_INT64, &x);
    H5Aclose(a);
    H5Sclose(sp);
}

static void f32_dataset(hid_t loc, const char *name, const float *v, int ndim, const hsize_t *dims,
                        const char *dtype)
{
    hid_t sp = H5Screate_simple(ndim, dims, NULL);
    hid_t ds = H5Dcreate2(loc, name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    if (dtype)
        str_attr(ds, "dtype", dtype);
    H5Dclose(ds);
    H5Sclose(sp);
}

/* A checkpoint following docs/CONTRACTS.md: wte.weight (3,4), h.0.ln_1.bias (4). */
static float W[12], B[4];
static void write_checkpoint(const char *path, float bump)
{
    for (int i = 0; i < 12; i++)
        W[i] = (float)i * 0.25f - 1.0f + bump;
    for (int i = 0; i < 4; i++)
        B[i] = (float)(i + 1) * 0.5f;
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    str_attr(f, "format", "nprobe-checkpoint");
    i64_attr(f, "format_version", 1);
    str_attr(f, "model", "gpt");
    i64_attr(f, "step", 0);
    i64_attr(f, "seed", 42);
    hid_t g = H5Gcreate2(f, "params", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t d2[2] = {3, 4}, d1[1] = {4};
    f32_dataset(g, "wte.weight", W, 2, d2, "float32");
    f32_dataset(g, "h.0.ln_1.bias", B, 1, d1, "bfloat16");
    H5Gclose(g);
    H5Fclose(f);
}

static double jnum(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static void test_masking(void)
{
    CHECK(np_cc_name_is_secret("MY_API_KEY"));
    CHECK(np_cc_name_is_secret("HF_TOKEN"));
    CHECK(np_cc_name_is_secret("db_password"));
    CHECK(np_cc_name_is_secret("AWS_SECRET_ACCESS_KEY"));
    CHECK(np_cc_name_is_secret("GITHUB_PAT"));
    CHECK(np_cc_name_is_secret("MYSQL_PWD"));
    CHECK(np_cc_name_is_secret("SSHPASS"));
    CHECK(np_cc_name_is_secret("MY_JWT"));
    CHECK(np_cc_name_is_secret("jwt_for_ci"));
    CHECK(!np_cc_name_is_secret("OLDPWD"));
    CHECK(!np_cc_name_is_secret("HOME"));
    /* values that carry secrets whatever the name (issue 13) */
    CHECK(np_cc_value_is_secret("https://alice:p@ss/word@host.example/x"));
    CHECK(np_cc_value_is_secret("https://a.example/simple https://bob:pw@b.example/"));
    CHECK(np_cc_value_is_secret("redis://:hunter2@cache:6379/0"));
    CHECK(np_cc_value_is_secret("https://h.example/api?user=x&token=abc123"));
    CHECK(np_cc_value_is_secret("https://h.example/?access_token=abc"));
    CHECK(np_cc_value_is_secret("--password=hunter2"));
    CHECK(np_cc_value_is_secret("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NSJ9.c2lnbmF0dXJlLXBhcnQ"));
    CHECK(!np_cc_value_is_secret("https://pypi.org/simple"));
    CHECK(!np_cc_value_is_secret("http://proxy.example:8080/"));
    CHECK(!np_cc_value_is_secret("/usr/local/bin:/usr/bin"));
    CHECK(!np_cc_value_is_secret("monkey=banana"));
    CHECK(!np_cc_value_is_secret("token="));
    CHECK(!np_cc_value_is_secret("a=b"));
    CHECK(!np_cc_name_is_secret("PATH"));
    CHECK(!np_cc_name_is_secret("PWD"));
    CHECK(!np_cc_name_is_secret("OMP_NUM_THREADS"));
    CHECK(!np_cc_name_is_secret("LD_LIBRARY_PATH"));
    char a[72], b[72], c[72], plain[65];
    np_cc_mask_value(a, "hunter2");
    np_cc_mask_value(b, "hunter2");
    np_cc_mask_value(c, "hunter3");
    CHECK_STREQ(a, b);
    CHECK(strcmp(a, c) != 0);
    CHECK(strncmp(a, "sha256:", 7) == 0 && strlen(a) == 71);
    np_sha256_hex(plain, "hunter2", 7); /* salted: not the bare hash */
    CHECK(strcmp(a + 7, plain) != 0);
}

static int zip_contains_text(const char *zip, const char *needle)
{
    size_t n = 0;
    char *raw = cc_read_file(zip, &n);
    int found = 0;
    for (size_t i = 0; raw && i + strlen(needle) <= n && !found; i++)
        found = memcmp(raw + i, needle, strlen(needle)) == 0;
    free(raw);
    static const char *const members[] = {"manifest.json", "env.json", "libs.json", "pip.txt",
                                          "random.json", "weights.json", "dataset.json",
                                          "hyperparameters.json"};
    for (int m = 0; m < 8 && !found; m++) {
        char *s = cc_zip_member(zip, members[m], NULL);
        found = s && strstr(s, needle);
        free(s);
    }
    return found;
}

/* Every member's Unix mode in the zip's external attributes equals mode
 * (0644 regular file: a pack unzipped must not give world-writable files). */
static int member_modes_are(const char *zip, unsigned mode)
{
    int zerr = 0, ok = 1;
    zip_t *za = zip_open(zip, ZIP_RDONLY, &zerr);
    if (!za)
        return 0;
    zip_int64_t n = zip_get_num_entries(za, 0);
    for (zip_int64_t i = 0; i < n; i++) {
        zip_uint8_t os = 0;
        zip_uint32_t attr = 0;
        if (zip_file_get_external_attributes(za, (zip_uint64_t)i, 0, &os, &attr) < 0 ||
            os != ZIP_OPSYS_UNIX || (attr >> 16) != mode) {
            fprintf(stderr, "member %s: os %u mode %o\n", zip_get_name(za, (zip_uint64_t)i, 0),
                    os, attr >> 16);
            ok = 0;
        }
    }
    zip_discard(za);
    return ok;
}

static void test_env_and_members(void)
{
    char zip[600];
    cc_path(zip, sizeof zip, "env.zip");
    setenv("NPTEST_API_KEY", "s3cr3t-Value-123", 1);
    setenv("NPTEST_TOKEN_B", "s3cr3t-Value-123", 1);
    setenv("NPTEST_PASSWORD_C", "another-s3cr3t", 1);
    setenv("NPTEST_PROXY", "http://alice:pw-XYZZY@proxy.example:8080/", 1);
    setenv("NPTEST_PLAIN", "visible-value", 1);
    setenv("MYSQL_PWD", "mysql-s3cr3t", 1);
    setenv("SSHPASS", "sshpass-s3cr3t", 1);
    setenv("NPTEST_JWT_X", "jwt-s3cr3t", 1);
    setenv("NPTEST_HOOK", "https://hooks.example/x?token=hook-s3cr3t", 1);
    setenv("NPTEST_MIRROR", "https://u:slash/pw-s3cr3t@mirror.example/simple", 1);
    np_cc_pack_opts o;
    memset(&o, 0, sizeof o);
    o.python = "";
    np_error err;
    np_error_clear(&err);
    CHECK_EQ_INT(np_cc_pack(zip, &o, &err), NP_OK);
    json_t *env = cc_zip_json(zip, "env.json");
    json_t *vars = json_object_get(env, "variables");
    const char *ka = json_string_value(json_object_get(vars, "NPTEST_API_KEY"));
    const char *kb = json_string_value(json_object_get(vars, "NPTEST_TOKEN_B"));
    const char *kc = json_string_value(json_object_get(vars, "NPTEST_PASSWORD_C"));
    CHECK(ka && kb && kc);
    if (ka && kb && kc) {
        CHECK_STREQ(ka, kb);
        CHECK(strcmp(ka, kc) != 0);
        char want[72];
        np_cc_mask_value(want, "s3cr3t-Value-123");
        CHECK_STREQ(ka, want);
    }
    CHECK_STREQ(json_string_value(json_object_get(vars, "NPTEST_PLAIN")), "visible-value");
    CHECK(!zip_contains_text(zip, "s3cr3t-Value-123"));
    CHECK(!zip_contains_text(zip, "another-s3cr3t"));
    CHECK(!zip_contains_text(zip, "pw-XYZZY"));
    CHECK(!zip_contains_text(zip, "mysql-s3cr3t"));
    CHECK(!zip_contains_text(zip, "sshpass-s3cr3t"));
    CHECK(!zip_contains_text(zip, "jwt-s3cr3t"));
    CHECK(!zip_contains_text(zip, "hook-s3cr3t"));
    CHECK(!zip_contains_text(zip, "pw-s3cr3t"));
    CHECK(zip_contains_text(zip, "\"PWD\"")); /* the working directory stays in clear */
    CHECK(member_modes_are(zip, 0100644));
    CHECK(zip_contains_text(zip, "visible-value"));
    json_decref(env);

    /* every member present, every JSON member parses, manifest fields */
    static const char *const members[] = {"manifest.json", "env.json", "libs.json", "random.json",
                                          "weights.json", "dataset.json", "hyperparameters.json"};
    for (int m = 0; m < 7; m++) {
        json_t *j = cc_zip_json(zip, members[m]);
        CHECK_MSG(json_is_object(j), "%s", members[m]);
        json_decref(j);
    }
    char *pip = cc_zip_member(zip, "pip.txt", NULL);
    CHECK(pip == NULL); /* python "" : not requested */
    free(pip);
    json_t *man = cc_zip_json(zip, "manifest.json");
    CHECK_STREQ(json_string_value(json_object_get(man, "format")), "nprobe-config-check");
    CHECK_EQ_INT(json_integer_value(json_object_get(man, "format_version")), 1);
    CHECK_STREQ(json_string_value(json_object_get(man, "nprobe_version")), NP_VERSION_STRING);
    CHECK(json_is_string(json_object_get(man, "host")));
    CHECK(json_is_string(json_object_get(man, "time")));
    json_decref(man);
    json_t *libs = cc_zip_json(zip, "libs.json");
    unsigned maj, min, rel;
    H5get_libversion(&maj, &min, &rel);
    char hv[64];
    snprintf(hv, sizeof hv, "%u.%u.%u", maj, min, rel);
    CHECK_STREQ(json_string_value(json_object_get(libs, "hdf5")), hv);
    CHECK_STREQ(json_string_value(json_object_get(libs, "libzip")), zip_libzip_version());
    CHECK_STREQ(json_string_value(json_object_get(libs, "jansson")), JANSSON_VERSION);
    const char *omp = getenv("OMP_NUM_THREADS");
    if (omp)
        CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(libs, "openmp"), "max_threads")),
                     atoi(omp));
    CHECK(json_is_string(json_object_get(json_object_get(libs, "openblas"), "corename")));
    json_decref(libs);
    unsetenv("NPTEST_API_KEY");
    unsetenv("NPTEST_TOKEN_B");
    unsetenv("NPTEST_PASSWORD_C");
    unsetenv("NPTEST_PROXY");
    unsetenv("NPTEST_PLAIN");
}

static void test_checkpoint_weights(void)
{
    char ck[600], zip[600], raw[600], want[128];
    cc_path(ck, sizeof ck, "ckpt.h5");
    cc_path(zip, sizeof zip, "w.zip");
    cc_path(raw, sizeof raw, "w.raw");
    write_checkpoint(ck, 0.0f);
    np_cc_pack_opts o;
    memset(&o, 0, sizeof o);
    o.python = "";
    o.weights_path = ck;
    np_error err;
    np_error_clear(&err);
    CHECK_EQ_INT(np_cc_pack(zip, &o, &err), NP_OK);
    json_t *w = cc_zip_json(zip, "weights.json");
    json_t *p = json_object_get(json_object_get(w, "params"), "wte.weight");
    CHECK(p != NULL);
    cc_write_file(raw, W, sizeof W);
    if (sha256sum(want, raw) == 0)
        CHECK_STREQ(json_string_value(json_object_get(p, "sha256")), want);
    CHECK_STREQ(json_string_value(json_object_get(p, "dtype")), "float32");
    json_t *shape = json_object_get(p, "shape");
    CHECK_EQ_INT(json_array_size(shape), 2);
    CHECK_EQ_INT(json_integer_value(json_array_get(shape, 0)), 3);
    CHECK_EQ_INT(json_integer_value(json_array_get(shape, 1)), 4);
    /* W[i] = i/4 - 1: max 1.75, min -1, mean 0.375, norm sqrt(sum) */
    double sq = 0;
    for (int i = 0; i < 12; i++)
        sq += ((double)i / 4 - 1) * ((double)i / 4 - 1);
    CHECK_CLOSE(jnum(p, "max"), 1.75, 0, 0);
    CHECK_CLOSE(jnum(p, "min"), -1.0, 0, 0);
    CHECK_CLOSE(jnum(p, "mean"), 0.375, 1e-15, 0);
    CHECK_CLOSE(jnum(p, "norm"), sqrt(sq), 1e-14, 1e-14);
    json_t *b = json_object_get(json_object_get(w, "params"), "h.0.ln_1.bias");
    CHECK_STREQ(json_string_value(json_object_get(b, "dtype")), "bfloat16");
    cc_write_file(raw, B, sizeof B);
    if (sha256sum(want, raw) == 0)
        CHECK_STREQ(json_string_value(json_object_get(b, "sha256")), want);

    /* an independent reader: h5py + hashlib */
    if (cc_python_has("h5py,hashlib")) {
        char cmd[1500];
        snprintf(cmd, sizeof cmd,
                 "'%s' -c \"import h5py,hashlib; f=h5py.File('%s','r'); "
                 "print(hashlib.sha256(f['params/wte.weight'][()].astype('<f4').tobytes()).hexdigest())\"",
                 getenv("NP_PYTHON"), ck);
        char got[128];
        CHECK_EQ_INT(cc_sh_out(cmd, got, sizeof got), 0);
        CHECK_STREQ(json_string_value(json_object_get(p, "sha256")), got);
    }

    /* the same values as runtime tensors hash the same */
    np_tensor tw, tb;
    memset(&tw, 0, sizeof tw);
    memset(&tb, 0, sizeof tb);
    tw.dtype = NP_FLOAT32, tw.ndim = 2, tw.shape[0] = 3, tw.shape[1] = 4, tw.numel = 12, tw.data = W;
    tb.dtype = NP_BFLOAT16, tb.ndim = 1, tb.shape[0] = 4, tb.numel = 4, tb.data = B;
    /* a float8 weight is float32 holding the decoded values: its statistics
     * are those of the floats (they were of the bytes: max 63 here) */
    static float F8[4] = {0.5f, -2.0f, 1.5f, 0.0f};
    np_tensor tf;
    memset(&tf, 0, sizeof tf);
    tf.dtype = NP_FLOAT8_E4M3FN, tf.ndim = 1, tf.shape[0] = 4, tf.numel = 4, tf.data = F8;
    np_named_tensor nt[3] = {{"wte.weight", &tw}, {"h.0.ln_1.bias", &tb}, {"h.0.mlp.c_fc.weight", &tf}};
    np_kv rnd[2] = {{"seed", "42"}, {"rng.init.draws", "16"}};
    np_kv hp[2] = {{"lr", "0.001"}, {"model", "gpt"}};
    const char *batches[2] = {"aa", "bb"};
    char data[600];
    cc_path(data, sizeof data, "train.txt");
    cc_write_file(data, "hello world\n", 12);
    const char *files[1] = {data};
    np_run_info run = {hp, 2, rnd, 2, nt, 3, batches, 2, files, 1, NULL, 0};
    char zr[600];
    cc_path(zr, sizeof zr, "run.zip");
    np_cc_pack_opts none;
    memset(&none, 0, sizeof none);
    none.python = "";
    CHECK_EQ_INT(np_cc_pack_ex(zr, &none, &run, &err), NP_OK);
    json_t *wr = cc_zip_json(zr, "weights.json");
    json_t *pr = json_object_get(json_object_get(wr, "params"), "wte.weight");
    CHECK_STREQ(json_string_value(json_object_get(pr, "sha256")),
                json_string_value(json_object_get(p, "sha256")));
    CHECK_STREQ(json_string_value(json_object_get(json_object_get(json_object_get(wr, "params"),
                                                                  "h.0.ln_1.bias"), "dtype")),
                "bfloat16");
    json_t *pf = json_object_get(json_object_get(wr, "params"), "h.0.mlp.c_fc.weight");
    CHECK_CLOSE(jnum(pf, "max"), 1.5, 0.0, 0.0);
    CHECK_CLOSE(jnum(pf, "min"), -2.0, 0.0, 0.0);
    CHECK_CLOSE(jnum(pf, "mean"), 0.0, 0.0, 0.0);
    json_t *rj = cc_zip_json(zr, "random.json");
    CHECK_STREQ(json_string_value(json_object_get(rj, "seed")), "42");
    CHECK_STREQ(json_string_value(json_object_get(rj, "rng.init.draws")), "16");
    json_t *hj = cc_zip_json(zr, "hyperparameters.json");
    CHECK_STREQ(json_string_value(json_object_get(hj, "lr")), "0.001");
    json_t *dj = cc_zip_json(zr, "dataset.json");
    CHECK_STREQ(json_string_value(json_object_get(json_object_get(dj, "batches"), "batch.0001")), "bb");
    cc_write_file(raw, "hello world\n", 12);
    if (sha256sum(want, raw) == 0)
        CHECK_STREQ(json_string_value(json_object_get(
                        json_object_get(json_object_get(dj, "files"), data), "sha256")),
                    want);
    CHECK_EQ_INT(json_integer_value(json_object_get(
                     json_object_get(json_object_get(dj, "files"), data), "size")),
                 12);
    json_t *man = cc_zip_json(zr, "manifest.json");
    CHECK_STREQ(json_string_value(json_object_get(man, "source")), "runtime");
    json_decref(man);
    json_decref(dj);
    json_decref(hj);
    json_decref(rj);
    json_decref(wr);
    json_decref(w);

    /* input errors name the file */
    o.weights_path = data; /* not HDF5 */
    np_error_clear(&err);
    CHECK_EQ_INT(np_cc_pack(zip, &o, &err), NP_ERR_FORMAT);
    CHECK_STREQ(err.file, data);
    o.weights_path = "/nonexistent/ckpt.h5";
    np_error_clear(&err);
    CHECK(np_cc_pack(zip, &o, &err) != NP_OK);
    CHECK_CONTAINS(err.file, "ckpt.h5");
}

/* A small dump: a parameters row with payload, one without, an input row. */
static void test_dump_weights(void)
{
    char dir[600], sub[700], file[800], zip[600], raw[600], want[128];
    cc_path(dir, sizeof dir, "dump");
    snprintf(sub, sizeof sub, "%s/step0", dir);
    mkdir(dir, 0777);
    mkdir(sub, 0777);
    snprintf(sub, sizeof sub, "%s/step0/rank0", dir);
    mkdir(sub, 0777);
    snprintf(file, sizeof file, "%s/dump.h5", sub);
    hid_t f = H5Fcreate(file, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    str_attr(f, NP_FMT_ATTR_FORMAT, NP_FMT_NAME);
    i64_attr(f, NP_FMT_ATTR_FORMAT_VERSION, 1);
    np_entry_rec rows[3];
    memset(rows, 0, sizeof rows);
    const char *call = "Module.h.0.mlp.c_fc.Linear.forward.0";
    for (int i = 0; i < 3; i++) {
        rows[i].seq = 0;
        np_fmt_copy_name(rows[i].call, sizeof rows[i].call, call);
        np_fmt_copy_name(rows[i].dtype, sizeof rows[i].dtype, "float32");
        rows[i].ndim = 1;
        rows[i].shape[0] = 4;
        rows[i].numel = 4;
    }
    snprintf(rows[0].name, sizeof rows[0].name, "%s.input.0", call);
    snprintf(rows[0].role, sizeof rows[0].role, "input");
    snprintf(rows[1].name, sizeof rows[1].name, "%s.parameters.weight", call);
    snprintf(rows[1].role, sizeof rows[1].role, "parameters");
    rows[1].has_data = 1;
    snprintf(rows[2].name, sizeof rows[2].name, "%s.parameters.bias", call);
    snprintf(rows[2].role, sizeof rows[2].role, "parameters");
    rows[2].max = 2.0, rows[2].min = -1.0, rows[2].mean = 0.5, rows[2].norm = 3.0;
    rows[2].crc32 = 0xdeadbeefu;
    hid_t t = (hid_t)np_fmt_entry_h5type();
    hsize_t n = 3;
    hid_t sp = H5Screate_simple(1, &n, NULL);
    hid_t ds = H5Dcreate2(f, NP_FMT_ENTRIES, t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows);
    H5Dclose(ds);
    H5Sclose(sp);
    H5Tclose(t);
    hid_t g = H5Gcreate2(f, NP_FMT_DATA, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    float wv[4] = {0.5f, -0.25f, 3.0f, 1e-3f};
    hsize_t d1[1] = {4};
    f32_dataset(g, rows[1].name, wv, 1, d1, "bfloat16");
    H5Gclose(g);
    H5Fclose(f);

    cc_path(zip, sizeof zip, "dump.zip");
    np_cc_pack_opts o;
    memset(&o, 0, sizeof o);
    o.python = "";
    o.dump_path = dir;
    np_error err;
    np_error_clear(&err);
    CHECK_EQ_INT(np_cc_pack(zip, &o, &err), NP_OK);
    if (err.status)
        fprintf(stderr, "%s: %s: %s\n", err.file, err.key, err.text);
    json_t *w = cc_zip_json(zip, "weights.json");
    json_t *params = json_object_get(w, "params");
    CHECK_EQ_INT(json_object_size(params), 2);
    json_t *pw = json_object_get(params, "h.0.mlp.c_fc.weight");
    json_t *pb = json_object_get(params, "h.0.mlp.c_fc.bias");
    cc_path(raw, sizeof raw, "dw.raw");
    cc_write_file(raw, wv, sizeof wv);
    if (sha256sum(want, raw) == 0)
        CHECK_STREQ(json_string_value(json_object_get(pw, "sha256")), want);
    CHECK_STREQ(json_string_value(json_object_get(pw, "dtype")), "float32");
    CHECK_CLOSE(jnum(pw, "max"), 3.0, 0, 0);
    CHECK(json_object_get(pb, "sha256") == NULL);
    CHECK_STREQ(json_string_value(json_object_get(pb, "crc32")), "deadbeef");
    CHECK_CLOSE(jnum(pb, "norm"), 3.0, 0, 0);
    json_t *man = cc_zip_json(zip, "manifest.json");
    CHECK_CONTAINS(json_string_value(json_object_get(json_object_get(man, "collected"), "weights")),
                   "step0/rank0/dump.h5");
    json_decref(man);
    json_decref(w);
}

static void test_dataset_hyperparams(void)
{
    char d[600], f1[700], f2[700], zip[600], hj[600], hk[600], bad[600], want[128];
    cc_path(d, sizeof d, "data");
    mkdir(d, 0777);
    snprintf(f1, sizeof f1, "%s/a.bin", d);
    snprintf(f2, sizeof f2, "%s/b.bin", d);
    unsigned char buf[3000];
    for (int i = 0; i < 3000; i++)
        buf[i] = (unsigned char)(i * 7);
    cc_write_file(f1, buf, 3000);
    cc_write_file(f2, buf, 17);
    cc_path(hj, sizeof hj, "hp.json");
    const char *hjson = "{\"lr\": 0.001, \"optim\": {\"name\": \"adamw\", \"betas\": [0.9, 0.95]}}";
    cc_write_file(hj, hjson, strlen(hjson));
    const char *dsets[1] = {d};
    np_cc_pack_opts o;
    memset(&o, 0, sizeof o);
    o.python = "";
    o.datasets = dsets;
    o.n_datasets = 1;
    o.hyperparams_path = hj;
    o.seed = 1234;
    o.has_seed = 1;
    cc_path(zip, sizeof zip, "d.zip");
    np_error err;
    np_error_clear(&err);
    CHECK_EQ_INT(np_cc_pack(zip, &o, &err), NP_OK);
    json_t *dj = cc_zip_json(zip, "dataset.json");
    json_t *files = json_object_get(dj, "files");
    CHECK_EQ_INT(json_object_size(files), 2);
    if (sha256sum(want, f1) == 0)
        CHECK_STREQ(json_string_value(json_object_get(json_object_get(files, f1), "sha256")), want);
    if (sha256sum(want, f2) == 0)
        CHECK_STREQ(json_string_value(json_object_get(json_object_get(files, f2), "sha256")), want);
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(files, f1), "size")), 3000);
    json_decref(dj);
    json_t *h = cc_zip_json(zip, "hyperparameters.json");
    json_t *ref = json_loads(hjson, 0, NULL);
    CHECK(json_equal(h, ref));
    json_decref(ref);
    json_decref(h);
    json_t *r = cc_zip_json(zip, "random.json");
    CHECK_STREQ(json_string_value(json_object_get(r, "seed")), "1234");
    json_decref(r);

    /* key=value file */
    cc_path(hk, sizeof hk, "hp.txt");
    const char *kv = "# comment\nlr = 0.01\n\nbatch=32\n";
    cc_write_file(hk, kv, strlen(kv));
    o.hyperparams_path = hk;
    o.n_datasets = 0;
    CHECK_EQ_INT(np_cc_pack(zip, &o, &err), NP_OK);
    h = cc_zip_json(zip, "hyperparameters.json");
    CHECK_STREQ(json_string_value(json_object_get(h, "lr")), "0.01");
    CHECK_STREQ(json_string_value(json_object_get(h, "batch")), "32");
    CHECK_EQ_INT(json_object_size(h), 2);
    json_decref(h);

    /* malformed files: named, with the line */
    cc_path(bad, sizeof bad, "bad.json");
    cc_write_file(bad, "{\"lr\": 0.1,\n \"x\": }", 19);
    o.hyperparams_path = bad;
    np_error_clear(&err);
    CHECK_EQ_INT(np_cc_pack(zip, &o, &err), NP_ERR_JSON);
    CHECK_STREQ(err.file, bad);
    CHECK_EQ_INT(err.line, 2);
    cc_write_file(bad, "lr=1\nnot a pair\n", 16);
    np_error_clear(&err);
    CHECK_EQ_INT(np_cc_pack(zip, &o, &err), NP_ERR_CONFIG);
    CHECK_EQ_INT(err.line, 2);
    CHECK_CONTAINS(err.text, "not a pair");
    /* a failed pack leaves the previous one intact */
    h = cc_zip_json(zip, "hyperparameters.json");
    CHECK(h != NULL);
    json_decref(h);
}

static void test_pip(void)
{
    const char *py = getenv("NP_PYTHON");
    if (!py || access(py, X_OK) != 0) {
        fprintf(stderr, "NP_PYTHON not set: pip.txt not checked\n");
        return;
    }
    char zip[600];
    cc_path(zip, sizeof zip, "pip.zip");
    np_cc_pack_opts o;
    memset(&o, 0, sizeof o);
    o.python = py;
    np_error err;
    np_error_clear(&err);
    CHECK_EQ_INT(np_cc_pack(zip, &o, &err), NP_OK);
    char *pip = cc_zip_member(zip, "pip.txt", NULL);
    CHECK(pip != NULL);
    if (pip && cc_python_has("numpy")) {
        char cmd[600], ver[128], line[200];
        snprintf(cmd, sizeof cmd, "'%s' -c 'import numpy; print(numpy.__version__)'", py);
        if (cc_sh_out(cmd, ver, sizeof ver) == 0) {
            snprintf(line, sizeof line, "numpy==%s", ver);
            CHECK_CONTAINS(pip, line);
        }
    }
    free(pip);
}

int main(void)
{
    cc_mktemp();
    test_masking();
    test_env_and_members();
    test_checkpoint_weights();
    test_dump_weights();
    test_dataset_hyperparams();
    test_pip();
    return check_report();
}
