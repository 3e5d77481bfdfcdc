#!/usr/bin/env bash
# test_deps_message.sh CMAKE - a build whose Debian -dev packages are missing
# stops at the configure with one message naming each missing package and the
# apt-get line that installs them (cmake/NprobeDeps.cmake). jansson is hidden
# from pkg-config (a pkg-config path holding every .pc of this machine but
# jansson.pc) and HDF5 from CMake (CMAKE_DISABLE_FIND_PACKAGE_HDF5): the
# message must name libjansson-dev and libhdf5-dev, and only them.
set -u
CMAKE=${1:?usage: test_deps_message.sh CMAKE}
SRC=${NP_SOURCE_DIR:?}
command -v pkg-config >/dev/null || { echo "SKIP: no pkg-config"; exit 77; }
pkg-config --exists jansson || { echo "SKIP: jansson.pc is missing here already"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/np_deps.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/pc"
IFS=: read -r -a dirs <<<"${PKG_CONFIG_PATH:+$PKG_CONFIG_PATH:}$(pkg-config --variable pc_path pkg-config)"
for d in "${dirs[@]}"; do
  for f in "$d"/*.pc; do
    [ -e "$f" ] && [ "$(basename "$f")" != jansson.pc ] && ln -sf "$f" "$tmp/pc/"
  done
done
fails=0
PKG_CONFIG_PATH= PKG_CONFIG_LIBDIR="$tmp/pc" "$CMAKE" -S "$SRC" -B "$tmp/b" -DNP_BUILD_TESTS=OFF \
  -DCMAKE_DISABLE_FIND_PACKAGE_HDF5=ON >"$tmp/out.txt" 2>&1
rc=$?
cat "$tmp/out.txt"
[ $rc -ne 0 ] || { echo "FAIL: the configure passed without jansson and HDF5"; fails=$((fails + 1)); }
grep -q "jansson (pkg-config module jansson.pc): Debian package libjansson-dev" "$tmp/out.txt" ||
  { echo "FAIL: no line naming libjansson-dev"; fails=$((fails + 1)); }
grep -q "HDF5 (C library): Debian package libhdf5-dev" "$tmp/out.txt" ||
  { echo "FAIL: no line naming libhdf5-dev"; fails=$((fails + 1)); }
grep -qx " *sudo apt-get install libhdf5-dev libjansson-dev" "$tmp/out.txt" ||
  { echo "FAIL: the apt-get line is not exactly the two missing packages"; fails=$((fails + 1)); }
grep -q "scripts/install-deps.sh" "$tmp/out.txt" ||
  { echo "FAIL: the message does not point at scripts/install-deps.sh"; fails=$((fails + 1)); }
echo "$fails failed"
[ $fails -eq 0 ]
