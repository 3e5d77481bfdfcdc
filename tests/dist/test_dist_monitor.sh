#!/usr/bin/env bash
# test_dist_monitor.sh - the monitor task (docs/MONITOR.md) on a 2-rank
# bf16 GPT: a run with the monitor trains to the same bits as one without,
# the records against independent answers (the printed loss is
# the mean of the ranks' loss records; the last step's weight and Adam m/v
# norms are those of the checkpoint's tensors in float64; both ranks record
# the same reduced gradients), a clean run raises no anomaly, each one-time
# fault at a random step and rank is named by `nprobe monitor` with that
# step, rank and module, a NaN on one rank of 4 before the all-reduce is
# that rank's, csv/json agree with the text, a bad config is refused naming
# its key, and a run killed with SIGKILL leaves a file readable up to its
# last finished step (read while the run goes on, then after the kill).
# nprobe triage of the 2-rank runs of gemm_bitflip and rare_pattern names
# the fault's step and rank and gives its class (and op: rare_pattern's from
# the calls the monitor kept on the fault's rank, anomaly_calls); the same
# under --tp 2; under --pp 2 the anomalies follow the pipeline's order, and
# triage of logit_growth (stage 1) and gemm_bitflip (stage 0) reruns both
# stages from the collective checkpoint on anomaly: numerics with lm_head's
# linear, transient with c_fc's (the calls stage 0 kept). The kept states
# (anomaly_ring) and calls, with the calls after, under --tp 2 and --pp 2
# against --save and plain dumps of the same layout and a one-process
# dump (below).
set -u
. "$(dirname "$0")/mpi_env.sh"
# tests/ on the heredocs' import path (nptest.h5_same)
export PYTHONPATH="$(cd "$(dirname "$0")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"
# plain: 14 steps, the faults past the turbulence rule's warmup (10 records);
# sanitized: 6 steps, the NaN on one rank (no warmup) on 2 ranks only
steps=14 faults="gemm_bitflip outlier_batch logit_growth rare_pattern" k_nan=4 s_nan=$((11 + RANDOM % 3))
[ -n "${NP_SANITIZED:-}" ] && steps=6 faults="" k_nan=2 s_nan=$((2 + RANDOM % 3))
model=(train --model gpt --layers 2 --width 32 --heads 2 --context 16 --precision bf16 --threads 1
       --log-every 1)
cfg() { # DIR [KEPT [MORE]] -> config file mon_DIR.json (the checkpoint on anomaly: triage's;
        # KEPT calls; MORE: more keys of the monitor section)
  printf '{"task": "monitor", "dump_path": "%s", "monitor": {"targets": [], "anomaly_checkpoint": true, "anomaly_calls": %d%s}}\n' \
    "$1" "${2:-0}" "${3:+, $3}" > "cfg_$1.json"
}

# -- clean run: no anomaly, records against independent answers; with the
# collectives' records (cc_distribution): none raises an anomaly either
cfg clean 0 '"cc_distribution": {"enable": true, "cc_pre_hook": false, "cc_codeline": [], "cc_log_only": false}'
mpirun_k 2 "$nprobe" "${model[@]}" --steps $steps --dump-config cfg_clean.json --save ck.h5 \
  > clean.log 2> clean.err || { echo "FAIL clean run"; cat clean.log clean.err; exit 1; }
# the same run without the monitor: the same weights and optimizer state to
# the bit (the statistics gathered inside the update change nothing)
mpirun_k 2 "$nprobe" "${model[@]}" --steps $steps --save ck_off.h5 > off.log 2>&1 ||
  { echo "FAIL run without the monitor"; cat off.log; exit 1; }
"$py" - <<'PY' || { echo "FAIL the monitor changed the training"; fail=1; }
import h5py, numpy as np
def walk(a, b, n=0):
    for k in a:
        if isinstance(a[k], h5py.Dataset):
            assert np.array_equal(a[k][()], b[k][()], equal_nan=True), k
            n += 1
        else:
            n = walk(a[k], b[k], n)
    return n
with h5py.File("ck.h5", "r") as a, h5py.File("ck_off.h5", "r") as b:
    assert walk(a, b) >= 30
PY
"$nprobe" monitor clean > clean.mon; rc=$?
[ $rc = 0 ] && grep -q "^no anomaly" clean.mon && grep -q "2 rank(s), $steps step(s)" clean.mon ||
  { echo "FAIL clean run: exit $rc"; cat clean.mon; fail=1; }
"$py" - "$steps" <<'PY' || fail=1
import re, sys
import h5py, numpy as np
steps = int(sys.argv[1])
def load(r):
    with h5py.File(f"clean/monitor_rank{r}.h5", "r", swmr=True) as f:
        keys = [(k["name"].decode(), k["metric"].decode()) for k in f["keys"][()]]
        assert f.attrs["rank"] == r and f.attrs["world_size"] == 2
        assert len(f["steps"]) == steps, len(f["steps"])
        return keys, f["records"][()]
def series(keys, rec, name, metric, field=None):
    k = keys.index((name, metric))
    rows = rec[rec["key"] == k]
    return rows if field is None else rows[field]
