"""Flax NNX layers: against their dense equivalents, init statistics, training, RNN, checkpoints,
split/merge, Linen parity and data-parallel sharding."""

import textwrap

import numpy as np
import pytest
import jax
import jax.numpy as jnp

flax = pytest.importorskip("flax")
optax = pytest.importorskip("optax")
from flax import nnx  # noqa: E402
import flax.linen as nn  # noqa: E402

import jbs  # noqa: E402
import jbs.linen  # noqa: E402
import jbs.nn  # noqa: E402
from helpers import awkward_layout, f64, random_array, rel_error, run_on_four_host_devices  # noqa: E402

HIGHEST = jax.lax.Precision.HIGHEST


def dense_kernel(layer):
    return layer.op.to_dense(layer.effective_kernel())


def test_linear_matches_dense_equivalent(rng):
    layout = awkward_layout(rng, 4, 6)
    layer = jbs.nn.BlockSparseLinear(32, 48, layout=layout, block_size=8, precision="highest",
                                     bias_init=nnx.initializers.normal(1.0), rngs=nnx.Rngs(int(rng.integers(99))))
    assert layer.kernel.shape == (layout.sum(), 8, 8) and layer.bias.shape == (48,)
    x = random_array(rng, (2, 5, 32), jnp.float32)
    ref = f64(x) @ f64(dense_kernel(layer)) + f64(layer.bias[...])
    assert rel_error(layer(x), ref) < 2e-5


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_linear_dtype_and_param_dtype(rng, dtype):
    layer = jbs.nn.BlockSparseLinear(16, 32, layout=np.ones((2, 4)), block_size=8, dtype=dtype,
                                     param_dtype=jnp.float32, rngs=nnx.Rngs(0))
    y = layer(random_array(rng, (3, 16), jnp.float32))
    assert y.dtype == dtype and layer.kernel.dtype == jnp.float32


@pytest.mark.parametrize("density", [1.0, 0.25, 0.05])
def test_default_init_gives_unit_variance_at_any_density(rng, density):
    layout = jbs.layouts.random(40, 40, density, seed=int(rng.integers(99)))
    layer = jbs.nn.BlockSparseLinear(640, 640, layout=layout, block_size=16, use_bias=False,
                                     rngs=nnx.Rngs(int(rng.integers(99))))
    y = np.asarray(layer(random_array(rng, (512, 640), jnp.float32)))
    live = np.repeat(layout.any(axis=0), 16)
    assert 0.85 < y[:, live].var() < 1.15


def test_barabasi_albert_hubs_and_leaves_are_both_unit_variance(rng):
    layout = jbs.layouts.barabasi_albert(64, 1, seed=0)
    layer = jbs.nn.BlockSparseLinear(512, 512, layout=layout, block_size=8, use_bias=False, rngs=nnx.Rngs(3))
    y = np.asarray(layer(random_array(rng, (2048, 512), jnp.float32))).reshape(2048, 64, 8)
    degrees = layout.sum(axis=0)
    hub, leaf = int(np.argmax(degrees)), int(np.argmin(degrees))
    assert degrees[hub] >= 6 * degrees[leaf]
    assert 0.8 < y[:, hub].var() < 1.2 and 0.5 < y[:, leaf].var() < 1.6


def test_stock_flax_initialisers_see_each_units_real_fan_in(rng):
    """nnx.initializers.* given as kernel_init scale by the unit's fan-in (block_size x its
    column's blocks), as in nnx.Linear, not by the packed array's shape (block_size x nnz)."""
    layout = jbs.layouts.barabasi_albert(64, 3, seed=0)
    x = random_array(rng, (1024, 1024), jnp.float32)
    for init, variance in ((nnx.initializers.lecun_normal(), 1.0), (nnx.initializers.he_normal(), 2.0),
                           (nnx.initializers.orthogonal(), 1.0)):
        layer = jbs.nn.BlockSparseLinear(1024, 1024, layout=layout, block_size=16, use_bias=False,
                                         kernel_init=init, rngs=nnx.Rngs(int(rng.integers(99))))
        assert 0.85 * variance < np.asarray(layer(x)).var() < 1.15 * variance
    cell = jbs.linen.BlockSparseDense(1024, layout=layout, block_size=16, use_bias=False,
                                      kernel_init=nn.initializers.lecun_normal())
    assert 0.85 < np.asarray(cell.apply(cell.init(jax.random.key(0), x), x)).var() < 1.15


