#!/usr/bin/env bash
# test.sh - the whole test suite from a clean checkout: installs the
# dependencies, builds with warnings as errors, runs ctest, then builds and
# runs the same suite under AddressSanitizer + UndefinedBehaviorSanitizer.
#   scripts/test.sh            both passes
#   scripts/test.sh --quick    the plain pass only
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
quick=0
[ "${1:-}" = "--quick" ] && quick=1

scripts/install-deps.sh
py=$(scripts/setup-venv.sh | tail -n 1)
jobs=$(nproc)

# build DIR: compile quietly; on failure show the log and stop.
build() {
  if ! cmake --build "$1" -j"$jobs" >"$1/build.log" 2>&1; then
    cat "$1/build.log"; echo "test.sh: build failed in $1" >&2; exit 1
  fi
  grep -i 'warning' "$1/build.log" || true
}

echo "== build (Release, -Werror)"
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DNP_WERROR=ON -DNP_PYTHON="$py" >/dev/null
build build/release
echo "== test (Release)"
(cd build/release && ctest --output-on-failure -j"$jobs" --timeout 900)

if [ $quick -eq 0 ]; then
  echo "== build (ASan + UBSan)"
  cmake -S . -B build/sanitize -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNP_WERROR=ON -DNP_SANITIZE=ON -DNP_PYTHON="$py" >/dev/null
  build build/sanitize
  echo "== test (ASan + UBSan)"
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  export NP_SANITIZED=1
  # the plain pass's test times order the sanitized pass (longest first, the
  # same names): no long test left to run alone at the end (CI time)
  if [ -f build/release/Testing/Temporary/CTestCostData.txt ] &&
     [ ! -f build/sanitize/Testing/Temporary/CTestCostData.txt ]; then
    mkdir -p build/sanitize/Testing/Temporary
    cp build/release/Testing/Temporary/CTestCostData.txt build/sanitize/Testing/Temporary/
  fi
  (cd build/sanitize && ctest --output-on-failure -j"$jobs" --timeout 1800)
fi
echo "== all passed"
