#!/usr/bin/env python3
"""calib_sweep.py - issue 31's calibration corpus: clean pairs of HF
transformers models (tests/python/hf_corpus.py: built from config, random
weights, offline) must compare clean: no culprit, no error row.

    .venv/bin/python scripts/tools/calib_sweep.py [--nprobe build/release/nprobe]
        [--archs llama,gpt2,...] [--seeds 1,2,3,4] [--pairs bf16,fp16]
        [--weights init,trained] [--tasks statistics,tensor] [--levels L1,mix]
        [--no-identical] [--lr 1e-3] [--work DIR] [--keep] [--json FILE]
    .venv/bin/python scripts/tools/calib_sweep.py --summarize J1.json,J2.json

Per architecture, seed and weights (initial, or 10 fp32 AdamW steps both
runs load), it dumps an fp32 run and the bf16 (CPU autocast) and fp16 (CPU
autocast + torch.amp.GradScaler) runs of the same model and batch, 2 steps
each (step 1 runs on weights that already differ; AdamW at --lr, 1e-3 by
default: a larger one parts more weights at step 1), for every task and level,
and compares each low-precision run against the fp32 one (`nprobe compare
-b FP32 -c LOW`, replay on). Identical dumps: every tensor dump compared with
itself (`-b D -c D`), and a second bf16 tensor run at mix compared with the
first (two identical runs). Prints one line per compare and a table per
architecture x pair x task x level: pairs, error rows, culprits (and the
first one), and the worst ratio to the error level per call type (the
largest severity of a row of that API or module class; 1 = the level).
Exit 0 when nothing failed. Runs the dumps in this process (one torch
import); set PYTHONPATH to the tree's python/ and NPROBE_LIB to its
libnprobe.so, as tests/python/pyrun.sh does (done here when unset).
"""
import argparse
import collections
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nprobe", default=os.path.join(SRC, "build/release/nprobe"))
    ap.add_argument("--archs", default="llama,qwen2,gpt2,bert,mixtral,t5,vit,resnet")
    ap.add_argument("--seeds", default="1,2,3,4")
    ap.add_argument("--pairs", default="bf16,fp16")
    ap.add_argument("--weights", default="init,trained")
    ap.add_argument("--tasks", default="statistics,tensor")
    ap.add_argument("--levels", default="L1,mix")
    ap.add_argument("--no-identical", action="store_true")
    ap.add_argument("--lr", type=float, default=1e-3, help="the dumped steps' AdamW learning rate")
    ap.add_argument("--no-factor", action="store_true",
                    help="do not replay both sides of tensor pairs for the three-way factor")
    ap.add_argument("--work", default=None)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--json", default=None, help="write every compare's result here")
    ap.add_argument("--summarize", default=None, metavar="J1,J2,...",
                    help="print the condensed table (architecture x seed, weights, level) of "
                         "sweeps' --json files and exit; no dump is made")
    return ap.parse_args()


def summarize(paths):
    """One row per architecture and pair (bf16, fp16, same, rerun), one
    column per seed, weights and level: clean compares / compares, and the
    error rows and culprits of those that were not clean."""
    rs = []
    for p in paths:
        rs += json.load(open(p))
    cols = sorted({(r["seed"], r["weights"], r["level"]) for r in rs})
    rows = collections.OrderedDict()
    for r in rs:
        rows.setdefault((r["arch"], r["pair"].split(":")[0]), {}).setdefault(
            (r["seed"], r["weights"], r["level"]), []).append(r)
    print("| arch | pair | " + " | ".join("s%d %s %s" % c for c in cols) + " |")
    print("|---|---|" + "---|" * len(cols))
    for (arch, pair), by in rows.items():
        cells = []
        for c in cols:
            g = by.get(c, [])
            if not g:
                cells.append("-")
                continue
            clean = sum(1 for r in g if r["exit"] == 0 and not r["errors"] and not r["culprits"])
            cell = "%d/%d" % (clean, len(g))
            if clean < len(g):
                cell += " (%d err, %d cul)" % (sum(r["errors"] for r in g),
                                              sum(bool(r["culprits"]) for r in g))
            cells.append(cell)
        print("| %s | %s | %s |" % (arch, pair, " | ".join(cells)))
    bad = [r for r in rs if r["exit"] != 0 or r["errors"] or r["culprits"]]
    print("\n%d of %d compares clean" % (len(rs) - len(bad), len(rs)))
    for r in bad:
        print("- %s s%d %s %s %s %s: %d error rows, %s" % (r["arch"], r["seed"], r["weights"], r["task"],
                                                       r["level"], r["pair"], r["errors"],
                                                       r["first"] or "no culprit"))
    return 0


