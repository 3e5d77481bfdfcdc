"""check_html.py PAGE [--culprit NAME] [--calls N] [--step S] [--shot] - open
an nprobe compare HTML report in headless Chromium (Debian's `chromium`,
no driver: --dump-dom after the scripts ran, --screenshot) and check it:

- no console message at all (errors, uncaught exceptions, CSP or network
  refusals: the page is self-contained and logs nothing);
- the scripts ran (body data-ready="1"), the only <script> is the page's own,
  no <img>, <iframe> or on* attribute came from the data (escaping);
- the tree (#tree-root) holds one node of class "c" per call (--calls), the
  node #culprit-node is the call --culprit, every <details> around it is
  open, and the headline names it;
- with --no-attr A, no element carries attribute A (the data's scripts would set it);
- with --step, the headline and the steps chart name that failing step;
- with --shot, a 1280x1000 screenshot PNG is decoded here (zlib, PNG filters)
  and must not be blank: many colours, a good share of non-background
  pixels, and the red of the culprit marks present.
Exit 1 on a failed check, 77 when chromium is not installed."""
import argparse
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from html.parser import HTMLParser

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}
FAILS = []


def check(cond, msg):
    if not cond:
        FAILS.append(msg)
        print("FAIL:", msg)


class Node:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent, self.kids, self.text = tag, dict(attrs), parent, [], []

    def cls(self):
        return (self.attrs.get("class") or "").split()

    def all_text(self):
        out = list(self.text)
        for k in self.kids:
            out.append(k.all_text())
        return "".join(out)

    def walk(self):
        yield self
        for k in self.kids:
            yield from k.walk()


