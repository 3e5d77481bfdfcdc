#!/usr/bin/env python3
"""calibrate_compare.py - measure the noise that nprobe compare's default
tolerances must stay above (docs/COMPARE.md, "Verdicts and tolerances").

For every model x seed x batch size: one step of `nprobe train` on the cpu in
fp32 (the reference) and on npu-sim in a low precision without a fault, both
dumped in tensor mode at level mix; `nprobe compare --format json`; then the
largest relative L2 error ||c - b|| / max(||b||, atol sqrt(n)) of any forward
row and of any gradient row, per model, against the level it is judged by.
Prints one line per model and kind and exits 1 when some row is an error or
some call a culprit (a false alarm).

usage: calibrate_compare.py NPROBE [--precision bf16|fp16] [--seeds N]
                            [--models mlp,cnn,gpt] [--keep DIR]
"""
import argparse
import glob
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

BATCHES = {"mlp": [4, 8, 16, 64], "cnn": [4, 8, 16, 32, 64], "gpt": [8]}
UNIT_ROUNDOFF = {"bf16": 2.0 ** -8, "fp16": 2.0 ** -11}
# the levels of compare/verdict.c: the dtype's error level for forward rows
# (and gradients of a model without a non-smooth op), 8 sqrt(u) for the
# gradients behind one
FORWARD_LEVEL = {"bf16": 0.1, "fp16": 0.02}


def train(nprobe, tmp, tag, model, seed, batch, device, precision):
    out = os.path.join(tmp, tag)
    shutil.rmtree(out, ignore_errors=True)
    cfg = out + ".json"
    with open(cfg, "w") as f:
        json.dump({"task": "tensor", "dump_path": out, "level": "mix", "step": [0]}, f)
    args = [nprobe, "train", "--model", model, "--steps", "1", "--threads", "1",
            "--seed", str(seed), "--batch", str(batch), "--device", device,
            "--precision", precision, "--dump-config", cfg]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return out


def compare(nprobe, tmp, bench, cmp):
    out = os.path.join(tmp, "out")
    shutil.rmtree(out, ignore_errors=True)
    rc = subprocess.run([nprobe, "compare", "-b", bench, "-c", cmp, "-o", out, "-q",
                         "--format", "json"]).returncode
    with open(glob.glob(os.path.join(out, "*.json"))[0]) as f:
        return rc, json.load(f)


def rel_l2(row, atol=1e-5):
    try:
        e, b = float(row["EucDist"]), float(row["Bench l2norm"])
    except (TypeError, ValueError):
        return None
    n = 1
    for d in json.loads(row["NPU Tensor Shape"] or "[]"):
        n *= d
    den = max(b, atol * math.sqrt(max(n, 1)))
    return e / den if den > 0 else (math.inf if e > 0 else 0.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("nprobe")
    ap.add_argument("--precision", default="bf16", choices=sorted(UNIT_ROUNDOFF))
    ap.add_argument("--seeds", type=int, default=12)
    ap.add_argument("--models", default="mlp,cnn,gpt")
    ap.add_argument("--keep", help="keep the work files in this directory")
    a = ap.parse_args()
    tmp = a.keep or tempfile.mkdtemp(prefix="np_calibrate_")
    os.makedirs(tmp, exist_ok=True)
    u = UNIT_ROUNDOFF[a.precision]
    worst = {}
    alarms = 0
    runs = 0
    try:
        for model in a.models.split(","):
            for seed in range(1, a.seeds + 1):
                for batch in BATCHES[model]:
                    b = train(a.nprobe, tmp, "ref", model, seed, batch, "cpu", "fp32")
                    c = train(a.nprobe, tmp, "cmp", model, seed, batch, "npu-sim", a.precision)
                    rc, j = compare(a.nprobe, tmp, b, c)
                    runs += 1
                    if j["summary"]["error"] or j["first_culprit"]:
                        alarms += 1
                        fc = j["first_culprit"]
                        print(f"false alarm: {model} seed {seed} batch {batch}: "
                              f"{j['summary']['error']} error rows, culprit "
                              f"{fc['call'] if fc else 'none'}", flush=True)
                    for r in j["rows"]:
                        row = dict(zip(j["headers"], r))
                        x = rel_l2(row)
                        if x is None:
                            continue
                        kind = "forward" if ".forward" in row["NPU Name"] else "gradient"
                        key = (model, kind)
                        if x > worst.get(key, (0,))[0]:
                            worst[key] = (x, seed, batch, row["NPU Name"])
                print(f"{model} seed {seed}: done", file=sys.stderr, flush=True)
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{a.precision} npu-sim vs cpu fp32, {runs} runs; u = {u:.3g}, sqrt(u) = {math.sqrt(u):.3g}")
    print(f"levels: forward {FORWARD_LEVEL[a.precision]}, gradients behind a non-smooth op "
          f"8 sqrt(u) = {8 * math.sqrt(u):.3g}")
    for (model, kind), (x, seed, batch, name) in sorted(worst.items()):
        print(f"{model:4s} {kind:9s} worst relative L2 {x:.3g} = {x / math.sqrt(u):.2f} sqrt(u)"
              f"  (seed {seed}, batch {batch}, {name})")
    print(f"false alarms: {alarms} of {runs} runs")
    return 1 if alarms else 0


if __name__ == "__main__":
    sys.exit(main())
