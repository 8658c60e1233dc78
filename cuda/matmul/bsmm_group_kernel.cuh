// Large-N forward / input-gradient kernel over column groups: CTA = (row tile
// of 128, group of P = 128 / BS consecutive output block columns, group g).
//
// Why groups: a CTA that owns a single block column loads a 128 x BS
// activation tile for every BS x BS weight block, which caps the tile at
// ~128 * BS / (128 + BS) FLOP per byte moved from L2 (26 at BS = 32) -- the
// L2 -> SM bandwidth, not the tensor cores, then sets the rate. A group CTA
// walks the union of its columns' input blocks (tables.py _groups): each
// activation tile is loaded once and multiplied with every column's block for
// that input, so at density d the tile feeds ~P*d blocks instead of one.
//
// Warps: 2 (rows) x 4 (32 output columns each), warp tile 64 x 32. A warp
// whose columns all lack a block for the current input skips its MMAs; absent
// blocks are zero-filled in shared memory for the warps that span several
// columns (BS = 16). Items are processed in table order by fixed warps, so the
// result is bitwise deterministic. Block sizes 16..64; fp32 up to 32 (the
// 64-wide fp32 stage would not fit twice in shared memory).
//
// GATHER: as bsmm_blocks_kernel, the activation is an image batch read as its
// im2col matrix (conv/gathered_tile.cuh).
#pragma once

#include <cstdint>

#include "common/dtype.cuh"
#include "common/ptx.cuh"
#include "common/smem.cuh"
#include "conv/gathered_tile.cuh"
#include "conv/row_gather.h"
#include "matmul/bsmm_blocks_kernel.cuh"  // BlocksConfig strides, cmin/cmax/cclamp
#include "matmul/tile_io.cuh"
#include "matmul/warp_mma.cuh"

namespace jbs {

struct GroupParams : FwdDxOperands {
  const int32_t* group_offsets;  // (num_groups + 1)
  const int32_t* group_items;    // (union items, 1 + P)
  const int32_t* group_columns;  // (num_groups * P): output block column of group q's column c is
                                 // [q * P + c], -1 for none (groups of columns that share inputs,
                                 // jbs/_src/tables.py shared_input_order); null: q * P + c
  int num_groups;                // blockIdx.x = row_tile * num_groups + group
  // > 0: `in` is the packed copy (matmul/packed_rows.cuh) with this many rows per
  // group, and in_group_stride is in its elements. 0: `in` is row-major.
  int64_t packed_rows;
  // Item slices (the wgmma group kernel at mid N, blockIdx.z): 1, or S > 1 where slice s of
  // a group walks the s-th of S equal shares of its items and writes an fp32 partial,
  // (G, S, rows, out_cols) at `partials`, which sum_splits_kernel adds in slice order.
  // GroupCta cuts the item range for every kernel that reads it, but only the wgmma kernel's
  // epilogue writes the partial: launch the others (the mma.sync and warp-specialized group
  // kernels, the conv kernels) with slices 1.
  int slices = 1;
  float* partials = nullptr;
};

// Which output block column each of a group's P columns writes: the group's entries of
// GroupParams::group_columns, or without a map the group's own columns in order, q * P + c;
// -1 where the group has no column c (a partial last group, or the map's padding).
struct GroupColumns {
  const int32_t* map;  // the group's P entries, or null
  int first;           // q * P
  int count;           // columns of the group in order (the last one may hold fewer than P)
  __device__ __forceinline__ int operator()(int c) const {
    return map != nullptr ? __ldg(map + c) : (c < count ? first + c : -1);
  }
};

// Where a group-kernel CTA works: blockIdx.x = row tile * num_groups + group,
// blockIdx.y = weight group g; the operand pointers are already offset to them.
template <typename T, int BS, int TN, bool GATHER>
struct GroupCta {
  static constexpr int kP = 128 / BS;
  int64_t n0;            // first row of the tile
  const T* in_group;     // the activation of group g (GATHER: the image batch)
  const T* in;           // ... at row n0 (unused with GATHER)
  const T* w;            // the weight blocks of group g
  T* out_row;            // the output at row n0, column 0
  GroupColumns columns;  // where the group's columns go
  int valid_rows;        // rows of the tile that exist
  int beg, end;          // the group's union items (its slice of them: GroupParams::slices)
  float* partial_row;    // slices > 1: the slice's fp32 partial at row n0, column 0; else null

