// Element types the kernels support and the few per-type operations they need.
//
// Kernels only ever read x/w/dy as raw 16-byte chunks (cp.async) and feed them
// to tensor cores, so the only per-type arithmetic on CUDA cores is converting
// fp32 accumulators back to the storage type in the epilogue.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

namespace jbs {

// Runtime tag for the three storage types. Kept separate from xla::ffi::DataType
// so kernel code does not depend on the FFI headers.
enum class DType { kF32, kBF16, kF16 };

// Compile-time carrier of a type, passed to generic lambdas by the dispatchers.
template <typename T>
struct TypeTag {
  using type = T;
};

// True for the 16-bit types that use the bf16/f16 tensor-core instructions;
// fp32 goes through the tf32 instructions instead.
template <typename T>
inline constexpr bool kIs16Bit = sizeof(T) == 2;

template <typename T>
__device__ __forceinline__ T from_float(float v);

template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}

template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}

// Two values of a 16-bit T in one register, a in the low half (the lower address).
template <typename T>
__device__ __forceinline__ uint32_t pack_pair(float a, float b) {
  static_assert(kIs16Bit<T>, "pack_pair: 16-bit types");
  const T lo = from_float<T>(a), hi = from_float<T>(b);
  uint16_t lo_bits, hi_bits;
  memcpy(&lo_bits, &lo, 2);
  memcpy(&hi_bits, &hi, 2);
  return static_cast<uint32_t>(lo_bits) | (static_cast<uint32_t>(hi_bits) << 16);
}

}  // namespace jbs
