"""The CUDA lowering, checked on any machine by lowering for the CUDA platform (no GPU needed):
each primitive becomes its FFI custom call, with only the tables it reads, int32 attributes, and
a Shardy sharding rule that lets sharded rows pass through (and sums them in dw)."""

import re

import numpy as np
import pytest
import jax
import jax.numpy as jnp
from jax.interpreters import mlir

import jbs
from jbs._src import lowering, sharding


@pytest.fixture(scope="module")
def cuda_text():
    # Register the CUDA rules for this lowering only: on a GPU machine without the extension, a
    # leaked registration would send every later test to FFI targets that do not exist.
    from jax._src.interpreters import mlir as mlir_internal
    registry = mlir_internal._platform_specific_lowerings["cuda"]
    saved = {prim: registry.get(prim) for prim in lowering._OPS}
    try:
        for prim, (_, target, used) in lowering._OPS.items():
            mlir.register_lowering(prim, lowering._cuda_rule(target, used), platform="cuda")
        return _lower_step()
    finally:
        for prim, rule in saved.items():
            if rule is None:
                registry.pop(prim, None)
            else:
                registry[prim] = rule


def _lower_step():
    layout = np.array([[1, 0, 1], [1, 1, 0]], bool)
    bsmm = jbs.BlockSparseMatMul(layout, 16)
    step = jax.jit(jax.grad(lambda x, w: jnp.sum(bsmm(x, w) ** 2), argnums=(0, 1)))
    lowered = step.trace(jnp.ones((8, 32), jnp.bfloat16), jnp.ones(bsmm.w_shape, jnp.bfloat16))
    return lowered.lower(lowering_platforms=("cuda",)).as_text()


def custom_call(text, target):
    lines = [line for line in text.splitlines() if f"custom_call @{target}(" in line]
    assert len(lines) == 1, f"expected one {target} call"
    return lines[0]


@pytest.mark.parametrize("target,operands", [("jbs_bsmm_fwd", 6), ("jbs_bsmm_dx", 6), ("jbs_bsmm_dw", 3)])
def test_each_primitive_lowers_to_its_custom_call(cuda_text, target, operands):
    line = custom_call(cuda_text, target)
    args = re.search(rf"@{target}\(([^)]*)\)", line).group(1)
    assert len(args.split(",")) == operands
    assert "block_size = 16 : i32" in line and "precision = 0 : i32" in line


def test_sharding_rules(cuda_text):
    if sharding.str_to_sdy_sharding_rule is None or not jax.config.jax_use_shardy_partitioner:
        pytest.skip("this jax has no Shardy custom-call rules")
    fwd = custom_call(cuda_text, "jbs_bsmm_fwd")
    # rows: the second factor of the activation and of the output are the same, not replicated
    rule = re.search(r"op_sharding_rule<\(\[(\w+), (\w+), \w+\].*?->\(\[(\w+), (\w+), \w+\]", fwd)
    assert rule and rule.group(2) == rule.group(4)
    replicated = re.search(r"need_replication=\{([^}]*)\}", fwd).group(1)
    assert rule.group(2) not in replicated.replace(" ", "").split(",")
    dw = custom_call(cuda_text, "jbs_bsmm_dw")
    assert re.search(r"reduction=\{\w+\}", dw)
