// Large-N forward / input-gradient kernel over column groups, fed by TMA: the wgmmas
// read B (and A, but at 16-bit bs 32 and fp32) straight from the slot TMA filled. 16-bit
// types at blocks of 32 or 64, fp32 (as tf32) at 32, and at 64 as 32 x 32 quarters
// (SPLIT); sm_90a.
//
// The work is that of the other column-group kernels (bsmm_group_wgmma_kernel.cuh):
// a CTA owns a tile of 256 rows x P output block columns and walks the union of its
// columns' input blocks ("items", matmul tables), so each activation tile it loads
// feeds every block of the item. P = 128 / BS (the paired groups) at 16-bit bs 32; where a
// tile row is 128 bytes (16-bit bs 64, fp32 bs 32) P = 192 / BS (the wide groups,
// tables.py wide_group_width): 192 fp32 accumulators per consumer thread, and at bs 64
// 1.73 blocks per item at density 1/2 instead of 1.34, which ran 1.17x faster in the
// replica (benchmarks/NOTES.md, session 31). A group's columns are not consecutive: they
// are chosen to share input blocks (jbs/_src/tables.py shared_input_order), so the group has
// fewer union items, i.e. fewer activation tiles to load (1.02-1.11x at 8192^3, session 36),
// and the epilogue writes each to the output column the group's column map names. What
// differs from the other group kernels is the feed:
//  * the wgmma group kernels copy the activation tile and the blocks with 16-byte
//    cp.asyncs from 128 threads and load A fragments into registers (RS wgmma).
//    They moved ~4.4-4.7 TB/s from L2 and ran at 31-39% of the dense rate at bs 64
//    (benchmarks/NOTES.md, sessions 4-9);
//  * here a loader thread issues a 2-D TMA box per operand: the activation tile (BS
//    channels x 256 rows) and each present weight block (BS x BS), both swizzled by
//    their row width (128 bytes at bs 64, 64 at bs 32). The consumers' wgmmas read
//    A K-major and B N-major (fwd) or K-major (dx, W^T) straight from the slot; at
//    16-bit bs 32 A comes from registers, loaded once per item (kAFromRegisters), and at
//    fp32 bs 32 one m64 half at a time (kAHalves; not split).
//    A stand-alone replica measured 7.9 TB/s into shared memory at bs 64, 1/2:
//    1.84x the wgmma group kernel (benchmarks/NOTES.md, session 30).
//  * fp32 runs as tf32, whose wgmma reads B K-major only: the dx reads W^T as
//    stored, and the fwd reads a transposed copy of the blocks (rounded to tf32),
//    made first into the scratch result (matmul/transpose_blocks.cuh). The other
//    fp32 operands reach the tensor cores as stored, which drop the mantissa bits
//    tf32 lacks (truncation, where the packed copies of the older kernels round:
//    within the same error bound, tests/helpers.py: tolerance). A tile row of 32
//    floats is 128 bytes, the widest swizzle, so the kernel runs at bs 32, and bs 64
//    blocks reach it as their quarters (SPLIT, below).
//
// Mid N (64 < N < 512), a tile per group leaves most SMs idle (43-64 groups of 8192 columns
// at bs 32-64): there each group's items are cut into `slices` (blockIdx.z), whose fp32
// partials a second kernel adds in order (GroupTmaParams::slices).
//
// Warp specialized (common/warp_roles.cuh): four loader threads (kLoaders, lane 0 of each
// loader warp, every fourth item) fill a ring of slots, each as soon as both consumer
// warpgroups have released it; the consumers (128 rows each, two m64 halves) keep one
// item's wgmmas in flight while they wait for the next. Rows past the end load as zeros
// (TMA) and are not stored. Items are summed in table order by fixed warpgroups: bitwise
// deterministic.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <type_traits>

