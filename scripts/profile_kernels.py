"""Kernel-level profile of the seed shape (N=32, C=K=12288) on the GPU machine.

For each (op, density, chunk limit) it prints, per op:
  bench   the bench's figure (jbs.bench.timing.time_chain: chains dispatched back to back)
  kernels the summed device time of the kernels and memsets (CUPTI, through torch.profiler)
  span    first kernel start to last kernel end of the profiled chains, per op: includes the
          gaps XLA leaves between kernels, excludes host time before the first launch
and the kernels by name, so that "kernel too slow" and "overhead around it" can be told apart,
then each kernel's median start and end within its op and the ops' period
(scripts/kernel_timeline.py): how long after the walk its sums end, and how long the next op
waits.
It also measures the L2-resident copy rate (read + write) that the large-N notes assume.

Run on the GPU machine after building jbs (scripts/gpu_check.sh does the build):
  python3 -P scripts/profile_kernels.py --densities 2,8,64 --ops forward,dx,dw --chunk-limits default,8
Under Nsight Compute, use --plain (no torch.profiler: both would use CUPTI), e.g.
  ncu --clock-control none --kernel-name regex:bsmm --section SpeedOfLight \
      python3 -P scripts/profile_kernels.py --plain --densities 2 --ops forward
XLA flags (e.g. command buffers off: XLA_FLAGS=--xla_gpu_enable_command_buffer=) are read once
per process, so compare them with separate runs.
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import statistics
import sys

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import torch  # noqa: E402
from torch.autograd import DeviceType  # noqa: E402

import jbs  # noqa: E402
from jbs._src import tables  # noqa: E402
from jbs.bench import runners, timing  # noqa: E402
from jbs.bench.cases import Case  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # (run with -P: not on the path)
from kernel_timeline import format_timeline, op_timeline  # noqa: E402


def l2_copy_rate() -> dict[str, float]:
    """Read+write bytes/s of a device copy small enough to stay in L2, and of one that is not."""
    rates = {}
    for label, size in (("l2_8MB", 8 << 20), ("l2_16MB", 16 << 20), ("hbm_1GB", 1 << 30)):
        src = torch.empty(size, dtype=torch.uint8, device="cuda").random_()
        dst = torch.empty_like(src)
        us = timing.time_torch_graph(lambda: dst.copy_(src), [()] * 16, calls=20)
        rates[label] = 2 * size / (us * 1e-6)
    return rates


def use_chunk_limit(limit: int | None) -> None:
    tables._chunks = functools.partial(_ORIGINAL_CHUNKS, limit=limit)
    tables._cached.cache_clear()


_ORIGINAL_CHUNKS = tables._chunks


def profile_case(case: Case, repeats: int = 5):
    bsmm = jbs.BlockSparseMatMul(runners._layout(case), case.block_size)
    dt = jnp.dtype(case.dtype)

    def make(key):
        kx, kw, kg = jax.random.split(key, 3)
        return (runners._data(kx, (case.n, case.c), dt), runners._data(kw, bsmm.w_shape, dt),
                runners._data(kg, (case.n, case.k), dt))

    sets = runners._sets(case, make)
    fn = runners._apply(case.op, bsmm)
    bench_us = timing.time_chain(fn, sets, min_ops=runners.MIN_OPS)
    chain = jax.jit(lambda s: [fn(*inputs) for inputs in s])
    jax.block_until_ready(chain(sets))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            out = chain(sets)
        jax.block_until_ready(out)
    events = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    ops = repeats * len(sets)
    by_name = collections.defaultdict(list)
    for e in events:
        by_name[e.name[:60]].append(e.time_range.end - e.time_range.start)
    kernels = sum(sum(v) for v in by_name.values()) / ops
    span = (max(e.time_range.end for e in events) - min(e.time_range.start for e in events)) / ops
    names = {k: (len(v) / ops, statistics.median(v)) for k, v in by_name.items()}
    starts = sorted((e.time_range.start, e.time_range.end) for e in events)
    gaps = [b[0] - a[1] for a, b in zip(starts, starts[1:])]
    names["median gap"] = (len(gaps) / ops, statistics.median(gaps) if gaps else 0.0)
    try:
        timeline = format_timeline(*op_timeline([(e.name[:60], e.time_range.start, e.time_range.end)
                                                 for e in events], ops))
    except ValueError as error:  # (no kernel once per op: e.g. a kernel repeated per chunk)
        timeline = f"timeline: none ({error})"
    return bench_us, kernels, span, names, timeline


def run_plain(case: Case, calls: int = 1):
    """Runs the case's op once, nothing else: for an outside profiler (ncu), which
    cannot share CUPTI with torch.profiler."""
    bsmm = jbs.BlockSparseMatMul(runners._layout(case), case.block_size)
    dt = jnp.dtype(case.dtype)
    kx, kw, kg = jax.random.split(jax.random.key(0), 3)
    args = (runners._data(kx, (case.n, case.c), dt), runners._data(kw, bsmm.w_shape, dt),
            runners._data(kg, (case.n, case.k), dt))
    op = jax.jit(runners._apply(case.op, bsmm))
    for _ in range(calls):
        jax.block_until_ready(op(*args))


def overhead():
    """Per-op cost of the harness and of XLA itself: a chain of trivial elementwise ops over
    the same number of rotated sets as the 1/64 seed case, next to the jbs op."""
    sets = [(jnp.full((32, 12288), i, jnp.bfloat16),) * 3 for i in range(64)]
    for label, fn in (("x + 1", lambda x, w, g: x + 1),
                      ("x * w + g", lambda x, w, g: x * w + g)):
        us = timing.time_chain(fn, sets)
        print(f"overhead {label:10s}: {us:6.1f} us per op over {len(sets)} sets", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--densities", default="2,8,64", help="denominators")
    parser.add_argument("--ops", default="forward,dx,dw")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--block-size", type=int, default=32)
    parser.add_argument("--n", type=int, default=32)
    parser.add_argument("--chunk-limits", default="default")
    parser.add_argument("--no-l2", action="store_true")
    parser.add_argument("--overhead", action="store_true", help="also time trivial XLA chains")
    parser.add_argument("--plain", action="store_true",
                        help="only run each case's op once (under ncu: no timing, no CUPTI)")
    args = parser.parse_args()
    if args.plain:
        for den in args.densities.split(","):
            for op in args.ops.split(","):
                run_plain(Case(op, args.dtype, args.n, 12288, 12288, args.block_size, 1 / int(den)))
        return
    print("XLA_FLAGS:", os.environ.get("XLA_FLAGS", ""), "| JBS env:",
          {k: v for k, v in os.environ.items() if k.startswith("JBS_")})
    if not args.no_l2:
        for label, rate in l2_copy_rate().items():
            print(f"copy rate {label}: {rate / 1e12:.2f} TB/s (read+write)")
    if args.overhead:
        overhead()
    rows = []
    for limit_text in args.chunk_limits.split(","):
        limit = None if limit_text == "default" else int(limit_text)
        use_chunk_limit(limit)
        for den in args.densities.split(","):
            for op in args.ops.split(","):
                case = Case(op, args.dtype, args.n, 12288, 12288, args.block_size, 1 / int(den))
                bench_us, kernels, span, names, timeline = profile_case(case)
                rows.append((op, den, limit_text, bench_us, kernels, span))
                detail = "; ".join(f"{k} x{c:.2f} {m:.1f}us" for k, (c, m) in names.items())
                print(f"{op:7s} 1/{den:<3s} limit={limit_text:7s} bench={bench_us:7.1f} "
                      f"kernels={kernels:7.1f} span={span:7.1f} | {detail}", flush=True)
                print(f"        {timeline}", flush=True)
    print("\nop      dens  limit    bench_us  kernel_us  span_us")
    for op, den, lim, b, k, s in rows:
        print(f"{op:7s} 1/{den:<3s} {lim:7s} {b:9.1f} {k:10.1f} {s:8.1f}")


if __name__ == "__main__":
    main()
