"""``autotune verify``: does the exported configuration give the user's own training the speed
the study measured?

A study's figure is its window's; the claim a user cares about is "my ``trainer.train()`` got
1.4x faster". verify runs the production path (the workload's ``verifier``: the user's
``Trainer.train`` / ``Trainer.fit`` through the adapters, the runtime API around the
workload's objects, or the user's own script) once with the original settings and once with
the exported ones per round, each in a process of its own, in a random order each round
(as the study's confirmation does), and states the realized speedup with its 95% interval
(autotune/results/intervals.py) beside the study's. Where the realized speedup falls well
short of the study's, it names the likely cause from what it measured: time per step outside
the step itself (the next batch, the framework's logging, callbacks, progress bar) against the
study window's wait for its batch, or a step that itself runs slower than the window's.

Each side also reads what else the machine did over its measured steps (measure/contention.py,
the trial windows' own reading). A round in which either side ran beside other work is
measured again and left out by the confirmation's rule (results/intervals.counted_rounds):
before, a job started beside one side's run was read as the configuration's speed, and the
line said nothing of it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from autotune.core.env import child_environ
from autotune.core.files import atomic_write
from autotune.core.tokens import SAMPLES, TOKENS
from autotune.core.workload import build_workload
from autotune.measure.script_trial import SCRIPT_TARGET
from autotune.production.meter import OUT_ENV, WINDOW_ENV
from autotune.production.runtime import BEST_ENV
from autotune.results.intervals import Interval, counted_rounds, paired_speedup

log = logging.getLogger("autotune")

#: Realized below this share of the study's speedup: verify names what the production path adds.
SHORTFALL = 0.8
SIDES = ("baseline", "exported")
#: The least time a side's measured steps span by default, where verify runs the loop (a
#: script's own steps bound its sides: 75 of a 1 ms DDP step would end before 500). The load
#: reading counts the other processes from /proc/stat, whose counters tick every 10 ms per
#: core: over a 20-step window of a 1 ms step (46 ms) a side slowed to 0.43x beside a job on
#: every core read 0.44 of 2 cores of others and "quiet"; over ~0.4 s the same test read 0.99
#: (2026-12-07). A tick at each end is 0.02 s of a core: 0.04 of each core over 0.5 s, well
#: inside the rule's 0.25 share.
MIN_WINDOW_S = 0.5
#: The most measured steps that span brings a side by default (a 0.1 ms step stops here).
MAX_DEFAULT_STEPS = 2000
#: The adapters' verifiers: the user's own Trainer, which runs its own DDP under torchrun.
TRAINERS = {"autotune.adapters.hf.verify": "Trainer.train",
            "autotune.adapters.lightning.verify": "Trainer.fit"}


class VerifyError(RuntimeError):
    """A side of the rounds could not run; the message names it and its log."""


@dataclass
class Verified:
    """What ``autotune verify`` (``autotune.verify``) measured in the production path.

    ``realized``: the exported configuration's speedup over the original settings in your
    own training, with its 95% interval (``realized.point``, ``realized.low``,
    ``realized.high``; ``realized.text()`` in words). ``study_speedup`` and ``study_text``:
    the study's confirmed figure, for comparison; ``ratio``: the realized speedup as a share
    of it (under 0.8, ``causes`` names what the production path adds). ``figures``: each
    side's samples/sec (tokens/s for a token workload) per round. ``how``: which production
    path ran (your ``Trainer.train``, your script, the runtime API). ``text()`` is the line
    the command prints; ``as_dict()`` what ``verify.json`` keeps."""

    realized: Interval
    study_speedup: float | None
    study_text: str | None
    figures: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    causes: list[str] = field(default_factory=list)
    how: str = ""
    #: The rounds the realized speedup is over, and those with a side that ran beside other
    #: work (its round, and per side why: measure/contention.py's reasons).
    counted: list[int] = field(default_factory=list)
    disturbed: list[dict[str, Any]] = field(default_factory=list)

    @property
    def quiet(self) -> bool:
        """Whether every counted round ran on a quiet machine."""
        return not {d["round"] for d in self.disturbed} & set(self.counted)

    @property
    def ratio(self) -> float | None:
        """The realized speedup as a share of the study's."""
        return self.realized.point / self.study_speedup if self.study_speedup else None

    def text(self) -> str:
        head = (f"realized {self.realized.text()} ({self.how}); the study measured "
                f"{self.study_text or self.study_speedup}")
        if self.ratio is not None:
            head += f": {self.ratio:.0%} of it"
        return (head + self.load_text()
                + ("" if not self.causes else ". Likely cause: " + "; ".join(self.causes)))

    def load_text(self) -> str:
        """What other work on the machine did to the rounds ('' where none ran beside them)."""
        if not self.disturbed:
            return ""
        said = "; ".join(
            f"round {d['round'] + 1} ({', '.join(f'{s}: {w}' for s, w in d['sides'].items())})"
            for d in self.disturbed)
        if self.quiet:
            return (f". Left out, as they ran beside other work, and measured again: {said}; "
                    f"the figure is over the {len(self.counted)} quiet rounds")
        return (f". Beside other work: {said}; too few quiet rounds to leave them out, so the "
                "figure is what the machine gave beside that load, not the configuration's own")

    def as_dict(self) -> dict[str, Any]:
        return {"realized": self.realized.as_dict(), "realized_text": self.realized.text(),
                "study_speedup": self.study_speedup, "study_text": self.study_text,
                "ratio": self.ratio, "how": self.how, "causes": self.causes,
                "counted_rounds": self.counted, "disturbed": self.disturbed,
                "quiet": self.quiet, "figures": self.figures}


