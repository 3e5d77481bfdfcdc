/* tests/runtime/test_rt_autograd.c - autograd and events: a composite graph's
 * gradients against central finite differences; the exact event names, order
 * and parents for a two-layer model inside a root module; counters restart
 * per step; a module backward event carries exactly the module's own
 * contribution when its input is also used outside it; the hook's non-zero
 * return is surfaced; the arena is reused across steps. */
#include <math.h>

#include "check.h"
#include "nprobe/runtime.h"

typedef struct names {
    char name[64][96];
    char parent[64][96];
    int kind[64];
    int seq[64];
    int n;
    int ret;
    float modgrad[16], lingrad[16];
} names;

static int name_hook(const np_hook_event *e, void *user)
{
    names *s = user;
    if (s->n < 64) {
        snprintf(s->name[s->n], 96, "%s", e->name ? e->name : (e->kind == NP_EV_STEP_BEGIN ? "STEP_BEGIN" : "STEP_END"));
        snprintf(s->parent[s->n], 96, "%s", e->parent ? e->parent : "");
        s->kind[s->n] = e->kind;
        s->seq[s->n] = e->seq;
        s->n++;
    }
    for (int i = 0; i < e->n_tensors; i++) {
        const np_hook_tensor *t = &e->tensors[i];
        if (t->role != NP_ROLE_OUTPUT || t->index != 0 || !t->t || t->t->numel > 16 || !e->name)
            continue;
        if (strcmp(e->name, "Module.fc2.Linear.backward.0") == 0)
            memcpy(s->modgrad, t->t->data, sizeof(float) * (size_t)t->t->numel);
        if (strcmp(e->name, "Functional.linear.1.backward") == 0)
            memcpy(s->lingrad, t->t->data, sizeof(float) * (size_t)t->t->numel);
    }
    return s->ret;
}

static const char *const expected[] = {
    "STEP_BEGIN",
    "Functional.linear.0.forward", "Module.fc1.Linear.forward.0",
    "Functional.relu.0.forward",
    "Functional.linear.1.forward", "Module.fc2.Linear.forward.0",
    "Tensor.add.0.forward",
    "Module.MLP.forward.0",
    "Functional.cross_entropy.0.forward",
    "Functional.cross_entropy.0.backward",
    "Tensor.add.0.backward",
    "Functional.linear.1.backward", "Module.fc2.Linear.backward.0",
    "Functional.relu.0.backward",
    "Functional.linear.0.backward", "Module.fc1.Linear.backward.0",
    "Module.MLP.backward.0",
    "Module.fc1.Linear", "Module.fc2.Linear",
    "STEP_END",
};
static const char *const parents[] = {
    "", "Module.fc1.Linear.forward.0", "Module.MLP.forward.0", "Module.MLP.forward.0",
    "Module.fc2.Linear.forward.0", "Module.MLP.forward.0", "Module.MLP.forward.0", "", "",
    "", "Module.MLP.backward.0", "Module.fc2.Linear.backward.0", "Module.MLP.backward.0",
    "Module.MLP.backward.0", "Module.fc1.Linear.backward.0", "Module.MLP.backward.0", "",
    "", "", "",
};

/* MLP: x (4,3) -> fc1 (4) -> relu -> fc2 (4) -> + relu output (residual
 * outside fc2) -> cross_entropy. fc2's input is also used by the add. */
static np_tensor *mlp_step(np_ctx *ctx, np_module *root, np_module *fc1, np_module *fc2,
                           np_tensor *x, np_tensor *y, np_tensor **w)
{
    np_module_begin(ctx, root);
    np_module_begin(ctx, fc1);
    np_tensor *h = np_linear(ctx, x, w[0], w[1]);
    np_module_end(ctx, fc1, &x, 1, &h, 1);
    np_tensor *a = np_relu(ctx, h);
    np_module_begin(ctx, fc2);
    np_tensor *o = np_linear(ctx, a, w[2], w[3]);
    np_module_end(ctx, fc2, &a, 1, &o, 1);
    np_tensor *r = np_add(ctx, o, a);
    np_module_end(ctx, root, &x, 1, &r, 1);
    return np_cross_entropy(ctx, r, y, -100);
}

