"""The performance targets jbs is held to, checked against one benchmark run's records.

Each target names the cases it covers, a measure of jbs on each (over the floor, or against the
dense peer measured in the same run) and a bar. A run meets a target on the cases it timed; a
target none of whose cases the run timed is reported as not covered, never as met.

    python -m jbs.bench.targets benchmarks/results/quick_seed_h200_2026-12-04_session63.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import sys
from collections.abc import Callable

from jbs.bench import report

SEED_SHAPE = {"n": 32, "c": 12288, "k": 12288}
COMPUTE_SHAPE = {"n": 8192, "c": 8192, "k": 8192}
HALF_TO_SIXTEENTH = (1 / 2, 1 / 4, 1 / 8, 1 / 16)
HALF_TO_EIGHTH = (1 / 2, 1 / 4, 1 / 8)


def _times_floor(ours: dict, peers: dict) -> float:
    return ours["us"] / ours["floor_us"]


def _us_over_floor(ours: dict, peers: dict) -> float:
    return ours["us"] - ours["floor_us"]


def _percent_of_dense_rate(ours: dict, peers: dict) -> float | None:
    """jbs's useful TFLOP/s (nonzero blocks) over the dense op's TFLOP/s, as a percentage."""
    dense = peers.get("xla_dense")
    return 100 * ours["tflops"] / dense["tflops"] if dense and dense["tflops"] else None


def _speedup_over_dense(ours: dict, peers: dict) -> float | None:
    dense = peers.get("xla_dense")
    return dense["us"] / ours["us"] if dense else None


MEASURES = {  # unit -> (how to compute it, True when smaller is better)
    "x floor": (_times_floor, True),
    "us over floor": (_us_over_floor, True),
    "% dense rate": (_percent_of_dense_rate, False),
    "x faster than dense": (_speedup_over_dense, False),
}
# The measures against the byte floor, which XLA's copy of the case's bytes (the "xla_copy" peer,
# an elementwise kernel timed in the same chain) can be held to as well: where it misses the
# bar too, the bar is below what a plain XLA kernel over those bytes costs in this harness.
FLOOR_UNITS = ("x floor", "us over floor")


@dataclasses.dataclass(frozen=True)
class Target:
    name: str
    covers: Callable[[dict], bool]  # a jbs record of a case this target is about
    unit: str                       # a key of MEASURES
    bar: float

    def value(self, ours: dict, peers: dict) -> float | None:
        return MEASURES[self.unit][0](ours, peers)

    def met_by(self, value: float) -> bool:
        return value <= self.bar if MEASURES[self.unit][1] else value >= self.bar


def _matmul(record: dict, shape: dict, ops, dtypes, block_sizes, densities) -> bool:
    return (record.get("suite", "matmul") == "matmul" and record["op"] in ops and record["dtype"] in dtypes
            and record["block_size"] in block_sizes and _density_in(record, densities)
            and all(record[k] == v for k, v in shape.items()))


def _conv(record: dict, block_sizes, densities) -> bool:
    return (record.get("suite") == "conv" and record["dtype"] == "bfloat16"
            and record["block_size"] in block_sizes and _density_in(record, densities))


def _density_in(record: dict, densities) -> bool:
    return any(abs(record["density"] - d) < 1e-9 for d in densities)


FWD_DX = ("forward", "dx")
BOTH = ("bfloat16", "float32")

# Issue 3 (block-sparse matmul kernels) and issue 4 (block-sparse convolution), as filed.
TARGETS = (
    Target("32 x 12288^2 fwd / dx, bs 32, 1/2-1/16", lambda r: _matmul(
        r, SEED_SHAPE, FWD_DX, BOTH, (32,), HALF_TO_SIXTEENTH), "x floor", 1.25),
    Target("32 x 12288^2 fwd / dx, bs 32, 1/32-1/64", lambda r: _matmul(
        r, SEED_SHAPE, FWD_DX, BOTH, (32,), (1 / 32, 1 / 64)), "us over floor", 2.0),
    Target("32 x 12288^2, bs 16 and 8", lambda r: _matmul(
        r, SEED_SHAPE, ("forward", "dx", "dw"), BOTH, (8, 16), (1, 1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64)),
        "x floor", 1.5),
    Target("32 x 12288^2 training step, bs 32", lambda r: _matmul(
        r, SEED_SHAPE, ("step",), BOTH, (32,), (1, 1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64)),
        "x floor", 1.4),
    Target("8192^3 bf16, bs 64, 1/2-1/8", lambda r: _matmul(
        r, COMPUTE_SHAPE, ("forward",), ("bfloat16",), (64,), HALF_TO_EIGHTH), "% dense rate", 75.0),
    Target("8192^3 bf16, bs 32, 1/2-1/8", lambda r: _matmul(
        r, COMPUTE_SHAPE, ("forward",), ("bfloat16",), (32,), HALF_TO_EIGHTH), "% dense rate", 60.0),
    Target("8192^3 bf16, bs 16, 1/2-1/8", lambda r: _matmul(
        r, COMPUTE_SHAPE, ("forward",), ("bfloat16",), (16,), HALF_TO_EIGHTH), "% dense rate", 40.0),
    Target("8192^3 fp32 (TF32), bs 16-64, 1/2-1/8", lambda r: _matmul(
        r, COMPUTE_SHAPE, ("forward",), ("float32",), (16, 32, 64), HALF_TO_EIGHTH), "% dense rate", 60.0),
    Target("conv bf16, bs 32, 1/2-1/8", lambda r: _conv(r, (32,), HALF_TO_EIGHTH), "% dense rate", 60.0),
    Target("conv bf16, bs 16, 1/2-1/8", lambda r: _conv(r, (16,), HALF_TO_EIGHTH), "% dense rate", 40.0),
    Target("conv bf16, bs 32, 1/4", lambda r: _conv(r, (32,), (1 / 4,)), "x faster than dense", 2.4),
)


@dataclasses.dataclass(frozen=True)
class Check:
    target: Target
    record: dict
    value: float
    copy_value: float | None = None  # the same measure of XLA's copy of the case's bytes

    @property
    def met(self) -> bool:
        return self.target.met_by(self.value)

    @property
    def copy_met(self) -> bool | None:
        return None if self.copy_value is None else self.target.met_by(self.copy_value)


def copy_summary(checks: list[Check]) -> str:
    """How many of the cases XLA's copy of their bytes meets the bar in, or '-' if none timed."""
    copies = [c.copy_met for c in checks if c.copy_met is not None]
    return f"{sum(copies)} / {len(copies)}" if copies else "-"


