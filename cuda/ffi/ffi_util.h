// Small helpers for the FFI handlers: dtype mapping, readable shape strings and
// error construction. Messages name the target and operand so a failure in a
// large jitted program points at the offending call.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <optional>
#include <string>

#include "common/dtype.cuh"
#include "ffi/xla_ffi.h"

namespace jbs {

namespace ffi = xla::ffi;

inline std::optional<DType> to_dtype(ffi::DataType t) {
  switch (t) {
    case ffi::DataType::F32:
      return DType::kF32;
    case ffi::DataType::BF16:
      return DType::kBF16;
    case ffi::DataType::F16:
      return DType::kF16;
    default:
      return std::nullopt;
  }
}

inline std::string dtype_name(ffi::DataType t) {
  switch (t) {
    case ffi::DataType::F32:
      return "float32";
    case ffi::DataType::BF16:
      return "bfloat16";
    case ffi::DataType::F16:
      return "float16";
    case ffi::DataType::F64:
      return "float64";
    case ffi::DataType::S32:
      return "int32";
    case ffi::DataType::S64:
      return "int64";
    default:
      return "dtype#" + std::to_string(static_cast<int>(t));
  }
}

inline std::string shape_str(ffi::Span<const int64_t> dims) {
  std::string s = "(";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[i]);
  }
  if (dims.size() == 1) s += ",";
  return s + ")";
}

inline ffi::Error invalid(const char* target, const std::string& msg) {
  return ffi::Error::InvalidArgument(std::string(target) + ": " + msg);
}

inline ffi::Error cuda_failure(const char* target, cudaError_t err) {
  return ffi::Error::Internal(std::string(target) + ": CUDA error " + cudaGetErrorName(err) + ": " +
                              cudaGetErrorString(err));
}

}  // namespace jbs
