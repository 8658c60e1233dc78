"""The implicit-GEMM convolution kernels: really used on GPU, no im2col matmul, and forward,
input gradient and weight gradient match float64 for every dtype and block size over strided,
dilated, asymmetrically padded and transposed convolutions."""

import numpy as np
import pytest
import jax
import jax.numpy as jnp
from jax import lax

import jbs
from jbs._src.tables import paired_order, pairs_columns
from helpers import awkward_layout, f64, heavy_column_layout, random_array, rel_error, tolerance
from test_conv import DN

pytestmark = pytest.mark.gpu


def power_law_layout(rng, rows, cols):
    return heavy_column_layout(rng, rows, cols, density=0.2)


def dense_reference(op, x, kernel):
    x, kernel = jnp.asarray(x, jnp.float32), jnp.asarray(kernel, jnp.float32)
    if isinstance(op, jbs.BlockSparseConvTranspose):
        return lax.conv_transpose(x, kernel, op.strides, op.padding, rhs_dilation=op.dilation,
                                  dimension_numbers=DN, precision=lax.Precision.HIGHEST)
    return lax.conv_general_dilated(x, kernel, op.strides, op.padding, rhs_dilation=op.dilation,
                                    dimension_numbers=DN, precision=lax.Precision.HIGHEST)


def test_conv_uses_the_implicit_gemm_kernels(rng):
    conv = jbs.BlockSparseConv(power_law_layout(rng, 4, 3), 16, (3, 3), 2)
    x = random_array(rng, (2, 9, 8, 64), jnp.bfloat16)
    w = random_array(rng, conv.w_shape, jnp.bfloat16)
    step = jax.jit(jax.grad(lambda x, w: jnp.sum(conv(x, w).astype(jnp.float32) ** 2), argnums=(0, 1)))
    hlo = step.lower(x, w).compile().as_text()
    for target in ("jbs_bsconv_fwd", "jbs_bsconv_dx", "jbs_bsconv_dw"):
        assert target in hlo, f"{target} missing from the compiled HLO"
    assert "jbs_bsmm" not in hlo, "the convolution fell back to an im2col matmul"


GEOMETRIES = [  # op, kernel_size, strides, padding, dilation
    (jbs.BlockSparseConv, (3, 3), 1, "SAME", 1),
    (jbs.BlockSparseConv, (2, 3), 1, ((1, 0), (2, 0)), 1),
    (jbs.BlockSparseConv, (3, 2), 2, "VALID", 1),
    (jbs.BlockSparseConv, (3, 3), 2, ((1, 1), (0, 2)), 2),
    (jbs.BlockSparseConv, (1, 1), 1, "SAME", 1),
    (jbs.BlockSparseConv, (3, 2), (2, 1), ((2, 0), (1, 1)), (1, 2)),  # h and w maps differ
    (jbs.BlockSparseConvTranspose, (2, 2), 2, "SAME", 1),
    (jbs.BlockSparseConvTranspose, (3, 3), 2, "SAME", 1),
    (jbs.BlockSparseConvTranspose, (2, 3), (2, 1), "VALID", (1, 2)),
    (jbs.BlockSparseConvTranspose, (3, 2), (1, 2), ((1, 2), (0, 1)), (2, 1)),
]


@pytest.mark.parametrize("op,kernel_size,strides,padding,dilation", GEOMETRIES)
@pytest.mark.parametrize("bs", [8, 16, 32, 64])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16])
def test_three_ops_against_float64(rng, op, kernel_size, strides, padding, dilation, bs, dtype):
    for precision in ([None, "highest"] if dtype == jnp.float32 else [None]):
        conv = op(power_law_layout(rng, 3, 4), bs, kernel_size, strides, padding, dilation,
                  precision=precision)
        check_three_ops(rng, conv, (3, 13, 10, 3 * bs), dtype, precision)  # 390 pixels: partial tiles


def check_three_ops(rng, conv, x_shape, dtype, precision=None):
    """y, dx and dw of the jitted conv against the dense float32-HIGHEST convolution."""
    x = random_array(rng, x_shape, dtype)
    w = random_array(rng, conv.w_shape, dtype)
    y, pullback = jax.jit(lambda x, w: jax.vjp(conv, x, w))(x, w)
    g = random_array(rng, y.shape, dtype)
    dx, dw = jax.jit(pullback)(g)
    kernel = conv.to_dense(jnp.asarray(w, jnp.float32))
    ref_y, ref_pullback = jax.vjp(lambda x, k: dense_reference(conv, x, k), jnp.asarray(x, jnp.float32), kernel)
    ref_dx, ref_dkernel = ref_pullback(jnp.asarray(g, jnp.float32))
    tol = tolerance(dtype, precision)
    assert rel_error(y, f64(ref_y)) < tol
    assert rel_error(dx, f64(ref_dx)) < tol
    assert rel_error(dw, f64(conv.from_dense(ref_dkernel))) < tol


def test_conv_is_bitwise_deterministic(rng):
    conv = jbs.BlockSparseConv(power_law_layout(rng, 6, 5), 32, (3, 3))
    x = random_array(rng, (4, 17, 15, 192), jnp.bfloat16)
    w = random_array(rng, conv.w_shape, jnp.bfloat16)
    step = jax.jit(jax.value_and_grad(lambda x, w: jnp.sum(conv(x, w).astype(jnp.float32) ** 2), argnums=(0, 1)))
    first = jax.tree.leaves(step(x, w))
    for _ in range(3):
        for a, b in zip(first, jax.tree.leaves(step(x, w))):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.skipif(len(jax.devices()) < 2, reason="needs at least 2 GPUs")
