"""gpt_reference.py - a PyTorch reference run of nprobe's GPT, dumped through
the nprobe package (python/nprobe), so `nprobe compare` can check the
runtime against PyTorch.

    nprobe train --model gpt --steps 0 --save init.h5                  # initial weights
    nprobe dump -c tensor.json -- nprobe train --model gpt --steps 1   # runtime dump (tensor task)
    python3 samples/torch/gpt_reference.py --ckpt init.h5 \\
        --batch-from dump_rt/step0/rank0/dump.h5 --out dump_torch
    nprobe compare -b dump_torch -c dump_rt -o report

The model is plain torch.nn code (nn.Embedding, nn.LayerNorm, nn.Linear, the
lm head tied to wte, erf gelu, causal attention) with GPT-2's module names,
built from the checkpoint; the package's PrecisionDebugger captures its
calls with no nprobe call inside the model. The batch (token ids and
targets) is read from the runtime's tensor dump:
Functional.embedding.0.forward.input.0 and
Functional.cross_entropy.0.forward.input.1. Needs python3-torch and
python3-h5py (Debian packages) and the package importable (PYTHONPATH=python,
NPROBE_LIB=build/release/lib/libnprobe.so, or `pip install .` at the root).
"""
import argparse
import json
import math
import os
import sys

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def attr(f, k):
    v = f.attrs[k]
    return v.decode() if isinstance(v, bytes) else v


BUG = None   # --bug: a bug injected into this copy of the model (for compare to name)


class LayerNorm(nn.LayerNorm):
    """nn.LayerNorm; with --bug ln_eps the epsilon is passed positionally, wrong."""

    def forward(self, x):
        if BUG == "ln_eps":
            return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, 1e-2)
        return super().forward(x)


class CausalSelfAttention(nn.Module):
    def __init__(self, C, n_head):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)

    def forward(self, x):
        B, T, C = x.shape
        H, D = self.n_head, C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=-1)
        q = q.view(B, T, H, D).transpose(1, 2)
        k = k.view(B, T, H, D).transpose(1, 2)
        v = v.view(B, T, H, D).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0 / math.sqrt(D))
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        h = F.gelu(self.c_fc(x), approximate="tanh") if BUG == "tanh_gelu" else F.gelu(self.c_fc(x))
        if BUG == "no_bias":
            return F.linear(h, self.c_proj.weight)     # the bias dropped (not the module call)
        return self.c_proj(h)


class Block(nn.Module):
    def __init__(self, C, n_head, eps):
        super().__init__()
        self.ln_1 = LayerNorm(C, eps=eps)
        self.attn = CausalSelfAttention(C, n_head)
        self.ln_2 = LayerNorm(C, eps=eps)
        self.mlp = MLP(C)

    def forward(self, x):
        if BUG == "no_residual":  # the attention's residual left out
            x = self.attn(self.ln_1(x))
        else:
            x = x.add(self.attn(self.ln_1(x)))
        return x.add(self.mlp(self.ln_2(x)))


def _cross_entropy_btv(logits, targets, ignore_index=-100):
    """The runtime's loss: cross entropy over (B, T, V) logits and flat
    targets, one API call (torch's wants (N, V))."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets,
                           ignore_index=ignore_index,
                           label_smoothing=0.1 if BUG == "label_smoothing" else 0.0)


cross_entropy_btv = _cross_entropy_btv


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C = cfg["n_embd"]
        self.wte = nn.Embedding(cfg["vocab_size"], C)
        self.wpe = nn.Embedding(cfg["block_size"], C)
        self.h = nn.ModuleList(Block(C, cfg["n_head"], cfg["eps"]) for _ in range(cfg["n_layer"]))
        self.ln_f = LayerNorm(C, eps=cfg["eps"])
        self.lm_head = nn.Linear(C, cfg["vocab_size"], bias=False)
        self.lm_head.weight = self.wte.weight
        self.loss = cross_entropy_btv

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx).add(self.wpe(torch.arange(T)))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return self.loss(logits, targets.view(-1), ignore_index=-100)


def load(ckpt, batch_from):
    with h5py.File(ckpt, "r") as f:
        if attr(f, "format") != "nprobe-checkpoint":
            sys.exit(f"gpt_reference.py: {ckpt}: not an nprobe checkpoint (attribute format)")
        cfg = {k: int(f.attrs[k]) for k in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size")}
        cfg["eps"] = float(attr(f, "ln_eps"))
        P = {k: torch.tensor(np.array(v), dtype=torch.float32) for k, v in f["params"].items()}
    with h5py.File(batch_from, "r") as f:
        try:
            idx = torch.tensor(np.array(f["data/Functional.embedding.0.forward.input.0"]))
            tgt = torch.tensor(np.array(f["data/Functional.cross_entropy.0.forward.input.1"]))
        except KeyError as e:
            sys.exit(f"gpt_reference.py: {batch_from}: needs a tensor dump with the "
                     f"embedding input and the cross_entropy targets ({e})")
    model = GPT(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(P[name])
    return model, idx, tgt


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ckpt", required=True, help="nprobe checkpoint with the weights (nprobe train --save)")
    ap.add_argument("--batch-from", required=True, help="the runtime's tensor dump.h5 of the same step")
    ap.add_argument("--out", required=True, help="dump_path for the PyTorch dump")
    ap.add_argument("--task", default="tensor", choices=["tensor", "statistics", "md5"])
    ap.add_argument("--level", default="mix", choices=["L0", "L1", "mix"])
    ap.add_argument("--step", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--bf16", action="store_true", help="the forward under CPU autocast to bfloat16")
    ap.add_argument("--bug", choices=["ln_eps", "no_bias", "tanh_gelu", "no_residual",
                                      "label_smoothing"],
                    help="inject a bug into the model: a wrong layer-norm epsilon passed "
                         "positionally, the MLP's output bias dropped, tanh GELU, the "
                         "attention's residual left out, label smoothing 0.1 inside the loss")
    a = ap.parse_args()
    global BUG
    BUG = a.bug
    torch.set_num_threads(a.threads)
    try:
        from nprobe.torch import PrecisionDebugger
    except ImportError:  # run from a source tree: the package beside samples/
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
        from nprobe.torch import PrecisionDebugger

    import nprobe.torch
    global cross_entropy_btv
    cross_entropy_btv = nprobe.torch.wrap_api("Functional.cross_entropy", _cross_entropy_btv)
    model, idx, tgt = load(a.ckpt, a.batch_from)
    tgt = tgt.view(idx.shape)
    cfg_path = os.path.join(os.path.dirname(os.path.abspath(a.out)) or ".",
                            f".{os.path.basename(a.out)}.config.json")
    with open(cfg_path, "w") as f:
        json.dump({"task": a.task, "dump_path": a.out, "level": a.level, "step": [a.step]}, f)
    os.environ.pop("NPROBE_DUMP_CONFIG", None)
    debugger = PrecisionDebugger(config_path=cfg_path)
    for _ in range(a.step):
        debugger.step()
    debugger.start(model)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
        loss = model(idx, tgt)
    loss.backward()
    debugger.stop()
    debugger.step()
    debugger.close()
    os.remove(cfg_path)
    print(f"gpt_reference.py: step {a.step} loss {loss.item():.6f}; "
          f"wrote {a.out}/step{a.step}/rank0/dump.h5")


if __name__ == "__main__":
    main()
