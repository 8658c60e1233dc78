"""A small sweep of every kernel for compute-sanitizer (memcheck, racecheck): each block size,
dtype and op on awkward layouts (empty rows and columns, a heavy column), N not a tile multiple
(small-N and large-N paths), and the implicit-GEMM convolution: strided and padded, transposed,
and a weight gradient whose rows are split over several CTAs; long block rows for the
small-N weight gradient's x-tile reuse; a tall layout whose column groups the small-N group
kernel cuts into slices; a wide layout whose groups the warp-specialized small-N kernel
splits over CTAs. Environment settings (JBS_STREAM_GROUPS, JBS_WGMMA, ...) pick paths."""

import os

import numpy as np
import jax
import jax.numpy as jnp

import jbs

# SWEEP_SMALL_N_ONLY=1: only the small-N cases (N <= 64), e.g. to check a small-N kernel
# within a short sanitizer run.
SMALL_N_ONLY = os.environ.get("SWEEP_SMALL_N_ONLY", "") == "1"
# SWEEP_CONV_ONLY=1: only the convolutions.
CONV_ONLY = os.environ.get("SWEEP_CONV_ONLY", "") == "1"
# SWEEP_ROWS: the small-N row count (default 37, a 64-row tile); 29 reaches the kernels that
# take at most 32 rows, e.g. the even-split group kernel (JBS_STREAM_EVEN_GROUP=1).
ROWS = int(os.environ.get("SWEEP_ROWS", "37"))
rng = np.random.default_rng(0)


def sweep_convs(layout, bs, dtype):
    """The convolutions of the sweep on one layout, block size and dtype."""
    for conv, shape in ((jbs.BlockSparseConv(layout, bs, (2, 3), 2, ((1, 0), (2, 0))), (2, 9, 7)),
                        (jbs.BlockSparseConvTranspose(layout, bs, (3, 3), 2), (2, 5, 4)),
                        (jbs.BlockSparseConv(layout, bs, (1, 1)), (3, 33, 31)),  # dw row splits
                        # stride 1, output the input's size: the halo kernels (16-bit, bs 16 / 32),
                        # tiles spanning images and ending part-way
                        (jbs.BlockSparseConv(layout, bs, (3, 3), 1, "SAME", 2), (3, 13, 11)),
                        (jbs.BlockSparseConv(layout, bs, (2, 3), 1, ((1, 0), (1, 1))), (2, 17, 9)),
                        # images 8 / 16 / 32 wide: the ss kernel (bs 16) and the strip kernel
                        # (bs 32; 16-row strips, then 32-row strips with taps in pairs)
                        (jbs.BlockSparseConv(layout, bs, (3, 3)), (3, 16, 8)),
                        (jbs.BlockSparseConv(layout, bs, (2, 2), 1, ((1, 0), (1, 0))), (2, 32, 16))):
        x = jnp.asarray(rng.standard_normal(shape + (conv.features[0],)), dtype)
        w = jnp.asarray(rng.standard_normal(conv.w_shape), dtype)
        y, pull = jax.vjp(conv, x, w)
        jax.block_until_ready((y, pull(jnp.ones_like(y))))


for bs in (8, 16, 32, 64):
    for dtype in (jnp.float32, jnp.bfloat16, jnp.float16):
        layout = rng.random((5, 4)) < 0.4
        layout[1, :] = False
        layout[:, 2] = False
        layout[:, 0] = True
        if CONV_ONLY:
            sweep_convs(layout, bs, dtype)
            continue
        bsmm = jbs.BlockSparseMatMul(layout, bs)
        for n in ((1, ROWS) if SMALL_N_ONLY else (1, ROWS, 300)):
            x = jnp.asarray(rng.standard_normal((n, bsmm.shape[0])), dtype)
            w = jnp.asarray(rng.standard_normal(bsmm.w_shape), dtype)
            g = jnp.asarray(rng.standard_normal((n, bsmm.shape[1])), dtype)
            y, pull = jax.vjp(bsmm, x, w)
            jax.block_until_ready((y, pull(g)))
        # Long block rows: the small-N dw kernel reuses one x tile across a run of blocks.
        dense_rows = jbs.BlockSparseMatMul(rng.random((3, 40)) < 0.9, bs)
        x = jnp.asarray(rng.standard_normal((ROWS, dense_rows.shape[0])), dtype)
        w = jnp.asarray(rng.standard_normal(dense_rows.w_shape), dtype)
        g = jnp.asarray(rng.standard_normal((ROWS, dense_rows.shape[1])), dtype)
        jax.block_until_ready(jax.vjp(dense_rows, x, w)[1](g))
        # Tall: 35 union items per column group, cut into 2 slices by the small-N group kernel
        # (JBS_STREAM_GROUPS=1) whose partials the last slice sums.
        tall = jbs.BlockSparseMatMul(rng.random((70, 5)) < 0.5, bs)
        x = jnp.asarray(rng.standard_normal((ROWS, tall.shape[0])), dtype)
        w = jnp.asarray(rng.standard_normal(tall.w_shape), dtype)
        jax.block_until_ready(jax.vjp(tall, x, w)[1](jnp.ones((ROWS, tall.shape[1]), dtype)))
        # Wide, with two empty column groups: the warp-specialized small-N kernel
        # (JBS_STREAM_WS=1) cuts the union items of 20 groups over ~132 CTAs, so every group
        # is summed from pieces, more items than its ring has stages refill each stage, and
        # the empty groups are written as zeros.
        wide_layout = rng.random((40, 20 * 128 // bs)) < 0.4
        wide_layout[:, 2 * 128 // bs:4 * 128 // bs] = False
        wide = jbs.BlockSparseMatMul(wide_layout, bs)
        x_wide = jnp.asarray(rng.standard_normal((ROWS, wide.shape[0])), dtype)
        w_wide = jnp.asarray(rng.standard_normal(wide.w_shape), dtype)
        jax.block_until_ready(jax.vjp(wide, x_wide, w_wide)[1](jnp.ones((ROWS, wide.shape[1]), dtype)))
        if SMALL_N_ONLY:
            continue
        # The same at 300 rows: the large-N group kernels walk more union items than their
        # rings have stages, so every stage is refilled (the warp-specialized kernel's
        # producer then waits for the consumers' releases).
        x = jnp.asarray(rng.standard_normal((300, tall.shape[0])), dtype)
        jax.block_until_ready(jax.vjp(tall, x, w)[1](jnp.ones((300, tall.shape[1]), dtype)))
        sweep_convs(layout, bs, dtype)
# A column group without items (the strip kernel stores its zeros from registers): columns
# 4 * 32 / bs on empty, forward and input gradient of a 2x3 conv on 32 x 16 images.
for bs in (16, 32):
    scale = 32 // bs
    layout = rng.random((5 * scale, 8 * scale)) < 0.5
    layout[:, 4 * scale:] = False
    layout[:, 0] = True
    layout[1, :] = False
    conv = jbs.BlockSparseConv(layout, bs, (2, 3), 1, ((1, 0), (1, 1)))
    x = jnp.asarray(rng.standard_normal((2, 32, 16, conv.features[0])), jnp.bfloat16)
    w = jnp.asarray(rng.standard_normal(conv.w_shape), jnp.bfloat16)
    y, pull = jax.vjp(conv, x, w)
    jax.block_until_ready((y, pull(jnp.ones_like(y))))
print("sanitize sweep done")
