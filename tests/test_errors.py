"""Bad input raises a ValueError/TypeError naming what was received and what was expected."""

import numpy as np
import pytest
import jax.numpy as jnp

import jbs

LAYOUT = np.array([[1, 0, 1], [0, 1, 0]], bool)


@pytest.fixture
def bsmm():
    return jbs.BlockSparseMatMul(LAYOUT, 8)


def test_wrong_feature_size(bsmm):
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., 16\).*got \(4, 17\)"):
        bsmm(jnp.ones((4, 17)), jnp.ones(bsmm.w_shape))


def test_scalar_input(bsmm):
    with pytest.raises(ValueError, match=r"x must have shape"):
        bsmm(jnp.float32(1.0), jnp.ones(bsmm.w_shape))


def test_wrong_w_shape(bsmm):
    with pytest.raises(ValueError, match=r"w must have shape w_shape=\(3, 8, 8\); got \(3, 8, 16\)"):
        bsmm(jnp.ones((4, 16)), jnp.ones((3, 8, 16)))


@pytest.mark.parametrize("dtype", [jnp.int32, jnp.int8, jnp.bool_, jnp.complex64])
def test_non_float_x(bsmm, dtype):
    with pytest.raises(TypeError, match=r"x must have dtype .*got"):
        bsmm(jnp.ones((4, 16), dtype), jnp.ones(bsmm.w_shape))


def test_integer_w(bsmm):
    with pytest.raises(TypeError, match=r"w must be a floating-point array, got dtype int32"):
        bsmm(jnp.ones((4, 16)), jnp.ones(bsmm.w_shape, jnp.int32))


@pytest.mark.parametrize("layout", [np.ones(4, bool), np.ones((2, 2, 2), bool), np.bool_(True)])
def test_layout_not_2d(layout):
    with pytest.raises(ValueError, match=r"layout must be a 2-D array.*got shape"):
        jbs.BlockSparseMatMul(layout, 8)


def test_layout_values_not_0_1():
    with pytest.raises(ValueError, match=r"layout must hold only 0 and 1, got values such as \[2\]"):
        jbs.BlockSparseMatMul(np.array([[1, 2]]), 8)


def test_layout_of_strings():
    with pytest.raises(TypeError, match=r"layout must hold 0/1 or bool values"):
        jbs.BlockSparseMatMul(np.array([["a", "b"]]), 8)


def test_layout_without_blocks_or_without_rows():
    with pytest.raises(ValueError, match=r"layout must have at least one block row and column, got shape \(0, 3\)"):
        jbs.BlockSparseMatMul(np.zeros((0, 3), bool), 8)


@pytest.mark.parametrize("bs", [0, 4, 12, 128, -8])
def test_block_size_out_of_range(bs):
    with pytest.raises(ValueError, match=rf"block_size must be one of \(8, 16, 32, 64\), got {bs}"):
        jbs.BlockSparseMatMul(LAYOUT, bs)


@pytest.mark.parametrize("bs", [32.0, "32", True, None])
def test_block_size_wrong_type(bs):
    with pytest.raises(TypeError, match=r"block_size must be an int"):
        jbs.BlockSparseMatMul(LAYOUT, bs)


def test_bad_precision():
    with pytest.raises(ValueError, match=r"precision must be"):
        jbs.BlockSparseMatMul(LAYOUT, 8, precision="ultra")


def test_to_dense_and_from_dense_shapes(bsmm):
    with pytest.raises(ValueError, match=r"w must have shape \(\.\.\., 3, 8, 8\); got \(2, 8, 8\)"):
        bsmm.to_dense(jnp.ones((2, 8, 8)))
    with pytest.raises(ValueError, match=r"dense must have shape \(\.\.\., 16, 24\); got \(16, 16\)"):
        bsmm.from_dense(jnp.ones((16, 16)))


