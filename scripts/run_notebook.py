"""Execute a notebook top to bottom in a fresh kernel and save it with its outputs.

Used on the GPU machine, where the notebook runs in its full mode (tests/test_notebooks.py runs
the small CPU mode). Usage: python3 scripts/run_notebook.py NOTEBOOK OUT.ipynb
"""

import os
import pathlib
import sys
import time

import nbclient
import nbformat


def main(source: str, destination: str) -> None:
    path = pathlib.Path(source).resolve()
    notebook = nbformat.read(path, as_version=4)
    # The kernel's own inline backend, so that the figures land in the saved notebook (with
    # MPLBACKEND=Agg, as this script set before session 65, plt.show() drew nothing into it).
    os.environ.pop("MPLBACKEND", None)
    start = time.time()
    try:
        nbclient.NotebookClient(notebook, timeout=1200, kernel_name="python3",
                                resources={"metadata": {"path": str(path.parent)}}).execute()
    finally:  # keep the outputs of a failed run too: they say where it stopped
        nbformat.write(notebook, destination)
    print(f"{path.name}: ran top to bottom in {time.time() - start:.0f}s")
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.get("text"):
                print(output["text"], end="")


if __name__ == "__main__":
    main(*sys.argv[1:])
