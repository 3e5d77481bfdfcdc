#!/usr/bin/env bash
# test_profile.sh - run test_profile.py with the project's Python ($NP_PYTHON):
# torch makes the traces in that process, nprobe reads them as a subprocess.
# Skips (77) without torch. In the sanitized pass (NP_SANITIZED=1) only the
# checks on hand-made traces run (the torch runs cost ~30 s there;
# test_prof_analyze covers the library's paths).
set -u
PY=${NP_PYTHON:?}
# looked up, not imported (an import of torch costs seconds of CPU)
[ "${NP_SANITIZED:-0}" = 1 ] || "$PY" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("torch") is None)' 2>/dev/null || { echo "SKIP: torch missing"; exit 77; }
exec "$PY" "$(dirname "$0")/test_profile.py"
