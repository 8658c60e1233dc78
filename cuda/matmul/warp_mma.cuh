// One warp's contribution to a tile product held in shared memory:
//   acc[MT][NT] += A[m0 : m0+16*MT, k0 : k0+KSTEP] * B[k0 : k0+KSTEP, n0 : n0+8*NT]
// where acc[mt][nt] is the 16x8 fp32 accumulator fragment of rows m0+16*mt and
// columns n0+8*nt.
//
// Both operands may sit in shared memory either way round, which is how one
// code path serves all three products:
//   A_KMAJOR = false: A(m, k) = As[m * lda + k]   (fwd/dx: x or dy tile, rows = n)
//   A_KMAJOR = true:  A(m, k) = As[k * lda + m]   (dw: x^T, the x chunk is stored rows = n = k)
//   B_KMAJOR = true:  B(k, n) = Bs[k * ldb + n]   (fwd: w block as stored; dw: dy chunk)
//   B_KMAJOR = false: B(k, n) = Bs[n * ldb + k]   (dx: the transposed w block)
// M_HALF: only rows m0..m0+7 exist (dw with 8x8 blocks); rows 8..15 of the MMA
// are fed zeros and the caller discards them.
//
// 16-bit types load fragments with ldmatrix (.trans handles the k-major cases);
// fp32 loads scalars and rounds to tf32, optionally with the 3xTF32 split
// (PRECISE) for fp32-level accuracy. Callers pick row strides that make these
// shared-memory reads bank-conflict free (see the tile configs), or hand over a tile
// whose unpadded rows (lda / ldb = the tile's width) are placed as A_SWIZZLE / B_SWIZZLE
// says (common/swizzle.cuh: TileSwizzle): kTileSwizzle128B for a tile that TMA copied as
// rows of 128 bytes with the 128-byte swizzle into a 1024-byte-aligned address, or that
// cp.async placed the same way (matmul/tile_io.cuh: load_tile_async's SWIZZLED);
// kTileSwizzleF32KMajor for fp32 rows of 16 or 32 floats placed by swizzle_f32_kmajor;
// kTileSwizzle128BHalves (fp32 B of 32 columns) reads a kTileSwizzle128B tile's columns in
// halves_column's order, and the caller stores the accumulators' columns in that order.
#pragma once

#include "common/ptx.cuh"
#include "common/swizzle.cuh"

