// Host interface of the block-sparse matmul kernels (no FFI types here; the FFI
// handlers in cuda/ffi translate and validate buffers into these structs).
//
// Layouts (row-major, "group" leading dim for vmap over stacked weights; a
// group stride of 0 broadcasts one operand over all groups):
//   in   (G, rows, in_cols)      x for fwd, dy for dx
//   w    (G, nnz, bs, bs)        packed nonzero weight blocks
//   out  (G, rows, out_cols)     y for fwd, dx for dx
//   offsets (out_cols/bs + 1) int32, items (nnz, 2) int32: output block column o
//   sums items j in [offsets[o], offsets[o+1]) of  in[:, items[j,1]-th block] @ W
//   with W = w[items[j,0]] (fwd) or w[items[j,0]]^T (dx, transpose_w).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "conv/row_gather.h"

namespace jbs {

// Output block columns per group of the TMA group kernel's wide groups (jbs/_src/tables.py
// wide_group_width): 192 / bs at bs 32 and 64, 128 / bs (the ordinary groups) otherwise.
inline constexpr int wide_group_width(int64_t bs) {
  return bs == 32 || bs == 64 ? static_cast<int>(192 / bs) : (bs >= 128 ? 1 : static_cast<int>(128 / bs));
}

// Arguments of the fwd / dx kernel (one kernel, transpose_w selects dx).
// The ints of a packing's items (tables.py: _packing): 2 per item, padded to 16 bytes.
inline int64_t packed_items_ints(int64_t nnz) { return (2 * nnz + 3) / 4 * 4; }

struct BsmmBlocksArgs {
  const void* in = nullptr;
  const void* w = nullptr;
  const int32_t* offsets = nullptr;
  const int32_t* items = nullptr;
  void* out = nullptr;
  int64_t rows = 0;      // N
  int64_t in_cols = 0;   // C (fwd) or K (dx); multiple of block_size
  int64_t out_cols = 0;  // K (fwd) or C (dx); multiple of block_size
  int64_t in_group_stride = 0;   // elements; 0 = broadcast
  int64_t w_group_stride = 0;    // elements; 0 = broadcast
  int64_t out_group_stride = 0;  // elements
  int64_t groups = 1;
  int block_size = 0;
  bool transpose_w = false;  // false: fwd (x @ W), true: dx (dy @ W^T)
  bool precise = false;      // fp32 only: 3xTF32 instead of 1xTF32
  // Small-N (rows <= kStreamMaxRows) path: chunks of output columns (see
  // bsmm_stream_kernel.cuh). chunks (num_chunks, 4), splits (n_split + 1, 2).
  const int32_t* chunks = nullptr;
  const int32_t* splits = nullptr;
  int64_t num_chunks = 0;
  int64_t n_split = 0;
  int64_t nnz = 0;  // items in the tables
  // Scratch result (fp32): groups * n_split int counters (padded to 4), then
  // groups * n_split * row_tile * block_size fp32 partials, then (when there is
  // room) the tile-major copy of `in` (stream_tile_major_offset). Large N: room for
  // the packed activation (matmul/packed_rows.cuh); a smaller scratch means
  // the kernels read the row-major one.
  void* scratch = nullptr;
  int64_t scratch_bytes = 0;
  // Column groups of the large-N path (see bsmm_group_kernel.cuh): group_items
  // is (union items, 1 + group_width); nullptr falls back to one column per CTA.
  const int32_t* group_offsets = nullptr;
  const int32_t* group_items = nullptr;
  int64_t num_groups = 0;
  int64_t num_group_items = 0;  // rows of group_items (the groups' union items)
  int group_width = 0;
  // The same groups wide_width columns each (192 columns at bs 32 and 64; tables.py
  // wide_group_width), for the TMA group kernel; at other block sizes the groups above.
  const int32_t* wide_offsets = nullptr;
  const int32_t* wide_items = nullptr;
  // Output block column p of wide group q: wide_columns[q * wide_width + p] (-1: none).
  const int32_t* wide_columns = nullptr;
  int64_t num_wide_groups = 0;
  int64_t num_wide_items = 0;
  int wide_width = 0;
  // The same groups of columns that share inputs (tables.py: a conv's paired_order, a
  // matmul's shared_input_order): output block column p of group q is
  // paired_columns[q * group_width + p] (-1: none).
  // nullptr: none given. Only the conv strip kernel reads them.
  const int32_t* paired_offsets = nullptr;
  const int32_t* paired_items = nullptr;
  const int32_t* paired_columns = nullptr;
  int64_t num_paired_items = 0;
  // Whole output columns packed into `packed_ctas` CTAs for the packed small-N walk (tables.py:
  // _packing; bsmm_stream_even_kernel.cuh: EvenPacking): the reordered items (packed_items_ints), their
  // offsets (out blocks + 1), the reordered columns (out blocks), the CTAs' first items
  // (packed_ctas + 1). nullptr: none.
  const int32_t* packed = nullptr;
  int packed_ctas = 0;
  // Convolution (implicit GEMM): `in` is an image batch read through `gather`;
  // rows are then the row space's pixels. The small-N path is not used.
  bool gathered = false;
  RowGather gather;
  int num_sms = 132;  // for sizing grid-stride launches
};

// Arguments of the dw kernel: dw[g, i] = x[g, :, c-block]^T @ dy[g, :, k-block]
// with (c-block, k-block) = items[i].
struct BsmmDwArgs {
  const void* x = nullptr;
  const void* dy = nullptr;
  const int32_t* items = nullptr;
  void* dw = nullptr;
  int64_t rows = 0;     // N (may be 0: dw is then all zeros)
  int64_t x_cols = 0;   // C
  int64_t dy_cols = 0;  // K
  int64_t nnz = 0;
  int64_t x_group_stride = 0;
  int64_t dy_group_stride = 0;
  int64_t dw_group_stride = 0;
  int64_t groups = 1;
  int block_size = 0;
  bool precise = false;
  int num_sms = 132;  // for sizing the small-N dw launch
  // Convolution: x is an image batch read through `gather`, rows are dy's.
  bool gathered = false;
  RowGather gather;
  // Rows cut into this many ranges, reduced through `partials` (fp32,
  // groups * row_splits * nnz * bs * bs), see bsmm_dw_kernel.cuh. Large-N path only.
  int row_splits = 1;
  float* partials = nullptr;
  // Convolution: tap 0's blocks in groups of 64 / bs within their block rows (-1 past a
  // row's end; jbs/_src/tables.py: dw_row_groups), for the row group dw kernel
  // (conv/bsconv_row_group_dw_kernel.cuh).
  const int32_t* row_groups = nullptr;
  int64_t num_row_groups = 0;
  int64_t row_group_size = 0;
  // The blocks in panel order (jbs/_src/tables.py: _dw_panels) for the small-N dw panel kernel
  // (matmul/bsmm_dw_panel_kernel.cuh): (nnz, 4) items and (num_panels + 1) offsets.
  const int32_t* panel_items = nullptr;
  const int32_t* panel_offsets = nullptr;
  int num_panels = 0;
  int panel_cols = 0;
};

// Output channels per panel of the dw panel kernel (jbs/_src/tables.py: DW_PANEL_CHANNELS).
inline constexpr int64_t kDwPanelChannels = 1024;

// T is float, __nv_bfloat16 or __half; explicit instantiations live in
// bsmm_<dtype>.cu. Both enqueue on `stream` only (no sync, no allocation) and
// return the launch error.
template <typename T>
cudaError_t launch_bsmm_blocks(const BsmmBlocksArgs& args, cudaStream_t stream);

template <typename T>
cudaError_t launch_bsmm_dw(const BsmmDwArgs& args, cudaStream_t stream);

// Upper bound on gridDim.x of the fwd/dx launch (output block columns times row
// tiles at the smallest row tile), for the handlers' size checks.
inline constexpr int kBsmmMinRowTile = 32;

// Small-N fwd/dx/dw path (see bsmm_stream_kernel.cuh): rows <= this. The
// scratch result of fwd/dx is sized by the same rule in jbs/_src/lowering.py.
inline constexpr int64_t kStreamMaxRowsHost = 64;
inline int64_t stream_row_tile_host(int64_t rows) { return rows <= 16 ? 16 : (rows <= 32 ? 32 : 64); }
// Bytes of scratch the fwd/dx small-N path needs (0 when it does not split).
inline int64_t stream_scratch_bytes(int64_t rows, int64_t groups, int64_t n_split, int64_t bs) {
  if (rows < 1 || rows > kStreamMaxRowsHost || n_split == 0) return 0;
  const int64_t counters = (groups * n_split + 3) / 4 * 4;
  return 4 * (counters + groups * n_split * stream_row_tile_host(rows) * bs);
}
// Where the small-N path's tile-major copy of the activation starts in the
// scratch result (matmul/tile_major.cuh): after the split counters and partials,
// 256-byte aligned. jbs/_src/lowering.py sizes the scratch by the same rule.
inline int64_t stream_tile_major_offset(int64_t rows, int64_t groups, int64_t n_split, int64_t bs) {
  return (stream_scratch_bytes(rows, groups, n_split, bs) + 255) / 256 * 256;
}

}  // namespace jbs
