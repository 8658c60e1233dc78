"""jbs: block-sparse GPU kernels for JAX."""

from jbs import initializers, layouts
from jbs._src.extension import BackendInfo, backend_info
from jbs.conv import BlockSparseConv, BlockSparseConvTranspose
from jbs.matmul import BlockSparseMatMul

__all__ = ["BlockSparseConv", "BlockSparseConvTranspose", "BlockSparseMatMul", "BackendInfo", "backend_info", "initializers", "layouts"]
__version__ = "0.1.0"