def test_layout_generators_validate():
    with pytest.raises(ValueError, match="density must be in"):
        jbs.layouts.random(4, 4, 0.0, seed=0)
    with pytest.raises(ValueError, match="m < n"):
        jbs.layouts.barabasi_albert(3, 3, seed=0)
    with pytest.raises(ValueError, match="k < n"):
        jbs.layouts.watts_strogatz(4, 4, 0.1, seed=0)
    with pytest.raises(ValueError, match="p must be in"):
        jbs.layouts.watts_strogatz(8, 2, 1.5, seed=0)
    with pytest.raises(ValueError, match="rows must be a positive int"):
        jbs.layouts.random(0, 4, 0.5, seed=0)
    with pytest.raises(TypeError, match="m must be a positive int, got 2.0"):
        jbs.layouts.barabasi_albert(10, 2.0, seed=0)
    with pytest.raises(ValueError, match=r"multiples of block_size=8; got shape \(12, 16\)"):
        jbs.layouts.magnitude_prune(np.ones((12, 16)), 8, 0.5)


def test_initializer_shape_checked():
    init = jbs.initializers.lecun_normal(LAYOUT, 8)
    with pytest.raises(ValueError, match=r"packed weight shape \(3, 8, 8\); got \(3, 8\)"):
        init(None, (3, 8))
    with pytest.raises(ValueError, match="diagonal blocks"):
        jbs.initializers.identity(np.array([[0, 1], [1, 1]]), 8)


def test_layout_inside_a_trace_is_refused():
    import jax
    with pytest.raises(TypeError, match="layout must be concrete host data"):
        jax.jit(lambda layout: jbs.BlockSparseMatMul(layout, 8))(jnp.ones((2, 2)))


@pytest.mark.parametrize("precision", [[1, 2, 3], {}, 3, np.array(1)])
def test_precision_of_a_wrong_type(precision):
    with pytest.raises(ValueError, match="precision must be"):
        jbs.BlockSparseMatMul(LAYOUT, 8, precision=precision)


def test_layout_generator_seed_and_k():
    with pytest.raises(TypeError, match="seed must be an int"):
        jbs.layouts.random(4, 4, 0.5, seed=None)
    with pytest.raises(ValueError, match="even k"):
        jbs.layouts.watts_strogatz(10, 3, 0.1, seed=0)
    with pytest.raises(ValueError, match="scale must be a finite positive number"):
        jbs.initializers.variance_scaling(LAYOUT, 8, scale=-1.0)


def test_vmap_over_zero_stacked_weights():
    import jax
    bsmm = jbs.BlockSparseMatMul(LAYOUT, 8)
    y = jax.vmap(bsmm, in_axes=(None, 0))(jnp.ones((3, 16)), jnp.ones((0,) + bsmm.w_shape))
    assert y.shape == (0, 3, 24)


def test_layout_generators_name_the_bad_number():
    for call, error, message in (
            (lambda: jbs.layouts.random(3, 3, 0.5, seed=-1), ValueError, "seed must be a non-negative int, got -1"),
            (lambda: jbs.layouts.barabasi_albert(6, 2, seed=-1), ValueError, "seed must be a non-negative"),
            (lambda: jbs.layouts.random(3, 3, None, seed=0), TypeError, "density must be a number, got None"),
            (lambda: jbs.layouts.random(3, 3, "0.5", seed=0), TypeError, "density must be a number, got '0.5'"),
            (lambda: jbs.layouts.watts_strogatz(6, 2, None, seed=0), TypeError, "p must be a number, got None")):
        with pytest.raises(error, match=message):
            call()


def test_magnitude_prune_needs_finite_real_weights():
    nan = np.ones((16, 16))
    nan[3, 9] = np.nan
    with pytest.raises(ValueError, match="finite.*1 blocks hold a NaN"):
        jbs.layouts.magnitude_prune(nan, 8, 0.5)
    for bad in (np.ones((16, 16), complex), np.full((16, 16), "a")):
        with pytest.raises(TypeError, match=f"weights must be a real .* got dtype {bad.dtype}"):
            jbs.layouts.magnitude_prune(bad, 8, 0.5)
    assert np.isnan(nan).sum() == 1 and nan[0, 0] == 1  # the caller's array is left as it was


