"""test_torch_harden.py - the package never changes what the program does,
and what it dumps is what the program saw (issue 30).

Each case failed before its fix:
- fork: DataLoader workers forked after start() ran the captured collate
  (torch.stack), took the step's dump.h5.partial and the training process
  then dumped nothing; a forked child's atexit completed the parent's step.
- odd tensor kinds (sparse COO/CSR, meta, quantized, nested, complex,
  nn.Embedding(sparse=True) training) and torch.inference_mode() raised
  inside the user's ops; a lone surrogate in a module name raised
  UnicodeEncodeError in the forward.
- negative-bit views (x.conj().imag, torch._neg_view) were read from raw
  memory: statistics with the opposite sign.
- an interrupted step (uncaught exception, Ctrl-C, SystemExit) was stamped
  complete by the at-exit close.
- threads got the same call number (one call's leaves refused as
  duplicates); a caught module exception left a dead frame that parented
  every later call; a second backward through a retained graph was refused
  as duplicates; a debugger started inside another one said nothing;
  wrap_api cut a name at a NUL.
- ConfigChecker hashed complex weights after an int64 cast (1.2+1j and
  1.4-5j hashed equal).
Every check reads the dump with h5py and compares with what torch computed.
"""
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import warnings

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from nptest import check, finish, run  # noqa: E402

import nprobe.torch as nt  # noqa: E402
from nprobe.torch import PrecisionDebugger  # noqa: E402


def config(root, name="d", task="statistics", level="L1", steps="[0]", **more):
    path = os.path.join(root, name + ".json")
    with open(path, "w") as f:
        json.dump(dict({"task": task, "dump_path": os.path.join(root, name), "level": level,
                        "step": json.loads(steps)}, **more), f)
    return path


def step_file(root, name="d", step=0):
    d = os.path.join(root, name, f"step{step}", "rank0")
    for f in ("dump.h5", "dump.h5.partial"):
        if os.path.exists(os.path.join(d, f)):
            return os.path.join(d, f)
    return None


def rows(path):
    """{leaf name: row} and [(call, parent)] of a dump file."""
    with h5py.File(path, "r") as f:
        ents = {r["name"].decode(): r for r in f["entries"][...]}
        calls = [(r["call"].decode(), r["parent"].decode()) for r in f["calls"][...]]
        complete = int(f.attrs["complete"])
    return ents, calls, complete


# ---- fork ------------------------------------------------------------------

def case_fork(root):
    cfg = config(root, "fork")
    dbg = PrecisionDebugger(config_path=cfg)
    model = torch.nn.Linear(4, 2)
    data = torch.utils.data.TensorDataset(torch.randn(8, 4))
    dl = torch.utils.data.DataLoader(data, batch_size=4, num_workers=2,
                                     multiprocessing_context="fork")
    dbg.start(model)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        n = 0
        for (x,) in dl:           # workers forked after start(): collate = torch.stack
            model(x).sum().backward()
            n += 1
        # a plain fork whose child runs a captured op and closes (as at its exit)
        pid = os.fork()
        if pid == 0:
            try:
                torch.stack([torch.ones(2), torch.ones(2)])
                dbg.close()       # what the child's atexit runs
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        dbg.stop()
        dbg.step()
        dbg.close()
    check(n == 2, "fork: the loader gave %d batches" % n)
    check(not [x for x in w if str(x.message).startswith("nprobe")],
          "fork: warnings %s" % [str(x.message) for x in w])
    p = step_file(root, "fork")
    check(p is not None and p.endswith("dump.h5"), "fork: no finished step file: %s" % p)
    if p:
        ents, calls, complete = rows(p)
        names = [c for c, _ in calls]
        check(complete == 1, "fork: complete %d" % complete)
        check(sum(c.startswith("Functional.linear.") and c.endswith(".forward") for c in names)
              == 2, "fork: linear calls %s" % names)
        check(not any(c.startswith("Torch.stack") for c in names),
              "fork: a child's collate was dumped: %s" % names)


# ---- odd tensor kinds ----------------------------------------------------------

