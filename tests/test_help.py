"""`autotune --help` explains the tool: what it does, the main command, the workloads and the
knobs, where to read more; not Hydra's generic text."""

from __future__ import annotations

from pathlib import Path

from autotune.core.knobs import KNOBS
from tests.conftest import ROOT, run_cli


def test_help_names_autotune_workloads_and_knobs(tmp_path: Path) -> None:
    proc = run_cli(["--help"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert out.startswith("autotune - "), out[:200]
    assert "powered by Hydra" not in out
    assert "autotune workload=resnet18" in out and "study.n_trials=" in out
    for wl in sorted(p.stem for p in (ROOT / "autotune" / "conf" / "workload").glob("*.yaml")):
        assert wl in out, wl
    for knob in KNOBS:
        assert f"  {knob.name} " in out, knob.name
    assert "README.md" in out
    assert "_target_: workloads" not in out  # not the resolved config dump
