"""scripts/kernel_timeline.py on a synthetic chain laid out as jbs's small-N fwd: a copy kernel,
the walk launched early behind it, the sum kernel launched early beside the walk, and a fusion
that XLA runs once every other op."""

import importlib.util
import pathlib

import pytest

_SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "kernel_timeline.py"
_spec = importlib.util.spec_from_file_location("kernel_timeline", _SCRIPT)
kernel_timeline = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kernel_timeline)


def _chain(ops, period=50.0):
    events = []
    for k in range(ops):
        t = 100.0 + k * period
        events += [("copy", t, t + 2.5), ("walk", t + 1.0, t + 44.0), ("sum", t + 1.5, t + 46.0)]
        if k % 2 == 0:
            events.append(("fusion", t + 47.0, t + 47.5))
    return events[::-1]  # any order


def test_kernels_are_placed_within_their_op():
    period, rows = kernel_timeline.op_timeline(_chain(4), ops=4)
    assert period == pytest.approx(50.0)
    assert [row[0] for row in rows] == ["copy", "walk", "sum", "fusion"]
    by_name = {name: (count, start, end) for name, count, start, end in rows}
    assert by_name["copy"] == pytest.approx((1.0, 0.0, 2.5))
    assert by_name["walk"] == pytest.approx((1.0, 1.0, 44.0))
    assert by_name["sum"] == pytest.approx((1.0, 1.5, 46.0))
    assert by_name["fusion"] == pytest.approx((0.5, 47.0, 47.5))
    line = kernel_timeline.format_timeline(period, rows)
    assert "walk 1.0-44.0" in line and "fusion x0.50 47.0-47.5" in line and line.endswith("op period 50.0")


def test_one_op_has_no_period():
    period, rows = kernel_timeline.op_timeline(_chain(1), ops=1)
    assert period == 0.0 and rows[0][0] == "copy"


def test_a_chain_without_a_kernel_per_op_is_refused():
    with pytest.raises(ValueError, match="exactly once"):
        kernel_timeline.op_timeline([("fusion", 0.0, 1.0)], ops=3)
