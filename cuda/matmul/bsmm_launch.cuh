// Definitions of launch_bsmm_blocks<T> / launch_bsmm_dw<T>: pick the compile-
// time variant (block size, transpose, row tile, precision) and launch it.
// Included only by the per-dtype bsmm_<dtype>.cu files, which instantiate it
// for one T each so the kernels of the three dtypes compile in parallel.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "common/dispatch.cuh"
#include "common/launch.cuh"
#include "common/tma.cuh"
#include "conv/bsconv_halo_dw_kernel.cuh"
#include "conv/bsconv_halo_kernel.cuh"
#include "conv/bsconv_halo_ss_kernel.cuh"
#include "conv/bsconv_row_group_dw_kernel.cuh"
#include "conv/bsconv_strip_kernel.cuh"
#include "matmul/bsmm.h"
#include "matmul/bsmm_blocks_kernel.cuh"
#include "matmul/bsmm_dw_kernel.cuh"
#include "matmul/bsmm_dw_panel_kernel.cuh"
#include "matmul/bsmm_group_kernel.cuh"
#include "matmul/bsmm_group_tma_kernel.cuh"
#include "matmul/bsmm_group_wgmma_kernel.cuh"
#include "matmul/bsmm_group_ws_kernel.cuh"
#include "matmul/bsmm_panel_dw_kernel.cuh"
#include "matmul/bsmm_panel_kernel.cuh"
#include "matmul/bsmm_stream_even_group_kernel.cuh"
#include "matmul/bsmm_stream_even_kernel.cuh"
#include "matmul/bsmm_stream_group_kernel.cuh"
#include "matmul/bsmm_stream_ws_kernel.cuh"
#include "matmul/bsmm_stream_kernel.cuh"
#include "matmul/packed_rows.cuh"
#include "matmul/sum_splits.cuh"
#include "matmul/tile_major.cuh"
#include "matmul/transpose_blocks.cuh"

