"""The block-sparse matmul primitives: abstract evaluation, batching and autodiff.

Three primitives, each bilinear in its two data operands:

    bsmm_fwd(x, w)  -> y  = x @ W          (G, N, C), (G, nnz, bs, bs) -> (G, N, K)
    bsmm_dx(dy, w)  -> dx = dy @ W.T       (G, N, K), (G, nnz, bs, bs) -> (G, N, C)
    bsmm_dw(x, dy)  -> dw = x.T @ dy on the nonzero blocks only  -> (G, nnz, bs, bs)

followed by every int32 lookup table of the layout (tables.Tables), which every primitive
carries so that each one's transpose can bind the others. Every data operand has a leading
group axis of size 1 (shared by all groups) or G; groups are how ``vmap`` over stacked weights
runs in one kernel launch instead of a Python loop.

Parameters: ``precision`` (precision.DEFAULT or HIGHEST) and ``conv`` (None, or a
conv_geometry.ConvGeometry). With ``conv`` the primitives are a block-sparse *convolution*: the
first operand of fwd and dw is an image batch (G, images * H * W, C) that the op reads as its
im2col matrix (``conv.gather``), and the first operand of dx, the output gradient, is read
through the transposed map; the tables are then tables.conv_tables_for's. Shapes follow from
the operands: K = bs * (len(fwd_offsets) - 1), C = bs * (len(dx_offsets) - 1).
"""

from __future__ import annotations

import functools
import weakref

import numpy as np
import jax
import jax.numpy as jnp
from jax.extend.core import Primitive
from jax.interpreters import ad, batching

from jbs._src import varying
from jbs._src.tables import Tables

bsmm_fwd_p = Primitive("jbs_bsmm_fwd")
bsmm_dx_p = Primitive("jbs_bsmm_dx")
bsmm_dw_p = Primitive("jbs_bsmm_dw")

NUM_TABLES = len(Tables._fields)
NOT_MAPPED = None  # how a batching rule marks an operand that vmap does not map


def bind(prim, a, b, *tables, **params):
    """Binds a primitive on its two data operands, cast to vary alike over shard_map's manual
    axes (varying.py: the cast of a replicated weight is what sums its gradient over devices)."""
    a, b = varying.match(a, b)
    return prim.bind(a, b, *tables, **params)


# ----------------------------------------------------------------------------- abstract eval

def _group_count(name, a, b):
    ga, gb = a.shape[0], b.shape[0]
    if ga != gb and 1 not in (ga, gb):
        raise ValueError(f"{name}: group axes {ga} and {gb} must be equal or 1")
    return gb if ga == 1 else ga


def _check_common(name, a, b, tables):
    if a.dtype != b.dtype:
        raise TypeError(f"{name}: operand dtypes differ: {a.dtype} and {b.dtype}")
    if len(tables) != NUM_TABLES:
        raise TypeError(f"{name}: expected {NUM_TABLES} lookup tables, got {len(tables)}")


def _fwd_abstract(x, w, *tables, precision, conv=None):
    _check_common("bsmm_fwd", x, w, tables)
    g = _group_count("bsmm_fwd", x, w)
    k = w.shape[-1] * (tables[0].shape[0] - 1)
    rows = x.shape[1] if conv is None else conv.rows_for(x.shape[1])
    return varying.result(jax.core.ShapedArray((g, rows, k), x.dtype), x, w)


def _dx_abstract(dy, w, *tables, precision, conv=None):
    _check_common("bsmm_dx", dy, w, tables)
    g = _group_count("bsmm_dx", dy, w)
    c = w.shape[-1] * (tables[2].shape[0] - 1)
    rows = dy.shape[1] if conv is None else conv.transposed().rows_for(dy.shape[1])
    return varying.result(jax.core.ShapedArray((g, rows, c), dy.dtype), dy, w)


def _dw_abstract(x, dy, *tables, precision, conv=None):
    _check_common("bsmm_dw", x, dy, tables)
    g = _group_count("bsmm_dw", x, dy)
    rows = x.shape[1] if conv is None else conv.rows_for(x.shape[1])
    if dy.shape[1] != rows:
        raise ValueError(f"bsmm_dw: x gives {rows} rows but dy has {dy.shape[1]}")
    bs = x.shape[-1] // (tables[2].shape[0] - 1)
    return varying.result(jax.core.ShapedArray((g, tables[4].shape[0], bs, bs), x.dtype), x, dy)


