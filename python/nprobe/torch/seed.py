"""seed_all: msprobe's helper for reproducible runs, so a script written
for msprobe (`from msprobe.pytorch import PrecisionDebugger, seed_all`)
runs with its import line changed."""
import os
import random

import torch


def seed_all(seed=1234, mode=False, rm_dropout=False, **_ignored):
    """Seed Python's, NumPy's (when installed) and torch's generators;
    mode=True asks torch for deterministic algorithms; rm_dropout=True sets
    the dropout functions' p to 0 from now on."""
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2 ** 32:
        raise ValueError(f"seed_all: seed must be an int in [0, 2**32), got {seed!r}")
    os.environ["PYTHONHASHSEED"] = str(seed)
    random.seed(seed)
    try:
        import numpy
        numpy.random.seed(seed)
    except ImportError:
        pass
    torch.manual_seed(seed)
    if mode:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
    if rm_dropout:
        import torch.nn.functional as F
        for name in ("dropout", "dropout2d", "dropout3d", "alpha_dropout"):
            orig = getattr(F, name)

            def no_dropout(input, p=0.5, training=True, inplace=False, _orig=orig):
                return _orig(input, 0.0, training, inplace)
            setattr(F, name, no_dropout)
