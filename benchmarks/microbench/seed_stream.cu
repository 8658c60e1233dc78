// What bounds the small-N fwd at the seed shape (N = 32, 12288^2, bs 32)? A
// stand-alone microbenchmark (not part of the jbs build) behind
// benchmarks/NOTES.md, session 11. It replays the one-column stream kernel's
// memory pattern (bsmm_stream_kernel: per-warp cp.async rings, one activation
// tile + one weight block per item, items of a column in row order) on a random
// layout, with the real MMA code (matmul/warp_mma.cuh) or without it, and then
// changes one thing at a time:
//   walk     col:  CTA = one output block column, warps take items w, w + NW, ...
//                  (the kernel as it is: ~3 waves of CTAs at density 1/2);
//            pers: one CTA per SM slot, warp i takes the i-th equal contiguous
//                  range of all items in column order (no waves, no tail; the
//                  flush at column boundaries is not modelled);
//   x        0: no activation tile (weights only); 1: row-major tile by cp.async
//            (what the kernel does); 2: tile-major copy by cp.async; 3: tile-major
//            copy by one cp.async.bulk; 4: tile-major copy by one TMA copy as rows of
//            128 bytes with the 128-byte swizzle (read without bank conflicts, session 42);
//   w        0: 16-byte cp.async (the kernel); 1: one cp.async.bulk per block; 2: one TMA
//            copy per block as rows of 128 bytes with the 128-byte swizzle, which the
//            MMA's ldmatrix reads without bank conflicts (16-bit only; session 42);
//   mma      the kernel's warp_mma_step on every item, or none.
// argv "tail": the jbs even kernel with and without its sum kernel, the persistent walk with
// bulk-copied weights (its pattern) with and without activation tiles, and for one launch of
// each walk every warp's start and end (%globaltimer, the SM's clock) and SM id: how long the
// grid waits for its slowest SMs, and which SMs those are (benchmarks/NOTES.md, session 28).
// argv "slab": a walk that keeps each CTA's activation slab in shared memory (benchmarks/NOTES.md,
// sessions 40-41): CTA (r, q) loads x[:, k-range r] once (KR input blocks) and streams the
// weight blocks of that k-range for its share of the output columns, writing one fp32 partial per
// (k-range, column) piece that a sum kernel would add (not timed: ~R x 1.5 MB of partials read
// back); three ways of cutting the items into warps' shares (SlabSplit), and with the sums inside
// the kernel (run_slab_sum: the R CTAs of a share in one cluster, checked against the jbs walk).
// Against the persistent walk with a tile per item and the jbs even walk, in one run.
// argv "profile": only the persistent walk with and without its tiles (bf16, 1/2), to run under
// Nsight Compute (benchmarks/NOTES.md, session 41, point 4).
// argv "pdl": the jbs even walk alone, with its sum kernel launched the ordinary way, and with
// the sum kernel launched early (programmatic dependent launch, as jbs does since session 36),
// each as back-to-back stream launches and as one CUDA graph of the whole chain (what XLA's
// command buffers run).
// Output: us per call (weights rotated over copies beyond L2), and x the floor,
// floor = weight bytes / copy bandwidth (1 GB device-to-device copy, read +
// write, as jbs-bench measures it), plus a read-only streaming kernel's rate.
//
// Build and run on the GPU machine:
//   nvcc -O3 -std=c++17 -I cuda -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
//     -o /tmp/seed_stream benchmarks/microbench/seed_stream.cu && /tmp/seed_stream
// or, as a library for seed_stream_in_jax.py (the same run inside a jax process):
//   nvcc ... -DSEED_STREAM_LIBRARY -Xcompiler -fPIC -shared -o /tmp/libseed_stream.so \
//     benchmarks/microbench/seed_stream.cu
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/launch.cuh"
#include "common/mbarrier.cuh"
#include "common/ptx.cuh"
#include "common/swizzle.cuh"
#include "common/tma.cuh"
#include "matmul/bsmm_stream_even_kernel.cuh"
#include "matmul/tile_io.cuh"
#include "matmul/warp_mma.cuh"

