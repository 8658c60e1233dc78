// Forward / input-gradient kernel for many rows, few channels and few weights: every
// weight block stays in shared memory for the whole kernel, and a row tile's whole
// activation panel (64 rows x every input channel) stays there while the CTA computes
// every output block column of the tile from it. It serves the 1x1 convolution
// (stride 1: its pixels are a plain matrix) and the matmul of that shape, wherever
// the weights and two panels fit (PanelConfig::smem_bytes).
//
// Why: such a layer is memory-bound (a 1x1 conv, 320 -> 320 channels at density
// 1/2, moves 640 bytes per pixel for 102 kFLOP: 3x longer at HBM speed than at
// the tensor cores' rate), so its floor is reading x once and writing y once.
// The column-group kernels re-read x once per group of 128 / BS columns and load
// it item by item, one CTA per (tile, group): 3.7x the floor for that conv at
// bs 32 and 5.4x at bs 16 (benchmarks/NOTES.md, session 19).
//
// Pixels are the wgmma's M (the tile's 64 rows), one output block column its N: an
// m64 x BS x 16 wgmma per block and k-step, A from the panel, B from the resident
// weights, so no MMA multiplies a zero block. Warpgroup wg computes columns wg,
// wg + 2, ... of every tile. Such an MMA is short (16 cycles at bs 32), so what
// decides the speed is the instructions around it: with the weights streamed through
// a ring of slots, the slots' waits and releases and the table reads made ~490
// instructions per column and warp, and left the consumers issue-bound at 2.7x the
// floor (benchmarks/NOTES.md, session 19). Resident, a block costs a table read, two
// descriptor adds and its MMAs.
//
// Warp specialized (common/warp_roles.cuh): the loader warpgroup copies the weights
// once, in the wgmma's core-matrix order, and one thread of it loads the panels by
// TMA into a ring of 2 to 4 panel slots, each as soon as the consumers release it:
// one box of 64 channels x 64 rows per 64-channel chunk, 128-byte swizzled (rows past
// the end read as zeros; 128-byte rows are 8x fewer copy-engine rows than boxes of 8
// channels, which, with the panels issued later, made the first version 1.1x slower).
// A column's MMAs run while the previous column's accumulator goes to y (two
// accumulators, alternating). Blocks are summed in table order: bitwise deterministic.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "common/dtype.cuh"
#include "common/mbarrier.cuh"
#include "common/ptx.cuh"
#include "common/smem.cuh"
#include "common/tma.cuh"
#include "common/warp_roles.cuh"
#include "common/wgmma.cuh"
#include "matmul/bsmm_blocks_kernel.cuh"  // FwdDxOperands

