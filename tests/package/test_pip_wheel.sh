#!/usr/bin/env bash
# test_pip_wheel.sh - the package as a Python user gets it (pyproject.toml at
# the root, scikit-build-core): `python -m build` makes the sdist, then the
# wheel from that sdist alone (so the sdist holds every C source the build
# needs), offline; the wheel installs with --no-index into a fresh venv; there,
# with NPROBE_LIB, NPROBE_BIN and PYTHONPATH unset, `nprobe --help` runs from
# the venv's bin/, a small torch model is dumped through PrecisionDebugger with
# the library inside the package, and the installed `nprobe ls` / `nprobe show`
# read the dump: its linear output's max equals the float64 reference.
#
# The venv is not --system-site-packages: a .pth file lends it $NP_PYTHON's
# site-packages (torch, h5py, pip, scikit-build-core, build), which costs
# nothing, where reinstalling torch would cost 700 MB. One compile (the wheel,
# Release): skipped in the sanitized pass, which would only build it again.
set -u
PY=${NP_PYTHON:?}
SRC=${NP_SOURCE_DIR:?}
if [ "${NP_SANITIZED:-0}" = 1 ]; then
  echo "SKIP: the wheel is a Release build of its own; the plain pass tests it"; exit 77
fi
# looked up, not imported (an import of torch costs seconds of CPU)
for m in torch scikit_build_core build pip; do
  "$PY" -c "import importlib.util as u, sys; sys.exit(u.find_spec('$m') is None)" 2>/dev/null \
    || { echo "SKIP: $m missing from $PY (scripts/setup-venv.sh)"; exit 77; }
done

fails=0
check() {  # check CONDITION-STATUS MESSAGE
  if [ "$1" -ne 0 ]; then echo "FAIL: $2"; fails=$((fails + 1)); else echo "ok: $2"; fi
}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/np_pip.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
unset NPROBE_LIB NPROBE_BIN PYTHONPATH NPROBE_DUMP_CONFIG

# 1. sdist, then the wheel built from it (build's default), no network
#    (--skip-dependency-check: without a ninja on PATH scikit-build-core asks
#    for PyPI's; it falls back to make)
if ! "$PY" -m build --no-isolation --skip-dependency-check --outdir "$tmp/dist" "$SRC" >"$tmp/build.log" 2>&1; then
  tail -n 60 "$tmp/build.log"; echo "FAIL: python -m build"; exit 1
fi
sdist=$(ls "$tmp"/dist/nprobe-*.tar.gz)
wheel=$(ls "$tmp"/dist/nprobe-*-py3-none-linux_*.whl)
check $? "python -m build: $(basename "$sdist") and $(basename "${wheel:-no py3-none-linux wheel}")"

# 2. the sdist: every folder the top CMakeLists.txt adds, the CMake modules,
#    the public headers and the export map; no build tree, no venv
tar tzf "$sdist" | sed 's,^[^/]*/,,' > "$tmp/sdist.txt"
want="CMakeLists.txt pyproject.toml cmake/NprobeDeps.cmake cmake/NprobeWarnings.cmake
include/nprobe/probe.h include/nprobe/configcheck.h libnprobe/libnprobe.map python/nprobe/_lib.py
scripts/install-deps.sh"
for d in $(sed -n 's/^ *add_subdirectory(\([a-z]*\)).*/\1/p' "$SRC/CMakeLists.txt"); do
  want="$want $d/CMakeLists.txt"
done
miss=""
for f in $want; do grep -qx "$f" "$tmp/sdist.txt" || miss="$miss $f"; done
check $([ -z "$miss" ]; echo $?) "the sdist holds the C build's files (missing:${miss:- none})"
extra=$(grep -E '^(build|build-[^/]*|\.venv|dist)/' "$tmp/sdist.txt" | head -3)
check $([ -z "$extra" ]; echo $?) "the sdist holds no build tree or venv (${extra:-none})"

# 3. the wheel: the library in the package, the program as a script, no
#    RPATH and no path of this machine (source tree, build folders)
mkdir "$tmp/whl" && (cd "$tmp/whl" && "$PY" -m zipfile -e "$wheel" .)
prog=$(ls "$tmp"/whl/nprobe-*.data/scripts/nprobe 2>/dev/null)
check $([ -f "$tmp/whl/nprobe/lib/libnprobe.so.0" ] && [ -n "$prog" ]; echo $?) \
  "the wheel has nprobe/lib/libnprobe.so.0 and the nprobe script"
