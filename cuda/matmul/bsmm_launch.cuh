// Definitions of launch_bsmm_blocks<T> / launch_bsmm_dw<T>: pick the compile-
// time variant (block size, transpose, row tile, precision) and launch it.
// Included only by the per-dtype bsmm_<dtype>.cu files, which instantiate it
// for one T each so the kernels of the three dtypes compile in parallel.
#pragma once

#include <type_traits>

#include "common/dispatch.cuh"
#include "common/launch.cuh"
#include "matmul/bsmm.h"
#include "matmul/bsmm_blocks_kernel.cuh"
#include "matmul/bsmm_dw_kernel.cuh"

namespace jbs {

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

template <typename T, int BS, bool TRANS, int TN, bool PRECISE>
cudaError_t launch_blocks_variant(const BsmmBlocksArgs& a, cudaStream_t stream) {
  using Cfg = BlocksConfig<T, BS, TRANS, TN>;
  BlocksParams p;
  p.in = a.in;
  p.w = a.w;
  p.offsets = a.offsets;
  p.items = a.items;
  p.out = a.out;
  p.rows = a.rows;
  p.in_cols = a.in_cols;
  p.out_cols = a.out_cols;
  p.in_group_stride = a.in_group_stride;
  p.w_group_stride = a.w_group_stride;
  p.out_group_stride = a.out_group_stride;
  const int64_t out_blocks = a.out_cols / BS;
  const int64_t row_tiles = (a.rows + TN - 1) / TN;
  p.out_blocks = static_cast<int>(out_blocks);
  // The handlers guarantee out_blocks * row_tiles < 2^31 and groups <= 65535.
  const dim3 grid(static_cast<unsigned>(out_blocks * row_tiles), static_cast<unsigned>(a.groups));
  return launch_kernel(bsmm_blocks_kernel<T, BS, TRANS, TN, PRECISE>, grid, dim3(Cfg::kThreads),
                       Cfg::kSmemBytes, stream, p);
}

template <typename T>
cudaError_t launch_bsmm_blocks(const BsmmBlocksArgs& a, cudaStream_t stream) {
  if (a.rows <= 0 || a.out_cols <= 0 || a.groups <= 0) return cudaSuccess;
  return dispatch_block_size(a.block_size, [&](auto bs_c) {
    constexpr int BS = decltype(bs_c)::value;
    return dispatch_bool(a.transpose_w, [&](auto tr_c) {
      constexpr bool TRANS = decltype(tr_c)::value;
      // Only fp32 has a precise variant; bf16/f16 products are exact in fp32.
      return dispatch_bool(a.precise && std::is_same_v<T, float>, [&](auto pr_c) {
        constexpr bool PRECISE = decltype(pr_c)::value && std::is_same_v<T, float>;
        switch (pick_row_tile<T, BS>(a.rows)) {
          case 32:
            return launch_blocks_variant<T, BS, TRANS, 32, PRECISE>(a, stream);
          case 64:
            return launch_blocks_variant<T, BS, TRANS, 64, PRECISE>(a, stream);
          default:
            if constexpr (sizeof(T) == 4 && BS == 64) {
              return launch_blocks_variant<T, BS, TRANS, 64, PRECISE>(a, stream);
            } else {
              return launch_blocks_variant<T, BS, TRANS, 128, PRECISE>(a, stream);
            }
        }
      });
    });
  });
}

template <typename T, int BS, bool PRECISE>
cudaError_t launch_dw_variant(const BsmmDwArgs& a, cudaStream_t stream) {
  using Cfg = DwConfig<T, BS>;
  DwParams p;
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
  // The handlers guarantee nnz < 2^31 and groups <= 65535.
  const dim3 grid(static_cast<unsigned>(a.nnz), static_cast<unsigned>(a.groups));
  return launch_kernel(bsmm_dw_kernel<T, BS, PRECISE>, grid, dim3(Cfg::kThreads), Cfg::kSmemBytes,
                       stream, p);
}

template <typename T>
cudaError_t launch_bsmm_dw(const BsmmDwArgs& a, cudaStream_t stream) {
  // rows == 0 still launches: dw must be written (with zeros).
  if (a.nnz <= 0 || a.groups <= 0) return cudaSuccess;
  return dispatch_block_size(a.block_size, [&](auto bs_c) {
    constexpr int BS = decltype(bs_c)::value;
    return dispatch_bool(a.precise && std::is_same_v<T, float>, [&](auto pr_c) {
      constexpr bool PRECISE = decltype(pr_c)::value && std::is_same_v<T, float>;
      return launch_dw_variant<T, BS, PRECISE>(a, stream);
    });
  });
}

}  // namespace jbs
