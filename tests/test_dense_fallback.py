"""The dense-dot fallback (jbs/_src/dense_fallback.py): where XLA's dense dot beats the block
kernels (bs 8 / 16, high density, many rows), the forward and input gradient lower to it, the
weight gradient keeps its block kernel, and the results match float64."""

import numpy as np
import pytest
import jax
import jax.numpy as jnp

import jbs
from jbs._src import dense_fallback, precision as precision_lib
from helpers import awkward_layout, dense_f64, f64, heavy_column_layout, random_array, rel_error, tolerance
from helpers import with_cuda_rules

pytestmark = pytest.mark.dense_fallback


def _takes(monkeypatch, setting="", *, rows=1024, c=4096, k=2048, density=0.5, block_size=8, itemsize=2,
           groups=1, precision=precision_lib.DEFAULT):
    monkeypatch.setenv("JBS_DENSE_FALLBACK", setting)
    nnz = round(density * (c // block_size) * (k // block_size))
    return dense_fallback.takes_dense_dot(rows=rows, c=c, k=k, nnz=nnz, block_size=block_size,
                                          itemsize=itemsize, groups=groups, precision=precision)


def test_the_rule_follows_the_measured_thresholds(monkeypatch):
    assert _takes(monkeypatch)                                    # bs 8, 1/2, 1024 rows
    assert _takes(monkeypatch, density=1 / 32)                    # bf16 bs 8 to 1/32 from 1024 rows
    assert not _takes(monkeypatch, density=1 / 64)
    assert not _takes(monkeypatch, density=1 / 32, rows=512)
    assert _takes(monkeypatch, density=1 / 8, rows=128)
    assert not _takes(monkeypatch, density=1 / 16, rows=128)
    assert not _takes(monkeypatch, density=1 / 32, itemsize=4)    # fp32 bs 8 only to 1/16
    assert _takes(monkeypatch, density=1 / 16, itemsize=4, rows=512)
    assert not _takes(monkeypatch, block_size=16, density=1 / 2, rows=256)  # bf16 bs 16: the sliced
    assert _takes(monkeypatch, block_size=16, density=1 / 4, rows=257)      # wgmma kernel to 256
    assert not _takes(monkeypatch, block_size=16, density=1 / 8, rows=384)
    assert _takes(monkeypatch, block_size=16, density=1 / 2, rows=128, itemsize=4)
    assert not _takes(monkeypatch, block_size=16, density=1 / 4, rows=128, itemsize=4)
    assert _takes(monkeypatch, block_size=16, density=1 / 4, rows=256, itemsize=4)
    assert not _takes(monkeypatch, block_size=16, density=1 / 8)  # bf16 bs 16 at 1/8: 2048 rows
    assert _takes(monkeypatch, block_size=16, density=1 / 8, rows=8192)
    assert _takes(monkeypatch, block_size=16, density=1 / 8, itemsize=4)  # fp32: from 1024
    assert not _takes(monkeypatch, block_size=16, density=1 / 16, rows=8192)
    assert not _takes(monkeypatch, rows=64)                       # the small-N kernels
    for bs in (32, 64):
        assert not _takes(monkeypatch, block_size=bs, density=1.0)


def test_the_rule_never_takes_exact_fp32_huge_weights_or_a_switched_off_fallback(monkeypatch):
    assert not _takes(monkeypatch, itemsize=4, precision=precision_lib.HIGHEST)
    assert not _takes(monkeypatch, c=32768, k=32768)              # 2 GiB densified: over the cap
    assert not _takes(monkeypatch, groups=64, c=8192, k=2048)
    assert not _takes(monkeypatch, "0")
    assert _takes(monkeypatch, "1", block_size=64, rows=1, density=1 / 64)  # forced: any size
    with pytest.raises(ValueError, match="JBS_DENSE_FALLBACK.*'off'"):
        _takes(monkeypatch, "off")                                # not silently "on"


@pytest.mark.parametrize("groups", [(1, 1), (3, 1), (1, 3), (3, 3)])
def test_dense_matmul_matches_float64_with_empty_rows_columns_and_stacked_groups(rng, groups):
    layout = heavy_column_layout(rng, 7, 5, density=0.3)
    bsmm = jbs.BlockSparseMatMul(layout, 8)
    ga, gw = groups
    x = random_array(rng, (ga, 11, bsmm.shape[0]), jnp.float32)
    dy = random_array(rng, (ga, 11, bsmm.shape[1]), jnp.float32)
    w = random_array(rng, (gw,) + bsmm.w_shape, jnp.float32)
    y = dense_fallback.dense_matmul(x, w, *bsmm.tables, transpose=False, precision=precision_lib.HIGHEST)
    dx = dense_fallback.dense_matmul(dy, w, *bsmm.tables, transpose=True, precision=precision_lib.HIGHEST)
    assert y.shape == (max(groups), 11, bsmm.shape[1]) and dx.shape == (max(groups), 11, bsmm.shape[0])
    for g in range(max(groups)):
        W = dense_f64(bsmm, w[min(g, gw - 1)])
        assert rel_error(y[g], f64(x[min(g, ga - 1)]) @ W) < 2e-5
        assert rel_error(dx[g], f64(dy[min(g, ga - 1)]) @ W.T) < 2e-5


def test_densify_gathers_every_block_and_zeros_elsewhere(rng):
    layout = awkward_layout(rng, 5, 6)
    bsmm = jbs.BlockSparseMatMul(layout, 8)
    w = random_array(rng, (2,) + bsmm.w_shape, jnp.float32)
    dense = np.asarray(bsmm.to_dense(w))
    assert dense.shape == (2,) + bsmm.shape
    for i, (c, k) in enumerate(np.argwhere(layout)):
        np.testing.assert_array_equal(dense[:, c * 8:(c + 1) * 8, k * 8:(k + 1) * 8], w[:, i])
    assert (dense[:, ~np.kron(layout, np.ones((8, 8), bool))] == 0).all()
    np.testing.assert_array_equal(np.asarray(bsmm.from_dense(dense)), np.asarray(w))


def _lower_train_step(rows, precision=None):
    bsmm = jbs.BlockSparseMatMul(np.ones((16, 8), bool), 8, precision=precision)  # density 1, bs 8
    step = jax.jit(jax.grad(lambda x, w: jnp.sum(bsmm(x, w) ** 2), argnums=(0, 1)))
    lowered = step.trace(jnp.ones((rows, 128), jnp.bfloat16), jnp.ones(bsmm.w_shape, jnp.bfloat16))
    return lowered.lower(lowering_platforms=("cuda",)).as_text()


def test_the_cuda_lowering_counts_rows_and_weights_over_vmapped_groups(monkeypatch):
    monkeypatch.setenv("JBS_DENSE_FALLBACK", "")
    bsmm = jbs.BlockSparseMatMul(np.ones((16, 8), bool), 8)
    x = jnp.ones((4, 32, 128), jnp.bfloat16)
    w = jnp.ones(bsmm.w_shape, jnp.bfloat16)
    lower = lambda f, *args: with_cuda_rules(
        lambda: jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",)).as_text())
    # 4 x 32 rows through one shared weight: 128 rows per densify, the dense dot
    assert "custom_call @jbs_bsmm_fwd" not in lower(jax.vmap(bsmm, in_axes=(0, None)), x, w)
    # 32 rows through each of 4 stacked weights: the small-N kernels
    ws = jnp.ones((4,) + bsmm.w_shape, jnp.bfloat16)
    assert "custom_call @jbs_bsmm_fwd" in lower(jax.vmap(bsmm, in_axes=(None, 0)), x[0], ws)


def test_the_cuda_lowering_takes_the_dense_dot_for_fwd_and_dx_only(monkeypatch):
    monkeypatch.setenv("JBS_DENSE_FALLBACK", "")
    text = with_cuda_rules(lambda: _lower_train_step(1024))
    assert "custom_call @jbs_bsmm_fwd" not in text and "custom_call @jbs_bsmm_dx" not in text
    assert "custom_call @jbs_bsmm_dw" in text, "the weight gradient must keep its block kernel"
    assert "dot_general" in text
    small = with_cuda_rules(lambda: _lower_train_step(32))        # memory-bound: the kernels
    assert "custom_call @jbs_bsmm_fwd" in small and "custom_call @jbs_bsmm_dx" in small
    monkeypatch.setenv("JBS_DENSE_FALLBACK", "0")
    off = with_cuda_rules(lambda: _lower_train_step(1024))
    assert "custom_call @jbs_bsmm_fwd" in off and "custom_call @jbs_bsmm_dx" in off


def test_16_bit_dense_dots_ignore_precision_as_the_kernels_do(monkeypatch):
    monkeypatch.setenv("JBS_DENSE_FALLBACK", "")
    text = with_cuda_rules(lambda: _lower_train_step(1024, precision="highest"))
    assert "custom_call @jbs_bsmm_fwd" not in text and "HIGHEST" not in text


def test_the_benchmark_records_which_path_ran(monkeypatch):
    from jbs.bench import report
    from jbs.bench.cases import Case
    from jbs.bench.runners import path_of
    monkeypatch.setenv("JBS_DENSE_FALLBACK", "")
    case = lambda op, bs=8: Case(op, "bfloat16", 1024, 4096, 4096, bs, 0.5)
    assert path_of(case("forward")) == path_of(case("dx")) == "dense dot"
    assert path_of(case("step")) == "dense dot (fwd, dx)"
    assert path_of(case("dw")) == path_of(case("forward", 32)) == "block kernels"
    meta = dict(device="d", date="t", command="c", jax="j", gpu_kernels=True, copy_bytes_per_s=1e12,
                dense_flops_per_s={"bfloat16": 1e15})
    records = [dict(case("forward").__dict__, impl="jbs", path="dense dot", us=10.0, floor_us=5.0,
                    flops=1, tflops=1.0),
               dict(case("forward").__dict__, impl="xla_dense", us=12.0, floor_us=5.0, flops=2, tflops=2.0)]
    row = report.markdown(meta, records).splitlines()[-1]
    assert "| 10.0* |" in row and "| 12.0 | 1.20 |" in row   # marked, and still beside its peer


# --------------------------------------------------------------------------- on the GPU

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16, jnp.float32])
@pytest.mark.parametrize("bs", [8, 16])
def test_fallback_train_step_on_the_gpu_matches_float64(rng, monkeypatch, dtype, bs):
    monkeypatch.setenv("JBS_DENSE_FALLBACK", "")
    layout = awkward_layout(rng, 40, 24, density=0.6)             # empty block row and column
    bsmm = jbs.BlockSparseMatMul(layout, bs)
    n = 1000
    x = random_array(rng, (n, bsmm.shape[0]), dtype)
    w = random_array(rng, bsmm.w_shape, dtype)
    g = random_array(rng, (n, bsmm.shape[1]), dtype)
    fn = jax.jit(lambda x, w, g: (lambda y, pull: (y,) + pull(g))(*jax.vjp(bsmm, x, w)))
    hlo = fn.lower(x, w, g).compile().as_text()
    assert "jbs_bsmm_fwd" not in hlo and "jbs_bsmm_dx" not in hlo and "jbs_bsmm_dw" in hlo
    y, dx, dw = fn(x, w, g)
    W = dense_f64(bsmm, w)
    tol = tolerance(dtype)
    assert rel_error(y, f64(x) @ W) < tol
    assert rel_error(dx, f64(g) @ W.T) < tol
    assert rel_error(dw, np.asarray(bsmm.from_dense(f64(x).T @ f64(g)))) < tol
    again = fn(x, w, g)
    for a, b in zip((y, dx, dw), again):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))   # deterministic


@pytest.mark.gpu
def test_fallback_under_vmap_over_stacked_weights_on_the_gpu(rng, monkeypatch):
    monkeypatch.setenv("JBS_DENSE_FALLBACK", "1")
    bsmm = jbs.BlockSparseMatMul(awkward_layout(rng, 12, 10, density=0.5), 16)
    x = random_array(rng, (600, bsmm.shape[0]), jnp.bfloat16)
    ws = random_array(rng, (3,) + bsmm.w_shape, jnp.bfloat16)
    stacked = jax.jit(jax.vmap(bsmm, in_axes=(None, 0)))
    assert "jbs_bsmm_fwd" not in stacked.lower(x, ws).compile().as_text()
    ys = stacked(x, ws)
    for b in range(3):
        assert rel_error(ys[b], f64(x) @ dense_f64(bsmm, ws[b])) < tolerance(jnp.bfloat16)
