// Weight gradient of a stride-1 block-sparse convolution whose output has its
// input's image size, at bs 16 and 32, on images 8, 16 or 32 pixels wide:
// dw[t, b] = x_t[:, c]^T dy[:, k] for every tap t of layout block b = (c, k),
// computed as its transpose dw[t, b]^T = dy[:, k]^T x_t[:, c] on wgmmas.
//
// Why: the halo dw kernel (conv/bsconv_halo_dw_kernel.cuh) runs mma.sync with
// both operands loaded by ldmatrix for every tap: 25-28% of cuDNN's dense rate
// at bs 32, 11-12% at bs 16 (benchmarks/NOTES.md, session 15). Here the wgmma's
// M is 64 output channels: the columns of a row group, 64 / BS consecutive
// blocks of one block row c (jbs/_src/tables.py: dw_row_groups), which all
// share B = x_t[:, c]. A = dy^T of the group's columns is loaded into registers
// once per k-step of 16 pixels and serves every tap; B is read by the tensor
// cores straight from the band halo (conv/band_halo.cuh), a tap being a
// descriptor offset, so a k-step of a 3x3 conv is 9 m64 x BS x 16 wgmmas and one
// ldmatrix per warp. A group cut short by the end of its row multiplies zero
// rows in the missing blocks' part of M.
//
// CTA = (row group, group of the batch, row split z): split z walks its share of
// the 256-pixel tiles through a ring of 3 stages (dy's 256 x 64 tile and the
// halo), warp specialized: one loader thread's TMA boxes (dy's member columns and
// the halo) arrive on a stage's `full` mbarrier, the two consumer warpgroups
// release it on `empty`. (With one CTA barrier per tile and all 256 threads
// copying, ~2300 of a tile's ~5300 cycles were MMA: benchmarks/NOTES.md, sessions
// 16 and 18; with a loader warpgroup's cp.asyncs, ~36 instructions per 16-byte
// halo copy kept the consumers waiting on `full`: session 49.) Warpgroup wg takes the tile's k-steps
// 8 wg .. 8 wg + 7; at the end warpgroup 1's accumulators are added to
// warpgroup 0's in shared memory, and row splits go through `partials` as in
// bsmm_dw_kernel.cuh: every sum has a fixed order, so the result is bitwise
// deterministic.
#pragma once

#include <cstdint>

#include "common/dtype.cuh"
#include "common/mbarrier.cuh"
#include "common/ptx.cuh"
#include "common/smem.cuh"
#include "common/tma.cuh"
#include "common/warp_roles.cuh"
#include "common/wgmma.cuh"
#include "conv/band_halo.cuh"  // band_slot, BandHaloShape
#include "conv/halo_tile.cuh"  // tap_shift
#include "conv/row_gather.h"
#include "matmul/bsmm_dw_kernel.cuh"  // DwParams

