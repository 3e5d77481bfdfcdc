"""nprobe.torch.TrainerMon over a long run of a model nobody here wrote
(issue 27's acceptance through the package): transformers' LlamaForCausalLM
(a tiny config, random weights), AdamW, trained 200 steps with the monitor
on every module (targets: none = all; activations, their gradients,
parameter gradients, weights, Adam's m and v).

- the clean run: `nprobe monitor` finds no anomaly in its 200 steps
  (exit 0), under the default rules;
- a spike at a random step between 20 and 199, of one of two kinds drawn at
  random: an outlier batch (the embeddings of that step's batch x 1e3, at
  model.embed_tokens' output) or a scaled layer output (a random block's
  MLP output x 1e3): `nprobe monitor` names that step (+-0) and that module,
  metric activation, as the first anomaly (exit 1).

The injection hook is registered before the monitor's, so the monitor sees
the spiked output, as it would see a real one. The step, kind and module are
drawn from a seed printed on the first line, so a failure reproduces with
NP_SEED=that."""
import json
import os
import random
import subprocess
import sys
import tempfile
import warnings

warnings.simplefilter("ignore")
import torch  # noqa: E402

from nprobe.torch import TrainerMon  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from nptest import ratio_worst, step_ratios  # noqa: E402

try:
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError:
    print("transformers not importable: skipped")
    sys.exit(77)

seed = int(os.environ.get("NP_SEED", random.randrange(1 << 30)))
print(f"seed {seed}")
rng = random.Random(seed)
torch.set_num_threads(1)
nprobe = os.environ["NPROBE_BIN"]
tmp = tempfile.mkdtemp()
fail = []
STEPS = 200
LAYERS = 2


def check(cond, what):
    if not cond:
        fail.append(what)
        print("FAIL", what)


def train(name, spike=None):
    """200 steps; spike = (step, module name) whose output is x 1e3 at step"""
    torch.manual_seed(3)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                      num_hidden_layers=LAYERS, num_attention_heads=2, num_key_value_heads=2,
                      max_position_embeddings=32)
    model = LlamaForCausalLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    state = {"step": 0}
    if spike is not None:
        mod = dict(model.named_modules())[spike[1]]
        mod.register_forward_hook(
            lambda m, a, out: out * 1e3 if state["step"] == spike[0] else None)
    path = os.path.join(tmp, f"{name}.json")
    with open(path, "w") as f:
        json.dump({"task": "monitor", "dump_path": os.path.join(tmp, name),
                   "monitor": {"xy_distribution": True, "wg_distribution": True,
                               "mv_distribution": True, "param_distribution": True}}, f)
    mon = TrainerMon(path)
    mon.set_monitor(model, opt)
    g = torch.Generator().manual_seed(5)
    for s in range(STEPS):
        state["step"] = s
        x = torch.randint(0, cfg.vocab_size, (4, 16), generator=g)
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    mon.stop()
    r = subprocess.run([nprobe, "monitor", os.path.join(tmp, name), "--format", "json"],
                       capture_output=True, text=True)
    try:
        return r.returncode, json.loads(r.stdout), r.stderr
    except json.JSONDecodeError:
        return r.returncode, {}, r.stdout[:400] + r.stderr


def ratios(wd):
    """6 steps of the Llama under AdamW (weight decay wd), the monitor's
    update_ratio records (derived from AdamW's state, no snapshot) against
    torch's ||W_after - W_before|| / ||W_after|| in float64: the largest
    |difference| / 2^-24 (2 + 16 r) (docs/MONITOR.md), the paths taken."""
    torch.manual_seed(4)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                      num_hidden_layers=LAYERS, num_attention_heads=2, num_key_value_heads=2,
                      max_position_embeddings=32)
    model = LlamaForCausalLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=wd)
    name = f"ratio_{wd}"
    path = os.path.join(tmp, f"{name}.json")
    with open(path, "w") as f:
        json.dump({"task": "monitor", "dump_path": os.path.join(tmp, name),
                   "monitor": {"xy_distribution": False, "mv_distribution": True}}, f)
    mon = TrainerMon(path)
    mon.set_monitor(model, opt)
    g = torch.Generator().manual_seed(6)
    want, paths = {}, set()
    for s in range(6):
        x = torch.randint(0, cfg.vocab_size, (4, 16), generator=g)
        model(input_ids=x, labels=x).loss.backward()
        want.update(((s, n), r) for n, r in step_ratios(model, opt.step).items())
        opt.zero_grad()
        paths |= set(mon.update_paths.values())
    mon.stop()
    worst, count = ratio_worst(os.path.join(tmp, name, "monitor_rank0.h5"), want)
    return worst, paths, count, len(want)


for wd in (0.0, 0.1):
    worst, paths, count, n = ratios(wd)
    check(paths == {"derived"} and count == n and worst <= 1.0,
          f"Llama AdamW wd {wd}: paths {paths}, {count} of {n} ratios, largest difference "
          f"{worst:.3g} of the bound")
    print(f"Llama AdamW wd {wd}: {count} update ratios derived, largest |difference| "
          f"{worst:.3g} of 2^-24 (2 + 16 r)")

rc, rep, err = train("clean")
anom = rep.get("anomalies", [])
check(rc == 0 and not anom,
      f"clean 200-step run: exit {rc}, {len(anom)} anomalies, the first {anom[:1]} {err}")

step = rng.randint(20, STEPS - 1)
kind = rng.choice(("outlier batch", "scaled layer output"))
module = ("model.embed_tokens" if kind == "outlier batch"
          else f"model.layers.{rng.randrange(LAYERS)}.mlp")
rc, rep, err = train("spike", (step, module))
first = rep.get("anomalies", [{}])[0] if rep.get("anomalies") else {}
got = (first.get("step"), first.get("name"), first.get("metric"))
check(rc == 1 and got == (step, module, "activation"),
      f"{kind} at step {step} in {module}: exit {rc}, first anomaly {first} {err}")
print(f"{kind} at step {step} in {module}: first anomaly {got}")
print("torch monitor llama:", "FAIL" if fail else "ok")
sys.exit(1 if fail else 0)
