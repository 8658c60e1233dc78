// Host-side launch helper shared by all kernels.
#pragma once

#include <cuda_runtime.h>

namespace jbs {

// Kernels without an opt-in are limited to 48 KiB of dynamic shared memory.
inline constexpr size_t kDefaultSmemLimit = 48 * 1024;

// Launches `kernel<<<grid, block, smem_bytes, stream>>>(params)` and returns the
// launch error, if any. Raising the dynamic shared-memory limit is a function
// attribute, not a stream operation, so it is legal while XLA captures the
// handler into a CUDA graph; it is cheap, so we just set it on every launch
// (the attribute is per device, and a process may drive several).
template <typename Params>
cudaError_t launch_kernel(void (*kernel)(Params), dim3 grid, dim3 block, size_t smem_bytes,
                          cudaStream_t stream, const Params& params) {
  // (with 1 KiB of slack: static __shared__ variables count towards the limit too)
  if (smem_bytes + 1024 > kDefaultSmemLimit) {
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem_bytes));
    if (err != cudaSuccess) return err;
  }
  kernel<<<grid, block, smem_bytes, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace jbs
