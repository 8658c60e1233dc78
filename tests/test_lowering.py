"""The CUDA lowering, checked on any machine by lowering for the CUDA platform (no GPU needed):
each primitive becomes its FFI custom call, with only the tables it reads, int32 attributes, and
a Shardy sharding rule that lets sharded rows pass through (and sums them in dw)."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest
import jax
import jax.numpy as jnp

import jbs
from jbs._src import lowering
from jbs._src.conv_geometry import ConvGeometry
from helpers import run_on_four_host_devices, with_cuda_rules


@pytest.fixture(scope="module")
def cuda_text():
    return with_cuda_rules(_lower_step)


def _lower_step():
    layout = np.array([[1, 0, 1], [1, 1, 0]], bool)
    bsmm = jbs.BlockSparseMatMul(layout, 16)
    step = jax.jit(jax.grad(lambda x, w: jnp.sum(bsmm(x, w) ** 2), argnums=(0, 1)))
    lowered = step.trace(jnp.ones((8, 32), jnp.bfloat16), jnp.ones(bsmm.w_shape, jnp.bfloat16))
    return lowered.lower(lowering_platforms=("cuda",)).as_text()


def test_conv_lowers_to_the_implicit_gemm_calls():
    text = with_cuda_rules(_lower_conv_step)
    for target in ("jbs_bsconv_fwd", "jbs_bsconv_dx", "jbs_bsconv_dw"):
        line = custom_call(text, target)
        assert "geometry = dense<" in line and "block_size = 8 : i32" in line
    assert "jbs_bsmm" not in text


def _lower_conv_step():
    conv = jbs.BlockSparseConv(np.array([[1, 0, 1], [1, 1, 0]], bool), 8, (2, 3), 2, ((1, 0), (2, 0)))
    step = jax.jit(jax.grad(lambda x, w: jnp.sum(conv(x, w) ** 2), argnums=(0, 1)))
    lowered = step.trace(jnp.ones((2, 7, 6, 16), jnp.bfloat16), jnp.ones(conv.w_shape, jnp.bfloat16))
    return lowered.lower(lowering_platforms=("cuda",)).as_text()


def custom_call(text, target):
    lines = [line for line in text.splitlines() if f"custom_call @{target}(" in line]
    assert len(lines) == 1, f"expected one {target} call"
    return lines[0]


@pytest.mark.parametrize("target,operands", [("jbs_bsmm_fwd", 15), ("jbs_bsmm_dx", 15), ("jbs_bsmm_dw", 5)])
def test_each_primitive_lowers_to_its_custom_call(cuda_text, target, operands):
    line = custom_call(cuda_text, target)
    args = re.search(rf"@{target}\(([^)]*)\)", line).group(1)
    assert len(args.split(",")) == operands
    assert "block_size = 16 : i32" in line and "precision = 0 : i32" in line


def test_gpus_older_than_sm80_lower_to_the_reference(monkeypatch):
    """A GPU the kernels were not built for (a T4 of a free Colab runtime: sm_75) gets the
    reference lowering instead of custom calls that would fail to launch, and backend_info
    says so; sm_80 and newer, and devices without a compute capability, get the kernels."""
    from types import SimpleNamespace
    from jbs._src import extension

    gpu = lambda capability: SimpleNamespace(device_kind="Tesla T4", compute_capability=capability)
    assert not extension.runs_kernels(gpu("7.5")) and not extension.runs_kernels(gpu("7.0"))
    assert all(extension.runs_kernels(gpu(c)) for c in ("8.0", "8.6", "9.0", "10.0", "12.0"))
    assert extension.runs_kernels(jax.devices("cpu")[0])

    monkeypatch.setattr(extension, "runs_kernels", lambda device: False)
    text = with_cuda_rules(_lower_step) + with_cuda_rules(_lower_conv_step)
    assert "custom_call @jbs" not in text, "an old GPU was given the kernels"
    assert "dot_general" in text  # the reference's block products

    monkeypatch.setattr(extension, "load", lambda: (object(), "registered", "0.0"))
    monkeypatch.setattr(extension, "_gpus", lambda: [gpu("7.5")])
    info = extension.backend_info()
    assert not info.cuda_kernels and info.gpu_present
    assert "Tesla T4" in info.reason and "7.5" in info.reason and "reference" in str(info)


def test_export_for_cuda_with_the_disabled_checks_jbs_names():
    """jax.export for CUDA refuses jbs's custom calls unless told; jbs.export_disabled_checks()
    is what it needs, and names every target the extension registers."""
    from jbs._src import extension
    if not extension.cuda_available():
        pytest.skip("needs the compiled CUDA extension (no GPU needed)")
    assert sorted(extension.FFI_TARGETS) == sorted(extension.load()[0].registrations())
    bsmm = jbs.BlockSparseMatMul(np.array([[1, 0, 1], [1, 1, 0]], bool), 16)
    conv = jbs.BlockSparseConv(np.array([[1, 0, 1], [1, 1, 0]], bool), 16, (2, 3))
    step = jax.jit(jax.grad(lambda x, w, v, k: jnp.sum(bsmm(x, w) ** 2) + jnp.sum(conv(v, k) ** 2),
                            argnums=(0, 1, 2, 3)))
    args = (jnp.ones((8, 32), jnp.bfloat16), jnp.ones(bsmm.w_shape, jnp.bfloat16),
            jnp.ones((2, 5, 6, 32), jnp.bfloat16), jnp.ones(conv.w_shape, jnp.bfloat16))
    with pytest.raises(ValueError, match="jbs_bsmm_fwd"):
        jax.export.export(step, platforms=["cuda"])(*args)
    exported = jax.export.export(step, platforms=["cuda"], disabled_checks=jbs.export_disabled_checks())(*args)
    text = exported.mlir_module()
    assert exported.platforms == ("cuda",)
    assert all(f"@{target}(" in text for target in extension.FFI_TARGETS)


def test_cuda_without_the_extension_warns_that_the_reference_runs():
    """Lowering for CUDA where the extension did not load (JBS_DISABLE_CUDA here) takes the
    reference path, and says so once."""
    script = (
        "import warnings, numpy as np, jax, jax.numpy as jnp, jbs\n"
        "bsmm = jbs.BlockSparseMatMul(np.array([[1, 0, 1], [1, 1, 0]], bool), 16)\n"
        "f = jax.jit(lambda x, w: bsmm(x, w) + bsmm(x, w))\n"
        "args = (jnp.ones((8, 32), jnp.bfloat16), jnp.ones(bsmm.w_shape, jnp.bfloat16))\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    text = f.trace(*args).lower(lowering_platforms=('cuda',)).as_text()\n"
        "    f.trace(*args).lower(lowering_platforms=('cpu',))\n"
        "print(len(caught), caught[0].message if caught else '')\n"
        "print('custom_call @jbs' in text, 'dot_general' in text)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, JBS_DISABLE_CUDA="1", JAX_PLATFORMS="cpu"))
    assert done.returncode == 0, done.stderr[-3000:]
    count_and_message, kernels_and_reference = done.stdout.strip().splitlines()[-2:]
    assert count_and_message.startswith("1 ") and "JBS_DISABLE_CUDA" in count_and_message
    assert kernels_and_reference == "False True"


PARTITION_SCRIPT = """
import numpy as np, jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import jbs
from jbs._src import reference, sharding
assert len(jax.devices()) == 4
bsmm = jbs.BlockSparseMatMul(np.array([[1, 0, 1], [1, 1, 0]], bool), 8, precision="highest")
t = [jnp.asarray(a) for a in bsmm.tables]
# Stand-ins for the FFI calls, with the same operands: the partitioning is what is tested.
fwd = sharding.partitioned(lambda x, w, *tab: reference.forward(x, w, *tab, precision=1), rows_in_output=True)
dw = sharding.partitioned(lambda x, dy, *tab: reference.weight_grad(x, dy, *tab, precision=1), rows_in_output=False)
rng = np.random.default_rng(0)
x = jnp.asarray(rng.standard_normal((1, 64, 16)), jnp.float32)
w = jnp.asarray(rng.standard_normal((1,) + bsmm.w_shape), jnp.float32)
dy = jnp.asarray(rng.standard_normal((1, 64, 24)), jnp.float32)
mesh = Mesh(np.array(jax.devices()), ("data",))
rows = NamedSharding(mesh, P(None, "data"))
xs, dys = jax.device_put(x, rows), jax.device_put(dy, rows)
step = jax.jit(lambda x, w, dy: (fwd(x, w, *t[:5]), dw(x, dy, *t[:5])))
hlo = step.lower(xs, w, dys).compile().as_text()
assert "all-gather" not in hlo, "rows were gathered"
assert "all-reduce" in hlo, "dw partials were not summed"
y, g = step(xs, w, dys)
assert y.sharding.spec[1] == "data", y.sharding
np.testing.assert_allclose(y, reference.forward(x, w, *t[:5], precision=1), rtol=1e-5, atol=1e-5)
np.testing.assert_allclose(g, reference.weight_grad(x, dy, *t[:5], precision=1), rtol=1e-5, atol=1e-5)
# Rows that do not split evenly (62 over 4 devices, from slicing inside jit): the padding
# of the last shard must not reach the dw sum.
uneven = jax.jit(lambda x, w, dy: (fwd(x[:, :62], w, *t[:5]), dw(x[:, :62], dy[:, :62], *t[:5])))
y, g = uneven(xs, w, dys)
np.testing.assert_allclose(y, reference.forward(x[:, :62], w, *t[:5], precision=1), rtol=1e-5, atol=1e-5)
np.testing.assert_allclose(g, reference.weight_grad(x[:, :62], dy[:, :62], *t[:5], precision=1),
                           rtol=1e-5, atol=1e-5)