static void test_events(void)
{
    np_ctx *ctx = NULL;
    CHECK(np_ctx_new(&ctx, NULL, NULL) == NP_OK);
    names s = {0};
    np_ctx_set_hook(ctx, name_hook, &s);
    np_module *root = np_module_new(ctx, "", "MLP");
    np_module *fc1 = np_module_new(ctx, "fc1", "Linear");
    np_module *fc2 = np_module_new(ctx, "fc2", "Linear");
    np_tensor *w[4];
    w[0] = np_tensor_new_param(ctx, NP_FLOAT32, 2, (const int64_t[]){4, 3}, "fc1.weight");
    w[1] = np_tensor_new_param(ctx, NP_FLOAT32, 1, (const int64_t[]){4}, "fc1.bias");
    w[2] = np_tensor_new_param(ctx, NP_FLOAT32, 2, (const int64_t[]){4, 4}, "fc2.weight");
    w[3] = np_tensor_new_param(ctx, NP_FLOAT32, 1, (const int64_t[]){4}, "fc2.bias");
    for (int i = 0; i < 4; i++)
        np_tensor_fill_normal(w[i], 1, (uint64_t)i, 0.0, 0.5);
    np_module_add_param(fc1, "weight", w[0]);
    np_module_add_param(fc1, "bias", w[1]);
    np_module_add_param(fc2, "weight", w[2]);
    np_module_add_param(fc2, "bias", w[3]);
    CHECK_STREQ(np_module_name(fc1), "Module.fc1.Linear");
    np_tensor *x = np_tensor_new(ctx, NP_FLOAT32, 2, (const int64_t[]){4, 3});
    np_tensor_fill_normal(x, 2, 0, 0.0, 1.0);
    np_tensor *y = np_tensor_new(ctx, NP_INT64, 1, (const int64_t[]){4});
    for (int i = 0; i < 4; i++)
        np_tensor_i64(y)[i] = i % 4;
    size_t arena = 0;
    for (int step = 0; step < 3; step++) {
        s.n = 0;
        np_ctx_step_begin(ctx);
        np_tensor *loss = mlp_step(ctx, root, fc1, fc2, x, y, w);
        CHECK(np_backward(ctx, loss) == NP_OK);
        np_ctx_emit_param_grads(ctx);
        np_ctx_step_end(ctx);
        int ne = (int)(sizeof expected / sizeof expected[0]);
        CHECK_EQ_INT(s.n, ne);
        for (int i = 0; i < ne && i < s.n; i++) {
            CHECK_STREQ(s.name[i], expected[i]);
            CHECK_STREQ(s.parent[i], parents[i]);
            if (i > 1 && i < ne - 1)
                CHECK_EQ_INT(s.seq[i], s.seq[i - 1] + (i > 1 ? 1 : 0));
        }
        /* module fc2's backward output.0 = grad at its input from fc2 alone,
         * which equals linear.1's input grad bit for bit (the add's share is not in it) */
        CHECK(memcmp(s.modgrad, s.lingrad, sizeof(float) * 16) == 0);
        CHECK(s.modgrad[0] != 0.0f || s.modgrad[1] != 0.0f);
        CHECK_EQ_INT(np_ctx_step(ctx), step + 1);
        if (step == 1)
            arena = np_ctx_arena_bytes(ctx);
        if (step == 2)
            CHECK_EQ_INT((long long)np_ctx_arena_bytes(ctx), (long long)arena);
    }
    CHECK(!np_ctx_stop_requested(ctx));
    s.ret = 1;
    np_ctx_step_begin(ctx);
    CHECK(np_ctx_stop_requested(ctx));
    np_ctx_step_end(ctx);
    /* grad disabled: forward events, nothing recorded, loss needs no grad */
    s.ret = 0;
    s.n = 0;
    np_ctx_set_grad_enabled(ctx, 0);
    np_ctx_step_begin(ctx);
    np_tensor *loss = np_linear(ctx, x, w[0], w[1]);
    CHECK(loss && !loss->requires_grad);
    CHECK(np_backward(ctx, loss) == NP_ERR_ARG);
    np_ctx_step_end(ctx);
    CHECK_STREQ(s.name[1], "Functional.linear.0.forward");
    np_ctx_free(ctx);
}

