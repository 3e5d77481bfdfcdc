#!/usr/bin/env bash
# test_dist_leaks.sh - the leak check is on in the ranks mpirun starts
# (sanitized pass only; tests/dist/mpi_env.sh, lsan_openmpi.supp): a
# program that only starts and ends MPI (leak_probe.c) reports no leak, so
# Open MPI's own are all suppressed; the same program leaking one block of
# its own gets that block reported (4242 bytes from leak_probe_block; on
# each rank that reports before mpirun stops the job at the first failing
# rank) and nothing else, and fails, so the suppressions hide nothing of
# the program's. Every nprobe run in the other test_dist_* scripts runs
# under the same settings.
set -u
. "$(dirname "$0")/mpi_env.sh"
probe=${NP_LEAK_PROBE:?NP_LEAK_PROBE not set}
[ -n "${NP_SANITIZED:-}" ] || { echo "SKIP: the leak check exists in the sanitized pass only"; exit 77; }
mpirun_k 2 "$probe" > "$tmp/clean.out" 2> "$tmp/clean.err"
rc=$?
if [ $rc = 0 ] && ! grep -q "LeakSanitizer" "$tmp/clean.err" && [ "$(grep -c ': 2 ranks' "$tmp/clean.out")" = 2 ]; then
  echo "ok   MPI_Init/Finalize on 2 ranks: no leak reported (Open MPI's suppressed)"
else
  echo "FAIL clean probe: exit $rc"; cat "$tmp/clean.err"; fail=1
fi
mpirun_k 2 "$probe" leak > "$tmp/leak.out" 2> "$tmp/leak.err"
rc=$?
n_all=$(grep -c "^\(Direct\|Indirect\) leak" "$tmp/leak.err")
n_ours=$(grep -A3 "^Direct leak of 4242 byte(s) in 1 object(s)" "$tmp/leak.err" | grep -c "leak_probe_block")
if [ $rc != 0 ] && [ "$n_ours" -ge 1 ] && [ "$n_all" = "$n_ours" ]; then
  echo "ok   a leak of the program's own: reported by $n_ours rank(s) (4242 bytes, leak_probe_block), nothing else, exit $rc"
else
  echo "FAIL leaking probe: exit $rc, $n_all leak record(s), $n_ours of ours (want >= 1, all ours)"; cat "$tmp/leak.err"; fail=1
fi
exit $fail
