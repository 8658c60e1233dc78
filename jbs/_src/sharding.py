"""Shardy sharding rules for the CUDA custom calls, so that a batch sharded over devices stays
sharded: XLA runs each device's rows through the kernel locally instead of all-gathering them.

Rows (``n``) pass through forward and input gradient untouched, so they may be sharded; in the
weight gradient they are summed over, so a sharded ``n`` makes each device compute a partial
``dw`` that Shardy all-reduces (a reduction factor). Every other dimension (features, blocks,
lookup tables, scratch) must be replicated. The group axis (vmap over stacked weights) passes
through when an operand has the full group count.

This uses JAX's internal helpers for custom-call sharding rules (as jax.lax.linalg does); if
they are missing, the custom calls carry no rule and XLA replicates their operands (correct,
only slower).
"""

from __future__ import annotations

import itertools

from jax.interpreters import mlir
from jax._src.lib.mlir import ir

try:  # internal API, present in the jax versions jbs supports; optional by design
    from jax._src import config as _config
    from jax._src.custom_partitioning_sharding_rule import (sdy_sharding_rule_to_mlir,
                                                             str_to_sdy_sharding_rule)
except ImportError:  # pragma: no cover - depends on the jax version
    str_to_sdy_sharding_rule = None


def _rule_text(avals_in, avals_out, rows_in_output: bool):
    """(rule, need_replication, reduction) for operands (a, b, *tables) and results."""
    fresh = (f"u{i}" for i in itertools.count())
    groups = avals_out[0].shape[0]
    replicated: list[str] = []

    def dims(aval, leading):
        names = list(leading)
        for _ in range(len(aval.shape) - len(leading)):
            names.append(next(fresh))
            replicated.append(names[-1])
        return " ".join(names)

    def group(aval):
        if aval.shape[0] == groups:
            return "g"
        name = next(fresh)
        replicated.append(name)
        return name

    a, b, *tables = avals_in
    operands = [dims(a, [group(a), "n"]), dims(b, [group(b), "n"] if not rows_in_output else [group(b)])]
    operands += [dims(t, []) for t in tables]
    results = [dims(avals_out[0], ["g", "n"] if rows_in_output else ["g"])]
    results += [dims(r, []) for r in avals_out[1:]]
    reduction = () if rows_in_output else ("n",)
    return f"{', '.join(operands)} -> {', '.join(results)}", tuple(replicated), reduction


def custom_call_attributes(avals_in, avals_out, *, rows_in_output: bool):
    """Extra attributes of a jbs custom call: its Shardy sharding rule, or None."""
    if str_to_sdy_sharding_rule is None or not _config.use_shardy_partitioner.value:
        return None
    text, replicated, reduction = _rule_text(avals_in, avals_out, rows_in_output)
    rule = str_to_sdy_sharding_rule(text, need_replication_factors=replicated, reduction_factors=reduction)
    tensor_type = lambda a: ir.RankedTensorType.get(a.shape, mlir.dtype_to_ir_type(a.dtype))
    types_in = [tensor_type(a) for a in avals_in]
    types_out = [tensor_type(a) for a in avals_out]
    return {"sdy.sharding_rule": sdy_sharding_rule_to_mlir(rule, types_in, types_out)}
