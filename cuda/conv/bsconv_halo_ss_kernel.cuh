// Forward / input-gradient kernel of a stride-1 block-sparse convolution whose
// output has its input's image size, for images 8, 16 or 32 pixels wide: the
// halo kernel (conv/bsconv_halo_kernel.cuh) with its activation operand read by
// the tensor cores straight from shared memory.
//
// Why: the halo kernel points each lane's ldmatrix at the tap's shifted row, or
// at a row of zeros where the tap leaves the image, so every tap costs
// fragment loads and per-lane address selects: Nsight Compute found it bound by
// that instruction stream (~1600 warp instructions per item, tensor pipe
// 21-37% active; benchmarks/NOTES.md, session 14). A wgmma descriptor can start
// at any 16-byte boundary, so a tap can be a descriptor offset instead: the halo
// is stored in channel planes with zero-padded image rows (conv/band_halo.cuh).
//
// The tile's 256 rows are 256 / W image rows. Its m64 MMAs are not runs of 64
// rows but 8 x 8 pixel squares: 8 consecutive slots (8 pixels of an image row)
// per core matrix, and the next core matrix one image row (W + 8 slots) further,
// which is the descriptor's stride along m. Warpgroup wg owns squares 2 wg and
// 2 wg + 1, numbered row-major over the tile's (256 / W / 8) x (W / 8) squares;
// the epilogue stages the whole 256-row tile in pixel order. Work unit = (row
// tile, column group), walked by persistent CTAs, one per SM, each taking a run of
// units of equal weight, warp specialized as the strip kernel's
// (conv/bsconv_strip_kernel.cuh): a loader warpgroup's cp.asyncs fill a ring of
// two slots, each item as soon as the consumers release the slot (`empty`), and
// arrive on the slot's `full` mbarrier, across unit boundaries.
// Everything else — the conv's group tables walked as tap 0's union items, two
// ring slots, the taps' weight blocks (conv/tap_blocks.cuh), bs 32 one m64 x 32
// wgmma per present block and bs 16 one zero-filled m64 x 128 — is the halo
// kernel's. Taps run in table order with fixed rows per warp: bitwise
// deterministic.
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/dtype.cuh"
#include "common/mbarrier.cuh"
#include "common/ptx.cuh"
#include "common/smem.cuh"
#include "common/warp_roles.cuh"
#include "common/wgmma.cuh"
#include "conv/band_halo.cuh"
#include "conv/row_gather.h"
#include "conv/tap_blocks.cuh"
#include "conv/unit_cursor.cuh"
#include "matmul/bsmm_group_kernel.cuh"  // GroupParams

