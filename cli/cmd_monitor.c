/* cli/cmd_monitor.c - `nprobe monitor DIR`: read every rank's monitor file
 * of a run (docs/MONITOR.md), apply the anomaly rules and print the first
 * anomaly across ranks on a line of its own, then the others (text, csv or
 * json on stdout). Exit 0: no anomaly, 1: anomalies, 2: usage/input. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cmd.h"
#include "opts.h"
#include "nprobe/monitor.h"

typedef struct monitor_args {
    const char *dir, *format, *config, *html, *tensorboard;
    double turbulence, spike_factor, ratio_max, ratio_min;
    long spike_window, warmup, limit;
    int no_nan;
} monitor_args;

static const char help_before[] =
    "usage: nprobe monitor DIR [options]\n"
    "\n"
    "Read DIR/monitor_rank*.h5 (a run with \"task\": \"monitor\"; also while it runs or\n"
    "after it was killed, up to each rank's last finished step), apply the anomaly\n"
    "rules and print 'first anomaly: step S rank R NAME metric ...', then the others.\n";

static const char help_after[] =
    "\n"
    "Rules come from --config's monitor.alert.rules (msprobe's rule names), then\n"
    "these options. Anomalies are ordered by step, call order in the step, rank:\n"
    "a NaN that reaches every rank through the gradient all-reduce is the rank's\n"
    "whose own gradient (grad_pre) or activation carried it first, or, with the\n"
    "collectives recorded (monitor.cc_distribution), its input to the collective\n"
    "(comm_in) before what arrived (comm_out).\n"
    "\n"
    "exit codes: 0 no anomaly, 1 anomalies found, 2 usage or input error\n";

static const char *const formats[] = {"text", "csv", "json"};

#define F(f) offsetof(monitor_args, f)
static const np_cli_opt monitor_opts_table[] = {
    {NULL, "DIR", NULL, NULL, NP_OPT_POS, F(dir), 0, 0, NULL, 0, NULL},
    {"output:", "--format", "FMT", "text | csv | json (default text)", NP_OPT_CHOICE, F(format), 0, 0,
     formats, 3, NULL},
    {NULL, "--html", "FILE", "also write a self-contained HTML page: loss and grad_norm\n"
                             "trends, a step x module heat map, anomalies marked",
     NP_OPT_STR, F(html), 0, 0, NULL, 0, NULL},
    {NULL, "--tensorboard", "DIR", "also write TensorBoard event files of the scalar series\n"
                                   "(DIR/rank{R}/: each record's norm or value per step)",
     NP_OPT_STR, F(tensorboard), 0, 0, NULL, 0, NULL},
    {NULL, "--limit", "N", "text: list at most N anomalies after the first (default 20)",
     NP_OPT_LONG, F(limit), 0, 100000000, NULL, 0, NULL},
    {"rules:", "--config", "FILE", "take the rules of this config.json's monitor section",
     NP_OPT_STR, F(config), 0, 0, NULL, 0, NULL},
    {NULL, "--no-nan", NULL, "no NaN/Inf rule", NP_OPT_FLAG, F(no_nan), 0, 0, NULL, 0, NULL},
    {NULL, "--turbulence", "T", "a norm above (1+T) x its running mean; 0 = off (default 49)",
     NP_OPT_DOUBLE, F(turbulence), 0, 0, NULL, 0, NULL},
    {NULL, "--warmup", "N", "records of a norm before the turbulence rule (default 10)",
     NP_OPT_LONG, F(warmup), 0, 100000000, NULL, 0, NULL},
    {NULL, "--spike-factor", "F", "loss or grad_norm above F x the mean of the window;\n"
                                  "0 = off (default 10)",
     NP_OPT_DOUBLE, F(spike_factor), 0, 0, NULL, 0, NULL},
    {NULL, "--spike-window", "W", "steps of that mean (default 10)", NP_OPT_LONG, F(spike_window),
     1, 100000, NULL, 0, NULL},
    {NULL, "--ratio-min", "X", "update-to-weight ratio below X (default 0)", NP_OPT_DOUBLE,
     F(ratio_min), 0, 0, NULL, 0, NULL},
    {NULL, "--ratio-max", "X", "update-to-weight ratio above X; 0 = off (default off)",
     NP_OPT_DOUBLE, F(ratio_max), 0, 0, NULL, 0, NULL},
    {NULL, "--help", NULL, "show this help", NP_OPT_HELP, 0, 0, 0, NULL, 0, NULL},
};
#undef F
#define N_OPTS ((int)(sizeof monitor_opts_table / sizeof monitor_opts_table[0]))

static void print_text_one(const np_monitor_anomaly *a)
{
    printf("step %lld rank %d %s %s %s: %s %.6g", (long long)a->step, a->rank, a->name,
           a->metric, a->rule, a->stat, a->value);
    if (!isnan(a->ref)) {
        if (!strcmp(a->rule, "nan"))
            printf(" of %.0f elements", a->ref);
        else if (!strcmp(a->rule, "update_ratio"))
            printf(" (allowed up to %.6g)", a->ref);
        else
            printf(" against a mean of %.6g", a->ref);
    }
    printf(" (call %d of the step)\n", a->seq);
}

static void json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static void json_num(double v)
{
    if (isfinite(v))
        printf("%.17g", v);
    else
        printf("null");
}

static void csv_field(const char *s)
{
    if (!strpbrk(s, ",\"\n")) {
        fputs(s, stdout);
        return;
    }
    putchar('"');
    for (; *s; s++) {
        if (*s == '"')
            putchar('"');
        putchar(*s);
    }
    putchar('"');
}

int np_cmd_monitor(int argc, char **argv)
{
    monitor_args a;
    memset(&a, 0, sizeof a);
    a.format = "text";
    a.limit = 20;
    a.turbulence = a.spike_factor = a.ratio_max = a.ratio_min = -1;
    a.spike_window = a.warmup = -1;
    int rc = np_cli_opts_parse(monitor_opts_table, N_OPTS, &a, "monitor", help_before, help_after,
                               argc, argv);
    if (rc)
        return rc - 1;
    const char *dir = a.dir;
    if (!dir) {
        np_cli_error("monitor: expected the monitor folder DIR (see 'nprobe monitor --help')");
        return NP_EXIT_USAGE;
    }
    np_monitor_rules rules;
    np_monitor_rules_default(&rules);
    np_error err;
    np_error_clear(&err);
    if (a.config) {
        static np_monitor_config cfg;
        if (np_monitor_config_load(&cfg, a.config, &err)) {
            np_cli_report(&err);
            return NP_EXIT_USAGE;
        }
        rules = cfg.rules;
    }
    if (a.no_nan) rules.nan = 0;
    if (a.turbulence >= 0) rules.turbulence = a.turbulence;
    if (a.warmup >= 0) rules.turbulence_warmup = (int)a.warmup;
    if (a.spike_factor >= 0) rules.spike_factor = a.spike_factor;
    if (a.spike_window > 0) rules.spike_window = (int)a.spike_window;
    if (a.ratio_min >= 0) rules.ratio_min = a.ratio_min;
    if (a.ratio_max >= 0) rules.ratio_max = a.ratio_max;
    np_monitor_result res;
    if (np_monitor_analyze(&res, dir, &rules, &err)) {
        np_cli_report(&err);
        return NP_EXIT_USAGE;
    }
    if (a.html && np_monitor_write_html(a.html, dir, &res, &err)) {
        np_cli_report(&err);
        np_monitor_result_free(&res);
        return NP_EXIT_USAGE;
    }
    if (a.tensorboard && np_monitor_write_tensorboard(a.tensorboard, dir, res.ranks, &err)) {
        np_cli_report(&err);
        np_monitor_result_free(&res);
        return NP_EXIT_USAGE;
    }
    if (!strcmp(a.format, "csv")) {
        printf("order,step,rank,call,name,metric,rule,stat,value,reference\n");
        for (size_t i = 0; i < res.n; i++) {
            const np_monitor_anomaly *x = &res.anomalies[i];
            printf("%zu,%lld,%d,%d,", i, (long long)x->step, x->rank, x->seq);
            csv_field(x->name);
            printf(",%s,%s,%s,%.17g,", x->metric, x->rule, x->stat, x->value);
            if (!isnan(x->ref))
                printf("%.17g", x->ref);
            printf("\n");
        }
    } else if (!strcmp(a.format, "json")) {
        printf("{\"ranks\": %d, \"steps\": %lld, \"records\": %lld, \"anomalies\": [", res.ranks,
               (long long)res.steps, (long long)res.records);
        for (size_t i = 0; i < res.n; i++) {
            const np_monitor_anomaly *x = &res.anomalies[i];
            printf("%s\n  {\"step\": %lld, \"rank\": %d, \"call\": %d, \"name\": ", i ? "," : "",
                   (long long)x->step, x->rank, x->seq);
            json_str(x->name);
            printf(", \"metric\": ");
            json_str(x->metric);
            printf(", \"rule\": \"%s\", \"stat\": \"%s\", \"value\": ", x->rule, x->stat);
            json_num(x->value);
            printf(", \"reference\": ");
            json_num(x->ref);
            printf("}");
        }
        printf("%s]}\n", res.n ? "\n" : "");
    } else {
        printf("nprobe monitor: %d rank(s), %lld step(s), %lld record(s), %zu anomal%s\n",
               res.ranks, (long long)res.steps, (long long)res.records, res.n,
               res.n == 1 ? "y" : "ies");
        if (res.n) {
            printf("first anomaly: ");
            print_text_one(&res.anomalies[0]);
            for (size_t i = 1; i < res.n && (long)(i - 1) < a.limit; i++) {
                printf("  ");
                print_text_one(&res.anomalies[i]);
            }
            if (res.n - 1 > (size_t)a.limit)
                printf("  ... %zu more (--limit, --format csv)\n", res.n - 1 - (size_t)a.limit);
        } else {
            printf("no anomaly\n");
        }
    }
    int code = res.n ? NP_EXIT_DIFF : NP_EXIT_OK;
    np_monitor_result_free(&res);
    return code;
}
