"""check_report.py XLSX CSV JSON SPLIT_XLSX - check a compare report with
openpyxl: sheets, msprobe's headers in msprobe's order then nprobe's, red
and yellow fills, frozen header, autofilter, the chart, the row split; and
that the csv and json carry the same numbers as the xlsx. Exit 77 when
openpyxl is not installed."""
import csv
import json
import math
import re
import sys
import zipfile

try:
    import openpyxl
except ImportError:
    sys.exit(77)

# msprobe CompareConst.COMPARE_RESULT_HEADER (tensor mode), from msprobe's
# const.py: BASIC_INFO + ALL_COMPARE_INDEX + SUMMARY_INFO + [REQ_GRAD_CONSIST,
# ACCURACY, ERROR_MESSAGE]; then nprobe's own columns.
MSPROBE = ["NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape",
           "Bench Tensor Shape", "NPU Requires_grad", "Bench Requires_grad",
           "Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio",
           "Five Thousandths Err Ratio", "NPU max", "NPU min", "NPU mean", "NPU l2norm",
           "Bench max", "Bench min", "Bench mean", "Bench l2norm", "Requires_grad Consistent",
           "Accuracy Reached or Not", "Err_message"]
NPROBE = ["Match", "Verdict", "Culprit", "Module"]

fails = 0


def check(cond, msg):
    global fails
    if not cond:
        fails += 1
        print("FAIL:", msg)


def same(a, b):
    if a in (None, "N/A") and b in (None, "N/A"):
        return True
    if isinstance(a, str) or isinstance(b, str):
        return str(a) == str(b)
    return a == b or abs(a - b) <= 1e-15 * max(abs(a), abs(b))


def number(s):
    if s == "N/A" or s is None:
        return None
    try:
        return float(s)
    except ValueError:
        return s


xlsx, csv_path, json_path, split = sys.argv[1:5]
json_over = sys.argv[5] if len(sys.argv) > 5 else None  # a json written with --rtol 0.001
wb = openpyxl.load_workbook(xlsx)
check(wb.sheetnames[0] == "summary", f"first sheet {wb.sheetnames}")
check("rows" in wb.sheetnames and "calls" in wb.sheetnames, f"sheets {wb.sheetnames}")
ws = wb["rows"]
hdr = [c.value for c in ws[1]]
check(hdr[:len(MSPROBE)] == MSPROBE, f"msprobe headers: {hdr[:len(MSPROBE)]}")
check(hdr[len(MSPROBE):len(MSPROBE) + 4] == NPROBE, f"nprobe headers: {hdr[len(MSPROBE):]}")
check(ws.freeze_panes == "A2", f"freeze panes {ws.freeze_panes}")
check(ws.auto_filter.ref is not None and ws.auto_filter.ref.startswith("A1:"),
      f"autofilter {ws.auto_filter.ref}")
vcol = hdr.index("Verdict")
seen = set()
xrows = []
for row in ws.iter_rows(min_row=2):
    vals = [c.value for c in row]
    xrows.append(vals)
    verdict = vals[vcol]
    rgb = row[0].fill.fgColor.rgb if row[0].fill and row[0].fill.fill_type == "solid" else None
    if verdict == "error":
        check(rgb == "FFFF0000", f"error row fill {rgb}")
    elif verdict == "warning":
        check(rgb == "FFFFFF00", f"warning row fill {rgb}")
    else:
        check(rgb is None, f"pass row fill {rgb}")
    seen.add(verdict)
check({"pass", "warning", "error"} <= seen, f"verdicts seen {seen}")
with zipfile.ZipFile(xlsx) as z:
    check(any(n.startswith("xl/charts/chart") for n in z.namelist()), "no chart in the xlsx")
summary = [[c.value for c in r] for r in wb["summary"].iter_rows()]
flat = " ".join(str(v) for r in summary for v in r if v is not None)
check("FIRST CULPRIT" in flat and "Functional.relu.0.forward" in flat, "summary lacks the culprit")
check("advice" in flat, "summary lacks advice")

