"""PARENT side: run one trial window in a fresh subprocess under a watchdog, classify its end.

The child gets its own session (process group), so a timeout kills it with its DataLoader
workers and anything they spawned; a CUDA context it poisoned dies with it. The watchdog reads
the child's heartbeat file to tell a hang (no progress) from a slow trial, and can stop a trial
early when the caller's ``should_stop`` says it cannot win (pruning).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psutil

from autotune.measure.launch import TrialProcess
from autotune.measure.protocol import (
    ENDED_FILE,
    STACK_SIGNAL,
    TrialRequest,
    WindowResult,
    mentions_oom,
    spans_nodes,
    stalled_ranks,
)

STDERR_TAIL_LINES = 30


class Interrupted(Exception):
    """The driver was asked to stop (SIGINT/SIGTERM) while a trial ran; the child is dead."""


@dataclass
class Watch:
    """What the watchdog saw of a running child; handed to ``on_progress`` callbacks."""

    stage: str = "start"
    step: int = 0
    chunks: list[float] = field(default_factory=list)
    ceilings: dict[str, float] = field(default_factory=dict)
    partial: dict[str, Any] = field(default_factory=dict)  # a ceiling still being measured
    ceiling_noise: dict[str, float] = field(default_factory=dict)
    compile_s: float | None = None  # the first step's seconds, once it is done
    compiling_since: float | None = None  # monotonic time the first step began
    contended: bool = False  # the machine was busy with other work during the window so far
    restarting: bool = False  # readings.Progress.restarting: the chunks so far do not prune

    def compile_spent(self, now: float) -> float:
        """The first step's seconds: done, or so far (a trial stopped while it compiles)."""
        if self.compile_s is not None:
            return float(self.compile_s)
        return now - self.compiling_since if self.compiling_since is not None else 0.0


def kill_tree(proc: TrialProcess | subprocess.Popen[bytes]) -> None:
    """Kill the child's whole process group, and any descendant that left it (setsid)."""
    try:
        descendants = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        descendants = []
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for p in descendants:
        try:
            p.kill()
        except psutil.Error:
            pass
    proc.wait()
    _wait_dead(descendants, timeout_s=5.0)


def _wait_dead(procs: list[psutil.Process], timeout_s: float) -> None:
    """Wait until each process has exited. Orphaned DataLoader workers are reaped by init,
    which may take a second or more; an exited but unreaped zombie holds no memory or GPU
    context any more, so it counts as dead (psutil.wait_procs would wait for the reaping)."""
    deadline = time.monotonic() + timeout_s
    for p in procs:
        while time.monotonic() < deadline:
            try:
                if p.status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.Error:  # gone (or its pid reused, which means gone too)
                break
            time.sleep(0.01)