/* composite graph: loss(params) in float32 vs central differences. */
static float composite(np_ctx *ctx, np_tensor **p, np_tensor *tgt, int backward)
{
    np_ctx_step_begin(ctx);
    np_tensor *h = np_layer_norm(ctx, p[0], p[1], NULL, 1e-5);           /* (2,4,6) */
    np_tensor *a = np_linear(ctx, h, p[2], p[3]);                        /* (2,4,12) */
    np_tensor *q[3];
    np_split(ctx, a, 4, -1, q, 3);
    for (int i = 0; i < 3; i++)
        q[i] = np_transpose(ctx, np_view(ctx, q[i], 4, (const int64_t[]){2, 4, 2, 2}), 1, 2);
    np_tensor *o = np_sdpa(ctx, q[0], q[1], q[2], 1, 0.0);
    o = np_view(ctx, np_transpose(ctx, o, 1, 2), 3, (const int64_t[]){2, 4, 4});
    np_tensor *g = np_gelu(ctx, np_linear(ctx, o, p[4], NULL), 0);      /* (2,4,6) */
    np_tensor *r = np_add(ctx, np_mul(ctx, g, p[1]), p[0]);
    np_tensor *l = np_cross_entropy(ctx, np_view(ctx, r, 2, (const int64_t[]){8, 6}), tgt, -100);
    float v = l ? np_tensor_f32(l)[0] : NAN;
    if (backward)
        np_backward(ctx, l);
    np_ctx_step_end(ctx);
    return v;
}

static void test_composite(void)
{
    np_ctx *ctx = NULL;
    CHECK(np_ctx_new(&ctx, NULL, NULL) == NP_OK);
    const int64_t sh[5][3] = {{2, 4, 6}, {6}, {12, 6}, {12}, {6, 4}};
    const int nd[5] = {3, 1, 2, 1, 2};
    np_tensor *p[5];
    for (int i = 0; i < 5; i++) {
        p[i] = np_tensor_new_param(ctx, NP_FLOAT32, nd[i], sh[i], "p");
        np_tensor_fill_normal(p[i], 9, (uint64_t)i, i == 1 ? 1.0 : 0.0, 0.5);
    }
    np_tensor *tgt = np_tensor_new(ctx, NP_INT64, 1, (const int64_t[]){8});
    for (int i = 0; i < 8; i++)
        np_tensor_i64(tgt)[i] = (i * 5) % 6;
    composite(ctx, p, tgt, 1);
    CHECK_EQ_INT(np_ctx_status(ctx), NP_OK);
    int bad = 0, total = 0;
    for (int i = 0; i < 5; i++) {
        for (int64_t k = 0; k < p[i]->numel; k++) {
            float *d = np_tensor_f32(p[i]);
            float x0 = d[k], h = 1e-2f;
            d[k] = x0 + h;
            double lp = composite(ctx, p, tgt, 0);
            d[k] = x0 - h;
            double lm = composite(ctx, p, tgt, 0);
            d[k] = x0;
            double fd = (lp - lm) / (2.0 * h), got = p[i]->grad[k];
            total++;
            if (!(fabs(got - fd) <= 2e-3 + 2e-2 * fabs(fd))) {
                if (bad++ < 5)
                    fprintf(stderr, "param %d [%lld]: grad %.6g, finite difference %.6g\n", i, (long long)k, got, fd);
            }
        }
    }
    CHECK_MSG(bad == 0, "%d of %d gradients off", bad, total);
    np_ctx_free(ctx);
}

int main(void)
{
    test_events();
    test_composite();
    return check_report();
}
