"""jbs: block-sparse GPU kernels for JAX."""

import importlib

from jbs import initializers, layouts
from jbs._src.extension import BackendInfo, backend_info, export_disabled_checks
from jbs.conv import BlockSparseConv, BlockSparseConvTranspose
from jbs.matmul import BlockSparseMatMul

__all__ = ["BlockSparseConv", "BlockSparseConvTranspose", "BlockSparseMatMul", "BackendInfo", "backend_info", "export_disabled_checks", "initializers", "layouts"]
__version__ = "0.1.0"

# The Flax layers need flax (an optional dependency): imported on first use of jbs.nn / jbs.linen.
_FLAX_MODULES = ("nn", "linen")


def __getattr__(name):
    if name in _FLAX_MODULES:
        try:
            return importlib.import_module(f"jbs.{name}")
        except ImportError as error:
            raise ImportError(f"jbs.{name} needs flax: pip install 'flax>=0.12' (or jbs[flax]); {error}") from error
    raise AttributeError(f"module 'jbs' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_FLAX_MODULES))
