/* monitor/monitor_html.c - `nprobe monitor DIR --html FILE`: one
 * self-contained page (inline SVG, no script, no external resource): the
 * first anomaly, per rank the loss and grad_norm over the steps with the
 * anomalous steps marked, and a step x module heat map of activation norms
 * (docs/MONITOR.md "HTML page"). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mon_internal.h"

#define MAX_COLS 600 /* steps are binned (max per bin) beyond this */

static void esc(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default: fputc(*s, f);
        }
    }
}

static int find_key(const rank_data *rd, const char *name, const char *metric)
{
    for (int64_t k = 0; k < rd->n_keys; k++)
        if (!strcmp(rd->keys[k].name, name) && !strcmp(rd->keys[k].metric, metric))
            return (int)k;
    return -1;
}

static int64_t last_step(const rank_data *rd)
{
    return rd->n_rec ? rd->rec[rd->n_rec - 1].step : 0;
}

/* One scalar series (loss or grad_norm) as a polyline in a W x H box. */
static void trend(FILE *f, const rank_data *rd, const np_monitor_result *res, const char *name,
                  const char *color)
{
    const double W = 720, H = 140;
    int k = find_key(rd, name, name);
    if (k < 0)
        return;
    double lo = INFINITY, hi = -INFINITY;
    for (int64_t i = 0; i < rd->n_rec; i++)
        if (rd->rec[i].key == k && isfinite(rd->rec[i].mean)) {
            lo = fmin(lo, rd->rec[i].mean);
            hi = fmax(hi, rd->rec[i].mean);
        }
    if (!(hi >= lo))
        return;
    double span = hi > lo ? hi - lo : 1.0, steps = (double)(last_step(rd) > 0 ? last_step(rd) : 1);
    fprintf(f, "<figure><figcaption>rank %d: %s (%.4g .. %.4g)</figcaption>\n"
               "<svg width=\"%.0f\" height=\"%.0f\" class=\"trend\">"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"#fafafa\"/>\n",
            rd->rank, name, lo, hi, W, H);
    for (size_t a = 0; a < res->n; a++)
        if (res->anomalies[a].rank == rd->rank)
            fprintf(f, "<line class=\"anomaly\" x1=\"%.1f\" x2=\"%.1f\" y1=\"0\" y2=\"%.0f\" "
                       "stroke=\"#e33\" stroke-width=\"1\"/>\n",
                    W * (double)res->anomalies[a].step / steps,
                    W * (double)res->anomalies[a].step / steps, H);
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", color);
    for (int64_t i = 0; i < rd->n_rec; i++)
        if (rd->rec[i].key == k && isfinite(rd->rec[i].mean))
            fprintf(f, "%.1f,%.1f ", W * (double)rd->rec[i].step / steps,
                    H - 4 - (H - 8) * (rd->rec[i].mean - lo) / span);
    fprintf(f, "\"/></svg></figure>\n");
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Rows: the activation keys in key order; columns: steps (binned). */
static void heatmap(FILE *f, const rank_data *rd, const np_monitor_result *res)
{
    int64_t steps = last_step(rd) + 1, cols = steps < MAX_COLS ? steps : MAX_COLS;
    int rows = 0;
    for (int64_t k = 0; k < rd->n_keys; k++)
        rows += !strcmp(rd->keys[k].metric, "activation");
    if (!rows || cols < 1)
        return;
    double *v = malloc((size_t)rows * (size_t)cols * sizeof *v);
    double *tmp = malloc((size_t)cols * sizeof *tmp);
    int *row_of = malloc((size_t)rd->n_keys * sizeof *row_of);
    if (!v || !tmp || !row_of)
        goto out;
    int r = 0;
    for (int64_t k = 0; k < rd->n_keys; k++)
        row_of[k] = !strcmp(rd->keys[k].metric, "activation") ? r++ : -1;
    for (int64_t i = 0; i < (int64_t)rows * cols; i++)
        v[i] = NAN;
    for (int64_t i = 0; i < rd->n_rec; i++) {
        const np_mon_record *x = &rd->rec[i];
        int row = row_of[x->key];
        if (row < 0)
            continue;
        int64_t c = x->step * cols / steps;
        double val = x->nans || x->infs ? INFINITY : x->norm;
        double *cell = &v[(int64_t)row * cols + c];
        if (isnan(*cell) || val > *cell)
            *cell = val;
    }
    const int cw = 720 / (int)cols > 1 ? 720 / (int)cols : 1, ch = 12, left = 180;
    fprintf(f, "<h2>Activation norms, rank %d (step &times; module; colour: log10 of the norm over "
               "the module's median; black outline: anomaly)</h2>\n"
               "<svg class=\"heatmap\" width=\"%d\" height=\"%d\">\n",
            rd->rank, left + cw * (int)cols + 10, ch * rows + 20);
    for (int64_t k = 0; k < rd->n_keys; k++) {
        int row = row_of[k];
        if (row < 0)
            continue;
        int n = 0;
        for (int64_t c = 0; c < cols; c++)
            if (isfinite(v[(int64_t)row * cols + c]))
                tmp[n++] = v[(int64_t)row * cols + c];
        qsort(tmp, (size_t)n, sizeof *tmp, cmp_double);
        double med = n ? tmp[n / 2] : 1.0;
        fprintf(f, "<text x=\"0\" y=\"%d\" font-size=\"10\">", ch * row + 10);
        esc(f, rd->keys[k].name);
        fprintf(f, "</text>\n");
        for (int64_t c = 0; c < cols; c++) {
            double x = v[(int64_t)row * cols + c];
            if (isnan(x))
                continue;
            double l = isinf(x) ? 3.0 : med > 0 && x > 0 ? log10(x / med) : 0.0;
            l = l < -1 ? -1 : l > 3 ? 3 : l;
            int red = l > 0 ? 255 : (int)(255 * (1 + l)), blue = l < 0 ? 255 : (int)(255 * (1 - l / 3));
            int green = l > 0 ? blue : red;
            fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"rgb(%d,%d,%d)\"/>",
                    left + cw * (int)c, ch * row, cw, ch - 1, red, green, blue);
        }
        fprintf(f, "\n");
    }
    for (size_t a = 0; a < res->n; a++) {
        const np_monitor_anomaly *x = &res->anomalies[a];
        if (x->rank != rd->rank || strcmp(x->metric, "activation") != 0)
            continue;
        int k = find_key(rd, x->name, "activation");
        if (k < 0)
            continue;
        fprintf(f, "<rect class=\"anomaly\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
                   "fill=\"none\" stroke=\"#000\" stroke-width=\"2\"><title>step %lld ",
                left + cw * (int)(x->step * cols / steps), ch * row_of[k], cw, ch - 1,
                (long long)x->step);
        esc(f, x->name);
        fprintf(f, " %s</title></rect>\n", x->rule);
    }
    fprintf(f, "</svg>\n");
out:
    free(v);
    free(tmp);
    free(row_of);
}

