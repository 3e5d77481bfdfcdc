/* compare/xlsx_sheet.c - splice the data rows of large sheets into an xlsx
 * that libxlsxwriter wrote with their header rows only (xlsx_sheet.h).
 *
 * Why: a 141k-row comparison is ~200 MB of sheet XML. libxlsxwriter prints
 * it with fprintf into a temporary file and deflates it at zlib's default
 * level on one thread (8-9 s). Here the XML of a block of rows is built
 * with the fast number formatter (compare/fmt.c) in memory, deflated at
 * level 1 by ISA-L's igzip (4x zlib's level-1 speed here, and smaller) as
 * raw deflate blocks ending in a sync flush, so that the blocks of all
 * threads concatenate into one valid deflate stream (closed by an empty
 * final block), with their crc32s (np_crc32) combined in order by zlib.
 * The stream is spooled to an unlinked temporary file, then handed to
 * libzip through a source callback that declares it deflated with its
 * sizes and crc known, so libzip copies it into the archive and writes
 * plain (not zip64) headers: Excel refuses zip64 records on entries that
 * do not need them.
 * Memory stays flat: a batch of blocks at a time. */
#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <isa-l/igzip_lib.h>
#include <zip.h>
#include <zlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "nprobe/common.h"
#include "xlsx_sheet.h"

#define BLOCK_ROWS 512         /* rows per deflate block */
#define BLOCKS_PER_THREAD 4    /* blocks per batch and thread */
#define MAX_THREADS 16
#define MAX_CELL_CHARS 32767   /* Excel's (and libxlsxwriter's) string limit */

/* ---- growing byte buffer ------------------------------------------------ */

typedef struct xbuf {
    char *p;
    size_t n, cap;
} xbuf;

/* Room for `more` bytes; 0 ok, -1 out of memory. */
static int xb_reserve(xbuf *b, size_t more)
{
    if (b->cap - b->n >= more)
        return 0;
    size_t cap = b->cap ? b->cap : 1 << 16;
    while (cap - b->n < more)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p)
        return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static void xb_lit(xbuf *b, const char *s, size_t len) /* room reserved */
{
    memcpy(b->p + b->n, s, len);
    b->n += len;
}

#define XB_LIT(b, s) xb_lit((b), (s), sizeof(s) - 1)

/* ---- cells -------------------------------------------------------------- */

/* A string cell's text, escaped as libxlsxwriter does (& < >), control
 * characters as OOXML's _xHHHH_; cut at Excel's limit on a UTF-8 boundary. */
static int put_text(xbuf *b, const char *s)
{
    size_t len = strlen(s);
    if (len > MAX_CELL_CHARS) {
        len = MAX_CELL_CHARS;
        while (len && ((unsigned char)s[len] & 0xC0) == 0x80)
            len--;
    }
    if (xb_reserve(b, 7 * len + 64))
        return -1;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = u[i];
        if (ch == '&')
            XB_LIT(b, "&amp;");
        else if (ch == '<')
            XB_LIT(b, "&lt;");
        else if (ch == '>')
            XB_LIT(b, "&gt;");
        else if (ch < 0x20 && ch != '\t' && ch != '\n' && ch != '\r') {
            static const char hex[] = "0123456789ABCDEF";
            char e[7] = {'_', 'x', '0', '0', hex[ch >> 4], hex[ch & 15], '_'};
            xb_lit(b, e, sizeof e);
        } else
            b->p[b->n++] = (char)ch;
    }
    return 0;
}

/* One row: <row><c ...>...</c>...</row>; cells in column order without r,
 * so an empty cell is written as <c/> unless it ends the row. */
