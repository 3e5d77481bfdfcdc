"""tests/python/hf_models.py - HF transformers models nobody here wrote, built
offline from their config classes with random weights (no hub, no download),
tiny enough for a test: 2 layers, hidden 32-64, vocabulary 100, batch 2,
sequence 8-16. Shared by tests and benchmarks (import it with
tests/python on sys.path).

    import hf_models
    hf_models.NAMES                      # ("llama", "qwen2", "gpt2", "bert", "mixtral")
    model = hf_models.build("llama", seed=0)          # torch.nn.Module, train() mode
    batch = hf_models.batch("llama", seed=1)          # dict of model kwargs (labels included)
    loss = hf_models.loss(model, batch)               # scalar tensor
    hf_models.train(model, batch, steps=2, lr=1e-3,   # AdamW steps; hook(i, phase) around each
                    autocast=None|torch.bfloat16, hook=None) -> [float losses]

build(name, seed, **overrides) gives the same weights for the same seed and
overrides (torch's CPU generator seeded before construction); overrides are
config fields (e.g. num_hidden_layers=4, hidden_size=256 for a benchmark).
batch(name, seed, batch_size=2, seq=None) gives the same token ids for the
same seed (seq defaults to the model's SEQ). Attention runs "eager" (plain
matmul/softmax calls a dumper sees as such, the same on every torch) and
dropout is 0, so two builds with one seed train identically. Requires
transformers >= 4.40 (config classes as used here); import fails clearly
without it.
"""
import torch

try:
    import transformers
except ImportError as e:  # noqa: F841
    raise ImportError("hf_models needs transformers (pip install transformers)") from e

NAMES = ("llama", "qwen2", "gpt2", "bert", "mixtral")
VOCAB = 100
SEQ = {"llama": 16, "qwen2": 12, "gpt2": 16, "bert": 12, "mixtral": 8}


def _config(name, **kw):
    T = transformers
    common = dict(vocab_size=VOCAB, num_hidden_layers=2)
    if name == "llama":
        base = dict(hidden_size=32, intermediate_size=64, num_attention_heads=4,
                    num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False)
        cls = T.LlamaConfig
    elif name == "qwen2":
        base = dict(hidden_size=32, intermediate_size=64, num_attention_heads=4,
                    num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=True)
        cls = T.Qwen2Config
    elif name == "mixtral":
        base = dict(hidden_size=32, intermediate_size=48, num_attention_heads=4,
                    num_key_value_heads=2, max_position_embeddings=64, num_local_experts=4,
                    num_experts_per_tok=2, tie_word_embeddings=False)
        cls = T.MixtralConfig
    elif name == "gpt2":
        common = dict(vocab_size=VOCAB, n_layer=2)
        base = dict(n_embd=32, n_head=4, n_positions=64, bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0,
                    attn_pdrop=0.0)
        cls = T.GPT2Config
    elif name == "bert":
        base = dict(hidden_size=32, intermediate_size=64, num_attention_heads=4,
                    max_position_embeddings=64, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0)
        cls = T.BertConfig
    else:
        raise ValueError("hf_models: unknown model %r (one of %s)" % (name, ", ".join(NAMES)))
    base.update(common)
    base.update(kw)
    cfg = cls(**base)
    cfg._attn_implementation = "eager"
    return cfg


def _model_class(name):
    T = transformers
    return {"llama": T.LlamaForCausalLM, "qwen2": T.Qwen2ForCausalLM, "gpt2": T.GPT2LMHeadModel,
            "bert": T.BertForMaskedLM, "mixtral": T.MixtralForCausalLM}[name]


def build(name, seed=0, **overrides):
    """The model `name` with random weights drawn after torch.manual_seed(seed)."""
    cfg = _config(name, **overrides)
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = _model_class(name)(cfg)
    finally:
        torch.random.set_rng_state(state)
    model.train()
    return model


def batch(name, seed=1, batch_size=2, seq=None):
    """Model kwargs for one training step: input_ids and labels (BERT: a
    masked-LM batch, every 4th position a label, the rest -100)."""
    seq = seq or SEQ[name]
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (batch_size, seq), generator=g)
    if name == "bert":
        labels = torch.full_like(ids, -100)
        labels[:, ::4] = ids[:, ::4]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    return {"input_ids": ids, "labels": ids.clone()}


def loss(model, b):
    return model(**b).loss


def train(model, b, steps=1, lr=1e-3, autocast=None, hook=None):
    """`steps` AdamW steps on the batch b, under CPU autocast to `autocast`
    (a torch dtype) if given; hook(i, "begin"/"end") around each step (a
    dumper's start/stop/step). Returns the losses as floats."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    out = []
    for i in range(steps):
        if hook:
            hook(i, "begin")
        opt.zero_grad()
        if autocast is not None:
            with torch.autocast("cpu", dtype=autocast):
                lo = loss(model, b)
        else:
            lo = loss(model, b)
        lo.backward()
        opt.step()
        if hook:
            hook(i, "end")
        out.append(float(lo.detach()))
    return out
