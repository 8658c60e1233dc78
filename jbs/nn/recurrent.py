"""Sparse wide recurrent cells: the hidden-to-hidden weights are block-sparse over a
(usually small-world) layout of hidden-unit blocks, so the hidden state can be several times
wider than a dense cell's at the same parameter count."""

from __future__ import annotations

import math

import numpy as np
import jax
import jax.numpy as jnp
from flax import nnx

from jbs import initializers
from jbs._src import layer_utils, validation
from jbs.nn.linear import BlockSparseLinear, default_bias_init

__all__ = ["SparseLSTMCell", "SparseMLSTMCell", "gate_layout", "sparse_width_for_params"]


def gate_layout(layout, hidden_blocks: int, gates: int) -> np.ndarray:
    """The (rows, gates*Hb) layout of a fused gate matmul: a (rows, Hb) layout repeated for every
    gate, or a (rows, gates*Hb) layout with one pattern per gate, as given."""
    layout = validation.as_layout(layout)
    hidden_blocks, gates = _check_int("hidden_blocks", hidden_blocks, 1), _check_int("gates", gates, 1)
    if layout.shape[1] == hidden_blocks:
        return np.tile(layout, (1, gates))
    if layout.shape[1] == gates * hidden_blocks:
        return layout
    raise ValueError(f"layout must have {hidden_blocks} block columns (one pattern for every gate) or "
                     f"{gates * hidden_blocks} (one per gate); got shape {layout.shape}")


def recurrent_init(kernel_init, layout, block_size: int, gates: int):
    """The recurrent kernel's initialiser for a fused (rows, gates*Hb) gate ``layout``:
    "identity" gives every gate its own identity (a plain identity would reach the first gate
    only); anything else is the layers' usual choice."""
    if isinstance(kernel_init, str) and kernel_init == "identity":
        return initializers.identity(layout, block_size, gates=gates)
    return kernel_init


def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value!r}")
    return int(value)


def check_hidden_features(hidden_features, block_size, name: str = "hidden_features") -> None:
    """A positive multiple of block_size (checked before the layouts, whose errors would
    otherwise speak of block columns)."""
    _check_int(name, hidden_features, minimum=1)
    if hidden_features % block_size:
        raise ValueError(f"{name}={hidden_features} must be a multiple of block_size={block_size}")


def check_carry(c, h, hidden_features, name: str = "hidden_features") -> None:
    """The carry (c, h): each of hidden_features features, and of one shape (a c of another width
    or batch would otherwise fail inside the gates' arithmetic)."""
    if h.shape[-1:] != (hidden_features,):
        raise ValueError(f"the carry's h must have {name}={hidden_features} features in its last axis; "
                         f"got shape {h.shape}")
    if jnp.shape(c) != h.shape:
        raise ValueError(f"the carry's c and h must have one shape; got c {jnp.shape(c)} and h {h.shape}")


def sparse_width_for_params(dense_width: int, density: float, *, input_features: int = 0,
                            block_size: int = 32) -> int:
    """Hidden width of a sparse cell with about the parameters of a dense cell of ``dense_width``
    (the same kind of cell: their gate counts scale both sides alike).

    Counts the recurrent weights (``H^2`` per gate, times ``density`` when sparse) and, with
    ``input_features``, the dense input projection (``input_features * H`` per gate); biases
    and layer norms (under 1%) are left out. The result is a multiple of block_size. E.g.
    ``sparse_width_for_params(3072, 0.03)`` is about 17.7k (the ~3k dense against ~18k sparse
    units of OpenAI's small-world LSTMs, recurrent weights only); with 256 inputs counted,
    ``input_features=256``, about 14.7k.
    """
    dense_width = _check_int("dense_width", dense_width, minimum=1)
    input_features = _check_int("input_features", input_features, minimum=0)
    block_size = validation.check_block_size(block_size)
    if isinstance(density, bool) or not isinstance(density, (int, float, np.integer, np.floating)):
        raise TypeError(f"density must be a number, got {density!r}")
    if not 0.0 < density <= 1.0:
        raise ValueError(f"density must be in (0, 1], got {density!r}")
    dense_params = dense_width * dense_width + input_features * dense_width
    # density * H^2 + input_features * H - dense_params = 0
    h = (-input_features + math.sqrt(input_features**2 + 4 * density * dense_params)) / (2 * density)
    return max(block_size, int(round(h / block_size)) * block_size)


def lstm_update(c, pre_activations, gate_fn, activation_fn):
    """The LSTM state update from the fused (i, f, g, o) pre-activations: (new_c, new_h)."""
    i, f, g, o = jnp.split(pre_activations, 4, axis=-1)
    new_c = gate_fn(f) * c + gate_fn(i) * activation_fn(g)
    return new_c, gate_fn(o) * activation_fn(new_c)


class _SparseCellBase(nnx.RNNCellBase):
    """Carry handling shared by the sparse cells: (c, h) zeros of width hidden_features."""

    def initialize_carry(self, input_shape, rngs=None, carry_init=None):
        shape = tuple(input_shape[:-1]) + (self.hidden_features,)
        init = carry_init or nnx.initializers.zeros_init()
        key = (rngs.carry() if isinstance(rngs, nnx.Rngs) else rngs() if rngs is not None
               else jax.random.key(0))
        key_c, key_h = jax.random.split(key)
        return init(key_c, shape, self.param_dtype), init(key_h, shape, self.param_dtype)

    @property
    def num_feature_axes(self) -> int:
        return 1


