/* tests/model/test_model_train.c - the models learn their data sets, runs
 * are bit-reproducible (same seed, 1 vs 2 threads, checkpoint and resume),
 * the fp16 loss scaler skips an overflowing step, the generated data is
 * what it claims (sums add up, targets are the next tokens), the text loader
 * reads a file, and module/parameter-grad events carry GPT-2 names. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "nprobe/model.h"
#include "nprobe/runtime.h"
#include "rt_internal.h" /* rt_set_par_all */

static int sanitized(void)
{
    const char *s = getenv("NP_SANITIZED");
    return s && *s && strcmp(s, "0") != 0;
}

typedef struct run_out {
    double *loss;       /* per step */
    int n;
    float *weights;     /* all parameters concatenated at the end */
    int64_t n_weights;
} run_out;

static void run_free(run_out *r)
{
    free(r->loss);
    free(r->weights);
    memset(r, 0, sizeof *r);
}

static void collect_weights(run_out *r, np_trainer *tr)
{
    int n = 0;
    np_tensor *const *p = np_model_params(np_trainer_model(tr), &n);
    r->n_weights = np_model_n_weights(np_trainer_model(tr));
    r->weights = malloc((size_t)r->n_weights * sizeof(float));
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        memcpy(r->weights + off, np_tensor_f32(p[i]), (size_t)p[i]->numel * sizeof(float));
        off += p[i]->numel;
    }
}

/* Train `steps` steps from opts (optionally loading `load` first and saving
 * to `save` after); losses of the steps run go to r. */
static int run(run_out *r, const np_train_opts *o, int64_t steps, int threads, np_dtype prec,
               const char *load, const char *save)
{
    memset(r, 0, sizeof *r);
    np_ctx_opts co;
    np_ctx_opts_default(&co);
    co.threads = threads;
    co.precision = prec;
    co.seed = o->seed;
    np_ctx *ctx = NULL;
    np_trainer *tr = NULL;
    np_error err;
    np_error_clear(&err);
    int ok = np_ctx_new(&ctx, &co, &err) == NP_OK && np_trainer_new(&tr, ctx, o, &err) == NP_OK;
    if (ok && load)
        ok = np_trainer_load(tr, load, &err) == NP_OK;
    r->loss = calloc((size_t)(steps > 0 ? steps : 1), sizeof *r->loss);
    for (int64_t s = 0; ok && s < steps; s++) {
        np_step_result res;
        ok = np_trainer_step(tr, &res, &err) == NP_OK;
        if (ok)
            r->loss[r->n++] = res.loss;
    }
    if (ok)
        collect_weights(r, tr);
    if (ok && save)
        ok = np_trainer_save(tr, save, &err) == NP_OK;
    if (!ok)
        fprintf(stderr, "run failed: %s: %s\n", err.key, err.text);
    np_trainer_free(tr);
    np_ctx_free(ctx);
    return ok;
}

static double mean_last(const run_out *r, int k)
{
    double s = 0;
    for (int i = r->n - k; i < r->n; i++)
        s += r->loss[i];
    return s / k;
}

/* ---- learning ----------------------------------------------------------- */

static void test_mlp_learns(void)
{
    np_train_opts o;
    np_train_opts_default(&o, NP_MODEL_MLP);
    o.steps = sanitized() ? 80 : 200;
    run_out r;
    CHECK(run(&r, &o, o.steps, 0, NP_FLOAT32, NULL, NULL));
    if (r.n == o.steps) {
        /* 3 balanced classes: the untrained loss is near ln 3 = 1.0986 */
        CHECK_CLOSE(r.loss[0], log(3.0), 0.15, 0);
        fprintf(stderr, "mlp: loss %.4f -> %.4f\n", r.loss[0], mean_last(&r, 10));
        CHECK(mean_last(&r, 10) < 0.2);
    }
    run_free(&r);
}

static void test_cnn_learns(void)
{
    np_train_opts o;
    np_train_opts_default(&o, NP_MODEL_CNN);
    o.steps = sanitized() ? 60 : 150;
    run_out r;
    CHECK(run(&r, &o, o.steps, 0, NP_FLOAT32, NULL, NULL));
    if (r.n == o.steps) {
        CHECK_CLOSE(r.loss[0], log(4.0), 0.15, 0);     /* 4 classes: ln 4 = 1.386 */
        fprintf(stderr, "cnn: loss %.4f -> %.4f\n", r.loss[0], mean_last(&r, 10));
        CHECK(mean_last(&r, 10) < (sanitized() ? 1.0 : 0.3));
    }
    run_free(&r);
}

