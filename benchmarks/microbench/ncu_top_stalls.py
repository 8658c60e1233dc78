"""The instructions where a kernel's warps stall most, from Nsight Compute's source page:

    ncu --import report.ncu-rep --page source --csv --print-source sass > sass.csv
    python3 ncu_top_stalls.py sass.csv [count]

prints the stall reasons' shares over all samples, then the `count` instructions with the most
samples, each with its two main reasons.
"""

import csv
import sys


def main() -> None:
    rows = list(csv.reader(open(sys.argv[1])))
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    header = next(i for i, r in enumerate(rows) if "Address" in r)
    names, data = rows[header], rows[header + 1:]
    col = {h: i for i, h in enumerate(names)}
    samples = col["Warp Stall Sampling (All Samples)"]
    reasons = [h for h in names if h.startswith("stall_") and "Not Issued" not in h]
    total = sum(int(r[samples] or 0) for r in data) or 1
    shares = {s: sum(int(r[col[s]] or 0) for r in data) for s in reasons}
    print(f"samples {total}: " + ", ".join(f"{s[6:]} {100 * v / total:.1f}%"
                                          for s, v in sorted(shares.items(), key=lambda kv: -kv[1])[:8]))
    for r in sorted(data, key=lambda r: -int(r[samples] or 0))[:count]:
        top = sorted(((int(r[col[s]] or 0), s[6:]) for s in reasons), reverse=True)[:2]
        print(f"{100 * int(r[samples]) / total:5.1f}% {r[0][-5:]} {r[1].strip()[:70]:70s} {top}")


if __name__ == "__main__":
    main()
