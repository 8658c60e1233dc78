// The dispatch's paths for few rows (N <= kStreamMaxRowsHost, memory-bound): the stream
// kernels of the forward and input gradient (one column per CTA, column groups, warp-
// specialized, and the even-split walks) and of the weight gradient, each with the rule
// that says when it serves a call, and their launches.
#pragma once

#include "common/launch.cuh"
#include "common/tma.cuh"
#include "matmul/bsmm_dw_panel_kernel.cuh"
#include "matmul/bsmm_stream_even_group_kernel.cuh"
#include "matmul/bsmm_stream_even_kernel.cuh"
#include "matmul/bsmm_stream_group_kernel.cuh"
#include "matmul/bsmm_stream_kernel.cuh"
#include "matmul/bsmm_stream_ws_kernel.cuh"
#include "matmul/launch_common.cuh"
#include "matmul/tile_major.cuh"

namespace jbs {

// Which variant of the small-N kernels: the 8-warp deep one (BIG) pays off when
// CTAs have long item lists (a lone CTA must pull a long column fast); with
// short lists the 4-warp, 3-CTAs-per-SM one wins (measured on an H200, see
// benchmarks/NOTES.md). JBS_STREAM_BIG=0/1 forces a variant (diagnostics).
inline int stream_big_env() { return env_switch("JBS_STREAM_BIG"); }  // read at every launch
inline bool stream_big(int64_t items, int64_t units) {
  const int env = stream_big_env();
  if (env >= 0) return env == 1;
  return units > 0 && items >= 32 * units;
}

// Whether the stream kernel reads a tile-major copy of the activation
// (matmul/tile_major.cuh), made first into the scratch result: by default where
// a tile row is less than a 32-byte sector (16-bit types at bs 8), and only if
// the lowering sized the scratch for it (jbs/_src/lowering.py, same rule).
// Measured on an H100 at N = 32, 12288^2 (benchmarks/NOTES.md, session 8): bs 8
// bf16 1.33-1.70x faster, copy included; bs 16 and 32 0-3 us slower (the copy's
// cost, no gain: whole-sector rows were not what bounded them).
// JBS_TILE_MAJOR=0/1 forces it off / on for every block size (diagnostics, tests;
// read at every launch, and by the lowering).
inline int tile_major_env() { return env_switch("JBS_TILE_MAJOR"); }

template <typename T, int BS>
bool use_tile_major(const BsmmBlocksArgs& a) {
  const int env = tile_major_env();
  if (env == 0 || a.scratch == nullptr || (env < 0 && BS * sizeof(T) >= 32)) return false;
  const int64_t need = stream_tile_major_offset(a.rows, a.groups, a.n_split, BS) +
                       tile_major_bytes_host(input_groups(a), a.rows, a.in_cols, sizeof(T));
  return a.scratch_bytes >= need;
}

template <typename T, int BS, bool TRANS, int TN, bool PRECISE, bool BIG>
cudaError_t launch_stream_variant(const BsmmBlocksArgs& a, cudaStream_t stream) {
  using Cfg = StreamConfig<T, BS, TRANS, TN, BIG>;
  StreamParams p;
  fill_stream_operands(p, a);
  p.chunks = reinterpret_cast<const int4*>(a.chunks);
  p.splits = a.splits;
  if (use_tile_major<T, BS>(a)) {
    T* tiled = reinterpret_cast<T*>(static_cast<unsigned char*>(a.scratch) +
                                    stream_tile_major_offset(a.rows, a.groups, a.n_split, BS));
    cudaError_t err = launch_tile_major<T>(static_cast<const T*>(a.in), tiled, input_groups(a), a.rows, a.in_cols,
                                           BS, a.num_sms, stream);
    if (err != cudaSuccess) return err;
    p.in = tiled;
    p.in_tile_stride = a.rows * BS;
    p.in_ld = BS;  // in_group_stride (rows * in_cols or 0) is unchanged
  }
  p.n_split = static_cast<int>(a.n_split);
  p.counters = nullptr;
  p.partials = nullptr;
  if (a.n_split > 0) {
    const int64_t counters = (a.groups * a.n_split + 3) / 4 * 4;
    p.counters = static_cast<int*>(a.scratch);
    p.partials = static_cast<float*>(a.scratch) + counters;
    const int64_t count = a.groups * a.n_split;
    cudaError_t err = launch_zero_counters(p.counters, count, stream);
    if (err != cudaSuccess) return err;
  }
  const dim3 grid(static_cast<unsigned>(a.num_chunks), static_cast<unsigned>(a.groups));
  return launch_kernel(bsmm_stream_kernel<T, BS, TRANS, TN, PRECISE, BIG>, grid, dim3(Cfg::kThreads),
                       Cfg::kSmemBytes, stream, p);
}

// Whether the small-N column-group kernel (bsmm_stream_group_kernel.cuh) serves
// this call instead of the one-column stream kernel: when each activation tile
// it loads feeds enough blocks (reuse = nnz / union items), and the lowering
// sized the scratch result for its partials (jbs/_src/lowering.py applies the
// same rule: keep min_stream_group_reuse in sync). JBS_STREAM_GROUPS=0/1 forces
// it off / on (diagnostics, tests; read at every launch, and by the lowering).
inline int stream_groups_env() { return env_switch("JBS_STREAM_GROUPS"); }

// Measured on an H100 at N = 32, 12288^2 (benchmarks/NOTES.md, session 8), against
// the one-column kernel: reuse 4 (bs 16 at 1/2, bs 32 dense) 1.13-1.22x faster;
// bs 32 at reuse 2.1 (1/2) 0.87x, bs 16 at 1.5 (1/8) 0.51x; bs 8 slower at every
// density (0.83x at reuse 8); bs 64 reaches at most 2.
inline double min_stream_group_reuse(int bs) { return bs == 16 || bs == 32 ? 3.5 : 1e9; }

template <typename T, int BS>
bool use_stream_groups(const BsmmBlocksArgs& a) {
  const int env = stream_groups_env();
  if (env == 0 || a.gathered || a.group_items == nullptr || a.group_width != 128 / BS || a.num_group_items <= 0 ||
      a.scratch == nullptr || a.num_groups * 16 > 0x7fffffff) {
    return false;
  }
  const int slices = stream_group_slices(a.num_group_items, a.num_groups);
  if (a.scratch_bytes < stream_group_scratch_bytes(a.groups, a.num_groups, slices, stream_row_tile_host(a.rows))) {
    return false;
  }
  const double reuse = static_cast<double>(a.nnz) / static_cast<double>(a.num_group_items);
  return env == 1 || reuse >= min_stream_group_reuse(BS);
}

template <typename T, int BS, bool TRANS, int TN, bool PRECISE>
cudaError_t launch_stream_group_variant(const BsmmBlocksArgs& a, cudaStream_t stream) {
  using Cfg = StreamGroupConfig<T, BS, TRANS, TN>;
  StreamGroupParams p;
  static_cast<GroupParams&>(p) = group_params(a);
  p.slices = stream_group_slices(a.num_group_items, a.num_groups);
  const int64_t tiles = a.groups * a.num_groups;
  p.counters = static_cast<int*>(a.scratch);
  p.partials = static_cast<float*>(a.scratch) + (tiles + 3) / 4 * 4;
  if (p.slices > 1) {
    cudaError_t err = launch_zero_counters(p.counters, tiles, stream);
    if (err != cudaSuccess) return err;
  }
  // use_stream_groups checked num_groups * 16 < 2^31; the handlers, groups <= 65535.
  const dim3 grid(static_cast<unsigned>(a.num_groups * p.slices), static_cast<unsigned>(a.groups));
  return launch_kernel(bsmm_stream_group_kernel<T, BS, TRANS, TN, PRECISE>, grid, dim3(Cfg::kThreads),
                       Cfg::kSmemBytes, stream, p);
}

// Whether the warp-specialized small-N group kernel (bsmm_stream_ws_kernel.cuh)
// serves this call: sm_90 only (mbarrier waits), when the lowering reserved its
// scratch (jbs/_src/lowering.py: _stream_ws_scratch_floats, same layout as
// stream_ws_counter_ints / stream_ws_max_ctas). JBS_STREAM_WS=0/1 forces it off / on
// (read at every launch, and by the lowering).
inline int stream_ws_env() { return env_switch("JBS_STREAM_WS"); }

// Scratch of the kernel: (groups, num_groups, consumers) int counters, padded to
// 4, then (groups, num_groups + CTAs, TN, 128) fp32 partials.
inline int64_t stream_ws_counter_ints(int64_t groups, int64_t num_groups) {
  return (groups * num_groups * kStreamWsConsumers + 3) / 4 * 4;
}
// The most CTAs whose partial slots fit the scratch result (< 1: none).
inline int64_t stream_ws_max_ctas(const BsmmBlocksArgs& a, int64_t row_tile) {
  const int64_t floats = a.scratch_bytes / 4 - stream_ws_counter_ints(a.groups, a.num_groups);
  return floats / (a.groups * row_tile * 128) - a.num_groups;
}

// Where it is taken by default (measured on an H100 at N = 32, 12288^2, against the
// one-column kernel, benchmarks/NOTES.md, session 10): fp32 at bs 32 and density 1/2
// (reuse = nnz / union items 2.1) fwd 1.16x faster, dx 1.0x; bf16 bs 32 0.96-1.0x at
// densities 1 and 1/2, and 0.3-0.7x at 1/8 and below, bs 8 / 16 slower everywhere.
// On an H200 (session 40, fp32 bs 32, same shape) the one-column kernel won at density 1/2
// (fwd 98.6 against 117.8 us, dx 100.1 against 116.0) and this one at density 1 (reuse 4:
// 171.7 against 218.6 us of the column-group kernel, dx 183.9 against 225.1): so from reuse 3
// on GPUs with more than kStreamWsFastMemory of HBM bandwidth. jbs/_src/lowering.py reserves
// the scratch from reuse 2 (a superset: an unused reservation costs only the room).
inline constexpr int min_stream_ws_fp32_block = 32;
inline constexpr double kStreamWsFastMemory = 4e12;  // bytes / s: above an H100's, below an H200's
inline double min_stream_ws_reuse() { return device_peak_memory_bytes_per_s() > kStreamWsFastMemory ? 3.0 : 2.0; }

template <typename T, int BS>
bool use_stream_ws(const BsmmBlocksArgs& a) {
  const int env = stream_ws_env();
  if (env == 0 || a.gathered || a.group_items == nullptr || a.group_offsets == nullptr ||
      a.group_width != 128 / BS || a.scratch == nullptr || a.num_groups < 1 ||
      a.num_groups > kStreamWsMaxGroups || a.num_group_items * (1 + 128 / BS) >= 0x7fffffff ||
      !device_is_sm90()) {
    return false;
  }
  if (stream_ws_max_ctas(a, stream_row_tile_host(a.rows)) < 1) return false;
  const double reuse = static_cast<double>(a.nnz) / static_cast<double>(a.num_group_items);
  return env == 1 || (sizeof(T) == 4 && BS == min_stream_ws_fp32_block && reuse >= min_stream_ws_reuse());
}

template <typename T, int BS, bool TRANS, int TN, bool PRECISE>
cudaError_t launch_stream_ws_variant(const BsmmBlocksArgs& a, cudaStream_t stream) {
  using Cfg = StreamWsConfig<T, BS, TRANS, TN>;
  const auto kernel = bsmm_stream_ws_kernel<T, BS, TRANS, TN, PRECISE>;
  // Opt in once for the largest group table, so a later call with more groups fits.
  cudaError_t err = opt_in_smem(reinterpret_cast<const void*>(kernel), Cfg::smem_bytes(kStreamWsMaxGroups));
  if (err != cudaSuccess) return err;
  StreamWsParams p;
  static_cast<GroupParams&>(p) = group_params(a);
  int64_t ctas = a.num_group_items < a.num_sms ? a.num_group_items : a.num_sms;
  const int64_t room = stream_ws_max_ctas(a, TN);
  ctas = ctas < room ? ctas : room;
  p.num_ctas = static_cast<int>(ctas < 1 ? 1 : ctas);
  p.num_entries = static_cast<int>(a.num_group_items);
  const int64_t counters = stream_ws_counter_ints(a.groups, a.num_groups);
  p.counters = static_cast<int*>(a.scratch);
  p.partials = static_cast<float*>(a.scratch) + counters;
  if (p.num_ctas > 1) {
    err = launch_zero_counters(p.counters, counters, stream);
    if (err != cudaSuccess) return err;
  }
  const dim3 grid(static_cast<unsigned>(p.num_ctas), static_cast<unsigned>(a.groups));
  return launch_kernel(kernel, grid, dim3(Cfg::kThreads), Cfg::smem_bytes(a.num_groups), stream, p);
}

// Whether the even-split small-N kernel (bsmm_stream_even_kernel.cuh) serves this
// call: sm_90 (bulk copies, mbarriers), blocks of 16 to 64, at most
// kStreamEvenMaxCols output columns, not fp32 at HIGHEST (its 3xTF32 sums would
// run a whole column into one accumulator), and only if the lowering reserved
// its scratch (jbs/_src/lowering.py: _stream_even_scratch_floats, same rule).
// JBS_STREAM_EVEN=1 forces it, =0 disables it (read at every launch, and by the
// lowering). By default it takes 16-bit types at bs 16 and 32 with at least
// kStreamEvenMinBytes of weights: there it beat the one-column kernel under
// jbs-bench on an H100 (bf16 bs 32 fwd at density 1/2 70.9 vs 88.5 us, 1/8
// 25.9 vs 27.6; bs 16 1/8 41.7 vs 51.2), where each of its 1056 warps streams
// >= ~24 KiB. Below that its fixed costs (pipeline fill, cut columns, the sum
// launch) lose (1/16: 17.7 vs 15.6); fp32 (no bulk copies) gained <= 7% fwd and
// lost dx; bs 64 (4 warps per CTA) was not measured (benchmarks/NOTES.md,
// session 12).
// fp32 takes it with its swizzled tiles at bs 32 and N <= 32 from kStreamEvenMinBytesF32, where
// the warp-specialized kernel does not (use_stream_ws: reuse >= 3 on an H200). On an H200 at
// the seed shape, N = 32, against the one-column kernel (benchmarks/NOTES.md, session 62), us:
// density 1/2 fwd 104.0 -> 101.5, dx 101.7 -> 95.3; 1/4 57.5 -> 56.5, 56.9 -> 54.0; 1/8 level;
// 1/16 (37.7 MB) 21.6 -> 24.5, 22.5 -> 24.1 (the copy and the sum launch); density 1 fwd 176 ->
// 205 against the warp-specialized kernel.
inline constexpr int64_t kStreamEvenMinBytes = int64_t(24) << 20;
inline constexpr int64_t kStreamEvenMinBytesF32 = int64_t(48) << 20;
inline int stream_even_env() { return env_switch("JBS_STREAM_EVEN"); }

// Whether the walk takes its tiles swizzled (bsmm_stream_even_kernel.cuh: SWIZZLED): 16-bit
// types at any of its block sizes and fp32 at bs 32 (kStreamEvenSwizzleSupported), unless
// JBS_STREAM_EVEN_SWIZZLE=0 (read at every launch, and by the lowering).
inline int stream_even_swizzle_env() { return env_switch("JBS_STREAM_EVEN_SWIZZLE"); }
template <typename T>
bool stream_even_swizzled(int block_size) {
  return (kIs16Bit<T> || block_size == 32) && stream_even_swizzle_env() != 0;
}

// Whether the swizzled 16-bit walk reads its tiles straight from `in` by TMA boxes of the
// tile's own rows (bsmm_stream_even_kernel.cuh: DIRECT_TILES; the default) instead of from a
// tile-major copy, a kernel ahead of the walk (2.6 us at the seed shape). Without it the bf16
// bs 32 seed shape took 1.02-1.06x longer at densities 1/2 to 1/8 (benchmarks/NOTES.md,
// session 63). JBS_STREAM_EVEN_DIRECT_TILES=0 keeps the copy; so does an operand TMA cannot
// address (encode_activation_tiles_map), for which the scratch keeps the copy's room.
inline bool stream_even_direct_tiles() { return env_switch("JBS_STREAM_EVEN_DIRECT_TILES") != 0; }

// Bytes of the swizzled walk's tile-major copy of `in` (row_tile rows per tile), at the
// start of the scratch, 256-byte aligned; 0 for the other walk.
template <typename T>
int64_t stream_even_tiled_bytes(const BsmmBlocksArgs& a, int64_t row_tile) {
  if (!stream_even_swizzled<T>(a.block_size)) return 0;
  return (input_groups(a) * a.in_cols * row_tile * int64_t(sizeof(T)) + 255) / 256 * 256;
}

// Scratch of the kernel: the tiled copy (swizzled walk), then (groups, 2 * warps,
// row_tile * bs) fp32 pieces. The most warps whose piece slots fit the scratch
// result (< 1: none).
template <typename T>
int64_t stream_even_max_warps(const BsmmBlocksArgs& a, int64_t row_tile) {
  const int64_t room = a.scratch_bytes - stream_even_tiled_bytes<T>(a, row_tile);
  return room < 0 ? 0 : room / 4 / (a.groups * 2 * row_tile * a.block_size);
}

// The packed walk (bsmm_stream_even_kernel.cuh: PACKED, even_packing below) was built in session
// 68 without a GPU and has not run yet, so it is taken only with JBS_STREAM_EVEN_PACKED=1 (read at
// every launch, and by the lowering; benchmarks/NOTES.md, session 68: the measurement that
// decides its default). With it, the swizzled walks take every call whose table came packed for
// this GPU's SMs, whatever its bytes: with no sum kernel behind it, the walk is predicted to beat
// the one-column kernel at low density too (a round of stages per warp instead of a chain per column).
inline int stream_even_packed_env() { return env_switch("JBS_STREAM_EVEN_PACKED"); }

// Whether the call came with a packing for this GPU that JBS_STREAM_EVEN_PACKED=1 asks for, and
// the scratch has room for 8 warps' pieces per CTA (the most the walk has).
template <typename T>
bool packing_offered(const BsmmBlocksArgs& a) {
  return a.packed != nullptr && a.packed_ctas == a.num_sms && stream_even_packed_env() == 1 &&
         int64_t(8) * a.packed_ctas <= stream_even_max_warps<T>(a, stream_row_tile_host(a.rows));
}

template <typename T, int BS>
bool use_stream_even(const BsmmBlocksArgs& a) {
  const int env = stream_even_env();
  if (env == 0 || BS < 16 || a.gathered || (a.precise && sizeof(T) == 4) || a.offsets == nullptr ||
      a.items == nullptr || a.scratch == nullptr || a.nnz < 1 || a.out_cols / BS > kStreamEvenMaxCols ||
      stream_even_max_warps<T>(a, stream_row_tile_host(a.rows)) < 1 || !device_is_sm90()) {
    return false;
  }
  if (env == 1) return true;
  const int64_t bytes = a.nnz * BS * BS * int64_t(sizeof(T));
  const bool packed = kStreamEvenSwizzleSupported<T, BS> && stream_even_swizzled<T>(BS) && packing_offered<T>(a);
  if constexpr (kIs16Bit<T>) {
    return BS <= 32 && (bytes >= kStreamEvenMinBytes || packed);
  } else {
    return BS == 32 && a.rows <= 32 && (bytes >= kStreamEvenMinBytesF32 || packed) && stream_even_swizzled<T>(BS) &&
           !use_stream_ws<T, BS>(a);
  }
}

// Launches an even-split walk (one CTA per SM slot, no more warps than the
// `items` it cuts or than the scratch has `room` for) over p, then its sum
// kernel, one warp per output column. With `early_sum` the sum kernel is
// launched early (launch_kernel_after; the walk must call
// griddep_launch_dependents): its CTAs sit beside the walk's and start summing
// when the walk completes. On an H100 that took 1.0-1.3 us off the one-column
// walk's calls (bf16 bs 32 at the seed shape, 1/4: 42.7 -> 41.3 us) and cost the
// group walk (bs 16) ~1.5% (benchmarks/NOTES.md, session 36), which therefore
// launches its sum kernel the ordinary way.
// With `walk_after` the walk itself is launched early behind the kernel ahead of it
// (which must be the walk's producer: it calls griddep_wait before reading). The
// pieces start `pieces_offset` bytes into the scratch.
template <typename Cfg, typename Walk, typename Sum>
cudaError_t launch_even_split(const BsmmBlocksArgs& a, StreamEvenParams& p, int64_t items, int64_t room, Walk walk,
                              Sum sum, bool early_sum, cudaStream_t stream, int64_t pieces_offset = 0,
                              bool walk_after = false) {
  p.num_items = static_cast<int>(items);
  int64_t warps = static_cast<int64_t>(a.num_sms) *
                  resident_ctas_per_sm(Cfg::kThreads, Cfg::kSmemBytes + Cfg::kStaticSmemBytes) * Cfg::kWarps;
  warps = warps < items ? warps : items;
  warps = warps < room ? warps : room;
  p.num_warps = static_cast<int>(warps);
  p.pieces = reinterpret_cast<float*>(static_cast<unsigned char*>(a.scratch) + pieces_offset);
  const dim3 grid(static_cast<unsigned>((warps + Cfg::kWarps - 1) / Cfg::kWarps), static_cast<unsigned>(a.groups));
  cudaError_t err = walk_after ? launch_kernel_after(walk, grid, dim3(Cfg::kThreads), Cfg::kSmemBytes, stream, p)
                               : launch_kernel(walk, grid, dim3(Cfg::kThreads), Cfg::kSmemBytes, stream, p);
  if (err != cudaSuccess) return err;
  const int64_t out_blocks = a.out_cols / a.block_size;
  const dim3 sum_grid(static_cast<unsigned>((out_blocks + 3) / 4), static_cast<unsigned>(a.groups));
  return early_sum ? launch_kernel_after(sum, sum_grid, dim3(128), 0, stream, p)
                   : launch_kernel(sum, sum_grid, dim3(128), 0, stream, p);
}

// Launches a PACKED even walk (bsmm_stream_even_kernel.cuh): one CTA per packed CTA, over the
// packing's reordered table, and no sum kernel. The pieces start `pieces_offset` bytes into the
// scratch, which must have `room` for the CTAs' warps. `walk_after`: as launch_even_split's.
template <typename Cfg, typename Walk>
cudaError_t launch_even_packed(const BsmmBlocksArgs& a, StreamEvenParams& p, const EvenPacking& packing,
                               int64_t room, Walk walk, cudaStream_t stream, int64_t pieces_offset,
                               bool walk_after = false) {
  if (packing.ctas < 1 || static_cast<int64_t>(packing.ctas) * Cfg::kWarps > room) return cudaErrorInvalidValue;
  p.offsets = packing.offsets;
  p.items = packing.items;
  p.cta_items = packing.cta_items;
  p.columns = packing.columns;
  p.num_items = static_cast<int>(a.nnz);
  p.num_warps = packing.ctas * Cfg::kWarps;
  p.pieces = reinterpret_cast<float*>(static_cast<unsigned char*>(a.scratch) + pieces_offset);
  const dim3 grid(static_cast<unsigned>(packing.ctas), static_cast<unsigned>(a.groups));
  return walk_after ? launch_kernel_after(walk, grid, dim3(Cfg::kThreads), Cfg::kSmemBytes, stream, p)
                    : launch_kernel(walk, grid, dim3(Cfg::kThreads), Cfg::kSmemBytes, stream, p);
}

// The swizzled walk: 16-bit types read their tiles straight from `in` (stream_even_direct_tiles);
// otherwise the tile-major copy of `in` (TN rows per tile, zero-padded) goes into the start of
// the scratch and the walk is launched early behind it; then the sums. False in *launched where
// the tensor maps cannot be made (the caller takes the other walk).
// With a `packing` the walk is PACKED.
template <typename T, int BS, bool TRANS, int TN>
cudaError_t launch_stream_even_swizzled(const BsmmBlocksArgs& a, StreamEvenParams& p, cudaStream_t stream,
                                        bool* launched, const EvenPacking* packing = nullptr) {
  using Cfg = StreamEvenConfig<T, BS, TRANS, TN, /*SWIZZLED=*/true>;
  *launched = false;
  const int64_t tiled_bytes = stream_even_tiled_bytes<T>(a, TN);
  const int64_t in_group_rows = a.in_cols * TN * int64_t(sizeof(T)) / 128;
  const int64_t in_rows = input_groups(a) * in_group_rows;
  const int64_t w_group_rows = a.w_group_stride * int64_t(sizeof(T)) / 128;
  const int64_t w_rows = (weight_groups(a) - 1) * w_group_rows + a.nnz * Cfg::kWRows;
  // The kernel's row coordinates are ints.
  if (in_rows >= (int64_t(1) << 31) || w_rows >= (int64_t(1) << 31) ||
      (a.w_group_stride * int64_t(sizeof(T))) % 128 != 0) {
    return cudaSuccess;
  }
  if (!encode_swizzled_rows_map(&p.w_map, a.w, w_rows, Cfg::kWRows)) return cudaSuccess;
  p.w_group_rows = static_cast<int>(w_group_rows);
  if constexpr (kIs16Bit<T>) {
    // The tiles straight from `in` (rows past a.rows read as zeros, as the copy pads them).
    if (stream_even_direct_tiles() &&
        encode_activation_tiles_map(&p.in_map, a.in, input_groups(a), a.rows, a.in_cols, a.in_cols,
                                    a.in_group_stride, TN, BS)) {
      p.in_group_rows = a.in_group_stride == 0 ? 0 : 1;  // the box's group coordinate per group
      *launched = true;
      if (packing != nullptr) {
        return launch_even_packed<StreamEvenConfig<T, BS, TRANS, TN, true, /*DIRECT_TILES=*/true>>(
            a, p, *packing, stream_even_max_warps<T>(a, TN),
            bsmm_stream_even_kernel<T, BS, TRANS, TN, /*PRECISE=*/false, /*SWIZZLED=*/true, /*DIRECT_TILES=*/true,
                                    /*PACKED=*/true>,
            stream, tiled_bytes);
      }
      return launch_even_split<StreamEvenConfig<T, BS, TRANS, TN, true, /*DIRECT_TILES=*/true>>(
          a, p, a.nnz, stream_even_max_warps<T>(a, TN),
          bsmm_stream_even_kernel<T, BS, TRANS, TN, /*PRECISE=*/false, /*SWIZZLED=*/true, /*DIRECT_TILES=*/true>,
          bsmm_stream_even_sum_kernel<T, BS, TN, 1, 0>, /*early_sum=*/true, stream, tiled_bytes);
    }
  }
  T* tiled = static_cast<T*>(a.scratch);
  if (!encode_swizzled_rows_map(&p.in_map, tiled, in_rows, Cfg::kXRows)) return cudaSuccess;
  p.in_group_rows = a.in_group_stride == 0 ? 0 : static_cast<int>(in_group_rows);
  *launched = true;
  cudaError_t err = launch_tile_major<T>(static_cast<const T*>(a.in), tiled, input_groups(a), a.rows, a.in_cols, BS,
                                         a.num_sms, stream, TN, /*round_tf32=*/Cfg::kTf32Tiles);
  if (err != cudaSuccess) return err;
  if (packing != nullptr) {
    return launch_even_packed<Cfg>(
        a, p, *packing, stream_even_max_warps<T>(a, TN),
        bsmm_stream_even_kernel<T, BS, TRANS, TN, /*PRECISE=*/false, /*SWIZZLED=*/true, /*DIRECT_TILES=*/false,
                                /*PACKED=*/true>,
        stream, tiled_bytes, /*walk_after=*/true);
  }
  return launch_even_split<Cfg>(a, p, a.nnz, stream_even_max_warps<T>(a, TN),
                                bsmm_stream_even_kernel<T, BS, TRANS, TN, /*PRECISE=*/false, /*SWIZZLED=*/true>,
                                bsmm_stream_even_sum_kernel<T, BS, TN, 1, 0, Cfg::kHalves>, /*early_sum=*/true, stream,
                                tiled_bytes, /*walk_after=*/true);
}

// Whether the packed walk (bsmm_stream_even_kernel.cuh: PACKED) serves this call, and its
// packing from the table the lowering passed (BsmmBlocksArgs::packed): the swizzled walks (its
// only variants: 16-bit types, fp32 at bs 32), built for this GPU's SM count, and the scratch
// has room for every warp's pieces (packing_offered, then the walk's own warps).
template <typename T, int BS, bool TRANS, int TN>
bool even_packing(const BsmmBlocksArgs& a, EvenPacking* packing) {
  if constexpr (!kStreamEvenSwizzleSupported<T, BS>) {
    return false;
  } else {
    using Cfg = StreamEvenConfig<T, BS, TRANS, TN, /*SWIZZLED=*/true>;
    if constexpr (kIs16Bit<T>) {
      static_assert(Cfg::kWarps == StreamEvenConfig<T, BS, TRANS, TN, true, /*DIRECT_TILES=*/true>::kWarps,
                    "the walk with its tiles straight from `in` has the same warps");
    }
    if (!packing_offered<T>(a) || !stream_even_swizzled<T>(BS) ||
        static_cast<int64_t>(a.packed_ctas) * Cfg::kWarps > stream_even_max_warps<T>(a, TN)) {
      return false;
    }
    const int64_t segments = a.out_cols / BS;
    packing->items = a.packed;
    packing->offsets = a.packed + packed_items_ints(a.nnz);
    packing->columns = packing->offsets + segments + 1;
    packing->cta_items = packing->columns + segments;
    packing->ctas = a.packed_ctas;
    return true;
  }
}

// `packing`: the PACKED walk's (launch_stream_even_swizzled); by default the one even_packing
// finds in the arguments, if any (benchmarks/microbench/walk_timeline.cu passes its own).
template <typename T, int BS, bool TRANS, int TN>
cudaError_t launch_stream_even_variant(const BsmmBlocksArgs& a, cudaStream_t stream,
                                       const EvenPacking* packing = nullptr) {
  EvenPacking found;
  if (packing == nullptr && even_packing<T, BS, TRANS, TN>(a, &found)) packing = &found;
  using Cfg = StreamEvenConfig<T, BS, TRANS, TN>;
  const auto kernel = bsmm_stream_even_kernel<T, BS, TRANS, TN, /*PRECISE=*/false>;
  StreamEvenParams p{};
  fill_stream_operands(p, a);
  p.offsets = a.offsets;
  p.num_segments = static_cast<int>(a.out_cols / BS);
  if constexpr (kStreamEvenSwizzleSupported<T, BS>) {
    if (stream_even_swizzled<T>(BS)) {
      bool launched = false;
      cudaError_t err = launch_stream_even_swizzled<T, BS, TRANS, TN>(a, p, stream, &launched, packing);
      if (launched || err != cudaSuccess) return err;
    }
  }
  // (the swizzled walk's room for its copy stays unused here)
  return launch_even_split<Cfg>(a, p, a.nnz, stream_even_max_warps<T>(a, TN), kernel,
                                bsmm_stream_even_sum_kernel<T, BS, TN, 1, 0>, /*early_sum=*/true, stream,
                                stream_even_tiled_bytes<T>(a, TN));
}

// Whether the even-split kernel over column groups (bsmm_stream_even_group_kernel.cuh)
// serves this call: sm_90, 16-bit types at bs 8, 16 and 32, N <= 32, the large-N
// group tables (width 128 / bs) passed, at most kStreamEvenGroupMaxGroups groups,
// and only if the lowering reserved its scratch (jbs/_src/lowering.py:
// _stream_even_group_scratch_floats, same rule). JBS_STREAM_EVEN_GROUP=1 forces
// it, =0 disables it. By default it takes calls with at least
// kStreamEvenGroupMinBytes of weights whose union items carry enough blocks
// each (reuse = nnz / union items). Measured against the default kernels at the
// seed shape on an H100 (benchmarks/NOTES.md, session 13), bf16 fwd us:
//   bs 16: density 1 120 vs 256, 1/2 72 vs 131, 1/4 55 vs 73, 1/8 40 vs 42,
//          1/16 (reuse 1.24) 29 vs 31, 1/32 (reuse 1.12) 24 vs 15;
//   bs 8: density 1 (reuse 16) 183 vs 284, 1/2 (reuse 8) 137 vs 147, 1/4
//          (reuse 4.3) 115 vs 79: its per-item cost is still ~2x bs 16's.
// At bs 32 (6 warps of 3 stages) on an H200 (session 40) against the one-column even walk,
// bf16 us at N = 32 / 16: density 1 (reuse 4) fwd 92 vs 114 / 87 vs 91, dx 94 vs 113 / 89 vs
// 89; 1/2 (reuse 2.1) 60 vs 61 / 53 vs 49; 1/4 and below 1.15-1.5x slower (fewer items in
// flight than the one-column walk's 8 warps of 5 stages, each with fewer blocks to feed).
// At bs 16 on an H200 against the one-column walk with swizzled tiles (session 61), bf16 fwd /
// dx us at N = 32: density 1/4 (reuse 2.2) 55.6 vs 58.8 / 61.4 vs 59.1, 1/8 (reuse 1.5) 41.5 vs
// 34.0 / 43.7 vs 33.8, 1/16 (reuse 1.24) 29.9 vs 29.1 / 31.2 vs 29.3: from reuse 2 (was 1.2).
inline constexpr int64_t kStreamEvenGroupMinBytes = int64_t(16) << 20;
inline double stream_even_group_min_reuse(int bs) { return bs == 8 ? 7.0 : (bs == 16 ? 2.0 : 3.0); }
inline int stream_even_group_env() { return env_switch("JBS_STREAM_EVEN_GROUP"); }

// Scratch of the kernel: (groups, 2 * warps, row_tile * 128) fp32 pieces.
inline int64_t stream_even_group_max_warps(const BsmmBlocksArgs& a, int64_t row_tile) {
  return a.scratch_bytes / 4 / (a.groups * 2 * row_tile * 128);
}

template <typename T, int BS>
bool use_stream_even_group(const BsmmBlocksArgs& a) {
  const int env = stream_even_group_env();
  if (env == 0 || !kIs16Bit<T> || BS > 32 || a.gathered || a.rows > 32 ||
      a.group_offsets == nullptr || a.group_items == nullptr || a.group_width != 128 / BS ||
      a.num_group_items < 1 || a.num_groups > kStreamEvenGroupMaxGroups || a.scratch == nullptr ||
      stream_even_group_max_warps(a, stream_row_tile_host(a.rows)) < 1 || !device_is_sm90()) {
    return false;
  }
  const double reuse = static_cast<double>(a.nnz) / static_cast<double>(a.num_group_items);
  return env == 1 || (reuse >= stream_even_group_min_reuse(BS) &&
                       a.nnz * BS * BS * int64_t(sizeof(T)) >= kStreamEvenGroupMinBytes);
}

template <typename T, int BS, bool TRANS, int TN>
cudaError_t launch_stream_even_group_variant(const BsmmBlocksArgs& a, cudaStream_t stream) {
  using Cfg = StreamEvenGroupConfig<T, BS, TRANS, TN>;
  const auto kernel = bsmm_stream_even_group_kernel<T, BS, TRANS, TN>;
  StreamEvenParams p;
  fill_stream_operands(p, a);
  p.offsets = a.group_offsets;
  p.items = a.group_items;
  p.num_segments = static_cast<int>(a.num_groups);
  return launch_even_split<Cfg>(a, p, a.num_group_items, stream_even_group_max_warps(a, TN), kernel,
                                bsmm_stream_even_sum_kernel<T, BS, TN, Cfg::P, Cfg::kWarps>, /*early_sum=*/false,
                                stream);
}

template <typename T, int BS, int TN, bool PRECISE, bool BIG, bool STAGED = false, bool SWIZZLED = false>
cudaError_t launch_dw_stream_variant(const BsmmDwArgs& a, cudaStream_t stream) {
  using Cfg = DwStreamConfig<T, BS, TN, BIG, STAGED, SWIZZLED>;
  DwStreamParams p;
  fill_dw_operands(p, a);
  p.items = a.items;
  // Each warp takes a run of 1..32 consecutive blocks, sized so that the grid
  // is a whole number of waves of resident CTAs (groups included): with a cap
  // of 32 per warp and no rounding, the 1/2 and 1/4 seed cases ran 2.2 and 2.9
  // waves, the last one mostly idle (benchmarks/NOTES.md).
  const int64_t slots = static_cast<int64_t>(a.num_sms) *
                        resident_ctas_per_sm(Cfg::kThreads, Cfg::kSmemBytes) * Cfg::kWarps;
  const int64_t total = a.nnz * a.groups;
  const int64_t per_slot = (total + slots - 1) / slots;  // items per warp in one wave
  const int64_t waves = (per_slot + 31) / 32;
  int64_t ipw = (per_slot + waves - 1) / waves;
  ipw = ipw < 1 ? 1 : (ipw > 32 ? 32 : ipw);
  p.items_per_warp = static_cast<int>(ipw);
  const int64_t per_cta = ipw * Cfg::kWarps;
  const dim3 grid(static_cast<unsigned>((a.nnz + per_cta - 1) / per_cta),
                  static_cast<unsigned>(a.groups));
  return launch_kernel(bsmm_dw_stream_kernel<T, BS, TN, PRECISE, BIG, STAGED, SWIZZLED>, grid,
                       dim3(Cfg::kThreads), Cfg::kSmemBytes, stream, p);
}

// Whether the small-N dw kernel writes its blocks through staging blocks in the output type
// (DwStreamConfig's STAGED, staged_block_store.cuh), on sm_90: bs 32 (fp32: N <= 32) and 16-bit
// types at bs 16. Measured on an H100 (benchmarks/NOTES.md, sessions 26 and 27), seed shape
// bf16, N = 32: with bulk copies, bs 32 1.24-1.40x faster than the fp32 staging at densities 1
// to 1/16 (1/2: 95.3 -> 70.6 us), the 16-bit lane stores of session 27 another 1.03-1.06x; at
// bs 16 bulk copies were 5-8% slower than the fp32 staging, lane stores 1.15x faster at 1/32
// and 1.2-1.6x at 1/64 (the panel kernel takes bs 16 from 1/16 up). fp32 at bs 16 takes it
// too since its staging is swizzled (session 60). JBS_DW_STAGED=0 keeps the fp32 staging
// everywhere.
template <typename T, int BS, int TN>
constexpr bool kDwStagedSupported = (BS == 16 || BS == 32) && (kIs16Bit<T> || TN <= 32);

template <typename T, int BS, int TN>
bool use_dw_staged() {
  if (!kDwStagedSupported<T, BS, TN> || !device_is_sm90()) return false;
  const int env = env_switch("JBS_DW_STAGED");
  return env != 0;
}

// Whether the small-N dw panel kernel (matmul/bsmm_dw_panel_kernel.cuh) runs: 16-bit types,
// bs 16 and 32, N <= 32, sm_90, and the panel tables present. It pays where a block row's run
// of blocks inside one panel is long enough to amortise the run's x tile and the CTA's panel
// load (session 27, seed shape N = 32, A-B against the stream kernel): at bs 16, whose stream
// kernel is bound by its per-block cost, from 4 blocks per run on (1.04x at 4, 1.15x at 8,
// 1.24-1.38x at 16 to 64; 18-24% slower at 1-2); at bs 32, whose stream kernel has the bulk
// epilogue and is L2-bound, only near full panels (1.12x at 32 blocks, within noise at 16,
// 5-25% slower at 2-8). benchmarks/NOTES.md, session 27. On an H200 with both kernels' staging
// swizzled, bs 32 gained from 16 blocks a run (session 60), but not against the stream
// kernel's swizzled tiles (session 61).
// Default for the measured 32-row tile; JBS_DW_PANEL=0 turns it off, =1 forces it.
template <typename T, int BS, int TN>
constexpr bool kDwPanelSupported = kIs16Bit<T> && (BS == 16 || BS == 32) && TN <= 32;

template <typename T, int BS, int TN>
bool use_dw_panel(const BsmmDwArgs& a) {
  if (!kDwPanelSupported<T, BS, TN> || a.panel_items == nullptr || a.num_panels < 1 || !device_is_sm90()) {
    return false;
  }
  const int env = env_switch("JBS_DW_PANEL");
  if (env >= 0) return env == 1;
  const int64_t runs = static_cast<int64_t>(a.num_panels) * (a.x_cols / BS);  // (panel, block row) pairs
  // bs 32: at 16 blocks a run (the seed shape at density 1/2) the panel kernel was 1.08x faster
  // than the stream kernel on an H200 (session 60), but 1.035x slower than the stream kernel
  // with swizzled tiles (50.7 against 52.5 us, session 61), which it still beats at 32 blocks
  // (density 1: 88 against 94 us): back to the H100's 24.
  const int64_t min_blocks_per_run = BS == 16 ? 4 : 24;
  return TN == 32 && a.nnz >= min_blocks_per_run * runs;
}

// Whether the staged small-N dw takes its tiles unpadded and swizzled (DwStreamConfig's
// SWIZZLED): by default; JBS_DW_SWIZZLE=0 keeps the padded tiles. At the seed shape on an
// H200 (benchmarks/NOTES.md, sessions 60-61): fp32 bs 32 1.04-1.1x (3 stages a warp instead of
// 2), bf16 bs 32 1.10-1.27x at densities 1/4 to 1/16 (6 stages instead of 4, and half the
// cp.async wavefronts), bf16 bs 16 1.2x at 1/32, fp32 bs 16 level to 1.1x.
inline bool use_dw_swizzled() { return env_switch("JBS_DW_SWIZZLE") != 0; }

template <typename T, int BS, int TN>
cudaError_t launch_dw_panel_variant(const BsmmDwArgs& a, cudaStream_t stream) {
  if constexpr (kDwPanelSupported<T, BS, TN>) {
    using Cfg = DwPanelConfig<T, BS, TN>;
    static_assert(Cfg::kPanelChannels == kDwPanelChannels, "the panel width of the tables");
    DwPanelParams p;
    fill_dw_operands(p, a);
    p.items = reinterpret_cast<const int4*>(a.panel_items);
    p.panel_offsets = a.panel_offsets;
    p.num_panels = a.num_panels;
    p.panel_cols = a.panel_cols;
    // One CTA per SM (its panel fills a third of the shared memory), at most one per block.
    const int64_t ctas = a.nnz < a.num_sms ? a.nnz : a.num_sms;
    const dim3 grid(static_cast<unsigned>(ctas), static_cast<unsigned>(a.groups));
    return launch_kernel(bsmm_dw_panel_kernel<T, BS, TN>, grid, dim3(Cfg::kThreads), Cfg::kSmemBytes, stream, p);
  } else {
    return cudaErrorNotSupported;  // unreachable: use_dw_panel() is false for these
  }
}

template <typename T, int BS, int TN, bool PRECISE>
cudaError_t launch_dw_stream(const BsmmDwArgs& a, cudaStream_t stream) {
  if (use_dw_panel<T, BS, TN>(a)) return launch_dw_panel_variant<T, BS, TN>(a, stream);
  if constexpr (kDwStagedSupported<T, BS, TN>) {
    if (use_dw_staged<T, BS, TN>()) {
      if (use_dw_swizzled()) return launch_dw_stream_variant<T, BS, TN, PRECISE, true, true, true>(a, stream);
      return launch_dw_stream_variant<T, BS, TN, PRECISE, true, true>(a, stream);
    }
  }
  // The deep variant (up to ~200 KiB of shared memory), the shallow one, else (pre-Hopper GPUs
  // with less shared memory a block) the generic dw kernel, which fits every supported GPU.
  if (stream_big(a.nnz, static_cast<int64_t>(a.num_sms) * 2) &&
      smem_fits(DwStreamConfig<T, BS, TN, true>::kSmemBytes)) {
    return launch_dw_stream_variant<T, BS, TN, PRECISE, true>(a, stream);
  }
  if (smem_fits(DwStreamConfig<T, BS, TN, false>::kSmemBytes)) {
    return launch_dw_stream_variant<T, BS, TN, PRECISE, false>(a, stream);
  }
  return launch_dw_variant<T, BS, PRECISE>(a, stream);
}

}  // namespace jbs
