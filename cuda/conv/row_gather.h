// The implicit-GEMM row gather of a block-sparse convolution (host and device).
//
// Operand A of a convolution is its im2col matrix: one row per pixel of the
// "row space" (an image batch of rows_h x rows_w), one column block per
// (filter tap, source channel block), taps major. It is never stored: row n,
// tap (kh, kw) reads source pixel (b, h, w) of the gathered operand where, per
// spatial dimension,
//   h * div_h = hr * mul_h + off_h + kh * step_h   (exact division, 0 <= h < src_h)
// and reads zeros otherwise (padding). jbs/_src/conv_geometry.py is the Python
// definition of the same map and sends its 14 ints in the order of decode().
#pragma once

#include <cstdint>

namespace jbs {

struct RowGather {
  int taps_h = 1, taps_w = 1;
  int rows_h = 1, rows_w = 1;  // row-space image
  int src_h = 1, src_w = 1;    // gathered (source) image
  int mul_h = 1, mul_w = 1;
  int off_h = 0, off_w = 0;
  int step_h = 1, step_w = 1;
  int div_h = 1, div_w = 1;
  int src_blocks = 0;  // column blocks of the source operand (its width / bs): one tap's worth

  static constexpr int kNumInts = 14;
  // From the attribute vector (length checked by the caller).
  static RowGather decode(const int32_t* v) {
    RowGather g;
    g.taps_h = v[0], g.taps_w = v[1], g.rows_h = v[2], g.rows_w = v[3], g.src_h = v[4],
    g.src_w = v[5], g.mul_h = v[6], g.mul_w = v[7], g.off_h = v[8], g.off_w = v[9],
    g.step_h = v[10], g.step_w = v[11], g.div_h = v[12], g.div_w = v[13];
    return g;
  }
  int64_t taps() const { return static_cast<int64_t>(taps_h) * taps_w; }
  int64_t row_pixels() const { return static_cast<int64_t>(rows_h) * rows_w; }
  int64_t src_pixels() const { return static_cast<int64_t>(src_h) * src_w; }
};

}  // namespace jbs
