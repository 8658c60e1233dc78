"""Times chosen conv cases of the bench once per kernel setting (an environment that forces or
turns off a conv kernel, e.g. JBS_CONV_STRIP=0; "" is the default dispatch), beside XLA's dense
convolution, to see whether another kernel serves a row better than the dispatcher's choice.
Prints one line per case and setting with us and the % of the dense rate on nonzero blocks
(issue 4's measure), and writes the records as JSON. Usage (a minute or two):

    python scripts/conv_settings_probe.py OUT.json --cases forward:2x3:16:4 dx:3x3:32:8
        [--settings "" "JBS_CONV_STRIP=0"]   (op:kernel:block size:1 / density)
"""

import argparse
import json
import time

from jbs.bench import runners
from jbs.bench.cases import ConvCase
from kernel_switches import apply_setting  # scripts/, beside this file

SWITCHES = ("JBS_CONV_HALO", "JBS_CONV_HALO_SS", "JBS_CONV_STRIP", "JBS_CONV_STRIP_SPLIT",
            "JBS_CONV_STRIP_STAGES", "JBS_CONV_STRIP_FIXED_TAPS", "JBS_CONV_ROW_GROUP_DW",
            "JBS_CONV_PAIRED", "JBS_WS", "JBS_WGMMA", "JBS_GROUPS", "JBS_PANEL", "JBS_PANEL_DW",
            "JBS_DW_PANEL", "JBS_DW_STAGED")


def parse_case(text: str, batch: int, size: int, channels: int) -> ConvCase:
    op, kernel, block_size, inverse = text.split(":")
    kh, kw = map(int, kernel.split("x"))
    return ConvCase(op, "bfloat16", batch, size, channels, channels, (kh, kw), int(block_size),
                    1 / int(inverse))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--cases", nargs="+", required=True, help="op:KHxKW:bs:1/density")
    parser.add_argument("--settings", nargs="*", default=[""])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--channels", type=int, default=320)
    args = parser.parse_args()
    records, started = [], time.time()
    for text in args.cases:
        case = parse_case(text, args.batch, args.size, args.channels)
        apply_setting("", SWITCHES)
        dense_us = runners.run_dense_conv(case)
        for setting in args.settings:
            apply_setting(setting, SWITCHES)
            us = runners.run_jbs_conv(case)
            # % of the dense rate counting nonzero blocks only: dense time x density / jbs time.
            percent = 100 * dense_us * case.density / us
            records.append(dict(case.__dict__, setting=setting, us=us, dense_us=dense_us,
                                percent_dense_rate=percent))
            print(f"{time.time() - started:5.0f}s {text} [{setting or 'default'}]: {us:.1f} us, "
                  f"dense {dense_us:.1f} us, {percent:.0f}% of the dense rate", flush=True)
            with open(args.out, "w") as f:
                json.dump(records, f, indent=1)
    apply_setting("", SWITCHES)


if __name__ == "__main__":
    main()