k0, r0 = load(0)
k1, r1 = load(1)
printed = [float(m) for m in re.findall(r"^step \d+ loss (\S+)", open("clean.log").read(), re.M)]
mean = (series(k0, r0, "loss", "loss", "mean") + series(k1, r1, "loss", "loss", "mean")) / 2
assert len(printed) == steps and np.allclose(mean, printed, rtol=0, atol=2e-6), (mean, printed)
# the same reduced gradients on both ranks, different local ones
g0 = series(k0, r0, "h.0.mlp.c_fc.weight", "grad", "norm")
g1 = series(k1, r1, "h.0.mlp.c_fc.weight", "grad", "norm")
p0 = series(k0, r0, "h.0.mlp.c_fc.weight", "grad_pre", "norm")
p1 = series(k1, r1, "h.0.mlp.c_fc.weight", "grad_pre", "norm")
assert np.array_equal(g0, g1) and not np.array_equal(p0, p1), (g0, p0, p1)
with h5py.File("ck.h5", "r") as ck:
    n, worst = 0, 0.0
    for name, metric, path in [(nm, m, f"{grp}/{nm}") for nm in ck["params"]
                               for m, grp in [("weight", "params"), ("exp_avg", "optim/exp_avg"),
                                              ("exp_avg_sq", "optim/exp_avg_sq")]]:
        x = ck[path][()].astype(np.float64).ravel()
        got = series(k0, r0, name, metric)[-1]
        want = (np.sqrt((x * x).sum()), x.max(), x.min(), x.mean(), (x == 0).sum())
        have = (got["norm"], got["max"], got["min"], got["mean"], got["zeros"])
        # float32 sums over blocks of 512 (MONITOR.md "Statistics"): a sum of
        # squares within 512 u (u = 2^-24) of its value, the norm half of it;
        # a sum within 512 u of the sum of magnitudes; min, max, zeros exact
        u512 = 512 * 2.0 ** -24
        assert abs(have[0] - want[0]) <= u512 / 2 * want[0] and have[1:3] == want[1:3] and \
            abs(have[3] - want[3]) <= u512 * np.abs(x).mean() and have[4] == want[4], \
            (name, metric, have, want)
        worst = max(worst, abs(have[0] - want[0]) / (want[0] or 1.0))
        n += 1
    assert n >= 30, n
    print(f"largest relative error of a norm: {worst:.2e}")
# every module of every step has an activation and an activation gradient
for m in ("activation", "activation_grad"):
    assert len(series(k0, r0, "h.1.mlp", m, "norm")) == steps, m
# the collectives (cc_distribution): the data-parallel all-reduces of one
# element are the loss's (its comm_in the rank's loss, its comm_out the
# printed mean) and the squared gradient norm's (comm_out = grad_norm^2)
for k, r in ((k0, r0), (k1, r1)):
    cc = [(k[x["key"]][0], x) for x in r if k[x["key"]][1] == "comm_in"]
    out = {(k[x["key"]][0], int(x["step"])): x for x in r if k[x["key"]][1] == "comm_out"}
    assert len(cc) == len(out) > steps * 20, (len(cc), len(out))
    for s in range(steps):
        one = sorted((x["seq"], n) for n, x in cc if x["step"] == s and x["numel"] == 1)
        assert len(one) == 2 and all(n.startswith("Distributed.all_reduce.") for _, n in one), one
        loss_in = [x for n, x in cc if n == one[0][1] and x["step"] == s][0]
        assert loss_in["mean"] == np.float32(series(k, r, "loss", "loss", "mean")[s]), s
        assert abs(out[(one[0][1], s)]["mean"] - printed[s]) <= 2e-6, s
        gn = series(k, r, "grad_norm", "grad_norm", "mean")[s]
        assert abs(np.sqrt(out[(one[1][1], s)]["mean"]) - gn) <= 1e-12 * gn, s
print("records: ok")
PY
# the collectives' records of step 2 against a tensor dump of that step of
# the same run (a separate run, the same seed): every Distributed.* call of
# the dump is a record under its call name, comm_in its input.0's
# statistics and comm_out its output.0's in float64, to MONITOR.md's bound
printf '{"task": "tensor", "dump_path": "dp_dump", "step": [2]}\n' > cfg_dp_dump.json
mpirun_k 2 "$nprobe" "${model[@]}" --steps $steps --stop-after 3 --dump-config cfg_dp_dump.json > dp_dump.log 2>&1 ||
  { echo "FAIL data-parallel tensor dump"; cat dp_dump.log; fail=1; }
"$py" - <<'PY' || fail=1
import h5py, numpy as np
u512, n, worst = 512 * 2.0 ** -24, 0, 0.0
for r in (0, 1):
    with h5py.File(f"clean/monitor_rank{r}.h5", "r", swmr=True) as f:
        keys = [(k["name"].decode(), k["metric"].decode()) for k in f["keys"][()]]
        rec = {keys[x["key"]]: x for x in f["records"][()] if x["step"] == 2}
    with h5py.File(f"dp_dump/step2/rank{r}/dump.h5") as a:
        calls = [c.decode() for c in a["calls"]["call"] if c.startswith(b"Distributed.")]
        assert len(calls) >= 30, calls
        assert {k for k, m in rec if m.startswith("comm_")} == set(calls)
        for c in calls:
            for metric, leaf in (("comm_in", "input.0"), ("comm_out", "output.0")):
                x = a["data"][f"{c}.{leaf}"][()].astype(np.float64).ravel()
                got = rec[(c, metric)]
                assert got["numel"] == x.size and got["min"] == x.min() and got["max"] == x.max() and \
                    got["zeros"] == (x == 0).sum() and got["nans"] == got["infs"] == 0, (r, c, metric)
                norm = np.sqrt((x * x).sum())
                assert abs(got["norm"] - norm) <= u512 / 2 * norm, (r, c, metric, got["norm"], norm)
                assert abs(got["mean"] - x.mean()) <= u512 * np.abs(x).mean(), (r, c, metric)
                worst = max(worst, abs(got["norm"] - norm) / (norm or 1.0))
                n += 1
print(f"data-parallel collectives: {n} records equal the dump's leaves (norm within {worst:.1e})")
PY

# -- one-time faults at a random step (past the rules' warmup) and rank
module_of() { case $1 in gemm_bitflip) echo h.0.mlp.c_fc;; outlier_batch|nan_input) echo wte;;
                         logit_growth) echo lm_head;; rare_pattern) echo h.0.attn.c_attn;; esac; }
