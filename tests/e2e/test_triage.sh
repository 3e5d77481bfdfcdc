#!/usr/bin/env bash
# test_triage.sh - `nprobe triage` (docs/MONITOR.md "Triage") on a one-process
# bf16 GPT (2 x 32, 13 steps), each one-time fault at a random step S past
# the rules' warmup: the monitor names S, and the rerun of S from a
# checkpoint at S gives the class the fault was built to be (known answers):
# gemm_bitflip transient (a one-time flip, gone on the rerun), outlier_batch
# and nan_input data (reproduced in fp32 at wte, the module reading the
# batch), logit_growth numerics (clean in fp32; op lm_head's linear, the
# first culprit of compare of the two reruns' dumps),
# rare_pattern code (reproduced in fp32 in h.0.attn.c_attn; op its linear).
# A checkpoint at another step, a train option triage owns and an existing
# --out are refused (exit 2). Also: a checkpoint of a bf16 run loads into an
# fp32 run only with --load-other-precision, and one config.json (a dump
# task with a "monitor" section) gives both a dump and a monitor record.
# The monitor's checkpoint on anomaly (and its ring), the ring of call
# inputs (anomaly_calls) and the op it names: see below and gemm_bitflip.
set -u
nprobe=${NPROBE_BIN:-nprobe}
# tests/ on the heredocs' import path (nptest.h5_same)
export PYTHONPATH="$(cd "$(dirname "$0")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
fail=0
s=$((11 + RANDOM % 2))
M=(--model gpt --layers 2 --width 32 --heads 2 --context 16 --precision bf16 --threads 1 --steps 20 --log-every 100)
"$nprobe" train "${M[@]}" --stop-after "$s" --save ck.h5 > ck.log 2>&1 || { cat ck.log; exit 1; }
"$nprobe" train "${M[@]}" --stop-after 3 --save ck3.h5 > ck3.log 2>&1 || { cat ck3.log; exit 1; }
check() { # fault class op-module [kept-calls]
  local f=$1 cls=$2 mod=$3 kept=${4:-0}
  printf '{"task": "monitor", "dump_path": "m_%s", "monitor": {"anomaly_calls": %d}}\n' "$f" "$kept" > "c_$f.json"
  "$nprobe" train "${M[@]}" --fault "$f" --fault-step "$s" --stop-after $((s + 1)) \
    --dump-config "c_$f.json" > "run_$f.log" 2>&1
  "$nprobe" monitor "m_$f" > "mon_$f.txt"
  if ! grep -q "^first anomaly: step $s rank 0 " "mon_$f.txt"; then
    echo "FAIL $f: the monitor does not name step $s"; cat "mon_$f.txt"; fail=1; return
  fi
  "$nprobe" triage "m_$f" --load ck.h5 --out "t_$f" -- "${M[@]}" --fault "$f" --fault-step "$s" \
    > "tri_$f.txt" 2>&1
  local rc=$?
  if [ $rc -ne 0 ] || ! grep -q "^class: $cls " "tri_$f.txt"; then
    echo "FAIL $f: expected class $cls (rc $rc)"; cat "tri_$f.txt"; fail=1; return
  fi
  if [ "$kept" -gt 0 ]; then
    # the op by replay of the calls the monitor kept at the anomaly: the
    # fault's own call, a linear of $mod whose output is not what its inputs give
    if ! grep -q "^op: Functional\.linear\.[0-9]*\.forward (in $mod; the replay of the calls the monitor kept" "tri_$f.txt"; then
      echo "FAIL $f: expected the kept calls' op in $mod"; cat "tri_$f.txt"; fail=1; return
    fi
  elif [ "$cls" = numerics ]; then
    # the op by compare of the bf16 rerun's dump against the fp32 one's: the
    # first culprit, a call of $mod in the dump's own module tree
    local op
    op=$(sed -n 's/^op: \(Functional\.linear\.[0-9]*\.forward\) (compare of the bf16 rerun against the fp32 one: the first culprit)$/\1/p' "tri_$f.txt")
    if [ -z "$op" ] || ! grep -q "first culprit: $op (in Module\.$mod\." "t_$f/compare.log"; then
      echo "FAIL $f: expected compare's first culprit in $mod"; cat "tri_$f.txt" "t_$f/compare.log"; fail=1; return
    fi
  elif [ -n "$mod" ] && ! grep -q "^op: Functional\.linear\.[0-9]*\.forward (in $mod)$" "tri_$f.txt"; then
    echo "FAIL $f: expected the op of $mod"; cat "tri_$f.txt"; fail=1; return
  fi
  if [ -z "$mod" ] && grep -q "^op:" "tri_$f.txt"; then
    echo "FAIL $f: no op expected"; cat "tri_$f.txt"; fail=1; return
  fi
  echo "ok $f: $(grep '^class:' "tri_$f.txt" | cut -d' ' -f1-2) $(grep '^op:' "tri_$f.txt")"
}
# refusals: exit 2, naming the problem
expect2() { # what pattern cmd...
  local what=$1 pat=$2
  shift 2
  "$@" > out.txt 2>&1
  local rc=$?
  if [ $rc -ne 2 ] || ! grep -q -- "$pat" out.txt; then
    echo "FAIL $what: rc $rc"; cat out.txt; fail=1
  fi
}