def verify(best_yaml: str | Path, rounds: int = 5, steps: int | None = None,
           warmup: int | None = None, script: Sequence[str] | None = None,
           nproc_per_node: int = 1) -> Verified:
    """Run the rounds for the study whose best.yaml is ``best_yaml`` (or its folder; or the
    study's other answer, best-same-training.yaml); write ``verify.json`` beside it
    (``verify-<file's stem>.json`` for another file than best.yaml). ``script``: the user's own script and its arguments, run as it
    is with AUTOTUNE_BEST naming each side's best.yaml (``autotune.Runtime`` reads it) and
    AUTOTUNE_METER_OUT where its ``Meter`` writes its samples/sec on exit. ``nproc_per_node``
    > 1: the script runs as that many ranks under torch's own launcher (``torchrun
    --standalone``), with best.yaml's ``launch.environment`` (OMP_NUM_THREADS), rank 0's meter
    reporting the whole run's samples/sec. Without a script, a study of ranks (best.yaml's
    ``launch``) verifies the Hugging Face or Lightning Trainer as that many ranks under
    torchrun, the framework's own DDP with the exported arguments; a plain workload's loop
    runs as one process. Each side reads the machine's load over its measured steps: a round
    with a side that ran beside other work is measured again (up to ``rounds`` more rounds)
    and left out of the realized speedup while enough quiet rounds remain."""
    path = Path(best_yaml)
    path = path / "best.yaml" if path.is_dir() else path
    doc = yaml.safe_load(path.read_text())
    # Another answer than best.yaml's (best-same-training.yaml) keeps its rounds apart.
    tag = "" if path.name == "best.yaml" else f"-{path.stem}"
    folder = path.parent / f"verify{tag}"
    folder.mkdir(exist_ok=True)
    request = _baseline_request(path.parent, doc)
    cwd, hooked = None, []
    if script is None and request["workload"].get("_target_") == SCRIPT_TARGET:
        # A study of the user's own command: both sides run that command, where it ran.
        # Run as its trials ran it: in-process, its frameworks hooked (measure/script_run.py).
        script, cwd = list(request["workload"]["command"][1:]), request["workload"].get("cwd")
        hooked = ["-m", "autotune.measure.script_run", "python"]
    configs = {"baseline": _baseline_config(doc, request, folder), "exported": path}
    window = request["window"]
    # Your script's own steps bound its sides (its --steps or epochs): only where verify runs
    # the loop itself does a side's window span MIN_WINDOW_S by default.
    steps = steps or _default_steps(int(window["measure_steps"]),
                                    {} if script else _window(path.parent, doc))
    warmup = warmup if warmup is not None else int(window["warmup_steps"]) + 2
    if script:
        command, how = [*hooked, *script], f"{Path(script[0]).name}, your script, as it is"
        if nproc_per_node > 1:
            command = ["-m", "torch.distributed.run", "--standalone",
                       f"--nproc_per_node={nproc_per_node}", *command]
            how += f", as {nproc_per_node} ranks under torchrun"
    else:
        spec_file = folder / "spec.json"
        spec_file.write_text(json.dumps(request["workload"]))
        verifier = build_workload(request["workload"]).verifier
        command = ["-m", verifier, "--spec", str(spec_file), "--steps",
                   str(steps), "--warmup", str(warmup), "--device", request["device"],
                   *(["--cpu-sized"] if request.get("cpu_sized") else [])]
        how = TRAINERS.get(verifier, "your loop through autotune.Runtime")
        ranks = max(nproc_per_node, int((doc.get("launch") or {}).get("nproc_per_node") or 1))
        if verifier in TRAINERS and ranks > 1:
            # The framework's own DDP under torchrun, as the study's ranks were launched:
            # each rank builds the user's Trainer, which finds its rank in the environment.
            command = ["-m", "torch.distributed.run", "--standalone",
                       f"--nproc_per_node={ranks}", *command]
            how += f", as {ranks} ranks under torchrun"
        command = [sys.executable, *command]
    key, unit = _rate_key(doc)
    rng = random.Random(0)
    figures: dict[str, list[dict[str, Any]]] = {s: [] for s in SIDES}
    i = 0
    while i < rounds or (i < 2 * rounds and len(_quiet(figures)) < rounds):
        order = list(SIDES)
        rng.shuffle(order)
        for side in order:
            figures[side].append(_run_side(command, side, configs[side], folder / f"{i}-{side}",
                                           bool(script), key, window=(warmup, steps),
                                           cwd=cwd))
            busy = _busy_words(figures[side][-1])
            log.info("verify round %d %s: %.1f %s%s", i + 1, side, figures[side][-1][key], unit,
                     f" (beside other work: {busy})" if busy else "")
        i += 1
    result = _verified(figures, key, doc, how)
    if result.ratio is not None and result.ratio < SHORTFALL:
        result.causes = causes([figures["exported"][i] for i in result.counted],
                               _window(path.parent, doc))
    atomic_write(path.parent / f"verify{tag}.json", json.dumps(result.as_dict(), indent=1))
    return result


