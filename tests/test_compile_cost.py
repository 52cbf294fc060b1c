"""Compile cost in the search: recorded for every trial, checked against the pre-compile
ceiling, paid back (break-even) and, with study.run_steps, part of the objective; compiled
artifacts shared across trials through the study's inductor cache (cold vs warm)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from autotune.measure.protocol import TrialRequest
from autotune.measure.runner import run_window
from autotune.results.compile_cost import break_even, effective_rate
from tests.conftest import TINY_WINDOW
from tests.workloads_diag import SleepyLoaderWorkload, baseline_knobs, spec


def test_effective_rate_and_break_even_arithmetic() -> None:
    # 100 steps of 10 samples at 1,000 samples/s = 1 s, plus 1 s of compile: 500 samples/s
    assert effective_rate(1000.0, 1.0, 10, 100) == pytest.approx(500.0)
    assert effective_rate(1000.0, 1.0, 10, None) == 1000.0
    # eager 10 ms a step (1,000 samples/s at batch 10), compiled 5 ms: 5 ms saved a step,
    # 10 s of compile are paid back after 2,000 steps
    assert break_even(2000.0, 10.0, 10, 1000.0) == 2000
    assert break_even(900.0, 10.0, 10, 1000.0) is None  # slower: never


def test_loader_ceiling_can_prune_before_the_compile(tmp_path: Path) -> None:
    """The loader ceiling is measured before the first step, where torch.compile runs: a
    compiled trial on a loader far below the best is stopped without compiling."""
    from autotune.search.pruning import partial_verdict

    knobs = {**baseline_knobs(SleepyLoaderWorkload()), "compile": "default"}
    req = TrialRequest(workload=spec(SleepyLoaderWorkload), device="cpu", knobs=knobs,
                       window={**TINY_WINDOW, "measure_steps": 40, "measure_seconds": 20.0},
                       ceilings={"loader": True})
    stages: list[str] = []

    def check(watch: Any) -> str | None:
        stages.append(watch.stage)
        return partial_verdict(watch.partial, best=10_000.0)

    res = run_window(req, tmp_path, on_progress=check)
    assert res.outcome == "pruned", (res.outcome, res.error)
    assert "compile" not in stages and res.compile_s == 0.0


def _setup(tmp_path: Path, run_steps: int | None) -> Any:
    from autotune.cli.app import build_setup
    from autotune.cli.config import Config, KnobsConfig, StudyConfig, WindowConfig

    cfg = Config(workload={"_target_": "autotune.workloads.mlp.MLPWorkload"}, device="cpu",
                 study=StudyConfig(out_dir=str(tmp_path / "studies"), agent=False, prune=False,
                                   confirm_runs=0, run_steps=run_steps),
                 window=WindowConfig(**TINY_WINDOW),
                 knobs=KnobsConfig(compile=["off", "default"], num_workers=[0, 1]))
    return build_setup(cfg, [f"window.{k}={v}" for k, v in TINY_WINDOW.items()])[0]


@pytest.mark.slow  # two inductor compiles of a tiny MLP: ~1 minute on a loaded 2-core VM
def test_compiled_trials_record_cold_and_warm_compiles_and_break_even(tmp_path: Path) -> None:
    """Eager, then one graph compiled twice (with 0 and 1 loader workers: the same FX graph):
    the first compile is cold, the second warm from the study's shared inductor cache;
    best.yaml states both and the compiled finalist's break-even; with run_steps, the
    objective is the whole run's samples/s."""
    from autotune.results.export import write_exports
    from autotune.search.loop.driver import Driver

    setup = _setup(tmp_path, run_steps=50)
    driver = Driver(setup)
    driver.prepare()
    base = setup.space.baseline
    for workers in (0, 1):
        knobs = setup.space.complete({**base, "compile": "default", "num_workers": workers})
        driver.study.enqueue_trial(setup.space.searched(knobs), user_attrs={"source": "test"})
    assert driver.run(3) == 3
    trials = driver.study.trials
    assert [t.user_attrs["outcome"] for t in trials] == ["ok"] * 3, [t.user_attrs.get("reason") for t in trials]
    cold, warm = trials[1].user_attrs["compile_cache"], trials[2].user_attrs["compile_cache"]
    assert cold["misses"] >= 1, cold
    assert warm["hits"] >= 1 and warm["misses"] == 0, warm
    assert (setup.out_dir / "inductor_cache").is_dir()
    for t in trials:  # the objective: 50 steps with the compile time included
        a = t.user_attrs
        expected = effective_rate(a["samples_per_sec"], a["compile_s"], a["knobs"]["batch_size"], 50)
        assert t.value == pytest.approx(expected) and a["effective_samples_per_sec"] == t.value
    assert trials[1].value < trials[1].user_attrs["samples_per_sec"]  # its compile counted

    write_exports(driver.study, setup.out_dir, setup.storage)
    doc = yaml.safe_load((setup.out_dir / "best.yaml").read_text())
    section = doc["compile"]
    assert section["run_steps"] == 50 and section["compiled_trials"] == 2
    assert section["compile_s_cold_median"] is not None and section["compile_s_warm_median"] is not None
    assert section["best_eager"]["trial"] == 0
    assert {f["trial"] for f in section["finalists"]} <= {1, 2}
    for f in section["finalists"]:
        assert "break_even_steps" in f
