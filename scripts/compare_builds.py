"""Bit-for-bit comparison of two builds of the extension on the GPU machine.

A kernel change that should only reorder work (not the order of any sum) must leave every
output bit unchanged. Run once with the old build to save its outputs, then with the new one to
compare, each in its own process (one extension per process):
  python3 -P scripts/compare_builds.py --save /tmp/old.npz     # with the old .so in jbs/
  python3 -P scripts/compare_builds.py --check /tmp/old.npz    # with the new one
Environment settings (JBS_* switches) apply to both runs as usual. The cases are fwd and dx of
16-bit types at bs 8, 16 and 32 on power-law layouts with an empty block row and column, at
N = 32 and 7, on fresh random data with a fixed seed; with --suite conv, fwd, dx and dw of 2x3
and 3x3 convolutions (PixelCNN++'s paddings, 32 x 32 and 8 x 8 images, 320 channels) at bs 16
and 32.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jbs  # noqa: E402


def power_law_layout(rng, rows: int, cols: int, density: float) -> np.ndarray:
    """Column weights falling as 1 / (rank + 1), one empty block row and one empty column."""
    weights = 1.0 / (1.0 + rng.permutation(cols))
    probability = np.minimum(1.0, density * cols * weights / weights.sum())
    layout = rng.random((rows, cols)) < probability[None, :]
    layout[rng.integers(rows), :] = False
    layout[:, rng.integers(cols)] = False
    return layout


def data(rng, shape, dtype):
    return jnp.asarray(rng.standard_normal(shape), jnp.float32).astype(dtype)


def conv_outputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(44)
    results = {}
    for dtype in (jnp.bfloat16, jnp.float16):
        for bs in (16, 32):
            for kernel, padding in (((2, 3), ((1, 0), (1, 1))), ((3, 3), "SAME")):
                for density in (0.5, 0.125):
                    # 8 x 8 images: a 256-pixel tile holds 4 of them (the dw halo's bands)
                    for size in (32, 8) if density == 0.5 else (32,):
                        layout = power_law_layout(rng, 320 // bs, 320 // bs, density)
                        conv = jbs.BlockSparseConv(layout, bs, kernel, padding=padding)
                        x, w, g = (data(rng, (3 * (32 // size) ** 2, size, size, 320), dtype),
                                   data(rng, conv.w_shape, dtype),
                                   data(rng, (3 * (32 // size) ** 2, size, size, 320), dtype))
                        y, vjp = jax.vjp(conv, x, w)
                        dx, dw = vjp(g)
                        key = f"{jnp.dtype(dtype).name}_bs{bs}_{kernel[0]}x{kernel[1]}_d{density}_s{size}"
                        results[key + "_fwd"] = np.asarray(y.astype(jnp.float32))
                        results[key + "_dx"] = np.asarray(dx.astype(jnp.float32))
                        results[key + "_dw"] = np.asarray(dw.astype(jnp.float32))
    return results


def outputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(43)
    results = {}
    for dtype in (jnp.bfloat16, jnp.float16):
        for bs in (8, 16, 32):
            for n in (32, 7):
                for density in (0.5, 0.125):
                    layout = power_law_layout(rng, 4096 // bs, 3072 // bs, density)
                    bsmm = jbs.BlockSparseMatMul(layout, bs)
                    x, w, g = (data(rng, (n, bsmm.shape[0]), dtype), data(rng, bsmm.w_shape, dtype),
                               data(rng, (n, bsmm.shape[1]), dtype))
                    y, vjp = jax.vjp(lambda x_: bsmm(x_, w), x)
                    key = f"{jnp.dtype(dtype).name}_bs{bs}_n{n}_d{density}"
                    results[key + "_fwd"] = np.asarray(y.astype(jnp.float32))
                    results[key + "_dx"] = np.asarray(vjp(g)[0].astype(jnp.float32))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--save", metavar="PATH")
    mode.add_argument("--check", metavar="PATH")
    parser.add_argument("--suite", choices=("matmul", "conv"), default="matmul")
    args = parser.parse_args()
    got = conv_outputs() if args.suite == "conv" else outputs()
    if args.save:
        np.savez(args.save, **got)
        print(f"saved {len(got)} outputs to {args.save}")
        return 0
    saved = np.load(args.check)
    differ = [k for k in got if not np.array_equal(got[k], saved[k], equal_nan=True)]
    for k in differ:
        print(f"DIFFERS {k}: max |diff| {np.max(np.abs(got[k] - saved[k]))}")
    print(f"{len(got) - len(differ)} of {len(got)} outputs equal bit for bit")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
