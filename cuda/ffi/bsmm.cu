// XLA FFI handlers for the block-sparse matmul kernels:
//   jbs_bsmm_fwd  y  = x  @ W      (segments over output block columns of W)
//   jbs_bsmm_dx   dx = dy @ W^T    (segments over block rows of W)
//   jbs_bsmm_dw   dw[i] = x[:, c_i]^T @ dy[:, k_i] for each nonzero block i (rows split
//                 over row_splits CTAs per block where > 1, through the scratch result)
// The handlers validate shapes/dtypes/attributes on the host (metadata only),
// then enqueue one kernel on XLA's stream: no synchronisation, no allocation,
// no host<->device copies, so they are safe to capture in CUDA graphs.
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <string>

#include "common/dispatch.cuh"
#include "ffi/checks.h"
#include "ffi/ffi_util.h"
#include "ffi/handlers.h"
#include "ffi/launches.h"
#include "matmul/bsmm.h"
#include "ffi/xla_ffi.h"

namespace ffi = xla::ffi;

namespace jbs {
namespace {


// Shared by fwd (transpose = false: in = x (G,N,C), out = y (G,N,K), segments
// over K blocks) and dx (transpose = true: in = dy (G,N,K), out = dx (G,N,C),
// segments over C blocks).
ffi::Error bsmm_blocks(const char* target, bool transpose, cudaStream_t stream,
                       const ffi::AnyBuffer& in, const ffi::AnyBuffer& w,
                       const ffi::AnyBuffer& offsets, const ffi::AnyBuffer& items,
                       const ffi::AnyBuffer& chunks, const ffi::AnyBuffer& splits,
                       const ffi::AnyBuffer& group_offsets, const ffi::AnyBuffer& group_items,
                       const ffi::AnyBuffer& wide_offsets, const ffi::AnyBuffer& wide_items,
                       const ffi::AnyBuffer& wide_columns, const ffi::AnyBuffer& paired_offsets,
                       const ffi::AnyBuffer& paired_items, const ffi::AnyBuffer& paired_columns,
                       const ffi::AnyBuffer& packed, ffi::AnyBuffer out, ffi::AnyBuffer scratch,
                       int32_t block_size, int32_t precision) {
  const std::string in_name = transpose ? "operand dy" : "operand x";
  const std::string out_name = transpose ? "result dx" : "result y";
  const char* in_layout = transpose ? "(G or 1, N, K)" : "(G or 1, N, C)";
  const char* out_layout = transpose ? "(G, N, C)" : "(G, N, K)";
  const char* out_letter = transpose ? "C" : "K";
  const char* in_letter = transpose ? "K" : "C";

  JBS_RETURN_IF_ERROR(check_supported_dtype(target, in_name, in));
  const ffi::DataType dt = in.element_type();
  JBS_RETURN_IF_ERROR(check_attrs(target, block_size, precision));
  JBS_RETURN_IF_ERROR(check_data(target, in_name, in, dt, 3, in_layout));
  JBS_RETURN_IF_ERROR(check_data(target, "operand w", w, dt, 4, "(G or 1, nnz, bs, bs)"));
  JBS_RETURN_IF_ERROR(check_index(target, "operand offsets", offsets, 1,
                                  transpose ? "(C/bs + 1,)" : "(K/bs + 1,)"));
  JBS_RETURN_IF_ERROR(check_index(target, "operand items", items, 2, "(nnz, 2)"));
  JBS_RETURN_IF_ERROR(check_index(target, "operand chunks", chunks, 2, "(num_chunks, 4)"));
  JBS_RETURN_IF_ERROR(check_index(target, "operand splits", splits, 2, "(n_split + 1, 2)"));
  JBS_RETURN_IF_ERROR(check_index(target, "operand packed", packed, 1, "(items + 2 out blocks + ctas + 2,) or (1,)"));
  JBS_RETURN_IF_ERROR(check_data(target, out_name, out, dt, 3, out_layout));

  const int64_t bs = block_size;
  const auto od = out.dimensions();
  const auto id = in.dimensions();
  const auto wd = w.dimensions();
  const int64_t groups = od[0];
  const int64_t rows = od[1];
  const int64_t out_cols = od[2];
  const int64_t in_cols = id[2];
  const int64_t nnz = wd[1];

  JBS_RETURN_IF_ERROR(check_group(target, in_name, in, groups));
  JBS_RETURN_IF_ERROR(check_group(target, "operand w", w, groups));
  if (id[1] != rows) {
    return invalid(target, in_name + " has shape " + shape_str(id) + " but " + out_name +
                               " has shape " + shape_str(od) + ": the N dims (axis 1) must match");
  }
  if (in_cols % bs != 0) {
    return invalid(target, in_name + " has shape " + shape_str(id) + ": " + in_letter + " = " +
                               to_string(in_cols) + " is not a multiple of block_size " +
                               to_string(bs));
  }
  if (out_cols % bs != 0) {
    return invalid(target, out_name + " has shape " + shape_str(od) + ": " + out_letter + " = " +
                               to_string(out_cols) + " is not a multiple of block_size " +
                               to_string(bs));
  }
  if (wd[2] != bs || wd[3] != bs) {
    return invalid(target, "operand w has shape " + shape_str(wd) + ", expected (G or 1, nnz, " +
                               to_string(bs) + ", " + to_string(bs) + ") for block_size " +
                               to_string(bs));
  }
  if (items.dimensions()[0] != nnz || items.dimensions()[1] != 2) {
    return invalid(target, "operand items has shape " + shape_str(items.dimensions()) +
                               ", expected (nnz, 2) = (" + to_string(nnz) +
                               ", 2) with nnz from w " + shape_str(wd));
  }
  const int64_t out_blocks = out_cols / bs;
  if (offsets.dimensions()[0] != out_blocks + 1) {
    return invalid(target, "operand offsets has shape " + shape_str(offsets.dimensions()) +
                               ", expected (" + out_letter + "/bs + 1,) = (" +
                               to_string(out_blocks + 1) + ",) for " + out_name + " " +
                               shape_str(od));
  }
  if (groups > kMaxGroups) {
    return invalid(target, out_name + " has " + to_string(groups) + " groups, at most " +
                               to_string(kMaxGroups) + " are supported");
  }
  const int64_t row_tiles = (rows + kBsmmMinRowTile - 1) / kBsmmMinRowTile;
  if (out_blocks > 0 && row_tiles > kMaxGridX / out_blocks) {
    return invalid(target, out_name + " shape " + shape_str(od) +
                               " needs more than 2^31-1 thread blocks");
  }
  const int64_t num_chunks = chunks.dimensions()[0];
  const int64_t n_split = splits.dimensions()[0] - 1;
  if (chunks.dimensions()[1] != 4 || num_chunks < out_blocks || num_chunks > kMaxGridX) {
    return invalid(target, "operand chunks has shape " + shape_str(chunks.dimensions()) +
                               ", expected (num_chunks, 4) with out_blocks = " +
                               to_string(out_blocks) + " <= num_chunks < 2^31");
  }
  if (splits.dimensions()[1] != 2 || n_split < 0 || n_split > num_chunks) {
    return invalid(target, "operand splits has shape " + shape_str(splits.dimensions()) +
                               ", expected (n_split + 1, 2) with n_split <= num_chunks");
  }
  // The packing's CTAs follow from its length (tables.py: _packing; its items are 2 nnz ints
  // padded to a multiple of 4); one element: no packing.
  const int64_t packed_size = packed.dimensions()[0];
  const int64_t packed_ctas = packed_size - packed_items_ints(nnz) - 2 * out_blocks - 2;
  const bool has_packing = packed_size > 1;
  if (packed_size < 1 || (has_packing && (packed_ctas < 1 || packed_ctas > kMaxGridX))) {
    return invalid(target, "operand packed has shape " + shape_str(packed.dimensions()) +
                               ", expected (1,) or (items + 2 " + out_letter +
                               "/bs + ctas + 2,) with ctas >= 1 and items = 2 nnz rounded up to 4 for nnz = " +
                               to_string(nnz));
  }
  const int64_t need_scratch = stream_scratch_bytes(rows, groups, n_split, bs);
  if (static_cast<int64_t>(scratch.size_bytes()) < need_scratch) {
    return invalid(target, "result scratch has " + to_string(scratch.size_bytes()) +
                               " bytes, the small-N path needs " + to_string(need_scratch));
  }
  BsmmBlocksArgs a;
  JBS_RETURN_IF_ERROR(set_groups(target, group_offsets, group_items, out_blocks, bs, &a));
  JBS_RETURN_IF_ERROR(set_wide_groups(target, wide_offsets, wide_items, wide_columns, out_blocks, bs, &a));
  JBS_RETURN_IF_ERROR(set_paired_groups(target, paired_offsets, paired_items, paired_columns, &a));
  if (groups == 0 || rows == 0 || out_cols == 0) return ffi::Error::Success();

  a.in = in.untyped_data();
  a.w = w.untyped_data();
  a.offsets = static_cast<const int32_t*>(offsets.untyped_data());
  a.items = static_cast<const int32_t*>(items.untyped_data());
  a.out = out.untyped_data();
  a.rows = rows;
  a.in_cols = in_cols;
  a.out_cols = out_cols;
  a.in_group_stride = id[0] == 1 ? 0 : rows * in_cols;
  a.w_group_stride = wd[0] == 1 ? 0 : nnz * bs * bs;
  a.out_group_stride = rows * out_cols;
  a.groups = groups;
  a.block_size = block_size;
  a.transpose_w = transpose;
  a.precise = precision == 1;
  a.chunks = static_cast<const int32_t*>(chunks.untyped_data());
  a.splits = static_cast<const int32_t*>(splits.untyped_data());
  a.num_chunks = num_chunks;
  a.n_split = n_split;
  a.nnz = nnz;
  a.scratch = scratch.untyped_data();
  a.scratch_bytes = static_cast<int64_t>(scratch.size_bytes());
  a.num_sms = num_sms();
  if (has_packing) {
    a.packed = static_cast<const int32_t*>(packed.untyped_data());
    a.packed_ctas = static_cast<int>(packed_ctas);
  }

  return launch_blocks(target, dt, a, stream);
}

ffi::Error BsmmFwdImpl(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer w,
                       ffi::AnyBuffer offsets, ffi::AnyBuffer items, ffi::AnyBuffer chunks,
                       ffi::AnyBuffer splits, ffi::AnyBuffer group_offsets,
                       ffi::AnyBuffer group_items, ffi::AnyBuffer wide_offsets,
                       ffi::AnyBuffer wide_items, ffi::AnyBuffer wide_columns,
                       ffi::AnyBuffer paired_offsets, ffi::AnyBuffer paired_items,
                       ffi::AnyBuffer paired_columns, ffi::AnyBuffer packed, ffi::Result<ffi::AnyBuffer> y,
                       ffi::Result<ffi::AnyBuffer> scratch, int32_t block_size,
                       int32_t precision) {
  return bsmm_blocks("jbs_bsmm_fwd", /*transpose=*/false, stream, x, w, offsets, items,
                     chunks, splits, group_offsets, group_items, wide_offsets, wide_items, wide_columns,
                     paired_offsets, paired_items, paired_columns, packed, *y,
                     *scratch, block_size,
                     precision);
}

ffi::Error BsmmDxImpl(cudaStream_t stream, ffi::AnyBuffer dy, ffi::AnyBuffer w,
                       ffi::AnyBuffer offsets, ffi::AnyBuffer items, ffi::AnyBuffer chunks,
                       ffi::AnyBuffer splits, ffi::AnyBuffer group_offsets,
                       ffi::AnyBuffer group_items, ffi::AnyBuffer wide_offsets,
                       ffi::AnyBuffer wide_items, ffi::AnyBuffer wide_columns,
                       ffi::AnyBuffer paired_offsets, ffi::AnyBuffer paired_items,
                       ffi::AnyBuffer paired_columns, ffi::AnyBuffer packed, ffi::Result<ffi::AnyBuffer> dx,
                       ffi::Result<ffi::AnyBuffer> scratch, int32_t block_size,
                       int32_t precision) {
  return bsmm_blocks("jbs_bsmm_dx", /*transpose=*/true, stream, dy, w, offsets, items,
                     chunks, splits, group_offsets, group_items, wide_offsets, wide_items, wide_columns,
                     paired_offsets, paired_items, paired_columns, packed, *dx,
                     *scratch, block_size,
                     precision);
}

ffi::Error BsmmDwImpl(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer dy,
                      ffi::AnyBuffer items, ffi::AnyBuffer panel_items, ffi::AnyBuffer panel_offsets,
                      ffi::Result<ffi::AnyBuffer> dw_result,
                      ffi::Result<ffi::AnyBuffer> scratch_result, int32_t block_size, int32_t precision,
                      int32_t row_splits) {
  const char* target = "jbs_bsmm_dw";
  ffi::AnyBuffer dw = *dw_result;
  ffi::AnyBuffer scratch = *scratch_result;
  JBS_RETURN_IF_ERROR(check_supported_dtype(target, "operand x", x));
  const ffi::DataType dt = x.element_type();
  JBS_RETURN_IF_ERROR(check_attrs(target, block_size, precision));
  JBS_RETURN_IF_ERROR(check_data(target, "operand x", x, dt, 3, "(G or 1, N, C)"));
  JBS_RETURN_IF_ERROR(check_data(target, "operand dy", dy, dt, 3, "(G or 1, N, K)"));
  JBS_RETURN_IF_ERROR(check_index(target, "operand items", items, 2, "(nnz, 2)"));
  JBS_RETURN_IF_ERROR(check_index(target, "operand panel_items", panel_items, 2, "(nnz, 4)"));
  JBS_RETURN_IF_ERROR(check_index(target, "operand panel_offsets", panel_offsets, 1, "(panels + 1,)"));
  JBS_RETURN_IF_ERROR(check_data(target, "result dw", dw, dt, 4, "(G, nnz, bs, bs)"));

  const int64_t bs = block_size;
  const auto xd = x.dimensions();
  const auto yd = dy.dimensions();
  const auto wd = dw.dimensions();
  const int64_t groups = wd[0];
  const int64_t nnz = wd[1];
  const int64_t rows = xd[1];
  JBS_RETURN_IF_ERROR(check_group(target, "operand x", x, groups));
  JBS_RETURN_IF_ERROR(check_group(target, "operand dy", dy, groups));
  if (yd[1] != rows) {
    return invalid(target, "operand x has shape " + shape_str(xd) + " but operand dy has shape " +
                               shape_str(yd) + ": the N dims (axis 1) must match");
  }
  if (xd[2] % bs != 0) {
    return invalid(target, "operand x has shape " + shape_str(xd) + ": C = " + to_string(xd[2]) +
                               " is not a multiple of block_size " + to_string(bs));
  }
  if (yd[2] % bs != 0) {
    return invalid(target, "operand dy has shape " + shape_str(yd) + ": K = " + to_string(yd[2]) +
                               " is not a multiple of block_size " + to_string(bs));
  }
  if (wd[2] != bs || wd[3] != bs) {
    return invalid(target, "result dw has shape " + shape_str(wd) + ", expected (G, nnz, " +
                               to_string(bs) + ", " + to_string(bs) + ") for block_size " +
                               to_string(bs));
  }
  if (items.dimensions()[0] != nnz || items.dimensions()[1] != 2) {
    return invalid(target, "operand items has shape " + shape_str(items.dimensions()) +
                               ", expected (nnz, 2) = (" + to_string(nnz) +
                               ", 2) with nnz from dw " + shape_str(wd));
  }
  if (panel_items.dimensions()[0] != nnz || panel_items.dimensions()[1] != 4) {
    return invalid(target, "operand panel_items has shape " + shape_str(panel_items.dimensions()) +
                               ", expected (nnz, 4) = (" + to_string(nnz) + ", 4) with nnz from dw " + shape_str(wd));
  }
  const int64_t panel_cols = kDwPanelChannels >= bs ? kDwPanelChannels / bs : 1;
  const int64_t panels = (yd[2] / bs + panel_cols - 1) / panel_cols;
  if (nnz > 0 && (panel_offsets.dimensions()[0] < 2 || panel_offsets.dimensions()[0] > panels + 1)) {
    return invalid(target, "operand panel_offsets has shape " + shape_str(panel_offsets.dimensions()) +
                               ", expected (panels + 1,) with 1 <= panels <= " + to_string(panels) + " for K = " +
                               to_string(yd[2]) + " and block_size " + to_string(bs));
  }
  if (groups > kMaxGroups) {
    return invalid(target, "result dw has " + to_string(groups) + " groups, at most " +
                               to_string(kMaxGroups) + " are supported");
  }
  if (nnz > kMaxGridX) {
    return invalid(target, "result dw has nnz = " + to_string(nnz) + " blocks, at most 2^31-1 are supported");
  }
  JBS_RETURN_IF_ERROR(check_dw_scratch(target, scratch, row_splits, groups, nnz, bs));
  if (groups == 0 || nnz == 0) return ffi::Error::Success();

  BsmmDwArgs a = dw_args(x, dy, items, dw, scratch, rows, block_size, precision, row_splits);
  a.panel_items = static_cast<const int32_t*>(panel_items.untyped_data());
  a.panel_offsets = static_cast<const int32_t*>(panel_offsets.untyped_data());
  a.num_panels = static_cast<int>(panel_offsets.dimensions()[0] - 1);
  a.panel_cols = static_cast<int>(panel_cols);

  return launch_dw(target, dt, a, stream);
}

}  // namespace
}  // namespace jbs

