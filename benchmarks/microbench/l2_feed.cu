// How fast can L2 feed the SMs' shared memory? A stand-alone microbenchmark
// (not part of the jbs build) behind the compute-bound analysis in
// benchmarks/NOTES.md, session 7. The large-N kernels receive one activation
// tile plus the present weight blocks per item, so their ceiling is bytes
// delivered into shared memory per second, not DRAM bandwidth.
//
// Every CTA (one per SM) streams `chunk`-byte contiguous runs of a buffer into
// a ring of shared-memory stages, touches one word per stage and moves on:
//   cpasync   256 threads issue 16-byte cp.async.cg, one commit group per stage
//             (what the jbs kernels do today);
//   bulk      one thread issues cp.async.bulk (1-D TMA) per stage, mbarrier
//             completion;
//   mcastC    clusters of C CTAs: each CTA bulk-copies 1/C of every stage and
//             multicasts it to all C, so each L2 read lands in C SMs.
// Delivered = bytes landing in shared memory; L2 read = bytes requested.
//
// Build and run on the GPU machine:
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/l2_feed benchmarks/microbench/l2_feed.cu && /tmp/l2_feed
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#define CHECK(x)                                                                          \
  do {                                                                                    \
    cudaError_t e = (x);                                                                  \
    if (e != cudaSuccess) {                                                               \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e));       \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// Offset of the run a CTA reads at step `it`: spread over the buffer so that
// concurrent CTAs hit different lines, wrapped to the buffer.
__device__ __forceinline__ uint64_t run_offset(uint64_t group, uint64_t it, uint64_t runs, uint64_t chunk) {
  return ((group * 7919 + it * 104729) % runs) * chunk;
}

// ---- cp.async, 16 B per thread ------------------------------------------------
__global__ void __launch_bounds__(256, 1) feed_cpasync(const char* buf, uint64_t runs, int chunk, int stages,
                                                       int iters, int* sink) {
  extern __shared__ __align__(128) char smem[];
  const int tid = threadIdx.x;
  int acc = 0;
  auto issue = [&](int it) {
    if (it < iters) {
      const char* src = buf + run_offset(blockIdx.x, it, runs, chunk);
      char* dst = smem + (it % stages) * chunk;
      for (int b = tid * 16; b < chunk; b += 256 * 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst + b)), "l"(src + b)
                     : "memory");
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  };
  for (int s = 0; s < stages - 1; ++s) issue(s);
  for (int it = 0; it < iters; ++it) {
    issue(it + stages - 1);
    // At most 2 groups left pending: ~3 stages (3 * chunk bytes) in flight per SM, not
    // stages - 1 (the session-7 figures were measured this way).
    asm volatile("cp.async.wait_group %0;\n" ::"n"(2) : "memory");  // stages >= 3
    __syncthreads();
    acc += reinterpret_cast<const int*>(smem + (it % stages) * chunk)[tid];
    __syncthreads();
  }
  if (acc == 0x12345678) *sink = acc;
}

// ---- cp.async.bulk, optionally multicast over a cluster of C ------------------
template <int C>
__global__ void __launch_bounds__(128, 1) feed_bulk(const char* buf, uint64_t runs, int chunk, int stages, int iters,
                                                    int* sink) {
  extern __shared__ __align__(128) char smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + stages * chunk);
  uint64_t* empty = full + stages;
  uint32_t rank = 0;
  if constexpr (C > 1) asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  const uint64_t group = blockIdx.x / C;  // CTAs of a cluster read the same runs
  const int part = chunk / C;
  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int s = 0; s < stages; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_addr(full + s)));
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(empty + s)), "r"(C));
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  if constexpr (C > 1) {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
  } else {
    __syncthreads();
  }
  auto issue = [&](int it) {
    const int s = it % stages;
    const int round = it / stages;
    if (round > 0) mbar_wait(smem_addr(empty + s), (round - 1) & 1);  // every CTA freed slot s
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(full + s)), "r"(chunk)
                 : "memory");
    const char* src = buf + run_offset(group, it, runs, chunk) + rank * part;
    const uint32_t dst = smem_addr(smem + s * chunk + rank * part);
    if constexpr (C == 1) {
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
          "l"(src), "r"(part), "r"(smem_addr(full + s))
          : "memory");
    } else {
      const uint16_t mask = (1u << C) - 1;
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
          " [%0], [%1], %2, [%3], %4;\n" ::"r"(dst),
          "l"(src), "r"(part), "r"(smem_addr(full + s)), "h"(mask)
          : "memory");
    }
  };
  int acc = 0;
  if (tid == 0) {
    for (int s = 0; s < stages && s < iters; ++s) issue(s);
    for (int it = 0; it < iters; ++it) {
      const int s = it % stages;
      mbar_wait(smem_addr(full + s), (it / stages) & 1);
      acc += reinterpret_cast<const int*>(smem + s * chunk)[rank];
      // Free slot s in every CTA that receives this CTA's multicast.
      for (uint32_t r = 0; r < static_cast<uint32_t>(C); ++r) {
        uint32_t remote = smem_addr(empty + s);
        if constexpr (C > 1) asm volatile("mapa.shared::cluster.u32 %0, %0, %1;\n" : "+r"(remote) : "r"(r));
        asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
      }
      if (it + stages < iters) issue(it + stages);
    }
  }
  // No CTA may exit while others can still multicast into it or arrive on it.
  if constexpr (C > 1)
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
  if (acc == 0x12345678) *sink = acc;
}

