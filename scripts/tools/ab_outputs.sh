#!/usr/bin/env bash
# ab_outputs.sh BASE_BIN NEW_BIN [SEEDS] - a refactor's check (issue 24's
# acceptance): two nprobe builds, the one before a change and the one after,
# must write byte-identical outputs on small versions of the existing
# sweeps, and a training step must execute the same instructions.
#
#   scripts/tools/ab_outputs.sh /tmp/base/nprobe build/release/nprobe
#
# Each build runs the same commands in the same folder (moved aside after,
# so the paths inside the outputs are equal):
#   faults     every npu-sim fault of `train --list-faults` (gpt, the conv
#              fault on the cnn), tensor task at L1, bf16, compared with a
#              cpu fp32 reference (and fp16 at mix for gelu_tanh, linear_drop_bias)
#   clean      mlp, cnn, gpt without a fault, npu-sim bf16 and fp16 against
#              cpu fp32, tensor and statistics at mix; a gpt pair from one
#              trained checkpoint (train --save at step 3; fp32 and bf16
#              --load it and dump step 3)
#   variants   one pair with md5, L0, --fuzzy, --no-replay, --replay-all;
#              nprobe replay of a faulted dump
#   msprobe    msprobe-format fixtures (tests/msprobe/gen_msprobe.py: tensor
#              and statistics, layouts 26 and proc) compared with each other
# Compared byte for byte: every dump (.h5), every csv/json report, the xlsx
# workbooks' members and the HTML pages, the stdout and stderr of every
# command; a checkpoint by its h5dump (its HDF5 objects carry modification
# times). What differs between any two runs of one build is masked first:
# the time stamp (file names, the page's date, the workbook's creation
# time), train's throughput (tok/s, samples/s), replay's seconds.
# Then (unless AB_CALLGRIND=0) the instructions of one training step, GPT
# 2 x 64, one thread: a 3-step minus a 1-step run under callgrind, each
# build (deterministic: independent of the machine's load).
# Prints the files compared and every difference; exit 1 on a difference
# other than call sites' line numbers (a change that moves lines of the
# runtime's model code moves the "model.c:206" the dumps record: those files
# are counted apart).
set -u
A=${1:?usage: ab_outputs.sh BASE_BIN NEW_BIN [SEEDS]}
B=${2:?usage: ab_outputs.sh BASE_BIN NEW_BIN [SEEDS]}
SEEDS=${3:-3}
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
A=$(abs "$A") B=$(abs "$B")
for b in "$A" "$B"; do [ -x "$b" ] || { echo "ab_outputs: $b is not executable" >&2; exit 2; }; done
SRC=$(cd "$(dirname "$0")/../.." && pwd)
PY=${NP_PYTHON:-$SRC/.venv/bin/python}
W=$(mktemp -d "${TMPDIR:-/tmp}/np_ab.XXXXXX")
[ -n "${AB_KEEP:-}" ] || trap 'rm -rf "$W"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

run() { # name cmd... : stdout and stderr kept as name.out / name.err
  local name=$1; shift
  "$@" > "$name.out" 2> "$name.err"
  echo "$?" > "$name.rc"
}

dump() { # N dir task level model device precision fault seed [train args...]
  local N=$1 d=$2 task=$3 level=$4 model=$5 dev=$6 prec=$7 fault=$8 seed=$9
  shift 9
  printf '{"task":"%s","dump_path":"%s","level":"%s","step":%s}\n' "$task" "$PWD/$d" "$level" \
    "${STEPS_JSON:-[0]}" > "$d.json"
  local args=(train --model "$model" --seed "$seed" --threads 1 --device "$dev" --precision "$prec")
  [ "$model" = gpt ] && args+=(--layers 1 --heads 2 --width 32 --context 16 --batch 4)
  [ "$fault" != none ] && args+=(--fault "$fault")
  run "$d" "$N" dump -c "$d.json" -- "$N" "${args[@]}" --steps "${TRAIN_STEPS:-1}" "$@"
}

cmpare() { # N name bench cmp [compare args...]
  local N=$1 name=$2 b=$3 c=$4
  shift 4
  run "$name" "$N" compare -b "$b" -c "$c" -o "rep_$name" --format xlsx,csv,json,html "$@"
}