def run_window(
    req: TrialRequest,
    trial_dir: Path,
    on_progress: Callable[[Watch], str | None] | None = None,
    stop_requested: Callable[[], str | None] = lambda: None,
    poll_s: float = 0.1,
) -> WindowResult:
    """Run the window; return its result with the outcome classified. Never raises for a
    trial's own failure; raises Interrupted when ``stop_requested`` fires (after cleanup).

    ``on_progress`` may return a reason to stop the trial early (it then ends ``pruned``).
    """
    trial_dir = trial_dir.resolve()
    trial_dir.mkdir(parents=True, exist_ok=True)
    request_path, result_path = trial_dir / "request.json", trial_dir / "result.json"
    progress_path, stderr_path = trial_dir / "progress.json", trial_dir / "stderr.log"
    for p in (result_path, progress_path):
        p.unlink(missing_ok=True)
    child = replace(req, progress_path=str(progress_path),
                    trace_path=str(trial_dir / "trace.json") if req.trace else None)
    if spans_nodes(req.launch):  # the other nodes join this window's rendezvous by its id
        child.run_id = f"autotune-{uuid.uuid4().hex[:12]}"
        (trial_dir / ENDED_FILE).unlink(missing_ok=True)
    request_path.write_text(child.to_json())
    timeout_s, stall_s = req.window.timeout_s, req.window.stall_s
    compile_s = compile_allowance(req)
    join_s = float(req.launch.rdzv_timeout_s) if req.launch and spans_nodes(req.launch) else 0.0

    start, oom_before = time.monotonic(), oom_kills()
    proc = TrialProcess(str(request_path), str(result_path), str(stderr_path), req.env)
    try:
        ended_by, watch = _watch(proc, progress_path, on_progress, stop_requested,
                                 timeout_s + compile_s + join_s, stall_s, compile_s, poll_s,
                                 join_s)
        if ended_by and req.launch and ended_by.startswith(("stalled", "timeout")):
            where = _where_ranks_wait(proc, trial_dir)
            if _every_rank_ended(where) and proc.wait(RANKS_ENDED_GRACE_S) is not None:
                ended_by = None  # the launcher's own report names the rank that died first
            else:
                ended_by += f"; {where}" if where else ""
    finally:
        # Ended, stopped, finished, or the caller's callback raised: kill the group whatever
        # happened, which also reaps anything the child left behind (a grandchild, a
        # DataLoader worker). A trial must never outlive the watch over it.
        kill_tree(proc)
        if spans_nodes(req.launch):  # and its ranks on the other nodes (measure/nodes.py)
            (trial_dir / ENDED_FILE).write_text(str(child.run_id))
    wall = time.monotonic() - start
    res = _classify(proc.returncode, ended_by, result_path, stderr_path, wall, watch)
    if res.signal == "SIGKILL" and ended_by is None:
        _who_killed(res, oom_before, oom_kills())
    return res


def oom_kills() -> int | None:
    """The kernel's count of processes its OOM killer has killed (``oom_kill`` in /proc/vmstat,
    Linux 4.13 and later; host-wide, also inside a container); None where it cannot be read."""
    try:
        with open("/proc/vmstat") as f:
            for line in f:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def _who_killed(res: WindowResult, before: int | None, after: int | None) -> None:
    """A trial process killed by a SIGKILL autotune did not send: the OOM killer's count says
    whether it was the OOM killer (an infeasible configuration) or someone else (a crash with
    its reason: a user's ``kill -9``, a scheduler, a rank killing its launcher), which must not
    mark the configuration as too big for memory."""
    if before is None or after is None:
        return  # unknown: the OOM killer is the usual sender
    if after > before:
        res.outcome = "oom"
        res.error = f"killed by the host's OOM killer (/proc/vmstat oom_kill +{after - before})"
    elif not mentions_oom(res.stderr_tail):
        res.outcome = "crash"
        res.error = ("killed by SIGKILL from outside autotune, not by the OOM killer "
                     "(/proc/vmstat oom_kill unchanged during the window)")


def _where_ranks_wait(proc: TrialProcess, trial_dir: Path) -> str:
    """A trial of several ranks that stopped beating: ask each rank for its stack (the
    launcher's children are the ranks, measure/ranks.py) and say where each one is
    (protocol.stalled_ranks' words, "" where no rank answered)."""
    try:
        ranks = psutil.Process(proc.pid).children(recursive=False)
    except psutil.Error:
        return ""
    for p in ranks:
        try:
            p.send_signal(STACK_SIGNAL)
        except psutil.Error:
            pass
    time.sleep(0.5)
    return stalled_ranks(trial_dir)


#: Seconds a launcher whose ranks have all ended gets to notice and report which one failed
#: first. It learns of a rank's death when the rank's exit pipe closes, and the rank's
#: DataLoader workers, which inherit that pipe, hold it open until their watchdog sees their
#: parent gone (torch's MP_STATUS_CHECK_INTERVAL, 5 s): a killed rank and the peer that then
#: failed in a collective with it were both gone at a 5 s stall limit, and their stack files
#: alone could not say which was killed (CI, 2026-12-05).
RANKS_ENDED_GRACE_S = 12.0


