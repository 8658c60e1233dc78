// What a wgmma costs on this GPU, by shape: back-to-back m64 x N x 16 bf16 wgmmas
// (common/wgmma.cuh), A from registers (RS) or shared memory (SS), B from shared
// memory, one CTA per SM with 1 or 2 warpgroups, each issuing batches of kBatch
// wgmmas into one accumulator and keeping two batches in flight (wgmma_wait<1>),
// as the conv kernels do. Prints per case the cycles one warpgroup spends per
// wgmma and the SM's dense rate in FLOP per cycle (the H100's peak is 4096 for
// bf16), so a kernel design can be costed by its wgmma count and shapes before it
// is built (benchmarks/NOTES.md, session 16: two designs were predicted from
// tensor work alone and both missed).
//
//   nvcc -O3 -std=c++17 -I cuda -gencode arch=compute_90a,code=sm_90a \
//     --expt-relaxed-constexpr -o /tmp/wgmma_rate benchmarks/microbench/wgmma_rate.cu && /tmp/wgmma_rate
//
// The operands are whatever shared memory and registers hold: values do not change
// a tensor core's timing.
#include <cuda_bf16.h>

#include <cstdint>
#include <cstdio>

#include "common/smem.cuh"
#include "common/wgmma.cuh"

namespace {

constexpr int kBatch = 8;       // wgmmas per commit group
constexpr int kBatches = 2048;  // per warpgroup and launch
using T = __nv_bfloat16;

// ACCS > 1: the batch's wgmmas go round-robin to ACCS accumulators, each reading B at a
// different offset (the conv kernels' taps: independent accumulators, a descriptor each).
template <int N, bool SS, int WARPGROUPS, int ACCS>
__global__ void __launch_bounds__(128 * WARPGROUPS, 1) wgmma_loop(long long* cycles, float* sink) {
  unsigned char* smem = jbs::dynamic_smem();
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);
  // K-major B (and A) tiles without swizzle: core matrices of 128 contiguous bytes, the
  // next one along k 128 bytes further (LBO), along n / m 256 bytes further (SBO).
  // Each warpgroup reads its own 32 KB.
  unsigned char* mine = smem + wg * 32768;
  const uint64_t b_desc = jbs::wgmma_desc(mine, 128, 256);
  const uint64_t a_desc = jbs::wgmma_desc(mine + 16384, 128, 256);
  uint32_t a[4] = {threadIdx.x, threadIdx.x * 3u, threadIdx.x * 5u, threadIdx.x * 7u};
  float acc[ACCS][N / 8][4] = {};
  __syncthreads();
  const long long start = clock64();
  for (int b = 0; b < kBatches; ++b) {
    jbs::wgmma_fence();
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const uint64_t b = b_desc + (ACCS > 1 ? (i % ACCS) * 8 : 0);  // 128-byte steps
      if constexpr (SS) {
        jbs::wgmma_ss<T, N, 0>(acc[i % ACCS], a_desc, b);
      } else {
        jbs::wgmma_rs<T, N, 0>(acc[i % ACCS], a, b);
      }
    }
    jbs::wgmma_commit();
    jbs::wgmma_wait<1>();
  }
  jbs::wgmma_wait<0>();
  const long long stop = clock64();
  if (threadIdx.x % 128 == 0) cycles[blockIdx.x * WARPGROUPS + wg] = stop - start;
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < ACCS; ++j) {
#pragma unroll
    for (int i = 0; i < N / 8; ++i) s += acc[j][i][0] + acc[j][i][1] + acc[j][i][2] + acc[j][i][3];
  }
  if (s == 1234.5f) sink[threadIdx.x] = s;  // keeps the MMAs alive
}

template <int N, bool SS, int WARPGROUPS, int ACCS = 1>
void run(int sms, long long* cycles, float* sink) {
  const auto kernel = wgmma_loop<N, SS, WARPGROUPS, ACCS>;
  const int smem = 32768 * WARPGROUPS;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  kernel<<<sms, 128 * WARPGROUPS, smem>>>(cycles, sink);  // warm-up
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaEventRecord(e0);
  kernel<<<sms, 128 * WARPGROUPS, smem>>>(cycles, sink);
  cudaEventRecord(e1);
  cudaEventSynchronize(e1);
  float ms = 0.f;
  cudaEventElapsedTime(&ms, e0, e1);
  long long host[1024];
  cudaMemcpy(host, cycles, sizeof(long long) * sms * WARPGROUPS, cudaMemcpyDeviceToHost);
  double mean = 0.0;
  for (int i = 0; i < sms * WARPGROUPS; ++i) mean += static_cast<double>(host[i]);
  mean /= sms * WARPGROUPS;
  const double wgmmas = static_cast<double>(kBatches) * kBatch;  // per warpgroup
  const double flop_per_wgmma = 2.0 * 64 * N * 16;
  const double cycles_per = mean / wgmmas;
  std::printf("%s m64n%-3dk16 | %d warpgroup(s) | %d accumulator(s) | %7.1f cycles per wgmma and warpgroup | "
              "%6.0f FLOP/cycle/SM | %5.0f TFLOP/s%s\n",
              SS ? "SS" : "RS", N, WARPGROUPS, ACCS, cycles_per, flop_per_wgmma * WARPGROUPS / cycles_per,
              flop_per_wgmma * wgmmas * WARPGROUPS * sms / (ms * 1e-3) / 1e12,
              cudaGetLastError() == cudaSuccess ? "" : "  (CUDA error)");
}

}  // namespace

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  std::printf("%s, %d SMs; back-to-back bf16 wgmmas, %d per commit group, two groups in flight\n", prop.name, sms,
              kBatch);
  long long* cycles = nullptr;
  float* sink = nullptr;
  cudaMalloc(&cycles, sizeof(long long) * 1024);
  cudaMalloc(&sink, sizeof(float) * 1024);
  run<16, false, 1>(sms, cycles, sink);
  run<32, false, 1>(sms, cycles, sink);
  run<64, false, 1>(sms, cycles, sink);
  run<128, false, 1>(sms, cycles, sink);
  run<256, false, 1>(sms, cycles, sink);
  run<16, false, 2>(sms, cycles, sink);
  run<32, false, 2>(sms, cycles, sink);
  run<64, false, 2>(sms, cycles, sink);
  run<128, false, 2>(sms, cycles, sink);
  run<256, false, 2>(sms, cycles, sink);
  run<16, false, 2, 8>(sms, cycles, sink);
  run<32, false, 1, 8>(sms, cycles, sink);
  run<32, false, 2, 8>(sms, cycles, sink);
  run<64, false, 2, 4>(sms, cycles, sink);
  run<32, true, 1>(sms, cycles, sink);
  run<128, true, 1>(sms, cycles, sink);
  run<32, true, 2>(sms, cycles, sink);
  run<128, true, 2>(sms, cycles, sink);
  return 0;
}
