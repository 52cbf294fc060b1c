"""CHILD side: where a trial's process starts (the fork server's target, measure/launch.py):
one process measures its window itself (measure/window.py); a trial launched as the
production run is, N ranks, launches them (measure/ranks.py)."""

from __future__ import annotations

from pathlib import Path

from autotune.measure.protocol import TrialRequest


def launched(req: TrialRequest) -> bool:
    """A request that carries a launch runs through the launcher, one rank included: a study
    gives one only to several ranks (search/setup.py ``launch_spec``), and one rank is the only
    NCCL run a machine of one GPU allows (tests/test_nccl.py)."""
    return req.launch is not None


def main(request_path: str, result_path: str) -> int:
    req = TrialRequest.read(Path(request_path))
    from autotune.measure.script_trial import is_script

    if is_script(req) and not launched(req):  # the user's own command (autotune -- python ...)
        from autotune.measure.script_trial import run as run_script

        return run_script(req, Path(result_path))
    if launched(req):
        from autotune.measure.ranks import launch_window

        return launch_window(req, Path(request_path), Path(result_path))
    from autotune.measure.window import run

    return run(req, Path(result_path))
