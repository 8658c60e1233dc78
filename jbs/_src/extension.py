"""Finding and registering the compiled CUDA extension, and reporting which path runs.

The extension is optional. It is used only when it imports, was compiled against the jaxlib
that is running (XLA FFI handlers built against newer headers refuse to load in an older
jaxlib, and the reverse is untested), and JBS_DISABLE_CUDA is not set. Otherwise every
platform runs the pure-JAX reference lowering. GPUs older than the kernels' oldest target
(sm_80: cp.async and bf16 tensor cores), such as the T4 of a free Colab runtime, also run the
reference lowering: the lowering asks ``runs_kernels`` for the devices it lowers for.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os

import jax
import jaxlib

@dataclasses.dataclass(frozen=True)
class BackendInfo:
    """Which implementation jbs uses, and why."""

    cuda_kernels: bool       # the CUDA FFI kernels are registered and lowered to on GPU
    reason: str              # why (or why not)
    jax_version: str
    extension_built_against: str | None
    gpu_present: bool

    def __str__(self) -> str:
        path = "CUDA kernels" if self.cuda_kernels and self.gpu_present else "pure-JAX reference"
        lines = [
            f"jbs: running the {path} path",
            f"  reason: {self.reason}",
            f"  jax {self.jax_version}; extension built against jaxlib {self.extension_built_against or '-'}",
            f"  GPU present: {self.gpu_present}",
        ]
        if not (self.cuda_kernels and self.gpu_present):
            lines.append("  (kernel timings need a CUDA GPU and the compiled extension)")
        return "\n".join(lines)


@functools.cache
def load() -> tuple[object | None, str, str | None]:
    """Imports and registers the extension once: (module or None, reason, built-against)."""
    if os.environ.get("JBS_DISABLE_CUDA", "") not in ("", "0"):
        return None, "disabled by JBS_DISABLE_CUDA", None
    if importlib.util.find_spec("jbs._jbs_cuda") is None:
        return None, ("the CUDA extension is not installed (jbs was built without nvcc or with "
                      "JBS_CUDA=OFF, or is imported from a source tree that was never built)"), None
    try:
        from jbs import _jbs_cuda  # noqa: PLC0415 - optional compiled module
    except ImportError as error:
        return None, f"the CUDA extension failed to load: {error}", None
    built = _jbs_cuda.built_against_jax()
    if built != jaxlib.__version__:
        return None, (f"the CUDA extension was built against jaxlib {built} but jaxlib "
                      f"{jaxlib.__version__} is running; reinstall jbs with "
                      f"`pip install --no-build-isolation .`"), built
    for name, capsule in _jbs_cuda.registrations().items():
        jax.ffi.register_ffi_target(name, capsule, platform="CUDA")
    return _jbs_cuda, "the CUDA extension is compiled and registered", built


def cuda_available() -> bool:
    return load()[0] is not None


# The XLA FFI targets the extension registers (cuda/ffi), which a function lowered for CUDA calls.
FFI_TARGETS = ("jbs_bsmm_fwd", "jbs_bsmm_dx", "jbs_bsmm_dw", "jbs_bsconv_fwd", "jbs_bsconv_dx", "jbs_bsconv_dw")


def export_disabled_checks() -> list:
    """The ``disabled_checks`` that ``jax.export.export`` needs for a function that calls jbs's
    CUDA kernels. jax.export refuses custom calls it does not know to be stable; jbs's are
    stable only within one jbs build, so the process that calls the exported function must
    import the same jbs (which registers the kernels) before it does::

        exported = jax.export.export(jax.jit(f), platforms=["cuda"],
                                     disabled_checks=jbs.export_disabled_checks())(x, w)
    """
    return [jax.export.DisabledSafetyCheck.custom_call(target) for target in FFI_TARGETS]


# The oldest GPU the kernels are built for (CMakeLists.txt: sm_80, sm_90a and sm_90 PTX).
MIN_COMPUTE_CAPABILITY = (8, 0)


def runs_kernels(device) -> bool:
    """Whether the CUDA kernels run on ``device``. A device that reports no CUDA compute
    capability (lowering for CUDA ahead of time on a CPU host) is taken to run them."""
    try:  # a probe that fails must never turn the kernels off
        major, minor = (int(part) for part in str(device.compute_capability).split(".")[:2])
    except Exception:  # noqa: BLE001 - no such attribute, or an unexpected format
        return True
    return (major, minor) >= MIN_COMPUTE_CAPABILITY


def _gpus() -> list:
    try:
        return jax.devices("gpu")
    except RuntimeError:
        return []


def packed_walk_ctas() -> int | None:
    """The CTAs of the packed small-N walk (tables.py: _packing): with JBS_STREAM_EVEN_PACKED=1
    (read when an op is built; the walk is not yet the default, benchmarks/NOTES.md, session 68),
    the SM count of the first GPU where the CUDA kernels run there; else None (no packing is
    built). The kernels take the packing only on a GPU with that many SMs
    (cuda/matmul/launch_small_n.cuh: even_packing). Without the switch nothing asks jax for its
    devices, so building an op does not start a backend (jax.distributed.initialize must come
    first)."""
    if os.environ.get("JBS_STREAM_EVEN_PACKED", "") != "1":
        return None
    return _gpu_sm_count()


@functools.cache
def _gpu_sm_count() -> int | None:
    if load()[0] is None:
        return None
    gpus = [gpu for gpu in _gpus() if runs_kernels(gpu)]
    try:  # jax's CUDA devices report their SMs as core_count
        count = int(gpus[0].core_count) if gpus else 0
    except Exception:  # noqa: BLE001 - no such attribute: no packing, never an error
        return None
    return count if count > 0 else None


def backend_info() -> BackendInfo:
    """Says which path jbs runs on this machine and why. Never raises."""
    module, reason, built = load()
    gpus = _gpus()
    too_old = [gpu for gpu in gpus if not runs_kernels(gpu)]
    if module is not None and too_old:
        gpu = too_old[0]
        module, reason = None, (f"the {gpu.device_kind} GPU (compute capability "
                                f"{gpu.compute_capability}) is older than the kernels' sm_80; "
                                f"jbs runs the reference path on it")
    if module is not None and not gpus:
        reason = "the CUDA extension is compiled and registered, but jax sees no GPU"
    return BackendInfo(cuda_kernels=module is not None, reason=reason, jax_version=jax.__version__,
                       extension_built_against=built, gpu_present=bool(gpus))