#define CHECK(x)                                                                    \
  do {                                                                              \
    cudaError_t e = (x);                                                            \
    if (e != cudaSuccess) {                                                         \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)

using namespace jbs;

constexpr int kN = 32;      // activation rows
constexpr int kBS = 32;     // block size
constexpr int kC = 12288;   // input features (= output features)
constexpr int kBlocks = kC / kBS;

struct Params {
  const void* x;     // (kN, kC) row-major
  const void* x_tm;  // (kC / kBS, kN, kBS) tile-major
  const void* w;     // (nnz, kBS, kBS)
  const int2* items;       // (nnz): weight block, input block row -- column order
  const int* col_offsets;  // (kBlocks + 1)
  int64_t total_items;
  float* sink;
  unsigned long long* warp_times;  // "tail": per warp {globaltimer start, end, clock start, end, SM id}, or null
};

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

template <typename T, int XMODE, int WMODE>
struct Stage {
  static constexpr bool k16 = sizeof(T) == 2;
  static constexpr int kPad = k16 ? 8 : 4;
  static constexpr int kLdX = XMODE >= 3 ? kBS : kBS + kPad;
  static constexpr int kLdW = WMODE >= 1 ? kBS : kBS + 8;  // the fwd kernel's B stride
  // The weight block first, then the tile; with a swizzled copy (WMODE 2, XMODE 4) every
  // stage is whole 1024-byte swizzle atoms, so both start on one.
  static constexpr bool kSwizzled = WMODE == 2 || XMODE == 4;
  static constexpr int kWOffset = 0;
  static constexpr int kXOffset = kBS * kLdW;
  static constexpr int kAtomElems = 1024 / static_cast<int>(sizeof(T));
  static constexpr int kElems = kSwizzled ? (kN * kLdX + kBS * kLdW + kAtomElems - 1) / kAtomElems * kAtomElems
                                          : kN * kLdX + kBS * kLdW;
  static constexpr int kBytes = kElems * static_cast<int>(sizeof(T));
  static constexpr int kBulkBytes = (WMODE >= 1 ? kBS * kBS * static_cast<int>(sizeof(T)) : 0) +
                                    (XMODE >= 3 ? kN * kBS * static_cast<int>(sizeof(T)) : 0);
};

// WMODE 2's weights and XMODE 4's tile-major activation: `blocks` contiguous blocks of
// block_bytes as rows of 128 bytes with the 128-byte swizzle, a box per block.
static bool flat_block_map(CUtensorMap* map, const void* base, int64_t blocks, int block_bytes) {
  return encode_swizzled_rows_map(map, base, blocks * block_bytes / 128, block_bytes / 128);
}

template <typename T, int NW, int S, bool PERSIST, int XMODE, int WMODE, bool MMA>
__global__ void __launch_bounds__(NW * 32) seed_stream(const Params p, const __grid_constant__ CUtensorMap w_map,
                                                       const __grid_constant__ CUtensorMap x_map) {
  using St = Stage<T, XMODE, WMODE>;
  static_assert(!St::kSwizzled || ((St::kElems | St::kXOffset) * sizeof(T)) % 1024 == 0, "swizzle atoms");
  constexpr bool kBulk = St::kBulkBytes > 0;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t bars[NW][S];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const unsigned long long start_ns = p.warp_times ? global_ns() : 0;
  const long long start_clock = clock64();

  int64_t base;
  int stride, cnt;
  if constexpr (PERSIST) {
    const int64_t gw = static_cast<int64_t>(blockIdx.x) * NW + warp;
    const int64_t nw = static_cast<int64_t>(gridDim.x) * NW;
    base = p.total_items * gw / nw;
    cnt = static_cast<int>(p.total_items * (gw + 1) / nw - base);
    stride = 1;
  } else {
    const int beg = p.col_offsets[blockIdx.x];
    const int n = p.col_offsets[blockIdx.x + 1] - beg;
    base = beg + warp;
    cnt = n > warp ? (n - warp + NW - 1) / NW : 0;
    stride = NW;
  }
  if constexpr (kBulk) {
    if (lane == 0) {
      for (int s = 0; s < S; ++s) mbarrier_init(&bars[warp][s], 1);
      mbarrier_init_fence();
    }
    __syncwarp();
  }

  // On 1024 bytes (the 128-byte swizzle's atom; the launch adds them to the dynamic size).
  unsigned char* const aligned = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
  T* const ring = reinterpret_cast<T*>(aligned) + warp * S * St::kElems;
  const T* const x = static_cast<const T*>(p.x);
  const T* const x_tm = static_cast<const T*>(p.x_tm);
  const T* const w = static_cast<const T*>(p.w);
  auto fetch = [&](int batch) {
    const int t = batch * 32 + lane;
    return t < cnt ? __ldg(p.items + base + static_cast<int64_t>(t) * stride) : make_int2(0, 0);
  };
  int2 bcur = fetch(0);
  int2 bnxt = fetch(1);

  auto issue = [&](int stage, int t) {
    const int wb = __shfl_sync(0xffffffffu, bcur.x, t & 31);
    const int rb = __shfl_sync(0xffffffffu, bcur.y, t & 31);
    T* xs = ring + stage * St::kElems + St::kXOffset;
    T* ws = ring + stage * St::kElems + St::kWOffset;
    if constexpr (XMODE == 1) load_tile_async<T, kN, kBS, 32>(xs, St::kLdX, x + rb * kBS, kC, kN, lane);
    if constexpr (XMODE == 2)
      load_tile_async<T, kN, kBS, 32>(xs, St::kLdX, x_tm + static_cast<int64_t>(rb) * kN * kBS, kBS, kN, lane);
    if constexpr (WMODE == 0)
      load_tile_async<T, kBS, kBS, 32>(ws, St::kLdW, w + static_cast<int64_t>(wb) * kBS * kBS, kBS, kBS, lane);
    if constexpr (kBulk) {
      if (lane == 0) {
        uint64_t* bar = &bars[warp][stage];
        mbarrier_arrive_expect_tx(bar, St::kBulkBytes);
        if constexpr (XMODE == 3)
          bulk_copy_g2s(xs, x_tm + static_cast<int64_t>(rb) * kN * kBS, kN * kBS * sizeof(T), bar);
        if constexpr (XMODE == 4) tma_load_5d(xs, &x_map, 0, rb * (kN * kBS * 2 / 128), 0, 0, 0, bar);
        if constexpr (WMODE == 1)
          bulk_copy_g2s(ws, w + static_cast<int64_t>(wb) * kBS * kBS, kBS * kBS * sizeof(T), bar);
        if constexpr (WMODE == 2) tma_load_5d(ws, &w_map, 0, wb * (kBS * kBS * 2 / 128), 0, 0, 0, bar);
      }
    }
  };

  for (int s = 0; s < S - 1; ++s) {
    if (s < cnt) issue(s, s);
    cp_async_commit();
  }
  constexpr int kKStep = sizeof(T) == 2 ? 16 : 8;
  float acc[2][4][4] = {};
  float touch = 0.f;
  int read_stage = 0, write_stage = S - 1;
  for (int t = 0; t < cnt; ++t) {
    const int tl = t + S - 1;
    cp_async_wait<S - 2>();
    if constexpr (kBulk) mbarrier_wait(&bars[warp][read_stage], (t / S) & 1);
    __syncwarp();
    if (tl < cnt) {
      if ((tl & 31) == 0) {
        bcur = bnxt;
        bnxt = fetch((tl >> 5) + 1);
      }
      issue(write_stage, tl);
    }
    cp_async_commit();
    const T* xs = ring + read_stage * St::kElems + St::kXOffset;
    const T* ws = ring + read_stage * St::kElems + St::kWOffset;
    if constexpr (MMA) {
#pragma unroll
      for (int k0 = 0; k0 < kBS; k0 += kKStep)
        warp_mma_step<T, 2, 4, kKStep, false, true, false, false, (XMODE == 4 ? kTileSwizzle128B : kTilePlain),
                      (WMODE == 2 ? kTileSwizzle128B : kTilePlain)>(
            acc, xs, St::kLdX, 0, ws, St::kLdW, 0, k0, lane);
    } else {
      touch += static_cast<float>(xs[lane]) + static_cast<float>(ws[lane]);
    }
    __syncwarp();
    read_stage = read_stage + 1 == S ? 0 : read_stage + 1;
    write_stage = write_stage + 1 == S ? 0 : write_stage + 1;
  }
  cp_async_wait<0>();
  float sum = touch;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int e = 0; e < 4; ++e) sum += acc[i][j][e];
  if (sum == 1.2345e-30f) p.sink[threadIdx.x] = sum;  // keeps the work alive
  if (p.warp_times && lane == 0) {
    unsigned long long* t = p.warp_times + 5 * (static_cast<int64_t>(blockIdx.x) * NW + warp);
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    t[0] = start_ns;
    t[1] = global_ns();
    t[2] = static_cast<unsigned long long>(start_clock);
    t[3] = static_cast<unsigned long long>(clock64());
    t[4] = smid;
  }
}

// Read-only streaming: every thread sums 16-byte loads; HBM's read ceiling.
__global__ void read_stream(const uint4* buf, int64_t n, float* sink) {
  uint32_t acc = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcs(buf + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) sink[0] = 1.f;
}

// The slab walk (argv "slab"). Each warp's items are a host-built list (SlabParams): weight
// block, and (tile in the slab) | (output column << 8) | (last of its column << 31). The warp
// streams the weight blocks through its own ring by bulk copies (as the jbs even walk does) and
// reads the activation fragments from the slab; at the last item of a column it stores the
// fp32 partial (fragment order, 4 KB) unless STORE is false.
struct SlabParams {
  const void* x;            // (kN, kC) row-major
  const void* w;            // (nnz, kBS, kBS)
  const int2* items;        // per warp, concatenated
  const int* warp_offsets;  // (ctas * NW + 1)
  float* partials;          // (k-ranges, kBlocks, kN * kBS); with SUM, (pieces, kN * kBS)
  // SUM only: the warps' pieces' slots (warp list i's k-th piece: piece_slots[piece_base[i] + k]),
  // each column's slots [column_slots[c], column_slots[c + 1]) in (k-range, warp) order, the
  // column shares' bounds, and the output (kN, kC) written by the cluster's sums.
  const int* piece_base;
  const int* piece_slots;
  const int* column_slots;
  const int* share_cols;
  void* out;
};

template <int KR>
struct SlabLayout {
  static constexpr int kLdX = kBS + 8;                  // the tiles' padded rows, as the walks'
  static constexpr int kTileElems = kN * kLdX;
  static constexpr int kSlabBytes = KR * kTileElems * 2;  // 16-bit
  static constexpr int kBlockBytes = kBS * kBS * 2;
};

