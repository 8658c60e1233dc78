// Small-N forward / input-gradient kernel over column groups with a split
// reduction: CTA = (group q of P = 128 / BS consecutive output block columns,
// slice s of that group's union items, weight group g).
//
// Why: the one-column stream kernel (bsmm_stream_kernel.cuh) loads an N x BS
// activation tile from L2 for every BS x BS weight block it streams, so the
// L2 -> SM traffic is W * (1 + N / BS): 2x the weight bytes at bs 32, 3x at
// bs 16, 5x at bs 8 (N = 32). A group CTA walks the union of its columns'
// input blocks (tables.py _groups, the large-N kernels' table) and loads each
// activation tile once for all of the group's blocks in that input row, which
// at density d is ~P * d of them. N alone gives too few CTAs (12288 / 128 = 96
// groups at the seed shape), so each group's union items are cut into S
// slices (stream_group_slices); each slice writes an fp32 partial of the
// N x 128 output tile to scratch, and the last slice of a group to arrive
// (int counter, zeroed by a kernel just before) sums the S partials in slice
// order: bitwise deterministic.
//
// Warps: 8, warp w owns output columns 16 w .. 16 w + 15 of the group for all
// TN rows, and skips an item when the block(s) under its columns are absent
// (absent blocks are zero-filled in shared memory, as in bsmm_group_kernel, for
// the bs 8 warps that span a present and an absent block).
#pragma once

#include <cstdint>

#include "common/dtype.cuh"
#include "common/ptx.cuh"
#include "common/smem.cuh"
#include "matmul/bsmm_blocks_kernel.cuh"  // BlocksConfig strides, cmin/cmax/cclamp
#include "matmul/bsmm_group_kernel.cuh"   // GroupParams
#include "matmul/tile_io.cuh"
#include "matmul/warp_mma.cuh"

