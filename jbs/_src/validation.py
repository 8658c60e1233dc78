"""Argument checks shared by the public ops. Each error names the argument, what it got and
what it expected."""

from __future__ import annotations

import numpy as np
import jax
import jax.numpy as jnp

BLOCK_SIZES = (8, 16, 32, 64)
FLOAT_DTYPES = (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))


def as_layout(layout, name: str = "layout") -> np.ndarray:
    """A read-only, C-contiguous bool copy of a 2-D 0/1 (or bool) array. A layout without any
    nonzero block is valid: its op multiplies by a zero matrix."""
    if isinstance(layout, jax.core.Tracer):
        raise TypeError(f"{name} must be concrete host data (numpy), not a traced value: a layout "
                        "is static, so pass it from outside jit/grad/vmap")
    try:
        array = np.asarray(layout)
    except ValueError as error:  # ragged nested lists
        raise ValueError(f"{name} must be a 2-D array of 0/1 or bool; numpy could not read it as one: {error}") from None
    if array.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array of 0/1 or bool, got shape {array.shape}")
    if array.dtype != np.bool_:
        if not (np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)):
            raise TypeError(f"{name} must hold 0/1 or bool values, got dtype {array.dtype}")
        if not np.isin(array, (0, 1)).all():
            bad = array[~np.isin(array, (0, 1))].ravel()[:3]
            raise ValueError(f"{name} must hold only 0 and 1, got values such as {bad.tolist()}")
    result = np.array(array, dtype=bool, order="C")  # a copy: the caller's array is never aliased
    if 0 in result.shape:
        raise ValueError(f"{name} must have at least one block row and column, got shape {result.shape}")
    result.setflags(write=False)
    return result


class FrozenLayout:
    """A validated, read-only, hashable layout: for static fields (Linen module attributes, jit
    static arguments) that must hash and compare by value. ``np.asarray`` gives the bool array."""

    __slots__ = ("array", "_hash")

    def __init__(self, layout):
        self.array = layout.array if isinstance(layout, FrozenLayout) else as_layout(layout)
        self._hash = hash((self.array.shape, self.array.tobytes()))

    def __array__(self, dtype=None, copy=None):
        return self.array if dtype is None else self.array.astype(dtype)

    @property
    def shape(self):
        return self.array.shape

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        return (isinstance(other, FrozenLayout) and self.array.shape == other.array.shape
                and np.array_equal(self.array, other.array))

    def __repr__(self):
        return f"FrozenLayout(shape={self.array.shape}, nnz={int(self.array.sum())})"


def check_block_size(block_size) -> int:
    if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)):
        raise TypeError(f"block_size must be an int in {BLOCK_SIZES}, got {block_size!r}")
    if int(block_size) not in BLOCK_SIZES:
        raise ValueError(f"block_size must be one of {BLOCK_SIZES}, got {block_size}")
    return int(block_size)


def check_float_dtype(name: str, dtype) -> jnp.dtype:
    dtype = jnp.dtype(dtype)
    if dtype not in FLOAT_DTYPES:
        expected = ", ".join(str(d) for d in FLOAT_DTYPES)
        raise TypeError(f"{name} must have dtype {expected}; got {dtype}")
    return dtype


def check_floating_dtype(name: str, dtype, why: str = "") -> None:
    """A dtype argument (param_dtype, an initialiser's or a sampler's dtype) that must be a float:
    values drawn or rounded into an integer dtype would come out as zeros. ``why`` follows the
    name in the message."""
    if not jnp.issubdtype(jnp.dtype(dtype), jnp.floating):
        raise TypeError(f"{name} must be a floating dtype{why}; got {jnp.dtype(dtype)}")


def check_weight_dtype(name: str, dtype) -> None:
    """Weights may be any float dtype (they are cast to the input's dtype), never integers."""
    if not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(f"{name} must be a floating-point array, got dtype {dtype}")
