"""summarize.py PERFORMANCE.md - add "Targets at a glance" to the report
scripts/bench/run.sh wrote: every row of a table with a "met?" column, and
the GPT training ratios (target <= 1), each marked met or not met. Reads and
rewrites the file in place; the figures are the run's own."""
import re
import sys

path = sys.argv[1]
text = open(path).read()
text = re.sub(r"\n## Targets at a glance\n.*?(?=\n## |\Z)", "\n", text, flags=re.S)
lines = text.split("\n")
out = []
header = None
section = ""
for ln in lines:
    if ln.startswith("## "):
        section = ln[3:].strip()
        header = None
        continue
    if not ln.startswith("|"):
        header = None if not ln.strip() else header
        continue
    cells = [c.strip() for c in ln.strip().strip("|").split("|")]
    if header is None:
        header = cells
        continue
    if set("".join(cells)) <= set("-: "):
        continue
    row = dict(zip(header, cells))
    if "met?" in row and row["met?"] not in ("-", ""):
        met = "not met" if "no" in row["met?"].split(",")[0] or row["met?"].startswith("no") or " no" in row["met?"] else "met"
        out.append(f"| {section} | {row.get('work', '')} | {row.get('ratio', '')} | {row.get('target', '')} | {met} |")
    elif "ratio (tuned)" in row:
        size = f"GPT {row['layers']}x{row['width']}, context {row['context']}"
        for key, label in (("ratio (tuned)", "vs PyTorch with tuned OpenBLAS kernels"),
                           ("ratio (shipped)", "vs PyTorch as Debian ships it")):
            try:
                met = "met" if float(row[key]) <= 1.0 else "not met"
            except ValueError:
                met = "not measured"
            out.append(f"| {section} | {size}, {label} | {row[key]} | <= 1 | {met} |")
summary = ["## Targets at a glance", "",
           "Every target of DESIGN.md section 8 and the issues, from the tables below (same run).", "",
           "| benchmark | work | ratio | target | status |", "|---|---|---|---|---|"] + out + [""]
not_met = [r for r in out if r.endswith("| not met |")]
summary += [f"**{len(not_met)} of {len(out)} rows do not meet their target yet.**", ""]
i = text.index("\n## ")
text = text[:i] + "\n\n" + "\n".join(summary) + text[i:]
open(path, "w").write(text)
