"""PixelCNN++ with block-sparse convolutions: each output pixel depends only on the pixels
before it in raster order, the discretised logistic mixture is a normalised distribution over
the 256^3 colours that its sampler draws from, the model trains, and its layouts are the ones
asked for."""

import numpy as np
import pytest
import jax
import jax.numpy as jnp

flax = pytest.importorskip("flax")
optax = pytest.importorskip("optax")
from flax import nnx  # noqa: E402

import jbs.nn  # noqa: E402
from jbs.nn import PixelCNNPP, discretized_mix_logistic_log_prob, discretized_mix_logistic_loss  # noqa: E402
from jbs.nn import sample_discretized_mix_logistic  # noqa: E402

SIZE = 8


def small_model(**options):
    options = dict(dict(resnets=1, mixtures=2, block_size=16, density=0.5, dropout=0.0), **options)
    return PixelCNNPP(32, rngs=nnx.Rngs(0), **options)


def images(rng, count=2, size=SIZE):
    """Random 8-bit images scaled to [-1, 1]."""
    return jnp.asarray(rng.integers(0, 256, (count, size, size, 3)) / 127.5 - 1, jnp.float32)


@pytest.fixture(scope="module")
def model():
    return small_model()


def test_each_pixel_sees_only_the_pixels_before_it(model, rng):
    """d output[r, c] / d image is zero at (r, c) and after it in raster order (the colour
    channels within a pixel are ordered by the mixture instead), and nonzero just before it."""
    graphdef, state = nnx.split(model)
    pixel_output = lambda x, r, c: jnp.sum(nnx.merge(graphdef, state)(x)[0, r, c])
    gradient = jax.jit(jax.grad(pixel_output))
    x = images(rng)
    for r, c in [(0, 0), (0, 5), (3, 0), (3, 4), (5, 2), (7, 7)]:
        seen = np.abs(np.asarray(gradient(x, r, c))[0]).sum(-1) > 0
        before = np.zeros((SIZE, SIZE), bool)
        before[:r] = True
        before[r, :c] = True
        assert not (seen & ~before).any(), f"pixel {(r, c)} sees pixels at or after it: {np.argwhere(seen & ~before)}"
        if c > 0:
            assert seen[r, c - 1], f"pixel {(r, c)} does not see its left neighbour"
        if r > 0:
            assert seen[r - 1, c], f"pixel {(r, c)} does not see the pixel above it"


def test_output_shape_and_bad_input(model, rng):
    assert model(images(rng)).shape == (2, SIZE, SIZE, 20)
    with pytest.raises(ValueError, match="multiples of 4"):
        model(jnp.zeros((1, 6, 8, 3)))
    with pytest.raises(ValueError, match=r"\(N, H, W, 3\)"):
        model(jnp.zeros((1, 8, 8, 4)))


@pytest.mark.parametrize("options,message", [
    (dict(features=40), "features=40 must be a multiple of block_size=16"),
    (dict(resnets=0), "resnets must be a positive int"),
    (dict(mixtures=1.5), "mixtures must be a positive int"),
    (dict(density=0.0), r"density must be a number in \(0, 1\]"),
    (dict(dropout=1.5), r"dropout must be a rate in \[0, 1\), got 1.5")])
def test_bad_model_arguments(options, message):
    features = options.pop("features", 32)
    with pytest.raises(ValueError, match=message):
        PixelCNNPP(features, **dict(dict(resnets=1, mixtures=2, block_size=16), **options), rngs=nnx.Rngs(0))


def test_loss_refuses_images_on_the_8_bit_scale():
    outputs = jnp.zeros((1, 4, 4, 10))
    with pytest.raises(ValueError, match=r"scaled to \[-1, 1\].*got values in \[200, 200\]"):
        discretized_mix_logistic_loss(jnp.full((1, 4, 4, 3), 200.0), outputs)
    assert np.isfinite(float(jax.jit(discretized_mix_logistic_loss)(jnp.zeros((1, 4, 4, 3)), outputs)))


def test_mixture_is_normalised_over_all_colours(rng):
    """exp(log p) summed over all 256^3 colours of a pixel is 1, for random network outputs."""
    values = jnp.arange(256, dtype=jnp.float32) / 127.5 - 1
    green, blue = jnp.meshgrid(values, values, indexing="ij")
    for mixtures in (1, 3):
        outputs = jnp.asarray(rng.standard_normal(10 * mixtures), jnp.float32)

        def mass_with_red(red):
            colours = jnp.stack([jnp.full_like(green, red), green, blue], axis=-1)
            return jnp.sum(jnp.exp(discretized_mix_logistic_log_prob(
                colours, jnp.broadcast_to(outputs, colours.shape[:-1] + outputs.shape))))

        total = float(jnp.sum(jax.lax.map(jax.jit(mass_with_red), values)))
        assert abs(total - 1) < 2e-3, total


