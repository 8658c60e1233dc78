// Small-N forward / input-gradient kernel (sm_90): column groups walked by a
// warp-specialized pipeline, with the union items split evenly over a
// persistent grid (stream-K).
//
// Why: at N <= 64 the op streams the weight blocks once, and what limits the
// older small-N kernels is not HBM but how they feed the SMs:
//  * the one-column kernel (bsmm_stream_kernel.cuh) loads an N x BS activation
//    tile from L2 for every weight block: L2 -> SM traffic of W * (1 + N / BS);
//  * the column-group kernel (bsmm_stream_group_kernel.cuh) loads each tile once
//    per group of 128 output columns, but every union item costs a CTA-wide
//    barrier, and its rate was bound by that loop (benchmarks/NOTES.md, session 8).
// Here eight producer warps fill a ring of stages (activation tile + the item's
// present weight blocks, absent ones are neither loaded nor zero-filled), each
// stage's cp.asyncs arriving on its "full" mbarrier as they land; four consumer
// warps, each owning 32 of the group's 128 output columns, wait on it
// independently and release the stage on its "empty" mbarrier. No CTA-wide
// barrier in the loop; the producers run as far ahead as the ring allows.
//
// Measured (H100, N = 32, 12288^2, bs 32; benchmarks/NOTES.md, session 10): fp32
// at density 1/2 1.16x faster than the one-column kernel (fwd), bf16 at 1 and 1/2
// on par, but slower at low densities and small blocks: time ~ 11 us + 0.3 us
// per union item per CTA. Not the items in flight (a variant with compact rings
// held 1.5-7x more and was slower): each consumer warp multiplies every item in
// order, so one warp's per-item latency (barrier wait, an ldmatrix -> mma chain
// per present block, release; ~500 cycles) sets the CTA's item rate. The fixed
// part (zeroing kernel, table and data latencies, the pieces' fix-up) is ~2x the
// one-column kernel's. The launcher takes it where it measured faster.
//
// Work split: the union items of all groups (tables.py _groups, the large-N
// kernels' table: [input block, weight block of column p or -1]) form one list of
// E entries, and CTA b of B takes entries [E b / B, E (b + 1) / B). A group that
// spans several CTAs is a "split" group: each of its pieces writes an fp32
// partial to slot q + b of the scratch result (unique: pieces of later groups sit
// in later CTAs), and per consumer warp an int counter (zeroed by a kernel just
// before) elects the last piece to arrive, which sums the pieces in CTA order and
// writes the output: bitwise deterministic. Groups inside one CTA are written
// directly. Groups with no entries are written as zeros by CTA q mod B.
#pragma once

#include <cstdint>

#include "common/dtype.cuh"
#include "common/mbarrier.cuh"
#include "common/ptx.cuh"
#include "common/smem.cuh"
#include "matmul/bsmm_blocks_kernel.cuh"  // BlocksConfig strides, cmin/cmax/cclamp
#include "matmul/bsmm_group_kernel.cuh"   // GroupParams
#include "matmul/tile_io.cuh"
#include "matmul/warp_mma.cuh"

