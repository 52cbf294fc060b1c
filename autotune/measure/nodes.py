"""The other nodes of trials that span several (launch.nnodes > 1): a follower per node.

A multi-node run is launched as torchrun launches it: one launcher per node, all meeting at one
c10d rendezvous. The study runs on one node, the driver's: each window's process there
launches that node's ranks and hosts the rendezvous at ``launch.rdzv_endpoint``. Every other
node runs ``autotune follow <study dir>``, which watches the study's directory (on a
filesystem every node mounts) for window requests of several nodes and, for each, launches
this node's ranks under the window's own run id (measure/ranks.node_main, in a process group
of its own). The ranks write their results beside the request and the driver's node merges
them: a follower never decides a trial's outcome, and a failure on its node is named by its
rank there. When a window ends on the driver's node (done, pruned, stalled, killed) the
runner writes its run id to ``ended`` beside the request, and the follower kills this node's
ranks at once rather than leave them in a collective until it times out; the study's end
writes ``nodes.stop``, and the follower exits.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from autotune.core.env import child_environ
from autotune.measure.protocol import ENDED_FILE, NODES_STOP_FILE, TrialRequest, spans_nodes
from autotune.measure.runner import kill_tree

log = logging.getLogger("autotune")

#: A request written this long before the follower started is still served (a follower
#: started a moment after the driver's node); an older one is a window that ended without
#: its ``ended`` mark (a driver killed), whose rendezvous nobody would join.
STARTED_LATE_S = 10.0
#: This node's launcher's output, beside the window's request (one file per node).
LOG_NAME = f"node.{os.uname().nodename}.log"


def follow(study_dir: Path, poll_s: float = 0.2) -> int:
    """Serve the study's windows of several nodes until the study ends (``nodes.stop``
    written after this follower started)."""
    study_dir = study_dir.resolve()
    start = time.time()
    served: set[str] = set()
    log.info("autotune follow: serving the windows of %s that span nodes, from host %s",
             study_dir, os.uname().nodename)
    while not stopped(study_dir, start):
        for path, req in pending(study_dir, served, start - STARTED_LATE_S):
            run_id = str(req.run_id)
            served.add(run_id)
            code = serve(path, run_id, lambda: stopped(study_dir, start))
            log.info("autotune follow: %s (%s): %s", path.parent.relative_to(study_dir),
                     run_id, "this node's ranks done" if code == 0 else
                     "stopped as the window ended on the driver's node" if code and code < 0
                     else f"this node's launcher exited {code} (its log: {LOG_NAME})")
        time.sleep(poll_s)
    log.info("autotune follow: the study has ended (%s)",
             (study_dir / NODES_STOP_FILE).read_text().strip())
    return 0


def stopped(study_dir: Path, since: float) -> bool:
    try:
        return (study_dir / NODES_STOP_FILE).stat().st_mtime >= since
    except OSError:
        return False


def pending(study_dir: Path, served: set[str], since: float) -> Iterator[tuple[Path, TrialRequest]]:
    """Requests of several nodes not yet served nor ended, written since ``since``."""
    for path in sorted(study_dir.rglob("request.json")):
        try:
            if path.stat().st_mtime < since:
                continue
            req = TrialRequest.read(path)
        except (OSError, ValueError):  # being written: the next poll reads it
            continue
        run_id = req.run_id
        if spans_nodes(req.launch) and run_id and run_id not in served \
                and ended(path.parent) != run_id:
            yield path, req


def ended(window_dir: Path) -> str | None:
    try:
        return (window_dir / ENDED_FILE).read_text().strip()
    except OSError:
        return None


def serve(path: Path, run_id: str, study_over: Callable[[], bool], poll_s: float = 0.1) -> int | None:
    """This node's ranks for one window, stopped when the window ends on the driver's node."""
    req = TrialRequest.read(path)
    with open(path.with_name(LOG_NAME), "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "autotune.measure.ranks", str(path)],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                env=child_environ(req.env))
        try:
            while proc.poll() is None:
                if ended(path.parent) == run_id or study_over():
                    break
                time.sleep(poll_s)
        finally:
            kill_tree(proc)  # its ranks and their loader workers with it
    return proc.returncode
