/* tests/msprobe/test_msprobe_json.c - the JSON pull reader and the
 * dump.json walk on hand-written documents (answers worked out by hand):
 * bare NaN/Infinity/-Infinity, nesting, escapes, syntax errors with their
 * positions; leaf names (nested arguments, kwargs, parameters,
 * parameters_grad, backward, null items), int64 null Mean/Norm, bool
 * Max/Min, md5 as CRC-32, the counts derived from infinite statistics. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "nprobe/msprobe.h"

/* All tokens of `doc` as a compact string: { } [ ] k:NAME s:STR n:NUM t f z */
static np_status tokens(char *out, size_t cap, const char *doc, np_error *err)
{
    np_json_reader r;
    np_json_init_mem(&r, doc, strlen(doc), "doc.json");
    size_t n = 0;
    out[0] = '\0';
    for (;;) {
        np_json_tok t;
        np_status st = np_json_next(&t, &r, err);
        if (st)
            return st;
        char buf[64], s[32];
        switch (t.type) {
        case NP_JSON_END: return NP_OK;
        case NP_JSON_OBJ: snprintf(buf, sizeof buf, "{"); break;
        case NP_JSON_OBJ_END: snprintf(buf, sizeof buf, "}"); break;
        case NP_JSON_ARR: snprintf(buf, sizeof buf, "["); break;
        case NP_JSON_ARR_END: snprintf(buf, sizeof buf, "]"); break;
        case NP_JSON_KEY:
        case NP_JSON_STR:
            np_json_str(s, sizeof s, &t);
            snprintf(buf, sizeof buf, "%c:%s", t.type == NP_JSON_KEY ? 'k' : 's', s);
            break;
        case NP_JSON_NUM: snprintf(buf, sizeof buf, "n:%g", t.num); break;
        case NP_JSON_TRUE: snprintf(buf, sizeof buf, "t"); break;
        case NP_JSON_FALSE: snprintf(buf, sizeof buf, "f"); break;
        case NP_JSON_NULL: snprintf(buf, sizeof buf, "z"); break;
        }
        n += (size_t)snprintf(out + n, cap - n, "%s%s", n ? " " : "", buf);
    }
}