  __device__ __forceinline__ explicit GroupCta(const GroupParams& p) {
    const int q = static_cast<int>(blockIdx.x % static_cast<unsigned>(p.num_groups));
    n0 = static_cast<int64_t>(blockIdx.x / static_cast<unsigned>(p.num_groups)) * TN;
    const int64_t g = blockIdx.y;
    in_group = static_cast<const T*>(p.in) + g * p.in_group_stride;
    in = in_group + (GATHER ? 0 : n0 * p.in_cols);
    w = static_cast<const T*>(p.w) + g * p.w_group_stride;
    const int first_col = q * kP;
    const int out_blocks = static_cast<int>(p.out_cols / BS);
    columns = GroupColumns{p.group_columns != nullptr ? p.group_columns + first_col : nullptr, first_col,
                           out_blocks - first_col < kP ? out_blocks - first_col : kP};
    out_row = static_cast<T*>(p.out) + g * p.out_group_stride + n0 * p.out_cols;
    valid_rows = static_cast<int>(p.rows - n0 < TN ? p.rows - n0 : TN);
    const int first = __ldg(p.group_offsets + q), items = __ldg(p.group_offsets + q + 1) - first;
    const int slice = p.slices > 1 ? static_cast<int>(blockIdx.z) : 0;
    beg = first + static_cast<int>(int64_t{items} * slice / p.slices);
    end = first + static_cast<int>(int64_t{items} * (slice + 1) / p.slices);
    partial_row = p.slices > 1 ? p.partials + ((g * p.slices + slice) * p.rows + n0) * p.out_cols : nullptr;
  }
};

template <typename T, int BS, bool TRANS>
struct GroupConfig {
  static_assert(BS >= 16 && (sizeof(T) == 2 || BS <= 32), "group kernel block sizes");
  static constexpr bool k16 = kIs16Bit<T>;
  static constexpr int kP = 128 / BS;  // block columns per group
  static constexpr int kTN = 128;
  static constexpr int kThreads = 256;
  static constexpr int kWarpsM = 2;
  static constexpr int kWarpM = 64;
  static constexpr int kWarpN = 32;
  static constexpr int kMT = kWarpM / 16;
  static constexpr int kNT = kWarpN / 8;
  static constexpr int kKStep = k16 ? 16 : 8;
  // Activation tile as in the single-column kernel.
  static constexpr int kLdX = BlocksConfig<T, BS, TRANS, 128>::kLdX;
  // Weight tile: fwd stores the P blocks side by side as a BS x 128 k-major
  // matrix (stride 136: 16 mod 128 bytes for ldmatrix, 8 mod 32 words for
  // fp32); dx stacks them as a 128 x BS n-major matrix (the blocks' rows are n).
  static constexpr int kLdW = TRANS ? BlocksConfig<T, BS, TRANS, 128>::kLdW : 128 + 8;
  static constexpr int kWElems = TRANS ? 128 * kLdW : BS * kLdW;
  static constexpr int kStageElems = kTN * kLdX + kWElems;
  static constexpr int kStageBytes = kStageElems * static_cast<int>(sizeof(T));
  static constexpr int kStages = cclamp(112 * 1024 / kStageBytes, 2, 4);
  static constexpr int kLdC = 128 + 8;
  static constexpr int kEpilogueBytes = kTN * kLdC * 4;
  static constexpr int kSmemBytes = cmax(kStages * kStageBytes, kEpilogueBytes);
  static_assert((kLdW * sizeof(T)) % 16 == 0 && kStageBytes % 16 == 0, "16B rows");
};

template <typename T, int BS, bool TRANS, bool PRECISE, bool GATHER>
__global__ void __launch_bounds__(256) bsmm_group_kernel(const GroupParams p) {
  using Cfg = GroupConfig<T, BS, TRANS>;
  constexpr int kP = Cfg::kP;
  constexpr int kStages = Cfg::kStages;
  constexpr int kTN = Cfg::kTN;
  unsigned char* const smem_raw = dynamic_smem();
  T* const smem = reinterpret_cast<T*>(smem_raw);

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const GroupCta<T, BS, kTN, GATHER> cta(p);
  const int32_t* const items = p.group_items;  // row j: [input block, block of column 0..P-1]

  GatheredTile<T, kTN, BS, Cfg::kThreads> gathered;
  if constexpr (GATHER) gathered.init(p.gather, cta.n0, p.rows, tid);

  auto load_stage = [&](int stage, int j) {
    T* xs = smem + stage * Cfg::kStageElems;
    T* ws = xs + kTN * Cfg::kLdX;
    const int32_t* row = items + static_cast<int64_t>(j) * (1 + kP);
    const int input_block = __ldg(row);
    if constexpr (GATHER) {
      gathered.load(xs, Cfg::kLdX, cta.in_group, p.in_cols, p.gather, input_block, tid);
    } else {
      load_tile_async<T, kTN, BS, Cfg::kThreads>(xs, Cfg::kLdX, cta.in + static_cast<int64_t>(input_block) * BS,
                                                 p.in_cols, cta.valid_rows, tid);
    }
    // The P weight blocks, 16-byte chunks spread over all threads. An absent block (-1) is
    // zero-filled (cp.async of 0 source bytes, from a valid address): warps that span it and a
    // present neighbour multiply zeros.
    constexpr int kVec = 16 / static_cast<int>(sizeof(T));
    constexpr int kChunksPerRow = BS / kVec;
    constexpr int kChunks = kP * BS * kChunksPerRow;
    // (The wgmma kernel's compile-time trip count was tried here: 130 registers instead of 128
    // gave one CTA per SM instead of two, fp32 bs 32 at 1/2 31% slower; session 6.)
#pragma unroll
    for (int idx = tid; idx < kChunks; idx += Cfg::kThreads) {
      const int c = idx / (BS * kChunksPerRow);
      const int r = (idx / kChunksPerRow) % BS;
      const int col = (idx % kChunksPerRow) * kVec;
      const int block = __ldg(row + 1 + c);
      const T* src = cta.w + static_cast<int64_t>(block < 0 ? 0 : block) * (BS * BS) + r * BS + col;
      T* dst = TRANS ? ws + (c * BS + r) * Cfg::kLdW + col : ws + r * Cfg::kLdW + c * BS + col;
      cp_async_16(dst, src, block < 0 ? 0 : 16);
    }
  };

  // Which group columns warp column wn covers (a bit per column), for skipping.
  const int wm = warp % Cfg::kWarpsM;
  const int wn = warp / Cfg::kWarpsM;
  const int first_warp_col = wn * Cfg::kWarpN / BS;
  const int warp_cols = Cfg::kWarpN >= BS ? Cfg::kWarpN / BS : 1;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (cta.beg + s < cta.end) load_stage(s, cta.beg + s);
    cp_async_commit();
  }

