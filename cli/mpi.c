/* cli/mpi.c - the program's only contact with MPI (Open MPI or any MPI-3
 * library): started when the process was launched by mpirun/mpiexec, the
 * gather behind the trainer's np_allgather_fn, and the few collectives
 * `nprobe compare` spreads its work with. The MPI calls themselves live in
 * the module nprobe-mpi.so (cli/mpi/nprobe_mpi.c), loaded here only under
 * an MPI starter: a plain `nprobe ls` loads no MPI library (Debian 13's
 * Open MPI costs every process that loads it ~0.1 s, see that file). Built
 * without MPI (NP_HAVE_MPI undefined) every process is rank 0 of 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"

#ifdef NP_HAVE_MPI
#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include "mpi_plugin.h"

static int started;
static const struct np_cli_mpi_ops *mpi;

/* Launched by an MPI starter: Open MPI, PMIx (Open MPI 4/5, Slurm) or
 * PMI (MPICH, Hydra) say so in the environment. */
static int launched_by_mpi(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v)
            return 1;
    }
    return 0;
}

/* The module: $NPROBE_MPI_MODULE, else beside the program (build tree, the
 * wheel's bin/), else <prefix>/lib/nprobe/ for a program in <prefix>/bin. */
static const struct np_cli_mpi_ops *load_module(void)
{
    char exe[PATH_MAX], path[PATH_MAX + 64];
    const char *env = getenv("NPROBE_MPI_MODULE");
    const char *tried = env;
    void *h = NULL;
    if (env && *env) {
        h = dlopen(env, RTLD_NOW | RTLD_GLOBAL);
    } else {
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0) {
            np_cli_error("MPI: cannot find this program's folder (/proc/self/exe) to load %s",
                         NP_CLI_MPI_MODULE);
            return NULL;
        }
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = 0;
        static const char *const where[] = {"/", "/../lib/nprobe/"};
        for (size_t i = 0; i < 2; i++) {
            snprintf(path, sizeof path, "%s%s%s", exe, where[i], NP_CLI_MPI_MODULE);
            tried = path;
            if (access(path, F_OK) == 0) {
                h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
                break;
            }
        }
    }
    if (!h) {
        const char *why = dlerror();
        np_cli_error("MPI: cannot load %s (%s): %s", NP_CLI_MPI_MODULE, tried ? tried : "",
                     why ? why : "not found beside the program");
        return NULL;
    }
    const struct np_cli_mpi_ops *(*get)(void);
    *(void **)&get = dlsym(h, NP_CLI_MPI_SYMBOL);
    if (!get) {
        np_cli_error("MPI: %s has no %s", tried ? tried : NP_CLI_MPI_MODULE, NP_CLI_MPI_SYMBOL);
        return NULL;
    }
    return get();
}

int np_cli_mpi_start(int *rank, int *world)
{
    *rank = 0;
    *world = 1;
    if (!started) {
        if (!launched_by_mpi())
            return 0;
        if (!mpi && !(mpi = load_module()))
            return -1;
        if (mpi->start(rank, world) != 0)
            return -1;
        started = 1;
        return 1;
    }
    return mpi->start(rank, world) == 0 ? 1 : -1;
}

int np_cli_mpi_start_light(int *rank, int *world)
{
    /* Open MPI: ob1 starts in ~0.04 s where the default UCX layer probes
     * its transports for ~0.25 s per process; a user's own choice stays */
    if (launched_by_mpi() && !getenv("OMPI_MCA_pml"))
        setenv("OMPI_MCA_pml", "ob1", 0);
    return np_cli_mpi_start(rank, world);
}

void np_cli_mpi_end(void)
{
    if (started) {
        mpi->end();
        started = 0;
    }
}

int np_cli_mpi_allgather(void *recv, const void *send, size_t bytes, void *user)
{
    (void)user;
    if (!started)
        return -1;
    return mpi->allgather(recv, send, bytes);
}

int np_cli_mpi_send(void *buf, size_t bytes, int peer, int tag, void *user)
{
    (void)user;
    return started ? mpi->send(buf, bytes, peer, tag) : -1;
}

int np_cli_mpi_recv(void *buf, size_t bytes, int peer, int tag, void *user)
{
    (void)user;
    return started ? mpi->recv(buf, bytes, peer, tag) : -1;
}

int np_cli_mpi_max_int(int v)
{
    return started ? mpi->max_int(v) : v;
}

int np_cli_mpi_available(void)
{
    return 1;
}

void np_cli_mpi_bcast_ll(long long *v)
{
    if (started)
        mpi->bcast_ll(v);
}

int np_cli_mpi_allgather_bytes(void **all, size_t *total, const void *send, size_t bytes)
{
    *all = NULL;
    *total = 0;
    if (started)
        return mpi->allgather_bytes(all, total, send, bytes);
    *all = malloc(bytes ? bytes : 1);
    if (!*all)
        return -1;
    memcpy(*all, send, bytes);
    *total = bytes;
    return 0;
}

#else

int np_cli_mpi_start(int *rank, int *world)
{
    *rank = 0;
    *world = 1;
    const char *v = getenv("OMPI_COMM_WORLD_SIZE");
    if (!v)
        v = getenv("PMI_SIZE");
    if (v && strcmp(v, "1") != 0)
        np_cli_error("warning: launched by mpirun, but this nprobe was built without MPI: "
                     "every process runs alone as rank 0 of 1");
    return 0;
}

int np_cli_mpi_start_light(int *rank, int *world)
{
    return np_cli_mpi_start(rank, world);
}

void np_cli_mpi_end(void) {}

int np_cli_mpi_allgather(void *recv, const void *send, size_t bytes, void *user)
{
    (void)user;
    memcpy(recv, send, bytes);
    return 0;
}

int np_cli_mpi_send(void *buf, size_t bytes, int peer, int tag, void *user)
{
    (void)buf, (void)bytes, (void)peer, (void)tag, (void)user;
    return -1;
}

int np_cli_mpi_recv(void *buf, size_t bytes, int peer, int tag, void *user)
{
    (void)buf, (void)bytes, (void)peer, (void)tag, (void)user;
    return -1;
}

int np_cli_mpi_max_int(int v)
{
    return v;
}

int np_cli_mpi_available(void)
{
    return 0;
}

void np_cli_mpi_bcast_ll(long long *v)
{
    (void)v;
}

int np_cli_mpi_allgather_bytes(void **all, size_t *total, const void *send, size_t bytes)
{
    *total = 0;
    *all = malloc(bytes ? bytes : 1);
    if (!*all)
        return -1;
    memcpy(*all, send, bytes);
    *total = bytes;
    return 0;
}

#endif
