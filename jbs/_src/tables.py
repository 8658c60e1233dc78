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
import heapq
import os
from typing import NamedTuple

import numpy as np


class Tables(NamedTuple):
    """Index tables of one layout. All int32."""

    fwd_offsets: np.ndarray  # (Kb + 1,) segment j of fwd_items belongs to output block column o
    fwd_items: np.ndarray    # (nnz, 2) [block index, input block row], grouped by block column
    dx_offsets: np.ndarray   # (Cb + 1,)
    dx_items: np.ndarray     # (nnz, 2) [block index, output block column], grouped by block row
    dw_items: np.ndarray     # (nnz, 2) [input block row, output block column] of block i
    # Work chunks of the small-N CUDA kernels (the reference path ignores them), see _chunks:
    fwd_chunks: np.ndarray   # (num_chunks, 4) [output block column, item begin, item end, 0]
    fwd_splits: np.ndarray   # (n_split + 1, 2) [first chunk of the column, chunks in the column]
    dx_chunks: np.ndarray    # (num_chunks, 4) as fwd_chunks over dx_items / input block rows
    dx_splits: np.ndarray    # (n_split + 1, 2)
    # Column groups of the large-N CUDA kernels (the reference path ignores them), see _groups:
    fwd_group_offsets: np.ndarray  # (num_groups + 1,)
    fwd_group_items: np.ndarray    # (union items, 1 + width) [input block, block index per column or -1]
    dx_group_offsets: np.ndarray
    dx_group_items: np.ndarray
    # The same groups, wide_group_width(block_size) columns each (192 columns at bs 32 and 64,
    # for the TMA group kernel); the groups above, as they are, at the other block sizes.
    # Their columns share input blocks (shared_input_order) where they are not the groups
    # above: output block column p of wide group q is columns[q * width + p], -1 = none.
    fwd_wide_offsets: np.ndarray
    fwd_wide_items: np.ndarray
    dx_wide_offsets: np.ndarray
    dx_wide_items: np.ndarray
    fwd_wide_columns: np.ndarray
    dx_wide_columns: np.ndarray
    # Row groups of the conv weight-gradient kernel (the reference path ignores them), see _row_groups:
    dw_row_groups: np.ndarray  # (groups, width / 2) consecutive blocks of one block row, -1 past its end
    # The blocks by panels of output block columns, for the small-N dw panel kernel (the
    # reference path ignores them), see _dw_panels:
    dw_panel_items: np.ndarray    # (nnz, 4) [block index, block row, block column, 0]
    dw_panel_offsets: np.ndarray  # (panels + 1,) panel p's items are [offsets[p], offsets[p + 1])
    # Column groups as above, but of columns chosen to share input blocks, and which output
    # block column each group's column p is: (num_groups * width,), -1 = none. The conv strip
    # kernel reads a conv's (paired_order); the TMA group kernel a matmul's at 16-bit bs 32, the
    # wgmma group kernels a matmul's at any size (shared_input_order at bs 16 and 32; in order
    # where build_tables is not asked for them).
    fwd_paired_offsets: np.ndarray
    fwd_paired_items: np.ndarray
    fwd_paired_columns: np.ndarray
    dx_paired_offsets: np.ndarray
    dx_paired_items: np.ndarray
    dx_paired_columns: np.ndarray
    # Whole segments packed into the CTAs of the packed small-N walk (the reference path ignores
    # them), see _packing: (items + 2 segments + ctas + 2,) with items = 2 nnz rounded up to a
    # multiple of 4, or (1,) where there is no packing.
    fwd_packed: np.ndarray
    dx_packed: np.ndarray


