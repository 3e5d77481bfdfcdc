/* tests/probe/test_probe_place.c - the placements writer (format version 2):
 * np_probe_set_mesh and np_probe_place write the mesh attributes and
 * /placements, read back through np_dumpio exactly as given (sync and async
 * writers); bad rows are refused naming the leaf and the field; a step
 * without a mesh stays format version 1 and still reads; a leaf not
 * selected takes no row. */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "nprobe/dumpio.h"
#include "nprobe/probe.h"
#include "probe_rows.h"

static char g_tmp[256];

/* the name is the caller's to set but ignored: the probe names the leaf */
static np_place_rec row(const char *pl, int64_t g0, int64_t g1, int64_t o0, int64_t o1)
{
    np_place_rec r = np_test_place(pl, g0, g1, o0, o1);
    snprintf(r.name, sizeof r.name, "ignored: the probe names the leaf");
    return r;
}

#define CALL "Module.mlp.fc1.ColumnParallelLinear.forward.0"

/* A refused placement: NP_ERR_ARG whose text holds `a` and `b`. */
static void refused(np_probe *p, const char *key, np_role role, const np_place_rec *r,
                    const char *a, const char *b)
{
    np_error err;
    np_error_clear(&err);
    CHECK_EQ_INT(np_probe_place(p, CALL, role, key, r, &err), NP_ERR_ARG);
    CHECK_CONTAINS(err.text, a);
    CHECK_CONTAINS(err.text, b);
}