def test_per_block_column_places_each_columns_draw_on_its_blocks(rng):
    """The dense draw of a block column (fan_in x bs, or taps x fan_in x bs) lands on that
    column's blocks in row order: the draw numbers its rows by block rank (and its taps)."""
    layout = awkward_layout(rng, 5, 4)
    bs = 8

    def numbered(key, shape, dtype):
        index = jnp.indices(shape)
        value = index[-2] // bs + sum(index[i] * 10 ** (i + 1) for i in range(len(shape) - 2))
        return value.astype(dtype)

    rows, cols = np.nonzero(layout)
    rank = np.array([np.sum((cols == c) & (rows < r)) for r, c in zip(rows, cols)])
    packed = jbs.initializers.per_block_column(numbered, layout, bs)
    np.testing.assert_array_equal(packed(jax.random.key(0), (rows.size, bs, bs), jnp.float32),
                                  np.broadcast_to(rank[:, None, None], (rows.size, bs, bs)))
    conv = packed(jax.random.key(0), (2, 3, rows.size, bs, bs), jnp.float32)
    for h in range(2):
        for w in range(3):
            np.testing.assert_array_equal(conv[h, w, :, 0, 0], rank + 10 * h + 100 * w)
    # orthogonal per block column: each block column's units are orthonormal over its inputs
    layer = jbs.nn.BlockSparseLinear(40, 32, layout=layout, block_size=bs, use_bias=False,
                                     kernel_init=nnx.initializers.orthogonal(), rngs=nnx.Rngs(0))
    dense = np.asarray(dense_kernel(layer))
    for c in np.flatnonzero(layout.any(axis=0)):
        block_column = dense[:, c * bs:(c + 1) * bs]
        np.testing.assert_allclose(block_column.T @ block_column, np.eye(bs), atol=1e-5)


def test_partitioning_metadata_reaches_the_parameters(rng):
    """nnx.with_partitioning / nn.with_partitioning around a stock initialiser, and
    kernel_metadata / bias_metadata as nnx.Linear takes them, annotate the parameters; the
    kernel's values are those drawn without the wrapper."""
    layout = awkward_layout(rng, 4, 3)
    spec = ("model", None, None)
    make = lambda init, **kw: jbs.nn.BlockSparseLinear(32, 24, layout=layout, block_size=8, kernel_init=init,
                                                       rngs=nnx.Rngs(0), **kw)
    plain = make(nnx.initializers.lecun_normal())
    # (flax shards an annotated parameter as it is created: it needs a mesh with the axis)
    with jax.set_mesh(jax.make_mesh((1,), ("model",), axis_types=(jax.sharding.AxisType.Auto,))):
        wrapped = make(nnx.with_partitioning(nnx.initializers.lecun_normal(), spec))
        tagged = make(None, kernel_metadata={"out_sharding": spec}, bias_metadata={"out_sharding": ("model",)})
        conv = jbs.nn.BlockSparseConv(32, 24, (2, 3), layout=layout, block_size=8, rngs=nnx.Rngs(0),
                                      kernel_init=nnx.with_partitioning(nnx.initializers.he_normal(), (None,) * 5))
    np.testing.assert_array_equal(wrapped.kernel[...], plain.kernel[...])
    assert wrapped.kernel.get_metadata()["out_sharding"] == spec
    assert tagged.kernel.get_metadata()["out_sharding"] == spec
    assert tagged.bias.get_metadata()["out_sharding"] == ("model",)
    assert conv.kernel.get_metadata()["out_sharding"] == (None,) * 5
    dense = jbs.linen.BlockSparseDense(24, layout=layout, block_size=8,
                                       kernel_init=nn.with_partitioning(nn.initializers.lecun_normal(), spec))
    params = dense.init(jax.random.key(0), jnp.ones((2, 32)))["params"]
    assert isinstance(params["kernel"], nn.Partitioned) and params["kernel"].names == spec
    assert dense.apply({"params": nn.unbox(params)}, jnp.ones((2, 32))).shape == (2, 24)


