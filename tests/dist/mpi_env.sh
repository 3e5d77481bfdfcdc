# tests/dist/mpi_env.sh - sourced by the MPI tests: `mpirun_k K args...`
# runs K ranks of a command on this machine. Exits 77 (ctest skip) only when
# nprobe was built without MPI.
nprobe=${NPROBE_BIN:?NPROBE_BIN not set}
py=${NP_PYTHON:-/usr/bin/python3}
if [ -z "${NP_MPIEXEC:-}" ]; then
  echo "SKIP: nprobe was built without MPI (scripts/install-deps.sh installs Open MPI)"
  exit 77
fi
# root may run Open MPI only when told so (Open MPI's documented variables)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Under ASan the ranks mpirun starts run with detect_leaks=0: Open MPI's
# shared-memory components keep allocations to exit from modules they have
# unloaded, which no suppression can name. nprobe's own code on these paths
# is leak-checked in-process by test_dist_reduce (a gather without MPI) and
# by every single-process run in these scripts.
mpi_asan=${ASAN_OPTIONS:-}
[ -n "${NP_SANITIZED:-}" ] && mpi_asan="${mpi_asan:+$mpi_asan:}detect_leaks=0"
# by name from PATH: Open MPI reads an absolute /usr/bin/mpirun as --prefix /
PATH="$(dirname "$NP_MPIEXEC"):$PATH"
mpiexec_name=$(basename "$NP_MPIEXEC")
mpirun_k() { # K command args...
  local k=$1; shift
  ASAN_OPTIONS=$mpi_asan "$mpiexec_name" -n "$k" --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 \
    -x OPENBLAS_NUM_THREADS=1 "$@"
}
