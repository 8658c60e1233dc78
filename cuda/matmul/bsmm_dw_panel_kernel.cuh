// Small-N weight gradient by panels (16-bit types, bs 16 and 32, N <= 32, sm_90): dw[i] =
// x[:, c_i]^T @ dy[:, k_i] for every nonzero block i, walked in panel order
// (jbs/_src/tables.py: _dw_panels): by panel of 1024 output channels, then block row, then
// column.
//
// Why: the stream dw kernel (bsmm_stream_kernel.cuh, BULK) walks the blocks in their
// row-major order, so every 2 KB block it writes reads its own 2 KB dy tile from L2: at the
// seed shape (N = 32, 12288^2, bs 32, bf16) 151 MB read and 151 MB written through L2 at
// density 1/2, 70.6 us = 4.3 TB/s, L2-bound at 1.34x the copy floor (benchmarks/NOTES.md,
// session 26). Here a CTA loads its panel's dy rows (N x 1024 channels, 64 KiB) into shared
// memory once, and each warp loads an x tile once per run of a row's blocks in the panel:
// L2 reads fall to ~1/8 of the blocks' bytes at density 1/4 (a row has ~8 blocks per panel),
// so the kernel can approach the HBM write rate.
//
// Measured (benchmarks/NOTES.md, session 27), with bulk copies for the blocks: at bs 16,
// 1.15-1.38x faster than the stream kernel from 8 blocks per run (the lane stores then took
// another 1.26-1.45x); at bs 32 it beats the stream kernel's staged epilogue only near full
// panels, and at both sizes it loses where runs are 1-2 blocks (the panel load is then paid for
// a few blocks). launch_small_n.cuh: use_dw_panel holds the rule.
//
// Walk: CTA b takes items [b nnz / G, (b + 1) nnz / G) of the panel order (G CTAs, one per
// SM); for each panel its range meets, the CTA loads the panel, then each of its 16 warps
// takes an equal contiguous share of the panel's items. Items come 32 at a time (one int4
// per lane: block, row, column). A warp keeps two x tiles: the current row's and the next
// row's, prefetched when a row starts. Each block leaves whole from a staging block
// (staged_block_store.cuh). No cross-warp or cross-CTA sums: every block is one warp's.
#pragma once

#include <cstdint>

#include "common/dtype.cuh"
#include "common/ptx.cuh"
#include "common/smem.cuh"
#include "matmul/dw_operands.cuh"
#include "matmul/staged_block_store.cuh"
#include "matmul/tile_io.cuh"
#include "matmul/warp_mma.cuh"

