// Whether an SM's global stores slow its other work: the question behind issue 4's density-1/8
// conv rows (benchmarks/NOTES.md, sessions 52-57). In the conv strip kernel
// (conv/bsconv_strip_kernel.cuh) the epilogue's stores of a unit's 64 KB cost ~1.5 us each on
// the consumers' path, and every way of running them at the same time as other work (idle warps
// storing a staged unit, ping-pong warpgroups, TMA stores) came out level or slower. Three
// mechanisms would explain that, and each calls for a different design:
//   1. the stores' backlog in the SM's memory pipeline (L1TEX) delays the other warps' shared-
//      memory instructions: ldmatrix of the MMAs' A fragments, mbarrier waits;
//   2. the stores slow the TMA loads (the SM's path to L2, or its TMA unit for TMA stores);
//   3. neither: the stores are cheap to overlap, and the kernels' trouble lies elsewhere.
//
// One CTA per SM, three roles, all running at once:
//   victim (warpgroup 0, or the loader warp 8): a fixed amount of work whose time is measured:
//     mma_rs   the strip kernel's item loop: 6 taps, 2 k-steps of m64n256k16 each, A fragments
//              by ldmatrix into 3 register buffers, one tap's wgmmas in flight (wgmma_wait<1>);
//     mma_ss   the same with A read by the tensor cores from shared memory (no ldmatrix; two
//              m64n128k16 per k-step, the widest wgmma of common/wgmma.cuh's SS form);
//     bulk     warp 8 loads 32 KB pieces by 1-D bulk copies, two in flight on mbarriers;
//     boxes    warp 8 loads 16 KB TMA boxes of 64-byte rows (the strip halo's row shape), two
//              in flight;
//     rs+trkl  mma_rs whose own warpgroup also stores a 2 KB piece of a staged unit after each
//              tap's wgmma commit, before its wait (16 bytes a thread from shared memory; placed
//              after the wait, the piece ran session 57's call 5 1.31x slower): a unit's output
//              trickled out between the next unit's MMAs (~12 KB an item); ss+trkl the same
//              for mma_ss. Their time against mma_rs / mma_ss alone is what the trickle costs;
//   storer (warpgroup 1), until the victim is done:
//     none     nothing;
//     lanes    64 KB units read from shared memory and stored 16 bytes a lane (a generic
//              16-byte load + STG.128, as the epilogue does; each warp instruction writes four
//              whole lines);
//     regs     the same stores of a register's value (STG.128 only, no shared-memory read);
//     tma      the same units by 1-D bulk stores from shared memory (16 KB or chunk-sized
//              copies, up to 8 groups of them in flight).
// Printed per case: the victim's microseconds (mean over SMs) and its slowdown against the
// same victim with no storer, and the storer's bytes per cycle per SM.
//
// Session 57 (H200; benchmarks/results/store_interference_twin_h200_2026-12-03_session57.md):
// a store stream at full rate slows mma_rs 1.09-1.26x and mma_ss 1.00-1.07x, and L2-resident
// loads 2-3x (lanes) to 4-6x (tma); the same bytes as a trickle of 2 KB chunks at ~4 bytes a
// cycle cost the loads 1.01-1.07x. A warpgroup's own stores between its taps cost its MMAs
// 1.3-1.5x.
//
//   nvcc -O3 -std=c++17 -I cuda -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
//     -o /tmp/store_interference benchmarks/microbench/store_interference.cu && /tmp/store_interference \
//     [x MB read] [y MB written] [storer pause ns] [storer chunk bytes]
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "common/mbarrier.cuh"
#include "common/ptx.cuh"
#include "common/smem.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"

