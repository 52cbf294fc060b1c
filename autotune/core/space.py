"""The search space of one study: each knob's domain on this device for this workload, narrowed
by the user's overrides and the workload's reach, and how Optuna searches it.

The registry (``autotune/core/knobs.py``) says what each knob is and which values it may take
anywhere; a ``Space`` is those domains here, with the user's baseline (trial 0) and the Optuna
parameters each knob is searched as (define-by-run: a knob is suggested only where it applies).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import optuna

from autotune.core.distributed import COMM_HOOKS
from autotune.core.domains import Domain, whole_steps
from autotune.core.env import Env
from autotune.core.global_batch import MAX_ACCUM_LOG2
from autotune.core.knobs import IO_WORKERS_PER_CORE, KNOBS, Knob, KnobError
from autotune.core.workload import Workload


@dataclass(frozen=True)
class Space:
    """The search space for one study: each knob's domain here, narrowed by user overrides."""

    domains: dict[str, Domain]
    baseline: dict[str, Any]
    #: Knobs the user pinned or narrowed (``knobs.<name>=``): proposals stay inside those.
    overridden: frozenset[str] = frozenset()
    #: What the training code ran for each knob before the knob existed (``Knob.baseline``,
    #: else ``off``): a trial stored by an older autotune lacks the knob and ran this.
    absent: dict[str, Any] = field(default_factory=dict)

    @property
    def fixed(self) -> dict[str, tuple[Any, str]]:
        """Knobs with a single value, and why (shown in the study and the report)."""
        return {
            n: (d.values[0], d.reason or "pinned")
            for n, d in self.domains.items()
            if len(d.values) == 1
        }

    @property
    def narrowed(self) -> dict[str, tuple[list[Any], str]]:
        """Searched knobs this device or workload keeps to part of their values, and why
        (compile without the CUDA Graph modes for variable-shape batches)."""
        return {n: (d.values, d.reason) for n, d in self.domains.items()
                if len(d.values) > 1 and d.reason and n not in self.overridden}

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        """Define-by-run: a knob is only suggested where it applies, so TPE never sees
        meaningless combinations (prefetch_factor without workers, graphs with fp16)."""
        with warnings.catch_warnings():  # an enqueued value past the range (see ``beyond``)
            warnings.filterwarnings("ignore", message="Fixed parameter .* is out of range")
            return self._suggest(trial)

    def _suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for knob in KNOBS:
            name, allowed = self.param(knob.name, values)
            if knob.inactive(values) is not None:
                values[knob.name] = knob.off
            elif len(allowed) == 1:
                values[knob.name] = allowed[0]
            elif knob.ordinal and _is_int_range(allowed):
                values[knob.name] = trial.suggest_int(name, allowed[0], allowed[-1])
            else:
                values[knob.name] = trial.suggest_categorical(name, allowed)
        return values

    def param(self, name: str, before: Mapping[str, Any]) -> tuple[str, list[Any]]:
        """The Optuna parameter a knob is searched as, given the values chosen before it, and
        the values it may take there. Where a value rule (``Domain.refuses``) rules some out,
        the rest are a parameter of their own (``attention without sdpa_flash/sdpa_cudnn``):
        Optuna's samplers need one fixed set of choices per parameter name, and a value that
        cannot run is then never proposed, rather than proposed and failed."""
        dom = self.domains[name]
        if dom.refuses is None:
            return name, dom.values
        kept = [v for v in dom.values if dom.refuses(before, v) is None]
        if not kept or kept == dom.values:
            return name, dom.values  # none left: the trial runs and fails with its reason
        out = [str(v) for v in dom.values if v not in kept]
        return f"{name} without {'/'.join(out)}", kept

    def complete(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Fill every knob from searched params (e.g. a stored trial's) the way suggest would.
        A searched knob the params lack (a study resumed from before the knob existed) gets
        the value its trials really ran under (``absent``: all input stages on the host for
        ``transform_split``), not the domain's first value."""
        values: dict[str, Any] = {}
        for knob in KNOBS:
            name, allowed = self.param(knob.name, values)
            if knob.inactive(values) is not None:
                values[knob.name] = knob.off
            elif name in params:
                values[knob.name] = params[name]
            elif knob.name in params and params[knob.name] in allowed:
                values[knob.name] = params[knob.name]  # stored before the value rule
            else:
                old = self.absent.get(knob.name, allowed[0])
                values[knob.name] = old if old in allowed else allowed[0]
        return values

    def searched(self, knobs: Mapping[str, Any]) -> dict[str, Any]:
        """The Optuna params for a full knob assignment (for enqueue_trial). A value past an
        ordinal domain's end is kept where the knob allows it (see ``beyond``)."""
        out: dict[str, Any] = {}
        for knob in KNOBS:
            name, allowed = self.param(knob.name, knobs)
            if knob.inactive(knobs) is None and len(allowed) > 1 and knob.name in knobs:
                value = knobs[knob.name]  # absent: stored before the knob existed
                if value in allowed or value in self.beyond(knob.name):
                    out[name] = value
        return out

    def beyond(self, name: str) -> range:
        """Values past the end of a searched integer range that a proposal may still use:
        more DataLoader workers than cores (up to IO_WORKERS_PER_CORE per core) for a loader
        measured waiting on I/O. Optuna runs such an enqueued value as given (with a warning,
        silenced in ``suggest``); the sampler itself keeps to the range."""
        values = self.domains[name].values
        if name != "num_workers" or name in self.overridden or not _is_int_range(values):
            return range(0)
        top = values[-1]
        return range(top + 1, IO_WORKERS_PER_CORE * max(1, top) + 1)


def _is_int_range(values: list[Any]) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in values) and values == list(
        range(values[0], values[-1] + 1)
    )


def build_space(env: Env, wl: Workload, overrides: Mapping[str, Any]) -> Space:
    """Domains on this device, narrowed by ``knobs.<name>=`` overrides (a value pins, a list
    narrows). An override outside the valid domain is an error that names the valid values."""
    domains: dict[str, Domain] = {}
    for knob in KNOBS:
        limit = wl.knob_limits.get(knob.name)
        dom = _limited(knob.domain(env, wl), limit)
        want = overrides.get(knob.name)
        if want is not None:
            asked = list(want) if isinstance(want, (list, tuple)) else [want]
            # The framework's reach bounds what a user may list too (an opt-in knob's domain
            # is its default alone until listed).
            beyond = [v for v in asked if limit is not None and v not in limit[0]]
            bad = [v for v in asked if not _valid(knob, dom, v) or v in beyond]
            if bad:
                why = f" ({limit[1] if beyond and limit else dom.reason})" \
                    if (beyond and limit) or dom.reason else ""
                raise KnobError(
                    f"knobs.{knob.name}={want!r} is not valid on {env.device}: "
                    f"{', '.join(map(repr, bad))} not in {dom.values!r}{why}. "
                    f"{knob.doc}"
                )
            dom = Domain(asked, _override_reason(knob, asked, env), dom.refuses, dom.reads)
        domains[knob.name] = dom
    _narrow_for_rules(domains, env)
    baseline = _baseline(domains, env, wl)
    absent = {k.name: k.baseline(env, wl) if k.baseline else k.off for k in KNOBS}
    return Space(domains, baseline, frozenset(k for k, v in overrides.items() if v is not None),
                 absent)


def _narrow_for_rules(domains: dict[str, Domain], env: Env) -> None:
    """Where a knob's values run only with some values of the knobs its value rule reads,
    those knobs keep only those values: ``knobs.attention=sdpa_flash`` on CUDA searches amp
    over bf16 and fp16 (the baseline included), not off, under which every trial would fail.
    Values that run under none are said before the study starts."""
    for knob in KNOBS:
        dom = domains[knob.name]
        if dom.refuses is None:
            continue
        for name in dom.reads:
            read = domains[name]
            kept = [x for x in read.values
                    if any(dom.refuses({name: x}, v) is None for v in dom.values)]
            if not kept:
                why = dom.refuses({name: read.values[0]}, dom.values[0])
                raise KnobError(
                    f"knobs.{knob.name}={dom.values!r} cannot run on {env.device} with "
                    f"{name} in {read.values!r}: {why}. Widen knobs.{name}, or list a value "
                    f"of {knob.name} that runs without it. {knob.doc}")
            if kept != read.values:
                domains[name] = Domain(kept, f"knobs.{knob.name}={dom.values!r} runs only with "
                                       f"{name} in {kept!r}")


def _override_reason(knob: Knob, asked: list[Any], env: Env) -> str:
    """Why the domain is what it is, said in the header. Thread counts past the cores are
    accepted (the user's call) but said as such: they time-share the cores, which the window
    then measures, and a production machine with more cores would not."""
    why = "pinned by knobs override" if len(asked) == 1 else "narrowed by knobs override"
    past = [v for v in asked if knob.name == "cpu_threads" and isinstance(v, int)
            and v > env.cpu_count]
    if past:
        why += (f"; {', '.join(map(str, past))} thread(s) are more than the {env.cpu_count} "
                "core(s) a trial process may use here: they take turns on them, and the "
                "window measures that")
    return why


def _limited(dom: Domain, limit: tuple[list[Any], str] | None) -> Domain:
    """The domain narrowed by the workload's ``knob_limits`` entry (its framework's reach)."""
    if limit is None:
        return dom
    allowed, why = limit
    kept = [v for v in dom.values if v in allowed]
    return replace(dom, values=kept, reason=why) if kept and kept != dom.values else dom


def keep_global_batch(space: Space, global_batch: int, micro_batch: int | None = None) -> Space:
    """The space under ``study.keep_global_batch``: batch_size is the micro-batch, searched over
    the powers-of-two fractions of the global batch (G, G/2, ... G/8 where they divide it) and
    the user's own micro-batch (``micro_batch``: the workload's batch_size where it accumulates
    already, e.g. 1 of a global batch of 64); the gradient accumulation G / batch_size makes
    every trial train with G samples per optimizer step, and cuda_graphs is off where a
    micro-batch accumulates (a captured step is a whole optimizer step). A user's narrowing of
    batch_size must divide G."""
    g = int(global_batch)
    micro = int(micro_batch or g)
    dom = space.domains["batch_size"]
    if "batch_size" in space.overridden:
        bad = [v for v in dom.values if v > g or g % v]
        if bad:
            raise KnobError(
                f"knobs.batch_size={dom.values!r} with study.keep_global_batch=true: "
                f"{', '.join(map(str, bad))} do not divide the global batch {g} (the "
                "workload's batch_size x its gradient accumulation); the micro-batch must be "
                "the global batch divided by a whole number of accumulation steps.")
        values = list(dom.values)
    else:
        values = sorted({g // 2**k for k in range(MAX_ACCUM_LOG2 + 1) if g % 2**k == 0}
                        | ({micro} if g % micro == 0 else set()))
    why = (f"study.keep_global_batch: micro-batches of the global batch {g}, with "
           f"{g} / batch_size gradient-accumulation steps")
    graphs = whole_steps(space.domains["cuda_graphs"], g)  # no capture where a trial accumulates
    return replace(space, domains={**space.domains, "batch_size": Domain(values, why),
                                   "cuda_graphs": graphs},
                   baseline={**space.baseline,
                             "batch_size": micro if micro in values else values[-1]})


def without_accumulation(space: Space) -> Space:
    """The space of a study that does not accumulate (no ``study.keep_global_batch``, no
    accumulation in the workload): every step is an optimizer step, so
    ``accumulation_no_sync`` has no micro-batch to skip the all-reduce on. A user who pinned
    it on is told how to accumulate."""
    dom = space.domains["accumulation_no_sync"]
    if dom.values == [False]:
        return space
    if "accumulation_no_sync" in space.overridden and True in dom.values:
        raise KnobError("knobs.accumulation_no_sync=true needs gradient accumulation: set "
                        "study.keep_global_batch=true (micro-batches of the workload's batch, "
                        "one optimizer step per global batch), declare the workload's "
                        "accumulation (its gradient_accumulation_steps, accumulate_grad_batches "
                        "or defaults['grad_accum']), or leave the knob unset.")
    why = ("no gradient accumulation (study.keep_global_batch=false, none in the workload): "
           "one all-reduce per step")
    return replace(space, domains={**space.domains, "accumulation_no_sync": Domain([False], why)},
                   baseline={**space.baseline, "accumulation_no_sync": False})


def _valid(knob: Knob, dom: Domain, value: Any) -> bool:
    if value in dom.values or value in dom.offers:  # offers: an opt-in knob's listable values
        return True
    # Integers beyond the default range are the user's call (e.g. more workers than cores,
    # a batch size that is not a power of two); other types must be in the domain.
    if knob.name in ("num_workers", "batch_size", "prefetch_factor", "cpu_threads"):
        return isinstance(value, int) and not isinstance(value, bool) and value >= (
            0 if knob.name in ("num_workers", "cpu_threads") else 1
        )
    if knob.name == "pad_to_multiple_of":
        return (value is None or (isinstance(value, int) and not isinstance(value, bool)
                                  and value > 0)) and "takes no pad_to_multiple_of" not in (dom.reason or "")
    if knob.name == "fsdp_reduce_dtype":  # opt-in: the listed dtypes, where there are ranks
        return value in ("fp32", "bf16") and "list values" in (dom.reason or "")
    if knob.name == "fsdp_cpu_offload":  # opt-in, where a GPU holds the shards
        return isinstance(value, bool) and "list values" in (dom.reason or "")
    if knob.name == "comm_hook":  # opt-in: the listed hooks, where there are ranks
        return value in ("none", *COMM_HOOKS) and "list values" in (dom.reason or "")
    if knob.name in ("length_grouping", "padding_free"):  # opt-in: any listed bool, where it applies
        return isinstance(value, bool) and "list values" in (dom.reason or "")
    if knob.name == "host_allocator":
        return value in ("default", "retain", "release") and "glibc" not in (dom.reason or "")
    if knob.name == "compile":
        return value in ("off", "default", "reduce-overhead", "max-autotune") and (
            len(dom.values) > 1 or "no C/C++ compiler" not in (dom.reason or "")
        ) and not (value in ("reduce-overhead", "max-autotune") and "static shapes" in (dom.reason or ""))
    return False


def _baseline(domains: Mapping[str, Domain], env: Env, wl: Workload) -> dict[str, Any]:
    """Trial 0: the workload's own defaults (its user's current setup), where valid here."""
    values: dict[str, Any] = {}
    for knob in KNOBS:
        dom = domains[knob.name]
        if knob.inactive(values) is not None:
            values[knob.name] = knob.off
            continue
        fallback = knob.baseline(env, wl) if knob.baseline else knob.off
        default = wl.defaults.get(knob.name, fallback)
        allowed = [v for v in dom.values if dom.refuses is None or dom.refuses(values, v) is None]
        allowed = allowed or dom.values
        values[knob.name] = default if default in allowed else allowed[0]
    return values
