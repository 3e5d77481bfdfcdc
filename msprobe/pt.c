/* msprobe/pt.c - a torch.save file of one tensor, read without Python.
 *
 * The file is a zip whose members are stored (torch never compresses them),
 * aligned to 64 bytes, with sizes in the central directory (the local
 * headers carry data descriptors): {archive}/data.pkl, {archive}/data/{key}
 * (the raw little-endian storage), {archive}/version. data.pkl is pickle
 * protocol 2 that calls torch._utils._rebuild_tensor_v2(storage, offset,
 * size, stride, requires_grad, hooks) on a persistent id ('storage',
 * torch.XStorage, key, location, numel). The interpreter below knows the
 * opcodes and globals of that program and nothing else: any other opcode or
 * global is refused, nothing is ever called. The whole file is mapped; the
 * storage is read in place. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nprobe/msprobe.h"

#define MAX_MEMBERS 64
#define MAX_OBJS 1024
#define MAX_KIDS 4096
#define MAX_STACK 256
#define MAX_MEMO 256

/* ---- zip ----------------------------------------------------------------- */

typedef struct member {
    const char *name;
    size_t name_len;
    uint64_t pos, size; /* data position and size in the file */
} member;

typedef struct zipdir {
    member m[MAX_MEMBERS];
    int n;
} zipdir;

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const uint8_t *p) { return (uint32_t)rd16(p) | (uint32_t)rd16(p + 2) << 16; }
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

/* The central directory's position, size and count (zip64 aware). */
static np_status find_cd(uint64_t *cd, uint64_t *cd_size, uint64_t *count, const uint8_t *f,
                         uint64_t len, const char *path, np_error *err)
{
    if (len < 22)
        return np_error_set(err, NP_ERR_FORMAT, path, NULL, "not a zip file (too short for a .pt)");
    uint64_t lo = len > 65557 ? len - 65557 : 0, e = len - 22;
    int found = 0;
    for (;; e--) {
        if (rd32(f + e) == 0x06054b50u) {
            found = 1;
            break;
        }
        if (e == lo)
            break;
    }
    if (!found)
        return np_error_set(err, NP_ERR_FORMAT, path, NULL,
                            "not a zip file (no end of central directory): not a torch.save .pt");
    *count = rd16(f + e + 10);
    *cd_size = rd32(f + e + 12);
    *cd = rd32(f + e + 16);
    if (*count == 0xFFFF || *cd_size == 0xFFFFFFFFu || *cd == 0xFFFFFFFFu) {
        if (e < 20 || rd32(f + e - 20) != 0x07064b50u)
            return np_error_set(err, NP_ERR_FORMAT, path, NULL, "zip64 locator missing");
        uint64_t z = rd64(f + e - 20 + 8);
        if (len < 56 || z > len - 56 || rd32(f + z) != 0x06064b50u)
            return np_error_set(err, NP_ERR_FORMAT, path, NULL, "zip64 end record out of the file");
        *count = rd64(f + z + 32);
        *cd_size = rd64(f + z + 40);
        *cd = rd64(f + z + 48);
    }
    if (*cd > len || *cd_size > len - *cd)
        return np_error_set(err, NP_ERR_FORMAT, path, NULL,
                            "central directory outside the file (truncated .pt?)");
    if (*count > MAX_MEMBERS)
        return np_error_set(err, NP_ERR_LIMIT, path, NULL,
                            "%llu zip members: a tensor .pt has a handful (at most %d read)",
                            (unsigned long long)*count, MAX_MEMBERS);
    return NP_OK;
}

/* zip64 extra field: replace the 0xFFFFFFFF sizes/offset. */
static void zip64_extra(uint64_t *usize, uint64_t *csize, uint64_t *off, const uint8_t *x,
                        size_t n)
{
    for (size_t i = 0; i + 4 <= n;) {
        uint16_t id = rd16(x + i), sz = rd16(x + i + 2);
        if (i + 4 + sz > n)
            return;
        if (id == 1) {
            const uint8_t *v = x + i + 4, *ve = v + sz;
            uint64_t *f[3] = {usize, csize, off};
            for (int k = 0; k < 3; k++)
                if (*f[k] == 0xFFFFFFFFu && v + 8 <= ve) {
                    *f[k] = rd64(v);
                    v += 8;
                }
        }
        i += 4 + (size_t)sz;
    }
}

