// Large-N forward / input-gradient kernel over column groups on Hopper tensor
// cores, warp-specialized: one producer warpgroup loads, two consumer
// warpgroups multiply, and they meet only at per-stage mbarriers.
//
// The work is that of bsmm_group_wgmma_kernel.cuh (same CTA tile of 256 rows x
// P = 128 / BS block columns, same union-item walk, same shared-memory layouts
// and wgmma shapes; see there). What changes is the control:
//  * There, all 256 threads load the stage `kAhead` items ahead, wait for the
//    item at hand, meet at __syncthreads, and drain every item's wgmmas
//    (wgmma_wait<0>) before the next. The tensor cores idle for the barrier,
//    the load issue, the A-fragment loads and the drain of every item: Nsight
//    Compute put those kernels' issue slots at 20-33% with the L2 feed at ~60%
//    of what cp.async reaches (benchmarks/NOTES.md, session 7).
//  * Here the producer warpgroup (128 threads, few registers) issues each
//    item's cp.asyncs as soon as its stage is free and lets the copies
//    themselves arrive on the stage's "full" barrier
//    (cp.async.mbarrier.arrive.noinc). Each consumer warpgroup waits for that
//    barrier alone, loads its A fragments, issues the item's wgmmas and keeps
//    them in flight while it starts the next item (A fragments double-buffered,
//    wgmma_wait<1>), releasing a stage on its "empty" barrier once that stage's
//    wgmmas have retired. The two consumers drift apart, so one issues while the
//    other waits.
//
// Items are processed in table order by fixed warpgroups and rows, so the
// result is bitwise deterministic (and equal to bsmm_group_wgmma_kernel's).
//
// Status (benchmarks/NOTES.md, session 9): opt-in through JBS_WS=1. It measured
// 1.07-1.09x faster than the barrier kernel at bs 32/64 in two calls, then
// 0.74-1.00x in two later ones with practically the same PTX; only fp32 at bs 16
// stayed faster (1.26-1.60x). The 8192^3 cases it was meant for move ~4.4 TB/s
// from L2, so the feed, not the control, is what bounds them.
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/dtype.cuh"
#include "common/mbarrier.cuh"
#include "common/ptx.cuh"
#include "common/smem.cuh"
#include "common/warp_roles.cuh"
#include "common/wgmma.cuh"
#include "conv/row_gather.h"
#include "matmul/bsmm_blocks_kernel.cuh"  // BlocksConfig strides, cmin/cmax/cclamp
#include "matmul/bsmm_group_kernel.cuh"   // GroupParams, GroupCta
#include "matmul/bsmm_group_wgmma_kernel.cuh"  // kGroupWgmmaSupported
#include "matmul/group_item_mma.cuh"
#include "matmul/group_slot_loader.cuh"
#include "matmul/packed_rows.cuh"
#include "matmul/tile_io.cuh"
#include "matmul/warp_mma.cuh"

namespace jbs {

// Where the consumers' registers suffice: at bs 64, fp32's 64 A registers per item
// (k8 steps) and the conv's gathered rows made ptxas spill hundreds of bytes, so
// those keep bsmm_group_wgmma_kernel.
template <typename T, int BS, bool GATHER>
inline constexpr bool kGroupWsSupported = kGroupWgmmaSupported<T, BS> && !(BS == 64 && (GATHER || !kIs16Bit<T>));

// The loaders' registers (common/warp_roles.cuh): a row-major tile's copies need more
// than a packed run (ptxas spilled at 56), and the gathered (conv) tile keeps each row's
// source pixel in them too.
template <bool PACKED, bool GATHER>
using GroupWsRoles = WarpRoles<PACKED ? 56 : (GATHER ? 120 : 80), PACKED ? 224 : (GATHER ? 192 : 208)>;

template <typename T, int BS, bool PACKED, bool GATHER>
struct GroupWsConfig : GroupWgmmaSlot<T, BS, PACKED>, GroupWsRoles<PACKED, GATHER> {
  using Slot = GroupWgmmaSlot<T, BS, PACKED>;
  using Slot::kKSteps, Slot::kSlotElems, Slot::kLdC;
  using Roles = GroupWsRoles<PACKED, GATHER>;  // two consumer warpgroups of 128 rows each
  using Roles::kConsumerRegs;
  static constexpr int kSlotBytes = kSlotElems * static_cast<int>(sizeof(T));
  static constexpr int kRingBudget = 220 * 1024;
  static constexpr int kStages = cclamp(kRingBudget / kSlotBytes, 2, 16);
  static constexpr int kRingBytes = kStages * kSlotBytes;
  // A fragments of one item per consumer thread; two items' are kept when they fit
  // next to the 128 accumulators (all but fp32 at bs 32 on row-major or gathered tiles).
  static constexpr int kARegs = 2 * kKSteps * 4;
  static constexpr bool kDoubleA = 128 + 2 * kARegs + 32 <= kConsumerRegs;
  // After the ring: full[kStages], empty[kStages] (8 bytes each), masks[kStages].
  static constexpr int kFullOffset = kRingBytes;
  static constexpr int kEmptyOffset = kFullOffset + 8 * kStages;
  static constexpr int kMaskOffset = kEmptyOffset + 8 * kStages;
  // The epilogue stages both warpgroups' 128 rows at once in the drained ring.
  static constexpr int kEpilogueBytes = 2 * 128 * kLdC * 4;
  static_assert(kEpilogueBytes <= kRingBytes, "the epilogue reuses the ring, not the barriers");
  static constexpr int kSmemBytes = kMaskOffset + 4 * kStages;
  static_assert(kSmemBytes <= 227 * 1024, "sm_90 shared memory per CTA");
};

// What the producer warpgroup knows of the union items: each warp holds an
// item's table row in its lanes (lane i: int i of [input, block of column 0 ..
// P-1]) and picks entries out with shuffles, so no thread needs a dynamically
// indexed array.
template <int P>
struct WarpTableRow {
  int value;  // this lane's int; -1 past the row