namespace {

using namespace jbs;
using T = __nv_bfloat16;

enum Victim { kMmaRs, kMmaSs, kBulk, kBoxes, kMmaRsTrickle, kMmaSsTrickle };
enum Storer { kNone, kLanes, kRegs, kTma };
const char* const kVictimNames[] = {"mma_rs", "mma_ss", "bulk", "boxes", "rs+trkl", "ss+trkl"};
const char* const kStorerNames[] = {"none", "lanes", "regs", "tma"};

constexpr int kThreads = 384;
constexpr int kItems = 160;          // mma victims: items of 6 taps x 2 k-steps
constexpr int kLoads = 192;          // load victims: pieces per SM
constexpr int kBulkBytes = 32768;    // a bulk victim's piece
constexpr int kBoxBytes = 16384;     // a box: 32 channels x 8 x 32 pixels
constexpr int kUnitBytes = 65536;    // a stored unit
// Shared memory: B operand 16 KB | A operand 4 KB | the storer's unit 64 KB | 2 load buffers.
constexpr int kBOffset = 0, kAOffset = 16384, kUnitOffset = 20480, kLoadOffset = kUnitOffset + kUnitBytes;
constexpr int kSmemBytes = kLoadOffset + 2 * kBulkBytes + 1024;
// Global memory: x (the loads' source) and y (the stores' target), each larger than L2's 50 MB
// only in sum, as in the conv (42 MB read, 42 MB written). The spans actually read and written
// are arguments (Spans): spans of a few MB stay in L2, so loads and stores then reach no HBM.
constexpr int64_t kXBytes = 42ll << 20, kYBytes = 42ll << 20;
constexpr int64_t kImageBytes = 640ll * 32 * 32;

struct Spans {
  int64_t x_bytes;  // the loads cycle through the first x_bytes of x
  int64_t y_bytes;  // the stores through the first y_bytes of y
  int pause_ns;     // the storer's pause after each chunk (0: none; else it stores part of the time)
  int chunk_bytes;  // what the storer stores between pauses: a power of two, 2 KB .. 64 KB
};

struct Times {
  long long victim_cycles;
  long long storer_cycles;
  long long stored_bytes;
};

template <int VICTIM>
__device__ void run_mma(unsigned char* smem, float* sink, unsigned char* y, const Spans& spans) {
  constexpr bool kRs = VICTIM == kMmaRs || VICTIM == kMmaRsTrickle;
  constexpr bool kTrickle = VICTIM == kMmaRsTrickle || VICTIM == kMmaSsTrickle;
  const int64_t pieces = spans.y_bytes / 2048;
  int64_t piece = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int lr = lane & 7, li = lane >> 3;
  // Operands are whatever shared memory holds: values do not change a tensor core's timing.
  const uint64_t b_desc = wgmma_desc(smem + kBOffset, 128, 256);
  const uint64_t a_desc = wgmma_desc(smem + kAOffset, 128, 256);
  const T* const a_rows = reinterpret_cast<const T*>(smem + kAOffset);
  float acc[32][4] = {};
  float (&halves)[2][16][4] = *reinterpret_cast<float (*)[2][16][4]>(&acc);  // (SS: two m64n128 per k-step)
  uint32_t a[3][2][4];
  auto load_a = [&](uint32_t (&buf)[2][4], int t) {
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {
      ldsm_x4_t(buf[ks], a_rows + ((li >> 1) * 8 + lr + 16 * ks) * 32 + (warp & 1) * 16 + (li & 1) * 8 + 64 * (t & 1));
    }
  };
  for (int item = 0; item < kItems; ++item) {
    if constexpr (kRs) {
#pragma unroll
      for (int j = 0; j < 3; ++j) load_a(a[j], j);
    }
#pragma unroll
    for (int t = 0; t < 6; ++t) {
      const uint64_t b_tap = b_desc + t * 64;  // (1 KB steps: as the taps' halo offsets)
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < 2; ++ks) {
        if constexpr (kRs) {
          wgmma_rs<T, 256, 0>(acc, a[t % 3][ks], b_tap + ks * 2);
        } else {
          wgmma_ss<T, 128, 0>(halves[0], a_desc + ks * 2, b_tap + ks * 2);
          wgmma_ss<T, 128, 0>(halves[1], a_desc + ks * 2, b_tap + ks * 2 + 256);  // (n 128..: 16 x 256 bytes on)
        }
      }
      wgmma_commit();
      if constexpr (kTrickle) {  // (while this tap's wgmmas and the last one's run)
        const int offset = static_cast<int>((piece * 2048) % kUnitBytes) + 16 * static_cast<int>(threadIdx.x);
        const uint4 v = *reinterpret_cast<const uint4*>(smem + kUnitOffset + offset);
        *reinterpret_cast<uint4*>(y + (piece % pieces) * 2048 + 16 * threadIdx.x) = v;
        piece += gridDim.x;
      }
      wgmma_wait<1>();
      if constexpr (kRs) load_a(a[(t + 2) % 3], t + 2);
    }
    wgmma_wait<0>();
  }
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 32; ++i) s += acc[i][0] + acc[i][1] + acc[i][2] + acc[i][3];
  if (s == 1234.5f) sink[threadIdx.x] = s;  // keeps the MMAs alive
}

