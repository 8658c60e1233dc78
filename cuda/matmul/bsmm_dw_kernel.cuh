// Weight-gradient kernel: dw[g, i] = x[g, :, c-block]^T @ dy[g, :, k-block],
// (c-block, k-block) = items[i] -- a sampled dense-dense product (SDDMM).
//
// CTA = (nonzero block i, group g); it loops over all N rows in chunks of
// kRows, double/multi-buffered with cp.async. Within a chunk the reduction
// (k = row) steps are dealt round-robin to kWarpsK warp groups, each holding a
// full partial tile; the partials are summed in shared memory in a fixed order
// at the end. No atomics and no cross-CTA reduction, so results are bitwise
// deterministic. N = 0 writes zeros.
//
// Row splits (blockIdx.z, when row_splits > 1): with few nonzero blocks and
// many rows (a convolution over a whole image batch) one CTA per block leaves
// most SMs idle, so the rows are cut into row_splits contiguous ranges of
// whole chunks. Each CTA writes its fp32 partial tile to `partials`, and
// sum_splits_kernel (matmul/sum_splits.cuh) adds them in a fixed order: still deterministic.
//
// GATHER: a convolution's weight gradient. x is an image batch read as its
// im2col matrix (conv/gathered_tile.cuh), whose column block c-block is
// tap * src_blocks + channel block; dy's rows are the row space.
#pragma once

#include <cstdint>

#include "common/dtype.cuh"
#include "common/ptx.cuh"
#include "common/smem.cuh"
#include "conv/gathered_tile.cuh"
#include "conv/row_gather.h"
#include "matmul/bsmm_blocks_kernel.cuh"  // cmin/cmax/cclamp
#include "matmul/sum_splits.cuh"
#include "matmul/tile_io.cuh"
#include "matmul/warp_mma.cuh"

