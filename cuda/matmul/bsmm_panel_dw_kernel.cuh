// Weight-gradient kernel for many rows and few channels: dw[i] = x[:, c]^T dy[:, k] for
// every layout block i = (c, k), computed from row panels of x and dy (every channel
// of both) that stream once through shared memory. It serves the 1x1 convolution (stride
// 1: its pixels are a plain matrix) and the matmul of that shape, the weight-gradient
// half of the panel kernel (matmul/bsmm_panel_kernel.cuh).
//
// Why: such a weight gradient is memory-bound (320 -> 320 channels at density 1/2 reads
// 1280 bytes per pixel for 102 kFLOP), so its floor is reading x and dy once. The
// generic dw kernel (bsmm_dw_kernel.cuh) runs one CTA per (block, row split) and reads
// x's and dy's columns of its block for every block: 4.6x the floor at bs 32 and 10.9x
// at bs 16 for that conv (benchmarks/NOTES.md, session 19).
//
// The sum runs over the rows, so the rows are a wgmma's K and the accumulators outlive
// the row tiles: they are the CTA's whole output. A unit is the m64 x BS product
// x[:, 64 channels]^T dy[:, k-block]: A is one 64-channel chunk of the x panel read
// M-major (the TMA box's 128-byte swizzled rows are exactly one swizzle atom wide), B
// the k-block's BS channels of the dy panel read N-major; a k-step of 16 rows is 2048
// bytes further in both. A unit covers the 64 / BS blocks (c, k) of its chunk's c-blocks
// and exists where one of them is in the layout, so it may multiply zero blocks beside
// its nonzero ones (never written); in the memory-bound regime that costs no time.
//
// Each consumer warpgroup holds up to kUnitsPerWarpgroup units' accumulators (160
// registers), so a CTA holds kUnitsPerCta. Layouts with more units cut them into `sets`
// of consecutive units, each set re-reading the panels (from L2, its CTAs being
// neighbours in the grid). The rows are cut into row_splits ranges: CTA (split, set)
// walks its range's tiles and writes its units' nonzero blocks to `partials` (fp32, then
// summed in a fixed order by sum_splits_kernel), or to dw where row_splits is 1.
// Every sum has a fixed order: bitwise deterministic.
//
// The units are found in the kernel from the items table (every CTA the same way): a
// map of the layout's blocks, then the chunk x k-block cells with a block, in k-major
// order. A CTA loads only the 64-channel chunks of x and dy that its set's units read
// (with k-major sets, its share of dy's), so the sets re-read less and a slot is smaller:
// as many slots as fit, up to kMaxPanelSlots. Warp specialized (common/warp_roles.cuh):
// one loader thread issues the TMA boxes (64 channels x kTM rows each) into the ring;
// the two consumer warpgroups take alternate units of the CTA's set, each unit's
// descriptor offsets computed once, and release a slot once the tile's MMAs have retired.
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

