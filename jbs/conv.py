"""``BlockSparseConv``: 2-D convolution whose kernel is block-sparse in the channel dimensions.

The spatial connectivity is that of an ordinary convolution; each filter tap ``(i, j)`` holds the
same channel-block layout. ``w[i, j, b]`` is the block at ``np.argwhere(layout)[b]`` of tap
``(i, j)``, i.e. ``to_dense(w)[i, j, c*bs:(c+1)*bs, k*bs:(k+1)*bs]`` (an HWIO kernel).

The convolution is a block-sparse matmul of the input's im2col matrix (one row per output
pixel, one column block per (filter tap, channel block)) with the weights of all taps, so the
reduction covers (filter taps x nonzero input channel blocks) and accumulates in float32 across
taps. The CUDA kernels never build the im2col matrix (implicit GEMM): they gather each row's
pixels while loading a tile (jbs/_src/conv_geometry.py defines that gather). Forward, input
gradient and weight gradient are the matmul primitives with a ``conv`` geometry, so grad, jvp,
vmap and higher derivatives work as for the matmul.
"""

from __future__ import annotations

import numpy as np
import jax.numpy as jnp
from jax import lax

from jbs._src import names, sharding, validation
from jbs._src.conv_geometry import ConvGeometry
from jbs._src.primitives import bind, bsmm_fwd_p
from jbs._src.tables import conv_tables_for
from jbs.matmul import BlockSparseMatMul

__all__ = ["BlockSparseConv", "BlockSparseConvTranspose"]


def _pair(name, value, minimum):
    pair = (value, value) if isinstance(value, (int, np.integer)) and not isinstance(value, bool) else value
    try:
        pair = tuple(pair)
    except TypeError:
        raise TypeError(f"{name} must be an int or a pair of ints, got {value!r}") from None
    if len(pair) != 2 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in pair):
        raise TypeError(f"{name} must be an int or a pair of ints, got {value!r}")
    if min(pair) < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return tuple(int(v) for v in pair)


def _padding_forms(names) -> str:
    return ", ".join(map(repr, names)) + ", an int, or per axis an int or a (lo, hi) pair"


def _check_padding(padding, names):
    """One of ``names`` (lax's: "SAME_LOWER" puts the odd pixel before), or explicit padding; as
    in flax, an int p means p on every side, and per axis an int p means p before and after."""
    if isinstance(padding, str):
        if padding.upper() not in names:
            raise ValueError(f"padding must be {_padding_forms(names)}, got {padding!r}")
        return padding.upper()
    is_int = lambda v: isinstance(v, (int, np.integer)) and not isinstance(v, bool)
    if is_int(padding):
        padding = ((padding, padding), (padding, padding))
    try:
        pads = tuple((v, v) if is_int(v) else tuple(v) for v in padding)
        pads = tuple((lo, hi) for lo, hi in pads)
    except (TypeError, ValueError):
        raise ValueError(f"padding must be {_padding_forms(names)}, got {padding!r}") from None
    if len(pads) != 2 or not all(is_int(v) for pair in pads for v in pair):
        raise ValueError(f"explicit padding must be two (lo, hi) pairs of ints, got {padding!r}")
    pads = tuple((int(lo), int(hi)) for lo, hi in pads)
    if min(min(p) for p in pads) < 0:
        raise ValueError(f"explicit padding must be two non-negative (lo, hi) pairs, got {padding!r}")
    return pads