print("partitioned ok")
"""


def test_row_partitioning_on_four_host_devices():
    """The custom partitioning of the kernels, with reference stand-ins on 4 CPU devices: rows
    stay sharded through fwd, dw partials are all-reduced, results equal the unsharded ones."""
    stdout = run_on_four_host_devices(PARTITION_SCRIPT)
    assert "partitioned ok" in stdout


CUDA_SHARDED_SCRIPT = """
import numpy as np, jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import jbs
from jbs._src import lowering
lowering.register_cuda()  # lower for CUDA on CPU devices: no GPU needed to see the partitioning
bsmm = jbs.BlockSparseMatMul(np.array([[1, 0, 1], [1, 1, 0]], bool), 16)
mesh = Mesh(np.array(jax.devices()), ("data",))
x = jax.device_put(jnp.ones((64, 32), jnp.bfloat16), NamedSharding(mesh, P("data")))
w = jax.device_put(jnp.ones(bsmm.w_shape, jnp.bfloat16), NamedSharding(mesh, P()))
step = jax.jit(jax.grad(lambda x, w: jnp.sum(bsmm(x, w) ** 2), argnums=(0, 1)))
print(step.trace(x, w).lower(lowering_platforms=("cuda",)).as_text())
conv = jbs.BlockSparseConv(np.array([[1, 0, 1], [1, 1, 0]], bool), 16, (2, 3), 2, ((1, 0), (2, 0)))
images = jax.device_put(jnp.ones((8, 7, 6, 32), jnp.bfloat16), NamedSharding(mesh, P("data")))
kernel = jax.device_put(jnp.ones(conv.w_shape, jnp.bfloat16), NamedSharding(mesh, P()))
step = jax.jit(jax.grad(lambda x, w: jnp.sum(conv(x, w) ** 2), argnums=(0, 1)))
print(step.trace(images, kernel).lower(lowering_platforms=("cuda",)).as_text())
"""


def test_sharded_cuda_lowering_partitions_each_kernel():
    """On several devices each CUDA kernel call, the convolutions' too, is wrapped for XLA's
    partitioner (so a sharded batch is split, not all-gathered). jax only hands the device assignment that this needs to
    lowerings of jaxprs holding registered primitives: this checks that ours are registered."""
    stdout = run_on_four_host_devices(CUDA_SHARDED_SCRIPT)
    partitioned_calls = [line for line in stdout.splitlines() if "CustomSPMDPartitioning" in line]
    assert len(partitioned_calls) == 6, stdout[-3000:]  # fwd, dx and dw of the matmul and the conv
    assert all("sdy.sharding_rule" in line for line in partitioned_calls)


CONV_SHARDED_SCRIPT = """
import numpy as np, jax, jax.numpy as jnp
from jax.interpreters import mlir
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import jbs
from jbs._src import lowering, reference, sharding
assert len(jax.devices()) == 4
layout = np.array([[1, 0, 1], [1, 1, 0]], bool)
ops = [jbs.BlockSparseConv(layout, 8, (2, 3), 2, ((1, 0), (2, 0)), precision="highest"),
       jbs.BlockSparseConvTranspose(layout, 8, (3, 3), 2, precision="highest")]
