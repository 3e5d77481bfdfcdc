#!/usr/bin/env python3
"""hf_matrix.py - HF transformers models (tests/python/hf_models.py: Llama,
Qwen2, GPT-2, BERT, Mixtral; random weights, offline) dumped by nprobe's
PrecisionDebugger over a matrix of levels x tasks x precisions, one AdamW
step each, and optionally the same jobs dumped by msprobe and compared by
`nprobe compare` against msprobe's own `msprobe compare` csv.

    python3 scripts/tools/hf_matrix.py --nprobe build/release/nprobe OUT
        # nprobe: {llama,qwen2,gpt2,bert,mixtral} x {L1,mix} x
        # {statistics,tensor} x {fp32,bf16}: a table of rows, dump errors,
        # skipped leaves, `nprobe ls` and `nprobe compare fp32 bf16` exits
    python3 scripts/tools/hf_matrix.py --nprobe NPROBE --msprobe \\
            --tool build/release/tests/msprobe/msp_inspect --levels L0,L1,mix OUT
        # msprobe: the same jobs dumped by msprobe 26 (tests/python/
        # msprobe_train.py), each fp32/bf16 pair compared by nprobe and by
        # msprobe; every value msprobe prints checked against nprobe's
        # (tests/msprobe/check_compare.py)
    --models llama,bert  --levels L1  --tasks tensor  --precs fp32,bf16
        # a part of the matrix (tasks: statistics, tensor, md5)

Exit status 1 when any job has a dump error, a dump nprobe cannot list, a
compare that does not end 0 or 1, or (with --msprobe) a value that differs
from msprobe's. Run it with the project's Python (.venv: torch 2.13,
transformers, msprobe 26.2) and the package of this tree (PYTHONPATH=python,
NPROBE_LIB=build/release/lib/libnprobe.so, as tests/python/pyrun.sh sets
them). tests/python/test_msprobe_live.py runs a part of it in CI."""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
TESTS = os.path.join(SRC, "tests", "python")
sys.path.insert(0, TESTS)


def config(task, level):
    """msprobe's config.json for a task (md5: statistics with summary_mode)."""
    sec = "statistics" if task == "md5" else task
    c = {"task": sec, "dump_path": "unused", "rank": [], "step": [], "level": level,
         sec: {"scope": [], "list": [], "data_mode": ["all"]}}
    if task == "md5":
        c[sec]["summary_mode"] = "md5"
    return c


def write_config(out, task, level):
    path = os.path.join(out, "config_%s_%s.json" % (task, level))
    with open(path, "w") as f:
        json.dump(config(task, level), f)
    return path


def nprobe_job(model_name, task, level, prec, cfg, dump):
    """One step of model_name dumped by nprobe's PrecisionDebugger with the
    config cfg into dump: {"errors", "first", "skipped", "calls", "tensors",
    "warnings", "seconds", "loss"}."""
    import torch
    import hf_models
    from nprobe.torch import PrecisionDebugger
    t0 = time.time()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        dbg = PrecisionDebugger(config_path=cfg, dump_path=dump)
        model = hf_models.build(model_name, seed=0)
        batch = hf_models.batch(model_name, seed=1)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        dbg.start(model=model)
        opt.zero_grad()
        if prec == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(**batch).loss
        else:
            loss = model(**batch).loss
        loss.backward()
        opt.step()
        dbg.stop()
        dbg.step()
        dbg.close()
    ours = [str(w.message) for w in seen if "nprobe" in str(w.message)]
    s = dbg.summary or {}
    return {"errors": dbg._errors, "first": dbg._first_error, "skipped": s.get("skipped", 0),
            "calls": s.get("calls", 0), "tensors": s.get("tensors", 0), "warnings": ours,
            "seconds": time.time() - t0, "loss": float(loss.detach())}


def compare(nprobe, b, c, out):
    """`nprobe compare -b b -c c` (csv): exit code, rows, verdict counts, text."""
    p = subprocess.run([nprobe, "compare", "-b", b, "-c", c, "-o", out, "--format", "csv", "-q"],
                       capture_output=True, text=True, timeout=600)
    import csv
    rows = []
    for r in sorted(glob.glob(os.path.join(out, "*.csv"))):
        with open(r, newline="") as f:
            rows += list(csv.DictReader(f))
    verdicts = {}
    for r in rows:
        verdicts[r["Verdict"]] = verdicts.get(r["Verdict"], 0) + 1
    return p.returncode, rows, verdicts, p.stdout + p.stderr


