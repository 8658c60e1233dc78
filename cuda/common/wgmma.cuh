// Hopper warpgroup MMA (wgmma, sm_90a only): the A operand from registers (RS)
// or shared memory (SS, wgmma_ss), B from shared memory through a matrix
// descriptor, fp32 accumulators.
//
// Layout contract (PTX ISA, "asynchronous warpgroup level matrix"):
//  * A (64 x 16 per instruction, 64 x 8 for tf32): warp w of the warpgroup
//    holds rows 16w..16w+15 in exactly the mma.sync m16n8k16 (tf32: m16n8k8) A
//    fragment (ldsm_x4 of a row-major tile, warp_mma.cuh: load_a_rows).
//  * D (64 x N): warp w's rows 16w.., as N / 8 mma.sync m16n8 accumulator
//    fragments d[nt][4] (so tile_io.cuh: stage_acc stores them unchanged).
//  * B (16 x N, tf32 8 x N) in shared memory without swizzle: "core matrices"
//    of 8 rows of 16 B (8 x 8 16-bit values, 8 x 4 fp32), 128 contiguous bytes;
//    the descriptor gives the byte distance between core matrices adjacent
//    along K (leading, LBO) and along N (stride, SBO). TRANS_B = 0: B is
//    K-major (a core matrix row holds 16 B of k of one n); TRANS_B = 1:
//    N-major (a row holds 8 n of one k; 16-bit types only).
// Callers issue wgmma_fence() after writing A or D registers and before the
// MMAs, wgmma_commit() after them and wgmma_wait<0>() before reading D or
// reusing the shared memory; shared memory written by cp.async must be made
// visible to the MMA's async proxy with fence_proxy_async() (common/mbarrier.cuh)
// first.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "common/mbarrier.cuh"  // fence_proxy_async

namespace jbs {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define JBS_WGMMA_AVAILABLE 1
#endif

__device__ __forceinline__ uint64_t wgmma_desc(const void* smem, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  uint64_t d = 0;
  d |= static_cast<uint64_t>((addr & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>((lbo_bytes & 0x3FFFF) >> 4) << 16;
  d |= static_cast<uint64_t>((sbo_bytes & 0x3FFFF) >> 4) << 32;
  return d;  // base offset 0, swizzle mode 0 (none)
}

// A K-major operand stored as TMA's 128-byte swizzle writes it: rows of 128 bytes (64
// 16-bit values of k), the 16-byte chunks of row r permuted by r % 8, in atoms of 8
// rows (1024 bytes, which must be 1024-byte aligned). The descriptor's stride along m
// or n is one atom; its k-steps are start addresses 32 bytes apart within the row (the
// hardware applies the permutation to the address), so one row holds 4 k-steps.
__device__ __forceinline__ uint64_t wgmma_desc_sw128(const void* smem) {
  return wgmma_desc(smem, 16, 1024) | (uint64_t{1} << 62);  // layout type 1: 128-byte swizzle
}

// A K-major operand stored as TMA's 64-byte swizzle writes it: rows of 64 bytes (32 16-bit
// values of k), chunk c of a row at address bits 4-5 ^ bits 7-8. The hardware swizzles by
// the absolute shared-memory address, as TMA does, so the start may be any whole row (a conv
// tap's shift) and the stride between 8-row groups along m or n any whole number of rows
// (sbo_bytes; benchmarks/microbench/halo_rows.cu checks both); a k-step is 32 bytes into the row.
__device__ __forceinline__ uint64_t wgmma_desc_sw64(const void* smem, uint32_t sbo_bytes) {
  return wgmma_desc(smem, 16, sbo_bytes) | (uint64_t{2} << 62);  // layout type 2: 64-byte swizzle
}

// An MN-major operand (TRANS_B = 1: a row holds SWIZZLE_BYTES / 2 16-bit values of n for
// one k) stored as TMA's 64- or 32-byte swizzle writes it, with n no wider than one row:
// the 8 rows of an 8-k group are consecutive, the groups sbo_bytes apart. (For MN-major
// swizzled layouts LBO would step along n, from one row-wide atom to the next: unused.) As
// above, the start may be any whole row (the conv row group dw kernel's tap shifts).
template <int SWIZZLE_BYTES>
__device__ __forceinline__ uint64_t wgmma_desc_mn_swizzled(const void* smem, uint32_t sbo_bytes) {
  static_assert(SWIZZLE_BYTES == 64 || SWIZZLE_BYTES == 32, "64- or 32-byte swizzle");
  constexpr uint64_t kLayout = SWIZZLE_BYTES == 64 ? 2 : 3;  // layout types 2 and 3: 64- and 32-byte swizzle
  return wgmma_desc(smem, 16, sbo_bytes) | (kLayout << 62);
}

__device__ __forceinline__ void wgmma_fence() {
#ifdef JBS_WGMMA_AVAILABLE
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void wgmma_commit() {
#ifdef JBS_WGMMA_AVAILABLE
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

template <int PENDING>
__device__ __forceinline__ void wgmma_wait() {
#ifdef JBS_WGMMA_AVAILABLE
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(PENDING) : "memory");
#endif
}

#ifdef JBS_WGMMA_AVAILABLE
// One RS wgmma per N (16 / 32 / 64): INSTR is the shape and types
// ("m64n16k16.f32.bf16.bf16"), TAIL the transpose operand of B (", %13" etc.)
// or "" for tf32, which has none (its B is always K-major). The scale-d
// predicate is set (D += A * B): callers zero D themselves.
#define JBS_WGMMA_RS_M64N16(INSTR, TAIL) \
  asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %14, 0;\n" \
        "wgmma.mma_async.sync.aligned." INSTR " " \
        "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1" TAIL ";\n}\n" \
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]) \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(TRANS_B), "r"(1))

#define JBS_WGMMA_RS_M64N32(INSTR, TAIL) \
  asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %22, 0;\n" \
        "wgmma.mma_async.sync.aligned." INSTR " " \
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1" TAIL ";\n}\n" \
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]) \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(TRANS_B), "r"(1))

