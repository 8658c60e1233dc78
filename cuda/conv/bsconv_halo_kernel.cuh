// Forward / input-gradient kernel of a stride-1 block-sparse convolution whose
// output has the size of its input ("SAME"-like, any kernel, dilation and
// padding that keep the size): the taps share one activation tile (the halo).
//
// Why: the implicit-GEMM path (bsmm_group_wgmma_kernel with GATHER) treats
// every (tap, channel block) as a separate item and loads a 256 x BS gathered
// tile for each, so a 3x3 conv moves 9 tiles through L2 per channel block, and
// each carries only its P column blocks' work. Here, with row space and source
// the same image size, tap t reads source row n + delta_t (delta_t = oh_t * W +
// ow_t) or, where (h + oh_t, w + ow_t) leaves the image, zero. So a CTA with
// rows n0..n0+255 loads rows n0 + min(delta) .. n0 + 255 + max(delta) of channel
// block c once (256 + 2 W + 2 rows for a 3x3 conv: 1.26x a tile instead of 9x)
// and runs every tap from shared memory, each lane pointing its ldmatrix row at
// the shifted row or at a row of zeros.
//
// CTA = (row tile of 256, group of P = 128 / BS output block columns), two
// warpgroups of 128 rows, as bsmm_group_wgmma_kernel; an item is a channel
// block in the union of the group's columns, and its slot holds the halo plus,
// per tap, the group's blocks. At bs 16 they form one 16 x 128 operand with
// zeros for absent columns, so a tap is one m64 x 128 wgmma per half instead of
// one m64 x 16 per present block (~4 at density 1/2): 1.0-1.13x faster at
// densities 1/8..1/2 (benchmarks/results/conv_halo_ab_h100_2026-11-24_session14.md).
// At bs 32 the same zero-filled operand was 1.08-1.25x slower than one m64 x 32
// wgmma per present block, which bs 32 keeps (absent blocks are then neither
// loaded nor multiplied).
//
// At bs 32 the next item's copies are issued during this item's taps, two taps'
// worth after each tap's wgmmas, so their ~25 instructions per copy overlap the
// tensor cores instead of delaying the first tap (1.05x at 3x3, density 1/2). At
// bs 16 that was 1.09x slower than issuing them all before the first tap (not
// profiled; its taps are short, so the last copies may land late); it keeps the latter.
//
// The group tables are the conv's (jbs/_src/tables.py build_conv_tables): their
// union items are tap-major with the same channel blocks for every tap, so the
// first (end - beg) / taps items are tap 0's, and tap t's block is tap 0's plus
// t * nnz_per_tap. Two stages: the next item's loads overlap this one's MMAs.
// Taps run in table order with fixed rows per warp: bitwise deterministic.
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/dtype.cuh"
#include "common/ptx.cuh"
#include "common/smem.cuh"
#include "common/wgmma.cuh"
#include "conv/halo_tile.cuh"
#include "conv/row_gather.h"
#include "conv/tap_blocks.cuh"
#include "matmul/bsmm_group_kernel.cuh"  // GroupParams, GroupCta
#include "matmul/group_item_mma.cuh"
#include "matmul/tile_io.cuh"