def odd_cases():
    def coo():
        return torch.randn(3, 3).to_sparse()

    def q():
        return torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.quint8)

    cases = [
        ("sparse coo add", lambda: torch.add(coo(), coo())),
        ("sparse coo mm", lambda: torch.mm(coo(), torch.randn(3, 2))),
        ("sparse coo to_dense", lambda: coo().to_dense()),
        ("sparse coo sum", lambda: torch.sparse.sum(coo())),
        ("sparse coo mul", lambda: torch.mul(coo(), 2.0)),
        ("sparse csr mm", lambda: torch.mm(torch.randn(3, 3).to_sparse_csr(), torch.randn(3, 2))),
        ("sparse csr to_dense", lambda: torch.randn(3, 3).to_sparse_csr().to_dense()),
        ("meta add", lambda: torch.add(torch.empty(3, device="meta"),
                                       torch.empty(3, device="meta"))),
        ("meta matmul", lambda: torch.matmul(torch.empty(2, 3, device="meta"),
                                             torch.empty(3, 4, device="meta"))),
        ("meta relu", lambda: torch.nn.functional.relu(torch.empty(5, device="meta"))),
        ("quantized dequantize", lambda: q().dequantize()),
        ("quantized relu", lambda: torch.relu(q())),
        ("quantized int_repr", lambda: q().int_repr()),
        ("nested add", lambda: torch.add(
            torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]),
            torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]))),
        ("nested relu", lambda: torch.nn.functional.relu(
            torch.nested.nested_tensor([torch.ones(2), -torch.ones(3)]))),
        ("complex mul", lambda: torch.mul(torch.randn(3, dtype=torch.complex64),
                                          torch.randn(3, dtype=torch.complex64))),
        ("complex abs", lambda: torch.abs(torch.randn(3, dtype=torch.cfloat))),
        ("uint8 add", lambda: torch.add(torch.arange(4, dtype=torch.uint8), 1)),
    ]
    if hasattr(torch, "float8_e4m3fn"):
        cases.append(("float8 to", lambda: torch.add(torch.randn(4).to(torch.float8_e4m3fn)
                                                     .to(torch.float32), 1)))
    return cases


def same(a, b):
    if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
        return False
    if not isinstance(a, torch.Tensor):
        return a == b
    if a.layout != b.layout or a.dtype != b.dtype or a.device != b.device or \
            a.is_nested != b.is_nested:
        return False
    if a.device.type == "meta":
        return a.shape == b.shape
    if a.is_nested:
        return all(same(x, y) for x, y in zip(a.unbind(), b.unbind()))
    if a.is_quantized:
        a, b = a.dequantize(), b.dequantize()
    if a.layout != torch.strided:
        a, b = a.to_dense(), b.to_dense()
    return a.shape == b.shape and torch.equal(a, b)


def run_seeded(fn):
    torch.manual_seed(7)
    try:
        return fn(), None
    except Exception as e:  # noqa: BLE001 - compared with the run without the debugger
        return None, f"{type(e).__name__}: {e}"


def case_odd_kinds(root):
    cases = odd_cases()
    ref = [run_seeded(fn) for _, fn in cases]
    dbg = PrecisionDebugger(config_path=config(root, "odd"))
    dbg.start()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = [run_seeded(fn) for _, fn in cases]
        # nn.Embedding(sparse=True) training, forward and backward captured
        torch.manual_seed(3)
        emb = torch.nn.Embedding(10, 3, sparse=True)
        opt = torch.optim.SGD(emb.parameters(), lr=0.5)
        w0 = emb.weight.detach().clone()
        idx = torch.tensor([1, 2, 1])
        dbg.start(emb)
        loss = emb(idx).sum()
        err = None
        try:
            loss.backward()
            opt.step()
        except Exception as e:  # noqa: BLE001
            err = e
        dbg.stop()
        dbg.step()
        dbg.close()
    for (name, _), (r, re_), (g, ge) in zip(cases, ref, got):
        check(ge == re_, f"odd kinds: {name} raised {ge} (without the debugger: {re_})")
        if re_ is None and ge is None:
            check(same(r, g), f"odd kinds: {name} returned another result")
    check(err is None, "odd kinds: sparse Embedding training raised %r" % err)
    exp = w0.clone()
    exp[1] -= 0.5 * 2
    exp[2] -= 0.5
    check(torch.equal(emb.weight.detach(), exp), "odd kinds: sparse Embedding update differs")
    msgs = [str(x.message) for x in w if str(x.message).startswith("nprobe")]
    # one warning per kind, not per tensor
    check(len(msgs) == len(set(m.split(":")[1] if ":" in m else m for m in msgs)),
          "odd kinds: repeated warnings %s" % msgs)
    check(any("sparse" in m for m in msgs), "odd kinds: no warning names sparse: %s" % msgs)
    check(dbg.summary is not None and dbg.summary.get("skipped", 0) > 0,
          "odd kinds: the summary counts no skipped tensor: %s" % dbg.summary)


