"""The notebook tutorial runs in a real Jupyter kernel (ipykernel, driven by nbclient): its
Workload class is defined in the kernel's ``__main__`` and reaches the trial processes by
value; the cell output shows the study's progress and its result."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.conftest import ROOT

pytestmark = pytest.mark.slow  # starts a kernel and a study

NOTEBOOK = ROOT / "docs" / "tutorials" / "notebook.ipynb"


def _text(cell: nbformat.NotebookNode) -> str:
    parts = []
    for out in cell.get("outputs", []):
        parts.append(out.get("text", "") or "".join(out.get("data", {}).get("text/plain", "")))
    return "".join(parts)


def test_notebook_tunes_its_own_workload_in_a_kernel(tmp_path: Path, monkeypatch) -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("AUTOTUNE_PROGRESS", "lines")
    NotebookClient(nb, timeout=540, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    tune_out, result_out = _text(code[2]), _text(code[3])
    assert "trial 0 (baseline)" in tune_out and "study 'notebook-blobs'" in tune_out, tune_out[-2000:]
    assert "speedup:" in result_out and "batch_size:" in result_out, result_out
    assert (tmp_path / "studies" / "notebook-blobs" / "best.yaml").exists()
