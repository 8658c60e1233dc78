"""Timing on the device: jitted chains over rotated inputs, never single calls.

Each timed executable runs one op on each of several input sets (so the weights stream from
HBM, not L2). It is dispatched ``calls`` times back to back without waiting (JAX dispatch is
asynchronous, so the host enqueues the next call while the GPU runs the current one and the GPU
never idles between calls), then synchronised once; the figure is the median over a few such
batches of (batch time / calls / sets). Timing each call with a host sync in between would add
the dispatch and sync gap (measured: 230-700 us per call on the H200) to every op.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time

import jax
import jax.numpy as jnp

L2_BYTES = 64 * 2**20  # at least the L2 of an H100/H200 (50-60 MB)


@dataclasses.dataclass(frozen=True)
class Sampling:
    """How much each timed chain samples: ``calls`` dispatches per batch, the median of
    ``batches``, after ``warmup`` calls; at most ``max_sets`` input sets and ``max_ops`` ops
    (None: as many as the caller asks)."""

    calls: int = 20
    batches: int = 5
    warmup: int = 3
    max_sets: int = 64
    max_ops: int | None = None


FULL = Sampling()
# The reference path on a CPU: there jbs-bench shows that the command works and what it
# prints, not figures to quote; the full sampling (256-op chains, 100 calls) takes hours on two
# cores.
DEMONSTRATION = Sampling(calls=1, batches=3, warmup=1, max_sets=4, max_ops=4)
_sampling = FULL


def use_sampling(sampling: Sampling) -> None:
    global _sampling
    _sampling = sampling


def rotation(bytes_per_set: int, minimum: int = 4, maximum: int = 64) -> int:
    """How many input sets to rotate through so that they overflow L2 three times."""
    maximum = min(maximum, _sampling.max_sets)
    return max(min(minimum, maximum), min(maximum, math.ceil(3 * L2_BYTES / max(bytes_per_set, 1))))


def mixed_sets(input_sets, min_ops: int):
    """The input sets, repeated with their members re-paired until there are ``min_ops`` of
    them (at most): repetition r pairs member j of set i with member j of set (i + r * j) mod S.
    Every repetition still walks all S weight sets in turn (so weights keep streaming from
    HBM), and no two tuples share any two members (an op may read only two of its inputs, like
    the weight gradient), so no two ops compute the same thing. Ops that share one member can
    still be merged by XLA where it has a pass for it (dots: runners.DENSE_MIN_OPS). This
    spreads the per-call dispatch cost (which grows with the number of arguments, measured
    ~2 us per argument on an H100 with jax 0.11) over more ops without passing more arrays.
    Members of different sets must be distinct arrays."""
    count, width = len(input_sets), min(len(s) for s in input_sets)
    if width < 2:
        return list(input_sets)
    repeats = max(1, min(-(-min_ops // count), count // (width - 1)))
    return [tuple(input_sets[(i + r * j) % count][j] for j in range(len(input_sets[i])))
            for r in range(repeats) for i in range(count)]


def time_chain(fn, input_sets, *, calls: int | None = None, batches: int | None = None,
               warmup: int | None = None, min_ops: int = 0) -> float:
    """Median microseconds of one ``fn(*inputs)`` over a jitted chain of all input sets
    (re-paired by ``mixed_sets`` into up to ``min_ops`` ops when min_ops > len(input_sets));
    what is not given comes from the sampling in use (``use_sampling``)."""
    calls = _sampling.calls if calls is None else calls
    batches = _sampling.batches if batches is None else batches
    warmup = _sampling.warmup if warmup is None else warmup
    if _sampling.max_ops is not None:
        min_ops = min(min_ops, _sampling.max_ops)
    arrange = lambda sets: mixed_sets(sets, min_ops) if min_ops > len(sets) else list(sets)
    num_ops = len(arrange(input_sets))
    chain = jax.jit(lambda sets: [fn(*inputs) for inputs in arrange(sets)])
    for _ in range(warmup):
        jax.block_until_ready(chain(input_sets))
    samples = []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(calls):
            out = chain(input_sets)  # only the last result is kept alive
        jax.block_until_ready(out)
        samples.append((time.perf_counter() - start) / calls)
    return statistics.median(samples) / num_ops * 1e6


def measure_copy_bandwidth(num_bytes: int = 2**30, trials: int = 3) -> float:
    """Device copy rate in bytes/s, counting bytes read plus bytes written: the best of a
    device-to-device copy timed with CUDA events (torch, when present) and an XLA elementwise
    pass over four buffers, each repeated ``trials`` times. The best of several, because a
    single measurement moved by 4% between runs on H200s (3948 to 4145 GB/s, sessions 37-63)
    and a low one lowers every floor's bar."""
    arrays = [(jnp.full((num_bytes // 4,), i, jnp.float32),) for i in range(4)]
    rates = [2 * num_bytes / (time_chain(lambda v: v + 1.0, arrays, calls=5) * 1e-6) for _ in range(trials)]
    del arrays
    try:
        import torch  # noqa: PLC0415
        if torch.cuda.is_available() and jax.default_backend() == "gpu":
            src = torch.empty(num_bytes, dtype=torch.uint8, device="cuda").random_()
            dst = torch.empty_like(src)
            for _ in range(trials):
                us = time_torch_graph(lambda: dst.copy_(src), [()] * 4, calls=10)
                rates.append(2 * num_bytes / (us * 1e-6))
            del src, dst
    except ImportError:
        pass
    return max(rates)


def measure_dense_rate(dtype, size: int = 8192) -> float:
    """Dense matmul rate in FLOP/s through XLA (cuBLAS) at default precision."""
    key = jax.random.key(0)
    a = jax.random.normal(key, (size, size), dtype)
    b = jax.random.normal(jax.random.key(1), (size, size), dtype)
    us = time_chain(jnp.matmul, [(a, b), (b, a), (a, a), (b, b)], calls=3)
    return 2 * size**3 / (us * 1e-6)


def time_torch_graph(fn, input_sets, *, calls: int = 20) -> float:
    """Median microseconds per op of a CUDA-graph replay of ``fn`` over all input sets."""
    import torch  # noqa: PLC0415 - optional peer

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for inputs in input_sets:  # warm-up (Triton compiles here)
            fn(*inputs)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for inputs in input_sets:
            fn(*inputs)
    graph.replay()
    torch.cuda.synchronize()
    samples = []
    for _ in range(calls):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3)
    return statistics.median(samples) / len(input_sets)
