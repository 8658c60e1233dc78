// Forward / input-gradient kernel of a stride-1 block-sparse convolution at bs 32
// on images 16 or 32 rows tall, whose output has its input's size: y^T = W^T x^T
// with one output block column per warpgroup, and two filter taps on the
// wgmma's M instead of two block columns.
//
// Why: the strip kernel (conv/bsconv_strip_kernel.cuh) puts two block columns on
// an m64, so wherever only one of them has a block, half its MMA work is zeros:
// 1.35x the useful work at density 1/2 and ~1.7-1.9x at 1/4 to 1/8 for a 3x3,
// measured as the bound of its time (benchmarks/NOTES.md, sessions 15-17). Here
// an m64 holds one block's weights for two taps U and V of one filter column
// (the same ow, oh two rows apart by `v_rows`), multiplied by the activations at
// U's shift. Rows 0-31 of the accumulator (U) are then that column's output at
// the strip's pixels; rows 32-63 (V) are V's contribution to the output v_rows
// image rows above (v_rows > 0) or below, which the epilogue adds in. That is
// exact only because a strip spans its image's full height: V's rows that would
// fall outside the strip are the ones whose activations lie in the zero padding
// (the dispatch pairs U with V only where U's oh has the sign of v_rows, see
// tap_pair_schedule). A 2x3 or 2x2 filter (PixelCNN++'s shifted convs) pairs all
// its taps and multiplies no zeros at all; a 3x3 runs 6 m64s for 9 taps (1.33x).
//
// Work unit = (tile pair, output block column), CTAs taking runs of units of
// equal weight (balanced_unit_range): warpgroup wg owns tile 2 u + wg,
// 256 pixels in strips 8 wide and R tall (conv/strip_halo.cuh), for the column's
// blocks only (the conv's one-column tables, tap 0's items). So the two
// warpgroups always have the same blocks: no idle warpgroup, no union items.
// Per item every tap's block arrives by one bulk copy each and each strip's
// halo plane by one TMA box (zero-filled outside the image), all on the slot's
// mbarrier: with 16-byte cp.async copies of the halo (the strip kernel's), they
// were 39% of the kernel's instructions. The CTAs are persistent, one per SM,
// and load two items ahead across their units.
// Steps run in table order, the epilogue adds in a fixed order: deterministic.
#pragma once

#include <cstdint>

#include "common/dtype.cuh"
#include "common/mbarrier.cuh"
#include "common/ptx.cuh"
#include "common/smem.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"
#include "conv/row_gather.h"
#include "conv/strip_halo.cuh"
#include "conv/unit_cursor.cuh"
#include "matmul/bsmm_group_kernel.cuh"  // GroupParams