def call_type(leaf):
    """Functional.linear.3.backward.output.0 -> Functional.linear.backward;
    Module.h.0.attn.X.forward.0.output.0 -> Module.X.forward."""
    if leaf.startswith("Module."):
        m = re.match(r"Module\.(?:.*\.)?([^.]+)\.(forward|backward)\.\d+\.", leaf)
        return "Module.%s.%s" % m.groups() if m else leaf
    m = re.match(r"([^.]+\.[^.]+)\.\d+\.(forward|backward)\.", leaf)
    return "%s.%s" % m.groups() if m else leaf


def compare(nprobe, bench, cmp, out):
    """Runs nprobe compare; returns (exit code, error rows, culprits, first
    culprit, {call type: worst severity}, worst isolated ratio, text)."""
    shutil.rmtree(out, ignore_errors=True)
    p = subprocess.run([nprobe, "compare", "-b", bench, "-c", cmp, "-o", out, "--format", "json"],
                       capture_output=True, text=True)
    errors, culprits, first, worst, iso = 0, [], None, {}, 0.0
    for f in sorted(glob.glob(os.path.join(out, "compare_result_*.json"))):
        j = json.load(open(f))
        errors += j["summary"].get("error", 0)
        h = j["headers"]
        iv, ir = h.index("Verdict"), h.index("Reason")
        for c in ([j["first_culprit"]] if j.get("first_culprit") else []) + (j.get("culprits") or []):
            if c and c.get("call") and c["call"] not in culprits:
                culprits.append(c["call"])
                if first is None:
                    first = "%s: %s" % (c["call"], (c.get("reason") or "")[:160])
            r = c.get("isolated_ratio") if c else None
            if isinstance(r, (int, float)):
                iso = max(iso, r)
        # the severity is not a column: the reasons give the ratio to the
        # level ("... 0.0123 above 0.1"); a pass gives none
        for row in j["rows"]:
            if row[iv] == "pass":
                continue
            m = re.search(r"(?:by|error) ([0-9.e+-]+|inf) .*above (?:the warning level )?([0-9.e+-]+)",
                          row[ir] or "")
            if not m:
                continue
            try:
                s = float(m.group(1)) / float(m.group(2))
            except (ValueError, ZeroDivisionError):
                continue
            if "warning level" in row[ir]:
                s = s / 3.0  # the warning level is a third of the error level
            t = call_type(row[0] or row[1])
            worst[t] = max(worst.get(t, 0.0), s)
    return p.returncode, errors, culprits, first, worst, iso, p.stdout + p.stderr


def replay_ratios(nprobe, dump, out):
    """{(file's step, call): worst isolated error / budget} of `nprobe replay`."""
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run([nprobe, "replay", dump, "-o", out, "--format", "json"], capture_output=True)
    res = {}
    for f in glob.glob(os.path.join(out, "replay_result_*.json")):
        step = re.search(r"_step(\d+)_", f).group(1)
        j = json.load(open(f))
        h = j["headers"]
        ic, ie, ib = h.index("Call"), h.index("Isolated Error (u)"), h.index("Budget (u)")
        for row in j["rows"]:
            e, b = row[ie], row[ib]
            if isinstance(e, (int, float)) and isinstance(b, (int, float)) and b > 0:
                k = (step, row[ic])
                res[k] = max(res.get(k, 0.0), e / b)
    shutil.rmtree(out, ignore_errors=True)
    return res


def three_way(nprobe, bench, cmp):
    """(calls over their budget on the cmp side, the largest cmp/ref factor
    among them): how close the clean pair comes to the three-way factor."""
    rc, rb = replay_ratios(nprobe, cmp, cmp + ".rp_c"), replay_ratios(nprobe, bench, bench + ".rp_b")
    over = [(k, r) for k, r in rc.items() if r > 1]
    worst = 0.0
    for k, r in over:
        ref = rb.get(k)
        worst = max(worst, r / ref if ref else float("inf"))
    return len(over), worst, max(rc.values() or [0.0])


