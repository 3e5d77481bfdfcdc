#!/usr/bin/env python3
"""test_dump_defects.py - what a dump says against itself is never passed
silently (issue 30).

One real dump (nprobe train, mlp, statistics, level mix, steps 0 and 1) is
the bench; each case is a copy edited with h5py, compared with the bench.
Every edit below was passed silently before (exit 0, every row a pass):

  - /entries rows whose statistics contradict themselves (nan_count -5 or
    above numel, posinf_count above numel, the three counts together above
    numel, min above max, a mean outside [min, max], a negative norm, a
    norm below the largest magnitude, max not a float32 value): that leaf's
    row is an error whose reason names the field and what was expected,
    exit 1; `nprobe ls` and `nprobe show` print the same defect;
  - root attributes outside the format (loss_scale 0, NaN, -1; complete 2;
    task "bogus"; world_size 0; rank at or above world_size): a note
    "Dump defect in the cmp file ... root attribute X is V (expected ...)",
    exit 1; ls and show print it;
  - a step{S}/rank{R} folder whose file says another step or rank: a note
    naming both, exit 1, and ls says it;
  - `compare --replicas` over a dump whose step 1 has a single complete
    rank (rank 1 killed: dump.h5.partial): step 0 is checked, step 1 is
    listed as not checked naming rank 1's partial file, exit 1 (not 2 for
    the whole run); a dump where no step has two ranks is still exit 2.
"""
import csv
import glob
import math
import os
import shutil
import sys
import tempfile

import h5py

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from nptest import check, finish, run, train_dump  # noqa: E402

LEAF = "Functional.linear.1.forward.output.0"  # 256 float32 elements


def compare(root, cmp_root, out):
    rc, so, se = run(["compare", "-b", "d", "-c", cmp_root, "-o", out, "--format", "csv",
                      "--step", "0"], root)
    rows = []
    for rep in glob.glob(os.path.join(root, out, "*.csv")):
        with open(rep, newline="") as f:
            rows += list(csv.DictReader(f))
    return rc, so + se, rows


def reason(rows, leaf):
    for r in rows:
        if r.get("NPU Name") == leaf:
            for k in ("Err_message", "Message", "Reason"):
                if k in r:
                    return r[k]
            return " ".join(str(v) for v in r.values())
    return ""


def copy(root, name):
    dst = os.path.join(root, name)
    shutil.copytree(os.path.join(root, "d"), dst)
    return os.path.join(dst, "step0", "rank0", "dump.h5")


