"""The pure-JAX reference of the three block-sparse matmul primitives.

It computes exactly the function the CUDA kernels compute: every output element is a sum over
the layout's nonzero blocks only (a NaN in a zero block's input region never leaks into the
output), accumulated in float32 and cast back to the input dtype. It serves as the lowering on
every platform without a compiled kernel, and as the readable definition of each op.

Operands carry a leading group axis of size 1 (broadcast) or G; see primitives.py.
"""

from __future__ import annotations

import jax.numpy as jnp

from jbs._src import precision as precision_lib


def _groups(*operands):
    """The group count G: operands have group axes of size 1 (shared) or G (G may be 0)."""
    sizes = [op.shape[0] for op in operands if op.shape[0] != 1]
    return sizes[0] if sizes else 1


def _gather_blocks(a, block_ids, bs):
    """(g, n, F) -> (g, n, len(block_ids), bs): the feature blocks named by block_ids."""
    g, n, f = a.shape
    return jnp.take(a.reshape(g, n, f // bs, bs), block_ids, axis=2)


def _segment_ids(offsets, num_items):
    """Item j belongs to segment s where offsets[s] <= j < offsets[s + 1]."""
    return jnp.searchsorted(offsets, jnp.arange(num_items, dtype=offsets.dtype), side="right") - 1


def _gather_matmul(a, w, offsets, items, *, transpose_blocks, precision):
    """out[:, :, s] = sum over items j of segment s of a[:, :, block items[j,1]] @ w[items[j,0]]."""
    g = _groups(a, w)
    bs = w.shape[-1]
    num_segments = offsets.shape[0] - 1
    a_blocks = jnp.broadcast_to(_gather_blocks(a, items[:, 1], bs), (g,) + a.shape[1:2] + (items.shape[0], bs))
    w_blocks = jnp.broadcast_to(jnp.take(w, items[:, 0], axis=1), (g,) + (items.shape[0], bs, bs))
    spec = "gnjb,gjab->gnja" if transpose_blocks else "gnja,gjab->gnjb"
    contributions = jnp.einsum(spec, a_blocks, w_blocks, preferred_element_type=jnp.float32,
                               precision=precision_lib.to_lax(precision))
    # (g, n, nnz, bs) -> segments along axis 0, summed in float32.
    summed = jnp.zeros((num_segments,) + contributions.shape[:2] + (bs,), jnp.float32)
    summed = summed.at[_segment_ids(offsets, items.shape[0])].add(
        jnp.moveaxis(contributions, 2, 0), indices_are_sorted=True)
    out = jnp.moveaxis(summed, 0, 2).reshape(g, a.shape[1], num_segments * bs)
    return out.astype(a.dtype)


def forward(x, w, fwd_offsets, fwd_items, dx_offsets, dx_items, dw_items, *, precision):
    del dx_offsets, dx_items, dw_items
    return _gather_matmul(x, w, fwd_offsets, fwd_items, transpose_blocks=False, precision=precision)


def input_grad(dy, w, fwd_offsets, fwd_items, dx_offsets, dx_items, dw_items, *, precision):
    del fwd_offsets, fwd_items, dw_items
    return _gather_matmul(dy, w, dx_offsets, dx_items, transpose_blocks=True, precision=precision)


def weight_grad(x, dy, fwd_offsets, fwd_items, dx_offsets, dx_items, dw_items, *, precision):
    del fwd_items, dx_offsets, dx_items
    g = _groups(x, dy)
    bs = dy.shape[-1] // (fwd_offsets.shape[0] - 1)
    n, nnz = x.shape[1], dw_items.shape[0]
    x_blocks = jnp.broadcast_to(_gather_blocks(x, dw_items[:, 0], bs), (g, n, nnz, bs))
    dy_blocks = jnp.broadcast_to(_gather_blocks(dy, dw_items[:, 1], bs), (g, n, nnz, bs))
    dw = jnp.einsum("gnja,gnjb->gjab", x_blocks, dy_blocks, preferred_element_type=jnp.float32,
                    precision=precision_lib.to_lax(precision))
    return dw.astype(x.dtype)