// With SUM the grid is (R, Q) in clusters of the R CTAs of one column share (x = the k-range):
// after the walk a cluster barrier orders every piece of the share before the cluster's warps
// add each column's pieces in a fixed order and write it. No second kernel.
template <int KR, int NW, int S, bool STORE, bool LOAD, bool SUM = false>
__global__ void __launch_bounds__(NW * 32) seed_slab(const SlabParams p) {
  using L = SlabLayout<KR>;
  using T = __nv_bfloat16;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t bars[NW][S];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int k_range = SUM ? blockIdx.x : blockIdx.y;
  T* const slab = reinterpret_cast<T*>(smem_raw);
  T* const ring = reinterpret_cast<T*>(smem_raw + L::kSlabBytes) + warp * S * (kBS * kBS);
  const T* const w = static_cast<const T*>(p.w);
  const int list = blockIdx.y * gridDim.x * NW + blockIdx.x * NW + warp;
  const int base = p.warp_offsets[list];
  const int cnt = p.warp_offsets[list + 1] - base;
  if (lane == 0) {
    for (int s = 0; s < S; ++s) mbarrier_init(&bars[warp][s], 1);
    mbarrier_init_fence();
  }
  __syncwarp();
  // The warp's items come 32 at a time, one per lane, a batch ahead (as the persistent walk's):
  // no global load between an item's arrival and its use.
  auto fetch = [&](int batch) {
    const int t = batch * 32 + lane;
    return t < cnt ? __ldg(p.items + base + t) : make_int2(0, 0);
  };
  int2 issue_cur = fetch(0), issue_nxt = fetch(1);  // the batches being issued
  int2 use_cur = issue_cur, use_nxt = issue_nxt;     // the batches being used
  auto issue = [&](int stage, int t) {
    if ((t & 31) == 0 && t > 0) {
      issue_cur = issue_nxt;
      issue_nxt = fetch((t >> 5) + 1);
    }
    const int wb = __shfl_sync(0xffffffffu, issue_cur.x, t & 31);
    if (lane == 0) {
      fence_proxy_async();  // this warp's ldmatrix reads of the stage before the copy's writes
      mbarrier_arrive_expect_tx(&bars[warp][stage], L::kBlockBytes);
      bulk_copy_g2s(ring + stage * (kBS * kBS), w + static_cast<int64_t>(wb) * kBS * kBS, L::kBlockBytes,
                    &bars[warp][stage]);
    }
  };
  // The weight loads start before the slab lands; the slab is one cp.async group.
  for (int s = 0; s < S - 1 && s < cnt; ++s) issue(s, s);
  const T* const x = static_cast<const T*>(p.x) + static_cast<int64_t>(k_range) * KR * kBS;
  constexpr int kChunks = KR * kN * (kBS * 2 / 16);  // 16-byte pieces of the slab
  for (int i = threadIdx.x; i < (LOAD ? kChunks : 0); i += NW * 32) {
    const int tile = i / (kN * kBS * 2 / 16);
    const int rem = i % (kN * kBS * 2 / 16);
    const int row = rem / (kBS * 2 / 16);
    const int piece = rem % (kBS * 2 / 16);
    cp_async_16(slab + tile * L::kTileElems + row * L::kLdX + piece * 8,
                x + static_cast<int64_t>(row) * kC + tile * kBS + piece * 8, 16);
  }
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();

  float acc[2][4][4] = {};
  int read_stage = 0, write_stage = S - 1;
  uint32_t phase = 0;
  int pieces_done = 0;
  for (int t = 0; t < cnt; ++t) {
    mbarrier_wait(&bars[warp][read_stage], phase);
    __syncwarp();
    if (t + S - 1 < cnt) issue(write_stage, t + S - 1);
    if ((t & 31) == 0 && t > 0) {
      use_cur = use_nxt;
      use_nxt = fetch((t >> 5) + 1);
    }
    const int meta = __shfl_sync(0xffffffffu, use_cur.y, t & 31);
    const T* xs = slab + (meta & 0xff) * L::kTileElems;
    const T* ws = ring + read_stage * (kBS * kBS);
#pragma unroll
    for (int k0 = 0; k0 < kBS; k0 += 16)
      warp_mma_step<T, 2, 4, 16, false, true, false, false>(acc, xs, L::kLdX, 0, ws, kBS, 0, k0, lane);
    __syncwarp();
    read_stage = read_stage + 1 == S ? 0 : read_stage + 1;
    write_stage = write_stage + 1 == S ? 0 : write_stage + 1;
    if (read_stage == 0) phase ^= 1u;
    if (meta < 0) {  // the column's last item here: its partial
      const int column = (meta >> 8) & 0x7fffff;
      const int64_t slot = SUM ? __ldg(p.piece_slots + __ldg(p.piece_base + list) + pieces_done++)
                               : static_cast<int64_t>(k_range) * kBlocks + column;
      float4* dst = reinterpret_cast<float4*>(p.partials + slot * kN * kBS);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          if constexpr (STORE) {
            __stcg(dst + (mt * 4 + nt) * 32 + lane, make_float4(acc[mt][nt][0], acc[mt][nt][1], acc[mt][nt][2],
                                                                acc[mt][nt][3]));
          } else if (acc[mt][nt][0] == 1.2345e-30f) {
            dst[lane] = make_float4(0.f, 0.f, 0.f, 0.f);  // keeps the work alive
          }
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
        }
    }
  }
  if constexpr (SUM) {
    // Every piece of the share is stored once each CTA of the cluster has passed the barrier
    // (release / acquire at cluster scope; the fence covers the pieces' L2 writes).
    __threadfence();
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
    const int share = blockIdx.y;
    const int c0 = __ldg(p.share_cols + share), c1 = __ldg(p.share_cols + share + 1);
    for (int c = c0 + k_range * NW + warp; c < c1; c += gridDim.x * NW) {
      const int s0 = __ldg(p.column_slots + c), s1 = __ldg(p.column_slots + c + 1);
      float sum[2][4][4] = {};
      for (int q = s0; q < s1; ++q) {
        const float4* piece = reinterpret_cast<const float4*>(p.partials + static_cast<int64_t>(q) * kN * kBS);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int nt = 0; nt < 4; ++nt) {
            const float4 v = __ldcg(piece + (mt * 4 + nt) * 32 + lane);
            sum[mt][nt][0] += v.x;
            sum[mt][nt][1] += v.y;
            sum[mt][nt][2] += v.z;
            sum[mt][nt][3] += v.w;
          }
      }
      store_fragments<T, 2, 4>(static_cast<T*>(p.out) + c * kBS, kC, kN, sum, lane);
    }
  }
}

// Where the problem's buffers come from: cudaMalloc, or, when this file is built as a library
// and driven from Python with jax alive (seed_stream_in_jax.py), a callback that returns the
// device address of a fresh XLA-allocated array. That separates "the process" from "the
// buffers" when a kernel runs slower under jbs-bench than here.
using DeviceAlloc = void* (*)(size_t);
static DeviceAlloc g_alloc = nullptr;
template <typename P>
static void device_alloc(P** ptr, size_t bytes) {
  if (g_alloc) {
    *ptr = static_cast<P*>(g_alloc(bytes));
    if (!*ptr) {
      std::printf("allocation callback failed for %zu bytes\n", bytes);
      std::exit(1);
    }
  } else {
    CHECK(cudaMalloc(reinterpret_cast<void**>(ptr), bytes));
  }
}
static void device_free(void* ptr) {
  if (!g_alloc) CHECK(cudaFree(ptr));  // XLA's arrays are released by their Python owner
}

static bool g_even_only = false;      // argv "even": the jbs kernel and its replica only
static bool g_global_layout = false;  // argv "global": layout as jbs.layouts.random
static bool g_random_data = false;    // argv "normal": random normal data
struct Problem {
  int copies;
  int64_t nnz;
  size_t w_bytes;  // one copy
  std::vector<char*> w;
  int2* items;
  int* col_offsets;
  void* x;
  void* x_tm;
};

