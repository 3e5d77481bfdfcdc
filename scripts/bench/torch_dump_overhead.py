"""scripts/bench/torch_dump_overhead.py - the cost of nprobe.torch's
PrecisionDebugger on a PyTorch training step: the same script (the GPT of
torch_gpt.py, AdamW, clipping) without the debugger and with it (every step
dumped at L1, every API call), statistics and md5, each mode a process of
its own, modes interleaved round by round; prints the median step time of
each mode and the median over rounds of each round's ratio to the plain
script (wall clock and CPU time). With --tensor also the tensor task (async
writes) and, as its baseline, a plain sequential write of the same bytes
per step as the dump leaves them: a new file per step, 4 MiB os.write
blocks, kept (the dump keeps its step files) and on the disk when the step
ends (fsync; the dump writes its payloads with O_DIRECT). The tensor task's
write speed is bytes / (tensor step - plain step), the baseline's bytes /
its time. For information two more baselines: the same write into a file
removed right after (its bytes never leave the page cache: a memory copy),
and with O_DIRECT (the disk itself).

usage: torch_dump_overhead.py [--model big|tiny|llama] [--rounds R] [--steps N] [--tensor] [--msprobe]
                              [--profile]
  big:   4 layers x 256 wide, context 128, batch 8 (the issue's GPT 4x256)
  tiny:  2 layers x 32 wide, context 16, batch 4
  llama: transformers' LlamaForCausalLM built from its config with random
         weights (no hub), 4 layers x 256 (MLP 688, 4 heads), sequence 128,
         batch 8, vocabulary 512
With --msprobe, msprobe's own PrecisionDebugger (mindstudio-probe) on the
same script and config (statistics; md5 as its summary_mode), as more modes
of the same interleaved rounds. With --profile the package's profile task
("task": "profile": torch.profiler with module ranges, every step recorded,
the trace written at close, outside the timed steps).
One thread (torch.set_num_threads(1)). The package must be importable
(PYTHONPATH=python NPROBE_LIB=build/release/lib/libnprobe.so).
"""
import argparse
import json
import mmap
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

SIZES = {"big": dict(layers=4, heads=4, width=256, context=128, batch=8, vocab=512),
         "tiny": dict(layers=2, heads=2, width=32, context=16, batch=4, vocab=64),
         "llama": dict(layers=4, heads=4, width=256, context=128, batch=8, vocab=512)}
MODES = ("plain", "statistics", "md5")
MSPROBE_MODES = ("msprobe_statistics", "msprobe_md5")
PROFILE_MODES = ("profile", "profile_shapes", "torchprof", "torchprof_shapes")


class TorchProf:
    """torch.profiler itself, as a user would run it around the same steps
    (CPU activity, every step recorded, no module ranges): the reference the
    profile task's cost is measured against. shapes: record_shapes and
    with_flops (what the profile task turned on before they became opt-in)."""

    def __init__(self, shapes):
        import torch
        self.p = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                        record_shapes=shapes, with_flops=shapes)
        self.on = False

    def start(self, model):
        if not self.on:
            self.on = True
            self.p.start()

    def stop(self):
        pass

    def step(self):
        self.p.step()

    def close(self):
        self.p.stop()


def build_model(name, s):
    """(model, loss(model, idx, tgt)) for a SIZES entry."""
    import torch
    if name == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig(hidden_size=s["width"], intermediate_size=688,
                          num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
                          num_key_value_heads=s["heads"], vocab_size=s["vocab"],
                          max_position_embeddings=s["context"])
        return LlamaForCausalLM(cfg), lambda m, i, t: m(input_ids=i, labels=t).loss
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from torch_gpt import GPT
    torch.manual_seed(0)
    return (GPT(s["layers"], s["heads"], s["width"], s["context"], s["vocab"]),
            lambda m, i, t: m(i, t))


def make_debugger(a):
    """The PrecisionDebugger of a.mode (nprobe's, or msprobe's for the
    msprobe_* modes), every step at L1, its config written into a.out."""
    task = a.mode.replace("msprobe_", "")
    cfg = os.path.join(a.out, f"{a.mode}.json")
    c = {"task": task, "dump_path": os.path.join(a.out, "dump_" + a.mode), "level": "L1"}
    if a.mode.startswith("torchprof"):
        return TorchProf(a.mode == "torchprof_shapes")
    if a.mode.startswith("profile"):  # the profile task: torch.profiler, every step recorded
        c = {"task": "profile", "dump_path": c["dump_path"]}
        if a.mode == "profile_shapes":
            c["profile"] = {"record_shapes": True}
    if a.mode.startswith("msprobe_"):
        c = {"task": "statistics", "dump_path": c["dump_path"], "rank": [], "step": [],
             "level": "L1", "statistics": {"scope": [], "list": [], "data_mode": ["all"],
                                           "summary_mode": "md5" if task == "md5" else
                                           "statistics"}}
        from msprobe.pytorch import PrecisionDebugger
    else:
        from nprobe.torch import PrecisionDebugger
        if a.mode == "tensor":
            c.update(async_dump=True, queue_mb=256)
    with open(cfg, "w") as f:
        json.dump(c, f)
    return PrecisionDebugger(config_path=cfg)
