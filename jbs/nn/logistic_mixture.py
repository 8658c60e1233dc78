"""PixelCNN++'s output distribution: a mixture of discretised logistics over 8-bit RGB pixels
(Salimans et al. 2017, section 2.1-2.2), its negative log-likelihood and a sampler.

A network output of ``10 * mixtures`` channels per pixel holds, per mixture component, one
logit, and per colour channel a mean and a log scale, plus three coefficients that make green
depend linearly on red and blue on red and green. Pixels are scaled to [-1, 1]: value v of
0..255 is ``v / 127.5 - 1``, and each value owns a bin of width 2/255 around it; the edge
values 0 and 255 own everything beyond them.
"""

from __future__ import annotations

import numpy as np
import jax
import jax.numpy as jnp

_HALF_BIN = 1.0 / 255.0
# The 8-bit grid in [-1, 1], each level p / 127.5 - 1 rounded once from float64 (0 and 255 are
# -1 and 1 exactly). A numpy constant: a jax array here would be made at import time.
_LEVELS = (np.arange(256) / 127.5 - 1.0).astype(np.float32)
_MIN_LOG_SCALE = -7.0


def _real_array(value, name):
    """``value`` as a float32 array; complex values (whose imaginary part a cast would drop
    with only a warning) are refused."""
    array = jnp.asarray(value)
    if jnp.issubdtype(array.dtype, jnp.complexfloating):
        raise TypeError(f"{name} must be real; got dtype {array.dtype}")
    return array.astype(jnp.float32)


def _parameters(x_shape, outputs):
    """Logits (..., M) and per-channel means, log scales, coefficients (..., 3, M)."""
    if outputs.ndim < 1:
        raise ValueError(f"outputs must be (..., 10 * mixtures); got a scalar of shape {outputs.shape}")
    mixtures = outputs.shape[-1] // 10
    if outputs.shape[-1] != 10 * mixtures or mixtures < 1:
        raise ValueError(f"outputs must have 10 * mixtures channels; got {outputs.shape[-1]}")
    if x_shape[:-1] != outputs.shape[:-1] or x_shape[-1] != 3:
        raise ValueError(f"x must be (..., 3) with the outputs' leading shape {outputs.shape[:-1]}; "
                         f"got {x_shape}")
    logits = outputs[..., :mixtures]
    rest = outputs[..., mixtures:].reshape(outputs.shape[:-1] + (3, 3 * mixtures))
    means = rest[..., :mixtures]
    log_scales = jnp.maximum(rest[..., mixtures:2 * mixtures], _MIN_LOG_SCALE)
    coefficients = jnp.tanh(rest[..., 2 * mixtures:])
    return logits, means, log_scales, coefficients


def _conditional_means(means, coefficients, x):
    """Green's mean moves with red, blue's with red and green: (..., 3, M)."""
    red, green = x[..., 0:1], x[..., 1:2]
    return jnp.stack([means[..., 0, :],
                      means[..., 1, :] + coefficients[..., 0, :] * red,
                      means[..., 2, :] + coefficients[..., 1, :] * red + coefficients[..., 2, :] * green],
                     axis=-2)


def _check_scaled(x) -> None:
    """Images on the 0..255 scale (a common slip) give a finite, plausible-looking loss: refused
    where the values are known (outside jit; a traced x is not checked)."""
    if isinstance(x, jax.core.Tracer) or x.size == 0:
        return
    low, high = float(jnp.min(x)), float(jnp.max(x))
    if low < -1.0 - 1e-3 or high > 1.0 + 1e-3:
        raise ValueError(f"x must hold images scaled to [-1, 1] (8-bit pixels p as p / 127.5 - 1); got values "
                         f"in [{low:g}, {high:g}]")


