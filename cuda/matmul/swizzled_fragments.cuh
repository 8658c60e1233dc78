// A warp's 16-bit tile product from stages that TMA filled with a swizzle (common/swizzle.cuh)
// at 1024-byte-aligned addresses, with each lane's fragment offsets worked out once per
// kernel instead of once per tile:
//   acc[MT][NT] += X(TN x BS, row-major) * B(BS x BS)
// where B is the weight block as stored (B_KMAJOR, fwd) or transposed (dx). The block sits as
// rows of 128 bytes with the 128-byte swizzle; the tile either so too (X_ROW_BYTES = 128: a
// tile-major copy's whole lines) or as its own rows of BS * 2 bytes with the swizzle of that
// width (X_ROW_BYTES = 2 BS: a box straight from the activation).
//
// The reads and the MMAs, and their order, are warp_mma.cuh's load_a_rows + mma_loaded_a
// at kTileSwizzle128B, so the sums come out bit for bit the same. What differs is where
// the addresses come from. Every stage starts on a swizzle atom, so a fragment's swizzled
// byte offset within its tile is the same in every stage and depends on the lane and the
// k-step only. Recomputed from the tile pointer, it cost the bf16 bs 32 even walk ~35 of
// its ~170 instructions a weight block, re-deriving the lane from %tid each time
// (benchmarks/NOTES.md, session 63): the walk is bound by each warp's chain of dependent
// instructions, not by its bytes.
#pragma once

#include <cstdint>

#include "common/dtype.cuh"
#include "common/ptx.cuh"
#include "common/swizzle.cuh"

namespace jbs {

template <typename T, int BS, int TN, bool B_KMAJOR, int X_ROW_BYTES = 128>
struct SwizzledFragments16 {
  static_assert(kIs16Bit<T> && BS >= 16 && BS % 16 == 0, "16-bit k16 fragments of blocks of 16-64");
  static constexpr int kMT = TN / 16;
  static constexpr int kNT = BS / 8;
  static constexpr int kNP = kNT / 2;  // ldmatrix x4 of B covers two n-tiles
  static constexpr int kKSteps = BS / 16;
  static constexpr int kBytes = static_cast<int>(sizeof(T));

  uint32_t a[kKSteps][kMT];  // byte offsets of the lane's row in the activation tile
  uint32_t b[kKSteps][kNP];  // and in the weight block

  __device__ __forceinline__ explicit SwizzledFragments16(int lane) {
    // ldmatrix: lane supplies row r of matrix i (as warp_mma.cuh).
    const int r = lane & 7;
    const int i = lane >> 3;
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        // matrices: (rows +0, k +0) (rows +8, k +0) (rows +0, k +8) (rows +8, k +8)
        const int row = mt * 16 + (i & 1) * 8 + r;
        a[ks][mt] = opaque(swizzle_rows<X_ROW_BYTES>((row * BS + ks * 16 + (i >> 1) * 8) * kBytes));
      }
#pragma unroll
      for (int np = 0; np < kNP; ++np) {
        const int row = B_KMAJOR ? ks * 16 + (i & 1) * 8 + r : np * 16 + (i >> 1) * 8 + r;
        const int col = B_KMAJOR ? np * 16 + (i >> 1) * 8 : ks * 16 + (i & 1) * 8;
        b[ks][np] = opaque(swizzle_rows<128>((row * BS + col) * kBytes));
      }
    }
  }

  // acc += the tile at shared address x_at times the block at w_at (both 1024-byte aligned).
  __device__ __forceinline__ void mma(float (&acc)[kMT][kNT][4], uint32_t x_at, uint32_t w_at) const {
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      uint32_t x[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) ldsm_x4_shared(x[mt], x_at + a[ks][mt]);
#pragma unroll
      for (int np = 0; np < kNP; ++np) {
        // w[0], w[1]: n-tile 2np (k +0, k +8); w[2], w[3]: n-tile 2np+1.
        uint32_t w[4];
        if constexpr (B_KMAJOR) {
          ldsm_x4_t_shared(w, w_at + b[ks][np]);
        } else {
          ldsm_x4_shared(w, w_at + b[ks][np]);
        }
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma_16x8x16<T>(acc[mt][2 * np], x[mt], w[0], w[1]);
          mma_16x8x16<T>(acc[mt][2 * np + 1], x[mt], w[2], w[3]);
        }
      }
    }
  }

 private:
  // A value the compiler must keep in a register: left to itself it re-derives these offsets
  // from %tid inside the walk's loop.
  __device__ __forceinline__ static uint32_t opaque(int v) {
    uint32_t u = static_cast<uint32_t>(v);
    asm volatile("" : "+r"(u));
    return u;
  }
};

}  // namespace jbs
