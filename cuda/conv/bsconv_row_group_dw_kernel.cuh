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
// the 256-pixel tiles through a ring of kStages (dy's 256 x 64 tile and the
// halo), warp specialized: a loader warpgroup's cp.asyncs arrive on a stage's
// `full` mbarrier, the two consumer warpgroups release it on `empty`. (With one
// CTA barrier per tile and all 256 threads copying, ~2300 of a tile's ~5300
// cycles were MMA: benchmarks/NOTES.md, sessions 16 and 18.) Warpgroup wg takes the tile's k-steps
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
#include "common/warp_roles.cuh"
#include "common/wgmma.cuh"
#include "conv/band_halo.cuh"
#include "conv/halo_tile.cuh"  // tap_shift
#include "conv/row_gather.h"
#include "matmul/bsmm_dw_kernel.cuh"  // DwParams

namespace jbs {

struct ConvRowGroupDwParams : DwParams {
  const int32_t* row_groups;  // (groups, 64 / BS): tap 0's blocks of one block row, -1 past its end
  int nnz_per_tap;            // layout blocks; dw holds taps x nnz_per_tap, tap-major
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
  static constexpr int kStages = 3;
  static constexpr int kPlanes = BS / 8;
  static constexpr int kLdDy = 64 + 8;  // 144-byte rows: ldmatrix.trans without bank conflicts
  static constexpr int kDyElems = kTN * kLdDy;
  static constexpr int kLdE = BS + 4;  // the epilogue's fp32 rows (in-channel n, 32 out-channels)
  static constexpr int kOptInBytes = 226 * 1024;
  static constexpr int64_t halo_elems(int plane_slots) { return static_cast<int64_t>(plane_slots) * 8 * kPlanes; }
  static constexpr int64_t stage_elems(int plane_slots) { return kDyElems + halo_elems(plane_slots); }
  static constexpr int64_t smem_bytes(int taps, int plane_slots) {
    const int64_t ring = kStages * stage_elems(plane_slots) * static_cast<int64_t>(sizeof(T));
    const int64_t epilogue = static_cast<int64_t>(taps) * kGroup * BS * kLdE * 4;
    return ring > epilogue ? ring : epilogue;
  }
};

// TAPS: the filter's taps (its accumulators are TAPS x m64 x BS).
template <typename T, int BS, int TAPS>
__global__ void __launch_bounds__(ConvRowGroupDwConfig<T, BS>::kThreads, 1)
    bsconv_row_group_dw_kernel(const ConvRowGroupDwParams p) {
  using Cfg = ConvRowGroupDwConfig<T, BS>;
  constexpr int kGroup = Cfg::kGroup;
  constexpr int kStages = Cfg::kStages;
  constexpr int kTN = Cfg::kTN;
  unsigned char* const smem_raw = dynamic_smem();
  T* const smem = reinterpret_cast<T*>(smem_raw);
  const RowGather& g = p.gather;
  const int width = g.rows_w, height = g.rows_h;
  const int64_t stage_elems = Cfg::stage_elems(p.band.plane_slots);

  __shared__ uint64_t full[kStages];   // a stage's copies have landed (one arrival per loader thread)
  __shared__ uint64_t empty[kStages];  // the 8 consumer warps are done with a stage
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int64_t grp = blockIdx.y;
  const int32_t* const row_group = p.row_groups + static_cast<int64_t>(blockIdx.x) * kGroup;
  const int first_block = __ldg(row_group);
  const int channel_block = __ldg(p.items + 2 * first_block);  // the group's block row
  const T* const x_col = static_cast<const T*>(p.x) + grp * p.x_group_stride + static_cast<int64_t>(channel_block) * BS;
  const T* const dy_group = static_cast<const T*>(p.dy) + grp * p.dy_group_stride;

  const int64_t all_tiles = (p.rows + kTN - 1) / kTN;
  const int64_t per_split = (all_tiles + p.row_splits - 1) / p.row_splits;
  const int64_t first_tile = min(static_cast<int64_t>(blockIdx.z) * per_split, all_tiles);
  const int64_t num_tiles = min(per_split, all_tiles - first_tile);

  // Zeros in every stage's halo once: the pad slots are never copied to.
  for (int s = 0; s < kStages; ++s) {
    uint4* const halo = reinterpret_cast<uint4*>(smem + s * stage_elems + Cfg::kDyElems);
    for (int64_t i = tid; i < Cfg::halo_elems(p.band.plane_slots) / 8; i += Cfg::kThreads) {
      halo[i] = make_uint4(0, 0, 0, 0);
    }
  }
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(&full[s], Cfg::kLoaderThreads);
      mbarrier_init(&empty[s], Cfg::kConsumerThreads / 32);
    }
    mbarrier_init_fence();
  }
  __syncthreads();  // the zeros before any copy into the same stages; the barriers

  if (tid >= Cfg::kConsumerThreads) {
    // The loader: tile c into stage c % kStages once the consumers have released tile
    // c - kStages there (a fresh barrier's wait on parity 1 returns at once).
    warpgroup_reg_dealloc<Cfg::kLoaderRegs>();
    const int ltid = tid - Cfg::kConsumerThreads;
    BandHalo<T, Cfg::kPlanes, Cfg::kLoaderThreads> halo(p.band, width, ltid);
    // dy's tile: 256 pixels x 64 channels (the group's columns, zeros past its last block),
    // 16 copies per thread: chunk idx = ltid + 128 j: pixel idx / 8, channels (idx % 8) * 8.
    const int chunk = ltid & 7;
    const int member_block = __ldg(row_group + chunk / (BS / 8));
    const bool chunk_present = member_block >= 0;
    const T* const dy_chunk =
        dy_group + (chunk_present ? static_cast<int64_t>(__ldg(p.items + 2 * member_block + 1)) * BS : 0) +
        (chunk % (BS / 8)) * 8;
    constexpr int kPixelStep = Cfg::kLoaderThreads / 8;
    const int first_pixel = ltid >> 3;
    const int64_t src_step = kPixelStep * p.dy_cols;
    for (int64_t c = 0; c < num_tiles; ++c) {
      const int stage = static_cast<int>(c % kStages);
      mbarrier_wait(&empty[stage], static_cast<uint32_t>((c / kStages) & 1) ^ 1u);
      T* const dys = smem + stage * stage_elems;
      const int64_t n0 = (first_tile + c) * kTN;
      // This thread's pixels of the tile, first_pixel + 16 j, by increments (a few
      // instructions a copy: the loader's count per tile is its pace, session 48); those past
      // the batch, or of an absent block, zero-filled.
      const int64_t left = chunk_present ? p.rows - n0 - first_pixel : 0;
      const T* src = dy_chunk + (n0 + first_pixel) * p.dy_cols;
      T* const dst = dys + first_pixel * Cfg::kLdDy + chunk * 8;
#pragma unroll
      for (int j = 0; j < kTN / kPixelStep; ++j) {
        const bool copied = j * kPixelStep < left;
        cp_async_16(dst + j * kPixelStep * Cfg::kLdDy, copied ? src : dy_chunk, copied ? 16 : 0);
        src += src_step;
      }
      halo.set_tile(first_tile + c, width, height);
      halo.issue(dys + Cfg::kDyElems, x_col, p.band, width, height, p.rows, p.x_cols);
      cp_async_arrive_noinc(&full[stage]);
    }
    cp_async_wait<0>();
    return;
  }
  warpgroup_reg_alloc<Cfg::kConsumerRegs>();
  const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0);  // warp-uniform for the compiler

  // B = x_t (k = pixel, n = channel of block row c), N-major: a core matrix is 8
  // consecutive pixel slots of one plane; the next 8 pixels of a k-step are 8 slots
  // further in the same image row (W >= 16) or one halo row further (W = 8): LBO; the
  // next 8 channels one plane further: SBO. Offsets in 16-byte units (slots).
  const int row_slots = width + kBandPad;
  const uint64_t b_base = wgmma_desc(smem, (width >= 16 ? 8 : row_slots) * 16,
                                     static_cast<uint32_t>(p.band.plane_slots) * 16);
  const uint32_t stage_units = static_cast<uint32_t>(stage_elems / 8);
  constexpr uint32_t kDyUnits = Cfg::kDyElems / 8;
  int tap_slots[TAPS];  // tap t's shift of a pixel's slot