static void write_run(const char *dir, int async)
{
    char cfg[600];
    snprintf(cfg, sizeof cfg,
             "{\"task\": \"tensor\", \"dump_path\": \"%s\", \"level\": \"mix\", "
             "\"async_dump\": %s, \"tensor\": {\"list\": [\"fc1\"]}}",
             dir, async ? "true" : "false");
    np_probe_meta meta = {NULL, NULL, NULL, 3, 4};
    np_probe *p = NULL;
    np_error err;
    np_error_clear(&err);
    CHECK_EQ_INT(np_probe_open_json(&p, cfg, &meta, &err), NP_OK);
    if (!p)
        fprintf(stderr, "%s\n", err.text);
    if (!p)
        return;
    const char *dims[2] = {"dp", "tp"};
    int64_t shape[2] = {2, 2}, coords[2] = {1, 1}, bad_shape[2] = {2, 3};
    /* the mesh must hold the world: 2x3 is 6 ranks, not 4 */
    CHECK_EQ_INT(np_probe_set_mesh(p, 2, dims, bad_shape, coords, &err), NP_ERR_ARG);
    CHECK_CONTAINS(err.text, "world size is 4");
    const char *dup[2] = {"tp", "tp"};
    np_error_clear(&err);
    CHECK_EQ_INT(np_probe_set_mesh(p, 2, dup, shape, coords, &err), NP_ERR_ARG);
    CHECK_CONTAINS(err.text, "'tp' given twice");
    CHECK_EQ_INT(np_probe_set_mesh(p, 2, dims, shape, coords, &err), NP_OK);

    float w[4 * 3], b[1 * 3], y[2 * 6];
    for (int i = 0; i < 12; i++)
        w[i] = (float)i, y[i] = 0.5f * (float)i;
    for (int i = 0; i < 3; i++)
        b[i] = 1.0f;
    np_tensor tw = np_test_mat(w, 4, 3), tb = np_test_mat(b, 1, 3), ty = np_test_mat(y, 2, 6),
              tz = np_test_mat(y, 2, 6);

    CHECK_EQ_INT(np_probe_step_begin(p, 0, &err), NP_OK);
    /* placing before dumping: no such leaf yet */
    np_place_rec rw = row("Replicate(),Shard(0)", 8, 3, 4, 0);
    refused(p, "weight", NP_ROLE_PARAMETERS, &rw, CALL ".parameters.weight", "was dumped");
    CHECK_EQ_INT(np_probe_dump(p, CALL, NP_ROLE_PARAMETERS, "weight", &tw, &err), NP_OK);
    CHECK_EQ_INT(np_probe_dump(p, CALL, NP_ROLE_PARAMETERS, "bias", &tb, &err), NP_OK);
    CHECK_EQ_INT(np_probe_dump(p, CALL, NP_ROLE_OUTPUT, "0", &ty, &err), NP_OK);
    /* not selected by "list": accepted, nothing written */
    CHECK_EQ_INT(np_probe_dump(p, "Module.mlp.fc2.RowParallelLinear.forward.0", NP_ROLE_OUTPUT,
                               "0", &tz, &err), NP_OK);
    np_place_rec rz = row("Replicate(),Partial(sum)", 2, 6, 0, 0);
    CHECK_EQ_INT(np_probe_place(p, "Module.mlp.fc2.RowParallelLinear.forward.0", NP_ROLE_OUTPUT,
                                "0", &rz, &err), NP_OK);

    /* bad rows, each named by its leaf and field */
    np_place_rec r = row("Replicate(),Shard(2)", 8, 3, 4, 0);
    refused(p, "weight", NP_ROLE_PARAMETERS, &r, CALL ".parameters.weight", "item 1 'Shard(2)'");
    r = row("Replicate(),Shard(0)", 8, 3, 6, 0);
    refused(p, "weight", NP_ROLE_PARAMETERS, &r, CALL ".parameters.weight", "offset[0] 6");
    r = row("Shard(0)", 8, 3, 4, 0);
    refused(p, "weight", NP_ROLE_PARAMETERS, &r, "placements 'Shard(0)' has 1 item", "2 dim");
    r = row("Replicate(),Shard(0)", 8, 3, 4, 0);
    r.global_ndim = 3;
    refused(p, "weight", NP_ROLE_PARAMETERS, &r, "global_ndim is 3", "ndim 2");
    r = row("Replicate(),Sharded(0)", 8, 3, 4, 0);
    refused(p, "weight", NP_ROLE_PARAMETERS, &r, "'Sharded(0)'", "mesh dimension tp");
    r = row("Replicate(),Replicate()", 2, 6, 0, 0);
    r.micro_batch = -2;
    refused(p, "0", NP_ROLE_OUTPUT, &r, "micro_batch is -2", CALL ".output.0");
    r = row("Replicate(),Replicate()", 4, 6, 0, 0);
    refused(p, "0", NP_ROLE_OUTPUT, &r, "dimension 0 is not sharded", "global_shape[0] 4");

    /* the good rows */
    CHECK_EQ_INT(np_probe_place(p, CALL, NP_ROLE_PARAMETERS, "weight", &rw, &err), NP_OK);
    refused(p, "weight", NP_ROLE_PARAMETERS, &rw, "given twice", "weight");
    np_place_rec rb = row("Replicate(),Replicate()", 1, 3, 0, 0);
    rb.stage = 1;
    CHECK_EQ_INT(np_probe_place(p, CALL, NP_ROLE_PARAMETERS, "bias", &rb, &err), NP_OK);
    np_place_rec ry = row("Shard(0),Partial(sum)", 4, 6, 2, 0);
    ry.micro_batch = 3;
    CHECK_EQ_INT(np_probe_place(p, CALL, NP_ROLE_OUTPUT, "0", &ry, &err), NP_OK);
    CHECK_EQ_INT(np_probe_step_end(p, &err), NP_OK);

    /* step 1 without a mesh: a version 1 file; a placement is refused */
    CHECK_EQ_INT(np_probe_set_mesh(p, 0, NULL, NULL, NULL, &err), NP_OK);
    CHECK_EQ_INT(np_probe_step_begin(p, 1, &err), NP_OK);
    CHECK_EQ_INT(np_probe_dump(p, CALL, NP_ROLE_PARAMETERS, "weight", &tw, &err), NP_OK);
    refused(p, "weight", NP_ROLE_PARAMETERS, &rw, "step 1 has no mesh", "np_probe_set_mesh");
    CHECK_EQ_INT(np_probe_step_end(p, &err), NP_OK);
    np_probe_summary sum;
    CHECK_EQ_INT(np_probe_close(p, &sum, &err), NP_OK);
    CHECK_EQ_INT(sum.files, 2);
    np_probe_free(p);
}

static void check_same(const np_place_rec *got, const np_place_rec *want, const char *name)
{
    CHECK_STREQ(got->name, name);
    CHECK_STREQ(got->placements, want->placements);
    CHECK_EQ_INT(got->global_ndim, want->global_ndim);
    for (int d = 0; d < 2; d++) {
        CHECK_EQ_INT(got->global_shape[d], want->global_shape[d]);
        CHECK_EQ_INT(got->offset[d], want->offset[d]);
    }
    CHECK_EQ_INT(got->stage, want->stage);
    CHECK_EQ_INT(got->micro_batch, want->micro_batch);
}

static const np_entry_rec *entry_of(const np_entry_rec *e, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(e[i].name, name))
            return &e[i];
    return NULL;
}

