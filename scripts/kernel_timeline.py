"""Where an op's time goes between its kernels: the time line of a chain of identical ops.

scripts/profile_kernels.py records every kernel of a chain of `ops` ops run back to back (CUPTI,
through torch.profiler) and sums their durations; that cannot tell a kernel's own time from the
time between kernels, nor a kernel launched early (programmatic dependent launch: jbs's sum
kernels start beside the walk they wait for) from one that runs after. This lays the chain out
per op instead: each op starts where the first of the kernels it launches exactly once starts,
and every kernel is placed relative to the start of the op it falls in. Pure Python (no torch),
so that tests/test_kernel_timeline.py can check it on the CPU.
"""

from __future__ import annotations

import bisect
import collections
import statistics


Row = tuple[str, float, float, float]  # name, kernels per op, median start, median end


def op_timeline(events: list[tuple[str, float, float]], ops: int) -> tuple[float, list[Row]]:
    """events: (name, start, end) of every kernel of `ops` identical ops run in order, in any
    order, times in us. Returns the median period from one op's start to the next's (0 for one
    op) and, per kernel name in order of its median start, (name, kernels per op, median start,
    median end), both relative to the start of the op the kernel starts in."""
    by_name = collections.defaultdict(list)
    for name, start, end in events:
        by_name[name].append((start, end))
    once = [sorted(spans) for spans in by_name.values() if len(spans) == ops]
    if not once:
        raise ValueError(f"no kernel runs exactly once in each of the {ops} ops: {sorted(by_name)}")
    op_starts = [min(spans[k][0] for spans in once) for k in range(ops)]
    period = statistics.median(b - a for a, b in zip(op_starts, op_starts[1:])) if ops > 1 else 0.0
    rows = []
    for name, spans in by_name.items():
        relative = []
        for start, end in spans:
            k = max(bisect.bisect_right(op_starts, start) - 1, 0)
            relative.append((start - op_starts[k], end - op_starts[k]))
        rows.append((name, len(spans) / ops, statistics.median(s for s, _ in relative),
                     statistics.median(e for _, e in relative)))
    rows.sort(key=lambda row: row[2])
    return period, rows


def format_timeline(period: float, rows: list[Row], width: int = 40) -> str:
    """One line: each kernel's median start-end within its op (x kernels per op where not 1),
    then the op's period."""
    parts = [f"{name[:width]}{'' if count == 1 else f' x{count:.2f}'} {start:.1f}-{end:.1f}"
             for name, count, start, end in rows]
    return "timeline (us from the op's start): " + "; ".join(parts) + f"; op period {period:.1f}"