/* Entropy per character of the sum language "a+b=c;" (a, b uniform digits)
 * for a model that knows the rule: 2 ln 10 nats per line / mean line length. */
static double arith_floor(void)
{
    double len = 0;
    for (int a = 0; a < 10; a++)
        for (int b = 0; b < 10; b++)
            len += 5 + (a + b >= 10 ? 2 : 1);
    return 2 * log(10.0) / (len / 100);
}

static void test_gpt_learns(void)
{
    np_train_opts o;
    np_train_opts_default(&o, NP_MODEL_GPT);
    o.steps = sanitized() ? 60 : 300;
    o.batch = 16;
    o.optim.lr = 1e-2;
    run_out r;
    CHECK(run(&r, &o, o.steps, 0, NP_FLOAT32, NULL, NULL));
    if (r.n == o.steps) {
        double floor_ = arith_floor();
        CHECK_CLOSE(r.loss[0], log(13.0), 0.2, 0);     /* 13 symbols: ln 13 = 2.565 */
        fprintf(stderr, "gpt: loss %.4f -> %.4f (entropy floor %.4f)\n", r.loss[0],
                mean_last(&r, 20), floor_);
        CHECK(mean_last(&r, 20) < (sanitized() ? 2.0 : 1.2));
        CHECK(mean_last(&r, 20) > floor_ - 0.05);      /* cannot beat the entropy */
    }
    run_free(&r);
}

/* ---- determinism -------------------------------------------------------- */

static int same_bits(const run_out *a, const run_out *b)
{
    if (a->n != b->n || a->n_weights != b->n_weights || !a->weights || !b->weights)
        return 0;
    return memcmp(a->loss, b->loss, (size_t)a->n * sizeof(double)) == 0 &&
           memcmp(a->weights, b->weights, (size_t)a->n_weights * sizeof(float)) == 0;
}

static void test_determinism(void)
{
    np_train_opts o;
    np_train_opts_default(&o, NP_MODEL_GPT);
    o.steps = sanitized() ? 4 : 12;
    run_out a, b, c, d;
    CHECK(run(&a, &o, o.steps, 2, NP_FLOAT32, NULL, NULL));
    CHECK(run(&b, &o, o.steps, 2, NP_FLOAT32, NULL, NULL));
    CHECK_MSG(same_bits(&a, &b), "two runs with seed %llu differ", (unsigned long long)o.seed);
    CHECK(run(&c, &o, o.steps, 1, NP_FLOAT32, NULL, NULL));
    CHECK_MSG(same_bits(&a, &c), "1 and 2 threads differ");
    o.seed += 1;
    CHECK(run(&d, &o, o.steps, 2, NP_FLOAT32, NULL, NULL));
    CHECK_MSG(d.n > 0 && d.loss[0] != a.loss[0], "another seed gives the same loss");
    run_free(&a);
    run_free(&b);
    run_free(&c);
    run_free(&d);

    np_train_opts_default(&o, NP_MODEL_CNN);
    o.steps = 3;
    CHECK(run(&a, &o, o.steps, 1, NP_FLOAT32, NULL, NULL));
    CHECK(run(&b, &o, o.steps, 2, NP_FLOAT32, NULL, NULL));
    CHECK_MSG(same_bits(&a, &b), "cnn: 1 and 2 threads differ");
    run_free(&a);
    run_free(&b);

    /* The default GPT and CNN are below the OpenMP thresholds of layer_norm,
     * softmax, cross_entropy, embedding backward and the optimizer: with
     * rt_set_par_all every kernel takes its parallel path, so a result that
     * depends on the thread count shows here. */
    rt_set_par_all(1);
    const np_model_kind kinds[2] = {NP_MODEL_GPT, NP_MODEL_CNN};
    for (int k = 0; k < 2; k++) {
        np_train_opts_default(&o, kinds[k]);
        o.steps = 3;
        CHECK(run(&a, &o, o.steps, 1, NP_FLOAT32, NULL, NULL));
        CHECK(run(&b, &o, o.steps, 2, NP_FLOAT32, NULL, NULL));
        CHECK_MSG(same_bits(&a, &b), "%s, every kernel parallel: 1 and 2 threads differ", k ? "cnn" : "gpt");
        run_free(&a);
        run_free(&b);
    }
    rt_set_par_all(0);
}

