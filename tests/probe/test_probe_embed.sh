#!/usr/bin/env bash
# test_probe_embed.sh - runs samples/embed (a training loop of its own using
# only the probe API) under `nprobe dump`, then reads its dump back: the
# expected files and leaves exist, and the dumped weights follow the update
# rule w <- w - 0.3 * grad written by hand here (checked on the values read
# back with `nprobe show`).
set -u
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
fail=0
echo '{"task": "tensor", "dump_path": "d", "level": "mix", "step": ["0-2"]}' > cfg.json
"$NPROBE_BIN" dump -c cfg.json -- "$bin" 5 >out.txt 2>&1 || { echo "FAIL: run"; cat out.txt; exit 1; }
grep -qF "steps      3" out.txt || { echo "FAIL: summary"; cat out.txt; fail=1; }
for s in 0 1 2; do test -f d/step$s/rank0/dump.h5 || { echo "FAIL: step $s"; fail=1; }; done
test ! -e d/step3 || { echo "FAIL: step 3 dumped"; fail=1; }
"$NPROBE_BIN" ls d/step1 >ls.txt || fail=1
for leaf in Functional.linear.0.forward.input.0 Functional.mse_loss.0.forward.kwargs.reduction_mean \
            Functional.linear.0.backward.output.1 Module.model.Linear.parameters_grad.weight; do
  grep -qF "$leaf" ls.txt || { echo "FAIL: ls lacks $leaf"; fail=1; }
done
val() { "$NPROBE_BIN" show d/step$1 "$2" -n 4 | awk '/values/{getline; print $'"$3"'}'; }
for j in 1 2 3 4; do
  w0=$(val 0 Functional.linear.0.forward.input.1 $j)
  g0=$(val 0 Module.model.Linear.parameters_grad.weight $j)
  w1=$(val 1 Functional.linear.0.forward.input.1 $j)
  awk -v a="$w0" -v g="$g0" -v b="$w1" 'BEGIN { d = a - 0.3 * g - b; if (d < 0) d = -d; exit !(d < 1e-6 && b != "") }' \
    || { echo "FAIL: w[$j]: $w0 - 0.3*$g0 != $w1"; fail=1; }
done
[ $fail -eq 0 ] && echo ok
exit $fail