template <int VICTIM>
__device__ void run_loads(unsigned char* smem, uint64_t* full, const CUtensorMap* x_map, const unsigned char* x,
                          const Spans& spans) {
  // One lane issues; piece i goes to buffer i % 2 once piece i - 2 there has landed.
  const int piece_bytes = VICTIM == kBulk ? kBulkBytes : kBoxBytes;
  const int64_t pieces = spans.x_bytes / piece_bytes;
  for (int i = 0; i < kLoads; ++i) {
    const int buffer = i & 1;
    if (i >= 2) mbarrier_wait(&full[buffer], ((i >> 1) - 1) & 1);
    const int64_t piece = (blockIdx.x + static_cast<int64_t>(i) * gridDim.x) % pieces;
    unsigned char* dst = smem + kLoadOffset + buffer * kBulkBytes;
    mbarrier_arrive_expect_tx(&full[buffer], piece_bytes);
    if constexpr (VICTIM == kBulk) {
      bulk_copy_g2s(dst, x + piece * kBulkBytes, kBulkBytes, &full[buffer]);
    } else {
      // Box (channel block, 8 columns, 32 rows) of the 64 x 32 x 32 x 320 activations.
      const int cb = static_cast<int>(piece % 10), x0 = static_cast<int>(piece / 10 % 4) * 8;
      const int image = static_cast<int>(piece / 40 % (spans.x_bytes / kImageBytes));
      tma_load_5d(dst, x_map, cb * 32, x0, 0, image, 0, &full[buffer]);
    }
  }
  mbarrier_wait(&full[(kLoads - 2) & 1], ((kLoads - 2) >> 1) & 1);
  mbarrier_wait(&full[(kLoads - 1) & 1], ((kLoads - 1) >> 1) & 1);
}

template <int STORER>
__device__ long long run_storer(unsigned char* smem, volatile int* victim_done, unsigned char* y, const Spans& spans) {
  const int t = threadIdx.x - 128;  // 0..127
  const int64_t units = spans.y_bytes / kUnitBytes;
  long long stored = 0;
  for (int64_t u = blockIdx.x; *victim_done == 0; u += gridDim.x) {
    unsigned char* const unit = y + (u % units) * kUnitBytes;
    // The unit in chunks of spans.chunk_bytes, each followed by the pause (a trickle where
    // chunks are small, bursts of a whole unit by default).
    for (int chunk = 0; chunk < kUnitBytes; chunk += spans.chunk_bytes) {
      if constexpr (STORER == kLanes || STORER == kRegs) {
#pragma unroll 4
        for (int i = chunk / 16 + t; i < (chunk + spans.chunk_bytes) / 16; i += 128) {
          const uint4 v = STORER == kLanes ? *reinterpret_cast<const uint4*>(smem + kUnitOffset + i * 16)
                                           : uint4{static_cast<unsigned>(i), 1u, 2u, static_cast<unsigned>(u)};
          *reinterpret_cast<uint4*>(unit + i * 16) = v;
        }
      } else if (t == 0) {
        for (int c = chunk; c < chunk + spans.chunk_bytes; c += kUnitBytes / 4) {
          const int bytes = spans.chunk_bytes < kUnitBytes / 4 ? spans.chunk_bytes : kUnitBytes / 4;
          bulk_copy_s2g(unit + c, smem + kUnitOffset + c, bytes);
        }
        bulk_commit_group();
        bulk_wait_group_read<8>();  // (the source never changes: this only bounds what is in flight)
      }
      if (spans.pause_ns > 0) __nanosleep(spans.pause_ns);
    }
    stored += kUnitBytes;
  }
  if (STORER == kTma && t == 0) bulk_wait_all();
  return stored;
}