static void test_checkpoint_resume(const char *dir, np_model_kind kind, np_optim_kind ok_,
                                   np_dtype prec)
{
    char path[512];
    snprintf(path, sizeof path, "%s/ckpt_%d_%d_%d.h5", dir, (int)kind, (int)ok_, (int)prec);
    np_train_opts o;
    np_train_opts_default(&o, kind);
    double lr = o.optim.lr;
    np_optim_config_default(&o.optim, ok_);
    o.optim.lr = ok_ == NP_OPTIM_SGD ? 0.05 : lr;
    o.steps = 8;
    o.scaler_growth_interval = 2;    /* let the fp16 scale change inside the run */
    o.scaler_init = 1024;
    run_out full, first, second;
    CHECK(run(&full, &o, 8, 0, prec, NULL, NULL));
    CHECK(run(&first, &o, 4, 0, prec, NULL, path));
    CHECK(run(&second, &o, 4, 0, prec, path, NULL));
    int same = full.n == 8 && second.n == 4 && first.n == 4 &&
               memcmp(full.loss, first.loss, 4 * sizeof(double)) == 0 &&
               memcmp(full.loss + 4, second.loss, 4 * sizeof(double)) == 0 &&
               full.n_weights == second.n_weights &&
               memcmp(full.weights, second.weights, (size_t)full.n_weights * sizeof(float)) == 0;
    CHECK_MSG(same, "%s/%s/%s: save at 4 + load + 4 steps differs from 8 steps",
              np_model_kind_name(kind), np_optim_kind_name(ok_), np_dtype_name(prec));
    /* the file is what docs/CONTRACTS.md says */
    np_model_config c;
    int64_t step = -1;
    uint64_t seed = 0;
    CHECK_EQ_INT(np_checkpoint_read_config(&c, &step, &seed, path, NULL), NP_OK);
    CHECK_EQ_INT(step, 4);
    CHECK_EQ_INT(seed, o.seed);
    CHECK_EQ_INT(c.kind, kind);
    run_free(&full);
    run_free(&first);
    run_free(&second);
}

static void test_checkpoint_errors(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/not_a_ckpt.h5", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs("hello", f);
        fclose(f);
    }
    np_model_config c;
    int64_t step;
    uint64_t seed;
    np_error err;
    np_error_clear(&err);
    CHECK(np_checkpoint_read_config(&c, &step, &seed, path, &err) != NP_OK);
    CHECK_STREQ(err.file, path);
    /* a GPT checkpoint loaded into a wider GPT is refused, naming the field */
    np_train_opts o;
    np_train_opts_default(&o, NP_MODEL_GPT);
    o.steps = 1;
    snprintf(path, sizeof path, "%s/gpt_small.h5", dir);
    run_out r;
    CHECK(run(&r, &o, 1, 0, NP_FLOAT32, NULL, path));
    run_free(&r);
    o.model.n_embd = 32;
    np_ctx *ctx = NULL;
    np_trainer *tr = NULL;
    np_error_clear(&err);
    CHECK_EQ_INT(np_ctx_new(&ctx, NULL, NULL), NP_OK);
    CHECK_EQ_INT(np_trainer_new(&tr, ctx, &o, NULL), NP_OK);
    if (tr) {
        CHECK(np_trainer_load(tr, path, &err) != NP_OK);
        CHECK_STREQ(err.key, "n_embd");
    }
    np_trainer_free(tr);
    np_ctx_free(ctx);
}

/* ---- the fp16 loss scaler inside the trainer ---------------------------- */

