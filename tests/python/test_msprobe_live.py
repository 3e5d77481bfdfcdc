#!/usr/bin/env python3
"""tests/python/test_msprobe_live.py - msprobe itself as the oracle, live, on
HF transformers models built here (hf_models.py, random weights, offline).

One training script written for msprobe (msprobe_train.py) runs twice, side
by side: as it is, with msprobe's PrecisionDebugger, and with its import
lines changed to nprobe's (nothing else), on the same jobs: the same models,
weights, batches and config.json files, fp32 and CPU bf16 autocast, tasks
statistics / tensor / md5 (summary_mode) at levels L0, L1 and mix. Then:

- both runs end without error, nprobe's without a dump error, and print the
  same losses (neither dumper changes the training);
- `nprobe ls` and `nprobe compare` read every fresh msprobe dump (exit 0 or
  1, a report, every row paired by name);
- on msprobe's own pairs (fp32 against bf16 of one model), nprobe's metrics
  equal those of msprobe's own `msprobe compare` csv of the same pair to the
  digits msprobe prints (the checks of tests/msprobe/check_compare.py;
  statistics: Llama mix and Mixtral L1, BERT L0; tensor: GPT-2 mix, Llama
  L0 and Qwen2 L1), and in the md5 task each row's verdict is msprobe's
  (pass where msprobe says pass); msprobe's compares run in one process
  (msprobe_compare_many.py);
- nprobe's own dumps of the same jobs compare (fp32 against bf16).
In the sanitized pass (NP_SANITIZED=1; CI time) the first three jobs run
(level mix: the module and the API rows, in the statistics, tensor and md5
tasks: every C reading path of msprobe's dumps; Mixtral L1 and BERT L0 read
the same rows by the same code, in the plain pass) and every check above
but msprobe's compare as the oracle: that is Python (msprobe, pandas), and
the nprobe compare it checks is the one the sanitized pass runs on the same
pairs (csv), in the loop that reads them.
Skips (77) when msprobe or transformers is not importable.
Usage: test_msprobe_live.py NPROBE MSP_INSPECT"""
import csv
import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRC, "tests"))
sys.path.insert(0, os.path.join(SRC, "tests", "msprobe"))
from nptest import check, finish, foreign_env  # noqa: E402

# (model, task, level, steps): each dumped in fp32 and bf16 by both tools
JOBS = [("llama", "statistics", "mix", 2), ("gpt2", "tensor", "mix", 1),
        ("qwen2", "md5", "mix", 1), ("mixtral", "statistics", "L1", 1),
        ("bert", "statistics", "L0", 1)]
# the plain pass only (NP_SANITIZED unset; CI time): the tensor task at L0
# and L1, and msprobe's compare as the oracle of every job (the module
# docstring). scripts/tools/hf_matrix.py runs the whole matrix.
WIDE = os.environ.get("NP_SANITIZED", "0") != "1"
if WIDE:
    JOBS += [("llama", "tensor", "L0", 1), ("qwen2", "tensor", "L1", 1)]
else:   # level mix in each task (the module docstring)
    JOBS = JOBS[:3]
PRECS = ("fp32", "bf16")


def config(task, level):
    sec = "statistics" if task == "md5" else task
    c = {"task": sec, "dump_path": "unused", "rank": [], "step": [], "level": level,
         sec: {"scope": [], "list": [], "data_mode": ["all"]}}
    if task == "md5":
        c[sec]["summary_mode"] = "md5"   # msprobe 26's md5 task
    return c


