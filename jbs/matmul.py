"""``BlockSparseMatMul``: ``y = x @ W`` where W is a grid of bs x bs blocks, most of them zero."""

from __future__ import annotations

import math

import numpy as np
import jax.numpy as jnp

from jbs._src import dense_fallback
from jbs._src import extension
from jbs._src import lowering  # noqa: F401 - registers the primitives' lowerings
from jbs._src import names
from jbs._src import precision as precision_lib
from jbs._src import sharding
from jbs._src import validation
from jbs._src.primitives import bind, bsmm_fwd_p
from jbs._src.tables import Tables, tables_for


class BlockSparseMatMul:
    """Multiplies activations by a block-sparse weight matrix, skipping its zero blocks.

    ``layout[c, k]`` (shape ``(C // bs, K // bs)``) says whether input block ``c`` connects to
    output block ``k``. The weights are packed: ``w[i]`` is the block at
    ``np.argwhere(layout)[i]``, i.e. ``W[c*bs:(c+1)*bs, k*bs:(k+1)*bs]``.

    Example::

        bsmm = jbs.BlockSparseMatMul(layout, block_size=32)
        w = jax.random.normal(key, bsmm.w_shape)
        y = bsmm(x, w)          # x: (..., C) -> y: (..., K)

    Args:
      layout: 2-D bool or 0/1 array (host data, copied).
      block_size: 8, 16, 32 or 64.
      precision: float32 accuracy: None/"default" (TF32 tensor cores on GPU) or "highest".

    The op object is hashable and cheap to rebuild: lookup tables are cached per layout.

    Its output is named ``"jbs.matmul"`` for ``jax.checkpoint`` policies (JAX's dot policies
    such as ``dots_saveable`` know only ``dot_general``): ``policy=
    jax.checkpoint_policies.save_only_these_names("jbs.matmul")`` keeps the products for the
    backward pass instead of recomputing them.
    """

    checkpoint_name = "jbs.matmul"

    def __init__(self, layout, block_size: int = 32, *, precision=None):
        self._layout = validation.as_layout(layout)
        self._block_size = validation.check_block_size(block_size)
        self._precision = precision_lib.normalize(precision)
        self._tables = tables_for(self._layout, self._block_size, packed_ctas=extension.packed_walk_ctas())
        self._rows, self._cols = np.nonzero(self._layout)
        self._key = (self._layout.shape, self._layout.tobytes(), self._block_size, self._precision)

    # --------------------------------------------------------------- properties

    @property
    def layout(self) -> np.ndarray:
        """The (read-only) bool layout, shape (C // bs, K // bs)."""
        return self._layout

    @property
    def block_size(self) -> int:
        return self._block_size

    @property
    def shape(self) -> tuple[int, int]:
        """(C, K): the dense weight matrix's shape."""
        return (self._layout.shape[0] * self._block_size, self._layout.shape[1] * self._block_size)

    @property
    def nnz(self) -> int:
        """Number of nonzero blocks."""
        return int(self._rows.size)

    @property
    def density(self) -> float:
        return self.nnz / self._layout.size

    @property
    def w_shape(self) -> tuple[int, int, int]:
        """Shape of the packed weights: (nnz, bs, bs)."""
        return (self.nnz, self._block_size, self._block_size)

    @property
    def tables(self) -> Tables:
        """The layout's lookup tables (int32 numpy arrays)."""
        return self._tables

    def fan_in(self) -> np.ndarray:
        """Fan-in of each output unit, shape (K,): bs x the nonzero blocks of its block column."""
        per_block_column = self._layout.sum(axis=0) * self._block_size
        return np.repeat(per_block_column, self._block_size)

    def __hash__(self):
        return hash(self._key)

    def __eq__(self, other):
        return isinstance(other, BlockSparseMatMul) and self._key == other._key

    # Pickled as the arguments that build it: unpickling rebuilds the read-only layout and its
    # (cached) tables, which a pickled copy of the arrays would leave writable.
    def __getstate__(self):
        return {"layout": self._layout, "block_size": self._block_size,
                "precision": "highest" if self._precision == precision_lib.HIGHEST else None}

    def __setstate__(self, state):
        self.__init__(state["layout"], state["block_size"], precision=state["precision"])

    def __repr__(self):
        c, k = self.shape
        return (f"BlockSparseMatMul(C={c}, K={k}, block_size={self._block_size}, "
                f"nnz={self.nnz}, density={self.density:.4g})")

    # --------------------------------------------------------------- the op

    def __call__(self, x, w):
        """``y = x @ W`` over the nonzero blocks. x: (..., C) -> y: (..., K), dtype of x."""
        x = jnp.asarray(x)
        w = jnp.asarray(w)
        dtype = validation.check_float_dtype("x", x.dtype)
        validation.check_weight_dtype("w", w.dtype)
        c, k = self.shape
        if x.ndim < 1 or x.shape[-1] != c:
            raise ValueError(f"x must have shape (..., {c}) for a layout of {self._layout.shape} "
                             f"blocks of size {self._block_size}; got {x.shape}")
        if w.shape != self.w_shape:
            raise ValueError(f"w must have shape w_shape={self.w_shape}; got {w.shape}")
        batch_shape = x.shape[:-1]
        if self.nnz == 0:  # W is all zeros (a random 0/1 layout can be): nothing to launch
            return jnp.zeros(batch_shape + (k,), dtype)
        return sharding.on_auto_axes(self._multiply, x, w.astype(dtype), core_axes=1)

    def _multiply(self, x, w):
        rows = math.prod(x.shape[:-1])
        y = bind(bsmm_fwd_p, x.reshape(1, rows, x.shape[-1]), w[None], *self._tables, precision=self._precision)
        return names.named(y.reshape(x.shape[:-1] + (y.shape[-1],)), self.checkpoint_name)

    # --------------------------------------------------------------- packing

    def to_dense(self, w):
        """Packed (..., nnz, bs, bs) -> dense (..., C, K), zeros outside the layout."""
        w = jnp.asarray(w)
        if w.shape[-3:] != self.w_shape:
            raise ValueError(f"w must have shape (..., {', '.join(map(str, self.w_shape))}); got {w.shape}")
        cb, kb = self._layout.shape
        if self.nnz == 0:
            return jnp.zeros(w.shape[:-3] + self.shape, w.dtype)
        # (a gather from the packed blocks: XLA's scatter of them into zeros ran ~10x slower on a GPU)
        index = dense_fallback.block_index(jnp.asarray(self._rows, jnp.int32), jnp.asarray(self._cols, jnp.int32),
                                           cb, kb)
        return dense_fallback.densify(w, index, cb, kb)

    def from_dense(self, dense):
        """Dense (..., C, K) -> packed (..., nnz, bs, bs): keeps only the layout's blocks."""
        dense = jnp.asarray(dense)
        if dense.shape[-2:] != self.shape:
            raise ValueError(f"dense must have shape (..., {self.shape[0]}, {self.shape[1]}); got {dense.shape}")
        lead = dense.shape[:-2]
        cb, kb = self._layout.shape
        bs = self._block_size
        grid = jnp.swapaxes(dense.reshape(lead + (cb, bs, kb, bs)), -3, -2)
        return grid[..., self._rows, self._cols, :, :]
