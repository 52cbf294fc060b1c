"""Nightly comparison: this study against an earlier one (same or another storage).

``study.compare_to=<name>`` (and ``study.compare_storage=<url>`` when it lives elsewhere) puts
both side by side in the report (best configuration, confirmed throughput, ceilings, device
and library versions) and flags a regression: the best throughput down by more than
``study.regression_pct`` percent, or a changed environment (device, torch, CUDA, library
versions), which makes the figures incomparable. Throughput is in each study's unit (real
tokens/s for a workload with tokens, else samples/s; a study stored before units is samples/s):
two studies in different units are never compared, and the verdict says so. A regression exits with REGRESSION_EXIT so a
scheduler can tell it from a crash (1) or a usage error (2).

``study.start_from=<name>`` enqueues the earlier study's best configuration right after the
baseline, so a nightly study starts where the last one ended.

An earlier study that is not there (a schedule's first night, a missed night) is a warning, in
the log and the report, and the study runs without it; a storage that does not answer is a
usage error.
"""

from __future__ import annotations

import html
import importlib.metadata
import logging
import platform
from pathlib import Path
from typing import Any

import optuna

from autotune.core.tokens import unit_of, unit_word
from autotune.results.export import best_document
from autotune.results.record import study_attrs
from autotune.results.storage import open_storage, redact

log = logging.getLogger("autotune")

REGRESSION_EXIT = 3
LIBRARIES = ("torch", "torchvision", "optuna", "numpy", "autotune")


class CompareError(ValueError):
    """The study to compare with (or start from) cannot be read."""


def versions() -> dict[str, str]:
    """The library versions a study ran with (recorded as the study's ``versions`` attr)."""
    out = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def load_other(name: str, storage_url: str) -> optuna.Study:
    if storage_url.startswith("sqlite:///") and not Path(storage_url[len("sqlite:///"):]).exists():
        raise CompareError(
            f"study {name!r}: there is no {storage_url[len('sqlite:///'):]} (no study ran under "
            "that name with the default storage). Set study.compare_to / study.start_from to an "
            "earlier study's name, and study.compare_storage to its storage URL when it is not "
            "studies/<name>/study.db.")
    try:
        return optuna.load_study(study_name=name, storage=open_storage(storage_url))
    except KeyError:
        try:
            names = [s.study_name for s in optuna.get_all_study_summaries(open_storage(storage_url))]
        except Exception:  # noqa: BLE001 - only a hint
            names = []
        raise CompareError(
            f"study {name!r} was not found in {redact(storage_url)}"
            + (f"; studies there: {', '.join(names)}" if names else "; that storage holds no study")
            + ". Set study.compare_to / study.start_from to one of them, and study.compare_storage "
            "to its storage URL when it is not this study's.") from None


def summary(study: optuna.Study) -> dict[str, Any]:
    """One side of the comparison."""
    doc = best_document(study, "") or {}
    dev = study_attrs(study).get("device") or {}
    metrics = doc.get("metrics") or {}
    unit = unit_of(metrics.get("unit") or study_attrs(study).get("unit"))
    training = doc.get("training") or {}
    other = training.get("other") or {}
    return {
        "name": study.study_name,
        # Which answer its best.yaml holds (study.training; before the setting: any) and the
        # other one's speedup, where it is another configuration.
        "answer": (training.get("this") or {}).get("answer") or "any",
        "other_answer": (f"{other['answer']}: trial {other['trial']}, {other['speedup_text']}"
                         if other else None),
        "best_trial": doc.get("best_trial"),
        "knobs": doc.get("knobs") or {},
        "unit": unit,
        # the best figure, in ``unit`` (the key's name is older than units)
        "samples_per_sec": metrics.get(f"{unit_word(unit)}_per_sec"),
        "confirmed": bool((doc.get("metrics") or {}).get("confirm_runs")),
        "speedup": doc.get("speedup"),
        "ceilings": doc.get("ceilings") or {},
        "fraction_of_ceiling": doc.get("fraction_of_ceiling"),
        "environment": {"device": dev.get("device"), "device_name": dev.get("device_name"),
                        "cuda": dev.get("cuda_version"),
                        **(study_attrs(study).get("versions") or {"torch": dev.get("torch_version")})},
    }


