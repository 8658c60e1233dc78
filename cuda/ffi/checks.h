// Validation shared by the FFI handlers: each check returns an ffi::Error whose
// message names the target, the operand, the shape or dtype received and the
// one expected.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <limits>
#include <string>

#include "common/dispatch.cuh"
#include "ffi/ffi_util.h"
#include "ffi/xla_ffi.h"
#include "matmul/bsmm.h"

namespace jbs {

constexpr int64_t kMaxGridX = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxGroups = 65535;  // gridDim.y limit

using std::to_string;

// Multiprocessor count of the current device (host attribute query: no sync,
// legal during graph capture), cached per device (atomics: XLA may run the handlers of
// several devices on several threads).
inline int num_sms() {
  static std::atomic<int> cached[64] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 132;
  if (dev >= 0 && dev < 64) {
    const int n = cached[dev].load(std::memory_order_relaxed);
    if (n > 0) return n;
  }
  int n = 0;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) n = 132;
  if (dev >= 0 && dev < 64) cached[dev].store(n, std::memory_order_relaxed);
  return n;
}

// Checks dtype and rank of a data operand (x, w, dy or a result).
inline ffi::Error check_data(const char* target, const std::string& name, const ffi::AnyBuffer& b,
                      ffi::DataType dtype, size_t rank, const char* layout) {
  if (b.element_type() != dtype) {
    return invalid(target, name + " has dtype " + dtype_name(b.element_type()) + ", expected " +
                               dtype_name(dtype) +
                               " (x, w, dy and the result must all have one dtype)");
  }
  if (b.dimensions().size() != rank) {
    return invalid(target, name + " has shape " + shape_str(b.dimensions()) + ", expected rank " +
                               to_string(rank) + " " + layout);
  }
  return ffi::Error::Success();
}

// Checks an int32 index operand's dtype and rank.
inline ffi::Error check_index(const char* target, const std::string& name, const ffi::AnyBuffer& b,
                       size_t rank, const char* layout) {
  if (b.element_type() != ffi::DataType::S32) {
    return invalid(target, name + " has dtype " + dtype_name(b.element_type()) +
                               ", expected int32 " + layout);
  }
  if (b.dimensions().size() != rank) {
    return invalid(target, name + " has shape " + shape_str(b.dimensions()) + ", expected rank " +
                               to_string(rank) + " " + layout);
  }
  return ffi::Error::Success();
}

// The group dim of an operand must be 1 (broadcast) or the result's G.
inline ffi::Error check_group(const char* target, const std::string& name, const ffi::AnyBuffer& b,
                       int64_t groups) {
  const int64_t gb = b.dimensions()[0];
  if (gb != 1 && gb != groups) {
    return invalid(target, name + " has shape " + shape_str(b.dimensions()) + ": leading group dim " +
                               to_string(gb) + " must be 1 or the result's group count " +
                               to_string(groups));
  }
  return ffi::Error::Success();
}

inline ffi::Error check_attrs(const char* target, int32_t block_size, int32_t precision) {
  if (!is_supported_block_size(block_size)) {
    return invalid(target, "attribute block_size is " + to_string(block_size) +
                               ", expected one of 8, 16, 32, 64");
  }
  if (precision != 0 && precision != 1) {
    return invalid(target, "attribute precision is " + to_string(precision) +
                               ", expected 0 (default) or 1 (highest)");
  }
  return ffi::Error::Success();
}

// First dtype check shared by all targets: the leading data operand decides
// the dtype every other data operand must match.
inline ffi::Error check_supported_dtype(const char* target, const std::string& name,
                                 const ffi::AnyBuffer& b) {
  if (!to_dtype(b.element_type())) {
    return invalid(target, name + " has dtype " + dtype_name(b.element_type()) +
                               ", expected float32, bfloat16 or float16");
  }
  return ffi::Error::Success();
}

// The dw targets' row_splits attribute and their float32 scratch result, which holds the
// row splits' partials (groups * row_splits * blocks * bs * bs) where row_splits > 1.
inline ffi::Error check_dw_scratch(const char* target, const ffi::AnyBuffer& scratch, int32_t row_splits,
                                   int64_t groups, int64_t blocks, int64_t bs) {
  if (row_splits < 1 || row_splits > kMaxGroups) {
    return invalid(target, "attribute row_splits is " + to_string(row_splits) + ", expected 1..65535");
  }
  const int64_t per_block = groups * row_splits * bs * bs;  // <= 2^44 within the accepted limits
  if (row_splits > 1 && per_block > 0 && blocks > std::numeric_limits<int64_t>::max() / 4 / per_block) {
    return invalid(target, "attribute row_splits is " + to_string(row_splits) + ": the partials of " +
                               to_string(blocks) + " blocks would need more than 2^63 bytes of scratch");
  }
  const int64_t need_scratch = row_splits > 1 ? 4 * per_block * blocks : 0;
  if (scratch.element_type() != ffi::DataType::F32 || static_cast<int64_t>(scratch.size_bytes()) < need_scratch) {
    return invalid(target, "result scratch has " + to_string(scratch.size_bytes()) + " bytes of " +
                               dtype_name(scratch.element_type()) + ", expected float32 of at least " +
                               to_string(need_scratch) + " bytes for " + to_string(row_splits) + " row splits");
  }
  return ffi::Error::Success();
}

#define JBS_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::xla::ffi::Error jbs_err_ = (expr);       \
    if (jbs_err_.failure()) return jbs_err_;   \
  } while (0)

}  // namespace jbs

