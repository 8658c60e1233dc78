"""CUDA kernels: the custom calls are really used, and they match float64 on awkward inputs.

The rest of the suite also runs on the GPU machine, through the same kernels; this file adds
what only matters there: the HLO check, sizes past 2**31 elements, heavy columns, determinism."""

import re

import numpy as np
import pytest
import jax
import jax.numpy as jnp

import jbs
from jbs._src import extension
from helpers import awkward_layout, dense_f64, heavy_column_layout, f64, random_array, rel_error, tolerance

pytestmark = pytest.mark.gpu

DTYPES = [jnp.float32, jnp.bfloat16, jnp.float16]


def test_custom_calls_are_in_the_compiled_hlo(rng):
    bsmm = jbs.BlockSparseMatMul(awkward_layout(rng, 4, 3), 16)
    x = random_array(rng, (8, 64), jnp.bfloat16)
    w = random_array(rng, bsmm.w_shape, jnp.bfloat16)
    step = jax.jit(jax.grad(lambda x, w: jnp.sum(bsmm(x, w).astype(jnp.float32) ** 2), argnums=(0, 1)))
    hlo = step.lower(x, w).compile().as_text()
    for target in ("jbs_bsmm_fwd", "jbs_bsmm_dx", "jbs_bsmm_dw"):
        assert target in hlo, f"{target} missing from the compiled HLO"


def _check_three_ops(rng, bsmm, n, dtype, precision=None):
    """y, dx and dw of one call on fresh random data against float64."""
    x = random_array(rng, (n, bsmm.shape[0]), dtype)
    w = random_array(rng, bsmm.w_shape, dtype)
    g = random_array(rng, (n, bsmm.shape[1]), dtype)
    y, pullback = jax.jit(lambda x, w: jax.vjp(bsmm, x, w))(x, w)
    dx, dw = jax.jit(pullback)(g)
    W = dense_f64(bsmm, w)
    tol = tolerance(dtype, precision)
    assert rel_error(y, f64(x) @ W) < tol, n
    assert rel_error(dx, f64(g) @ W.T) < tol, n
    assert rel_error(dw, np.asarray(bsmm.from_dense(f64(x).T @ f64(g)))) < tol, n


@pytest.mark.parametrize("bs", [8, 16, 32, 64])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 13, 300, 2049])
def test_all_three_ops_against_float64(rng, bs, dtype, n):
    layout = heavy_column_layout(rng, 24, 9)
    for precision in ([None, "highest"] if dtype == jnp.float32 else [None]):
        _check_three_ops(rng, jbs.BlockSparseMatMul(layout, bs, precision=precision), n, dtype, precision)


@pytest.mark.parametrize("limit", [166912, 101376])  # an A100's opt-in, an sm_86 / sm_89's
@pytest.mark.parametrize("bs", [16, 32, 64])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_kernels_fit_gpus_with_less_shared_memory(rng, monkeypatch, limit, bs, dtype):
    """With the shared memory of a block capped as on an A100 or an RTX-class GPU
    (JBS_MAX_SMEM_PER_BLOCK), the dispatch passes over the kernels sized for Hopper (the deep
    small-N stream kernels, the fp32 column-group kernel) for ones that fit; results stay right.
    (The sm_90-only paths still run here; an Ampere GPU never takes them.)"""
    monkeypatch.setenv("JBS_MAX_SMEM_PER_BLOCK", str(limit))
    monkeypatch.setenv("JBS_STREAM_BIG", "1")  # the deepest small-N variants where they fit
    for hopper_only in ("JBS_GROUP_TMA", "JBS_WGMMA"):  # large N: to the mma.sync group kernel's rule
        monkeypatch.setenv(hopper_only, "0")
    layout = heavy_column_layout(rng, 24, 16, density=0.6)
    bsmm = jbs.BlockSparseMatMul(layout, bs)
    for n in (1, 16, 48, 64, 700):
        _check_three_ops(rng, bsmm, n, dtype)


@pytest.mark.parametrize("bs", [8, 16, 32, 64])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [32, 50])
def test_small_n_weight_gradient_with_long_rows(rng, bs, dtype, n):
    """The small-N dw kernel loads each x tile once per run of blocks in the same block row;
    dense rows (runs longer than its ring) next to one-block rows and an empty row."""
    layout = awkward_layout(rng, 12, 40, density=0.8)
    layout[3, :] = False
    layout[3, 7] = True
    bsmm = jbs.BlockSparseMatMul(layout, bs)
    x = random_array(rng, (n, bsmm.shape[0]), dtype)
    w = random_array(rng, bsmm.w_shape, dtype)
    g = random_array(rng, (n, bsmm.shape[1]), dtype)
    dw = jax.jit(jax.vjp(bsmm, x, w)[1])(g)[1]
    assert rel_error(dw, np.asarray(bsmm.from_dense(f64(x).T @ f64(g)))) < tolerance(dtype)


def _stacked_weight_grad_bits(rng, bsmm, n, dtype, precision=None):
    """dw of vmap(bsmm) over two stacked weights and activations, checked against float64; returns
    a function that recomputes it (for a bitwise comparison under other settings) and the result,
    both as raw bits. The recomputation compiles afresh: an executable already run may replay its
    kernels from a CUDA graph without asking the dispatcher again."""
    x = random_array(rng, (2, n, bsmm.shape[0]), dtype)
    w = random_array(rng, (2,) + bsmm.w_shape, dtype)
    g = random_array(rng, (2, n, bsmm.shape[1]), dtype)
    bits = np.uint32 if dtype == jnp.float32 else np.uint16

    def compute():
        weight_grad = jax.jit(lambda x, w, g: jax.vjp(jax.vmap(bsmm), x, w)[1](g)[1])
        return np.asarray(weight_grad(x, w, g))

    dw = compute()
    for b in range(2):
        ref = np.asarray(bsmm.from_dense(f64(x[b]).T @ f64(g[b])))
        assert rel_error(dw[b], ref) < tolerance(dtype, precision)
    return lambda: compute().view(bits), dw.view(bits)


@pytest.mark.parametrize("bs", [16, 32])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 17, 32, 64])
def test_small_n_weight_gradient_staged_stores(rng, monkeypatch, bs, dtype, n):
    """The small-N dw stream kernel's staged epilogue (on sm_90, the default; forced here by
    JBS_DW_STAGED=1; blocks leave a swizzled staging block by 16-byte lane stores; fp32 up to 32
    rows): against float64 on a power-law
    layout with an empty row and column, under vmap over stacked weights and activations (the
    kernel's weight groups), and bit for bit equal to the fp32-staging epilogue
    (JBS_DW_STAGED=0): both round each fp32 sum to the nearest of the output type."""
    monkeypatch.setenv("JBS_DW_PANEL", "0")  # the stream kernel, not the panel kernel
    layout = heavy_column_layout(rng, 37, 11, density=0.3)
    for precision in ([None, "highest"] if dtype == jnp.float32 else [None]):
        monkeypatch.setenv("JBS_DW_STAGED", "1")
        bsmm = jbs.BlockSparseMatMul(layout, bs, precision=precision)
        recompute, staged = _stacked_weight_grad_bits(rng, bsmm, n, dtype, precision)
        monkeypatch.setenv("JBS_DW_STAGED", "0")
        np.testing.assert_array_equal(recompute(), staged)


