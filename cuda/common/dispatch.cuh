// Runtime-to-compile-time dispatch over the template parameters of the kernels.
//
// Each dispatcher calls a generic lambda with a compile-time constant (a
// TypeTag or a std::integral_constant), so every combination the caller can
// reach is instantiated exactly once, in the translation unit that calls it.
// The caller validates the runtime value first; an unexpected value falls
// through to the last case rather than being silently ignored at runtime
// because the FFI handlers reject it before dispatching.
#pragma once

#include <type_traits>

#include "common/dtype.cuh"

namespace jbs {

template <typename F>
decltype(auto) dispatch_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kBF16:
      return f(TypeTag<__nv_bfloat16>{});
    case DType::kF16:
      return f(TypeTag<__half>{});
    case DType::kF32:
    default:
      return f(TypeTag<float>{});
  }
}

// Block sizes supported by every kernel: the bs x bs weight blocks.
inline constexpr bool is_supported_block_size(int bs) {
  return bs == 8 || bs == 16 || bs == 32 || bs == 64;
}

template <typename F>
decltype(auto) dispatch_block_size(int bs, F&& f) {
  switch (bs) {
    case 8:
      return f(std::integral_constant<int, 8>{});
    case 16:
      return f(std::integral_constant<int, 16>{});
    case 32:
      return f(std::integral_constant<int, 32>{});
    case 64:
    default:
      return f(std::integral_constant<int, 64>{});
  }
}

template <typename F>
decltype(auto) dispatch_bool(bool b, F&& f) {
  if (b) return f(std::true_type{});
  return f(std::false_type{});
}

}  // namespace jbs
