"""What a study's figures were measured under, checked before a run adds trials to it.

A study's trials are ranked against each other, so they must be measured under the same
conditions: the same workload at the same sizes, the same device, as many cores and ranks, the
same global batch, objective and torch. A run that names an existing study (the same command
again, ``study.name``, or the default ``<workload>-<device>`` name) with one of these changed
would rank its samples/s against figures they cannot be compared with: a 2-rank study resumed
as one process pruned its first trial against the ranks' summed rate (2026-11-27). Such a run
is refused before it writes anything, naming what changed and the setting that restores it.

Settings that do not change what a trial's figure means (the window's length, the memory
limit, the knobs searched or pinned: each trial records its own) resume freely.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from optuna.trial import TrialState

from autotune.results.record import StudyAttrs, set_study_attrs
from autotune.search.setup import StudySetup, launch_spec


class ChangedConditions(ValueError):
    """An existing study's trials were measured under other conditions than this run's."""


@dataclass(frozen=True)
class Condition:
    """One condition: its name in words, how to read it from a study's record and from this
    run's setup (None: not recorded, as in studies made before it was), and what restores it."""

    words: str
    stored: Callable[[StudyAttrs], Any]
    now: Callable[[StudySetup], Any]
    restore: Callable[[StudyAttrs], str]  # the setting that restores it, from the record
    #: None in the record is a value (no global batch kept, no run length) rather than "not
    #: recorded": those keys are written whenever they are set.
    none_is_value: bool = False


def _device(attrs: StudyAttrs, key: str, default: Any = None) -> Any:
    device = attrs.get("device") or {}
    return device.get(key, default) if device else None


def _ranks(attrs: StudyAttrs) -> Any:
    return _device(attrs, "ranks", 1)


def workload_arguments(setup: StudySetup) -> dict[str, Any]:
    """The workload's factory arguments as stored (JSON values). A live object's shipped file
    (``objects``) is left out: it is named by its content's hash, and a model built again with
    other random weights is the same workload."""
    spec = {k: v for k, v in setup.workload_spec.items() if k != "objects"}
    return cast(dict[str, Any], json.loads(json.dumps(spec, default=str)))


def _arguments_words(attrs: StudyAttrs) -> str:
    stored = attrs.get("workload_arguments") or {}
    return " ".join(f"workload.{k}={v}" for k, v in stored.items() if k != "_target_") or \
        "no workload.* arguments but its factory"


def _launch_words(attrs: StudyAttrs) -> str:
    launch = attrs.get("launch") or {}
    if not launch:
        return "launch.nproc_per_node=1 launch.nnodes=1 (one process)"
    return f"launch.nproc_per_node={launch.get('nproc_per_node')} launch.nnodes={launch.get('nnodes')}"


def _global_batch_words(attrs: StudyAttrs) -> str:
    """What restores a study's global batch per rank (core/global_batch.py). A study stored
    without one ran every trial unaccumulated: so did every study made before autotune read
    the workload's own accumulation, and its trials' figures are not an accumulating run's."""
    g = attrs.get("global_batch")
    if not g:
        return ("study.keep_global_batch=false and a workload that does not accumulate "
                "gradients (gradient_accumulation_steps, accumulate_grad_batches or "
                "defaults['grad_accum'] of 1: a study made before autotune read them ran "
                "every trial unaccumulated)")
    if attrs.get("keep_global_batch") is False:
        return (f"the workload's accumulation as it was (its batch_size x its gradient "
                f"accumulation = {g})")
    return f"study.keep_global_batch=true with the workload's batch_size x accumulation = {g}"