@pytest.mark.parametrize(
    "dtype, bs, n",
    [(jnp.float32, 32, 1), (jnp.float32, 32, 17), (jnp.float32, 32, 32), (jnp.float32, 16, 1), (jnp.float32, 16, 29),
     (jnp.bfloat16, 32, 1), (jnp.bfloat16, 32, 29), (jnp.bfloat16, 32, 64),
     (jnp.bfloat16, 16, 17), (jnp.float16, 16, 32), (jnp.float16, 32, 7)],
)
def test_small_n_weight_gradient_swizzled_tiles(rng, monkeypatch, dtype, bs, n):
    """The staged small-N dw with unpadded, swizzled tile rows (the default; JBS_DW_SWIZZLE=1
    forces it): fp32's 16- and 32-float rows by swizzle_f32_kmajor, 16-bit 32- and 64-byte rows by
    swizzle_128b, so more stages fit a warp. Against float64 on a power-law layout with an empty
    row and column, under vmap over stacked weights and activations, at default and (fp32)
    highest precision, and bit for bit equal to the padded tiles (JBS_DW_SWIZZLE=0): the same
    MMAs on the same values in the same order."""
    monkeypatch.setenv("JBS_DW_PANEL", "0")
    monkeypatch.setenv("JBS_DW_STAGED", "1")
    layout = heavy_column_layout(rng, 37, 11, density=0.3)
    for precision in ([None, "highest"] if dtype == jnp.float32 else [None]):
        monkeypatch.setenv("JBS_DW_SWIZZLE", "1")
        bsmm = jbs.BlockSparseMatMul(layout, bs, precision=precision)
        recompute, swizzled = _stacked_weight_grad_bits(rng, bsmm, n, dtype, precision)
        monkeypatch.setenv("JBS_DW_SWIZZLE", "0")
        np.testing.assert_array_equal(recompute(), swizzled)


@pytest.mark.parametrize("bs", [16, 32])
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("n", [1, 17, 32])
def test_small_n_weight_gradient_panels(rng, monkeypatch, bs, dtype, n):
    """The small-N dw panel kernel (JBS_DW_PANEL=1): blocks walked by panels of 1024 output
    channels, the last one partial (70 block columns), rows with one block and an empty row and
    column, a power-law column; against float64 under vmap over stacked weights and activations,
    and bit for bit equal to the stream kernel (JBS_DW_PANEL=0)."""
    monkeypatch.setenv("JBS_DW_PANEL", "1")
    layout = heavy_column_layout(rng, 23, 70, density=0.3)
    layout[5, :] = False
    layout[5, 44] = True
    recompute, panels = _stacked_weight_grad_bits(rng, jbs.BlockSparseMatMul(layout, bs), n, dtype)
    monkeypatch.setenv("JBS_DW_PANEL", "0")
    np.testing.assert_array_equal(recompute(), panels)


@pytest.mark.parametrize("dtype", DTYPES)
def test_grouped_weights_vmap(rng, dtype):
    bsmm = jbs.BlockSparseMatMul(awkward_layout(rng, 6, 5), 32)
    x = random_array(rng, (3, 40, bsmm.shape[0]), dtype)
    w = random_array(rng, (3,) + bsmm.w_shape, dtype)
    y = jax.jit(jax.vmap(bsmm))(x, w)
    for b in range(3):
        assert rel_error(y[b], f64(x[b]) @ dense_f64(bsmm, w[b])) < tolerance(dtype)


def test_bitwise_deterministic(rng):
    layout = heavy_column_layout(rng, 48, 40)
    bsmm = jbs.BlockSparseMatMul(layout, 32)
    x = random_array(rng, (777, bsmm.shape[0]), jnp.bfloat16)
    w = random_array(rng, bsmm.w_shape, jnp.bfloat16)
    step = jax.jit(jax.grad(lambda x, w: jnp.sum(bsmm(x, w).astype(jnp.float32) ** 2), argnums=(0, 1)))
    first = step(x, w)
    for _ in range(3):
        again = step(x, w)
        for a, b in zip(first, again):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_indexing_past_2_pow_31_elements(rng):
    """x and y hold more than 2**31 elements: 64-bit offsets must reach the last rows."""
    layout = np.zeros((16, 16), bool)
    layout[rng.integers(16, size=12), rng.integers(16, size=12)] = True
    bsmm = jbs.BlockSparseMatMul(layout, 64)  # C = K = 1024
    n = 2**31 // 1024 + 1500
    key = jax.random.key(int(rng.integers(1000)))
    x = jax.random.normal(key, (n, 1024), jnp.bfloat16)
    w = random_array(rng, bsmm.w_shape, jnp.bfloat16)
    y = jax.jit(bsmm)(x, w)
    tail = slice(n - 700, n)
    ref = f64(x[tail]) @ dense_f64(bsmm, w)
    assert rel_error(y[tail], ref) < tolerance(jnp.bfloat16)
    dw = jax.jit(lambda x, g: jax.vjp(bsmm, x, w)[1](g)[1])(x, y)
    dense_dw = jax.jit(lambda x, g: bsmm.from_dense(jnp.matmul(
        x.T, g, preferred_element_type=jnp.float32, precision=jax.lax.Precision.HIGHEST)))(x, y)
    assert rel_error(dw, f64(dense_dw)) < tolerance(jnp.bfloat16)


