#!/usr/bin/env bash
# setup-venv.sh - make (or bring up to date) the project's Python environment,
# .venv at the repository root, from the pinned python/requirements/dev.lock:
# torch 2.13.0 (the CPU wheel on the machine's disk), numpy, h5py, pandas,
# openpyxl, transformers, mindstudio-probe (msprobe), scikit-build-core.
# Idempotent: a stamp holding the lock file's hash skips a venv that has it.
# Prints the venv's python on the last line.
#
# The interpreter is Python 3.11 (the one the torch wheel is built for):
# $NP_VENV_PYTHON, else python3.11 on PATH, else /usr/bin/python3.11. Where no
# Python 3.11 exists (a bare Debian 13 root has 3.13 only), the venv is made
# from /usr/bin/python3 with Debian's system packages visible
# (python3-torch 2.6) and the rest of the lock is installed from PyPI (every
# pin but torch has a wheel for 3.13); a test that needs a package that could
# not be installed (no index) skips, saying so.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${NP_VENV:-$root/.venv}
lock=$root/python/requirements/dev.lock
stamp=$venv/.nprobe-lock

pick_python() {
  local p
  for p in "${NP_VENV_PYTHON:-}" python3.11 /usr/bin/python3.11; do
    [ -n "$p" ] || continue
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import sys, venv; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
      command -v "$p"; return 0
    fi
  done
  return 1
}

want=$(sha256sum "$lock" | cut -d' ' -f1)
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "setup-venv: $venv up to date" >&2
  echo "$venv/bin/python"; exit 0
fi

export PIP_DISABLE_PIP_VERSION_CHECK=1
if py=$(pick_python); then
  [ -x "$venv/bin/python" ] || { echo "setup-venv: creating $venv from $py" >&2; "$py" -m venv "$venv"; }
  echo "setup-venv: installing python/requirements/dev.lock (torch from the wheel on disk)" >&2
  "$venv/bin/pip" install -q -r "$lock" >&2
else
  py=/usr/bin/python3
  [ -x "$py" ] || { echo "setup-venv: no Python 3.11 and no /usr/bin/python3" >&2; exit 2; }
  echo "setup-venv: no Python 3.11 here: $venv from $py with Debian's packages (python3-torch) visible" >&2
  [ -x "$venv/bin/python" ] || "$py" -m venv --system-site-packages "$venv"
  # The lock less torch (Debian's 2.6 stays: PyPI has no CPU-only torch for
  # this Python, and its default torch wheel is a CUDA build of several GB)
  # and less sympy/mpmath (torch 2.6's symbolic shapes keep Debian's 1.13).
  # --no-deps: the lock is complete, and pip must never resolve torch. Every
  # other pin, msprobe and transformers included, has a wheel for 3.13 on
  # PyPI. In one go; where that fails (no index), one by one without
  # retries, and no stamp: the next run tries again.
  specs=$(grep -vE '^(#|torch==|sympy==|mpmath==)' "$lock")
  if ! "$venv/bin/pip" install -q --no-deps $specs >/dev/null 2>&1; then
    for spec in $specs; do
      "$venv/bin/pip" install -q --retries 0 --no-deps "$spec" >/dev/null 2>&1 || { partial=1; echo "setup-venv: $spec not installable here (skipped)" >&2; }
    done
  fi
fi
[ -n "${partial:-}" ] || echo "$want" > "$stamp"
echo "setup-venv: ready" >&2
echo "$venv/bin/python"