def _contended(figure: dict[str, Any]) -> bool:
    return bool((figure.get("contention") or {}).get("contended"))


def _busy_words(figure: dict[str, Any]) -> str:
    """Why a side's run counts as beside other work ('' where it ran on a quiet machine)."""
    return "; ".join((figure.get("contention") or {}).get("reasons") or []) \
        if _contended(figure) else ""


def _quiet(figures: dict[str, list[dict[str, Any]]]) -> list[int]:
    """The rounds whose both sides ran on a quiet machine."""
    return [i for i, pair in enumerate(zip(*(figures[s] for s in SIDES), strict=False))
            if not any(_contended(f) for f in pair)]


def _verified(figures: dict[str, list[dict[str, Any]]], key: str, doc: dict[str, Any],
              how: str) -> Verified:
    """The realized speedup over the rounds that count: a round with a side that ran beside
    other work is left out while enough quiet ones remain (results/intervals.counted_rounds,
    the confirmation's own rule), so another job on the machine does not become a verdict on
    the configuration; with fewer, every round counts and the text says so."""
    exp, base = ([f[key] for f in figures[s]] for s in ("exported", "baseline"))
    busy_e, busy_b = ([_contended(f) for f in figures[s]] for s in ("exported", "baseline"))
    counted, _ = counted_rounds(exp, base, busy_e, busy_b)
    realized = paired_speedup([exp[i] for i in counted], [base[i] for i in counted])
    disturbed = [{"round": i, "sides": {s: _busy_words(figures[s][i]) for s in SIDES
                                        if _contended(figures[s][i])}}
                 for i in range(len(exp)) if busy_e[i] or busy_b[i]]
    return Verified(realized, doc.get("speedup"), doc.get("speedup_text"), figures, how=how,
                    counted=counted, disturbed=disturbed)


