// One union item's tensor-core work in the wgmma column-group kernels
// (bsmm_group_wgmma_kernel.cuh, bsmm_group_ws_kernel.cuh), for one warpgroup
// that owns 128 rows of the 256-row tile as two m64 halves:
//  * load_item_fragments: its A fragments of the item's activation tile, every
//    k-step (PACKED: one conflict-free 16-byte shared load per lane, the tile
//    being stored in fragment order, matmul/packed_rows.cuh; otherwise
//    ldmatrix, or scalar loads rounded to tf32, from row-major rows of LDX).
//  * issue_item_wgmmas: for every present block column, one m64 x BS wgmma per
//    k-step and half (16-bit bs 16: one m64 x 32 per pair of columns with a block),
//    B read from the slot's core-matrix blocks (matmul/group_slot_loader.cuh)
//    K-major (dx, tf32) or N-major (16-bit fwd).
//  * store_group_tile / store_group_wgmma_tile: the epilogue, the 256 x 128 fp32
//    tile to the output.
// The caller fences, commits and waits (common/wgmma.cuh).
#pragma once

#include <cstdint>

#include "common/dtype.cuh"
#include "common/wgmma.cuh"
#include "matmul/bsmm_group_kernel.cuh"  // GroupColumns
#include "matmul/packed_rows.cuh"
#include "matmul/tile_io.cuh"
#include "matmul/warp_mma.cuh"

namespace jbs {

template <typename T>
inline constexpr int kWgmmaKStep = kIs16Bit<T> ? 16 : 8;  // tf32 wgmmas are k8

// m_base: the warpgroup's first row plus this warp's 16-row offset (warp % 4 * 16).
template <typename T, int BS, int LDX, bool PACKED>
__device__ __forceinline__ void load_item_fragments(uint32_t (&a)[2][BS / kWgmmaKStep<T>][1][4], const T* xs,
                                                    int m_base, int lane) {
  constexpr int kKStep = kWgmmaKStep<T>;
  constexpr int kKSteps = BS / kKStep;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      const int m0 = m_base + h * 64;
      if constexpr (PACKED) {
        const uint4 v = *reinterpret_cast<const uint4*>(xs + ((m0 / 16) * kKSteps + ks) * kFragmentElems<T> +
                                                        lane * (16 / static_cast<int>(sizeof(T))));
        a[h][ks][0][0] = v.x;
        a[h][ks][0][1] = v.y;
        a[h][ks][0][2] = v.z;
        a[h][ks][0][3] = v.w;
      } else {
        uint32_t unused[1][4];
        load_a_rows<T, 1, kKStep, false>(a[h][ks], unused, xs, LDX, m0, ks * kKStep, lane);
      }
    }
  }
}

// 16-bit bs 16: the blocks of columns 2j and 2j + 1, where either is present, go to the
// tensor cores as one m64n32k16 wgmma (an absent one as zeros). An m64n16k16 costs them as
// long as an m64n32k16: issuing every wgmma of the bs 16 group kernel twice made it 1.42x
// slower, one of twice the width per block only 1.035x (8192^3 bf16 at density 1/2). With
// the pairs, bf16 8192^3 fwd / dx ran 1.015 / 1.02 / 1.025x faster at 1/2 / 1/4 / 1/8: fewer
// wgmmas (4 -> ~3 per m64 half and item at 1/2), less than their count predicts, as the zero
// fills are more cp.asyncs for the same warps to issue (benchmarks/NOTES.md, session 37).
// The pair's blocks must be one B operand: their 8 x 8 core matrices ordered n-major (B's
// n-stride the same within a block and across the two), as the dx's blocks are stored and
// the forward's are where GroupSlotLoader's N_MAJOR_CORES says, and a present block's
// absent partner zeros (its ZERO_PARTNERS).
template <typename T, int BS>
inline constexpr bool kPairWgmmas = kIs16Bit<T> && BS == 16;

