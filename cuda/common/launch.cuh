// Host-side launch helper shared by all kernels.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>
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
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // returned here: not to be reported again by the next op's launch
    return err;
  }
  done.insert({kernel, device});
  return cudaSuccess;
}

// How many CTAs of `threads` threads and `smem_bytes` of dynamic shared memory
// fit on one SM of the current device at once (thread and shared-memory limits,
// 1 KiB reserved per CTA). Device attributes are cached per device; XLA may run the
// handlers of several devices on several threads, hence atomics (the shared-memory
// figure is published last, so a thread that sees it sees the thread count too).
inline int resident_ctas_per_sm(int threads, size_t smem_bytes) {
  static std::atomic<int> smem_per_sm[64] = {};
  static std::atomic<int> threads_per_sm[64] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return 1;
  int smem = smem_per_sm[device].load(std::memory_order_acquire);
  if (smem == 0) {
    int thr = 0;
    cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
    cudaDeviceGetAttribute(&thr, cudaDevAttrMaxThreadsPerMultiProcessor, device);
    smem = smem > 0 ? smem : 228 * 1024;
    threads_per_sm[device].store(thr > 0 ? thr : 2048, std::memory_order_relaxed);
    smem_per_sm[device].store(smem, std::memory_order_release);
  }
  const size_t by_smem = static_cast<size_t>(smem) / (smem_bytes + 1024);
  const int by_threads = threads_per_sm[device].load(std::memory_order_relaxed) / threads;
  const int n = static_cast<int>(by_smem < static_cast<size_t>(by_threads) ? by_smem : by_threads);
  return n > 0 ? n : 1;
}

// The most dynamic shared memory one block of the current device may opt in to
// (227 KiB on sm_90, 163 KiB on sm_80, 99 KiB on sm_86 / sm_89), cached per device.
// JBS_MAX_SMEM_PER_BLOCK=bytes lowers it (read at every launch), so that a Hopper runs the
// dispatch as a GPU with less shared memory would (tests of the fallbacks).
inline size_t max_smem_per_block_optin() {
  const char* cap = std::getenv("JBS_MAX_SMEM_PER_BLOCK");
  const long long capped = cap == nullptr ? 0 : std::atoll(cap);
  static std::atomic<int> limit[64] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return kDefaultSmemLimit;
  int bytes = limit[device].load(std::memory_order_relaxed);
  if (bytes == 0) {
    cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    bytes = bytes > 0 ? bytes : static_cast<int>(kDefaultSmemLimit);
    limit[device].store(bytes, std::memory_order_relaxed);
  }
  return static_cast<size_t>(capped > 0 && capped < bytes ? capped : bytes);
}

// Whether a kernel with `smem_bytes` of dynamic shared memory can run on the current device:
// an sm_90 block may opt in to 227 KiB, an sm_80 one to 163 and an sm_86 / sm_89 one to 99.
// The dispatch asks before a kernel sized for Hopper and takes another where it does not fit.
inline bool smem_fits(size_t smem_bytes) { return smem_bytes <= max_smem_per_block_optin(); }

// Whether the current device is sm_90 (Hopper), the only target of the wgmma
// kernels, cached per device.
inline bool device_is_sm90() {
  static std::atomic<int> cc[64] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return false;
  int capability = cc[device].load(std::memory_order_relaxed);
  if (capability == 0) {
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    capability = major * 10 + minor;
    cc[device].store(capability, std::memory_order_relaxed);
  }
  return capability == 90;
}

// The current device's peak memory bandwidth in bytes per second (twice the memory clock
// times the bus width; 0 where the driver does not say), cached per device. For the dispatch
// rules that measured differently on an H100 (3.35 TB/s) and an H200 (4.8 TB/s).
inline double device_peak_memory_bytes_per_s() {
  static std::atomic<double> peak[64] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return 0.0;
  double bytes_per_s = peak[device].load(std::memory_order_relaxed);
  if (bytes_per_s == 0.0) {
    int clock_khz = 0, bus_bits = 0;
    cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device);
    cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device);
    bytes_per_s = 2.0 * 1e3 * clock_khz * (bus_bits / 8.0);
    peak[device].store(bytes_per_s, std::memory_order_relaxed);
  }
  return bytes_per_s;
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
  const cudaError_t err = cudaLaunchKernelEx(&config, kernel, params);
  if (err != cudaSuccess) (void)cudaGetLastError();  // returned here, not again at the next launch
  return err;
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
