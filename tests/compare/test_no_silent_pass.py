#!/usr/bin/env python3
"""test_no_silent_pass.py - compare never passes what it did not compare.

A real tensor dump of the MLP (nprobe train) is the bench; the cmp is a copy
edited with h5py. Each case states what a user must see (issue 13, "No
silent pass", and issue 16 rule 1):
  - identical copy: exit 0, every row passes (the baseline: the edits below
    are what makes the difference);
  - an /entries row whose numel disagrees with its shape (-1, 0, 2^62), or
    whose has_data is 0 on one side: that leaf's row is an error naming the
    field (numel, has_data), exit 1;
  - every cmp leaf renamed: nothing paired, exit 1 (not 0), stderr says so
    and suggests --fuzzy / --mapping, the report carries the note;
  - fc2's bias dropped on the cmp side (its parameter, gradient and the
    matching linear input/gradient rows gone): those one-sided rows are
    errors and the first culprit is a call of fc2, at step 0 where nothing
    else differs;
  - msprobe dumps (tests/msprobe/gen_msprobe.py) are rows like any other:
    their null, string and scalar items are consistent 0-d rows, so a dump
    against itself passes (statistics, md5 and tensor task); a shape whose
    element count passes 64 bits is an error naming the shape (not a wrapped
    count); a tensor item whose data_name is dropped on one side is a
    has_data error.
"""
import csv
import glob
import os
import re
import shutil
import sys
import tempfile


HERE = os.path.dirname(os.path.abspath(__file__))

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from nptest import check, edit_table, finish, run, train_dump  # noqa: E402


def edit_rows(path, fn):
    edit_table(path, "entries", fn)


def set_field(name, field, value):
    def fn(rows, f):
        k = [i for i, r in enumerate(rows) if r["name"].decode() == name]
        assert k, name
        rows[k[0]][field] = value
        return rows
    return fn


def compare(root, case):
    out = os.path.join(root, "out_" + case)
    rc, so, se = run(["compare", "-b", "bench.h5", "-c", case + ".h5", "-o", out, "--format", "csv"],
                     root)
    reps = glob.glob(os.path.join(out, "*.csv"))
    rows = []
    if reps:
        with open(reps[0], newline="") as f:
            rows = list(csv.DictReader(f))
    return rc, so, se, rows


def row_of(rows, name):
    for r in rows:
        if r["NPU Name"] == name or r["Bench Name"] == name:
            return r
    return None


def msprobe_compare(root, b, c, out):
    rc, so, se = run(["compare", "-b", b, "-c", c, "-o", out, "--format", "csv"], root)
    reps = glob.glob(os.path.join(root, out, "*.csv"))
    rows = []
    if reps:
        with open(reps[0], newline="") as f:
            rows = list(csv.DictReader(f))
    return rc, so + se, rows


def edit_dump_json(path, fn):
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(fn(text))


def check_msprobe(root):
    sys.path.insert(0, os.path.join(HERE, "..", "msprobe"))
    import gen_msprobe
    for task in ("statistics", "md5", "tensor"):
        a, b = "msp_%s_a" % task, "msp_%s_b" % task
        for d in (a, b):
            gen_msprobe.write_dump(os.path.join(root, d), task=task, n_calls=3)
        rc, out, rows = msprobe_compare(root, a, b, "out_" + a)
        nones = [r for r in rows if r["Bench Dtype"] == "None"]
        check(rc == 0 and rows and all(r["Verdict"] == "pass" for r in rows),
              "msprobe %s dump against itself: exit %s, not every row passes: %s\n%s" %
              (task, rc, [(r["NPU Name"], r["Reason"]) for r in rows if r["Verdict"] != "pass"][:3], out))
        check(nones, "msprobe %s: the generated dump has no null item (the case is void)" % task)
    # an element count past 64 bits: an error naming the shape, the rest compared
    js = os.path.join(root, "msp_statistics_b", "step0", "rank0", "dump.json")
    edit_dump_json(js, lambda t: re.sub(r'"shape": \[\s*4,\s*16\s*\]',
                                        '"shape": [4000000000000000, 4000000000000000]', t, count=1))
    rc, out, rows = msprobe_compare(root, "msp_statistics_a", "msp_statistics_b", "out_msp_huge")
    bad = [r for r in rows if r["Verdict"] == "error"]
    check(rc == 1 and len(bad) == 1 and "overflows a 64-bit element count" in bad[0]["Reason"],
          "msprobe huge shape: exit %s, errors %s\n%s" % (rc, [(r["NPU Name"], r["Reason"]) for r in bad], out))
    # ls of a dump whose table cannot be read is not a listing: exit 2
    js = os.path.join(root, "msp_md5_b", "step0", "rank0", "dump.json")
    edit_dump_json(js, lambda t: t.replace('"data": {', '"data": [{', 1)[:-1] + ']}')
    rc, so, se = run(["ls", "msp_md5_b"], root)
    check(rc == 2 and "data: expected an object of calls" in se and "no readable dump file" in se,
          "ls of an unreadable dump.json: exit %s (want 2), stderr %r" % (rc, se[-300:]))
    # a tensor item without its payload on one side: has_data 0 there
    js = os.path.join(root, "msp_tensor_b", "step0", "rank0", "dump.json")
    leaf = "Functional.linear.0.forward.output.0"
    edit_dump_json(js, lambda t: t.replace('"data_name": "%s.pt"' % leaf, '"data_name": null', 1))
    rc, out, rows = msprobe_compare(root, "msp_tensor_a", "msp_tensor_b", "out_msp_nodata")
    r = row_of(rows, leaf)
    check(rc == 1 and r is not None and r["Verdict"] == "error" and "has_data is 0 on the cmp side" in r["Reason"],
          "msprobe tensor item without data_name on the cmp side: exit %s, row %r\n%s" %
          (rc, r and (r["Verdict"], r["Reason"]), out))


