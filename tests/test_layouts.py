"""Layout generators, lookup tables and initialisers."""

import os
import subprocess
import sys

import numpy as np
import pytest
import jax
import jax.numpy as jnp
from hypothesis import given, settings, strategies as st

import jbs
from jbs._src.tables import (build_conv_tables, build_tables, dw_panel_columns, packing_ctas, paired_order,
                             pairs_columns, shared_input_order, tables_for, wide_group_width)
from helpers import awkward_layout, dense_f64, heavy_column_layout, f64, random_array, rel_error


def test_random_density_and_seed():
    a = jbs.layouts.random(40, 30, 0.1, seed=1)
    assert a.shape == (40, 30) and a.dtype == bool and a.sum() == 120
    np.testing.assert_array_equal(a, jbs.layouts.random(40, 30, 0.1, seed=1))
    assert (a != jbs.layouts.random(40, 30, 0.1, seed=2)).any()
    assert jbs.layouts.random(5, 5, 1e-6, seed=0).sum() == 1


@pytest.mark.parametrize("make", [lambda s: jbs.layouts.barabasi_albert(60, 2, seed=s),
                                  lambda s: jbs.layouts.watts_strogatz(60, 4, 0.2, seed=s)])
def test_small_world_layouts(make):
    layout = make(3)
    assert layout.shape == (60, 60) and layout.dtype == bool
    assert (layout == layout.T).all() and layout.diagonal().all()
    np.testing.assert_array_equal(layout, make(3))
    assert (layout != make(4)).any()
    assert 0 < layout.mean() < 0.2


def test_barabasi_albert_is_power_law():
    degrees = jbs.layouts.barabasi_albert(500, 2, seed=0).sum(axis=0)
    assert degrees.max() > 8 * np.median(degrees)


def test_block_diagonal():
    layout = jbs.layouts.block_diagonal(3, 2, 1)
    assert layout.shape == (6, 3)
    np.testing.assert_array_equal(layout[:, 0], [1, 1, 0, 0, 0, 0])
    assert jbs.layouts.block_diagonal(4, 2).sum() == 16


def test_magnitude_prune_keeps_largest_blocks(rng):
    dense = rng.standard_normal((32, 48)) * 0.01
    dense[8:16, 16:24] += 5.0
    dense[24:32, 0:8] += 3.0
    layout = jbs.layouts.magnitude_prune(dense, 8, density=2 / 24)
    assert layout.sum() == 2 and layout[1, 2] and layout[3, 0]
    bsmm = jbs.BlockSparseMatMul(layout, 8)
    kept = np.asarray(bsmm.to_dense(bsmm.from_dense(dense.astype(np.float32))))
    np.testing.assert_allclose(kept[8:16, 16:24], dense[8:16, 16:24], rtol=1e-6)


def test_tables_describe_the_layout(rng):
    layout = awkward_layout(rng, 7, 5)
    t = build_tables(layout)
    rows, cols = np.nonzero(layout)
    assert all(a.dtype == np.int32 for a in t)
    for o in range(5):
        items = t.fwd_items[t.fwd_offsets[o]:t.fwd_offsets[o + 1]]
        assert sorted(items[:, 0]) == list(np.flatnonzero(cols == o))
        np.testing.assert_array_equal(rows[items[:, 0]], items[:, 1])
    for r in range(7):
        items = t.dx_items[t.dx_offsets[r]:t.dx_offsets[r + 1]]
        np.testing.assert_array_equal(cols[items[:, 0]], items[:, 1])
        assert (rows[items[:, 0]] == r).all()
    np.testing.assert_array_equal(t.dw_items, np.stack([rows, cols], 1))


