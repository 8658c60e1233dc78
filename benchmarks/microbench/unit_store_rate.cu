// How fast an SM can write a conv strip unit's output (conv/bsconv_strip_kernel.cuh): 256
// pixels x 4 output block columns of 32 channels (64 KB of bf16) into an NHWC batch of
// 64 x 32 x 32 x 320 (42 MB), every SM writing its share of the 768 units (256 tiles x 3
// column groups), as at issue 4's density-1/8 rows. Three ways:
//
//   lanes:  256 threads read the staged unit from shared memory and store it 16 bytes a lane
//           (8 lanes per pixel and column pair), as the kernel's epilogue does;
//   tma:    one thread stores the staged unit as 4 TMA boxes (32 channels x 8 x 32 pixels,
//           64-byte rows) and waits until they have read shared memory before the next unit;
//   tma x2: the same from two staging buffers, a unit's boxes draining while the next is
//           staged (what a unit-sized staging area would let the kernel overlap);
//   pieces: as lanes, but the unit's 4 columns are not adjacent (as the strip kernel's column
//           groups paired by shared inputs are), so each 128-byte row a warp's 8 lanes store
//           is two 64-byte pieces of two lines instead of one whole line (session 59).
//
// The session-46 probe measured the kernel's stores at ~8.7 us of 41 (fwd 2x3 bs 32 1/8):
// this tells whether TMA stores drain a unit faster than the lanes do, and how long a
// unit's drain takes (benchmarks/NOTES.md, session 46, next step 1).
// Session 47 (H200): all three ~2.0 us per unit per SM, 16.5-16.9 bytes per cycle, 4.3-4.4
// TB/s in all: with every SM writing, HBM's write rate bounds them alike, so TMA stores free
// the consumers' issue but do not write faster (benchmarks/NOTES.md, session 47).
//
// An optional argument runs that many CTAs instead of one per SM (e.g. `unit_store_rate 1` or
// 33): a unit's drain when only some SMs store at once, i.e. whether the strip kernel's epilogue
// (~2 us a unit, 29% of its consumers' stall samples at fwd 2x3 bs 32 1/8) pays for HBM's write
// rate shared by every SM storing together, or for one SM's own store path (session 52).
//
//   nvcc -O3 -std=c++17 -I cuda -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
//     -o /tmp/unit_store_rate benchmarks/microbench/unit_store_rate.cu && /tmp/unit_store_rate [ctas]
#include <cuda_bf16.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "common/mbarrier.cuh"
#include "common/smem.cuh"
#include "common/tma.cuh"

namespace {

using namespace jbs;
using T = __nv_bfloat16;
constexpr int kImages = 64, kSide = 32, kChannels = 320, kColumns = kChannels / 32;
constexpr int kTiles = kImages * kSide * kSide / 256, kGroups = 3, kUnits = kTiles * kGroups;
constexpr int kUnitBytes = 256 * 4 * 32 * 2;
constexpr int kRepeats = 8;  // the whole walk, so that each SM writes ~45 units

__device__ int column_of(int group, int c) { return (4 * group + c) % kColumns; }
// Columns 3 apart: in groups 0 and 2 no two of a unit's columns share a 128-byte line of y (in
// group 1, columns 1 and 0 do: a third of the units keep one whole line per pixel).
__device__ int spread_column_of(int group, int c) { return (group + 3 * c) % kColumns; }

// MODE 0: lanes; 1: tma; 2: tma x2; 3: pieces.
template <int MODE>
__global__ void __launch_bounds__(256, 1) store_kernel(const __grid_constant__ CUtensorMap map, T* y) {
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(dynamic_smem()) + 1023) &
                                                         ~uintptr_t{1023});
  const int tid = threadIdx.x;
  int buffer = 0;
  for (int r = 0; r < kRepeats; ++r) {
    for (int u = blockIdx.x; u < kUnits; u += gridDim.x) {
      const int tile = u / kGroups, group = u % kGroups;
      const int image = tile / 4, x0 = (tile % 4) * 8;
      unsigned char* stage = smem + buffer * kUnitBytes;
      if (MODE == 0 || MODE == 3) {
        // Pixel p = i / 16 of the unit (row p / 8, column p % 8), 16-byte piece i % 16 of its
        // 4 x 64 bytes: every 4 lanes write one column block's 64 bytes.
        for (int i = tid; i < 256 * 16; i += 256) {
          const int p = i / 16, k = i % 16;
          const uint4 v = *reinterpret_cast<const uint4*>(stage + i * 16);
          const int64_t pixel = (int64_t{image} * kSide + p / 8) * kSide + x0 + p % 8;
          const int column = MODE == 0 ? column_of(group, k / 4) : spread_column_of(group, k / 4);
          *reinterpret_cast<uint4*>(y + pixel * kChannels + column * 32 + (k % 4) * 8) = v;
        }
      } else {
        // Thread 0 (which committed them) waits until the boxes that last read this buffer
        // have read it: the previous unit's (tma) or the one before (tma x2). Then every
        // thread stages the unit, as the epilogue's stmatrix would, and thread 0 stores it.
        if (tid == 0) {
          if (MODE == 1) bulk_wait_group_read<0>();
          if (MODE == 2) bulk_wait_group_read<1>();
        }
        __syncthreads();
        for (int i = tid; i < kUnitBytes / 16; i += 256) reinterpret_cast<uint4*>(stage)[i] = uint4{};
        fence_proxy_async();
        __syncthreads();
        if (tid == 0) {
          for (int c = 0; c < 4; ++c) tma_store_5d(&map, stage + c * (kUnitBytes / 4), column_of(group, c) * 32, x0, 0, image, 0);
          bulk_commit_group();
        }
        if (MODE == 2) buffer ^= 1;
      }
    }
  }
  if (tid == 0) bulk_wait_group_read<0>();
}

}  // namespace

