"""The user's own configuration in the numerics check: its runs at the study's seed and the
next ones, each made once per configuration and kept in the study's record.

The run at the study's seed comes first, since the finalist runs at that seed too; the runs at
the next seeds (their spread is the tolerance: spread.py) are made only where the verdict needs
them (spread.passes_on_one_seed: a finalist that close to the user's run at its own seed passes
whatever the others read). A reference made for one finalist with one seed is completed, not
run again, when a later finalist needs its spread.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from autotune.measure.protocol import TrialRequest
from autotune.measure.runner import run_window
from autotune.search.checks.spread import REFERENCE_SEEDS, Spread, finite, tail_loss
from autotune.search.setup import StopFlag, StudySetup


@dataclass
class Reference:
    """The user's configuration at the study's seed and the next ones, as far as run."""

    losses: list[float] | None = None  # at the study's seed (the finalist's): step by step
    tails: list[float] = field(default_factory=list)  # each seed's tail loss, in seed order
    seeds: list[int] = field(default_factory=list)
    error: str = ""  # a run failed: the check cannot judge (the run is tried again next call)
    diverged: str = ""  # a run went non-finite: the check is uninformative

    @property
    def usable(self) -> bool:
        """Whether a finalist can be judged against it (a run at the study's seed, finite)."""
        return self.losses is not None and not self.error and not self.diverged

    @property
    def complete(self) -> bool:
        return len(self.seeds) >= REFERENCE_SEEDS

    @property
    def spread(self) -> Spread | None:
        """The user's seed-to-seed spread, once every seed has run and none diverged."""
        if not (self.usable and self.complete):
            return None
        return Spread(tuple(self.tails), tuple(self.seeds))

    def as_dict(self) -> dict[str, Any]:
        return {"losses": self.losses, "error": self.error, "diverged": self.diverged,
                "tails": list(self.tails), "seeds": list(self.seeds)}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Reference:
        return Reference(d.get("losses"), list(d.get("tails") or []),
                         list(d.get("seeds") or []), d.get("error") or "",
                         d.get("diverged") or "")


def reference(setup: StudySetup, knobs: dict[str, Any], references: dict[str, Reference],
              stop: StopFlag | None, seeds: int = REFERENCE_SEEDS) -> Reference:
    """The reference for ``knobs``, its first ``seeds`` seeds run (those not run yet, in seed
    order), stopping at a run that fails or diverges."""
    key = json.dumps(knobs, sort_keys=True)
    ref = references.setdefault(key, Reference())
    tag = f"reference-{list(references).index(key)}"
    while len(ref.seeds) < seeds and not ref.error and not ref.diverged:
        seed = setup.seed + len(ref.seeds)
        losses, error = run_losses(setup, knobs, f"{tag}-seed{seed}", stop, seed)
        if losses is None:
            ref.error = error
            break
        if not ref.seeds:
            ref.losses = losses
        ref.seeds.append(seed)
        ref.tails.append(tail_loss(losses) if finite(losses) else math.nan)
        if not finite(losses):
            step = next(i for i, v in enumerate(losses) if not math.isfinite(v)) + 1
            ref.diverged = (f"your own configuration's loss went non-finite at seed {seed} "
                            f"(step {step})")
    return ref


def run_losses(setup: StudySetup, knobs: dict[str, Any], tag: str, stop: StopFlag | None,
               seed: int) -> tuple[list[float] | None, str]:
    """One numerics run in a trial subprocess: its losses step by step, or why it failed."""
    req = TrialRequest(workload=setup.workload_spec, knobs=knobs, device=setup.env.device,
                       window=setup.window, seed=seed, cpu_sized=setup.cpu_sized,
                       env=setup.trial_env, grad_accum=setup.grad_accum(knobs),
                       numerics_steps=setup.study.numerics_steps, launch=setup.ranks)
    res = run_window(req, setup.out_dir / "numerics" / tag,
                     stop_requested=lambda: stop.reason if stop else None)
    if not res.ok or not res.losses:
        return None, f"{res.outcome}: {res.error}"
    return [float(v) for v in res.losses], ""
