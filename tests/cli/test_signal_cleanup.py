#!/usr/bin/env python3
"""test_signal_cleanup.py - a run stopped by a signal leaves no hidden
files in its output folder (issue 13, signals).

`nprobe compare` of 30 step pairs into -o (csv, json) and `nprobe replay
-o` are sent SIGTERM, SIGINT or SIGHUP as soon as their first report is
there. (xlsx is left out: while libzip rewrites a workbook to splice its
rows in, its own temporary beside it, which nprobe does not name, can
stay; docs/DEVELOPING.md.) Each must end by that signal (the exit status says so) and leave
in the folder only complete reports under their final names: no hidden
temporary (.NAME.PID.N.tmp) and no name reservation (.NAME.reserved); before,
both stayed behind. The reports finished before the signal stay complete.
"""
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from nptest import NPROBE, check, finish, train_dump  # noqa: E402


def stop_early(args, cwd, out, sig):
    """Run nprobe ARGS, send `sig` once out/ holds a report; the exit status."""
    p = subprocess.Popen([NPROBE] + args, cwd=cwd, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    deadline = time.time() + 120
    while p.poll() is None and time.time() < deadline:
        if glob.glob(os.path.join(cwd, out, "*_result_*")):
            p.send_signal(sig)
            break
        time.sleep(0.002)
    p.communicate(timeout=300)
    return p.returncode


def complete(path):
    if path.endswith(".json"):
        json.load(open(path))
    elif path.endswith(".xlsx"):
        with zipfile.ZipFile(path) as z:
            return z.testzip() is None
    elif path.endswith(".csv"):
        return len(open(path).read().splitlines()) > 1
    return True


def main():
    root = tempfile.mkdtemp(prefix="np_sig_")
    try:
        rc, so, se = train_dump(root, '{"task":"tensor","dump_path":"./b","step":[],"level":"L1"}',
                                ["--model", "mlp", "--steps", "30", "--batch", "4", "--log-every",
                                 "100"], name="s.json")
        if rc != 0:
            print("setup failed", so, se)
            return 1
        shutil.copytree(os.path.join(root, "b"), os.path.join(root, "c"))
        cases = [("compare", signal.SIGTERM), ("compare", signal.SIGINT),
                 ("compare", signal.SIGHUP), ("replay", signal.SIGTERM)]
        for i, (cmd, sig) in enumerate(cases):
            out = "o%d" % i
            args = (["compare", "-b", "b", "-c", "c", "-o", out, "--format", "csv,json"]
                    if cmd == "compare" else ["replay", "c", "-o", out, "--format", "csv,json"])
            rc = stop_early(args, root, out, sig)
            what = "%s stopped by %s" % (cmd, sig.name)
            check(rc == -sig, "%s: exit status %r, want the signal (%d)" % (what, rc, -sig))
            names = os.listdir(os.path.join(root, out))
            hidden = [n for n in names if n.startswith(".")]
            check(not hidden, "%s: hidden files left: %r" % (what, hidden))
            shown = [n for n in names if not n.startswith(".")]
            check(shown, "%s: no report written before the signal" % what)
            for n in shown:
                try:
                    ok = complete(os.path.join(root, out, n)) is not False
                except (ValueError, zipfile.BadZipFile):
                    ok = False
                check(ok, "%s: %s is not complete" % (what, n))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
