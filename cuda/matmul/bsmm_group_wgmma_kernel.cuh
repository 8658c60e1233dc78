// Large-N forward / input-gradient kernel over column groups on Hopper tensor
// cores (wgmma, sm_90a): CTA = (row tile of 256, group of P = 128 / BS output
// block columns, group g); 16-bit types, and fp32 as tf32 (one pass: the default
// precision; HIGHEST keeps the mma.sync kernels' 3xTF32). A matmul's groups are
// its paired ones (columns chosen to share input blocks at bs 16 and 32, so fewer
// union items; tables.py shared_input_order), a conv's its columns in order; the
// epilogue writes each column where the group's map says (GroupColumns).
//
// Same walk as bsmm_group_kernel (the union of the group's input blocks, one
// activation tile per item multiplied by every block present for it), with the
// work split so that no warp depends on the layout: each of the two
// warpgroups owns 128 rows of the 256 x 128 output tile across all P columns
// (two m64 halves). Per item it loads its activation fragments once and issues,
// for every present block, one m64 x BS x 16 wgmma per k-step and half; absent
// blocks are neither loaded nor multiplied. Compared with mma.sync warps
// (benchmarks/NOTES.md, session 4: warps that each re-read every weight block
// from shared memory made the row-split design slower than the first one), a
// warpgroup's wgmma reads each weight block from shared memory once per m64
// for all four of its warps.
//
// Weight blocks sit in shared memory as core matrices without swizzle
// (wgmma.cuh), E = 16 / sizeof(T) elements per 16-byte core-matrix row: element
// (r, c) of a block at ((r/8) * BS/E + c/E) * 8E + (r%8) * E + c%E. The dx reads
// a block as B(k = c, n = r), K-major. The 16-bit fwd reads the same layout as
// B(k = r, n = c), N-major: one layout, two descriptors. tf32 has no N-major B,
// so the fp32 fwd stores each block transposed (element (r, c) where (c, r)
// would go, by 4-byte copies) and reads it K-major too.
//
// PACKED: the activation is the packed copy of matmul/packed_rows.cuh, so an
// item's tile is one contiguous run already in A-register order (whole L2
// lines instead of one 32..128-byte row per line; fp32 already rounded to
// tf32). Otherwise it is read row-major and its fragments with ldmatrix (fp32:
// scalar loads, rounded here).
//
// Items are processed in table order with a fixed assignment of rows, so the
// result is bitwise deterministic. GATHER: as bsmm_blocks_kernel.
#pragma once

#include <cstdint>

#include "common/dtype.cuh"
#include "common/ptx.cuh"
#include "common/smem.cuh"
#include "common/wgmma.cuh"
#include "conv/row_gather.h"
#include "matmul/bsmm_blocks_kernel.cuh"  // BlocksConfig strides, cmin/cmax/cclamp
#include "matmul/bsmm_group_kernel.cuh"   // GroupParams
#include "matmul/group_item_mma.cuh"
#include "matmul/group_slot_loader.cuh"
#include "matmul/packed_rows.cuh"
#include "matmul/tile_io.cuh"
#include "matmul/warp_mma.cuh"

