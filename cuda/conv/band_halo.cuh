// The halo of the conv kernels that read their activations straight from shared
// memory through wgmma descriptors (conv/bsconv_halo_ss_kernel.cuh; the row group
// dw kernel keeps the bands, rows and pads below but stores a slot as a pixel's BS
// channels, one TMA box a tile), for a stride-1 conv on images 8, 16 or 32
// pixels wide whose output has its input's size. A tile is 256 consecutive
// pixels, i.e. 256 / W image rows (W divides 256, so tiles start on image rows).
//
// A tap must be a descriptor offset: a shift of rows must be a shift of
// addresses, and the zeros a tap reads where it leaves the image must be in
// shared memory too. So the halo is stored as:
//  * channel planes: plane j holds channels 8j..8j+7 of every pixel, one 16-byte
//    slot per pixel (a wgmma core matrix is then 8 consecutive slots);
//  * rows of W + 8 slots: 8 zero slots, then the W pixels of one image row. A
//    tap's column shift ow (|ow| <= 8) lands in those zeros at the image's
//    edges, its row shift oh moves by whole rows;
//  * one band per image in the tile: the tile's rows of that image plus `top`
//    rows above and `bottom` below.
// The pad slots are zeroed once by the kernel and never copied to; every tile
// copies all its bands' pixels, zero-filled where they leave the image or the
// batch, so a buffer never keeps another tile's pixels.
#pragma once

#include <cstdint>

#include "common/ptx.cuh"
#include "conv/row_gather.h"

namespace jbs {

// A tile's halo geometry, filled by the dispatch (matmul/launch_conv.cuh: band_halo_shape).
struct BandHaloShape {
  int top;          // band rows above a tile's first image row: max(0, -min oh)
  int band_rows;    // rows of one image's band: image_rows + top + bottom (< 256)
  int image_rows;   // rows of one image in a tile: min(256 / W, H)
  int plane_slots;  // 16-byte slots of one channel plane (a multiple of 8)
  int halo_copies;  // 16-byte copies of a tile's halo: bands x band_rows x W x planes (a
                    // whole number of warps' copies within kBandMaxHaloCopies)
};

constexpr int kBandPad = 8;        // zero slots before each image row: column shifts up to 8
constexpr int kBandMaxHaloCopies = 2048;  // a tile's; NTHREADS copiers keep theirs in registers

// Slot (in one plane) of the tile's pixel in image row `tile_row` of the tile, column x.
__device__ __forceinline__ int band_slot(const BandHaloShape& s, int width, int tile_row, int x) {
  const int band = tile_row / s.image_rows;
  const int y = s.top + tile_row - band * s.image_rows;
  return (band * s.band_rows + y) * (width + kBandPad) + kBandPad + x;
}

template <typename T, int PLANES, int NTHREADS>
struct BandHalo {
  static_assert(PLANES <= 4 && NTHREADS % 32 == 0, "whole warps of copiers");
  static constexpr int kCopies = kBandMaxHaloCopies / NTHREADS;  // per thread, at most
  static constexpr int kPixelsPerWarp = 32 / PLANES;
  // Pixels from one of a thread's copies to its next: the threads' warps' pixels.
  static constexpr int kPixelStep = NTHREADS / 32 * kPixelsPerWarp;
  // A copy step is whole image rows (W = 8, 16 or 32), and at most 8 of them: never more
  // than a band (band_rows >= image_rows >= 8), so the walk below crosses into the next band
  // with one subtraction.
  static_assert(kPixelStep % 32 == 0 && kPixelStep <= 64, "a copy step of 1 to 8 image rows");
  // This thread's copies, the same for every tile and channel block: copy idx = tid + k *
  // NTHREADS; the 32 copies of a warp are 32 / PLANES consecutive pixels (pixel =
  // (band * band_rows + y) * W + x) in each plane, lanes along the pixels, so that 8 lanes
  // write 128 contiguous bytes of one plane. (Lanes along the planes of one pixel wrote 4
  // planes a multiple of 128 bytes apart: Nsight Compute counted 3-4x the ideal shared-memory
  // wavefronts and 2x the ideal L2 sectors for those copies, session 16.) So copy k is
  // pixel first + k * kPixelStep of one plane: the same column x, band row first_row + k *
  // kPixelStep / W. The loop over k follows the band row, its band and its pixel of the
  // batch by increments. (Decoding each copy's fields afresh took ~50 instructions a copy
  // and made the loader, at ~800 instructions a tile, the row group dw kernel's pace:
  // benchmarks/NOTES.md, session 48.)
  int plane = 0, x = 0;
  int first_row = 0;  // band row of copy 0 (over all bands: band * band_rows + y)
  int copies = 0;     // this thread's, <= kCopies
  int64_t image0 = 0;  // the tile's first image ...
  int h0 = 0;          // ... and its first row there

  __device__ __forceinline__ BandHalo(const BandHaloShape& s, int width, int tid) {
    const int lane = tid % 32;
    const int first = tid / 32 * kPixelsPerWarp + lane % kPixelsPerWarp;
    const int pixels = s.halo_copies / PLANES;
    plane = lane / kPixelsPerWarp;
    x = first % width;
    first_row = first / width;
    copies = first < pixels ? min(kCopies, (pixels - first + kPixelStep - 1) / kPixelStep) : 0;
  }

  __device__ __forceinline__ void set_tile(int64_t tile, int width, int height) {
    const int64_t first_image_row = tile * 256 / width;
    image0 = first_image_row / height;
    h0 = static_cast<int>(first_image_row - image0 * height);
  }

  // The current tile's halo of the channel block whose first channel is `column`
  // (rows of in_cols elements, `rows` pixels in all) into dst.
  __device__ __forceinline__ void issue(T* dst, const T* column, const BandHaloShape& s, int width, int height,
                                        int64_t rows, int64_t in_cols) const {
    const int row_slots = width + kBandPad;
    const int step_rows = kPixelStep / width;  // band rows a copy step moves
    int band = first_row / s.band_rows;
    int y = first_row - band * s.band_rows;
    // Pixel of the batch, and the slot of dst, of copy 0; then of copy k.
    int64_t n = ((image0 + band) * height + h0 - s.top + y) * width + x;
    T* slot = dst + static_cast<int64_t>(plane) * s.plane_slots * 8 + (first_row * row_slots + kBandPad + x) * 8;
    const T* const src = column + plane * 8;
#pragma unroll
    for (int k = 0; k < kCopies; ++k) {
      if (k >= copies) break;
      const int h = h0 - s.top + y;
      const bool inside = static_cast<unsigned>(h) < static_cast<unsigned>(height) && n < rows;
      cp_async_16(slot, inside ? src + n * in_cols : column, inside ? 16 : 0);
      slot += step_rows * row_slots * 8;
      n += step_rows * width;
      y += step_rows;
      if (y >= s.band_rows) {  // into the next image's band (step_rows <= 8 <= band_rows)
        y -= s.band_rows;
        n += static_cast<int64_t>(height - s.band_rows) * width;
      }
    }
  }
};

}  // namespace jbs
