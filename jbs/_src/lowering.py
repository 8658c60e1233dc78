"""Lowering of the matmul primitives: the reference everywhere, the CUDA FFI kernels on GPU."""

from __future__ import annotations

import numpy as np
import jax
from jax.interpreters import mlir

from jbs._src import extension, reference
from jbs._src.primitives import bsmm_dw_p, bsmm_dx_p, bsmm_fwd_p

# primitive -> (reference function, FFI target, which lookup tables the kernel reads)
_OPS = {
    bsmm_fwd_p: (reference.forward, "jbs_bsmm_fwd", ("fwd_offsets", "fwd_items")),
    bsmm_dx_p: (reference.input_grad, "jbs_bsmm_dx", ("dx_offsets", "dx_items")),
    bsmm_dw_p: (reference.weight_grad, "jbs_bsmm_dw", ("dw_items",)),
}
_TABLE_FIELDS = ("fwd_offsets", "fwd_items", "dx_offsets", "dx_items", "dw_items")


def _cuda_rule(target, used_tables):
    """Calls the FFI target with the two data operands and only the tables it reads."""
    keep = [0, 1] + [2 + _TABLE_FIELDS.index(name) for name in used_tables]
    ffi_rule = jax.ffi.ffi_lowering(target)

    def rule(ctx, *operands, precision):
        avals_in = [ctx.avals_in[i] for i in keep]
        block_size = ctx.avals_in[1].shape[-1] if target != "jbs_bsmm_dw" else ctx.avals_out[0].shape[-1]
        return ffi_rule(ctx.replace(avals_in=avals_in), *[operands[i] for i in keep],
                        block_size=np.int32(block_size), precision=np.int32(precision))
    return rule


def register() -> None:
    for prim, (reference_fn, target, used_tables) in _OPS.items():
        mlir.register_lowering(prim, mlir.lower_fun(reference_fn, multiple_results=False))
        if extension.cuda_available():
            mlir.register_lowering(prim, _cuda_rule(target, used_tables), platform="cuda")


register()
