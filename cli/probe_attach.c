/* cli/probe_attach.c - the probe inside `nprobe train`: open it from the
 * config (validated before anything is written), register it on the
 * runtime's hook, and at the end close it and print its summary to stderr. */
#include <stdio.h>
#include <stdlib.h>

#include "cmd.h"
#include "nprobe/dist.h"
#include "nprobe/format.h"
#include "nprobe/hook.h"
#include "nprobe/monitor.h"
#include "nprobe/probe.h"
#include "nprobe/runtime.h"

/* A run's mesh as the probe records it: its dimensions in order, each a
 * name, a size and this rank's coordinate. */
typedef struct {
    int n;
    const char *dims[NP_FMT_MESH_MAX];
    int64_t shape[NP_FMT_MESH_MAX], coords[NP_FMT_MESH_MAX];
} cli_mesh;

struct np_cli_probe {
    np_probe *probe;           /* NULL: a layout only (np_cli_layout_new) */
    struct np_ctx *ctx;
    char dump_path[4096];
    int tp, dp, sp, mb, rank;  /* tensor (x data) parallel, micro-batches: the placements
                                * observer */
    int pp;                    /* pipeline stages, or 0 */
    int stage, inner;          /* a pipeline: this rank's stage and place in it (d * tp + t) */
    int64_t vocab;             /* vocabulary parallel: the vocabulary, or 0 */
    int place_warned;
    cli_mesh mesh;             /* the mesh, its dimensions' names static */
    np_mon_layout lay;         /* the monitor's view of this layout */
};

int np_cli_probe_attach(np_cli_probe **out, struct np_ctx *ctx, const char *config_path,
                        const np_cli_run_meta *meta)
{
    *out = NULL;
    np_cli_probe *cp = calloc(1, sizeof *cp);
    if (!cp) {
        np_cli_error("out of memory");
        return NP_EXIT_USAGE;
    }
    np_probe_meta pm = {"nprobe-runtime", "cpu", "fp32", 0, 1};
    if (meta) {
        if (meta->framework) pm.framework = meta->framework;
        if (meta->device) pm.device = meta->device;
        if (meta->precision) pm.precision = meta->precision;
        pm.rank = meta->rank;
        pm.world_size = meta->world_size;
    }
    np_error err;
    np_error_clear(&err);
    np_probe_config *cfg = NULL;
    if (np_probe_config_load(&cfg, config_path, &err) ||
        np_probe_open_config(&cp->probe, cfg, &pm, &err)) {
        np_cli_report(&err);
        np_probe_config_free(cfg);
        free(cp);
        return NP_EXIT_USAGE;
    }
    snprintf(cp->dump_path, sizeof cp->dump_path, "%s", np_probe_config_dump_path(cfg));
    np_probe_config_free(cfg);
    /* the probe is one observer of the runtime's list (order 0, after
     * events), so a monitor or a profiler can observe the same run */
    if (ctx && np_ctx_add_observer(ctx, &(np_observer){0, NULL, np_probe_on_event, cp->probe},
                                   &err) != NP_OK) {
        np_cli_report(&err);
        np_probe_free(cp->probe);
        free(cp);
        return NP_EXIT_USAGE;
    }
    cp->ctx = ctx;
    *out = cp;
    return NP_EXIT_OK;
}

/* The placements of an event's shards (micro-batch m) to probe, after it
 * recorded the event. */
static void place_on(np_cli_probe *cp, np_probe *probe, const np_hook_event *ev, int m)
{
    if (ev->kind == NP_EV_STEP_BEGIN || ev->kind == NP_EV_STEP_END)
        return;
    for (int i = 0; i < ev->n_tensors; i++) {
        np_place_rec rec;
        if (cp->pp > 1 ? !np_mesh_placement_pp(cp->pp, cp->stage, cp->tp, cp->dp, cp->sp, cp->mb,
                                               m, cp->inner, ev, i, &rec)
            : cp->vocab ? !np_mesh_placement_vp(cp->tp, cp->dp, cp->sp, cp->mb, m, cp->rank,
                                                cp->vocab, ev, i, &rec)
                        : !np_mesh_placement_mb(cp->tp, cp->dp, cp->sp, cp->mb, m, cp->rank, ev, i,
                                                &rec))
            continue;
        const np_hook_tensor *ht = &ev->tensors[i];
        char idx[16];
        snprintf(idx, sizeof idx, "%d", ht->index);
        np_error err;
        np_error_clear(&err);
        if (np_probe_place(probe, ev->name, ht->role, ht->key ? ht->key : idx, &rec, &err) &&
            !cp->place_warned++)
            fprintf(stderr, "nprobe: warning: dump: %s (further placement errors not shown)\n",
                    err.text);
    }
}

/* After the probe has recorded an event: the placements of its shards. */
static int place_event(const np_hook_event *ev, void *user)
{
    np_cli_probe *cp = user;
    place_on(cp, cp->probe, ev, np_ctx_micro_batch(cp->ctx));
    return 0;
}

static void mesh_dim(cli_mesh *m, const char *name, int64_t size, int64_t coord)
{
    m->dims[m->n] = name;
    m->shape[m->n] = size;
    m->coords[m->n++] = coord;
}

/* The mesh given to the probe (micro-batches, when more than one, as the
 * last dimension) and the observer that places each dumped tensor. */