namespace jbs {

struct PanelParams : FwdDxOperands {
  CUtensorMap in_map;      // `in` as (in_cols, rows, input groups) in boxes of 64 channels x kTM rows
  const int32_t* offsets;  // (out_blocks + 1): output block column o's items
  const int32_t* items;    // (nnz, 2): weight block, input block column
  int out_blocks;
  int nnz;                 // items in the tables
  int panel_chunks;        // 64-channel chunks of a panel: in_cols / 64, rounded up
  int panel_slots;         // panels in flight: 2 .. PanelConfig::kMaxPanelSlots, as many as fit
  int group_step;          // 1, or 0 where `in` is broadcast over the weight groups
  int64_t row_tiles;
};

// The consumers hold two m64 x BS accumulators: the launch's 168 registers suffice,
// so no registers move between the roles.
template <typename T, int BS>
struct PanelConfig : WarpRoles<168, 168> {
  static_assert(kIs16Bit<T> && (BS == 16 || BS == 32), "panel kernel: 16-bit types, blocks of 16 or 32");
  static constexpr int kTM = 64;  // rows per tile: one m64
  static constexpr int kBlockElems = BS * BS;
  static constexpr int kOptInBytes = 226 * 1024;
  static constexpr int kLdS = BS + 8;  // a warp's staged rows, padded against bank conflicts
  static constexpr int kStageElems = kConsumerThreads / 32 * 16 * kLdS;
  // Panels in flight, 2 to this many, as many as fit (at 160 channels a panel is 20 KB;
  // 4 instead of 2 measured up to 1.07x faster, benchmarks/NOTES.md, session 19).
  static constexpr int kMaxPanelSlots = 4;
  // Shared memory: the panel slots, kTM rows x in_cols rounded up to 64 channels each, in
  // chunks of 64 channels (kTM rows of 128 bytes, 128-byte swizzled; the channels past
  // in_cols read as zeros and are never used); the weights; each consumer warp's 16
  // staged rows; the tables (offsets, then per item its block and its A operand's offset
  // in a panel); + 1 KB to align the panels to the swizzle's 1024-byte atoms.
  static constexpr int64_t panel_elems(int64_t in_cols) { return kTM * ((in_cols + 63) / 64 * 64); }
  static constexpr int64_t smem_bytes(int64_t in_cols, int64_t out_blocks, int64_t nnz, int panel_slots) {
    return (panel_slots * panel_elems(in_cols) + nnz * kBlockElems + kStageElems) * static_cast<int64_t>(sizeof(T)) +
           4 * (out_blocks + 1 + 2 * nnz) + 1024;
  }
};

template <typename T, int BS, bool TRANS>
__global__ void __launch_bounds__(PanelConfig<T, BS>::kThreads, 1)
    bsmm_panel_kernel(const __grid_constant__ PanelParams p) {
  using Cfg = PanelConfig<T, BS>;
  constexpr int kTM = Cfg::kTM;
  constexpr int kBlockElems = Cfg::kBlockElems;
  constexpr int kKSteps = BS / 16;
  constexpr uint32_t kChunkUnits = kTM * 8;  // a 64-channel chunk of a panel, in 16-byte units
  __shared__ uint64_t panel_full[Cfg::kMaxPanelSlots], panel_empty[Cfg::kMaxPanelSlots];
  __shared__ uint64_t weights_ready;
  unsigned char* const smem_raw = dynamic_smem();
  T* const smem = reinterpret_cast<T*>(smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023));
  const int64_t panel_elems = Cfg::panel_elems(p.in_cols);
  const int panel_slots = p.panel_slots;
  T* const weights = smem + panel_slots * panel_elems;  // item j's block at j * kBlockElems
  T* const staging = weights + static_cast<int64_t>(p.nnz) * kBlockElems;
  int* const offsets = reinterpret_cast<int*>(staging + Cfg::kStageElems);
  // Item j's A operand within a panel: its input block's first channel, as a descriptor
  // offset (16-byte units); the next k-step is 2 units further, in the same chunk.
  uint32_t* const a_offset = reinterpret_cast<uint32_t*>(offsets + p.out_blocks + 1);
  int* const block_of = reinterpret_cast<int*>(a_offset + p.nnz);  // item j's weight block
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;

  for (int i = tid; i <= p.out_blocks; i += blockDim.x) offsets[i] = __ldg(p.offsets + i);
  for (int j = tid; j < p.nnz; j += blockDim.x) {
    const int channel = __ldg(p.items + 2 * j + 1) * BS;
    a_offset[j] = static_cast<uint32_t>((channel >> 6) * kChunkUnits + (channel & 63) / 8);
    block_of[j] = __ldg(p.items + 2 * j);
  }
  if (tid == 0) {
    for (int s = 0; s < panel_slots; ++s) {
      mbarrier_init(&panel_full[s], 1);
      mbarrier_init(&panel_empty[s], Cfg::kConsumerThreads / 32);
    }
    mbarrier_init(&weights_ready, Cfg::kLoaderThreads);
    mbarrier_init_fence();
  }
  __syncthreads();  // the barriers and the tables

