// The transposed copy of every weight block, rounded to tf32, for the TMA-fed group
// kernel's fp32 forward (matmul/bsmm_group_tma_kernel.cuh): tf32 wgmmas read B
// K-major only, and TMA copies boxes as they are stored, so the blocks are turned
// once per call, into the scratch result (one pass over the weights: ~3% of that
// forward at 8192^3, density 1/2).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "common/ptx.cuh"  // to_tf32

namespace jbs {

// Block j of weight group g (w_group_stride elements apart) -> wt[g * nnz + j], transposed.
// 16-byte loads and stores (VEC: w 16-byte aligned and the stride a multiple of 4), and the
// next block's loads issued before this block's stores, so each thread keeps its loads in
// flight through the store phase. The scalar kernel with one block at a time moved 2.4 TB/s
// (benchmarks/NOTES.md, session 35).
template <int BS, bool VEC>
__global__ void __launch_bounds__(256)
    transpose_blocks_tf32_kernel(const float* w, int64_t w_group_stride, float* wt, int64_t groups, int64_t nnz) {
  constexpr int kVec = VEC ? 4 : 1;                 // floats per access
  constexpr int kPerThread = BS * BS / 256 / kVec;  // accesses per thread and block
  static_assert(kPerThread >= 1 && BS * BS % (256 * kVec) == 0, "whole accesses per thread");
  using Access = std::conditional_t<VEC, float4, float>;
  __shared__ float tile[BS][BS + 1];  // padded: the column reads spread over the banks
  const int64_t total = groups * nnz;
  auto source = [&](int64_t b) {
    return reinterpret_cast<const Access*>(w + (b / nnz) * w_group_stride + (b % nnz) * BS * BS);
  };
  Access next[kPerThread];
  auto load = [&](int64_t b) {
    if (b >= total) return;
    const Access* src = source(b);
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) next[k] = src[threadIdx.x + k * 256];
  };
  load(blockIdx.x);
  for (int64_t b = blockIdx.x; b < total; b += gridDim.x) {
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int q = (threadIdx.x + k * 256) * kVec;  // this access's first element of the block
      const float* v = reinterpret_cast<const float*>(&next[k]);
#pragma unroll
      for (int e = 0; e < kVec; ++e) tile[q / BS][q % BS + e] = v[e];
    }
    __syncthreads();
    load(b + gridDim.x);  // in flight while this block is stored
    Access* dst = reinterpret_cast<Access*>(wt + b * BS * BS);
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int q = (threadIdx.x + k * 256) * kVec;  // element (row q / BS, column q % BS) of the copy
      Access out;
      float* o = reinterpret_cast<float*>(&out);
#pragma unroll
      for (int e = 0; e < kVec; ++e) o[e] = __uint_as_float(to_tf32(tile[q % BS + e][q / BS]));
      dst[threadIdx.x + k * 256] = out;
    }
    __syncthreads();
  }
}

template <int BS>
cudaError_t launch_transpose_blocks_tf32(const float* w, int64_t w_group_stride, float* wt, int64_t groups,
                                         int64_t nnz, int num_sms, cudaStream_t stream) {
  const int64_t blocks = groups * nnz;
  const int64_t ctas = blocks < int64_t{8} * num_sms ? blocks : int64_t{8} * num_sms;
  if (ctas <= 0) return cudaSuccess;
  const bool vec = reinterpret_cast<uintptr_t>(w) % 16 == 0 && reinterpret_cast<uintptr_t>(wt) % 16 == 0 &&
                   w_group_stride % 4 == 0;
  const auto kernel = vec ? transpose_blocks_tf32_kernel<BS, true> : transpose_blocks_tf32_kernel<BS, false>;
  kernel<<<static_cast<unsigned>(ctas), 256, 0, stream>>>(w, w_group_stride, wt, groups, nnz);
  return cudaGetLastError();
}

}  // namespace jbs
