// Forward / input-gradient kernel of a stride-1 block-sparse convolution whose
// output has its input's image size, at bs 32, with the roles of the operands
// swapped: the product is y^T = W^T x^T, so the wgmma's M is 64 output channels
// (two blocks of the column group) and its N is up to 256 pixels.
//
// Why: the halo kernels (conv/bsconv_halo_kernel.cuh, conv/bsconv_halo_ss_kernel.cuh)
// put pixels on M and one 32-wide block on N: an m64 x 32 x 16 wgmma per block,
// tap and k-step, whose operand reads and issue cost as much as its math. Both
// measured ~272 us for a 3x3 conv at density 1/2 (40% of cuDNN's rate) with the
// L2 70% busy (benchmarks/NOTES.md, session 15). Here one m64 x 256 x 16 wgmma
// does 8x the work of one of those, its B operand (the activations) comes from
// shared memory at half the tensor core's rate, and the weights are the A
// operand: two raw 32 x 32 blocks per warpgroup, moved by one bulk copy each
// (no per-thread copy arithmetic) and loaded into registers by ldmatrix, so an
// absent block is zero registers and costs no memory. The cost: where only one
// of a warpgroup's two columns has a block, half its MMA multiplies zeros.
//
// The N side: a strip 8 pixels wide and R = 32 (or 16) rows tall, whose halo
// (conv/strip_halo.cuh) makes every tap a descriptor offset; a tile is 32 / R
// such strips (256 pixels).
//
// Work unit = (tile, group of 4 output block columns); warpgroup wg owns columns
// 2 wg and 2 wg + 1 for all 256 pixels (an m64 x 256 fp32 accumulator). Items
// are the group's union items (the conv's group tables, tap 0's, as the halo
// kernels); per item every tap's present blocks arrive by bulk copies and the
// halo by TMA boxes, all on the slot's mbarrier. The CTAs are persistent, one
// per SM, each taking a run of units of equal weight (balanced_unit_range), and
// load one item ahead across their units: a unit's first item loads during
// the previous unit's last one, and its epilogue (staged in that item's slot)
// overlaps the next unit's loads. With one CTA per unit, the first load and the
// epilogue of every CTA were exposed: ~55 us of a 3x3 conv's 262 at density 1/2
// (benchmarks/NOTES.md, session 15). Taps run in table order: deterministic.
#pragma once

#include <cstdint>

#include "common/dtype.cuh"
#include "common/mbarrier.cuh"
#include "common/ptx.cuh"
#include "common/smem.cuh"
#include "common/wgmma.cuh"
#include "conv/row_gather.h"
#include "conv/strip_halo.cuh"
#include "conv/tap_blocks.cuh"           // read_union_row, present_columns
#include "conv/unit_cursor.cuh"
#include "matmul/bsmm_group_kernel.cuh"  // GroupParams

