// Thin wrappers around the PTX instructions the matmul kernels are built from:
// asynchronous global->shared copies (cp.async), shared->register matrix loads
// (ldmatrix) and warp-level tensor-core MMAs (mma.sync). All need sm_80+.
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/dtype.cuh"

namespace jbs {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---------------------------------------------------------------------------
// cp.async: 16-byte copies that bypass L1 (.cg), so streamed weight blocks do
// not evict anything useful. Only the first src_bytes (0 or 16 here) are read
// and the rest of the 16 destination bytes are zero-filled; `src` must still
// be a valid address when src_bytes is 0.
// ---------------------------------------------------------------------------
__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* gmem_src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem_dst)),
               "l"(gmem_src), "r"(src_bytes)
               : "memory");
}

// One 4-byte element (.ca: 4-byte copies cannot bypass L1); for writes that
// scatter single elements, e.g. a block transposed on its way into shared memory.
__device__ __forceinline__ void cp_async_4(void* smem_dst, const void* gmem_src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_u32(smem_dst)), "l"(gmem_src) : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most N committed groups of this thread are still in flight.
// The "memory" clobber keeps the compiler from hoisting shared-memory reads of
// the awaited stage above the wait.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ---------------------------------------------------------------------------
// ldmatrix: each lane supplies the shared address of one 16-byte row of an 8x8
// matrix of 16-bit values (lanes 8i..8i+7 for matrix i); lane l receives, per
// matrix, the two values at row l/4, columns 2(l%4) and 2(l%4)+1 (.trans:
// rows 2(l%4), 2(l%4)+1 of column l/4). This is exactly the mma.sync fragment
// layout, so no register shuffling is needed.
// ---------------------------------------------------------------------------
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

// The same from a shared-memory address already in the state space (common/../matmul/
// swizzled_fragments.cuh keeps its fragment offsets as such).
__device__ __forceinline__ void ldsm_x4_shared(uint32_t (&r)[4], uint32_t shared_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address));
}

__device__ __forceinline__ void ldsm_x4_t_shared(uint32_t (&r)[4], uint32_t shared_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address));
}

// The store counterpart (sm_90): lane l gives the row addresses as for ldsm_x4, and
// register j holds matrix j in the fragment layout above; .trans stores each
// matrix transposed (register row r, column c to memory row c, column r).
__device__ __forceinline__ void stsm_x4_t(void* p, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n"
               ::"r"(smem_u32(p)), "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
#else
  __trap();
#endif
}

// Not transposed: register j's fragment goes to matrix j as it is (its rows at the row
// addresses of lanes 8 j .. 8 j + 7), i.e. an mma.sync accumulator tile lands row-major.
__device__ __forceinline__ void stsm_x4(void* p, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
               ::"r"(smem_u32(p)), "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void ldsm_x2(uint32_t (&r)[2], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_u32(p)));
}

__device__ __forceinline__ void ldsm_x2_t(uint32_t (&r)[2], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_u32(p)));
}

__device__ __forceinline__ void ldsm_x1(uint32_t& r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n"
               : "=r"(r)
               : "r"(smem_u32(p)));
}

__device__ __forceinline__ void ldsm_x1_t(uint32_t& r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
               : "=r"(r)
               : "r"(smem_u32(p)));
}

// ---------------------------------------------------------------------------
// mma.sync with fp32 accumulators, D = A*B + D in place. Fragment layouts
// (g = lane/4, t = lane%4), A row-major MxK, B "col" i.e. indexed [k][n]:
//   m16n8k16 (16-bit): a0:(g, 2t..2t+1) a1:(g+8, 2t..) a2:(g, 2t+8..) a3:(g+8, 2t+8..)
//                      b0:(k=2t..2t+1, n=g) b1:(k=2t+8.., n=g)
//   m16n8k8  (16-bit): a0:(g, 2t..)  a1:(g+8, 2t..)   b0:(k=2t.., n=g)
//   m16n8k8  (tf32):   a0:(g, t) a1:(g+8, t) a2:(g, t+4) a3:(g+8, t+4)
//                      b0:(k=t, n=g) b1:(k=t+4, n=g)
//   D: d0,d1:(g, 2t..2t+1)  d2,d3:(g+8, 2t..2t+1)
// ---------------------------------------------------------------------------
template <typename T>
__device__ __forceinline__ void mma_16x8x16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                            uint32_t b1) {
  static_assert(kIs16Bit<T>, "mma_16x8x16 takes bf16 or f16 operands");
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

template <typename T>
__device__ __forceinline__ void mma_16x8x8(float (&d)[4], const uint32_t (&a)[2], uint32_t b0) {
  static_assert(kIs16Bit<T>, "mma_16x8x8 takes bf16 or f16 operands");
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5}, {%6}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(b0));
  } else {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5}, {%6}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(b0));
  }
}

__device__ __forceinline__ void mma_16x8x8_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                uint32_t b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Round-to-nearest fp32 -> tf32 (the tensor core would otherwise truncate the
// low 13 mantissa bits, which biases the result).
__device__ __forceinline__ uint32_t to_tf32(float v) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(v));
  return r;
}

// Splits v into big + small, both tf32, with v - (big + small) ~ 2^-22 |v|.
// Three tf32 MMAs (big*big + big*small + small*big) then give close to fp32
// accuracy: the dropped small*small term is ~2^-22 relative.
__device__ __forceinline__ void split_tf32(float v, uint32_t& big, uint32_t& small) {
  big = to_tf32(v);
  small = to_tf32(v - __uint_as_float(big));
}

// Programmatic dependent launch (sm_90). A kernel launched with
// launch_kernel_after (common/launch.cuh) may start while the kernel before it
// on the stream still runs, once every CTA of that one has called
// griddep_launch_dependents() or exited; it must call griddep_wait(), which
// returns when that kernel has completed and its memory writes are visible,
// before it reads anything the earlier kernel writes. Both are no-ops in a
// kernel launched the ordinary way, and compile to nothing before sm_90.
__device__ __forceinline__ void griddep_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void griddep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

}  // namespace jbs