all_runs() { # N
  local N=$1 seed m
  "$N" train --list-faults | sed '/^collective faults/q' | grep -E '^  [a-z0-9_]+ +[A-Z]' |
    awk '$1 != "none" { print $1 }' > faults.txt
  for seed in $SEEDS; do
    # faults
    for m in gpt cnn; do dump "$N" ref_${m}_$seed tensor L1 $m cpu fp32 none "$seed"; done
    dump "$N" ref_gpt_mix_$seed tensor mix gpt cpu fp32 none "$seed"
    while read -r f; do
      m=gpt; [ "$f" = conv2d_flip_kernel ] && m=cnn
      dump "$N" f_${f}_$seed tensor L1 $m npu-sim bf16 "$f" "$seed"
      cmpare "$N" f_${f}_$seed ref_${m}_$seed f_${f}_$seed
    done < faults.txt
    for f in gelu_tanh linear_drop_bias; do
      dump "$N" f16_${f}_$seed tensor mix gpt npu-sim fp16 "$f" "$seed"
      cmpare "$N" f16_${f}_$seed ref_gpt_mix_$seed f16_${f}_$seed
    done
    # clean pairs
    for m in mlp cnn gpt; do
      for task in tensor statistics; do
        dump "$N" cref_${m}_${task}_$seed "$task" mix $m cpu fp32 none "$seed"
        for p in bf16 fp16; do
          dump "$N" c_${m}_${task}_${p}_$seed "$task" mix $m npu-sim $p none "$seed"
          cmpare "$N" c_${m}_${task}_${p}_$seed cref_${m}_${task}_$seed c_${m}_${task}_${p}_$seed
        done
      done
    done
    run ckpt_$seed "$N" train --model gpt --layers 1 --heads 2 --width 32 --context 16 --batch 4 \
      --seed "$seed" --threads 1 --steps 6 --stop-after 3 --save "$PWD/ckpt_$seed.h5"
    STEPS_JSON='[3]' TRAIN_STEPS=6 dump "$N" tref_$seed statistics mix gpt cpu fp32 none "$seed" \
      --stop-after 4 --load "$PWD/ckpt_$seed.h5"
    STEPS_JSON='[3]' TRAIN_STEPS=6 dump "$N" tc_$seed statistics mix gpt cpu bf16 none "$seed" \
      --stop-after 4 --load "$PWD/ckpt_$seed.h5" --load-other-precision
    cmpare "$N" trained_$seed tref_$seed tc_$seed
    # variants of one pair
    for task in md5 statistics; do
      dump "$N" v_ref_${task}_$seed $task L0 gpt cpu fp32 none "$seed"
      dump "$N" v_${task}_$seed $task L0 gpt npu-sim bf16 layernorm_eps "$seed"
      cmpare "$N" v_${task}_$seed v_ref_${task}_$seed v_${task}_$seed
    done
    cmpare "$N" fuzzy_$seed ref_gpt_$seed f_gelu_tanh_$seed --fuzzy
    cmpare "$N" noreplay_$seed ref_gpt_$seed f_gelu_tanh_$seed --no-replay
    cmpare "$N" replayall_$seed ref_gpt_$seed f_attn_scale_$seed --replay-all
    run replay_$seed "$N" replay f_gelu_tanh_$seed -o "replay_$seed" --format csv,json
  done
  # msprobe fixtures (made once, outside: the same bytes for both builds)
  for x in t26 t26f s26 s26f tproc tprocf; do
    cp -r "$W/msp/$x" .
  done
  cmpare "$N" msp_tensor t26 t26f
  cmpare "$N" msp_stats s26 s26f
  cmpare "$N" msp_proc tproc tprocf
}

mask() { # the run's stamps and throughputs out of its outputs, in place
  local f d
  find . -name '*.xlsx' | while read -r f; do
    d=${f%.xlsx}.xlsx.d; mkdir -p "$d"; (cd "$d" && unzip -q -o "../$(basename "$f")") && rm "$f"
  done
  # a checkpoint's HDF5 objects carry their modification times: its content is compared
  find . -name 'ckpt_*.h5' | while read -r f; do h5dump "$f" > "$f.dump" && rm "$f"; done
  find . -type f \( -name '*.out' -o -name '*.err' -o -name '*.html' -o -name '*.xml' -o -name '*.rels' \
    -o -name '*.json' \) | while read -r f; do
      # (a stamp is 14 digits on their own: not the digits of a number like 0.06565854399999999)
      sed -i -E 's/"seconds": [0-9.e+-]+/"seconds": T/g; s/(^|[^0-9.])(_?)[0-9]{14}([^0-9]|$)/\1\2STAMP\3/g;
        s/[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}:[0-9]{2}Z?/DATE/g;
        s/[0-9.]+ (tok|samples)\/s/N \1\/s/g; s/\([0-9.]+ s\)/(T s)/g' "$f"
    done
  find . -depth -regextype posix-extended -regex '.*_[0-9]{14}[^/]*' | while read -r f; do
    mv "$f" "$(dirname "$f")/$(basename "$f" | sed -E 's/_[0-9]{14}/_STAMP/')"
  done
}

