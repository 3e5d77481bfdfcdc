/* cli/mpi_plugin.h - what cli/mpi.c needs of MPI, the table exported by the
 * module cli/mpi/nprobe_mpi.c (nprobe-mpi.so) as np_cli_mpi_ops_v1(). Each
 * entry is called only after start() returned 0. */
#ifndef NP_CLI_MPI_PLUGIN_H
#define NP_CLI_MPI_PLUGIN_H
#include <stddef.h>

struct np_cli_mpi_ops {
    int (*start)(int *rank, int *world);  /* MPI_Init unless done; 0 or -1 */
    void (*end)(void);                    /* MPI_Finalize */
    int (*allgather)(void *recv, const void *send, size_t bytes);
    int (*max_int)(int v);
    void (*bcast_ll)(long long *v);
    int (*allgather_bytes)(void **all, size_t *total, const void *send, size_t bytes);
    int (*send)(const void *buf, size_t bytes, int peer, int tag);  /* MPI_Send */
    int (*recv)(void *buf, size_t bytes, int peer, int tag);        /* MPI_Recv, exactly bytes */
};

#define NP_CLI_MPI_MODULE "nprobe-mpi.so"
#define NP_CLI_MPI_SYMBOL "np_cli_mpi_ops_v1"
#endif
