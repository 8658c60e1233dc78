"""Flax NNX layers over jbs's block-sparse ops."""

from jbs.nn.conv import BlockSparseConv
from jbs.nn.linear import BlockSparseLinear
from jbs.nn.recurrent import SparseLSTMCell, SparseMLSTMCell, gate_layout, sparse_width_for_params

__all__ = ["BlockSparseConv", "BlockSparseLinear", "SparseLSTMCell", "SparseMLSTMCell", "gate_layout",
           "sparse_width_for_params"]
