"""check_report.py XLSX CSV JSON SPLIT_XLSX - check a compare report with
openpyxl: sheets, msprobe's headers in msprobe's order then nprobe's, red
and yellow fills, frozen header, autofilter, the chart, the row split; and
that the csv and json carry the same numbers as the xlsx. Exit 77 when
openpyxl is not installed."""
import csv
import json
import math
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
for i, xr in enumerate(xrows):
    for k, xv in enumerate(xr):
        cv = number(crow[i + 1][k]) if crow[i + 1][k] != "" else ""
        jv = js["rows"][i][k]
        xv2 = "" if xv is None else xv
        if isinstance(xv, float) or isinstance(xv, int):
            check(isinstance(cv, float) and same(xv, cv), f"row {i} col {hdr[k]}: xlsx {xv} csv {cv}")
            check(isinstance(jv, (int, float)) and same(xv, jv), f"row {i} col {hdr[k]}: xlsx {xv} json {jv}")
        else:
            check(str(xv2) == str(crow[i + 1][k]), f"row {i} col {hdr[k]}: xlsx {xv2!r} csv {crow[i + 1][k]!r}")
            check(jv is None and xv2 == "N/A" or str(jv) == str(xv2), f"row {i} col {hdr[k]}: json {jv!r}")

# the split workbook: rows_2, rows_3, ... each with the header, all rows kept
sw = openpyxl.load_workbook(split)
parts = [n for n in sw.sheetnames if n.startswith("rows")]
check(len(parts) >= 2, f"split sheets {parts}")
total = 0
for n in parts:
    check([c.value for c in sw[n][1]] == hdr, f"{n} header")
    total += sw[n].max_row - 1
check(total == len(xrows), f"split rows {total} vs {len(xrows)}")
sys.exit(1 if fails else 0)
