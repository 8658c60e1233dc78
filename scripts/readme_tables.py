"""The README's performance tables, from committed benchmark JSON (one run per file), so that
the figures on the front page are the files' figures and say which run they come from.

  python3 scripts/readme_tables.py seed benchmarks/results/quick_seed_h200_2026-12-04_session63.json
  python3 scripts/readme_tables.py large benchmarks/results/large_n_h200_2026-11-28_session37.json
  python3 scripts/readme_tables.py conv benchmarks/results/conv_h200_2026-12-04_session59.json
  python3 scripts/readme_tables.py targets FILE.json [FILE.json ...]
  python3 scripts/readme_tables.py --update README.md   # rewrite every marked table
  python3 scripts/readme_tables.py --check README.md    # fail if a marked table is stale

A marked table sits between ``<!-- readme_tables: KIND FILE.json ... -->`` and
``<!-- /readme_tables -->``; --update regenerates it from the files the marker names.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from jbs.bench import report, targets  # noqa: E402


def _cases(records):
    """{case key without impl: {impl: record}} as the bench's own tables group them."""
    return list(report._by_case(records).values())


def _source(path: pathlib.Path, meta: dict) -> str:
    return (f"{meta['device']}, {meta['date']}, `{meta['command'].split(' --out')[0]}` "
            f"(`benchmarks/{path.as_posix().split('benchmarks/')[-1]}`; copy {meta['copy_bytes_per_s'] / 1e9:.0f} GB/s)")


def _density(d: float) -> str:
    return "1" if d == 1 else f"1/{1 / d:.0f}"


def _put(rows, row_key, column, cell) -> None:
    """Sets a table cell, refusing a second record for it (a file with more shapes than the
    table's columns tell apart would otherwise show whichever came last)."""
    row = rows.setdefault(row_key, {})
    if column in row:
        raise ValueError(f"two records for the cell {row_key} / {column}: this table takes one shape per "
                         "file (give a file of the table's shape)")
    row[column] = cell


def _torch_note(rows) -> str:
    return (" " + report.TORCH_FP32_NOTE) if any(key[0] == "float32" for key in rows) else ""


