// Loading a tile of a convolution's im2col matrix straight from the image
// (implicit GEMM): the same thread -> (row, 16-byte chunk) assignment as
// load_tile_async (matmul/tile_io.cuh), but each row's source address comes
// from the RowGather map, and rows that fall into the padding (or past the
// last row) are zero-filled by cp.async with a source size of 0.
//
// init() decomposes the thread's rows into (image, h, w) once per tile; load()
// then costs a few integer operations per row and tap.
#pragma once

#include <cstdint>

#include "common/ptx.cuh"
#include "conv/row_gather.h"

namespace jbs {

template <typename T, int ROWS, int COLS, int NTHREADS>
struct GatheredTile {
  static constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  static constexpr int kChunksPerRow = COLS / kVec;
  static constexpr int kRowStep = NTHREADS / kChunksPerRow;
  static constexpr int kIters = (ROWS + kRowStep - 1) / kRowStep;
  static_assert(COLS % kVec == 0 && NTHREADS % kChunksPerRow == 0, "see load_tile_async");
  // A row past the end gets this h0: every tap then reads below 0, i.e. zeros.
  static constexpr int kNoRow = -(1 << 29);

  int64_t image_base[kIters];  // first source pixel of the row's image
  int h0[kIters];              // hr * mul_h + off_h
  int w0[kIters];

  // Rows first_row + r (r < ROWS) of the row space, of which `rows` exist.
  __device__ __forceinline__ void init(const RowGather& g, int64_t first_row, int64_t rows, int tid) {
    const int r0 = tid / kChunksPerRow;
    const int plane = g.rows_h * g.rows_w;  // < 2^31: checked by the handlers (bsconv.cu)
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int64_t n = first_row + r0 + it * kRowStep;
      const int nn = static_cast<int>(n < rows ? n : 0);
      const int img = nn / plane;
      const int rem = nn - img * plane;
      const int hr = rem / g.rows_w;
      const int wr = rem - hr * g.rows_w;
      image_base[it] = static_cast<int64_t>(img) * g.src_h * g.src_w;
      h0[it] = n < rows ? hr * g.mul_h + g.off_h : kNoRow;
      w0[it] = wr * g.mul_w + g.off_w;
    }
  }

  // Column block `vblock` (= tap * src_blocks + channel block) of the tile's
  // rows, from the source operand `src` (row stride ld_src elements).
  __device__ __forceinline__ void load(T* dst, int ld_dst, const T* src, int64_t ld_src,
                                       const RowGather& g, int vblock, int tid) const {
    const int tap = vblock / g.src_blocks;
    const int block = vblock - tap * g.src_blocks;
    const int kh = tap / g.taps_w;
    const int kw = tap - kh * g.taps_w;
    const int r0 = tid / kChunksPerRow;
    const int c = (tid % kChunksPerRow) * kVec;
    const T* const column = src + static_cast<int64_t>(block) * COLS + c;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int r = r0 + it * kRowStep;
      if (ROWS % kRowStep != 0 && r >= ROWS) break;
      int h = h0[it] + kh * g.step_h;
      int w = w0[it] + kw * g.step_w;
      bool ok = h >= 0 && w >= 0;
      if (g.div_h != 1) {
        ok = ok && h % g.div_h == 0;
        h /= g.div_h;
      }
      if (g.div_w != 1) {
        ok = ok && w % g.div_w == 0;
        w /= g.div_w;
      }
      ok = ok && h < g.src_h && w < g.src_w;
      const int64_t pixel = ok ? image_base[it] + static_cast<int64_t>(h) * g.src_w + w : 0;
      cp_async_16(dst + r * ld_dst + c, column + pixel * ld_src, ok ? 16 : 0);
    }
  }
};

}  // namespace jbs
