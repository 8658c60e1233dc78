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
// (no per-thread copy arithmetic) and loaded into registers by ldmatrix; an
// absent block is not copied (its A comes from one zero block). The cost: where only one
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
// per SM, each taking a run of units of equal weight (balanced_unit_range).
// With one CTA per unit, the first load and the epilogue of every CTA were
// exposed: ~55 us of a 3x3 conv's 262 at density 1/2 (benchmarks/NOTES.md,
// session 15). Taps run in table order: deterministic.
//
// Warp specialized: a loader warp walks the CTA's items into a ring of 2 slots,
// each as soon as the two consumer warpgroups have released the slot's previous
// item (an `empty` mbarrier), across unit boundaries; a unit's epilogue is staged
// in its last item's slot and releases it after. Before, warp 0 loaded the next
// item between its own wgmmas, after a CTA barrier per item, and the warps
// waited 13% of their samples for the item to land and 31% at that barrier
// (Nsight Compute, benchmarks/NOTES.md, session 18).
#pragma once

#include <cstdint>

#include "common/dtype.cuh"
#include "common/mbarrier.cuh"
#include "common/ptx.cuh"
#include "common/smem.cuh"
#include "common/warp_roles.cuh"
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
struct ConvStripConfig : WarpRoles<56, 224> {  // one warp of the loader warpgroup loads
  static_assert(kIs16Bit<T> && (R == 16 || R == 32), "conv strip kernel: 16-bit types, strips of 16 or 32 rows");
  static constexpr int BS = 32;
  static constexpr int kP = 4;            // block columns per group: two per warpgroup
  static constexpr int kN = 8 * R;        // pixels per strip: one wgmma's N
  static constexpr int kStrips = 32 / R;  // per 256-pixel tile
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
  // The ring, then one zero block (the A operand of an absent block column).
  static constexpr int64_t smem_bytes(int taps, int plane_slots) {
    return (kStages * slot_elems(taps, plane_slots) + kBlockElems) * static_cast<int64_t>(sizeof(T));
  }
};

