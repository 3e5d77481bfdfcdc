#!/usr/bin/env python3
"""test_cc_big_item.py - config_check compare keeps every row of a big item.

Two packs whose hyperparameters hold 2500 keys (every 100th differs) are
compared with --rows-per-sheet 1000 (the default is Excel's 1,048,575, too
big for a test): the xlsx must continue the item on "hyperparameters (2)"
and "(3)" with every key once, the summary's note must say the rows were
split, and the json report must list the same rows (issue 13: the item was
cut silently at Excel's row limit).
"""
import json
import os
import shutil
import sys
import tempfile

import openpyxl

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from nptest import check, finish, run  # noqa: E402

N = 2500


def main():
    root = tempfile.mkdtemp(prefix="np_ccbig_")
    try:
        for side, mul in (("a", 1), ("b", 2)):
            hp = {"k%05d" % i: (i * mul if i % 100 == 0 else i) for i in range(N)}
            with open(os.path.join(root, side + ".json"), "w") as f:
                json.dump(hp, f)
            rc, so, se = run(["config_check", "pack", "--no-python", "--hyperparams", side + ".json",
                              "-o", side + ".zip"], root)
            check(rc == 0, "pack %s: exit %d %s" % (side, rc, se))
        rc, so, se = run(["config_check", "compare", "a.zip", "b.zip", "-o", "x", "--rows-per-sheet", "1000"],
                         root)
        check(rc == 1, "compare xlsx: exit %d, want 1 (keys differ): %s" % (rc, se))
        wb = openpyxl.load_workbook(os.path.join(root, "x", "result.xlsx"), read_only=True)
        names = wb.sheetnames
        parts = ["hyperparameters", "hyperparameters (2)", "hyperparameters (3)"]
        check(all(p in names for p in parts) and "hyperparameters (4)" not in names,
              "sheets: %r" % names)
        keys, errors = [], 0
        for p in parts:
            if p not in names:
                continue
            rows = list(wb[p].iter_rows(values_only=True))
            check(rows and rows[0][:4] == ("key", "bench", "cmp", "level"), "%s: header %r" % (p, rows[:1]))
            check(len(rows) - 1 <= 1000, "%s holds %d rows, more than --rows-per-sheet" % (p, len(rows) - 1))
            keys += [r[0] for r in rows[1:]]
            errors += sum(1 for r in rows[1:] if r[3] == "error")
        check(keys == ["k%05d" % i for i in range(N)], "xlsx: %d keys over the sheets, want %d in order" % (len(keys), N))
        check(errors == N // 100 - 1, "xlsx: %d error rows, want %d" % (errors, N // 100 - 1))
        summary = list(wb["summary"].iter_rows(values_only=True))
        note = [r for r in summary if r[0] == "hyperparameters"]
        check(note and note[0][2] and "2500 rows over 3 sheets" in note[0][2], "summary note: %r" % note)

        rc, so, se = run(["config_check", "compare", "a.zip", "b.zip", "-o", "j", "--format", "json"], root)
        check(rc == 1, "compare json: exit %d" % rc)
        doc = json.load(open(os.path.join(root, "j", "result.json")))
        jrows = doc["items"]["hyperparameters"]["rows"]
        check([r["key"] for r in jrows] == ["k%05d" % i for i in range(N)], "json: rows differ")
        check(doc["summary"]["hyperparameters"] == "error" and doc["pass_check"] == "error",
              "json: summary %r" % doc.get("summary"))
        check(jrows[100]["bench"] == "100" and jrows[100]["cmp"] == "200", "json: row 100 %r" % jrows[100])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
