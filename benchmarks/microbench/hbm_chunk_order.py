"""HBM rates of a persistent grid (132 CTAs x 8 warps, jbs's small-N kernels' shape) that moves
a buffer in chunks of one weight block (2 KB, bf16 bs 32), by the order in which the warps take
the chunks.

Why: the small-N kernels stream weight blocks (fwd / dx read them, dw writes them) at ~2.1-2.5
TB/s, while a plain fill writes at 3.15 TB/s and a copy moves 2.94 TB/s (hbm_rates.py).
Nsight Compute finds all three kernels stalled on memory with the memory system only 60-75%
busy (benchmarks/NOTES.md, session 28). The plain kernels have adjacent warps touch adjacent
addresses at the same moment; jbs's warps each walk their own range or a scattered list. This
separates the access order from everything else the kernels do:
  grid    chunk k * W + w for warp w: the W chunks in flight at once are adjacent
  ranges  warp w takes chunks [w * n / W, (w + 1) * n / W) in order: W streams far apart
  random  a random permutation of runs of m consecutive chunks, dealt as in `grid`; each warp
          moves its run's chunks in order (m = 1: every chunk anywhere; the dw panel kernel
          writes runs of ~16 blocks at density 1/2, bs 32)
Each kernel either writes its chunks (16-byte stores) or reads them (16-byte loads, 4 chunks
in flight per warp, folded into one value per warp so the loads are not dead).

    python benchmarks/microbench/hbm_chunk_order.py
"""

import cupy as cp
import numpy as np

SOURCE = r"""
extern "C" __global__ void __launch_bounds__(256) walk(uint4* buf, const int* perm, long long chunks,
                                                       int chunk_vecs, int order, int write, int* sink, int run) {
  const int lane = threadIdx.x & 31;
  const long long W = (long long)gridDim.x * (blockDim.x / 32);
  const long long w = (long long)blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
  const long long lo = w * chunks / W, hi = (w + 1) * chunks / W;
  const long long runs = chunks / run;  // order 2 (chunks is a multiple of run * W there)
  const long long steps = order == 1 ? hi - lo : order == 2 ? runs / W * run : (chunks - w + W - 1) / W;
  auto chunk_at = [&](long long k) -> long long {
    if (order == 1) return lo + k;
    if (order == 2) return (long long)perm[(k / run) * W + w] * run + k % run;
    return k * W + w;
  };
  unsigned acc = 0;
  constexpr int U = 4;  // chunks in flight per warp when reading
  for (long long k0 = 0; k0 < steps; k0 += U) {
    uint4 v[U][4];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (k0 + u >= steps) break;
      uint4* p = buf + chunk_at(k0 + u) * chunk_vecs;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int e = lane + 32 * j;
        if (e < chunk_vecs) {
          if (write) p[e] = make_uint4((unsigned)k0, (unsigned)e, (unsigned)u, 1u);
          else v[u][j] = __ldcs(p + e);
        }
      }
    }
    if (!write) {
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (k0 + u < steps && lane + 32 * j < chunk_vecs) acc ^= v[u][j].x ^ v[u][j].w;
    }
  }
  if (!write && acc == 0x12345678u) sink[0] = 1;  // keeps the loads
}
"""


def time_us(fn, reps: int = 20) -> float:
    fn()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(reps):
        fn()
    stop.record()
    stop.synchronize()
    return cp.cuda.get_elapsed_time(start, stop) * 1e3 / reps


def main() -> None:
    kernel = cp.RawKernel(SOURCE, "walk", options=("-std=c++17",))
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    sink = cp.zeros(1, cp.int32)
    print(f"{sms} SMs x 8 warps; GB/s (bytes moved / time)")
    print("bytes    chunk  order      write   read")
    for num_bytes in (151_000_000,):
        for chunk in (512, 2048):  # <= 2048: 4 x 16 bytes per lane
            n = num_bytes // chunk
            bufs = [cp.empty(n * chunk // 16 * 4, cp.uint32) for _ in range(3)]  # 3 x > L2
            row = []
            cases = [(0, 1, "grid"), (1, 1, "ranges")] + [(2, m, f"random {m}") for m in (1, 2, 4, 8, 16, 32, 64)]
            for order, run, name in cases:
                # order 2: whole rounds of W runs only (the rest of the buffer is not moved)
                moved = n if order != 2 else n // (run * sms * 8) * (run * sms * 8)
                perm = cp.asarray(np.random.default_rng(0).permutation(max(moved // run, 1)).astype(np.int32))
                rates = []
                for write in (1, 0):
                    state = {"i": 0}

                    def launch():
                        buf = bufs[state["i"] % 3]
                        state["i"] += 1
                        kernel((sms,), (256,), (buf, perm, np.int64(moved), np.int32(chunk // 16),
                                                np.int32(order), np.int32(write), sink, np.int32(run)))

                    rates.append(moved * chunk / time_us(launch) / 1e3)
                row.append(f"{num_bytes // 10**6:4d} MB {chunk:6d}  {name:10s} {rates[0]:6.0f} {rates[1]:6.0f}")
            print("\n".join(row), flush=True)


if __name__ == "__main__":
    main()
