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

--regions splits instead each CSV of a warp-specialized kernel laid out as the conv strip
kernel is (consumers first, from `USETMAXREG.TRY_ALLOC`, then the producer after
`USETMAXREG.DEALLOC`) into the parts its time goes to: the start before the split, the
consumers' unit head (up to their first mbarrier wait that ran), that `full` wait, their MMAs (up to their
last `WARPGROUP.DEPBAR.LE gsb0, 0x0`), their epilogue, the producer (up to its first
unpredicated EXIT), and the out-of-line retry loops after it; the share of stall samples and the
executed warp instructions of each (benchmarks/NOTES.md, session 52).
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


def rows_of(path: str) -> list[tuple[str, int, float]]:
    """(source, executed warp instructions, stall samples) per SASS line, in address order."""
    rows = list(csv.reader(open(path, newline="")))
    header_at = next(i for i, row in enumerate(rows) if "Source" in row)
    header = rows[header_at]
    source = header.index("Source")
    executed = header.index("Instructions Executed")
    samples = header.index("Warp Stall Sampling (All Samples)")
    return [(row[source], int(float(row[executed] or 0)), float(row[samples] or 0))
            for row in rows[header_at + 1:] if len(row) > max(source, executed, samples)]


def summarize(path: str) -> tuple[collections.Counter, collections.Counter]:
    """(executed warp instructions, stall samples) per opcode."""
    counts, stalls = collections.Counter(), collections.Counter()
    for source, executed, samples in rows_of(path):
        op = opcode(source)
        counts[op] += executed
        stalls[op] += samples
    return counts, stalls


WS_REGIONS = ("start", "consumers: unit head", "consumers: full wait", "consumers: MMAs",
              "consumers: epilogue", "producer", "retry loops")


def ws_regions(path: str) -> dict[str, tuple[int, float]]:
    """(executed warp instructions, stall samples) per region of a warp-specialized kernel's
    SASS (see --regions). ValueError if the markers are missing."""
    lines = rows_of(path)
    text = [source.strip() for source, _, _ in lines]

    def first(predicate, start=0, stop=None):
        stop = len(text) if stop is None else stop
        return next((i for i in range(start, stop) if predicate(text[i])), None)

    alloc = first(lambda t: "USETMAXREG.TRY_ALLOC" in t)
    dealloc = first(lambda t: "USETMAXREG.DEALLOC" in t)
    if alloc is None or dealloc is None or dealloc < alloc:
        raise ValueError(f"{path}: no USETMAXREG.TRY_ALLOC before a USETMAXREG.DEALLOC: not a "
                         "consumers-first warp-specialized kernel")
    # (The first wait that ran: a build may carry waits of a path it never takes, e.g. a switch.)
    wait = next((i for i in range(alloc, dealloc) if "TRYWAIT" in text[i] and lines[i][1] > 0), None)
    drains = [i for i in range(alloc, dealloc) if "WARPGROUP.DEPBAR.LE gsb0, 0x0" in text[i]]
    if wait is None or not drains:
        raise ValueError(f"{path}: the consumers have no mbarrier wait or no wgmma drain")
    producer_end = first(lambda t: t.split()[:1] == ["EXIT"], dealloc)
    producer_end = len(text) - 1 if producer_end is None else producer_end
    # The wait is a try_wait and the branch that loops on it (the retries run out of line).
    bounds = (0, alloc, wait, wait + 2, drains[-1] + 1, dealloc, producer_end + 1, len(text))
    out = {}
    for name, lo, hi in zip(WS_REGIONS, bounds, bounds[1:]):
        out[name] = (sum(e for _, e, _ in lines[lo:hi]), sum(s for _, _, s in lines[lo:hi]))
    return out


def print_regions(paths: list[str], per: list[float]) -> None:
    regions = [ws_regions(path) for path in paths]
    totals = [sum(s for _, s in r.values()) or 1.0 for r in regions]
    print("region".ljust(24) + "".join(f"{'executed':>14}{'samples %':>11}" for _ in regions))
    for name in WS_REGIONS:
        print(name.ljust(24) + "".join(f"{r[name][0] / n:14.1f}{100 * r[name][1] / t:11.1f}"
                                       for r, n, t in zip(regions, per, totals)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csvs", nargs="+", help="one or two *_sass.csv files")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--per", type=float, nargs="*", default=None, help="work count per CSV")
    parser.add_argument("--regions", action="store_true",
                        help="split a warp-specialized kernel into its regions instead of opcodes")
    args = parser.parse_args()
    if len(args.csvs) > 2:
        parser.error("one or two CSV files")
    per = args.per or [1.0] * len(args.csvs)
    if len(per) != len(args.csvs):
        parser.error("--per takes one count per CSV")
    if args.regions:
        print_regions(args.csvs, per)
        return
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
