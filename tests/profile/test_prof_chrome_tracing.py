"""tests/profile/test_prof_chrome_tracing.py - the profile task's traces
opened in Chromium's own trace viewer, offline: headless Chromium driven
over its DevTools pipe (--remote-debugging-pipe, the stdlib only) opens
devtools://devtools/bundled/trace_app.html (the DevTools Performance
panel's standalone trace viewer, bundled with Chromium) and parses each
trace with the panel's own trace engine (models/trace: the model its
flame chart draws). chrome://tracing (catapult's viewer) is not there in
Chromium 156: it is an internal debugging page, off by default, and with
debug pages enabled (chrome://chrome-urls' button) it still fails to load
(net::ERR_FAILED; docs/PROFILE.md). Checked against answers computed here
from the file:
- a trace of the runtime's profile task (nprobe train --profile, 2 steps)
  and one of the PyTorch package's default profile (nprobe's own timing,
  a tiny MLP trained 2 steps): the panel's model holds one slice per
  complete event of the file, with the same names, on the same process
  and thread;
- each slice's parent in the panel's model is the slice that encloses it
  in the file (worked out here from ts and dur), so a module call's slice
  contains its API calls' slices (counted and required > 0).
Skips (77) without Chromium (chromium, chromium-browser, google-chrome on
PATH or $NP_CHROMIUM) or without the DevTools trace engine in it, saying
so; plain pass only (nprobe train's C paths run sanitized elsewhere)."""
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from nptest import check, finish, run  # noqa: E402


