// How fast can the large-N forward (y = x W, W block-sparse) go when every operand
// comes by TMA and both wgmma operands are read from shared memory? A stand-alone
// replica of the column-group walk of cuda/matmul/bsmm_group_ws_kernel.cuh (CTA tile
// of 256 rows x 128 columns = P = 128 / BS block columns, one union item per input
// block row present in the group) with a different feed:
//   * jbs's kernel: 128 loader threads issue 16-byte cp.asyncs for the activation tile
//     and the present weight blocks; the consumers load A fragments into registers
//     (RS wgmma). Sessions 4-9 measured ~4.4-4.7 TB/s of L2 -> SM traffic, 31-39% of
//     the dense rate at bs 64 (benchmarks/NOTES.md).
//   * here: one thread issues a 2-D TMA box for the activation tile (BS channels x 256
//     rows, swizzled by the row's width) and one per present weight block (BS x BS,
//     the same swizzle); the consumers' wgmmas read both from shared memory (SS), so
//     nothing passes through registers. This is how cuBLAS feeds its ~790 TFLOP/s
//     8192^3 dense product, ~9 TB/s into shared memory.
// The question it answers: whether the feed, not the byte count, is what holds jbs's
// 8192^3 rows at 31-39%; if this replica reaches ~9 TB/s into shared memory, bs 64 at
// 1/2 runs at ~75% of the dense rate (64 FLOP per byte delivered).
//
//   nvcc -O3 -std=c++17 -I cuda -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
//     -o /tmp/group_tma_ss benchmarks/microbench/group_tma_ss.cu && /tmp/group_tma_ss [dense TFLOP/s] [next]
//
// Checks 256 output elements against a float64 sum on the host before timing. Kept as the
// record of session 30's measurement; the production kernel it led to is
// cuda/matmul/bsmm_group_tma_kernel.cuh (same feed, plus tables, weight groups and edges).
// Modes (second argument), each variant next to its baseline (session 31's figures in
// benchmarks/NOTES.md):
//   next     PAIRS (bs 32, two input blocks per 128-byte-row box) and WIDE (bs 64,
//            256-column groups over 128 rows): both slower;
//   probe    one wave over 132 / 99 / 66 / 33 SMs (is a shared resource the limit?);
//   cluster  clusters of 2 row tiles sharing the weight blocks by multicast, the remote
//            arrivals with and without .release.cluster, and the plain kernel launched in
//            clusters;
//   3        groups of 192 columns (P = 3 at bs 64, 6 at bs 32): bs 64 1.17x at 1/2 with
//            clusters of 2, the production kernel's configuration since session 31.
// Session 32's modes (benchmarks/NOTES.md, session 32), all at bs 32 unless said:
//   rs       A from registers (RS wgmma, MODE & 4: ldmatrix from the swizzled tile once per
//            item) and blocked activations (MODE & 8: x stored input block by input block,
//            loaded as 128-byte rows): RS 1.11x at 1/2, 1.03-1.04x below; blocked nothing;
//            "rs64": bs 64 (192 columns), RS in half-item chunks, 0.91x;
//   waits    clock64 around the loader's and consumer warp 0's barrier waits (share of the
//            walk): with RS the consumers wait for data 30-38% of their walk;
//   deep     9 slots (MODE & 16) instead of 8: nothing;
//   ahead    the loader warp reading item rows 32 ahead (MODE & 32): nothing;
//   q N      one case for a profiler (0 SS, 1 RS, 2 bs 64, 3 RS blocked);
//   loader   the feed alone (MODE & 64: slots released on arrival, no MMA) and PACKED
//            copies (MODE & 128: two 1-D bulk copies of pre-swizzled data per item): the
//            feed alone caps bs 32 at 1607 us at 1/2; packed copies are slower;
//   two      two loader threads (MODE & 256, even and odd items): the feed alone 1.13x, the
//            RS kernel 1.18-1.24x faster at bs 32; bs 64 unchanged. The production kernel's
//            loaders since session 32;
//   rs2      with two loaders, SS against RS at bs 32 (and SS in clusters of 2).
// Session 35's mode:
//   depth    bs 64 (192 columns, two loaders, clusters of 2) with its 4 slots of 56 KB against 3
//            (MODE & 512: a 168 KB ring): 3 slots ran 1.20 / 1.18x slower at 1/4 / 1/8.
#include <cuda.h>
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "common/mbarrier.cuh"
#include "common/ptx.cuh"
#include "common/smem.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"

