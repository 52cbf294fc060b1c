"""What a person reads at the end of a study: the console summary."""

from __future__ import annotations

from typing import Any

from autotune.core.console import LOG_FILE, detail, fit, say
from autotune.core.tokens import TOKENS
from autotune.results.answers import answer_words, check_figures
from autotune.results.compile_cost import summary_lines
from autotune.results.trust import baseline_noise
from autotune.search.setup import StudySetup
from autotune.search.units import unit_label


def _fmt(v: Any, unit: str = "") -> str:
    return "-" if v is None else f"{v:,.2f}{unit}"


def _share(v: Any) -> str:
    return "-" if v is None else f"{float(v):.1%}"


def unit_key(unit: str) -> str:
    """best.yaml's metrics key of the figure in ``unit``."""
    return "tokens_per_sec" if unit == TOKENS else "samples_per_sec"


def print_summary(doc: dict[str, Any] | None, c: dict[str, int], setup: StudySetup) -> None:
    """The summary in full as details (autotune.log, and the console with -v), then at a
    glance (``brief_lines``), the last lines a person reads."""
    detail_summary(doc, c, setup)
    for line in brief_lines(doc, c, setup):
        say(line)


def detail_summary(doc: dict[str, Any] | None, c: dict[str, int], setup: StudySetup) -> None:
    detail("")
    detail(f"study '{setup.name}': {c['trials']} trials ({c['complete']} complete, "
          f"{c['infeasible']} over the memory limit, {c['pruned']} pruned, {c['failed']} failed)")
    if doc is None:
        detail("no trial finished within the memory limit: nothing to export. "
              f"See {setup.out_dir / 'trials.csv'} for each trial's reason.")
        return
    best, base = doc["metrics"], doc["baseline"] or {}
    # With confirmation, the figures in the study's unit are the re-runs' medians; the step
    # times, memory and compile time stay those of each trial's search window, and say so.
    window = " (search)" if best.get("confirm_runs") else ""
    unit = unit_label(doc)
    rows: list[tuple[str, str | None, str]] = [(unit, unit_key(unit), "")]
    if unit == TOKENS:  # what the tokens/s figure is made of, from the search windows
        rows += [("samples/s" + window, "samples_per_sec", ""),
                 ("padding share" + window, "padding_share", "")]
    rows += [("step time (median)" + window, "step_time_ms", " ms"),
            ("step p10..p90" + window, None, ""), ("peak memory", "peak_memory_gb", " GB"),
            ("compile", "compile_s", " s")]
    width = max(28, *(len(label) for label, _, _ in rows))
    detail(f"  {'':{width}s} {'baseline':>14s} {'best (#' + str(doc['best_trial']) + ')':>14s}")
    for label, key, suffix in rows:
        if key is None:
            b = f"{_fmt(base.get('step_time_p10_ms'))}..{_fmt(base.get('step_time_p90_ms'))}"
            a = f"{_fmt(best.get('step_time_p10_ms'))}..{_fmt(best.get('step_time_p90_ms'))}"
        elif key == "padding_share":
            b, a = _share(base.get(key)), _share(best.get(key))
        else:
            b, a = _fmt(base.get(key), suffix), _fmt(best.get(key), suffix)
        detail(f"  {label:{width}s} {b:>14s} {a:>14s}")
    for line in confirmation_lines(doc):
        detail(f"  {line}")
    training = doc.get("training")
    if training:  # both answers: what this one changes in training, and the other
        detail(f"  training: {answer_words(training, str(setup.out_dir))}")
    shapes = shapes_line(doc, setup)
    if shapes:
        detail(f"  {shapes}")
    baseline_knobs = setup.space.baseline
    changed = {k: v for k, v in doc["knobs"].items() if baseline_knobs.get(k) != v}
    for line in summary_lines(doc.get("compile")):
        detail(f"  {line}")
    detail("  changed knobs: " + (", ".join(f"{k}={v}" for k, v in changed.items()) or "none"))
    if doc.get("scaling"):
        detail(f"  {doc['scaling']['words']}")
    if doc.get("sharding"):
        detail(f"  sharding: {doc['sharding']['words']}")
    for line in numerics_lines(doc.get("numerics") or {}):
        detail(f"  {line}")
    wall = (doc.get("study") or {}).get("wall") or {}
    if wall.get("words"):
        detail(f"  wall time: {wall['words']}")
    budget = (doc.get("study") or {}).get("time_budget") or {}
    if budget.get("words"):
        detail(f"  time budget: {budget['words']}")
    other = ((training or {}).get("other") or {}).get("file")
    detail(f"  best config: {setup.out_dir / 'best.yaml'}"
          + (f" (and {setup.out_dir / other})" if other else "")
          + f"   all trials: {setup.out_dir / 'trials.csv'}")


