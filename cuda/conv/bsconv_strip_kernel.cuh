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
// The N side: a wgmma's B core matrices must lie at one stride, so the pixels
// of an MMA form a strip 8 pixels wide and R = min(H, 32) rows tall, core matrix
// j being image row j of the strip; a tile is 32 / R such strips (256 pixels).
// The halo holds, per strip, rows -top .. R + bottom of 16-byte slots in
// channel planes (as the ss kernel's), each row 16 slots: pixels x0 - 8 .. x0 + 7
// at 0 .. 15, so a strip row's left neighbours (up to `left`) sit below its 8
// pixels and its right ones (up to `right`, left + right <= 8) at the start of
// the next row. Slots outside the image stay zero (written once per CTA).
//
// CTA = (tile, group of 4 output block columns); warpgroup wg owns columns 2 wg
// and 2 wg + 1 for all 256 pixels (an m64 x 256 fp32 accumulator). Items are the
// group's union items (the conv's group tables, tap 0's, as the halo kernels);
// per item every tap's present blocks arrive by bulk copies on the slot's
// mbarrier and the halo by cp.async. Taps run in table order: deterministic.
#pragma once

#include <cstdint>

#include "common/dtype.cuh"
#include "common/mbarrier.cuh"
#include "common/ptx.cuh"
#include "common/smem.cuh"
#include "common/wgmma.cuh"
#include "conv/row_gather.h"
#include "conv/tap_blocks.cuh"           // read_union_row, present_columns
#include "matmul/bsmm_group_kernel.cuh"  // GroupParams, GroupCta

namespace jbs {

struct ConvStripParams : GroupParams {
  int nnz_per_tap;  // weight blocks of one tap: w holds taps x nnz_per_tap
  int top;          // halo rows above a strip: max(0, -min oh)
  int band_rows;    // halo rows per strip: R + top + bottom
  int left, right;  // pixels the taps reach left / right of a strip: -min ow, max ow
  int plane_slots;  // 16-byte slots of one channel plane
  int halo_copies;  // 16-byte copies of an item's halo (strips x band_rows x (8 + left + right) x 4)
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
  static constexpr int kRowSlots = 16;
  static constexpr int kMaxCopiesPerThread = 8;
  static constexpr int kBlockElems = BS * BS;
  static constexpr int kTapElems = kP * kBlockElems;
  static constexpr int kLdC = 128 + 8;  // the epilogue's staged tile: pixels x channels
  static constexpr int kOptInBytes = 226 * 1024;
  static constexpr int64_t halo_elems(int plane_slots) { return static_cast<int64_t>(plane_slots) * 8 * kPlanes; }
  static constexpr int64_t slot_elems(int taps, int plane_slots) {
    return halo_elems(plane_slots) + static_cast<int64_t>(taps) * kTapElems;
  }
  static constexpr int64_t smem_bytes(int taps, int plane_slots) {
    const int64_t ring = kStages * slot_elems(taps, plane_slots) * static_cast<int64_t>(sizeof(T));
    const int64_t epilogue = 256 * kLdC * 4;
    return ring > epilogue ? ring : epilogue;
  }
};

// TAPS_PER_WAIT (3 or 2) divides the taps (see run_taps).
template <typename T, int R, int TAPS_PER_WAIT, bool TRANS>
__global__ void __launch_bounds__(256, 1) bsconv_strip_kernel(const ConvStripParams p) {
  using Cfg = ConvStripConfig<T, R>;
  constexpr int BS = Cfg::BS;
  constexpr int kP = Cfg::kP;
  constexpr int kN = Cfg::kN;
  constexpr int kStrips = Cfg::kStrips;
  constexpr int kRowSlots = Cfg::kRowSlots;
  __shared__ uint64_t full[Cfg::kStages];  // the weights' bulk copies of a slot
  unsigned char* const smem_raw = dynamic_smem();
  T* const smem = reinterpret_cast<T*>(smem_raw);
  const RowGather& g = p.gather;
  const int taps = g.taps_h * g.taps_w;
  const int width = g.rows_w, height = g.rows_h;
  const int band_slots = p.band_rows * kRowSlots;
  const int64_t plane_elems = static_cast<int64_t>(p.plane_slots) * 8;
  const int64_t halo_elems = Cfg::halo_elems(p.plane_slots);
  const int64_t slot_elems = Cfg::slot_elems(taps, p.plane_slots);

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0);  // warp-uniform for the compiler
  const GroupCta<T, BS, 256, true> cta(p);                 // its n0 / out / valid_rows are unused
  const int items = (cta.end - cta.beg) / taps;
  const int32_t* const rows_of = p.group_items + static_cast<int64_t>(cta.beg) * (1 + kP);