namespace {

using T = __nv_bfloat16;

#define CHECK(x)                                                              \
  do {                                                                        \
    cudaError_t e = (x);                                                      \
    if (e != cudaSuccess) {                                                   \
      std::printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

// PAIRS (bs 32 only): an item covers two adjacent input blocks 2j, 2j + 1 when both are in
// the group's union, loaded as one box of 64 channels with 128-byte rows (128-byte swizzle)
// instead of two boxes of 64-byte rows; other items stay single. Slots hold either.
// WIDE: groups of 256 columns over 128 rows (P = 256 / BS, one m64 half per warpgroup)
// instead of 128 columns over 256 rows: the same accumulators, more activation reuse per
// item where the layout's columns share input blocks (benchmarks/NOTES.md, session 30,
// point 3: bs 64 at 1/2, 66 against 64 FLOP per byte).
// COLS = 192: groups of 192 columns over 256 rows (P = 192 / BS; a partial last group where
// 192 does not divide the width): 192 fp32 accumulators per consumer thread, 48 K per CTA,
// and more reuse of each activation tile (F blocks per item rises with P).
// DEEP: a ring of up to 224 KB and 9 slots (bs 32: 9 x 24 KB) instead of 196 KB and 8, to
// see whether more bytes in flight raise the feed.
template <int BS, bool PAIRS = false, bool WIDE = false, int COLS = 128, int DEPTH = 0>
struct Cfg {
  static constexpr bool DEEP = DEPTH == 1;
  static constexpr int kTN = WIDE ? 128 : 256;  // rows per CTA: two consumer warpgroups of kMH m64 halves
  static constexpr int kMH = kTN / 128;
  static constexpr int kP = (WIDE ? 256 : COLS) / BS;
  static constexpr int kHalves = PAIRS ? 2 : 1;  // input blocks per item, at most
  static constexpr int kRowBytes = BS * 2;  // a weight block's row (and a single item's tile row): one swizzle width
  static constexpr int kXBytes = kTN * kRowBytes * kHalves;
  static constexpr int kBlockBytes = BS * kRowBytes;
  static constexpr int kSlotBytes = kXBytes + kHalves * kP * kBlockBytes;
  // SHALLOW (DEPTH 2, MODE & 512): 168 KB, one 56 KB slot fewer at bs 64 / 192 columns.
  static constexpr int kBudget = (DEPTH == 2 ? 168 : COLS == 192 || DEEP ? 224 : 196) * 1024;  // bytes of ring
  static constexpr int kMaxStages = DEEP ? 9 : 8;
  static constexpr int kStages = kBudget / kSlotBytes < kMaxStages ? kBudget / kSlotBytes : kMaxStages;
  static constexpr int kSmem = kStages * kSlotBytes + 1024;
  static constexpr uint64_t kLayoutType = BS == 64 ? 1 : 2;  // 128- or 64-byte swizzle
  static constexpr uint32_t kAtomBytes = 8 * kRowBytes;     // SBO: 8 rows
};

template <int BS>
__device__ __forceinline__ uint64_t desc(const void* p) {
  return jbs::wgmma_desc(p, 16, Cfg<BS>::kAtomBytes) | (Cfg<BS>::kLayoutType << 62);
}

struct Params {
  CUtensorMap x_map;  // x (rows, C) in boxes of BS channels x 256 rows
  CUtensorMap x2_map;  // PAIRS: boxes of 2 BS channels x 256 rows, 128-byte swizzle
  CUtensorMap w_map;  // w (nnz * BS, BS) in boxes of BS x BS
  CUtensorMap xb_map;  // BLOCKED (bs 32): x as (input blocks, rows, BS) in 128-byte rows, 128-byte swizzle
  const int* offsets;  // (groups + 1)
  const int* items;    // (items, 1 + P): input block, block of column 0 .. P-1 or -1
                       // PAIRS: (items, 2 + 2P): input block, pair flag, the P blocks of each half
  T* y;
  int groups, row_tiles, out_cols, band;
  // "waits": per CTA, the cycles the loader spent waiting for free slots, consumer warp 0
  // waiting for full ones, and the CTA's whole walk (null: not measured).
  long long* waits;
  // PACKED: x pre-swizzled input block by input block, the weight blocks pre-swizzled in item
  // order, and each item's first block in that order.
  const T* xp;
  const T* pw;
  const int* w_off;
};

// CL > 1: clusters of CL CTAs over adjacent row tiles of one column group. They walk the
// same items, so each weight block is loaded once per cluster and multicast to every CTA of
// it (block j of an item by rank (i + j) % CL), and a slot is refilled only once every CTA's
// consumers have released it (each consumer warp arrives on every CTA's "empty" barrier).
__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}

__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// One arrival on the barrier at `bar`'s offset in CTA `rank` of the cluster.
template <bool kReleaseCluster>
__device__ __forceinline__ void mbarrier_arrive_remote(uint64_t* bar, unsigned rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(jbs::smem_u32(bar)), "r"(rank));
  if constexpr (kReleaseCluster) {
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
  } else {
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
  }
}

// tma_load_5d into the same offset of every CTA in `mask`, completing on each one's `bar`.
__device__ __forceinline__ void tma_load_5d_multicast(void* dst, const CUtensorMap* map, int c0, int c1,
                                                      uint64_t* bar, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3, %4, %4, %4}], [%5], %6;\n" ::"r"(jbs::smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(0), "r"(jbs::smem_u32(bar)), "h"(mask)
      : "memory");
}

// A barrier wait whose cycles are added to waits[k] by the threads that `count` ("waits" mode;
// waits null: not measured, only the clock reads remain).
__device__ __forceinline__ void wait_counted(uint64_t* bar, uint32_t parity, long long* waits, int k, bool count) {
  const long long t0 = clock64();
  jbs::mbarrier_wait(bar, parity);
  if (waits && count) atomicAdd(reinterpret_cast<unsigned long long*>(waits + k), clock64() - t0);
}