def main():
    root = tempfile.mkdtemp(prefix="np_nosilent_")
    try:
        rc, so, se = train_dump(root, '{"task":"tensor","dump_path":"./d","step":[0],"level":"mix"}',
                                ["--model", "mlp", "--steps", "1", "--batch", "4", "--log-every",
                                 "100"])
        if rc != 0:
            print("setup failed:", so, se)
            return 1
        bench = os.path.join(root, "bench.h5")
        shutil.copy(os.path.join(root, "d", "step0", "rank0", "dump.h5"), bench)

        def case_file(case):
            p = os.path.join(root, case + ".h5")
            shutil.copy(bench, p)
            return p

        # baseline
        case_file("same")
        rc, so, se, rows = compare(root, "same")
        check(rc == 0, "identical dumps: exit %s, want 0\n%s%s" % (rc, so, se))
        check(rows and all(r["Verdict"] == "pass" for r in rows), "identical dumps: a row is not pass")

        leaf = "Module.fc2.Linear.forward.0.output.0"  # (4, 64): 256 elements
        for label, value in (("numel_neg", -1), ("numel_zero", 0), ("numel_huge", 2 ** 62)):
            edit_rows(case_file(label), set_field(leaf, "numel", value))
            rc, so, se, rows = compare(root, label)
            r = row_of(rows, leaf)
            check(rc == 1, "%s: exit %s, want 1\n%s%s" % (label, rc, so, se))
            check(r is not None and r["Verdict"] == "error", "%s: the row of %s is not an error" % (label, leaf))
            check(r is not None and ("numel %d disagrees with shape (4, 64) = 256" % value) in r["Reason"],
                  "%s: reason does not name numel: %r" % (label, r and r["Reason"]))

        edit_rows(case_file("has_data"), set_field(leaf, "has_data", 0))
        rc, so, se, rows = compare(root, "has_data")
        r = row_of(rows, leaf)
        check(rc == 1, "has_data 0 on the cmp side: exit %s, want 1\n%s%s" % (rc, so, se))
        check(r is not None and r["Verdict"] == "error" and "has_data is 0 on the cmp side" in r["Reason"],
              "has_data 0: row " + repr(r and (r["Verdict"], r["Reason"])))

        # nothing paired
        def rename(rows, f):
            for r in rows:
                r["name"] = b"Z" + r["name"][:254]
                r["call"] = b"Z" + r["call"][:254]
            return rows
        edit_rows(case_file("renamed"), rename)
        rc, so, se, rows = compare(root, "renamed")
        check(rc == 1, "nothing paired: exit %s, want 1 (not a pass)\n%s%s" % (rc, so, se))
        check("nothing was paired" in se and "--fuzzy" in se and "--mapping" in se,
              "nothing paired: stderr does not say so: %r" % se)
        check("Nothing was paired" in so, "nothing paired: the pair's note is missing: %r" % so)

        # a dropped bias: fc2's bias leaves exist on the bench only
        dropped = {"Module.fc2.Linear.forward.0.parameters.bias", "Module.fc2.Linear.parameters_grad.bias",
                   "Functional.linear.1.forward.input.2", "Functional.linear.1.backward.output.2"}
        edit_rows(case_file("no_bias"), lambda rows, f: rows[[r["name"].decode() not in dropped for r in rows]])
        rc, so, se, rows = compare(root, "no_bias")
        check(rc == 1, "dropped bias: exit %s, want 1\n%s%s" % (rc, so, se))
        for name in sorted(dropped):
            r = row_of(rows, name)
            check(r is not None and r["Verdict"] == "error" and "only the bench has this" in r["Reason"],
                  "dropped bias: row %s is %s" % (name, repr(r and (r["Verdict"], r["Reason"]))))
        first = [l for l in so.splitlines() if "first culprit:" in l]
        check(first and ("linear.1" in first[0] or "fc2" in first[0]),
              "dropped bias: the first culprit is not a call of fc2: %r" % first)
        # the other rows still pass: only the evidence is an error
        others = [r for r in rows if r["Bench Name"] not in dropped]
        check(others and all(r["Verdict"] == "pass" for r in others),
              "dropped bias: rows other than the bias leaves do not all pass")
        check_msprobe(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
