// Weight gradient of a stride-1 block-sparse convolution whose output has its
// input's image size (conv/halo_tile.cuh): dw[t, b] = x_t[:, c]^T @ dy[:, k] for
// every tap t of layout block b = (c, k), where x_t is x shifted by tap t.
//
// Why: the implicit-GEMM dw kernel (matmul/bsmm_dw_kernel.cuh with GATHER) runs
// one CTA per (tap, block) and streams every row of the gathered x and of dy for
// it, so a 3x3 conv reads dy 9 times and x 9 times per block. Here a CTA owns a
// layout block for all taps: per tile of 256 rows it loads dy's tile and x's halo
// (256 + max delta - min delta rows) once, and each tap's A fragments come from
// the halo at the tap's shift (ldmatrix rows pointed at a row of zeros where the
// tap leaves the image, after a per-row bit mask of the taps that stay inside).
//
// CTA = (layout block b, group g, row split z), 8 warps. Warp (wm, wk) owns rows
// wm * 16.. of the BS x BS tile (BS / 16 warps across it) for every tap, and the
// k-steps (16 rows) wk, wk + kWarpsK, ... of each tile; dy's B fragments are
// loaded once per k-step for all taps. The kWarpsK partial tiles are summed in
// shared memory in warp order, and row splits through `partials` as in
// bsmm_dw_kernel.cuh: bitwise deterministic. mma.sync (sm_80+), 16-bit types.
#pragma once

#include <cstdint>

#include "common/dtype.cuh"
#include "common/ptx.cuh"
#include "common/smem.cuh"
#include "conv/halo_tile.cuh"
#include "conv/row_gather.h"
#include "matmul/bsmm_blocks_kernel.cuh"  // cclamp
#include "matmul/bsmm_dw_kernel.cuh"      // DwParams
#include "matmul/tile_io.cuh"
#include "matmul/warp_mma.cuh"

namespace jbs {

struct ConvHaloDwParams : DwParams {
  int nnz_per_tap;  // layout blocks; dw holds taps x nnz_per_tap, tap-major
  int delta_min;    // min over taps of delta_t
  int halo_rows;    // kRows + max(delta_t) - delta_min, <= ConvHaloDwConfig::kHaloRows
};

template <typename T, int BS>
struct ConvHaloDwConfig {
  static_assert(kIs16Bit<T> && (BS == 16 || BS == 32), "conv halo dw kernel: 16-bit types, blocks of 16 or 32");
  static constexpr int kThreads = 256;
  static constexpr int kRows = 256;    // rows per stage
  static constexpr int kMaxTaps = 9;   // accumulators: 9 x BS / 8 x 4 floats per thread
  static constexpr int kWarpsM = BS / 16;
  static constexpr int kWarpsK = kThreads / 32 / kWarpsM;
  static constexpr int kNT = BS / 8;
  static constexpr int kLd = BS + 8;   // 80 / 48-byte rows: 8 consecutive rows hit distinct banks
  static constexpr int kHaloRows = BS == 32 ? 448 : 512;  // as the fwd kernel's
  static constexpr int kHaloElems = kHaloRows * kLd;
  static constexpr int kDyElems = kRows * kLd;
  // A stage: the halo, dy's tile, then the rows' tap masks (ints).
  static constexpr int kStageBytes = (kHaloElems + kDyElems) * 2 + kRows * 4;
  static constexpr int kStages = cclamp(200 * 1024 / kStageBytes, 2, 4);
  static constexpr int kLdC = BS + 8;
  static constexpr int kPartStride = BS * kLdC;  // floats between the warps' partial tiles
  static constexpr int kSmemBytes = cmax(kStages * kStageBytes, kWarpsK * kPartStride * 4) + BS * 2;
  static_assert(kStageBytes % 16 == 0 && kHaloElems * 2 % 16 == 0, "16-byte aligned tiles");
};

template <typename T, int BS>
__global__ void __launch_bounds__(256, 1) bsconv_halo_dw_kernel(const ConvHaloDwParams p) {
  using Cfg = ConvHaloDwConfig<T, BS>;
  constexpr int kStages = Cfg::kStages;
  constexpr int kRows = Cfg::kRows;
  unsigned char* const smem_raw = dynamic_smem();
  T* const zero_row = reinterpret_cast<T*>(smem_raw + Cfg::kSmemBytes - BS * 2);
  const RowGather& g = p.gather;
  const int taps = g.taps_h * g.taps_w;

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int wm = warp % Cfg::kWarpsM;
  const int wk = warp / Cfg::kWarpsM;
  const int b = blockIdx.x;
  const int64_t grp = blockIdx.y;
  const int2 item = __ldg(reinterpret_cast<const int2*>(p.items) + b);  // tap 0's: (channel block, k-block)
  const T* const x_col = static_cast<const T*>(p.x) + grp * p.x_group_stride + static_cast<int64_t>(item.x) * BS;
  const T* const dy_col = static_cast<const T*>(p.dy) + grp * p.dy_group_stride + static_cast<int64_t>(item.y) * BS;
  if (tid < BS / 8) reinterpret_cast<uint4*>(zero_row)[tid] = make_uint4(0, 0, 0, 0);

  const int64_t all_chunks = (p.rows + kRows - 1) / kRows;
  const int64_t per_split = (all_chunks + p.row_splits - 1) / p.row_splits;
  const int64_t first_chunk = min(static_cast<int64_t>(blockIdx.z) * per_split, all_chunks);
  const int64_t num_chunks = min(per_split, all_chunks - first_chunk);
  const int plane = g.rows_h * g.rows_w;

  auto load_stage = [&](int stage, int64_t chunk) {
    const int64_t n0 = (first_chunk + chunk) * kRows;
    T* const halo = reinterpret_cast<T*>(smem_raw + stage * Cfg::kStageBytes);
    T* const dys = halo + Cfg::kHaloElems;
    int* const masks = reinterpret_cast<int*>(dys + Cfg::kDyElems);
    load_halo_async<T, BS, Cfg::kHaloRows, Cfg::kLd, Cfg::kThreads>(halo, x_col, n0 + p.delta_min, p.halo_rows,
                                                                     p.rows, p.x_cols, tid);
    const int valid = static_cast<int>(p.rows - n0 < kRows ? p.rows - n0 : kRows);
    load_tile_async<T, kRows, BS, Cfg::kThreads>(dys, Cfg::kLd, dy_col + n0 * p.dy_cols, p.dy_cols, valid, tid);
    // Row tid's taps that stay inside the image (none past the last row). Plain
    // stores: read after the barrier that also publishes the stage's copies.
    static_assert(kRows == Cfg::kThreads, "one row per thread");
    int mask = 0;
    if (tid < valid) {
      const int rem = static_cast<int>((n0 + tid) % plane);
      const int h = rem / g.rows_w;
      const int w = rem - h * g.rows_w;
      for (int t = 0; t < taps; ++t) {
        const TapShift s = tap_shift(g, t);
        const bool inside = static_cast<unsigned>(h + s.oh) < static_cast<unsigned>(g.rows_h) &&
                            static_cast<unsigned>(w + s.ow) < static_cast<unsigned>(g.rows_w);
        mask |= (inside ? 1 : 0) << t;
      }
    }
    masks[tid] = mask;
  };

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_chunks) load_stage(s, s);
    cp_async_commit();
  }

  int shift[Cfg::kMaxTaps];  // halo row of tap t for row 0: delta_t - delta_min
