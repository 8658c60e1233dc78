// Tiled TMA loads (cp.async.bulk.tensor) of boxes of a 5-D tensor into shared
// memory, completing on an mbarrier (common/mbarrier.cuh), the stores of boxes
// back, and the host side that encodes the tensor map.
//
// Why: a conv halo is a box of an NHWC image batch (rows x pixels x 8
// channels) whose parts outside the image are zeros. One TMA instruction moves
// it, zero-filling what lies out of bounds (negative coordinates included),
// where 16-byte cp.async copies cost one instruction sequence per 16 bytes.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/mbarrier.cuh"
#include "common/ptx.cuh"

namespace jbs {

// The box at coordinates (c0 innermost .. c4) of `map` (a __grid_constant__ kernel
// parameter) into dst (128-byte aligned), counted on bar's transaction bytes.
__device__ __forceinline__ void tma_load_5d(void* dst, const CUtensorMap* map, int c0, int c1, int c2, int c3, int c4,
                                            uint64_t* bar) {
#ifdef JBS_MBARRIER_AVAILABLE
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5, "
      "%6}], [%7];\n" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(smem_u32(bar))
      : "memory");
#else
  __trap();
#endif
}

// The box at (c0 .. c4) of `map` from src (aligned to its swizzle's span), in the calling
// thread's bulk async-group (commit, then wait with common/mbarrier.cuh's
// bulk_wait_group_read before src is written again). Coordinates past the tensor's end are
// not written. Writes to src must be made visible to it by fence_proxy_async first.
__device__ __forceinline__ void tma_store_5d(const CUtensorMap* map, const void* src, int c0, int c1, int c2, int c3,
                                             int c4) {
#ifdef JBS_MBARRIER_AVAILABLE
  asm volatile(
      "cp.async.bulk.tensor.5d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3, %4, %5}], [%6];\n" ::"l"(
          reinterpret_cast<uint64_t>(map)),
      "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(smem_u32(src))
      : "memory");
#else
  __trap();
#endif
}

// A 5-D tensor of 16-bit elements (dims innermost first, strides in bytes of dims 1..4)
// read in boxes of box[0..4] elements; out-of-bounds elements read as zero (bf16 and fp16
// alike: the copy moves bytes). With CU_TENSOR_MAP_SWIZZLE_128B a box row of 128 bytes
// lands with its 16-byte chunks permuted as a wgmma descriptor of that swizzle mode reads
// them (common/wgmma.cuh: wgmma_desc_sw128). False where the driver refuses it
// (alignment, sizes) or has no tensor maps.
inline bool encode_tensor_map_16bit(CUtensorMap* map, const void* base, const uint64_t (&dims)[5],
                                    const uint64_t (&strides)[4], const uint32_t (&box)[5],
                                    CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE) {
  using Encode = PFN_cuTensorMapEncodeTiled_v12000;
  static const Encode encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();  // no tensor maps (the callers take another path): not an error to report later
      return static_cast<Encode>(nullptr);
    }
    return reinterpret_cast<Encode>(fn);
  }();
  if (encode == nullptr) return false;
  cuuint64_t size[5], stride[4];
  cuuint32_t box_dims[5], unit[5];
  for (int d = 0; d < 5; ++d) size[d] = dims[d], box_dims[d] = box[d], unit[d] = 1;
  for (int d = 0; d < 4; ++d) stride[d] = strides[d];
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 5, const_cast<void*>(base), size, stride, box_dims, unit,
                CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// A contiguous span as `rows` rows of 128 bytes from base, in boxes of box_rows rows, with the
// 128-byte swizzle: a box lands as common/swizzle.cuh's swizzle_128b places it (the small-N
// walk's tile-major activation tiles and weight blocks). The map's 16-bit elements only count
// bytes: fp32 spans move unchanged.
inline bool encode_swizzled_rows_map(CUtensorMap* map, const void* base, int64_t rows, int box_rows) {
  const uint64_t dims[5] = {64, static_cast<uint64_t>(rows), 1, 1, 1};
  const uint64_t span = 128 * static_cast<uint64_t>(rows);
  const uint64_t strides[4] = {128, span, span, span};
  const uint32_t box[5] = {64, static_cast<uint32_t>(box_rows), 1, 1, 1};
  return encode_tensor_map_16bit(map, base, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B);
}

// A 16-bit activation (`groups` x `rows` x `cols`, row pitch `ld` elements, groups
// `group_stride` elements apart) as boxes of box_rows x box_cols elements, each landing as
// box_rows rows of box_cols * 2 bytes (32, 64 or 128) with the swizzle of that width
// (common/swizzle.cuh: swizzle_rows); rows past `rows` read as zeros. The small-N walk's
// activation tiles straight from the operand (bsmm_stream_even_kernel.cuh: DIRECT_TILES).
// False where TMA cannot address it (pitches not multiples of 16 bytes, a misaligned base).
inline bool encode_activation_tiles_map(CUtensorMap* map, const void* base, int64_t groups, int64_t rows,
                                        int64_t cols, int64_t ld, int64_t group_stride, int box_rows, int box_cols) {
  const int row_bytes = 2 * box_cols;
  if ((reinterpret_cast<uintptr_t>(base) & 15) != 0 || (2 * ld) % 16 != 0 || (2 * group_stride) % 16 != 0 ||
      (row_bytes != 32 && row_bytes != 64 && row_bytes != 128)) {
    return false;
  }
  const uint64_t dims[5] = {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows), static_cast<uint64_t>(groups),
                            1, 1};
  const uint64_t pitch = 2 * static_cast<uint64_t>(ld);
  const uint64_t group_pitch = groups > 1 ? 2 * static_cast<uint64_t>(group_stride) : pitch * rows;
  const uint64_t strides[4] = {pitch, group_pitch, group_pitch * groups, group_pitch * groups};
  const uint32_t box[5] = {static_cast<uint32_t>(box_cols), static_cast<uint32_t>(box_rows), 1, 1, 1};
  const CUtensorMapSwizzle swizzle = row_bytes == 128  ? CU_TENSOR_MAP_SWIZZLE_128B
                                     : row_bytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                                       : CU_TENSOR_MAP_SWIZZLE_32B;
  return encode_tensor_map_16bit(map, base, dims, strides, box, swizzle);
}

}  // namespace jbs