@pytest.mark.parametrize("op,kernel_size,strides,padding", [
    (jbs.BlockSparseConv, (2, 3), 1, ((1, 0), (1, 1))),   # PixelCNN++'s down-shifted conv
    (jbs.BlockSparseConv, (3, 3), 2, "SAME"),             # down-sampling: fewer output pixels
    (jbs.BlockSparseConvTranspose, (3, 3), 2, "SAME")])   # up-sampling: more output pixels
def test_data_parallel_images_stay_sharded(rng, op, kernel_size, strides, padding):
    """A batch of images sharded over GPUs is not all-gathered: each GPU runs its own images
    through the three conv kernels, and the weight gradient is all-reduced. Results equal the
    single-device ones."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    devices = jax.devices()[: 2 * (len(jax.devices()) // 2)]
    mesh = Mesh(np.array(devices), ("data",))
    conv = op(power_law_layout(rng, 4, 3), 32, kernel_size, strides, padding, precision="highest")
    x = random_array(rng, (2 * len(devices), 16, 16, 128), jnp.float32)
    w = random_array(rng, conv.w_shape, jnp.float32)
    loss = lambda x, w: jnp.mean(jnp.sin(conv(x, w)))
    step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
    single = step(x, w)
    xs = jax.device_put(x, NamedSharding(mesh, P("data")))
    ws = jax.device_put(w, NamedSharding(mesh, P()))
    compiled = step.lower(xs, ws).compile()
    sharded = compiled(xs, ws)
    for a, b in zip(jax.tree.leaves(single), jax.tree.leaves(sharded)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=1e-6)
    hlo = compiled.as_text()
    assert all(target in hlo for target in ("jbs_bsconv_fwd", "jbs_bsconv_dx", "jbs_bsconv_dw"))
    assert "all-gather" not in hlo, "the sharded images were gathered before a conv kernel"
    assert "all-reduce" in hlo, "the weight gradient's per-device partials were not summed"
    assert sharded[1][0].sharding.spec[0] == "data"


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_weight_gradient_split_over_rows(rng, dtype):
    """Few blocks, many pixels: each block's rows are split over several CTAs whose partials
    are summed in a fixed order (lowering._dw_row_splits > 1 here)."""
    from jbs._src import lowering

    conv = jbs.BlockSparseConv(power_law_layout(rng, 2, 3), 32, (1, 3), padding=((0, 0), (1, 1)))
    x = random_array(rng, (6, 33, 31, 64), dtype)  # 6138 pixels
    assert lowering._dw_row_splits(6 * 33 * 31, conv.nnz * 3) > 1
    w = random_array(rng, conv.w_shape, dtype)
    g = random_array(rng, x.shape[:3] + (96,), dtype)
    dw_of = jax.jit(lambda x, g: jax.vjp(lambda w: conv(x, w), w)[1](g)[0])
    dw = dw_of(x, g)
    _, ref_pullback = jax.vjp(lambda k: dense_reference(conv, x, k), conv.to_dense(jnp.asarray(w, jnp.float32)))
    ref = conv.from_dense(ref_pullback(jnp.asarray(g, jnp.float32))[0])
    assert rel_error(dw, f64(ref)) < tolerance(dtype)
    np.testing.assert_array_equal(np.asarray(dw), np.asarray(dw_of(x, g)))


@pytest.mark.parametrize("wgmma,ws", [("0", "1"), ("1", "1"), ("1", "0")])
@pytest.mark.parametrize("bs", [16, 32, 64])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_conv_with_column_groups(rng, monkeypatch, wgmma, ws, bs, dtype):
    """The implicit-GEMM convolution through the column-group kernels (forced by JBS_GROUPS;
    JBS_WGMMA picks the wgmma one on sm_90 for bf16 and, as tf32, for fp32 at bs 16/32; the
    mma.sync one otherwise). JBS_WS=0 runs the wgmma kernel with a CTA barrier per item
    instead of warp-specialized."""
    monkeypatch.setenv("JBS_GROUPS", "1")
    monkeypatch.setenv("JBS_WGMMA", wgmma)
    monkeypatch.setenv("JBS_WS", ws)
    conv = jbs.BlockSparseConv(heavy_column_layout(rng, 3, 11, density=0.6), bs, (2, 3), 2,
                               ((1, 0), (2, 0)))
    check_three_ops(rng, conv, (3, 13, 10, 3 * bs), dtype)


HALO_GEOMETRIES = [  # stride 1, output the size of the input: the taps share one halo tile
    ((3, 3), "SAME", 1),
    ((2, 3), ((1, 0), (1, 1)), 1),  # PixelCNN++'s down-shifted conv
    ((2, 2), ((1, 0), (1, 0)), 1),  # ... down-right-shifted
    ((3, 3), "SAME", 2),            # dilated: a halo of 2 image rows either side
    ((1, 3), ((0, 0), (2, 0)), 1),  # one-sided padding: every tap reads the row or before
]


@pytest.mark.parametrize("kernel_size,padding,dilation", HALO_GEOMETRIES)
@pytest.mark.parametrize("bs", [16, 32])
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_conv_halo_kernel(rng, monkeypatch, kernel_size, padding, dilation, bs, dtype):
    """The stride-1 halo kernel (conv/bsconv_halo_kernel.cuh; JBS_CONV_HALO=1 takes it wherever
    it can run): forward and input gradient against float64 over tiles that span images and end
    part-way (5 images of 13x11 = 715 pixels, three 256-row tiles), a heavy column, an empty row
    and column, and a last column group narrower than the others (11 columns of bs 16, 6 of 32)."""
    monkeypatch.setenv("JBS_CONV_HALO", "1")
    cols = 11 if bs == 16 else 6
    conv = jbs.BlockSparseConv(heavy_column_layout(rng, 4, cols, density=0.4), bs, kernel_size, 1, padding,
                               dilation)
    check_three_ops(rng, conv, (5, 13, 11, 4 * bs), dtype)


HALO_SS_IMAGES = [  # batch, height, width: 8, 16 and 32 pixels wide
    (5, 8, 8),    # 4 images per 256-row tile, the last tile holds one
    (3, 8, 16),   # 2 images per tile, the last tile half empty
    (2, 16, 32),  # 2 tiles per image
]


def kernel_names(fn, *args):
    """Names of the CUDA kernels that one call of fn launched (CUPTI, through torch.profiler)."""
    torch = pytest.importorskip("torch")
    jax.block_until_ready(fn(*args))  # compile outside the profile
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        jax.block_until_ready(fn(*args))
    return {event.name for event in prof.events()}


@pytest.mark.parametrize("kernel_size,padding,dilation", HALO_GEOMETRIES)
@pytest.mark.parametrize("bs", [16, 32])
@pytest.mark.parametrize("images", HALO_SS_IMAGES)
def test_conv_halo_ss_kernel(rng, monkeypatch, kernel_size, padding, dilation, bs, images):
    """The halo kernel's shared-memory-operand variant (conv/bsconv_halo_ss_kernel.cuh), which
    takes images 8, 16 or 32 pixels wide: forward and input gradient against float64 with
    tiles of several images, of part of one, and partly past the batch; a heavy column, an
    empty row and column, and a narrower last column group. (JBS_CONV_STRIP=0: the strip kernel
    would take bs 32 on 16-row images.)"""
    monkeypatch.setenv("JBS_CONV_HALO", "1")
    monkeypatch.setenv("JBS_CONV_STRIP", "0")
    dtype = jnp.bfloat16 if bs == 32 else jnp.float16
    cols = 11 if bs == 16 else 6
    conv = jbs.BlockSparseConv(heavy_column_layout(rng, 4, cols, density=0.4), bs, kernel_size, 1, padding,
                               dilation)
    check_three_ops(rng, conv, images + (4 * bs,), dtype)


HALO_STRIP_IMAGES = [  # batch, height, width: strips of 32 / 16 rows, 8 pixels wide
    (2, 32, 24),  # one strip per tile, three per image row
    (3, 16, 8),   # two strips (images) per tile, the last tile half past the batch
    (1, 64, 16),  # two strips per image column
]


@pytest.mark.parametrize("kernel_size,padding,dilation", HALO_GEOMETRIES)
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("images", HALO_STRIP_IMAGES)
@pytest.mark.parametrize("bs", [32, 16])
def test_conv_strip_kernel(rng, monkeypatch, kernel_size, padding, dilation, dtype, images, bs):
    """The strip kernel (conv/bsconv_strip_kernel.cuh: output channels on the MMA's M, strips
    of pixels on its N): forward and input gradient against float64 with strips of 32 and 16
    rows, tiles partly past the batch, taps in batches of 3 and 2, a heavy column, an empty row
    and column, and a narrower last column group (bs 32: 6 columns of 4 per group; bs 16: 11 of
    8). At bs 16 an item is a pair of channel blocks: 5 and 11 blocks (fwd / dx) leave a last
    pair half past the channels, and the random rows give pairs with either half absent. Each
    of these has fewer units than SMs: one per CTA."""
    monkeypatch.setenv("JBS_CONV_HALO", "1")
    rows, cols = (4, 6) if bs == 32 else (5, 11)
    conv = jbs.BlockSparseConv(heavy_column_layout(rng, rows, cols, density=0.4), bs, kernel_size, 1, padding,
                               dilation)
    check_three_ops(rng, conv, images + (rows * bs,), dtype)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("bs,env,images", [
    (32, {}, (40, 32, 16)),                          # strip kernel: 80 tiles x 3 groups
    (32, {"JBS_CONV_STRIP": "0"}, (40, 32, 16)),    # ss kernel, one band per tile
    (32, {"JBS_CONV_STRIP": "0"}, (200, 8, 8)),     # ss kernel, 4 images (bands) per tile
    (16, {}, (40, 32, 16)),                         # strip kernel: a pair of channel blocks per item
    (16, {"JBS_CONV_STRIP": "0"}, (40, 32, 16)),    # ss kernel, one 128-wide MMA per square
    (16, {}, (200, 8, 8)),                          # ss kernel (8-pixel-high images)
])
def test_conv_persistent_kernels_walk_many_units(rng, monkeypatch, dtype, bs, env, images):
    """The strip and ss kernels' persistent CTAs (one per SM) each walk several (tile, column
    group) units, loading a unit's first item during the previous unit's last: 150 to 240
    units (the strip kernel's CTAs take runs of units of equal weight, the ss kernel's every
    132nd). The middle group has no blocks at all (its units have no items, their output is
    zeros) and one row of the layout is empty."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    group = 128 // bs
    layout = heavy_column_layout(rng, 4, 3 * group, density=0.5)
    layout[:, group:2 * group] = False
    conv = jbs.BlockSparseConv(layout, bs, (3, 3))
    check_three_ops(rng, conv, images + (4 * bs,), dtype)


