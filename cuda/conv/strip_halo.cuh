// The halo of the conv kernels whose MMA's N is a strip of pixels 8 wide and R
// rows tall (conv/bsconv_strip_kernel.cuh, conv/bsconv_tap_pair_kernel.cuh), for
// a stride-1 conv whose output has its input's size.
//
// A wgmma's B core matrices must lie at one stride, so core matrix j of a strip
// is image row j of it: 8 consecutive 16-byte slots. The halo holds, per strip,
// rows -top .. R + bottom in channel planes (plane j: channels 8j..8j+7), each
// row `row_slots` = left + 8 + right slots: pixels x0 - left .. x0 + 7 + right.
// A tap (oh, ow) is then a descriptor offset, (oh + top) rows and left + ow
// slots. Slots outside the image (or past the batch) are zero-filled by the same
// copies, so a slot never keeps another tile's pixels.
#pragma once

#include <cstdint>

#include "common/ptx.cuh"
#include "conv/row_gather.h"

namespace jbs {

// Filled by the dispatch (matmul/bsmm_launch.cuh: strip_halo_shape).
struct StripHaloShape {
  int top;          // halo rows above a strip: max(0, -min oh)
  int band_rows;    // halo rows per strip: R + top + bottom (< 256)
  int left, right;  // pixels the taps reach left / right of a strip: -min ow, max ow
  int row_slots;    // 16-byte slots of a halo row: left + 8 + right (<= 16)
  int band_slots;   // 16-byte slots of a strip's halo in a plane: band_rows x row_slots, rounded up to 8
                    // (128-byte aligned: a TMA box may land there)
  int plane_slots;  // 16-byte slots of one channel plane: strips x band_slots
  int halo_copies;  // 16-byte copies of a tile's halo: strips x band_rows x row_slots x planes

  // Slot (in a plane) of a strip's first pixel at tap shift (oh, ow).
  __host__ __device__ int tap_slot(int oh, int ow) const { return (oh + top) * row_slots + left + ow; }
};

// STRIPS strips of R rows (a tile: consecutive strips, walking down an image's columns of
// 8 pixels, then across them, then to the next image); PLANES = bs / 8 channel planes;
// each thread keeps up to MAX_COPIES copies of the halo.
template <typename T, int R, int STRIPS, int PLANES, int NTHREADS, int MAX_COPIES>
struct StripHalo {
  static_assert(PLANES <= 4, "two bits of plane per copy");
  struct Pos {
    int64_t image;  // >= images: past the batch
    int h0, x0;
  };
  int copy_of[MAX_COPIES];  // plane | dx << 2 | y << 7 | strip << 15 (-1: none)
  Pos pos[STRIPS];          // the current tile's strips

  // This thread's copies, the same for every tile and channel block: idx = tid + k *
  // NTHREADS = ((strip * band_rows + y) * row_slots + dx) * PLANES + plane.
  __device__ __forceinline__ StripHalo(const StripHaloShape& s, int tid) {
    const int span = s.row_slots;
#pragma unroll
    for (int k = 0; k < MAX_COPIES; ++k) {
      const int idx = tid + k * NTHREADS;
      const int pixel = idx / PLANES;
      const int strip_row = pixel / span;
      const int strip = strip_row / s.band_rows;
      copy_of[k] = idx < s.halo_copies ? (idx % PLANES) | (pixel - strip_row * span) << 2 |
                                             (strip_row - strip * s.band_rows) << 7 | strip << 15
                                       : -1;
    }
  }

  // The strips of tile `tile` (computed once per tile: the 64-bit division is ~100
  // instructions, and per copy it made the strip kernel 1.3x slower).
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
  __device__ __forceinline__ void set_tile(const RowGather& g, int64_t tile) { strips_of(g, tile, pos); }

  // pos[s] without a local-memory index.
  __device__ __forceinline__ static Pos pick(const Pos (&from)[STRIPS], int s) {
    Pos r = from[0];
#pragma unroll
    for (int q = 1; q < STRIPS; ++q) r = q == s ? from[q] : r;
    return r;
  }

  // This thread's copies of channel block `column` (its first channel of pixel 0, in an
  // image batch of `images` with `in_cols` channels per pixel) into `halo`.
  __device__ __forceinline__ void issue(const StripHaloShape& s, const RowGather& g, int64_t images, int64_t in_cols,
                                        const T* column, T* halo) const {
    const int height = g.rows_h, width = g.rows_w;
    const int64_t plane_elems = static_cast<int64_t>(s.plane_slots) * 8;
    const int band_slots = s.band_slots;
#pragma unroll
    for (int k = 0; k < MAX_COPIES; ++k) {
      if (copy_of[k] < 0) continue;
      const int plane = copy_of[k] & 3, dx = (copy_of[k] >> 2) & 31, y = (copy_of[k] >> 7) & 255;
      const int strip = copy_of[k] >> 15;
      const Pos at = pick(pos, strip);
      const int h = at.h0 + y - s.top;
      const int x = at.x0 - s.left + dx;
      const bool inside = at.image < images && h >= 0 && h < height && x >= 0 && x < width;
      const int64_t src = inside ? ((at.image * height + h) * width + x) * in_cols + plane * 8 : 0;
      cp_async_16(halo + plane * plane_elems + (strip * band_slots + y * s.row_slots + dx) * 8,
                  column + src, inside ? 16 : 0);
    }
  }
};

}  // namespace jbs