int main(int argc, char** argv) {
  T* y;
  const size_t bytes = size_t{kImages} * kSide * kSide * kChannels * 2;
  cudaMalloc(&y, bytes);
  CUtensorMap map;
  const uint64_t dims[5] = {kChannels, kSide, kSide, kImages, 1};
  const uint64_t strides[4] = {kChannels * 2, kChannels * 2 * kSide, uint64_t{kChannels} * 2 * kSide * kSide, bytes};
  const uint32_t box[5] = {32, 8, 32, 1, 1};
  if (!encode_tensor_map_16bit(&map, y, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_64B)) {
    printf("encode failed\n");
    return 1;
  }
  int ctas = 0, clock_khz = 0;
  cudaDeviceGetAttribute(&ctas, cudaDevAttrMultiProcessorCount, 0);  // one per SM by default
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  if (argc > 1) ctas = atoi(argv[1]);  // (at most one CTA fits an SM: its shared memory)
  if (ctas < 1) {
    printf("usage: unit_store_rate [ctas >= 1]\n");
    return 1;
  }
  const int smem = 2 * kUnitBytes + 1024;
  cudaFuncSetAttribute(store_kernel<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(store_kernel<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(store_kernel<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(store_kernel<3>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  const char* names[4] = {"lanes ", "tma   ", "tma x2", "pieces"};
  for (int rep = 0; rep < 2; ++rep) {
    for (int mode = 0; mode < 4; ++mode) {
      auto launch = [&] {
        if (mode == 0) store_kernel<0><<<ctas, 256, smem>>>(map, y);
        if (mode == 1) store_kernel<1><<<ctas, 256, smem>>>(map, y);
        if (mode == 2) store_kernel<2><<<ctas, 256, smem>>>(map, y);
        if (mode == 3) store_kernel<3><<<ctas, 256, smem>>>(map, y);
      };
      launch();
      cudaEventRecord(start);
      launch();
      cudaEventRecord(stop);
      cudaEventSynchronize(stop);
      float ms = 0.f;
      cudaEventElapsedTime(&ms, start, stop);
      const double units_per_cta = double(kUnits) * kRepeats / ctas;
      const double us_per_unit = ms * 1e3 / units_per_cta;
      printf("%s (%d CTAs): %.3f us per unit per SM, %.1f bytes per cycle per SM, %.0f GB/s in all [%s]\n",
             names[mode], ctas, us_per_unit, kUnitBytes / (us_per_unit * clock_khz * 1e-3),
             double(kUnitBytes) * kUnits * kRepeats / (ms * 1e6), cudaGetErrorString(cudaGetLastError()));
    }
  }
  return 0;
}