def fwd_dx_variants(rng, monkeypatch, conv, x_shape, envs, dtype=jnp.bfloat16, before_each=lambda: None):
    """Forward and input gradient of conv on fresh data under each environment of envs (read by
    the launcher at every launch; a new executable each time; before_each() runs before each),
    each against float64; returns the jitted op's maker, its operands and the results."""
    x = random_array(rng, x_shape, dtype)
    w = random_array(rng, conv.w_shape, dtype)
    g = random_array(rng, x_shape[:3] + (conv.layout.shape[1] * conv.block_size,), dtype)
    kernel = conv.to_dense(jnp.asarray(w, jnp.float32))
    ref_y, ref_pullback = jax.vjp(lambda x: dense_reference(conv, x, kernel), jnp.asarray(x, jnp.float32))
    ref_dx = ref_pullback(jnp.asarray(g, jnp.float32))[0]

    def fwd_and_dx():  # a new function each time: a new executable (and CUDA graph capture)
        def run(x, w, g):
            y, pullback = jax.vjp(lambda x: conv(x, w), x)
            return y, pullback(g)[0]
        return jax.jit(run)

    results = []
    for env in envs:
        with monkeypatch.context() as m:
            for name, value in env.items():
                m.setenv(name, value)
            before_each()
            y, dx = fwd_and_dx()(x, w, g)
        assert rel_error(y, f64(ref_y)) < tolerance(dtype), env
        assert rel_error(dx, f64(ref_dx)) < tolerance(dtype), env
        results.append((np.asarray(y), np.asarray(dx)))
    return fwd_and_dx, (x, w, g), results