def check(records: list[dict], targets=TARGETS) -> list[Check]:
    """Every (target, case) pair the records can judge: a jbs time and, where the measure needs
    one, the dense peer's time from the same run."""
    checks = []
    for impls in report._by_case(records).values():
        ours = impls.get("jbs")
        if ours is None:
            continue
        for target in targets:
            if target.covers(ours):
                value = target.value(ours, impls)
                copy = impls.get("xla_copy")
                copy_value = target.value(copy, impls) if copy and target.unit in FLOOR_UNITS else None
                if value is not None:
                    checks.append(Check(target, ours, value, copy_value))
    return checks


def case_label(record: dict) -> str:
    label = f"{record['op']} {record['dtype']} bs {record['block_size']} 1/{1 / record['density']:.0f}"
    return f"{label} {record['kernel'][0]}x{record['kernel'][1]}" if record.get("suite") == "conv" else label


def markdown(meta: dict, records: list[dict], targets=TARGETS, every_case: bool = False) -> str:
    """One row per target this run covers: how many of its cases met the bar, and the case
    furthest from it (or, with every_case, one row per case)."""
    lines = ["## Against the targets", ""]
    if not meta.get("gpu_kernels"):
        return "\n".join(lines + ["The targets are for the GPU kernels; this run timed the reference path.", ""])
    checks = check(records, targets)
    covered = [t for t in targets if any(c.target is t for c in checks)]
    header = ("| target | bar | case | jbs | met | XLA copy |" if every_case else
              "| target | bar | cases met | furthest from the bar | XLA copy meets it |")
    lines += [header, "|---|---|---|---|---|" + ("---|" if every_case else "")]
    for target in covered:
        mine = [c for c in checks if c.target is target]
        smaller_is_better = MEASURES[target.unit][1]
        bar = f"{'<=' if smaller_is_better else '>='} {target.bar:g} {target.unit}"
        if every_case:
            lines += [f"| {target.name} | {bar} | {case_label(c.record)} | {c.value:.2f} | {'yes' if c.met else 'no'} "
                      f"| {'-' if c.copy_value is None else f'{c.copy_value:.2f}'} |" for c in mine]
            continue
        worst = max(mine, key=lambda c: c.value if smaller_is_better else -c.value)
        lines.append(f"| {target.name} | {bar} | {sum(c.met for c in mine)} / {len(mine)} "
                     f"| {case_label(worst.record)}: {worst.value:.2f} | {copy_summary(mine)} |")
    uncovered = [t.name for t in targets if t not in covered]
    if uncovered:
        lines += ["", "Not covered by this run: " + "; ".join(uncovered) + "."]
    lines += ["", "XLA copy: the same measure of an XLA kernel that moves the case's bytes, timed in "
              "the same chain; where it misses the bar too, the bar is below what a plain XLA kernel "
              "over those bytes costs in this harness."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jbs.bench.targets",
                                     description="Check benchmark JSON files (one run each) against jbs's targets.")
    parser.add_argument("results", nargs="+", type=pathlib.Path, help="JSON files written by jbs-bench")
    parser.add_argument("--every-case", action="store_true", help="one row per case instead of per target")
    args = parser.parse_args(argv)
    for path in args.results:
        data = json.loads(path.read_text())
        meta = data["meta"]
        print(f"# {path}: {meta['device']}, {meta['date']}\n")
        print(markdown(meta, data["records"], every_case=args.every_case))
    return 0


if __name__ == "__main__":
    sys.exit(main())
