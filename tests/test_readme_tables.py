"""The README's performance tables are the committed results' figures: regenerated from the
JSON files each table's marker names, they come out as the README has them."""

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_readme_tables_match_their_results_files():
    readme = (ROOT / "README.md").read_text()
    assert readme.count("<!-- readme_tables:") >= 4  # targets, seed, large, conv
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "readme_tables.py"), "--check", "README.md"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_stale_table_is_caught(tmp_path):
    readme = (ROOT / "README.md").read_text()
    stale = re.sub(r"\| bfloat16 \| 1/2 \| [0-9.]+ ", "| bfloat16 | 1/2 | 999.9 ", readme, count=1)  # the seed table
    assert stale != readme
    (tmp_path / "benchmarks").symlink_to(ROOT / "benchmarks")
    (tmp_path / "README.md").write_text(stale)
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "readme_tables.py"), "--check", "README.md"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 1 and "differs" in done.stdout


def test_a_file_with_more_shapes_than_the_table_tells_apart_is_refused():
    """Two records for one cell (here the seed table's forward at bs 32 and 1/2, timed twice)
    would show whichever came last: the script refuses the file instead."""
    import json

    import pytest
    sys.path.insert(0, str(ROOT / "scripts"))
    import readme_tables

    path = ROOT / "benchmarks" / "results" / "quick_seed_h200_2026-12-04_session63.json"
    run = json.loads(path.read_text())
    twice = [r for r in run["records"] if r["impl"] == "jbs" and r["op"] == "forward" and r["density"] == 0.5
             and r["dtype"] == "bfloat16" and r["block_size"] == 32]
    assert len(twice) == 1
    copy = dict(twice[0], seed=1)  # another case key, the same cell
    with pytest.raises(ValueError, match="two records for the cell"):
        readme_tables.seed_table(path, run["meta"], run["records"] + [copy])