  // The tile's strips: image, first row and first pixel; strips past the batch are empty.
  const int64_t tile = blockIdx.x / static_cast<unsigned>(p.num_groups);
  const int strips_per_column = height / R;
  const int strips_per_image = strips_per_column * (width / 8);
  const int64_t images = p.rows / (static_cast<int64_t>(height) * width);
  int64_t strip_image[kStrips];
  int strip_h0[kStrips], strip_x0[kStrips];
#pragma unroll
  for (int s = 0; s < kStrips; ++s) {
    const int64_t strip = tile * kStrips + s;
    strip_image[s] = strip / strips_per_image;
    const int rem = static_cast<int>(strip - strip_image[s] * strips_per_image);
    strip_h0[s] = (rem % strips_per_column) * R;
    strip_x0[s] = (rem / strips_per_column) * 8;
  }

  if (tid == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) mbarrier_init(&full[s], 1);
    mbarrier_init_fence();
  }
  // Zeros in both slots' halos once: whatever no item copies (padding) stays zero.
  for (int64_t i = tid; i < halo_elems / 8; i += Cfg::kThreads) {
#pragma unroll
    for (int s = 0; s < Cfg::kStages; ++s) reinterpret_cast<uint4*>(smem + s * slot_elems)[i] = make_uint4(0, 0, 0, 0);
  }
  __syncthreads();  // barriers initialised

  // This thread's halo copies (the same for every item but for the channel block):
  // idx = ((strip * band_rows + y) * span + dx) * planes + plane, span = left + 8 + right.
  const int span = p.left + 8 + p.right;
  int64_t copy_src[Cfg::kMaxCopiesPerThread];
  int copy_dst[Cfg::kMaxCopiesPerThread];
