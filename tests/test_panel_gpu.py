"""The panel kernel (cuda/matmul/bsmm_panel_kernel.cuh): every weight block and a 64-row tile's
whole activation panel in shared memory, every output block column computed from it. It serves
1x1 convolutions and matmuls with many rows whose weights and two panels fit there."""

import numpy as np
import pytest
import jax
import jax.numpy as jnp

import jbs
from helpers import dense_f64, f64, heavy_column_layout, random_array, rel_error, tolerance
from test_conv_gpu import check_three_ops, kernel_names
from test_gpu import _check_stacked

pytestmark = pytest.mark.gpu

PANEL = "bsmm_panel_kernel"


def _fwd_dx(bsmm, x, w, g):
    y, pullback = jax.jit(lambda x, w: jax.vjp(bsmm, x, w))(x, w)
    return y, jax.jit(pullback)(g)[0]


@pytest.mark.parametrize("bs,blocks", [(32, (10, 9)), (16, (24, 13)), (16, (7, 20))])
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("rows", [1000, 40000])
def test_matmul_against_float64(rng, monkeypatch, bs, blocks, dtype, rows):
    """fwd and dx against float64 on a power-law layout (a column holding every block, an empty
    block row and column), 384 input channels (six 64-channel panel chunks) and widths that are
    no multiple of a chunk (288, 208, 112), rows not a multiple of the 64-row tile: 16 tiles
    (fewer CTAs than SMs), or 625 (every CTA walks four or five tiles through both panel
    slots). The panel kernel is the one that runs."""
    monkeypatch.setenv("JBS_PANEL", "1")
    bsmm = jbs.BlockSparseMatMul(heavy_column_layout(rng, *blocks, density=0.3), bs)
    x = random_array(rng, (rows, bsmm.shape[0]), dtype)
    w = random_array(rng, bsmm.w_shape, dtype)
    g = random_array(rng, (rows, bsmm.shape[1]), dtype)
    y, dx = _fwd_dx(bsmm, x, w, g)
    W = dense_f64(bsmm, w)
    fwd = jax.jit(lambda x, w: bsmm(x, w))
    dx_only = jax.jit(lambda x, w, g: jax.vjp(bsmm, x, w)[1](g)[0])
    for fn, args in ((fwd, (x, w)), (dx_only, (x, w, g))):
        assert any(PANEL in name for name in kernel_names(fn, *args))
    assert rel_error(y, f64(x) @ W) < tolerance(dtype)
    assert rel_error(dx, f64(g) @ W.T) < tolerance(dtype)
    assert not np.any(np.asarray(y[:, :bs], np.float32)), "the empty block column is not zero"


@pytest.mark.parametrize("stacked", ["x", "w", "both"])
def test_matmul_over_weight_groups(rng, monkeypatch, stacked):
    """Under vmap over a stacked or broadcast activation and weight (the panel's tensor map
    has a group dimension, or reads the one activation for every weight group)."""
    monkeypatch.setenv("JBS_PANEL", "1")
    bsmm = jbs.BlockSparseMatMul(heavy_column_layout(rng, 9, 6, density=0.4), 32)
    x = random_array(rng, ((3,) if stacked != "w" else ()) + (700, bsmm.shape[0]), jnp.bfloat16)
    w = random_array(rng, ((3,) if stacked != "x" else ()) + bsmm.w_shape, jnp.bfloat16)
    g = random_array(rng, (3, 700, bsmm.shape[1]), jnp.bfloat16)
    axes = (0 if stacked != "w" else None, 0 if stacked != "x" else None)
    y, pullback = jax.jit(lambda x, w: jax.vjp(jax.vmap(bsmm, in_axes=axes), x, w))(x, w)
    _check_stacked(bsmm, x, w, g, y, jax.jit(pullback)(g)[0], stacked, jnp.bfloat16)