static void test_tokens(void)
{
    char got[512];
    np_error err;
    np_error_clear(&err);
    CHECK_EQ_INT(tokens(got, sizeof got,
                        " {\"a\": [1, -2.5e3, NaN, Infinity, -Infinity, true, false, null],"
                        " \"b\\\"c\": {\"x\\u00e9\\n\": \"q\"}, \"e\": {}, \"f\": []}\n",
                        &err),
                 NP_OK);
    CHECK_STREQ(got, "{ k:a [ n:1 n:-2500 n:nan n:inf n:-inf t f z ] k:b\"c { k:x\xc3\xa9\n s:q } "
                     "k:e { } k:f [ ] }");
    /* names never end early: \u0000 (and a lone surrogate) read as U+FFFD
     * (a NUL cut "a\0b" to "a", so two names became one); a surrogate pair
     * is one 4-byte character (it was two 3-byte halves, not UTF-8) */
    np_error_clear(&err);
    CHECK_EQ_INT(tokens(got, sizeof got,
                        "{\"a\\u0000b\": \"\\ud83d\\ude00\", \"\\udc00x\\ud800\": \"\\u2028\"}",
                        &err),
                 NP_OK);
    CHECK_STREQ(got, "{ k:a\xef\xbf\xbd" "b s:\xf0\x9f\x98\x80 k:\xef\xbf\xbdx\xef\xbf\xbd "
                     "s:\xe2\x80\xa8 }");
    /* a number of any length (it was cut after 63 characters: refused) */
    np_error_clear(&err);
    CHECK_EQ_INT(tokens(got, sizeof got,
                        "[0.000000000000000000000000000000000000000000000000000000000000000000"
                        "0000000000000000000000000000000025, 1000000000000000000000000000000000"
                        "00000000000000000000000000000000000000e-70]",
                        &err),
                 NP_OK);
    CHECK_STREQ(got, "[ n:2.5e-99 n:10 ]");
    struct { const char *doc; long line, col; const char *text; } bad[] = {
        {"{\"a\": [1, 2}", 1, 12, "unexpected '}'"},
        {"{\"a\": 1,\n \"b\": }", 2, 7, "expected a value"},
        {"{\"a\": 1} x", 1, 10, "text after the end"},
        {"{\"a\": [1, 2,", 1, 13, "truncated"},
        {"{\"a\" 1}", 1, 6, "expected ':'"},
        {"{\"a\": nan}", 1, 7, "expected a value"},
        {"{\"a\": \"x", 1, 9, "unterminated string"},
        {"[1 2]", 1, 4, "expected ','"},
        {"{1: 2}", 1, 2, "expected a key"},
        {"", 1, 1, "truncated"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        np_error_clear(&err);
        CHECK_EQ_INT(tokens(got, sizeof got, bad[i].doc, &err), NP_ERR_JSON);
        CHECK_EQ_INT(err.line, bad[i].line);
        CHECK_EQ_INT(err.column, bad[i].col);
        CHECK_CONTAINS(err.text, bad[i].text);
        CHECK_STREQ(err.file, "doc.json");
    }
    /* depth limit */
    char deep[NP_JSON_MAX_DEPTH + 8];
    memset(deep, '[', sizeof deep - 1);
    deep[sizeof deep - 1] = '\0';
    np_error_clear(&err);
    CHECK_EQ_INT(tokens(got, sizeof got, deep, &err), NP_ERR_LIMIT);
    /* skip over a nested value */
    np_json_reader r;
    const char *doc = "{\"skip\": {\"a\": [1, {\"b\": [2]}]}, \"keep\": 7}";
    np_json_init_mem(&r, doc, strlen(doc), "doc.json");
    np_json_tok t;
    np_error_clear(&err);
    CHECK_EQ_INT(np_json_next(&t, &r, &err), NP_OK);
    CHECK_EQ_INT(np_json_next(&t, &r, &err), NP_OK);
    CHECK(np_json_is(&t, "skip"));
    CHECK_EQ_INT(np_json_next(&t, &r, &err), NP_OK);
    CHECK_EQ_INT(np_json_skip(&r, &t, &err), NP_OK);
    CHECK_EQ_INT(np_json_next(&t, &r, &err), NP_OK);
    CHECK(np_json_is(&t, "keep"));
    CHECK_EQ_INT(np_json_next(&t, &r, &err), NP_OK);
    CHECK_CLOSE(t.num, 7, 0, 0);
}

/* ---- dump.json -------------------------------------------------------- */

#define MAXL 64
typedef struct seen {
    np_msp_entry e[MAXL];
    int n;
    char calls[16][NP_FMT_NAME_LEN];
    int64_t seqs[16];
    int ncalls;
} seen;

static int on_entry(void *user, const np_msp_entry *e, np_error *err)
{
    seen *s = user;
    if (s->n < MAXL)
        s->e[s->n++] = *e;
    return 0;
}

static int on_call(void *user, const char *call, int64_t seq, np_error *err)
{
    seen *s = user;
    if (s->ncalls < 16) {
        snprintf(s->calls[s->ncalls], NP_FMT_NAME_LEN, "%s", call);
        s->seqs[s->ncalls++] = seq;
    }
    return 0;
}

static const np_msp_entry *find(const seen *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->e[i].rec.name, name))
            return &s->e[i];
    fprintf(stderr, "leaf %s not read\n", name);
    return NULL;
}

