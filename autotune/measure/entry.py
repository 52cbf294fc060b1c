"""CHILD side: where a trial's process starts (the fork server's target, measure/launch.py):
one process measures its window itself (measure/window.py); a trial launched as the
production run is, N ranks, launches them (measure/ranks.py)."""

from __future__ import annotations

from pathlib import Path

from autotune.measure.protocol import TrialRequest


def launched(req: TrialRequest) -> bool:
    return int(req.launch.get("nproc_per_node", 1)) * int(req.launch.get("nnodes", 1)) > 1


def main(request_path: str, result_path: str) -> int:
    req = TrialRequest.read(Path(request_path))
    if launched(req):
        from autotune.measure.ranks import launch_window

        return launch_window(req, Path(request_path), Path(result_path))
    from autotune.measure.window import run

    return run(req, Path(result_path))
