// Two questions about the conv strip kernel's halo (conv/strip_halo.cuh), answered on the GPU:
//
// 1. Correctness: can a wgmma read a K-major B operand of 64-byte rows (one pixel's 32
//    channels) that TMA wrote with the 64-byte swizzle, from a start address shifted by any
//    whole number of rows (a conv tap's shift) and with a stride between 8-row groups that is
//    not a multiple of the 512-byte swizzle atom (a halo row of 10 pixels: 640 bytes)? That
//    holds if the hardware swizzles by the absolute shared-memory address, as TMA writes.
//    Each descriptor variant (base offset 0, or the start's pattern phase) is checked against
//    an exact integer reference for several shifts.
// 2. Throughput: the TMA unit's rate on the halo, one item's 32 channels as 4 boxes of 16-byte
//    rows (8-channel planes, as the kernel loaded it until session 46) against 1 box of
//    64-byte rows, every SM streaming items of a 42 MB activation (issue 4's 64 x 32 x 32 x
//    320) through a 4-slot ring; and, for comparison, the same bytes by one 1-D bulk copy from
//    a contiguous copy of every item (added after session 46's runs: not yet run).
//
//   nvcc -O3 -std=c++17 -I cuda -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
//     -o /tmp/halo_rows benchmarks/microbench/halo_rows.cu && /tmp/halo_rows
#include <cuda_bf16.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common/mbarrier.cuh"
#include "common/smem.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"

