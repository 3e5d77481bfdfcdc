#!/usr/bin/env python3
"""gpt_reference_many.py RUNS - several runs of samples/torch/gpt_reference.py
in one process: RUNS holds one run's arguments a line (as on its command
line). Each run is gpt_reference.main() with its own PrecisionDebugger and
model, as in a process of its own; the interpreter, torch and the
package start once (a PyTorch process with a hooked model costs ~5 s of
start-up, more than a run of the tiny GPT). A run that fails is named
(FAIL: ...) and the others still run; exit 1 if any failed."""
import os
import shlex
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "samples", "torch"))
import gpt_reference  # noqa: E402


def main():
    with open(sys.argv[1]) as f:
        runs = [shlex.split(ln) for ln in f if ln.strip()]
    failed = 0
    for argv in runs:
        try:
            gpt_reference.main(argv)
        except SystemExit as e:     # argparse, or gpt_reference's own sys.exit(message)
            if e.code not in (0, None):
                print(f"FAIL: gpt_reference.py {shlex.join(argv)}: {e.code}")
                failed += 1
        except Exception:  # noqa: BLE001 (named and counted; the other runs go on)
            traceback.print_exc()
            print(f"FAIL: gpt_reference.py {shlex.join(argv)}")
            failed += 1
        finally:   # a run that failed while capturing leaves no debugger on for the next
            latest = getattr(sys.modules.get("nprobe.torch"), "PrecisionDebugger", None)
            if latest is not None and latest._latest is not None:
                latest._latest.close()
    print(f"gpt_reference_many.py: {len(runs) - failed} of {len(runs)} runs written")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
