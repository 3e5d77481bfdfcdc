"""module_backward_ref.py RUNTIME_DUMP CKPT - each module call's backward
output in the runtime's own dump (Module.{path}.{Class}.backward.0.output.0,
the gradient at the module's input) against PyTorch's
register_full_backward_hook on the same module (grad_input[0]: the gradient
for the module's own input only), on samples/torch/gpt_reference.py's GPT
built from the same checkpoint and batch. Exit 1 when a module's gradient
departs from PyTorch's (relative L2 error > 1e-4, float32 noise is ~1e-6)
or when a module PyTorch gives a gradient for has none in the dump."""
import os
import sys

import h5py
import numpy as np
import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "samples", "torch"))
import gpt_reference  # noqa: E402  (its model and checkpoint loader, no nprobe call)


def _sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    """softmax(q k^T scale, causal) v for a torch without
    F.scaled_dot_product_attention (Debian 12's 1.13)."""
    T = q.shape[-2]
    s = q.matmul(k.transpose(-2, -1)) * scale
    s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, dim=-1).matmul(v)


if not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
    torch.nn.functional.scaled_dot_product_attention = _sdpa


def main():
    dump_path, ckpt = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    model, idx, tgt = gpt_reference.load(ckpt, dump_path)
    grads = {}

    def hook_for(name, cls):
        def hook(mod, grad_input, grad_output):
            if grad_input and grad_input[0] is not None:
                grads[f"Module.{name}.{cls}.backward.0.output.0"] = grad_input[0].detach().double().numpy()
        return hook

    for name, mod in model.named_modules():
        if name and type(mod).__name__ in ("LayerNorm", "Block", "MLP", "CausalSelfAttention", "Linear"):
            mod.register_full_backward_hook(hook_for(name, type(mod).__name__))
    loss = model(idx, tgt.view(idx.shape))
    loss.backward()
    fails, checked = 0, 0
    with h5py.File(dump_path, "r") as f:
        for key in sorted(grads):
            ref = grads[key]
            if "data/" + key not in f:
                print(f"FAIL: {key}: PyTorch gives a gradient, the runtime's dump has none")
                fails += 1
                continue
            got = np.array(f["data/" + key], dtype=np.float64).reshape(ref.shape)
            rel = np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)
            checked += 1
            ok = rel <= 1e-4
            fails += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {key}: relative error {rel:.3e}")
    if checked < 10 or not any(".ln_1.LayerNorm" in k for k in grads):
        print(f"FAIL: only {checked} module gradients checked")
        fails += 1
    print(f"{checked - fails if fails <= checked else 0} passed, {fails} failed")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
