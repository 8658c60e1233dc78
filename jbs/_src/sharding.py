"""Sharding of the CUDA custom calls, so that a batch sharded over devices stays sharded: each
device runs its own rows through the kernel instead of all-gathering them.

XLA replicates the operands of a custom call it knows nothing about, so each kernel call is
wrapped in ``custom_partitioning``:

* forward and input gradient: rows (``n``) pass through, so the activation and the output keep
  the activation's row sharding; the weights and lookup tables are replicated;
* weight gradient: rows are summed over, so each device computes a partial ``dw`` from its rows
  and the partials are summed across the row axes (``psum``); rows that do not split evenly
  over the devices are gathered instead (padding rows would be summed in).

A convolution's rows are pixels, and its input and output images differ in size (strides,
padding, transposition), so one row factor cannot tie them together. ``partitioned_images``
views each pixel operand as (groups, images, pixels, features) and partitions that by images:
every device runs whole images through the kernel, whose gather never crosses an image.

Everything else (features, blocks, tables, scratch, the vmap group axis) is replicated. On one
device ``custom_partitioning`` inlines the call and costs nothing. The Shardy rule below tells
the propagation the same facts.
"""

from __future__ import annotations

import itertools
import math

import jax
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding, PartitionSpec
from jax._src.lib.mlir import ir  # the types a Shardy rule callable receives


def _rule_text(shapes_in, shapes_out, rows_in_output: bool):
    """Einsum-like Shardy rule for operands (a, b, *tables) and results (out, *scratch): the
    rows (axis 1 of the activations, and of the output when rows pass through) share factor
    ``n``; every other dimension gets its own factor, which must stay replicated."""
    fresh = (f"u{i}" for i in itertools.count())
    rows_at = {(0, 0), (0, 1) if not rows_in_output else None, (1, 0) if rows_in_output else None}

    def dims(kind, index, shape):
        return " ".join("n" if axis == 1 and (kind, index) in rows_at else next(fresh)
                        for axis in range(len(shape)))

    operands = [dims(0, i, shape) for i, shape in enumerate(shapes_in)]
    results = [dims(1, i, shape) for i, shape in enumerate(shapes_out)]
    factors = " ".join(operands + results).split()
    options = {"need_replication_factors": tuple(dict.fromkeys(f for f in factors if f != "n"))}
    if not rows_in_output:
        options["reduction_factors"] = ("n",)
    return f"{', '.join(operands)} -> {', '.join(results)}", options


def _row_axes(arg):
    """The mesh axes sharding an operand's rows (its axis 1), or None."""
    spec = getattr(arg.sharding, "spec", None)
    return spec[1] if spec is not None and len(spec) > 1 else None


def _shards(mesh, axes) -> int:
    """How many pieces the mesh axes ``axes`` (a name, a tuple of names or None) cut a dim into."""
    if axes is None:
        return 1
    return math.prod(mesh.shape[name] for name in (axes if isinstance(axes, tuple) else (axes,)))


def require_device_assignment(*primitives) -> None:
    """Ask jax to lower computations holding these primitives with their device assignment.

    jax lowers a jit device-independently (no device assignment) unless the jaxpr holds a
    primitive registered here; ``custom_partitioning`` needs the devices, and our primitives
    only become ``custom_partitioning`` calls inside their lowering, where jax cannot see them.
    This is the registry jax's own ``custom_partitioning_p`` is in (jax 0.10 and 0.11). Without
    it a sharded batch would be all-gathered before each kernel: correct, but not scalable."""
    from jax._src import dispatch  # no public spelling of this registry
    registry = getattr(dispatch, "prim_requires_devices_during_lowering", None)
    if registry is not None:
        registry.update(primitives)


def lowering_devices(axis_context) -> tuple:
    """The devices a lowering is for, where jax says (a jit's device assignment, which our
    primitives always ask for; a shard_map body's mesh), else ()."""
    devices = getattr(axis_context, "device_assignment", None)
    if devices is not None:
        return tuple(devices)
    try:
        return tuple(axis_context.mesh.devices.flat)
    except Exception:  # noqa: BLE001 - no mesh, or an abstract one without devices
        return ()


def spans_several_devices(axis_context) -> bool:
    """Whether a lowering is of a computation partitioned over several devices by XLA (a
    ``jit`` with sharded operands), as opposed to one device or a ``shard_map`` body."""
    if type(axis_context).__name__ != "ShardingContext":
        return False
    devices = getattr(axis_context, "device_assignment", None)
    return devices is not None and len(devices) > 1