class Dom(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", [], None)
        self.cur = self.root

    def handle_starttag(self, tag, attrs):
        n = Node(tag, attrs, self.cur)
        self.cur.kids.append(n)
        if tag not in VOID:
            self.cur = n

    def handle_endtag(self, tag):
        n = self.cur
        while n is not self.root and n.tag != tag:
            n = n.parent
        if n is not self.root:
            self.cur = n.parent

    def handle_data(self, data):
        self.cur.text.append(data)


def chromium_cmd(profile):
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        print("SKIP: chromium is not installed (scripts/install-deps.sh installs it)")
        sys.exit(77)
    return [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--user-data-dir=" + profile, "--enable-logging=stderr", "--v=0", "--hide-scrollbars"]


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def console_lines(err):
    return [l for l in err.splitlines() if ":CONSOLE" in l or "Uncaught" in l]


def check_dom(dom_text, a):
    d = Dom()
    d.feed(dom_text)
    nodes = list(d.root.walk())
    body = [n for n in nodes if n.tag == "body"]
    check(body and body[0].attrs.get("data-ready") == "1", "the page's script did not run")
    check(sum(n.tag == "script" for n in nodes) == 1, "a <script> element came from the data")
    check(not any(n.tag in ("img", "iframe", "object", "embed") for n in nodes),
          "an <img>/<iframe> element came from the data")
    check(not any(k.startswith("on") for n in nodes for k in n.attrs),
          "an on* attribute came from the data")
    for attr in a.no_attr:
        check(not any(attr in n.attrs for n in nodes), f"attribute {attr} set: a script from the data ran")
    tree = [n for n in nodes if n.attrs.get("id") == "tree-root"]
    check(len(tree) == 1, "no #tree-root")
    if not tree:
        return
    calls = [n for n in tree[0].walk() if n.tag in ("p", "details") and "c" in n.cls()]
    if a.calls is not None:
        check(len(calls) == a.calls, f"the tree has {len(calls)} call nodes, the dump {a.calls} calls")
    if a.culprit is None:
        return
    cn = [n for n in nodes if n.attrs.get("id") == "culprit-node"]
    check(len(cn) == 1, "no #culprit-node")
    if not cn:
        return
    own = cn[0] if cn[0].tag == "p" else next((k for k in cn[0].kids if k.tag == "summary"), cn[0])
    name = "".join(own.text).strip()
    check(name == a.culprit, f"the culprit node is {name!r}, expected {a.culprit!r}")
    p, depth = cn[0].parent, 0
    while p is not None:
        if p.tag == "details":
            depth += 1
            check("open" in p.attrs, "a <details> around the culprit is closed")
        p = p.parent
    head = [n for n in nodes if n.attrs.get("id") == "first-culprit"]
    check(head and a.culprit in head[0].all_text(), "the headline does not name the culprit")
    if a.step is not None:
        check(head and f"step {a.step}, rank" in head[0].all_text(),
              f"the headline does not say step {a.step}")
        steps = [n for n in nodes if n.attrs.get("id") == "steps-chart"]
        check(steps and f"first failing step {a.step}" in steps[0].all_text(),
              f"the steps chart does not mark step {a.step}")
    print(f"dom: {len(nodes)} elements, {len(calls)} call nodes, culprit {name!r} "
          f"under {depth} open <details>")


def png_pixels(path):
    """(width, height, rows of RGB(A) bytes) of an 8-bit RGB/RGBA PNG."""
    data = open(path, "rb").read()
    check(data[:8] == b"\x89PNG\r\n\x1a\n", "the screenshot is not a PNG")
    pos, idat, w, h, bpp = 8, [], 0, 0, 3
    while pos < len(data):
        ln, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + ln]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            if depth != 8 or ctype not in (2, 6):
                raise SystemExit(f"FAIL: unexpected PNG depth {depth} colour type {ctype}")
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + ln
    raw, stride, rows, prev = zlib.decompress(b"".join(idat)), w * bpp, [], bytearray(w * bpp)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return w, h, bpp, rows


def check_shot(cmd, page, tmp):
    shot = os.path.join(tmp, "shot.png")
    rc, _, err = run(cmd + ["--window-size=1280,1000", "--screenshot=" + shot, page])
    check(rc == 0 and os.path.exists(shot), f"chromium --screenshot failed ({rc}): {err[-400:]}")
    if not os.path.exists(shot):
        return
    w, h, bpp, rows = png_pixels(shot)
    check((w, h) == (1280, 1000), f"screenshot is {w}x{h}")
    colours, ink, red = set(), 0, 0
    for y in range(0, h, 4):
        line = rows[y]
        for x in range(0, w, 4):
            r, g, b = line[x * bpp], line[x * bpp + 1], line[x * bpp + 2]
            colours.add((r >> 3, g >> 3, b >> 3))
            ink += abs(r - 246) + abs(g - 247) + abs(b - 249) > 24
            red += r > 180 and g < 90 and b < 90
    n = (h // 4) * (w // 4)
    print(f"screenshot: {w}x{h}, {len(colours)} colours, {100 * ink / n:.1f}% ink, {red} red samples")
    check(len(colours) > 50, f"the screenshot looks blank: {len(colours)} colours")
    check(ink > n * 0.10, f"the screenshot looks blank: {100 * ink / n:.1f}% non-background")
    check(red > 20, "no culprit red in the screenshot")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("page")
    ap.add_argument("--culprit")
    ap.add_argument("--calls", type=int)
    ap.add_argument("--step", type=int)
    ap.add_argument("--shot", action="store_true")
    ap.add_argument("--no-attr", action="append", default=[],
                    help="no element may carry this attribute (set by a script that must not run)")
    a = ap.parse_args()
    page = "file://" + os.path.abspath(a.page)
    raw = open(a.page, encoding="utf-8", errors="replace").read()
    check(not re.search(r"(src|href)\s*=\s*['\"]?(https?:)?//", raw), "the page loads something")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = chromium_cmd(os.path.join(tmp, "profile"))
        rc, dom, err = run(cmd + ["--dump-dom", page])
        check(rc == 0 and "<body" in dom, f"chromium --dump-dom failed ({rc}): {err[-400:]}")
        for l in console_lines(err):
            check(False, "console: " + l)
        check_dom(dom, a)
        if a.shot:
            check_shot(cmd, page, tmp)
    print("ok" if not FAILS else f"{len(FAILS)} failed")
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
