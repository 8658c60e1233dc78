"""BlockSparseMatMul forward, packing and properties against float64 numpy."""

import numpy as np
import pytest
import jax
import jax.numpy as jnp

import jbs
from helpers import awkward_layout, dense_f64, f64, random_array, rel_error, tolerance

DTYPES = [jnp.float32, jnp.bfloat16, jnp.float16]
BLOCK_SIZES = [8, 16, 32, 64]


def check_forward(rng, layout, bs, dtype, batch_shape, precision=None):
    bsmm = jbs.BlockSparseMatMul(layout, block_size=bs, precision=precision)
    c, k = bsmm.shape
    x = random_array(rng, batch_shape + (c,), dtype)
    w = random_array(rng, bsmm.w_shape, dtype)
    y = jax.jit(bsmm)(x, w)
    assert y.shape == batch_shape + (k,) and y.dtype == jnp.dtype(dtype)
    ref = f64(x) @ dense_f64(bsmm, w)
    assert rel_error(y, ref) < tolerance(dtype, precision)
    return bsmm, x, w, y


@pytest.mark.parametrize("bs", BLOCK_SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_forward_random_nonsquare(rng, bs, dtype):
    rows, cols = rng.integers(2, 9), rng.integers(2, 9)
    while cols == rows:
        cols = rng.integers(2, 9)
    check_forward(rng, awkward_layout(rng, rows, cols), bs, dtype, (int(rng.integers(1, 40)),))


@pytest.mark.parametrize("dtype", DTYPES)
def test_forward_power_law_layout(rng, dtype):
    layout = jbs.layouts.barabasi_albert(64, 1, seed=int(rng.integers(1000)))
    degrees = layout.sum(axis=0)
    assert degrees.max() >= 3 * np.median(degrees)  # hubs: a real power-law test case
    check_forward(rng, layout, 8, dtype, (33,))


@pytest.mark.parametrize("name,layout", [
    ("single block", np.eye(1, dtype=bool)),
    ("single block in a big grid", np.pad(np.ones((1, 1), bool), ((3, 1), (0, 4)))),
    ("full", np.ones((3, 5), bool)),
    ("seed-style 0/1 ints", np.random.default_rng(0).integers(2, size=(4, 6))),
])
def test_forward_special_layouts(rng, name, layout):
    check_forward(rng, layout, 16, jnp.float32, (7,))


@pytest.mark.parametrize("batch_shape", [(), (1,), (5,), (2, 3), (2, 1, 3)])
def test_forward_any_leading_dims(rng, batch_shape):
    check_forward(rng, awkward_layout(rng, 3, 4), 8, jnp.float32, batch_shape)


def test_forward_zero_rows(rng):
    bsmm = jbs.BlockSparseMatMul(awkward_layout(rng, 3, 4), 8)
    y = bsmm(jnp.zeros((0, 24)), random_array(rng, bsmm.w_shape, jnp.float32))
    assert y.shape == (0, 32)


def test_forward_highest_precision(rng):
    check_forward(rng, awkward_layout(rng, 5, 3), 32, jnp.float32, (17,), precision="highest")


def test_empty_output_block_columns_are_exact_zeros(rng):
    layout = awkward_layout(rng, 4, 6)
    empty = np.flatnonzero(~layout.any(axis=0))
    assert empty.size
    _, _, _, y = check_forward(rng, layout, 8, jnp.float32, (9,))
    y = np.asarray(y).reshape(9, 6, 8)
    assert (y[:, empty] == 0).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_layout_without_blocks_multiplies_by_zero(rng, dtype):
    """np.random.randint(2, size=...) can draw no block at all: W is then zero, and so are the
    output and the gradients (of the packed weights' (0, bs, bs) shape), under every transform."""
    bsmm = jbs.BlockSparseMatMul(np.zeros((2, 3), int), 8)
    assert bsmm.w_shape == (0, 8, 8) and bsmm.density == 0
    x, w = random_array(rng, (5, 16), dtype), jnp.ones(bsmm.w_shape, dtype)
    y = jax.jit(bsmm)(x, w)
    assert y.shape == (5, 24) and y.dtype == dtype and not np.asarray(y, np.float32).any()
    dx, dw = jax.grad(lambda x, w: jnp.sum(bsmm(x, w).astype(jnp.float32)), argnums=(0, 1))(x, w)
    assert dx.shape == x.shape and not np.asarray(dx, np.float32).any() and dw.shape == (0, 8, 8)
    assert jax.vmap(bsmm, in_axes=(None, 0))(x, jnp.ones((3, 0, 8, 8), dtype)).shape == (3, 5, 24)
    np.testing.assert_array_equal(bsmm.to_dense(w), np.zeros((16, 24)))
    assert bsmm.from_dense(random_array(rng, (16, 24), dtype)).shape == (0, 8, 8)
    conv = jbs.BlockSparseConv(np.zeros((2, 3)), 8, 3, strides=2)
    assert conv(random_array(rng, (2, 7, 6, 16), dtype), jnp.ones(conv.w_shape, dtype)).shape == (2, 4, 3, 24)
    up = jbs.BlockSparseConvTranspose(np.zeros((2, 3)), 8, 3, strides=2)
    assert up(random_array(rng, (2, 7, 6, 16), dtype), jnp.ones(up.w_shape, dtype)).shape == (2, 14, 12, 24)


def test_nan_and_inf_propagate_only_through_nonzero_blocks(rng):
    layout = np.array([[1, 0], [0, 1], [0, 0]], bool)  # block row 2 feeds nothing
    bsmm = jbs.BlockSparseMatMul(layout, 8)
    x = np.array(random_array(rng, (4, 24), jnp.float32))
    x[0, 0] = np.nan      # feeds output block 0 only
    x[1, 8] = np.inf      # feeds output block 1 only
    x[2, 16:] = np.nan    # in a block row with no nonzero block: must not leak
    w = random_array(rng, bsmm.w_shape, jnp.float32)
    y = np.asarray(bsmm(x, w))
    assert np.isnan(y[0, :8]).all() and np.isfinite(y[0, 8:]).all()
    assert np.isinf(y[1, 8:]).any() and np.isfinite(y[1, :8]).all()
    assert np.isfinite(y[2]).all() and np.isfinite(y[3]).all()


def test_to_dense_from_dense_round_trip(rng):
    layout = awkward_layout(rng, 4, 3)
    bsmm = jbs.BlockSparseMatMul(layout, 8)
    w = random_array(rng, bsmm.w_shape, jnp.float32)
    dense = np.asarray(bsmm.to_dense(w))
    for i, (c, k) in enumerate(np.argwhere(layout)):
        np.testing.assert_array_equal(dense[c * 8:(c + 1) * 8, k * 8:(k + 1) * 8], w[i])
    mask = np.kron(layout, np.ones((8, 8), bool))
    assert (dense[~mask] == 0).all()
    np.testing.assert_array_equal(bsmm.from_dense(dense), w)
    full = rng.standard_normal(bsmm.shape).astype(np.float32)
    np.testing.assert_array_equal(bsmm.to_dense(bsmm.from_dense(full)), np.where(mask, full, 0))
    stacked = jnp.stack([w, 2 * w])
    np.testing.assert_array_equal(bsmm.to_dense(stacked)[1], 2 * dense)


def test_properties_and_hashing(rng):
    layout = awkward_layout(rng, 4, 6)
    bsmm = jbs.BlockSparseMatMul(layout, 16)
    assert bsmm.shape == (64, 96)
    assert bsmm.nnz == layout.sum() and bsmm.w_shape == (layout.sum(), 16, 16)
    assert bsmm.density == pytest.approx(layout.mean())
    assert bsmm.block_size == 16
    np.testing.assert_array_equal(bsmm.layout, layout)
    assert not bsmm.layout.flags.writeable
    again = jbs.BlockSparseMatMul(layout.astype(int), 16)
    assert again == bsmm and hash(again) == hash(bsmm)
    assert again.tables is bsmm.tables  # cached per layout
    assert jbs.BlockSparseMatMul(layout, 8) != bsmm
    np.testing.assert_array_equal(bsmm.fan_in(), np.repeat(layout.sum(axis=0) * 16, 16))
    assert "nnz" in repr(bsmm)


@pytest.mark.parametrize("make", [lambda lay: jbs.BlockSparseMatMul(lay, 8, precision="highest"),
                                  lambda lay: jbs.BlockSparseConv(lay, 8, (2, 3), 2, ((1, 0), (1, 1))),
                                  lambda lay: jbs.BlockSparseConvTranspose(lay, 8, (3, 3), 2)])
def test_pickled_and_copied_ops_stay_read_only(rng, make):
    """A pickled or deep-copied op equals the original and keeps its layout and tables read-only
    (writable copies could drift from the nnz and the hash they were built with)."""
    import copy
    import pickle
    op = make(awkward_layout(rng, 3, 4))
    for again in (pickle.loads(pickle.dumps(op)), copy.deepcopy(op)):
        assert again == op and hash(again) == hash(op)
        assert not again.layout.flags.writeable
        assert not any(table.flags.writeable for table in again._tables)
        x = random_array(rng, (2, 5, 6, 24) if isinstance(op, jbs.BlockSparseConv | jbs.BlockSparseConvTranspose)
                         else (5, 24), jnp.float32)
        w = random_array(rng, op.w_shape, jnp.float32)
        np.testing.assert_array_equal(again(x, w), op(x, w))


def test_user_layout_is_not_modified_or_aliased(rng):
    layout = awkward_layout(rng, 3, 3)
    before = layout.copy()
    bsmm = jbs.BlockSparseMatMul(layout, 8)
    layout[:] = True
    assert (bsmm.layout == before).all()


def test_inputs_are_not_modified(rng):
    bsmm = jbs.BlockSparseMatMul(awkward_layout(rng, 3, 4), 8)
    x = rng.standard_normal((5, 24)).astype(np.float32)
    w = rng.standard_normal(bsmm.w_shape).astype(np.float32)
    x0, w0 = x.copy(), w.copy()
    bsmm(x, w)
    jax.grad(lambda x, w: bsmm(x, w).sum(), argnums=(0, 1))(x, w)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(w, w0)


def test_weight_dtype_is_cast_to_input_dtype(rng):
    bsmm = jbs.BlockSparseMatMul(awkward_layout(rng, 3, 4), 8)
    x = random_array(rng, (5, 24), jnp.bfloat16)
    w = random_array(rng, bsmm.w_shape, jnp.float32)
    y = bsmm(x, w)
    assert y.dtype == jnp.bfloat16
    ref = f64(x) @ dense_f64(bsmm, w.astype(jnp.bfloat16))
    assert rel_error(y, ref) < tolerance(jnp.bfloat16)