def run_script(path, jobs, cwd, env):
    return subprocess.Popen([sys.executable, path] + jobs, cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def nprobe_compare(nprobe, b, c, out):
    p = subprocess.run([nprobe, "compare", "-b", b, "-c", c, "-o", out, "--format", "csv", "-q"],
                       capture_output=True, text=True, timeout=300)
    rows = []
    for r in sorted(glob.glob(os.path.join(out, "*.csv"))):
        with open(r, newline="") as f:
            rows += list(csv.DictReader(f))
    return p.returncode, p.stdout + p.stderr, rows


def main():
    nprobe, tool = sys.argv[1], sys.argv[2]
    for mod in ("msprobe", "transformers"):
        if importlib.util.find_spec(mod) is None:
            print("SKIP: %s is not importable (pip install mindstudio-probe transformers)" % mod)
            return 77
    import check_compare
    with tempfile.TemporaryDirectory(prefix="np_msp_live_") as tmp:
        ms_script = os.path.join(HERE, "msprobe_train.py")
        np_script = os.path.join(tmp, "nprobe_train.py")
        with open(ms_script) as f:
            text = f.read()
        # the only change: the import line
        changed = text.replace("from msprobe.pytorch import", "from nprobe.torch import")
        check(changed != text and changed.count("msprobe.pytorch") == 0,
              "msprobe_train.py: no msprobe import line to change")
        with open(np_script, "w") as f:
            f.write(changed)
        shutil.copy(os.path.join(HERE, "hf_models.py"), tmp)
        jobs = {"ms": [], "np": []}
        for model, task, level, steps in JOBS:
            cfg = os.path.join(tmp, "%s_%s.json" % (task, level))
            with open(cfg, "w") as f:
                json.dump(config(task, level), f)
            for prec in PRECS:
                for who in jobs:
                    jobs[who].append("%s,%s,%s,%d,%s" % (cfg, model, prec, steps, os.path.join(
                        tmp, who, "%s_%s_%s_%s" % (model, task, level, prec))))
        env = dict(os.environ, PYTHONWARNINGS="ignore::UserWarning:torch", TQDM_DISABLE="1")
        procs = {"ms": run_script(ms_script, jobs["ms"], tmp, foreign_env(env)),
                 "np": run_script(np_script, jobs["np"], tmp, env)}
        outs = {}
        for who, p in procs.items():
            out, err = p.communicate(timeout=600)
            outs[who] = out
            check(p.returncode == 0, "%s run: exit %d\n%s" % (who, p.returncode, err[-3000:]))
            if who == "np":
                check("dump error" not in err, "nprobe run: dump errors\n%s" % err[-3000:])
        losses = {who: [ln for ln in outs[who].splitlines() if " loss " in ln] for who in outs}
        strip = lambda ls: [ln.split(" ", 2)[:2] + [ln.rsplit(" ", 1)[1]] for ls_ in [ls] for ln in ls_]  # noqa
        check(len(losses["ms"]) == sum(s for *_, s in JOBS) * 2 and
              strip(losses["ms"]) == strip(losses["np"]),
              "losses under msprobe and nprobe differ:\n%s\n%s" % (losses["ms"], losses["np"]))

        # every fresh msprobe dump read by nprobe ls and compare
        oracles = []   # (label, task, bench, cmp): checked against msprobe's compare
        for model, task, level, _ in JOBS:
            ms = [os.path.join(tmp, "ms", "%s_%s_%s_%s" % (model, task, level, p)) for p in PRECS]
            npd = [os.path.join(tmp, "np", "%s_%s_%s_%s" % (model, task, level, p)) for p in PRECS]
            label = "%s_%s_%s" % (model, task, level)
            for d in ms:
                p = subprocess.run([nprobe, "ls", d], capture_output=True, text=True, timeout=120)
                check(p.returncode == 0 and ("level %s" % level) in p.stdout,
                      "nprobe ls %s: exit %d %s" % (d, p.returncode, p.stderr))
            rc, out, rows = nprobe_compare(nprobe, ms[0], ms[1], os.path.join(tmp, "c_" + label))
            unpaired = [r["NPU Name"] for r in rows if r["Match"] != "exact"]
            check(rc in (0, 1) and rows and not unpaired,
                  "msprobe %s: nprobe compare exit %d, %d rows, unpaired %s\n%s"
                  % (label, rc, len(rows), unpaired[:5], out))
            print("msprobe %s: nprobe compare exit %d, %d rows" % (label, rc, len(rows)))
            rc, out, nrows = nprobe_compare(nprobe, npd[0], npd[1],
                                            os.path.join(tmp, "n_" + label))
            check(rc in (0, 1) and nrows, "nprobe %s: compare exit %d\n%s" % (label, rc, out))
            if WIDE:
                oracles.append((label, task, ms[0], ms[1]))
        # msprobe's own compare of each pair (one process for all), the oracle
        csvs = check_compare.msprobe_compare_many(
            [(b, c, os.path.join(tmp, "m_" + label)) for label, _, b, c in oracles],
            tmp) if oracles else []
        for (label, task, b, c), oracle in zip(oracles, csvs):
            if oracle is None:
                continue
            if task == "md5":
                n = check_compare.check_md5_pair(label, nprobe, tool, b, c, oracle,
                                                 os.path.join(tmp, "o_" + label))
            else:
                n = check_compare.check_pair(label, task, nprobe, tool, b, c, oracle,
                                             os.path.join(tmp, "o_" + label))
            check(n > 100, "%s: only %d values checked against msprobe" % (label, n))
        for f in check_compare.failures:
            check(False, f)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