#pragma unroll
  for (int t = 0; t < TAPS; ++t) {
    const TapShift s = tap_shift(g, t);
    tap_slots[t] = s.oh * row_slots + s.ow;
  }
  // Slot of the first pixel of this warpgroup's k-steps 8 wg + i (16 pixels each).
  int step_slot[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int pixel = (8 * wg + i) * 16;
    step_slot[i] = band_slot(p.band, width, pixel / width, pixel % width);
  }
  // A = dy^T (m = channel of the group's columns, k = pixel) by ldmatrix.trans of the
  // pixel-major tile: warp w of the warpgroup holds channels 16 (w % 4)...
  const int lr = lane & 7, li = lane >> 3;
  const int a_offset = ((li >> 1) * 8 + lr) * Cfg::kLdDy + 16 * (warp & 3) + (li & 1) * 8;

  float acc[TAPS][BS / 8][4];
#pragma unroll
  for (int t = 0; t < TAPS; ++t) {
#pragma unroll
    for (int nt = 0; nt < BS / 8; ++nt) acc[t][nt][0] = acc[t][nt][1] = acc[t][nt][2] = acc[t][nt][3] = 0.f;
  }
  for (int64_t c = 0; c < num_tiles; ++c) {
    const int read_stage = static_cast<int>(c % kStages);
    mbarrier_wait(&full[read_stage], static_cast<uint32_t>((c / kStages) & 1));
    fence_proxy_async();  // the landed cp.async writes -> visible to wgmma's reads
    const T* const dys = smem + read_stage * stage_elems;
    const uint64_t b_stage = b_base + read_stage * stage_units + kDyUnits;
    // Four batches of two k-steps, each TAPS wgmmas per k-step. A batch's A fragments are
    // loaded while the previous batch's wgmmas run (double-buffered: a batch's buffer is
    // rewritten only once wgmma_wait<1> has retired the batch that read it); the stage's
    // wgmmas are drained before its release lets the loader overwrite it.
    uint32_t a[2][2][4];
    auto load_a = [&](int batch, uint32_t (&buf)[2][4]) {
#pragma unroll
      for (int h = 0; h < 2; ++h) ldsm_x4_t(buf[h], dys + (8 * wg + 2 * batch + h) * 16 * Cfg::kLdDy + a_offset);
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