for f in $faults; do
  s=$((11 + RANDOM % 3)); r=$((RANDOM % 2))
  kept=0; [ "$f" = rare_pattern ] && kept=4 # the op from rank r's kept calls (the others: the rerun's dump)
  cfg "$f" $kept
  mpirun_k 2 "$nprobe" "${model[@]}" --steps $steps --dump-config "cfg_$f.json" --fault "$f" \
    --fault-step $s --fault-rank $r > "$f.log" 2>&1 || { echo "FAIL $f run"; cat "$f.log"; fail=1; continue; }
  "$nprobe" monitor "$f" > "$f.mon"; rc=$?
  want="first anomaly: step $s rank $r $(module_of "$f") activation "
  [ $rc = 1 ] && grep -q "^$want" "$f.mon" ||
    { echo "FAIL $f at step $s rank $r: expected '$want...' (exit $rc)"; cat "$f.mon"; fail=1; }
  # triage of the 2-rank run (MONITOR.md "Triage"): reruns of 2 ranks from
  # the checkpoint the monitor wrote on the anomaly (rank r's), each rank
  # judged against its own history; the class and op of the fault, at its
  # rank and step (gemm_bitflip: transient; rare_pattern: code at c_attn)
  case $f in gemm_bitflip) cls=transient mod="" ;; rare_pattern) cls=code mod=h.0.attn.c_attn ;; *) continue ;; esac
  "$nprobe" triage "$f" --out "tri_$f" --launcher "$mpiexec_name -n 2 --oversubscribe --bind-to none" \
    -- "${model[@]:1}" --steps $steps --fault "$f" --fault-step $s --fault-rank $r > "tri_$f.txt" 2>&1
  grep -q "^first anomaly: step $s rank $r " "tri_$f.txt" &&
    grep -q "^checkpoint: $f/anomaly_rank$r.step$s.h5 " "tri_$f.txt" && grep -q "^class: $cls " "tri_$f.txt" &&
    { [ -z "$mod" ] || grep -q "^rerun fp32: reproduced (.*; first rank $r $mod " "tri_$f.txt"; } &&
    { [ -z "$mod" ] || [ $kept -gt 0 ] || grep -q "^op: Functional\.linear\.[0-9]*\.forward (in $mod)$" "tri_$f.txt"; } &&
    { [ $kept = 0 ] || { grep -q "^kept calls: 4 in $f/anomaly_calls/step$s/rank$r/dump.h5, " "tri_$f.txt" &&
      grep -q "^op: Functional\.linear\.[0-9]*\.forward (in $mod; the replay of the calls the monitor kept" "tri_$f.txt"; }; } ||
    { echo "FAIL triage of $f at step $s rank $r: expected class $cls"; cat "tri_$f.txt"; fail=1; }
done

# the HTML page of the bit flip: the first anomaly, its cell outlined
if [ -d gemm_bitflip ]; then
  "$nprobe" monitor gemm_bitflip --html page.html > /dev/null
  "$py" - <<'PY' || fail=1
