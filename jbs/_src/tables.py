"""Lookup tables for a block-sparse layout: the one place they are built.

Blocks are numbered in row-major order of ``np.argwhere(layout)``: block ``i`` sits at
block row ``c`` (input features) and block column ``k`` (output features). Each op walks
the blocks in the order it needs:

* forward ``y = x @ W`` gathers, for every output block column, the blocks in that column;
* input gradient ``dx = dy @ W.T`` gathers, for every input block row, the blocks in that row;
* weight gradient ``dw[i] = x[:, c_i].T @ dy[:, k_i]`` visits every block once.

The tables are host (numpy) data built once per layout and cached. They reach the kernels as
int32 operands, never as compile-time constants, so a kernel serves every layout.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np


class Tables(NamedTuple):
    """Index tables of one layout. All int32."""

    fwd_offsets: np.ndarray  # (Kb + 1,) segment j of fwd_items belongs to output block column o
    fwd_items: np.ndarray    # (nnz, 2) [block index, input block row], grouped by block column
    dx_offsets: np.ndarray   # (Cb + 1,)
    dx_items: np.ndarray     # (nnz, 2) [block index, output block column], grouped by block row
    dw_items: np.ndarray     # (nnz, 2) [input block row, output block column] of block i


def _segments(keys: np.ndarray, num_segments: int) -> tuple[np.ndarray, np.ndarray]:
    """Stable grouping of item indices by key: (offsets, order)."""
    order = np.argsort(keys, kind="stable")
    counts = np.bincount(keys, minlength=num_segments)
    offsets = np.zeros(num_segments + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets, order


def build_tables(layout: np.ndarray) -> Tables:
    """Builds the tables of a validated bool layout of shape (Cb, Kb)."""
    cb, kb = layout.shape
    rows, cols = np.nonzero(layout)  # row-major: the packed weight order
    blocks = np.arange(rows.size)
    if rows.size >= 2**31:
        raise ValueError(f"layout has {rows.size} nonzero blocks; at most 2**31 - 1 are supported")

    fwd_offsets, by_col = _segments(cols, kb)
    dx_offsets, by_row = _segments(rows, cb)
    as_i32 = lambda a: np.ascontiguousarray(a, dtype=np.int32)
    tables = Tables(
        fwd_offsets=as_i32(fwd_offsets),
        fwd_items=as_i32(np.stack([blocks[by_col], rows[by_col]], axis=1)),
        dx_offsets=as_i32(dx_offsets),
        dx_items=as_i32(np.stack([blocks[by_row], cols[by_row]], axis=1)),
        dw_items=as_i32(np.stack([rows, cols], axis=1)),
    )
    for table in tables:
        table.setflags(write=False)
    return tables


@functools.lru_cache(maxsize=256)
def _cached(layout_bytes: bytes, shape: tuple[int, int]) -> Tables:
    return build_tables(np.frombuffer(layout_bytes, dtype=bool).reshape(shape))


def tables_for(layout: np.ndarray) -> Tables:
    """Cached tables of a bool layout: rebuilding an op with the same layout is free."""
    return _cached(np.ascontiguousarray(layout, dtype=bool).tobytes(), layout.shape)
