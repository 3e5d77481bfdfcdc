#!/usr/bin/env python3
"""test_step_names.py - a folder named step01 is not step 1 (issue 30).

The readers took the digits after "step"/"rank" as the number, so step01
and step1 were both step 1: with both present compare paired whichever
came first (here a copy with every value scaled: hundreds of false error
rows and a false culprit), and ls listed step01. Only the number as
writers spell it (no leading zero) names a step or rank now; step01 and
rank007 are not dump folders.
"""
import os
import shutil
import sys
import tempfile

import h5py

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from nptest import check, finish, run, train_dump  # noqa: E402


def main():
    root = tempfile.mkdtemp(prefix="np_stepnames_")
    try:
        rc, so, se = train_dump(root, '{"task":"statistics","dump_path":"./d","step":[0,1],'
                                '"level":"L1"}', ["--model", "mlp", "--steps", "2",
                                                  "--threads", "2"])
        check(rc == 0, "train: exit %d %s" % (rc, se))
        shutil.copytree(os.path.join(root, "d"), os.path.join(root, "e"))
        # a decoy beside step1 (and rank007 beside rank0): every value scaled
        for decoy in ("step01", os.path.join("step1", "rank007")):
            src = os.path.join(root, "e", "step1")
            dst = os.path.join(root, "e", decoy)
            if decoy == "step01":
                shutil.copytree(src, dst)
                f = os.path.join(dst, "rank0", "dump.h5")
            else:
                shutil.copytree(os.path.join(src, "rank0"), dst)
                f = os.path.join(dst, "dump.h5")
            with h5py.File(f, "r+") as h:
                e = h["entries"][...]
                for k in ("max", "min", "mean", "norm"):
                    e[k] = e[k] * 3 + 1
                h["entries"][...] = e
        rc, so, se = run(["compare", "-b", "d", "-c", "e", "-o", "o", "--format", "csv"], root)
        check(rc == 0, "compare with decoys step01 and rank007: exit %d\n%s%s" % (rc, so, se))
        rc, so, se = run(["ls", "e"], root)
        check(rc == 0 and "step01" not in so and "rank007" not in so,
              "ls lists the decoys: exit %d\n%s" % (rc, so))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