import html.parser, re
text = open("page.html").read()
class P(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(); self.rects = []; self.polylines = 0; self.stack = []
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "rect" and a.get("class") == "anomaly": self.rects.append(a)
        if tag == "polyline": self.polylines += 1
p = P(); p.feed(text)
m = re.search(r"first anomaly: step (\d+) rank (\d+) h\.0\.mlp\.c_fc activation", text)
assert m and p.rects and p.polylines >= 4, (m, len(p.rects), p.polylines)
assert re.search(r"<title>step %s h\.0\.mlp\.c_fc turbulence</title>" % m.group(1), text)
assert "<script" not in text and "http" not in text
print("html: ok")
PY
fi

# the first anomaly of each fault run by a second implementation of the rules
# (NaN/Inf counts; a norm above 50 x its exponential running mean after 10
# records; loss/grad_norm above 10 x their last 10 values' mean), ordered by step, call, rank
[ -n "$faults" ] && { "$py" - $faults <<'PY' || fail=1
import glob, json, subprocess, sys, os
import h5py, numpy as np
turb = {"activation", "activation_grad", "grad_pre", "grad", "comm_in", "comm_out"}
for d in sys.argv[1:]:
    found = []
    for path in sorted(glob.glob(f"{d}/monitor_rank*.h5")):
        with h5py.File(path, "r", swmr=True) as f:
            rank = int(f.attrs["rank"])
            keys = [(k["name"].decode(), k["metric"].decode()) for k in f["keys"][()]]
            rec = f["records"][()]
        mean, n, win = {}, {}, {}
        for r in rec:
            name, metric = keys[r["key"]]
            scalar = metric in ("loss", "grad_norm", "loss_scale", "update_ratio")
            v = float(r["mean"] if scalar else r["norm"])
            hit = None
            if (r["nans"] or r["infs"]) and metric != "loss_scale" and not (metric == "grad_norm" and np.isnan(v)):
                hit = "nan"
            elif metric in turb and n.get(r["key"], 0) >= 10 and np.isfinite(v) and v > 50 * mean[r["key"]]:
                hit = "turbulence"
            elif metric in ("loss", "grad_norm") and np.isfinite(v):
                w = win.setdefault(r["key"], [])
                if len(w) >= 3 and v > 10 * np.mean(w):
                    hit = "spike"
                w.append(v)
                del w[:-10]
            if hit:
                found.append((int(r["step"]), int(r["seq"]), rank, name, metric, hit))
            if not scalar and np.isfinite(v):
                k = r["key"]
                mean[k] = 0.9 * mean[k] + 0.1 * v if n.get(k, 0) else v
                n[k] = n.get(k, 0) + 1
    first = min(found)
    out = json.loads(subprocess.run([os.environ["NPROBE_BIN"], "monitor", d, "--format", "json"],
                                    capture_output=True, text=True).stdout)
    a = out["anomalies"]
    got = (a[0]["step"], a[0]["call"], a[0]["rank"], a[0]["name"], a[0]["metric"], a[0]["rule"])
    assert got == first and len(a) == len(found), (d, got, first, len(a), len(found))
print("rules: ok")
PY
}

# -- 4 ranks, one rank's input NaN before the all-reduce: that rank is first;
# with the collectives' records, the first of them is that rank's comm_in of
# a gradient's all-reduce, and the NaN arrives in every rank's comm_out
s=$s_nan; r=$((RANDOM % k_nan))
cfg four 0 '"cc_distribution": {"enable": true}'
mpirun_k $k_nan "$nprobe" "${model[@]}" --steps $steps --dump-config cfg_four.json --fault nan_input \
  --fault-step $s --fault-rank $r > four.log 2>&1 || { echo "FAIL 4-rank run"; cat four.log; fail=1; }
"$nprobe" monitor four --format json > four.json
"$nprobe" monitor four --format csv > four.csv
"$py" - "$s" "$r" "$k_nan" <<'PY' || fail=1
import csv, json, sys
s, r, k = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
j = json.load(open("four.json"))
a = j["anomalies"]
assert j["ranks"] == k and a, j
first = a[0]
assert (first["step"], first["rank"], first["name"], first["rule"]) == (s, r, "wte", "nan"), first
# the reduced gradient carries the NaN to every rank, after the source rank's own
ranks_grad = {x["rank"] for x in a if x["metric"] == "grad" and x["step"] == s}
assert ranks_grad == set(range(k)), ranks_grad
c = [x for x in a if x["metric"].startswith("comm_") and x["step"] == s]
assert c and (c[0]["rank"], c[0]["metric"], c[0]["rule"]) == (r, "comm_in", "nan") and \
    c[0]["name"].startswith("Distributed.all_reduce."), c[:2]
assert {x["rank"] for x in c if x["metric"] == "comm_out" and x["name"] == c[0]["name"]} == set(range(k)), c
rows = list(csv.DictReader(open("four.csv")))
assert len(rows) == len(a) and int(rows[0]["rank"]) == r and rows[0]["name"] == "wte", rows[0]
print(f"{k} ranks: ok")
PY

# -- tensor and pipeline parallel (plain only). --tp 2: rare_pattern at a
# random step on rank 1; the checkpoint on anomaly is the group's (the whole
# tensors, written by its rank 0 as anomaly_rank0: every rank takes part),
# and triage reruns both ranks from it: class code, the op c_attn's linear
# from the calls rank 1 kept. --pp 2 (2 micro-batches): a NaN input at a
# random step; stage 1 counts its calls from 0, yet every anomaly of the
# stage-0 forward comes before any of stage 1's (the NaN arrives through
# the send); then triage of two faults under --pp 2 (below)
if [ -z "${NP_SANITIZED:-}" ]; then
  s=$((11 + RANDOM % 3))
  cfg tp 4
  mpirun_k 2 "$nprobe" "${model[@]}" --steps $steps --tp 2 --dump-config cfg_tp.json --fault rare_pattern \
    --fault-step $s --fault-rank 1 > tp.log 2>&1 || { echo "FAIL --tp 2 run"; cat tp.log; fail=1; }
  "$nprobe" triage tp --out tri_tp --launcher "$mpiexec_name -n 2 --oversubscribe --bind-to none" \
    -- "${model[@]:1}" --steps $steps --tp 2 --fault rare_pattern --fault-step $s --fault-rank 1 > tri_tp.txt 2>&1
  [ -f tp/anomaly_rank0.step$s.h5 ] && [ ! -e tp/anomaly_rank1.step$s.h5 ] &&
    grep -q "^first anomaly: step $s rank 1 h.0.attn.c_attn activation " tri_tp.txt &&
    grep -q "^checkpoint: tp/anomaly_rank0.step$s.h5 " tri_tp.txt && grep -q "^class: code " tri_tp.txt &&
    grep -q "^op: Functional\.linear\.[0-9]*\.forward (in h.0.attn.c_attn; the replay" tri_tp.txt ||
    { echo "FAIL triage of --tp 2 rare_pattern at step $s"; ls tp; cat tri_tp.txt; fail=1; }
  printf '{"task": "monitor", "dump_path": "pp", "monitor": {"targets": [], "cc_distribution": {"enable": true}}}\n' > cfg_pp.json
  mpirun_k 2 "$nprobe" "${model[@]}" --steps $steps --pp 2 --micro-batches 2 --dump-config cfg_pp.json \
    --fault nan_input --fault-step $s > pp.log 2>&1 || { echo "FAIL --pp 2 run"; cat pp.log; fail=1; }
  "$nprobe" monitor pp --format json > pp.json
  "$py" - "$s" <<'PY' || fail=1
import json, sys
s = int(sys.argv[1])
a = [x for x in json.load(open("pp.json"))["anomalies"] if x["step"] == s and x["metric"] == "activation"]
assert a and (a[0]["rank"], a[0]["name"], a[0]["rule"]) == (0, "wte", "nan"), a[:2]
ranks = [x["rank"] for x in a]
assert 1 in ranks and ranks == sorted(ranks), ranks   # stage 0's forward, then stage 1's
assert any(x["rank"] == 1 and x["call"] < max(y["call"] for y in a if y["rank"] == 0) for x in a)
# the collectives: what stage 0 sent (Distributed.send.K.forward, comm_in)
# is what stage 1 received (Distributed.recv.K.forward, comm_out), field
# for field, and the gradients back the same way, at every clean step
import h5py
def cc(r):
    with h5py.File(f"pp/monitor_rank{r}.h5", "r", swmr=True) as f:
        keys = [(k["name"].decode(), k["metric"].decode()) for k in f["keys"][()]]
        return {keys[x["key"]] + (int(x["step"]),): x for x in f["records"][()]
                if keys[x["key"]][1].startswith("comm_")}
c0, c1 = cc(0), cc(1)
pairs = [(("send", "forward", "comm_in"), ("recv", "forward", "comm_out")),
         (("send", "backward", "comm_out"), ("recv", "backward", "comm_in"))]
n = 0
for st in range(s):
    for m in range(2):   # 2 micro-batches: the boundary's calls K = 0, 1
        for (o0, d0, m0), (o1, d1, m1) in pairs:
            a0 = c0[(f"Distributed.{o0}.{m}.{d0}", m0, st)]
            a1 = c1[(f"Distributed.{o1}.{m}.{d1}", m1, st)]
            assert a0["numel"] > 0 and all(a0[f] == a1[f] for f in ("numel", "norm", "min", "max", "mean", "zeros")), (st, m, o0, d0)
            n += 1
assert len(c0) == len(c1) == 4 * 14 and n == 4 * s, (len(c0), len(c1), n)
print(f"pipeline order: ok; {n} send/recv pairs recorded alike")
PY
  # --pp 2: the checkpoint on anomaly is a collective (every stage's tensors
  # gathered, rank 0 writing anomaly_rank0 whichever rank saw the anomaly),
  # and triage reruns both stages from it with --pp 2: logit_growth on
  # stage 1 (lm_head) is numerics, the op compare's first culprit, lm_head's
  # linear (Functional.linear.8, its one-process name); gemm_bitflip on
  # stage 0 is transient (the rerun of both stages from the checkpoint is
  # clean), the op c_fc's linear by the replay of the calls stage 0 kept
  for f in logit_growth gemm_bitflip; do
    s=$((11 + RANDOM % 3))
    case $f in logit_growth) r=1 kept=0 cls=numerics mod=lm_head op='Functional\.linear\.8\.forward (compare of' ;;
               gemm_bitflip) r=0 kept=4 cls=transient mod=h.0.mlp.c_fc op='Functional\.linear\.2\.forward (in h.0.mlp.c_fc; the replay'
                             s_gb=$s ;; esac
    # gemm_bitflip: the kept states and the calls after too (checked below)
    cfg "pp_$f" $kept "$([ $f = gemm_bitflip ] && echo '"anomaly_ring": 2, "anomaly_calls_after": 3')"
    mpirun_k 2 "$nprobe" "${model[@]}" --steps $steps --pp 2 --dump-config "cfg_pp_$f.json" --fault $f \
      --fault-step $s --fault-rank $r > "pp_$f.log" 2>&1 || { echo "FAIL --pp 2 $f run"; cat "pp_$f.log"; fail=1; }
    "$nprobe" triage "pp_$f" --out "tri_pp_$f" --launcher "$mpiexec_name -n 2 --oversubscribe --bind-to none" \
      -- "${model[@]:1}" --steps $steps --pp 2 --fault $f --fault-step $s --fault-rank $r > "tri_pp_$f.txt" 2>&1
    [ -f "pp_$f/anomaly_rank0.step$s.h5" ] && [ ! -e "pp_$f/anomaly_rank1.step$s.h5" ] &&
      grep -q "^first anomaly: step $s rank $r $mod activation " "tri_pp_$f.txt" &&
      grep -q "^checkpoint: pp_$f/anomaly_rank0.step$s.h5 " "tri_pp_$f.txt" && grep -q "^class: $cls " "tri_pp_$f.txt" &&
      grep -q "^op: $op" "tri_pp_$f.txt" ||
      { echo "FAIL triage of --pp 2 $f at step $s rank $r: expected class $cls"; ls "pp_$f"; cat "tri_pp_$f.txt"; fail=1; }
  done
  # -- the kept states and calls (anomaly_ring 2, anomaly_calls 4,
  # anomaly_calls_after 3) under --tp 2 (gemm_bitflip on rank 1: rank 0's
  # shard of c_fc's output stays clean, its own anomaly comes later) and
  # --pp 2 (gemm_bitflip on stage 0, the run above). Known answers: the
  # kept state of step S-1 (written from the ring: the collective
  # checkpoint, the state swapped in) is, bit for bit, a --save at S-1 of a
  # run of the same layout; under --tp every rank writes its kept calls when
  # rank 1 sees the anomaly (the ranks agree at each module record) and
  # each rank's dump holds exactly the 4 calls up to c_fc's linear and the 3
  # after of that rank's plain tensor dump of step S (a separate run), every
  # leaf byte-equal; under --pp the stage that saw it
  # (stage 0) holds those calls, stage 1 a window of 7 of its own around its
  # own first anomaly; compare of each against a clean one-process dump of
  # step S assembles the ranks' files (the mesh and placements) and names
  # c_fc's linear the first culprit.
  # (the same step S for both: one one-process run gives the clean dump of
  # step S and, the pipeline's checkpoint being the one-process one to the
  # bit, the --save at S-1 for --pp; --tp's is a --tp 2 run's)
  s=$s_gb t_ring=$SECONDS
  cfg tp_ring 4 '"anomaly_ring": 2, "anomaly_calls_after": 3'
  printf '{"task": "tensor", "dump_path": "one", "step": [%d]}\n' $s > cfg_one.json
  "$nprobe" "${model[@]}" --steps $steps --stop-after $((s + 1)) --dump-config cfg_one.json > one.log 2>&1 &&
  "$nprobe" "${model[@]}" --steps $steps --stop-after $((s - 1)) --save ck_pp_gemm_bitflip.h5 > ck_one.log 2>&1 &&
  mpirun_k 2 "$nprobe" "${model[@]}" --steps $steps --tp 2 --stop-after $((s - 1)) --save ck_tp_ring.h5 \
    > ck_tp.log 2>&1 &&
  mpirun_k 2 "$nprobe" "${model[@]}" --steps $steps --tp 2 --fault gemm_bitflip --fault-rank 1 --fault-step $s \
    --stop-after $((s + 1)) --dump-config cfg_tp_ring.json > tp_ring.log 2>&1 ||
    { echo "FAIL --tp 2 ring run or the reference runs"; cat one.log ck_one.log ck_tp.log tp_ring.log; fail=1; }
  for x in "tp_ring --tp 2 1" "pp_gemm_bitflip --pp 2 0"; do
    set -- $x
    printf '{"task": "tensor", "dump_path": "d_%s", "step": [%d]}\n' "$1" $s > "cfg_d_$1.json"
    mpirun_k 2 "$nprobe" "${model[@]}" --steps $steps $2 $3 --fault gemm_bitflip --fault-step $s \
      --fault-rank $4 --stop-after $((s + 1)) --dump-config "cfg_d_$1.json" > "d_$1.log" 2>&1 ||
      { echo "FAIL $x plain dump"; cat "d_$1.log"; fail=1; }
    "$nprobe" compare -b one -c "$1/anomaly_calls" -o "cmp_$1" > "cmp_$1.txt" 2>&1
    grep -q "assembled from the 2 rank file(s) of the step" "cmp_$1.txt" &&
      grep -q "first culprit: Functional.linear.2.forward (in Module.h.0.mlp.c_fc." "cmp_$1.txt" ||
      { echo "FAIL $x: compare of the kept calls against a one-process dump"; cat "cmp_$1.txt"; fail=1; }
    "$py" - "$1" $s <<'PY' || fail=1
