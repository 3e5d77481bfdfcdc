#!/usr/bin/env python3
"""tests/python/msprobe_compare_many.py - msprobe's own `msprobe compare`
CLI, unmodified, run on several pairs in one Python process: each pair is
`msprobe compare -tp TARGET -gp GOLDEN -o OUT` given to msprobe's command-line
entry point (msprobe.msprobe.main) as its argv, one after the other, so that
msprobe's and torch's imports (~2.5 s of CPU a process) are paid once.

    msprobe_compare_many.py TARGET_JSON,GOLDEN_JSON,OUT ...

Prints `PAIR i: exit N` for each pair (N = 0 when msprobe returned or exited
0, else its exit code, or 1 for an exception) and exits 1 if any did not
end 0. The csv files are what msprobe writes into each OUT (the same bytes
as one `msprobe compare` process per pair: checked by hand on five pairs)."""
import os
import sys
import traceback


def main():
    from msprobe.msprobe import main as msprobe_main
    bad = 0
    for i, spec in enumerate(sys.argv[1:]):
        tp, gp, out = spec.split(",")
        os.makedirs(out, exist_ok=True)
        sys.argv = ["msprobe", "compare", "-tp", tp, "-gp", gp, "-o", out]
        try:
            msprobe_main()
            rc = 0
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except Exception:  # noqa: BLE001 - reported, the next pair still runs
            traceback.print_exc()
            rc = 1
        print("PAIR %d: exit %d" % (i, rc), flush=True)
        bad += rc != 0
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