def _input_projection(in_features, out_features, input_layout, block_size, common, kernel_init, rngs):
    """Dense ``nnx.Linear`` by default; block-sparse when ``input_layout`` is given."""
    if input_layout is None:
        init = layer_utils.dense_kernel_init(kernel_init, nnx.initializers.lecun_normal())
        return nnx.Linear(in_features, out_features, use_bias=False, kernel_init=init, rngs=rngs, **common)
    return BlockSparseLinear(in_features, out_features, layout=input_layout, block_size=block_size,
                             use_bias=False, kernel_init=kernel_init, rngs=rngs, **common)


class SparseLSTMCell(_SparseCellBase):
    """An LSTM cell whose recurrent weights are block-sparse; works with ``nnx.RNN``.

    The four gates are computed by one fused block-sparse matmul ``h @ W_h`` (layout repeated for
    every gate) plus the input projection ``x @ W_x`` (dense, or block-sparse with
    ``input_layout``), with one bias. Optional layer norm on both gate pre-activations.

    Args:
      in_features: input width.
      hidden_features: hidden width, a multiple of block_size.
      layout: (H/bs, H/bs) layout over hidden-unit blocks (e.g. ``jbs.layouts.barabasi_albert``),
        applied to every gate, or (H/bs, 4H/bs) with one pattern per gate.
      block_size: 8, 16, 32 or 64.
      input_layout: optional (in/bs, 4H/bs) or (in/bs, H/bs) layout for a block-sparse input
        projection.
      layer_norm: layer-normalise ``x @ W_x`` and ``h @ W_h`` before adding them.
      kernel_init, recurrent_kernel_init: initialisers (default: fan-in-aware; "identity" is
        offered for the recurrent kernel, the seed's advice for deep stacks with layer norm: each
        gate's recurrent weights start as the identity).
    """

    gates = 4

    def __init__(self, in_features: int, hidden_features: int, *, layout, block_size: int,
                 input_layout=None, layer_norm: bool = False, gate_fn=nnx.sigmoid,
                 activation_fn=nnx.tanh, kernel_init=None, recurrent_kernel_init=None,
                 bias_init=default_bias_init, dtype=None, param_dtype=jnp.float32,
                 precision=None, rngs: nnx.Rngs):
        block_size = validation.check_block_size(block_size)
        check_hidden_features(hidden_features, block_size)
        self.in_features = in_features
        self.hidden_features = hidden_features
        self.gate_fn = gate_fn
        self.activation_fn = activation_fn
        self.dtype = dtype
        self.param_dtype = param_dtype
        common = dict(dtype=dtype, param_dtype=param_dtype, precision=precision)
        width = self.gates * hidden_features
        hb = hidden_features // block_size
        if input_layout is not None:
            input_layout = gate_layout(input_layout, hb, self.gates)
        self.dense_i = _input_projection(in_features, width, input_layout, block_size, common,
                                         kernel_init, rngs)
        fused = gate_layout(layout, hb, self.gates)
        self.dense_h = BlockSparseLinear(hidden_features, width, layout=fused, block_size=block_size, use_bias=True,
                                         kernel_init=recurrent_init(recurrent_kernel_init, fused, block_size, self.gates),
                                         bias_init=bias_init,
                                         rngs=rngs, **common)
        if layer_norm:
            self.norm_i = nnx.LayerNorm(width, use_bias=False, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
            self.norm_h = nnx.LayerNorm(width, use_bias=False, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        else:
            self.norm_i = self.norm_h = nnx.data(None)

    def _step(self, c, x_part, h_part):
        if self.norm_i is not None:
            x_part, h_part = self.norm_i(x_part), self.norm_h(h_part)
        new_c, new_h = lstm_update(c, x_part + h_part, self.gate_fn, self.activation_fn)
        return (new_c, new_h), new_h

    def __call__(self, carry, inputs):
        c, h = carry
        check_carry(c, h, self.hidden_features)
        return self._step(c, self.dense_i(inputs), self.dense_h(h))


class SparseMLSTMCell(SparseLSTMCell):
    """Multiplicative LSTM (Krause et al.), the cell behind the seed's sentiment and text results:
    ``m = (x @ W_mx) * (h @ W_mh)``, then the LSTM gates from ``x`` and ``m``. ``W_mh`` and the
    gate weights ``W_m`` are block-sparse over ``layout``."""

    def __init__(self, in_features: int, hidden_features: int, *, layout, block_size: int,
                 input_layout=None, layer_norm: bool = False, kernel_init=None,
                 recurrent_kernel_init=None, dtype=None, param_dtype=jnp.float32, precision=None,
                 rngs: nnx.Rngs, **kwargs):
        super().__init__(in_features, hidden_features, layout=layout, block_size=block_size,
                         input_layout=input_layout, layer_norm=layer_norm, kernel_init=kernel_init,
                         recurrent_kernel_init=recurrent_kernel_init, dtype=dtype,
                         param_dtype=param_dtype, precision=precision, rngs=rngs, **kwargs)
        hb = hidden_features // block_size
        common = dict(dtype=dtype, param_dtype=param_dtype, precision=precision)
        first_gate = lambda lay: None if lay is None else validation.as_layout(lay)[:, :hb]
        self.dense_mx = _input_projection(in_features, hidden_features, first_gate(input_layout),
                                          block_size, common, kernel_init, rngs)
        self.dense_mh = BlockSparseLinear(hidden_features, hidden_features, layout=first_gate(layout),
                                          block_size=block_size, use_bias=False,
                                          kernel_init=recurrent_kernel_init, rngs=rngs, **common)

    def __call__(self, carry, inputs):
        c, h = carry
        check_carry(c, h, self.hidden_features)
        m = self.dense_mx(inputs) * self.dense_mh(h)
        return self._step(c, self.dense_i(inputs), self.dense_h(m))