def test_magnitude_prune_takes_bfloat16_and_huge_weights():
    """JAX's float types (bfloat16, numpy does not know it as a float) and weights whose squares
    would overflow rank as their float64 values do."""
    weights = np.random.default_rng(0).standard_normal((32, 48))
    expected = jbs.layouts.magnitude_prune(weights, 8, 0.25)
    assert expected.sum() == 6
    np.testing.assert_array_equal(jbs.layouts.magnitude_prune(jnp.asarray(weights, jnp.bfloat16), 8, 0.25), expected)
    np.testing.assert_array_equal(jbs.layouts.magnitude_prune(weights * 1e200, 8, 0.25), expected)


def test_sparse_cells_and_widths_name_the_bad_argument():
    jax = pytest.importorskip("jax")
    nnx = pytest.importorskip("flax.nnx")
    import jbs.linen
    import jbs.nn
    layout = np.ones((4, 4), bool)
    for hidden, error, message in ((0, ValueError, "hidden_features must be at least 1, got 0"),
                                   (32.0, TypeError, "hidden_features must be an int, got 32.0"),
                                   (36, ValueError, "hidden_features=36 must be a multiple of block_size=8")):
        with pytest.raises(error, match=message):
            jbs.nn.SparseLSTMCell(8, hidden, layout=layout, block_size=8, rngs=nnx.Rngs(0))
    cell = jbs.nn.SparseLSTMCell(8, 32, layout=layout, block_size=8, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"carry's h must have hidden_features=32 .* got shape \(2, 16\)"):
        cell((jnp.zeros((2, 16)), jnp.zeros((2, 16))), jnp.zeros((2, 8)))
    linen = jbs.linen.SparseLSTMCell(30, layout=layout, block_size=8)
    with pytest.raises(ValueError, match="features=30 must be a multiple of block_size=8"):
        linen.init(jax.random.key(0), (jnp.zeros((2, 30)), jnp.zeros((2, 30))), jnp.zeros((2, 8)))
    for kwargs, error, message in (({"dense_width": -3072}, ValueError, "dense_width must be at least 1"),
                                   ({"block_size": 7}, ValueError, "block_size must be one of"),
                                   ({"input_features": -1}, ValueError, "input_features must be at least 0"),
                                   ({"density": None}, TypeError, "density must be a number")):
        with pytest.raises(error, match=message):
            jbs.nn.sparse_width_for_params(**{"dense_width": 3072, "density": 0.03, **kwargs})


def test_layers_name_a_float64_computation():
    """float64 parameters (x64 on) promote the layer's computation to float64, which the ops do
    not take: the error names the promotion and the way out, and dtype=float32 works."""
    jax = pytest.importorskip("jax")
    nnx = pytest.importorskip("flax.nnx")
    import jbs.linen
    import jbs.nn
    with jax.enable_x64(True):
        x = jnp.ones((2, 16), jnp.float32)
        layer = jbs.nn.BlockSparseLinear(16, 16, layout=np.eye(2), block_size=8, param_dtype=jnp.float64,
                                         rngs=nnx.Rngs(0))
        with pytest.raises(TypeError, match=r"computes in float64 .*param_dtype=float64.*pass dtype="):
            layer(x)
        layer.dtype = jnp.float32
        assert layer(x).dtype == jnp.float32
        dense = jbs.linen.BlockSparseDense(16, layout=np.eye(2), block_size=8, param_dtype=jnp.float64)
        with pytest.raises(TypeError, match=r"computes in float64"):
            dense.init(jax.random.key(0), x)


