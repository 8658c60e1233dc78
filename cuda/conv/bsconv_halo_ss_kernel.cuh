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
// at any 16-byte boundary, so a tap can be a descriptor offset instead, if
// (1) a shift of rows is a shift of addresses and (2) the zeros the tap must
// read are in shared memory too. So the halo is stored as:
//  * channel planes: plane j holds channels 8j..8j+7 of every pixel, one 16-byte
//    slot per pixel (a wgmma core matrix is then 8 consecutive slots);
//  * rows of W + 8 slots: 8 zero slots, then the W pixels of one image row. A
//    tap's column shift ow (|ow| <= 8) lands in those zeros at the image's
//    edges, its row shift oh moves by whole rows;
//  * one band per image in the tile: the tile's rows of that image plus `top`
//    rows above and `bottom` below, zero where they leave the image.
// A CTA's tile never changes, so the zeros are written once; each item copies
// only the image's pixels.
//
// The tile's 256 rows are 256 / W image rows. Its m64 MMAs are not runs of 64
// rows but 8 x 8 pixel squares: 8 consecutive slots (8 pixels of an image row)
// per core matrix, and the next core matrix one image row (W + 8 slots) further,
// which is the descriptor's stride along m. Warpgroup wg owns squares 2 wg and
// 2 wg + 1, numbered row-major over the tile's (256 / W / 8) x (W / 8) squares;
// the epilogue stages the whole 256-row tile in pixel order. Everything else —
// CTA = (row tile, column group), the conv's group tables walked as tap 0's
// union items, two ring slots, the taps' weight blocks (conv/tap_blocks.cuh),
// bs 32 one m64 x 32 wgmma per present block and bs 16 one zero-filled
// m64 x 128 — is the halo kernel's. Taps run in table order with fixed rows per
// warp: bitwise deterministic.
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/dtype.cuh"
#include "common/ptx.cuh"
#include "common/smem.cuh"
#include "common/wgmma.cuh"
#include "conv/row_gather.h"
#include "conv/tap_blocks.cuh"
#include "matmul/bsmm_group_kernel.cuh"  // GroupParams, GroupCta
#include "matmul/tile_io.cuh"

namespace jbs {

struct ConvHaloSsParams : GroupParams {
  int nnz_per_tap;      // weight blocks of one tap: w holds taps x nnz_per_tap
  int top;              // band rows above a tile's first image row: max(0, -min oh)
  int band_rows;        // rows of one image's band: image_rows + top + bottom
  int image_rows;       // rows of one image in a tile: min(256 / W, H)
  int plane_slots;      // 16-byte slots of one channel plane (a multiple of 8)
  int halo_copies;      // 16-byte copies of an item's halo: bands x band_rows x W x BS / 8
};

template <typename T, int BS>
struct ConvHaloSsConfig {
  static_assert(kIs16Bit<T> && (BS == 16 || BS == 32), "conv halo ss kernel: 16-bit types, blocks of 16 or 32");
  static constexpr int kP = 128 / BS;
  static constexpr int kTN = 256;
  static constexpr int kThreads = 256;
  static constexpr int kStages = 2;
  static constexpr int kPlanes = BS / 8;
  static constexpr int kPad = 8;  // zero slots before each image row: column shifts up to 8
  static constexpr int kMaxCopiesPerThread = 8;  // the halo's copies, kept in registers
  static constexpr bool kDenseN = BS == 16;  // as the halo kernel
  static constexpr bool kInterleaveCopies = !kDenseN;
  static constexpr int kTapElems = kP * BS * BS;
  static constexpr int kLdC = 128 + 8;
  static constexpr int kOptInBytes = 226 * 1024;  // as the halo kernel
  static constexpr int64_t halo_elems(int plane_slots) { return static_cast<int64_t>(plane_slots) * 8 * kPlanes; }
  static constexpr int64_t slot_elems(int taps, int plane_slots) {
    return halo_elems(plane_slots) + static_cast<int64_t>(taps) * kTapElems;
  }
  static constexpr int64_t smem_bytes(int taps, int plane_slots) {
    const int64_t ring = kStages * slot_elems(taps, plane_slots) * static_cast<int64_t>(sizeof(T));
    const int64_t epilogue = static_cast<int64_t>(kTN) * kLdC * 4;  // the whole tile at once
    return ring > epilogue ? ring : epilogue;
  }
};

template <typename T, int BS, bool TRANS>
__global__ void __launch_bounds__(256, 1) bsconv_halo_ss_kernel(const ConvHaloSsParams p) {
  using Cfg = ConvHaloSsConfig<T, BS>;
  constexpr int kP = Cfg::kP;
  constexpr int kTN = Cfg::kTN;
  constexpr int kKSteps = BS / 16;
  unsigned char* const smem_raw = dynamic_smem();
  T* const smem = reinterpret_cast<T*>(smem_raw);
  const RowGather& g = p.gather;
  const int taps = g.taps_h * g.taps_w;
  const int width = g.rows_w;
  const int row_slots = width + Cfg::kPad;
  const int band_slots = p.band_rows * row_slots;
  const int64_t plane_elems = static_cast<int64_t>(p.plane_slots) * 8;
  const int64_t halo_elems = Cfg::halo_elems(p.plane_slots);
  const int64_t slot_elems = Cfg::slot_elems(taps, p.plane_slots);

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  // Broadcast so that the compiler knows it is warp-uniform: the descriptors built
  // from it then stay in uniform registers instead of a move per wgmma.
  const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0);
  const GroupCta<T, BS, kTN, true> cta(p);
  const int items = (cta.end - cta.beg) / taps;  // tap 0's: the group's channel blocks
  const int32_t* const rows_of = p.group_items + static_cast<int64_t>(cta.beg) * (1 + kP);

