#!/usr/bin/env python3
"""pymany.py RUNS - several Python scripts' runs in one process: RUNS holds
one run a line, `SCRIPT ARGS...` (shell quoting), each run as `python3
SCRIPT ARGS...` would run it (runpy as __main__, a fresh module namespace,
sys.argv and sys.path[0] its own), one after the other. A PyTorch process
whose debugger hooks a model costs ~5 s to start (torch, torch._dynamo),
more than a run of the tests' tiny models: CI time. A debugger a run left
open is closed after it (its steps are complete on disk, as at its
process's exit). A run that fails is named (FAIL: ...) and the others still
run; exit 1 if any failed. Run it through pyrun.sh."""
import os
import runpy
import shlex
import sys
import traceback


def close_debuggers():
    """Close what a run's PrecisionDebugger left open, as its process's exit would."""
    nt = sys.modules.get("nprobe.torch")
    latest = getattr(getattr(nt, "PrecisionDebugger", None), "_latest", None)
    if latest is not None:
        latest.close()


def run(argv):
    """One run; None when it ended well, else what went wrong."""
    saved = sys.argv, list(sys.path)
    sys.argv = argv
    sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
    try:
        runpy.run_path(argv[0], run_name="__main__")
        return None
    except SystemExit as e:     # argparse, sys.exit(main()), sys.exit(message)
        return None if e.code in (0, None) else "exit %s" % (e.code,)
    except Exception:  # noqa: BLE001 (named and counted; the other runs go on)
        return traceback.format_exc()
    finally:
        sys.argv, sys.path[:] = saved
        close_debuggers()


def main():
    with open(sys.argv[1]) as f:
        runs = [shlex.split(ln) for ln in f if ln.strip()]
    failed = 0
    for argv in runs:
        err = run(argv)
        if err is not None:
            print("FAIL: %s: %s" % (shlex.join(argv), err), flush=True)
            failed += 1
    print("pymany.py: %d of %d runs ended well" % (len(runs) - failed, len(runs)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