// Each output block column gets exactly round(d * kBlocks) random rows; the
// blocks are stored row-major (CSR order), as jbs stores them.
static Problem make_problem(int elem, double density, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int per_col = std::max(1, static_cast<int>(density * kBlocks + 0.5));
  std::vector<std::vector<int>> rows_of(kBlocks);
  std::vector<int> all(kBlocks);
  std::iota(all.begin(), all.end(), 0);
  std::vector<std::vector<char>> present(kBlocks, std::vector<char>(kBlocks, 0));
  if (g_global_layout) {
    // As jbs.layouts.random: round(d * blocks) blocks anywhere, so columns differ in length.
    std::vector<int> cells(kBlocks * kBlocks);
    std::iota(cells.begin(), cells.end(), 0);
    std::shuffle(cells.begin(), cells.end(), rng);
    const int64_t count = std::max<int64_t>(1, static_cast<int64_t>(density * kBlocks * kBlocks + 0.5));
    for (int64_t i = 0; i < count; ++i) present[cells[i] / kBlocks][cells[i] % kBlocks] = 1;
  } else {
    for (int o = 0; o < kBlocks; ++o) {
      std::shuffle(all.begin(), all.end(), rng);
      for (int i = 0; i < per_col; ++i) present[all[i]][o] = 1;
    }
  }
  std::vector<std::vector<int>> id(kBlocks, std::vector<int>(kBlocks, -1));
  int64_t nnz = 0;
  for (int r = 0; r < kBlocks; ++r)
    for (int o = 0; o < kBlocks; ++o)
      if (present[r][o]) id[r][o] = static_cast<int>(nnz++);
  std::vector<int2> items;
  std::vector<int> offsets{0};
  for (int o = 0; o < kBlocks; ++o) {
    for (int r = 0; r < kBlocks; ++r)
      if (present[r][o]) items.push_back(make_int2(id[r][o], r));
    offsets.push_back(static_cast<int>(items.size()));
  }
  Problem pr;
  pr.nnz = nnz;
  pr.w_bytes = static_cast<size_t>(nnz) * kBS * kBS * elem;
  pr.copies = static_cast<int>(std::max<size_t>(2, (400u << 20) / pr.w_bytes + 1));
  std::mt19937 frng(1);
  std::vector<uint16_t> host(pr.w_bytes / 2);
  for (auto& v : host) v = static_cast<uint16_t>(0x3c00 | (frng() & 0x3ff));  // finite bf16 / fp32 halves
  if (g_random_data) {  // normal-ish values of either sign in every 16-bit half (bf16 and fp32 alike)
    std::normal_distribution<float> normal;
    for (auto& v : host) {
      const float f = normal(frng);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      v = static_cast<uint16_t>(bits >> 16);
    }
  }
  for (int c = 0; c < pr.copies; ++c) {
    char* d;
    device_alloc(&d, pr.w_bytes);
    CHECK(cudaMemcpy(d, host.data(), pr.w_bytes, cudaMemcpyHostToDevice));
    pr.w.push_back(d);
  }
  const size_t x_bytes = static_cast<size_t>(kN) * kC * elem;
  device_alloc(&pr.x, x_bytes);
  device_alloc(&pr.x_tm, x_bytes);
  CHECK(cudaMemcpy(pr.x, host.data(), x_bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(pr.x_tm, host.data(), x_bytes, cudaMemcpyHostToDevice));
  device_alloc(&pr.items, items.size() * sizeof(int2));
  CHECK(cudaMemcpy(pr.items, items.data(), items.size() * sizeof(int2), cudaMemcpyHostToDevice));
  device_alloc(&pr.col_offsets, offsets.size() * sizeof(int));
  CHECK(cudaMemcpy(pr.col_offsets, offsets.data(), offsets.size() * sizeof(int), cudaMemcpyHostToDevice));
  return pr;
}

static void free_problem(Problem& pr) {
  for (char* d : pr.w) device_free(d);
  device_free(pr.x);
  device_free(pr.x_tm);
  device_free(pr.items);
  device_free(pr.col_offsets);
}

// The best of `trials` timings of once() on `stream`, in us per each of the `reps` calls it makes.
template <typename Once>
static double best_us_per_call(cudaStream_t stream, int trials, int reps, Once once) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  double best = 1e30;
  for (int trial = 0; trial < trials; ++trial) {
    CHECK(cudaEventRecord(a, stream));
    once();
    CHECK(cudaEventRecord(b, stream));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    best = std::min(best, 1e3 * ms / reps);
  }
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  return best;
}

// Mean us per launch over `reps` back-to-back launches cycling the weight copies.
template <typename Launch>
static double time_us(Launch launch, int copies, int reps = 60) {
  for (int i = 0; i < copies; ++i) launch(i);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  return best_us_per_call(0, 3, reps, [&] {
    for (int i = 0; i < reps; ++i) launch(i % copies);
  });
}

static int g_sms = 0;
static float* g_sink = nullptr;
static bool g_tail = false;  // argv "tail"

// One launch with per-warp times (launch(times) runs it), summarised: the span from the first
// warp's start to the last one's end, the spread of warp starts and ends within it, and the
// share of the span an average SM (a CTA: from its first warp's start to its last one's end)
// is busy. Warps take equal item counts, so the ends' spread is the time the fast SMs wait.
template <typename Launch>
static void report_tail(int warps, int warps_per_cta, Launch launch) {
  unsigned long long* d = nullptr;
  CHECK(cudaMalloc(&d, size_t(warps) * 5 * sizeof(unsigned long long)));
  launch(d);  // warm
  launch(d);
  CHECK(cudaDeviceSynchronize());
  std::vector<unsigned long long> t(size_t(warps) * 5);
  CHECK(cudaMemcpy(t.data(), d, t.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  CHECK(cudaFree(d));
  unsigned long long t0 = ~0ull, t1 = 0;
  for (int w = 0; w < warps; ++w) t0 = std::min(t0, t[5 * w]), t1 = std::max(t1, t[5 * w + 1]);
  const double span = double(t1 - t0) / 1e3;  // us
  std::vector<double> starts, ends, cta_busy;
  for (int w = 0; w < warps; ++w) {
    starts.push_back(double(t[5 * w] - t0) / 1e3);
    ends.push_back(double(t[5 * w + 1] - t0) / 1e3);
  }
  std::vector<std::pair<double, int>> by_sm;  // (CTA busy us, SM id): one CTA per SM
  for (int c = 0; c < warps / warps_per_cta; ++c) {
    double s = 1e30, e = 0;
    for (int w = c * warps_per_cta; w < (c + 1) * warps_per_cta; ++w) s = std::min(s, starts[w]), e = std::max(e, ends[w]);
    cta_busy.push_back(e - s);
    by_sm.push_back({e - s, static_cast<int>(t[5 * c * warps_per_cta + 4])});
  }
  auto pct = [](std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, size_t(q * (v.size() - 1) + 0.5))];
  };
  double busy = 0;
  for (double b : cta_busy) busy += b;
  busy /= cta_busy.size();
  std::printf("|  | tail: span %.1f us; warp starts p50 %.1f max %.1f; warp ends min %.1f p10 %.1f p50 %.1f p90 %.1f; "
              "SM busy %.0f%% of the span (CTA min %.1f max %.1f us) |\n",
              span, pct(starts, 0.5), pct(starts, 1.0), pct(ends, 0.0), pct(ends, 0.1), pct(ends, 0.5),
              pct(ends, 0.9), 100 * busy / span, pct(cta_busy, 0.0), pct(cta_busy, 1.0));
  // The SMs by busy time, fastest first, as SM id:us -- are the fast ones always the same?
  std::sort(by_sm.begin(), by_sm.end());
  std::printf("|  | SMs fastest first:");
  for (const auto& [us, sm] : by_sm) std::printf(" %d:%.0f", sm, us);
  std::printf(" |\n");
  std::fflush(stdout);
}
static double g_copy_bw = 0;  // bytes/us

