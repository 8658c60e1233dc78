// A tile-major copy of a small-N activation for the memory-bound stream kernel
// (matmul/bsmm_stream_kernel.cuh): input block cb's rows x BS tile becomes one
// contiguous run instead of `rows` rows of BS * sizeof(T) bytes, in_cols apart.
//
// Why: the stream kernel loads one such tile from L2 for every weight block it
// streams. Row-major, a bf16 tile at BS = 8 is N rows of 16 bytes: half of every
// 32-byte sector the L2 delivers is thrown away. Tile-major, the tile is whole
// sectors and lines. Measured (benchmarks/NOTES.md, session 8, N = 32): bs 8
// 1.33-1.70x faster, copy included; at bs 16 and 32, whose rows are whole
// sectors, nothing gained and the copy's ~2 us lost, so the launcher uses it for
// sub-sector rows only.
//
// Layout, per input group g: tiled[g][cb][r][e] = in[g][r][cb * BS + e], r < tile_rows
// (>= rows: the rows past `rows` are zeros, so that every tile is whole boxes of a TMA
// copy; bsmm_stream_even_kernel.cuh's SWIZZLED walk).
//
// TF32 (fp32 only): the copy holds every value rounded to tf32 (cvt.rna), as the MMAs that
// read it would round it, so that they take its bits as they are: ~4 instructions a value
// that the walk, issue-bound at fp32, no longer runs (benchmarks/NOTES.md, session 62).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/ptx.cuh"

namespace jbs {

// One thread per 16-byte unit, in the order of the source (coalesced reads;
// each tile row of the output is one or more whole units).
template <typename T, bool TF32>
__global__ void __launch_bounds__(256) tile_major_kernel(const T* __restrict__ in, T* __restrict__ out,
                                                         int64_t groups, int64_t rows, int64_t cols, int bs,
                                                         int64_t tile_rows) {
  static_assert(!TF32 || sizeof(T) == 4, "tf32 rounding of fp32 values");
  // A walk launched early behind this copy (launch_small_n.cuh: launch_stream_even_swizzled) may
  // become resident now and set up while the copy runs; it waits for the copy to complete
  // before reading it.
  griddep_launch_dependents();
  constexpr int kE = 16 / static_cast<int>(sizeof(T));
  const int64_t units_per_row = cols / kE;
  const int64_t units = groups * rows * units_per_row;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t u = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; u < units; u += step) {
    const int64_t c = (u % units_per_row) * kE;
    const int64_t gr = u / units_per_row;  // g * rows + r
    const int64_t r = gr % rows;
    const int64_t g = gr / rows;
    const int64_t cb = c / bs;
    const int64_t dst = ((g * (cols / bs) + cb) * tile_rows + r) * bs + (c - cb * bs);
    uint4 v = __ldg(reinterpret_cast<const uint4*>(in) + u);
    if constexpr (TF32) {
      v = make_uint4(to_tf32(__uint_as_float(v.x)), to_tf32(__uint_as_float(v.y)), to_tf32(__uint_as_float(v.z)),
                     to_tf32(__uint_as_float(v.w)));
    }
    *reinterpret_cast<uint4*>(out + dst) = v;
  }
  // The padding rows, (tile_rows - rows) * bs elements per tile.
  const int64_t pad_units = (tile_rows - rows) * bs / kE;
  const int64_t tiles = groups * (cols / bs);
  for (int64_t u = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; u < tiles * pad_units; u += step) {
    const int64_t tile = u / pad_units;
    const int64_t dst = (tile * tile_rows + rows) * bs + (u - tile * pad_units) * kE;
    *reinterpret_cast<uint4*>(out + dst) = make_uint4(0u, 0u, 0u, 0u);
  }
}

// Bytes of the tile-major copy.
inline int64_t tile_major_bytes_host(int64_t groups, int64_t rows, int64_t cols, int64_t elem_bytes) {
  return groups * rows * cols * elem_bytes;
}

// tile_rows: rows of each tile (>= rows; 0: rows). round_tf32 (fp32): the values rounded to tf32.
template <typename T>
cudaError_t launch_tile_major(const T* in, T* out, int64_t groups, int64_t rows, int64_t cols, int bs,
                              int num_sms, cudaStream_t stream, int64_t tile_rows = 0, bool round_tf32 = false) {
  if (tile_rows < rows) tile_rows = rows;
  const int64_t units = groups * tile_rows * cols / (16 / static_cast<int64_t>(sizeof(T)));
  const int64_t blocks = (units + 255) / 256;
  const int64_t cap = static_cast<int64_t>(num_sms) * 8;  // grid-stride: no 2^31 limit
  const unsigned grid = static_cast<unsigned>(blocks < cap ? blocks : cap);
  if constexpr (sizeof(T) == 4) {
    if (round_tf32) {
      tile_major_kernel<T, true><<<grid, 256, 0, stream>>>(in, out, groups, rows, cols, bs, tile_rows);
      return cudaGetLastError();
    }
  }
  tile_major_kernel<T, false><<<grid, 256, 0, stream>>>(in, out, groups, rows, cols, bs, tile_rows);
  return cudaGetLastError();
}

}  // namespace jbs
