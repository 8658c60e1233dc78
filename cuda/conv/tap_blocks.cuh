// One filter tap's weight blocks for a column group, as wgmma B operands in
// shared memory: the halo conv kernels (conv/bsconv_halo_kernel.cuh,
// conv/bsconv_halo_ss_kernel.cuh) stage every tap of an item this way.
//
// row = [channel block, block of column 0..P-1 or -1] (a union item of the
// conv's group tables); tap t's blocks are tap 0's plus t * nnz_per_tap (the
// caller's `shift`). Core matrices of 8 elements per 16-byte row
// (common/wgmma.cuh). By default each block alone: element (r, c) of block q at
// q * BS * BS + ((r/8) * BS/8 + c/8) * 64 + (r%8) * 8 + c%8, read N-major by the
// fwd (k = r) and K-major by the dx (k = c); absent blocks are not copied.
// DENSE_N: the P blocks as one 128-wide operand, absent ones zero-filled; the
// dx reads the same layout K-major (n = q * BS + r), the fwd needs the n of all
// blocks interleaved: element (r, c) of block q at ((r/8) * 16 + (q * BS + c)/8)
// * 64 + (r%8) * 8 + c%8.
//
// The kernels copy ~2 x taps of these per thread and item, so the per-copy work
// is hoisted: a thread's copies have fixed offsets (computed once), and its
// blocks are picked once per item (for_item); a tap's copy is then an address
// add and a cp.async. (Recomputing it all per copy cost ~35 instructions each:
// a third of the ss kernel's instruction stream, benchmarks/NOTES.md session 15.)
#pragma once

#include <cstdint>

#include "common/ptx.cuh"

namespace jbs {

// Union item i's table row (1 + P ints) of a group whose rows start at rows_of.
template <int P>
__device__ __forceinline__ void read_union_row(const int32_t* rows_of, int i, int (&row)[1 + P]) {
#pragma unroll
  for (int k = 0; k <= P; ++k) row[k] = __ldg(rows_of + static_cast<int64_t>(i) * (1 + P) + k);
}

// Bit c set where block column c of the row has a block.
template <int P>
__device__ __forceinline__ unsigned present_columns(const int (&row)[1 + P]) {
  unsigned m = 0;
#pragma unroll
  for (int c = 0; c < P; ++c) m |= (row[1 + c] >= 0 ? 1u : 0u) << c;
  return m;
}

template <typename T, int BS, bool TRANS, bool DENSE_N, int NTHREADS>
struct TapBlockCopies {
  static constexpr int kP = 128 / BS;
  static constexpr int kBlockElems = BS * BS;
  static constexpr int kTapChunks = kP * kBlockElems / 8;  // 16-byte copies of one tap
  static constexpr int kChunksPerRow = BS / 8;
  static constexpr int kCopies = kTapChunks / NTHREADS;  // per thread and tap
  static_assert(sizeof(T) == 2, "16-bit weights: 8 elements per 16-byte copy");
  static_assert(kTapChunks % NTHREADS == 0, "whole copies per thread");

  int dst[kCopies];     // element offset in the tap's operand
  int src[kCopies];     // element offset in the block
  int column[kCopies];  // block column q: the same across a warp
  int block[kCopies];   // this item's block of that column (tap 0), or -1

  __device__ __forceinline__ explicit TapBlockCopies(int tid) {
#pragma unroll
    for (int k = 0; k < kCopies; ++k) {
      const int idx = tid + k * NTHREADS;
      const int q = idx / (kTapChunks / kP);
      const int r = (idx / kChunksPerRow) % BS;
      const int chunk = idx % kChunksPerRow;
      const int core = DENSE_N && !TRANS ? (r / 8) * (128 / 8) + q * kChunksPerRow + chunk
                                         : (q * BS + r) / 8 * kChunksPerRow + chunk;
      dst[k] = core * 64 + (r % 8) * 8;
      src[k] = r * BS + chunk * 8;
      column[k] = q;
      block[k] = -1;
    }
  }

  // This thread's blocks of the item whose table row is `row`.
  __device__ __forceinline__ void for_item(const int (&row)[1 + kP]) {
#pragma unroll
    for (int k = 0; k < kCopies; ++k) {
      int b = -1;
#pragma unroll
      for (int c = 0; c < kP; ++c) b = c == column[k] ? row[1 + c] : b;  // no local-memory index
      block[k] = b;
    }
  }

  // Tap `shift / nnz_per_tap` of that item into dst (16-byte aligned).
  __device__ __forceinline__ void issue(T* dst_tap, const T* w, int shift) const {
#pragma unroll
    for (int k = 0; k < kCopies; ++k) {
      if (!DENSE_N && block[k] < 0) continue;
      const T* from = w + (block[k] < 0 ? 0 : static_cast<int64_t>(block[k] + shift) * kBlockElems + src[k]);
      cp_async_16(dst_tap + dst[k], from, block[k] < 0 ? 0 : 16);
    }
  }
};

}  // namespace jbs
