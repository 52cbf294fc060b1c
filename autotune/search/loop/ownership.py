"""Which driver owns a trial, among several workers sharing one study: the owner's stamp and
heartbeat, lost trials (their driver died) failed and re-queued, and twins (two workers drew the
same configuration) resolved so that one measures and the other reuses its result.
"""

from __future__ import annotations

import socket
import time
from typing import Any, cast

import optuna
import psutil
from optuna.trial import FrozenTrial, TrialState

from autotune.results.record import (
    MEASURED_KEYS,
    TrialAttrs,
    set_stored_trial_attrs,
    set_trial_attrs,
    trial_attrs,
)
from autotune.search.loop.failfast import superseded

# A RUNNING trial whose driver has not beaten for this long is considered lost (other hosts;
# on the same host a dead pid is proof enough).
GRACE_S = 60.0
# Failed trials whose configuration was never measured to its end by its own fault: a twin
# with the same knobs must measure it rather than copy the failure.
UNMEASURED_OUTCOMES = ("driver_lost", "interrupted", "driver_error")
def owner(cpus: str | None = None) -> TrialAttrs:
    """The driver's stamp on a trial it runs. With several workers on one node, ``cpus`` (the
    cores its trials are pinned to, "0,1") is stamped too: a trial pruned or failed before its
    window measured anything still says where it ran."""
    me = psutil.Process()
    stamp: TrialAttrs = {"owner_host": socket.gethostname(), "owner_pid": me.pid,
                         "owner_start": round(me.create_time(), 3)}
    if cpus:
        stamp["owner_cpus"] = [int(c) for c in cpus.split(",")]
    return stamp


def owner_alive(trial: FrozenTrial, now: float) -> bool:
    """Is the driver that owns a RUNNING trial still alive? A trial so new that its owner has
    not stamped it yet counts from its start time."""
    attrs = trial_attrs(trial)
    if attrs.get("owner_host") == socket.gethostname() and "owner_pid" in attrs:
        try:
            proc = psutil.Process(int(attrs["owner_pid"]))
            # An exited driver whose parent has not reaped it yet (a `workers=N` parent waiting
            # on another worker, a test harness) is a zombie: dead, however long it lingers.
            if proc.status() == psutil.STATUS_ZOMBIE:
                return False
            created = proc.create_time()
        except psutil.Error:
            return False
        start = attrs.get("owner_start")  # absent for a moment while the owner stamps it
        return start is None or abs(created - float(start)) < 1.0
    started = trial.datetime_start.timestamp() if trial.datetime_start else now
    return now - float(attrs.get("heartbeat", started)) < GRACE_S


def reap_lost_trials(study: optuna.Study) -> list[int]:
    """Fail trials left RUNNING by a dead driver (reason driver_lost) and enqueue each one's
    configuration once more. Safe to race: only the worker whose state change wins re-queues."""
    # Private attributes, as Optuna's own fail_stale_trials uses them: no public API fails a
    # trial another process holds (Optuna's heartbeat, which would, is started only by
    # study.optimize, not for ask/tell; and it cannot tell a dead pid on this host at once).
    storage, now, reaped = study._storage, time.time(), []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if owner_alive(t, now):
            continue
        try:
            set_stored_trial_attrs(storage, t._trial_id, {"outcome": "driver_lost"})
            set_stored_trial_attrs(storage, t._trial_id, {"reason": "driver_lost: its driver died while it ran"})
            if not storage.set_trial_state_values(t._trial_id, TrialState.FAIL):
                continue
        except (RuntimeError, ValueError):  # another worker finished or reaped it first
            continue
        reaped.append(t.number)
        if t.params:
            study.enqueue_trial(t.params, user_attrs=dict(TrialAttrs(source="requeue", requeue_of=t.number)))
    return reaped


def twin_of(study: optuna.Study, knobs: dict[str, Any], number: int) -> FrozenTrial | None:
    """A trial with exactly these knobs whose outcome we can reuse (or wait for).

    Two workers may draw the same configuration at the same moment; of two RUNNING twins the
    later-numbered one waits, unless the other has already decided to run (``measuring``), so
    that neither waits for the other."""
    replaced = superseded(study)
    for t in study.get_trials(deepcopy=False):
        if t.number == number or trial_attrs(t).get("knobs") != knobs or t.number in replaced:
            continue
        if t.state == TrialState.RUNNING:
            if t.number < number or trial_attrs(t).get("measuring"):
                return t
            continue
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED):
            return t
        if t.state == TrialState.FAIL and trial_attrs(t).get("outcome") not in UNMEASURED_OUTCOMES:
            return t
    return None


def stored_trial(study: optuna.Study, number: int) -> FrozenTrial:
    """A trial as the storage holds it now, by its number (a trial's number is its index
    among the study's trials)."""
    trial = study.get_trials(deepcopy=False)[number]
    assert trial.number == number
    return trial


def copy_twin(study: optuna.Study, trial: optuna.Trial, twin: FrozenTrial) -> FrozenTrial:
    """Tell ``trial`` its twin's outcome rather than measure the same knobs again (waiting,
    while the twin still runs on another worker, for it to end or its worker to be found
    dead)."""
    while twin.state == TrialState.RUNNING:
        time.sleep(1.0)
        twin = stored_trial(study, twin.number)
        if not owner_alive(twin, time.time()):
            reap_lost_trials(study)
    measured = trial_attrs(twin)
    set_trial_attrs(trial, cast(TrialAttrs, {k: v for k, v in measured.items() if k in MEASURED_KEYS}))
    set_trial_attrs(trial, {"duplicate_of": twin.number})
    if twin.state == TrialState.COMPLETE:
        for key, value in twin.constraints.items():
            trial.set_constraint(key, value)
        return study.tell(trial, twin.value)
    return study.tell(trial, state=twin.state)