template <typename T, int NW, int S, bool PERSIST, int XMODE, int WMODE, bool MMA>
static void run(const char* dtype, const char* density, Problem& pr) {
  auto kernel = seed_stream<T, NW, S, PERSIST, XMODE, WMODE, MMA>;
  const int smem = NW * S * Stage<T, XMODE, WMODE>::kBytes + 1024;
  std::vector<CUtensorMap> maps(pr.copies);
  CUtensorMap x_map{};
  if constexpr (WMODE == 2) {
    for (int c = 0; c < pr.copies; ++c) {
      if (!flat_block_map(&maps[c], pr.w[c], pr.nnz, kBS * kBS * 2)) {
        std::printf("tensor map refused\n");
        std::exit(1);
      }
    }
  }
  if constexpr (XMODE == 4) {
    if (!flat_block_map(&x_map, pr.x_tm, kBlocks, kN * kBS * 2)) {
      std::printf("tensor map refused\n");
      std::exit(1);
    }
  }
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int per_sm = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, NW * 32, smem));
  const int grid = PERSIST ? g_sms * per_sm : kBlocks;
  Params p{pr.x, pr.x_tm, nullptr, pr.items, pr.col_offsets, pr.nnz, g_sink, nullptr};
  const double us = time_us(
      [&](int c) {
        p.w = pr.w[c];
        kernel<<<grid, NW * 32, smem>>>(p, maps[c], x_map);
      },
      pr.copies);
  const double floor_us = pr.w_bytes / g_copy_bw;
  std::printf("| %s | %s | %s | %d x %d | %d/SM | x%d w%d | %s | %.1f | %.1f | %.2f |\n", dtype, density,
              PERSIST ? "pers" : "col", NW, S, per_sm, XMODE, WMODE, MMA ? "mma" : "-", us, floor_us,
              us / floor_us);
  std::fflush(stdout);
  if (g_tail) report_tail(grid * NW, NW, [&](unsigned long long* times) {
    p.w = pr.w[0];
    p.warp_times = times;
    kernel<<<grid, NW * 32, smem>>>(p, maps[0], x_map);
    p.warp_times = nullptr;
  });
}

// The jbs even walk's parameters on problem pr (weights set per call), `warps` walking it.
static StreamEvenParams even_params(const Problem& pr, float* scratch, void* out, int64_t warps) {
  StreamEvenParams p{};
  p.in = pr.x;
  p.offsets = pr.col_offsets;
  p.items = reinterpret_cast<const int32_t*>(pr.items);
  p.out = out;
  p.pieces = scratch;
  p.rows = kN;
  p.in_tile_stride = kBS;
  p.in_ld = kC;
  p.out_cols = kC;
  p.num_segments = kBlocks;
  p.num_items = static_cast<int>(pr.nnz);
  p.num_warps = static_cast<int>(warps);
  return p;
}

// The jbs even walk's warps on problem pr (its CTAs per SM slot, *per_sm of them, no more warps
// than items), with its shared-memory attribute set.
template <typename T, bool TRANS>
static int64_t even_walk_warps(const Problem& pr, int* per_sm) {
  using Cfg = StreamEvenConfig<T, kBS, TRANS, kN>;
  auto kernel = bsmm_stream_even_kernel<T, kBS, TRANS, kN, false>;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, kernel, Cfg::kThreads, Cfg::kSmemBytes));
  return std::min<int64_t>(int64_t(g_sms) * *per_sm * Cfg::kWarps, pr.nnz);
}

// The jbs kernel itself (bsmm_stream_even_kernel.cuh) on the same problem, with its
// summing launch, to compare with the replicas above in one run.
template <typename T, bool TRANS>
static void run_even(const char* dtype, const char* density, Problem& pr, bool with_sums = true) {
  using Cfg = StreamEvenConfig<T, kBS, TRANS, kN>;
  auto kernel = bsmm_stream_even_kernel<T, kBS, TRANS, kN, false>;
  int per_sm = 0;
  const int64_t warps = even_walk_warps<T, TRANS>(pr, &per_sm);
  static float* scratch = nullptr;
  static void* out = nullptr;
  if (!scratch) {
    device_alloc(&scratch, (8192 + 2 * 2048 * kN * kBS) * sizeof(float));
    device_alloc(&out, kN * kC * sizeof(float));
  }
  StreamEvenParams p = even_params(pr, scratch, out, warps);
  const int grid = static_cast<int>((warps + Cfg::kWarps - 1) / Cfg::kWarps);
  const double us = time_us(
      [&](int c) {
        p.w = pr.w[c];
        kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes>>>(p);
        if (with_sums) bsmm_stream_even_sum_kernel<T, kBS, kN, 1, 0><<<(kBlocks + 3) / 4, 128>>>(p);
      },
      pr.copies);
  const double floor_us = pr.w_bytes / g_copy_bw;
  std::printf("| %s | %s | jbs even%s%s | %d x %d | %d/SM | x1 w%d | mma | %.1f | %.1f | %.2f |\n", dtype, density,
              TRANS ? " dx" : "", with_sums ? "" : ", walk only", Cfg::kWarps, Cfg::kStages, per_sm, Cfg::kBulkW ? 1 : 0, us, floor_us, us / floor_us);
  std::fflush(stdout);
}

static bool g_slab = false;  // argv "slab"

// How the host cuts a k-range's items into the warps' lists (pr's column order throughout):
//  kWholeColumns: CTA q takes the columns [kBlocks q / Q, kBlocks (q + 1) / Q), each warp whole
//                 columns up to about an equal share of the CTA's items (session 40);
//  kWarpCuts:     the same columns per CTA, the warps' shares exactly equal (columns cut);
//  kCtaCuts:      the k-range's items cut into Q x NW exactly equal shares, across CTAs too.
// A cut column ends a piece in each of its warps (timing only: the pieces share a partial slot).
enum class SlabSplit { kWholeColumns, kWarpCuts, kCtaCuts };
static const char* slab_split_name(SlabSplit split) {
  return split == SlabSplit::kWholeColumns ? "" : split == SlabSplit::kWarpCuts ? ", warps' shares equal"
                                                                                   : ", CTAs' and warps' shares equal";
}

