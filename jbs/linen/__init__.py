"""Thin Flax Linen layers over the same ops as ``jbs.nn`` (same parameter names and math)."""

from jbs.linen.layers import BlockSparseConv, BlockSparseDense, SparseLSTMCell

__all__ = ["BlockSparseConv", "BlockSparseDense", "SparseLSTMCell"]
