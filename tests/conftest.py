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


def _pg_bindir() -> Path | None:
    import glob
    import shutil

    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    return Path(dirs[-1]) if dirs else None


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """(url_for(dbname), admin) for a private PostgreSQL cluster started for this session.

    Uses $AUTOTUNE_TEST_PG_URL instead when set. Without PostgreSQL binaries the tests skip,
    unless AUTOTUNE_REQUIRE_PG=1 (CI), where they fail."""
    bindir = _pg_bindir()
    if bindir is None:
        msg = "PostgreSQL not installed (apt-get install postgresql)"
        if os.environ.get("AUTOTUNE_REQUIRE_PG"):
            pytest.fail(msg)
        pytest.skip(msg)
    data = tmp_path_factory.mktemp("pg") / "data"
    data.parent.chmod(0o777)
    as_pg: list[str] = []
    if os.geteuid() == 0:  # initdb refuses root: run the server as the postgres user
        as_pg = ["runuser", "-u", "postgres", "--"]
    port = _free_port()
    subprocess.run([*as_pg, str(bindir / "initdb"), "-D", str(data), "-U", "postgres",
                    "--auth-local=trust", "--auth-host=scram-sha-256"],
                   check=True, capture_output=True)
    subprocess.run([*as_pg, str(bindir / "pg_ctl"), "-D", str(data), "-l", str(data / "server.log"),
                    "-w", "-o", f"-p {port} -k {data} -c listen_addresses=127.0.0.1 -c max_connections=200",
                    "start"], check=True, capture_output=True)

    def admin(sql: str) -> None:
        subprocess.run([*as_pg, str(bindir / "psql"), "-h", str(data), "-p", str(port), "-U",
                        "postgres", "-v", "ON_ERROR_STOP=1", "-qc", sql], check=True, capture_output=True)

    admin(f"CREATE ROLE tuner LOGIN PASSWORD '{PG_PASSWORD}'")

    def url_for(db: str) -> str:
        admin(f"CREATE DATABASE {db} OWNER tuner")
        return f"postgresql+psycopg://tuner:{PG_PASSWORD}@127.0.0.1:{port}/{db}"

    yield url_for
    subprocess.run([*as_pg, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                   capture_output=True)