@pytest.mark.skipif(len(jax.devices()) < 2, reason="needs at least 2 GPUs")
def test_data_parallel_batch_stays_sharded(rng):
    """A batch sharded over GPUs is not all-gathered: each GPU runs its rows through the kernels,
    and the weight gradient is all-reduced. Gradients equal the single-device ones."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    devices = jax.devices()[: 2 * (len(jax.devices()) // 2)]
    mesh = Mesh(np.array(devices), ("data",))
    bsmm = jbs.BlockSparseMatMul(heavy_column_layout(rng, 16, 12), 32, precision="highest")
    x = random_array(rng, (64 * len(devices), bsmm.shape[0]), jnp.float32)
    w = random_array(rng, bsmm.w_shape, jnp.float32)
    t = random_array(rng, (x.shape[0], bsmm.shape[1]), jnp.float32)
    loss = lambda x, w, t: jnp.mean((bsmm(x, w) - t) ** 2)
    step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
    single = step(x, w, t)
    rows = NamedSharding(mesh, P("data"))
    xs, ts = jax.device_put(x, rows), jax.device_put(t, rows)
    ws = jax.device_put(w, NamedSharding(mesh, P()))
    compiled = step.lower(xs, ws, ts).compile()
    sharded = compiled(xs, ws, ts)
    for a, b in zip(jax.tree.leaves(single), jax.tree.leaves(sharded)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=1e-6)
    hlo = compiled.as_text()
    assert "jbs_bsmm_fwd" in hlo
    assert "all-gather" not in hlo, "the sharded batch was gathered before the custom call"
    assert "all-reduce" in hlo, "the weight gradient's per-device partials were not summed"
    assert sharded[1][0].sharding.spec[0] == "data"


def test_kernels_inside_shard_map(rng):
    """The custom calls inside a shard_map body (check_vma on, as by default), over every GPU
    there is: the replicated weight's gradient is summed over the devices, as dense math's."""
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((len(jax.devices()),), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    bsmm = jbs.BlockSparseMatMul(heavy_column_layout(rng, 16, 12), 32, precision="highest")
    x = random_array(rng, (64 * len(jax.devices()), bsmm.shape[0]), jnp.float32)
    w = random_array(rng, bsmm.w_shape, jnp.float32)

    def grads(matmul):
        body = lambda x, w: jax.lax.psum(jnp.sum(jnp.sin(matmul(x, w))), "data")
        return jax.jit(jax.grad(jax.shard_map(body, mesh=mesh, in_specs=(P("data"), P()), out_specs=P()), (0, 1)))

    step = grads(bsmm)
    assert "jbs_bsmm_dw" in step.lower(x, w).compile().as_text()
    dense = grads(lambda x, w: jnp.matmul(x, bsmm.to_dense(w), precision=jax.lax.Precision.HIGHEST))
    for got, want in zip(step(x, w), dense(x, w)):
        assert rel_error(got, f64(want)) < tolerance(jnp.float32, "highest")


def _check_stacked(bsmm, x, w, g, y, dx, stacked, dtype):
    """y and dx of a vmap over 3 stacked activations ("x"), weights ("w") or both against
    float64 (dx only where x is stacked: otherwise it is summed over the weights)."""
    for b in range(3):
        xb = x[b] if stacked != "w" else x
        W = dense_f64(bsmm, w[b] if stacked != "x" else w)
        assert rel_error(y[b], f64(xb) @ W) < tolerance(dtype)
        if stacked != "w":
            assert rel_error(dx[b], f64(g[b]) @ W.T) < tolerance(dtype)


@pytest.mark.parametrize("stacked", ["x", "w", "both"])
@pytest.mark.parametrize("bs,dtype", [(8, jnp.bfloat16), (32, jnp.bfloat16), (16, jnp.float32)])
def test_small_n_tile_major_activation(rng, monkeypatch, stacked, bs, dtype):
    """The small-N fwd/dx kernel reads a tile-major copy of the activation (by default at bs 8
    in 16-bit types; JBS_TILE_MAJOR=1 forces it everywhere) or the row-major one
    (JBS_TILE_MAJOR=0): both give the same bits, correct against float64, under vmap over a
    stacked or broadcast activation and weight, with a heavy column (split into chunks whose
    partials share the scratch result with the copy) and 29 rows (not a row tile)."""
    bsmm = jbs.BlockSparseMatMul(heavy_column_layout(rng, 40, 9), bs)
    x = random_array(rng, ((3,) if stacked != "w" else ()) + (29, bsmm.shape[0]), dtype)
    w = random_array(rng, ((3,) if stacked != "x" else ()) + bsmm.w_shape, dtype)
    g = random_array(rng, (3, 29, bsmm.shape[1]), dtype)
    axes = (0 if stacked != "w" else None, 0 if stacked != "x" else None)
    results = {}
    for setting in ("1", "0"):
        monkeypatch.setenv("JBS_TILE_MAJOR", setting)
        y, pullback = jax.jit(lambda x, w: jax.vjp(jax.vmap(bsmm, in_axes=axes), x, w))(x, w)
        results[setting] = (np.asarray(y), np.asarray(jax.jit(pullback)(g)[0]))
    np.testing.assert_array_equal(results["1"][0], results["0"][0])
    np.testing.assert_array_equal(results["1"][1], results["0"][1])
    y, dx = results["1"]
    _check_stacked(bsmm, x, w, g, y, dx, stacked, dtype)


# JBS_STREAM_EVEN / JBS_STREAM_WS / JBS_STREAM_GROUPS / JBS_STREAM_EVEN_GROUP settings that
# force each small-N kernel with a split reduction (the even-split and warp-specialized ones
# exist on sm_90 only, the even-split one for bs 16-64 and not for fp32 at HIGHEST, its group
# variant for 16-bit types at bs 8, 16 and 32 up to 32 rows; elsewhere a case runs the fallback).
# JBS_STREAM_EVEN_SWIZZLE=0: the even-split walk with row-major tiles instead of swizzled ones
# (16-bit types and fp32 at bs 32; fp32 at other block sizes has only those).
# JBS_STREAM_EVEN_DIRECT_TILES=1 / 0: the swizzled 16-bit walk's tiles straight from the
# activation by TMA instead of from a tile-major copy.
SMALL_N_SPLIT_ENV = ("JBS_STREAM_EVEN", "JBS_STREAM_WS", "JBS_STREAM_GROUPS", "JBS_STREAM_EVEN_GROUP",
                     "JBS_STREAM_EVEN_SWIZZLE", "JBS_STREAM_EVEN_DIRECT_TILES")
SMALL_N_SPLIT_PATHS = {"barriers": ("0", "0", "1", "0", "", ""), "warp-specialized": ("0", "1", "0", "0", "", ""),
                       "even-split": ("1", "0", "0", "0", "", "0"), "even-split-groups": ("0", "0", "0", "1", "", ""),
                       "even-split-row-major": ("1", "0", "0", "0", "0", ""),
                       "even-split-direct-tiles": ("1", "0", "0", "0", "", "1")}


@pytest.mark.parametrize("path", sorted(SMALL_N_SPLIT_PATHS))
@pytest.mark.parametrize("bs", [8, 16, 32, 64])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 29, 64])
def test_small_n_split_kernels(rng, monkeypatch, path, bs, dtype, n):
    """The small-N kernels that cut columns and sum pieces (forced by JBS_STREAM_EVEN /
    JBS_STREAM_WS / JBS_STREAM_GROUPS): fwd and dx over a power-law layout with an empty row
    and column, a partial last column group (bs 32: 9 columns in groups of 4), enough items per
    column to be cut into several pieces whose partials are summed by the last to arrive, and
    under vmap over stacked weights (at 29 rows, over stacked activations too)."""
    for name, setting in zip(SMALL_N_SPLIT_ENV, SMALL_N_SPLIT_PATHS[path]):
        monkeypatch.setenv(name, setting)
    layout = heavy_column_layout(rng, 70, 9 * max(1, 32 // bs), density=0.5)
    stacked_x = n == 29
    for precision in ([None, "highest"] if dtype == jnp.float32 else [None]):
        bsmm = jbs.BlockSparseMatMul(layout, bs, precision=precision)
        x = random_array(rng, ((2,) if stacked_x else ()) + (n, bsmm.shape[0]), dtype)
        w = random_array(rng, (2,) + bsmm.w_shape, dtype)
        g = random_array(rng, (2, n, bsmm.shape[1]), dtype)
        axes = (0 if stacked_x else None, 0)
        y, pullback = jax.jit(lambda x, w: jax.vjp(jax.vmap(bsmm, in_axes=axes), x, w))(x, w)
        dx = jax.jit(pullback)(g)[0]
        dx_ref = 0
        for b in range(2):
            W = dense_f64(bsmm, w[b])
            assert rel_error(y[b], f64(x[b] if stacked_x else x) @ W) < tolerance(dtype, precision)
            if stacked_x:
                assert rel_error(dx[b], f64(g[b]) @ W.T) < tolerance(dtype, precision)
            dx_ref = dx_ref + f64(g[b]) @ W.T
        if not stacked_x:
            assert rel_error(dx, dx_ref) < tolerance(dtype, precision)


@pytest.mark.parametrize("dtype,bs,n", [(jnp.float32, 32, 64), (jnp.float32, 32, 16), (jnp.bfloat16, 32, 64),
                                        (jnp.bfloat16, 16, 64), (jnp.float32, 64, 40)])
def test_warp_specialized_small_n_kernel_over_long_item_lists(rng, monkeypatch, dtype, bs, n):
    """The warp-specialized small-N kernel (bsmm_stream_ws_kernel.cuh; the default for fp32 at
    bs 32 where union items carry enough blocks) over 4096 x 4096 weights: each CTA walks hundreds of union items,
    enough for a producer warp to run rounds ahead of another. Its rings hold 6 stages (fp32,
    64 rows), 9 (16 rows) or 13 (bf16): each stage must keep one producer warp, or a stage is
    refilled while still in use (it crashed with an mbarrier over-arrival at fp32, 64 rows)."""
    from test_conv_gpu import kernel_names
    monkeypatch.setenv("JBS_STREAM_WS", "1")
    bsmm = jbs.BlockSparseMatMul(jbs.layouts.random(4096 // bs, 4096 // bs, density=0.5, seed=4), bs)
    x = random_array(rng, (n, 4096), dtype)
    w = random_array(rng, bsmm.w_shape, dtype)
    fwd = jax.jit(lambda x, w: bsmm(x, w))
    assert any("bsmm_stream_ws_kernel" in name for name in kernel_names(fwd, x, w))
    y = fwd(x, w)
    assert rel_error(y, f64(x) @ dense_f64(bsmm, w)) < tolerance(dtype)
    np.testing.assert_array_equal(np.asarray(fwd(x, w)), np.asarray(y))


@pytest.mark.parametrize("density", [0.5, 1.0])
def test_warp_specialized_small_n_kernel_default_follows_memory_bandwidth(rng, monkeypatch, density):
    """fp32 at bs 32 and 32 rows takes the warp-specialized small-N kernel by default where its
    union items carry >= 2 blocks on GPUs of up to 4 TB/s of HBM (an H100), >= 3 above (an
    H200, where the one-column kernel won at density 1/2; launch_small_n.cuh min_stream_ws_reuse):
    density 1 (4 blocks per item) takes it everywhere, density 1/2 (~2.1) on the slower memory
    only. Against float64."""
    from test_conv_gpu import kernel_names
    runtime = pytest.importorskip("cupy").cuda.runtime
    device = runtime.getDevice()
    peak = 2 * 1e3 * runtime.deviceGetAttribute(36, device) * runtime.deviceGetAttribute(37, device) / 8
    for name in SMALL_N_SPLIT_ENV:
        monkeypatch.delenv(name, raising=False)
    bsmm = jbs.BlockSparseMatMul(jbs.layouts.random(48, 48, density=density, seed=5), 32)
    x = random_array(rng, (32, bsmm.shape[0]), jnp.float32)
    w = random_array(rng, bsmm.w_shape, jnp.float32)
    fwd = jax.jit(lambda x, w: bsmm(x, w))
    expected = density == 1.0 or peak <= 4e12
    assert any("bsmm_stream_ws_kernel" in name for name in kernel_names(fwd, x, w)) == expected, peak
    assert rel_error(fwd(x, w), f64(x) @ dense_f64(bsmm, w)) < tolerance(jnp.float32)


@pytest.mark.parametrize("dtype,bs,n", [(jnp.bfloat16, 32, 32), (jnp.bfloat16, 32, 7), (jnp.float16, 16, 20),
                                        (jnp.bfloat16, 64, 40), (jnp.float32, 32, 32), (jnp.float32, 32, 7),
                                        (jnp.float32, 32, 13)])
def test_even_split_walk_swizzled_tiles_equal_row_major_ones(rng, monkeypatch, dtype, bs, n):
    """The even-split walk (bsmm_stream_even_kernel.cuh) with its tiles swizzled (16-bit types,
    and fp32 at bs 32: a tile-major copy of the activation, zero rows up to the row tile, and
    every tile and weight block by a TMA copy with the 128-byte swizzle), gives the same bits
    as with row-major tiles (JBS_STREAM_EVEN_SWIZZLE=0: the same items, warps and MMA order),
    fwd and dx against float64, over a power-law layout with an empty row and column; the copy
    kernel runs only in the swizzled walk. 16-bit types also with their tiles straight from the
    activation (JBS_STREAM_EVEN_DIRECT_TILES=1: TMA boxes of the tile's own rows, no copy)."""
    from test_conv_gpu import kernel_names
    for name in SMALL_N_SPLIT_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("JBS_STREAM_EVEN", "1")
    layout = heavy_column_layout(rng, 2048 // bs, 3072 // bs, density=0.4)
    bsmm = jbs.BlockSparseMatMul(layout, bs)
    x = random_array(rng, (n, bsmm.shape[0]), dtype)
    w = random_array(rng, bsmm.w_shape, dtype)
    g = random_array(rng, (n, bsmm.shape[1]), dtype)
    results, names = {}, {}
    direct = jnp.dtype(dtype).itemsize == 2
    for setting in ("", "0") + (("direct",) if direct else ()):
        monkeypatch.setenv("JBS_STREAM_EVEN_SWIZZLE", "" if setting == "direct" else setting)
        monkeypatch.setenv("JBS_STREAM_EVEN_DIRECT_TILES", "1" if setting == "direct" else "0")
        # (a new function each time: jit's cache would replay the first setting's kernels)
        run = jax.jit(lambda x, w, g: (bsmm(x, w), jax.vjp(bsmm, x, w)[1](g)[0]))
        names[setting] = kernel_names(run, x, w, g)
        results[setting] = [np.asarray(r) for r in run(x, w, g)]
    assert any("bsmm_stream_even_kernel" in name for name in names[""]), names[""]
    assert any("tile_major_kernel" in name for name in names[""]), names[""]
    assert not any("tile_major_kernel" in name for name in names["0"]), names["0"]
    if direct:
        assert any("bsmm_stream_even_kernel" in name for name in names["direct"]), names["direct"]
        assert not any("tile_major_kernel" in name for name in names["direct"]), names["direct"]
        np.testing.assert_array_equal(results["direct"][0], results["0"][0])
        np.testing.assert_array_equal(results["direct"][1], results["0"][1])
    W = dense_f64(bsmm, w)
    y, dx = results[""]
    assert rel_error(y, f64(x) @ W) < tolerance(dtype)
    assert rel_error(dx, f64(g) @ W.T) < tolerance(dtype)
    np.testing.assert_array_equal(y, results["0"][0])
    np.testing.assert_array_equal(dx, results["0"][1])


@pytest.mark.parametrize("dtype,bs,n", [(jnp.bfloat16, 32, 32), (jnp.bfloat16, 32, 7), (jnp.float16, 16, 20),
                                        (jnp.bfloat16, 16, 1), (jnp.float16, 32, 64), (jnp.float32, 32, 32),
                                        (jnp.float32, 32, 13)])
def test_packed_even_walk_sums_whole_columns_in_its_ctas(rng, monkeypatch, dtype, bs, n):
    """The packed even walk (bsmm_stream_even_kernel.cuh: PACKED; the swizzled walks: 16-bit
    types with their tiles straight from the activation, fp32 at bs 32 from its tile-major copy):
    each CTA walks whole output columns (tables.py: _packing, built for
    this GPU's SMs as jax reports them; taken with JBS_STREAM_EVEN_PACKED=1), so no sum kernel
    runs. fwd and dx against float64 and against the even cut (JBS_STREAM_EVEN_PACKED=0, whose
    cut columns a second kernel sums), over a random layout with an empty row and column; bit
    for bit on a repeat."""
    from test_conv_gpu import kernel_names
    for name in SMALL_N_SPLIT_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("JBS_STREAM_EVEN", "1")
    layout = jbs.layouts.random(400, 400, 0.05, seed=3)
    layout[7, :] = False
    layout[:, 11] = False
    runtime = pytest.importorskip("cupy").cuda.runtime
    sms = runtime.deviceGetAttribute(16, runtime.getDevice())  # cudaDevAttrMultiProcessorCount
    monkeypatch.setenv("JBS_STREAM_EVEN_PACKED", "1")  # (read when the op is built, and at launch)
    assert extension.packed_walk_ctas() == sms  # jax reports the SMs as the kernels count them
    bsmm = jbs.BlockSparseMatMul(layout, bs)
    assert bsmm._tables.fwd_packed.size > 1 and bsmm._tables.dx_packed.size > 1
    x = random_array(rng, (n, bsmm.shape[0]), dtype)
    w = random_array(rng, bsmm.w_shape, dtype)
    g = random_array(rng, (n, bsmm.shape[1]), dtype)
    results, names = {}, {}
    for setting in ("1", "0"):
        monkeypatch.setenv("JBS_STREAM_EVEN_PACKED", setting)
        # (a new function each time: jit's cache would replay the first setting's kernels)
        run = jax.jit(lambda x, w, g: (bsmm(x, w), jax.vjp(bsmm, x, w)[1](g)[0]))
        names[setting] = kernel_names(run, x, w, g)
        results[setting] = [np.asarray(r) for r in run(x, w, g)]
        if setting == "1":
            again = [np.asarray(r) for r in run(x, w, g)]
            assert all(np.array_equal(a, b) for a, b in zip(again, results[setting]))
    assert any("bsmm_stream_even_kernel" in name for name in names["1"]), names["1"]
    assert not any("bsmm_stream_even_sum_kernel" in name for name in names["1"]), names["1"]
    assert any("bsmm_stream_even_sum_kernel" in name for name in names["0"]), names["0"]
    W = dense_f64(bsmm, w)
    for y, dx in results.values():
        assert rel_error(y, f64(x) @ W) < tolerance(dtype)
        assert rel_error(dx, f64(g) @ W.T) < tolerance(dtype)
        assert not np.any(np.asarray(y, np.float32)[:, 11 * bs:12 * bs])
        assert not np.any(np.asarray(dx, np.float32)[:, 7 * bs:8 * bs])


@pytest.mark.parametrize("dtype,bs,columns,density", [(jnp.bfloat16, 32, 32, 0.6), (jnp.bfloat16, 32, 128, 0.95),
                                                      (jnp.float16, 16, 128, 0.6), (jnp.bfloat16, 8, 128, 0.6),
                                                      (jnp.float32, 32, 32, 0.7)])
def test_small_n_default_takes_the_even_split_kernel_with_enough_weights(rng, monkeypatch, dtype, bs,
                                                                         columns, density):
    """Without JBS_STREAM_EVEN(_GROUP), 16-bit weights of >= 24 MiB take the even-split kernel
    at bs 32 and its column-group variant at bs 8 / 16 (union items of ~4.8 / ~9.6 blocks here)
    and at bs 32 where the union items carry >= 3 blocks (~3.8 at density 0.95); fp32 weights
    of >= 48 MiB at bs 32 take the even-split kernel's swizzled walk (union items of ~2.8
    blocks; on an H100 the warp-specialized kernel takes them, whatever the scratch); the pieces'
    scratch, row tile x `columns` floats, is in the compiled HLO. Power-law layout with an
    empty row and column, fwd and dx against float64, bit for bit on a repeat."""
    monkeypatch.delenv("JBS_STREAM_EVEN", raising=False)
    monkeypatch.delenv("JBS_STREAM_EVEN_GROUP", raising=False)
    side = 4096 // bs  # >= 24 MiB of blocks: 12288 of 32 x 32, 49152 of 16 x 16
    layout = heavy_column_layout(rng, side, int(side * 1.5), density=density)
    bsmm = jbs.BlockSparseMatMul(layout, bs)
    min_bytes = (48 << 20) if dtype == jnp.float32 else (24 << 20)  # launch_small_n.cuh use_stream_even
    assert bsmm.nnz * bs * bs * jnp.dtype(dtype).itemsize >= min_bytes
    x = random_array(rng, (29, bsmm.shape[0]), dtype)
    w = random_array(rng, bsmm.w_shape, dtype)
    g = random_array(rng, (29, bsmm.shape[1]), dtype)
    run = jax.jit(lambda x, w, g: (bsmm(x, w), jax.vjp(bsmm, x, w)[1](g)[0]))
    pieces = 2 * 1280 * 32 * columns  # lowering._stream_even(_group)_scratch_floats at 29 rows
    scratch = [int(size) for size in re.findall(r"f32\[(\d+)\]", run.lower(x, w, g).compile().as_text())]
    assert max(scratch) >= pieces, scratch
    y, dx = run(x, w, g)
    W = dense_f64(bsmm, w)
    assert rel_error(y, f64(x) @ W) < tolerance(dtype)
    assert rel_error(dx, f64(g) @ W.T) < tolerance(dtype)
    y2, dx2 = run(x, w, g)
    assert np.array_equal(np.asarray(y2), np.asarray(y)) and np.array_equal(np.asarray(dx2), np.asarray(dx))


@pytest.mark.parametrize("path", ["warp-specialized", "even-split", "even-split-groups", "even-split-direct-tiles"])
@pytest.mark.parametrize("bs", [8, 16, 32, 64])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [3, 32])
def test_small_n_split_kernels_on_edge_layouts(rng, monkeypatch, path, bs, dtype, n):
    """The warp-specialized and even-split small-N kernels on layouts that stress their work
    split: whole column groups without a block (written as zeros), a single block (fewer items
    than CTAs or warps), and a wide layout whose columns are each cut over many CTAs or warps;
    results repeat bit for bit."""
    for name, setting in zip(SMALL_N_SPLIT_ENV, SMALL_N_SPLIT_PATHS[path]):
        monkeypatch.setenv(name, setting)
    width = 128 // bs
    wide = rng.random((40, 20 * width)) < 0.4
    wide[:, 2 * width:4 * width] = False  # groups 2 and 3 empty
    wide[:, -1] = True
    single = np.zeros((3, 3 * width), bool)
    single[1, width + 1] = True
    for layout in (wide, single):
        bsmm = jbs.BlockSparseMatMul(layout, bs)
        x = random_array(rng, (n, bsmm.shape[0]), dtype)
        w = random_array(rng, bsmm.w_shape, dtype)
        g = random_array(rng, (n, bsmm.shape[1]), dtype)
        run = jax.jit(lambda x, w, g: (bsmm(x, w), jax.vjp(bsmm, x, w)[1](g)[0]))
        y, dx = run(x, w, g)
        W = dense_f64(bsmm, w)
        assert rel_error(y, f64(x) @ W) < tolerance(dtype)
        assert rel_error(dx, f64(g) @ W.T) < tolerance(dtype)
        empty_columns = np.repeat(~layout.any(axis=0), bs)
        assert not np.any(np.asarray(y, np.float32)[:, empty_columns])
        y2, dx2 = run(x, w, g)
        assert np.array_equal(np.asarray(y2), np.asarray(y)) and np.array_equal(np.asarray(dx2), np.asarray(dx))


# JBS_GROUPS / JBS_WGMMA / JBS_PACK / JBS_WS settings that force each large-N fwd/dx kernel (the
# wgmma one reads a packed copy of the activation unless JBS_PACK=0, and runs warp-specialized
# unless JBS_WS=0).
LARGE_N_PATHS = {"one-column": ("0", "0", "1", "1"), "groups-mma-sync": ("1", "0", "1", "1"),
                 "groups-wgmma": ("1", "1", "1", "1"), "groups-wgmma-row-major": ("1", "1", "0", "1"),
                 "groups-wgmma-barriers": ("1", "1", "1", "0"),
                 "groups-wgmma-barriers-row-major": ("1", "1", "0", "0")}


@pytest.mark.parametrize("path", sorted(LARGE_N_PATHS))
@pytest.mark.parametrize("bs", [16, 32, 64])
@pytest.mark.parametrize("dtype", DTYPES)
def test_large_n_kernels_with_and_without_column_groups(rng, monkeypatch, path, bs, dtype):
    """Both large-N fwd/dx kernels (one output block column per CTA, or a group of 128 / bs
    columns walking the union of their input blocks), forced by JBS_GROUPS, on a power-law
    layout whose last group is partial, N not a multiple of the row tile (456 rows: the group
    kernel's second 256-row tile fills one 128-row epilogue half and part of the other)."""
    # (fp32 takes the wgmma kernel as tf32 at the default precision; at HIGHEST it takes the
    # mma.sync group kernel, or at bs 64, which that kernel lacks (two stages would not fit
    # next to its padded rows), the one-column kernel. sm_90 alone has wgmma, so
    # "groups-wgmma" runs the mma.sync group kernel elsewhere: the fallbacks are what is tested)
    groups, wgmma, pack, ws = LARGE_N_PATHS[path]
    monkeypatch.setenv("JBS_GROUPS", groups)
    monkeypatch.setenv("JBS_WGMMA", wgmma)
    monkeypatch.setenv("JBS_PACK", pack)
    monkeypatch.setenv("JBS_WS", ws)
    layout = heavy_column_layout(rng, 11, 13, density=0.5)
    for precision in ([None, "highest"] if dtype == jnp.float32 else [None]):
        bsmm = jbs.BlockSparseMatMul(layout, bs, precision=precision)
        x = random_array(rng, (456, bsmm.shape[0]), dtype)
        w = random_array(rng, bsmm.w_shape, dtype)
        g = random_array(rng, (456, bsmm.shape[1]), dtype)
        y, pullback = jax.jit(lambda x, w: jax.vjp(bsmm, x, w))(x, w)
        dx, _ = jax.jit(pullback)(g)
        W = dense_f64(bsmm, w)
        assert rel_error(y, f64(x) @ W) < tolerance(dtype, precision)
        assert rel_error(dx, f64(g) @ W.T) < tolerance(dtype, precision)


def _check_large_n_vmap(rng, stacked, bs, dtype):
    """fwd and dx of a vmap over 3 stacked activations, weights or both, 300 rows (two 256-row
    tiles, the second mostly past the end), against float64."""
    bsmm = jbs.BlockSparseMatMul(heavy_column_layout(rng, 9, 20, density=0.4), bs)
    x = random_array(rng, ((3,) if stacked != "w" else ()) + (300, bsmm.shape[0]), dtype)
    w = random_array(rng, ((3,) if stacked != "x" else ()) + bsmm.w_shape, dtype)
    g = random_array(rng, (3, 300, bsmm.shape[1]), dtype)
    axes = (0 if stacked != "w" else None, 0 if stacked != "x" else None)
    y, pullback = jax.jit(lambda x, w: jax.vjp(jax.vmap(bsmm, in_axes=axes), x, w))(x, w)
    dx = jax.jit(pullback)(g)[0]
    _check_stacked(bsmm, x, w, g, y, dx, stacked, dtype)


@pytest.mark.parametrize("stacked", ["x", "w", "both"])
@pytest.mark.parametrize("bs,dtype", [(16, jnp.bfloat16), (64, jnp.bfloat16), (32, jnp.float32)])
def test_wgmma_groups_over_weight_groups(rng, monkeypatch, stacked, bs, dtype):
    """The wgmma group kernel under vmap over a stacked or broadcast activation and weight, fwd
    and dx, over 300 rows: bf16 reads the packed copy of the activation (one packed group for
    stacked weights; its zero-filled rows past the end fill most of the second 256-row tile),
    fp32 (tf32) transposes each weight group's blocks on their way into shared memory."""
    monkeypatch.setenv("JBS_GROUPS", "1")
    monkeypatch.setenv("JBS_WGMMA", "1")
    monkeypatch.setenv("JBS_PACK", "1")
    _check_large_n_vmap(rng, stacked, bs, dtype)


@pytest.mark.parametrize("bs,dtype", [(32, jnp.bfloat16), (64, jnp.bfloat16), (32, jnp.float16),
                                      (64, jnp.float16), (32, jnp.float32), (64, jnp.float32)])
@pytest.mark.parametrize("n", [200, 580, 1024])
def test_tma_group_kernel(rng, monkeypatch, bs, dtype, n):
    """The TMA-fed column-group kernel (bsmm_group_tma_kernel.cuh), forced by JBS_GROUP_TMA=1:
    fwd and dx against float64 and bitwise repeatable (fp32 as tf32, its fwd through the
    transposed copy of the blocks; fp32 at bs 64 through the bs 32 kernel over the blocks'
    quarters), on a power-law layout with empty block
    rows and columns, 40 block rows (more union items per group than the ring has slots, so
    every slot is refilled) and 13 block columns (a partial last group); 580 rows: three row
    tiles, the last one partial (its rows past the end load as zeros and are not stored); 200
    rows (mid N): one partial row tile, each group's items cut into 8 slices (some empty), whose
    partials a second kernel sums. Its
    groups (the wide ones at bs 64 and fp32 bs 32, the paired ones at 16-bit bs 32) hold columns
    out of order (chosen to share inputs), so their outputs go to the columns the map names."""
    from jbs._src.tables import tables_for
    from test_conv_gpu import kernel_names
    monkeypatch.setenv("JBS_GROUP_TMA", "1")
    bsmm = jbs.BlockSparseMatMul(heavy_column_layout(rng, 40, 13, density=0.45), bs)
    t = tables_for(np.asarray(bsmm.layout), bs)
    kind = "wide" if bs == 64 or dtype == jnp.float32 else "paired"  # 16-bit bs 32: the ordinary width
    for op, segments in (("fwd", 13), ("dx", 40)):
        columns = getattr(t, f"{op}_{kind}_columns")[:segments]
        assert (columns != np.arange(segments)).any(), f"the {op} {kind} groups are in order"
    x = random_array(rng, (n, bsmm.shape[0]), dtype)
    w = random_array(rng, bsmm.w_shape, dtype)
    g = random_array(rng, (n, bsmm.shape[1]), dtype)
    fwd = jax.jit(lambda x, w: bsmm(x, w))
    dx = jax.jit(lambda x, w, g: jax.vjp(bsmm, x, w)[1](g)[0])
    for fn, args in ((fwd, (x, w)), (dx, (x, w, g))):
        names = kernel_names(fn, *args)
        assert any("bsmm_group_tma_kernel" in name for name in names), "the TMA kernel did not run"
        assert any("sum_splits" in name for name in names) == (n < 512), names
    y, dx_ = fwd(x, w), dx(x, w, g)
    W = dense_f64(bsmm, w)
    assert rel_error(y, f64(x) @ W) < tolerance(dtype)
    assert rel_error(dx_, f64(g) @ W.T) < tolerance(dtype)
    empty_columns = np.repeat(~np.asarray(bsmm.layout).any(axis=0), bs)
    assert not np.any(np.asarray(y, np.float32)[:, empty_columns])
    np.testing.assert_array_equal(np.asarray(fwd(x, w)), np.asarray(y))
    np.testing.assert_array_equal(np.asarray(dx(x, w, g)), np.asarray(dx_))


@pytest.mark.parametrize("stacked", ["x", "w", "both"])
@pytest.mark.parametrize("bs,dtype", [(32, jnp.bfloat16), (64, jnp.float16), (32, jnp.float32),
                                      (64, jnp.float32)])
def test_tma_group_kernel_over_weight_groups(rng, monkeypatch, stacked, bs, dtype):
    """The TMA kernel under vmap over a stacked or broadcast activation and weight (its tensor
    maps' third dimension, with a step of 0 where the operand is shared), fwd and dx."""
    monkeypatch.setenv("JBS_GROUP_TMA", "1")
    _check_large_n_vmap(rng, stacked, bs, dtype)


@pytest.mark.parametrize("bs,dtype,expected", [(64, jnp.bfloat16, True), (32, jnp.float16, True),
                                               (32, jnp.float32, True), (16, jnp.bfloat16, False),
                                               (64, jnp.float32, True), (16, jnp.float32, False)])
def test_tma_group_kernel_is_the_default_for_large_n(rng, monkeypatch, bs, dtype, expected):
    """Without switches, large-N fwd and dx take the TMA kernel at bs 32 and 64, in 16-bit
    types and in fp32 (at bs 64 through the bs 32 kernel); bs 16 keeps the wgmma group kernel."""
    from test_conv_gpu import kernel_names
    for name in ("JBS_GROUP_TMA", "JBS_GROUPS", "JBS_WGMMA"):
        monkeypatch.delenv(name, raising=False)
    bsmm = jbs.BlockSparseMatMul(jbs.layouts.random(512 // bs, 512 // bs, density=0.5, seed=2), bs)
    x = random_array(rng, (2048, 512), dtype)
    w = random_array(rng, bsmm.w_shape, dtype)
    g = random_array(rng, (2048, 512), dtype)
    fwd = jax.jit(lambda x, w: bsmm(x, w))
    dx = jax.jit(lambda x, w, g: jax.vjp(bsmm, x, w)[1](g)[0])
    for fn, args in ((fwd, (x, w)), (dx, (x, w, g))):
        names = kernel_names(fn, *args)
        assert any("bsmm_group_tma_kernel" in name for name in names) == expected, names


@pytest.mark.parametrize("bs,dtype,density,rows,expected", [
    (32, jnp.bfloat16, 0.5, 200, True), (64, jnp.float16, 0.5, 100, True), (32, jnp.bfloat16, 0.125, 100, False),
    (32, jnp.bfloat16, 0.125, 400, True), (32, jnp.float32, 0.5, 200, True), (64, jnp.float32, 0.5, 200, True),
    (16, jnp.bfloat16, 0.5, 200, True), (16, jnp.float32, 0.5, 300, True), (16, jnp.bfloat16, 0.125, 100, False)])
def test_group_kernels_take_mid_n_by_reuse(rng, monkeypatch, bs, dtype, density, rows, expected):
    """Without switches, mid-N fwd and dx (65-511 rows) take the TMA kernel (bs 32, 64) where
    the layout's reuse (blocks per union item) times the rows reaches its threshold, or from
    384 rows (cuda/matmul/launch_large_n.cuh: group_tma_takes_mid_n), and the wgmma group kernel
    (bs 16) likewise (use_group_wgmma), their groups' items cut into slices whose partials a
    second kernel sums; a sparse layout at 100 rows keeps the one-column kernel. Against
    float64, and bitwise repeatable."""
    from test_conv_gpu import kernel_names
    for name in ("JBS_GROUP_TMA", "JBS_GROUPS", "JBS_WGMMA", "JBS_MID_SLICES"):
        monkeypatch.delenv(name, raising=False)
    bsmm = jbs.BlockSparseMatMul(jbs.layouts.random(512 // bs, 512 // bs, density=density, seed=3), bs)
    x = random_array(rng, (rows, 512), dtype)
    w = random_array(rng, bsmm.w_shape, dtype)
    g = random_array(rng, (rows, 512), dtype)
    fwd = jax.jit(lambda x, w: bsmm(x, w))
    dx = jax.jit(lambda x, w, g: jax.vjp(bsmm, x, w)[1](g)[0])
    kernel = "bsmm_group_wgmma_kernel" if bs == 16 else "bsmm_group_tma_kernel"
    for fn, args in ((fwd, (x, w)), (dx, (x, w, g))):
        names = kernel_names(fn, *args)
        assert any(kernel in name for name in names) == expected, names
        assert any("sum_splits" in name for name in names) == expected, names
    W = dense_f64(bsmm, w)
    assert rel_error(fwd(x, w), f64(x) @ W) < tolerance(dtype)
    assert rel_error(dx(x, w, g), f64(g) @ W.T) < tolerance(dtype)
    np.testing.assert_array_equal(np.asarray(fwd(x, w)), np.asarray(fwd(x, w)))


@pytest.mark.parametrize("features,rows,pack,sliced", [(4352, 300, "", False), (512, 200, "0", True)])
def test_wgmma_group_kernel_at_mid_n_unsliced_or_unpacked(rng, monkeypatch, features, rows, pack, sliced):
    """bs 16 at mid N (cuda/matmul/launch_large_n.cuh: group_wgmma_takes_mid_n). Over 4352 output
    channels (34 column groups) and 300 rows (two row tiles) the grid holds more than half the
    SMs of a 132-SM GPU unsliced, so the wgmma kernel takes the call without slices (no sum
    kernel), as from 384 rows. With JBS_PACK=0 (no packed activation) the slices' partials
    start at the scratch's start and the sliced kernel still runs. Against float64."""
    from test_conv_gpu import kernel_names
    for name in ("JBS_GROUP_TMA", "JBS_GROUPS", "JBS_WGMMA", "JBS_MID_SLICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("JBS_PACK", pack)
    ctas = (features // 128) * 2  # column groups of 8 blocks, times two row tiles
    if not sliced and pytest.importorskip("torch").cuda.get_device_properties(0).multi_processor_count >= 2 * ctas:
        pytest.skip("the unsliced grid holds more than half the SMs only on GPUs with under 136 SMs")
    bsmm = jbs.BlockSparseMatMul(jbs.layouts.random(features // 16, features // 16, density=0.5, seed=4), 16)
    x = random_array(rng, (rows, features), jnp.bfloat16)
    w = random_array(rng, bsmm.w_shape, jnp.bfloat16)
    fwd = jax.jit(lambda x, w: bsmm(x, w))
    names = kernel_names(fwd, x, w)
    assert any("bsmm_group_wgmma_kernel" in name for name in names), names
    assert any("sum_splits" in name for name in names) == sliced, names
    assert rel_error(fwd(x, w), f64(x) @ dense_f64(bsmm, w)) < tolerance(jnp.bfloat16)


def test_handler_checks_the_wide_groups(rng, monkeypatch):
    """The fwd handler reads the TMA kernel's wide groups (3 columns at bs 64) and their columns
    after the ordinary groups, then the paired groups: given the ordinary 2-column groups as
    wide ones, or a column map of the wrong length, it returns an error naming them; given the
    right ones, the product (1000 rows: the TMA kernel over 3 wide groups, the last one
    partial, forced by JBS_GROUP_TMA=1)."""
    from jbs._src.tables import tables_for
    from test_conv_gpu import kernel_names
    monkeypatch.setenv("JBS_GROUP_TMA", "1")
    layout = heavy_column_layout(rng, 5, 8, density=0.5)
    bsmm = jbs.BlockSparseMatMul(layout, 64)
    t = tables_for(np.asarray(bsmm.layout), 64)
    x = random_array(rng, (1, 1000, bsmm.shape[0]), jnp.bfloat16)
    w = random_array(rng, (1,) + bsmm.w_shape, jnp.bfloat16)
    call = jax.ffi.ffi_call("jbs_bsmm_fwd", [jax.ShapeDtypeStruct((1, 1000, bsmm.shape[1]), jnp.bfloat16),
                                             jax.ShapeDtypeStruct((1 << 16,), jnp.float32)])
    tables = [t.fwd_offsets, t.fwd_items, t.fwd_chunks, t.fwd_splits, t.fwd_group_offsets, t.fwd_group_items]
    paired = [t.fwd_paired_offsets, t.fwd_paired_items, t.fwd_paired_columns]
    attributes = dict(block_size=np.int32(64), precision=np.int32(0))
    with pytest.raises(Exception, match=r"wide_offsets \(5,\) and wide_items \(\d+, 3\) expected \(4,\) and \(n, 4\)"):
        jax.block_until_ready(call(x, w, *tables, t.fwd_group_offsets, t.fwd_group_items, t.fwd_wide_columns,
                                   *paired, **attributes))
    with pytest.raises(Exception, match=r"wide_columns \(8,\) expected \(9,\) for 3 wide groups of 3 columns"):
        jax.block_until_ready(call(x, w, *tables, t.fwd_wide_offsets, t.fwd_wide_items, t.fwd_wide_columns[:8],
                                   *paired, **attributes))
    fwd = jax.jit(lambda x, w: call(x, w, *tables, t.fwd_wide_offsets, t.fwd_wide_items, t.fwd_wide_columns,
                                    *paired, **attributes)[0])
    assert any("bsmm_group_tma_kernel" in name for name in kernel_names(fwd, x, w)), "the TMA kernel did not run"
    assert rel_error(fwd(x, w)[0], f64(x[0]) @ dense_f64(bsmm, w[0])) < tolerance(jnp.bfloat16)


@pytest.mark.parametrize("rows,expected", [(600, False), (6000, True)])
def test_tma_group_kernel_leaves_small_low_reuse_grids(rng, monkeypatch, rows, expected):
    """A diagonal layout (reuse 1: one block per union item) at bs 32 over 768 output channels
    has 6 column groups: over 600 rows the TMA kernel's grid would be 18 CTAs, so the default
    leaves the call to the one-column kernel; over 6000 rows (144 CTAs) it takes it. (From 64
    rows per SM the panel kernel, asked first, takes such a narrow matmul.)"""
    from test_conv_gpu import kernel_names
    for name in ("JBS_GROUP_TMA", "JBS_GROUPS", "JBS_WGMMA"):
        monkeypatch.delenv(name, raising=False)
    bsmm = jbs.BlockSparseMatMul(np.eye(24, dtype=bool), 32)
    x = random_array(rng, (rows, 768), jnp.bfloat16)
    w = random_array(rng, bsmm.w_shape, jnp.bfloat16)
    fwd = jax.jit(lambda x, w: bsmm(x, w))
    names = kernel_names(fwd, x, w)
    assert any("bsmm_group_tma_kernel" in name for name in names) == expected, names
    assert rel_error(fwd(x, w), f64(x) @ dense_f64(bsmm, w)) < tolerance(jnp.bfloat16)


@pytest.mark.parametrize("bs,dtype", [(16, jnp.bfloat16), (32, jnp.float16), (64, jnp.bfloat16),
                                      (32, jnp.float32), (16, jnp.float32)])
def test_warp_specialized_kernel_matches_the_barrier_kernel_bitwise(rng, monkeypatch, bs, dtype):
    """The warp-specialized wgmma group kernel adds every product in the same order as the one
    with a CTA barrier per item, so fwd and dx agree bit for bit (580 rows: three row tiles,
    the last one partial; a power-law layout with empty block rows and columns, and 40 block
    rows: more union items per group than the ring has stages, so every stage is refilled)."""
    monkeypatch.setenv("JBS_GROUPS", "1")
    monkeypatch.setenv("JBS_WGMMA", "1")
    bsmm = jbs.BlockSparseMatMul(heavy_column_layout(rng, 40, 10, density=0.45), bs)
    x = random_array(rng, (580, bsmm.shape[0]), dtype)
    w = random_array(rng, bsmm.w_shape, dtype)
    g = random_array(rng, (580, bsmm.shape[1]), dtype)
    results = []
    for ws in ("0", "1"):
        monkeypatch.setenv("JBS_WS", ws)
        y, pullback = jax.jit(lambda x, w: jax.vjp(bsmm, x, w))(x, w)
        results.append((np.asarray(y), np.asarray(jax.jit(pullback)(g)[0])))
    W = dense_f64(bsmm, w)
    assert rel_error(results[1][0], f64(x) @ W) < tolerance(dtype, None)
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("ws", ["0", "1"])
@pytest.mark.parametrize("bs,dtype", [(16, jnp.bfloat16), (16, jnp.float32), (32, jnp.float16)])
def test_wgmma_group_kernels_over_groups_that_share_inputs(rng, monkeypatch, ws, bs, dtype):
    """The wgmma group kernels (a barrier per item, or warp-specialized) read a matmul's paired
    column groups, whose columns are chosen to share input blocks and so are out of order: the
    epilogue writes each where the group's column map says. fwd and dx against float64 (580
    rows: a partial last row tile; a power-law layout with empty block rows and columns and a
    partial last group), and bit for bit what the groups in order give (JBS_SHARED_INPUT_GROUPS=0:
    each output column still meets its blocks in input-block order)."""
    from jbs._src.tables import tables_for
    from test_conv_gpu import kernel_names
    monkeypatch.setenv("JBS_GROUPS", "1")
    monkeypatch.setenv("JBS_WGMMA", "1")
    monkeypatch.setenv("JBS_WS", ws)
    layout = heavy_column_layout(rng, 40, 21, density=0.3)
    t = tables_for(layout, bs)
    for op, segments in (("fwd", 21), ("dx", 40)):
        columns = getattr(t, f"{op}_paired_columns")[:segments]
        assert (columns != np.arange(segments)).any(), f"the {op} paired groups are in order"
    shared = jbs.BlockSparseMatMul(layout, bs)
    monkeypatch.setenv("JBS_SHARED_INPUT_GROUPS", "0")
    in_order = jbs.BlockSparseMatMul(layout, bs)
    x = random_array(rng, (580, shared.shape[0]), dtype)
    w = random_array(rng, shared.w_shape, dtype)
    g = random_array(rng, (580, shared.shape[1]), dtype)
    results = []
    for bsmm in (shared, in_order):
        fwd = jax.jit(lambda x, w: bsmm(x, w))
        dx = jax.jit(lambda x, w, g: jax.vjp(bsmm, x, w)[1](g)[0])
        names = kernel_names(fwd, x, w) | kernel_names(dx, x, w, g)
        assert any("bsmm_group_ws_kernel" in n or "bsmm_group_wgmma_kernel" in n for n in names), names
        results.append((np.asarray(fwd(x, w)), np.asarray(dx(x, w, g))))
    W = dense_f64(shared, w)
    assert rel_error(results[0][0], f64(x) @ W) < tolerance(dtype, None)
    assert rel_error(results[0][1], f64(g) @ W.T) < tolerance(dtype, None)
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("bs,dtype,expected", [(16, jnp.float32, True), (32, jnp.float32, False),
                                               (16, jnp.bfloat16, False)])
def test_warp_specialized_kernel_is_the_default_for_fp32_at_bs16(rng, monkeypatch, bs, dtype, expected):
    """Without JBS_WS the large-N wgmma group kernel runs warp-specialized for fp32 (tf32) at bs 16
    only, where it measured 1.03-1.26x faster (benchmarks/NOTES.md, session 19), fwd and dx."""
    from test_conv_gpu import kernel_names
    monkeypatch.delenv("JBS_WS", raising=False)
    bsmm = jbs.BlockSparseMatMul(jbs.layouts.random(512 // bs, 512 // bs, density=0.5, seed=2), bs)
    x = random_array(rng, (2048, 512), dtype)
    w = random_array(rng, bsmm.w_shape, dtype)
    g = random_array(rng, (2048, 512), dtype)
    fwd = jax.jit(lambda x, w: bsmm(x, w))  # new functions: no cached executable
    dx = jax.jit(lambda x, w, g: jax.vjp(bsmm, x, w)[1](g)[0])
    for fn, args in ((fwd, (x, w)), (dx, (x, w, g))):
        names = {name for name in kernel_names(fn, *args) if "bsmm_group" in name}
        assert names, "the wgmma group kernel did not run"
        assert all(("bsmm_group_ws_kernel" in name) == expected for name in names), names
