"""Trials of several nodes (launch.nnodes=2), simulated on this machine as torchrun's own
multi-node runs are: two launchers, one rendezvous. The driver's node is the study's trial
process; the other is `autotune follow` (measure/nodes.py), a real process of its own. Gloo,
real process groups, nothing mocked. Issue 29, item 7."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from tests.conftest import BARE_ARGS, child_env, run_cli

NODES = ["device=cpu", "launch.nnodes=2", "launch.nproc_per_node=1",
         "study.remeasure_contended=0"]  # the other "node" shares this machine's cores


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _follower(study_dir: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", "from autotune.cli.main import main; main()", "follow",
         str(study_dir)], env=child_env(),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _rank_processes(under: Path) -> list[str]:
    """The follower's node launchers and their ranks still alive (their command names the
    window's request, under ``under``)."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            if "autotune.measure.ranks" in cmd and str(under) in cmd \
                    and p.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{p.pid} {cmd[:100]}")
        except psutil.Error:
            pass
    return out


def test_two_launchers_form_each_two_node_trial_and_a_failing_rank_on_either_fails_it(
        tmp_path: Path) -> None:
    """One study over two "nodes" (the driver's trial processes and `autotune follow`), its
    windows in turn healthy, rank 1 raising, rank 1 hanging, then healthy: every healthy
    window's ranks met across the nodes (rank 0's and rank 1's results, the follower's log
    beside the request), a failing rank fails its trial with its reason (a raise named by its
    own result on whichever node it ran; a hang stalled within the few-second limit, not at
    the start, which allows for the other node's later launch), the study exports with the
    multi-node torchrun line, its end stops the follower, and no rank is left on either node."""
    import re

    import optuna

    study_dir = tmp_path / "studies" / "n2"
    count = tmp_path / "windows"
    count.mkdir()
    follower = _follower(study_dir)
    try:
        endpoint = f"localhost:{_free_port()}"
        proc = run_cli(["workload._target_=tests.workloads_faulty.RankFault",
                        "+workload.faults=[none,raise,hang]", f"+workload.count_dir={count}",
                        "study.name=n2", "study.n_trials=4", "window.stall_s=5",
                        "study.prune=false",  # trial 3 ran at 12% of trial 0's rate here, idle
                        f"launch.rdzv_endpoint={endpoint}", *NODES, *BARE_ARGS], tmp_path,
                       timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        out, _ = follower.communicate(timeout=60)
    finally:
        follower.kill()
    assert follower.returncode == 0, out
    assert "the study has ended" in out
    windows = [p.parent for p in study_dir.rglob("request.json")]
    assert len(windows) >= 4
    assert out.count("autotune follow: trials/") >= len(windows), out
    healthy, seen = 0, []
    for window in windows:
        assert list(window.glob("node.*.log")), "the follower launched no ranks for this window"
        if not (window / "result.json").exists():  # stalled: the runner ended it
            continue
        result = json.loads((window / "result.json").read_text())
        seen.append(f"{window.name}: {result['outcome']} {result.get('error', '')[:200]}")
        if result["outcome"] == "ok":
            healthy += 1
            assert sorted(r["rank"] for r in result["ranks"]) == [0, 1], result["ranks"]
            assert (window / "result.rank0.json").exists()
            assert (window / "result.rank1.json").exists()
    assert healthy >= 2, seen
    trials = optuna.load_study(study_name="n2",
                               storage=f"sqlite:///{study_dir}/study.db").get_trials()
    reasons = {t.user_attrs.get("outcome"): t.user_attrs.get("reason", "") for t in trials}
    assert re.search(r"^crash: rank 1: ValueError: rank 1's injected fault", reasons["crash"])
    assert "at start" not in reasons["stalled"], reasons
    launch = yaml.safe_load((study_dir / "best.yaml").read_text())["launch"]
    assert launch["nnodes"] == 2
    assert f"--rdzv-endpoint={endpoint}" in launch["torchrun"] and "--nnodes=2" in launch["torchrun"]
    assert "--standalone" not in launch["torchrun"]
    time.sleep(0.5)
    assert _rank_processes(tmp_path) == []


def test_a_node_that_never_joins_fails_the_trial_saying_which_command_joins_it(
        tmp_path: Path) -> None:
    """No follower on the other node: the trial fails at the rendezvous timeout (seconds, not
    torchrun's 900), its reason naming the endpoint and `autotune follow`; the study records
    it and ends."""
    endpoint = f"localhost:{_free_port()}"
    proc = run_cli(["workload=mlp", "study.name=alone", "study.n_trials=1",
                    f"launch.rdzv_endpoint={endpoint}", "launch.rdzv_timeout_s=3", *NODES,
                    *BARE_ARGS], tmp_path, timeout=180)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]  # nothing to export
    assert f"did not all meet at {endpoint} within 3 s" in proc.stdout
    assert "autotune follow" in proc.stdout


@pytest.mark.parametrize("endpoint,workers,words", [
    (None, 1, ["launch.rdzv_endpoint=<this node's host>:<port>", "autotune follow"]),
    ("localhost:29400", 2, ["workers=2", "leave workers at 1"]),
])
def test_several_nodes_need_an_endpoint_and_one_worker(endpoint: str | None, workers: int,
                                                       words: list[str]) -> None:
    from autotune.cli.config import LaunchConfig
    from autotune.cli.crash import UsageError
    from autotune.cli.validate import check_launch
    from autotune.core.env import Env, _probe_here

    env = Env.from_dict(_probe_here("cpu"))
    with pytest.raises(UsageError) as exc:
        check_launch(LaunchConfig(nnodes=2, rdzv_endpoint=endpoint), env, workers)
    for w in words:
        assert w in str(exc.value), str(exc.value)


def test_one_rank_on_each_of_two_nodes_is_a_launched_trial() -> None:
    """nproc_per_node=1 x nnodes=2 is two ranks: DDP and its knobs, not one process."""
    from autotune.cli.app import ranked
    from autotune.cli.config import LaunchConfig
    from autotune.core.env import Env, _probe_here
    from autotune.search.setup import launch_spec

    env = ranked(Env.from_dict(_probe_here("cpu")),
                 LaunchConfig(nnodes=2, rdzv_endpoint="localhost:29400"))
    assert env.ranks == 2
    assert launch_spec(LaunchConfig(nnodes=2, rdzv_endpoint="localhost:29400"), env)["nnodes"] == 2
