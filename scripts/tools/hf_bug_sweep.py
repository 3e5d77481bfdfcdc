#!/usr/bin/env python3
"""scripts/tools/hf_bug_sweep.py - issue 31: porting bugs injected into HF
transformers models (tests/python/hf_models.py, random weights, offline) must
be named by `nprobe compare` in the layer they were put in.

    PYTHONPATH=python NPROBE_LIB=build/release/lib/libnprobe.so \\
      .venv/bin/python scripts/tools/hf_bug_sweep.py build/release/nprobe \\
      [--bugs rms_eps,...] [--archs llama,...] [--dtypes fp32,bf16] \\
      [--modes statistics,tensor] [--seed 0] [--ref fp32|same] [--keep DIR]

For each bug x architecture that has the bug's site x dtype x task: the
clean reference and the bugged run are dumped with nprobe.torch's
PrecisionDebugger (same weights, same batch, 2 AdamW steps, level mix), and
`nprobe compare -b REF -c BUG` must exit 1 with its first culprit inside the
module the bug was put in ("named"), or at least inside the same decoder
layer ("layer"). dtype fp32: both runs fp32; bf16: the bugged run under CPU
bf16 autocast against the clean fp32 reference (the pair nprobe is for:
fp32 reference, bf16 port), or against a clean bf16 run with --ref same.
Each (arch, bf16, task) also has a "clean" row (not with --ref same): the
clean bf16 run against the fp32 reference, which must name nothing.

The bugs, put in as a port would get them wrong (after the model is built,
weights unchanged):
  rms_eps       layer 1's input RMSNorm eps x10 (variance_epsilon: 1e-6 ->
                1e-5); BERT: layer 1's attention-output LayerNorm eps x10
  rope_base     the rotary embedding's base (rope_theta) changed: inv_freq
                recomputed with 500000 for 10000 (or 10000 for any other)
  rope_offset   positions start at 1, not 0 (position_ids passed as arange+1;
                the clean runs pass arange); BERT: the same offset into its
                absolute position embeddings (bert.embeddings)
  attn_scale    layer 1's attention scaled by 1/head_dim, not 1/sqrt(head_dim)
                (BERT: layer 1's attention.self)
  router_dtype  layer 1's MoE router softmax computed in bfloat16 (not fp32)
  drop_bias     layer 1's q projection called without its bias (Llama built
                with attention_bias=True; every bias of every model is drawn
                nonzero, as in a trained checkpoint, in all runs)

Prints one line per pair and a table; exit 1 if a bug is missed or misplaced
or a clean row names a culprit.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import types

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "python"))
import hf_models  # noqa: E402
import transformers  # noqa: E402
from nprobe.torch import PrecisionDebugger  # noqa: E402

LAYER = 1

# bug -> architectures with the bug's site
SITES = {
    "rms_eps": ("llama", "qwen2", "mixtral", "bert"),
    "rope_base": ("llama", "qwen2", "mixtral"),
    "rope_offset": ("llama", "qwen2", "mixtral", "bert"),
    "attn_scale": ("llama", "qwen2", "mixtral", "bert"),
    "router_dtype": ("mixtral", "qwen2_moe"),
    "drop_bias": ("llama", "qwen2", "bert"),
}
BUGS = tuple(SITES)


def variant(arch, bug):
    """Llama with attention biases (for drop_bias) is its own model, with its
    own clean reference."""
    return "_bias" if (arch == "llama" and bug == "drop_bias") else ""


def build(arch, var, seed):
    """The model (train mode, eager attention, dropout 0), every bias drawn
    nonzero from a generator seeded with `seed`."""
    over = {"attention_bias": True} if var == "_bias" else {}
    if arch == "qwen2_moe":
        cfg = transformers.Qwen2MoeConfig(
            vocab_size=hf_models.VOCAB, num_hidden_layers=2, hidden_size=32, intermediate_size=64,
            moe_intermediate_size=32, shared_expert_intermediate_size=48, num_experts=4,
            num_experts_per_tok=2, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=64, tie_word_embeddings=False)
        cfg._attn_implementation = "eager"
        state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        try:
            model = transformers.Qwen2MoeForCausalLM(cfg)
        finally:
            torch.random.set_rng_state(state)
        model.train()
    else:
        model = hf_models.build(arch, seed=seed, **over)
    g = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias") and "norm" not in name.lower():
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)
    return model


def inject(model, arch, bug):
    """Put `bug` into `model`; returns the module path it is in (as
    named_modules spells it)."""
    if arch == "bert":
        layers = model.bert.encoder.layer
        prefix = "bert.encoder.layer"
    else:
        layers = model.model.layers
        prefix = "model.layers"
    if bug == "rms_eps" and arch == "bert":
        norm = layers[LAYER].attention.output.LayerNorm
        norm.eps = norm.eps * 10
        return "%s.%d.attention.output.LayerNorm" % (prefix, LAYER)
    if bug == "rms_eps":
        norm = layers[LAYER].input_layernorm
        norm.variance_epsilon = norm.variance_epsilon * 10
        return "%s.%d.input_layernorm" % (prefix, LAYER)
    if bug == "rope_base":
        rot = model.model.rotary_emb
        theta = model.config.rope_parameters["rope_theta"]
        base = 500000.0 if theta == 10000 else 10000.0
        dim = rot.inv_freq.numel() * 2
        rot.inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        return "model.rotary_emb"
    if bug == "rope_offset":           # the offset goes in through position_ids
        return "bert.embeddings" if arch == "bert" else "model.rotary_emb"
    if bug == "attn_scale" and arch == "bert":
        att = layers[LAYER].attention.self
        att.scaling = 1.0 / att.attention_head_size
        return "%s.%d.attention.self" % (prefix, LAYER)
    if bug == "attn_scale":
        att = layers[LAYER].self_attn
        att.scaling = 1.0 / att.head_dim
        return "%s.%d.self_attn" % (prefix, LAYER)
    if bug == "router_dtype":
        gate = layers[LAYER].mlp.gate
        if arch == "mixtral":
            def fwd(self, hidden_states):
                hidden_states = hidden_states.reshape(-1, self.hidden_dim)
                router_logits = F.linear(hidden_states, self.weight)
                router_probs = F.softmax(router_logits.bfloat16(), dim=-1)   # the bug: not .float()
                top, idx = torch.topk(router_probs, self.top_k, dim=-1)
                top /= top.sum(dim=-1, keepdim=True)
                return router_logits, top, idx
        else:
            def fwd(self, hidden_states):
                hidden_states = hidden_states.reshape(-1, self.hidden_dim)
                router_logits = F.linear(hidden_states, self.weight)
                router_probs = F.softmax(router_logits, dtype=torch.bfloat16, dim=-1)  # the bug
                top, idx = torch.topk(router_probs, self.top_k, dim=-1)
                if self.norm_topk_prob:
                    top /= top.sum(dim=-1, keepdim=True)
                top = top.to(router_logits.dtype)
                return router_logits, top, idx
        gate.forward = types.MethodType(fwd, gate)
        return "%s.%d.mlp.gate" % (prefix, LAYER)
    if bug == "drop_bias":
        if arch == "bert":
            lin = layers[LAYER].attention.self.query
            path = "%s.%d.attention.self.query" % (prefix, LAYER)
        else:
            lin = layers[LAYER].self_attn.q_proj
            path = "%s.%d.self_attn.q_proj" % (prefix, LAYER)
        assert lin.bias is not None

        def fwd(self, x):
            return F.linear(x, self.weight)      # the bug: the bias left out
        lin.forward = types.MethodType(fwd, lin)
        return path
    raise ValueError(bug)


def dump(out, arch, bug, var, bf16, task, seed, steps=2):
    """Clean (bug None) or bugged run of `arch`, dumped to `out`."""
    cfg = out + ".json"
    with open(cfg, "w") as f:
        json.dump({"task": task, "dump_path": out, "level": "mix", "step": list(range(steps))}, f)
    model = build(arch, var, seed)
    site = inject(model, arch, bug) if bug else None
    name = "qwen2" if arch == "qwen2_moe" else arch
    b = hf_models.batch(name, seed=seed + 1)
    # every run passes its positions (arange, or arange+1 for the bug; BERT's
    # into its absolute position embeddings)
    seq = b["input_ids"].shape[1]
    pos = torch.arange(seq).unsqueeze(0).expand(b["input_ids"].shape[0], -1).clone()
    b["position_ids"] = pos + 1 if bug == "rope_offset" else pos
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    dbg = PrecisionDebugger(config_path=cfg)
    for _ in range(steps):
        dbg.start(model)
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(**b).loss
        loss.backward()
        opt.step()
        dbg.stop()
        dbg.step()
    return site


CULPRIT = re.compile(r"^first culprit: (\S+)(?: \(in (\S+)\))?(?: at \S+ \S+)?(?:: (.*))?$")


def compare(nprobe, ref, cmp, rep):
    r = subprocess.run([nprobe, "compare", "-b", ref, "-c", cmp, "-o", rep],
                       capture_output=True, text=True)
    culprit, module, reason = None, None, ""
    for line in r.stdout.splitlines():
        m = CULPRIT.match(line)
        if m:
            if m.group(1) != "none":
                culprit, module, reason = m.group(1), m.group(2), m.group(3) or ""
            break
    head = r.stdout.splitlines()[0] if r.stdout else r.stderr.strip()[:200]
    return r.returncode, culprit, module, reason, head


def module_path(name):
    """Module.model.layers.1.input_layernorm.LlamaRMSNorm.forward.0 ->
    model.layers.1.input_layernorm"""
    if not name or not name.startswith("Module."):
        return None
    parts = name[len("Module."):].split(".")
    # drop CLASS.forward|backward.N
    return ".".join(parts[:-3])


def evidence(reason):
    """What the naming rests on, from the culprit's reason."""
    if "scalar argument differs" in reason:
        return "argument"
    if "on one side only" in reason or "a gap inside" in reason:
        return "call structure"
    if "isolated error" in reason and "accumulated severity" in reason:
        return "isolated error"
    return "values" if reason else "-"