// The forward and the input gradient take the same operands (the input is x for the forward,
// dy for the input gradient; the offsets run over the output's block columns).
#define JBS_BSMM_BLOCKS_BINDING()                                                          \
  ffi::Ffi::Bind()                                                                         \
      .Ctx<ffi::PlatformStream<cudaStream_t>>()                                            \
      .Arg<ffi::AnyBuffer>() /* x or dy (G|1, N, C or K) */                                \
      .Arg<ffi::AnyBuffer>() /* w (G|1, nnz, bs, bs) */                                    \
      .Arg<ffi::AnyBuffer>() /* offsets int32 (output blocks + 1) */                       \
      .Arg<ffi::AnyBuffer>() /* items int32 (nnz, 2) */                                    \
      .Arg<ffi::AnyBuffer>() /* chunks int32 (num_chunks, 4) */                            \
      .Arg<ffi::AnyBuffer>() /* splits int32 (n_split + 1, 2) */                           \
      .Arg<ffi::AnyBuffer>() /* group_offsets int32 (num_groups + 1) */                    \
      .Arg<ffi::AnyBuffer>() /* group_items int32 (n, 1 + width) */                        \
      .Arg<ffi::AnyBuffer>() /* wide_offsets int32 (num_wide_groups + 1) */                \
      .Arg<ffi::AnyBuffer>() /* wide_items int32 (n, 1 + wide width) */                    \
      .Arg<ffi::AnyBuffer>() /* wide_columns int32 (num_wide_groups * wide width) */       \
      .Arg<ffi::AnyBuffer>() /* paired_offsets int32 (num_groups + 1) */                   \
      .Arg<ffi::AnyBuffer>() /* paired_items int32 (n, 1 + width) */                       \
      .Arg<ffi::AnyBuffer>() /* paired_columns int32 (num_groups * width) */               \
      .Arg<ffi::AnyBuffer>() /* packed int32 (items + 2 out blocks + ctas + 2) or (1) */    \
      .Ret<ffi::AnyBuffer>() /* y or dx (G, N, K or C) */                                  \
      .Ret<ffi::AnyBuffer>() /* scratch float32 (small-N splits) */                        \
      .Attr<int32_t>("block_size")                                                         \
      .Attr<int32_t>("precision")

XLA_FFI_DEFINE_HANDLER_SYMBOL(JbsBsmmFwd, jbs::BsmmFwdImpl, JBS_BSMM_BLOCKS_BINDING(),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JbsBsmmDx, jbs::BsmmDxImpl, JBS_BSMM_BLOCKS_BINDING(),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(JbsBsmmDw, jbs::BsmmDwImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()  // x (G|1, N, C)
                                  .Arg<ffi::AnyBuffer>()  // dy (G|1, N, K)
                                  .Arg<ffi::AnyBuffer>()  // items int32 (nnz, 2)
                                  .Arg<ffi::AnyBuffer>()  // panel_items int32 (nnz, 4)
                                  .Arg<ffi::AnyBuffer>()  // panel_offsets int32 (panels + 1,)
                                  .Ret<ffi::AnyBuffer>()  // dw (G, nnz, bs, bs)
                                  .Ret<ffi::AnyBuffer>()  // scratch float32 (row splits' partials)
                                  .Attr<int32_t>("block_size")
                                  .Attr<int32_t>("precision")
                                  .Attr<int32_t>("row_splits"),
                              {ffi::Traits::kCmdBufferCompatible});
