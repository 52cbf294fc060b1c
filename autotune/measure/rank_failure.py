"""CHILD side, the launcher of a trial's ranks: which rank a failed launched trial names, and
how each rank ended.

One failure ends every rank of a launched trial, each its own way: the rank that failed first
(its exception, or the signal that killed it, with its exit code or signal from the launcher),
the ranks whose collective broke because it left (gloo: "Connection closed by peer"), and the
ranks the launcher stopped after it: torch's elastic launcher sends the others SIGTERM, then
SIGKILL after a grace period, and a rank it finds in its own Python code raises torch's
``SignalException`` there ("Process N got signal: 15"; the ranks are forked from the launcher
and keep its handler), which the rank's window records as its crash. The reason names the first
failed rank and how it ended, and the others only as what they were: a 2-rank study whose rank
1 was killed by SIGKILL while rank 0 computed read "crash: rank 0: SignalException: Process N
got signal: 15", the rank the launcher stopped, not the one that died.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from autotune.measure.protocol import WindowResult

#: Words of an error a rank got because another rank failed or left (gloo, NCCL, c10d).
PEER_ERRORS = ("Connection closed by peer", "remote worker", "Connection reset by peer",
               "NCCL communicator was aborted", "Timed out waiting", "Broken pipe")
#: What a rank's window records where a signal's handler (torch's elastic launcher installs
#: it, for SIGTERM and SIGINT) stopped its Python code.
STOPPED = "SignalException: Process "


def first_failure(exc: Any) -> tuple[int, str]:
    """From the launcher's ``ChildFailedError``: the rank that failed first and how it ended,
    ("died from SIGKILL" / "exited with code 1"). A rank killed by a signal leads: it wrote no
    error, so the launcher's clock may put a rank that failed after it, on its broken
    connection, first. (With a function entrypoint torch records one failure, the rank whose
    end it noticed first, and stops the others.)"""
    killed = sorted(r for r, f in exc.failures.items() if _signal(f))
    rank = killed[0] if killed else exc.get_first_failure()[0]
    failure = exc.failures[rank]
    if _signal(failure):
        return rank, f"died from {_signal(failure)}"
    return rank, f"exited with code {failure.exitcode}"


def _signal(failure: Any) -> str:
    name = failure.signal_name()
    return "" if name in ("", "<N/A>", None) else str(name)


def _from_a_peer(error: str) -> bool:
    return any(words in error for words in PEER_ERRORS)


def failed(bad: list[tuple[int, WindowResult]], failure: str, first: int | None,
           missing: list[int], trial_dir: Path | None = None) -> WindowResult:
    """The trial's crash, its cause first: a rank that failed on its own (its exception; the
    launcher's first failure among several, then the lowest rank), with how it ended where the
    launcher saw it end; where no rank wrote its own cause, the launcher's word for a rank a
    signal killed, else a rank that wrote no result at all (the launcher does not always
    record a killed rank: it stops watching at the first failure it sees, which may be a
    peer's), else the launcher's first failure. ``failure``: "rank N <how it ended>" or the
    launcher's own error; ``first``: N (None where the launcher reported no rank). Then each
    other rank, as what it was: stopped by the launcher, or failed on its broken collective."""
    how = failure.removeprefix(f"rank {first} ") if first is not None else ""
    stopped = {r for r, res in bad if r != first and res.error.startswith(STOPPED)}
    peers = {r: res.error for r, res in bad if r not in stopped and _from_a_peer(res.error)}
    causes = sorted(((r, res) for r, res in bad if r not in stopped and r not in peers),
                    key=lambda item: (item[0] != first, item[0]))
    lead: int | None
    if causes:
        lead, out = causes[0]
        ended = f" ({how})" if lead == first and how else ""
        out.error = f"rank {lead}: {out.error}{ended}"
    elif first is not None and how.startswith("died from "):
        lead, out = first, WindowResult(outcome="crash", error=f"rank {first} {how}")
    elif missing:
        lead = first if first in missing else missing[0]
        words = (f"rank {lead} {how} without writing its result" if lead == first and how else
                 f"rank {lead} ended without writing its result (killed by a signal, or the "
                 f"host's OOM killer)")
        tail = _log_tail(trial_dir, lead) if trial_dir is not None else ""
        out = WindowResult(outcome="crash", error=f"{words}; its log ends: {tail}" if tail
                           else words)
    elif failure:
        lead, out = first, WindowResult(outcome="crash", error=failure)
    elif bad:
        lead, out = bad[0][0], bad[0][1]
        out.error = f"rank {lead}: {out.error}"
    else:
        return WindowResult(outcome="crash", error="a rank wrote no result")
    out.error += _the_others(lead, stopped, peers, [r for r in missing if r != lead])
    return out


def _the_others(lead: int | None, stopped: set[int], peers: dict[int, str],
                missing: list[int]) -> str:
    """"; rank 0 was stopped by the launcher after it" and the like, for every rank but the
    one named first. A rank without a result after the first failure was stopped too (the
    launcher's SIGKILL, past its grace period, leaves none)."""
    if lead is None:
        return "".join(f" (rank {r}: {error[:200]})" for r, error in sorted(peers.items()))
    parts = [f"rank {r} was stopped by the launcher after it"
             for r in sorted(stopped | set(missing)) if r != lead]
    parts += [f"rank {r} failed in a collective with it ({error[:200]})"
              for r, error in sorted(peers.items()) if r != lead]
    return "".join(f"; {p}" for p in parts)


def _log_tail(trial_dir: Path, rank: int) -> str:
    """The last line a rank wrote to its stderr (the launcher's log folder, launch_config):
    the exception of a rank that failed before its window could record one."""
    for log in sorted((trial_dir / "ranks").glob(f"*/attempt_*/{rank}/stderr.log")):
        with contextlib.suppress(OSError):
            lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
            if lines:
                return lines[-1][:300]
    return ""
