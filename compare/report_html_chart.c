/* compare/report_html_chart.c - the HTML report's charts as inline SVG
 * drawn here (no script, no library): each step's worst severity, error
 * rows and loss across steps; the per-call severity along execution order.
 * Severities are on a log scale; 1 is the error level. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report_html.h"

#define W 960.0
#define LEFT 64.0
#define RIGHT 78.0
#define PLOT_W (W - LEFT - RIGHT)
#define MAX_BUCKETS 1200

/* A log axis over severities: lo..hi (powers of ten). */
typedef struct logax {
    double lo, hi;   /* log10 */
    double top, h;   /* pixels */
} logax;

static logax log_axis(double min_pos, double max_fin, double top, double h)
{
    logax a;
    double lo = min_pos > 0 && isfinite(min_pos) ? floor(log10(min_pos)) : -3;
    double hi = max_fin > 0 && isfinite(max_fin) ? ceil(log10(max_fin)) : 1;
    lo = lo < -8 ? -8 : lo > -1 ? -1 : lo;
    hi = hi < 1 ? 1 : hi > 12 ? 12 : hi;
    a.lo = lo;
    a.hi = hi;
    a.top = top;
    a.h = h;
    return a;
}

/* y of a severity; 0 and tiny values sit on the floor, inf at the top. */
static double ly(const logax *a, double s)
{
    if (isnan(s) || s <= 0)
        return a->top + a->h;
    if (isinf(s))
        return a->top;
    double v = log10(s);
    v = v < a->lo ? a->lo : v > a->hi ? a->hi : v;
    return a->top + a->h * (a->hi - v) / (a->hi - a->lo);
}

static void log_grid(FILE *f, const logax *a, const char *label)
{
    int step = a->hi - a->lo > 8 ? 2 : 1;
    for (int e = (int)a->lo; e <= (int)a->hi; e += step) {
        double y = ly(a, pow(10, e));
        cmp_html_printf(f, "<line class=gr x1=%.0f x2=%.0f y1=%.1f y2=%.1f />"
                           "<text class=ax x=%.0f y=%.1f text-anchor=end>1e%d</text>",
                        LEFT, W - RIGHT, y, y, LEFT - 6, y + 4, e);
    }
    double y1 = ly(a, 1.0);
    cmp_html_printf(f, "<line class=err x1=%.0f x2=%.0f y1=%.1f y2=%.1f />"
                       "<text class=errl x=%.0f y=%.1f>error level</text>",
                    LEFT, W - RIGHT, y1, y1, W - RIGHT + 4, y1 + 4);
    cmp_html_printf(f, "<text class=axt x=14 y=%.1f transform='rotate(-90 14 %.1f)' "
                       "text-anchor=middle>%s</text>",
                    a->top + a->h / 2, a->top + a->h / 2, label);
}

/* ---- across steps ---------------------------------------------------------- */

static void step_ticks(FILE *f, const cmp_html_step *s, int n, double bw, double y)
{
    int every = n <= 20 ? 1 : (n + 19) / 20;
    for (int i = 0; i < n; i += every)
        cmp_html_printf(f, "<text class=ax x=%.1f y=%.1f text-anchor=middle>%d</text>",
                        LEFT + (i + 0.5) * bw, y, s[i].step);
    cmp_html_printf(f, "<text class=axt x=%.0f y=%.1f text-anchor=middle>step</text>",
                    LEFT + PLOT_W / 2, y + 16);
}

static void loss_panel(FILE *f, const cmp_html_step *s, int n, double bw, double top, double h)
{
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 2 && s[i].has_loss; k++) {
            double v = k ? s[i].loss_cmp : s[i].loss_bench;
            if (isfinite(v)) {
                lo = v < lo ? v : lo;
                hi = v > hi ? v : hi;
            }
        }
    if (!(lo <= hi))
        return;
    if (hi - lo < 1e-12 * (fabs(hi) + 1))
        hi = lo + 1;
    cmp_html_printf(f, "<text class=axt x=14 y=%.1f transform='rotate(-90 14 %.1f)' "
                       "text-anchor=middle>loss</text>"
                       "<text class=ax x=%.0f y=%.1f text-anchor=end>%.4g</text>"
                       "<text class=ax x=%.0f y=%.1f text-anchor=end>%.4g</text>",
                    top + h / 2, top + h / 2, LEFT - 6, top + 4, hi, LEFT - 6, top + h, lo);
    for (int k = 0; k < 2; k++) {
        cmp_html_printf(f, "<path class=%s d='", k ? "lc" : "lb");
        int pen = 0;
        for (int i = 0; i < n; i++) {
            double v = k ? s[i].loss_cmp : s[i].loss_bench;
            if (!s[i].has_loss || !isfinite(v)) {
                pen = 0;
                continue;
            }
            cmp_html_printf(f, "%c%.1f %.1f", pen ? 'L' : 'M', LEFT + (i + 0.5) * bw,
                            top + h * (hi - v) / (hi - lo));
            pen = 1;
        }
        cmp_html_raw(f, "'/>");
    }
    cmp_html_printf(f, "<text class=lgb x=%.0f y=%.1f>&#8212; bench</text>"
                       "<text class=lgc x=%.0f y=%.1f>&#8212; cmp</text>",
                    W - RIGHT + 4, top + 12, W - RIGHT + 4, top + 28);
}

