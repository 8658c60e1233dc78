// Where the small-N forward's time goes, warp by warp (benchmarks/NOTES.md, sessions 63-64,
// "Next" 2). A stand-alone program, not part of the jbs build: it runs jbs's own launcher for
// the bf16 bs 32 forward (launch_stream_even_variant: the swizzled even walk, its tiles straight
// from x by TMA, then its sum kernel launched early) at the announcement's shape (N = 32,
// 12288^2, a jbs.layouts.random-like layout), and
//   1. times it as jbs-bench does, ops back to back (one CUDA graph of launches over weight
//      copies rotated beyond L2), with and without the sum kernel's launch, against the copy
//      rate's floor;
//   2. records one launch's per-warp time stamps through the walk's JBS_WALK_TIMES hook
//      (bsmm_stream_even_kernel.cuh; compiled in only here): the first warp's start to each
//      warp's first data (the ramp), the spread of the warps' ends (the tail the fast SMs wait
//      through) and the span; the ramp split at the warp's items in hand and its return from
//      griddep_wait (session 67: the loads go out by ~0.5 us; prefetching the TMA descriptors,
//      tried then, changed nothing);
//   3. the same launch's sum kernel, per output column: when griddep_wait releases it after the
//      walk, when a cut column's pieces are in and its stores issued (what the ~4.5-5 us of the
//      op beyond the walk's span is made of: benchmarks/NOTES.md, session 67);
//   4. the PACKED walk (bsmm_stream_even_kernel.cuh): whole columns packed into the CTAs longest
//      first onto the least loaded (pack_columns), so that no sum kernel follows, timed against
//      the even walk in the same graph harness (A / B / A / B), its outputs checked against the
//      even walk's, and its span from the same stamps (benchmarks/NOTES.md, session 68);
//   5. the packed walk with its prologue depth staggered over the warps (g_walk_stagger: warp gw
//      issues 1 + gw % k stages first, then catches up two a step), k = 0 (off), 2 and 5.
// Output: one markdown row per density in each of four tables (the walk; its sum kernel; packed;
// staggered).
//
// Build and run on the GPU machine (densities as denominators, default 2 4 8 16):
//   nvcc -O3 -std=c++17 -I cuda -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
//     -DJBS_WALK_TIMES -o /tmp/walk_timeline benchmarks/microbench/walk_timeline.cu && /tmp/walk_timeline 2 8
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <queue>
#include <random>
#include <string>
#include <vector>

#include "matmul/bsmm_launch.cuh"

#ifndef JBS_WALK_TIMES
#error "build with -DJBS_WALK_TIMES: the walk's time stamps are this program's point"
#endif