def test_a_packed_initialiser_and_a_wrong_shaped_one():
    layout = np.eye(2, dtype=bool)
    ones = jbs.initializers.packed(lambda key, shape, dtype=jnp.float32: jnp.ones(shape, dtype))
    layer = jbs.nn.BlockSparseLinear(16, 16, layout=layout, block_size=8, kernel_init=ones, rngs=nnx.Rngs(0))
    np.testing.assert_array_equal(dense_kernel(layer), np.kron(np.eye(2), np.ones((8, 8))))
    with pytest.raises(ValueError, match=r"returned shape \(5,\) for one block column's weights; expected \(8, 8\)"):
        jbs.nn.BlockSparseLinear(16, 16, layout=layout, block_size=8, rngs=nnx.Rngs(0),
                                 kernel_init=lambda key, shape, dtype=jnp.float32: jnp.ones((5,)))


def test_identity_init_and_bad_init_name():
    layout = jbs.layouts.watts_strogatz(4, 2, 0.5, seed=1)
    layer = jbs.nn.BlockSparseLinear(32, 32, layout=layout, block_size=8, kernel_init="identity", rngs=nnx.Rngs(0))
    np.testing.assert_array_equal(dense_kernel(layer), np.eye(32))
    with pytest.raises(ValueError, match="kernel_init must be"):
        jbs.nn.BlockSparseLinear(32, 32, layout=layout, block_size=8, kernel_init="zeros", rngs=nnx.Rngs(0))


def test_weight_norm_and_data_dependent_init(rng):
    layout = awkward_layout(rng, 4, 5)
    layer = jbs.nn.BlockSparseLinear(32, 40, layout=layout, block_size=8, weight_norm=True,
                                     precision="highest", rngs=nnx.Rngs(1))
    norms = np.linalg.norm(f64(dense_kernel(layer)), axis=0)
    live = np.repeat(layout.any(axis=0), 8)
    np.testing.assert_allclose(norms[live], 1.0, rtol=1e-5)
    x = 3.0 * random_array(rng, (256, 32), jnp.float32) + 1.0
    y = np.asarray(layer.data_dependent_init(x))
    np.testing.assert_allclose(y[:, live].mean(axis=0), 0.0, atol=1e-4)
    np.testing.assert_allclose(y[:, live].std(axis=0), 1.0, rtol=1e-3)


def test_layer_argument_errors():
    with pytest.raises(ValueError, match=r"layout must have shape \(2, 4\).*got \(4, 2\)"):
        jbs.nn.BlockSparseLinear(16, 32, layout=np.ones((4, 2)), block_size=8, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="in_features=20 must be a multiple of block_size=8"):
        jbs.nn.BlockSparseLinear(20, 32, layout=np.ones((2, 4)), block_size=8, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="block columns"):
        jbs.nn.SparseLSTMCell(8, 32, layout=np.ones((4, 3)), block_size=8, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="hidden_features=30 must be a multiple"):
        jbs.nn.SparseLSTMCell(8, 30, layout=np.ones((4, 4)), block_size=8, rngs=nnx.Rngs(0))


def test_training_reduces_the_loss(rng):
    model = jbs.nn.BlockSparseLinear(32, 16, layout=awkward_layout(rng, 4, 2, 0.8), block_size=8,
                                     rngs=nnx.Rngs(0))
    x = random_array(rng, (64, 32), jnp.float32)
    target = random_array(rng, (64, 16), jnp.float32)
    optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)

    @nnx.jit
    def step(model, optimizer):
        loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - target) ** 2))(model)
        optimizer.update(model, grads)
        return loss

    losses = [float(step(model, optimizer)) for _ in range(30)]
    assert losses[-1] < 0.8 * losses[0]


def lstm_reference(cell, carry, x):
    """The LSTM step in float64 numpy from the cell's dense weights."""
    c, h = (f64(a) for a in carry)
    w_i = f64(cell.dense_i.kernel[...]) if isinstance(cell.dense_i, nnx.Linear) else f64(dense_kernel(cell.dense_i))
    z = f64(x) @ w_i + h @ f64(dense_kernel(cell.dense_h)) + f64(cell.dense_h.bias[...])
    i, f, g, o = np.split(z, 4, axis=-1)
    sig = lambda v: 1 / (1 + np.exp(-v))
    new_c = sig(f) * c + sig(i) * np.tanh(g)
    return new_c, sig(o) * np.tanh(new_c)