static void read_run(const char *dir)
{
    char f[600];
    snprintf(f, sizeof f, "%s/step0/rank3/dump.h5", dir);
    np_dumpio *d = NULL;
    np_error err;
    np_error_clear(&err);
    CHECK_EQ_INT(np_dumpio_open(&d, f, NULL, 0, &err), NP_OK);
    if (!d)
        return;
    const np_dumpio_info *in = np_dumpio_get_info(d);
    CHECK_EQ_INT(in->format_version, 2);
    CHECK_EQ_INT(in->mesh_ndim, 2);
    CHECK_STREQ(in->mesh_dims[0], "dp");
    CHECK_STREQ(in->mesh_dims[1], "tp");
    CHECK_EQ_INT(in->mesh_shape[0] * 10 + in->mesh_shape[1], 22);
    CHECK_EQ_INT(in->mesh_coords[0] * 10 + in->mesh_coords[1], 11);
    CHECK_STREQ(in->problems, "");
    np_place_rec *pl = NULL;
    np_entry_rec *en = NULL;
    size_t n = 0, ne = 0;
    CHECK_EQ_INT(np_dumpio_read_placements(&pl, &n, d, &err), NP_OK);
    CHECK_EQ_INT(np_dumpio_read_entries(&en, &ne, d, &err), NP_OK);
    CHECK_EQ_INT(n, 3); /* fc2's leaf was not selected: no row */
    CHECK_EQ_INT(ne, 3);
    if (n == 3) {
        np_place_rec w = row("Replicate(),Shard(0)", 8, 3, 4, 0);
        np_place_rec b = row("Replicate(),Replicate()", 1, 3, 0, 0);
        b.stage = 1;
        np_place_rec y = row("Shard(0),Partial(sum)", 4, 6, 2, 0);
        y.micro_batch = 3;
        check_same(&pl[0], &w, CALL ".parameters.weight");
        check_same(&pl[1], &b, CALL ".parameters.bias");
        check_same(&pl[2], &y, CALL ".output.0");
        char buf[600];
        for (size_t i = 0; i < n; i++)
            CHECK_MSG(!np_dumpio_place_problem(in, &pl[i], entry_of(en, ne, pl[i].name), buf,
                                               sizeof buf),
                      "%s", buf);
        /* the readers' check: a shard moved outside its tensor, or naming no leaf */
        pl[0].offset[0] = 5;
        const char *why = np_dumpio_place_problem(in, &pl[0], entry_of(en, ne, pl[0].name), buf,
                                                  sizeof buf);
        CHECK(why != NULL);
        if (why) {
            CHECK_CONTAINS(why, "offset[0] 5");
            CHECK_CONTAINS(why, CALL ".parameters.weight");
        }
        why = np_dumpio_place_problem(in, &pl[1], NULL, buf, sizeof buf);
        CHECK(why && strstr(why, "no leaf of /entries"));
    }
    free(pl);
    free(en);
    np_dumpio_close(d);

    /* step 1: format version 1, no mesh, no placements, reads as before */
    snprintf(f, sizeof f, "%s/step1/rank3/dump.h5", dir);
    CHECK_EQ_INT(np_dumpio_open(&d, f, NULL, 0, &err), NP_OK);
    if (!d)
        return;
    in = np_dumpio_get_info(d);
    CHECK_EQ_INT(in->format_version, 1);
    CHECK_EQ_INT(in->mesh_ndim, 0);
    CHECK_EQ_INT(np_dumpio_read_placements(&pl, &n, d, &err), NP_OK);
    CHECK_EQ_INT(n, 0);
    CHECK_EQ_INT(np_dumpio_read_entries(&en, &ne, d, &err), NP_OK);
    CHECK_EQ_INT(ne, 1);
    free(pl);
    free(en);
    np_dumpio_close(d);
}

int main(void)
{
    snprintf(g_tmp, sizeof g_tmp, "/tmp/np_probe_place_XXXXXX");
    if (!mkdtemp(g_tmp))
        return 1;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    char dir[400];
    for (int async = 0; async < 2; async++) {
        snprintf(dir, sizeof dir, "%s/%s", g_tmp, async ? "async" : "sync");
        write_run(dir, async);
        read_run(dir);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (getenv("NP_TEST_KEEP")) /* to look at the files: nprobe show */
        fprintf(stderr, "kept %s\n", g_tmp);
    else if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", g_tmp);
    return check_report();
}