def test_sampler_draws_from_the_mixture(rng):
    """The red values drawn match red's exact marginal (total variation over coarse bins), and
    every sample lies on the 8-bit grid."""
    outputs = jnp.asarray(rng.standard_normal(20), jnp.float32).at[2:4].set(0.3)  # means of red
    samples = sample_discretized_mix_logistic(jax.random.key(0), jnp.broadcast_to(outputs, (40000, 20)))
    levels = np.asarray((samples + 1) * 127.5)
    np.testing.assert_allclose(levels, np.round(levels), atol=1e-3)
    # Jitted too, the values stay within [-1, 1] (the edges exactly on -1 and 1).
    extreme = jnp.zeros((1000, 10)).at[:, 1:4].set(50.0)
    for sample in (sample_discretized_mix_logistic, jax.jit(sample_discretized_mix_logistic)):
        assert float(sample(jax.random.key(0), extreme).max()) == 1.0
        assert float(sample(jax.random.key(0), -extreme).min()) == -1.0
    # Red's exact marginal, sum_m pi_m p_m(red), from the parameters' layout: logits, then per
    # colour channel the means, log scales and coefficients of the 2 components.
    values = jnp.arange(256, dtype=jnp.float32) / 127.5 - 1
    logits, means, log_scales = outputs[:2], outputs[2:4], jnp.maximum(outputs[4:6], -7)
    inv = jnp.exp(-log_scales)
    upper = jax.nn.sigmoid(inv * (values[:, None] + 1 / 255 - means))
    lower = jax.nn.sigmoid(inv * (values[:, None] - 1 / 255 - means))
    upper = upper.at[-1].set(1.0)
    lower = lower.at[0].set(0.0)
    marginal = np.asarray(jnp.sum(jax.nn.softmax(logits) * (upper - lower), axis=-1))
    empirical = np.bincount(np.round(levels[:, 0]).astype(int), minlength=256) / len(levels)
    # Over 16 bins of 16 levels: the sampling noise of 40000 draws is ~0.01 of total variation.
    coarse = lambda p: p.reshape(16, 16).sum(axis=1)
    assert 0.5 * np.abs(coarse(empirical) - coarse(marginal)).sum() < 0.02


def test_loss_is_in_bits_per_dimension(rng):
    """A single component centred on each colour with the smallest scale (e^-7, a quarter of
    a bin's half width) puts 97.3% of its mass in the right bin: 0.039 bits/dim; the same two
    levels off, nearly none."""
    x = images(rng, 4)

    def peaked(means):  # channels: logit, then per colour (mean, log scale, coefficient)
        per_colour = jnp.stack([means, jnp.full_like(means, -7.0), jnp.zeros_like(means)], axis=-1)
        return jnp.concatenate([jnp.zeros(x.shape[:-1] + (1,)), per_colour.reshape(x.shape[:-1] + (9,))], -1)

    expected = -np.log2(jax.nn.sigmoid(np.exp(7) / 255) - jax.nn.sigmoid(-np.exp(7) / 255))
    assert abs(float(discretized_mix_logistic_loss(x, peaked(x))) - expected) < 2e-3
    assert float(discretized_mix_logistic_loss(x, peaked(x + 2 / 127.5))) > 5


def test_model_trains_and_data_dependent_init(rng):
    model = small_model()
    x = images(rng, 4)
    scales_before = [np.asarray(layer.scale[...]) for _, layer in nnx.iter_graph(model)
                     if isinstance(layer, jbs.nn.BlockSparseConv)]
    assert scales_before and all(np.all(s == 1) for s in scales_before)
    out = model.data_dependent_init(x)
    assert np.isfinite(np.asarray(out)).all()
    scales_after = [np.asarray(layer.scale[...]) for _, layer in nnx.iter_graph(model)
                    if isinstance(layer, jbs.nn.BlockSparseConv)]
    assert all(np.any(s != 1) for s in scales_after), "a weight-normalised layer was not initialised"

    optimizer = nnx.Optimizer(model, optax.adam(2e-3), wrt=nnx.Param)

    @nnx.jit
    def step(model, optimizer, x):
        loss, grads = nnx.value_and_grad(lambda m: discretized_mix_logistic_loss(x, m(x)))(model)
        optimizer.update(model, grads)
        return loss

    losses = [float(step(model, optimizer, x)) for _ in range(30)]
    assert np.isfinite(losses).all()
    assert losses[-1] < losses[0] - 0.5, losses


def test_convolutions_are_block_sparse_with_the_given_layouts():
    asked = []

    def layout_fn(rows, cols, seed):
        asked.append((rows, cols, seed))
        layout = np.zeros((rows, cols), bool)
        layout[np.arange(rows), np.arange(rows) % cols] = True  # one block per input block row
        return layout

    model = small_model(layout_fn=layout_fn)
    convs = [layer for _, layer in nnx.iter_graph(model) if isinstance(layer, jbs.nn.BlockSparseConv)]
    assert len(convs) == len(asked)
    assert sorted(seed for _, _, seed in asked) == list(range(len(asked)))  # a layout each
    for conv in convs:
        assert conv.layout.sum() == conv.layout.shape[0]
        assert conv.kernel.shape[-3] == conv.layout.shape[0]


def test_sampling_fills_every_pixel():
    model = small_model()
    model.eval()
    samples = np.asarray(model.sample(jax.random.key(1), 2, 4, 4))
    assert samples.shape == (2, 4, 4, 3)
    levels = (samples + 1) * 127.5
    np.testing.assert_allclose(levels, np.round(levels), atol=1e-3)
    assert len(np.unique(samples)) > 4


def test_sample_names_bad_sizes_and_dtypes():
    model = PixelCNNPP(16, resnets=1, mixtures=1, block_size=8, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="num_images must be a positive int"):
        model.sample(jax.random.key(0), -1, 2, 2)
    with pytest.raises(TypeError, match="dtype must be a floating dtype"):
        model.sample(jax.random.key(0), 1, 2, 2, dtype=jnp.int32)