import sys
import h5py
d, s = sys.argv[1], int(sys.argv[2])
from nptest import h5_same as same
with h5py.File(f"{d}/anomaly_rank0.step{s - 1}.h5") as a, h5py.File(f"ck_{d}.h5") as b:
    assert a.attrs["step"] == s - 1 and same(a["params"], b["params"]) >= 20 and same(a["optim"], b["optim"]) >= 40
for r in (0, 1):
    with h5py.File(f"{d}/anomaly_calls/step{s}/rank{r}/dump.h5") as k, h5py.File(f"d_{d}/step{s}/rank{r}/dump.h5") as a:
        kc = [c.decode() for c in k["calls"]["call"]]
        api = [(c.decode(), p.decode()) for c, p in zip(a["calls"]["call"], a["calls"]["parent"])]
        names = [c for c, _ in api]
        if r == 0 or d == "tp_ring":
            end = [i for i, (c, p) in enumerate(api) if p.startswith("Module.h.0.mlp.c_fc.")][0]
            assert kc == names[end - 3:end + 4], (r, kc, names[:end + 4])
        else:   # stage 1: a window of 7 around its own first anomaly
            i = names.index(kc[0])
            assert len(kc) == 7 and kc == names[i:i + 7], (r, kc, names)
        n = sum(1 for leaf in k["data"] if k["data"][leaf][()].tobytes() == a["data"][leaf][()].tobytes())
        assert n == len(k["data"]) == sum(1 for x in a["data"] if any(x.startswith(c + ".") for c in kc)), (r, n)
        assert "placements" in k, r