def case_inference_mode(root):
    dbg = PrecisionDebugger(config_path=config(root, "inf"))
    model = torch.nn.Linear(3, 2)
    x = torch.randn(4, 3)
    ref = model(x)
    dbg.start(model)
    err = None
    try:
        with torch.inference_mode():
            y = model(x)
            z = torch.relu(y)
            z.add_(1)              # in place on an inference tensor
    except Exception as e:  # noqa: BLE001
        err = e
    dbg.stop()
    dbg.step()
    dbg.close()
    check(err is None, "inference_mode: %r" % err)
    if err is None:
        check(torch.equal(y, ref.detach()), "inference_mode: result differs")
        ents, calls, _ = rows(step_file(root, "inf"))
        r = ents.get("Torch.relu.0.forward.output.0")
        check(r is not None and abs(r["max"] - float(torch.relu(ref).max())) < 1e-6,
              "inference_mode: relu output not dumped right")
        a = ents.get("Tensor.add_.0.forward.output.0")
        check(a is not None and abs(a["max"] - float(torch.relu(ref).max() + 1)) < 1e-6,
              "inference_mode: add_ output not dumped after the write")


def case_surrogate(root):
    dbg = PrecisionDebugger(config_path=config(root, "sur", level="mix"))
    model = torch.nn.Sequential()
    bad = os.fsdecode(b"lin\xff")          # 'lin\udcff'
    model.add_module(bad, torch.nn.Linear(2, 2))
    dbg.start(model)
    err = None
    try:
        model(torch.ones(1, 2)).sum().backward()
    except Exception as e:  # noqa: BLE001
        err = e
    dbg.stop()
    dbg.step()
    dbg.close()
    check(err is None, "surrogate module name: %r" % err)
    ents, calls, _ = rows(step_file(root, "sur"))
    check(any(c.startswith("Module.lin\ufffd.Linear.forward.0") for c, _ in calls),
          "surrogate module name: no module row: %s" % calls)


# ---- what the program saw ----------------------------------------------------

def case_neg_views(root):
    dbg = PrecisionDebugger(config_path=config(root, "neg"))
    x = torch.tensor([1 + 2j, -3 + 4j, 5 - 6j], dtype=torch.complex64)
    dbg.start()
    a = x.conj().imag            # negative bit set: -2, -4, 6
    ya = torch.relu(a)
    b = torch._neg_view(torch.tensor([1.0, -7.0, 3.0]))
    yb = torch.relu(b)
    dbg.stop()
    dbg.step()
    dbg.close()
    check(torch.equal(ya, torch.tensor([0.0, 0.0, 6.0])), "neg views: result changed")
    check(torch.equal(yb, torch.tensor([0.0, 7.0, 0.0])), "neg views: result changed (b)")
    ents, _, _ = rows(step_file(root, "neg"))
    for call, seen in (("Torch.relu.0.forward", a), ("Torch.relu.1.forward", b)):
        r = ents.get(call + ".input.0")
        s = seen.resolve_neg().double()
        check(r is not None and r["max"] == float(s.max()) and r["min"] == float(s.min()) and
              abs(r["mean"] - float(s.mean())) < 1e-12,
              "neg views: %s input dumped (max, min) %s, the program saw max %g min %g" %
              (call, None if r is None else (r["max"], r["min"]), s.max(), s.min()))


