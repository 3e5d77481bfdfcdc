/* cli/profile_html.c - `nprobe profile --format html`: profile.html, a
 * self-contained page (no network, no external file): per rank the time by
 * category, the top operators and a timeline of one step - the
 * ProfilerStep whose duration is the median (the whole trace when it has
 * none) - drawn by the page's script from the slices embedded as JSON, one
 * div per slice, nested by depth on each thread or stream lane
 * (docs/PROFILE.md, "HTML"). At most MAX_SLICES slices per rank. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "nprobe/profile.h"

#define MAX_SLICES 20000

typedef struct slice {
    char *name, *cat;
    double ts, dur;
    long long pid, tid;
    int depth;
} slice;

typedef struct step_pass {
    double *se; /* ProfilerStep start, duration pairs */
    size_t n, cap;
} step_pass;

typedef struct ev_pass {
    double lo, hi; /* the window: slices that start in it */
    slice *v;
    size_t n, cap;
    int oom;
} ev_pass;

static int steps_fn(const np_prof_event *e, void *user)
{
    step_pass *p = user;
    if (e->ph != 'X' || !isfinite(e->ts) || !isfinite(e->dur) || strncmp(e->name, "ProfilerStep#", 13))
        return 0;
    if (p->n + 2 > p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 64;
        double *v = realloc(p->se, cap * sizeof *v);
        if (!v)
            return 1;
        p->se = v;
        p->cap = cap;
    }
    p->se[p->n++] = e->ts;
    p->se[p->n++] = e->dur;
    return 0;
}

static int ev_fn(const np_prof_event *e, void *user)
{
    ev_pass *p = user;
    if (e->ph != 'X' || !isfinite(e->ts) || !isfinite(e->dur) || e->ts < p->lo || e->ts > p->hi ||
        p->n == MAX_SLICES)
        return 0;
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 256;
        slice *v = realloc(p->v, cap * sizeof *v);
        if (!v) {
            p->oom = 1;
            return 1;
        }
        p->v = v;
        p->cap = cap;
    }
    slice *s = &p->v[p->n];
    s->name = strdup(e->name);
    s->cat = strdup(e->cat);
    if (!s->name || !s->cat) {
        free(s->name);
        free(s->cat);
        p->oom = 1;
        return 1;
    }
    s->ts = e->ts;
    s->dur = e->dur;
    /* a device event's lane is its stream */
    s->pid = e->pid;
    s->tid = e->stream >= 0 ? 1000000 + e->stream : e->tid;
    s->depth = 0;
    p->n++;
    return 0;
}

static int lane_start_cmp(const void *x, const void *y)
{
    const slice *a = x, *b = y;
    if (a->pid != b->pid)
        return a->pid < b->pid ? -1 : 1;
    if (a->tid != b->tid)
        return a->tid < b->tid ? -1 : 1;
    if (a->ts != b->ts)
        return a->ts < b->ts ? -1 : 1;
    return a->dur > b->dur ? -1 : a->dur < b->dur;
}