@pytest.mark.parametrize("kernel_size,padding", [((3, 3), "SAME"), ((2, 3), ((1, 0), (1, 1))),
                                                 ((2, 2), ((1, 0), (1, 0)))])
@pytest.mark.parametrize("density", [0.2, 0.5])
def test_conv_strip_kernel_ring_variants(rng, monkeypatch, kernel_size, padding, density):
    """The strip kernel's ring: items whole (4 columns a slot) or split into one sub-item per
    warpgroup (2 columns a slot, JBS_CONV_STRIP_SPLIT=1; by default below density 3/8), or
    packed (2 columns a slot by rank, an item split only where it has 3 or 4 blocks:
    JBS_CONV_STRIP_SPLIT=2; both kinds of item in one walk at these densities), and as many
    slots as fit (3x3: 2 whole, 3 split; 2x3: 3 whole, 4 split) or 2 (JBS_CONV_STRIP_STAGES=2).
    Over 240 units, so every slot is reused many times across units: forward and input
    gradient against float64 in every variant, and the same bits in all of them, since none
    changes the order of any sum."""
    layout = heavy_column_layout(rng, 5, 12, density=density)
    conv = jbs.BlockSparseConv(layout, 32, kernel_size, 1, padding)
    _, _, results = fwd_dx_variants(
        rng, monkeypatch, conv, (40, 32, 16, 5 * 32),
        ({}, {"JBS_CONV_STRIP_STAGES": "2"}, {"JBS_CONV_STRIP_SPLIT": "0"}, {"JBS_CONV_STRIP_SPLIT": "1"},
         {"JBS_CONV_STRIP_SPLIT": "1", "JBS_CONV_STRIP_STAGES": "2"}, {"JBS_CONV_STRIP_SPLIT": "2"},
         {"JBS_CONV_STRIP_SPLIT": "2", "JBS_CONV_STRIP_STAGES": "2"}))
    for y, dx in results[1:]:
        np.testing.assert_array_equal(y, results[0][0])
        np.testing.assert_array_equal(dx, results[0][1])


def conv_with_zero_groups(rng, bs):
    """A 2x3 conv (PixelCNN++'s down-shift padding) on a random 11 x 12 layout (22 x 24 at bs
    16) with 5 of every 12 block columns and 4 of every 11 block rows empty, drawn until its
    forward and its input gradient each have a column group without items (the pairing by
    shared inputs decides where the empty columns go)."""
    scale = 32 // bs
    rows, cols = 11 * scale, 12 * scale
    for _ in range(100):
        layout = rng.random((rows, cols)) < 0.5
        layout[:, np.isin(np.arange(cols) % 12, (1, 4, 5, 8, 10))] = False
        layout[np.isin(np.arange(rows) % 11, (0, 3, 6, 9)), :] = False
        conv = jbs.BlockSparseConv(layout, bs, (2, 3), 1, ((1, 0), (1, 1)))
        if all((np.diff(np.asarray(getattr(conv._tables, f"{op}_paired_offsets"))) == 0).any()
               for op in ("fwd", "dx")):
            return conv
    raise AssertionError("no layout with a column group without items in 100 draws")