check gemm_bitflip transient h.0.mlp.c_fc 16  # the bit flip's GEMM named from the kept calls
if [ -z "${NP_SANITIZED:-}" ]; then # sanitized: one fault of each path of triage's code
  check outlier_batch data ""
fi
check nan_input data ""
check logit_growth numerics lm_head
check rare_pattern code h.0.attn.c_attn

# the checkpoint on anomaly (MONITOR.md "Dump on anomaly"): rare_pattern at
# step s with anomaly_checkpoint and a ring of 2; the state step s began
# from (written live, before the update) is ck.h5's bit for bit (the fault
# acts from step s on), step s-1's (from the ring's copy) a --save at s-1's;
# no other step is written. triage without --load takes the monitor's own;
# a rerun from it with a tensor dump of step s gives the run's own dump of
# step s (the step dumped without dumping every step).
"$nprobe" train "${M[@]}" --stop-after $((s - 1)) --save ckp.h5 > ckp.log 2>&1 || { cat ckp.log; fail=1; }
printf '{"task": "monitor", "dump_path": "m_ring", "monitor": {"anomaly_checkpoint": true, "anomaly_ring": 2, "anomaly_calls": 4, "anomaly_calls_after": 3}}\n' > c_ring.json
printf '{"task": "tensor", "dump_path": "d_run", "step": [%d, %d]}\n' "$s" $((s + 1)) > d_run.json
printf '{"task": "monitor", "dump_path": "m_span", "monitor": {"anomaly_calls_after": 100}}\n' > c_span.json
printf '{"task": "tensor", "dump_path": "d_rerun", "step": [%d]}\n' "$s" > d_rerun.json
"$nprobe" train "${M[@]}" --fault rare_pattern --fault-step "$s" --stop-after $((s + 2)) \
  --dump-config c_ring.json > ring.log 2>&1
"$nprobe" train "${M[@]}" --fault rare_pattern --fault-step "$s" --stop-after $((s + 2)) \
  --dump-config d_run.json > d_run.log 2>&1
"$nprobe" train "${M[@]}" --fault rare_pattern --fault-step "$s" --stop-after $((s + 2)) \
  --dump-config c_span.json > span.log 2>&1
"$nprobe" train "${M[@]}" --fault rare_pattern --fault-step "$s" --stop-after $((s + 1)) \
  --load "m_ring/anomaly_rank0.step$s.h5" --dump-config d_rerun.json > d_rerun.log 2>&1
if ! grep -q "anomaly at step $s: the state it began from in m_ring/anomaly_rank0.step$s.h5" ring.log ||
   ! grep -q "anomaly at step $s: its last 4 call(s) up to it and 3 after it in m_ring/anomaly_calls" ring.log ||
   [ "$(LC_ALL=C ls m_ring | tr '\n' ' ')" != "anomaly_calls anomaly_rank0.step$((s - 1)).h5 anomaly_rank0.step$s.h5 monitor_rank0.h5 " ] ||
   [ "$(cd m_ring/anomaly_calls && find . -type f)" != "./step$s/rank0/dump.h5" ]; then
  echo "FAIL checkpoint on anomaly: files"; cat ring.log; ls m_ring; fail=1
