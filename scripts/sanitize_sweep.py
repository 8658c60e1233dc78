"""A small sweep of every kernel for compute-sanitizer (memcheck, racecheck): each block size,
dtype and op on awkward layouts (empty rows and columns, a heavy column), N not a tile multiple."""

import numpy as np
import jax
import jax.numpy as jnp

import jbs

rng = np.random.default_rng(0)
for bs in (8, 16, 32, 64):
    for dtype in (jnp.float32, jnp.bfloat16, jnp.float16):
        layout = rng.random((5, 4)) < 0.4
        layout[1, :] = False
        layout[:, 2] = False
        layout[:, 0] = True
        bsmm = jbs.BlockSparseMatMul(layout, bs)
        for n in (1, 37):
            x = jnp.asarray(rng.standard_normal((n, bsmm.shape[0])), dtype)
            w = jnp.asarray(rng.standard_normal(bsmm.w_shape), dtype)
            g = jnp.asarray(rng.standard_normal((n, bsmm.shape[1])), dtype)
            y, pull = jax.vjp(bsmm, x, w)
            jax.block_until_ready((y, pull(g)))
print("sanitize sweep done")