static np_status read_zip(zipdir *z, const uint8_t *f, uint64_t len, const char *path,
                          np_error *err)
{
    uint64_t cd = 0, cd_size = 0, count = 0;
    np_status st = find_cd(&cd, &cd_size, &count, f, len, path, err);
    if (st)
        return st;
    uint64_t p = cd, end = cd + cd_size;
    z->n = 0;
    for (uint64_t i = 0; i < count; i++) {
        if (p + 46 > end || rd32(f + p) != 0x02014b50u)
            return np_error_set(err, NP_ERR_FORMAT, path, NULL, "corrupt zip central directory");
        uint16_t method = rd16(f + p + 10), nl = rd16(f + p + 28), xl = rd16(f + p + 30),
                 cl = rd16(f + p + 32);
        uint64_t csize = rd32(f + p + 20), usize = rd32(f + p + 24), off = rd32(f + p + 42);
        if (p + 46 + nl + xl + cl > end)
            return np_error_set(err, NP_ERR_FORMAT, path, NULL, "corrupt zip central directory");
        zip64_extra(&usize, &csize, &off, f + p + 46 + nl, xl);
        member *m = &z->m[z->n++];
        m->name = (const char *)f + p + 46;
        m->name_len = nl;
        if (method != 0 || csize != usize)
            return np_error_set(err, NP_ERR_UNSUPPORTED, path, NULL,
                                "zip member %.*s is compressed (method %u): torch.save stores "
                                "members, and nprobe never inflates a .pt (zip bomb guard)",
                                (int)nl, m->name, method);
        if (len < 30 || off > len - 30 || rd32(f + off) != 0x04034b50u)
            return np_error_set(err, NP_ERR_FORMAT, path, NULL,
                                "zip member %.*s: local header outside the file", (int)nl, m->name);
        m->pos = off + 30 + rd16(f + off + 26) + rd16(f + off + 28);
        m->size = usize;
        if (m->pos > len || m->size > len - m->pos)
            return np_error_set(err, NP_ERR_FORMAT, path, NULL,
                                "zip member %.*s: %llu bytes past the end of the file (truncated?)",
                                (int)nl, m->name, (unsigned long long)m->size);
        p += 46 + (uint64_t)nl + xl + cl;
    }
    return NP_OK;
}

static const member *zip_find(const zipdir *z, const char *prefix, size_t plen, const char *rest)
{
    size_t rl = strlen(rest);
    for (int i = 0; i < z->n; i++) {
        const member *m = &z->m[i];
        if (m->name_len == plen + rl && !memcmp(m->name, prefix, plen) &&
            !memcmp(m->name + plen, rest, rl))
            return m;
    }
    return NULL;
}

/* ---- the pickle subset ----------------------------------------------------- */

enum {
    K_MARK = 0, K_NONE, K_BOOL, K_INT, K_FLOAT, K_STR, K_TUPLE, K_LIST, K_DICT,
    K_G_REBUILD, K_G_PARAM, K_G_ODICT, K_G_STORAGE, K_PERSID, K_TENSOR
};

typedef struct pobj {
    int kind;
    int64_t i;          /* INT, BOOL; G_STORAGE/PERSID: dtype index; PERSID: numel in i2 */
    int64_t i2;
    const char *s;      /* STR; PERSID: storage key */
    size_t slen;
    int first, n;       /* TUPLE: children kids[first..first+n) */
} pobj;

typedef struct pvm {
    const uint8_t *p, *end, *start;
    const char *path;
    pobj obj[MAX_OBJS];
    int nobj;
    int kids[MAX_KIDS];
    int nkids;
    int stack[MAX_STACK];
    int sp;
    int memo[MAX_MEMO];
    np_pt_tensor *t;
    np_error *err;
} pvm;

static const struct { const char *storage, *dtype; int size; } storages[] = {
    {"FloatStorage", "float32", 4}, {"BFloat16Storage", "bfloat16", 2},
    {"HalfStorage", "float16", 2},  {"DoubleStorage", "float64", 8},
    {"LongStorage", "int64", 8},    {"IntStorage", "int32", 4},
    {"ShortStorage", "int16", 2},   {"CharStorage", "int8", 1},
    {"ByteStorage", "uint8", 1},    {"BoolStorage", "bool", 1},
};
#define N_STORAGES ((int)(sizeof storages / sizeof storages[0]))