namespace jbs {

struct DwParams {
  const void* x;
  const void* dy;
  const int32_t* items;
  void* dw;
  int64_t rows;
  int64_t x_cols;
  int64_t dy_cols;
  int64_t x_group_stride;
  int64_t dy_group_stride;
  int64_t dw_group_stride;
  RowGather gather;  // GATHER only
  int row_splits;    // 1: write dw directly
  float* partials;   // row_splits > 1: (G, row_splits, nnz, BS, BS) fp32
};

template <typename T, int BS>
struct DwConfig {
  static constexpr bool k16 = kIs16Bit<T>;
  static constexpr int kThreads = 128;
  static constexpr int kRows = 64;  // N rows per pipeline stage
  // 64x64 tiles are split over 2 warps in m (64 accumulators each); smaller
  // tiles give every warp the whole tile and split the reduction 4 ways.
  static constexpr int kWarpsM = BS == 64 ? 2 : 1;
  static constexpr int kWarpsK = 4 / kWarpsM;
  static constexpr int kWarpM = BS / kWarpsM;
  static constexpr bool kMHalf = BS == 8;  // MMA is 16 rows, tile only 8
  static constexpr int kMT = kMHalf ? 1 : kWarpM / 16;
  static constexpr int kNT = BS / 8;
  static constexpr int kKStep = k16 ? 16 : 8;
  static constexpr int kKSteps = kRows / kKStep;
  static_assert(kKSteps % kWarpsK == 0, "k-steps split evenly over warps");
  // Both operands are read k-major (lane%4 or ldmatrix rows along k): stride
  // 8 mod 32 words for fp32, 16 mod 128 bytes for 16-bit; BS = 8 rows are
  // 16 B / 32 B and conflict free unpadded.
  static constexpr int kLd = BS == 8 ? 8 : BS + 8;
  static constexpr int kTileElems = kRows * kLd;
  static constexpr int kStageElems = 2 * kTileElems;
  static constexpr int kStageBytes = kStageElems * static_cast<int>(sizeof(T));
  static constexpr int kStages = cclamp(64 * 1024 / kStageBytes, 2, 4);
  static constexpr int kLdC = BS + 8;
  static constexpr int kPartStride = BS * kLdC;  // floats between partial tiles
  static constexpr int kEpilogueBytes = kWarpsK * kPartStride * 4;
  static constexpr int kSmemBytes = cmax(kStages * kStageBytes, kEpilogueBytes);
  static_assert((kLd * sizeof(T)) % 16 == 0 && kStageBytes % 16 == 0, "16B rows");
};

template <typename T, int BS, bool PRECISE, bool GATHER = false>
__global__ void __launch_bounds__(128) bsmm_dw_kernel(const DwParams p) {
  using Cfg = DwConfig<T, BS>;
  constexpr int kStages = Cfg::kStages;
  constexpr int kRows = Cfg::kRows;
  unsigned char* const smem_raw = dynamic_smem();
  T* const smem = reinterpret_cast<T*>(smem_raw);

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int64_t i = blockIdx.x;
  const int64_t g = blockIdx.y;
  const int2 item = __ldg(reinterpret_cast<const int2*>(p.items) + i);  // (c-block, k-block)

  const T* const x_group = static_cast<const T*>(p.x) + g * p.x_group_stride;
  const T* const x = x_group + static_cast<int64_t>(item.x) * BS;
  const T* const dy =
      static_cast<const T*>(p.dy) + g * p.dy_group_stride + static_cast<int64_t>(item.y) * BS;
  T* const out = static_cast<T*>(p.dw) + g * p.dw_group_stride + i * (BS * BS);
  const int64_t all_chunks = (p.rows + kRows - 1) / kRows;
  const int64_t per_split = (all_chunks + p.row_splits - 1) / p.row_splits;
  const int64_t first_chunk = min(static_cast<int64_t>(blockIdx.z) * per_split, all_chunks);
  const int64_t num_chunks = min(per_split, all_chunks - first_chunk);

  auto load_stage = [&](int stage, int64_t chunk) {
    const int64_t r0 = (first_chunk + chunk) * kRows;
    const int valid = static_cast<int>(p.rows - r0 < kRows ? p.rows - r0 : kRows);
    T* xs = smem + stage * Cfg::kStageElems;
    T* ds = xs + Cfg::kTileElems;
    if constexpr (GATHER) {
      GatheredTile<T, kRows, BS, Cfg::kThreads> gathered;
      gathered.init(p.gather, r0, p.rows, tid);
      gathered.load(xs, Cfg::kLd, x_group, p.x_cols, p.gather, item.x, tid);
    } else {
      load_tile_async<T, kRows, BS, Cfg::kThreads>(xs, Cfg::kLd, x + r0 * p.x_cols, p.x_cols, valid, tid);
    }
    load_tile_async<T, kRows, BS, Cfg::kThreads>(ds, Cfg::kLd, dy + r0 * p.dy_cols, p.dy_cols, valid,
                                                 tid);
  };

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_chunks) load_stage(s, s);
    cp_async_commit();
  }

  const int wm = warp % Cfg::kWarpsM;
  const int wk = warp / Cfg::kWarpsM;
  float acc[Cfg::kMT][Cfg::kNT][4] = {};

  int read_stage = 0;
  int write_stage = kStages - 1;
  for (int64_t c = 0; c < num_chunks; ++c) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    const int64_t cn = c + kStages - 1;
    if (cn < num_chunks) load_stage(write_stage, cn);
    cp_async_commit();

    const T* xs = smem + read_stage * Cfg::kStageElems;
    const T* ds = xs + Cfg::kTileElems;
#pragma unroll
    for (int kk = 0; kk < Cfg::kKSteps / Cfg::kWarpsK; ++kk) {
      const int k0 = (kk * Cfg::kWarpsK + wk) * Cfg::kKStep;
      warp_mma_step<T, Cfg::kMT, Cfg::kNT, Cfg::kKStep, /*A_KMAJOR=*/true, /*B_KMAJOR=*/true,
                    Cfg::kMHalf, PRECISE>(acc, xs, Cfg::kLd, wm * Cfg::kWarpM, ds, Cfg::kLd, 0, k0,
                                          lane);
    }
    read_stage = read_stage + 1 == kStages ? 0 : read_stage + 1;
    write_stage = write_stage + 1 == kStages ? 0 : write_stage + 1;
  }

  cp_async_wait<0>();
  __syncthreads();
  float* const cs = reinterpret_cast<float*>(smem_raw);
  stage_acc<Cfg::kMT, Cfg::kNT, BS>(cs + wk * Cfg::kPartStride, Cfg::kLdC, wm * Cfg::kWarpM, 0, acc,
                                    lane);
  __syncthreads();
  if (p.row_splits > 1) {
    const int64_t nnz = gridDim.x;
    float* const partial = p.partials + ((g * p.row_splits + blockIdx.z) * nnz + i) * (BS * BS);
    store_tile<float, BS, BS, Cfg::kThreads, Cfg::kWarpsK>(cs, Cfg::kLdC, Cfg::kPartStride, partial,
                                                           BS, BS, tid);
  } else {
    store_tile<T, BS, BS, Cfg::kThreads, Cfg::kWarpsK>(cs, Cfg::kLdC, Cfg::kPartStride, out, BS, BS,
                                                       tid);
  }
}

}  // namespace jbs