static int put_row(xbuf *b, const cmp_cells *cells, int xf)
{
    char s_attr[24];
    size_t sl = xf > 0 ? (size_t)snprintf(s_attr, sizeof s_attr, " s=\"%d\"", xf) : 0;
    int last = cells->n;
    if (!sl)
        while (last > 0 && cells->c[last - 1].kind == CELL_STR &&
               (!cells->c[last - 1].str || !cells->c[last - 1].str[0]))
            last--;
    if (xb_reserve(b, 16))
        return -1;
    XB_LIT(b, "<row>");
    for (int k = 0; k < last; k++) {
        const cmp_cell *c = &cells->c[k];
        if (xb_reserve(b, 96))
            return -1;
        XB_LIT(b, "<c");
        xb_lit(b, s_attr, sl);
        if (c->kind == CELL_NUM && isfinite(c->num)) {
            XB_LIT(b, "><v>");
            char *d = b->p + b->n;
            int len = cmp_fmt_g(d, c->num, 16);
            for (int i = 0; i < len; i++)
                if (d[i] == 'e')
                    d[i] = 'E';   /* libxlsxwriter prints "%.16G" */
            b->n += (size_t)len;
            XB_LIT(b, "</v></c>");
            continue;
        }
        const char *t = c->kind == CELL_STR ? (c->str ? c->str : "")
                        : c->kind == CELL_NUM && !isnan(c->num) ? (c->num > 0 ? "inf" : "-inf")
                                                                  : "N/A";
        if (!t[0]) {
            XB_LIT(b, "/>");
            continue;
        }
        size_t tl = strlen(t);
        if (isspace((unsigned char)t[0]) || isspace((unsigned char)t[tl - 1]))
            XB_LIT(b, " t=\"inlineStr\"><is><t xml:space=\"preserve\">");
        else
            XB_LIT(b, " t=\"inlineStr\"><is><t>");
        if (c->kind == CELL_STR && np_cell_is_formula_like(t))
            XB_LIT(b, "'"); /* names are user data: never a formula */
        if (put_text(b, t))
            return -1;
        XB_LIT(b, "</t></is></c>");
    }
    if (xb_reserve(b, 16))
        return -1;
    XB_LIT(b, "</row>");
    return 0;
}

/* ---- blocks: XML of some rows (or a fixed text), deflated ---------------- */

typedef struct block {
    size_t a, b;              /* rows [a, b), or ... */
    const char *text;         /* ... this text when not NULL */
    size_t text_len;
    unsigned char *z;         /* raw deflate, ending in a sync flush */
    size_t zn, zcap;
    uLong crc;                /* of the uncompressed XML */
    uint64_t len;             /* its length */
    int failed;
} block;

typedef struct worker {
    struct isal_zstream zs;
    uint8_t *level_buf;       /* igzip's level-1 hash tables */
    xbuf xml;
    cmp_cells cells;
} worker;

static int deflate_block(block *bl, worker *w, const char *data, size_t len)
{
    bl->crc = np_crc32(0, data, len);
    bl->len = len;
    bl->zn = 0;
    if (len > UINT32_MAX / 2)   /* igzip counts in 32 bits; a block is rows of < 1 MB */
        return -1;
    isal_deflate_reset(&w->zs);
    w->zs.level = 1;
    w->zs.level_buf = w->level_buf;
    w->zs.level_buf_size = ISAL_DEF_LVL1_DEFAULT;
    w->zs.gzip_flag = IGZIP_DEFLATE;
    w->zs.flush = SYNC_FLUSH;
    w->zs.end_of_stream = 0;
    w->zs.next_in = (uint8_t *)(uintptr_t)data;
    w->zs.avail_in = (uint32_t)len;
    do {
        if (bl->zcap - bl->zn < 1024 || bl->zcap - bl->zn < len / 4) {
            size_t cap = bl->zcap ? 2 * bl->zcap : len + len / 8 + 4096;
            unsigned char *z = realloc(bl->z, cap);
            if (!z)
                return -1;
            bl->z = z;
            bl->zcap = cap;
        }
        size_t room = bl->zcap - bl->zn;
        w->zs.next_out = bl->z + bl->zn;
        w->zs.avail_out = room > UINT32_MAX / 2 ? UINT32_MAX / 2 : (uint32_t)room;
        uint32_t out0 = w->zs.avail_out;
        if (isal_deflate(&w->zs) != COMP_OK)
            return -1;
        bl->zn += out0 - w->zs.avail_out;
    } while (w->zs.avail_in != 0 || w->zs.avail_out == 0);
    return 0;
}

/* ---- the libzip source of one sheet ------------------------------------- */

typedef struct sheet_src {
    const cmp_xlsx_sheet *sh;
    char *xml;                /* libxlsxwriter's part, the dimension rewritten */
    size_t pre_len;           /* up to </sheetData> */
    size_t xml_len;
    size_t next_row;          /* rows not yet in a block */
    int stage;                /* 0: prologue next, 1: rows, 2: epilogue queued, 3: all queued */
    block *blocks;
    int n_blocks, cap_blocks;
    worker *workers;
    int n_threads;
    FILE *spool;              /* the deflated stream */
    uLong crc;                /* of the XML */
    uint64_t size;            /* XML bytes */
    uint64_t zsize;           /* deflated bytes */
    zip_error_t error;
} sheet_src;

