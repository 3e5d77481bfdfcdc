#!/usr/bin/env python3
"""test_cc_spill.py - config_check compare in bounded memory (issue 13).

Two packs whose hyperparameters.json holds a few thousand keys (nested
objects, arrays of scalars, arrays of objects, keys on one side only,
Unicode, a flattened key that collides with a nested one) are compared with
NPROBE_CC_SORT_BUDGET small enough that each side is sorted in many runs
spilled to temporary files and merged. The answer is computed here, in
Python, from the documented flattening rules (docs/CONFIG_CHECK.md): which
keys differ, the counts, every row of result.json, and the rows of the xlsx
(read with zipfile + xml, over the sheets "hyperparameters", "(2)", ...).
The same compare with the default budget gives the same bytes. A file size
limit while spilling: exit 2, one message, nothing left in the folder.
"""
import json
import os
import re
import shutil
import sys
import tempfile
import xml.etree.ElementTree as ET
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from nptest import check, finish, run  # noqa: E402

N = 1500 if os.environ.get("NP_SANITIZED") else 3000
BUDGET = "16384"
PER_SHEET = 2500


def hyper(side):
    """The hyperparameters of one side: mostly equal, some differing, some
    keys on one side only."""
    mul = 1 if side == "a" else 2
    hp = {}
    for i in range(N):
        v = i * mul if i % 97 == 0 else i
        g = "g%02d" % (i % 23)
        hp.setdefault(g, {})["k%05d" % i] = v
    hp["list"] = [1, 2, "x\u00e9", True, None, 1.5]
    hp["objs"] = [{"lr": 0.25, "name": "adam"}, {"lr": 0.5 if side == "a" else 0.125}]
    hp["only_" + side] = "here"
    hp["\u00e9t\u00e9"] = {"deep": {"er": side == "a"}}
    hp["empty"] = {}
    hp["g00/k00000"] = "collides"  # the flattened key of hp["g00"]["k00000"]: the later wins
    return hp


def flatten(out, prefix, v):
    """The documented rules: objects and arrays holding containers are walked
    ("a/b", "a/0"); every other value is a leaf, arrays of scalars written
    as compact JSON; the later of equal flattened keys wins."""
    def child(name, c):
        flatten(out, prefix + "/" + name if prefix else name, c)
    if isinstance(v, dict) and v:
        for k, c in v.items():
            child(k, c)
    elif isinstance(v, list) and any(isinstance(c, (dict, list)) for c in v):
        for i, c in enumerate(v):
            child(str(i), c)
    elif prefix:
        out[prefix] = v if isinstance(v, str) else json.dumps(v, separators=(",", ":"),
                                                              ensure_ascii=False)


def expected_rows():
    fa, fb = {}, {}
    flatten(fa, "", hyper("a"))
    flatten(fb, "", hyper("b"))
    rows = []
    for k in sorted(set(fa) | set(fb), key=lambda s: s.encode()):
        a, b = fa.get(k), fb.get(k)
        rows.append({"bench": a, "cmp": b, "key": k, "level": "pass" if a == b else "error"})
    return rows


def make_packs(root):
    rc, so, se = run(["config_check", "pack", "--no-python", "-o", "base.zip"], root)
    check(rc == 0, "pack: exit %d %s" % (rc, se))
    src = zipfile.ZipFile(os.path.join(root, "base.zip"))
    for side in "ab":
        with zipfile.ZipFile(os.path.join(root, side + ".zip"), "w", zipfile.ZIP_DEFLATED) as z:
            for it in src.infolist():
                if it.filename != "hyperparameters.json":
                    z.writestr(it.filename, src.read(it.filename))
            z.writestr("hyperparameters.json", json.dumps(hyper(side), ensure_ascii=False))


def xlsx_sheets(path):
    """{sheet name: [[cell text, ...], ...]} of an xlsx, with zipfile + xml."""
    ns = {"m": "http://schemas.openxmlformats.org/spreadsheetml/2006/main",
          "r": "http://schemas.openxmlformats.org/officeDocument/2006/relationships"}
    z = zipfile.ZipFile(path)
    rels = ET.fromstring(z.read("xl/_rels/workbook.xml.rels"))
    target = {r.get("Id"): r.get("Target") for r in rels}
    shared = []
    if "xl/sharedStrings.xml" in z.namelist():
        for si in ET.fromstring(z.read("xl/sharedStrings.xml")).findall("m:si", ns):
            shared.append("".join(t.text or "" for t in si.iter("{%s}t" % ns["m"])))
    out = {}
    for sh in ET.fromstring(z.read("xl/workbook.xml")).find("m:sheets", ns):
        rid = sh.get("{%s}id" % ns["r"])
        doc = ET.fromstring(z.read("xl/" + target[rid].lstrip("/").replace("xl/", "")))
        rows = []
        for row in doc.iter("{%s}row" % ns["m"]):
            cells = []
            for c in row.findall("m:c", ns):
                col = ord(re.match(r"[A-Z]+", c.get("r")).group(0)) - ord("A")
                while len(cells) < col:
                    cells.append(None)
                if c.get("t") == "inlineStr":
                    cells.append("".join(t.text or "" for t in c.iter("{%s}t" % ns["m"])))
                elif c.get("t") == "s":
                    cells.append(shared[int(c.find("m:v", ns).text)])
                else:
                    v = c.find("m:v", ns)
                    cells.append(v.text if v is not None else None)
            rows.append(cells)
        out[sh.get("name")] = rows
    return out


