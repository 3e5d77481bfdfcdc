#!/usr/bin/env bash
# test_promote.sh - per-op precision overrides and `nprobe promote` on the
# runtime GPT (one step, tensor task, bf16 on npu-sim against the cpu fp32
# reference):
#  - the overrides of the env (an API name), the config key (an API call, a
#    module path) mark exactly those calls (kwargs fp32_override) and the
#    run still compares clean;
#  - each promotion fault is found exactly (ln_stats_bf16 ->
#    Functional.layer_norm, loss_bf16 -> Functional.cross_entropy,
#    softmax_bf16_acc -> the attention, at context 128, plain pass only)
#    within ceil(log2 N) + 2 reruns, and the promoted run compares clean;
#  - MoE (--moe 4): a clean bf16 run compares clean, moe_router_bf16 ->
#    h.0.mlp.router (--granularity module, plain pass only);
#  - MxFP8 with a quantized backward (--lowp-backward) compares clean, and
#    lowp_bwd_underflow (its gradients flushed) -> Functional.linear;
#  - the loss trajectory (--bench-log, 12 steps, step 0 dumped): the noise
#    sigma promote prints equals awk's second-difference RMS of the
#    reference's losses; an outlier batch at step 3 (step 0's tensors
#    clean) fails on the loss and no promotion helps (exit 1), where
#    compare alone says 'promote: '; loss_bf16 over 6 steps is still found;
#  - a clean bf16 run gives the empty set; bad input exits 2.
set -u
N=${NPROBE_BIN:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
fail=0
gpt=(--model gpt --steps 1 --seed 3 --threads 1)
cfg() { printf '{"task":"tensor","dump_path":"%s","step":[0],"level":"L1"%s}' "$1" "${2:-}" > "$1.json"; }

cfg ref
"$N" dump -c ref.json -- "$N" train "${gpt[@]}" > ref.log 2>&1 || { echo "FAIL: reference dump"; cat ref.log; exit 1; }

# overrides: env API name + config API call + config module path
cfg ov ',"fp32_ops":["Functional.linear.3","h.1.ln_1","h.0.mlp.c_fc"]'
NPROBE_FP32_OPS=Functional.scaled_dot_product_attention \
  "$N" dump -c ov.json -- "$N" train "${gpt[@]}" --precision bf16 --device npu-sim > ov.log 2>&1 \
  || { echo "FAIL: override dump"; cat ov.log; fail=1; }
"$N" ls ov/step0/rank0/dump.h5 | grep -o '^ *[A-Za-z_.0-9]*forward.kwargs.fp32_override' | sed 's/^ *//' | sort > marked.txt
printf '%s\n' Functional.layer_norm.2.forward.kwargs.fp32_override Functional.linear.3.forward.kwargs.fp32_override \
  Functional.linear.2.forward.kwargs.fp32_override \
  Functional.scaled_dot_product_attention.0.forward.kwargs.fp32_override \
  Functional.scaled_dot_product_attention.1.forward.kwargs.fp32_override | sort > want.txt
diff want.txt marked.txt > /dev/null || { echo "FAIL: the marked calls differ"; diff want.txt marked.txt; fail=1; }
"$N" compare -b ref -c ov -o cov > cov.txt 2>&1 || { echo "FAIL: the override run does not compare clean"; cat cov.txt; fail=1; }
# a call promoted by name casts its output back to bf16; one inside a
# promoted module (h.0.mlp.c_fc's linear) keeps it float32, as the package
dt2=$("$N" ls ov/step0/rank0/dump.h5 | awk '$1 == "Functional.linear.2.forward.output.0" {print $2}')
dt3=$("$N" ls ov/step0/rank0/dump.h5 | awk '$1 == "Functional.linear.3.forward.output.0" {print $2}')
[ "$dt2" = float32 ] && [ "$dt3" = bfloat16 ] || { echo "FAIL: output dtypes linear.2 '$dt2' (module: float32), linear.3 '$dt3' (call: bfloat16)"; fail=1; }
echo "ok: overrides mark $(wc -l < marked.txt) calls, compare clean"

cfg run
promote() { # promote NAME WANT BENCH -- train args... (PROMOTE_OPTS: more options of promote)
  local name=$1 want=$2 bench=$3
  shift 4
  # shellcheck disable=SC2086
  "$N" promote -b "$bench" -c run.json -o "P_$name" ${PROMOTE_OPTS:-} -- "$N" train "$@" > "$name.out" 2>&1
  local code=$?
  local got
  got=$(grep '^promote: ' "$name.out" | tail -n1)
  if [ "$code" -ne 0 ] || [ "$got" != "promote: $want" ]; then
    echo "FAIL: promote $name: exit $code, '$got', want 'promote: $want'"; cat "$name.out"; fail=1; return
  fi
  local reruns bound
  reruns=$(sed -n 's/^reruns: \([0-9]*\) .*= \([0-9]*\)).*/\1/p' "$name.out")
  bound=$(sed -n 's/^reruns: \([0-9]*\) .*= \([0-9]*\)).*/\2/p' "$name.out")
  if [ -n "$want" ] && { [ -z "$reruns" ] || [ "$reruns" -gt "$bound" ]; }; then
    echo "FAIL: promote $name: $reruns reruns, bound $bound"; cat "$name.out"; fail=1; return
  fi
  echo "ok: $name -> '$got' (${reruns:-0} reruns, bound ${bound:-})"
}
promote ln_stats_bf16 Functional.layer_norm ref -- "${gpt[@]}" --precision bf16 --device npu-sim --fault ln_stats_bf16
promote clean "" ref -- "${gpt[@]}" --precision bf16 --device npu-sim
# MxFP8 with the backward GEMMs quantized (--lowp-backward): a clean run
# compares clean (the replay quantizes each linear's backward as the runtime
# did: kwargs lowp_backward on every linear), its gradient flushed by
# lowp_bwd_underflow is found as the linear (plain pass: the promote)
cfg mxb
"$N" dump -c mxb.json -- "$N" train "${gpt[@]}" --precision mxfp8 --device npu-sim --lowp-backward > mxb.log 2>&1 \
  || { echo "FAIL: mxfp8 --lowp-backward dump"; cat mxb.log; fail=1; }
nq=$("$N" ls mxb/step0/rank0/dump.h5 | grep -c 'Functional\.linear\.[0-9]*\.forward\.kwargs\.lowp_backward')
nl=$("$N" ls mxb/step0/rank0/dump.h5 | grep -c 'Functional\.linear\.[0-9]*\.forward\.output\.0 ')
[ "$nq" -gt 0 ] && [ "$nq" = "$nl" ] || { echo "FAIL: lowp_backward marks $nq of $nl linear calls"; fail=1; }
"$N" compare -b ref -c mxb -o cmxb > cmxb.txt 2>&1 || { echo "FAIL: a clean mxfp8 --lowp-backward run does not compare clean"; cat cmxb.txt; fail=1; }
echo "ok: mxfp8 --lowp-backward ($nq linear calls) compares clean"
# E5M2 gradients (--lowp-grad e5m2): every linear marked 2, the replay
# quantizes the gradient as E5M2 blocks, a clean step compares clean
cfg mxe
"$N" dump -c mxe.json -- "$N" train "${gpt[@]}" --precision mxfp8 --device npu-sim --lowp-backward --lowp-grad e5m2 \
  > mxe.log 2>&1 || { echo "FAIL: mxfp8 --lowp-grad e5m2 dump"; cat mxe.log; fail=1; }
n2=$("$N" ls mxe/step0/rank0/dump.h5 | awk '$1 ~ /^Functional\.linear\.[0-9]*\.forward\.kwargs\.lowp_backward$/ && $4 == 2' | wc -l)
[ "$n2" = "$nl" ] || { echo "FAIL: lowp_backward 2 marks $n2 of $nl linear calls"; "$N" ls mxe/step0/rank0/dump.h5 | grep lowp_backward | head -3; fail=1; }
"$N" compare -b ref -c mxe -o cmxe > cmxe.txt 2>&1 || { echo "FAIL: a clean mxfp8 --lowp-grad e5m2 run does not compare clean"; cat cmxe.txt; fail=1; }
echo "ok: mxfp8 --lowp-grad e5m2 ($n2 linear calls marked 2) compares clean"
if [ "${NP_SANITIZED:-0}" != 1 ]; then
  promote lowp_bwd_underflow Functional.linear ref -- "${gpt[@]}" --precision mxfp8 --device npu-sim --lowp-backward \
    --fault lowp_bwd_underflow
fi
# the promoted run compares clean: its last clean run is the found set's
last=$(ls -d P_ln_stats_bf16/run* | grep -v json | grep -v log | sort -V | tail -n1)
"$N" compare -b ref -c "$last" -o clast > clast.txt 2>&1 || { echo "FAIL: the promoted run $last is not clean"; fail=1; }
# the loss trajectory: 12 steps, step 0 dumped
g12=(--model gpt --steps 12 --seed 3 --threads 1)
cfg ref12
"$N" dump -c ref12.json -- "$N" train "${g12[@]}" > ref12.log 2>&1 || { echo "FAIL: ref12"; cat ref12.log; fail=1; }
want_sigma=$(awk '/^step /{l[n++]=$4} END{for(i=1;i+1<n;i++){r=l[i]-(l[i-1]+l[i+1])/2; s+=r*r}; printf "%.6g", sqrt(s/(n-2)/1.5)}' ref12.log)
"$N" promote -b ref12 -c run.json -o P_outlier --bench-log ref12.log -- "$N" train "${g12[@]}" --fault outlier_batch \
  --fault-step 3 > outlier.out 2>&1
code=$?
sigma=$(sed -n 's/^loss noise of the reference: 12 steps, sigma \([^ ]*\) .*/\1/p' outlier.out)
[ "$sigma" = "$want_sigma" ] || { echo "FAIL: loss noise sigma '$sigma', awk $want_sigma"; cat outlier.out; fail=1; }
if [ $code -ne 1 ] || ! grep -q '^run 0: .*-> fails .*loss max |dev| .* > 3 sigma .*compare clean' outlier.out; then
  echo "FAIL: an outlier batch at step 3 is not judged by the loss (exit $code)"; cat outlier.out; fail=1
fi
"$N" promote -b ref12 -c run.json -o P_outlier0 -- "$N" train "${g12[@]}" --fault outlier_batch --fault-step 3 \
  > outlier0.out 2>&1 && grep -qx 'promote: ' outlier0.out || { echo "FAIL: without --bench-log step 0 is clean"; fail=1; }
echo "ok: loss noise sigma $sigma (awk $want_sigma); outlier_batch at step 3 fails on the loss alone, exit $code"
"$N" promote -b ref12 -c run.json --bench-log ref.log -- "$N" train > bad3.out 2>&1
[ $? -eq 2 ] && grep -q 'bench-log ref.log: fewer than 3' bad3.out || { echo "FAIL: a 1-step --bench-log is taken"; cat bad3.out; fail=1; }
if [ "${NP_SANITIZED:-0}" != 1 ]; then # the sanitized pass runs the C paths above once (CI time)
  g6=(--model gpt --steps 6 --seed 3 --threads 1)
  cfg ref6
  "$N" dump -c ref6.json -- "$N" train "${g6[@]}" > ref6.log 2>&1 || { echo "FAIL: ref6"; fail=1; }
  PROMOTE_OPTS="--bench-log ref6.log" promote loss_bf16 Functional.cross_entropy ref6 -- "${g6[@]}" --precision bf16 \
    --device npu-sim --fault loss_bf16
  g128=("${gpt[@]}" --context 128 --batch 4)
  cfg ref128
  "$N" dump -c ref128.json -- "$N" train "${g128[@]}" > ref128.log 2>&1 || { echo "FAIL: ref128"; fail=1; }
  promote softmax_bf16_acc Functional.scaled_dot_product_attention ref128 -- "${g128[@]}" --precision bf16 \
    --device npu-sim --fault softmax_bf16_acc
fi
# MoE (--moe 4, two blocks, seed 3): a clean bf16 run compares clean; the
# routers under autocast (moe_router_bf16): block 0's bf16 logits move
# block 1's input, where a near-tied token goes to another expert, so the
# culprits and error rows are block 1's and promoting them all does not
# cure it (nor does block 0's router alone: both routers are faulty);
# promote --granularity module then searches the modules upstream of the
# first culprit (the ranked ones' counterparts in block 0 first) and finds
# both routers (plain pass: test_model_moe covers the C paths in the
# sanitized one)
if [ "${NP_SANITIZED:-0}" != 1 ]; then
  gm=(--model gpt --moe 4 --layers 2 --steps 1 --seed 3 --threads 1)
  cfg refm
  cfg moeb
  "$N" dump -c refm.json -- "$N" train "${gm[@]}" > refm.log 2>&1 || { echo "FAIL: moe reference dump"; cat refm.log; fail=1; }
  "$N" dump -c moeb.json -- "$N" train "${gm[@]}" --precision bf16 --device npu-sim > moeb.log 2>&1 \
    || { echo "FAIL: moe bf16 dump"; cat moeb.log; fail=1; }
  "$N" compare -b refm -c moeb -o cmoeb > cmoeb.txt 2>&1 || { echo "FAIL: a clean MoE bf16 run does not compare clean"; cat cmoeb.txt; fail=1; }
  # the float32 routers are recorded (their linears alone: call 2 of block
  # 0, call 13 of block 1 after 2 + 4 x 2 expert linears and the attention's
  # 2), so the replay does not quantize them in an MxFP8 run either
  "$N" ls moeb/step0/rank0/dump.h5 | grep -o '^ *Functional[a-z_.0-9]*forward\.kwargs\.fp32_override' | sed 's/^ *//' \
    | sort > moem.txt
  [ "$(tr '\n' ' ' < moem.txt)" = "Functional.linear.13.forward.kwargs.fp32_override Functional.linear.2.forward.kwargs.fp32_override " ] \
    || { echo "FAIL: marked: $(cat moem.txt)"; fail=1; }
  cfg moex
  "$N" dump -c moex.json -- "$N" train "${gm[@]}" --precision mxfp8 --device npu-sim > moex.log 2>&1 \
    || { echo "FAIL: moe mxfp8 dump"; cat moex.log; fail=1; }
  "$N" compare -b refm -c moex -o cmoex > cmoex.txt 2>&1 || { echo "FAIL: a clean MoE mxfp8 run does not compare clean"; cat cmoex.txt; fail=1; }
  echo "ok: MoE bf16 and mxfp8 compare clean, the router marked float32"
  PROMOTE_OPTS="--granularity module" promote moe_router_bf16 "h.0.mlp.router, h.1.mlp.router" refm -- "${gm[@]}" --precision bf16 \
    --device npu-sim --fault moe_router_bf16
  grep -q '^all [0-9]* ranked candidates promoted still fail; candidates upstream of the first culprit' \
    moe_router_bf16.out || { echo "FAIL: the MoE search did not go upstream"; cat moe_router_bf16.out; fail=1; }
fi
# bad input
"$N" promote -b ref -- "$N" train > bad.out 2>&1; [ $? -eq 2 ] || { echo "FAIL: promote without -c"; fail=1; }
printf '{"task":"tensor","dump_path":"x","fp32_ops":"Functional.linear"}' > badcfg.json
"$N" dump -c badcfg.json -- "$N" train --steps 1 > bad2.out 2>&1; [ $? -eq 2 ] && grep -q fp32_ops bad2.out \
  || { echo "FAIL: a bad fp32_ops is not refused naming it"; cat bad2.out; fail=1; }
exit $fail
