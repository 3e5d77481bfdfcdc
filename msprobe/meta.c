/* msprobe/meta.c - construct.json (call -> parent module call) and
 * stack.json (callsites) of a msprobe dump, streamed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nprobe/msprobe.h"

static np_status stop(np_json_reader *r, np_error *err, const char *key)
{
    return err && err->status ? err->status
                              : np_error_set(err, NP_ERR_INTERNAL, r->name, key, "reading stopped");
}

static np_status expect_obj(np_json_reader *r, np_error *err, const char *what)
{
    np_json_tok t;
    np_status st = np_json_next(&t, r, err);
    if (!st && t.type != NP_JSON_OBJ)
        st = np_json_error(r, err, NP_ERR_FORMAT, NULL, "expected an object (%s)", what);
    return st;
}

np_status np_msp_read_construct(const char *path, np_msp_pair_fn fn, void *user, np_error *err)
{
    np_json_reader r;
    np_status st = np_json_open_file(&r, path, err);
    if (st)
        return st;
    st = expect_obj(&r, err, "call -> parent call");
    while (!st) {
        np_json_tok k, v;
        if ((st = np_json_next(&k, &r, err)) || k.type == NP_JSON_OBJ_END)
            break;
        char call[NP_FMT_NAME_LEN], parent[NP_FMT_NAME_LEN], c2[NP_FMT_NAME_LEN],
            p2[NP_FMT_NAME_LEN];
        np_json_str(call, sizeof call, &k);
        if ((st = np_json_next(&v, &r, err)))
            break;
        parent[0] = '\0';
        if (v.type == NP_JSON_STR)
            np_json_str(parent, sizeof parent, &v);
        else if (v.type != NP_JSON_NULL)
            st = np_json_error(&r, err, NP_ERR_FORMAT, call, "expected a call name or null");
        if (!st && (np_msp_call_name(c2, sizeof c2, call) || np_msp_call_name(p2, sizeof p2, parent)))
            st = np_json_error(&r, err, NP_ERR_LIMIT, call, "name too long");
        if (!st && fn && fn(user, c2, p2, err))
            st = stop(&r, err, call);
    }
    if (!st) {
        np_json_tok e;
        st = np_json_next(&e, &r, err);
    }
    np_json_close(&r);
    return st;
}

/* "File /a/b/x.py, line 77, in forward, \n code" -> "x.py:77 in forward";
 * 0 when the frame is in torch or msprobe (or not a frame). */
static int user_frame(char *site, size_t cap, const char *frame)
{
    static const char *const internal[] = {"/torch/", "/msprobe/", "site-packages",
                                           "dist-packages", "<frozen"};
    if (strncmp(frame, "File ", 5) != 0)
        return 0;
    const char *path = frame + 5, *comma = strchr(path, ',');
    if (!comma)
        return 0;
    for (size_t i = 0; i < sizeof internal / sizeof internal[0]; i++) {
        const char *hit = strstr(path, internal[i]);
        if (hit && hit < comma)
            return 0;
    }
    const char *base = path;
    for (const char *q = path; q < comma; q++)
        if (*q == '/' || *q == '\\')
            base = q + 1;
    long line = 0;
    char fn[64] = "";
    const char *l = strstr(comma, ", line ");
    if (l)
        line = strtol(l + 7, NULL, 10);
    const char *in = l ? strstr(l, ", in ") : NULL;
    if (in) {
        size_t n = strcspn(in + 5, ", \n");
        snprintf(fn, sizeof fn, "%.*s", (int)(n < 63 ? n : 63), in + 5);
    }
    snprintf(site, cap, "%.*s:%ld%s%s", (int)(comma - base > 80 ? 80 : comma - base), base, line,
             fn[0] ? " in " : "", fn);
    return 1;
}

