"""The numerics check: a configuration whose losses drift from the baseline's numerics is
refused with its deviation in best.yaml and the summary; the next finalist is exported."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from autotune.search.numerics import DEFAULT_TOLERANCE, check_tolerance, deviation, families
from tests.conftest import TINY_ARGS, run_cli


def test_tolerance_is_the_loosest_family_changed() -> None:
    ref = {"amp": "off", "compile": "off", "cuda_graphs": False, "transfer_dtype": "float32",
           "tf32": False, "channels_last": False}
    assert families({**ref, "channels_last": True}, ref) == ["default"]
    assert families({**ref, "amp": "bf16", "compile": "default"}, ref) == ["amp", "compile"]
    assert families({**ref, "transfer_dtype": "uint8"}, ref) == ["device_transform"]
    assert check_tolerance({"amp": 0.1})["amp"] == 0.1
    assert check_tolerance({})["compile"] == DEFAULT_TOLERANCE["compile"]
    with pytest.raises(ValueError, match="valid keys: default, amp"):
        check_tolerance({"bf16": 0.1})
    with pytest.raises(ValueError, match="positive number"):
        check_tolerance({"amp": -1})
    assert deviation([1.0, 2.2], [1.0, 2.0]) == pytest.approx(0.1)
    assert math.isinf(deviation([], [1.0]))


def test_diverging_configuration_is_refused(tmp_path: Path) -> None:
    pins = ["knobs.num_workers=0", "knobs.batch_size=16", "knobs.amp=off",
            "knobs.optimizer_impl=default", "knobs.host_allocator=default", "knobs.set_to_none=true"]
    proc = run_cli(["workload._target_=tests.workloads_user.LayoutSensitive", "device=cpu",
                    "study.n_trials=3", "study.agent=false", "study.prune=false",
                    "study.confirm_runs=1", "study.confirm_top=2", "study.numerics_steps=4",
                    "study.name=num", *pins, *TINY_ARGS], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    best = yaml.safe_load((tmp_path / "studies" / "num" / "best.yaml").read_text())
    checked = best["numerics"]["trials"]
    bad = [e for e in checked.values() if e["passed"] is False]
    assert bad, (checked, proc.stdout[-3000:])  # channels_last was a finalist, and refused
    assert all(e["max_rel_dev"] == pytest.approx(0.5, abs=0.05) for e in bad), bad
    assert all("refused: loss deviation 5" in e["reason"] for e in bad)
    assert best["knobs"]["channels_last"] is False
    # The confirmation's re-runs picked the refused (fastest) one: the next finalist wins,
    # with its own confirmed figure.
    assert best["metrics"]["confirm_runs"] and best["best_trial"] in best["confirmation"]["finalists"]
    assert {int(n) for n, e in checked.items() if e["passed"] is False} <= set(
        best["confirmation"]["finalists"])
    assert checked[str(best["best_trial"])]["passed"] is True
    assert "numerics trial" in proc.stdout and "refused: loss deviation 5" in proc.stdout
