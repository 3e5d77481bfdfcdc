/* configcheck/packread.c - read a pack from someone else, safely: every entry
 * name is checked (no absolute names, no "..", no backslashes, no drive
 * letters, no duplicates), declared sizes are capped, the members are
 * inflated in memory with a cap on the bytes actually produced (a zip bomb
 * may lie about its size), and the JSON must parse. Nothing is extracted. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zip.h>

#include "packread.h"

static int name_is_unsafe(const char *name, const char **why)
{
    size_t n = strlen(name);
    if (n == 0)
        return *why = "an empty name", 1;
    if (name[0] == '/')
        return *why = "an absolute name", 1;
    if (strchr(name, '\\'))
        return *why = "a backslash in the name", 1;
    if (n >= 2 && name[1] == ':')
        return *why = "a drive letter", 1;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        if (*p < 0x20 || *p == 0x7f || (p[0] == 0xC2 && p[1] >= 0x80 && p[1] <= 0x9F))
            return *why = "a control character in the name", 1;
    for (const char *p = name; *p;) {
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        if (len == 2 && p[0] == '.' && p[1] == '.')
            return *why = "a '..' component (it would escape the output folder)", 1;
        if (!slash)
            break;
        p = slash + 1;
    }
    return 0;
}

static np_status zip_open_error(const char *path, int code, np_error *err)
{
    zip_error_t ze;
    zip_error_init_with_code(&ze, code);
    const char *what;
    np_status st = NP_ERR_FORMAT;
    switch (code) {
    case ZIP_ER_NOZIP: what = "not a zip archive (or truncated: no end-of-central-directory record)"; break;
    case ZIP_ER_INCONS: what = "inconsistent zip archive (truncated or corrupt)"; break;
    case ZIP_ER_NOENT: what = "no such file"; st = NP_ERR_IO; break;
    case ZIP_ER_OPEN: case ZIP_ER_READ: case ZIP_ER_SEEK: what = "cannot read"; st = NP_ERR_IO; break;
    case ZIP_ER_MEMORY: what = "out of memory"; st = NP_ERR_NOMEM; break;
    default: what = "cannot open as a zip archive"; break;
    }
    np_status r = np_error_set(err, st, path, NULL, "refused: %s (%s)", what, zip_error_strerror(&ze));
    zip_error_fini(&ze);
    return r;
}

/* Inflate entry `idx`, at most `cap` bytes: into memory (*out, NUL-
 * terminated) or, when `f` is given, into the file f (a spill file of
 * `sp`). */
static np_status read_entry(char **out, size_t *len, FILE *f, const cc_spill *sp, zip_t *za,
                            zip_int64_t idx, const char *name, uint64_t declared, size_t cap,
                            size_t *budget, const char *path, np_error *err)
{
    *len = 0;
    if (out)
        *out = NULL;
    zip_file_t *zf = zip_fopen_index(za, (zip_uint64_t)idx, 0);
    if (!zf)
        return np_error_set(err, NP_ERR_FORMAT, path, name, "refused: cannot open the entry: %s",
                            zip_strerror(za));
    size_t alloc = f ? (size_t)1 << 16 : (size_t)declared + 1;
    char *buf = malloc(alloc + 1);
    if (!buf) {
        zip_fclose(zf);
        return np_error_set(err, NP_ERR_NOMEM, path, name, "out of memory");
    }
    size_t n = 0, at = 0; /* bytes inflated; where the next read goes in buf */
    np_status st = NP_OK;
    for (;;) {
        /* read one byte past the declared size, to catch an entry that lies */
        zip_int64_t r = zip_fread(zf, buf + at, alloc - at);
        if (r < 0) {
            st = np_error_set(err, NP_ERR_FORMAT, path, name,
                              "refused: the entry is corrupt or truncated: %s", zip_file_strerror(zf));
            break;
        }
        if (r == 0)
            break;
        n += (size_t)r;
        if (n > declared || n > cap || n > *budget) {
            st = np_error_set(err, NP_ERR_LIMIT, path, name,
                              "refused: the entry inflates past its declared size of %llu bytes or "
                              "the limit (%zu bytes per entry, %zu left in total): a zip bomb?",
                              (unsigned long long)declared, cap, *budget);
            break;
        }
        if (f && fwrite(buf, 1, (size_t)r, f) != (size_t)r) {
            st = cc_spill_error(sp, errno ? errno : EIO, err);
            break;
        }
        at = f ? 0 : n;
    }
    zip_fclose(zf);
    if (st == NP_OK && n != declared)
        st = np_error_set(err, NP_ERR_FORMAT, path, name,
                          "refused: the entry holds %zu bytes, its header says %llu (truncated?)",
                          n, (unsigned long long)declared);
    if (st == NP_OK && f && (fflush(f) != 0 || ferror(f)))
        st = cc_spill_error(sp, errno ? errno : EIO, err);
    if (st != NP_OK || f) {
        free(buf);
        if (st == NP_OK)
            *budget -= n, *len = n;
        return st;
    }
    *budget -= n;
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return NP_OK;
}

