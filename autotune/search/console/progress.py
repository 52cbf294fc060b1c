"""Live progress of a study: which trial runs, at which stage, how long is left, what is best.

Interactive terminals get a live panel (rich: several lines redrawn in place while the log
lines scroll above it, which tqdm's single bar cannot hold). Anything else (CI, cron, a pipe)
gets one plain line per finished trial, so a log file reads as a table. The running trial's
stage comes from its child's heartbeat file (``trials/<n>/progress.json``, written by
``readings.Progress``), read by the display's own refresh: the driver's loop is not involved.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.core.console import WIDTH, detail, fit, fit_items
from autotune.results.record import trial_attrs
from autotune.results.trials import (
    baseline_trial,
    best_trial,
    counts,
    measured,
    near_best,
    over_limit,
    study_unit,
    window_noise,
)

# The child's heartbeat stages (window.py) in the words a person reads.
STAGES = {"start": "build", "compile": "compile", "warmup": "warm-up", "measure": "measure",
          "ceiling": "ceilings", "profile": "profile", "loader_profile": "loader profile"}


def interactive(stream: TextIO) -> bool:
    """A person watching a terminal (not CI, not a dumb terminal, not a pipe or a file)."""
    mode = os.environ.get("AUTOTUNE_PROGRESS", "")
    if mode in ("lines", "live"):
        return mode == "live"
    return (stream.isatty() and os.environ.get("TERM", "") not in ("", "dumb")
            and not os.environ.get("CI"))


def clock_text(seconds: float) -> str:
    """MM:SS, or H:MM:SS from an hour: the progress line's and the wall-time statement's."""
    s = int(max(seconds, 0))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:02d}:{s % 60:02d}"


class StudyProgress:
    """Follows one worker's trials. ``started`` is the driver's on_start hook, ``finished``
    its on_trial hook; ``close`` ends the live display."""

    def __init__(self, n_trials: int, trials_dir: Path, stream: TextIO | None = None,
                 live: bool | None = None):
        self.n_trials = n_trials
        self.trials_dir = trials_dir
        self.stream = stream or sys.stdout
        self.t0 = time.monotonic()
        self.done = 0
        self.running: tuple[int, dict[str, Any]] | None = None
        self.status = ""  # the last finished trial's summary line
        self._live: Any = None
        self._streams: list[tuple[logging.StreamHandler[Any], Any]] = []
        if live if live is not None else interactive(self.stream):
            self._start_live()

    # -- hooks --------------------------------------------------------------------------------
    def started(self, number: int, knobs: dict[str, Any]) -> None:
        self.running = (number, knobs)

    def finished(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.done += 1
        self.running = None
        self.status = self.brief(study, trial)
        detail("%s", self.line(study, trial))
        if self._live is None:
            print(self.status, file=self.stream, flush=True)
        else:
            self._live.console.print(self.status, highlight=False)


    # -- text ---------------------------------------------------------------------------------
    def timing(self, short: bool = False) -> str:
        """"3/12, 00:42 elapsed, ~02:06 left"; ``short``: "3/12 00:42, ~02:06 left"."""
        elapsed = time.monotonic() - self.t0
        left = ""
        if self.done:
            left = f", ~{clock_text(elapsed / self.done * max(self.n_trials - self.done, 0))} left"
        count = f"{min(self.done + (self.running is not None), self.n_trials)}/{self.n_trials}"
        return f"{count}{'' if short else ','} {clock_text(elapsed)}{'' if short else ' elapsed'}{left}"

    def line(self, study: optuna.Study, trial: FrozenTrial) -> str:
        """``[3/12, 00:42 elapsed, ~02:06 left] trial 2 COMPLETE 123.4 samples/s | best ...``"""
        a = trial_attrs(trial)
        if measured(trial):
            over = over_limit(trial)
            load = a.get("contention") or {}
            what = (f"{'INFEASIBLE' if over else 'COMPLETE'} {trial.value:,.1f} "
                    f"{study_unit(study)}{_padding(a)}"
                    f" (window spread {window_noise(trial):.0%})"
                    + ((f", {a['reason']}" if a.get("reason") else
                        f", peak {a.get('peak_memory_gb', 0):.2f} GB over the limit") if over else "")
                    + (f", contended: {'; '.join(load.get('reasons') or [])}"
                       if load.get("contended") else ""))
        elif trial.state == TrialState.COMPLETE:
            what = f"INFEASIBLE ({_short(a.get('reason', ''))})"
        else:
            reason = str(a.get("reason", "")).removeprefix(f"{trial.state.name.lower()}: ")
            what = f"{trial.state.name} ({_short(reason)})"
        return f"[{self.timing()}] trial {trial.number} {what} | {self.best_text(study)} | {self.counts_text(study)}"

    def brief(self, study: optuna.Study, trial: FrozenTrial) -> str:
        """The trial at a glance, in at most 120 characters: ``[8/12 01:58, ~00:59 left]
        trial 7 agent: 96.6 samples/s 1.56x, new best | batch_size=64 host_allocator=retain |
        cpu compute``: its figure against yours, whether it took the lead, the knobs that
        differ from yours as far as the line has room, its bottleneck (``line`` is the
        detail: the window's spread, the counts, the load)."""
        a = trial_attrs(trial)
        head = f"[{self.timing(short=True)}] trial {trial.number} {a.get('source', '')}:"
        base = baseline_trial(study)
        tail = ""
        if measured(trial):
            speedup = (f" {float(trial.value or 0) / base.value:.2f}x" if base is not None
                       and base.value and trial.number != base.number else "")
            what = f"{trial.value:,.1f} {study_unit(study)}{speedup}"
            best = best_trial(study)
            if over_limit(trial):
                what += f", over the memory limit ({a.get('peak_memory_gb', 0):.2f} GB peak)"
            elif best is not None and best.number == trial.number:
                what += ", new best" if trial.number else ", the best so far"
            bottleneck = str((a.get("diagnosis") or {}).get("bottleneck") or "")
            tail = f" | {bottleneck.replace('_', ' ')}" if bottleneck else ""
        elif trial.state == TrialState.COMPLETE:
            what = f"INFEASIBLE ({_short(a.get('reason', ''), 50)})"
        else:
            reason = str(a.get("reason", "")).removeprefix(f"{trial.state.name.lower()}: ")
            what = f"{trial.state.name} ({_short(reason, 50)})"
        line = f"{head} {what}"
        mine = trial_attrs(base).get("knobs") if base is not None else None
        diff = [f"{k}={v}" for k, v in (a.get("knobs") or {}).items()
                if mine is not None and mine.get(k) != v]
        room = WIDTH - len(line) - len(tail) - 3
        if diff and room >= min(len(d) for d in diff) + 9:  # at least one knob, and "+N more"
            line += " | " + fit_items(diff, room)
        return fit(line + tail)

    @staticmethod
    def best_text(study: optuna.Study) -> str:
        best, base = best_trial(study), baseline_trial(study)
        if best is None or best.value is None:
            return "best: none yet"
        speedup = f", {best.value / base.value:.2f}x baseline" if base and base.value else ""
        near = near_best(study)
        within = (f" (trial{'s' if len(near) > 1 else ''} {', '.join(str(t.number) for t in near)}"
                  " read faster, within the windows' noise)" if near else "")
        return f"best: trial {best.number} {best.value:,.1f} {study_unit(study)}{speedup}{within}"

    @staticmethod
    def counts_text(study: optuna.Study) -> str:
        c = counts(study)
        return (f"{c['complete'] - c['infeasible']} complete, {c['pruned']} pruned, "
                f"{c['infeasible']} infeasible, {c['failed']} failed")

    def stage(self) -> str:
        if self.running is None:
            return "between trials"
        number, _ = self.running
        try:
            beat = json.loads((self.trials_dir / str(number) / "progress.json").read_text())
        except (OSError, ValueError):
            return "build"
        name = STAGES.get(beat.get("stage", "start"), beat.get("stage", "?"))
        return f"{name} (step {beat['step']})" if beat.get("step") else name

    # -- the live panel -----------------------------------------------------------------------
    def _panel(self) -> Any:
        from rich.table import Table

        grid = Table.grid(padding=(0, 1))
        grid.add_column(style="bold")
        grid.add_column()
        grid.add_row("autotune", self.timing())
        if self.running is not None:
            number, knobs = self.running
            grid.add_row(f"trial {number}", self.stage())
            grid.add_row("knobs", " ".join(f"{k}={v}" for k, v in knobs.items()))
        if self.status:
            grid.add_row("last", self.status.split("] ", 1)[-1])
        return grid

    def _start_live(self) -> None:
        from rich.console import Console
        from rich.live import Live

        progress = self

        class _Panel:  # re-rendered at each refresh, so the stage follows the heartbeat
            def __rich__(self) -> Any:
                return progress._panel()

        self._live = Live(_Panel(), console=Console(file=self.stream), refresh_per_second=2,
                          redirect_stdout=True, redirect_stderr=True, transient=True)
        self._live.start()
        # The log handlers hold the real stderr: point them at rich's proxy, so log lines
        # scroll above the panel instead of tearing it.
        for h in logging.getLogger().handlers:
            if type(h) is logging.StreamHandler:
                self._streams.append((h, h.setStream(sys.stderr)))

    def close(self) -> None:
        if self._live is not None:
            for h, old in self._streams:
                h.setStream(old)
            self._live.stop()
            self._live = None


def _padding(a: Any) -> str:
    """", 18% padding": the share of a tokens/s trial's computed tokens that were padding."""
    share = a.get("padding_share")
    return "" if share is None else f", {share:.0%} padding"


def _short(reason: str, width: int = 120) -> str:
    text = " ".join(str(reason).split())
    return text if len(text) <= width else text[: width - 3] + "..."