def seed_table(path, meta, records) -> str:
    """us per op (x its floor) at the announcement's shape, bs 32, and the forward's speed-ups."""
    rows = {}
    for impls in _cases(records):
        ours = impls.get("jbs")
        if not ours or ours["n"] != 32 or ours["c"] != 12288 or ours["block_size"] != 32:
            continue
        key = (ours["dtype"], ours["density"])
        _put(rows, key, ours["op"], f"{ours['us']:.1f} ({ours['us'] / ours['floor_us']:.2f}x)")
        if ours["op"] == "forward":
            if "xla_dense" in impls:
                _put(rows, key, "xla_dense", f"{impls['xla_dense']['us'] / ours['us']:.2f}")
            if "torch_bsr" in impls:
                _put(rows, key, "torch_bsr", report.torch_speedup(impls))
    lines = [f"From {_source(path, meta)}. us per op (x the op's floor); the last two columns are the "
             "forward's speed-up over XLA's dense dot and over torch's Triton BSR kernel." + _torch_note(rows), "",
             "| dtype | density | forward | input grad | weight grad | training step | fwd x dense | fwd x torch BSR |",
             "|---|---|---|---|---|---|---|---|"]
    for (dtype, density), row in sorted(rows.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
        cells = [row.get(k, "-") for k in ("forward", "dx", "dw", "step", "xla_dense", "torch_bsr")]
        lines.append(f"| {dtype} | {_density(density)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def large_table(path, meta, records) -> str:
    """The compute-bound forward: us and share of the dense dot's FLOP rate on nonzero blocks."""
    rows = {}
    for impls in _cases(records):
        ours, dense = impls.get("jbs"), impls.get("xla_dense")
        if not ours or ours["n"] < 2048:
            continue
        cell = f"{ours['us']:.0f}"
        if dense:
            cell += f" ({100 * ours['tflops'] / dense['tflops']:.0f}%)"
        if "torch_bsr" in impls:
            speedup = report.torch_speedup(impls, digits=1)  # "1.7" or, against jbs at highest, "1.7 h"
            cell += f", {speedup.removesuffix(' h')}x torch" + (" h" if speedup.endswith(" h") else "")
        if ours.get("path", "").startswith("dense"):
            cell += " *"
        _put(rows, (ours["dtype"], ours["block_size"]), ours["density"], cell)
    densities = sorted({d for row in rows.values() for d in row}, reverse=True)
    lines = [f"From {_source(path, meta)}. us (share of the dense dot's FLOP rate, counting the nonzero "
             "blocks' FLOPs), and the speed-up over torch's Triton BSR kernel; * = the dense dot on the "
             "densified weights, where jbs's rule finds it faster." + _torch_note(rows), "",
             "| dtype | block | " + " | ".join(_density(d) for d in densities) + " |",
             "|---|---|" + "---|" * len(densities)]
    for (dtype, bs), row in sorted(rows.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
        lines.append(f"| {dtype} | {bs} | " + " | ".join(row.get(d, "-") for d in densities) + " |")
    return "\n".join(lines) + "\n"


def conv_table(path, meta, records) -> str:
    """Convolutions: us, share of cuDNN's rate on nonzero blocks, speed-up over cuDNN."""
    rows, shapes = {}, set()
    for impls in _cases(records):
        ours, dense = impls.get("jbs"), impls.get("xla_dense")
        if not ours or not dense:
            continue
        shapes.add((ours["n"], ours["size"], ours["c"], ours["k"], ours["dtype"]))
        cell = f"{ours['us']:.0f} ({100 * ours['tflops'] / dense['tflops']:.0f}%, {dense['us'] / ours['us']:.1f}x)"
        _put(rows, (ours["block_size"], tuple(ours["kernel"]), ours["op"]), ours["density"], cell)
    if len(shapes) != 1:
        raise ValueError(f"the conv table takes one image batch shape and dtype per file; got {sorted(shapes)}")
    (n, size, c, k, dtype), = shapes
    densities = sorted({d for row in rows.values() for d in row}, reverse=True)
    order = {"forward": 0, "dx": 1, "dw": 2}
    lines = [f"From {_source(path, meta)}. Batch {n}, {size}x{size} images, {c} -> {k} channels, {dtype}: us "
             "(share of cuDNN's FLOP rate, counting the nonzero blocks' FLOPs; speed-up over cuDNN's dense conv).", "",
             "| block | kernel | op | " + " | ".join(_density(d) for d in densities) + " |",
             "|---|---|---|" + "---|" * len(densities)]
    for (bs, kernel, op), row in sorted(rows.items(), key=lambda kv: (-kv[0][0], kv[0][1] == (1, 1), kv[0][1],
                                                                       order[kv[0][2]])):
        lines.append(f"| {bs} | {kernel[0]}x{kernel[1]} | {op} | " + " | ".join(row.get(d, "-") for d in densities) + " |")
    return "\n".join(lines) + "\n"


def targets_table(runs) -> str:
    """Every target, judged case by case on the runs given; a case timed by several runs is
    judged on the last of them (list the files oldest first)."""
    lines = ["| target | bar | cases met | furthest from the bar | XLA copy meets it | runs |",
             "|---|---|---|---|---|---|"]
    for target in targets.TARGETS:
        latest = {}
        for path, meta, records in runs:
            for check in targets.check(records, (target,)):
                latest[report._case_key(check.record)] = (path, check)
        smaller_is_better = targets.MEASURES[target.unit][1]
        bar = f"{'<=' if smaller_is_better else '>='} {target.bar:g} {target.unit}"
        if not latest:
            lines.append(f"| {target.name} | {bar} | not measured | | | |")
            continue
        checks = [check for _, check in latest.values()]
        worst = max(checks, key=lambda c: c.value if smaller_is_better else -c.value)
        files = ", ".join(sorted({f"`{path.name}`" for path, _ in latest.values()}))
        lines.append(f"| {target.name} | {bar} | {sum(c.met for c in checks)} / {len(checks)} | "
                     f"{targets.case_label(worst.record)}: {worst.value:.2f} | {targets.copy_summary(checks)} | {files} |")
    return "\n".join(lines) + "\n"


def render(kind: str, paths) -> str:
    runs = []
    for path in paths:
        data = json.loads(pathlib.Path(path).read_text())
        runs.append((pathlib.Path(path), data["meta"], data["records"]))
    if kind == "targets":
        return targets_table(runs)
    make = {"seed": seed_table, "large": large_table, "conv": conv_table}[kind]
    return "\n".join(make(*run) for run in runs)


MARKED = re.compile(r"(<!-- readme_tables: (\w+) ([^>]*?) -->\n)(.*?)(<!-- /readme_tables -->)", re.S)


def refreshed(text: str, root: pathlib.Path) -> str:
    """``text`` with every marked table regenerated (file paths relative to ``root``)."""
    def table(match):
        head, kind, files, _, tail = match.groups()
        return head + render(kind, [root / f for f in files.split()]) + tail
    return MARKED.sub(table, text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--update", type=pathlib.Path, help="rewrite the marked tables of this markdown file")
    parser.add_argument("--check", type=pathlib.Path, help="fail if a marked table of this file is stale")
    parser.add_argument("table", nargs="?", choices=("seed", "large", "conv", "targets"))
    parser.add_argument("results", nargs="*", type=pathlib.Path)
    args = parser.parse_args(argv)
    for path in filter(None, (args.update, args.check)):
        text = path.read_text()
        new = refreshed(text, path.resolve().parent)
        if args.check and new != text:
            print(f"{path}: a table differs from what its results files give; run "
                  f"python3 scripts/readme_tables.py --update {path}")
            return 1
        if args.update:
            path.write_text(new)
        return 0
    if not args.table or not args.results:
        parser.error("give a table kind and results files, or --update / --check FILE")
    print(render(args.table, args.results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
