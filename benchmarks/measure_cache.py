"""Measured trial windows, stored so a benchmark measures each configuration once.

A strategy benchmark compares search strategies over one reduced space whose every point the
grid (the oracle) measures anyway. Re-measuring the same points for each strategy and seed
would cost hours and add nothing but noise, so every window is stored here and the strategies
are served from it. How that is kept honest:

- **Never across machines or versions.** An entry is keyed, and checked on read, by the machine
  (host name, device type, CPU model or GPU name, core count), the versions that decide speed
  (Python, torch, CUDA, Optuna) and a hash of autotune's measuring code (window, training,
  runner), plus the measurement settings (workload spec, window, seed) and the configuration.
  An entry whose stored fingerprint differs from the reader's in anything is refused, not
  reused, even if its file name matches.
- **A stored window is charged its measured wall time.** A strategy served from the store is
  charged the wall time the window really took (build, ceilings, warm-up, measured window,
  profile), never zero; a trial its pruner stops is charged the time at which the real window
  had reached at that heartbeat in the recorded timeline (see ``replay``).
- **Pruning replays the real sequence.** The store keeps the window's progress timeline (the
  heartbeats the watchdog saw: ceilings, partial ceilings, chunk throughputs, each with its
  seconds since start), and a pruning strategy's own check is called on it exactly as the
  runner would call it while the window ran.
- Only the same request is served: the configuration, and a repetition tag (``rep``) that
  keeps deliberate re-measurements (A/B rounds, long windows) apart from the search's.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import platform
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import optuna

import autotune
from autotune.core.env import Env
from autotune.measure.protocol import TrialRequest, WindowResult
from autotune.measure.runner import Watch, run_window
from autotune.search.loop.driver import Driver

# The modules whose code decides a measured figure: a change to them invalidates the store.
MEASURING_CODE = ("window.py", "training.py", "runner.py", "launch.py", "profiling.py",
                  "trace_summary.py")


class CacheRefused(LookupError):
    """A stored entry was measured on another machine, other versions or other settings."""


def code_hash() -> str:
    root = Path(autotune.__file__).parent
    h = hashlib.sha1()
    for name in MEASURING_CODE:
        path = root / name
        if path.exists():
            h.update(path.read_bytes())
    return h.hexdigest()[:12]


def machine(env: Env) -> dict[str, Any]:
    """What decides speed besides the configuration: this machine and these versions."""
    return {
        "host": socket.gethostname(), "device": env.device, "device_name": env.device_name,
        "cpu_count": env.cpu_count, "python": platform.python_version(),
        "torch": env.torch_version, "cuda": env.cuda_version, "optuna": optuna.__version__,
        "autotune_code": code_hash(),
    }


def settings(req: TrialRequest) -> dict[str, Any]:
    """What decides a window's figure in the request besides the knobs."""
    return {"workload": req.workload, "cpu_sized": req.cpu_sized, "device": req.device,
            "window": asdict(req.window), "seed": req.seed}


@dataclass
class Entry:
    """One measured window: its result and the progress timeline the watchdog saw."""

    result: WindowResult
    timeline: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    served: bool = False  # True when this came from the store rather than a new window


class MeasurementCache:
    """Stored windows for one machine fingerprint; ``root=None`` keeps them in memory only."""

    def __init__(self, fingerprint: dict[str, Any], root: Path | None = None):
        self.fingerprint = fingerprint
        self.root = root
        self._memory: dict[str, dict[str, Any]] = {}
        self.hits = self.misses = 0
        if root is not None:
            root.mkdir(parents=True, exist_ok=True)

    def _identity(self, req: TrialRequest, rep: str) -> dict[str, Any]:
        return {"machine": self.fingerprint, "settings": settings(req), "knobs": req.knobs,
                "rep": rep}

    def key(self, req: TrialRequest, rep: str) -> str:
        blob = json.dumps(self._identity(req, rep), sort_keys=True, default=str)
        return hashlib.sha1(blob.encode()).hexdigest()[:20]

    def get(self, req: TrialRequest, rep: str) -> Entry | None:
        """The stored window for this request, or None. Raises CacheRefused for an entry
        stored under this key by another machine, version or setting (never served)."""
        key = self.key(req, rep)
        raw = self._memory.get(key)
        if raw is None and self.root is not None and (self.root / f"{key}.json").exists():
            raw = json.loads((self.root / f"{key}.json").read_text())
        if raw is None:
            return None
        want = json.loads(json.dumps(self._identity(req, rep), default=str))
        got = {k: raw.get(k) for k in want}
        if got != want:
            diff = sorted(k for k in want["machine"] if (raw.get("machine") or {}).get(k)
                          != want["machine"][k]) or [k for k in want if got[k] != want[k]]
            raise CacheRefused(f"stored window {key} was measured with other {', '.join(diff)}")
        return Entry(WindowResult.from_dict(raw["result"]),
                     [(float(t), w) for t, w in raw.get("timeline", [])], served=True)

    def put(self, req: TrialRequest, rep: str, entry: Entry) -> None:
        key = self.key(req, rep)
        raw = {**json.loads(json.dumps(self._identity(req, rep), default=str)),
               "measured_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
               "result": json.loads(entry.result.to_json()),
               "timeline": [[t, w] for t, w in entry.timeline]}
        self._memory[key] = raw
        if self.root is not None:
            tmp = self.root / f"{key}.json.tmp"
            tmp.write_text(json.dumps(raw))
            tmp.replace(self.root / f"{key}.json")

    def measure(self, req: TrialRequest, trial_dir: Path, rep: str = "search") -> Entry:
        """The stored window for this request, or a new one measured now (and stored)."""
        try:
            found = self.get(req, rep)
        except CacheRefused:
            found = None  # measured elsewhere: measure here, and overwrite it
        if found is not None:
            self.hits += 1
            return found
        self.misses += 1
        timeline: list[tuple[float, dict[str, Any]]] = []
        start = time.monotonic()

        def record(watch: Watch) -> None:
            timeline.append((round(time.monotonic() - start, 3), dataclasses.asdict(watch)))
            return None

        result = run_window(req, trial_dir, on_progress=record)
        entry = Entry(result, timeline)
        self.put(req, rep, entry)
        return entry


def replay(entry: Entry, on_progress: Callable[[Watch], str | None] | None) -> WindowResult:
    """The window's result as a driver with this progress check would have seen it: the check
    is called on each recorded heartbeat in order; if it stops the trial, the trial ends
    ``pruned`` at that heartbeat's time (its charged wall time), as ``run_window`` would."""
    if on_progress is not None:
        for t, w in entry.timeline:
            watch = Watch(**w)
            reason = on_progress(watch)
            if reason:
                return WindowResult(outcome="pruned", error=reason, chunks=list(watch.chunks),
                                    ceilings=dict(watch.ceilings), wall_s=t)
    return dataclasses.replace(entry.result)


class ReplayDriver(Driver):
    """autotune's own study driver, its windows served by a MeasurementCache. Records each
    trial's charged seconds (``charged[trial number]``): a twin copied within the study, or a
    trial pruned on a cached ceiling before it starts, runs no window and is charged 0, as in
    a real study."""

    def __init__(self, *args: Any, cache: MeasurementCache, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.cache = cache
        self.charged: dict[int, float] = {}

    def measure(self, req: TrialRequest, trial_dir: Path,
                on_progress: Callable[[Watch], str | None] | None,
                stop_requested: Callable[[], str | None]) -> WindowResult:
        entry = self.cache.measure(req, trial_dir)
        result = replay(entry, on_progress)
        self.charged[int(trial_dir.name)] = result.wall_s
        return result