# csv and json: the same headers and numbers
with open(csv_path, newline="") as f:
    crow = list(csv.reader(f))
check(crow[0] == hdr, "csv headers differ")
check(len(crow) - 1 == len(xrows), f"csv rows {len(crow) - 1} vs xlsx {len(xrows)}")
with open(json_path) as f:
    js = json.load(f)
check(js["headers"] == hdr, "json headers differ")
check(len(js["rows"]) == len(xrows), "json rows count")
check(js["first_culprit"]["call"] == "Functional.relu.0.forward", "json first culprit")

# the first culprit's metrics: the same in the json as in the xlsx summary
kvs = {r[0]: r[1] for r in summary if r and r[0] is not None and len(r) > 1}
fm = js["first_culprit"].get("worst_row_metrics") or {}
for label, key in (("Cosine", "Cosine"), ("EucDist", "EucDist"), ("MaxAbsErr", "MaxAbsErr"),
                   ("MaxRelativeErr", "MaxRelativeErr"), ("relative L2 error", "relative_l2_error")):
    check(label in kvs and key in fm and isinstance(fm[key], (int, float)) and same(kvs[label], fm[key]),
          f"first culprit {label}: xlsx {kvs.get(label)!r}, json {fm.get(key)!r}")
check(js["first_culprit"].get("worst_row_reason") == kvs.get("verdict reason"),
      f"first culprit verdict reason: json {js['first_culprit'].get('worst_row_reason')!r}")

# the tolerances in effect: the float32 defaults (docs/COMPARE.md), no overrides
tol = js.get("tolerances") or {}
check(tol.get("overrides") == {"atol": None, "rtol": None, "cos": None}, f"json overrides {tol.get('overrides')}")
f32 = [t for t in tol.get("by_dtype", []) if t["dtype"] == "float32"]
check(len(f32) == 1 and f32[0]["atol"] == 1e-7 and f32[0]["rtol"] == 5e-6 and f32[0]["rtol_warn"] == 1e-6
      and f32[0]["cos"] == 0.9999999 and f32[0]["cos_warn"] == 0.99999999 and f32[0]["exact"] is False,
      f"json float32 tolerance {f32}")
check("tolerances" in flat, "summary lacks the tolerances")
check(str(kvs.get("float32", "")).startswith("atol 1e-07, rtol 5e-06 (warning 1e-06), cos 0.9999999"),
      f"xlsx float32 tolerance {kvs.get('float32')!r}")
check(str(kvs.get("overrides", "")).startswith("none"), f"xlsx overrides {kvs.get('overrides')!r}")
if json_over:
    with open(json_over) as f:
        jo = json.load(f)
    to = jo["tolerances"]
    check(to["overrides"] == {"atol": None, "rtol": 0.001, "cos": None}, f"json --rtol overrides {to['overrides']}")
    f32 = [t for t in to["by_dtype"] if t["dtype"] == "float32"]
    check(len(f32) == 1 and f32[0]["rtol"] == 0.001 and abs(f32[0]["cos"] - (1 - 0.001 ** 2 / 2)) < 1e-15,
          f"json float32 tolerance with --rtol {f32}")
for i, xr in enumerate(xrows):
    for k, xv in enumerate(xr):
        cv = number(crow[i + 1][k]) if crow[i + 1][k] != "" else ""
        jv = js["rows"][i][k]
        xv2 = "" if xv is None else xv
        if isinstance(xv, float) or isinstance(xv, int):
            check(isinstance(cv, float) and same(xv, cv), f"row {i} col {hdr[k]}: xlsx {xv} csv {cv}")
            # exactly the number libxlsxwriter's "%.16G" gives Excel
            check(isinstance(cv, float) and xv == float("%.16G" % cv),
                  f"row {i} col {hdr[k]}: xlsx {xv!r} is not %.16G of csv {cv!r}")
            check(isinstance(jv, (int, float)) and same(xv, jv), f"row {i} col {hdr[k]}: xlsx {xv} json {jv}")
        else:
            check(str(xv2) == str(crow[i + 1][k]), f"row {i} col {hdr[k]}: xlsx {xv2!r} csv {crow[i + 1][k]!r}")
            check(jv is None and xv2 == "N/A" or str(jv) == str(xv2), f"row {i} col {hdr[k]}: json {jv!r}")

