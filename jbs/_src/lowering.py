"""Lowering of the matmul primitives: the reference everywhere, the CUDA FFI kernels on GPU."""

from __future__ import annotations

import functools
import os
import warnings

import numpy as np
import jax
import jax.numpy as jnp
from jax.interpreters import mlir

from jbs._src import dense_fallback, extension, reference, sharding
from jbs._src import precision as precision_lib
from jbs._src.primitives import bsmm_dw_p, bsmm_dx_p, bsmm_fwd_p
from jbs._src.tables import Tables, packing_ctas

# primitive -> (reference function, FFI target, which lookup tables the kernel reads)
_OPS = {
    bsmm_fwd_p: (reference.forward, "jbs_bsmm_fwd",
                 ("fwd_offsets", "fwd_items", "fwd_chunks", "fwd_splits", "fwd_group_offsets",
                  "fwd_group_items", "fwd_wide_offsets", "fwd_wide_items", "fwd_wide_columns",
                  "fwd_paired_offsets", "fwd_paired_items", "fwd_paired_columns", "fwd_packed")),
    bsmm_dx_p: (reference.input_grad, "jbs_bsmm_dx",
                ("dx_offsets", "dx_items", "dx_chunks", "dx_splits", "dx_group_offsets",
                 "dx_group_items", "dx_wide_offsets", "dx_wide_items", "dx_wide_columns",
                 "dx_paired_offsets", "dx_paired_items", "dx_paired_columns", "dx_packed")),
    bsmm_dw_p: (reference.weight_grad, "jbs_bsmm_dw", ("dw_items", "dw_panel_items", "dw_panel_offsets")),
}
_TABLE_FIELDS = Tables._fields
# The reference functions take the first five tables (the ones that define the op).
_REFERENCE_TABLES = 5

# Small-N path of the fwd/dx kernels: keep in sync with cuda/matmul/bsmm.h
# (kStreamMaxRowsHost, stream_row_tile_host, stream_scratch_bytes).
_STREAM_MAX_ROWS = 64