#define JBS_WGMMA_RS_M64N64(INSTR, TAIL) \
  asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %38, 0;\n" \
        "wgmma.mma_async.sync.aligned." INSTR " " \
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1" TAIL ";\n}\n" \
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]) \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(TRANS_B), "r"(1))
#define JBS_WGMMA_RS_M64N128(INSTR, TAIL) \
  asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %70, 0;\n" \
        "wgmma.mma_async.sync.aligned." INSTR " " \
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1" TAIL ";\n}\n" \
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3]) \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(TRANS_B), "r"(1))
#define JBS_WGMMA_RS_M64N256(INSTR, TAIL) \
  asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %134, 0;\n" \
        "wgmma.mma_async.sync.aligned." INSTR " " \
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1" TAIL ";\n}\n" \
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3]), "+f"(d[16][0]), "+f"(d[16][1]), "+f"(d[16][2]), "+f"(d[16][3]), "+f"(d[17][0]), "+f"(d[17][1]), "+f"(d[17][2]), "+f"(d[17][3]), "+f"(d[18][0]), "+f"(d[18][1]), "+f"(d[18][2]), "+f"(d[18][3]), "+f"(d[19][0]), "+f"(d[19][1]), "+f"(d[19][2]), "+f"(d[19][3]), "+f"(d[20][0]), "+f"(d[20][1]), "+f"(d[20][2]), "+f"(d[20][3]), "+f"(d[21][0]), "+f"(d[21][1]), "+f"(d[21][2]), "+f"(d[21][3]), "+f"(d[22][0]), "+f"(d[22][1]), "+f"(d[22][2]), "+f"(d[22][3]), "+f"(d[23][0]), "+f"(d[23][1]), "+f"(d[23][2]), "+f"(d[23][3]), "+f"(d[24][0]), "+f"(d[24][1]), "+f"(d[24][2]), "+f"(d[24][3]), "+f"(d[25][0]), "+f"(d[25][1]), "+f"(d[25][2]), "+f"(d[25][3]), "+f"(d[26][0]), "+f"(d[26][1]), "+f"(d[26][2]), "+f"(d[26][3]), "+f"(d[27][0]), "+f"(d[27][1]), "+f"(d[27][2]), "+f"(d[27][3]), "+f"(d[28][0]), "+f"(d[28][1]), "+f"(d[28][2]), "+f"(d[28][3]), "+f"(d[29][0]), "+f"(d[29][1]), "+f"(d[29][2]), "+f"(d[29][3]), "+f"(d[30][0]), "+f"(d[30][1]), "+f"(d[30][2]), "+f"(d[30][3]), "+f"(d[31][0]), "+f"(d[31][1]), "+f"(d[31][2]), "+f"(d[31][3]) \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(TRANS_B), "r"(1))
// The SS forms (A from shared memory too: TRANS_A = 0, K-major, core matrices of 8
// rows of 16 B of k, LBO along k, SBO along m; TRANS_A = 1, M-major); TAIL the
// transpose operands (", %a, %b") or "" for tf32, which has none; scale_d 0 ignores d.
#define JBS_WGMMA_SS_M64N16(INSTR, TAIL) \
  asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %11, 0;\n" \
        "wgmma.mma_async.sync.aligned." INSTR " " \
        "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1" TAIL ";\n}\n" \
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]) \
        : "l"(desc_a), "l"(desc_b), "n"(TRANS_B), "r"(scale_d), "n"(TRANS_A))
