"""A compute-sanitizer sweep of the large-N TMA-fed column-group kernel
(cuda/matmul/bsmm_group_tma_kernel.cuh): every configuration it serves (16-bit at bs 32 and
64, fp32 at bs 32 and 64), forward and input gradient, on a layout with an empty block row, an empty
block column and a full one, and a row count that ends part-way through a 256-row tile.
Run with JBS_GROUP_TMA=1 so the kernel is taken at this small size:
  JBS_GROUP_TMA=1 compute-sanitizer --tool memcheck python scripts/sanitize_tma.py
SANITIZE_ROWS=200 sweeps mid N instead, where the kernel cuts its items into slices whose
partials a second kernel sums; SANITIZE_BS=16 with JBS_WGMMA=1 sweeps the wgmma group kernel
(bs 16's, sliced alike at mid N) over the same cases."""

import os

import numpy as np
import jax
import jax.numpy as jnp

import jbs

ROWS = int(os.environ.get("SANITIZE_ROWS", "580"))  # 580: two full 256-row tiles and a partial one
BLOCK_SIZES = [int(bs) for bs in os.environ.get("SANITIZE_BS", "32,64").split(",")]
rng = np.random.default_rng(0)
# fp32 at bs 64: the bs 32 kernel over the blocks' quarters
cases = [(bs, dtype) for bs in BLOCK_SIZES for dtype in (jnp.bfloat16, jnp.float16, jnp.float32)]
for bs, dtype in cases:
    layout = rng.random((12, 13)) < 0.5
    layout[3, :] = False
    layout[:, 2] = False
    layout[:, 1] = True
    bsmm = jbs.BlockSparseMatMul(layout, bs)
    x = jnp.asarray(rng.standard_normal((ROWS, bsmm.shape[0])), dtype)
    w = jnp.asarray(rng.standard_normal(bsmm.w_shape), dtype)
    dy = jnp.asarray(rng.standard_normal((ROWS, bsmm.shape[1])), dtype)
    y, pullback = jax.vjp(lambda x: bsmm(x, w), x)
    jax.block_until_ready((y, pullback(dy)[0]))
    print(f"bs {bs} {jnp.dtype(dtype).name}: done", flush=True)
print("sweep done")
