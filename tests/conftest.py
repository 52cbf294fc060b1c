from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autotune.core.env import Env, probe

ROOT = Path(__file__).resolve().parent.parent

# A confirmation that ends at its minimum rounds (study.confirm_runs): any interval is precise
# enough, and no budget is left for more. Tests assert what a confirmation records, not how
# noisy a busy CI machine's 2-second windows are (tests/test_confirm.py tests the stopping).
QUICK_CONFIRM = ["study.confirm_precision=10", "study.confirm_budget_s=0"]

# A window small enough for 2 CPU cores: seconds per trial.
TINY_WINDOW: dict[str, Any] = {
    "warmup_steps": 2, "measure_steps": 6, "measure_seconds": 3.0, "min_measure_steps": 2,
    "min_measure_seconds": 0.0, "timeout_s": 120.0, "stall_s": 60.0, "profile": False,
    "profile_steps": 2,
}
# A window measures for at least 1 s (the CPU default is 2 s): a study in a test runs about
# ten windows, and the suite about a hundred studies (CI time, issue 29's note).
TINY_ARGS = ["window.warmup_steps=2", "window.measure_steps=6", "window.measure_seconds=3",
             "window.min_measure_steps=2", "window.min_measure_seconds=1",
             "window.profile=false", *QUICK_CONFIRM]
#: For tests whose subject is storage, resumption, workers or faults, not the measurement: the
#: trials alone, no confirmation rounds or numerics check after them.
BARE_ARGS = [*TINY_ARGS, "study.confirm_runs=0", "study.numerics_steps=0"]


def study_setup(env: Env, space: Any = None, *, window: dict[str, Any] | None = None,
                launch: Any = None, **study: Any) -> Any:
    """A StudySetup of the MLP workload as the command line builds one: these study.* keys,
    the schema's defaults for the others, every section sized for ``env``'s device."""
    from autotune.core.config import LaunchConfig, StudyConfig, WindowConfig, sized_for
    from autotune.core.space import build_space
    from autotune.search.setup import StudySetup
    from autotune.workloads.mlp import MLPWorkload

    return StudySetup(
        name="s", storage="sqlite://", out_dir=Path("."), env=env,
        space=space if space is not None else build_space(env, MLPWorkload(), {}),
        workload_spec={}, workload_label="mlp",
        study=sized_for(StudyConfig(**study), env.device),
        window=sized_for(WindowConfig(**(window or {})), env.device),
        launch=launch or LaunchConfig(), memory_limit_gb=1.0)


#: What makes a test slow: it starts a study, a trial window or a subprocess. A test is marked
#: ``slow`` when its function, a fixture it requests, or a module-level helper either of them
#: calls (followed through the test module) names one of these. ``python -m pytest -m "not
#: slow"`` is the fast tier (README).
SLOW_NAMES = frozenset({
    "run_cli", "run_window", "run_study", "run_worker", "Driver", "confirm", "check_numerics",
    "subprocess", "Popen", "TrialProcess", "start_server", "pg_server", "run_bench",
    "tune", "verify",
})


def _names(obj: Any, module: Any, seen: set[int]) -> set[str]:
    """Global names a function uses, through the module-level functions it calls."""
    import inspect
    import types

    fn = inspect.unwrap(obj)
    code = getattr(fn, "__code__", None)
    if code is None or id(code) in seen:
        return set()
    seen.add(id(code))
    names: set[str] = set()
    stack = [code]
    while stack:
        c = stack.pop()
        names.update(c.co_names)
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    for name in list(names):
        helper = getattr(module, name, None)
        if inspect.isfunction(helper) and helper.__module__ == module.__name__:
            names |= _names(helper, module, seen)
    return names


def _is_slow(item: Any) -> bool:
    fn = getattr(item, "function", None)
    if fn is None:
        return False
    seen: set[int] = set()
    names = _names(fn, item.module, seen) | set(item.fixturenames)
    for defs in item._fixtureinfo.name2fixturedefs.values():
        for d in defs:
            names |= _names(d.func, item.module, seen)
    return bool(names & SLOW_NAMES)


#: This run's folder for what tests write outside a tmp_path (helpers that are no fixtures,
#: the inductor cache), made by pytest_configure and removed when the run ends.
RUN_DIR: list[Path] = []


def scratch() -> Path:
    """A new folder under this run's, for a helper that is not a fixture and so has no
    tmp_path (a Trainer's output_dir, a shipped workload)."""
    return Path(tempfile.mkdtemp(dir=RUN_DIR[0]))


def pytest_configure(config: Any) -> None:
    """Compiled code the tests make in their own process (Runtime.compile, the tutorials, the
    adapters) caches under this run's folder, not in the machine's /tmp/torchinductor_<user>,
    which grew by hundreds of MB a run; a study's trials already cache under the study's
    folder (autotune/results/compile_cost.py). The folder goes when the run ends."""
    folder = Path(tempfile.mkdtemp(prefix="autotune-tests-"))
    RUN_DIR.append(folder)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(folder / "inductor"))
    # Studies print every detail (autotune -v), as autotune.log has them: the tests read the
    # facts a study states; tests/test_console.py reads the default console's glance.
    os.environ.setdefault("AUTOTUNE_VERBOSE", "1")
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    import torch

    slow = pytest.mark.slow
    for item in items:
        if "slow" not in item.keywords and _is_slow(item):
            item.add_marker(slow)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def cpu_env() -> Env:
    return probe("cpu")