def brief_lines(doc: dict[str, Any] | None, c: dict[str, int], setup: StudySetup) -> list[str]:
    """The summary in at most a dozen lines of at most 120 characters, in the manner of
    hyperfine's: the trials and the wall time; each answer on one line with its interval and
    its file; what it changes in training with the learning-rate rule; the knobs it changes;
    the numerics check; why the rounds stopped where they did not decide. The report's line
    follows (search/run.py)."""
    study = (doc or {}).get("study") or {}
    got = study.get("wall") or {}  # "brief" since 2026-12-06; an older best.yaml, its words'
    wall = str(got.get("brief") or str(got.get("words") or "").split(" after the first")[0])
    outcomes = {"complete": c["complete"] - c["infeasible"], "pruned": c["pruned"],
                "failed": c["failed"], "over the memory limit": c["infeasible"]}
    said = ", ".join(f"{n} {k}" for k, n in outcomes.items() if n)
    out = ["", fit(f"study '{setup.name}': {c['trials']} trials ({said})"
                   + (f" in {wall}" if wall else ""))]
    if doc is None:
        return [*out, fit(f"  nothing to export: no trial finished within the memory limit; "
                          f"{setup.out_dir / 'trials.csv'} says why for each")]
    folder = setup.out_dir
    section = doc.get("training") or {}
    this, other = section.get("this") or {}, section.get("other")
    unit = unit_label(doc)
    key = unit_key(unit)
    base, best = (doc.get("baseline") or {}).get(key), (doc.get("metrics") or {}).get(key)
    figures = (f": {best:,.1f} vs your {base:,.1f} {unit}" if best is not None and base
               and doc["best_trial"] != section.get("baseline_trial") else "")
    if doc["best_trial"] == section.get("baseline_trial"):
        out.append(fit(f"  {folder / 'best.yaml'}: your own settings (trial {doc['best_trial']}"
                       f"): {str(doc.get('speedup_text')).removeprefix('none shown: ')}"))
    else:
        out.append(fit(f"  {folder / 'best.yaml'}: trial {doc['best_trial']}, "
                       f"{_answer(doc.get('speedup_text'))}{figures}"))
    changes = [str(v).replace(" at the same learning rate", "")
               for v in (this.get("changes") or {}).values()]
    rule = str(this.get("learning_rate") or "").split(" (")[0]
    out.append(fit("  training: " + ("; ".join([*changes, rule] if rule else changes)
                                     if changes else "the same model as yours (speed and "
                                     "numerics knobs only)")))
    if other:
        out.append(fit(f"  {folder / other['file']}: trial {other['trial']}, "
                       f"{_answer(other.get('speedup_text'))}"
                       + ("" if other.get("changes") else ", trains the same model as yours")))
    elif this.get("changes") and section.get("yours"):
        out.append(fit(f"  the same training as yours: {section['yours']}"))
    changed = {k: v for k, v in doc["knobs"].items() if setup.space.baseline.get(k) != v}
    out.append(fit("  changed knobs: " + (", ".join(f"{k}={v}" for k, v in changed.items())
                                          or "none")))
    numerics = doc.get("numerics") or {}
    if numerics.get("words"):
        out.append(fit(f"  numerics: {numerics['words']}"))
    elif this.get("numerics_check"):
        out.append(fit(f"  numerics: {this['numerics_check']}"))
    stopped = str((doc.get("confirmation") or {}).get("stopped") or "")
    if stopped and stopped not in ("decided", "precision"):
        out.append(fit(f"  rounds stopped: {_STOPPED.get(stopped, stopped)}; the exported "
                       "speedup holds within its interval"))
    for extra in ((doc.get("scaling") or {}).get("words"),
                  (doc.get("sharding") or {}).get("words")):
        if extra:
            out.append(fit(f"  {extra}"))
    out.append(fit(f"  all trials: {folder / 'trials.csv'}; every detail: {folder / LOG_FILE} "
                   "(or -v)"))
    return out


def _answer(text: Any) -> str:
    """"1.36x your speed (95% CI 1.20-1.54x, 6 rounds)" from a speedup's words."""
    head, sep, rest = str(text).partition(", ")
    if head.endswith("x") and sep:
        return f"{head} your speed ({rest})"
    return str(text or "no speedup measured")