template <int BS, bool PAIRS, bool WIDE, int CL, int MODE, int COLS>
__global__ void __launch_bounds__(384, 1) group_tma_ss(const __grid_constant__ Params p) {
  using C = Cfg<BS, PAIRS, WIDE, COLS, (MODE & 16) != 0 ? 1 : (MODE & 512) != 0 ? 2 : 0>;
  constexpr int kP = C::kP;
  constexpr int kTN = C::kTN;
  constexpr int kRow = PAIRS ? 2 + 2 * kP : 1 + kP;  // ints per item
  constexpr int kBlocks = C::kHalves * kP;           // block slots per item
  __shared__ uint64_t full[C::kStages], empty[C::kStages];
  __shared__ int masks[C::kStages];
  unsigned char* raw = jbs::dynamic_smem();
  unsigned char* smem = raw + ((1024 - (jbs::smem_u32(raw) & 1023)) & 1023);
  // CTA id -> (row tile, group) in bands of `band` row tiles, so a wave shares a few
  // row tiles' activations and a run of groups' weights.
  const int id = blockIdx.x;
  const int per_band = p.band * p.groups;
  const int band = id / per_band, in_band = id % per_band;
  const int rows_in_band = min(p.band, p.row_tiles - band * p.band);
  const int group = in_band / rows_in_band, row_tile = band * p.band + in_band % rows_in_band;
  const int beg = p.offsets[group], end = p.offsets[group + 1];
  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int s = 0; s < C::kStages; ++s) {
      jbs::mbarrier_init(full + s, 1);
      jbs::mbarrier_init(empty + s, 8 * CL);
    }
    jbs::mbarrier_init_fence();
  }
  if constexpr (CL > 1) {
    cluster_sync();  // every CTA's barriers exist before any multicast or remote arrival
  } else {
    __syncthreads();
  }
  const unsigned rank = CL > 1 ? cluster_rank() : 0;
  if (tid >= 256) {
    jbs::warpgroup_reg_dealloc<40>();
    int stage = 0;
    uint32_t round = 0;
    // One item: its row's ints from get(c) (input block, [pair flag,] the blocks).
    auto issue_item = [&](int i, auto get) {
      const int first = PAIRS ? 2 : 1;
      int blocks[kBlocks];
      unsigned present = 0;
      int count = 0;
#pragma unroll
      for (int c = 0; c < kBlocks; ++c) {
        blocks[c] = get(first + c);
        if (blocks[c] >= 0) present |= 1u << c, ++count;
      }
      const int input = get(0);
      const bool pair = PAIRS && get(1) != 0;
      wait_counted(empty + stage, (round & 1) ^ 1, p.waits, 0, true);
      masks[stage] = static_cast<int>(present | (pair ? 1u << 16 : 0u));
      const int x_bytes = kTN * C::kRowBytes * (pair ? 2 : 1);
      jbs::mbarrier_arrive_expect_tx(full + stage, x_bytes + count * C::kBlockBytes);
      unsigned char* slot = smem + stage * C::kSlotBytes;
      if constexpr ((MODE & 128) != 0) {
        // PACKED: the tile and the item's present blocks, each pre-swizzled and contiguous in
        // memory (what a prepass would write), by two 1-D bulk copies; the blocks land in
        // column order at the front of the slot's block area.
        jbs::bulk_copy_g2s(slot, p.xp + (static_cast<int64_t>(input) * p.out_cols + row_tile * kTN) * BS,
                           kTN * C::kRowBytes, full + stage);
        if (count > 0) {
          jbs::bulk_copy_g2s(slot + C::kXBytes, p.pw + static_cast<int64_t>(p.w_off[i]) * BS * BS,
                             count * C::kBlockBytes, full + stage);
        }
        return;
      } else if constexpr ((MODE & 8) != 0) {
        // BLOCKED: x as (input block, row, BS channels), a tile 16 KB contiguous, loaded as
        // 128-byte rows of two activation rows each.
        jbs::tma_load_5d(slot, &p.xb_map, 0, row_tile * kTN * C::kRowBytes / 128, input, 0, 0, full + stage);
      } else {
        jbs::tma_load_5d(slot, pair ? &p.x2_map : &p.x_map, input * BS, row_tile * kTN, 0, 0, 0, full + stage);
      }
      int ordinal = i;
#pragma unroll
      for (int c = 0; c < kBlocks; ++c) {
        if (blocks[c] >= 0) {
          if constexpr (CL > 1 && (MODE & 2) == 0) {
            if (ordinal++ % CL == static_cast<int>(rank)) {
              tma_load_5d_multicast(slot + C::kXBytes + c * C::kBlockBytes, &p.w_map, 0, blocks[c] * BS,
                                    full + stage, static_cast<uint16_t>((1u << CL) - 1));
            }
          } else {
            jbs::tma_load_5d(slot + C::kXBytes + c * C::kBlockBytes, &p.w_map, 0, blocks[c] * BS, 0, 0, 0,
                             full + stage);
          }
        }
      }
    };
    if constexpr ((MODE & 32) != 0) {
      // ROWS AHEAD: the whole loader warp reads the item rows, lane l item base + l, the next
      // 32 rows while the current 32 are issued, and lane 0 issues each item with its row
      // from a shuffle; the single-thread loader reads each row just before its slot, a
      // global load round trip per item on the loader's critical path.
      if (tid < 288) {
        const int lane = tid & 31;
        int cur[kRow], nxt[kRow];
        auto fetch = [&](int base, int (&r)[kRow]) {
          const int i = base + lane;
#pragma unroll
          for (int c = 0; c < kRow; ++c) r[c] = i < end ? __ldg(p.items + static_cast<int64_t>(i) * kRow + c) : -1;
        };
        fetch(beg, cur);
        for (int base = beg; base < end; base += 32) {
          if (base + 32 < end) fetch(base + 32, nxt);
          const int n = min(32, end - base);
          for (int j = 0; j < n; ++j) {
            int vals[kRow];
#pragma unroll
            for (int c = 0; c < kRow; ++c) vals[c] = __shfl_sync(0xffffffffu, cur[c], j);
            if (lane == 0) issue_item(base + j, [&](int c) { return vals[c]; });
            __syncwarp();
            if (++stage == C::kStages) stage = 0, ++round;
          }
#pragma unroll
          for (int c = 0; c < kRow; ++c) cur[c] = nxt[c];
        }
      }
      return;
    }
    if constexpr ((MODE & 256) != 0) {
      // TWO LOADERS: lane 0 of warps 8 and 9, the even and the odd items (slots), so two
      // threads issue the TMA copies: is the single issuing thread the feed's limit?
      static_assert((MODE & 32) == 0, "TWO LOADERS: rows read per item");
      if (tid == 256 || tid == 288) {
        for (int i = beg + (tid - 256) / 32; i < end; i += 2) {
          stage = (i - beg) % C::kStages;
          round = static_cast<uint32_t>((i - beg) / C::kStages);
          const int* row = p.items + static_cast<int64_t>(i) * kRow;
          issue_item(i, [&](int c) { return __ldg(row + c); });
        }
      }
      return;
    }
    if (tid == 256) {
      for (int i = beg; i < end; ++i) {
        const int* row = p.items + static_cast<int64_t>(i) * kRow;
        issue_item(i, [&](int c) { return __ldg(row + c); });
        if (++stage == C::kStages) stage = 0, ++round;
      }
    }
    return;
  }
  jbs::warpgroup_reg_alloc<232>();
  const long long walk_start = clock64();
  const int lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
  float acc[C::kMH][kP][BS / 8][4] = {};
  int stage = 0, prev = -1;
  uint32_t round = 0;
  if constexpr ((MODE & 64) != 0) {
    // LOADER ONLY: each slot released as soon as it has landed, no MMA: the feed's own rate.
    for (int i = beg; i < end; ++i) {
      jbs::mbarrier_wait(full + stage, round & 1);
      jbs::mbarrier_arrive_warp(empty + stage, lane);
      if (++stage == C::kStages) stage = 0, ++round;
    }
  } else if constexpr ((MODE & 4) != 0) {
    // RS: each warp loads its A fragments from the swizzled tile once per item (ldmatrix)
    // and every present block's wgmma reads them from registers, instead of every SS wgmma
    // re-reading A from shared memory per block (NOTES session 31, point 7).
    static_assert(!PAIRS && CL == 1, "RS: single items, no clusters");
    constexpr int kKSteps = BS / 16;
    // A "chunk" of an item: the A fragments of kCH m64 halves x kG k-steps, in one of two
    // register buffers (the other chunk's wgmmas stay in flight). Whole items where the
    // accumulators leave room (128 columns), else a half's 2 k-steps (8 registers).
    constexpr int kCH = kP * BS <= 128 ? C::kMH : 1;
    constexpr int kG = kCH == C::kMH ? kKSteps : 2;
    constexpr int kKChunks = kKSteps / kG;
    constexpr int kChunks = (C::kMH / kCH) * kKChunks;
    uint32_t a[2][kCH][kG][4];
    // ldmatrix x4: lanes 0-15 rows 0-15 at the k-step's first 16 bytes, lanes 16-31 the second.
    const int lane_row = wg * kTN / 2 + (warp & 3) * 16 + (lane & 15);
    const int lane_chunk = lane >> 4;
    auto consume = [&](auto parity) {
      wait_counted(full + stage, round & 1, p.waits, 1, tid == 0);
      const unsigned present = static_cast<unsigned>(masks[stage]);
      unsigned char* slot = smem + stage * C::kSlotBytes;
#pragma unroll
      for (int q = 0; q < kChunks; ++q) {
        const int buf = (decltype(parity)::value * kChunks + q) & 1;
        const int h0 = (q / kKChunks) * kCH, k0 = (q % kKChunks) * kG;
#pragma unroll
        for (int hh = 0; hh < kCH; ++hh) {
#pragma unroll
          for (int g = 0; g < kG; ++g) {
            // TMA's swizzle: 16-byte chunk c of row r sits at c ^ (r % 8) (128-byte rows) or
            // c ^ (r / 2 % 4) (64-byte rows); the ring is 1024-byte aligned.
            const int r = lane_row + (h0 + hh) * 64;
            const int c = (k0 + g) * 2 + lane_chunk;
            if constexpr ((MODE & 8) != 0 && C::kRowBytes == 64) {
              // BLOCKED: activation row r is half of 128-byte row r / 2 (128-byte swizzle).
              const int sr = r >> 1, sc = ((r & 1) << 2) | c;
              jbs::ldsm_x4(a[buf][hh][g], slot + sr * 128 + ((sc ^ (sr & 7)) << 4));
            } else {
              const int x = C::kRowBytes == 128 ? (r & 7) : ((r >> 1) & 3);
              jbs::ldsm_x4(a[buf][hh][g], slot + r * C::kRowBytes + ((c ^ x) << 4));
            }
          }
        }
        jbs::wgmma_fence();
#pragma unroll
        for (int hh = 0; hh < kCH; ++hh) {
#pragma unroll
          for (int c = 0; c < kP; ++c) {
            if (present & (1u << c)) {
              const int at = (MODE & 128) != 0 ? __popc(present & ((1u << c) - 1)) : c;  // PACKED: in order
              const uint64_t b = desc<BS>(slot + C::kXBytes + at * C::kBlockBytes);
#pragma unroll
              for (int g = 0; g < kG; ++g) {
                jbs::wgmma_rs<T, BS, 1>(acc[h0 + hh][c], a[buf][hh][g], b + (k0 + g) * 16 * C::kRowBytes / 16);
              }
            }
          }
        }
        jbs::wgmma_commit();
        jbs::wgmma_wait<1>();  // the previous chunk has retired: its buffer is free
        if (q == 0 && prev >= 0) jbs::mbarrier_arrive_warp(empty + prev, lane);  // and the last item's slot
      }
      prev = stage;
      if (++stage == C::kStages) stage = 0, ++round;
    };
    for (int i = beg; i < end; i += 2) {
      consume(std::integral_constant<int, 0>{});
      if (i + 1 < end) consume(std::integral_constant<int, 1>{});
    }
  } else
  for (int i = beg; i < end; ++i) {
    wait_counted(full + stage, round & 1, p.waits, 1, tid == 0);
    const unsigned present = static_cast<unsigned>(masks[stage]);
    const bool pair = PAIRS && (present >> 16) != 0;
    unsigned char* slot = smem + stage * C::kSlotBytes;
    // A single item's tile has BS-channel rows; a pair's, 2 BS channels (128 bytes, 128-byte swizzle).
    const int a_row_bytes = pair ? 2 * C::kRowBytes : C::kRowBytes;
    const uint64_t a_mode = pair ? 1 : C::kLayoutType;
    jbs::wgmma_fence();
#pragma unroll
    for (int h = 0; h < C::kMH; ++h) {
      const uint64_t a = jbs::wgmma_desc(slot + (wg * kTN / 2 + h * 64) * a_row_bytes, 16, 8 * a_row_bytes) | (a_mode << 62);
#pragma unroll
      for (int j = 0; j < C::kHalves; ++j) {
#pragma unroll
        for (int c = 0; c < kP; ++c) {
          if (present & (1u << (j * kP + c))) {
            const int at = (MODE & 128) != 0 ? __popc(present & ((1u << c) - 1)) : j * kP + c;  // PACKED: in order
            const uint64_t b = desc<BS>(slot + C::kXBytes + at * C::kBlockBytes);
#pragma unroll
            for (int ks = 0; ks < BS / 16; ++ks) {
              // A K-major: a k-step is 32 bytes along the row (half j of a pair starts BS
              // channels in); B N-major: 16 rows further.
              jbs::wgmma_ss<T, BS, 1, 0>(acc[h][c], a + (j * BS / 16 + ks) * 2, b + ks * 16 * C::kRowBytes / 16);
            }
          }
        }
      }
    }
    jbs::wgmma_commit();
    jbs::wgmma_wait<1>();
    if (prev >= 0) {
      if constexpr (CL > 1) {
        __syncwarp();
        if (lane < CL) mbarrier_arrive_remote<(MODE & 1) != 0>(empty + prev, lane);
      } else {
        jbs::mbarrier_arrive_warp(empty + prev, lane);
      }
    }
    prev = stage;
    if (++stage == C::kStages) stage = 0, ++round;
  }
  jbs::wgmma_wait<0>();
  if (p.waits && tid == 0) atomicAdd(reinterpret_cast<unsigned long long*>(p.waits + 2), clock64() - walk_start);
  // No CTA leaves while a peer may still arrive on its barriers (the producers have exited).
  if constexpr (CL > 1) cluster_sync();
  // Straight from the accumulators: rows 16 (warp % 4) + lane / 4 (+ 8), columns 2 (lane % 4) of each 8.
  const int r0 = row_tile * kTN + wg * kTN / 2 + (warp & 3) * 16 + lane / 4;