# the msprobe fixtures
if "$PY" -c 'import torch' 2>/dev/null; then
  g="$SRC/tests/msprobe/gen_msprobe.py"
  mkdir -p "$W/msp"
  "$PY" "$g" dump "$W/msp/t26" --task tensor --layout 26 --calls 6 --seed 1 &&
  "$PY" "$g" dump "$W/msp/t26f" --task tensor --layout 26 --calls 6 --seed 1 --fault 1.5 &&
  "$PY" "$g" dump "$W/msp/s26" --task statistics --layout 26 --calls 6 --seed 1 &&
  "$PY" "$g" dump "$W/msp/s26f" --task statistics --layout 26 --calls 6 --seed 1 --fault 1.5 &&
  "$PY" "$g" dump "$W/msp/tproc" --task tensor --layout proc --calls 6 --seed 2 &&
  "$PY" "$g" dump "$W/msp/tprocf" --task tensor --layout proc --calls 6 --seed 2 --fault 1.5 ||
    { echo "ab_outputs: gen_msprobe.py failed" >&2; exit 2; }
else
  echo "ab_outputs: no torch in $PY: the msprobe fixtures are left out" >&2
  for x in t26 t26f s26 s26f tproc tprocf; do mkdir -p "$W/msp/$x"; done
fi

for side in base new; do
  bin=$A; [ $side = new ] && bin=$B
  mkdir "$W/run"
  (cd "$W/run" && all_runs "$bin" && mask)
  mv "$W/run" "$W/$side"
done

cd "$W"
n=$(cd base && find . -type f | wc -l)
echo "files compared: $n (base $(du -sh base | cut -f1), faults $(wc -l < base/faults.txt), seeds $SEEDS)"
# Files that differ are compared again with the call sites' line numbers
# masked ("model.c:206" -> "model.c:L"; dumps through h5dump): a change that
# moves lines of the runtime's model code moves the call sites the dumps
# record, and nothing else need differ.
sitemask() { sed -E 's/([A-Za-z0-9_]\.(c|h|py)):[0-9]+/\1:L/g'; }
diff -rq base new > diff.txt
ndiff=0 nsite=0
while read -r line; do
  case $line in
    Files\ *)
      f=${line#Files base/}; f=${f%% and new/*}
      if [[ $f == *.h5 ]]; then
        h5dump "base/$f" | tail -n +2 | sitemask > a.txt; h5dump "new/$f" | tail -n +2 | sitemask > b.txt
      else
        sitemask < "base/$f" > a.txt; sitemask < "new/$f" > b.txt
      fi
      if cmp -s a.txt b.txt; then nsite=$((nsite + 1)); echo "call-site lines only: $f" >> sites.txt
      else ndiff=$((ndiff + 1)); echo "DIFFERENT: $f"; fi ;;
    *) ndiff=$((ndiff + 1)); echo "DIFFERENT: $line" | sed 's#'"$W"'/##g' ;;
  esac
done < diff.txt
echo "outputs: $((n - ndiff - nsite)) byte-identical, $nsite differ only in the line numbers of call sites, $ndiff different"
[ "$nsite" -gt 0 ] && head -5 sites.txt
same=$([ "$ndiff" = 0 ] && echo 1 || echo 0)

if [ "${AB_CALLGRIND:-1}" = 1 ]; then
  if command -v valgrind > /dev/null; then
    ir() { # bin steps -> total Ir of a GPT 2 x 64 run
      valgrind --tool=callgrind --callgrind-out-file="$W/cg.out" "$1" train --model gpt --layers 2 \
        --heads 2 --width 64 --context 32 --batch 4 --threads 1 --seed 3 --steps "$2" \
        > /dev/null 2> "$W/cg.log" || { cat "$W/cg.log" >&2; echo 0; return; }
      sed -n 's/^summary: *//p' "$W/cg.out" | head -n1
    }
    a=$(( $(ir "$A" 3) - $(ir "$A" 1) )); b=$(( $(ir "$B" 3) - $(ir "$B" 1) ))
    awk -v a="$a" -v b="$b" 'BEGIN { printf "instructions per training step (GPT 2x64, callgrind): base %d, new %d, new/base %.5f\n", a / 2, b / 2, b / a }'
  else
    echo "valgrind is not installed: no instruction counts"
  fi
fi
[ "$same" = 1 ]