print(f"{d}: kept state of step {s - 1} and calls of step {s} ok")
PY
  done
  echo "kept states and calls under --tp and --pp: $((SECONDS - t_ring)) s"
  # -- the collectives (cc_distribution) under --tp 2: gemm_bitflip on rank
  # 1 at step S (the run above), the targets the second block only (c_fc's
  # own activation is not recorded): the first anomaly is rank 1's comm_in
  # of h.0.mlp.c_proj's all-reduce (Distributed.all_reduce.1.forward, the
  # partial sum the flipped bit reached); the same run without it names
  # rank 0's h.1 (the damage after the all-reduce, on every rank alike).
  # Step S's records against the plain dump of the same run (d_tp_ring):
  # the k-th forward all-reduce's comm_in is that rank's k-th row-parallel
  # linear output (a c_proj's partial sum), its comm_out the two ranks'
  # sum in float64 rounded to float32 and then bf16 (the run's autocast),
  # statistics in float64 to MONITOR.md's bound
  t_cc=$SECONDS
  for c in true false; do
    printf '{"task": "monitor", "dump_path": "cc_%s", "monitor": {"targets": ["h.1"], "cc_distribution": {"enable": %s}}}\n' $c $c > cfg_cc_$c.json
    mpirun_k 2 "$nprobe" "${model[@]}" --steps $steps --tp 2 --fault gemm_bitflip --fault-rank 1 --fault-step $s \
      --stop-after $((s + 1)) --dump-config cfg_cc_$c.json > cc_$c.log 2>&1 || { echo "FAIL --tp 2 cc $c run"; cat cc_$c.log; fail=1; }
    "$nprobe" monitor cc_$c > cc_$c.mon
  done
  grep -q "^first anomaly: step $s rank 1 Distributed\.all_reduce\.1\.forward comm_in " cc_true.mon &&
    grep -q "^first anomaly: step $s rank 0 h\.1[ .]" cc_false.mon ||
    { echo "FAIL --tp 2 gemm_bitflip on rank 1 at step $s: the collectives' first anomaly"; cat cc_true.mon cc_false.mon; fail=1; }
  "$py" - $s <<'PY' || fail=1
import re, sys
import h5py, numpy as np
s = int(sys.argv[1])
def bf16(x):   # round-to-nearest-even of float32 to bfloat16, kept in float32
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)
def stats(x):
    x = x.astype(np.float64).ravel()
    f = x[np.isfinite(x)]
    return dict(numel=x.size, norm=np.sqrt((f * f).sum()), min=f.min(), max=f.max(), mean=f.mean(),
                zeros=int((x == 0).sum()), nans=int(np.isnan(x).sum()), infs=int(np.isinf(x).sum()),
                mag=np.abs(f).mean())
part = []
for r in (0, 1):
    with h5py.File(f"d_tp_ring/step{s}/rank{r}/dump.h5") as a:
        calls = [(c.decode(), p.decode()) for c, p in zip(a["calls"]["call"], a["calls"]["parent"])]
        row = [c for c, p in calls if c.endswith(".forward") and c.startswith("Functional.linear.")
               and re.match(r"Module\.h\.\d+\.(attn|mlp)\.c_proj\.", p)]
        part.append([a["data"][f"{c}.output.0"][()] for c in row])
assert len(part[0]) == len(part[1]) == 4, [len(p) for p in part]
u512, worst, n = 512 * 2.0 ** -24, 0.0, 0
for r in (0, 1):
    with h5py.File(f"cc_true/monitor_rank{r}.h5", "r", swmr=True) as f:
        keys = [(k["name"].decode(), k["metric"].decode()) for k in f["keys"][()]]
        rec = {keys[x["key"]]: x for x in f["records"][()] if x["step"] == s}
    for k in range(4):
        summed = bf16((part[0][k].astype(np.float64) + part[1][k].astype(np.float64)).astype(np.float32))
        for metric, x in (("comm_in", part[r][k]), ("comm_out", summed)):
            got, want = rec[(f"Distributed.all_reduce.{k}.forward", metric)], stats(x)
            for c in ("numel", "min", "max", "zeros", "nans", "infs"):
                assert got[c] == want[c], (r, k, metric, c, got[c], want[c])
            assert abs(got["norm"] - want["norm"]) <= u512 / 2 * want["norm"], (r, k, metric)
            assert abs(got["mean"] - want["mean"]) <= u512 * want["mag"], (r, k, metric)
            worst = max(worst, abs(got["norm"] - want["norm"]) / want["norm"])
            n += 1
    assert rec[("Distributed.all_reduce.1.forward", "comm_in")]["norm"] > (1e30 if r else 0), r
