#!/usr/bin/env python3
"""test_names_json_html.py - names are user data in the JSON and HTML
reports (issue 13).

A real tensor dump of the MLP is edited with h5py on both sides: the call
Functional.linear.1.forward is renamed to a name holding </script>, a
<script> that would mark the page, U+2028, quotes, a backslash, a control
character and bytes that are not UTF-8; a leaf is renamed to an <img> whose
onerror would mark the page. The cmp side drops fc2's bias, so the
hostile call is the culprit the page puts in its headline and tree.

- compare's json report (and replay's, config_check's result.json) must
  be valid JSON read strictly (UTF-8 decoding without errors="replace"),
  the names in it equal to the bytes decoded with U+FFFD for each byte that
  is not UTF-8, and U+2028/U+2029 escaped (a raw one breaks a JavaScript
  consumer);
- the HTML page opened in headless Chromium (check_html.py): the page's own
  script ran, no script from the data ran (no data-pwned attribute), no
  <img>/<script>/on* attribute came from the data, no console message, and
  the culprit node shows the name as text;
- the summary JSON of a compare under mpirun holds the culprit (jansson
  refused the name: the first_culprit key went missing before);
- msprobe dump.json names: a 1 MB call name is a clear error naming the
  file (exit 2, no crash, no report); two calls whose names differ only
  after a \u0000 stay two calls (the NUL ended the name: they became one);
  a name with a newline is printed escaped by ls and valid in the json.
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

import h5py

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
from nptest import NPROBE, check, finish, train_dump  # noqa: E402
PY = os.environ.get("NP_PYTHON", sys.executable)
PWN = b"document.body.setAttribute('data-pwned','1')"
CALL = (b"Functional.x</script><script>" + PWN + b"</script>\xe2\x80\xa8\"q'\\\x01\xff"
        b"\xc3.1.forward")
LEAF = b"<img src=x onerror=\"" + PWN + b"\">\xe2\x80\xa9.0"


def text(b):
    """What a reader must show for the bytes b: U+FFFD for each invalid byte."""
    return b.decode("utf-8", "replace")


def run(args, cwd, env=None):
    p = subprocess.run(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       stdin=subprocess.DEVNULL, timeout=300, env=env)
    return p.returncode, p.stdout, p.stderr


def edit(path, drop_bias):
    old = b"Functional.linear.1.forward"
    with h5py.File(path, "r+") as f:
        rows = f["entries"][...]
        keep = []
        moves = []
        for r in rows:
            name, call = bytes(r["name"]), bytes(r["call"])
            if drop_bias and name in (b"Functional.linear.1.forward.input.2",
                                      b"Functional.linear.1.backward.output.2",
                                      b"Module.fc2.Linear.forward.0.parameters.bias",
                                      b"Module.fc2.Linear.parameters_grad.bias"):
                keep.append(False)
                continue
            keep.append(True)
            new = name
            if call == old:
                r["call"] = CALL
                new = CALL + name[len(old):]
            elif name == b"Functional.relu.0.forward.output.0":
                new = LEAF
            if new != name:
                r["name"] = new
                moves.append((name, new))
        rows = rows[keep]
        for a, b in moves:
            if "data/" + a.decode() in f:
                # h5py names are str: a name that is not UTF-8 goes in as bytes
                f["data"][b] = f["data/" + a.decode()][...]
                del f["data/" + a.decode()]
        del f["entries"]
        f.create_dataset("entries", data=rows)
        calls = f["calls"][...]
        for c in calls:
            if bytes(c["call"]) == old:
                c["call"] = CALL
        del f["calls"]
        f.create_dataset("calls", data=calls)


def strings(x):
    if isinstance(x, str):
        yield x
    elif isinstance(x, dict):
        for k, v in x.items():
            yield k
            yield from strings(v)
    elif isinstance(x, list):
        for v in x:
            yield from strings(v)


def strict_json(path, want=(), what=""):
    raw = open(path, "rb").read()
    check(b"\xe2\x80\xa8" not in raw and b"\xe2\x80\xa9" not in raw,
          "%s: a raw U+2028/U+2029 in the JSON" % what)
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        check(False, "%s: not valid JSON (%s)" % (what, e))
        return None
    found = set(strings(doc))
    for w in want:
        check(any(w in s for s in found), "%s: %r not in the JSON" % (what, w))
    return doc


def msprobe_variant(root, name, rename):
    """A copy of the msprobe dump root/msp_a with dump.json's calls renamed."""
    shutil.copytree(os.path.join(root, "msp_a"), os.path.join(root, name))
    p = os.path.join(root, name, "step0", "rank0", "dump.json")
    with open(p) as f:
        d = json.load(f)
    d["data"] = {rename.get(k, k): v for k, v in d["data"].items()}
    with open(p, "w") as f:
        json.dump(d, f)