void np_cc_packin_free(np_cc_packin *p)
{
    if (!p)
        return;
    json_decref(p->manifest);
    if (p->za)
        zip_discard(p->za);
    memset(p, 0, sizeof *p);
}

/* Every entry: readable, a safe and unique name, not encrypted, declared
 * sizes within the limits. */
static np_status check_entries(zip_t *za, const char *path, size_t max_entry, size_t max_total,
                               long max_entries, np_error *err)
{
    zip_int64_t n = zip_get_num_entries(za, 0);
    if (n < 0 || n > max_entries)
        return np_error_set(err, NP_ERR_LIMIT, path, NULL, "refused: %lld entries (limit %ld)",
                            (long long)n, max_entries);
    uint64_t declared_total = 0;
    for (zip_int64_t i = 0; i < n; i++) {
        zip_stat_t zs;
        const char *why = NULL;
        if (zip_stat_index(za, (zip_uint64_t)i, 0, &zs) != 0 || !(zs.valid & ZIP_STAT_NAME) ||
            !(zs.valid & ZIP_STAT_SIZE))
            return np_error_set(err, NP_ERR_FORMAT, path, NULL, "refused: entry %lld is unreadable",
                                (long long)i);
        /* the name as stored: libzip converts a name without the UTF-8
         * flag from CP437, where bytes 0x01-0x1F become printable symbols */
        const char *raw = zip_get_name(za, (zip_uint64_t)i, ZIP_FL_ENC_RAW);
        if (raw && name_is_unsafe(raw, &why))
            return np_error_set(err, NP_ERR_FORMAT, path, zs.name,
                                "refused: unsafe entry name: %s", why);
        if (name_is_unsafe(zs.name, &why))
            return np_error_set(err, NP_ERR_FORMAT, path, zs.name,
                                "refused: unsafe entry name: %s", why);
        if (zip_name_locate(za, zs.name, 0) != i)
            return np_error_set(err, NP_ERR_FORMAT, path, zs.name,
                                "refused: the entry name appears twice");
        if ((zs.valid & ZIP_STAT_ENCRYPTION_METHOD) && zs.encryption_method != ZIP_EM_NONE)
            return np_error_set(err, NP_ERR_FORMAT, path, zs.name, "refused: encrypted entry");
        if (zs.size > (uint64_t)max_entry)
            return np_error_set(err, NP_ERR_LIMIT, path, zs.name,
                                "refused: the entry declares %llu bytes, over the %zu byte limit "
                                "per entry",
                                (unsigned long long)zs.size, max_entry);
        declared_total += zs.size;
        if (declared_total > (uint64_t)max_total)
            return np_error_set(err, NP_ERR_LIMIT, path, zs.name,
                                "refused: the entries declare more than %zu bytes in total",
                                max_total);
    }
    return NP_OK;
}

const char *np_cc_msprobe_member(np_cc_item_id m)
{
    switch (m) {
    case NP_CC_ENV: return "env";
    case NP_CC_PIP: return "pip";
    case NP_CC_RANDOM: return "random/rank0.json";
    case NP_CC_WEIGHTS: return "weights/step0/rank0/weight.json";
    case NP_CC_DATASET: return "dataset/step0/rank0/dataset.json";
    default: return NULL; /* libs; hyperparameters (msprobe's are per script file) */
    }
}

/* libzip's consistency check refuses two entries of one name with "File
 * already exists": open without it to say which name, and refuse. */
static np_status duplicate_entry(const char *path, np_error *err)
{
    int code = 0;
    zip_t *za = zip_open(path, ZIP_RDONLY, &code);
    if (!za)
        return zip_open_error(path, ZIP_ER_EXISTS, err);
    zip_int64_t n = zip_get_num_entries(za, 0);
    for (zip_int64_t i = 0; i < n; i++) {
        const char *name = zip_get_name(za, (zip_uint64_t)i, 0);
        if (name && zip_name_locate(za, name, 0) != i) {
            np_status st = np_error_set(err, NP_ERR_FORMAT, path, name,
                                        "refused: the entry name appears twice");
            zip_discard(za);
            return st;
        }
    }
    zip_discard(za);
    return np_error_set(err, NP_ERR_FORMAT, path, NULL,
                        "refused: two entries have the same name");
}