  // Zeros in both slots' halos once: whatever no item copies (padding) stays zero.
  for (int64_t i = tid; i < halo_elems / 8; i += Cfg::kThreads) {
#pragma unroll
    for (int s = 0; s < Cfg::kStages; ++s) reinterpret_cast<uint4*>(smem + s * slot_elems)[i] = make_uint4(0, 0, 0, 0);
  }
  __syncthreads();  // the zeros before any copy into the same slots (racecheck found them racing)

  // This thread's halo copies, the same for every item but for the channel block:
  // copy idx = ((band * band_rows + y) * W + x) * planes + plane.
  const int64_t first_image_row = cta.n0 / width;  // W divides 256: tiles start on image rows
  const int64_t image0 = first_image_row / g.rows_h;
  const int h0 = static_cast<int>(first_image_row - image0 * g.rows_h);
  int64_t copy_src[Cfg::kMaxCopiesPerThread];
  int copy_dst[Cfg::kMaxCopiesPerThread];
#pragma unroll
  for (int k = 0; k < Cfg::kMaxCopiesPerThread; ++k) {
    const int idx = tid + k * Cfg::kThreads;
    const int plane = idx % Cfg::kPlanes;
    const int pixel = idx / Cfg::kPlanes;
    const int x = pixel % width;
    const int band_row = pixel / width;
    const int band = band_row / p.band_rows;
    const int y = band_row - band * p.band_rows;
    const int h = h0 + y - p.top;
    const int64_t n = ((image0 + band) * g.rows_h + h) * width + x;
    const bool copied = idx < p.halo_copies && h >= 0 && h < g.rows_h && n < p.rows;
    copy_src[k] = copied ? n * p.in_cols + plane * 8 : 0;
    copy_dst[k] = copied ? static_cast<int>(plane * plane_elems + (band * band_slots + y * row_slots + Cfg::kPad + x) * 8) : -1;
  }
  auto load_halo = [&](T* dst, int block) {
    const T* const column = cta.in_group + static_cast<int64_t>(block) * BS;
#pragma unroll
    for (int k = 0; k < Cfg::kMaxCopiesPerThread; ++k) {
      if (copy_dst[k] >= 0) cp_async_16(dst + copy_dst[k], column + copy_src[k], 16);
    }
  };
  // One tap's P blocks (conv/tap_blocks.cuh), of the item last given to copies.for_item.
  TapBlockCopies<T, BS, TRANS, Cfg::kDenseN, Cfg::kThreads> copies(tid);
  auto load_tap = [&](T* dst, int shift) { copies.issue(dst, cta.w, shift); };
  auto load_item = [&](T* slot, const int (&row)[1 + kP]) {
    load_halo(slot, row[0]);
    for (int t = 0; t < taps; ++t) load_tap(slot + halo_elems + t * Cfg::kTapElems, t * p.nnz_per_tap);
  };
  auto mask_of = [](const int (&row)[1 + kP]) { return present_columns<kP>(row); };
  auto read_row = [&](int i, int (&row)[1 + kP]) { read_union_row<kP>(rows_of, i, row); };

