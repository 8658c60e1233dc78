"""``jbs.nn.BlockSparseLinear``: an NNX layer like ``nnx.Linear`` whose kernel is block-sparse,
and the base it shares with ``jbs.nn.BlockSparseConv``."""

from __future__ import annotations

from types import MappingProxyType

import jax
import jax.numpy as jnp
from flax import nnx
from flax.nnx.nn import dtypes

from jbs._src import layer_utils, validation

default_bias_init = nnx.initializers.zeros_init()


class _BlockSparseLayer(nnx.Module):
    """Parameters and application shared by the block-sparse layers: ``kernel`` (packed, with a
    conv's leading taps), ``bias`` and, with weight normalisation, ``scale``. Subclasses set
    ``self.op`` (the op applied) and ``self.matmul`` (its channel-block matmul) first."""

    def _init_params(self, out_features, *, use_bias, dtype, param_dtype, kernel_init, bias_init,
                     weight_norm, rngs, kernel_metadata=MappingProxyType({}), bias_metadata=MappingProxyType({}),
                     edges=None):
        self.out_features = out_features
        self.use_bias, self.dtype, self.param_dtype, self.weight_norm = use_bias, dtype, param_dtype, weight_norm
        validation.check_floating_dtype("param_dtype", param_dtype)
        init = layer_utils.resolve_kernel_init(kernel_init, self.matmul, conv=self.op, edges=edges)
        self.kernel = nnx.Param(init(rngs.params(), self.op.w_shape, param_dtype), **kernel_metadata)
        self.bias = (nnx.Param(bias_init(rngs.params(), (out_features,), param_dtype), **bias_metadata) if use_bias
                     else nnx.data(None))
        self.scale = nnx.Param(jnp.ones((out_features,), param_dtype)) if weight_norm else nnx.data(None)

    @property
    def layout(self):
        return self.matmul.layout

    @property
    def block_size(self) -> int:
        return self.matmul.block_size

    def effective_kernel(self) -> jax.Array:
        """The packed kernel the layer applies (weight-normalised if enabled)."""
        kernel = self.kernel[...]
        if self.weight_norm:
            kernel = layer_utils.weight_normalize(self.matmul, kernel, self.scale[...])
        return kernel

    def __call__(self, inputs: jax.Array) -> jax.Array:
        bias = self.bias[...] if self.bias is not None else None
        inputs, kernel, bias = dtypes.promote_dtype((inputs, self.effective_kernel(), bias), dtype=self.dtype)
        layer_utils.check_compute_dtype(inputs, self.param_dtype)
        y = self.op(inputs, kernel)
        return y if bias is None else y + bias

    def data_dependent_init(self, inputs: jax.Array, init_scale: float = 1.0) -> jax.Array:
        """Sets ``scale`` and ``bias`` so that this batch's outputs have zero mean and
        ``init_scale`` std per unit, as PixelCNN++ does (needs ``weight_norm=True`` and
        ``use_bias=True``). Returns the outputs after the update."""
        if not (self.weight_norm and self.use_bias):
            raise ValueError("data_dependent_init needs weight_norm=True and use_bias=True")
        self.scale[...] = jnp.ones_like(self.scale[...])
        self.bias[...] = jnp.zeros_like(self.bias[...])
        scale, bias = layer_utils.data_dependent_scale_and_bias(self(inputs), init_scale)
        self.scale[...] = scale.astype(self.param_dtype)
        self.bias[...] = bias.astype(self.param_dtype)
        return self(inputs)


class BlockSparseLinear(_BlockSparseLayer):
    """``y = x @ W + b`` with W block-sparse.

    Parameters: ``kernel`` (packed, ``(nnz, block_size, block_size)``: block i is the block at
    ``np.argwhere(layout)[i]``) and ``bias`` ``(out_features,)``. With ``weight_norm=True`` the
    kernel is ``scale * kernel / ||kernel||`` per output unit, with a ``scale`` parameter, and
    ``data_dependent_init(x)`` sets scale and bias from a batch as PixelCNN++ does.

    Args:
      in_features, out_features: multiples of ``block_size``.
      layout: bool/0-1 array of shape (in_features // bs, out_features // bs). Static: held by
        the layer's op object (hashable), never traced.
      block_size: 8, 16, 32 or 64.
      kernel_init: "fan_in" (default: variance 1/fan-in of each output unit, fan-in =
        block_size x nonzero blocks of its block column), "identity", or a callable
        ``init(key, shape, dtype)``: a dense initialiser (``nnx.initializers.lecun_normal()``,
        ``orthogonal()``, ...) is drawn per output block column over that column's real inputs
        (``jbs.initializers.per_block_column``), so it sees each unit's true fan-in; one marked
        with ``jbs.initializers.packed`` gets the packed shape ``(nnz, bs, bs)`` itself.
      dtype: computation dtype (default: promote input and parameters, as ``nnx.Linear``).
      param_dtype: parameter dtype.
      precision: float32 matmul accuracy (None, "default", "highest" or a ``lax.Precision``).
      kernel_metadata, bias_metadata: metadata of the ``kernel`` and ``bias`` parameters, as
        ``nnx.Linear``'s (e.g. ``{"sharding": ...}``; the kernel's describes its packed shape).
    """

    def __init__(self, in_features: int, out_features: int, *, layout, block_size: int,
                 use_bias: bool = True, dtype=None, param_dtype=jnp.float32, precision=None,
                 kernel_init=None, bias_init=default_bias_init, weight_norm: bool = False,
                 kernel_metadata=MappingProxyType({}), bias_metadata=MappingProxyType({}),
                 rngs: nnx.Rngs):
        self.in_features = in_features
        self.op = self.matmul = layer_utils.make_op(in_features, out_features, layout, block_size, precision)
        self._init_params(out_features, use_bias=use_bias, dtype=dtype, param_dtype=param_dtype,
                          kernel_init=kernel_init, bias_init=bias_init, weight_norm=weight_norm, rngs=rngs,
                          kernel_metadata=kernel_metadata, bias_metadata=bias_metadata)
