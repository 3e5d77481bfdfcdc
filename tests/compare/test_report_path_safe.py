#!/usr/bin/env python3
"""test_report_path_safe.py - compare's "report:" lines print the output
folder as the CLI prints every name (issue 30): control characters
escaped, never raw (an -o holding ESC [ 2 J cleared the terminal, a
newline forged a line of the summary)."""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from nptest import check, finish, run, train_dump  # noqa: E402


def main():
    root = tempfile.mkdtemp(prefix="np_outsafe_")
    try:
        rc, so, se = train_dump(root, '{"task":"statistics","dump_path":"./d","step":[0],'
                                '"level":"L1"}', ["--model", "mlp", "--steps", "1"])
        check(rc == 0, "nprobe train: exit %d: %s" % (rc, se))
        out = "o\x1b[2J\nreport: forged"
        for fmt in ("csv", "xlsx", "html"):
            rc, so, se = run(["compare", "-b", "d", "-c", "d", "-o", out, "--format", fmt],
                             root, text=False)
            check(rc == 0, "compare --format %s: exit %d: %r" % (fmt, rc, se[-300:]))
            lines = [l for l in so.split(b"\n") if b"report:" in l]
            check(lines and all(b"\x1b" not in l for l in lines) and
                  not any(l.startswith(b"report: forged") for l in so.split(b"\n")),
                  "compare --format %s printed the -o raw: %r" % (fmt, lines))
            check(os.path.isdir(os.path.join(root, out)),
                  "compare --format %s: the report folder was not written under its name" % fmt)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