namespace jbs {

struct ConvHaloSsParams : GroupParams {
  int nnz_per_tap;      // weight blocks of one tap: w holds taps x nnz_per_tap
  BandHaloShape band;   // the halo's geometry (conv/band_halo.cuh)
  int64_t units;        // row tiles x num_groups: the work items of the persistent CTAs
};

template <typename T, int BS>
struct ConvHaloSsConfig : WarpRoles<104, 200> {
  static_assert(kIs16Bit<T> && (BS == 16 || BS == 32), "conv halo ss kernel: 16-bit types, blocks of 16 or 32");
  static constexpr int kP = 128 / BS;
  static constexpr int kTN = 256;
  static constexpr int kStages = 2;
  static constexpr int kPlanes = BS / 8;
  static constexpr bool kDenseN = BS == 16;  // as the halo kernel
  static constexpr int kTapElems = kP * BS * BS;
  static constexpr int kLdS = kP * BS + 8;  // the epilogue's staged tile: 256 pixels x 128 channels of T
  static constexpr int kOptInBytes = 226 * 1024;  // as the halo kernel
  static constexpr int64_t halo_elems(int plane_slots) { return static_cast<int64_t>(plane_slots) * 8 * kPlanes; }
  // A ring slot: the halo, then every tap's P blocks, whose place also holds the
  // staged output tile (past the halo, so that its zero padding survives).
  static constexpr int64_t slot_elems(int taps, int plane_slots) {
    const int64_t taps_elems = static_cast<int64_t>(taps) * kTapElems;
    return halo_elems(plane_slots) + (taps_elems > kTN * kLdS ? taps_elems : kTN * kLdS);
  }
  static constexpr int64_t smem_bytes(int taps, int plane_slots) {
    return kStages * slot_elems(taps, plane_slots) * static_cast<int64_t>(sizeof(T));
  }
};

template <typename T, int BS, bool TRANS>
__global__ void __launch_bounds__(ConvHaloSsConfig<T, BS>::kThreads, 1)
    bsconv_halo_ss_kernel(const ConvHaloSsParams p) {
  using Cfg = ConvHaloSsConfig<T, BS>;
  constexpr int kP = Cfg::kP;
  constexpr int kTN = Cfg::kTN;
  constexpr int kKSteps = BS / 16;
  unsigned char* const smem_raw = dynamic_smem();
  T* const smem = reinterpret_cast<T*>(smem_raw);
  const RowGather& g = p.gather;
  const int taps = g.taps_h * g.taps_w;
  const int width = g.rows_w, height = g.rows_h;
  const int row_slots = width + kBandPad;
  const int64_t halo_elems = Cfg::halo_elems(p.band.plane_slots);
  const int64_t slot_elems = Cfg::slot_elems(taps, p.band.plane_slots);
  const T* const in_group = static_cast<const T*>(p.in) + blockIdx.y * p.in_group_stride;
  const T* const w = static_cast<const T*>(p.w) + blockIdx.y * p.w_group_stride;

  __shared__ uint64_t full[Cfg::kStages];   // a slot's copies have landed, and its mask is set
  __shared__ uint64_t empty[Cfg::kStages];  // the 8 consumer warps are done with a slot
  __shared__ unsigned slot_mask[Cfg::kStages];  // the slot's item's present columns
  __shared__ int64_t unit_range[2];
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;

  // This CTA's run of units (conv/unit_cursor.cuh: balanced_unit_range).
  if (warp == 0) {
    int64_t first = 0, end = 0;
    balanced_unit_range(p, taps, p.units / p.num_groups, lane, &first, &end);
    if (lane == 0) unit_range[0] = first, unit_range[1] = end;
  }
  // Zeros in both slots' halos once: the pad slots before each image row are never
  // copied to, so they stay zero (the pixels of a band, in the image or not, are
  // copied, zero-filled, for every item).
  for (int64_t i = tid; i < halo_elems / 8; i += Cfg::kThreads) {
#pragma unroll
    for (int s = 0; s < Cfg::kStages; ++s) reinterpret_cast<uint4*>(smem + s * slot_elems)[i] = make_uint4(0, 0, 0, 0);
  }
  if (tid == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) {
      mbarrier_init(&full[s], Cfg::kLoaderThreads + 1);  // every loader's cp.asyncs, and the mask
      mbarrier_init(&empty[s], Cfg::kConsumerThreads / 32);
    }
    mbarrier_init_fence();
  }
  __syncthreads();  // the zeros before any copy into the same slots (racecheck found them racing); the unit run
  const int64_t first_unit = unit_range[0], end_unit = unit_range[1];
  UnitCursor<kP> cursor(p, taps, first_unit, end_unit);

