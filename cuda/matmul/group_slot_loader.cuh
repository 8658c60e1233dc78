// The copies that fill one slot of the wgmma column-group kernels
// (bsmm_group_wgmma_kernel.cuh, bsmm_group_ws_kernel.cuh): a union item's
// 256 x BS activation tile and its present weight blocks, issued as cp.async by
// NTHREADS cooperating threads (the whole CTA there, the producer warpgroup here).
//
// Slot layout: the activation tile first (PACKED: as stored in the packed copy,
// matmul/packed_rows.cuh; otherwise row-major with rows of kLdX elements,
// GATHER: read through the conv's row map), then P weight blocks as core
// matrices without swizzle (common/wgmma.cuh): E = 16 / sizeof(T) elements per
// 16-byte core-matrix row, element (r, c) of a block at
// ((r/8) * BS/E + c/E) * 8E + (r%8) * E + c%E. tf32 has no N-major B, so the fp32
// forward (TRANSPOSE_W) stores each block transposed (element (r, c) where (c, r)
// would go, by 4-byte copies) and reads it K-major like the dx.
//
// The caller says which block column c holds through block_of(c) (-1: absent,
// nothing is copied). It is called with c the same across each warp, so it may
// use warp shuffles.
#pragma once

#include <cstdint>

#include "common/dtype.cuh"
#include "common/ptx.cuh"
#include "conv/gathered_tile.cuh"
#include "matmul/bsmm_group_kernel.cuh"  // GroupParams, GroupCta
#include "matmul/tile_io.cuh"

namespace jbs {

// For wgmmas over pairs of adjacent blocks (group_item_mma.cuh: kPairWgmmas): N_MAJOR_CORES
// stores a block's 8 x 8 core matrices chunk-major (its n-major order where the stored rows are
// k, the forward's; otherwise row-major, as the rows come), so that two adjacent blocks form
// one wider B operand; ZERO_PARTNERS fills an absent block with zeros where its pair's other
// block (column c ^ 1) is present.
template <typename T, int BS, int TN, int LDX, bool TRANSPOSE_W, bool GATHER, bool PACKED, int NTHREADS,
          bool N_MAJOR_CORES = false, bool ZERO_PARTNERS = false>
struct GroupSlotLoader {
  static_assert(!(GATHER && PACKED), "a gathered (conv) activation is not packed");
  static constexpr int kP = 128 / BS;
  static constexpr int kE = 16 / static_cast<int>(sizeof(T));  // elements per 16-byte copy
  static constexpr int kBlockElems = BS * BS;
  static constexpr int kChunksPerRow = BS / kE;
  static constexpr int kWarps = NTHREADS / 32;

  GatheredTile<T, TN, BS, NTHREADS> gathered;  // GATHER only: the tile rows' source pixels

  __device__ __forceinline__ void init(const GroupParams& p, const GroupCta<T, BS, TN, GATHER>& cta, int tid) {
    if constexpr (GATHER) gathered.init(p.gather, cta.n0, p.rows, tid);
  }

  // The activation tile of input block `input` into xs (TN x LDX).
  __device__ __forceinline__ void load_activation(T* xs, int input, const GroupParams& p,
                                                  const GroupCta<T, BS, TN, GATHER>& cta, int tid) const {
    if constexpr (GATHER) {
      gathered.load(xs, LDX, cta.in_group, p.in_cols, p.gather, input, tid);
    } else if constexpr (PACKED) {
      // One contiguous run of TN * BS elements, zero-padded past the last row.
      // (A trip count known at compile time: `idx = tid; idx < n; idx += NTHREADS`
      // compiled to a generic loop with its divisions on every item, session 6.)
      const T* src = cta.in_group + (static_cast<int64_t>(input) * p.packed_rows + cta.n0) * BS;
      static_assert(TN * BS / kE % NTHREADS == 0, "whole 16-byte copies per thread");
#pragma unroll
      for (int k = 0; k < TN * BS / kE / NTHREADS; ++k) {
        const int idx = tid + k * NTHREADS;
        cp_async_16(xs + idx * kE, src + idx * kE, 16);
      }
    } else {
      load_tile_async<T, TN, BS, NTHREADS>(xs, LDX, cta.in + static_cast<int64_t>(input) * BS, p.in_cols,
                                           cta.valid_rows, tid);
    }
  }

  // The present weight blocks into ws (P blocks of BS x BS).
  template <typename BlockOf>
  __device__ __forceinline__ void load_weights(T* ws, const BlockOf& block_of, const T* w, int tid) const {
    const int lane = tid & 31;
    if constexpr (TRANSPOSE_W) {
      // A warp copies 4 rows x 8 columns: 32 B runs from global, and its 32
      // stores land in 32 distinct banks.
      constexpr int kWarpUnits = BS / 4 * (BS / 8);  // per block
      static_assert(kWarpUnits % kWarps == 0, "whole units per warp and block");
      const int row_lo = lane >> 3;
      const int col_lo = lane & 7;
#pragma unroll
      for (int c = 0; c < kP; ++c) {
        const int block = block_of(c);
        if (block < 0) continue;
        const T* src = w + static_cast<int64_t>(block) * kBlockElems + row_lo * BS + col_lo;
        T* dst = ws + c * kBlockElems + col_lo * kE + row_lo;
#pragma unroll
        for (int k = 0; k < kWarpUnits / kWarps; ++k) {
          const int unit = (tid >> 5) + k * kWarps;
          const int r_hi = unit / (BS / 8);
          const int c_hi = unit % (BS / 8);
          cp_async_4(dst + (c_hi * kChunksPerRow + r_hi) * 8 * kE, src + r_hi * 4 * BS + c_hi * 8);
        }
      }
    } else {
      // A block is a whole number of warps' chunks, so c is the same across a warp.
      constexpr int kBlockChunks = BS * kChunksPerRow;
      static_assert(kBlockChunks % 32 == 0 && (kP * kBlockChunks) % NTHREADS == 0, "warp-uniform blocks");
#pragma unroll
      for (int k = 0; k < kP * kBlockChunks / NTHREADS; ++k) {
        const int idx = tid + k * NTHREADS;
        const int c = idx / kBlockChunks;
        const int r_in = (idx / kChunksPerRow) % BS;
        const int cc = idx % kChunksPerRow;
        const int block = block_of(c);
        const bool zeros = ZERO_PARTNERS && block < 0 && block_of(c ^ 1) >= 0;
        if (block < 0 && !zeros) continue;
        const T* src = w + static_cast<int64_t>(zeros ? 0 : block) * kBlockElems + r_in * BS + cc * kE;
        const int core = N_MAJOR_CORES ? cc * (BS / 8) + (r_in >> 3) : (r_in >> 3) * kChunksPerRow + cc;
        T* dst = ws + c * kBlockElems + core * 8 * kE + (r_in & 7) * kE;
        cp_async_16(dst, src, zeros ? 0 : 16);  // (0 source bytes: 16 zero bytes)
      }
    }
  }
};

}  // namespace jbs