namespace jbs {

// Column groups of `width` output block columns (jbs/_src/tables.py _groups): operands
// {kind}_offsets (num_groups + 1,) and {kind}_items (union items, 1 + width) with
// num_groups = ceil(out_blocks / width). Returns num_groups through *groups.
inline ffi::Error check_column_groups(const char* target, const std::string& kind, const ffi::AnyBuffer& offsets,
                                      const ffi::AnyBuffer& items, int64_t out_blocks, int64_t width,
                                      int64_t* groups) {
  JBS_RETURN_IF_ERROR(check_index(target, "operand " + kind + "_offsets", offsets, 1, "(num_groups + 1,)"));
  JBS_RETURN_IF_ERROR(check_index(target, "operand " + kind + "_items", items, 2, "(union items, 1 + width)"));
  *groups = (out_blocks + width - 1) / width;
  if (items.dimensions()[1] != 1 + width || offsets.dimensions()[0] != *groups + 1) {
    return invalid(target, "operands " + kind + "_offsets " + shape_str(offsets.dimensions()) + " and " + kind +
                               "_items " + shape_str(items.dimensions()) + " expected (" + to_string(*groups + 1) +
                               ",) and (n, " + to_string(1 + width) + ") for " + to_string(out_blocks) +
                               " output blocks of " + to_string(width) + " per group");
  }
  return ffi::Error::Success();
}

// The ordinary groups of the large-N kernels: width = max(1, 128 / bs).
inline ffi::Error set_groups(const char* target, const ffi::AnyBuffer& offsets,
                             const ffi::AnyBuffer& items, int64_t out_blocks, int64_t bs,
                             BsmmBlocksArgs* a) {
  const int64_t width = bs >= 128 ? 1 : 128 / bs;
  JBS_RETURN_IF_ERROR(check_column_groups(target, "group", offsets, items, out_blocks, width, &a->num_groups));
  a->group_offsets = static_cast<const int32_t*>(offsets.untyped_data());
  a->group_items = static_cast<const int32_t*>(items.untyped_data());
  a->num_group_items = items.dimensions()[0];
  a->group_width = static_cast<int>(width);
  return ffi::Error::Success();
}

// The TMA group kernel's wide groups (jbs/_src/tables.py wide_group_width: 192 / bs columns
// at bs 32 and 64, the ordinary width otherwise), and which output block column each group's
// column p is (tables.py shared_input_order): columns (num_wide_groups * width,), -1 = none.
inline ffi::Error set_wide_groups(const char* target, const ffi::AnyBuffer& offsets, const ffi::AnyBuffer& items,
                                  const ffi::AnyBuffer& columns, int64_t out_blocks, int64_t bs,
                                  BsmmBlocksArgs* a) {
  const int64_t width = wide_group_width(bs);
  JBS_RETURN_IF_ERROR(check_column_groups(target, "wide", offsets, items, out_blocks, width, &a->num_wide_groups));
  JBS_RETURN_IF_ERROR(check_index(target, "operand wide_columns", columns, 1, "(num_wide_groups * width,)"));
  if (columns.dimensions()[0] != a->num_wide_groups * width) {
    return invalid(target, "operand wide_columns " + shape_str(columns.dimensions()) + " expected (" +
                               to_string(a->num_wide_groups * width) + ",) for " + to_string(a->num_wide_groups) +
                               " wide groups of " + to_string(width) + " columns");
  }
  a->wide_offsets = static_cast<const int32_t*>(offsets.untyped_data());
  a->wide_items = static_cast<const int32_t*>(items.untyped_data());
  a->wide_columns = static_cast<const int32_t*>(columns.untyped_data());
  a->num_wide_items = items.dimensions()[0];
  a->wide_width = static_cast<int>(width);
  return ffi::Error::Success();
}

// The paired column groups (jbs/_src/tables.py: a conv's by paired_order, a matmul's by
// shared_input_order): shaped as the groups above (set_groups first), plus columns
// (num_groups * width,): output block column p of group q is columns[q * width + p], -1 for
// none. Read by the conv strip kernel and by the matmul's TMA group kernel at 16-bit bs 32.
inline ffi::Error set_paired_groups(const char* target, const ffi::AnyBuffer& offsets, const ffi::AnyBuffer& items,
                                    const ffi::AnyBuffer& columns, BsmmBlocksArgs* a) {
  JBS_RETURN_IF_ERROR(check_index(target, "operand paired_offsets", offsets, 1, "(num_groups + 1,)"));
  JBS_RETURN_IF_ERROR(check_index(target, "operand paired_items", items, 2, "(union items, 1 + width)"));
  JBS_RETURN_IF_ERROR(check_index(target, "operand paired_columns", columns, 1, "(num_groups * width,)"));
  const int64_t groups = a->num_groups, width = a->group_width;
  if (offsets.dimensions()[0] != groups + 1 || items.dimensions()[1] != 1 + width ||
      columns.dimensions()[0] != groups * width) {
    return invalid(target, "operands paired_offsets " + shape_str(offsets.dimensions()) + ", paired_items " +
                               shape_str(items.dimensions()) + " and paired_columns " +
                               shape_str(columns.dimensions()) + " expected (" + to_string(groups + 1) +
                               ",), (n, " + to_string(1 + width) + ") and (" + to_string(groups * width) + ",)");
  }
  a->paired_offsets = static_cast<const int32_t*>(offsets.untyped_data());
  a->paired_items = static_cast<const int32_t*>(items.untyped_data());
  a->paired_columns = static_cast<const int32_t*>(columns.untyped_data());
  a->num_paired_items = items.dimensions()[0];
  return ffi::Error::Success();
}

}  // namespace jbs
