// Forward / input-gradient kernel of a stride-1 block-sparse convolution whose
// output has its input's image size, at bs 32 and 16, with the roles of the operands
// swapped: the product is y^T = W^T x^T, so the wgmma's M is 64 output channels
// (two blocks of the column group, or four at bs 16) and its N is up to 256 pixels.
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
// of a warpgroup's two columns has a block, half its MMA multiplies zeros (at bs 16, 3/4
// where one of four has; a k-step whose half has no block of the warpgroup's is skipped).
//
// The N side: a strip 8 pixels wide and R = 32 (or 16) rows tall, whose halo
// (conv/strip_halo.cuh) makes every tap a descriptor offset; a tile is 32 / R
// such strips (256 pixels).
//
// Work unit = (tile, group of 128 output channels: 4 block columns at bs 32, 8 at
// bs 16); warpgroup wg owns the group's channels 64 wg.. for all 256 pixels (an m64 x
// 256 fp32 accumulator). A group's columns are not adjacent but paired by shared input
// blocks (jbs/_src/tables.py paired_order; p.columns names them; at bs 16 only below density
// 3/16): in order, a quarter to a half of the m64 MMAs multiplied a zero block at density
// 1/4 to 1/8. Items are the group's union items (the conv's group tables,
// tap 0's, as the halo kernels), at bs 16 those of an aligned pair of channel blocks
// joined (ConvStripConfig): 32 input channels, two k-steps, either way (at bs 16 one
// where a warpgroup has blocks in one half only). Per item every
// tap's present blocks arrive by bulk copies and the halo by TMA boxes, all on the
// slot's mbarrier. The CTAs are persistent, one
// per SM, each taking a run of units of equal weight (balanced_unit_range).
// With one CTA per unit, the first load and the epilogue of every CTA were
// exposed: ~55 us of a 3x3 conv's 262 at density 1/2 (benchmarks/NOTES.md,
// session 15). Taps run in table order: deterministic.
//
// Warp specialized: a loader warp (at bs 16 all 4 of its warpgroup, sharing the block
// copies) walks the CTA's items into a ring of 2-4 slots (as
// many as fit), each as soon as the two consumer warpgroups have released the slot's
// previous item (an `empty` mbarrier), across unit boundaries. Each consumer
// warpgroup writes its 64 channels of a unit's output from its accumulators, through
// stmatrix into staging rows of its own, in whole 128-byte lines: no barrier between
// the warpgroups, no slot kept for an epilogue. Below density 3/8 a 3x3's slots hold half
// an item's blocks, so 3 fit instead of 2 (ConvStripParams::split): at bs 32 its items go
// out as one sub-item per warpgroup, at bs 16 whole unless they have more than 8 of their
// 16 blocks. (Session 18: warp 0 had
// loaded the next item between its own wgmmas after a CTA barrier per item, and the
// warps waited 13% of their samples for the item and 31% at that barrier. Session 21:
// the whole tile staged in a slot after a barrier of both warpgroups, a division per
// tap and 2 slots cost 3-14%.)
#pragma once

#include <cstdint>
#include <type_traits>  // std::integral_constant

#include "common/dtype.cuh"
#include "common/mbarrier.cuh"
#include "common/ptx.cuh"
#include "common/smem.cuh"
#include "common/warp_roles.cuh"
#include "common/wgmma.cuh"
#include "conv/row_gather.h"
#include "conv/strip_halo.cuh"
#include "conv/tap_blocks.cuh"           // read_union_row
#include "conv/unit_cursor.cuh"
#include "matmul/bsmm_group_kernel.cuh"  // GroupParams