static const char *write_tmp(char *path, size_t cap, const char *text)
{
    snprintf(path, cap, "%s/np_msp_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

#define T(dtype, shape, mx, mn, mean, norm, extra)                                          \
    "{\"type\": \"torch.Tensor\", \"dtype\": \"torch." dtype "\", \"shape\": " shape          \
    ", \"Max\": " mx ", \"Min\": " mn ", \"Mean\": " mean ", \"Norm\": " norm                 \
    ", \"requires_grad\": true" extra "}"

static const char dump_doc[] =
    "{\"task\": \"statistics\", \"level\": \"mix\", \"framework\": \"pytorch\",\n"
    " \"dump_data_dir\": \"/far/away\", \"data\": {\n"
    "  \"Functional.linear.0.forward\": {\"input_args\": ["
    T("float32", "[2, 3]", "1.5", "-Infinity", "-Infinity", "Infinity", "") ", ["
    T("bfloat16", "[3]", "NaN", "NaN", "NaN", "NaN", "") ", null], {\"type\": \"int\", \"value\": 3}],"
    "   \"input_kwargs\": {\"eps\": {\"type\": \"float\", \"value\": -1e-05},"
    " \"dtype\": {\"type\": \"torch.dtype\", \"value\": \"torch.float32\"}},"
    "   \"output\": [" T("int64", "[4]", "7", "-2", "null", "null", ", \"md5\": \"0a1b2c3d\"") "]},\n"
    "  \"Module.fc.Linear.forward.0\": {\"input_args\": [], \"input_kwargs\": {}, \"output\": ["
    T("bool", "[]", "true", "false", "null", "null", "") "], \"parameters\": {\"weight\": "
    T("float32", "[3, 2]", "1", "0", "0.5", "2", "") "}},\n"
    "  \"Functional.linear.0.backward\": {\"input\": ["
    T("float32", "[2, 3]", "1", "0", "0.5", "2", "") "], \"output\": [null, "
    T("float32", "[3]", "1", "0", "0.5", "2", "") "]},\n"
    "  \"Module.fc.Linear.parameters_grad.0\": {\"weight\": ["
    T("float32", "[3, 2]", "1", "0", "0.5", "2", ", \"data_name\": \"x.pt\"") "]}\n"
    " }}\n";

static void test_dump_json(void)
{
    char path[512];
    CHECK(write_tmp(path, sizeof path, dump_doc) != NULL);
    seen *s = calloc(1, sizeof *s);
    np_msp_sink sink = {on_call, on_entry, s};
    np_msp_header h;
    np_error err;
    np_error_clear(&err);
    CHECK_EQ_INT(np_msp_read_dump_json(&h, path, &sink, &err), NP_OK);
    if (err.status)
        fprintf(stderr, "%s:%ld:%ld: %s\n", err.file, err.line, err.column, err.text);
    CHECK_STREQ(h.task, "statistics");
    CHECK_STREQ(h.level, "mix");
    CHECK_EQ_INT(h.n_calls, 4);
    CHECK_EQ_INT(s->ncalls, 4);
    CHECK_STREQ(s->calls[3], "Module.fc.Linear.parameters_grad");
    CHECK_EQ_INT(s->seqs[3], 3);
    CHECK_EQ_INT(s->n, 13);
    CHECK_EQ_INT(h.n_entries, 13);
    const np_msp_entry *e = find(s, "Functional.linear.0.forward.input.0");
    if (e) {
        CHECK_STREQ(e->rec.dtype, "float32");
        CHECK_EQ_INT(e->rec.ndim, 2);
        CHECK_EQ_INT(e->rec.numel, 6);
        CHECK_CLOSE(e->rec.max, 1.5, 0, 0);
        CHECK(isinf(e->rec.min) && e->rec.min < 0);
        CHECK_EQ_INT(e->rec.neginf_count, 1);
        CHECK_EQ_INT(e->rec.posinf_count, 0); /* max finite: an infinite norm names no sign */
        CHECK_STREQ(e->rec.role, "input");
        CHECK_STREQ(e->rec.call, "Functional.linear.0.forward");
        CHECK_EQ_INT(e->raw_stats, 1);
    }
    if ((e = find(s, "Functional.linear.0.forward.input.1.0"))) {
        CHECK_STREQ(e->msp_name, "Functional.linear.0.forward.input.1.0");
        CHECK_STREQ(e->rec.dtype, "bfloat16");
        CHECK_EQ_INT(e->rec.nan_count, 1);
    }
    if ((e = find(s, "Functional.linear.0.forward.input.1.1")))
        CHECK_EQ_INT(e->kind, NP_MSP_NONE);
    if ((e = find(s, "Functional.linear.0.forward.input.2"))) {
        CHECK_EQ_INT(e->kind, NP_MSP_SCALAR);
        CHECK_STREQ(e->rec.dtype, "int64");
        CHECK_CLOSE(e->rec.max, 3, 0, 0);
    }
    if ((e = find(s, "Functional.linear.0.forward.kwargs.eps"))) {
        CHECK_STREQ(e->msp_name, "Functional.linear.0.forward.input.eps");
        CHECK_STREQ(e->rec.role, "kwargs");
        CHECK_CLOSE(e->rec.mean, -1e-05, 0, 0);
        CHECK_CLOSE(e->rec.norm, -1e-05, 0, 0); /* msprobe: the value in all four */
        CHECK_EQ_INT(e->rec.numel, 1);
    }
    if ((e = find(s, "Functional.linear.0.forward.kwargs.dtype")))
        CHECK_EQ_INT(e->kind, NP_MSP_OTHER);
    if ((e = find(s, "Functional.linear.0.forward.output.0"))) {
        CHECK_STREQ(e->rec.dtype, "int64");
        CHECK(isnan(e->rec.mean) && isnan(e->rec.norm));
        CHECK_EQ_INT(e->rec.nan_count, 0);
        CHECK_EQ_INT(e->rec.crc32, 0x0a1b2c3d);
    }
    if ((e = find(s, "Module.fc.Linear.forward.0.output.0"))) {
        CHECK_CLOSE(e->rec.max, 1, 0, 0);
        CHECK_CLOSE(e->rec.min, 0, 0, 0);
        CHECK_EQ_INT(e->rec.ndim, 0);
        CHECK_EQ_INT(e->rec.numel, 1);
    }
    if ((e = find(s, "Module.fc.Linear.forward.0.parameters.weight")))
        CHECK_STREQ(e->rec.role, "parameters");
    if ((e = find(s, "Functional.linear.0.backward.output.1")))
        CHECK_STREQ(e->rec.call, "Functional.linear.0.backward");
    if ((e = find(s, "Module.fc.Linear.parameters_grad.weight"))) {
        CHECK_STREQ(e->msp_name, "Module.fc.Linear.parameters_grad.0.weight");
        CHECK_STREQ(e->rec.role, "parameters_grad");
        CHECK_STREQ(e->data_name, "x.pt");
        CHECK_EQ_INT(e->rec.has_data, 1);
    }
    unlink(path);
    free(s);
}

static void test_dump_json_errors(void)
{
    struct { const char *doc; np_status st; const char *text; } bad[] = {
        {"[1, 2]", NP_ERR_FORMAT, "not a msprobe dump.json"},
        {"{\"task\": \"tensor\"}", NP_ERR_FORMAT, "no \"data\""},
        {"{\"data\": {\"A.0.forward\": {\"output\": [{\"type\": \"torch.Tensor\", \"shape\": "
         "[-1]}]}}}",
         NP_ERR_FORMAT, "shape"},
        {"{\"data\": {\"A.0.forward\": {\"output\": [{\"type\": \"torch.Tensor\", \"md5\": "
         "\"xyz\"}]}}}",
         NP_ERR_FORMAT, "8 hex digits"},
        {"{\"data\": {\"A.0.forward\": {\"output\": [{\"type\": \"torch.Tensor\", \"Max\": "
         "[1]}]}}}",
         NP_ERR_FORMAT, "Max"},
        {"{\"data\": {\"A.0.forward\": {\"output\": [{\"type\": \"torch.Tensor\", \"Max\": 1",
         NP_ERR_JSON, "truncated"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char path[512];
        CHECK(write_tmp(path, sizeof path, bad[i].doc) != NULL);
        np_error err;
        np_error_clear(&err);
        CHECK_EQ_INT(np_msp_read_dump_json(NULL, path, NULL, &err), bad[i].st);
        CHECK_CONTAINS(err.text, bad[i].text);
        CHECK_STREQ(err.file, path);
        unlink(path);
    }
    /* a hand-edited dump.json nested 1000 levels deep: refused at the
     * reader's depth limit, file named, no recursion to the stack's end */
    {
        static const char head[] = "{\"data\": {\"A.0.forward\": {\"input_args\": ";
        size_t depth = 1000, n = sizeof head - 1;
        char *doc = malloc(n + 2 * depth + 8);
        CHECK(doc != NULL);
        if (doc) {
            memcpy(doc, head, n);
            memset(doc + n, '[', depth);
            memset(doc + n + depth, ']', depth);
            memcpy(doc + n + 2 * depth, "}}}", 4);
            char path[512];
            CHECK(write_tmp(path, sizeof path, doc) != NULL);
            np_error e;
            np_error_clear(&e);
            CHECK_EQ_INT(np_msp_read_dump_json(NULL, path, NULL, &e), NP_ERR_LIMIT);
            CHECK_CONTAINS(e.text, "nested deeper than");
            CHECK_STREQ(e.file, path);
            unlink(path);
            free(doc);
        }
    }
    np_error err;
    np_error_clear(&err);
    CHECK_EQ_INT(np_msp_read_dump_json(NULL, "/nonexistent/dump.json", NULL, &err),
                 NP_ERR_NOTFOUND);
    char out[256];
    np_error_clear(&err);
    CHECK_EQ_INT(np_msp_data_path(out, sizeof out, "d", "../x.pt", &err), NP_ERR_FORMAT);
    CHECK_EQ_INT(np_msp_data_path(out, sizeof out, "d", "..", NULL), NP_ERR_FORMAT);
    CHECK_EQ_INT(np_msp_data_path(out, sizeof out, "d", "a.pt", NULL), NP_OK);
    CHECK_STREQ(out, "d/dump_tensor_data/a.pt");
}

int main(void)
{
    test_tokens();
    test_dump_json();
    test_dump_json_errors();
    return check_report();
}
