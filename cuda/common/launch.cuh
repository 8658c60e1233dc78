// Host-side launch helper shared by all kernels.
#pragma once

#include <cuda_runtime.h>

#include <mutex>
#include <set>
#include <utility>

namespace jbs {

// Kernels without an opt-in are limited to 48 KiB of dynamic shared memory.
inline constexpr size_t kDefaultSmemLimit = 48 * 1024;

// Raises `kernel`'s dynamic shared-memory limit to `smem_bytes` once per
// (kernel, device): the attribute is per device, and a process may drive
// several. Every launch of a kernel asks for the same size, so the first
// call's setting stands. Setting a function attribute is not a stream
// operation, so it is legal while XLA captures the handler into a CUDA graph;
// doing it only once keeps a driver call off the per-op host path (the
// small-N ops are host-bound at low densities).
inline cudaError_t opt_in_smem(const void* kernel, size_t smem_bytes) {
  static std::mutex mutex;
  static std::set<std::pair<const void*, int>> done;
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  std::lock_guard<std::mutex> lock(mutex);
  if (done.count({kernel, device})) return cudaSuccess;
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(smem_bytes));
  if (err == cudaSuccess) done.insert({kernel, device});
  return err;
}

// Launches `kernel<<<grid, block, smem_bytes, stream>>>(params)` and returns the
// launch error, if any.
template <typename Params>
cudaError_t launch_kernel(void (*kernel)(Params), dim3 grid, dim3 block, size_t smem_bytes,
                          cudaStream_t stream, const Params& params) {
  // (with 1 KiB of slack: static __shared__ variables count towards the limit too)
  if (smem_bytes + 1024 > kDefaultSmemLimit) {
    cudaError_t err = opt_in_smem(reinterpret_cast<const void*>(kernel), smem_bytes);
    if (err != cudaSuccess) return err;
  }
  kernel<<<grid, block, smem_bytes, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace jbs
