"""What a person reads at the end of a study: the console summary."""

from __future__ import annotations

from typing import Any

from autotune.results.compile_cost import summary_lines
from autotune.search.setup import StudySetup


def _fmt(v: Any, unit: str = "") -> str:
    return "-" if v is None else f"{v:,.2f}{unit}"


def print_summary(doc: dict[str, Any] | None, c: dict[str, int], setup: StudySetup) -> None:
    print()
    print(f"study '{setup.name}': {c['trials']} trials ({c['complete']} complete, "
          f"{c['infeasible']} over the memory limit, {c['pruned']} pruned, {c['failed']} failed)")
    if doc is None:
        print("no trial finished within the memory limit: nothing to export. "
              f"See {setup.out_dir / 'trials.csv'} for each trial's reason.")
        return
    best, base = doc["metrics"], doc["baseline"] or {}
    # With confirmation, samples/sec are the re-runs' medians; the step times, memory and
    # compile time stay those of each trial's search window, and say so.
    window = " (search)" if best.get("confirm_runs") else ""
    rows = [("samples/sec", "samples_per_sec", ""),
            ("step time (median)" + window, "step_time_ms", " ms"),
            ("step p10..p90" + window, None, ""), ("peak memory", "peak_memory_gb", " GB"),
            ("compile", "compile_s", " s")]
    print(f"  {'':28s} {'baseline':>14s} {'best (#' + str(doc['best_trial']) + ')':>14s}")
    for label, key, unit in rows:
        if key is None:
            b = f"{_fmt(base.get('step_time_p10_ms'))}..{_fmt(base.get('step_time_p90_ms'))}"
            a = f"{_fmt(best.get('step_time_p10_ms'))}..{_fmt(best.get('step_time_p90_ms'))}"
        else:
            b, a = _fmt(base.get(key), unit), _fmt(best.get(key), unit)
        print(f"  {label:28s} {b:>14s} {a:>14s}")
    if best.get("confirm_runs"):
        print(f"  samples/sec above are the medians of re-runs: best {best['confirm_runs']}, "
              f"baseline {base.get('confirm_runs')} (search figures: "
              f"{best.get('search_samples_per_sec'):,.2f} and {base.get('search_samples_per_sec') or 0:,.2f})")
        conf = doc.get("confirmation") or {}
        if len(conf.get("finalists") or []) > 1:
            runs = conf.get("runs") or {}
            print("  finalists re-run (samples/sec): " + "; ".join(
                f"trial {n} {runs.get(str(n))}" for n in conf["finalists"]))
    if doc.get("speedup"):
        print(f"  speedup: {doc['speedup']:.2f}x over the baseline")
    baseline_knobs = setup.space.baseline
    changed = {k: v for k, v in doc["knobs"].items() if baseline_knobs.get(k) != v}
    for line in summary_lines(doc.get("compile")):
        print(f"  {line}")
    print("  changed knobs: " + (", ".join(f"{k}={v}" for k, v in changed.items()) or "none"))
    for n, e in ((doc.get("numerics") or {}).get("trials") or {}).items():
        dev = "-" if e.get("max_rel_dev") is None else f"{e['max_rel_dev']:.2%}"
        print(f"  numerics trial {n}: " + (
            f"ok, max loss deviation {dev} (tolerance {e['tolerance']:.2%}, "
            f"{'/'.join(e['families'])})" if e.get("passed") else e.get("reason") or "refused"))
    print(f"  best config: {setup.out_dir / 'best.yaml'}   all trials: {setup.out_dir / 'trials.csv'}")
