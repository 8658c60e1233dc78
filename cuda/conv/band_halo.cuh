// The halo of the conv kernels that read their activations straight from shared
// memory through wgmma descriptors (conv/bsconv_halo_ss_kernel.cuh,
// conv/bsconv_row_group_dw_kernel.cuh), for a stride-1 conv on images 8, 16 or 32
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

// A tile's halo geometry, filled by the dispatch (matmul/bsmm_launch.cuh: band_halo_shape).
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
  static_assert(PLANES <= 4, "two bits of plane per copy");
  static constexpr int kCopies = kBandMaxHaloCopies / NTHREADS;  // per thread
  int copy_of[kCopies];  // plane | x << 2 | y << 8 | band << 16; -1: none
  int64_t image0 = 0;           // the tile's first image ...
  int h0 = 0;                   // ... and its first row there

  // This thread's copies, the same for every tile and channel block: copy idx = tid + k *
  // NTHREADS; the 32 copies of a warp are 32 / PLANES consecutive pixels (pixel =
  // (band * band_rows + y) * W + x) in each plane, lanes along the pixels, so that 8 lanes
  // write 128 contiguous bytes of one plane. (Lanes along the planes of one pixel wrote 4
  // planes a multiple of 128 bytes apart: Nsight Compute counted 3-4x the ideal shared-memory
  // wavefronts and 2x the ideal L2 sectors for those copies, session 16.)
  __device__ __forceinline__ BandHalo(const BandHaloShape& s, int width, int tid) {
    constexpr int kPixelsPerWarp = 32 / PLANES;
    const int pixels = s.halo_copies / PLANES;
#pragma unroll
    for (int k = 0; k < kCopies; ++k) {
      const int idx = tid + k * NTHREADS;
      const int lane = idx % 32;
      const int pixel = idx / 32 * kPixelsPerWarp + lane % kPixelsPerWarp;
      const int band_row = pixel / width;
      const int band = band_row / s.band_rows;
      copy_of[k] = pixel < pixels
                       ? (lane / kPixelsPerWarp) | (pixel - band_row * width) << 2 |
                             (band_row - band * s.band_rows) << 8 | band << 16
                       : -1;
    }
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
    const int64_t plane_elems = static_cast<int64_t>(s.plane_slots) * 8;
    const int row_slots = width + kBandPad;
#pragma unroll
    for (int k = 0; k < kCopies; ++k) {
      int copy = copy_of[k];
      // Opaque to the compiler: it decodes the copy here, for every tile, rather than hoist
      // the decoded fields of all copies out of the caller's loop over tiles, which spilled a
      // 128-thread loader's registers (bsconv_row_group_dw_kernel.cuh at bs 32, session 18).
      asm volatile("" : "+r"(copy));
      if (copy < 0) continue;
      const int plane = copy & 3, x = (copy >> 2) & 63, y = (copy >> 8) & 255;
      const int band = copy >> 16;
      const int h = h0 + y - s.top;
      const int64_t n = ((image0 + band) * height + h) * width + x;
      const bool inside = h >= 0 && h < height && n < rows;
      cp_async_16(dst + plane * plane_elems + ((band * s.band_rows + y) * row_slots + kBandPad + x) * 8,
                  column + (inside ? n * in_cols + plane * 8 : 0), inside ? 16 : 0);
    }
  }
};

}  // namespace jbs
