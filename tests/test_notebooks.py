"""The notebooks run top to bottom in their small CPU mode."""

import os
import pathlib

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = sorted((pathlib.Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, monkeypatch):
    monkeypatch.setenv("JBS_NOTEBOOK_SMALL", "1")
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's inline backend: figures land in the notebook
    # The kernel imports the same jbs as these tests (installed, or the source tree).
    import jbs
    package_root = str(pathlib.Path(jbs.__file__).resolve().parent.parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])))
    notebook = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(notebook, timeout=900, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}}).execute()
    outputs = "".join(o.get("text", "") for cell in notebook.cells for o in cell.get("outputs", []))
    assert "bits/byte" in outputs or "bits/dim" in outputs  # each notebook reports its loss
    figures = sum("image/png" in o.get("data", {}) for cell in notebook.cells for o in cell.get("outputs", []))
    assert figures >= 1, "the notebook's plots did not reach its outputs"