TENSOR_MODES = ("tensor", "seqwrite", "seqcache", "seqdirect")
SEQ_MODES = TENSOR_MODES[1:]


def child(a):
    import torch
    s = SIZES[a.model]
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, loss_of = build_model(a.model, s)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.01)
    d = None
    if a.mode in SEQ_MODES:
        return seqwrite(a, a.mode)
    if a.mode != "plain":
        d = make_debugger(a)
    times, cpu = [], []
    for step in range(a.warmup + a.steps):
        idx = torch.randint(0, s["vocab"], (s["batch"], s["context"]))
        tgt = torch.randint(0, s["vocab"], (s["batch"], s["context"]))
        t0, c0 = time.perf_counter(), time.process_time()
        if d:
            d.start(model)
        opt.zero_grad(set_to_none=True)
        loss = loss_of(model, idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if d:
            d.stop()
            d.step()
        if step >= a.warmup:
            times.append((time.perf_counter() - t0) * 1000.0)
            cpu.append((time.process_time() - c0) * 1000.0)
    nbytes = 0
    if a.mode in PROFILE_MODES:
        d.close()                       # the trace is written outside the timed steps
    elif d and not a.mode.startswith("msprobe_"):
        d.close()
        nbytes = d.summary["bytes"] // max(1, d.summary["steps"])
    print(f"median_ms {statistics.median(times):.4f} {statistics.median(cpu):.4f} {nbytes}")


def seqwrite(a, mode):
    """The baselines of the tensor task: a.bytes bytes written sequentially
    into a new file per step (4 MiB blocks, as a plain writer would).
    seqwrite: the files kept and each fsync'ed before the step ends (what
    the dump leaves: its step files, on the disk); seqcache: each file
    removed right after it is written (never leaves the page cache);
    seqdirect: through O_DIRECT (page-aligned memory, the size rounded up
    to 4 KiB), or "median_ms nan" where the file system refuses it."""
    direct = mode == "seqdirect"
    block = mmap.mmap(-1, 4 << 20)
    block.write(os.urandom(4 << 20))
    view = memoryview(block)
    times, cpu, kept = [], [], []
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (os.O_DIRECT if direct else 0)
    try:
        for step in range(a.warmup + a.steps):
            path = os.path.join(a.out, f"seq{step}.bin")
            t0, c0 = time.perf_counter(), time.process_time()
            fd = os.open(path, flags, 0o644)
            kept.append(path)
            left = (a.bytes + 4095) // 4096 * 4096 if direct else a.bytes
            try:
                while left > 0:
                    left -= os.write(fd, view[:min(left, len(block))])
                if mode == "seqwrite":
                    os.fsync(fd)
            except OSError:
                print("median_ms nan nan 0")
                return
            finally:
                os.close(fd)
            if step >= a.warmup:
                times.append((time.perf_counter() - t0) * 1000.0)
                cpu.append((time.process_time() - c0) * 1000.0)
            if mode != "seqwrite":
                os.remove(kept.pop())
    finally:
        for path in kept:
            os.remove(path)
    print(f"median_ms {statistics.median(times):.4f} {statistics.median(cpu):.4f} {a.bytes}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(SIZES), default="big")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--markdown", action="store_true", help="print table rows for bench_torch.sh")
    ap.add_argument("--tensor", action="store_true",
                    help="also the tensor task and a plain sequential write of its bytes")
    ap.add_argument("--msprobe", action="store_true",
                    help="also msprobe's PrecisionDebugger (statistics and md5) on the same script")
    ap.add_argument("--profile", action="store_true",
                    help="also the package's profile task (torch.profiler, module ranges; every "
                    "step; without and with record_shapes) and torch.profiler alone (the same two)")
    ap.add_argument("--modes", help="only these modes, comma-separated (plain is always run)")
    ap.add_argument("--mode", choices=MODES + TENSOR_MODES + MSPROBE_MODES + PROFILE_MODES,
                    help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--bytes", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.mode:
        return child(a)
    modes = MODES + (TENSOR_MODES if a.tensor else ()) + (MSPROBE_MODES if a.msprobe else ()) + \
        (PROFILE_MODES if a.profile else ())
    if a.modes:
        modes = ("plain",) + tuple(m for m in a.modes.split(",") if m != "plain")
        bad = [m for m in modes if m not in MODES + TENSOR_MODES + MSPROBE_MODES + PROFILE_MODES]
        if bad:
            sys.exit(f"torch_dump_overhead.py: --modes: unknown {bad}")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    res = {m: [] for m in modes}
    cpu = {m: [] for m in modes}
    nbytes = 0
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as out:
        for r in range(a.rounds):
            for m in modes:
                p = subprocess.run([sys.executable, __file__, "--model", a.model, "--mode", m,
                                    "--steps", str(a.steps), "--warmup", str(a.warmup),
                                    "--out", out, "--bytes", str(nbytes)],
                                   env=env, capture_output=True, text=True)
                if p.returncode:
                    sys.exit(f"torch_dump_overhead.py: {m} failed: {p.stderr[-2000:]}")
                w, c, b = p.stdout.split()[-3:]
                res[m].append(float(w))
                cpu[m].append(float(c))
                if m == "tensor":
                    nbytes = int(b)
            for m in modes:
                shutil.rmtree(os.path.join(out, "dump_" + m), ignore_errors=True)
    report(a, modes, res, cpu, nbytes)


def ratio(res, m, base="plain"):
    """Median over rounds of the round's ratio (the rounds interleave the
    modes: a round's load is shared by its modes)."""
    return statistics.median(x / b for x, b in zip(res[m], res[base]))


def report(a, modes, res, cpu, nbytes):
    base, cbase = statistics.median(res["plain"]), statistics.median(cpu["plain"])
    if a.markdown:
        targets = {("big", "statistics"): 1.3, ("big", "md5"): 1.5,
                   ("tiny", "statistics"): 57 / 8, ("tiny", "md5"): 117 / 8,
                   ("llama", "statistics"): 1.3, ("llama", "md5"): 1.5}
        label = {"big": "GPT 4x256", "tiny": "tiny GPT 2x32", "llama": "HF Llama 4x256"}[a.model]
        for m in (m for m in MODES[1:] if m in modes):
            t = targets[(a.model, m)]
            for kind, v, b in (("wall", res, base), ("cpu", cpu, cbase)):
                r = ratio(v, m)
                met = "yes" if r <= t else "no"
                print(f"| {label}, {m} L1, {kind} time per step | "
                      f"{statistics.median(v[m]):.1f} ms | {b:.1f} ms | x{r:.2f} | "
                      f"<= x{t:.3g} | {met} |")
        for m in MSPROBE_MODES:
            if m not in modes:
                continue
            task = m.replace("msprobe_", "")
            for kind, v, b in (("wall", res, base), ("cpu", cpu, cbase)):
                ours = [x / p - 1 for x, p in zip(v[task], v["plain"])]
                theirs = [x / p - 1 for x, p in zip(v[m], v["plain"])]
                r = statistics.median(o / max(t, 1e-9) for o, t in zip(ours, theirs))
                print(f"| {label}, msprobe 26 {task} L1, {kind} time per step | "
                      f"{statistics.median(v[m]):.1f} ms | {b:.1f} ms | x{ratio(v, m):.2f} | "
                      f"- | - |")
                print(f"| {label}, nprobe's {task} overhead over msprobe's ({kind}) | "
                      f"{statistics.median(ours) * 100:.0f} % | "
                      f"{statistics.median(theirs) * 100:.0f} % | {r:.2f} | "
                      f"{'<= 0.33' if task == 'statistics' else '-'} | "
                      f"{('yes' if r <= 1 / 3 else 'no') if task == 'statistics' else '-'} |")
        if "tensor" in modes:
            extra = [t - p for t, p in zip(res["tensor"], res["plain"])]
            sp = [nbytes / max(e, 1e-3) / 1e3 for e in extra]            # MB/s
            sq = [nbytes / max(q, 1e-3) / 1e3 for q in res["seqwrite"]]
            r = statistics.median(x / y for x, y in zip(sp, sq))
            print(f"| {label}, tensor task write speed ({nbytes / 1e6:.0f} MB per step, "
                  f"async) vs plain sequential write (files kept, on the disk at the step's "
                  f"end) | {statistics.median(sp):.0f} MB/s | "
                  f"{statistics.median(sq):.0f} MB/s | {r:.2f} | >= 0.5 | "
                  f"{'yes' if r >= 0.5 else 'no'} |")
            for m, what in (("seqcache", "a write into the page cache, the file removed at "
                             "once (a memory copy"),
                            ("seqdirect", "a plain O_DIRECT sequential write (the disk")):
                sd = [nbytes / q / 1e3 for q in res[m] if q == q and q > 0]
                if len(sd) == len(sp):
                    rd = statistics.median(x / y for x, y in zip(sp, sd))
                    print(f"| {label}, the same vs {what}; for information) | "
                          f"{statistics.median(sp):.0f} MB/s | "
                          f"{statistics.median(sd):.0f} MB/s | {rd:.2f} | - | - |")
        return
    print(f"model {a.model} ({SIZES[a.model]}), {a.rounds} interleaved rounds of "
          f"{a.steps} steps, one thread; medians of the per-round medians, ratios the "
          f"median of the per-round ratios")
    for m in modes:
        if m in SEQ_MODES:
            print(f"  {m:<11} wall {statistics.median(res[m]):9.2f} ms for {nbytes} bytes")
            continue
        print(f"  {m:<11} wall {statistics.median(res[m]):9.2f} ms  x{ratio(res, m):.2f}   "
              f"cpu {statistics.median(cpu[m]):9.2f} ms  x{ratio(cpu, m):.2f}")
    for ours, ref in (("profile", "torchprof"), ("profile_shapes", "torchprof_shapes")):
        if ours in modes and ref in modes:
            print(f"  {ours} against {ref} (torch.profiler alone, the same settings): "
                  f"wall x{ratio(res, ours, ref):.3f}  cpu x{ratio(cpu, ours, ref):.3f}")


if __name__ == "__main__":
    main()