def check_msprobe_names(root):
    sys.path.insert(0, os.path.join(HERE, "..", "msprobe"))
    import gen_msprobe
    gen_msprobe.write_dump(os.path.join(root, "msp_a"), task="statistics", n_calls=3)
    l0, l1 = "Functional.linear.0.forward", "Functional.linear.1.forward"
    msprobe_variant(root, "msp_big", {l1: "Functional." + "x" * (1 << 20) + ".1.forward"})
    rc, so, se = run([NPROBE, "compare", "-b", "msp_a", "-c", "msp_big", "-o", "o_big",
                      "--format", "json"], root)
    check(rc == 2 and b"msp_big/step0/rank0/dump.json" in se and b"longer than" in se
          and len(se) < 4000, "a 1 MB msprobe name: exit %d, stderr %r" % (rc, se[:300]))
    check(not glob.glob(os.path.join(root, "o_big", "*.json")), "a 1 MB name: a report written")
    msprobe_variant(root, "msp_nul", {l0: "Functional.a\u0000b.0.forward",
                                      l1: "Functional.a\u0000c.0.forward"})
    rc, so, se = run([NPROBE, "ls", "--calls", "msp_nul"], root)
    calls = {l.split()[2] for l in so.decode("utf-8", "replace").splitlines()
             if "Functional.a" in l}
    check(rc == 0 and len(calls) == 2, "names differing after a NUL: %d distinct calls\n%s"
          % (len(calls), so.decode("utf-8", "replace")))
    msprobe_variant(root, "msp_nl", {l1: "Functional.a\nb\r.1.forward"})
    rc, so, se = run([NPROBE, "ls", "msp_nl"], root)
    check(rc == 0 and b"Functional.a\\x0ab\\x0d.1.forward" in so and b"a\nb" not in so,
          "a name with a newline: ls exit %d %r" % (rc, so[:400]))
    rc, so, se = run([NPROBE, "compare", "-b", "msp_a", "-c", "msp_nl", "-o", "o_nl",
                      "--format", "json"], root)
    rep = glob.glob(os.path.join(root, "o_nl", "*.json"))
    check(rc in (0, 1) and len(rep) == 1, "a name with a newline: compare exit %d" % rc)
    if rep:
        strict_json(rep[0], ("Functional.a\nb\r.1.forward",), "msprobe newline json")


def main():
    root = tempfile.mkdtemp(prefix="np_names_jh_")
    try:
        rc, so, se = train_dump(root, '{"task":"tensor","dump_path":"./d","step":[0],"level":"mix"}',
                                ["--model", "mlp", "--steps", "1", "--batch", "4", "--log-every",
                                 "100"])
        if rc != 0:
            print("setup failed", so, se)
            return 1
        src = os.path.join(root, "d", "step0", "rank0", "dump.h5")
        for side, drop in (("b", False), ("c", True)):
            d = os.path.join(root, side, "step0", "rank0")
            os.makedirs(d)
            shutil.copy(src, os.path.join(d, "dump.h5"))
            edit(os.path.join(d, "dump.h5"), drop)

        rc, so, se = run([NPROBE, "compare", "-b", "b", "-c", "c", "-o", "out", "--format",
                          "json,html"], root)
        check(rc == 1, "compare: exit %d, want 1 (the dropped bias)\n%s" % (rc, se[-500:]))
        rep = glob.glob(os.path.join(root, "out", "*.json"))
        check(len(rep) == 1, "compare: %d json reports" % len(rep))
        if rep:
            strict_json(rep[0], (text(CALL), text(LEAF)), "compare json")
        page = glob.glob(os.path.join(root, "out", "*.html"))
        check(len(page) == 1, "compare: %d html pages" % len(page))
        if page:
            culprit = text(CALL).replace("\x01", "\ufffd")
            rc, so, se = run([PY, os.path.join(HERE, "check_html.py"), page[0], "--culprit",
                              culprit, "--no-attr", "data-pwned"], root)
            if rc == 77:
                print("chromium missing: the page is checked as text only")
            else:
                check(rc == 0, "the page in chromium:\n%s%s" % (so.decode(), se.decode()[-800:]))
            raw = open(page[0], "rb").read()
            check(PWN + b"</script>" not in raw and b"<img src=x" not in raw,
                  "the page holds the data's markup unescaped")

        # replay's json report on the hostile cmp side
        rc, so, se = run([NPROBE, "replay", "c", "-o", "rp", "--format", "json"], root)
        check(rc in (0, 1), "replay: exit %d %r" % (rc, se[-300:]))
        rep = glob.glob(os.path.join(root, "rp", "*.json"))
        check(len(rep) == 1, "replay: %d json reports" % len(rep))
        if rep:
            strict_json(rep[0], (text(CALL),), "replay json")

        # config_check's result.json: keys with quotes, backslashes, controls
        key = 'k"\\\u0001\u2028'
        for side, val in (("a", "1"), ("b", "2")):
            with open(os.path.join(root, side + ".txt"), "w") as f:
                json.dump({key: val}, f)
            rc, so, se = run([NPROBE, "config_check", "pack", "--no-python", "--hyperparams",
                              side + ".txt", "-o", side + ".zip"], root)
            check(rc == 0, "config_check pack %s: exit %d %r" % (side, rc, se))
        rc, so, se = run([NPROBE, "config_check", "compare", "a.zip", "b.zip", "-o", "cc",
                          "--format", "json"], root)
        check(rc == 1, "config_check compare: exit %d, want 1" % rc)
        strict_json(os.path.join(root, "cc", "result.json"), (key,), "config_check json")

        # the summary of a compare under mpirun
        if shutil.which("mpirun"):
            env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
            rc, so, se = run(["mpirun", "--oversubscribe", "-n", "2", NPROBE, "compare", "-b", "b",
                              "-c", "c", "-o", "mpi", "--format", "json"], root, env)
            check(rc == 1, "mpirun compare: exit %d %r" % (rc, se[-500:]))
            summ = glob.glob(os.path.join(root, "mpi", "compare_summary_*.json"))
            check(len(summ) == 1, "mpirun compare: %d summaries" % len(summ))
            if summ:
                doc = strict_json(summ[0], (text(CALL),), "mpirun summary")
                fc = (doc or {}).get("first_culprit") or {}
                check(fc.get("call") == text(CALL), "mpirun summary: first_culprit %r" % fc)
        check_msprobe_names(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
