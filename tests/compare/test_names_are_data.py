#!/usr/bin/env python3
"""test_names_are_data.py - leaf names are user data (issue 13).

Names come from the program that was dumped. In csv and xlsx reports a name
starting with =, +, -, @ must not become a formula (a leading ' as OWASP's
CSV-injection advice says), while numbers stay numbers (negative ones
included). On a terminal (ls, show, the compare summary) control
characters are printed escaped, never raw.

A real tensor dump of the MLP is edited with h5py on both sides (so the
renamed leaves still pair); the cmp side drops fc2's bias so a call whose
name holds an escape sequence is the culprit the summary prints. A
config_check pack pair with a formula-like hyperparameter key checks the
config_check xlsx the same way. nprobe replay's csv and xlsx and its
terminal lines, the summary of a compare over several step/rank pairs and
the CLI's error messages are checked the same way.
"""
import csv
import glob
import os
import shutil
import sys
import tempfile

import h5py
import openpyxl

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from nptest import check, edit_table, finish, run as run_nprobe, train_dump  # noqa: E402

ESC_CALL = "Functional.\x1b[31mlinear.1.forward"
FORMULAS = {
    "Functional.relu.0.forward.output.0": "=HYPERLINK(\"x.example\",\"click\")",
    "Functional.relu.1.forward.output.0": "+SUM(1,2)",
    "Functional.relu.0.forward.input.0": "-2+3",
    "Functional.relu.1.forward.input.0": "@SUM(1)",
}


def run(args, cwd):
    return run_nprobe(args, cwd, text=False)


def edit(path, drop_bias):
    with h5py.File(path, "r+") as f:
        rows = f["entries"][...]
        names_before = [r["name"].decode() for r in rows]
        rows_all = rows
        keep = []
        for r in rows:
            name, call = r["name"].decode(), r["call"].decode()
            if drop_bias and name in ("Functional.linear.1.forward.input.2", "Functional.linear.1.backward.output.2",
                                      "Module.fc2.Linear.forward.0.parameters.bias",
                                      "Module.fc2.Linear.parameters_grad.bias"):
                keep.append(False)
                continue
            keep.append(True)
            if name in FORMULAS:
                r["name"] = FORMULAS[name].encode()
            if call == "Functional.linear.1.forward":
                r["call"] = ESC_CALL.encode()
                r["name"] = (ESC_CALL + name[len(call):]).encode()
        rows = rows[keep]
        for old, new in zip(names_before, [r["name"].decode() for r in rows_all]):
            if old != new and "data/" + old in f:
                f.move("data/" + old, "data/" + new)
        del f["entries"]
        f.create_dataset("entries", data=rows)
        calls = f["calls"][...]
        for c in calls:
            if c["call"].decode() == "Functional.linear.1.forward":
                c["call"] = ESC_CALL.encode()
        del f["calls"]
        f.create_dataset("calls", data=calls)


def rename_call(path, old, new):
    """Call `old` renamed `new` in /calls and in its leaves (name prefix)."""
    def leaves(rows, f):
        for r in rows:
            if r["call"].decode() == old:
                r["call"] = new.encode()
                r["name"] = (new + r["name"].decode()[len(old):]).encode()
        return rows

    def calls(rows, f):
        for c in rows:
            if c["call"].decode() == old:
                c["call"] = new.encode()
        return rows
    edit_table(path, "entries", leaves)
    edit_table(path, "calls", calls)