class _ConvBase:
    _padding_names = ("SAME", "SAME_LOWER", "VALID")  # lax's
    # The outputs' name for jax.checkpoint policies (see BlockSparseMatMul.checkpoint_name).
    checkpoint_name = "jbs.conv"

    def __init__(self, layout, block_size, kernel_size, strides=1, padding="SAME", dilation=1, *,
                 precision=None):
        self.kernel_size = _pair("kernel_size", kernel_size, 1)
        self.strides = _pair("strides", strides, 1)
        self.dilation = _pair("dilation", dilation, 1)
        self.padding = _check_padding(padding, self._padding_names)
        self._channels = BlockSparseMatMul(layout, block_size, precision=precision)
        self._tables = conv_tables_for(self._channels.layout, self.kernel_size[0] * self.kernel_size[1],
                                      block_size)
        self._key = (type(self).__name__, self._channels, self.kernel_size, self.strides,
                     self.dilation, self.padding)

    layout = property(lambda self: self._channels.layout)
    block_size = property(lambda self: self._channels.block_size)
    nnz = property(lambda self: self._channels.nnz)
    density = property(lambda self: self._channels.density)

    @property
    def features(self) -> tuple[int, int]:
        """(C, K): input and output channels."""
        return self._channels.shape

    @property
    def w_shape(self):
        return self.kernel_size + self._channels.w_shape

    def __hash__(self):
        return hash(self._key)

    def __eq__(self, other):
        return type(other) is type(self) and self._key == other._key

    def __setstate__(self, state):
        # The tables again from their (read-only, cached) builder: unpickled arrays are writable.
        self.__dict__.update(state)
        self._tables = conv_tables_for(self.layout, self.kernel_size[0] * self.kernel_size[1], self.block_size)

    def to_dense(self, w):
        """Packed (..., kh, kw, nnz, bs, bs) -> HWIO kernel (..., kh, kw, C, K)."""
        w = self._check_w(w, allow_batch=True)
        return self._channels.to_dense(w)

    def from_dense(self, kernel):
        """HWIO kernel (..., kh, kw, C, K) -> packed (..., kh, kw, nnz, bs, bs)."""
        kernel = jnp.asarray(kernel)
        if kernel.shape[-4:] != self.kernel_size + self.features:
            raise ValueError(f"kernel must have shape (..., {', '.join(map(str, self.kernel_size + self.features))})"
                             f"; got {kernel.shape}")
        return self._channels.from_dense(kernel)

    def _check_w(self, w, allow_batch=False):
        w = jnp.asarray(w)
        validation.check_weight_dtype("w", w.dtype)
        ok = w.shape[-5:] == self.w_shape if allow_batch else w.shape == self.w_shape
        if not ok:
            raise ValueError(f"w must have shape w_shape={self.w_shape}; got {w.shape}")
        return w

    def _check_x(self, x):
        x = jnp.asarray(x)
        validation.check_float_dtype("x", x.dtype)
        if x.ndim != 4 or x.shape[-1] != self.features[0]:
            raise ValueError(f"x must be NHWC with {self.features[0]} channels, i.e. shape "
                             f"(N, H, W, {self.features[0]}); got {x.shape}")
        return x

    def _conv(self, x, w, geometry_for, pads, out_hw):
        """Binds the forward primitive on the im2col matrix that ``geometry_for`` describes."""
        n, h, wd, c = x.shape
        if h * wd == 0 or min(out_hw) < 1:
            # No input pixel reaches an output pixel (empty images, or images smaller than the
            # dilated kernel): zeros, with no output rows or columns where lax has none.
            return jnp.zeros((n,) + tuple(max(size, 0) for size in out_hw) + (self.features[1],), x.dtype)
        if self.nnz == 0:  # an all-zero kernel (a layout without blocks): nothing to launch
            return jnp.zeros((n,) + tuple(out_hw) + (self.features[1],), x.dtype)
        geometry = geometry_for(self.kernel_size, (h, wd), out_hw, self.strides, self.dilation,
                                tuple(lo for lo, _ in pads))
        taps_nnz = geometry.num_taps * self.nnz

        def convolve(x, w):
            y = bind(bsmm_fwd_p, x.reshape(1, n * h * wd, c),
                     w.reshape(1, taps_nnz, self.block_size, self.block_size),
                     *self._tables, precision=self._channels._precision, conv=geometry)
            return names.named(y.reshape(n, out_hw[0], out_hw[1], self.features[1]), self.checkpoint_name)

        return sharding.on_auto_axes(convolve, x, w.astype(x.dtype), core_axes=3)

    def _dilated_kernel(self):
        return tuple((k - 1) * d + 1 for k, d in zip(self.kernel_size, self.dilation))