  if (tid >= Cfg::kConsumerThreads) {
    // The loader: item i of the CTA's walk (over all its units) into ring slot i & 1 once
    // the consumers have released item i - 2 there (a fresh barrier's wait on parity 1
    // returns at once): its halo and every tap's P blocks (conv/tap_blocks.cuh).
    warpgroup_reg_dealloc<Cfg::kLoaderRegs>();
    const int ltid = tid - Cfg::kConsumerThreads;
    BandHalo<T, Cfg::kPlanes, Cfg::kLoaderThreads> halo(p.band, width, ltid);
    TapBlockCopies<T, BS, TRANS, Cfg::kDenseN, Cfg::kLoaderThreads> copies(ltid);
    auto on_unit = [&](int64_t tile) { halo.set_tile(tile, width, height); };
    int64_t seq = 0;
    for (bool more = cursor.start(on_unit); more; more = cursor.settle(on_unit), ++seq) {
      const int stage = static_cast<int>(seq & 1);
      int row[1 + kP];
      cursor.row(row);  // before the wait: its latency hides behind it
      copies.for_item(row);
      mbarrier_wait(&empty[stage], static_cast<uint32_t>((seq >> 1) & 1) ^ 1u);
      T* const slot = smem + stage * slot_elems;
      halo.issue(slot, in_group + static_cast<int64_t>(row[0]) * BS, p.band, width, height, p.rows, p.in_cols);
      for (int t = 0; t < taps; ++t) copies.issue(slot + halo_elems + t * Cfg::kTapElems, w, t * p.nnz_per_tap);
      cp_async_arrive_noinc(&full[stage]);
      if (ltid == 0) {
        slot_mask[stage] = present_columns<kP>(row);
        mbarrier_arrive(&full[stage]);  // release: the mask
      }
      ++cursor.item;
    }
    cp_async_wait<0>();
    return;  // the consumers meet at named barriers of their own 256 threads only
  }
  warpgroup_reg_alloc<Cfg::kConsumerRegs>();
  // Broadcast so that the compiler knows it is warp-uniform: the descriptors built
  // from it then stay in uniform registers instead of a move per wgmma.
  const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0);

  // This warpgroup's two 8 x 8 pixel squares: their first tile image row and pixel,
  // and the slot of their first pixel in the halo (tap (0, 0)).
  const int squares_per_row = width / 8;
  int square_row[2], square_x[2], square_slot[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int q = 2 * wg + h;
    square_row[h] = (q / squares_per_row) * 8;
    square_x[h] = (q % squares_per_row) * 8;
    square_slot[h] = band_slot(p.band, width, square_row[h], square_x[h]);
  }

  // Descriptors (common/wgmma.cuh), advanced in their address field, which counts
  // 16-byte units (one halo slot); shared memory is under 256 KiB, so adding to the
  // 64-bit descriptor never carries out of that field. A: K-major, the next 8 channels
  // one plane further (LBO), the next image row of a square one halo row further
  // (SBO). B: the halo kernel's, K-major (dx) or N-major (fwd) blocks, or bs 16's one
  // 128-wide operand.
  const uint32_t plane_units = static_cast<uint32_t>(p.band.plane_slots);
  const uint64_t a_base = wgmma_desc(smem, plane_units * 16, static_cast<uint32_t>(row_slots * 16));
  constexpr uint32_t kCoreRow = BS / 8 * 128;  // one block row of core matrices
  constexpr uint32_t kLboB = Cfg::kDenseN ? (TRANS ? 128 : 16 * 128) : (TRANS ? 128 : kCoreRow);
  constexpr uint32_t kSboB = Cfg::kDenseN ? (TRANS ? BS / 8 * 128 : 128) : (TRANS ? kCoreRow : 128);
  const uint64_t b_base = wgmma_desc(smem, kLboB, kSboB);
  constexpr uint32_t kUnit = 16 / sizeof(T);                     // elements per 16-byte unit
  constexpr uint32_t kBlockUnits = BS * BS / kUnit;
  constexpr uint32_t kTapUnits = Cfg::kTapElems / kUnit;
  constexpr uint32_t kKStepUnitsB = TRANS ? 2 * 8 : 2 * (BS / 8) * 8;  // 16 k rows of B further
  const uint32_t halo_units = static_cast<uint32_t>(halo_elems / kUnit);
  const uint32_t slot_units = static_cast<uint32_t>(slot_elems / kUnit);
  constexpr int kTransB = TRANS ? 0 : 1;

  // kDenseN: one m64 x 128 accumulator per square; otherwise one m64 x BS per block column.
  constexpr int kCols = Cfg::kDenseN ? 1 : kP;
  constexpr int kN = Cfg::kDenseN ? 128 : BS;
  // This warp is done with slot `stage` (its wgmmas drained, or its epilogue read back).
  auto release = [&](int stage) { mbarrier_arrive_warp(&empty[stage], lane); };
  // Unit (tile, group q)'s output: the staged tile cs (rows of kLdS), or zeros where cs
  // is null; 16-byte rows to y.
  auto store_tile = [&](int64_t tile, int q, const T* cs) {
    const int64_t n0 = tile * kTN;
    const int valid_rows = static_cast<int>(p.rows - n0 < kTN ? p.rows - n0 : kTN);
    const int out_blocks = static_cast<int>(p.out_cols / BS);
    const int num_cols = out_blocks - q * kP < kP ? out_blocks - q * kP : kP;
    T* const out = static_cast<T*>(p.out) + blockIdx.y * p.out_group_stride + n0 * p.out_cols +
                   static_cast<int64_t>(q) * kP * BS;
    constexpr int kVec = 8;
    const int chunks_per_row = num_cols * (BS / kVec);
    for (int idx = tid; idx < valid_rows * chunks_per_row; idx += Cfg::kConsumerThreads) {
      const int r = idx / chunks_per_row;
      const int c = (idx - r * chunks_per_row) * kVec;
      *reinterpret_cast<uint4*>(out + r * p.out_cols + c) =
          cs ? *reinterpret_cast<const uint4*>(cs + r * Cfg::kLdS + c) : uint4{};
    }
  };

  float acc[2][kCols][kN / 8][4];
  int64_t seq = 0;  // items computed so far
  for (int64_t unit = first_unit; unit < end_unit; ++unit) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