struct Result {
  double ms, delivered_tbs, l2_tbs;
  int ctas;
};

template <typename Launch>
static double time_ms(Launch launch) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  launch();  // warm-up (and L2 fill)
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  float best = 1e30f;
  for (int rep = 0; rep < 5; ++rep) {
    CHECK(cudaEventRecord(a));
    launch();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    best = ms < best ? ms : best;
  }
  return best;
}

template <int C>
static Result run_bulk(const char* buf, uint64_t bytes, int chunk, int stages, int iters, int* sink) {
  const size_t smem = static_cast<size_t>(stages) * chunk + 2 * stages * 8;
  CHECK(cudaFuncSetAttribute(feed_bulk<C>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  if (C > 1) CHECK(cudaFuncSetAttribute(feed_bulk<C>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = C;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.blockDim = dim3(128);
  cfg.dynamicSmemBytes = smem;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cfg.gridDim = dim3(C);
  int clusters = 0;
  CHECK(cudaOccupancyMaxActiveClusters(&clusters, feed_bulk<C>, &cfg));
  cfg.gridDim = dim3(clusters * C);
  const uint64_t runs = bytes / chunk;
  const double ms = time_ms([&] { CHECK(cudaLaunchKernelEx(&cfg, feed_bulk<C>, buf, runs, chunk, stages, iters, sink)); });
  const double delivered = static_cast<double>(clusters) * C * iters * chunk;
  return {ms, delivered / ms / 1e9, delivered / C / ms / 1e9, clusters * C};
}

static Result run_cpasync(const char* buf, uint64_t bytes, int chunk, int stages, int iters, int* sink, int sms) {
  const size_t smem = static_cast<size_t>(stages) * chunk;
  CHECK(cudaFuncSetAttribute(feed_cpasync, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const uint64_t runs = bytes / chunk;
  const double ms = time_ms([&] { feed_cpasync<<<sms, 256, smem>>>(buf, runs, chunk, stages, iters, sink); });
  const double delivered = static_cast<double>(sms) * iters * chunk;
  return {ms, delivered / ms / 1e9, delivered / ms / 1e9, sms};
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  const uint64_t big = 1ull << 30;
  char* buf = nullptr;
  int* sink = nullptr;
  CHECK(cudaMalloc(&buf, big));
  CHECK(cudaMemset(buf, 1, big));
  CHECK(cudaMalloc(&sink, 4));
  std::printf("%-9s %-8s %7s %6s %5s %9s %14s %12s\n", "mode", "buffer", "chunk", "stages", "ctas", "ms",
              "delivered TB/s", "L2 read TB/s");
  auto print = [](const char* mode, uint64_t bytes, int chunk, int stages, Result r) {
    std::printf("%-9s %5llu MB %7d %6d %5d %9.3f %14.2f %12.2f\n", mode, (unsigned long long)(bytes >> 20), chunk,
                stages, r.ctas, r.ms, r.delivered_tbs, r.l2_tbs);
  };
  for (uint64_t bytes : std::vector<uint64_t>{16ull << 20, big}) {
    for (int chunk : {8192, 16384, 32768}) {
      const int stages = 6;
      const int iters = static_cast<int>((bytes == big ? 2048ull : 8192ull) * 8192 / chunk);
      print("cpasync", bytes, chunk, stages, run_cpasync(buf, bytes, chunk, stages, iters, sink, prop.multiProcessorCount));
      print("bulk", bytes, chunk, stages, run_bulk<1>(buf, bytes, chunk, stages, iters, sink));
      print("mcast2", bytes, chunk, stages, run_bulk<2>(buf, bytes, chunk, stages, iters, sink));
      print("mcast4", bytes, chunk, stages, run_bulk<4>(buf, bytes, chunk, stages, iters, sink));
    }
  }
  CHECK(cudaFree(buf));
  CHECK(cudaFree(sink));
  return 0;
}
