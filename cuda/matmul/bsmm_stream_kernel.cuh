// Memory-bound kernels for small N (N <= kStreamMaxRows): the whole N fits one
// row tile, so every weight block is read exactly once and the game is keeping
// enough bytes in flight per SM with as little synchronisation as possible.
//
// fwd / dx (bsmm_stream_kernel): CTA = one *chunk* of an output block column
// (host table *_chunks: column, item begin, item end). Each warp walks items
// w, w + NW, w + 2 NW, ... of the chunk through its *own* cp.async ring, so the
// main loop has no __syncthreads, only __syncwarp. Item indices are fetched 32
// at a time (one per lane), one batch ahead, and broadcast with shfl, so no
// memory latency is exposed per item. At the end the NW warp partials are
// summed in warp order. Columns longer than the host's chunk limit are split
// into several chunks (the first n_split rows of the chunk table); each writes
// an fp32 partial to scratch and the last-arriving chunk of a column (int
// atomic counter, zeroed by a kernel just before) sums the partials in chunk order and
// writes the output. Every sum has a fixed order: bitwise deterministic.
//
// dw (bsmm_dw_stream_kernel): CTA = NW runs of consecutive nonzero blocks, one
// run per warp; each warp streams dy tiles through its own ring and writes each
// bs x bs result through a private staging tile as 16-byte vectors. The blocks
// are stored row-major, so consecutive items mostly share their x tile: it is
// loaded once per run of equal input blocks, not once per item, which halves
// the L2 reads. No cross-warp or cross-CTA interaction at all.
#pragma once

#include <cstdint>

#include "common/dtype.cuh"
#include "common/ptx.cuh"
#include "common/smem.cuh"
#include "matmul/bsmm_blocks_kernel.cuh"  // cmin/cmax/cclamp
#include "matmul/dw_operands.cuh"
#include "matmul/staged_block_store.cuh"
#include "matmul/tile_io.cuh"
#include "matmul/warp_mma.cuh"