static np_status vm_fail(pvm *v, const char *fmt, const char *what)
{
    return np_error_set(v->err, NP_ERR_FORMAT, v->path, "data.pkl",
                        "data.pkl byte %ld: %s%s: not a tensor saved by torch.save (refused, "
                        "nothing executed)",
                        (long)(v->p - v->start), fmt, what ? what : "");
}

static int vm_new(pvm *v, int kind)
{
    if (v->nobj >= MAX_OBJS)
        return -1;
    memset(&v->obj[v->nobj], 0, sizeof v->obj[0]);
    v->obj[v->nobj].kind = kind;
    return v->nobj++;
}

static np_status vm_push(pvm *v, int o)
{
    if (o < 0 || v->sp >= MAX_STACK)
        return vm_fail(v, "pickle too large for a tensor", NULL);
    v->stack[v->sp++] = o;
    return NP_OK;
}

static np_status vm_push_new(pvm *v, int kind, int64_t i)
{
    int o = vm_new(v, kind);
    if (o >= 0)
        v->obj[o].i = i;
    return vm_push(v, o);
}

static int vm_need(pvm *v, size_t n)
{
    return (size_t)(v->end - v->p) >= n;
}

/* GLOBAL "module\nname\n": only the callables a tensor save names. */
static np_status op_global(pvm *v)
{
    const uint8_t *nl1 = memchr(v->p, '\n', (size_t)(v->end - v->p));
    const uint8_t *nl2 = nl1 ? memchr(nl1 + 1, '\n', (size_t)(v->end - nl1 - 1)) : NULL;
    if (!nl2)
        return vm_fail(v, "GLOBAL without its two lines", NULL);
    char g[160];
    snprintf(g, sizeof g, "%.*s.%.*s", (int)(nl1 - v->p < 70 ? nl1 - v->p : 70), (const char *)v->p,
             (int)(nl2 - nl1 - 1 < 70 ? nl2 - nl1 - 1 : 70), (const char *)nl1 + 1);
    v->p = nl2 + 1;
    if (!strcmp(g, "torch._utils._rebuild_tensor_v2"))
        return vm_push_new(v, K_G_REBUILD, 0);
    if (!strcmp(g, "torch._utils._rebuild_parameter"))
        return vm_push_new(v, K_G_PARAM, 0);
    if (!strcmp(g, "collections.OrderedDict"))
        return vm_push_new(v, K_G_ODICT, 0);
    for (int i = 0; i < N_STORAGES; i++)
        if (!strncmp(g, "torch.", 6) && !strcmp(g + 6, storages[i].storage))
            return vm_push_new(v, K_G_STORAGE, i);
    return vm_fail(v, "global not allowed: ", g);
}

static int64_t vm_int_arg(pvm *v, int n)
{
    int64_t x = 0;
    for (int k = n - 1; k >= 0; k--)
        x = x << 8 | v->p[k];
    if (n == 4)
        x = (int32_t)(uint32_t)x;
    v->p += n;
    return x;
}

/* Pop everything down to the last MARK into a tuple. */
static np_status op_tuple_mark(pvm *v, int kind)
{
    int m = v->sp - 1;
    while (m >= 0 && v->obj[v->stack[m]].kind != K_MARK)
        m--;
    if (m < 0)
        return vm_fail(v, "TUPLE without MARK", NULL);
    int n = v->sp - m - 1, o = vm_new(v, kind);
    if (o < 0 || v->nkids + n > MAX_KIDS)
        return vm_fail(v, "pickle too large for a tensor", NULL);
    v->obj[o].first = v->nkids;
    v->obj[o].n = n;
    for (int k = 0; k < n; k++)
        v->kids[v->nkids++] = v->stack[m + 1 + k];
    v->sp = m;
    return vm_push(v, o);
}

static np_status op_tuple_n(pvm *v, int n)
{
    if (v->sp < n)
        return vm_fail(v, "stack underflow", NULL);
    int o = vm_new(v, K_TUPLE);
    if (o < 0 || v->nkids + n > MAX_KIDS)
        return vm_fail(v, "pickle too large for a tensor", NULL);
    v->obj[o].first = v->nkids;
    v->obj[o].n = n;
    for (int k = 0; k < n; k++)
        v->kids[v->nkids++] = v->stack[v->sp - n + k];
    v->sp -= n;
    return vm_push(v, o);
}