void cmp_html_steps_chart(FILE *f, const cmp_html_step *s, int n, int first_fail)
{
    int any_loss = 0;
    double min_pos = INFINITY, max_fin = 0;
    size_t max_err = 1;
    for (int i = 0; i < n; i++) {
        any_loss |= s[i].has_loss;
        if (s[i].worst > 0 && s[i].worst < min_pos)
            min_pos = s[i].worst;
        if (isfinite(s[i].worst) && s[i].worst > max_fin)
            max_fin = s[i].worst;
        max_err = s[i].errors > max_err ? s[i].errors : max_err;
    }
    double sev_h = 160, err_top = 20 + sev_h + 14, err_h = 60;
    double loss_top = err_top + err_h + 14, loss_h = any_loss ? 90 : 0;
    double height = loss_top + loss_h + 40;
    double bw = PLOT_W / (n > 0 ? n : 1), bar = bw * 0.7 < 1 ? 1 : bw * 0.7;
    logax a = log_axis(min_pos, max_fin, 20, sev_h);
    cmp_html_printf(f, "<svg class=chart id=steps-chart viewBox='0 0 %.0f %.0f' role=img>", W, height);
    log_grid(f, &a, "worst severity");
    for (int i = 0; i < n; i++) {
        double x = LEFT + (i + 0.5) * bw - bar / 2, y = ly(&a, s[i].worst);
        cmp_html_printf(f, "<rect class=v%d x=%.1f y=%.1f width=%.1f height=%.1f>"
                           "<title>step %d: worst severity %.3g, %zu error rows, %zu warning "
                           "rows of %zu</title></rect>",
                        s[i].verdict, x, y, bar, a.top + a.h - y + 0.5, s[i].step, s[i].worst,
                        s[i].errors, s[i].warnings, s[i].rows);
        double eh = err_h * (double)s[i].errors / (double)max_err;
        if (s[i].errors)
            cmp_html_printf(f, "<rect class=eb x=%.1f y=%.1f width=%.1f height=%.1f>"
                               "<title>step %d: %zu error rows</title></rect>",
                            x, err_top + err_h - eh, bar, eh, s[i].step, s[i].errors);
    }
    cmp_html_printf(f, "<line class=gr x1=%.0f x2=%.0f y1=%.1f y2=%.1f />"
                       "<text class=ax x=%.0f y=%.1f text-anchor=end>%zu</text>"
                       "<text class=axt x=14 y=%.1f transform='rotate(-90 14 %.1f)' "
                       "text-anchor=middle>error rows</text>",
                    LEFT, W - RIGHT, err_top + err_h, err_top + err_h, LEFT - 6, err_top + 8,
                    max_err, err_top + err_h / 2, err_top + err_h / 2);
    if (any_loss)
        loss_panel(f, s, n, bw, loss_top, loss_h);
    if (first_fail >= 0) {
        double x = LEFT + (first_fail + 0.5) * bw;
        cmp_html_printf(f, "<line class=ff x1=%.1f x2=%.1f y1=14 y2=%.1f />"
                           "<text class=ffl x=%.1f y=12 text-anchor=%s>first failing step %d</text>",
                        x, x, loss_top + loss_h, x + 4, first_fail > n * 2 / 3 ? "end" : "start",
                        s[first_fail].step);
    }
    step_ticks(f, s, n, bw, height - 22);
    cmp_html_raw(f, "</svg>\n");
}

/* ---- along execution order --------------------------------------------------- */

/* Worst output severity per bucket of calls, forward (0) and backward (1). */
static void bucket_max(double *bmax, const np_cmp_pair *p, int nb)
{
    for (int i = 0; i < 2 * nb; i++)
        bmax[i] = NAN;
    for (size_t k = 0; k < p->n_calls; k++) {
        int b = (int)((double)k * nb / (double)p->n_calls);
        double *m = &bmax[2 * b + (p->calls[k].backward ? 1 : 0)];
        double s = p->calls[k].sev_out;
        if (!isnan(s) && (isnan(*m) || s > *m))
            *m = s;
    }
}