def verdict(site, rc, culprit, module):
    """named / layer / wrong / missed."""
    if rc != 1 or not culprit:
        return "missed"
    paths = [p for p in (module_path(culprit), module_path(module)) if p]
    if any(p == site or p.startswith(site + ".") for p in paths):
        return "named"
    layer = ".".join(site.split(".")[:3]) if ".layers." in site or ".layer." in site else site
    if any(p == layer or p.startswith(layer + ".") for p in paths):
        return "layer"
    return "wrong"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("nprobe")
    ap.add_argument("--bugs", default=",".join(BUGS))
    ap.add_argument("--archs", default="")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--modes", default="statistics,tensor")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ref", choices=("fp32", "same"), default="fp32")
    ap.add_argument("--no-clean", action="store_true", help="skip the clean rows")
    ap.add_argument("--keep", default=None, help="keep the dumps and reports here")
    ap.add_argument("--reuse", action="store_true", help="with --keep: reuse the dumps already there")
    a = ap.parse_args()
    bugs = [x for x in a.bugs.split(",") if x]
    for x in bugs:
        if x not in SITES:
            sys.exit("hf_bug_sweep: unknown bug %r (one of %s)" % (x, ", ".join(BUGS)))
    archs = [x for x in a.archs.split(",") if x]
    work = a.keep or tempfile.mkdtemp(prefix="hf_bug_sweep.")
    os.makedirs(work, exist_ok=True)
    nprobe = os.path.abspath(a.nprobe)
    rows, bad = [], 0
    dumped = {}

    def get(arch, bug, bf16, task, var):
        key = (arch, bug, bf16, task, var)
        if key not in dumped:
            out = os.path.join(work, "%s_%s_%s_%s%s" % (arch, bug or "clean", "bf16" if bf16 else "fp32",
                                                      task, var))
            if a.reuse and os.path.isdir(out):     # a dump of an earlier sweep
                model = build(arch, var, a.seed)
                dumped[key] = (out, inject(model, arch, bug) if bug else None)
            else:
                shutil.rmtree(out, ignore_errors=True)
                dumped[key] = (out, dump(out, arch, bug, var, bf16, task, a.seed))
        return dumped[key]

    for bug in bugs:
        for arch in SITES[bug]:
            if archs and arch not in archs:
                continue
            var = variant(arch, bug)
            for dt in a.dtypes.split(","):
                bf16 = dt == "bf16"
                for task in a.modes.split(","):
                    ref_bf16 = bf16 and a.ref == "same"
                    ref, _ = get(arch, None, ref_bf16, task, var)
                    cmp, site = get(arch, bug, bf16, task, var)
                    rep = cmp + "_rep"
                    shutil.rmtree(rep, ignore_errors=True)
                    rc, culprit, module, reason, head = compare(nprobe, ref, cmp, rep)
                    v = verdict(site, rc, culprit, module)
                    bad += v != "named"
                    rows.append((bug, arch + var, dt, task, v, site, culprit, module, reason, rc))
                    print("%-12s %-11s %-4s %-10s %-6s exit %d  %s (in %s)  [%s]" % (
                        bug, arch + var, dt, task, v, rc, culprit, module, reason[:160]), flush=True)
                    if bf16 and a.ref == "fp32" and not a.no_clean and ("clean", arch + var, dt, task) not in \
                            {(r[0], r[1], r[2], r[3]) for r in rows}:
                        cln, _ = get(arch, None, True, task, var)
                        crc, cc, cm, cr, _ = compare(nprobe, ref, cln, cln + "_rep_clean")
                        cv = "clean" if (crc == 0 and not cc) else "FALSE"
                        bad += cv != "clean"
                        rows.append(("clean", arch + var, dt, task, cv, "-", cc, cm, cr, crc))
                        print("%-12s %-11s %-4s %-10s %-6s exit %d  %s (in %s)  [%s]" % (
                            "clean", arch + var, dt, task, cv, crc, cc, cm, cr[:160]), flush=True)
    print()
    print("| bug | arch | dtype | task | verdict | bug's module | first culprit (module) | rests on |")
    print("|---|---|---|---|---|---|---|---|")
    for bug, arch, dt, task, v, site, culprit, module, reason, rc in rows:
        where = "%s (%s)" % (culprit, module_path(module) or module_path(culprit) or "-") if culprit else "none"
        print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (bug, arch, dt, task, v, site, where,
                                                      evidence(reason) if culprit else "-"))
    n_bug = sum(1 for r in rows if r[0] != "clean")
    n_named = sum(1 for r in rows if r[4] == "named")
    n_clean = sum(1 for r in rows if r[0] == "clean")
    n_cok = sum(1 for r in rows if r[4] == "clean")
    print("\nbugs named in their module: %d of %d; clean pairs without a culprit: %d of %d"
          % (n_named, n_bug, n_cok, n_clean))
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
