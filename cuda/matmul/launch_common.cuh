// What every launch path of the block-sparse matmul dispatch (matmul/bsmm_launch.cuh) shares:
// the environment switches, the operand structs' common fields, the group counts of
// broadcast operands, the small-N row tile as a constant, and the generic kernels that serve
// whatever no specialised path takes (bsmm_blocks_kernel for fwd / dx, bsmm_dw_kernel for dw).
#pragma once

#include <cstdlib>
#include <type_traits>

#include "common/dispatch.cuh"
#include "common/launch.cuh"
#include "common/tma.cuh"
#include "matmul/bsmm.h"
#include "matmul/bsmm_blocks_kernel.cuh"
#include "matmul/bsmm_dw_kernel.cuh"
#include "matmul/bsmm_group_kernel.cuh"
#include "matmul/dw_operands.cuh"
#include "matmul/sum_splits.cuh"

namespace jbs {

// A diagnostic switch in the environment: -1 unset (the dispatch rule decides), 0 off,
// 1 on. Read at every launch (not cached) so a test can switch paths within one process.
inline int env_switch(const char* name) {
  const char* e = std::getenv(name);
  return e == nullptr || e[0] == 0 ? -1 : (e[0] == '0' ? 0 : 1);
}

// The matrices an operand holds: one where a stride of 0 broadcasts it to every group.
inline int64_t input_groups(const BsmmBlocksArgs& a) { return a.in_group_stride == 0 ? 1 : a.groups; }
inline int64_t weight_groups(const BsmmBlocksArgs& a) { return a.w_group_stride == 0 ? 1 : a.groups; }

// The tensor map of (groups of) a row-major matrix of `elem_bytes`-byte values, `cols` x
// `rows`, group_stride elements apart, read in boxes of box_cols x box_rows with the given
// swizzle. The map counts 16-bit units (the copies move bytes), so fp32 works too.
// *group_step: 1, or 0 where the matrix is one for every group (group_stride 0, or a
// single group). False where the driver refuses it.
inline bool encode_row_tile_map(CUtensorMap* map, const void* base, int64_t cols, int64_t rows, int64_t group_stride,
                                int64_t groups, int elem_bytes, int box_cols, int box_rows,
                                CUtensorMapSwizzle swizzle, int* group_step) {
  const bool broadcast = group_stride == 0 || groups == 1;
  const uint64_t units = static_cast<uint64_t>(elem_bytes) / 2;
  const uint64_t row_bytes = static_cast<uint64_t>(cols) * elem_bytes;
  const uint64_t group_bytes = broadcast ? row_bytes * static_cast<uint64_t>(rows)
                                         : static_cast<uint64_t>(group_stride) * elem_bytes;
  const uint64_t matrix_groups = broadcast ? 1 : static_cast<uint64_t>(groups);
  const uint64_t dims[5] = {static_cast<uint64_t>(cols) * units, static_cast<uint64_t>(rows), matrix_groups, 1, 1};
  const uint64_t strides[4] = {row_bytes, group_bytes, group_bytes * matrix_groups, group_bytes * matrix_groups};
  const uint32_t box[5] = {static_cast<uint32_t>(box_cols * units), static_cast<uint32_t>(box_rows), 1, 1, 1};
  *group_step = broadcast ? 0 : 1;
  return encode_tensor_map_16bit(map, base, dims, strides, box, swizzle);
}

// Row tile for the fwd/dx kernel: the smallest of 32/64/128 covering N, so
// small N (decode-like, memory bound) does not waste MMA work and large N gets
// the most reuse of each weight block. fp32 with 64x64 blocks is capped at 64
// rows: 128 rows would need > 99 KiB of shared memory for two stages, more
// than sm_86/sm_89 allow.
template <typename T, int BS>
int pick_row_tile(int64_t rows) {
  if (rows <= 32) return 32;
  if (rows <= 64 || (sizeof(T) == 4 && BS == 64)) return 64;
  return 128;
}

inline void fill_operands(FwdDxOperands& p, const BsmmBlocksArgs& a) {
  p.in = a.in;
  p.w = a.w;
  p.out = a.out;
  p.rows = a.rows;
  p.in_cols = a.in_cols;
  p.out_cols = a.out_cols;
  p.in_group_stride = a.in_group_stride;
  p.w_group_stride = a.w_group_stride;
  p.out_group_stride = a.out_group_stride;
  p.gather = a.gather;
}

// The column-group kernels' common fields (GroupParams: large-N group and conv kernels).
inline GroupParams group_params(const BsmmBlocksArgs& a) {
  GroupParams p;
  fill_operands(p, a);
  p.group_offsets = a.group_offsets;
  p.group_items = a.group_items;
  p.group_columns = nullptr;  // in order
  p.num_groups = static_cast<int>(a.num_groups);
  p.packed_rows = 0;
  return p;
}

// The operands the small-N stream kernels share (StreamParams, StreamEvenParams):
// the activation as row-major tiles of bs columns (in_tile_stride, in_ld).
template <typename StreamOperands>
void fill_stream_operands(StreamOperands& p, const BsmmBlocksArgs& a) {
  p.in = a.in;
  p.w = a.w;
  p.items = a.items;
  p.out = a.out;
  p.rows = a.rows;
  p.in_tile_stride = a.block_size;
  p.in_ld = a.in_cols;
  p.out_cols = a.out_cols;
  p.in_group_stride = a.in_group_stride;
  p.w_group_stride = a.w_group_stride;
  p.out_group_stride = a.out_group_stride;
}

// The operands the small-N dw kernels share (matmul/dw_operands.cuh); each takes its own
// block table.
inline void fill_dw_operands(DwOperands& p, const BsmmDwArgs& a) {
  p.x = a.x;
  p.dy = a.dy;
  p.dw = a.dw;
  p.rows = a.rows;
  p.x_cols = a.x_cols;
  p.dy_cols = a.dy_cols;
  p.nnz = a.nnz;
  p.x_group_stride = a.x_group_stride;
  p.dy_group_stride = a.dy_group_stride;
  p.dw_group_stride = a.dw_group_stride;
}

// Calls f with the small-N row tile of `rows` (stream_row_tile_host: 16, 32 or 64)
// as a compile-time constant.
template <typename F>
decltype(auto) dispatch_stream_row_tile(int64_t rows, F&& f) {
  switch (stream_row_tile_host(rows)) {
    case 16:
      return f(std::integral_constant<int, 16>{});
    case 32:
      return f(std::integral_constant<int, 32>{});
    default:
      return f(std::integral_constant<int, 64>{});
  }
}

template <typename T, int BS, bool TRANS, int TN, bool PRECISE, bool GATHER = false>
cudaError_t launch_blocks_variant(const BsmmBlocksArgs& a, cudaStream_t stream) {
  using Cfg = BlocksConfig<T, BS, TRANS, TN>;
  BlocksParams p;
  fill_operands(p, a);
  p.offsets = a.offsets;
  p.items = a.items;
  const int64_t out_blocks = a.out_cols / BS;
  const int64_t row_tiles = (a.rows + TN - 1) / TN;
  p.out_blocks = static_cast<int>(out_blocks);
  // The handlers guarantee out_blocks * row_tiles < 2^31 and groups <= 65535.
  const dim3 grid(static_cast<unsigned>(out_blocks * row_tiles), static_cast<unsigned>(a.groups));
  return launch_kernel(bsmm_blocks_kernel<T, BS, TRANS, TN, PRECISE, GATHER>, grid,
                       dim3(Cfg::kThreads), Cfg::kSmemBytes, stream, p);
}

inline void fill_dw_params(DwParams& p, const BsmmDwArgs& a) {
  p.x = a.x;
  p.dy = a.dy;
  p.items = a.items;
  p.dw = a.dw;
  p.rows = a.rows;
  p.x_cols = a.x_cols;
  p.dy_cols = a.dy_cols;
  p.x_group_stride = a.x_group_stride;
  p.dy_group_stride = a.dy_group_stride;
  p.dw_group_stride = a.dw_group_stride;
  p.gather = a.gather;
  p.row_splits = a.partials != nullptr && a.row_splits > 1 ? a.row_splits : 1;
  p.partials = a.partials;
}

// After a dw kernel that wrote row-split partials: dw = their sum in split order.
template <typename T, int BS>
cudaError_t sum_dw_splits(const BsmmDwArgs& a, const DwParams& p, cudaStream_t stream) {
  return launch_sum_splits<T>(p.partials, static_cast<T*>(a.dw), a.groups, a.nnz * BS * BS, p.row_splits, stream);
}

template <typename T, int BS, bool PRECISE, bool GATHER = false>
cudaError_t launch_dw_variant(const BsmmDwArgs& a, cudaStream_t stream) {
  using Cfg = DwConfig<T, BS>;
  DwParams p;
  fill_dw_params(p, a);
  // The handlers guarantee nnz < 2^31, groups <= 65535 and row_splits <= 65535.
  const dim3 grid(static_cast<unsigned>(a.nnz), static_cast<unsigned>(a.groups),
                  static_cast<unsigned>(p.row_splits));
  cudaError_t err = launch_kernel(bsmm_dw_kernel<T, BS, PRECISE, GATHER>, grid, dim3(Cfg::kThreads),
                                  Cfg::kSmemBytes, stream, p);
  if (err != cudaSuccess || p.row_splits == 1) return err;
  return sum_dw_splits<T, BS>(a, p, stream);
}

}  // namespace jbs