// TAPS_PER_WAIT (3 or 2) divides the taps: the register buffers of A fragments (see
// run_batch).
template <typename T, int R, int TAPS_PER_WAIT, bool TRANS>
__global__ void __launch_bounds__(ConvStripConfig<T, R>::kThreads, 1)
    bsconv_strip_kernel(const __grid_constant__ ConvStripParams p) {
  using Cfg = ConvStripConfig<T, R>;
  constexpr int BS = Cfg::BS;
  constexpr int kP = Cfg::kP;
  constexpr int kN = Cfg::kN;
  constexpr int kStrips = Cfg::kStrips;
  __shared__ uint64_t full[Cfg::kStages];   // a slot's halo boxes and weight blocks have landed
  __shared__ uint64_t empty[Cfg::kStages];  // the 8 consumer warps are done with a slot
  __shared__ unsigned slot_mask[Cfg::kStages];  // the slot's item's present columns
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
  T* const zero_block = smem + Cfg::kStages * slot_elems;

  using Halo = StripHalo<T, R, kStrips, Cfg::kPlanes>;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  constexpr int kLoaderWarp = Cfg::kConsumerThreads / 32;

  // This CTA's run of units (conv/unit_cursor.cuh: balanced_unit_range).
  if (warp == kLoaderWarp) {
    int64_t first = 0, end = 0;
    balanced_unit_range(p, taps, p.units / p.num_groups, lane, &first, &end);
    if (lane == 0) unit_range[0] = first, unit_range[1] = end;
  }
  if (tid == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) {
      mbarrier_init(&full[s], 1);
      mbarrier_init(&empty[s], Cfg::kConsumerThreads / 32);
    }
    mbarrier_init_fence();
  }
  for (int i = tid; i < Cfg::kBlockElems / 8; i += Cfg::kThreads) reinterpret_cast<uint4*>(zero_block)[i] = uint4{};
  __syncthreads();  // barriers initialised, the unit run and the zero block in place
  const int64_t first_unit = unit_range[0], end_unit = unit_range[1];
  UnitCursor<kP> cursor(p, taps, first_unit, end_unit);

  if (warp >= kLoaderWarp) {
    warpgroup_reg_dealloc<Cfg::kLoaderRegs>();
    if (warp > kLoaderWarp) return;
    // The loader: item i of the CTA's walk (over all its units) goes to ring slot i & 1
    // once the consumers have released item i - 2 there. Each item is the halo (one TMA
    // box per strip and plane, zeros outside the image, so a slot never keeps another
    // tile's pixels) and every tap's present blocks, raw (row-major, BS x BS) at tap t,
    // column q: one bulk copy each, all on the slot's full barrier.
    const T* const w = static_cast<const T*>(p.w) + blockIdx.y * p.w_group_stride;
    typename Halo::Pos pos[kStrips];
    auto on_unit = [&](int64_t tile) { Halo::strips_of(g, tile, pos); };
    int64_t seq = 0;
    for (bool more = cursor.start(on_unit); more; more = cursor.settle(on_unit), ++seq) {
      const int stage = static_cast<int>(seq & 1);
      int row[1 + kP];
      cursor.row(row);  // before the wait: its latency hides behind it
      const unsigned mask = present_columns<kP>(row);
      if (seq >= Cfg::kStages) mbarrier_wait(&empty[stage], static_cast<uint32_t>((seq >> 1) - 1) & 1u);
      T* const slot = smem + stage * slot_elems;
      if (lane == 0) {
        slot_mask[stage] = mask;  // published by the arrival below (release)
        mbarrier_arrive_expect_tx(&full[stage],
                                  Halo::bytes(p.halo) + taps * __popc(mask) * Cfg::kBlockElems * sizeof(T));
      }
      __syncwarp();
      fence_proxy_async();  // the consumers' accesses of this slot (ordered by `empty`) before the copies
      Halo::issue(p.halo, &p.halo_map, pos, row[0], static_cast<int>(blockIdx.y) * p.halo.group_step, lane, slot,
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
      ++cursor.item;
    }
    return;  // the consumers meet at named barriers of their own 256 threads only
  }
  warpgroup_reg_alloc<Cfg::kConsumerRegs>();

  const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0);  // warp-uniform for the compiler
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

  // This warp is done with slot `stage` (its wgmmas drained, or its epilogue read back).
  auto release = [&](int stage) { mbarrier_arrive_warp(&empty[stage], lane); };

  // Unit (tile, group q)'s output: the staged tile cs (pixels x channels, row stride
  // kLdS), or zeros where cs is null; 16-byte rows to y.
  auto store_tile = [&](int64_t tile, int q, const T* cs) {
    const int out_blocks = static_cast<int>(p.out_cols / BS);
    const int num_cols = out_blocks - q * kP < kP ? out_blocks - q * kP : kP;
    T* const out_group =
        static_cast<T*>(p.out) + blockIdx.y * p.out_group_stride + static_cast<int64_t>(q) * kP * BS;
    constexpr int kVec = 8;
    typename Halo::Pos out_pos[kStrips];
    Halo::strips_of(g, tile, out_pos);
    const int chunks_per_pixel = num_cols * (BS / kVec);
    for (int idx = tid; idx < 256 * chunks_per_pixel; idx += Cfg::kConsumerThreads) {
      const int pixel = idx / chunks_per_pixel;
      const int c = (idx - pixel * chunks_per_pixel) * kVec;
      const int n = pixel % kN;
      const typename Halo::Pos pos = Halo::pick(out_pos, pixel / kN);
      if (pos.image >= images) continue;
      const int64_t row = (pos.image * height + pos.h0 + n / 8) * width + pos.x0 + n % 8;
      *reinterpret_cast<uint4*>(out_group + row * p.out_cols + c) =
          cs ? *reinterpret_cast<const uint4*>(cs + pixel * Cfg::kLdS + c) : uint4{};
    }
  };

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
    if (items == 0) {
      // No item, no slot of its own (the loader skips the unit): zeros straight to y.
      store_tile(tile, q, nullptr);
      continue;
    }
    for (int i = 0; i < items; ++i, ++seq) {
      const int stage = static_cast<int>(seq & 1);
      mbarrier_wait(&full[stage], static_cast<uint32_t>(seq >> 1) & 1u);
      const unsigned mask = slot_mask[stage];
      const bool mine = (mask >> (2 * wg)) & 3u;  // this warpgroup has a block of the item
      const bool my_block = (mask >> my_column) & 1u;
      const T* const ws = smem + stage * slot_elems + halo_elems;
      const uint64_t b_item = b_base + stage * slot_units;

      // The taps run as a pipeline over NTAPS = TAPS_PER_WAIT register buffers of A
      // fragments: tap t uses buffer t % NTAPS; once tap t is issued, wgmma_wait<1> retires
      // tap t - 1, whose buffer is refilled with tap t - 1 + NTAPS while tap t runs. So a
      // warpgroup's taps reach the tensor cores back to back, with no drain but the last.
      // NTAPS divides the taps: the batch loop has no tap to skip (a branch between wgmmas,
      // or a second loop for the remainder, made ptxas serialize every wgmma, C7520).
      constexpr int NTAPS = TAPS_PER_WAIT;
      uint32_t a[NTAPS][2][4];
      // An absent block's A is read from the zero block: a choice of address, not of the
      // loaded values, so nothing waits for the ldmatrix until the wgmma.
      const T* const a_base = my_block ? ws + my_column * Cfg::kBlockElems : zero_block;
      const int a_tap_stride = my_block ? kP * Cfg::kBlockElems : 0;
      auto load_a = [&](uint32_t (&buf)[2][4], int t) {
        t = t < taps ? t : taps - 1;  // past the last tap: a harmless reload, no branch
        const T* const blk = a_base + t * a_tap_stride;
#pragma unroll
        for (int ks = 0; ks < 2; ++ks) {
          if constexpr (!TRANS) {
            // fwd: A(m = output channel, k = input channel) = W[k][m]: stored rows are k.
            ldsm_x4_t(buf[ks], blk + (ks * 16 + (li >> 1) * 8 + lr) * BS + m_in_block + (li & 1) * 8);
          } else {
            // dx: A(m = input channel, k = output channel) = W[m][k]: stored rows are m.
            ldsm_x4(buf[ks], blk + (m_in_block + (li & 1) * 8 + lr) * BS + ks * 16 + (li >> 1) * 8);
          }
        }
      };
      auto tap_slot = [&](int t) {
        const int kh = t / g.taps_w, kw = t - kh * g.taps_w;
        return p.halo.tap_slot(g.off_h + kh * g.step_h, g.off_w + kw * g.step_w);
      };
      // Batch b: taps NTAPS b .. NTAPS b + NTAPS - 1.
      auto run_batch = [&](int b) {
#pragma unroll
        for (int j = 0; j < NTAPS; ++j) {
          const int t = b * NTAPS + j;
          const uint64_t b_tap = b_item + tap_slot(t);
          wgmma_fence();
#pragma unroll
          for (int ks = 0; ks < 2; ++ks) {
#pragma unroll
            for (int s = 0; s < kStrips; ++s) {
              wgmma_rs<T, kN, 0>(acc[s], a[j][ks], b_tap + s * band_slots + ks * 2 * p.halo.plane_slots);
            }
          }
          wgmma_commit();
          wgmma_wait<1>();  // tap t - 1 retired: refill its buffer
          // At t = 0 buffer NTAPS - 1 still waits for its tap: reload that same tap.
          load_a(a[(j + NTAPS - 1) % NTAPS], t == 0 ? NTAPS - 1 : t - 1 + NTAPS);
        }
      };
      if (mine) {
#pragma unroll
        for (int j = 0; j < NTAPS; ++j) load_a(a[j], j);
        for (int b = 0; b * NTAPS < taps; ++b) run_batch(b);
        wgmma_wait<0>();
      }
      // A unit's last item keeps its slot for the epilogue, released after it.
      if (i + 1 < items) release(stage);
    }
    // The epilogue, in the slot of the unit's last item, which the loader refills only
    // after its release below: the tile as pixels x channels of T, accumulator row m
    // (channel 64 wg + m) and column n of strip s to row s * kN + n.
    named_barrier_sync(1, Cfg::kConsumerThreads);  // both warpgroups are done with the slot's operands
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
    named_barrier_sync(1, Cfg::kConsumerThreads);
    store_tile(tile, q, cs);
    release(static_cast<int>((seq + 1) & 1));
  }
}

}  // namespace jbs
