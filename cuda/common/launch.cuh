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

// How many CTAs of `threads` threads and `smem_bytes` of dynamic shared memory
// fit on one SM of the current device at once (thread and shared-memory limits,
// 1 KiB reserved per CTA). Device attributes are cached per device.
inline int resident_ctas_per_sm(int threads, size_t smem_bytes) {
  static int smem_per_sm[64] = {};
  static int threads_per_sm[64] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return 1;
  if (smem_per_sm[device] == 0) {
    int smem = 0, thr = 0;
    cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
    cudaDeviceGetAttribute(&thr, cudaDevAttrMaxThreadsPerMultiProcessor, device);
    threads_per_sm[device] = thr > 0 ? thr : 2048;
    smem_per_sm[device] = smem > 0 ? smem : 228 * 1024;
  }
  const size_t by_smem = static_cast<size_t>(smem_per_sm[device]) / (smem_bytes + 1024);
  const int by_threads = threads_per_sm[device] / threads;
  const int n = static_cast<int>(by_smem < static_cast<size_t>(by_threads) ? by_smem : by_threads);
  return n > 0 ? n : 1;
}

// The most dynamic shared memory one block of the current device may opt in to
// (227 KiB on sm_90, 163 KiB on sm_80, 99 KiB on sm_86 / sm_89), cached per device.
inline size_t max_smem_per_block_optin() {
  static int limit[64] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return kDefaultSmemLimit;
  if (limit[device] == 0) {
    int bytes = 0;
    cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    limit[device] = bytes > 0 ? bytes : static_cast<int>(kDefaultSmemLimit);
  }
  return static_cast<size_t>(limit[device]);
}

// Whether the current device is sm_90 (Hopper), the only target of the wgmma
// kernels, cached per device.
inline bool device_is_sm90() {
  static int cc[64] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return false;
  if (cc[device] == 0) {
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    cc[device] = major * 10 + minor;
  }
  return cc[device] == 90;
}

// The current device's peak memory bandwidth in bytes per second (twice the memory clock
// times the bus width; 0 where the driver does not say), cached per device. For the dispatch
// rules that measured differently on an H100 (3.35 TB/s) and an H200 (4.8 TB/s).
inline double device_peak_memory_bytes_per_s() {
  static double peak[64] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return 0.0;
  if (peak[device] == 0.0) {
    int clock_khz = 0, bus_bits = 0;
    cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device);
    cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device);
    peak[device] = 2.0 * 1e3 * clock_khz * (bus_bits / 8.0);
  }
  return peak[device];
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

// launch_kernel with one launch attribute (cudaLaunchKernelEx).
template <typename Params>
cudaError_t launch_kernel_with(void (*kernel)(Params), dim3 grid, dim3 block, size_t smem_bytes,
                               cudaStream_t stream, const Params& params, cudaLaunchAttribute attribute) {
  if (smem_bytes + 1024 > kDefaultSmemLimit) {
    cudaError_t err = opt_in_smem(reinterpret_cast<const void*>(kernel), smem_bytes);
    if (err != cudaSuccess) return err;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, params);
}

// The same as launch_kernel, but `kernel` may start before the kernel ahead of
// it on `stream` completes (programmatic dependent launch, sm_90): its CTAs
// become resident once every CTA of that kernel has called
// griddep_launch_dependents() (common/ptx.cuh) or exited, and `kernel` must call
// griddep_wait() before it reads that kernel's results. What this saves is the
// launch gap between two kernels of one op: ~1 us in a CUDA graph and ~2 us as
// stream launches on an H100 (benchmarks/NOTES.md, session 36). For sm_90
// kernels only (the griddepcontrol instructions are sm_90's).
template <typename Params>
cudaError_t launch_kernel_after(void (*kernel)(Params), dim3 grid, dim3 block, size_t smem_bytes,
                                cudaStream_t stream, const Params& params) {
  cudaLaunchAttribute early{};
  early.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  early.val.programmaticStreamSerializationAllowed = 1;
  return launch_kernel_with(kernel, grid, block, smem_bytes, stream, params, early);
}

// The same in clusters of `cluster_x` CTAs along x (sm_90; grid.x a multiple of it).
template <typename Params>
cudaError_t launch_kernel_in_clusters(void (*kernel)(Params), dim3 grid, dim3 block, size_t smem_bytes,
                                      cudaStream_t stream, const Params& params, unsigned cluster_x) {
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = cluster_x;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  return launch_kernel_with(kernel, grid, block, smem_bytes, stream, params, cluster);
}

}  // namespace jbs