class BlockSparseConv(_ConvBase):
    """NHWC convolution with a channel-block-sparse kernel.

    Args:
      layout: (C // bs, K // bs) channel-block layout, shared by all filter taps.
      block_size: 8, 16, 32 or 64.
      kernel_size, strides, dilation: int or pair.
      padding: "SAME", "SAME_LOWER" (lax's: the odd pixel of padding before), "VALID", explicit
        ((top, bottom), (left, right)), an int (every side), or per axis an int (before and
        after) or a (lo, hi) pair, as flax's convolutions take it. An image smaller than the
        dilated kernel gives an empty output, as in lax.
    """

    def __call__(self, x, w):
        x, w = self._check_x(x), self._check_w(w)
        pads, out_hw = self._pads_and_output(x.shape[1:3])
        return self._conv(x, w, ConvGeometry.convolution, pads, out_hw)

    def _pads_and_output(self, in_hw):
        """Explicit ((top, bottom), (left, right)) padding and the output size of an input image."""
        if isinstance(self.padding, str):
            pads = lax.padtype_to_pads(in_hw, self._dilated_kernel(), self.strides, self.padding)
        else:
            pads = self.padding
        out_hw = tuple((size + lo + hi - k) // s + 1 for size, (lo, hi), k, s
                       in zip(in_hw, pads, self._dilated_kernel(), self.strides))
        return pads, out_hw

    def __repr__(self):
        return (f"BlockSparseConv(C={self.features[0]}, K={self.features[1]}, kernel_size={self.kernel_size}, "
                f"strides={self.strides}, padding={self.padding!r}, dilation={self.dilation}, "
                f"block_size={self.block_size}, nnz={self.nnz})")


def _transpose_padding(kernel: int, stride: int, padding: str) -> tuple[int, int]:
    """Padding of the stride-1 conv over the stride-dilated input (as ``lax.conv_transpose``)."""
    if padding == "SAME":
        total = kernel + stride - 2
        before = kernel - 1 if stride > kernel - 1 else int(np.ceil(total / 2))
    else:  # VALID
        total = kernel + stride - 2 + max(kernel - stride, 0)
        before = kernel - 1
    return before, total - before


class BlockSparseConvTranspose(_ConvBase):
    """Transposed convolution (fractionally strided), as ``lax.conv_transpose`` with an HWIO
    kernel: the input is dilated by ``strides`` and convolved with stride 1. With "SAME" padding
    the output is ``strides`` times the input size (PixelCNN++'s up-sampling)."""

    _padding_names = ("SAME", "VALID")  # lax.conv_transpose's

    def __call__(self, x, w):
        x, w = self._check_x(x), self._check_w(w)
        if isinstance(self.padding, str):
            pads = tuple(_transpose_padding(k, s, self.padding)
                         for k, s in zip(self._dilated_kernel(), self.strides))
        else:
            pads = self.padding
        # The input dilated by the stride, padded, convolved with stride 1 (never materialised).
        out_hw = tuple(max(0, (size - 1) * s + 1) + lo + hi - k + 1 for size, (lo, hi), k, s
                       in zip(x.shape[1:3], pads, self._dilated_kernel(), self.strides))
        return self._conv(x, w, ConvGeometry.transposed_convolution, pads, out_hw)

    def __repr__(self):
        return (f"BlockSparseConvTranspose(C={self.features[0]}, K={self.features[1]}, "
                f"kernel_size={self.kernel_size}, strides={self.strides}, padding={self.padding!r}, "
                f"dilation={self.dilation}, block_size={self.block_size}, nnz={self.nnz})")