bsmm_fwd_p.def_abstract_eval(_fwd_abstract)
bsmm_dx_p.def_abstract_eval(_dx_abstract)
bsmm_dw_p.def_abstract_eval(_dw_abstract)


# ----------------------------------------------------------------------------- autodiff

def _bilinear_jvp(prim):
    def jvp(primals, tangents, **params):
        a, b, *tables = primals
        ta, tb = tangents[:2]
        out = bind(prim, a, b, *tables, **params)
        terms = []
        if type(ta) is not ad.Zero:
            terms.append(bind(prim, ta, b, *tables, **params))
        if type(tb) is not ad.Zero:
            terms.append(bind(prim, a, tb, *tables, **params))
        if not terms:  # JAX skips the rule when all tangents are zero; this is a safeguard
            return out, jnp.zeros_like(out)
        tangent = terms[0] if len(terms) == 1 else terms[0] + terms[1]
        return out, tangent
    return jvp


def _reduce_groups(cotangent, aval):
    """Sums the group axis of a cotangent back to an operand that was broadcast (group 1)."""
    if aval.shape[0] == 1 and cotangent.shape[0] != 1:
        cotangent = jnp.sum(cotangent, axis=0, keepdims=True, dtype=jnp.float32).astype(cotangent.dtype)
    return cotangent


def _bilinear_transpose(name, ct_a_rule, ct_b_rule):
    """Transpose of a bilinear primitive given the two cotangent rules (ct, a, b, tables)."""
    def transpose(ct, a, b, *tables, **params):
        if any(ad.is_undefined_primal(t) for t in tables):
            raise ValueError(f"{name}: lookup tables are not differentiable")
        if ad.is_undefined_primal(a) == ad.is_undefined_primal(b):
            raise ValueError(f"{name}: transpose needs exactly one linear operand")
        none = [None] * len(tables)
        if ad.is_undefined_primal(a):
            if type(ct) is ad.Zero:
                return [ad.Zero(a.aval), None] + none
            return [_reduce_groups(ct_a_rule(ct, b, tables, params), a.aval), None] + none
        if type(ct) is ad.Zero:
            return [None, ad.Zero(b.aval)] + none
        return [None, _reduce_groups(ct_b_rule(ct, a, tables, params), b.aval)] + none
    return transpose


# y = x W:         ct_x = dx(ct, w),   ct_w = dw(x, ct)
# dx = dy W^T:     ct_dy = fwd(ct, w), ct_w = dw(ct, dy)
# dw = x^T dy|_W:  ct_x = dx(dy, ct),  ct_dy = fwd(x, ct)
ad.primitive_jvps[bsmm_fwd_p] = _bilinear_jvp(bsmm_fwd_p)
ad.primitive_jvps[bsmm_dx_p] = _bilinear_jvp(bsmm_dx_p)
ad.primitive_jvps[bsmm_dw_p] = _bilinear_jvp(bsmm_dw_p)
ad.primitive_transposes[bsmm_fwd_p] = _bilinear_transpose(
    "bsmm_fwd",
    lambda ct, w, t, p: bind(bsmm_dx_p, ct, w, *t, **p),
    lambda ct, x, t, p: bind(bsmm_dw_p, x, ct, *t, **p))
ad.primitive_transposes[bsmm_dx_p] = _bilinear_transpose(
    "bsmm_dx",
    lambda ct, w, t, p: bind(bsmm_fwd_p, ct, w, *t, **p),
    lambda ct, dy, t, p: bind(bsmm_dw_p, ct, dy, *t, **p))
ad.primitive_transposes[bsmm_dw_p] = _bilinear_transpose(
    "bsmm_dw",
    lambda ct, dy, t, p: bind(bsmm_dx_p, dy, ct, *t, **p),
    lambda ct, x, t, p: bind(bsmm_fwd_p, x, ct, *t, **p))


# ----------------------------------------------------------------------------- batching

def _group_size(operand, bdim):
    """Size of the (logical) group axis 0 of an operand whose vmapped axis is ``bdim``."""
    return operand.shape[1 if bdim == 0 else 0]


def _to_groups(operand, bdim, batch, groups):
    """Folds a vmapped axis into the group axis: (.., g, ...) -> (batch * groups, ...).

    An unbatched operand shared by all groups (group 1) stays shared, with no copy.
    """
    if bdim is NOT_MAPPED:
        if operand.shape[0] == 1:
            return operand
        operand = operand[None]
    else:
        operand = jnp.moveaxis(operand, bdim, 0)
    operand = jnp.broadcast_to(operand, (batch, groups) + operand.shape[2:])
    return operand.reshape((batch * groups,) + operand.shape[2:])


