# tests/dist/mpi_env.sh - the preamble of every MPI test, sourced first:
#   set -u; . "$(dirname "$0")/mpi_env.sh"
# Exits 77 (ctest skip) only when nprobe was built without MPI. Then
# `mpirun_k K args...` runs K ranks of a command on this machine, $nprobe
# and $py name the programs, the test runs in a fresh folder $tmp (removed
# on exit) and sets fail=1 on a failed check.
nprobe=${NPROBE_BIN:?NPROBE_BIN not set}
py=${NP_PYTHON:-/usr/bin/python3}
if [ -z "${NP_MPIEXEC:-}" ]; then
  echo "SKIP: nprobe was built without MPI (scripts/install-deps.sh installs Open MPI)"
  exit 77
fi
# root may run Open MPI only when told so (Open MPI's documented variables)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Under ASan the ranks mpirun starts are leak-checked like any process:
# lsan_openmpi.supp names Open MPI's own libraries only (nprobe's leaks on
# the MPI paths are reported), and the slow unwinder lets the stacks reach
# them (Open MPI has no frame pointers).
np_dist_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mpi_asan=${ASAN_OPTIONS:-}
mpi_lsan=${LSAN_OPTIONS:-}
if [ -n "${NP_SANITIZED:-}" ]; then
  mpi_asan="${mpi_asan:+$mpi_asan:}detect_leaks=1:fast_unwind_on_malloc=0"
  mpi_lsan="${mpi_lsan:+$mpi_lsan:}suppressions=$np_dist_dir/lsan_openmpi.supp:print_suppressions=0"
fi
# by name from PATH: Open MPI reads an absolute /usr/bin/mpirun as --prefix /
PATH="$(dirname "$NP_MPIEXEC"):$PATH"
mpiexec_name=$(basename "$NP_MPIEXEC")
mpirun_k() { # K command args...
  local k=$1; shift
  ASAN_OPTIONS=$mpi_asan LSAN_OPTIONS=$mpi_lsan "$mpiexec_name" -n "$k" --oversubscribe \
    --bind-to none -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 -x ASAN_OPTIONS -x LSAN_OPTIONS "$@"
}
# the test's own folder, its working directory
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
fail=0