namespace jbs {

struct StreamParams {
  const void* in;
  const void* w;
  const int32_t* items;   // (nnz, 2): weight block, input block column
  const int4* chunks;     // (num_chunks, 4): output column, item begin, item end, unused
  const int32_t* splits;  // (n_split + 1, 2): per split chunk, (first chunk of its column, P)
  void* out;
  float* partials;  // groups * n_split * TN * BS floats
  int* counters;    // groups * n_split ints (only the first chunk of a column is used)
  int64_t rows;
  // Where input block cb's tile starts (in + cb * in_tile_stride) and its row
  // stride: BS and in_cols for the row-major activation, rows * BS and BS for
  // its tile-major copy (matmul/tile_major.cuh).
  int64_t in_tile_stride;
  int64_t in_ld;
  int64_t out_cols;
  int64_t in_group_stride;
  int64_t w_group_stride;
  int64_t out_group_stride;
  int n_split;
};

// Per-warp shared-memory budget rule shared by both stream kernels.
//  BIG = false: 4 warps, as many stages as fit ~72 KiB per CTA (3 CTAs per SM).
//  BIG = true:  8 warps, as many stages as fit ~200 KiB per CTA (1 CTA per SM):
//               fewer, deeper CTAs, so a CTA alone can pull a long column fast.
// 2..8 stages; fewer warps per CTA when even 2 stages would not fit 200 KiB.
constexpr int stream_target_warps(bool big) { return big ? 8 : 4; }
constexpr int stream_stages(int stage_bytes, bool big) {
  return cclamp((big ? 200 : 72) * 1024 / (stream_target_warps(big) * stage_bytes), 2, 8);
}
constexpr int stream_warps(int warp_bytes, bool big) {
  int nw = stream_target_warps(big);
  while (nw > 1 && nw * warp_bytes > 200 * 1024) nw /= 2;
  return nw;
}

template <typename T, int BS, bool TRANS, int TN, bool BIG>
struct StreamConfig {
  static_assert(TN == 16 || TN == 32 || TN == 64, "row tile");
  static constexpr bool k16 = kIs16Bit<T>;
  static constexpr int kMT = TN / 16;
  static constexpr int kNT = BS / 8;
  static constexpr int kKStep = (k16 && BS >= 16) ? 16 : 8;
  // Same bank-conflict-free strides as BlocksConfig, except fp32 tiles at bs 32, whose rows
  // are padded to 40 floats (160 bytes, 32-byte aligned) rather than the conflict-free 36: a
  // cp.async row landing at a pitch of 144 bytes made the L2 serve 1.5x the sectors of the
  // tile (Nsight Compute, "L2 Theoretical Sectors Global Excessive"), which cost the dx
  // (both of its tiles at 36) 8-13% against the fwd; the 2-way bank conflict of the tf32
  // fragment reads at 40 costs less. Measured (benchmarks/NOTES.md, session 28): dx 1.13x /
  // 1.09x faster at densities 1/4 / 1/8, fwd 1.03x at 1/4. bs 16 and 64 were not measured.
  static constexpr int kLdF32 = BS == 32 ? BS + 8 : BS + 4;
  static constexpr int kLdX = k16 ? (BS == 8 ? 8 : BS + 8) : kLdF32;
  static constexpr int kLdW = (k16 || !TRANS) ? (BS == 8 ? 8 : BS + 8) : kLdF32;
  static constexpr int kStageElems = TN * kLdX + BS * kLdW;
  static constexpr int kStageBytes = kStageElems * static_cast<int>(sizeof(T));
  static constexpr int kStages = stream_stages(kStageBytes, BIG);
  static constexpr int kLdC = BS + 4;  // fp32 partial tile stride (float4 rows)
  static constexpr int kPartBytes = TN * kLdC * 4;
  static constexpr int kWarpBytes = cmax(kStages * kStageBytes, kPartBytes);
  static constexpr int kWarps = stream_warps(kWarpBytes, BIG);
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kSmemBytes = kWarps * kWarpBytes;
  static_assert(kWarpBytes % 16 == 0 && kStageBytes % 16 == 0, "16B alignment");
};

// Warp-cooperative async copy of a ROWS x COLS tile (row stride ld_src in
// global memory, ld_dst in shared memory); rows >= valid_rows are zero-filled
// (0 source bytes from a valid address).
template <typename T, int ROWS, int COLS, bool SWIZZLED = false>
__device__ __forceinline__ void warp_load_tile(T* dst, int ld_dst, const T* src, int64_t ld_src,
                                               int valid_rows, int lane) {
  load_tile_async<T, ROWS, COLS, 32, SWIZZLED>(dst, ld_dst, src, ld_src, valid_rows, lane);
}

// Lane l of the warp returns items[base + stride * (32 q + l)] for q = batch,
// or (0, 0) past `count` entries.
__device__ __forceinline__ int2 fetch_item_batch(const int2* items, int64_t base, int stride,
                                                 int count, int batch, int lane) {
  const int t = batch * 32 + lane;
  if (t < count) return __ldg(items + base + static_cast<int64_t>(t) * stride);
  return make_int2(0, 0);
}

template <typename T, int BS, bool TRANS, int TN, bool PRECISE, bool BIG>
__global__ void __launch_bounds__(StreamConfig<T, BS, TRANS, TN, BIG>::kThreads)
    bsmm_stream_kernel(const StreamParams p) {
  using Cfg = StreamConfig<T, BS, TRANS, TN, BIG>;
  constexpr int S = Cfg::kStages;
  constexpr int NW = Cfg::kWarps;
  unsigned char* const smem_raw = dynamic_smem();
  __shared__ int s_last;

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int chunk_id = blockIdx.x;
  const int64_t g = blockIdx.y;
  const int4 ch = __ldg(p.chunks + chunk_id);
  const int o = ch.x;
  const int beg = ch.y;
  const int cnt = ch.z - ch.y;
  const int valid_rows = static_cast<int>(p.rows);  // 1..TN

  const T* const in = static_cast<const T*>(p.in) + g * p.in_group_stride;
  const T* const w = static_cast<const T*>(p.w) + g * p.w_group_stride;
  const int2* const items = reinterpret_cast<const int2*>(p.items);

  T* const wsm = reinterpret_cast<T*>(smem_raw + warp * Cfg::kWarpBytes);
  const int my_cnt = cnt > warp ? (cnt - warp + NW - 1) / NW : 0;
  const int64_t my_base = static_cast<int64_t>(beg) + warp;

  int2 bcur = fetch_item_batch(items, my_base, NW, my_cnt, 0, lane);
  int2 bnxt = fetch_item_batch(items, my_base, NW, my_cnt, 1, lane);

  auto issue = [&](int stage, int t) {
    int2 it;
    it.x = __shfl_sync(0xffffffffu, bcur.x, t & 31);
    it.y = __shfl_sync(0xffffffffu, bcur.y, t & 31);
    T* xs = wsm + stage * Cfg::kStageElems;
    T* ws = xs + TN * Cfg::kLdX;
    warp_load_tile<T, TN, BS>(xs, Cfg::kLdX, in + static_cast<int64_t>(it.y) * p.in_tile_stride, p.in_ld,
                              valid_rows, lane);
    warp_load_tile<T, BS, BS>(ws, Cfg::kLdW, w + static_cast<int64_t>(it.x) * (BS * BS), BS, BS,
                              lane);
  };

#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < my_cnt) issue(s, s);
    cp_async_commit();
  }