  if (tid >= Cfg::kConsumerThreads) {
    // The loader. Thread 0 of it loads the panels: tile number k of this CTA into slot
    // k % panel_slots once the consumers have released the tile before it there; it
    // issues the first slots' panels before the weights, which need none released.
    const int ltid = tid - Cfg::kConsumerThreads;
    int64_t tile = blockIdx.x, k = 0;
    int slot = 0;
    uint32_t phase = 0;
    auto load_panels = [&](int64_t until_k) {
      for (; tile < p.row_tiles && k < until_k; tile += gridDim.x, ++k) {
        mbarrier_wait(&panel_empty[slot], phase ^ 1u);
        mbarrier_arrive_expect_tx(&panel_full[slot], static_cast<int>(panel_elems * sizeof(T)));
        T* const panel = smem + slot * panel_elems;
        for (int c = 0; c < p.panel_chunks; ++c) {
          tma_load_5d(panel + c * kTM * 64, &p.in_map, c * 64, static_cast<int>(tile * kTM),
                      static_cast<int>(blockIdx.y) * p.group_step, 0, 0, &panel_full[slot]);
        }
        if (++slot == panel_slots) slot = 0, phase ^= 1u;
      }
    };
    if (ltid == 0) load_panels(panel_slots);
    // Every weight block, 16-byte chunk by chunk, in core-matrix order as
    // conv/tap_blocks.cuh: element (r, c) of a block at ((r / 8) * BS / 8 + c / 8) * 64
    // + (r % 8) * 8 + c % 8. The block index comes from shared memory: read from global
    // memory, each copy waited for that load.
    const T* const w = static_cast<const T*>(p.w) + blockIdx.y * p.w_group_stride;
    constexpr int kBlockChunks = kBlockElems / 8;
    for (int c = ltid; c < p.nnz * kBlockChunks; c += Cfg::kLoaderThreads) {
      const int j = c / kBlockChunks, chunk = c % kBlockChunks;
      const int r = chunk / (BS / 8), c8 = chunk % (BS / 8);
      cp_async_16(weights + static_cast<int64_t>(j) * kBlockElems + ((r / 8) * (BS / 8) + c8) * 64 + (r % 8) * 8,
                  w + static_cast<int64_t>(block_of[j]) * kBlockElems + r * BS + c8 * 8, 16);
    }
    cp_async_arrive_noinc(&weights_ready);
    if (ltid == 0) load_panels(INT64_MAX);
    cp_async_wait<0>();
    return;
  }

