"""scripts/sass_summary.py's split of a warp-specialized kernel's SASS into regions, on a
synthetic Nsight source page laid out as the conv strip kernel's (consumers, then producer)."""

import csv
import importlib.util
import pathlib

import pytest

_SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "sass_summary.py"
_spec = importlib.util.spec_from_file_location("sass_summary", _SCRIPT)
sass_summary = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sass_summary)

# (source, executed, samples), in address order.
_KERNEL = [
    ("LDC R1, c[0x0][0x28]", 10, 1.0),                            # start
    ("USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xe0", 8, 0.0),           # consumers: unit head
    ("CS2R R24, SRZ", 64, 2.0),
    ("SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR11], R19", 16, 3.0),  # full wait
    ("@!P0  BRA 0x7f00", 16, 5.0),
    ("HGMMA.64x256x16.F32.BF16 R24, R160, gdesc[UR8], R24", 32, 7.0),  # MMAs
    ("WARPGROUP.DEPBAR.LE gsb0, 0x1", 32, 11.0),
    ("WARPGROUP.DEPBAR.LE gsb0, 0x0", 8, 13.0),
    ("STG.E.128 desc[UR42][R22.64], R28", 40, 17.0),              # epilogue
    ("EXIT", 8, 0.0),
    ("USETMAXREG.DEALLOC.CTAPOOL 0x38", 4, 0.0),                  # producer
    ("@P0   EXIT", 4, 0.0),
    ("UTMALDG.5D [UR16], [UR8]", 20, 19.0),
    ("EXIT", 1, 0.0),
    ("SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR11], R19", 99, 23.0),  # retry loops
]


def _write(tmp_path, lines):
    path = tmp_path / "k_sass.csv"
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed"])
        for i, (source, executed, samples) in enumerate(lines):
            writer.writerow([hex(0x1000 + 16 * i), source, samples, executed])
    return str(path)


def test_regions_split_at_the_markers(tmp_path):
    regions = sass_summary.ws_regions(_write(tmp_path, _KERNEL))
    assert regions == {
        "start": (10, 1.0),
        "consumers: unit head": (72, 2.0),
        "consumers: full wait": (32, 8.0),
        "consumers: MMAs": (72, 31.0),
        "consumers: epilogue": (48, 17.0),
        "producer": (29, 19.0),
        "retry loops": (99, 23.0),
    }
    assert sum(e for e, _ in regions.values()) == sum(e for _, e, _ in _KERNEL)


def test_regions_skip_a_wait_that_never_ran(tmp_path):
    """A wait compiled in but never executed (a path behind a switch) does not end the unit head."""
    unused_wait = ("SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [UR12], R20", 0, 0.0)
    kernel = _KERNEL[:3] + [unused_wait] + _KERNEL[3:]
    regions = sass_summary.ws_regions(_write(tmp_path, kernel))
    assert regions["consumers: unit head"] == (72, 2.0)
    assert regions["consumers: full wait"] == (32, 8.0)


def test_regions_refuse_a_kernel_without_the_split(tmp_path):
    plain = [line for line in _KERNEL if "USETMAXREG" not in line[0]]
    with pytest.raises(ValueError, match="USETMAXREG"):
        sass_summary.ws_regions(_write(tmp_path, plain))