/* The batch machinery, no longer needed once the stream is spooled. */
static void src_free_work(sheet_src *s)
{
    for (int i = 0; i < s->cap_blocks && s->blocks; i++)
        free(s->blocks[i].z);
    free(s->blocks);
    s->blocks = NULL;
    for (int t = 0; t < s->n_threads && s->workers; t++) {
        free(s->workers[t].level_buf);
        free(s->workers[t].xml.p);
    }
    free(s->workers);
    s->workers = NULL;
    free(s->xml);
    s->xml = NULL;
}

static void src_free(sheet_src *s)
{
    if (!s)
        return;
    src_free_work(s);
    if (s->spool)
        fclose(s->spool);
    zip_error_fini(&s->error);
    free(s);
}

static void run_block(sheet_src *s, block *bl, worker *w)
{
    const char *data = bl->text;
    size_t len = bl->text_len;
    if (!data) {
        w->xml.n = 0;
        for (size_t i = bl->a; i < bl->b; i++) {
            int xf = s->sh->row(&w->cells, s->sh->first + i, s->sh->user);
            if (put_row(&w->xml, &w->cells, xf)) {
                bl->failed = 1;
                return;
            }
        }
        data = w->xml.p;
        len = w->xml.n;
    }
    if (deflate_block(bl, w, data ? data : "", len))
        bl->failed = 1;
}

/* Queue and deflate the next batch of blocks; 0 ok, -1 (error set). */
static int next_batch(sheet_src *s)
{
    int n = 0;
    if (s->stage == 0) {
        block *bl = &s->blocks[n++];
        bl->text = s->xml;
        bl->text_len = s->pre_len;
        s->stage = 1;
    }
    while (s->stage == 1 && n < s->cap_blocks) {
        if (s->next_row == s->sh->n_rows) {
            block *bl = &s->blocks[n++];
            bl->text = s->xml + s->pre_len;
            bl->text_len = s->xml_len - s->pre_len;
            s->stage = 2;
            break;
        }
        block *bl = &s->blocks[n++];
        bl->text = NULL;
        bl->a = s->next_row;
        bl->b = s->sh->n_rows - s->next_row > BLOCK_ROWS ? s->next_row + BLOCK_ROWS : s->sh->n_rows;
        s->next_row = bl->b;
    }
    for (int i = 0; i < n; i++)
        s->blocks[i].failed = 0;
    int nt = s->n_threads < n ? s->n_threads : n;
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
#endif
    for (int i = 0; i < n; i++) {
        int t = 0;
#ifdef _OPENMP
        t = omp_get_thread_num();
#endif
        run_block(s, &s->blocks[i], &s->workers[t]);
    }
    (void)nt;
    for (int i = 0; i < n; i++) {
        block *bl = &s->blocks[i];
        if (bl->failed) {
            zip_error_set(&s->error, ZIP_ER_MEMORY, 0);
            return -1;
        }
        s->crc = crc32_combine(s->crc, bl->crc, (z_off_t)bl->len);
        s->size += bl->len;
    }
    if (s->stage == 2) {
        /* close the stream: an empty final block with fixed codes */
        block *bl = &s->blocks[n - 1];
        if (bl->zcap - bl->zn < 2) {
            unsigned char *z = realloc(bl->z, bl->zn + 2);
            if (!z) {
                zip_error_set(&s->error, ZIP_ER_MEMORY, 0);
                return -1;
            }
            bl->z = z;
            bl->zcap = bl->zn + 2;
        }
        bl->z[bl->zn++] = 0x03;
        bl->z[bl->zn++] = 0x00;
        s->stage = 3;
    }
    s->n_blocks = n;
    for (int i = 0; i < n; i++) {
        block *bl = &s->blocks[i];
        if (fwrite(bl->z, 1, bl->zn, s->spool) != bl->zn) {
            zip_error_set(&s->error, ZIP_ER_WRITE, 0);
            return -1;
        }
        s->zsize += bl->zn;
    }
    return 0;
}

