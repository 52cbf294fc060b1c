"""A study's two answers, told apart: the fastest configuration, and the fastest that trains the
same model as the user's own.

Most of a study's speedup may come from a knob that changes what is trained: a 4x batch runs
4x fewer optimizer steps per epoch at the same learning rate, and a user who applies it
unawares changes their convergence. The knob registry classes every knob (core/knobs.py:
speed, numerics, training); the confirmation measures both answers with their own interval
(search/confirmation/confirm.py, choose.decide_same). best.yaml holds the one ``study.training`` asks for
(``any`` by default) and states the other in its ``training`` section; the other answer is
written beside it (``ANSWER_FILES``) where it is another configuration. The batch is the
global batch (micro-batch x accumulation x ranks: core/global_batch.py), and the words state
the learning-rate scaling rule of the optimizer's family (core/effects.py: linear for SGD,
Goyal et al. 2017; square root for the Adam family, Malladi et al. 2022), as Lightning's
BatchSizeFinder and DeepSpeed's autotuner say plainly that they change the batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.core.effects import global_batches, learning_rate_words
from autotune.core.knobs import BY_NAME
from autotune.results.record import study_attrs, trial_attrs
from autotune.results.trials import (
    ANSWER_FILES,
    baseline_trial,
    batch_context,
    changes_training,
    chosen_trial,
    over_limit,
    ranked_trials,
    refused,
    study_optimizer,
    training_setting,
)


def speedup_words(best: FrozenTrial, base: FrozenTrial | None, conf: dict[str, Any],
                  study: optuna.Study | None = None) -> str | None:
    """The speedup in words with its 95% interval over the confirmation's paired rounds
    ("1.38x, 95% CI 1.31-1.45x, 6 rounds"); without confirmation, one window each. Where none
    is shown, the real reason (``study``: the numerics check's refusals, the other trials)."""
    if base is not None and over_limit(base) and best.number != base.number:
        # Your own configuration does not fit: the figure is the fitting one's against it.
        ratio = conf.get("speedup_text") or (
            f"{best.value / base.value:.2f}x, one search window each"
            if base.value and best.value else "not measured")
        return (f"{ratio} of your own configuration (trial {base.number}), which is over the "
                "memory limit: this is the fastest configuration measured that fits")
    out = sorted(refused(study)) if study is not None else []
    if conf.get("speedup_text"):
        if conf.get("leader") == conf.get("baseline_trial"):
            return _refused_words(out, base, study) or (
                f"none: your own configuration (trial {conf.get('leader')}) measured fastest "
                "among the finalists")
        if conf.get("established") is False:
            return (f"none shown: the fastest finalist, trial {conf.get('leader')}, measured "
                    f"{conf['speedup_text']}, an interval that includes 1.0")
        return str(conf["speedup_text"])
    if base is None or not base.value or not best.value:
        return None
    if best.number == base.number:
        if refusal := _refused_words(out, base, study):
            return refusal
        if study is not None and len(ranked_trials(study)) > 1:
            return (f"none: no configuration read faster than yours (trial {base.number}) by "
                    "more than its windows' noise")
        return (f"none: your own configuration (trial {base.number}) is the only one "
                "measured to the end")
    return (f"{best.value / base.value:.2f}x (one search window each: no interval; "
            "study.confirm_runs=3 or more states one)")


def _refused_words(out: list[int], base: FrozenTrial | None, study: optuna.Study | None
                   ) -> str | None:
    """Why the user's own configuration is kept where the numerics check refused faster ones
    (None: it refused none faster): said, so that "speedup: none" is not read as "nothing
    was faster"."""
    trials = study.get_trials(deepcopy=False) if study is not None else []
    faster = [n for n in out if base is not None and base.value
              and (trials[n].value or 0.0) > base.value]
    if base is None or not faster:
        return None
    return (f"none: your own configuration (trial {base.number}) is kept: trial(s) "
            f"{', '.join(map(str, faster))} measured faster and were refused by the numerics "
            "check (their loss left your own seed-to-seed spread: see numerics), and no "
            "configuration that keeps your arithmetic was shown faster than yours")


def file_of(answer: str, setting: str) -> str:
    """The file that holds ``answer`` in a study whose best.yaml holds ``setting``'s."""
    return "best.yaml" if answer == setting else ANSWER_FILES[answer]


def _numerics(knobs: dict[str, Any], base: dict[str, Any]) -> dict[str, str]:
    """The knobs of class numerics this configuration changes: same training, other arithmetic."""
    return {k: f"{base.get(k)} -> {v}" for k, v in knobs.items()
            if k in BY_NAME and BY_NAME[k].effect == "numerics" and base.get(k) != v}


def _checked(study: optuna.Study, t: FrozenTrial) -> str | None:
    """The numerics check's verdict on ``t`` in words (None: not checked)."""
    e = ((study_attrs(study).get("numerics") or {}).get("trials") or {}).get(str(t.number))
    if not e or e.get("passed") is None:
        return None
    if e.get("passed") is False:
        return "refused by the numerics check"
    return "numerics check passed, " + check_figures(e)


def check_figures(e: dict[str, Any]) -> str:
    """A passed check's figures: "tail loss 1.20% from yours (tolerance 10.00%, your runs'
    spread 2.10%)"; a check recorded before the spread was measured: its step-by-step one."""
    if e.get("deviation") is None and e.get("max_rel_dev") is not None:
        return f"max loss deviation {e['max_rel_dev']:.2%}"
    if e.get("one_seed"):  # decided on your run at its seed: no spread could refuse it
        return (f"tail loss {float(e['deviation']):.2%} from your run at its seed (within "
                f"{float(e['tolerance']):.2%}, where no spread of your runs at other seeds "
                f"could refuse it at tolerance {float(e['family_tolerance']):.2%})")
    if e.get("spread") is None:  # the user's own numerics: nothing was compared
        return "your own arithmetic"
    return (f"tail loss {float(e['deviation']):.2%} from yours (tolerance "
            f"{float(e['tolerance']):.2%}, your runs' spread {float(e['spread']):.2%})")


def _entry(study: optuna.Study, t: FrozenTrial, base: FrozenTrial | None,
           conf: dict[str, Any], answer: str) -> dict[str, Any]:
    knobs = dict(trial_attrs(t).get("knobs") or {})
    base_knobs = dict(trial_attrs(base).get("knobs") or {}) if base else {}
    changes = changes_training(study, t, base)
    out: dict[str, Any] = {
        "answer": answer, "trial": t.number, "file": file_of(answer, training_setting(study)),
        "speedup": conf.get("speedup") if conf else None,
        "speedup_text": speedup_words(t, base, conf, study), "changes": changes,
        "numerics": _numerics(knobs, base_knobs), "learning_rate": None,
        "numerics_check": _checked(study, t)}
    if "batch_size" in changes:  # the global batch changed: the rule of its optimizer's family
        old, new = global_batches(int(base_knobs["batch_size"]), int(knobs["batch_size"]),
                                  *batch_context(study))
        out["learning_rate"] = learning_rate_words(old, new, study_optimizer(study))
    return out


def training_section(study: optuna.Study, best: FrozenTrial, conf: dict[str, Any],
                     answer: str) -> dict[str, Any]:
    """best.yaml's ``training``: which answer this file holds (``this``), what its knobs
    change in training and in numerics, and the other answer (``other``: its trial, interval
    and file; None where it is this same configuration, or the user's own: ``yours`` then
    says what the rounds found), with both in words."""
    base = baseline_trial(study)
    this = _entry(study, best, base, conf, answer)
    other_answer = "same" if answer == "any" else "any"
    other_trial, other_conf = chosen_trial(study, other_answer)
    section: dict[str, Any] = {"setting": training_setting(study), "this": this, "other": None,
                               "baseline_trial": base.number if base else None}
    if other_trial is None or other_trial.number == best.number:
        pass
    elif base is not None and other_trial.number == base.number:
        section["yours"] = (speedup_words(other_trial, base, other_conf, study) if other_conf else
                            "no trial of the search that trains the same model read faster "
                            "than yours")
    else:
        section["other"] = _entry(study, other_trial, base, other_conf, other_answer)
    section["words"] = answer_words(section)
    return section


def answer_words(section: dict[str, Any], folder: str = "") -> str:
    """Both answers in one statement: "2.21x (95% CI ...) with batch_size 32 -> 128: 4x fewer
    optimizer steps per epoch at the same learning rate; scale the learning rate (...) or take
    the same-training configuration (trial 9): 1.48x (...), studies/NAME/best-same-training.yaml".
    ``folder``: the study's folder, prefixed to the other file's name."""
    this, other = section["this"], section.get("other")
    prefix = f"{folder.rstrip('/')}/" if folder else ""
    if this["changes"]:
        said = f"{_figure(this['speedup_text'])} with " + "; ".join(this["changes"].values())
        if this.get("learning_rate"):
            said += f"; {this['learning_rate']}"
        if other is None:
            return (said + "; no configuration that trains the same model as yours was shown "
                    f"faster than yours ({section.get('yours') or 'none measured'}): keep your "
                    "settings, or take these changes")
        return (said + f"; or take the same-training configuration (trial {other['trial']}"
                f"{_numerics_words(other)}): {_figure(other['speedup_text'])}, "
                f"{prefix}{other['file']}")
    if this["trial"] == section.get("baseline_trial"):
        said = f"{_figure(this['speedup_text'])}: your own configuration"
    else:
        said = (f"{_figure(this['speedup_text'])}: trial {this['trial']} trains the same model "
                "as yours")
        said += _numerics_words(this) or " (speed knobs only)"
    if other is None:
        return said + "; no faster configuration that changes training was found"
    return (said + f"; the fastest of all, trial {other['trial']}: "
            f"{_figure(other['speedup_text'])} with "
            + "; ".join(other["changes"].values())
            + (f" ({other['learning_rate']})" if other.get("learning_rate") else "")
            + f", {prefix}{other['file']}")


def _figure(text: str | None) -> str:
    """A speedup's words as a figure with its interval in brackets ("2.21x (95% CI
    1.97-2.48x, 11 rounds)"), so the words after it read as the configuration's."""
    head, sep, rest = str(text).partition(", ")
    return f"{head} ({rest})" if sep and head.endswith("x") else str(text)


def _numerics_words(entry: dict[str, Any]) -> str:
    if not entry.get("numerics"):
        return ""
    return ("; other arithmetic: " + ", ".join(f"{k} {v}" for k, v in entry["numerics"].items())
            + f" ({entry.get('numerics_check') or 'numerics not checked'})")


def satellite_name(name: str, file: str) -> str:
    """A satellite file's name for the answer in ``file``: training_args.yaml beside
    best-same-training.yaml is training_args-same-training.yaml."""
    stem, dot, ext = name.rpartition(".")
    suffix = file.removesuffix(".yaml").removeprefix("best")
    return f"{stem}{suffix}{dot}{ext}"


def remove_answer(out_dir: Path, file: str) -> None:
    """The files of an answer the study no longer has apart from best.yaml's."""
    suffix = file.removesuffix(".yaml").removeprefix("best")
    for stale in [out_dir / file, out_dir / "hydra" / "autotune" / file,
                  *out_dir.glob(f"*{suffix}.yaml"), *out_dir.glob(f"*{suffix}.txt")]:
        stale.unlink(missing_ok=True)
