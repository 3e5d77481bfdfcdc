#!/usr/bin/env bash
# test_profile.sh - run test_profile.py with the project's Python ($NP_PYTHON):
# torch makes the traces in that process, nprobe (sanitized in the second
# pass) reads them as a subprocess, so no sanitizer runtime is preloaded.
# Skips (77) without torch.
set -u
PY=${NP_PYTHON:?}
"$PY" -c 'import torch' 2>/dev/null || { echo "SKIP: torch missing"; exit 77; }
exec "$PY" "$(dirname "$0")/test_profile.py"