namespace {

using namespace jbs;

using T = __nv_bfloat16;
constexpr int kRowSlots = 10, kBandRows = 34, kChannels = 32;
constexpr int kHaloBytes = kRowSlots * kBandRows * kChannels * 2;
constexpr int kCases = 10;
struct Shifts {
  int v[kCases];
};
constexpr Shifts kShifts{{0, 1, 2, 3, 10, 11, 12, 13, 21, 22}};  // whole halo rows: a tap's (oh, ow)
constexpr int kPlaneBytes = (kRowSlots * kBandRows * 16 + 127) / 128 * 128;  // a TMA box lands 128-byte aligned

__device__ uint64_t desc_64b(uint32_t addr, int variant) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((addr & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>(1) << 16;                        // LBO (unused within a 64-byte row)
  d |= static_cast<uint64_t>((kRowSlots * 64) >> 4) << 32;    // SBO: the next 8 pixels one halo row on
  const uint32_t base_offset = variant == 0 ? 0 : variant == 1 ? (addr >> 7) & 3 : (addr >> 7) & 7;
  d |= static_cast<uint64_t>(base_offset) << 49;
  d |= static_cast<uint64_t>(2) << 62;  // layout type 2: 64-byte swizzle
  return d;
}

__global__ void check_kernel(const __grid_constant__ CUtensorMap map, const T* a_rows, float* out, int variant, Shifts shifts) {
  __shared__ __align__(8) uint64_t bar;
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(dynamic_smem()) + 1023) & ~uintptr_t{1023});
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if (tid == 0) {
    mbarrier_init(&bar, 1);
    mbarrier_init_fence();
  }
  __syncthreads();
  if (tid == 0) {
    mbarrier_arrive_expect_tx(&bar, kHaloBytes);
    tma_load_5d(smem, &map, 0, 0, 0, 0, 0, &bar);
  }
  mbarrier_wait(&bar, 0);
  // A (64 x 32, row-major) as two m64k16 register fragments (the mma.sync m16n8k16 A layout).
  uint32_t a[2][4];
  const int r = warp * 16 + lane / 4, c = (lane % 4) * 2;
  auto pair = [&](int row, int col) {
    __nv_bfloat162 v{a_rows[row * 32 + col], a_rows[row * 32 + col + 1]};
    return *reinterpret_cast<uint32_t*>(&v);
  };
  for (int ks = 0; ks < 2; ++ks) {
    a[ks][0] = pair(r, 16 * ks + c);
    a[ks][1] = pair(r + 8, 16 * ks + c);
    a[ks][2] = pair(r, 16 * ks + c + 8);
    a[ks][3] = pair(r + 8, 16 * ks + c + 8);
  }
  for (int cs = 0; cs < kCases; ++cs) {
    float acc[32][4];
    for (int nt = 0; nt < 32; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
    const uint32_t start = smem_u32(smem) + shifts.v[cs] * 64;
    wgmma_fence();
    wgmma_rs<T, 256, 0>(acc, a[0], desc_64b(start, variant));
    wgmma_rs<T, 256, 0>(acc, a[1], desc_64b(start + 32, variant));  // k-step 1: channels 16.. of the row
    wgmma_commit();
    wgmma_wait<0>();
    float* o = out + cs * 64 * 256;
    for (int nt = 0; nt < 32; ++nt) {
      const int n = nt * 8 + c;
      o[r * 256 + n] = acc[nt][0], o[r * 256 + n + 1] = acc[nt][1];
      o[(r + 8) * 256 + n] = acc[nt][2], o[(r + 8) * 256 + n + 1] = acc[nt][3];
    }
  }
}

// One warp per CTA streams `items` halo items through a 4-slot ring: MODE 0, 4 boxes of
// 8 channels (16-byte rows); MODE 1, one box of 32 channels (64-byte rows, 64-byte swizzle);
// MODE 2, the same bytes as one 1-D bulk copy from a contiguous copy of the halo (what a
// prepass that lays items out contiguously, pre-swizzled, would let a kernel load).
template <int MODE>
__global__ void stream_kernel(const __grid_constant__ CUtensorMap map, const char* contiguous, int items, int blocks,
                              int images) {
  constexpr int kSlots = 4;
  __shared__ __align__(8) uint64_t full[kSlots];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(dynamic_smem()) + 1023) & ~uintptr_t{1023});
  const int lane = threadIdx.x;
  if (lane == 0) {
    for (int s = 0; s < kSlots; ++s) mbarrier_init(&full[s], 1);
    mbarrier_init_fence();
  }
  __syncwarp();
  for (int i = 0; i < items; ++i) {
    const int s = i % kSlots;
    if (i >= kSlots) mbarrier_wait(&full[s], ((i / kSlots) - 1) & 1);
    const int item = blockIdx.x * items + i;
    const int block = item % blocks, strip = (item / blocks) % (4 * images);
    const int image = strip / 4, x0 = (strip % 4) * 8;
    unsigned char* dst = smem + s * 22528;
    if (lane == 0) mbarrier_arrive_expect_tx(&full[s], kHaloBytes);
    __syncwarp();
    if (MODE == 0 && lane < 4) {
      tma_load_5d(dst + lane * kPlaneBytes, &map, block * 32 + lane * 8, x0 - 1, -1, image, 0, &full[s]);
    }
    if (MODE == 1 && lane == 0) tma_load_5d(dst, &map, block * 32, x0 - 1, -1, image, 0, &full[s]);
    if (MODE == 2 && lane == 0) {
      bulk_copy_g2s(dst, contiguous + (static_cast<int64_t>(item) % (4 * images * blocks)) * kHaloBytes, kHaloBytes,
                    &full[s]);
    }
  }
  for (int i = items; i < items + kSlots; ++i) mbarrier_wait(&full[i % kSlots], ((i / kSlots) - 1) & 1);
}

}  // namespace