#define CHECK(x)                                                                    \
  do {                                                                              \
    cudaError_t e = (x);                                                            \
    if (e != cudaSuccess) {                                                         \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)

using T = __nv_bfloat16;
constexpr int kN = 32;          // activation rows
constexpr int kBS = 32;         // block size
constexpr int kC = 12288;       // C = K
constexpr int kBlocks = kC / kBS;
constexpr double kL2Bytes = 64.0 * (1 << 20);

// The forward's tables as jbs builds them (jbs/_src/tables.py): blocks packed row-major, and per
// output block column its items [packed block, input block row], rows ascending.
struct Layout {
  int64_t nnz = 0;
  std::vector<int> offsets;  // (kBlocks + 1)
  std::vector<int> items;    // (nnz, 2)
};

static Layout random_layout(double density, uint64_t seed) {
  std::vector<int> cells(kBlocks * kBlocks);
  std::iota(cells.begin(), cells.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(cells.begin(), cells.end(), rng);
  const int64_t count = std::max<int64_t>(1, static_cast<int64_t>(density * kBlocks * kBlocks + 0.5));
  std::vector<char> present(cells.size(), 0);
  for (int64_t i = 0; i < count; ++i) present[cells[i]] = 1;
  std::vector<int> packed(cells.size(), -1);  // row-major packing
  Layout l;
  for (size_t i = 0; i < cells.size(); ++i) {
    if (present[i]) packed[i] = static_cast<int>(l.nnz++);
  }
  l.offsets.assign(kBlocks + 1, 0);
  for (int k = 0; k < kBlocks; ++k) {
    for (int c = 0; c < kBlocks; ++c) {
      const int p = packed[c * kBlocks + k];
      if (p < 0) continue;
      l.items.push_back(p);
      l.items.push_back(c);
    }
    l.offsets[k + 1] = static_cast<int>(l.items.size() / 2);
  }
  return l;
}

// The packed walk's table (EvenPacking): the output columns with items, longest first (stable),
// each onto the CTA with the fewest items so far (the lowest index on ties), then the segments
// reordered CTA by CTA; columns without items go last, in no CTA's range.
struct Packing {
  std::vector<int> offsets, items, cta_items, columns;
  double max_over_mean = 0;  // the most items of a CTA over the mean
};

static Packing pack_columns(const Layout& l, int ctas) {
  auto count = [&](int c) { return l.offsets[c + 1] - l.offsets[c]; };
  std::vector<int> order(kBlocks);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return count(a) > count(b); });
  using Load = std::pair<int64_t, int>;  // (items, CTA)
  std::priority_queue<Load, std::vector<Load>, std::greater<Load>> least;
  for (int b = 0; b < ctas; ++b) least.push({0, b});
  std::vector<std::vector<int>> members(ctas);
  std::vector<int> empty;
  for (int c : order) {
    if (count(c) == 0) {
      empty.push_back(c);
      continue;
    }
    Load top = least.top();
    least.pop();
    members[top.second].push_back(c);
    least.push({top.first + count(c), top.second});
  }
  Packing p;
  p.offsets.push_back(0);
  p.cta_items.push_back(0);
  auto append = [&](int c) {
    p.columns.push_back(c);
    p.items.insert(p.items.end(), l.items.begin() + 2 * l.offsets[c], l.items.begin() + 2 * l.offsets[c + 1]);
    p.offsets.push_back(static_cast<int>(p.items.size() / 2));
  };
  int64_t most = 0;
  for (int b = 0; b < ctas; ++b) {
    for (int c : members[b]) append(c);
    p.cta_items.push_back(p.offsets.back());
    most = std::max<int64_t>(most, p.cta_items[b + 1] - p.cta_items[b]);
  }
  for (int c : empty) append(c);
  p.max_over_mean = static_cast<double>(most) * ctas / static_cast<double>(l.nnz);
  return p;
}

template <typename U>
static U* upload(const std::vector<U>& v) {
  U* d = nullptr;
  CHECK(cudaMalloc(&d, v.size() * sizeof(U)));
  CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(U), cudaMemcpyHostToDevice));
  return d;
}

static T* random_bf16(size_t count, uint64_t seed) {
  std::vector<T> host(count);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (auto& v : host) v = __float2bfloat16(normal(rng));
  return upload(host);
}

// The floor's copy: every thread moves 16-byte words, grid-strided.
__global__ void copy_kernel(const int4* __restrict__ src, int4* __restrict__ dst, size_t words) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < words; i += size_t(gridDim.x) * blockDim.x) {
    dst[i] = src[i];
  }
}

// us per call of `launch` over `calls` calls captured in one graph, best of 5 replays.
template <typename Launch>
static double graph_us(cudaStream_t stream, int calls, Launch launch) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < calls; ++i) launch(i);
  CHECK(cudaStreamEndCapture(stream, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  double best = 1e30;
  for (int r = 0; r < 6; ++r) {
    CHECK(cudaEventRecord(start, stream));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaEventRecord(stop, stream));
    CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (r > 0) best = std::min(best, 1e3 * ms / calls);  // (the first replay warms)
  }
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  return best;
}

static double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))];
}

static double g_copy_bytes_per_us = 0;
// The sum kernel's rows (table 2) and the packed walk's (table 3), printed after table 1.
static std::vector<std::string> g_sum_rows, g_packed_rows, g_stagger_rows;

// One launch of `op` (after a warm one) with the walk's per-warp stamps: (warps_max, kWalkStamps).
template <typename Op>
static std::vector<unsigned long long> walk_stamps(Op op, int64_t warps_max, cudaStream_t stream) {
  const size_t bytes = warps_max * jbs::kWalkStamps * sizeof(unsigned long long);
  unsigned long long* times = nullptr;
  CHECK(cudaMalloc(&times, bytes));
  CHECK(cudaMemcpyToSymbol(jbs::g_walk_times, &times, sizeof(times)));
  op(0);
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaMemset(times, 0, bytes));
  op(1);
  CHECK(cudaStreamSynchronize(stream));
  unsigned long long* none = nullptr;
  CHECK(cudaMemcpyToSymbol(jbs::g_walk_times, &none, sizeof(none)));
  std::vector<unsigned long long> t(warps_max * jbs::kWalkStamps);
  CHECK(cudaMemcpy(t.data(), times, bytes, cudaMemcpyDeviceToHost));
  CHECK(cudaFree(times));
  return t;
}