static void test_scaler_skips(void)
{
    np_train_opts o;
    np_train_opts_default(&o, NP_MODEL_MLP);
    o.steps = 3;
    o.scaler_init = 1e38;            /* the scaled gradients overflow fp16 */
    np_ctx_opts co;
    np_ctx_opts_default(&co);
    co.precision = NP_FLOAT16;
    np_ctx *ctx = NULL;
    np_trainer *tr = NULL;
    CHECK_EQ_INT(np_ctx_new(&ctx, &co, NULL), NP_OK);
    CHECK_EQ_INT(np_trainer_new(&tr, ctx, &o, NULL), NP_OK);
    if (!tr) {
        np_ctx_free(ctx);
        return;
    }
    int n = 0;
    np_tensor *const *p = np_model_params(np_trainer_model(tr), &n);
    float before = np_tensor_f32(p[0])[0];
    np_step_result r;
    CHECK_EQ_INT(np_trainer_step(tr, &r, NULL), NP_OK);
    CHECK_EQ_INT(r.skipped, 1);
    CHECK(isfinite(r.loss));
    CHECK_EQ_FLOAT(np_tensor_f32(p[0])[0], before);          /* no update */
    CHECK_EQ_FLOAT(np_trainer_scaler(tr)->scale, 5e37);
    CHECK_EQ_INT(np_trainer_scaler(tr)->skipped, 1);
    CHECK_EQ_INT(np_optim_steps(np_trainer_optim(tr)), 0);
    /* a sane scale: the next steps go through */
    np_trainer_scaler(tr)->scale = 1024;
    CHECK_EQ_INT(np_trainer_step(tr, &r, NULL), NP_OK);
    CHECK_EQ_INT(r.skipped, 0);
    CHECK_EQ_FLOAT(r.loss_scale, 1024.0);
    CHECK(np_tensor_f32(p[0])[0] != before);
    CHECK_EQ_INT(np_optim_steps(np_trainer_optim(tr)), 1);
    np_trainer_free(tr);
    np_ctx_free(ctx);
}

/* ---- data ----------------------------------------------------------------- */

static void test_arith_data(void)
{
    np_dataset *ds = NULL, *ds2 = NULL;
    CHECK_EQ_INT(np_data_open(&ds, NP_DATA_ARITH, 40, 7, NULL), NP_OK);
    CHECK_EQ_INT(np_data_open(&ds2, NP_DATA_ARITH, 40, 7, NULL), NP_OK);
    if (!ds || !ds2)
        return;
    const char *vocab = np_data_vocab(ds);
    CHECK_STREQ(vocab, "+0123456789;=");
    np_batch b, b2;
    memset(&b, 0, sizeof b);
    memset(&b2, 0, sizeof b2);
    CHECK_EQ_INT(np_data_get_batch(&b, ds, 5, 4, NULL), NP_OK);
    CHECK_EQ_INT(np_data_get_batch(&b2, ds2, 3, 4, NULL), NP_OK);
    char h5a[65], h5b[65], h3[65];
    np_data_batch_sha256(&b2, h3);
    CHECK_EQ_INT(np_data_get_batch(&b2, ds2, 5, 4, NULL), NP_OK);
    np_data_batch_sha256(&b, h5a);
    np_data_batch_sha256(&b2, h5b);
    CHECK_STREQ(h5a, h5b);                         /* batch 5 does not depend on history */
    CHECK(strcmp(h3, h5a) != 0);
    /* the hash is SHA-256 over x then y */
    size_t nx = (size_t)b.x_numel * 8, ny = (size_t)b.y_numel * 8;
    unsigned char *raw = malloc(nx + ny);
    memcpy(raw, b.xi, nx);
    memcpy(raw + nx, b.y, ny);
    char hraw[65];
    np_sha256_hex(hraw, raw, nx + ny);
    CHECK_STREQ(hraw, h5a);
    free(raw);
    /* targets are the next tokens; every complete "a+b=c;" adds up */
    int checked = 0;
    for (int i = 0; i < 4; i++) {
        char s[42];
        for (int t = 0; t < 40; t++) {
            s[t] = vocab[b.xi[i * 40 + t]];
            if (t > 0)
                CHECK_EQ_INT(b.y[i * 40 + t - 1], b.xi[i * 40 + t]);
        }
        s[40] = vocab[b.y[i * 40 + 39]];
        s[41] = '\0';
        char *p = strchr(s, ';');
        while (p && strchr(p + 1, ';')) {
            int x, y, z;
            if (sscanf(p + 1, "%d+%d=%d;", &x, &y, &z) == 3) {
                CHECK_EQ_INT(z, x + y);
                CHECK(x >= 0 && x <= 9 && y >= 0 && y <= 9);
                checked++;
            }
            p = strchr(p + 1, ';');
        }
    }
    CHECK(checked >= 12);
    np_batch_free(&b);
    np_batch_free(&b2);
    np_data_free(ds);
    np_data_free(ds2);
}