// pr's column-order item list (weight block, input block) and its column offsets, on the host.
static void copy_column_items(const Problem& pr, std::vector<int2>& col_items, std::vector<int>& offsets) {
  col_items.resize(pr.nnz);
  offsets.resize(kBlocks + 1);
  CHECK(cudaMemcpy(col_items.data(), pr.items, pr.nnz * sizeof(int2), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(offsets.data(), pr.col_offsets, offsets.size() * sizeof(int), cudaMemcpyDeviceToHost));
}

// The items of k-range r (input blocks [KR r, KR (r + 1))) in the columns [c0, c1), in
// column order, as the slab walk reads them: (weight block, tile in the slab | column << 8),
// each column's last flagged (sign bit). From pr's column-order list (col_items, offsets).
static std::vector<int2> k_range_items(const std::vector<int2>& col_items, const std::vector<int>& offsets, int KR,
                                       int r, int c0, int c1) {
  std::vector<int2> range;
  for (int c = c0; c < c1; ++c) {
    const size_t first = range.size();
    for (int i = offsets[c]; i < offsets[c + 1]; ++i) {
      const int row = col_items[i].y;
      if (row / KR == r) range.push_back(make_int2(col_items[i].x, (row % KR) | (c << 8)));
    }
    if (range.size() > first) range.back().y |= int(0x80000000u);
  }
  return range;
}

// Appends `items` cut into `shares` exactly equal warp lists, each list's last item flagged (a
// column cut between two warps ends a piece in each).
static void append_equal_shares(const std::vector<int2>& items, int shares, std::vector<int2>& lists,
                                std::vector<int>& warp_offsets) {
  const int64_t total = static_cast<int64_t>(items.size());
  for (int wi = 0; wi < shares; ++wi) {
    const int64_t b = total * wi / shares, e = total * (wi + 1) / shares;
    lists.insert(lists.end(), items.begin() + b, items.begin() + e);
    if (e > b) lists.back().y |= int(0x80000000u);
    warp_offsets.push_back(static_cast<int>(lists.size()));
  }
}

// The slab walk on pr: R = kBlocks / KR k-ranges x Q shares of NW warps each.
template <int KR, int NW, int S, bool STORE, bool LOAD = true>
static void run_slab(const char* dtype, const char* density, Problem& pr, int Q,
                     SlabSplit split = SlabSplit::kWholeColumns) {
  using L = SlabLayout<KR>;
  constexpr int R = kBlocks / KR;
  std::vector<int2> col_items;
  std::vector<int> offsets;
  copy_column_items(pr, col_items, offsets);
  std::vector<int2> lists;
  std::vector<int> warp_offsets{0};
  for (int r = 0; r < R; ++r) {
    if (split == SlabSplit::kCtaCuts) {
      append_equal_shares(k_range_items(col_items, offsets, KR, r, 0, kBlocks), Q * NW, lists, warp_offsets);
      continue;
    }
    for (int q = 0; q < Q; ++q) {
      const std::vector<int2> cta = k_range_items(col_items, offsets, KR, r, kBlocks * q / Q, kBlocks * (q + 1) / Q);
      if (split == SlabSplit::kWarpCuts) {
        append_equal_shares(cta, NW, lists, warp_offsets);
        continue;
      }
      const int total = static_cast<int>(cta.size());
      int taken = 0;
      for (int wi = 0; wi < NW; ++wi) {  // whole columns, until the warp's equal share is reached
        const int target = total * (wi + 1) / NW;
        while (taken < total && (taken < target || wi == NW - 1)) {
          do {
            lists.push_back(cta[taken]);
          } while (cta[taken++].y >= 0);  // to the column's last item
        }
        warp_offsets.push_back(static_cast<int>(lists.size()));
      }
    }
  }
  int2* d_items = nullptr;
  int* d_offsets = nullptr;
  float* partials = nullptr;
  CHECK(cudaMalloc(&d_items, std::max<size_t>(1, lists.size()) * sizeof(int2)));
  CHECK(cudaMalloc(&d_offsets, warp_offsets.size() * sizeof(int)));
  CHECK(cudaMalloc(&partials, size_t(R) * kBlocks * kN * kBS * sizeof(float)));
  CHECK(cudaMemcpy(d_items, lists.data(), lists.size() * sizeof(int2), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_offsets, warp_offsets.data(), warp_offsets.size() * sizeof(int), cudaMemcpyHostToDevice));
  auto kernel = seed_slab<KR, NW, S, STORE, LOAD>;
  const int smem = L::kSlabBytes + NW * S * L::kBlockBytes;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  SlabParams p{pr.x, nullptr, d_items, d_offsets, partials};
  const dim3 grid(Q, R);
  const double us = time_us(
      [&](int c) {
        p.w = pr.w[c];
        kernel<<<grid, NW * 32, smem>>>(p);
      },
      pr.copies);
  const double floor_us = pr.w_bytes / g_copy_bw;
  std::printf("| %s | %s | slab KR %d, %d x %d CTAs%s%s%s | %d x %d | 1/SM | slab w1 | mma | %.1f | %.1f | %.2f |\n", dtype,
              density, KR, R, Q, slab_split_name(split), STORE ? "" : ", partials not stored",
              LOAD ? "" : ", slab not loaded", NW, S,
              us, floor_us, us / floor_us);
  std::fflush(stdout);
  CHECK(cudaFree(d_items));
  CHECK(cudaFree(d_offsets));
  CHECK(cudaFree(partials));
}

// The slab walk with its sum inside (seed_slab<..., SUM = true>): Q column shares balanced by
// their items, each walked by R = kBlocks / KR CTAs (one per k-range) forming one cluster, the
// warps' shares of a CTA exactly equal. Checked against the jbs even walk and its sum kernel on
// the same problem (bf16 out; the two add in different orders).
template <int KR, int NW, int S>
static void run_slab_sum(const char* dtype, const char* density, Problem& pr, int Q) {
  using T = __nv_bfloat16;
  using L = SlabLayout<KR>;
  constexpr int R = kBlocks / KR;
  std::vector<int2> col_items;
  std::vector<int> offsets;
  copy_column_items(pr, col_items, offsets);
  std::vector<int> share_cols{0};
  for (int q = 0, c = 0; q < Q; ++q) {  // share q ends where the running items reach nnz (q + 1) / Q
    const int64_t target = pr.nnz * (q + 1) / Q;
    while (c < kBlocks && (offsets[c + 1] <= target || q == Q - 1)) ++c;
    share_cols.push_back(c);
  }
  std::vector<int2> lists;
  std::vector<int> warp_offsets{0};
  for (int q = 0; q < Q; ++q)
    for (int r = 0; r < R; ++r)  // CTA (r, q) of the grid (R, Q): lists (q R + r) NW + warp
      append_equal_shares(k_range_items(col_items, offsets, KR, r, share_cols[q], share_cols[q + 1]), NW, lists,
                          warp_offsets);
  struct Piece {
    int column, order;
  };
  std::vector<Piece> pieces;  // each list's flagged items, in list order
  std::vector<int> piece_base;
  for (size_t w = 0; w + 1 < warp_offsets.size(); ++w) {
    piece_base.push_back(static_cast<int>(pieces.size()));
    for (int i = warp_offsets[w]; i < warp_offsets[w + 1]; ++i)
      if (lists[i].y < 0) pieces.push_back({(lists[i].y >> 8) & 0x7fffff, static_cast<int>(pieces.size())});
  }
  piece_base.push_back(static_cast<int>(pieces.size()));
  // Slots: each column's pieces together, in list order ((k-range, warp) order within a share).
  std::vector<Piece> sorted = pieces;
  std::stable_sort(sorted.begin(), sorted.end(), [](const Piece& a, const Piece& b) { return a.column < b.column; });
  std::vector<int> piece_slots(pieces.size()), column_slots(kBlocks + 1, 0);
  for (size_t i = 0; i < sorted.size(); ++i) {
    piece_slots[sorted[i].order] = static_cast<int>(i);
    ++column_slots[sorted[i].column + 1];
  }
  for (int c = 0; c < kBlocks; ++c) column_slots[c + 1] += column_slots[c];
  auto upload = [](const auto& v) {
    using E = typename std::decay_t<decltype(v)>::value_type;
    E* d = nullptr;
    CHECK(cudaMalloc(&d, std::max<size_t>(1, v.size()) * sizeof(E)));
    CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(E), cudaMemcpyHostToDevice));
    return d;
  };
  int2* d_items = upload(lists);
  int* d_offsets = upload(warp_offsets);
  int* d_piece_base = upload(piece_base);
  int* d_piece_slots = upload(piece_slots);
  int* d_column_slots = upload(column_slots);
  int* d_share_cols = upload(share_cols);
  float* partials = nullptr;
  void* out = nullptr;
  CHECK(cudaMalloc(&partials, std::max<size_t>(1, pieces.size()) * kN * kBS * sizeof(float)));
  CHECK(cudaMalloc(&out, size_t(kN) * kC * sizeof(T)));
  auto kernel = seed_slab<KR, NW, S, true, true, true>;
  const int smem = L::kSlabBytes + NW * S * L::kBlockBytes;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  if (R > 8) CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  SlabParams p{pr.x, nullptr, d_items, d_offsets, partials, d_piece_base, d_piece_slots, d_column_slots, d_share_cols,
               out};
  const dim3 grid(R, Q);
  {  // the grid must be resident at once: its clusters wait on each other's CTAs only, but a
     // second wave would serialize the shares
    cudaLaunchConfig_t cfg{};
    cudaLaunchAttribute cluster{};
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = R;
    cluster.val.clusterDim.y = 1;
    cluster.val.clusterDim.z = 1;
    cfg.gridDim = grid;
    cfg.blockDim = dim3(NW * 32);
    cfg.dynamicSmemBytes = smem;
    cfg.attrs = &cluster;
    cfg.numAttrs = 1;
    int clusters = 0;
    CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg));
    if (clusters < Q) std::printf("(only %d clusters of %d CTAs resident at once, for %d shares)\n", clusters, R, Q);
  }
  const double us = time_us(
      [&](int c) {
        p.w = pr.w[c];
        CHECK(launch_kernel_in_clusters(kernel, grid, dim3(NW * 32), smem, nullptr, p, R));
      },
      pr.copies);
  // Check: both on copy 0.
  p.w = pr.w[0];
  CHECK(launch_kernel_in_clusters(kernel, grid, dim3(NW * 32), smem, nullptr, p, R));
  using Cfg = StreamEvenConfig<T, kBS, false, kN>;
  auto even = bsmm_stream_even_kernel<T, kBS, false, kN, false>;
  int per_sm = 0;
  const int64_t warps = even_walk_warps<T, false>(pr, &per_sm);
  float* scratch = nullptr;
  void* ref = nullptr;
  CHECK(cudaMalloc(&scratch, (8192 + 2 * 2048 * kN * kBS) * sizeof(float)));
  CHECK(cudaMalloc(&ref, size_t(kN) * kC * sizeof(T)));
  StreamEvenParams ep = even_params(pr, scratch, ref, warps);
  ep.w = pr.w[0];
  even<<<static_cast<int>((warps + Cfg::kWarps - 1) / Cfg::kWarps), Cfg::kThreads, Cfg::kSmemBytes>>>(ep);
  bsmm_stream_even_sum_kernel<T, kBS, kN, 1, 0><<<(kBlocks + 3) / 4, 128>>>(ep);
  CHECK(cudaDeviceSynchronize());
  std::vector<T> got(size_t(kN) * kC), want(size_t(kN) * kC);
  CHECK(cudaMemcpy(got.data(), out, got.size() * sizeof(T), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(want.data(), ref, want.size() * sizeof(T), cudaMemcpyDeviceToHost));
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double a = __bfloat162float(got[i]), b = __bfloat162float(want[i]);
    max_diff = std::max(max_diff, std::fabs(a - b));
    max_ref = std::max(max_ref, std::fabs(b));
  }
  const double floor_us = pr.w_bytes / g_copy_bw;
  std::printf("| %s | %s | slab KR %d, %d x %d CTAs in clusters of %d, sums inside (max |diff| %.3g of %.3g) | %d x %d "
              "| 1/SM | slab w1 | mma | %.1f | %.1f | %.2f |\n",
              dtype, density, KR, R, Q, R, max_diff, max_ref, NW, S, us, floor_us, us / floor_us);
  std::fflush(stdout);
  for (void* d : {static_cast<void*>(d_items), static_cast<void*>(d_offsets), static_cast<void*>(d_piece_base),
                  static_cast<void*>(d_piece_slots), static_cast<void*>(d_column_slots),
                  static_cast<void*>(d_share_cols), static_cast<void*>(partials), out, static_cast<void*>(scratch),
                  ref})
    CHECK(cudaFree(d));
}

