"""jit, grad, jvp, vmap (any axis, x / w / both, nested), grad of grad and checkpoint.

Each transform of the block-sparse op is compared with the same transform of its dense twin,
``x @ to_dense(w)`` at float32 HIGHEST precision, on fresh random data."""

import numpy as np
import pytest
import jax
import jax.numpy as jnp

import jbs
from jbs._src.primitives import bsmm_dw_p, bsmm_dx_p, bsmm_fwd_p
from helpers import awkward_layout, dense_f64, f64, random_array, rel_error

TOL = 2e-5


def make(rng, rows=4, cols=3, bs=8):
    bsmm = jbs.BlockSparseMatMul(awkward_layout(rng, rows, cols), bs, precision="highest")
    dense = lambda x, w: jnp.matmul(x, bsmm.to_dense(w), precision=jax.lax.Precision.HIGHEST)
    return bsmm, dense


def close(a, b, tol=TOL):
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        assert rel_error(u, f64(v)) < tol


def loss(op):
    return lambda x, w, g: jnp.sum(jnp.sin(op(x, w)) * g)


def test_grad_both_arguments_against_float64(rng):
    bsmm, _ = make(rng)
    x = random_array(rng, (6, 32), jnp.float32)
    w = random_array(rng, bsmm.w_shape, jnp.float32)
    g = random_array(rng, (6, 24), jnp.float32)
    dx, dw = jax.jit(jax.grad(lambda x, w: jnp.sum(bsmm(x, w) * g), argnums=(0, 1)))(x, w)
    W = dense_f64(bsmm, w)
    assert rel_error(dx, f64(g) @ W.T) < TOL
    assert rel_error(dw, bsmm.from_dense(f64(x).T @ f64(g))) < TOL


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_grad_low_precision_dtypes(rng, dtype):
    bsmm, _ = make(rng)
    x = random_array(rng, (6, 32), dtype)
    w = random_array(rng, bsmm.w_shape, dtype)
    g = random_array(rng, (6, 24), dtype)
    dx, dw = jax.grad(lambda x, w: jnp.sum(bsmm(x, w) * g).astype(jnp.float32), argnums=(0, 1))(x, w)
    assert dx.dtype == dtype and dw.dtype == dtype
    W = dense_f64(bsmm, w)
    assert rel_error(dx, f64(g) @ W.T) < 1.5e-2
    assert rel_error(dw, np.asarray(bsmm.from_dense(f64(x).T @ f64(g)))) < 1.5e-2


def test_jvp(rng):
    bsmm, dense = make(rng)
    x, tx = (random_array(rng, (5, 32), jnp.float32) for _ in range(2))
    w, tw = (random_array(rng, bsmm.w_shape, jnp.float32) for _ in range(2))
    close(jax.jit(lambda *a: jax.jvp(bsmm, a[:2], a[2:]))(x, w, tx, tw),
          jax.jvp(dense, (x, w), (tx, tw)))
    close(jax.jvp(lambda x: bsmm(x, w), (x,), (tx,)), jax.jvp(lambda x: dense(x, w), (x,), (tx,)))


def test_grad_of_grad(rng):
    bsmm, dense = make(rng)
    x = random_array(rng, (5, 32), jnp.float32)
    w = random_array(rng, bsmm.w_shape, jnp.float32)
    g = random_array(rng, (5, 24), jnp.float32)

    def second(op):
        inner = jax.grad(loss(op), argnums=(0, 1))
        return jax.grad(lambda x, w: sum(jnp.sum(jnp.cos(t)) for t in inner(x, w, g)), argnums=(0, 1))

    close(jax.jit(second(bsmm))(x, w), second(dense)(x, w))
    # Third order goes through every primitive's transpose again.
    hvp = lambda op: jax.jvp(lambda w: jax.grad(loss(op), argnums=1)(x, w, g), (w,), (w,))[1]
    close(hvp(bsmm), hvp(dense))


def test_checkpoint(rng):
    bsmm, dense = make(rng)
    x = random_array(rng, (5, 32), jnp.float32)
    w = random_array(rng, bsmm.w_shape, jnp.float32)
    g = random_array(rng, (5, 24), jnp.float32)
    grad = lambda op: jax.jit(jax.grad(jax.checkpoint(loss(op)), argnums=(0, 1)))(x, w, g)
    close(grad(bsmm), grad(dense))


