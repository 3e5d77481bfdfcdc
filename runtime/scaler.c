/* runtime/scaler.c - dynamic loss scaler for fp16 training, PyTorch
 * GradScaler semantics: the loss is scaled before backward, gradients are
 * unscaled and checked for inf/NaN; an overflow skips the update and halves
 * the scale, growth_interval good steps in a row double it. */
#include <math.h>

#include "nprobe/model.h"

void np_scaler_init(np_scaler *s, int enabled)
{
    s->enabled = enabled;
    s->scale = enabled ? 65536.0 : 1.0;
    s->growth_factor = 2.0;
    s->backoff_factor = 0.5;
    s->growth_interval = 2000;
    s->good_steps = 0;
    s->skipped = 0;
}

int np_scaler_unscale(np_scaler *s, np_tensor *const *params, int n)
{
    if (!s->enabled)
        return 0;
    float inv = (float)(1.0 / s->scale);
    int found = 0;
    for (int i = 0; i < n; i++) {
        float *g = params[i]->grad;
        if (!g)
            continue;
        for (int64_t k = 0; k < params[i]->numel; k++) {
            float v = g[k] * inv;
            if (!isfinite(v))
                found = 1;
            g[k] = v;
        }
    }
    return found;
}

void np_scaler_update(np_scaler *s, int found_inf)
{
    if (!s->enabled)
        return;
    if (found_inf) {
        s->scale *= s->backoff_factor;
        s->good_steps = 0;
        s->skipped++;
        return;
    }
    if (++s->good_steps >= s->growth_interval) {
        s->scale *= s->growth_factor;
        s->good_steps = 0;
    }
}
