"""Where an ``autotune.Runtime``'s knobs come from, and what the script's own calls say.

One script, four lives, the same lines in each (``rt = autotune.Runtime()``, then
``rt.loader_kwargs(batch_size=32, num_workers=2)``, ``rt.autocast()``, ...):

- **its own run, before any study** (no best.yaml): every call returns the value the script
  passed it, so the script trains exactly as written: its settings are stated once, in its
  own lines, and nowhere else;
- **a study's discovery run** (AUTOTUNE_DISCOVER, workloads/script.py): the same, and the values
  passed and the knobs the calls reach are written down, so that the study's baseline is the
  script's own configuration and its space holds only what the script lets it change;
- **a trial** (the script run as a trial, measure/script_trial.py): the calls return that
  trial's knobs, and the meter's steps are the trial's window;
- **production** (best.yaml given, or AUTOTUNE_BEST): the calls return the measured knobs.

``Runtime(best)`` with a best.yaml keeps its meaning; its calls' arguments are then only the
script's defaults, which the measured values replace.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any

import torch

from autotune.core.env import DISCOVER_ENV
from autotune.core.knobs import KNOBS
from autotune.measure import script_window
from autotune.measure.script_window import DISCOVER_STEPS, ScriptWindow, end_process
from autotune.production.best import BestConfig, best_from_document, load_best

#: A best.yaml that replaces the one the script names (``autotune verify --script`` runs the
#: user's unchanged script once with the original configuration, once with the exported one).
BEST_ENV = "AUTOTUNE_BEST"
log = logging.getLogger("autotune")

#: Knobs of the whole process, applied by ``Runtime()`` itself: reached by any script that
#: builds one before its DataLoader and model.
PROCESS_KNOBS = ("tf32", "cudnn_benchmark", "expandable_segments", "host_allocator",
                 "cpu_threads")
#: ``torch.autocast`` dtypes as the ``amp`` knob names them.
AMP_NAMES = {None: "off", torch.bfloat16: "bf16", torch.float16: "fp16"}


@dataclass
class Source:
    """The configuration a Runtime applies, and how it was found."""

    mode: str  # "best", "trial", "own" (own also on a discovery run)
    best: BestConfig
    window: ScriptWindow | None = None
    discover: str | None = None  # a discovery run's output file
    own: dict[str, Any] = field(default_factory=dict)  # the values the script's calls passed
    reached: set[str] = field(default_factory=set)  # the knobs its calls reach
    image_inputs: bool = False  # rt.to_device saw 4-D inputs
    optimizer: str = ""  # the optimizer class the script's calls saw
    grad_accum_read: bool = False  # the script read rt.grad_accum
    #: The process-wide knobs this source's script reaches (a framework's hook applies fewer
    #: than a Runtime, which is made before any allocation: adapters/hf/script.py).
    process: tuple[str, ...] = PROCESS_KNOBS
    framework: str = ""  # "hf": the script's settings were read from its Trainer's arguments
    #: The values a framework's Trainer can take for a knob it reaches, and why (knob ->
    #: [values, why], as Workload.knob_limits): TrainingArguments.optim's two AdamWs.
    limits: dict[str, Any] = field(default_factory=dict)
    #: What a framework's model says of the knobs it can take (the attention implementations
    #: a Hugging Face model's class supports, its attention dropout: Workload's attributes).
    traits: dict[str, Any] = field(default_factory=dict)
    _discover_steps: int = 0

    def setting(self, knob: str, value: Any) -> Any:
        """The value a call returns for ``knob`` given the script's own ``value``."""
        self.own.setdefault(knob, value)
        self.reached.add(knob)
        if self.mode == "own":
            self.best.knobs[knob] = value
            return value
        return self.best.knobs.get(knob, value)

    def neutral(self, knob: str) -> Any:
        """The value that changes nothing of ``knob`` (its ``off``): a script's own where it
        passes none, as DDP's defaults are for ``rt.ddp``."""
        return neutral_knobs()[knob]

    def on_step(self, samples: int, wait_s: float, loss: float | None) -> None:
        """Each step the meter counts: a trial's window, or a discovery run's end."""
        if self.window is not None:
            self.window.optimizer = self.window.optimizer or self.optimizer
            self.window.step(samples, wait_s, loss)
        elif self.discover is not None:
            self._discover_steps += 1
            if self._discover_steps >= DISCOVER_STEPS:
                self.write_discovery()
                end_process(0)

    def write_discovery(self) -> None:
        assert self.discover is not None
        # grad_accum is no knob: a framework's Trainer declares its accumulation (the global
        # batch the study keeps: core/global_batch.py).
        doc = {"own": {k: v for k, v in self.own.items()
                       if k in self.reached or k == "grad_accum"},
               "reached": sorted(self.reached | set(self.process)),
               "image_inputs": self.image_inputs, "optimizer": self.optimizer,
               "grad_accum_read": self.grad_accum_read,
               **({"framework": self.framework} if self.framework else {}),
               **({"limits": self.limits} if self.limits else {}),
               **({"traits": self.traits} if self.traits else {})}
        with open(self.discover, "w") as f:
            json.dump(doc, f)


def as_best(best: Any) -> BestConfig:
    """A best.yaml's path, a ``BestConfig``, or a mapping with its ``knobs`` (a Hydra node)."""
    if isinstance(best, (str, os.PathLike)):
        return load_best(best)
    if isinstance(best, BestConfig):
        return best
    return best_from_document(_plain(best), "the given configuration")


def _plain(node: Any) -> dict[str, Any]:
    """A Hydra/OmegaConf node or a mapping as plain Python data."""
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(node, DictConfig):
            return dict(OmegaConf.to_container(node, resolve=True))  # type: ignore[arg-type]
    except ImportError:  # pragma: no cover - omegaconf comes with hydra, a core dependency
        pass
    return dict(node)


def neutral_knobs() -> dict[str, Any]:
    """Every knob at the value that changes nothing in a script's own training (its ``off``):
    what a script's run before any study applies where its calls name no value."""
    return {k.name: k.off for k in KNOBS}


def resolve(best: Any) -> Source:
    """The source of a ``Runtime(best)``. A script trial's window in this process comes first
    (the trial is the measurement of its knobs, whatever best.yaml the script names), then a
    discovery run (the script's own values), then AUTOTUNE_BEST, then ``best``; with none, or
    a best.yaml path that does not exist yet (a script that names the file its study will
    write), the script's own values."""
    window = script_window.current()
    if window is not None:
        doc = {"schema": 1, "knobs": dict(window.req.knobs),
               "grad_accum": int(window.req.grad_accum or 1),
               "device": {"type": torch.device(window.req.device).type}}
        return Source("trial", best_from_document(doc, "this trial's configuration"),
                      window=window)
    discover = os.environ.get(DISCOVER_ENV) or None
    override = os.environ.get(BEST_ENV)
    if discover is None and (override or best is not None):
        if override or not isinstance(best, (str, os.PathLike)) or os.path.exists(best):
            return Source("best", as_best(override or best))
        log.info("autotune: %s does not exist yet: this run uses your script's own "
                 "settings (autotune -- python <your script> writes it)", best)
    doc = {"schema": 1, "knobs": neutral_knobs(), "metrics": {},
           "device": {"type": "cuda" if torch.cuda.is_available() else "cpu"}}
    return Source("own", best_from_document(doc, "your script's own settings"),
                  discover=discover)