#pragma unroll
        for (int nt = 0; nt < kN / 8; ++nt) {
          acc[h][c][nt][0] = acc[h][c][nt][1] = acc[h][c][nt][2] = acc[h][c][nt][3] = 0.f;
        }
      }
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
      fence_proxy_async();  // the landed cp.async writes -> visible to wgmma's reads
      const unsigned mask = __shfl_sync(0xffffffffu, slot_mask[stage], 0);  // uniform, see wg
      const uint32_t slot = stage * slot_units;
      const uint64_t a_item[2] = {a_base + slot + square_slot[0], a_base + slot + square_slot[1]};
      const uint64_t b_item = b_base + slot + halo_units;
      wgmma_fence();
      for (int t = 0, kh = 0, kw = 0; t < taps; ++t) {
        const int tap_slots = (g.off_h + kh * g.step_h) * row_slots + g.off_w + kw * g.step_w;  // tap_shift's
        kw = kw + 1 == g.taps_w ? 0 : kw + 1;
        kh = kw == 0 ? kh + 1 : kh;
#pragma unroll
        for (int ks = 0; ks < kKSteps; ++ks) {
          const uint64_t a_desc[2] = {a_item[0] + tap_slots + ks * 2 * plane_units,
                                      a_item[1] + tap_slots + ks * 2 * plane_units};
          const uint64_t b_tap = b_item + t * kTapUnits + ks * kKStepUnitsB;
          if constexpr (Cfg::kDenseN) {
#pragma unroll
            for (int h = 0; h < 2; ++h) wgmma_ss<T, 128, kTransB>(acc[h][0], a_desc[h], b_tap);
          } else {
#pragma unroll
            for (int c = 0; c < kP; ++c) {
              if (!(mask & (1u << c))) continue;
#pragma unroll
              for (int h = 0; h < 2; ++h) wgmma_ss<T, BS, kTransB>(acc[h][c], a_desc[h], b_tap + c * kBlockUnits);
            }
          }
        }
        wgmma_commit();
      }
      wgmma_wait<0>();
      // A unit's last item keeps its slot for the epilogue, released after it.
      if (i + 1 < items) release(stage);
    }

    // The epilogue, staged as T in the weights' place of the unit's last item's slot,
    // which the loader refills only after its release below: row i of a square's m64
    // accumulator is tile row (square_row + i / 8) * W + square_x + i % 8 (warp w holds
    // i = 16 (w % 4) + lane / 4 + {0, 8}).
    named_barrier_sync(1, Cfg::kConsumerThreads);  // both warpgroups are done with the slot's operands
    T* const cs = smem + ((seq + 1) & 1) * slot_elems + halo_elems;
    const int gq = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r0 = (square_row[h] + 2 * (warp & 3)) * width + square_x[h] + gq;
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
#pragma unroll
        for (int nt = 0; nt < kN / 8; ++nt) {
          const int col = c * BS + nt * 8 + 2 * tq;
          T* const upper = cs + r0 * Cfg::kLdS + col;
          T* const lower = cs + (r0 + width) * Cfg::kLdS + col;
          upper[0] = from_float<T>(acc[h][c][nt][0]);
          upper[1] = from_float<T>(acc[h][c][nt][1]);
          lower[0] = from_float<T>(acc[h][c][nt][2]);
          lower[1] = from_float<T>(acc[h][c][nt][3]);
        }
      }
    }
    named_barrier_sync(1, Cfg::kConsumerThreads);
    store_tile(tile, q, cs);
    release(static_cast<int>((seq + 1) & 1));
  }
}

}  // namespace jbs
