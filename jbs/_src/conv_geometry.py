"""Where each row of a convolution's implicit im2col matrix reads its pixels.

A block-sparse convolution is a block-sparse matmul whose left operand is the im2col matrix
``A`` of the activation: one row per pixel of the *row space* (the output image for the forward
op), one column block per (filter tap, channel block), taps major. The CUDA kernels never build
``A``: they gather each row from the activation while loading a tile (implicit GEMM). This
module is the one definition of that gather, shared by the kernels (as int32 attributes) and by
the reference lowering (which does build ``A``).

Per spatial dimension, row coordinate ``r`` and tap ``k`` read source pixel ``s`` with

    s * div = r * mul + offset + k * step,   valid iff the division is exact and 0 <= s < size;

invalid rows read zeros (padding). A strided, dilated, padded convolution has ``mul`` = stride,
``offset`` = -padding, ``step`` = dilation, ``div`` = 1. A transposed convolution (the input
dilated by the stride) has ``mul`` = 1 and ``div`` = stride. Solving the same equation for
``r`` gives the map of the input gradient, which gathers the output gradient:
``transposed()`` swaps mul and div and negates offset and step.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import jax.numpy as jnp

Pair = tuple[int, int]


class ConvGeometry(NamedTuple):
    taps: Pair       # (kh, kw) filter taps
    rows_hw: Pair    # image size of the row space
    source_hw: Pair  # image size of the gathered activation
    mul: Pair
    offset: Pair
    step: Pair
    div: Pair

    @classmethod
    def convolution(cls, kernel_size, in_hw, out_hw, strides, dilation, pads_lo):
        return cls(tuple(kernel_size), tuple(out_hw), tuple(in_hw), tuple(strides),
                   tuple(-p for p in pads_lo), tuple(dilation), (1, 1))

    @classmethod
    def transposed_convolution(cls, kernel_size, in_hw, out_hw, strides, dilation, pads_lo):
        """``lax.conv_transpose``: a stride-1 conv over the input dilated by ``strides``."""
        return cls(tuple(kernel_size), tuple(out_hw), tuple(in_hw), (1, 1),
                   tuple(-p for p in pads_lo), tuple(dilation), tuple(strides))

    @property
    def num_taps(self) -> int:
        return self.taps[0] * self.taps[1]

    def transposed(self) -> "ConvGeometry":
        """The map of the input gradient: rows are source pixels, gathering row-space pixels."""
        return ConvGeometry(self.taps, self.source_hw, self.rows_hw, self.div,
                            tuple(-o for o in self.offset), tuple(-s for s in self.step), self.mul)

    def images(self, source_rows: int) -> int:
        """Images in a gathered operand of ``source_rows`` rows (pixels)."""
        pixels = self.source_hw[0] * self.source_hw[1]
        if source_rows % pixels:
            raise ValueError(f"an operand of {source_rows} rows is not a whole number of "
                             f"{self.source_hw[0]}x{self.source_hw[1]} images")
        return source_rows // pixels

    def rows_for(self, source_rows: int) -> int:
        """Rows of the im2col matrix gathered from an operand of ``source_rows`` pixels."""
        return self.images(source_rows) * self.rows_hw[0] * self.rows_hw[1]

    def as_attribute(self) -> np.ndarray:
        """The int32 vector the CUDA handlers decode (cuda/conv/row_gather.cuh, same order)."""
        return np.array([*self.taps, *self.rows_hw, *self.source_hw, *self.mul, *self.offset,
                         *self.step, *self.div], np.int32)

    def _indices(self, axis: int):
        """(rows, taps) source index and validity along one spatial axis."""
        r = np.arange(self.rows_hw[axis])[:, None]
        k = np.arange(self.taps[axis])[None, :]
        num = r * self.mul[axis] + self.offset[axis] + k * self.step[axis]
        div = self.div[axis]
        valid = (num >= 0) & (num % div == 0) & (num // div < self.source_hw[axis])
        return np.where(valid, num // div, 0), valid

    def gather(self, a):
        """The im2col matrix: (G, images * sh * sw, F) -> (G, images * rh * rw, taps * F)."""
        g, n, f = a.shape
        images = self.images(n)
        (sh, sw), (rh, rw), (kh, kw) = self.source_hw, self.rows_hw, self.taps
        idx_h, ok_h = self._indices(0)
        idx_w, ok_w = self._indices(1)
        img = a.reshape(g, images, sh, sw, f)
        cols = img[:, :, idx_h[:, :, None, None], idx_w[None, None, :, :], :]  # (g, b, rh, kh, rw, kw, f)
        valid = (ok_h[:, :, None, None] & ok_w[None, None, :, :])[None, None, ..., None]
        cols = jnp.where(valid, cols, jnp.zeros((), a.dtype))
        cols = jnp.transpose(cols, (0, 1, 2, 4, 3, 5, 6))  # (g, b, rh, rw, kh, kw, f)
        return cols.reshape(g, images * rh * rw, kh * kw * f)