int main() {
  using namespace jbs;
  // 1. Correctness.
  std::vector<T> x(kHaloBytes / 2), a(64 * 32);
  std::vector<float> xf(x.size()), af(a.size());
  srand(1);
  for (size_t i = 0; i < x.size(); ++i) xf[i] = static_cast<float>(rand() % 5 - 2), x[i] = __float2bfloat16(xf[i]);
  for (size_t i = 0; i < a.size(); ++i) af[i] = static_cast<float>(rand() % 5 - 2), a[i] = __float2bfloat16(af[i]);
  T *x_d, *a_d;
  float* out_d;
  cudaMalloc(&x_d, x.size() * 2);
  cudaMalloc(&a_d, a.size() * 2);
  cudaMalloc(&out_d, kCases * 64 * 256 * 4);
  cudaMemcpy(x_d, x.data(), x.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(a_d, a.data(), a.size() * 2, cudaMemcpyHostToDevice);
  CUtensorMap map;
  {
    const uint64_t dims[5] = {kChannels, kRowSlots, kBandRows, 1, 1};
    const uint64_t strides[4] = {kChannels * 2, kChannels * 2 * kRowSlots, uint64_t{kHaloBytes}, uint64_t{kHaloBytes}};
    const uint32_t box[5] = {kChannels, kRowSlots, kBandRows, 1, 1};
    if (!encode_tensor_map_16bit(&map, x_d, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_64B)) {
      printf("encode failed\n");
      return 1;
    }
  }
  cudaFuncSetAttribute(check_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kHaloBytes + 1024);
  std::vector<float> out(kCases * 64 * 256);
  for (int variant = 0; variant < 3; ++variant) {
    cudaMemset(out_d, 0, out.size() * 4);
    check_kernel<<<1, 128, kHaloBytes + 1024>>>(map, a_d, out_d, variant, kShifts);
    const cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) {
      printf("variant %d: %s\n", variant, cudaGetErrorString(err));
      return 1;
    }
    cudaMemcpy(out.data(), out_d, out.size() * 4, cudaMemcpyDeviceToHost);
    printf("variant %d (base offset %s): mismatches per shift:", variant,
           variant == 0 ? "0" : variant == 1 ? "(addr>>7)&3" : "(addr>>7)&7");
    for (int cs = 0; cs < kCases; ++cs) {
      int bad = 0;
      for (int m = 0; m < 64; ++m) {
        for (int n = 0; n < 256; ++n) {
          const int pix = kShifts.v[cs] + (n / 8) * kRowSlots + n % 8;
          float ref = 0.f;
          for (int k = 0; k < 32; ++k) ref += af[m * 32 + k] * xf[pix * 32 + k];
          bad += out[cs * 64 * 256 + m * 256 + n] != ref;
        }
      }
      printf(" %d:%d", kShifts.v[cs], bad);
    }
    printf("\n");
  }

  // 2. Throughput over a 64 x 32 x 32 x 320 bf16 activation.
  const int images = 64, blocks = 10, channels = 320;
  T* act;
  const size_t act_bytes = size_t{images} * 32 * 32 * channels * 2;
  cudaMalloc(&act, act_bytes);
  cudaMemset(act, 0, act_bytes);
  const uint64_t dims[5] = {uint64_t(channels), 32, 32, uint64_t(images), 1};
  const uint64_t strides[4] = {uint64_t(channels) * 2, uint64_t(channels) * 2 * 32, uint64_t(channels) * 2 * 1024, act_bytes};
  CUtensorMap planes, rows;
  const uint32_t box_planes[5] = {8, kRowSlots, kBandRows, 1, 1};
  const uint32_t box_rows[5] = {32, kRowSlots, kBandRows, 1, 1};
  if (!encode_tensor_map_16bit(&planes, act, dims, strides, box_planes) ||
      !encode_tensor_map_16bit(&rows, act, dims, strides, box_rows, CU_TENSOR_MAP_SWIZZLE_64B)) {
    printf("encode failed\n");
    return 1;
  }
  int sms = 0, clock_khz = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  const int smem = 4 * 22528 + 1024, items = 2000;
  cudaFuncSetAttribute(stream_kernel<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(stream_kernel<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(stream_kernel<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  char* contiguous;  // every (strip, block) item's halo, one after another (~56 MB)
  cudaMalloc(&contiguous, size_t{4} * images * blocks * kHaloBytes);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int rep = 0; rep < 2; ++rep) {
    for (int mode = 0; mode < 3; ++mode) {
      auto launch = [&] {
        if (mode == 0) stream_kernel<0><<<sms, 32, smem>>>(planes, contiguous, items, blocks, images);
        if (mode == 1) stream_kernel<1><<<sms, 32, smem>>>(rows, contiguous, items, blocks, images);
        if (mode == 2) stream_kernel<2><<<sms, 32, smem>>>(rows, contiguous, items, blocks, images);
      };
      launch();
      cudaEventRecord(start);
      launch();
      cudaEventRecord(stop);
      cudaEventSynchronize(stop);
      float ms = 0.f;
      cudaEventElapsedTime(&ms, start, stop);
      const double us_per_item = ms * 1e3 / items;
      const double bytes_per_cycle = kHaloBytes / (us_per_item * clock_khz * 1e-3);
      printf("halo as %s: %.3f us per item per SM, %.1f bytes per cycle per SM (%.0f GB/s over %d SMs) [%s]\n",
             mode == 0 ? "4 boxes of 16-byte rows" : mode == 1 ? "1 box of 64-byte rows " : "1 bulk copy, contiguous", us_per_item, bytes_per_cycle,
             double(kHaloBytes) * items * sms / (ms * 1e6), sms, cudaGetErrorString(cudaGetLastError()));
    }
  }
  return 0;
}
