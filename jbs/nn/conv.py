"""``jbs.nn.BlockSparseConv``: an NNX layer like ``nnx.Conv`` whose kernel is block-sparse in
the channel dimensions (NHWC)."""

from __future__ import annotations

from types import MappingProxyType

import jax.numpy as jnp
from flax import nnx

from jbs._src import layer_utils
from jbs.nn.linear import _BlockSparseLayer, default_bias_init


class BlockSparseConv(_BlockSparseLayer):
    """2-D convolution with a channel-block-sparse kernel ``(kh, kw, nnz, bs, bs)`` (``kernel``)
    and ``bias`` ``(out_features,)``. ``transpose=True`` makes it a transposed convolution
    (PixelCNN++'s stride-2 up-sampling). ``kernel_size`` is a pair (an int is a 1-D kernel in
    flax); ``padding`` takes the op's forms and flax's "CIRCULAR" and "REFLECT" (not for a
    transposed convolution). ``weight_norm`` and ``data_dependent_init`` work as in
    ``jbs.nn.BlockSparseLinear``, with the norm over taps and nonzero blocks, and so do
    ``kernel_metadata`` and ``bias_metadata``."""

    def __init__(self, in_features: int, out_features: int, kernel_size, *, layout, block_size: int,
                 strides=1, padding="SAME", dilation=1, transpose: bool = False, use_bias: bool = True,
                 dtype=None, param_dtype=jnp.float32, precision=None, kernel_init=None,
                 bias_init=default_bias_init, weight_norm: bool = False,
                 kernel_metadata=MappingProxyType({}), bias_metadata=MappingProxyType({}), rngs: nnx.Rngs):
        self.in_features = in_features
        self.matmul = layer_utils.make_op(in_features, out_features, layout, block_size, precision)
        self.op, self.edges = layer_utils.conv_layer_op(self.matmul, kernel_size, strides, padding, dilation,
                                                        transpose, precision)
        self._init_params(out_features, use_bias=use_bias, dtype=dtype, param_dtype=param_dtype,
                          kernel_init=kernel_init, bias_init=bias_init, weight_norm=weight_norm, rngs=rngs,
                          kernel_metadata=kernel_metadata, bias_metadata=bias_metadata, edges=self.edges)

    def __call__(self, inputs):
        """inputs: (..., H, W, in_features), any number of leading batch axes, as ``nnx.Conv``."""
        apply = super().__call__
        return layer_utils.over_images(lambda images: apply(layer_utils.pad_edges(images, self.edges)), inputs)