template <int VICTIM, int STORER>
__global__ void __launch_bounds__(kThreads, 1)
    interference_kernel(const __grid_constant__ CUtensorMap x_map, const unsigned char* x, unsigned char* y,
                        Times* times, float* sink, const Spans spans) {
  unsigned char* const smem =
      reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(dynamic_smem()) + 1023) & ~uintptr_t{1023});
  __shared__ uint64_t full[2];
  __shared__ int victim_done;
  const int tid = threadIdx.x;
  for (int i = tid; i < kLoadOffset / 16; i += kThreads) reinterpret_cast<uint4*>(smem)[i] = uint4{};
  if (tid == 0) {
    mbarrier_init(&full[0], 1);
    mbarrier_init(&full[1], 1);
    mbarrier_init_fence();
    victim_done = 0;
  }
  fence_proxy_async();
  __syncthreads();
  const int warp = tid >> 5;
  constexpr bool kMmaVictim = VICTIM != kBulk && VICTIM != kBoxes;
  if (warp < 4) {
    warpgroup_reg_alloc<224>();
    if (!kMmaVictim) return;
    const long long start = clock64();
    run_mma<VICTIM>(smem, sink, y, spans);
    named_barrier_sync(1, 128);
    if (tid == 0) {
      times[blockIdx.x].victim_cycles = clock64() - start;
      *reinterpret_cast<volatile int*>(&victim_done) = 1;
    }
  } else if (warp < 8) {
    warpgroup_reg_alloc<224>();
    if (STORER == kNone) return;
    const long long start = clock64();
    const long long stored = run_storer<STORER>(smem, &victim_done, y, spans);
    if (tid == 128) {
      times[blockIdx.x].storer_cycles = clock64() - start;
      times[blockIdx.x].stored_bytes = stored;
    }
  } else {
    warpgroup_reg_dealloc<56>();
    if (kMmaVictim || warp != 8) return;
    if ((tid & 31) == 0) {
      const long long start = clock64();
      run_loads<VICTIM>(smem, full, &x_map, x, spans);
      times[blockIdx.x].victim_cycles = clock64() - start;
      *reinterpret_cast<volatile int*>(&victim_done) = 1;
    }
  }
}

Spans g_spans{kXBytes, kYBytes, 0, kUnitBytes};  // (main's arguments)

template <int VICTIM, int STORER>
void run_case(int sms, double clock_ghz, const CUtensorMap& map, const unsigned char* x, unsigned char* y,
              Times* times, float* sink, double* victim_alone_us) {
  const auto kernel = interference_kernel<VICTIM, STORER>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  Times host[1024];
  double victim_us = 0.0, storer_rate = 0.0;
  for (int rep = 0; rep < 2; ++rep) {  // the first is a warm-up
    cudaMemset(times, 0, sizeof(Times) * sms);
    kernel<<<sms, kThreads, kSmemBytes>>>(map, x, y, times, sink, g_spans);
    cudaDeviceSynchronize();
    cudaMemcpy(host, times, sizeof(Times) * sms, cudaMemcpyDeviceToHost);
  }
  for (int b = 0; b < sms; ++b) {
    victim_us += host[b].victim_cycles / (clock_ghz * 1e3);
    if (host[b].storer_cycles > 0) storer_rate += double(host[b].stored_bytes) / host[b].storer_cycles;
  }
  victim_us /= sms;
  storer_rate /= sms;
  if (STORER == kNone) *victim_alone_us = victim_us;
  std::printf("%-7s | %-5s | %9.1f | %8.2fx | %18.1f | %s\n", kVictimNames[VICTIM], kStorerNames[STORER], victim_us,
              victim_us / *victim_alone_us, storer_rate, cudaGetErrorString(cudaGetLastError()));
}