static void test_text_data(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/text.txt", dir);
    const char *text = "to be or not to be, that is the question";
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f)
        return;
    fputs(text, f);
    fclose(f);
    np_dataset *ds = NULL;
    CHECK_EQ_INT(np_data_open_text(&ds, path, 8, 3, NULL), NP_OK);
    if (!ds)
        return;
    CHECK_STREQ(np_data_vocab(ds), " ,abehinoqrstu");   /* its 14 distinct bytes, sorted */
    CHECK_EQ_INT(np_data_n_classes(ds), 14);
    char want[65];
    np_sha256_hex(want, text, strlen(text));
    CHECK_STREQ(np_data_file_sha256(ds), want);
    np_batch b;
    memset(&b, 0, sizeof b);
    CHECK_EQ_INT(np_data_get_batch(&b, ds, 0, 3, NULL), NP_OK);
    for (int i = 0; i < 3; i++) {
        char w[10];
        for (int t = 0; t < 8; t++)
            w[t] = np_data_vocab(ds)[b.xi[i * 8 + t]];
        w[8] = np_data_vocab(ds)[b.y[i * 8 + 7]];
        w[9] = '\0';
        CHECK_MSG(strstr(text, w) != NULL, "window '%s' is not in the file", w);
    }
    np_batch_free(&b);
    np_data_free(ds);
    np_error err;
    np_error_clear(&err);
    CHECK_EQ_INT(np_data_open_text(&ds, path, 64, 3, &err), NP_ERR_FORMAT);   /* too short */
    np_error_clear(&err);
    snprintf(path, sizeof path, "%s/missing.txt", dir);
    CHECK_EQ_INT(np_data_open_text(&ds, path, 8, 3, &err), NP_ERR_IO);
    CHECK_STREQ(err.file, path);
}

/* ---- event names ---------------------------------------------------------- */

typedef struct seen {
    int attn_fwd, c_fc_fwd, wte_fwd, lm_head_fwd, attn_bwd, root, grads;
    int c_fc_grad_weight, c_fc_grad_bias;
    char first_grad[128];
} seen;

static int hook(const np_hook_event *ev, void *user)
{
    seen *s = user;
    if (!ev->name)
        return 0;
    if (strcmp(ev->name, "Module.h.0.attn.CausalSelfAttention.forward.0") == 0)
        s->attn_fwd++;
    if (strcmp(ev->name, "Module.h.0.attn.CausalSelfAttention.backward.0") == 0)
        s->attn_bwd++;
    if (strcmp(ev->name, "Module.h.1.mlp.c_fc.Linear.forward.0") == 0)
        s->c_fc_fwd++;
    if (strcmp(ev->name, "Module.wte.Embedding.forward.0") == 0)
        s->wte_fwd++;
    if (strcmp(ev->name, "Module.lm_head.Linear.forward.0") == 0)
        s->lm_head_fwd++;
    if (strstr(ev->name, "GPT") || strncmp(ev->name, "Module..", 8) == 0)
        s->root++;
    if (ev->kind == NP_EV_PARAM_GRAD) {
        if (!s->grads++)
            snprintf(s->first_grad, sizeof s->first_grad, "%s", ev->name);
        if (strcmp(ev->name, "Module.h.0.mlp.c_fc.Linear") == 0)
            for (int i = 0; i < ev->n_tensors; i++) {
                const np_hook_tensor *t = &ev->tensors[i];
                if (t->role == NP_ROLE_PARAMETERS_GRAD && t->key && strcmp(t->key, "weight") == 0 &&
                    t->t && t->t->shape[0] == 256 && t->t->shape[1] == 64)
                    s->c_fc_grad_weight++;
                if (t->role == NP_ROLE_PARAMETERS_GRAD && t->key && strcmp(t->key, "bias") == 0)
                    s->c_fc_grad_bias++;
            }
    }
    return 0;
}

