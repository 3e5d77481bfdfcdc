"""tests/python/hf_tp.py - an HF Llama (tests/python/hf_models.py: 2 layers,
hidden 32, 4 heads, 2 KV heads, eager attention, random weights) under
tensor parallel with transformers' own TP plan (the config's
base_model_tp_plan: q/k/v, gate/up "colwise", o/down "rowwise"; torchtitan's
plan for Llama) as torch's ColwiseParallel/RowwiseParallel, and one training
step of it under a PrecisionDebugger. Shared by test_torch_dtensor.py (2
ranks) and test_torch_fsdp_tp.py (FSDP2 x TP on 4).

    m = hf_tp.model()                       # the same weights on every rank
    hf_tp.parallelize(m, mesh["tp"], bug=None | "replicated_row")
    hf_tp.run(m, d, bf16=False)             # one SGD step, dumped -> nprobe warnings

bug "replicated_row": layer 1's MLP left out of the plan (replicated: its
gate/up/down whole on every rank) while its down_proj's output is still
declared a row-parallel one (PrepareModuleOutput: Partial -> Replicate, the
all-reduce a RowwiseParallel makes): every rank adds the same whole output,
which is double-counted on 2 ranks."""
import warnings

import torch

import hf_models

# transformers' plan for Llama where the installed version has none
PLAN = {"layers.*.self_attn.q_proj": "colwise", "layers.*.self_attn.k_proj": "colwise",
        "layers.*.self_attn.v_proj": "colwise", "layers.*.self_attn.o_proj": "rowwise",
        "layers.*.mlp.gate_proj": "colwise", "layers.*.mlp.up_proj": "colwise",
        "layers.*.mlp.down_proj": "rowwise"}


def model():
    return hf_models.build("llama", seed=0)


def batch():
    return hf_models.batch("llama", seed=1)


def plan_of(m):
    """{module path: ColwiseParallel()/RowwiseParallel()} from the model's
    config (transformers' base_model_tp_plan), the layers' wildcard expanded."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    src = getattr(m.config, "base_model_tp_plan", None) or PLAN
    plan = {}
    for pat, style in src.items():
        if style not in styles:
            raise ValueError(f"hf_tp: TP style {style!r} of {pat!r} not handled")
        for i in range(m.config.num_hidden_layers):
            plan["model." + pat.replace("*", str(i))] = styles[style]()
    return plan


def parallelize(m, mesh, bug=None):
    from torch.distributed.tensor import Partial, Replicate
    from torch.distributed.tensor.parallel import PrepareModuleOutput, parallelize_module
    plan = plan_of(m)
    if bug == "replicated_row":
        for k in ("gate_proj", "up_proj", "down_proj"):
            del plan[f"model.layers.1.mlp.{k}"]
        plan["model.layers.1.mlp.down_proj"] = PrepareModuleOutput(
            output_layouts=Partial(), desired_output_layouts=Replicate())
    elif bug is not None:
        raise ValueError(f"hf_tp: unknown bug {bug!r}")
    parallelize_module(m, mesh, plan)
    return m


def run(m, d, bf16=False, b=None):
    """One SGD step of m on the batch under d (start .. step, close), in CPU
    bf16 autocast with bf16; the nprobe warnings."""
    b = b or batch()
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        d.start(m)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = hf_models.loss(m, b)
        loss.backward()
        opt.step()
        opt.zero_grad()
        d.stop()
        d.step()
        d.close()
    return [str(x.message) for x in w if "nprobe" in str(x.message)]