def leftover_trials(since: float, under: Path) -> list[str]:
    """Trial processes (and the test workloads' sleeping grandchildren) started since ``since``
    that are still alive and write to a log under ``under``: a trial's stdout/stderr go to its
    trial directory, and its DataLoader workers and grandchildren inherit them. Trials of other
    test runs on the same machine (parallel jobs, other checkouts) are not this test's orphans."""
    import psutil

    root = str(under.resolve())
    out = []
    for p in psutil.process_iter(["name", "cmdline", "create_time"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            if p.info["create_time"] >= since and p.status() != psutil.STATUS_ZOMBIE and (
                p.info["name"] == "autotune-trial" or "time.sleep(3600)" in cmd
            ) and os.readlink(f"/proc/{p.pid}/fd/2").startswith(root):
                out.append(f"{p.pid} {cmd[:80]}")
        except (psutil.Error, OSError):
            pass
    return out


def child_env(**extra: str) -> dict[str, str]:
    """This environment for a child process, the checkout first on its path. What PYTHONPATH
    held is kept: a GPU machine's autotune dependencies are found there (/tmp/site: ../shared/gpu),
    and a child that lost them failed its import (2026-11-27, torch 2.11's image)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


def run_cli(args: list[str], cwd: Path, timeout: float = 300, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    """The real console entry point in a real subprocess, as a user types it."""
    full_env = child_env(**(env or {}))
    return subprocess.run(
        [sys.executable, "-c", "from autotune.cli.main import main; main()", *args],
        cwd=cwd, capture_output=True, text=True, timeout=timeout, env=full_env,
    )


def ran_to_the_end(code: int, output: str) -> bool:
    """A study that ran to its end: exit 0, or COULD_NOT_MEASURE with the statement saying why.
    Several workers on two cores contend with each other by construction, and a CI machine can
    be busy: a study that says it could not measure has done its job, and tests whose subject
    is storage, resumption or workers must stay green under that load."""
    from autotune.search.run import COULD_NOT_MEASURE

    if code == 0:
        return True
    return code == COULD_NOT_MEASURE and ("too busy to measure" in output
                                          or "too noisy to rank" in output)


# --- a real PostgreSQL server on loopback, for the many-workers tests ----------------------------
PG_PASSWORD = "pw-SENTINEL-7f3a"  # grep for it: it must never reach studies/ or logs


@pytest.fixture(scope="session")
def pg_server() -> Any:
    """url_for(dbname) on a private PostgreSQL cluster started for this session. Without the
    PostgreSQL binaries the tests skip, unless AUTOTUNE_REQUIRE_PG=1 (CI), where they fail."""
    from tests.pgserver import PgServer, pg_bindir

    msg = None
    if pg_bindir() is None:
        msg = "PostgreSQL not installed (apt-get install postgresql)"
    elif importlib.util.find_spec("psycopg") is None:  # not on a GPU machine's image
        msg = "psycopg not installed (pip install 'autotune[postgres]')"
    if msg:
        if os.environ.get("AUTOTUNE_REQUIRE_PG"):
            pytest.fail(msg)
        pytest.skip(msg)
    server = PgServer(PG_PASSWORD)
    yield server.url_for
    server.stop()


def measured_trials(study_dir: Path) -> Iterator[tuple[Path, dict[str, Any], dict[str, Any], str]]:
    """Each trial of a study that measured its window (pruned and failed ones left out): its
    folder, request, result and the logs its process wrote (what a script printed)."""
    import json

    for trial in sorted((study_dir / "trials").iterdir()):
        if not (trial / "result.json").exists():  # pruned: its window cut short
            continue
        result = json.loads((trial / "result.json").read_text())
        if result["outcome"] != "ok":
            continue
        request = json.loads((trial / "request.json").read_text())
        yield trial, request, result, "".join(p.read_text() for p in trial.glob("*.log"))
def tuned_as_two_ranks(tmp_path: Path, command: list[str], batches: str, printed: str) -> None:
    """A script study of ``command`` as 2 ranks under torch's launcher (launch.nproc_per_node=2,
    2 trials over ``batches``): every measured trial's result has both ranks, each rank's log
    has the line matching ``printed`` with world=2, and nothing is left running."""
    import re
    import time

    since = time.time()
    proc = run_cli(["study.n_trials=2", "launch.nproc_per_node=2", f"knobs.batch_size={batches}",
                    "knobs.compile=off", *BARE_ARGS, "--", *command], tmp_path, timeout=900)
    out = proc.stdout + proc.stderr
    assert ran_to_the_end(proc.returncode, out), out[-3000:]
    trials = list(measured_trials(tmp_path / "studies" / "train-cpu-2ranks"))
    assert trials, out[-3000:]
    for trial, _, result, _ in trials:
        assert sorted(r["rank"] for r in result["ranks"]) == [0, 1], result
        logs = "".join(p.read_text() for p in trial.rglob("*.log"))  # the launcher's repeats
        assert len(re.findall(printed + r" .* world=2\b", logs)) >= 2, logs[-2000:]
    assert not leftover_trials(since, tmp_path)


