// The operands every small-N weight-gradient kernel takes (bsmm_stream_kernel.cuh's
// DwStreamParams, bsmm_dw_panel_kernel.cuh's DwPanelParams): dw[i] = x[:, c_i]^T @ dy[:, k_i]
// for the nonzero blocks i of a layout, each kernel with its own table of the blocks.
#pragma once

#include <cstdint>

namespace jbs {

struct DwOperands {
  const void* x;   // (G | 1, N, C) row-major
  const void* dy;  // (G | 1, N, K) row-major
  void* dw;        // (G, nnz, bs, bs)
  int64_t rows;    // N, 1..the kernel's row tile
  int64_t x_cols;  // C
  int64_t dy_cols;  // K
  int64_t nnz;
  int64_t x_group_stride;  // 0 broadcasts x over the weight groups
  int64_t dy_group_stride;
  int64_t dw_group_stride;
};

}  // namespace jbs