@pytest.mark.parametrize("bs", [32, 16])
def test_conv_strip_kernel_zero_units(rng, monkeypatch, bs):
    """Units without items (a column group none of whose output columns has a block: its
    output is all zeros), stored straight from the consumers' registers (the default) or through
    their staging like any unit (JBS_CONV_STRIP_ZERO=0), with whole and split ring items at bs 32,
    and with the kernel launched early (programmatic dependent launch, the default) or the
    ordinary way (JBS_CONV_STRIP_PDL=0): forward and input gradient against float64 over ~3
    units a CTA, after the output's memory was filled with NaNs (so an unwritten zero shows),
    and the same bits in every variant."""
    conv = conv_with_zero_groups(rng, bs)
    x_shape = (64, 32, 16, conv.layout.shape[0] * bs)
    y_shape = x_shape[:3] + (conv.layout.shape[1] * bs,)
    envs = ({}, {"JBS_CONV_STRIP_ZERO": "0"}, {"JBS_CONV_STRIP_SPLIT": "0"}, {"JBS_CONV_STRIP_SPLIT": "2"},
            {"JBS_CONV_STRIP_PDL": "0"})

    def nans_freed():  # the allocator hands the same memory out again for the outputs
        for shape in (x_shape, y_shape):
            jnp.full(shape, jnp.nan, jnp.bfloat16).block_until_ready()

    _, _, results = fwd_dx_variants(rng, monkeypatch, conv, x_shape, envs, before_each=nans_freed)
    for y, dx in results[1:]:
        np.testing.assert_array_equal(y, results[0][0])
        np.testing.assert_array_equal(dx, results[0][1])