namespace jbs {

struct DwPanelParams : DwOperands {
  const int4* items;             // (nnz,) [block, block row, block column, 0] in panel order
  const int32_t* panel_offsets;  // (num_panels + 1,)
  int num_panels;
  int panel_cols;  // output block columns per panel: kPanelChannels / BS
};

template <typename T, int BS, int TN>
struct DwPanelConfig {
  static_assert(kIs16Bit<T> && (BS == 16 || BS == 32) && (TN == 16 || TN == 32), "dw panel kernel");
  // 16 warps (two CTAs' worth of the earlier 8): at bs 16, 1.05-1.10x faster at densities 1
  // to 1/8, at bs 32 within 3% (benchmarks/NOTES.md, session 28).
  static constexpr int kWarps = 16;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kPanelChannels = 1024;  // tables.py: DW_PANEL_CHANNELS
  static constexpr int kPanelLd = kPanelChannels + 8;  // ldmatrix rows in distinct banks
  static constexpr int kLdX = BS + 8;
  static constexpr int kMT = BS / 16;
  static constexpr int kNT = BS / 8;
  static constexpr int kOutSlots = 2;
  static constexpr int kPanelBytes = TN * kPanelLd * static_cast<int>(sizeof(T));
  static constexpr int kXTileElems = TN * kLdX;
  static constexpr int kWarpBytes =
      (2 * kXTileElems + kOutSlots * BS * BS) * static_cast<int>(sizeof(T));  // two x tiles, the staging
  static constexpr int kSmemBytes = kPanelBytes + kWarps * kWarpBytes;
  static_assert(kPanelBytes % 16 == 0 && kWarpBytes % 16 == 0, "16-byte alignment");
};

template <typename T, int BS, int TN>
__global__ void __launch_bounds__(DwPanelConfig<T, BS, TN>::kThreads, 1)
    bsmm_dw_panel_kernel(const __grid_constant__ DwPanelParams p) {
  using Cfg = DwPanelConfig<T, BS, TN>;
  unsigned char* const smem_raw = dynamic_smem();
  T* const panel = reinterpret_cast<T*>(smem_raw);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  T* const xs = reinterpret_cast<T*>(smem_raw + Cfg::kPanelBytes + warp * Cfg::kWarpBytes);
  T* const staging = xs + 2 * Cfg::kXTileElems;
  const int64_t g = blockIdx.y;
  const T* const x = static_cast<const T*>(p.x) + g * p.x_group_stride;
  const T* const dy = static_cast<const T*>(p.dy) + g * p.dy_group_stride;
  T* const dw = static_cast<T*>(p.dw) + g * p.dw_group_stride;
  const int valid_rows = static_cast<int>(p.rows);

  const int64_t lo = static_cast<int64_t>(blockIdx.x) * p.nnz / gridDim.x;
  const int64_t hi = static_cast<int64_t>(blockIdx.x + 1) * p.nnz / gridDim.x;
  int panel_id = 0;
  while (panel_id < p.num_panels && __ldg(p.panel_offsets + panel_id + 1) <= lo) ++panel_id;
  int stored = 0;  // blocks this warp has written (store_staged_block's t)
  for (; panel_id < p.num_panels; ++panel_id) {
    const int64_t panel_begin = __ldg(p.panel_offsets + panel_id);
    if (panel_begin >= hi) break;
    const int64_t a = panel_begin > lo ? panel_begin : lo;
    const int64_t e0 = __ldg(p.panel_offsets + panel_id + 1);
    const int64_t e = e0 < hi ? e0 : hi;
    // The panel's dy rows: channels [col0, col0 + 1024) clamped to dy's width, rows past N
    // (and channels past the width) zero-filled from a valid address.
    __syncthreads();  // every warp is done reading the previous panel
    const int64_t col0 = static_cast<int64_t>(panel_id) * Cfg::kPanelChannels;
    constexpr int kChunksPerRow = Cfg::kPanelChannels * static_cast<int>(sizeof(T)) / 16;
    constexpr int kVec = 16 / static_cast<int>(sizeof(T));
    for (int i = tid; i < TN * kChunksPerRow; i += Cfg::kThreads) {
      const int r = i / kChunksPerRow, c = (i - r * kChunksPerRow) * kVec;
      const bool valid = r < valid_rows && col0 + c < p.dy_cols;
      const T* src = dy + (valid ? static_cast<int64_t>(r) * p.dy_cols + col0 + c : 0);
      cp_async_16(panel + r * Cfg::kPanelLd + c, src, valid ? 16 : 0);
    }
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();

    // This warp's share of the panel's items [a, e).
    const int64_t span = e - a;
    const int64_t first = a + span * warp / Cfg::kWarps;
    const int count = static_cast<int>(a + span * (warp + 1) / Cfg::kWarps - first);
    int current_row = -1, next_row = -1, buffer = 0;
    // Items come 32 at a time, the next 32 loaded when a batch starts, so that a warp
    // does not wait a global round trip every 32 blocks.
    auto fetch_batch = [&](int t0) {
      return t0 + lane < count ? __ldg(p.items + first + t0 + lane) : make_int4(0, -1, 0, 0);
    };
    int4 batch = make_int4(0, 0, 0, 0);
    int4 next_batch = fetch_batch(0);
    for (int t = 0; t < count; ++t) {
      if ((t & 31) == 0) {
        batch = next_batch;
        next_batch = fetch_batch(t + 32);
      }
      const int block = __shfl_sync(0xffffffffu, batch.x, t & 31);
      const int row = __shfl_sync(0xffffffffu, batch.y, t & 31);
      const int column = __shfl_sync(0xffffffffu, batch.z, t & 31);
      if (row != current_row) {
        // The row's x tile: prefetched into the other buffer when the previous row started,
        // else loaded now; then the next row within this batch is prefetched.
        buffer ^= 1;
        if (row != next_row) {
          load_tile_async<T, TN, BS, 32>(xs + buffer * Cfg::kXTileElems, Cfg::kLdX, x + static_cast<int64_t>(row) * BS,
                                    p.x_cols, valid_rows, lane);
          cp_async_commit();
        }
        cp_async_wait<0>();
        __syncwarp();
        current_row = row;
        const unsigned later = __ballot_sync(0xffffffffu, lane > (t & 31) && batch.y != row && batch.y >= 0);
        next_row = later != 0u ? __shfl_sync(0xffffffffu, batch.y, __ffs(later) - 1) : -1;
        if (next_row >= 0) {
          load_tile_async<T, TN, BS, 32>(xs + (buffer ^ 1) * Cfg::kXTileElems, Cfg::kLdX,
                                    x + static_cast<int64_t>(next_row) * BS, p.x_cols, valid_rows, lane);
          cp_async_commit();
        }
      }
      const T* const x_tile = xs + buffer * Cfg::kXTileElems;
      const T* const dy_tile = panel + (column - panel_id * p.panel_cols) * BS;
      float acc[Cfg::kMT][Cfg::kNT][4] = {};
#pragma unroll
      for (int k0 = 0; k0 < TN; k0 += 16) {
        warp_mma_step<T, Cfg::kMT, Cfg::kNT, 16, /*A_KMAJOR=*/true, /*B_KMAJOR=*/true, /*M_HALF=*/false,
                      /*PRECISE=*/false>(acc, x_tile, Cfg::kLdX, 0, dy_tile, Cfg::kPanelLd, 0, k0, lane);
      }
      store_staged_block<T, BS, Cfg::kMT, Cfg::kNT, Cfg::kOutSlots>(acc, staging, stored++,
                                                                   dw + static_cast<int64_t>(block) * (BS * BS), lane);
    }
    cp_async_wait<0>();  // a prefetch past the warp's share lands before the buffers are reused
  }
}

}  // namespace jbs
