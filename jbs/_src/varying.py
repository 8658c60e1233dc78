"""How the primitives' operands and results vary over ``jax.shard_map``'s manual mesh axes.

Inside ``shard_map`` with ``check_vma=True`` (its default) every value's type says over which
manual axes it varies ("vma"): a weight passed with ``in_specs=P()`` is the same on every
device, an activation split by ``P('data')`` varies over 'data'. Autodiff relies on it: the
gradient of a replicated weight used with a varying activation must be summed over the devices,
and JAX does that through the ``pcast(..., to='varying')`` it inserts before a binary op, whose
transpose is that sum. The primitives do what JAX's own binary ops do: ``match`` casts both
data operands to the union of their varying axes before binding, and ``result`` gives the
result that union. Outside ``shard_map``, or with ``check_vma=False``, nothing varies and both
are the identity.
"""

from __future__ import annotations

import jax
from jax.sharding import NamedSharding, PartitionSpec


def axes(aval) -> frozenset:
    """The manual mesh axes ``aval`` varies over (jax 0.10 and 0.11 keep them in its
    ``manual_axis_type``)."""
    return frozenset(getattr(getattr(aval, "manual_axis_type", None), "varying", None) or ())


def match(a, b):
    """``a`` and ``b``, each cast to vary over the axes either of them varies over."""
    axes_a, axes_b = axes(jax.typeof(a)), axes(jax.typeof(b))
    if axes_a == axes_b:
        return a, b
    union = axes_a | axes_b

    def cast(x, have):
        missing = tuple(sorted(union - have, key=str))
        return jax.lax.pcast(x, missing, to="varying") if missing else x

    return cast(a, axes_a), cast(b, axes_b)


def result(out, a, b):
    """The result aval ``out`` (a plain ShapedArray), varying as the operands ``a`` and ``b`` do."""
    source = a if axes(a) >= axes(b) else b
    if not axes(source):
        return out
    # A varying type needs the mesh it varies on; the result is otherwise unsharded in-device.
    sharding = NamedSharding(source.sharding.mesh, PartitionSpec())
    return out.update(sharding=sharding, manual_axis_type=source.manual_axis_type)