static const pobj *kid(const pvm *v, const pobj *t, int k)
{
    return &v->obj[v->kids[t->first + k]];
}

/* ('storage', torch.XStorage, key, location, numel) -> PERSID */
static np_status op_persid(pvm *v)
{
    if (v->sp < 1)
        return vm_fail(v, "stack underflow", NULL);
    const pobj *t = &v->obj[v->stack[--v->sp]];
    if (t->kind != K_TUPLE || t->n != 5 || kid(v, t, 0)->kind != K_STR ||
        kid(v, t, 0)->slen != 7 || memcmp(kid(v, t, 0)->s, "storage", 7) ||
        kid(v, t, 1)->kind != K_G_STORAGE || kid(v, t, 2)->kind != K_STR ||
        kid(v, t, 4)->kind != K_INT || kid(v, t, 4)->i < 0)
        return vm_fail(v, "persistent id is not ('storage', type, key, location, numel)", NULL);
    int o = vm_new(v, K_PERSID);
    if (o < 0)
        return vm_fail(v, "pickle too large for a tensor", NULL);
    v->obj[o].i = kid(v, t, 1)->i;
    v->obj[o].s = kid(v, t, 2)->s;
    v->obj[o].slen = kid(v, t, 2)->slen;
    v->obj[o].i2 = kid(v, t, 4)->i;
    return vm_push(v, o);
}

/* Tuple of ints (size or stride) into out[]; -1 when not one. */
static int int_tuple(const pvm *v, const pobj *t, int64_t *out)
{
    if (t->kind != K_TUPLE || t->n > NP_FMT_MAX_DIMS)
        return -1;
    for (int k = 0; k < t->n; k++) {
        const pobj *x = kid(v, t, k);
        if (x->kind != K_INT || x->i < 0 || x->i > ((int64_t)1 << 48))
            return -1;
        out[k] = x->i;
    }
    return t->n;
}

static np_status rebuild_v2(pvm *v, const pobj *args, const char **key, size_t *key_len)
{
    np_pt_tensor *t = v->t;
    if (args->kind != K_TUPLE || args->n < 6 || args->n > 7)
        return vm_fail(v, "_rebuild_tensor_v2 takes 6 or 7 arguments", NULL);
    const pobj *ps = kid(v, args, 0), *off = kid(v, args, 1), *rg = kid(v, args, 4);
    int64_t stride[NP_FMT_MAX_DIMS];
    int nd = int_tuple(v, kid(v, args, 2), t->shape);
    int ns = int_tuple(v, kid(v, args, 3), stride);
    if (ps->kind != K_PERSID || off->kind != K_INT || off->i < 0 || nd < 0 || ns != nd ||
        (rg->kind != K_BOOL && rg->kind != K_INT))
        return vm_fail(v, "_rebuild_tensor_v2(storage, offset, size, stride, requires_grad, "
                          "hooks) expected",
                       NULL);
    snprintf(t->dtype, sizeof t->dtype, "%s", storages[ps->i].dtype);
    t->elsize = storages[ps->i].size;
    t->ndim = nd;
    memcpy(t->stride, stride, sizeof stride);
    t->offset = off->i;
    t->storage_numel = ps->i2;
    t->requires_grad = rg->i != 0;
    *key = ps->s;
    *key_len = ps->slen;
    return NP_OK;
}

static np_status op_reduce(pvm *v, const char **key, size_t *key_len)
{
    if (v->sp < 2)
        return vm_fail(v, "stack underflow", NULL);
    const pobj *args = &v->obj[v->stack[--v->sp]];
    const pobj *fn = &v->obj[v->stack[--v->sp]];
    np_status st;
    switch (fn->kind) {
    case K_G_ODICT:
        if (args->kind != K_TUPLE || args->n != 0)
            return vm_fail(v, "OrderedDict() with arguments", NULL);
        return vm_push_new(v, K_DICT, 0);
    case K_G_REBUILD:
        if ((st = rebuild_v2(v, args, key, key_len)))
            return st;
        return vm_push_new(v, K_TENSOR, 0);
    case K_G_PARAM: /* _rebuild_parameter(tensor, requires_grad, hooks) */
        if (args->kind != K_TUPLE || args->n != 3 || kid(v, args, 0)->kind != K_TENSOR)
            return vm_fail(v, "_rebuild_parameter(tensor, requires_grad, hooks) expected", NULL);
        v->t->requires_grad = kid(v, args, 1)->i != 0;
        return vm_push_new(v, K_TENSOR, 0);
    default:
        return vm_fail(v, "REDUCE on something that is not an allowed global", NULL);
    }
}

