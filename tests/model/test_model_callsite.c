/* tests/model/test_model_callsite.c - every API and module event of a
 * training step (forward and backward) carries the callsite of its call in
 * the model code, "file.c:LINE function", and that line of the runtime's
 * source really makes that call: Functional.linear -> a line calling
 * np_linear(, Module.h.0.attn... -> a line calling attn_forward(, etc.
 * Backward events carry the callsite of their forward call. GPT, MLP and
 * CNN; a call made outside the model carries none. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "nprobe/model.h"
#include "nprobe/runtime.h"

#define MAX_EV 4096

typedef struct seen {
    char name[160];
    char site[160];
    int kind;
} seen;

typedef struct rec {
    seen *ev;
    int n;
    int null_sites;   /* API/module events without a callsite */
    int quiet;
} rec;

static int hook(const np_hook_event *e, void *user)
{
    rec *r = user;
    if (e->kind != NP_EV_API_FORWARD && e->kind != NP_EV_API_BACKWARD && e->kind != NP_EV_MODULE_FORWARD &&
        e->kind != NP_EV_MODULE_BACKWARD)
        return 0;
    if (!e->callsite || !*e->callsite) {
        if (r->null_sites++ < 5 && !r->quiet)
            fprintf(stderr, "no callsite: %s\n", e->name);
    }
    if (r->n < MAX_EV) {
        seen *s = &r->ev[r->n++];
        snprintf(s->name, sizeof s->name, "%s", e->name);
        snprintf(s->site, sizeof s->site, "%s", e->callsite ? e->callsite : "");
        s->kind = e->kind;
    }
    return 0;
}

/* Line `line` (from 1) of NP_SOURCE_DIR/runtime/file into buf; 0 if unreadable. */
static int source_line(const char *file, int line, char *buf, size_t cap)
{
    const char *src = getenv("NP_SOURCE_DIR");
    if (!src || !*src)
        return 0;
    char path[1024];
    snprintf(path, sizeof path, "%s/runtime/%s", src, file);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int ok = 0;
    for (int i = 1; fgets(buf, (int)cap, f); i++)
        if (i == line) {
            ok = 1;
            break;
        }
    fclose(f);
    return ok;
}

/* What the source line of an event's call must contain. */
static void expected_call(const seen *s, char *out, size_t cap)
{
    if (strncmp(s->name, "Module.", 7) == 0) {
        /* Module.{path}.{Class}.forward.N */
        static const struct { const char *cls, *call; } m[] = {
            {".Linear.", "_forward("}, {".Conv2d.", "np_nn_conv2d_forward("},
            {".LayerNorm.", "np_nn_layer_norm_forward("}, {".Embedding.", "np_nn_embedding_forward("},
            {".CausalSelfAttention.", "attn_forward("}, {".MLP.", "mlp_forward("},
            {".Block.", "block_forward("}, {".MaxPool2d.", "pool_forward("},
        };
        snprintf(out, cap, "?");
        for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
            if (strstr(s->name, m[i].cls))
                snprintf(out, cap, "%s", m[i].call);
        if (strstr(s->name, "Module.lm_head."))
            snprintf(out, cap, "np_module_begin(");
        return;
    }
    /* {Functional|Tensor|Torch}.{api}.N.{forward|backward} */
    const char *a = strchr(s->name, '.');
    char api[64] = "";
    if (a) {
        a++;
        size_t k = 0;
        while (a[k] && a[k] != '.' && k + 1 < sizeof api) {
            api[k] = a[k];
            k++;
        }
        api[k] = 0;
    }
    if (strcmp(api, "scaled_dot_product_attention") == 0)
        snprintf(api, sizeof api, "sdpa");
    snprintf(out, cap, "np_%s(", api);
}

/* Name without its trailing ".forward"/".backward" pass, to pair the two. */
static void call_key(const seen *s, char *out, size_t cap)
{
    snprintf(out, cap, "%s", s->name);
    char *p;
    if ((p = strstr(out, ".forward")) != NULL || (p = strstr(out, ".backward")) != NULL)
        memmove(p, p + (p[1] == 'f' ? 8 : 9), strlen(p + (p[1] == 'f' ? 8 : 9)) + 1);
}