/* A list of frames ('[' read): the first user frame into site ("" if none). */
static np_status read_frames(np_json_reader *r, char *site, size_t cap, np_error *err)
{
    site[0] = '\0';
    for (;;) {
        np_json_tok t;
        np_status st = np_json_next(&t, r, err);
        if (st || t.type == NP_JSON_ARR_END)
            return st;
        if (t.type != NP_JSON_STR) {
            if ((st = np_json_skip(r, &t, err)))
                return st;
            continue;
        }
        char frame[512];
        np_json_str(frame, sizeof frame, &t);
        if (!site[0])
            user_frame(site, cap, frame);
    }
}

typedef struct names {
    char (*v)[NP_FMT_NAME_LEN];
    size_t n, cap;
} names;

static int names_add(names *s, const np_json_tok *t)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        void *v = realloc(s->v, cap * sizeof *s->v);
        if (!v)
            return -1;
        s->v = v;
        s->cap = cap;
    }
    char raw[NP_FMT_NAME_LEN];
    np_json_str(raw, sizeof raw, t);
    return np_msp_call_name(s->v[s->n++], NP_FMT_NAME_LEN, raw);
}

/* msprobe 26: [[call, ...], [frame, ...]] ('[' read, the first '[' next). */
static np_status read_stack_group(np_json_reader *r, names *s, np_msp_pair_fn fn, void *user,
                                  np_error *err)
{
    np_json_tok t;
    char site[NP_FMT_SITE_LEN] = "";
    s->n = 0;
    np_status st = np_json_next(&t, r, err);
    if (!st && t.type != NP_JSON_ARR)
        st = np_json_error(r, err, NP_ERR_FORMAT, NULL, "expected [[calls], [frames]]");
    while (!st) {
        if ((st = np_json_next(&t, r, err)) || t.type == NP_JSON_ARR_END)
            break;
        if (t.type != NP_JSON_STR)
            st = np_json_error(r, err, NP_ERR_FORMAT, NULL, "expected a call name");
        else if (names_add(s, &t))
            st = np_json_error(r, err, NP_ERR_NOMEM, NULL, "out of memory or name too long");
    }
    if (!st && !(st = np_json_next(&t, r, err)) && t.type == NP_JSON_ARR)
        st = read_frames(r, site, sizeof site, err);
    else if (!st && t.type != NP_JSON_ARR_END)
        st = np_json_skip(r, &t, err);
    while (!st && t.type != NP_JSON_ARR_END) {
        if (!(st = np_json_next(&t, r, err)))
            st = np_json_skip(r, &t, err);
    }
    for (size_t i = 0; !st && i < s->n; i++)
        if (fn && fn(user, s->v[i], site, err))
            st = stop(r, err, s->v[i]);
    return st;
}

np_status np_msp_read_stack(const char *path, np_msp_pair_fn fn, void *user, np_error *err)
{
    np_json_reader r;
    names s = {0};
    np_status st = np_json_open_file(&r, path, err);
    if (st)
        return st;
    st = expect_obj(&r, err, "stack groups");
    while (!st) {
        np_json_tok k, v;
        if ((st = np_json_next(&k, &r, err)) || k.type == NP_JSON_OBJ_END)
            break;
        char key[NP_FMT_NAME_LEN], call[NP_FMT_NAME_LEN];
        np_json_str(key, sizeof key, &k);
        if ((st = np_json_next(&v, &r, err)))
            break;
        if (v.type != NP_JSON_ARR) {
            st = np_json_skip(&r, &v, err);
            continue;
        }
        /* peek: 26.x groups start with a list of calls, 8.x lists frames */
        const char *save = r.p;
        int state = r.state, depth = r.depth;
        np_json_tok f;
        if ((st = np_json_next(&f, &r, err)))
            break;
        r.p = save;
        r.state = state;
        r.depth = depth;
        if (f.type == NP_JSON_ARR) {
            st = read_stack_group(&r, &s, fn, user, err);
        } else {
            char site[NP_FMT_SITE_LEN];
            st = read_frames(&r, site, sizeof site, err);
            if (!st && np_msp_call_name(call, sizeof call, key))
                st = np_json_error(&r, err, NP_ERR_LIMIT, key, "name too long");
            if (!st && fn && fn(user, call, site, err))
                st = stop(&r, err, key);
        }
    }
    free(s.v);
    np_json_close(&r);
    return st;
}
