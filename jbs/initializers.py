"""Initialisers for packed block-sparse weights that know the layout.

Each returns a Flax/JAX-style ``init(key, shape, dtype)`` for packed weights ``(nnz, bs, bs)``
or, for a convolution, ``(kh, kw, nnz, bs, bs)``. The fan-in of output unit j is ``block_size``
x the nonzero blocks of its block column (x kh*kw for a convolution), so Barabasi-Albert hubs and leaves are
each scaled to their own fan-in and unit-variance inputs give roughly unit-variance outputs at
any density.

``per_block_column`` turns any dense initialiser (``nnx.initializers.lecun_normal()``,
``he_normal()``, ``orthogonal()``, ...) into one for packed weights: the block-sparse layers
apply it to every ``kernel_init`` callable not marked by ``packed``, so a stock initialiser sees
the fan-in of each unit's real inputs, not the packed array's shape.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import jax
import jax.numpy as jnp

from jbs._src import validation

__all__ = ["variance_scaling", "lecun_normal", "identity", "per_block_column", "packed"]


def _packed_geometry(layout, block_size):
    layout = validation.as_layout(layout)
    block_size = validation.check_block_size(block_size)
    rows, cols = np.nonzero(layout)
    return layout, block_size, rows, cols


def _check_shape(shape, expected):
    if tuple(shape[-3:]) != expected:
        raise ValueError(f"init shape must end in the packed weight shape {expected}; got {tuple(shape)}")


def _check_scale(scale, *, positive: bool):
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating)):
        raise TypeError(f"scale must be a real number; got {scale!r}")
    if not np.isfinite(scale) or (positive and not scale > 0):
        raise ValueError(f"scale must be a finite{' positive' if positive else ''} number; got {scale!r}")


def packed(init):
    """``init``, marked as taking the packed shape ``([kh, kw,] nnz, bs, bs)`` itself, so the
    block-sparse layers call it as it is (the initialisers of this module are marked). A new
    function: the one passed in is left as it was."""
    if not callable(init):
        raise TypeError(f"init must be a callable init(key, shape, dtype); got {init!r}")

    @functools.wraps(init)
    def marked(*args, **kwargs):
        return init(*args, **kwargs)

    marked.takes_packed_shape = True
    return marked


def _unboxed(value):
    """(array, rebox) for an initialiser's result: Flax's metadata wrappers (``nnx.with_partitioning``
    and the like give an ``nnx.VariableMetadata``, ``nn.with_partitioning`` a boxed
    ``AxisMetadata``) hold the array and what the layer's parameter is to carry; ``rebox`` puts
    another array (the packed kernel) in the same wrapper."""
    if dataclasses.is_dataclass(value) and hasattr(value, "raw_value"):
        return value.raw_value, lambda array: dataclasses.replace(value, raw_value=array)
    if hasattr(value, "unbox") and hasattr(value, "replace_boxed"):
        return value.unbox(), value.replace_boxed
    return value, lambda array: array


def per_block_column(init, layout, block_size: int):
    """A packed-weight initialiser from a dense one: each output block column's weights are
    drawn as ``init(key, ([kh, kw,] fan_in, block_size))``, the dense kernel of that column's
    real inputs (``fan_in`` = block_size x its nonzero blocks), then packed. So variance-scaling
    initialisers scale each unit by its own fan-in (their fan-out is then the block's width),
    ``orthogonal`` gives orthonormal columns per block column, and shape-free ones (normal,
    zeros) are unchanged."""
    if not callable(init):
        raise TypeError(f"init must be a callable init(key, shape, dtype); got {init!r}")
    layout, block_size, rows, cols = _packed_geometry(layout, block_size)
    blocks_per_column = layout.sum(axis=0)
    # Block columns drawn together: those with the same fan-in (one vmapped call each).
    groups = [(int(f), np.flatnonzero(blocks_per_column == f)) for f in np.unique(blocks_per_column) if f > 0]
    # Packed index of every block, in the order the groups' draws come out (column by column,
    # rows ascending within a column, as np.nonzero packs them).
    drawn_order = np.concatenate([np.flatnonzero(cols == c) for _, columns in groups for c in columns] or [[]])
    to_packed = np.argsort(drawn_order)
    expected = (rows.size, block_size, block_size)

    def packed_init(key, shape=expected, dtype=jnp.float32):
        _check_shape(shape, expected)
        validation.check_floating_dtype("dtype", dtype, " for weights")
        taps = tuple(shape[:-3])
        parts = []
        rebox = [lambda array: array]  # the wrapper of the initialiser's results, if any

        def draw(k, column_shape):
            array, rebox[0] = _unboxed(init(k, column_shape, dtype))
            return array

        for index, (fan_in_blocks, columns) in enumerate(groups):
            column_shape = taps + (fan_in_blocks * block_size, block_size)
            keys = jax.random.split(jax.random.fold_in(key, index), columns.size)
            drawn = jax.vmap(lambda k: draw(k, column_shape))(keys)
            if drawn.shape != (columns.size,) + column_shape:
                raise ValueError(f"kernel_init returned shape {drawn.shape[1:]} for one block column's "
                                 f"weights; expected {column_shape} (it is called like a dense "
                                 "initialiser per output block column; wrap an initialiser that "
                                 "takes the packed shape in jbs.initializers.packed)")
            drawn = drawn.reshape((columns.size,) + taps + (fan_in_blocks, block_size, block_size))
            parts.append(jnp.moveaxis(drawn, 0, len(taps)).reshape(
                taps + (columns.size * fan_in_blocks, block_size, block_size)))
        if not parts:  # a layout without blocks
            return rebox[0](jnp.zeros(shape, dtype))
        return rebox[0](jnp.concatenate(parts, axis=len(taps))[..., to_packed, :, :].astype(dtype))

    return packed(packed_init)


def variance_scaling(layout, block_size: int, scale: float = 1.0,
                     distribution: str = "truncated_normal"):
    """Weights with variance ``scale / fan_in`` of the output unit they feed.

    distribution: "truncated_normal" (cut at 2 std, rescaled), "normal" or "uniform".
    """
    layout, block_size, rows, cols = _packed_geometry(layout, block_size)
    _check_scale(scale, positive=True)
    if distribution not in ("truncated_normal", "normal", "uniform"):
        raise ValueError(f"distribution must be 'truncated_normal', 'normal' or 'uniform', got {distribution!r}")
    fan_in = layout.sum(axis=0)[cols] * block_size  # (nnz,) fan-in of the block's output units
    std = np.sqrt(scale / fan_in).astype(np.float32)[:, None, None]
    expected = (rows.size, block_size, block_size)

    def init(key, shape=expected, dtype=jnp.float32):
        _check_shape(shape, expected)
        validation.check_floating_dtype("dtype", dtype, " for weights")
        taps = int(np.prod(shape[:-3]))  # filter taps of a conv kernel also feed each output
        if distribution == "truncated_normal":
            # std of a unit normal truncated to [-2, 2]
            unit = jax.random.truncated_normal(key, -2.0, 2.0, shape, jnp.float32) / 0.87962566103423978
        elif distribution == "normal":
            unit = jax.random.normal(key, shape, jnp.float32)
        else:
            unit = jax.random.uniform(key, shape, jnp.float32, -np.sqrt(3.0), np.sqrt(3.0))
        return (unit * (std / np.sqrt(taps))).astype(dtype)

    return packed(init)


def lecun_normal(layout, block_size: int):
    """Fan-in-aware LeCun normal: variance 1 / fan_in."""
    return variance_scaling(layout, block_size, 1.0, "truncated_normal")


def identity(layout, block_size: int, scale: float = 1.0, tap=None, *, gates: int = 1):
    """``scale`` x the identity on the diagonal blocks, zero elsewhere (the seed's advice for deep
    recurrent stacks, with layer norm). Every diagonal block below min(C, K) must be in the layout.
    With ``gates`` > 1 the layout's block columns are that many equal parts, the gates of a fused
    gate matmul (``jbs.nn.gate_layout``), and each gate gets its own identity, as the seed's LSTM
    initialised each gate's recurrent weights.
    For a conv kernel the identity sits on one filter tap (a delta kernel): ``tap``, or by
    default the centre one, ``size // 2`` per axis. The block-sparse conv layers pass the tap
    that reads each output pixel's own input pixel under their padding (an even kernel with
    "SAME" padding pads less before than after, so its centre would shift the image)."""
    layout, block_size, rows, cols = _packed_geometry(layout, block_size)
    _check_scale(scale, positive=False)
    if isinstance(gates, bool) or not isinstance(gates, (int, np.integer)) or gates < 1:
        raise ValueError(f"gates must be a positive int; got {gates!r}")
    if layout.shape[1] % gates:
        raise ValueError(f"gates={gates} must divide the layout's {layout.shape[1]} block columns")
    gate_cols = layout.shape[1] // gates
    diagonal = min(layout.shape[0], gate_cols)
    for gate in range(gates):
        missing = np.flatnonzero(~layout[np.arange(diagonal), gate * gate_cols + np.arange(diagonal)])
        if missing.size:
            where = f" of gate {gate} (block columns {gate * gate_cols} on)" if gates > 1 else ""
            raise ValueError(f"identity init needs the diagonal blocks{where} in the layout; the blocks "
                             f"of block rows {missing[:5].tolist()} (of {missing.size}) are missing")
    on_diagonal = (rows == cols % gate_cols).astype(np.float32)[:, None, None] * np.eye(block_size, dtype=np.float32)
    expected = (rows.size, block_size, block_size)

    def init(key=None, shape=expected, dtype=jnp.float32):
        del key
        _check_shape(shape, expected)
        validation.check_floating_dtype("dtype", dtype, " for weights")
        kernel = np.zeros(shape, np.float32)
        centre = tuple(size // 2 for size in shape[:-3]) if tap is None else tuple(tap)
        if len(centre) != len(shape) - 3 or not all(0 <= t < size for t, size in zip(centre, shape[:-3])):
            raise ValueError(f"identity init: tap {centre} is not a filter tap of the kernel shape {tuple(shape)}")
        kernel[centre] = scale * on_diagonal
        return jnp.asarray(kernel, dtype)

    return packed(init)
