/* tests/dist/leak_probe.c - started by test_dist_leaks.sh under mpirun in
 * the sanitized pass: MPI_Init, one allreduce, MPI_Finalize; with the
 * argument "leak" also one block of 4242 bytes allocated by
 * leak_probe_block() and never freed, as a leak of nprobe's own on an MPI
 * path would be. LeakSanitizer must report exactly that block on every
 * rank and nothing of Open MPI's (tests/dist/lsan_openmpi.supp). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *volatile sink;

__attribute__((noinline)) static void leak_probe_block(void)
{
    char *p = malloc(4242);
    if (p)
        memset(p, 1, 4242);
    sink = p;   /* seen once, then forgotten: unreachable at exit */
    sink = NULL;
}

int main(int argc, char **argv)
{
    if (MPI_Init(&argc, &argv) != MPI_SUCCESS)
        return 2;
    int rank = 0, one = 1, sum = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (argc > 1 && !strcmp(argv[1], "leak"))
        leak_probe_block();
    MPI_Finalize();
    printf("rank %d: %d ranks\n", rank, sum);
    return 0;
}
