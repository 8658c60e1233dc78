// Forward (y = x @ W) and input-gradient (dx = dy @ W^T) kernel: both are
// "gather a segment of weight blocks for one output block column"; they differ
// only in whether each bs x bs block is used as stored or transposed, which is
// just a different shared-memory read pattern for the B operand.
//
// CTA = (output block column o, tile of TN rows, group g). It walks the items
// of its segment, streaming each (TN x bs input tile, bs x bs weight block)
// pair through a kStages-deep cp.async ring so several weight blocks are in
// flight, and accumulates a TN x bs fp32 tile with tensor cores. Items are
// processed in segment order by fixed warps, so results are bitwise
// deterministic. An empty segment writes zeros.
//
// GATHER: the input is an image batch and the kernel a convolution's implicit
// GEMM: input tiles are gathered rows of its im2col matrix (conv/gathered_tile.cuh),
// items name column blocks tap * src_blocks + channel block of that matrix.
#pragma once

#include <cstdint>

#include "common/dtype.cuh"
#include "common/ptx.cuh"
#include "common/smem.cuh"
#include "conv/gathered_tile.cuh"
#include "conv/row_gather.h"
#include "matmul/tile_io.cuh"
#include "matmul/warp_mma.cuh"

namespace jbs {

// The operands every large-N fwd/dx kernel reads (see BsmmBlocksArgs).
struct FwdDxOperands {
  const void* in;
  const void* w;
  void* out;
  int64_t rows;
  int64_t in_cols;
  int64_t out_cols;
  int64_t in_group_stride;
  int64_t w_group_stride;
  int64_t out_group_stride;
  RowGather gather;  // GATHER only
};

struct BlocksParams : FwdDxOperands {
  const int32_t* offsets;
  const int32_t* items;
  int out_blocks;  // out_cols / BS; blockIdx.x = row_tile * out_blocks + o
};

constexpr int cmin(int a, int b) { return a < b ? a : b; }
constexpr int cmax(int a, int b) { return a > b ? a : b; }
constexpr int cclamp(int v, int lo, int hi) { return cmin(cmax(v, lo), hi); }

template <typename T, int BS, bool TRANS, int TN>
struct BlocksConfig {
  static_assert(TN == 32 || TN == 64 || TN == 128, "row tile");
  static constexpr bool k16 = kIs16Bit<T>;
  static constexpr int kThreads = 128;
  // Warp grid over the TN x BS output tile. Warps beyond kWarpsM * kWarpsN
  // (small tiles) only help with the loads. Warp tiles are >= 16 wide when
  // BS >= 16 so 16-bit B fragments load in pairs.
  static constexpr int kWarpsM = cmin(TN / 16, 4);
  static constexpr int kWarpsN = BS >= 16 ? cmin(BS / 16, 4 / kWarpsM) : 1;
  static constexpr int kWarpM = TN / kWarpsM;
  static constexpr int kWarpN = BS / kWarpsN;
  static constexpr int kMT = kWarpM / 16;
  static constexpr int kNT = kWarpN / 8;
  static constexpr int kKStep = (k16 && BS >= 16) ? 16 : 8;
  // Shared row strides (elements), chosen bank-conflict free for the reads:
  //  16-bit, ldmatrix: 8 rows of 16 B must hit distinct 16 B bank groups:
  //    stride BS + 8 (row bytes = 16 mod 128) or, for BS = 8, exactly 16 B.
  //  fp32 A / transposed-B reads (m or n = lane/4, k = lane%4): stride = 4 mod 8.
  //  fp32 k-major B reads (k = lane%4, n = lane/4): stride = 8 mod 32 (or 24).
  // All strides keep rows 16-byte aligned for cp.async.
  static constexpr int kLdX = k16 ? (BS == 8 ? 8 : BS + 8) : BS + 4;
  static constexpr int kLdW = (k16 || !TRANS) ? (BS == 8 ? 8 : BS + 8) : BS + 4;
  static constexpr int kStageElems = TN * kLdX + BS * kLdW;
  static constexpr int kStageBytes = kStageElems * static_cast<int>(sizeof(T));
  // As many stages as fit ~48 KiB, 2..8: in the memory-bound small-N case the
  // number of weight blocks in flight per CTA is what sets the bandwidth.
  static constexpr int kStages = cclamp(48 * 1024 / kStageBytes, 2, 8);
  static constexpr int kLdC = BS + 8;  // fp32 staging stride for the epilogue
  static constexpr int kEpilogueBytes = TN * kLdC * 4;
  static constexpr int kSmemBytes = cmax(kStages * kStageBytes, kEpilogueBytes);
  static_assert((kLdX * sizeof(T)) % 16 == 0 && (kLdW * sizeof(T)) % 16 == 0, "16B rows");
  static_assert((kStageBytes % 16) == 0, "stage alignment");
  static_assert(kMT >= 1 && kNT >= 1 && BS % kKStep == 0, "tile shape");
};

template <typename T, int BS, bool TRANS, int TN, bool PRECISE, bool GATHER = false>
__global__ void __launch_bounds__(128) bsmm_blocks_kernel(const BlocksParams p) {
  using Cfg = BlocksConfig<T, BS, TRANS, TN>;
  constexpr int kStages = Cfg::kStages;
  unsigned char* const smem_raw = dynamic_smem();
  T* const smem = reinterpret_cast<T*>(smem_raw);

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int o = static_cast<int>(blockIdx.x % static_cast<unsigned>(p.out_blocks));
  const int64_t n0 = static_cast<int64_t>(blockIdx.x / static_cast<unsigned>(p.out_blocks)) * TN;
  const int64_t g = blockIdx.y;

  const T* const in_group = static_cast<const T*>(p.in) + g * p.in_group_stride;
  const T* const in = in_group + (GATHER ? 0 : n0 * p.in_cols);
  const T* const w = static_cast<const T*>(p.w) + g * p.w_group_stride;
  T* const out = static_cast<T*>(p.out) + g * p.out_group_stride + n0 * p.out_cols +
                 static_cast<int64_t>(o) * BS;
  const int valid_rows = static_cast<int>(p.rows - n0 < TN ? p.rows - n0 : TN);
  const int beg = __ldg(p.offsets + o);
  const int end = __ldg(p.offsets + o + 1);
  // items[j] = (weight block index, input block column); 8-byte aligned.
  const int2* const items = reinterpret_cast<const int2*>(p.items);

  GatheredTile<T, TN, BS, Cfg::kThreads> gathered;
  if constexpr (GATHER) gathered.init(p.gather, n0, p.rows, tid);

  auto load_stage = [&](int stage, int2 item) {
    T* xs = smem + stage * Cfg::kStageElems;
    T* ws = xs + TN * Cfg::kLdX;
    if constexpr (GATHER) {
      gathered.load(xs, Cfg::kLdX, in_group, p.in_cols, p.gather, item.y, tid);
    } else {
      load_tile_async<T, TN, BS, Cfg::kThreads>(xs, Cfg::kLdX, in + static_cast<int64_t>(item.y) * BS,
                                                p.in_cols, valid_rows, tid);
    }
    load_tile_async<T, BS, BS, Cfg::kThreads>(
        ws, Cfg::kLdW, w + static_cast<int64_t>(item.x) * (BS * BS), BS, BS, tid);
  };

  // Prologue: fill kStages - 1 stages. Every thread commits exactly one group
  // per stage (possibly empty) so the wait_group counts line up.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (beg + s < end) load_stage(s, __ldg(items + beg + s));
    cp_async_commit();
  }
  // Indices of the item to issue are loaded one iteration ahead, so the load's
  // latency hides behind a whole iteration instead of stalling the issue.
  int2 next = make_int2(0, 0);
  if (beg + kStages - 1 < end) next = __ldg(items + beg + kStages - 1);