#include "common/dtype.cuh"
#include "common/mbarrier.cuh"
#include "common/ptx.cuh"
#include "common/smem.cuh"
#include "common/swizzle.cuh"  // tma_swizzled_offset
#include "common/tma.cuh"
#include "common/warp_roles.cuh"
#include "common/wgmma.cuh"
#include "matmul/bsmm.h"                 // wide_group_width
#include "matmul/bsmm_blocks_kernel.cuh"  // FwdDxOperands
#include "matmul/tile_io.cuh"

namespace jbs {

template <typename T, int BS>
inline constexpr bool kGroupTmaSupported = (kIs16Bit<T> && (BS == 32 || BS == 64)) ||
                                           (std::is_same_v<T, float> && BS == 32);

struct GroupTmaParams : FwdDxOperands {
  // The tensor maps count 16-bit units (an fp32 value is two):
  CUtensorMap in_map;  // `in` as (in_cols, rows, input groups) in boxes of BS channels x 256 rows
  CUtensorMap w_map;   // the weight blocks (fp32 fwd: their transposed copy) as (BS, nnz * BS rows,
                       // weight groups) in boxes of BS x BS
  const int32_t* group_offsets;  // (num_groups + 1)
  const int32_t* group_items;    // (union items, 1 + P): input block, then column c's block or -1
                                 // (the wide groups where tile rows are 128 bytes)
  const int32_t* group_columns;  // (num_groups * P): output block column c of group q is
                                 // [q * P + c], -1 for none (groups of columns that share
                                 // inputs); null: q * P + c (columns in order)
  int num_groups;
  int row_tiles;
  // Item slices (blockIdx.z): 1, or more where a group's row tiles alone leave SMs idle
  // (mid N). Slice s walks the s-th of `slices` equal shares of its group's items and writes
  // an fp32 partial, (G, slices, rows, out_cols) at `partials`, which sum_splits_kernel then
  // adds in slice order (bitwise deterministic).
  int slices;
  float* partials;
  int in_group_step;  // 1, or 0 where `in` is shared by the weight groups
  int w_group_step;   // the same for the weights
};

// Output block columns per CTA: the wide groups' (192 columns) where the tile rows are 128
// bytes (16-bit bs 64, fp32 bs 32), the ordinary groups' 128 / BS at 16-bit bs 32.
template <typename T, int BS>
inline constexpr int kGroupTmaWidth = BS * sizeof(T) == 128 ? wide_group_width(BS) : 128 / BS;

// Where A comes from registers one m64 half at a time (GroupTmaConfig::kAHalves): fp32 at bs 32.
template <typename T, int BS>
inline constexpr bool kGroupTmaAHalves = std::is_same_v<T, float> && BS == 32;

// The consumers' registers: 192 accumulators + 32 of A fragments need 240 (the loaders, a TMA
// issue loop, keep 24).
template <typename T, int BS>
using GroupTmaRoles = std::conditional_t<kGroupTmaAHalves<T, BS>, WarpRoles<24, 240>, WarpRoles<40, 232>>;

template <typename T, int BS>
struct GroupTmaConfig : GroupTmaRoles<T, BS> {
  static constexpr int kP = kGroupTmaWidth<T, BS>;
  static constexpr int kTN = 256;
  static constexpr int kRowBytes = BS * static_cast<int>(sizeof(T));  // one swizzle span: 128 or 64 bytes
  static constexpr int kKSteps = kRowBytes / 32;  // a k-step is 32 bytes of a row: k16 (16-bit) or k8 (tf32)
  // How the wgmmas read B: K-major for the dx (W^T as stored) and for every tf32 product.
  static constexpr bool kBKMajor(bool trans) { return trans || !kIs16Bit<T>; }
  static constexpr int kTileBytes = kTN * kRowBytes;
  static constexpr int kBlockBytes = BS * kRowBytes;
  static constexpr int kSlotBytes = kTileBytes + kP * kBlockBytes;
  // As many slots as 224 KB hold, at most 8: 4 with 128-byte rows (56 KB at bs 64, 48 KB for
  // fp32), 8 with 64-byte rows (16-bit bs 32).
  static constexpr int kStages = 224 * 1024 / kSlotBytes < 8 ? 224 * 1024 / kSlotBytes : 8;
  // Threads issuing the TMA copies, each for every kLoaders-th item. One thread's issue rate
  // (~180 ns per item of ~3 boxes, whatever their size) bounded the feed at bs 32: with two,
  // the replica's feed alone ran 1.13x faster and jbs's 16-bit bs 32 fwd 1.02 / 1.10 / 1.14x at
  // 1/2 / 1/4 / 1/8 (fp32 1.00 / 1.00 / 1.04x; 16-bit bs 64, larger items, within 1%)
  // (benchmarks/NOTES.md, session 32). Four (one per loader warp) ran 16-bit bs 32 with A from
  // registers 1.00 / 1.01 / 1.02x faster again at 1/2 / 1/4 / 1/8 (session 33).
  static constexpr int kLoaders = 4;
  static_assert(kStages % kLoaders == 0, "each slot is filled by one loader");
  static constexpr int kLdC = kP * BS + 8;  // the epilogue's staged fp32 rows, in the drained ring
  static_assert(2 * 128 * kLdC * 4 <= kStages * kSlotBytes, "the epilogue stages both warpgroups' rows");
  // + 1 KB to align the ring to the swizzle's atoms.
  static constexpr int kSmemBytes = kStages * kSlotBytes + 1024;
  // sm_90's opt-in limit per block (227 KB), less ~1 KB for the static barriers.
  static_assert(kSmemBytes + 1024 <= 232448, "the ring exceeds the opt-in shared memory");
  static constexpr uint64_t kSwizzleMode = kRowBytes == 128 ? 1 : 2;  // descriptor layout type: 128- / 64-byte swizzle
  // A from registers (RS wgmma) where the accumulators leave room for two items' A fragments
  // (16-bit bs 32: 128 + 2 x 16 registers): each warp loads its rows of the activation tile
  // once per item by ldmatrix, where SS wgmmas re-read them from shared memory for every
  // present block, which caps m64n32 SS wgmmas at 67% of the tensor rate (shared-memory reads:
  // 3 KB per 16 tensor cycles against 128 bytes per cycle). With two loaders, 1.23 / 1.19 /
  // 1.12x at 1/2 / 1/4 / 1/8 in the replica (with one, the feed hid most of it: 1.11x at 1/2;
  // benchmarks/NOTES.md, session 32), 1.10 / 1.06 / 1.05x in jbs (session 33). The 192-column
  // configurations hold A in halves at fp32 (kAHalves) and keep SS at 16-bit bs 64.
  static constexpr bool kAFromRegisters = kP * BS <= 128;
  // fp32 at bs 32 (192 columns): SS m64n32k8 tf32 wgmmas hit the same cap (2 KB of A + 1 KB of
  // B per 16 tensor cycles), but beside 192 accumulators only one buffer per m64 half fits
  // (32 registers; the consumers take 240): each half's A is loaded once per item and its
  // wgmmas committed as a group of their own, so a half's next load waits only for that half's
  // previous group. Shared-memory bytes per item at 1/2 (3.05 blocks): 44 KB written + 48 KB of
  // B + 96 KB of A (SS) -> 32 KB of A. Ran 1.14 / 1.04 / 1.01x at 1/2 / 1/4 / 1/8; the same at
  // 16-bit bs 64 (whose SS cap is ~96%) ran 0.95-0.97x, and one commit group per (half, k-step)
  // with half an item in flight 0.80-0.92x (benchmarks/NOTES.md, session 34).
  static constexpr bool kAHalves = kGroupTmaAHalves<T, BS>;
  static_assert(!(kAFromRegisters && kAHalves), "one way of holding A");
  static constexpr uint32_t kAtomBytes = 8 * kRowBytes;      // 8 rows: the descriptor's stride (SBO)
  // CTAs run in bands of kBand row tiles x every group (the band's row tiles
  // innermost), so a wave shares a few row tiles' activations and its groups'
  // weights in L2. 4 measured 1-8% faster than 8 (benchmarks/NOTES.md, session 30).
  static constexpr int kBand = 4;
  // Launched in clusters of two CTAs where the grid allows (adjacent row tiles of a group,
  // or of two where a band's row tiles are odd;
  // nothing is shared): 1-4% faster in the replica, likely from where the pairs are placed
  // (benchmarks/NOTES.md, session 31).
  static constexpr int kCluster = 2;
};

template <typename T, int BS>
__device__ __forceinline__ uint64_t group_tma_desc(const void* smem) {
  using Cfg = GroupTmaConfig<T, BS>;
  return wgmma_desc(smem, 16, Cfg::kAtomBytes) | (Cfg::kSwizzleMode << 62);
}

// SPLIT: fp32 at bs 64, run at bs 32 over the bs 64 layout's wide groups (3 columns of 64 =
// kP = 6 columns of 32). Each bs 64 item goes through the ring as two items, the halves of its
// input block (r = 0, 1), and each present 64 x 64 block as its two 32 x 32 sub-blocks of that
// K half (h = 0, 1, the N halves), loaded as one 32 x 64 box at column 32 r of the block, of
// the weights as stored (dx) or of their transposed copy (fwd), both K-major. Items carry
// 3.43 / 2.59 / 2.27 sub-blocks at density 1/2 / 1/4 / 1/8 against bs 32's 3.05 / 1.82 / 1.36
// (benchmarks/NOTES.md, session 34). A block's two sub-blocks, always present together and
// adjacent in the slot, are one m64n64 wgmma's B: half the wgmmas and B descriptors of n32
// ones, 1.10 / 1.07 / 1.04x at 1/2 / 1/4 / 1/8 (fwd; session 35). With m64n64 wgmmas A is
// read from the slot (SS) as at 16-bit bs 64, not loaded in halves: dx 1.04 / 1.03 / 1.01x.
template <typename T, int BS, bool TRANS, bool SPLIT = false>
__global__ void __launch_bounds__(GroupTmaConfig<T, BS>::kThreads, 1)
    bsmm_group_tma_kernel(const __grid_constant__ GroupTmaParams p) {
  using Cfg = GroupTmaConfig<T, BS>;
  constexpr int kP = Cfg::kP;
  constexpr int kStages = Cfg::kStages;
  static_assert(!SPLIT || (std::is_same_v<T, float> && BS == 32), "SPLIT: fp32 at bs 64 through bs 32");
  constexpr int kTableCols = SPLIT ? kP / 2 : kP;  // block columns of a group-table row
  __shared__ uint64_t full[kStages], empty[kStages];
  unsigned char* const raw = dynamic_smem();
  unsigned char* const ring = raw + ((1024 - (smem_u32(raw) & 1023)) & 1023);

  // blockIdx.x -> (row tile, group) in bands of kBand row tiles; blockIdx.y = weight group.
  const int per_band = Cfg::kBand * p.num_groups;
  const int band = static_cast<int>(blockIdx.x) / per_band, in_band = static_cast<int>(blockIdx.x) % per_band;
  const int band_rows = min(Cfg::kBand, p.row_tiles - band * Cfg::kBand);
  const int group = in_band / band_rows;
  const int row_tile = band * Cfg::kBand + in_band % band_rows;
  const int g = static_cast<int>(blockIdx.y);
  const int slice = static_cast<int>(blockIdx.z);
  const int group_beg = __ldg(p.group_offsets + group), group_len = __ldg(p.group_offsets + group + 1) - group_beg;
  const int beg = group_beg + static_cast<int>(int64_t{group_len} * slice / p.slices);
  const int end = group_beg + static_cast<int>(int64_t{group_len} * (slice + 1) / p.slices);
  const int first = SPLIT ? 2 * beg : beg, last = SPLIT ? 2 * end : end;  // the ring's items
  auto table_row = [&](int i) {  // the group-table row of ring item i
    return p.group_items + static_cast<int64_t>(SPLIT ? i >> 1 : i) * (1 + kTableCols);
  };
  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(full + s, 1);                           // the loader's arrival with the bytes
      mbarrier_init(empty + s, Cfg::kConsumerThreads / 32);  // one arrival per consumer warp
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  if (tid >= Cfg::kConsumerThreads) {
    warpgroup_reg_dealloc<Cfg::kLoaderRegs>();
    // Lane 0 of the loader warpgroup's first kLoaders warps: loader l fills the slots of items
    // first + l, first + l + kLoaders, ... (slots l, l + kLoaders, ...: each slot has one loader).
    const int loader = (tid - Cfg::kConsumerThreads) / 32;
    if ((tid & 31) == 0 && loader < Cfg::kLoaders) {
      const int in_g = g * p.in_group_step, w_g = g * p.w_group_step;
      for (int i = first + loader; i < last; i += Cfg::kLoaders) {
        const int stage = (i - first) % kStages;
        const uint32_t round = static_cast<uint32_t>((i - first) / kStages);
        const int32_t* row = table_row(i);
        int blocks[kTableCols];
        int count = 0;
#pragma unroll
        for (int c = 0; c < kTableCols; ++c) {
          blocks[c] = __ldg(row + 1 + c);
          count += blocks[c] >= 0 ? (SPLIT ? 2 : 1) : 0;
        }
        const int input = SPLIT ? 2 * __ldg(row) + (i & 1) : __ldg(row);
        mbarrier_wait(empty + stage, (round & 1) ^ 1);
        mbarrier_arrive_expect_tx(full + stage, Cfg::kTileBytes + count * Cfg::kBlockBytes);
        unsigned char* const slot = ring + stage * Cfg::kSlotBytes;
        // (the maps count 16-bit units: an fp32 channel is two)
        tma_load_5d(slot, &p.in_map, input * Cfg::kRowBytes / 2, row_tile * Cfg::kTN, in_g, 0, 0, full + stage);
#pragma unroll
        for (int c = 0; c < kTableCols; ++c) {
          if (blocks[c] >= 0) {
            if constexpr (SPLIT) {
              // Both N halves of the block in one 32 x 64 box: sub-blocks 2 c and 2 c + 1.
              tma_load_5d(slot + Cfg::kTileBytes + 2 * c * Cfg::kBlockBytes, &p.w_map, (i & 1) * Cfg::kRowBytes / 2,
                          blocks[c] * 2 * BS, w_g, 0, 0, full + stage);
            } else {
              tma_load_5d(slot + Cfg::kTileBytes + c * Cfg::kBlockBytes, &p.w_map, 0, blocks[c] * BS, w_g, 0, 0,
                          full + stage);
            }
          }
        }
      }
    }
    return;
  }

  warpgroup_reg_alloc<Cfg::kConsumerRegs>();
  const int lane = tid & 31, warp = tid >> 5;
  const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0);  // uniform, so the MMA branches are too
  constexpr bool kKMajor = Cfg::kBKMajor(TRANS);
  // Accumulators per m64 half and wgmma column: split, one m64n64 wgmma covers a block's two
  // sub-blocks (2 c and 2 c + 1, adjacent in the slot), which are always present together.
  constexpr int kAccN = SPLIT ? 2 * BS : BS;
  constexpr int kAccCols = kP * BS / kAccN;
  float acc[2][kAccCols][1][kAccN / 8][4] = {};
  // RS: two buffers of one item's A fragments (both m64 halves, every k-step), so the next
  // item's loads never touch registers the previous item's wgmmas may still read.
  uint32_t a_frag[Cfg::kAFromRegisters ? 2 : 1][2][Cfg::kKSteps][4];
  // A in halves (Cfg::kAHalves) at fp32 bs 32, but not split: there the wgmmas are m64n64,
  // whose SS form reads 2 KB of A and 2 KB of B per 32 tensor cycles, as 16-bit bs 64's.
  constexpr bool kAHalves = Cfg::kAHalves && !SPLIT;
  uint32_t a_half[kAHalves ? 2 : 1][Cfg::kKSteps][4];  // kAHalves: [m64 half]
  // ldmatrix x4 of a k-step: lanes 0-15 address rows 0-15 at its first 16 bytes, lanes 16-31
  // the same rows 16 bytes further (the m16 x k16 fragment's four 8 x 8 matrices; for fp32,
  // 8 rows x 4 words each, which is the tf32 m16 x k8 fragment).
  const int lane_row = wg * 128 + (warp & 3) * 16 + (lane & 15);
  // Item i's present columns come from its row of the group table (read-only), not from the
  // loaders through shared memory: lane c loads column c's block, one item ahead so that the
  // load's latency hides behind the item before. A mask word in shared memory, written by the
  // loaders and read here, ordered by the slot's mbarriers, ran ~1% faster at 16-bit bs 32, but
  // racecheck, which does not follow that ordering, reported it once several loaders wrote it;
  // two items ahead ran ~1% slower again (benchmarks/NOTES.md, session 33).
  auto column_block = [&](int i) {
    return lane < kP && i < last ? __ldg(table_row(i) + 1 + (SPLIT ? lane >> 1 : lane)) : -1;
  };
  int block_of_lane = column_block(first);
  int stage = 0, previous = -1;
  uint32_t round = 0;
  // B's k-step in descriptor units (16 bytes): K-major, 32 bytes along its rows as A's;
  // N-major (16-bit fwd), 16 of its rows further.
  auto b_step = [](int ks) -> uint64_t { return kKMajor ? 2 * ks : ks * 16 * Cfg::kRowBytes / 16; };
  auto consume = [&](int i, auto buffer) {
    [[maybe_unused]] constexpr int kBuf = decltype(buffer)::value;
    const unsigned present = __ballot_sync(0xffffffffu, block_of_lane >= 0);
    block_of_lane = column_block(i + 1);
    mbarrier_wait(full + stage, round & 1);
    unsigned char* const slot = ring + stage * Cfg::kSlotBytes;
    if constexpr (Cfg::kAFromRegisters) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int ks = 0; ks < Cfg::kKSteps; ++ks) {
          const int r = lane_row + h * 64;
          ldsm_x4(a_frag[kBuf][h][ks], slot + tma_swizzled_offset<Cfg::kRowBytes>(r, ks * 2 + (lane >> 4)));
        }
      }
    }
    if constexpr (kAHalves) {
      // One commit group per half: before half h's loads, the group that last read a_half[h]
      // (the previous item's half h) must retire; before half 1's, the previous item's both
      // have, so its slot is released there.
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        wgmma_wait<1>();
        if (h == 1 && previous >= 0) mbarrier_arrive_warp(empty + previous, lane);
#pragma unroll
        for (int ks = 0; ks < Cfg::kKSteps; ++ks) {
          ldsm_x4(a_half[h][ks], slot + tma_swizzled_offset<Cfg::kRowBytes>(lane_row + h * 64, ks * 2 + (lane >> 4)));
        }
        wgmma_fence();
#pragma unroll
        for (int c = 0; c < kAccCols; ++c) {
          if (present & (1u << (c * kAccN / BS))) {
            const uint64_t b = group_tma_desc<T, BS>(slot + Cfg::kTileBytes + c * kAccN / BS * Cfg::kBlockBytes);
#pragma unroll
            for (int ks = 0; ks < Cfg::kKSteps; ++ks) {
              wgmma_rs<T, kAccN, kKMajor ? 0 : 1>(acc[h][c][0], a_half[h][ks], b + b_step(ks));
            }
          }
        }
        wgmma_commit();
      }
      previous = stage;
      if (++stage == kStages) stage = 0, ++round;
      return;
    }
    wgmma_fence();
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint64_t a = group_tma_desc<T, BS>(slot + (wg * 128 + h * 64) * Cfg::kRowBytes);
#pragma unroll
      for (int c = 0; c < kAccCols; ++c) {
        if (present & (1u << (c * kAccN / BS))) {
          const uint64_t b = group_tma_desc<T, BS>(slot + Cfg::kTileBytes + c * kAccN / BS * Cfg::kBlockBytes);
#pragma unroll
          for (int ks = 0; ks < Cfg::kKSteps; ++ks) {
            if constexpr (Cfg::kAFromRegisters) {
              wgmma_rs<T, kAccN, kKMajor ? 0 : 1>(acc[h][c][0], a_frag[kBuf][h][ks], b + b_step(ks));
            } else {
              wgmma_ss<T, kAccN, kKMajor ? 0 : 1, 0>(acc[h][c][0], a + 2 * ks, b + b_step(ks));  // A's k-step: 32 bytes
            }
          }
        }
      }
    }
    wgmma_commit();
    wgmma_wait<1>();  // the previous item's wgmmas have retired: release its slot (and A buffer)
    if (previous >= 0) mbarrier_arrive_warp(empty + previous, lane);
    previous = stage;
    if (++stage == kStages) stage = 0, ++round;
  };
  if constexpr (Cfg::kAFromRegisters) {
    // Unrolled by two, so each item's fragment buffer is a compile-time index (registers).
    for (int i = first; i < last; i += 2) {
      consume(i, std::integral_constant<int, 0>{});
      if (i + 1 < last) consume(i + 1, std::integral_constant<int, 1>{});
    }
  } else {
    for (int i = first; i < last; ++i) consume(i, std::integral_constant<int, 0>{});
  }
  wgmma_wait<0>();

  // Epilogue: both warpgroups' rows at once through the drained ring, then 16-byte stores.
  named_barrier_sync(1, Cfg::kConsumerThreads);  // no consumer reads the ring any more
  float* const cs = reinterpret_cast<float*>(ring) + wg * 128 * Cfg::kLdC;
  const int row_in_wg = (warp & 3) * 16;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int c = 0; c < kAccCols; ++c) {
      stage_acc<1, kAccN / 8, 128>(cs, Cfg::kLdC, h * 64 + row_in_wg, c * kAccN, acc[h][c], lane);
    }
  }
  named_barrier_sync(2 + wg, 128);
  const int64_t n0 = static_cast<int64_t>(row_tile) * Cfg::kTN + wg * 128;
  const int rows = static_cast<int>(p.rows - n0 < 128 ? p.rows - n0 : 128);
  // Output block columns of the group table (split: of 2 BS channels, each two of ours).
  constexpr int kTableBS = SPLIT ? 2 * BS : BS;
  const int table_cols = static_cast<int>(p.out_cols / kTableBS);
  T* const out = static_cast<T*>(p.out) + g * p.out_group_stride + n0 * p.out_cols;
  float* const partial =
      p.slices > 1 ? p.partials + ((int64_t{g} * p.slices + slice) * p.rows + n0) * p.out_cols : nullptr;
  for (int c = 0; c < kP && rows > 0; ++c) {
    const int position = group * kTableCols + (SPLIT ? c >> 1 : c);
    const int column = p.group_columns != nullptr ? __ldg(p.group_columns + position) : position;
    if (column < 0 || column >= table_cols) continue;  // uniform: no output column there
    const int64_t channel = static_cast<int64_t>(column) * kTableBS + (SPLIT ? (c & 1) * BS : 0);
    if (partial != nullptr) {
      store_tile<float, 128, BS, 128, 1>(cs + c * BS, Cfg::kLdC, 0, partial + channel, p.out_cols, rows, tid & 127);
    } else {
      store_tile<T, 128, BS, 128, 1>(cs + c * BS, Cfg::kLdC, 0, out + channel, p.out_cols, rows, tid & 127);
    }
  }
}

}  // namespace jbs