def check_replay(root, src):
    """nprobe replay: its csv/xlsx cells and its terminal lines."""
    r = os.path.join(root, "r.h5")
    shutil.copy(src, r)
    rename_call(r, "Functional.linear.0.forward", "@Functional.linear.0.forward")
    rename_call(r, "Functional.linear.2.forward", ESC_CALL.replace("linear.1", "linear.2"))
    rc, so, se = run(["replay", "r.h5", "-o", "rp", "--format", "csv,xlsx"], root)
    check(rc in (0, 1), "replay: exit %d %r" % (rc, se[-300:]))
    check(b"\x1b" not in so and b"\x1b" not in se, "replay printed a raw ESC")
    check(b"Functional.\\x1b[31mlinear.2.forward" in so, "replay: the escaped name is not printed: %r" % so)
    rep = glob.glob(os.path.join(root, "rp", "*.csv"))
    cells = [c for row in csv.reader(open(rep[0], newline="")) for c in row] if rep else []
    check("'@Functional.linear.0.forward" in cells, "replay csv: the @ call name is not neutralised")
    check(not any(c[:1] in ("=", "+", "@") for c in cells), "replay csv: a formula-like cell left as is")
    rep = glob.glob(os.path.join(root, "rp", "*.xlsx"))
    wb = openpyxl.load_workbook(rep[0]) if rep else None
    cells = [x.value for s in wb.worksheets for row in s.iter_rows() for x in row
             if isinstance(x.value, str)] if wb else []
    check("'@Functional.linear.0.forward" in cells, "replay xlsx: the @ call name is not neutralised")
    check(not any(c[:1] in ("=", "+", "@") for c in cells), "replay xlsx: a formula-like cell left as is")


def check_many_pairs(root, b, c):
    """The summary of a compare over several step/rank pairs; an error message."""
    for side, f in (("mb", b), ("mc", c)):
        for step in (0, 1):
            d = os.path.join(root, side, "step%d" % step, "rank0")
            os.makedirs(d)
            shutil.copy(f, os.path.join(d, "dump.h5"))
    rc, so, se = run(["compare", "-b", "mb", "-c", "mc", "-o", "out_many", "--format", "csv"], root)
    check(rc == 1, "compare of 2 pairs: exit %d, want 1" % rc)
    check(b"\x1b" not in so and b"\x1b" not in se, "compare of 2 pairs printed a raw ESC")
    check(b"step 0 rank 0" in so and b"Functional.\\x1b[31mlinear.1.forward" in so,
          "compare of 2 pairs: the escaped culprit is not in the summary: %r" % so[-600:])
    rc, so, se = run(["show", "b.h5", "no.such\x1b]0;pwned\x07leaf"], root)
    check(rc == 2 and b"\x1b" not in se and b"\x07" not in se and b"\\x1b]0;pwned\\x07" in se,
          "show of an unknown leaf: exit %d, stderr %r" % (rc, se))