/* SETITEM(S)/APPEND(S) on a dict or list: the contents are not needed. */
static np_status op_fill(pvm *v, int npop, int marked)
{
    int target, newsp;
    if (marked) {
        int m = v->sp - 1;
        while (m >= 0 && v->obj[v->stack[m]].kind != K_MARK)
            m--;
        if (m < 1)
            return vm_fail(v, "SETITEMS/APPENDS without MARK", NULL);
        target = v->stack[m - 1];
        newsp = m;
    } else {
        if (v->sp < npop + 1)
            return vm_fail(v, "stack underflow", NULL);
        target = v->stack[v->sp - npop - 1];
        newsp = v->sp - npop;
    }
    if (v->obj[target].kind != K_DICT && v->obj[target].kind != K_LIST)
        return vm_fail(v, "SETITEM/APPEND on something that is not a dict or list", NULL);
    v->sp = newsp;
    return NP_OK;
}

static np_status op_string(pvm *v, int lenbytes)
{
    if (!vm_need(v, (size_t)lenbytes))
        return vm_fail(v, "truncated", NULL);
    uint64_t n = lenbytes == 1 ? v->p[0] : rd32(v->p);
    v->p += lenbytes;
    if (n > (uint64_t)(v->end - v->p))
        return vm_fail(v, "string past the end", NULL);
    int o = vm_new(v, K_STR);
    if (o >= 0) {
        v->obj[o].s = (const char *)v->p;
        v->obj[o].slen = (size_t)n;
    }
    v->p += n;
    return vm_push(v, o);
}

static np_status op_memo(pvm *v, int put, int wide)
{
    if (!vm_need(v, wide ? 4 : 1))
        return vm_fail(v, "truncated", NULL);
    uint32_t idx = wide ? rd32(v->p) : v->p[0];
    v->p += wide ? 4 : 1;
    if (idx >= MAX_MEMO)
        return vm_fail(v, "memo index too large for a tensor", NULL);
    if (put) {
        if (v->sp < 1)
            return vm_fail(v, "stack underflow", NULL);
        v->memo[idx] = v->stack[v->sp - 1];
        return NP_OK;
    }
    if (v->memo[idx] < 0)
        return vm_fail(v, "memo entry not set", NULL);
    return vm_push(v, v->memo[idx]);
}

static np_status op_int(pvm *v, int n)
{
    if (!vm_need(v, (size_t)n))
        return vm_fail(v, "truncated", NULL);
    return vm_push_new(v, K_INT, vm_int_arg(v, n));
}

static np_status op_long1(pvm *v)
{
    if (!vm_need(v, 1) || v->p[0] > 8 || !vm_need(v, 1u + v->p[0]))
        return vm_fail(v, "LONG1 longer than 8 bytes", NULL);
    int n = *v->p++;
    uint64_t x = 0;
    for (int k = n - 1; k >= 0; k--)
        x = x << 8 | v->p[k];
    if (n > 0 && n < 8 && (v->p[n - 1] & 0x80))
        x |= ~(uint64_t)0 << (8 * n);
    v->p += n;
    return vm_push_new(v, K_INT, (int64_t)x);
}

static np_status op_float(pvm *v)
{
    if (!vm_need(v, 8))
        return vm_fail(v, "truncated", NULL);
    uint64_t b = 0;
    for (int k = 0; k < 8; k++)
        b = b << 8 | v->p[k];
    v->p += 8;
    double d;
    memcpy(&d, &b, sizeof d);
    (void)d;
    return vm_push_new(v, K_FLOAT, 0);
}

