import os
import zlib

import numpy as np
import pytest
import jax

jax.config.update("jax_enable_x64", False)


def _gpu_ready() -> bool:
    try:
        import jbs
        info = jbs.backend_info()
        return info.gpu_present and info.cuda_kernels
    except Exception:  # noqa: BLE001 - any failure means: no usable GPU path
        return False


GPU_READY = _gpu_ready()


def pytest_collection_modifyitems(config, items):
    if GPU_READY:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU and the compiled jbs CUDA extension")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# Fresh data on every run; JBS_TEST_SEED=<n> replays a run (the header prints the seed).
SESSION_SEED = int(os.environ.get("JBS_TEST_SEED", np.random.SeedSequence().entropy % 2**31))


def pytest_report_header(config):
    return f"jbs: JBS_TEST_SEED={SESSION_SEED}; GPU kernels active: {GPU_READY}"


@pytest.fixture
def rng(request):
    """Random data of this run's seed, distinct per test."""
    return np.random.default_rng([SESSION_SEED, zlib.crc32(request.node.nodeid.encode())])


@pytest.fixture(autouse=True)
def block_kernels_everywhere(request, monkeypatch):
    """The suite tests the block kernels, so it turns off the dense-dot fallback
    (jbs/_src/dense_fallback.py) that would take some of its large bs 8 / 16 cases; the tests
    marked ``dense_fallback`` test that fallback and set JBS_DENSE_FALLBACK themselves."""
    if "dense_fallback" not in request.keywords:
        monkeypatch.setenv("JBS_DENSE_FALLBACK", "0")