namespace jbs {

struct ConvRowGroupDwParams : DwParams {
  CUtensorMap dy_map;         // dy, in boxes of 256 pixels x one block column (conv_row_group_dw_dy_map)
  CUtensorMap x_map;          // x, in boxes of a tile's band halo (conv_row_group_dw_x_map)
  const int32_t* row_groups;  // (groups, 64 / BS): tap 0's blocks of one block row, -1 past its end
  int nnz_per_tap;            // layout blocks; dw holds taps x nnz_per_tap, tap-major
  int stages;                 // the ring's tiles: kStages, or up to kMaxStages (ConvRowGroupDwConfig)
  BandHaloShape band;         // the halo of a 256-pixel tile (conv/band_halo.cuh)
};

// The consumers' 9 taps of bs 32 accumulators take 144 registers: at 184 ptxas
// serialized their wgmmas (C7512).
template <typename T, int BS_>
struct ConvRowGroupDwConfig : WarpRoles<104, 200> {
  static_assert(kIs16Bit<T> && (BS_ == 16 || BS_ == 32), "conv row group dw kernel: 16-bit types, bs 16 or 32");
  static constexpr int BS = BS_;
  static constexpr int kGroup = 64 / BS;  // blocks on an MMA's M
  static constexpr int kTN = 256;      // pixels per tile
  // The ring holds 3 tiles. More fit at times (bs 32 2x3 on 32-pixel images: 4, bs 16: 5),
  // but ran 3-9% slower there (benchmarks/NOTES.md, session 49); JBS_CONV_ROW_GROUP_DW_STAGES=max
  // takes as many as fit, up to kMaxStages (to compare).
  static constexpr int kStages = 3;
  static constexpr int kMaxStages = 5;
  // dy's tile: one TMA box per member block, 256 pixels x BS channels in rows of BS x 2
  // bytes, swizzled as wide as a row (64 bytes at bs 32, 32 at bs 16): then the 8 rows of an
  // ldmatrix.trans (8 consecutive pixels, one 16-byte chunk) fall in distinct banks, as the
  // padded 144-byte rows of the former lane copies did (their ~110 instructions per loader
  // warp and tile were part of the loader's pace: benchmarks/NOTES.md, session 48).
  static constexpr int kMemberElems = kTN * BS;
  static constexpr int kDyElems = kGroup * kMemberElems;
  static constexpr int kSwizzleBytes = BS * 2;  // dy's and the halo's rows (a pixel's BS channels)
  // An ldmatrix row's 16-byte chunk c of pixel p lies at chunk c ^ dy_swizzle(p) of the row
  // (TMA's 64- / 32-byte swizzle: address bits 4.. XOR bits 7..).
  static __device__ __forceinline__ int dy_swizzle(int pixel) { return BS == 32 ? (pixel >> 1) & 3 : (pixel >> 2) & 1; }
  static constexpr int kStageAlign = 1024;  // bytes: every member box on its swizzle's period
  static constexpr int kLdE = BS + 4;  // the epilogue's fp32 rows (in-channel n, 32 out-channels)
  static constexpr int kOptInBytes = 226 * 1024;
  // The halo: the band halo's rows of slots (conv/band_halo.cuh), but a slot is a pixel's BS
  // channels (BS x 2 bytes, swizzled as dy's rows), not one plane's 8: one TMA box of the
  // tile's bands (conv_row_group_dw_x_map) then moves 64- or 32-byte rows, not 16-byte ones
  // (as 16-byte rows the box, like the cp.asyncs before it, kept the consumers waiting on
  // `full`: benchmarks/NOTES.md, session 49). `slots` (BandHaloShape::plane_slots) is exactly
  // the bands' rows; kBandPad zero slots follow, which the last row's shifted pixels read.
  static constexpr int64_t halo_bytes(int slots) { return static_cast<int64_t>(slots) * BS * sizeof(T); }
  static constexpr int64_t halo_elems(int slots) { return (static_cast<int64_t>(slots) + kBandPad) * BS; }
  static constexpr int64_t stage_elems(int plane_slots) {
    constexpr int64_t kAlignElems = kStageAlign / sizeof(T);
    return (kDyElems + halo_elems(plane_slots) + kAlignElems - 1) / kAlignElems * kAlignElems;
  }
  static constexpr int64_t smem_bytes(int taps, int plane_slots, int stages) {
    // (+ the slack that aligns the ring: dynamic shared memory starts 128-byte aligned)
    const int64_t ring = stages * stage_elems(plane_slots) * static_cast<int64_t>(sizeof(T)) + kStageAlign - 128;
    const int64_t epilogue = static_cast<int64_t>(taps) * kGroup * BS * kLdE * 4;
    return ring > epilogue ? ring : epilogue;
  }
  // The most stages that fit kOptInBytes (0: not even kStages).
  static constexpr int stages_for(int taps, int plane_slots) {
    for (int stages = kMaxStages; stages >= kStages; --stages) {
      if (smem_bytes(taps, plane_slots, stages) <= kOptInBytes) return stages;
    }
    return 0;
  }
};

// TAPS: the filter's taps (its accumulators are TAPS x m64 x BS).
template <typename T, int BS, int TAPS>
__global__ void __launch_bounds__(ConvRowGroupDwConfig<T, BS>::kThreads, 1)
    bsconv_row_group_dw_kernel(const __grid_constant__ ConvRowGroupDwParams p) {
  using Cfg = ConvRowGroupDwConfig<T, BS>;
  constexpr int kGroup = Cfg::kGroup;
  const int stages = p.stages;
  constexpr int kTN = Cfg::kTN;
  unsigned char* const smem_raw = dynamic_smem();
  T* const smem = reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(smem_raw) + Cfg::kStageAlign - 1) &
                                       ~static_cast<uintptr_t>(Cfg::kStageAlign - 1));
  const RowGather& g = p.gather;
  const int width = g.rows_w, height = g.rows_h;
  const int64_t stage_elems = Cfg::stage_elems(p.band.plane_slots);

  __shared__ uint64_t full[Cfg::kMaxStages];   // a stage's boxes have landed
  __shared__ uint64_t empty[Cfg::kMaxStages];  // the 8 consumer warps are done with a stage
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int64_t grp = blockIdx.y;
  const int32_t* const row_group = p.row_groups + static_cast<int64_t>(blockIdx.x) * kGroup;
  const int first_block = __ldg(row_group);
  const int channel_block = __ldg(p.items + 2 * first_block);  // the group's block row

  const int64_t all_tiles = (p.rows + kTN - 1) / kTN;
  const int64_t per_split = (all_tiles + p.row_splits - 1) / p.row_splits;
  const int64_t first_tile = min(static_cast<int64_t>(blockIdx.z) * per_split, all_tiles);
  const int64_t num_tiles = min(per_split, all_tiles - first_tile);

  // Zeros in every stage once: the kBandPad slots after the halo, which the last row's shifted
  // pixels read and no box writes. An absent member's part of dy's tile is left as it is:
  // whatever it holds reaches only that member's rows of the accumulators, which the epilogue
  // never stores. (Zeroing whole stages was ~6% of the kernel's samples at a few tiles per
  // CTA: benchmarks/NOTES.md, sessions 49-50.)
  constexpr int kPadQuads = kBandPad * BS / 8;  // 16-byte stores of one stage's pad
  const int64_t pad_quad = (Cfg::kDyElems + Cfg::halo_elems(p.band.plane_slots)) / 8 - kPadQuads;
  for (int i = tid; i < stages * kPadQuads; i += Cfg::kThreads) {
    const int s = i / kPadQuads;
    reinterpret_cast<uint4*>(smem + s * stage_elems)[pad_quad + (i - s * kPadQuads)] = make_uint4(0, 0, 0, 0);
  }
  fence_proxy_async();  // those generic writes before the TMA's async-proxy writes over them
  if (tid == 0) {
    for (int s = 0; s < stages; ++s) {
      mbarrier_init(&full[s], 1);  // the loader thread's arrival, expecting its boxes' bytes
      mbarrier_init(&empty[s], Cfg::kConsumerThreads / 32);
    }
    mbarrier_init_fence();
  }
  __syncthreads();  // the zeros before any copy into the same stages; the barriers

  if (tid >= Cfg::kConsumerThreads) {
    // The loader: tile c into stage c % stages once the consumers have released tile
    // c - stages there (a fresh barrier's wait on parity 1 returns at once). One thread
    // issues every box; the rest of the warpgroup only hands its registers over.
    warpgroup_reg_dealloc<Cfg::kLoaderRegs>();
    if (tid != Cfg::kConsumerThreads) return;
    // dy's tile: member m's column (its block's output channels) as one box of the tile's 256
    // pixels at m * kMemberElems; pixels past the batch read as zeros.
    int member_column[Cfg::kGroup];
    int present = 0;
#pragma unroll
    for (int m = 0; m < Cfg::kGroup; ++m) {
      const int block = __ldg(row_group + m);
      member_column[m] = block >= 0 ? __ldg(p.items + 2 * block + 1) * BS : -1;
      present += block >= 0;
    }
    // The halo: one box of the group's channels, the tile's bands, each band's rows (from
    // `top` above its first image row) and every row's kBandPad + W columns from column
    // -kBandPad: the map's bounds fill the pads, the rows outside the image and the images
    // past the batch with zeros.
    const int x_group = p.x_group_stride != 0 ? static_cast<int>(grp) : 0;
    const int dy_group = p.dy_group_stride != 0 ? static_cast<int>(grp) : 0;
    const int stage_bytes =
        present * Cfg::kMemberElems * static_cast<int>(sizeof(T)) + static_cast<int>(Cfg::halo_bytes(p.band.plane_slots));
    int stage = 0;
    uint32_t phase = 0;  // of the tiles' pass over the ring
    for (int64_t c = 0; c < num_tiles; ++c) {
      mbarrier_wait(&empty[stage], phase ^ 1u);
      T* const dys = smem + stage * stage_elems;
      const int64_t tile = first_tile + c;
      const int n0 = static_cast<int>(tile * kTN);  // (conv_row_group_dw_geometry: rows < 2^31)
      mbarrier_arrive_expect_tx(&full[stage], stage_bytes);
#pragma unroll
      for (int m = 0; m < Cfg::kGroup; ++m) {
        if (member_column[m] >= 0) {
          tma_load_5d(dys + m * Cfg::kMemberElems, &p.dy_map, member_column[m], n0, dy_group, 0, 0, &full[stage]);
        }
      }
      const int first_image_row = n0 / width;
      const int image0 = first_image_row / height;
      const int h0 = first_image_row - image0 * height;
      tma_load_5d(dys + Cfg::kDyElems, &p.x_map, channel_block * BS, -kBandPad, h0 - p.band.top, image0, x_group,
                  &full[stage]);
      if (++stage == stages) stage = 0, phase ^= 1u;
    }
    return;
  }
  warpgroup_reg_alloc<Cfg::kConsumerRegs>();
  const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0);  // warp-uniform for the compiler

  // B = x_t (k = pixel, n = channel of block row c), N-major and swizzled as TMA wrote it:
  // one swizzle atom holds all BS channels (a slot) of 8 consecutive pixels; the next 8
  // pixels of a k-step are 8 slots further in the same image row (W >= 16) or one halo row
  // further (W = 8): SBO. (The hardware swizzles by the absolute address, as TMA does, so a
  // tap's shift is a start address any whole number of slots away: wgmma.cuh.) Offsets in
  // 16-byte units: a slot is BS / 8 of them.
  const int row_slots = width + kBandPad;
  constexpr uint32_t kSlotUnits = BS / 8;
  const uint64_t b_base = wgmma_desc_mn_swizzled<Cfg::kSwizzleBytes>(smem, (width >= 16 ? 8 : row_slots) * kSlotUnits * 16);
  const uint32_t stage_units = static_cast<uint32_t>(stage_elems / 8);
  constexpr uint32_t kDyUnits = Cfg::kDyElems / 8;
  int tap_slots[TAPS];  // tap t's shift of a pixel's slot, in 16-byte units
