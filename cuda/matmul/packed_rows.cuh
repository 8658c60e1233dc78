// Activations repacked so that a large-N CTA's tile for one input block is one
// contiguous run of memory, already in the register order of the tensor-core A
// operand (16-bit types only).
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
// kPackRowTile, R of them):
//   packed[g][cb][r / 16][k / 16][frag]   for element (r, cb * BS + k)
// where frag (kFragmentElems = 256 elements, 512 bytes) is one 16 x 16 tile in
// mma.sync m16n8k16 A order: lane = (r % 8) * 4 + (k % 8) / 2 holds 8 consecutive elements,
// register j = ((k % 16) / 8) * 2 + (r % 16) / 8, element k % 2. One 16-byte
// load per lane gives a warp the four A registers of a 16-row k-step (the
// wgmma RS A operand has the same per-warp layout). Rows r0 .. r0 + 16t of
// block cb start at ((g * Cb + cb) * R + r0) * BS and are contiguous.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace jbs {

inline constexpr int64_t kPackRowTile = 256;  // the wgmma group kernel's row tile
inline constexpr int kFragmentElems = 16 * 16;

inline int64_t packed_rows_host(int64_t rows) { return (rows + kPackRowTile - 1) / kPackRowTile * kPackRowTile; }

// Bytes of the packed copy of a (groups, rows, cols) 16-bit activation.
inline int64_t packed_bytes_host(int64_t groups, int64_t rows, int64_t cols) {
  return groups * packed_rows_host(rows) * cols * 2;
}

// One thread per 16-byte unit of the packed output: reads its four 4-byte
// pairs (whole 32-byte sectors across a warp) and writes 16 bytes (512 bytes
// contiguous per warp). Rows past `rows` are written as zeros.
template <typename T, int BS>
__global__ void __launch_bounds__(256) pack_rows_kernel(const T* __restrict__ in, T* __restrict__ out,
                                                        int64_t groups, int64_t rows, int64_t cols,
                                                        int64_t packed_rows) {
  const int64_t units = groups * packed_rows * cols / 8;
  const int64_t col_blocks = cols / BS;
  for (int64_t u = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; u < units;
       u += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int lane = static_cast<int>(u & 31);
    int64_t rest = u >> 5;                        // fragment index
    const int ks = static_cast<int>(rest % (BS / 16));
    rest /= BS / 16;
    const int64_t r16 = rest % (packed_rows / 16);
    rest /= packed_rows / 16;
    const int64_t cb = rest % col_blocks;
    const int64_t g = rest / col_blocks;
    // The lane's registers hold rows r_lo (+ 8) and columns c_lo, c_lo + 1 (+ 8).
    const int r_lo = lane >> 2;
    const int c_lo = (lane & 3) * 2;
    const int64_t col = cb * BS + ks * 16 + c_lo;
    uint32_t v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t row = r16 * 16 + r_lo + (j & 1) * 8;
      const int64_t c = col + (j >> 1) * 8;
      v[j] = row < rows ? *reinterpret_cast<const uint32_t*>(in + (g * rows + row) * cols + c) : 0u;
    }
    *reinterpret_cast<uint4*>(out + u * 8) = make_uint4(v[0], v[1], v[2], v[3]);
  }
}

template <typename T, int BS>
cudaError_t launch_pack_rows(const T* in, T* out, int64_t groups, int64_t rows, int64_t cols,
                             int num_sms, cudaStream_t stream) {
  const int64_t units = groups * packed_rows_host(rows) * cols / 8;
  const int64_t blocks = (units + 255) / 256;
  const int64_t cap = static_cast<int64_t>(num_sms) * 16;  // grid-stride: a few waves, no 2^31 limit
  pack_rows_kernel<T, BS><<<static_cast<unsigned>(blocks < cap ? blocks : cap), 256, 0, stream>>>(
      in, out, groups, rows, cols, packed_rows_host(rows));
  return cudaGetLastError();
}

}  // namespace jbs
