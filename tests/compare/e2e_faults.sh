#!/usr/bin/env bash
# e2e_faults.sh - the fault catalog against nprobe compare. For every fault of
# `nprobe train --list-faults`: a cpu fp32 reference and an npu-sim run with
# the fault (fp32; and bf16 for the faults docs/RUNTIME.md documents as
# standing out of bf16 noise), dumped in tensor mode at level mix for one
# step of a tiny model; the compare must name the faulted op as the first
# culprit, in the pass (forward/backward) the catalog gives. At level L0
# (modules only, fp32) it must name the module that contains the faulted op
# (the innermost dumped one), in the right pass. And npu-sim bf16 without a
# fault against the fp32 reference, at mix and at L0: no culprit, no error
# row. Then the models at their default sizes: no false alarm in bf16 and
# fp16 over seeds, levels and tasks, and the bf16-visible faults named in
# bf16 and fp16.
set -u
nprobe=${NPROBE_BIN:?NPROBE_BIN not set}
py=${NP_PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
fail=0
# faults that stand out of bf16 noise (docs/RUNTIME.md, fault catalog table)
bf16_ok=" layernorm_eps attn_mask_off_by_one linear_drop_bias attn_scale layernorm_bwd_no_mean embedding_bwd_overwrite conv2d_flip_kernel "

# SIZE=tiny: batch 2 and a 1-layer GPT; SIZE=default: the models' defaults.
# SEED and TASK (tensor|statistics) as set.
SIZE=tiny SEED=1234 TASK=tensor
train() { # model dir device precision fault [level]
  printf '{"task": "%s", "dump_path": "%s", "level": "%s", "step": [0]}\n' "$TASK" "$tmp/$2" "${6:-mix}" > "$tmp/$2.json"
  local args=(train --model "$1" --steps 1 --threads 1 --seed "$SEED" --device "$3" --precision "$4"
              --dump-config "$tmp/$2.json")
  if [ $SIZE = tiny ]; then
    args+=(--batch 2)
    [ "$1" = gpt ] && args+=(--layers 1 --width 32 --context 16)
  fi
  [ "$5" != none ] && args+=(--fault "$5")
  rm -rf "$tmp/$2"
  "$nprobe" "${args[@]}" > "$tmp/$2.log" 2>&1 || { echo "train failed: ${args[*]}"; cat "$tmp/$2.log"; return 1; }
}

first_culprit() { # reference dir -> prints "call errors exit"
  rm -rf "$tmp/out"
  "$nprobe" compare -b "$tmp/$1" -c "$tmp/$2" -o "$tmp/out" -q --format json
  local rc=$?
  "$py" - "$tmp"/out/*.json "$rc" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
fc = j["first_culprit"]
print(fc["call"] if fc else "none", j["summary"]["error"], sys.argv[2])
PY
}

# is_one_of CALL "Op.a, Op.b": the call is a call of one of the ops
is_one_of() {
  local op oplist
  IFS=',' read -ra oplist <<< "$2"
  for op in "${oplist[@]}"; do
    op=${op# }
    [ "$op" = sdpa ] && op=Functional.scaled_dot_product_attention
    case $1 in "$op".*) return 0;; esac
  done
  return 1
}

# the module class (level L0) that holds each op of the catalog
module_of() {
  case $1 in
    Functional.layer_norm) echo LayerNorm;;
    Functional.softmax|Functional.scaled_dot_product_attention|sdpa) echo CausalSelfAttention;;
    Functional.gelu) echo MLP;;
    Functional.linear) echo Linear;;
    Functional.embedding) echo Embedding;;
    Functional.conv2d) echo Conv2d;;
    *) echo "?";;
  esac
}

# ref_of model level: the cpu fp32 reference of SIZE, SEED and TASK, trained
# once and kept (several cases share one: bf16 and fp16, the faults below)
ref_of() {
  local key="ref_${SIZE}_$1_$2_${TASK}_$SEED"
  [ -d "$tmp/$key" ] || train "$1" "$key" cpu fp32 none "$2" >&2 || return 1
  echo "$key"
}

ref_gpt=$(ref_of gpt mix) || exit 1
ref_cnn=$(ref_of cnn mix) || exit 1
ref_L0_gpt=$(ref_of gpt L0) || exit 1
ref_L0_cnn=$(ref_of cnn L0) || exit 1

# the catalog: "  name   Op.a, Op.b (pass)"
# (the op-level catalog only: the collective faults are tests/dist's)
"$nprobe" train --list-faults | sed '/^collective faults/q' | grep -E '^  [a-z0-9_]+ +[A-Z]' > catalog.txt
[ -s catalog.txt ] || { echo "cannot read the fault catalog"; exit 1; }
while read -r name rest; do
  ops=${rest%% (*}
  pass=${rest##*(}; pass=${pass%)*}
  model=gpt; case $ops in *conv2d*) model=cnn;; esac
  for prec in fp32 bf16; do
    [ $prec = bf16 ] && [[ $bf16_ok != *" $name "* ]] && continue
    train $model npu npu-sim $prec "$name" || { fail=1; continue; }
    ref=ref_$model
    read -r call errors rc < <(first_culprit "${!ref}" npu)
    ok=0
    is_one_of "$call" "$ops" && ok=1
    case $pass in
      forward) [[ $call == *.forward ]] || ok=0;;
      backward*) [[ $call == *.backward ]] || ok=0;;
    esac
    [ "$rc" = 1 ] || ok=0
    if [ $ok = 1 ]; then
      echo "ok   $name $prec: first culprit $call ($errors error rows)"
    else
      echo "FAIL $name $prec: expected $ops ($pass), got first culprit '$call' (exit $rc)"; fail=1
    fi
  done
  # level L0: modules only; the culprit is the module holding the op.
  # Sanitized: left out (the fault kernels ran above, the L0 dump and compare
  # run sanitized in no_false_alarm's L0 cases; the plain pass checks it).
  [ -n "${NP_SANITIZED:-}" ] && continue
  train $model npu npu-sim fp32 "$name" L0 || { fail=1; continue; }
  ref=ref_L0_$model
  read -r call errors rc < <(first_culprit "${!ref}" npu)
  ok=0
  IFS=',' read -ra oplist <<< "$ops"
  for op in "${oplist[@]}"; do
    cls=$(module_of "${op# }")
    # Module.<path>.<Class>.forward.N, .backward.N, or Module.<path>.<Class>
    # (its parameter gradients: the backward pass)
    case $call in Module.*."$cls".forward.*|Module.*."$cls".backward.*|Module.*."$cls") ok=1;; esac
  done
  case $pass in
    forward) [[ $call == *.forward.* ]] || ok=0;;
    backward*) [[ $call != *.forward.* ]] || ok=0;;
  esac
  [ "$rc" = 1 ] || ok=0
  if [ $ok = 1 ]; then
    echo "ok   $name fp32 L0: first culprit $call ($errors error rows)"
  else
    echo "FAIL $name fp32 L0: expected the module holding $ops ($pass), got first culprit '$call' (exit $rc)"; fail=1
  fi
done < catalog.txt

no_false_alarm() { # model level [precision]
  local prec=${3:-bf16} ref
  ref=$(ref_of "$1" "$2") || { fail=1; return; }
  train "$1" npu npu-sim "$prec" none "$2" || { fail=1; return; }
  read -r call errors rc < <(first_culprit "$ref" npu)
  local what="$1 $2 $TASK seed $SEED ($SIZE size)"
  if [ "$call" = none ] && [ "$errors" = 0 ] && [ "$rc" = 0 ]; then
    echo "ok   $what npu-sim $prec without a fault: no culprit, no error row"
  else
    echo "FAIL $what npu-sim $prec without a fault: culprit '$call', $errors error rows, exit $rc"; fail=1
  fi
}

for model in gpt cnn mlp; do
  for level in mix L0; do no_false_alarm $model $level; done
done

# The models at their default sizes (cnn batch 32, mlp 64, gpt 2x64, batch
# 8), where the backward of relu and max_pool2d in bf16 routes some gradient
# elements differently from fp32 (docs/COMPARE.md, gradients behind a
# non-smooth op): no false alarm over seeds, levels and tasks ...
# Under the sanitizers (NP_SANITIZED=1) seed 1 only: the other seeds run the
# same C paths on other numbers, which the plain pass checks.
SIZE=default
seeds="1 2 3"; [ -n "${NP_SANITIZED:-}" ] && seeds=1
for model in gpt cnn mlp; do
  for SEED in $seeds; do no_false_alarm $model mix; done
  SEED=1234
  no_false_alarm $model L0
  TASK=statistics no_false_alarm $model mix
  # fp16 with its dynamic loss scaler (gradients dumped times 65536, the
  # root attribute loss_scale says so and compare divides them)
  no_false_alarm $model mix fp16
  TASK=statistics no_false_alarm $model mix fp16
done
# ... and the faults that stand out of bf16 noise still named first, in
# bf16 and in fp16 (whose gradients carry the loss scale). Sanitized: left
# out (the same fault kernels ran at the tiny size in bf16, the default
# sizes' bf16 and fp16 paths in no_false_alarm; the plain pass checks it).
[ -n "${NP_SANITIZED:-}" ] && exit $fail
ref_gpt=$(ref_of gpt mix) || exit 1
ref_cnn=$(ref_of cnn mix) || exit 1
while read -r name rest; do
  [[ $bf16_ok != *" $name "* ]] && continue
  ops=${rest%% (*}
  model=gpt; case $ops in *conv2d*) model=cnn;; esac
  ref=ref_gpt; [ $model = cnn ] && ref=ref_cnn
  for prec in bf16 fp16; do
    train $model npu npu-sim $prec "$name" || { fail=1; continue; }
    read -r call errors rc < <(first_culprit "${!ref}" npu)
    ok=0
    is_one_of "$call" "$ops" && ok=1
    if [ $ok = 1 ] && [ "$rc" = 1 ]; then
      echo "ok   $name $prec (default size): first culprit $call ($errors error rows)"
    else
      echo "FAIL $name $prec (default size): expected $ops, got first culprit '$call' (exit $rc)"; fail=1
    fi
  done
done < catalog.txt
exit $fail