@pytest.mark.parametrize("sparse_input", [False, True])
def test_lstm_cell_matches_dense_step(rng, sparse_input):
    layout = jbs.layouts.barabasi_albert(6, 2, seed=int(rng.integers(99)))
    cell = jbs.nn.SparseLSTMCell(16, 48, layout=layout, block_size=8, precision="highest",
                                 input_layout=awkward_layout(rng, 2, 6) if sparse_input else None,
                                 bias_init=nnx.initializers.normal(0.5), rngs=nnx.Rngs(0))
    assert isinstance(cell.dense_i, jbs.nn.BlockSparseLinear) == sparse_input
    np.testing.assert_array_equal(cell.dense_h.layout, np.tile(layout, (1, 4)))
    carry = tuple(random_array(rng, (3, 48), jnp.float32) for _ in range(2))
    x = random_array(rng, (3, 16), jnp.float32)
    (c, h), out = cell(carry, x)
    ref_c, ref_h = lstm_reference(cell, carry, x)
    assert rel_error(c, ref_c) < 2e-5 and rel_error(h, ref_h) < 2e-5
    np.testing.assert_array_equal(out, h)


def test_mlstm_cell_matches_dense_step(rng):
    layout = jbs.layouts.watts_strogatz(6, 2, 0.3, seed=0)
    cell = jbs.nn.SparseMLSTMCell(16, 48, layout=layout, block_size=8, precision="highest", rngs=nnx.Rngs(0))
    c0, h0 = (random_array(rng, (3, 48), jnp.float32) for _ in range(2))
    x = random_array(rng, (3, 16), jnp.float32)
    (c, h), _ = cell((c0, h0), x)
    m = (f64(x) @ f64(cell.dense_mx.kernel[...])) * (f64(h0) @ f64(dense_kernel(cell.dense_mh)))
    z = f64(x) @ f64(cell.dense_i.kernel[...]) + m @ f64(dense_kernel(cell.dense_h)) + f64(cell.dense_h.bias[...])
    i, f, g, o = np.split(z, 4, axis=-1)
    sig = lambda v: 1 / (1 + np.exp(-v))
    ref_c = sig(f) * f64(c0) + sig(i) * np.tanh(g)
    assert rel_error(c, ref_c) < 2e-5 and rel_error(h, sig(o) * np.tanh(ref_c)) < 2e-5


@pytest.mark.parametrize("cell_type", [jbs.nn.SparseLSTMCell, jbs.nn.SparseMLSTMCell])
def test_cells_run_in_nnx_rnn_with_carry_shapes(rng, cell_type):
    cell = cell_type(12, 64, layout=jbs.layouts.barabasi_albert(8, 2, seed=0), block_size=8,
                     layer_norm=True, rngs=nnx.Rngs(0))
    c, h = cell.initialize_carry((5, 12), nnx.Rngs(1))
    assert c.shape == h.shape == (5, 64)
    rnn = nnx.RNN(cell, return_carry=True, rngs=nnx.Rngs(2))
    (c, h), ys = nnx.jit(lambda rnn, x: rnn(x))(rnn, random_array(rng, (5, 7, 12), jnp.float32))
    assert ys.shape == (5, 7, 64) and c.shape == (5, 64)
    np.testing.assert_array_equal(ys[:, -1], h)


