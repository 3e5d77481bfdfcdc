/* cli/profile_attach.c - the profile task inside `nprobe train`: the
 * recorder of profile/record.c as an observer of the runtime's hook
 * (--profile DIR, or a config.json with "task": "profile"), and the slow
 * faults (--fault slow_*) whose regressions a profile compare finds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "nprobe/fault_slow.h"
#include "nprobe/profile.h"
#include "nprobe/runtime.h"

/* Before the probe (order 0): its after callback reads the clock before a
 * dump writes the call, so the dump's time is not the op's. */
#define PROFILE_ORDER (-50)

struct np_cli_profiler {
    np_prof_rec *rec;
    struct np_ctx *ctx;
    char path[4096];
};

int np_cli_profile_wanted(const char *config_path)
{
    return config_path && np_prof_config_is_profile(config_path);
}

static size_t arena_bytes(void *ctx) { return np_ctx_arena_bytes(ctx); }

int np_cli_profile_attach(np_cli_profiler **out, struct np_ctx *ctx, const char *dir,
                          const char *config_path, int rank, int world)
{
    *out = NULL;
    np_error err;
    np_error_clear(&err);
    char cfg_dir[4096] = "";
    np_prof_rec_opts o;
    memset(&o, 0, sizeof o);
    if (config_path && np_prof_config_load(&o.schedule, cfg_dir, sizeof cfg_dir, config_path, &err)) {
        np_cli_report(&err);
        return NP_EXIT_USAGE;
    }
    o.dir = dir && *dir ? dir : cfg_dir;
    o.rank = rank;
    o.world = world;
    o.mem = arena_bytes;
    o.mem_user = ctx;
    np_cli_profiler *p = calloc(1, sizeof *p);
    if (!p) {
        np_cli_error("out of memory");
        return NP_EXIT_USAGE;
    }
    if (np_prof_rec_open(&p->rec, &o, &err)) {
        np_cli_report(&err);
        free(p);
        return NP_EXIT_USAGE;
    }
    snprintf(p->path, sizeof p->path, "%s", np_prof_rec_path(p->rec));
    if (np_ctx_add_observer(ctx, &(np_observer){PROFILE_ORDER, np_prof_rec_before, np_prof_rec_after, p->rec},
                            &err)) {
        np_cli_report(&err);
        np_prof_rec_close(p->rec, NULL, NULL);
        free(p);
        return NP_EXIT_USAGE;
    }
    p->ctx = ctx;
    *out = p;
    return NP_EXIT_OK;
}

int np_cli_profile_detach(np_cli_profiler *p)
{
    if (!p)
        return NP_EXIT_OK;
    np_ctx_remove_observers(p->ctx, p->rec);
    np_error err;
    np_error_clear(&err);
    np_prof_rec_summary s;
    np_status st = np_prof_rec_close(p->rec, &s, &err);
    if (st)
        np_cli_report(&err);
    else
        fprintf(stderr, "nprobe: profile: %lld step(s), %lld call(s), %.4g FLOPs estimated, in %s\n",
                s.steps, s.events, s.flops, p->path);
    free(p);
    return st ? NP_EXIT_USAGE : NP_EXIT_OK;
}

int np_cli_slow_fault_apply(struct np_ctx *ctx, const char *fault, int fault_rank, int rank)
{
    int k = np_slow_fault_from_name(fault);
    if (k <= 0 || (fault_rank >= 0 && fault_rank != rank))
        return NP_EXIT_OK;
    np_error err;
    np_error_clear(&err);
    if (np_slow_fault_apply(ctx, (np_slow_fault_kind)k, &err)) {
        np_cli_report(&err);
        return NP_EXIT_USAGE;
    }
    return NP_EXIT_OK;
}

void np_cli_list_slow_faults(void)
{
    printf("\nslow faults: one op made slower, same results (--fault NAME [--fault-rank R];\n"
           "any device; docs/PROFILE.md):\n");
    for (int i = 1; np_slow_fault_get(i); i++) {
        const np_slow_fault_info *f = np_slow_fault_get(i);
        printf("  %-24s %s\n  %-24s %s\n", f->name, f->op, "", f->description);
    }
}

int np_cli_profile_setup(np_cli_profiler **prof, const char **prof_cfg, struct np_ctx *ctx,
                         const char *dir, const char *dump_cfg, const char *fault, int fault_rank,
                         int rank, int world)
{
    *prof = NULL;
    *prof_cfg = dump_cfg && *dump_cfg && np_cli_profile_wanted(dump_cfg) ? dump_cfg : NULL;
    if ((dir || *prof_cfg) && np_cli_profile_attach(prof, ctx, dir, *prof_cfg, rank, world) != NP_EXIT_OK)
        return NP_EXIT_USAGE;
    return np_cli_slow_fault_apply(ctx, fault, fault_rank, rank);
}

int np_cli_profile_end(np_cli_profiler *p, int code)
{
    int pc = np_cli_profile_detach(p);
    return pc != NP_EXIT_OK && code == NP_EXIT_OK ? pc : code;
}