print(f"--tp 2 collectives: {n} records against the dump, largest relative error of a norm {worst:.2e}")
PY
  echo "the collectives under --tp 2: $((SECONDS - t_cc)) s"
  # --sp: the sequence's all-gathers are recorded too (Distributed.
  # all_gather_into_tensor, forward and backward); what arrived is the two
  # ranks' pieces: its numel, min, max and counts are those of the ranks'
  # comm_in together, its square norm their sum (to 512 u), and both ranks
  # hold the same record
  # (and --vocab-parallel: its cross-entropy's three gathers a step)
  for c in sp vp; do
    printf '{"task": "monitor", "dump_path": "cc_%s", "monitor": {"targets": [], "cc_distribution": {"enable": true}}}\n' $c > cfg_cc_$c.json
  done
  mpirun_k 2 "$nprobe" "${model[@]}" --steps 2 --tp 2 --sp --dump-config cfg_cc_sp.json > cc_sp.log 2>&1 ||
    { echo "FAIL --tp 2 --sp cc run"; cat cc_sp.log; fail=1; }
  mpirun_k 2 "$nprobe" "${model[@]}" --steps 2 --tp 2 --vocab-parallel --dump-config cfg_cc_vp.json > cc_vp.log 2>&1 ||
    { echo "FAIL --tp 2 --vocab-parallel cc run"; cat cc_vp.log; fail=1; }
  for c in sp vp; do
  "$py" - $c <<'PY' || fail=1
import sys
import h5py
c = sys.argv[1]
recs = []
for r in (0, 1):
    with h5py.File(f"cc_{c}/monitor_rank{r}.h5", "r", swmr=True) as f:
        keys = [(k["name"].decode(), k["metric"].decode()) for k in f["keys"][()]]
        recs.append({(int(x["step"]),) + keys[x["key"]]: x for x in f["records"][()]})
ag = sorted({k[:2] for k in recs[0] if ".all_gather_into_tensor." in k[1]})
if c == "sp":
    assert any(n.endswith(".forward") for _, n in ag) and any(n.endswith(".backward") for _, n in ag), ag
else:
    # only the cross-entropy's gathers, each of the rows (batch x context) of both ranks
    assert [n for _, n in ag] == [f"Distributed.all_gather_into_tensor.{k}.forward" for k in range(3)] * 2, ag
    for st, name in ag:
        assert recs[0][(st, name, "comm_in")]["numel"] == recs[1][(st, name, "comm_in")]["numel"], name
for st, name in ag:
    i = [recs[r][(st, name, "comm_in")] for r in (0, 1)]
    o = [recs[r][(st, name, "comm_out")] for r in (0, 1)]
    assert o[0].tobytes() == o[1].tobytes(), name
    assert o[0]["numel"] == i[0]["numel"] + i[1]["numel"] and i[0]["numel"] == i[1]["numel"], name
    assert o[0]["min"] == min(x["min"] for x in i) and o[0]["max"] == max(x["max"] for x in i), name
    for col in ("zeros", "nans", "infs"):
        assert o[0][col] == i[0][col] + i[1][col], (name, col)
    ss = sum(x["norm"] ** 2 for x in i)
    assert abs(o[0]["norm"] ** 2 - ss) <= 512 * 2.0 ** -24 * ss, (name, o[0]["norm"] ** 2, ss)
run = "--sp" if c == "sp" else "--vocab-parallel"
print(f"--tp 2 {run}: {len(ag)} all-gathers' records ok")
# the gradient norm's float64 sum of squares over the TP group is the
# step's last all-reduce: what arrived is the two ranks' values summed
# (exactly, in rank order), on both ranks alike, and at most the squared
# grad_norm (which adds the whole parameters' squares)
steps = sorted({k[0] for k in recs[0]})
for st in steps:
    ar = max((int(n.split(".")[2]), n) for s_, n, m in recs[0]
             if s_ == st and m == "comm_out" and n.startswith("Distributed.all_reduce."))[1]
    i = [recs[r][(st, ar, "comm_in")] for r in (0, 1)]
    o = [recs[r][(st, ar, "comm_out")] for r in (0, 1)]
    assert o[0]["numel"] == 1 and o[0].tobytes() == o[1].tobytes(), ar
    assert o[0]["mean"] == i[0]["mean"] + i[1]["mean"] > 0, (ar, o[0]["mean"], i[0]["mean"], i[1]["mean"])
    gn = recs[0][(st, "grad_norm", "grad_norm")]["mean"]
    assert o[0]["mean"] <= gn * gn * (1 + 1e-12), (ar, o[0]["mean"], gn)
print(f"--tp 2 {run}: the gradient norm's all-reduce of {len(steps)} steps ok")
PY
  done
  # the checkpoint on anomaly is a collective: a "rank" list would leave a
  # rank out of it (it hung waiting for that rank); refused on every rank
  printf '{"task": "monitor", "dump_path": "rk", "rank": [1], "monitor": {"anomaly_checkpoint": true}}\n' > cfg_rk.json
  mpirun_k 2 "$nprobe" "${model[@]}" --steps 2 --tp 2 --dump-config cfg_rk.json > rk.log 2>&1
  rc=$?
  [ $rc = 2 ] && grep -q 'anomaly_checkpoint with a "rank" list under --tp' rk.log ||
    { echo "FAIL a rank list with the checkpoint on anomaly under --tp (rc $rc)"; cat rk.log; fail=1; }
fi

# -- beside a dump (--monitor-config with --dump-config): the dump's tables are
# those of a run without the monitor, both files are written
printf '{"task": "statistics", "dump_path": "%s", "level": "mix", "step": [2]}\n' alone > s_alone.json
printf '{"task": "statistics", "dump_path": "%s", "level": "mix", "step": [2]}\n' beside > s_beside.json
cfg mb
"$nprobe" "${model[@]}" --steps 3 --dump-config s_alone.json > alone.log 2>&1 &&
"$nprobe" "${model[@]}" --steps 3 --dump-config s_beside.json --monitor-config cfg_mb.json > beside.log 2>&1 ||
  { echo "FAIL dump beside the monitor"; cat alone.log beside.log; fail=1; }
