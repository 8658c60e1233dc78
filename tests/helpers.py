"""Shared test helpers: layouts with the awkward features, float64 references, error bounds."""

import os
import subprocess
import sys

import numpy as np
import jax.numpy as jnp

import jbs

ON_GPU = None


def on_gpu() -> bool:
    global ON_GPU
    if ON_GPU is None:
        info = jbs.backend_info()
        ON_GPU = info.gpu_present and info.cuda_kernels
    return ON_GPU


def awkward_layout(rng, rows, cols, density=0.4):
    """Random layout that always has an empty block row and an empty block column (when there
    are at least two of each) and at least one block."""
    layout = rng.random((rows, cols)) < density
    if rows > 1:
        layout[rng.integers(rows), :] = False
    if cols > 1:
        layout[:, rng.integers(cols)] = False
    if not layout.any():
        r = rng.integers(rows)
        c = rng.integers(cols)
        layout[r, c] = True
    return layout


def random_array(rng, shape, dtype):
    """Random normal data rounded to dtype (never zeros)."""
    return jnp.asarray(rng.standard_normal(shape).astype(np.float32)).astype(dtype)


def f64(a):
    return np.asarray(jnp.asarray(a, jnp.float32), dtype=np.float64)


def dense_f64(bsmm, w):
    """The dense (C, K) float64 matrix of packed weights (rounded to their dtype first)."""
    return f64(bsmm.to_dense(jnp.asarray(w, jnp.float32)))


def heavy_column_layout(rng, rows, cols, density=0.05):
    """Power-law-like: one column holds every block (~20x the average at the default density);
    an empty row and an empty column."""
    layout = awkward_layout(rng, rows, cols, density=density)
    layout[:, 1] = True
    layout[rng.integers(rows), :] = False
    layout[:, 0] = False
    return layout


def tolerance(dtype, precision=None) -> float:
    """Relative error bound ||out - ref|| / ||ref|| (METHOD.md): fp32 far under 1e-3, TF32 near
    3e-4, bf16 1e-3..1e-2; fp16 has 3 more mantissa bits than bf16."""
    dtype = jnp.dtype(dtype)
    if dtype == jnp.bfloat16:
        return 1.5e-2
    if dtype == jnp.float16:
        return 3e-3
    if on_gpu() and precision not in ("highest",):
        return 2e-3
    return 2e-5


def rel_error(out, ref) -> float:
    out = f64(out)
    ref = np.asarray(ref, np.float64)
    assert out.shape == ref.shape, (out.shape, ref.shape)
    assert np.isfinite(out).all(), "output holds NaN or Inf"
    return float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30))


def run_on_four_host_devices(script: str) -> str:
    """Runs ``script`` in a fresh Python on 4 CPU devices (the device count is fixed when jax
    starts, so it cannot be changed inside the test process) and returns its stdout; a failure
    fails the test with the end of its stderr."""
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def with_cuda_rules(lower):
    """Runs ``lower()`` with the CUDA lowering rules registered (no GPU needed)."""
    # Register the CUDA rules for this lowering only: on a GPU machine without the extension, a
    # leaked registration would send every later test to FFI targets that do not exist.
    from jax._src import dispatch
    from jbs._src import lowering
    from jax._src.interpreters import mlir as mlir_internal
    registry = mlir_internal._platform_specific_lowerings["cuda"]
    saved = {prim: registry.get(prim) for prim in lowering._OPS}
    needs_devices = set(dispatch.prim_requires_devices_during_lowering)
    try:
        lowering.register_cuda()
        return lower()
    finally:
        for prim, rule in saved.items():
            if rule is None:
                registry.pop(prim, None)
            else:
                registry[prim] = rule
        dispatch.prim_requires_devices_during_lowering.intersection_update(needs_devices)
