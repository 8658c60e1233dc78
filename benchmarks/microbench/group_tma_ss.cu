// How fast can the large-N forward (y = x W, W block-sparse) go when every operand
// comes by TMA and both wgmma operands are read from shared memory? A stand-alone
// replica of the column-group walk of cuda/matmul/bsmm_group_ws_kernel.cuh (CTA tile
// of 256 rows x 128 columns = P = 128 / BS block columns, one union item per input
// block row present in the group) with a different feed:
//   * jbs's kernel: 128 loader threads issue 16-byte cp.asyncs for the activation tile
//     and the present weight blocks; the consumers load A fragments into registers
//     (RS wgmma). Sessions 4-9 measured ~4.4-4.7 TB/s of L2 -> SM traffic, 31-39% of
//     the dense rate at bs 64 (benchmarks/NOTES.md).
//   * here: one thread issues a 2-D TMA box for the activation tile (BS channels x 256
//     rows, swizzled by the row's width) and one per present weight block (BS x BS,
//     the same swizzle); the consumers' wgmmas read both from shared memory (SS), so
//     nothing passes through registers. This is how cuBLAS feeds its ~790 TFLOP/s
//     8192^3 dense product, ~9 TB/s into shared memory.
// The question it answers: whether the feed, not the byte count, is what holds jbs's
// 8192^3 rows at 31-39%; if this replica reaches ~9 TB/s into shared memory, bs 64 at
// 1/2 runs at ~75% of the dense rate (64 FLOP per byte delivered).
//
//   nvcc -O3 -std=c++17 -I cuda -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
//     -o /tmp/group_tma_ss benchmarks/microbench/group_tma_ss.cu && /tmp/group_tma_ss [dense TFLOP/s] [next]
//
// Checks 256 output elements against a float64 sum on the host before timing. Kept as the
// record of session 30's measurement; the production kernel it led to is
// cuda/matmul/bsmm_group_tma_kernel.cuh (same feed, plus tables, weight groups and edges).
// Modes (second argument), each variant next to its baseline (session 31's figures in
// benchmarks/NOTES.md):
//   next     PAIRS (bs 32, two input blocks per 128-byte-row box) and WIDE (bs 64,
//            256-column groups over 128 rows): both slower;
//   probe    one wave over 132 / 99 / 66 / 33 SMs (is a shared resource the limit?);
//   cluster  clusters of 2 row tiles sharing the weight blocks by multicast, the remote
//            arrivals with and without .release.cluster, and the plain kernel launched in
//            clusters;
//   3        groups of 192 columns (P = 3 at bs 64, 6 at bs 32): bs 64 1.17x at 1/2 with
//            clusters of 2, the production kernel's configuration since session 31.
#include <cuda.h>
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "common/mbarrier.cuh"
#include "common/smem.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"