/* One opcode; *done at STOP. */
static np_status vm_step(pvm *v, int *done, const char **key, size_t *key_len)
{
    uint8_t op = *v->p++;
    switch (op) {
    case 0x80: /* PROTO */
        if (!vm_need(v, 1) || v->p[0] < 2 || v->p[0] > 5)
            return vm_fail(v, "unsupported pickle protocol", NULL);
        v->p++;
        return NP_OK;
    case 'c': return op_global(v);
    case 'q': return op_memo(v, 1, 0);
    case 'r': return op_memo(v, 1, 1);
    case 'h': return op_memo(v, 0, 0);
    case 'j': return op_memo(v, 0, 1);
    case '(': return vm_push_new(v, K_MARK, 0);
    case 'X': return op_string(v, 4);
    case 'U': return op_string(v, 1);
    case 'K': return op_int(v, 1);
    case 'M': return op_int(v, 2);
    case 'J': return op_int(v, 4);
    case 0x8a: return op_long1(v);
    case 'G': return op_float(v);
    case 't': return op_tuple_mark(v, K_TUPLE);
    case 'l': return op_tuple_mark(v, K_LIST);
    case ')': return op_tuple_n(v, 0);
    case 0x85: return op_tuple_n(v, 1);
    case 0x86: return op_tuple_n(v, 2);
    case 0x87: return op_tuple_n(v, 3);
    case 'Q': return op_persid(v);
    case 0x88: return vm_push_new(v, K_BOOL, 1);
    case 0x89: return vm_push_new(v, K_BOOL, 0);
    case 'N': return vm_push_new(v, K_NONE, 0);
    case '}': return vm_push_new(v, K_DICT, 0);
    case ']': return vm_push_new(v, K_LIST, 0);
    case 's': return op_fill(v, 2, 0);
    case 'a': return op_fill(v, 1, 0);
    case 'u':
    case 'e': return op_fill(v, 0, 1);
    case 'R': return op_reduce(v, key, key_len);
    case '.':
        *done = 1;
        if (v->sp != 1 || v->obj[v->stack[0]].kind != K_TENSOR)
            return vm_fail(v, "the pickle does not end with one tensor", NULL);
        return NP_OK;
    default: {
        char what[16];
        snprintf(what, sizeof what, "0x%02x", op);
        v->p--;
        return vm_fail(v, "pickle opcode not allowed: ", what);
    }
    }
}

static np_status run_pickle(np_pt_tensor *t, const char **key, size_t *key_len, const uint8_t *p,
                            uint64_t n, const char *path, np_error *err)
{
    pvm *v = calloc(1, sizeof *v);
    if (!v)
        return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    v->p = v->start = p;
    v->end = p + n;
    v->path = path;
    v->t = t;
    v->err = err;
    for (int i = 0; i < MAX_MEMO; i++)
        v->memo[i] = -1;
    *key = NULL;
    np_status st = NP_OK;
    int done = 0;
    while (!st && !done) {
        if (v->p >= v->end)
            st = vm_fail(v, "data.pkl ends before STOP", NULL);
        else
            st = vm_step(v, &done, key, key_len);
    }
    free(v);
    return st;
}

/* ---- the tensor ------------------------------------------------------------ */

/* Storage bounds: every element the shape and strides reach must be in it. */
static np_status check_bounds(np_pt_tensor *t, const member *data, const char *path, np_error *err)
{
    int64_t numel = 1, last = t->offset;
    int overflow = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] == 0)
            numel = 0;
        else if (numel && numel > ((int64_t)1 << 50) / t->shape[d])
            overflow = 1;
        else if (numel)
            numel *= t->shape[d];
    }
    for (int d = 0; numel && d < t->ndim; d++) {
        if (t->stride[d] && (t->shape[d] - 1) > (((int64_t)1 << 56) - last) / t->stride[d])
            overflow = 1;
        else
            last += (t->shape[d] - 1) * t->stride[d];
    }
    t->numel = numel;
    if (overflow)
        return np_error_set(err, NP_ERR_FORMAT, path, NULL, "shape x stride overflows");
    if (t->storage_numel > (int64_t)(data->size / (uint64_t)t->elsize))
        return np_error_set(err, NP_ERR_FORMAT, path, NULL,
                            "storage says %lld elements of %s, its member holds %llu bytes",
                            (long long)t->storage_numel, t->dtype, (unsigned long long)data->size);
    if (numel && last >= t->storage_numel)
        return np_error_set(err, NP_ERR_FORMAT, path, NULL,
                            "storage of %lld elements is shorter than shape x stride + offset "
                            "need (%lld)",
                            (long long)t->storage_numel, (long long)last + 1);
    int64_t expect = 1;
    t->contiguous = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->stride[d] != expect)
            t->contiguous = 0;
        expect *= t->shape[d];
    }
    return NP_OK;
}

