// Definitions of launch_bsmm_blocks<T> / launch_bsmm_dw<T>: the order in which the
// dispatch asks each path whether it serves a call (panel, conv, large N, small N, each
// with its rule in launch_<path>.cuh), else the generic kernels (launch_common.cuh), and
// the compile-time variant (block size, transpose, row tile, precision) it launches.
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
// (every kernel the dispatch launches, above; the paths' rules and launches, below)
#include "matmul/launch_common.cuh"
#include "matmul/launch_conv.cuh"
#include "matmul/launch_large_n.cuh"
#include "matmul/launch_panel.cuh"
#include "matmul/launch_small_n.cuh"

namespace jbs {

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
        if (use_groups<T, BS>(a) && group_kernel_fits<T, BS, TRANS>()) {
          return a.gathered ? launch_group_variant<T, BS, TRANS, PRECISE, true>(a, stream)
                            : launch_group_variant<T, BS, TRANS, PRECISE, false>(a, stream);
        }
        if (a.gathered) {
          // Convolutions have many rows (pixels): one variant, the largest row tile.
          constexpr int kTile = (sizeof(T) == 4 && BS == 64) ? 64 : 128;
          return launch_blocks_variant<T, BS, TRANS, kTile, PRECISE, true>(a, stream);
        }
        if (a.chunks != nullptr && a.rows <= kStreamMaxRowsHost) {
          bool fits = true;  // false where no stream kernel fits the device's shared memory (pre-Hopper)
          const cudaError_t err = dispatch_stream_row_tile(a.rows, [&](auto tn_c) {
            constexpr int TN = decltype(tn_c)::value;
            if constexpr (kIs16Bit<T> && BS <= 32 && TN <= 32) {
              if (use_stream_even_group<T, BS>(a)) return launch_stream_even_group_variant<T, BS, TRANS, TN>(a, stream);
            }
            if constexpr (BS >= 16 && !PRECISE) {
              if (use_stream_even<T, BS>(a)) return launch_stream_even_variant<T, BS, TRANS, TN>(a, stream);
            }
            if (use_stream_ws<T, BS>(a)) return launch_stream_ws_variant<T, BS, TRANS, TN, PRECISE>(a, stream);
            if (use_stream_groups<T, BS>(a) && smem_fits(StreamGroupConfig<T, BS, TRANS, TN>::kSmemBytes)) {
              return launch_stream_group_variant<T, BS, TRANS, TN, PRECISE>(a, stream);
            }
            if (stream_big(a.nnz, a.num_chunks) && smem_fits(StreamConfig<T, BS, TRANS, TN, true>::kSmemBytes)) {
              return launch_stream_variant<T, BS, TRANS, TN, PRECISE, true>(a, stream);
            }
            if (smem_fits(StreamConfig<T, BS, TRANS, TN, false>::kSmemBytes)) {
              return launch_stream_variant<T, BS, TRANS, TN, PRECISE, false>(a, stream);
            }
            fits = false;
            return cudaSuccess;
          });
          if (fits) return err;
          // (else the generic kernels below, whose tiles fit every supported GPU)
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