// Stamp `slot` of every warp (2: its end, 1: its first data), in us from the first warp's start.
static std::vector<double> walk_times(const std::vector<unsigned long long>& t, int slot = 2) {
  constexpr int K = jbs::kWalkStamps;
  unsigned long long t0 = ~0ull;
  for (size_t i = 0; i < t.size() / K; ++i) {
    if (t[K * i] != 0) t0 = std::min(t0, t[K * i]);
  }
  std::vector<double> times;
  for (size_t i = 0; i < t.size() / K; ++i) {
    if (t[K * i] != 0) times.push_back((static_cast<double>(t[K * i + slot]) - t0) * 1e-3);
  }
  return times;
}

static std::vector<float> download(const T* y, size_t count) {
  std::vector<T> host(count);
  CHECK(cudaMemcpy(host.data(), y, count * sizeof(T), cudaMemcpyDeviceToHost));
  std::vector<float> f(count);
  for (size_t i = 0; i < count; ++i) f[i] = __bfloat162float(host[i]);
  return f;
}

static void run(int denominator, cudaStream_t stream, int sms) {
  const Layout l = random_layout(1.0 / denominator, 1234 + denominator);
  const size_t w_elems = static_cast<size_t>(l.nnz) * kBS * kBS;
  const double w_bytes = 2.0 * w_elems;
  const int copies = std::clamp(static_cast<int>(3 * kL2Bytes / w_bytes) + 1, 2, 32);
  std::vector<T*> w(copies);
  for (int c = 0; c < copies; ++c) w[c] = random_bf16(w_elems, 7 + c);
  T* x = random_bf16(size_t(kN) * kC, 3);
  T* y = nullptr;
  CHECK(cudaMalloc(&y, size_t(kN) * kC * sizeof(T)));
  int* offsets = upload(l.offsets);
  int* items = upload(l.items);
  const int64_t scratch_bytes = int64_t(64) << 20;
  void* scratch = nullptr;
  CHECK(cudaMalloc(&scratch, scratch_bytes));

  jbs::BsmmBlocksArgs a;
  a.in = x;
  a.out = y;
  a.offsets = offsets;
  a.items = items;
  a.rows = kN;
  a.in_cols = kC;
  a.out_cols = kC;
  a.in_group_stride = 0;
  a.w_group_stride = 0;
  a.out_group_stride = 0;
  a.groups = 1;
  a.block_size = kBS;
  a.nnz = l.nnz;
  a.scratch = scratch;
  a.scratch_bytes = scratch_bytes;
  a.num_sms = sms;
  a.w = w[0];
  if (!jbs::use_stream_even<T, kBS>(a)) {
    std::printf("| 1/%d | the even walk does not take this call (use_stream_even); nothing measured |\n",
                denominator);
    return;
  }
  auto op = [&](int i) {
    a.w = w[i % copies];
    CHECK((jbs::launch_stream_even_variant<T, kBS, false, kN>(a, stream)));
  };
  op(0);  // once outside the graph: the launcher's first call sets the kernels' attributes
  CHECK(cudaStreamSynchronize(stream));
  const int calls = copies * std::max(1, 64 / copies);
  const double op_us = graph_us(stream, calls, op);
  const double floor_us = (w_bytes + 2.0 * kN * kC * sizeof(T)) / g_copy_bytes_per_us;

  // One launch with the walk's time stamps (after a warm one).
  const int64_t warps_max = int64_t(sms) * 64;
  unsigned long long* times = nullptr;
  CHECK(cudaMalloc(&times, warps_max * jbs::kWalkStamps * sizeof(unsigned long long)));
  CHECK(cudaMemset(times, 0, warps_max * jbs::kWalkStamps * sizeof(unsigned long long)));
  CHECK(cudaMemcpyToSymbol(jbs::g_walk_times, &times, sizeof(times)));
  const size_t sum_stamps = size_t(kBlocks) * jbs::kSumStamps;
  unsigned long long* sum_times = nullptr;
  CHECK(cudaMalloc(&sum_times, sum_stamps * sizeof(unsigned long long)));
  CHECK(cudaMemcpyToSymbol(jbs::g_sum_times, &sum_times, sizeof(sum_times)));
  op(0);
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaMemset(times, 0, warps_max * jbs::kWalkStamps * sizeof(unsigned long long)));
  CHECK(cudaMemset(sum_times, 0, sum_stamps * sizeof(unsigned long long)));
  op(1);
  CHECK(cudaStreamSynchronize(stream));
  unsigned long long* none = nullptr;
  CHECK(cudaMemcpyToSymbol(jbs::g_walk_times, &none, sizeof(none)));
  CHECK(cudaMemcpyToSymbol(jbs::g_sum_times, &none, sizeof(none)));
  std::vector<unsigned long long> t(warps_max * jbs::kWalkStamps);
  CHECK(cudaMemcpy(t.data(), times, t.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  std::vector<unsigned long long> st(sum_stamps);
  CHECK(cudaMemcpy(st.data(), sum_times, st.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  CHECK(cudaFree(sum_times));

  constexpr int K = jbs::kWalkStamps;
  unsigned long long t0 = ~0ull;
  for (int64_t i = 0; i < warps_max; ++i) {
    if (t[K * i] != 0) t0 = std::min(t0, t[K * i]);
  }
  // The ramp split: start -> items in hand -> past griddep_wait -> first stage landed (each
  // from the warp's own start).
  std::vector<double> starts, firsts, ramps, ends, items_in, past_wait;
  for (int64_t i = 0; i < warps_max; ++i) {
    if (t[K * i] == 0) continue;
    starts.push_back((t[K * i] - t0) * 1e-3);
    firsts.push_back((t[K * i + 1] - t0) * 1e-3);
    ramps.push_back((t[K * i + 1] - t[K * i]) * 1e-3);
    ends.push_back((t[K * i + 2] - t0) * 1e-3);
    items_in.push_back((t[K * i + 4] - t[K * i]) * 1e-3);
    past_wait.push_back((t[K * i + 5] - t[K * i]) * 1e-3);
  }
  const double span = percentile(ends, 1.0);
  std::printf("| 1/%d | %.1f | %.1f | %.2f | %zu | %.0f | %.2f / %.2f | %.2f / %.2f / %.2f | %.2f | %.2f / %.2f | "
              "%.1f / %.1f / %.1f / %.1f | %.1f | %.1f |\n",
              denominator, op_us, floor_us, op_us / floor_us, ends.size(), double(l.nnz) / ends.size(),
              percentile(starts, 0.5), percentile(starts, 1.0), percentile(firsts, 0.1), percentile(firsts, 0.5),
              percentile(firsts, 1.0), percentile(ramps, 0.5), percentile(past_wait, 0.5), percentile(items_in, 0.5),
              percentile(ends, 0.0), percentile(ends, 0.1), percentile(ends, 0.5), percentile(ends, 0.9), span,
              op_us - span);
  std::fflush(stdout);

  // The sum kernel of the same launch, per output block column (its warp), from the walk's t0:
  // when its CTAs started (launched early, beside the walk), when griddep_wait let them go (the
  // walk grid complete and flushed), and, for the columns cut between warps, when their pieces
  // were in and when their stores were issued.
  std::vector<double> sum_starts, released, pieces_in, stored;
  for (int c = 0; c < kBlocks; ++c) {
    const unsigned long long* m = st.data() + jbs::kSumStamps * c;
    if (m[0] == 0) continue;
    sum_starts.push_back((static_cast<double>(m[0]) - t0) * 1e-3);
    released.push_back((static_cast<double>(m[1]) - t0) * 1e-3);
    if (m[2] != 0) {
      pieces_in.push_back((static_cast<double>(m[2]) - t0) * 1e-3);
      stored.push_back((static_cast<double>(m[3]) - t0) * 1e-3);
    }
  }
  char row[512];
  if (released.empty()) {
    std::snprintf(row, sizeof(row), "| 1/%d | no sum kernel stamps |", denominator);
  } else {
    const double last_store = stored.empty() ? percentile(released, 1.0) : percentile(stored, 1.0);
    std::snprintf(row, sizeof(row),
                  "| 1/%d | %.1f | %.2f / %.2f / %.2f | %zu / %zu | %.2f / %.2f | %.2f / %.2f | %.2f | %.2f | %.1f |",
                  denominator, span, percentile(sum_starts, 0.5), percentile(sum_starts, 1.0),
                  percentile(released, 0.0), released.size(), pieces_in.size(),
                  pieces_in.empty() ? 0.0 : percentile(pieces_in, 0.5), pieces_in.empty() ? 0.0 : percentile(pieces_in, 1.0),
                  stored.empty() ? 0.0 : percentile(stored, 0.5), last_store, percentile(released, 0.0) - span,
                  last_store - span, op_us - last_store);
  }
  g_sum_rows.push_back(row);

  // The packed walk: its outputs against the even walk's (both fp32 sums of the same products,
  // grouped differently, then rounded to bf16), then A / B / A / B in the graph harness.
  const Packing pk = pack_columns(l, sms);
  int* pk_offsets = upload(pk.offsets);
  int* pk_items = upload(pk.items);
  int* pk_ctas = upload(pk.cta_items);
  int* pk_columns = upload(pk.columns);
  const jbs::EvenPacking packing{pk_offsets, pk_items, pk_ctas, pk_columns, sms};
  auto packed_op = [&](int i) {
    a.w = w[i % copies];
    CHECK((jbs::launch_stream_even_variant<T, kBS, false, kN>(a, stream, &packing)));
  };
  const size_t y_count = size_t(kN) * kC;
  CHECK(cudaMemset(y, 0xff, y_count * sizeof(T)));  // NaNs: an output left unwritten shows
  op(0);
  CHECK(cudaStreamSynchronize(stream));
  const std::vector<float> y_even = download(y, y_count);
  CHECK(cudaMemset(y, 0xff, y_count * sizeof(T)));
  packed_op(0);
  CHECK(cudaStreamSynchronize(stream));
  const std::vector<float> y_packed = download(y, y_count);
  double most = 0, diff = 0;
  size_t bad = 0;
  for (size_t i = 0; i < y_count; ++i) {
    if (!(std::abs(y_packed[i]) < 1e30f)) ++bad;  // NaN or Inf: unwritten or wrong
    most = std::max(most, double(std::abs(y_even[i])));
    diff = std::max(diff, double(std::abs(y_packed[i] - y_even[i])));
  }
  const double even_a = graph_us(stream, calls, op), packed_a = graph_us(stream, calls, packed_op);
  const double even_b = graph_us(stream, calls, op), packed_b = graph_us(stream, calls, packed_op);
  const double even_us = std::min(even_a, even_b), packed_us = std::min(packed_a, packed_b);
  const std::vector<double> pends = walk_times(walk_stamps(packed_op, warps_max, stream));
  std::snprintf(row, sizeof(row),
                "| 1/%d | %.3f | %.1f / %.1f | %.1f / %.1f | %.3f | %.2f | %.1f / %.1f / %.1f | %.1f | %zu | %.2g |",
                denominator, pk.max_over_mean, even_a, even_b, packed_a, packed_b, packed_us / even_us,
                packed_us / floor_us, percentile(pends, 0.0), percentile(pends, 0.5), percentile(pends, 1.0),
                packed_us - percentile(pends, 1.0), bad, most > 0 ? diff / most : diff);
  g_packed_rows.push_back(row);

  // The packed walk with its prologue staggered (each k timed twice, alternating).
  const int staggers[] = {0, 2, 5};
  double stagger_us[3] = {1e30, 1e30, 1e30};
  for (int round = 0; round < 2; ++round) {
    for (int k = 0; k < 3; ++k) {
      CHECK(cudaMemcpyToSymbol(jbs::g_walk_stagger, &staggers[k], sizeof(int)));
      stagger_us[k] = std::min(stagger_us[k], graph_us(stream, calls, packed_op));
    }
  }
  std::string cells;
  for (int k = 0; k < 3; ++k) {
    CHECK(cudaMemcpyToSymbol(jbs::g_walk_stagger, &staggers[k], sizeof(int)));
    const std::vector<unsigned long long> st = walk_stamps(packed_op, warps_max, stream);
    const std::vector<double> firsts = walk_times(st, 1), ends = walk_times(st, 2);
    char cell[128];
    std::snprintf(cell, sizeof(cell), " %.1f | %.2f / %.2f | %.1f / %.1f |", stagger_us[k], percentile(firsts, 0.1),
                  percentile(firsts, 0.5), percentile(ends, 0.5), percentile(ends, 1.0));
    cells += cell;
  }
  const int off = 0;
  CHECK(cudaMemcpyToSymbol(jbs::g_walk_stagger, &off, sizeof(int)));
  g_stagger_rows.push_back("| 1/" + std::to_string(denominator) + " |" + cells);
  CHECK(cudaFree(pk_offsets));
  CHECK(cudaFree(pk_items));
  CHECK(cudaFree(pk_ctas));
  CHECK(cudaFree(pk_columns));
  for (T* p : w) CHECK(cudaFree(p));
  CHECK(cudaFree(x));
  CHECK(cudaFree(y));
  CHECK(cudaFree(offsets));
  CHECK(cudaFree(items));
  CHECK(cudaFree(scratch));
  CHECK(cudaFree(times));
}

int main(int argc, char** argv) {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  {  // the floor's copy rate, read + write, as jbs-bench measures it
    const size_t bytes = size_t(1) << 30;
    void *src = nullptr, *dst = nullptr;
    CHECK(cudaMalloc(&src, bytes));
    CHECK(cudaMalloc(&dst, bytes));
    CHECK(cudaMemset(src, 1, bytes));
    // A copy kernel, as XLA's and torch's copies are: a captured cudaMemcpyAsync becomes a graph
    // memcpy node served by the copy engines, which moved only ~2.8 TB/s on the H200 (session 67).
    const double us = graph_us(stream, 8, [&](int) {
      copy_kernel<<<prop.multiProcessorCount * 8, 256, 0, stream>>>(static_cast<const int4*>(src),
                                                                   static_cast<int4*>(dst), bytes / sizeof(int4));
      CHECK(cudaGetLastError());
    });
    g_copy_bytes_per_us = 2.0 * bytes / us;
    CHECK(cudaFree(src));
    CHECK(cudaFree(dst));
  }
  std::printf("%s, %d SMs, copy %.0f GB/s (read + write); bf16 fwd, N = %d, %d^2, bs %d, jbs's launcher\n\n",
              prop.name, prop.multiProcessorCount, g_copy_bytes_per_us / 1e3, kN, kC, kBS);
  std::printf("| density | op us | floor us | x floor | warps | items / warp | start p50 / max | first data "
              "p10 / p50 / max | ramp p50 | ramp: past griddep_wait / items p50 | end min / p10 / p50 / p90 | "
              "walk span | op - span |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::vector<int> denominators;
  for (int i = 1; i < argc; ++i) denominators.push_back(std::atoi(argv[i]));
  if (denominators.empty()) denominators = {2, 4, 8, 16};
  for (int d : denominators) run(d, stream, prop.multiProcessorCount);
  std::printf("\nTimes in us from the walk's first warp start (one launch, %%globaltimer). 'op us': one op "
              "of a graph of back-to-back ops over rotated weight copies (the walk and its sum kernel).\n");
  std::printf("\nThe sum kernel of the same launch (one warp per output block column; times from the walk's "
              "first warp start):\n\n");
  std::printf("| density | walk span | sum warps' start p50 / max / released min | columns / cut | cut: pieces "
              "in p50 / max | cut: stores issued p50 / max | released - span | last store - span | op - last "
              "store |\n|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& row : g_sum_rows) std::printf("%s\n", row.c_str());
  std::printf("\nThe packed walk (whole columns per CTA, no sum kernel) against the even walk, A / B / A / B "
              "in the same harness; its outputs against the even walk's (max |diff| over max |y|; bf16 "
              "rounding of differently grouped fp32 sums: ~1e-2 at most):\n\n");
  std::printf("| density | CTA items max / mean | even op us | packed op us | packed / even | packed x floor | "
              "packed end min / p50 / max | op - span | non-finite outputs | max diff / max y |\n"
              "|---|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& row : g_packed_rows) std::printf("%s\n", row.c_str());
  std::printf("\nThe packed walk with its prologue depth staggered over the warps (k = 0: all issue their "
              "S - 1 stages at once; k: warp gw first issues 1 + gw %% k, then catches up two a step); op us, "
              "first data p10 / p50, ends p50 / max:\n\n");
  std::printf("| density | k 0 op | first data | ends | k 2 op | first data | ends | k 5 op | first data | ends |\n"
              "|---|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& row : g_stagger_rows) std::printf("%s\n", row.c_str());
  return 0;
}
