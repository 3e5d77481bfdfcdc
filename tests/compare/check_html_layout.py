"""check_html_layout.py PAGE [--widths 1280,500] [--advice-not TEXT] [--card-has TEXT]
- the layout of an nprobe compare HTML report as headless Chromium computes
it, at each window width: a copy of the page gets a script appended that
measures the rendered boxes (getBoundingClientRect) and writes them into the
DOM, which `chromium --dump-dom` prints. Checks:

- every key/value table (table.kv: the culprit card, counts, "Tolerances in
  effect") gives each value at least the width it needs on one line, or a
  third of the box it sits in: no label squeezes its value into a narrow
  column (issue 31: a long tolerance scope in the label column left the
  values a one-character column and the page ~9,500 px tall);
- the "Tolerances in effect" table is at most 160 px tall per row;
- nothing is wider than the window (the page never scrolls sideways).

--advice-not TEXT: the culprit card's advice (p.advice) does not contain
TEXT; --card-has TEXT: the culprit card (#first-culprit) contains TEXT
(repeatable). Prints the measures; exit 1 on a failed check, 77 when
chromium is not installed."""
import argparse
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_html import chromium_cmd, run  # noqa: E402

FAILS = []


def check(ok, msg):
    if not ok:
        FAILS.append(msg)
        print("FAIL: " + msg)


MEASURE = r"""<script>(function(){
function natural(td){var s=document.createElement('span');
s.style.cssText='position:absolute;visibility:hidden;white-space:nowrap;left:0;top:0';
s.innerHTML=td.innerHTML;td.appendChild(s);var w=s.getBoundingClientRect().width;
td.removeChild(s);return w}
var de=document.documentElement,out={w:innerWidth,sw:de.scrollWidth,h:de.scrollHeight,rows:[],tol:null,
advice:'',card:''};
var ts=document.querySelectorAll('table.kv');
for(var i=0;i<ts.length;i++){var box=ts[i].parentElement.clientWidth,rs=ts[i].rows;
for(var j=0;j<rs.length;j++){var th=rs[j].querySelector('th'),td=rs[j].querySelector('td');
if(!th||!td)continue;var r=rs[j].getBoundingClientRect();if(!r.width)continue;
out.rows.push({label:th.textContent.slice(0,40),th:th.getBoundingClientRect().width,
td:td.getBoundingClientRect().width,need:natural(td),box:box,h:r.height})}}
var h3=[].filter.call(document.querySelectorAll('h3'),function(e){
return e.textContent=='Tolerances in effect'})[0];
if(h3){var t=h3.nextElementSibling;out.tol={rows:t.rows.length,h:t.getBoundingClientRect().height}}
var a=document.querySelector('#first-culprit p.advice');if(a)out.advice=a.textContent;
var c=document.querySelector('#first-culprit');if(c)out.card=c.textContent;
var pre=document.createElement('pre');pre.id='np-layout';pre.textContent=JSON.stringify(out);
document.body.appendChild(pre)})();</script>"""


def measure(cmd, page, width, tmp):
    text = open(page, encoding="utf-8").read()
    check("</body>" in text, f"{page}: no </body>")
    copy = os.path.join(tmp, "layout_%d.html" % width)
    with open(copy, "w", encoding="utf-8") as f:
        f.write(text.replace("</body>", MEASURE + "</body>", 1))
    rc, dom, err = run(cmd + ["--window-size=%d,1000" % width, "--dump-dom", copy])
    m = re.search(r'<pre id="np-layout">(.*?)</pre>', dom, re.S)
    check(rc == 0 and m, f"chromium --dump-dom at width {width} failed ({rc}): {err[-400:]}")
    if not m:
        return None
    raw = m.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">")
    return json.loads(raw.replace("&amp;", "&"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("page")
    ap.add_argument("--widths", default="1280,500")
    ap.add_argument("--advice-not", action="append", default=[])
    ap.add_argument("--card-has", action="append", default=[])
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="np_html_layout_") as tmp:
        cmd = chromium_cmd(os.path.join(tmp, "profile"))
        for width in (int(w) for w in a.widths.split(",")):
            o = measure(cmd, a.page, width, tmp)
            if o is None:
                continue
            worst = min(o["rows"], key=lambda r: r["td"] / max(1.0, min(r["need"], r["box"] / 3)),
                        default=None)
            print(f"width {width}: page {o['sw']}x{o['h']} px, {len(o['rows'])} key/value rows, "
                  f"tolerances {o['tol']}, tightest value {worst}")
            check(o["sw"] <= o["w"] + 1, f"width {width}: the page is {o['sw']} px wide")
            for r in o["rows"]:
                check(r["td"] + 1 >= min(r["need"], r["box"] / 3),
                      f"width {width}: the value of {r['label']!r} is {r['td']:.0f} px wide, "
                      f"needs {min(r['need'], r['box'] / 3):.0f} (label {r['th']:.0f} px)")
            check(o["tol"] is not None, "no 'Tolerances in effect' table")
            if o["tol"]:
                check(o["tol"]["h"] <= 160 * max(1, o["tol"]["rows"]),
                      f"width {width}: the tolerances table is {o['tol']['h']:.0f} px tall for "
                      f"{o['tol']['rows']} rows")
            for t in a.advice_not:
                check(o["advice"] and t not in o["advice"],
                      f"the advice says {t!r} (or there is none): {o['advice']!r}")
            for t in a.card_has:
                check(t in o["card"], f"the culprit card lacks {t!r}: {o['card'][:600]!r}")
    print("ok" if not FAILS else f"{len(FAILS)} failed")
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