def _stream_scratch_floats(groups: int, n_split: int, bs: int) -> int:
    """float32 elements of the fwd/dx scratch result (counters, then partial tiles).

    Sized for the largest small-N row tile whatever the global row count: when the rows are
    sharded over devices, each device's kernel sees only its own rows, which this lowering
    cannot know. The handler accepts a larger scratch than it needs."""
    if n_split == 0:
        return 1
    counters = -(-groups * n_split // 4) * 4
    return counters + groups * n_split * _STREAM_MAX_ROWS * bs


def _tile_major_scratch_floats(a, block_size: int) -> int:
    """float32 elements that hold the small-N path's tile-major copy of activation ``a``
    (G or 1, N, C) after the split counters and partials (cuda/matmul/bsmm.h:
    stream_tile_major_offset; 64 more for its 256-byte alignment), or 0. The kernels read one
    where a tile row is under a 32-byte sector (16-bit types at bs 8; cuda/matmul/launch_small_n.cuh:
    use_tile_major), or at every block size with JBS_TILE_MAJOR=1; never with JBS_TILE_MAJOR=0
    or past the small-N path. Per-device rows are at most the global ones."""
    setting = os.environ.get("JBS_TILE_MAJOR", "")
    wanted = setting == "1" or (setting != "0" and block_size * a.dtype.itemsize < 32)
    if not wanted or a.shape[1] > _STREAM_MAX_ROWS:
        return 0
    return 64 + a.shape[0] * a.shape[1] * a.shape[2] * a.dtype.itemsize // 4


# Small-N path over column groups (cuda/matmul/bsmm_stream_group_kernel.cuh): counters, then
# fp32 partials of S slices per group. Keep in sync with launch_small_n.cuh (use_stream_groups,
# min_stream_group_reuse) and bsmm_stream_group_kernel.cuh (stream_group_slices,
# stream_group_scratch_bytes).
def _min_stream_group_reuse(block_size: int) -> float:
    return 3.5 if block_size in (16, 32) else float("inf")


def _stream_group_scratch_floats(groups: int, rows: int, block_size: int, nnz: int, group_offsets,
                                 group_items) -> int:
    """float32 elements of the small-N group kernel's counters and partials, or 0 where the
    kernels would not take it (too little reuse per loaded activation tile, large N, or
    JBS_STREAM_GROUPS=0; JBS_STREAM_GROUPS=1 takes it at any reuse). Sized for the row tile
    of the global rows, at least each device's."""
    setting = os.environ.get("JBS_STREAM_GROUPS", "")
    num_groups, union_items = group_offsets.shape[0] - 1, group_items.shape[0]
    if setting == "0" or rows > _STREAM_MAX_ROWS or union_items == 0 or num_groups == 0:
        return 0
    if setting != "1" and nnz / union_items < _min_stream_group_reuse(block_size):
        return 0
    slices = min(16, max(1, union_items // num_groups // 32))
    row_tile = 16 if rows <= 16 else (32 if rows <= 32 else 64)
    counters = -(-groups * num_groups // 4) * 4
    return counters + (groups * num_groups * slices * row_tile * 128 if slices > 1 else 0)


# Small-N path on sm_90, warp-specialized over column groups with a stream-K split
# (cuda/matmul/bsmm_stream_ws_kernel.cuh): int counters per (group, consumer warp), then fp32
# partials for num_groups + CTAs pieces. Keep in sync with launch_small_n.cuh (use_stream_ws,
# stream_ws_counter_ints, stream_ws_max_ctas) and the kernel's kStreamWsMaxGroups. The
# launcher uses at most one CTA per SM and no more than this scratch has room for.
_STREAM_WS_CONSUMERS = 4
_STREAM_WS_MAX_GROUPS = 4096
_STREAM_WS_RESERVED_CTAS = 264


_STREAM_WS_FP32_BLOCK = 32
_STREAM_WS_MIN_REUSE = 2.0


def _stream_ws_scratch_floats(groups: int, rows: int, itemsize: int, block_size: int, nnz: int,
                              group_offsets, group_items) -> int:
    """float32 elements of the warp-specialized small-N kernel's counters and partials, or 0
    where the kernels would not take it (launch_small_n.cuh use_stream_ws: by default fp32 at
    bs 32 with reuse nnz / union items >= 2; JBS_STREAM_WS=1 at any, =0 never; never for
    large N or too many groups). Sized for the row tile of the global rows, at least each
    device's."""
    setting = os.environ.get("JBS_STREAM_WS", "")
    num_groups, union_items = group_offsets.shape[0] - 1, group_items.shape[0]
    if (setting == "0" or rows > _STREAM_MAX_ROWS or num_groups < 1 or union_items == 0
            or num_groups > _STREAM_WS_MAX_GROUPS):
        return 0
    default = (itemsize == 4 and block_size == _STREAM_WS_FP32_BLOCK
               and nnz / union_items >= _STREAM_WS_MIN_REUSE)
    if setting != "1" and not default:
        return 0
    row_tile = 16 if rows <= 16 else (32 if rows <= 32 else 64)
    counters = -(-groups * num_groups * _STREAM_WS_CONSUMERS // 4) * 4
    return counters + groups * (num_groups + _STREAM_WS_RESERVED_CTAS) * row_tile * 128


# Small-N path on sm_90 that cuts all items evenly over the warps and copies weight blocks in
# bulk (cuda/matmul/bsmm_stream_even_kernel.cuh): two fp32 pieces per warp, after (16-bit
# types and fp32 at bs 32, unless JBS_STREAM_EVEN_SWIZZLE=0) room for a tile-major copy of the
# activation whose tiles have row-tile rows (16-bit walks read their tiles straight from the
# activation and use the room only where TMA cannot address that). Keep in sync with
# launch_small_n.cuh (use_stream_even, kStreamEvenMinBytes, kStreamEvenMinBytesF32,
# stream_even_max_warps, stream_even_tiled_bytes) and the kernel's kStreamEvenMaxCols. The
# launcher uses at most 8 warps per SM and no more than this scratch has room for.
_STREAM_EVEN_MAX_COLS = 4096
_STREAM_EVEN_RESERVED_WARPS = 8 * 160
_STREAM_EVEN_MIN_BYTES = 24 << 20
_STREAM_EVEN_MIN_BYTES_F32 = 48 << 20


def _stream_even_scratch_floats(groups: int, rows: int, itemsize: int, block_size: int,
                                num_cols: int, nnz: int, precision: int, in_groups: int,
                                in_cols: int, packed_ctas: int = 0) -> int:
    """float32 elements of the even-split small-N kernel's tiled activation (``in_groups`` of
    ``in_cols`` columns) and pieces, or 0 where the kernels would not take it (launch_small_n.cuh
    use_stream_even): by default 16-bit types at bs 16 and 32 with at least 24 MiB of weights,
    fp32 at bs 32 and up to 32 rows from 48 MiB (its swizzled walk only), and with
    JBS_STREAM_EVEN_PACKED=1 at any size where the op's table came packed for ``packed_ctas``
    CTAs (tables._packing), with room for their 8 warps each;
    any bs of 16-64 with JBS_STREAM_EVEN=1; never with =0, for fp32 at HIGHEST, at large N or
    with too many output columns. Sized for the row tile of the global rows, at least each
    device's."""
    setting = os.environ.get("JBS_STREAM_EVEN", "")
    swizzled = (itemsize == 2 or block_size == 32) and os.environ.get("JBS_STREAM_EVEN_SWIZZLE", "") != "0"
    weight_bytes = nnz * block_size**2 * itemsize
    packed = packed_ctas > 0 and swizzled and os.environ.get("JBS_STREAM_EVEN_PACKED", "") == "1"
    if itemsize == 2:
        default = block_size in (16, 32) and (weight_bytes >= _STREAM_EVEN_MIN_BYTES or packed)
    else:  # (a superset: the kernels leave fp32 to the warp-specialized kernel where it applies)
        default = (block_size == 32 and rows <= 32 and swizzled
                   and (weight_bytes >= _STREAM_EVEN_MIN_BYTES_F32 or packed))
    if (setting == "0" or (setting != "1" and not default) or rows > _STREAM_MAX_ROWS
            or block_size < 16 or nnz == 0 or num_cols > _STREAM_EVEN_MAX_COLS
            or (itemsize == 4 and precision == precision_lib.HIGHEST)):
        return 0
    row_tile = 16 if rows <= 16 else (32 if rows <= 32 else 64)
    tiled_bytes = 0
    if swizzled:
        tiled_bytes = -(-in_groups * in_cols * row_tile * itemsize // 256) * 256
    warps = min(nnz, _STREAM_EVEN_RESERVED_WARPS)
    if packed:  # (launch_small_n.cuh: packing_offered)
        warps = max(warps, 8 * packed_ctas)
    return tiled_bytes // 4 + groups * 2 * warps * row_tile * block_size


# Small-N path on sm_90 that cuts the union items of the column groups evenly over the warps
# (cuda/matmul/bsmm_stream_even_group_kernel.cuh): two fp32 pieces of a whole group (row tile
# x 128 columns) per warp. Keep in sync with launch_small_n.cuh (use_stream_even_group,
# stream_even_group_min_reuse, kStreamEvenGroupMinBytes, stream_even_group_max_warps) and the
# kernel's kStreamEvenGroupMaxGroups.
_STREAM_EVEN_GROUP_MAX_GROUPS = 1024
_STREAM_EVEN_GROUP_MIN_REUSE = {8: 7.0, 16: 2.0, 32: 3.0}
_STREAM_EVEN_GROUP_MIN_BYTES = 16 << 20


def _stream_even_group_scratch_floats(groups: int, rows: int, itemsize: int, block_size: int,
                                      nnz: int, group_offsets, group_items) -> int:
    """float32 elements of the even-split group kernel's pieces, or 0 where the kernels would
    not take it (launch_small_n.cuh use_stream_even_group): 16-bit types at bs 8, 16 and 32, at
    most 32 rows; by default with >= 16 MiB of weights whose union items carry enough blocks
    each (reuse nnz / union items >= 2 at bs 16, >= 3 at bs 32, >= 7 at bs 8), at any with
    JBS_STREAM_EVEN_GROUP=1, never with =0."""
    setting = os.environ.get("JBS_STREAM_EVEN_GROUP", "")
    num_groups, union_items = group_offsets.shape[0] - 1, group_items.shape[0]
    if (setting == "0" or itemsize != 2 or block_size not in (8, 16, 32) or rows > 32
            or union_items == 0 or num_groups > _STREAM_EVEN_GROUP_MAX_GROUPS):
        return 0
    default = (nnz / union_items >= _STREAM_EVEN_GROUP_MIN_REUSE[block_size]
               and nnz * block_size**2 * itemsize >= _STREAM_EVEN_GROUP_MIN_BYTES)
    if setting != "1" and not default:
        return 0
    row_tile = 16 if rows <= 16 else 32
    return groups * 2 * min(union_items, _STREAM_EVEN_RESERVED_WARPS) * row_tile * 128


# Large-N path: the wgmma group kernel first copies the activation into the scratch result,
# packed so that each of its tiles is contiguous (cuda/matmul/packed_rows.cuh: kPackRowTile,
# packed_bytes_host; launch_large_n.cuh: use_packed_rows, kGroupWgmmaSupported). 16-bit types
# with blocks of 16 or more, fp32 likewise at the default precision (tf32);
# none with JBS_PACK=0 (read here when the op is lowered, and by the kernel launch). A GPU
# without that kernel leaves the room unused (XLA only reserves it).
_PACK_ROW_TILE = 256


def _packs(itemsize: int, block_size: int, precision: int) -> bool:
    if os.environ.get("JBS_PACK", "") == "0":
        return False
    if itemsize == 2:
        return block_size >= 16
    return block_size >= 16 and precision == precision_lib.DEFAULT


# The TMA-fed group kernel (cuda/matmul/launch_large_n.cuh: use_group_tma, the same rule)
# reads the row-major activation: where it takes the call, no packed copy is made. Its fp32
# forward reads a transposed copy of the weight blocks from the scratch result instead. At
# mid N (64 < rows < 512) its CTAs, one per group and 256-row tile, are fewer than the SMs:
# there it cuts each group's items into slices that fill them (mid_n_slices), whose fp32
# partials follow the transposed weights in the scratch. Whether it takes a mid-N call is
# decided at launch (group_tma_takes_mid_n, by the layout's reuse): the room is reserved for
# every mid-N call it may take.
_GROUP_TMA_MIN_ROWS = 512
_GROUP_TMA_ROW_TILE = 256
_MID_N_MAX_SLICES = 8


def _group_tma_wide(itemsize: int, block_size: int) -> bool:
    """Whether the TMA kernel walks the wide groups (tile rows of 128 bytes: 16-bit bs 64,
    fp32 at bs 32 and, through its 32 x 32 quarters, 64) rather than the ordinary ones."""
    return itemsize == 4 or block_size == 64


def _mid_n_slices(rows: int, groups: int, num_groups: int) -> int:
    """Item slices of the TMA or wgmma group kernel (cuda/matmul/launch_large_n.cuh:
    mid_n_slices): as many as fill _SMS SMs with one CTA each (at most _MID_N_MAX_SLICES) at
    mid N, else 1. The launch recounts them for its GPU and slices no more than the scratch
    sized here has room for (a GPU with more SMs)."""
    if os.environ.get("JBS_MID_SLICES", "") == "0" or not _STREAM_MAX_ROWS < rows < _GROUP_TMA_MIN_ROWS:
        return 1
    ctas = max(1, num_groups * -(-rows // _GROUP_TMA_ROW_TILE) * groups)
    slices = min(_MID_N_MAX_SLICES, _SMS // ctas)
    return slices if slices >= 2 else 1


def _group_tma_takes(itemsize: int, block_size: int, rows: int, precision: int) -> bool:
    # The launch may still decline such a call (a narrow output whose grid leaves SMs idle at
    # low reuse, a mid-N layout of low reuse, or a tensor map the driver refuses): it then runs
    # the one-column kernel, which reads no packed copy, so the prediction costs at most the
    # unused room of the fp32 copy and the slices' partials.
    forced = os.environ.get("JBS_GROUP_TMA", "")
    # (fp32 at bs 64 runs the bs 32 kernel over the blocks' 32 x 32 quarters)
    supported = block_size in (32, 64) and (itemsize == 2 or precision == precision_lib.DEFAULT)
    if forced[:1] == "0" or not supported or rows <= _STREAM_MAX_ROWS:
        return False
    if forced:
        return True
    return not os.environ.get("JBS_GROUPS") and not os.environ.get("JBS_WGMMA")


def _then_partials(first: int, partials: int) -> int:
    """float32 elements of a scratch holding `first` elements, then (where there are any) the
    item slices' partials on a 256-byte boundary (launch_large_n.cuh: *_partials_offset)."""
    return (-(-first // 64) * 64 if partials else first) + partials


def _group_tma_scratch_floats(target: str, a, b, block_size: int, precision: int, slices: int,
                              out_cols: int) -> int:
    """float32 elements of the TMA kernel's scratch: the fp32 forward's transposed weight
    blocks, b (G or 1, nnz, bs, bs), to a 256-byte boundary, then the item slices' partials
    (groups, slices, rows, out_cols) where it slices; 0 where it needs none or does not run."""
    itemsize = a.dtype.itemsize
    if not _group_tma_takes(itemsize, block_size, a.shape[1], precision):
        return 0
    transposed = b.shape[0] * b.shape[1] * block_size * block_size if (
        target == "jbs_bsmm_fwd" and itemsize == 4) else 0
    groups = b.shape[0] if a.shape[0] == 1 else a.shape[0]
    partials = groups * slices * a.shape[1] * out_cols if slices > 1 else 0
    return _then_partials(transposed, partials)


def _packed_scratch_floats(a, block_size: int, precision: int, slices: int, groups: int,
                           out_cols: int) -> int:
    """float32 elements that hold the wgmma group kernel's packed copy of activation ``a``
    (G or 1, N, C; none with JBS_PACK=0) to a 256-byte boundary, then its item slices'
    partials (groups, slices, rows, out_cols) where it slices at mid N; 0 where that kernel
    does not run."""
    wgmma = block_size >= 16 and (a.dtype.itemsize == 2 or precision == precision_lib.DEFAULT)
    if (not wgmma or a.shape[1] <= _STREAM_MAX_ROWS
            or _group_tma_takes(a.dtype.itemsize, block_size, a.shape[1], precision)):
        return 0
    rows = -(-a.shape[1] // _PACK_ROW_TILE) * _PACK_ROW_TILE
    packs = _packs(a.dtype.itemsize, block_size, precision)
    packed = a.shape[0] * rows * a.shape[2] * a.dtype.itemsize // 4 if packs else 0
    partials = groups * slices * a.shape[1] * out_cols if slices > 1 else 0
    return _then_partials(packed, partials)


def _reference_rule(reference_fn):
    def fn(a, b, *tables, precision, conv=None):
        if conv is not None:  # build the im2col matrix that the CUDA kernels only gather
            a = (conv.transposed() if reference_fn is reference.input_grad else conv).gather(a)
        return reference_fn(a, b, *tables[:_REFERENCE_TABLES], precision=precision)
    return mlir.lower_fun(fn, multiple_results=False)


def _ffi_call(target, block_size, precision, a, b, *tables):
    """The kernel on (possibly per-device) shapes: the output, plus a scratch result for fwd/dx."""
    groups = b.shape[0] if a.shape[0] == 1 else a.shape[0]
    attributes = dict(block_size=np.int32(block_size), precision=np.int32(precision))
    if target == "jbs_bsmm_dw":
        nnz, rows = tables[0].shape[0], a.shape[1]
        splits = _matmul_dw_row_splits(rows, a.shape[2], b.shape[2], nnz, a.dtype, block_size, groups)
        partials = groups * splits * nnz * block_size * block_size if splits > 1 else 1
        results = [jax.ShapeDtypeStruct((groups, nnz, block_size, block_size), a.dtype),
                   jax.ShapeDtypeStruct((partials,), np.float32)]
        attributes["row_splits"] = np.int32(splits)
    else:
        offsets, items, splits, group_offsets, group_items, packed = (tables[i] for i in (0, 1, 3, 4, 5, 12))
        out_cols = block_size * (offsets.shape[0] - 1)
        tma_groups = (tables[6] if _group_tma_wide(a.dtype.itemsize, block_size) else group_offsets).shape[0] - 1
        slices = _mid_n_slices(a.shape[1], groups, tma_groups)
        wgmma_slices = _mid_n_slices(a.shape[1], groups, group_offsets.shape[0] - 1)
        scratch = max(_stream_scratch_floats(groups, splits.shape[0] - 1, block_size) +
                      _tile_major_scratch_floats(a, block_size),
                      _stream_group_scratch_floats(groups, a.shape[1], block_size, items.shape[0],
                                                   group_offsets, group_items),
                      _stream_ws_scratch_floats(groups, a.shape[1], a.dtype.itemsize, block_size,
                                                items.shape[0], group_offsets, group_items),
                      _stream_even_scratch_floats(groups, a.shape[1], a.dtype.itemsize, block_size,
                                                  offsets.shape[0] - 1, items.shape[0], precision,
                                                  a.shape[0], a.shape[2],
                                                  packing_ctas(packed.shape[0], items.shape[0], offsets.shape[0] - 1)),
                      _stream_even_group_scratch_floats(groups, a.shape[1], a.dtype.itemsize,
                                                        block_size, items.shape[0], group_offsets,
                                                        group_items),
                      _packed_scratch_floats(a, block_size, precision, wgmma_slices, groups, out_cols),
                      _group_tma_scratch_floats(target, a, b, block_size, precision, slices, out_cols))
        results = [jax.ShapeDtypeStruct((groups, a.shape[1], out_cols), a.dtype),
                   jax.ShapeDtypeStruct((scratch,), np.float32)]
    return jax.ffi.ffi_call(target, results)(a, b, *tables, **attributes)[0]


def _conv_ffi_call(target, block_size, precision, conv, a, b, *tables):
    """The implicit-GEMM convolution kernels: the output only (they need no scratch). The
    ``geometry`` attribute is the map that gathers operand 0's rows: the transposed one for dx."""
    groups = b.shape[0] if a.shape[0] == 1 else a.shape[0]
    gather = conv.transposed() if target == "jbs_bsconv_dx" else conv
    attributes = dict(block_size=np.int32(block_size), precision=np.int32(precision),
                      geometry=gather.as_attribute())
    if target == "jbs_bsconv_dw":
        nnz = tables[0].shape[0]
        panel_sets = _panel_dw_sets(b.shape[1], a.shape[2], b.shape[2], nnz, a.dtype, block_size, conv)
        if panel_sets:
            splits = _panel_dw_splits(b.shape[1], groups * panel_sets, block_size)
        elif _conv_row_group_dw(conv, a.dtype, block_size):
            # The row group kernel's CTAs each own a row group of layout blocks for every tap.
            row_groups = tables[1].shape[0] // conv.num_taps
            splits = _row_group_dw_splits(-(-b.shape[1] // _HALO_DW_ROWS), groups * row_groups)
        else:
            # The halo kernel's CTAs each own a layout block for every tap: split for those.
            cta_blocks = nnz // conv.num_taps if _conv_halo_dw(conv, a.dtype, block_size) else nnz
            splits = _dw_row_splits(b.shape[1], groups * cta_blocks)
        partials = groups * splits * nnz * block_size * block_size if splits > 1 else 1
        results = [jax.ShapeDtypeStruct((groups, nnz, block_size, block_size), a.dtype),
                   jax.ShapeDtypeStruct((partials,), np.float32)]
        return jax.ffi.ffi_call(target, results)(a, b, *tables, row_splits=np.int32(splits),
                                                 **attributes)[0]
    shape = (groups, gather.rows_for(a.shape[1]), block_size * (tables[0].shape[0] - 1))
    return jax.ffi.ffi_call(target, jax.ShapeDtypeStruct(shape, a.dtype))(a, b, *tables, **attributes)


# The weight gradient of a convolution has few blocks (taps x nnz) and many rows (every pixel
# of the batch): one CTA per block would leave most SMs idle, so each block's rows are split
# over several CTAs (cuda/matmul/bsmm_dw_kernel.cuh). Enough CTAs for ~4 per SM of an H100/H200,
# each with at least 16 chunks of 64 rows so the partials' extra traffic stays small.
_DW_TARGET_CTAS = 4 * 132
_DW_MIN_ROWS_PER_SPLIT = 1024


# The conv halo dw kernel (cuda/conv/bsconv_halo_dw_kernel.cuh): its halo capacity per block
# size and its most taps. The dispatch rule is C++'s (launch_conv.cuh: use_conv_halo_dw); this
# copy only sizes the row splits, so a disagreement (e.g. on a device whose blocks cannot take
# the kernel's shared memory, where C++ keeps the implicit-GEMM dw) costs speed, never
# correctness: the scratch holds the splits of every (tap, block) either way.
_HALO_DW_ROWS = 256
_HALO_CAPACITY = {16: 512, 32: 448}
_HALO_MAX_TAPS = 9


def _conv_halo_dw(conv, dtype, block_size: int) -> bool:
    """Whether the weight gradient of ``conv`` runs the halo dw kernel (see above)."""
    env = os.environ.get("JBS_CONV_HALO", "")
    if env[:1] == "0" or jnp.dtype(dtype) not in (jnp.bfloat16, jnp.float16):
        return False
    if block_size not in _HALO_CAPACITY or conv.num_taps > _HALO_MAX_TAPS or (conv.num_taps < 2 and not env):
        return False
    if conv.mul != (1, 1) or conv.div != (1, 1) or conv.rows_hw != conv.source_hw:
        return False
    width = conv.rows_hw[1]
    deltas = [(conv.offset[0] + kh * conv.step[0]) * width + conv.offset[1] + kw * conv.step[1]
              for kh in range(conv.taps[0]) for kw in range(conv.taps[1])]
    lo, hi = min(deltas), max(deltas)
    return -(2**30) < lo and hi < 2**30 and _HALO_DW_ROWS + hi - lo <= _HALO_CAPACITY[block_size]


# The conv row group dw kernel (cuda/conv/bsconv_row_group_dw_kernel.cuh): bs 16 and 32, 16-bit,
# 4 / 6 / 9 taps, images 8, 16 or 32 pixels wide (C++: use_conv_row_group_dw, band_halo_shape; as
# above, this copy only sizes the row splits).
_ROW_GROUP_DW_TAPS = (4, 6, 9)


def _conv_row_group_dw(conv, dtype, block_size: int) -> bool:
    """Whether the weight gradient of ``conv`` runs the row group dw kernel (see above)."""
    if os.environ.get("JBS_CONV_ROW_GROUP_DW", "")[:1] == "0" or os.environ.get("JBS_CONV_HALO", "")[:1] == "0":
        return False
    if (block_size not in (16, 32) or jnp.dtype(dtype) not in (jnp.bfloat16, jnp.float16)
            or conv.num_taps not in _ROW_GROUP_DW_TAPS):
        return False
    if conv.mul != (1, 1) or conv.div != (1, 1) or conv.rows_hw != conv.source_hw:
        return False
    height, width = conv.rows_hw
    image_rows = _HALO_DW_ROWS // width if width in (8, 16, 32) else 0
    if not image_rows or height % 8 or (height % image_rows and image_rows % height):
        return False
    ows = [conv.offset[1] + kw * conv.step[1] for kw in range(conv.taps[1])]
    return -8 <= min(ows) and max(ows) <= 8


def _row_group_dw_splits(tiles: int, ctas: int, sms: int = 132) -> int:
    """Row splits of the row group dw kernel (one CTA per SM): the fewest waves of CTAs over the
    256-pixel tiles, each split costing about half a tile more (its partials, written and summed)."""
    if ctas == 0 or tiles <= 1:
        return 1
    cost = lambda s: -(-ctas * s // sms) * -(-tiles // s) + 0.5 * s
    return min(range(1, min(tiles, 256) + 1), key=lambda s: (cost(s), s))


# The panel dw kernel (cuda/matmul/bsmm_panel_dw_kernel.cuh): the weight gradient of a 1x1
# conv with many pixels and few channels, from row panels of x and dy. A CTA holds the
# accumulators of 20 (bs 32) or 40 (bs 16) units, so a layout with more units takes several
# CTAs ("sets") per row range; the rows are split so that every SM gets one CTA. The dispatch
# rule is C++'s (launch_panel.cuh: panel_dw_geometry, use_panel_dw; PanelDwConfig); as above,
# this copy only sizes the row splits.
_PANEL_DW_UNITS_PER_CTA = {16: 40, 32: 20}
_PANEL_DW_SMEM = 226 * 1024
_PANEL_DW_TILE = {16: 64, 32: 32}  # rows per tile (PanelDwConfig::kTM)
_PANEL_DW_MIN_ROWS = 64 * 132     # the default's least rows (use_panel_dw)
_SMS = 132


def _panel_dw_sets(rows: int, x_cols: int, dy_cols: int, nnz: int, dtype, block_size: int,
                   conv=None) -> int:
    """CTAs per row range of the panel dw kernel, or 0 where it does not run by default
    (JBS_PANEL_DW=0: never; =1: wherever it fits). Assumes an H100's or H200's 132 SMs."""
    env = os.environ.get("JBS_PANEL_DW", "")
    forced = env[:1] not in ("", "0")  # as C++'s env_switch: any other value turns it on
    if env[:1] == "0" or block_size not in _PANEL_DW_UNITS_PER_CTA or jnp.dtype(dtype) not in (jnp.bfloat16, jnp.float16):
        return 0
    if conv is not None and (conv.num_taps != 1 or conv.mul != (1, 1) or conv.div != (1, 1)
                             or conv.offset != (0, 0) or conv.rows_hw != conv.source_hw):
        return 0
    x_chunks, dy_chunks = -(-x_cols // 64), -(-dy_cols // 64)
    c_blocks, k_blocks = x_cols // block_size, dy_cols // block_size
    tables = -(-4 * (c_blocks * k_blocks + 2 * x_chunks * k_blocks + 2 * (x_chunks + dy_chunks)) // 1024) * 1024
    two_slots = 2 * (x_chunks + dy_chunks) * _PANEL_DW_TILE[block_size] * 128
    if tables + two_slots + 1024 > _PANEL_DW_SMEM:
        return 0
    # By default also where the large-N dw kernel would read x and dy 1.5 times or more.
    if not forced and (rows < _PANEL_DW_MIN_ROWS or 2 * nnz * block_size * 2 < 3 * (x_cols + dy_cols)):
        return 0
    units = min(nnz, x_chunks * k_blocks)
    return max(1, -(-units // _PANEL_DW_UNITS_PER_CTA[block_size]))


def _panel_dw_splits(rows: int, ctas_per_split: int, block_size: int, sms: int = _SMS) -> int:
    """Row splits of the panel dw kernel: one CTA per SM, at least one tile per split."""
    return int(max(1, min(-(-rows // _PANEL_DW_TILE[block_size]), sms // ctas_per_split, 65535)))


def _matmul_dw_row_splits(rows: int, x_cols: int, dy_cols: int, nnz: int, dtype, block_size: int,
                          groups: int) -> int:
    """Row splits of the plain matmul's weight gradient: the panel dw kernel's where it runs, else
    the large-N dw kernel's (one CTA per block and split). The small-N kernels take none."""
    if rows <= _STREAM_MAX_ROWS:
        return 1
    panel_sets = _panel_dw_sets(rows, x_cols, dy_cols, nnz, dtype, block_size)
    if panel_sets:
        return _panel_dw_splits(rows, groups * panel_sets, block_size)
    return _dw_row_splits(rows, groups * nnz)


def _dw_row_splits(rows: int, blocks: int) -> int:
    if blocks == 0:
        return 1
    wanted = -(-_DW_TARGET_CTAS // blocks)
    return int(max(1, min(wanted, rows // _DW_MIN_ROWS_PER_SPLIT, 65535)))


def _conv_pixels(target, conv):
    """Pixels per image of a conv kernel's pixel operands and result (``partitioned_images``):
    the forward reads the input image and writes the output image, the input gradient the other
    way round, and the weight gradient reads both and sums over the images."""
    source, rows = (h * w for h, w in (conv.source_hw, conv.rows_hw))
    return {"jbs_bsmm_fwd": dict(operand_pixels=(source,), result_pixels=rows),
            "jbs_bsmm_dx": dict(operand_pixels=(rows,), result_pixels=source),
            "jbs_bsmm_dw": dict(operand_pixels=(source, rows), result_pixels=None)}[target]


def _dense_dot_wins(ctx, precision) -> bool:
    """Whether a matmul forward / input gradient lowers to XLA's dense dot (dense_fallback)."""
    a, w = ctx.avals_in[0], ctx.avals_in[1]
    (y,) = ctx.avals_out
    tables = Tables(*ctx.avals_in[2:])
    # One densified weight per group of w; one shared by all groups of a serves all their rows.
    rows = a.shape[1] * (a.shape[0] if w.shape[0] == 1 else 1)
    return dense_fallback.takes_dense_dot(
        rows=rows, c=a.shape[2], k=y.shape[2], nnz=tables.dw_items.shape[0], block_size=w.shape[-1],
        itemsize=a.dtype.itemsize, groups=w.shape[0], precision=precision)


def _cuda_rule(prim):
    """Calls the FFI target with the two data operands and only the tables it reads, row-
    partitioned over devices when the activations are sharded (see sharding.py); lowers to the
    reference instead for GPUs the kernels were not built for (extension.runs_kernels)."""
    reference_fn, target, used_tables = _OPS[prim]
    reference_rule = _reference_rule(reference_fn)
    keep = [0, 1] + [2 + _TABLE_FIELDS.index(name) for name in used_tables]
    is_dw = target == "jbs_bsmm_dw"

    # The convolutions have no small-N path (no chunks, splits or packing) and no TMA group
    # kernel (no wide groups); their fwd and dx read the paired column groups too (the strip
    # kernel's, tables.paired_order; a matmul's are the TMA kernel's at 16-bit bs 32).
    conv_keep = [0, 1] + [2 + _TABLE_FIELDS.index(name) for name in used_tables
                          if not name.endswith(("_chunks", "_splits", "_packed")) and "_wide_" not in name]

    def rule(ctx, *operands, precision, conv=None):
        axis_context = ctx.module_context.axis_context
        if not all(extension.runs_kernels(device) for device in sharding.lowering_devices(axis_context)):
            return reference_rule(ctx, *operands, precision=precision, conv=conv)
        block_size = ctx.avals_out[0].shape[-1] if is_dw else ctx.avals_in[1].shape[-1]
        # Partition only a computation over several devices (not a shard_map body, which is
        # already per device, and not a single device, where there is nothing to split).
        several_devices = sharding.spans_several_devices(axis_context)
        if conv is None and not is_dw and not several_devices and _dense_dot_wins(ctx, precision):
            dense = functools.partial(dense_fallback.dense_matmul, transpose=prim is bsmm_dx_p,
                                      precision=precision)
            return mlir.lower_fun(dense, multiple_results=False)(ctx, *operands)
        if conv is not None:
            kept = conv_keep if not is_dw else [0, 1] + [2 + _TABLE_FIELDS.index(name)
                                                         for name in ("dw_items", "dw_row_groups")]
            call = functools.partial(_conv_ffi_call, target.replace("bsmm", "bsconv"), block_size,
                                     precision, conv)
            if several_devices:
                call = sharding.partitioned_images(call, **_conv_pixels(target, conv))
        else:
            kept = keep
            call = functools.partial(_ffi_call, target, block_size, precision)
            if several_devices:
                call = sharding.partitioned(call, rows_in_output=not is_dw)
        subset_ctx = ctx.replace(avals_in=[ctx.avals_in[i] for i in kept])
        return mlir.lower_fun(call, multiple_results=False)(subset_ctx, *[operands[i] for i in kept])
    return rule


def register() -> None:
    for prim, (reference_fn, target, used_tables) in _OPS.items():
        mlir.register_lowering(prim, _reference_rule(reference_fn))
    if extension.cuda_available():
        register_cuda()
    else:
        for prim, (reference_fn, target, used_tables) in _OPS.items():
            mlir.register_lowering(prim, _announced(_reference_rule(reference_fn)), platform="cuda")


@functools.cache
def _announce_reference_on_cuda() -> None:
    warnings.warn(f"jbs: lowering for CUDA without jbs's CUDA kernels ({extension.load()[1]}): the "
                  "pure-JAX reference path, far slower, runs on the GPU (or goes into a jax.export "
                  "for CUDA) instead; jbs.backend_info() says more", RuntimeWarning, stacklevel=2)


def _announced(rule):
    """``rule``, warning once per process that CUDA gets the reference path, so that a GPU run
    or an export for CUDA does not take it unannounced."""
    def announced(ctx, *operands, **params):
        _announce_reference_on_cuda()
        return rule(ctx, *operands, **params)
    return announced


def register_cuda() -> None:
    """The CUDA rules (also used by tests that lower for CUDA on a machine without a GPU)."""
    sharding.require_device_assignment(*_OPS)
    for prim in _OPS:
        mlir.register_lowering(prim, _cuda_rule(prim), platform="cuda")


register()