def _segments(keys: np.ndarray, num_segments: int) -> tuple[np.ndarray, np.ndarray]:
    """Stable grouping of item indices by key: (offsets, order)."""
    order = np.argsort(keys, kind="stable")
    counts = np.bincount(keys, minlength=num_segments)
    offsets = np.zeros(num_segments + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets, order


def _chunks(offsets: np.ndarray, limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Work chunks over the segments of an offsets table, balanced by items (= bytes).

    Every segment (output block column) gets one chunk of at most ``limit`` items, except long
    segments, which are cut into P equal chunks; by default limit = max(16, ceil(nnz / 256)), so
    a random layout keeps one chunk per column and a heavy (power-law) column is spread over
    many CTAs.
    Chunks of split segments come first (their index is their scratch slot; the kernel sums
    their partials in chunk order), then the others longest first. Empty segments keep one
    empty chunk: the kernel writes their zeros.
    Returns (chunks (num_chunks, 4) [segment, begin, end, 0], splits (n_split + 1, 2)
    [first chunk of the segment, P] per split chunk, plus one unused row).
    """
    counts = np.diff(offsets)
    nnz = int(offsets[-1])
    if limit is None:
        limit = max(16, -(-nnz // 256))
    parts = np.maximum(1, -(-counts // limit))
    split_segs = np.flatnonzero(parts > 1)
    split_segs = split_segs[np.argsort(-counts[split_segs], kind="stable")]
    whole = np.flatnonzero(parts == 1)
    whole = whole[np.argsort(-counts[whole], kind="stable")]
    chunks, splits = [], []
    for seg in split_segs:
        p, b, n = int(parts[seg]), int(offsets[seg]), int(counts[seg])
        first = len(chunks)
        bounds = b + (np.arange(p + 1) * n) // p
        for q in range(p):
            chunks.append((seg, bounds[q], bounds[q + 1], 0))
            splits.append((first, p))
    splits.append((0, 0))
    table = np.zeros((len(chunks) + whole.size, 4), np.int64)
    if chunks:
        table[:len(chunks)] = np.asarray(chunks, np.int64)
    table[len(chunks):, 0] = whole
    table[len(chunks):, 1] = offsets[whole]
    table[len(chunks):, 2] = offsets[whole + 1]
    return table, np.asarray(splits, np.int64)


# The packed small-N walk (cuda/matmul/bsmm_stream_even_kernel.cuh: PACKED; taken with
# JBS_STREAM_EVEN_PACKED=1 until measured) gives each CTA whole output columns, so that no column
# is summed across CTAs and no sum kernel follows the walk (~4.5-5 us at the seed shape,
# benchmarks/NOTES.md, sessions 67-68). It pays only while its CTAs stay nearly equal: a packing
# whose largest CTA holds more weight bytes above the mean than one SM streams in
# _PACKED_MAX_EXCESS_US (a power-law hub, or too few columns per CTA) is not built, and the walk
# cuts evenly instead. An SM's share of HBM: ~30 KB / us (H100 3.35, H200 4.8 TB/s over 132
# SMs); the weights counted as 16-bit (fp32's excess costs twice that).
_PACKED_MAX_EXCESS_US = 1.5
_PACKED_SM_BYTES_PER_US = 30e3
_PACKED_MAX_SEGMENTS = 4096  # the walk's kStreamEvenMaxCols
# No packing: one element, not none (XLA's CPU compiler crashed on an empty table inside
# shard_map, jax 0.11.2).
_NO_PACKING = np.zeros(1, np.int32)


def _packing(offsets: np.ndarray, items: np.ndarray, ctas: int | None, block_size: int) -> np.ndarray:
    """The segments of an op's table (blocks of ``block_size``) packed into ``ctas`` CTAs:
    longest first (stable), each onto the CTA with the fewest items so far (the lowest index on
    ties), then the table reordered CTA by CTA, segments without items last (in no CTA).

    One int32 array: the reordered items (2 nnz, zero-padded to a multiple of 4 so that what
    follows starts on 16 bytes), their offsets (segments + 1), each reordered segment's own index
    (segments), and the CTAs' first items (ctas + 1), so that its length gives ``ctas``
    (packing_ctas). _NO_PACKING where there is none: no CTA count (no GPU), no items, too many
    segments, or unequal CTAs."""
    counts = np.diff(offsets).astype(np.int64)
    nnz = int(offsets[-1])
    if not ctas or nnz == 0 or counts.size > _PACKED_MAX_SEGMENTS:
        return _NO_PACKING.copy()
    least = [(0, cta) for cta in range(ctas)]
    members = [[] for _ in range(ctas)]
    for seg in np.argsort(-counts, kind="stable"):
        if counts[seg] == 0:
            break
        load, cta = heapq.heappop(least)
        members[cta].append(int(seg))
        heapq.heappush(least, (load + int(counts[seg]), cta))
    excess_bytes = (max(load for load, _ in least) - nnz / ctas) * 2 * block_size**2
    if excess_bytes > _PACKED_MAX_EXCESS_US * _PACKED_SM_BYTES_PER_US:
        return _NO_PACKING.copy()
    order = np.asarray([seg for cta in members for seg in cta] + np.flatnonzero(counts == 0).tolist(), np.int64)
    new_offsets = np.zeros(counts.size + 1, np.int64)
    np.cumsum(counts[order], out=new_offsets[1:])
    new_items = np.concatenate([items[offsets[seg]:offsets[seg + 1]] for seg in order]).reshape(-1, 2)
    cta_items = np.cumsum([0] + [int(counts[cta].sum()) for cta in members])
    padding = np.zeros(-2 * nnz % 4, np.int64)
    return np.concatenate([new_items.ravel(), padding, new_offsets, order, cta_items]).astype(np.int32)


def packing_ctas(size: int, nnz: int, segments: int) -> int:
    """The CTAs of a _packing table of ``size`` ints over ``nnz`` items in ``segments`` segments
    (cuda/ffi/bsmm.cu reads it the same way), or 0 for _NO_PACKING."""
    return 0 if size <= 1 else size - -(-2 * nnz // 4) * 4 - 2 * segments - 2


def group_width(block_size: int) -> int:
    """Output block columns per CTA of the large-N kernels: a 128-wide output tile."""
    return max(1, 128 // block_size)


def wide_group_width(block_size: int) -> int:
    """Output block columns per CTA of the TMA-fed large-N kernel's wide groups (cuda/matmul/
    bsmm_group_tma_kernel.cuh): 192 columns (48 K fp32 accumulators, where 128 columns hold
    32 K) at bs 64 and 32, group_width elsewhere. The wider group reuses each activation tile
    for more blocks (bs 64 at density 1/2: 1.73 blocks per item against 1.34), which ran bs 64
    at 1/2 1.17x faster in its replica (benchmarks/NOTES.md, session 31). At bs 32 only fp32
    reads them (128-byte tile rows, as bf16 at bs 64); 16-bit types keep the ordinary groups
    there (six columns were slower in the replica: their 64-byte rows). fp32 at bs 64 walks
    the bs 64 ones as six columns of the blocks' 32 x 32 quarters (session 34)."""
    return 192 // block_size if block_size in (32, 64) else group_width(block_size)


def _groups(offsets: np.ndarray, items: np.ndarray, width: int,
            order: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Column groups: segments (output block columns) ``width`` at a time. A large-N CTA owns
    one group and walks the union of its columns' input blocks, so each activation tile it
    loads feeds every column holding a block for it (the reuse a single column cannot give).
    ``order`` (see paired_order) lists the segments group by group, -1 for an empty column;
    by default they go in order. Returns offsets (num_groups + 1,) and items (union items,
    1 + width): [input block, block index of column p of the group or -1], grouped by group
    and sorted by input block."""
    num_segments = offsets.shape[0] - 1
    order = _in_order(num_segments, width) if order is None else order
    num_groups = order.shape[0] // width
    position = np.empty(num_segments, np.int64)
    position[order[order >= 0]] = np.flatnonzero(order >= 0)
    segment = np.repeat(np.arange(num_segments), np.diff(offsets))
    group, column = position[segment] // width, position[segment] % width
    inputs = items[:, 1].astype(np.int64)
    stride = int(inputs.max(initial=0)) + 1
    unique, slot = np.unique(group * stride + inputs, return_inverse=True)  # sorted: group, input
    table = np.full((unique.size, 1 + width), -1, np.int64)
    table[slot, 0] = inputs
    table[slot, 1 + column] = items[:, 0]
    group_offsets = np.zeros(num_groups + 1, np.int64)
    np.cumsum(np.bincount(unique // stride, minlength=num_groups), out=group_offsets[1:])
    return group_offsets, table


def _in_order(num_segments: int, width: int) -> np.ndarray:
    """The segments in order, in groups of ``width``, the last one padded with -1."""
    order = np.full(-(-num_segments // width) * width, -1, np.int64)
    order[:num_segments] = np.arange(num_segments)
    return order


# Pairing compares every two sets of a level: beyond this many segments the tables keep them
# in order (a quadratic host cost for layouts wider than any conv's channels).
_MAX_PAIRED_SEGMENTS = 512


def paired_order(inputs: np.ndarray, width: int) -> np.ndarray:
    """Segments in groups of ``width`` (a power of two) that share input blocks: the order for
    _groups, (num_groups * width,), -1 for an empty column; num_groups = ceil(segments /
    width), as in order. ``inputs`` (input blocks, segments) says which inputs each segment has.

    Why: the conv strip kernel (cuda/conv/bsconv_strip_kernel.cuh) multiplies a group's columns
    two at a time (one MMA's 64 rows) for every input either one has, and loads an item for
    every input any column of the group has. Columns paired in order share few inputs (at
    density 1/4 a random pair shares 1/4 of them), so a quarter to a half of those MMAs
    multiply a zero block. Greedy matching, level by level (columns into pairs, pairs into
    pairs of pairs, ...), most shared inputs first, then swaps while they help
    (_improve_by_swaps): on the conv benchmark's 10 x 10 random layouts and their transposes
    (the input gradient's) it finds the best grouping of all (checked against every one), at
    density 1/4 with 18-23% fewer MMA chains and 22-28% fewer items than the order
    (benchmarks/NOTES.md, session 25). Deterministic: ties go to the lower segment numbers."""
    num_segments = inputs.shape[1]
    if width == 1 or num_segments > _MAX_PAIRED_SEGMENTS:
        return _in_order(num_segments, width)
    members = [np.array([c], np.int64) for c in range(num_segments)]
    held = [inputs[:, c].astype(bool) for c in range(num_segments)]
    size = 1
    while size < width:
        sets = np.stack(held, axis=1).astype(np.int64)
        shared = sets.T @ sets
        first, second = np.triu_indices(len(held), k=1)
        ranked = np.lexsort((second, first, -shared[first, second]))
        taken = np.zeros(len(held), bool)
        merged_members, merged_held = [], []
        for i, j in zip(first[ranked], second[ranked]):
            if not taken[i] and not taken[j]:
                taken[i] = taken[j] = True
                merged_members.append(np.concatenate([members[i], members[j]]))
                merged_held.append(held[i] | held[j])
        for i in np.flatnonzero(~taken):  # an odd one out: padded with empty columns
            merged_members.append(np.concatenate([members[i], np.full(size, -1, np.int64)]))
            merged_held.append(held[i])
        members, held = merged_members, merged_held
        size *= 2
    order = np.concatenate(members)
    return _improve_by_swaps(order, inputs, width) if num_segments <= _MAX_SWAP_SEGMENTS else order


# Growing groups by shared inputs costs segments x (inputs x segments): beyond this many
# segments, or inputs x segments, the groups keep the segments in order (~1 s at the limits).
_MAX_SHARED_INPUT_SEGMENTS = 1024
_MAX_SHARED_INPUT_CELLS = 1 << 22


def shared_input_order(inputs: np.ndarray, width: int) -> np.ndarray:
    """Segments in groups of ``width`` (any width) that share input blocks: the order for
    _groups, (num_groups * width,), -1 padding the last group; num_groups = ceil(segments /
    width), as in order. ``inputs`` (input blocks, segments) says which inputs each segment has.

    Why: the TMA group kernel (cuda/matmul/bsmm_group_tma_kernel.cuh) loads one activation tile
    per union item of its group, and at densities 1/2 to 1/8 its feed from L2 bounds it. Columns
    in order share inputs only by chance, so their groups have the most union items. Greedy:
    each group starts from the free segment with the most inputs and takes, one at a time, the
    free segment sharing the most inputs with the group so far (ties: fewer new inputs, then the
    lower segment number). On random 128 x 128 layouts in groups of 3 (bs 64 at 8192 channels)
    it leaves 1.06 / 1.12 / 1.15x fewer union items than the order at density 1/2 / 1/4 / 1/8,
    and in groups of 4 about what paired_order's matching finds (benchmarks/NOTES.md, session
    36). Deterministic; in order past its size limits."""
    num_segments = inputs.shape[1]
    if width == 1 or num_segments > _MAX_SHARED_INPUT_SEGMENTS or inputs.size > _MAX_SHARED_INPUT_CELLS:
        return _in_order(num_segments, width)
    held_by = inputs.astype(bool)
    as_float = held_by.astype(np.float32)  # counts stay exact: < 2**24 inputs
    counts = held_by.sum(axis=0)
    free = np.ones(num_segments, bool)
    order = np.full(-(-num_segments // width) * width, -1, np.int64)
    position = 0
    while free.any():
        candidates = np.flatnonzero(free)
        seed = int(candidates[np.argmax(counts[candidates])])
        free[seed] = False
        order[position] = seed
        held = held_by[:, seed].copy()
        shared = as_float[held].sum(axis=0)  # inputs each segment shares with the group
        for p in range(1, width):
            candidates = np.flatnonzero(free)
            if candidates.size == 0:
                break
            gain = shared[candidates]
            best = np.lexsort((candidates, counts[candidates] - gain, -gain))[0]
            pick = int(candidates[best])
            free[pick] = False
            order[position + p] = pick
            new_inputs = held_by[:, pick] & ~held
            held |= new_inputs
            shared += as_float[new_inputs].sum(axis=0)
        position += width
    return order


# The swap search after the matching tries every two positions per pass: up to this many segments.
_MAX_SWAP_SEGMENTS = 64


def _improve_by_swaps(order: np.ndarray, inputs: np.ndarray, width: int) -> np.ndarray:
    """Greedy matching can miss the best grouping (the conv benchmark's transposed 10 x 10
    layout at density 1/4: 19 MMA chains against 18 for the best). So: swap two positions
    (columns, or a column and an empty one) wherever that lowers the group's cost, until no
    swap does. A group's cost is its items (inputs any of its columns has) plus, per half,
    the inputs either half's columns have (one m64 MMA chain each). Deterministic."""
    order = order.copy()
    masks = [sum(1 << int(r) for r in np.flatnonzero(inputs[:, c])) for c in range(inputs.shape[1])]
    mask = lambda position: masks[order[position]] if order[position] >= 0 else 0
    half = width // 2

    def group_cost(q):
        halves = [0, 0]
        for p in range(width):
            halves[p // half] |= mask(q * width + p)
        return (halves[0] | halves[1]).bit_count() + halves[0].bit_count() + halves[1].bit_count()

    improved = True
    while improved:
        improved = False
        for a in range(order.size):
            for b in range(a + 1, order.size):
                qa, qb = a // width, b // width
                if (a // half == b // half) or (order[a] < 0 and order[b] < 0):
                    continue  # same half: the same cost
                before = group_cost(qa) + (group_cost(qb) if qb != qa else 0)
                order[a], order[b] = order[b], order[a]
                after = group_cost(qa) + (group_cost(qb) if qb != qa else 0)
                if after < before:
                    improved = True
                else:
                    order[a], order[b] = order[b], order[a]
    return order


def build_tables(layout: np.ndarray, width: int = 4, wide_width: int | None = None,
                 shared_wide: bool = False, shared_paired: bool = False, packed_ctas: int | None = None,
                 block_size: int = 32) -> Tables:
    """Builds the tables of a validated bool layout of shape (Cb, Kb); ``width`` is the column
    group width of the large-N kernels (group_width(block_size)), ``wide_width`` the TMA
    kernel's (wide_group_width(block_size); None: the same groups). With ``shared_wide`` the
    wide groups (where they are not the ordinary ones), with ``shared_paired`` the paired
    groups take columns that share inputs (shared_input_order); otherwise theirs are in order.
    ``packed_ctas``: the CTAs (the GPU's SMs) of the packed small-N walk over blocks of
    ``block_size`` (_packing; None: none)."""
    cb, kb = layout.shape
    rows, cols = np.nonzero(layout)  # row-major: the packed weight order
    blocks = np.arange(rows.size)
    if rows.size >= 2**31:
        raise ValueError(f"layout has {rows.size} nonzero blocks; at most 2**31 - 1 are supported")

    fwd_offsets, by_col = _segments(cols, kb)
    dx_offsets, by_row = _segments(rows, cb)
    fwd_items = np.stack([blocks[by_col], rows[by_col]], axis=1)
    dx_items = np.stack([blocks[by_row], cols[by_row]], axis=1)
    as_i32 = lambda a: np.ascontiguousarray(a, dtype=np.int32)
    fwd_inputs, dx_inputs = layout, layout.T  # (inputs, segments) of each op
    shared = lambda wanted, inputs, w: shared_input_order(inputs, w) if wanted else None
    groups = _group_fields(fwd_offsets, fwd_items, dx_offsets, dx_items, width,
                           fwd_order=shared(shared_paired, fwd_inputs, width),
                           dx_order=shared(shared_paired, dx_inputs, width))
    wide_width = width if wide_width is None else wide_width
    tables = Tables(
        fwd_offsets=as_i32(fwd_offsets),
        fwd_items=as_i32(fwd_items),
        dx_offsets=as_i32(dx_offsets),
        dx_items=as_i32(dx_items),
        dw_items=as_i32(np.stack([rows, cols], axis=1)),
        **{f"{op}_{name}": as_i32(table)
           for op, offsets in (("fwd", fwd_offsets), ("dx", dx_offsets))
           for name, table in zip(("chunks", "splits"), _chunks(offsets))},
        **groups,
        **(_wide_fields(fwd_offsets, fwd_items, dx_offsets, dx_items, wide_width,
                        shared(shared_wide, fwd_inputs, wide_width), shared(shared_wide, dx_inputs, wide_width))
           if wide_width != width else _wide_as_ordinary(groups, kb, cb, width)),
        dw_row_groups=as_i32(_row_groups(rows, max(width // 2, 1))),
        **dict(zip(("dw_panel_items", "dw_panel_offsets"),
                   map(as_i32, _dw_panels(rows, cols, dw_panel_columns(128 // width))))),
        fwd_packed=_packing(fwd_offsets, fwd_items, packed_ctas, block_size),
        dx_packed=_packing(dx_offsets, dx_items, packed_ctas, block_size),
    )
    for table in tables:
        table.setflags(write=False)
    return tables


def _wide_fields(fwd_offsets, fwd_items, dx_offsets, dx_items, width, fwd_order, dx_order) -> dict:
    """The wide column groups of fwd and dx (see wide_group_width), their columns as
    ``fwd_order`` / ``dx_order`` say (see _groups; None: in order)."""
    as_i32 = lambda a: np.ascontiguousarray(a, dtype=np.int32)
    fields = {}
    for op, offsets, items, order in (("fwd", fwd_offsets, fwd_items, fwd_order),
                                      ("dx", dx_offsets, dx_items, dx_order)):
        order = _in_order(len(offsets) - 1, width) if order is None else order
        group_offsets, group_items = _groups(np.asarray(offsets), np.asarray(items), width, order)
        fields[f"{op}_wide_offsets"] = as_i32(group_offsets)
        fields[f"{op}_wide_items"] = as_i32(group_items)
        fields[f"{op}_wide_columns"] = as_i32(order)
    return fields


def _wide_as_ordinary(groups: dict, fwd_segments: int, dx_segments: int, width: int) -> dict:
    """Wide groups that are the ordinary ones (the same arrays, columns in order): where the
    widths agree."""
    fields = {f"{op}_wide_{name}": groups[f"{op}_group_{name}"] for op in ("fwd", "dx") for name in ("offsets", "items")}
    for op, segments in (("fwd", fwd_segments), ("dx", dx_segments)):
        fields[f"{op}_wide_columns"] = np.ascontiguousarray(_in_order(segments, width), dtype=np.int32)
    return fields


# Output channels per panel of the small-N dw panel kernel: its shared memory holds dy's rows
# for one panel (32 rows x 1024 channels x 2 bytes = 64 KiB at bf16).
DW_PANEL_CHANNELS = 1024


def dw_panel_columns(block_size: int) -> int:
    """Output block columns per panel of the small-N dw panel kernel."""
    return max(1, DW_PANEL_CHANNELS // block_size)


def _dw_panels(rows: np.ndarray, cols: np.ndarray, panel_cols: int) -> tuple[np.ndarray, np.ndarray]:
    """The blocks (row-major numbering) in panel order: by panel of ``panel_cols`` output block
    columns, then block row, then column. A CTA of the dw panel kernel keeps one panel's dy tiles
    in shared memory and walks its blocks row by row, so each x tile is loaded once per run of
    a row's blocks in the panel and each dy tile once per CTA (instead of once per block)."""
    rows, cols = np.asarray(rows, np.int64), np.asarray(cols, np.int64)
    panels = cols // panel_cols
    order = np.lexsort((cols, rows, panels))
    items = np.zeros((rows.size, 4), np.int64)
    items[:, 0], items[:, 1], items[:, 2] = order, rows[order], cols[order]
    num_panels = int(panels.max()) + 1 if rows.size else 0
    offsets = np.zeros(num_panels + 1, np.int64)
    np.cumsum(np.bincount(panels, minlength=num_panels), out=offsets[1:])
    return items, offsets


def _row_groups(rows: np.ndarray, size: int) -> np.ndarray:
    """The blocks ``size`` by ``size`` within each block row, in row-major order; a row's last
    group is filled with -1. ``size`` = 64 / bs (half the column group width): the conv row group
    dw kernel (cuda/conv/bsconv_row_group_dw_kernel.cuh) puts a group's output columns on one
    MMA's M (64 channels), so its blocks must share their input rows."""
    rows = np.asarray(rows)
    starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]]) if rows.size else np.zeros(0, np.int64)
    counts = np.diff(np.r_[starts, rows.size])
    groups_per_row = -(-counts // size)
    first = np.repeat(starts, groups_per_row) + size * (np.arange(groups_per_row.sum()) -
                                                        np.repeat(np.cumsum(groups_per_row) - groups_per_row,
                                                                  groups_per_row))
    row_end = np.repeat(starts + counts, groups_per_row)
    members = first[:, None] + np.arange(size)[None, :]
    return np.where(members < row_end[:, None], members, -1).reshape(-1, size)


def _group_fields(fwd_offsets, fwd_items, dx_offsets, dx_items, width, fwd_order=None,
                  dx_order=None) -> dict:
    """The column groups of fwd and dx in order, and paired as ``fwd_order`` / ``dx_order``
    say (None: the paired fields are the groups in order)."""
    as_i32 = lambda a: np.ascontiguousarray(a, dtype=np.int32)
    fields = {}
    for op, offsets, items, order in (("fwd", fwd_offsets, fwd_items, fwd_order),
                                      ("dx", dx_offsets, dx_items, dx_order)):
        offsets, items = np.asarray(offsets), np.asarray(items)
        group_offsets, group_items = _groups(offsets, items, width)
        fields[f"{op}_group_offsets"] = as_i32(group_offsets)
        fields[f"{op}_group_items"] = as_i32(group_items)
        if order is None:
            order = _in_order(offsets.shape[0] - 1, width)
            fields[f"{op}_paired_offsets"] = fields[f"{op}_group_offsets"]
            fields[f"{op}_paired_items"] = fields[f"{op}_group_items"]
        else:
            paired_offsets, paired_items = _groups(offsets, items, width, order)
            fields[f"{op}_paired_offsets"] = as_i32(paired_offsets)
            fields[f"{op}_paired_items"] = as_i32(paired_items)
        fields[f"{op}_paired_columns"] = as_i32(order)
    return fields


@functools.lru_cache(maxsize=256)
def _cached(layout_bytes: bytes, shape: tuple[int, int], width: int, wide_width: int, shared_wide: bool,
            shared_paired: bool, packed_ctas: int | None, block_size: int) -> Tables:
    return build_tables(np.frombuffer(layout_bytes, dtype=bool).reshape(shape), width, wide_width, shared_wide,
                        shared_paired, packed_ctas, block_size)


def tables_for(layout: np.ndarray, block_size: int = 32, packed_ctas: int | None = None) -> Tables:
    """Cached tables of a bool layout: rebuilding an op with the same layout is free. The
    groups the large-N kernels read take columns that share inputs: the wide ones (the TMA
    kernel's), and the paired ones at bs 16 and 32 (the TMA kernel's 16-bit bs 32 groups, and
    the wgmma group kernels'; at bs 64 they stay in order, where those kernels do not run by
    default). JBS_SHARED_INPUT_GROUPS=0 keeps them all in order (to compare; read when an op
    is built). ``packed_ctas``: see build_tables."""
    shared = os.environ.get("JBS_SHARED_INPUT_GROUPS") != "0"
    return _cached(np.ascontiguousarray(layout, dtype=bool).tobytes(), layout.shape, group_width(block_size),
                   wide_group_width(block_size), shared, shared and block_size in (16, 32), packed_ctas,
                   block_size)


def pairs_columns(layout: np.ndarray, width: int, pairing: str = "auto") -> bool:
    """Whether a conv's paired column groups are paired (paired_order) or in order. "auto":
    at bs 32 (width 4), and at bs 16 (width 8) below density 3/16. At bs 16 pairing costs
    twice: the strip kernel's forward copies a row's blocks of a group with one bulk copy only
    where they are consecutive in w, as columns in order are, and its stores of a paired
    group's columns write 32-byte pieces of lines. Measured (benchmarks/NOTES.md, session 25):
    at bs 32 1.03-1.2x faster at every density; at bs 16 1.04-1.15x faster at density 1/8,
    from 4% faster to 3% slower at 1/4 and up to 8% slower at 1/2 (forward). "off": never;
    "all": at every width (the last two to compare)."""
    if pairing != "auto":
        return pairing == "all"
    return width == group_width(32) or (width == group_width(16) and layout.mean() < 3 / 16)


def build_conv_tables(layout: np.ndarray, taps: int, width: int = 4, pairing: str = "auto") -> Tables:
    """Tables of a convolution with ``taps`` filter taps over a (Cb, Kb) channel layout.

    Its im2col matrix has tap-major column blocks (block ``t * Cb + c`` is tap t, channel block
    c), so forward and weight gradient use the tables of the layout stacked once per tap, whose
    packed order is the conv's ``w.reshape(taps * nnz, bs, bs)``. The input gradient has one
    output block per *channel* block c, summing over taps: its segment c holds the items of
    rows ``t * Cb + c`` of the stacked layout for every t, each reading block ``t * Kb + k`` of
    the gathered output gradient (also tap-major). ``pairing``: see pairs_columns."""
    cb, kb = layout.shape
    stacked = build_tables(np.tile(layout, (taps, 1)), width)
    segments = [[] for _ in range(cb)]
    for row in range(taps * cb):
        t, c = divmod(row, cb)
        items = stacked.dx_items[stacked.dx_offsets[row]:stacked.dx_offsets[row + 1]]
        segments[c].append(np.stack([items[:, 0], t * kb + items[:, 1]], axis=1))
    counts = [sum(len(part) for part in parts) for parts in segments]
    dx_offsets = np.zeros(cb + 1, np.int64)
    np.cumsum(counts, out=dx_offsets[1:])
    dx_items = np.concatenate([part for parts in segments for part in parts] or [np.zeros((0, 2))])
    as_i32 = lambda a: np.ascontiguousarray(a, dtype=np.int32)
    dx_items = as_i32(dx_items.reshape(-1, 2))
    pair = pairs_columns(layout, width, pairing)
    groups = _group_fields(stacked.fwd_offsets, stacked.fwd_items, dx_offsets, dx_items, width,
                           fwd_order=paired_order(layout, width) if pair else None,
                           dx_order=paired_order(layout.T, width) if pair else None)
    # (dx_chunks/dx_splits stay the stacked layout's: the conv kernels never read them)
    # (the convs have no TMA group kernel: their wide groups are their ordinary ones)
    tables = stacked._replace(dx_offsets=as_i32(dx_offsets), dx_items=dx_items, **groups,
                              **_wide_as_ordinary(groups, kb, cb, width))
    for table in tables:
        table.setflags(write=False)
    return tables


@functools.lru_cache(maxsize=256)
def _cached_conv(layout_bytes: bytes, shape: tuple[int, int], taps: int, width: int, pairing: str) -> Tables:
    return build_conv_tables(np.frombuffer(layout_bytes, dtype=bool).reshape(shape), taps, width, pairing)


def conv_tables_for(layout: np.ndarray, taps: int, block_size: int = 32) -> Tables:
    """Cached convolution tables (see build_conv_tables). JBS_CONV_PAIRED=0 keeps the paired
    column groups in order, JBS_CONV_PAIRED=all pairs them at bs 16 too (to compare; read when
    an op is built)."""
    return _cached_conv(np.ascontiguousarray(layout, dtype=bool).tobytes(), layout.shape, taps,
                        group_width(block_size),
                        {"0": "off", "all": "all"}.get(os.environ.get("JBS_CONV_PAIRED", ""), "auto"))
