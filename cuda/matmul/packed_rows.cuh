// Activations repacked so that a large-N CTA's tile for one input block is one
// contiguous run of memory, already in the register order of the tensor-core A
// operand: 16-bit types, and fp32 as tf32 (rounded here, once per element).
//
// Why: in the row-major activation (G, N, C) the 256 x BS tile of input block
// cb is 256 rows of 2 * BS bytes, 2 * C bytes apart (at BS = 16 each row is a
// lone 32-byte sector). Packed, the tile is 256 * BS * 2 contiguous bytes:
// whole lines, a few fully coalesced 16-byte copies per thread, and one
// conflict-free shared load per A fragment instead of padded rows and ldmatrix.
// Measured (benchmarks/NOTES.md, session 6): 1.35x / 1.32x / 1.12x faster at
// bs 16 / 32 / 64, copy included -- but only once the kernel's own loop was
// lean; the row shape was not what bounded it before.
//
// Layout, per input group g (rows padded with zeros to a multiple of
// kPackRowTile, R of them), with the k-step K = 16 (16-bit) or 8 (tf32):
//   packed[g][cb][r / 16][k / K][frag]   for element (r, cb * BS + k)
// where frag (512 bytes: kFragmentElems<T> elements) is one 16 x K tile in
// mma.sync m16n8kK A order: lane = (r % 8) * 4 + (k % (K/2)) / E2 holds 16
// consecutive bytes, register j = ((k % K) / (K/2)) * 2 + (r % 16) / 8, element
// k % E2 of it (E2 = 2 values per 16-bit register, 1 for tf32). One 16-byte
// load per lane gives a warp the four A registers of a 16-row k-step (the
// wgmma RS A operand has the same per-warp layout). Rows r0 .. r0 + 16t of
// block cb start at ((g * Cb + cb) * R + r0) * BS and are contiguous.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/dtype.cuh"
#include "common/ptx.cuh"  // to_tf32

namespace jbs {

inline constexpr int64_t kPackRowTile = 256;  // the wgmma group kernel's row tile
template <typename T>
inline constexpr int kFragmentElems = 512 / static_cast<int>(sizeof(T));  // 16 x 16 (16-bit), 16 x 8 (tf32)

inline int64_t packed_rows_host(int64_t rows) { return (rows + kPackRowTile - 1) / kPackRowTile * kPackRowTile; }

// Bytes of the packed copy of a (groups, rows, cols) activation.
inline int64_t packed_bytes_host(int64_t groups, int64_t rows, int64_t cols, int64_t elem_bytes) {
  return groups * packed_rows_host(rows) * cols * elem_bytes;
}

// One thread per 16-byte unit of the packed output: reads its four registers'
// worth (4-byte pairs or tf32 values; whole sectors across a warp) and writes
// 16 bytes (512 bytes contiguous per warp). Rows past `rows` are written as zeros.
template <typename T, int BS>
__global__ void __launch_bounds__(256) pack_rows_kernel(const T* __restrict__ in, T* __restrict__ out,
                                                        int64_t groups, int64_t rows, int64_t cols,
                                                        int64_t packed_rows) {
  constexpr int kE = 16 / static_cast<int>(sizeof(T));  // elements per 16-byte unit
  constexpr int kK = kIs16Bit<T> ? 16 : 8;              // the k-step of one fragment
  const int64_t units = groups * packed_rows * cols / kE;
  const int64_t col_blocks = cols / BS;
  for (int64_t u = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; u < units;
       u += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int lane = static_cast<int>(u & 31);
    int64_t rest = u >> 5;                        // fragment index
    const int ks = static_cast<int>(rest % (BS / kK));
    rest /= BS / kK;
    const int64_t r16 = rest % (packed_rows / 16);
    rest /= packed_rows / 16;
    const int64_t cb = rest % col_blocks;
    const int64_t g = rest / col_blocks;
    // The lane's registers hold rows r_lo (+ 8) and columns c_lo (+ K/2), a pair each if 16-bit.
    const int r_lo = lane >> 2;
    const int c_lo = (lane & 3) * (kE / 4);
    const int64_t col = cb * BS + ks * kK + c_lo;
    uint32_t v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t row = r16 * 16 + r_lo + (j & 1) * 8;
      const int64_t c = col + (j >> 1) * (kK / 2);
      if (row >= rows) {
        v[j] = 0u;
      } else if constexpr (kIs16Bit<T>) {
        v[j] = *reinterpret_cast<const uint32_t*>(in + (g * rows + row) * cols + c);
      } else {
        v[j] = to_tf32(in[(g * rows + row) * cols + c]);
      }
    }
    *reinterpret_cast<uint4*>(out + u * kE) = make_uint4(v[0], v[1], v[2], v[3]);
  }
}

template <typename T, int BS>
cudaError_t launch_pack_rows(const T* in, T* out, int64_t groups, int64_t rows, int64_t cols,
                             int num_sms, cudaStream_t stream) {
  const int64_t units = groups * packed_rows_host(rows) * cols / (16 / static_cast<int64_t>(sizeof(T)));
  const int64_t blocks = (units + 255) / 256;
  const int64_t cap = static_cast<int64_t>(num_sms) * 16;  // grid-stride: a few waves, no 2^31 limit
  pack_rows_kernel<T, BS><<<static_cast<unsigned>(blocks < cap ? blocks : cap), 256, 0, stream>>>(
      in, out, groups, rows, cols, packed_rows_host(rows));
  return cudaGetLastError();
}

}  // namespace jbs