def test_checkpoint_policy_by_name_saves_the_products(rng):
    """The ops' outputs are named for jax.checkpoint policies: saving "jbs.matmul" / "jbs.conv"
    keeps each forward product for the backward pass, which nothing_saveable recomputes."""
    bsmm = jbs.BlockSparseMatMul(awkward_layout(rng, 4, 4), 8)
    conv = jbs.BlockSparseConv(awkward_layout(rng, 4, 4), 8, (3, 3))
    cases = [(bsmm, (5, 32)), (conv, (2, 5, 6, 32))]
    for op, shape in cases:
        x = random_array(rng, shape, jnp.float32)
        w = random_array(rng, op.w_shape, jnp.float32)
        two_layers = lambda x, w: jnp.sum(jnp.tanh(op(jnp.tanh(op(x, w)), w)))
        count = lambda policy: str(jax.make_jaxpr(jax.grad(jax.checkpoint(two_layers, policy=policy), (0, 1)))(
            x, w)).count("jbs_bsmm_fwd")
        assert count(jax.checkpoint_policies.nothing_saveable) == 4  # each product computed twice
        assert count(jax.checkpoint_policies.save_only_these_names(op.checkpoint_name)) == 2


def _matmul_and_conv(rng):
    """A matmul and a conv (precision highest), each with its dense twin and an input shape."""
    bsmm, dense = make(rng)
    conv = jbs.BlockSparseConv(awkward_layout(rng, 3, 4), 8, (2, 3), padding=((1, 0), (1, 1)),
                               precision="highest")
    dense_conv = lambda x, w: jax.lax.conv_general_dilated(
        x, conv.to_dense(w), (1, 1), conv.padding, dimension_numbers=("NHWC", "HWIO", "NHWC"),
        precision=jax.lax.Precision.HIGHEST)
    return [(bsmm, dense, (5, 32)), (conv, dense_conv, (2, 5, 6, 24))]


def test_transpose_where_the_output_is_a_tangent(rng):
    """The op's output named for remat policies (names.py) still transposes: linear_transpose,
    and a custom_jvp rule built from the op, which reverse mode transposes."""
    for op, dense, shape in _matmul_and_conv(rng):
        x = random_array(rng, shape, jnp.float32)
        w = random_array(rng, op.w_shape, jnp.float32)
        ct = random_array(rng, jax.eval_shape(op, x, w).shape, jnp.float32)
        transposed = lambda f: jax.linear_transpose(lambda v: f(v, w), x)(ct)
        close(transposed(op), transposed(dense))

        @jax.custom_jvp
        def product(x, w):
            return op(x, w)

        product.defjvp(lambda primals, tangents: (
            op(*primals), op(tangents[0], primals[1]) + op(primals[0], tangents[1])))
        grads = lambda f: jax.grad(lambda x, w: jnp.sum(jnp.sin(f(x, w))), argnums=(0, 1))(x, w)
        close(grads(product), grads(dense))


def test_vmap_of_cond_with_a_batched_predicate(rng):
    """lax.cond under vmap with a batched predicate broadcasts every operand, the layout's
    tables too; the op takes them as the one table they are."""
    for op, dense, shape in _matmul_and_conv(rng):
        x = random_array(rng, (2,) + shape, jnp.float32)
        w = random_array(rng, op.w_shape, jnp.float32)
        pick = jnp.array([True, False])

        def branchy(f):
            one = lambda p, x, w: jnp.sum(jax.lax.cond(p, lambda x: f(x, w), lambda x: -2 * f(x, w), x) ** 2)
            return jax.jit(jax.vmap(jax.value_and_grad(one, argnums=(1, 2)), in_axes=(0, 0, None)))(pick, x, w)
        close(branchy(op), branchy(dense))


def test_eager_calls_keep_the_tables_on_the_device(rng):
    """An eager call on device arrays copies nothing from the host (the tables' device copies
    are kept), so it runs under jax.transfer_guard("disallow")."""
    for op, dense, shape in _matmul_and_conv(rng):
        x = jax.device_put(random_array(rng, shape, jnp.float32))
        w = jax.device_put(random_array(rng, op.w_shape, jnp.float32))
        op(x, w)  # the first call puts the tables on the device, explicitly
        with jax.transfer_guard("disallow"):
            y = op(x, w)
        close(y, dense(x, w))
        # Operands left uncommitted give an uncommitted result, as without the kept copies;
        # operands committed to a device, a result on it.
        assert not y.committed
        device = jax.devices()[0]
        assert op(jax.device_put(x, device), w).committed


@pytest.mark.parametrize("x_axis,w_axis", [(0, None), (1, None), (2, None), (None, 0), (None, 1),
                                           (None, 3), (0, 0), (1, 2), (2, 0)])
