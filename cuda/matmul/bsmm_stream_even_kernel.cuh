// Small-N fwd / dx (N <= kStreamMaxRows, sm_90): every warp streams an equal
// share of all the op's items, and the weight blocks come by TMA bulk copies.
//
// Taken by default for 16-bit weights of >= 24 MiB at bs 16 / 32 and for fp32 weights
// of >= 48 MiB at bs 32 and N <= 32, forced by JBS_STREAM_EVEN=1 (launch_small_n.cuh:
// use_stream_even). In session 11 it measured slower than the one-column kernel
// under jbs-bench, though ~1.2x faster in microbench/seed_stream.cu: its stages
// started at 80 mod 128 bytes in jbs's build, and the bulk copies into them cost
// ~1.6x the L2 requests (common/smem.cuh; benchmarks/NOTES.md, session 12).
//
// Why it was built (benchmarks/NOTES.md, session 11, microbench/seed_stream.cu): at the seed
// shape the one-column stream kernel (bsmm_stream_kernel.cuh) is bound neither
// by HBM nor by its MMAs but by moving every byte through 16-byte cp.async: with
// the weight block of each item fetched by one cp.async.bulk instead, the same
// walk ran at 1.19x the copy floor instead of 1.66x (bf16, bs 32, density 1/2).
// And CTAs of one output column come in ~3 waves with a ramp and a tail each,
// which a persistent, evenly cut walk avoids (1/8: 1.47x instead of 2.07x).
//
// Work: the items of the fwd (or dx) table, grouped by output column, are one
// list of `nnz` entries; warp gw of the W = grid x warps active ones takes
// [nnz gw / W, nnz (gw + 1) / W). It walks them through its own ring of stages
// (activation tile by cp.async, weight block by one bulk copy completing on the
// stage's mbarrier), one MMA pass per item, no CTA-wide barrier in the loop.
// Where an output column ends, the warp flushes its accumulator:
//  * a column wholly inside the warp's range is written out directly;
//  * a column cut between consecutive warps leaves an fp32 piece in the warp's
//    slot (2 gw for its first column, 2 gw + 1 for its last), and a second,
//    small kernel (bsmm_stream_even_sum_kernel) adds each cut column's pieces
//    in warp order. The kernel boundary orders the pieces before their sum; an
//    in-kernel "last to arrive sums" scheme (fence, atomic counter, reload, plus
//    a kernel to zero the counters) measured no faster (benchmarks/NOTES.md,
//    session 11).
// Every sum has a fixed order, so results are bitwise deterministic. Columns
// with no items are written as zeros by the walk kernel's warps, spread evenly.
// The output columns' item offsets sit in shared memory (at most
// kStreamEvenMaxCols columns), where each warp finds its first column.
//
// fp32 with row-major tiles keeps 16-byte cp.async for its weights too: its tf32
// fragments are read as scalars, which the unpadded rows a bulk copy leaves would
// conflict on 4-8 ways (the microbenchmark measured bulk copies within 2% there).
//
// SWIZZLED (16-bit types at bs 16-64, the default there since session 42; fp32 at
// bs 32, whose 128-byte rows are the swizzle's, since session 62): the activation
// tiles come from a tile-major copy of `in` (matmul/tile_major.cuh, rows padded
// with zeros to TN), and both the tile and the weight block of an item come by
// one TMA copy each, as rows of 128 bytes with the 128-byte swizzle
// (common/swizzle.cuh), which the MMA's ldmatrix reads without bank conflicts.
// Why (benchmarks/NOTES.md, session 42; microbench/seed_stream.cu "swizzle", H200,
// bf16 bs 32, N = 32, 12288^2): a row-major tile is TN requests of BS * 2 bytes
// from L2 and its 16-byte cp.async writes took ~4x the shared-memory wavefronts
// of its bytes, and the bulk-copied weight rows were read with 4-way bank
// conflicts; the persistent walk ran 55.6 us at density 1/2 that way and 42.5 us
// with both tiles swizzled (40.3 with no tiles at all), 17.3 -> 14.5 us at 1/8.
// fp32's scalar tf32 reads of the swizzled rows: the activation tile's (rows = N) and
// dx's weight block's (rows = output columns) hit 32 banks; fwd's k-major weight
// fragments (4 k-rows x 8 columns a load) would hit 2 ways, which no TMA swizzle avoids,
// so fwd's MMAs take their 8 columns from both halves of the block (common/swizzle.cuh:
// halves_column), and the stores map the columns back (kHalves).
// (Session 62, seed shape fp32 bs 32, density 1/2, against the one-column kernel: dx 101.7 ->
// 95.3 us; fwd 103.1 -> 108.6 with the 2-way reads, 104.0 -> 101.5 with the columns in halves.)
//
// DIRECT_TILES (16-bit swizzled walks, the default since session 63): no tile-major copy; each
// tile comes straight from `in` as one TMA box of TN rows of BS * 2 bytes with the swizzle of
// that width (rows past N read as zeros, as the copy pads them), and the fragments are read
// through it (matmul/swizzled_fragments.cuh). Same values in the same MMAs, so the same bits;
// the copy's kernel ahead of the walk is gone (bf16 bs 32 seed shape: 1.02-1.06x at 1/2-1/8).
// fp32 keeps the copy, which also rounds its activations to tf32 once.
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/dtype.cuh"
#include "common/mbarrier.cuh"
#include "common/ptx.cuh"
#include "common/smem.cuh"
#include "common/tma.cuh"
#include "matmul/bsmm_blocks_kernel.cuh"  // cmin/cmax/cclamp
#include "matmul/bsmm_stream_kernel.cuh"  // fetch_item_batch
#include "matmul/swizzled_fragments.cuh"
#include "matmul/tile_io.cuh"
#include "matmul/warp_mma.cuh"

