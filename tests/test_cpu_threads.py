"""cpu_threads is a knob: searched on the CPU, applied to the trial's training process (intra-
and inter-op threads) and to every DataLoader worker (its share of the cores), fixed to the
workers-aware cap on CUDA, and left alone for a best.yaml written before it existed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autotune.core.env import Env, usable_cpus
from autotune.core.host import process_threads, worker_threads
from autotune.core.space import build_space
from autotune.core.training import build_loader
from autotune.measure.protocol import TrialRequest
from autotune.measure.runner import run_window
from autotune.workloads.mlp import MLPWorkload
from tests.conftest import TINY_WINDOW
from tests.workloads_user import ThreadsMLP


def _threads_seen(tmp_path: Path, cpu_env: Env, **pins: Any) -> list[dict[str, Any]]:
    log = tmp_path / f"threads-{pins}.jsonl"
    wl_spec = {"_target_": "tests.workloads_user.ThreadsMLP", "log_file": str(log),
               "n_samples": 512}
    knobs = {**build_space(cpu_env, ThreadsMLP(str(log)), {}).baseline, **pins}
    req = TrialRequest(workload=wl_spec, knobs=knobs, device="cpu", window=TINY_WINDOW)
    result = run_window(req, tmp_path / f"w{len(list(tmp_path.iterdir()))}")
    assert result.ok, result.error
    return [json.loads(line) for line in log.read_text().splitlines()]


@pytest.mark.parametrize("threads", [1, 2])
def test_cpu_threads_reach_the_trial_process_and_every_worker(tmp_path: Path, cpu_env: Env,
                                                             threads: int) -> None:
    steps = _threads_seen(tmp_path, cpu_env, cpu_threads=threads, num_workers=2,
                          prefetch_factor=2, persistent_workers=True)
    assert steps and all(s["main"] == threads and s["interop"] == threads for s in steps)
    workers = {pid: n for s in steps for n, pid in s["loaders"]}
    assert len(workers) == 2 and steps[0]["pid"] not in workers  # two worker processes
    want = worker_threads({"cpu_threads": threads, "num_workers": 2}, usable_cpus())
    assert set(workers.values()) == {want}


def test_without_workers_the_training_process_loads_with_its_threads(tmp_path: Path,
                                                                     cpu_env: Env) -> None:
    steps = _threads_seen(tmp_path, cpu_env, cpu_threads=1, num_workers=0)
    assert {tuple(x) for s in steps for x in s["loaders"]} == {(1, steps[0]["pid"])}


@pytest.mark.parametrize("threads,workers,main,each", [
    (3, 2, 3, 2),   # a worker's share of 8 cores among 3 processes is 2
    (1, 2, 1, 1),   # never more than the training process's own
    (0, 2, 6, 2),   # 0: the cores the workers leave free
    (8, 1, 8, 4),
])
def test_each_worker_gets_its_share_of_the_cores(threads: int, workers: int, main: int,
                                                 each: int) -> None:
    """On a large machine (8 cores here, given to the loader), each DataLoader worker really
    runs with its share: torch alone gives every worker 1 thread."""
    knobs = {**build_space(_env(8), MLPWorkload(), {}).baseline, "cpu_threads": threads,
             "num_workers": workers, "prefetch_factor": 2, "persistent_workers": False}
    assert process_threads(knobs, 8) == main and worker_threads(knobs, 8) == each
    loader = build_loader(ThreadsMLP("/dev/null", n_samples=64), knobs, cores=8)
    seen = {(int(n), int(pid)) for x, _ in loader for n, pid in x[:, :2].tolist()}
    assert len({pid for _, pid in seen}) == workers and {n for n, _ in seen} == {each}


def _env(cores: int, device: str = "cpu", torch_threads: int | None = None) -> Env:
    return Env(device=device, device_name="x", total_memory_gb=8.0, cpu_count=cores,
               cuda_capability=(9, 0) if device == "cuda" else None, bf16=False, compiler=True,
               torch_version="2", cuda_version=None, gpu_count=int(device == "cuda"),
               torch_threads=cores if torch_threads is None else torch_threads)


def test_cpu_threads_domain_and_baseline() -> None:
    wl = MLPWorkload()
    small = build_space(_env(2), wl, {})
    assert small.domains["cpu_threads"].values == [1, 2]
    assert small.baseline["cpu_threads"] == 2  # torch's default: what the user runs today
    big = build_space(_env(48, torch_threads=24), wl, {})
    assert big.domains["cpu_threads"].values == [1, 2, 4, 8, 16, 32, 48]
    assert big.baseline["cpu_threads"] == 16  # the largest searched count not above 24
    cuda = build_space(_env(16, "cuda"), wl, {})
    assert cuda.domains["cpu_threads"].values == [0]
    assert "DataLoader workers leave free" in (cuda.domains["cpu_threads"].reason or "")
    assert build_space(_env(2), wl, {"cpu_threads": 6}).domains["cpu_threads"].values == [6]


def test_a_best_yaml_from_before_the_knob_leaves_threads_alone(tmp_path: Path) -> None:
    from autotune.production.best import best_from_document

    knobs = build_space(_env(2), MLPWorkload(), {}).baseline
    del knobs["cpu_threads"]
    best = best_from_document({"schema": 1, "knobs": knobs}, "old best.yaml")
    assert best.knobs["cpu_threads"] is None
    assert process_threads(best.knobs, 2) is None and worker_threads(best.knobs, 2) is None