#pragma unroll
  for (int t = 0; t < Cfg::kMaxTaps; ++t) shift[t] = t < taps ? tap_shift(g, t).delta - p.delta_min : 0;
  // ldmatrix.trans addressing of A = x^T (m = channel, k = row) and B = dy (k = row, n = channel).
  const int r = lane & 7;
  const int i = lane >> 3;
  const int a_row = (i >> 1) * 8 + r;              // + k0
  const int a_col = wm * 16 + (i & 1) * 8;
  const int b_row = (i & 1) * 8 + r;               // + k0
  const int b_col = (i >> 1) * 8;                  // + 16 per n-tile pair

  float acc[Cfg::kMaxTaps][1][Cfg::kNT][4] = {};
  int read_stage = 0;
  int write_stage = kStages - 1;
  for (int64_t c = 0; c < num_chunks; ++c) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (c + kStages - 1 < num_chunks) load_stage(write_stage, c + kStages - 1);
    cp_async_commit();

    const T* const halo = reinterpret_cast<const T*>(smem_raw + read_stage * Cfg::kStageBytes);
    const T* const dys = halo + Cfg::kHaloElems;
    const int* const masks = reinterpret_cast<const int*>(dys + Cfg::kDyElems);
#pragma unroll 2
    for (int kk = wk; kk < kRows / 16; kk += Cfg::kWarpsK) {
      const int k0 = kk * 16;
      uint32_t bf[Cfg::kNT / 2][4];
#pragma unroll
      for (int np = 0; np < Cfg::kNT / 2; ++np) ldsm_x4_t(bf[np], dys + (k0 + b_row) * Cfg::kLd + np * 16 + b_col);
      const int row = k0 + a_row;
      const int inside = masks[row];
#pragma unroll
      for (int t = 0; t < Cfg::kMaxTaps; ++t) {
        if (t < taps) {
          const T* src = ((inside >> t) & 1 ? halo + (row + shift[t]) * Cfg::kLd : zero_row) + a_col;
          uint32_t a[4];
          ldsm_x4_t(a, src);
#pragma unroll
          for (int np = 0; np < Cfg::kNT / 2; ++np) {
            mma_16x8x16<T>(acc[t][0][2 * np], a, bf[np][0], bf[np][1]);
            mma_16x8x16<T>(acc[t][0][2 * np + 1], a, bf[np][2], bf[np][3]);
          }
        }
      }
    }
    read_stage = read_stage + 1 == kStages ? 0 : read_stage + 1;
    write_stage = write_stage + 1 == kStages ? 0 : write_stage + 1;
  }

  // Per tap: the warps' partial tiles summed in warp order, to dw or to this split's partials.
  cp_async_wait<0>();
  __syncthreads();
  float* const cs = reinterpret_cast<float*>(smem_raw);
  const int64_t nnz = static_cast<int64_t>(taps) * p.nnz_per_tap;
#pragma unroll
  for (int t = 0; t < Cfg::kMaxTaps; ++t) {
    if (t >= taps) break;
    stage_acc<1, Cfg::kNT, BS>(cs + wk * Cfg::kPartStride, Cfg::kLdC, wm * 16, 0, acc[t], lane);
    __syncthreads();
    const int64_t block = static_cast<int64_t>(t) * p.nnz_per_tap + b;
    if (p.row_splits > 1) {
      float* const partial = p.partials + ((grp * p.row_splits + blockIdx.z) * nnz + block) * (BS * BS);
      store_tile<float, BS, BS, Cfg::kThreads, Cfg::kWarpsK>(cs, Cfg::kLdC, Cfg::kPartStride, partial, BS, BS, tid);
    } else {
      T* const out = static_cast<T*>(p.dw) + grp * p.dw_group_stride + block * (BS * BS);
      store_tile<T, BS, BS, Cfg::kThreads, Cfg::kWarpsK>(cs, Cfg::kLdC, Cfg::kPartStride, out, BS, BS, tid);
    }
    __syncthreads();
  }
}

}  // namespace jbs