def discretized_mix_logistic_log_prob(x, outputs):
    """log p(x) per pixel (..., ) in nats; ``x`` (..., 3) in [-1, 1] on the 8-bit grid,
    ``outputs`` (..., 10 * mixtures) the network's output at the same pixels."""
    x = _real_array(x, "x")
    _check_scaled(x)
    logits, means, log_scales, coefficients = _parameters(x.shape, _real_array(outputs, "outputs"))
    means = _conditional_means(means, coefficients, x)
    centred = x[..., None] - means
    inv_scale = jnp.exp(-log_scales)
    upper = inv_scale * (centred + _HALF_BIN)
    lower = inv_scale * (centred - _HALF_BIN)
    log_cdf_upper = upper - jax.nn.softplus(upper)      # log sigmoid(upper): the bin of 0
    log_survival_lower = -jax.nn.softplus(lower)        # log (1 - sigmoid(lower)): the bin of 255
    bin_mass = jax.nn.sigmoid(upper) - jax.nn.sigmoid(lower)
    # Where the bin's mass underflows, its density at the centre times the bin width instead.
    middle = inv_scale * centred
    log_density_times_width = middle - log_scales - 2.0 * jax.nn.softplus(middle) + jnp.log(2 * _HALF_BIN)
    log_bin = jnp.where(bin_mass > 1e-5, jnp.log(jnp.maximum(bin_mass, 1e-12)), log_density_times_width)
    edge = x[..., None]
    log_probs = jnp.where(edge < -0.999, log_cdf_upper, jnp.where(edge > 0.999, log_survival_lower, log_bin))
    per_component = jnp.sum(log_probs, axis=-2) + jax.nn.log_softmax(logits, axis=-1)
    return jax.nn.logsumexp(per_component, axis=-1)


def discretized_mix_logistic_loss(x, outputs):
    """The negative log-likelihood of images ``x`` (N, H, W, 3) in [-1, 1], in bits per
    dimension (the unit of PixelCNN++'s CIFAR-10 results: 2.92 dense)."""
    x = _real_array(x, "x")
    if x.size == 0:
        raise ValueError(f"x must hold at least one pixel (bits per dimension of nothing are undefined); "
                         f"got shape {x.shape}")
    nats = -jnp.sum(discretized_mix_logistic_log_prob(x, outputs))
    return nats / (jnp.log(2.0) * x.size)


def sample_discretized_mix_logistic(key, outputs):
    """One sample (..., 3) in [-1, 1] per pixel of ``outputs`` (..., 10 * mixtures): a
    component by its logits, then red, green and blue in turn (each conditioned as the
    likelihood is), rounded to the 8-bit grid."""
    outputs = _real_array(outputs, "outputs")
    logits, means, log_scales, coefficients = _parameters(outputs.shape[:-1] + (3,), outputs)
    component_key, noise_key = jax.random.split(key)
    component = jax.random.categorical(component_key, logits, axis=-1)
    pick = lambda a: jnp.take_along_axis(a, component[..., None, None], axis=-1)[..., 0]  # (..., 3)
    u = jax.random.uniform(noise_key, outputs.shape[:-1] + (3,), minval=1e-5, maxval=1.0 - 1e-5)
    logistic = pick(means) + jnp.exp(pick(log_scales)) * (jnp.log(u) - jnp.log1p(-u))
    coefficients = pick(coefficients)
    # The grid's values from a table: any arithmetic from the level is at XLA's mercy (it
    # multiplies by the reciprocal, so 255 landed on 1.0000001 on CPU under jit and on
    # 0.99999994 on a GPU whichever way the division was written).
    # NaN (a diverged model's outputs) stays NaN: a table index would turn it into a pixel.
    quantise = lambda v: jnp.where(jnp.isnan(v), jnp.nan, jnp.asarray(_LEVELS)[
        jnp.clip(jnp.round((v + 1.0) * 127.5), 0, 255).astype(jnp.int32)])
    red = quantise(logistic[..., 0])
    green = quantise(logistic[..., 1] + coefficients[..., 0] * red)
    blue = quantise(logistic[..., 2] + coefficients[..., 1] * red + coefficients[..., 2] * green)
    return jnp.stack([red, green, blue], axis=-1)