template <int VICTIM>
void run_victim(int sms, double clock_ghz, const CUtensorMap& map, const unsigned char* x, unsigned char* y,
                Times* times, float* sink) {
  double alone = 0.0;
  run_case<VICTIM, kNone>(sms, clock_ghz, map, x, y, times, sink, &alone);
  run_case<VICTIM, kLanes>(sms, clock_ghz, map, x, y, times, sink, &alone);
  run_case<VICTIM, kRegs>(sms, clock_ghz, map, x, y, times, sink, &alone);
  run_case<VICTIM, kTma>(sms, clock_ghz, map, x, y, times, sink, &alone);
}

}  // namespace

int main(int argc, char** argv) {
  // Optional: the MB of x read, the MB of y written, the storer's pause in ns after each unit.
  if (argc > 1) g_spans.x_bytes = std::min<int64_t>(kXBytes, (std::atoll(argv[1]) << 20) / kImageBytes * kImageBytes);
  if (argc > 2) g_spans.y_bytes = std::min<int64_t>(kYBytes, (std::atoll(argv[2]) << 20) / kUnitBytes * kUnitBytes);
  if (argc > 3) g_spans.pause_ns = std::atoi(argv[3]);
  if (argc > 4) g_spans.chunk_bytes = std::atoi(argv[4]);
  const int chunk = g_spans.chunk_bytes;
  if (g_spans.x_bytes < kImageBytes || g_spans.y_bytes < kUnitBytes || chunk < 2048 || chunk > kUnitBytes ||
      (chunk & (chunk - 1)) != 0) {
    std::printf("usage: store_interference [x MB >= 1] [y MB >= 1] [storer pause ns] [chunk bytes, 2 K .. 64 K]\n");
    return 1;
  }
  int sms = 0, clock_khz = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  unsigned char *x = nullptr, *y = nullptr;
  Times* times = nullptr;
  float* sink = nullptr;
  cudaMalloc(&x, kXBytes);
  cudaMalloc(&y, kYBytes);
  cudaMalloc(&times, sizeof(Times) * 1024);
  cudaMalloc(&sink, sizeof(float) * kThreads);
  cudaMemset(x, 0, kXBytes);
  CUtensorMap map;
  const uint64_t dims[5] = {320, 32, 32, 64, 1};
  const uint64_t strides[4] = {640, 640 * 32, 640 * 32 * 32, uint64_t(kXBytes)};
  const uint32_t box[5] = {32, 8, 32, 1, 1};
  if (!encode_tensor_map_16bit(&map, x, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_64B)) {
    std::printf("tensor map: encode failed\n");
    return 1;
  }
  const double clock_ghz = clock_khz * 1e-6;  // (cycles are the SM clock's; converted at its rated clock)
  std::printf("%s, %d SMs, %.2f GHz; one CTA per SM; victim = %d items (mma) or %d pieces (loads) per SM; "
              "x %.1f MB read, y %.1f MB written, storer pause %d ns after each %d bytes\n",
              prop.name, sms, clock_ghz, kItems, kLoads, g_spans.x_bytes / 1048576.0, g_spans.y_bytes / 1048576.0,
              g_spans.pause_ns, g_spans.chunk_bytes);
  std::printf("victim  | store | victim us | vs alone | storer bytes/cycle | status\n");
  run_victim<kMmaRs>(sms, clock_ghz, map, x, y, times, sink);
  run_victim<kMmaSs>(sms, clock_ghz, map, x, y, times, sink);
  run_victim<kBulk>(sms, clock_ghz, map, x, y, times, sink);
  run_victim<kBoxes>(sms, clock_ghz, map, x, y, times, sink);
  run_victim<kMmaRsTrickle>(sms, clock_ghz, map, x, y, times, sink);
  run_victim<kMmaSsTrickle>(sms, clock_ghz, map, x, y, times, sink);
  return 0;
}
