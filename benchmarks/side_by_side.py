"""Side by side, through one trial window, in one run: the study's baseline, the hand
recipe and autotune's best, re-measured in turn (A/B/C, A/B/C, ...) so drift on the machine
hits all three alike; the median of each and its speedup over the baseline's median.

    python benchmarks/side_by_side.py studies/resnet18/best.yaml --rounds 3 --out side.md

The recipe is benchmarks/strategies.py's ``recipe_knobs`` (all cores as workers, pinned +
non_blocking, the largest power-of-two batch, halved until it fits, uint8 transfer, set_to_none,
AMP, compile), resolved against this device's valid domains. Every window is the study's own
(request.json of its best trial): same workload, window, seed and device.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import autotune  # noqa: E402
from autotune.core.env import probe  # noqa: E402
from autotune.core.knobs import build_space  # noqa: E402
from autotune.core.workload import build_workload  # noqa: E402
from autotune.measure.protocol import TrialRequest, WindowResult  # noqa: E402
from autotune.measure.runner import run_window  # noqa: E402
from benchmarks.strategies import recipe_knobs  # noqa: E402


def _window(request: dict[str, Any], knobs: dict[str, Any], where: Path) -> WindowResult:
    req = TrialRequest(workload=request["workload"], knobs=knobs, device=request["device"],
                       window=request["window"], seed=request["seed"],
                       cpu_sized=request["cpu_sized"], env=request.get("env") or {})
    return run_window(req, where)


def _recipe(request: dict[str, Any], limit_gb: float, work: Path) -> dict[str, Any]:
    """The hand recipe (Chaim Rand, "PyTorch Model Performance Analysis and Optimization", 2023),
    its batch halved until a window fits in memory."""
    env = probe(request["device"])
    workload = build_workload(request["workload"])
    if request["cpu_sized"]:
        workload = workload.cpu_sized()
    setup = types.SimpleNamespace(workload_spec=request["workload"],
                                  space=build_space(env, workload, {}))
    knobs = recipe_knobs(env, setup)  # type: ignore[arg-type]
    while True:
        res = _window(request, knobs, work / f"recipe-{knobs['batch_size']}")
        if (res.outcome not in ("oom",) and res.peak_memory_gb <= limit_gb) or knobs["batch_size"] <= 1:
            return knobs
        knobs = {**knobs, "batch_size": knobs["batch_size"] // 2}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("best_yaml")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", help="write the markdown table (and a .json beside it) here")
    a = ap.parse_args()
    path = Path(a.best_yaml)
    best = autotune.load_best(path)
    doc = best.document
    study_dir = path.parent
    request = json.loads((study_dir / "trials" / str(doc["best_trial"]) / "request.json").read_text())
    baseline = json.loads((study_dir / "trials" / "0" / "request.json").read_text())["knobs"]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        entries = {"baseline": baseline,
                   "hand recipe": _recipe(request, doc["memory_limit_gb"], work),
                   "autotune": dict(best.knobs)}
        figures: dict[str, list[float]] = {name: [] for name in entries}
        for i in range(a.rounds):
            for name, knobs in entries.items():
                res = _window(request, knobs, work / f"{i}-{name.replace(' ', '_')}")
                figures[name].append(res.samples_per_sec if res.ok else float("nan"))
                print(f"round {i} {name}: {res.outcome} {res.samples_per_sec:,.1f} samples/s "
                      f"{res.error}", flush=True)
    base = statistics.median(figures["baseline"])
    rows = [f"| {name} | {statistics.median(v):,.1f} | {statistics.median(v) / base:.2f}x | "
            f"{', '.join(f'{x:,.0f}' for x in v)} |" for name, v in figures.items()]
    table = "\n".join([
        f"{datetime.date.today()}, {doc['device']['name']}, torch {doc['device']['torch']}, "
        f"study {doc['study']['name']}, {a.rounds} rounds in turn:", "",
        "| configuration | samples/s (median) | vs baseline | runs |", "|---|---|---|---|", *rows])
    print(table)
    if a.out:
        Path(a.out).write_text(table + "\n")
        Path(a.out).with_suffix(".json").write_text(json.dumps(
            {"figures": figures, "knobs": entries}, indent=1, default=str))


if __name__ == "__main__":
    main()