namespace jbs {

inline constexpr int kStreamEvenMaxCols = 4096;

struct StreamEvenParams {
  const void* in;
  const void* w;
  // The walk's segments: output block columns (bsmm_stream_even_kernel) or
  // column groups (bsmm_stream_even_group_kernel); items of segment s are
  // [offsets[s], offsets[s + 1]).
  const int32_t* offsets;  // (num_segments + 1,)
  const int32_t* items;    // (num_items, 2) [weight block, input block], or group rows (1 + P ints)
  void* out;
  float* pieces;  // (groups, 2 * num_warps, P * TN * BS), P columns per segment, in accumulator-fragment order
  int64_t rows;
  int64_t in_tile_stride;  // as StreamParams
  int64_t in_ld;
  int64_t out_cols;
  int64_t in_group_stride;
  int64_t w_group_stride;
  int64_t out_group_stride;
  int num_segments;
  int num_items;
  int num_warps;  // W <= num_items: warps with work (gridDim.x * kWarps may be more)
  // SWIZZLED walks only: `in` tile-major (TN x BS tiles, `in` unused) and the weights, each
  // as rows of 128 bytes, and the rows between consecutive groups (0: one for all). DIRECT_TILES:
  // `in` itself as (groups, rows, columns) in boxes of TN x BS, in_group_rows 1 (0: one for all).
  int in_group_rows;
  int w_group_rows;
  CUtensorMap in_map;
  CUtensorMap w_map;
  // PACKED walks only (bsmm_stream_even_kernel): CTA b walks the items [cta_items[b],
  // cta_items[b + 1]), whole segments, and segment s is output block column columns[s] (the
  // table's segments are in the packing's order; see EvenPacking).
  const int32_t* cta_items;  // (gridDim.x + 1,)
  const int32_t* columns;    // (num_segments,)
};

// Whole output columns packed into the CTAs of a PACKED even walk, longest first onto the least
// loaded CTA (built on the host from the layout): every column is summed inside one CTA, so the
// walk needs no sum kernel. Its items and offsets are the op's table with the segments
// reordered CTA by CTA (cta_items / columns as in StreamEvenParams).
struct EvenPacking {
  const int32_t* offsets;    // (num_segments + 1,) over the reordered segments
  const int32_t* items;      // (nnz, 2) the reordered items
  const int32_t* cta_items;  // (ctas + 1,)
  const int32_t* columns;    // (num_segments,)
  int ctas;
};

#ifdef JBS_WALK_TIMES
// Per-warp time stamps of the walk, for benchmarks/microbench/walk_timeline.cu only (jbs's own
// build never defines JBS_WALK_TIMES): {start, first data, end, SM id, items in hand, past
// griddep_wait, -, -} per warp of the grid (kWalkStamps slots), %globaltimer nanoseconds,
// written where this points (null: nothing written). (Prefetching the TMA descriptors first
// left the ramp as it was: benchmarks/NOTES.md, session 67.)
constexpr int kWalkStamps = 8;
__device__ unsigned long long* g_walk_times = nullptr;
// The sum kernel's, per output block column c (one warp each): {start, past griddep_wait, the
// pieces loaded and added (0 for a column not cut), end}, where g_sum_times points.
constexpr int kSumStamps = 4;
__device__ unsigned long long* g_sum_times = nullptr;
// The swizzled walk's prologue depth, staggered over the warps (0: every warp issues S - 1
// stages at once, as jbs's build does): warp gw first issues 1 + gw % g_walk_stagger stages and
// then catches up two items a step. An experiment on session 67's reading of the ramp (every
// stage of the first burst lands at its end; benchmarks/NOTES.md, session 68).
__device__ int g_walk_stagger = 0;

__device__ __forceinline__ unsigned long long walk_clock_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
#endif

// Whether the walk has a SWIZZLED variant for T at BS: 16-bit types at bs 16-64, fp32 at bs 32.
template <typename T, int BS>
inline constexpr bool kStreamEvenSwizzleSupported = kIs16Bit<T> ? BS >= 16 : BS == 32;

template <typename T, int BS, bool TRANS, int TN, bool SWIZZLED = false, bool DIRECT_TILES = false>
struct StreamEvenConfig {
  static_assert(TN == 16 || TN == 32 || TN == 64, "row tile");
  static constexpr bool k16 = kIs16Bit<T>;
  static_assert(!SWIZZLED || kStreamEvenSwizzleSupported<T, BS>, "swizzled tiles: 16-bit at bs 16-64, fp32 at bs 32");
  static constexpr bool kBulkW = k16 || SWIZZLED;
  // Where the swizzled stages' TMA copies put the elements, for warp_mma.cuh's fragment
  // loads; fp32 fwd reads the weight block's columns in halves_column's order (kHalves: so do
  // the stores).
  static constexpr TileSwizzle kSwizzle = SWIZZLED ? kTileSwizzle128B : kTilePlain;
  static constexpr bool kHalves = SWIZZLED && !k16 && !TRANS;
  static constexpr TileSwizzle kSwizzleW = kHalves ? kTileSwizzle128BHalves : kSwizzle;
  // fp32's swizzled tiles come rounded to tf32 from the tile-major copy (matmul/tile_major.cuh).
  static constexpr bool kTf32Tiles = SWIZZLED && !k16;
  static_assert(!DIRECT_TILES || (SWIZZLED && k16), "tiles straight from `in`: 16-bit swizzled walks");
  // The bytes of the tile's swizzled rows: a tile-major copy's whole lines, or the tile's own
  // rows when its box comes straight from the activation (DIRECT_TILES).
  static constexpr int kXRowBytes = DIRECT_TILES ? BS * static_cast<int>(sizeof(T)) : 128;
  static constexpr int kMT = TN / 16;
  static constexpr int kNT = BS / 8;
  static constexpr int kKStep = (k16 && BS >= 16) ? 16 : 8;
  // As StreamConfig's, except fp32 at bs 32 (36 floats here, 40 there): fp32 takes this kernel
  // only when forced, and 40 was not measured in it. Swizzled tiles are unpadded.
  static constexpr int kLdX = SWIZZLED ? BS : (k16 ? (BS == 8 ? 8 : BS + 8) : BS + 4);
  static constexpr int kLdW = kBulkW ? BS : ((k16 || !TRANS) ? (BS == 8 ? 8 : BS + 8) : BS + 4);
  static constexpr int kXElems = TN * kLdX;
  static constexpr int kWBytes = BS * BS * static_cast<int>(sizeof(T));
  static constexpr int kXBytes = kXElems * static_cast<int>(sizeof(T));
  // A stage: the tile then the weight block; swizzled, the weight block then the tile, each
  // from a multiple of 1024 bytes (the swizzle's atom) and the stage whole atoms.
  static constexpr int kAtom = 1024;
  static constexpr int kXOffsetBytes = SWIZZLED ? (kWBytes + kAtom - 1) / kAtom * kAtom : 0;
  static constexpr int kWOffsetBytes = SWIZZLED ? 0 : kXBytes;
  static constexpr int kStageBytes = SWIZZLED ? (kXOffsetBytes + kXBytes + kAtom - 1) / kAtom * kAtom
                                              : kXBytes + BS * kLdW * static_cast<int>(sizeof(T));
  static constexpr int kStageElems = kStageBytes / static_cast<int>(sizeof(T));
  // The tile's and the block's rows of 128 bytes (their TMA boxes).
  static constexpr int kXRows = kXBytes / 128;
  static constexpr int kWRows = kWBytes / 128;
  // 8 warps with as many stages as fit ~200 KiB (one CTA per SM); fewer warps
  // where even two stages each would not fit.
  static constexpr int kWarps = 2 * kStageBytes * 8 <= 200 * 1024 ? 8 : (2 * kStageBytes * 4 <= 200 * 1024 ? 4 : 2);
  static constexpr int kStages = cclamp(200 * 1024 / (kWarps * kStageBytes), 2, 16);
  static constexpr int kThreads = 32 * kWarps;
  // (+ an atom to align the ring to the swizzle's atoms)
  static constexpr int kSmemBytes = kWarps * kStages * kStageBytes + (SWIZZLED ? kAtom : 0);
  static constexpr int kPieceFloats = TN * BS;  // = kMT * kNT * 4 floats per lane
  // Static shared memory: the column offsets (as 16-byte vectors) and the
  // stages' barriers (bulk weight copies only).
  static constexpr int kOffsetSlots = 4 * ((kStreamEvenMaxCols + 1 + 3) / 4);
  static constexpr int kStaticSmemBytes =
      kOffsetSlots * static_cast<int>(sizeof(int)) + (kBulkW ? kWarps : 1) * kStages * static_cast<int>(sizeof(uint64_t));
  static_assert(kStageBytes % 16 == 0 && (kXElems * sizeof(T)) % 16 == 0, "16B alignment of bulk copies");
  static_assert(!SWIZZLED || (kXBytes % 128 == 0 && kWBytes % 128 == 0), "whole 128-byte rows");
};

// What a walk without swizzled 16-bit stages holds in place of SwizzledFragments16.
struct NoFragments {
  __device__ explicit NoFragments(int) {}
};

// The warp (of W over nnz items, warp gw starting at nnz gw / W) that holds item i.
__device__ __forceinline__ int stream_even_owner(int64_t i, int64_t num_warps, int64_t nnz) {
  return static_cast<int>(((i + 1) * num_warps - 1) / nnz);
}

// Writes a warp's accumulator fragments v (warp_mma.cuh layout, MT x 16 rows by
// NT x 8 columns; HALVES: columns in common/swizzle.cuh's halves_column order, NT = 4) as T
// to dst (row stride ld), rows < valid_rows.
template <typename T, int MT, int NT, bool HALVES = false>
__device__ __forceinline__ void store_fragments(T* dst, int64_t ld, int valid_rows, const float (&v)[MT][NT][4],
                                                int lane) {
  static_assert(!HALVES || NT == 4, "column halves of 32-column blocks");
  const int gq = lane >> 2;
  const int tq = lane & 3;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int r = mt * 16 + gq;
      const int c = HALVES ? halves_column(nt * 8 + 2 * tq) : nt * 8 + 2 * tq;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (r + 8 * h < valid_rows) {
          T* d = dst + static_cast<int64_t>(r + 8 * h) * ld + c;
          d[0] = from_float<T>(v[mt][nt][2 * h]);
          d[1] = from_float<T>(v[mt][nt][2 * h + 1]);
        }
      }
    }
  }
}

