"""How much of the conv kernels' tensor work multiplies real blocks, on the bench's layouts.

The strip kernel (cuda/conv/bsconv_strip_kernel.cuh, forward and input gradient) puts 64
output channels on an MMA's M: two 32-wide block columns of its column group at bs 32, four
16-wide ones at bs 16. For every item (an input channel block, at bs 16 an aligned pair of
them) a warpgroup runs its MMA chain wherever any of its columns has a block, so the rows of
the absent columns multiply zeros. The row group dw kernel does the same with the blocks of
one block row (64 / bs of them on M). "fill" is the share of the executed M rows that belong
to a present block: the kernel's tensor pipe must be busy 1 / fill times as long as the useful
FLOPs alone need. No GPU needed; reads the same tables the kernels get.

    python scripts/conv_mma_fill.py [--channels 320] [--taps 6]
"""
import argparse

import numpy as np

import jbs.layouts
from jbs._src import tables


def strip_fill(t: tables.Tables, block_size: int, taps: int, op: str) -> tuple[int, int, float]:
    """(items per tile, warpgroup MMA chains per tile, fill) of the strip kernel on tables t."""
    offsets = np.asarray(getattr(t, f"{op}_paired_offsets"))
    items = np.asarray(getattr(t, f"{op}_paired_items"))
    width = items.shape[1] - 1
    per_warpgroup = width // 2
    executed = present = item_count = 0
    for q in range(offsets.shape[0] - 1):
        rows = items[offsets[q]:offsets[q + 1]]
        rows = rows[: rows.shape[0] // taps]  # tap 0's union items: the walk's items
        has = rows[:, 1:] >= 0  # (items, width)
        # bs 16 joins aligned pairs of input channel blocks into one item of two k-steps,
        # a k-step skipped where the warpgroup has no block in that half.
        item_keys = rows[:, 0] // 2 if block_size == 16 else rows[:, 0]
        item_count += np.unique(item_keys).size
        for wg in range(2):
            mine = has[:, wg * per_warpgroup:(wg + 1) * per_warpgroup]
            chains = mine.any(axis=1)
            executed += int(chains.sum()) * per_warpgroup
            present += int(mine.sum())
    return item_count, executed // per_warpgroup, present / max(executed, 1)


def dw_fill(t: tables.Tables, taps: int) -> tuple[int, float]:
    """(row groups per tap, fill) of the row group dw kernel on tables t."""
    groups = np.asarray(t.dw_row_groups)
    per_tap = groups.shape[0] // taps
    mine = groups[:per_tap]
    return per_tap, float((mine >= 0).mean())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--channels", type=int, default=320)
    parser.add_argument("--taps", type=int, default=6)
    args = parser.parse_args()
    print("bs density | fwd: items chains fill | dx: items chains fill | dw: row groups fill")
    for block_size in (32, 16):
        blocks = args.channels // block_size
        for inverse in (2, 4, 8):
            layout = jbs.layouts.random(blocks, blocks, 1 / inverse, seed=0)  # as jbs.bench
            t = tables.conv_tables_for(layout, args.taps, block_size)  # the tables the kernels get
            fwd = strip_fill(t, block_size, args.taps, "fwd")
            dx = strip_fill(t, block_size, args.taps, "dx")
            dw = dw_fill(t, args.taps)
            print(f"{block_size} 1/{inverse} | {fwd[0]} {fwd[1]} {fwd[2]:.2f} | {dx[0]} {dx[1]} {dx[2]:.2f} | "
                  f"{dw[0]} {dw[1]:.2f}")


if __name__ == "__main__":
    main()
