#!/usr/bin/env bash
# test_probe_cli.sh - `nprobe dump -c ... -- nprobe train ...` end to end on
# the GPT, then `nprobe ls` (entries, --calls, --tree) and `nprobe show` on
# the result, on a partial step and on an unreadable partial file.
set -u
nprobe=$NPROBE_BIN
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
fail=0
check() { if ! grep -qF -- "$2" "$1"; then echo "FAIL: $1 lacks: $2"; fail=1; fi; }
train=(train --model gpt --layers 1 --width 32 --context 16 --batch 2 --steps 3 --threads 2)

cat > stats.json <<JSON
{"task": "statistics", "dump_path": "d_stats", "level": "mix", "step": ["0-1"]}
JSON
"$nprobe" dump -c stats.json -- "$nprobe" "${train[@]}" >out.txt 2>err.txt
rc=$?
[ $rc -eq 0 ] || { echo "FAIL: dump exit $rc"; cat err.txt; fail=1; }
check out.txt "nprobe dump summary"
check out.txt "steps      2"
check out.txt "ranks      1"
check out.txt "files      2"
check out.txt "incomplete 0"
test -f d_stats/step0/rank0/dump.h5 && test -f d_stats/step1/rank0/dump.h5 && test ! -e d_stats/step2 \
  || { echo "FAIL: step files"; fail=1; }

# a scope that never opens / never closes: the summary warns (stderr)
cat > scope_none.json <<JSON
{"task": "statistics", "dump_path": "d_scope_none", "level": "L1", "step": [0],
 "statistics": {"scope": ["Functional.linear.77.forward", "Functional.linear.99.forward"]}}
JSON
"$nprobe" dump -c scope_none.json -- "$nprobe" "${train[@]}" >out.txt 2>err.txt
[ $? -eq 0 ] || { echo "FAIL: dump scope_none exit"; cat err.txt; fail=1; }
check out.txt "scope      [Functional.linear.77.forward, Functional.linear.99.forward]: closed in 0 of 1 step file(s)"
check err.txt 'nprobe: dump: warning: scope: the first call "Functional.linear.77.forward" never arrived in step 0 rank 0'
cat > scope_open.json <<JSON
{"task": "statistics", "dump_path": "d_scope_open", "level": "L1", "step": [0],
 "statistics": {"scope": ["Functional.linear.0.forward", "Functional.linear.99.forward"]}}
JSON
"$nprobe" dump -c scope_open.json -- "$nprobe" "${train[@]}" >out.txt 2>err.txt
check err.txt 'warning: scope: the last call "Functional.linear.99.forward" never arrived after "Functional.linear.0.forward" in step 0 rank 0'
# under `nprobe dump` the warning comes once (from the parent), ...
n=$(grep -c "warning: scope" err.txt)
[ "$n" = 1 ] || { echo "FAIL: $n scope warnings under nprobe dump, expected 1"; fail=1; }
# ... and `nprobe train --dump-config` alone warns too (the probe counts)
"$nprobe" "${train[@]}" --dump-config scope_none.json >out.txt 2>err.txt
check err.txt 'nprobe: dump: warning: scope: the first call "Functional.linear.77.forward" never arrived in 1 of 1 step file(s) (the first: step 0)'
"$nprobe" "${train[@]}" --dump-config scope_open.json >out.txt 2>err.txt
check err.txt 'nprobe: dump: warning: scope: the last call "Functional.linear.99.forward" never arrived after "Functional.linear.0.forward" in 1 of 1 step file(s) (the first: step 0)'
cat > scope_ok.json <<JSON
{"task": "statistics", "dump_path": "d_scope_ok", "level": "L1", "step": [0],
 "statistics": {"scope": ["Functional.linear.0.forward", "Functional.linear.1.forward"]}}
JSON
"$nprobe" dump -c scope_ok.json -- "$nprobe" "${train[@]}" >out.txt 2>err.txt
check out.txt "closed in 1 of 1 step file(s)"
if grep -q warning err.txt; then echo "FAIL: a closed scope warned"; fail=1; fi

# the program's exit code is passed through
"$nprobe" dump -c stats.json -- sh -c 'exit 3' >/dev/null 2>&1
[ $? -eq 3 ] || { echo "FAIL: exit code not passed through"; fail=1; }

# a bad config: exit 2, the program does not run, nothing written
echo '{"task": "tensr", "dump_path": "d_bad"}' > bad.json
"$nprobe" dump -c bad.json -- touch ran >out.txt 2>err.txt
[ $? -eq 2 ] || { echo "FAIL: bad config exit"; fail=1; }
check err.txt 'did you mean "tensor"?'
test ! -e ran && test ! -e d_bad || { echo "FAIL: bad config ran or wrote"; fail=1; }

"$nprobe" ls d_stats >ls.txt 2>&1 || { echo "FAIL: ls"; fail=1; }
check ls.txt "step 0 rank 0"
check ls.txt "task statistics, level mix"
check ls.txt "complete"
check ls.txt "Functional.linear.0.forward.input.0"
check ls.txt "Module.h.0.mlp.c_fc.Linear.parameters_grad.weight"
"$nprobe" ls d_stats/step0/rank0 --calls >calls.txt 2>&1 || fail=1
check calls.txt "Module.h.0.attn.c_attn.Linear.forward.0"
"$nprobe" ls d_stats/step0 --tree >tree.txt 2>&1 || fail=1
check tree.txt "Module.h.0.Block.forward.0  [module]"
check tree.txt "      Functional.linear.0.forward"

cat > tensor.json <<JSON
{"task": "tensor", "dump_path": "d_tensor", "level": "L1", "step": [0], "async_dump": true, "queue_mb": 4}
JSON
"$nprobe" "${train[@]}" --steps 1 --dump-config tensor.json >train.txt 2>&1 || { echo "FAIL: train --dump-config"; cat train.txt; fail=1; }
check train.txt "nprobe: dump: 1 step file(s)"
"$nprobe" show d_tensor Functional.linear.0.forward.input.0 -n 4 >show.txt 2>&1 || { echo "FAIL: show"; cat show.txt; fail=1; }
check show.txt "dtype     float32"
check show.txt "values    first 4 of"
"$nprobe" show d_tensor Functional.linear.0.forward.inptu.0 >show2.txt 2>&1
[ $? -eq 2 ] || { echo "FAIL: show of a missing name"; fail=1; }
check show2.txt "no tensor named"

# a partial step: readable -> listed as INCOMPLETE; unreadable -> said so
mkdir -p d_part/step0/rank0 d_part/step1/rank0
cp d_tensor/step0/rank0/dump.h5 d_part/step0/rank0/dump.h5.partial
head -c 4000 d_tensor/step0/rank0/dump.h5 > d_part/step1/rank0/dump.h5.partial
"$nprobe" ls d_part >part.txt 2>&1 || { echo "FAIL: ls on partial dump"; fail=1; }
check part.txt "INCOMPLETE: the run stopped during this step"
check part.txt "INCOMPLETE: incomplete step: the run stopped while writing this file"
"$nprobe" show d_part Functional.linear.0.forward.output.0 >part2.txt 2>&1 || fail=1
check part2.txt "INCOMPLETE step"
[ $fail -eq 0 ] && echo ok
exit $fail