namespace jbs {

struct ConvStripParams : GroupParams {
  CUtensorMap halo_map;  // the activations, in boxes of one strip's halo, 64-byte swizzled rows (conv/strip_halo.cuh)
  CUtensorMap w_map;     // the weights, in boxes of one block at every tap (strip_weight_map in matmul/launch_conv.cuh)
  int nnz_per_tap;       // weight blocks of one tap: w holds taps x nnz_per_tap
  StripHaloShape halo;
  int64_t units;         // tiles x num_groups: the work items of the persistent CTAs
  int stages;            // ring slots, 2 .. kMaxStages: as many as fit (ConvStripConfig::stages_for)
  int split;             // nonzero: slots of half an item's blocks (ConvStripConfig::slot_blocks), packed by
                         // rank; an item goes to the ring as one sub-item per warpgroup with blocks always
                         // (1, bs 32 only) or only where it has more blocks than a slot holds (2)
  const int32_t* columns;  // output block column of group q's column c: columns[q * P + c], -1 for none
  int zero_direct;         // nonzero: a unit without items (all zeros) is stored straight from registers, with
                           // no staging and no barrier; 0: through the staging as any unit (to compare)
  int tap_slot[64];      // halo slot of tap t's shift (StripHaloShape::tap_slot), t < taps <= 64
};

// BS 32: an item is one input channel block; BS 16: an aligned pair of them (2b, 2b + 1),
// so an item always carries 32 input channels (a halo pixel's 64-byte row) and an m64 always 64
// output channels (2 block columns of 32, or 4 of 16), and the ring, halo, wgmmas and
// epilogue are the same at both block sizes. (At bs 16 one channel block per item, in the
// ss kernel, took ~3 us per item at any density, as the strip kernel's items do for twice
// the work: pairs run bs 16 fwd / dx 1.3-1.45x faster; benchmarks/NOTES.md, session 22.)
template <typename T, int R, int BS = 32>
struct ConvStripConfig : WarpRoles<56, 224> {  // the loader warpgroup's first warp loads (bs 16: all 4 copy)
  static_assert(kIs16Bit<T> && (R == 16 || R == 32), "conv strip kernel: 16-bit types, strips of 16 or 32 rows");
  static_assert(BS == 16 || BS == 32, "conv strip kernel: blocks of 16 or 32");
  static constexpr int kP = 128 / BS;     // block columns per group, half of them per warpgroup
  static constexpr int kHalves = 32 / BS;  // input channel blocks per item: a k-step reads one (bs 16) or half of it
  static constexpr int kN = 8 * R;        // pixels per strip: one wgmma's N
  static constexpr int kStrips = 32 / R;  // per 256-pixel tile
  static constexpr int kMaxStages = 4;
  static constexpr int kMaxTaps = 64;
  static constexpr int kBlockElems = BS * BS;
  static constexpr int kOptInBytes = 226 * 1024;
  // The epilogue: each consumer warpgroup stages its 64 channels of 16 pixels at a time,
  // in two buffers, a pixel's 64 channels (128 bytes) in a 144-byte row (stmatrix rows and
  // the 16-byte reads of a row then fall in distinct banks).
  static constexpr int kOutPixels = 16;
  static constexpr int kOutLd = 72;
  static constexpr int kOutBuffers = 2;
  static constexpr int kOutElems = (kConsumerThreads / 128) * kOutBuffers * kOutPixels * kOutLd;
  static constexpr int64_t halo_elems(int halo_units) { return static_cast<int64_t>(halo_units) * 8; }
  // Weight blocks of one tap a slot holds: all P x halves of an item, or half as many
  // (split: a warpgroup's share), each at every tap ([slot block][tap]). Column c's slot
  // block is c (bs 32); half h's of column c, h * P + its rank among the half's present
  // blocks (bs 16); split, its block's rank among the (sub-)item's present blocks (bit
  // c * halves + h of slot_info).
  static constexpr int slot_blocks(bool split) { return split ? kP * kHalves / 2 : kP * kHalves; }
  // A ring slot: the halo, then the blocks (a multiple of 512 bytes, so every
  // slot's halo starts on a swizzle atom, as the ring does).
  static constexpr int64_t slot_elems(int taps, int halo_units, bool split) {
    return halo_elems(halo_units) + static_cast<int64_t>(taps) * slot_blocks(split) * kBlockElems;
  }
  static constexpr int kRingAlign = StripHaloShape::kAtomUnits * 16;  // bytes: a 64-byte swizzle atom
  // The ring, the epilogue's staging and one zero block (the A operand of an absent column),
  // and the slack that aligns the ring.
  static constexpr int64_t smem_bytes(int taps, int halo_units, bool split, int stages) {
    return (stages * slot_elems(taps, halo_units, split) + kOutElems + kBlockElems) *
               static_cast<int64_t>(sizeof(T)) +
           kRingAlign - 128;  // (dynamic shared memory starts 128-byte aligned: common/smem.cuh)
  }
  // The most ring slots that fit (0: not even 2). A deeper ring gives each item's loads a
  // longer lead: with 2 slots an item's loads start only when the item two back is done.
  static constexpr int stages_for(int taps, int halo_units, bool split) {
    int stages = kMaxStages;
    while (stages >= 2 && smem_bytes(taps, halo_units, split, stages) > kOptInBytes) --stages;
    return stages >= 2 ? stages : 0;
  }
};

// What the loader publishes with a slot: its (sub-)item's present blocks (bit c * halves +
// h: column c, half h; bits 0..15) and whether it is its unit's last (bit 16).
constexpr unsigned kStripLastOfUnit = 1u << 16;

// TAPS_PER_WAIT (3 or 2) divides the taps: the register buffers of A fragments (see
// run_batch). FIXED_TAPS (0: the taps of p.gather) makes the tap count a constant (6 and 9,
// the 2x3 and 3x3 convs): the tap loop unrolls, and each tap's halo offset is then a
// kernel-parameter constant that the wgmma descriptor adds in the uniform datapath, instead
// of a shared-memory load, a move to a uniform register and an add per tap (the chain
// Nsight found in ~25% of the consumers' stall samples; benchmarks/NOTES.md, sessions 25-26).
template <typename T, int BS, int R, int TAPS_PER_WAIT, bool TRANS, int FIXED_TAPS = 0>
__global__ void __launch_bounds__(ConvStripConfig<T, R, BS>::kThreads, 1)
    bsconv_strip_kernel(const __grid_constant__ ConvStripParams p) {
  using Cfg = ConvStripConfig<T, R, BS>;
  constexpr int kP = Cfg::kP;
  constexpr int kHalves = Cfg::kHalves;
  constexpr int kN = Cfg::kN;
  constexpr int kStrips = Cfg::kStrips;
  __shared__ uint64_t full[Cfg::kMaxStages];   // a slot's halo boxes and weight blocks have landed
  __shared__ uint64_t empty[Cfg::kMaxStages];  // the 8 consumer warps are done with a slot
  __shared__ unsigned slot_info[Cfg::kMaxStages];  // the slot's present blocks | kStripLastOfUnit
  __shared__ int tap_slot[Cfg::kMaxTaps];      // p.tap_slot: read per tap with no index arithmetic
  __shared__ int64_t unit_range[2];
  unsigned char* const smem_raw = dynamic_smem();
  T* const smem = reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(smem_raw) + Cfg::kRingAlign - 1) &
                                       ~static_cast<uintptr_t>(Cfg::kRingAlign - 1));
  const RowGather& g = p.gather;
  static_assert(FIXED_TAPS % TAPS_PER_WAIT == 0, "the tap batches");
  const int taps = FIXED_TAPS > 0 ? FIXED_TAPS : g.taps_h * g.taps_w;
  const int width = g.rows_w, height = g.rows_h;
  const int band_units = p.halo.band_units;
  const bool split = p.split != 0;  // slots of half an item's blocks, by rank
  const bool split_all = kHalves == 1 && p.split == 1;
  constexpr int kWgBits = kP / 2 * kHalves;  // slot_info bits of a warpgroup's blocks (a slot's when split)
  const int64_t halo_elems = Cfg::halo_elems(p.halo.halo_units);
  const int64_t slot_elems = Cfg::slot_elems(taps, p.halo.halo_units, split);
  const int64_t images = p.rows / (static_cast<int64_t>(height) * width);
  const int stages = p.stages;
  T* const out_stage = smem + stages * slot_elems;
  T* const zero_block = out_stage + Cfg::kOutElems;

  using Halo = StripHalo<T, R, kStrips>;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  constexpr int kLoaderWarp = Cfg::kConsumerThreads / 32;
  constexpr int kCopyWarps = kHalves == 2 ? Cfg::kLoaderThreads / 32 : 1;  // loader warps that copy

  // This CTA's run of units (conv/unit_cursor.cuh: balanced_unit_range).
  if (warp == kLoaderWarp) {
    int64_t first = 0, end = 0;
    balanced_unit_range(p, taps, p.units / p.num_groups, lane, &first, &end);
    if (lane == 0) unit_range[0] = first, unit_range[1] = end;
  }
  if (tid == 0) {
    for (int s = 0; s < stages; ++s) {
      mbarrier_init(&full[s], kCopyWarps);
      mbarrier_init(&empty[s], Cfg::kConsumerThreads / 32);
    }
    mbarrier_init_fence();
  }
  for (int t = tid; t < taps; t += Cfg::kThreads) tap_slot[t] = p.tap_slot[t];
  for (int i = tid; i < Cfg::kBlockElems / 8; i += Cfg::kThreads) reinterpret_cast<uint4*>(zero_block)[i] = uint4{};
  __syncthreads();  // barriers initialised, the unit run, the tap slots and the zero block in place
  // Launched early (programmatic dependent launch: launch_conv_strip_variant), the kernel has
  // so far read only the layout's tables, which no kernel writes; from here on it reads x and
  // w and writes y, so the kernel before it on the stream must be done.
  griddep_wait();
  const int64_t first_unit = unit_range[0], end_unit = unit_range[1];
  UnitCursor<kP> cursor(p, taps, first_unit, end_unit);

  if (warp >= kLoaderWarp) {
    warpgroup_reg_dealloc<Cfg::kLoaderRegs>();
    // bs 16: all 4 loader warps walk the items and share the blocks' boxes; the first also
    // publishes each slot and loads its halo.
    // Each arrives on the slot's full barrier expecting its own bytes, so no phase completes
    // without every copy warp: none can fall a ring behind (a warp with nothing to copy
    // for an item would otherwise not be waited for, and its parity wait on `empty` could
    // then skip a phase and block forever).
    const int copy_warp = warp - kLoaderWarp;
    if (copy_warp >= kCopyWarps) return;
    const bool publisher = copy_warp == 0;
    // The loader: (sub-)item i of the CTA's walk (over all its units) goes to ring slot
    // i % stages once the consumers have released (sub-)item i - stages there. Each is
    // the halo (one TMA box per strip, zeros outside the image, so a slot never
    // keeps another tile's pixels) and every present block at every tap, raw (row-major, BS x
    // BS) at slot block b, tap t: one TMA box per block (all its taps), all on the slot's
    // full barrier. At bs 16 an item is the union rows of channel blocks 2b and
    // 2b + 1 (halves 0 and 1; either may be absent). With p.split (bs 32) an item whose
    // two warpgroups both have blocks goes out as two sub-items, one per warpgroup, each
    // with the halo: the slots hold 2 columns instead of 4, so more of them fit, and the
    // warpgroups no longer work in step.
    const int w_group = p.w_group_stride == 0 ? 0 : static_cast<int>(blockIdx.y);  // (p.w_map's group)
    typename Halo::Pos pos[kStrips];
    auto on_unit = [&](int64_t tile) {
      if (publisher) Halo::strips_of(g, tile, pos);
    };
    RingPosition ring(stages);
    for (bool more = cursor.start(on_unit); more; more = cursor.settle(on_unit)) {
      // The item's rows of halves 0 and 1 (blocks -1 where a half is absent), and its
      // channel block in units of 32 channels.
      int lo[1 + kP], hi[1 + kP];
      cursor.row(lo);  // before the wait: its latency hides behind it
      int taken = 1;   // union rows the item takes
      int item_block = lo[0];
      if constexpr (kHalves == 2) {
        // Union rows come sorted by channel block: block 2b + 1 right after 2b joins its item.
        int next[1 + kP];
        const bool has_next = cursor.item + 1 < cursor.items;
        if (has_next) read_union_row<kP>(cursor.rows, cursor.item + 1, next);
        const bool odd = (lo[0] & 1) != 0;
        const bool joined = !odd && has_next && next[0] == lo[0] + 1;
        taken = joined ? 2 : 1;
#pragma unroll
        for (int k = 1; k <= kP; ++k) {
          hi[k] = odd ? lo[k] : joined ? next[k] : -1;
          lo[k] = odd ? -1 : lo[k];
        }
        item_block = lo[0] >> 1;
      } else {
#pragma unroll
        for (int k = 1; k <= kP; ++k) hi[k] = -1;  // (never read)
      }
      unsigned mask = 0;  // bit c * halves + h: block column c has a block in half h
#pragma unroll
      for (int c = 0; c < kP; ++c) {
        mask |= (lo[1 + c] >= 0 ? 1u : 0u) << (c * kHalves);
        if constexpr (kHalves == 2) mask |= (hi[1 + c] >= 0 ? 1u : 0u) << (c * kHalves + 1);
      }
      const bool last_item = cursor.item + taken == cursor.items;
      for (int half = 0; half < 2; ++half) {
        // The sub-item's columns: all of them in one go, or warpgroup `half`'s.
        // (Packed slots, p.split = 2: an item with at most a slot's blocks goes whole.)
        const bool item_split = split_all || (split && __popc(mask) > kWgBits);
        const unsigned cols = item_split ? mask & (((1u << kWgBits) - 1u) << (kWgBits * half)) : mask;
        if (cols == 0) continue;  // (unsplit: never, an item has a block)
        const bool last = last_item && (!item_split || half == 1 || (mask >> kWgBits) == 0);
        const int stage = ring.stage;
        if (ring.reused) mbarrier_wait(&empty[stage], ring.phase ^ 1u);  // the slot's previous item released
        T* const slot = smem + stage * slot_elems;
        // The item's blocks: pair j = h * P + c (column c, half h) present, its block at every
        // tap by one TMA box of p.w_map, into slot block `slot_pair(j)` (bs 32: the column's
        // slot; bs 16: h * P + its rank among the half's present blocks), [slot block][tap].
        // (As bulk copies, one per tap and block (bs 16: per tap and half), each a loop
        // iteration of ~10 uniform-datapath instructions, the loader ran 409 instructions an
        // item at fwd 2x3 bs 32 1/8, where 9 copies are 1.5 boxes; benchmarks/NOTES.md,
        // session 47.) The copy warps take the pairs in turn.
        auto pair_block = [&](int j) {
          const int h = j / kP, c = j - h * kP;
          int block = -1;
#pragma unroll
          for (int k = 0; k < kP; ++k) block = k == c ? (h == 0 ? lo[1 + k] : hi[1 + k]) : block;
          return ((cols >> (c * kHalves + h)) & 1u) ? block : -1;
        };
        auto slot_pair = [&](int j) {
          const int h = j / kP, c = j - h * kP;
          if (split) return __popc(cols & ((1u << (c * kHalves + h)) - 1u));  // by rank among the (sub-)item's
          if constexpr (kHalves == 2) return h * kP + __popc(cols & (0x5555u << h) & ((1u << (2 * c)) - 1u));
          return c;
        };
        constexpr int kPairs = kHalves * kP;
        const int box_bytes = taps * Cfg::kBlockElems * static_cast<int>(sizeof(T));
        int bytes = 0;  // this warp's
        for (int j = copy_warp + kCopyWarps * lane; j < kPairs; j += 32 * kCopyWarps) {
          bytes += pair_block(j) >= 0 ? box_bytes : 0;
        }
        bytes = __reduce_add_sync(0xffffffffu, bytes);
        if (lane == 0) {
          if (publisher) slot_info[stage] = cols | (last ? kStripLastOfUnit : 0u);  // published by the arrival (release)
          mbarrier_arrive_expect_tx(&full[stage], (publisher ? Halo::bytes(p.halo) : 0) + bytes);
        }
        __syncwarp();
        fence_proxy_async();  // the consumers' accesses of this slot (ordered by `empty`) before the copies
        if (publisher) {
          Halo::issue(p.halo, &p.halo_map, pos, item_block, static_cast<int>(blockIdx.y) * p.halo.group_step, lane,
                      slot, &full[stage]);
        }
        for (int j = copy_warp + kCopyWarps * lane; j < kPairs; j += 32 * kCopyWarps) {
          const int block = pair_block(j);
          if (block >= 0) {
            tma_load_5d(slot + halo_elems + static_cast<int64_t>(slot_pair(j)) * taps * Cfg::kBlockElems, &p.w_map, 0,
                        0, block, 0, w_group, &full[stage]);
          }
        }
        ring.advance();
        if (!item_split) break;
      }
      cursor.item += taken;
    }
    return;  // the consumers meet at no barrier with the loader from here on
  }
  warpgroup_reg_alloc<Cfg::kConsumerRegs>();

  const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0);  // warp-uniform for the compiler
  // B (the halo) K-major in 64-byte swizzled rows (conv/strip_halo.cuh): a k-step's 16
  // channels 32 bytes into the row, the next strip row (core-matrix group along n) one halo
  // row further (SBO). Offsets in the descriptor's 16-byte units; shared memory is under
  // 256 KiB, so adding to the descriptor never carries out of the address field.
  const uint64_t b_base = wgmma_desc_sw64(smem, p.halo.row_slots * 64);
  const uint32_t slot_units = static_cast<uint32_t>(slot_elems / 8);
  // This warp's 16 rows of the warpgroup's m64: bs 32, output channels (warp % 2) * 16..
  // of block column 2 wg + (warp % 4) / 2; bs 16, block column 4 wg + warp % 4.
  constexpr int kWarpsPerColumn = 8 / kP;
  const int my_column = wg * (kP / 2) + (warp & 3) / kWarpsPerColumn;
  const int m_in_block = ((warp & 3) % kWarpsPerColumn) * 16;
  const int lr = lane & 7, li = lane >> 3;

  // Unit (tile, group q)'s output, the warpgroup's 64 channels of it, from the accumulators,
  // 16 pixels at a time: each warp's 16 channels by stmatrix (transposed: a pixel's channels
  // in one row) into the warpgroup's staging rows, then, after the warpgroup's named barrier,
  // each warp stores 4 pixels' whole 128-byte rows. So every store instruction writes 4 full
  // 128-byte lines of y. (Each warp storing its own 16 channels wrote 16 lines' 32-byte
  // sectors per instruction: the stores then cost 11-14% of the kernel even into an
  // L2-resident region, against 2-3% for the rest of the epilogue; benchmarks/NOTES.md,
  // session 24.) Two buffers, so one barrier per chunk: a warp writes a buffer again only
  // after the barrier of the chunk in between, which every warp reaches after its reads.
  //
  // Where the unit's output goes is worked out when the unit starts (OutTarget): the global
  // loads of its columns and the 64-bit divisions of its strips then run while its items
  // land. In the epilogue they, and a 64-bit address computed afresh for every chunk, made
  // it 55% of the kernel's instructions at density 1/8 (benchmarks/NOTES.md, session 45).
  static_assert(Cfg::kOutPixels == 16, "a chunk is two strip rows: its pixels step by 2 image rows");
  const int wg_warp = warp & 3;
  T* const wg_stage = out_stage + wg * Cfg::kOutBuffers * Cfg::kOutPixels * Cfg::kOutLd;
  // This lane's 8 channels of a stored row, channels `channel`.. of the warpgroup's 64, lie in
  // its column channel / BS (so a stored row is 2 (bs 32) or 4 (bs 16) pieces of output lines).
  const int channel = 8 * (lane & 7);
  struct OutTarget {
    int column;  // the lane's output block column (p.columns: paired by shared inputs, not adjacent), -1: none
    typename Halo::Pos pos[kStrips];
  };
  auto out_target = [&](int64_t tile, int q) {
    OutTarget target;
    target.column = __ldg(p.columns + q * kP + wg * (kP / 2) + channel / BS);
    Halo::strips_of(g, tile, target.pos);
    return target;
  };
  // This lane's pixel of each chunk: strip row pixel / 8 (+ 2 per chunk), column pixel % 8;
  // where its 8 channels of strip `pos`'s first chunk go (column >= 0).
  const int pixel = 4 * wg_warp + (lane >> 3);
  const int64_t chunk_step = 2 * static_cast<int64_t>(width) * p.out_cols;
  auto first_row_at = [&](int column, const typename Halo::Pos& pos) {
    return static_cast<T*>(p.out) + blockIdx.y * p.out_group_stride + column * BS + channel % BS +
           ((pos.image * height + pos.h0 + pixel / 8) * width + pos.x0 + pixel % 8) * p.out_cols;
  };
  // A unit without items: zeros, stored straight from registers (no staging, no barrier).
  auto store_zero_tile = [&](const OutTarget& target) {
    if (target.column < 0) return;
#pragma unroll
    for (int s = 0; s < kStrips; ++s) {
      const typename Halo::Pos pos = Halo::pick(target.pos, s);
      if (pos.image >= images) continue;
      T* at = first_row_at(target.column, pos);
#pragma unroll
      for (int chunk = 0; chunk < kN / Cfg::kOutPixels; ++chunk, at += chunk_step) *reinterpret_cast<uint4*>(at) = uint4{};
    }
  };
  auto store_tile = [&](const OutTarget& target, const float (&acc)[kStrips][kN / 8][4]) {
    // (Every warp's lanes 0..7 hold all of the warpgroup's columns: its 4 warps return together.)
    if (!__any_sync(0xffffffffu, target.column >= 0)) return;
    const int column = target.column;
    const bool channel_stored = column >= 0;
    // One chunk in hand: a chunk's row is read from the staging buffer after its barrier and
    // stored after the next chunk's, so no store waits for its read. (The read is done
    // before the warp reaches the next barrier, after which the buffer is written again.)
    uint4 row{};
    T* row_at = nullptr;
    bool row_stored = false;
    int buffer = 0;
#pragma unroll
    for (int s = 0; s < kStrips; ++s) {
      const typename Halo::Pos pos = Halo::pick(target.pos, s);
      const bool store = pos.image < images && channel_stored;
      T* at = first_row_at(channel_stored ? column : 0, pos);
#pragma unroll
      for (int chunk = 0; chunk < kN / Cfg::kOutPixels; ++chunk) {
        T* const stage = wg_stage + buffer * Cfg::kOutPixels * Cfg::kOutLd;
        // stmatrix x4 of n-tiles nt, nt + 1: matrix j = (n-tile nt + j / 2, channels 8 (j % 2)..
        // of the warp's 16, which are the warpgroup's 16 wg_warp..).
        const int nt = 2 * chunk;
        stsm_x4_t(stage + (8 * (li >> 1) + lr) * Cfg::kOutLd + 16 * wg_warp + 8 * (li & 1),
                  pack_pair<T>(acc[s][nt][0], acc[s][nt][1]), pack_pair<T>(acc[s][nt][2], acc[s][nt][3]),
                  pack_pair<T>(acc[s][nt + 1][0], acc[s][nt + 1][1]),
                  pack_pair<T>(acc[s][nt + 1][2], acc[s][nt + 1][3]));
        named_barrier_sync(1 + wg, Cfg::kConsumerThreads / 2);  // the warpgroup's 4 warps have staged the chunk
        if (row_stored) *reinterpret_cast<uint4*>(row_at) = row;
        row = *reinterpret_cast<const uint4*>(stage + pixel * Cfg::kOutLd + channel);
        row_at = at;
        row_stored = store;
        at += chunk_step;
        buffer ^= 1;
      }
    }
    if (row_stored) *reinterpret_cast<uint4*>(row_at) = row;
  };

  float acc[kStrips][kN / 8][4];
  RingPosition ring(stages);  // the slot of the next (sub-)item
  // The unit's tile and group, stepped from unit to unit (a 64-bit division is ~100
  // instructions), and where its group's items lie in the tables (equal offsets: none).
  int64_t tile = first_unit / p.num_groups;
  int q = static_cast<int>(first_unit - tile * p.num_groups);
  int items_begin = __ldg(p.group_offsets + q), items_end = __ldg(p.group_offsets + q + 1);
  for (int64_t unit = first_unit; unit < end_unit; ++unit) {
    // A unit without items has no slot (the loader skips it): its output is zeros.
    const bool no_items = items_begin == items_end;
#pragma unroll
    for (int s = 0; s < kStrips; ++s) {
#pragma unroll
      for (int nt = 0; nt < kN / 8; ++nt) acc[s][nt][0] = acc[s][nt][1] = acc[s][nt][2] = acc[s][nt][3] = 0.f;
    }
    const OutTarget target = out_target(tile, q);
    bool last = no_items;
    // The next unit's, a unit ahead: the wait for these loads then falls on no unit's start.
    if (++q == p.num_groups) q = 0, ++tile;
    items_begin = __ldg(p.group_offsets + q), items_end = __ldg(p.group_offsets + q + 1);
    for (; !last; ring.advance()) {
      const int stage = ring.stage;
      mbarrier_wait(&full[stage], ring.phase);
      const unsigned info = slot_info[stage];
      last = (info & kStripLastOfUnit) != 0;
      // This warpgroup's blocks of the (sub-)item: bit c * halves + h, c counted from its
      // first column.
      const unsigned my_blocks = (info >> (wg * kWgBits)) & ((1u << kWgBits) - 1u);
      const T* const ws = smem + stage * slot_elems + halo_elems;
      const uint64_t b_item = b_base + stage * slot_units;

      // The item's taps, KS k-steps each (KS = 2: both halves / a bs-32 block's rows 0..15
      // and 16..31; KS = 1, bs 16 only: half `only_half`, the other having no block of this
      // warpgroup's, so its k-step would multiply zeros only). One code path per KS, chosen
      // per item, so no branch falls between the wgmmas. (Skipping a k-step saves ~24% of
      // the MMA work at density 1/4 and ~37% at 1/8 of random layouts; it ran bs 16 fwd / dx
      // 1.08-1.13x faster at 1/4, 1.06-1.20x at 1/8; benchmarks/NOTES.md, session 23.)
      auto run_item = [&](auto ks_count, int only_half) {
        constexpr int KS = decltype(ks_count)::value;
        // The taps run as a pipeline over NTAPS = TAPS_PER_WAIT register buffers of A
        // fragments: tap t uses buffer t % NTAPS; once tap t is issued, wgmma_wait<1> retires
        // tap t - 1, whose buffer is refilled with tap t - 1 + NTAPS while tap t runs. So a
        // warpgroup's taps reach the tensor cores back to back, with no drain but the last.
        // NTAPS divides the taps: the batch loop has no tap to skip (a branch between wgmmas,
        // or a second loop for the remainder, made ptxas serialize every wgmma, C7520).
        constexpr int NTAPS = TAPS_PER_WAIT;
        uint32_t a[NTAPS][KS][4];
        // K-step ks reads half h (bs 16: its own block, packed by rank among the half's
        // present blocks, and the halo's channels 16 h.. of a pixel's row) or the block's rows 16 ks..
        // (bs 32). An absent block's A is read from the zero block: a choice of address,
        // not of the loaded values, so nothing waits for the ldmatrix until the wgmma.
        const T* a_base[KS];
        int a_tap_stride[KS];
        uint32_t b_k[KS];
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
          const int h = kHalves == 1 ? 0 : KS == 2 ? ks : only_half;
          const bool present = (info >> (my_column * kHalves + h)) & 1u;
          const int slot_block =
              split          ? __popc(info & ((1u << (my_column * kHalves + h)) - 1u))  // by rank
              : kHalves == 2 ? h * kP + __popc(info & (0x5555u << h) & ((1u << (2 * my_column)) - 1u))
                             : my_column;
          a_base[ks] = present ? ws + slot_block * taps * Cfg::kBlockElems : zero_block;
          a_tap_stride[ks] = present ? Cfg::kBlockElems : 0;
          b_k[ks] = static_cast<uint32_t>((kHalves == 2 ? h : ks) * 2);  // 32 bytes a k-step
        }
        auto load_a = [&](uint32_t (&buf)[KS][4], int t) {
          t = t < taps ? t : taps - 1;  // past the last tap: a harmless reload, no branch
#pragma unroll
          for (int ks = 0; ks < KS; ++ks) {
            const T* const blk = a_base[ks] + t * a_tap_stride[ks];
            const int k0 = kHalves == 2 ? 0 : ks * 16;
            if constexpr (!TRANS) {
              // fwd: A(m = output channel, k = input channel) = W[k][m]: stored rows are k.
              ldsm_x4_t(buf[ks], blk + (k0 + (li >> 1) * 8 + lr) * BS + m_in_block + (li & 1) * 8);
            } else {
              // dx: A(m = input channel, k = output channel) = W[m][k]: stored rows are m.
              ldsm_x4(buf[ks], blk + (m_in_block + (li & 1) * 8 + lr) * BS + k0 + (li >> 1) * 8);
            }
          }
        };
        // Batch b: taps NTAPS b .. NTAPS b + NTAPS - 1.
        auto run_batch = [&](int b) {
#pragma unroll
          for (int j = 0; j < NTAPS; ++j) {
            const int t = b * NTAPS + j;
            const uint64_t b_tap = b_item + (FIXED_TAPS > 0 ? p.tap_slot[t] : tap_slot[t]);
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < KS; ++ks) {
#pragma unroll
              for (int s = 0; s < kStrips; ++s) {
                wgmma_rs<T, kN, 0>(acc[s], a[j][ks], b_tap + s * band_units + b_k[ks]);
              }
            }
            wgmma_commit();
            wgmma_wait<1>();  // tap t - 1 retired: refill its buffer
            // At t = 0 buffer NTAPS - 1 still waits for its tap: reload that same tap.
            load_a(a[(j + NTAPS - 1) % NTAPS], t == 0 ? NTAPS - 1 : t - 1 + NTAPS);
          }
        };
#pragma unroll
        for (int j = 0; j < NTAPS; ++j) load_a(a[j], j);
        if constexpr (FIXED_TAPS > 0) {
#pragma unroll
          for (int b = 0; b < FIXED_TAPS / NTAPS; ++b) run_batch(b);
        } else {
          for (int b = 0; b * NTAPS < taps; ++b) run_batch(b);
        }
        wgmma_wait<0>();
      };
      using KSteps1 = std::integral_constant<int, 1>;
      using KSteps2 = std::integral_constant<int, 2>;
      if constexpr (kHalves == 2) {
        const bool half0 = (my_blocks & 0x55u) != 0, half1 = (my_blocks & 0xAAu) != 0;
        if (half0 && half1) {
          run_item(KSteps2{}, 0);
        } else if (half0 || half1) {
          run_item(KSteps1{}, half1 ? 1 : 0);
        }
      } else if (my_blocks != 0) {
        run_item(KSteps2{}, 0);
      }
      mbarrier_arrive_warp(&empty[stage], lane);  // this warp is done with the slot
    }
    if (no_items && p.zero_direct != 0) {
      store_zero_tile(target);
    } else {
      store_tile(target, acc);
    }
  }
}

}  // namespace jbs
