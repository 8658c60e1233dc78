"""Linen versions of ``jbs.nn.BlockSparseLinear`` and ``jbs.nn.SparseLSTMCell``."""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import flax.linen as nn
from flax.linen.dtypes import promote_dtype

from jbs._src import layer_utils, validation
from jbs._src.validation import FrozenLayout
from jbs.nn.recurrent import check_carry, check_hidden_features, gate_layout, lstm_update, recurrent_init


# What make_op calls the features of a Linen layer, which reads its in_features off its inputs.
LINEN_NAMES = ("the inputs' features", "features")


def _apply(module: nn.Module, matmul, op, inputs, edges=None):
    """Creates the layer's parameters (kernel, scale, bias) in ``module`` and applies ``op``:
    shared by the dense and conv layers, which differ only in the op and the kernel shape."""
    validation.check_floating_dtype("param_dtype", module.param_dtype)
    init = layer_utils.resolve_kernel_init(module.kernel_init, matmul, conv=op, edges=edges)
    kernel = module.param("kernel", init, op.w_shape, module.param_dtype)
    if module.weight_norm:
        scale = module.param("scale", nn.initializers.ones_init(), (module.features,), module.param_dtype)
        kernel = layer_utils.weight_normalize(matmul, kernel, scale)
    bias = (module.param("bias", module.bias_init, (module.features,), module.param_dtype)
            if module.use_bias else None)
    inputs, kernel, bias = promote_dtype(inputs, kernel, bias, dtype=module.dtype)
    layer_utils.check_compute_dtype(inputs, module.param_dtype)
    y = op(inputs, kernel)
    return y if bias is None else y + bias


class _FrozenLayoutMixin:
    def __post_init__(self):
        # A numpy layout would make the module unhashable (jit static args, comparisons).
        object.__setattr__(self, "layout", FrozenLayout(self.layout))
        super().__post_init__()


class BlockSparseDense(_FrozenLayoutMixin, nn.Module):
    """``y = x @ W + b`` with W block-sparse; ``features`` outputs. See ``jbs.nn.BlockSparseLinear``."""

    features: int
    layout: Any
    block_size: int
    use_bias: bool = True
    dtype: Any = None
    param_dtype: Any = jnp.float32
    precision: Any = None
    kernel_init: Any = None
    bias_init: Callable = nn.initializers.zeros_init()
    weight_norm: bool = False

    @nn.compact
    def __call__(self, inputs):
        op = layer_utils.make_op(inputs.shape[-1], self.features, self.layout, self.block_size,
                                 self.precision, names=LINEN_NAMES)
        return _apply(self, op, op, inputs)


class BlockSparseConv(_FrozenLayoutMixin, nn.Module):
    """NHWC convolution with a channel-block-sparse kernel. See ``jbs.nn.BlockSparseConv``."""

    features: int
    kernel_size: Any
    layout: Any
    block_size: int
    strides: Any = 1
    padding: Any = "SAME"
    dilation: Any = 1
    transpose: bool = False
    use_bias: bool = True
    dtype: Any = None
    param_dtype: Any = jnp.float32
    precision: Any = None
    kernel_init: Any = None
    bias_init: Callable = nn.initializers.zeros_init()
    weight_norm: bool = False

    @nn.compact
    def __call__(self, inputs):
        matmul = layer_utils.make_op(inputs.shape[-1], self.features, self.layout, self.block_size,
                                     self.precision, names=LINEN_NAMES)
        op, edges = layer_utils.conv_layer_op(matmul, self.kernel_size, self.strides, self.padding, self.dilation,
                                              self.transpose, self.precision)
        return layer_utils.over_images(
            lambda images: _apply(self, matmul, op, layer_utils.pad_edges(images, edges), edges), inputs)


class SparseLSTMCell(nn.RNNCellBase):
    """LSTM cell with block-sparse recurrent weights. See ``jbs.nn.SparseLSTMCell``."""

    features: int
    layout: Any
    block_size: int
    input_layout: Any = None
    layer_norm: bool = False
    gate_fn: Callable = nn.sigmoid
    activation_fn: Callable = nn.tanh
    kernel_init: Any = None
    recurrent_kernel_init: Any = None
    bias_init: Callable = nn.initializers.zeros_init()
    dtype: Any = None
    param_dtype: Any = jnp.float32
    precision: Any = None
    carry_init: Callable = nn.initializers.zeros_init()

    def __post_init__(self):
        object.__setattr__(self, "layout", FrozenLayout(self.layout))
        if self.input_layout is not None:
            object.__setattr__(self, "input_layout", FrozenLayout(self.input_layout))
        super().__post_init__()

    @nn.compact
    def __call__(self, carry, inputs):
        c, h = carry
        check_hidden_features(self.features, validation.check_block_size(self.block_size), name="features")
        check_carry(c, h, self.features, name="features")
        hb = self.features // self.block_size
        width = 4 * self.features
        common = dict(dtype=self.dtype, param_dtype=self.param_dtype, precision=self.precision)
        if self.input_layout is None:
            init = layer_utils.dense_kernel_init(self.kernel_init, nn.initializers.lecun_normal())
            x_part = nn.Dense(width, use_bias=False, kernel_init=init, name="dense_i", **common)(inputs)
        else:
            x_part = BlockSparseDense(width, layout=gate_layout(self.input_layout, hb, 4),
                                      block_size=self.block_size, use_bias=False,
                                      kernel_init=self.kernel_init, name="dense_i", **common)(inputs)
        fused = gate_layout(self.layout, hb, 4)
        h_part = BlockSparseDense(width, layout=fused, block_size=self.block_size,
                                  kernel_init=recurrent_init(self.recurrent_kernel_init, fused, self.block_size, 4),
                                  bias_init=self.bias_init,
                                  name="dense_h", **common)(h)
        if self.layer_norm:
            x_part = nn.LayerNorm(use_bias=False, dtype=self.dtype, param_dtype=self.param_dtype, name="norm_i")(x_part)
            h_part = nn.LayerNorm(use_bias=False, dtype=self.dtype, param_dtype=self.param_dtype, name="norm_h")(h_part)
        new_c, new_h = lstm_update(c, x_part + h_part, self.gate_fn, self.activation_fn)
        return (new_c, new_h), new_h

    @nn.nowrap
    def initialize_carry(self, rng: jax.Array, input_shape):
        shape = tuple(input_shape[:-1]) + (self.features,)
        key_c, key_h = jax.random.split(rng)
        return self.carry_init(key_c, shape, self.param_dtype), self.carry_init(key_h, shape, self.param_dtype)

    @property
    def num_feature_axes(self) -> int:
        return 1