rp=$(readelf -d "$tmp/whl/nprobe/lib/libnprobe.so.0" $prog 2>&1 | grep -E 'RPATH|RUNPATH')
check $([ -z "$rp" ]; echo $?) "no RPATH in the wheel's binaries (${rp:-none})"
leak=$(grep -rlaF -e "$SRC" -e "$tmp" -e "build-via-sdist" "$tmp/whl" | head -3)
check $([ -z "$leak" ]; echo $?) "no build-machine path in the wheel (${leak:-none})"

# 4. a fresh venv, lent the shared packages by a .pth; the wheel offline
base=$("$PY" -c 'import sys; print(getattr(sys, "_base_executable", sys.executable))')
"$base" -m venv --without-pip "$tmp/venv"
V=$tmp/venv/bin/python
site=$("$V" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$PY" -c 'import site; print("\n".join(site.getsitepackages()))' > "$site/_np_lent.pth"
"$V" -m pip install -q --no-index --no-deps --disable-pip-version-check "$wheel" >"$tmp/pip.log" 2>&1
check $? "pip install --no-index the wheel into a fresh venv: $(tail -n 3 "$tmp/pip.log")"

"$tmp/venv/bin/nprobe" --help >"$tmp/help.txt" 2>&1
check $? "the venv's nprobe --help exits 0"
grep -q "compare" "$tmp/help.txt"
check $? "nprobe --help lists its commands"

cat > "$tmp/cfg.json" <<JSON
{"task": "statistics", "dump_path": "$tmp/dump", "rank": [], "step": [0], "level": "L1",
 "statistics": {"scope": [], "list": [], "data_mode": ["all"]}}
JSON
cat > "$tmp/run.py" <<'PY'
import sys
import torch
import nprobe
from nprobe.torch import PrecisionDebugger
venv_site, cfg = sys.argv[1], sys.argv[2]
assert nprobe.__file__.startswith(venv_site), nprobe.__file__
assert nprobe.library_path() == f"{venv_site}/nprobe/lib/libnprobe.so.0", nprobe.library_path()
torch.manual_seed(0)
m = torch.nn.Linear(4, 3)
x = torch.randn(2, 4)
d = PrecisionDebugger(config_path=cfg)
d.start(m)
torch.relu(m(x)).sum().backward()
d.stop()
d.step()
ref = (x.double() @ m.weight.detach().double().T + m.bias.detach().double()).max().item()
print(f"{ref:.17g}")
PY
ref=$(cd "$tmp" && "$V" "$tmp/run.py" "$site" "$tmp/cfg.json" 2>"$tmp/run.err")
check $? "PrecisionDebugger from the installed package, library inside it: $(tail -n 3 "$tmp/run.err")"

export PATH="$tmp/venv/bin:$PATH"
nprobe ls "$tmp/dump" >"$tmp/ls.txt" 2>&1
check $? "the installed nprobe ls reads the dump"
# the calls run.py made, forward and backward, each once
calls=$(sed -n 's/^ *\([A-Za-z]*\.[a-z_]*\.0\.\(forward\|backward\)\)\.\(input\|output\)\..*/\1/p' "$tmp/ls.txt" | sort -u | tr '\n' ' ')
want="Functional.linear.0.backward Functional.linear.0.forward Tensor.sum.0.backward Tensor.sum.0.forward Torch.relu.0.backward Torch.relu.0.forward "
check $([ "$calls" = "$want" ]; echo $?) "nprobe ls lists the calls made: $calls"
nprobe show "$tmp/dump" Functional.linear.0.forward.output.0 >"$tmp/show.txt" 2>&1
check $? "nprobe show the linear output"
got=$(sed -n 's/^ *max *\([^ ]*\).*/\1/p' "$tmp/show.txt" | head -n 1)
"$PY" -c "import sys; g, r = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(g - r) > 1e-6 * max(1, abs(r)))" "${got:-nan}" "${ref:-0}"
check $? "the dumped max ($got) is torch's float64 reference ($ref)"

# the wheel's nprobe under an MPI launcher loads its MPI module, installed
# beside it (nprobe-mpi.so: the program itself does not link MPI)
if command -v mpirun >/dev/null 2>&1; then
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -n 2 --oversubscribe --bind-to none \
    -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 \
    nprobe train --model mlp --steps 2 --threads 1 >"$tmp/mpi.txt" 2>&1
  check $? "mpirun -n 2 of the installed nprobe train: $(tail -n 3 "$tmp/mpi.txt")"
  grep -q "^data parallel: 2 rank(s)" "$tmp/mpi.txt"
  check $? "the installed nprobe runs data parallel on 2 ranks: $(head -n 3 "$tmp/mpi.txt")"
fi

echo "$fails failed"
[ $fails -eq 0 ]
