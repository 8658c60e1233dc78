// The threads of the warp-specialized kernels: two consumer warpgroups, which run
// the MMAs, and one loader warpgroup, which fills their ring of stages (all of it,
// or one warp of it, loads). 384 threads, one CTA per SM.
//
// Registers move from the loaders to the consumers with setmaxnreg
// (common/mbarrier.cuh: warpgroup_reg_dealloc / _alloc). The launch gives every
// thread kLaunchRegs (168); the consumers' .inc waits until the loaders' .dec has
// freed enough of that, so the two must add up to no more than the launch's
// allocation, or the CTA hangs. (A 9th warp instead of a warpgroup would cap
// every thread at 168 registers: 3 warps on one SM sub-partition's 16 K.)
#pragma once

namespace jbs {

template <int LOADER_REGS, int CONSUMER_REGS>
struct WarpRoles {
  static constexpr int kConsumerThreads = 256;
  static constexpr int kLoaderThreads = 128;
  static constexpr int kThreads = kConsumerThreads + kLoaderThreads;
  static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
  static constexpr int kLoaderRegs = LOADER_REGS;
  static constexpr int kConsumerRegs = CONSUMER_REGS;
  static_assert(kLoaderThreads * kLoaderRegs + kConsumerThreads * kConsumerRegs <= kThreads * kLaunchRegs,
                "setmaxnreg moves registers, it does not add any");
};

}  // namespace jbs