def _baseline_request(folder: Path, doc: dict[str, Any]) -> dict[str, Any]:
    """The baseline trial's request (its workload, device, window): what both sides run."""
    number = (doc.get("confirmation") or {}).get("baseline_trial", 0)
    req = folder / "trials" / str(number) / "request.json"
    if not req.exists():
        raise VerifyError(f"{req} is missing: verify reads the study's own trial records "
                          "(run it on the study's folder, where best.yaml was written).")
    return dict(json.loads(req.read_text()))


def _baseline_config(doc: dict[str, Any], request: dict[str, Any], folder: Path) -> Path:
    """best.yaml with the baseline's knobs: the original settings, through the same code."""
    accum = int(request.get("grad_accum") or 1)
    base = {**doc, "knobs": request["knobs"], "metrics": doc.get("baseline") or {},
            "grad_accum": accum}
    if doc.get("global_batch"):
        base["global_batch"] = _baseline_global_batch(doc, request["knobs"], accum)
    out = folder / "baseline.yaml"
    atomic_write(out, yaml.safe_dump(base, sort_keys=False))
    return out


def _baseline_global_batch(doc: dict[str, Any], knobs: dict[str, Any], accum: int) -> int:
    """The baseline's global batch (micro-batch x accumulation x ranks, core/global_batch.py),
    the ranks read from best.yaml's own: where the best changes the global batch, the
    baseline side's file carried the best's, a figure its knobs do not train with."""
    best_micro = int((doc.get("knobs") or {}).get("batch_size") or 0)
    best_accum = int(doc.get("grad_accum") or 1)
    per_rank = best_micro * best_accum
    ranks = max(1, int(doc["global_batch"]) // per_rank) if per_rank else 1
    return int(knobs.get("batch_size") or 0) * accum * ranks


def _rate_key(doc: dict[str, Any]) -> tuple[str, str]:
    """The figure both sides are compared on: the study's unit (real tokens/s for a
    workload with tokens: the Trainer's real tokens are counted as the window counted them)."""
    if (doc.get("metrics") or {}).get("unit") == TOKENS:
        return "tokens_per_sec", TOKENS
    return "samples_per_sec", SAMPLES


def _run_side(command: list[str], side: str, config: Path, out: Path,
              script: bool, key: str = "samples_per_sec", window: tuple[int, int] = (20, 50),
              cwd: str | None = None) -> dict[str, Any]:
    result = out.with_suffix(".json")
    result.unlink(missing_ok=True)
    if script:  # the user's script as it is: Runtime and Meter read these variables, and
        # its meter ends the run once its window is measured (meter.WINDOW_ENV)
        full = [sys.executable, *command]
        env = child_environ({BEST_ENV: str(config.resolve()), OUT_ENV: str(result.resolve()),
                             WINDOW_ENV: f"{window[0]},{window[1]}",
                             **_rank_environment(command, config)})
    else:
        full = [*command, "--side", side, "--config", str(config), "--out", str(result)]
        env = {k: v for k, v in child_environ(_rank_environment(command, config)).items()
               if k not in (BEST_ENV, OUT_ENV)}
    with out.with_suffix(".log").open("w") as logf:
        proc = subprocess.run(full, stdout=logf, stderr=subprocess.STDOUT, env=env,
                              cwd=cwd or os.getcwd(), stdin=subprocess.DEVNULL)
    if proc.returncode != 0 or not result.exists():
        tail = out.with_suffix(".log").read_text()[-1500:]
        raise VerifyError(f"the {side} side exited with code {proc.returncode} without a "
                          f"result (log: {out.with_suffix('.log')}):\n{tail}")
    figures: dict[str, Any] = json.loads(result.read_text())
    if script and not figures.get("samples_per_sec"):
        raise VerifyError(
            f"the {side} side's run ended after {figures.get('steps', 0)} steps, before its "
            f"window: verify measures {window[0]} warm-up and {window[1]} measured steps per "
            "side (--warmup, --steps); give the command more steps (its --max_steps or epochs), "
            "or verify fewer; its script must step autotune's Meter (rt.meter(), "
            f"meter.step(n)). Log: {out.with_suffix('.log')}")
    if not figures.get("samples_per_sec"):
        raise VerifyError(f"the {side} side measured no samples/sec ({figures}): a script must "
                          "step autotune's Meter (rt.meter(), meter.step(n)) past its warm-up.")
    if not figures.get(key):
        raise VerifyError(f"the {side} side measured no {key.replace('_per_sec', '/s')} "
                          f"({figures}), the study's unit: verify compares what the study "
                          "measured (a script's Meter counts samples only, so a tokens/s study "
                          "is verified through its adapter, without --script).")
    return figures


def _rank_environment(command: list[str], config: Path) -> dict[str, str]:
    """Under torchrun, each rank's environment as the study measured it (best.yaml's
    ``launch.environment``: OMP_NUM_THREADS), on both sides."""
    if "torch.distributed.run" not in command:
        return {}
    launch = (yaml.safe_load(config.read_text()) or {}).get("launch") or {}
    return {k: str(v) for k, v in (launch.get("environment") or {}).items()}


def _default_steps(measure_steps: int, window: dict[str, Any]) -> int:
    """Twice the study's measured steps, and at least MIN_WINDOW_S of the exported trial's
    step (the faster side, as a rule) so that each side's load reading can be read."""
    steps = max(20, 2 * measure_steps)
    step_ms = float((window.get("step_ms") or {}).get("median") or 0.0)
    if step_ms > 0:
        steps = max(steps, min(MAX_DEFAULT_STEPS, math.ceil(1000 * MIN_WINDOW_S / step_ms)))
    return steps


def _window(folder: Path, doc: dict[str, Any]) -> dict[str, Any]:
    """The exported trial's measured window (its result.json), for the comparison."""
    res = folder / "trials" / str(doc.get("best_trial")) / "result.json"
    return dict(json.loads(res.read_text())) if res.exists() else {}


def causes(exported: list[dict[str, Any]], window: dict[str, Any]) -> list[str]:
    """What the production path adds, from the exported side's step times against the study
    window of the same configuration: the time between steps (the next batch and the
    framework's own per-step work) against the window's wait for its batch, and the step
    itself against the window's step."""
    if not exported or not window.get("step_ms"):
        return ["unknown: the study's window of this configuration is not on record"]
    median = sorted(exported, key=lambda f: f["samples_per_sec"])[len(exported) // 2]
    w_step = float(window["step_ms"].get("mean") or window["step_ms"]["median"])
    w_wait = w_step * float((window.get("timers") or {}).get("data_wait") or 0.0)
    between, inside = float(median.get("between_ms") or 0.0), float(median.get("inside_ms") or 0.0)
    out = []
    if between > w_wait + 0.1 * w_step:
        out.append(f"time between steps: {between:.1f} ms per step go to the next batch and "
                   f"the loop's own per-step work (logging, callbacks, schedulers, progress "
                   f"bar), where the study's window waited {w_wait:.1f} ms for its batch")
    if inside > 1.1 * (w_step - w_wait):
        out.append(f"a slower step: {inside:.1f} ms inside each step against the window's "
                   f"{w_step - w_wait:.1f} ms (per-step work inside the framework's step: "
                   "gradient clipping, a scheduler, a sync for logged values)")
    # A script's Meter reports its time between and inside steps, not always a step time:
    # a noisy round where the exported side read slower once raised KeyError here.
    step = median.get("step_ms") or between + inside
    mine = f"{float(step):.1f} ms per step" if step else "its steps"
    return out or [f"neither: {mine} against the window's {w_step:.1f} ms; the machine may "
                   "have been busier than during the study"]