namespace jbs {

constexpr int kTapPairMaxSteps = 16;

// group_offsets / group_items are the conv's one-column tables (rows [block, channel
// block], tap-major), num_groups the output block columns.
struct ConvTapPairParams : GroupParams {
  CUtensorMap halo_map;  // the activations (channels, width, height, images, groups) in boxes of one
                         // strip's halo in one channel plane (8 x row_slots x band_rows x 1 x 1)
  int halo_group_step;   // group coordinate of weight group blockIdx.y: 1, or 0 where it is broadcast
  int nnz_per_tap;      // weight blocks of one tap: w holds taps x nnz_per_tap
  StripHaloShape halo;  // of the CTA's two tiles
  int64_t units;        // tile pairs x output block columns
  int steps;            // m64 products per k-step: pairs + unpaired taps
  int v_rows;           // V's output is v_rows image rows above its U's (negative: below)
  int step_b[kTapPairMaxSteps];  // halo slot (in a plane) of the strip's first pixel at U's shift
  int step_u[kTapPairMaxSteps];  // U's tap
  int step_v[kTapPairMaxSteps];  // V's tap, -1 for none (its rows multiply zeros)
};

template <typename T, int R>
struct ConvTapPairConfig {
  static_assert(kIs16Bit<T> && (R == 16 || R == 32), "conv tap pair kernel: 16-bit types, images of 16 or 32 rows");
  static constexpr int BS = 32;
  static constexpr int kN = 8 * R;           // pixels per strip: one wgmma's N
  static constexpr int kWgStrips = 32 / R;   // a warpgroup's 256-pixel tile
  static constexpr int kStrips = 2 * kWgStrips;
  static constexpr int kThreads = 256;
  static constexpr int kStages = 3;  // loads two items ahead: an item's halo is two tiles
  static constexpr int kPlanes = BS / 8;
  static constexpr int kBlockElems = BS * BS;
  static constexpr int kLdF = BS + 4;        // the epilogue's fp32 rows: conflict-free stores
  static constexpr int kOptInBytes = 226 * 1024;
  static constexpr int64_t halo_elems(int plane_slots) { return static_cast<int64_t>(plane_slots) * 8 * kPlanes; }
  // A ring slot: the halo, then every tap's block; it also holds the fp32 output of both tiles.
  static constexpr int64_t slot_elems(int taps, int plane_slots) {
    const int64_t operands = halo_elems(plane_slots) + static_cast<int64_t>(taps) * kBlockElems;
    const int64_t staged = 2 * 256 * kLdF * 4 / static_cast<int64_t>(sizeof(T));
    const int64_t elems = operands > staged ? operands : staged;
    return (elems + 63) / 64 * 64;  // 128-byte aligned slots
  }
  static constexpr int64_t smem_bytes(int taps, int plane_slots) {
    return kStages * slot_elems(taps, plane_slots) * static_cast<int64_t>(sizeof(T));
  }
};

// The CTA's units [*first, *end) of the walk over (tile pair, column), in that order,
// cut so that every CTA gets the same share of the weight, a unit weighing its
// column's items + 1 (its epilogue). Units dealt out round-robin left the CTA with
// the most items ~1.7x the mean at density 1/8 (ten units of Binomial(10, 1/8)
// items each), and the kernel waits for it. Run by one warp.
__device__ __forceinline__ void balanced_unit_range(const GroupParams& p, int taps, int64_t tile_pairs, int lane,
                                                    int64_t* first, int64_t* end) {
  const int columns = p.num_groups;
  auto weight = [&](int col) {
    return col < columns ? (__ldg(p.group_offsets + col + 1) - __ldg(p.group_offsets + col)) / taps + 1 : 0;
  };
  int per_pair = 0;  // the weight of one tile pair's units
  for (int c0 = 0; c0 < columns; c0 += 32) per_pair += __reduce_add_sync(0xffffffffu, weight(c0 + lane));
  const int64_t total = tile_pairs * per_pair;
  for (int e = 0; e < 2; ++e) {
    // The first unit whose weight prefix reaches ceil((blockIdx.x + e) * total / gridDim.x).
    const int64_t target = ((blockIdx.x + e) * total + gridDim.x - 1) / gridDim.x;
    const int64_t pair = target / per_pair;
    const int rest = static_cast<int>(target - pair * per_pair);
    int col = columns, run = 0;
    for (int c0 = 0; c0 < columns && col == columns; c0 += 32) {
      const int w = weight(c0 + lane);
      int incl = w;  // inclusive prefix over the lanes
#pragma unroll
      for (int d = 1; d < 32; d *= 2) {
        const int up = __shfl_up_sync(0xffffffffu, incl, d);
        incl += lane >= d ? up : 0;
      }
      const unsigned reached = __ballot_sync(0xffffffffu, c0 + lane < columns && run + incl - w >= rest);
      if (reached != 0u) col = c0 + __ffs(reached) - 1;
      run += __shfl_sync(0xffffffffu, incl, 31);
    }
    const int64_t unit = pair * columns + col;
    (e == 0 ? *first : *end) = unit < tile_pairs * columns ? unit : tile_pairs * columns;
  }
}

// STEPS_PER_WAIT (3, 2 or 1) divides the steps: a batch ending early (a branch between
// wgmmas) made ptxas serialize every wgmma in the strip kernel (C7520).
template <typename T, int R, int STEPS_PER_WAIT, bool TRANS>
__global__ void __launch_bounds__(256, 1) bsconv_tap_pair_kernel(const __grid_constant__ ConvTapPairParams p) {
  using Cfg = ConvTapPairConfig<T, R>;
  constexpr int BS = Cfg::BS;
  constexpr int kN = Cfg::kN;
  constexpr int kWgStrips = Cfg::kWgStrips;
  __shared__ uint64_t full[Cfg::kStages];  // the weights' bulk copies of a slot
  __shared__ int step_b[kTapPairMaxSteps], step_u[kTapPairMaxSteps], step_v[kTapPairMaxSteps];
  __shared__ int64_t unit_range[2];
  T* const smem = reinterpret_cast<T*>(dynamic_smem());
  const RowGather& g = p.gather;
  const int taps = g.taps_h * g.taps_w;
  const int width = g.rows_w, height = g.rows_h;
  const int band_slots = p.halo.band_slots;
  const int64_t halo_elems = Cfg::halo_elems(p.halo.plane_slots);
  const int64_t slot_elems = Cfg::slot_elems(taps, p.halo.plane_slots);
  const int64_t images = p.rows / (static_cast<int64_t>(height) * width);
  const T* const w = static_cast<const T*>(p.w) + blockIdx.y * p.w_group_stride;

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0);  // warp-uniform for the compiler

