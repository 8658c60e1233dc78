// What the matmul and convolution handlers share once their operands are checked: the
// weight gradient's arguments, and the launches dispatched on the operands' dtype with a
// CUDA failure returned as the target's ffi::Error.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/dispatch.cuh"
#include "ffi/checks.h"
#include "ffi/ffi_util.h"
#include "ffi/xla_ffi.h"
#include "matmul/bsmm.h"

namespace jbs {

// x (G|1, x rows, C) and dy (G|1, rows, K) against the (G, nnz, bs, bs) result dw; the
// caller has checked the shapes. A convolution's x rows are pixels read through its gather,
// which it sets afterwards; a matmul's are dy's rows.
inline BsmmDwArgs dw_args(const ffi::AnyBuffer& x, const ffi::AnyBuffer& dy, const ffi::AnyBuffer& items,
                          ffi::AnyBuffer dw, ffi::AnyBuffer scratch, int64_t rows, int32_t block_size,
                          int32_t precision, int32_t row_splits) {
  const auto xd = x.dimensions();
  const auto yd = dy.dimensions();
  const auto wd = dw.dimensions();
  BsmmDwArgs a;
  a.x = x.untyped_data();
  a.dy = dy.untyped_data();
  a.items = static_cast<const int32_t*>(items.untyped_data());
  a.dw = dw.untyped_data();
  a.rows = rows;
  a.x_cols = xd[2];
  a.dy_cols = yd[2];
  a.nnz = wd[1];
  a.x_group_stride = xd[0] == 1 ? 0 : xd[1] * xd[2];
  a.dy_group_stride = yd[0] == 1 ? 0 : rows * yd[2];
  a.dw_group_stride = wd[1] * wd[2] * wd[3];
  a.groups = wd[0];
  a.block_size = block_size;
  a.precise = precision == 1;
  a.num_sms = num_sms();
  a.row_splits = row_splits;
  a.partials = row_splits > 1 ? static_cast<float*>(scratch.untyped_data()) : nullptr;
  return a;
}

inline ffi::Error launch_blocks(const char* target, ffi::DataType dt, const BsmmBlocksArgs& a, cudaStream_t stream) {
  const cudaError_t err = dispatch_dtype(*to_dtype(dt), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return launch_bsmm_blocks<T>(a, stream);
  });
  return err == cudaSuccess ? ffi::Error::Success() : cuda_failure(target, err);
}

inline ffi::Error launch_dw(const char* target, ffi::DataType dt, const BsmmDwArgs& a, cudaStream_t stream) {
  const cudaError_t err = dispatch_dtype(*to_dtype(dt), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return launch_bsmm_dw<T>(a, stream);
  });
  return err == cudaSuccess ? ffi::Error::Success() : cuda_failure(target, err);
}

}  // namespace jbs
