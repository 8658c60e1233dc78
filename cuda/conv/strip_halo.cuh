// The halo of the conv kernel whose MMA's N is a strip of pixels 8 wide and R
// rows tall (conv/bsconv_strip_kernel.cuh), for a stride-1 conv whose output has
// its input's size.
//
// The halo holds, per strip, rows -top .. R + bottom, each row `row_slots` = left +
// 8 + right pixels (x0 - left .. x0 + 7 + right), a pixel's 32 input channels in one
// 64-byte row, as TMA's 64-byte swizzle writes it (16-byte chunk c of the row at
// address bits 4-5 ^ bits 7-8). A wgmma reads it as a K-major B operand in that
// swizzle mode: the 8 pixels of a strip row are a core-matrix group, the next strip
// row one halo row (row_slots x 64 bytes) further, a k-step of 16 channels 32 bytes
// on. A tap (oh, ow) is then a descriptor offset of (oh + top) rows and left + ow
// pixels: the hardware swizzles by the absolute shared-memory address, as TMA does,
// so any whole-pixel shift and a group stride of any whole number of pixels read
// back what TMA wrote (checked on the H200 by benchmarks/microbench/halo_rows.cu).
// Pixels outside the image (or past the batch) are zero-filled by the same TMA box,
// so a slot never keeps another tile's pixels.
//
// Why 64-byte rows: the TMA unit moves a box at a rate per box row. As four boxes of
// 8-channel planes (16-byte rows), one item's halo took 1.19 us per SM, 9 bytes per
// cycle; as one box of 64-byte rows 0.35 us, 32 bytes per cycle (halo_rows.cu). At
// density 1/8 the planes' TMA time was ~18 us of the strip kernel's ~41 (benchmarks/
// NOTES.md, session 46).
#pragma once

#include <cstdint>

#include "common/ptx.cuh"
#include "common/tma.cuh"
#include "conv/row_gather.h"

namespace jbs {

// Filled by the dispatch (matmul/launch_conv.cuh: strip_halo_shape, which also encodes the TMA map).
struct StripHaloShape {
  static constexpr int kAtomUnits = 32;  // a strip's halo starts on a 512-byte swizzle atom
  int top;          // halo rows above a strip: max(0, -min oh)
  int band_rows;    // halo rows per strip: R + top + bottom (< 256)
  int left, right;  // pixels the taps reach left / right of a strip: -min ow, max ow
  int row_slots;    // pixels of a halo row: left + 8 + right (<= 16)
  int band_units;   // 16-byte units of a strip's halo: band_rows x row_slots x 4, rounded up to an atom
  int halo_units;   // 16-byte units of an item's halo: strips x band_units
  int group_step;   // the map's group coordinate of weight group g: g, or 0 where the operand is broadcast

  // 16-byte unit (a wgmma descriptor's address step) of a strip's first pixel at tap shift (oh, ow).
  __host__ __device__ int tap_slot(int oh, int ow) const { return ((oh + top) * row_slots + left + ow) * 4; }
};

// STRIPS strips of R rows (a tile: consecutive strips, walking down an image's columns of
// 8 pixels, then across them, then to the next image), 32 input channels each (one bs 32
// block or a pair of bs 16 blocks). Each strip's halo is one TMA box of the activations'
// tensor map (channels, width, height, images, groups): 32 channels x row_slots x band_rows,
// zero-filled where it leaves the image or the batch. (16-byte cp.asyncs, 1360 per item
// for a 3x3, were 25% of the strip kernel's instructions; benchmarks/NOTES.md, session 17.)
template <typename T, int R, int STRIPS>
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

  // Bytes of one item's halo (what its boxes bring: the atom padding is not loaded).
  __device__ __forceinline__ static int bytes(const StripHaloShape& s) { return STRIPS * s.band_rows * s.row_slots * 64; }

  // Lane l < STRIPS of the calling warp loads strip l's 32 channels of channel block
  // `block` (in units of 32 channels; weight group `group`'s activations) into `halo`, on `bar`.
  __device__ __forceinline__ static void issue(const StripHaloShape& s, const CUtensorMap* map,
                                               const Pos (&pos)[STRIPS], int block, int group, int lane, T* halo,
                                               uint64_t* bar) {
    if (lane >= STRIPS) return;
    const Pos at = pick(pos, lane);
    tma_load_5d(halo + lane * s.band_units * 8, map, block * 32, at.x0 - s.left, at.h0 - s.top,
                static_cast<int>(at.image), group, bar);
  }
};

}  // namespace jbs