def run_nprobe(a, out):
    bad = 0
    print("%-8s %-5s %-10s %-5s %7s %7s %6s %7s %4s %6s  %s" % (
        "model", "level", "task", "prec", "calls", "tensors", "errors", "skipped", "ls",
        "secs", "compare fp32 vs bf16"))
    for task in a.tasks:
        for level in a.levels:
            cfg = write_config(out, task, level)
            for m in a.models:
                dumps = {}
                for prec in a.precs:
                    d = os.path.join(out, "np", "%s_%s_%s_%s" % (m, task, level, prec))
                    shutil.rmtree(d, ignore_errors=True)
                    r = nprobe_job(m, task, level, prec, cfg, d)
                    p = subprocess.run([a.nprobe, "ls", d], capture_output=True, text=True,
                                       timeout=300)
                    ok = r["errors"] == 0 and p.returncode == 0 and r["calls"] > 0
                    bad += not ok
                    dumps[prec] = d
                    cmp_txt = ""
                    if prec == a.precs[-1] and len(a.precs) == 2:
                        o = os.path.join(out, "cmp_np_%s_%s_%s" % (m, task, level))
                        shutil.rmtree(o, ignore_errors=True)
                        rc, rows, v, text = compare(a.nprobe, dumps[a.precs[0]], d, o)
                        cmp_txt = "exit %d, %d rows %s" % (rc, len(rows), v)
                        if rc not in (0, 1) or not rows:
                            bad += 1
                            cmp_txt += " FAIL\n" + text[-2000:]
                    print("%-8s %-5s %-10s %-5s %7d %7d %6d %7d %4d %6.1f  %s" % (
                        m, level, task, prec, r["calls"], r["tensors"], r["errors"], r["skipped"],
                        p.returncode, r["seconds"], cmp_txt), flush=True)
                    if not ok:
                        print("  FAIL: %s; ls: %s" % (r["first"] or r["warnings"],
                                                      p.stderr.strip()[-500:]), flush=True)
    return bad


def run_msprobe(a, out):
    sys.path.insert(0, os.path.join(SRC, "tests", "msprobe"))
    import check_compare
    jobs = []
    for task in a.tasks:
        for level in a.levels:
            cfg = write_config(out, task, level)
            for m in a.models:
                for prec in a.precs:
                    d = os.path.join(out, "ms", "%s_%s_%s_%s" % (m, task, level, prec))
                    shutil.rmtree(d, ignore_errors=True)
                    jobs.append("%s,%s,%s,1,%s" % (cfg, m, prec, d))
    env = dict(os.environ, PYTHONWARNINGS="ignore::UserWarning:torch", TQDM_DISABLE="1")
    t0 = time.time()
    p = subprocess.run([sys.executable, os.path.join(TESTS, "msprobe_train.py")] + jobs, cwd=out,
                       env=env, capture_output=True, text=True)
    print("msprobe dumps: %d jobs, exit %d, %.0f s" % (len(jobs), p.returncode, time.time() - t0))
    if p.returncode:
        print(p.stderr[-3000:])
        return 1
    if len(a.precs) != 2:
        return 0
    pairs = []
    for task in a.tasks:
        for level in a.levels:
            for m in a.models:
                label = "%s_%s_%s" % (m, task, level)
                b, c = (os.path.join(out, "ms", "%s_%s_%s_%s" % (m, task, level, prec))
                        for prec in a.precs)
                for x in ("m_", "o_"):
                    shutil.rmtree(os.path.join(out, x + label), ignore_errors=True)
                pairs.append((label, task, b, c))
    t0 = time.time()
    csvs = check_compare.msprobe_compare_many(
        [(b, c, os.path.join(out, "m_" + label)) for label, _, b, c in pairs], out)
    print("msprobe compare: %d pairs, %.0f s" % (len(pairs), time.time() - t0))
    bad = 0
    for (label, task, b, c), oracle in zip(pairs, csvs):
        before = len(check_compare.failures)
        if oracle is None:
            print("%s: msprobe compare failed" % label)
            bad += 1
            continue
        if task == "md5":
            check_compare.check_md5_pair(label, a.nprobe, a.tool, b, c, oracle,
                                         os.path.join(out, "o_" + label))
        else:
            check_compare.check_pair(label, task, a.nprobe, a.tool, b, c, oracle,
                                     os.path.join(out, "o_" + label))
        for f in check_compare.failures[before:before + 10]:
            print("  FAIL:", f)
        bad += len(check_compare.failures) > before
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="a folder for the dumps and reports (made if absent)")
    ap.add_argument("--nprobe", required=True, help="the nprobe program (build/release/nprobe)")
    ap.add_argument("--models", default="llama,qwen2,gpt2,bert,mixtral")
    ap.add_argument("--levels", default="L1,mix")
    ap.add_argument("--tasks", default="statistics,tensor")
    ap.add_argument("--precs", default="fp32,bf16")
    ap.add_argument("--msprobe", action="store_true",
                    help="dump with msprobe instead, and check nprobe compare against msprobe's")
    ap.add_argument("--tool", help="msp_inspect (with --msprobe: names msprobe's leaves)")
    a = ap.parse_args()
    for k in ("models", "levels", "tasks", "precs"):
        setattr(a, k, getattr(a, k).split(","))
    os.makedirs(a.out, exist_ok=True)
    out = os.path.abspath(a.out)
    if a.msprobe:
        if not a.tool:
            ap.error("--msprobe needs --tool (msp_inspect)")
        bad = run_msprobe(a, out)
    else:
        bad = run_nprobe(a, out)
    print("hf_matrix: %s" % ("%d failed" % bad if bad else "all passed"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
