from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from autotune.env import Env, probe

ROOT = Path(__file__).resolve().parent.parent

# A window small enough for 2 CPU cores: seconds per trial.
TINY_WINDOW: dict[str, Any] = {
    "warmup_steps": 2, "measure_steps": 6, "measure_seconds": 3.0, "min_measure_steps": 2,
    "timeout_s": 120.0, "stall_s": 60.0, "profile": False, "profile_steps": 2,
}
TINY_ARGS = ["window.warmup_steps=2", "window.measure_steps=6", "window.measure_seconds=3",
             "window.min_measure_steps=2", "window.profile=false"]


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    import torch

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


def run_cli(args: list[str], cwd: Path, timeout: float = 300, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    """The real console entry point in a real subprocess, as a user types it."""
    full_env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
                **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", "from autotune.cli import main; main()", *args],
        cwd=cwd, capture_output=True, text=True, timeout=timeout, env=full_env,
    )


# --- a real PostgreSQL server on loopback, for the many-workers tests ----------------------------
PG_PASSWORD = "pw-SENTINEL-7f3a"  # grep for it: it must never reach studies/ or logs


@pytest.fixture(scope="session")
def pg_server() -> Any:
    """url_for(dbname) on a private PostgreSQL cluster started for this session. Without the
    PostgreSQL binaries the tests skip, unless AUTOTUNE_REQUIRE_PG=1 (CI), where they fail."""
    from tests.pgserver import PgServer, pg_bindir

    if pg_bindir() is None:
        msg = "PostgreSQL not installed (apt-get install postgresql)"
        if os.environ.get("AUTOTUNE_REQUIRE_PG"):
            pytest.fail(msg)
        pytest.skip(msg)
    server = PgServer(PG_PASSWORD)
    yield server.url_for
    server.stop()
