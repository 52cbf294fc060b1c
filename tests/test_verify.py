"""``autotune verify``: the production path run with the original settings and with the
exported ones, interleaved, each side in a process of its own; the realized speedup with its
interval beside the study's, written to verify.json; a user's unchanged script through
AUTOTUNE_BEST and the meter; and, where it falls short, what the production path adds."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from autotune.production.verify import causes
from tests.conftest import TINY_ARGS, run_cli


def _study(tmp_path: Path, name: str) -> Path:
    proc = run_cli(["workload=mlp", "device=cpu", f"study.name={name}", "study.n_trials=2",
                    "knobs.batch_size=64", *TINY_ARGS], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp_path / "studies" / name


def test_verify_runs_both_sides_through_the_runtime_api(tmp_path: Path) -> None:
    folder = _study(tmp_path, "v")
    proc = run_cli(["verify", str(folder), "--rounds", "2", "--steps", "6", "--warmup", "2"],
                   tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "autotune verify: realized" in proc.stdout and "the study measured" in proc.stdout
    out = json.loads((folder / "verify.json").read_text())
    assert out["how"] == "your loop through autotune.Runtime"
    assert [len(out["figures"][s]) for s in ("baseline", "exported")] == [2, 2]
    assert all(f["steps"] == 6 and f["samples_per_sec"] > 0
               for s in ("baseline", "exported") for f in out["figures"][s])
    assert out["realized"]["rounds"] == 2
    base = yaml.safe_load((folder / "verify" / "baseline.yaml").read_text())
    trial0 = json.loads((folder / "trials" / "0" / "request.json").read_text())
    assert base["knobs"] == trial0["knobs"]  # the original settings, through the same code
    # ... and its global batch is the one those settings train with (one process here), not
    # the exported configuration's.
    assert base["global_batch"] == trial0["knobs"]["batch_size"] * base["grad_accum"]


def test_the_baseline_sides_global_batch_counts_the_ranks_of_the_exported_one() -> None:
    """Two ranks, the best at micro-batch 64 without accumulation (global 128), the user's
    baseline at 16 x 4: the baseline side trains on 16 x 4 x 2 = 128 samples a step, and a
    baseline at 16 alone on 32."""
    from autotune.production.verify import _baseline_global_batch

    best = {"knobs": {"batch_size": 64}, "grad_accum": 1, "global_batch": 128}
    assert _baseline_global_batch(best, {"batch_size": 16}, 4) == 128
    assert _baseline_global_batch(best, {"batch_size": 16}, 1) == 32


def test_verify_runs_a_users_own_script_unchanged(tmp_path: Path) -> None:
    """examples/train_plain.py reads best.yaml through autotune.Runtime and steps its Meter:
    verify runs it as it is, once per side, and reads the meter's figure at its exit."""
    folder = _study(tmp_path, "s")
    script = Path(__file__).resolve().parent.parent / "examples" / "train_plain.py"
    proc = run_cli(["verify", str(folder), "--rounds", "1", "--script", str(script),
                    str(folder / "best.yaml"), "--steps", "80", "--device", "cpu"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads((folder / "verify.json").read_text())
    assert out["how"].startswith("train_plain.py")
    for side in ("baseline", "exported"):
        (fig,) = out["figures"][side]
        assert fig["samples_per_sec"] > 0 and fig["steps"] == 80


def test_a_shortfall_names_what_the_production_path_adds() -> None:
    window = {"step_ms": {"median": 10.0, "mean": 10.0}, "timers": {"data_wait": 0.1}}
    slow_between = [{"samples_per_sec": 50.0, "step_ms": 20.0, "inside_ms": 9.0,
                     "between_ms": 11.0}]
    said = causes(slow_between, window)
    assert len(said) == 1 and "time between steps: 11.0 ms" in said[0] and "1.0 ms" in said[0]
    slow_inside = [{"samples_per_sec": 50.0, "step_ms": 20.0, "inside_ms": 19.0,
                    "between_ms": 1.0}]
    assert "a slower step: 19.0 ms" in " ".join(causes(slow_inside, window))
    assert "not on record" in causes(slow_inside, {})[0]
    # Neither, from a script's Meter that reports no step time: said, not a KeyError (a noisy
    # one-round verify of examples/train_plain.py once read its exported side slower).
    meter = [{"samples_per_sec": 58479.3, "inside_ms": 0.5, "between_ms": 0.4}]
    said = causes(meter, window)
    assert len(said) == 1 and said[0].startswith("neither: 0.9 ms per step")