#define JBS_WGMMA_SS_M64N32(INSTR, TAIL) \
  asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %19, 0;\n" \
        "wgmma.mma_async.sync.aligned." INSTR " " \
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1" TAIL ";\n}\n" \
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]) \
        : "l"(desc_a), "l"(desc_b), "n"(TRANS_B), "r"(scale_d), "n"(TRANS_A))
#define JBS_WGMMA_SS_M64N64(INSTR, TAIL) \
  asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %35, 0;\n" \
        "wgmma.mma_async.sync.aligned." INSTR " " \
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1" TAIL ";\n}\n" \
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]) \
        : "l"(desc_a), "l"(desc_b), "n"(TRANS_B), "r"(scale_d), "n"(TRANS_A))
#define JBS_WGMMA_SS_M64N128(INSTR, TAIL) \
  asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %67, 0;\n" \
        "wgmma.mma_async.sync.aligned." INSTR " " \
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1" TAIL ";\n}\n" \
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3]) \
        : "l"(desc_a), "l"(desc_b), "n"(TRANS_B), "r"(scale_d), "n"(TRANS_A))
#endif

// d += A * B for one k-step (see the contract above): m64nNk16 for 16-bit
// types, m64nNk8 for fp32 as tf32 (a: the mma.sync m16n8k8 tf32 A fragment,
// warp_mma.cuh: load_a_rows; B K-major only, TRANS_B = 0).
template <typename T, int N, int TRANS_B>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 8][4], const uint32_t (&a)[4], uint64_t desc_b) {
  static_assert(N == 16 || N == 32 || N == 64 || N == 128 || N == 256, "wgmma_rs: N of 16, 32, 64, 128 or 256");
#ifdef JBS_WGMMA_AVAILABLE
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  constexpr bool kTf32 = std::is_same_v<T, float>;
  static_assert(kBf16 || kTf32 || std::is_same_v<T, __half>, "wgmma_rs takes bf16, f16 or fp32 (tf32) operands");
  static_assert(!kTf32 || TRANS_B == 0, "tf32 wgmma reads B K-major only");
  if constexpr (N == 16) {
    if constexpr (kBf16) JBS_WGMMA_RS_M64N16("m64n16k16.f32.bf16.bf16", ", %13");
    else if constexpr (kTf32) JBS_WGMMA_RS_M64N16("m64n16k8.f32.tf32.tf32", "");
    else JBS_WGMMA_RS_M64N16("m64n16k16.f32.f16.f16", ", %13");
  } else if constexpr (N == 32) {
    if constexpr (kBf16) JBS_WGMMA_RS_M64N32("m64n32k16.f32.bf16.bf16", ", %21");
    else if constexpr (kTf32) JBS_WGMMA_RS_M64N32("m64n32k8.f32.tf32.tf32", "");
    else JBS_WGMMA_RS_M64N32("m64n32k16.f32.f16.f16", ", %21");
  } else if constexpr (N == 64) {
    if constexpr (kBf16) JBS_WGMMA_RS_M64N64("m64n64k16.f32.bf16.bf16", ", %37");
    else if constexpr (kTf32) JBS_WGMMA_RS_M64N64("m64n64k8.f32.tf32.tf32", "");
    else JBS_WGMMA_RS_M64N64("m64n64k16.f32.f16.f16", ", %37");
  } else if constexpr (N == 128) {
    if constexpr (kBf16) JBS_WGMMA_RS_M64N128("m64n128k16.f32.bf16.bf16", ", %69");
    else if constexpr (kTf32) JBS_WGMMA_RS_M64N128("m64n128k8.f32.tf32.tf32", "");
    else JBS_WGMMA_RS_M64N128("m64n128k16.f32.f16.f16", ", %69");
  } else {
    if constexpr (kBf16) JBS_WGMMA_RS_M64N256("m64n256k16.f32.bf16.bf16", ", %133");
    else if constexpr (kTf32) JBS_WGMMA_RS_M64N256("m64n256k8.f32.tf32.tf32", "");
    else JBS_WGMMA_RS_M64N256("m64n256k16.f32.f16.f16", ", %133");
  }
#else
  __trap();  // unreachable: the launchers pick wgmma kernels only for sm_90a builds on sm_90
#endif
}