  __device__ __forceinline__ static WarpTableRow read(const int32_t* items, int j, int lane) {
    return {lane <= P ? __ldg(items + static_cast<int64_t>(j) * (1 + P) + lane) : -1};
  }
  __device__ __forceinline__ int input() const { return __shfl_sync(0xffffffffu, value, 0); }
  __device__ __forceinline__ int block(int c) const { return __shfl_sync(0xffffffffu, value, 1 + c); }
  // Bit c: column c has a block for this item (the same in every lane).
  __device__ __forceinline__ unsigned present(int lane) const {
    return (__ballot_sync(0xffffffffu, lane >= 1 && lane <= P && value >= 0) >> 1) & ((1u << P) - 1);
  }
};

template <typename T, int BS, bool TRANS, bool GATHER, bool PACKED>
__global__ void __launch_bounds__(384, 1) bsmm_group_ws_kernel(const GroupParams p) {
  static_assert(!(GATHER && PACKED), "a gathered (conv) activation is not packed");
  using Cfg = GroupWsConfig<T, BS, PACKED, GATHER>;
  constexpr int kP = Cfg::kP;
  constexpr int kStages = Cfg::kStages;
  constexpr int kTN = Cfg::kTN;
  unsigned char* const smem_raw = dynamic_smem();  // offset 0: core matrices stay 128 B aligned
  T* const smem = reinterpret_cast<T*>(smem_raw);
  uint64_t* const full = reinterpret_cast<uint64_t*>(smem_raw + Cfg::kFullOffset);
  uint64_t* const empty = reinterpret_cast<uint64_t*>(smem_raw + Cfg::kEmptyOffset);
  int* const masks = reinterpret_cast<int*>(smem_raw + Cfg::kMaskOffset);

  const int tid = threadIdx.x;
  const GroupCta<T, BS, kTN, GATHER> cta(p);
  const int items = cta.end - cta.beg;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      // full: every producer thread's copies, plus thread 0's arrival after it wrote the mask.
      mbarrier_init(full + s, Cfg::kLoaderThreads + 1);
      mbarrier_init(empty + s, Cfg::kConsumerThreads / 32);  // one arrival per consumer warp
    }
    mbarrier_init_fence();
  }
  __syncthreads();  // the last CTA-wide barrier: the producers leave early

  if (tid >= Cfg::kConsumerThreads) {
    warpgroup_reg_dealloc<Cfg::kLoaderRegs>();
    const int ptid = tid - Cfg::kConsumerThreads;
    const int lane = tid & 31;
    constexpr bool kTransposeW = !TRANS && !kIs16Bit<T>;  // tf32 reads B K-major only
    // The forward's blocks with n-major cores where the consumers pair them (group_item_mma.cuh).
    GroupSlotLoader<T, BS, kTN, Cfg::kLdX, kTransposeW, GATHER, PACKED, Cfg::kLoaderThreads,
                    kPairWgmmas<T, BS> && !TRANS, kPairWgmmas<T, BS>>
        loader;
    loader.init(p, cta, ptid);
    using Row = WarpTableRow<kP>;
    Row row = items > 0 ? Row::read(p.group_items, cta.beg, lane) : Row{-1};
    int stage = 0;
    uint32_t round = 0;
    for (int i = 0; i < items; ++i) {
      const Row next = i + 1 < items ? Row::read(p.group_items, cta.beg + i + 1, lane) : Row{-1};  // in flight during the wait
      mbarrier_wait(empty + stage, (round & 1) ^ 1);
      T* const xs = smem + stage * Cfg::kSlotElems;
      loader.load_activation(xs, row.input(), p, cta, ptid);
      loader.load_weights(xs + kTN * Cfg::kLdX, [&](int c) { return row.block(c); }, cta.w, ptid);
      const unsigned present = row.present(lane);
      cp_async_arrive_noinc(full + stage);
      if (ptid == 0) {
        masks[stage] = static_cast<int>(present);
        mbarrier_arrive(full + stage);
      }
      row = next;
      if (++stage == kStages) {
        stage = 0;
        ++round;
      }
    }
    cp_async_wait<0>();
    return;
  }

  warpgroup_reg_alloc<Cfg::kConsumerRegs>();
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int wg = warp >> 2;               // consumer warpgroup: rows wg * 128 ..
  const int row_in_wg = (warp & 3) * 16;  // this warp's 16 rows of each m64 half
  // How B is read: K-major for the dx and for every tf32 product (see bsmm_group_wgmma_kernel.cuh).
  constexpr bool kBKMajor = TRANS || !kIs16Bit<T>;

  float acc[2][kP][1][Cfg::kNT][4] = {};
  uint32_t a[Cfg::kDoubleA ? 2 : 1][2][Cfg::kKSteps][1][4];
  int stage = 0;
  uint32_t round = 0;
  int last_stage = -1;  // the stage whose wgmmas may still be in flight

  // One union item from stage `stage` with the A fragments in buffer B.
  auto consume = [&](auto buffer) {
    constexpr int B = decltype(buffer)::value;
    mbarrier_wait(full + stage, round & 1);
    fence_proxy_async();  // the landed cp.async writes -> visible to wgmma's reads of B
    const T* xs = smem + stage * Cfg::kSlotElems;
    load_item_fragments<T, BS, Cfg::kLdX, PACKED>(a[B], xs, wg * 128 + row_in_wg, lane);
    const unsigned present = static_cast<unsigned>(masks[stage]);  // CTA-uniform
    wgmma_fence();
    issue_item_wgmmas<T, BS, kBKMajor, kPairWgmmas<T, BS>>(acc, a[B], xs + kTN * Cfg::kLdX, present);
    wgmma_commit();
    // Release a stage once its wgmmas have retired: with two A buffers the
    // previous item's (this one's stay in flight), else this one's.
    if constexpr (Cfg::kDoubleA) {
      wgmma_wait<1>();
    } else {
      wgmma_wait<0>();
      last_stage = stage;
    }
    if (last_stage >= 0) mbarrier_arrive_warp(empty + last_stage, lane);
    last_stage = stage;
    if (++stage == kStages) {
      stage = 0;
      ++round;
    }
  };
  for (int i = 0; i < items; i += 2) {
    consume(std::integral_constant<int, 0>{});
    if (i + 1 < items) consume(std::integral_constant<int, Cfg::kDoubleA ? 1 : 0>{});
  }
  wgmma_wait<0>();

  // Epilogue: both warpgroups' rows at once through the drained ring.
  named_barrier_sync(1, Cfg::kConsumerThreads);  // no consumer reads the ring any more
  float* const cs = reinterpret_cast<float*>(smem_raw) + wg * 128 * Cfg::kLdC;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int c = 0; c < kP; ++c) stage_acc<1, Cfg::kNT, 128>(cs, Cfg::kLdC, h * 64 + row_in_wg, c * BS, acc[h][c], lane);
  }
  named_barrier_sync(2 + wg, 128);
  const int rows = cta.valid_rows - wg * 128 < 128 ? cta.valid_rows - wg * 128 : 128;
  for (int c = 0; c < kP && rows > 0; ++c) {
    const int column = cta.columns(c);
    if (column < 0) continue;  // uniform
    store_tile<T, 128, BS, 128, 1>(cs + c * BS, Cfg::kLdC, 0,
                                   cta.out_row + static_cast<int64_t>(wg) * 128 * p.out_cols + column * BS,
                                   p.out_cols, rows, tid & 127);
  }
}

}  // namespace jbs
