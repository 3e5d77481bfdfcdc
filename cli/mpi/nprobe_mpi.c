/* cli/mpi/nprobe_mpi.c - the MPI half of cli/mpi.c, built as a module of
 * its own (nprobe-mpi.so, next to the program) that cli/mpi.c loads only
 * when the process was launched by mpirun/mpiexec. Loading an MPI library
 * costs every process that links it: Debian 13's Open MPI 5 pulls in
 * libpsm2, whose constructor pins the process to CPU 0 and sleeps 100 ms
 * to time the cycle counter; linked into the program, every `nprobe ls`
 * paid it. The table below is all the program sees of MPI. */
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "../mpi_plugin.h"

static int start(int *rank, int *world)
{
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init(NULL, NULL) != MPI_SUCCESS)
        return -1;
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, world);
    return 0;
}

static void end(void)
{
    MPI_Finalize();
}

static int allgather(void *recv, const void *send, size_t bytes)
{
    if (bytes > (size_t)2147483647)
        return -1;
    return MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE,
                         MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : -1;
}

static int max_int(int v)
{
    int out = v;
    MPI_Allreduce(&v, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return out;
}

static void bcast_ll(long long *v)
{
    MPI_Bcast(v, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
}

static int allgather_bytes(void **all, size_t *total, const void *send, size_t bytes)
{
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

static int send_to(const void *buf, size_t bytes, int peer, int tag)
{
    if (bytes > (size_t)2147483647)
        return -1;
    return MPI_Send(buf, (int)bytes, MPI_BYTE, peer, tag, MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : -1;
}

static int recv_from(void *buf, size_t bytes, int peer, int tag)
{
    MPI_Status st;
    int got = -1;
    if (bytes > (size_t)2147483647 ||
        MPI_Recv(buf, (int)bytes, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st) != MPI_SUCCESS ||
        MPI_Get_count(&st, MPI_BYTE, &got) != MPI_SUCCESS)
        return -1;
    return (size_t)got == bytes ? 0 : -1;
}

const struct np_cli_mpi_ops *np_cli_mpi_ops_v1(void);
__attribute__((visibility("default"))) const struct np_cli_mpi_ops *np_cli_mpi_ops_v1(void)
{
    static const struct np_cli_mpi_ops ops = {start,    end,           allgather, max_int,
                                              bcast_ll, allgather_bytes, send_to,   recv_from};
    return &ops;
}
