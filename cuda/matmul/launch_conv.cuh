// The dispatch's convolution paths (implicit GEMM with a shared halo): the halo, shared-
// memory halo and strip kernels of the forward and input gradient, and the halo and row-group
// kernels of the weight gradient, each with the rule that says when it serves a call and the
// geometry and TMA maps it needs.
#pragma once

#include "common/launch.cuh"
#include "common/tma.cuh"
#include "conv/bsconv_halo_dw_kernel.cuh"
#include "conv/bsconv_halo_kernel.cuh"
#include "conv/bsconv_halo_ss_kernel.cuh"
#include "conv/bsconv_row_group_dw_kernel.cuh"
#include "conv/bsconv_strip_kernel.cuh"
#include "matmul/launch_common.cuh"

namespace jbs {

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

}  // namespace jbs