#pragma unroll
  for (int k = 0; k < Cfg::kMaxCopiesPerThread; ++k) {
    const int idx = tid + k * Cfg::kThreads;
    const int plane = idx % Cfg::kPlanes;
    const int pixel = idx / Cfg::kPlanes;
    const int dx = pixel % span;
    const int strip_row = pixel / span;
    const int s = strip_row / p.band_rows;
    const int y = strip_row - s * p.band_rows;
    int64_t image = 0;
    int h0 = 0, x0 = 0;
#pragma unroll
    for (int q = 0; q < kStrips; ++q) {
      image = q == s ? strip_image[q] : image;
      h0 = q == s ? strip_h0[q] : h0;
      x0 = q == s ? strip_x0[q] : x0;
    }
    const int h = h0 + y - p.top;
    const int x = x0 - p.left + dx;
    const bool copied = idx < p.halo_copies && image < images && h >= 0 && h < height && x >= 0 && x < width;
    const int64_t n = (image * height + h) * width + x;
    copy_src[k] = copied ? n * p.in_cols + plane * 8 : 0;
    copy_dst[k] =
        copied ? static_cast<int>(plane * plane_elems + (s * band_slots + y * kRowSlots + 8 - p.left + dx) * 8) : -1;
  }
  // Shared-memory pointer arithmetic in elements: slots are 8 elements.
  auto load_halo = [&](T* dst, int block) {
    const T* const column = cta.in_group + static_cast<int64_t>(block) * BS;
#pragma unroll
    for (int k = 0; k < Cfg::kMaxCopiesPerThread; ++k) {
      if (copy_dst[k] >= 0) cp_async_16(dst + copy_dst[k], column + copy_src[k], 16);
    }
  };
  // Every tap's present blocks, raw (row-major, BS x BS) at tap t, column q: one bulk
  // copy each by the lanes of warp 0, on the slot's barrier.
  auto load_weights = [&](T* dst, const int (&row)[1 + kP], int stage) {
    if (warp != 0) return;
    const unsigned mask = present_columns<kP>(row);
    if (lane == 0) mbarrier_arrive_expect_tx(&full[stage], taps * __popc(mask) * Cfg::kBlockElems * sizeof(T));
    __syncwarp();
    fence_proxy_async();  // earlier ldmatrix reads of this slot (ordered by the CTA barrier) before the copies
    for (int j = lane; j < taps * kP; j += 32) {
      const int t = j / kP, q = j - t * kP;
      int block = -1;
#pragma unroll
      for (int c = 0; c < kP; ++c) block = c == q ? row[1 + c] : block;
      if (block >= 0) {
        bulk_copy_g2s(dst + halo_elems + j * Cfg::kBlockElems,
                      cta.w + static_cast<int64_t>(block + t * p.nnz_per_tap) * Cfg::kBlockElems,
                      Cfg::kBlockElems * sizeof(T), &full[stage]);
      }
    }
  };
  auto read_row = [&](int i, int (&row)[1 + kP]) { read_union_row<kP>(rows_of, i, row); };

  // The table is read one item ahead of the loads, so its latency hides behind an item's MMAs.
  int next[1 + kP];  // item i + 1's row while item i runs
  unsigned mask_of_item = 0;
  if (items > 0) {
    read_row(0, next);
    load_halo(smem, next[0]);
    load_weights(smem, next, 0);
    mask_of_item = present_columns<kP>(next);
    if (items > 1) read_row(1, next);
  }
  cp_async_commit();

  // B (the halo) K-major: the next 8 channels one plane further (LBO), the next
  // strip row (core matrix along n) one halo row further (SBO). Offsets in the
  // descriptor's 16-byte units (one slot); shared memory is under 256 KiB, so
  // adding to the descriptor never carries out of the address field.
  const uint64_t b_base = wgmma_desc(smem, static_cast<uint32_t>(p.plane_slots) * 16, kRowSlots * 16);
  const uint32_t slot_units = static_cast<uint32_t>(slot_elems / 8);
  // This warp's 16 rows of the warpgroup's m64: output channels (warp % 4 % 2) * 16..
  // of block column 2 wg + (warp % 4) / 2.
  const int my_column = 2 * wg + (warp & 3) / 2;
  const int m_in_block = (warp & 1) * 16;
  const int lr = lane & 7, li = lane >> 3;

  float acc[kStrips][kN / 8][4] = {};
  for (int i = 0; i < items; ++i) {
    const int stage = i & 1;
    cp_async_wait<0>();
    mbarrier_wait(&full[stage], (i >> 1) & 1);
    fence_proxy_async();  // cp.async and zero writes -> visible to wgmma's reads
    __syncthreads();      // item i has landed for all; everybody is done with item i - 1's slot
    const unsigned mask = __shfl_sync(0xffffffffu, mask_of_item, 0);  // uniform, see wg
    if (i + 1 < items) {
      T* const next_slot = smem + (stage ^ 1) * slot_elems;
      load_halo(next_slot, next[0]);
      load_weights(next_slot, next, stage ^ 1);
      mask_of_item = present_columns<kP>(next);
      if (i + 2 < items) read_row(i + 2, next);
    }
    cp_async_commit();
    const bool mine = (mask >> (2 * wg)) & 3u;  // this warpgroup has a block of the item
    const bool my_block = (mask >> my_column) & 1u;
    const T* const ws = smem + stage * slot_elems + halo_elems;
    const uint64_t b_item = b_base + stage * slot_units;
    // NTAPS = TAPS_PER_WAIT taps from t: their A fragments, then their wgmmas and one
    // wait. NTAPS divides the taps: a batch with a tap to skip (a branch between
    // wgmmas), or a second loop for the remainder, made ptxas serialize every wgmma
    // (C7520).
    int kh = 0, kw = 0;
    auto run_taps = [&](int t) {
      constexpr int NTAPS = TAPS_PER_WAIT;
      uint32_t a[NTAPS][2][4];
      int tap_slots[NTAPS];
#pragma unroll
      for (int j = 0; j < NTAPS; ++j) {
        tap_slots[j] = (g.off_h + kh * g.step_h + p.top) * kRowSlots + 8 + g.off_w + kw * g.step_w;
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
            const uint64_t b = b_item + s * (p.band_rows * kRowSlots) + tap_slots[j] + ks * 2 * p.plane_slots;
            wgmma_rs<T, kN, 0>(acc[s], a[j][ks], b);
          }
        }
      }
      wgmma_commit();
      wgmma_wait<0>();
    };
    if (mine) {
      for (int t = 0; t < taps; t += TAPS_PER_WAIT) run_taps(t);
    }
  }

  cp_async_wait<0>();
  __syncthreads();
  // Stage the tile as pixels x channels: accumulator row m (channel 64 wg + m) and
  // column n of strip s (its row n / 8, pixel n % 8) to cs[s * kN + n][64 wg + m].
  float* const cs = reinterpret_cast<float*>(smem_raw);
  const int gq = lane >> 2, tq = lane & 3;
  const int m0 = 64 * wg + 16 * (warp & 3) + gq;