static np_status page(FILE *f, const char *dir, const np_monitor_result *res, np_error *err)
{
    fprintf(f, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>nprobe monitor</title>\n"
               "<style>body{font-family:sans-serif;margin:1em}figure{margin:0 0 1em 0}"
               ".first{font-family:monospace;background:#fee;padding:.4em}</style></head><body>\n"
               "<h1>nprobe monitor</h1>\n<p>%d rank(s), %lld step(s), %lld record(s), %zu "
               "anomal%s</p>\n",
            res->ranks, (long long)res->steps, (long long)res->records, res->n,
            res->n == 1 ? "y" : "ies");
    int focus = 0;
    if (res->n) {
        const np_monitor_anomaly *a = &res->anomalies[0];
        focus = a->rank;
        fprintf(f, "<p class=\"first\">first anomaly: step %lld rank %d ", (long long)a->step, a->rank);
        esc(f, a->name);
        fprintf(f, " %s %s: %s %.6g</p>\n", a->metric, a->rule, a->stat, a->value);
    } else {
        fprintf(f, "<p>no anomaly</p>\n");
    }
    fprintf(f, "<h2>Loss and gradient norm per rank (red: anomalous steps)</h2>\n");
    for (int r = 0, seen = 0; seen < res->ranks && r < 1 << 20; r++) {
        char path[4608];
        snprintf(path, sizeof path, "%s/monitor_rank%d.h5", dir, r);
        if (access(path, F_OK) != 0) /* a rank the config left out */
            continue;
        seen++;
        rank_data rd;
        np_status st = np_mon_read_rank(&rd, path, err);
        if (st) {
            free(rd.keys);
            free(rd.rec);
            return st;
        }
        trend(f, &rd, res, "loss", "#36c");
        trend(f, &rd, res, "grad_norm", "#393");
        if (r == focus)
            heatmap(f, &rd, res);
        free(rd.keys);
        free(rd.rec);
    }
    fprintf(f, "</body></html>\n");
    return NP_OK;
}

np_status np_monitor_write_html(const char *path, const char *dir, const np_monitor_result *res,
                                np_error *err)
{
    np_out o;
    np_status st = np_out_begin(&o, path, NULL, err);
    if (st)
        return st;
    FILE *f = np_out_stream(&o);
    if (!f) {
        np_out_abort(&o);
        return np_error_set(err, NP_ERR_IO, path, NULL, "cannot write");
    }
    st = page(f, dir, res, err);
    if (st) {
        np_out_abort(&o);
        return st;
    }
    return np_out_commit(&o, 0, err);
}
