"""BlockSparseConv / BlockSparseConvTranspose against lax convolutions of the dense HWIO kernel."""

import numpy as np
import pytest
import jax
import jax.numpy as jnp
from jax import lax

import jbs
from helpers import awkward_layout, f64, random_array, rel_error, tolerance

DN = ("NHWC", "HWIO", "NHWC")


def dense_conv(conv, x, kernel):
    return lax.conv_general_dilated(x, kernel, conv.strides, conv.padding, rhs_dilation=conv.dilation,
                                    dimension_numbers=DN, precision=lax.Precision.HIGHEST)


def dense_conv_transpose(conv, x, kernel):
    return lax.conv_transpose(x, kernel, conv.strides, conv.padding, rhs_dilation=conv.dilation,
                              dimension_numbers=DN, precision=lax.Precision.HIGHEST)


def f64_reference(reference, conv, x, w):
    """The dense convolution in float64 (x64 off: float32 with HIGHEST on float64-exact inputs is
    within float32 rounding of float64)."""
    return f64(reference(conv, jnp.asarray(x, jnp.float32), conv.to_dense(jnp.asarray(w, jnp.float32))))


CASES = [  # kernel_size, strides, padding, dilation
    ((1, 1), 1, "SAME", 1), ((3, 3), 1, "SAME", 1), ((3, 3), 2, "SAME", 1), ((2, 3), 1, ((1, 0), (2, 0)), 1),
    ((2, 2), 1, ((1, 0), (1, 0)), 1), ((2, 1), 1, ((1, 0), (0, 0)), 1), ((1, 3), 1, ((0, 0), (1, 1)), 1),
    ((5, 5), 1, "VALID", 1), ((3, 2), 2, "VALID", 1), ((3, 3), 1, "SAME", 2), ((2, 3), 2, ((1, 1), (0, 2)), 2),
    ((2, 3), 2, "SAME_LOWER", 1), ((4, 3), 1, "SAME_LOWER", 2), ((3, 3), 1, (1, (0, 2)), 1),
]


@pytest.mark.parametrize("kernel_size,strides,padding,dilation", CASES)
def test_conv_matches_dense(rng, kernel_size, strides, padding, dilation):
    conv = jbs.BlockSparseConv(awkward_layout(rng, 3, 4), 8, kernel_size, strides, padding, dilation,
                               precision="highest")
    assert conv.w_shape == kernel_size + (conv.nnz, 8, 8)
    x = random_array(rng, (2, 11, 9, 24), jnp.float32)
    w = random_array(rng, conv.w_shape, jnp.float32)
    y = jax.jit(conv)(x, w)
    assert rel_error(y, f64_reference(dense_conv, conv, x, w)) < tolerance(jnp.float32, "highest")


@pytest.mark.parametrize("kernel_size,strides,padding,dilation", [
    ((2, 2), 2, "SAME", 1), ((3, 3), 2, "SAME", 1), ((2, 3), 2, "VALID", 1), ((3, 3), 1, "SAME", 1),
    ((2, 2), 2, ((1, 1), (0, 1)), 1), ((3, 2), 2, "SAME", 2), ((2, 3), 1, "VALID", (2, 1))])
def test_conv_transpose_matches_dense(rng, kernel_size, strides, padding, dilation):
    conv = jbs.BlockSparseConvTranspose(awkward_layout(rng, 2, 3), 16, kernel_size, strides, padding,
                                        dilation, precision="highest")
    x = random_array(rng, (2, 5, 6, 32), jnp.float32)
    w = random_array(rng, conv.w_shape, jnp.float32)
    y = conv(x, w)
    if padding == "SAME":
        assert y.shape[1:3] == (5 * conv.strides[0], 6 * conv.strides[1])
    assert rel_error(y, f64_reference(dense_conv_transpose, conv, x, w)) < tolerance(jnp.float32, "highest")


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("bs", [8, 16, 32, 64])
def test_conv_dtypes_and_block_sizes(rng, dtype, bs):
    conv = jbs.BlockSparseConv(awkward_layout(rng, 2, 3), bs, (2, 3), padding=((1, 0), (1, 1)))
    x = random_array(rng, (2, 7, 5, 2 * bs), dtype)
    w = random_array(rng, conv.w_shape, dtype)
    y = conv(x, w)
    assert y.dtype == dtype and y.shape == (2, 7, 5, 3 * bs)
    assert rel_error(y, f64_reference(dense_conv, conv, x, w)) < tolerance(dtype)


def test_conv_grads_vmap_and_jvp(rng):
    conv = jbs.BlockSparseConv(awkward_layout(rng, 3, 2), 8, (3, 3), 2, "SAME", precision="highest")
    dense = lambda x, w: dense_conv(conv, x, conv.to_dense(w))
    x = random_array(rng, (2, 9, 8, 24), jnp.float32)
    w = random_array(rng, conv.w_shape, jnp.float32)
    g = random_array(rng, conv(x, w).shape, jnp.float32)
    loss = lambda op: jax.grad(lambda x, w: jnp.sum(jnp.tanh(op(x, w)) * g), argnums=(0, 1))
    for a, b in zip(jax.jit(loss(conv))(x, w), loss(dense)(x, w)):
        assert rel_error(a, f64(b)) < 2e-5
    ws = random_array(rng, (3,) + conv.w_shape, jnp.float32)
    assert rel_error(jax.vmap(conv, in_axes=(None, 0))(x, ws), f64(jax.vmap(dense, in_axes=(None, 0))(x, ws))) < 2e-5
    tangents = (random_array(rng, x.shape, jnp.float32), random_array(rng, w.shape, jnp.float32))
    assert rel_error(jax.jvp(conv, (x, w), tangents)[1], f64(jax.jvp(dense, (x, w), tangents)[1])) < 2e-5