def test_vmap_any_axis(rng, x_axis, w_axis):
    bsmm, dense = make(rng)
    batch = 3
    x_shape = [4, 2, 32]
    if x_axis is not None:
        x_shape.insert(x_axis, batch)
    w_shape = list(bsmm.w_shape)
    if w_axis is not None:
        w_shape.insert(w_axis, batch)
    x = random_array(rng, tuple(x_shape), jnp.float32)
    w = random_array(rng, tuple(w_shape), jnp.float32)
    close(jax.jit(jax.vmap(bsmm, in_axes=(x_axis, w_axis)))(x, w),
          jax.vmap(dense, in_axes=(x_axis, w_axis))(x, w))
    g = random_array(rng, jax.vmap(dense, in_axes=(x_axis, w_axis))(x, w).shape, jnp.float32)
    per_example = lambda op: jax.vmap(jax.grad(lambda x, w, g: jnp.sum(op(x, w) * g), argnums=(0, 1)),
                                      in_axes=(x_axis, w_axis, 0))(x, w, g)
    close(per_example(bsmm), per_example(dense))


def test_nested_vmap_and_vmap_of_jvp(rng):
    bsmm, dense = make(rng)
    x = random_array(rng, (2, 3, 5, 32), jnp.float32)
    w = random_array(rng, (3, 2) + bsmm.w_shape, jnp.float32)
    nest = lambda op: jax.vmap(jax.vmap(op, in_axes=(0, 0)), in_axes=(1, 0))
    close(nest(bsmm)(x, w), nest(dense)(x, w))
    tangent = lambda op: jax.vmap(lambda x, w: jax.jvp(op, (x, w), (x, w))[1], in_axes=(None, 0))
    close(tangent(bsmm)(x[0, 0], w[0]), tangent(dense)(x[0, 0], w[0]))


def test_vmap_over_weights_is_one_kernel_call(rng):
    """Stacked weights with one layout run as one primitive with a group axis, not a loop."""
    bsmm, _ = make(rng)
    x = random_array(rng, (5, 32), jnp.float32)
    w = random_array(rng, (7,) + bsmm.w_shape, jnp.float32)
    step = jax.vmap(jax.grad(lambda w: jnp.sum(bsmm(x, w) ** 2)))
    jaxpr = jax.make_jaxpr(step)(w).jaxpr
    prims = [eqn.primitive for eqn in jaxpr.eqns]
    assert prims.count(bsmm_fwd_p) == 1 and prims.count(bsmm_dw_p) == 1
    assert bsmm_dx_p not in prims
    fwd = next(e for e in jaxpr.eqns if e.primitive is bsmm_fwd_p)
    assert fwd.outvars[0].aval.shape[0] == 7  # the group axis carries the batch


def test_jit_retrace_free_for_same_layout(rng):
    layout = awkward_layout(rng, 3, 4)
    x = random_array(rng, (5, 24), jnp.float32)
    traces = []

    @jax.jit
    def f(x, w):
        traces.append(1)
        return jbs.BlockSparseMatMul(layout, 8)(x, w)

    w = random_array(rng, jbs.BlockSparseMatMul(layout, 8).w_shape, jnp.float32)
    f(x, w), f(x, w + 1)
    assert len(traces) == 1


def test_op_as_static_argument(rng):
    bsmm, _ = make(rng)
    x = random_array(rng, (5, 32), jnp.float32)
    w = random_array(rng, bsmm.w_shape, jnp.float32)
    apply = jax.jit(lambda op, x, w: op(x, w), static_argnums=0)
    close(apply(bsmm, x, w), bsmm(x, w))
    rebuilt = jbs.BlockSparseMatMul(bsmm.layout.copy(), 8, precision="highest")
    close(apply(rebuilt, x, w), bsmm(x, w))


def test_vmap_over_an_empty_batch(rng):
    """A batch of 0 entries gives empty results of the right shape (the rows per entry of a
    strided conv cannot be read off an empty output), for the op and its per-example grads."""
    bsmm, _ = make(rng)
    w = random_array(rng, bsmm.w_shape, jnp.float32)
    assert jax.jit(jax.vmap(bsmm, in_axes=(0, None)))(jnp.ones((0, 4, 32)), w).shape == (0, 4, 24)
    assert jax.vmap(jax.grad(lambda x: bsmm(x, w).sum()))(jnp.ones((0, 32))).shape == (0, 32)
    conv = jbs.BlockSparseConv(awkward_layout(rng, 4, 3), 8, (3, 3), strides=2)
    wc = random_array(rng, conv.w_shape, jnp.float32)
    assert jax.vmap(conv, in_axes=(0, None))(jnp.ones((0, 2, 9, 7, 32)), wc).shape == (0, 2, 5, 4, 24)
    grads = jax.vmap(jax.grad(lambda x, w: conv(x, w).sum(), argnums=(0, 1)), in_axes=(0, None))
    dx, dw = grads(jnp.ones((0, 2, 9, 7, 32)), wc)
    assert dx.shape == (0, 2, 9, 7, 32) and dw.shape == (0,) + conv.w_shape
