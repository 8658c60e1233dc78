// Writing one weight-gradient block from a warp's mma.sync accumulators to global memory
// through a staging block in shared memory (sm_90): the fragments go into the staging block in
// the output type (stmatrix for 16-bit types, float2 stores for fp32), then the warp's lanes
// copy it out with 16-byte loads and stores, each store instruction a contiguous 512 bytes.
// Used by the small-N dw kernels (bsmm_stream_kernel.cuh's STAGED, bsmm_dw_panel_kernel.cuh).
//
// Why lane stores: on an H100 (benchmarks/NOTES.md, session 27; seed shape N = 32, bf16) they
// were 1.26-1.45x faster than one cp.async.bulk per block for 512-byte blocks (bs 16) and
// 1.03-1.06x for 2 KB blocks (bs 32). fp32 kept the bulk copy (~1% faster then) until its
// staging was swizzled (below), which only lane stores can read back (session 60).
//
// The staging block is swizzled (common/swizzle.cuh: swizzle_128b on its byte offsets, the
// slot 128-byte aligned). Why: its rows are 32, 64 or 128 bytes, so the 8 rows of one
// stmatrix matrix (or of one fp32 float2 store) share banks 2, 4 or 8 ways. At the seed shape
// (bf16 bs 32, density 1/2) each stmatrix took 16 wavefronts for 4 of data: 3.5 M excess
// wavefronts a launch, ~90% of the dw panel kernel's, whose L1 was 86% busy (benchmarks/
// NOTES.md, session 60). The lanes read the block back through the same swizzle, whole
// 128-byte lines of it per 8 lanes, so the global stores stay contiguous.
#pragma once

#include <cstdint>

#include "common/dtype.cuh"
#include "common/ptx.cuh"
#include "common/swizzle.cuh"

namespace jbs {

// Block number `t` of the warp (0, 1, 2, ...: picks the slot) goes from
// acc (MT m-tiles of 16 rows x NT n-tiles of 8 columns: a BS x BS block) to out.
template <typename T, int BS, int MT, int NT, int SLOTS>
__device__ __forceinline__ void store_staged_block(const float (&acc)[MT][NT][4], T* staging, int t, T* out,
                                                 int lane) {
  static_assert(MT * 16 == BS && NT * 8 == BS, "a whole BS x BS block");
  T* const slot = staging + (t % SLOTS) * (BS * BS);
  unsigned char* const slot_bytes = reinterpret_cast<unsigned char*>(slot);
  // Where logical element `e` of the row-major block sits in the slot.
  auto at = [&](int e) -> void* { return slot_bytes + swizzle_128b(e * static_cast<int>(sizeof(T))); };
  if constexpr (kIs16Bit<T>) {
    // stmatrix x4 of m-tile mt, n-tiles nt, nt + 1: matrix j = rows 8 (j & 1).. of the m-tile,
    // n-tile nt + (j >> 1): the accumulator fragments as they are.
    const int j = lane >> 3;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int nt = 0; nt < NT; nt += 2) {
        stsm_x4(at((mt * 16 + (j & 1) * 8 + (lane & 7)) * BS + (nt + (j >> 1)) * 8),
                pack_pair<T>(acc[mt][nt][0], acc[mt][nt][1]), pack_pair<T>(acc[mt][nt][2], acc[mt][nt][3]),
                pack_pair<T>(acc[mt][nt + 1][0], acc[mt][nt + 1][1]),
                pack_pair<T>(acc[mt][nt + 1][2], acc[mt][nt + 1][3]));
      }
    }
  } else {
    // fp32: the fragments' pairs as float2.
    const int r = lane >> 2, c = 2 * (lane & 3);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        *static_cast<float2*>(at((mt * 16 + r) * BS + nt * 8 + c)) = make_float2(acc[mt][nt][0], acc[mt][nt][1]);
        *static_cast<float2*>(at((mt * 16 + r + 8) * BS + nt * 8 + c)) = make_float2(acc[mt][nt][2], acc[mt][nt][3]);
      }
    }
  }
  __syncwarp();  // every lane's part of the block is staged
  constexpr int kChunks = BS * BS * static_cast<int>(sizeof(T)) / 16;
  int4* const dst = reinterpret_cast<int4*>(out);
#pragma unroll
  for (int i = lane; i < kChunks; i += 32) dst[i] = *reinterpret_cast<const int4*>(slot_bytes + swizzle_128b(16 * i));
  __syncwarp();  // read before any lane stages a later block into this slot
}

}  // namespace jbs