// Copies the segment offsets offsets[0 .. num_segments] (num_segments + 1 <=
// SLOTS) into shared memory with 16-byte loads, all in flight at once. The
// caller syncs the CTA before reading them.
template <int THREADS, int SLOTS>
__device__ __forceinline__ void load_offsets_shared(int* s_offsets, const int32_t* offsets, int num_segments) {
  constexpr int kVecs = SLOTS / 4;
  constexpr int kPerThread = (kVecs + THREADS - 1) / THREADS;
  const int num_vecs = (num_segments + 1 + 3) / 4;  // the last one may run past the table
  const int full_vecs = (num_segments + 1) / 4;
  const bool vector_ok = (reinterpret_cast<uintptr_t>(offsets) & 15) == 0;
  int4 v[kPerThread];
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int i = threadIdx.x + k * THREADS;
    if (i < full_vecs && vector_ok) {
      v[k] = __ldg(reinterpret_cast<const int4*>(offsets) + i);
    } else if (i < num_vecs) {  // the table's tail (or a table not 16-byte aligned)
      const int* four = offsets + 4 * i;
      const int left = num_segments + 1 - 4 * i;
      v[k] = make_int4(__ldg(four), left > 1 ? __ldg(four + 1) : 0, left > 2 ? __ldg(four + 2) : 0,
                       left > 3 ? __ldg(four + 3) : 0);
    }
  }
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int i = threadIdx.x + k * THREADS;
    if (i < num_vecs) reinterpret_cast<int4*>(s_offsets)[i] = v[k];
  }
}