def main():
    a = parse()
    if a.summarize:
        return summarize(a.summarize.split(","))
    sys.path.insert(0, os.path.join(SRC, "tests/python"))
    sys.path.insert(0, os.path.join(SRC, "python"))
    os.environ.setdefault("NPROBE_LIB", os.path.join(os.path.dirname(os.path.abspath(a.nprobe)),
                                                     "lib/libnprobe.so"))
    import warnings
    warnings.filterwarnings("ignore")
    import hf_corpus
    work = a.work or tempfile.mkdtemp(prefix="calib_")
    os.makedirs(work, exist_ok=True)
    archs = a.archs.split(",")
    seeds = [int(s) for s in a.seeds.split(",")]
    lows = a.pairs.split(",")
    results = []
    fails = 0
    for arch in archs:
        for seed in seeds:
            for wt in a.weights.split(","):
                w = hf_corpus.trained_weights(arch, seed) if wt == "trained" else None
                for task in a.tasks.split(","):
                    for level in a.levels.split(","):
                        d = {}
                        for prec in ["fp32"] + lows:
                            d[prec] = os.path.join(work, "%s_s%d_%s_%s_%s_%s" % (arch, seed, wt, task, level, prec))
                            shutil.rmtree(d[prec], ignore_errors=True)
                            hf_corpus.dump(arch, d[prec], seed=seed, prec=prec, task=task, level=level, weights=w,
                                           lr=a.lr)
                        cases = [(low, d["fp32"], d[low]) for low in lows]
                        if not a.no_identical and task == "tensor":
                            cases += [("same:" + prec, d[prec], d[prec]) for prec in d]
                            if level == "mix" and "bf16" in d:
                                d2 = d["bf16"] + "_again"
                                shutil.rmtree(d2, ignore_errors=True)
                                hf_corpus.dump(arch, d2, seed=seed, prec="bf16", task=task, level=level, weights=w,
                                               lr=a.lr)
                                cases.append(("rerun:bf16", d["bf16"], d2))
                        for pair, b, c in cases:
                            code, err, cul, first, worst, iso, text = compare(a.nprobe, b, c, c + ".rep_" + pair.replace(":", "_"))
                            bad = code != 0 or err or cul
                            fails += bool(bad)
                            rec = dict(arch=arch, seed=seed, weights=wt, task=task, level=level, pair=pair, lr=a.lr,
                                       exit=code, errors=err, culprits=cul, first=first, worst=worst, iso=iso)
                            if task == "tensor" and pair in lows and not a.no_factor:
                                rec["over"], rec["factor"], rec["iso_max"] = three_way(a.nprobe, b, c)
                            results.append(rec)
                            print("%-7s s%d %-7s %-10s %-3s %-11s exit %d  %4d error rows  %s" %
                                  (arch, seed, wt, task, level, pair, code, err,
                                   ("culprit " + first) if first else "no culprit"), flush=True)
                            if code > 1:
                                print(text)
                            if a.json:  # as it goes: an interrupted sweep keeps what it did
                                json.dump(results, open(a.json, "w"), indent=1)
                        if not a.keep:
                            for p in list(d.values()) + glob.glob(d["fp32"][:-5] + "*"):
                                shutil.rmtree(p, ignore_errors=True)
    if a.json:
        json.dump(results, open(a.json, "w"), indent=1)
    # the table: architecture x pair x task x level
    print("\n| arch | pair | task | level | compares | exit 0 | error rows | with a culprit | worst ratio to the level (call type) | calls over budget / worst cmp:ref factor |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    groups = collections.OrderedDict()
    for r in results:
        pair = r["pair"].split(":")[0]
        groups.setdefault((r["arch"], pair, r["task"], r["level"]), []).append(r)
    for (arch, pair, task, level), rs in groups.items():
        worst = {}
        for r in rs:
            for t, s in r["worst"].items():
                worst[t] = max(worst.get(t, 0), s)
        top = sorted(worst.items(), key=lambda kv: -kv[1])[:2]
        fr = [r for r in rs if "factor" in r]
        print("| %s | %s | %s | %s | %d | %d | %d | %d | %s | %s |" % (
            arch, pair, task, level, len(rs), sum(r["exit"] == 0 for r in rs),
            sum(r["errors"] for r in rs), sum(bool(r["culprits"]) for r in rs),
            ", ".join("%.3g (%s)" % (s, t) for t, s in top) or "all pass",
            "%d / %.3g" % (sum(r["over"] for r in fr), max(r["factor"] for r in fr)) if fr else "-"))
    print("\n%d of %d compares clean" % (len(results) - fails, len(results)))
    if not a.work and not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
