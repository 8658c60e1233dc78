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


def test_the_benchmark_command_runs_on_a_cpu_briefly(tmp_path, capsys):
    """jbs-bench without a GPU: the reference path at a small size, sampled briefly (a
    demonstration of the command), with the JSON fields, the table and the targets' note."""
    import json

    import jax
    from jbs.bench import __main__ as bench, timing
    if any(d.platform == "gpu" for d in jax.devices()):
        import pytest
        pytest.skip("the CPU demonstration mode; a GPU runs the real sweep")
    try:
        assert bench.main(["--suite", "matmul", "--ops", "forward,dw", "--out", str(tmp_path)]) == 0
    finally:
        timing.use_sampling(timing.FULL)
    run = json.loads((tmp_path / "matmul_cpu_reference.json").read_text())
    records = run["records"]
    assert {"commit", "switches"} <= run["meta"].keys()  # what else decides the figures
    assert {r["op"] for r in records} == {"forward", "dw"} and {r["impl"] for r in records} >= {"jbs", "xla_dense"}
    for r in records:
        assert {"op", "impl", "dtype", "n", "c", "k", "block_size", "density", "us", "floor_us"} <= r.keys()
        assert r["us"] > 0 and r["floor_us"] > 0
    table = (tmp_path / "matmul_cpu_reference.md").read_text()
    assert "| matmul | forward | float32 | 32 x 1024 -> 1024 |" in table
    assert "this run timed the reference path" in table
    assert "not figures to quote" in capsys.readouterr().out


def test_float32_torch_speedup_pairs_with_jbs_at_highest():
    """torch's float32 BSR kernel sums in float64: where jbs at precision="highest" was timed
    beside it, 'x torch' compares with that (marked h); the runner times the case."""
    from jbs.bench import report, runners, timing
    from jbs.bench.cases import Case

    impls = {"jbs": {"us": 10.0}, "torch_bsr": {"us": 30.0}}
    assert report.torch_speedup(impls) == "3.00" and report.torch_speedup({"jbs": {"us": 1.0}}) == "-"
    impls["jbs_highest"] = {"us": 20.0}
    assert report.torch_speedup(impls) == "1.50 h" and report.torch_speedup(impls, digits=1) == "1.5 h"
    timing.use_sampling(timing.DEMONSTRATION)
    try:
        assert runners.RUNNERS["jbs_highest"](Case("forward", "float32", 8, 64, 64, 16, 0.5)) > 0
    finally:
        timing.use_sampling(timing.FULL)