def partitioned(call, *, rows_in_output: bool):
    """``call(a, b, *tables) -> out`` (an FFI call on local shapes), partitioned by rows."""
    wrapped = custom_partitioning(call)

    def shardings(mesh, arg_shapes):
        rows = _row_axes(arg_shapes[0]) if isinstance(arg_shapes[0].sharding, NamedSharding) else None
        if not rows_in_output and arg_shapes[0].shape[1] % _shards(mesh, rows) != 0:
            # Uneven shards are padded, and the padding rows hold whatever the buffer held: a
            # sum over rows (dw) would add them in. Gather the rows instead (correct, slower).
            # fwd/dx only produce extra output rows there, which XLA drops.
            rows = None
        row_spec = NamedSharding(mesh, PartitionSpec(None, rows))
        replicated = NamedSharding(mesh, PartitionSpec())
        rows_operands = (0,) if rows_in_output else (0, 1)
        args = tuple(row_spec if i in rows_operands else replicated for i in range(len(arg_shapes)))
        return rows, args, (row_spec if rows_in_output else replicated)

    def infer_sharding_from_operands(mesh, arg_shapes, result_shape):
        return shardings(mesh, arg_shapes)[2]

    def partition(mesh, arg_shapes, result_shape):
        rows, args, result = shardings(mesh, arg_shapes)
        if rows_in_output or rows is None:
            return mesh, call, result, args
        return mesh, lambda *ops: jax.lax.psum(call(*ops), rows), result, args

    def sharding_rule(mesh, value_types, result_types):
        shape = lambda t: tuple(ir.RankedTensorType(t).shape)
        return _rule_text([shape(t) for t in value_types], [shape(t) for t in result_types], rows_in_output)

    wrapped.def_partition(partition=partition, infer_sharding_from_operands=infer_sharding_from_operands,
                          sharding_rule=sharding_rule)
    return wrapped


def partitioned_images(call, *, operand_pixels, result_pixels):
    """``call(a, b, *tables) -> out`` of a convolution kernel, partitioned by whole images.

    ``operand_pixels`` gives the pixels per image of the leading operands whose rows are pixels
    (the activation; for the weight gradient also the output gradient); ``result_pixels`` those
    of the result, or None where the result sums over the images (the weight gradient). Each
    such operand (G, images * pixels, F) is viewed as (G, images, pixels, F), so that
    ``partitioned``'s rows are the images; the kernel still receives its flat rows."""
    count = len(operand_pixels)

    def image_view(op, pixels):
        return op.reshape(op.shape[0], op.shape[1] // pixels, pixels, op.shape[2])

    def flat_rows(op):
        return op.reshape(op.shape[0], op.shape[1] * op.shape[2], op.shape[3])

    def on_images(*ops):
        out = call(*[flat_rows(op) for op in ops[:count]], *ops[count:])
        return out if result_pixels is None else image_view(out, result_pixels)

    per_device = partitioned(on_images, rows_in_output=result_pixels is not None)

    def wrapped(*ops):
        out = per_device(*[image_view(op, p) for op, p in zip(ops, operand_pixels)], *ops[count:])
        return out if result_pixels is None else flat_rows(out)
    return wrapped


def on_auto_axes(f, x, w, *, core_axes: int):
    """``f(x, w)`` with the Explicit mesh axes that shard ``x`` made Auto for its duration.

    Under Explicit axes (``jax.make_mesh``'s default from jax 0.11, ``jax.set_mesh``) every
    array's type carries its sharding and each op must say its result's; the primitives'
    sharding is what ``partitioned`` tells XLA, which Auto axes leave it to do. The result keeps
    ``x``'s sharding of its leading (batch) axes, the ``core_axes`` that follow (features, or
    pixels and features) unsharded. Where no axis is Explicit this is ``f(x, w)``."""
    sharding = jax.typeof(x).sharding
    mesh = getattr(sharding, "mesh", None)
    if not getattr(mesh, "explicit_axes", ()):
        return f(x, w)
    spec = tuple(sharding.spec) + (None,) * (x.ndim - len(sharding.spec))
    out = NamedSharding(mesh, PartitionSpec(*spec[:x.ndim - core_axes], *(None,) * core_axes))
    return jax.sharding.auto_axes(f, axes=mesh.explicit_axes, out_sharding=out)(x, w)