  float acc[Cfg::kMT][Cfg::kNT][4] = {};
  int read_stage = 0;
  int write_stage = S - 1;
  for (int t = 0; t < my_cnt; ++t) {
    const int tl = t + S - 1;
    cp_async_wait<S - 2>();
    __syncwarp();
    if (tl < my_cnt) {
      if ((tl & 31) == 0) {
        bcur = bnxt;
        bnxt = fetch_item_batch(items, my_base, NW, my_cnt, (tl >> 5) + 1, lane);
      }
      issue(write_stage, tl);
    }
    cp_async_commit();
    const T* xs = wsm + read_stage * Cfg::kStageElems;
    const T* ws = xs + TN * Cfg::kLdX;
#pragma unroll
    for (int k0 = 0; k0 < BS; k0 += Cfg::kKStep) {
      warp_mma_step<T, Cfg::kMT, Cfg::kNT, Cfg::kKStep, /*A_KMAJOR=*/false, /*B_KMAJOR=*/!TRANS,
                    /*M_HALF=*/false, PRECISE>(acc, xs, Cfg::kLdX, 0, ws, Cfg::kLdW, 0, k0, lane);
    }
    read_stage = read_stage + 1 == S ? 0 : read_stage + 1;
    write_stage = write_stage + 1 == S ? 0 : write_stage + 1;
  }
  cp_async_wait<0>();
  __syncwarp();

  // Each warp's fp32 partial goes to its own region, then all threads sum the
  // NW partials in warp order.
  float* const part = reinterpret_cast<float*>(smem_raw + warp * Cfg::kWarpBytes);
  stage_acc<Cfg::kMT, Cfg::kNT, TN>(part, Cfg::kLdC, 0, 0, acc, lane);
  __syncthreads();

  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  constexpr int kChunksPerRow = BS / kVec;
  const int total = valid_rows * kChunksPerRow;
  const bool split = chunk_id < p.n_split;
  T* const out = static_cast<T*>(p.out) + g * p.out_group_stride + static_cast<int64_t>(o) * BS;

