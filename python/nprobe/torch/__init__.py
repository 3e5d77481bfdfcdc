"""nprobe for PyTorch: msprobe's interface over nprobe's C probe.

    from nprobe.torch import PrecisionDebugger
    debugger = PrecisionDebugger(config_path="config.json")
    for batch in loader:
        debugger.start(model)
        loss = model(batch); loss.backward(); optimizer.step()
        debugger.stop()
        debugger.step()

`ConfigChecker(model, output_zip_path="pack.zip")` writes a config_check pack
like `nprobe config_check pack`. docs/TORCH.md describes both.
"""
from .debugger import PrecisionDebugger, wrap_api  # noqa: F401
from .config_checker import ConfigChecker, apply_patches  # noqa: F401
from .seed import seed_all  # noqa: F401
from .monitor import TrainerMon  # noqa: F401


__all__ = ["PrecisionDebugger", "ConfigChecker", "apply_patches", "wrap_api", "seed_all",
           "TrainerMon"]