namespace jbs {

struct ConvStripParams : GroupParams {
  CUtensorMap halo_map;  // the activations, in boxes of one strip's halo in one plane (conv/strip_halo.cuh)
  int nnz_per_tap;       // weight blocks of one tap: w holds taps x nnz_per_tap
  StripHaloShape halo;
  int64_t units;         // tiles x num_groups: the work items of the persistent CTAs
};

template <typename T, int R>
struct ConvStripConfig {
  static_assert(kIs16Bit<T> && (R == 16 || R == 32), "conv strip kernel: 16-bit types, strips of 16 or 32 rows");
  static constexpr int BS = 32;
  static constexpr int kP = 4;            // block columns per group: two per warpgroup
  static constexpr int kN = 8 * R;        // pixels per strip: one wgmma's N
  static constexpr int kStrips = 32 / R;  // per 256-pixel tile
  static constexpr int kThreads = 256;
  static constexpr int kStages = 2;
  static constexpr int kPlanes = BS / 8;
  static constexpr int kBlockElems = BS * BS;
  static constexpr int kTapElems = kP * kBlockElems;
  static constexpr int kLdS = kP * BS + 8;  // the epilogue's staged tile: 256 pixels x 128 channels of T
  static constexpr int kOptInBytes = 226 * 1024;
  static constexpr int64_t halo_elems(int plane_slots) { return static_cast<int64_t>(plane_slots) * 8 * kPlanes; }
  // A ring slot: the halo, then every tap's P blocks; it also holds the staged output tile.
  static constexpr int64_t slot_elems(int taps, int plane_slots) {
    const int64_t operands = halo_elems(plane_slots) + static_cast<int64_t>(taps) * kTapElems;
    return operands > 256 * kLdS ? operands : 256 * kLdS;
  }
  static constexpr int64_t smem_bytes(int taps, int plane_slots) {
    return kStages * slot_elems(taps, plane_slots) * static_cast<int64_t>(sizeof(T));
  }
};

// TAPS_PER_WAIT (3 or 2) divides the taps (see issue_taps).
template <typename T, int R, int TAPS_PER_WAIT, bool TRANS>
__global__ void __launch_bounds__(256, 1) bsconv_strip_kernel(const __grid_constant__ ConvStripParams p) {
  using Cfg = ConvStripConfig<T, R>;
  constexpr int BS = Cfg::BS;
  constexpr int kP = Cfg::kP;
  constexpr int kN = Cfg::kN;
  constexpr int kStrips = Cfg::kStrips;
  __shared__ uint64_t full[Cfg::kStages];  // a slot's halo boxes and weight blocks
  __shared__ int64_t unit_range[2];
  unsigned char* const smem_raw = dynamic_smem();
  T* const smem = reinterpret_cast<T*>(smem_raw);
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

  // This CTA's run of units (conv/unit_cursor.cuh: balanced_unit_range), its loader's
  // cursor and the strips of the cursor's tile.
  if (warp == 0) {
    int64_t first = 0, end = 0;
    balanced_unit_range(p, taps, p.units / p.num_groups, lane, &first, &end);
    if (lane == 0) unit_range[0] = first, unit_range[1] = end;
  }
  using Halo = StripHalo<T, R, kStrips, Cfg::kPlanes>;
  typename Halo::Pos load_pos[kStrips];
  auto on_unit = [&](int64_t tile) { Halo::strips_of(g, tile, load_pos); };
  // Issues the cursor's item into ring slot `stage` and returns its present columns, all by
  // warp 0 on the slot's barrier: the halo (one TMA box per strip and plane, zeros outside
  // the image, so a slot never keeps another tile's pixels), and every tap's present
  // blocks, raw (row-major, BS x BS) at tap t, column q: one bulk copy each.
  auto issue_load = [&](auto& cursor, int stage) {
    int row[1 + kP];
    cursor.row(row);
    T* const slot = smem + stage * slot_elems;
    const unsigned mask = present_columns<kP>(row);
    if (warp == 0) {
      if (lane == 0) {
        mbarrier_arrive_expect_tx(&full[stage],
                                  Halo::bytes(p.halo) + taps * __popc(mask) * Cfg::kBlockElems * sizeof(T));
      }
      __syncwarp();
      fence_proxy_async();  // earlier generic accesses of this slot (ordered by the CTA barrier) before the copies
      Halo::issue(p.halo, &p.halo_map, load_pos, row[0], static_cast<int>(blockIdx.y) * p.halo.group_step, lane, slot,
                  &full[stage]);
      for (int j = lane; j < taps * kP; j += 32) {
        const int t = j / kP, q = j - t * kP;
        int block = -1;
#pragma unroll
        for (int c = 0; c < kP; ++c) block = c == q ? row[1 + c] : block;
        if (block >= 0) {
          bulk_copy_g2s(slot + halo_elems + j * Cfg::kBlockElems,
                        w + static_cast<int64_t>(block + t * p.nnz_per_tap) * Cfg::kBlockElems,
                        Cfg::kBlockElems * sizeof(T), &full[stage]);
        }
      }
    }
    ++cursor.item;
    return mask;
  };

  if (tid == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) mbarrier_init(&full[s], 1);
    mbarrier_init_fence();
  }
  __syncthreads();  // barriers initialised, the unit run in place
  const int64_t first_unit = unit_range[0], end_unit = unit_range[1];
  UnitCursor<kP> cursor(p, taps, first_unit, end_unit);

