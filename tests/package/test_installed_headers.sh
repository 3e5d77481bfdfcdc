#!/usr/bin/env bash
# test_installed_headers.sh CC - the headers libnprobe installs
# (libnprobe/CMakeLists.txt: install(FILES ...)) are exactly include/nprobe/*.h,
# and each compiles alone with include/ as the only include directory: an
# installed header that includes one of include/internal/ (the libraries' own
# headers, never installed) fails here. A header moved the wrong way
# (internal into include/nprobe/, not in the install list) fails too.
set -u
CC=${1:?usage: test_installed_headers.sh CC}
SRC=${NP_SOURCE_DIR:?}
fails=0
installed=$(sed -n '/install(FILES/,/DESTINATION include/p' "$SRC/libnprobe/CMakeLists.txt" |
  grep -o 'include/nprobe/[a-z_0-9]*\.h' | sort)
present=$(cd "$SRC" && ls include/nprobe/*.h | sort)
if [ "$installed" != "$present" ]; then
  echo "FAIL: include/nprobe/ holds: $(echo $present); libnprobe installs: $(echo $installed)"
  fails=$((fails + 1))
fi
[ -n "$present" ] || { echo "FAIL: no header in include/nprobe/"; fails=$((fails + 1)); }
for h in $present; do
  if ! printf '#include "nprobe/%s"\nint np_header_alone;\n' "$(basename "$h")" |
      "$CC" -std=c11 -fsyntax-only -Wall -Werror -I "$SRC/include" -x c - 2>"${TMPDIR:-/tmp}/np_hdr.$$"; then
    echo "FAIL: $h does not compile alone with include/ only:"
    cat "${TMPDIR:-/tmp}/np_hdr.$$"
    fails=$((fails + 1))
  else
    echo "ok: $h compiles alone"
  fi
done
rm -f "${TMPDIR:-/tmp}/np_hdr.$$"
# the check can fail: an internal header is not reachable with include/ only
if printf '#include "nprobe/compare.h"\n' |
    "$CC" -std=c11 -fsyntax-only -I "$SRC/include" -x c - 2>/dev/null; then
  echo "FAIL: nprobe/compare.h (internal) compiled with include/ only"
  fails=$((fails + 1))
fi
[ $fails -eq 0 ] && echo "PASS" || echo "$fails failure(s)"
exit $((fails > 0))