namespace jbs {

struct PanelDwParams {
  CUtensorMap x_map;   // x as (x_cols, rows, x groups) in boxes of 64 channels x kTM rows, 128-byte swizzled
  CUtensorMap dy_map;  // dy likewise
  const int32_t* items;  // (nnz, 2): block i's (c-block, k-block)
  void* dw;              // (groups, nnz, BS, BS), written directly where row_splits == 1
  float* partials;       // (groups, row_splits, nnz, BS, BS) otherwise
  int64_t row_tiles;
  int64_t dw_group_stride;
  int nnz;
  int c_blocks, k_blocks;   // x_cols / BS, dy_cols / BS
  int x_chunks, dy_chunks;  // 64-channel chunks of a panel
  int sets;                 // blockIdx.x = split * sets + set
  int row_splits;
  int table_bytes;                  // the tables' shared memory, a multiple of 1024 (PanelDwConfig::table_bytes)
  int panel_bytes;                  // the panel slots' shared memory after them
  int x_group_step, dy_group_step;  // 1, or 0 where that operand is broadcast over the groups
};

// The consumers hold the units' accumulators (160 registers) beside their descriptors;
// the loader issues TMA boxes only.
template <typename T, int BS>
struct PanelDwConfig : WarpRoles<40, 232> {
  static_assert(kIs16Bit<T> && (BS == 16 || BS == 32), "panel dw kernel: 16-bit types, blocks of 16 or 32");
  // Rows per tile. At bs 32, 32 (2 k-steps): 64-row tiles, 80 KB slots at 320 + 320
  // channels, left two slots in flight per SM and DRAM 53% busy, 1.03-1.13x slower. At
  // bs 16, 64: its units are twice as many, and 32-row tiles doubled their loop's
  // instructions per row, 1.25x slower at 1/2 (benchmarks/NOTES.md, session 20).
  static constexpr int kTM = BS == 32 ? 32 : 64;
  static constexpr int kUnitBlocks = 64 / BS;  // c-blocks of a unit (one x chunk)
  static constexpr int kUnitsPerWarpgroup = 160 / (BS / 2);  // an m64 x BS fp32 accumulator: BS / 2 registers
  static constexpr int kUnitsPerCta = 2 * kUnitsPerWarpgroup;
  static constexpr int kMaxPanelSlots = 8;
  static constexpr int kSmemBytes = 226 * 1024;  // always all of it: one CTA per SM, as many slots as fit
  static constexpr int64_t chunk_bytes() { return int64_t{kTM} * 128; }
  static constexpr int64_t max_units(int x_chunks, int k_blocks) { return static_cast<int64_t>(x_chunks) * k_blocks; }
  // The tables, first in shared memory: the block map (c_blocks x k_blocks), the set's units
  // and their descriptor offsets (one int each), and per chunk its place in a slot and the
  // loader's list; rounded up to the swizzle's 1024-byte atoms, where the slots begin.
  static constexpr int64_t table_bytes(int x_chunks, int dy_chunks, int c_blocks, int k_blocks) {
    const int64_t ints = static_cast<int64_t>(c_blocks) * k_blocks + 2 * max_units(x_chunks, k_blocks) +
                         2 * (x_chunks + dy_chunks);
    return (4 * ints + 1023) / 1024 * 1024;
  }
  // The panel slots' room: what is left after the tables and 1 KB of alignment.
  static constexpr int64_t panel_bytes(int x_chunks, int dy_chunks, int c_blocks, int k_blocks) {
    return kSmemBytes - 1024 - table_bytes(x_chunks, dy_chunks, c_blocks, k_blocks);
  }
  // Whether two slots of every chunk fit (a set may need them all).
  static constexpr bool fits(int x_chunks, int dy_chunks, int c_blocks, int k_blocks) {
    return panel_bytes(x_chunks, dy_chunks, c_blocks, k_blocks) >= 2 * (x_chunks + dy_chunks) * chunk_bytes();
  }
  // Sets of units for a layout of nnz blocks: the units are at most nnz and the cells.
  static constexpr int sets(int64_t nnz, int x_chunks, int k_blocks) {
    const int64_t units = nnz < max_units(x_chunks, k_blocks) ? nnz : max_units(x_chunks, k_blocks);
    return static_cast<int>((units + kUnitsPerCta - 1) / kUnitsPerCta);
  }
};

template <typename T, int BS>
__global__ void __launch_bounds__(PanelDwConfig<T, BS>::kThreads, 1)
    bsmm_panel_dw_kernel(const __grid_constant__ PanelDwParams p) {
  using Cfg = PanelDwConfig<T, BS>;
  constexpr int kTM = Cfg::kTM;
  constexpr int kUnitBlocks = Cfg::kUnitBlocks;
  constexpr int kMaxUnits = Cfg::kUnitsPerWarpgroup;
  constexpr uint32_t kChunkUnits = kTM * 8;  // a 64-channel chunk of a panel, in 16-byte units
  constexpr uint32_t kKStepUnits = 16 * 8;   // 16 rows of 128 bytes
  __shared__ uint64_t panel_full[Cfg::kMaxPanelSlots], panel_empty[Cfg::kMaxPanelSlots];
  __shared__ int unit_count, load_count;
  unsigned char* const smem_raw = dynamic_smem();
  unsigned char* const smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
  const int chunks = p.x_chunks + p.dy_chunks;
  int* const block_map = reinterpret_cast<int*>(smem);  // (c, k) -> block, or -1
  int* const units = block_map + p.c_blocks * p.k_blocks;  // a unit's cell: k * x_chunks + x chunk
  const int max_units = p.x_chunks * p.k_blocks;
  uint32_t* const unit_offsets = reinterpret_cast<uint32_t*>(units + max_units);  // of the set's units
  int* const chunk_place = reinterpret_cast<int*>(unit_offsets + max_units);  // x chunks, then dy's: in a slot, or -1
  int* const load_list = chunk_place + chunks;  // the chunks a slot holds, in order
  T* const panels = reinterpret_cast<T*>(smem + p.table_bytes);
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int set = static_cast<int>(blockIdx.x % p.sets);
  const int split = static_cast<int>(blockIdx.x / p.sets);
  const int64_t g = blockIdx.y;

  const int64_t per_split = (p.row_tiles + p.row_splits - 1) / p.row_splits;
  const int64_t first_tile = min(split * per_split, p.row_tiles);
  const int64_t split_tiles = min(per_split, p.row_tiles - first_tile);

  // The tables: the block map; the cells holding a block, in order; this set's chunks and
  // its units' descriptor offsets.
  if (tid == 0) {
    for (int s = 0; s < Cfg::kMaxPanelSlots; ++s) {
      mbarrier_init(&panel_full[s], 1);
      mbarrier_init(&panel_empty[s], Cfg::kConsumerThreads / 32);
    }
    mbarrier_init_fence();
  }
  for (int i = tid; i < p.c_blocks * p.k_blocks; i += blockDim.x) block_map[i] = -1;
  for (int i = tid; i < chunks; i += blockDim.x) chunk_place[i] = 0;
  __syncthreads();
  for (int i = tid; i < p.nnz; i += blockDim.x) {
    block_map[__ldg(p.items + 2 * i) * p.k_blocks + __ldg(p.items + 2 * i + 1)] = i;
  }
  __syncthreads();
  if (warp == 0) {
    int count = 0;
    for (int base = 0; base < max_units; base += 32) {
      const int cell = base + lane;
      bool present = false;
      if (cell < max_units) {
        const int k = cell / p.x_chunks, c0 = cell % p.x_chunks * kUnitBlocks;
        for (int j = 0; j < kUnitBlocks && c0 + j < p.c_blocks; ++j) present |= block_map[(c0 + j) * p.k_blocks + k] >= 0;
      }
      const uint32_t ballot = __ballot_sync(0xffffffffu, present);
      if (present) units[count + __popc(ballot & ((1u << lane) - 1))] = cell;
      count += __popc(ballot);
    }
    if (lane == 0) unit_count = count;
  }
  __syncthreads();
  // This set's units [beg, end), its share of the cells in order: consecutive k-blocks.
  const int beg = static_cast<int>(static_cast<int64_t>(set) * unit_count / p.sets);
  const int end = static_cast<int>(static_cast<int64_t>(set + 1) * unit_count / p.sets);
  for (int u = beg + tid; u < end; u += blockDim.x) {
    const int cell = units[u];
    chunk_place[cell % p.x_chunks] = 1;  // benign races: every writer stores 1
    chunk_place[p.x_chunks + (cell / p.x_chunks * BS >> 6)] = 1;
  }
  __syncthreads();
  if (tid == 0) {
    int n = 0;
    for (int c = 0; c < chunks; ++c) {
      if (chunk_place[c]) load_list[n] = c;
      chunk_place[c] = chunk_place[c] ? n++ : -1;
    }
    load_count = n;
  }
  __syncthreads();
  // A unit's descriptor offsets within a slot (16-byte units): A, its x chunk; B, its
  // k-block's first channel in its dy chunk (inside a swizzle atom at bs 16, or at bs 32
  // for odd k-blocks: the hardware swizzles the address, as for K-major k-steps).
  for (int u = beg + tid; u < end; u += blockDim.x) {
    const int cell = units[u];
    const int channel = cell / p.x_chunks * BS;
    const uint32_t a_off = static_cast<uint32_t>(chunk_place[cell % p.x_chunks]) * kChunkUnits;
    const uint32_t b_off = static_cast<uint32_t>(chunk_place[p.x_chunks + (channel >> 6)]) * kChunkUnits + (channel & 63) / 8;
    unit_offsets[u - beg] = a_off | b_off << 16;
  }
  __syncthreads();
  const int loads = load_count;
  const int64_t slot_elems = static_cast<int64_t>(loads) * kTM * 64;
  const int64_t fit = loads > 0 ? p.panel_bytes / (slot_elems * static_cast<int64_t>(sizeof(T))) : 1;
  const int slots = static_cast<int>(fit < Cfg::kMaxPanelSlots ? fit : Cfg::kMaxPanelSlots);
  const int64_t num_tiles = loads > 0 ? split_tiles : 0;  // a set without units loads nothing

  if (tid >= Cfg::kConsumerThreads) {
    // The loader: tile t of the range into slot t % slots once the consumers have
    // released the tile before it there.
    warpgroup_reg_dealloc<Cfg::kLoaderRegs>();
    if (tid == Cfg::kConsumerThreads) {
      const int bytes = static_cast<int>(slot_elems * sizeof(T));
      int slot = 0;
      uint32_t phase = 0;
      for (int64_t t = 0; t < num_tiles; ++t) {
        mbarrier_wait(&panel_empty[slot], phase ^ 1u);
        mbarrier_arrive_expect_tx(&panel_full[slot], bytes);
        T* const panel = panels + slot * slot_elems;
        const int row = static_cast<int>((first_tile + t) * kTM);
        for (int i = 0; i < loads; ++i) {
          const int c = load_list[i];
          const bool is_dy = c >= p.x_chunks;
          tma_load_5d(panel + i * kTM * 64, is_dy ? &p.dy_map : &p.x_map, (is_dy ? c - p.x_chunks : c) * 64, row,
                      static_cast<int>(g) * (is_dy ? p.dy_group_step : p.x_group_step), 0, 0, &panel_full[slot]);
        }
        if (++slot == slots) slot = 0, phase ^= 1u;
      }
    }
    return;
  }
  warpgroup_reg_alloc<Cfg::kConsumerRegs>();

  // Warpgroup wg takes the set's units wg, wg + 2, ... Values broadcast from lane 0, so
  // ptxas knows the branches between the MMAs uniform (C7520).
  const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0);
  const int my_units = (end - beg - wg + 1) / 2;
  const uint64_t desc = wgmma_desc_sw128(panels);
  const uint32_t slot_units = static_cast<uint32_t>(slot_elems / 8);
  using Acc = float[BS / 8][4];
  Acc acc[kMaxUnits];
  int slot = 0, prev_slot = 0;
  uint32_t phase = 0;
  for (int64_t t = 0; t < num_tiles; ++t) {
    mbarrier_wait(&panel_full[slot], phase);
    const uint64_t base = desc + slot * slot_units;
    wgmma_fence();
#pragma unroll
    for (int i = 0; i < kMaxUnits; ++i) {
      if (i < my_units) {
        const uint32_t offsets = __shfl_sync(0xffffffffu, unit_offsets[2 * i + wg], 0);
        const uint64_t a = base + (offsets & 0xffffu), b = base + (offsets >> 16);
#pragma unroll
        for (int ks = 0; ks < kTM / 16; ++ks) {
          wgmma_ss<T, BS, /*TRANS_B=*/1, /*TRANS_A=*/1>(acc[i], a + ks * kKStepUnits, b + ks * kKStepUnits,
                                                          t > 0 || ks > 0);
        }
      }
    }
    wgmma_commit();
    if (t > 0) {
      wgmma_wait<1>();  // the previous tile's MMAs have retired: its slot is free
      mbarrier_arrive_warp(&panel_empty[prev_slot], lane);
    }
    prev_slot = slot;
    if (++slot == slots) slot = 0, phase ^= 1u;
  }
  wgmma_wait<0>();

