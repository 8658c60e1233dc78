"""The benchmark's check against the targets: which cases each target judges, met or not, and
that a target the run did not time is never reported as met."""

from jbs.bench import targets


def _record(impl, us, *, op="forward", dtype="bfloat16", n=32, c=12288, k=12288, bs=32, density=0.5,
            floor_us=40.0, tflops=None, suite="matmul", **extra):
    return {"op": op, "dtype": dtype, "n": n, "c": c, "k": k, "block_size": bs, "density": density,
            "suite": suite, **extra, "impl": impl, "us": us, "floor_us": floor_us,
            "tflops": tflops if tflops is not None else 1000.0 / us}


GPU_RUN = {"gpu_kernels": True}


def _by_target(checks):
    return {(c.target.name, c.record["op"], c.record["density"]): (round(c.value, 3), c.met) for c in checks}


def test_floor_ratio_and_microseconds_over_the_floor():
    records = [_record("jbs", 48.0, density=1 / 2),                   # 1.2x the floor: met
               _record("jbs", 60.0, op="dx", density=1 / 4),           # 1.5x: not met
               _record("jbs", 6.5, density=1 / 32, floor_us=5.0),      # floor + 1.5 us: met
               _record("jbs", 9.0, op="dx", density=1 / 64, floor_us=3.0)]  # floor + 6 us: not met
    got = _by_target(targets.check(records))
    assert got == {("32 x 12288^2 fwd / dx, bs 32, 1/2-1/16", "forward", 1 / 2): (1.2, True),
                   ("32 x 12288^2 fwd / dx, bs 32, 1/2-1/16", "dx", 1 / 4): (1.5, False),
                   ("32 x 12288^2 fwd / dx, bs 32, 1/32-1/64", "forward", 1 / 32): (1.5, True),
                   ("32 x 12288^2 fwd / dx, bs 32, 1/32-1/64", "dx", 1 / 64): (6.0, False)}


def test_rates_are_against_the_dense_peer_of_the_same_case():
    shape = {"n": 8192, "c": 8192, "k": 8192, "bs": 64}
    records = [_record("jbs", 100.0, tflops=600.0, density=1 / 2, **shape),
               _record("xla_dense", 150.0, tflops=800.0, density=1 / 2, **shape),   # 75%: met
               _record("jbs", 100.0, tflops=400.0, density=1 / 4, **shape),
               _record("xla_dense", 150.0, tflops=800.0, density=1 / 4, **shape),   # 50%: not met
               _record("jbs", 100.0, tflops=700.0, density=1 / 8, **shape)]        # no dense peer: not judged
    got = _by_target(targets.check(records))
    assert got == {("8192^3 bf16, bs 64, 1/2-1/8", "forward", 1 / 2): (75.0, True),
                   ("8192^3 bf16, bs 64, 1/2-1/8", "forward", 1 / 4): (50.0, False)}


def test_conv_speedup_and_rate():
    conv = {"suite": "conv", "n": 64, "size": 32, "c": 320, "k": 320, "kernel": [3, 3], "density": 1 / 4}
    records = [_record("jbs", 50.0, tflops=300.0, **conv),
               _record("xla_dense", 130.0, tflops=480.0, **conv)]
    got = _by_target(targets.check(records))
    assert got == {("conv bf16, bs 32, 1/2-1/8", "forward", 1 / 4): (62.5, True),
                   ("conv bf16, bs 32, 1/4", "forward", 1 / 4): (2.6, True)}


def test_cases_outside_every_target_are_not_judged():
    records = [_record("jbs", 50.0, n=256),                     # not the seed shape
               _record("jbs", 50.0, bs=64),                     # seed shape, bs 64: no target
               _record("jbs", 50.0, density=1.0),               # density 1: outside 1/2-1/16
               _record("torch_bsr", 10.0)]                      # a peer, not jbs
    assert targets.check(records) == []


def test_markdown_reports_uncovered_targets_and_never_counts_them_met():
    records = [_record("jbs", 48.0), _record("jbs", 60.0, op="dx")]
    text = targets.markdown(GPU_RUN, records)
    assert "| 32 x 12288^2 fwd / dx, bs 32, 1/2-1/16 | <= 1.25 x floor | 1 / 2 | dx bfloat16 bs 32 1/2: 1.50 | - |" in text
    assert "Not covered by this run: 32 x 12288^2 fwd / dx, bs 32, 1/32-1/64;" in text
    assert "conv bf16, bs 32, 1/4." in text
    every = targets.markdown(GPU_RUN, records, every_case=True)
    assert "| forward bfloat16 bs 32 1/2 | 1.20 | yes | - |" in every and "| dx bfloat16 bs 32 1/2 | 1.50 | no | - |" in every


def test_xla_s_copy_of_the_same_bytes_is_held_to_the_floor_bars():
    """Where the run timed XLA's copy of a case's bytes, each floor-measured target says in how
    many cases that copy meets the bar: a bar the copy misses is below what a plain kernel costs."""
    records = [_record("jbs", 60.0, density=1 / 16, floor_us=5.0), _record("xla_copy", 9.0, density=1 / 16, floor_us=5.0),
               _record("jbs", 60.0, op="dx", density=1 / 2), _record("xla_copy", 40.0, op="dx", density=1 / 2),
               _record("jbs", 9.0, density=1 / 64, floor_us=3.0), _record("xla_copy", 8.0, density=1 / 64, floor_us=3.0)]
    checks = targets.check(records)
    assert sorted((c.record["density"], c.copy_value, c.copy_met) for c in checks) == [
        (1 / 64, 5.0, False), (1 / 16, 1.8, False), (1 / 2, 1.0, True)]
    text = targets.markdown(GPU_RUN, records)
    assert "| 32 x 12288^2 fwd / dx, bs 32, 1/2-1/16 | <= 1.25 x floor | 0 / 2 | forward bfloat16 bs 32 1/16: 12.00 | 1 / 2 |" in text
    assert "| 32 x 12288^2 fwd / dx, bs 32, 1/32-1/64 | <= 2 us over floor | 0 / 1 | forward bfloat16 bs 32 1/64: 6.00 | 0 / 1 |" in text
    every = targets.markdown(GPU_RUN, records, every_case=True)
    assert "| forward bfloat16 bs 32 1/16 | 12.00 | no | 1.80 |" in every


def test_a_reference_path_run_is_not_judged():
    text = targets.markdown({"gpu_kernels": False}, [_record("jbs", 48.0)])
    assert "reference path" in text and "|" not in text


def test_the_command_line_reads_a_results_file(tmp_path, capsys):
    path = tmp_path / "run.json"
    path.write_text('{"meta": {"device": "GPU", "date": "today", "gpu_kernels": true}, "records": '
                    '[{"op": "step", "dtype": "float32", "n": 32, "c": 12288, "k": 12288, "block_size": 32, '
                    '"density": 0.25, "suite": "matmul", "impl": "jbs", "us": 130.0, "floor_us": 100.0, '
                    '"tflops": 1.0}]}')
    assert targets.main([str(path)]) == 0
    assert "| 32 x 12288^2 training step, bs 32 | <= 1.4 x floor | 1 / 1 |" in capsys.readouterr().out
