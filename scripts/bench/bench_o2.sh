#!/usr/bin/env bash
# scripts/bench/bench_o2.sh [--quick] - nprobe built the way distributions
# build it: CMAKE_BUILD_TYPE=RelWithDebInfo (-O2 -g), side by side with the
# Release build (-O3) and with RelWithDebInfo without the per-target -O3 of
# the hot kernels (-DNP_HOT_O3=OFF, what -O2 alone gives; cmake/
# NprobeWarnings.cmake). On the GPT of bench_dump.sh: the training step with
# no probe and with statistics at L1, the builds and variants interleaved in
# every round; medians over all measured steps. Also checks that the builds
# give bit-identical results (the losses, every dumped tensor's crc32, and
# every dataset and attribute of the saved checkpoint).
# Prints a Markdown section on stdout. Env: NPROBE_BIN (the Release build),
# NP_PYTHON, BENCH_THREADS, BENCH_DIR.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
rel=${NPROBE_BIN:-$root/build/release/nprobe}
py=${NP_PYTHON:-$(dirname "$0")/../../.venv/bin/python}
threads=${BENCH_THREADS:-$(nproc)}
[ -x "$rel" ] || { echo "bench_o2: $rel is not built (set NPROBE_BIN)" >&2; exit 2; }
rel=$(cd "$(dirname "$rel")" && pwd)/$(basename "$rel")
echo "bench_o2: building RelWithDebInfo (with and without NP_HOT_O3)" >&2
o2=$(nice -n 19 "$root/scripts/build.sh" "$root/build/bench-relwithdebinfo" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DNP_HOT_O3=ON -DNP_BUILD_TESTS=OFF)
plain=$(nice -n 19 "$root/scripts/build.sh" "$root/build/bench-relwithdebinfo-plain" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNP_HOT_O3=OFF -DNP_BUILD_TESTS=OFF)
width=256 layers=4 heads=4 context=128 batch=8
steps=8 warm=2 rounds=5
quick=""
if [ "${1:-}" = "--quick" ]; then
  quick=" --quick"
  width=64 layers=2 heads=2 context=32
  steps=4 warm=1 rounds=2
fi
model=(--model gpt --layers "$layers" --heads "$heads" --width "$width" --context "$context"
       --batch "$batch")