#pragma unroll
  for (int h = 0; h < C::kMH; ++h) {
#pragma unroll
    for (int c = 0; c < kP; ++c) {
#pragma unroll
      for (int nt = 0; nt < BS / 8; ++nt) {
        const int col = (group * kP + c) * BS + nt * 8 + 2 * (lane & 3);
        if (col >= p.out_cols) continue;  // a partial last group
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int64_t r = r0 + h * 64 + half * 8;
          __nv_bfloat162 v = __floats2bfloat162_rn(acc[h][c][nt][2 * half], acc[h][c][nt][2 * half + 1]);
          *reinterpret_cast<__nv_bfloat162*>(p.y + r * p.out_cols + col) = v;
        }
      }
    }
  }
}

bool g_waits = false;  // "waits": also measure where the walk waits
bool g_probe = false;  // "probe": also time one wave over fewer SMs

template <int BS, bool PAIRS = false, bool WIDE = false, int CL = 1, int MODE = 0, int COLS = 128>
void run(int n, double density, int band, double dense_tflops, int launch_cl = CL) {
  using C = Cfg<BS, PAIRS, WIDE, COLS, (MODE & 16) != 0 ? 1 : (MODE & 512) != 0 ? 2 : 0>;
  constexpr int kTN = C::kTN;
  const int cb = n / BS, kb = n / BS, P = C::kP, groups = (kb + P - 1) / P;
  std::mt19937 rng(1234 + BS);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<int> block_at(static_cast<size_t>(cb) * kb, -1);
  int nnz = 0;
  for (int c = 0; c < cb; ++c)
    for (int k = 0; k < kb; ++k)
      if (u(rng) < density) block_at[static_cast<size_t>(c) * kb + k] = nnz++;
  std::vector<int> offsets{0}, items;
  const int row_ints = PAIRS ? 2 + 2 * P : 1 + P;
  int pairs = 0;
  for (int g = 0; g < groups; ++g) {
    auto in_union = [&](int c) {
      bool any = false;
      for (int j = 0; j < P && g * P + j < kb; ++j) any |= c < cb && block_at[static_cast<size_t>(c) * kb + g * P + j] >= 0;
      return any;
    };
    auto push_blocks = [&](int c) {
      for (int j = 0; j < P; ++j) {
        items.push_back(c < 0 || g * P + j >= kb ? -1 : block_at[static_cast<size_t>(c) * kb + g * P + j]);
      }
    };
    for (int c = 0; c < cb; ++c) {
      if (!in_union(c)) continue;
      const bool pair = PAIRS && c % 2 == 0 && in_union(c + 1);
      items.push_back(c);
      if (PAIRS) items.push_back(pair ? 1 : 0);
      push_blocks(c);
      if (PAIRS) push_blocks(pair ? c + 1 : -1);
      if (pair) ++c, ++pairs;
    }
    offsets.push_back(static_cast<int>(items.size() / row_ints));
  }
  std::vector<T> hx(static_cast<size_t>(n) * n), hw(static_cast<size_t>(nnz) * BS * BS);
  for (auto& v : hx) v = __float2bfloat16(static_cast<float>(u(rng) * 2 - 1));
  for (auto& v : hw) v = __float2bfloat16(static_cast<float>(u(rng) * 2 - 1));
  // BLOCKED: the same x stored input block by input block (what a prepass would write).
  std::vector<T> hxb;
  if (MODE & 8) {
    hxb.resize(hx.size());
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < n; ++c) hxb[(static_cast<size_t>(c / BS) * n + r) * BS + c % BS] = hx[static_cast<size_t>(r) * n + c];
  }
  // PACKED: x and the blocks as a prepass would write them: pre-swizzled as TMA's 64-byte
  // swizzle places them in shared memory (16-byte chunk c of row r at c ^ (r / 2 % 4); the
  // ring is 1024-byte aligned, a tile 256 rows, a block 32), x input block by input block,
  // the blocks in item order.
  std::vector<T> hxp, hpw;
  std::vector<int> w_off;
  if (MODE & 128) {
    static_assert(BS == 32 || !(MODE & 128), "PACKED: bs 32 (64-byte rows)");
    auto swizzled = [](int r, int e) { return r * BS + (((e / 8) ^ ((r >> 1) & 3)) * 8) + e % 8; };
    hxp.resize(hx.size());
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < n; ++c) hxp[static_cast<size_t>(c / BS) * n * BS + swizzled(r, c % BS)] = hx[static_cast<size_t>(r) * n + c];
    int next = 0;
    for (size_t it = 0; it * row_ints < items.size(); ++it) {
      w_off.push_back(next);
      for (int j = 0; j < P; ++j) {
        const int b = items[it * row_ints + 1 + j];
        if (b < 0) continue;
        hpw.resize(static_cast<size_t>(next + 1) * BS * BS);
        for (int r = 0; r < BS; ++r)
          for (int e = 0; e < BS; ++e)
            hpw[static_cast<size_t>(next) * BS * BS + swizzled(r, e)] = hw[(static_cast<size_t>(b) * BS + r) * BS + e];
        ++next;
      }
    }
  }
  T *x, *w, *y, *xb = nullptr, *xp = nullptr, *pw = nullptr;
  int* d_w_off = nullptr;
  int *d_off, *d_items;
  CHECK(cudaMalloc(&x, hx.size() * 2));
  CHECK(cudaMalloc(&w, hw.size() * 2));
  CHECK(cudaMalloc(&y, static_cast<size_t>(n) * n * 2));
  CHECK(cudaMalloc(&d_off, offsets.size() * 4));
  CHECK(cudaMalloc(&d_items, items.size() * 4));
  CHECK(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(w, hw.data(), hw.size() * 2, cudaMemcpyHostToDevice));
  if (MODE & 128) {
    CHECK(cudaMalloc(&xp, hxp.size() * 2));
    CHECK(cudaMalloc(&pw, hpw.size() * 2));
    CHECK(cudaMalloc(&d_w_off, w_off.size() * 4));
    CHECK(cudaMemcpy(xp, hxp.data(), hxp.size() * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(pw, hpw.data(), hpw.size() * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d_w_off, w_off.data(), w_off.size() * 4, cudaMemcpyHostToDevice));
  }
  if (MODE & 8) {
    CHECK(cudaMalloc(&xb, hxb.size() * 2));
    CHECK(cudaMemcpy(xb, hxb.data(), hxb.size() * 2, cudaMemcpyHostToDevice));
  }
  CHECK(cudaMemcpy(d_off, offsets.data(), offsets.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_items, items.data(), items.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(y, 0, static_cast<size_t>(n) * n * 2));
  Params p{};
  const CUtensorMapSwizzle sw = BS == 64 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
  if (!jbs::encode_tensor_map_16bit(&p.x_map, x, {uint64_t(n), uint64_t(n), 1, 1, 1},
                                    {uint64_t(n) * 2, uint64_t(n) * n * 2, uint64_t(n) * n * 2, uint64_t(n) * n * 2},
                                    {BS, kTN, 1, 1, 1}, sw) ||
      // The pair map only where used: at bs 64 its 256-byte rows exceed the widest swizzle.
      (PAIRS && !jbs::encode_tensor_map_16bit(&p.x2_map, x, {uint64_t(n), uint64_t(n), 1, 1, 1},
                                    {uint64_t(n) * 2, uint64_t(n) * n * 2, uint64_t(n) * n * 2, uint64_t(n) * n * 2},
                                    {2 * BS, kTN, 1, 1, 1}, CU_TENSOR_MAP_SWIZZLE_128B)) ||
      !jbs::encode_tensor_map_16bit(&p.w_map, w, {BS, uint64_t(nnz) * BS, 1, 1, 1},
                                    {BS * 2, uint64_t(nnz) * BS * BS * 2, uint64_t(nnz) * BS * BS * 2,
                                     uint64_t(nnz) * BS * BS * 2},
                                    {BS, BS, 1, 1, 1}, sw)) {
    std::printf("tensor map encoding failed\n");
    std::exit(1);
  }
  // BLOCKED: dims (64 values = 128 bytes, rows * BS / 64, input blocks), boxes of kTN rows.
  const uint64_t half_rows = uint64_t(n) * BS * 2 / 128;
  if ((MODE & 8) && !jbs::encode_tensor_map_16bit(&p.xb_map, xb, {64, half_rows, uint64_t(n / BS), 1, 1},
                                                  {128, half_rows * 128, half_rows * 128 * (n / BS), half_rows * 128 * (n / BS)},
                                                  {64, uint32_t(kTN * BS * 2 / 128), 1, 1, 1}, CU_TENSOR_MAP_SWIZZLE_128B)) {
    std::printf("blocked tensor map encoding failed\n");
    std::exit(1);
  }
  p.xp = xp;
  p.pw = pw;
  p.w_off = d_w_off;
  p.offsets = d_off;
  p.items = d_items;
  p.y = y;
  p.groups = groups;
  p.row_tiles = n / kTN;
  p.out_cols = n;
  p.band = band;
  auto kernel = group_tma_ss<BS, PAIRS, WIDE, CL, MODE, COLS>;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmem));
  const int grid = groups * p.row_tiles;
  // CTAs in clusters of launch_cl adjacent ids: adjacent row tiles of one group (band % CL == 0).
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = launch_cl;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  auto config_for = [&](int ctas) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(ctas);
    config.blockDim = dim3(384);
    config.dynamicSmemBytes = C::kSmem;
    config.attrs = &cluster;
    config.numAttrs = 1;
    return config;
  };
  auto launch = [&](int ctas) {
    const cudaLaunchConfig_t config = config_for(ctas);
    CHECK(cudaLaunchKernelEx(&config, kernel, p));
  };
  if (launch_cl > 1) {
    const cudaLaunchConfig_t config = config_for(grid);
    int clusters = 0;
    CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &config));
    std::printf("  clusters of %d resident at once: %d (%d CTAs)\n", launch_cl, clusters, clusters * launch_cl);
  }
  launch(grid);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<T> hy(static_cast<size_t>(n) * n);
  CHECK(cudaMemcpy(hy.data(), y, hy.size() * 2, cudaMemcpyDeviceToHost));
  double worst = 0;
  for (int t = 0; t < 256; ++t) {
    const int r = static_cast<int>(u(rng) * n), col = static_cast<int>(u(rng) * n);
    double ref = 0, mag = 0;
    const int k = col / BS, kc = col % BS;
    for (int c = 0; c < cb; ++c) {
      const int b = block_at[static_cast<size_t>(c) * kb + k];
      if (b < 0) continue;
      for (int i = 0; i < BS; ++i) {
        const double term = double(__bfloat162float(hx[static_cast<size_t>(r) * n + c * BS + i])) *
                            __bfloat162float(hw[(static_cast<size_t>(b) * BS + i) * BS + kc]);
        ref += term;
        mag += std::fabs(term);
      }
    }
    const double err = std::fabs(__bfloat162float(hy[static_cast<size_t>(r) * n + col]) - ref) / (mag + 1e-30);
    worst = std::max(worst, err);
  }
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int i = 0; i < 3; ++i) launch(grid);
  constexpr int kReps = 20;
  cudaEventRecord(e0);
  for (int i = 0; i < kReps; ++i) launch(grid);
  cudaEventRecord(e1);
  CHECK(cudaEventSynchronize(e1));
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  const double us = ms * 1000 / kReps;
  const double flop = 2.0 * n * static_cast<double>(nnz) * BS * BS;
  const int n_items = offsets.back();
  const double smem_bytes = static_cast<double>(p.row_tiles) *
                            (double(n_items + pairs) * kTN * C::kRowBytes + double(nnz) * C::kBlockBytes);
  std::printf("bs %2d cols %d%s%s cluster %d/%d mode %d density 1/%-3.0f band %d: %8.1f us %6.1f TFLOP/s (%4.1f%% of dense %.0f) %5.2f TB/s into smem, "
              "items %d, blocks/item %.2f, stages %d, max rel err %.2e%s\n",
              BS, P * BS, PAIRS ? " pairs" : "", WIDE ? " wide" : "", CL, launch_cl, MODE, 1 / density, band, us, flop / us * 1e-6, 100 * flop / us * 1e-6 / dense_tflops, dense_tflops,
              smem_bytes / us * 1e-6, n_items, double(nnz) / n_items, C::kStages, worst,
              (MODE & 64) != 0 ? "  (loader only: no product)" : worst < 1e-3 ? "" : "  WRONG");
  if (g_waits) {
    // Where the walk's cycles go: summed over CTAs, the loader's waits for free slots and
    // consumer warp 0's waits for full ones, against the walks' cycles.
    long long* d_waits;
    CHECK(cudaMalloc(&d_waits, 3 * sizeof(long long)));
    CHECK(cudaMemset(d_waits, 0, 3 * sizeof(long long)));
    p.waits = d_waits;
    launch(grid);
    CHECK(cudaDeviceSynchronize());
    long long w[3];
    CHECK(cudaMemcpy(w, d_waits, sizeof w, cudaMemcpyDeviceToHost));
    std::printf("    loader waiting for free slots %4.1f%%, consumers waiting for full ones %4.1f%% of the walk\n",
                100.0 * w[0] / w[2], 100.0 * w[1] / w[2]);
    p.waits = nullptr;
    cudaFree(d_waits);
  }
  if (g_probe) {
    // One wave of the first `ctas` CTAs (band order: the first groups over the first row
    // tiles, so about equal work each): if a shared resource (the L2) bounds the feed, a
    // CTA runs faster when fewer SMs are busy; if each SM's own intake does, it does not.
    int num_sms = 0;
    CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, 0));
    double bytes_per_cta = 0;  // the first num_sms CTAs' mean bytes into shared memory
    for (int id = 0; id < num_sms; ++id) {
      const int g = id / band;
      bytes_per_cta += (double(offsets[g + 1] - offsets[g]) * kTN * C::kRowBytes) / num_sms;
    }
    for (const int ctas : {num_sms, num_sms * 3 / 4, num_sms / 2, num_sms / 4}) {
      for (int i = 0; i < 3; ++i) launch(ctas);
      cudaEventRecord(e0);
      for (int i = 0; i < kReps; ++i) launch(ctas);
      cudaEventRecord(e1);
      CHECK(cudaEventSynchronize(e1));
      cudaEventElapsedTime(&ms, e0, e1);
      const double wave_us = ms * 1000 / kReps;
      std::printf("    one wave of %3d CTAs: %7.1f us; activation tiles alone %.1f GB/s per SM\n", ctas, wave_us,
                  bytes_per_cta / wave_us * 1e-3);
    }
  }
  cudaFree(x), cudaFree(w), cudaFree(y), cudaFree(d_off), cudaFree(d_items), cudaFree(xb);
  cudaFree(xp), cudaFree(pw), cudaFree(d_w_off);
}

}  // namespace