  // Warp w of the warpgroup holds the unit's rows 16 (w % 4) .. + 15: c-block j of its
  // chunk, rows r0 .. r0 + 15 of it; each lane rows gq and gq + 8, columns 2 tq, +1 of
  // every 8. A split without rows writes zeros.
  const int wq = warp & 3, gq = lane >> 2, tq = lane & 3;
  const int j = 16 * wq / BS, r0 = 16 * wq % BS;
  const bool has_rows = num_tiles > 0;
#pragma unroll
  for (int i = 0; i < kMaxUnits; ++i) {
    if (i < my_units) {
      const int cell = units[beg + 2 * i + wg];
      const int k = cell / p.x_chunks, c = cell % p.x_chunks * kUnitBlocks + j;
      const int block = c < p.c_blocks ? block_map[c * p.k_blocks + k] : -1;
      if (block >= 0) {
        const int64_t block_elem = static_cast<int64_t>(block) * BS * BS;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = r0 + gq + 8 * h;
#pragma unroll
          for (int nt = 0; nt < BS / 8; ++nt) {
            const float v0 = has_rows ? acc[i][nt][2 * h] : 0.f, v1 = has_rows ? acc[i][nt][2 * h + 1] : 0.f;
            const int64_t e = block_elem + r * BS + nt * 8 + 2 * tq;
            if (p.row_splits == 1) {
              T pair[2] = {from_float<T>(v0), from_float<T>(v1)};
              *reinterpret_cast<uint32_t*>(static_cast<T*>(p.dw) + g * p.dw_group_stride + e) =
                  *reinterpret_cast<const uint32_t*>(pair);
            } else {
              const int64_t split_base = (g * p.row_splits + split) * static_cast<int64_t>(p.nnz) * BS * BS;
              *reinterpret_cast<float2*>(p.partials + split_base + e) = make_float2(v0, v1);
            }
          }
        }
      }
    }
  }
}

}  // namespace jbs