static void test_event_names(void)
{
    np_train_opts o;
    np_train_opts_default(&o, NP_MODEL_GPT);
    o.steps = 1;
    np_ctx *ctx = NULL;
    np_trainer *tr = NULL;
    CHECK_EQ_INT(np_ctx_new(&ctx, NULL, NULL), NP_OK);
    CHECK_EQ_INT(np_trainer_new(&tr, ctx, &o, NULL), NP_OK);
    if (!tr) {
        np_ctx_free(ctx);
        return;
    }
    seen s;
    memset(&s, 0, sizeof s);
    np_ctx_set_hook(ctx, hook, &s);
    np_step_result r;
    CHECK_EQ_INT(np_trainer_step(tr, &r, NULL), NP_OK);
    CHECK_EQ_INT(s.attn_fwd, 1);
    CHECK_EQ_INT(s.attn_bwd, 1);
    CHECK_EQ_INT(s.c_fc_fwd, 1);
    CHECK_EQ_INT(s.wte_fwd, 1);
    CHECK_EQ_INT(s.lm_head_fwd, 1);
    CHECK_EQ_INT(s.root, 0);
    /* modules with parameters: wte, wpe, per block ln_1 c_attn c_proj ln_2 c_fc c_proj, ln_f */
    CHECK_EQ_INT(s.grads, 2 + 2 * 6 + 1);
    CHECK_STREQ(s.first_grad, "Module.wte.Embedding");
    CHECK_EQ_INT(s.c_fc_grad_weight, 1);
    CHECK_EQ_INT(s.c_fc_grad_bias, 1);
    /* parameter names are GPT-2's */
    int n = 0;
    np_tensor *const *p = np_model_params(np_trainer_model(tr), &n);
    CHECK_EQ_INT(n, 2 + 2 * 12 + 2);
    CHECK_STREQ(p[0]->name, "wte.weight");
    CHECK_STREQ(p[2]->name, "h.0.ln_1.weight");
    CHECK_STREQ(p[4]->name, "h.0.attn.c_attn.weight");
    CHECK_STREQ(p[n - 1]->name, "ln_f.bias");
    CHECK_EQ_INT(p[4]->shape[0], 192);
    CHECK_EQ_INT(p[4]->shape[1], 64);
    np_trainer_free(tr);
    np_ctx_free(ctx);
}

/* GPT-2 init statistics: std 0.02, residual projections 0.02/sqrt(2L). */
static void test_gpt_init(void)
{
    np_train_opts o;
    np_train_opts_default(&o, NP_MODEL_GPT);
    o.model.n_layer = 4;
    np_ctx *ctx = NULL;
    np_trainer *tr = NULL;
    CHECK_EQ_INT(np_ctx_new(&ctx, NULL, NULL), NP_OK);
    CHECK_EQ_INT(np_trainer_new(&tr, ctx, &o, NULL), NP_OK);
    if (!tr) {
        np_ctx_free(ctx);
        return;
    }
    int n = 0;
    np_tensor *const *p = np_model_params(np_trainer_model(tr), &n);
    for (int i = 0; i < n; i++) {
        double s = 0, s2 = 0;
        const float *w = np_tensor_f32(p[i]);
        for (int64_t k = 0; k < p[i]->numel; k++) {
            s += w[k];
            s2 += (double)w[k] * w[k];
        }
        double mean = s / p[i]->numel, sd = sqrt(s2 / p[i]->numel - mean * mean);
        const char *nm = p[i]->name;
        if (strstr(nm, "c_proj.weight"))
            CHECK_CLOSE(sd, 0.02 / sqrt(8.0), 0, 0.1);
        else if (strstr(nm, "ln_") && strstr(nm, ".weight"))
            CHECK(mean == 1.0 && sd == 0.0);
        else if (strstr(nm, ".weight"))
            CHECK_CLOSE(sd, 0.02, 0, 0.1);
        else
            CHECK(mean == 0.0 && sd == 0.0);
    }
    CHECK(np_model_init_draws(np_trainer_model(tr)) > 0);
    np_trainer_free(tr);
    np_ctx_free(ctx);
}

int main(void)
{
    char dir[] = "/tmp/np_model_XXXXXX";
    if (!mkdtemp(dir)) {
        fprintf(stderr, "cannot create a temp dir\n");
        return 1;
    }
    test_arith_data();
    test_text_data(dir);
    test_event_names();
    test_gpt_init();
    test_scaler_skips();
    test_determinism();
    test_checkpoint_resume(dir, NP_MODEL_GPT, NP_OPTIM_ADAMW, NP_FLOAT32);
    test_checkpoint_resume(dir, NP_MODEL_MLP, NP_OPTIM_SGD, NP_FLOAT32);
    test_checkpoint_resume(dir, NP_MODEL_GPT, NP_OPTIM_ADAMW, NP_FLOAT16);
    test_checkpoint_errors(dir);
    test_mlp_learns();
    test_cnn_learns();
    test_gpt_learns();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return check_report();
}
