// Moving tiles between global and shared memory, cooperatively by a whole CTA.
//
// Loads: a ROWS x COLS tile of T, row-major in global memory with row stride
// ld_src elements, goes to shared memory with row stride ld_dst (padded to
// avoid bank conflicts) in 16-byte cp.async chunks. Rows >= valid_rows are
// zero-filled so partial tiles at the end of N contribute nothing; valid_rows
// must be >= 1.
// Alignment assumption (checked by the handlers' shape rules): COLS * sizeof(T)
// is a multiple of 16 (bs >= 8 for 16-bit types, bs >= 4 for fp32), every row
// start is a multiple of bs elements from a 16-byte aligned buffer start, and
// ld_dst * sizeof(T) is a multiple of 16.
//
// Stores: fp32 accumulators are first staged in shared memory (stage_acc) so
// the final global writes are whole 16-byte vectors along rows (store_tile).
// store_tile can sum NPART partial tiles; it always adds them in the order
// 0, 1, ..., NPART-1, which keeps the result bitwise reproducible.
#pragma once

#include <cstdint>

#include "common/dtype.cuh"
#include "common/ptx.cuh"
#include "common/swizzle.cuh"  // swizzle_f32_kmajor, swizzle_128b

namespace jbs {

// SWIZZLED: the rows are unpadded (ld_dst == COLS) and placed as common/swizzle.cuh says:
// fp32 16- or 32-float rows by swizzle_f32_kmajor, 16-bit rows (32 or 64 bytes) by swizzle_128b on
// their byte offsets, which warp_mma.cuh's tile_at reads back.
template <typename T, int ROWS, int COLS, int NTHREADS, bool SWIZZLED = false>
__device__ __forceinline__ void load_tile_async(T* dst, int ld_dst, const T* src, int64_t ld_src,
                                                int valid_rows, int tid) {
  static_assert(!SWIZZLED || COLS == 16 || COLS == 32, "swizzled tiles: rows of 16 or 32 elements");
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  static_assert(COLS % kVec == 0, "tile rows must be whole 16-byte chunks");
  constexpr int kChunksPerRow = COLS / kVec;
  static_assert(NTHREADS % kChunksPerRow == 0, "a thread keeps its column across iterations");
  constexpr int kRowStep = NTHREADS / kChunksPerRow;  // rows covered per iteration
  constexpr int kIters = (ROWS + kRowStep - 1) / kRowStep;
  // Each thread copies column chunk c of rows r0, r0 + kRowStep, ... Rows past
  // valid_rows copy 0 bytes (zero fill) from the last valid row, so the source
  // is always a real address. Both are computed with min/max rather than
  // branches: the compiler would otherwise hoist one predicate per iteration
  // out of the caller's main loop and run out of predicate registers.
  const int r0 = tid / kChunksPerRow;
  const int c = (tid % kChunksPerRow) * kVec;
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int r = r0 + it * kRowStep;
    if (ROWS % kRowStep != 0 && r >= ROWS) break;
    const int src_bytes = 16 * max(min(valid_rows - r, 1), 0);
    const int r_src = min(r, valid_rows - 1);  // valid_rows >= 1 for every tile we load
    T* at = dst + r * ld_dst + c;
    if constexpr (SWIZZLED) {
      if constexpr (sizeof(T) == 4) {
        at = dst + swizzle_f32_kmajor(r, c, COLS);
      } else {
        at = reinterpret_cast<T*>(reinterpret_cast<char*>(dst) + swizzle_128b((r * COLS + c) * int(sizeof(T))));
      }
    }
    cp_async_16(at, src + static_cast<int64_t>(r_src) * ld_src + c, src_bytes);
  }
}

// Writes a warp's accumulator fragments (see warp_mma.cuh) for the tile at
// (m0, n0) into a row-major fp32 shared tile; rows >= ROWS_LIMIT are dropped.
template <int MT, int NT, int ROWS_LIMIT>
__device__ __forceinline__ void stage_acc(float* cs, int ldc, int m0, int n0,
                                          const float (&acc)[MT][NT][4], int lane) {
  const int gq = lane >> 2;
  const int tq = lane & 3;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int r = m0 + mt * 16 + gq;
      const int c = n0 + nt * 8 + 2 * tq;
      if (r < ROWS_LIMIT) {
        *reinterpret_cast<float2*>(cs + r * ldc + c) = make_float2(acc[mt][nt][0], acc[mt][nt][1]);
      }
      if (r + 8 < ROWS_LIMIT) {
        *reinterpret_cast<float2*>(cs + (r + 8) * ldc + c) =
            make_float2(acc[mt][nt][2], acc[mt][nt][3]);
      }
    }
  }
}

// Converts the staged ROWS x COLS fp32 tile (sum of NPART partial tiles spaced
// part_stride floats apart) to T and writes rows < valid_rows to global memory.
// Requires ldc % 4 == 0 and a 16-byte aligned cs (float4 reads).
template <typename T, int ROWS, int COLS, int NTHREADS, int NPART>
__device__ __forceinline__ void store_tile(const float* cs, int ldc, int part_stride, T* out,
                                           int64_t ld_out, int valid_rows, int tid) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  static_assert(COLS % kVec == 0, "tile rows must be whole 16-byte chunks");
  constexpr int kChunksPerRow = COLS / kVec;
  constexpr int kChunks = ROWS * kChunksPerRow;
  constexpr int kIters = (kChunks + NTHREADS - 1) / NTHREADS;
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int idx = tid + it * NTHREADS;
    if (kChunks % NTHREADS != 0 && idx >= kChunks) break;
    const int r = idx / kChunksPerRow;
    const int c = (idx % kChunksPerRow) * kVec;
    if (r >= valid_rows) continue;
    float v[kVec];
#pragma unroll
    for (int e = 0; e < kVec; e += 4) {
      const float4 q = *reinterpret_cast<const float4*>(cs + r * ldc + c + e);
      v[e] = q.x;
      v[e + 1] = q.y;
      v[e + 2] = q.z;
      v[e + 3] = q.w;
    }
#pragma unroll
    for (int p = 1; p < NPART; ++p) {
#pragma unroll
      for (int e = 0; e < kVec; e += 4) {
        const float4 q = *reinterpret_cast<const float4*>(cs + p * part_stride + r * ldc + c + e);
        v[e] += q.x;
        v[e + 1] += q.y;
        v[e + 2] += q.z;
        v[e + 3] += q.w;
      }
    }
    alignas(16) T packed[kVec];
#pragma unroll
    for (int e = 0; e < kVec; ++e) packed[e] = from_float<T>(v[e]);
    *reinterpret_cast<uint4*>(out + static_cast<int64_t>(r) * ld_out + c) =
        *reinterpret_cast<const uint4*>(packed);
  }
}

}  // namespace jbs