#pragma unroll
  for (int s = 0; s < kStrips; ++s) {
#pragma unroll
    for (int nt = 0; nt < kN / 8; ++nt) {
      const int n = s * kN + nt * 8 + 2 * tq;
      cs[n * Cfg::kLdC + m0] = acc[s][nt][0];
      cs[(n + 1) * Cfg::kLdC + m0] = acc[s][nt][1];
      cs[n * Cfg::kLdC + m0 + 8] = acc[s][nt][2];
      cs[(n + 1) * Cfg::kLdC + m0 + 8] = acc[s][nt][3];
    }
  }
  __syncthreads();
  // 16-byte stores: pixel, column, 8 channels.
  constexpr int kVec = 8;
  T* const out_group = static_cast<T*>(p.out) + blockIdx.y * p.out_group_stride +
                       static_cast<int64_t>(blockIdx.x % static_cast<unsigned>(p.num_groups)) * kP * BS;
  const int chunks = 256 * cta.num_cols * (BS / kVec);
  for (int idx = tid; idx < chunks; idx += Cfg::kThreads) {
    const int pixel = idx / (cta.num_cols * (BS / kVec));
    const int c = (idx % (cta.num_cols * (BS / kVec))) * kVec;
    const int s = pixel / kN, n = pixel % kN;
    int64_t image = 0;
    int h0 = 0, x0 = 0;
#pragma unroll
    for (int q = 0; q < kStrips; ++q) {
      image = q == s ? strip_image[q] : image;
      h0 = q == s ? strip_h0[q] : h0;
      x0 = q == s ? strip_x0[q] : x0;
    }
    if (image >= images) continue;
    const int64_t row = (image * height + h0 + n / 8) * width + x0 + n % 8;
    alignas(16) T packed[kVec];
#pragma unroll
    for (int e = 0; e < kVec; ++e) packed[e] = from_float<T>(cs[pixel * Cfg::kLdC + c + e]);
    *reinterpret_cast<uint4*>(out_group + row * p.out_cols + c) = *reinterpret_cast<const uint4*>(packed);
  }
}

}  // namespace jbs
