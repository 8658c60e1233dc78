"""Per-opcode summary of Nsight Compute SASS source pages, side by side for two builds.

scripts/profile_conv.sh writes each row's `--page source --csv --print-source sass` as
*_sass.csv. This prints, per opcode (the instruction's first word after any predicate, e.g.
HGMMA.64x256x16.F32.BF16 -> HGMMA), the warp instructions executed and the share of the stall
samples, for one CSV or for two (say main's build and a branch's), so that "the new code runs
more instructions per item" and "it waits in a different place" can be told apart without a
disassembler. Usage:
  python3 scripts/sass_summary.py A_sass.csv [B_sass.csv] [--top 30] [--per N_A [N_B]]
--per divides the executed counts by a count of work (e.g. the items the loader issued) to
give instructions per item.
"""

from __future__ import annotations

import argparse
import collections
import csv


def opcode(source: str) -> str:
    words = source.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else "?"


def summarize(path: str) -> tuple[collections.Counter, collections.Counter]:
    """(executed warp instructions, stall samples) per opcode."""
    rows = list(csv.reader(open(path, newline="")))
    header_at = next(i for i, row in enumerate(rows) if "Source" in row)
    header = rows[header_at]
    source = header.index("Source")
    executed = header.index("Instructions Executed")
    samples = header.index("Warp Stall Sampling (All Samples)")
    counts, stalls = collections.Counter(), collections.Counter()
    for row in rows[header_at + 1:]:
        if len(row) <= max(source, executed, samples):
            continue
        op = opcode(row[source])
        counts[op] += int(float(row[executed] or 0))
        stalls[op] += float(row[samples] or 0)
    return counts, stalls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csvs", nargs="+", help="one or two *_sass.csv files")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--per", type=float, nargs="*", default=None, help="work count per CSV")
    args = parser.parse_args()
    if len(args.csvs) > 2:
        parser.error("one or two CSV files")
    per = args.per or [1.0] * len(args.csvs)
    if len(per) != len(args.csvs):
        parser.error("--per takes one count per CSV")
    summaries = [summarize(path) for path in args.csvs]
    total_samples = [sum(stalls.values()) or 1.0 for _, stalls in summaries]
    ops = collections.Counter()
    for counts, _ in summaries:
        ops.update(counts)
    print("opcode".ljust(16) + "".join(f"{'executed':>14}{'samples %':>11}" for _ in summaries))
    for op, _ in ops.most_common(args.top):
        cells = "".join(f"{counts[op] / n:14.1f}{100 * stalls[op] / t:11.1f}"
                        for (counts, stalls), n, t in zip(summaries, per, total_samples))
        print(op.ljust(16) + cells)
    print("all".ljust(16) + "".join(f"{sum(counts.values()) / n:14.1f}{100.0:11.1f}"
                                     for (counts, _), n in zip(summaries, per)))


if __name__ == "__main__":
    main()