  float acc[Cfg::kMT][Cfg::kNT][4] = {};
  int read_stage = 0;
  int write_stage = kStages - 1;
  for (int j = cta.beg; j < cta.end; ++j) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    const int jn = j + kStages - 1;
    if (jn < cta.end) load_stage(write_stage, jn);
    cp_async_commit();

    const int32_t* row = items + static_cast<int64_t>(j) * (1 + kP);
    bool present = false;
    for (int c = 0; c < warp_cols; ++c) present |= __ldg(row + 1 + first_warp_col + c) >= 0;
    if (present) {  // warp-uniform
      const T* xs = smem + read_stage * Cfg::kStageElems;
      const T* ws = xs + kTN * Cfg::kLdX;
#pragma unroll
      for (int k0 = 0; k0 < BS; k0 += Cfg::kKStep) {
        warp_mma_step<T, Cfg::kMT, Cfg::kNT, Cfg::kKStep, /*A_KMAJOR=*/false, /*B_KMAJOR=*/!TRANS,
                      /*M_HALF=*/false, PRECISE>(acc, xs, Cfg::kLdX, wm * Cfg::kWarpM, ws, Cfg::kLdW,
                                                 wn * Cfg::kWarpN, k0, lane);
      }
    }
    read_stage = read_stage + 1 == kStages ? 0 : read_stage + 1;
    write_stage = write_stage + 1 == kStages ? 0 : write_stage + 1;
  }

  cp_async_wait<0>();
  __syncthreads();
  float* const cs = reinterpret_cast<float*>(smem_raw);
  stage_acc<Cfg::kMT, Cfg::kNT, kTN>(cs, Cfg::kLdC, wm * Cfg::kWarpM, wn * Cfg::kWarpN, acc, lane);
  __syncthreads();
  for (int c = 0; c < kP; ++c) {
    const int column = cta.columns(c);
    if (column < 0) continue;  // uniform
    store_tile<T, kTN, BS, Cfg::kThreads, 1>(cs + c * BS, Cfg::kLdC, 0, cta.out_row + column * BS, p.out_cols,
                                            cta.valid_rows, tid);
  }
}

}  // namespace jbs