def _every_rank_ended(where: str) -> bool:
    """Each rank that answered for its stack had ended: none is stuck, so no stack says where
    the trial hangs, and the launcher is about to say which rank failed."""
    parts = [p for p in where.split("; ") if p]
    return bool(parts) and all(" had ended" in p for p in parts)


def compile_allowance(req: TrialRequest) -> float:
    """Extra seconds a compiling trial may spend silent before its first step: a cold
    torch.compile (max-autotune above all) can take minutes to build and autotune kernels."""
    if req.knobs.get("compile", "off") == "off":
        return 0.0
    return req.window.compile_timeout_s


def _watch(proc: TrialProcess, progress_path: Path,
           on_progress: Callable[[Watch], str | None] | None,
           stop_requested: Callable[[], str | None],
           timeout_s: float, stall_s: float, compile_s: float,
           poll_s: float, join_s: float = 0.0) -> tuple[str | None, Watch]:
    """Poll the child until it exits or must be ended; return why it was ended (None: it
    exited by itself) and what was last seen of it. Raises Interrupted on a stop request.

    Silence is a hang after ``stall_s``, except while the child builds and runs its first
    step (stages "start" and "compile"), where a compiling trial gets ``compile_s`` more, and
    a window of several nodes ``join_s`` more at its start: the other nodes' launchers start
    their ranks only once its request is there (measure/nodes.py), so rank 0 may wait for
    them in DDP's construction for up to their rendezvous timeout."""
    start = time.monotonic()
    watch, last_change, seen = Watch(), start, None
    while proc.poll() is None:
        time.sleep(poll_s)
        now = time.monotonic()
        stop = stop_requested()
        if stop:
            raise Interrupted(stop)
        beat = _read_progress(progress_path)
        if beat is not None and beat != seen:
            seen, last_change = beat, now
            watch = Watch(beat.get("stage", "?"), beat.get("step", 0), beat.get("chunks", []),
                          beat.get("ceilings", {}), beat.get("partial") or {},
                          beat.get("ceiling_noise") or {}, beat.get("compile_s"),
                          watch.compiling_since, bool(beat.get("contended")),
                          bool(beat.get("restarting")))
            if watch.stage == "compile" and watch.compiling_since is None:
                watch.compiling_since = now
            if on_progress is not None:
                reason = on_progress(watch)
                if reason:
                    return f"pruned: {reason}", watch
        if now - start > timeout_s:
            return f"timeout: no result after {timeout_s:.0f}s (at {watch.stage} step {watch.step})", watch
        limit = (stall_s + (compile_s if watch.stage in ("start", "compile") else 0.0)
                 + (join_s if watch.stage == "start" else 0.0))
        if now - last_change > limit:
            return f"stalled: no progress for {limit:.0f}s (at {watch.stage} step {watch.step})", watch
    return None, watch


def _read_progress(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _classify(code: int | None, ended_by: str | None, result_path: Path, stderr_path: Path,
              wall: float, watch: Watch) -> WindowResult:
    tail = _tail(stderr_path)
    if ended_by is not None:
        outcome, _, why = ended_by.partition(": ")
        res = WindowResult(outcome=outcome, error=why, chunks=list(watch.chunks),
                           ceilings=dict(watch.ceilings), ceiling_noise=dict(watch.ceiling_noise),
                           compile_s=watch.compile_spent(time.monotonic()))
    elif result_path.exists():
        res = WindowResult.read(result_path)
    else:
        res = WindowResult(outcome="crash")
        if code is not None and code < 0:
            name = signal.Signals(-code).name
            res.signal = name
            # A SIGKILL we did not send is the kernel's OOM killer in practice.
            if name == "SIGKILL":
                res.outcome, res.error = "oom", "killed by SIGKILL (host OOM killer?)"
            else:
                res.error = f"child died from {name}"
        else:
            res.error = f"child exited with code {code} and wrote no result"
        if mentions_oom(tail):
            res.outcome = "oom"
    res.exit_code = code
    res.wall_s = wall
    res.stderr_tail = tail
    return res


def _tail(path: Path, lines: int = STDERR_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])
