"""tests/python/hf_corpus.py - the calibration corpus of issue 31: HF
transformers architectures nobody here wrote, built offline from their
config classes with random weights, and one dumped training run of them.

    import hf_corpus
    hf_corpus.ARCHS        # llama, qwen2, gpt2, bert, mixtral, t5, vit, resnet
    hf_corpus.dump(arch, out, seed=1, prec="fp32"|"bf16"|"fp16", task="tensor",
                   level="mix", weights=None)   # 2 steps dumped, steps 0 and 1

The decoders and BERT come from tests/python/hf_models.py (its configs with
hidden 64); T5 (encoder-decoder), ViTForImageClassification and
ResNetForImageClassification are configured here. Tiny: 2 layers, hidden 64,
sequence 16 (T5: 16 in, 8 out), batch 2, 32x32 images. Each run builds the
model from `seed` (so every precision starts from the same weights; with
`weights`, a state dict, they load it instead), runs 2 optimizer steps and
dumps both: step 1 runs on weights that already differ between precisions.
prec "bf16": forward under CPU bf16 autocast; "fp16": CPU fp16 autocast with
torch.amp.GradScaler("cpu") (its scale is in the dump's loss_scale). The
optimizer (AdamW) runs outside the dumped region (stop() before it).
"""
import json
import os

import torch

import hf_models

ARCHS = ("llama", "qwen2", "gpt2", "bert", "mixtral", "t5", "vit", "resnet")
HIDDEN = 64
SEQ = 16
# GradScaler's initial scale: its default, 65536, overflows float16 in the
# backward of the tiny ViT at step 0 (GradScaler then skips the step, so the
# runs differ by a skipped update from step 1 on: a true difference)
SCALE = 2.0 ** 10


def _overrides(arch):
    if arch in ("llama", "qwen2", "bert"):
        return dict(hidden_size=HIDDEN, intermediate_size=2 * HIDDEN)
    if arch == "mixtral":
        return dict(hidden_size=HIDDEN, intermediate_size=HIDDEN)
    if arch == "gpt2":
        return dict(n_embd=HIDDEN)
    return {}


def build(arch, seed):
    T = hf_models.transformers
    if arch in hf_models.NAMES:
        return hf_models.build(arch, seed=seed, **_overrides(arch))
    if arch == "t5":
        cfg = T.T5Config(vocab_size=hf_models.VOCAB, d_model=HIDDEN, d_kv=16, d_ff=2 * HIDDEN,
                         num_layers=2, num_decoder_layers=2, num_heads=4, dropout_rate=0.0,
                         decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
        cls = T.T5ForConditionalGeneration
    elif arch == "vit":
        cfg = T.ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=HIDDEN,
                          num_hidden_layers=2, num_attention_heads=4, intermediate_size=2 * HIDDEN,
                          hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=10)
        cls = T.ViTForImageClassification
    elif arch == "resnet":
        cfg = T.ResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[16, 32],
                             depths=[1, 1], layer_type="basic", num_labels=10)
        cls = T.ResNetForImageClassification
    else:
        raise ValueError("hf_corpus: unknown architecture %r (one of %s)" % (arch, ", ".join(ARCHS)))
    cfg._attn_implementation = "eager"
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        m = cls(cfg)
    finally:
        torch.random.set_rng_state(state)
    m.train()
    return m


def batch(arch, seed):
    g = torch.Generator().manual_seed(1000 + seed)
    if arch in ("vit", "resnet"):
        return {"pixel_values": torch.randn(2, 3, 32, 32, generator=g),
                "labels": torch.randint(0, 10, (2,), generator=g)}
    if arch == "t5":
        return {"input_ids": torch.randint(2, hf_models.VOCAB, (2, SEQ), generator=g),
                "labels": torch.randint(2, hf_models.VOCAB, (2, SEQ // 2), generator=g)}
    return hf_models.batch(arch, seed=1000 + seed, batch_size=2, seq=SEQ)


def trained_weights(arch, seed, steps=10, lr=1e-3):
    """The weights after `steps` fp32 AdamW steps on another batch (both
    runs of a pair then load the same trained weights)."""
    m = build(arch, seed)
    b = batch(arch, seed + 500)
    opt = torch.optim.AdamW(m.parameters(), lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        m(**b).loss.backward()
        opt.step()
    return {k: v.detach().clone() for k, v in m.state_dict().items()}


def dump(arch, out, seed=1, prec="fp32", task="tensor", level="mix", weights=None, steps=2,
         lr=1e-3):
    """One run dumped by nprobe.torch into `out` (steps 0..steps-1). Returns
    the losses."""
    from nprobe.torch import PrecisionDebugger
    m = build(arch, seed)
    if weights is not None:
        m.load_state_dict(weights)
    b = batch(arch, seed)
    cfg = out.rstrip("/") + ".json"
    with open(cfg, "w") as f:
        json.dump({"task": task, "dump_path": out, "level": level,
                   "step": list(range(steps))}, f)
    dbg = PrecisionDebugger(config_path=cfg)
    opt = torch.optim.AdamW(m.parameters(), lr=lr)
    dt = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[prec]
    scaler = torch.amp.GradScaler("cpu", init_scale=SCALE) if prec == "fp16" else None
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        dbg.start(m)
        with torch.autocast("cpu", dtype=dt or torch.bfloat16, enabled=dt is not None):
            lo = m(**b).loss
        (scaler.scale(lo) if scaler else lo).backward()
        dbg.stop()
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        dbg.step()
        losses.append(float(lo.detach()))
    dbg.close()
    os.remove(cfg)
    return losses
