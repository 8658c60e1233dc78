// The dispatch's panel paths (many rows, small weights: every weight block resident in
// shared memory): the panel kernel of the forward and input gradient and the panel kernel of
// the weight gradient, each with the rule that says when it serves a call.
#pragma once

#include "common/launch.cuh"
#include "common/tma.cuh"
#include "matmul/bsmm_panel_dw_kernel.cuh"
#include "matmul/bsmm_panel_kernel.cuh"
#include "matmul/launch_common.cuh"

namespace jbs {

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

}  // namespace jbs