// The segment holding item i (offsets[s] <= i < offsets[s + 1]; i < offsets[num_segments]),
// i.e. the last s with offsets[s] <= i, which is never an empty one.
__device__ __forceinline__ int segment_of(const int* s_offsets, int num_segments, int i) {
  int lo = 0, hi = num_segments;  // offsets[lo] <= i < offsets[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (s_offsets[mid] <= i) lo = mid; else hi = mid;
  }
  return lo;
}

// PACKED: the CTAs own whole columns (EvenPacking) and cut only their own items evenly over
// their warps; a column cut between warps of the CTA is summed by its first warp after a CTA
// barrier at the walk's end (its pieces through L2, as the sum kernel's), so no sum kernel
// follows. Lead of benchmarks/NOTES.md, session 68.
template <typename T, int BS, bool TRANS, int TN, bool PRECISE, bool SWIZZLED = false, bool DIRECT_TILES = false,
          bool PACKED = false>
__global__ void __launch_bounds__(StreamEvenConfig<T, BS, TRANS, TN, SWIZZLED, DIRECT_TILES>::kThreads)
    bsmm_stream_even_kernel(const __grid_constant__ StreamEvenParams p) {
  using Cfg = StreamEvenConfig<T, BS, TRANS, TN, SWIZZLED, DIRECT_TILES>;
  constexpr int S = Cfg::kStages;
  constexpr int NW = Cfg::kWarps;
  unsigned char* const smem_raw = dynamic_smem();
  __shared__ __align__(16) int s_offsets[Cfg::kOffsetSlots];
  __shared__ __align__(8) uint64_t s_full[Cfg::kBulkW ? NW : 1][S];

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int64_t g = blockIdx.y;
  const int num_cols = p.num_segments;
  const int valid_rows = static_cast<int>(p.rows);  // 1..TN
  const int gw = blockIdx.x * NW + warp;
  const int64_t W = p.num_warps;
  const int64_t nnz = p.num_items;
  // This warp's items [base, end): an equal share of all of them, or of its CTA's (PACKED).
  const int64_t share_begin = PACKED ? __ldg(p.cta_items + blockIdx.x) : 0;
  const int64_t share = PACKED ? __ldg(p.cta_items + blockIdx.x + 1) - share_begin : nnz;
  const int64_t sharers = PACKED ? NW : W;
  const int64_t sharer = PACKED ? warp : gw;
  const int base = static_cast<int>(share_begin + share * sharer / sharers);
  const int end = sharer < sharers ? static_cast<int>(share_begin + share * (sharer + 1) / sharers) : base;
  const int cnt = end - base;  // >= 1 for the warps of an unpacked walk since W <= nnz
  const bool active = cnt > 0;  // warp-uniform
#ifdef JBS_WALK_TIMES
  const unsigned long long walk_start = walk_clock_ns();
  unsigned long long walk_first_data = 0, walk_items = 0, walk_dependency = 0;
#endif
  // The sum kernel behind this walk may become resident now and wait there
  // (launch_even_split): its launch gap then overlaps the walk. (A packed walk has none.)
  if constexpr (!PACKED) griddep_launch_dependents();

  // Start streaming before anything else: the prologue needs only this warp's
  // own items and barriers, so the first stages' copies are in flight while
  // the column offsets (~16 KB per CTA) arrive.
  const int2* const items = reinterpret_cast<const int2*>(p.items);
  int2 bcur = fetch_item_batch(items, base, 1, cnt, 0, lane);
  int2 bnxt = fetch_item_batch(items, base, 1, cnt, 1, lane);
  if constexpr (Cfg::kBulkW) {
    if (lane == 0) {
      for (int s = 0; s < S; ++s) mbarrier_init(&s_full[warp][s], 1);
      mbarrier_init_fence();
    }
    __syncwarp();
  }

  const T* const in = static_cast<const T*>(p.in) + g * p.in_group_stride;
  const T* const w = static_cast<const T*>(p.w) + g * p.w_group_stride;
  // Swizzled stages start on the swizzle's atoms (the launch adds one atom for this).
  unsigned char* const ring_base =
      SWIZZLED ? smem_raw + ((Cfg::kAtom - (smem_u32(smem_raw) & (Cfg::kAtom - 1))) & (Cfg::kAtom - 1)) : smem_raw;
  unsigned char* const ring = ring_base + warp * S * Cfg::kStageBytes;
  const int in_rows0 = static_cast<int>(g) * p.in_group_rows;
  const int w_rows0 = static_cast<int>(g) * p.w_group_rows;
  auto issue = [&](int stage, int t) {
    const int wb = __shfl_sync(0xffffffffu, bcur.x, t & 31);
    const int ib = __shfl_sync(0xffffffffu, bcur.y, t & 31);
#ifdef JBS_WALK_TIMES
    if (t == 0) walk_items = walk_clock_ns();  // issued after the shuffles, which wait for the items
#endif
    T* xs = reinterpret_cast<T*>(ring + stage * Cfg::kStageBytes + Cfg::kXOffsetBytes);
    T* ws = reinterpret_cast<T*>(ring + stage * Cfg::kStageBytes + Cfg::kWOffsetBytes);
    if constexpr (SWIZZLED) {
      if (lane == 0) {
        // The stage was last read by this warp's ldmatrix (generic proxy); order
        // those reads before the copies' (async proxy) writes.
        fence_proxy_async();
        uint64_t* full = &s_full[warp][stage];
        mbarrier_arrive_expect_tx(full, Cfg::kWBytes + Cfg::kXBytes);
        tma_load_5d(ws, &p.w_map, 0, w_rows0 + wb * Cfg::kWRows, 0, 0, 0, full);
        if constexpr (DIRECT_TILES) {
          tma_load_5d(xs, &p.in_map, ib * BS, 0, static_cast<int>(g) * p.in_group_rows, 0, 0, full);
        } else {
          tma_load_5d(xs, &p.in_map, 0, in_rows0 + ib * Cfg::kXRows, 0, 0, 0, full);
        }
      }
      return;
    }
    load_tile_async<T, TN, BS, 32>(xs, Cfg::kLdX, in + static_cast<int64_t>(ib) * p.in_tile_stride, p.in_ld,
                                   valid_rows, lane);
    const T* src = w + static_cast<int64_t>(wb) * (BS * BS);
    if constexpr (Cfg::kBulkW) {
      if (lane == 0) {
        // The stage was last read by this warp's ldmatrix (generic proxy); order
        // those reads before the bulk copy's (async proxy) writes.
        fence_proxy_async();
        mbarrier_arrive_expect_tx(&s_full[warp][stage], Cfg::kWBytes);
        bulk_copy_g2s(ws, src, Cfg::kWBytes, &s_full[warp][stage]);
      }
    } else {
      load_tile_async<T, BS, BS, 32>(ws, Cfg::kLdW, src, BS, BS, lane);
    }
  };
  // Swizzled tiles come from the tile-major copy the kernel ahead made (launched
  // early behind it: launch_stream_even_swizzled); without a copy this returns at once.
  if constexpr (SWIZZLED) griddep_wait();
#ifdef JBS_WALK_TIMES
  walk_dependency = walk_clock_ns();
  const int stagger = SWIZZLED ? g_walk_stagger : 0;  // the staggered prologue (g_walk_stagger)
#else
  constexpr int stagger = 0;
#endif
  const int depth0 = stagger > 0 ? cmin(S - 1, 1 + gw % stagger) : S - 1;
  int issued = 0;  // items issued (tracked for the staggered prologue only)
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < cnt && s < depth0) {
      issue(s, s);
      ++issued;
    }
    cp_async_commit();
  }

  load_offsets_shared<Cfg::kThreads, Cfg::kOffsetSlots>(s_offsets, p.offsets, num_cols);
  __syncthreads();

  T* const out = static_cast<T*>(p.out) + g * p.out_group_stride;
  // Segment s's output block column (the packing reorders them).
  auto column_of = [&](int s) { return PACKED ? __ldg(p.columns + s) : s; };
  auto store_column = [&](int s, const float (&v)[Cfg::kMT][Cfg::kNT][4]) {
    store_fragments<T, Cfg::kMT, Cfg::kNT, Cfg::kHalves>(out + static_cast<int64_t>(column_of(s)) * BS, p.out_cols,
                                                         valid_rows, v, lane);
  };

  // Columns without items: zeros, spread over every warp of the grid.
  {
    const float zero[Cfg::kMT][Cfg::kNT][4] = {};
    for (int o = blockIdx.x * NW + warp; o < num_cols; o += gridDim.x * NW) {
      if (s_offsets[o] == s_offsets[o + 1]) store_column(o, zero);
    }
  }

  // No CTA-wide barrier below, except a packed walk's at its end, which every warp reaches.
  if (!PACKED && !active) return;

  const int first_col = segment_of(s_offsets, num_cols, base);
  int col = first_col;
  int col_end = s_offsets[col + 1];

  float acc[Cfg::kMT][Cfg::kNT][4] = {};
  // 16-bit swizzled stages: each lane's fragment offsets, the same in every stage.
  using Fragments =
      std::conditional_t<Cfg::k16 && SWIZZLED, SwizzledFragments16<T, BS, TN, !TRANS, Cfg::kXRowBytes>, NoFragments>;
  const Fragments fragments(lane);
  const uint32_t ring_at = smem_u32(ring);
  float* const pieces = p.pieces + g * 2 * W * Cfg::kPieceFloats;
  int read_stage = 0;
  int write_stage = S - 1;
  uint32_t phase = 0;
  for (int t = 0; t < cnt; ++t) {
    const int tl = t + S - 1;
    cp_async_wait<S - 2>();
    if constexpr (Cfg::kBulkW) mbarrier_wait(&s_full[warp][read_stage], phase);
    __syncwarp();
#ifdef JBS_WALK_TIMES
    if (t == 0) walk_first_data = walk_clock_ns();
#endif
    if (stagger > 0) {
      // Catch up to the full depth (item t + S - 1 goes where item t - 1 was), two items a step.
      for (int k = 0; k < 2 && issued < cnt && issued <= tl; ++k) {
        if ((issued & 31) == 0) {
          bcur = bnxt;
          bnxt = fetch_item_batch(items, base, 1, cnt, (issued >> 5) + 1, lane);
        }
        issue(issued % S, issued);
        ++issued;
      }
    } else if (tl < cnt) {
      if ((tl & 31) == 0) {
        bcur = bnxt;
        bnxt = fetch_item_batch(items, base, 1, cnt, (tl >> 5) + 1, lane);
      }
      issue(write_stage, tl);
    }
    cp_async_commit();
    if constexpr (Cfg::k16 && SWIZZLED) {
      const uint32_t stage_at = ring_at + read_stage * Cfg::kStageBytes;
      fragments.mma(acc, stage_at + Cfg::kXOffsetBytes, stage_at + Cfg::kWOffsetBytes);
    } else {
      const T* xs = reinterpret_cast<const T*>(ring + read_stage * Cfg::kStageBytes + Cfg::kXOffsetBytes);
      const T* ws = reinterpret_cast<const T*>(ring + read_stage * Cfg::kStageBytes + Cfg::kWOffsetBytes);
#pragma unroll
      for (int k0 = 0; k0 < BS; k0 += Cfg::kKStep) {
        uint32_t a[Cfg::kMT][4], a_small[Cfg::kMT][4];
        load_a_rows<T, Cfg::kMT, Cfg::kKStep, PRECISE, Cfg::kSwizzle, Cfg::kTf32Tiles>(a, a_small, xs, Cfg::kLdX, 0,
                                                                                       k0, lane);
        mma_loaded_a<T, Cfg::kMT, Cfg::kNT, Cfg::kKStep, /*B_KMAJOR=*/!TRANS, PRECISE, Cfg::kSwizzleW>(
            acc, a, a_small, ws, Cfg::kLdW, 0, k0, lane);
      }
    }
    read_stage = read_stage + 1 == S ? 0 : read_stage + 1;
    write_stage = write_stage + 1 == S ? 0 : write_stage + 1;
    if (read_stage == 0) phase ^= 1u;

    const int done = base + t + 1;
    if (done != col_end && t + 1 != cnt) continue;
    // Flush output column `col` (warp-uniform branch).
    if (s_offsets[col] >= base && col_end <= end) {
      store_column(col, acc);
    } else {
      const int slot = 2 * gw + (col != first_col ? 1 : 0);
      float4* mine = reinterpret_cast<float4*>(pieces + static_cast<int64_t>(slot) * Cfg::kPieceFloats);
#pragma unroll
      for (int mt = 0; mt < Cfg::kMT; ++mt) {
#pragma unroll
        for (int nt = 0; nt < Cfg::kNT; ++nt) {
          __stcg(mine + (mt * Cfg::kNT + nt) * 32 + lane,
                 make_float4(acc[mt][nt][0], acc[mt][nt][1], acc[mt][nt][2], acc[mt][nt][3]));
        }
      }
    }
#pragma unroll
    for (int mt = 0; mt < Cfg::kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < Cfg::kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
    // Next column with items (empty ones were zeroed above).
    if (t + 1 < cnt) {
      do {
        ++col;
      } while (s_offsets[col + 1] <= done);
      col_end = s_offsets[col + 1];
    }
  }
  cp_async_wait<0>();
#ifdef JBS_WALK_TIMES
  if (lane == 0 && g_walk_times != nullptr && active) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    unsigned long long* mine = g_walk_times + kWalkStamps * (g * W + gw);
    mine[0] = walk_start;
    mine[1] = walk_first_data;
    mine[2] = walk_clock_ns();
    mine[3] = sm;
    mine[4] = walk_items;
    mine[5] = walk_dependency;
  }
