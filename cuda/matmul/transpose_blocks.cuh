// The transposed copy of every weight block, rounded to tf32, for the TMA-fed group
// kernel's fp32 forward (matmul/bsmm_group_tma_kernel.cuh): tf32 wgmmas read B
// K-major only, and TMA copies boxes as they are stored, so the blocks are turned
// once per call, into the scratch result (one pass over the weights: ~3% of that
// forward at 8192^3, density 1/2).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/ptx.cuh"  // to_tf32

namespace jbs {

// Block j of weight group g (w_group_stride elements apart) -> wt[g * nnz + j], transposed.
template <int BS>
__global__ void __launch_bounds__(256)
    transpose_blocks_tf32_kernel(const float* w, int64_t w_group_stride, float* wt, int64_t groups, int64_t nnz) {
  __shared__ float tile[BS][BS + 1];  // padded: the column reads hit BS distinct banks
  for (int64_t b = blockIdx.x; b < groups * nnz; b += gridDim.x) {
    const float* src = w + (b / nnz) * w_group_stride + (b % nnz) * BS * BS;
    float* dst = wt + b * BS * BS;
    for (int i = threadIdx.x; i < BS * BS; i += blockDim.x) tile[i / BS][i % BS] = src[i];
    __syncthreads();
    for (int i = threadIdx.x; i < BS * BS; i += blockDim.x) dst[i] = __uint_as_float(to_tf32(tile[i % BS][i / BS]));
    __syncthreads();
  }
}

template <int BS>
cudaError_t launch_transpose_blocks_tf32(const float* w, int64_t w_group_stride, float* wt, int64_t groups,
                                         int64_t nnz, int num_sms, cudaStream_t stream) {
  const int64_t blocks = groups * nnz;
  const int64_t ctas = blocks < int64_t{8} * num_sms ? blocks : int64_t{8} * num_sms;
  if (ctas <= 0) return cudaSuccess;
  transpose_blocks_tf32_kernel<BS><<<static_cast<unsigned>(ctas), 256, 0, stream>>>(w, w_group_stride, wt, groups, nnz);
  return cudaGetLastError();
}

}  // namespace jbs
