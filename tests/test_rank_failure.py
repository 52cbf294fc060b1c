"""Which rank a failed launched trial names: the launcher's real ChildFailedError and the ranks'
own result files, merged as the trial's launcher merges them (the studies that make each fault
real are tests/test_ddp.py's and tests/test_sharding_launched.py's)."""

from __future__ import annotations

from pathlib import Path

from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

from autotune.measure.protocol import TrialRequest, WindowResult
from autotune.measure.rank_failure import first_failure
from autotune.measure.ranks import merge, rank_path

REQ = TrialRequest(workload={}, knobs={}, device="cpu", window={})
#: What rank 0's window records where the launcher's SIGTERM finds it in its own Python code.
STOPPED = "SignalException: Process 4242 got signal: 15"
PEER = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer"


def _merged(tmp_path: Path, written: dict[int, str], failed_rank: int, exitcode: int) -> str:
    """The trial's reason where rank ``failed_rank`` is the launcher's failure (``exitcode``:
    -9 for SIGKILL) and each rank of ``written`` wrote a crash with that error."""
    out = tmp_path / "result.json"
    for rank, error in written.items():
        rank_path(out, rank).write_text(WindowResult(outcome="crash", error=error).to_json())
    exc = ChildFailedError("rank_main", {failed_rank: ProcessFailure(
        local_rank=failed_rank, pid=4243, exitcode=exitcode, error_file=str(tmp_path / "none"))})
    first, how = first_failure(exc)
    res = merge(REQ, out, 2, f"rank {first} {how}", first)
    assert res.outcome == "crash"
    return res.error


def test_a_rank_killed_while_its_peer_computes_is_named_and_its_peer_only_as_stopped(
        tmp_path: Path) -> None:
    """Rank 1 died from SIGKILL (no result); the launcher then stopped rank 0 in its own code,
    where torch raised SignalException and the window recorded it: rank 1 leads."""
    error = _merged(tmp_path, {0: STOPPED}, 1, -9)
    assert error == "rank 1 died from SIGKILL; rank 0 was stopped by the launcher after it"


def test_a_rank_that_raised_leads_with_its_exit_code_before_the_peer_it_broke(
        tmp_path: Path) -> None:
    error = _merged(tmp_path, {0: PEER, 1: "ValueError: rank 1's injected fault"}, 1, 1)
    assert error.startswith("rank 1: ValueError: rank 1's injected fault (exited with code 1); "
                            "rank 0 failed in a collective with it (RuntimeError:"), error
    # The launcher noticed rank 0's end first: rank 1's own exception still leads.
    (tmp_path / "again").mkdir()
    error = _merged(tmp_path / "again", {0: PEER, 1: "ValueError: boom"}, 0, 1)
    assert error.startswith("rank 1: ValueError: boom; rank 0 failed in a collective"), error


def test_a_rank_without_a_result_is_named_when_the_launcher_saw_its_peer_first(
        tmp_path: Path) -> None:
    error = _merged(tmp_path, {0: PEER}, 0, 1)
    assert error.startswith("rank 1 ended without writing its result (killed by a signal, or "
                            "the host's OOM killer); rank 0 failed in a collective with it"), error
