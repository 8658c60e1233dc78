"""The panel dw kernel (cuda/matmul/bsmm_panel_dw_kernel.cuh): the weight gradient of a 1x1
convolution or a matmul with many rows and few channels, from row panels of x and dy that stream
once through shared memory, the rows split over the SMs and the partials summed in a fixed order;
and the large-N dw kernel's row splits, which the matmul's weight gradient now has too."""

import numpy as np
import pytest
import jax
import jax.numpy as jnp

import jbs
from helpers import f64, heavy_column_layout, random_array, rel_error, tolerance
from test_conv_gpu import kernel_names

pytestmark = pytest.mark.gpu

PANEL_DW = "bsmm_panel_dw_kernel"


def _dw_of(conv):
    return jax.jit(lambda x, w, g: jax.vjp(conv, x, w)[1](g)[1])


def _reference_dw(conv, x, g):
    """x^T g over every pixel in float64, packed into conv's blocks (through float32)."""
    channels, outputs = x.shape[-1], g.shape[-1]
    dense = f64(x).reshape(-1, channels).T @ f64(g).reshape(-1, outputs)
    return conv.from_dense(jnp.asarray(dense.reshape(1, 1, channels, outputs), jnp.float32))


@pytest.mark.parametrize("bs,blocks,density", [
    (32, (10, 10), 0.5),  # the benchmark's 320 -> 320
    (16, (6, 14), 0.4),   # 96 -> 224: widths no multiple of a 64-channel chunk
    (16, (24, 24), 0.6),  # 384 -> 384: more units than a CTA holds, so several sets per row range
    (32, (3, 12), 0.3),   # 96 -> 384
])
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("images", [(40, 32, 16), (7, 37, 33)])
def test_1x1_conv_dw_against_float64(rng, monkeypatch, bs, blocks, density, dtype, images):
    """dw against float64 on a power-law layout (a column holding every block, an empty block row
    and column) over 20480 pixels or 8547 (no multiple of the 32- or 64-row tile: the last tile
    reads zeros past the end; some row splits get no tile and write zero partials). The panel dw
    kernel is the one that runs (JBS_PANEL_DW=1: the 96 -> 384 layout's few blocks would
    otherwise go to the large-N dw kernel)."""
    monkeypatch.setenv("JBS_PANEL_DW", "1")
    conv = jbs.BlockSparseConv(heavy_column_layout(rng, *blocks, density=density), bs, (1, 1))
    x = random_array(rng, images + (blocks[0] * bs,), dtype)
    w = random_array(rng, conv.w_shape, dtype)
    g = random_array(rng, images + (blocks[1] * bs,), dtype)
    dw_of = _dw_of(conv)
    assert any(PANEL_DW in name for name in kernel_names(dw_of, x, w, g))
    dw = dw_of(x, w, g)
    assert rel_error(dw, f64(_reference_dw(conv, x, g))) < tolerance(dtype)


@pytest.mark.parametrize("stacked", ["x", "w", "both"])
def test_1x1_conv_dw_over_weight_groups(rng, monkeypatch, stacked):
    """Under vmap over stacked or broadcast images and weights: the panels' tensor maps have a
    group dimension, or read the one x for every weight group."""
    monkeypatch.setenv("JBS_PANEL_DW", "1")
    conv = jbs.BlockSparseConv(heavy_column_layout(rng, 6, 5, density=0.5), 32, (1, 1))
    x = random_array(rng, ((3,) if stacked != "w" else ()) + (4, 32, 32, 192), jnp.bfloat16)
    w = random_array(rng, ((3,) if stacked != "x" else ()) + conv.w_shape, jnp.bfloat16)
    g = random_array(rng, (3, 4, 32, 32, 160), jnp.bfloat16)
    axes = (0 if stacked != "w" else None, 0 if stacked != "x" else None)
    dw_of = jax.jit(lambda x, w, g: jax.vjp(jax.vmap(conv, in_axes=axes), x, w)[1](g)[1])
    assert any(PANEL_DW in name for name in kernel_names(dw_of, x, w, g))
    dw = dw_of(x, w, g)
    if stacked == "x":  # one weight for the three image batches: its gradient sums theirs
        expected = sum(f64(_reference_dw(conv, x[b], g[b])) for b in range(3))
        assert rel_error(dw, expected) < tolerance(jnp.bfloat16)
        return
    for b in range(3):
        expected = _reference_dw(conv, x[b] if stacked == "both" else x, g[b])
        assert rel_error(dw[b], f64(expected)) < tolerance(jnp.bfloat16)