/* torch >= 2.1 writes {archive}/byteorder ("little" or "big"); without it
 * the storage is little-endian (older torch wrote nothing else). The
 * storage is read as little-endian, so anything but "little" is refused. */
static np_status check_byteorder(const zipdir *z, const uint8_t *f, const char *prefix,
                                 size_t plen, const char *path, np_error *err)
{
    const member *m = zip_find(z, prefix, plen, "byteorder");
    if (!m)
        return NP_OK;
    const char *s = (const char *)f + m->pos;
    size_t n = (size_t)m->size;
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r'))
        n--;
    if (n == 6 && !memcmp(s, "little", 6))
        return NP_OK;
    if (n == 3 && !memcmp(s, "big", 3))
        return np_error_set(err, NP_ERR_UNSUPPORTED, path, NULL,
                            "the storage is big-endian (member byteorder says \"big\"): nprobe "
                            "reads little-endian .pt storages only; save it on a little-endian "
                            "machine");
    return np_error_set(err, NP_ERR_FORMAT, path, NULL,
                        "member byteorder holds %zu bytes that are neither \"little\" nor "
                        "\"big\": not a torch.save .pt",
                        n);
}

static np_status map_file(np_pt_tensor *t, const char *path, np_error *err)
{
    const char *why = NULL;
    int fd = np_open_regular(path, &why); /* a FIFO must not block the reader */
    if (fd < 0)
        return np_error_set(err, errno == ENOENT ? NP_ERR_NOTFOUND : NP_ERR_IO, path, NULL,
                            "cannot open: %s", why);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
        close(fd);
        return np_error_set(err, NP_ERR_FORMAT, path, NULL, "not a regular, non-empty file");
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED)
        return np_error_set(err, NP_ERR_IO, path, NULL, "cannot map: %s", strerror(e));
    t->map = m;
    t->map_len = (size_t)st.st_size;
    return NP_OK;
}

np_status np_pt_open(np_pt_tensor *t, const char *path, np_error *err)
{
    memset(t, 0, sizeof *t);
    np_status st = map_file(t, path, err);
    if (st)
        return st;
    zipdir *z = calloc(1, sizeof *z);
    if (!z) {
        np_pt_close(t);
        return np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    }
    const uint8_t *f = t->map;
    st = read_zip(z, f, t->map_len, path, err);
    const member *pkl = NULL, *data = NULL;
    size_t plen = 0;
    for (int i = 0; !st && i < z->n && !pkl; i++) {
        const member *m = &z->m[i];
        const char *slash = memchr(m->name, '/', m->name_len);
        if (slash && m->name_len - (size_t)(slash - m->name) == 9 && !memcmp(slash, "/data.pkl", 9)) {
            pkl = m;
            plen = (size_t)(slash - m->name) + 1;
        }
    }
    if (!st && !pkl)
        st = np_error_set(err, NP_ERR_FORMAT, path, NULL,
                          "no {archive}/data.pkl member: not a torch.save .pt");
    const char *key = NULL;
    size_t key_len = 0;
    if (!st)
        st = run_pickle(t, &key, &key_len, f + pkl->pos, pkl->size, path, err);
    if (!st) {
        char rest[96];
        snprintf(rest, sizeof rest, "data/%.*s", (int)(key_len < 64 ? key_len : 64), key);
        data = zip_find(z, pkl->name, plen, rest);
        if (!data)
            st = np_error_set(err, NP_ERR_FORMAT, path, NULL, "storage member %s missing", rest);
    }
    if (!st)
        st = check_byteorder(z, f, pkl->name, plen, path, err);
    if (!st)
        st = check_bounds(t, data, path, err);
    if (!st) {
        t->storage_pos = data->pos;
        t->storage = f + data->pos;
    }
    free(z);
    if (st)
        np_pt_close(t);
    return st;
}

void np_pt_close(np_pt_tensor *t)
{
    if (t && t->map)
        munmap(t->map, t->map_len);
    if (t)
        memset(t, 0, sizeof *t);
}

