// The halo of the conv kernel whose MMA's N is a strip of pixels 8 wide and R
// rows tall (conv/bsconv_strip_kernel.cuh), for a stride-1 conv whose output has
// its input's size.
//
// A wgmma's B core matrices must lie at one stride, so core matrix j of a strip
// is image row j of it: 8 consecutive 16-byte slots. The halo holds, per strip,
// rows -top .. R + bottom in channel planes (plane j: channels 8j..8j+7), each
// row `row_slots` = left + 8 + right slots: pixels x0 - left .. x0 + 7 + right.
// A tap (oh, ow) is then a descriptor offset, (oh + top) rows and left + ow
// slots. Slots outside the image (or past the batch) are zero-filled by the same
// TMA boxes, so a slot never keeps another tile's pixels.
#pragma once

#include <cstdint>

#include "common/ptx.cuh"
#include "common/tma.cuh"
#include "conv/row_gather.h"

namespace jbs {

// Filled by the dispatch (matmul/bsmm_launch.cuh: strip_halo_shape, which also encodes the TMA map).
struct StripHaloShape {
  int top;          // halo rows above a strip: max(0, -min oh)
  int band_rows;    // halo rows per strip: R + top + bottom (< 256)
  int left, right;  // pixels the taps reach left / right of a strip: -min ow, max ow
  int row_slots;    // 16-byte slots of a halo row: left + 8 + right (<= 16)
  int band_slots;   // 16-byte slots of a strip's halo in a plane: band_rows x row_slots, rounded up to 8
                    // (128-byte aligned: a TMA box may land there)
  int plane_slots;  // 16-byte slots of one channel plane: strips x band_slots
  int group_step;   // the map's group coordinate of weight group g: g, or 0 where the operand is broadcast

  // Slot (in a plane) of a strip's first pixel at tap shift (oh, ow).
  __host__ __device__ int tap_slot(int oh, int ow) const { return (oh + top) * row_slots + left + ow; }
};

// STRIPS strips of R rows (a tile: consecutive strips, walking down an image's columns of
// 8 pixels, then across them, then to the next image); PLANES = 4 channel planes of 8
// (32 input channels: one bs 32 block or a pair of bs 16 blocks).
// Each strip's halo in each plane is one TMA box of the activations' tensor map
// (channels, width, height, images, groups): row_slots x band_rows x 8 channels,
// zero-filled where it leaves the image or the batch. (16-byte cp.asyncs, 1360 per item
// for a 3x3, were 25% of the strip kernel's instructions; benchmarks/NOTES.md, session 17.)
template <typename T, int R, int STRIPS, int PLANES>
struct StripHalo {
  struct Pos {
    int64_t image;  // >= images: past the batch
    int h0, x0;
  };

  // The strips of tile `tile` (computed once per tile: the 64-bit division is ~100
  // instructions).
  __device__ __forceinline__ static void strips_of(const RowGather& g, int64_t tile, Pos (&out)[STRIPS]) {
    const int strips_per_column = g.rows_h / R;
    const int strips_per_image = strips_per_column * (g.rows_w / 8);
#pragma unroll
    for (int s = 0; s < STRIPS; ++s) {
      const int64_t strip = tile * STRIPS + s;
      out[s].image = strip / strips_per_image;
      const int rem = static_cast<int>(strip - out[s].image * strips_per_image);
      out[s].h0 = (rem % strips_per_column) * R;
      out[s].x0 = (rem / strips_per_column) * 8;
    }
  }

  // pos[s] without a local-memory index.
  __device__ __forceinline__ static Pos pick(const Pos (&from)[STRIPS], int s) {
    Pos r = from[0];
#pragma unroll
    for (int q = 1; q < STRIPS; ++q) r = q == s ? from[q] : r;
    return r;
  }

  // Bytes of one item's halo.
  __device__ __forceinline__ static int bytes(const StripHaloShape& s) {
    return STRIPS * PLANES * s.band_rows * s.row_slots * 16;
  }

  // Lane l < STRIPS * PLANES of the calling warp loads plane l % PLANES of strip l / PLANES
  // of channel block `block` (weight group `group`'s activations) into `halo`, on `bar`.
  __device__ __forceinline__ static void issue(const StripHaloShape& s, const CUtensorMap* map,
                                               const Pos (&pos)[STRIPS], int block, int group, int lane, T* halo,
                                               uint64_t* bar) {
    if (lane >= STRIPS * PLANES) return;
    const int strip = lane / PLANES, plane = lane % PLANES;
    const Pos at = pick(pos, strip);
    tma_load_5d(halo + (plane * s.plane_slots + strip * s.band_slots) * 8, map, (block * PLANES + plane) * 8,
                at.x0 - s.left, at.h0 - s.top, static_cast<int>(at.image), group, bar);
  }
};

}  // namespace jbs
