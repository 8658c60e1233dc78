// XLA FFI handlers for the block-sparse convolution (implicit GEMM): the matmul
// kernels of cuda/matmul with operand A gathered from an image batch through a
// RowGather map (cuda/conv/row_gather.h) instead of read as a matrix.
//   jbs_bsconv_fwd  y  = im2col(x) @ W            rows: output pixels
//   jbs_bsconv_dx   dx = im2col'(dy) @ W^T        rows: input pixels (transposed map)
//   jbs_bsconv_dw   dw[i] = im2col(x)[:, c_i]^T @ dy[:, k_i]   (rows split over
//                   row_splits CTAs per block, partials summed in order via scratch)
// W stacks the taps: (G|1, taps * nnz, bs, bs). Tables as jbs/_src/tables.py's
// build_conv_tables. Same production rules as the matmul handlers: host-side
// validation only, one kernel on XLA's stream, no sync, no allocation.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "common/dispatch.cuh"
#include "conv/row_gather.h"
#include "ffi/checks.h"
#include "ffi/ffi_util.h"
#include "ffi/handlers.h"
#include "ffi/launches.h"
#include "ffi/xla_ffi.h"
#include "matmul/bsmm.h"

namespace ffi = xla::ffi;

namespace jbs {
namespace {

constexpr int64_t kMaxPixels = std::numeric_limits<int32_t>::max();

// Decodes and checks the geometry attribute against the gathered operand
// (source rows) and the row count of the row space.
ffi::Error decode_gather(const char* target, ffi::Span<const int32_t> attr, const std::string& src_name,
                         int64_t src_rows, int64_t src_cols, int64_t bs, RowGather* g,
                         int64_t* rows) {
  if (attr.size() != RowGather::kNumInts) {
    return invalid(target, "attribute geometry has " + to_string(attr.size()) + " ints, expected " +
                               to_string(RowGather::kNumInts));
  }
  *g = RowGather::decode(attr.begin());
  const bool positive = g->taps_h > 0 && g->taps_w > 0 && g->rows_h > 0 && g->rows_w > 0 &&
                        g->src_h > 0 && g->src_w > 0 && g->mul_h > 0 && g->mul_w > 0 &&
                        g->div_h > 0 && g->div_w > 0;
  if (!positive) return invalid(target, "attribute geometry has a non-positive size, stride or divisor");
  // The kernels compute h = hr * mul + offset + kh * step (and the same for w) in 32-bit ints,
  // and mark rows past the end with -2^29 (gathered_tile.cuh): keep every term below 2^28.
  constexpr int64_t kCoordLimit = int64_t{1} << 28;
  auto coord_ok = [&](int64_t rows_dim, int64_t mul, int64_t off, int64_t step, int64_t taps) {
    return rows_dim * mul < kCoordLimit && (off < 0 ? -off : off) < kCoordLimit &&
           (step < 0 ? -step : step) * taps < kCoordLimit;
  };
  if (!coord_ok(g->rows_h, g->mul_h, g->off_h, g->step_h, g->taps_h) ||
      !coord_ok(g->rows_w, g->mul_w, g->off_w, g->step_w, g->taps_w) ||
      g->src_h >= kCoordLimit || g->src_w >= kCoordLimit) {
    return invalid(target, "attribute geometry has an image size, stride, dilation or padding of 2^28 or more");
  }
  if (g->src_pixels() > kMaxPixels || g->row_pixels() > kMaxPixels || src_rows > kMaxPixels) {
    return invalid(target, "more than 2^31-1 pixels in an image or in " + src_name);
  }
  if (src_rows % g->src_pixels() != 0) {
    return invalid(target, src_name + " has " + to_string(src_rows) + " rows, not a whole number of " +
                               to_string(g->src_h) + "x" + to_string(g->src_w) + " images");
  }
  const int64_t images = src_rows / g->src_pixels();
  if (images > kMaxPixels / g->row_pixels()) {
    return invalid(target, "the result would have more than 2^31-1 pixels");
  }
  *rows = images * g->row_pixels();
  if (src_cols < bs || src_cols % bs != 0) {
    return invalid(target, src_name + " has " + to_string(src_cols) +
                               " channels, expected a positive multiple of block_size " + to_string(bs));
  }
  g->src_blocks = static_cast<int>(src_cols / bs);
  return ffi::Error::Success();
}

// fwd (transpose = false) and dx (transpose = true).
ffi::Error bsconv_blocks(const char* target, bool transpose, cudaStream_t stream,
                         const ffi::AnyBuffer& in, const ffi::AnyBuffer& w,
                         const ffi::AnyBuffer& offsets, const ffi::AnyBuffer& items,
                         const ffi::AnyBuffer& group_offsets, const ffi::AnyBuffer& group_items,
                         const ffi::AnyBuffer& paired_offsets, const ffi::AnyBuffer& paired_items,
                         const ffi::AnyBuffer& paired_columns, ffi::AnyBuffer out, int32_t block_size,
                         int32_t precision, ffi::Span<const int32_t> geometry) {
  const std::string in_name = transpose ? "operand dy" : "operand x";
  const std::string out_name = transpose ? "result dx" : "result y";
  JBS_RETURN_IF_ERROR(check_supported_dtype(target, in_name, in));
  const ffi::DataType dt = in.element_type();
  JBS_RETURN_IF_ERROR(check_attrs(target, block_size, precision));
  JBS_RETURN_IF_ERROR(check_data(target, in_name, in, dt, 3, "(G or 1, images * H * W, channels)"));
  JBS_RETURN_IF_ERROR(check_data(target, "operand w", w, dt, 4, "(G or 1, taps * nnz, bs, bs)"));
  JBS_RETURN_IF_ERROR(check_index(target, "operand offsets", offsets, 1, "(out blocks + 1,)"));
  JBS_RETURN_IF_ERROR(check_index(target, "operand items", items, 2, "(taps * nnz, 2)"));
  JBS_RETURN_IF_ERROR(check_data(target, out_name, out, dt, 3, "(G, pixels, channels)"));

  const int64_t bs = block_size;
  const auto id = in.dimensions();
  const auto wd = w.dimensions();
  const auto od = out.dimensions();
  const int64_t groups = od[0];
  JBS_RETURN_IF_ERROR(check_group(target, in_name, in, groups));
  JBS_RETURN_IF_ERROR(check_group(target, "operand w", w, groups));
  RowGather gather;
  int64_t rows = 0;
  JBS_RETURN_IF_ERROR(decode_gather(target, geometry, in_name, id[1], id[2], bs, &gather, &rows));
  if (od[1] != rows || od[2] % bs != 0) {
    return invalid(target, out_name + " has shape " + shape_str(od) + ", expected (G, " +
                               to_string(rows) + ", a multiple of " + to_string(bs) + ")");
  }
  if (wd[2] != bs || wd[3] != bs || items.dimensions()[0] != wd[1] || items.dimensions()[1] != 2) {
    return invalid(target, "operand w has shape " + shape_str(wd) + " and items " +
                               shape_str(items.dimensions()) + ", expected (G or 1, n, " +
                               to_string(bs) + ", " + to_string(bs) + ") and (n, 2)");
  }
  const int64_t out_blocks = od[2] / bs;
  if (offsets.dimensions()[0] != out_blocks + 1) {
    return invalid(target, "operand offsets has shape " + shape_str(offsets.dimensions()) +
                               ", expected (" + to_string(out_blocks + 1) + ",)");
  }
  if (groups > kMaxGroups) {
    return invalid(target, out_name + " has " + to_string(groups) + " groups, at most " +
                               to_string(kMaxGroups) + " are supported");
  }
  const int64_t row_tiles = (rows + kBsmmMinRowTile - 1) / kBsmmMinRowTile;
  if (out_blocks > 0 && row_tiles > kMaxGridX / out_blocks) {
    return invalid(target, out_name + " shape " + shape_str(od) + " needs more than 2^31-1 thread blocks");
  }
  BsmmBlocksArgs a;
  JBS_RETURN_IF_ERROR(set_groups(target, group_offsets, group_items, out_blocks, bs, &a));
  JBS_RETURN_IF_ERROR(set_paired_groups(target, paired_offsets, paired_items, paired_columns, &a));
  if (groups == 0 || rows == 0 || od[2] == 0) return ffi::Error::Success();

  a.in = in.untyped_data();
  a.w = w.untyped_data();
  a.offsets = static_cast<const int32_t*>(offsets.untyped_data());
  a.items = static_cast<const int32_t*>(items.untyped_data());
  a.out = out.untyped_data();
  a.rows = rows;
  a.in_cols = id[2];
  a.out_cols = od[2];
  a.in_group_stride = id[0] == 1 ? 0 : id[1] * id[2];
  a.w_group_stride = wd[0] == 1 ? 0 : wd[1] * bs * bs;
  a.out_group_stride = rows * od[2];
  a.groups = groups;
  a.block_size = block_size;
  a.transpose_w = transpose;
  a.precise = precision == 1;
  a.nnz = wd[1];
  a.num_sms = num_sms();  // the persistent strip and ss kernels' grids
  a.gathered = true;
  a.gather = gather;
  return launch_blocks(target, dt, a, stream);
}

ffi::Error BsconvFwdImpl(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer w,
                         ffi::AnyBuffer offsets, ffi::AnyBuffer items, ffi::AnyBuffer group_offsets,
                         ffi::AnyBuffer group_items, ffi::AnyBuffer paired_offsets, ffi::AnyBuffer paired_items,
                         ffi::AnyBuffer paired_columns, ffi::Result<ffi::AnyBuffer> y, int32_t block_size,
                         int32_t precision, ffi::Span<const int32_t> geometry) {
  return bsconv_blocks("jbs_bsconv_fwd", false, stream, x, w, offsets, items, group_offsets,
                       group_items, paired_offsets, paired_items, paired_columns, *y, block_size,
                       precision, geometry);
}

ffi::Error BsconvDxImpl(cudaStream_t stream, ffi::AnyBuffer dy, ffi::AnyBuffer w,
                        ffi::AnyBuffer offsets, ffi::AnyBuffer items, ffi::AnyBuffer group_offsets,
                        ffi::AnyBuffer group_items, ffi::AnyBuffer paired_offsets, ffi::AnyBuffer paired_items,
                        ffi::AnyBuffer paired_columns, ffi::Result<ffi::AnyBuffer> dx, int32_t block_size,
                        int32_t precision, ffi::Span<const int32_t> geometry) {
  return bsconv_blocks("jbs_bsconv_dx", true, stream, dy, w, offsets, items, group_offsets,
                       group_items, paired_offsets, paired_items, paired_columns, *dx, block_size,
                       precision, geometry);
}

ffi::Error BsconvDwImpl(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer dy,
                        ffi::AnyBuffer items, ffi::AnyBuffer row_groups, ffi::Result<ffi::AnyBuffer> dw_result,
                        ffi::Result<ffi::AnyBuffer> scratch_result, int32_t block_size,
                        int32_t precision, ffi::Span<const int32_t> geometry, int32_t row_splits) {
  const char* target = "jbs_bsconv_dw";
  ffi::AnyBuffer dw = *dw_result;
  ffi::AnyBuffer scratch = *scratch_result;
  JBS_RETURN_IF_ERROR(check_supported_dtype(target, "operand x", x));
  const ffi::DataType dt = x.element_type();
  JBS_RETURN_IF_ERROR(check_attrs(target, block_size, precision));
  JBS_RETURN_IF_ERROR(check_data(target, "operand x", x, dt, 3, "(G or 1, images * H * W, C)"));
  JBS_RETURN_IF_ERROR(check_data(target, "operand dy", dy, dt, 3, "(G or 1, images * Ho * Wo, K)"));
  JBS_RETURN_IF_ERROR(check_index(target, "operand items", items, 2, "(taps * nnz, 2)"));
  JBS_RETURN_IF_ERROR(check_index(target, "operand row_groups", row_groups, 2, "(taps * groups, 64 / bs)"));
  JBS_RETURN_IF_ERROR(check_data(target, "result dw", dw, dt, 4, "(G, taps * nnz, bs, bs)"));
  const int64_t bs = block_size;
  const auto xd = x.dimensions();
  const auto yd = dy.dimensions();
  const auto wd = dw.dimensions();
  const int64_t groups = wd[0];
  JBS_RETURN_IF_ERROR(check_group(target, "operand x", x, groups));
  JBS_RETURN_IF_ERROR(check_group(target, "operand dy", dy, groups));
  RowGather gather;
  int64_t rows = 0;
  JBS_RETURN_IF_ERROR(decode_gather(target, geometry, "operand x", xd[1], xd[2], bs, &gather, &rows));
  if (yd[1] != rows || yd[2] % bs != 0) {
    return invalid(target, "operand dy has shape " + shape_str(yd) + ", expected (G or 1, " +
                               to_string(rows) + ", a multiple of " + to_string(bs) + ")");
  }
  if (wd[2] != bs || wd[3] != bs || items.dimensions()[0] != wd[1] || items.dimensions()[1] != 2) {
    return invalid(target, "result dw has shape " + shape_str(wd) + " and items " +
                               shape_str(items.dimensions()) + ", expected (G, n, " + to_string(bs) +
                               ", " + to_string(bs) + ") and (n, 2)");
  }
  if (groups > kMaxGroups || wd[1] > kMaxGridX) {
    return invalid(target, "result dw has shape " + shape_str(wd) + ": at most 65535 groups and "
                               "2^31-1 blocks are supported");
  }
  JBS_RETURN_IF_ERROR(check_dw_scratch(target, scratch, row_splits, groups, wd[1], bs));
  if (groups == 0 || wd[1] == 0) return ffi::Error::Success();

  BsmmDwArgs a = dw_args(x, dy, items, dw, scratch, rows, block_size, precision, row_splits);
  a.gathered = true;
  a.gather = gather;
  // Tap 0's row groups come first: every tap's rows group alike (the stacked layout's
  // tables). The kernel checks the group size against its block size.
  const int64_t taps = gather.taps();
  if (row_groups.dimensions()[0] % taps == 0) {
    a.row_groups = static_cast<const int32_t*>(row_groups.untyped_data());
    a.num_row_groups = row_groups.dimensions()[0] / taps;
    a.row_group_size = row_groups.dimensions()[1];
  }
  return launch_dw(target, dt, a, stream);
}

}  // namespace
}  // namespace jbs