def test_bad_inputs_found_by_the_input_audit_are_named():
    """Each of these once gave silent garbage (all-zero or NaN weights, all-True layouts,
    pixels from NaN outputs) or an error that did not name the argument."""
    import jax
    from flax import nnx
    from jbs.nn.logistic_mixture import discretized_mix_logistic_loss, sample_discretized_mix_logistic

    layout = np.ones((2, 3), bool)
    with pytest.raises(ValueError, match=r"layout_fn\(\d+, \d+, 0\) must hold only 0 and 1"):
        jbs.nn.PixelCNNPP(16, resnets=1, mixtures=1, block_size=8, rngs=nnx.Rngs(0),
                          layout_fn=lambda rows, cols, seed: np.full((rows, cols), 0.5))
    with pytest.raises(TypeError, match="block_size"):
        jbs.nn.PixelCNNPP(16, resnets=1, mixtures=1, block_size="8", rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="density"):
        jbs.nn.PixelCNNPP(16, resnets=1, mixtures=1, block_size=8, density=None, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match="param_dtype must be a floating dtype; got int32"):
        jbs.nn.BlockSparseLinear(16, 24, layout=layout, block_size=8, param_dtype=jnp.int32, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match="param_dtype"):
        jbs.linen.BlockSparseDense(24, layout=layout, block_size=8, param_dtype=jnp.int32).init(
            jax.random.key(0), jnp.ones((2, 16)))
    with pytest.raises(TypeError, match="dtype must be a floating dtype"):
        jbs.initializers.variance_scaling(layout, 8)(jax.random.key(0), (6, 8, 8), jnp.int32)
    with pytest.raises(ValueError, match="scale must be a finite positive number"):
        jbs.initializers.variance_scaling(layout, 8, float("inf"))
    with pytest.raises(TypeError, match="scale must be a real number"):
        jbs.initializers.variance_scaling(layout, 8, "1")
    with pytest.raises(ValueError, match="scale must be a finite number"):
        jbs.initializers.identity(np.eye(2), 8, scale=float("nan"))
    with pytest.raises(ValueError, match="layout must be a 2-D array"):
        jbs.BlockSparseMatMul([[1, 0], [1]], 8)
    with pytest.raises(ValueError, match="gates"):
        jbs.nn.gate_layout(layout, 2, 0)
    with pytest.raises(TypeError, match="hidden_blocks"):
        jbs.nn.gate_layout(layout, "2", 4)
    cell = jbs.nn.SparseLSTMCell(16, 16, layout=np.ones((2, 2), bool), block_size=8, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="c and h must have one shape"):
        cell((jnp.zeros((3, 8)), jnp.zeros((3, 16))), jnp.ones((3, 16)))
    outputs = jax.random.normal(jax.random.key(1), (1, 2, 2, 10))
    images = jnp.zeros((1, 2, 2, 3))
    assert np.isfinite(float(discretized_mix_logistic_loss(images.tolist(), outputs)))  # a list is an array
    with pytest.raises(ValueError, match="at least one pixel"):
        discretized_mix_logistic_loss(jnp.zeros((0, 2, 2, 3)), jnp.zeros((0, 2, 2, 10)))
    with pytest.raises(TypeError, match="x must be real"):
        discretized_mix_logistic_loss(images.astype(jnp.complex64), outputs)
    with pytest.raises(ValueError, match="outputs must be"):
        sample_discretized_mix_logistic(jax.random.key(0), jnp.float32(0))
    # NaN outputs (a diverged model) give NaN pixels, not plausible ones.
    drawn = sample_discretized_mix_logistic(jax.random.key(0), outputs.at[0, 0, 0].set(jnp.nan))
    assert np.isnan(np.asarray(drawn[0, 0, 0])).all() and np.isfinite(np.asarray(drawn[0, 1])).all()


def test_packed_leaves_the_initialiser_passed_in_as_it_was():
    from flax import nnx
    init = nnx.initializers.lecun_normal()
    marked = jbs.initializers.packed(init)
    assert marked.takes_packed_shape and not hasattr(init, "takes_packed_shape")
    with pytest.raises(TypeError, match="init must be a callable"):
        jbs.initializers.packed(3)