static int attach_mesh(np_cli_probe *cp, cli_mesh *m, int mb)
{
    np_error err;
    np_error_clear(&err);
    if (mb > 1)
        mesh_dim(m, NP_FMT_MESH_MB, mb, 0);
    cp->mesh = *m;
    if (!cp->probe)
        return NP_EXIT_OK;
    if (np_probe_set_mesh(cp->probe, m->n, m->dims, m->shape, m->coords, &err) != NP_OK ||
        np_ctx_add_observer(cp->ctx, &(np_observer){1, NULL, place_event, cp}, &err) != NP_OK) {
        np_cli_report(&err);
        return NP_EXIT_USAGE;
    }
    return NP_EXIT_OK;
}

int np_cli_probe_layout(np_cli_probe *cp, int tp, int sp, int mb, int rank, int world)
{
    /* the mesh: dp and tp under --tp (dp only when more than one group),
     * then mb with micro-batches */
    int dp = tp > 1 ? world / tp : 1;
    cli_mesh m = {0};
    if (dp > 1)
        mesh_dim(&m, "dp", dp, rank / tp);
    if (tp > 1)
        mesh_dim(&m, "tp", tp, rank % tp);
    cp->tp = tp;
    cp->dp = dp;
    cp->sp = sp;
    cp->mb = mb;
    cp->rank = rank;
    return attach_mesh(cp, &m, mb);
}

int np_cli_probe_layout_pp(np_cli_probe *cp, int pp, int tp, int sp, int mb, int rank, int world)
{
    tp = tp > 1 ? tp : 1;
    int stride = world / pp, dp = stride / tp;
    cli_mesh m = {0};
    mesh_dim(&m, "pp", pp, rank / stride);
    if (tp > 1 && dp > 1)
        mesh_dim(&m, "dp", dp, (rank / tp) % dp);
    if (tp > 1)
        mesh_dim(&m, "tp", tp, rank % tp);
    cp->pp = pp;
    cp->tp = tp;
    cp->dp = dp;
    cp->sp = sp;
    cp->mb = mb;
    cp->rank = rank;
    cp->stage = rank / stride;
    cp->inner = rank % stride;
    return attach_mesh(cp, &m, mb);
}

void np_cli_probe_vocab(np_cli_probe *cp, int64_t vocab)
{
    cp->vocab = vocab;
}

/* ---- the layout of the monitor's dump of kept calls ------------------------ */

static np_status lay_set_mesh(np_probe *p, void *user, np_error *err)
{
    np_cli_probe *cp = user;
    const cli_mesh *m = &cp->mesh;
    return m->n ? np_probe_set_mesh(p, m->n, m->dims, m->shape, m->coords, err) : NP_OK;
}

static void lay_place(np_probe *p, const np_hook_event *ev, int micro, void *user)
{
    np_cli_probe *cp = user;
    if (cp->mesh.n)
        place_on(cp, p, ev, micro);
}

np_cli_probe *np_cli_layout_new(void)
{
    np_cli_probe *cp = calloc(1, sizeof *cp);
    if (cp)
        cp->lay = (np_mon_layout){lay_set_mesh, lay_place, cp};
    return cp;
}

const np_mon_layout *np_cli_layout_mon(const np_cli_probe *cp)
{
    return cp ? &cp->lay : NULL;
}

void np_cli_layout_free(np_cli_probe *cp)
{
    free(cp);
}

int np_cli_probe_detach(np_cli_probe *cp)
{
    if (!cp)
        return NP_EXIT_OK;
    if (cp->ctx) {
        np_ctx_remove_observers(cp->ctx, cp->probe);
        np_ctx_remove_observers(cp->ctx, cp);
    }
    np_probe_summary s;
    np_error err;
    np_error_clear(&err);
    np_status st = np_probe_close(cp->probe, &s, &err);
    fprintf(stderr,
            "nprobe: dump: %lld step file(s), %lld call(s), %lld tensor(s), %lld payload "
            "bytes, %lld file bytes in %s\n",
            (long long)s.steps, (long long)s.calls, (long long)s.tensors,
            (long long)s.data_bytes, (long long)s.bytes, cp->dump_path);
    if (s.has_overflow)
        fprintf(stderr, "nprobe: dump: first overflow: %s (step %d, rank %d%s%s), %lld call(s) "
                        "with NaN/Inf\n",
                s.overflow_call, s.overflow_step, s.overflow_rank,
                s.overflow_module[0] ? ", module " : "", s.overflow_module,
                (long long)s.overflows);
    /* under `nprobe dump` the parent reads the step files and warns */
    if (!getenv("NPROBE_DUMP_PARENT")) {
        if (s.scope_unreached)
            fprintf(stderr,
                    "nprobe: dump: warning: scope: the first call \"%s\" never arrived in %lld of "
                    "%lld step file(s) (the first: step %d), so nothing was dumped there (is the "
                    "name, the step or the level right? `nprobe ls --calls` on a dump without "
                    "scope lists the call names)\n",
                    s.scope_first, (long long)s.scope_unreached, (long long)s.scope_steps,
                    s.scope_unreached_step);
        if (s.scope_open)
            fprintf(stderr,
                    "nprobe: dump: warning: scope: the last call \"%s\" never arrived after "
                    "\"%s\" in %lld of %lld step file(s) (the first: step %d), so everything to "
                    "the end of the step was dumped\n",
                    s.scope_last, s.scope_first, (long long)s.scope_open, (long long)s.scope_steps,
                    s.scope_open_step);
    }
    if (st)
        np_cli_report(&err);
    np_probe_free(cp->probe);
    free(cp);
    return st ? NP_EXIT_USAGE : NP_EXIT_OK;
}