static int dbl_cmp(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* The window of the median ProfilerStep (the whole trace without steps). */
static void pick_window(ev_pass *w, const char *path, double *step_dur)
{
    step_pass sp = {0};
    w->lo = -INFINITY;
    w->hi = INFINITY;
    *step_dur = NAN;
    if (np_prof_read(NULL, path, steps_fn, &sp, NULL) == NP_OK && sp.n) {
        size_t k = sp.n / 2;
        double *d = malloc(k * sizeof *d);
        if (d) {
            for (size_t i = 0; i < k; i++)
                d[i] = sp.se[2 * i + 1];
            qsort(d, k, sizeof *d, dbl_cmp);
            double med = d[(k - 1) / 2];
            for (size_t i = 0; i < k; i++)
                if (sp.se[2 * i + 1] == med) {
                    w->lo = sp.se[2 * i];
                    w->hi = sp.se[2 * i] + med;
                    *step_dur = med;
                    break;
                }
            free(d);
        }
    }
    free(sp.se);
}

/* Depth of each slice on its lane (slices sorted by lane and start). */
static void nest(slice *v, size_t n)
{
    double stack[64];
    int depth = 0;
    for (size_t i = 0; i < n; i++) {
        if (i && (v[i].pid != v[i - 1].pid || v[i].tid != v[i - 1].tid))
            depth = 0;
        while (depth && stack[depth - 1] <= v[i].ts)
            depth--;
        v[i].depth = depth;
        if (depth < 64)
            stack[depth++] = v[i].ts + v[i].dur;
    }
}

/* ---- escaping -------------------------------------------------------------- */
static void html_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* A JSON string safe inside <script>: < > & and the JavaScript line breaks
 * as \uXXXX, bytes that are not UTF-8 as U+FFFD. */
static void js_str(FILE *f, const char *s)
{
    fputc('"', f);
    while (*s) {
        unsigned char c = (unsigned char)*s;
        size_t k = np_utf8_seq(s);
        if (!k) {
            fputs("\\ufffd", f);
            s++;
        } else if (k > 1) {
            if (k == 3 && c == 0xe2 && (unsigned char)s[1] == 0x80 && ((unsigned char)s[2] & 0xfe) == 0xa8)
                fprintf(f, "\\u%04x", 0x2028 + ((unsigned char)s[2] - 0xa8));
            else
                fwrite(s, 1, k, f);
            s += k;
        } else {
            if (c == '"' || c == '\\')
                fprintf(f, "\\%c", c);
            else if (c < 0x20 || c == '<' || c == '>' || c == '&' || c == 0x7f)
                fprintf(f, "\\u%04x", c);
            else
                fputc(c, f);
            s++;
        }
    }
    fputc('"', f);
}

/* ---- the page ----------------------------------------------------------------- */
static const char style[] =
    "body{font:13px sans-serif;margin:16px}table{border-collapse:collapse;margin:6px 0 14px}"
    "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td.n{text-align:left}"
    ".lane{position:relative;border-top:1px solid #999;margin:2px 0}"
    ".slice{position:absolute;height:13px;overflow:hidden;white-space:nowrap;font-size:10px;"
    "border:1px solid #fff;box-sizing:border-box;color:#000}";

static const char script[] =
    "function draw(id,d){var root=document.getElementById(id);var span=d.hi-d.lo||1;"
    "var lanes={};d.s.forEach(function(s){var k=s[2];(lanes[k]=lanes[k]||[]).push(s);});"
    "Object.keys(lanes).forEach(function(k){var lane=document.createElement('div');"
    "lane.className='lane';lane.setAttribute('data-lane',k);var h=0;"
    "lanes[k].forEach(function(s){var e=document.createElement('div');e.className='slice';"
    "e.setAttribute('data-name',d.n[s[0]]);e.setAttribute('data-cat',d.c[s[1]]);"
    "e.style.left=(100*(s[3]-d.lo)/span)+'%';e.style.width=Math.max(0.05,100*s[4]/span)+'%';"
    "e.style.top=(14*s[5])+'px';h=Math.max(h,14*s[5]+14);"
    "e.style.background='hsl('+((s[1]*67)%360)+',60%,'+(70+(s[0]%3)*7)+'%)';"
    "e.title=d.n[s[0]]+' ('+s[4].toFixed(3)+' us)';e.textContent=d.n[s[0]];lane.appendChild(e);});"
    "lane.style.height=h+'px';root.appendChild(lane);});"
    "root.setAttribute('data-slices',String(root.querySelectorAll('.slice').length));}";

/* Names and categories as tables of distinct strings (index = first seen). */
static size_t str_index(char ***tab, size_t *n, const char *s)
{
    for (size_t i = 0; i < *n; i++)
        if (!strcmp((*tab)[i], s))
            return i;
    char **t = realloc(*tab, (*n + 1) * sizeof *t);
    if (!t)
        return 0;
    *tab = t;
    t[*n] = (char *)s;
    return (*n)++;
}

static void write_timeline(FILE *f, const np_prof_rank *r, size_t idx)
{
    ev_pass w = {0};
    double step_dur;
    pick_window(&w, r->path, &step_dur);
    if (np_prof_read(NULL, r->path, ev_fn, &w, NULL) != NP_OK || w.oom) {
        fputs("<p>timeline: the trace could not be read again</p>\n", f);
    } else {
        qsort(w.v, w.n, sizeof *w.v, lane_start_cmp);
        nest(w.v, w.n);
        double lo = INFINITY, hi = -INFINITY;
        for (size_t i = 0; i < w.n; i++) {
            lo = fmin(lo, w.v[i].ts);
            hi = fmax(hi, w.v[i].ts + w.v[i].dur);
        }
        if (isfinite(w.lo)) {
            lo = w.lo;
            hi = w.hi;
        }
        fprintf(f, "<h3>timeline: %s, %zu slices%s</h3>\n", isfinite(step_dur) ? "the median step" : "the trace",
                w.n, w.n == MAX_SLICES ? " (the first 20000)" : "");
        fprintf(f, "<div id=\"tl%zu\" class=\"timeline\"></div>\n<script>draw(\"tl%zu\",{", idx, idx);
        char **names = NULL, **cats = NULL;
        size_t nn = 0, nc = 0;
        size_t *ni = malloc((w.n + 1) * sizeof *ni), *ci = malloc((w.n + 1) * sizeof *ci);
        for (size_t i = 0; ni && ci && i < w.n; i++) {
            ni[i] = str_index(&names, &nn, w.v[i].name);
            ci[i] = str_index(&cats, &nc, w.v[i].cat);
        }
        fprintf(f, "lo:%.3f,hi:%.3f,n:[", 0.0, hi - lo);
        for (size_t i = 0; i < nn; i++) {
            fputs(i ? "," : "", f);
            js_str(f, names[i]);
        }
        fputs("],c:[", f);
        for (size_t i = 0; i < nc; i++) {
            fputs(i ? "," : "", f);
            js_str(f, cats[i]);
        }
        fputs("],s:[", f);
        for (size_t i = 0; ni && ci && i < w.n; i++)
            fprintf(f, "%s[%zu,%zu,\"%lld.%lld\",%.3f,%.3f,%d]", i ? "," : "", ni[i], ci[i], w.v[i].pid,
                    w.v[i].tid, w.v[i].ts - lo, w.v[i].dur, w.v[i].depth);
        fputs("]});</script>\n", f);
        free(names);
        free(cats);
        free(ni);
        free(ci);
    }
    for (size_t i = 0; i < w.n; i++) {
        free(w.v[i].name);
        free(w.v[i].cat);
    }
    free(w.v);
}

void np_cli_profile_html(FILE *f, const void *data)
{
    const np_cli_profile_page *pg = data;
    fprintf(f, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>nprobe profile</title>"
               "<style>%s</style><script>%s</script></head><body>\n<h1>nprobe profile</h1>\n",
            style, script);
    for (size_t i = 0; i < pg->n; i++) {
        const np_prof_rank *r = &pg->r[i];
        fprintf(f, "<section class=\"rank\" data-rank=\"%lld\"><h2>rank %lld: ", r->rank >= 0 ? r->rank : (long long)i,
                r->rank >= 0 ? r->rank : (long long)i);
        html_text(f, r->path);
        fprintf(f, "</h2>\n<p>%s timeline, %lld events, %lld steps, span %.3f ms, busy %.3f ms</p>\n",
                r->device ? "device" : "cpu", r->events, r->steps, r->span_us / 1e3, r->busy_us / 1e3);
        fputs("<table class=\"categories\"><tr><th>category</th><th>ms</th><th>% of span</th></tr>\n", f);
        for (int c = 0; c < NP_PROF_CLASS_COUNT; c++)
            if (r->class_us[c] > 0 || c == NP_PROF_IDLE)
                fprintf(f, "<tr><td class=\"n\">%s</td><td>%.3f</td><td>%.1f</td></tr>\n", np_prof_class_name(c),
                        r->class_us[c] / 1e3, r->span_us > 0 ? 100 * r->class_us[c] / r->span_us : 0.0);
        fputs("</table>\n<table class=\"ops\"><tr><th>operator</th><th>category</th><th>count</th>"
              "<th>total ms</th><th>mean us</th><th>self ms</th></tr>\n", f);
        for (size_t k = 0, shown = 0; k < r->n_ops && shown < (size_t)pg->top; k++) {
            const np_prof_op *o = &r->ops[k];
            if (!strcmp(o->cat, "user_annotation") || !strcmp(o->cat, "Trace") ||
                !strcmp(o->cat, "gpu_user_annotation") || !strcmp(o->cat, "python_function"))
                continue;
            shown++;
            fputs("<tr><td class=\"n\">", f);
            html_text(f, o->name);
            fputs("</td><td class=\"n\">", f);
            html_text(f, o->cat);
            fprintf(f, "</td><td>%lld</td><td>%.3f</td><td>%.3f</td><td>", o->count, o->total_us / 1e3,
                    o->total_us / (double)o->count);
            if (isfinite(o->self_us))
                fprintf(f, "%.3f", o->self_us / 1e3);
            fputs("</td></tr>\n", f);
        }
        fputs("</table>\n", f);
        write_timeline(f, r, i);
        fputs("</section>\n", f);
    }
    fputs("</body></html>\n", f);
}
