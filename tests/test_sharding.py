"""The ops on several devices the ways JAX offers besides jit over an Auto mesh (tested in
test_lowering.py): ``shard_map`` bodies, whose types track what varies over devices, and meshes
with Explicit axes (``jax.make_mesh``'s default from jax 0.11). Each script runs on 4 CPU
devices through the reference lowering, against the same math on dense matrices."""

from helpers import run_on_four_host_devices

COMMON = """
import numpy as np, jax, jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
import jbs
assert len(jax.devices()) == 4
rng = np.random.default_rng(0)
normal = lambda *shape: jnp.asarray(rng.standard_normal(shape), jnp.float32)
mm = jbs.BlockSparseMatMul(jbs.layouts.random(4, 6, 0.5, seed=0), 16)
conv = jbs.BlockSparseConv(jbs.layouts.random(2, 3, 0.5, seed=1), 16, (2, 3), padding=((1, 0), (1, 1)))
dense_mm = lambda x, w: x @ mm.to_dense(w)
dense_conv = lambda x, w: jax.lax.conv_general_dilated(x, conv.to_dense(w), (1, 1), ((1, 0), (1, 1)),
                                                       dimension_numbers=("NHWC", "HWIO", "NHWC"))
x, w = normal(32, 64), normal(*mm.w_shape)
images, kernel = normal(8, 6, 5, 32), normal(*conv.w_shape)
loss = lambda f: lambda x, w: jnp.sum(jnp.sin(f(x, w)))

def close(got, want, what):
    for g, r in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        err = float(jnp.abs(g - r).max() / jnp.abs(r).max())
        assert err < 1e-5, (what, err)
"""

SHARD_MAP_SCRIPT = COMMON + """
mesh = jax.make_mesh((4,), ("data",), axis_types=(AxisType.Auto,))

def grads(f, specs, check_vma):
    body = lambda *a: jax.lax.psum(loss(f)(*a), "data")
    return jax.jit(jax.grad(jax.shard_map(body, mesh=mesh, in_specs=specs, out_specs=P(),
                                          check_vma=check_vma), (0, 1)))

per_example = lambda f: lambda x, w: jax.vmap(f)(x, w)
cases = [("matmul", mm, dense_mm, (x, w), (P("data"), P())),
         ("conv", conv, dense_conv, (images, kernel), (P("data"), P())),
         ("vmap", per_example(mm), per_example(dense_mm), (normal(8, 5, 64), normal(8, *mm.w_shape)),
          (P("data"), P("data")))]
for name, op, dense, args, specs in cases:
    for check_vma in (True, False):
        # The replicated weight's gradient is summed over the devices exactly as with dense math.
        close(grads(op, specs, check_vma)(*args), grads(dense, specs, check_vma)(*args), (name, check_vma))
    # Per-device gradients, then a mean: the convention must match dense math's as well.
    per_device = lambda f: jax.shard_map(lambda *a: jax.lax.pmean(jax.grad(loss(f), 1)(*a), "data"),
                                         mesh=mesh, in_specs=specs, out_specs=P())
    close(jax.jit(per_device(op))(*args), jax.jit(per_device(dense))(*args), (name, "pmean"))
tangent = jax.shard_map(lambda x, w: jax.jvp(lambda w: mm(x, w), (w,), (w,))[1], mesh=mesh,
                        in_specs=(P("data"), P()), out_specs=P("data"))
close(tangent(x, w), dense_mm(x, w), "jvp")
print("shard_map ok")
"""


def test_shard_map_gradients_match_dense_math():
    """Inside shard_map (check_vma on and off) a replicated weight's gradient is summed over the
    devices, the activation's gradient keeps its type, and per-device grads then pmean agree with
    the same code on dense matrices; for the matmul, the convolution and vmapped weights."""
    assert "shard_map ok" in run_on_four_host_devices(SHARD_MAP_SCRIPT)


EXPLICIT_SCRIPT = COMMON + """
mesh = jax.make_mesh((4,), ("data",), axis_types=(AxisType.Explicit,))
batch = NamedSharding(mesh, P("data"))
for name, op, dense, (a, b) in [("matmul", mm, dense_mm, (x, w)), ("conv", conv, dense_conv, (images, kernel))]:
    sharded = jax.device_put(a, batch)
    for how, run in [("jit", jax.jit(op)), ("eager", op)]:
        y = run(sharded, b)
        assert y.sharding.spec[0] == "data", (name, how, y.sharding)
        close(y, dense(a, b), (name, how))
    with jax.set_mesh(mesh):
        got = jax.jit(jax.grad(loss(op), (0, 1)))(sharded, b)
    assert got[0].sharding.spec[0] == "data", (name, got[0].sharding)
    close(got, jax.grad(loss(dense), (0, 1))(a, b), (name, "grad"))
print("explicit ok")
"""


def test_explicit_mesh_axes():
    """Under a mesh with Explicit axes, eager, jitted and differentiated ops take a batch sharded
    over the devices, keep it sharded and give the dense results."""
    assert "explicit ok" in run_on_four_host_devices(EXPLICIT_SCRIPT)


CUDA_EXPLICIT_SCRIPT = """
import numpy as np, jax, jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
import jbs
from jbs._src import lowering
lowering.register_cuda()  # lower for CUDA on CPU devices: no GPU needed to see the partitioning
mesh = jax.make_mesh((4,), ("data",), axis_types=(AxisType.Explicit,))
mm = jbs.BlockSparseMatMul(np.array([[1, 0, 1], [1, 1, 0]], bool), 16)
conv = jbs.BlockSparseConv(np.array([[1, 0, 1], [1, 1, 0]], bool), 16, (2, 3), 2, ((1, 0), (2, 0)))
for op, shape in [(mm, (64, 32)), (conv, (8, 7, 6, 32))]:
    x = jax.device_put(jnp.ones(shape, jnp.bfloat16), NamedSharding(mesh, P("data")))
    w = jnp.ones(op.w_shape, jnp.bfloat16)
    step = jax.jit(jax.grad(lambda x, w: jnp.sum(op(x, w) ** 2), argnums=(0, 1)))
    print(step.trace(x, w).lower(lowering_platforms=("cuda",)).as_text())
"""


def test_explicit_mesh_cuda_lowering_partitions_each_kernel():
    """Under Explicit axes each CUDA kernel call is still wrapped for XLA's partitioner, as under
    Auto ones (test_lowering.py), so a sharded batch is split rather than gathered."""
    stdout = run_on_four_host_devices(CUDA_EXPLICIT_SCRIPT)
    partitioned_calls = [line for line in stdout.splitlines() if "CustomSPMDPartitioning" in line]
    assert len(partitioned_calls) == 6, stdout[-3000:]  # fwd, dx and dw of the matmul and the conv