static void check_events(const rec *r, const char *model)
{
    int have_src = getenv("NP_SOURCE_DIR") && *getenv("NP_SOURCE_DIR");
    int n_bad = 0, n_bwd_pairs = 0;
    for (int i = 0; i < r->n; i++) {
        const seen *s = &r->ev[i];
        char file[64] = "", func[96] = "";
        int line = 0, used = 0;
        int ok = sscanf(s->site, "%63[A-Za-z0-9_].c:%d %95[A-Za-z0-9_]%n", file, &line, func, &used) == 3 &&
                 used == (int)strlen(s->site) && line > 0;
        if (ok) {
            strcat(file, ".c");
            ok = strcmp(file, "model.c") == 0 || strcmp(file, "model_gpt.c") == 0 ||
                 strcmp(file, "model_mlp.c") == 0 || strcmp(file, "nn_modules.c") == 0;
        }
        char want[64], src[512];
        expected_call(s, want, sizeof want);
        if (ok && have_src) {
            ok = source_line(file, line, src, sizeof src) && strstr(src, want) && strstr(src, "NP_AT(");
            if (!ok && n_bad < 5)
                fprintf(stderr, "%s: %s -> %s:%d does not call %s\n", model, s->name, file, line, want);
        }
        if (!ok && n_bad++ < 5)
            fprintf(stderr, "%s: %s: callsite '%s'\n", model, s->name, s->site);
        /* a backward event has the callsite of its forward call */
        if (s->kind == NP_EV_API_BACKWARD || s->kind == NP_EV_MODULE_BACKWARD) {
            char kb[160], kf[160];
            call_key(s, kb, sizeof kb);
            for (int j = 0; j < r->n; j++) {
                const seen *f = &r->ev[j];
                if (f->kind != NP_EV_API_FORWARD && f->kind != NP_EV_MODULE_FORWARD)
                    continue;
                call_key(f, kf, sizeof kf);
                if (strcmp(kb, kf) == 0) {
                    CHECK_MSG(strcmp(s->site, f->site) == 0, "%s: %s at '%s', its forward at '%s'", model, s->name,
                              s->site, f->site);
                    n_bwd_pairs++;
                    break;
                }
            }
        }
    }
    CHECK_MSG(n_bad == 0, "%s: %d events without a model callsite", model, n_bad);
    CHECK_EQ_INT(r->null_sites, 0);
    CHECK_MSG(r->n >= 18 && n_bwd_pairs >= 9, "%s: %d events, %d backward pairs", model, r->n, n_bwd_pairs);
}

static void run_model(np_model_kind kind, const char *name)
{
    np_train_opts o;
    np_train_opts_default(&o, kind);
    o.steps = 2;
    o.batch = 2;
    np_ctx_opts co;
    np_ctx_opts_default(&co);
    co.threads = 1;
    np_ctx *ctx = NULL;
    np_trainer *tr = NULL;
    np_error err;
    np_error_clear(&err);
    CHECK_EQ_INT(np_ctx_new(&ctx, &co, &err), NP_OK);
    CHECK_EQ_INT(np_trainer_new(&tr, ctx, &o, &err), NP_OK);
    if (!tr) {
        np_ctx_free(ctx);
        return;
    }
    rec r = {calloc(MAX_EV, sizeof(seen)), 0, 0, 0};
    np_ctx_set_hook(ctx, hook, &r);
    for (int s = 0; s < 2; s++) {
        np_step_result res;
        r.n = 0;
        CHECK_EQ_INT(np_trainer_step(tr, &res, &err), NP_OK);
        check_events(&r, name);
        if (kind == NP_MODEL_GPT && s == 0) {
            /* spot checks: where the GPT's own calls are */
            int found_attn = 0, found_lin = 0;
            for (int i = 0; i < r.n; i++) {
                if (strcmp(r.ev[i].name, "Module.h.0.attn.CausalSelfAttention.forward.0") == 0)
                    found_attn = strncmp(r.ev[i].site, "model_gpt.c:", 12) == 0 &&
                                 strstr(r.ev[i].site, " block_forward") != NULL;
                if (strcmp(r.ev[i].name, "Functional.linear.0.forward") == 0)
                    found_lin = strncmp(r.ev[i].site, "nn_modules.c:", 13) == 0 &&
                                strstr(r.ev[i].site, " np_nn_linear_forward") != NULL;
            }
            CHECK_MSG(found_attn, "attention module called from block_forward in model_gpt.c");
            CHECK_MSG(found_lin, "first linear made in np_nn_linear_forward");
        }
    }

    /* a call made outside the model has no callsite; a string callsite is
     * carried as given and used once */
    np_ctx_step_begin(ctx);
    np_tensor *a = np_tensor_tmp(ctx, NP_FLOAT32, 1, (const int64_t[]){4});
    np_tensor_fill(a, 1.0);
    r.n = 0;
    r.quiet = 1;
    np_tensor *b = np_add(ctx, a, a);
    np_ctx_set_callsite(ctx, "train.py:12 main");
    b = np_add(ctx, b, a);
    b = np_add(ctx, b, a);
    CHECK(b != NULL);
    CHECK_EQ_INT(r.n, 3);
    if (r.n == 3) {
        CHECK_STREQ(r.ev[0].site, "");
        CHECK_STREQ(r.ev[1].site, "train.py:12 main");
        CHECK_STREQ(r.ev[2].site, "");
    }
    np_ctx_step_end(ctx);
    np_ctx_set_hook(ctx, NULL, NULL);
    free(r.ev);
    np_trainer_free(tr);
    np_ctx_free(ctx);
}

int main(void)
{
    run_model(NP_MODEL_GPT, "gpt");
    run_model(NP_MODEL_MLP, "mlp");
    run_model(NP_MODEL_CNN, "cnn");
    return check_report();
}