static zip_int64_t src_cb(void *user, void *data, zip_uint64_t len, zip_source_cmd_t cmd)
{
    sheet_src *s = user;
    switch (cmd) {
    case ZIP_SOURCE_OPEN:
        if (fseek(s->spool, 0, SEEK_SET) != 0) {
            zip_error_set(&s->error, ZIP_ER_SEEK, 0);
            return -1;
        }
        return 0;
    case ZIP_SOURCE_READ: {
        size_t got = fread(data, 1, (size_t)len, s->spool);
        if (got < len && ferror(s->spool)) {
            zip_error_set(&s->error, ZIP_ER_READ, 0);
            return -1;
        }
        return (zip_int64_t)got;
    }
    case ZIP_SOURCE_CLOSE:
        return 0;
    case ZIP_SOURCE_STAT: {
        zip_stat_t *st = ZIP_SOURCE_GET_ARGS(zip_stat_t, data, len, &s->error);
        if (!st)
            return -1;
        zip_stat_init(st);
        /* deflated already, sizes known: copied as it is, no zip64 */
        st->valid = ZIP_STAT_COMP_METHOD | ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE | ZIP_STAT_CRC;
        st->comp_method = ZIP_CM_DEFLATE;
        st->size = s->size;
        st->comp_size = s->zsize;
        st->crc = (zip_uint32_t)s->crc;
        return sizeof *st;
    }
    case ZIP_SOURCE_ERROR:
        return zip_error_to_data(&s->error, data, len);
    case ZIP_SOURCE_FREE:
        src_free(s);
        return 0;
    case ZIP_SOURCE_SUPPORTS:
        return ZIP_SOURCE_SUPPORTS_READABLE;
    default:
        zip_error_set(&s->error, ZIP_ER_OPNOTSUPP, 0);
        return -1;
    }
}

/* Column letters of 0-based column k into buf (>= 4 bytes). */
static void col_name(char *buf, int k)
{
    char t[4];
    int n = 0;
    for (k++; k > 0 && n < 3; k = (k - 1) / 26)
        t[n++] = (char)('A' + (k - 1) % 26);
    for (int i = 0; i < n; i++)
        buf[i] = t[n - 1 - i];
    buf[n] = '\0';
}

/* Read the sheet part and prepare its source (dimension rewritten, the
 * split point before </sheetData>). */
static np_status src_new(sheet_src **out, zip_t *za, zip_uint64_t idx, const char *path,
                         const char *part, const cmp_xlsx_sheet *sh, np_error *err)
{
    *out = NULL;
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(za, idx, 0, &st) < 0 || !(st.valid & ZIP_STAT_SIZE) || st.size > (1u << 30))
        return np_error_set(err, NP_ERR_ZIP, path, part, "cannot read the size of the sheet: %s",
                            zip_strerror(za));
    char *xml = malloc((size_t)st.size + 64);
    if (!xml)
        return np_error_set(err, NP_ERR_NOMEM, path, part, "out of memory");
    zip_file_t *f = zip_fopen_index(za, idx, 0);
    zip_int64_t got = f ? zip_fread(f, xml, st.size) : -1;
    if (f)
        zip_fclose(f);
    if (got < 0 || (zip_uint64_t)got != st.size) {
        free(xml);
        return np_error_set(err, NP_ERR_ZIP, path, part, "cannot read the sheet: %s",
                            zip_strerror(za));
    }
    size_t len = (size_t)st.size;
    xml[len] = '\0';
    char *end = strstr(xml, "</sheetData>");
    char *dim = strstr(xml, "<dimension ref=\"");
    char *dim_end = dim ? strchr(dim + 16, '"') : NULL;
    if (!end || !dim_end || dim_end > end) {
        free(xml);
        return np_error_set(err, NP_ERR_FORMAT, path, part,
                            "the sheet written by libxlsxwriter has no dimension or sheetData");
    }
    char ref[48], col[4];
    col_name(col, sh->n_cols > 0 ? sh->n_cols - 1 : 0);
    int rl = snprintf(ref, sizeof ref, "A1:%s%zu", col, sh->n_rows + 1);
    size_t head = (size_t)(dim + 16 - xml), old = (size_t)(dim_end - (dim + 16));
    /* the new ref is longer than "A1:X1" by at most 40 bytes: room was allocated */
    memmove(xml + head + (size_t)rl, dim_end, len - (size_t)(dim_end - xml) + 1);
    memcpy(xml + head, ref, (size_t)rl);
    len = len - old + (size_t)rl;
    sheet_src *s = calloc(1, sizeof *s);
    if (!s) {
        free(xml);
        return np_error_set(err, NP_ERR_NOMEM, path, part, "out of memory");
    }
    zip_error_init(&s->error);
    s->sh = sh;
    s->xml = xml;
    s->xml_len = len;
    s->pre_len = (size_t)(strstr(xml, "</sheetData>") - xml);
    s->crc = crc32(0L, Z_NULL, 0);
    int nt = 1;