namespace jbs {

// Element (row, col) of a shared tile of ld-element rows placed as SWIZZLE says.
template <TileSwizzle SWIZZLE, typename T>
__device__ __forceinline__ const T* tile_at(const T* tile, int row, int col, int ld) {
  if constexpr (SWIZZLE == kTileSwizzle128B) {
    return reinterpret_cast<const T*>(reinterpret_cast<const char*>(tile) +
                                      swizzle_128b((row * ld + col) * static_cast<int>(sizeof(T))));
  } else if constexpr (SWIZZLE == kTileSwizzle128BHalves) {
    return reinterpret_cast<const T*>(reinterpret_cast<const char*>(tile) +
                                      swizzle_128b((row * ld + halves_column(col)) * static_cast<int>(sizeof(T))));
  } else if constexpr (SWIZZLE == kTileSwizzleF32KMajor) {
    static_assert(sizeof(T) == 4, "swizzle_f32_kmajor places fp32 rows");
    return tile + swizzle_f32_kmajor(row, col, ld);
  } else {
    return tile + row * ld + col;
  }
}

// v as tf32 (PRECISE: big + small parts, see split_tf32; else small = 0).
template <bool PRECISE>
__device__ __forceinline__ void tf32_parts(float v, uint32_t& big, uint32_t& small) {
  if constexpr (PRECISE) {
    split_tf32(v, big, small);
  } else {
    big = to_tf32(v);
    small = 0u;
  }
}

// The B side of one k-step: acc[MT][NT] += A * B[k0 : k0+KSTEP, n0 : n0+8*NT] for
// A fragments already in registers (16-bit k16: the m16n8k16 layout, as ldsm_x4 of
// a row-major tile gives it; fp32: tf32 values, a_small the low parts when PRECISE).
// warp_mma_step loads A in whichever layout its caller stores and ends here.
template <typename T, int MT, int NT, int KSTEP, bool B_KMAJOR, bool PRECISE, TileSwizzle B_SWIZZLE = kTilePlain>
__device__ __forceinline__ void mma_loaded_a(float (&acc)[MT][NT][4], const uint32_t (&a)[MT][4],
                                             const uint32_t (&a_small)[MT][4], const T* Bs, int ldb,
                                             int n0, int k0, int lane) {
  if constexpr (kIs16Bit<T>) {
    static_assert(KSTEP == 16, "16-bit fragments in registers are k16");
    static_assert(B_SWIZZLE == kTilePlain || B_SWIZZLE == kTileSwizzle128B, "16-bit tiles: plain or 128-byte swizzle");
    const int r = lane & 7;
    const int i = lane >> 3;
    // B(row, col) of the block as stored, col a multiple of 8.
    auto b_at = [&](int row, int col) -> const T* { return tile_at<B_SWIZZLE>(Bs, row, col, ldb); };
    if constexpr (NT == 1) {
      uint32_t b[2];
      if constexpr (B_KMAJOR) {
        ldsm_x2_t(b, b_at(k0 + (i & 1) * 8 + r, n0));
      } else {
        ldsm_x2(b, b_at(n0 + r, k0 + (i & 1) * 8));
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) mma_16x8x16<T>(acc[mt][0], a[mt], b[0], b[1]);
    } else {
      static_assert(NT % 2 == 0, "16-bit B fragments are loaded for pairs of n-tiles");
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        // b[0], b[1]: n-tile 2np (k +0, k +8); b[2], b[3]: n-tile 2np+1.
        uint32_t b[4];
        const int nb = n0 + np * 16;
        if constexpr (B_KMAJOR) {
          ldsm_x4_t(b, b_at(k0 + (i & 1) * 8 + r, nb + (i >> 1) * 8));
        } else {
          ldsm_x4(b, b_at(nb + (i >> 1) * 8 + r, k0 + (i & 1) * 8));
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16x8x16<T>(acc[mt][2 * np], a[mt], b[0], b[1]);
          mma_16x8x16<T>(acc[mt][2 * np + 1], a[mt], b[2], b[3]);
        }
      }
    }
  } else {
    static_assert(KSTEP == 8, "tf32 MMAs are k8");
    const int gq = lane >> 2;
    const int tq = lane & 3;
    auto load_b = [&](int k, int n) -> float {
      return B_KMAJOR ? *tile_at<B_SWIZZLE>(Bs, k, n, ldb) : *tile_at<B_SWIZZLE>(Bs, n, k, ldb);
    };
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int n = n0 + nt * 8 + gq;
      const float u0 = load_b(k0 + tq, n);
      const float u1 = load_b(k0 + tq + 4, n);
      uint32_t b_big[2], b_small[2];
      tf32_parts<PRECISE>(u0, b_big[0], b_small[0]);
      tf32_parts<PRECISE>(u1, b_big[1], b_small[1]);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if constexpr (PRECISE) {
          // Small cross terms first so they are not swamped by the big one.
          mma_16x8x8_tf32(acc[mt][nt], a_small[mt], b_big[0], b_big[1]);
          mma_16x8x8_tf32(acc[mt][nt], a[mt], b_small[0], b_small[1]);
        }
        mma_16x8x8_tf32(acc[mt][nt], a[mt], b_big[0], b_big[1]);
      }
    }
  }
}

// A fragments of rows m0 .. m0+16*MT of a row-major A (A(m, k) = As[m * lda + k]) for
// the k-step at k0, in the layout mma_loaded_a takes (16-bit: k16 only). A_TF32 (fp32): A's
// values are tf32 already (their producer rounded them), and their bits go to the MMA as they are.
template <typename T, int MT, int KSTEP, bool PRECISE, TileSwizzle A_SWIZZLE = kTilePlain, bool A_TF32 = false>
__device__ __forceinline__ void load_a_rows(uint32_t (&a)[MT][4], uint32_t (&a_small)[MT][4],
                                            const T* As, int lda, int m0, int k0, int lane) {
  if constexpr (kIs16Bit<T>) {
    static_assert(KSTEP == 16, "16-bit fragments in registers are k16");
    static_assert(A_SWIZZLE == kTilePlain || A_SWIZZLE == kTileSwizzle128B, "16-bit tiles: plain or 128-byte swizzle");
    const int r = lane & 7;
    const int i = lane >> 3;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      // matrices: (rows +0, k +0) (rows +8, k +0) (rows +0, k +8) (rows +8, k +8)
      ldsm_x4(a[mt], tile_at<A_SWIZZLE>(As, m0 + mt * 16 + (i & 1) * 8 + r, k0 + (i >> 1) * 8, lda));
    }
  } else {
    static_assert(KSTEP == 8, "tf32 MMAs are k8");
    static_assert(!A_TF32 || !PRECISE, "tf32 A values have no small parts");
    const int gq = lane >> 2;
    const int tq = lane & 3;
    auto at = [&](int m, int k) -> float { return *tile_at<A_SWIZZLE>(As, m, k, lda); };
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int m = m0 + mt * 16 + gq;
      const float v[4] = {at(m, k0 + tq), at(m + 8, k0 + tq), at(m, k0 + tq + 4), at(m + 8, k0 + tq + 4)};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if constexpr (A_TF32) {
          a[mt][e] = __float_as_uint(v[e]);
          a_small[mt][e] = 0u;
        } else {
          tf32_parts<PRECISE>(v[e], a[mt][e], a_small[mt][e]);
        }
      }
    }
  }
}