CONDITIONS = (
    Condition("workload", lambda a: a.get("workload"), lambda s: s.workload_label,
              lambda a: "the workload and workload.* sizes it was started with"),
    Condition("workload arguments", lambda a: a.get("workload_arguments"), workload_arguments,
              _arguments_words),
    Condition("workload factory", lambda a: a.get("workload_target"),
              lambda s: s.workload_spec.get("_target_"),
              lambda a: f"workload._target_={a.get('workload_target')}"),
    Condition("device", lambda a: _device(a, "device") and
              f"{_device(a, 'device')} ({_device(a, 'device_name')})",
              lambda s: f"{s.env.device} ({s.env.device_name})",
              lambda a: f"device={_device(a, 'device')} on a machine with a "
                        f"{_device(a, 'device_name')}"),
    Condition("ranks each trial runs as", _ranks, lambda s: s.env.ranks, _launch_words),
    Condition("cores each trial (each rank) gets", lambda a: _device(a, "cpu_count"),
              lambda s: s.env.cpu_count,
              lambda a: "as many usable cores (the same workers and launch.nproc_per_node, on "
                        "a machine with as many cores)"),
    Condition("global batch per rank", lambda a: a.get("global_batch"), lambda s: s.global_batch,
              lambda a: _global_batch_words(a), none_is_value=True),
    Condition("objective's run length", lambda a: a.get("run_steps"), lambda s: s.study.run_steps,
              lambda a: f"study.run_steps={a.get('run_steps') or 'null'}", none_is_value=True),
    Condition("torch", lambda a: _device(a, "torch_version"), lambda s: s.env.torch_version,
              lambda a: f"torch {_device(a, 'torch_version')}"),
)

def record_conditions(study: Any, s: StudySetup) -> None:
    """Write this run's conditions (and the study's other context) into the study's record, as
    a run starts; check_resumable has read the earlier ones first."""
    fixed = {k: [v, why] for k, (v, why) in s.space.fixed.items()}
    set_study_attrs(study, {"workload": s.workload_label})
    set_study_attrs(study, {"workload_target": s.workload_spec.get("_target_")})
    if s.framework:
        set_study_attrs(study, {"framework": s.framework})
    set_study_attrs(study, {"workload_arguments": workload_arguments(s)})
    set_study_attrs(study, {"device": s.env.to_dict()})
    set_study_attrs(study, {"fixed_knobs": fixed})
    set_study_attrs(study, {"input_stages": s.space.absent.get("transform_split", 0)})
    set_study_attrs(study, {"memory_limit_gb": s.memory_limit_gb})
    set_study_attrs(study, {"run_steps": s.study.run_steps})
    set_study_attrs(study, {"training": s.study.training})
    if s.ranks:
        set_study_attrs(study, {"launch": launch_spec(s.launch, s.env)})
    if s.global_batch:
        set_study_attrs(study, {"global_batch": s.global_batch,
                                "keep_global_batch": bool(s.study.keep_global_batch)})


def changed(attrs: StudyAttrs, setup: StudySetup) -> list[tuple[Condition, Any, Any]]:
    """The conditions under which ``attrs`` (a study's record) and ``setup`` differ. A study
    whose context was never recorded (no ``workload``) has nothing to compare."""
    if "workload" not in attrs:
        return []
    out = []
    for cond in CONDITIONS:
        before, now = cond.stored(attrs), cond.now(setup)
        if before is None and not cond.none_is_value:
            continue  # recorded only by later versions
        if before != now:
            out.append((cond, before, now))
    return out


def check_resumable(storage: Any, setup: StudySetup, url_words: str) -> None:
    """Raise ChangedConditions when ``setup.name`` names a study in ``storage`` whose
    measured trials (complete or pruned) were measured under other conditions than this
    run's. A study without a measured trial has nothing to rank against: it resumes."""
    try:
        study_id = storage.get_study_id_from_name(setup.name)
    except KeyError:
        return
    measured = storage.get_all_trials(study_id, deepcopy=False,
                                      states=(TrialState.COMPLETE, TrialState.PRUNED))
    if not measured:
        return
    attrs: StudyAttrs = storage.get_study_user_attrs(study_id)
    diffs = changed(attrs, setup)
    if not diffs:
        return
    said = "; ".join(f"{c.words}: {_value(before, now)} there, {_value(now, before)} in this run"
                     for c, before, now in diffs)
    restore = ", ".join(dict.fromkeys(c.restore(attrs) for c, _, _ in diffs))
    raise ChangedConditions(
        f"study '{setup.name}' in {url_words} holds {len(measured)} trial(s) measured under "
        f"other conditions than this run's ({said}): this run's figures could not be ranked "
        f"against theirs. To resume it, run with {restore}; or give this run a study of its "
        "own (study.name=NEW_NAME). Nothing was written.")


def _value(v: Any, other: Any) -> str:
    """``v`` in words; of two dicts (the workload's arguments), only the keys that differ."""
    if isinstance(v, dict) and isinstance(other, dict):
        keys = [k for k in {**v, **other} if v.get(k) != other.get(k)]
        return ", ".join(f"workload.{k}={v[k]}" if k in v else f"workload.{k} unset" for k in keys)
    return "none" if v is None else str(v)