namespace {

using T = __nv_bfloat16;

#define CHECK(x)                                                              \
  do {                                                                        \
    cudaError_t e = (x);                                                      \
    if (e != cudaSuccess) {                                                   \
      std::printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

// PAIRS (bs 32 only): an item covers two adjacent input blocks 2j, 2j + 1 when both are in
// the group's union, loaded as one box of 64 channels with 128-byte rows (128-byte swizzle)
// instead of two boxes of 64-byte rows; other items stay single. Slots hold either.
// WIDE: groups of 256 columns over 128 rows (P = 256 / BS, one m64 half per warpgroup)
// instead of 128 columns over 256 rows: the same accumulators, more activation reuse per
// item where the layout's columns share input blocks (benchmarks/NOTES.md, session 30,
// point 3: bs 64 at 1/2, 66 against 64 FLOP per byte).
// COLS = 192: groups of 192 columns over 256 rows (P = 192 / BS; a partial last group where
// 192 does not divide the width): 192 fp32 accumulators per consumer thread, 48 K per CTA,
// and more reuse of each activation tile (F blocks per item rises with P).
template <int BS, bool PAIRS = false, bool WIDE = false, int COLS = 128>
struct Cfg {
  static constexpr int kTN = WIDE ? 128 : 256;  // rows per CTA: two consumer warpgroups of kMH m64 halves
  static constexpr int kMH = kTN / 128;
  static constexpr int kP = (WIDE ? 256 : COLS) / BS;
  static constexpr int kHalves = PAIRS ? 2 : 1;  // input blocks per item, at most
  static constexpr int kRowBytes = BS * 2;  // a weight block's row (and a single item's tile row): one swizzle width
  static constexpr int kXBytes = kTN * kRowBytes * kHalves;
  static constexpr int kBlockBytes = BS * kRowBytes;
  static constexpr int kSlotBytes = kXBytes + kHalves * kP * kBlockBytes;
  static constexpr int kBudget = (COLS == 192 ? 224 : 196) * 1024;  // bytes of ring
  static constexpr int kStages = kBudget / kSlotBytes < 8 ? kBudget / kSlotBytes : 8;
  static constexpr int kSmem = kStages * kSlotBytes + 1024;
  static constexpr uint64_t kLayoutType = BS == 64 ? 1 : 2;  // 128- or 64-byte swizzle
  static constexpr uint32_t kAtomBytes = 8 * kRowBytes;     // SBO: 8 rows
};

template <int BS>
__device__ __forceinline__ uint64_t desc(const void* p) {
  return jbs::wgmma_desc(p, 16, Cfg<BS>::kAtomBytes) | (Cfg<BS>::kLayoutType << 62);
}

struct Params {
  CUtensorMap x_map;  // x (rows, C) in boxes of BS channels x 256 rows
  CUtensorMap x2_map;  // PAIRS: boxes of 2 BS channels x 256 rows, 128-byte swizzle
  CUtensorMap w_map;  // w (nnz * BS, BS) in boxes of BS x BS
  const int* offsets;  // (groups + 1)
  const int* items;    // (items, 1 + P): input block, block of column 0 .. P-1 or -1
                       // PAIRS: (items, 2 + 2P): input block, pair flag, the P blocks of each half
  T* y;
  int groups, row_tiles, out_cols, band;
};

// CL > 1: clusters of CL CTAs over adjacent row tiles of one column group. They walk the
// same items, so each weight block is loaded once per cluster and multicast to every CTA of
// it (block j of an item by rank (i + j) % CL), and a slot is refilled only once every CTA's
// consumers have released it (each consumer warp arrives on every CTA's "empty" barrier).
__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}

__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// One arrival on the barrier at `bar`'s offset in CTA `rank` of the cluster.
template <bool kReleaseCluster>
__device__ __forceinline__ void mbarrier_arrive_remote(uint64_t* bar, unsigned rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(jbs::smem_u32(bar)), "r"(rank));
  if constexpr (kReleaseCluster) {
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
  } else {
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
  }
}

// tma_load_5d into the same offset of every CTA in `mask`, completing on each one's `bar`.
__device__ __forceinline__ void tma_load_5d_multicast(void* dst, const CUtensorMap* map, int c0, int c1,
                                                      uint64_t* bar, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3, %4, %4, %4}], [%5], %6;\n" ::"r"(jbs::smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(0), "r"(jbs::smem_u32(bar)), "h"(mask)
      : "memory");
}

