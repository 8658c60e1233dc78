"""Measures where the dense-dot fallback (jbs/_src/dense_fallback.py) beats the block kernels,
on the GPU at hand: each case timed with JBS_DENSE_FALLBACK=0 (block kernels) and =1 (the
weights densified, then XLA's dense dot), as jbs.bench times jbs. Prints one line per case and
writes the records as JSON; RULES should follow the crossovers it shows. Usage (a few minutes):

    python scripts/dense_fallback_probe.py OUT.json [--rows 128,512,2048] [--ops forward,dx]
        [--bs8 2,8,16,32,64] [--bs16 2,4,8,16]   (1 / density at each block size)
"""

import argparse
import json
import os
import time

from jbs.bench import runners
from jbs.bench.cases import Case


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--rows", default="64,128,512,2048")
    parser.add_argument("--ops", default="forward")
    parser.add_argument("--features", type=int, default=8192, help="C = K")
    parser.add_argument("--bs8", default="2,8,16,32,64", help="1 / density at bs 8")
    parser.add_argument("--bs16", default="2,4,8,16", help="1 / density at bs 16")
    args = parser.parse_args()
    densities = {bs: [1 / int(v) for v in getattr(args, f"bs{bs}").split(",") if v] for bs in (8, 16)}
    records, started = [], time.time()
    for dtype in ("bfloat16", "float32"):
        for rows in map(int, args.rows.split(",")):
            for block_size in (8, 16):
                for density in densities[block_size]:
                    for op in args.ops.split(","):
                        case = Case(op, dtype, rows, args.features, args.features, block_size, density)
                        record = dict(case.__dict__)
                        for setting, key in (("0", "kernels_us"), ("1", "fallback_us")):
                            os.environ["JBS_DENSE_FALLBACK"] = setting  # read when each op lowers
                            record[key] = runners.run_jbs(case)
                        records.append(record)
                        ratio = record["kernels_us"] / record["fallback_us"]
                        print(f"{time.time() - started:5.0f}s {op} {dtype} N={rows} bs={block_size} "
                              f"density=1/{round(1 / density)}: kernels {record['kernels_us']:.1f} us, "
                              f"fallback {record['fallback_us']:.1f} us, "
                              f"{'fallback' if ratio > 1 else 'kernels'} {max(ratio, 1 / ratio):.2f}x faster",
                              flush=True)
                        with open(args.out, "w") as f:
                            json.dump(records, f, indent=1)


if __name__ == "__main__":
    main()