// d += A * B for one k-step with A (64 x 16) read from shared memory through
// desc_a: m64nNk16, 16-bit types; m64nNk8 for fp32 as tf32 (A and B K-major only:
// TRANS_A = TRANS_B = 0; the hardware ignores the mantissa bits tf32 lacks). Used
// where A's rows are a shifted window of a shared tile, so a descriptor offset
// replaces per-lane fragment loads, and where TMA fills both operands.
// scale_d = 0: d = A * B, for a first k-step that must not read d (zeroing d
// instead is a non-wgmma write of its registers, which makes ptxas serialize every
// wgmma whose pipeline stage it falls in, C7515). TRANS_A = 1 reads A M-major (a
// core matrix row holds 8 m of one k), as TRANS_B = 1 reads B N-major.
template <typename T, int N, int TRANS_B, int TRANS_A = 0>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 8][4], uint64_t desc_a, uint64_t desc_b, int scale_d = 1) {
  static_assert(N == 16 || N == 32 || N == 64 || N == 128, "wgmma_ss: N of 16, 32, 64 or 128");
#ifdef JBS_WGMMA_AVAILABLE
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  constexpr bool kTf32 = std::is_same_v<T, float>;
  static_assert(kBf16 || kTf32 || std::is_same_v<T, __half>, "wgmma_ss takes bf16, f16 or fp32 (tf32) operands");
  static_assert(!kTf32 || (TRANS_A == 0 && TRANS_B == 0), "tf32 wgmma reads A and B K-major only");
  if constexpr (kTf32) {
    if constexpr (N == 16) JBS_WGMMA_SS_M64N16("m64n16k8.f32.tf32.tf32", "");
    else if constexpr (N == 32) JBS_WGMMA_SS_M64N32("m64n32k8.f32.tf32.tf32", "");
    else if constexpr (N == 64) JBS_WGMMA_SS_M64N64("m64n64k8.f32.tf32.tf32", "");
    else JBS_WGMMA_SS_M64N128("m64n128k8.f32.tf32.tf32", "");
  } else if constexpr (N == 16) {
    if constexpr (kBf16) JBS_WGMMA_SS_M64N16("m64n16k16.f32.bf16.bf16", ", %12, %10");
    else JBS_WGMMA_SS_M64N16("m64n16k16.f32.f16.f16", ", %12, %10");
  } else if constexpr (N == 32) {
    if constexpr (kBf16) JBS_WGMMA_SS_M64N32("m64n32k16.f32.bf16.bf16", ", %20, %18");
    else JBS_WGMMA_SS_M64N32("m64n32k16.f32.f16.f16", ", %20, %18");
  } else if constexpr (N == 64) {
    if constexpr (kBf16) JBS_WGMMA_SS_M64N64("m64n64k16.f32.bf16.bf16", ", %36, %34");
    else JBS_WGMMA_SS_M64N64("m64n64k16.f32.f16.f16", ", %36, %34");
  } else {
    if constexpr (kBf16) JBS_WGMMA_SS_M64N128("m64n128k16.f32.bf16.bf16", ", %68, %66");
    else JBS_WGMMA_SS_M64N128("m64n128k16.f32.f16.f16", ", %68, %66");
  }
#else
  __trap();  // unreachable: the launchers pick wgmma kernels only for sm_90a builds on sm_90
#endif
}

}  // namespace jbs
