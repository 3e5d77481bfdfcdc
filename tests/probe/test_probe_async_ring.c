/* tests/probe/test_probe_async_ring.c - the async queue's ring wraps
 * correctly for every message size up to the ring's capacity: a sequence of
 * payloads whose sizes make a message longer than the ring minus its tail
 * (the case that once left the producer waiting forever on an empty ring)
 * is written through a 1 MiB queue, and every payload reads back
 * bit-identical with the HDF5 C API. An alarm turns a hang into a failure. */
#include <hdf5.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "nprobe/probe.h"

/* float counts: 720 kB then 1 MB (longer than the 1 MiB ring minus the
 * ~330 kB tail the first leaves), then sizes around the direct-write
 * threshold and the ring size, in both orders */
static const int64_t sizes[] = {180000, 250000, 65536, 262000, 1000, 200000, 250000, 7, 262100};
#define NT ((int)(sizeof sizes / sizeof sizes[0]))

static float value(int t, int64_t i) { return (float)(t * 1000003 + i) * 0.25f; }

int main(void)
{
    alarm(60);
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char dir[512], json[1024], path[1024];
    snprintf(dir, sizeof dir, "%s/np_async_ring_XXXXXX", base);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(json, sizeof json,
             "{\"task\": \"tensor\", \"dump_path\": \"%s\", \"async_dump\": true, \"queue_mb\": 1}", dir);
    np_probe *p = NULL;
    np_error err;
    np_error_clear(&err);
    CHECK_EQ_INT(np_probe_open_json(&p, json, NULL, &err), NP_OK);
    if (!p)
        return check_report();
    float *bufs[NT];
    CHECK_EQ_INT(np_probe_step_begin(p, 0, &err), NP_OK);
    for (int t = 0; t < NT; t++) {
        bufs[t] = malloc((size_t)sizes[t] * sizeof(float));
        for (int64_t i = 0; i < sizes[t]; i++)
            bufs[t][i] = value(t, i);
        np_tensor x;
        memset(&x, 0, sizeof x);
        x.dtype = NP_FLOAT32;
        x.ndim = 1;
        x.shape[0] = x.numel = sizes[t];
        x.data = bufs[t];
        char call[64];
        snprintf(call, sizeof call, "Functional.relu.%d.forward", t);
        CHECK_EQ_INT(np_probe_dump(p, call, NP_ROLE_INPUT, "0", &x, &err), NP_OK);
    }
    CHECK_EQ_INT(np_probe_step_end(p, &err), NP_OK);
    np_probe_summary sum;
    CHECK_EQ_INT(np_probe_close(p, &sum, &err), NP_OK);
    np_probe_free(p);
    CHECK_EQ_INT(sum.tensors, NT);

    snprintf(path, sizeof path, "%s/step0/rank0/dump.h5", dir);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK(f >= 0);
    for (int t = 0; f >= 0 && t < NT; t++) {
        char leaf[128];
        snprintf(leaf, sizeof leaf, "/data/Functional.relu.%d.forward.input.0", t);
        float *got = calloc((size_t)sizes[t], sizeof(float));
        hid_t d = H5Dopen2(f, leaf, H5P_DEFAULT);
        CHECK_MSG(d >= 0, "missing %s", leaf);
        if (d >= 0) {
            CHECK(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, got) >= 0);
            CHECK_MSG(memcmp(got, bufs[t], (size_t)sizes[t] * sizeof(float)) == 0,
                      "%s: payload differs from what was dumped", leaf);
            H5Dclose(d);
        }
        free(got);
    }
    if (f >= 0)
        H5Fclose(f);
    for (int t = 0; t < NT; t++)
        free(bufs[t]);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return check_report();
}
