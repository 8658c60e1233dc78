"""One runner per implementation: builds its inputs for a Case and returns microseconds per op.

Every runner rotates input sets beyond L2 (timing.rotation) and times a chain, never one call.
"""

from __future__ import annotations

import numpy as np
import jax
import jax.numpy as jnp

import jbs
from jbs._src import dense_fallback
from jbs.bench import timing
from jbs.bench.cases import Case

# Ops per jitted chain: enough that jax's per-call dispatch (which grows with the number of
# input arrays) is a small share of each op even at the lowest densities.
MIN_OPS = 256
# The dense dot gets no re-paired sets (timing.mixed_sets): XLA merges dots that share an
# operand into one dot (its DotMerger pass), so re-pairing one weight with two activations
# read the weight once for two ops. The session-7 H100 run timed the dense seed-shape forward at
# 59 us, under the 103 us copy floor of its own weight. Its ops take >= 50 us, so the
# per-call dispatch cost that re-pairing spreads out is small there anyway. (XLA has no such
# pass for convolutions, whose small cases need the re-pairing.)
DENSE_MIN_OPS = 0


def _layout(case: Case) -> np.ndarray:
    return jbs.layouts.random(case.c // case.block_size, case.k // case.block_size, case.density, seed=0)


def _data(key, shape, dtype):
    return jax.random.normal(key, shape, jnp.float32).astype(dtype)


def _sets(case: Case, make_set):
    count = timing.rotation(case.bytes())
    return [make_set(jax.random.key(i)) for i in range(count)]


def _apply(op: str, forward):
    """The op of a Case from a forward function f(x, w), through JAX autodiff."""
    if op == "forward":
        return lambda x, w, g: forward(x, w)
    if op == "dx":
        return lambda x, w, g: jax.vjp(lambda x: forward(x, w), x)[1](g)[0]
    if op == "dw":
        return lambda x, w, g: jax.vjp(lambda w: forward(x, w), w)[1](g)[0]
    return lambda x, w, g: (lambda out, pull: (out,) + pull(g))(*jax.vjp(forward, x, w))


def path_of(case: Case) -> str:
    """What runs jbs's matmul case on a GPU: its block kernels, or, where dense_fallback's rule
    says the dense dot is faster, that dot for the forward and input gradient (never the
    weight gradient)."""
    if case.op == "dw" or not dense_fallback.takes_dense_dot(
            rows=case.n, c=case.c, k=case.k, nnz=case.nnz(), block_size=case.block_size,
            itemsize=case.itemsize, groups=1, precision=0):
        return "block kernels"
    return "dense dot" if case.op in ("forward", "dx") else "dense dot (fwd, dx)"


def run_jbs(case: Case, precision=None) -> float:
    bsmm = jbs.BlockSparseMatMul(_layout(case), case.block_size, precision=precision)
    dt = jnp.dtype(case.dtype)

    def make(key):
        kx, kw, kg = jax.random.split(key, 3)
        return (_data(kx, (case.n, case.c), dt), _data(kw, bsmm.w_shape, dt), _data(kg, (case.n, case.k), dt))

    # On the dense dot, no re-pairing (as for the dense peer): XLA would densify a weight once
    # for the ops that share it and merge their dots.
    min_ops = MIN_OPS if path_of(case) == "block kernels" else DENSE_MIN_OPS
    return timing.time_chain(_apply(case.op, bsmm), _sets(case, make), min_ops=min_ops)


def run_dense(case: Case) -> float:
    """XLA's dense dot (cuBLAS) on the full (C, K) matrix: what block sparsity replaces."""
    dt = jnp.dtype(case.dtype)

    def make(key):
        kx, kw, kg = jax.random.split(key, 3)
        return (_data(kx, (case.n, case.c), dt), _data(kw, (case.c, case.k), dt), _data(kg, (case.n, case.k), dt))

    dense_case = Case(case.op, case.dtype, case.n, case.c, case.k, case.block_size, 1.0)
    return timing.time_chain(_apply(case.op, jnp.matmul), _sets(dense_case, make), min_ops=DENSE_MIN_OPS)


def run_copy(case: Case) -> float:
    """The case's floor bytes through XLA's own elementwise kernel: c = a + b over float32
    arrays of a third of case.bytes() each (two read, one written, like each matmul op).
    Timed like every op here, it shows what the simplest memory-bound kernel reaches on those
    bytes, per-kernel launch, ramp and drain included, which the floor (bytes over the copy
    rate of a 1 GiB copy) leaves out."""
    words = max(1, case.bytes() // 3 // 4)

    def make(key):
        ka, kb = jax.random.split(key)
        return (jax.random.normal(ka, (words,), jnp.float32), jax.random.normal(kb, (words,), jnp.float32))

    return timing.time_chain(jnp.add, _sets(case, make), min_ops=MIN_OPS)


def run_bcsr(case: Case) -> float:
    """jax.experimental.sparse BCSR, forward only, as it lowers by default (not through cuSPARSE:
    jax's jax_bcoo_cusparse_lowering flag is off by default), with element-wise (not block)
    compressed rows."""
    from jax.experimental import sparse  # noqa: PLC0415

    if case.op != "forward":
        raise NotImplementedError("BCSR peer times the forward op only")
    bsmm = jbs.BlockSparseMatMul(_layout(case), case.block_size)
    dt = jnp.dtype(case.dtype)

    def make(key):
        kx, kw = jax.random.split(key)
        w_t = bsmm.to_dense(_data(kw, bsmm.w_shape, dt)).T
        return (_data(kx, (case.n, case.c), dt), sparse.BCSR.fromdense(w_t, nse=bsmm.nnz * case.block_size**2))

    return timing.time_chain(lambda x, w_t: (w_t @ x.T).T, _sets(case, make), calls=5, min_ops=MIN_OPS)


def run_torch_bsr(case: Case) -> float:
    """torch's Triton BSR kernel (bsr_dense_mm), forward only: y.T = W.T @ x.T."""
    import torch  # noqa: PLC0415
    from torch.sparse._triton_ops import bsr_dense_mm  # noqa: PLC0415

    if case.op != "forward":
        raise NotImplementedError("torch BSR peer times the forward op only")
    layout = torch.from_numpy(_layout(case)).cuda()
    bs = case.block_size
    dt = getattr(torch, case.dtype)
    mask = layout.repeat_interleave(bs, 0).repeat_interleave(bs, 1)

    def make(seed):
        gen = torch.Generator(device="cuda").manual_seed(seed)
        w = torch.randn(case.c, case.k, device="cuda", generator=gen, dtype=dt) * mask
        x_t = torch.randn(case.c, case.n, device="cuda", generator=gen, dtype=dt)
        return (w.t().contiguous().to_sparse_bsr((bs, bs)), x_t)

    sets = [make(i) for i in range(timing.rotation(case.bytes()))]
    return timing.time_torch_graph(bsr_dense_mm, sets)


def _conv_padding(case):
    """SAME-size output with PixelCNN++-style causal (top/left) padding."""
    kh, kw = case.kernel
    return ((kh - 1, 0), ((kw - 1) // 2, kw // 2))


def run_jbs_conv(case) -> float:
    layout = jbs.layouts.random(case.c // case.block_size, case.k // case.block_size, case.density, seed=0)
    conv = jbs.BlockSparseConv(layout, case.block_size, case.kernel, padding=_conv_padding(case))
    dt = jnp.dtype(case.dtype)

    def make(key):
        kx, kw, kg = jax.random.split(key, 3)
        return (_data(kx, (case.n, case.size, case.size, case.c), dt), _data(kw, conv.w_shape, dt),
                _data(kg, (case.n, case.size, case.size, case.k), dt))

    return timing.time_chain(_apply(case.op, conv), _sets(case, make), min_ops=MIN_OPS)


def run_dense_conv(case) -> float:
    """XLA's dense convolution (cuDNN) with the full HWIO kernel."""
    dt = jnp.dtype(case.dtype)
    conv = lambda x, w: jax.lax.conv_general_dilated(x, w, (1, 1), _conv_padding(case),
                                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def make(key):
        kx, kw, kg = jax.random.split(key, 3)
        return (_data(kx, (case.n, case.size, case.size, case.c), dt), _data(kw, case.kernel + (case.c, case.k), dt),
                _data(kg, (case.n, case.size, case.size, case.k), dt))

    return timing.time_chain(_apply(case.op, conv), _sets(case, make), min_ops=MIN_OPS)


def run_jbs_highest(case: Case) -> float:
    """jbs at precision="highest" (full float32 sums): the pairing for torch's float32 BSR kernel,
    which sums in float64 without TF32."""
    return run_jbs(case, precision="highest")


RUNNERS = {"jbs": run_jbs, "jbs_highest": run_jbs_highest, "xla_dense": run_dense, "jax_bcsr": run_bcsr,
           "torch_bsr": run_torch_bsr, "xla_copy": run_copy}
CONV_RUNNERS = {"jbs": run_jbs_conv, "xla_dense": run_dense_conv}