def _unpack_packing(packed, nnz, segments):
    """The parts of a _packing table: items, offsets, columns, CTAs' first items."""
    start = -(-2 * nnz // 4) * 4  # the items padded to 16 bytes
    items = packed[:2 * nnz].reshape(-1, 2)
    offsets = packed[start:start + segments + 1]
    columns = packed[start + segments + 1:start + 2 * segments + 1]
    cta_items = packed[start + 2 * segments + 1:]
    return items, offsets, columns, cta_items


@pytest.mark.parametrize("ctas", [132, 114, 17])
def test_packed_walk_tables_give_each_cta_whole_columns(rng, ctas):
    """The packed small-N walk's tables (tables.py: _packing), for fwd and dx: the op's segments
    reordered CTA by CTA, each with its own items, every segment once, the CTAs' ranges on segment
    boundaries and covering every item, segments without items after them, and no CTA more
    weight bytes above the mean than an SM streams in 1.5 us (~30 KB / us); the length gives the
    CTA count."""
    layout = jbs.layouts.random(400, 400, 0.05, seed=3)
    layout[7, :] = False
    layout[:, 11] = False
    odd = layout.copy()
    odd[np.argwhere(odd)[0][0], np.argwhere(odd)[0][1]] = False  # the other parity: items padded to 16 bytes
    assert (layout.sum() - odd.sum()) == 1
    for layout in (layout, odd):
        _check_packing(build_tables(layout, packed_ctas=ctas), int(layout.sum()), ctas)


def _check_packing(t, nnz, ctas):
    for offsets, items, packed in ((t.fwd_offsets, t.fwd_items, t.fwd_packed), (t.dx_offsets, t.dx_items, t.dx_packed)):
        segments = offsets.size - 1
        assert packed.dtype == np.int32 and packed.size == -(-2 * nnz // 4) * 4 + 2 * segments + ctas + 2
        assert packing_ctas(packed.size, nnz, segments) == ctas
        new_items, new_offsets, columns, cta_items = _unpack_packing(packed, nnz, segments)
        assert sorted(columns) == list(range(segments))
        for s in range(segments):
            np.testing.assert_array_equal(new_items[new_offsets[s]:new_offsets[s + 1]],
                                          items[offsets[columns[s]]:offsets[columns[s] + 1]])
        assert cta_items[0] == 0 and cta_items[-1] == nnz and np.all(np.diff(cta_items) >= 0)
        assert set(cta_items) <= set(new_offsets)  # whole segments per CTA
        assert np.all(np.diff(new_offsets)[np.searchsorted(new_offsets, nnz, side="right") - 1:] == 0)
        assert (np.diff(cta_items).max() - nnz / ctas) * 2 * 32**2 <= 1.5 * 30e3


def test_packed_walk_tables_are_empty_where_the_walk_would_not_pay(rng):
    """No packing without a CTA count (no GPU), for a layout with a power-law hub (one column
    holds every block row: its CTA would be far above the mean), where a CTA's excess items cost
    more at a larger block size (~3 columns per CTA at 132 CTAs: ~9 items of 8 KiB at bs 64),
    with more segments than the walk's shared memory holds, or for a convolution (its tables
    never reach the walk)."""
    layout = jbs.layouts.random(400, 400, 0.05, seed=3)
    assert build_tables(layout).fwd_packed.size == 1
    hub = layout.copy()
    hub[:, 5] = True
    assert build_tables(hub, packed_ctas=132).fwd_packed.size == 1
    assert build_tables(hub, packed_ctas=132).dx_packed.size > 1  # its rows stay balanced
    assert build_tables(layout, packed_ctas=132, block_size=64).fwd_packed.size == 1
    assert build_tables(np.ones((2, 4097), bool), packed_ctas=4).fwd_packed.size == 1
    assert build_conv_tables(layout, 4).fwd_packed.size == 1
    assert tables_for(layout, 32, packed_ctas=132).fwd_packed.size > 1
    assert tables_for(layout, 32).fwd_packed.size == 1


def test_building_an_op_leaves_jax_backends_alone():
    """Building an op asks jax for no devices (the packed walk's SM count is asked for only with
    JBS_STREAM_EVEN_PACKED=1): jax.distributed.initialize, which must run before any backend
    starts, may still come after. In a fresh Python, as this process's backends are running."""
    script = ("import numpy as np, jbs\n"
              "from jax._src import xla_bridge\n"
              "jbs.BlockSparseMatMul(np.ones((2, 3), bool), 16)\n"
              "jbs.BlockSparseConv(np.ones((2, 3), bool), 16, (3, 3))\n"
              "print(xla_bridge.backends_are_initialized())\n")
    env = {k: v for k, v in os.environ.items() if k != "JBS_STREAM_EVEN_PACKED"}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[-1] == "False"


@pytest.mark.parametrize("density", [1.0, 0.4, 0.1])
@pytest.mark.parametrize("width", [4, 8])  # bs 32 and 16: groups of 2 and 4 blocks
def test_dw_row_groups_hold_blocks_of_one_row(rng, density, width):
    """The conv row group dw kernel's groups: every block exactly once, in order, width / 2 at a
    time within its block row (a row's last group filled with -1), and for the convolution tap
    0's groups first, each tap's groups tap 0's shifted by whole taps."""
    layout = heavy_column_layout(rng, 9, 11, density=density)
    rows, _ = np.nonzero(layout)
    groups = build_tables(layout, width).dw_row_groups
    assert groups.shape[1] == width // 2
    assert [int(b) for b in groups.ravel() if b >= 0] == list(range(rows.size))
    for group in groups:
        members = group[group >= 0]
        assert len(members) and (rows[members] == rows[members[0]]).all()
        np.testing.assert_array_equal(members, members[0] + np.arange(len(members)))
        if len(members) < len(group):  # cut short only by the end of its row
            assert (group[len(members):] == -1).all()
            assert members[-1] + 1 == rows.size or rows[members[-1] + 1] != rows[members[0]]
    conv = build_conv_tables(layout, 6, width).dw_row_groups
    assert conv.shape == (6 * len(groups), width // 2)
    for tap in range(6):
        shifted = np.where(groups >= 0, groups + tap * rows.size, -1)
        np.testing.assert_array_equal(conv[tap * len(groups):(tap + 1) * len(groups)], shifted)


@pytest.mark.parametrize("bs", [8, 16, 32, 64])
@pytest.mark.parametrize("shape,density", [((40, 300), 0.3), ((7, 5), 0.5), ((3, 70), 0.0)])
def test_dw_panels_visit_each_block_once_by_panel_row_column(rng, bs, shape, density):
    """The dw panel kernel's order: every block once, sorted by (panel of output block
    columns, block row, column), each item naming its block's row and column, and the panel
    offsets bounding each panel's items (a power-law column, an empty row and column)."""
    layout = heavy_column_layout(rng, *shape, density=density)
    tables = build_tables(layout, max(1, 128 // bs))
    items, offsets = np.asarray(tables.dw_panel_items), np.asarray(tables.dw_panel_offsets)
    rows, cols = np.nonzero(layout)
    assert items.shape == (rows.size, 4) and items.dtype == np.int32
    np.testing.assert_array_equal(np.sort(items[:, 0]), np.arange(rows.size))
    np.testing.assert_array_equal(items[:, 1], rows[items[:, 0]])
    np.testing.assert_array_equal(items[:, 2], cols[items[:, 0]])
    panel = items[:, 2] // dw_panel_columns(bs)
    keys = list(zip(panel, items[:, 1], items[:, 2]))
    assert keys == sorted(keys)
    assert offsets[0] == 0 and offsets[-1] == rows.size
    for p in range(offsets.size - 1):
        assert np.all(panel[offsets[p]:offsets[p + 1]] == p)


@pytest.mark.parametrize("width", [1, 2, 4, 8])
def test_column_groups_cover_each_segment_exactly(rng, width):
    """The large-N kernels' column groups: group q, column p holds exactly segment q*width+p's
    (block, input) pairs, inputs sorted and unique within a group; for the matmul and for the
    convolution's merged input-gradient segments."""
    layout = awkward_layout(rng, 7, 10, density=0.3)
    for t in (build_tables(layout, width), build_conv_tables(layout, 6, width)):
        for op in ("fwd", "dx"):
            _check_column_groups(t, op, "group", width)
            assert getattr(t, f"{op}_wide_items") is getattr(t, f"{op}_group_items")


def _check_column_groups(t, op, kind, width):
    offsets, items = getattr(t, f"{op}_offsets"), getattr(t, f"{op}_items")
    group_offsets = getattr(t, f"{op}_{kind}_offsets")
    groups = getattr(t, f"{op}_{kind}_items")
    assert groups.shape[1] == 1 + width and len(group_offsets) == -(-(len(offsets) - 1) // width) + 1
    for segment in range(len(offsets) - 1):
        q, p = divmod(segment, width)
        rows = groups[group_offsets[q]:group_offsets[q + 1]]
        assert (np.diff(rows[:, 0]) > 0).all()
        held = {(int(b), int(i)) for i, b in zip(rows[:, 0], rows[:, 1 + p]) if b >= 0}
        assert held == set(map(tuple, items[offsets[segment]:offsets[segment + 1]].tolist()))
    # the last group's columns past the last segment hold no block (the kernel skips them)
    last = (len(offsets) - 2) % width + 1
    assert (groups[group_offsets[-2]:, 1 + last:] == -1).all()


def _check_mapped_column_groups(t, op, kind, width, item_taps=1):
    """Groups whose column p of group q is segment columns[q * width + p]: every segment in
    exactly one group column (-1 pads), that column holding exactly the segment's (block,
    input) pairs, inputs sorted and unique within a group; as many groups as in order."""
    offsets, items = getattr(t, f"{op}_offsets"), getattr(t, f"{op}_items")
    group_offsets, groups = getattr(t, f"{op}_{kind}_offsets"), getattr(t, f"{op}_{kind}_items")
    columns = getattr(t, f"{op}_{kind}_columns")
    segments = len(offsets) - 1
    assert len(group_offsets) == -(-segments // width) + 1
    assert columns.shape == ((len(group_offsets) - 1) * width,) and columns.dtype == np.int32
    assert sorted(columns[columns >= 0].tolist()) == list(range(segments))
    assert groups.shape[1] == 1 + width and groups.shape[0] % item_taps == 0  # each tap's inputs
    for position, segment in enumerate(columns):
        q, p = divmod(position, width)
        rows = groups[group_offsets[q]:group_offsets[q + 1]]
        assert (np.diff(rows[:, 0]) > 0).all()
        held = {(int(b), int(i)) for i, b in zip(rows[:, 0], rows[:, 1 + p]) if b >= 0}
        want = items[offsets[segment]:offsets[segment + 1]] if segment >= 0 else np.zeros((0, 2))
        assert held == set(map(tuple, want.tolist()))


@pytest.mark.parametrize("bs", [8, 16, 32, 64])
def test_wide_column_groups(rng, bs):
    """The TMA kernel's wide groups: 192 columns each at bs 64 and 32, of columns chosen to share
    inputs (covering every segment once, a partial last group where 3 or 6 does not divide the
    columns), and the ordinary groups themselves, columns in order, at the other block sizes; a
    matmul's paired groups (the ordinary width) of columns chosen to share inputs too."""
    layout = awkward_layout(rng, 9, 11, density=0.3)
    t = tables_for(layout, bs)
    width = wide_group_width(bs)
    for op in ("fwd", "dx"):
        _check_mapped_column_groups(t, op, "wide", width)
        _check_mapped_column_groups(t, op, "paired", max(1, 128 // bs))
        if bs not in (32, 64):
            assert getattr(t, f"{op}_wide_items") is getattr(t, f"{op}_group_items")
            segments = len(getattr(t, f"{op}_offsets")) - 1
            np.testing.assert_array_equal(getattr(t, f"{op}_wide_columns")[:segments], np.arange(segments))
    assert wide_group_width(64) == 3 and wide_group_width(32) == 6


@pytest.mark.parametrize("width", [3, 4, 6])
def test_shared_input_order_cuts_union_items(width):
    """Groups grown by shared inputs: on a random 128 x 128 layout at density 1/8 they hold at
    least 1.1x fewer union items (activation tiles the TMA kernel loads) than the columns in
    order; each segment once; deterministic; in order for width 1 and past its size limit."""
    layout = jbs.layouts.random(128, 128, 0.125, seed=3)
    def union_items(order):
        padded = np.concatenate([layout, np.zeros((128, 1), bool)], axis=1)[:, order]  # -1: empty
        return sum(int(padded[:, i:i + width].any(axis=1).sum()) for i in range(0, len(order), width))
    order = shared_input_order(layout, width)
    in_order = np.r_[np.arange(128), np.full(-128 % width, -1)]
    assert order.shape == in_order.shape and sorted(order[order >= 0].tolist()) == list(range(128))
    assert union_items(in_order) >= 1.1 * union_items(order)
    np.testing.assert_array_equal(order, shared_input_order(layout.copy(), width))
    np.testing.assert_array_equal(shared_input_order(layout, 1), np.arange(128))
    wide = np.ones((2, 1100), bool)
    np.testing.assert_array_equal(shared_input_order(wide, width)[:1100], np.arange(1100))


@pytest.mark.parametrize("width", [2, 4, 8])
@pytest.mark.parametrize("shape,density", [((7, 10), 0.3), ((12, 9), 0.3), ((5, 1), 0.3), ((16, 20), 0.1)])
def test_paired_column_groups_cover_each_segment_exactly(rng, width, shape, density):
    """The conv strip kernel's paired groups: every segment in exactly one group column (-1
    pads), group q's column p holding exactly segment columns[q * width + p]'s (block, input)
    pairs, inputs sorted and unique within a group; as many groups as in order."""
    layout = awkward_layout(rng, *shape, density=density)
    taps = 6
    for t, pairs, item_taps in ((build_tables(layout, width), False, 1),
                                (build_conv_tables(layout, taps, width), pairs_columns(layout, width), taps)):
        for op in ("fwd", "dx"):
            _check_mapped_column_groups(t, op, "paired", width, item_taps)
            columns, segments = getattr(t, f"{op}_paired_columns"), len(getattr(t, f"{op}_offsets")) - 1
            if not pairs:  # a matmul's (and a bs 16 conv's at density 3/16 and up) are the groups in order
                assert columns[:segments].tolist() == list(range(segments)) and (columns[segments:] == -1).all()
                np.testing.assert_array_equal(getattr(t, f"{op}_paired_items"), getattr(t, f"{op}_group_items"))


@pytest.mark.parametrize("density,transpose,in_order,best", [
    (0.25, False, (22, 18), (17, 13)), (0.25, True, (24, 18), (18, 14)), (0.125, True, (11, 11), (9, 8))])
def test_paired_order_shares_inputs(density, transpose, in_order, best):
    """Columns paired by shared inputs: on the conv benchmark's 10 x 10 layouts (transposed:
    the input gradient's), the best grouping of all (found by exhaustive search, as (pair-inputs,
    group items); greedy matching alone gives (19, 14) and (10, 9) on the transposed ones);
    deterministic; in order past its size limit."""
    layout = jbs.layouts.random(10, 10, density, seed=0)
    layout = layout.T.copy() if transpose else layout
    def cost(order):
        sets = np.concatenate([layout, np.zeros((10, 1), bool)], axis=1)[:, order]  # -1: the empty column
        pairs = sum(int(sets[:, i:i + 2].any(axis=1).sum()) for i in range(0, len(order), 2))
        items = sum(int(sets[:, i:i + 4].any(axis=1).sum()) for i in range(0, len(order), 4))
        return pairs, items
    assert cost(np.r_[np.arange(10), -1, -1]) == in_order
    order = paired_order(layout, 4)
    assert cost(order) == best
    np.testing.assert_array_equal(order, paired_order(layout.copy(), 4))
    wide = np.ones((2, 600), bool)
    np.testing.assert_array_equal(paired_order(wide, 4), np.arange(600))


@pytest.mark.parametrize("density", [1.0, 0.25, 0.05])
def test_variance_scaling_init_gives_unit_variance_outputs(rng, density):
    layout = jbs.layouts.random(32, 32, density, seed=int(rng.integers(100)))
    bsmm = jbs.BlockSparseMatMul(layout, 16)
    w = jbs.initializers.lecun_normal(layout, 16)(jax.random.key(int(rng.integers(100))), bsmm.w_shape)
    x = random_array(rng, (256, bsmm.shape[0]), jnp.float32)
    y = np.asarray(bsmm(x, w))
    live = np.repeat(layout.any(axis=0), 16)
    assert 0.8 < y[:, live].var() < 1.2


def test_variance_scaling_follows_each_columns_fan_in():
    layout = jbs.layouts.barabasi_albert(64, 1, seed=0)
    bsmm = jbs.BlockSparseMatMul(layout, 8)
    w = np.asarray(jbs.initializers.variance_scaling(layout, 8, distribution="normal")(
        jax.random.key(0), bsmm.w_shape))
    dense = np.asarray(bsmm.to_dense(w))
    hub = int(np.argmax(layout.sum(axis=0)))
    leaf = int(np.argmin(layout.sum(axis=0)))
    var = lambda k: dense[np.repeat(layout[:, k], 8), k * 8:(k + 1) * 8].var()
    fan = lambda k: layout[:, k].sum() * 8
    assert var(hub) * fan(hub) == pytest.approx(1.0, rel=0.25)
    assert var(leaf) * fan(leaf) == pytest.approx(1.0, rel=0.6)
    assert var(leaf) > 3 * var(hub)


def test_identity_init(rng):
    layout = jbs.layouts.watts_strogatz(6, 2, 0.3, seed=0)
    bsmm = jbs.BlockSparseMatMul(layout, 8)
    w = jbs.initializers.identity(layout, 8, scale=0.5)(None, bsmm.w_shape, jnp.bfloat16)
    assert w.dtype == jnp.bfloat16
    np.testing.assert_array_equal(bsmm.to_dense(w), 0.5 * np.eye(48))


def test_identity_init_per_gate():
    """With gates, each of the fused layout's equal column parts gets its own identity; a gate
    without its diagonal is named in the error."""
    layout = np.tile(jbs.layouts.watts_strogatz(3, 2, 0.0, seed=0), (1, 4))
    bsmm = jbs.BlockSparseMatMul(layout, 8)
    w = jbs.initializers.identity(layout, 8, gates=4)(None, bsmm.w_shape)
    np.testing.assert_array_equal(bsmm.to_dense(w), np.tile(np.eye(24), (1, 4)))
    broken = layout.copy()
    broken[1, 2 * 3 + 1] = False
    with pytest.raises(ValueError, match=r"diagonal blocks of gate 2 \(block columns 6 on\).*block rows \[1\]"):
        jbs.initializers.identity(broken, 8, gates=4)
    with pytest.raises(ValueError, match="gates=5 must divide"):
        jbs.initializers.identity(layout, 8, gates=5)


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 6), cols=st.integers(1, 6), n=st.integers(1, 9),
       bs=st.sampled_from([8, 16]), seed=st.integers(0, 2**31), density=st.floats(0.05, 1.0))
def test_property_forward_and_grads_match_dense(rows, cols, n, bs, seed, density):
    rng = np.random.default_rng(seed)
    layout = awkward_layout(rng, rows, cols, density)
    bsmm = jbs.BlockSparseMatMul(layout, bs, precision="highest")
    x = random_array(rng, (n, rows * bs), jnp.float32)
    w = random_array(rng, bsmm.w_shape, jnp.float32)
    g = random_array(rng, (n, cols * bs), jnp.float32)
    y, pullback = jax.vjp(bsmm, x, w)
    dx, dw = pullback(g)
    W = dense_f64(bsmm, w)
    assert rel_error(y, f64(x) @ W) < 2e-5
    assert rel_error(dx, f64(g) @ W.T) < 2e-5
    assert rel_error(dw, np.asarray(bsmm.from_dense(f64(x).T @ f64(g)))) < 2e-5