fi
"${NP_PYTHON:-python3}" - "$s" <<'PY' || fail=1
import sys
import h5py, numpy as np
s = int(sys.argv[1])
from nptest import h5_same as same
for ours, theirs, step in ((f"m_ring/anomaly_rank0.step{s}.h5", "ck.h5", s),
                           (f"m_ring/anomaly_rank0.step{s - 1}.h5", "ckp.h5", s - 1)):
    with h5py.File(ours) as a, h5py.File(theirs) as b:
        assert a.attrs["step"] == step and a["optim"].attrs["t"] == b["optim"].attrs["t"]
        assert same(a["params"], b["params"]) >= 20 and same(a["optim"], b["optim"]) >= 40
with h5py.File(f"d_run/step{s}/rank0/dump.h5") as a, h5py.File(f"d_rerun/step{s}/rank0/dump.h5") as b:
    n = same(a["data"], b["data"])
    y = a["data/Functional.linear.0.forward.output.0"][()].astype(np.float32)
    assert n > 200 and np.abs(y).max() > 100, (n, np.abs(y).max())   # the defect's output is in it
print(f"checkpoint on anomaly: ok (step {s}, {n} tensors of the rerun's dump equal the run's)")
# the ring of call inputs (anomaly_calls 4, anomaly_calls_after 3): the
# step's last 4 API calls up to the anomalous module's output
# (h.0.attn.c_attn's linear) and the next 3, each tensor the run's own (a
# plain tensor dump of step s, a separate run) bit for bit
with h5py.File(f"m_ring/anomaly_calls/step{s}/rank0/dump.h5") as k, \
     h5py.File(f"d_run/step{s}/rank0/dump.h5") as a:
    kc = [c.decode() for c in k["calls"]["call"]]
    api = [(c.decode(), p.decode()) for c, p, kind in
           zip(a["calls"]["call"], a["calls"]["parent"], a["calls"]["kind"]) if kind == b"api"]
    end = [i for i, (c, p) in enumerate(api) if p.startswith("Module.h.0.attn.c_attn.")][0]
    assert kc == [c for c, _ in api[end - 3:end + 4]], (kc, api[:end + 4])
    m = 0
    for leaf in k["data"]:
        assert k["data"][leaf][()].tobytes() == a["data"][leaf][()].tobytes(), leaf
        m += 1
    # every leaf of those calls in the plain dump is in the ring's (no more, no less)
    assert m >= 14 and m == sum(1 for n in a["data"] if any(n.startswith(c + ".") for c in kc)), m
print(f"kept calls: ok ({kc}, {m} tensors equal the run's)")
# no ring and 100 calls after: the rest of step s (84 calls after c_attn's
# linear) in step s's file, the next step's first 16 in step s+1's
with h5py.File(f"m_span/anomaly_calls/step{s}/rank0/dump.h5") as k0, \
     h5py.File(f"m_span/anomaly_calls/step{s + 1}/rank0/dump.h5") as k1, \
     h5py.File(f"d_run/step{s}/rank0/dump.h5") as a, \
     h5py.File(f"d_run/step{s + 1}/rank0/dump.h5") as a1:
    api1 = [c.decode() for c in a1["calls"]["call"]]
    got = ([c.decode() for c in k0["calls"]["call"]], [c.decode() for c in k1["calls"]["call"]])
    assert got == ([c for c, _ in api[end + 1:]], api1[:100 - (len(api) - end - 1)]), got
    for kf, af in ((k0, a), (k1, a1)):
        for leaf in kf["data"]:
            assert kf["data"][leaf][()].tobytes() == af["data"][leaf][()].tobytes(), leaf
print(f"calls after: ok ({len(got[0])} in step {s}, {len(got[1])} in step {s + 1})")
with open("c_attn_call.txt", "w") as f:
    f.write(api[end][0])