@pytest.mark.parametrize("kernel_size,padding", [((3, 3), "SAME"), ((2, 3), ((1, 0), (1, 1)))])
@pytest.mark.parametrize("bs,density", [(32, 0.25), (32, 0.5), (16, 0.125)])
def test_conv_strip_kernel_paired_column_groups(rng, monkeypatch, kernel_size, padding, bs, density):
    """The strip kernel's column groups paired by shared inputs (tables.paired_order: a group's
    columns out of order, so a warpgroup's 64 channels are two pieces of a stored row, and a
    narrower last group; at bs 16, density 1/8, rows of a group's blocks not consecutive in w,
    and 4 pieces), on 10 x 11 layouts with an empty row and column, over 240 units or more:
    forward and input gradient against float64, and the same bits as the groups in order
    (JBS_CONV_PAIRED=0, read when the op is built), since each output channel's sum meets the
    same blocks in the same order either way."""
    layout = awkward_layout(rng, 10, 11, density=density)
    paired = jbs.BlockSparseConv(layout, bs, kernel_size, 1, padding)
    with monkeypatch.context() as m:
        m.setenv("JBS_CONV_PAIRED", "0")
        in_order = jbs.BlockSparseConv(layout, bs, kernel_size, 1, padding)
    # (the pairing may keep the order where nothing beats it: ~2% of such sparse bs 16 layouts;
    # bs 16 pairs below density 3/16 only, which a rare draw can exceed)
    if pairs_columns(layout, 128 // bs):
        np.testing.assert_array_equal(paired._tables.fwd_paired_columns, paired_order(layout, 128 // bs))
    np.testing.assert_array_equal(in_order._tables.fwd_paired_columns[:11], np.arange(11))
    x = random_array(rng, (40, 32, 16, 10 * bs), jnp.bfloat16)
    w = random_array(rng, paired.w_shape, jnp.bfloat16)
    g = random_array(rng, (40, 32, 16, 11 * bs), jnp.bfloat16)
    kernel = paired.to_dense(jnp.asarray(w, jnp.float32))
    ref_y, ref_pullback = jax.vjp(lambda x: dense_reference(paired, x, kernel), jnp.asarray(x, jnp.float32))
    ref_dx = ref_pullback(jnp.asarray(g, jnp.float32))[0]

    def fwd_and_dx(conv):
        def run(x, w, g):
            y, pullback = jax.vjp(lambda x: conv(x, w), x)
            return y, pullback(g)[0]
        return jax.jit(run)

    results = []
    for conv in (paired, in_order):
        y, dx = fwd_and_dx(conv)(x, w, g)
        assert rel_error(y, f64(ref_y)) < tolerance(jnp.bfloat16)
        assert rel_error(dx, f64(ref_dx)) < tolerance(jnp.bfloat16)
        results.append((np.asarray(y), np.asarray(dx)))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])


@pytest.mark.parametrize("x_axis,w_axis", [(0, 0), (None, 0), (0, None)])
@pytest.mark.parametrize("bs", [32, 16])
def test_conv_strip_kernel_under_vmap(rng, x_axis, w_axis, bs):
    """The strip kernel under vmap: stacked weights are read at their group's offset, stacked
    activations at a group coordinate of the halo's tensor map (x stacked and w broadcast folds
    the stack into the rows instead). Forward and input gradient of each slice against float64;
    at bs 16 with 5 and 11 channel blocks (a last pair half past each group's channels)."""
    rows, cols = (4, 6) if bs == 32 else (5, 11)
    layout = heavy_column_layout(rng, rows, cols, density=0.4)
    conv = jbs.BlockSparseConv(layout, bs, (3, 3))
    x = random_array(rng, (3, 2, 32, 16, rows * bs) if x_axis == 0 else (2, 32, 16, rows * bs), jnp.bfloat16)
    w = random_array(rng, (3,) + conv.w_shape if w_axis == 0 else conv.w_shape, jnp.bfloat16)
    g = random_array(rng, (3, 2, 32, 16, cols * bs), jnp.bfloat16)

    def fwd_and_dx(x, w, g):
        y, pullback = jax.vjp(lambda x: conv(x, w), x)
        return y, pullback(g)[0]

    ys, dxs = jax.jit(jax.vmap(fwd_and_dx, in_axes=(x_axis, w_axis, 0)))(x, w, g)
    for i in range(3):
        xi = x[i] if x_axis == 0 else x
        wi = w[i] if w_axis == 0 else w
        kernel = conv.to_dense(jnp.asarray(wi, jnp.float32))
        ref_y, ref_pullback = jax.vjp(lambda x: dense_reference(conv, x, kernel), jnp.asarray(xi, jnp.float32))
        assert rel_error(ys[i], f64(ref_y)) < tolerance(jnp.bfloat16)
        assert rel_error(dxs[i], f64(ref_pullback(jnp.asarray(g[i], jnp.float32))[0])) < tolerance(jnp.bfloat16)


@pytest.mark.parametrize("kernel_size,padding,dilation",
                         HALO_GEOMETRIES[:4] + [((3, 2), ((1, 1), (1, 0)), 1)])  # 3x3, 2x3, 2x2, 3x2
@pytest.mark.parametrize("bs,dtype", [(32, jnp.bfloat16), (32, jnp.float16), (16, jnp.bfloat16)])
@pytest.mark.parametrize("images", [(5, 8, 8), (1, 8, 32), (2, 16, 32), (40, 32, 16)])
def test_conv_row_group_dw_kernel(rng, kernel_size, padding, dilation, bs, dtype, images):
    """The row group dw kernel (conv/bsconv_row_group_dw_kernel.cuh: 64 / bs blocks of one block
    row on an MMA's M, the taps as offsets into the band halo) against float64: 9, 6 (2x3 and
    3x2) and 4 taps, images 8, 16 and 32 wide (tiles of several images, of part of one, partly
    past the batch), one tile (one row split, dw written directly) and many (several splits),
    groups cut short by the end of their row, a heavy column, an empty row and column."""
    cols = 6 if bs == 32 else 11
    conv = jbs.BlockSparseConv(heavy_column_layout(rng, 5, cols, density=0.5), bs, kernel_size, 1, padding,
                               dilation)
    check_three_ops(rng, conv, images + (5 * bs,), dtype)


@pytest.mark.parametrize("x_axis,g_axis", [(0, 0), (None, 0), (0, None)])
@pytest.mark.parametrize("bs", [32, 16])
def test_conv_row_group_dw_kernel_under_vmap(rng, x_axis, g_axis, bs):
    """The row group dw kernel under vmap: each slice's x and dy, where stacked, at a group
    coordinate of their tensor maps (a shared one: every group reads the one array). Tiles of 4
    images, the last one partly past each slice's 5 images, whose boxes must read zeros there and
    not the next slice's images. Each slice's weight gradient against float64."""
    rows, cols = 5, (6 if bs == 32 else 11)
    conv = jbs.BlockSparseConv(heavy_column_layout(rng, rows, cols, density=0.4), bs, (2, 3), 1, ((1, 0), (1, 1)))
    x = random_array(rng, ((3,) if x_axis == 0 else ()) + (5, 8, 8, rows * bs), jnp.bfloat16)
    w = random_array(rng, conv.w_shape, jnp.bfloat16)
    g = random_array(rng, ((3,) if g_axis == 0 else ()) + (5, 8, 8, cols * bs), jnp.bfloat16)
    dw = jax.jit(jax.vmap(lambda x, g: jax.vjp(lambda w: conv(x, w), w)[1](g)[0], in_axes=(x_axis, g_axis)))
    dws = dw(x, g)
    kernel = conv.to_dense(jnp.asarray(w, jnp.float32))
    for i in range(3):
        xi = jnp.asarray(x[i] if x_axis == 0 else x, jnp.float32)
        pullback = jax.vjp(lambda k: dense_reference(conv, xi, k), kernel)[1]
        gi = jnp.asarray(g[i] if g_axis == 0 else g, jnp.float32)
        assert rel_error(dws[i], f64(conv.from_dense(pullback(gi)[0]))) < tolerance(jnp.bfloat16)
    names = {name for name in kernel_names(dw, x, g) if "bsconv_" in name and "_dw_" in name}
    assert names and all("bsconv_row_group_dw_kernel" in name for name in names), names


@pytest.mark.parametrize("bs,env,expected", [(32, {}, "bsconv_row_group_dw_kernel"),
                                             (16, {}, "bsconv_row_group_dw_kernel"),
                                             (32, {"JBS_CONV_ROW_GROUP_DW": "0"}, "bsconv_halo_dw_kernel")])
def test_conv_row_group_dw_kernel_is_the_one_that_runs(rng, monkeypatch, bs, env, expected):
    """A 3x3 conv's weight gradient runs the row group dw kernel by default at bs 32 and 16; the
    switch hands it to the halo dw kernel. (Each agrees with float64 in its own tests.)"""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    conv = jbs.BlockSparseConv(power_law_layout(rng, 6, 4), bs, (3, 3))
    x = random_array(rng, (4, 32, 32, 6 * bs), jnp.bfloat16)
    w = random_array(rng, conv.w_shape, jnp.bfloat16)
    g = random_array(rng, x.shape[:3] + (4 * bs,), jnp.bfloat16)
    dw = jax.jit(lambda x, w, g: jax.vjp(conv, x, w)[1](g)[1])  # a new function: no cached executable
    names = {name for name in kernel_names(dw, x, w, g) if "bsconv_" in name and "_dw_" in name}
    assert names and all(expected in name for name in names), names


@pytest.mark.parametrize("bs,env,expected", [
    (32, {}, "bsconv_strip_kernel"),
    (32, {"JBS_CONV_STRIP": "0"}, "bsconv_halo_ss_kernel"),
    (16, {}, "bsconv_strip_kernel"),
    (16, {"JBS_CONV_STRIP": "0"}, "bsconv_halo_ss_kernel"),
    (16, {"JBS_CONV_STRIP": "0", "JBS_CONV_HALO_SS": "0"}, "bsconv_halo_kernel"),
])
def test_conv_halo_kernels_are_the_ones_that_run(rng, monkeypatch, bs, env, expected):
    """A 3x3 conv on 32 x 32 images at density 1/4 runs, by default, the strip kernel at bs 32
    and 16, for fwd and dx; each switch hands it to another kernel. (Each kernel agrees with
    float64 in its own test above.)"""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    cols = 8 if bs == 16 else 4
    conv = jbs.BlockSparseConv(jbs.layouts.random(6, cols, density=0.25, seed=3), bs, (3, 3))
    x = random_array(rng, (4, 32, 32, 6 * bs), jnp.bfloat16)
    w = random_array(rng, conv.w_shape, jnp.bfloat16)
    g = random_array(rng, x.shape[:3] + (conv.layout.shape[1] * bs,), jnp.bfloat16)
    fwd = jax.jit(lambda x, w: conv(x, w))  # new functions: no cached executable or graph
    dx = jax.jit(lambda x, w, g: jax.vjp(conv, x, w)[1](g)[0])
    for fn, args in ((fwd, (x, w)), (dx, (x, w, g))):
        names = {name for name in kernel_names(fn, *args) if "bsconv_" in name and "_dw_" not in name}
        assert names and all(expected in name for name in names), names


@pytest.mark.parametrize("kernel_size,padding,dtype", [((3, 3), "SAME", jnp.bfloat16),
                                                       ((2, 3), ((1, 0), (1, 1)), jnp.float16)])
def test_conv_strip_kernel_pairs_bs16_channel_blocks(rng, monkeypatch, kernel_size, padding, dtype):
    """At bs 16 the strip kernel's item is the union rows of channel blocks 2b and 2b + 1 of a
    group of 8 columns. 9 input blocks (the last pair is half past the channels) and 20 output
    blocks (a last group of 4); in group 0 block 2 has no block and block 3 has some (a pair of
    its odd half only), block 4 some and block 5 none (its even half only). Both pairs give each
    warpgroup (4 columns) blocks in one half only, whose other k-step the kernel skips; the
    random rows give the other mixes. Over 240 units: forward and input gradient against
    float64, the strip kernel asserted to run, and the same bits with a 2-slot ring."""
    layout = heavy_column_layout(rng, 9, 20, density=0.3)
    layout[2, :8] = False
    layout[3, 2:5] = True
    layout[4, 3:6] = True
    layout[5, :8] = False
    conv = jbs.BlockSparseConv(layout, 16, kernel_size, 1, padding)
    fwd_and_dx, operands, results = fwd_dx_variants(rng, monkeypatch, conv, (40, 32, 16, 9 * 16),
                                                    ({}, {"JBS_CONV_STRIP_STAGES": "2"}), dtype)
    names = {name for name in kernel_names(fwd_and_dx(), *operands) if "bsconv_" in name}
    assert names and all("bsconv_strip_kernel" in name for name in names), names
    np.testing.assert_array_equal(results[1][0], results[0][0])
    np.testing.assert_array_equal(results[1][1], results[0][1])


@pytest.mark.parametrize("kernel_size,padding", [((3, 3), "SAME"), ((2, 3), ((1, 0), (1, 1)))])
def test_conv_strip_kernel_packed_slots_bs16(rng, monkeypatch, kernel_size, padding):
    """bs 16 with packed slots (JBS_CONV_STRIP_SPLIT=2; by default 3x3 below density 3/8): a
    slot holds 8 of an item's 16 blocks, by rank. Group 0's first pair of channel blocks has all
    16 (two sub-items of 8, one per warpgroup), group 1's next pair 10 or more (8 for its
    first warpgroup, the rest for its second: split) and its last pair exactly 8, of one
    warpgroup (whole);
    the random rows give whole items of every smaller size. Over 240 units: forward and input
    gradient against float64 in every variant, and the same bits as whole slots."""
    layout = heavy_column_layout(rng, 8, 16, density=0.2)
    layout[0:2, :8] = True
    layout[2, 8:12] = True
    layout[3, 8:14] = True
    layout[3, 14:] = False
    layout[6:8, 8:12] = True
    layout[6:8, 12:] = False
    conv = jbs.BlockSparseConv(layout, 16, kernel_size, 1, padding)
    fwd_and_dx, operands, results = fwd_dx_variants(
        rng, monkeypatch, conv, (40, 32, 16, 8 * 16),
        ({"JBS_CONV_STRIP_SPLIT": "0"}, {"JBS_CONV_STRIP_SPLIT": "2"},
         {"JBS_CONV_STRIP_SPLIT": "2", "JBS_CONV_STRIP_STAGES": "2"}))
    names = {name for name in kernel_names(fwd_and_dx(), *operands) if "bsconv_" in name}
    assert names and all("bsconv_strip_kernel" in name for name in names), names
    for y, dx in results[1:]:
        np.testing.assert_array_equal(y, results[0][0])
        np.testing.assert_array_equal(dx, results[0][1])


def test_conv_strip_kernel_splits_items_that_do_not_fit_whole(rng):
    """A 3x3 dilated by 4 has a halo of 40 rows x 16 slots: two slots of whole items (4
    columns' blocks each) and the epilogue's staging rows exceed shared memory, two of
    sub-items per warpgroup do not. At density 1/2 the strip kernel still takes it, split;
    forward and input gradient against float64."""
    conv = jbs.BlockSparseConv(heavy_column_layout(rng, 4, 6, density=0.5), 32, (3, 3), 1, "SAME", 4)
    x_shape = (2, 32, 16, 4 * 32)
    check_three_ops(rng, conv, x_shape, jnp.bfloat16)
    x = random_array(rng, x_shape, jnp.bfloat16)
    w = random_array(rng, conv.w_shape, jnp.bfloat16)
    names = {name for name in kernel_names(jax.jit(lambda x, w: conv(x, w)), x, w) if "bsconv_" in name}
    assert names and all("bsconv_strip_kernel" in name for name in names), names


def test_conv_halo_kernel_is_the_one_that_runs(rng, monkeypatch):
    """With JBS_CONV_HALO unset a 3x3 fp16 conv takes the halo kernels: their sum orders differ
    from the implicit-GEMM kernels' (fwd / dx: channel block major, taps inside; dw: rows split
    for nnz / 9 CTAs instead of nnz, so 16 row splits here instead of 3 -- within a split its
    warps happen to add in the same order), so the results are not bitwise those of
    JBS_CONV_HALO=0, while both are deterministic and match."""
    conv = jbs.BlockSparseConv(power_law_layout(rng, 8, 6), 32, (3, 3))
    x = random_array(rng, (16, 32, 32, 256), jnp.float16)
    w = random_array(rng, conv.w_shape, jnp.float16)
    g = random_array(rng, (16, 32, 32, 192), jnp.float16)
    from jbs._src import lowering
    assert lowering._dw_row_splits(16 * 32 * 32, conv.nnz) != lowering._dw_row_splits(16 * 32 * 32, 9 * conv.nnz)
    results = {}
    for env in ("", "0"):
        monkeypatch.setenv("JBS_CONV_HALO", env)
        # New functions for each setting: a cached executable (or its captured CUDA graph)
        # would replay the previous launch without asking the dispatcher again.
        fwd = jax.jit(lambda x, w: conv(x, w))
        dx = jax.jit(lambda x, w, g: jax.vjp(conv, x, w)[1](g)[0])
        dw = jax.jit(lambda x, w, g: jax.vjp(conv, x, w)[1](g)[1])
        results[env] = [np.asarray(fwd(x, w)), np.asarray(dx(x, w, g)), np.asarray(dw(x, w, g))]
        for first, again in zip(results[env], (fwd(x, w), dx(x, w, g), dw(x, w, g))):
            np.testing.assert_array_equal(first, np.asarray(again))
    for halo, other in zip(results[""], results["0"]):
        assert rel_error(halo, f64(other)) < tolerance(jnp.float16)
        assert not np.array_equal(halo, other), "JBS_CONV_HALO unset ran the same kernel as JBS_CONV_HALO=0"


@pytest.mark.parametrize("kernel_size,padding", [((3, 3), "SAME"), ((2, 3), ((1, 0), (1, 1)))])
def test_conv_indexing_past_2_pow_31_elements(rng, kernel_size, padding):
    """Activations of 8200 x 32 x 32 x 256 elements, more than 2**31: the last images' outputs
    and input gradients, and the weight gradient, whose sums run over every image, against
    dense float32 math (the conv kernels' 64-bit pixel offsets and their TMA maps' image
    coordinate reach the end)."""
    conv = jbs.BlockSparseConv(power_law_layout(rng, 8, 8), 32, kernel_size, padding=padding)
    shape = (8200, 32, 32, 256)
    assert np.prod(shape) > 2**31
    key_x, key_g = jax.random.split(jax.random.key(int(rng.integers(1000))))
    x = jax.random.normal(key_x, shape, jnp.bfloat16)
    g = jax.random.normal(key_g, shape, jnp.bfloat16)
    w = random_array(rng, conv.w_shape, jnp.bfloat16)
    y_tail, (dx, dw) = jax.jit(lambda x, w, g: (conv(x, w)[-2:], jax.vjp(conv, x, w)[1](g)))(x, w, g)
    kernel = conv.to_dense(jnp.asarray(w, jnp.float32))
    ref_y, ref_pullback = jax.vjp(lambda x: dense_reference(conv, x, kernel), jnp.asarray(x[-2:], jnp.float32))
    assert rel_error(y_tail, f64(ref_y)) < tolerance(jnp.bfloat16)
    assert rel_error(dx[-2:], f64(ref_pullback(jnp.asarray(g[-2:], jnp.float32))[0])) < tolerance(jnp.bfloat16)
    del dx
    ref_dw = jax.jit(lambda x, g: conv.from_dense(jax.vjp(lambda k: dense_reference(conv, x, k), kernel)[1](
        jnp.asarray(g, jnp.float32))[0]))(x, g)
    assert rel_error(dw, f64(ref_dw)) < tolerance(jnp.bfloat16)
