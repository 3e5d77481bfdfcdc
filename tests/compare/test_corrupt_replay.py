#!/usr/bin/env python3
"""test_corrupt_replay.py - a corrupt payload is not computed with (issue
13, no silent wrong verdict).

A GPT tensor dump whose payload Functional.linear.0.backward.output.1 (a
weight gradient) is scaled by 1.05 with h5py, its crc32 in /entries left as
written: compare makes that row an error ("do not match their crc32") and
leaves it out of the root cause. Before, the float64 replay behind compare
(and `nprobe replay`) read the same corrupt bytes without checking them and
named Functional.linear.0.backward the culprit with an isolated error of
~1e6 u: a flipped bit on disk became a wrong op. Now replay checks each
payload it reads against its crc32 and lists such a call as not
recomputable, naming the corrupt leaf.
"""
import csv
import glob
import os
import shutil
import sys
import tempfile

import h5py

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from nptest import check, finish, run, train_dump  # noqa: E402

LEAF = "Functional.linear.0.backward.output.1"
CALL = "Functional.linear.0.backward"


def main():
    root = tempfile.mkdtemp(prefix="np_corrupt_")
    try:
        rc, so, se = train_dump(root, '{"task":"tensor","dump_path":"./d","step":[0],"level":"mix"}',
                                ["--model", "gpt", "--layers", "1", "--width", "32", "--context",
                                 "16", "--batch", "2", "--steps", "1", "--threads", "2"])
        if rc != 0:
            print("setup failed", so, se)
            return 1
        b, c = os.path.join(root, "b.h5"), os.path.join(root, "c.h5")
        shutil.copy(os.path.join(root, "d", "step0", "rank0", "dump.h5"), b)
        shutil.copy(b, c)
        with h5py.File(c, "r+") as f:
            f["data"][LEAF][...] = f["data"][LEAF][...] * 1.05
        rc, so, se = run(["compare", "-b", b, "-c", c, "-o", "o", "--format", "csv"], root)
        rep = glob.glob(os.path.join(root, "o", "*.csv"))
        rows = list(csv.DictReader(open(rep[0], newline=""))) if rep else []
        row = [r for r in rows if r["NPU Name"] == LEAF]
        check(rc == 1 and row and row[0]["Verdict"] == "error" and "crc32" in row[0]["Reason"],
              "compare: exit %d, the corrupt row %r" % (rc, row[:1]))
        culprits = [r for r in rows if r["Culprit"] == "culprit" and r["NPU Name"].startswith(CALL)]
        check(not culprits and "isolated error" not in so,
              "compare named %s from its corrupt payload:\n%s" % (CALL, so))

        rc, so, se = run(["replay", c, "--top", "100"], root)
        mine = [l for l in so.splitlines() if CALL + ":" in l]
        check(rc == 0 and len(mine) == 1 and "not recomputable" in mine[0] and LEAF in mine[0]
              and "crc32" in mine[0],
              "replay of the corrupt dump: exit %d, lines of %s: %r" % (rc, CALL, mine))
        unreadable(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return finish()


def unreadable(root):
    """A deflated payload whose chunk is overwritten on disk cannot be read
    at all: compare and replay say so, and (sanitized pass, leak checking
    on) free the buffer the failed read had grown (issue 30: it leaked on
    every failed payload read, np_dumpio_read_checked/_read_values)."""
    rc, so, se = train_dump(root, '{"task":"tensor","dump_path":"./z","step":[0],"level":"L1",'
                            '"compression":"deflate"}',
                            ["--model", "mlp", "--steps", "1", "--threads", "2"], name="z.json")
    if rc != 0:
        check(False, "deflated dump: nprobe train exit %d: %s" % (rc, se))
        return
    b, c = os.path.join(root, "zb.h5"), os.path.join(root, "zc.h5")
    shutil.copy(os.path.join(root, "z", "step0", "rank0", "dump.h5"), b)
    shutil.copy(b, c)
    with h5py.File(c, "r") as f:
        name = max(f["data"], key=lambda k: f["data"][k].size)
        info = f["data"][name].id.get_chunk_info(0)
    with open(c, "r+b") as f:
        f.seek(info.byte_offset)
        f.write(b"\xa5" * info.size)
    rc, so, se = run(["replay", c, "--top", "100"], root)
    check(rc in (0, 1) and "AddressSanitizer" not in se and "LeakSanitizer" not in se,
          "replay of an unreadable payload: exit %d: %s" % (rc, se[-600:]))
    rc, so, se = run(["compare", "-b", b, "-c", c, "-o", "zo", "--format", "csv"], root)
    check(rc == 1 and "LeakSanitizer" not in se,
          "compare with an unreadable payload: exit %d: %s" % (rc, se[-600:]))


if __name__ == "__main__":
    sys.exit(main())