def check_json(root, want, env, tag):
    rc, so, se = run(["config_check", "compare", "a.zip", "b.zip", "-o", tag, "--format", "json"],
                     root, env=env)
    check(rc == 1, "%s: exit %d, want 1 (keys differ): %s" % (tag, rc, se))
    doc = json.load(open(os.path.join(root, tag, "result.json"), encoding="utf-8"))
    got = doc["items"]["hyperparameters"]["rows"]
    check(len(got) == len(want), "%s: %d rows, want %d" % (tag, len(got), len(want)))
    bad = [(g, w) for g, w in zip(got, want) if g != w]
    check(not bad, "%s: %d rows differ, first %r" % (tag, len(bad), bad[:1]))
    ndiff = sum(1 for w in want if w["level"] != "pass")
    line = [ln for ln in so.splitlines() if ln.startswith("hyperparameters")]
    check(line and ("%d differences" % ndiff) in line[0], "%s: summary line %r, want %d differences"
          % (tag, line, ndiff))
    check(doc["summary"]["hyperparameters"] == "error" and doc["summary"]["env"] == "pass",
          "%s: summary %r" % (tag, doc["summary"]))
    check(sorted(os.listdir(os.path.join(root, tag))) == ["result.json"],
          "%s: the folder holds %r" % (tag, os.listdir(os.path.join(root, tag))))
    return se


def main():
    root = tempfile.mkdtemp(prefix="np_ccspill_")
    try:
        make_packs(root)
        want = expected_rows()
        check(len(want) > N and sum(r["level"] == "error" for r in want) > N // 97,
              "the known answer is too small: %d rows" % len(want))
        # several spilled runs a side, merged; then the default budget
        se = check_json(root, want, {"NPROBE_CC_SORT_BUDGET": BUDGET}, "small")
        m = re.search(r"(\d+) sorted runs spilled", se)
        runs = int(m.group(1)) if m else 0
        se = check_json(root, want, {"NPROBE_CC_SORT_BUDGET": str(1 << 30)}, "big")
        m = re.search(r"(\d+) sorted runs spilled", se)
        runs_big = int(m.group(1)) if m else 0
        check(runs >= runs_big + 10, "%d runs with a %s byte budget, %d with a big one: the sides "
              "were not spilled in several runs" % (runs, BUDGET, runs_big))
        check_json(root, want, {}, "default")
        a = open(os.path.join(root, "small", "result.json"), "rb").read()
        b = open(os.path.join(root, "default", "result.json"), "rb").read()
        check(a == b, "result.json differs between the small budget and the default")

        # the xlsx: the same rows over the sheets "hyperparameters", "(2)", ...
        rc, so, se = run(["config_check", "compare", "a.zip", "b.zip", "-o", "x",
                          "--rows-per-sheet", str(PER_SHEET)], root, env={"NPROBE_CC_SORT_BUDGET": BUDGET})
        check(rc == 1, "xlsx: exit %d: %s" % (rc, se))
        sheets = xlsx_sheets(os.path.join(root, "x", "result.xlsx"))
        n_parts = (len(want) + PER_SHEET - 1) // PER_SHEET
        parts = ["hyperparameters"] + ["hyperparameters (%d)" % k for k in range(2, n_parts + 1)]
        check(all(p in sheets for p in parts) and "hyperparameters (%d)" % (n_parts + 1) not in sheets,
              "xlsx sheets %r, want %r" % (list(sheets), parts))
        rows = []
        for p in parts:
            body = sheets.get(p, [])
            check(body and body[0][:4] == ["key", "bench", "cmp", "level"], "%s: header" % p)
            rows += [r[:4] for r in body[1:]]

        def cell(v):
            return "(missing)" if v is None else v
        want_x = [[w["key"], cell(w["bench"]), cell(w["cmp"]), w["level"]] for w in want]
        bad = [(g, w) for g, w in zip(rows, want_x) if g != w]
        check(len(rows) == len(want_x) and not bad,
              "xlsx: %d rows (want %d), %d differ, first %r" % (len(rows), len(want_x), len(bad), bad[:1]))
        check(sorted(os.listdir(os.path.join(root, "x"))) == ["result.xlsx"],
              "xlsx: the folder holds %r" % os.listdir(os.path.join(root, "x")))

        # a file size limit while spilling: one message, exit 2, nothing left
        os.mkdir(os.path.join(root, "lim"))
        rc, so, se = run(["config_check", "compare", "a.zip", "b.zip", "-o", "lim", "--format", "json"],
                         root, env={"NPROBE_CC_SORT_BUDGET": BUDGET}, fsize=8192)
        msgs = [ln for ln in se.splitlines() if ln.startswith("nprobe: ")]
        check(rc == 2, "file size limit: exit %d, want 2: %s" % (rc, se))
        check(len(msgs) == 1 and "File too large" in msgs[0] and "temporary file" in msgs[0],
              "file size limit: messages %r" % msgs)
        check(os.listdir(os.path.join(root, "lim")) == [],
              "file size limit: left %r" % os.listdir(os.path.join(root, "lim")))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