def test_1x1_conv_dw_is_bitwise_deterministic(rng):
    conv = jbs.BlockSparseConv(heavy_column_layout(rng, 10, 10, density=0.5), 16, (1, 1))
    x = random_array(rng, (24, 32, 32, 160), jnp.bfloat16)
    w = random_array(rng, conv.w_shape, jnp.bfloat16)
    g = random_array(rng, (24, 32, 32, 160), jnp.bfloat16)
    dw_of = _dw_of(conv)
    assert any(PANEL_DW in name for name in kernel_names(dw_of, x, w, g))
    first = np.asarray(dw_of(x, w, g))
    for _ in range(3):
        np.testing.assert_array_equal(first, np.asarray(dw_of(x, w, g)))


@pytest.mark.parametrize("env,images,strides,density,expected", [
    ({"JBS_PANEL_DW": "0"}, (40, 32, 16), 1, 0.25, False),
    ({}, (4, 32, 16), 1, 0.25, False),    # 2048 pixels: too few to give every SM 64 rows
    ({"JBS_PANEL_DW": "1"}, (40, 32, 16), 2, 0.25, False),  # a strided 1x1 conv gathers its pixels
    ({}, (40, 32, 16), 1, 0.125, False),  # 12 blocks: the large-N dw kernel reads x and dy 1.2 times
    ({"JBS_PANEL_DW": "1"}, (4, 32, 16), 1, 0.125, True),
    ({}, (40, 32, 16), 1, 0.25, True),
])
def test_panel_dw_switch_and_limits(rng, monkeypatch, env, images, strides, density, expected):
    """The default rule (launch_panel.cuh: use_panel_dw) and JBS_PANEL_DW, which forces the kernel
    only where it can run: not on a strided conv's gathered pixels. dw correct either way."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    conv = jbs.BlockSparseConv(jbs.layouts.random(10, 10, density=density, seed=1), 32, (1, 1), strides)
    x = random_array(rng, images + (320,), jnp.bfloat16)
    w = random_array(rng, conv.w_shape, jnp.bfloat16)
    g = random_array(rng, jax.eval_shape(conv, x, w).shape, jnp.bfloat16)
    dw_of = _dw_of(conv)
    assert any(PANEL_DW in name for name in kernel_names(dw_of, x, w, g)) == expected
    assert rel_error(dw_of(x, w, g), f64(_reference_dw_strided(conv, x, g, strides))) < tolerance(jnp.bfloat16)


def _reference_dw_strided(conv, x, g, strides):
    return _reference_dw(conv, x[:, ::strides, ::strides], g)


def _matmul_dw_of(bsmm):
    return jax.jit(lambda x, w, g: jax.vjp(bsmm, x, w)[1](g)[1])


def _reference_matmul_dw(bsmm, x, g):
    return bsmm.from_dense(jnp.asarray(f64(x).T @ f64(g), jnp.float32))


@pytest.mark.parametrize("bs,blocks", [(32, (12, 7)), (16, (9, 22))])
@pytest.mark.parametrize("rows", [20000, 9001])
def test_matmul_dw_against_float64(rng, bs, blocks, rows):
    """The plain matmul's weight gradient takes the panel dw kernel by default with enough rows
    (the lowering gives it row splits and their scratch); fp16 and bf16 against float64."""
    bsmm = jbs.BlockSparseMatMul(heavy_column_layout(rng, *blocks, density=0.4), bs)
    for dtype in (jnp.bfloat16, jnp.float16):
        x = random_array(rng, (rows, bsmm.shape[0]), dtype)
        w = random_array(rng, bsmm.w_shape, dtype)
        g = random_array(rng, (rows, bsmm.shape[1]), dtype)
        dw_of = _matmul_dw_of(bsmm)
        assert any(PANEL_DW in name for name in kernel_names(dw_of, x, w, g))
        assert rel_error(dw_of(x, w, g), f64(_reference_matmul_dw(bsmm, x, g))) < tolerance(dtype)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_matmul_dw_row_splits_of_the_large_n_kernel(rng, monkeypatch, dtype):
    """Where the panel dw kernel does not run (JBS_PANEL_DW=0), the large-N dw kernel splits each
    block's 5000 rows over several CTAs (lowering._dw_row_splits) and sums their partials in a
    fixed order: against float64, and bitwise repeatable."""
    from jbs._src import lowering

    monkeypatch.setenv("JBS_PANEL_DW", "0")
    bsmm = jbs.BlockSparseMatMul(heavy_column_layout(rng, 6, 5, density=0.4), 32)
    assert lowering._dw_row_splits(5000, bsmm.nnz) > 1
    x = random_array(rng, (5000, bsmm.shape[0]), dtype)
    w = random_array(rng, bsmm.w_shape, dtype)
    g = random_array(rng, (5000, bsmm.shape[1]), dtype)
    dw_of = _matmul_dw_of(bsmm)
    dw = np.asarray(dw_of(x, w, g))
    assert not any(PANEL_DW in name for name in kernel_names(dw_of, x, w, g))
    assert rel_error(dw, f64(_reference_matmul_dw(bsmm, x, g))) < tolerance(dtype)
    np.testing.assert_array_equal(dw, np.asarray(dw_of(x, w, g)))
