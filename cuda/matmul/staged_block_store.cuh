// Writing one weight-gradient block from a warp's mma.sync accumulators to global memory
// through a staging block in shared memory (sm_90): the fragments go into the staging block in
// the output type and the block's row-major layout (stmatrix for 16-bit types, float2 stores
// for fp32), then the block leaves whole, in one of two ways (StagedWrite):
//  * kLaneStores: the warp's lanes copy it with 16-byte loads and stores, each store
//    instruction a contiguous 512 bytes. The default for 16-bit types.
//  * kBulkCopy: lane 0 copies it with one cp.async.bulk. A slot is written again only once
//    the copy that read it is done (cp.async.bulk.wait_group.read), and the caller waits for
//    all copies (finish_staged_blocks) before its shared memory goes away. The default for fp32.
// A warp rotates through SLOTS staging blocks. Measured on an H100 (benchmarks/NOTES.md,
// session 27; seed shape N = 32, bf16): the lane stores are 1.26-1.45x faster than the bulk
// copies for 512-byte blocks (bs 16) and 1.03-1.06x for 2 KB blocks (bs 32); for fp32 (4 KB
// blocks) they were ~1% slower. Used by the small-N dw kernels (bsmm_stream_kernel.cuh's
// STAGED, bsmm_dw_panel_kernel.cuh).
#pragma once

#include <cstdint>

#include "common/dtype.cuh"
#include "common/mbarrier.cuh"
#include "common/ptx.cuh"

namespace jbs {

enum class StagedWrite { kBulkCopy, kLaneStores };

template <typename T>
inline constexpr StagedWrite kStagedWrite = kIs16Bit<T> ? StagedWrite::kLaneStores : StagedWrite::kBulkCopy;

// Block number `t` of the warp (0, 1, 2, ...: picks the slot and whether to wait) goes from
// acc (MT m-tiles of 16 rows x NT n-tiles of 8 columns: a BS x BS block) to out.
template <typename T, int BS, int MT, int NT, int SLOTS, StagedWrite WRITE = kStagedWrite<T>>
__device__ __forceinline__ void store_staged_block(const float (&acc)[MT][NT][4], T* staging, int t, T* out,
                                                 int lane) {
  static_assert(MT * 16 == BS && NT * 8 == BS, "a whole BS x BS block");
  T* const slot = staging + (t % SLOTS) * (BS * BS);
  if (WRITE == StagedWrite::kBulkCopy && t >= SLOTS) {
    if (lane == 0) bulk_wait_group_read<SLOTS - 1>();
    __syncwarp();
  }
  if constexpr (kIs16Bit<T>) {
    // stmatrix x4 of m-tile mt, n-tiles nt, nt + 1: matrix j = rows 8 (j & 1).. of the m-tile,
    // n-tile nt + (j >> 1): the accumulator fragments as they are.
    const int j = lane >> 3;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int nt = 0; nt < NT; nt += 2) {
        stsm_x4(slot + (mt * 16 + (j & 1) * 8 + (lane & 7)) * BS + (nt + (j >> 1)) * 8,
                pack_pair<T>(acc[mt][nt][0], acc[mt][nt][1]), pack_pair<T>(acc[mt][nt][2], acc[mt][nt][3]),
                pack_pair<T>(acc[mt][nt + 1][0], acc[mt][nt + 1][1]),
                pack_pair<T>(acc[mt][nt + 1][2], acc[mt][nt + 1][3]));
      }
    }
  } else {
    // fp32: the fragments' pairs as float2 (rows of 128 bytes at bs 32: the 8 rows of a store
    // share their banks, 8-way; the bulk copy cannot take padded rows).
    const int r = lane >> 2, c = 2 * (lane & 3);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        *reinterpret_cast<float2*>(slot + (mt * 16 + r) * BS + nt * 8 + c) = make_float2(acc[mt][nt][0], acc[mt][nt][1]);
        *reinterpret_cast<float2*>(slot + (mt * 16 + r + 8) * BS + nt * 8 + c) =
            make_float2(acc[mt][nt][2], acc[mt][nt][3]);
      }
    }
  }
  if constexpr (WRITE == StagedWrite::kLaneStores) {
    __syncwarp();  // every lane's part of the block is staged
    constexpr int kChunks = BS * BS * static_cast<int>(sizeof(T)) / 16;
    const int4* const src = reinterpret_cast<const int4*>(slot);
    int4* const dst = reinterpret_cast<int4*>(out);
#pragma unroll
    for (int i = lane; i < kChunks; i += 32) dst[i] = src[i];
    __syncwarp();  // read before any lane stages a later block into this slot
    return;
  }
  fence_proxy_async();  // the staging writes before the bulk copy's reads
  __syncwarp();
  if (lane == 0) {
    bulk_copy_s2g(out, slot, BS * BS * static_cast<int>(sizeof(T)));
    bulk_commit_group();
  }
}

// Before the warp exits (its staging goes away with the CTA's shared memory): every bulk copy
// has read its block. Lane stores are done when issued.
template <typename T, StagedWrite WRITE = kStagedWrite<T>>
__device__ __forceinline__ void finish_staged_blocks(int lane) {
  if constexpr (WRITE == StagedWrite::kBulkCopy) {
    if (lane == 0) bulk_wait_all();
  }
}

}  // namespace jbs
