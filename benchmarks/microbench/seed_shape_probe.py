"""Times jbs's small-N forward at the seed shape the way jbs-bench does, with each small-N
kernel choice in one process, so that a profiler can be run on exactly this.

    JBS_STREAM_EVEN=1 python3 seed_shape_probe.py [dtype] [density] [block_size]

JBS_STREAM_EVEN=1 at start-up makes the lowering reserve the even-split kernel's scratch; the
launcher reads the variable at every launch, so the same executable is then timed with it on
(1) and off (0, the one-column kernel).
"""

import os
import sys

import jax
import jax.numpy as jnp

import jbs
from jbs.bench import runners, timing


def main() -> None:
    dtype = jnp.dtype(sys.argv[1] if len(sys.argv) > 1 else "bfloat16")
    density = float(eval(sys.argv[2])) if len(sys.argv) > 2 else 0.5  # "1/2" or 0.5
    block_size = int(sys.argv[3]) if len(sys.argv) > 3 else 32
    n, features = 32, 12288
    layout = jbs.layouts.random(features // block_size, features // block_size, density, seed=0)
    bsmm = jbs.BlockSparseMatMul(layout, block_size)

    def make(i):
        kx, kw = jax.random.split(jax.random.key(i))
        return (jax.random.normal(kx, (n, features), jnp.float32).astype(dtype),
                jax.random.normal(kw, bsmm.w_shape, jnp.float32).astype(dtype))

    weight_bytes = bsmm.nnz * block_size**2 * dtype.itemsize
    sets = [make(i) for i in range(timing.rotation(weight_bytes))]
    print(f"{jax.devices()[0].device_kind}, {dtype.name} bs {block_size} density {density}: "
          f"{len(sets)} weight sets of {weight_bytes / 1e6:.1f} MB", flush=True)
    for setting in ("1", "0", "1"):
        os.environ["JBS_STREAM_EVEN"] = setting
        us = timing.time_chain(bsmm, sets, min_ops=runners.MIN_OPS)
        print(f"JBS_STREAM_EVEN={setting}: {us:.1f} us per forward", flush=True)


if __name__ == "__main__":
    main()