template <int BS, bool PAIRS, bool WIDE, int CL, int MODE, int COLS>
__global__ void __launch_bounds__(384, 1) group_tma_ss(const __grid_constant__ Params p) {
  using C = Cfg<BS, PAIRS, WIDE, COLS>;
  constexpr int kP = C::kP;
  constexpr int kTN = C::kTN;
  constexpr int kRow = PAIRS ? 2 + 2 * kP : 1 + kP;  // ints per item
  constexpr int kBlocks = C::kHalves * kP;           // block slots per item
  __shared__ uint64_t full[C::kStages], empty[C::kStages];
  __shared__ int masks[C::kStages];
  unsigned char* raw = jbs::dynamic_smem();
  unsigned char* smem = raw + ((1024 - (jbs::smem_u32(raw) & 1023)) & 1023);
  // CTA id -> (row tile, group) in bands of `band` row tiles, so a wave shares a few
  // row tiles' activations and a run of groups' weights.
  const int id = blockIdx.x;
  const int per_band = p.band * p.groups;
  const int band = id / per_band, in_band = id % per_band;
  const int rows_in_band = min(p.band, p.row_tiles - band * p.band);
  const int group = in_band / rows_in_band, row_tile = band * p.band + in_band % rows_in_band;
  const int beg = p.offsets[group], end = p.offsets[group + 1];
  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int s = 0; s < C::kStages; ++s) {
      jbs::mbarrier_init(full + s, 1);
      jbs::mbarrier_init(empty + s, 8 * CL);
    }
    jbs::mbarrier_init_fence();
  }
  if constexpr (CL > 1) {
    cluster_sync();  // every CTA's barriers exist before any multicast or remote arrival
  } else {
    __syncthreads();
  }
  const unsigned rank = CL > 1 ? cluster_rank() : 0;
  if (tid >= 256) {
    jbs::warpgroup_reg_dealloc<40>();
    if (tid == 256) {
      int stage = 0;
      uint32_t round = 0;
      for (int i = beg; i < end; ++i) {
        const int* row = p.items + static_cast<int64_t>(i) * kRow;
        const int first = PAIRS ? 2 : 1;
        int blocks[kBlocks];
        unsigned present = 0;
        int count = 0;
#pragma unroll
        for (int c = 0; c < kBlocks; ++c) {
          blocks[c] = __ldg(row + first + c);
          if (blocks[c] >= 0) present |= 1u << c, ++count;
        }
        const int input = __ldg(row);
        const bool pair = PAIRS && __ldg(row + 1) != 0;
        jbs::mbarrier_wait(empty + stage, (round & 1) ^ 1);
        masks[stage] = static_cast<int>(present | (pair ? 1u << 16 : 0u));
        const int x_bytes = kTN * C::kRowBytes * (pair ? 2 : 1);
        jbs::mbarrier_arrive_expect_tx(full + stage, x_bytes + count * C::kBlockBytes);
        unsigned char* slot = smem + stage * C::kSlotBytes;
        jbs::tma_load_5d(slot, pair ? &p.x2_map : &p.x_map, input * BS, row_tile * kTN, 0, 0, 0, full + stage);
        int ordinal = i;
#pragma unroll
        for (int c = 0; c < kBlocks; ++c) {
          if (blocks[c] >= 0) {
            if constexpr (CL > 1 && (MODE & 2) == 0) {
              if (ordinal++ % CL == static_cast<int>(rank)) {
                tma_load_5d_multicast(slot + C::kXBytes + c * C::kBlockBytes, &p.w_map, 0, blocks[c] * BS,
                                      full + stage, static_cast<uint16_t>((1u << CL) - 1));
              }
            } else {
              jbs::tma_load_5d(slot + C::kXBytes + c * C::kBlockBytes, &p.w_map, 0, blocks[c] * BS, 0, 0, 0,
                               full + stage);
            }
          }
        }
        if (++stage == C::kStages) stage = 0, ++round;
      }
    }
    return;
  }
  jbs::warpgroup_reg_alloc<232>();
  const int lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
  float acc[C::kMH][kP][BS / 8][4] = {};
  int stage = 0, prev = -1;
  uint32_t round = 0;
  for (int i = beg; i < end; ++i) {
    jbs::mbarrier_wait(full + stage, round & 1);
    const unsigned present = static_cast<unsigned>(masks[stage]);
    const bool pair = PAIRS && (present >> 16) != 0;
    unsigned char* slot = smem + stage * C::kSlotBytes;
    // A single item's tile has BS-channel rows; a pair's, 2 BS channels (128 bytes, 128-byte swizzle).
    const int a_row_bytes = pair ? 2 * C::kRowBytes : C::kRowBytes;
    const uint64_t a_mode = pair ? 1 : C::kLayoutType;
    jbs::wgmma_fence();
#pragma unroll
    for (int h = 0; h < C::kMH; ++h) {
      const uint64_t a = jbs::wgmma_desc(slot + (wg * kTN / 2 + h * 64) * a_row_bytes, 16, 8 * a_row_bytes) | (a_mode << 62);
#pragma unroll
      for (int j = 0; j < C::kHalves; ++j) {
#pragma unroll
        for (int c = 0; c < kP; ++c) {
          if (present & (1u << (j * kP + c))) {
            const uint64_t b = desc<BS>(slot + C::kXBytes + (j * kP + c) * C::kBlockBytes);
#pragma unroll
            for (int ks = 0; ks < BS / 16; ++ks) {
              // A K-major: a k-step is 32 bytes along the row (half j of a pair starts BS
              // channels in); B N-major: 16 rows further.
              jbs::wgmma_ss<T, BS, 1, 0>(acc[h][c], a + (j * BS / 16 + ks) * 2, b + ks * 16 * C::kRowBytes / 16);
            }
          }
        }
      }
    }
    jbs::wgmma_commit();
    jbs::wgmma_wait<1>();
    if (prev >= 0) {
      if constexpr (CL > 1) {
        __syncwarp();
        if (lane < CL) mbarrier_arrive_remote<(MODE & 1) != 0>(empty + prev, lane);
      } else {
        jbs::mbarrier_arrive_warp(empty + prev, lane);
      }
    }
    prev = stage;
    if (++stage == C::kStages) stage = 0, ++round;
  }
  jbs::wgmma_wait<0>();
  // No CTA leaves while a peer may still arrive on its barriers (the producers have exited).
  if constexpr (CL > 1) cluster_sync();
  // Straight from the accumulators: rows 16 (warp % 4) + lane / 4 (+ 8), columns 2 (lane % 4) of each 8.
  const int r0 = row_tile * kTN + wg * kTN / 2 + (warp & 3) * 16 + lane / 4;