  // Descriptors (common/wgmma.cuh), advanced in their address field (16-byte units).
  // A, the panel: K-major, 128-byte swizzled (wgmma_desc_sw128), chunk c of 64
  // channels kTM * 128 bytes further, the k-steps 32 bytes apart within a row. B, a
  // block: N-major (fwd, k = r) or K-major (dx, k = c), as the halo ss kernel's.
  const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0);  // warp-uniform for the compiler
  const uint64_t a_base = wgmma_desc_sw128(smem);
  constexpr uint32_t kCoreRow = BS / 8 * 128;
  const uint64_t b_base = wgmma_desc(weights, TRANS ? 128 : kCoreRow, TRANS ? kCoreRow : 128);
  constexpr uint32_t kKStepUnitsB = TRANS ? 2 * 8 : 2 * (BS / 8) * 8;
  constexpr uint32_t kBlockUnits = kBlockElems / 8;
  constexpr int kTransB = TRANS ? 0 : 1;
  const uint32_t panel_units = static_cast<uint32_t>(panel_elems / 8);

  T* const out_group = static_cast<T*>(p.out) + blockIdx.y * p.out_group_stride;
  const int gq = lane >> 2, tq = lane & 3;
  T* const warp_stage = staging + warp * 16 * Cfg::kLdS;
  auto release = [&](uint64_t* bar) { mbarrier_arrive_warp(bar, lane); };
  mbarrier_wait(&weights_ready, 0);
  fence_proxy_async();  // the landed cp.async writes -> visible to wgmma's reads

  using Acc = float[BS / 8][4];
  const int my_cols = (p.out_blocks - wg + 1) / 2;  // columns wg, wg + 2, ...
  int ps = 0;  // the tile's panel slot
  uint32_t phase = 0;
  for (int64_t tile = blockIdx.x; tile < p.row_tiles; tile += gridDim.x) {
    mbarrier_wait(&panel_full[ps], phase);
    const uint64_t a_tile = a_base + ps * panel_units;
    const int64_t warp_row0 = tile * kTM + 16 * (warp & 3);

    // Column o's MMAs into acc, committed as one group; false if it has no blocks (acc is
    // then left as it was). The first MMA overwrites acc (scale_d 0). The block count and
    // offsets are broadcast from lane 0, so ptxas knows the branches between the MMAs
    // uniform (else it serializes them, C7520).
    auto issue = [&](Acc& acc, int o) {
      const int beg = __shfl_sync(0xffffffffu, offsets[o], 0);
      const int end = __shfl_sync(0xffffffffu, offsets[o + 1], 0);
      wgmma_fence();
      for (int j = beg; j < end; ++j) {
        const uint32_t a_item = __shfl_sync(0xffffffffu, a_offset[j], 0);
#pragma unroll
        for (int ks = 0; ks < kKSteps; ++ks) {
          wgmma_ss<T, BS, kTransB>(acc, a_tile + a_item + 2 * ks, b_base + j * kBlockUnits + ks * kKStepUnitsB,
                                   j > beg || ks > 0);
        }
      }
      wgmma_commit();
      return end > beg;
    };
    // Column o's accumulator (its MMAs retired), or zeros, to y: each warp stages its 16
    // rows in shared memory and writes them as whole 16-byte pieces of BS-channel rows.
    // (Written straight from the accumulator layout, each store instruction wrote 4
    // bytes per lane, 16-byte pieces of 8 rows.)
    auto retire = [&](const Acc& acc, int o, bool has_blocks) {
      __syncwarp();  // the warp's reads of the previous column's staged rows are done
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int nt = 0; nt < BS / 8; ++nt) {
          T pair[2] = {from_float<T>(has_blocks ? acc[nt][2 * h] : 0.f),
                       from_float<T>(has_blocks ? acc[nt][2 * h + 1] : 0.f)};
          *reinterpret_cast<uint32_t*>(warp_stage + (gq + 8 * h) * Cfg::kLdS + nt * 8 + 2 * tq) =
              *reinterpret_cast<const uint32_t*>(pair);
        }
      }
      __syncwarp();
      constexpr int kChunksPerRow = BS / 8;
#pragma unroll
      for (int c = lane; c < 16 * kChunksPerRow; c += 32) {
        const int r = c / kChunksPerRow, piece = c % kChunksPerRow;
        const int64_t row = warp_row0 + r;
        if (row < p.rows) {
          *reinterpret_cast<uint4*>(out_group + row * p.out_cols + o * BS + piece * 8) =
              *reinterpret_cast<const uint4*>(warp_stage + r * Cfg::kLdS + piece * 8);
        }
      }
    };

    // This warpgroup's column i is o = wg + 2 i. Column i + 1's MMAs run while column i
    // retires: two accumulators, alternating.
    Acc acc0, acc1;
    if (my_cols > 0) {
      bool has0 = issue(acc0, wg), has1 = false;
      int i = 1;
      for (; i + 1 < my_cols; i += 2) {
        has1 = issue(acc1, wg + 2 * i);
        wgmma_wait<1>();
        retire(acc0, wg + 2 * (i - 1), has0);
        has0 = issue(acc0, wg + 2 * (i + 1));
        wgmma_wait<1>();
        retire(acc1, wg + 2 * i, has1);
      }
      if (i < my_cols) {
        has1 = issue(acc1, wg + 2 * i);
        wgmma_wait<1>();
        retire(acc0, wg + 2 * (i - 1), has0);
        wgmma_wait<0>();
        retire(acc1, wg + 2 * i, has1);
      } else {
        wgmma_wait<0>();
        retire(acc0, wg + 2 * (i - 1), has0);
      }
    }
    release(&panel_empty[ps]);  // this warp's MMAs of the tile have retired
    if (++ps == panel_slots) ps = 0, phase ^= 1u;
  }
}

}  // namespace jbs
