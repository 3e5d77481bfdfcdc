#!/usr/bin/env bash
# pyrun.sh SCRIPT ARGS... - run a Python test with the project's Python ($NP_PYTHON: .venv) and the
# nprobe package of this tree (python/, libnprobe from $NPROBE_BIN's build).
# In the sanitized pass libnprobe is built with ASan+UBSan, so their runtimes
# are preloaded into the interpreter (leak checking off: CPython and torch
# keep their allocations to the end). Skips (77) without torch or h5py (looked
# up, not imported: an import of torch costs seconds, per Python test).
# A test whose C paths other tests run sanitized sets NP_PLAIN_ONLY (its
# reason; tests/python/CMakeLists.txt): it skips in the sanitized pass.
set -u
if [ "${NP_SANITIZED:-0}" = 1 ] && [ -n "${NP_PLAIN_ONLY:-}" ]; then
  echo "SKIP: plain pass only: $NP_PLAIN_ONLY"; exit 77
fi
PY=${NP_PYTHON:?}
SRC=${NP_SOURCE_DIR:?}
"$PY" -c 'import importlib.util as u, sys; sys.exit(not all(map(u.find_spec, ("torch", "h5py"))))' 2>/dev/null || { echo "SKIP: torch or h5py missing"; exit 77; }
export PYTHONPATH="$SRC/python${PYTHONPATH:+:$PYTHONPATH}"
export NPROBE_LIB="$(dirname "${NPROBE_BIN:?}")/lib/libnprobe.so"
if [ "${NP_SANITIZED:-0}" = 1 ]; then
  export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
  export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
fi
exec "$PY" "$@"