static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1F, man = h & 0x3FF, bits;
    if (exp == 0x1F) {
        bits = sign | 0x7F800000u | (man << 13);
    } else if (exp) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (!man) {
        bits = sign;
    } else { /* subnormal */
        int e = -1;
        do {
            e++;
            man <<= 1;
        } while (!(man & 0x400));
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3FF) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

enum { D_F32, D_BF16, D_F16, D_F64, D_I64, D_I32, D_I16, D_I8, D_U8 };

static int dcode(const char *d)
{
    static const char *const names[] = {"float32", "bfloat16", "float16", "float64", "int64",
                                        "int32",   "int16",    "int8"};
    for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++)
        if (!strcmp(d, names[i]))
            return i;
    return D_U8; /* uint8, bool */
}

/* The element at p as a double. */
static double element(int code, const uint8_t *p)
{
    float f;
    double x;
    uint32_t b;
    switch (code) {
    case D_F32: memcpy(&f, p, 4); return f;
    case D_BF16:
        b = (uint32_t)rd16(p) << 16;
        memcpy(&f, &b, 4);
        return f;
    case D_F16: return half_to_float(rd16(p));
    case D_F64: memcpy(&x, p, 8); return x;
    case D_I64: return (double)(int64_t)rd64(p);
    case D_I32: return (double)(int32_t)rd32(p);
    case D_I16: return (double)(int16_t)rd16(p);
    case D_I8: return (double)(int8_t)p[0];
    default: return (double)p[0];
    }
}

/* A contiguous run of n storage elements from `p` into dst[k..]. */
static void convert_run(void *dst, int f64, int64_t k, int code, const uint8_t *p, int64_t n,
                        int es)
{
    if (!f64 && code == D_F32) {
        memcpy((float *)dst + k, p, (size_t)n * 4);
    } else if (!f64 && code == D_BF16) {
        float *o = (float *)dst + k;
        for (int64_t i = 0; i < n; i++) {
            uint32_t b = (uint32_t)rd16(p + 2 * i) << 16;
            memcpy(&o[i], &b, 4);
        }
    } else if (f64) {
        double *o = (double *)dst + k;
        for (int64_t i = 0; i < n; i++)
            o[i] = element(code, p + i * es);
    } else {
        float *o = (float *)dst + k;
        for (int64_t i = 0; i < n; i++)
            o[i] = (float)element(code, p + i * es);
    }
}

np_status np_pt_read(void *dst, int out_f64, const np_pt_tensor *t, int64_t start, int64_t count,
                     np_error *err)
{
    if (start < 0 || count < 0 || start > t->numel - count)
        return np_error_set(err, NP_ERR_ARG, NULL, NULL, "elements %lld..%lld out of %lld",
                            (long long)start, (long long)(start + count), (long long)t->numel);
    int code = dcode(t->dtype), es = t->elsize;
    if (t->contiguous) {
        convert_run(dst, out_f64, 0, code, t->storage + (size_t)(t->offset + start) * (size_t)es,
                    count, es);
        return NP_OK;
    }
    /* strided: an odometer over the index, runs along the last dimension */
    int nd = t->ndim;
    int64_t idx[NP_FMT_MAX_DIMS], rem = start;
    for (int d = nd - 1; d >= 0; d--) {
        idx[d] = rem % t->shape[d];
        rem /= t->shape[d];
    }
    int64_t k = 0, inner = nd ? t->shape[nd - 1] : 1, istride = nd ? t->stride[nd - 1] : 1;
    while (k < count) {
        int64_t pos = t->offset;
        for (int d = 0; d < nd; d++)
            pos += idx[d] * t->stride[d];
        int64_t run = nd ? inner - idx[nd - 1] : 1;
        if (run > count - k)
            run = count - k;
        if (istride == 1) {
            convert_run(dst, out_f64, k, code, t->storage + (size_t)pos * (size_t)es, run, es);
        } else {
            for (int64_t i = 0; i < run; i++) {
                double x = element(code, t->storage + (size_t)(pos + i * istride) * (size_t)es);
                if (out_f64)
                    ((double *)dst)[k + i] = x;
                else
                    ((float *)dst)[k + i] = (float)x;
            }
        }
        k += run;
        if (nd == 0)
            break;
        idx[nd - 1] += run;
        for (int d = nd - 1; d > 0 && idx[d] >= t->shape[d]; d--) {
            idx[d] = 0;
            idx[d - 1]++;
        }
    }
    return NP_OK;
}