#pragma unroll
  for (int h = 0; h < C::kMH; ++h) {
#pragma unroll
    for (int c = 0; c < kP; ++c) {
#pragma unroll
      for (int nt = 0; nt < BS / 8; ++nt) {
        const int col = (group * kP + c) * BS + nt * 8 + 2 * (lane & 3);
        if (col >= p.out_cols) continue;  // a partial last group
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int64_t r = r0 + h * 64 + half * 8;
          __nv_bfloat162 v = __floats2bfloat162_rn(acc[h][c][nt][2 * half], acc[h][c][nt][2 * half + 1]);
          *reinterpret_cast<__nv_bfloat162*>(p.y + r * p.out_cols + col) = v;
        }
      }
    }
  }
}

bool g_probe = false;  // "probe": also time one wave over fewer SMs

template <int BS, bool PAIRS = false, bool WIDE = false, int CL = 1, int MODE = 0, int COLS = 128>
void run(int n, double density, int band, double dense_tflops, int launch_cl = CL) {
  using C = Cfg<BS, PAIRS, WIDE, COLS>;
  constexpr int kTN = C::kTN;
  const int cb = n / BS, kb = n / BS, P = C::kP, groups = (kb + P - 1) / P;
  std::mt19937 rng(1234 + BS);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<int> block_at(static_cast<size_t>(cb) * kb, -1);
  int nnz = 0;
  for (int c = 0; c < cb; ++c)
    for (int k = 0; k < kb; ++k)
      if (u(rng) < density) block_at[static_cast<size_t>(c) * kb + k] = nnz++;
  std::vector<int> offsets{0}, items;
  const int row_ints = PAIRS ? 2 + 2 * P : 1 + P;
  int pairs = 0;
  for (int g = 0; g < groups; ++g) {
    auto in_union = [&](int c) {
      bool any = false;
      for (int j = 0; j < P && g * P + j < kb; ++j) any |= c < cb && block_at[static_cast<size_t>(c) * kb + g * P + j] >= 0;
      return any;
    };
    auto push_blocks = [&](int c) {
      for (int j = 0; j < P; ++j) {
        items.push_back(c < 0 || g * P + j >= kb ? -1 : block_at[static_cast<size_t>(c) * kb + g * P + j]);
      }
    };
    for (int c = 0; c < cb; ++c) {
      if (!in_union(c)) continue;
      const bool pair = PAIRS && c % 2 == 0 && in_union(c + 1);
      items.push_back(c);
      if (PAIRS) items.push_back(pair ? 1 : 0);
      push_blocks(c);
      if (PAIRS) push_blocks(pair ? c + 1 : -1);
      if (pair) ++c, ++pairs;
    }
    offsets.push_back(static_cast<int>(items.size() / row_ints));
  }
  std::vector<T> hx(static_cast<size_t>(n) * n), hw(static_cast<size_t>(nnz) * BS * BS);
  for (auto& v : hx) v = __float2bfloat16(static_cast<float>(u(rng) * 2 - 1));
  for (auto& v : hw) v = __float2bfloat16(static_cast<float>(u(rng) * 2 - 1));
  T *x, *w, *y;
  int *d_off, *d_items;
  CHECK(cudaMalloc(&x, hx.size() * 2));
  CHECK(cudaMalloc(&w, hw.size() * 2));
  CHECK(cudaMalloc(&y, static_cast<size_t>(n) * n * 2));
  CHECK(cudaMalloc(&d_off, offsets.size() * 4));
  CHECK(cudaMalloc(&d_items, items.size() * 4));
  CHECK(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(w, hw.data(), hw.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_off, offsets.data(), offsets.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_items, items.data(), items.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(y, 0, static_cast<size_t>(n) * n * 2));
  Params p{};
  const CUtensorMapSwizzle sw = BS == 64 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
  if (!jbs::encode_tensor_map_16bit(&p.x_map, x, {uint64_t(n), uint64_t(n), 1, 1, 1},
                                    {uint64_t(n) * 2, uint64_t(n) * n * 2, uint64_t(n) * n * 2, uint64_t(n) * n * 2},
                                    {BS, kTN, 1, 1, 1}, sw) ||
      // The pair map only where used: at bs 64 its 256-byte rows exceed the widest swizzle.
      (PAIRS && !jbs::encode_tensor_map_16bit(&p.x2_map, x, {uint64_t(n), uint64_t(n), 1, 1, 1},
                                    {uint64_t(n) * 2, uint64_t(n) * n * 2, uint64_t(n) * n * 2, uint64_t(n) * n * 2},
                                    {2 * BS, kTN, 1, 1, 1}, CU_TENSOR_MAP_SWIZZLE_128B)) ||
      !jbs::encode_tensor_map_16bit(&p.w_map, w, {BS, uint64_t(nnz) * BS, 1, 1, 1},
                                    {BS * 2, uint64_t(nnz) * BS * BS * 2, uint64_t(nnz) * BS * BS * 2,
                                     uint64_t(nnz) * BS * BS * 2},
                                    {BS, BS, 1, 1, 1}, sw)) {
    std::printf("tensor map encoding failed\n");
    std::exit(1);
  }
  p.offsets = d_off;
  p.items = d_items;
  p.y = y;
  p.groups = groups;
  p.row_tiles = n / kTN;
  p.out_cols = n;
  p.band = band;
  auto kernel = group_tma_ss<BS, PAIRS, WIDE, CL, MODE, COLS>;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmem));
  const int grid = groups * p.row_tiles;
  // CTAs in clusters of launch_cl adjacent ids: adjacent row tiles of one group (band % CL == 0).
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = launch_cl;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  auto config_for = [&](int ctas) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(ctas);
    config.blockDim = dim3(384);
    config.dynamicSmemBytes = C::kSmem;
    config.attrs = &cluster;
    config.numAttrs = 1;
    return config;
  };
  auto launch = [&](int ctas) {
    const cudaLaunchConfig_t config = config_for(ctas);
    CHECK(cudaLaunchKernelEx(&config, kernel, p));
  };
  if (launch_cl > 1) {
    const cudaLaunchConfig_t config = config_for(grid);
    int clusters = 0;
    CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &config));
    std::printf("  clusters of %d resident at once: %d (%d CTAs)\n", launch_cl, clusters, clusters * launch_cl);
  }
  launch(grid);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<T> hy(static_cast<size_t>(n) * n);
  CHECK(cudaMemcpy(hy.data(), y, hy.size() * 2, cudaMemcpyDeviceToHost));
  double worst = 0;
  for (int t = 0; t < 256; ++t) {
    const int r = static_cast<int>(u(rng) * n), col = static_cast<int>(u(rng) * n);
    double ref = 0, mag = 0;
    const int k = col / BS, kc = col % BS;
    for (int c = 0; c < cb; ++c) {
      const int b = block_at[static_cast<size_t>(c) * kb + k];
      if (b < 0) continue;
      for (int i = 0; i < BS; ++i) {
        const double term = double(__bfloat162float(hx[static_cast<size_t>(r) * n + c * BS + i])) *
                            __bfloat162float(hw[(static_cast<size_t>(b) * BS + i) * BS + kc]);
        ref += term;
        mag += std::fabs(term);
      }
    }
    const double err = std::fabs(__bfloat162float(hy[static_cast<size_t>(r) * n + col]) - ref) / (mag + 1e-30);
    worst = std::max(worst, err);
  }
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int i = 0; i < 3; ++i) launch(grid);
  constexpr int kReps = 20;
  cudaEventRecord(e0);
  for (int i = 0; i < kReps; ++i) launch(grid);
  cudaEventRecord(e1);
  CHECK(cudaEventSynchronize(e1));
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  const double us = ms * 1000 / kReps;
  const double flop = 2.0 * n * static_cast<double>(nnz) * BS * BS;
  const int n_items = offsets.back();
  const double smem_bytes = static_cast<double>(p.row_tiles) *
                            (double(n_items + pairs) * kTN * C::kRowBytes + double(nnz) * C::kBlockBytes);
  std::printf("bs %2d cols %d%s%s cluster %d/%d mode %d density 1/%-3.0f band %d: %8.1f us %6.1f TFLOP/s (%4.1f%% of dense %.0f) %5.2f TB/s into smem, "
              "items %d, blocks/item %.2f, stages %d, max rel err %.2e%s\n",
              BS, P * BS, PAIRS ? " pairs" : "", WIDE ? " wide" : "", CL, launch_cl, MODE, 1 / density, band, us, flop / us * 1e-6, 100 * flop / us * 1e-6 / dense_tflops, dense_tflops,
              smem_bytes / us * 1e-6, n_items, double(nnz) / n_items, C::kStages, worst,
              worst < 1e-3 ? "" : "  WRONG");
  if (g_probe) {
    // One wave of the first `ctas` CTAs (band order: the first groups over the first row
    // tiles, so about equal work each): if a shared resource (the L2) bounds the feed, a
    // CTA runs faster when fewer SMs are busy; if each SM's own intake does, it does not.
    int num_sms = 0;
    CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, 0));
    double bytes_per_cta = 0;  // the first num_sms CTAs' mean bytes into shared memory
    for (int id = 0; id < num_sms; ++id) {
      const int g = id / band;
      bytes_per_cta += (double(offsets[g + 1] - offsets[g]) * kTN * C::kRowBytes) / num_sms;
    }
    for (const int ctas : {num_sms, num_sms * 3 / 4, num_sms / 2, num_sms / 4}) {
      for (int i = 0; i < 3; ++i) launch(ctas);
      cudaEventRecord(e0);
      for (int i = 0; i < kReps; ++i) launch(ctas);
      cudaEventRecord(e1);
      CHECK(cudaEventSynchronize(e1));
      cudaEventElapsedTime(&ms, e0, e1);
      const double wave_us = ms * 1000 / kReps;
      std::printf("    one wave of %3d CTAs: %7.1f us; activation tiles alone %.1f GB/s per SM\n", ctas, wave_us,
                  bytes_per_cta / wave_us * 1e-3);
    }
  }
  cudaFree(x), cudaFree(w), cudaFree(y), cudaFree(d_off), cudaFree(d_items);
}

}  // namespace

