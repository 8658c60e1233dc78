// Shared-memory mbarriers and the other pieces of a warp-specialized pipeline
// (sm_90): producer threads fill a ring of stages, consumer threads wait for a
// stage's "full" barrier, use it, and arrive on its "empty" barrier.
//
// Phases: a barrier completes a phase when its expected arrivals have come;
// mbarrier_wait(bar, parity) returns once the phase of that parity is complete.
// A fresh barrier counts as having completed the phase of parity 1, so a
// producer that waits on "empty" with parity (round & 1) ^ 1 passes its first
// round without any consumer arrival.
//
// cp.async completion: cp_async_arrive_noinc(bar) makes the barrier count one
// arrival once every cp.async this thread issued before it has landed. Such an
// arrival is one of the barrier's expected arrivals (.noinc), so a barrier fed by
// N producer threads is initialised with (at least) N.
#pragma once

#include <cstdint>

#include "common/ptx.cuh"  // smem_u32

namespace jbs {

// fence.mbarrier_init and try_wait.parity need sm_90; in the sm_80 build those
// two compile to a trap (no launcher picks the kernels that use them there). The
// other helpers are sm_80 instructions.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define JBS_MBARRIER_AVAILABLE 1
#endif

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}

// Makes initialised barriers visible to the other threads (and to the async
// proxy that cp.async's arrivals come from); a barrier among the threads that
// use them (the CTA's, or the warp's for a warp's own) must follow.
__device__ __forceinline__ void mbarrier_init_fence() {
#ifdef JBS_MBARRIER_AVAILABLE
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#else
  __trap();
#endif
}

// A plain arrival (release: this thread's earlier writes are visible to whoever
// then completes a wait on the phase).
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}

// One arrival for the whole warp, e.g. a consumer warp releasing a ring slot on a barrier
// counting warps: the warp barrier orders every lane's earlier accesses before lane 0's
// arrival (release).
__device__ __forceinline__ void mbarrier_arrive_warp(uint64_t* bar, int lane) {
  __syncwarp();
  if (lane == 0) mbarrier_arrive(bar);
}

__device__ __forceinline__ void cp_async_arrive_noinc(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}

// TMA bulk copies (cp.async.bulk, sm_90): one thread moves `bytes` (a multiple
// of 16, both addresses 16-byte aligned) from global to shared memory and the
// copy completes on `bar` as transaction bytes. The thread first arrives on the
// barrier announcing how many bytes to expect, so a barrier initialised with
// count 1 completes its phase once the copy has landed.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, int bytes) {
#ifdef JBS_MBARRIER_AVAILABLE
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void bulk_copy_g2s(void* dst, const void* src, int bytes, uint64_t* bar) {
#ifdef JBS_MBARRIER_AVAILABLE
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar))
      : "memory");
#else
  __trap();
#endif
}

// The other direction (sm_90): one thread moves `bytes` (a multiple of 16, both addresses
// 16-byte aligned) from shared to global memory, in the thread's bulk async-group. The
// thread then commits the group, and before it (or its warp, after a __syncwarp) writes the
// source again it waits until at most N of its groups still read shared memory. Writes
// from shared memory must be made visible to the copy by fence_proxy_async first.
__device__ __forceinline__ void bulk_copy_s2g(void* dst, const void* src, int bytes) {
#ifdef JBS_MBARRIER_AVAILABLE
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(smem_u32(src)),
               "r"(bytes)
               : "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void bulk_commit_group() {
#ifdef JBS_MBARRIER_AVAILABLE
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#endif
}

template <int N>
__device__ __forceinline__ void bulk_wait_group_read() {
#ifdef JBS_MBARRIER_AVAILABLE
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
#endif
}

// Waits until all of this thread's bulk groups are complete (their writes done), e.g.
// before the CTA's shared memory goes away.
__device__ __forceinline__ void bulk_wait_all() {
#ifdef JBS_MBARRIER_AVAILABLE
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
#endif
}

// Orders this thread's earlier generic-proxy accesses of shared memory (plain
// or cp.async writes, ldmatrix reads) before its later async-proxy ones: a
// wgmma reading the data, or a bulk copy overwriting a stage.
__device__ __forceinline__ void fence_proxy_async() {
#ifdef JBS_MBARRIER_AVAILABLE
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Spins until the phase of the given parity is complete (acquire).
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
#ifdef JBS_MBARRIER_AVAILABLE
  const uint32_t addr = smem_u32(bar);
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (!done);
#else
  __trap();
#endif
}

// Where the next item of a ring of `slots` mbarrier-guarded slots goes: its slot, the
// parity of the slot's `full` phase it waits for (its `empty` wait is for phase ^ 1,
// the release of the slot's previous item), and whether the slot had an item before.
struct RingPosition {
  int slots;
  int stage = 0;
  uint32_t phase = 0;
  bool reused = false;
  __device__ explicit RingPosition(int slots_) : slots(slots_) {}
  __device__ __forceinline__ void advance() {
    if (++stage == slots) stage = 0, phase ^= 1u, reused = true;
  }
};

// A barrier among `count` threads (whole warps) of the CTA, id 1..15 (0 is
// __syncthreads'), for when only some warps take part.
__device__ __forceinline__ void named_barrier_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// Moves registers between warpgroups (sm_90a): every warp of a warpgroup runs
// the same one. The producers give theirs up so the consumers can hold their
// accumulators and two items' A fragments without spilling.
template <int REGS>
__device__ __forceinline__ void warpgroup_reg_dealloc() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
#endif
}

template <int REGS>
__device__ __forceinline__ void warpgroup_reg_alloc() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
#endif
}

}  // namespace jbs
