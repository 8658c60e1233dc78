"""Matmul precision: the user's argument, normalised to the integer the kernels take.

0 (default): float32 operands use TF32 tensor cores on GPU, as XLA's default dot does.
1 (highest): float32 results at float32 accuracy (3xTF32 on GPU). bf16/fp16 ignore it.
"""

from __future__ import annotations

from jax import lax

DEFAULT = 0
HIGHEST = 1

_NAMES = {None: DEFAULT, "default": DEFAULT, "fastest": DEFAULT, "bfloat16": DEFAULT,
          "high": HIGHEST, "bfloat16_3x": HIGHEST, "highest": HIGHEST, "float32": HIGHEST,
          "tensorfloat32": DEFAULT}


def normalize(precision) -> int:
    """Maps None, a string, a ``lax.Precision`` or a pair of them to DEFAULT or HIGHEST."""
    if isinstance(precision, (tuple, list)) and len(precision) == 2:
        return max(normalize(precision[0]), normalize(precision[1]))
    if isinstance(precision, lax.Precision):
        return HIGHEST if precision in (lax.Precision.HIGH, lax.Precision.HIGHEST) else DEFAULT
    if precision is None or isinstance(precision, str):
        key = precision.lower() if isinstance(precision, str) else precision
        if key in _NAMES:
            return _NAMES[key]
    raise ValueError(
        f"precision must be None, 'default', 'high', 'highest' or a jax.lax.Precision, got {precision!r}")


def to_lax(level: int) -> lax.Precision:
    return lax.Precision.HIGHEST if level == HIGHEST else lax.Precision.DEFAULT
