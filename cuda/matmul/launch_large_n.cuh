// The dispatch's paths for many rows (compute-bound, and mid N): the column-group kernels
// (mma.sync, wgmma, warp-specialized wgmma, TMA-fed), each with the rule that says when it
// serves a call, and their launches.
#pragma once

#include <algorithm>
#include <type_traits>

#include "common/launch.cuh"
#include "common/tma.cuh"
#include "matmul/bsmm_group_kernel.cuh"
#include "matmul/bsmm_group_tma_kernel.cuh"
#include "matmul/bsmm_group_wgmma_kernel.cuh"
#include "matmul/bsmm_group_ws_kernel.cuh"
#include "matmul/launch_common.cuh"
#include "matmul/packed_rows.cuh"
#include "matmul/sum_splits.cuh"
#include "matmul/transpose_blocks.cuh"

namespace jbs {

inline int groups_env() { return env_switch("JBS_GROUPS"); }

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

// Whether the mma.sync column-group kernel's shared memory fits the device (fp32 bs 32 takes
// ~108 KiB: not on an sm_86 / sm_89, whose blocks opt in to 99).
template <typename T, int BS, bool TRANS>
bool group_kernel_fits() {
  if constexpr (BS >= 16 && (sizeof(T) == 2 || BS <= 32)) {
    return smem_fits(GroupConfig<T, BS, TRANS>::kSmemBytes);
  } else {
    return false;
  }
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

}  // namespace jbs
