"""``jbs.nn.BlockSparseConv``: an NNX layer like ``nnx.Conv`` whose kernel is block-sparse in
the channel dimensions (NHWC)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx
from flax.nnx.nn import dtypes

from jbs._src import layer_utils
from jbs.conv import BlockSparseConv as _ConvOp
from jbs.conv import BlockSparseConvTranspose as _ConvTransposeOp
from jbs.nn.linear import default_bias_init


class BlockSparseConv(nnx.Module):
    """2-D convolution with a channel-block-sparse kernel ``(kh, kw, nnz, bs, bs)`` (``kernel``)
    and ``bias`` ``(out_features,)``. ``transpose=True`` makes it a transposed convolution
    (PixelCNN++'s stride-2 up-sampling). ``weight_norm`` and ``data_dependent_init`` work as in
    ``jbs.nn.BlockSparseLinear``, with the norm over taps and nonzero blocks."""

    def __init__(self, in_features: int, out_features: int, kernel_size, *, layout, block_size: int,
                 strides=1, padding="SAME", dilation=1, transpose: bool = False, use_bias: bool = True,
                 dtype=None, param_dtype=jnp.float32, precision=None, kernel_init=None,
                 bias_init=default_bias_init, weight_norm: bool = False, rngs: nnx.Rngs):
        matmul = layer_utils.make_op(in_features, out_features, layout, block_size, precision)
        op_type = _ConvTransposeOp if transpose else _ConvOp
        self.op = op_type(matmul.layout, block_size, kernel_size, strides, padding, dilation, precision=precision)
        self.in_features, self.out_features = in_features, out_features
        self.dtype, self.param_dtype, self.weight_norm = dtype, param_dtype, weight_norm
        self.use_bias = use_bias
        init = layer_utils.resolve_kernel_init(kernel_init, matmul)
        self.kernel = nnx.Param(init(rngs.params(), self.op.w_shape, param_dtype))
        self.bias = (nnx.Param(bias_init(rngs.params(), (out_features,), param_dtype)) if use_bias
                     else nnx.data(None))
        self.scale = nnx.Param(jnp.ones((out_features,), param_dtype)) if weight_norm else nnx.data(None)
        self._matmul = matmul

    def effective_kernel(self) -> jax.Array:
        kernel = self.kernel[...]
        if self.weight_norm:
            kernel = layer_utils.weight_normalize(self._matmul, kernel, self.scale[...])
        return kernel

    def __call__(self, inputs: jax.Array) -> jax.Array:
        bias = self.bias[...] if self.bias is not None else None
        inputs, kernel, bias = dtypes.promote_dtype((inputs, self.effective_kernel(), bias), dtype=self.dtype)
        y = self.op(inputs, kernel)
        return y if bias is None else y + bias

    def data_dependent_init(self, inputs: jax.Array, init_scale: float = 1.0) -> jax.Array:
        """Sets ``scale`` and ``bias`` so this batch's outputs have zero mean and ``init_scale``
        std per channel (needs ``weight_norm=True`` and ``use_bias=True``)."""
        if not (self.weight_norm and self.use_bias):
            raise ValueError("data_dependent_init needs weight_norm=True and use_bias=True")
        self.scale[...] = jnp.ones_like(self.scale[...])
        self.bias[...] = jnp.zeros_like(self.bias[...])
        scale, bias = layer_utils.data_dependent_scale_and_bias(self(inputs), init_scale)
        self.scale[...] = scale.astype(self.param_dtype)
        self.bias[...] = bias.astype(self.param_dtype)
        return self(inputs)
