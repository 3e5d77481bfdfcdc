#!/usr/bin/env python3
"""check_layout.py - the layout rules of issue 24, checked (ctest check_layout):

1. no include circle between the files of one product directory
   (a.h includes b.h includes a.h);
2. no call circle between the files of one product directory: file A calls
   a function defined (not static) in file B, and B, directly or through
   others of the directory, calls one defined in A;
3. no product function longer than MAX_LINES lines (from the line of its
   name to its closing brace).

Offenders in the directories other sessions were editing when the check
came (compare/, replay/) are on ALLOW, dated: the list may only shrink. A
listed function that is now short enough, or gone, is an error too, so the
list stays true.

    scripts/tools/check_layout.py [SOURCE_ROOT]      exit 0 clean, 1 with findings
    scripts/tools/check_layout.py --self-test        the checks fire on a made-up tree

The C parsing is lexical, for this code base's style (clang-format:
a function's opening brace on its own line at column 0, its closing brace
at column 0); comments, strings and preprocessor lines are blanked first.
"""
import os
import re
import sys

PRODUCT_DIRS = ["include/nprobe", "include/internal/nprobe", "common", "msprobe", "dumpio", "ops", "runtime", "ckpt", "probe",
                "replay", "compare", "configcheck", "profile", "monitor", "cli", "libnprobe"]
MAX_LINES = 120

# dir/file:function -> lines when listed (2026-11-28, issue 24: compare/
# and replay/ were being edited by other sessions; split them, then drop
# their rows). Empty since compare/ became a chain of stages.
ALLOW = {}
# call circles listed the same way (sorted files of the circle, joined by
# ", "). Empty since configcheck/'s compare.c <-> report.c
# (np_cc_result_level in util.c) and cli/'s cmd_compare.c <-> compare_mpi.c
# (the report writers in compare_reports.c) are gone.
ALLOW_CIRCLES = set()
ALLOW_DATE = "2026-11-28"

KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "do", "else", "case",
            "_Static_assert", "defined", "__attribute__", "_Pragma", "typeof", "__typeof__",
            "_Alignof", "_Generic"}