kernels = {"jbs_bsconv_fwd": reference.forward, "jbs_bsconv_dx": reference.input_grad,
           "jbs_bsconv_dw": reference.weight_grad}
def ffi_stand_in(target, block_size, precision, geometry, a, b, *kept_tables):
    # The kernels' function in reference math (all of the op's tables, by closure): what is
    # tested is the production CUDA rule around it, which partitions the call by images. (An
    # inner jit keeps the gather's index constants out of the partitioned body, which takes
    # no captured arrays.)
    gather = geometry.transposed() if target == "jbs_bsconv_dx" else geometry
    kernel = lambda a, b: kernels[target](gather.gather(a), b, *op_tables[:5], precision=precision)
    return jax.jit(kernel)(a, b)
lowering._conv_ffi_call = ffi_stand_in
sharding.require_device_assignment(*lowering._OPS)  # as register_cuda does
for prim in lowering._OPS:
    mlir.register_lowering(prim, lowering._cuda_rule(prim), platform="cpu")
mesh = Mesh(np.array(jax.devices()), ("data",))
images = NamedSharding(mesh, P("data"))
rng = np.random.default_rng(0)
for op in ops:
    op_tables = op._tables
    x = jnp.asarray(rng.standard_normal((8, 7, 6, 16)), jnp.float32)
    w = jnp.asarray(rng.standard_normal(op.w_shape), jnp.float32)
    loss = lambda x, w: jnp.sum(jnp.sin(op(x, w)))
    step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
    single = step(x, w)
    xs = jax.device_put(x, images)
    lowered = step.lower(xs, w)
    # XLA could partition the stand-in's plain ops by itself, but not the real kernel call: the
    # rule must wrap each of the three calls for the partitioner.
    assert lowered.as_text().count("@CustomSPMDPartitioning(") == 3, "a kernel call is not partitioned"
    compiled = lowered.compile()
    hlo = compiled.as_text()
    assert "all-gather" not in hlo, "the images were gathered before a kernel"
    assert "all-reduce" in hlo, "the weight gradient's partials were not summed"
    sharded = compiled(xs, w)
    assert sharded[1][0].sharding.spec[0] == "data", sharded[1][0].sharding
    for a, b in zip(jax.tree.leaves(single), jax.tree.leaves(sharded)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    y = jax.jit(op)(xs, w)
    assert y.sharding.spec[0] == "data", y.sharding
    np.testing.assert_allclose(y, op(x, w), rtol=1e-5, atol=1e-5)
    # 5 images over 4 devices (sliced inside jit): the padding image of the last shard must not
    # reach the weight gradient's sum.
    uneven = jax.jit(jax.value_and_grad(lambda x, w: loss(x[:5], w), argnums=(0, 1)))
    for a, b in zip(jax.tree.leaves(step(x[:5], w)), jax.tree.leaves(uneven(xs, w))):
        np.testing.assert_allclose(a, np.asarray(b)[:5] if b.shape == (8, 7, 6, 16) else b,
                                   rtol=1e-5, atol=1e-5)
print("conv partitioned ok")
"""


def test_conv_partitioning_by_images_on_four_host_devices():
    """The CUDA rule of the convolutions, its kernel call replaced by reference math, on 4 CPU
    devices: a batch sharded over devices stays sharded through the strided conv and the
    transposed conv (whose input and output images differ in size), the weight gradient's
    partials are all-reduced, and every result equals the single-device one."""
    stdout = run_on_four_host_devices(CONV_SHARDED_SCRIPT)
    assert "conv partitioned ok" in stdout


def _fwd_scratch_floats(block_size, rows, dtype=jnp.bfloat16, precision=None, layout=None):
    layout = np.array([[1, 0, 1], [1, 1, 0]], bool) if layout is None else layout
    bsmm = jbs.BlockSparseMatMul(layout, block_size, precision=precision)
    fwd = jax.jit(bsmm).trace(jnp.ones((rows, bsmm.shape[0]), dtype), jnp.ones(bsmm.w_shape, dtype))
    line = custom_call(with_cuda_rules(lambda: fwd.lower(lowering_platforms=("cuda",)).as_text()),
                       "jbs_bsmm_fwd")
    return int(re.search(r"-> \(tensor<[^>]*>, tensor<(\d+)xf32>\)", line).group(1))


@pytest.mark.parametrize("block_size,setting,packed", [(32, "", True), (16, "", True), (64, "", True),
                                                       (16, "0", False), (32, "0", False)])
def test_large_n_scratch_holds_the_packed_activation(monkeypatch, block_size, setting, packed):
    """The fwd/dx scratch result has room for the packed activation (300 rows padded to 512, 2 *
    bs columns) where the wgmma kernel would pack: blocks of 16 or more, bf16 or fp32 (as tf32)
    at the default precision, unless JBS_PACK=0; none for fp32 at HIGHEST (3xTF32 stays on the
    mma.sync kernels) or small N."""
    monkeypatch.setenv("JBS_PACK", setting)
    monkeypatch.setenv("JBS_GROUP_TMA", "0")  # at bs 32 and 64 it takes every call from 65 rows
    monkeypatch.setenv("JBS_MID_SLICES", "0")  # (the slices' partials, tested below, would fill it)
    room = 512 * 2 * block_size * 2 // 4
    assert (_fwd_scratch_floats(block_size, 300) >= room) == packed
    assert (_fwd_scratch_floats(block_size, 300, jnp.float32) >= 2 * room) == packed
    assert _fwd_scratch_floats(block_size, 300, jnp.float32, "highest") < room
    assert _fwd_scratch_floats(block_size, 64) < room


@pytest.mark.parametrize("block_size,env,packed", [
    (32, {}, False), (64, {}, False), (16, {}, True), (32, {"JBS_GROUP_TMA": "0"}, True),
    (64, {"JBS_GROUPS": "1"}, True), (32, {"JBS_WGMMA": "1"}, True),
    (64, {"JBS_GROUPS": "1", "JBS_GROUP_TMA": "1"}, False)])
def test_large_n_scratch_skips_the_packed_copy_for_the_tma_kernel(monkeypatch, block_size, env, packed):
    """From 512 rows, 16-bit fwd/dx at bs 32 and 64 take the TMA-fed group kernel, which reads the
    row-major activation: no room for a packed copy, unless a switch picks an older group
    kernel (cuda/matmul/launch_large_n.cuh: use_group_tma, the same rule)."""
    for name in ("JBS_GROUP_TMA", "JBS_GROUPS", "JBS_WGMMA", "JBS_PACK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    room = 768 * 2 * block_size * 2 // 4
    assert (_fwd_scratch_floats(block_size, 600) >= room) == packed


@pytest.mark.parametrize("block_size,precision,setting,copy", [
    (32, None, "", True), (32, "highest", "", False), (64, None, "", True), (64, "highest", "", False),
    (16, None, "", False), (32, None, "0", False), (64, None, "0", False)])
def test_large_n_fp32_forward_scratch_holds_the_transposed_weights(monkeypatch, block_size, precision,
                                                                   setting, copy):
    """The TMA kernel's fp32 forward (tf32, bs 32 and 64) reads a transposed copy of the weight blocks
    from the scratch result: room for it (nnz * bs^2 floats) where that kernel takes the call,
    none where it does not (HIGHEST, bs 16, JBS_GROUP_TMA=0; the activation's packed
    copy then fills the scratch, so the layout here is tall enough to tell them apart)."""
    for name in ("JBS_GROUPS", "JBS_WGMMA", "JBS_PACK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("JBS_GROUP_TMA", setting)
    layout = np.ones((40, 2), bool)
    floats = _fwd_scratch_floats(block_size, 600, jnp.float32, precision, layout)
    packed = 768 * 40 * block_size
    assert (floats == 80 * block_size * block_size) == copy
    assert (floats >= packed) == (not copy and precision is None)


@pytest.mark.parametrize("block_size,dtype,rows,setting,slices", [
    (32, jnp.bfloat16, 300, "", 8), (64, jnp.bfloat16, 100, "", 8), (32, jnp.float32, 300, "", 8),
    (16, jnp.bfloat16, 300, "", 8), (16, jnp.float32, 100, "", 8), (32, jnp.bfloat16, 300, "0", 0),
    (32, jnp.bfloat16, 600, "", 0), (32, jnp.bfloat16, 64, "", 0)])
def test_mid_n_scratch_holds_the_group_kernel_slices(monkeypatch, block_size, dtype, rows, setting, slices):
    """Mid N (64 < rows < 512): the TMA kernel (bs 32, 64) or the wgmma group kernel (bs 16)
    cuts each group's items into slices that fill the SMs (one group here, of 2 x 3 blocks:
    132 // row tiles, at most 8), whose fp32 partials (slices, rows, 3 * bs) the scratch result
    holds after what the kernel keeps first, on a 256-byte boundary: the fp32 TMA forward's
    transposed weights (4 blocks), the wgmma kernel's packed activation (rows to 256, 2 * bs
    columns); none with JBS_MID_SLICES=0, from 512 rows or at small N (cuda/matmul/
    launch_large_n.cuh: mid_n_slices)."""
    for name in ("JBS_GROUP_TMA", "JBS_GROUPS", "JBS_WGMMA", "JBS_PACK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("JBS_MID_SLICES", setting)
    floats = _fwd_scratch_floats(block_size, rows, dtype)
    partials = slices * rows * 3 * block_size
    itemsize = jnp.dtype(dtype).itemsize
    if not slices:
        assert floats < 2 * rows * 3 * block_size
    elif block_size == 16:
        packed = -(-rows // 256) * 256 * 2 * block_size * itemsize // 4
        assert floats == -(-packed // 64) * 64 + partials
        monkeypatch.setenv("JBS_PACK", "0")  # the row-major activation: the partials alone
        assert _fwd_scratch_floats(block_size, rows, dtype) == partials
    elif dtype == jnp.float32:
        assert floats == -(-4 * block_size * block_size // 64) * 64 + partials
    else:
        assert floats == partials


@pytest.mark.parametrize("block_size,dtype,setting,tiled", [
    (8, jnp.bfloat16, "", True), (8, jnp.bfloat16, "0", False), (16, jnp.bfloat16, "", False),
    (8, jnp.float32, "", False), (32, jnp.float32, "1", True), (16, jnp.bfloat16, "1", True)])
def test_small_n_scratch_holds_the_tile_major_activation(monkeypatch, block_size, dtype, setting, tiled):
    """Small N: the fwd/dx scratch result has room for the stream kernel's tile-major copy of
    the activation (40 rows of 2 * bs columns, cuda/matmul/tile_major.cuh) where its tile rows
    are under a 32-byte sector (bf16 at bs 8), or everywhere with JBS_TILE_MAJOR=1; never with
    JBS_TILE_MAJOR=0, nor at large N."""
    monkeypatch.setenv("JBS_TILE_MAJOR", setting)
    room = 40 * 2 * block_size * jnp.dtype(dtype).itemsize // 4
    assert (_fwd_scratch_floats(block_size, 40, dtype) >= room) == tiled
    monkeypatch.setenv("JBS_PACK", "0")
    monkeypatch.setenv("JBS_MID_SLICES", "0")
    assert _fwd_scratch_floats(block_size, 300, dtype) < 300 * 2 * block_size * jnp.dtype(dtype).itemsize // 4


@pytest.mark.parametrize("block_size,density,setting,room", [
    (16, 1.0, "", True), (32, 1.0, "", True), (16, 1.0, "0", False), (16, 0.3, "", False),
    (16, 0.3, "1", True), (8, 1.0, "", False), (64, 1.0, "", False)])
def test_small_n_scratch_sizes_the_column_group_partials(monkeypatch, block_size, density, setting, room):
    """Small N: the scratch rule of the column-group kernel (cuda/matmul/bsmm_stream_group_kernel.cuh)
    gives 70 union items per group of 128 columns 2 slices of 32 x 128 fp32 partials after the
    counters where each activation tile feeds >= 3.5 blocks at bs 16 or 32, or with
    JBS_STREAM_GROUPS=1; nothing with JBS_STREAM_GROUPS=0, at bs 8 or 64 by default, at low
    reuse, or at large N."""
    from jbs._src import tables as tables_lib

    monkeypatch.setenv("JBS_STREAM_GROUPS", setting)
    layout = np.random.default_rng(0).random((70, 128 // block_size)) < density
    layout[:, 0] = True  # every input block in the union
    t = tables_lib.tables_for(layout, block_size)
    size = lambda rows: lowering._stream_group_scratch_floats(
        3, rows, block_size, t.fwd_items.shape[0], t.fwd_group_offsets, t.fwd_group_items)
    assert size(29) == (4 + 3 * 2 * 32 * 128 if room else 0)
    assert size(65) == 0


@pytest.mark.parametrize("itemsize,block_size,density,setting,room", [
    (4, 32, 1.0, "", True), (4, 32, 0.2, "", False), (2, 32, 1.0, "", False), (4, 16, 1.0, "", False),
    (2, 8, 0.2, "1", True), (4, 32, 1.0, "0", False)])
def test_small_n_scratch_sizes_the_warp_specialized_partials(monkeypatch, itemsize, block_size, density,
                                                             setting, room):
    """Small N: the scratch rule of the warp-specialized group kernel
    (cuda/matmul/bsmm_stream_ws_kernel.cuh): 4 counters per group and weight group (padded to
    4), then num_groups + 264 partial slots of row tile x 128 fp32, by default for fp32 at bs 32
    where each activation tile feeds >= 2 blocks, at any reuse with JBS_STREAM_WS=1; nothing
    with JBS_STREAM_WS=0, elsewhere by default, or at large N."""
    from jbs._src import tables as tables_lib

    monkeypatch.setenv("JBS_STREAM_WS", setting)
    layout = np.random.default_rng(0).random((70, 3 * 128 // block_size)) < density
    layout[:, 0] = True
    t = tables_lib.tables_for(layout, block_size)
    size = lambda rows: lowering._stream_ws_scratch_floats(
        2, rows, itemsize, block_size, t.fwd_items.shape[0], t.fwd_group_offsets, t.fwd_group_items)
    assert size(29) == (24 + 2 * (3 + 264) * 32 * 128 if room else 0)
    assert size(9) == (24 + 2 * (3 + 264) * 16 * 128 if room else 0)
    assert size(65) == 0


@pytest.mark.parametrize("itemsize,block_size,precision,setting,room", [
    (2, 32, 0, "1", True), (2, 32, 1, "1", True), (4, 64, 0, "1", True), (2, 16, 0, "1", True),
    (4, 16, 1, "1", False), (2, 8, 0, "1", False), (2, 32, 0, "", False), (2, 32, 0, "0", False),
    (4, 32, 0, "1", True)])
def test_small_n_scratch_sizes_the_even_split_pieces(monkeypatch, itemsize, block_size, precision,
                                                     setting, room):
    """Small N: the scratch rule of the even-split kernel (cuda/matmul/bsmm_stream_even_kernel.cuh):
    two pieces of row tile x bs fp32 per weight group and warp, for at most min(nnz, 1280)
    warps, after (16-bit types, fp32 at bs 32) the swizzled walk's tile-major activation, row
    tile rows per tile, 256-byte aligned; with JBS_STREAM_EVEN=1 at bs 16-64 (by default only with >= 24 MiB
    of weights, which 5000 blocks are not); never at bs 8, for fp32 at HIGHEST, at large N, or
    with =0."""
    monkeypatch.setenv("JBS_STREAM_EVEN", setting)
    monkeypatch.delenv("JBS_STREAM_EVEN_SWIZZLE", raising=False)
    num_cols = 9
    in_groups, in_cols = 3, 40 * block_size
    size = lambda rows, nnz: lowering._stream_even_scratch_floats(
        2, rows, itemsize, block_size, num_cols, nnz, precision, in_groups, in_cols)
    tiled = lambda row_tile: (-(-in_groups * in_cols * row_tile * itemsize // 256) * 256 // 4
                              if itemsize == 2 or block_size == 32 else 0)
    assert size(29, 5000) == (tiled(32) + 2 * 2 * 1280 * 32 * block_size if room else 0)
    assert size(9, 300) == (tiled(16) + 2 * 2 * 300 * 16 * block_size if room else 0)
    assert size(65, 5000) == 0
    assert lowering._stream_even_scratch_floats(2, 32, itemsize, block_size, 4097, 5000, precision,
                                                in_groups, in_cols) == 0
    monkeypatch.setenv("JBS_STREAM_EVEN_SWIZZLE", "0")  # the walk with row-major tiles: no copy
    assert size(29, 5000) == (2 * 2 * 1280 * 32 * block_size if room else 0)


@pytest.mark.parametrize("itemsize,block_size,rows,setting,room", [
    (2, 32, 32, "1", True), (2, 16, 7, "1", True), (4, 32, 32, "1", True), (4, 32, 33, "1", False),
    (2, 64, 32, "1", False), (4, 16, 32, "1", False), (2, 32, 32, "", False), (2, 32, 32, "0", False)])
def test_small_n_scratch_reserves_the_packed_walks_pieces_at_any_size(monkeypatch, itemsize, block_size, rows,
                                                                      setting, room):
    """With JBS_STREAM_EVEN_PACKED=1 a table that came packed (tables._packing) takes the
    even-split walk's scratch whatever its bytes (1000 blocks here), for 8 warps in each of its
    132 CTAs (launch_small_n.cuh: packing_offered), where the walk has a packed variant: 16-bit
    types at bs 16 and 32, fp32 at bs 32 and up to 32 rows; an unpacked table, or the packing
    not asked for, keeps the rule by bytes (none here)."""
    monkeypatch.delenv("JBS_STREAM_EVEN", raising=False)
    monkeypatch.delenv("JBS_STREAM_EVEN_SWIZZLE", raising=False)
    monkeypatch.setenv("JBS_STREAM_EVEN_PACKED", setting)
    size = lambda ctas: lowering._stream_even_scratch_floats(1, rows, itemsize, block_size, 40, 1000, 0, 1,
                                                             40 * block_size, packed_ctas=ctas)
    row_tile = 16 if rows <= 16 else (32 if rows <= 32 else 64)
    tiled = -(-40 * block_size * row_tile * itemsize // 256) * 256 // 4
    assert size(132) == (tiled + 2 * 8 * 132 * row_tile * block_size if room else 0)
    assert size(0) == 0


@pytest.mark.parametrize("itemsize,block_size,nnz,room", [
    (2, 32, 12288, True), (2, 32, 12287, False), (2, 16, 49152, True), (2, 16, 49151, False),
    (2, 64, 10**5, False), (4, 32, 12288, True), (4, 32, 12287, False), (4, 16, 10**5, False),
    (2, 8, 10**6, False)])
def test_small_n_scratch_takes_the_even_split_kernel_by_default_with_enough_weights(
        monkeypatch, itemsize, block_size, nnz, room):
    """Without JBS_STREAM_EVEN the even-split kernel's scratch is reserved for 16-bit weights
    at bs 16 and 32 from 24 MiB on (launch_small_n.cuh kStreamEvenMinBytes: 12288 bf16 blocks of
    32 x 32, 49152 of 16 x 16), and for fp32 at bs 32 from 48 MiB (12288 blocks) up to 32 rows
    (a superset: the kernels leave density 1 to the warp-specialized kernel), where it
    measured faster than the one-column kernel; bs 64 and fp32 at other sizes stay opt-in; with
    JBS_STREAM_EVEN_SWIZZLE=0 fp32 keeps the one-column kernel."""
    monkeypatch.delenv("JBS_STREAM_EVEN", raising=False)
    monkeypatch.delenv("JBS_STREAM_EVEN_SWIZZLE", raising=False)
    size = lambda rows: lowering._stream_even_scratch_floats(1, rows, itemsize, block_size, 384, nnz, 0, 1, 12288)
    assert size(32) == (12288 * 32 * itemsize // 4 + 2 * 1280 * 32 * block_size if room else 0)
    assert size(33) == (12288 * 64 * itemsize // 4 + 2 * 1280 * 64 * block_size if room and itemsize == 2 else 0)
    monkeypatch.setenv("JBS_STREAM_EVEN_SWIZZLE", "0")
    assert size(32) == (2 * 1280 * 32 * block_size if room and itemsize == 2 else 0)


def _group_tables(num_groups: int, items_per_group: int):
    offsets = np.arange(num_groups + 1, dtype=np.int32) * items_per_group
    return offsets, np.zeros((num_groups * items_per_group, 1 + 8), np.int32)


@pytest.mark.parametrize("setting,itemsize,block_size,rows,nnz,union_items,expected", [
    ("", 2, 16, 32, 49152, 12288, 2 * 1280 * 32 * 128),  # reuse 4, 24 MiB: taken
    ("", 2, 16, 16, 49152, 12288, 2 * 1280 * 16 * 128),  # row tile 16
    ("", 2, 16, 32, 49152, 22528, 2 * 1280 * 32 * 128),  # reuse 2.18, 24 MiB (seed at 1/4)
    ("", 2, 16, 32, 36864, 24576, 0),                     # reuse 1.5 < 2 (seed at 1/8)
    ("", 2, 16, 32, 36864, 29696, 0),                     # reuse 1.24 (seed at 1/16)
    ("", 2, 16, 32, 32000, 8000, 0),                      # under 16 MiB
    ("", 2, 8, 32, 1179648, 147456, 2 * 1280 * 32 * 128),  # bs 8, reuse 8 (seed at 1/2)
    ("", 2, 8, 32, 589824, 135168, 0),                    # bs 8, reuse 4.4 < 7
    ("", 2, 16, 33, 49152, 12288, 0),                     # more than 32 rows
    ("", 4, 16, 32, 49152, 12288, 0),                     # fp32 never
    ("", 2, 32, 32, 49152, 12288, 2 * 1280 * 32 * 128),  # bs 32 at reuse 4
    ("", 2, 32, 32, 49152, 24576, 0),                     # ... not at reuse 2
    ("1", 2, 8, 32, 100, 88, 2 * 88 * 32 * 128),          # forced: any reuse, warps <= items
    ("1", 2, 32, 32, 100, 88, 2 * 88 * 32 * 128),         # bs 32 only when forced
    ("0", 2, 16, 32, 49152, 12288, 0),
])
def test_small_n_scratch_of_the_even_split_group_kernel(monkeypatch, setting, itemsize, block_size,
                                                        rows, nnz, union_items, expected):
    """The even-split kernel over column groups (launch_small_n.cuh use_stream_even_group) gets
    two pieces of row tile x 128 floats per warp, for at most 1280 warps, where it would run:
    16-bit types at bs 8, 16 and 32 up to 32 rows, by default with >= 16 MiB of weights and
    union items of >= 2 (bs 16) / 3 (bs 32) / 7 (bs 8) blocks; JBS_STREAM_EVEN_GROUP=1
    forces it and =0 disables it."""
    monkeypatch.setenv("JBS_STREAM_EVEN_GROUP", setting)
    offsets, items = _group_tables(4, union_items // 4)
    size = lowering._stream_even_group_scratch_floats(1, rows, itemsize, block_size, nnz, offsets,
                                                      items)
    assert size == expected


@pytest.mark.parametrize("kernel,strides,padding,dilation,dtype,block_size,setting,row_group,halo", [
    ((3, 3), 1, "SAME", 1, jnp.bfloat16, 32, "", True, True),
    ((2, 3), 1, ((1, 0), (1, 1)), 1, jnp.float16, 16, "", True, True),  # PixelCNN++'s down-shifted conv
    ((3, 3), 1, "SAME", 2, jnp.bfloat16, 16, "", True, True),
    ((3, 3), 1, "SAME", 1, jnp.bfloat16, 32, "no-row-groups", False, True),  # JBS_CONV_ROW_GROUP_DW=0
    ((1, 3), 1, ((0, 0), (2, 0)), 1, jnp.bfloat16, 32, "", False, True),  # 3 taps: not 4, 6 or 9
    ((3, 3), 1, "SAME", 1, jnp.bfloat16, 32, "0", False, False),            # JBS_CONV_HALO=0
    ((1, 1), 1, "SAME", 1, jnp.bfloat16, 32, "", False, False),             # nothing to share
    ((1, 1), 1, "SAME", 1, jnp.bfloat16, 32, "1", False, True),             # ... unless forced
    ((3, 3), 1, "SAME", 1, jnp.float32, 32, "", False, False),              # 16-bit only
    ((3, 3), 1, "SAME", 1, jnp.bfloat16, 64, "", False, False),             # bs 16 and 32 only
    ((3, 3), 2, "SAME", 1, jnp.bfloat16, 32, "", False, False),             # stride 1 only
    ((3, 3), 1, "VALID", 1, jnp.bfloat16, 32, "", False, False),            # output smaller than input
    ((5, 5), 1, "SAME", 1, jnp.bfloat16, 32, "", False, False),             # 25 taps: past 9 accumulators
])
def test_conv_weight_gradient_splits_rows_for_the_halo_kernel(monkeypatch, kernel, strides, padding, dilation,
                                                             dtype, block_size, setting, row_group, halo):
    """The row group dw kernel's CTAs each own a row group of layout blocks for every tap, and the
    halo dw kernel's a layout block, so the lowering splits the rows for those CTAs where C++
    will take those kernels (launch_conv.cuh: use_conv_row_group_dw, use_conv_halo_dw), and for
    nnz CTAs elsewhere."""
    monkeypatch.setenv("JBS_PANEL_DW", "0")  # its 1x1 rule: test_weight_gradient_splits_rows_for_the_panel_dw_kernel
    if setting == "no-row-groups":
        monkeypatch.setenv("JBS_CONV_ROW_GROUP_DW", "0")
        setting = ""
    monkeypatch.setenv("JBS_CONV_HALO", setting)
    conv = jbs.BlockSparseConv(np.ones((2, 2), bool), block_size, kernel, strides, padding, dilation)
    x = jax.ShapeDtypeStruct((64, 32, 32, 2 * block_size), dtype)
    pads, out_hw = conv._pads_and_output((32, 32))
    geometry = ConvGeometry.convolution(conv.kernel_size, (32, 32), out_hw, conv.strides, conv.dilation,
                                        tuple(lo for lo, _ in pads))
    assert lowering._conv_row_group_dw(geometry, dtype, block_size) is row_group
    assert lowering._conv_halo_dw(geometry, dtype, block_size) is halo
    taps = kernel[0] * kernel[1]
    if row_group:  # 4 layout blocks, 2 per row: one group per row at bs 32 and 16
        expected = lowering._row_group_dw_splits(64 * 32 * 32 // 256, 2)
    else:
        expected = lowering._dw_row_splits(64 * 32 * 32, 4 if halo else 4 * taps)

    def lower():
        grad = jax.jit(jax.grad(lambda x, w: jnp.sum(conv(x, w).astype(jnp.float32)), argnums=1))
        traced = grad.trace(jnp.zeros(x.shape, dtype), jnp.zeros(conv.w_shape, dtype))
        return traced.lower(lowering_platforms=("cuda",)).as_text()

    line = custom_call(with_cuda_rules(lower), "jbs_bsconv_dw")
    assert f"row_splits = {expected} : i32" in line


@pytest.mark.parametrize("op", ["conv", "matmul"])
@pytest.mark.parametrize("setting,rows,expected", [
    ("", 65536, 132 // 3),  # 50 units (5 x-chunks x 10 k-blocks) of 20 per CTA: 3 CTAs per row range
    ("0", 65536, 6),        # JBS_PANEL_DW=0: one CTA per block and split, >= 1024 rows each
    ("", 4096, 4),          # too few rows to give every SM 64 rows
    ("1", 4096, 44),        # ... unless forced
])
def test_weight_gradient_splits_rows_for_the_panel_dw_kernel(monkeypatch, op, setting, rows, expected):
    """The panel dw kernel's CTAs each hold the accumulators of up to 20 units at bs 32, so for a
    1x1 conv or a matmul with 320 -> 320 channels and every block (100) the lowering splits the
    rows for 3 CTAs per row range where C++ will take that kernel (launch_panel.cuh:
    use_panel_dw), and for one CTA per block elsewhere (lowering._dw_row_splits)."""
    monkeypatch.setenv("JBS_PANEL_DW", setting)
    layout = np.ones((10, 10), bool)
    if op == "conv":
        module, target = jbs.BlockSparseConv(layout, 32, (1, 1)), "jbs_bsconv_dw"
        x = jnp.zeros((rows // 1024, 32, 32, 320), jnp.bfloat16)
    else:
        module, target = jbs.BlockSparseMatMul(layout, 32), "jbs_bsmm_dw"
        x = jnp.zeros((rows, 320), jnp.bfloat16)

    def lower():
        grad = jax.jit(jax.grad(lambda x, w: jnp.sum(module(x, w).astype(jnp.float32)), argnums=1))
        return grad.trace(x, jnp.zeros(module.w_shape, jnp.bfloat16)).lower(lowering_platforms=("cuda",)).as_text()

    line = custom_call(with_cuda_rules(lower), target)
    assert f"row_splits = {expected} : i32" in line


@pytest.mark.parametrize("nnz,block_size,dtype,expected", [
    (25, 32, jnp.bfloat16, 2),   # 25 units of 20 per CTA
    (12, 32, jnp.bfloat16, 0),   # the large-N dw kernel would read x and dy only 1.2 times
    (50, 16, jnp.float16, 2),    # 50 units of 40 per CTA
    (50, 32, jnp.float32, 0),    # 16-bit types only
    (50, 64, jnp.bfloat16, 0),   # bs 16 and 32 only
])
def test_panel_dw_sets_follow_the_default_rule(monkeypatch, nnz, block_size, dtype, expected):
    """The lowering's copy of use_panel_dw's default for 65536 rows of 320 -> 320 channels."""
    monkeypatch.delenv("JBS_PANEL_DW", raising=False)
    assert lowering._panel_dw_sets(65536, 320, 320, nnz, dtype, block_size) == expected
