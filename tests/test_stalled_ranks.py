"""A stalled trial of several ranks says which rank is stuck or died first (issue 60)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from autotune.measure.protocol import stalled_ranks


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_rank_that_died_without_a_result_is_named_before_the_peer_that_failed_with_it(
        tmp_path: Path) -> None:
    """Rank 1 killed with SIGKILL; rank 0 failed in its all-reduce with it, wrote its result
    and ended; both were gone before the launcher noticed (CI: "rank 0 had ended ...; rank 1
    had ended ..." named rank 0 first)."""
    for rank in (0, 1):
        (tmp_path / f"stack.rank{rank}.txt").write_text(f"pid {_dead_pid()}\n")
    (tmp_path / "result.rank0.json").write_text(json.dumps(
        {"outcome": "crash", "error": "RuntimeError: Connection closed by peer"}))
    reason = stalled_ranks(tmp_path)
    assert reason.startswith("rank 1 had ended (no process left to answer); rank 0 had ended "
                             "after it (crash: RuntimeError: Connection closed"), reason


def test_a_rank_stuck_in_its_own_code_is_named_before_one_waiting_in_torch(
        tmp_path: Path) -> None:
    (tmp_path / "stack.rank0.txt").write_text(
        'pid 1\nThread 0x1 (most recent call first):\n'
        '  File "/x/site-packages/torch/autograd/graph.py", line 824 in _engine_run_backward\n')
    (tmp_path / "stack.rank1.txt").write_text(
        'pid 2\nThread 0x1 (most recent call first):\n'
        '  File "/x/tests/workloads_faulty.py", line 88 in loss\n')
    assert stalled_ranks(tmp_path) == ("rank 1 in x/tests/workloads_faulty.py:88 (loss); "
                                       "rank 0 in torch/autograd/graph.py:824 (_engine_run_backward)")