def _abstract_rows(prim, activation_shape, dtype, b, tables, params) -> int:
    """Output rows of one call on an activation of ``activation_shape``, without running it."""
    spec = lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype)
    out = jax.eval_shape(functools.partial(prim.bind, **params), jax.ShapeDtypeStruct(activation_shape, dtype),
                         spec(b), *map(spec, tables))
    return out.shape[1]


def _batch_rule(prim, activation_first):
    """vmap rule. ``activation_first``: operand 0 is an activation (rows N) and operand 1 a
    weight, so when only the activation is batched, the batch folds into the rows N."""
    def rule(args, dims, **params):
        a, b, *tables = args
        da, db = dims[:2]
        # The ops pass their tables as host constants (a layout is never traced), so a batched
        # table is one that a transformation broadcast, as lax.cond / switch do with every
        # operand under a batched predicate: each entry is the same table.
        tables = [t if d is NOT_MAPPED else jax.lax.index_in_dim(t, 0, d, keepdims=False)
                  for t, d in zip(tables, dims[2:])]
        if activation_first and db is NOT_MAPPED:
            a = jnp.moveaxis(a, da, 1)  # (g, batch, n, f)
            g, batch, n, f = a.shape
            out = bind(prim, a.reshape(g, batch * n, f), b, *tables, **params)
            # (output rows per batch entry differ from n for a convolution; an empty batch
            # cannot say how many, so ask the abstract evaluation of one entry)
            rows = out.shape[1] // batch if batch else _abstract_rows(prim, (g, n, f), a.dtype, b, tables, params)
            return out.reshape(out.shape[0], batch, rows, out.shape[-1]), 1
        batch = a.shape[da] if da is not NOT_MAPPED else b.shape[db]
        groups = max(_group_size(a, da), _group_size(b, db))
        out = bind(prim, _to_groups(a, da, batch, groups), _to_groups(b, db, batch, groups),
                   *tables, **params)
        return out.reshape((batch, groups) + out.shape[1:]), 0
    return rule


batching.primitive_batchers[bsmm_fwd_p] = _batch_rule(bsmm_fwd_p, activation_first=True)
batching.primitive_batchers[bsmm_dx_p] = _batch_rule(bsmm_dx_p, activation_first=True)
batching.primitive_batchers[bsmm_dw_p] = _batch_rule(bsmm_dw_p, activation_first=False)


# ----------------------------------------------------------------------------- eager calls

# Device copies of the layouts' tables for eager calls. The tables are cached, read-only numpy
# arrays (tables.py); passed as they are, each eager call would copy all of them to the device
# again (a few dozen small transfers, and an error under jax.transfer_guard("disallow")). A copy
# is kept per table and placement, and dropped with its table.
_device_tables = {}


def _on_device(table, placement):
    key = (id(table), placement)
    copy = _device_tables.get(key)
    if copy is None:
        # Committed to the operands' device only where they are (an uncommitted result stays free
        # to move, as it would be without the copies).
        device, committed = placement
        copy = _device_tables[key] = jax.device_put(table, device) if committed else jax.device_put(table)
        weakref.finalize(table, _device_tables.pop, key, None)
    return copy


def _placement(a, b):
    """(device, committed) of operands that live on one device, or None (host data, sharded or
    split operands)."""
    devices, committed = set(), False
    for operand in (a, b):
        sharding = getattr(operand, "sharding", None)
        if sharding is None or len(sharding.device_set) != 1:
            return None
        devices |= sharding.device_set
        committed = committed or bool(getattr(operand, "committed", True))
    return (devices.pop(), committed) if len(devices) == 1 else None


def _eager_impl(prim):
    """Outside jit a primitive runs as a one-op jitted computation (so it uses the lowering)."""
    @functools.lru_cache(maxsize=None)
    def compiled(**params):
        return jax.jit(lambda *operands: prim.bind(*operands, **params))

    def call(a, b, *tables, **params):
        placement = _placement(a, b)
        if placement is not None:
            tables = [_on_device(t, placement) if isinstance(t, np.ndarray) and not t.flags.writeable else t
                      for t in tables]
        return compiled(**params)(a, b, *tables)
    return call


for _prim in (bsmm_fwd_p, bsmm_dx_p, bsmm_dw_p):
    _prim.def_impl(_eager_impl(_prim))