namespace jbs {

struct StreamGroupParams : GroupParams {
  int slices;        // S: blockIdx.x = group * S + slice
  float* partials;   // (groups, num_groups, S, TN, 128) fp32, when S > 1
  int* counters;     // (groups, num_groups) arrivals, zeroed before the launch
};

// Slices per group: about 32 union items each (enough to fill a ring several
// times over), at most 16. jbs/_src/lowering.py sizes the partials by the same rule.
inline int stream_group_slices(int64_t num_group_items, int64_t num_groups) {
  const int64_t per_group = num_groups > 0 ? num_group_items / num_groups : 0;
  const int64_t s = per_group / 32;
  return static_cast<int>(s < 1 ? 1 : (s > 16 ? 16 : s));
}

// Scratch bytes: counters (padded to 4 ints), then the partials.
inline int64_t stream_group_scratch_bytes(int64_t groups, int64_t num_groups, int slices, int row_tile) {
  const int64_t counters = (groups * num_groups + 3) / 4 * 4;
  return 4 * (counters + (slices > 1 ? groups * num_groups * slices * row_tile * 128 : 0));
}

template <typename T, int BS, bool TRANS, int TN>
struct StreamGroupConfig {
  static constexpr bool k16 = kIs16Bit<T>;
  static constexpr int kP = 128 / BS;
  static constexpr int kThreads = 256;
  static constexpr int kWarpN = 16;
  static constexpr int kMT = TN / 16;
  static constexpr int kKStep = (k16 && BS >= 16) ? 16 : 8;
  // 16-bit bs 8 MMAs are k8 with one n8 tile per call (warp_mma_step); a warp's
  // 16 columns are then two blocks, multiplied (and skipped) one at a time.
  static constexpr bool kSplitN = k16 && BS == 8;
  static constexpr int kLdX = BlocksConfig<T, BS, TRANS, 32>::kLdX;
  // Weight tile as in GroupConfig: fwd, the P blocks side by side (BS x 128,
  // k-major); dx, stacked (128 x BS, n-major).
  static constexpr int kLdW = TRANS ? BlocksConfig<T, BS, TRANS, 32>::kLdW : 128 + 8;
  static constexpr int kWElems = TRANS ? 128 * kLdW : BS * kLdW;
  static constexpr int kStageElems = TN * kLdX + kWElems;
  static constexpr int kStageBytes = kStageElems * static_cast<int>(sizeof(T));
  // ~72 KiB of ring: three CTAs per SM, whose barrier-bound item loops then
  // overlap. (Two CTAs of ~100 KiB with up to 16 stages measured 1.2-1.4x slower:
  // the loop, one barrier per item, not the bytes in flight, sets the rate;
  // benchmarks/NOTES.md, session 8.)
  static constexpr int kStages = cclamp(72 * 1024 / kStageBytes, 2, 6);
  // After the ring: a present-column mask per stage, then two table rows (ints).
  static constexpr int kMaskOffset = kStages * kStageBytes;
  static constexpr int kRowsOffset = kMaskOffset + kStages * 4;
  static constexpr int kLdC = 128 + 8;
  static constexpr int kEpilogueBytes = TN * kLdC * 4;
  static constexpr int kSmemBytes = cmax(kRowsOffset + 2 * (1 + kP) * 4, kEpilogueBytes);
  static_assert((kLdW * sizeof(T)) % 16 == 0 && kStageBytes % 16 == 0, "16B rows");
};

template <typename T, int BS, bool TRANS, int TN, bool PRECISE>
__global__ void __launch_bounds__(256) bsmm_stream_group_kernel(const StreamGroupParams p) {
  using Cfg = StreamGroupConfig<T, BS, TRANS, TN>;
  constexpr int kP = Cfg::kP;
  constexpr int kStages = Cfg::kStages;
  unsigned char* const smem_raw = dynamic_smem();
  __shared__ int s_last;
  T* const smem = reinterpret_cast<T*>(smem_raw);

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int q = static_cast<int>(blockIdx.x / static_cast<unsigned>(p.slices));
  const int s = static_cast<int>(blockIdx.x % static_cast<unsigned>(p.slices));
  const int64_t g = blockIdx.y;
  const T* const in = static_cast<const T*>(p.in) + g * p.in_group_stride;
  const T* const w = static_cast<const T*>(p.w) + g * p.w_group_stride;
  const int first_col = q * kP;
  const int out_blocks = static_cast<int>(p.out_cols / BS);
  const int num_cols = out_blocks - first_col < kP ? out_blocks - first_col : kP;
  T* const out = static_cast<T*>(p.out) + g * p.out_group_stride + static_cast<int64_t>(first_col) * BS;
  const int valid_rows = static_cast<int>(p.rows);  // 1..TN
  const int group_beg = __ldg(p.group_offsets + q);
  const int64_t group_len = __ldg(p.group_offsets + q + 1) - group_beg;
  const int beg = group_beg + static_cast<int>(group_len * s / p.slices);
  const int end = group_beg + static_cast<int>(group_len * (s + 1) / p.slices);
  const int32_t* const items = p.group_items;  // row j: [input block, block of column 0..P-1]

  // Table rows reach the loads through shared memory, as in the wgmma group kernel:
  // thread t < 1 + P reads int t of the row of item j + S (__ldg) at iteration j
  // and publishes it at iteration j + 1 into a double buffer that the loads read
  // after the next barrier, so no table latency sits between a barrier and the
  // MMAs (read in place, it made every item ~1 us long; benchmarks/NOTES.md,
  // session 8). Each stage's present-column mask goes to shared memory with it.
  constexpr int kRowInts = 1 + kP;
  int* const masks = reinterpret_cast<int*>(smem_raw + Cfg::kMaskOffset);    // [stage]
  int* const row_buf = reinterpret_cast<int*>(smem_raw + Cfg::kRowsOffset);  // [2][1 + P]
  int prefetched = -1;
  auto prefetch_row = [&](int j) {
    if (tid < kRowInts) prefetched = j < end ? __ldg(items + static_cast<int64_t>(j) * kRowInts + tid) : -1;
  };
  auto publish_row = [&](int buf) {
    if (tid < kRowInts) row_buf[buf * kRowInts + tid] = prefetched;
  };

  auto load_stage = [&](int stage, const int* row) {
    T* xs = smem + stage * Cfg::kStageElems;
    T* ws = xs + TN * Cfg::kLdX;
    load_tile_async<T, TN, BS, Cfg::kThreads>(xs, Cfg::kLdX, in + static_cast<int64_t>(row[0]) * BS, p.in_cols,
                                              valid_rows, tid);
    constexpr int kVec = 16 / static_cast<int>(sizeof(T));
    constexpr int kChunksPerRow = BS / kVec;
    constexpr int kChunks = kP * BS * kChunksPerRow;
#pragma unroll
    for (int idx = tid; idx < kChunks; idx += Cfg::kThreads) {
      const int c = idx / (BS * kChunksPerRow);
      const int r = (idx / kChunksPerRow) % BS;
      const int col = (idx % kChunksPerRow) * kVec;
      const int block = row[1 + c];
      const T* src = w + static_cast<int64_t>(block < 0 ? 0 : block) * (BS * BS) + r * BS + col;
      T* dst = TRANS ? ws + (c * BS + r) * Cfg::kLdW + col : ws + r * Cfg::kLdW + c * BS + col;
      cp_async_16(dst, src, block < 0 ? 0 : 16);
    }
    if (tid == 0) {
      int mask = 0;
#pragma unroll
      for (int c = 0; c < kP; ++c) mask |= (row[1 + c] >= 0 ? 1 : 0) << c;
      masks[stage] = mask;
    }
  };

#pragma unroll 1
  for (int st = 0; st < kStages - 1; ++st) {
    if (beg + st < end) {
      prefetch_row(beg + st);
      publish_row(0);
      __syncthreads();
      load_stage(st, row_buf);
      __syncthreads();  // row_buf is rewritten next
    }
    cp_async_commit();
  }
  prefetch_row(beg + kStages - 1);
  publish_row(0);  // read at the first iteration, after its barrier
  prefetch_row(beg + kStages);

  // The block(s) under this warp's 16 columns.
  const int n0 = warp * Cfg::kWarpN;
  const int first_block = n0 / BS;
  float acc[Cfg::kMT][2][4] = {};
  float acc_h[2][Cfg::kMT][1][4] = {};  // kSplitN: one n8 tile per block
  float total[Cfg::kMT][2][4] = {};     // PRECISE: the sum of the items' products
  int read_stage = 0;
  int write_stage = kStages - 1;
  for (int j = beg; j < end; ++j) {
    const int it = j - beg;
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage j has landed for all; its mask and row_buf[it & 1] are written
    if (j + kStages - 1 < end) load_stage(write_stage, row_buf + (it & 1) * kRowInts);
    publish_row((it + 1) & 1);  // last read at iteration it - 1, before this barrier
    prefetch_row(j + kStages + 1);
    cp_async_commit();

    const unsigned present = static_cast<unsigned>(masks[read_stage]);  // CTA-uniform
    const T* xs = smem + read_stage * Cfg::kStageElems;
    const T* ws = xs + TN * Cfg::kLdX;
    if constexpr (Cfg::kSplitN) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (present & (1u << (first_block + h))) {
          warp_mma_step<T, Cfg::kMT, 1, 8, false, !TRANS, false, PRECISE>(acc_h[h], xs, Cfg::kLdX, 0, ws,
                                                                         Cfg::kLdW, n0 + 8 * h, 0, lane);
        }
      }
    } else {
      // (fp32 at bs 8: one k8 step over both blocks under the warp's columns)
      if (present & ((BS == 8 ? 3u : 1u) << first_block)) {
#pragma unroll
        for (int k0 = 0; k0 < BS; k0 += Cfg::kKStep) {
          warp_mma_step<T, Cfg::kMT, 2, Cfg::kKStep, false, !TRANS, false, PRECISE>(acc, xs, Cfg::kLdX, 0, ws,
                                                                                    Cfg::kLdW, n0, k0, lane);
        }
      }
    }
    if constexpr (PRECISE) {
      // 3xTF32 with a slice's whole run of MMAs in one accumulator (3 per k-step) measured
      // 2.03e-5 relative error on 4480-long sums (session 8; the tests' fp32 bound is 2e-5,
      // which the one-column kernel, whose warps split the sums 4-8 ways, meets). Adding
      // each item's products into a plain fp32 sum keeps the MMA runs short and passed.
#pragma unroll
      for (int mt = 0; mt < Cfg::kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            total[mt][nt][e] += acc[mt][nt][e];
            acc[mt][nt][e] = 0.f;
          }
    }
    read_stage = read_stage + 1 == kStages ? 0 : read_stage + 1;
    write_stage = write_stage + 1 == kStages ? 0 : write_stage + 1;
  }
  cp_async_wait<0>();
  __syncthreads();

  if constexpr (Cfg::kSplitN) {
#pragma unroll
    for (int mt = 0; mt < Cfg::kMT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mt][h][e] = acc_h[h][mt][0][e];
  }
  float* const cs = reinterpret_cast<float*>(smem_raw);
  stage_acc<Cfg::kMT, 2, TN>(cs, Cfg::kLdC, 0, n0, PRECISE ? total : acc, lane);
  __syncthreads();
  if (p.slices == 1) {
    for (int c = 0; c < num_cols; ++c) {  // the last group may hold fewer than P columns
      store_tile<T, TN, BS, Cfg::kThreads, 1>(cs + c * BS, Cfg::kLdC, 0, out + c * BS, p.out_cols, valid_rows,
                                              tid);
    }
    return;
  }

  // Publish this slice's partial (valid rows only), count arrivals; the last
  // arrival sums the group's S partials in slice order.
  const int64_t tile = g * p.num_groups + q;
  float* const parts = p.partials + tile * p.slices * (TN * 128);
  constexpr int kQuads = 128 / 4;
  for (int idx = tid; idx < valid_rows * kQuads; idx += Cfg::kThreads) {
    const int r = idx / kQuads;
    const int c = (idx % kQuads) * 4;
    __stcg(reinterpret_cast<float4*>(parts + static_cast<int64_t>(s) * (TN * 128) + r * 128 + c),
           *reinterpret_cast<const float4*>(cs + r * Cfg::kLdC + c));
  }
  __threadfence();
  __syncthreads();
  if (tid == 0) s_last = atomicAdd(p.counters + tile, 1) == p.slices - 1;
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  for (int idx = tid; idx < valid_rows * kQuads; idx += Cfg::kThreads) {
    const int r = idx / kQuads;
    const int c = (idx % kQuads) * 4;
    float4 sum = __ldcg(reinterpret_cast<const float4*>(parts + r * 128 + c));
    for (int k = 1; k < p.slices; ++k) {
      const float4 f = __ldcg(reinterpret_cast<const float4*>(parts + static_cast<int64_t>(k) * (TN * 128) + r * 128 + c));
      sum.x += f.x;
      sum.y += f.y;
      sum.z += f.z;
      sum.w += f.w;
    }
    *reinterpret_cast<float4*>(cs + r * Cfg::kLdC + c) = sum;
  }
  __syncthreads();
  for (int c = 0; c < num_cols; ++c) {
    store_tile<T, TN, BS, Cfg::kThreads, 1>(cs + c * BS, Cfg::kLdC, 0, out + c * BS, p.out_cols, valid_rows, tid);
  }
}

}  // namespace jbs
