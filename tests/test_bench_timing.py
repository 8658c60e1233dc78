"""The benchmark's chain builder: re-paired input sets never repeat a tuple (XLA would merge
the duplicate ops and the per-op time would be too low) and every repetition streams all weights."""

from jbs.bench.timing import mixed_sets


def test_mixed_sets_are_distinct_and_walk_every_set():
    sets = [(f"x{i}", f"w{i}", f"g{i}") for i in range(8)]
    ops = mixed_sets(sets, min_ops=64)
    assert len(ops) == 8 * 4  # at most count // (width - 1) repetitions
    for a, b in ((0, 1), (0, 2), (1, 2)):  # an op may use only two of its three inputs (dw)
        assert len({(op[a], op[b]) for op in ops}) == len(ops)
    for r in range(4):
        assert sorted(op[1] for op in ops[8 * r:8 * (r + 1)]) == sorted(s[1] for s in sets)
    assert ops[:8] == sets


def test_mixed_sets_leave_single_member_sets_alone():
    sets = [(f"v{i}",) for i in range(4)]
    assert mixed_sets(sets, min_ops=64) == sets