  using Halo = StripHalo<T, R, Cfg::kStrips, Cfg::kPlanes, Cfg::kThreads, 1>;  // (its strip positions only)
  if (warp == 0) {
    int64_t first = 0, end = 0;
    balanced_unit_range(p, taps, p.units / p.num_groups, lane, &first, &end);
    if (lane == 0) unit_range[0] = first, unit_range[1] = end;
  }
  __syncthreads();
  const int64_t first_unit = unit_range[0], end_unit = unit_range[1];
  UnitCursor<1, false> cursor(p, taps, first_unit, end_unit);
  typename Halo::Pos load_pos[Cfg::kStrips];
  auto on_unit = [&](int64_t tile_pair) { Halo::strips_of(g, tile_pair, load_pos); };
  const int halo_box_bytes = p.halo.band_rows * p.halo.row_slots * 16;
  const int item_bytes = Cfg::kStrips * Cfg::kPlanes * halo_box_bytes + taps * Cfg::kBlockElems * sizeof(T);
  // Issues the cursor's item into ring slot `stage`, all by warp 0: lane s * 4 + j loads
  // plane j of strip s's halo (one TMA box, zeros outside the image and past the batch),
  // lane t tap t's block (raw, row-major BS x BS: one bulk copy).
  auto issue_load = [&](int stage) {
    if (warp == 0) {
      int row[2];  // [tap 0's block, channel block]
      cursor.row(row);
      T* const slot = smem + stage * slot_elems;
      if (lane == 0) mbarrier_arrive_expect_tx(&full[stage], item_bytes);
      __syncwarp();
      fence_proxy_async();  // earlier generic accesses of this slot (ordered by the CTA barrier) before the copies
      if (lane < Cfg::kStrips * Cfg::kPlanes) {
        const int strip = lane / Cfg::kPlanes, plane = lane % Cfg::kPlanes;
        const typename Halo::Pos at = Halo::pick(load_pos, strip);
        tma_load_5d(slot + (plane * p.halo.plane_slots + strip * band_slots) * 8, &p.halo_map,
                    row[1] * BS + plane * 8, at.x0 - p.halo.left, at.h0 - p.halo.top, static_cast<int>(at.image),
                    static_cast<int>(blockIdx.y) * p.halo_group_step, &full[stage]);
      }
      if (lane < taps) {
        bulk_copy_g2s(slot + halo_elems + lane * Cfg::kBlockElems,
                      w + static_cast<int64_t>(row[0] + lane * p.nnz_per_tap) * Cfg::kBlockElems,
                      Cfg::kBlockElems * sizeof(T), &full[stage]);
      }
    }
    ++cursor.item;
  };

#pragma unroll
  for (int i = 0; i < kTapPairMaxSteps; ++i) {  // constant indices: no local copy of the params
    if (tid == i) step_b[i] = p.step_b[i], step_u[i] = p.step_u[i], step_v[i] = p.step_v[i];
  }
  if (tid == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) mbarrier_init(&full[s], 1);
    mbarrier_init_fence();
  }
  __syncthreads();  // barriers and the schedule in place

  // Ring slot i % 3 holds the CTA's i-th item (counted over all its units); the loader
  // runs two items ahead.
  bool more = cursor.start(on_unit);
  if (more) issue_load(0);
  more = more && cursor.settle(on_unit);
  if (more) issue_load(1);

  // B (the halo) K-major: the next 8 channels one plane further (LBO), the next strip row
  // one halo row further (SBO); offsets in 16-byte units (one slot). This warpgroup's
  // strips follow the other's in the halo.
  const uint64_t b_base = wgmma_desc(smem, static_cast<uint32_t>(p.halo.plane_slots) * 16, p.halo.row_slots * 16) +
                          static_cast<uint64_t>(wg * kWgStrips * band_slots);
  const uint32_t slot_units = static_cast<uint32_t>(slot_elems / 8);
  // This warp's 16 rows of the warpgroup's m64: output channels (warp % 2) * 16.. of U's
  // (warps 0-1) or V's (warps 2-3) tap.
  const int half = (warp & 3) >> 1;
  const int m_in_block = (warp & 1) * 16;
  const int lr = lane & 7, li = lane >> 3;

  float acc[kWgStrips][kN / 8][4];
  int stage = 0;           // the next item's ring slot (items computed so far, mod 3) ...
  uint32_t phase = 0u;     // ... and the parity of its barrier's phase
  for (int64_t unit = first_unit; unit < end_unit; ++unit) {
#pragma unroll
    for (int s = 0; s < kWgStrips; ++s) {
#pragma unroll
      for (int nt = 0; nt < kN / 8; ++nt) acc[s][nt][0] = acc[s][nt][1] = acc[s][nt][2] = acc[s][nt][3] = 0.f;
    }
    const int64_t tile_pair = unit / p.num_groups;
    const int column = cursor.group_of(unit);
    const int items = cursor.num_items(unit);
    for (int i = 0; i < items; ++i) {
      mbarrier_wait(&full[stage], phase);
      __syncthreads();      // the item has landed for all; everybody is done with the previous item's slot
      const T* const ws = smem + stage * slot_elems + halo_elems;
      const uint64_t b_item = b_base + stage * slot_units;

      // STEPS_PER_WAIT steps from s0: their A fragments, then their wgmmas (the caller waits).
      auto issue_steps = [&](int s0) {
        constexpr int NSTEPS = STEPS_PER_WAIT;
        uint32_t a[NSTEPS][2][4];
        int b_slot[NSTEPS];
#pragma unroll
        for (int j = 0; j < NSTEPS; ++j) {
          b_slot[j] = step_b[s0 + j];
          const int tap = half ? step_v[s0 + j] : step_u[s0 + j];
          const T* const blk = ws + (tap < 0 ? 0 : tap) * Cfg::kBlockElems;
#pragma unroll
          for (int ks = 0; ks < 2; ++ks) {
            if (tap < 0) {
              a[j][ks][0] = a[j][ks][1] = a[j][ks][2] = a[j][ks][3] = 0u;
            } else if constexpr (!TRANS) {
              // fwd: A(m = output channel, k = input channel) = W[k][m]: stored rows are k.
              ldsm_x4_t(a[j][ks], blk + (ks * 16 + (li >> 1) * 8 + lr) * BS + m_in_block + (li & 1) * 8);
            } else {
              // dx: A(m = input channel, k = output channel) = W[m][k]: stored rows are m.
              ldsm_x4(a[j][ks], blk + (m_in_block + (li & 1) * 8 + lr) * BS + ks * 16 + (li >> 1) * 8);
            }
          }
        }
        wgmma_fence();
#pragma unroll
        for (int j = 0; j < NSTEPS; ++j) {
#pragma unroll
          for (int ks = 0; ks < 2; ++ks) {
#pragma unroll
            for (int s = 0; s < kWgStrips; ++s) {
              const uint64_t b = b_item + s * band_slots + b_slot[j] + ks * 2 * p.halo.plane_slots;
              wgmma_rs<T, kN, 0>(acc[s], a[j][ks], b);
            }
          }
        }
        wgmma_commit();
      };
      issue_steps(0);
      // The loads two items on (maybe a later unit's) into the previous item's slot, while the first
      // steps' wgmmas run.
      more = more && cursor.settle(on_unit);
      if (more) issue_load(stage == 0 ? 2 : stage - 1);
      wgmma_wait<0>();
      for (int s0 = STEPS_PER_WAIT; s0 < p.steps; s0 += STEPS_PER_WAIT) {
        issue_steps(s0);
        wgmma_wait<0>();
      }
      stage = stage + 1 == Cfg::kStages ? 0 : stage + 1;
      phase ^= stage == 0 ? 1u : 0u;
    }

    // The epilogue, in the slot of the unit's last item (free once all are past this
    // barrier; the next two items load into the others), as fp32 pixels x channels per
    // warpgroup: U's rows at their pixels, then V's rows added v_rows image rows up (or
    // down) within their strip, then 16-byte rows of T to y.
    __syncthreads();
    float* const cs = reinterpret_cast<float*>(smem + (stage == 0 ? 2 : stage - 1) * slot_elems) + wg * 256 * Cfg::kLdF;
    const int gq = lane >> 2, tq = lane & 3;
    const int m = m_in_block + gq;
    auto stage_rows = [&](int s, int nt, int row, bool add) {  // strip s, accumulator rows of image row `row`
      const int n = s * kN + row * 8 + 2 * tq;
      float* const at = cs + n * Cfg::kLdF + m;
      if (add) {
        at[0] += acc[s][nt][0], at[Cfg::kLdF] += acc[s][nt][1];
        at[8] += acc[s][nt][2], at[Cfg::kLdF + 8] += acc[s][nt][3];
      } else {
        at[0] = acc[s][nt][0], at[Cfg::kLdF] = acc[s][nt][1];
        at[8] = acc[s][nt][2], at[Cfg::kLdF + 8] = acc[s][nt][3];
      }
    };
    if (half == 0) {
#pragma unroll
      for (int s = 0; s < kWgStrips; ++s) {
#pragma unroll
        for (int nt = 0; nt < kN / 8; ++nt) stage_rows(s, nt, nt, false);
      }
    }
    named_barrier_sync(1 + wg, 128);
    if (half == 1) {
#pragma unroll
      for (int s = 0; s < kWgStrips; ++s) {
#pragma unroll
        for (int nt = 0; nt < kN / 8; ++nt) {
          const int row = nt - p.v_rows;
          if (row >= 0 && row < R) stage_rows(s, nt, row, true);
        }
      }
    }
    named_barrier_sync(1 + wg, 128);
    // Thread i of the warpgroup writes channels 8 (i % 4).. of pixels i / 4 + 32 k, k < 8:
    // pixel n of a strip is image row n / 8, column n % 8. All loads, then all stores.
    T* const out_column = static_cast<T*>(p.out) + blockIdx.y * p.out_group_stride + static_cast<int64_t>(column) * BS;
    typename Halo::Pos out_pos[Cfg::kStrips];
    Halo::strips_of(g, tile_pair, out_pos);
    constexpr int kVec = 8, kPasses = 256 * (BS / kVec) / 128;
    const int first_pixel = (tid & 127) / (BS / kVec), c = (tid & 3) * kVec;
    uint4 packed[kPasses];
#pragma unroll
    for (int k = 0; k < kPasses; ++k) {
      const float* const from = cs + (first_pixel + 32 * k) * Cfg::kLdF + c;
      const float4 lo = *reinterpret_cast<const float4*>(from), hi = *reinterpret_cast<const float4*>(from + 4);
      packed[k] = pack8<T>(lo, hi);
    }
#pragma unroll
    for (int k = 0; k < kPasses; ++k) {
      const int pixel = first_pixel + 32 * k;  // (32 pixels = 4 image rows: a pass stays in one strip)
      const typename Halo::Pos pos = Halo::pick(out_pos, wg * kWgStrips + pixel / kN);
      const int n = pixel % kN;
      if (pos.image >= images) continue;
      const int64_t row = (pos.image * height + pos.h0 + n / 8) * width + pos.x0 + n % 8;
      *reinterpret_cast<uint4*>(out_column + row * p.out_cols + c) = packed[k];
    }
  }
}

}  // namespace jbs
