/* cli/mpi.c - the program's only contact with MPI (Open MPI or any MPI-3
 * library): started when the process was launched by mpirun/mpiexec, the
 * gather behind the trainer's np_allgather_fn, and the few collectives
 * `nprobe compare` spreads its work with. Built without MPI (NP_HAVE_MPI
 * undefined) every process is rank 0 of 1. */
#include <stdlib.h>
#include <string.h>

#include "cmd.h"

#ifdef NP_HAVE_MPI
#include <mpi.h>

static int started;

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

int np_cli_mpi_start(int *rank, int *world)
{
    *rank = 0;
    *world = 1;
    if (!started) {
        if (!launched_by_mpi())
            return 0;
        int inited = 0;
        MPI_Initialized(&inited);
        if (!inited && MPI_Init(NULL, NULL) != MPI_SUCCESS)
            return -1;
        started = 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, world);
    return 1;
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
        MPI_Finalize();
        started = 0;
    }
}

int np_cli_mpi_allgather(void *recv, const void *send, size_t bytes, void *user)
{
    (void)user;
    if (!started || bytes > (size_t)2147483647)
        return -1;
    return MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE,
                         MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : -1;
}

int np_cli_mpi_max_int(int v)
{
    int out = v;
    if (started)
        MPI_Allreduce(&v, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return out;
}

int np_cli_mpi_available(void)
{
    return 1;
}

void np_cli_mpi_bcast_ll(long long *v)
{
    if (started)
        MPI_Bcast(v, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
}

int np_cli_mpi_allgather_bytes(void **all, size_t *total, const void *send, size_t bytes)
{
    *all = NULL;
    *total = 0;
    if (!started) {
        *all = malloc(bytes ? bytes : 1);
        if (!*all)
            return -1;
        memcpy(*all, send, bytes);
        *total = bytes;
        return 0;
    }
    int world = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    /* every process learns whether every other can take part: none stops alone */
    int n = bytes > (size_t)2147483647 ? -1 : (int)bytes;
    int *counts = calloc((size_t)world, sizeof *counts);
    int *displs = calloc((size_t)world, sizeof *displs);
    int ok = counts && displs, all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) {
        free(counts);
        free(displs);
        return -1;
    }
    MPI_Allgather(&n, 1, MPI_INT, counts, 1, MPI_INT, MPI_COMM_WORLD);
    long long sum = 0;
    for (int r = 0; r < world; r++) {
        displs[r] = (int)sum;
        sum += counts[r] < 0 ? 2147483648LL : counts[r];
    }
    char *buf = sum <= 2147483647LL ? malloc((size_t)sum + 1) : NULL;
    ok = buf != NULL;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (all_ok)
        MPI_Allgatherv(send, n, MPI_BYTE, buf, counts, displs, MPI_BYTE, MPI_COMM_WORLD);
    free(counts);
    free(displs);
    if (!all_ok) {
        free(buf);
        return -1;
    }
    *all = buf;
    *total = (size_t)sum;
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