  auto sum_warps = [&](int r, int c, float (&v)[kVec]) {
#pragma unroll
    for (int e = 0; e < kVec; ++e) v[e] = 0.f;
#pragma unroll
    for (int q = 0; q < NW; ++q) {
      const float* src = reinterpret_cast<const float*>(smem_raw + q * Cfg::kWarpBytes) +
                         r * Cfg::kLdC + c;
#pragma unroll
      for (int e = 0; e < kVec; e += 4) {
        const float4 f = *reinterpret_cast<const float4*>(src + e);
        v[e] += f.x;
        v[e + 1] += f.y;
        v[e + 2] += f.z;
        v[e + 3] += f.w;
      }
    }
  };
  auto store_out = [&](int r, int c, const float (&v)[kVec]) {
    alignas(16) T packed[kVec];
#pragma unroll
    for (int e = 0; e < kVec; ++e) packed[e] = from_float<T>(v[e]);
    *reinterpret_cast<uint4*>(out + static_cast<int64_t>(r) * p.out_cols + c) =
        *reinterpret_cast<const uint4*>(packed);
  };

  if (!split) {
    for (int idx = tid; idx < total; idx += Cfg::kThreads) {
      const int r = idx / kChunksPerRow;
      const int c = (idx % kChunksPerRow) * kVec;
      float v[kVec];
      sum_warps(r, c, v);
      store_out(r, c, v);
    }
    return;
  }

  // Split column: publish this chunk's partial, count arrivals; the last
  // arrival sums all P partials of the column in chunk order.
  const int2 sp = __ldg(reinterpret_cast<const int2*>(p.splits) + chunk_id);  // (first, P)
  float* const parts = p.partials + (g * p.n_split) * (TN * BS);
  float* const mine = parts + static_cast<int64_t>(chunk_id) * (TN * BS);
  for (int idx = tid; idx < total; idx += Cfg::kThreads) {
    const int r = idx / kChunksPerRow;
    const int c = (idx % kChunksPerRow) * kVec;
    float v[kVec];
    sum_warps(r, c, v);
#pragma unroll
    for (int e = 0; e < kVec; e += 4) {
      __stcg(reinterpret_cast<float4*>(mine + r * BS + c + e),
             make_float4(v[e], v[e + 1], v[e + 2], v[e + 3]));
    }
  }
  __threadfence();
  __syncthreads();
  if (tid == 0) {
    const int prev = atomicAdd(p.counters + g * p.n_split + sp.x, 1);
    s_last = prev == sp.y - 1;
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  for (int idx = tid; idx < total; idx += Cfg::kThreads) {
    const int r = idx / kChunksPerRow;
    const int c = (idx % kChunksPerRow) * kVec;
    float v[kVec];
#pragma unroll
    for (int e = 0; e < kVec; ++e) v[e] = 0.f;
    for (int q = 0; q < sp.y; ++q) {
      const float* src = parts + static_cast<int64_t>(sp.x + q) * (TN * BS) + r * BS + c;
#pragma unroll
      for (int e = 0; e < kVec; e += 4) {
        const float4 f = __ldcg(reinterpret_cast<const float4*>(src + e));
        v[e] += f.x;
        v[e + 1] += f.y;
        v[e + 2] += f.z;
        v[e + 3] += f.w;
      }
    }
    store_out(r, c, v);
  }
}

// Zeroes the split counters before bsmm_stream_kernel runs. A kernel rather than
// cudaMemsetAsync: XLA captures the handler into a CUDA graph, and a memset node
// there made every op ~15 us slower on the host (measured on an H100 at density
// 1/32, the one seed case with split columns; benchmarks/NOTES.md), while a
// kernel node updates cheaply. (A template so that the three per-dtype
// translation units including this header do not define the same symbol.)
template <typename Counter>
__global__ void zero_split_counters_kernel(Counter* counters, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    counters[i] = 0;
  }
}