/* manifest.json: read, parsed, its format and version checked. */
static np_status read_manifest(np_cc_packin *p, zip_t *za, np_error *err)
{
    const char *path = p->path;
    zip_int64_t midx = zip_name_locate(za, "manifest.json", 0);
    if (midx < 0)
        return np_error_set(err, NP_ERR_FORMAT, path, "manifest.json",
                            "refused: not an nprobe config_check pack (manifest.json is missing)");
    zip_stat_t ms;
    zip_stat_index(za, (zip_uint64_t)midx, 0, &ms);
    char *buf = NULL;
    size_t len = 0;
    np_status st = read_entry(&buf, &len, NULL, NULL, za, midx, "manifest.json", ms.size,
                              p->max_entry, &p->budget, path, err);
    if (st != NP_OK)
        return st;
    json_error_t je;
    p->manifest = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
    free(buf);
    if (!p->manifest)
        return np_error_set(err, NP_ERR_JSON, path, "manifest.json",
                            "refused: malformed JSON at line %d, column %d: %s", je.line,
                            je.column, je.text);
    if (!json_is_object(p->manifest))
        return np_error_set(err, NP_ERR_FORMAT, path, "manifest.json",
                            "refused: expected a JSON object");
    const char *fmt = json_string_value(json_object_get(p->manifest, "format"));
    json_t *ver = json_object_get(p->manifest, "format_version");
    if (!fmt || strcmp(fmt, NP_CC_FORMAT) != 0)
        return np_error_set(err, NP_ERR_FORMAT, path, "manifest.json",
                            "refused: expected \"format\": \"%s\"", NP_CC_FORMAT);
    if (!json_is_integer(ver) || json_integer_value(ver) < 1 ||
        json_integer_value(ver) > NP_CC_FORMAT_VERSION)
        return np_error_set(err, NP_ERR_UNSUPPORTED, path, "manifest.json",
                            "refused: format_version must be an integer from 1 to %d (a newer "
                            "nprobe wrote this pack?)",
                            NP_CC_FORMAT_VERSION);
    return NP_OK;
}

np_status np_cc_packin_open(np_cc_packin *p, const char *path, const np_cc_limits *lim,
                            np_error *err)
{
    memset(p, 0, sizeof *p);
    p->path = path;
    size_t max_entry = lim && lim->max_entry_bytes ? lim->max_entry_bytes : NP_CC_DEFAULT_MAX_ENTRY;
    size_t max_total = lim && lim->max_total_bytes ? lim->max_total_bytes : NP_CC_DEFAULT_MAX_TOTAL;
    long max_entries = lim && lim->max_entries ? lim->max_entries : NP_CC_DEFAULT_MAX_ENTRIES;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return np_error_set(err, NP_ERR_IO, path, NULL, "cannot open: %s", strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return np_error_set(err, NP_ERR_FORMAT, path, NULL, "refused: not a regular file");
    if ((uint64_t)sb.st_size > (uint64_t)max_total)
        return np_error_set(err, NP_ERR_LIMIT, path, NULL,
                            "refused: the pack is %lld bytes, over the %zu byte limit",
                            (long long)sb.st_size, max_total);
    int code = 0;
    zip_t *za = zip_open(path, ZIP_RDONLY | ZIP_CHECKCONS, &code);
    if (!za && code == ZIP_ER_EXISTS)
        return duplicate_entry(path, err);
    if (!za)
        return zip_open_error(path, code, err);
    p->za = za;
    p->budget = max_total;
    p->max_entry = max_entry;
    np_status st = check_entries(za, path, max_entry, max_total, max_entries, err);
    /* msprobe's ConfigChecker writes no manifest and names its members
     * env, pip, random/rank0.json, weights/stepS/rankR/weight.json ... */
    p->msprobe = zip_name_locate(za, "manifest.json", 0) < 0 &&
                 (zip_name_locate(za, "env", 0) >= 0 || zip_name_locate(za, "pip", 0) >= 0);
    for (int m = 0; m < NP_CC_ITEM_COUNT; m++)
        p->names[m] = p->msprobe ? np_cc_msprobe_member((np_cc_item_id)m) : np_cc_member_names[m];
    for (int m = 0; m < NP_CC_ITEM_COUNT && st == NP_OK; m++) {
        zip_int64_t idx = p->names[m] ? zip_name_locate(za, p->names[m], 0) : -1;
        zip_stat_t zs;
        p->idx[m] = idx;
        p->present[m] = idx >= 0;
        p->size[m] = idx >= 0 && zip_stat_index(za, (zip_uint64_t)idx, 0, &zs) == 0 ? zs.size : 0;
    }
    if (st == NP_OK && !p->msprobe)
        st = read_manifest(p, za, err);
    if (st != NP_OK)
        np_cc_packin_free(p);
    return st;
}

np_status np_cc_packin_member(np_cc_packin *p, np_cc_item_id m, char **buf, size_t *len, FILE *f,
                              const cc_spill *sp, np_error *err)
{
    return read_entry(buf, len, f, sp, p->za, p->idx[m], p->names[m], p->size[m],
                      p->max_entry, &p->budget, p->path, err);
}