namespace jbs {

// fp32 at bs 64: a packed 256-row slot (64 KB of activations and two 16 KB
// blocks) leaves room for only two stages (one loading while one computes).
template <typename T, int BS>
inline constexpr bool kGroupWgmmaSupported = (kIs16Bit<T> || std::is_same_v<T, float>) && BS >= 16;

// The slot geometry both wgmma group kernels share (this one and
// bsmm_group_ws_kernel.cuh): a CTA tile of 256 rows x P block columns, two
// warpgroups of 128 rows, one union item per slot.
template <typename T, int BS, bool PACKED>
struct GroupWgmmaSlot {
  static_assert(kGroupWgmmaSupported<T, BS>, "wgmma group kernels: 16-bit or fp32 types, blocks of 16..64");
  static constexpr int kP = 128 / BS;
  static constexpr int kTN = 256;
  static_assert(kTN == kPackRowTile, "a packed row tile is one contiguous run");
  static constexpr int kNT = BS / 8;
  static constexpr int kKStep = kWgmmaKStep<T>;
  static constexpr int kKSteps = BS / kKStep;
  static constexpr int kChunkElems = 16 / static_cast<int>(sizeof(T));  // E: a core-matrix row
  // Row-major tiles get ldmatrix-friendly padded rows; packed ones are stored as loaded.
  static constexpr int kLdX = PACKED ? BS : BlocksConfig<T, BS, false, 128>::kLdX;
  static constexpr int kBlockElems = BS * BS;
  // A slot holds one union item: its activation tile, then its P weight blocks.
  static constexpr int kSlotElems = kTN * kLdX + kP * kBlockElems;
  static constexpr int kLdC = 128 + 8;  // the epilogue's staged fp32 rows
  // wgmma descriptors address 16-byte units; keep every block on a core-matrix (128 B) boundary.
  static_assert(kSlotElems * sizeof(T) % 128 == 0 && (kTN * kLdX * sizeof(T)) % 128 == 0, "core matrix alignment");
};

template <typename T, int BS, bool PACKED>
struct GroupWgmmaConfig : GroupWgmmaSlot<T, BS, PACKED> {
  using Slot = GroupWgmmaSlot<T, BS, PACKED>;
  using Slot::kP, Slot::kTN, Slot::kSlotElems, Slot::kLdC;
  static constexpr int kThreads = 256;  // two warpgroups of 128 rows each
  // Union items per stage (= per barrier and wgmma wait); 32 A registers either
  // way for 16-bit types (fp32: one item, 16 / 32 / 64 A registers at bs 16 / 32 /
  // 64). By itself it moved bs 16 by only +/- 3% (benchmarks/NOTES.md, session 6),
  // but the final figures were measured with it, so it stays.
  static constexpr int kItems = !kIs16Bit<T> ? 1 : (BS == 16 ? 4 : (BS == 32 ? 2 : 1));
  static constexpr int kStageElems = kItems * kSlotElems;
  static constexpr int kStageBytes = kStageElems * static_cast<int>(sizeof(T));
  // One CTA per SM: the ring may take most of sm_90's 227 KiB. Only fp32 at bs 64
  // gets the minimum of two (still 1.5-1.9x faster than its mma.sync kernels, session 7).
  static constexpr int kStages = cclamp(216 * 1024 / kStageBytes, 2, 8);
  static_assert(kStages * kStageBytes <= 216 * 1024, "the ring must fit in shared memory");
  // Loads run kAhead stages ahead; the stage refilled at iteration i held
  // iteration i - 1, whose MMAs wgmma_wait<0> retired. (Keeping one stage's
  // wgmmas in flight would need the A fragments double-buffered: the next
  // stage's fragment loads rewrite registers an in-flight wgmma may read, which PTX
  // leaves undefined; ptxas drained the group anyway, so it bought nothing.)
  static constexpr int kAhead = kStages - 1;
  // Per stage and slot, after the ring: the item's present-column mask (int);
  // then two stages' table rows (ints).
  static constexpr int kMaskOffset = kStages * kStageBytes;
  static constexpr int kRowInts = kItems * (1 + kP);
  static constexpr int kRowsOffset = kMaskOffset + kStages * kItems * 4;
  static_assert(kRowInts <= kThreads, "one thread per table int");
  static constexpr int kEpilogueBytes = 128 * kLdC * 4;  // one warpgroup's rows at a time
  static constexpr int kSmemBytes = cmax(kRowsOffset + 2 * kRowInts * 4, kEpilogueBytes);
};

template <typename T, int BS, bool TRANS, bool GATHER, bool PACKED>
__global__ void __launch_bounds__(256, 1) bsmm_group_wgmma_kernel(const GroupParams p) {
  static_assert(!(GATHER && PACKED), "a gathered (conv) activation is not packed");
  using Cfg = GroupWgmmaConfig<T, BS, PACKED>;
  constexpr int kP = Cfg::kP;
  constexpr int kStages = Cfg::kStages;
  constexpr int kTN = Cfg::kTN;
  unsigned char* const smem_raw = dynamic_smem();  // offset 0: core matrices stay 128 B aligned
  T* const smem = reinterpret_cast<T*>(smem_raw);

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int wg = warp >> 2;  // warpgroup: rows wg * 128 ..
  const GroupCta<T, BS, kTN, GATHER> cta(p);
  // How B is read: K-major for the dx and for every tf32 product (see the top).
  constexpr bool kBKMajor = TRANS || !kIs16Bit<T>;
  constexpr bool kTransposeW = !TRANS && !kIs16Bit<T>;
  const int32_t* const items = p.group_items;  // row j: [input block, block of column 0..P-1]

  constexpr bool kPairs = kPairWgmmas<T, BS>;  // adjacent present columns in one wgmma (group_item_mma.cuh)
  GroupSlotLoader<T, BS, kTN, Cfg::kLdX, kTransposeW, GATHER, PACKED, Cfg::kThreads, kPairs && !kBKMajor, kPairs>
      loader;
  loader.init(p, cta, tid);

  // An iteration takes kItems union items (one stage): the barrier, the wait for
  // the wgmmas and the loop overhead are paid once per stage.
  //
  // Table rows reach the loads through shared memory: kRowInts threads each read
  // one int of the rows of stage `it_next + 2` (__ldg, coalesced) and publish it
  // one iteration later into a double buffer that every thread reads after the
  // next barrier. So the global-load latency is off the issue path (read in place
  // it cost ~1000 cycles per item, benchmarks/NOTES.md session 4), and each
  // weight chunk finds its block with one broadcast shared load instead of every
  // thread holding every row in registers (Nsight Compute, session 6: the
  // kernel was bound by dependent integer instructions, ~210 per warp and item).
  // A slot past the group's last item has input -1: nothing is loaded, mask 0.
  constexpr int kItems = Cfg::kItems;
  constexpr int kRowInts = Cfg::kRowInts;
  int* const masks = reinterpret_cast<int*>(smem_raw + Cfg::kMaskOffset);    // [stage][slot]
  int* const row_buf = reinterpret_cast<int*>(smem_raw + Cfg::kRowsOffset);  // [2][slot][1 + kP]
  const int iterations = (cta.end - cta.beg + kItems - 1) / kItems;
  int prefetched = -1;
  auto prefetch_rows = [&](int it) {
    if (tid < kRowInts) {
      const int j = cta.beg + it * kItems + tid / (1 + kP);
      prefetched = it < iterations && j < cta.end
                       ? __ldg(items + static_cast<int64_t>(j) * (1 + kP) + tid % (1 + kP)) : -1;
    }
  };
  auto publish_rows = [&](int buf) {
    if (tid < kRowInts) row_buf[buf * kRowInts + tid] = prefetched;
  };
  auto load_slot = [&](T* xs, const int* r) {
    if (r[0] >= 0) loader.load_activation(xs, r[0], p, cta, tid);
    loader.load_weights(xs + kTN * Cfg::kLdX, [&](int c) { return r[1 + c]; }, cta.w, tid);
  };
  auto load_stage = [&](int stage, const int* rows) {
#pragma unroll
    for (int u = 0; u < kItems; ++u) {
      load_slot(smem + stage * Cfg::kStageElems + u * Cfg::kSlotElems, rows + u * (1 + kP));
    }
    if (tid < kItems) {  // thread u: the present-column mask of slot u
      int mask = 0;
#pragma unroll
      for (int k = 0; k < kP; ++k) mask |= (rows[tid * (1 + kP) + 1 + k] >= 0 ? 1 : 0) << k;
      masks[stage * kItems + tid] = mask;
    }
  };

#pragma unroll 1
  for (int s = 0; s < Cfg::kAhead; ++s) {
    if (s < iterations) {
      prefetch_rows(s);
      publish_rows(0);
      __syncthreads();
      load_stage(s, row_buf);
      __syncthreads();  // row_buf is rewritten next
    }
    cp_async_commit();
  }
  prefetch_rows(Cfg::kAhead);
  publish_rows(0);  // read at iteration 0, after its barrier
  prefetch_rows(Cfg::kAhead + 1);

  const int row_in_wg = (warp & 3) * 16;  // this warp's 16 rows of each m64 half
  float acc[2][kP][1][Cfg::kNT][4] = {};
  int read_stage = 0;
  int write_stage = Cfg::kAhead;
  for (int it = 0; it < iterations; ++it) {
    const int it_next = it + Cfg::kAhead;
    cp_async_wait<Cfg::kAhead - 1>();
    fence_proxy_async();  // this thread's cp.async writes -> visible to wgmma's reads
    __syncthreads();      // stage `it` has landed for all; its masks and row_buf[it & 1] are written
    if (it_next < iterations) load_stage(write_stage, row_buf + (it & 1) * kRowInts);  // its old MMAs retired
    publish_rows((it + 1) & 1);  // last read at iteration it - 1, before this barrier
    prefetch_rows(it_next + 2);
    cp_async_commit();

    // Every slot's A fragments first: a wgmma in flight may still read the
    // registers of its own slot, so no slot's are rewritten before the wait.
    uint32_t a[kItems][2][Cfg::kKSteps][1][4];
#pragma unroll
    for (int u = 0; u < kItems; ++u) {
      load_item_fragments<T, BS, Cfg::kLdX, PACKED>(a[u], smem + read_stage * Cfg::kStageElems + u * Cfg::kSlotElems,
                                                    wg * 128 + row_in_wg, lane);
    }
    wgmma_fence();
#pragma unroll
    for (int u = 0; u < kItems; ++u) {
      const unsigned present = static_cast<unsigned>(masks[read_stage * kItems + u]);  // CTA-uniform
      issue_item_wgmmas<T, BS, kBKMajor, kPairs>(
          acc, a[u], smem + read_stage * Cfg::kStageElems + u * Cfg::kSlotElems + kTN * Cfg::kLdX, present);
    }
    wgmma_commit();
    wgmma_wait<0>();
    read_stage = read_stage + 1 == kStages ? 0 : read_stage + 1;
    write_stage = write_stage + 1 == kStages ? 0 : write_stage + 1;
  }

  // Epilogue, one warpgroup's 128 rows at a time through the drained ring.
  cp_async_wait<0>();
  __syncthreads();
  if (cta.partial_row != nullptr) {  // a slice of the group's items (mid N): its fp32 partial
    store_group_wgmma_tile<float, BS, Cfg::kThreads>(acc, reinterpret_cast<float*>(smem_raw), cta.partial_row,
                                                     p.out_cols, cta.valid_rows, cta.columns, wg, row_in_wg, lane, tid);
  } else {
    store_group_wgmma_tile<T, BS, Cfg::kThreads>(acc, reinterpret_cast<float*>(smem_raw), cta.out_row, p.out_cols,
                                                 cta.valid_rows, cta.columns, wg, row_in_wg, lane, tid);
  }
}

}  // namespace jbs