def test_matmul_is_bitwise_deterministic(rng, monkeypatch):
    monkeypatch.setenv("JBS_PANEL", "1")
    bsmm = jbs.BlockSparseMatMul(heavy_column_layout(rng, 10, 10, density=0.5), 32)
    x = random_array(rng, (20000, bsmm.shape[0]), jnp.bfloat16)
    w = random_array(rng, bsmm.w_shape, jnp.bfloat16)
    g = random_array(rng, (20000, bsmm.shape[1]), jnp.bfloat16)
    first = _fwd_dx(bsmm, x, w, g)
    for _ in range(2):
        for a, b in zip(first, _fwd_dx(bsmm, x, w, g)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("bs", [16, 32])
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_1x1_conv_takes_the_panel_kernel_by_default(rng, bs, dtype):
    """A 1x1 conv over 20480 pixels (enough 128-row tiles for the default rule) runs the panel
    kernel for fwd and dx, and all three ops match float64."""
    conv = jbs.BlockSparseConv(heavy_column_layout(rng, 10, 7, density=0.4), bs, (1, 1))
    check_three_ops(rng, conv, (40, 32, 16, 10 * bs), dtype)
    x = random_array(rng, (40, 32, 16, 10 * bs), dtype)
    w = random_array(rng, conv.w_shape, dtype)
    g = random_array(rng, (40, 32, 16, 7 * bs), dtype)
    fwd = jax.jit(lambda x, w: conv(x, w))
    dx = jax.jit(lambda x, w, g: jax.vjp(conv, x, w)[1](g)[0])
    for fn, args in ((fwd, (x, w)), (dx, (x, w, g))):
        assert any(PANEL in name for name in kernel_names(fn, *args))


@pytest.mark.parametrize("env,density,expected", [({"JBS_PANEL": "0"}, 0.5, False), ({}, 1.0, False),
                                                  ({}, 0.5, True)])
def test_panel_kernel_switch_and_limit(rng, monkeypatch, env, density, expected):
    """JBS_PANEL=0 turns the kernel off; weights that do not fit beside two panels (320 -> 320
    channels at density 1: 200 KB at bs 32) go to the other kernels."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    conv = jbs.BlockSparseConv(jbs.layouts.random(10, 10, density=density, seed=1), 32, (1, 1))
    x = random_array(rng, (40, 32, 16, 320), jnp.bfloat16)
    w = random_array(rng, conv.w_shape, jnp.bfloat16)
    fwd = jax.jit(lambda x, w: conv(x, w))
    assert any(PANEL in name for name in kernel_names(fwd, x, w)) == expected


def test_indexing_past_2_pow_31_elements(rng):
    """x and y hold more than 2**31 elements (320 channels, 6.7M rows): the panel's TMA row
    coordinate and the stores' 64-bit offsets reach the last rows."""
    bsmm = jbs.BlockSparseMatMul(heavy_column_layout(rng, 10, 10, density=0.3), 32)
    n = 2**31 // 320 + 700
    x = jax.random.normal(jax.random.key(int(rng.integers(1000))), (n, 320), jnp.bfloat16)
    w = random_array(rng, bsmm.w_shape, jnp.bfloat16)
    fwd = jax.jit(lambda x, w: bsmm(x, w)[-1000:])
    assert any(PANEL in name for name in kernel_names(fwd, x, w))
    assert rel_error(fwd(x, w), f64(x[-1000:]) @ dense_f64(bsmm, w)) < tolerance(jnp.bfloat16)


def test_dx_and_dw_past_2_pow_31_elements(rng):
    """The input and weight gradients of a matmul whose activations hold more than 2**31
    elements (the panel dx and panel dw kernels take it): the last rows of dx, and dw, whose
    sums run over every row, against float64 / dense float32 math."""
    bsmm = jbs.BlockSparseMatMul(heavy_column_layout(rng, 10, 10, density=0.3), 32)
    n = 2**31 // 320 + 700
    key_x, key_g = jax.random.split(jax.random.key(int(rng.integers(1000))))
    x = jax.random.normal(key_x, (n, 320), jnp.bfloat16)
    g = jax.random.normal(key_g, (n, 320), jnp.bfloat16)
    w = random_array(rng, bsmm.w_shape, jnp.bfloat16)
    grads = jax.jit(lambda x, w, g: jax.vjp(bsmm, x, w)[1](g))
    assert any(PANEL in name for name in kernel_names(grads, x, w, g))
    dx, dw = grads(x, w, g)
    assert rel_error(dx[-1000:], f64(g[-1000:]) @ dense_f64(bsmm, w).T) < tolerance(jnp.bfloat16)
    dense_dw = jax.jit(lambda x, g: bsmm.from_dense(jnp.matmul(
        x.T, g, preferred_element_type=jnp.float32, precision=jax.lax.Precision.HIGHEST)))(x, g)
    assert rel_error(dw, f64(dense_dw)) < tolerance(jnp.bfloat16)