# the calls sheet: one row per call in execution order, the culprit red,
# the chart's ranges covering its rows
cw = wb["calls"]
chdr = [c.value for c in cw[1]]
check(chdr[:3] == ["Order", "Seq", "Call"] and len(chdr) == 16 and chdr[12:] == ["Isolated error (u)", "Isolated / budget", "Reference isolated (u)", "Reference / budget"], f"calls header {chdr}")
check(cw.freeze_panes == "A2", f"calls freeze panes {cw.freeze_panes}")
crows = [[c.value for c in r] for r in cw.iter_rows(min_row=2)]
check([r[0] for r in crows] == list(range(len(crows))), "calls Order column")
check(len(crows) == 4, f"calls rows {len(crows)}")
for r, row in zip(crows, cw.iter_rows(min_row=2)):
    rgb = row[0].fill.fgColor.rgb if row[0].fill and row[0].fill.fill_type == "solid" else None
    if r[2] == "Functional.relu.0.forward":
        check(r[4] == "culprit" and rgb == "FFFF0000", f"culprit call row {r} fill {rgb}")
    elif r[4] == "pass":
        check(rgb is None, f"pass call row {r[2]} fill {rgb}")
    check(isinstance(r[7], (int, float)) and r[8] == 1, f"calls plotted columns {r[7:9]}")
with zipfile.ZipFile(xlsx) as z:
    chart = z.read("xl/charts/chart1.xml").decode()
    n = len(crows) + 1
    check(f"calls!$A$2:$A${n}" in chart and f"calls!$H$2:$H${n}" in chart, "chart ranges")
    for part in z.namelist():
        if part.startswith("xl/worksheets/sheet"):
            xml = z.read(part).decode()
            m = re.search(r'<dimension ref="A1:([A-Z]+)(\d+)"/>', xml)
            if m and '<autoFilter ref="' in xml:
                rows_in = xml.count("<row")
                check(int(m.group(2)) == rows_in, f"{part} dimension {m.group(0)} for {rows_in} rows")
                check(f'<autoFilter ref="A1:{m.group(1)}{m.group(2)}"/>' in xml, f"{part} autofilter")

# the split workbook: rows_2, rows_3, ... each with the header, all rows kept
# with the same values and fills, in order
sw = openpyxl.load_workbook(split)
parts = [n for n in sw.sheetnames if n.startswith("rows")]
check(len(parts) >= 2, f"split sheets {parts}")
check(parts == ["rows"] + [f"rows_{k}" for k in range(2, len(parts) + 1)], f"split names {parts}")
srows, sfills = [], []
for n in parts:
    check([c.value for c in sw[n][1]] == hdr, f"{n} header")
    check(sw[n].freeze_panes == "A2", f"{n} freeze panes")
    m = re.fullmatch(r"A1:[A-Z]+(\d+)", sw[n].auto_filter.ref or "")
    check(m and int(m.group(1)) == sw[n].max_row,
          f"{n} autofilter {sw[n].auto_filter.ref} for {sw[n].max_row} rows")
    for row in sw[n].iter_rows(min_row=2):
        srows.append([c.value for c in row])
        sfills.append(row[0].fill.fgColor.rgb if row[0].fill and row[0].fill.fill_type == "solid" else None)
check(len(srows) == len(xrows), f"split rows {len(srows)} vs {len(xrows)}")
check(srows == xrows, "split rows differ from the unsplit sheet")
xfills = [r[0].fill.fgColor.rgb if r[0].fill and r[0].fill.fill_type == "solid" else None
          for r in ws.iter_rows(min_row=2)]
check(sfills == xfills, "split fills differ from the unsplit sheet")
sys.exit(1 if fails else 0)
