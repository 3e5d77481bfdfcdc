#!/usr/bin/env python3
"""check_links.py - the link rule of issue 24 on the built files (ctest
check_links): the libraries that must not link the trainer (docs/CONTRACTS.md:
compare and its replay, the probe, config_check, dumpio, ...) and
libnprobe.so contain no object of np_runtime and call no function of it.

    check_links.py RUNTIME_LIB MONITOR_LIB LIBNPROBE_SO NAME=STATIC_LIB ...

- R: the global functions and data np_runtime's archive defines (nm);
- each NAME's archive: none of its undefined symbols is in R (so linking it
  never pulls a runtime object in, whatever else is on the link line);
- libnprobe.so: defines nothing of R and needs nothing of R;
- and, so that the check is seen to work: np_monitor (which does link the
  runtime: it observes the trainer) needs symbols of R.
Exit 0 clean, 1 with findings, 2 on usage or a missing tool.
"""
import os
import shutil
import subprocess
import sys


def nm(path, *flags):
    out = subprocess.run(["nm", *flags, path], check=True, capture_output=True, text=True).stdout
    syms = set()
    for line in out.splitlines():
        parts = line.split()
        if not parts or line.endswith(":"):
            continue  # an archive member's header
        syms.add(parts[-1])
    return syms


def main():
    if os.environ.get("NP_SANITIZED") == "1":
        print("SKIP: sanitized pass; check_links runs in the plain pass")
        return 77
    if len(sys.argv) < 5 or not shutil.which("nm"):
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        print("usage: check_links.py RUNTIME_LIB MONITOR_LIB LIBNPROBE_SO NAME=STATIC_LIB ...",
              file=sys.stderr)
        return 2
    runtime, monitor, shared, libs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    R = nm(runtime, "-g", "--defined-only")
    findings = []
    if len(R) < 50:
        findings.append(f"{runtime}: only {len(R)} global symbols read; is it np_runtime?")
    for spec in libs:
        name, _, path = spec.partition("=")
        used = nm(path, "-u") & R
        if used:
            findings.append(f"{name} calls the runtime: " + ", ".join(sorted(used)[:8]))
        print(f"{name}: {len(nm(path, '-u'))} undefined symbols, {len(used)} of them np_runtime's")
    defined = nm(shared, "--defined-only") & R
    needed = nm(shared, "-u", "-D") & R
    if defined:
        findings.append("libnprobe.so holds runtime code: " + ", ".join(sorted(defined)[:8]))
    if needed:
        findings.append("libnprobe.so needs runtime symbols: " + ", ".join(sorted(needed)[:8]))
    print(f"libnprobe.so: {len(defined)} runtime symbols defined, {len(needed)} needed")
    mon = nm(monitor, "-u") & R
    print(f"np_monitor (links the runtime on purpose): {len(mon)} runtime symbols needed")
    if not mon:
        findings.append("the check sees no runtime symbol needed by np_monitor, which observes the "
                        "trainer: the symbol sets are wrong")
    for f in findings:
        print(f)
    print(f"check_links: {len(findings)} finding(s)")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