PY
# replay and compare of the ring's dump name the faulty calls: the defective
# GEMM (h.0.attn.c_attn's linear) and the planted input (h.0.ln_1's
# layer_norm, the fault's rewrite of its output) exceed their budgets;
# compare against a clean run's dump of step s names them as culprits
"$nprobe" replay m_ring/anomaly_calls > replay_ring.txt 2>&1
rc=$?
printf '{"task": "tensor", "dump_path": "d_clean", "step": [%d]}\n' "$s" > d_clean.json
"$nprobe" train "${M[@]}" --stop-after $((s + 1)) --dump-config d_clean.json > d_clean.log 2>&1
"$nprobe" compare -b d_clean -c m_ring/anomaly_calls -o cmp_ring > cmp_ring.txt 2>&1
if [ $rc != 1 ] || ! grep -q "^step $s rank 0 .*: 7 calls: 5 pass, 2 exceed" replay_ring.txt ||
   ! grep -q "exceeds: $(cat c_attn_call.txt) " replay_ring.txt ||
   ! grep -q "exceeds: Functional.layer_norm.0.forward " replay_ring.txt ||
   ! grep -q "first culprit: Functional.layer_norm.0.forward (in Module.h.0.ln_1." cmp_ring.txt ||
   ! grep -q "culprit: $(cat c_attn_call.txt)$" cmp_ring.txt; then
  echo "FAIL replay/compare of the ring's dump"; cat replay_ring.txt cmp_ring.txt; fail=1
fi
"$nprobe" triage m_ring --out t_ring -- "${M[@]}" --fault rare_pattern --fault-step "$s" > tri_ring.txt 2>&1
# the op of the code defect from the kept calls: the defective GEMM, h.0.attn.c_attn's call
# in the run's own dump (the planted input, h.0.ln_1's rewritten output, exceeds too, outside it)
if ! grep -q "^checkpoint: m_ring/anomaly_rank0.step$s.h5" tri_ring.txt || ! grep -q "^class: code " tri_ring.txt ||
   ! grep -q "^op: $(cat c_attn_call.txt) (in h.0.attn.c_attn; the replay of the calls the monitor kept" tri_ring.txt; then
  echo "FAIL triage from the monitor's checkpoint"; cat tri_ring.txt; fail=1
fi
expect2 "no --load and no checkpoint of the monitor's" "no --load and no" \
  "$nprobe" triage m_nan_input --out t_z -- "${M[@]}"

printf '{"task": "monitor", "dump_path": "m_big", "monitor": {"anomaly_calls": 65537}}\n' > c_big.json
expect2 "anomaly_calls too large" "monitor.anomaly_calls: at most 65536 calls" \
  "$nprobe" train "${M[@]}" --dump-config c_big.json
expect2 "checkpoint at another step" "is at step 3" \
  "$nprobe" triage m_nan_input --load ck3.h5 --out t_x -- "${M[@]}"
expect2 "an owned option" "--save is triage's own" \
  "$nprobe" triage m_nan_input --load ck.h5 --out t_y -- "${M[@]}" --save x.h5
expect2 "an existing --out" "must not exist" \
  "$nprobe" triage m_nan_input --load ck.h5 --out t_nan_input -- "${M[@]}"
# the precision check of --load, and its opt-out
F=(--model gpt --layers 2 --width 32 --heads 2 --context 16 --precision fp32 --threads 1 --steps 20)
expect2 "load at another precision" "precision 'bf16', this run has precision 'fp32'" \
  "$nprobe" train "${F[@]}" --load ck.h5 --stop-after $((s + 1))
if ! "$nprobe" train "${F[@]}" --load ck.h5 --stop-after $((s + 1)) --load-other-precision > lp.log 2>&1; then
  echo "FAIL --load-other-precision"; cat lp.log; fail=1
fi
# one file for both: the dump of step 2 and the monitor's 4 steps of h.0
printf '{"task": "statistics", "dump_path": "both", "step": [2], "monitor": {"targets": ["h.0"]}}\n' > both.json
"$nprobe" train "${F[@]}" --steps 4 --dump-config both.json > both.log 2>&1
if [ ! -f both/step2/rank0/dump.h5 ] || ! "$nprobe" monitor both > both_mon.txt ||
   ! grep -q "1 rank(s), 4 step(s)" both_mon.txt; then
  echo "FAIL one config for dump and monitor"; cat both.log both_mon.txt; fail=1
fi
printf '{"task": "statistics", "dump_path": "bad", "monitor": 3}\n' > bad.json
expect2 "a monitor section that is not an object" "monitor" "$nprobe" train "${F[@]}" --steps 2 --dump-config bad.json
exit $fail