namespace jbs {

// Row tile for the fwd/dx kernel: the smallest of 32/64/128 covering N, so
// small N (decode-like, memory bound) does not waste MMA work and large N gets
// the most reuse of each weight block. fp32 with 64x64 blocks is capped at 64
// rows: 128 rows would need > 99 KiB of shared memory for two stages, more
// than sm_86/sm_89 allow.
template <typename T, int BS>
int pick_row_tile(int64_t rows) {
  if (rows <= 32) return 32;
  if (rows <= 64 || (sizeof(T) == 4 && BS == 64)) return 64;
  return 128;
}

inline void fill_operands(FwdDxOperands& p, const BsmmBlocksArgs& a) {
  p.in = a.in;
  p.w = a.w;
  p.out = a.out;
  p.rows = a.rows;
  p.in_cols = a.in_cols;
  p.out_cols = a.out_cols;
  p.in_group_stride = a.in_group_stride;
  p.w_group_stride = a.w_group_stride;
  p.out_group_stride = a.out_group_stride;
  p.gather = a.gather;
}

// The operands the small-N stream kernels share (StreamParams, StreamEvenParams):
// the activation as row-major tiles of bs columns (in_tile_stride, in_ld).
template <typename StreamOperands>
void fill_stream_operands(StreamOperands& p, const BsmmBlocksArgs& a) {
  p.in = a.in;
  p.w = a.w;
  p.items = a.items;
  p.out = a.out;
  p.rows = a.rows;
  p.in_tile_stride = a.block_size;
  p.in_ld = a.in_cols;
  p.out_cols = a.out_cols;
  p.in_group_stride = a.in_group_stride;
  p.w_group_stride = a.w_group_stride;
  p.out_group_stride = a.out_group_stride;
}

// The operands the small-N dw kernels share (matmul/dw_operands.cuh); each takes its own
// block table.
inline void fill_dw_operands(DwOperands& p, const BsmmDwArgs& a) {
  p.x = a.x;
  p.dy = a.dy;
  p.dw = a.dw;
  p.rows = a.rows;
  p.x_cols = a.x_cols;
  p.dy_cols = a.dy_cols;
  p.nnz = a.nnz;
  p.x_group_stride = a.x_group_stride;
  p.dy_group_stride = a.dy_group_stride;
  p.dw_group_stride = a.dw_group_stride;
}

template <typename T, int BS, bool TRANS, int TN, bool PRECISE, bool GATHER = false>
cudaError_t launch_blocks_variant(const BsmmBlocksArgs& a, cudaStream_t stream) {
  using Cfg = BlocksConfig<T, BS, TRANS, TN>;
  BlocksParams p;
  fill_operands(p, a);
  p.offsets = a.offsets;
  p.items = a.items;
  const int64_t out_blocks = a.out_cols / BS;
  const int64_t row_tiles = (a.rows + TN - 1) / TN;
  p.out_blocks = static_cast<int>(out_blocks);
  // The handlers guarantee out_blocks * row_tiles < 2^31 and groups <= 65535.
  const dim3 grid(static_cast<unsigned>(out_blocks * row_tiles), static_cast<unsigned>(a.groups));
  return launch_kernel(bsmm_blocks_kernel<T, BS, TRANS, TN, PRECISE, GATHER>, grid,
                       dim3(Cfg::kThreads), Cfg::kSmemBytes, stream, p);
}

inline GroupParams group_params(const BsmmBlocksArgs& a) {
  GroupParams p;
  fill_operands(p, a);
  p.group_offsets = a.group_offsets;
  p.group_items = a.group_items;
  p.group_columns = nullptr;  // in order
  p.num_groups = static_cast<int>(a.num_groups);
  p.packed_rows = 0;
  return p;
}

// Whether the mma.sync column-group kernel serves this call (the wgmma one,
// use_group_wgmma below, is asked first). It pays only when each
// activation tile it loads feeds enough of the group's P columns: fill =
// (nnz / union items) / P, the mean fraction of column warps with work per
// item. Measured on an H200 (benchmarks/NOTES.md), 8192^3 matmul: fill ~0.5 at
// bs 32 and 16 (density 1/2) is 1.2x and 1.6x (bf16) faster; fill 0.28..0.37
// is 4-16% slower; bs 64 (whose one-column tile is already 64 wide) is slower
// even at 0.67. The implicit-GEMM conv, whose activations sit in L2 anyway,
// gains only at bs 16 (1.2x at fill 0.5) and loses 22% at bs 32.
// JBS_GROUPS=0/1 forces it off/on (diagnostics, tests; with JBS_GROUPS=1 on an
// sm_90 device, 16-bit types take the wgmma kernel unless JBS_WGMMA=0).
// A diagnostic switch in the environment: -1 unset (the dispatch rule decides), 0 off,
// 1 on. Read at every launch (not cached) so a test can switch paths within one process.
inline int env_switch(const char* name) {
  const char* e = std::getenv(name);
  return e == nullptr || e[0] == 0 ? -1 : (e[0] == '0' ? 0 : 1);
}

inline int groups_env() { return env_switch("JBS_GROUPS"); }

template <typename T, int BS>
bool use_groups(const BsmmBlocksArgs& a) {
  constexpr bool supported = BS >= 16 && (sizeof(T) == 2 || BS <= 32);
  if (!supported || a.group_items == nullptr || a.group_width != 128 / BS ||
      a.num_group_items <= 0 || (!a.gathered && a.rows <= kStreamMaxRowsHost)) {
    return false;
  }
  if (groups_env() >= 0) return groups_env() == 1;
  const double fill = static_cast<double>(a.nnz) / static_cast<double>(a.num_group_items) / (128 / BS);
  return fill >= 0.45 && (a.gathered ? BS == 16 : BS <= 32);
}

template <typename T, int BS, bool TRANS, bool PRECISE, bool GATHER>
cudaError_t launch_group_variant(const BsmmBlocksArgs& a, cudaStream_t stream) {
  if constexpr (BS >= 16 && (sizeof(T) == 2 || BS <= 32)) {
    using Cfg = GroupConfig<T, BS, TRANS>;
    const GroupParams p = group_params(a);
    const int64_t row_tiles = (a.rows + Cfg::kTN - 1) / Cfg::kTN;
    // The handlers guarantee num_groups * row_tiles < 2^31 and groups <= 65535.
    const dim3 grid(static_cast<unsigned>(a.num_groups * row_tiles), static_cast<unsigned>(a.groups));
    return launch_kernel(bsmm_group_kernel<T, BS, TRANS, PRECISE, GATHER>, grid, dim3(Cfg::kThreads),
                         Cfg::kSmemBytes, stream, p);
  } else {
    return cudaErrorNotSupported;  // unreachable: use_groups() is false for these
  }
}

// Whether the wgmma column-group kernel serves this call: 16-bit types, and fp32
// as tf32 at the default precision, on an
// sm_90 device, in a build with sm_90a machine code (CMake defines
// JBS_HAVE_SM90A), for large N (its row tile is 256: below ~512 rows the
// one-column kernel's 128-row tiles give more CTAs). Both kernels are
// latency-bound: their L2 feed is ~60% of what plain cp.async reaches
// (benchmarks/NOTES.md, session 7; Nsight Compute's high "L2 throughput" is request
// work, not bytes). The group kernel
// pays only when each activation tile it loads feeds enough blocks: reuse =
// nnz / union items, the blocks per loaded tile. The
// break-even points below are measured on an H100 (benchmarks/NOTES.md,
// session 4): matmul 8192^3, bs 64: reuse 1.33 is 1.10x faster, 1.14 even;
// bs 32: 1.46 is 1.14x faster, 1.21 7% slower; bs 16: 2.22 is 1.4x faster,
// 1.52 2% slower. Session 6 (packed activations, leaner item loop): bs 64 1.14
// 1.06x faster, 1.07 9% slower; bs 32 1.21 1.18x faster; bs 16 1.52 1.48x.
// fp32 (session 7, packed, against the previous dispatch): bs 32 2.13 / 1.46 /
// 1.21 1.67x / 1.37x / 1.08x faster; bs 16 4.0 / 2.22 1.27x / 1.13x, 1.52 21% slower;
// bs 64 (two stages) 1.33 / 1.14 / 1.07 1.88x / 1.76x / 1.48x.
// The implicit-GEMM conv, whose gathered activations mostly
// hit in L2 anyway, gained only at bs 16 and reuse 4 (1.5x) in session 4; session 9's
// figures are at min_wgmma_reuse. JBS_WGMMA=0/1 forces it off/on where it can run;
// JBS_GROUPS=0 turns every group kernel off, JBS_GROUPS=1 forces a group
// kernel: this one where it can run, else the mma.sync one (use_groups).
inline int wgmma_env() { return env_switch("JBS_WGMMA"); }

inline constexpr int64_t kWgmmaMinRows = 512;

// Mid N (kStreamMaxRowsHost < rows < kWgmmaMinRows): the group kernels' CTAs (one per group
// and row tile of 256) are fewer than the SMs, so the TMA and wgmma group kernels cut each
// group's items into slices (GroupTmaParams / GroupParams::slices), as many as fill the SMs
// with one CTA each, at most kMidNMaxSlices, and as many as the scratch result holds fp32
// partials for after what the kernel keeps there first (`partials_offset` bytes: the fp32
// forward's transposed weights, or the packed activation); jbs/_src/lowering.py reserves
// them by the same count (_mid_n_slices). 1 where it does not slice. JBS_MID_SLICES=0 turns
// slicing off.
inline constexpr int kMidNMaxSlices = 8;
// From this many rows (two 256-row tiles: 128 CTAs at 8192 columns, too many to slice) the
// group kernels take mid-N calls as at large N (group_tma_takes_mid_n, group_wgmma_takes_mid_n);
// narrower outputs still slice there.
inline constexpr int64_t kMidNTwoTileRows = 384;

inline int mid_n_slices(const BsmmBlocksArgs& a, int64_t ctas, int64_t partials_offset) {
  if (a.rows >= kWgmmaMinRows || a.rows <= kStreamMaxRowsHost || env_switch("JBS_MID_SLICES") == 0 ||
      a.scratch == nullptr || ctas <= 0 || a.out_group_stride != a.rows * a.out_cols) {
    return 1;
  }
  const int64_t slice_bytes = a.groups * a.rows * a.out_cols * int64_t{4};
  const int64_t room = (a.scratch_bytes - partials_offset) / slice_bytes;
  const int64_t fill = a.num_sms / ctas;
  const int64_t slices = std::min<int64_t>({kMidNMaxSlices, fill, room});
  return slices >= 2 ? static_cast<int>(slices) : 1;
}

inline float* mid_n_partials(const BsmmBlocksArgs& a, int slices, int64_t partials_offset) {
  return slices > 1 ? reinterpret_cast<float*>(static_cast<unsigned char*>(a.scratch) + partials_offset) : nullptr;
}

inline double min_wgmma_reuse(int bs, bool gathered, bool tf32) {
  // Convs (session 9, 3x3, 320 channels, bf16, the bench's random layouts): at bs 16
  // reuse 2.04 (density 1/4) this kernel is 1.21x faster than the one-column one, 1.56
  // (1/8) even; at bs 32 reuse 1.92 (1/2) 1.10x faster, 1.39 (1/4) 1.27x slower. fp32
  // convs: not measured, never by default.
  if (gathered) return !tf32 && bs <= 32 ? 1.75 : 1e9;
  if (tf32) return bs == 64 ? 1.0 : (bs == 32 ? 1.15 : 2.0);
  return bs == 64 ? 1.1 : (bs == 32 ? 1.15 : 1.4);
}

// Whether the wgmma group kernel reads a packed copy of the activation
// (matmul/packed_rows.cuh), made first by a copy kernel into the scratch
// result, whenever the lowering sized the scratch for it (jbs/_src/lowering.py)
// and the activation is a plain matrix: 1.04-1.35x faster, copy included
// (H100, 8192^3, benchmarks/NOTES.md session 6, call 10); fp32 1.13-1.23x
// (session 7, call 4). JBS_PACK=0 reads the row-major activation (diagnostics, tests).
inline int64_t input_groups(const BsmmBlocksArgs& a) { return a.in_group_stride == 0 ? 1 : a.groups; }

template <typename T>
bool use_packed_rows(const BsmmBlocksArgs& a) {
  if (env_switch("JBS_PACK") == 0) return false;
  return !a.gathered && a.scratch != nullptr &&
         a.scratch_bytes >= packed_bytes_host(input_groups(a), a.rows, a.in_cols, sizeof(T));
}

// The wgmma group kernel's item slices (mid_n_slices) for a plain matrix at mid N, their
// partials after the packed activation where it reads one.
template <typename T>
int64_t group_wgmma_partials_offset(const BsmmBlocksArgs& a) {
  return use_packed_rows<T>(a) ? (packed_bytes_host(input_groups(a), a.rows, a.in_cols, sizeof(T)) + 255) / 256 * 256
                               : 0;
}

inline int64_t group_wgmma_ctas(const BsmmBlocksArgs& a) {
  return a.num_groups * ((a.rows + kPackRowTile - 1) / kPackRowTile) * a.groups;
}

template <typename T>
int group_wgmma_slices(const BsmmBlocksArgs& a) {
  return a.gathered ? 1 : mid_n_slices(a, group_wgmma_ctas(a), group_wgmma_partials_offset<T>(a));
}

// At mid N the wgmma kernel takes bs 16 (which the TMA kernel lacks) by default: from
// kMidNTwoTileRows rows at its large-N reuse threshold, and below, with its items in slices,
// where 16-bit rows x reuse reaches 200 or fp32 reuse reaches 3. Measured on an H200, 8192 x
// 8192 weights, 96 to 384 rows (benchmarks/NOTES.md, session 39; reuse 4.02 / 2.22 / 1.53 at
// density 1/2 / 1/4 / 1/8), against the one-column kernel: bf16 1/2 3.5x faster (106 against
// 376 us at 96 rows), 1/4 1.14x at 96 rows (213), 1/8 even at 128 rows (196) and 1.2x slower
// at 96; fp32 1/2 2.0x, but 1/4 1.5-1.9x slower at 96-128 rows and even at 192, 1/8 1.4-2.6x
// slower at every row count (its sliced tf32 walk stays at ~170 us). Where the grid holds
// more than half the SMs unsliced (two row tiles, several weights under vmap, a wide output)
// it is taken as at 384 rows (there 1.2-2.1x faster than the one-column kernel).
inline bool group_wgmma_takes_mid_n(int64_t rows, double reuse, bool tf32, int slices, bool fills_half) {
  if (rows >= kMidNTwoTileRows || (slices == 1 && fills_half)) return reuse >= min_wgmma_reuse(16, false, tf32);
  return slices > 1 && (tf32 ? reuse >= 3.0 : rows * reuse >= 200);
}

template <typename T, int BS>
bool use_group_wgmma(const BsmmBlocksArgs& a) {
#ifdef JBS_HAVE_SM90A
  if constexpr (kGroupWgmmaSupported<T, BS>) {
    // fp32 runs as one tf32 pass; HIGHEST (3xTF32) stays on the mma.sync kernels.
    if ((std::is_same_v<T, float> && a.precise) || a.group_items == nullptr || a.group_width != 128 / BS ||
        a.num_group_items <= 0 ||
        (!a.gathered && a.rows <= kStreamMaxRowsHost) || !device_is_sm90() || groups_env() == 0 ||
        wgmma_env() == 0) {
      return false;
    }
    if (wgmma_env() == 1 || groups_env() == 1) return true;
    const double reuse = static_cast<double>(a.nnz) / static_cast<double>(a.num_group_items);
    if (a.rows < kWgmmaMinRows) {
      return BS == 16 && !a.gathered &&
             group_wgmma_takes_mid_n(a.rows, reuse, std::is_same_v<T, float>, group_wgmma_slices<T>(a),
                                     2 * group_wgmma_ctas(a) > a.num_sms);
    }
    return reuse >= min_wgmma_reuse(BS, a.gathered, std::is_same_v<T, float>);
  }
#endif
  return false;
}

// Whether the wgmma group kernel runs warp-specialized (bsmm_group_ws_kernel.cuh:
// a producer warpgroup and mbarriers instead of CTA-wide barriers per item), where its
// registers suffice (kGroupWsSupported). By default only for fp32 (tf32) at bs 16, the
// one case where it measured faster: 8192^3 on an H100, two alternating runs each, fwd
// 1.26x / 1.22x and dx 1.07x / 1.03x at density 1/2 / 1/4; for bf16 it was 0.73-0.99x and
// fp32 bs 32 0.89x (benchmarks/NOTES.md, sessions 18 and 19). JBS_WS=0/1 forces it off/on.
inline int ws_env() { return env_switch("JBS_WS"); }

template <typename T, int BS>
bool use_group_ws() {
  const int env = ws_env();
  return env == 1 || (env < 0 && std::is_same_v<T, float> && BS == 16);
}

template <typename T, int BS, bool TRANS, bool GATHER, bool PACKED>
cudaError_t launch_wgmma_kernel(const GroupParams& p, dim3 grid, cudaStream_t stream) {
  if constexpr (kGroupWsSupported<T, BS, GATHER>) {
    if (use_group_ws<T, BS>() && p.slices == 1) {  // (its epilogue writes T only)
      using Cfg = GroupWsConfig<T, BS, PACKED, GATHER>;
      return launch_kernel(bsmm_group_ws_kernel<T, BS, TRANS, GATHER, PACKED>, grid, dim3(Cfg::kThreads),
                           Cfg::kSmemBytes, stream, p);
    }
  }
  using Cfg = GroupWgmmaConfig<T, BS, PACKED>;
  return launch_kernel(bsmm_group_wgmma_kernel<T, BS, TRANS, GATHER, PACKED>, grid, dim3(Cfg::kThreads),
                       Cfg::kSmemBytes, stream, p);
}

template <typename T, int BS, bool TRANS, bool GATHER>
cudaError_t launch_group_wgmma_variant(const BsmmBlocksArgs& a, cudaStream_t stream) {
  if constexpr (kGroupWgmmaSupported<T, BS>) {
    GroupParams p = group_params(a);
    if (!GATHER && a.paired_items != nullptr) {
      // A matmul's paired groups: as many groups of columns that share input blocks (at bs 16
      // and 32; in order elsewhere), so fewer union items, each an activation tile to load.
      p.group_offsets = a.paired_offsets;
      p.group_items = a.paired_items;
      p.group_columns = a.paired_columns;
    }
    p.slices = group_wgmma_slices<T>(a);
    p.partials = mid_n_partials(a, p.slices, group_wgmma_partials_offset<T>(a));
    const dim3 grid(static_cast<unsigned>(group_wgmma_ctas(a) / a.groups), static_cast<unsigned>(a.groups),
                    static_cast<unsigned>(p.slices));
    auto sum_slices = [&](cudaError_t err) {
      if (err != cudaSuccess || p.slices == 1) return err;
      return launch_sum_splits<T>(p.partials, static_cast<T*>(a.out), a.groups, a.rows * a.out_cols, p.slices, stream);
    };
    if constexpr (!GATHER) {
      if (use_packed_rows<T>(a)) {
        T* packed = static_cast<T*>(a.scratch);
        cudaError_t err = launch_pack_rows<T, BS>(static_cast<const T*>(a.in), packed, input_groups(a), a.rows,
                                                  a.in_cols, a.num_sms, stream);
        if (err != cudaSuccess) return err;
        p.in = packed;
        p.packed_rows = packed_rows_host(a.rows);
        p.in_group_stride = a.in_group_stride == 0 ? 0 : p.packed_rows * a.in_cols;
        return sum_slices(launch_wgmma_kernel<T, BS, TRANS, false, true>(p, grid, stream));
      }
    }
    return sum_slices(launch_wgmma_kernel<T, BS, TRANS, GATHER, false>(p, grid, stream));
  } else {
    return cudaErrorNotSupported;  // unreachable: use_group_wgmma() is false for these
  }
}

// The tensor map of (groups of) a row-major matrix of `elem_bytes`-byte values, `cols` x
// `rows`, group_stride elements apart, read in boxes of box_cols x box_rows with the given
// swizzle. The map counts 16-bit units (the copies move bytes), so fp32 works too.
// *group_step: 1, or 0 where the matrix is one for every group (group_stride 0, or a
// single group). False where the driver refuses it.
inline bool encode_row_tile_map(CUtensorMap* map, const void* base, int64_t cols, int64_t rows, int64_t group_stride,
                                int64_t groups, int elem_bytes, int box_cols, int box_rows,
                                CUtensorMapSwizzle swizzle, int* group_step) {
  const bool broadcast = group_stride == 0 || groups == 1;
  const uint64_t units = static_cast<uint64_t>(elem_bytes) / 2;
  const uint64_t row_bytes = static_cast<uint64_t>(cols) * elem_bytes;
  const uint64_t group_bytes = broadcast ? row_bytes * static_cast<uint64_t>(rows)
                                         : static_cast<uint64_t>(group_stride) * elem_bytes;
  const uint64_t matrix_groups = broadcast ? 1 : static_cast<uint64_t>(groups);
  const uint64_t dims[5] = {static_cast<uint64_t>(cols) * units, static_cast<uint64_t>(rows), matrix_groups, 1, 1};
  const uint64_t strides[4] = {row_bytes, group_bytes, group_bytes * matrix_groups, group_bytes * matrix_groups};
  const uint32_t box[5] = {static_cast<uint32_t>(box_cols * units), static_cast<uint32_t>(box_rows), 1, 1, 1};
  *group_step = broadcast ? 0 : 1;
  return encode_tensor_map_16bit(map, base, dims, strides, box, swizzle);
}

// Whether the TMA-fed column-group kernel (bsmm_group_tma_kernel.cuh) serves this
// call: 16-bit types at bs 32 and 64, fp32 (as tf32, at the default precision) at bs
// 32, and at bs 64 through the bs 32 kernel (its SPLIT: kGroupTmaSplit), a plain matrix
// (not a conv's gathered pixels), on sm_90, for large N. At 8192^3 (H100,
// benchmarks/NOTES.md, session 30) it ran 1.65-1.84x faster than the wgmma group kernel
// at bs 64 and 1.22-1.31x at bs 32 (bf16), densities 1/2 to 1/8 (fp32 at bs 64, split:
// 1.52-1.77x, session 34), including where
// the one-column kernel had served (reuse below min_wgmma_reuse), so it takes such calls
// from kWgmmaMinRows rows: where its reuse (blocks per union item of its own groups, the
// wide ones at 16-bit bs 64 and fp32 bs 32 and 64) reaches that threshold, and below it where its
// grid still gives every SM a CTA (a narrow output over few row tiles has more CTAs on the
// one-column kernel's 128-row tiles; not measured). At mid N (65-511 rows) it takes the calls
// group_tma_takes_mid_n picks, with its items in slices. JBS_GROUP_TMA=0 turns it off; =1 takes it wherever
// it can run, ahead of every other group kernel (JBS_GROUPS=0 included), though the panel
// kernel, asked first, keeps its calls unless JBS_PANEL=0. JBS_GROUPS and JBS_WGMMA, which
// force the older group kernels, turn it off unless JBS_GROUP_TMA=1.
inline int group_tma_env() { return env_switch("JBS_GROUP_TMA"); }

// Bytes of the fp32 forward's transposed weight blocks (one copy per weight group).
inline int64_t weight_groups(const BsmmBlocksArgs& a) { return a.w_group_stride == 0 ? 1 : a.groups; }

inline int64_t transposed_weight_bytes(const BsmmBlocksArgs& a) {
  return weight_groups(a) * a.nnz * a.block_size * a.block_size * 4;
}

// The weights the kernel reads: the blocks as given, or (fp32 forward) their transposed
// copy in the scratch result, which launch_group_tma_variant fills first.
template <typename T>
const void* group_tma_weights(const BsmmBlocksArgs& a) {
  return kIs16Bit<T> || a.transpose_w ? a.w : a.scratch;
}

// fp32 at bs 64 runs the bs 32 kernel over 32 x 32 sub-blocks (bsmm_group_tma_kernel's SPLIT).
template <typename T, int BS>
inline constexpr bool kGroupTmaSplit = std::is_same_v<T, float> && BS == 64;

// The block size the kernel runs at: BS, or 32 where it splits the blocks.
template <typename T, int BS>
inline constexpr int kGroupTmaBs = kGroupTmaSplit<T, BS> ? 32 : BS;

// The tensor maps of the kernel's two operands; false where the driver refuses them.
template <typename T, int BS>
bool group_tma_maps(const BsmmBlocksArgs& a, GroupTmaParams* p) {
  constexpr int KBS = kGroupTmaBs<T, BS>;
  using Cfg = GroupTmaConfig<T, KBS>;
  constexpr int kElem = sizeof(T);
  const CUtensorMapSwizzle swizzle = Cfg::kRowBytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
  // The weights: blocks of BS rows, w_group_stride apart as given; the fp32 forward's copy
  // is dense (one per weight group). Boxes of KBS columns x BS rows: whole blocks, or (split)
  // a K half of a block, its two sub-blocks of that half in one box.
  const void* w = group_tma_weights<T>(a);
  const int64_t w_stride = a.w_group_stride == 0 ? 0 : (w != a.w ? a.nnz * BS * BS : a.w_group_stride);
  return encode_row_tile_map(&p->in_map, a.in, a.in_cols, a.rows, a.in_group_stride, a.groups, kElem, KBS, Cfg::kTN,
                             swizzle, &p->in_group_step) &&
         encode_row_tile_map(&p->w_map, w, BS, a.nnz * BS, w_stride, a.groups, kElem, KBS, BS, swizzle,
                             &p->w_group_step);
}

// Whether the TMA kernel takes a mid-N call by default, against the one-column kernel,
// whose time grows with the rows while the sliced kernel's stays flat up to 256 (one row
// tile): from kMidNTwoTileRows rows, or where rows x reuse (blocks per item of the
// kernel's own groups) reaches the kernel's threshold. Measured on an H200, 8192 x 8192
// weights, densities 1/2 / 1/4 / 1/8, 96 to 384 rows (benchmarks/NOTES.md, session 39):
// 16-bit bs 32 (paired groups, reuse 2.24 / 1.62 / 1.38) from ~190 (1/2 at 96 rows: 80
// against 213 us; 1/4 at 96, 155: 1.02x slower; at 128, 207: 1.07x faster); 16-bit bs 64
// (wide groups, 1.83 / 1.46 / 1.33) at every row count (1/8 at 96 rows even, 1.1-1.2x
// faster from 128; not measured below reuse 1.33); fp32 bs 32 (wide, 3.12 / 2.00 / 1.57)
// from ~280 (1/4 at 128 rows, 256: 1.1x slower; 1/2 at 96, 300: 1.9x faster); fp32 bs 64
// (reuse counted in 32 x 32 sub-blocks: 3.66 / 2.92 / 2.66) from ~480 (1/2 at 128 rows,
// 469: 1.08x slower; at 192, 703: 1.13x faster). From 384 rows (two row tiles) it won
// everywhere measured, 1.02-2.2x.
inline bool group_tma_takes_mid_n(int64_t rows, double reuse, int elem_bytes, int bs) {
  if (rows >= kMidNTwoTileRows) return true;
  if (elem_bytes == 2) return bs == 64 ? reuse >= 1.25 : rows * reuse >= 190;
  return rows * reuse >= (bs == 64 ? 480 : 280);
}

inline int64_t group_tma_partials_offset(const BsmmBlocksArgs& a, bool needs_copy) {
  return needs_copy ? (transposed_weight_bytes(a) + 255) / 256 * 256 : 0;
}

// Whether the kernel runs; if so, *p holds its parameters (the tensor maps are encoded
// once per launch, through the driver).
template <typename T, int BS>
bool use_group_tma(const BsmmBlocksArgs& a, GroupTmaParams* p) {
#ifdef JBS_HAVE_SM90A
  if constexpr (kGroupTmaSupported<T, BS> || kGroupTmaSplit<T, BS>) {
    constexpr int KBS = kGroupTmaBs<T, BS>;
    constexpr int kSubBlocks = (BS / KBS) * (BS / KBS);  // sub-blocks of a block: 1, or 4
    const int env = group_tma_env();
    const bool needs_copy = !kIs16Bit<T> && !a.transpose_w;
    // Its groups: the wide ones where its width is not the ordinary groups' (128-byte rows);
    // split, those of the bs 64 layout (3 columns, the kernel's 6 halved). Otherwise the
    // paired ones (the ordinary width, columns that share inputs) where the handler has them.
    const bool wide = kGroupTmaWidth<T, KBS> != 128 / KBS;
    const bool paired = !wide && a.paired_items != nullptr;
    const int32_t* const group_offsets = wide ? a.wide_offsets : paired ? a.paired_offsets : a.group_offsets;
    const int32_t* const group_items = wide ? a.wide_items : paired ? a.paired_items : a.group_items;
    const int64_t num_groups = wide ? a.num_wide_groups : a.num_groups;  // (the paired groups': as many)
    const int64_t num_items = wide ? a.num_wide_items : paired ? a.num_paired_items : a.num_group_items;
    const int width = wide ? a.wide_width : a.group_width;
    if (env == 0 || a.gathered || (!kIs16Bit<T> && a.precise) || group_items == nullptr ||
        width * (BS / KBS) != kGroupTmaWidth<T, KBS> || num_items <= 0 || a.nnz <= 0 ||
        a.rows <= kStreamMaxRowsHost || a.rows > int64_t{INT32_MAX} - GroupTmaConfig<T, KBS>::kTN ||
        a.nnz > INT32_MAX / BS || num_items > INT32_MAX / 2 ||
        (needs_copy && (a.scratch == nullptr || a.scratch_bytes < transposed_weight_bytes(a))) || !device_is_sm90()) {
      return false;
    }
    const int row_tiles =
        static_cast<int>((a.rows + GroupTmaConfig<T, KBS>::kTN - 1) / GroupTmaConfig<T, KBS>::kTN);
    const int64_t ctas = num_groups * row_tiles * a.groups;
    const int slices = mid_n_slices(a, ctas, group_tma_partials_offset(a, needs_copy));
    if (env < 0) {
      if (groups_env() >= 0 || wgmma_env() >= 0) return false;
      // Blocks per item of the kernel's own walk: split, an item is half a block row and
      // carries two sub-blocks of each of its blocks.
      const double reuse = static_cast<double>(a.nnz) * kSubBlocks / static_cast<double>(num_items * (BS / KBS));
      if (a.rows < kWgmmaMinRows) {
        if (!group_tma_takes_mid_n(a.rows, reuse, sizeof(T), BS)) return false;
      } else if (ctas < a.num_sms && reuse < min_wgmma_reuse(KBS, false, !kIs16Bit<T>)) {
        return false;
      }
    }
    p->slices = slices;
    p->partials = mid_n_partials(a, slices, group_tma_partials_offset(a, needs_copy));
    static_cast<FwdDxOperands&>(*p) = FwdDxOperands{a.in, a.w, a.out, a.rows, a.in_cols, a.out_cols,
                                                    a.in_group_stride, a.w_group_stride, a.out_group_stride, a.gather};
    p->group_offsets = group_offsets;
    p->group_items = group_items;
    p->group_columns = wide ? a.wide_columns : paired ? a.paired_columns : nullptr;  // null: in order
    p->num_groups = static_cast<int>(num_groups);
    p->row_tiles = row_tiles;
    return group_tma_maps<T, BS>(a, p);
  }
#endif
  return false;
}

template <typename T, int BS, bool TRANS>
cudaError_t launch_group_tma_variant(const BsmmBlocksArgs& a, const GroupTmaParams& p, cudaStream_t stream) {
  if constexpr (kGroupTmaSupported<T, BS> || kGroupTmaSplit<T, BS>) {
    using Cfg = GroupTmaConfig<T, kGroupTmaBs<T, BS>>;
    if constexpr (!kIs16Bit<T> && !TRANS) {
      const cudaError_t err =
          launch_transpose_blocks_tf32<BS>(static_cast<const float*>(a.w), a.w_group_stride,
                                           static_cast<float*>(a.scratch), weight_groups(a), a.nnz, a.num_sms, stream);
      if (err != cudaSuccess) return err;
    }
    // The handlers guarantee num_groups * row tiles < 2^31 and groups <= 65535.
    const dim3 grid(static_cast<unsigned>(int64_t{p.num_groups} * p.row_tiles), static_cast<unsigned>(a.groups),
                    static_cast<unsigned>(p.slices));
    const auto kernel = bsmm_group_tma_kernel<T, kGroupTmaBs<T, BS>, TRANS, kGroupTmaSplit<T, BS>>;
    cudaError_t err = cudaErrorInvalidClusterSize;
    if (grid.x % Cfg::kCluster == 0) {
      err = launch_kernel_in_clusters(kernel, grid, dim3(Cfg::kThreads), Cfg::kSmemBytes, stream, p, Cfg::kCluster);
      // A device that cannot place the pairs (an SM partition) runs the kernel without clusters.
      if (err == cudaErrorInvalidClusterSize) (void)cudaGetLastError();
    }
    if (err == cudaErrorInvalidClusterSize) err = launch_kernel(kernel, grid, dim3(Cfg::kThreads), Cfg::kSmemBytes, stream, p);
    if (err != cudaSuccess || p.slices == 1) return err;
    return launch_sum_splits<T>(p.partials, static_cast<T*>(a.out), a.groups, a.rows * a.out_cols, p.slices, stream);
  } else {
    return cudaErrorNotSupported;  // unreachable: use_group_tma() is false for these
  }
}

// Which variant of the small-N kernels: the 8-warp deep one (BIG) pays off when
// CTAs have long item lists (a lone CTA must pull a long column fast); with
// short lists the 4-warp, 3-CTAs-per-SM one wins (measured on an H200, see
// benchmarks/NOTES.md). JBS_STREAM_BIG=0/1 forces a variant (diagnostics).
inline int stream_big_env() {
  static const int v = env_switch("JBS_STREAM_BIG");  // cached: read once per process
  return v;
}
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
  if constexpr (kIs16Bit<T>) {
    return BS <= 32 && bytes >= kStreamEvenMinBytes;
  } else {
    return BS == 32 && a.rows <= 32 && bytes >= kStreamEvenMinBytesF32 && stream_even_swizzled<T>(BS) &&
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

// The swizzled walk: 16-bit types read their tiles straight from `in` (stream_even_direct_tiles);
// otherwise the tile-major copy of `in` (TN rows per tile, zero-padded) goes into the start of
// the scratch and the walk is launched early behind it; then the sums. False in *launched where
// the tensor maps cannot be made (the caller takes the other walk).
template <typename T, int BS, bool TRANS, int TN>
cudaError_t launch_stream_even_swizzled(const BsmmBlocksArgs& a, StreamEvenParams& p, cudaStream_t stream,
                                        bool* launched) {
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
  return launch_even_split<Cfg>(a, p, a.nnz, stream_even_max_warps<T>(a, TN),
                                bsmm_stream_even_kernel<T, BS, TRANS, TN, /*PRECISE=*/false, /*SWIZZLED=*/true>,
                                bsmm_stream_even_sum_kernel<T, BS, TN, 1, 0, Cfg::kHalves>, /*early_sum=*/true, stream,
                                tiled_bytes, /*walk_after=*/true);
}

template <typename T, int BS, bool TRANS, int TN>
cudaError_t launch_stream_even_variant(const BsmmBlocksArgs& a, cudaStream_t stream) {
  using Cfg = StreamEvenConfig<T, BS, TRANS, TN>;
  const auto kernel = bsmm_stream_even_kernel<T, BS, TRANS, TN, /*PRECISE=*/false>;
  StreamEvenParams p{};
  fill_stream_operands(p, a);
  p.offsets = a.offsets;
  p.num_segments = static_cast<int>(a.out_cols / BS);
  if constexpr (kStreamEvenSwizzleSupported<T, BS>) {
    if (stream_even_swizzled<T>(BS)) {
      bool launched = false;
      cudaError_t err = launch_stream_even_swizzled<T, BS, TRANS, TN>(a, p, stream, &launched);
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

// The conv halo kernel (conv/bsconv_halo_kernel.cuh) serves a conv's fwd / dx
// when its taps can share one activation tile: stride 1 with output and input of
// the same image size (mul = div = 1, row space = source), 16-bit types, bs 16 or
// 32, on sm_90, with the conv's column-group tables, the halo within the kernel's
// capacity and both stages in shared memory (taps <= 9 at bs 32, <= 22 at bs 16).
// By default it takes convs of 2 taps or more (a 1x1 conv has nothing to share);
// JBS_CONV_HALO=0 turns it off, =1 takes it wherever it can run. It has its own
// switch: JBS_WGMMA=0 and JBS_GROUPS=0 leave it on.
inline int conv_halo_env() { return env_switch("JBS_CONV_HALO"); }

// The halo kernels' geometry fields (ConvHaloParams, ConvHaloDwParams): blocks per
// tap, and the halo of a tile of tile_rows rows (conv/halo_tile.cuh).
template <typename HaloParams>
void set_halo_fields(HaloParams* hp, int64_t nnz, int taps, int64_t lo, int64_t hi, int tile_rows) {
  hp->nnz_per_tap = static_cast<int>(nnz / taps);
  hp->delta_min = static_cast<int>(lo);
  hp->halo_rows = static_cast<int>(tile_rows + hi - lo);
}

// What each halo fwd / dx kernel needs (the halo, ss and strip kernels): a stride-1
// conv whose output has its input's size (halo_geometry: *lo / *hi its least and
// greatest row shift), and the conv's column-group tables, groups of 128 / BS columns
// whose union items are taps x channel blocks.
template <int BS>
bool halo_tables_usable(const BsmmBlocksArgs& a, int64_t* lo, int64_t* hi) {
  const int64_t taps = a.gather.taps();
  return a.gathered && halo_geometry(a.gather, lo, hi) && a.group_items != nullptr && a.group_width == 128 / BS &&
         a.num_group_items > 0 && a.num_group_items % taps == 0 && a.nnz % taps == 0;
}

// Fills the kernel's geometry fields; false where the kernel cannot run.
template <typename T, int BS>
bool conv_halo_geometry(const BsmmBlocksArgs& a, ConvHaloParams* hp) {
  if constexpr (kIs16Bit<T> && (BS == 16 || BS == 32)) {
    using Cfg = ConvHaloConfig<T, BS>;
    const RowGather& g = a.gather;
    const int taps = g.taps_h * g.taps_w;
    int64_t lo = 0, hi = 0;
    if (!halo_tables_usable<BS>(a, &lo, &hi) || Cfg::smem_bytes(taps) > Cfg::kOptInBytes ||
        Cfg::kTN + hi - lo > Cfg::kHaloRows) {
      return false;
    }
    set_halo_fields(hp, a.nnz, taps, lo, hi, Cfg::kTN);
    return true;
  }
  return false;
}

template <typename T, int BS>
bool use_conv_halo(const BsmmBlocksArgs& a) {
#ifdef JBS_HAVE_SM90A
  ConvHaloParams unused;
  const int env = conv_halo_env();
  if (env == 0 || !a.gathered || !device_is_sm90() || !conv_halo_geometry<T, BS>(a, &unused)) return false;
  return env == 1 || a.gather.taps() >= 2;
#else
  return false;
#endif
}

template <typename T, int BS, bool TRANS>
cudaError_t launch_conv_halo_variant(const BsmmBlocksArgs& a, cudaStream_t stream) {
  if constexpr (kIs16Bit<T> && (BS == 16 || BS == 32)) {
    using Cfg = ConvHaloConfig<T, BS>;
    ConvHaloParams p;
    static_cast<GroupParams&>(p) = group_params(a);
    if (!conv_halo_geometry<T, BS>(a, &p)) return cudaErrorNotSupported;  // use_conv_halo said yes
    const int64_t row_tiles = (a.rows + Cfg::kTN - 1) / Cfg::kTN;
    const dim3 grid(static_cast<unsigned>(a.num_groups * row_tiles), static_cast<unsigned>(a.groups));
    const auto kernel = bsconv_halo_kernel<T, BS, TRANS>;
    // The size varies with the taps, the opt-in may be set only once: set it to the most.
    const cudaError_t err = opt_in_smem(reinterpret_cast<const void*>(kernel), Cfg::kOptInBytes);
    if (err != cudaSuccess) return err;
    return launch_kernel(kernel, grid, dim3(Cfg::kThreads),
                         static_cast<size_t>(Cfg::smem_bytes(static_cast<int>(a.gather.taps()))), stream, p);
  } else {
    return cudaErrorNotSupported;  // unreachable: use_conv_halo() is false for these
  }
}

// The halo kernel's variant with its activation operand read from shared memory
// (conv/bsconv_halo_ss_kernel.cuh) takes the halo kernel's convs whose images are
// 8, 16 or 32 pixels wide and a multiple of 8 high, with the tile's image rows
// dividing the height (or whole images per tile), column shifts of at most 8 and
// the halo within its copies. JBS_CONV_HALO_SS=0 keeps the halo kernel there.
inline int conv_halo_ss_env() { return env_switch("JBS_CONV_HALO_SS"); }

// The band halo (conv/band_halo.cuh) of a stride-1 conv whose output has its input's
// size (halo_geometry), on images 8, 16 or 32 pixels wide and a multiple of 8 high, with
// a tile's image rows dividing the height (or whole images per tile), column shifts of
// at most 8 and its copies within kBandMaxHaloCopies. false otherwise.
inline bool band_halo_shape(const RowGather& g, int planes, BandHaloShape* s) {
  int64_t lo = 0, hi = 0;
  if (!halo_geometry(g, &lo, &hi)) return false;
  const int width = g.rows_w, height = g.rows_h;
  const int tile_image_rows = 256 / ((width == 8 || width == 16 || width == 32) ? width : 1);
  if (tile_image_rows == 256 || height % 8 != 0 ||
      (height % tile_image_rows != 0 && tile_image_rows % height != 0)) {
    return false;
  }
  const TapReach reach = tap_reach(g);
  if (reach.ow_min < -kBandPad || reach.ow_max > kBandPad) return false;
  const int image_rows = tile_image_rows < height ? tile_image_rows : height;
  const int top = reach.above();
  const int64_t band_rows = int64_t{image_rows} + top + reach.below();
  const int64_t bands = tile_image_rows / image_rows;
  const int64_t copies = bands * band_rows * width * planes;
  // The copies are packed with band rows below 256, a warp's 32 copies pixels along planes
  // (BandHalo): whole warps of them must fit the threads' copies.
  if ((copies + 31) / 32 * 32 > int64_t{kBandMaxHaloCopies} || band_rows > 255) return false;
  s->top = top;
  s->band_rows = static_cast<int>(band_rows);
  s->image_rows = image_rows;
  s->plane_slots = static_cast<int>((bands * band_rows * (width + kBandPad) + kBandPad + 7) / 8 * 8);
  s->halo_copies = static_cast<int>(copies);
  return true;
}

template <typename T, int BS>
bool conv_halo_ss_geometry(const BsmmBlocksArgs& a, ConvHaloSsParams* hp) {
  if constexpr (kIs16Bit<T> && (BS == 16 || BS == 32)) {
    using Cfg = ConvHaloSsConfig<T, BS>;
    const int taps = static_cast<int>(a.gather.taps());
    int64_t lo = 0, hi = 0;
    if (!halo_tables_usable<BS>(a, &lo, &hi) || !band_halo_shape(a.gather, Cfg::kPlanes, &hp->band) ||
        Cfg::smem_bytes(taps, hp->band.plane_slots) > Cfg::kOptInBytes) {
      return false;
    }
    hp->nnz_per_tap = static_cast<int>(a.nnz / taps);
    return true;
  }
  return false;
}

template <typename T, int BS>
bool use_conv_halo_ss(const BsmmBlocksArgs& a) {
  ConvHaloSsParams unused;
  return conv_halo_ss_env() != 0 && use_conv_halo<T, BS>(a) && conv_halo_ss_geometry<T, BS>(a, &unused);
}

template <typename T, int BS, bool TRANS>
cudaError_t launch_conv_halo_ss_variant(const BsmmBlocksArgs& a, cudaStream_t stream) {
  if constexpr (kIs16Bit<T> && (BS == 16 || BS == 32)) {
    using Cfg = ConvHaloSsConfig<T, BS>;
    ConvHaloSsParams p;
    static_cast<GroupParams&>(p) = group_params(a);
    if (!conv_halo_ss_geometry<T, BS>(a, &p)) return cudaErrorNotSupported;  // use_conv_halo_ss said yes
    // Persistent CTAs, one per SM, each walk units (row tile, column group) blockIdx.x,
    // + gridDim.x, ...
    p.units = a.num_groups * ((a.rows + Cfg::kTN - 1) / Cfg::kTN);
    const int64_t ctas = p.units < a.num_sms ? p.units : a.num_sms;
    const dim3 grid(static_cast<unsigned>(ctas), static_cast<unsigned>(a.groups));
    const auto kernel = bsconv_halo_ss_kernel<T, BS, TRANS>;
    // The size varies with the taps and the image, the opt-in may be set only once: set it to the most.
    const cudaError_t err = opt_in_smem(reinterpret_cast<const void*>(kernel), Cfg::kOptInBytes);
    if (err != cudaSuccess) return err;
    const int taps = static_cast<int>(a.gather.taps());
    return launch_kernel(kernel, grid, dim3(Cfg::kThreads),
                         static_cast<size_t>(Cfg::smem_bytes(taps, p.band.plane_slots)), stream, p);
  } else {
    return cudaErrorNotSupported;  // unreachable: use_conv_halo_ss() is false for these
  }
}

// The conv strip kernel (conv/bsconv_strip_kernel.cuh) takes the halo kernels'
// bs 32 and 16 convs whose images are a multiple of 8 pixels wide and 16 or a multiple
// of 32 high (strips of R = 16 / 32 rows), with taps a multiple of 3 or 2, taps
// reaching at most 8 pixels left and right together, and the halo within its
// copies. JBS_CONV_STRIP=0 leaves those convs to the ss / halo kernels.
inline int conv_strip_env() { return env_switch("JBS_CONV_STRIP"); }
inline constexpr double kConvStripSplitBelow = 0.375;

struct ConvStripShape {
  int strip_rows = 0;     // R
  int taps_per_wait = 0;  // 3 or 2
};

// The strip halo (conv/strip_halo.cuh) of `strips` strips of R rows, and its TMA map of
// the activations `a.in` (channels, width, height, images, weight groups; a broadcast
// operand is one group): false where the taps reach more than 8 pixels left and right
// together, a strip has more than 255 halo rows (a TMA box dimension), or the driver
// refuses the map.
inline bool strip_halo_shape(const BsmmBlocksArgs& a, int R, int strips, StripHaloShape* s, CUtensorMap* map) {
  const RowGather& g = a.gather;
  const TapReach reach = tap_reach(g);
  const int left = reach.left(), right = reach.right();
  if (left + right > 8 || reach.ow_max < -8 || reach.ow_min > 8) return false;
  const int64_t band_rows = int64_t{R} + reach.above() + reach.below();
  if (band_rows > 255) return false;
  s->top = reach.above();
  s->band_rows = static_cast<int>(band_rows);
  s->left = left;
  s->right = right;
  s->row_slots = 8 + left + right;
  constexpr int kAtom = StripHaloShape::kAtomUnits;
  s->band_units = static_cast<int>((band_rows * s->row_slots * 4 + kAtom - 1) / kAtom * kAtom);
  s->halo_units = strips * s->band_units;
  const bool broadcast = a.in_group_stride == 0 || a.groups == 1;
  s->group_step = broadcast ? 0 : 1;
  const uint64_t images = static_cast<uint64_t>(a.rows / g.row_pixels());
  const uint64_t pixel_bytes = static_cast<uint64_t>(a.in_cols) * 2;
  const uint64_t image_bytes = static_cast<uint64_t>(g.row_pixels()) * pixel_bytes;
  const uint64_t dims[5] = {static_cast<uint64_t>(a.in_cols), static_cast<uint64_t>(g.rows_w),
                            static_cast<uint64_t>(g.rows_h), images, broadcast ? 1u : static_cast<uint64_t>(a.groups)};
  const uint64_t strides[4] = {pixel_bytes, g.rows_w * pixel_bytes, image_bytes,
                               broadcast ? image_bytes * images : static_cast<uint64_t>(a.in_group_stride) * 2};
  // A pixel's 32 channels are a box row of 64 bytes, swizzled as the wgmma reads them.
  const uint32_t box[5] = {32, static_cast<uint32_t>(s->row_slots), static_cast<uint32_t>(band_rows), 1, 1};
  return encode_tensor_map_16bit(map, a.in, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_64B);
}

// The TMA map of the strip kernel's weights `a.w` ((weight groups,) taps, blocks of a tap,
// BS x BS) as (256 elements, BS^2 / 256 rows of them, block, tap, group), in boxes of one
// block at every tap: a slot block's taps in one instruction.
template <int BS>
bool strip_weight_map(const BsmmBlocksArgs& a, int taps, CUtensorMap* map) {
  constexpr uint64_t kRowElems = 256, kRows = BS * BS / 256, kBlockBytes = BS * BS * 2;
  static_assert(kRows >= 1 && BS * BS % 256 == 0, "a block is whole rows of 256 elements");
  const uint64_t per_tap = static_cast<uint64_t>(a.nnz / taps);
  const bool one_group = a.w_group_stride == 0 || a.groups == 1;
  const uint64_t dims[5] = {kRowElems, kRows, per_tap, static_cast<uint64_t>(taps),
                            one_group ? 1u : static_cast<uint64_t>(a.groups)};
  const uint64_t strides[4] = {kRowElems * 2, kBlockBytes, per_tap * kBlockBytes,
                               one_group ? per_tap * kBlockBytes * taps : static_cast<uint64_t>(a.w_group_stride) * 2};
  const uint32_t box[5] = {static_cast<uint32_t>(kRowElems), static_cast<uint32_t>(kRows), 1,
                           static_cast<uint32_t>(taps), 1};
  return encode_tensor_map_16bit(map, a.w, dims, strides, box);
}

template <typename T, int BS>
bool conv_strip_geometry(const BsmmBlocksArgs& a, ConvStripParams* hp, ConvStripShape* shape) {
  if constexpr (kIs16Bit<T> && (BS == 32 || BS == 16)) {
    const RowGather& g = a.gather;
    const int taps = g.taps_h * g.taps_w;
    int64_t lo = 0, hi = 0;
    if (!halo_tables_usable<BS>(a, &lo, &hi)) return false;
    const int width = g.rows_w, height = g.rows_h;
    shape->strip_rows = height % 32 == 0 ? 32 : height == 16 ? 16 : 0;
    shape->taps_per_wait = taps % 3 == 0 ? 3 : taps % 2 == 0 ? 2 : 0;
    if (width % 8 != 0 || shape->strip_rows == 0 || shape->taps_per_wait == 0) return false;
    using Cfg32 = ConvStripConfig<T, 32, BS>;
    if (!strip_halo_shape(a, shape->strip_rows, 32 / shape->strip_rows, &hp->halo, &hp->halo_map)) return false;
    if (taps > Cfg32::kMaxTaps || !strip_weight_map<BS>(a, taps, &hp->w_map)) return false;
    const int halo_units = hp->halo.halo_units;
    hp->nnz_per_tap = static_cast<int>(a.nnz / taps);
    auto stages_for = [&](bool split) {
      return shape->strip_rows == 32 ? Cfg32::stages_for(taps, halo_units, split)
                                     : ConvStripConfig<T, 16, BS>::stages_for(taps, halo_units, split);
    };
    // Slots of half an item's blocks (ConvStripParams::split; JBS_CONV_STRIP_SPLIT=0/1/2
    // forces whole / split / packed) where whole items leave room for only 2 slots and half
    // ones for more (3x3: 2 whole, 3 half), below density 3/8, where few items have blocks
    // for both warpgroups. bs 32 splits every item that has (1): measured (session 21) 3x3
    // fwd 1.03-1.06x faster at 1/4 and 1/8, 2x3 (3 slots whole, 4 split) 1.0-1.16x slower;
    // packing (2) is level with it (session 54). bs 16 packs (2): an item there has 2-5 of
    // its 16 blocks, so few split (the halo goes twice for those); 3x3 fwd / dx 1.03-1.09x
    // faster at 1/4 and 1/8 (benchmarks/NOTES.md, session 54). And bs 32 splits wherever
    // whole items do not fit at all (e.g. a 3x3 dilated by 4, whose halo is tall) but
    // split ones do.
    const double density = static_cast<double>(hp->nnz_per_tap) / (static_cast<double>(a.in_cols / BS) *
                                                                      static_cast<double>(a.out_cols / BS));
    const char* split_text = std::getenv("JBS_CONV_STRIP_SPLIT");
    const int split_env =
        split_text != nullptr && split_text[0] >= '0' && split_text[0] <= '2' ? split_text[0] - '0' : -1;
    const bool half_slots_deeper = density < kConvStripSplitBelow && stages_for(false) == 2 && stages_for(true) > 2;
    if (BS == 16) {  // packed or whole (the switch's 1 packs too)
      hp->split = split_env > 0 || (split_env < 0 && half_slots_deeper) ? 2 : 0;
    } else {
      hp->split = split_env >= 0 ? split_env : !stages_for(false) || half_slots_deeper ? 1 : 0;
    }
    hp->stages = stages_for(hp->split);
    if (hp->stages == 0) return false;
    // A unit without items (all zeros: a column group whose columns have no block, a quarter
    // of the columns at density 1/8 and 10 block columns) is stored straight from the
    // consumers' registers; JBS_CONV_STRIP_ZERO=0 stages it as any unit (to compare). Direct:
    // fwd bs 32 1/8 1.03-1.07x faster (2x3 42.8 -> 40.4 us, 3x3 49.2 -> 47.2); stored by the
    // loader warpgroup's idle warps while the consumers went on, the same (benchmarks/NOTES.md,
    // session 55).
    hp->zero_direct = env_switch("JBS_CONV_STRIP_ZERO") != 0 ? 1 : 0;
    // JBS_CONV_STRIP_STAGES=2 keeps the 2-slot ring where more would fit (to compare).
    const char* forced = std::getenv("JBS_CONV_STRIP_STAGES");
    if (forced != nullptr && forced[0] == '2') hp->stages = 2;
    for (int t = 0; t < taps; ++t) {
      const int kh = t / g.taps_w, kw = t - kh * g.taps_w;
      hp->tap_slot[t] = hp->halo.tap_slot(g.off_h + kh * g.step_h, g.off_w + kw * g.step_w);
    }
    return true;
  }
  return false;
}

// Whether the strip kernel runs; if so, *p and *shape hold its parameters (the tensor
// map is encoded once per launch, through the driver).
template <typename T, int BS>
bool use_conv_strip(const BsmmBlocksArgs& a, ConvStripParams* p, ConvStripShape* shape) {
  if (conv_strip_env() == 0 || !use_conv_halo<T, BS>(a) || a.paired_columns == nullptr) return false;
  if (a.num_paired_items % a.gather.taps() != 0) return false;
  // The paired column groups: the same units, with fewer items and fewer MMAs of zero blocks.
  static_cast<GroupParams&>(*p) = group_params(a);
  p->group_offsets = a.paired_offsets;
  p->group_items = a.paired_items;
  p->columns = a.paired_columns;
  return conv_strip_geometry<T, BS>(a, p, shape);
}

template <typename T, int BS, bool TRANS>
cudaError_t launch_conv_strip_variant(const BsmmBlocksArgs& a, ConvStripParams p, const ConvStripShape& shape,
                                      cudaStream_t stream) {
  if constexpr (kIs16Bit<T> && (BS == 32 || BS == 16)) {
    // A tile is 256 pixels, so there are as many tiles as 256-row tiles; persistent CTAs,
    // one per SM, each walk units (tile, column group) blockIdx.x, + gridDim.x, ...
    p.units = a.num_groups * ((a.rows + 255) / 256);
    const int64_t ctas = p.units < a.num_sms ? p.units : a.num_sms;
    const dim3 grid(static_cast<unsigned>(ctas), static_cast<unsigned>(a.groups));
    const int taps = static_cast<int>(a.gather.taps());
    // The 2x3 and 3x3 convs run with their tap count a constant (bsconv_strip_kernel's
    // FIXED_TAPS); JBS_CONV_STRIP_FIXED_TAPS=0 runs them with the count read at run time.
    const int fixed_taps = env_switch("JBS_CONV_STRIP_FIXED_TAPS") == 0 ? 0 : taps;
    auto launch = [&](auto r_c, auto tpw_c) {
      constexpr int R = decltype(r_c)::value;
      constexpr int TPW = decltype(tpw_c)::value;
      using Cfg = ConvStripConfig<T, R, BS>;
      auto kernel = bsconv_strip_kernel<T, BS, R, TPW, TRANS>;
      if constexpr (TPW == 3) {
        if (fixed_taps == 9) kernel = bsconv_strip_kernel<T, BS, R, TPW, TRANS, 9>;
        if (fixed_taps == 6) kernel = bsconv_strip_kernel<T, BS, R, TPW, TRANS, 6>;
      }
      // The size varies with the taps and the image, the opt-in may be set only once: set it to the most.
      const cudaError_t err = opt_in_smem(reinterpret_cast<const void*>(kernel), Cfg::kOptInBytes);
      if (err != cudaSuccess) return err;
      const auto smem = static_cast<size_t>(Cfg::smem_bytes(taps, p.halo.halo_units, p.split, p.stages));
      // Launched early, so that its CTAs start (barriers, unit runs from the tables) as soon as
      // the kernel before it on the stream has let them, not after that kernel's completion
      // has been signalled; the kernel waits for that completion before it touches x, w or y.
      // 1.01x on the 1/8 rows (~0.45 us a call: benchmarks/NOTES.md, session 58);
      // JBS_CONV_STRIP_PDL=0 launches it the ordinary way (to compare).
      if (env_switch("JBS_CONV_STRIP_PDL") == 0) return launch_kernel(kernel, grid, dim3(Cfg::kThreads), smem, stream, p);
      return launch_kernel_after(kernel, grid, dim3(Cfg::kThreads), smem, stream, p);
    };
    using I32 = std::integral_constant<int, 32>;
    using I16 = std::integral_constant<int, 16>;
    using I3 = std::integral_constant<int, 3>;
    using I2 = std::integral_constant<int, 2>;
    if (shape.strip_rows == 32) return shape.taps_per_wait == 3 ? launch(I32{}, I3{}) : launch(I32{}, I2{});
    return shape.taps_per_wait == 3 ? launch(I16{}, I3{}) : launch(I16{}, I2{});
  } else {
    return cudaErrorNotSupported;  // unreachable: use_conv_strip() is false for these
  }
}

// The panel kernel (matmul/bsmm_panel_kernel.cuh) serves fwd / dx with many rows, few
// input channels and few weights: two 64-row panels of the activation and every weight
// block must fit in shared memory (PanelConfig::smem_bytes; e.g. 320 -> 320 channels up
// to density 1/2 at bs 32 and 16, 160 -> 160 at any density). 16-bit types, bs 16 or
// 32, on sm_90. It reads a plain matrix: the matmul's activation, or a 1x1 conv's
// pixels when its gather is the identity (stride 1, the output the input's size). By
// default it runs where every SM gets a 64-row tile; JBS_PANEL=0 turns it off, =1 takes
// it wherever it can run. It also steps aside for JBS_GROUPS / JBS_WGMMA, which force
// the column-group kernels.
inline int panel_env() { return env_switch("JBS_PANEL"); }

inline bool gather_is_identity(const RowGather& g) {
  return g.taps() == 1 && g.rows_h == g.src_h && g.rows_w == g.src_w && g.mul_h == 1 && g.mul_w == 1 &&
         g.off_h == 0 && g.off_w == 0 && g.div_h == 1 && g.div_w == 1;
}

// The tensor map of a 16-bit (groups of) row-major matrix read in panels: boxes of 64
// columns x `tile_rows` rows, 128-byte swizzled (encode_row_tile_map).
inline bool encode_panel_map(CUtensorMap* map, const void* base, int64_t cols, int64_t rows, int64_t group_stride,
                             int64_t groups, int tile_rows, int* group_step) {
  return encode_row_tile_map(map, base, cols, rows, group_stride, groups, 2, 64, tile_rows,
                             CU_TENSOR_MAP_SWIZZLE_128B, group_step);
}

// Fills the kernel's fields past its operands; false where it cannot run.
template <typename T, int BS>
bool panel_geometry(const BsmmBlocksArgs& a, PanelParams* p) {
  if constexpr (kIs16Bit<T> && (BS == 16 || BS == 32)) {
    using Cfg = PanelConfig<T, BS>;
    if (a.rows > int64_t{INT32_MAX} - Cfg::kTM || a.offsets == nullptr ||
        a.items == nullptr || (a.gathered && !gather_is_identity(a.gather)) ||
        Cfg::smem_bytes(a.in_cols, a.out_cols / BS, a.nnz, 2) > Cfg::kOptInBytes) {
      return false;
    }
    p->panel_slots = 2;  // and as many more as fit
    while (p->panel_slots < Cfg::kMaxPanelSlots &&
           Cfg::smem_bytes(a.in_cols, a.out_cols / BS, a.nnz, p->panel_slots + 1) <= Cfg::kOptInBytes) {
      ++p->panel_slots;
    }
    if (!encode_panel_map(&p->in_map, a.in, a.in_cols, a.rows, a.in_group_stride, a.groups, Cfg::kTM,
                          &p->group_step)) {
      return false;
    }
    p->panel_chunks = static_cast<int>((a.in_cols + 63) / 64);
    p->offsets = a.offsets;
    p->items = a.items;
    p->out_blocks = static_cast<int>(a.out_cols / BS);
    p->nnz = static_cast<int>(a.nnz);
    p->row_tiles = (a.rows + Cfg::kTM - 1) / Cfg::kTM;
    return true;
  }
  return false;
}

// Whether the panel kernel runs; if so, *p holds its parameters (the tensor map is
// encoded once per launch, through the driver).
template <typename T, int BS>
bool use_panel(const BsmmBlocksArgs& a, PanelParams* p) {
#ifdef JBS_HAVE_SM90A
  const int env = panel_env();
  if (env == 0 || !device_is_sm90()) return false;
  if (env < 0 && (groups_env() >= 0 || wgmma_env() >= 0 || a.rows < int64_t{64} * a.num_sms)) return false;
  static_cast<FwdDxOperands&>(*p) = FwdDxOperands{a.in, a.w, a.out, a.rows, a.in_cols, a.out_cols,
                                                  a.in_group_stride, a.w_group_stride, a.out_group_stride, a.gather};
  return panel_geometry<T, BS>(a, p);
#else
  return false;
#endif
}

template <typename T, int BS, bool TRANS>
cudaError_t launch_panel_variant(const BsmmBlocksArgs& a, const PanelParams& p, cudaStream_t stream) {
  if constexpr (kIs16Bit<T> && (BS == 16 || BS == 32)) {
    using Cfg = PanelConfig<T, BS>;
    const int64_t ctas = p.row_tiles < a.num_sms ? p.row_tiles : a.num_sms;
    const dim3 grid(static_cast<unsigned>(ctas), static_cast<unsigned>(a.groups));
    const auto kernel = bsmm_panel_kernel<T, BS, TRANS>;
    // The size varies with in_cols, the opt-in may be set only once: set it to the most.
    const cudaError_t err = opt_in_smem(reinterpret_cast<const void*>(kernel), Cfg::kOptInBytes);
    if (err != cudaSuccess) return err;
    return launch_kernel(kernel, grid, dim3(Cfg::kThreads),
                         static_cast<size_t>(Cfg::smem_bytes(a.in_cols, p.out_blocks, a.nnz, p.panel_slots)), stream,
                         p);
  } else {
    return cudaErrorNotSupported;  // unreachable: use_panel() is false for these
  }
}

// Calls f with the small-N row tile of `rows` (stream_row_tile_host: 16, 32 or 64)
// as a compile-time constant.
template <typename F>
decltype(auto) dispatch_stream_row_tile(int64_t rows, F&& f) {
  switch (stream_row_tile_host(rows)) {
    case 16:
      return f(std::integral_constant<int, 16>{});
    case 32:
      return f(std::integral_constant<int, 32>{});
    default:
      return f(std::integral_constant<int, 64>{});
  }
}

template <typename T>
cudaError_t launch_bsmm_blocks(const BsmmBlocksArgs& a, cudaStream_t stream) {
  if (a.rows <= 0 || a.out_cols <= 0 || a.groups <= 0) return cudaSuccess;
  return dispatch_block_size(a.block_size, [&](auto bs_c) {
    constexpr int BS = decltype(bs_c)::value;
    return dispatch_bool(a.transpose_w, [&](auto tr_c) {
      constexpr bool TRANS = decltype(tr_c)::value;
      // Only fp32 has a precise variant; bf16/f16 products are exact in fp32.
      return dispatch_bool(a.precise && std::is_same_v<T, float>, [&](auto pr_c) {
        constexpr bool PRECISE = decltype(pr_c)::value && std::is_same_v<T, float>;
        if (PanelParams pp; use_panel<T, BS>(a, &pp)) return launch_panel_variant<T, BS, TRANS>(a, pp, stream);
        if (a.gathered) {
          ConvStripParams sp;
          ConvStripShape shape;
          if (use_conv_strip<T, BS>(a, &sp, &shape)) return launch_conv_strip_variant<T, BS, TRANS>(a, sp, shape, stream);
        }
        if (a.gathered && use_conv_halo_ss<T, BS>(a)) return launch_conv_halo_ss_variant<T, BS, TRANS>(a, stream);
        if (a.gathered && use_conv_halo<T, BS>(a)) return launch_conv_halo_variant<T, BS, TRANS>(a, stream);
        if (GroupTmaParams tp; use_group_tma<T, BS>(a, &tp)) return launch_group_tma_variant<T, BS, TRANS>(a, tp, stream);
        if (use_group_wgmma<T, BS>(a)) {
          return a.gathered ? launch_group_wgmma_variant<T, BS, TRANS, true>(a, stream)
                            : launch_group_wgmma_variant<T, BS, TRANS, false>(a, stream);
        }
        if (use_groups<T, BS>(a)) {
          return a.gathered ? launch_group_variant<T, BS, TRANS, PRECISE, true>(a, stream)
                            : launch_group_variant<T, BS, TRANS, PRECISE, false>(a, stream);
        }
        if (a.gathered) {
          // Convolutions have many rows (pixels): one variant, the largest row tile.
          constexpr int kTile = (sizeof(T) == 4 && BS == 64) ? 64 : 128;
          return launch_blocks_variant<T, BS, TRANS, kTile, PRECISE, true>(a, stream);
        }
        if (a.chunks != nullptr && a.rows <= kStreamMaxRowsHost) {
          return dispatch_stream_row_tile(a.rows, [&](auto tn_c) {
            constexpr int TN = decltype(tn_c)::value;
            if constexpr (kIs16Bit<T> && BS <= 32 && TN <= 32) {
              if (use_stream_even_group<T, BS>(a)) return launch_stream_even_group_variant<T, BS, TRANS, TN>(a, stream);
            }
            if constexpr (BS >= 16 && !PRECISE) {
              if (use_stream_even<T, BS>(a)) return launch_stream_even_variant<T, BS, TRANS, TN>(a, stream);
            }
            if (use_stream_ws<T, BS>(a)) return launch_stream_ws_variant<T, BS, TRANS, TN, PRECISE>(a, stream);
            if (use_stream_groups<T, BS>(a)) return launch_stream_group_variant<T, BS, TRANS, TN, PRECISE>(a, stream);
            return stream_big(a.nnz, a.num_chunks) ? launch_stream_variant<T, BS, TRANS, TN, PRECISE, true>(a, stream)
                                                   : launch_stream_variant<T, BS, TRANS, TN, PRECISE, false>(a, stream);
          });
        }
        switch (pick_row_tile<T, BS>(a.rows)) {
          case 32:
            return launch_blocks_variant<T, BS, TRANS, 32, PRECISE>(a, stream);
          case 64:
            return launch_blocks_variant<T, BS, TRANS, 64, PRECISE>(a, stream);
          default:
            if constexpr (sizeof(T) == 4 && BS == 64) {
              return launch_blocks_variant<T, BS, TRANS, 64, PRECISE>(a, stream);
            } else {
              return launch_blocks_variant<T, BS, TRANS, 128, PRECISE>(a, stream);
            }
        }
      });
    });
  });
}

inline void fill_dw_params(DwParams& p, const BsmmDwArgs& a) {
  p.x = a.x;
  p.dy = a.dy;
  p.items = a.items;
  p.dw = a.dw;
  p.rows = a.rows;
  p.x_cols = a.x_cols;
  p.dy_cols = a.dy_cols;
  p.x_group_stride = a.x_group_stride;
  p.dy_group_stride = a.dy_group_stride;
  p.dw_group_stride = a.dw_group_stride;
  p.gather = a.gather;
  p.row_splits = a.partials != nullptr && a.row_splits > 1 ? a.row_splits : 1;
  p.partials = a.partials;
}

// After a dw kernel that wrote row-split partials: dw = their sum in split order.
template <typename T, int BS>
cudaError_t sum_dw_splits(const BsmmDwArgs& a, const DwParams& p, cudaStream_t stream) {
  return launch_sum_splits<T>(p.partials, static_cast<T*>(a.dw), a.groups, a.nnz * BS * BS, p.row_splits, stream);
}

template <typename T, int BS, bool PRECISE, bool GATHER = false>
cudaError_t launch_dw_variant(const BsmmDwArgs& a, cudaStream_t stream) {
  using Cfg = DwConfig<T, BS>;
  DwParams p;
  fill_dw_params(p, a);
  // The handlers guarantee nnz < 2^31, groups <= 65535 and row_splits <= 65535.
  const dim3 grid(static_cast<unsigned>(a.nnz), static_cast<unsigned>(a.groups),
                  static_cast<unsigned>(p.row_splits));
  cudaError_t err = launch_kernel(bsmm_dw_kernel<T, BS, PRECISE, GATHER>, grid, dim3(Cfg::kThreads),
                                  Cfg::kSmemBytes, stream, p);
  if (err != cudaSuccess || p.row_splits == 1) return err;
  return sum_dw_splits<T, BS>(a, p, stream);
}

// The conv halo dw kernel (conv/bsconv_halo_dw_kernel.cuh) serves a conv's weight
// gradient on the halo fwd / dx kernel's geometries (halo_geometry), 16-bit, bs 16
// or 32, up to 9 taps (its accumulators), on devices whose blocks may take its
// shared memory (148-168 KiB: sm_90, and sm_80 at bs 16); JBS_CONV_HALO=0/1 as
// there. The lowering sizes its row splits by the same rule (jbs/_src/lowering.py:
// _conv_halo_dw).
template <typename T, int BS>
bool conv_halo_dw_geometry(const BsmmDwArgs& a, ConvHaloDwParams* hp) {
  if constexpr (kIs16Bit<T> && (BS == 16 || BS == 32)) {
    using Cfg = ConvHaloDwConfig<T, BS>;
    const int taps = a.gather.taps_h * a.gather.taps_w;
    int64_t lo = 0, hi = 0;
    if (!a.gathered || taps > Cfg::kMaxTaps || a.nnz % taps != 0 || !halo_geometry(a.gather, &lo, &hi) ||
        Cfg::kRows + hi - lo > Cfg::kHaloRows) {
      return false;
    }
    set_halo_fields(hp, a.nnz, taps, lo, hi, Cfg::kRows);
    return true;
  }
  return false;
}

template <typename T, int BS>
bool use_conv_halo_dw(const BsmmDwArgs& a) {
  ConvHaloDwParams unused;
  const int env = conv_halo_env();
  if (env == 0 || !conv_halo_dw_geometry<T, BS>(a, &unused)) return false;
  if constexpr (kIs16Bit<T> && (BS == 16 || BS == 32)) {
    if (ConvHaloDwConfig<T, BS>::kSmemBytes + 1024 > max_smem_per_block_optin()) return false;
  }
  return env == 1 || a.gather.taps() >= 2;
}

template <typename T, int BS>
cudaError_t launch_conv_halo_dw_variant(const BsmmDwArgs& a, cudaStream_t stream) {
  if constexpr (kIs16Bit<T> && (BS == 16 || BS == 32)) {
    using Cfg = ConvHaloDwConfig<T, BS>;
    ConvHaloDwParams p;
    fill_dw_params(p, a);
    if (!conv_halo_dw_geometry<T, BS>(a, &p)) return cudaErrorNotSupported;  // use_conv_halo_dw said yes
    const dim3 grid(static_cast<unsigned>(p.nnz_per_tap), static_cast<unsigned>(a.groups),
                    static_cast<unsigned>(p.row_splits));
    cudaError_t err = launch_kernel(bsconv_halo_dw_kernel<T, BS>, grid, dim3(Cfg::kThreads), Cfg::kSmemBytes,
                                    stream, p);
    if (err != cudaSuccess || p.row_splits == 1) return err;
    return sum_dw_splits<T, BS>(a, p, stream);
  } else {
    return cudaErrorNotSupported;  // unreachable: use_conv_halo_dw() is false for these
  }
}

// The conv row group dw kernel (conv/bsconv_row_group_dw_kernel.cuh) serves the
// halo dw kernel's bs 16 and 32, 16-bit convs whose band halo fits (band_halo_shape:
// images 8, 16 or 32 pixels wide) with 4, 6 or 9 taps (its accumulators, a template
// parameter), given the row groups table. JBS_CONV_ROW_GROUP_DW=0 leaves them to the
// halo dw kernel. The lowering sizes its row splits by the same rule
// (jbs/_src/lowering.py: _conv_row_group_dw).
inline int conv_row_group_dw_env() { return env_switch("JBS_CONV_ROW_GROUP_DW"); }

// The row group dw kernel's TMA swizzle: as wide as a pixel's BS channels
// (ConvRowGroupDwConfig::kSwizzleBytes), for dy's rows and the halo's alike.
template <int BS>
constexpr CUtensorMapSwizzle row_group_dw_swizzle() {
  return BS == 32 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_32B;
}

// The TMA map of the row group dw kernel's dy ((weight groups,) pixels, channels) as
// (channels, pixels, group), in boxes of one block column and a 256-pixel tile, swizzled as
// wide as a box row (ConvRowGroupDwConfig::dy_swizzle). TMA's coordinates are 32-bit: false
// from 2^31 pixels on (the halo dw kernel takes those).
template <int BS>
bool conv_row_group_dw_dy_map(const BsmmDwArgs& a, CUtensorMap* map) {
  if (a.rows >= (int64_t{1} << 31)) return false;
  const bool one_group = a.groups == 1 || a.dy_group_stride == 0;  // (stride 0: every group reads the same dy)
  const uint64_t row_bytes = static_cast<uint64_t>(a.dy_cols) * 2;
  const uint64_t dims[5] = {static_cast<uint64_t>(a.dy_cols), static_cast<uint64_t>(a.rows),
                            one_group ? 1u : static_cast<uint64_t>(a.groups), 1, 1};
  const uint64_t group_bytes = one_group ? row_bytes * static_cast<uint64_t>(a.rows)
                                         : static_cast<uint64_t>(a.dy_group_stride) * 2;
  const uint64_t strides[4] = {row_bytes, group_bytes, group_bytes, group_bytes};
  const uint32_t box[5] = {BS, 256, 1, 1, 1};
  return encode_tensor_map_16bit(map, a.dy, dims, strides, box, row_group_dw_swizzle<BS>());
}

// The TMA map of the row group dw kernel's x ((weight groups,) images, H, W, channels) as
// (channels, W, H, images, groups), in boxes of one block row's channels and a tile's band
// halo (conv/band_halo.cuh: `bands` images' band_rows rows of kBandPad + W pixels from column
// -kBandPad), swizzled as wide as a pixel's BS channels (ConvRowGroupDwConfig::halo_elems):
// the map's bounds fill the pads, the rows outside the image and the images past the batch
// with zeros. TMA's coordinates are 32-bit: false from 2^31 images on.
template <int BS>
bool conv_row_group_dw_x_map(const BsmmDwArgs& a, const BandHaloShape& band, CUtensorMap* map) {
  const RowGather& g = a.gather;
  const int64_t image_pixels = g.row_pixels();
  const int64_t images = a.rows / image_pixels;
  if (a.rows % image_pixels != 0 || images >= (int64_t{1} << 31)) return false;
  const bool one_group = a.groups == 1 || a.x_group_stride == 0;  // (stride 0: every group reads the same x)
  const uint64_t pixel_bytes = static_cast<uint64_t>(a.x_cols) * 2;
  const uint64_t image_bytes = pixel_bytes * static_cast<uint64_t>(image_pixels);
  const uint64_t dims[5] = {static_cast<uint64_t>(a.x_cols), static_cast<uint64_t>(g.rows_w),
                            static_cast<uint64_t>(g.rows_h), static_cast<uint64_t>(images),
                            one_group ? 1u : static_cast<uint64_t>(a.groups)};
  const uint64_t group_bytes = one_group ? image_bytes * static_cast<uint64_t>(images)
                                         : static_cast<uint64_t>(a.x_group_stride) * 2;
  const uint64_t strides[4] = {pixel_bytes, pixel_bytes * static_cast<uint64_t>(g.rows_w), image_bytes, group_bytes};
  const uint32_t bands = static_cast<uint32_t>(256 / g.rows_w / band.image_rows);
  const uint32_t box[5] = {BS, static_cast<uint32_t>(g.rows_w + kBandPad), static_cast<uint32_t>(band.band_rows), bands,
                           1};
  return encode_tensor_map_16bit(map, a.x, dims, strides, box, row_group_dw_swizzle<BS>());
}

template <typename T, int BS>
bool conv_row_group_dw_geometry(const BsmmDwArgs& a, ConvRowGroupDwParams* hp) {
  if constexpr (kIs16Bit<T> && (BS == 16 || BS == 32)) {
    using Cfg = ConvRowGroupDwConfig<T, BS>;
    const int64_t taps = a.gather.taps();
    if (!a.gathered || a.row_groups == nullptr || a.row_group_size != Cfg::kGroup || a.num_row_groups <= 0 ||
        (taps != 4 && taps != 6 && taps != 9) || a.nnz % taps != 0 || a.num_row_groups > a.nnz / taps ||
        !band_halo_shape(a.gather, BS / 8, &hp->band)) {
      return false;
    }
    // The halo's slots are exactly its bands' rows: it lands as one box (ConvRowGroupDwConfig::halo_elems).
    const int row_slots = a.gather.rows_w + kBandPad;
    hp->band.plane_slots = 256 / a.gather.rows_w / hp->band.image_rows * hp->band.band_rows * row_slots;
    const int most_stages = Cfg::stages_for(static_cast<int>(taps), hp->band.plane_slots);
    if (most_stages == 0) return false;
    // JBS_CONV_ROW_GROUP_DW_STAGES=max: as many as fit (ConvRowGroupDwConfig::kStages says why not).
    const char* stages_env = std::getenv("JBS_CONV_ROW_GROUP_DW_STAGES");
    hp->stages = stages_env != nullptr && std::strcmp(stages_env, "max") == 0 ? most_stages : Cfg::kStages;
    hp->nnz_per_tap = static_cast<int>(a.nnz / taps);
    hp->row_groups = a.row_groups;
    // (no rows: no tiles, no boxes)
    return a.rows <= 0 || (conv_row_group_dw_dy_map<BS>(a, &hp->dy_map) &&
                           conv_row_group_dw_x_map<BS>(a, hp->band, &hp->x_map));
  }
  return false;
}

template <typename T, int BS>
bool use_conv_row_group_dw(const BsmmDwArgs& a) {
#ifdef JBS_HAVE_SM90A
  ConvRowGroupDwParams unused;
  return conv_row_group_dw_env() != 0 && conv_halo_env() != 0 && device_is_sm90() &&
         conv_row_group_dw_geometry<T, BS>(a, &unused);
#else
  return false;
#endif
}

template <typename T, int BS>
cudaError_t launch_conv_row_group_dw_variant(const BsmmDwArgs& a, cudaStream_t stream) {
  if constexpr (kIs16Bit<T> && (BS == 16 || BS == 32)) {
    using Cfg = ConvRowGroupDwConfig<T, BS>;
    ConvRowGroupDwParams p;
    fill_dw_params(p, a);
    if (!conv_row_group_dw_geometry<T, BS>(a, &p)) return cudaErrorNotSupported;  // use_conv_row_group_dw said yes
    const dim3 grid(static_cast<unsigned>(a.num_row_groups), static_cast<unsigned>(a.groups),
                    static_cast<unsigned>(p.row_splits));
    const int taps = static_cast<int>(a.gather.taps());
    auto launch = [&](auto taps_c) {
      const auto kernel = bsconv_row_group_dw_kernel<T, BS, decltype(taps_c)::value>;
      // The size varies with the taps and the image, the opt-in may be set only once: set it to the most.
      const cudaError_t err = opt_in_smem(reinterpret_cast<const void*>(kernel), Cfg::kOptInBytes);
      if (err != cudaSuccess) return err;
      return launch_kernel(kernel, grid, dim3(Cfg::kThreads),
                           static_cast<size_t>(Cfg::smem_bytes(taps, p.band.plane_slots, p.stages)), stream, p);
    };
    const cudaError_t err = taps == 9   ? launch(std::integral_constant<int, 9>{})
                            : taps == 6 ? launch(std::integral_constant<int, 6>{})
                                        : launch(std::integral_constant<int, 4>{});
    if (err != cudaSuccess || p.row_splits == 1) return err;
    return sum_dw_splits<T, BS>(a, p, stream);
  } else {
    return cudaErrorNotSupported;  // unreachable: use_conv_row_group_dw() is false for these
  }
}

// The panel dw kernel (matmul/bsmm_panel_dw_kernel.cuh) serves the weight gradient with
// many rows and few channels: two row panels of x and dy (PanelDwConfig::kTM rows), every
// channel of both, must fit in shared memory beside the tables (PanelDwConfig::fits: up
// to ~830 channels of x and dy together at bs 16, ~1700 at bs 32).
// 16-bit types, bs 16 or 32, on sm_90; x a plain matrix: the matmul's, or a 1x1 conv's
// pixels when its gather is the identity. By default where every SM gets 64 rows, the
// large-N dw kernel would read x and dy 1.5 times or more, and the lowering's row splits
// give at least half the SMs a CTA; JBS_PANEL_DW=0 turns it off, =1 takes it wherever it
// can run. The lowering sizes the row splits by the same rule (jbs/_src/lowering.py:
// _panel_dw_sets).
inline int panel_dw_env() { return env_switch("JBS_PANEL_DW"); }

template <typename T, int BS>
bool panel_dw_geometry(const BsmmDwArgs& a, PanelDwParams* p) {
  if constexpr (kIs16Bit<T> && (BS == 16 || BS == 32)) {
    using Cfg = PanelDwConfig<T, BS>;
    if (a.rows <= 0 || a.rows > int64_t{INT32_MAX} - Cfg::kTM || a.nnz > INT32_MAX || a.x_cols % BS != 0 ||
        a.dy_cols % BS != 0 || (a.gathered && !gather_is_identity(a.gather))) {
      return false;
    }
    p->x_chunks = static_cast<int>((a.x_cols + 63) / 64);
    p->dy_chunks = static_cast<int>((a.dy_cols + 63) / 64);
    p->c_blocks = static_cast<int>(a.x_cols / BS);
    p->k_blocks = static_cast<int>(a.dy_cols / BS);
    if (!Cfg::fits(p->x_chunks, p->dy_chunks, p->c_blocks, p->k_blocks)) return false;
    p->table_bytes = static_cast<int>(Cfg::table_bytes(p->x_chunks, p->dy_chunks, p->c_blocks, p->k_blocks));
    p->panel_bytes = static_cast<int>(Cfg::panel_bytes(p->x_chunks, p->dy_chunks, p->c_blocks, p->k_blocks));
    if (!encode_panel_map(&p->x_map, a.x, a.x_cols, a.rows, a.x_group_stride, a.groups, Cfg::kTM, &p->x_group_step) ||
        !encode_panel_map(&p->dy_map, a.dy, a.dy_cols, a.rows, a.dy_group_stride, a.groups, Cfg::kTM,
                          &p->dy_group_step)) {
      return false;
    }
    p->items = a.items;
    p->dw = a.dw;
    p->partials = a.partials;
    p->row_splits = a.partials != nullptr && a.row_splits > 1 ? a.row_splits : 1;
    p->row_tiles = (a.rows + Cfg::kTM - 1) / Cfg::kTM;
    p->dw_group_stride = a.dw_group_stride;
    p->nnz = static_cast<int>(a.nnz);
    p->sets = Cfg::sets(a.nnz, p->x_chunks, p->k_blocks);
    return true;
  }
  return false;
}

// Whether the panel dw kernel runs; if so, *p holds its parameters.
template <typename T, int BS>
bool use_panel_dw(const BsmmDwArgs& a, PanelDwParams* p) {
#ifdef JBS_HAVE_SM90A
  const int env = panel_dw_env();
  if (env == 0 || !device_is_sm90()) return false;
  // By default also where the large-N dw kernel would read x and dy 1.5 times or more
  // (each block reads its BS columns of both): at 1/8, bs 32, 320 -> 320 (1.2 times) that
  // kernel took 41 us, this one 45 (benchmarks/NOTES.md, session 20). These cheap checks
  // first: the geometry encodes two tensor maps through the driver.
  if (env < 0 && (a.rows < int64_t{64} * a.num_sms || 2 * a.nnz * BS * 2 < 3 * (a.x_cols + a.dy_cols))) return false;
  if (!panel_dw_geometry<T, BS>(a, p)) return false;
  return env == 1 || int64_t{2} * p->sets * p->row_splits * a.groups >= a.num_sms;
#else
  return false;
#endif
}

template <typename T, int BS>
cudaError_t launch_panel_dw_variant(const BsmmDwArgs& a, const PanelDwParams& p, cudaStream_t stream) {
  if constexpr (kIs16Bit<T> && (BS == 16 || BS == 32)) {
    using Cfg = PanelDwConfig<T, BS>;
    const dim3 grid(static_cast<unsigned>(p.sets * p.row_splits), static_cast<unsigned>(a.groups));
    const auto kernel = bsmm_panel_dw_kernel<T, BS>;
    cudaError_t err = opt_in_smem(reinterpret_cast<const void*>(kernel), Cfg::kSmemBytes);
    if (err != cudaSuccess) return err;
    err = launch_kernel(kernel, grid, dim3(Cfg::kThreads), Cfg::kSmemBytes, stream, p);
    if (err != cudaSuccess || p.row_splits == 1) return err;
    DwParams sums;
    fill_dw_params(sums, a);
    return sum_dw_splits<T, BS>(a, sums, stream);
  } else {
    return cudaErrorNotSupported;  // unreachable: use_panel_dw() is false for these
  }
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
  return stream_big(a.nnz, static_cast<int64_t>(a.num_sms) * 2)
             ? launch_dw_stream_variant<T, BS, TN, PRECISE, true>(a, stream)
             : launch_dw_stream_variant<T, BS, TN, PRECISE, false>(a, stream);
}

template <typename T>
cudaError_t launch_bsmm_dw(const BsmmDwArgs& a, cudaStream_t stream) {
  // rows == 0 still launches: dw must be written (with zeros).
  if (a.nnz <= 0 || a.groups <= 0) return cudaSuccess;
  return dispatch_block_size(a.block_size, [&](auto bs_c) {
    constexpr int BS = decltype(bs_c)::value;
    return dispatch_bool(a.precise && std::is_same_v<T, float>, [&](auto pr_c) {
      constexpr bool PRECISE = decltype(pr_c)::value && std::is_same_v<T, float>;
      if (PanelDwParams pp; use_panel_dw<T, BS>(a, &pp)) return launch_panel_dw_variant<T, BS>(a, pp, stream);
      if (a.gathered && use_conv_row_group_dw<T, BS>(a)) return launch_conv_row_group_dw_variant<T, BS>(a, stream);
      if (a.gathered && use_conv_halo_dw<T, BS>(a)) return launch_conv_halo_dw_variant<T, BS>(a, stream);
      if (a.gathered) return launch_dw_variant<T, BS, PRECISE, true>(a, stream);
      if (a.rows >= 1 && a.rows <= kStreamMaxRowsHost) {
        switch (stream_row_tile_host(a.rows)) {
          case 16:
            return launch_dw_stream<T, BS, 16, PRECISE>(a, stream);
          case 32:
            return launch_dw_stream<T, BS, 32, PRECISE>(a, stream);
          default:
            return launch_dw_stream<T, BS, 64, PRECISE>(a, stream);
        }
      }
      return launch_dw_variant<T, BS, PRECISE>(a, stream);
    });
  });
}

}  // namespace jbs
