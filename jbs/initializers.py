"""Initialisers for packed block-sparse weights that know the layout.

Each returns a Flax/JAX-style ``init(key, shape, dtype)`` for packed weights ``(nnz, bs, bs)``
or, for a convolution, ``(kh, kw, nnz, bs, bs)``. The fan-in of output unit j is ``block_size``
x the nonzero blocks of its block column (x kh*kw for a convolution), so Barabasi-Albert hubs and leaves are
each scaled to their own fan-in and unit-variance inputs give roughly unit-variance outputs at
any density.
"""

from __future__ import annotations

import numpy as np
import jax
import jax.numpy as jnp

from jbs._src import validation

__all__ = ["variance_scaling", "lecun_normal", "identity"]


def _packed_geometry(layout, block_size):
    layout = validation.as_layout(layout)
    block_size = validation.check_block_size(block_size)
    rows, cols = np.nonzero(layout)
    return layout, block_size, rows, cols


def _check_shape(shape, expected):
    if tuple(shape[-3:]) != expected:
        raise ValueError(f"init shape must end in the packed weight shape {expected}; got {tuple(shape)}")


def variance_scaling(layout, block_size: int, scale: float = 1.0,
                     distribution: str = "truncated_normal"):
    """Weights with variance ``scale / fan_in`` of the output unit they feed.

    distribution: "truncated_normal" (cut at 2 std, rescaled), "normal" or "uniform".
    """
    layout, block_size, rows, cols = _packed_geometry(layout, block_size)
    if not scale > 0:
        raise ValueError(f"scale must be positive, got {scale!r}")
    if distribution not in ("truncated_normal", "normal", "uniform"):
        raise ValueError(f"distribution must be 'truncated_normal', 'normal' or 'uniform', got {distribution!r}")
    fan_in = layout.sum(axis=0)[cols] * block_size  # (nnz,) fan-in of the block's output units
    std = np.sqrt(scale / fan_in).astype(np.float32)[:, None, None]
    expected = (rows.size, block_size, block_size)

    def init(key, shape=expected, dtype=jnp.float32):
        _check_shape(shape, expected)
        taps = int(np.prod(shape[:-3]))  # filter taps of a conv kernel also feed each output
        if distribution == "truncated_normal":
            # std of a unit normal truncated to [-2, 2]
            unit = jax.random.truncated_normal(key, -2.0, 2.0, shape, jnp.float32) / 0.87962566103423978
        elif distribution == "normal":
            unit = jax.random.normal(key, shape, jnp.float32)
        else:
            unit = jax.random.uniform(key, shape, jnp.float32, -np.sqrt(3.0), np.sqrt(3.0))
        return (unit * (std / np.sqrt(taps))).astype(dtype)

    return init


def lecun_normal(layout, block_size: int):
    """Fan-in-aware LeCun normal: variance 1 / fan_in."""
    return variance_scaling(layout, block_size, 1.0, "truncated_normal")


def identity(layout, block_size: int, scale: float = 1.0):
    """``scale`` x the identity on the diagonal blocks, zero elsewhere (the seed's advice for deep
    recurrent stacks, with layer norm). Every diagonal block below min(C, K) must be in the layout.
    For a conv kernel the identity sits on the centre tap (a delta kernel)."""
    layout, block_size, rows, cols = _packed_geometry(layout, block_size)
    diagonal = min(layout.shape)
    missing = np.flatnonzero(~layout[np.arange(diagonal), np.arange(diagonal)])
    if missing.size:
        raise ValueError(f"identity init needs the diagonal blocks in the layout; blocks "
                         f"{missing[:5].tolist()} (of {missing.size}) are missing")
    on_diagonal = (rows == cols).astype(np.float32)[:, None, None] * np.eye(block_size, dtype=np.float32)
    expected = (rows.size, block_size, block_size)

    def init(key=None, shape=expected, dtype=jnp.float32):
        del key
        _check_shape(shape, expected)
        kernel = np.zeros(shape, np.float32)
        kernel[tuple(size // 2 for size in shape[:-3])] = scale * on_diagonal
        return jnp.asarray(kernel, dtype)

    return init