static bool g_pdl = false;  // argv "pdl"

// us per call of `launch` (on `stream`) over `reps` calls: as stream launches, or
// captured once into a CUDA graph and replayed.
template <typename Launch>
static double time_on_stream(Launch launch, int copies, bool graph, cudaStream_t stream, int reps = 60) {
  cudaGraphExec_t exec = nullptr;
  if (graph) {
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < reps; ++i) launch(i % copies);
    CHECK(cudaStreamEndCapture(stream, &g));
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    CHECK(cudaGraphDestroy(g));
  }
  auto once = [&] {
    if (graph) {
      CHECK(cudaGraphLaunch(exec, stream));
    } else {
      for (int i = 0; i < reps; ++i) launch(i % copies);
    }
  };
  once();
  CHECK(cudaStreamSynchronize(stream));
  const double best = best_us_per_call(stream, 5, reps, once);
  if (exec) CHECK(cudaGraphExecDestroy(exec));
  return best;
}

// The jbs even walk and its sum kernel three ways (argv "pdl"), stream and graph.
template <typename T, bool TRANS>
static void run_even_pdl(const char* dtype, const char* density, Problem& pr) {
  using Cfg = StreamEvenConfig<T, kBS, TRANS, kN>;
  auto kernel = bsmm_stream_even_kernel<T, kBS, TRANS, kN, false>;
  auto sum = bsmm_stream_even_sum_kernel<T, kBS, kN, 1, 0>;
  int per_sm = 0;
  const int64_t warps = even_walk_warps<T, TRANS>(pr, &per_sm);
  float* scratch = nullptr;
  void* out = nullptr;
  CHECK(cudaMalloc(&scratch, (8192 + 2 * 2048 * kN * kBS) * sizeof(float)));
  CHECK(cudaMalloc(&out, kN * kC * sizeof(float)));
  StreamEvenParams p = even_params(pr, scratch, out, warps);
  const dim3 grid(static_cast<unsigned>((warps + Cfg::kWarps - 1) / Cfg::kWarps));
  const dim3 sum_grid((kBlocks + 3) / 4);
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const char* names[3] = {"walk only", "walk + sum", "walk + sum (PDL)"};
  for (int graph = 0; graph < 2; ++graph) {
    for (int mode = 0; mode < 3; ++mode) {
      const double us = time_on_stream(
          [&](int c) {
            p.w = pr.w[c];
            CHECK(launch_kernel(kernel, grid, dim3(Cfg::kThreads), Cfg::kSmemBytes, stream, p));
            if (mode == 1) CHECK(launch_kernel(sum, sum_grid, dim3(128), 0, stream, p));
            if (mode == 2) CHECK(launch_kernel_after(sum, sum_grid, dim3(128), 0, stream, p));
          },
          pr.copies, graph == 1, stream);
      const double floor_us = pr.w_bytes / g_copy_bw;
      std::printf("| %s | %s | jbs even%s, %s, %s | %d x %d | %d/SM | x1 w%d | mma | %.1f | %.1f | %.2f |\n", dtype,
                  density, TRANS ? " dx" : "", names[mode], graph ? "graph" : "stream", Cfg::kWarps, Cfg::kStages,
                  per_sm, Cfg::kBulkW ? 1 : 0, us, floor_us, us / floor_us);
      std::fflush(stdout);
    }
  }
  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaFree(scratch));
  CHECK(cudaFree(out));
}

static bool g_profile = false;  // argv "profile": the persistent walk with and without tiles, bf16 1/2 only
static bool g_swizzle = false;  // argv "swizzle": the persistent walk's weights by swizzled TMA copies (16-bit)

