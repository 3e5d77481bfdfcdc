"""scripts/bench/torch_monitor_cost.py - the package monitor's cost
(nprobe.torch.TrainerMon) beside msprobe's own TrainerMon on the same HF
Llama, in one benchmark run (issue 27; docs/PERFORMANCE.md "Monitor").

transformers' LlamaForCausalLM (LAYERS x WIDTH, random weights), AdamW,
batch 8 x sequence 128 (--seq), one thread. Configurations, each in a process of
its own per round (a monitor's hooks stay on its model), rounds
interleaved:

  plain    no monitor
  np_wg    nprobe, gradients and weights (wg_distribution and
           param_distribution; xy, mv and ur_distribution off: issue 27's
           "gradients and weights every step")
  ms_wg    msprobe, the same switches (its ur_distribution is off by default)
  np_wgu   np_wg and the update ratio (ur_distribution on: the weights'
           snapshot before the step, read again after it)
  np_xy    nprobe, the activations and activation gradients of every
           decoder block (targets model.layers.0 ... model.layers.L-1, the
           blocks themselves; nothing else: issue 27's "activations of every
           block")
  ms_xy    msprobe, the same switches and targets
  np_all   nprobe, everything (every module's activations and their
           gradients, gradients, Adam's m and v, weights)
  ms_all   msprobe, the same switches
  np_ring  np_wg and the ring of calls (anomaly_calls 64, anomaly_calls_after
           64: every API call's tensors copied into the ring, no anomaly
           raised, so nothing written; docs/MONITOR.md)

Each process trains WARM + STEPS steps and reports its median CPU time
(time.process_time) and wall time per step over the last STEPS; the
printed ratio is the median over rounds of each round's ratio to that
round's plain run. Prints a Markdown table.

--alternate: the monitors record every other step (step_interval 2, steps
0, 2, 4, ...) and each monitored process also reports the median CPU time
of its recorded steps over that of its unrecorded ones: a ratio within one
process, free of the +-3 % that separate processes of the same
configuration differ by (each its own allocation pattern); the unrecorded
steps still run the hooks' dispatch (an early return), so this ratio is the
recording's cost, the dispatch's is in the across-process column. The
plain run's even/odd steps give the same ratio with nothing recorded: the
control of its noise.

--hooks: nprobe's monitors also report the median thread CPU time of their
optimizer pre-step and post-step hooks per recorded step (ms; the hook
methods wrapped before set_monitor registers them), as two more columns.

usage: PYTHONPATH=python NPROBE_LIB=build/release/lib/libnprobe.so \\
       python scripts/bench/torch_monitor_cost.py [--rounds 3] [--steps 6] [--layers 4] [--width 256] [--seq 128]
           [--configs np_wg,ms_wg,np_xy,ms_xy,np_all,ms_all,np_ring,np_wgu] (default: all but np_ring and np_wgu)
           [--alternate] [--hooks]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CONFIGS = ("plain", "np_wg", "ms_wg", "np_xy", "ms_xy", "np_all", "ms_all", "np_ring", "np_wgu")


def _timed(fn, into):
    """fn, its thread CPU time per call appended to `into` (seconds)"""
    def wrapped(*args, **kwargs):
        t0 = time.thread_time()
        r = fn(*args, **kwargs)
        into.append(time.thread_time() - t0)
        return r
    return wrapped


def one(cfg, steps, warm, layers, width, out, interval=1, hooks=False, seq=128):
    """train in this process under cfg; print {cpu, wall} medians per step"""
    import warnings
    warnings.simplefilter("ignore")
    import torch
    torch.set_num_threads(1)
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(3)
    mc = LlamaConfig(vocab_size=1000, hidden_size=width, intermediate_size=width * 8 // 3,
                     num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=4,
                     max_position_embeddings=max(128, seq))
    model = LlamaForCausalLM(mc)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    xy = cfg.endswith("_all") or cfg.endswith("_xy")
    only_xy = cfg.endswith("_xy")
    sec = {"targets": {}, "xy_distribution": xy, "wg_distribution": not only_xy,
           "mv_distribution": cfg.endswith("_all"), "param_distribution": not only_xy,
           "step_interval": interval}
    if cfg.startswith("np_"):
        sec["ur_distribution"] = cfg in ("np_all", "np_wgu")
    if only_xy:
        sec["targets"] = {f"model.layers.{i}": {} for i in range(layers)}
        if cfg.startswith("np_"):
            # nprobe's targets are prefixes (a block and everything in it);
            # exactly the block: one name per pattern with no glob character
            # left to widen it, matched whole by fnmatch's [] class
            sec["targets"] = [f"model.layers.[{i}]" for i in range(layers)]
    mon = None
    if cfg.startswith("ms_"):
        os.environ["MONITOR_OUTPUT_DIR"] = os.path.join(out, "ms")
        from msprobe.pytorch import TrainerMon as MsMon
        sec.update({"ops": ["norm", "min", "max", "mean"], "format": "csv"})
        path = os.path.join(out, "ms.json")
        with open(path, "w") as f:
            json.dump(sec, f)
        mon = MsMon(path, params_have_main_grad=False)
    elif cfg.startswith("np_"):
        from nprobe.torch import TrainerMon
        if cfg == "np_ring":
            sec.update({"anomaly_calls": 64, "anomaly_calls_after": 64})
        path = os.path.join(out, "np.json")
        with open(path, "w") as f:
            json.dump({"task": "monitor", "dump_path": os.path.join(out, "np"), "monitor": sec}, f)
        mon = TrainerMon(path)
    pre, post = [], []
    if hooks and cfg.startswith("np_"):
        mon._pre_step = _timed(mon._pre_step, pre)
        mon._post_step = _timed(mon._post_step, post)
    if mon is not None:
        mon.set_monitor(model, opt)
    g = torch.Generator().manual_seed(5)
    cpu, wall = [], []
    for s in range(warm + steps):
        x = torch.randint(0, mc.vocab_size, (8, seq), generator=g)
        c0, w0 = time.process_time(), time.perf_counter()
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        c1, w1 = time.process_time(), time.perf_counter()
        if s >= warm:
            cpu.append(c1 - c0)
            wall.append(w1 - w0)
    if cfg.startswith("np_"):
        mon.stop()
    res = {"cpu": statistics.median(cpu), "wall": statistics.median(wall)}
    if interval == 2:
        # plain: the same even/odd split with nothing recorded, the ratio's control
        on = [c for s, c in enumerate(cpu, warm) if s % 2 == 0]
        off = [c for s, c in enumerate(cpu, warm) if s % 2 == 1]
        res["on_off"] = statistics.median(on) / statistics.median(off)
    if pre:
        # the hooks of the recorded steps after the warm-up (the hooks of an
        # unrecorded step return at once)
        rec = [s for s in range(warm, warm + steps) if s % interval == 0]
        res["pre_ms"] = 1e3 * statistics.median(pre[s] for s in rec)
        res["post_ms"] = 1e3 * statistics.median(post[s] for s in rec)
    print(json.dumps(res))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warm", type=int, default=2)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--seq", type=int, default=128,
                    help="sequence length (batch 8: 8 x SEQ tokens a step; the monitor's cost is per "
                         "parameter, so its share of a step falls as the tokens grow)")
    ap.add_argument("--configs", default=",".join(CONFIGS[:-2]),
                    help="comma-separated subset of " + ",".join(CONFIGS) + " (plain is always run)")
    ap.add_argument("--alternate", action="store_true",
                    help="monitors record every other step; adds the in-process recorded/unrecorded ratio")
    ap.add_argument("--hooks", action="store_true",
                    help="nprobe's monitors: add the optimizer hooks' CPU time per recorded step")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        one(a.one, a.steps, a.warm, a.layers, a.width, a.out, 2 if a.alternate else 1, a.hooks, a.seq)
        return
    env = dict(os.environ, OMP_NUM_THREADS="1")
    want = set(a.configs.split(",")) | {"plain"}
    bad = want - set(CONFIGS)
    if bad:
        sys.exit(f"torch_monitor_cost: unknown config(s) {sorted(bad)}; known: {CONFIGS}")
    configs = tuple(c for c in CONFIGS if c in want)
    res = {c: [] for c in configs}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            order = configs[r % len(configs):] + configs[:r % len(configs)]
            for c in order:
                out = os.path.join(tmp, f"{c}_{r}")
                os.makedirs(out)
                p = subprocess.run([sys.executable, __file__, "--one", c, "--out", out,
                                    "--steps", str(a.steps), "--warm", str(a.warm),
                                    "--layers", str(a.layers), "--width", str(a.width), "--seq", str(a.seq)]
                                   + (["--alternate"] if a.alternate else [])
                                   + (["--hooks"] if a.hooks else []),
                                   env=env, capture_output=True, text=True)
                if p.returncode:
                    sys.exit(f"torch_monitor_cost: {c} failed:\n{p.stderr[-3000:]}")
                res[c].append(json.loads(p.stdout.strip().splitlines()[-1]))
    alt = " recorded/unrecorded step CPU in one process (median of rounds) |" if a.alternate else ""
    if a.hooks:
        alt += " pre-step hook CPU | post-step hook CPU |"
    print(f"| config | CPU per step (median of rounds) | CPU ratio to plain (median of round ratios) "
          f"| wall ratio |{alt}")
    print("|---|---:|---:|---:|" + ("---:|" if a.alternate else "") + ("---:|---:|" if a.hooks else ""))
    for c in configs:
        cr = [x["cpu"] / p["cpu"] for x, p in zip(res[c], res["plain"])]
        wr = [x["wall"] / p["wall"] for x, p in zip(res[c], res["plain"])]
        io = ""
        if a.alternate:
            io = f" x{statistics.median(x['on_off'] for x in res[c]):.3f} |"
        if a.hooks:
            hk = [x for x in res[c] if "pre_ms" in x]
            io += (f" {statistics.median(x['pre_ms'] for x in hk):.2f} ms "
                   f"| {statistics.median(x['post_ms'] for x in hk):.2f} ms |" if hk else " - | - |")
        print(f"| {c} | {1e3 * statistics.median(x['cpu'] for x in res[c]):.1f} ms "
              f"| x{statistics.median(cr):.3f} | x{statistics.median(wr):.3f} |{io}")


if __name__ == "__main__":
    main()