def check_msprobe_header(root):
    """ls of a msprobe dump whose dump.json carries an escape in its task."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "msprobe"))
    import gen_msprobe
    d = os.path.join(root, "msp")
    gen_msprobe.write_dump(d, task="statistics", n_calls=2)
    js = os.path.join(d, "step0", "rank0", "dump.json")
    with open(js) as f:
        text = f.read()
    with open(js, "w") as f:
        f.write(text.replace('"task": "statistics"', '"task": "statistics\\u001b[2J"', 1))
    rc, so, se = run(["ls", "msp"], root)
    check(rc == 0 and b"\x1b" not in so and b"\\x1b[2J" in so,
          "ls of a msprobe dump: exit %d, the task's escape: %r" % (rc, so[:300]))


def main():
    root = tempfile.mkdtemp(prefix="np_names_")
    try:
        rc, so, se = train_dump(root, '{"task":"tensor","dump_path":"./d","step":[0],"level":"mix"}',
                                ["--model", "mlp", "--steps", "1", "--batch", "4", "--log-every",
                                 "100"])
        if rc != 0:
            print("setup failed", so, se)
            return 1
        src = os.path.join(root, "d", "step0", "rank0", "dump.h5")
        b, c = os.path.join(root, "b.h5"), os.path.join(root, "c.h5")
        shutil.copy(src, b)
        shutil.copy(src, c)
        edit(b, False)
        edit(c, True)

        # the terminal: ls, ls --calls, show, the compare summary
        for args in (["ls", "b.h5"], ["ls", "--calls", "b.h5"], ["ls", "--tree", "b.h5"],
                     ["show", "b.h5", ESC_CALL + ".output.0"]):
            rc, so, se = run(args, root)
            check(rc == 0, "nprobe %s: exit %d %r" % (" ".join(args), rc, se[-300:]))
            check(b"\x1b" not in so and b"\x1b" not in se, "nprobe %s printed a raw ESC" % " ".join(args))
            check(b"\\x1b[31m" in so, "nprobe %s: the escape is not shown as \\x1b" % " ".join(args))
        rc, so, se = run(["compare", "-b", "b.h5", "-c", "c.h5", "-o", "out", "--format", "xlsx,csv"], root)
        check(rc == 1, "compare: exit %d, want 1 (the dropped bias)" % rc)
        check(b"\x1b" not in so and b"\x1b" not in se, "compare printed a raw ESC")
        first = [l for l in so.decode().splitlines() if "first culprit:" in l]
        check(first and "Functional.\\x1b[31mlinear.1.forward" in first[0],
              "compare: the culprit's escaped name is not printed: %r" % first)

        # csv: formula-like names quoted, numbers (negative too) unquoted
        rep = glob.glob(os.path.join(root, "out", "*.csv"))
        rows = list(csv.DictReader(open(rep[0], newline=""))) if rep else []
        names = {r["NPU Name"] for r in rows}
        for want in FORMULAS.values():
            check("'" + want in names, "csv: %r is not neutralised" % want)
            check(want not in names, "csv: %r left as is" % want)
        neg = [r["NPU min"] for r in rows if r["NPU min"].startswith("-")]
        check(neg and all(float(v) < 0 for v in neg), "csv: negative numbers lost: %r" % neg[:3])
        check(not any(r["NPU min"].startswith("'") for r in rows), "csv: a number got a quote")

        # xlsx: the same cells are strings with the quote; numbers are numbers
        rep = glob.glob(os.path.join(root, "out", "*.xlsx"))
        wb = openpyxl.load_workbook(rep[0]) if rep else None
        ws = None
        if wb:
            ws = [wb[n] for n in wb.sheetnames if n not in ("summary", "calls")][0]
        vals = set()
        negs = 0
        if ws:
            hdr = [x.value for x in ws[1]]
            ni, mi = hdr.index("NPU Name"), hdr.index("NPU min")
            for row in ws.iter_rows(min_row=2):
                vals.add(row[ni].value)
                check(row[ni].data_type == "s", "xlsx: a name cell is not a string")
                if isinstance(row[mi].value, (int, float)) and row[mi].value < 0:
                    negs += 1
                check(not (isinstance(row[mi].value, str) and row[mi].value.startswith("'")),
                      "xlsx: a number got a quote")
        for want in FORMULAS.values():
            check("'" + want in vals, "xlsx: %r is not neutralised" % want)
        check(negs > 0, "xlsx: no negative number cell left")

        check_replay(root, src)
        check_msprobe_header(root)
        check_many_pairs(root, b, c)

        # config_check: a formula-like hyperparameter key in its xlsx
        for side, val in (("a", "1"), ("b", "2")):
            with open(os.path.join(root, side + ".txt"), "w") as f:
                f.write('{"=cmd|\' /C calc\'!A0": %s, "lr": -0.5}\n' % val)
            rc, so, se = run(["config_check", "pack", "--no-python", "--hyperparams", side + ".txt",
                              "-o", side + ".zip"], root)
            check(rc == 0, "config_check pack %s: exit %d %r" % (side, rc, se))
        rc, so, se = run(["config_check", "compare", "a.zip", "b.zip", "-o", "cc"], root)
        check(rc == 1, "config_check compare: exit %d, want 1" % rc)
        wb = openpyxl.load_workbook(os.path.join(root, "cc", "result.xlsx"))
        cells = [x.value for s in wb.worksheets for row in s.iter_rows() for x in row
                 if isinstance(x.value, str)]
        check(any(v.startswith("'=cmd") for v in cells), "config_check xlsx: the key is not neutralised")
        check(not any(v.startswith("=cmd") for v in cells), "config_check xlsx: the key left as a formula")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