  // This warpgroup's two 8 x 8 pixel squares: their first tile image row and pixel,
  // and the slot of their first pixel in the halo (tap (0, 0)).
  const int squares_per_row = width / 8;
  int square_row[2], square_x[2], square_slot[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int q = 2 * wg + h;
    square_row[h] = (q / squares_per_row) * 8;
    square_x[h] = (q % squares_per_row) * 8;
    const int band = square_row[h] / p.image_rows;
    const int y = p.top + square_row[h] - band * p.image_rows;
    square_slot[h] = band * band_slots + y * row_slots + Cfg::kPad + square_x[h];
  }

  int next[1 + kP];
  unsigned mask_next = 0;
  if (items > 0) {
    read_row(0, next);
    copies.for_item(next);
    load_item(smem, next);
    mask_next = mask_of(next);
    if (items > 1) read_row(1, next);
  }
  cp_async_commit();

  // Descriptors (common/wgmma.cuh), advanced in their address field, which counts
  // 16-byte units (one halo slot); shared memory is under 256 KiB, so adding to the
  // 64-bit descriptor never carries out of that field. A: K-major, the next 8 channels
  // one plane further (LBO), the next image row of a square one halo row further
  // (SBO). B: the halo kernel's, K-major (dx) or N-major (fwd) blocks, or bs 16's one
  // 128-wide operand.
  const uint32_t plane_units = static_cast<uint32_t>(p.plane_slots);
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
  float acc[2][kCols][kN / 8][4] = {};
  for (int i = 0; i < items; ++i) {
    cp_async_wait<0>();
    fence_proxy_async();  // cp.async and zero writes -> visible to wgmma's reads
    __syncthreads();      // item i has landed for all; everybody is done with item i - 1's slot
    const unsigned mask = __shfl_sync(0xffffffffu, mask_next, 0);  // uniform, see wg
    const bool more = i + 1 < items;
    T* const next_slot = smem + ((i + 1) & 1) * slot_elems;
    if (more) {
      mask_next = mask_of(next);
      copies.for_item(next);
      if (!Cfg::kInterleaveCopies) load_item(next_slot, next);
    }

    const uint32_t slot = (i & 1) * slot_units;
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
      // The next item's copies (its halo, then two taps' worth per tap) while the wgmmas run.
      if (Cfg::kInterleaveCopies && more) {
        if (t == 0) load_halo(next_slot, next[0]);
        for (int u = 2 * t; u < 2 * t + 2 && u < taps; ++u) {
          load_tap(next_slot + halo_elems + u * Cfg::kTapElems, u * p.nnz_per_tap);
        }
      }
    }
    wgmma_wait<0>();
    if (more && i + 2 < items) read_row(i + 2, next);
    cp_async_commit();
  }

  cp_async_wait<0>();
  __syncthreads();
  // The whole tile in pixel order: row (square_row + i / 8) * W + square_x + i % 8 for
  // row i of a square's m64 accumulator (warp w holds i = 16 (w % 4) + lane / 4 + {0, 8}).
  float* const cs = reinterpret_cast<float*>(smem_raw);
  const int gq = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r0 = (square_row[h] + 2 * (warp & 3)) * width + square_x[h] + gq;
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
#pragma unroll
      for (int nt = 0; nt < kN / 8; ++nt) {
        const int col = c * BS + nt * 8 + 2 * tq;
        *reinterpret_cast<float2*>(cs + r0 * Cfg::kLdC + col) = make_float2(acc[h][c][nt][0], acc[h][c][nt][1]);
        *reinterpret_cast<float2*>(cs + (r0 + width) * Cfg::kLdC + col) =
            make_float2(acc[h][c][nt][2], acc[h][c][nt][3]);
      }
    }
  }
  __syncthreads();
  for (int c = 0; c < cta.num_cols; ++c) {
    store_tile<T, kTN, BS, Cfg::kThreads, 1>(cs + c * BS, Cfg::kLdC, 0, cta.out + c * BS, p.out_cols, cta.valid_rows,
                                             tid);
  }
}

}  // namespace jbs
