"""Shipped objects are checked against the hash their file is named by before anything unpickles
them (autotune/core/shipping.py): a file changed after the study shipped it fails the trial
with the file named, and its code never runs."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

from autotune.core.shipping import Shipped, workload_parts
from autotune.core.workload import WorkloadError, build_workload
from autotune.workloads.mlp import MLPWorkload


class _Runs:
    """An object whose unpickling creates ``marker``: what a planted pickle does."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


def test_a_shipped_workload_loads_as_shipped(tmp_path: Path) -> None:
    spec = workload_parts(MLPWorkload(hidden=16)).spec(tmp_path)
    assert Path(spec["objects"]).parent == tmp_path
    workload = build_workload(spec)  # the trial's way in
    assert isinstance(workload, MLPWorkload) and workload.hidden == 16


def test_a_changed_file_fails_the_trial_naming_it_and_is_never_unpickled(tmp_path: Path) -> None:
    """The study's .pkl replaced by another pickle (one that would run code): the trial's
    factory refuses it with the file's path and why; the planted code did not run."""
    spec = workload_parts(MLPWorkload(hidden=16)).spec(tmp_path)
    path = Path(spec["objects"])
    marker = tmp_path / "ran"
    path.write_bytes(pickle.dumps(_Runs(marker)))
    with pytest.raises(WorkloadError) as info:
        build_workload(spec)
    said = str(info.value)
    assert str(path) in said and "does not match its name" in said
    assert "trusted like code" in said
    assert not marker.exists()
    # A file damaged by a single byte is refused the same way.
    spec = workload_parts(MLPWorkload(hidden=32)).spec(tmp_path)
    path = Path(spec["objects"])
    path.write_bytes(path.read_bytes() + b"\0")
    with pytest.raises(WorkloadError, match="does not match its name"):
        Shipped(path)