def test_conv_packing_and_errors(rng):
    layout = awkward_layout(rng, 3, 4)
    conv = jbs.BlockSparseConv(layout, 8, 3)
    w = random_array(rng, conv.w_shape, jnp.float32)
    kernel = conv.to_dense(w)
    assert kernel.shape == (3, 3, 24, 32)
    np.testing.assert_array_equal(conv.from_dense(kernel), w)
    assert conv == jbs.BlockSparseConv(layout.astype(int), 8, (3, 3)) and hash(conv) == hash(jbs.BlockSparseConv(layout, 8, 3))
    with pytest.raises(ValueError, match=r"x must be NHWC with 24 channels.*got \(2, 5, 5, 16\)"):
        conv(jnp.ones((2, 5, 5, 16)), w)
    with pytest.raises(ValueError, match=r"x must be NHWC"):
        conv(jnp.ones((5, 5, 24)), w)
    with pytest.raises(TypeError, match=r"x must have dtype"):
        conv(jnp.ones((2, 5, 5, 24), jnp.int32), w)
    with pytest.raises(ValueError, match=r"w must have shape w_shape=\(3, 3, "):
        conv(jnp.ones((2, 5, 5, 24)), w[:2])
    with pytest.raises(ValueError, match="padding must be"):
        jbs.BlockSparseConv(layout, 8, 3, padding="FULL")
    with pytest.raises(ValueError, match="explicit padding must be two non-negative"):
        jbs.BlockSparseConv(layout, 8, 3, padding=((1, -1), (0, 0)))
    for bad in (((1.7, 0.2), (0, 0)), ((True, False), (0, 0)), ((1, 1),)):
        with pytest.raises(ValueError, match="explicit padding must be two"):
            jbs.BlockSparseConv(layout, 8, 3, padding=bad)
    with pytest.raises(TypeError, match="w must be a floating-point array, got dtype int32"):
        conv(jnp.ones((2, 5, 5, 24)), jnp.ones(conv.w_shape, jnp.int32))
    with pytest.raises(ValueError, match="strides must be >= 1"):
        jbs.BlockSparseConv(layout, 8, 3, strides=0)
    with pytest.raises(TypeError, match="kernel_size must be an int or a pair"):
        jbs.BlockSparseConv(layout, 8, (3, 3, 3))
    with pytest.raises(ValueError, match="padding must be 'SAME', 'VALID', an int"):
        jbs.BlockSparseConvTranspose(layout, 8, 3, padding="SAME_LOWER")


@pytest.mark.parametrize("in_hw,kernel_size,padding,dilation", [((3, 3), 5, "VALID", 1), ((3, 10), 5, "VALID", 1),
                                                             ((7, 9), 3, ((0, 0), (1, 1)), 4)])
def test_images_smaller_than_the_kernel_give_lax_s_empty_output(rng, in_hw, kernel_size, padding, dilation):
    conv = jbs.BlockSparseConv(awkward_layout(rng, 2, 3), 8, kernel_size, padding=padding, dilation=dilation)
    w = random_array(rng, conv.w_shape, jnp.float32)
    x = random_array(rng, (2,) + in_hw + (16,), jnp.float32)
    ref = dense_conv(conv, x, conv.to_dense(w))
    assert 0 in ref.shape and conv(x, w).shape == ref.shape
    gx, gw = jax.grad(lambda x, w: conv(x, w).sum(), (0, 1))(x, w)
    assert not np.any(gx) and not np.any(gw)


def test_empty_images_give_empty_outputs_as_in_lax(rng):
    conv = jbs.BlockSparseConv(awkward_layout(rng, 2, 3), 8, 3, strides=2)
    w = random_array(rng, conv.w_shape, jnp.float32)
    x = jnp.ones((2, 0, 5, 16))
    y = conv(x, w)
    ref = jax.lax.conv_general_dilated(x, conv.to_dense(w), (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    assert y.shape == ref.shape == (2, 0, 3, 24)
    assert jax.grad(lambda x: conv(x, w).sum())(x).shape == x.shape


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("shape", [(1, 0, 3, 16), (2, 0, 0, 16), (1, 3, 0, 16)])
def test_transposed_conv_of_an_empty_image_is_shaped_as_in_lax(rng, padding, shape):
    """An image with no rows or columns: the padding alone still gives lax.conv_transpose's rows."""
    conv = jbs.BlockSparseConvTranspose(awkward_layout(rng, 2, 3), 8, 3, strides=2, padding=padding)
    w = random_array(rng, conv.w_shape, jnp.float32)
    x = jnp.ones(shape, jnp.float32)
    ref = lax.conv_transpose(x, conv.to_dense(w), (2, 2), padding, dimension_numbers=("NHWC", "HWIO", "NHWC"))
    y = conv(x, w)
    assert y.shape == ref.shape
    np.testing.assert_array_equal(np.asarray(y), np.asarray(ref))
