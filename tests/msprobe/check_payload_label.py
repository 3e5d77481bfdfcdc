#!/usr/bin/env python3
"""tests/msprobe/check_payload_label.py - a .pt payload must be what
dump.json says it is (issue 13, no silent pass).

The genuine msprobe tensor dump (tests/fixtures/msprobe/tensor_fp32) is
compared against a copy of itself in which some .pt payloads are replaced
with torch.save (or zipfile) so that they no longer hold what their
dump.json item states: a float64, float16 or int64 payload under a float32
label (numel unchanged: before the fix compared with float32's tolerance
and passed), another shape with the same numel, a big-endian byte order, a
storage shorter than the tensor, a file that is not a zip, a pickle holding
a dict, a list or a number instead of a tensor, fewer elements. Each such
row must be an error whose reason names the file and what differs (both
dtypes, both shapes), every other row passes, and the exit status is 1.
A payload with byteorder 'little' (torch >= 2.1 writes it) still passes.
Usage: check_payload_label.py NPROBE"""
import csv
import glob
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(os.environ.get("NP_SOURCE_DIR", os.path.join(HERE, "..", "..")),
                   "tests", "fixtures", "msprobe", "tensor_fp32")
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg, file=sys.stderr)


def float_leaves(dump_json):
    """(leaf, data_name, shape) of the float32 tensors of >= 2 dims, 4+ elements."""
    with open(dump_json) as f:
        data = json.load(f)["data"]
    out = []

    def walk(x, name):
        if isinstance(x, dict):
            if "data_name" in x:
                if x.get("dtype") == "torch.float32" and len(x["shape"]) >= 2 and \
                        x["shape"][0] > 1 and x["shape"][-1] > 1:
                    out.append((x["data_name"][:-3], x["data_name"], x["shape"]))
                return
            for k, v in x.items():
                walk(v, k if not name else name + "." + k)
        elif isinstance(x, list):
            for i, v in enumerate(x):
                walk(v, name + "." + str(i))
    walk(data, "")
    return out


def rezip(path, edit):
    """Rewrite the .pt zip at path with edit(members: list of (name, bytes))."""
    with zipfile.ZipFile(path) as z:
        members = [(n, z.read(n)) for n in z.namelist()]
    members = edit(members)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for n, b in members:
            z.writestr(n, b)


def shorten_storage(members):
    return [(n, b[: len(b) // 2] if "/data/" in n else b) for n, b in members]


def with_byteorder(order):
    def edit(members):
        prefix = members[0][0].split("/")[0]
        return members + [(prefix + "/byteorder", order.encode())]
    return edit


def main():
    nprobe = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="np_ptlabel_")
    try:
        base, cmp = os.path.join(tmp, "base"), os.path.join(tmp, "cmp")
        shutil.copytree(FIX, base)
        shutil.copytree(FIX, cmp)
        dj = glob.glob(os.path.join(cmp, "step0", "*", "dump.json"))[0]
        data_dir = os.path.join(os.path.dirname(dj), "dump_tensor_data")
        leaves = float_leaves(dj)
        # case -> (edit of the tensor or the file, substrings the reason must hold)
        cases = [
            ("f64", lambda t, p: torch.save(t.double(), p), ["float64", "float32"]),
            ("f16", lambda t, p: torch.save(t.half(), p), ["float16", "float32"]),
            ("i64", lambda t, p: torch.save(t.long(), p), ["int64", "float32"]),
            ("shape", lambda t, p: torch.save(t.reshape(-1), p), ["shape"]),
            ("big_endian", lambda t, p: rezip(p, with_byteorder("big")), ["big"]),
            ("short_storage", lambda t, p: rezip(p, shorten_storage), ["member holds"]),
            ("not_zip", lambda t, p: open(p, "wb").write(b"\x00garbage" * 100), ["not a zip"]),
            ("dict", lambda t, p: torch.save({"t": t}, p), ["does not end with one tensor"]),
            ("list", lambda t, p: torch.save([t], p), ["does not end with one tensor"]),
            ("number", lambda t, p: torch.save(3, p), ["does not end with one tensor"]),
            ("fewer", lambda t, p: torch.save(t.reshape(-1)[1:].clone(), p), ["shape"]),
        ]
        if len(leaves) < len(cases) + 1:
            fail("the fixture has %d float32 leaves, %d needed" % (len(leaves), len(cases) + 1))
            return 1
        expect = {}
        for (case, edit, want), (leaf, data_name, shape) in zip(cases, leaves):
            p = os.path.join(data_dir, data_name)
            t = torch.load(p)
            edit(t, p)
            expect[leaf] = (case, want + [data_name])
            if case == "f64":
                expect[leaf][1].append("float64 payload under a float32 label")
            if case == "shape":
                expect[leaf][1].append(str(shape))
        # a byte order of 'little' (torch >= 2.1's member) is fine
        little_leaf, little_file, _ = leaves[len(cases)]
        rezip(os.path.join(data_dir, little_file), with_byteorder("little"))

        out = os.path.join(tmp, "out")
        p = subprocess.run([nprobe, "compare", "-b", base, "-c", cmp, "-o", out,
                            "--format", "csv"], capture_output=True, text=True, timeout=300)
        reports = glob.glob(os.path.join(out, "*.csv"))
        if p.returncode != 1 or len(reports) != 1:
            fail("exit %d (want 1), %d reports\n%s%s" % (p.returncode, len(reports), p.stdout,
                                                      p.stderr))
            return 1
        n_err = 0
        with open(reports[0], newline="") as f:
            for row in csv.DictReader(f):
                leaf = row["NPU Name"]
                reason = row["Reason"] + " " + row["Err_message"]
                if leaf in expect:
                    case, want = expect[leaf]
                    if row["Verdict"] != "error":
                        fail("%s (%s): verdict %s, want error (reason %r)"
                             % (case, leaf, row["Verdict"], reason))
                    for w in want:
                        if w not in reason:
                            fail("%s (%s): %r not in the reason %r" % (case, leaf, w, reason))
                    n_err += 1
                elif row["Verdict"] == "error":
                    fail("%s: an error though its payload is untouched: %r" % (leaf, reason))
                elif leaf == little_leaf and row["Verdict"] != "pass":
                    fail("byteorder little (%s): verdict %s" % (leaf, row["Verdict"]))
        if n_err != len(expect):
            fail("%d of the %d edited leaves in the report" % (n_err, len(expect)))
        want_line = "183 rows: %d pass, 0 warning, %d error" % (183 - len(expect), len(expect))
        if want_line not in p.stdout:
            fail("summary: %r not in\n%s" % (want_line, p.stdout))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("%d failure(s)" % len(failures), file=sys.stderr)
        return 1
    print("payloads against their dump.json labels: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