template <typename T, int MT, int NT, int KSTEP, bool A_KMAJOR, bool B_KMAJOR, bool M_HALF,
          bool PRECISE, TileSwizzle A_SWIZZLE = kTilePlain, TileSwizzle B_SWIZZLE = kTilePlain>
__device__ __forceinline__ void warp_mma_step(float (&acc)[MT][NT][4], const T* As, int lda, int m0,
                                              const T* Bs, int ldb, int n0, int k0, int lane) {
  static_assert(!M_HALF || MT == 1, "M_HALF means a single, half-used 16-row tile");
  uint32_t a[MT][4];
  uint32_t a_small[MT][4];
  if constexpr (kIs16Bit<T>) {
    // ldmatrix addressing: lane supplies row r of matrix i.
    const int r = lane & 7;
    const int i = lane >> 3;
    if constexpr (KSTEP == 16) {
      if constexpr (!A_KMAJOR) {
        load_a_rows<T, MT, KSTEP, PRECISE, A_SWIZZLE>(a, a_small, As, lda, m0, k0, lane);
      } else {
        static_assert(A_SWIZZLE == kTilePlain || !M_HALF, "swizzled k-major A tiles: whole 16-row tiles");
        static_assert(A_SWIZZLE == kTilePlain || A_SWIZZLE == kTileSwizzle128B,
                      "16-bit tiles: plain or 128-byte swizzle");
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const int mb = m0 + mt * 16;
          if constexpr (M_HALF) {
            // a0 = (m 0-7, k 0-7), a2 = (m 0-7, k 8-15); rows 8-15 of A are zero.
            uint32_t h[2];
            ldsm_x2_t(h, As + (k0 + (i & 1) * 8 + r) * lda + mb);
            a[mt][0] = h[0];
            a[mt][1] = 0u;
            a[mt][2] = h[1];
            a[mt][3] = 0u;
          } else {
            // stored rows are k: matrix i at (k + 8*(i>>1), m + 8*(i&1)), transposed.
            ldsm_x4_t(a[mt], tile_at<A_SWIZZLE>(As, k0 + (i >> 1) * 8 + r, mb + (i & 1) * 8, lda));
          }
        }
      }
      mma_loaded_a<T, MT, NT, KSTEP, B_KMAJOR, PRECISE, B_SWIZZLE>(acc, a, a_small, Bs, ldb, n0, k0, lane);
    } else {
      // k8 variant: only fwd/dx with 8x8 blocks, where the whole block is one
      // k-step and one n-tile.
      static_assert(KSTEP == 8 && !A_KMAJOR && !M_HALF && NT == 1 && A_SWIZZLE == kTilePlain &&
                        B_SWIZZLE == kTilePlain,
                    "unsupported 16-bit k8 use");
      uint32_t a2[MT][2];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        ldsm_x2(a2[mt], As + (m0 + mt * 16 + (i & 1) * 8 + r) * lda + k0);
      }
      uint32_t b;
      if constexpr (B_KMAJOR) {
        ldsm_x1_t(b, Bs + (k0 + r) * ldb + n0);
      } else {
        ldsm_x1(b, Bs + (n0 + r) * ldb + k0);
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) mma_16x8x8<T>(acc[mt][0], a2[mt], b);
    }
  } else {
    static_assert(KSTEP == 8, "tf32 MMAs are k8");
    if constexpr (!A_KMAJOR && !M_HALF) {
      load_a_rows<T, MT, KSTEP, PRECISE, A_SWIZZLE>(a, a_small, As, lda, m0, k0, lane);
    } else {
      const int gq = lane >> 2;
      const int tq = lane & 3;
      auto load_a = [&](int m, int k) -> float {
        return A_KMAJOR ? *tile_at<A_SWIZZLE>(As, k, m, lda) : *tile_at<A_SWIZZLE>(As, m, k, lda);
      };
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int m = m0 + mt * 16 + gq;
        float v[4];
        v[0] = load_a(m, k0 + tq);
        v[1] = M_HALF ? 0.f : load_a(m + 8, k0 + tq);
        v[2] = load_a(m, k0 + tq + 4);
        v[3] = M_HALF ? 0.f : load_a(m + 8, k0 + tq + 4);
#pragma unroll
        for (int e = 0; e < 4; ++e) tf32_parts<PRECISE>(v[e], a[mt][e], a_small[mt][e]);
      }
    }
    mma_loaded_a<T, MT, NT, KSTEP, B_KMAJOR, PRECISE, B_SWIZZLE>(acc, a, a_small, Bs, ldb, n0, k0, lane);
  }
}

}  // namespace jbs