#endif
  if constexpr (PACKED) {
    // Every piece of this CTA's columns is stored (__syncthreads orders the CTA's global
    // stores before its later loads). The first warp of each column cut between warps adds the
    // column's pieces in warp order: its own (slot 2 gw + 1, or 2 gw if the column is also its
    // first), then each later warp's first one (slot 2 q), as the sum kernel does.
    __syncthreads();
    if (!active) return;
    const int last_col = col;  // the walk ended on it
    const int last_end = s_offsets[last_col + 1];
    if (last_end <= end || s_offsets[last_col] < base) return;  // not cut at this warp's end, or not first
    float sum[Cfg::kMT][Cfg::kNT][4] = {};
    const float* const cta_pieces = pieces + static_cast<int64_t>(2 * blockIdx.x * NW) * Cfg::kPieceFloats;
    for (int q = warp; q < NW; ++q) {
      const int q_base = static_cast<int>(share_begin + share * q / NW);
      if (q_base >= last_end) break;
      if (q > warp && static_cast<int>(share_begin + share * (q + 1) / NW) == q_base) continue;  // no items
      const int slot = q > warp ? 2 * q : 2 * q + (last_col != first_col ? 1 : 0);
      const float4* piece =
          reinterpret_cast<const float4*>(cta_pieces + static_cast<int64_t>(slot) * Cfg::kPieceFloats);
#pragma unroll
      for (int mt = 0; mt < Cfg::kMT; ++mt) {
#pragma unroll
        for (int nt = 0; nt < Cfg::kNT; ++nt) {
          const float4 v = __ldcg(piece + (mt * Cfg::kNT + nt) * 32 + lane);
          sum[mt][nt][0] += v.x;
          sum[mt][nt][1] += v.y;
          sum[mt][nt][2] += v.z;
          sum[mt][nt][3] += v.w;
        }
      }
    }
    store_column(last_col, sum);
  }
}