#pragma unroll
  for (int t = 0; t < TAPS; ++t) {
    const TapShift s = tap_shift(g, t);
    tap_slots[t] = (s.oh * row_slots + s.ow) * kSlotUnits;
  }
  // Slot of the first pixel of this warpgroup's k-steps 8 wg + i (16 pixels each), in 16-byte units.
  int step_slot[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int pixel = (8 * wg + i) * 16;
    step_slot[i] = band_slot(p.band, width, pixel / width, pixel % width) * kSlotUnits;
  }
  // A = dy^T (m = channel of the group's columns, k = pixel) by ldmatrix.trans of the
  // pixel-major tile: warp w of the warpgroup holds channels 16 (w % 4)...; lane l gives
  // matrix l / 8 (pixels + 8 for matrices 2, 3; channels + 8 for 1, 3) its row l % 8: in its
  // member's box, pixel row (k-step) * 16 + ..., 16-byte chunk swizzled by the pixel, whose
  // low 3 bits are the lane's (k-steps and matrices move by multiples of 8 pixels).
  const int lr = lane & 7, li = lane >> 3;
  const int a_channel = 16 * (warp & 3) + (li & 1) * 8;
  const int a_offset = a_channel / BS * Cfg::kMemberElems + ((li >> 1) * 8 + lr) * BS +
                       ((a_channel % BS / 8) ^ Cfg::dy_swizzle(lr)) * 8;

  float acc[TAPS][BS / 8][4];