def test_sparse_width_for_params():
    width = jbs.nn.sparse_width_for_params(3072, 0.03, block_size=32)
    assert width % 32 == 0 and 17000 < width < 18500
    assert 0.97 < 0.03 * width**2 / 3072**2 < 1.03
    assert jbs.nn.sparse_width_for_params(1024, 1.0, input_features=256, block_size=8) == 1024
    # With the input projection counted, a cell built at that width (a random layout of the
    # density asked) has a dense cell's parameters within 2% (shapes only: nothing allocated).
    width = jbs.nn.sparse_width_for_params(3072, 0.03, input_features=256)
    count = lambda make: sum(v.size for v in jax.tree.leaves(nnx.state(nnx.eval_shape(make), nnx.Param)))
    layout = jbs.layouts.random(width // 32, width // 32, 0.03, seed=0)
    sparse = count(lambda: jbs.nn.SparseLSTMCell(256, width, layout=layout, block_size=32, rngs=nnx.Rngs(0)))
    dense = count(lambda: nnx.OptimizedLSTMCell(256, 3072, rngs=nnx.Rngs(0)))
    assert 14000 < width < 15000 and 0.98 < sparse / dense < 1.02


def test_split_merge_and_orbax_checkpoint_round_trip(rng, tmp_path):
    ocp = pytest.importorskip("orbax.checkpoint")
    layout = jbs.layouts.barabasi_albert(8, 2, seed=5)
    make = lambda seed: jbs.nn.SparseLSTMCell(16, 64, layout=layout, block_size=8, rngs=nnx.Rngs(seed))
    cell = make(0)
    x = random_array(rng, (3, 16), jnp.float32)
    carry = cell.initialize_carry(x.shape, nnx.Rngs(0))
    expected = cell(carry, x)[1]

    graphdef, state = nnx.split(cell)
    np.testing.assert_array_equal(nnx.merge(graphdef, state)(carry, x)[1], expected)

    # Layouts are static (part of the graphdef, not the state): the checkpoint holds the
    # parameters, and the layout is rebuilt by constructing the model with the same layout.
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(tmp_path / "cell", state)
    checkpointer.wait_until_finished()
    abstract = nnx.eval_shape(lambda: make(1))
    graphdef2, abstract_state = nnx.split(abstract)
    restored = nnx.merge(graphdef2, checkpointer.restore(tmp_path / "cell", abstract_state))
    np.testing.assert_array_equal(restored.dense_h.layout, cell.dense_h.layout)
    np.testing.assert_array_equal(restored(carry, x)[1], expected)


def test_linen_dense_matches_nnx(rng):
    layout = awkward_layout(rng, 4, 6)
    layer = jbs.nn.BlockSparseLinear(32, 48, layout=layout, block_size=8, weight_norm=True, rngs=nnx.Rngs(0))
    linen = jbs.linen.BlockSparseDense(48, layout=layout, block_size=8, weight_norm=True)
    x = random_array(rng, (4, 32), jnp.float32)
    params = {"kernel": layer.kernel[...], "bias": layer.bias[...], "scale": layer.scale[...] * 2}
    layer.scale[...] = params["scale"]
    shapes = jax.tree.map(jnp.shape, linen.init(jax.random.key(0), x)["params"])
    assert shapes == jax.tree.map(jnp.shape, params)
    np.testing.assert_array_equal(linen.apply({"params": params}, x), layer(x))


def test_linen_lstm_matches_nnx(rng):
    layout = jbs.layouts.barabasi_albert(8, 2, seed=1)
    cell = jbs.nn.SparseLSTMCell(16, 64, layout=layout, block_size=8, layer_norm=True, rngs=nnx.Rngs(0))
    linen = jbs.linen.SparseLSTMCell(64, layout=layout, block_size=8, layer_norm=True)
    x = random_array(rng, (3, 16), jnp.float32)
    carry = tuple(random_array(rng, (3, 64), jnp.float32) for _ in range(2))
    state = nnx.state(cell, nnx.Param)
    params = jax.tree.map(lambda v: v, nnx.to_pure_dict(state))
    shapes = jax.tree.map(jnp.shape, linen.init(jax.random.key(0), carry, x)["params"])
    assert shapes == jax.tree.map(jnp.shape, params)
    (c1, h1), _ = linen.apply({"params": params}, carry, x)
    (c2, h2), _ = cell(carry, x)
    np.testing.assert_array_equal(c1, c2)
    np.testing.assert_array_equal(h1, h2)
    lc = linen.initialize_carry(jax.random.key(0), x.shape)
    assert lc[0].shape == (3, 64)
    ys = nn.RNN(linen).apply({"params": {"cell": params}}, random_array(rng, (3, 5, 16), jnp.float32))
    assert ys.shape == (3, 5, 64)


SHARDED_SCRIPT = textwrap.dedent("""
    import numpy as np, jax, jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from flax import nnx
    import jbs, jbs.nn
    assert len(jax.devices()) == 4, jax.devices()
    layout = jbs.layouts.barabasi_albert(8, 2, seed=0)
    model = jbs.nn.BlockSparseLinear(64, 64, layout=layout, block_size=8, precision="highest", rngs=nnx.Rngs(0))
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((32, 64)), jnp.float32)
    t = jnp.asarray(rng.standard_normal((32, 64)), jnp.float32)
    loss = lambda m, x, t: jnp.mean((m(x) - t) ** 2)
    single = nnx.grad(loss)(model, x, t)
    mesh = Mesh(np.array(jax.devices()), ("data",))
    xs = jax.device_put(x, NamedSharding(mesh, P("data")))
    ts = jax.device_put(t, NamedSharding(mesh, P("data")))
    state = nnx.state(model)
    nnx.update(model, jax.device_put(state, NamedSharding(mesh, P())))
    sharded = nnx.jit(nnx.grad(loss))(model, xs, ts)
    for a, b in zip(jax.tree.leaves(single), jax.tree.leaves(sharded)):
        assert b.sharding.is_fully_replicated
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    y = nnx.jit(lambda m, x: m(x))(model, xs)
    assert y.sharding.spec[0] == "data", y.sharding
    print("sharded ok")
""")


def test_data_parallel_on_four_host_devices():
    assert "sharded ok" in run_on_four_host_devices(SHARDED_SCRIPT)


@pytest.mark.parametrize("transpose", [False, True])
def test_conv_layer_matches_dense_and_linen(rng, transpose):
    layout = awkward_layout(rng, 3, 4)
    layer = jbs.nn.BlockSparseConv(24, 32, (2, 3), layout=layout, block_size=8, strides=2,
                                   padding="SAME", transpose=transpose, precision="highest",
                                   weight_norm=True, bias_init=nnx.initializers.normal(1.0), rngs=nnx.Rngs(0))
    assert layer.kernel.shape == (2, 3, layout.sum(), 8, 8)
    x = random_array(rng, (2, 7, 6, 24), jnp.float32)
    kernel = layer.op.to_dense(layer.effective_kernel())
    conv = jax.lax.conv_transpose if transpose else jax.lax.conv_general_dilated
    ref = conv(x, kernel, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"), precision=HIGHEST)
    y = layer(x)
    assert rel_error(y, f64(ref + layer.bias[...])) < 2e-5
    linen = jbs.linen.BlockSparseConv(32, (2, 3), layout=layout, block_size=8, strides=2, transpose=transpose,
                                      precision="highest", weight_norm=True)
    params = nnx.to_pure_dict(nnx.state(layer, nnx.Param))
    assert jax.tree.map(jnp.shape, linen.init(jax.random.key(0), x)["params"]) == jax.tree.map(jnp.shape, params)
    np.testing.assert_array_equal(linen.apply({"params": params}, x), y)


def test_conv_layer_init_and_data_dependent_init(rng):
    layout = jbs.layouts.random(10, 10, 0.25, seed=int(rng.integers(99)))
    layer = jbs.nn.BlockSparseConv(160, 160, (3, 3), layout=layout, block_size=16, use_bias=False,
                                   rngs=nnx.Rngs(0))
    y = np.asarray(layer(random_array(rng, (8, 12, 12, 160), jnp.float32)))[:, 1:-1, 1:-1]
    live = np.repeat(layout.any(axis=0), 16)
    assert 0.8 < y[..., live].var() < 1.2
    wn = jbs.nn.BlockSparseConv(160, 160, (2, 2), layout=layout, block_size=16, weight_norm=True,
                                precision="highest", rngs=nnx.Rngs(0))
    out = np.asarray(wn.data_dependent_init(random_array(rng, (8, 6, 6, 160), jnp.float32) * 2 + 1))
    np.testing.assert_allclose(out[..., live].reshape(-1, live.sum()).std(axis=0), 1.0, rtol=1e-3)
    delta = jbs.nn.BlockSparseConv(32, 32, (3, 3), layout=np.eye(2), block_size=16, kernel_init="identity",
                                   use_bias=False, precision="highest", rngs=nnx.Rngs(0))
    x = random_array(rng, (1, 5, 5, 32), jnp.float32)
    np.testing.assert_allclose(delta(x), x, rtol=1e-6)


@pytest.mark.parametrize("kernel_size,padding,dilation", [
    ((2, 2), "SAME", 1), ((2, 3), "SAME", 1), ((4, 4), "SAME", 1), ((5, 2), "SAME", 1), ((3, 3), "SAME", 2),
    ((2, 3), "SAME_LOWER", 1), ((4, 2), "SAME_LOWER", 1), ((5, 3), "SAME_LOWER", 2), ((2, 3), "CIRCULAR", 1),
    ((3, 3), "REFLECT", 2),
    ((2, 3), ((1, 0), (1, 1)), 1), ((2, 2), ((1, 0), (1, 0)), 1), ((1, 3), ((0, 0), (1, 1)), 1)])
def test_identity_conv_init_passes_the_image_through_under_its_padding(rng, kernel_size, padding, dilation):
    """The delta sits on the tap that reads each pixel itself: an even kernel with "SAME" pads
    less before than after, so its centre tap would shift the image by one pixel."""
    x = random_array(rng, (2, 7, 6, 16), jnp.float32)
    layer = jbs.nn.BlockSparseConv(16, 16, kernel_size, layout=np.eye(2), block_size=8, padding=padding,
                                   dilation=dilation, kernel_init="identity", use_bias=False,
                                   precision="highest", rngs=nnx.Rngs(0))
    np.testing.assert_allclose(layer(x), x, rtol=1e-6)
    linen = jbs.linen.BlockSparseConv(16, kernel_size, layout=np.eye(2), block_size=8, padding=padding,
                                      dilation=dilation, kernel_init="identity", use_bias=False, precision="highest")
    np.testing.assert_allclose(linen.apply(linen.init(jax.random.key(0), x), x), x, rtol=1e-6)


def test_weight_norm_is_safe_for_all_zero_units_and_constant_outputs(rng):
    layer = jbs.nn.BlockSparseLinear(16, 32, layout=np.ones((2, 4)), block_size=8, kernel_init="identity",
                                     weight_norm=True, rngs=nnx.Rngs(0))
    x = random_array(rng, (4, 16), jnp.float32)
    grads = nnx.grad(lambda m: m(x).sum())(layer)
    assert all(np.isfinite(np.asarray(g)).all() for g in jax.tree.leaves(grads))
    dead = jbs.nn.BlockSparseLinear(16, 16, layout=np.array([[1, 0], [1, 0]]), block_size=8, weight_norm=True,
                                    rngs=nnx.Rngs(0))
    dead.data_dependent_init(x)
    np.testing.assert_array_equal(dead.scale[...][8:], 1.0)  # the empty block column keeps scale 1


def test_identity_recurrent_init_reaches_every_gate():
    """recurrent_kernel_init="identity" starts each gate's recurrent weights (i, f, g, o) at the
    identity, as the seed's LSTM did, in the NNX and the Linen cell."""
    layout = jbs.layouts.watts_strogatz(4, 2, 0.0, seed=0)
    every_gate = np.tile(np.eye(32), (1, 4))
    cell = jbs.nn.SparseLSTMCell(8, 32, layout=layout, block_size=8, recurrent_kernel_init="identity",
                                 rngs=nnx.Rngs(0))
    np.testing.assert_array_equal(cell.dense_h.op.to_dense(cell.dense_h.kernel[...]), every_gate)
    linen_cell = jbs.linen.SparseLSTMCell(32, layout=layout, block_size=8, recurrent_kernel_init="identity")
    carry = linen_cell.initialize_carry(jax.random.key(0), (2, 8))
    kernel = linen_cell.init(jax.random.key(0), carry, jnp.ones((2, 8)))["params"]["dense_h"]["kernel"]
    fused = jbs.BlockSparseMatMul(jbs.nn.gate_layout(layout, 4, 4), 8)
    np.testing.assert_array_equal(fused.to_dense(kernel), every_gate)


def test_conv_layers_take_a_pair_kernel_size_name_the_inputs_channels_and_pad_edges_only_forward():
    """An int kernel_size is a 1-D kernel in flax: the 2-D layers ask for a pair rather than read
    a (N, L, C) batch of sequences as one image; edge padding is for forward convolutions."""
    with pytest.raises(TypeError, match=r"kernel_size must be a pair \(kh, kw\).*got 3"):
        jbs.nn.BlockSparseConv(16, 16, 3, layout=np.eye(2), block_size=8, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match="kernel_size must be a pair"):
        jbs.linen.BlockSparseConv(16, 3, layout=np.eye(2), block_size=8).init(jax.random.key(0), jnp.ones((1, 4, 4, 16)))
    linen = jbs.linen.BlockSparseConv(24, (3, 3), layout=np.ones((2, 3)), block_size=8)
    with pytest.raises(ValueError, match=r"\(1, 3\) = \(the inputs' features // block_size.*inputs' features=8"):
        linen.init(jax.random.key(0), jnp.ones((1, 5, 5, 8)))
    with pytest.raises(ValueError, match="padding='CIRCULAR' pads a convolution's inputs"):
        jbs.nn.BlockSparseConv(16, 16, (3, 3), layout=np.eye(2), block_size=8, padding="CIRCULAR", transpose=True,
                               rngs=nnx.Rngs(0))


def test_cell_init_strings_and_linen_hashing():
    layout = np.ones((2, 2))
    with pytest.raises(ValueError, match="kernel_init of a dense input projection"):
        jbs.nn.SparseLSTMCell(8, 16, layout=layout, block_size=8, kernel_init="identity", rngs=nnx.Rngs(0))
    jbs.nn.SparseLSTMCell(8, 16, layout=layout, block_size=8, kernel_init="fan_in", rngs=nnx.Rngs(0))
    dense = jbs.linen.BlockSparseDense(16, layout=layout, block_size=8)
    assert dense == jbs.linen.BlockSparseDense(16, layout=layout.astype(bool), block_size=8)
    assert hash(dense) == hash(jbs.linen.BlockSparseDense(16, layout=layout, block_size=8))
    params = dense.init(jax.random.key(0), jnp.ones((2, 16)))
    apply = jax.jit(lambda module, p, x: module.apply(p, x), static_argnums=0)
    assert apply(dense, params, jnp.ones((2, 16))).shape == (2, 16)


@pytest.mark.parametrize("padding", [1, (1, 2), ((1, 0), (2, 1)), (1, (0, 2)), "SAME", "SAME_LOWER", "CIRCULAR",
                                     "REFLECT"])
def test_conv_layer_takes_nnx_convs_inputs_and_paddings(rng, padding):
    """Like nnx.Conv: any leading batch axes (none: one image) and flax's padding forms."""
    layout = awkward_layout(rng, 2, 3)
    layer = jbs.nn.BlockSparseConv(16, 24, (3, 3), layout=layout, block_size=8, padding=padding,
                                   precision="highest", rngs=nnx.Rngs(0))
    dense = nnx.Conv(16, 24, (3, 3), padding=padding, precision=HIGHEST, rngs=nnx.Rngs(0))
    dense.kernel[...] = layer.op.to_dense(layer.kernel[...])
    dense.bias[...] = random_array(rng, (24,), jnp.float32)
    layer.bias[...] = dense.bias[...]
    x = random_array(rng, (2, 3, 7, 6, 16), jnp.float32)
    for inputs in (x, x[1, 2], x[:, :0]):
        np.testing.assert_allclose(layer(inputs), dense(inputs), rtol=1e-5, atol=1e-5)
    linen = jbs.linen.BlockSparseConv(24, (3, 3), layout=layout, block_size=8, padding=padding, precision="highest")
    params = {"params": {"kernel": layer.kernel[...], "bias": layer.bias[...]}}
    np.testing.assert_allclose(linen.apply(params, x[0, 1]), dense(x[0, 1]), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"inputs must be images \(\.\.\., H, W, C\); got shape \(6, 16\)"):
        layer(x[0, 0, 0])


def test_layers_over_a_layout_without_blocks(rng):
    """Every layer accepts a layout that drew no block: its kernel is (0, bs, bs) and its
    output the bias (or the LSTM run on x alone)."""
    empty = np.zeros((2, 3), int)
    x = random_array(rng, (4, 16), jnp.float32)
    for init in (None, nnx.initializers.lecun_normal()):
        layer = jbs.nn.BlockSparseLinear(16, 24, layout=empty, block_size=8, kernel_init=init, weight_norm=True,
                                         rngs=nnx.Rngs(0))
        assert layer.kernel[...].shape == (0, 8, 8)
        np.testing.assert_array_equal(layer(x), np.broadcast_to(layer.bias[...], (4, 24)))
    conv = jbs.nn.BlockSparseConv(16, 24, (2, 3), layout=empty, block_size=8, rngs=nnx.Rngs(0))
    assert conv(random_array(rng, (2, 5, 5, 16), jnp.float32)).shape == (2, 5, 5, 24)
    cell = jbs.nn.SparseLSTMCell(8, 16, layout=np.zeros((2, 2)), block_size=8, rngs=nnx.Rngs(0))
    assert nnx.RNN(cell, rngs=nnx.Rngs(0))(random_array(rng, (2, 3, 8), jnp.float32)).shape == (2, 3, 16)


def test_flax_layers_are_reachable_from_import_jbs_alone():
    """``import jbs`` then ``jbs.nn`` / ``jbs.linen`` (imported on first use: flax is optional)."""
    import os
    import subprocess
    import sys
    code = "import jbs; print(jbs.nn.BlockSparseLinear.__name__, jbs.linen.BlockSparseDense.__name__)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 0 and done.stdout.split() == ["BlockSparseLinear", "BlockSparseDense"], done.stderr