def numerics_lines(numerics: dict[str, Any]) -> list[str]:
    """The numerics check's outcome (what it refused and what was exported instead), then
    each checked trial's verdict with its figures."""
    out = [f"numerics: {numerics['words']}"] if numerics.get("words") else []
    for n, e in (numerics.get("trials") or {}).items():
        fams = "/".join(e.get("families") or [])
        if not e.get("passed"):
            out.append(f"numerics trial {n}: {e.get('reason') or 'refused'}")
        elif e.get("deviation") is None and e.get("max_rel_dev") is not None:  # older record
            out.append(f"numerics trial {n}: ok, max loss deviation {e['max_rel_dev']:.2%} "
                       f"(tolerance {e['tolerance']:.2%}, {fams})")
        else:
            out.append(f"numerics trial {n}: ok, {check_figures(e)}; {fams}")
    return out


def confirmation_lines(doc: dict[str, Any]) -> list[str]:
    """The speedup with its interval, how it was measured, the tie and the load, in words."""
    best, base = doc["metrics"], doc["baseline"] or {}
    conf = doc.get("confirmation") or {}
    out = []
    if doc.get("speedup_text"):
        out.append(f"speedup: {doc['speedup_text']}")
    if conf.get("rounds"):
        unit = unit_label(doc)
        key = unit_key(unit)
        out.append(
            f"{unit} above are medians over {conf['rounds']} randomized interleaved rounds "
            + ("(the first the search's own windows) " if conf.get("search_round") else "")
            + (f"({conf['race']['rounds']} of them during the search, racing its finalists) "
               if conf.get("race") else "")
            + f"(stopped: {_STOPPED.get(str(conf.get('stopped')), conf.get('stopped'))}"
            + (f"; the exported interval +-{100 * float(conf['half_width']):.1f}%, as measured "
               "then" if conf.get("half_width") is not None else "")
            + "; window noise "
            f"{100 * float(conf.get('window_noise') or 0):.1f}% CV; search figures "
            f"{_fmt(best.get('search_' + key))} and "
            f"{_fmt(base.get('search_' + key))})")
        if conf.get("stopped") != "precision" and baseline_noise(conf):
            out.append(str(baseline_noise(conf)))
        intervals = conf.get("intervals") or {}
        if len(intervals) > 1:
            # The baseline, when it is a finalist, is 1.00x by definition: named, not measured.
            base_n = str(conf.get("baseline_trial"))
            same = {str(n) for n in (conf.get("same_training") or {}).get("finalists") or []}
            out.append("finalists: " + "; ".join(
                f"trial {n} (the baseline)" if n == base_n else
                f"trial {n} {_interval_words(d)}" + (", same training" if n in same else "")
                for n, d in intervals.items()))
    if conf.get("tie_settling"):
        out.append(conf["tie_settling"]["words"])
    if conf.get("tie"):
        out.append(conf["tie"])
    if conf.get("undecided"):
        out.append(conf["undecided"])
    load = (doc.get("contention") or {}).get("windows")
    if load and not load.startswith("no window"):
        out.append(f"load: {load}")
    return out


_STOPPED = {"decided": "the choice decided: one finalist left, or those left within "
                       "study.indifference of each other",
            "precision": "the answers known to the precision asked",
            "budget": "budget spent before the choice was decided",
            "rounds": "round limit", "failed": "every window failed"}


def _interval_words(d: dict[str, Any]) -> str:
    if d.get("ci_low") is None:
        return f"{d['speedup']:.2f}x ({d['rounds']} rounds)"
    return f"{d['speedup']:.2f}x ({d['ci_low']:.2f}-{d['ci_high']:.2f})"


def shapes_line(doc: dict[str, Any], setup: StudySetup) -> str | None:
    """Whether the batches' shapes varied (measured), and what that means for the knobs."""
    shapes = doc.get("input_shapes") or {}
    if not shapes.get("vary"):
        return None
    graphs = len(setup.space.domains["cuda_graphs"].values) > 1
    return (f"batch shapes {shapes['words']}: " + (
        "but the workload declares static shapes (static_shapes=True), so CUDA Graphs were "
        "searched: set static_shapes=False" if graphs else
        "CUDA Graphs and compile's graph-replaying modes stay out; compile follows the shapes "
        "(dynamic after the first recompile)"))