template <typename T>
static void sweep(const char* dtype, const char* dname, double density, bool full) {
  if (g_profile && (sizeof(T) != 2 || density != 0.5)) return;
  Problem pr = make_problem(sizeof(T), density, 7);
  if (g_profile) {  // for Nsight Compute: -k regex:seed_stream, --kernel-name-base demangled
    run<T, 8, 5, true, 1, 1, true>(dtype, dname, pr);
    run<T, 8, 5, true, 0, 1, true>(dtype, dname, pr);
    if constexpr (sizeof(T) == 2) run<T, 8, 5, true, 4, 2, true>(dtype, dname, pr);  // session 42: swizzled
    free_problem(pr);
    return;
  }
  if (g_swizzle) {
    if constexpr (sizeof(T) == 2) {
      run<T, 8, 5, true, 1, 1, true>(dtype, dname, pr);
      run<T, 8, 5, true, 1, 2, true>(dtype, dname, pr);
      run<T, 8, 5, true, 3, 1, true>(dtype, dname, pr);
      run<T, 8, 5, true, 4, 1, true>(dtype, dname, pr);
      run<T, 8, 5, true, 4, 2, true>(dtype, dname, pr);
      run<T, 8, 5, true, 4, 2, false>(dtype, dname, pr);
      run<T, 8, 5, true, 0, 1, true>(dtype, dname, pr);
      run<T, 8, 5, true, 0, 2, true>(dtype, dname, pr);
    }
    free_problem(pr);
    return;
  }
  if (g_pdl) {
    run_even_pdl<T, false>(dtype, dname, pr);
    run_even_pdl<T, true>(dtype, dname, pr);
    free_problem(pr);
    return;
  }
  if (g_slab) {
    if constexpr (sizeof(T) == 2) {
      run_even<T, false>(dtype, dname, pr);
      run_even<T, false>(dtype, dname, pr, false);
      run<T, 8, 5, true, 1, 1, true>(dtype, dname, pr);
      run<T, 8, 5, true, 0, 1, true>(dtype, dname, pr);  // no activation tiles: weights alone
      // Session 40 ran the first four; session 41 showed that their warps' whole-column shares
      // cost up to 1.43x (max / mean items) and added the even cuts.
      constexpr SlabSplit kWarp = SlabSplit::kWarpCuts, kCta = SlabSplit::kCtaCuts;
      run_slab<48, 8, 5, true>(dtype, dname, pr, 16);  // 8 k-ranges x 16 column shares = 128 CTAs
      run_slab<48, 8, 5, true>(dtype, dname, pr, 16, kWarp);
      run_slab<48, 8, 5, true>(dtype, dname, pr, 16, kCta);
      run_slab<48, 8, 5, false>(dtype, dname, pr, 16, kCta);
      run_slab<48, 8, 5, true, false>(dtype, dname, pr, 16, kCta);  // the slab's prologue's cost
      run_slab<48, 8, 5, false, false>(dtype, dname, pr, 16, kCta);
      run_slab<64, 8, 3, true>(dtype, dname, pr, 22, kCta);  // 6 x 22 = 132 CTAs, a larger slab
      run_slab<32, 8, 8, true>(dtype, dname, pr, 11, kCta);  // 12 x 11 = 132 CTAs, a deeper ring
      run_slab<32, 8, 8, true, false>(dtype, dname, pr, 11, kCta);
      run_slab_sum<48, 8, 5>(dtype, dname, pr, 16);  // 16 clusters of 8
      run_slab_sum<64, 8, 3>(dtype, dname, pr, 22);  // 22 clusters of 6
      run_slab_sum<32, 8, 8>(dtype, dname, pr, 11);  // 11 clusters of 12 (beyond the portable 8)
    }
    free_problem(pr);
    return;
  }
  run_even<T, false>(dtype, dname, pr);
  run_even<T, true>(dtype, dname, pr);
  if (g_tail) {
    run_even<T, false>(dtype, dname, pr, false);
    if constexpr (sizeof(T) == 2) {
      run<T, 8, 5, true, 1, 1, true>(dtype, dname, pr);
      run<T, 8, 5, true, 0, 1, true>(dtype, dname, pr);  // no activation tiles: weights alone
    }
    free_problem(pr);
    return;
  }
  if (g_even_only) {
    if constexpr (sizeof(T) == 2) {
      run<T, 8, 5, true, 1, 1, true>(dtype, dname, pr);
      run<T, 8, 5, false, 1, 0, true>(dtype, dname, pr);
    } else {
      run<T, 8, 2, true, 1, 0, true>(dtype, dname, pr);
      run<T, 8, 2, false, 1, 0, true>(dtype, dname, pr);
    }
    free_problem(pr);
    return;
  }
  if constexpr (sizeof(T) == 2) {
    // The kernel as it is (8 warps x 5 stages at 1 CTA/SM: its BIG variant; 4 x 3 at 3/SM).
    run<T, 8, 5, false, 1, 0, true>(dtype, dname, pr);
    run<T, 4, 3, false, 1, 0, true>(dtype, dname, pr);
    run<T, 8, 5, false, 1, 0, false>(dtype, dname, pr);
    run<T, 8, 5, false, 0, 0, false>(dtype, dname, pr);
    // Persistent, balanced walk.
    run<T, 8, 5, true, 1, 0, true>(dtype, dname, pr);
    run<T, 8, 5, true, 1, 0, false>(dtype, dname, pr);
    run<T, 8, 5, true, 0, 0, false>(dtype, dname, pr);
    run<T, 4, 5, true, 1, 0, true>(dtype, dname, pr);  // 2 CTAs/SM
    run<T, 8, 5, true, 1, 1, true>(dtype, dname, pr);
    run<T, 8, 5, true, 3, 1, true>(dtype, dname, pr);
    run<T, 8, 5, true, 3, 1, false>(dtype, dname, pr);
    if (full) {
      run<T, 4, 10, true, 1, 0, true>(dtype, dname, pr);
      run<T, 16, 2, true, 1, 0, true>(dtype, dname, pr);
      run<T, 8, 5, true, 2, 0, true>(dtype, dname, pr);
      run<T, 4, 10, true, 3, 1, true>(dtype, dname, pr);
      run<T, 12, 4, true, 3, 1, true>(dtype, dname, pr);
      run<T, 16, 3, true, 3, 1, true>(dtype, dname, pr);
      run<T, 8, 5, false, 3, 1, true>(dtype, dname, pr);
    }
  } else {
    // fp32 stages are twice as large: the kernel's BIG variant is 8 x 2, the other 4 x 2.
    run<T, 8, 2, false, 1, 0, true>(dtype, dname, pr);
    run<T, 4, 2, false, 1, 0, true>(dtype, dname, pr);
    run<T, 8, 2, false, 0, 0, false>(dtype, dname, pr);
    run<T, 8, 2, true, 1, 0, true>(dtype, dname, pr);
    run<T, 4, 5, true, 1, 0, true>(dtype, dname, pr);
    run<T, 4, 5, true, 0, 0, false>(dtype, dname, pr);
    run<T, 4, 5, true, 1, 1, true>(dtype, dname, pr);
    run<T, 4, 5, true, 3, 1, true>(dtype, dname, pr);
    run<T, 8, 3, true, 3, 1, true>(dtype, dname, pr);
  }
  free_problem(pr);
}

static int seed_stream_main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    g_even_only |= a == "even";
    g_global_layout |= a == "global";
    g_random_data |= a == "normal";
    g_tail |= a == "tail";
    g_pdl |= a == "pdl";
    g_slab |= a == "slab";
    g_profile |= a == "profile";
    g_swizzle |= a == "swizzle";
  }
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  g_sms = prop.multiProcessorCount;
  CHECK(cudaMalloc(&g_sink, 4096 * sizeof(float)));
  {
    const size_t bytes = size_t(1) << 30;
    char *a, *b;
    CHECK(cudaMalloc(&a, bytes));
    CHECK(cudaMalloc(&b, bytes));
    CHECK(cudaMemset(a, 1, bytes));
    const double copy_us = time_us([&](int) { CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice)); }, 1, 10);
    g_copy_bw = 2.0 * bytes / copy_us;
    const double read_us = time_us(
        [&](int) { read_stream<<<g_sms * 8, 512>>>(reinterpret_cast<const uint4*>(a), bytes / 16, g_sink); }, 1, 10);
    std::printf("%s, %d SMs: copy %.0f GB/s (read + write), read-only stream %.0f GB/s\n\n", prop.name, g_sms,
                g_copy_bw / 1e3, bytes / read_us / 1e3);
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
  }
  std::printf("| dtype | density | walk | warps x stages | CTAs | x / w copy | mma | us | floor us | x floor |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  sweep<__nv_bfloat16>("bf16", "1/2", 0.5, true);
  if (g_tail || g_pdl || g_slab || g_swizzle) sweep<__nv_bfloat16>("bf16", "1/4", 0.25, false);
  sweep<__nv_bfloat16>("bf16", "1/8", 0.125, true);
  sweep<__nv_bfloat16>("bf16", "1/32", 1.0 / 32, false);
  sweep<__nv_bfloat16>("bf16", "1/64", 1.0 / 64, false);
  sweep<float>("fp32", "1/2", 0.5, false);
  sweep<float>("fp32", "1/8", 0.125, false);
  return 0;
}

#ifdef SEED_STREAM_LIBRARY
// ctypes entry point: the same run, with `alloc` (may be null: cudaMalloc) for the problem's buffers.
extern "C" int seed_stream_run(int argc, char** argv, DeviceAlloc alloc) {
  g_alloc = alloc;
  return seed_stream_main(argc, argv);
}
#else
int main(int argc, char** argv) { return seed_stream_main(argc, argv); }
#endif