  const int wm = warp % Cfg::kWarpsM;
  const int wn = warp / Cfg::kWarpsM;
  const bool mma_warp = warp < Cfg::kWarpsM * Cfg::kWarpsN;  // warp-uniform
  float acc[Cfg::kMT][Cfg::kNT][4] = {};

  int read_stage = 0;
  int write_stage = kStages - 1;
  for (int j = beg; j < end; ++j) {
    // Fetch the next item's indices before waiting so that global-load
    // latency overlaps the wait for the current stage.
    const int jn = j + kStages - 1;
    const int2 cur = next;
    if (jn + 1 < end) next = __ldg(items + jn + 1);
    cp_async_wait<kStages - 2>();  // stage of item j has landed (this thread)...
    __syncthreads();               // ...for all threads; and stage of j-1 is free
    if (jn < end) load_stage(write_stage, cur);
    cp_async_commit();

    if (mma_warp) {
      const T* xs = smem + read_stage * Cfg::kStageElems;
      const T* ws = xs + TN * Cfg::kLdX;
#pragma unroll
      for (int k0 = 0; k0 < BS; k0 += Cfg::kKStep) {
        warp_mma_step<T, Cfg::kMT, Cfg::kNT, Cfg::kKStep, /*A_KMAJOR=*/false,
                      /*B_KMAJOR=*/!TRANS, /*M_HALF=*/false, PRECISE>(
            acc, xs, Cfg::kLdX, wm * Cfg::kWarpM, ws, Cfg::kLdW, wn * Cfg::kWarpN, k0, lane);
      }
    }
    read_stage = read_stage + 1 == kStages ? 0 : read_stage + 1;
    write_stage = write_stage + 1 == kStages ? 0 : write_stage + 1;
  }

  // Epilogue: the staging tile reuses the pipeline buffers, so drain the
  // (empty) outstanding groups and wait for every warp to finish reading.
  cp_async_wait<0>();
  __syncthreads();
  float* const cs = reinterpret_cast<float*>(smem_raw);
  if (mma_warp) stage_acc<Cfg::kMT, Cfg::kNT, TN>(cs, Cfg::kLdC, wm * Cfg::kWarpM, wn * Cfg::kWarpN, acc, lane);
  __syncthreads();
  store_tile<T, TN, BS, Cfg::kThreads, 1>(cs, Cfg::kLdC, 0, out, p.out_cols, valid_rows, tid);
}

}  // namespace jbs
