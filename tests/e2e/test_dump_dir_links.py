#!/usr/bin/env python3
"""test_dump_dir_links.py - no folder symlink inside dump_path is followed
(issue 30).

A symbolic link planted as step0 (-> a folder outside dump_path holding a
dump.h5 of its own) or as step0/rank0: before, the dump wrote its step file
there and removed the dump.h5 it found (the round-1 fix refused file
symlinks only). Now the step is refused naming the link, the outside
folder is untouched (its dump.h5 byte for byte) and the dump stops there,
as after any write error (docs/FORMAT.md), exit 2. Checked for a statistics dump and for overflow_check (which clears
the steps it selects at their begin, overflowing or not).
"""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from nptest import check, finish, train_dump  # noqa: E402

ARGS = ["--model", "mlp", "--steps", "2", "--threads", "2"]


def listing(d):
    out = {}
    for base, _, files in os.walk(d):
        for f in files:
            p = os.path.join(base, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, d)] = fh.read()
    return out


def one(root, name, task, plant):
    outside = os.path.join(root, name + "_outside")
    os.makedirs(os.path.join(outside, "rank0"))
    with open(os.path.join(outside, "rank0", "dump.h5"), "wb") as f:
        f.write(b"not the dump's")
    before = listing(outside)
    dump = os.path.join(root, name)
    os.makedirs(os.path.join(dump, "step0"))
    if plant == "step":
        os.rmdir(os.path.join(dump, "step0"))
        os.symlink(outside, os.path.join(dump, "step0"))
    else:
        os.symlink(os.path.join(outside, "rank0"), os.path.join(dump, "step0", "rank0"))
    rc, so, se = train_dump(root, '{"task":"%s","dump_path":"./%s","step":[0,1],"level":"L1"}'
                            % (task, name), ARGS, name=name + ".json")
    what = "%s, symlinked %s" % (task, plant)
    check(listing(outside) == before, "%s: the folder outside dump_path changed: %s" %
          (what, sorted(listing(outside))))
    check(rc == 2 and "symbolic link" in se and "step0" in se,
          "%s: exit %d, stderr %r" % (what, rc, se[-400:]))
    check(not os.path.exists(os.path.join(outside, "rank0", "dump.h5.partial")) and
          not os.path.exists(os.path.join(outside, "dump.h5.partial")),
          "%s: a step file outside dump_path" % what)


def main():
    root = tempfile.mkdtemp(prefix="np_dirlinks_")
    try:
        one(root, "a", "statistics", "step")
        one(root, "b", "statistics", "rank")
        one(root, "c", "overflow_check", "step")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
