#!/usr/bin/env bash
# build.sh [BUILD_DIR] [cmake options...] - configure and build nprobe
# (Release, warnings as errors). Prints the path of the nprobe binary.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/build/release}
shift || true
cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DNP_WERROR=ON "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)" >/dev/null
echo "$dir/nprobe"