"$py" - <<'PY' || fail=1
import h5py, numpy as np
with h5py.File("alone/step2/rank0/dump.h5", "r") as a, h5py.File("beside/step2/rank0/dump.h5", "r") as b:
    for t in ("calls", "entries"):
        assert np.array_equal(a[t][()], b[t][()]), t
    assert len(a["entries"]) > 50
with h5py.File("mb/monitor_rank0.h5", "r", swmr=True) as f:
    assert len(f["steps"]) == 3
print("beside a dump: ok")
PY
# -- without activations (no observer: the step starts at the trainer's
# first watch point), every other step: the records of steps 0 and 2 are
# those of the run above (activations on, every step), field for field
# (and ur_distribution: the update ratio apart from the weights, either one
# alone gives exactly its records of that run)
printf '{"task": "monitor", "dump_path": "noxy", "monitor": {"targets": [], "xy_distribution": false, "step_interval": 2}}\n' > cfg_noxy.json
printf '{"task": "monitor", "dump_path": "nour", "monitor": {"targets": [], "xy_distribution": false, "step_interval": 2, "ur_distribution": false}}\n' > cfg_nour.json
printf '{"task": "monitor", "dump_path": "urw", "monitor": {"targets": [], "xy_distribution": false, "step_interval": 2, "param_distribution": false, "ur_distribution": true}}\n' > cfg_urw.json
for c in noxy nour urw; do
  "$nprobe" "${model[@]}" --steps 3 --dump-config cfg_$c.json > $c.log 2>&1 ||
    { echo "FAIL run without activations ($c)"; cat $c.log; fail=1; }
done
"$py" - <<'PY' || { echo "FAIL records without activations"; fail=1; }
import h5py
def rows(d):
    with h5py.File(f"{d}/monitor_rank0.h5", "r", swmr=True) as f:
        keys = [(k["name"].decode(), k["metric"].decode()) for k in f["keys"][()]]
        rec = f["records"][()]
        n_steps = len(f["steps"])
    fields = [x for x in rec.dtype.names if x not in ("key", "seq")]   # the order differs
    return n_steps, {keys[r["key"]] + (int(r["step"]),): tuple(r[x].tobytes() for x in fields)
                     for r in rec}
n_a, a = rows("noxy")
n_b, b = rows("mb")
assert n_a == 2 and n_b == 3, (n_a, n_b)
assert not [k for k in a if k[1].startswith("activation")], "activations recorded"
want = {k: v for k, v in b.items() if k[2] in (0, 2) and not k[1].startswith("activation")}
assert len(a) >= 60 and a == want, (len(a), len(want), sorted(set(a) ^ set(want))[:5])
print(f"without activations: {len(a)} records equal: ok")
for d, drop in (("nour", "update_ratio"), ("urw", "weight")):
    n_c, c = rows(d)
    w = {k: v for k, v in want.items() if k[1] != drop}
    assert n_c == 2 and len(w) < len(want) and c == w, \
        (d, len(c), len(w), sorted(set(c) ^ set(w))[:5])
    print(f"{d}: {len(c)} records, those of the run without {drop}: ok")
PY

# -- bad config: named key, exit 2 (cc_distribution: msprobe's Python-stack
# keys are refused when they ask for anything, an unknown key is named)
for sec in '"step_intervall": 2|step_intervall' \
           '"cc_distribution": {"enable": true, "cc_codeline": ["train.py"]}|cc_codeline: not supported by the runtime, which has no Python call stack' \
           '"cc_distribution": {"cc_log_only": true}|cc_log_only: not supported' \
           '"cc_distribution": {"enable": true, "cc_hook": true}|unknown key "cc_hook"' \
           '"ur_distribution": 1|monitor.ur_distribution: expected true or false'; do
  printf '{"task": "monitor", "dump_path": "bad", "monitor": {%s}}\n' "${sec%%|*}" > bad.json
  "$nprobe" "${model[@]}" --steps 1 --dump-config bad.json > bad.log 2>&1; rc=$?
  [ $rc = 2 ] && grep -qF "${sec#*|}" bad.log && [ ! -e bad ] ||
    { echo "FAIL bad config ${sec%%|*}: exit $rc"; cat bad.log; fail=1; }
done

# -- kill -9: readable while running and after, up to the last finished step
cfg kill
"$nprobe" "${model[@]}" --steps 100000 --dump-config cfg_kill.json > kill.log 2>&1 &
pid=$!
seen=0
for _ in $(seq 1 300); do
  seen=$("$nprobe" monitor kill --format json 2>/dev/null | "$py" -c 'import json,sys; print(json.load(sys.stdin)["steps"])' 2>/dev/null || echo 0)
  [ "${seen:-0}" -ge 3 ] && break
  sleep 0.1
done
kill -9 $pid; wait $pid 2>/dev/null
[ "${seen:-0}" -ge 3 ] || { echo "FAIL kill: never read 3 steps while running"; cat kill.log; fail=1; }
"$nprobe" monitor kill > kill.mon; rc=$?
after=$(sed -n 's/.* \([0-9]*\) step(s).*/\1/p' kill.mon)
[ $rc = 0 ] && [ "${after:-0}" -ge "$seen" ] ||
  { echo "FAIL kill: after SIGKILL exit $rc, $after steps (read $seen while running)"; cat kill.mon; fail=1; }
"$py" - <<'PY' || fail=1
import h5py
with h5py.File("kill/monitor_rank0.h5", "r", swmr=True) as f:
    st = f["steps"][()]
    assert len(st) >= 3 and (st["step"] == range(len(st))).all(), st
    assert st["records"][-1] <= len(f["records"]) and st["keys"][-1] <= len(f["keys"])
print("kill -9: ok")
PY
[ $fail = 0 ] && echo "test_dist_monitor: ok"
exit $fail
