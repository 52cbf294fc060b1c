"""The environment a benchmark starts autotune in: the checkout under test first on the path,
what PYTHONPATH already held kept after it. A benchmark that replaced PYTHONPATH lost the
dependencies a GPU machine keeps there (/tmp/site, on the project's GPU machines), as the tests'
children did under torch 2.11's image (tests/conftest.child_env, 2026-11-27)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child_env(root: Path = ROOT, **extra: str) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


def run_logged(args: list[str], cwd: Path, log: Path, ok: tuple[int, ...] = (0, 4)) -> float:
    """One command of a benchmark in ``cwd`` with this checkout's autotune, its output to
    ``log``; its seconds. An exit code outside ``ok`` ends the benchmark, naming the log (4: a
    study that exported with a could-not-measure note)."""
    import subprocess
    import sys
    import time

    t = time.perf_counter()
    with log.open("w") as f:
        proc = subprocess.run(args, cwd=cwd, stdout=f, stderr=subprocess.STDOUT,
                              env=child_env(), check=False)
    if proc.returncode not in ok:
        sys.exit(f"{' '.join(args)} exited with {proc.returncode}; its output: {log}")
    return time.perf_counter() - t
