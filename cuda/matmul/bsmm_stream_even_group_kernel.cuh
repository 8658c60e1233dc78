// Small-N fwd / dx over column groups (N <= 32, 16-bit types, bs 8, 16 and 32,
// sm_90): the even-split walk of bsmm_stream_even_kernel.cuh, where each item
// is a *union item* of a group of P = 128 / bs output columns (tables._groups,
// the large-N kernels' tables) instead of a single weight block.
//
// Why: the one-column walks load an N x bs activation tile from L2 for every
// bs x bs weight block. At bs 16 that is 2x the weight bytes again, at bs 8 4x
// (and its 16-byte rows are half sectors), so the L2 -> SM traffic is 3x / 5x
// the weights and bounds those block sizes at 2.5-2.8x the memory floor
// (benchmarks/NOTES.md, session 13). At bs 32 the tiles are 1x the weight bytes,
// which on an H200 cost the one-column walk 1.36x at density 1/2 (session 40);
// there this kernel pays where items carry >= 3 blocks (density ~3/4 and up).
// A union item is one activation tile (the input block) and the group's weight
// blocks in that input row: one tile load feeds every present block, nnz / union
// items of them (~4 at bs 16, ~8 at bs 8 for density 1/2).
//
// Work and output as the one-column even kernel: warp gw of W takes union items
// [E gw / W, E (gw + 1) / W) of the E in the table and walks them through its
// own ring of stages. A stage holds the activation tile (cp.async) and the
// item's present blocks, packed: fwd moves them by one bulk copy (a group's
// blocks of one input row are consecutive in the weights), dx by one bulk copy
// per block at bs 16 and by cp.async at bs 8. Bulk copies complete on the
// stage's mbarrier. The warp flushes a group where it ends: whole groups are
// written directly, cut ones leave fp32 pieces (all P columns) that
// bsmm_stream_even_sum_kernel adds in warp order. Deterministic. The table rows
// (1 + P ints: input block, then the block of each column or -1) come into
// shared memory 32 items at a time by cp.async, a batch ahead of use, so
// issuing an item never waits on global memory.
#pragma once

#include <cstdint>

#include "matmul/bsmm_stream_even_kernel.cuh"
#include "matmul/warp_mma.cuh"

