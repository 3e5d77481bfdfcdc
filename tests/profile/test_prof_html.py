"""tests/profile/test_prof_html.py - `nprobe profile --format html` opened in
headless Chromium: the page loads offline and its script draws the median
step's timeline; checked against answers computed here from the trace:
- a trace of the runtime's profile task (nprobe train --profile, 3 steps):
  the page's timeline holds one slice per complete event that starts inside
  the ProfilerStep of median duration (the lower median), with the same
  names, and the count the page reports (data-slices) equals it;
- a hand-made trace whose op names carry markup (</script><b>, quotes, an
  ampersand): the slices carry the names as text (data-name), no element
  comes from a name.
Skips (77) without Chromium (chromium, chromium-browser or google-chrome on
PATH, or $NP_CHROMIUM), saying so; in the sanitized pass only the html is
written (by the sanitized nprobe), the browser does not run."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from nptest import check, finish, run  # noqa: E402

SAN = os.environ.get("NP_SANITIZED") == "1"


def chromium():
    for c in (os.environ.get("NP_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if c and shutil.which(c):
            return shutil.which(c)
    return None


def dom(browser, page, root):
    p = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                        "--user-data-dir=" + os.path.join(root, "chrome"), "--virtual-time-budget=5000",
                        "--dump-dom", "file://" + os.path.abspath(page)],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=120)
    return p.stdout.decode("utf-8", "replace")


def unescape(s):
    return s.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"').replace("&amp;", "&")


def expected_slices(trace):
    with open(trace) as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e for e in ev if e["name"].startswith("ProfilerStep#")), key=lambda e: e["dur"])
    med = steps[(len(steps) - 1) // 2] if steps else None
    if med is None:
        return sorted(e["name"] for e in ev)
    lo, hi = med["ts"], med["ts"] + med["dur"]
    return sorted(e["name"] for e in ev if lo <= e["ts"] <= hi)


def main():
    browser = None if SAN else chromium()
    if not SAN and not browser:
        print("SKIP: no Chromium on PATH (chromium, chromium-browser, google-chrome or $NP_CHROMIUM; "
              "Debian: apt-get install chromium): the headless check of profile.html did not run")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as root:
        rc, so, se = run(["train", "--model", "gpt", "--threads", "1", "--steps", "3", "--profile", "p"], root)
        check(rc == 0, "train --profile: exit %d %s" % (rc, se))
        hostile = {"traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": "</script><b id=\"x\">bold</b>", "pid": 0, "tid": 1,
             "ts": 10, "dur": 5},
            {"ph": "X", "cat": "cpu_op", "name": "a&b \"q\" 'r' \u2028 <i>", "pid": 0, "tid": 1,
             "ts": 20, "dur": 5}]}
        with open(os.path.join(root, "hostile.json"), "w") as f:
            json.dump(hostile, f)
        pages = []
        for trace, out in (("p/rank0.trace.json", "h1"), ("hostile.json", "h2")):
            rc, so, se = run(["profile", trace, "-o", out, "--format", "html"], root)
            page = os.path.join(root, out, "profile.html")
            check(rc == 0 and os.path.exists(page), "profile --format html %s: exit %d %s" % (trace, rc, se))
            pages.append((os.path.join(root, trace), page))
        if SAN:
            sys.exit(finish())
        for trace, page in pages:
            d = dom(browser, page, root)
            names = sorted(unescape(m) for m in re.findall(r'class="slice" data-name="([^"]*)"', d))
            want = expected_slices(trace)
            count = re.findall(r'data-slices="(\d+)"', d)
            check(names == want and count == [str(len(want))],
                  "%s: the page shows %d slices (data-slices %s), the trace's median step has %d"
                  % (page, len(names), count, len(want)))
            print("%s: %d slices drawn, as the trace's median step holds" % (os.path.basename(trace), len(names)))
        check('<b id="x">' not in d and "<i>" not in d, "a name's markup became an element")
    sys.exit(finish())


if __name__ == "__main__":
    main()