  // Ring slot i & 1 holds the CTA's i-th item (counted over all its units);
  // slot_mask[s] its present columns.
  unsigned slot_mask[Cfg::kStages] = {0u, 0u};
  bool more = cursor.start(on_unit);
  if (more) slot_mask[0] = issue_load(cursor, 0);

  // B (the halo) K-major: the next 8 channels one plane further (LBO), the next
  // strip row (core matrix along n) one halo row further (SBO). Offsets in the
  // descriptor's 16-byte units (one slot); shared memory is under 256 KiB, so
  // adding to the descriptor never carries out of the address field.
  const uint64_t b_base = wgmma_desc(smem, static_cast<uint32_t>(p.halo.plane_slots) * 16, p.halo.row_slots * 16);
  const uint32_t slot_units = static_cast<uint32_t>(slot_elems / 8);
  // This warp's 16 rows of the warpgroup's m64: output channels (warp % 2) * 16..
  // of block column 2 wg + (warp % 4) / 2.
  const int my_column = 2 * wg + (warp & 3) / 2;
  const int m_in_block = (warp & 1) * 16;
  const int lr = lane & 7, li = lane >> 3;

  float acc[kStrips][kN / 8][4];
  int64_t seq = 0;  // items computed so far
  for (int64_t unit = first_unit; unit < end_unit; ++unit) {
#pragma unroll
    for (int s = 0; s < kStrips; ++s) {
#pragma unroll
      for (int nt = 0; nt < kN / 8; ++nt) acc[s][nt][0] = acc[s][nt][1] = acc[s][nt][2] = acc[s][nt][3] = 0.f;
    }
    const int64_t tile = unit / p.num_groups;
    const int q = cursor.group_of(unit);
    const int items = cursor.num_items(unit);
    for (int i = 0; i < items; ++i, ++seq) {
      const int stage = static_cast<int>(seq & 1);
      mbarrier_wait(&full[stage], static_cast<uint32_t>(seq >> 1) & 1u);
      __syncthreads();      // item seq has landed for all; everybody is done with item seq - 1's slot
      const unsigned mask = __shfl_sync(0xffffffffu, stage ? slot_mask[1] : slot_mask[0], 0);  // uniform, see wg
      const bool mine = (mask >> (2 * wg)) & 3u;  // this warpgroup has a block of the item
      const bool my_block = (mask >> my_column) & 1u;
      const T* const ws = smem + stage * slot_elems + halo_elems;
      const uint64_t b_item = b_base + stage * slot_units;

      // NTAPS = TAPS_PER_WAIT taps from t: their A fragments, then their wgmmas (the
      // caller waits). NTAPS divides the taps: a batch with a tap to skip (a branch
      // between wgmmas), or a second loop for the remainder, made ptxas serialize every
      // wgmma (C7520).
      int kh = 0, kw = 0;
      auto issue_taps = [&](int t) {
        constexpr int NTAPS = TAPS_PER_WAIT;
        uint32_t a[NTAPS][2][4];
        int tap_slots[NTAPS];
#pragma unroll
        for (int j = 0; j < NTAPS; ++j) {
          tap_slots[j] = p.halo.tap_slot(g.off_h + kh * g.step_h, g.off_w + kw * g.step_w);
          kw = kw + 1 == g.taps_w ? 0 : kw + 1;
          kh = kw == 0 ? kh + 1 : kh;
          const T* const blk = ws + ((t + j) * kP + my_column) * Cfg::kBlockElems;
#pragma unroll
          for (int ks = 0; ks < 2; ++ks) {
            if (!my_block) {
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
        for (int j = 0; j < NTAPS; ++j) {
#pragma unroll
          for (int ks = 0; ks < 2; ++ks) {
#pragma unroll
            for (int s = 0; s < kStrips; ++s) {
              const uint64_t b = b_item + s * band_slots + tap_slots[j] + ks * 2 * p.halo.plane_slots;
              wgmma_rs<T, kN, 0>(acc[s], a[j][ks], b);
            }
          }
        }
        wgmma_commit();
      };
      if (mine) issue_taps(0);
      // The next item's loads (maybe the next unit's first) into the other slot, while the
      // first taps' wgmmas run: its table row's latency hides behind them.
      more = more && cursor.settle(on_unit);
      if (more) {
        const unsigned next_mask = issue_load(cursor, stage ^ 1);
        if (stage) slot_mask[0] = next_mask; else slot_mask[1] = next_mask;
      }
      wgmma_wait<0>();
      if (mine) {
        for (int t = TAPS_PER_WAIT; t < taps; t += TAPS_PER_WAIT) {
          issue_taps(t);
          wgmma_wait<0>();
        }
      }
    }
    // (A unit without items loads nothing: the loader skipped it, and the next item is
    // already on its way, issued by the prologue or by the last item computed.)

    // The epilogue, in the slot of the unit's last item (free once all are past this
    // barrier; the next item loads into the other one): the tile as pixels x channels
    // of T, accumulator row m (channel 64 wg + m) and column n of strip s to row
    // s * kN + n, then 16-byte rows to y.
    __syncthreads();
    T* const cs = smem + ((seq + 1) & 1) * slot_elems;
    const int gq = lane >> 2, tq = lane & 3;
    const int m0 = 64 * wg + 16 * (warp & 3) + gq;
#pragma unroll
    for (int s = 0; s < kStrips; ++s) {
#pragma unroll
      for (int nt = 0; nt < kN / 8; ++nt) {
        const int n = s * kN + nt * 8 + 2 * tq;
        cs[n * Cfg::kLdS + m0] = from_float<T>(acc[s][nt][0]);
        cs[(n + 1) * Cfg::kLdS + m0] = from_float<T>(acc[s][nt][1]);
        cs[n * Cfg::kLdS + m0 + 8] = from_float<T>(acc[s][nt][2]);
        cs[(n + 1) * Cfg::kLdS + m0 + 8] = from_float<T>(acc[s][nt][3]);
      }
    }
    __syncthreads();
    const int out_blocks = static_cast<int>(p.out_cols / BS);
    const int num_cols = out_blocks - q * kP < kP ? out_blocks - q * kP : kP;
    T* const out_group = static_cast<T*>(p.out) + blockIdx.y * p.out_group_stride + static_cast<int64_t>(q) * kP * BS;
    constexpr int kVec = 8;
    typename Halo::Pos out_pos[kStrips];
    Halo::strips_of(g, tile, out_pos);
    const int chunks_per_pixel = num_cols * (BS / kVec);
    for (int idx = tid; idx < 256 * chunks_per_pixel; idx += Cfg::kThreads) {
      const int pixel = idx / chunks_per_pixel;
      const int c = (idx - pixel * chunks_per_pixel) * kVec;
      const int n = pixel % kN;
      const typename Halo::Pos pos = Halo::pick(out_pos, pixel / kN);
      if (pos.image >= images) continue;
      const int64_t row = (pos.image * height + pos.h0 + n / 8) * width + pos.x0 + n % 8;
      *reinterpret_cast<uint4*>(out_group + row * p.out_cols + c) =
          *reinterpret_cast<const uint4*>(cs + pixel * Cfg::kLdS + c);
    }
  }
}

}  // namespace jbs
