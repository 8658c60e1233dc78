// The halo of a stride-1 convolution whose output has its input's image size
// (mul = div = 1, row space = source; conv/row_gather.h): tap t of row n reads
// source row n + delta_t, delta_t = oh_t * W + ow_t with (oh_t, ow_t) = offset +
// tap * step, or zero where (h + oh_t, w + ow_t) leaves the image. So the rows
// n0 .. n0 + R - 1 of every tap together read source rows n0 + min(delta) ..
// n0 + R - 1 + max(delta): one "halo" tile serves all taps
// (conv/bsconv_halo_kernel.cuh: fwd / dx, conv/bsconv_halo_dw_kernel.cuh: dw).
#pragma once

#include <cstdint>

#include "common/ptx.cuh"
#include "conv/row_gather.h"

namespace jbs {

// Source-row shift and offsets of tap t (host and device).
struct TapShift {
  int oh, ow;  // offset of the tap's source pixel from the row's pixel
  int delta;   // oh * W + ow: the source row minus the row
};

__host__ __device__ __forceinline__ TapShift tap_shift(const RowGather& g, int t) {
  const int kh = t / g.taps_w;
  const int kw = t - kh * g.taps_w;
  TapShift s;
  s.oh = g.off_h + kh * g.step_h;
  s.ow = g.off_w + kw * g.step_w;
  s.delta = s.oh * g.rows_w + s.ow;
  return s;
}

// How far the taps reach from a row's pixel: the least and greatest oh and ow over
// the taps (host and device).
struct TapReach {
  int oh_min, oh_max, ow_min, ow_max;
  int above() const { return oh_min < 0 ? -oh_min : 0; }  // rows above the pixel's
  int below() const { return oh_max > 0 ? oh_max : 0; }   // rows below
  int left() const { return ow_min < 0 ? -ow_min : 0; }   // pixels to its left
  int right() const { return ow_max > 0 ? ow_max : 0; }   // pixels to its right
};

inline TapReach tap_reach(const RowGather& g) {
  TapReach r{0, 0, 0, 0};
  for (int t = 0; t < g.taps_h * g.taps_w; ++t) {
    const TapShift s = tap_shift(g, t);
    r.oh_min = t == 0 || s.oh < r.oh_min ? s.oh : r.oh_min;
    r.oh_max = t == 0 || s.oh > r.oh_max ? s.oh : r.oh_max;
    r.ow_min = t == 0 || s.ow < r.ow_min ? s.ow : r.ow_min;
    r.ow_max = t == 0 || s.ow > r.ow_max ? s.ow : r.ow_max;
  }
  return r;
}

// Whether the halo kernels can serve geometry g: stride 1, row space = source, and
// |delta| < 2^30 (exact in 32-bit ints); *lo / *hi get min / max delta over the taps.
inline bool halo_geometry(const RowGather& g, int64_t* lo, int64_t* hi) {
  if (g.mul_h != 1 || g.mul_w != 1 || g.div_h != 1 || g.div_w != 1 || g.rows_h != g.src_h || g.rows_w != g.src_w) {
    return false;
  }
  for (int t = 0; t < g.taps_h * g.taps_w; ++t) {
    const int64_t kh = t / g.taps_w, kw = t % g.taps_w;
    const int64_t delta = (g.off_h + kh * g.step_h) * g.rows_w + g.off_w + kw * g.step_w;
    *lo = t == 0 || delta < *lo ? delta : *lo;
    *hi = t == 0 || delta > *hi ? delta : *hi;
  }
  return *lo > -(int64_t{1} << 30) && *hi < (int64_t{1} << 30);
}

// Rows lo .. lo + rows - 1 (rows <= MAX_ROWS) of one BS-wide channel block of the
// source (`column`: its first element, row stride ld_src) into dst (row stride LD),
// rows outside 0 .. total_rows - 1 zero-filled; 16-byte cp.async, NTHREADS threads.
template <typename T, int BS, int MAX_ROWS, int LD, int NTHREADS>
__device__ __forceinline__ void load_halo_async(T* dst, const T* column, int64_t lo, int rows, int64_t total_rows,
                                                int64_t ld_src, int tid) {
  constexpr int kChunksPerRow = BS / 8;
  static_assert(sizeof(T) == 2, "16-bit halos: 8 elements per 16-byte copy");
  static_assert(MAX_ROWS * kChunksPerRow % NTHREADS == 0, "whole copies per thread");
#pragma unroll
  for (int k = 0; k < MAX_ROWS * kChunksPerRow / NTHREADS; ++k) {
    const int idx = tid + k * NTHREADS;
    const int r = idx / kChunksPerRow;
    const int chunk = idx % kChunksPerRow;
    if (r < rows) {
      const int64_t src = lo + r;
      const bool ok = src >= 0 && src < total_rows;
      cp_async_16(dst + r * LD + chunk * 8, column + (ok ? src * ld_src : 0) + chunk * 8, ok ? 16 : 0);
    }
  }
}

}  // namespace jbs