// Zeroes `count` split counters on `stream` before bsmm_stream_kernel or one of
// the small-N group kernels runs.
inline cudaError_t launch_zero_counters(int* counters, int64_t count, cudaStream_t stream) {
  const int64_t blocks = (count + 255) / 256;
  zero_split_counters_kernel<<<static_cast<unsigned>(blocks < 1024 ? blocks : 1024), 256, 0, stream>>>(
      counters, count);
  return cudaGetLastError();
}

// ----------------------------------------------------------------------------- dw

struct DwStreamParams : DwOperands {
  const int32_t* items;  // (nnz, 2): c-block, k-block
  int items_per_warp;
};

// STAGED (bs 16 and 32, sm_90): each result block leaves whole (staged_block_store.cuh: 16-byte
// lane stores) from a swizzled staging block in its final
// type and layout, which stmatrix (16-bit types) or float2 stores (fp32) fill straight from
// the accumulators, instead of through an fp32 staging
// tile that the warp reads back, converts and stores in 16-byte pieces. That epilogue made
// the warp the bottleneck: ~210 instructions per 2 KB block at ~5.4 cycles each, one warp
// per scheduler (4 per CTA, since the fp32 staging and 5 stages did not fit 8), and L1 75%
// busy with the staging's 8 KB per block; the kernel wrote HBM at ~1.7 TB/s
// (benchmarks/NOTES.md, sessions 3 and 26). With STAGED the CTA always has 8 warps (two per
// scheduler) and as many stages as fit 224 KiB (fp32: 2, so N <= 32 only).
//
// SWIZZLED (STAGED, bs 16 or 32): the tiles' rows are unpadded and swizzled
// (matmul/tile_io.cuh: load_tile_async), so more stages fit a warp's 28 KB. Why: at the seed
// shape, density 1/2, the fp32 dw ran at 12% occupancy, 6 cycles per issued instruction, with
// DRAM 50% and L2 70% busy (benchmarks/NOTES.md, session 59): latency-bound on its 2 blocks in
// flight a warp. fp32 bs 32 then holds 3 stages (1.04-1.1x faster, session 60), bf16 bs 32 6
// instead of 4, with 8 shared wavefronts a 512-byte cp.async instead of 11 (1.10-1.27x at
// densities 1/4 to 1/16, session 61).
template <typename T, int BS, int TN, bool BIG, bool STAGED = false, bool SWIZZLED = false>
struct DwStreamConfig {
  static constexpr bool k16 = kIs16Bit<T>;
  static_assert(!STAGED || BS == 16 || BS == 32, "staged dw epilogue: bs 16 or 32");
  static_assert(!SWIZZLED || (STAGED && (BS == 16 || BS == 32)), "swizzled tiles: the staged dw at bs 16 or 32");
  static constexpr bool kMHalf = BS == 8;
  static constexpr int kMT = kMHalf ? 1 : BS / 16;
  static constexpr int kNT = BS / 8;
  static constexpr int kKStep = k16 ? 16 : 8;
  static constexpr int kLd = SWIZZLED ? BS : BS == 8 ? 8 : BS + 8;  // k-major reads of both operands
  // Where load_tile_async's SWIZZLED puts the tiles' elements, for warp_mma_step.
  static constexpr TileSwizzle kSwizzle = !SWIZZLED ? kTilePlain : (k16 ? kTileSwizzle128B : kTileSwizzleF32KMajor);
  static constexpr int kTileElems = TN * kLd;
  // Stage s holds x region s (the x tile of some recent run, see the kernel) and
  // the dy tile of the item in flight in stage s.
  static constexpr int kStageElems = 2 * kTileElems;
  static constexpr int kStageBytes = kStageElems * static_cast<int>(sizeof(T));
  static constexpr int kLdC = BS + 4;
  static constexpr int kStagedSmemBytes = 224 * 1024;
  // STAGED: staging blocks per warp. The lane stores have read a block by the time the warp
  // stages the next one, so one would do; fp32's SWIZZLED takes one to fit its third stage, while
  // a fifth stage for bf16 bs 32 in place of its second block measured ~2% slower at the seed
  // shape, density 1/4 (benchmarks/NOTES.md, session 60).
  static constexpr int kOutSlots = (SWIZZLED && !k16) ? 1 : 2;
  static constexpr int kOutBytes =
      STAGED ? kOutSlots * BS * BS * static_cast<int>(sizeof(T)) : BS * kLdC * 4;  // fp32 staging of one block
  static constexpr int kStages =
      STAGED ? cclamp((kStagedSmemBytes / 8 - kOutBytes) / kStageBytes, 2, 8) : stream_stages(kStageBytes, BIG);
  static constexpr int kWarpBytes = kStages * kStageBytes + kOutBytes;
  static constexpr int kWarps = STAGED ? 8 : stream_warps(kWarpBytes, BIG);
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kSmemBytes = kWarps * kWarpBytes;
  static_assert(TN % kKStep == 0, "k steps");
  static_assert(kStageBytes % 16 == 0 && kWarpBytes % 16 == 0, "16B alignment");
  static_assert(kStages <= 8 && kWarps <= 8, "s_x_region size");
  static_assert(kSmemBytes <= (STAGED ? kStagedSmemBytes : 200 * 1024), "shared memory");
};

