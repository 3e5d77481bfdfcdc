"""check_xlsx_sheet.py XLSX ROWS_A,ROWS_B,MODE - check the rows that
compare/xlsx_sheet.c spliced into the sheets "a" and "b" of XLSX (written by
test_cmp_xlsx.c) against cells computed here from the same rules: numbers
as Excel receives them from libxlsxwriter ("%.16G"), strings, N/A, inf,
blank cells, fills. MODE "openpyxl" reads the file with openpyxl; MODE
"libreoffice" converts every sheet to csv with LibreOffice and compares the
values. Exit 77 when the reader is not installed."""
import csv
import glob
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

xlsx, spec = sys.argv[1:3]
rows_a, rows_b, mode = spec.split(",")
rows_a, rows_b = int(rows_a), int(rows_b)

NUMS = [0.1, -2.5, 1e-300, 1.7976931348623157e308, 5e-324, 123456789012345678.0,
        0.30000000000000004, -0.0, 1.0 / 3.0, math.nan, math.inf, -math.inf, 65536.0]
STRS = ["a&b<c>d", " lead", "trail ", "", "plain", "ctl_x0001_x", "tab\tin", "\u00e9t\u00e9",
        "x > y & z"]
LONG = "L" * 32760 + "<&>" + "L" * 4          # cut at Excel's 32767 characters

fails = 0


def check(cond, msg):
    global fails
    if not cond:
        fails += 1
        if fails < 30:
            print("FAIL:", msg)


def num16(x):
    """The number a reader gets from libxlsxwriter's "%.16G" text, or the
    text libxlsxwriter writes for NaN/inf."""
    if math.isnan(x):
        return "N/A"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return float("%.16G" % x)


def expected(i):
    """(cells A..G, fill) of data row i; None = blank."""
    text = LONG if i == 77 else STRS[i % len(STRS)]
    x = NUMS[i % len(NUMS)] * (1 if i % 2 else -1)
    y = i * 1e-7 + 1e-3
    fill = {1: "FFFF0000", 2: "FFFFFF00"}.get(i % 3)
    return [float(i), text or None, num16(x), "N/A", None, num16(y), None], fill


def same(got, want, tol):
    if want is None:
        return got in (None, "")
    if isinstance(want, float):
        try:
            g = float(got)
        except (TypeError, ValueError):
            return False
        if tol == 0 or g == want:   # (DBL_MAX at 16 digits overflows to inf)
            return g == want
        return abs(g - want) <= tol * abs(want) or abs(g - want) < 1e-307
    return got == want


# the parts as written: dimension widened, autofilter and frozen pane kept
with zipfile.ZipFile(xlsx) as z:
    check(z.testzip() is None, "zip CRC")
    for part, n in (("xl/worksheets/sheet2.xml", rows_a), ("xl/worksheets/sheet3.xml", rows_b)):
        xml = z.read(part).decode()
        check(f'<dimension ref="A1:G{n + 1}"/>' in xml, f"{part} dimension")
        check(f'<autoFilter ref="A1:G{n + 1}"/>' in xml, f"{part} autofilter")
        check('state="frozen"' in xml, f"{part} frozen pane")
        check(xml.count("<row") == n + 1, f"{part} rows {xml.count('<row')}")

if mode == "openpyxl":
    try:
        import openpyxl
    except ImportError:
        sys.exit(77)
    wb = openpyxl.load_workbook(xlsx)
    check(wb.sheetnames == ["first", "a", "b"], f"sheets {wb.sheetnames}")
    check(wb["first"]["A1"].value == "untouched", "first sheet")
    base = 0
    for name, n in (("a", rows_a), ("b", rows_b)):
        ws = wb[name]
        check(ws.freeze_panes == "A2", f"{name} freeze {ws.freeze_panes}")
        check([c.value for c in ws[1]] == ["i", "text", "x", "na", "empty", "y", "end"],
              f"{name} header")
        count = 0
        for r, row in enumerate(ws.iter_rows(min_row=2, max_col=7), start=0):
            i = base + r
            want, fill = expected(i)
            for k, cell in enumerate(row):
                check(same(cell.value, want[k], 0), f"{name} row {i} col {k}: {cell.value!r} != {want[k]!r}")
                got_fill = cell.fill.fgColor.rgb if cell.fill and cell.fill.fill_type == "solid" else None
                if k < 6 or fill:
                    check(got_fill == fill, f"{name} row {i} col {k}: fill {got_fill} != {fill}")
            count += 1
        check(count == n, f"{name}: {count} rows, want {n}")
        base += n
elif mode == "libreoffice":
    soffice = shutil.which("libreoffice") or shutil.which("soffice")
    if not soffice:
        sys.exit(77)
    out = tempfile.mkdtemp(prefix="np_lo_")
    try:
        cmd = [soffice, f"-env:UserInstallation=file://{out}/profile", "--headless",
               "--convert-to",
               "csv:Text - txt - csv (StarCalc):44,34,76,1,,0,false,true,false,false,false,-1",
               "--outdir", out, xlsx]
        res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        stem = os.path.splitext(os.path.basename(xlsx))[0]
        files = {os.path.basename(f)[len(stem) + 1:-4]: f for f in glob.glob(f"{out}/{stem}-*.csv")}
        check(sorted(files) == ["a", "b", "first"],
              f"LibreOffice wrote {sorted(files)}: {res.stdout.decode(errors='replace')[-500:]}")
        base = 0
        for name, n in (("a", rows_a), ("b", rows_b)):
            if name not in files:
                continue
            with open(files[name], newline="", encoding="utf-8") as f:
                rows = list(csv.reader(f))
            check(rows[0] == ["i", "text", "x", "na", "empty", "y", "end"][:len(rows[0])],
                  f"{name} header {rows[0]}")
            check(len(rows) - 1 == n, f"{name}: {len(rows) - 1} rows, want {n}")
            for r, row in enumerate(rows[1:]):
                i = base + r
                want, _ = expected(i)
                row = row + [""] * (7 - len(row))
                for k in range(7):
                    w = want[k]
                    if isinstance(w, str):   # LibreOffice decodes _xHHHH_
                        w = re.sub("_x([0-9A-F]{4})_", lambda m: chr(int(m.group(1), 16)), w)
                    # LibreOffice shows 15 significant digits
                    check(same(row[k], w, 1e-14), f"{name} row {i} col {k}: {row[k][:60]!r} != {str(w)[:60]!r}")
            base += n
    finally:
        shutil.rmtree(out, ignore_errors=True)
else:
    print("unknown mode", mode)
    sys.exit(2)
sys.exit(1 if fails else 0)