def main():
    root = tempfile.mkdtemp(prefix="np_defects_")
    try:
        rc, so, se = train_dump(root, '{"task":"statistics","dump_path":"./d","step":[0,1],'
                                '"level":"mix"}', ["--model", "mlp", "--steps", "2", "--batch",
                                                   "4", "--log-every", "100"])
        if rc != 0:
            print("setup failed:", so, se)
            return 1
        rc, out, rows = compare(root, "d", "o_same")
        check(rc == 0 and "Dump defect" not in out, "baseline: exit %d\n%s" % (rc, out))

        # ---- rows whose statistics contradict themselves ----
        def row_case(name, edit, want):
            f = copy(root, name)
            with h5py.File(f, "r+") as h:
                e = h["entries"][...]
                k = [i for i, r in enumerate(e) if r["name"].decode() == LEAF][0]
                edit(e[k])
                h["entries"][...] = e
            rc, out, rows = compare(root, name, "o_" + name)
            why = reason(rows, LEAF)
            check(rc == 1 and "contradicts itself" in why and want in why,
                  "%s: exit %d, row reason %r (want %r)" % (name, rc, why, want))
            rc, so, se = run(["ls", name + "/step0/rank0/dump.h5"], root)
            check(rc == 0 and "DUMP DEFECT" in so and want in so,
                  "%s: ls does not say it (exit %d)" % (name, rc))
            rc, so, se = run(["show", name + "/step0/rank0/dump.h5", LEAF], root)
            check(rc == 0 and "DUMP DEFECT" in so and want in so,
                  "%s: show does not say it (exit %d)" % (name, rc))

        def setf(**kv):
            def fn(r):
                for k, v in kv.items():
                    r[k] = v(r) if callable(v) else v
            return fn
        row_case("nan_neg", setf(nan_count=-5), "nan_count -5 is outside [0, numel 256]")
        row_case("nan_big", setf(nan_count=300), "nan_count 300 is outside [0, numel 256]")
        row_case("pinf_big", setf(posinf_count=257), "posinf_count 257 is outside")
        row_case("counts_sum", setf(nan_count=200, neginf_count=100),
                 "nan_count + posinf_count + neginf_count = 300 exceeds numel 256")
        row_case("min_gt_max", setf(min=lambda r: r["max"] + 1.0), "is above max")
        row_case("mean_out", setf(mean=lambda r: r["max"] * 2 + 1.0), "is outside [min")
        row_case("norm_neg", setf(norm=-1.0), "norm -1 is negative")
        row_case("norm_small", setf(norm=lambda r: abs(r["max"]) / 4), "is below the largest")
        row_case("max_not_f32", setf(max=lambda r: r["max"] + 2.0 ** -40),
                 "is not a float32 value")

        # ---- root attributes outside the format ----
        def attr_case(name, attrs, want):
            f = copy(root, name)
            with h5py.File(f, "r+") as h:
                for k, v in attrs.items():
                    h.attrs[k] = v
            rc, out, rows = compare(root, name, "o_" + name)
            check(rc == 1 and "Dump defect in the cmp file" in out and want in out,
                  "%s: exit %d, want %r in\n%s" % (name, rc, want, out))
            rc, so, se = run(["ls", name + "/step0/rank0/dump.h5"], root)
            check("DUMP DEFECT: root attribute" in so and want in so,
                  "%s: ls does not say it (exit %d)\n%s" % (name, rc, so))
        attr_case("ls0", {"loss_scale": 0.0}, "loss_scale is 0 (expected a positive finite")
        attr_case("lsnan", {"loss_scale": math.nan}, "loss_scale is nan (expected")
        attr_case("lsneg", {"loss_scale": -1.0}, "loss_scale is -1 (expected")
        attr_case("complete2", {"complete": 2}, "complete is 2 (expected 0 or 1)")
        attr_case("task", {"task": "bogus"}, "task is 'bogus' (expected statistics")
        attr_case("world0", {"world_size": 0}, "world_size is 0 (expected at least 1)")
        attr_case("rank_ws", {"world_size": 1, "rank": 3}, "rank 3 is not below world_size 1")

        # ---- the folder says one step, the file another ----
        f = copy(root, "stepattr")
        with h5py.File(f, "r+") as h:
            h.attrs["step"] = 1
        rc, out, rows = compare(root, "stepattr", "o_stepattr")
        check(rc == 1 and "its step attribute is 1 but its folder is step0" in out,
              "step attribute against folder: exit %d\n%s" % (rc, out))
        rc, so, se = run(["ls", "stepattr"], root)
        check("the step attribute is 1 but the folder is step0" in so,
              "ls: step attribute against folder not said\n%s" % so)

        # ---- --replicas with a killed rank ----
        rep = os.path.join(root, "rep")
        for s in (0, 1):
            for r in (0, 1):
                os.makedirs(os.path.join(rep, "step%d" % s, "rank%d" % r))
                src = os.path.join(root, "d", "step%d" % s, "rank0", "dump.h5")
                name = "dump.h5.partial" if (s, r) == (1, 1) else "dump.h5"
                dst = os.path.join(rep, "step%d" % s, "rank%d" % r, name)
                shutil.copy(src, dst)
                with h5py.File(dst, "r+") as h:
                    h.attrs["rank"] = r
                    h.attrs["world_size"] = 2
                    if name.endswith(".partial"):
                        h.attrs["complete"] = 0
        rc, so, se = run(["compare", "--replicas", "rep"], root)
        check(rc == 1 and "step 0: replicas agree" in so and
              "step 1: not checked: one complete rank (rank 0); rank 1: dump.h5.partial only"
              in so, "--replicas with a killed rank: exit %d\n%s%s" % (rc, so, se))
        rc, so, se = run(["compare", "--replicas", "rep", "-q"], root)
        check(rc == 1 and "step 1: not checked" in so, "--replicas -q: exit %d\n%s" % (rc, so))
        rc, so, se = run(["compare", "--replicas", "rep/step1"], root)
        check(rc == 2 and "no step can be checked" in se,
              "--replicas with no checkable step: exit %d\n%s%s" % (rc, so, se))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
