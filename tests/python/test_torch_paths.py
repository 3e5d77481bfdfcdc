"""test_torch_paths.py - the Python package takes paths as Python does.

PrecisionDebugger's config_path and ConfigChecker's output_zip_path and
shell_path are handed to libnprobe as bytes. They must accept what open()
accepts (str, bytes, os.PathLike, a file name that is not UTF-8) and refuse
what open() refuses: a path with an embedded NUL was cut at the NUL by C
(config_path "c\\0.json" opened the file "c"), a bytes output path wrote a
file literally named "b'x.zip'", a pathlib.Path raised AttributeError. Each
case checks what was read or written on disk. $NPROBE_LIB naming another
shared library is an ImportError saying it is not libnprobe; module names
holding a NUL are dumped under distinct names.
"""
import os
import pathlib
import sys
import tempfile

import h5py
import torch

from nprobe.torch import ConfigChecker, PrecisionDebugger

FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what)


def one_step(cfg):
    """One forward/backward of a Linear under a debugger made from cfg;
    returns the exception raised, or None."""
    try:
        dbg = PrecisionDebugger(config_path=cfg)
    except Exception as e:  # noqa: BLE001 - the test inspects the type
        return e
    model = torch.nn.Linear(3, 2)
    dbg.start(model)
    model(torch.ones(1, 3)).sum().backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    return None


def config(path, dump_path):
    with open(path, "wb") as f:
        f.write(b'{"task":"statistics","dump_path":"%s","step":[0],"level":"L1"}' % dump_path)


def dumped(d):
    p = os.path.join(d, "step0", "rank0", "dump.h5")
    if not os.path.exists(p):
        return False
    with h5py.File(p, "r") as f:
        return len(f["entries"]) > 0


def check_debugger():
    config("c.json", b"d_path")
    e = one_step(pathlib.Path("c.json"))
    check(e is None and dumped("d_path"), "config_path as pathlib.Path: %r" % e)
    config("b.json", b"d_bytes")
    e = one_step(b"b.json")
    check(e is None and dumped("d_bytes"), "config_path as bytes: %r" % e)
    config(b"\xff.json", b"d_latin")
    e = one_step(os.fsdecode(b"\xff.json"))
    check(e is None and dumped("d_latin"), "config_path not UTF-8: %r" % e)
    # "c" is a valid config: C would open it when the path is cut at the NUL
    config("c", b"d_cut")
    e = one_step("c\0.json")
    check(isinstance(e, ValueError) and "config_path" in str(e) and "null" in str(e),
          "config_path with a NUL: %r" % e)
    check(not os.path.exists("d_cut"), "config_path with a NUL: the file cut at the NUL was used")
    e = one_step(3)
    check(isinstance(e, TypeError) and "config_path" in str(e), "config_path 3: %r" % e)


def check_config_checker():
    model = torch.nn.Linear(3, 2)
    with open("hp.txt", "w") as f:
        f.write('{"lr": 0.1}\n')
    ConfigChecker(model, output_zip_path=pathlib.Path("p.zip"), shell_path=pathlib.Path("hp.txt"))
    check(os.path.getsize("p.zip") > 0, "output_zip_path as pathlib.Path: no p.zip")
    ConfigChecker(model, output_zip_path=b"q.zip")
    check(os.path.exists("q.zip") and not os.path.exists("b'q.zip'"),
          "output_zip_path as bytes: %r" % sorted(os.listdir(".")))
    try:
        ConfigChecker(model, output_zip_path="r\0.zip")
        e = None
    except ValueError as x:
        e = x
    check(e is not None and "output_zip_path" in str(e), "output_zip_path with a NUL: %r" % e)
    check(not os.path.exists("r"), "output_zip_path with a NUL: wrote the file cut at the NUL")


def check_wrong_library():
    """$NPROBE_LIB naming a shared library that is not libnprobe (zlib):
    an ImportError saying so (an AttributeError 'undefined symbol' before)."""
    import ctypes.util
    import subprocess
    z = ctypes.util.find_library("z")
    if not z:
        return
    env = dict(os.environ, NPROBE_LIB=z)
    env.pop("LD_PRELOAD", None)
    p = subprocess.run([sys.executable, "-c", "import nprobe"], env=env, capture_output=True,
                       text=True, timeout=120)
    last = p.stderr.strip().splitlines()[-1:] or [""]
    check(p.returncode != 0 and last[0].startswith("ImportError") and "not libnprobe" in last[0],
          "NPROBE_LIB naming zlib: %r" % last[0])


def check_nul_module_names():
    """Two modules named 'a\\0b' and 'a\\0c' (torch's add_module takes a
    NUL): both dumped, under distinct names, the NUL as U+FFFD (C cut both
    to 'Module.a': the second's leaves were refused as duplicates)."""
    config("nul.json", b"d_nul")
    with open("nul.json") as f:
        cfg = f.read()
    with open("nul.json", "w") as f:
        f.write(cfg.replace('"L1"', '"L0"'))
    model = torch.nn.Sequential()
    model.add_module("a\0b", torch.nn.Linear(3, 2))
    model.add_module("a\0c", torch.nn.Linear(2, 2))
    dbg = PrecisionDebugger(config_path="nul.json")
    import warnings
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        dbg.start(model)
        model(torch.ones(1, 3)).sum().backward()
        dbg.stop()
        dbg.step()
        dbg.close()
    names = set()
    if dumped("d_nul"):
        with h5py.File(os.path.join("d_nul", "step0", "rank0", "dump.h5"), "r") as f:
            names = {r["name"].decode("utf-8", "replace") for r in f["entries"][...]}
    for m in ("a\ufffdb", "a\ufffdc"):
        check("Module.%s.Linear.forward.0.output.0" % m in names,
              "module %r: no forward output leaf in %r" % (m, sorted(names)[:6]))
    check(not [x for x in w if "dump error" in str(x.message)],
          "NUL module names: dump errors %r" % [str(x.message) for x in w])


def main():
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        check_debugger()
        check_config_checker()
        check_wrong_library()
        check_nul_module_names()
    print("%d failed" % len(FAILS))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
