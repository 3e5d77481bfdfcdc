#!/usr/bin/env bash
# test_hot_flags.sh - the hot kernels keep -O3 however a distribution builds
# (issue 13, cmake/NprobeWarnings.cmake): configures this source tree (no
# build) the way Debian does and reads the compile commands CMake generates.
#  - None with Debian's CFLAGS (-g -O2 ...) and RelWithDebInfo (-O2 -g):
#    every source of every hot library has -O3 after the last -O2, and
#    -ffp-contract=off, no fast-math option;
#  - Debug, None without -O, CFLAGS ending in -O0, -Os, and -DNP_HOT_O3=OFF:
#    no -O3 anywhere (the build's choice is kept).
set -euo pipefail
# It configures and reads flags; no program of the tree runs, so the
# sanitizers have nothing to see (CI time: seven configures).
if [ "${NP_SANITIZED:-0}" = 1 ]; then
  echo "SKIP: no compiled code runs here; the plain pass checks the flags"; exit 77
fi
src=${NP_SOURCE_DIR:?NP_SOURCE_DIR names the source tree}
py=${NP_PYTHON:-/usr/bin/python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/np_hot_flags.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail=0
hot="common ops runtime probe dumpio msprobe replay compare"

# configure NAME CFLAGS cmake-args... -> $work/NAME/compile_commands.json
configure() {
  local name=$1 cflags=$2
  shift 2
  if ! CFLAGS="$cflags" cmake -S "$src" -B "$work/$name" -DNP_BUILD_TESTS=OFF \
      -DCMAKE_EXPORT_COMPILE_COMMANDS=ON "$@" > "$work/$name.log" 2>&1; then
    echo "FAIL: configure $name"; cat "$work/$name.log"; fail=1; return 1
  fi
}

# check NAME want(yes|no): every hot library's sources get -O3 last (yes),
# or no source gets -O3 (no)
check() {
  "$py" - "$work/$1/compile_commands.json" "$src" "$2" $hot <<'PY'
import json, os, sys
path, src, want, hot = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
cmds = json.load(open(path))
bad, seen = [], {h: 0 for h in hot}
for c in cmds:
    args = c["command"].split()
    rel = os.path.relpath(c["file"], src)
    lib = rel.split(os.sep)[0]
    olev = [a for a in args if a.startswith("-O")]
    if any("fast-math" in a or a == "-Ofast" or "associative-math" in a for a in args):
        bad.append(rel + ": fast-math")
    if want == "yes" and lib in hot:
        seen[lib] += 1
        if not olev or olev[-1] != "-O3":
            bad.append("%s: optimisation %s, want -O3 last" % (rel, olev))
        if "-ffp-contract=off" not in args:
            bad.append(rel + ": no -ffp-contract=off")
    if want == "no" and "-O3" in olev:
        bad.append("%s: -O3 in a build that did not ask for it (%s)" % (rel, olev))
if want == "yes":
    bad += ["library %s: no source compiled" % h for h, n in seen.items() if n == 0]
for b in bad[:20]:
    print("  " + b)
sys.exit(1 if bad else 0)
PY
}

debian="-g -O2 -ffile-prefix-map=$src=. -fstack-protector-strong -Wformat -Werror=format-security"
for spec in "none_debian|$debian|-DCMAKE_BUILD_TYPE=None|yes" \
            "relwithdebinfo||-DCMAKE_BUILD_TYPE=RelWithDebInfo|yes" \
            "debug||-DCMAKE_BUILD_TYPE=Debug|no" \
            "none_plain||-DCMAKE_BUILD_TYPE=None|no" \
            "none_noopt|-g -O2 -O0|-DCMAKE_BUILD_TYPE=None|no" \
            "minsize||-DCMAKE_BUILD_TYPE=MinSizeRel|no" \
            "off||-DCMAKE_BUILD_TYPE=RelWithDebInfo -DNP_HOT_O3=OFF|no"; do
  IFS='|' read -r name cflags args want <<< "$spec"
  # shellcheck disable=SC2086
  configure "$name" "$cflags" $args || continue
  if check "$name" "$want"; then
    echo "ok: $name (hot -O3: $want)"
  else
    echo "FAIL: $name (hot -O3 wanted: $want)"; fail=1
  fi
done
exit $fail