// present: bit c set when block column c has a block for this item (CTA-uniform). PAIRS: the
// pairs above (kPairWgmmas), over blocks stored with n-major cores and zero partners.
template <typename T, int BS, bool B_KMAJOR, bool PAIRS = false>
__device__ __forceinline__ void issue_item_wgmmas(float (&acc)[2][128 / BS][1][BS / 8][4],
                                                  const uint32_t (&a)[2][BS / kWgmmaKStep<T>][1][4], const T* ws,
                                                  unsigned present) {
  if constexpr (PAIRS) {
    static_assert(kPairWgmmas<T, BS>, "pairs of one k-step blocks of 16");
    // Descriptor strides (bytes), either major: the next core matrix along k is the next 128
    // bytes, along n the next 2 x 128 (one block row of them, and on into the pair's second block).
    constexpr uint32_t kLbo = 128, kSbo = 2 * 128;
#pragma unroll
    for (int j = 0; j < 128 / BS / 2; ++j) {
      // Where only one of the pair is present the other is zeros (GroupSlotLoader's
      // ZERO_PARTNERS), so every pair is one shape: wgmmas of two shapes on overlapping
      // accumulators made ptxas wait for each before the next (C7517), 6x slower.
      if ((present >> (2 * j)) & 3u) {
        const uint64_t desc = wgmma_desc(ws + 2 * j * BS * BS, kLbo, kSbo);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          // acc[h][2j] and acc[h][2j + 1] are adjacent: the n32 accumulator's 8-column tiles 0-1 and 2-3.
          wgmma_rs<T, 2 * BS, B_KMAJOR ? 0 : 1>(*reinterpret_cast<float(*)[BS / 4][4]>(&acc[h][2 * j][0][0][0]),
                                                a[h][0][0], desc);
        }
      }
    }
    return;
  }
  constexpr int kE = 16 / static_cast<int>(sizeof(T));  // elements per core-matrix row
  // Descriptor strides (bytes): core matrices are 128 B; a block row of them is BS/E wide.
  constexpr uint32_t kCoreRow = BS / kE * 128;
  constexpr uint32_t kLbo = B_KMAJOR ? 128 : kCoreRow;  // next core matrix along k
  constexpr uint32_t kSbo = B_KMAJOR ? kCoreRow : 128;  // next core matrix along n
  // One k-step further: two core matrices along k (K-major), two rows of them (N-major).
  constexpr int kKStepElems = B_KMAJOR ? 2 * 8 * kE : 2 * (BS / 8) * 64;
#pragma unroll
  for (int c = 0; c < 128 / BS; ++c) {
    if (present & (1u << c)) {
#pragma unroll
      for (int ks = 0; ks < BS / kWgmmaKStep<T>; ++ks) {
        const uint64_t desc = wgmma_desc(ws + c * BS * BS + ks * kKStepElems, kLbo, kSbo);
#pragma unroll
        for (int h = 0; h < 2; ++h) wgmma_rs<T, BS, B_KMAJOR ? 0 : 1>(acc[h][c][0], a[h][ks][0], desc);
      }
    }
  }
}

// The epilogue of the wgmma group kernels: the CTA's 256 x 128 fp32 tile to out_row
// (the tile's first row, column 0; row stride out_cols), one warpgroup's 128 rows at a
// time staged in cs (>= 128 x kGroupTileLdC floats: the drained ring). Warpgroup wg
// owns rows wg * 128..; stage_rows(cs) stages them (row h * 64 + warp % 4 * 16 + .. of
// cs for m64 half h). Group column c goes to output block column columns(c)
// (bsmm_group_kernel.cuh: GroupColumns); rows from valid_rows and columns the group
// lacks (-1) are not written. Every thread of the CTA calls it.
inline constexpr int kGroupTileLdC = 128 + 8;

template <typename T, int BS, int NTHREADS, typename StageRows>
__device__ __forceinline__ void store_group_tile(const StageRows& stage_rows, float* cs, T* out_row, int64_t out_cols,
                                                 int valid_rows, const GroupColumns& columns, int wg, int tid) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    if (wg == half) stage_rows(cs);
    __syncthreads();
    const int rows = valid_rows - half * 128 < 128 ? valid_rows - half * 128 : 128;
    for (int c = 0; c < 128 / BS && rows > 0; ++c) {
      const int column = columns(c);
      if (column < 0) continue;  // uniform
      store_tile<T, 128, BS, NTHREADS, 1>(cs + c * BS, kGroupTileLdC, 0,
                                          out_row + static_cast<int64_t>(half) * 128 * out_cols + column * BS, out_cols,
                                          rows, tid);
    }
    __syncthreads();
  }
}

// ... with accumulators per block column, acc[half][column][1][BS / 8][4].
template <typename T, int BS, int NTHREADS>
__device__ __forceinline__ void store_group_wgmma_tile(const float (&acc)[2][128 / BS][1][BS / 8][4], float* cs,
                                                       T* out_row, int64_t out_cols, int valid_rows,
                                                       const GroupColumns& columns, int wg, int row_in_wg, int lane,
                                                       int tid) {
  auto stage_rows = [&](float* s) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int c = 0; c < 128 / BS; ++c) {
        stage_acc<1, BS / 8, 128>(s, kGroupTileLdC, h * 64 + row_in_wg, c * BS, acc[h][c], lane);
      }
    }
  };
  store_group_tile<T, BS, NTHREADS>(stage_rows, cs, out_row, out_cols, valid_rows, columns, wg, tid);
}

}  // namespace jbs