int main(int argc, char** argv) {
  const double dense = argc > 1 ? std::atof(argv[1]) : 790.0;  // TFLOP/s of the dense dot, measured elsewhere
  // "next": session 30's untried variants next to their baselines (bs 32 pairs, bs 64 wide).
  const bool next_only = argc > 2 && argv[2][0] == 'n';
  g_probe = argc > 2 && argv[2][0] == 'p';
  if (g_probe) {
    for (double d : {1.0, 0.5}) run<64>(8192, d, 4, dense);
    run<32>(8192, 0.5, 4, dense);
    return 0;
  }
  // "3": groups of 192 columns beside 128, each also launched in clusters of 2 (no sharing).
  if (argc > 2 && argv[2][0] == '3') {
    for (double d : {0.5, 0.25, 0.125}) {
      run<64>(8192, d, 4, dense);
      run<64, false, false, 1, 0, 192>(8192, d, 4, dense);
      run<64>(8192, d, 4, dense, 2);
      run<64, false, false, 1, 0, 192>(8192, d, 4, dense, 2);
    }
    for (double d : {0.5, 0.25, 0.125}) {
      run<32>(8192, d, 4, dense);
      run<32, false, false, 1, 0, 192>(8192, d, 4, dense);
      run<32, false, false, 1, 0, 192>(8192, d, 4, dense, 2);
    }
    return 0;
  }
  // "rs": A fragments loaded once per item into registers (RS wgmma) beside SS, bs 32 (128
  // columns) and bs 64 (192 columns, launched in clusters of 2 as the production kernel).
  if (argc > 2 && argv[2][0] == 'w') {
    g_waits = true;
    for (double d : {0.5, 0.125}) {
      run<32>(8192, d, 4, dense);
      run<32, false, false, 1, 4>(8192, d, 4, dense);
    }
    for (double d : {0.5, 0.125}) run<64, false, false, 1, 0, 192>(8192, d, 4, dense, 2);
    return 0;
  }
  // "q N": one case, for a profiler (its first launch is the checked one): N = 0 bs 32 SS,
  // 1 bs 32 RS, 2 bs 64 (192 columns, clusters of 2), 3 bs 32 RS with blocked activations;
  // density 1/2.
  if (argc > 3 && argv[2][0] == 'q') {
    const int which = std::atoi(argv[3]);
    if (which == 0) run<32>(8192, 0.5, 4, dense);
    if (which == 1) run<32, false, false, 1, 4>(8192, 0.5, 4, dense);
    if (which == 2) run<64, false, false, 1, 0, 192>(8192, 0.5, 4, dense, 2);
    if (which == 3) run<32, false, false, 1, 12>(8192, 0.5, 4, dense);
    return 0;
  }
  // "two": two loader threads (mode 256: even and odd items) beside one, the feed alone and RS.
  if (argc > 2 && argv[2][0] == 't') {
    for (double d : {0.5, 0.25, 0.125}) {
      run<32, false, false, 1, 64>(8192, d, 4, dense);
      run<32, false, false, 1, 320>(8192, d, 4, dense);
      run<32, false, false, 1, 4>(8192, d, 4, dense);
      run<32, false, false, 1, 260>(8192, d, 4, dense);
    }
    for (double d : {0.5, 0.125}) {
      run<64, false, false, 1, 64, 192>(8192, d, 4, dense, 2);
      run<64, false, false, 1, 320, 192>(8192, d, 4, dense, 2);
      run<64, false, false, 1, 0, 192>(8192, d, 4, dense, 2);
      run<64, false, false, 1, 256, 192>(8192, d, 4, dense, 2);
    }
    return 0;
  }
  // "depth": bs 64 (192 columns, two loaders, clusters of 2) with 4 slots against 3 (MODE &
  // 512): does the ring's depth hold the feed back where a slot is 56 KB?
  if (argc > 2 && std::string(argv[2]) == "depth") {
    for (double d : {0.5, 0.25, 0.125}) {
      run<64, false, false, 1, 256, 192>(8192, d, 4, dense, 2);
      run<64, false, false, 1, 768, 192>(8192, d, 4, dense, 2);
      run<64, false, false, 1, 256, 192>(8192, d, 4, dense, 2);
      run<64, false, false, 1, 768, 192>(8192, d, 4, dense, 2);
    }
    return 0;
  }
  // "rs2": with two loaders, SS (mode 256) against RS (mode 260) at bs 32.
  if (argc > 2 && std::string(argv[2]) == "rs2") {
    for (double d : {0.5, 0.25, 0.125}) {
      run<32, false, false, 1, 256>(8192, d, 4, dense);
      run<32, false, false, 1, 260>(8192, d, 4, dense);
      run<32, false, false, 1, 256>(8192, d, 4, dense, 2);
    }
    return 0;
  }
  // "loader": the feed alone (mode 64: slots released on arrival, no MMA) beside the kernel,
  // with TMA boxes and with PACKED copies (mode 128: two 1-D bulk copies per item of
  // pre-swizzled data), SS and RS; bs 64 (192 columns) alone for comparison.
  if (argc > 2 && argv[2][0] == 'l') {
    for (double d : {0.5, 0.25, 0.125}) {
      run<32, false, false, 1, 64>(8192, d, 4, dense);
      run<32, false, false, 1, 192>(8192, d, 4, dense);
      run<32>(8192, d, 4, dense);
      run<32, false, false, 1, 128>(8192, d, 4, dense);
      run<32, false, false, 1, 4>(8192, d, 4, dense);
      run<32, false, false, 1, 132>(8192, d, 4, dense);
    }
    for (double d : {0.5, 0.125}) {
      run<64, false, false, 1, 64, 192>(8192, d, 4, dense, 2);
      run<64, false, false, 1, 0, 192>(8192, d, 4, dense, 2);
    }
    return 0;
  }
  // "ahead": the loader warp reading item rows 32 at a time ahead (mode 32) beside the
  // single loader thread, SS and RS at bs 32, SS at bs 64 (192 columns, clusters of 2).
  if (argc > 2 && argv[2][0] == 'a') {
    g_waits = true;
    for (double d : {0.5, 0.25, 0.125}) {
      run<32>(8192, d, 4, dense);
      run<32, false, false, 1, 32>(8192, d, 4, dense);
      run<32, false, false, 1, 4>(8192, d, 4, dense);
      run<32, false, false, 1, 36>(8192, d, 4, dense);
    }
    for (double d : {0.5, 0.25, 0.125}) {
      run<64, false, false, 1, 0, 192>(8192, d, 4, dense, 2);
      run<64, false, false, 1, 32, 192>(8192, d, 4, dense, 2);
    }
    return 0;
  }
  // "deep": the RS kernel at bs 32 with 9 slots beside 8.
  if (argc > 2 && argv[2][0] == 'd') {
    for (double d : {0.5, 0.25, 0.125}) {
      run<32, false, false, 1, 4>(8192, d, 4, dense);
      run<32, false, false, 1, 20>(8192, d, 4, dense);
      run<32, false, false, 1, 20>(8192, d, 2, dense);
    }
    return 0;
  }
  if (argc > 2 && std::string(argv[2]) == "rs") {
    for (double d : {0.5, 0.25, 0.125}) {
      run<32>(8192, d, 4, dense);
      run<32, false, false, 1, 4>(8192, d, 4, dense);
      run<32, false, false, 1, 12>(8192, d, 4, dense);
      run<32, false, false, 1, 12>(8192, d, 4, dense, 2);
    }
    return 0;
  }
  if (argc > 2 && std::string(argv[2]) == "rs64") {
    for (double d : {0.5, 0.25, 0.125}) {
      run<64, false, false, 1, 0, 192>(8192, d, 4, dense, 2);
      run<64, false, false, 1, 4, 192>(8192, d, 4, dense, 2);
    }
    return 0;
  }
  // "cluster": the weight blocks multicast over clusters of 2 and 4 row tiles.
  if (argc > 2 && argv[2][0] == 'c') {
    // CL / launch_cl: 1/2 is the plain kernel launched in clusters of 2 (no sharing).
    for (double d : {0.5, 0.125}) {
      run<64>(8192, d, 4, dense);
      run<64>(8192, d, 4, dense, 2);
      run<64, false, false, 2>(8192, d, 4, dense);
      run<64, false, false, 2, 1>(8192, d, 4, dense);
      run<64, false, false, 2, 2>(8192, d, 4, dense);
    }
    return 0;
  }
  if (next_only) {
    for (double d : {0.5, 0.25, 0.125}) {
      run<64>(8192, d, 4, dense);
      run<64, false, true>(8192, d, 4, dense);
    }
  } else {
    for (double d : {1.0, 0.5, 0.25, 0.125}) run<64>(8192, d, 4, dense);
    for (double d : {0.5, 0.25, 0.125}) run<64>(8192, d, 8, dense);
  }
  for (double d : {0.5, 0.25, 0.125}) {
    run<32>(8192, d, 4, dense);
    run<32, true>(8192, d, 4, dense);
  }
  return 0;
}