// Output columns cut between warps of bsmm_stream_even_kernel (P = 1) or of
// bsmm_stream_even_group_kernel (segments are groups of P columns), launched
// right after it on the same stream: one warp per output column adds the
// column's pieces in warp order and writes it. Columns of segments held whole
// by one warp were written already. A piece holds the P columns of its segment,
// TN x BS floats each, in accumulator-fragment order. With CTA_WARPS > 0 the
// walk kernel has already added the pieces of consecutive warps of one CTA
// that end in the same segment into the first one's slot: the others are
// skipped here. HALVES: the pieces' columns are in halves_column order (StreamEvenConfig's
// kHalves).
template <typename T, int BS, int TN, int P, int CTA_WARPS, bool HALVES = false>
__global__ void __launch_bounds__(128) bsmm_stream_even_sum_kernel(const StreamEvenParams p) {
  constexpr int kMT = TN / 16;
  constexpr int kNT = BS / 8;
  constexpr int kColumnFloats = TN * BS;
  constexpr int kPieceFloats = P * kColumnFloats;
  constexpr int kCtaWarps = CTA_WARPS > 0 ? CTA_WARPS : 1;
  const int lane = threadIdx.x & 31;
  const int c = blockIdx.x * 4 + (threadIdx.x >> 5);
  const bool in_range = c < p.out_cols / BS;
  const int seg = c / P;
  // The offsets are the op's operands, complete before the walk began: their
  // loads are in flight across the wait.
  const int col_begin = in_range ? __ldg(p.offsets + seg) : 0;
  const int col_end = in_range ? __ldg(p.offsets + seg + 1) : 0;
  // Launched early behind the walk (launch_even_split): the pieces are the
  // walk's. Every CTA waits, even one with nothing to sum, so that this
  // kernel's completion implies the walk's for whatever the stream runs next.
#ifdef JBS_WALK_TIMES
  unsigned long long* const stamps =
      g_sum_times != nullptr && in_range && lane == 0 && blockIdx.y == 0 ? g_sum_times + kSumStamps * c : nullptr;
  if (stamps != nullptr) stamps[0] = walk_clock_ns();
#endif
  griddep_wait();
#ifdef JBS_WALK_TIMES
  if (stamps != nullptr) stamps[1] = stamps[3] = walk_clock_ns();
#endif
  if (col_begin == col_end) return;
  const int64_t W = p.num_warps;
  const int64_t nnz = p.num_items;
  const int first_w = stream_even_owner(col_begin, W, nnz);
  const int last_w = stream_even_owner(col_end - 1, W, nnz);
  if (first_w == last_w) return;
  const int64_t g = blockIdx.y;
  const float* const pieces = p.pieces + g * 2 * W * kPieceFloats + (c % P) * kColumnFloats;
  // Pieces are read kBatch at a time, all loads of a batch in flight together
  // (a column has 2-4 pieces at density 1/2), and added in warp order.
  constexpr int kFrags = kMT * kNT;  // float4s per lane per piece
  constexpr int kBatch = cclamp(32 / kFrags, 1, 4);
  float sum[kMT][kNT][4] = {};
  for (int q0 = first_w; q0 <= last_w; q0 += kBatch) {
    float4 f[kBatch][kFrags];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int q = q0 + b;
      // Warp q's piece of this segment: its first segment's slot unless q started
      // in an earlier segment (only possible for the first warp).
      const bool later = q == first_w && nnz * q / W < col_begin;
      // Merged into warp q - 1's (same CTA, and q ends in this segment)?
      const bool merged = CTA_WARPS > 0 && q > first_w && q / kCtaWarps == (q - 1) / kCtaWarps &&
                          (q < last_w || nnz * (q + 1) / W <= col_end);
      const float4* piece =
          reinterpret_cast<const float4*>(pieces + static_cast<int64_t>(2 * q + (later ? 1 : 0)) * kPieceFloats);
#pragma unroll
      for (int i = 0; i < kFrags; ++i) f[b][i] = q <= last_w && !merged ? __ldcg(piece + i * 32 + lane) : float4{};
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (q0 + b > last_w) break;  // (no loads below: an early exit is free here)
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          const float4 v = f[b][mt * kNT + nt];
          sum[mt][nt][0] += v.x;
          sum[mt][nt][1] += v.y;
          sum[mt][nt][2] += v.z;
          sum[mt][nt][3] += v.w;
        }
      }
    }
  }
#ifdef JBS_WALK_TIMES
  if (stamps != nullptr) stamps[2] = walk_clock_ns();
#endif
  store_fragments<T, kMT, kNT, HALVES>(static_cast<T*>(p.out) + g * p.out_group_stride + static_cast<int64_t>(c) * BS,
                                       p.out_cols, static_cast<int>(p.rows), sum, lane);
#ifdef JBS_WALK_TIMES
  if (stamps != nullptr) stamps[3] = walk_clock_ns();  // the stores issued, not landed
#endif
}

}  // namespace jbs