#define JBS_CONV_BLOCKS_BINDING()                                                     \
  ffi::Ffi::Bind()                                                                    \
      .Ctx<ffi::PlatformStream<cudaStream_t>>()                                       \
      .Arg<ffi::AnyBuffer>() /* x or dy: image batch (G|1, pixels, channels) */      \
      .Arg<ffi::AnyBuffer>() /* w (G|1, taps * nnz, bs, bs) */                        \
      .Arg<ffi::AnyBuffer>() /* offsets int32 (out blocks + 1) */                     \
      .Arg<ffi::AnyBuffer>() /* items int32 (taps * nnz, 2) */                        \
      .Arg<ffi::AnyBuffer>() /* group_offsets int32 (num_groups + 1) */               \
      .Arg<ffi::AnyBuffer>() /* group_items int32 (n, 1 + width) */                   \
      .Arg<ffi::AnyBuffer>() /* paired_offsets int32 (num_groups + 1) */              \
      .Arg<ffi::AnyBuffer>() /* paired_items int32 (n, 1 + width) */                  \
      .Arg<ffi::AnyBuffer>() /* paired_columns int32 (num_groups * width) */          \
      .Ret<ffi::AnyBuffer>() /* result (G, pixels, channels) */                       \
      .Attr<int32_t>("block_size")                                                    \
      .Attr<int32_t>("precision")                                                     \
      .Attr<ffi::Span<const int32_t>>("geometry")

XLA_FFI_DEFINE_HANDLER_SYMBOL(JbsBsconvFwd, jbs::BsconvFwdImpl, JBS_CONV_BLOCKS_BINDING(),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JbsBsconvDx, jbs::BsconvDxImpl, JBS_CONV_BLOCKS_BINDING(),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JbsBsconvDw, jbs::BsconvDwImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()  // x (G|1, images * H * W, C)
                                  .Arg<ffi::AnyBuffer>()  // dy (G|1, images * Ho * Wo, K)
                                  .Arg<ffi::AnyBuffer>()  // dw_items int32 (taps * nnz, 2)
                                  .Arg<ffi::AnyBuffer>()  // dw_row_groups int32 (taps * groups, 64 / bs)
                                  .Ret<ffi::AnyBuffer>()  // dw (G, taps * nnz, bs, bs)
                                  .Ret<ffi::AnyBuffer>()  // scratch float32 (row-split partials)
                                  .Attr<int32_t>("block_size")
                                  .Attr<int32_t>("precision")
                                  .Attr<ffi::Span<const int32_t>>("geometry")
                                  .Attr<int32_t>("row_splits"),
                              {ffi::Traits::kCmdBufferCompatible});