#pragma unroll
  for (int t = 0; t < TAPS; ++t) {
#pragma unroll
    for (int nt = 0; nt < BS / 8; ++nt) acc[t][nt][0] = acc[t][nt][1] = acc[t][nt][2] = acc[t][nt][3] = 0.f;
  }
  int read_stage = 0;
  uint32_t read_phase = 0;
  for (int64_t c = 0; c < num_tiles; ++c) {
    mbarrier_wait(&full[read_stage], read_phase);
    const T* const dys = smem + read_stage * stage_elems;
    const uint64_t b_stage = b_base + read_stage * stage_units + kDyUnits;
    // Four batches of two k-steps, each TAPS wgmmas per k-step. A batch's A fragments are
    // loaded while the previous batch's wgmmas run (double-buffered: a batch's buffer is
    // rewritten only once wgmma_wait<1> has retired the batch that read it); the stage's
    // wgmmas are drained before its release lets the loader overwrite it.
    uint32_t a[2][2][4];
    auto load_a = [&](int batch, uint32_t (&buf)[2][4]) {
#pragma unroll
      for (int h = 0; h < 2; ++h) ldsm_x4_t(buf[h], dys + (8 * wg + 2 * batch + h) * 16 * BS + a_offset);
    };
    load_a(0, a[0]);
#pragma unroll
    for (int batch = 0; batch < 4; ++batch) {
      wgmma_fence();
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int t = 0; t < TAPS; ++t) {
          wgmma_rs<T, BS, 1>(acc[t], a[batch & 1][h], b_stage + step_slot[2 * batch + h] + tap_slots[t]);
        }
      }
      wgmma_commit();
      if (batch + 1 < 4) {
        wgmma_wait<1>();
        load_a(batch + 1, a[(batch + 1) & 1]);
      }
    }
    wgmma_wait<0>();
    mbarrier_arrive_warp(&empty[read_stage], lane);
    if (++read_stage == stages) read_stage = 0, read_phase ^= 1u;
  }

  // Epilogue: accumulator row m (channel m % BS of member m / BS), column n (input
  // channel) of tap t is dw[t, member's block][n][m % BS]. Staged as
  // [tap][member][n][m % BS] fp32; warpgroup 1 writes, warpgroup 0 adds its own.
  named_barrier_sync(1, Cfg::kConsumerThreads);  // every consumer is done with the ring (the loader too: all landed)
  float* const cs = reinterpret_cast<float*>(smem_raw);
  const int gq = lane >> 2, tq = lane & 3;
  const int m = 16 * (warp & 3) + gq;  // and m + 8, of the same member
  const int member = m / BS, mc = m % BS;
  for (int pass = 1; pass >= 0; --pass) {
    if (wg == pass) {
#pragma unroll
      for (int t = 0; t < TAPS; ++t) {
        float* const tile = cs + (t * kGroup + member) * BS * Cfg::kLdE;
#pragma unroll
        for (int nt = 0; nt < BS / 8; ++nt) {
          const int n = nt * 8 + 2 * tq;
          float* const e = tile + n * Cfg::kLdE + mc;
          const bool add = pass == 0;  // the sum is acc_wg0 + acc_wg1, in that order
          e[0] = acc[t][nt][0] + (add ? e[0] : 0.f);
          e[Cfg::kLdE] = acc[t][nt][1] + (add ? e[Cfg::kLdE] : 0.f);
          e[8] = acc[t][nt][2] + (add ? e[8] : 0.f);
          e[Cfg::kLdE + 8] = acc[t][nt][3] + (add ? e[Cfg::kLdE + 8] : 0.f);
        }
      }
    }
    named_barrier_sync(1, Cfg::kConsumerThreads);
  }
  const int64_t nnz = static_cast<int64_t>(TAPS) * p.nnz_per_tap;
  for (int idx = tid; idx < TAPS * kGroup * BS * (BS / 4); idx += Cfg::kConsumerThreads) {
    const int quad = idx % (BS / 4), n = (idx / (BS / 4)) % BS, tm = idx / (BS / 4) / BS;
    const int t = tm / kGroup, member_of = tm % kGroup;
    const int b = __ldg(row_group + member_of);
    if (b < 0) continue;
    const float4 v = *reinterpret_cast<const float4*>(cs + ((t * kGroup + member_of) * BS + n) * Cfg::kLdE + quad * 4);
    const int64_t block = static_cast<int64_t>(t) * p.nnz_per_tap + b;
    if (p.row_splits > 1) {
      float* const partial = p.partials + ((grp * p.row_splits + blockIdx.z) * nnz + block) * (BS * BS);
      *reinterpret_cast<float4*>(partial + n * BS + quad * 4) = v;
    } else {
      T* const out = static_cast<T*>(p.dw) + grp * p.dw_group_stride + block * (BS * BS) + n * BS + quad * 4;
      out[0] = from_float<T>(v.x);
      out[1] = from_float<T>(v.y);
      out[2] = from_float<T>(v.z);
      out[3] = from_float<T>(v.w);
    }
  }
}

}  // namespace jbs
