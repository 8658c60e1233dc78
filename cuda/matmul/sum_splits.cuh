// The fixed-order sum of split partials: out[g, e] = the sum over splits s of
// partials[g, s, e], e over `elems` values of group g, converted to T. Kernels that cut a
// reduction over CTAs (the weight gradients' row splits, the TMA and wgmma group kernels'
// item slices at mid N) write fp32 partials and launch this after them on the same stream.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/dtype.cuh"

namespace jbs {

// `ways` threads share an element: way w sums the splits w, w + ways, ... in that order,
// then way 0 adds the ways' sums in order. A fixed order for a given number of splits, so
// the result is bitwise deterministic; with ways 1 a thread sums its element's splits in
// turn. The launch shares elements only among many splits: with the panel dw kernel's
// 44-132, one thread per element waited on its loads one after another (4-6 us, H100);
// with the conv dw kernels' few, sharing only added threads and barriers (their dw
// 1.03-1.11x slower; benchmarks/NOTES.md, session 20).
constexpr int kSumSplitsThreads = 256;

inline int sum_splits_ways(int splits) { return splits > 16 ? 8 : 1; }

template <typename T>
__global__ void __launch_bounds__(kSumSplitsThreads) sum_splits_kernel(const float* partials, T* out,
                                                                       int64_t groups, int64_t elems,
                                                                       int splits, int ways) {
  __shared__ float way_sums[kSumSplitsThreads];
  const int per_cta = kSumSplitsThreads / ways;  // elements of a CTA
  const int local = threadIdx.x % per_cta, way = threadIdx.x / per_cta;
  const int64_t pieces = (elems + per_cta - 1) / per_cta;
  for (int64_t piece = blockIdx.x; piece < groups * pieces; piece += gridDim.x) {
    const int64_t g = piece / pieces;
    const int64_t e = (piece - g * pieces) * per_cta + local;
    float sum = 0.f;
    if (e < elems) {
      const float* src = partials + g * splits * elems + e;
#pragma unroll 4
      for (int s = way; s < splits; s += ways) sum += src[s * elems];
    }
    if (ways == 1) {
      if (e < elems) out[g * elems + e] = from_float<T>(sum);
      continue;
    }
    way_sums[threadIdx.x] = sum;
    __syncthreads();
    if (way == 0 && e < elems) {
      float total = 0.f;
      for (int w = 0; w < ways; ++w) total += way_sums[w * per_cta + local];
      out[g * elems + e] = from_float<T>(total);
    }
    __syncthreads();
  }
}

// The same with 4 values per thread, read as float4s (elems a multiple of 4, at most
// kSumSplitsVecMost splits): the group kernels' partials at mid N are whole output matrices
// (1-8 M values), which sum_splits_kernel, one scalar load per split and thread, read at
// ~0.9 TB/s (12 us for two 128 x 8192 partials, H200; benchmarks/NOTES.md, session 39). A
// thread issues all its splits' loads before the first add (the adds keep the split order,
// so the bits are those of a running sum): small sums, such as the conv dw kernels' few
// row splits of a 0.2-2 M-value dw, are a latency round trip or two of a few warps per
// scheduler, not bandwidth (benchmarks/NOTES.md, session 50). 128 threads a CTA spread
// those few warps over more SMs.
constexpr int kSumSplitsVecMost = 16;
constexpr int kSumSplitsVecThreads = 128;

template <typename T>
__global__ void __launch_bounds__(kSumSplitsVecThreads) sum_splits_vec4_kernel(const float4* partials, T* out,
                                                                               int64_t groups, int64_t quads,
                                                                               int splits) {
  for (int64_t i = blockIdx.x * int64_t{kSumSplitsVecThreads} + threadIdx.x; i < groups * quads;
       i += int64_t{gridDim.x} * kSumSplitsVecThreads) {
    const int64_t g = i / quads, q = i - g * quads;
    const float4* src = partials + g * splits * quads + q;
    float4 split_values[kSumSplitsVecMost];
#pragma unroll
    for (int s = 0; s < kSumSplitsVecMost; ++s) {
      if (s < splits) split_values[s] = __ldg(src + s * quads);
    }
    float4 sum = split_values[0];
#pragma unroll
    for (int s = 1; s < kSumSplitsVecMost; ++s) {
      if (s < splits) {
        sum.x += split_values[s].x;
        sum.y += split_values[s].y;
        sum.z += split_values[s].z;
        sum.w += split_values[s].w;
      }
    }
    alignas(4 * sizeof(T)) T packed[4] = {from_float<T>(sum.x), from_float<T>(sum.y), from_float<T>(sum.z),
                                          from_float<T>(sum.w)};
    if constexpr (sizeof(T) == 4) {
      *reinterpret_cast<float4*>(out + 4 * i) = *reinterpret_cast<const float4*>(packed);
    } else {
      *reinterpret_cast<uint2*>(out + 4 * i) = *reinterpret_cast<const uint2*>(packed);
    }
  }
}

// Launches the sum over `groups` groups of `elems` values each, `splits` partials apiece.
template <typename T>
cudaError_t launch_sum_splits(const float* partials, T* out, int64_t groups, int64_t elems, int splits,
                              cudaStream_t stream) {
  if (elems % 4 == 0 && splits <= kSumSplitsVecMost && reinterpret_cast<uintptr_t>(partials) % 16 == 0 &&
      reinterpret_cast<uintptr_t>(out) % (4 * sizeof(T)) == 0) {
    const int64_t quads = elems / 4, ctas = (groups * quads + kSumSplitsVecThreads - 1) / kSumSplitsVecThreads;
    sum_splits_vec4_kernel<T><<<static_cast<unsigned>(ctas < 65535 ? ctas : 65535), kSumSplitsVecThreads, 0, stream>>>(
        reinterpret_cast<const float4*>(partials), out, groups, quads, splits);
    return cudaGetLastError();
  }
  const int ways = sum_splits_ways(splits);
  const int64_t per_cta = kSumSplitsThreads / ways;
  const int64_t pieces = groups * ((elems + per_cta - 1) / per_cta);
  sum_splits_kernel<T><<<static_cast<unsigned>(pieces < 65535 ? pieces : 65535), kSumSplitsThreads, 0, stream>>>(
      partials, out, groups, elems, splits, ways);
  return cudaGetLastError();
}

}  // namespace jbs
