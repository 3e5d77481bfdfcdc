"""nprobe: numerical precision debugging for neural-network training.

The Python package binds libnprobe, nprobe's C library, with ctypes:
`nprobe.torch.PrecisionDebugger` dumps a PyTorch run in nprobe's HDF5
format, `nprobe.torch.ConfigChecker` writes a config_check pack.
docs/TORCH.md has the whole story.
"""
from ._lib import NprobeError, library_path, version  # noqa: F401

__all__ = ["NprobeError", "library_path", "version"]