int main(int argc, char** argv) {
  const double dense = argc > 1 ? std::atof(argv[1]) : 790.0;  // TFLOP/s of the dense dot, measured elsewhere
  // "next": session 30's untried variants next to their baselines (bs 32 pairs, bs 64 wide).
  const bool next_only = argc > 2 && argv[2][0] == 'n';
  g_probe = argc > 2 && argv[2][0] == 'p';
  if (g_probe) {
    for (double d : {1.0, 0.5}) run<64>(8192, d, 4, dense);
    run<32>(8192, 0.5, 4, dense);
    return 0;
  }
  // "3": groups of 192 columns beside 128, each also launched in clusters of 2 (no sharing).
  if (argc > 2 && argv[2][0] == '3') {
    for (double d : {0.5, 0.25, 0.125}) {
      run<64>(8192, d, 4, dense);
      run<64, false, false, 1, 0, 192>(8192, d, 4, dense);
      run<64>(8192, d, 4, dense, 2);
      run<64, false, false, 1, 0, 192>(8192, d, 4, dense, 2);
    }
    for (double d : {0.5, 0.25, 0.125}) {
      run<32>(8192, d, 4, dense);
      run<32, false, false, 1, 0, 192>(8192, d, 4, dense);
      run<32, false, false, 1, 0, 192>(8192, d, 4, dense, 2);
    }
    return 0;
  }
  // "cluster": the weight blocks multicast over clusters of 2 and 4 row tiles.
  if (argc > 2 && argv[2][0] == 'c') {
    // CL / launch_cl: 1/2 is the plain kernel launched in clusters of 2 (no sharing).
    for (double d : {0.5, 0.125}) {
      run<64>(8192, d, 4, dense);
      run<64>(8192, d, 4, dense, 2);
      run<64, false, false, 2>(8192, d, 4, dense);
      run<64, false, false, 2, 1>(8192, d, 4, dense);
      run<64, false, false, 2, 2>(8192, d, 4, dense);
    }
    return 0;
  }
  if (next_only) {
    for (double d : {0.5, 0.25, 0.125}) {
      run<64>(8192, d, 4, dense);
      run<64, false, true>(8192, d, 4, dense);
    }
  } else {
    for (double d : {1.0, 0.5, 0.25, 0.125}) run<64>(8192, d, 4, dense);
    for (double d : {0.5, 0.25, 0.125}) run<64>(8192, d, 8, dense);
  }
  for (double d : {0.5, 0.25, 0.125}) {
    run<32>(8192, d, 4, dense);
    run<32, true>(8192, d, 4, dense);
  }
  return 0;
}