def chromium():
    for c in (os.environ.get("NP_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if c and shutil.which(c):
            return shutil.which(c)
    return None


class DevTools:
    """Chromium with --remote-debugging-pipe: it reads the protocol's
    commands (JSON, each ended by a NUL byte) on its fd 3 and writes the
    replies and events on its fd 4."""

    def __init__(self, browser, root):
        cmd_r, self.cmd_w = os.pipe()
        self.out_r, out_w = os.pipe()

        def fds():
            # through fresh copies: a pipe end that is already fd 3 or 4
            # would keep its close-on-exec flag under dup2 onto itself
            a, b = os.dup(cmd_r), os.dup(out_w)
            os.dup2(a, 3)
            os.dup2(b, 4)
        self.p = subprocess.Popen(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--no-default-browser-check", "--user-data-dir=" + os.path.join(root, "chrome"),
             "--remote-debugging-pipe", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            close_fds=False, preexec_fn=fds)
        os.close(cmd_r)
        os.close(out_w)
        self.buf, self.next_id, self.session = b"", 0, None

    def call(self, method, timeout=30, **params):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params}
        if self.session:
            msg["sessionId"] = self.session
        os.write(self.cmd_w, json.dumps(msg).encode() + b"\0")
        end = time.time() + timeout
        while True:
            while b"\0" in self.buf:
                raw, self.buf = self.buf.split(b"\0", 1)
                m = json.loads(raw)
                if m.get("id") == self.next_id:
                    if "error" in m:
                        raise RuntimeError("%s: %s" % (method, m["error"]))
                    return m["result"]
            left = end - time.time()
            if left <= 0 or not select.select([self.out_r], [], [], left)[0]:
                raise RuntimeError("%s: no reply in %d s" % (method, timeout))
            chunk = os.read(self.out_r, 1 << 20)
            if not chunk:
                raise RuntimeError("%s: Chromium closed its pipe" % method)
            self.buf += chunk

    def js(self, expr, timeout=30):
        r = self.call("Runtime.evaluate", timeout=timeout, expression=expr, awaitPromise=True,
                      returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError("page: %s" % json.dumps(r["exceptionDetails"])[:600])
        return r["result"].get("value")

    def close(self):
        try:
            self.call("Browser.close", timeout=5)
        except (RuntimeError, OSError, ValueError):
            pass
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


# In the page (devtools://devtools/bundled/trace_app.html, the Performance
# panel's standalone trace viewer, bundled with Chromium: offline): the
# panel's own trace engine parses the trace's events into the model its
# flame chart draws; handed back: every entry of its renderer data
# [pid, tid, name, parent entry's name or null].
LOAD = """(async () => {
  const T = await import('./models/trace/trace.js');
  const model = T.TraceModel.Model.createWithAllHandlers();
  const doc = JSON.parse(%(text)s);
  await model.parse(doc.traceEvents, {metadata: {}, isFreshRecording: false});
  const pt = model.parsedTrace(0);
  const r = (pt.data || pt).Renderer;
  const out = [];
  for (const [e, node] of r.entryToNode)
    out.push([e.pid, e.tid, e.name, node.parent ? node.parent.entry.name : null]);
  let threads = 0;
  for (const p of r.processes.values()) threads += p.threads.size;
  return {slices: out, threads: threads};
})()"""


def file_slices(trace):
    """(pid, tid, name, parent name or None) per complete event of the file,
    the parent worked out from ts and dur (innermost enclosing event on
    the thread, in whole nanoseconds)."""
    with open(trace) as f:
        xs = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    out = []
    for tid in {(e["pid"], e["tid"]) for e in xs}:
        evs = []
        for e in xs:
            if (e["pid"], e["tid"]) == tid:
                t0 = round(float(e["ts"]) * 1000)
                evs.append((t0, t0 + round(float(e["dur"]) * 1000), e["name"]))
        stack = []
        for t0, t1, name in sorted(evs, key=lambda v: (v[0], v[0] - v[1])):
            while stack and stack[-1][1] <= t0:
                stack.pop()
            out.append((tid[0], tid[1], name, stack[-1][2] if stack else None))
            stack.append((t0, t1, name))
    return sorted(out, key=repr)


def package_trace(root):
    """A trace of the package's default profile: a tiny MLP, 2 steps."""
    import torch
    from nprobe.torch import PrecisionDebugger
    cfg = os.path.join(root, "p.json")
    with open(cfg, "w") as f:
        json.dump({"task": "profile", "dump_path": os.path.join(root, "pkg")}, f)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    dbg = PrecisionDebugger(config_path=cfg)
    for _ in range(2):
        dbg.start(model)
        model(torch.randn(8, 16)).square().mean().backward()
        dbg.stop()
        dbg.step()
    dbg.close()
    return dbg.traces[0]


def main():
    browser = chromium()
    if not browser:
        print("SKIP: no Chromium on PATH (chromium, chromium-browser, google-chrome or $NP_CHROMIUM; "
              "Debian: apt-get install chromium): the traces were not opened in its trace viewer")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as root:
        rc, so, se = run(["train", "--model", "gpt", "--threads", "1", "--steps", "2", "--profile", "rt"],
                         root)
        check(rc == 0, "train --profile: exit %d %s" % (rc, se))
        traces = [os.path.join(root, "rt", "rank0.trace.json"), package_trace(root)]
        dt = DevTools(browser, root)
        try:
            tgt = dt.call("Target.createTarget", url="devtools://devtools/bundled/trace_app.html")
            dt.session = dt.call("Target.attachToTarget", targetId=tgt["targetId"],
                                 flatten=True)["sessionId"]
            ready = False
            for _ in range(200):
                try:
                    ready = dt.js("(async () => { const T = await import('./models/trace/trace.js'); "
                                  "return !!(T.TraceModel && T.TraceModel.Model); })()")
                except RuntimeError:
                    ready = False
                if ready:
                    break
                time.sleep(0.05)
            if not ready:
                print("SKIP: this Chromium (%s) has no DevTools trace engine "
                      "(devtools://devtools/bundled/models/trace/trace.js)" % browser)
                sys.exit(77)
            for trace in traces:
                with open(trace) as f:
                    got = dt.js(LOAD % {"text": json.dumps(f.read())})
                page = sorted((tuple(v) for v in got["slices"]), key=repr)
                want = file_slices(trace)
                name = os.path.basename(trace)
                check(len(page) == len(want), "%s: the Performance panel's model holds %d slices, "
                      "the file %d complete events" % (name, len(page), len(want)))
                diff = [w for w in want if w not in page][:5]
                check(page == want, "%s: slices or nesting differ, e.g. the file's %s" % (name, diff))
                inner = sum(1 for _p, _t, n, par in page if par and par.startswith("Module.") and
                            not n.startswith("Module."))
                check(inner > 0, "%s: no API slice inside a module slice" % name)
                print("%s: the DevTools Performance panel's trace engine holds %d slices on %d "
                      "thread(s), %d API calls inside module calls, nested as the file" % (
                          name, len(page), got["threads"], inner))
        finally:
            dt.close()
    sys.exit(finish())


if __name__ == "__main__":
    main()
