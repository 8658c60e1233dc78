// The dynamic shared memory of every kernel, 128-byte aligned.
#pragma once

namespace jbs {

// All kernels of a translation unit share one dynamic shared-memory symbol, and
// it starts after the kernel's static __shared__ variables, at the declared
// alignment. At 16 bytes, a kernel with 16.7 KB of static shared memory had its
// stages start at 80 mod 128, and its TMA bulk copies into them took ~1.6x as
// many L2 requests for the same bytes: the small-N even-split kernel ran 93 us
// instead of 63 at the seed shape (benchmarks/NOTES.md, session 12). 128 bytes
// keeps every stage on whole L2 lines and shared-memory wavefronts; the wgmma
// kernels, which have no static shared memory, start at offset 0 either way.
__device__ __forceinline__ unsigned char* dynamic_smem() {
  extern __shared__ __align__(128) unsigned char jbs_dynamic_smem[];
  return jbs_dynamic_smem;
}

}  // namespace jbs