def blank(text):
    """Comments, string and char literals, preprocessor lines -> spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c == "#":
            # a preprocessor line, with its continuations
            j = i
            while j < n and text[j] != "\n":
                if text[j] == "\\" and j + 1 < n and text[j + 1] == "\n":
                    j += 2
                    out.append("\n")
                    continue
                j += 1
            out.append(" " * 0)
            i = j
            continue
        if c == "/" and i + 1 < n and text[i + 1] == "*":
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if c == "/" and i + 1 < n and text[i + 1] == "/":
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * 0 + c)
            i = j + 1
            continue
        out.append(c)
        if c == "\n":
            at_line_start = True
        elif not c.isspace():
            at_line_start = False
        i += 1
    return "".join(out)


def functions(text):
    """[(name, first_line, last_line, is_static)] of the function definitions."""
    lines = text.split("\n")
    found = []
    i = 0
    while i < len(lines):
        if lines[i].startswith("{") and i > 0:
            # the signature: back to the line that starts at column 0
            j = i - 1
            while j > 0 and (lines[j][:1].isspace() or lines[j] == ""):
                j -= 1
            sig = " ".join(lines[j:i])
            m = None
            for m in re.finditer(r"([A-Za-z_]\w*)\s*\(", sig):
                if m.group(1) not in KEYWORDS and not m.group(1).startswith("__"):
                    break
            k = i + 1
            while k < len(lines) and not lines[k].startswith("}"):
                k += 1
            if m and "=" not in sig.split("(")[0] and not sig.lstrip().startswith(("typedef", "struct", "enum", "union")):
                found.append((m.group(1), j + 1, k + 1, bool(re.match(r"\s*(static|inline static)\b", sig))))
            i = k + 1
            continue
        i += 1
    return found


def cycles(graph):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def check_dir(root, d, findings, long_funcs, seen_circles):
    path = os.path.join(root, d)
    files = sorted(f for f in os.listdir(path) if f.endswith((".c", ".h")))
    raw = {f: open(os.path.join(path, f), encoding="utf-8", errors="replace").read() for f in files}
    clean = {f: blank(raw[f]) for f in files}
    # include graph between the directory's files
    # (the public headers name each other "nprobe/x.h": the directory's own prefix)
    own = os.path.basename(d) + "/"
    inc = {f: {m[len(own):] if m.startswith(own) else m
               for m in re.findall(r'^\s*#\s*include\s+"([^"]+)"', raw[f], re.M)} for f in files}
    inc = {f: {m for m in ms if m in raw and m != f} for f, ms in inc.items()}
    for comp in cycles(inc):
        findings.append(f"include circle in {d}/: " + " -> ".join(comp))
    # call graph: file -> files defining (non-static) functions it calls
    defs, funcs = {}, {}
    for f in files:
        if f.endswith(".c"):
            funcs[f] = functions(clean[f])
            for name, _, _, static in funcs[f]:
                if not static:
                    defs.setdefault(name, f)
    calls = {}
    for f in files:
        if not f.endswith(".c"):
            continue
        used = set(re.findall(r"\b([A-Za-z_]\w*)\s*\(", clean[f]))
        calls[f] = {defs[u] for u in used if u in defs and defs[u] != f}
    for comp in cycles(calls):
        key = f"{d}/: " + ", ".join(comp)
        if key in ALLOW_CIRCLES:
            seen_circles.add(key)
            continue
        findings.append(f"call circle in {d}/: " + ", ".join(comp) + " (" + "; ".join(
            f"{a} -> {b}" for a in comp for b in sorted(calls[a]) if b in comp) + ")")
    for f, fl in funcs.items():
        for name, first, last, _ in fl:
            n = last - first + 1
            if n > MAX_LINES:
                long_funcs[f"{d}/{f}:{name}"] = (n, first)


def self_test():
    """A tree with each kind of finding: the checker must report all three."""
    import tempfile
    with tempfile.TemporaryDirectory() as t:
        os.mkdir(os.path.join(t, "ops"))
        def w(name, text):
            with open(os.path.join(t, "ops", name), "w") as f:
                f.write(text)
        w("a.h", '#include "b.h"\n')
        w("b.h", '#include "a.h"\n')
        w("a.c", '/* "x(" */\nint fa(void)\n{\n    return fb();\n}\n')
        body = "".join(f"    x += {i};\n" for i in range(MAX_LINES))
        w("b.c", "static int x;\nint fb(void)\n{\n    return fa();\n}\n\nvoid long_one(void)\n{\n"
          + body + "}\n")
        # public headers that name each other by their directory's prefix
        os.makedirs(os.path.join(t, "include", "nprobe"))
        for a, b in (("x.h", "y.h"), ("y.h", "x.h")):
            with open(os.path.join(t, "include", "nprobe", a), "w") as f:
                f.write(f'#include "nprobe/{b}"\n#include "nprobe/common.h"\n')
        findings, long_funcs, seen = [], {}, set()
        check_dir(t, "ops", findings, long_funcs, seen)
        check_dir(t, "include/nprobe", findings, long_funcs, seen)
        ok = (any(f.startswith("include circle in ops/: a.h -> b.h") for f in findings)
              and any(f.startswith("include circle in include/nprobe/: x.h -> y.h") for f in findings)
              and any(f.startswith("call circle in ops/: a.c, b.c") for f in findings)
              and list(long_funcs) == ["ops/b.c:long_one"]
              and long_funcs["ops/b.c:long_one"][0] == MAX_LINES + 3)
        print("\n".join(findings), long_funcs)
        print("check_layout self-test:", "ok" if ok else "FAILED")
        return 0 if ok else 1


def main():
    if os.environ.get("NP_SANITIZED") == "1":
        # it reads sources and runs no compiled code: the plain pass checks it (CI time)
        print("SKIP: sanitized pass; check_layout runs in the plain pass")
        return 77
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    findings, long_funcs, seen_circles = [], {}, set()
    for d in PRODUCT_DIRS:
        if os.path.isdir(os.path.join(root, d)):
            check_dir(root, d, findings, long_funcs, seen_circles)
    for key in sorted(ALLOW_CIRCLES - seen_circles):
        findings.append(f"call circle {key} is gone: drop it from ALLOW_CIRCLES")
    for key, (n, first) in sorted(long_funcs.items()):
        allowed = ALLOW.get(key)
        if allowed is None:
            findings.append(f"{key} (line {first}) is {n} lines, over {MAX_LINES}: split it")
        elif n > allowed:
            findings.append(f"{key} grew to {n} lines (allowed {allowed} on {ALLOW_DATE}, may only shrink)")
    for key, allowed in sorted(ALLOW.items()):
        if key not in long_funcs:
            findings.append(f"{key} is no longer over {MAX_LINES} lines (or gone): "
                            f"drop it from ALLOW in {os.path.basename(__file__)}")
        elif long_funcs[key][0] < allowed:
            findings.append(f"{key} shrank to {long_funcs[key][0]} lines: lower its ALLOW entry "
                            f"(was {allowed})")
    for f in findings:
        print(f)
    print(f"check_layout: {len(findings)} finding(s); {len(long_funcs)} function(s) over "
          f"{MAX_LINES} lines, {len(ALLOW)} allowed until split")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