namespace jbs {

// The most column groups the kernel takes (their offsets sit in shared memory).
inline constexpr int kStreamEvenGroupMaxGroups = 1024;

template <typename T, int BS, bool TRANS, int TN>
struct StreamEvenGroupConfig {
  static_assert(kIs16Bit<T> && (BS == 8 || BS == 16 || BS == 32) && (TN == 16 || TN == 32),
                "16-bit, bs 8/16/32, N <= 32");
  static constexpr int kBS = BS;
  static constexpr int P = 128 / BS;  // columns per group (tables.group_width)
  static constexpr int kRowInts = 1 + P;
  static constexpr int kMT = TN / 16;
  static constexpr int kNT = BS / 8;
  static constexpr int kKStep = BS >= 16 ? 16 : 8;
  static constexpr int kLdX = BS == 8 ? 8 : BS + 8;  // as StreamEvenConfig
  static constexpr int kXElems = TN * kLdX;
  static constexpr int kWElems = BS * BS;  // bulk copies land unpadded
  static constexpr int kWBytes = kWElems * static_cast<int>(sizeof(T));
  static constexpr bool kBulkW = BS >= 16;  // dx: a bulk copy per block, else cp.async
  static constexpr int kStageElems = kXElems + P * kWElems;
  static constexpr int kStageBytes = kStageElems * static_cast<int>(sizeof(T));
  // A bs 32 stage has room for P = 4 blocks of 2 KB: with 8 warps only 2 stages per warp
  // would fit (one item in flight while another is read), so 6 warps of 3.
  static constexpr int kWarps = BS == 32 ? 6 : 8;
  static constexpr int kThreads = 32 * kWarps;
  // Two batches of 32 table rows per warp, after the rings.
  static constexpr int kRowBufInts = 2 * 32 * kRowInts;
  static constexpr int kRowBufBytes = kWarps * kRowBufInts * static_cast<int>(sizeof(int));
  static constexpr int kStages = cclamp((208 * 1024 - kRowBufBytes) / (kWarps * kStageBytes), 2, 16);
  static constexpr int kRingBytes = kWarps * kStages * kStageBytes;
  static constexpr int kSmemBytes = kRingBytes + kRowBufBytes;
  static constexpr int kColumnFloats = TN * BS;       // one column of a piece
  static constexpr int kPieceFloats = P * kColumnFloats;
  static constexpr int kOffsetSlots = 4 * ((kStreamEvenGroupMaxGroups + 1 + 3) / 4);
  static constexpr int kStaticSmemBytes = kOffsetSlots * static_cast<int>(sizeof(int)) +
                                          kWarps * kStages * static_cast<int>(sizeof(uint64_t) + sizeof(int)) +
                                          kWarps * static_cast<int>(sizeof(int));
  static_assert(kStageBytes % 128 == 0 && (kXElems * sizeof(T)) % 128 == 0, "stages and blocks on whole lines");
  static_assert(kRingBytes % 16 == 0, "row buffers 16-byte aligned");
  static_assert(kWarps * kPieceFloats * sizeof(float) <= kRingBytes, "the CTA's pieces fit in the rings");
};

// A warp's accumulators of the P columns of a group as an fp32 piece at dst
// (global or shared), in the order bsmm_stream_even_sum_kernel reads:
// column, then fragment, then lane, four floats each.
template <int P, int MT, int NT>
__device__ __forceinline__ void store_piece(float* dst, const float (&acc)[P][MT][NT][4], int lane) {
  float4* d = reinterpret_cast<float4*>(dst);
#pragma unroll
  for (int c = 0; c < P; ++c)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
        d[((c * MT + mt) * NT + nt) * 32 + lane] =
            make_float4(acc[c][mt][nt][0], acc[c][mt][nt][1], acc[c][mt][nt][2], acc[c][mt][nt][3]);
}

template <int P, int MT, int NT>
__device__ __forceinline__ void zero_fill(float (&acc)[P][MT][NT][4]) {
#pragma unroll
  for (int c = 0; c < P; ++c)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[c][mt][nt][e] = 0.f;
}

// acc[c] += tile * block of column c for each present column c of a union item (bit c of
// mask), the tile at xs and the present blocks packed in column order at ws.
template <typename Cfg, typename T, bool TRANS>
__device__ __forceinline__ void union_item_mma(float (&acc)[Cfg::P][Cfg::kMT][Cfg::kNT][4], unsigned mask,
                                               const T* xs, const T* ws, int lane) {
  constexpr int P = Cfg::P;
  if constexpr (Cfg::kKStep == 16) {
    // One set of activation fragments per k-step, for every present block. (Loading every
    // column's B fragments before the MMAs, as bs 8 does below, measured no faster at
    // density 1/2 and 1.14x slower at 1/8, where most columns are absent: session 43.)
#pragma unroll
    for (int k0 = 0; k0 < Cfg::kBS; k0 += 16) {
      uint32_t a[Cfg::kMT][4], a_small[Cfg::kMT][4];
      load_a_rows<T, Cfg::kMT, 16, false>(a, a_small, xs, Cfg::kLdX, 0, k0, lane);
      const T* wc = ws;
#pragma unroll
      for (int c = 0; c < P; ++c) {
        if (mask & (1u << c)) {
          mma_loaded_a<T, Cfg::kMT, Cfg::kNT, 16, /*B_KMAJOR=*/!TRANS, false>(acc[c], a, a_small, wc, Cfg::kBS, 0, k0,
                                                                             lane);
          wc += Cfg::kWElems;
        }
      }
    }
  } else {
    // bs 8: one k8 step and one n-tile per block. The activation fragments are loaded once
    // per item and each ldmatrix x4 takes four columns' blocks (lanes 8j .. 8j+7 address
    // column 4q + j's rows; an absent column reads slot 0, never used), all before the MMAs.
    // A warp_mma_step per present column loaded the tile's fragments again for each and
    // waited on its own loads: fwd at density 1/2 139.5 -> 98.6 us (session 43).
    static_assert(Cfg::kBS == 8 && Cfg::kNT == 1, "k8 steps are bs 8's");
    const int r = lane & 7;
    const int i = lane >> 3;
    uint32_t a[Cfg::kMT][2];
#pragma unroll
    for (int mt = 0; mt < Cfg::kMT; ++mt) ldsm_x2(a[mt], xs + (mt * 16 + (i & 1) * 8 + r) * Cfg::kLdX);
    uint32_t b[P / 4][4];
#pragma unroll
    for (int q = 0; q < P / 4; ++q) {
      const int c = 4 * q + i;
      const bool present = (mask >> c) & 1u;
      const T* block = ws + (present ? __popc(mask & ((1u << c) - 1u)) : 0) * Cfg::kWElems;
      // fwd: B(k, n) = block[k * 8 + n], rows are k (.trans); dx: rows are n.
      if constexpr (!TRANS) {
        ldsm_x4_t(b[q], block + r * 8);
      } else {
        ldsm_x4(b[q], block + r * 8);
      }
    }
#pragma unroll
    for (int c = 0; c < P; ++c) {
      if (mask & (1u << c)) {
#pragma unroll
        for (int mt = 0; mt < Cfg::kMT; ++mt) mma_16x8x8<T>(acc[c][mt][0], a[mt], b[c / 4][c % 4]);
      }
    }
  }
}

template <typename T, int BS, bool TRANS, int TN>
__global__ void __launch_bounds__(StreamEvenGroupConfig<T, BS, TRANS, TN>::kThreads, 1)
    bsmm_stream_even_group_kernel(const StreamEvenParams p) {
  using Cfg = StreamEvenGroupConfig<T, BS, TRANS, TN>;
  constexpr int S = Cfg::kStages;
  constexpr int P = Cfg::P;
  constexpr int R = Cfg::kRowInts;
  unsigned char* const smem_raw = dynamic_smem();
  __shared__ __align__(16) int s_offsets[Cfg::kOffsetSlots];
  __shared__ __align__(8) uint64_t s_full[Cfg::kWarps][S];
  __shared__ int s_mask[Cfg::kWarps][S];

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int64_t g = blockIdx.y;
  const int num_groups = p.num_segments;
  const int out_blocks = static_cast<int>(p.out_cols / BS);
  const int valid_rows = static_cast<int>(p.rows);  // 1..TN
  const int gw = blockIdx.x * Cfg::kWarps + warp;
  const bool active = gw < p.num_warps;  // warp-uniform
  const int64_t W = p.num_warps;
  const int64_t E = p.num_items;  // union items
  const int base = static_cast<int>(E * gw / W);
  const int end = active ? static_cast<int>(E * (gw + 1) / W) : base;
  const int cnt = end - base;

  T* const ring = reinterpret_cast<T*>(smem_raw) + warp * S * Cfg::kStageElems;
  int* const rows = reinterpret_cast<int*>(smem_raw + Cfg::kRingBytes) + warp * Cfg::kRowBufInts;
  const int* const table = p.items;
  // Table rows of items [32 b, 32 b + 32) of this warp into buffer b & 1 (joins
  // the current cp.async group). Rows are contiguous in the table.
  auto load_rows = [&](int b) {
    const int first = 32 * b;
    const int n = min(32, cnt - first) * R;
    const int* src = table + (static_cast<int64_t>(base) + first) * R;
    int* dst = rows + (b & 1) * 32 * R;
    for (int i = lane; i < n; i += 32) cp_async_4(dst + i, src + i);
  };
  if (lane == 0) {
    for (int s = 0; s < S; ++s) mbarrier_init(&s_full[warp][s], 1);
    mbarrier_init_fence();
  }
  if (cnt > 0) load_rows(0);
  cp_async_commit();
  cp_async_wait<0>();
  __syncwarp();

  const T* const in = static_cast<const T*>(p.in) + g * p.in_group_stride;
  const T* const w = static_cast<const T*>(p.w) + g * p.w_group_stride;
  auto issue = [&](int stage, int t) {
    // The next batch's rows: needed 32 iterations from now, by when the
    // ring's cp_async_wait has seen this group land.
    if ((t & 31) == 0 && t + 32 < cnt) load_rows((t >> 5) + 1);
    const int* row = rows + ((t >> 5) & 1) * 32 * R + (t & 31) * R;
    const int ib = row[0];
    const int blk = lane < P ? row[1 + lane] : -1;
    const unsigned mask = __ballot_sync(0xffffffffu, blk >= 0);
    T* xs = ring + stage * Cfg::kStageElems;
    T* ws = xs + Cfg::kXElems;
    load_tile_async<T, TN, BS, 32>(xs, Cfg::kLdX, in + static_cast<int64_t>(ib) * p.in_tile_stride, p.in_ld,
                                   valid_rows, lane);
    // The present blocks land packed: column c's in slot popc(mask below c).
    if constexpr (!TRANS) {
      // fwd: the group's blocks of one input row are consecutive in the packed
      // weights (row-major block order), so one bulk copy moves them all.
      const int first = __shfl_sync(0xffffffffu, blk, __ffs(mask) - 1);
      if (lane == 0) {
        const int bytes = __popc(mask) * Cfg::kWBytes;
        s_mask[warp][stage] = static_cast<int>(mask);
        // The stage was last read by this warp's ldmatrix (generic proxy); order
        // those reads before the bulk copy's (async proxy) writes.
        fence_proxy_async();
        mbarrier_arrive_expect_tx(&s_full[warp][stage], bytes);
        bulk_copy_g2s(ws, w + static_cast<int64_t>(first) * Cfg::kWElems, bytes, &s_full[warp][stage]);
      }
    } else {
      // dx: the blocks of one output column sit one block row apart; at bs 16
      // each column's lane copies its own by one bulk copy, at bs 8 (where
      // 128-byte bulk copies measured slower) eight lanes per block by cp.async.
      const int slot = __popc(mask & ((1u << lane) - 1u));
      T* dst = ws + slot * Cfg::kWElems;
      const T* src = w + static_cast<int64_t>(blk) * Cfg::kWElems;
      if constexpr (Cfg::kBulkW) {
        if (lane == 0) {
          s_mask[warp][stage] = static_cast<int>(mask);
          mbarrier_arrive_expect_tx(&s_full[warp][stage], __popc(mask) * Cfg::kWBytes);
        }
        __syncwarp();  // the byte count is announced before any copy can complete
        if (blk >= 0) {
          fence_proxy_async();
          bulk_copy_g2s(dst, src, Cfg::kWBytes, &s_full[warp][stage]);
        }
      } else {
        if (lane == 0) {
          s_mask[warp][stage] = static_cast<int>(mask);
          mbarrier_arrive_expect_tx(&s_full[warp][stage], 0);  // the phase completes at once
        }
        // Eight lanes per block, a 16-byte chunk each: one cp.async instruction moves four
        // blocks' whole 128-byte lines. (A lane per block, eight instructions each moving one
        // 16-byte piece of every block, made each sector two requests of half a sector.)
        constexpr int kVec = 16 / static_cast<int>(sizeof(T));
        constexpr int kChunks = Cfg::kWElems / kVec;
        constexpr int kBlocksPerPass = 32 / kChunks;
        static_assert(kChunks * kVec == Cfg::kWElems && P % kBlocksPerPass == 0, "whole blocks per pass");
        // Every pass's block index first (the shuffles overlap), presence and slot from the
        // mask, no branches: with a warp-uniform skip of empty passes and each pass waiting on
        // its own shuffles, the dx at density 1/2 took 120 us instead of 98 (session 44).
        const int chunk = (lane % kChunks) * kVec;
        int c_blk[P / kBlocksPerPass];
#pragma unroll
        for (int q = 0; q < P / kBlocksPerPass; ++q) {
          c_blk[q] = __shfl_sync(0xffffffffu, blk, q * kBlocksPerPass + lane / kChunks);
        }
#pragma unroll
        for (int q = 0; q < P / kBlocksPerPass; ++q) {
          const int c = q * kBlocksPerPass + lane / kChunks;
          const int c_slot = __popc(mask & ((1u << c) - 1u));
          if ((mask >> c) & 1u) {
            cp_async_16(ws + c_slot * Cfg::kWElems + chunk, w + static_cast<int64_t>(c_blk[q]) * Cfg::kWElems + chunk,
                        16);
          }
        }
      }
    }
  };
#pragma unroll 1
  for (int s = 0; s < S - 1; ++s) {
    if (s < cnt) issue(s, s);
    cp_async_commit();
  }

  load_offsets_shared<Cfg::kThreads, Cfg::kOffsetSlots>(s_offsets, p.offsets, num_groups);
  __syncthreads();

  T* const out = static_cast<T*>(p.out) + g * p.out_group_stride;
  auto store_group = [&](int grp, const float (&v)[P][Cfg::kMT][Cfg::kNT][4]) {
#pragma unroll
    for (int c = 0; c < P; ++c) {
      const int o = grp * P + c;
      if (o < out_blocks) {
        store_fragments<T, Cfg::kMT, Cfg::kNT>(out + static_cast<int64_t>(o) * BS, p.out_cols, valid_rows, v[c], lane);
      }
    }
  };

  // Groups without items: zeros, spread over every warp of the grid.
  {
    const float zero[Cfg::kMT][Cfg::kNT][4] = {};
    for (int o = blockIdx.x * Cfg::kWarps + warp; o < out_blocks; o += gridDim.x * Cfg::kWarps) {
      const int grp = o / P;
      if (s_offsets[grp] == s_offsets[grp + 1]) {
        store_fragments<T, Cfg::kMT, Cfg::kNT>(out + static_cast<int64_t>(o) * BS, p.out_cols, valid_rows, zero,
                                               lane);
      }
    }
  }

  float acc[P][Cfg::kMT][Cfg::kNT][4] = {};
  float* const pieces = p.pieces + g * 2 * W * Cfg::kPieceFloats;
  auto piece_slot = [&](int grp_of_piece, int first_group) { return 2 * gw + (grp_of_piece != first_group ? 1 : 0); };
  // A warp ends its range in a cut group (most do: a group spans ~10 warps at
  // density 1/2). That piece is kept in registers here and summed across the
  // CTA's warps below, so a group leaves one piece per CTA rather than one per
  // warp (the pieces were ~18 MB at bs 16, density 1/2).
  int deferred_group = -1;
  int first_group = 0;
  if (active) {
    first_group = segment_of(s_offsets, num_groups, base);
    int grp = first_group;
    int grp_end = s_offsets[grp + 1];
    int read_stage = 0;
    int write_stage = S - 1;
    uint32_t phase = 0;
#pragma unroll 1
    for (int t = 0; t < cnt; ++t) {
      const int tl = t + S - 1;
      cp_async_wait<S - 2>();
      mbarrier_wait(&s_full[warp][read_stage], phase);
      __syncwarp();
      if (tl < cnt) issue(write_stage, tl);
      cp_async_commit();
      const unsigned mask = static_cast<unsigned>(s_mask[warp][read_stage]);
      const T* xs = ring + read_stage * Cfg::kStageElems;
      const T* ws = xs + Cfg::kXElems;
      union_item_mma<Cfg, T, TRANS>(acc, mask, xs, ws, lane);
      read_stage = read_stage + 1 == S ? 0 : read_stage + 1;
      write_stage = write_stage + 1 == S ? 0 : write_stage + 1;
      if (read_stage == 0) phase ^= 1u;

      const int done = base + t + 1;
      if (done != grp_end && t + 1 != cnt) continue;
      // Flush group `grp` (warp-uniform branch).
      if (s_offsets[grp] >= base && grp_end <= end) {
        store_group(grp, acc);
      } else if (t + 1 == cnt) {
        deferred_group = grp;
        break;
      } else {
        store_piece(pieces + static_cast<int64_t>(piece_slot(grp, first_group)) * Cfg::kPieceFloats, acc, lane);
      }
      zero_fill(acc);
      do {
        ++grp;
      } while (s_offsets[grp + 1] <= done);
      grp_end = s_offsets[grp + 1];
    }
  }
  cp_async_wait<0>();

  // The deferred pieces: consecutive warps ending in the same group add theirs
  // in warp order (the first of them, the leader, holds the sum) and leave one
  // piece, in the leader's slot; bsmm_stream_even_sum_kernel skips the others.
  __shared__ int s_deferred[Cfg::kWarps];
  if (lane == 0) s_deferred[warp] = deferred_group;
  __syncthreads();  // every warp is done with its ring: the rings now hold pieces
  float* const shared_pieces = reinterpret_cast<float*>(smem_raw);
  const bool leader = deferred_group >= 0 && (warp == 0 || s_deferred[warp - 1] != deferred_group);
  if (deferred_group >= 0 && !leader) store_piece(shared_pieces + warp * Cfg::kPieceFloats, acc, lane);
  __syncthreads();
  if (leader) {
    for (int q = warp + 1; q < Cfg::kWarps && s_deferred[q] == deferred_group; ++q) {
      const float4* other = reinterpret_cast<const float4*>(shared_pieces + q * Cfg::kPieceFloats);
#pragma unroll
      for (int c = 0; c < P; ++c)
#pragma unroll
        for (int mt = 0; mt < Cfg::kMT; ++mt)
#pragma unroll
          for (int nt = 0; nt < Cfg::kNT; ++nt) {
            const float4 v = other[((c * Cfg::kMT + mt) * Cfg::kNT + nt) * 32 + lane];
            acc[c][mt][nt][0] += v.x;
            acc[c][mt][nt][1] += v.y;
            acc[c][mt][nt][2] += v.z;
            acc[c][mt][nt][3] += v.w;
          }
    }
    store_piece(pieces + static_cast<int64_t>(piece_slot(deferred_group, first_group)) * Cfg::kPieceFloats, acc,
                lane);
  }
}

}  // namespace jbs
