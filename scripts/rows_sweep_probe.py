"""Times the block kernels over N (rows) at one (C, K), to find cliffs between the small-N
(N <= 64), mid-N and large-N kernels: each case as jbs.bench times jbs, with the dense-dot
fallback off, once per setting (an environment that forces a kernel, e.g. JBS_WGMMA=1; ""
is the default dispatch), and XLA's dense dot on the same rows. Prints one line per case with
us, us per 64 rows and the TFLOP/s on the nonzero blocks, and writes the records as JSON.
Usage (a few minutes):

    python scripts/rows_sweep_probe.py OUT.json [--rows 64,128,256,512] [--bs 16,32,64]
        [--dtypes bfloat16,float32] [--densities 2,8] [--ops forward]
        [--settings "" "JBS_WGMMA=1"]
"""

import argparse
import json
import os
import time

from jbs.bench import runners
from jbs.bench.cases import Case
from kernel_switches import apply_setting  # scripts/, beside this file

SWITCHES = ("JBS_WGMMA", "JBS_GROUPS", "JBS_GROUP_TMA", "JBS_MID_SLICES", "JBS_STREAM_WS", "JBS_STREAM_EVEN",
            "JBS_STREAM_EVEN_GROUP")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--rows", default="32,64,96,128,192,256,384,512,1024")
    parser.add_argument("--features", type=int, default=8192, help="C = K")
    parser.add_argument("--bs", default="16,32,64")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--densities", default="2,8", help="1 / density")
    parser.add_argument("--ops", default="forward")
    parser.add_argument("--settings", nargs="*", default=[""])
    parser.add_argument("--dense", action="store_true", help="also time XLA's dense dot")
    args = parser.parse_args()
    os.environ["JBS_DENSE_FALLBACK"] = "0"
    records, started = [], time.time()
    for dtype in args.dtypes.split(","):
        for block_size in map(int, args.bs.split(",")):
            for inverse in map(int, args.densities.split(",")):
                for op in args.ops.split(","):
                    for rows in map(int, args.rows.split(",")):
                        case = Case(op, dtype, rows, args.features, args.features, block_size, 1 / inverse)
                        record = dict(case.__dict__)
                        if args.dense:
                            record["dense_us"] = runners.run_dense(case)
                        line = [f"{time.time() - started:5.0f}s {op} {dtype} bs={block_size} 1/{inverse} N={rows}:"]
                        for setting in args.settings:
                            apply_setting(setting, SWITCHES)
                            us = runners.run_jbs(case)
                            record[setting or "default"] = us
                            line.append(f"[{setting or 'default'}] {us:.1f} us ({us * 64 / rows:.1f}/64 rows, "
                                        f"{case.flops() / us * 1e-6:.0f} TF/s)")
                        apply_setting("", SWITCHES)
                        if args.dense:
                            line.append(f"dense {record['dense_us']:.1f}")
                        records.append(record)
                        print(" ".join(line), flush=True)
                        with open(args.out, "w") as f:
                            json.dump(records, f, indent=1)


if __name__ == "__main__":
    main()
