"""What a person reads at the end of a study: the console summary."""

from __future__ import annotations

from typing import Any

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
    print()
    print(f"study '{setup.name}': {c['trials']} trials ({c['complete']} complete, "
          f"{c['infeasible']} over the memory limit, {c['pruned']} pruned, {c['failed']} failed)")
    if doc is None:
        print("no trial finished within the memory limit: nothing to export. "
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
    print(f"  {'':{width}s} {'baseline':>14s} {'best (#' + str(doc['best_trial']) + ')':>14s}")
    for label, key, suffix in rows:
        if key is None:
            b = f"{_fmt(base.get('step_time_p10_ms'))}..{_fmt(base.get('step_time_p90_ms'))}"
            a = f"{_fmt(best.get('step_time_p10_ms'))}..{_fmt(best.get('step_time_p90_ms'))}"
        elif key == "padding_share":
            b, a = _share(base.get(key)), _share(best.get(key))
        else:
            b, a = _fmt(base.get(key), suffix), _fmt(best.get(key), suffix)
        print(f"  {label:{width}s} {b:>14s} {a:>14s}")
    for line in confirmation_lines(doc):
        print(f"  {line}")
    training = doc.get("training")
    if training:  # both answers: what this one changes in training, and the other
        print(f"  training: {answer_words(training, str(setup.out_dir))}")
    shapes = shapes_line(doc, setup)
    if shapes:
        print(f"  {shapes}")
    baseline_knobs = setup.space.baseline
    changed = {k: v for k, v in doc["knobs"].items() if baseline_knobs.get(k) != v}
    for line in summary_lines(doc.get("compile")):
        print(f"  {line}")
    print("  changed knobs: " + (", ".join(f"{k}={v}" for k, v in changed.items()) or "none"))
    if doc.get("scaling"):
        print(f"  {doc['scaling']['words']}")
    if doc.get("sharding"):
        print(f"  sharding: {doc['sharding']['words']}")
    for line in numerics_lines(doc.get("numerics") or {}):
        print(f"  {line}")
    wall = (doc.get("study") or {}).get("wall") or {}
    if wall.get("words"):
        print(f"  wall time: {wall['words']}")
    budget = (doc.get("study") or {}).get("time_budget") or {}
    if budget.get("words"):
        print(f"  time budget: {budget['words']}")
    other = ((training or {}).get("other") or {}).get("file")
    print(f"  best config: {setup.out_dir / 'best.yaml'}"
          + (f" (and {setup.out_dir / other})" if other else "")
          + f"   all trials: {setup.out_dir / 'trials.csv'}")


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