namespace jbs {

struct StreamWsParams : GroupParams {
  int num_ctas;     // B = gridDim.x
  int num_entries;  // E = rows of group_items
  float* partials;  // (groups, num_groups + B, TN, 128) fp32
  int* counters;    // (groups, num_groups, kStreamWsConsumers), zero at launch
};

inline constexpr int kStreamWsConsumers = 4;
inline constexpr int kStreamWsProducers = 8;
// Ring budget: one CTA per SM with most of its shared memory in flight.
inline constexpr int kStreamWsRingBytes = 184 * 1024;
// Group offsets are kept in shared memory (consumers look up group boundaries).
inline constexpr int64_t kStreamWsMaxGroups = 4096;

template <typename T, int BS, bool TRANS, int TN>
struct StreamWsConfig {
  static constexpr bool k16 = kIs16Bit<T>;
  static constexpr int kP = 128 / BS;  // block columns per group (the 128-wide output tile)
  static constexpr int kRowInts = 1 + kP;
  static constexpr int kThreads = 32 * (kStreamWsProducers + kStreamWsConsumers);
  static constexpr int kMT = TN / 16;
  static constexpr int kKStep = (k16 && BS >= 16) ? 16 : 8;
  // A consumer warp owns 32 columns: kWarpBlocks blocks of kBlockNT n-tiles each
  // (bs 64: half a block).
  static constexpr int kWarpBlocks = BS >= 32 ? 1 : 32 / BS;
  static constexpr int kBlockNT = (BS >= 32 ? 32 : BS) / 8;
  // Stage layout as the column-group kernel's: activation tile, then the weight
  // tile (fwd: the P blocks side by side, BS x 128 k-major; dx: stacked, 128 x BS).
  static constexpr int kLdX = BlocksConfig<T, BS, TRANS, 32>::kLdX;
  static constexpr int kLdW = TRANS ? BlocksConfig<T, BS, TRANS, 32>::kLdW : 128 + 8;
  static constexpr int kWElems = TRANS ? 128 * kLdW : BS * kLdW;
  static constexpr int kStageElems = TN * kLdX + kWElems;
  static constexpr int kStageBytes = kStageElems * static_cast<int>(sizeof(T));
  // Each stage is filled by one producer warp only (kernel: a warp that shared a stage could
  // run two rounds ahead of it, where the empty barrier's parity cannot tell rounds r and
  // r + 2 apart, and overwrite a stage still in use: fp32 at 64 rows, 6 stages, failed with
  // an mbarrier over-arrival at 4096+ output channels; benchmarks/NOTES.md, session 39). So
  // the ring is a multiple of the producers, or, where fewer stages fit, one per producer
  // and the other producers idle.
  static constexpr int kFit = cclamp(kStreamWsRingBytes / kStageBytes, 2, 48);
  static constexpr int kStages = kFit >= kStreamWsProducers ? kFit / kStreamWsProducers * kStreamWsProducers : kFit;
  static constexpr int kActiveProducers = kStages < kStreamWsProducers ? kStages : kStreamWsProducers;
  // After the ring: full and empty barriers, a mask per stage, then the group offsets.
  static constexpr int kBarOffset = kStages * kStageBytes;
  static constexpr int kMaskOffset = kBarOffset + 2 * kStages * 8;
  static constexpr int kOffsetsOffset = kMaskOffset + kStages * 4;
  static constexpr int smem_bytes(int64_t num_groups) {
    return kOffsetsOffset + static_cast<int>(num_groups + 1) * 4;
  }
  static_assert(kStageBytes % 16 == 0 && (kLdW * sizeof(T)) % 16 == 0, "16B rows");
  static_assert(kP <= 16, "mask bits");
};

// The CTA whose entry range [E b / B, E (b + 1) / B) holds entry e.
__device__ __forceinline__ int stream_ws_owner(int64_t e, int num_ctas, int num_entries) {
  return static_cast<int>(((e + 1) * num_ctas - 1) / num_entries);
}

template <typename T, int BS, bool TRANS, int TN, bool PRECISE>
__global__ void __launch_bounds__(StreamWsConfig<T, BS, TRANS, TN>::kThreads, 1)
    bsmm_stream_ws_kernel(const StreamWsParams p) {
  using Cfg = StreamWsConfig<T, BS, TRANS, TN>;
  constexpr int S = Cfg::kStages;
  constexpr int P = Cfg::kP;
  constexpr int R = Cfg::kRowInts;
  unsigned char* const smem_raw = dynamic_smem();
  T* const ring = reinterpret_cast<T*>(smem_raw);
  uint64_t* const full = reinterpret_cast<uint64_t*>(smem_raw + Cfg::kBarOffset);
  uint64_t* const empty = full + S;
  int* const masks = reinterpret_cast<int*>(smem_raw + Cfg::kMaskOffset);
  int* const goff = reinterpret_cast<int*>(smem_raw + Cfg::kOffsetsOffset);

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int64_t g = blockIdx.y;
  const int b = blockIdx.x;
  const int num_ctas = p.num_ctas;
  const int num_entries = p.num_entries;
  const int e0 = static_cast<int>(static_cast<int64_t>(num_entries) * b / num_ctas);
  const int e1 = static_cast<int>(static_cast<int64_t>(num_entries) * (b + 1) / num_ctas);
  const int cnt = e1 - e0;

  if (tid == 0) {
    for (int s = 0; s < S; ++s) {
      mbarrier_init(full + s, 32 + 1);  // one producer warp's cp.async arrivals + its lane 0's mask
      mbarrier_init(empty + s, kStreamWsConsumers);
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  if (warp < kStreamWsProducers) {
    // ------------------------------------------------------------ producers
    // Producer warp pw fills the stages of entries t = pw, pw + NP, ..., i.e. stages
    // t % S = pw, pw + NP, ...: its own (NP divides S), each in round order (a stage is
    // filled by one warp: its 32 lanes' cp.async arrivals + lane 0's mask). Several
    // producer warps, because one warp alone kept only about one entry in flight
    // (measured: ~1 us per entry at every size; benchmarks/NOTES.md, session 10).
    constexpr int NP = Cfg::kActiveProducers;
    static_assert(S % NP == 0, "each stage has one producer warp");
    const int pw = warp;
    if (pw >= NP) return;  // fewer stages than producer warps
    const T* const in = static_cast<const T*>(p.in) + g * p.in_group_stride;
    const T* const w = static_cast<const T*>(p.w) + g * p.w_group_stride;
    const int valid_rows = static_cast<int>(p.rows);  // 1..TN
    // Table rows 32 entries at a time, one per lane, loaded one batch ahead and
    // broadcast with shuffles: no table latency in front of a copy.
    int cur[R], nxt[R];
    auto fetch = [&](int (&dst)[R], int batch) {
      const int t = pw + NP * (32 * batch + lane);
#pragma unroll
      for (int i = 0; i < R; ++i) dst[i] = t < cnt ? __ldg(p.group_items + static_cast<int64_t>(e0 + t) * R + i) : 0;
    };
    fetch(cur, 0);
    fetch(nxt, 1);
    constexpr int kVec = 16 / static_cast<int>(sizeof(T));
    constexpr int kChunksPerRow = BS / kVec;
    constexpr int kChunks = P * BS * kChunksPerRow;
    static_assert(kChunks % 32 == 0, "whole chunk rounds");
    for (int j = 0, t = pw; t < cnt; ++j, t += NP) {
      if (j > 0 && (j & 31) == 0) {
#pragma unroll
        for (int i = 0; i < R; ++i) cur[i] = nxt[i];
        fetch(nxt, (j >> 5) + 1);
      }
      int row[R];
#pragma unroll
      for (int i = 0; i < R; ++i) row[i] = __shfl_sync(0xffffffffu, cur[i], j & 31);
      const int stage = t % S;
      mbarrier_wait(empty + stage, ((t / S) & 1) ^ 1u);
      T* const xs = ring + stage * Cfg::kStageElems;
      T* const ws = xs + TN * Cfg::kLdX;
      load_tile_async<T, TN, BS, 32>(xs, Cfg::kLdX, in + static_cast<int64_t>(row[0]) * BS, p.in_cols,
                                     valid_rows, lane);
#pragma unroll
      for (int it = 0; it < kChunks / 32; ++it) {
        // A round of 32 chunks covers part of one block, or (small blocks) several
        // whole ones; the block index is selected with compile-time indices so that
        // row[] stays in registers.
        constexpr int kPerBlock = BS * kChunksPerRow;
        constexpr int kBlocksPerRound = kPerBlock >= 32 ? 1 : 32 / kPerBlock;
        const int idx = it * 32 + lane;
        const int c = idx / kPerBlock;
        const int r = (idx / kChunksPerRow) % BS;
        const int col = (idx % kChunksPerRow) * kVec;
        int block = row[1 + (it * 32) / kPerBlock];
#pragma unroll
        for (int k = 1; k < kBlocksPerRound; ++k) {
          if (lane / kPerBlock == k) block = row[1 + (it * 32) / kPerBlock + k];
        }
        if (block >= 0) {
          T* dst = TRANS ? ws + (c * BS + r) * Cfg::kLdW + col : ws + r * Cfg::kLdW + c * BS + col;
          cp_async_16(dst, w + static_cast<int64_t>(block) * (BS * BS) + r * BS + col, 16);
        }
      }
      cp_async_arrive_noinc(full + stage);
      if (lane == 0) {
        int mask = 0;
#pragma unroll
        for (int c = 0; c < P; ++c) mask |= (row[1 + c] >= 0 ? 1 : 0) << c;
        masks[stage] = mask;
        mbarrier_arrive(full + stage);  // release: the mask is visible to the waiters
      }
    }
    cp_async_wait<0>();
    return;
  }

  // -------------------------------------------------------------- consumers
  const int cw = warp - kStreamWsProducers;  // owns columns 32 cw .. 32 cw + 31 of each group's tile
  const int num_groups = p.num_groups;
  for (int i = tid - 32 * kStreamWsProducers; i <= num_groups; i += 32 * kStreamWsConsumers) goff[i] = __ldg(p.group_offsets + i);
  named_barrier_sync(1, 32 * kStreamWsConsumers);

  const int valid_rows = static_cast<int>(p.rows);
  const int out_blocks = static_cast<int>(p.out_cols / BS);
  T* const out_g = static_cast<T*>(p.out) + g * p.out_group_stride;
  float* const parts_g = p.partials + g * (num_groups + num_ctas) * static_cast<int64_t>(TN * 128);
  int* const counters_g = p.counters + (g * num_groups) * kStreamWsConsumers;

  float acc[Cfg::kWarpBlocks][Cfg::kMT][Cfg::kBlockNT][4] = {};
  float total[Cfg::kWarpBlocks][Cfg::kMT][Cfg::kBlockNT][4] = {};  // PRECISE only
  auto block_of = [&](int jb) { return BS >= 32 ? (cw * 32) / BS : cw * Cfg::kWarpBlocks + jb; };
  auto col_of = [&](int jb) { return cw * 32 + (BS >= 32 ? 0 : jb * BS); };

  // Visits this lane's fragment elements in pairs: f(jb, mt, nt, h, row, col) with
  // (row, col) in the group's TN x 128 tile; the pair is (col, col + 1).
  auto for_each_pair = [&](auto&& f) {
#pragma unroll
    for (int jb = 0; jb < Cfg::kWarpBlocks; ++jb)
#pragma unroll
      for (int mt = 0; mt < Cfg::kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < Cfg::kBlockNT; ++nt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            f(jb, mt, nt, h, mt * 16 + (lane >> 2) + 8 * h, col_of(jb) + nt * 8 + 2 * (lane & 3));
          }
  };
  auto store_out = [&](int q, int row, int col, float v0, float v1) {
    const int cols = (out_blocks - q * P < P ? out_blocks - q * P : P) * BS;
    if (row < valid_rows && col < cols) {
      T* dst = out_g + static_cast<int64_t>(row) * p.out_cols + static_cast<int64_t>(q) * 128 + col;
      if constexpr (sizeof(T) == 2) {
        alignas(4) T pair[2] = {from_float<T>(v0), from_float<T>(v1)};
        *reinterpret_cast<uint32_t*>(dst) = *reinterpret_cast<const uint32_t*>(pair);
      } else {
        *reinterpret_cast<float2*>(dst) = make_float2(v0, v1);
      }
    }
  };

  auto flush = [&](int q) {
    auto& sum = *(PRECISE ? &total : &acc);
    const int first = stream_ws_owner(goff[q], num_ctas, num_entries);
    const int last = stream_ws_owner(goff[q + 1] - 1, num_ctas, num_entries);
    if (first == last) {
      for_each_pair([&](int jb, int mt, int nt, int h, int row, int col) {
        store_out(q, row, col, sum[jb][mt][nt][2 * h], sum[jb][mt][nt][2 * h + 1]);
      });
    } else {
      float* const mine = parts_g + static_cast<int64_t>(q + b) * (TN * 128);
      for_each_pair([&](int jb, int mt, int nt, int h, int row, int col) {
        if (row < valid_rows) {
          __stcg(reinterpret_cast<float2*>(mine + row * 128 + col),
                 make_float2(sum[jb][mt][nt][2 * h], sum[jb][mt][nt][2 * h + 1]));
        }
      });
      __threadfence();
      __syncwarp();
      int is_last = 0;
      if (lane == 0) is_last = atomicAdd(counters_g + q * kStreamWsConsumers + cw, 1) == last - first;
      is_last = __shfl_sync(0xffffffffu, is_last, 0);
      if (is_last) {
        __threadfence();
        const float* const pieces = parts_g + static_cast<int64_t>(q + first) * (TN * 128);
        for_each_pair([&](int jb, int mt, int nt, int h, int row, int col) {
          if (row < valid_rows) {
            float2 s = make_float2(0.f, 0.f);
            for (int k = 0; k <= last - first; ++k) {
              const float2 v = __ldcg(reinterpret_cast<const float2*>(pieces + k * (TN * 128) + row * 128 + col));
              s.x += v.x;
              s.y += v.y;
            }
            store_out(q, row, col, s.x, s.y);
          }
        });
      }
    }
    for_each_pair([&](int jb, int mt, int nt, int h, int, int) {
      sum[jb][mt][nt][2 * h] = 0.f;
      sum[jb][mt][nt][2 * h + 1] = 0.f;
    });
  };

  if (cnt > 0) {
    // The group holding e0: the last q with goff[q] <= e0 (goff[num_groups] = E > e0).
    int lo = 0, hi = num_groups - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) >> 1;
      if (goff[mid] <= e0) lo = mid; else hi = mid - 1;
    }
    int q = lo;
    int stage = 0;
    uint32_t phase = 0;
    for (int t = 0; t < cnt; ++t) {
      mbarrier_wait(full + stage, phase);
      const unsigned present = static_cast<unsigned>(masks[stage]);
      const T* xs = ring + stage * Cfg::kStageElems;
      const T* ws = xs + TN * Cfg::kLdX;
#pragma unroll
      for (int jb = 0; jb < Cfg::kWarpBlocks; ++jb) {
        if (present & (1u << block_of(jb))) {
#pragma unroll
          for (int k0 = 0; k0 < BS; k0 += Cfg::kKStep) {
            warp_mma_step<T, Cfg::kMT, Cfg::kBlockNT, Cfg::kKStep, false, !TRANS, false, PRECISE>(
                acc[jb], xs, Cfg::kLdX, 0, ws, Cfg::kLdW, col_of(jb), k0, lane);
          }
        }
      }
      mbarrier_arrive_warp(empty + stage, lane);
      if (++stage == S) {
        stage = 0;
        phase ^= 1u;
      }
      if constexpr (PRECISE) {
        // 3xTF32: keep each item's MMA run short and add it to a plain fp32 sum (a
        // long run in one accumulator missed the fp32 bound; NOTES.md, session 8).
        for_each_pair([&](int jb, int mt, int nt, int h, int, int) {
          for (int e = 2 * h; e < 2 * h + 2; ++e) {
            total[jb][mt][nt][e] += acc[jb][mt][nt][e];
            acc[jb][mt][nt][e] = 0.f;
          }
        });
      }
      const int e = e0 + t;
      if (e + 1 == goff[q + 1] || e + 1 == e1) {
        flush(q);
        while (q + 1 < num_groups && goff[q + 1] <= e + 1) ++q;
      }
    }
  }

  // Groups without entries: zeros.
  for (int q = b; q < num_groups; q += num_ctas) {
    if (goff[q] == goff[q + 1]) {
      for_each_pair([&](int, int, int, int, int row, int col) { store_out(q, row, col, 0.f, 0.f); });
    }
  }
}

}  // namespace jbs