def compare_studies(study: optuna.Study, other_name: str, other_storage: str,
                    regression_pct: float) -> dict[str, Any]:
    """This study against ``other_name``: both summaries, the change, the regression verdict."""
    now, before = summary(study), summary(load_other(other_name, other_storage))
    reasons = []
    change = None
    unit = now["unit"]
    if now["unit"] != before["unit"]:
        # Not a slowdown, and not a figure either way: flagged, so a schedule looks.
        reasons.append(f"units differ: {before['name']!r} measured {before['unit']}, this "
                       f"study {now['unit']}; their throughputs are not compared (a workload "
                       "with token inputs is measured in real tokens/s). Compare with a study "
                       f"in {now['unit']}")
    elif now["answer"] != before["answer"]:
        reasons.append(f"answers differ: {before['name']!r} exported its study.training="
                       f"{before['answer']} answer, this study its study.training="
                       f"{now['answer']} answer; their throughputs are not compared. Compare "
                       "studies run with the same study.training")
    elif now["samples_per_sec"] and before["samples_per_sec"]:
        change = 100 * (now["samples_per_sec"] / before["samples_per_sec"] - 1)
        if change < -regression_pct:
            reasons.append(f"best {unit_word(unit)}/sec {before['samples_per_sec']:,.1f} → "
                           f"{now['samples_per_sec']:,.1f} ({change:+.1f}%, threshold "
                           f"-{regression_pct:g}%)")
    elif before["samples_per_sec"] and not now["samples_per_sec"]:
        reasons.append("this study has no feasible trial; the earlier one had")
    env_now, env_before = now["environment"], before["environment"]
    changed = {k: [env_before.get(k), env_now.get(k)] for k in sorted(set(env_now) | set(env_before))
               if k in env_now and k in env_before and env_now.get(k) != env_before.get(k)}
    if changed:
        reasons.append("environment changed: " + ", ".join(f"{k} {a} → {b}" for k, (a, b) in changed.items()))
    return {"current": now, "previous": before, "previous_storage": redact(other_storage),
            "unit": unit if now["unit"] == before["unit"] else None, "change_pct": change, "regression_pct": regression_pct,
            "environment_changed": changed, "regression": bool(reasons), "reasons": reasons}


def _rows(c: dict[str, Any]) -> list[tuple[str, str, str]]:
    a, b = c["previous"], c["current"]

    def f(v: Any) -> str:
        return "-" if v is None else (f"{v:,.1f}" if isinstance(v, float) else str(v))

    rows = [("study", a["name"], b["name"]),
            ("unit", a["unit"], b["unit"]),
            ("best (in its unit)", f(a["samples_per_sec"]) + (" (confirmed)" if a["confirmed"] else ""),
             f(b["samples_per_sec"]) + (" (confirmed)" if b["confirmed"] else "")),
            ("speedup over its baseline", f(a["speedup"]), f(b["speedup"])),
            ("best.yaml's answer (study.training)", a["answer"], b["answer"]),
            ("the other answer", f(a["other_answer"]), f(b["other_answer"])),
            ("best trial", f(a["best_trial"]), f(b["best_trial"]))]
    for k in sorted(set(a["ceilings"]) | set(b["ceilings"])):
        rows.append((f"{k} ceiling", f(a["ceilings"].get(k)), f(b["ceilings"].get(k))))
    for k in sorted(set(a["knobs"]) | set(b["knobs"])):
        rows.append((f"knobs.{k}", f(a["knobs"].get(k)), f(b["knobs"].get(k))))
    for k in sorted(set(a["environment"]) | set(b["environment"])):
        rows.append((k, f(a["environment"].get(k)), f(b["environment"].get(k))))
    return rows


def verdict(c: dict[str, Any]) -> str:
    if c["regression"]:
        return "REGRESSION: " + "; ".join(c["reasons"])
    change = c["change_pct"]
    word = unit_word(c.get("unit"))
    return ("no regression" + (f" (best {word}/sec {change:+.1f}%)" if change is not None else "")
            + f", threshold -{c['regression_pct']:g}%")


def compare_markdown(c: dict[str, Any]) -> str:
    if c.get("missing"):
        return f"## Comparison\n\nNot compared: {c['missing']}"
    lines = [f"## Comparison with {c['previous']['name']} ({c['previous_storage']})", "",
             f"**{verdict(c)}**", "", "| | previous | this study |", "|---|---|---|"]
    lines += [f"| {k} | {a} | {b} |" for k, a, b in _rows(c)]
    return "\n".join(lines)


def compare_html(c: dict[str, Any]) -> str:
    e = html.escape
    if c.get("missing"):
        return f"<h2>Comparison</h2><p>Not compared: {e(c['missing'])}</p>"
    cls = ' class="regression"' if c["regression"] else ""
    rows = "".join(f"<tr><td>{e(k)}</td><td>{e(a)}</td><td>{e(b)}</td></tr>" for k, a, b in _rows(c))
    return (f"<h2>Comparison with {e(c['previous']['name'])} ({e(c['previous_storage'])})</h2>"
            f"<p{cls}><b>{e(verdict(c))}</b></p><table><tr><th></th><th>previous</th>"
            f"<th>this study</th></tr>{rows}</table>")


def start_knobs(name: str, storage_url: str) -> dict[str, Any] | None:
    """The earlier study's best knobs (None when it has no feasible trial)."""
    doc = best_document(load_other(name, storage_url), "")
    return dict(doc["knobs"]) if doc else None