namespace jbs {

struct ConvHaloParams : GroupParams {
  int nnz_per_tap;  // weight blocks of one tap: w holds taps x nnz_per_tap
  int delta_min;    // min over taps of delta_t (source row - output row)
  int halo_rows;    // 256 + max(delta_t) - delta_min, <= ConvHaloConfig::kHaloRows
};

template <typename T, int BS>
struct ConvHaloConfig {
  static_assert(kIs16Bit<T> && (BS == 16 || BS == 32), "conv halo kernel: 16-bit types, blocks of 16 or 32");
  static constexpr int kP = 128 / BS;
  static constexpr int kTN = 256;
  static constexpr int kThreads = 256;
  static constexpr int kStages = 2;
  static constexpr int kLdH = BS + 8;  // 80 / 48-byte rows: 8 consecutive rows hit distinct banks
  static constexpr int kChunksPerRow = BS / 8;
  // Halo capacity: 256 + 192 rows at bs 32, + 256 at bs 16 (a whole number of 16-byte
  // copies per thread either way), e.g. a 3x3 conv on images up to 95 / 127 pixels wide.
  static constexpr int kHaloRows = BS == 32 ? 448 : 512;
  static_assert(kHaloRows * kChunksPerRow % kThreads == 0, "whole copies per thread");
  static constexpr int kHaloElems = kHaloRows * kLdH;
  static_assert(kHaloElems * sizeof(T) % 128 == 0, "weight blocks start on a core-matrix boundary");
  // bs 16: each tap's P blocks as one zero-filled N = 128 operand (see the top).
  static constexpr bool kDenseN = BS == 16;
  static constexpr bool kInterleaveCopies = !kDenseN;  // see the top
  // Taps whose fragments load before one batch of wgmmas and one wait: 3 was 1.03-1.11x
  // faster than 1 (2: 1.02-1.07x) in session 14's bench; more would spill at bs 32 (237
  // registers at 3).
  static constexpr int kTapsPerWait = 3;
  static constexpr int kBlockElems = BS * BS;
  static constexpr int kTapElems = kP * kBlockElems;  // one tap's P blocks
  // The kernel's shared-memory opt-in, the same for every launch (common/launch.cuh
  // sets it once per kernel): sm_90's 227 KiB less launch_kernel's 1 KiB of slack.
  static constexpr int kOptInBytes = 226 * 1024;
  // A slot: the halo, then taps x P blocks; after both slots one row of zeros.
  static constexpr int64_t slot_bytes(int taps) {
    return (static_cast<int64_t>(kHaloElems) + static_cast<int64_t>(taps) * kTapElems) * sizeof(T);
  }
  static constexpr int64_t smem_bytes(int taps) {
    const int64_t ring = kStages * slot_bytes(taps);
    const int64_t epilogue = 128 * (128 + 8) * 4;
    return (ring > epilogue ? ring : epilogue) + BS * static_cast<int64_t>(sizeof(T));
  }
};

template <typename T, int BS, bool TRANS>
__global__ void __launch_bounds__(256, 1) bsconv_halo_kernel(const ConvHaloParams p) {
  using Cfg = ConvHaloConfig<T, BS>;
  constexpr int kP = Cfg::kP;
  constexpr int kTN = Cfg::kTN;
  constexpr int kKSteps = BS / 16;
  unsigned char* const smem_raw = dynamic_smem();
  T* const smem = reinterpret_cast<T*>(smem_raw);
  const RowGather& g = p.gather;
  const int taps = g.taps_h * g.taps_w;
  const int64_t slot_elems = Cfg::slot_bytes(taps) / static_cast<int64_t>(sizeof(T));
  T* const zero_row = smem + Cfg::kStages * slot_elems;

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int wg = warp >> 2;
  const GroupCta<T, BS, kTN, true> cta(p);
  const int items = (cta.end - cta.beg) / taps;  // tap 0's: the group's channel blocks
  const int32_t* const rows_of = p.group_items + static_cast<int64_t>(cta.beg) * (1 + kP);
  if (tid < BS / 8) reinterpret_cast<uint4*>(zero_row)[tid] = make_uint4(0, 0, 0, 0);

  // The halo: source rows lo .. lo + halo_rows - 1 (zeros outside the batch).
  const int64_t lo = cta.n0 + p.delta_min;
  auto load_halo = [&](T* dst, int block) {
    load_halo_async<T, BS, Cfg::kHaloRows, Cfg::kLdH, Cfg::kThreads>(
        dst, cta.in_group + static_cast<int64_t>(block) * BS, lo, p.halo_rows, p.rows, p.in_cols, tid);
  };
  // One tap's P blocks as wgmma B operands (conv/tap_blocks.cuh), of the item last
  // given to copies.for_item.
  TapBlockCopies<T, BS, TRANS, Cfg::kDenseN, Cfg::kThreads> copies(tid);
  auto load_tap = [&](T* dst, int shift) { copies.issue(dst, cta.w, shift); };
  auto load_item = [&](T* slot, const int (&row)[1 + kP]) {
    load_halo(slot, row[0]);
    for (int t = 0; t < taps; ++t) load_tap(slot + Cfg::kHaloElems + t * Cfg::kTapElems, t * p.nnz_per_tap);
  };
  auto mask_of = [](const int (&row)[1 + kP]) { return present_columns<kP>(row); };
  auto read_row = [&](int i, int (&row)[1 + kP]) { read_union_row<kP>(rows_of, i, row); };
  // This lane's ldmatrix rows (one per m64 half): tile row, and its pixel's (h, w).
  const int row_in_wg = (warp & 3) * 16;
  const int plane = g.rows_h * g.rows_w;
  int tile_row[2], h_of[2], w_of[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    tile_row[h] = wg * 128 + h * 64 + row_in_wg + (lane & 15);
    const int64_t n = cta.n0 + tile_row[h];
    const int rem = static_cast<int>((n < p.rows ? n : 0) % plane);
    h_of[h] = rem / g.rows_w;
    w_of[h] = rem - h_of[h] * g.rows_w;
  }
  const int k_half = (lane >> 4) * 8;

  int next[1 + kP];
  unsigned mask_next = 0;
  if (items > 0) {
    read_row(0, next);
    copies.for_item(next);
    load_item(smem, next);
    mask_next = mask_of(next);
    if (items > 1) read_row(1, next);
  }
  cp_async_commit();

  // Per m64 half: kDenseN, the 128 columns as one m64 x 128 accumulator; otherwise one
  // m64 x BS accumulator per block column (the same registers in the same order).
  using Acc = std::conditional_t<Cfg::kDenseN, float[2][1][128 / 8][4], float[2][kP][1][BS / 8][4]>;
  Acc acc = {};
  for (int i = 0; i < items; ++i) {
    cp_async_wait<0>();
    fence_proxy_async();  // cp.async writes -> visible to wgmma's reads
    __syncthreads();      // item i has landed for all; everybody is done with item i - 1's slot
    const unsigned mask = mask_next;
    const bool more = i + 1 < items;
    T* const next_slot = smem + ((i + 1) & 1) * slot_elems;
    if (more) mask_next = mask_of(next);
    if (more) copies.for_item(next);
    if (more && !Cfg::kInterleaveCopies) load_item(next_slot, next);

    const T* const halo = smem + (i & 1) * slot_elems;
    const T* const ws = halo + Cfg::kHaloElems;
    // kTapsPerWait taps at a time: all their fragments, then their wgmmas, then one
    // wait. (Loading the next taps' fragments while wgmmas run made ptxas serialize
    // every wgmma; the other warpgroup's wgmmas fill the tensor cores meanwhile.)
    for (int t0 = 0; t0 < taps; t0 += Cfg::kTapsPerWait) {
      uint32_t frag[Cfg::kTapsPerWait][2][kKSteps][1][4];
#pragma unroll
      for (int j = 0; j < Cfg::kTapsPerWait; ++j) {
        const TapShift tap = tap_shift(g, t0 + j < taps ? t0 + j : taps - 1);  // past the end: not multiplied
        const int oh = tap.oh, ow = tap.ow;
        const int shift = tap.delta - p.delta_min;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const bool inside = static_cast<unsigned>(h_of[h] + oh) < static_cast<unsigned>(g.rows_h) &&
                              static_cast<unsigned>(w_of[h] + ow) < static_cast<unsigned>(g.rows_w);
          const T* const src = (inside ? halo + (tile_row[h] + shift) * Cfg::kLdH : zero_row) + k_half;
#pragma unroll
          for (int ks = 0; ks < kKSteps; ++ks) ldsm_x4(frag[j][h][ks][0], src + ks * 16);
        }
      }
      wgmma_fence();
#pragma unroll
      for (int j = 0; j < Cfg::kTapsPerWait; ++j) {
        const int t = t0 + j;
        if (t >= taps) break;
        if constexpr (Cfg::kDenseN) {
          // Descriptor strides in bytes (core matrices are 128 B): K-major, the next core
          // matrix along k is adjacent and the next 8 n rows are BS/8 further; N-major, the
          // next along n is adjacent and the next 8 k rows are 16 further.
          constexpr uint32_t kLbo = TRANS ? 128 : 16 * 128;
          constexpr uint32_t kSbo = TRANS ? BS / 8 * 128 : 128;
          static_assert(kKSteps == 1, "one k-step at bs 16");
          const uint64_t desc = wgmma_desc(ws + t * Cfg::kTapElems, kLbo, kSbo);
#pragma unroll
          for (int h = 0; h < 2; ++h) wgmma_rs<T, 128, TRANS ? 0 : 1>(acc[h][0], frag[j][h][0][0], desc);
        } else {
          issue_item_wgmmas<T, BS, TRANS>(acc, frag[j], ws + t * Cfg::kTapElems, mask);
        }
      }
      wgmma_commit();
      // The next item's copies (its halo, then two taps' worth per tap) while the wgmmas run.
      if (Cfg::kInterleaveCopies && more) {
        if (t0 == 0) load_halo(next_slot, next[0]);
        for (int u = 2 * t0; u < 2 * (t0 + Cfg::kTapsPerWait) && u < taps; ++u) {
          load_tap(next_slot + Cfg::kHaloElems + u * Cfg::kTapElems, u * p.nnz_per_tap);
        }
      }
      wgmma_wait<0>();
    }
    if (more && i + 2 < items) read_row(i + 2, next);
    cp_async_commit();
  }

  cp_async_wait<0>();
  __syncthreads();
  float* const cs = reinterpret_cast<float*>(smem_raw);
  if constexpr (Cfg::kDenseN) {
    auto stage_rows = [&](float* s) {
#pragma unroll
      for (int h = 0; h < 2; ++h) stage_acc<1, 128 / 8, 128>(s, kGroupTileLdC, h * 64 + row_in_wg, 0, acc[h], lane);
    };
    store_group_tile<T, BS, Cfg::kThreads>(stage_rows, cs, cta.out_row, p.out_cols, cta.valid_rows, cta.columns, wg,
                                           tid);
  } else {
    store_group_wgmma_tile<T, BS, Cfg::kThreads>(acc, cs, cta.out_row, p.out_cols, cta.valid_rows, cta.columns, wg,
                                                 row_in_wg, lane, tid);
  }
}

}  // namespace jbs