template <typename T, int BS, int TN, bool PRECISE, bool BIG, bool STAGED = false, bool SWIZZLED = false>
__global__ void __launch_bounds__(DwStreamConfig<T, BS, TN, BIG, STAGED, SWIZZLED>::kThreads)
    bsmm_dw_stream_kernel(const DwStreamParams p) {
  using Cfg = DwStreamConfig<T, BS, TN, BIG, STAGED, SWIZZLED>;
  constexpr int S = Cfg::kStages;
  constexpr int NW = Cfg::kWarps;
  unsigned char* const smem_raw = dynamic_smem();

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int64_t g = blockIdx.y;
  const int64_t first = (static_cast<int64_t>(blockIdx.x) * NW + warp) * p.items_per_warp;
  if (first >= p.nnz) return;  // warp-uniform; no CTA-wide barrier below
  const int my_cnt = static_cast<int>(p.nnz - first < p.items_per_warp ? p.nnz - first
                                                                       : p.items_per_warp);
  const int valid_rows = static_cast<int>(p.rows);

  const T* const x = static_cast<const T*>(p.x) + g * p.x_group_stride;
  const T* const dy = static_cast<const T*>(p.dy) + g * p.dy_group_stride;
  T* const dw = static_cast<T*>(p.dw) + g * p.dw_group_stride;
  const int2* const items = reinterpret_cast<const int2*>(p.items);

  T* const wsm = reinterpret_cast<T*>(smem_raw + warp * Cfg::kWarpBytes);
  float* const cs = reinterpret_cast<float*>(smem_raw + warp * Cfg::kWarpBytes +
                                             S * Cfg::kStageBytes);
  // x region read by the item in flight in each stage (written at issue, read
  // S - 1 iterations later, __syncwarp in between).
  __shared__ int s_x_region[8][8];
  int* const x_region_of_stage = s_x_region[warp];

  int2 bcur = fetch_item_batch(items, first, 1, my_cnt, 0, lane);
  int2 bnxt = fetch_item_batch(items, first, 1, my_cnt, 1, lane);

  // Runs of equal input block c share one x tile. Run r's tile goes to x region
  // r mod S. That region is free when run r + S starts: runs r+1 .. r+S-1 hold
  // at least S - 1 items, so run r ended at or before item tl - S = t - 1, which
  // was consumed before item tl is issued. Each x copy joins the commit group of
  // its run's first item, and groups complete in order, so later items of the
  // run find it landed too.
  int issued_c = -1;
  int issued_region = S - 1;
  auto issue = [&](int stage, int t) {
    int2 it;
    it.x = __shfl_sync(0xffffffffu, bcur.x, t & 31);
    it.y = __shfl_sync(0xffffffffu, bcur.y, t & 31);
    if (it.x != issued_c) {
      issued_c = it.x;
      issued_region = issued_region + 1 == S ? 0 : issued_region + 1;
      warp_load_tile<T, TN, BS, SWIZZLED>(wsm + issued_region * Cfg::kStageElems, Cfg::kLd,
                                              x + static_cast<int64_t>(it.x) * BS, p.x_cols, valid_rows, lane);
    }
    if (lane == 0) x_region_of_stage[stage] = issued_region;
    warp_load_tile<T, TN, BS, SWIZZLED>(wsm + stage * Cfg::kStageElems + Cfg::kTileElems, Cfg::kLd,
                                            dy + static_cast<int64_t>(it.y) * BS, p.dy_cols, valid_rows, lane);
  };

#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < my_cnt) issue(s, s);
    cp_async_commit();
  }

  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  constexpr int kChunksPerRow = BS / kVec;
  constexpr int kChunks = BS * kChunksPerRow;

  int read_stage = 0;
  int write_stage = S - 1;
  for (int t = 0; t < my_cnt; ++t) {
    const int tl = t + S - 1;
    cp_async_wait<S - 2>();
    __syncwarp();
    if (tl < my_cnt) {
      if ((tl & 31) == 0) {
        bcur = bnxt;
        bnxt = fetch_item_batch(items, first, 1, my_cnt, (tl >> 5) + 1, lane);
      }
      issue(write_stage, tl);
    }
    cp_async_commit();
    const T* xs = wsm + x_region_of_stage[read_stage] * Cfg::kStageElems;
    const T* ds = wsm + read_stage * Cfg::kStageElems + Cfg::kTileElems;
    float acc[Cfg::kMT][Cfg::kNT][4] = {};
#pragma unroll
    for (int k0 = 0; k0 < TN; k0 += Cfg::kKStep) {
      warp_mma_step<T, Cfg::kMT, Cfg::kNT, Cfg::kKStep, /*A_KMAJOR=*/true, /*B_KMAJOR=*/true,
                    Cfg::kMHalf, PRECISE, Cfg::kSwizzle, Cfg::kSwizzle>(acc, xs, Cfg::kLd, 0, ds, Cfg::kLd, 0, k0,
                                                                        lane);
    }
    T* const out = dw + (first + t) * (BS * BS);
    if constexpr (STAGED) {
      store_staged_block<T, BS, Cfg::kMT, Cfg::kNT, Cfg::kOutSlots>(acc, reinterpret_cast<T*>(cs), t, out, lane);
    } else {
      stage_acc<Cfg::kMT, Cfg::kNT, BS>(cs, Cfg::kLdC, 0, 0, acc, lane);
      __syncwarp();
#pragma unroll
      for (int idx = lane; idx < kChunks; idx += 32) {
        const int r = idx / kChunksPerRow;
        const int c = (idx % kChunksPerRow) * kVec;
        alignas(16) T packed[kVec];
#pragma unroll
        for (int e = 0; e < kVec; e += 4) {
          const float4 f = *reinterpret_cast<const float4*>(cs + r * Cfg::kLdC + c + e);
          packed[e] = from_float<T>(f.x);
          packed[e + 1] = from_float<T>(f.y);
          packed[e + 2] = from_float<T>(f.z);
          packed[e + 3] = from_float<T>(f.w);
        }
        *reinterpret_cast<uint4*>(out + r * BS + c) = *reinterpret_cast<const uint4*>(packed);
      }
      __syncwarp();
    }
    read_stage = read_stage + 1 == S ? 0 : read_stage + 1;
    write_stage = write_stage + 1 == S ? 0 : write_stage + 1;
  }
  cp_async_wait<0>();
}

}  // namespace jbs
