// Does compute-sanitizer racecheck follow an mbarrier "empty" wait into a later bulk copy?
// The textbook producer / consumer ring, stripped down: warp 0 waits on a slot's `empty`
// barrier and refills the slot by one cp.async.bulk completing on `full` (a tx-count
// barrier); warp 1 waits on `full`, reads the slot with plain shared loads, and releases it
// on `empty`. Every access is ordered by the two barriers, so a clean tool reports nothing.
// Build and run: nvcc -arch=sm_90a -std=c++17 -I../../cuda racecheck_bulk_ring.cu -o ring &&
// compute-sanitizer --tool racecheck ./ring   (session 18, benchmarks/NOTES.md); -DGENERIC
// makes the producer's writes plain stores, the control.
#include <cstdio>

#include "common/mbarrier.cuh"

constexpr int kSlots = 2, kItems = 8, kInts = 256;

__global__ void ring(const int* src, int* out) {
  __shared__ alignas(128) int slot[kSlots][kInts];
  __shared__ uint64_t full[kSlots], empty[kSlots];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kSlots; ++s) jbs::mbarrier_init(&full[s], 1), jbs::mbarrier_init(&empty[s], 1);
    jbs::mbarrier_init_fence();
  }
  __syncthreads();
  for (int i = 0; i < kItems; ++i) {
    const int s = i % kSlots;
    const uint32_t round = static_cast<uint32_t>(i / kSlots);
    if (warp == 0) {
      jbs::mbarrier_wait(&empty[s], (round & 1) ^ 1);
#ifdef GENERIC  // the control: plain stores, published by a plain arrival
      for (int k = lane; k < kInts; k += 32) slot[s][k] = src[i * kInts + k];
      __syncwarp();
      if (lane == 0) jbs::mbarrier_arrive(&full[s]);
#else
      if (lane == 0) {
        jbs::fence_proxy_async();
        jbs::mbarrier_arrive_expect_tx(&full[s], kInts * 4);
        jbs::bulk_copy_g2s(slot[s], src + i * kInts, kInts * 4, &full[s]);
      }
#endif
    } else {
      jbs::mbarrier_wait(&full[s], round & 1);
      int sum = 0;
      for (int k = lane; k < kInts; k += 32) sum += slot[s][k];
      out[i * 32 + lane] = sum;
      __syncwarp();
      if (lane == 0) jbs::mbarrier_arrive(&empty[s]);
    }
  }
}

int main() {
  int *src, *out;
  cudaMalloc(&src, kItems * kInts * 4);
  cudaMalloc(&out, kItems * 32 * 4);
  cudaMemset(src, 1, kItems * kInts * 4);
  ring<<<1, 64>>>(src, out);
  const cudaError_t err = cudaDeviceSynchronize();
  std::printf("ring: %s\n", cudaGetErrorString(err));
  return err == cudaSuccess ? 0 : 1;
}