#ifdef _OPENMP
    nt = omp_get_max_threads();
#endif
    s->n_threads = nt < 1 ? 1 : nt > MAX_THREADS ? MAX_THREADS : nt;
    s->cap_blocks = BLOCKS_PER_THREAD * s->n_threads;
    s->blocks = calloc((size_t)s->cap_blocks, sizeof *s->blocks);
    s->workers = calloc((size_t)s->n_threads, sizeof *s->workers);
    if (!s->blocks || !s->workers) {
        src_free(s);
        return np_error_set(err, NP_ERR_NOMEM, path, part, "out of memory");
    }
    for (int t = 0; t < s->n_threads; t++) {
        s->workers[t].level_buf = malloc(ISAL_DEF_LVL1_DEFAULT);
        if (!s->workers[t].level_buf) {
            src_free(s);
            return np_error_set(err, NP_ERR_NOMEM, path, part, "out of memory");
        }
        isal_deflate_init(&s->workers[t].zs);
    }
    *out = s;
    return NP_OK;
}

/* Produce the whole deflated part into the spool. */
static np_status spool_sheet(sheet_src *s, const char *path, const char *part, np_error *err)
{
    s->spool = tmpfile();
    if (!s->spool)
        return np_error_set(err, NP_ERR_IO, path, part,
                            "cannot create a temporary file for the sheet's rows");
    while (s->stage != 3)
        if (next_batch(s))
            return np_error_set(err, zip_error_code_zip(&s->error) == ZIP_ER_WRITE ? NP_ERR_NOSPACE
                                                                                 : NP_ERR_NOMEM,
                                path, part, "writing the sheet's rows failed: %s",
                                zip_error_code_zip(&s->error) == ZIP_ER_WRITE
                                    ? "cannot write the temporary file (disk full?)"
                                    : "out of memory");
    src_free_work(s);
    if (fflush(s->spool) != 0)
        return np_error_set(err, NP_ERR_NOSPACE, path, part,
                            "writing the sheet's rows failed: cannot write the temporary file "
                            "(disk full?)");
    return NP_OK;
}

np_status cmp_xlsx_fill_sheets(const char *tmp, const char *path, const cmp_xlsx_sheet *sheets,
                               int n, np_error *err)
{
    int zerr = 0;
    zip_t *za = zip_open(tmp, 0, &zerr);
    if (!za) {
        zip_error_t ze;
        zip_error_init_with_code(&ze, zerr);
        np_status st = np_error_set(err, NP_ERR_ZIP, path, NULL,
                                    "cannot reopen the xlsx to write its rows: %s",
                                    zip_error_strerror(&ze));
        zip_error_fini(&ze);
        return st;
    }
    for (int i = 0; i < n; i++) {
        char part[64];
        snprintf(part, sizeof part, "xl/worksheets/sheet%d.xml", sheets[i].number);
        zip_int64_t idx = zip_name_locate(za, part, 0);
        if (idx < 0) {
            zip_discard(za);
            return np_error_set(err, NP_ERR_FORMAT, path, part, "the sheet is missing");
        }
        sheet_src *s;
        np_status st = src_new(&s, za, (zip_uint64_t)idx, path, part, &sheets[i], err);
        if (st == NP_OK && (st = spool_sheet(s, path, part, err)) != NP_OK)
            src_free(s);
        if (st != NP_OK) {
            zip_discard(za);
            return st;
        }
        zip_source_t *zs = zip_source_function(za, src_cb, s);
        if (!zs) {
            src_free(s);
            zip_discard(za);
            return np_error_set(err, NP_ERR_NOMEM, path, part, "cannot create a zip source");
        }
        if (zip_file_replace(za, (zip_uint64_t)idx, zs, 0) < 0) {
            zip_source_free(zs);
            st = np_error_set(err, NP_ERR_ZIP, path, part, "cannot replace the sheet: %s",
                              zip_strerror(za));
            zip_discard(za);
            return st;
        }
    }
    if (zip_close(za) < 0) {
        np_status st = np_error_set(err, NP_ERR_ZIP, path, NULL, "writing the rows failed: %s",
                                    zip_strerror(za));
        zip_discard(za);
        return st;
    }
    return NP_OK;
}