static void order_marks(FILE *f, const np_cmp_pair *p, const logax *a, double bw)
{
    for (size_t i = p->n_culprits; i-- > 0;) {
        int k = p->culprits[i];
        double x = LEFT + ((double)k + 0.5) * PLOT_W / (double)p->n_calls;
        double y = ly(a, p->calls[k].sev_out);
        if (i) {
            cmp_html_printf(f, "<path class=cm2 d='M%.1f %.1fl-4 -8h8z'><title>culprit: ", x,
                            y - 2);
            cmp_html_text(f, p->calls[k].name);
            cmp_html_raw(f, "</title></path>");
            continue;
        }
        cmp_html_printf(f, "<line class=ff x1=%.1f x2=%.1f y1=%.1f y2=%.1f />"
                           "<path class=cm d='M%.1f %.1fl-6 -11h12z'><title>first culprit: ",
                        x, x, a->top, a->top + a->h, x, y - 2);
        cmp_html_text(f, p->calls[k].name);
        cmp_html_printf(f, "</title></path><text class=ffl x=%.1f y=%.1f text-anchor=%s>"
                           "first culprit: ",
                        x + (x > W * 0.6 ? -8 : 8), a->top + 12, x > W * 0.6 ? "end" : "start");
        cmp_html_text(f, p->calls[k].name);
        cmp_html_raw(f, "</text>");
    }
    (void)bw;
}

void cmp_html_order_chart(FILE *f, const np_cmp_pair *p)
{
    int nb = p->n_calls < MAX_BUCKETS ? (int)p->n_calls : MAX_BUCKETS;
    if (nb == 0) {
        cmp_html_raw(f, "<p class=note>No calls to plot.</p>\n");
        return;
    }
    double *bmax = malloc(2 * (size_t)nb * sizeof *bmax);
    if (!bmax)
        return;
    bucket_max(bmax, p, nb);
    double min_pos = INFINITY, max_fin = 0;
    for (int i = 0; i < 2 * nb; i++) {
        if (bmax[i] > 0 && bmax[i] < min_pos)
            min_pos = bmax[i];
        if (isfinite(bmax[i]) && bmax[i] > max_fin)
            max_fin = bmax[i];
    }
    logax a = log_axis(min_pos, max_fin, 24, 200);
    double bw = PLOT_W / nb, floor_y = a.top + a.h;
    cmp_html_printf(f, "<svg class=chart id=order-chart viewBox='0 0 %.0f %.0f' role=img>", W,
                    floor_y + 44);
    size_t first_bwd = p->n_calls;
    for (size_t k = 0; k < p->n_calls && first_bwd == p->n_calls; k++)
        if (p->calls[k].backward)
            first_bwd = k;
    double xb = LEFT + PLOT_W * (double)first_bwd / (double)p->n_calls;
    if (first_bwd < p->n_calls)
        cmp_html_printf(f, "<rect class=bwd x=%.1f y=%.1f width=%.1f height=%.1f />",
                        xb, a.top, W - RIGHT - xb, a.h);
    log_grid(f, &a, "output severity");
    for (int d = 0; d < 2; d++) {
        cmp_html_printf(f, "<path class=%s d='", d ? "sb" : "sf");
        for (int b = 0; b < nb; b++)
            if (!isnan(bmax[2 * b + d]))
                cmp_html_printf(f, "M%.1f %.1fV%.1f", LEFT + (b + 0.5) * bw, floor_y,
                                ly(&a, bmax[2 * b + d]));
        cmp_html_raw(f, "'/>");
    }
    order_marks(f, p, &a, bw);
    cmp_html_printf(f, "<text class=ax x=%.0f y=%.1f>call 1</text>"
                       "<text class=ax x=%.0f y=%.1f text-anchor=end>call %zu</text>"
                       "<text class=axt x=%.0f y=%.1f text-anchor=middle>calls in execution "
                       "order%s</text>"
                       "<text class=lgf x=%.0f y=%.1f>| forward</text>"
                       "<text class=lgk x=%.0f y=%.1f>| backward</text>",
                    LEFT, floor_y + 16, W - RIGHT, floor_y + 16, p->n_calls, LEFT + PLOT_W / 2,
                    floor_y + 16, nb < (int)p->n_calls ? " (worst of each pixel column)" : "",
                    LEFT, floor_y + 36, LEFT + 90, floor_y + 36);
    cmp_html_raw(f, "</svg>\n");
    free(bmax);
}
