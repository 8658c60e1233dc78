"""XLA's dense dot in place of the block kernels, where the dense dot is faster.

Small blocks at high density and more than 64 rows are where block sparsity stops paying on
a GPU: an 8 x 8 or 16 x 16 block is too small a tensor-core operand, and there the dense
dot's full rate over all C x K weights beats the block kernels' lower rate over the nonzero
ones. Measured on an H200 (benchmarks/NOTES.md, session 38; C = K = 8192, N 64 to 8192): at
bs 8 the large-N block kernels run ~15 TFLOP/s, 4-20x slower than the dense dot at density
1/2 from 256 rows; at bs 16 they are 1.5-2.9x slower at 1/2. So there the forward and the
input gradient densify the weights (one gather, ``densify``: ~110 us for 8192 x 8192 bf16)
and call the dense dot. The weight gradient always stays on its block kernel: it computes
the nonzero blocks only.

One thing differs from the block kernels: a NaN or Inf in x reaches every output of its row
through the zero blocks, as in any dense matmul (the block kernels never read a zero block).
``JBS_DENSE_FALLBACK=0`` keeps the block kernels everywhere; ``=1`` takes the dense dot
wherever it may (16-bit or default-precision fp32, one device, densified weights under
``MAX_DENSE_BYTES``), whatever the measured rule says. The variable is read when an op is
lowered, i.e. when a jitted function is first traced for its shapes (an eager call is one
too): set it before, since compiled functions keep the path they were lowered with.
"""

from __future__ import annotations

import os

import jax.numpy as jnp

from jbs._src import precision as precision_lib
from jbs._src.tables import Tables

# Where the dense dot wins, per (block size, bytes per element): (least rows, least density)
# pairs, any of which suffices. From the forward on an H200 (session 38, C = K = 8192,
# benchmarks/results/dense_fallback_rule_h200_2026-11-28_session38.md): the densify costs
# ~100-130 us there whatever the rows, so the dense dot needs more density at fewer rows.
# The block kernels keep N <= 64 (their memory-bound small-N path) and every density where
# they were faster or within a few percent. Block sizes 32 and 64 keep their kernels: they
# match or beat the dense dot at every density. 16-bit bs 16 up to 256 rows: since session 39
# the wgmma group kernel takes 65-511 rows at high reuse with its items in slices (107 us at
# 128 rows and density 1/2, 91-95 at 128-256 rows and 1/4, where the fallback measured
# 131-145), so the fallback starts at 257 rows there, where that kernel's second row tile
# (unsliced at 8192 columns) takes ~173-202 us and the fallback ~150-170
# (results/mid_n_bs16_h200_2026-11-28_session39.md against session 38's fallback times).
RULES = {
    (8, 2): ((128, 1 / 8), (256, 1 / 16), (1024, 1 / 32)),   # fallback 1.2-1.25x at each edge
    (8, 4): ((128, 1 / 4), (256, 1 / 8), (512, 1 / 16)),     # 1.1-1.6x
    (16, 2): ((257, 1 / 4), (2048, 1 / 8)),                  # ~1.0-1.3x; 1/8 at 8192 rows 1.15x
    (16, 4): ((128, 1 / 2), (256, 1 / 4), (1024, 1 / 8)),    # 1.13-2.6x
}
# The densified weights live in HBM for the op: never more than this (per call, all groups).
MAX_DENSE_BYTES = 2**30
# A density this far under the threshold still counts as at it (layouts of a rounded count).
_DENSITY_SLACK = 0.02


def takes_dense_dot(*, rows: int, c: int, k: int, nnz: int, block_size: int, itemsize: int,
                    groups: int, precision: int) -> bool:
    """Whether the forward / input gradient of this call runs XLA's dense dot (see above):
    ``groups`` weights densified, each multiplying ``rows`` rows."""
    setting = os.environ.get("JBS_DENSE_FALLBACK", "")
    if setting not in ("", "0", "1"):
        raise ValueError(f"JBS_DENSE_FALLBACK must be unset, '0' (block kernels) or '1' (the dense dot "
                         f"wherever it may run); got {setting!r}")
    if setting == "0" or c == 0 or k == 0:
        return False
    if itemsize == 4 and precision != precision_lib.DEFAULT:
        return False  # exact fp32 (3xTF32 in the kernels) has no fast dense counterpart
    if groups * c * k * itemsize > MAX_DENSE_BYTES:
        return False
    if setting == "1":
        return True
    density = nnz * block_size * block_size / (c * k)
    return any(rows >= min_rows and density >= min_density * (1 - _DENSITY_SLACK)
               for min_rows, min_density in RULES.get((block_size, itemsize), ()))


def block_index(rows, cols, row_blocks: int, col_blocks: int):
    """The index map of ``densify`` from the blocks' coordinates (int32 arrays of nnz), built
    on the device: nnz scattered int32s, where a host-built map would put row_blocks *
    col_blocks of them into the program as a constant."""
    nnz = rows.shape[0]
    return jnp.full((row_blocks * col_blocks,), nnz, jnp.int32).at[rows * col_blocks + cols].set(
        jnp.arange(nnz, dtype=jnp.int32), unique_indices=True)


def densify(w, index, row_blocks: int, col_blocks: int):
    """Packed blocks (..., nnz, bs, bs) -> dense (..., C, K) by one gather: ``index`` holds,
    for each block of the (row_blocks, col_blocks) grid in row-major order, its position in
    w, or any position out of range (e.g. nnz) for a zero block."""
    bs = w.shape[-1]
    lead = w.shape[:-3]
    blocks = jnp.take(w, index, axis=len(lead), mode="fill", fill_value=0)
    grid = blocks.reshape(lead + (row_blocks, col_blocks, bs, bs))
    return jnp.swapaxes(grid, -3, -2).reshape(lead + (row_blocks * bs, col_blocks * bs))


def dense_matmul(a, w, *tables, transpose: bool, precision: int):
    """The forward (``a @ W``) or, with ``transpose``, the input gradient (``a @ W.T``) of
    the primitives, through the dense dot. Operands as the primitives': a (G or 1, N, F),
    w (G or 1, nnz, bs, bs), then every lookup table."""
    t = Tables(*tables)
    row_blocks, col_blocks = t.dx_offsets.shape[0] - 1, t.fwd_offsets.shape[0] - 1
    index = block_index(t.dw_items[:, 0], t.dw_items[:, 1], row_blocks, col_blocks)
    dense = densify(w, index, row_blocks, col_blocks)
    # (cuBLAS accumulates 16-bit products in float32, as the kernels do, and writes a's dtype;
    # matmul broadcasts a group axis of 1 without copying. Precision only matters for fp32:
    # the kernels ignore it at 16 bits, and so does this.)
    level = precision if a.dtype.itemsize == 4 else precision_lib.DEFAULT
    return jnp.matmul(a, jnp.swapaxes(dense, -1, -2) if transpose else dense,
                      precision=precision_lib.to_lax(level))