work=$(mktemp -d "${BENCH_DIR:-/tmp}/np_bench_o2.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
printf '{"task": "statistics", "dump_path": "%s/d_stats", "level": "L1"}\n' "$work" > stats.json

declare -A bins=([rel]=$rel [o2]=$o2 [plain]=$plain)
run_ms() { # build variant -> step times (ms) after the warm-up, one per line
  local extra=()
  [ "$2" = statistics ] && extra=(--dump-config stats.json)
  rm -rf d_stats
  OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads "${bins[$1]}" train "${model[@]}" \
    --steps $((steps + warm)) --threads "$threads" "${extra[@]}" 2>/dev/null |
    awk -v tok=$((context * batch)) -v warm="$warm" '
      /^step [0-9]+ / { for (i = 1; i <= NF; i++) if ($(i) == "tok/s") { n++; if (n > warm) printf "%.3f\n", 1000 * tok / $(i - 1) } }'
  rm -rf d_stats
}
median() { sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

load_start=$(cut -d" " -f1-3 /proc/loadavg)
runs=(rel:none rel:statistics o2:none o2:statistics plain:none plain:statistics)
for k in "${runs[@]}"; do : > "ms_${k/:/_}.txt"; done
for r in $(seq "$rounds"); do
  for k in "${runs[@]}"; do run_ms "${k%%:*}" "${k#*:}" >> "ms_${k/:/_}.txt"; done
done
load_end=$(cut -d" " -f1-3 /proc/loadavg)
declare -A med
for k in "${runs[@]}"; do med[$k]=$(median < "ms_${k/:/_}.txt"); done

# Bit-identical: the same run's losses, every tensor's crc32 (tensor mode,
# one step) and the checkpoint it saves (every dataset's bytes and every
# attribute; the file's own bytes carry HDF5's timestamps) from each build.
same="yes"
for b in rel o2 plain; do
  printf '{"task": "tensor", "dump_path": "%s/d_exact_%s", "level": "mix", "step": [1]}\n' "$work" "$b" > "exact_$b.json"
  OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads "${bins[$b]}" train "${model[@]}" --steps 2 \
    --threads "$threads" --dump-config "exact_$b.json" --save "ckpt_$b.h5" 2>/dev/null |
    grep '^step ' | awk '{print $2, $4}' > "loss_$b.txt"
done
for b in o2 plain; do
  cmp -s loss_rel.txt "loss_$b.txt" || same="no (losses differ: $b)"
  "$py" - "d_exact_rel" "d_exact_$b" ckpt_rel.h5 "ckpt_$b.h5" <<'PY' || same="no (tensors or checkpoint differ: $b)"
import glob, sys, zlib
import h5py
def crcs(d):
    (p,) = glob.glob(d + "/step1/rank0/dump.h5")
    with h5py.File(p, "r") as f:
        return {r["name"]: int(r["crc32"]) for r in f["entries"][:]}
def content(p):
    out = {}
    with h5py.File(p, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                out[name] = zlib.crc32(obj[()].tobytes())
            for k, v in obj.attrs.items():
                out[name + "@" + k] = repr(v)
        f.visititems(visit)
        for k, v in f.attrs.items():
            out["@" + k] = repr(v)
    return out
a, b = crcs(sys.argv[1]), crcs(sys.argv[2])
assert a and a == b, len(set(a.items()) ^ set(b.items()))
a, b = content(sys.argv[3]), content(sys.argv[4])
assert a and a == b, sorted(k for k in a if a[k] != b.get(k))[:5]
PY
done
ntensors=$("$py" -c 'import glob, h5py, sys; print(len(h5py.File(glob.glob(sys.argv[1] + "/step1/rank0/dump.h5")[0], "r")["entries"]))' d_exact_rel)

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "x%.2f", a / b; else print "-" }'; }
le() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { print (b > 0 && a / b <= t) ? "yes" : "no" }'; }

echo "## Built the way distributions build: -O2 (bench_o2.sh)"
echo
echo "\`scripts/bench/bench_o2.sh$quick\`: \`nprobe train ${model[*]} --threads $threads\`" \
     "built three ways: Release (-O3), RelWithDebInfo (-O2 -g, the libraries holding the hot" \
     "kernels at -O3 by their own target flags, the default) and RelWithDebInfo" \
     "with \`-DNP_HOT_O3=OFF\` (everything at -O2, as before). $steps measured steps (after" \
     "$warm warm-up) x $rounds rounds, the builds and variants interleaved in every round;" \
     "median step time. Load average (1/5/15 min) $load_start at the start," \
     "$load_end at the end of the timed rounds."
echo
echo "| work | nprobe | baseline | ratio | target | met? |"
echo "|---|---|---|---|---|---|"
echo "| step time, statistics L1 over no probe, RelWithDebInfo | ${med[o2:statistics]} ms | ${med[o2:none]} ms | $(ratio "${med[o2:statistics]}" "${med[o2:none]}") | <= x1.15 | $(le "${med[o2:statistics]}" "${med[o2:none]}" 1.15) |"
echo "| step time, no probe, RelWithDebInfo over Release | ${med[o2:none]} ms | ${med[rel:none]} ms | $(ratio "${med[o2:none]}" "${med[rel:none]}") | <= x1.05 | $(le "${med[o2:none]}" "${med[rel:none]}" 1.05) |"
echo "| step time, statistics L1, RelWithDebInfo over Release | ${med[o2:statistics]} ms | ${med[rel:statistics]} ms | $(ratio "${med[o2:statistics]}" "${med[rel:statistics]}") | <= x1.05 | $(le "${med[o2:statistics]}" "${med[rel:statistics]}" 1.05) |"
echo "| step time, statistics L1 over no probe, Release | ${med[rel:statistics]} ms | ${med[rel:none]} ms | $(ratio "${med[rel:statistics]}" "${med[rel:none]}") | - | - |"
echo "| step time, statistics L1 over no probe, RelWithDebInfo, NP_HOT_O3=OFF | ${med[plain:statistics]} ms | ${med[plain:none]} ms | $(ratio "${med[plain:statistics]}" "${med[plain:none]}") | - | - |"
echo "| step time, no probe, RelWithDebInfo NP_HOT_O3=OFF over Release | ${med[plain:none]} ms | ${med[rel:none]} ms | $(ratio "${med[plain:none]}" "${med[rel:none]}") | - | - |"
echo "| results bit-identical across the three builds (losses of 2 steps, crc32 of $ntensors tensors, the checkpoint's datasets and attributes) | $same | - | - | yes | $([ "$same" = yes ] && echo yes || echo no) |"
echo
echo "The rows marked \"-\" are for information: what -O2 alone gave before the hot"
echo "libraries got their own -O3 (cmake/NprobeWarnings.cmake, \`NP_HOT_O3\`)."
