#!/usr/bin/env bash
# test_profile.sh - run test_profile.py with the project's Python ($NP_PYTHON):
# torch makes the traces in that process, nprobe reads them as a subprocess.
# Skips (77) without torch, and in the sanitized pass: its C paths run
# there in test_prof_analyze (hand-made traces), the torch runs cost ~30 s.
set -u
PY=${NP_PYTHON:?}
[ "${NP_SANITIZED:-0}" = 1 ] && { echo "SKIP: sanitized pass (torch runs; test_prof_analyze covers the C paths)"; exit 77; }
"$PY" -c 'import torch' 2>/dev/null || { echo "SKIP: torch missing"; exit 77; }
exec "$PY" "$(dirname "$0")/test_profile.py"