INTERRUPT = r"""
import os, signal, sys, torch
from nprobe.torch import PrecisionDebugger
dbg = PrecisionDebugger(config_path=sys.argv[1])
m = torch.nn.Linear(3, 2)
dbg.start(m)
m(torch.ones(1, 3)).sum().backward()
how = sys.argv[2]
if how == "raise":
    raise RuntimeError("the user's error")
if how == "sigint":
    os.kill(os.getpid(), signal.SIGINT)
if how == "exit":
    sys.exit(3)
if how == "close":
    dbg.stop(); dbg.close()
"""


def case_interrupted(root):
    script = os.path.join(root, "interrupt.py")
    with open(script, "w") as f:
        f.write(INTERRUPT)
    hows = ("raise", "sigint", "exit", "close")
    # the uncaught exception with the writer thread (its queue drained first)
    procs = [subprocess.Popen([sys.executable, script,
                               config(root, "int_" + how, async_dump=how == "raise"), how],
                              cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for how in hows]       # in parallel: each pays torch's import
    for how, p in zip(hows, procs):
        err = p.communicate(timeout=120)[1]
        f = step_file(root, "int_" + how)
        if how == "close":      # an explicit close after stop(): a finished step
            check(p.returncode == 0 and f and f.endswith("dump.h5"),
                  "close after stop: %s %s" % (f, err.decode()[-300:]))
            continue
        check(p.returncode != 0, "interrupted %s: exit 0" % how)
        check(f is not None and f.endswith(".partial"),
              "interrupted %s: step file %s (not left .partial)" % (how, f))
        if f:
            ents, calls, complete = rows(f)
            check(complete == 0, "interrupted %s: complete = %d" % (how, complete))
            check("Functional.linear.0.forward.output.0" in ents,
                  "interrupted %s: the rows so far are not in the .partial" % how)
    # compared with the finished run, the interrupted one is not a clean pass
    code, out, err = run(["compare", "-b", os.path.join(root, "int_close"), "-c",
                          os.path.join(root, "int_raise"), "-o", os.path.join(root, "int_rep")],
                         root)
    check(code != 0 and "incomplete" in out + err,
          "interrupted: compare with the finished run exits %d: %s" % (code, (out + err)[-300:]))


def case_threads(root):
    dbg = PrecisionDebugger(config_path=config(root, "thr"))
    dbg.start()

    class Yielding(dict):
        """The per-API counters, yielding the GIL between the read of a
        count and its update: where a thread switch lost a call (2 of 5
        tries in the issue), every time."""
        def get(self, k, default=None):
            v = dict.get(self, k, default)
            time.sleep(0.0002)
            return v
    dbg._counts = Yielding()        # the counters of the step start() opened
    barrier = threading.Barrier(4)
    x = torch.randn(8)

    def work():
        barrier.wait()
        for _ in range(50):
            torch.relu(x)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)     # switch threads often: the race shows at once
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        ts = [threading.Thread(target=work) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        sys.setswitchinterval(old)
        dbg.stop()
        dbg.step()
        dbg.close()
    check(not [x for x in w if str(x.message).startswith("nprobe")],
          "threads: %s" % [str(x.message) for x in w])
    _, calls, _ = rows(step_file(root, "thr"))
    names = sorted(c for c, _ in calls)
    check(names == sorted(f"Torch.relu.{i}.forward" for i in range(200)),
          "threads: %d relu calls of 200, numbers %s..." % (len(names), names[:3]))


class Boom(torch.nn.Module):
    def forward(self, x):
        raise ValueError("boom")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.boom = Boom()
        self.lin = torch.nn.Linear(2, 2)

    def forward(self, x):
        try:
            self.boom(x)
        except ValueError:
            pass
        return torch.relu(self.lin(x))


def case_module_exception(root):
    dbg = PrecisionDebugger(config_path=config(root, "mexc", level="mix"))
    net = Net()
    dbg.start(net)
    net(torch.ones(1, 2)).sum().backward()
    dbg.stop()
    dbg.step()
    dbg.close()
    _, calls, _ = rows(step_file(root, "mexc"))
    names = {c for c, _ in calls}
    dead = [(c, p) for c, p in calls if p and p not in names]
    check(not dead, "module exception: calls parented by a call with no row: %s" % dead)
    check(dict(calls).get("Torch.relu.0.forward") == "",
          "module exception: relu's parent %r" % dict(calls).get("Torch.relu.0.forward"))


def case_second_backward(root):
    dbg = PrecisionDebugger(config_path=config(root, "bw2"))
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    dbg.start()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        y = torch.mul(x, x)
        y.sum().backward(retain_graph=True)        # mul's output.0: 1 * x
        (y * 3).sum().backward()                  # 3 * x, through the same mul
        dbg.stop()
        dbg.step()
        dbg.close()
    check(not [m for m in w if str(m.message).startswith("nprobe")],
          "second backward: %s" % [str(m.message) for m in w])
    ents, calls, _ = rows(step_file(root, "bw2"))
    bw = sorted(c for c, _ in calls if c.startswith("Torch.mul.0.backward"))
    check(len(bw) == 2, "second backward: mul's backward rows %s" % bw)
    maxes = sorted(float(ents[c + ".output.0"]["max"]) for c in bw
                   if c + ".output.0" in ents)
    check(maxes == [3.0, 9.0], "second backward: gradients %s, expected [3, 9]" % maxes)


def case_nested_debuggers(root):
    outer = PrecisionDebugger(config_path=config(root, "outer"))
    inner = PrecisionDebugger(config_path=config(root, "inner"))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        outer.start()
        torch.relu(torch.ones(2))
        inner.start()
        torch.relu(torch.ones(2))
        inner.stop()
        torch.relu(torch.ones(2))
        outer.stop()
        inner.step()
        outer.step()
        inner.close()
        outer.close()
    msgs = [str(m.message) for m in w if str(m.message).startswith("nprobe")]
    check(any("another" in m for m in msgs), "nested debuggers: nothing said: %s" % msgs)
    _, oc, _ = rows(step_file(root, "outer"))
    check(len(oc) == 2, "nested debuggers: the outer recorded %s (the calls before and "
          "after the inner one)" % oc)


def case_wrap_api_nul():
    try:
        nt.wrap_api("Npu.fused\0evil", lambda x: x)
        err = None
    except ValueError as e:
        err = e
    check(err is not None, "wrap_api: a name with a NUL accepted")


def case_complex_weights(root):
    from nprobe.torch import ConfigChecker

    def pack(val, name):
        m = torch.nn.Module()
        m.w = torch.nn.Parameter(torch.tensor([val], dtype=torch.complex64))
        out = os.path.join(root, name)
        ConfigChecker(m, output_zip_path=out)
        import zipfile
        with zipfile.ZipFile(out) as z:
            return json.loads(z.read("weights.json"))

    a = pack(1.2 + 1j, "ca.zip")
    b = pack(1.4 - 5j, "cb.zip")
    check(json.dumps(a, sort_keys=True) != json.dumps(b, sort_keys=True),
          "complex weights: 1.2+1j and 1.4-5j give the same weights.json")


def main():
    with tempfile.TemporaryDirectory() as root:
        for case in (case_fork, case_odd_kinds, case_inference_mode, case_surrogate,
                     case_neg_views, case_interrupted, case_threads, case_module_exception,
                     case_second_backward, case_nested_debuggers, case_complex_weights):
            t0 = time.time()
            try:
                case(root)
            except Exception as e:  # noqa: BLE001 - a case that raises fails, the rest run
                import traceback
                traceback.print_exc()
                check(False, "%s raised %r" % (case.__name__, e))
            print("%s: %.1f s" % (case.__name__, time.time() - t0))
        case_wrap_api_nul()
    return finish()


if __name__ == "__main__":
    sys.exit(main())
